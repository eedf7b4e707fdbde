"""File input of ``rfkernels diagnose``: a user's own attention queries, keys and values.

Two forms are accepted by :func:`load_qkv`:

- one ``.npz`` file (:func:`numpy.savez` or :func:`numpy.savez_compressed`)
  holding arrays named exactly ``q`` and ``k``, and optionally ``v``; its
  other members are ignored (and listed in the provenance);
- two or three ``.npy`` files (:func:`numpy.save`), read in the order q, k, v.

Any other combination raises ``ValueError``. Arrays come back as stored (no
dtype conversion, no check of their values or shapes: the public
``diagnose()`` validates them, once). Nothing is unpickled
(``allow_pickle=False``): object, structured and void arrays are refused.

Every array's header is read first, so that a file that is not NumPy data, a
missing ``q`` or ``k``, a refused dtype, or arrays too large for this
machine's memory (counting each array as stored plus its float64 copy; the
message gives each file's shape and dtype as its header claims them) raise
before any data is loaded.
Errors are one line naming the file (and the member of an ``.npz``); a
missing, unreadable or directory path raises the ``OSError`` of ``open`` with
its ``filename`` set.

:func:`synthetic_qkv` makes the queries, keys and values of one layer of a
random model, for trying the diagnosis (``docs/diagnose.rst``, the benchmark).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.lib import format as npy_format

from rfkernels import validation

__all__ = ["SYNTHETIC_GAINS", "LoadedQKV", "load_qkv", "memory_limit", "synthetic_qkv"]

#: Share of this machine's memory a diagnosis may plan to use (as :func:`rfkernels.validation.check_memory`).
MEMORY_FRACTION = 0.8


def memory_limit():
    """``(bytes of this machine, bytes a diagnosis may use)``, or None where the OS does not say."""
    total = validation.available_memory()
    return None if total is None else (total, MEMORY_FRACTION * total)


def gib(nbytes):
    """Bytes as GiB, for messages."""
    return f"{nbytes / 2**30:.3g} GiB"

#: Per-head gains of :func:`synthetic_qkv` (repeated over the heads): from a
#: diffuse head (0.25) to a sharp one (2).
SYNTHETIC_GAINS = (0.25, 0.5, 1.0, 2.0)


def synthetic_qkv(L=512, d=32, heads=4, d_model=128, gains=SYNTHETIC_GAINS, seed=7):
    r"""Q, K, V of shape (heads, L, d): one layer of a random model.

    Tokens :math:`x_t \sim N(0, I_{d_{model}})`; head h projects them with
    :math:`W_q^h, W_k^h` of N(0, g_h^2/d_model) entries (g_h the gains,
    repeated over the heads) and :math:`W_v^h` of N(0, 1/d_model) entries, so
    a query has :math:`E|q|^2 = d\,g_h^2` before the temperature. Drawn in
    the order x, W_q, W_k, W_v from ``numpy.random.default_rng(seed)``.
    """
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((L, d_model))
    g = np.resize(np.asarray(gains, dtype=np.float64), heads)[:, None, None] / math.sqrt(d_model)
    wq = rng.standard_normal((heads, d_model, d)) * g
    wk = rng.standard_normal((heads, d_model, d)) * g
    wv = rng.standard_normal((heads, d_model, d)) / math.sqrt(d_model)
    return tuple(np.einsum("lm,hmd->hld", x, w) for w in (wq, wk, wv))

_FORMS = ("expected one .npz file holding arrays named q and k (and optionally v), "
          "or two or three .npy files in the order q, k[, v]")
_ROLES = ("q", "k", "v")
_HASH_CHUNK = 1 << 20
_LISTED = 10  # names shown in a message before "..."
# what a corrupt .npy header, zip directory or zip member raises while it is read
_READ_ERRORS = (ValueError, EOFError, zipfile.BadZipFile, zlib.error)


@dataclass(frozen=True, eq=False)
class LoadedQKV:
    """Queries, keys and (optionally) values read by :func:`load_qkv`.

    Attributes
    ----------
    q, k : numpy.ndarray
        The arrays, as stored (dtype and memory order unchanged).
    v : numpy.ndarray or None
        The values; None where the input held none.
    sources : dict
        Provenance, strict-JSON-able: for each of ``"q"``, ``"k"``, ``"v"``
        (``"v"``: None when absent) a dict with ``"file"`` (absolute path),
        ``"member"`` (the ``.npz`` member, e.g. ``"q.npy"``, or None),
        ``"shape"`` (list of int), ``"dtype"`` (str), ``"sha256"`` (hex digest
        of the whole file) and ``"ignored"`` (the other members of the
        ``.npz``, sorted; empty for a ``.npy``).
    """

    q: np.ndarray
    k: np.ndarray
    v: np.ndarray | None
    sources: dict


@dataclass(frozen=True)
class _Header:
    """One array as its header describes it, read before any of its data."""

    role: str
    name: str  # the path as given
    member: str | None
    shape: tuple
    dtype: np.dtype
    available: int  # bytes after the header, in the file or member
    label: str  # the file (and member), for messages


def load_qkv(paths):
    """Read attention queries, keys and optional values from NumPy files.

    Parameters
    ----------
    paths : str, os.PathLike, or sequence of 1 to 3 of them
        One ``.npz`` file holding arrays ``q``, ``k`` and optionally ``v``,
        or two or three ``.npy`` files in the order q, k, v.

    Returns
    -------
    LoadedQKV

    Raises
    ------
    TypeError
        ``paths`` is not a file name or a list of them (None, a number, bytes).
    OSError
        A path is missing, a directory or unreadable (``filename`` is set).
    ValueError
        Another combination of files; a file that is not a NumPy ``.npy``
        or ``.npz`` file, or is truncated; an ``.npz`` without ``q`` or
        ``k`` (the message lists the arrays found); an object, structured
        or void dtype.
    MemoryError
        The arrays, with their float64 copies, would not fit in memory;
        raised before any data is read.
    """
    names = _check_form(paths)
    with contextlib.ExitStack() as stack:
        files = {name: stack.enter_context(open(name, "rb")) for name in dict.fromkeys(names)}
        if len(names) == 1:
            zf = stack.enter_context(_open_zip(names[0], files[names[0]]))
            headers, ignored = _npz_headers(names[0], zf)
        else:
            zf, ignored = None, []
            headers = [_npy_header(files[name], name, role) for role, name in zip(_ROLES, names)]
        _check_memory(headers, files)
        for h in headers:
            _check_size(h)
        digests = {name: _sha256(fp) for name, fp in files.items()}
        arrays = {h.role: _read_array(h, files[h.name], zf) for h in headers}
    sources = dict.fromkeys(_ROLES)
    for h in headers:
        sources[h.role] = {
            "file": str(Path(h.name).absolute()), "member": h.member,
            "shape": [int(n) for n in h.shape], "dtype": str(h.dtype),
            "sha256": digests[h.name], "ignored": list(ignored),
        }
    return LoadedQKV(arrays["q"], arrays["k"], arrays.get("v"), sources)


def _check_form(paths):
    """The paths as a list of str; ValueError unless they are one of the accepted forms."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    try:
        names = [os.fspath(p) for p in paths]
    except TypeError:  # None, a number, or a list holding one
        names = None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"load_qkv takes one file name or a list of 1 to 3 file names (str or "
                        f"os.PathLike): {_FORMS[len('expected '):]}; got {paths!r}")
    suffixes = [Path(n).suffix.lower() for n in names]
    if suffixes == [".npz"] or (len(names) in (2, 3) and set(suffixes) == {".npy"}):
        return names
    raise ValueError(f"{_FORMS}; got {', '.join(names) if names else 'no file'}")


def _listing(names):
    """``names`` joined for a message, at most the first ``_LISTED`` of them."""
    names = list(names)
    shown = ", ".join(names[:_LISTED]) + (", ..." if len(names) > _LISTED else "")
    return shown or "none"


def _not_numpy(label, what, exc):
    """The one-line ValueError for a file (or member) that is not NumPy data."""
    lines = str(exc).strip().splitlines()
    reason = lines[0] if lines else type(exc).__name__
    return ValueError(f"{label}: not a NumPy {what} file ({reason})")


@contextlib.contextmanager
def _open_zip(name, fp):
    """``fp`` as a :class:`zipfile.ZipFile`; ValueError if it is not a zip archive."""
    try:
        zf = zipfile.ZipFile(fp)
    except _READ_ERRORS as exc:
        raise _not_numpy(name, ".npz", exc) from None
    with zf:
        yield zf


def _parse_header(fp, label):
    """Shape and dtype from the ``.npy`` header at ``fp``'s position (no data is read)."""
    try:
        version = npy_format.read_magic(fp)
        if version == (1, 0):
            shape, _, dtype = npy_format.read_array_header_1_0(fp)
        elif version == (2, 0):
            shape, _, dtype = npy_format.read_array_header_2_0(fp)
        else:  # 3.0 only serves structured dtypes with non-latin-1 field names
            raise ValueError(f"format version {version[0]}.{version[1]} is not supported")
    except _READ_ERRORS as exc:
        raise _not_numpy(label, ".npy", exc) from None
    if any(n < 0 for n in shape):
        raise _not_numpy(label, ".npy", f"negative dimension in shape {shape}")
    return tuple(shape), dtype


def _check_dtype(label, dtype):
    """ValueError, naming ``label`` once, for an object, structured or void dtype."""
    if dtype.kind == "O":
        raise ValueError(f"{label}: a numeric array is expected; got an array of object dtype: "
                         "it holds Python objects (dtype object), which cannot be read without "
                         "pickle, and rfkernels never unpickles; save a numeric array "
                         "(e.g. numpy.asarray(x, dtype=float))")
    if dtype.kind == "V":
        raise ValueError(f"{label}: a numeric array is expected; got an array of structured or "
                         f"void dtype {dtype}")


def _npy_header(fp, name, role):
    shape, dtype = _parse_header(fp, name)
    _check_dtype(name, dtype)
    available = os.fstat(fp.fileno()).st_size - fp.tell()
    return _Header(role, name, None, shape, dtype, available, name)


def _npz_headers(name, zf):
    """Headers of q, k and (where present) v in an ``.npz``, and its other members."""
    members = zf.namelist()
    arrays = [m[:-4] for m in members if m.endswith(".npy")]
    if not arrays:
        raise _not_numpy(name, ".npz", f"a zip archive with no .npy arrays; members: "
                                       f"{_listing(members)}")
    for role in ("q", "k"):
        if role not in arrays:
            raise ValueError(f"{name}: no array named {role!r} (arrays found: "
                             f"{_listing(arrays)}); {_FORMS}")
    headers = []
    for role in _ROLES:
        member = f"{role}.npy"
        if member not in members:
            continue
        label = f"{name}, member {member}"
        try:
            with zf.open(member) as mfp:
                shape, dtype = _parse_header(mfp, label)
                available = zf.getinfo(member).file_size - mfp.tell()
        except _READ_ERRORS as exc:  # a bad zip entry (encrypted, unknown compression)
            raise _not_numpy(label, ".npy", exc) from None
        _check_dtype(label, dtype)
        headers.append(_Header(role, name, member, shape, dtype, available, label))
    used = {h.member for h in headers}
    return headers, sorted(m for m in members if m not in used)


def _check_memory(headers, files):
    """MemoryError, before any data is read, where the arrays as their headers describe them
    (each as stored plus its float64 copy) would not fit in this machine's memory."""
    need = sum(math.prod(h.shape) * 2 * max(h.dtype.itemsize, 8) for h in headers)
    limit = memory_limit()
    if limit is None or need <= limit[1]:
        return
    claims = "; ".join(f"{h.role} in {h.label}: shape {tuple(int(n) for n in h.shape)} of "
                       f"{h.dtype} as its header claims" for h in headers)
    raise MemoryError(
        f"loading {', '.join(h.role for h in headers)} from {', '.join(files)} needs about "
        f"{gib(need)} of memory, each array as stored and as float64 ({claims}); this machine "
        f"has {gib(limit[0])}: use smaller arrays (fewer heads or rows), or a machine with more "
        "memory")


def _check_size(header):
    """ValueError if the file (or member) holds fewer data bytes than its header announces."""
    needed = math.prod(header.shape) * header.dtype.itemsize
    if header.available < needed:
        raise _not_numpy(header.label, ".npy",
                         f"truncated: shape {header.shape} of {header.dtype} needs {needed} "
                         f"bytes of data, it holds {header.available}")


def _sha256(fp):
    """Hex SHA-256 of the whole file open at ``fp``, read in chunks."""
    fp.seek(0)
    digest = hashlib.sha256()
    while chunk := fp.read(_HASH_CHUNK):
        digest.update(chunk)
    return digest.hexdigest()


def _read_array(header, fp, zf):
    """The array of ``header``, as stored (``allow_pickle=False``)."""
    try:
        if zf is None:
            fp.seek(0)
            return npy_format.read_array(fp, allow_pickle=False)
        with zf.open(header.member) as mfp:
            return npy_format.read_array(mfp, allow_pickle=False)
    except _READ_ERRORS as exc:  # a corrupt deflate stream, a bad CRC
        raise _not_numpy(header.label, ".npy", exc) from None
