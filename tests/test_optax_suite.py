"""optax's own tests (optax/_src/alias_test.py, combine_test.py and transform_test.py, from the
installed optax wheel) run against frost.optim.

Each test module's `alias`, `combine`, `transform` and `update` are replaced by copies in which the
functions Frost has are Frost's (adam, adamw, lion, sgd; chain, partition; scale, scale_by_adam,
scale_by_lion, trace, apply_every; apply_updates), and the cases that call one of them run
unmodified: the AliasTest cases of the four optimizers (converge on the parabola and Rosenbrock in
float32 and complex64, no recompilation, extra update arguments, optax.inject_hyperparams,
optax.MultiSteps, explicit and preserved dtypes, dtype stability), every case of combine_test
(chain, extra arguments, partition) and transform_test's cases of those transforms. The cases that
exercise only optax's own functions (scale_by_adadelta, centralize, ...) are left out.

The cases run with JAX's standard dtype promotion, as in optax's CI: optax's own code under test
(MultiSteps, inject_hyperparams) is not written for conftest's strict mode. Frost's optimizers are
tested under strict promotion in tests/test_optim.py.
"""

import functools
import types

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from absl.testing import parameterized  # absl comes with optax
from optax._src import (  # a plain import: a missing dependency fails, never skips
    alias_test,
    combine_test,
    transform_test,
)

import frost.optim as fo

FROST = ("adam", "adamw", "lion", "sgd")
OPT_NAMES = FROST + ("sgd_mom",)  # test_explicit_dtype's name for sgd with momentum

# Every optax case of the four optimizers runs except these, each a deliberate difference.
EXCLUDED = {
    # With mu_dtype=None optax keeps the moments in the parameters' dtype (bfloat16 here); Frost
    # keeps them at least float32 (bfloat16 parameters train with float32 moments), and gives
    # bfloat16 moments only when asked with mu_dtype / accumulator_dtype=jnp.bfloat16.
    "test_explicit_dtype__bfloat16__None__adam": "moments at least float32 by default",
    "test_explicit_dtype__bfloat16__None__adamw": "moments at least float32 by default",
    "test_explicit_dtype__bfloat16__None__sgd_mom": "moments at least float32 by default",
}


def _with_frost(module: types.ModuleType, names: tuple[str, ...]) -> types.ModuleType:
    """A copy of the optax module `module` whose `names` are Frost's functions."""
    copy = types.ModuleType("frost_" + module.__name__.rsplit(".", 1)[-1])
    vars(copy).update(vars(module))
    vars(copy).update({n: getattr(fo, n) for n in names})
    return copy


frost_alias = _with_frost(alias_test.alias, FROST)
frost_combine = _with_frost(combine_test.combine, ("chain", "partition"))
TRANSFORMS = ("scale", "scale_by_adam", "scale_by_lion", "trace", "apply_every")
frost_transform = _with_frost(transform_test.transform, TRANSFORMS)
frost_update = _with_frost(combine_test.update, ("apply_updates",))
alias_test.alias = frost_alias
for test_module in (combine_test, transform_test):
    test_module.alias = frost_alias
    test_module.combine = frost_combine
    test_module.transform = frost_transform
    test_module.update = frost_update


def _label(v) -> str:
    return v.__name__.removeprefix("_setup_") if callable(v) else str(v)


def _cases():
    """(name, test function) of each parameterized AliasTest case of Frost's optimizers, named by
    its parameters (e.g. test_optimization__adam__parabola__complex64)."""
    for name, f in vars(alias_test.AliasTest).items():
        if not name.startswith("test") or not f.__closure__:
            continue
        cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
        params = cells.get("testcase_params", {})
        if params.get("opt_name") not in OPT_NAMES:
            continue
        label = "__".join(_label(v) for k, v in params.items() if k != "opt_kwargs")
        yield f"{name.rstrip('0123456789')}__{label}", f


CASES = dict(_cases())
FrostAliasTest = type(
    "FrostAliasTest",
    (parameterized.TestCase,),
    {k: f for k, f in CASES.items() if k not in EXCLUDED},
)


# --- combine_test and transform_test --------------------------------------------------------

# Every case of combine_test calls Frost's chain or partition; transform_test's cases that call
# one of Frost's transforms are these (its test_scalers cases hold optax's function, so Frost's
# is passed in below).
TRANSFORM_CASES = (
    "test_apply_every",
    "test_scale",
    "test_lion_modes_variants",
    "test_lion_invalid_mode_raises",
    "test_rms_match_adam",
)
SCALERS = {"adam": fo.scale_by_adam, "lion": fo.scale_by_lion}

# Each a deliberate difference, checked by a test of its own below.
EXCLUDED_OPTAX = {
    # isinstance(x, optax.GradientTransformation) is a nominal check against optax's NamedTuple
    # class, which no Frost class can pass without importing optax (frost/optim/base.py).
    # test_extra_args then calls adam's init on Python ints ({'a': 1, 'b': 2}), which Frost's
    # state buffers (built from each leaf's .shape and .dtype) do not take; optax's zeros_like does.
    "ExtraArgsTest.test_extra_args": "checks isinstance(chain(...), optax's class)",
    "ExtraArgsTest.test_extra_args_chaining": "checks isinstance(chain(...), optax's class)",
    # Frost refuses an unknown mode when the transform is built; optax at its first update.
    "TransformTest.test_lion_invalid_mode_raises": "an unknown mode is refused when built",
    # Optax's scale_by_rms against Frost's scale_by_adam(b1=0): 6e-6 relative apart (the case
    # asks 1e-6), since Frost's b2 is a float32 state value and 1 - b2 is computed from it, as in
    # optax.inject_hyperparams(optax.scale_by_adam), which Frost's equals bit for bit.
    "TransformTest.test_rms_match_adam": "1 - b2 from float32 b2, as inject_hyperparams",
}


def _frost_cases(test_class: type, names: tuple[str, ...] | None) -> dict:
    """{case name: function} for `names` of `test_class` (all its cases if None); its test_scalers
    cases of SCALERS run with Frost's transform instead of optax's."""
    cases = {
        name: f
        for name, f in vars(test_class).items()
        if name.startswith("test") and (names is None or name in names)
    }
    for label, scaler in SCALERS.items():
        f = vars(test_class).get(f"test_scalers_{label}")
        if f is not None:
            cells = dict(zip(f.__code__.co_freevars, (c.cell_contents for c in f.__closure__)))
            cases[f"test_scalers_{label}"] = functools.partialmethod(cells["test_method"], scaler)
    return cases


def _frost_test_class(test_class: type, names: tuple[str, ...] | None = None) -> type:
    """A subclass of optax's `test_class` (for its setUp) that runs only the selected cases: the
    others, and the EXCLUDED_OPTAX ones, are set to None, which unittest does not collect."""
    chosen = _frost_cases(test_class, names)
    kept = {k: f for k, f in chosen.items() if f"{test_class.__name__}.{k}" not in EXCLUDED_OPTAX}
    hidden = {k: None for k in dir(test_class) if k.startswith("test") and k not in kept}
    return type(f"Frost{test_class.__name__}", (test_class,), {**hidden, **kept})


FrostComposeTest = _frost_test_class(combine_test.ComposeTest)
FrostExtraArgsTest = _frost_test_class(combine_test.ExtraArgsTest)
FrostPartitionTest = _frost_test_class(combine_test.PartitionTest)
FrostNamedChainTest = _frost_test_class(combine_test.NamedChainTest)
FrostTransformTest = _frost_test_class(transform_test.TransformTest, TRANSFORM_CASES)
OPTAX_CLASSES = (
    FrostComposeTest,
    FrostExtraArgsTest,
    FrostPartitionTest,
    FrostNamedChainTest,
    FrostTransformTest,
)


@pytest.fixture(autouse=True)
def _standard_promotion():
    with jax.numpy_dtype_promotion("standard"):
        yield


def test_the_suite_covers_every_optax_case_of_frosts_optimizers():
    """The exclusions name real cases, and the selection found optax's tests (not zero cases)."""
    assert set(EXCLUDED) <= set(CASES)
    tests = {k.split("__")[0] for k in CASES}
    assert {"test_optimization", "test_optimizers_accept_extra_args"} <= tests
    assert len(CASES) - len(EXCLUDED) >= 100


def test_the_combine_and_transform_selection_finds_optax_cases():
    """Every selected and excluded name is one of optax's cases, and each class runs some."""
    for cls in OPTAX_CLASSES:
        optax_class = cls.__bases__[0]
        run = [k for k in dir(cls) if k.startswith("test") and callable(getattr(cls, k))]
        assert run and set(run) <= set(dir(optax_class))
    names = set(TRANSFORM_CASES) | {f"test_scalers_{label}" for label in SCALERS}
    assert names <= set(dir(transform_test.TransformTest))
    optax_classes = {cls.__bases__[0].__name__: cls.__bases__[0] for cls in OPTAX_CLASSES}
    for case in EXCLUDED_OPTAX:
        class_name, name = case.split(".")
        assert hasattr(optax_classes[class_name], name)
    assert frost_transform.trace is fo.trace and frost_combine.chain is fo.chain


def test_frost_transforms_are_not_optax_instances_but_convert():
    """The excluded isinstance cases, as documented in base.py: a Frost transform is not an
    instance of optax's class; converting it field by field gives one that runs the same."""
    tx = fo.adamw(1e-2, weight_decay=0.1)
    assert not isinstance(tx, optax.GradientTransformation)
    converted = optax.GradientTransformationExtraArgs(*tx)
    assert isinstance(converted, optax.GradientTransformation)
    params = {"w": jnp.arange(6.0).reshape(2, 3)}
    grads = {"w": jnp.full((2, 3), 0.5)}
    updates, _ = tx.update(grads, tx.init(params), params)
    converted_updates, _ = converted.update(grads, converted.init(params), params, value=1.0)
    np.testing.assert_array_equal(updates["w"], converted_updates["w"])


def test_lion_refuses_an_unknown_mode_when_built():
    with pytest.raises(ValueError, match="mode must be one of"):
        fo.scale_by_lion(mode="invalid_mode")


def _run(tx, steps=5):
    """The params after `steps` steps of `tx` on optax's test_rms_match_adam problem."""
    params = (jnp.array([1.0, 2.0]), jnp.array([3.0, 4.0]))
    state = tx.init(params)
    for _ in range(steps):
        grads = jax.tree.map(lambda p: 2 * p, params)  # of the squared norm
        updates, state = tx.update(grads, state)
        params = optax.apply_updates(params, updates)
    return params


def test_adam_equals_optax_with_injected_hyperparameters():
    """The excluded test_rms_match_adam, explained: Frost's scale_by_adam(b1=0) equals optax's
    scale_by_adam with b1, b2 injected as float32 state (as Frost stores them) bit for bit, and
    optax's plain scale_by_adam and scale_by_rms (1 - b2 from the Python float) to 1e-5."""
    frost = _run(fo.scale_by_adam(b1=0.0))
    injected = _run(optax.inject_hyperparams(optax.scale_by_adam)(b1=0.0, b2=0.999))
    plain = _run(optax.scale_by_adam(b1=0.0))
    rms = _run(optax.scale_by_rms(decay=0.999, eps_in_sqrt=False, bias_correction=True))
    for f, i, p, r in zip(frost, injected, plain, rms):
        np.testing.assert_array_equal(f, i)
        np.testing.assert_allclose(f, p, rtol=1e-5)
        np.testing.assert_allclose(f, r, rtol=1e-5)
