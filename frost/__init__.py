"""Frost: a readable, fast deep-learning stack in Python on JAX.

    import frost
    model = frost.nn.Linear(3, 4, key=jax.random.key(0))
    opt = frost.optim.adamw(1e-3)

Sub-packages load on first use, so `import frost` stays cheap.
"""

import importlib

__version__ = "0.1.0"
_SUBMODULES = (
    "nn",
    "optim",
    "data",
    "text",
    "models",
    "train",
    "datasets",
    "kernels",
    "parallel",
    "rl",
    "audit",
    "interop",
)


def __getattr__(name):
    if name in _SUBMODULES:
        return importlib.import_module(f"frost.{name}")
    raise AttributeError(f"module 'frost' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBMODULES))
