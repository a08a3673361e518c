"""frost.train: the training loop (loop.py), checkpoints (checkpoint.py), and jobs (image.py)."""
from frost.train import checkpoint
from frost.train.loop import (NonFiniteError, TrainState, classification_loss, cross_entropy, evaluate, fit,
                              make_eval_step, make_train_step, restore, save)

__all__ = [n for n in dir() if not n.startswith("_")]
