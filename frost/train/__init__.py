"""frost.train: the job mechanism (job.py; jobs image.py, lm.py; configs.py), the loop (loop.py),
losses (losses.py), checkpoints (checkpoint.py), metrics logs (metrics.py), plots (plot.py).

Names load on first use, so the CLI can read the job configs without importing JAX."""

import importlib

_NAMES = {
    "classification_loss": "losses",
    "cross_entropy": "losses",
    "FitConfig": "loop",
    "NonFiniteError": "loop",
    "TrainState": "loop",
    "evaluate": "loop",
    "fit": "loop",
    "make_eval_step": "loop",
    "make_train_step": "loop",
    "restore": "loop",
    "save": "loop",
}
__all__ = sorted(_NAMES)


def __getattr__(name):
    if name in _NAMES:
        return getattr(importlib.import_module(f"frost.train.{_NAMES[name]}"), name)
    raise AttributeError(f"module 'frost.train' has no attribute {name!r}")
