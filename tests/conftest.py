"""Strict JAX modes for every test: CPU only, no silent dtype or rank promotion."""

import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# `frost train` keeps compiled programs in $FROST_CACHE; the tests' go to a fresh folder per run.
os.environ["FROST_CACHE"] = tempfile.mkdtemp(prefix="frost-test-cache-")
# XLA:CPU compiles without LLVM optimisation, here and in the subprocesses the tests start: the
# tests' programs are small, so compiling is most of their time, and at the default level LLVM
# spends seconds on each random-number initialiser shape (jax.random.normal of one (16, 16, 3, 3)
# kernel: 2.4 s -> 0.4 s; tests/test_nn.py + test_gpt.py: 106 s -> 61 s of CPU). The HLO passes
# are the same; results can differ from the default's in the last bits, as between two CPUs.
# Give the level in XLA_FLAGS yourself to test another.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()

import jax
import pytest

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
