"""The sampler laws: each trial's scalar projections, drawn exactly in distribution.

The laws of :math:`(p_1..p_m)` per ensemble and norms are those of the
table in :mod:`rfkernels.engine`'s notes (MATH.md, "Sampling only what the
estimate depends on"); :func:`normalised_estimates` turns them into one
estimate per trial counter, with the kind's terms
(:attr:`rfkernels.estimators.Kind.terms`), for NumPy or CuPy arrays.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Callable, NamedTuple

import numpy as np

from .. import rng
from ..backends import get_array_module
from ..estimators import estimator, oprf, registry
from ..numerics import chi_quantile
from ..estimators.spec import check_sizes
from ..validation import check_choice, check_int, complex_error, nonnegative_scalar
from .kernel_args import IID, ORTHOGONAL, SIMPLEX
from .proposal import Tilt, in_block, move_block, proposal_draws, tilt_weights
from .streams import (
    STREAM_ANTITHETIC,
    STREAM_DIRECTION,
    STREAM_LENGTH,
    STREAM_OPRF_TAIL,
    STREAM_PHASE,
    STREAM_SIMPLEX,
    STREAM_SIMPLEX_LENGTH,
    STREAM_TAIL,
    fixed_order_sum,
)

#: Kinds with a reduced sampler (every registered kind has one: its terms).
REDUCED_KINDS = registry.names("kind")
#: Ensembles with an exact reduced sampler (the unfixed QR's law is not rotation invariant;
#: sorf: literal sampling only, for now): those whose entry has a kernel code.
REDUCED_ENSEMBLES = tuple(e.name for e in registry.entries("ensemble") if e.reduced_reason is None)


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
    half_sq, s, t = (nonnegative_scalar(v, name) for v, name in ((half_sq, "half_sq"), (s, "s"), (t, "t")))
    return normalisation_of(kind, half_sq, s, t)


def normalisation_of(kind, half_sq, s, t):
    """:func:`normalisation` for a registry :class:`rfkernels.estimators.Kind` and trusted floats."""
    if not kind.on_sum:
        return Normalisation(math.sqrt(t), half_sq, math.exp(-t / 2.0))
    return Normalisation(math.sqrt(s), (s - t) / 4.0, 1.0)


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


def _normals(key, counters, m, xp, stream=STREAM_DIRECTION):
    """g_i, i < m, from ``stream`` (:data:`STREAM_DIRECTION`): shape (m, n)."""
    pairs = xp.arange((m + 1) // 2, dtype=xp.uint64)[:, None]
    z0, z1 = rng.normal_pair(key, counters[None, :], pairs, stream=stream, xp=xp)
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


def _antithetic_squared_norms(key, counters, m, d, xp):
    """The rows' squared antithetic chi(d) norms, shape (m, n) (module notes)."""
    units, row_unit, row_sign = chi_quantile.pairing(m, d)
    z = _normals(key, counters, units, xp, STREAM_ANTITHETIC)
    table = xp.asarray(chi_quantile.quantile_table(d))
    signed = xp.asarray(row_sign)[:, None] * z[xp.asarray(row_unit)]
    return chi_quantile.squared_norms(signed, table, xp)


def _iid_projections(key, counters, m, d, ensemble, norms, xp, squared_norms, draw, tilt):
    """The iid law (code :data:`~rfkernels.engine.kernel_args.IID`): every row its own block."""
    n = counters.shape[0]
    t = counters[None, :]
    slots = xp.arange(m, dtype=xp.uint64)[:, None]
    g = _normals(key, counters, m, xp)
    if norms.chi:
        W = None
        needs_w = draw is not None and tilt.c1 != 0.0
        w2 = None
        if draw is not None:  # iid rows are their own blocks: p_i = g_i, W_i its tail
            cols, rows = in_block(draw, 0, m, xp)
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
    # fixed lengths sqrt(d): the direction coordinate of each row
    if d == 1:
        tail = xp.zeros((m, n))
    else:
        tail = rng.chi_square(key, t, slots, float(d - 1), stream=STREAM_TAIL, xp=xp)
    c = g / xp.sqrt(g * g + tail)
    if draw is not None:
        for i in range(m):  # blocks of one row
            move_block(c, None, draw, tilt, i, 1, 0.0, xp)
    return math.sqrt(d) * c, float(d), (c if draw is not None else None), None


def _orthogonal_directions(key, counters, m, d, norms, xp):
    """``(c, q)``: orthogonal blocks' direction coordinates, and the squared lengths drawn with them.

    ``q`` only for independent chi norms (one Philox block gives a length and
    a coordinate, :data:`STREAM_LENGTH`); None for the other laws.
    """
    n = counters.shape[0]
    q = None
    if norms.independent_chi:
        slots = xp.arange(m, dtype=xp.uint64)[:, None]
        q, g = rng.chi_square_with_normal(key, counters[None, :], slots, float(d), stream=STREAM_LENGTH,
                                          xp=xp)
    else:  # fixed and coupled norms: the directions' normals alone
        g = _normals(key, counters, m, xp)
    c = xp.empty((m, n), dtype=xp.float64)
    for j, i0 in enumerate(range(0, m, d)):
        b = min(d, m - i0)
        gb = g[i0 : i0 + b]
        total = fixed_order_sum(gb * gb, xp)
        if b < d:
            total = total + rng.chi_square(key, counters, j, float(d - b), stream=STREAM_TAIL, xp=xp)
        c[i0 : i0 + b] = gb / xp.sqrt(total)
    return c, q


def _simplex_law(key, counters, m, d, norms, xp):
    """``(c, q)``: simplex blocks' direction coordinates and (independent chi norms; else None) squared lengths."""
    q = None
    if norms.independent_chi:
        slots = xp.arange(m, dtype=xp.uint64)[:, None]
        q = rng.chi_square(key, counters[None, :], slots, float(d), stream=STREAM_SIMPLEX_LENGTH, xp=xp)
    return _simplex_directions(key, counters, m, d, xp), q


def _blocked_projections(directions, key, counters, m, d, ensemble, norms, xp, squared_norms, draw, tilt):
    """A blocked law: ``directions`` (:class:`ReducedLaw`) in blocks of d, then the norm law's lengths."""
    c, q = directions(key, counters, m, d, norms, xp)
    gamma = ensemble.cosine(d)  # the pair law's coupling of two rows of a block
    if not norms.chi:  # fixed lengths sqrt(d)
        if draw is not None:
            for i0 in range(0, m, d):
                move_block(c, None, draw, tilt, i0, min(d, m - i0), gamma, xp)
        return math.sqrt(d) * c, float(d), (c if draw is not None else None), None
    if norms.coupled:
        q = _antithetic_squared_norms(key, counters, m, d, xp)
    if draw is not None:
        for i0 in range(0, m, d):
            move_block(c, q, draw, tilt, i0, min(d, m - i0), gamma, xp)
    p = xp.sqrt(q) * c
    if draw is None:
        return p, q, None, None
    needs_w = tilt.c1 != 0.0
    return p, q, p, (q - p * p if needs_w else None)


class ReducedLaw(NamedTuple):
    """The vectorised reduced law of one ensemble code (the kernels' ``ensemble``).

    Attributes
    ----------
    projections : callable
        ``projections(key, counters, m, d, ensemble, norms, xp, squared_norms, draw, tilt)
        -> (p, |w|^2, moved, W)`` (:func:`_projections`), for a registry
        :class:`~rfkernels.estimators.Ensemble` and :class:`~rfkernels.estimators.NormLaw`.
    width : callable
        ``width(m, d)``: the rows of the largest arrays it holds per trial
        (:func:`rfkernels.engine.engine_bytes`).
    """

    projections: Callable
    width: Callable


#: The vectorised laws by :attr:`rfkernels.estimators.Ensemble.code`, as the kernels'
#: branches (:mod:`rfkernels.engine.cpu`). Simplex draws all d coordinates of every block.
REDUCED_LAWS = {
    IID: ReducedLaw(_iid_projections, lambda m, d: m),
    ORTHOGONAL: ReducedLaw(partial(_blocked_projections, _orthogonal_directions), lambda m, d: m),
    SIMPLEX: ReducedLaw(partial(_blocked_projections, _simplex_law), lambda m, d: max(m, d)),
}


def reduced_law(ensemble):
    """The :class:`ReducedLaw` of a registry :class:`~rfkernels.estimators.Ensemble`; ValueError with its reason."""
    law = REDUCED_LAWS.get(ensemble.code)
    if law is None:
        raise ValueError(ensemble.reduced_reason
                         or f"method='reduced' has no sampler for ensemble={ensemble.name!r} "
                            f"(its code {ensemble.code!r} has no reduced law); use method='literal'")
    return law


def _projections(key, counters, m, d, ensemble, norms, xp, squared_norms, draw=None, tilt=None):
    r"""(p, |w|^2, moved, W): the scalar projections, the rows' squared lengths, the proposal's variates.

    ``ensemble`` and ``norms`` are registry entries (:class:`~rfkernels.estimators.Ensemble`
    with a reduced law, :class:`~rfkernels.estimators.NormLaw`: its flags ``chi`` and
    ``coupled`` choose the lengths, as in the kernels). ``|w|^2`` is None unless
    ``squared_norms`` (or tilted with chi norms); with fixed norms it is the float ``d``.
    ``draw`` is the proposal's per-trial choice (:func:`proposal_draws`; None: the plain
    law), applied as ``tilt`` (a :class:`Tilt`) says; then ``moved`` (m, n) is what
    :func:`tilt_weights` takes (the projections for chi norms, the direction
    coordinates for fixed norms) and ``W`` the rows' :math:`|\omega_i|^2 - p_i^2`
    where the tilt needs them (else None); both None without ``draw``.
    """
    return reduced_law(ensemble).projections(key, counters, m, d, ensemble, norms, xp, squared_norms,
                                             draw, tilt)


def _check_counters(key, counters, m, d, ensemble, norms, xp):
    """Validated ``(key, counters, m, d, xp, ensemble, norms)``, the last two registry entries."""
    check_choice(ensemble, "ensemble", REDUCED_ENSEMBLES)
    law = registry.entry("norms", norms)
    refused = law.refusal(ensemble)
    if refused is not None:
        raise ValueError(refused)
    ensemble = registry.entry("ensemble", ensemble)
    m, d = check_sizes(ensemble, m, d)
    if xp is None:
        xp = get_array_module(counters)
    key = _unsigned(key, "key", xp.uint32, xp)
    counters = _unsigned(counters, "counters", xp.uint64, xp)
    if counters.ndim != 1:
        raise ValueError(f"counters must be a 1-D array of trial counters; got shape {counters.shape}")
    return key, counters, m, d, xp, ensemble, law


def scalar_projections(key, counters, m, d, *, ensemble="iid", norms="chi", xp=None):
    r"""The scalar projections :math:`p_i = \omega_i \cdot e` of m projections, per trial.

    Parameters
    ----------
    key : array_like of uint32, shape (2,)
        Philox key (:func:`rfkernels.rng.key_from_seed`).
    counters : array_like of uint64, shape (n,)
        Philox trial counters (:func:`trial_counters`).
    m, d : int
        Number of projections and dimension (d >= the ensemble's ``min_d``).
    ensemble : str
        A registered ensemble with a reduced law (:data:`REDUCED_ENSEMBLES`).
    norms : str
        A registered norm law (:func:`rfkernels.estimators.names`\ ``('norms')``)
        that applies to ``ensemble`` (:meth:`rfkernels.estimators.NormLaw.refusal`).
    xp : module, optional
        ``numpy`` or ``cupy``; taken from ``counters`` when None.

    Returns
    -------
    p : ndarray of shape (m, n)
        ``p[i, k]`` is projection i of trial k, distributed as
        :math:`\omega_i \cdot e` for any fixed unit vector e (see the module
        notes for the laws and the counter layout).
    """
    key, counters, m, d, xp, ensemble, norms = _check_counters(key, counters, m, d, ensemble, norms, xp)
    return _projections(key, counters, m, d, ensemble, norms, xp, False)[0]


def squared_norms(key, counters, m, d, *, ensemble="iid", norms="chi", xp=None):
    r"""The rows' squared lengths :math:`|\omega_i|^2` that go with :func:`scalar_projections`.

    Same arguments and shape (fixed norms: ``d`` everywhere); jointly with
    :func:`scalar_projections` at the same counters they are distributed as
    :math:`(\omega_i \cdot e, |\omega_i|^2)` (kind ``'oprf'`` needs both).
    """
    key, counters, m, d, xp, ensemble, norms = _check_counters(key, counters, m, d, ensemble, norms, xp)
    w2 = _projections(key, counters, m, d, ensemble, norms, xp, True)[1]
    if not norms.chi:  # fixed lengths: the float d
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
    return oprf.constants(A, nonnegative_scalar(length, "length"), check_int(d, "d"))


def normalised_estimates(key, counters, m, d, kind, length, *, ensemble="iid", norms="chi", xp=None,
                         A=None, tilt=None):
    r"""Normalised estimates ``estimate / C`` of a pair, one per trial counter.

    Parameters
    ----------
    key, counters, m, d, ensemble, norms, xp
        As in :func:`scalar_projections`.
    kind : str
        A registered kind (:data:`REDUCED_KINDS`).
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
        The exponentials are :func:`rfkernels.numerics.elementary.exp` (the same bits
        as the Numba kernels); a term overflows only if its exponent exceeds 709,
        which the caller must check for (the result is then inf).
    w : ndarray of shape (n,)
        Only with ``tilt``: each trial's likelihood-ratio weight
        (:func:`tilt_weights`).
    """
    check_choice(ensemble, "ensemble", REDUCED_ENSEMBLES)
    est = estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d, A=A)
    a = nonnegative_scalar(length, "length")
    consts = est.kind.constants(est.kind.resolve(est.params, None), a, est.d)
    key, counters, m, d, xp, _, _ = _check_counters(key, counters, m, d, ensemble, norms, xp)
    if tilt is not None:
        if not isinstance(tilt, Tilt):
            raise TypeError(f"tilt must be a rfkernels.engine.Tilt (tilt_for); got {tilt!r}")
        est.supports.tilted.require()  # trig's bounded terms, antithetic norms' coupled lengths
    return estimates_of(est, key, counters, a, consts, xp, tilt)


def estimates_of(est, key, counters, a, consts, xp, tilt=None):
    """:func:`normalised_estimates` of a validated estimator (with m, d), trusted arrays and constants."""
    m, d = est.m, est.d
    draws = None if tilt is None else proposal_draws(key, counters, m, tilt, xp)
    p, w2, moved, W = _projections(key, counters, m, d, est.ensemble, est.norms, xp,
                                   est.kind.needs_squared_norms, draws, tilt)
    w = None if tilt is None else tilt_weights(moved, tilt, W, xp)
    terms = est.kind.terms(p, w2, a, consts, xp)
    if est.kind.random_phase:
        terms = terms + phase_terms(key, counters, m, xp)
    e = fixed_order_sum(terms, xp) / m
    return e if tilt is None else (e, w)


def phase_terms(key, counters, m, xp):
    r""":math:`\cos(2\pi U_i)`, i < m, shape (m, n): the random-phase terms (:attr:`Kind.random_phase`).

    ``U_{2j}``, ``U_{2j+1}`` are the two uniforms of
    :func:`rfkernels.rng.uniform_pair` at slot j of :data:`STREAM_PHASE`.
    """
    pairs = xp.arange((m + 1) // 2, dtype=xp.uint64)[:, None]
    u, v, _ = rng.uniform_pair(key, counters[None, :], pairs, stream=STREAM_PHASE, xp=xp)
    U = xp.empty((2 * u.shape[0], counters.shape[0]), dtype=xp.float64)
    U[0::2] = u
    U[1::2] = v
    return xp.cos((2.0 * math.pi) * U[:m])
