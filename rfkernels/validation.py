"""Argument checks shared by every public function.

Each check raises before any work starts, with a message that names the
argument and says what was expected. Nothing here computes anything.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np


def check_choice(value, name, choices):
    """Return ``value`` if it is one of ``choices``, else raise ValueError listing them."""
    if not isinstance(value, str) or value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {valid}; got {value!r}")
    return value


def check_int(value, name, minimum=1):
    """Return ``value`` as a Python int >= ``minimum``.

    Integral floats (``1e6``) are accepted; booleans, fractions and
    non-numbers are not.
    """
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer; got {value!r}")
    if _is_complex_scalar(value):
        raise complex_error(name, f"the complex number {value!r}; {name} must be an integer")
    if isinstance(value, numbers.Integral):
        out = int(value)
    elif isinstance(value, numbers.Real) and float(value).is_integer():
        out = int(value)
    else:
        try:
            out = operator.index(value)
        except TypeError:
            raise TypeError(f"{name} must be an integer; got {value!r}") from None
    if out < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}; got {value!r}")
    return out


def check_int_array(value, name, minimum=1):
    """Return ``value`` as an int64 array with every entry >= ``minimum``."""
    arr = np.asarray(value)
    if arr.dtype.kind == "c" or (
        arr.dtype == object and any(_is_complex_scalar(v) for v in arr.reshape(-1))
    ):
        raise complex_error(name, f"complex ({value!r}); {name} must hold integers")
    if arr.dtype == bool or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise TypeError(f"{name} must be an integer or array of integers; got {value!r}")
    if np.issubdtype(arr.dtype, np.floating):
        if not np.all(np.isfinite(arr)) or np.any(arr != np.round(arr)):
            raise TypeError(f"{name} must hold integers; got {value!r}")
    limit = 2**62  # far beyond any meaningful count; below int64's wrap-around
    if arr.dtype == object or np.any(np.abs(arr.astype(np.float64)) > limit):
        raise ValueError(f"{name} must hold integers below 2**62; got {value!r}")
    out = arr.astype(np.int64)
    if np.any(out < minimum):
        raise ValueError(f"{name} must be >= {minimum}; got {value!r}")
    return out


def _is_complex_scalar(v):
    """A complex number that is not real (Python, NumPy or any ``numbers.Complex``)."""
    return isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real)


def complex_error(name, what):
    return ValueError(
        f"Complex data not supported: {name} is {what}; pass real numbers "
        "(the .real part, if that is what is meant)"
    )


def check_real(value, name, xp=np):
    """Return ``value`` as a float64 array of ``xp``, refusing anything that is not real.

    Complex arrays and scalars, object arrays holding complex numbers,
    strings, dates and other non-numeric data raise ``ValueError`` (for
    complex data the message contains "Complex data not supported", as in
    scikit-learn) instead of being cast: NumPy would drop an imaginary part
    with only a warning and parse strings as numbers. Booleans and integers
    are real and are converted. CuPy arrays (``xp`` = cupy) are checked on
    the device, by dtype.
    """
    if xp is not np and type(value).__module__.startswith("cupy"):
        arr = value
    else:
        try:
            arr = np.asarray(value)
        except (ValueError, TypeError) as exc:  # ragged lists; device arrays NumPy cannot read
            raise type(exc)(
                f"{name} must be an array of real numbers; got a {type(value).__name__} "
                f"that NumPy cannot convert ({exc})"
            ) from None
    kind = arr.dtype.kind
    if kind == "c":
        raise complex_error(name, f"of complex dtype {arr.dtype}")
    if kind == "O":
        flat = arr.reshape(-1)
        if any(_is_complex_scalar(v) for v in flat):
            raise complex_error(name, "an object array holding complex numbers")
        if any(v is None or isinstance(v, (str, bytes)) for v in flat):
            raise ValueError(
                f"{name} must hold real numbers; got an object array holding None or strings")
        try:
            arr = arr.astype(np.float64)
        except (ValueError, TypeError):
            raise ValueError(
                f"{name} must hold real numbers; got an object array of "
                f"{', '.join(sorted({type(v).__name__ for v in flat}))}"
            ) from None
    elif kind not in "biuf":
        what = {"U": "strings", "S": "bytes", "M": "datetimes", "m": "timedeltas"}.get(
            kind, f"dtype {arr.dtype}")
        raise ValueError(f"{name} must hold real numbers; got {what}")
    return xp.asarray(arr, dtype=xp.float64)


def check_finite(value, name, xp=np):
    """Return ``value`` as a real float64 array of ``xp`` after checking it is finite.

    Non-real data is refused first (:func:`check_real`).
    """
    arr = check_real(value, name, xp)
    if not bool(xp.all(xp.isfinite(arr))):
        raise ValueError(f"{name} must be finite (no inf or NaN)")
    return arr


def nonnegative_scalar(value, name):
    """One finite real number >= 0 as a float (complex and non-numbers refused)."""
    arr = check_finite(value, name)
    if arr.ndim != 0 or arr < 0:
        raise ValueError(f"{name} must be one finite number >= 0; got {value!r}")
    return float(arr)


def check_bool(value, name):
    """Return ``value`` as a Python bool; only ``True``/``False`` (or NumPy's) are booleans.

    ``"yes"``, ``1`` or ``None`` are refused with ``TypeError``: a truthy
    non-boolean usually means an argument landed in the wrong place.
    """
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"{name} must be True or False; got {value!r}")


def check_vectors(value, name, xp=np, ndim_min=1):
    """A finite float64 array of vectors, the last axis being the dimension d >= 1."""
    arr = check_finite(value, name, xp)
    if arr.ndim < ndim_min:
        raise ValueError(
            f"{name} must have at least {ndim_min} dimension(s) (..., d); got shape {arr.shape}"
        )
    if arr.shape[-1] < 1:
        raise ValueError(f"{name} must have d >= 1 along its last axis; got shape {arr.shape}")
    return arr


def check_matrix(value, name, xp=np):
    """A finite float64 2-D array (n, d)."""
    arr = check_finite(value, name, xp)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape (n, d); got shape {arr.shape}")
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have d >= 1 columns; got shape {arr.shape}")
    return arr


def check_same_d(shapes, names):
    """All arrays share the last dimension d."""
    ds = [s[-1] for s in shapes]
    if len(set(ds)) > 1:
        desc = ", ".join(f"{n} has d={d}" for n, d in zip(names, ds))
        raise ValueError(f"dimension mismatch: {desc}; all must share d")
    return ds[0]


def seed_sequence(seed, *, root=False):
    """The ``numpy.random.SeedSequence`` behind ``seed``: the toolkit's one seed helper.

    Every ``seed=`` argument of rfkernels goes through here (or through
    :func:`check_seed`, which builds on it), like SciPy's
    ``check_random_state``:

    - ``None``: fresh entropy from the OS;
    - an int >= 0: ``SeedSequence(seed)``;
    - a ``SeedSequence``: itself;
    - a ``numpy.random.Generator``: consumed once, 128 bits of it becoming the
      entropy of a new ``SeedSequence``. Results record that entropy, so
      every result stays reproducible from its record.

    ``root=True`` (seeds from which per-point streams are derived by
    ``spawn_key``) refuses a ``SeedSequence`` that already has a spawn key.
    """
    if isinstance(seed, np.random.SeedSequence):
        if root and seed.spawn_key:
            raise ValueError(f"seed must be a root SeedSequence (empty spawn_key); got spawn_key "
                             f"{seed.spawn_key}: pass SeedSequence({seed.entropy}) instead")
        return seed
    if seed is None:
        return np.random.SeedSequence()
    if isinstance(seed, np.random.Generator):
        return np.random.SeedSequence(int.from_bytes(seed.bytes(16), "little"))
    if isinstance(seed, (numbers.Integral, np.integer)) and not isinstance(seed, (bool, np.bool_)):
        if int(seed) < 0:
            raise ValueError(f"seed must be a non-negative integer; got {seed!r}")
        return np.random.SeedSequence(int(seed))
    raise TypeError(
        "seed must be None, a non-negative int, a numpy.random.SeedSequence "
        f"or a numpy.random.Generator; got {type(seed).__name__}"
    )


def check_seed(seed):
    """A ``numpy.random.Generator`` for ``seed`` (any form :func:`seed_sequence` accepts).

    A ``Generator`` is returned as is, so a caller drawing repeatedly from
    its own generator advances it; everything else goes through
    :func:`seed_sequence`.
    """
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed_sequence(seed))


def available_memory():
    """Bytes of physical memory of this machine (None where the OS does not say)."""
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_memory(nbytes, what, fraction=0.8, *, reduce=None):
    """Raise MemoryError, before any allocation, if ``what`` needs more than the machine has.

    ``nbytes`` is the caller's estimate of its peak allocation; the limit is
    ``fraction`` of the physical memory (unknown: no check). ``reduce`` names
    what the caller can change, e.g. ``"--n, --d-k or --d-v"`` or ``"m or
    chunk"`` (the arguments or command-line options it takes); None: the
    advice is to reduce the sizes ``what`` names.
    """
    total = available_memory()
    if total is not None and nbytes > fraction * total:
        advice = "the sizes named" if reduce is None else reduce
        raise MemoryError(
            f"{what} needs about {nbytes / 2**30:.3g} GiB of memory; this machine has "
            f"{total / 2**30:.3g} GiB (reduce {advice})"
        )
    return nbytes


def renamed(module, aliases, name, stacklevel=3):
    """A deprecated module attribute's value (a module ``__getattr__``'s body), with its warning.

    ``aliases`` maps an old name to ``(new, value)``: where it lives now (for
    the message) and a callable giving its value; any other name raises
    AttributeError as a module would. ``stacklevel`` points the warning at
    the user's line (3: a module ``__getattr__`` calling this directly).
    Listed in ``CHANGELOG.md``.
    """
    if name not in aliases:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    new, value = aliases[name]
    import warnings

    warnings.warn(f"{module}.{name} is deprecated; use {new}", DeprecationWarning,
                  stacklevel=stacklevel)
    return value()
