"""Small composable gradient transformations; optimizers.py chains them into named optimizers.

Each transform is a `GradientTransformation(init, update)` with one NamedTuple state. Its update
rule is written for one array (`rule(g, m, ...)`) and lifted to trees with `jax.tree.map`.
Hyper-parameters a run may change (learning rate, weight decay, momentum, betas) are float32
scalars in the state (see base.get_hyperparams); constants (eps, step counts) are closed over.
State buffers (moments, traces) are at least float32 unless `mu_dtype` says otherwise (optax's
name; `accumulator_dtype` for `trace`; `state_dtype`, both buffers, for Sophia): a bfloat16
gradient is cast up to its buffer's dtype, the rule runs there, and the update is cast back, so
bfloat16 parameters train with float32 moments and still get bfloat16 updates.
Tests run with strict dtype promotion, so every mixed-dtype operation is an explicit cast.
Complex parameters work as in optax: squares are |g|² = g·conj(g) (Adam's second moment, the
global norm), and the training step conjugates complex gradients before the update.
"""

from collections.abc import Callable
from typing import Literal, NamedTuple

import jax
import jax.numpy as jnp
from jax.typing import DTypeLike

from frost.optim.base import (
    GradientTransformation,
    MaskedNode,
    MaskOrFn,
    ScalarOrSchedule,
    call_update,
    find_states,
    hyperparam,
    identity,
    map_states,
    masked,
    stateless,
)
from frost.tree import PyTree, where

Updates = PyTree  # a tree shaped like the params


def _cast(h, x):
    return h.astype(x.dtype)


def wide(dtype: jnp.dtype) -> jnp.dtype:
    """`dtype`, but at least float32: bfloat16 and float16 (and narrower) give float32.

    Arguments:
        dtype: a NumPy dtype (`x.dtype`).

    Returns:
        `dtype` if it has 4 bytes or more, else float32.
    """
    return dtype if dtype.itemsize >= 4 else jnp.float32


def _zeros(tree, dtype=None):
    """A state buffer shaped like `tree`: in `dtype`, else in the leaf's dtype but at least float32
    (so bfloat16 parameters get float32 moments; pass mu_dtype=jnp.bfloat16 to halve them)."""
    return jax.tree.map(lambda p: jnp.zeros(p.shape, dtype or wide(p.dtype)), tree)


def _real_zeros(name, tree, dtype=None):
    """_zeros for a rule with no complex form (a sign, an orthogonalisation, a Hessian estimate):
    complex parameters are refused here, at init, with one error."""
    if any(jnp.iscomplexobj(p) for p in jax.tree.leaves(tree)):
        raise ValueError(f"{name} does not support complex parameters; adam, adamw and sgd do")
    return _zeros(tree, dtype)


def _lift(rule, u, state, *fields, **changes):
    """Apply a per-array `rule(g, *leaves of the state's fields)` -> (update, *new leaves) to
    matching leaves; return the update tree and `state` with those fields (and `changes`) replaced.
    g is cast to the first field's dtype, and the update back to g's."""

    def run(g, *s):
        out = rule(g.astype(s[0].dtype), *s)
        return (out[0].astype(g.dtype), *out[1:])

    out = jax.tree.map(run, u, *(getattr(state, f) for f in fields))
    trees = [jax.tree.map(lambda _, o, i=i: o[i], u, out) for i in range(len(fields) + 1)]
    return trees[0], state._replace(**dict(zip(fields, trees[1:])), **changes)


def is_off(x: float | jax.Array | None) -> bool:
    """Whether a weight decay or momentum builds no transform (optax's rule).

    Arguments:
        x: the hyper-parameter as given to an optimizer.

    Returns:
        True for None or a concrete 0; False otherwise, and always for a traced value (as under
        optax.inject_hyperparams), which builds the transform.
    """
    return x is None or (isinstance(x, (int, float)) and x == 0)


def _need_params(name, params):
    if params is None:
        raise ValueError(f"{name} needs the parameters: call opt.update(grads, state, params)")


def all_finite(tree: PyTree) -> jax.Array:
    """Whether every element of every leaf is finite.

    Arguments:
        tree: a tree of float (or complex) arrays.

    Returns:
        () bool array: True when no leaf holds a NaN or an Inf (True for an empty tree).
    """
    return jnp.all(jnp.array([jnp.all(jnp.isfinite(x)) for x in jax.tree.leaves(tree)], bool))


def global_norm(tree: PyTree) -> jax.Array:
    """The L2 norm of a whole tree: sqrt(sum of |x|² over every element of every leaf).

    Arguments:
        tree: a tree of float or complex arrays.

    Returns:
        () float array, accumulated in float32 (or wider, for float64 leaves).
    """

    def sum_sq(x):
        x = x.astype(wide(x.dtype))
        return jnp.sum(jnp.real(x * jnp.conj(x)))

    return jnp.sqrt(sum(sum_sq(x) for x in jax.tree.leaves(tree)))


# --- scaling and clipping -------------------------------------------------------------------


def scale(factor: float | jax.Array) -> GradientTransformation:
    """u -> factor * u, with no state (optax.scale).

    Arguments:
        factor: a scalar.

    Returns:
        A stateless GradientTransformation.
    """
    return stateless(lambda u: jax.tree.map(lambda x: factor * x, u))


class LearningRateState(NamedTuple):
    """The state of `scale_by_learning_rate` for a constant learning rate.

    Attributes:
        learning_rate: () float32; set_hyperparams may change it between steps.
    """

    learning_rate: jax.Array


class ScheduleState(NamedTuple):
    """The state of `scale_by_learning_rate` for a schedule.

    Attributes:
        count: () int32, the steps taken; the schedule is evaluated at it.
        learning_rate: () float32, the latest step's value (before any step, the first's);
            read-only: set_hyperparams refuses to set it.
    """

    count: jax.Array
    learning_rate: jax.Array  # the latest step's value (before any step: the first's); read-only
    scheduled = ("learning_rate",)  # class attribute: set_hyperparams refuses to set these


def _descend(u, lr):
    return jax.tree.map(lambda x: -_cast(lr, x) * x, u)


def scale_by_learning_rate(learning_rate: ScalarOrSchedule) -> GradientTransformation:
    """u -> -learning_rate * u: the descent step that ends every optimizer's chain.

    Arguments:
        learning_rate: a float, stored in the state (`LearningRateState`) where set_hyperparams can
            change it; or a schedule (step -> value, see schedules.py), evaluated at the step
            count (`ScheduleState`).

    Returns:
        A GradientTransformation.
    """
    if not callable(learning_rate):
        return GradientTransformation(
            lambda params: LearningRateState(hyperparam(learning_rate)),
            lambda u, state, params=None: (_descend(u, state.learning_rate), state),
        )

    def init(params):
        return ScheduleState(jnp.zeros([], jnp.int32), hyperparam(learning_rate(0)))

    def update(u, state, params=None):
        lr = hyperparam(learning_rate(state.count))
        return _descend(u, lr), ScheduleState(state.count + 1, lr)

    return GradientTransformation(init, update)


def clip(max_delta: float) -> GradientTransformation:
    """Clip every element to [-max_delta, max_delta] (optax.clip).

    Arguments:
        max_delta: the largest magnitude an element keeps, > 0.

    Returns:
        A stateless GradientTransformation.
    """
    return stateless(lambda u: jax.tree.map(lambda x: jnp.clip(x, -max_delta, max_delta), u))


def clip_by_global_norm(max_norm: float) -> GradientTransformation:
    """Rescale the updates to global norm `max_norm` when theirs is larger (Pascanu et al. 2013,
    "On the difficulty of training recurrent neural networks"; optax.clip_by_global_norm).

    Arguments:
        max_norm: the largest global norm (see `global_norm`) the updates keep.

    Returns:
        A stateless GradientTransformation.
    """

    def fn(u):
        norm = global_norm(u)
        return jax.tree.map(
            lambda x: jnp.where(norm < max_norm, x, x / _cast(norm, x) * max_norm), u
        )

    return stateless(fn)


class WeightDecayState(NamedTuple):
    """The state of `add_decayed_weights`.

    Attributes:
        weight_decay: () float32, λ.
    """

    weight_decay: jax.Array


def add_decayed_weights(
    weight_decay: float | jax.Array | None = 0.0, mask: MaskOrFn | None = None
) -> GradientTransformation:
    """u -> u + weight_decay * params (optax.add_decayed_weights).

    Before an adaptive scaling this is L2 regularisation (torch.optim.Adam's weight_decay); after
    it and before the learning rate it is decoupled weight decay (Loshchilov & Hutter 2019).

    Arguments:
        weight_decay: λ. None or a concrete 0 builds `identity()`: no state, no params needed.
        mask: which leaves are decayed (see base.masked); None decays every leaf.

    Returns:
        A GradientTransformation whose update needs `params`; its state is a `WeightDecayState`
        (inside a `MaskedState` when masked).
    """
    if is_off(weight_decay):
        return identity()

    def update(u, state, params=None):
        _need_params("add_decayed_weights", params)
        return jax.tree.map(
            lambda g, p: g + _cast(state.weight_decay, g) * p.astype(g.dtype), u, params
        ), state

    tx = GradientTransformation(lambda params: WeightDecayState(hyperparam(weight_decay)), update)
    return tx if mask is None else masked(tx, mask)


# --- momentum and adaptive scalings ---------------------------------------------------------


class TraceState(NamedTuple):
    """The state of `trace`.

    Attributes:
        trace: the momentum buffer t, shaped like the params.
        momentum: () float32, `trace`'s decay (named as set_hyperparams and sgd name it).
    """

    trace: Updates
    momentum: jax.Array


def trace(
    decay: float | jax.Array = 0.9,
    nesterov: bool = False,
    accumulator_dtype: DTypeLike | None = None,
) -> GradientTransformation:
    """Momentum, as torch.optim.SGD and optax.trace: t <- g + decay·t; the update is t, or with
    Nesterov momentum (Sutskever et al. 2013, "On the importance of initialization and momentum in
    deep learning") g + decay·t.

    Arguments:
        decay: the momentum coefficient, stored in the state as `momentum`.
        nesterov: use Nesterov momentum.
        accumulator_dtype: the dtype of t; None: the parameters' dtype, but at least float32.

    Returns:
        A GradientTransformation with a `TraceState`.
    """

    def update(u, state, params=None):
        def rule(g, t):
            mom = _cast(state.momentum, g)
            t = g + mom * t
            return (g + mom * t if nesterov else t), t

        return _lift(rule, u, state, "trace")

    return GradientTransformation(
        lambda params: TraceState(_zeros(params, accumulator_dtype), hyperparam(decay)), update
    )


class AdamState(NamedTuple):
    """The state of `scale_by_adam`.

    Attributes:
        count: () int32, the steps taken.
        mu: the first moment m, shaped like the params, in `mu_dtype`.
        nu: the second moment v, shaped like the params, at least float32.
        b1: () float32, m's decay.
        b2: () float32, v's decay.
    """

    count: jax.Array
    mu: Updates
    nu: Updates
    b1: jax.Array
    b2: jax.Array


def scale_by_adam(
    b1: float | jax.Array = 0.9,
    b2: float | jax.Array = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
) -> GradientTransformation:
    """Adam's scaling (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization";
    optax.scale_by_adam):

        m <- b1·m + (1-b1)·g;   v <- b2·v + (1-b2)·|g|²;
        u = m̂ / (sqrt(v̂ + eps_root) + eps),   m̂ = m / (1 - b1^t),   v̂ = v / (1 - b2^t)

    b1 and b2 are float32 values in the state (set_hyperparams changes them), and 1 - b2 is
    computed from that float32 value, as in optax.inject_hyperparams(optax.scale_by_adam), which
    gives the same numbers bit for bit. Plain optax computes 1 - b2 from the Python float: for
    b2 = 0.999 the two weights differ by 1.3e-5 relative (float32(0.999) is 1 - 0.99998713e-3),
    and the updates by about 6e-6. Here the weights of the bias-corrected average sum to 1.

    Arguments:
        b1: the first moment's decay.
        b2: the second moment's decay.
        eps: added to sqrt(v̂), outside the root.
        eps_root: added to v̂, inside the root.
        mu_dtype: m's dtype (optax's keyword); None: the parameters' dtype, but at least float32.
            v is at least float32 either way.

    Returns:
        A GradientTransformation with an `AdamState`.
    """

    def init(params):
        return AdamState(
            jnp.zeros([], jnp.int32),
            _zeros(params, mu_dtype),
            _zeros(params),
            hyperparam(b1),
            hyperparam(b2),
        )

    def update(u, state, params=None):
        t = state.count + 1
        # bias corrections, in float32
        c1 = 1 - jax.lax.pow(state.b1, t)
        c2 = 1 - jax.lax.pow(state.b2, t)

        def rule(g, m, v):  # g in m's dtype; v's may differ (mu_dtype)
            beta1, beta2 = _cast(state.b1, m), _cast(state.b2, v)
            m = (1 - beta1) * g + beta1 * m
            g = g.astype(v.dtype)
            v = (1 - beta2) * (g * jnp.conj(g)) + beta2 * v
            m_hat = (m / _cast(c1, m)).astype(v.dtype)
            return m_hat / (jnp.sqrt(v / _cast(c2, v) + eps_root) + eps), m, v

        return _lift(rule, u, state, "mu", "nu", count=t)

    return GradientTransformation(init, update)


class LionState(NamedTuple):
    """The state of `scale_by_lion`.

    Attributes:
        mu: the momentum m, shaped like the params.
        b1: () float32, the interpolation weight of m in the update.
        b2: () float32, m's decay.
    """

    mu: Updates
    b1: jax.Array
    b2: jax.Array


_LION_MODES = ("hard", "smooth", "refined")


def scale_by_lion(
    b1: float | jax.Array = 0.9,
    b2: float | jax.Array = 0.99,
    mu_dtype: DTypeLike | None = None,
    *,
    mode: Literal["hard", "smooth", "refined"] = "hard",
    smooth_beta: float = 1.0,
) -> GradientTransformation:
    """Lion's scaling (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms";
    optax.scale_by_lion):

        x = (1-b1)·g + b1·m;   u = sign(x);   m <- (1-b2)·g + b2·m

    `mode` picks optax's variants of the sign: "smooth" is tanh(smooth_beta·x), "refined" keeps
    x where |x| < 1 and takes the sign beyond.

    Arguments:
        b1: the weight of m in the update's interpolation.
        b2: m's decay.
        mu_dtype: m's dtype; None: the parameters' dtype, but at least float32.
        mode: "hard" (the paper's sign), "smooth" or "refined".
        smooth_beta: the slope of tanh at 0 in "smooth" mode.

    Returns:
        A GradientTransformation with a `LionState`.

    Raises:
        ValueError: an unknown `mode` (here, when built; optax raises at the first update).
    """
    if mode not in _LION_MODES:
        raise ValueError(f"scale_by_lion: mode must be one of {_LION_MODES}, got {mode!r}")

    def direction(x):
        if mode == "smooth":
            return jnp.tanh(smooth_beta * x)
        if mode == "refined":
            return jnp.where(jnp.abs(x) < 1, x, jnp.sign(x))
        return jnp.sign(x)

    def update(u, state, params=None):
        def rule(g, m):
            beta1, beta2 = _cast(state.b1, g), _cast(state.b2, g)
            return direction((1 - beta1) * g + beta1 * m), (1 - beta2) * g + beta2 * m

        return _lift(rule, u, state, "mu")

    def init(params):
        return LionState(_real_zeros("lion", params, mu_dtype), hyperparam(b1), hyperparam(b2))

    return GradientTransformation(init, update)


# --- Sophia ---------------------------------------------------------------------------------


class SophiaState(NamedTuple):
    """The state of `scale_by_sophia`.

    Attributes:
        count: () int32, the optimizer steps taken.
        mu: the EMA of the gradients m, shaped like the params.
        h: the EMA of the Hessian-diagonal estimates, shaped like the params; refreshed by
            `update_hessian`, never by the update itself.
        h_step: () int32, the count at which h was last refreshed (-1: never).
        interval: () int32, k: h is refreshed on steps 0, k, 2k, ...
        b1: () float32, m's decay.
        b2: () float32, h's decay.
    """

    count: jax.Array  # optimizer steps taken
    mu: Updates  # EMA of the gradients
    h: Updates  # EMA of the Hessian-diagonal estimates, refreshed by update_hessian
    h_step: jax.Array  # the count at which h was last refreshed (-1: never)
    interval: jax.Array  # k: refresh h on steps 0, k, 2k, ...
    b1: jax.Array
    b2: jax.Array


def scale_by_sophia(
    b1: float | jax.Array = 0.965,
    b2: float | jax.Array = 0.99,
    gamma: float = 0.01,
    eps: float = 1e-12,
    interval: int = 10,
    state_dtype: DTypeLike | None = None,
) -> GradientTransformation:
    """Sophia's scaling (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer
    for Language Model Pre-training", Algorithm 3):

        m <- b1·m + (1-b1)·g;   u = clip(m / max(gamma·h, eps), -1, 1)

    The Hessian EMA h is not computed here: the training step calls `update_hessian` just before
    `opt.update`; it evaluates an estimator (`hutchinson` or `gauss_newton_bartlett`) only on
    every k-th step (`interval`) and folds it in as h <- b2·h + (1-b2)·ĥ. A step that never calls
    it keeps h = 0, and the update degrades to clip(m / eps) = sign(m), sign descent.

    Arguments:
        b1: m's decay.
        b2: h's decay.
        gamma: γ, the scale of h in the denominator.
        eps: the denominator's floor.
        interval: k, the steps between Hessian refreshes.
        state_dtype: the dtype of m and h; None: the parameters' dtype, but at least float32.

    Returns:
        A GradientTransformation with a `SophiaState`; it refuses complex parameters at init.
    """

    def init(params):
        return SophiaState(
            jnp.zeros([], jnp.int32),
            _real_zeros("sophia", params, state_dtype),
            _zeros(params, state_dtype),
            jnp.array(-1, jnp.int32),
            jnp.array(interval, jnp.int32),
            hyperparam(b1),
            hyperparam(b2),
        )

    def update(u, state, params=None):
        def rule(g, m, h):
            beta1 = _cast(state.b1, g)
            m = (1 - beta1) * g + beta1 * m
            # h as it was: update_hessian refreshes it
            return jnp.clip(m / jnp.maximum(gamma * h, eps), -1, 1), m, h

        return _lift(rule, u, state, "mu", "h", count=state.count + 1)

    return GradientTransformation(init, update)


def update_hessian(state: PyTree, estimate: Callable[[], PyTree]) -> PyTree:
    """Refresh the Hessian EMA of every Sophia state in `state` on its refresh steps.

    It runs `estimate` under `lax.cond`, so the estimate costs its extra forward and backward pass
    only when the step count is a multiple of the interval, once per step (with gradient
    accumulation, on the first micro-step). A non-finite estimate is dropped and h is kept.

    ```python
    state = update_hessian(state, lambda: gauss_newton_bartlett(logits_fn, params, key=key))
    updates, state = opt.update(grads, state, params)
    ```

    Arguments:
        state: an optimizer state holding at least one `SophiaState`.
        estimate: a function of no arguments that returns a params-shaped tree ĥ.

    Returns:
        The state with each due SophiaState's h <- b2·h + (1-b2)·ĥ and its h_step set.

    Raises:
        ValueError: `state` holds no SophiaState.
    """
    if not find_states(state, SophiaState):
        raise ValueError(
            "update_hessian found no Sophia state (scale_by_sophia) in this optimizer state"
        )

    def refresh(s, prefix):
        if not isinstance(s, SophiaState):
            return s

        def fold():
            est = estimate()
            ok = all_finite(est)
            b2 = s.b2

            def new(h, e):
                if isinstance(h, MaskedNode):
                    return h
                return jnp.where(ok, (1 - _cast(b2, h)) * e.astype(h.dtype) + _cast(b2, h) * h, h)

            return jax.tree.map(new, s.h, est, is_leaf=lambda x: isinstance(x, MaskedNode))

        due = (s.count % s.interval == 0) & (s.h_step != s.count)
        return s._replace(
            h=jax.lax.cond(due, fold, lambda: s.h), h_step=jnp.where(due, s.count, s.h_step)
        )

    return map_states(refresh, state)


def hutchinson(loss_fn: Callable[[PyTree], jax.Array], params: PyTree, *, key: jax.Array) -> PyTree:
    """Hutchinson's estimator of diag(∇²L) (Sophia-H): ĥ = u ⊙ (∇²L(θ) u), u ~ N(0, I).

    Unbiased, E[u_i (Hu)_i] = H_ii, at the cost of one Hessian-vector product
    (forward-over-reverse).

    Arguments:
        loss_fn: `loss_fn(params)` -> the () scalar loss on the current batch.
        params: the parameters θ.
        key: a PRNG key (`jax.random.key`), for u.

    Returns:
        ĥ, shaped like `params`.
    """
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    u = treedef.unflatten([jax.random.normal(k, p.shape, p.dtype) for k, p in zip(keys, leaves)])
    _, hu = jax.jvp(jax.grad(loss_fn), (params,), (u,))
    return jax.tree.map(jnp.multiply, u, hu)


def gauss_newton_bartlett(
    logits_fn: Callable[[PyTree], jax.Array], params: PyTree, *, key: jax.Array
) -> PyTree:
    """The Gauss-Newton-Bartlett estimator (Sophia-G) for a softmax cross-entropy model.

    Sample labels from the model itself, ŷ_b ~ softmax(f(θ, x_b)); with L̂ the mean cross-entropy
    against them over the B predictions, ĥ = B · ∇L̂ ⊙ ∇L̂, whose expectation is the diagonal of
    the Gauss-Newton matrix. One forward and one backward pass.

    Arguments:
        logits_fn: `logits_fn(params)` -> (..., V) logits on the current batch; every position
            counts as a prediction (B = tokens in a language model).
        params: the parameters θ.
        key: a PRNG key (`jax.random.key`), for the sampled labels.

    Returns:
        ĥ, shaped like `params`.
    """
    logits, vjp = jax.vjp(logits_fn, params)  # (..., V)
    flat = logits.reshape(-1, logits.shape[-1])  # (B, V)
    batch = flat.shape[0]
    y = jax.random.categorical(key, flat)  # (B,)
    one_hot = jax.nn.one_hot(y, flat.shape[-1], dtype=flat.dtype)  # (B, V)
    dlogits = (jax.nn.softmax(flat) - one_hot) / batch  # dL̂/dlogits
    (grads,) = vjp(dlogits.reshape(logits.shape))
    return jax.tree.map(lambda g: batch * g * g, grads)


# --- Muon -----------------------------------------------------------------------------------


class MuonState(NamedTuple):
    """The state of `scale_by_muon`.

    Attributes:
        count: () int32, the steps taken.
        mu: the momentum m, shaped like the params.
        momentum: () float32, μ.
    """

    count: jax.Array
    mu: Updates
    momentum: jax.Array


def newton_schulz(x: jax.Array, steps: int = 5, eps: float = 1e-7) -> jax.Array:
    """Orthogonalise a matrix: G = U S V^T -> about U V^T, with Jordan's quintic Newton-Schulz
    iteration X <- aX + (bA + cA²)X, A = XX^T.

    Its coefficients buy speed over accuracy: the singular values land in about [0.7, 1.2] rather
    than at 1, which trains as well.

    Arguments:
        x: (m, n) float matrix.
        steps: the iterations.
        eps: added to the Frobenius norm x is first divided by.

    Returns:
        (m, n) array of `x`'s dtype, with singular values near 1.
    """
    a, b, c = 3.4445, -4.7750, 2.0315
    tall = x.shape[0] > x.shape[1]
    x = x.T if tall else x  # (m, n), m <= n: the Gram matrix A is the smaller one
    x = x / (jnp.linalg.norm(x) + eps)  # Frobenius norm >= spectral norm: singular values <= 1
    for _ in range(steps):
        gram = x @ x.T  # (m, m)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if tall else x


def scale_by_muon(
    momentum: float | jax.Array = 0.95,
    nesterov: bool = True,
    ns_steps: int = 5,
    mu_dtype: DTypeLike | None = None,
    bias_correction: bool = False,
) -> GradientTransformation:
    """Muon's scaling (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural
    networks") for 2-D weights W (in, out):

        m <- μ·m + (1-μ)·g;   v = μ·m + (1-μ)·g if nesterov else m;
        u = newton_schulz(v)·sqrt(max(1, out / in))

    `bias_correction=True` is optax.contrib.muon's variant: at step t, m / (1 - μ^(t+1)) and
    g / (1 - μ^t) in the Nesterov mix (m / (1 - μ^t) without Nesterov).

    Arguments:
        momentum: μ.
        nesterov: use Nesterov momentum.
        ns_steps: Newton-Schulz iterations.
        mu_dtype: m's dtype; None: the parameters' dtype, but at least float32.
        bias_correction: bias-correct the momentum as optax.contrib.muon does.

    Returns:
        A GradientTransformation with a `MuonState`; its update raises ValueError on a leaf that
        is not 2-D (`muon()` sends those to AdamW), its init on complex parameters.
    """

    def update(u, state, params=None):
        t = state.count + 1
        c_now = jnp.ones([], jnp.float32)
        c_next = jnp.ones([], jnp.float32)
        if bias_correction:
            c_now = 1 - jax.lax.pow(state.momentum, t)
            c_next = 1 - jax.lax.pow(state.momentum, t + 1)

        def rule(g, m):
            if g.ndim != 2:
                raise ValueError(
                    f"scale_by_muon orthogonalises matrices, got a leaf of shape {g.shape}; use "
                    "muon(), which sends the other leaves to AdamW, or partition()/masked()"
                )
            mom = _cast(state.momentum, g)
            m = mom * m + (1 - mom) * g
            m_hat = m / _cast(c_next, m)
            g_hat = g / _cast(c_now, g)
            v = mom * m_hat + (1 - mom) * g_hat if nesterov else m / _cast(c_now, m)
            return newton_schulz(v, ns_steps) * max(1.0, g.shape[1] / g.shape[0]) ** 0.5, m

        return _lift(rule, u, state, "mu", count=t)

    def init(params):
        mu = _real_zeros("muon", params, mu_dtype)
        return MuonState(jnp.zeros([], jnp.int32), mu, hyperparam(momentum))

    return GradientTransformation(init, update)


# --- wrappers: parameter EMA, gradient accumulation -----------------------------------------


class EmaState(NamedTuple):
    """The state of `ema_params`.

    Attributes:
        ema: the moving average of the parameters, shaped like them, in float32 (or wider).
        decay: () float32.
    """

    ema: Updates  # float32 (or wider) copy of the parameters' moving average
    decay: jax.Array


def ema_params(decay: float | jax.Array = 0.999) -> GradientTransformation:
    """Keep an exponential moving average of the parameters after each step (Polyak averaging):
    ema <- decay·ema + (1-decay)·(params + u).

    Put it last in a chain; u passes through. Read the average with
    `find_states(state, EmaState)[0].ema`; it is kept in float32 for low-precision params.

    Arguments:
        decay: the average's decay per step.

    Returns:
        A GradientTransformation with an `EmaState`, whose update needs `params`.
    """

    def init(params):
        return EmaState(jax.tree.map(lambda p: p.astype(wide(p.dtype)), params), hyperparam(decay))

    def update(u, state, params=None):
        _need_params("ema_params", params)

        def rule(e, p, x):
            d = _cast(state.decay, e)
            return d * e + (1 - d) * (p.astype(e.dtype) + x.astype(e.dtype))

        return u, state._replace(ema=jax.tree.map(rule, state.ema, params, u))

    return GradientTransformation(init, update)


class AccumulateState(NamedTuple):
    """The state of `accumulate` (and `apply_every`).

    Attributes:
        inner: the inner transform's state, changed only on the k-th micro-step.
        acc: the mean of this window's gradients so far, shaped like the params.
        micro_step: () int32, 0 .. k-1.
    """

    inner: PyTree
    acc: Updates  # the mean of this window's gradients so far
    micro_step: jax.Array  # 0 .. k-1


def accumulate(inner: GradientTransformation, k: int) -> GradientTransformation:
    """Gradient accumulation (as optax.MultiSteps): average the gradients of k micro-steps; on the
    k-th, apply `inner` to the mean and return its updates; before that return zeros (so the
    params stay put) and leave inner's state untouched.

    Arguments:
        inner: the optimizer that sees one mean gradient every k micro-steps.
        k: micro-steps per optimizer step.

    Returns:
        A GradientTransformation with an `AccumulateState`; extra update arguments reach `inner`.
    """

    def init(params):
        return AccumulateState(
            inner.init(params), jax.tree.map(jnp.zeros_like, params), jnp.zeros([], jnp.int32)
        )

    def update(u, state, params=None, **extra_args):
        n = state.micro_step
        # running mean
        acc = jax.tree.map(lambda a, g: a + (g - a) / (n + 1).astype(g.dtype), state.acc, u)
        emit = n == k - 1
        out, inner_state = jax.lax.cond(
            emit,
            lambda: call_update(inner, acc, state.inner, params, **extra_args),
            lambda: (jax.tree.map(jnp.zeros_like, acc), state.inner),
        )
        acc = where(emit, jax.tree.map(jnp.zeros_like, acc), acc)
        return out, AccumulateState(inner_state, acc, (n + 1) % k)

    return GradientTransformation(init, update)


def apply_every(k: int = 1) -> GradientTransformation:
    """Emit the sum of the last k updates every k-th step and zeros in between (optax.apply_every).

    Unlike `accumulate`, the transforms after it in a chain still update their states on every
    step (on zeros between emissions); use `accumulate` to step an optimizer once per window.
    Built as `accumulate(scale(k), k)`: k times the window's mean.

    Arguments:
        k: steps per emission.

    Returns:
        A GradientTransformation with an `AccumulateState`.
    """
    return accumulate(scale(k), k)
