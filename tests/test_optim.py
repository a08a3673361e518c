"""frost.optim against optax, torch.optim and references written from the papers.

Runs under conftest's strict dtype promotion. optax itself mixes Python floats with int32 counts,
which strict mode refuses, so optax (and the interop chains) run under standard promotion.
"""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
import optax.contrib
import pytest
import torch
from jax.flatten_util import ravel_pytree

import frost.optim as fo

torch.set_num_threads(1)
STEPS = 20


# Random inputs come from numpy: each eager jax.random call would compile for its shape, and
# compilation is most of this file's run time.


def normal(seed, shape, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def make_params(seed=0, dtype=np.float32):
    """A nested PyTree with a wide and a tall matrix (Muon), a vector and a scalar."""
    shapes = {"dense": {"w": (4, 6), "b": (6,)}, "head": [{"w": (5, 3)}, {"s": ()}]}
    leaves, treedef = jax.tree.flatten(shapes, is_leaf=lambda x: isinstance(x, tuple))
    return treedef.unflatten(
        [jnp.asarray(normal((seed, i), s, dtype)) for i, s in enumerate(leaves)]
    )


def make_grads(seed, params, steps=STEPS):
    """A numpy tree of `steps` random gradients for `params`, stacked on a leading axis."""
    leaves, treedef = jax.tree.flatten(params)
    return treedef.unflatten(
        [normal((seed, i), (steps,) + p.shape, p.dtype) for i, p in enumerate(leaves)]
    )


def run(opt, params, grads, standard=False, states=False):
    """Apply `opt` to a sequence of gradients in one jitted scan; return the params after each step
    (and the states after each step)."""

    def body(carry, g):
        p, s = carry
        u, s = opt.update(g, s, p)
        p = fo.apply_updates(p, u)
        return (p, s), (p, s)

    with jax.numpy_dtype_promotion("standard") if standard else contextlib.nullcontext():
        _, (trajectory, state_trajectory) = jax.jit(
            lambda p, gs: jax.lax.scan(body, (p, opt.init(p)), gs)
        )(params, grads)
    return (trajectory, state_trajectory) if states else trajectory


def assert_trees_close(a, b, rtol=1e-5, atol=1e-6):
    assert jax.tree.structure(a) == jax.tree.structure(b)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
        np.testing.assert_allclose(
            np.asarray(x, np.float32), np.asarray(y, np.float32), rtol=rtol, atol=atol
        )


# --- the same numbers as optax -------------------------------------------------------------
# Each entry: (frost optimizer, optax optimizer, whether the frost side needs standard promotion
# because an optax transform sits inside it).

OPTAX_TABLE = {
    "sgd_nesterov_wd": lambda: (
        fo.sgd(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        optax.chain(optax.add_decayed_weights(0.01), optax.sgd(0.05, 0.9, nesterov=True)),
        False,
    ),
    "adam_l2": lambda: (
        fo.adam(1e-2, weight_decay=0.01),
        optax.chain(optax.add_decayed_weights(0.01), optax.adam(1e-2)),
        False,
    ),
    "adamw_masked": lambda: (
        fo.adamw(1e-2, weight_decay=0.1, mask=fo.decay_mask),
        optax.adamw(1e-2, weight_decay=0.1, mask=fo.decay_mask),
        False,
    ),
    "adamw_warmup_cosine": lambda: (
        fo.adamw(fo.warmup_cosine(1e-2, 5, STEPS, init_value=1e-3)),
        optax.adamw(optax.warmup_cosine_decay_schedule(1e-3, 1e-2, 5, STEPS)),
        False,
    ),
    "lion": lambda: (fo.lion(1e-3, weight_decay=0.1), optax.lion(1e-3, weight_decay=0.1), False),
    # optax.contrib.muon bias-corrects its momentum: m / (1 - β^t). Without Nesterov, Newton-Schulz
    # starts by dividing by the Frobenius norm, so that scale cancels (up to eps) and the two agree.
    # With Nesterov, optax mixes differently corrected terms (β m/(1-β^(t+1)) + (1-β) g/(1-β^t));
    # Frost follows Jordan's β m + (1-β) g, tested against his reference in test_muon_nesterov_*.
    # Non-2-D leaves go to AdamW in both.
    "muon_heavy_ball": lambda: (
        fo.muon(
            0.02, nesterov=False, weight_decay=0.1, adam_learning_rate=3e-3, adam_weight_decay=0.01
        ),
        optax.contrib.muon(
            0.02, nesterov=False, weight_decay=0.1, adam_learning_rate=3e-3, adam_weight_decay=0.01
        ),
        False,
    ),
    "accumulate": lambda: (
        fo.accumulate(fo.adamw(1e-2), 3),
        optax.MultiSteps(optax.adamw(1e-2), 3),
        False,
    ),
    # apply_every sums k gradients and emits them every k-th step; the Adam after it steps on
    # every step, zeros in between (unlike accumulate, which steps its inner optimizer once).
    "apply_every_then_adam": lambda: (
        fo.chain(fo.apply_every(3), fo.scale_by_adam(), fo.scale_by_learning_rate(1e-2)),
        optax.chain(optax.apply_every(3), optax.scale_by_adam(), optax.scale(-1e-2)),
        False,
    ),
    # optax's names: trace(decay=...), and Lion's sign variants (mode=, smooth_beta=)
    "trace_decay": lambda: (
        fo.chain(fo.trace(decay=0.8, nesterov=True), fo.scale_by_learning_rate(0.05)),
        optax.chain(optax.trace(decay=0.8, nesterov=True), optax.scale(-0.05)),
        False,
    ),
    "lion_smooth": lambda: (
        fo.chain(fo.scale_by_lion(mode="smooth", smooth_beta=2.0), fo.scale_by_learning_rate(1e-2)),
        optax.chain(optax.scale_by_lion(mode="smooth", smooth_beta=2.0), optax.scale(-1e-2)),
        False,
    ),
    "lion_refined": lambda: (
        fo.chain(fo.scale_by_lion(0.5, mode="refined"), fo.scale_by_learning_rate(1e-2)),
        optax.chain(optax.scale_by_lion(0.5, mode="refined"), optax.scale(-1e-2)),
        False,
    ),
    # optax transforms inside a Frost chain...
    "frost_chain_of_optax": lambda: (
        fo.chain(
            optax.clip_by_global_norm(1.0),
            fo.scale_by_adam(),
            optax.add_decayed_weights(0.1),
            fo.scale_by_learning_rate(1e-2),
        ),
        optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-2, weight_decay=0.1)),
        True,
    ),
    # ... and Frost transforms inside optax.chain.
    "optax_chain_of_frost": lambda: (
        optax.chain(
            fo.clip(0.5),
            fo.trace(0.9, nesterov=True),
            fo.clip_by_global_norm(2.0),
            optax.scale(-0.05),
        ),
        optax.chain(
            optax.clip(0.5),
            optax.trace(0.9, nesterov=True),
            optax.clip_by_global_norm(2.0),
            optax.scale(-0.05),
        ),
        True,
    ),
}


@pytest.mark.parametrize("name", OPTAX_TABLE)
def test_matches_optax(name):
    ours, theirs, standard = OPTAX_TABLE[name]()
    params = make_params()
    grads = make_grads(1, params)
    mine = run(ours, params, grads, standard=standard)
    assert_trees_close(mine, run(theirs, params, grads, standard=True))
    assert not np.allclose(mine["dense"]["w"][-1], params["dense"]["w"])  # it moved


# --- the same numbers as torch.optim -------------------------------------------------------


def torch_run(make_opt, params, grads):
    flat = {k: torch.tensor(np.asarray(v), requires_grad=True) for k, v in params.items()}
    opt = make_opt(list(flat.values()))
    trajectory = {k: [] for k in flat}
    for i in range(STEPS):
        for k, t in flat.items():
            t.grad = torch.tensor(np.asarray(grads[k][i]))
        opt.step()
        for k, t in flat.items():
            trajectory[k].append(t.detach().numpy().copy())
    return {k: np.stack(v) for k, v in trajectory.items()}


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_matches_torch(name):
    ours, theirs = {
        "sgd": (
            fo.sgd(0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
            lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9, nesterov=True, weight_decay=0.01),
        ),
        "adamw": (
            fo.adamw(1e-2, b1=0.8, b2=0.99, eps=1e-8, weight_decay=0.1),
            lambda ps: torch.optim.AdamW(
                ps, lr=1e-2, betas=(0.8, 0.99), eps=1e-8, weight_decay=0.1
            ),
        ),
    }[name]
    params = {"w": jnp.asarray(normal(0, (4, 3))), "b": jnp.asarray(normal(2, (3,)))}
    grads = make_grads(1, params)
    assert_trees_close(run(ours, params, grads), torch_run(theirs, params, grads))


# --- Muon against Jordan's reference (written here in torch, float32 instead of bfloat16) -----


def jordan_muon(weights, grads, lr, beta, wd, ns_steps=5):
    """github.com/KellerJordan/Muon: torch layout (out, in), so W_torch = W.T."""

    def zeropower_via_newtonschulz5(g):
        a, b, c = (3.4445, -4.7750, 2.0315)
        x = g.mT if g.size(-2) > g.size(-1) else g
        x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
        for _ in range(ns_steps):
            gram = x @ x.mT
            x = a * x + (b * gram + c * gram @ gram) @ x
        return x.mT if g.size(-2) > g.size(-1) else x

    out = {}
    for name, w in weights.items():
        p, momentum, trajectory = (
            torch.tensor(np.asarray(w).T.copy()),
            torch.zeros(w.shape[::-1]),
            [],
        )
        for g in grads[name]:
            grad = torch.tensor(np.asarray(g).T.copy())
            momentum.lerp_(grad, 1 - beta)
            update = grad.lerp_(momentum, beta)  # nesterov
            update = (
                zeropower_via_newtonschulz5(update) * max(1, grad.size(-2) / grad.size(-1)) ** 0.5
            )
            p.mul_(1 - lr * wd)
            p.add_(update, alpha=-lr)
            trajectory.append(p.numpy().T.copy())
        out[name] = np.stack(trajectory)
    return out


def test_muon_nesterov_matches_jordan_reference():
    params = {"wide": jnp.asarray(normal(0, (3, 5))), "tall": jnp.asarray(normal(2, (6, 2)))}
    grads = make_grads(1, params)
    mine = run(fo.muon(0.02, momentum=0.9, weight_decay=0.1), params, grads)
    assert_trees_close(
        mine, jordan_muon(params, grads, lr=0.02, beta=0.9, wd=0.1), rtol=1e-4, atol=1e-5
    )
    # The orthogonalised update has singular values near 1 (Jordan's iteration: about 0.7 to 1.2).
    s = np.linalg.svd(np.asarray(jax.jit(fo.newton_schulz)(grads["tall"][0])), compute_uv=False)
    assert s.min() > 0.6 and s.max() < 1.25


@pytest.mark.parametrize("nesterov", [True, False])
def test_muon_with_bias_correction_matches_optax_contrib_muon(nesterov):
    """Frost's default follows Jordan's reference (above); bias_correction=True is optax's rule."""
    params = {"wide": jnp.asarray(normal(0, (3, 5))), "tall": jnp.asarray(normal(2, (6, 2)))}
    grads = make_grads(1, params)
    mine = run(fo.muon(0.02, momentum=0.9, nesterov=nesterov, bias_correction=True), params, grads)
    theirs = run(optax.contrib.muon(0.02, beta=0.9, nesterov=nesterov), params, grads, True)
    assert_trees_close(mine, theirs, rtol=1e-4, atol=1e-5)
    plain = run(fo.muon(0.02, momentum=0.9, nesterov=nesterov), params, grads)
    steps = lambda tree: np.diff(tree["wide"], axis=0)  # noqa: E731  the updates of steps 2, 3, ...
    # Nesterov's mix weights m and g unevenly; without it the correction only rescales m, which the
    # orthogonalisation's normalisation removes.
    assert np.allclose(steps(plain), steps(theirs), rtol=1e-2) != nesterov


# --- Sophia against Algorithm 3 of Liu et al. 2023 -------------------------------------------
# optax.contrib.sophia differs from the paper in three ways, so it is not the reference here:
# it bias-corrects the momentum (m / (1 - b1^t)); it refreshes h *after* computing the update, so
# each update uses the previous refresh (the paper refreshes on steps t = 1, k+1, ... and then
# updates with the new h); and its Hutchinson probe is Rademacher rather than Gaussian.


def sophia_loss(p):
    x = p["x"]
    return (
        0.5 * jnp.sum(jnp.array([0.3, 1.0, 4.0, 20.0]) * x * x)
        + 0.25 * jnp.sum(x**4)
        + jnp.sum(p["y"] ** 2) * x[0]
    )


def exact_hessian_diag(loss, params):
    flat, unravel = ravel_pytree(params)
    return unravel(jnp.diag(jax.hessian(lambda v: loss(unravel(v)))(flat)))


def sophia_reference(params, lr, b1, b2, gamma, eps, wd, k, steps):
    """Algorithm 3, in numpy on the flattened parameters, with the exact Hessian diagonal as ĥ."""
    theta, unravel = ravel_pytree(params)
    theta = np.asarray(theta, np.float64)
    grad_fn = jax.jit(lambda v: ravel_pytree(jax.grad(sophia_loss)(unravel(v)))[0])
    hess_fn = jax.jit(lambda v: ravel_pytree(exact_hessian_diag(sophia_loss, unravel(v)))[0])
    grad, hess = (
        lambda v, f=f: np.asarray(f(jnp.asarray(v, jnp.float32)), np.float64)
        for f in (grad_fn, hess_fn)
    )
    m, h, trajectory, clipped = 0.0, 0.0, [], []
    for t in range(1, steps + 1):
        m = b1 * m + (1 - b1) * grad(theta)
        if t % k == 1:
            h = b2 * h + (1 - b2) * hess(theta)
        ratio = m / np.maximum(gamma * h, eps)
        clipped.append(np.abs(ratio) > 1)
        theta = theta - lr * wd * theta - lr * np.clip(ratio, -1, 1)
        trajectory.append(theta)
    return np.stack(trajectory), np.stack(clipped)


def test_sophia_matches_paper_reference():
    params = {"x": jnp.array([2.0, -1.5, 1.0, 0.5]), "y": jnp.array([0.3, -0.7])}
    hp = dict(b1=0.9, b2=0.8, gamma=0.5, eps=1e-12, weight_decay=0.1, interval=3)
    opt = fo.sophia(0.1, **hp)

    def body(carry, _):
        p, s = carry
        s = fo.update_hessian(s, lambda: exact_hessian_diag(sophia_loss, p))
        u, s = opt.update(jax.grad(sophia_loss)(p), s, p)
        p = fo.apply_updates(p, u)
        return (p, s), ravel_pytree(p)[0]

    (_, state), mine = jax.jit(lambda p: jax.lax.scan(body, (p, opt.init(p)), length=STEPS))(params)
    ref, clipped = sophia_reference(
        params,
        0.1,
        hp["b1"],
        hp["b2"],
        hp["gamma"],
        hp["eps"],
        hp["weight_decay"],
        hp["interval"],
        STEPS,
    )
    assert 0.1 < clipped.mean() < 0.9  # both branches of the clip are exercised
    np.testing.assert_allclose(mine, ref, rtol=2e-5, atol=2e-6)
    # last refresh: step 19 = 6k + 1
    assert int(state[0].h_step) == 18 and int(state[0].count) == STEPS


def test_update_hessian_refreshes_once_per_step_under_accumulation():
    params = {"x": jnp.ones(3)}
    opt = fo.accumulate(fo.sophia(0.1, b2=0.5, interval=2), 2)
    state = opt.init(params)

    def estimate():
        return {"x": jnp.full(3, 4.0)}

    @jax.jit
    def step(state):
        state = fo.update_hessian(state, estimate)
        return opt.update({"x": jnp.ones(3)}, state, params)[1]

    for _ in range(4):  # micro-steps 0..3 = optimizer steps 0, 0, 1, 1: only step 0 refreshes
        state = step(state)
    sophia_state = fo.find_states(state, fo.SophiaState)[0]
    # b2·0 + (1-b2)·4, folded in once
    np.testing.assert_array_equal(sophia_state.h["x"], jnp.full(3, 2.0))
    assert (int(sophia_state.count), int(sophia_state.h_step)) == (2, 0)
    with pytest.raises(ValueError, match="no Sophia state"):
        fo.update_hessian(fo.adamw(0.1).init(params), estimate)


def test_hutchinson_is_unbiased(key):
    params = {"x": jnp.array([0.5, -1.0, 2.0, 0.3]), "y": jnp.array([1.5, 0.2])}
    flat, unravel = ravel_pytree(params)
    flat_h = jax.jit(jax.hessian(lambda v: sophia_loss(unravel(v))))(flat)
    n = 4000
    samples = jax.jit(jax.vmap(lambda k: fo.hutchinson(sophia_loss, params, key=k)))(
        jax.random.split(key, n)
    )
    # Var[u_i (Hu)_i] = 2 H_ii² + Σ_{j≠i} H_ij² for u ~ N(0, I): allow 5 standard errors.
    var = np.sum(np.asarray(flat_h) ** 2, axis=1) + np.diag(np.asarray(flat_h)) ** 2
    mean = ravel_pytree(jax.tree.map(lambda s: s.mean(0), samples))[0]
    assert np.all(np.abs(mean - np.diag(np.asarray(flat_h))) < 5 * np.sqrt(var / n))


def test_gauss_newton_bartlett_estimates_the_gauss_newton_diagonal(key):
    x = jnp.asarray(normal(0, (6, 3)))  # (B, in)
    params = {"w": jnp.asarray(normal(1, (3, 4))), "b": jnp.zeros(4)}
    logits_fn = lambda p: x @ p["w"] + p["b"][None]  # noqa: E731                   (B, V)
    flat, unravel = ravel_pytree(params)

    @jax.jit
    def gauss_newton_diag(flat):
        jac = jax.jacobian(lambda v: logits_fn(unravel(v)))(flat)  # (B, V, P)
        probs = jax.nn.softmax(logits_fn(unravel(flat)))  # (B, V)
        # Hessian of the mean cross-entropy in the logits: blockdiag(diag(p_b) - p_b p_bᵀ) / B.
        blocks = jax.vmap(lambda pb: jnp.diag(pb) - jnp.outer(pb, pb))(probs) / x.shape[0]
        return jnp.einsum("bvp,bvw,bwp->p", jac, blocks, jac)

    exact = gauss_newton_diag(flat)
    n = 4000
    samples = jax.jit(
        jax.vmap(lambda k: ravel_pytree(fo.gauss_newton_bartlett(logits_fn, params, key=k))[0])
    )(jax.random.split(key, n))  # (n, P)
    stderr = samples.std(0) / np.sqrt(n)
    assert np.all(np.abs(samples.mean(0) - exact) < 5 * stderr + 1e-6)
    assert np.all(samples >= 0)


# --- the optimizer table: every named optimizer converges, compiles once, keeps bfloat16 ------

OPTIMIZERS = {
    "sgd": lambda lr: fo.sgd(lr, momentum=0.9, nesterov=True),
    "adam": lambda lr: fo.adam(lr),
    "adamw": lambda lr: fo.adamw(lr, weight_decay=1e-4, mask=fo.decay_mask),
    "lion": lambda lr: fo.lion(lr, weight_decay=0.0),
    "sophia": lambda lr: fo.sophia(lr, gamma=0.05, weight_decay=0.0, interval=2),
    "muon": lambda lr: fo.muon(lr),
    "accumulated_adamw_ema": lambda lr: fo.accumulate(
        fo.chain(fo.clip_by_global_norm(10.0), fo.adamw(lr), fo.ema_params(0.5)), 2
    ),
}
TARGET = make_params(42)
CURVATURE = jax.tree.map(lambda t: jnp.linspace(0.5, 2.0, t.size).reshape(t.shape), TARGET)


def quadratic(p):
    return sum(
        jnp.sum(c.astype(x.dtype) * (x - t.astype(x.dtype)) ** 2)
        for x, t, c in zip(*(jax.tree.leaves(z) for z in (p, TARGET, CURVATURE)))
    )


def rosenbrock(p):
    x, y = p["xy"][0], p["xy"][1]
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def make_step(opt, loss, trace_count=None, **extra_args):
    def step(params, state, key):
        if trace_count is not None:
            trace_count.append(1)
        if fo.find_states(state, fo.SophiaState):
            state = fo.update_hessian(state, lambda: fo.hutchinson(loss, params, key=key))
        grads = jax.tree.map(jnp.conj, jax.grad(loss)(params))  # conj: for complex params
        u, state = opt.update(grads, state, params, **extra_args)
        return fo.apply_updates(params, u), state

    return step


# (loss, initial params, learning rate, steps); a cosine decay to zero lets the sign-like methods
# settle.
CONVERGENCE = {
    "quadratic": (quadratic, make_params, 0.1, 300),
    "rosenbrock": (rosenbrock, lambda: {"xy": jnp.zeros(2)}, 0.1, 1000),
}
ROSENBROCK_LR = {
    "sgd": 2e-3,
    "lion": 0.03,
}  # the valley wall's curvature (~1000) bounds a gradient step


@pytest.mark.parametrize("problem", CONVERGENCE)
@pytest.mark.parametrize("name", OPTIMIZERS)
def test_converges(name, problem, key):
    loss, init, lr, steps = CONVERGENCE[problem]
    lr = ROSENBROCK_LR.get(name, lr) if problem == "rosenbrock" else lr
    opt = OPTIMIZERS[name](fo.cosine_decay(lr, steps))
    step = make_step(opt, loss)

    def body(carry, k):
        return step(*carry, k), None

    params = init()
    (final, _), _ = jax.jit(lambda p, ks: jax.lax.scan(body, (p, opt.init(p)), ks))(
        params, jax.random.split(key, steps)
    )
    assert float(loss(final)) < 1e-3 * float(loss(params))


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_complex_params_converge_or_are_refused_at_init(name, key):
    """Complex parameters (optax's complex parabola, |z - t|²): the optimizers whose rule has a
    complex form (|g|² moments) reach the optimum; Lion's sign, Muon's orthogonalisation and
    Sophia's Hessian estimate have none, and refuse them at init."""
    target = jnp.asarray(normal(7, (2, 3)) + 1j * normal(8, (2, 3)), jnp.complex64)

    def loss(p):
        return jnp.sum(jnp.real((p["z"] - target) * jnp.conj(p["z"] - target)))

    params = {"z": jnp.zeros((2, 3), jnp.complex64)}
    opt = OPTIMIZERS[name](fo.cosine_decay(0.1, 300))
    if name in ("lion", "sophia", "muon"):
        with pytest.raises(ValueError, match=f"{name} does not support complex parameters"):
            opt.init(params)
        return
    step = make_step(opt, loss)
    (final, _), _ = jax.jit(
        lambda p, ks: jax.lax.scan(lambda c, k: (step(*c, k), None), (p, opt.init(p)), ks)
    )(params, jax.random.split(key, 300))
    np.testing.assert_allclose(final["z"], target, atol=3e-2)


# Each optimizer's own function and numeric hyper-parameters, for optax.inject_hyperparams (the
# integer loop bounds static, as optax does for adafactor).
INJECTED = {
    "sgd": (fo.sgd, {"learning_rate": 0.1, "momentum": 0.9, "weight_decay": 1e-2}, ()),
    "adam": (fo.adam, {"learning_rate": 0.1, "weight_decay": 1e-2}, ()),
    "adamw": (fo.adamw, {"learning_rate": 0.1, "weight_decay": 0.1}, ()),
    "lion": (fo.lion, {"learning_rate": 0.1, "weight_decay": 0.1}, ()),
    "sophia": (fo.sophia, {"learning_rate": 0.1, "gamma": 0.05, "interval": 2}, ("interval",)),
    "muon": (fo.muon, {"learning_rate": 0.02, "weight_decay": 0.1}, ("ns_steps",)),
}


@pytest.mark.parametrize("name", INJECTED)
def test_inject_hyperparams_and_extra_args(name, key):
    """optax.inject_hyperparams(frost.optim.X)(...) takes the same two steps as X(...) (its
    hyper-parameters traced), and update passes over an extra keyword argument it does not use."""
    make, kwargs, static = INJECTED[name]
    plain, injected = make(**kwargs), optax.inject_hyperparams(make, static_args=static)(**kwargs)
    params, keys = make_params(0), jax.random.split(key, 2)
    results = []
    for opt in (plain, injected):
        step = jax.jit(make_step(opt, quadratic, unexpected_extra_arg=1))
        p, s = step(params, opt.init(params), keys[0])
        results.append(step(p, s, keys[1]))
    (p_plain, s_plain), (p_inj, s_inj) = results
    assert_trees_close(p_inj, p_plain, rtol=1e-5, atol=1e-6)
    assert_trees_close(s_inj.inner_state, s_plain, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", OPTIMIZERS)
def test_one_compilation_bf16_stays_bf16_lr_settable(name, key):
    traces = []
    opt = OPTIMIZERS[name](0.01)
    step = jax.jit(make_step(opt, quadratic, traces))
    params = make_params(0, jnp.bfloat16)
    keys = jax.random.split(key, 3)
    state0 = opt.init(params)
    p1, s1 = step(params, state0, keys[0])
    p2, s2 = step(p1, s1, keys[1])
    lrs = {
        k: float(v) / 2 for k, v in fo.get_hyperparams(s2).items() if k.endswith("learning_rate")
    }
    p3, s3 = step(p2, fo.set_hyperparams(s2, **lrs), keys[2])
    assert len(traces) == 1
    assert all(x.dtype == jnp.bfloat16 for x in jax.tree.leaves(p3))
    assert jax.tree.map(lambda a: (a.dtype, a.shape), s3) == jax.tree.map(
        lambda a: (a.dtype, a.shape), state0
    )
    assert not np.array_equal(
        np.asarray(p3["dense"]["w"], np.float32), np.asarray(params["dense"]["w"], np.float32)
    )


# --- hyper-parameters in the state ---------------------------------------------------------


def test_changing_learning_rate_in_state_takes_effect_without_recompiling():
    traces = []
    opt = fo.adamw(0.1, weight_decay=0.1)

    @jax.jit
    def step(params, state, grads):
        traces.append(1)
        u, state = opt.update(grads, state, params)
        return fo.apply_updates(params, u), state

    params = make_params()
    grads = make_grads(1, params, steps=3)
    g = [jax.tree.map(lambda x, i=i: x[i], grads) for i in range(3)]
    state = opt.init(params)
    params, state = step(params, state, g[0])
    params, state = step(params, state, g[1])
    full, _ = step(params, state, g[2])
    half_state = fo.set_hyperparams(state, learning_rate=0.05)
    half, new_state = step(params, half_state, g[2])
    assert len(traces) == 1
    assert float(fo.get_hyperparams(new_state)["learning_rate"]) == pytest.approx(0.05)
    # AdamW's update (weight decay included) is proportional to the learning rate.
    delta = lambda a: jax.tree.map(lambda x, p: np.asarray(x) - np.asarray(p), a, params)  # noqa: E731
    assert_trees_close(
        delta(half), jax.tree.map(lambda d: 0.5 * d, delta(full)), rtol=1e-5, atol=1e-7
    )
    # The same state with the same value gives bit-identical numbers.
    again, _ = step(params, fo.set_hyperparams(state, learning_rate=0.1), g[2])
    assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(again), jax.tree.leaves(full)))


def test_hyperparameter_names_and_errors():
    params = make_params()
    names = set(
        fo.get_hyperparams(fo.muon(0.02, weight_decay=0.1, adam_weight_decay=0.1).init(params))
    )
    assert {
        "muon/learning_rate",
        "adam/learning_rate",
        "muon/weight_decay",
        "adam/weight_decay",
        "momentum",
        "b1",
        "b2",
    } == names
    assert {"muon/learning_rate", "adam/learning_rate", "momentum", "b1", "b2"} == set(
        fo.get_hyperparams(fo.muon(0.02).init(params))
    )  # no weight decay: no transform, no hyper-parameter
    with pytest.raises(KeyError, match="muon/learning_rate"):
        fo.set_hyperparams(fo.muon(0.02).init(params), learning_rate=0.1)
    state = fo.set_hyperparams(fo.muon(0.02).init(params), **{"adam/learning_rate": 3e-4})
    assert float(fo.get_hyperparams(state)["adam/learning_rate"]) == pytest.approx(3e-4)
    assert float(fo.get_hyperparams(state)["muon/learning_rate"]) == pytest.approx(0.02)
    scheduled = fo.sgd(fo.linear(1.0, 0.0, 10), momentum=0.9).init(params)
    assert float(fo.get_hyperparams(scheduled)["momentum"]) == pytest.approx(0.9)
    with pytest.raises(ValueError, match="schedule"):
        fo.set_hyperparams(scheduled, learning_rate=0.1)


def test_zero_weight_decay_and_momentum_build_nothing_and_need_no_params():
    params, grads = make_params(0), make_params(1)
    opt = fo.sgd(0.1)  # optax's rule: zero momentum and zero decay are identity(), no buffers
    state = opt.init(params)
    assert jax.tree.leaves(state) == [] or all(np.ndim(x) == 0 for x in jax.tree.leaves(state))
    updates, _ = opt.update(grads, state)  # no params needed
    assert_trees_close(updates, jax.tree.map(lambda g: -0.1 * g, grads), rtol=1e-6, atol=0)
    with pytest.raises(ValueError, match="needs the parameters"):
        fo.sgd(0.1, weight_decay=1e-4).update(grads, fo.sgd(0.1, weight_decay=1e-4).init(params))
    assert "momentum" not in fo.get_hyperparams(state) and "momentum" in fo.get_hyperparams(
        fo.sgd(0.1, momentum=0.9).init(params)
    )


@pytest.mark.parametrize("mu_dtype, expected", [(None, jnp.float32), (jnp.bfloat16, jnp.bfloat16)])
def test_moments_stay_float32_for_bfloat16_params_unless_mu_dtype_says(mu_dtype, expected):
    params = make_params(0, jnp.bfloat16)
    opt = fo.adamw(1e-2, mu_dtype=mu_dtype)
    state = opt.init(params)
    adam = fo.find_states(state, fo.AdamState)[0]
    assert {x.dtype for x in jax.tree.leaves(adam.mu)} == {jnp.dtype(expected)}
    assert {x.dtype for x in jax.tree.leaves(adam.nu)} == {jnp.dtype(jnp.float32)}
    updates, state = opt.update(make_params(1, jnp.bfloat16), state, params)
    assert {x.dtype for x in jax.tree.leaves(updates)} == {jnp.dtype(jnp.bfloat16)}
    # the same arithmetic as float32 params, up to the bfloat16 rounding of the update
    wide = lambda tree: jax.tree.map(lambda x: x.astype(jnp.float32), tree)  # noqa: E731
    ref, _ = fo.adamw(1e-2).update(
        wide(make_params(1, jnp.bfloat16)), fo.adamw(1e-2).init(wide(params)), wide(params)
    )
    if mu_dtype is None:
        assert_trees_close(
            jax.tree.map(lambda u: u.astype(jnp.float32), updates), ref, rtol=1e-2, atol=1e-6
        )


def test_masks_and_partition_on_a_module(key):
    from frost.nn import Linear

    model = Linear(3, 4, key=key)
    opt = fo.sgd(0.1, weight_decay=0.5, mask=fo.decay_mask)  # decay the weight matrix, not the bias
    u, _ = opt.update(jax.tree.map(jnp.zeros_like, model), opt.init(model), model)
    np.testing.assert_allclose(u.weight, -0.1 * 0.5 * model.weight, rtol=1e-6)
    np.testing.assert_array_equal(u.bias, jnp.zeros(4))
    labels = jax.tree.map(lambda p: "frozen" if p.ndim == 1 else "train", model)
    opt = fo.partition({"train": fo.sgd(0.1), "frozen": fo.scale(0.0)}, labels)
    u, _ = opt.update(jax.tree.map(jnp.ones_like, model), opt.init(model), model)
    np.testing.assert_allclose(u.weight, jnp.full((3, 4), -0.1), rtol=1e-6)
    np.testing.assert_array_equal(u.bias, jnp.zeros(4))
    with pytest.raises(ValueError, match="no transform for label"):
        fo.partition({"train": fo.sgd(0.1)}, labels).init(model)


# --- EMA of the parameters -----------------------------------------------------------------


def test_ema_params():
    opt = fo.chain(fo.sgd(0.1, momentum=0.5), fo.ema_params(0.8))
    params = {"w": jnp.asarray(normal(0, (3, 2)))}
    grads = make_grads(1, params, steps=5)
    state, update = opt.init(params), jax.jit(opt.update)
    p, ema = params, np.asarray(params["w"])
    for i in range(5):
        u, state = update({"w": grads["w"][i]}, state, p)
        p = fo.apply_updates(p, u)
        ema = 0.8 * ema + 0.2 * np.asarray(p["w"])
    np.testing.assert_allclose(fo.find_states(state, fo.EmaState)[0].ema["w"], ema, rtol=1e-6)


# --- schedules -----------------------------------------------------------------------------

SCHEDULES = {
    "constant": (fo.constant(0.3), optax.constant_schedule(0.3)),
    "linear": (fo.linear(1.0, 0.1, 30, begin=10), optax.linear_schedule(1.0, 0.1, 30, 10)),
    "cosine_decay": (
        fo.cosine_decay(2.0, 40, alpha=0.1),
        optax.cosine_decay_schedule(2.0, 40, 0.1),
    ),
    "warmup_cosine": (
        fo.warmup_cosine(1.0, 10, 50, init_value=0.1, end_value=0.01),
        optax.warmup_cosine_decay_schedule(0.1, 1.0, 10, 50, 0.01),
    ),
    "one_cycle": (fo.one_cycle(50, 1.0), optax.cosine_onecycle_schedule(50, 1.0)),
}


@pytest.mark.parametrize("name", SCHEDULES)
def test_schedules_match_optax(name):
    ours, theirs = SCHEDULES[name]
    steps = jnp.arange(60)
    with jax.numpy_dtype_promotion("standard"):
        expected = np.array([float(theirs(int(s))) for s in steps])
    np.testing.assert_allclose(jax.jit(jax.vmap(ours))(steps), expected, rtol=1e-5, atol=1e-7)


def test_warmup_stable_decay():
    s = fo.warmup_stable_decay(1.0, 2, 3, 2)
    np.testing.assert_allclose(
        jax.jit(jax.vmap(s))(jnp.arange(9)), [0, 0.5, 1, 1, 1, 1, 0.5, 0, 0], atol=1e-7
    )
    s = fo.warmup_stable_decay(2.0, 4, 10, 6, init_value=0.2, end_value=0.5)
    assert [float(s(i)) for i in (0, 2, 4, 13, 14, 17, 20, 99)] == pytest.approx(
        [0.2, 1.1, 2, 2, 2, 1.25, 0.5, 0.5]
    )
