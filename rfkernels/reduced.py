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
  :math:`|\omega_i|^2` at slot ``i`` of :data:`STREAM_OPRF_TAIL`;
- the tilted proposal (:class:`Tilt`): the trial's mixture component and
  direction from :func:`rfkernels.rng.uniform_pair` at slot 0 of
  :data:`STREAM_PROPOSAL`; every other variate is drawn as for the plain law
  and then moved.

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
from .estimators import estimator, oprf, registry
from .estimators.spec import check_sizes
from .validation import (
    complex_error,
    check_choice,
    check_finite,
    check_int,
)

__all__ = [
    "DEFAULT_CHUNK",
    "DEFENSIVE_WEIGHT",
    "PROPOSALS",
    "MAX_PAIRS",
    "MAX_TRIALS",
    "REDUCED_ENSEMBLES",
    "REDUCED_KINDS",
    "STREAM_DIRECTION",
    "STREAM_LENGTH",
    "STREAM_OPRF_TAIL",
    "STREAM_PROPOSAL",
    "STREAM_SIMPLEX",
    "STREAM_SIMPLEX_LENGTH",
    "STREAM_TAIL",
    "Engine",
    "Normalisation",
    "Tilt",
    "check_reduced",
    "default_chunk",
    "direction_peak",
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
    "tilt_for",
    "tilt_of",
    "tilt_weights",
    "trial_counters",
]

#: Kinds with a reduced sampler (every registered kind has one: its terms).
REDUCED_KINDS = registry.names("kind")
#: Ensembles with an exact reduced sampler (the unfixed QR's law is not rotation invariant;
#: sorf: literal sampling only, for now): those whose entry has a kernel code.
REDUCED_ENSEMBLES = tuple(e.name for e in registry.entries("ensemble") if e.reduced_reason is None)
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
#: Stream of the proposal's mixture component (one Philox block per trial, slot 0).
STREAM_PROPOSAL = 22
#: Monte Carlo proposals: the plain law, the tilted defensive mixture, or chosen by a pilot run.
PROPOSALS = ("plain", "tilted", "auto")
#: Weight of the plain law in the defensive mixture (MATH.md): weights never exceed its inverse, 5.
DEFENSIVE_WEIGHT = 0.2
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
    kind : str or rfkernels.estimators.Kind
        A registered kind; its terms depend on ``x + y`` or (trig) ``x - y``.
    half_sq, s, t : float
        ``(|x|² + |y|²)/2``, ``|x + y|²`` and ``|x - y|²``
        (:class:`rfkernels.theory.Geometry`).
    """
    kind = kind if isinstance(kind, registry.Kind) else registry.entry("kind", kind)
    half_sq, s, t = (_real_scalar(v, name) for v, name in ((half_sq, "half_sq"), (s, "s"), (t, "t")))
    return normalisation_of(kind, half_sq, s, t)


def normalisation_of(kind, half_sq, s, t):
    """:func:`normalisation` for a registry :class:`rfkernels.estimators.Kind` and trusted floats."""
    if not kind.on_sum:
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
        raise complex_error(name, f"of complex dtype {arr.dtype}")
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


def _projections(key, counters, m, d, ensemble, norms, xp, squared_norms, draw=None, tilt=None):
    r"""(p, |w|^2, moved, W): the scalar projections, the rows' squared lengths, the proposal's variates.

    ``|w|^2`` is None unless ``squared_norms`` (or tilted with chi norms);
    with fixed norms it is the float ``d``. ``draw`` is the proposal's
    per-trial choice (:func:`_proposal_draws`; None: the plain law), applied
    as ``tilt`` (a :class:`Tilt`) says; then ``moved`` (m, n) is what
    :func:`tilt_weights` takes (the projections for chi norms, the direction
    coordinates for fixed norms) and ``W`` the rows' :math:`|\omega_i|^2 - p_i^2`
    where the tilt needs them (else None); both None without ``draw``.
    """
    n = counters.shape[0]
    slots = xp.arange(m, dtype=xp.uint64)[:, None]
    t = counters[None, :]
    sqrt_d = math.sqrt(d)
    w2 = float(d) if norms == "fixed" else None
    needs_w = draw is not None and tilt.c1 != 0.0

    if ensemble == "iid":
        g = _normals(key, counters, m, xp)
        if norms == "chi":
            W = None
            if draw is not None:  # iid rows are their own blocks: p_i = g_i, W_i its tail
                cols, rows = _in_block(draw, 0, m, xp)
                g[rows, cols] += xp.where(draw.negative[cols], -tilt.shift, tilt.shift)
            if squared_norms or needs_w:
                if d == 1:
                    tail = xp.zeros((m, n))
                else:
                    tail = rng.chi_square(key, t, slots, float(d - 1), stream=STREAM_OPRF_TAIL, xp=xp)
                if draw is not None:
                    tail[rows, cols] *= tilt.wscale
                w2 = g * g + tail
                if needs_w:  # as the kernels compute it, from the squared lengths
                    W = w2 - g * g
            return g, w2, (g if draw is not None else None), W
        if d == 1:
            tail = xp.zeros((m, n))
        else:
            tail = rng.chi_square(key, t, slots, float(d - 1), stream=STREAM_TAIL, xp=xp)
        c = g / xp.sqrt(g * g + tail)
        if draw is not None:
            for i in range(m):  # blocks of one row
                _move_block(c, None, draw, tilt, i, 1, 0.0, xp)
        return sqrt_d * c, w2, (c if draw is not None else None), None

    if ensemble == "simplex":
        gamma = -1.0 / (d - 1.0)
        if norms == "fixed":
            c = _simplex_directions(key, counters, m, d, xp)
            if draw is not None:
                for i0 in range(0, m, d):
                    _move_block(c, None, draw, tilt, i0, min(d, m - i0), gamma, xp)
            return sqrt_d * c, w2, (c if draw is not None else None), None
        q = rng.chi_square(key, t, slots, float(d), stream=STREAM_SIMPLEX_LENGTH, xp=xp)
        c = _simplex_directions(key, counters, m, d, xp)
    else:
        gamma = 0.0
        if norms == "chi":
            q, g = rng.chi_square_with_normal(key, t, slots, float(d), stream=STREAM_LENGTH, xp=xp)
        else:
            g = _normals(key, counters, m, xp)
        c = xp.empty((m, n), dtype=xp.float64)
        for j, i0 in enumerate(range(0, m, d)):
            b = min(d, m - i0)
            gb = g[i0 : i0 + b]
            total = fixed_order_sum(gb * gb, xp)
            if b < d:
                total = total + rng.chi_square(key, counters, j, float(d - b), stream=STREAM_TAIL, xp=xp)
            c[i0 : i0 + b] = gb / xp.sqrt(total)
        if norms == "fixed":
            if draw is not None:
                for i0 in range(0, m, d):
                    _move_block(c, None, draw, tilt, i0, min(d, m - i0), gamma, xp)
            return sqrt_d * c, w2, (c if draw is not None else None), None
    if draw is not None:
        for i0 in range(0, m, d):
            _move_block(c, q, draw, tilt, i0, min(d, m - i0), gamma, xp)
    p = xp.sqrt(q) * c
    if draw is None:
        return p, q, None, None
    return p, q, p, (q - p * p if needs_w else None)


def _check_counters(key, counters, m, d, ensemble, norms, xp):
    check_choice(ensemble, "ensemble", REDUCED_ENSEMBLES)
    registry.entry("norms", norms)
    m, d = check_sizes(registry.entry("ensemble", ensemble), m, d)
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
    The kind's own :func:`rfkernels.estimators.oprf.constants`, validated.
    """
    A = oprf.check_a(A, required=True)
    return oprf.constants(A, _real_scalar(length, "length"), check_int(d, "d"))


# ---------------------------------------------------------------------------
# The tilted proposal: a defensive mixture, weighted by its exact likelihood ratio
# ---------------------------------------------------------------------------


class Tilt(NamedTuple):
    r"""The tilted proposal of one pair (:func:`tilt_for`; MATH.md, "Importance sampling for the heavy tail").

    Each trial's variates come from the plain law with probability
    ``alpha0``; otherwise one projection i, chosen uniformly, is moved toward
    the region its term's squared error comes from (in the direction
    ``-`` with probability 1/2 where ``symmetric``, else ``+``). Every
    move changes one coordinate of a system in which the plain law is a
    product of independent laws, and keeps the others:

    - chi norms (``on_projections``): :math:`\omega_i` is a standard Gaussian
      vector, so its projection :math:`p_i \sim N(0, 1)` is independent of
      :math:`W_i = |\omega_i|^2 - p_i^2 \sim \chi^2_{d-1}`, of the squared
      norm Z of the Gaussian vector whose direction gives the block's
      directions (G of the orthogonal sampler, h of the simplex one) and of
      the direction of that vector's part orthogonal to row i's own
      coordinate. The move is :math:`p_i \to p_i \pm \mu`,
      :math:`W_i \to \tau W_i`: row i's squared length becomes
      :math:`R_i'^2 = p_i'^2 + W_i'` and its direction coordinate
      :math:`c_i' = p_i'/R_i'`; the block's other rows keep Z and that
      direction, :math:`c_k' = \rho (c_k - \gamma c_i) + \gamma c_i'`,
      :math:`\rho = \sqrt{(1 - c_i'^2)/(1 - c_i^2)}`, :math:`\gamma` the
      cosine between two rows' directions (0 orthogonal, :math:`-1/(d-1)`
      simplex). Density ratio of component i:
      :math:`r_i = e^{\pm\mu p_i - \mu^2/2}\, \tau^{-(d-1)/2} e^{(1 - 1/\tau) W_i/2}`
      at the drawn point, computed as ``exp(+-shift * p_i + (c1 * W_i + c0))``.
      :math:`\tau = 1` (no W term) except for oprf features.
    - fixed norms: the direction coordinate :math:`c_i`, whose plain law has
      density :math:`\propto (1 - c^2)^{(d-3)/2}`, moved in
      :math:`\psi = \operatorname{atanh} c` by :math:`\pm\delta`
      (``shift``): :math:`c_i' = \tanh(\operatorname{atanh} c_i \pm \delta)`,
      the other rows of the block as above. Density ratio (with the
      Jacobian): :math:`r_i = \big(2e^{\mp\delta} / ((1 - c_i) + e^{\mp 2\delta}(1 + c_i))\big)^{d-1}`,
      computed as ``exp(c0 - n1 * log((1 - c_i) + e_minus * (1 + c_i)))`` for
      ``+`` (``c_minus`` and ``e_plus`` for ``-``).

    Each trial's weight is the exact likelihood ratio plain / mixture,

    .. math::

        w = \Big(\alpha_0 + \frac{1 - \alpha_0}{m} \sum_{i=1}^m \bar r_i\Big)^{-1} \le \frac{1}{\alpha_0},

    :math:`\bar r_i` the ratio of the move ``+`` (symmetric: the mean of
    ``+`` and ``-``), so :math:`E_Q[w f] = E_P[f]` for every f: the weighted
    mean squared error and mean are unbiased.

    Attributes
    ----------
    alpha0 : float
        Probability of the plain law (:data:`DEFENSIVE_WEIGHT`).
    shift : float
        :math:`\mu` (chi norms) or :math:`\delta` (fixed norms).
    symmetric : bool
        Move either way with equal probability (hyperbolic features, whose
        terms are large on both sides).
    on_projections : bool
        True for chi norms, False for fixed norms (see above).
    wscale, c1, c0 : float
        :math:`\tau`, :math:`(1 - 1/\tau)/2` and
        :math:`-\mu^2/2 - \tfrac{d-1}{2}\log\tau` (chi norms); fixed norms:
        ``c0`` is :math:`(d - 1)(\log 2 - \delta)`, ``wscale`` 1 and ``c1`` 0.
    e_plus, e_minus, c_minus, n1 : float
        Fixed norms: :math:`e^{2\delta}`, :math:`e^{-2\delta}`,
        :math:`(d - 1)(\log 2 + \delta)` and d - 1 (0 for chi norms).
    """

    alpha0: float
    shift: float
    symmetric: bool
    on_projections: bool
    wscale: float
    c1: float
    c0: float
    e_plus: float
    e_minus: float
    c_minus: float
    n1: float


def tilt_for(kind, ensemble, norms, length, d, *, A=None, alpha0=DEFENSIVE_WEIGHT):
    r"""The :class:`Tilt` of a pair, chosen from its geometry.

    A term :math:`f = e^{B a p + 2A|\omega|^2 + \dots}` (positive and
    hyperbolic: A = 0, B = 1; oprf: :math:`B = \sqrt{1 - 4A}`;
    :math:`a = |x + y|`) has its squared error from the law tilted by
    :math:`f^2`. The move of :class:`Tilt` aims at it:

    - chi norms: under the tilt, :math:`\omega \sim N(\lambda e, \sigma^2 I)`
      with :math:`\sigma^2 = 1/(1 - 8A)`, :math:`\lambda = 2Ba\sigma^2`, i.e.
      :math:`p \sim N(\lambda, \sigma^2)` and :math:`W \sim \sigma^2\chi^2_{d-1}`:
      so :math:`\mu = \lambda` (:math:`2a` for positive and hyperbolic
      features, as in MATH.md: then the moved projection is drawn from
      :math:`N(2a, 1)`, exactly the tilted law of a positive term) and
      :math:`\tau = \sigma^2` (1 unless oprf). With A < 0 (the optimal
      :math:`A^*` always is) the proposal is wider than the tilted law in
      p, which keeps the weights bounded there.
    - fixed norms: :math:`p = \sqrt d\, c`, and the tilted density of
      :math:`\psi = \operatorname{atanh} c`,
      :math:`\propto \cosh^{-(d-1)}\psi\; e^{\kappa \tanh\psi}`,
      :math:`\kappa = 2Ba\sqrt d`, peaks where
      :math:`(d - 1) c = \kappa (1 - c^2)`; :math:`\delta = \operatorname{atanh} c^*`
      moves the plain law's peak (at 0) there, and the proposal's log ratio
      then has the tilt's slope at the peak. d = 1 leaves no direction
      to move (:math:`\delta = 0`).

    Any move keeps the weighted estimates unbiased (the weights are exact);
    the choice only decides how efficient they are.

    Parameters
    ----------
    kind : {'positive', 'hyperbolic', 'oprf'}
        'trig' is refused: its estimates are bounded.
    ensemble : {'iid', 'orthogonal', 'simplex'}
    norms : {'chi', 'fixed'}
    length : float
        ``a = |x + y|``.
    d : int
    A : float, optional
        The OPRF parameter (< 1/8); required for kind 'oprf'.
    alpha0 : float, default :data:`DEFENSIVE_WEIGHT`
        Probability of the plain law, in (0, 1).
    """
    est = estimator(kind, ensemble=ensemble, norms=norms, d=d, A=A)
    est.tilted.require()
    a = _real_scalar(length, "length")
    arr = check_finite(alpha0, "alpha0")
    if arr.ndim != 0 or not 0.0 < float(arr) < 1.0:
        raise ValueError(f"alpha0 must be one number in (0, 1); got {alpha0!r}")
    return tilt_of(est, est.kind.resolve(est.params, None), a, float(arr))


def tilt_of(est, value, length, alpha0=DEFENSIVE_WEIGHT):
    """:func:`tilt_for` of a validated :class:`rfkernels.estimators.Estimator` (with d) that can be tilted.

    ``value`` is the pair's kind parameter (:attr:`Kind.resolve`; OPRF: A),
    ``length`` is ``a = |x + y|``. Nothing is checked here.
    """
    d = est.d
    B, A = est.kind.tilt_slope(value)
    a = length
    ba = B * a  # oprf: sqrt(1 - 4A) a; positive and hyperbolic: 1.0 * a, the same bits
    symmetric = est.kind.symmetric_tilt
    n1 = float(d - 1)
    if est.norms.chi:
        sigma2 = 1.0 / (1.0 - 8.0 * A)
        mu = 2.0 * ba * sigma2
        tau = sigma2
        c1, c0 = 0.5 * (1.0 - 1.0 / tau), -0.5 * mu * mu - 0.5 * n1 * math.log(tau)
        return Tilt(alpha0, mu, symmetric, True, tau, c1, c0, 0.0, 0.0, 0.0, 0.0)
    delta = 0.0 if d == 1 else math.atanh(direction_peak(ba, d))
    log2 = math.log(2.0)
    return Tilt(alpha0, delta, symmetric, False, 1.0, 0.0, n1 * (log2 - delta),
                math.exp(2.0 * delta), math.exp(-2.0 * delta), n1 * (log2 + delta), n1)


def direction_peak(length, d):
    r"""The peak :math:`c^*` of a direction coordinate's law tilted by :math:`e^{2\kappa c}`.

    A uniform unit vector's coordinate c has density :math:`\propto (1 - c^2)^{(d-3)/2}`;
    a fixed-norm term :math:`e^{a\sqrt d\, c}` has its squared error where
    :math:`(1 - c^2)^{(d-1)/2} e^{\kappa c}` (the law of
    :math:`\psi = \operatorname{atanh} c` times the tilt),
    :math:`\kappa = 2a\sqrt d`, peaks: :math:`(d - 1) c^* = \kappa (1 - c^{*2})`,
    the root in [0, 1) (``length`` is ``a``, or ``Ba`` for oprf). 1 for d = 1.
    """
    if d == 1:
        return 1.0
    kappa, n1 = 2.0 * length * math.sqrt(d), d - 1.0
    return 2.0 * kappa / (n1 + math.sqrt(n1 * n1 + 4.0 * kappa * kappa))


class _Draws(NamedTuple):
    """The proposal's choice per trial: component (-1: the plain law) and direction (True: ``-``)."""

    component: object
    negative: object


def _proposal_draws(key, counters, m, tilt, xp):
    """Each trial's mixture component from :data:`STREAM_PROPOSAL` (slot 0): see :func:`rfkernels.rng.uniform_pair`.

    ``u < alpha0``: the plain law (component -1); otherwise projection
    ``min(floor(v m), m - 1)``, moved in the direction ``-`` if ``symmetric``
    and the bit is set, else ``+``. (``floor(v m)`` is uniform over the m
    projections up to the 2**-52 grid of v: a relative error below m 2**-52.)
    """
    u, v, bit = rng.uniform_pair(key, counters, 0, STREAM_PROPOSAL, xp=xp)
    comp = xp.minimum((v * m).astype(xp.int64), m - 1)
    comp = xp.where(u < tilt.alpha0, -1, comp)
    negative = bit if tilt.symmetric else xp.zeros(counters.shape[0], dtype=bool)
    return _Draws(comp, negative)


def _in_block(draws, i0, b, xp):
    """The trials whose component is in rows ``[i0, i0 + b)``, and those rows."""
    comp = draws.component
    cols = xp.nonzero((comp >= i0) & (comp < i0 + b))[0]
    return cols, comp[cols]


def _move_block(c, q, draws, tilt, i0, b, gamma, xp):
    """Move the chosen row of block ``[i0, i0 + b)`` (see :class:`Tilt`), in place.

    ``c`` (m, n) holds the direction coordinates; ``q`` (m, n) the squared
    lengths (chi norms; None for fixed norms). Same operations, in the same
    order, as the Numba kernels' ``_move_row``.
    """
    cols, rows = _in_block(draws, i0, b, xp)
    neg = draws.negative[cols]
    cj = c[rows, cols]
    one = 1.0 - cj * cj
    if tilt.on_projections:
        pj = xp.sqrt(q[rows, cols]) * cj
        w = (q[rows, cols] * one) * tilt.wscale
        pn = pj + xp.where(neg, -tilt.shift, tilt.shift)
        r2 = pn * pn + w
        cn = pn / xp.sqrt(r2)
        q[rows, cols] = r2
    else:
        k = xp.where(neg, tilt.e_minus, tilt.e_plus)
        up, down = (1.0 + cj) * k, 1.0 - cj
        cn = (up - down) / (up + down)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = xp.where(one > 0.0, xp.sqrt((1.0 - cn * cn) / one), 0.0)
    c[i0 : i0 + b, cols] = rho * (c[i0 : i0 + b][:, cols] - gamma * cj) + gamma * cn
    c[rows, cols] = cn


def tilt_weights(variates, tilt, W=None, xp=np):
    """The likelihood-ratio weights of :class:`Tilt`, one per trial.

    ``variates`` (m, n): the projections (chi norms) or the direction
    coordinates (fixed norms) as drawn; ``W`` (m, n): the rows'
    :math:`|\\omega_i|^2 - p_i^2` as drawn, needed where ``tilt.c1 != 0``
    (oprf, chi norms). The sum over projections is :func:`fixed_order_sum`
    (the Numba kernels' bits).
    """
    m = variates.shape[0]
    if tilt.on_projections:
        base = tilt.c0 if tilt.c1 == 0.0 else tilt.c1 * W + tilt.c0
        sg = tilt.shift * variates
        r = elem.exp(sg + base, xp)
        if tilt.symmetric:
            r = 0.5 * (r + elem.exp(base - sg, xp))
    else:
        down, up = 1.0 - variates, 1.0 + variates
        r = elem.exp(tilt.c0 - tilt.n1 * elem.log(down + tilt.e_minus * up, xp), xp)
        if tilt.symmetric:
            r = 0.5 * (r + elem.exp(tilt.c_minus - tilt.n1 * elem.log(down + tilt.e_plus * up, xp),
                                    xp))
    return 1.0 / (tilt.alpha0 + (1.0 - tilt.alpha0) * (fixed_order_sum(r, xp) / m))


def normalised_estimates(key, counters, m, d, kind, length, *, ensemble="iid", norms="chi", xp=None,
                         A=None, tilt=None):
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
    tilt : Tilt, optional
        Draw from the tilted proposal (:func:`tilt_for`) instead of the plain
        law; the weights are returned too.

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
    w : ndarray of shape (n,)
        Only with ``tilt``: each trial's likelihood-ratio weight
        (:func:`tilt_weights`).
    """
    check_choice(ensemble, "ensemble", REDUCED_ENSEMBLES)
    est = estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d, A=A)
    a = _real_scalar(length, "length")
    consts = est.kind.constants(est.kind.resolve(est.params, None), a, est.d)
    key, counters, m, d, xp = _check_counters(key, counters, m, d, ensemble, norms, xp)
    if tilt is not None and not isinstance(tilt, Tilt):
        raise TypeError(f"tilt must be a rfkernels.reduced.Tilt (tilt_for); got {tilt!r}")
    return estimates_of(est, key, counters, a, consts, xp, tilt)


def estimates_of(est, key, counters, a, consts, xp, tilt=None):
    """:func:`normalised_estimates` of a validated estimator (with m, d), trusted arrays and constants."""
    m, d = est.m, est.d
    draws = None if tilt is None else _proposal_draws(key, counters, m, tilt, xp)
    p, w2, moved, W = _projections(key, counters, m, d, est.ensemble.name, est.norms.name, xp,
                                   est.kind.needs_squared_norms, draws, tilt)
    w = None if tilt is None else tilt_weights(moved, tilt, W, xp)
    e = fixed_order_sum(est.kind.terms(p, w2, a, consts, xp), xp) / m
    return e if tilt is None else (e, w)


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
    estimator(kind, ensemble=ensemble).reduced.require()


class Engine:
    """The reduced Monte Carlo engine of one estimator on one backend, chosen once per run.

    Holds what a run needs from its backend: the array namespace ``xp`` the
    estimates come in, the chunk size, the memory estimate and the kernel
    (the Numba CPU kernel, the numba-cuda kernel, or the vectorised NumPy or
    CuPy code). :meth:`chunks` yields ``(n, e, w)`` for every proposal, ``w``
    None for the plain law.

    Parameters
    ----------
    est : rfkernels.estimators.Estimator
        Validated, with m and d, and :attr:`~rfkernels.estimators.Estimator.reduced`.
    backend : {'numpy', 'numba', 'cupy'}
        Validated; ``'cupy'`` needs CuPy or the CUDA simulator (ImportError otherwise).
    chunk : int, optional
        Trials per chunk (default :func:`default_chunk`).
    """

    def __init__(self, est, backend, chunk=None):
        self.est, self.backend = est, backend
        self.xp = engine_namespace(backend)
        self.uses_kernel = backend == "numba" or (backend == "cupy" and gpu_kernel_available())
        # simplex draws d normals per block: the vectorised path holds d x chunk arrays too
        self.width = max(est.m, est.d) if est.ensemble.name == "simplex" else est.m
        self.chunk = default_chunk(backend, self.width) if chunk is None else chunk
        self._kernel = None
        if self.uses_kernel:
            if backend == "numba":
                from ._reduced_numba import reduced_estimates as kernel
            else:
                from ._reduced_cuda import gpu_reduced_estimates as kernel
            self._kernel = kernel

    def bytes(self, n):
        """Estimated peak host bytes for chunks of ``n`` trials (:func:`engine_bytes`)."""
        return engine_bytes(self.est.m, n, self.backend, self.est.ensemble.name, self.est.d)

    def constants(self, value, length):
        """The kind's constants of a pair (``value``: :attr:`Kind.resolve`; ``length``: ``a``)."""
        return self.est.kind.constants(value, length, self.est.d)

    def chunks(self, key, length, consts, *, trials, first=0, pair=0, tilt=None):
        """``(n, e, w)`` chunk by chunk: trials ``first .. first + trials - 1`` of ``pair``.

        ``e`` (and the weights ``w`` of a :class:`Tilt`; None when plain)
        are arrays of :attr:`xp`, reused by the next chunk: consume or copy
        them first. Nothing is checked here (see :func:`estimate_chunks`).
        """
        est, xp, chunk = self.est, self.xp, self.chunk
        stop = first + trials
        if self.uses_kernel:
            k = np.asarray(key)
            k0, k1 = np.uint32(k[0]), np.uint32(k[1])
            buf = xp.empty(min(chunk, trials))
            wbuf = xp.empty(min(chunk, trials)) if tilt is not None else None
            for start in range(first, stop, chunk):
                n = min(chunk, stop - start)
                out = buf[:n]
                weights = wbuf[:n] if tilt is not None else None
                self._kernel(k0, k1, np.uint64((pair << PAIR_SHIFT) | start), np.int64(est.m),
                             np.int64(est.d), est.ensemble.code, est.norms.chi, est.kind, length,
                             out, oprf=consts, tilt=tilt, weights=weights)
                yield n, out, weights
            return
        key = xp.asarray(key)
        for start in range(first, stop, chunk):
            n = min(chunk, stop - start)
            counters = trial_counters(start, n, pair, xp=xp)
            with np.errstate(over="ignore", under="ignore"):
                e = estimates_of(est, key, counters, length, consts, xp, tilt)
            yield (n, e, None) if tilt is None else (n, *e)


def estimate_chunks(key, length, m, d, kind, *, ensemble="iid", norms="chi", trials, first=0,
                    pair=0, chunk=None, backend="numpy", A=None, tilt=None):
    """Normalised estimates of one pair, chunk by chunk: the Monte Carlo engine's public entry.

    Validates its arguments once (into an :class:`rfkernels.estimators.Estimator`
    and an :class:`Engine`) and yields :meth:`Engine.chunks`: ``(n, e, w)``,
    ``e`` the normalised estimates of trials ``first .. first + n - 1`` of pair
    ``pair`` (the counters of :func:`trial_counters`), ``w`` their
    likelihood-ratio weights under ``tilt`` (a :class:`Tilt` from
    :func:`tilt_for`), None without one; arrays of :func:`engine_namespace`,
    which may be reused by the next chunk. ``A`` is the OPRF parameter,
    required for ``kind='oprf'`` (refused otherwise); trig estimates are
    bounded and are not tilted.

    ``backend`` chooses where they are computed, with the same bits
    (positive, hyperbolic and oprf; trig up to each target's ``cos``):

    - ``'numpy'``: :func:`normalised_estimates`, vectorised;
    - ``'numba'``: the parallel CPU kernels of :mod:`rfkernels._reduced_numba`;
    - ``'cupy'``: the GPU kernel of :mod:`rfkernels._reduced_cuda`, compiled by
      numba-cuda from the same scalar source as the CPU kernels (without
      numba-cuda: :func:`normalised_estimates` on CuPy arrays).
    """
    from .backends import BACKENDS

    est = estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d, A=A)
    est.reduced.require()
    trials, first = check_int(trials, "trials"), check_int(first, "first", minimum=0)
    if first + trials > MAX_TRIALS:
        raise ValueError(f"first + trials must be at most 2**{PAIR_SHIFT}; got {first + trials}")
    pair = check_int(pair, "pair", minimum=0)
    if pair >= MAX_PAIRS:
        raise ValueError(f"pair must be below 2**{64 - PAIR_SHIFT}; got {pair}")
    a = _real_scalar(length, "length")
    consts = est.kind.constants(est.kind.resolve(est.params, None), a, est.d)
    if tilt is not None:
        if not isinstance(tilt, Tilt):
            raise TypeError(f"tilt must be a rfkernels.reduced.Tilt (tilt_for); got {tilt!r}")
        if not est.tilted:
            raise ValueError("tilt: trig estimates are bounded and are not tilted; pass tilt=None")
    check_choice(backend, "backend", BACKENDS)
    engine = Engine(est, backend, None if chunk is None else check_int(chunk, "chunk"))
    return engine.chunks(key, a, consts, trials=trials, first=first, pair=pair, tilt=tilt)
