"""The `frost` command line: `frost train ...`, `frost tokenizer ...`, `frost plot ...`.

Each subcommand is a small function that parses its arguments and calls the library;
nothing in `frost/` imports this module.
"""
from __future__ import annotations

import argparse
import json
import sys


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frost", description="Frost: a readable deep-learning stack on JAX.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # --- subcommands register here (one block per topic) ---
    from frost.text.cli import add_commands as _text_commands
    _text_commands(sub)
    _train_commands(sub)
    # --- end of subcommands ---
    return parser


def _train(args):
    from frost.train import image
    cfg = image.Config(model=args.model, data=args.data, epochs=args.epochs, batch_size=args.batch_size,
                       lr=args.lr, optimizer=args.optimizer, weight_decay=args.weight_decay, seed=args.seed,
                       workers=args.workers, out=args.out or f"runs/{args.model}", max_steps=args.max_steps,
                       limit=args.limit)
    result = image.train(cfg, resume=args.resume)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}))
    if "accuracy" in result:
        print(f"test accuracy {100 * result['accuracy']:.2f}% after {result['steps']} steps "
              f"in {result['seconds'] / 60:.1f} min; run dir {cfg.out}")


def _plot(args):
    from frost.train.plot import plot
    print(plot(args.run_dir, args.output))


def _train_commands(sub):
    from frost.models.resnet import MODELS
    p = sub.add_parser("train", help="train a model on real data",
                       description="Train a ResNet; progress bar, metrics.jsonl, checkpoints in --out.")
    p.add_argument("model", choices=sorted(MODELS))
    p.add_argument("--data", default="fashion-mnist", help="fashion-mnist, cifar10, or a folder with train/ and test/")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.1, help="peak learning rate of the one-cycle schedule")
    p.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw", "lion"])
    p.add_argument("--weight-decay", type=float, default=5e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--workers", type=int, default=2, help="data-loading workers (0: in the main process)")
    p.add_argument("--out", default=None, help="run directory (default runs/MODEL)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--max-steps", type=int, default=None, help="stop after this many steps (smoke tests)")
    p.add_argument("--limit", type=int, default=None, help="use only the first N train and test images (smoke tests)")
    p.set_defaults(run=_train)
    p = sub.add_parser("plot", help="plot loss/accuracy curves of a run to PNG")
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", default=None, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(run=_plot)


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
