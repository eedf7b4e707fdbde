"""The ``rfkernels`` command line: one subcommand per job.

The CLI is the top layer: it may import everything below it (core,
analysis, figures), always lazily inside a subcommand, so that
``rfkernels --help`` stays fast and a missing optional dependency only
affects the subcommand that needs it.
"""

from __future__ import annotations

import argparse
import re
import sys

#: Subcommands: name -> (function adding arguments, function running it, help).
_COMMANDS: dict = {}

#: Modules of :mod:`rfkernels.commands` that register subcommands, in --help order.
COMMAND_MODULES = ("check", "mse", "rank", "compare", "sweep", "attention", "capacity", "diagnose",
                   "transplant", "figures")


def command(name, help):
    """Register ``add_arguments(parser)`` / ``run(args) -> int`` pairs."""

    def wrap(add_arguments):
        def bind(run):
            _COMMANDS[name] = (add_arguments, run, help)
            return run

        return bind

    return wrap


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Each option's default shown once, as ``(default: ...)``, lists as ``4,16``.

    Nothing is added where the help text already states its default, where
    the default is None (it comes from elsewhere, e.g. a sweep's TOML file)
    and for flags (``store_true``).
    """

    def _split_lines(self, text, width):
        # never break inside a hyphenated choice ("orthogonal-xformers", "orthogonal-unfixed-qr")
        import textwrap

        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width,
                             break_on_hyphens=False)

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (not action.option_strings or "default" in text or default is None
                or default is argparse.SUPPRESS or isinstance(default, bool)):
            return text
        if isinstance(default, (list, tuple)):
            default = ",".join(str(v) for v in default)
        return f"{text} (default: {str(default).replace('%', '%%')})"


#: A token that starts with "-" and is a value, never an option of ours (those are ``--name``
#: and ``-h``): a number (``-1e-3``, ``-.5``, a list ``-1,2``), ``-inf``, ``-nan`` or ``-pi/4``.
_NEGATIVE_VALUE = re.compile(r"-(?:[0-9.]|inf|nan|pi)", re.IGNORECASE)


def join_negative_values(argv):
    """``argv`` with each ``--option -value`` written ``--option=-value``.

    argparse takes a token starting with "-" for an option unless it looks
    like ``-1`` or ``-.5``, so ``--angle -inf``, ``--norm-x -1e-3`` or
    ``--angle -pi/4`` would end in "expected one argument". Joined, the value
    reaches the option's converter, which accepts it or names the option in
    its error. Tokens after ``--`` are left as they are.
    """
    out = []
    for i, token in enumerate(argv):
        if token == "--":
            out.extend(argv[i:])
            break
        prev = out[-1] if out else ""
        if (_NEGATIVE_VALUE.match(token) and prev.startswith("--") and len(prev) > 2
                and "=" not in prev):
            out[-1] = f"{prev}={token}"
        else:
            out.append(token)
    return out


class Parser(argparse.ArgumentParser):
    """The CLI's parser: negative values after their option, errors in the subcommand's usage.

    ``subcommands`` maps a subcommand's name to its parser (filled by
    :func:`build_parser`), so an unknown option after ``rfkernels mse`` is
    reported with ``usage: rfkernels mse ...``, not the top-level usage.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.subcommands = {}

    def parse_known_args(self, args=None, namespace=None):
        if args is None:
            args = sys.argv[1:]
        return super().parse_known_args(join_negative_values(list(args)), namespace)

    def parse_args(self, args=None, namespace=None):
        args, extras = self.parse_known_args(args, namespace)
        if extras:
            parser = self.subcommands.get(getattr(args, "command", None), self)
            parser.error(f"unrecognized arguments: {' '.join(extras)}")
        return args


def build_parser():
    import importlib

    from rfkernels import __version__

    for module in COMMAND_MODULES:
        importlib.import_module(f"rfkernels.commands.{module}")

    parser = Parser(
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
        parser.subcommands[name] = p
    return parser


#: Exceptions that end a subcommand with exit status 2 and one line on stderr.
#: ``OSError`` covers files and folders (missing, read-only, a file where a
#: folder was expected, a full disk) and unreachable Dask schedulers;
#: ``RuntimeError`` covers a killed pool worker (``BrokenProcessPool``).
USER_ERRORS = (ValueError, TypeError, ImportError, FloatingPointError, OverflowError,
               MemoryError, OSError, RuntimeError)


def _one_line(exc):
    """The message of ``exc`` on one line, with its type where the message alone is unclear."""
    text = " ".join(str(exc).split())
    if isinstance(exc, OSError) and exc.filename is not None and exc.strerror:
        text = f"{exc.filename}: {exc.strerror}"
        if exc.filename2 is not None:
            text += f" ({exc.filename2})"
    if not text:
        text = type(exc).__name__
    elif isinstance(exc, (MemoryError, RuntimeError)) and type(exc).__name__ not in text:
        text = f"{type(exc).__name__}: {text}"
    return text


def main(argv=None):
    """Entry point of the ``rfkernels`` console script; returns the exit status.

    A user never sees a traceback: errors the user can act on print one line
    ``rfkernels COMMAND: error: ...`` to stderr and return 2; Ctrl-C returns 130.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    _, run, _ = _COMMANDS[args.command]
    try:
        return int(run(args) or 0)
    except KeyboardInterrupt:
        print(f"rfkernels {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader went away (``rfkernels figures --list | head -2``)
        _silence_stdout()
        return 141  # 128 + SIGPIPE, as a shell reports a pipe's writer
    except USER_ERRORS as exc:
        print(f"rfkernels {args.command}: error: {_one_line(exc)}", file=sys.stderr)
        return 2


def _silence_stdout():
    """Point stdout at /dev/null, so that the interpreter's last flush does not fail again.

    (Python's documentation, "Note on SIGPIPE", signal module.)
    """
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # stdout without a file descriptor (captured by a test)
        pass


if __name__ == "__main__":  # pragma: no cover - use the registry of the imported module
    from rfkernels.commands.cli import main as _main

    sys.exit(_main())
