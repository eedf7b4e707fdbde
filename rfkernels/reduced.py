r"""Estimates drawn from the scalar projections they depend on, exactly in distribution.

Every estimator of :mod:`rfkernels.features` depends on the projections
:math:`\omega_1..\omega_m` only through one scalar per feature,
:math:`\omega_i \cdot v` with :math:`v = x + y` (positive, hyperbolic) or
:math:`v = x - y` (trig). Writing :math:`\omega_i \cdot v = |v|\, p_i` with
:math:`p_i = \omega_i \cdot e` for a unit vector :math:`e`, the law of
:math:`(p_1..p_m)` does not depend on :math:`e` (every ensemble here is
rotation invariant), so a Monte Carlo trial can draw the :math:`p_i`
directly: O(m) random numbers, no d×d matrix and no QR. This module does
that with the counter-based generator of :mod:`rfkernels.rng`, written once
against an array namespace (NumPy or CuPy);
:mod:`rfkernels._reduced_numba` computes the same numbers in Numba.

Laws of the :math:`p_i` (MATH.md, "Sampling only what the estimate depends
on"). Orthogonal projections come in blocks of d rows, the last block
partial, blocks independent; within a block of size :math:`b \le d`, the
directions' coordinates along :math:`e` are the first b coordinates of a
uniform unit vector of :math:`R^d`, :math:`c_i = g_i / \sqrt{S}` with
:math:`S = \sum_{j \le b} g_j^2 + \chi^2_{d-b}`:

=====================  ==============================================================  ==========================================
ensemble, norms        :math:`p_i`                                                     :math:`|\omega_i|^2` (kind ``'oprf'`` only)
=====================  ==============================================================  ==========================================
iid, chi               :math:`g_i` (a standard normal)                                 :math:`g_i^2 + \chi^2_{d-1}` (same g_i)
iid, fixed             :math:`\sqrt{d}\, g_i / \sqrt{g_i^2 + \chi^2_{d-1}}` (blocks of one)  d
orthogonal, chi        :math:`R_i\, g_i / \sqrt{S}`, :math:`R_i \sim \chi_d` independent  :math:`R_i^2`
orthogonal, fixed      :math:`\sqrt{d}\, g_i / \sqrt{S}`                                  d
simplex, chi           :math:`R_i\, c_d (h_i - \bar h) / |h|`, :math:`R_i \sim \chi_d`    :math:`R_i^2`
simplex, fixed         :math:`\sqrt{d}\, c_d (h_i - \bar h) / |h|`                         d
=====================  ==============================================================  ==========================================

Simplex (Reid et al. 2023): within a block of :math:`b \le d` rows the
directions are :math:`Q s_i`, :math:`s_i = c_d (e_i - \mathbf 1/d)`,
:math:`c_d = \sqrt{d/(d-1)}`, Q a Haar rotation; so
:math:`Q s_i \cdot e = s_i \cdot Q^T e` with :math:`Q^T e = h/|h|` uniform on
the sphere, :math:`h \sim N(0, I_d)` (all d coordinates are drawn: the mean
:math:`\bar h` and the norm :math:`|h|` need them; only the first b are
used). O(d) per block, blocks independent, the norms independent of the
directions.

OPRF (kind ``'oprf'``, parameter A < 1/8, :math:`B = \sqrt{1 - 4A}`): the
pair's feature product is
:math:`(1-4A)^{d/2} \exp(2A|\omega|^2 + B\,\omega\cdot u - (|x|^2+|y|^2)/2)`,
:math:`u = x + y`, so with ``C = SM`` the normalised term of projection i is
:math:`\exp\big((B a p_i - a^2/2) + (2A|\omega_i|^2 + \tfrac d2 \log(1-4A))\big)`,
:math:`a = |u|`: it needs :math:`(p_i, |\omega_i|^2)`, from the table's last
column (the orthogonal and simplex rows' squared length is the chi radius
squared :math:`R_i^2` already drawn; iid rows with chi norms have
:math:`|\omega_i|^2 = g_i^2 + \chi^2_{d-1}`, :math:`g_i` the same normal as
:math:`p_i`). The constants are :func:`oprf_constants`, computed once on the
host; with A = 0 the terms are those of ``'positive'`` bit for bit (B = 1,
the added constant is +0.0).

Counter layout (key from the seed, :func:`rfkernels.rng.key_from_seed`).
Trial ``t`` of pair ``k`` of a batch uses the Philox trial counter
``(k << 40) | t`` (:func:`trial_counters`); within it, projection ``i`` uses

- ``g_i``: :func:`rfkernels.rng.normal` at slot ``i`` of :data:`STREAM_DIRECTION`
  (slots ``2j``, ``2j + 1`` share a block), except for orthogonal
  projections with chi norms, where ``(R_i^2, g_i)`` is
  :func:`rfkernels.rng.chi_square_with_normal` at slot ``i`` of
  :data:`STREAM_LENGTH` with ``d`` degrees of freedom (one Philox block
  gives the length and the direction coordinate);
- the chi-square tails: :func:`rfkernels.rng.chi_square` of
  :data:`STREAM_TAIL`, at slot ``i`` (iid, fixed norms, ``d - 1`` degrees
  of freedom) or at slot ``j`` for block ``j`` (orthogonal, ``d - b_j``
  degrees of freedom, drawn only for a partial block);
- simplex: coordinate ``k`` of block ``j``'s normal vector h is the
  normal of slot ``2 (j H + k // 2) + k % 2`` of :data:`STREAM_SIMPLEX`,
  ``H = (d + 1) // 2`` pairs per block (:func:`rfkernels.rng.normal_pair`
  at pair ``j H + k // 2``), and the squared chi norm of projection i is
  :func:`rfkernels.rng.chi_square` (d degrees of freedom) at slot ``i`` of
  :data:`STREAM_SIMPLEX_LENGTH`;
- oprf, iid projections with chi norms: the :math:`\chi^2_{d-1}` of
  :math:`|\omega_i|^2` at slot ``i`` of :data:`STREAM_OPRF_TAIL`.

The new streams leave every earlier path's numbers unchanged.

Normalisation. The estimates are returned divided by a scale ``C`` chosen
so that they stay O(1) where the estimate itself would overflow:
``C = SM = exp(x·y)`` for positive, hyperbolic and oprf features (the estimate is
then :math:`\frac1m\sum_i e^{a p_i - a^2/2}`, resp. its cosh form, with
:math:`a = |x + y|`) and ``C = Λ⁻¹ = exp((|x|² + |y|²)/2)`` for trig
features (the estimate is then :math:`\frac1m\sum_i \cos(a p_i)`,
:math:`a = |x - y|`); see :func:`normalisation`.

Sums over projections are taken in one fixed order (eight interleaved
partial sums, then a fixed tree; :func:`fixed_order_sum`) on every backend,
so NumPy, CuPy and Numba give the same bits for the positive and hyperbolic
estimates; trig features use each library's ``cos`` and agree to rounding.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _elementary as elem
from . import rng
from .backends import get_array_module
from .validation import (
    ENSEMBLES,
    _complex_error,
    check_choice,
    check_finite,
    check_int,
    check_kind,
    check_norms,
)

__all__ = [
    "DEFAULT_CHUNK",
    "MAX_PAIRS",
    "MAX_TRIALS",
    "REDUCED_ENSEMBLES",
    "REDUCED_KINDS",
    "STREAM_DIRECTION",
    "STREAM_LENGTH",
    "STREAM_OPRF_TAIL",
    "STREAM_SIMPLEX",
    "STREAM_SIMPLEX_LENGTH",
    "STREAM_TAIL",
    "Normalisation",
    "check_reduced",
    "default_chunk",
    "engine_bytes",
    "engine_namespace",
    "estimate_chunks",
    "fixed_order_sum",
    "gpu_kernel_available",
    "normalisation",
    "normalised_estimates",
    "oprf_constants",
    "scalar_projections",
    "squared_norms",
    "trial_counters",
]

#: Kinds with a reduced sampler.
REDUCED_KINDS = ("trig", "positive", "hyperbolic", "oprf")
#: Ensembles with an exact reduced sampler (the unfixed QR's law is not rotation invariant;
#: sorf: literal sampling only, for now).
REDUCED_ENSEMBLES = ("iid", "orthogonal", "simplex")
#: Stream of the direction normals g_i.
STREAM_DIRECTION = 16
#: Stream of the (R_i^2, g_i) pairs of orthogonal projections with chi norms.
STREAM_LENGTH = 17
#: Stream of the chi-square tails of the direction norms.
STREAM_TAIL = 18
#: Stream of the chi-square (d - 1) tails of |w_i|^2 for oprf, iid projections with chi norms.
STREAM_OPRF_TAIL = 19
#: Stream of the normal vectors h of the simplex blocks (d per block).
STREAM_SIMPLEX = 20
#: Stream of the squared chi(d) norms of simplex projections.
STREAM_SIMPLEX_LENGTH = 21
#: Bits of the trial counter that index trials; the pair index sits above.
PAIR_SHIFT = 40
#: Trials per pair addressable by the counter layout.
MAX_TRIALS = 1 << PAIR_SHIFT
#: Pairs per batch addressable by the counter layout.
MAX_PAIRS = 1 << (64 - PAIR_SHIFT)

_LANES = 8


class Normalisation(NamedTuple):
    """How a pair's estimates are scaled (see the module notes).

    Attributes
    ----------
    length : float
        ``a``: ``|x + y|`` (positive, hyperbolic) or ``|x - y|`` (trig).
    log_scale : float
        ``log C``: ``x·y`` (positive, hyperbolic) or ``(|x|² + |y|²)/2`` (trig).
    target : float
        ``SM / C``, the value an unbiased normalised estimate has on average:
        1 (positive, hyperbolic) or ``exp(-|x - y|²/2)`` (trig).
    """

    length: float
    log_scale: float
    target: float


def normalisation(kind, half_sq, s, t):
    """The :class:`Normalisation` of a pair from its invariants.

    Parameters
    ----------
    kind : {'trig', 'positive', 'hyperbolic'}
    half_sq, s, t : float
        ``(|x|² + |y|²)/2``, ``|x + y|²`` and ``|x - y|²``
        (:class:`rfkernels.theory.Geometry`).
    """
    check_kind(kind)
    half_sq, s, t = (_real_scalar(v, name) for v, name in ((half_sq, "half_sq"), (s, "s"), (t, "t")))
    if kind == "trig":
        return Normalisation(math.sqrt(t), half_sq, math.exp(-t / 2.0))
    return Normalisation(math.sqrt(s), (s - t) / 4.0, 1.0)


def _real_scalar(value, name):
    """One finite real number >= 0 as a float (complex and non-numbers refused)."""
    arr = check_finite(value, name)
    if arr.ndim != 0 or arr < 0:
        raise ValueError(f"{name} must be one finite number >= 0; got {value!r}")
    return float(arr)


def _unsigned(value, name, dtype, xp):
    """``value`` as an unsigned integer array; complex, float and negative entries refused."""
    if xp is np or not type(value).__module__.startswith("cupy"):
        arr = np.asarray(value)
    else:
        arr = value
    if arr.dtype.kind == "c":
        raise _complex_error(name, f"of complex dtype {arr.dtype}")
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of non-negative integers; got dtype {arr.dtype}")
    if arr.dtype.kind == "i" and arr.size and bool((arr < 0).any()):
        raise ValueError(f"{name} must be >= 0")
    return xp.asarray(arr, dtype=dtype)


def trial_counters(first, n, pair=0, xp=np):
    """Philox trial counters ``(pair << 40) | t`` for trials ``t = first .. first + n - 1``."""
    first = check_int(first, "first", minimum=0)
    n = check_int(n, "n", minimum=0)
    pair = check_int(pair, "pair", minimum=0)
    if first + n > MAX_TRIALS:
        raise ValueError(f"trial indices must be below 2**{PAIR_SHIFT}; got up to {first + n - 1}")
    if pair >= MAX_PAIRS:
        raise ValueError(f"pair must be below 2**{64 - PAIR_SHIFT}; got {pair}")
    base = np.uint64((pair << PAIR_SHIFT) | first)
    return xp.arange(n, dtype=xp.uint64) + base


def fixed_order_sum(rows, xp=None):
    """Sum over the first axis in a fixed order: eight interleaved partial sums, then a tree.

    Row ``i`` goes to partial sum ``i % 8`` (rows added in increasing order);
    the partial sums are combined as ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))``.
    The Numba kernels sum in exactly this order, so the results are the same
    bits, and eight independent chains are faster than one.
    """
    if xp is None:
        xp = get_array_module(rows)
    k = rows.shape[0]
    acc = xp.zeros((_LANES,) + rows.shape[1:], dtype=xp.float64)
    for start in range(0, k, _LANES):
        part = rows[start : start + _LANES]
        acc[: part.shape[0]] += part
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))


def _check_args(m, d, ensemble, norms):
    m = check_int(m, "m")
    d = check_int(d, "d")
    check_choice(ensemble, "ensemble", REDUCED_ENSEMBLES)
    check_norms(norms)
    return m, d


def _normals(key, counters, m, xp):
    """g_i, i < m, from :data:`STREAM_DIRECTION`: shape (m, n)."""
    pairs = xp.arange((m + 1) // 2, dtype=xp.uint64)[:, None]
    z0, z1 = rng.normal_pair(key, counters[None, :], pairs, stream=STREAM_DIRECTION, xp=xp)
    g = xp.empty((2 * z0.shape[0], counters.shape[0]), dtype=xp.float64)
    g[0::2] = z0
    g[1::2] = z1
    return g[:m]


def _simplex_directions(key, counters, m, d, xp):
    """The simplex directions' coordinates along e, block by block: shape (m, n) (module notes)."""
    half = (d + 1) // 2
    scale = math.sqrt(d / (d - 1.0))
    c = xp.empty((m, counters.shape[0]), dtype=xp.float64)
    for j, i0 in enumerate(range(0, m, d)):
        b = min(d, m - i0)
        pairs = xp.arange(j * half, (j + 1) * half, dtype=xp.uint64)[:, None]
        z0, z1 = rng.normal_pair(key, counters[None, :], pairs, stream=STREAM_SIMPLEX, xp=xp)
        h = xp.empty((2 * half, counters.shape[0]), dtype=xp.float64)
        h[0::2] = z0
        h[1::2] = z1
        h = h[:d]
        mean = fixed_order_sum(h, xp) / d
        root = xp.sqrt(fixed_order_sum(h * h, xp))
        c[i0 : i0 + b] = scale * ((h[:b] - mean) / root)
    return c


def _projections(key, counters, m, d, ensemble, norms, xp, squared_norms):
    """(p, |w|^2): the scalar projections and, when ``squared_norms``, the rows' squared lengths.

    ``|w|^2`` is None unless asked for; with fixed norms it is the float ``d``.
    """
    n = counters.shape[0]
    slots = xp.arange(m, dtype=xp.uint64)[:, None]
    t = counters[None, :]
    sqrt_d = math.sqrt(d)
    w2 = float(d) if norms == "fixed" else None

    if ensemble == "iid":
        g = _normals(key, counters, m, xp)
        if norms == "chi":
            if squared_norms:
                if d == 1:
                    tail = xp.zeros((m, n))
                else:
                    tail = rng.chi_square(key, t, slots, float(d - 1), stream=STREAM_OPRF_TAIL, xp=xp)
                w2 = g * g + tail
            return g, w2
        if d == 1:
            tail = xp.zeros((m, n))
        else:
            tail = rng.chi_square(key, t, slots, float(d - 1), stream=STREAM_TAIL, xp=xp)
        return sqrt_d * (g / xp.sqrt(g * g + tail)), w2

    if ensemble == "simplex":
        c = _simplex_directions(key, counters, m, d, xp)
        if norms == "fixed":
            return sqrt_d * c, w2
        q = rng.chi_square(key, t, slots, float(d), stream=STREAM_SIMPLEX_LENGTH, xp=xp)
        return xp.sqrt(q) * c, q

    if norms == "chi":
        q, g = rng.chi_square_with_normal(key, t, slots, float(d), stream=STREAM_LENGTH, xp=xp)
        length = xp.sqrt(q)
        w2 = q
    else:
        g = _normals(key, counters, m, xp)
        length = sqrt_d
    p = xp.empty((m, n), dtype=xp.float64)
    for j, i0 in enumerate(range(0, m, d)):
        b = min(d, m - i0)
        gb = g[i0 : i0 + b]
        total = fixed_order_sum(gb * gb, xp)
        if b < d:
            total = total + rng.chi_square(key, counters, j, float(d - b), stream=STREAM_TAIL, xp=xp)
        lb = length if norms == "fixed" else length[i0 : i0 + b]
        p[i0 : i0 + b] = lb * (gb / xp.sqrt(total))
    return p, w2


def _check_counters(key, counters, m, d, ensemble, norms, xp):
    m, d = _check_args(m, d, ensemble, norms)
    if ensemble == "simplex" and d < 2:
        raise ValueError(f"ensemble='simplex' needs d >= 2; got d={d}")
    if xp is None:
        xp = get_array_module(counters)
    key = _unsigned(key, "key", xp.uint32, xp)
    counters = _unsigned(counters, "counters", xp.uint64, xp)
    if counters.ndim != 1:
        raise ValueError(f"counters must be a 1-D array of trial counters; got shape {counters.shape}")
    return key, counters, m, d, xp


def scalar_projections(key, counters, m, d, *, ensemble="iid", norms="chi", xp=None):
    r"""The scalar projections :math:`p_i = \omega_i \cdot e` of m projections, per trial.

    Parameters
    ----------
    key : array_like of uint32, shape (2,)
        Philox key (:func:`rfkernels.rng.key_from_seed`).
    counters : array_like of uint64, shape (n,)
        Philox trial counters (:func:`trial_counters`).
    m, d : int
        Number of projections and dimension (d >= 2 for simplex).
    ensemble : {'iid', 'orthogonal', 'simplex'}
    norms : {'chi', 'fixed'}
    xp : module, optional
        ``numpy`` or ``cupy``; taken from ``counters`` when None.

    Returns
    -------
    p : ndarray of shape (m, n)
        ``p[i, k]`` is projection i of trial k, distributed as
        :math:`\omega_i \cdot e` for any fixed unit vector e (see the module
        notes for the laws and the counter layout).
    """
    key, counters, m, d, xp = _check_counters(key, counters, m, d, ensemble, norms, xp)
    return _projections(key, counters, m, d, ensemble, norms, xp, False)[0]


def squared_norms(key, counters, m, d, *, ensemble="iid", norms="chi", xp=None):
    r"""The rows' squared lengths :math:`|\omega_i|^2` that go with :func:`scalar_projections`.

    Same arguments and shape (fixed norms: ``d`` everywhere); jointly with
    :func:`scalar_projections` at the same counters they are distributed as
    :math:`(\omega_i \cdot e, |\omega_i|^2)` (kind ``'oprf'`` needs both).
    """
    key, counters, m, d, xp = _check_counters(key, counters, m, d, ensemble, norms, xp)
    w2 = _projections(key, counters, m, d, ensemble, norms, xp, True)[1]
    if norms == "fixed":
        return xp.full((m, counters.shape[0]), w2)
    return w2


def oprf_constants(A, length, d):
    r"""``(slope, curvature, offset)`` of the oprf terms: :math:`B a`, :math:`2A`, :math:`\tfrac d2 \log(1-4A)`.

    The normalised term of projection i is
    ``exp((slope * p_i - a**2/2) + (curvature * |w_i|**2 + offset))``, with
    :math:`B = \sqrt{1 - 4A}` and ``a = length``; computed once, here, for
    every backend (A = 0 gives ``(a, 0.0, -0.0)``: the positive terms' bits).
    """
    arr = check_finite(A, "A")
    if arr.ndim != 0 or not arr < 0.125:
        raise ValueError(f"A must be one finite number < 1/8 (the OPRF parameter); got {A!r}")
    A = float(arr)
    a = _real_scalar(length, "length")
    d = check_int(d, "d")
    return math.sqrt(1.0 - 4.0 * A) * a, 2.0 * A, 0.5 * d * math.log1p(-4.0 * A)


def normalised_estimates(key, counters, m, d, kind, length, *, ensemble="iid", norms="chi", xp=None,
                         A=None):
    r"""Normalised estimates ``estimate / C`` of a pair, one per trial counter.

    Parameters
    ----------
    key, counters, m, d, ensemble, norms, xp
        As in :func:`scalar_projections`.
    kind : {'trig', 'positive', 'hyperbolic', 'oprf'}
    length : float
        ``a = Normalisation.length``: ``|x + y|`` or, for trig, ``|x - y|``.
    A : float, optional
        The OPRF parameter (< 1/8); required for ``kind='oprf'``, refused otherwise.

    Returns
    -------
    e : ndarray of shape (n,)
        With :math:`p_i` from :func:`scalar_projections` and ``h = a²/2``:

        - positive: :math:`\frac1m \sum_i e^{a p_i - h}`
        - hyperbolic: :math:`\frac1m \sum_i \tfrac12 (e^{a p_i - h} + e^{-a p_i - h})`
        - trig: :math:`\frac1m \sum_i \cos(a p_i)`
        - oprf: :math:`\frac1m \sum_i e^{(B a p_i - h) + (2A|\omega_i|^2 + \frac d2 \log(1-4A))}`
          (:func:`oprf_constants`, :func:`squared_norms`)

        each the estimate divided by :func:`normalisation`'s scale ``C``.
        The exponentials are :func:`rfkernels._elementary.exp` (the same bits
        as the Numba kernels); a term overflows only if its exponent exceeds 709,
        which the caller must check for (the result is then inf).
    """
    check_kind(kind)
    consts = _check_a_for(kind, A, length, d)
    key, counters, m, d, xp = _check_counters(key, counters, m, d, ensemble, norms, xp)
    a = _real_scalar(length, "length")
    p, w2 = _projections(key, counters, m, d, ensemble, norms, xp, kind == "oprf")
    half = 0.5 * a * a
    if kind == "oprf":
        slope, curvature, offset = consts
        terms = elem.exp((slope * p - half) + (curvature * w2 + offset), xp)
        return fixed_order_sum(terms, xp) / m
    ap = a * p
    if kind == "positive":
        terms = elem.exp(ap - half, xp)
    elif kind == "hyperbolic":
        terms = 0.5 * (elem.exp(ap - half, xp) + elem.exp(-ap - half, xp))
    else:
        terms = xp.cos(ap)
    return fixed_order_sum(terms, xp) / m


def _check_a_for(kind, A, length, d):
    """:func:`oprf_constants` for kind 'oprf' (A required), None otherwise (A refused)."""
    if kind == "oprf":
        if A is None:
            raise ValueError("kind='oprf' needs its parameter A (< 1/8); e.g. "
                             "rfkernels.theory.oprf_optimal_a(x, y)")
        return oprf_constants(A, length, d)
    if A is not None:
        raise ValueError(f"A is the parameter of kind='oprf' only; got A={A!r} with kind={kind!r}")
    return None


# ---------------------------------------------------------------------------
# The engine: one entry, three targets
# ---------------------------------------------------------------------------

#: Default trials per chunk of :func:`estimate_chunks`; NumPy and the CuPy
#: array path hold about 20 arrays of ``m × chunk`` doubles, so theirs is
#: divided by m; the kernels hold one estimate per trial.
DEFAULT_CHUNK = {"numpy": 1 << 17, "numba": 1 << 16, "cupy": 1 << 24}


def gpu_kernel_available():
    """True if ``backend='cupy'`` runs the numba-cuda kernel (a device, or the CUDA simulator)."""
    from .backends import cupy_available

    try:
        from ._scalar import simulator_enabled

        if simulator_enabled():
            return True
        if not cupy_available():
            return False
        from ._reduced_cuda import cuda_available
    except ImportError:  # numba-cuda not installed: CuPy's array path
        return False
    return cuda_available()


def engine_namespace(backend):
    """The array module the estimates of ``backend`` come in.

    NumPy for ``'numpy'`` and ``'numba'``; CuPy for ``'cupy'``, except under
    Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), where the GPU kernel
    runs on the CPU with NumPy arrays standing in for CuPy's.
    """
    from .backends import BACKENDS, array_namespace

    check_choice(backend, "backend", BACKENDS)
    if backend == "cupy":
        from ._scalar import simulator_enabled

        return np if simulator_enabled() else array_namespace("cupy")
    return np


def default_chunk(backend, m):
    """Trials per chunk for ``backend`` at ``m`` projections (about 1 MiB per array on NumPy)."""
    chunk = DEFAULT_CHUNK[backend]
    if backend == "numpy" or (backend == "cupy" and not gpu_kernel_available()):
        chunk = max(1, chunk // m)
    return chunk


#: Arrays of ``m × chunk`` doubles the vectorised path holds at its peak (measured
#: 17 with tracemalloc; tests/test_monte_carlo.py::test_peak_bytes_bounds_the_measured_peak).
VECTORISED_ARRAYS = 20


def engine_bytes(m, chunk, backend, ensemble="iid", d=1):
    """Estimated peak bytes :func:`estimate_chunks` allocates on the host for ``chunk`` trials.

    Vectorised path: :data:`VECTORISED_ARRAYS` arrays of ``w × chunk``
    doubles, ``w = m`` (``max(m, d)`` for the simplex ensemble, which draws
    all d coordinates of each block); Numba: per thread, seven length-m work
    arrays, plus the chunk; the GPU kernel: device memory only (0 on the host).
    """
    if backend == "numba":
        import numba

        from ._reduced_numba import BATCH

        threads = min(numba.get_num_threads(), -(-chunk // BATCH))
        return threads * 7 * 8 * (m + 1) + 8 * chunk
    if backend == "cupy":
        return 0
    width = max(m, d) if ensemble == "simplex" else m
    return VECTORISED_ARRAYS * 8 * width * chunk


def check_reduced(kind, ensemble):
    """Refuse, naming the argument, a kind or ensemble the reduced engine cannot sample."""
    check_kind(kind)
    if kind not in REDUCED_KINDS:
        raise ValueError(f"method='reduced': no reduced sampler yet for kind={kind!r}; "
                         "use method='literal'")
    if ensemble == "orthogonal-unfixed-qr":
        raise ValueError(
            f"method='reduced' has no sampler for ensemble={ensemble!r}: its projections are "
            "not rotation invariant, so the scalar projections cannot be drawn on their own; "
            "use method='literal'"
        )
    if ensemble not in REDUCED_ENSEMBLES:
        check_choice(ensemble, "ensemble", ENSEMBLES)
        raise ValueError(f"method='reduced': no reduced sampler yet for ensemble={ensemble!r}; "
                         "use method='literal'")


def estimate_chunks(key, length, m, d, kind, *, ensemble="iid", norms="chi", trials, first=0,
                    pair=0, chunk=None, backend="numpy", A=None):
    """Normalised estimates of one pair, chunk by chunk: the Monte Carlo engine.

    Yields ``(n, e, xp)``: ``e`` holds the normalised estimates of trials
    ``first .. first + n - 1`` of pair ``pair`` (the counters of
    :func:`trial_counters`), an array of ``xp`` (see :func:`engine_namespace`).
    The array may be reused by the next chunk: consume or copy it first.
    ``A`` is the OPRF parameter, required for ``kind='oprf'`` (refused otherwise).

    ``backend`` chooses where they are computed, with the same bits
    (positive, hyperbolic and oprf; trig up to each target's ``cos``):

    - ``'numpy'``: :func:`normalised_estimates`, vectorised;
    - ``'numba'``: the parallel CPU kernels of :mod:`rfkernels._reduced_numba`;
    - ``'cupy'``: the GPU kernel of :mod:`rfkernels._reduced_cuda`, compiled by
      numba-cuda from the same scalar source as the CPU kernels (without
      numba-cuda: :func:`normalised_estimates` on CuPy arrays).
    """
    check_reduced(kind, ensemble)
    check_norms(norms)
    m, d = check_int(m, "m"), check_int(d, "d")
    if ensemble == "simplex" and d < 2:
        raise ValueError(f"ensemble='simplex' needs d >= 2; got d={d}")
    trials, first = check_int(trials, "trials"), check_int(first, "first", minimum=0)
    if first + trials > MAX_TRIALS:
        raise ValueError(f"first + trials must be at most 2**{PAIR_SHIFT}; got {first + trials}")
    pair = check_int(pair, "pair", minimum=0)
    if pair >= MAX_PAIRS:
        raise ValueError(f"pair must be below 2**{64 - PAIR_SHIFT}; got {pair}")
    a = _real_scalar(length, "length")
    consts = _check_a_for(kind, A, a, d)
    if chunk is None:
        # simplex draws d normals per block: the vectorised path holds d x chunk arrays too
        chunk = default_chunk(backend, max(m, d) if ensemble == "simplex" else m)
    else:
        chunk = check_int(chunk, "chunk")
    xp = engine_namespace(backend)
    stop = first + trials
    if backend == "numba" or (backend == "cupy" and gpu_kernel_available()):
        if backend == "numba":
            from ._reduced_numba import reduced_estimates as kernel
        else:
            from ._reduced_cuda import gpu_reduced_estimates as kernel
        from ._reduced_numba import ENSEMBLE_CODES, KIND_CODES
        k = np.asarray(key)
        k0, k1 = np.uint32(k[0]), np.uint32(k[1])
        oprf = consts if consts is not None else (a, 0.0, 0.0)
        buf = xp.empty(min(chunk, trials))
        for start in range(first, stop, chunk):
            n = min(chunk, stop - start)
            out = buf[:n]
            kernel(k0, k1, np.uint64((pair << PAIR_SHIFT) | start), np.int64(m), np.int64(d),
                   ENSEMBLE_CODES[ensemble], norms == "chi", np.int64(KIND_CODES[kind]), a, out,
                   oprf=oprf)
            yield n, out, xp
        return
    key = xp.asarray(key)
    for start in range(first, stop, chunk):
        n = min(chunk, stop - start)
        counters = trial_counters(start, n, pair, xp=xp)
        with np.errstate(over="ignore", under="ignore"):
            e = normalised_estimates(key, counters, m, d, kind, a, ensemble=ensemble, norms=norms,
                                     xp=xp, A=A)
        yield n, e, xp
