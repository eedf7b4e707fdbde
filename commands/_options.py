"""Option grammar shared by every subcommand: counts, numbers, angles, names and lists.

- A count (``--trials``, ``--m``, ``--d``, ``--seed``, ...) is an integer
  that may be written ``1e6``: :func:`int_value`; one with a range
  (``--seed``: >= 0, ``--workers``) is :func:`int_range`.
- A negative value may follow its option (``--angle -pi/4``, ``--norm-x
  -1e-3``): the CLI's parser joins the two before argparse sees them
  (:func:`rfkernels.commands.cli.join_negative_values`).
- An angle is a number of radians or a rational multiple of pi
  (``pi``, ``pi/2``, ``3pi/4``, ``2*pi/3``, ``-pi/4``): :func:`angle_value`;
  the angle between x and y, in [0, pi], is :func:`angle_in_range`, a norm
  (finite, >= 0) :func:`norm_value`.
- A name of a file, folder or address is not empty: :func:`name_value`.
- A name (``--kind``, ``--ensemble``, ``--norms``, ``--backend``,
  ``--proposal``) is one of the choices the registry (or the core) has when
  the parser is built, refused at parse time otherwise: :func:`choice`.
- A list option accepts commas and repeats alike, ``--m 4,8 --m 16`` is
  ``[4, 8, 16]``; a value given on the command line replaces the default, it
  never extends it, and a repeated entry counts once (first occurrence
  order): :func:`add_list`.
"""

from __future__ import annotations

import argparse
import decimal
import math
import re

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


def int_range(minimum, maximum=None):
    """An argparse ``type=`` converter: an integer (as :func:`int_value`) in [minimum, maximum].

    ``maximum`` None: no upper end. ``int_range(0)`` is a seed, ``int_range(1,
    1024)`` a number of worker processes; text out of range is an
    :class:`argparse.ArgumentTypeError` stating the range.
    """
    expected = (f"an integer >= {minimum}" if maximum is None
                else f"an integer from {minimum} to {maximum}")

    def convert(text):
        try:
            value = int_value(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if value < minimum or (maximum is not None and value > maximum):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    convert.__name__ = "integer"
    return convert


#: Most worker processes of ``--workers`` (far more than any machine's cores; a pool's
#: queues are sized by it and overflow a C int beyond 2**31 - 2).
MAX_WORKERS = 1024

#: ``--seed``: the root entropy of a SeedSequence, an integer >= 0.
seed_value = int_range(0)


def name_value(what):
    """An argparse ``type=`` converter: a file or folder name that is not empty (nor only blanks).

    ``what`` says what is expected, e.g. ``"folder name"``: ``--out ""`` is
    ``argument --out: expected a folder name, got an empty string``.
    """

    def convert(text):
        if not text.strip():
            got = "an empty string" if not text else f"only blanks ({text!r})"
            raise argparse.ArgumentTypeError(f"expected a {what}, got {got}")
        return text

    convert.__name__ = what
    return convert


def float_value(text):
    """A float (``inf`` and ``nan`` are passed on: the subcommand's validation names them)."""
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


#: ``[sign][a][*]pi[/b]``: a and b unsigned numbers; "*" only after a.
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_PI_MULTIPLE = re.compile(
    rf"(?P<sign>[+-]?)\s*(?:(?P<a>{_NUMBER})\s*\*?\s*)?pi\s*(?:/\s*(?P<b>{_NUMBER}))?",
    re.IGNORECASE)


#: Share of the physical memory the arrays sized by one option may claim
#: (passed to :func:`rfkernels.validation.check_memory`, and used for the limit it states).
MEMORY_SHARE = 0.8


def check_count_memory(option, count, bytes_each, what):
    """MemoryError naming ``option``, before any work, where ``count`` items do not fit in memory.

    ``bytes_each``: the bytes one unit of ``option`` costs (e.g. one sample
    of every grid row); ``what``: what they are. The message states the
    memory needed, the machine's and the largest ``option`` that fits.
    """
    from ..validation import available_memory, check_memory

    nbytes = count * bytes_each
    try:
        check_memory(nbytes, what, fraction=MEMORY_SHARE)
    except MemoryError:
        total = available_memory()
        fits = int(MEMORY_SHARE * total) // bytes_each
        raise MemoryError(
            f"{option} {count}: {what} would need about {nbytes / 2**30:.3g} GiB of memory; this "
            f"machine has {total / 2**30:.3g} GiB, enough for {option} up to about {fits}") from None


def positive_float(maximum, why):
    """An argparse ``type=`` converter: a number in (0, maximum]; ``why`` says what breaks above."""

    def convert(text):
        value = float_value(text)
        if not (0 < value <= maximum):  # NaN fails too
            raise argparse.ArgumentTypeError(
                f"expected a number in (0, {maximum:g}] ({why}), got {text!r}")
        return value

    convert.__name__ = "number"
    return convert


def angle_value(text):
    """An angle in radians: a number (``1.5``) or a rational multiple of pi.

    ``pi``, ``pi/2``, ``3pi/4``, ``3*pi/4``, ``2.5pi``, ``-pi/4``: ``[a][*]pi[/b]``
    with numbers a and b (b not 0) is ``a * math.pi / b``. ``inf`` and
    ``nan`` are passed on like :func:`float_value`; the range check (``angle
    must lie in [0, pi]``) is the core's.
    """
    try:
        return float(text)
    except ValueError:
        pass
    found = _PI_MULTIPLE.fullmatch(text.strip()) if isinstance(text, str) else None
    if found is not None:
        a = float(found["a"]) if found["a"] else 1.0
        b = float(found["b"]) if found["b"] else 1.0
        if b != 0 and math.isfinite(a) and math.isfinite(b):
            value = a * math.pi / b
            return -value if found["sign"] == "-" else value
    raise argparse.ArgumentTypeError(
        f"expected an angle in radians such as 1.5, pi, pi/2 or 3pi/4, got {text!r}")


def angle_in_range(text):
    """:func:`angle_value` in [0, pi] (the core's rule for the angle between x and y)."""
    value = angle_value(text)
    if not (0 <= value <= math.pi):  # NaN fails too
        raise argparse.ArgumentTypeError(
            f"expected an angle in [0, pi] radians such as 1.5, pi/2 or 3pi/4, got {text!r}")
    return value


def norm_value(text):
    """A norm: a finite number >= 0 (the core's rule for |x|, |y| and |x + y|)."""
    value = float_value(text)
    if not (0 <= value < math.inf):  # NaN fails too
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, got {text!r}")
    return value


def choice(axis_or_choices, name=None, refused=None):
    """An argparse ``type=`` converter accepting one of a fixed set of names.

    ``axis_or_choices`` is a registry axis (``"kind"``, ``"ensemble"``,
    ``"norms"``: the names registered when this is called, i.e. when the
    parser is built, so a kind a plugin registered before appears) or a
    sequence of names (e.g. :data:`rfkernels.backends.BACKENDS`). Any other
    text is an :class:`argparse.ArgumentTypeError` listing the choices, which
    argparse reports as ``argument --OPTION: ...`` with exit status 2. The
    converter's ``choices`` attribute is the tuple (for help texts); it works
    for single options and, as ``convert``, for :func:`add_list`.

    ``refused`` maps names that are not choices here (registered names a
    subcommand does not take) to why: such a name is refused with that
    reason before the list of choices.
    """
    if isinstance(axis_or_choices, str):
        from ..estimators import registry

        choices = tuple(registry.names(axis_or_choices))
        name = name or axis_or_choices
    else:
        choices = tuple(axis_or_choices)
    if not choices:
        raise ValueError(f"no choices for {name or axis_or_choices!r}")

    refused = dict(refused or {})

    def convert(text):
        if text in choices:
            return text
        why = f" ({refused[text]})" if text in refused else ""
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r}{why}; expected one of {', '.join(choices)}")

    convert.__name__ = name or "choice"
    convert.choices = choices
    return convert


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

    A repeated entry counts once, where it first appeared: ``--kind
    positive,trig --kind trig`` is ``["positive", "trig"]``. With ``nargs``
    (each value itself a list) the lists are joined into one.
    (argparse's own ``action="extend"`` appends to a non-None default, so
    ``--m 8`` with default ``[4, 16]`` would give ``[4, 16, 8]``.)
    """

    def __call__(self, parser, namespace, values, option_string=None):
        current = getattr(namespace, self.dest, None)
        if current is None or current is self.default:
            current = []
        items = [*current]
        for v in values:
            items.extend(v if isinstance(v, list) else [v])
        setattr(namespace, self.dest, _distinct(items))


def _distinct(items):
    """``items`` without repeats (by ``==``), in first occurrence order."""
    out = []
    for v in items:
        if v not in out:
            out.append(v)
    return out


#: The list parsers of the plain element converters.
_LISTS = {int_value: int_list, float_value: float_list, str: str_list}


def add_list(parser, *flags, convert, default=None, help, **kwargs):
    """``parser.add_argument`` for a list option whose items are ``convert(item)``.

    ``convert`` is int_value, float_value, angle_value, str or any argparse
    ``type=`` converter, e.g. :func:`choice`: the text is split at commas
    and each item converted (an ArgumentTypeError names the option).
    ``default`` (a list, or None) is shown once in ``--help`` by the CLI's formatter.
    """
    parse = _LISTS.get(convert) or _list_of(convert)
    if default is not None:
        default = list(default)
    return parser.add_argument(*flags, type=parse, action=ExtendList, default=default, help=help,
                               **kwargs)


def add_kernel_options(parser):
    """``--kernel`` (a registered target kernel, default softmax) and ``--gamma`` (the Gaussian kernel's)."""
    kernels = choice("kernel")
    parser.add_argument("--kernel", type=kernels, default="softmax",
                        help=f"target kernel, one of {', '.join(kernels.choices)}: softmax SM(x, y) = "
                             "exp(x.y), or gaussian K(x, y) = exp(-gamma |x - y|^2) (needs --gamma)")
    parser.add_argument("--gamma", type=float_value, default=None,
                        help="the Gaussian kernel's gamma, a finite number > 0 (with --kernel "
                             "gaussian only)")
