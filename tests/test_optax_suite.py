"""optax's own optimizer tests (optax/_src/alias_test.py, from the installed optax wheel) run
against frost.optim: the test module's `alias` is replaced by a copy whose adam, adamw, lion and
sgd are Frost's, and the AliasTest cases of those four optimizers run unmodified (converge on the
parabola and Rosenbrock in float32 and complex64, no recompilation, extra update arguments,
optax.inject_hyperparams, optax.MultiSteps, explicit and preserved dtypes, dtype stability).

The cases run with JAX's standard dtype promotion, as in optax's CI: optax's own code under test
(MultiSteps, inject_hyperparams) is not written for conftest's strict mode. Frost's optimizers are
tested under strict promotion in tests/test_optim.py.
"""

import types

import jax
import pytest
from absl.testing import parameterized  # absl comes with optax
from optax._src import alias_test  # a plain import: a missing dependency fails, never skips

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

frost_alias = types.ModuleType("frost_alias")
vars(frost_alias).update(vars(alias_test.alias))
vars(frost_alias).update({n: getattr(fo, n) for n in FROST})
alias_test.alias = frost_alias


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
