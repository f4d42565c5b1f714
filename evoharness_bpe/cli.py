"""The `evoharness` command line.

Built-in commands live here; installed sub-packages add theirs through the
``evoharness.commands`` entry-point group: each entry point is a function that receives the
argparse sub-parsers object and registers its commands (``train``, ``export`` …).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points

from .exceptions import EvoHarnessError

__all__ = ["build_parser", "main"]


def _demo(args: argparse.Namespace) -> int:
    from .demo import run_demo

    run_demo(args.out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The parser with the built-in commands and every installed plug-in command."""
    parser = argparse.ArgumentParser(prog="evoharness", description="Belief/Progress/Experience harness for agents.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo = commands.add_parser("demo", help="play a short scripted episode and print its dashboards")
    demo.add_argument("--out", default="evoharness-demo", help="folder for the trace and the experience store")
    demo.set_defaults(handler=_demo)
    for ep in entry_points(group="evoharness.commands"):
        ep.load()(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    try:
        return int(handler(args) or 0)
    except EvoHarnessError as exc:
        print(f"evoharness: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
