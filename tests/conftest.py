"""Strict JAX modes for every test: CPU only, no silent dtype or rank promotion."""
import os
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
# `frost train` keeps compiled programs in $FROST_CACHE; the tests' go to a fresh folder per run.
os.environ["FROST_CACHE"] = tempfile.mkdtemp(prefix="frost-test-cache-")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_numpy_rank_promotion", "raise")


@pytest.fixture
def key():
    return jax.random.key(0)
