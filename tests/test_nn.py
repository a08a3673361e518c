"""frost.nn against PyTorch with the same weights: forward outputs and gradients (input and
parameters), BatchNorm's running statistics, plus the Module system and error messages."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import frost.nn as nn

torch.set_default_dtype(torch.float32)
RTOL, ATOL = 1e-5, 1e-5


def close(a, b, rtol=RTOL, atol=ATOL):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)


def t(a):
    return torch.tensor(np.asarray(a), requires_grad=True)


def nhwc_to_nchw(a):
    return np.moveaxis(np.asarray(a), -1, 1)


def conv_weight_to_torch(w):  # (*k, in/g, out) -> (out, in/g, *k)
    w = np.asarray(w)
    return np.moveaxis(np.moveaxis(w, -1, 0), -1, 1)


def compare(layer, torch_layer, params, x, *, channels_first=False, train=False, key=None):
    """Copy `params` {frost field: (torch attr, to_torch)} into torch_layer, then compare the output
    and the gradients of <output, cotangent> w.r.t. the input and every copied parameter."""
    with torch.no_grad():
        for field, (attr, to_torch) in params.items():
            getattr(torch_layer, attr).copy_(torch.tensor(to_torch(getattr(layer, field))))
    torch_layer.train(train)
    torch_layer.zero_grad()
    rng = np.random.default_rng(1)

    def frost_loss(layer, x, cot):
        y, _ = nn.apply(layer, x, train=train, key=key)
        return jnp.sum(y * cot), y

    y_shape = jax.eval_shape(lambda m, x: nn.apply(m, x, train=train, key=key)[0], layer, x).shape
    cot = rng.standard_normal(y_shape).astype(np.float32)
    floating = jnp.issubdtype(x.dtype, jnp.floating)
    argnums = (0, 1) if floating else 0
    (_, y), grads = jax.jit(jax.value_and_grad(frost_loss, argnums=argnums, has_aux=True))(
        layer, x, cot
    )
    layer_grads, x_grad = grads if floating else (grads, None)

    to_t = nhwc_to_nchw if channels_first else np.asarray
    tx = t(to_t(x)) if floating else torch.tensor(np.asarray(x))
    ty = torch_layer(tx)
    ty_np = ty.detach().numpy()
    close(y, np.moveaxis(ty_np, 1, -1) if channels_first else ty_np)
    (ty * torch.tensor(to_t(cot))).sum().backward()
    if floating:
        close(x_grad, np.moveaxis(tx.grad.numpy(), 1, -1) if channels_first else tx.grad.numpy())
    for field, (attr, to_torch) in params.items():
        close(to_torch(getattr(layer_grads, field)), getattr(torch_layer, attr).grad.numpy())


def rand(shape, seed=0):
    return jnp.asarray(np.random.default_rng(seed).standard_normal(shape).astype(np.float32))


IDENT = np.asarray
TRANSPOSE = lambda w: np.asarray(w).T  # noqa: E731


def test_linear(key):
    layer = nn.Linear(5, 7, key=key)
    compare(
        layer,
        torch.nn.Linear(5, 7),
        {"weight": ("weight", TRANSPOSE), "bias": ("bias", IDENT)},
        rand((3, 4, 5)),
    )


def test_linear_without_bias(key):
    layer = nn.Linear(5, 7, use_bias=False, key=key)
    assert layer.bias is None
    compare(
        layer, torch.nn.Linear(5, 7, bias=False), {"weight": ("weight", TRANSPOSE)}, rand((3, 5))
    )


@pytest.mark.parametrize(
    "kw",
    [
        dict(kernel_size=3, stride=1, padding=1),
        dict(kernel_size=3, stride=2, padding=1, dilation=2),
        dict(kernel_size=(3, 1), stride=(2, 1), padding=((1, 0), (0, 0)), groups=2),
        dict(kernel_size=1, stride=2, use_bias=False),
    ],
)
def test_conv2d(key, kw):
    layer = nn.Conv2d(4, 6, key=key, **kw)
    tkw = {k: v for k, v in kw.items() if k not in ("use_bias", "padding")}
    pad = kw.get("padding", 0)
    # asymmetric: pad the torch input by hand
    if isinstance(pad, tuple) and isinstance(pad[0], tuple):
        torch_conv = torch.nn.Conv2d(4, 6, bias=kw.get("use_bias", True), **tkw)
        (l0, h0), (l1, h1) = pad
        torch_layer = torch.nn.Sequential(torch.nn.ZeroPad2d((l1, h1, l0, h0)), torch_conv)
        torch_layer.weight, torch_layer.bias = torch_conv.weight, torch_conv.bias
    else:
        torch_layer = torch.nn.Conv2d(4, 6, padding=pad, bias=kw.get("use_bias", True), **tkw)
    params = {"weight": ("weight", conv_weight_to_torch)}
    if layer.bias is not None:
        params["bias"] = ("bias", IDENT)
    compare(layer, torch_layer, params, rand((2, 9, 8, 4)), channels_first=True)


def test_conv1d(key):
    layer = nn.Conv1d(3, 5, 4, stride=2, padding=2, dilation=1, key=key)
    compare(
        layer,
        torch.nn.Conv1d(3, 5, 4, stride=2, padding=2),
        {"weight": ("weight", conv_weight_to_torch), "bias": ("bias", IDENT)},
        rand((2, 11, 3)),
        channels_first=True,
    )


def test_conv_same_padding_keeps_shape(key):
    assert nn.Conv2d(2, 3, 5, padding="SAME", key=key)(rand((1, 7, 7, 2))).shape == (1, 7, 7, 3)


def _bn_params():
    return {"weight": ("weight", IDENT), "bias": ("bias", IDENT)}


def test_batchnorm_train_steps_running_stats_and_eval(key):
    layer = nn.BatchNorm(3, momentum=0.2).replace(weight=rand((3,), 5), bias=rand((3,), 6))
    torch_layer = torch.nn.BatchNorm2d(3, momentum=0.2)
    with torch.no_grad():
        torch_layer.weight.copy_(torch.tensor(np.asarray(layer.weight)))
        torch_layer.bias.copy_(torch.tensor(np.asarray(layer.bias)))
    torch_layer.train()
    step = jax.jit(lambda m, x: nn.apply(m, x, train=True))
    for i in range(4):
        x = rand((4, 5, 5, 3), 10 + i) * 3.0 + 1.0
        y, layer = step(layer, x)
        ty = torch_layer(torch.tensor(nhwc_to_nchw(x)))
        close(y, np.moveaxis(ty.detach().numpy(), 1, -1), atol=1e-5)
    close(layer.running_mean, torch_layer.running_mean.numpy())
    close(layer.running_var, torch_layer.running_var.numpy())
    # Forward and gradients in both modes, with the trained running statistics.
    stats = {"running_mean": ("running_mean", IDENT), "running_var": ("running_var", IDENT)}
    with torch.no_grad():
        for f, (a, fn) in stats.items():
            getattr(torch_layer, a).copy_(torch.tensor(fn(getattr(layer, f))))
    compare(
        layer, torch_layer, _bn_params(), rand((4, 5, 5, 3), 21), channels_first=True, train=False
    )
    compare(
        layer, torch_layer, _bn_params(), rand((4, 5, 5, 3), 20), channels_first=True, train=True
    )


def test_batchnorm1d_on_features():
    layer = nn.BatchNorm(6)
    compare(layer, torch.nn.BatchNorm1d(6), _bn_params(), rand((8, 6)), train=True)


def test_batchnorm_state_threads_through_nested_modules(key):
    class Block(nn.Module):
        body: nn.Sequential
        head: nn.Linear

        def __call__(self, x):
            return self.head(self.body(x).mean(axis=(1, 2)))

    k1, k2, k3 = jax.random.split(key, 3)
    model = Block(
        nn.Sequential(
            nn.Conv2d(2, 4, 3, key=k1),
            nn.BatchNorm(4),
            nn.ReLU(),
            nn.Sequential(nn.Conv2d(4, 4, 1, key=k2), nn.BatchNorm(4)),
        ),
        nn.Linear(4, 2, key=k3),
    )
    x = rand((3, 6, 6, 2))
    y_eval = model(x)
    _, new = nn.apply(model, x, train=True)
    bn1, bn2 = new.body.layers[1], new.body.layers[3].layers[1]
    for bn in (bn1, bn2):
        assert not np.allclose(bn.running_mean, 0.0)
    # Only buffers changed; the old model is untouched; eval mode does not record.
    close(new.head.weight, model.head.weight)
    assert np.allclose(model.body.layers[1].running_mean, 0.0)
    y2, same = nn.apply(model, x, train=False)
    assert same is model
    close(y2, y_eval)
    # update_buffers copies exactly the running statistics.
    merged = nn.update_buffers(jax.tree.map(lambda a: a * 0, model), new)
    close(merged.body.layers[1].running_var, bn1.running_var)
    close(merged.head.weight, 0 * model.head.weight)
    mask = nn.trainable_mask(model)
    assert mask.body.layers[1].weight and not mask.body.layers[1].running_mean


def test_layernorm(key):
    layer = nn.LayerNorm((4, 5)).replace(weight=rand((4, 5), 1), bias=rand((4, 5), 2))
    compare(
        layer,
        torch.nn.LayerNorm((4, 5)),
        {"weight": ("weight", IDENT), "bias": ("bias", IDENT)},
        rand((3, 4, 5)),
    )


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_rmsnorm(eps):
    layer = nn.RMSNorm(6, eps=eps).replace(weight=rand((6,), 3))
    compare(layer, torch.nn.RMSNorm(6, eps=eps), {"weight": ("weight", IDENT)}, rand((2, 3, 6)))


def test_groupnorm():
    layer = nn.GroupNorm(3, 6).replace(weight=rand((6,), 1), bias=rand((6,), 2))
    compare(
        layer,
        torch.nn.GroupNorm(3, 6),
        {"weight": ("weight", IDENT), "bias": ("bias", IDENT)},
        rand((2, 4, 5, 6)),
        channels_first=True,
    )


def test_embedding(key):
    layer = nn.Embedding(11, 4, key=key)
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 11, (3, 5)), jnp.int32)
    compare(layer, torch.nn.Embedding(11, 4), {"weight": ("weight", IDENT)}, ids)


@pytest.mark.parametrize(
    "frost_pool, torch_pool",
    [
        (nn.MaxPool(2), torch.nn.MaxPool2d(2)),
        (nn.MaxPool(3, stride=2, padding=1), torch.nn.MaxPool2d(3, stride=2, padding=1)),
        (nn.AvgPool(3, stride=2, padding=1), torch.nn.AvgPool2d(3, stride=2, padding=1)),
        (nn.AvgPool(2), torch.nn.AvgPool2d(2)),
        (
            nn.GlobalAvgPool(),
            torch.nn.Sequential(torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten()),
        ),
    ],
)
def test_pooling(frost_pool, torch_pool):
    x = rand((2, 7, 6, 3))
    if isinstance(frost_pool, nn.GlobalAvgPool):
        y = frost_pool(x)
        close(y, torch_pool(torch.tensor(nhwc_to_nchw(x))).numpy())
        return
    compare(frost_pool, torch_pool, {}, x, channels_first=True)


@pytest.mark.parametrize(
    "frost_act, torch_act",
    [
        (nn.ReLU(), torch.nn.ReLU()),
        (nn.GELU(), torch.nn.GELU()),
        (nn.SiLU(), torch.nn.SiLU()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Lambda(lambda x: nn.softmax(x, axis=-1)), torch.nn.Softmax(-1)),
        (nn.Lambda(lambda x: nn.log_softmax(x, axis=-1)), torch.nn.LogSoftmax(-1)),
    ],
)
def test_activations(frost_act, torch_act):
    compare(frost_act, torch_act, {}, rand((3, 8)))


def test_sequential_matches_torch(key):
    k1, k2 = jax.random.split(key)
    model = nn.Sequential(
        nn.Linear(4, 8, key=k1), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3, key=k2)
    )
    ref = torch.nn.Sequential(
        torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.LayerNorm(8), torch.nn.Linear(8, 3)
    )
    with torch.no_grad():
        for i in (0, 3):
            ref[i].weight.copy_(torch.tensor(np.asarray(model[i].weight).T))
            ref[i].bias.copy_(torch.tensor(np.asarray(model[i].bias)))
    x = rand((5, 4))
    close(model(x), ref(torch.tensor(np.asarray(x))).detach().numpy())
    grads = jax.grad(lambda m: jnp.sum(m(x) ** 2))(model)
    (ref(torch.tensor(np.asarray(x))) ** 2).sum().backward()
    close(grads[0].weight.T, ref[0].weight.grad.numpy())
    close(grads[3].bias, ref[3].bias.grad.numpy())


# --- dropout (no torch equivalent of its random stream: check its definition instead) ---


def test_dropout_eval_identity_and_train_statistics(key):
    drop = nn.Dropout(0.25)
    x = jnp.ones((200, 100))
    assert drop(x) is x
    y, _ = nn.apply(drop, x, train=True, key=key)
    kept = np.asarray(y) != 0
    assert abs(kept.mean() - 0.75) < 0.01
    close(np.asarray(y)[kept], 1 / 0.75)
    y2, _ = nn.apply(drop, x, train=True, key=key)
    close(y, y2)  # same key, same mask
    y3, _ = nn.apply(drop, x, train=True, key=jax.random.key(1))
    assert not np.array_equal(np.asarray(y3), np.asarray(y))
    # an explicit key drops, even outside apply
    y4 = jax.jit(lambda x, k: nn.Dropout(0.25)(x, key=k))(x, key)
    assert abs((np.asarray(y4) != 0).mean() - 0.75) < 0.01 and np.isclose(
        np.asarray(y4).max(), 1 / 0.75
    )


def test_batchnorm_statistics_of_a_layer_not_in_the_model_raise(key):
    bn = nn.BatchNorm(3)
    x = jax.random.normal(key, (8, 4, 4, 3))
    with pytest.raises(ValueError, match="not part of the model given to apply"):
        # a copy made inside the pass
        nn.apply(lambda x: bn.replace(weight=bn.weight * 1.0)(x), x, train=True)


def test_embedding_refuses_out_of_range_ids_and_never_wraps(key):
    emb = nn.Embedding(10, 4, key=key)
    with pytest.raises(ValueError, match=r"ids must be in \[0, 10\), got values from -1 to 3"):
        emb(jnp.array([0, 3, -1]))
    with pytest.raises(ValueError, match="from 0 to 10"):
        emb(jnp.array([0, 10]))
    out = jax.jit(emb)(jnp.array([1, -1, 10]))  # traced: the bad rows are NaN, not rows 9 and 0
    np.testing.assert_array_equal(out[0], emb.weight[1])
    assert np.isnan(np.asarray(out[1:])).all()


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(kernel_size=0),
        dict(stride=0),
        dict(groups=0),
        dict(dilation=0),
        dict(padding=-1),
        dict(kernel_size=(3,)),
    ],
)
def test_conv_refuses_impossible_configurations(kwargs, key):
    args = dict(in_channels=4, out_channels=4, kernel_size=3) | kwargs
    with pytest.raises(ValueError, match="must be"):
        nn.Conv(**args, key=key)


def test_two_dropouts_get_different_keys(key):
    model = nn.Sequential(nn.Dropout(0.5), nn.Lambda(lambda x: x * 1.0))
    x = jnp.ones((2, 1000))
    a, _ = nn.apply(nn.Dropout(0.5), x, train=True, key=key)
    b, _ = nn.apply(
        nn.Sequential(nn.Dropout(0.5), nn.Dropout(0.0), nn.Dropout(0.5)), x, train=True, key=key
    )
    assert model is not None and not np.array_equal(np.asarray(a) != 0, np.asarray(b) != 0)


def test_dropout_missing_key_says_so():
    with pytest.raises(ValueError, match="needs a PRNG key"):
        nn.apply(nn.Dropout(0.5), jnp.ones((2, 3)), train=True)
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\)"):
        nn.Dropout(1.0)


# --- the Module system ---


class MLP(nn.Module):
    layers: tuple
    activation: object = nn.static(jax.nn.relu)

    def __init__(self, sizes, *, key, activation=jax.nn.relu):
        keys = jax.random.split(key, len(sizes) - 1)
        self.layers = tuple(nn.Linear(a, b, key=k) for a, b, k in zip(sizes[:-1], sizes[1:], keys))
        self.activation = activation

    def __call__(self, x):
        for layer in self.layers[:-1]:
            x = self.activation(layer(x))
        return self.layers[-1](x)


def test_jit_grad_vmap_take_a_model_directly(key):
    model = MLP([3, 8, 2], key=key)
    x = rand((4, 3))
    close(jax.jit(lambda m, x: m(x))(model, x), model(x))
    grads = jax.grad(lambda m: jnp.sum(m(x) ** 2))(model)
    assert isinstance(grads, MLP) and grads.layers[0].weight.shape == (3, 8)
    ensemble = jax.vmap(lambda k: MLP([3, 8, 2], key=k))(jax.random.split(key, 5))
    assert ensemble.layers[0].weight.shape == (5, 3, 8)
    ys = jax.vmap(lambda m: m(x))(ensemble)  # (5, 4, 2)
    close(ys[2], jax.tree.map(lambda a: a[2], ensemble)(x))
    doubled = jax.tree.map(lambda a: 2 * a, model)
    close(doubled.layers[1].bias, 2 * model.layers[1].bias)


def test_flatten_unflatten_round_trip_and_statics_in_treedef(key):
    model = MLP([3, 4, 2], key=key)
    leaves, treedef = jax.tree.flatten(model)
    assert len(leaves) == 4 and all(isinstance(v, jax.Array) for v in leaves)
    back = jax.tree.unflatten(treedef, leaves)
    assert type(back) is MLP and back.activation is jax.nn.relu and back.layers[0].in_features == 3
    close(back(rand((2, 3))), model(rand((2, 3))))
    other = MLP([3, 4, 2], key=key, activation=jax.nn.tanh)
    assert jax.tree.structure(other) != treedef


def test_no_recompilation_when_only_values_change(key):
    traces = []

    @jax.jit
    def f(model, x):
        traces.append(1)
        return model(x)

    x = rand((2, 3))
    f(MLP([3, 4, 2], key=key), x)
    f(MLP([3, 4, 2], key=jax.random.key(7)), x)
    f(jax.tree.map(lambda a: a + 1, MLP([3, 4, 2], key=key)), x)
    assert len(traces) == 1
    f(MLP([3, 4, 2], key=key, activation=jax.nn.tanh), x)  # configuration change: retrace
    assert len(traces) == 2


def test_frozen_replace_repr_param_count(key):
    layer = nn.Linear(3, 4, key=key)
    with pytest.raises(dataclasses.FrozenInstanceError, match=r"model.replace\(weight=...\)"):
        layer.weight = jnp.zeros((3, 4))
    new = layer.replace(bias=jnp.zeros(4))
    close(new.bias, np.zeros(4))
    assert not np.allclose(layer.bias, 0.0)
    with pytest.raises(TypeError, match="no field"):
        layer.replace(colour=1)
    text = repr(nn.Sequential(layer, nn.BatchNorm(4)))
    assert "float32[3, 4]" in text and "in_features=3" in text and "running_mean=float32[4]" in text
    assert str(float(layer.weight[0, 0]))[:6] not in text
    assert layer.param_count() == 16
    assert nn.BatchNorm(4).param_count() == 8  # running statistics are buffers, not parameters


def test_missing_key_says_so():
    with pytest.raises(TypeError, match="key"):
        nn.Linear(3, 4)
    with pytest.raises(TypeError, match="key"):
        nn.Conv2d(3, 4, 3)


def test_pytorch_default_init_bounds(key):
    w = nn.Linear(100, 50, key=key).weight
    assert abs(float(jnp.max(jnp.abs(w))) - 0.1) < 0.005  # U(-1/sqrt(100), 1/sqrt(100))
    c = nn.Conv2d(8, 16, 3, key=key).weight
    assert float(jnp.max(jnp.abs(c))) <= 1 / np.sqrt(72) + 1e-7
    tn = nn.init.truncated_normal(key, (10000,), std=0.02, lower=-0.04, upper=0.04)
    assert float(jnp.max(jnp.abs(tn))) <= 0.04 and abs(float(jnp.std(tn)) - 0.02 * 0.88) < 0.001
    xu = nn.init.xavier_uniform(key, (30, 70))
    assert float(jnp.max(jnp.abs(xu))) <= np.sqrt(6 / 100) + 1e-7
    kn = nn.init.kaiming_normal(key, (500, 400))
    assert abs(float(jnp.std(kn)) - np.sqrt(2 / 500)) < 0.002


# --- error messages ---


@pytest.mark.parametrize(
    "layer, x, pattern",
    [
        (
            lambda k: nn.Linear(3, 4, key=k),
            jnp.ones((2, 5)),
            r"Linear\(in_features=3, out_features=4\) expected input \(\.\.\., 3\), got shape \(2, "
            r"5\)",
        ),
        (
            lambda k: nn.Linear(3, 4, key=k),
            jnp.ones((2, 3), jnp.int32),
            r"Linear.*floating dtype, got shape \(2, 3\) and dtype int32",
        ),
        (
            lambda k: nn.Linear(3, 4, key=k),
            jnp.ones((2, 3), jnp.bfloat16),
            r"Linear.*dtype float32.*got .*bfloat16",
        ),
        (
            lambda k: nn.Conv2d(3, 8, 3, key=k),
            jnp.ones((2, 8, 8, 4)),
            r"Conv\(in_channels=3.*expected input \(N, H, W, 3\), got shape \(2, 8, 8, 4\)",
        ),
        (
            lambda k: nn.Conv2d(3, 8, 3, key=k),
            jnp.ones((8, 8, 3)),
            r"Conv.*expected input \(N, H, W, 3\), got shape \(8, 8, 3\)",
        ),
        (
            lambda k: nn.BatchNorm(6),
            jnp.ones((2, 4, 4, 5)),
            r"BatchNorm\(num_features=6.*\(N, \.\.\., 6\), got shape \(2, 4, 4, 5\)",
        ),
        (
            lambda k: nn.LayerNorm(6),
            jnp.ones((2, 5)),
            r"LayerNorm.*\(\.\.\., 6\), got shape \(2, 5\)",
        ),
        (lambda k: nn.GroupNorm(2, 6), jnp.ones((2, 3, 4)), r"GroupNorm.*got shape \(2, 3, 4\)"),
        (
            lambda k: nn.Embedding(10, 4, key=k),
            jnp.ones((2, 3)),
            r"Embedding.*integer ids.*float32",
        ),
        (lambda k: nn.MaxPool(2), jnp.ones((4, 4, 3)), r"MaxPool.*got shape \(4, 4, 3\)"),
    ],
)
def test_shape_errors_name_layer_and_shapes(key, layer, x, pattern):
    with pytest.raises(ValueError, match=pattern):
        layer(key)(x)


def test_error_inside_sequential_names_inner_layer(key):
    model = nn.Sequential(nn.Linear(3, 4, key=key), nn.Linear(5, 2, key=key))
    with pytest.raises(
        ValueError, match=r"Linear\(in_features=5, out_features=2\).*got shape \(1, 4\)"
    ):
        model(jnp.ones((1, 3)))


def test_bad_configuration_errors(key):
    with pytest.raises(ValueError, match="groups=3 must divide"):
        nn.Conv2d(4, 6, 3, groups=3, key=key)
    with pytest.raises(ValueError, match="padding='FULL'"):
        nn.Conv2d(4, 6, 3, padding="FULL", key=key)
    with pytest.raises(ValueError, match="num_groups=4 must divide num_channels=6"):
        nn.GroupNorm(4, 6)
