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


_TRAIN_OPTIONS = ("data", "epochs", "batch_size", "lr", "optimizer", "weight_decay", "seed", "workers",
                  "max_steps", "limit", "mesh", "strategy")


def _train(args):
    """Options left unset take the job's defaults (frost.train.image.Config / frost.train.lm.Config)."""
    from frost import parallel
    parallel.initialize(args.coordinator, args.num_processes, args.process_id)
    if args.model == "gpt":
        from frost.train import lm as job
    else:
        from frost.train import image as job
    given = {k: getattr(args, k) for k in _TRAIN_OPTIONS if getattr(args, k) is not None}
    cfg = job.Config(model=args.model, out=args.out or f"runs/{args.model}", **given)
    result = job.train(cfg, resume=args.resume)
    print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in result.items()}, indent=1))
    if "accuracy" in result:
        print(f"test accuracy {100 * result['accuracy']:.2f}% after {result['steps']} steps "
              f"in {result['seconds'] / 60:.1f} min; run dir {cfg.out}")
    if "val_loss" in result:
        print(f"validation loss {result['val_loss']:.4f} after {result['steps']} steps "
              f"({result['tokens_per_s']:.0f} tokens/s); sample:\n{result['sample']}")


def _sample(args):
    from frost.train import lm
    print(lm.sample(args.run_dir, args.prompt, args.tokens, args.temperature, args.top_k, args.seed))


def _plot(args):
    from frost.train.plot import plot
    print(plot(args.run_dir, args.output))


# The trainable models, named here so that building the parser does not import JAX (which
# slows every command, `frost tokenizer` included); a test checks it against resnet.MODELS.
MODEL_NAMES = ("cifar_resnet18", "gpt", "resnet18", "resnet20", "resnet34", "resnet50", "resnet56")


def _train_commands(sub):
    p = sub.add_parser("train", help="train a model on real data",
                       description="Train a ResNet on images or a GPT on text; progress bar, metrics.jsonl, checkpoints in --out.")
    p.add_argument("model", choices=MODEL_NAMES)
    p.add_argument("--data", help="resnets: fashion-mnist (default), cifar10, or a folder with train/ and test/; "
                                  "gpt: kjv (default) or a UTF-8 text file")
    p.add_argument("--epochs", type=int, help="default 5 (resnets), 3 (gpt)")
    p.add_argument("--batch-size", type=int, help="default 128 (resnets), 32 (gpt)")
    p.add_argument("--lr", type=float, help="peak learning rate (default 0.1 resnets, 2e-3 gpt)")
    p.add_argument("--optimizer", choices=["sgd", "adamw", "lion"], help="default sgd (resnets), adamw (gpt)")
    p.add_argument("--weight-decay", type=float, help="default 5e-4 (resnets), 0.1 (gpt)")
    p.add_argument("--seed", type=int, help="default 0")
    p.add_argument("--workers", type=int, help="data-loading workers, 0: in the main process (default 2 resnets, 0 gpt)")
    p.add_argument("--out", default=None, help="run directory (default runs/MODEL)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out from its latest checkpoint")
    p.add_argument("--max-steps", type=int, help="stop after this many steps")
    p.add_argument("--limit", type=int, help="use only the first N examples (images; characters for gpt)")
    p.add_argument("--mesh", help="devices as AXIS=SIZE: data=8 (data parallel), data=4,model=2; default one device")
    p.add_argument("--strategy", choices=["dp", "fsdp", "tp"], help="with --mesh: replicated parameters (dp, "
                   "default), fully sharded (fsdp), or GPT tensor parallel over the model axis (tp)")
    p.add_argument("--coordinator", help="HOST:PORT of process 0, for multi-process training (or FROST_COORDINATOR)")
    p.add_argument("--num-processes", type=int, help="number of processes (or FROST_NUM_PROCESSES)")
    p.add_argument("--process-id", type=int, help="this process's index (or FROST_PROCESS_ID)")
    p.set_defaults(run=_train)
    p = sub.add_parser("plot", help="plot loss/accuracy curves of a run to PNG")
    p.add_argument("run_dir")
    p.add_argument("-o", "--output", default=None, help="PNG path (default RUN_DIR/curves.png)")
    p.set_defaults(run=_plot)
    p = sub.add_parser("sample", help="generate text from a trained GPT run")
    p.add_argument("run_dir")
    p.add_argument("--prompt", default="In the beginning")
    p.add_argument("--tokens", type=int, default=100)
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--top-k", type=int, default=40)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=_sample)


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
