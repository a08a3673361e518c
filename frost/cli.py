"""The `frost` command line: `frost train`, `sample`, `plot`, `tokenizer`, `rl`, `audit`.

Each topic registers its subcommands from its own `cli.py` (`add_commands(subparsers)`), which
parses arguments and calls the library; nothing in `frost/` imports this module.

Errors: a user's mistake (`frost.config.UsageError`: a bad flag, missing or too-small data, a
stale run directory) prints one line, `frost: error: ...`, and exits 2; other `FrostError`s (a
diverged run, a failed data worker) print their message and exit 1. `--debug` (anywhere on the
line) or FROST_DEBUG=1 shows the traceback instead.
"""
import argparse
import importlib
import os
import sys

from frost.config import FrostError, UsageError

TOPICS = ("frost.train.cli", "frost.text.cli", "frost.rl.cli", "frost.audit.cli")  # each has add_commands(subparsers)


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frost", description="Frost: a readable deep-learning stack on JAX. "
                                     "Add --debug to any command to see tracebacks.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for topic in TOPICS:
        importlib.import_module(topic).add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    debug = "--debug" in argv or os.environ.get("FROST_DEBUG") == "1"
    parser = _build_parser()
    args = parser.parse_args([a for a in argv if a != "--debug"])
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    try:
        return args.run(args) or 0
    except FrostError as e:
        if debug:
            raise
        print(f"frost: error: {e}", file=sys.stderr)
        return 2 if isinstance(e, UsageError) else 1
    except KeyboardInterrupt:
        print("frost: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
