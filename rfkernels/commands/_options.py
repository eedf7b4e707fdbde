"""Option grammar shared by every subcommand: counts, numbers and lists.

- A count (``--trials``, ``--m``, ``--d``, ``--seed``, ...) is an integer
  that may be written ``1e6``: :func:`int_value`.
- A list option accepts commas and repeats alike, ``--m 4,8 --m 16`` is
  ``[4, 8, 16]``; a value given on the command line replaces the default, it
  never extends it: :func:`add_list`.
"""

from __future__ import annotations

import argparse
import decimal

#: Epilog of the subcommands with list options.
LIST_NOTE = ("List options take comma-separated values and may be repeated:\n"
             "--m 4,8 --m 16 means m = 4, 8, 16. Counts may be written 1e6.")


def int_value(text):
    """An integer written ``1000000``, ``1_000_000`` or ``1e6`` (exactly: no rounding)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = decimal.Decimal(text.strip())
    except decimal.InvalidOperation:
        raise argparse.ArgumentTypeError(f"expected an integer such as 100 or 1e6, got {text!r}") from None
    if not value.is_finite() or value != value.to_integral_value():
        raise argparse.ArgumentTypeError(f"expected an integer such as 100 or 1e6, got {text!r}")
    return int(value)


def float_value(text):
    """A float (``inf`` and ``nan`` are passed on: the subcommand's validation names them)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def _list_of(convert):
    def parse(text):
        items = [t.strip() for t in text.split(",")]
        if not any(items):
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}")
        if not all(items):
            raise argparse.ArgumentTypeError(f"empty item in the comma-separated list {text!r}")
        return [convert(t) for t in items]

    parse.__name__ = f"list of {getattr(convert, '__name__', 'values')}"
    return parse


int_list = _list_of(int_value)
float_list = _list_of(float_value)
str_list = _list_of(str)


class ExtendList(argparse.Action):
    """Collect the values of every occurrence; the first one replaces the default.

    (argparse's own ``action="extend"`` appends to a non-None default, so
    ``--m 8`` with default ``[4, 16]`` would give ``[4, 16, 8]``.)
    """

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        setattr(namespace, self.dest, [*current, *values])


def add_list(parser, *flags, convert, default=None, help, **kwargs):
    """``parser.add_argument`` for a list option of ``convert`` (int_value, float_value or str).

    ``default`` (a list, or None) is shown once in ``--help`` by the CLI's formatter.
    """
    parse = {int_value: int_list, float_value: float_list, str: str_list}[convert]
    if default is not None:
        default = list(default)
    return parser.add_argument(*flags, type=parse, action=ExtendList, default=default, help=help,
                               **kwargs)
