"""The ``rfkernels`` command line: one subcommand per job.

The CLI is the top layer: it may import everything below it (core,
analysis, figures), always lazily inside a subcommand, so that
``rfkernels --help`` stays fast and a missing optional dependency only
affects the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import sys

#: Subcommands: name -> (function adding arguments, function running it, help).
_COMMANDS: dict = {}

#: Modules of :mod:`rfkernels.commands` that register subcommands, in --help order.
COMMAND_MODULES = ("check", "mse", "compare", "sweep", "attention", "figures")


def command(name, help):  # noqa: A002 - argparse's word
    """Register ``add_arguments(parser)`` / ``run(args) -> int`` pairs."""

    def wrap(add_arguments):
        def bind(run):
            _COMMANDS[name] = (add_arguments, run, help)
            return run

        return bind

    return wrap


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def build_parser():
    import importlib

    from . import __version__

    for module in COMMAND_MODULES:
        importlib.import_module(f"rfkernels.commands.{module}")

    parser = argparse.ArgumentParser(
        prog="rfkernels",
        description=(
            "Variance of random-feature estimators of the softmax kernel exp(x.y): "
            "closed-form theory, Monte Carlo and figures."
        ),
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"rfkernels {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (add_arguments, _, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text, formatter_class=_Formatter)
        add_arguments(p)
    return parser


def main(argv=None):
    """Entry point of the ``rfkernels`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    _, run, _ = _COMMANDS[args.command]
    try:
        return int(run(args) or 0)
    except (ValueError, TypeError, ImportError, FloatingPointError, OverflowError) as exc:
        print(f"rfkernels {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover - use the registry of the imported module
    from rfkernels.cli import main as _main

    sys.exit(_main())
