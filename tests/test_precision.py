"""frost.nn.precision: bf16 forward passes against fp32, float32 statistics in the norms, and
dynamic loss scaling where plain fp16 gradients underflow."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from frost import nn
from frost.config import UsageError
from frost.models import gpt, resnet
from frost.nn import precision
from frost.optim import all_finite, scaling

FP32, BF16 = precision.policy("fp32"), precision.policy("bf16")


def build(make, key):
    """make(key) compiled without XLA's backend optimisation: CPU compiles random-number code ~10x
    faster so."""
    return jax.jit(make, compiler_options={"xla_backend_optimization_level": 0})(key)


def relative(a, b) -> float:
    """max |a - b| over max |b|."""
    return float(jnp.max(jnp.abs(a.astype(jnp.float32) - b)) / jnp.max(jnp.abs(b)))


def xent(logits, labels):
    logp = jax.nn.log_softmax(logits.astype(jnp.float32))
    return -jnp.mean(jnp.take_along_axis(logp, labels[..., None], axis=-1))


@jax.jit
def gpt_run(model, ids):  # -> fp32 and bf16 (logits, loss)
    out = {}
    for name, policy in (("fp32", FP32), ("bf16", BF16)):
        logits = policy.cast_to_output(policy.cast_to_compute(model)(ids[:, :-1]))
        out[name] = logits, xent(logits, ids[:, 1:])
    return out


@jax.jit
def resnet_run(model, x):  # -> fp32 and bf16 (logits, model with updated BatchNorm statistics)
    out = {}
    for name, policy in (("fp32", FP32), ("bf16", BF16)):
        logits, stats = nn.apply(
            policy.cast_to_compute(model), policy.cast_to_compute(x), train=True
        )
        out[name] = policy.cast_to_output(logits), policy.cast_to_param(stats)
    return out


def test_bf16_forward_of_gpt_and_resnet_tracks_fp32(key):
    # Tolerances: bf16 keeps 8 bits of mantissa (relative rounding 2^-9 = 0.2%); over a few
    # layers the logits stay within 2% of the largest fp32 logit and the loss within 0.5%.
    model = build(lambda k: gpt.GPT(128, 64, 2, 4, 32, rotary=True, key=k), key)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 128, (4, 33)), jnp.int32)
    out = gpt_run(model, ids)
    assert out["bf16"][0].dtype == jnp.float32
    assert relative(out["bf16"][0], out["fp32"][0]) < 0.02
    assert abs(float(out["bf16"][1]) / float(out["fp32"][1]) - 1) < 0.005

    net = build(
        lambda k: resnet.ResNet(resnet.BasicBlock, (1, 1), (8, 16), 10, 3, False, "B", key=k), key
    )
    x = jnp.asarray(np.random.default_rng(1).standard_normal((8, 16, 16, 3)), jnp.float32)
    out = resnet_run(net, x)
    assert relative(out["bf16"][0], out["fp32"][0]) < 0.02
    bn16, bn32 = out["bf16"][1].blocks[-1].bn2, out["fp32"][1].blocks[-1].bn2
    assert bn16.running_var.dtype == bn16.weight.dtype == jnp.float32  # buffers never leave float32
    assert relative(bn16.running_var, bn32.running_var) < 0.01


def test_norm_statistics_are_float32_for_bf16_inputs():
    # A large mean against a unit spread: centering in bf16 loses the signal, float32 statistics
    # keep it.
    x = jnp.asarray(100 + np.random.default_rng(2).standard_normal((16, 256)), jnp.bfloat16)
    reference = (
        x.astype(jnp.float32) - jnp.mean(x.astype(jnp.float32), -1, keepdims=True)
    ) / jnp.std(x.astype(jnp.float32), -1, keepdims=True)  # fp32 of the same (rounded) input
    naive = (x - jnp.mean(x, -1, keepdims=True)) * jax.lax.rsqrt(
        jnp.var(x, -1, keepdims=True) + 1e-5
    )  # all bf16
    assert relative(naive, reference) > 0.03
    layer_norm = BF16.cast_to_compute(nn.LayerNorm(256))
    assert layer_norm(x).dtype == jnp.bfloat16 and relative(layer_norm(x), reference) < 0.005
    batch_norm = BF16.cast_to_compute(nn.BatchNorm(16))  # channels last: normalise x.T's rows
    y, stats = nn.apply(batch_norm, x.T, train=True)
    assert relative(y.T, reference) < 0.005
    np.testing.assert_allclose(
        stats.running_mean, 0.1 * np.mean(np.asarray(x, np.float32), -1), rtol=1e-5
    )


def test_policy_casts_floats_only_and_gradients_arrive_in_float32(key):
    net = build(
        lambda k: resnet.ResNet(resnet.BasicBlock, (1,), (4,), 3, 1, False, "A", key=k), key
    )
    tree = {"model": net, "step": jnp.int32(3), "key": jax.random.key(1)}
    cast = BF16.cast_to_compute(tree)
    assert (
        cast["model"].head.weight.dtype == jnp.bfloat16
        and cast["model"].stem[1].running_mean.dtype == jnp.float32
    )
    assert cast["step"].dtype == jnp.int32 and jnp.issubdtype(
        cast["key"].dtype, jax.dtypes.prng_key
    )
    x = jnp.asarray(np.random.default_rng(3).standard_normal((2, 8, 8, 1)), jnp.float32)
    grads = jax.jit(
        jax.grad(
            lambda m: jnp.sum(BF16.cast_to_output(BF16.cast_to_compute(m)(BF16.cast_to_compute(x))))
        )
    )(net)
    assert {g.dtype for g in jax.tree.leaves(grads)} == {jnp.dtype(jnp.float32)}
    with pytest.raises(UsageError, match="--precision 'fp8': choose one of fp32, bf16, fp16"):
        precision.policy("fp8")


# A regression whose gradients are ~1e-9, below float16's smallest subnormal (6e-8), as small
# gradients of a large network are; the step size compensates, so fp32 training is ordinary.
TINY, LR = 2.0**-30, 0.2 * 2.0**30
FP16 = precision.policy("fp16")


def regression(seed=4):
    rng = np.random.default_rng(seed)
    x = jnp.asarray(rng.standard_normal((64, 8)), jnp.float32)
    return (
        x,
        x @ jnp.asarray(rng.standard_normal(8), jnp.float32),
        jnp.asarray(0.1 * rng.standard_normal(8), jnp.float32),
    )


def regression_loss(w, x, y, policy):
    pred = policy.cast_to_output(policy.cast_to_compute(x) @ policy.cast_to_compute(w))
    return TINY * jnp.mean(jnp.square(pred - y))


@jax.jit
def train(w, x, y, scaler):
    """50 SGD steps with fp32, plain fp16 and loss-scaled fp16 gradients; returns the final
    losses."""

    def fp32_step(w, _):
        return w - LR * jax.grad(regression_loss)(w, x, y, FP32), None

    def fp16_step(w, _):
        return w - LR * jax.grad(regression_loss)(w, x, y, FP16), None

    def scaled_step(carry, _):
        w, s = carry
        grads = scaling.unscale(
            s, jax.grad(lambda w: scaling.scale_loss(s, regression_loss(w, x, y, FP16)))(w)
        )
        finite = all_finite(grads)
        return (jnp.where(finite, w - LR * grads, w), scaling.adjust(s, finite, period=10)), None

    w32, _ = jax.lax.scan(fp32_step, w, None, 50)
    w16, _ = jax.lax.scan(fp16_step, w, None, 50)
    (ws, s), _ = jax.lax.scan(scaled_step, (w, scaler), None, 50)
    loss = lambda w: regression_loss(w, x, y, FP32) / TINY  # noqa: E731
    return loss(w), loss(w32), loss(w16), loss(ws), s


def test_fp16_gradients_underflow_and_loss_scaling_recovers():
    x, y, w = regression()
    plain = jax.grad(regression_loss)(w, x, y, FP16)
    assert not np.any(np.asarray(plain)) and np.all(
        np.abs(jax.grad(regression_loss)(w, x, y, FP32)) > 1e-10
    )
    start, fp32, fp16, scaled, s = train(w, x, y, scaling.loss_scale(2.0**24))
    assert fp32 < 1e-3 * start  # fp32 converges
    assert fp16 == start  # fp16 never moves: every gradient is zero
    assert scaled < 1e-3 * start and int(s.skipped) == 0


def test_loss_scale_skips_overflowing_steps_then_grows_back():
    x, y, w = regression()
    # overflows fp16 at first
    start, fp32, _, scaled, s = train(w, x, y, scaling.loss_scale(2.0**52))
    assert int(s.skipped) >= 5 and scaled < 1e-2 * start
    state = scaling.loss_scale(4.0)
    for finite in [True] * 10 + [False, True]:
        state = scaling.adjust(state, jnp.bool_(finite), period=10)
    assert (float(state.scale), int(state.good_steps), int(state.skipped)) == (
        4.0,
        1,
        1,
    )  # x2 after 10, /2 once


# --- in the training step (frost.train.loop.train_step(precision=...)) -------------------------


def step_losses(model, batch, precision_name, steps=50):
    """Losses of `steps` AdamW steps of frost's training step at `precision_name`, in one scan."""
    from frost import optim
    from frost.train import loop

    opt = optim.adamw(3e-3)
    opt = scaling.dynamic_scaling(opt) if precision_name == "fp16" else opt
    step = loop.train_step(opt, precision=precision_name)

    def body(carry, key):
        model, state = carry
        model, state, metrics = step(model, state, batch, key)
        return (model, state), (
            metrics["loss"],
            metrics["finite"],
            metrics.get("overflow_skipped", 0),
        )

    run = jax.jit(
        lambda m, s: jax.lax.scan(body, (m, s), jax.random.split(jax.random.key(0), steps))[1]
    )
    return [np.asarray(a) for a in run(model, opt.init(model))]


@pytest.mark.parametrize("name", ["gpt", "resnet"])
def test_bf16_and_fp16_training_steps_track_fp32_over_50_steps(name, key):
    rng = np.random.default_rng(0)
    if name == "gpt":
        # small models: compiling the three 50-step programs is most of the time (one block: 31 s ->
        # 18 s)
        model = build(lambda k: gpt.GPT(64, 32, 1, 2, 16, rotary=True, key=k), key)
        ids = jnp.asarray(rng.integers(0, 64, (8, 17)), jnp.int32)
        batch = (ids[:, :-1], ids[:, 1:])
    else:
        model = build(
            lambda k: resnet.ResNet(resnet.BasicBlock, (1,), (8,), 3, 1, False, "A", key=k), key
        )
        batch = (
            jnp.asarray(rng.standard_normal((16, 8, 8, 1)), jnp.float32),
            jnp.asarray(rng.integers(0, 3, 16), jnp.int32),
        )
    fp32, _, _ = step_losses(model, batch, "fp32")
    assert fp32[-1] < 0.8 * fp32[0]  # it learns
    for low in ("bf16", "fp16"):
        losses, finite, skipped = step_losses(model, batch, low)
        assert finite.all() and int(skipped[-1]) == 0
        # stated tolerance: every loss within 3% (bf16) / 1% (fp16) of the fp32 run's, relative to
        # the first
        tol = 0.03 if low == "bf16" else 0.01
        assert np.max(np.abs(losses - fp32)) < tol * fp32[0], (low, losses[-5:], fp32[-5:])
