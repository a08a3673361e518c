"""The `frost` command line: `frost train ...`, `frost tokenizer ...`, `frost plot ...`.

Each subcommand is a small function that parses its arguments and calls the library;
nothing in `frost/` imports this module.
"""
from __future__ import annotations

import argparse
import sys


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="frost", description="Frost: a readable deep-learning stack on JAX.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    # --- subcommands register here (one block per topic) ---
    # --- end of subcommands ---
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "run", None) is None:
        parser.print_help()
        return 0
    return args.run(args) or 0


if __name__ == "__main__":
    sys.exit(main())
