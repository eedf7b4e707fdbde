"""Counter-based random numbers: Philox4x32-10 and our normal, chi-square and chi.

Every variate is a pure function of ``(key, trial, slot, stream)``: nothing
here holds state, so the numbers do not depend on how work is split into
chunks, threads or devices, nor on the order or shape in which they are
requested. The same numbers are computed by scalar Numba code in
:mod:`rfkernels.engine.rng_numba`, for use inside ``prange`` loops.

The vectorised functions here are written once against an array namespace
``xp`` (NumPy or CuPy) and use only operations both provide.

Counter layout
--------------
A Philox4x32 block is computed from a key ``(k0, k1)`` and a counter of four
32-bit words::

    c0 = slot                         # index of the variate within the trial, < 2**32
    c1 = (stream << 16) | attempt     # stream < 2**16, attempt < 2**16
    c2 = trial & 0xffffffff           # trial is a 64-bit index
    c3 = trial >> 32

``stream`` names what the variates are for (callers choose; the defaults are
:data:`STREAM_NORMAL`, :data:`STREAM_CHI`, :data:`STREAM_CHI_SQUARE`) and must
be below ``2**16``. Normals come in pairs: the normals of slots ``2j`` and
``2j + 1`` are the two outputs of one Box--Muller transform of the block at
``c0 = j`` (see :func:`normal`). ``attempt`` is the index of a rejection-sampling attempt
(0 for variates that need no rejection); attempts ``0 .. 0xfffe`` are
available to the chi-square sampler and ``attempt = 0xffff``
(:data:`ATTEMPT_BOOST`) is reserved for the extra uniform of the shape < 1
chi-square (see :func:`chi_square`). Two variates with the same ``(key, trial,
slot, stream)`` are the same number; change any one of them to get an
independent one. The stream, not the function, tells variates apart:
:func:`normal` and :func:`chi_square` called with the same stream read the
same Philox blocks at attempt 0, so give each use its own stream.

The transcendental functions of the transforms (``log``, ``exp``, ``sin``,
``cos``) are those of :mod:`rfkernels.numerics.elementary`, built from correctly
rounded IEEE operations only, so the NumPy, CuPy and Numba versions of every
variate are the same bits (and the Numba loops vectorise).
"""

from __future__ import annotations

import numbers

import numpy as np

from .numerics import elementary as elem
from .validation import check_real, seed_sequence
from .backends import get_array_module

__all__ = [
    "ATTEMPT_BOOST",
    "MAX_ATTEMPTS",
    "STREAM_CHI",
    "STREAM_CHI_SQUARE",
    "STREAM_NORMAL",
    "chi",
    "chi_square",
    "chi_square_with_normal",
    "key_from_seed",
    "normal",
    "normal_pair",
    "philox4x32_10",
    "uniform_pair",
]

# Philox4x32 constants (Salmon et al. 2011, and Random123's philox.h).
PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10

#: Default stream of :func:`normal`.
STREAM_NORMAL = 0
#: Default stream of :func:`chi` (row norms of orthogonal projections).
STREAM_CHI = 1
#: Default stream of :func:`chi_square`.
STREAM_CHI_SQUARE = 2

#: Streams must be below this (they occupy the high 16 bits of counter word 1).
STREAM_LIMIT = 1 << 16
#: Attempt number whose block gives the ``U**(1/a)`` uniform when the shape a < 1.
ATTEMPT_BOOST = 0xFFFF
#: Number of Marsaglia-Tsang attempts available (attempts 0 .. MAX_ATTEMPTS - 1).
MAX_ATTEMPTS = ATTEMPT_BOOST

#: Philox and generator constants as the kernels take them (rfkernels.engine.rng_numba imports them).
MASK32_U64 = np.uint64(0xFFFFFFFF)
SHIFT32_U64 = np.uint64(32)
M0_U64 = np.uint64(PHILOX_M0)
M1_U64 = np.uint64(PHILOX_M1)
W0_U64 = np.uint64(PHILOX_W0)
W1_U64 = np.uint64(PHILOX_W1)

TWO_M52 = 2.0**-52
TWO_M32 = 2.0**-32
MT_SQUEEZE = 0.0331  # Marsaglia & Tsang (2000), the squeeze 1 - 0.0331 x**4
ONE_THIRD = 1.0 / 3.0


# ---------------------------------------------------------------------------
# Philox4x32-10
# ---------------------------------------------------------------------------


def _philox_words(c0, c1, c2, c3, k0, k1, xp):
    """Philox4x32-10 on uint64 arrays holding 32-bit words (broadcasting).

    All arguments are uint64 arrays (or 0-d arrays) of any namespace with
    values below 2**32; the four returned uint64 arrays (of the broadcast
    shape) also are. The inputs are not modified; after the first round the
    work is done in place on the arrays the round created.
    """
    shape = np.broadcast_shapes(*(a.shape for a in (c0, c1, c2, c3, k0, k1)))
    c0, c1, c2, c3 = (xp.broadcast_to(c, shape) for c in (c0, c1, c2, c3))
    for r in range(PHILOX_ROUNDS):
        if r:
            k0 = (k0 + W0_U64) & MASK32_U64
            k1 = (k1 + W1_U64) & MASK32_U64
        p0 = c0 * M0_U64  # < 2**64: the full 32x32 -> 64 product, a new array
        p1 = c2 * M1_U64
        hi1 = p1 >> SHIFT32_U64
        hi1 ^= c1
        hi1 ^= k0
        p1 &= MASK32_U64
        hi0 = p0 >> SHIFT32_U64
        hi0 ^= c3
        hi0 ^= k1
        p0 &= MASK32_U64
        c0, c1, c2, c3 = hi1, p1, hi0, p0
    return c0, c1, c2, c3


def _as_words(value, name, nwords, xp):
    """``value`` as a uint64 array of 32-bit words with a last axis of ``nwords``."""
    arr = xp.asarray(value)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array of 32-bit words; got dtype {arr.dtype}")
    if arr.ndim < 1 or arr.shape[-1] != nwords:
        raise ValueError(f"{name} must have shape (..., {nwords}); got shape {arr.shape}")
    if arr.size and (
        (arr.dtype.kind == "i" and bool(xp.any(arr < 0))) or bool(xp.any(arr > 0xFFFFFFFF))
    ):
        raise ValueError(f"{name} words must lie in [0, 2**32 - 1]")
    return arr.astype(xp.uint64)


def philox4x32_10(counter, key, xp=None):
    """The Philox4x32-10 bijection of Random123, on arrays of counters and keys.

    Parameters
    ----------
    counter : array_like of uint32, shape (..., 4)
        Counter words ``c0, c1, c2, c3``.
    key : array_like of uint32, shape (..., 2)
        Key words ``k0, k1``; broadcast against ``counter[..., 0]``.
    xp : module, optional
        Array namespace (``numpy`` or ``cupy``); taken from the inputs when None.

    Returns
    -------
    out : ndarray of uint32, shape (..., 4)
        The four output words for each counter.

    Notes
    -----
    With 32-bit words, one round maps ``(c0, c1, c2, c3)`` under key
    ``(k0, k1)`` to

    .. math::

        (\\mathrm{hi}(M_1 c_2) \\oplus c_1 \\oplus k_0,\\;
         \\mathrm{lo}(M_1 c_2),\\;
         \\mathrm{hi}(M_0 c_0) \\oplus c_3 \\oplus k_1,\\;
         \\mathrm{lo}(M_0 c_0))

    where hi/lo are the upper and lower 32 bits of the 64-bit product,
    ``M0 = 0xD2511F53`` and ``M1 = 0xCD9E8D57``. Ten rounds are applied, the
    key being bumped by the Weyl constants ``(0x9E3779B9, 0xBB67AE85)``
    (mod 2**32) before each round but the first. The products are taken in
    uint64, so the result is exact on every backend; it matches Random123's
    published known-answer vectors.

    References
    ----------
    .. [1] J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel
       random numbers: as easy as 1, 2, 3", Proc. SC'11, 2011.
    """
    if xp is None:
        xp = get_array_module(counter, key)
    ctr = _as_words(counter, "counter", 4, xp)
    k = _as_words(key, "key", 2, xp)
    words = _philox_words(
        ctr[..., 0], ctr[..., 1], ctr[..., 2], ctr[..., 3], k[..., 0], k[..., 1], xp
    )
    return xp.stack(words, axis=-1).astype(xp.uint32)


# ---------------------------------------------------------------------------
# Keys, counters and uniforms
# ---------------------------------------------------------------------------


def key_from_seed(seed):
    """The Philox key ``(k0, k1)`` for a seed.

    Parameters
    ----------
    seed : None, int >= 0, numpy.random.SeedSequence or numpy.random.Generator
        Any seed :func:`rfkernels.validation.seed_sequence` accepts; a
        ``SeedSequence`` (for instance one of ``SeedSequence(s).spawn(n)``) is
        used as it is.

    Returns
    -------
    key : ndarray of uint32, shape (2,)
        ``SeedSequence(seed).generate_state(2, numpy.uint32)``.

    Notes
    -----
    Every variate of this module depends only on ``(key, trial, slot)`` and
    the stream it is drawn from, so recording the seed (its entropy and spawn
    key) is enough to regenerate any single number, on any backend and with
    any chunking or thread count.
    """
    seq = seed_sequence(seed)
    return seq.generate_state(2, np.uint32)


def _as_index(value, name, bits, xp):
    """``value`` as a uint64 array of non-negative integers below ``2**bits``."""
    arr = xp.asarray(value)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be a non-negative integer or integer array; got dtype {arr.dtype}")
    if arr.size:
        if arr.dtype.kind == "i" and bool(xp.any(arr < 0)):
            raise ValueError(f"{name} must be >= 0")
        if bits < 64 and bool(xp.any(arr > (1 << bits) - 1)):
            raise ValueError(f"{name} must be < 2**{bits}")
    return arr.astype(xp.uint64)


def _check_stream(stream):
    if isinstance(stream, (bool, np.bool_)) or not isinstance(stream, (numbers.Integral, np.integer)):
        raise TypeError(f"stream must be an integer; got {stream!r}")
    if not 0 <= int(stream) < STREAM_LIMIT:
        raise ValueError(f"stream must be an integer in [0, {STREAM_LIMIT - 1}]; got {stream!r}")
    return int(stream)


def _as_key(key, xp):
    k = _as_words(key, "key", 2, xp)
    return k[..., 0], k[..., 1]


def _block(k0, k1, trial, slot, stream, attempt, xp):
    """The Philox block of ``(key, trial, slot, stream, attempt)``; uint64 words."""
    c1 = xp.asarray((stream << 16) | attempt, dtype=xp.uint64)
    return _philox_words(slot, c1, trial & MASK32_U64, trial >> SHIFT32_U64, k0, k1, xp)


def _uniform52(lo, hi, xp):
    """Uniform in (0, 1) from two words: the midpoints ``(j + 1/2) 2**-52`` of 2**52 cells.

    ``j`` is the top 52 bits of ``(hi << 32) | lo``. Every value is exact in
    float64 and lies in ``[2**-53, 1 - 2**-53]``.
    """
    bits = (hi << SHIFT32_U64) | lo
    return ((bits >> np.uint64(12)).astype(xp.float64) + 0.5) * TWO_M52


def _uniform32(w, xp):
    """Uniform in (0, 1) from one word: ``(w + 1/2) 2**-32``."""
    return (w.astype(xp.float64) + 0.5) * TWO_M32


# ---------------------------------------------------------------------------
# Elementwise evaluation (in cache-sized chunks on NumPy)
# ---------------------------------------------------------------------------

#: Entries per chunk on NumPy: keeps the temporaries of the ~100 uint64
#: operations of a Philox block in cache (faster than whole arrays: docs/performance.md).
_CHUNK = 1 << 15


def _per_entry(a, shape, xp):
    """``a`` broadcast to ``shape`` and flattened: one value per entry."""
    return xp.broadcast_to(a, shape).reshape(-1)


def _shared_or_per_entry(a, shape, xp):
    """A 0-d ``a`` as is (shared by every entry), else :func:`_per_entry`."""
    return a if a.ndim == 0 else _per_entry(a, shape, xp)


def _map_chunks(core, args, n, xp):
    """``core(*args)`` for ``n`` entries; on NumPy one chunk of entries at a time.

    Each argument is 1-D of length ``n`` or 0-d (shared). ``core`` is
    elementwise (each variate depends only on its own counter) and returns a
    tuple of 1-D arrays, so chunking changes nothing but speed.
    """
    if xp is not np or n <= _CHUNK:
        return core(*args)
    outs = None
    for start in range(0, n, _CHUNK):
        sl = slice(start, min(start + _CHUNK, n))
        res = core(*(a if a.ndim == 0 else a[sl] for a in args))
        if outs is None:
            outs = tuple(np.empty(n, dtype=r.dtype) for r in res)
        for o, r in zip(outs, res):
            o[sl] = r
    return outs


# ---------------------------------------------------------------------------
# Normal
# ---------------------------------------------------------------------------


def _prepare(key, trial, slot, stream, xp, slot_bits=32):
    """Validated ``(shape, [k0, k1, trial, slot])`` with trial and slot flattened per entry."""
    stream = _check_stream(stream)
    k0, k1 = _as_key(key, xp)
    t = _as_index(trial, "trial", 64, xp)
    s = _as_index(slot, "slot" if slot_bits == 32 else "pair", slot_bits, xp)
    shape = np.broadcast_shapes(k0.shape, k1.shape, t.shape, s.shape)
    args = [_shared_or_per_entry(v, shape, xp) for v in (k0, k1)]
    args += [_per_entry(v, shape, xp) for v in (t, s)]
    return stream, shape, args


def normal(key, trial, slot, stream=STREAM_NORMAL, xp=None):
    """Standard normal variates at ``(key, trial, slot, stream)``.

    Parameters
    ----------
    key : array_like of uint32, shape (2,) or (..., 2)
        Philox key, usually :func:`key_from_seed`.
    trial : int or array_like of int
        Trial index, ``0 <= trial < 2**64``.
    slot : int or array_like of int
        Index of the variate within its trial, ``0 <= slot < 2**32``.
    stream : int, default 0
        What the variates are for, ``0 <= stream < 2**16``.
    xp : module, optional
        Array namespace (``numpy`` or ``cupy``); taken from the inputs when None.

    Returns
    -------
    z : ndarray of float64
        Shape of ``trial``, ``slot`` and ``key[..., 0]`` broadcast together.

    Notes
    -----
    The normals of slots ``2j`` and ``2j + 1`` come from one Philox block
    ``(w0, w1, w2, w3)`` at counter
    ``(j, stream << 16, trial & 0xffffffff, trial >> 32)``: two uniforms
    ``u1`` from ``(w1 << 32) | w0`` and ``u2`` from ``(w3 << 32) | w2``, each
    ``(i + 1/2) 2**-52`` with ``i`` the top 52 bits (so in the open interval
    (0, 1)), and both branches of Box--Muller,

    .. math::

        z_{2j} = \\sqrt{-2 \\log u_1}\\, \\cos(2 \\pi u_2), \\qquad
        z_{2j+1} = \\sqrt{-2 \\log u_1}\\, \\sin(2 \\pi u_2),

    which are independent standard normals. :func:`normal_pair` returns both
    at once; :func:`rfkernels.engine.rng_numba.normal_at` computes the
    same number.

    References
    ----------
    .. [1] J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel
       random numbers: as easy as 1, 2, 3", Proc. SC'11, 2011.
    .. [2] G. E. P. Box and M. E. Muller, "A note on the generation of random
       normal deviates", Ann. Math. Statist. 29(2), 610-611, 1958.
    """
    if xp is None:
        xp = get_array_module(key, trial, slot)
    stream, shape, args = _prepare(key, trial, slot, stream, xp)
    n = args[-1].shape[0]
    (z,) = _map_chunks(lambda *a: (_normal_1d(*a, stream, xp),), args, n, xp)
    return z.reshape(shape)


def normal_pair(key, trial, pair, stream=STREAM_NORMAL, xp=None):
    """The normals of slots ``2 * pair`` and ``2 * pair + 1`` of :func:`normal`, from one block.

    Parameters
    ----------
    key, trial, stream, xp
        As in :func:`normal`.
    pair : int or array_like of int
        Index of the pair, ``0 <= pair < 2**31``.

    Returns
    -------
    z_even, z_odd : ndarray of float64
        ``normal(key, trial, 2 * pair)`` and ``normal(key, trial, 2 * pair + 1)``
        (the cosine and sine branches of one Box--Muller transform).
    """
    if xp is None:
        xp = get_array_module(key, trial, pair)
    stream, shape, args = _prepare(key, trial, pair, stream, xp, slot_bits=31)
    n = args[-1].shape[0]
    z0, z1 = _map_chunks(lambda *a: _normal_pair_1d(*a, stream, xp), args, n, xp)
    return z0.reshape(shape), z1.reshape(shape)


def uniform_pair(key, trial, slot, stream, xp=None):
    """Two uniforms in (0, 1) and a fair bit from the Philox block of ``(key, trial, slot, stream)``.

    Returns ``(u, v, bit)``: ``u`` from words 0 and 1 and ``v`` from words 2
    and 3 (``(j + 1/2) 2**-52``, ``j`` the top 52 bits of the 64-bit pair), and
    ``bit`` the lowest bit of word 2 as a bool array, which ``v`` does not use,
    so the three are independent. The Monte Carlo proposal draws its mixture
    component from them (:mod:`rfkernels.engine`).
    """
    if xp is None:
        xp = get_array_module(key, trial, slot)
    stream, shape, args = _prepare(key, trial, slot, stream, xp)
    n = args[-1].shape[0]
    u, v, bit = _map_chunks(lambda *a: _uniform_pair_1d(*a, stream, xp), args, n, xp)
    return u.reshape(shape), v.reshape(shape), bit.reshape(shape)


def _uniform_pair_1d(k0, k1, t, s, stream, xp):
    w0, w1, w2, w3 = _block(k0, k1, t, s, stream, 0, xp)
    return _uniform52(w0, w1, xp), _uniform52(w2, w3, xp), (w2 & np.uint64(1)) != 0


def _normal_pair_1d(k0, k1, t, j, stream, xp):
    w0, w1, w2, w3 = _block(k0, k1, t, j, stream, 0, xp)
    return _box_muller(_uniform52(w0, w1, xp), _uniform52(w2, w3, xp), xp)


def _normal_1d(k0, k1, t, s, stream, xp):
    z0, z1 = _normal_pair_1d(k0, k1, t, s >> np.uint64(1), stream, xp)
    return xp.where((s & np.uint64(1)) != 0, z1, z0)


def _box_muller(u1, u2, xp):
    """Both Box--Muller normals ``r cos(2 pi u2)``, ``r sin(2 pi u2)``, ``r = sqrt(-2 log u1)``."""
    r = xp.sqrt(-2.0 * elem.log(u1, xp))
    sin, cos = elem.sincos_2pi(u2, xp)
    return r * cos, r * sin


# ---------------------------------------------------------------------------
# Chi-square and chi
# ---------------------------------------------------------------------------


def _check_dof(dof, xp):
    arr = check_real(dof, "dof", xp)
    if arr.size and not bool(xp.all(xp.isfinite(arr) & (arr > 0))):
        raise ValueError("dof must be finite and > 0 (degrees of freedom of the chi-square)")
    return arr


def _mt_attempt(k0, k1, t, s, stream, attempt, d, c, xp):
    """One Marsaglia-Tsang attempt for every entry: (accepted, gamma value, companion normal).

    The companion is the sine branch of the attempt's Box--Muller pair (the
    cosine branch is the attempt's normal ``x``), independent of everything
    the attempt decides.
    """
    w0, w1, w2, w3 = _block(k0, k1, t, s, stream, attempt, xp)
    x, companion = _box_muller(_uniform52(w0, w1, xp), _uniform32(w2, xp), xp)
    u = _uniform32(w3, xp)
    base = 1.0 + c * x
    v = base * base * base
    positive = v > 0.0
    x2 = x * x
    accepted = positive & (u < 1.0 - MT_SQUEEZE * (x2 * x2))  # the squeeze
    # the logarithmic test, only where the squeeze did not decide (~10% at large shapes)
    todo = xp.nonzero(positive & ~accepted)[0]
    if todo.size:
        v_, u_, d_ = v[todo], u[todo], _take(d, todo)
        # v > 0 is never subnormal (v >= 2**-159), so our log applies
        full = elem.log(u_, xp) < 0.5 * x2[todo] + d_ * ((1.0 - v_) + elem.log(v_, xp))
        accepted[todo[full]] = True
    return accepted, d * v, companion


def _take(a, idx):
    """``a[idx]`` for a 1-D array; a 0-d array (the same for every entry) as is."""
    return a if a.ndim == 0 else a[idx]


def _gamma_mt(k0, k1, t, s, a, stream, xp):
    """Gamma(a) for ``n`` entries; a < 1 boosted from a + 1. Returns (gamma, attempts, companion).

    ``t`` and ``s`` are 1-D of length ``n``; ``k0``, ``k1`` and ``a`` are either
    1-D of length ``n`` or 0-d (shared by every entry).
    """
    n = t.shape[0]
    small = a < 1.0
    alpha = xp.where(small, a + 1.0, a)  # the shape Marsaglia-Tsang samples, >= 1
    d = alpha - ONE_THIRD
    c = 1.0 / xp.sqrt(9.0 * d)
    args = (k0, k1, t, s, d, c)
    ok, g, companion = _mt_attempt(k0, k1, t, s, stream, 0, d, c, xp)
    out = xp.where(ok, g, xp.nan)
    attempts = ok.astype(xp.int64)
    todo = xp.nonzero(~ok)[0]
    attempt = 1
    while todo.size:
        if attempt >= MAX_ATTEMPTS:
            raise RuntimeError(
                f"chi_square: {todo.size} entries rejected {MAX_ATTEMPTS} times in a row; "
                "the counter layout has no more attempts"
            )
        k0_, k1_, t_, s_, d_, c_ = (_take(v, todo) for v in args)
        ok, g, _ = _mt_attempt(k0_, k1_, t_, s_, stream, attempt, d_, c_, xp)
        done = todo[ok]
        out[done] = g[ok]
        attempts[done] = attempt + 1
        todo = todo[~ok]
        attempt += 1
    if bool(xp.any(small)):
        idx = xp.nonzero(xp.broadcast_to(small, (n,)))[0]
        k0_, k1_, t_, s_, a_ = (_take(v, idx) for v in (k0, k1, t, s, a))
        w0, w1, _, _ = _block(k0_, k1_, t_, s_, stream, ATTEMPT_BOOST, xp)
        u = _uniform52(w0, w1, xp)
        out[idx] = out[idx] * elem.exp(elem.log(u, xp) / a_, xp)
    return out, attempts, companion


def _chi_square(key, trial, slot, dof, stream, xp):
    if xp is None:
        xp = get_array_module(key, trial, slot, dof)
    stream = _check_stream(stream)
    k0, k1 = _as_key(key, xp)
    t = _as_index(trial, "trial", 64, xp)
    s = _as_index(slot, "slot", 32, xp)
    f = _check_dof(dof, xp)
    a = xp.asarray(0.5 * f)
    shape = np.broadcast_shapes(k0.shape, k1.shape, t.shape, s.shape, a.shape)
    args = [_shared_or_per_entry(v, shape, xp) for v in (k0, k1)]
    args += [_per_entry(v, shape, xp) for v in (t, s)]
    args.append(_shared_or_per_entry(a, shape, xp))
    n = args[-2].shape[0]
    g, attempts, companion = _map_chunks(lambda *a: _gamma_mt(*a, stream, xp), args, n, xp)
    return (2.0 * g).reshape(shape), attempts.reshape(shape), companion.reshape(shape)


def chi_square(key, trial, slot, dof, stream=STREAM_CHI_SQUARE, xp=None):
    """Chi-square variates with real ``dof > 0`` at ``(key, trial, slot, stream)``.

    Parameters
    ----------
    key : array_like of uint32, shape (2,) or (..., 2)
        Philox key, usually :func:`key_from_seed`.
    trial : int or array_like of int
        Trial index, ``0 <= trial < 2**64``.
    slot : int or array_like of int
        Index of the variate within its trial, ``0 <= slot < 2**32``.
    dof : float or array_like of float
        Degrees of freedom, finite and > 0 (need not be integers).
    stream : int, default 2
        What the variates are for, ``0 <= stream < 2**16``.
    xp : module, optional
        Array namespace (``numpy`` or ``cupy``); taken from the inputs when None.

    Returns
    -------
    q : ndarray of float64
        Shape of ``trial``, ``slot``, ``dof`` and ``key[..., 0]`` broadcast.

    Raises
    ------
    ValueError
        If some ``dof`` is not finite and > 0, or an index is out of range.

    Notes
    -----
    :math:`\\chi^2_k = 2\\,\\Gamma(k/2)`. For a shape :math:`a \\ge 1` the
    gamma variate is Marsaglia and Tsang's squeeze method: with
    :math:`d = a - 1/3`, :math:`c = 1/\\sqrt{9d}`, attempt ``n`` (``n = 0,
    1, ...``) takes the Philox block ``(w0, w1, w2, w3)`` at counter
    ``(slot, (stream << 16) | n, trial & 0xffffffff, trial >> 32)`` and forms

    - a normal :math:`x = \\sqrt{-2\\log u_1}\\cos(2\\pi u_2)`, ``u1`` the
      52-bit uniform of ``(w1 << 32) | w0`` and ``u2 = (w2 + 1/2) 2**-32``
      (the sine branch is not used here; :func:`chi_square_with_normal`
      returns that of attempt 0),
    - a uniform ``U = (w3 + 1/2) 2**-32``,
    - :math:`v = (1 + c x)^3`,

    and accepts :math:`d v` when :math:`v > 0` and either
    :math:`U < 1 - 0.0331 x^4` or
    :math:`\\log U < x^2/2 + d(1 - v + \\log v)`. Otherwise the next attempt
    is made. For :math:`a < 1`, :math:`\\Gamma(a) = \\Gamma(a + 1) U^{1/a}`
    with ``U`` the 52-bit uniform of words ``(w0, w1)`` of the block at
    attempt number ``0xffff`` (:data:`ATTEMPT_BOOST`), so at most
    ``0xffff`` attempts are available (acceptance is above 95% per attempt,
    so this limit is never reached in practice; reaching it raises
    ``RuntimeError``). The factor is computed as ``exp(log(U) / a)`` rather
    than with ``**``, whose scalar-exponent fast paths in NumPy (``U**2.0``
    for ``dof = 1``) round differently from its array path and would make a
    number depend on whether ``dof`` was given as a scalar or an array. For
    very small ``a`` the factor underflows to 0 about as often as the true
    value is below the smallest double.

    Every ``log``, ``sin``, ``cos`` and ``exp`` here is one of
    :mod:`rfkernels.numerics.elementary`, so the vectorised loop (which retries only
    the rejected entries, attempt by attempt) and the scalar loop of
    :func:`rfkernels.engine.rng_numba.chi_square_at` make the same
    accept/reject choices and return the same bits.

    References
    ----------
    .. [1] G. Marsaglia and W. W. Tsang, "A simple method for generating
       gamma variables", ACM Trans. Math. Softw. 26(3), 363-372, 2000.
    .. [2] J. K. Salmon, M. A. Moraes, R. O. Dror and D. E. Shaw, "Parallel
       random numbers: as easy as 1, 2, 3", Proc. SC'11, 2011.
    """
    q, _, _ = _chi_square(key, trial, slot, dof, stream, xp)
    return q


def chi_square_with_normal(key, trial, slot, dof, stream=STREAM_CHI_SQUARE, xp=None):
    """:func:`chi_square` and an independent standard normal from the same Philox block.

    Parameters
    ----------
    key, trial, slot, dof, stream, xp
        As in :func:`chi_square`.

    Returns
    -------
    q : ndarray of float64
        ``chi_square(key, trial, slot, dof, stream)``.
    z : ndarray of float64
        The sine branch :math:`\\sqrt{-2\\log u_1}\\sin(2\\pi u_2)` of the
        Box--Muller pair of attempt 0, whose cosine branch is the
        Marsaglia--Tsang normal of that attempt.

    Notes
    -----
    The two branches of Box--Muller are independent standard normals, and
    the attempt's uniform ``U`` and later attempts use other words and
    blocks, so ``z`` is independent of ``q``. One Philox block, one ``log``
    and one ``sincos`` thus give a chi-square (in the usual case where
    attempt 0 is accepted) and a normal: what a projection of the orthogonal
    ensemble needs (its chi(d) length and one coordinate of its direction).
    """
    q, _, z = _chi_square(key, trial, slot, dof, stream, xp)
    return q, z


def chi(key, trial, slot, dof, stream=STREAM_CHI, xp=None):
    """Chi variates, ``sqrt(chi_square(key, trial, slot, dof, stream))``.

    Parameters
    ----------
    key, trial, slot, dof, xp
        As in :func:`chi_square`.
    stream : int, default 1
        What the variates are for, ``0 <= stream < 2**16``.

    Returns
    -------
    r : ndarray of float64
        Broadcast shape of the inputs.

    Notes
    -----
    :math:`\\chi_k = \\sqrt{\\chi^2_k}`; with ``k = d`` it is the law of the
    norm of a d-dimensional standard normal vector, the row norm of the
    orthogonal projection ensemble. The chi variate at ``(key, trial, slot,
    stream)`` is the square root of the chi-square variate at the same
    arguments.

    References
    ----------
    .. [1] G. Marsaglia and W. W. Tsang, "A simple method for generating
       gamma variables", ACM Trans. Math. Softw. 26(3), 363-372, 2000.
    """
    if xp is None:
        xp = get_array_module(key, trial, slot, dof)
    q, _, _ = _chi_square(key, trial, slot, dof, stream, xp)
    return xp.sqrt(q)
