"""Scalar Numba versions of :mod:`rfkernels.rng`: the same numbers, one at a time.

The public functions are ``@scalar(cache=True)`` and can be called from
other jitted code, including ``prange`` loops; a variate depends only on
``(key, trial, slot, stream)``, never on the thread that computes it. The
building blocks (Philox, uniforms, Box--Muller, one Marsaglia--Tsang attempt)
are ``inline="always"``, so that loops built from them vectorise; callers
should compile with ``error_model="numpy"`` (see
:mod:`rfkernels.numerics.elementary_numba`). See
:mod:`rfkernels.rng` for the counter layout and the mathematics; the
expressions below are written in the same order as there, so that the
vectorised and the scalar code round identically.

Integer typing: Numba turns ``uint64 op int64`` into float64, so every
integer here is converted to ``uint64`` on entry and combined only with
``uint64`` constants. Words are kept in uint64 below 2**32; the 32x32-bit
products are exact in uint64 and split into their high and low halves with
a shift and a mask. Inputs are not range-checked (this is the hot path):
key words and ``slot`` are taken mod 2**32, ``stream`` must be below 2**16.
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics.elementary_numba import exp, log, sincos_2pi
from ..numerics.scalar import scalar
from ..numerics.chi_quantile import INTERVALS as _Q_INTERVALS
from ..numerics.chi_quantile import PER_UNIT as _Q_PER_UNIT
from ..numerics.chi_quantile import T_MAX as _Q_T_MAX

# Constants are imported from the vectorised twin, never retyped.
from ..rng import (
    M0_U64 as _M0,
    M1_U64 as _M1,
    MASK32_U64 as _MASK32,
    ONE_THIRD as _ONE_THIRD,
    SHIFT32_U64 as _SHIFT32,
    MT_SQUEEZE as _SQUEEZE,
    TWO_M32 as _TWO_M32,
    TWO_M52 as _TWO_M52,
    W0_U64 as _W0,
    W1_U64 as _W1,
)
from ..rng import ATTEMPT_BOOST as _ATTEMPT_BOOST
from ..rng import MAX_ATTEMPTS as _MAX_ATTEMPTS

_SHIFT16 = np.uint64(16)
_SHIFT12 = np.uint64(12)


@scalar(inline="always")
def _philox_u64(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 on uint64 words below 2**32; returns four such uint64.

    Inlined into its callers' IR (as are the helpers below) so that loops of
    Philox blocks vectorise; the tuple assignment keeps each round free of
    temporaries LLVM would have to untangle.
    """
    for r in range(10):
        if r > 0:
            k0 = (k0 + _W0) & _MASK32
            k1 = (k1 + _W1) & _MASK32
        p0 = _M0 * c0
        p1 = _M1 * c2
        c0, c1, c2, c3 = (p1 >> _SHIFT32) ^ c1 ^ k0, p1 & _MASK32, (p0 >> _SHIFT32) ^ c3 ^ k1, p0 & _MASK32
    return c0, c1, c2, c3


@scalar(cache=True)
def philox4x32_10_scalar(c0, c1, c2, c3, k0, k1):
    """Philox4x32-10 of one counter ``(c0, c1, c2, c3)`` under key ``(k0, k1)``.

    Arguments are integers taken mod 2**32; returns a tuple of four
    ``numpy.uint32``. Same as :func:`rfkernels.rng.philox4x32_10`.
    """
    w0, w1, w2, w3 = _philox_u64(
        np.uint64(c0) & _MASK32,
        np.uint64(c1) & _MASK32,
        np.uint64(c2) & _MASK32,
        np.uint64(c3) & _MASK32,
        np.uint64(k0) & _MASK32,
        np.uint64(k1) & _MASK32,
    )
    return np.uint32(w0), np.uint32(w1), np.uint32(w2), np.uint32(w3)


@scalar(inline="always")
def _block(k0, k1, trial, slot, stream, attempt):
    """Philox block at counter (slot, stream << 16 | attempt, trial lo, trial hi)."""
    t = np.uint64(trial)
    c1 = ((np.uint64(stream) << _SHIFT16) | np.uint64(attempt)) & _MASK32
    return _philox_u64(
        np.uint64(slot) & _MASK32,
        c1,
        t & _MASK32,
        t >> _SHIFT32,
        np.uint64(k0) & _MASK32,
        np.uint64(k1) & _MASK32,
    )


@scalar(inline="always")
def _uniform52(lo, hi):
    bits = (hi << _SHIFT32) | lo
    return (np.float64(bits >> _SHIFT12) + 0.5) * _TWO_M52


@scalar(inline="always")
def _uniform32(w):
    return (np.float64(w) + 0.5) * _TWO_M32


@scalar(inline="always")
def _box_muller(u1, u2):
    """Both Box--Muller normals ``(r cos(2 pi u2), r sin(2 pi u2))``, ``r = sqrt(-2 log u1)``."""
    r = math.sqrt(-2.0 * log(u1))
    sin, cos = sincos_2pi(u2)
    return r * cos, r * sin


@scalar(inline="always")
def normal_pair_inline(k0, k1, trial, pair, stream):
    """The normals of slots ``2 pair`` and ``2 pair + 1``; inlined, for vectorised loops."""
    w0, w1, w2, w3 = _block(k0, k1, trial, pair, stream, 0)
    return _box_muller(_uniform52(w0, w1), _uniform52(w2, w3))


@scalar(inline="always")
def uniform_pair_inline(k0, k1, trial, slot, stream):
    """``(u, v, bit)`` of :func:`rfkernels.rng.uniform_pair`; inlined."""
    w0, w1, w2, w3 = _block(k0, k1, trial, slot, stream, 0)
    return _uniform52(w0, w1), _uniform52(w2, w3), (w2 & np.uint64(1)) != np.uint64(0)


@scalar(cache=True, error_model="numpy")
def normal_pair_at(k0, k1, trial, pair, stream):
    """Normals of slots ``2 pair``, ``2 pair + 1``; = :func:`rfkernels.rng.normal_pair`."""
    return normal_pair_inline(k0, k1, trial, pair, stream)


@scalar(cache=True, error_model="numpy")
def normal_at(k0, k1, trial, slot, stream):
    """Standard normal at ``(key, trial, slot, stream)``; = :func:`rfkernels.rng.normal`."""
    s = np.uint64(slot)
    z0, z1 = normal_pair_inline(k0, k1, trial, s >> np.uint64(1), stream)
    return z1 if (s & np.uint64(1)) != 0 else z0


@scalar(inline="always")
def mt_params(dof):
    """Marsaglia-Tsang constants ``(d, c)`` for a chi-square with ``dof >= 2``."""
    d = 0.5 * dof - _ONE_THIRD
    return d, 1.0 / math.sqrt(9.0 * d)


@scalar(inline="always")
def mt_first_stage(k0, k1, trial, slot, stream, attempt, d, c):
    """A Marsaglia-Tsang attempt up to its squeeze: ``(squeezed, v, x**2, U, companion)``.

    ``squeezed`` is ``v > 0 and U < 1 - 0.0331 x**4``: acceptance without a
    logarithm (about 90% of attempts at large shapes); the gamma value is
    ``d v``. The companion is the sine branch of the attempt's Box--Muller
    pair. Branch-free and inlined, so a loop of attempts vectorises.
    """
    w0, w1, w2, w3 = _block(k0, k1, trial, slot, stream, attempt)
    x, companion = _box_muller(_uniform52(w0, w1), _uniform32(w2))
    u = _uniform32(w3)
    base = 1.0 + c * x
    v = base * base * base
    x2 = x * x
    squeezed = (v > 0.0) & (u < 1.0 - _SQUEEZE * (x2 * x2))
    return squeezed, v, x2, u, companion


@scalar(inline="always")
def mt_second_stage(v, x2, u, d):
    """The logarithmic acceptance test ``v > 0 and log U < x**2/2 + d (1 - v + log v)``."""
    positive = v > 0.0
    vlog = log(v if positive else 1.0)
    return positive & (log(u) < 0.5 * x2 + d * ((1.0 - v) + vlog))


@scalar(inline="always")
def mt_attempt(k0, k1, trial, slot, stream, attempt, d, c):
    """One Marsaglia-Tsang attempt: ``(accepted, v, companion)``; the gamma value is ``d v``."""
    squeezed, v, x2, u, companion = mt_first_stage(k0, k1, trial, slot, stream, attempt, d, c)
    return squeezed | mt_second_stage(v, x2, u, d), v, companion


@scalar(cache=True, error_model="numpy")
def chi_square_normal_at(k0, k1, trial, slot, stream, dof):
    """Chi-square and its companion normal; = :func:`rfkernels.rng.chi_square_with_normal`.

    Marsaglia-Tsang with attempt ``n`` read from counter word
    ``(stream << 16) | n``; for shape ``dof/2 < 1`` the boost uniform from
    attempt word ``0xffff``. The companion normal is the sine branch of
    attempt 0's Box--Muller pair. Raises ValueError if ``dof`` is not finite
    and > 0.
    """
    if not (dof > 0.0 and dof < math.inf):
        raise ValueError("dof must be finite and > 0 (degrees of freedom of the chi-square)")
    a = 0.5 * dof
    small = a < 1.0
    alpha = a + 1.0 if small else a
    d = alpha - _ONE_THIRD
    c = 1.0 / math.sqrt(9.0 * d)
    g = math.nan
    z = math.nan
    found = False
    for attempt in range(_MAX_ATTEMPTS):
        accepted, v, companion = mt_attempt(k0, k1, trial, slot, stream, attempt, d, c)
        if attempt == 0:
            z = companion
        if accepted:
            g = d * v
            found = True
            break
    if not found:
        raise RuntimeError("chi_square_at: no acceptance within the available attempts")
    if small:
        w0, w1, _, _ = _block(k0, k1, trial, slot, stream, _ATTEMPT_BOOST)
        u = _uniform52(w0, w1)
        g = g * exp(log(u) / a)
    return 2.0 * g, z


@scalar(cache=True, error_model="numpy")
def chi_square_at(k0, k1, trial, slot, stream, dof):
    """Chi-square with ``dof > 0`` at ``(key, trial, slot, stream)``; = :func:`rfkernels.rng.chi_square`.

    See :func:`chi_square_normal_at`. Raises ValueError if ``dof`` is not
    finite and > 0.
    """
    q, _ = chi_square_normal_at(k0, k1, trial, slot, stream, dof)
    return q


@scalar(cache=True, error_model="numpy")
def chi_at(k0, k1, trial, slot, stream, dof):
    """Chi with ``dof > 0``: ``sqrt(chi_square_at(...))``; = :func:`rfkernels.rng.chi`."""
    return math.sqrt(chi_square_at(k0, k1, trial, slot, stream, dof))


@scalar(inline="always")
def normals_into(k0, k1, trial, n, stream, out):
    """out[i], i < n: the normals of slots i of ``stream`` (slots 2j, 2j + 1 share a block)."""
    npairs = n // 2
    for j in range(npairs):
        z0, z1 = normal_pair_inline(k0, k1, trial, j, stream)
        out[2 * j] = z0
        out[2 * j + 1] = z1
    if n % 2:
        z0, z1 = normal_pair_inline(k0, k1, trial, npairs, stream)
        out[n - 1] = z0


@scalar(inline="always")
def log_chi_square_quantile(z, table):
    """log Q(z) from the cubic table (= :func:`rfkernels.numerics.chi_quantile.log_quantile`)."""
    x = min(max((z + _Q_T_MAX) * _Q_PER_UNIT, 0.0), float(_Q_INTERVALS))
    k = min(np.int64(x), _Q_INTERVALS - 1)
    s = x - k
    return table[0, k] + s * (table[1, k] + s * (table[2, k] + s * table[3, k]))


@scalar(inline="never")
def antithetic_squared_norms(k0, k1, trial, m, d, stream, q, table):
    """q[i], i < m: the squared antithetic chi(d) norms of ``stream`` (= the engine's NumPy twin).

    Rows pair as :func:`rfkernels.numerics.chi_quantile.pairing` says, from
    the ``table`` of :func:`rfkernels.numerics.chi_quantile.quantile_table`.
    The units' normals go to q[u] first (u <= the rows that use it), then the
    rows are filled from the last one down, so each reads its normal before
    a row at or above it is written.
    """
    half = (d + 1) // 2
    units = (m // d) * half + (m % d + 1) // 2
    normals_into(k0, k1, trial, units, stream, q)
    for i in range(m - 1, -1, -1):
        within = i % d
        z = q[(i // d) * half + within // 2]
        if within % 2:
            z = -z
        q[i] = exp(log_chi_square_quantile(z, table))
