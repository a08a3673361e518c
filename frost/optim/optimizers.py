"""Named optimizers, each a chain of transforms from transforms.py.

Notation: g gradient, θ parameters, η learning rate (a float or a schedule), λ weight decay,
t the step (from 1). The learning rate, weight decay and momentum (b1/b2 for Adam, Lion and
Sophia) of each are in the optimizer state: read them with get_hyperparams(state) and change
them between steps with set_hyperparams(state, ...) without recompiling. `mask` selects the
leaves that are weight-decayed (a tree of bools or a function of the params; base.decay_mask
decays only matrices). A weight decay or momentum of 0 (or None) builds no transform and no
buffer (optax's rule), so `sgd(0.1).update(grads, state)` needs no params; to change such a value
between steps, build with a non-zero one. Keyword names are optax's where the function is: the
first moment's dtype is `mu_dtype` (`accumulator_dtype` for sgd's trace; default: the
parameters' dtype, but at least float32, where optax keeps the parameters' dtype).
Each works under optax.inject_hyperparams.
"""

import functools
from collections.abc import Callable

import jax
from jax.typing import DTypeLike

from frost.optim.base import (
    GradientTransformation,
    MaskOrFn,
    ScalarOrSchedule,
    chain,
    identity,
    partition,
)
from frost.optim.transforms import (
    add_decayed_weights,
    is_off,
    scale_by_adam,
    scale_by_learning_rate,
    scale_by_lion,
    scale_by_muon,
    scale_by_sophia,
    trace,
)
from frost.tree import PyTree


def _decoupled(scaling, weight_decay, mask, learning_rate) -> GradientTransformation:
    """`scaling`, then decoupled weight decay (Loshchilov & Hutter 2019), then the learning rate:
    the chain of AdamW, Lion, Sophia and Muon."""
    return chain(
        scaling, add_decayed_weights(weight_decay, mask), scale_by_learning_rate(learning_rate)
    )


def sgd(
    learning_rate: ScalarOrSchedule,
    momentum: float | None = None,
    nesterov: bool = False,
    accumulator_dtype: DTypeLike | None = None,
    weight_decay: float | None = None,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    """Stochastic gradient descent with momentum, as torch.optim.SGD (Robbins & Monro 1951;
    heavy-ball momentum: Polyak 1964; Nesterov momentum in this form: Sutskever et al. 2013, "On
    the importance of initialization and momentum in deep learning"):

        d = g + λθ;   b <- momentum·b + d;   θ <- θ - η·(d + momentum·b if nesterov else b)

    Arguments:
        learning_rate: η, a float or a schedule (a function of the step count).
        momentum: the momentum coefficient; None or 0 builds no momentum buffer.
        nesterov: use Nesterov momentum.
        accumulator_dtype: the momentum buffer's dtype; None: the parameters' dtype, but at least
            float32.
        weight_decay: λ, L2 regularisation added to the gradient (torch's weight_decay); None or 0
            builds none.
        mask: which leaves are weight-decayed (a tree of bools or a function of the params;
            `decay_mask` decays only matrices); None: all.

    Returns:
        A GradientTransformation: chain(add_decayed_weights, trace, scale_by_learning_rate).
    """
    return chain(
        add_decayed_weights(weight_decay, mask),
        identity() if is_off(momentum) else trace(momentum, nesterov, accumulator_dtype),
        scale_by_learning_rate(learning_rate),
    )


def adam(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float | None = None,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    """Adam (Kingma & Ba 2015, "Adam: A Method for Stochastic Optimization"), with L2 weight decay
    added to the gradient as torch.optim.Adam does:

        d = g + λθ;  m <- b1·m + (1-b1)·d;  v <- b2·v + (1-b2)·d²;
        θ <- θ - η·(m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)

    Arguments:
        learning_rate: η, a float or a schedule (a function of the step count).
        b1: the first moment's decay.
        b2: the second moment's decay.
        eps: added to sqrt(v̂), outside the root.
        eps_root: added to v̂, inside the root.
        mu_dtype: the first moment's dtype; None: the parameters' dtype, but at least float32.
        weight_decay: λ, L2 regularisation added to the gradient; None or 0 builds none.
        mask: which leaves are weight-decayed (a tree of bools or a function of the params);
            None: all.

    Returns:
        A GradientTransformation: chain(add_decayed_weights, scale_by_adam,
        scale_by_learning_rate).
    """
    return chain(
        add_decayed_weights(weight_decay, mask),
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype),
        scale_by_learning_rate(learning_rate),
    )


def adamw(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
    eps_root: float = 0.0,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 1e-4,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    """AdamW (Loshchilov & Hutter 2019, "Decoupled Weight Decay Regularization"):

        m, v as in Adam on g;   θ <- θ - η·(m̂ / (sqrt(v̂) + eps) + λθ)

    The decay is multiplied by η, as in torch.optim.AdamW and optax.adamw.

    Arguments:
        learning_rate: η, a float or a schedule (a function of the step count).
        b1: the first moment's decay.
        b2: the second moment's decay.
        eps: added to sqrt(v̂), outside the root.
        eps_root: added to v̂, inside the root.
        mu_dtype: the first moment's dtype; None: the parameters' dtype, but at least float32.
        weight_decay: λ; 0 or None builds no decay.
        mask: which leaves are weight-decayed (a tree of bools or a function of the params;
            `decay_mask` decays only matrices); None: all.

    Returns:
        A GradientTransformation: chain(scale_by_adam, add_decayed_weights,
        scale_by_learning_rate).
    """
    return _decoupled(
        scale_by_adam(b1, b2, eps, eps_root, mu_dtype), weight_decay, mask, learning_rate
    )


def lion(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.9,
    b2: float = 0.99,
    mu_dtype: DTypeLike | None = None,
    weight_decay: float = 1e-3,
    mask: MaskOrFn | None = None,
) -> GradientTransformation:
    """Lion (Chen et al. 2023, "Symbolic Discovery of Optimization Algorithms"):

        θ <- θ - η·(sign(b1·m + (1-b1)·g) + λθ);   m <- b2·m + (1-b2)·g

    Arguments:
        learning_rate: η, a float or a schedule (a function of the step count); Chen et al. use
            3-10x smaller than AdamW's.
        b1: the weight of m in the update's interpolation.
        b2: m's decay.
        mu_dtype: m's dtype; None: the parameters' dtype, but at least float32.
        weight_decay: λ (decoupled, multiplied by η); 0 or None builds none.
        mask: which leaves are weight-decayed (a tree of bools or a function of the params);
            None: all.

    Returns:
        A GradientTransformation: chain(scale_by_lion, add_decayed_weights,
        scale_by_learning_rate).
    """
    return _decoupled(scale_by_lion(b1, b2, mu_dtype), weight_decay, mask, learning_rate)


def sophia(
    learning_rate: ScalarOrSchedule,
    b1: float = 0.965,
    b2: float = 0.99,
    gamma: float = 0.01,
    eps: float = 1e-12,
    weight_decay: float = 0.1,
    interval: int = 10,
    mask: MaskOrFn | None = None,
    state_dtype: DTypeLike | None = None,
) -> GradientTransformation:
    """Sophia (Liu et al. 2023, "Sophia: A Scalable Stochastic Second-order Optimizer for Language
    Model Pre-training", Algorithm 3):

        m <- b1·m + (1-b1)·g;   every k = interval steps: h <- b2·h + (1-b2)·ĥ;
        θ <- θ - η·(clip(m / max(γ·h, eps), -1, 1) + λθ)

    ĥ is a Hessian-diagonal estimate that the step feeds in before each update:

        state = update_hessian(state, lambda: gauss_newton_bartlett(logits_fn, params, key=key))
        updates, state = opt.update(grads, state, params)

    (update_hessian evaluates the estimate only on refresh steps; `hutchinson` is Sophia-H.)

    Arguments:
        learning_rate: η, a float or a schedule (a function of the step count).
        b1: m's decay.
        b2: h's decay.
        gamma: γ, the scale of h in the denominator.
        eps: the denominator's floor.
        weight_decay: λ (decoupled, multiplied by η); 0 or None builds none.
        interval: k, the steps between Hessian refreshes.
        mask: which leaves are weight-decayed (a tree of bools or a function of the params);
            None: all.
        state_dtype: the dtype of m and h; None: the parameters' dtype, but at least float32.

    Returns:
        A GradientTransformation: chain(scale_by_sophia, add_decayed_weights,
        scale_by_learning_rate).
    """
    scaling = scale_by_sophia(b1, b2, gamma, eps, interval, state_dtype)
    return _decoupled(scaling, weight_decay, mask, learning_rate)


def muon(
    learning_rate: ScalarOrSchedule,
    momentum: float = 0.95,
    nesterov: bool = True,
    ns_steps: int = 5,
    weight_decay: float | None = None,
    mask: MaskOrFn | None = None,
    labels: PyTree | Callable[[PyTree], PyTree] | None = None,
    adam_learning_rate: ScalarOrSchedule | None = None,
    adam_b1: float = 0.9,
    adam_b2: float = 0.999,
    adam_eps: float = 1e-8,
    adam_weight_decay: float | None = None,
    mu_dtype: DTypeLike | None = None,
    bias_correction: bool = False,
) -> GradientTransformation:
    """Muon (Jordan et al. 2024, "Muon: An optimizer for hidden layers in neural networks"), for
    each 2-D weight W (in, out); every other leaf (biases, norm scales, conv kernels) gets AdamW:

        m <- μ·m + (1-μ)·g;   v = μ·m + (1-μ)·g if nesterov else m;
        W <- W - η·(newton_schulz(v)·sqrt(max(1, out/in)) + λW)

    Hyper-parameters are qualified by part: 'muon/learning_rate', 'adam/learning_rate', ...

    Against optax.contrib.muon with the same hyper-parameters: the Newton-Schulz coefficients
    (Jordan's 3.4445, -4.7750, 2.0315), the shape scaling sqrt(max(1, out/in)) and the rank rule
    for which leaves go to Adam are the same, and the first step agrees to 1e-7; from the second
    step on optax bias-corrects the momentum, so with Nesterov momentum the updates differ by up
    to ~15% (relative; μ = 0.95) and the gap shrinks as μ^t -> 0 (without Nesterov the correction
    only rescales m, which the normalisation removes). `bias_correction=True` gives optax's rule
    (tests/test_optim.py matches optax.contrib.muon with it); the default follows Jordan's
    reference implementation.

    Arguments:
        learning_rate: η of the Muon part, a float or a schedule (a function of the step count).
        momentum: μ.
        nesterov: use Nesterov momentum.
        ns_steps: Newton-Schulz iterations.
        weight_decay: λ of the Muon part (decoupled, multiplied by η); None or 0 builds none.
        mask: which leaves are weight-decayed, in both parts (a tree of bools or a function of the
            params); None: all.
        labels: a tree, or a function of the params giving one, of "muon" or "adam" per leaf; it
            overrides the rank rule, e.g. to send embeddings and the output head to AdamW as
            Jordan recommends. None: 2-D leaves to Muon, the others to AdamW.
        adam_learning_rate: the AdamW part's learning rate; None: `learning_rate`.
        adam_b1: the AdamW part's first-moment decay.
        adam_b2: the AdamW part's second-moment decay.
        adam_eps: the AdamW part's eps.
        adam_weight_decay: the AdamW part's λ; None or 0 builds none.
        mu_dtype: the momentum buffers' dtype in both parts; None: the parameters' dtype, but at
            least float32.
        bias_correction: bias-correct the momentum as optax.contrib.muon does.

    Returns:
        A GradientTransformation: partition({"muon": chain(scale_by_muon, add_decayed_weights,
        scale_by_learning_rate), "adam": adamw(...)}, labels).
    """
    labels = labels or (
        lambda params: jax.tree.map(lambda p: "muon" if p.ndim == 2 else "adam", params)
    )
    scaling = scale_by_muon(momentum, nesterov, ns_steps, mu_dtype, bias_correction)
    muon = _decoupled(scaling, weight_decay, mask, learning_rate)
    adam_lr = learning_rate if adam_learning_rate is None else adam_learning_rate
    adam = functools.partial(adamw, mu_dtype=mu_dtype, weight_decay=adam_weight_decay, mask=mask)
    return partition({"muon": muon, "adam": adam(adam_lr, adam_b1, adam_b2, adam_eps)}, labels)
