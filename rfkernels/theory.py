r"""Closed-form mean squared error of the random-feature estimators of [1]_.

Every function is vectorised over broadcastable inputs: vectors ``x, y`` of
shape ``(..., d)`` and an integer number of projections ``m`` broadcastable
to the batch shape ``(...)``. Results are float64 arrays of the batch shape
(a NumPy scalar for a single pair). The work happens in log space; the
linear-domain functions raise :class:`FloatingPointError` rather than return
an overflowed value, and each has a ``log=True`` form that stays finite.

Notation (see ``docs/theory.rst``): :math:`u = x + y`, :math:`z = x - y`,
:math:`s = |u|^2`, :math:`t = |z|^2`,
:math:`\Lambda = \exp(-(|x|^2 + |y|^2)/2)`, :math:`SM = \exp(x\cdot y)`.
``m`` counts projections; the feature dimension is ``m`` for positive
features and ``2m`` for trig and hyperbolic ones.

Notes
-----
All estimators average ``m`` per-projection terms ``f_i``; their MSE is
``bias^2 + (m V + P C) / m^2`` with ``V`` the variance of one term, ``C``
the covariance of two terms from the same orthogonal block and ``P`` the
number of ordered pairs sharing a block (``sum_j b_j (b_j - 1)`` over block
sizes ``b_j``; zero for iid projections).

For chi norms (every row marginally N(0, I_d)) the estimators are unbiased
and, writing ``D(x) = 1F1(d; d/2; x) - e^{2x}``,

* positive:   ``V = Λ² e^s (e^s - 1)``,         ``C = Λ² D(s/2)``
* hyperbolic: ``V = Λ² (e^s - 1)² / 2``,         ``C = Λ² D(s/2)``
* trig:       ``V = Λ⁻² (1 - e^{-t})² / 2``,      ``C = Λ⁻² D(-t/2)``

because the sum (or difference) of two orthogonal rows is isotropic with
squared norm chi²(2d), whose moment generating function against a fixed
vector is ``1F1(d; d/2; |a|²/2)``. With fixed norms (rows of length
``sqrt(d)``) the same holds with ``0F1(; d/2; d q / 4)`` for one row and
``0F1(; d/2; d q / 2)`` for a pair, and the estimator is biased.

References
----------
.. [1] K. Choromanski et al., "Rethinking Attention with Performers",
   ICLR 2021 (Lemma 2, Theorem 2).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from .numerics import closed_form as _cf
from .numerics import oprf_simplex as _oprf_simplex
from .numerics.closed_form import finish as _finish
from .numerics.closed_form import log_expm1 as _log_expm1
from .docstrings import fill
from .estimators import as_estimator, estimator, registry
from .pairs import is_derf
from .validation import (
    check_bool,
    renamed,
    check_finite,
    check_int,
    check_int_array,
    check_memory,
    check_same_d,
    check_vectors,
)

#: Ensembles with a closed-form theory (the reference code's unfixed QR and
#: SORF have none; simplex is exact for chi norms, see ``docs/beyond.rst``):
#: those whose entry has no ``theory_reason``, in the registry's order.
THEORY_ENSEMBLES = tuple(e.name for e in registry.entries("ensemble") if e.theory_reason is None)
#: Float64 arrays of the batch shape alive at once in a theory evaluation, an
#: upper estimate for the memory checks: tracemalloc measures peaks of 16 (chi
#: norms) and 34 (fixed norms, series) for 20000 points (tests/test_api_edges.py).
#: The fixed-norm trig quadrature at large |x - y| also holds a (points x nodes) array.
_BATCH_TEMPORARIES = 40


class Geometry(NamedTuple):
    """The invariants of a pair (x, y) that every MSE depends on.

    Attributes
    ----------
    d : ndarray
        Dimension.
    half_sq : ndarray
        ``(|x|^2 + |y|^2) / 2``, i.e. ``-log Λ``.
    s : ndarray
        ``|x + y|^2``.
    t : ndarray
        ``|x - y|^2``.
    """

    d: np.ndarray
    half_sq: np.ndarray
    s: np.ndarray
    t: np.ndarray

    @property
    def log_sm(self):
        """``log SM = x·y``."""
        return (self.s - self.t) / 4.0


def geometry(x, y):
    """The :class:`Geometry` of vectors ``x, y`` of shape ``(..., d)``.

    ``s`` and ``t`` are computed from ``x ± y`` directly, so they keep full
    relative accuracy when x and y nearly cancel.
    """
    x = check_vectors(x, "x")
    y = check_vectors(y, "y")
    d = check_same_d([x.shape, y.shape], ["x", "y"])
    try:
        x, y = np.broadcast_arrays(x, y)
    except ValueError:
        raise ValueError(
            f"x and y must broadcast together; got shapes {x.shape} and {y.shape}"
        ) from None
    # x + y and x - y (shape (..., d)), then a few arrays of the batch shape
    check_memory(8 * (2 * x.size + _BATCH_TEMPORARIES * x.size // d),
                 f"theory.geometry of vectors of shape {x.shape}")
    sq = lambda v: np.einsum("...i,...i->...", v, v)  # noqa: E731
    with np.errstate(over="ignore", invalid="ignore"):
        half_sq = (sq(x) + sq(y)) / 2.0
        geom = Geometry(np.full(half_sq.shape, float(d)), half_sq, sq(x + y), sq(x - y))
    return _check_invariants(geom, "x and y")


def _check_invariants(geom, what):
    """Refuse a geometry whose squared norms overflowed float64.

    The log of every MSE is of the order of ``|x|^2 + |y|^2`` (e.g.
    ``1.5 |x + y|^2 - 0.5 |x - y|^2`` for positive features), so when these
    are beyond float64 (entries beyond about 1e154) no log-domain rewriting
    can represent the result, and the rounding of the inputs alone would
    make it meaningless.
    """
    if not (np.all(np.isfinite(geom.half_sq)) and np.all(np.isfinite(geom.s))
            and np.all(np.isfinite(geom.t))):
        raise FloatingPointError(
            f"the squared norms |x|^2, |y|^2, |x + y|^2 or |x - y|^2 of {what} overflow "
            "float64 (norms beyond about 1.3e154): the log of the MSE is of that order and "
            "cannot be represented even with log=True; rescale the inputs"
        )
    return geom


def _checked_geometry(geom):
    """A user's :class:`Geometry` as broadcast float64 arrays (scalars allowed), checked once.

    The ``*_from_geometry`` entries take it from the user: ``d`` a whole
    number >= 1, the squared lengths >= 0, no NaN; an infinite one is the
    overflow :func:`_check_invariants` reports (FloatingPointError).
    """
    if not isinstance(geom, Geometry):
        raise TypeError(f"geom must be a theory.Geometry (d, half_sq, s, t); got {type(geom).__name__}")
    try:
        fields = [np.asarray(v, dtype=np.float64) for v in geom]
    except (TypeError, ValueError):
        raise TypeError(f"geom's fields must be real numbers or arrays; got {geom!r}") from None
    for name, v in zip(Geometry._fields, fields):
        if np.any(np.isnan(v)):
            raise ValueError(f"geom.{name} holds NaN")
    try:
        fields = np.broadcast_arrays(*fields)
    except ValueError:
        raise ValueError("the fields of geom do not broadcast against each other: shapes "
                         f"{[np.shape(v) for v in geom]}") from None
    out = _check_invariants(Geometry(*(np.array(v) for v in fields)), "geom")  # inf: overflow
    if np.any(out.d < 1) or np.any(out.d != np.round(out.d)):
        raise ValueError(f"geom.d must hold whole numbers >= 1; got {geom.d!r}")
    for name in ("half_sq", "s", "t"):
        if np.any(getattr(out, name) < 0):
            raise ValueError(f"geom.{name} is a squared length and must be >= 0")
    return out


def _angle_arguments(d, norm_x, norm_y, angle):
    """Validated, broadcast ``d, norm_x, norm_y, angle`` (see :func:`geometry_from_angle`)."""
    d = check_int_array(d, "d", minimum=1)
    nx = check_finite(norm_x, "norm_x")
    ny = check_finite(norm_y, "norm_y")
    th = check_finite(angle, "angle")
    if np.any(nx < 0) or np.any(ny < 0):
        raise ValueError("norm_x and norm_y must be >= 0")
    if np.any(th < 0) or np.any(th > np.pi):
        raise ValueError("angle must lie in [0, pi] radians")
    try:
        shape = np.broadcast_shapes(d.shape, nx.shape, ny.shape, th.shape)
    except ValueError:
        raise ValueError(
            f"d, norm_x, norm_y and angle must broadcast together; got shapes {d.shape}, "
            f"{nx.shape}, {ny.shape} and {th.shape}"
        ) from None
    check_memory(_BATCH_TEMPORARIES * 8 * math.prod(shape),
                 f"theory.geometry_from_angle of batch shape {shape}")
    d, nx, ny, th = np.broadcast_arrays(d, nx, ny, th)
    if np.any((d == 1) & (th != 0) & (th != np.pi)):
        raise ValueError("angle must be 0 or pi when d == 1")
    return d, nx, ny, th


def geometry_from_angle(d, norm_x, norm_y, angle):
    """The :class:`Geometry` of a pair with given norms and angle (radians).

    Broadcasts over all arguments. Uses
    ``|x ± y|² = (|x| - |y|)² + 4|x||y| cos²(θ/2)`` (resp. ``sin²``), which is
    accurate near θ = π and θ = 0. ``d = 1`` admits only θ in {0, π}.
    """
    d, nx, ny, th = _angle_arguments(d, norm_x, norm_y, angle)
    with np.errstate(over="ignore", invalid="ignore"):
        diff2 = (nx - ny) ** 2
        prod4 = 4.0 * nx * ny
        s = diff2 + prod4 * np.cos(th / 2.0) ** 2
        t = diff2 + prod4 * np.sin(th / 2.0) ** 2
        geom = Geometry(d.astype(np.float64), (nx**2 + ny**2) / 2.0, s, t)
    return _check_invariants(geom, "norm_x and norm_y")


def kernel_geometry(geom, est):
    """``(geom', log_factor)``: the softmax geometry of the scaled pair and the target's log factor.

    The estimator's target kernel (:attr:`rfkernels.estimators.Estimator.kernel`)
    is ``exp(log_factor) * SM(x', y')`` with ``x' = c x``, ``y' = c y``
    (:mod:`rfkernels.estimators.kernels`); every invariant of the geometry
    scales by ``c^2``. For the softmax kernel ``geom`` itself and 0.0.
    """
    if est.kernel.name == "softmax":
        return geom, 0.0
    c2 = est.scale * est.scale
    if c2 != 1.0:  # gamma = 1/2 scales nothing, but the factor remains
        with np.errstate(over="ignore"):
            geom = Geometry(geom.d, geom.half_sq * c2, geom.s * c2, geom.t * c2)
        geom = _check_invariants(geom, "the scaled pair sqrt(2 gamma) (x, y)")
    return geom, est.kernel.log_factor(geom.half_sq)


def kernel_log_value(geom, est):
    """The log of the estimator's target kernel at the pair(s) of ``geom`` (softmax: ``x.y``).

    For the Gaussian kernel ``-gamma |x - y|^2`` from ``t`` alone (the
    factor folded into the scaled geometry, :func:`kernel_geometry`), not
    as ``x'.y' - (|x'|^2 + |y'|^2)/2``, which cancels at large norms.
    """
    if est.kernel.name == "softmax":
        return geom.log_sm
    gs, log_factor = kernel_geometry(geom, est)
    return (gs.half_sq + log_factor) - gs.t / 2.0  # x.y = half_sq - t/2; the first term is 0


def _check_m(m, geom, name="m"):
    m = check_int_array(m, name, minimum=1)
    try:
        shape = np.broadcast_shapes(m.shape, geom.s.shape)
    except ValueError:
        raise ValueError(
            f"{name} of shape {m.shape} does not broadcast with the batch shape {geom.s.shape}"
        ) from None
    check_memory(_BATCH_TEMPORARIES * 8 * math.prod(shape),
                 f"a theory evaluation of batch shape {shape} ({name} of shape {m.shape})")
    return m


# ---------------------------------------------------------------------------
# Lemma 2 and Theorem 2 (as stated in the paper)
# ---------------------------------------------------------------------------


def no_closed_form_reason(kind, ensemble, norms):
    """Why :func:`exact_mse` has no value for this estimator, or None if it has one.

    The estimator's :attr:`rfkernels.estimators.Estimator.supports.exact_mse`, by name
    (the analysis layer and the command line ask before computing, and say
    the same reason in tables and JSON).
    """
    return estimator(kind, ensemble=ensemble, norms=norms).supports.exact_mse.reason


def no_lemma2_reason(kind, norms):
    """Why Lemma 2 does not apply, or None if it does (the paper's kinds, chi norms)."""
    return estimator(kind, norms=norms).supports.lemma2.reason


def no_theorem2_reason(kind, ensemble, norms, m=None, d=None):
    """Why Theorem 2's bound does not apply, or None (positive, orthogonal, chi norms, m <= d)."""
    return estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d).supports.theorem2.reason


def lemma2_of(geom, m, est, *, log=True):
    """Lemma 2's MSE (its log by default) of a validated estimator with :attr:`~rfkernels.estimators.Estimator.supports.lemma2`.

    For a target kernel other than softmax, Lemma 2 at the scaled pair times
    the kernel's factor squared (:func:`kernel_geometry`).
    """
    est.supports.lemma2.require()
    m = _check_m(m, geom)
    geom, log_factor = _folded(*kernel_geometry(geom, est), est)
    return _finish(est.kind.lemma2(geom, m) + 2.0 * log_factor, log, "Lemma 2 MSE")


def lemma2_mse_from_geometry(geom, m, kind, *, norms="chi", log=False):
    """Lemma 2 of [1]_ for a :class:`Geometry`; see :func:`lemma2_mse`."""
    log = check_bool(log, "log")
    geom = _checked_geometry(geom)
    est = estimator(kind, norms=norms)
    if not est.supports.lemma2:
        if est.kind.lemma2 is None:
            raise ValueError(f"{est.supports.lemma2.reason}: kind={kind!r} is beyond the paper: use "
                             "theory.exact_mse (its exact MSE)")
        raise ValueError(f"norms={norms!r} is not supported by Lemma 2 (it assumes chi norms, i.e. "
                         f"Gaussian projections); use exact_mse(..., norms={norms!r})")
    return lemma2_of(geom, m, est, log=log)


def lemma2_mse(x, y, m, kind, *, norms="chi", log=False):
    r"""The iid MSE of Lemma 2 of the Performer paper [1]_.

    Parameters
    ----------
    x, y : array_like, shape (..., d)
        The pair(s) of inputs.
    m : int or array_like of int
        Number of projections (broadcast against the batch shape).
    kind : str
        A kind Lemma 2 speaks of (:data:`rfkernels.PAPER_KINDS`).
    norms : str
        Lemma 2 holds for independent chi(d) norms only (``'chi'``); the
        others are refused with the reason.
    log : bool
        Return the natural log of the MSE.

    Returns
    -------
    ndarray
        The MSE (or its log) of the batch shape.

    Notes
    -----
    .. math::

        \mathrm{MSE}_{trig} &= \frac{1}{2m} e^{|u|^2} SM^{-2} (1 - e^{-|z|^2})^2 \\
        \mathrm{MSE}_{+} &= \frac{1}{m} e^{|u|^2} SM^2 (1 - e^{-|u|^2}) \\
        \mathrm{MSE}_{hyp} &= \tfrac12 (1 - e^{-|u|^2})\, \mathrm{MSE}_{+}

    It equals :func:`exact_mse` with ``ensemble='iid'`` (a test checks it).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021.

    Examples
    --------
    >>> import numpy as np
    >>> from rfkernels import theory
    >>> x, y = np.array([0.5, 0.0]), np.array([0.0, 0.5])
    >>> float(theory.lemma2_mse(x, y, 8, "positive"))  # doctest: +ELLIPSIS
    0.0810...
    """
    return lemma2_mse_from_geometry(geometry(x, y), m, kind, norms=norms, log=log)


def theorem2_bound_from_geometry(geom, m, *, norms="chi", log=False):
    """Theorem 2 of [1]_ for a :class:`Geometry`; see :func:`theorem2_bound`."""
    log = check_bool(log, "log")
    geom = _checked_geometry(geom)
    est = estimator("positive", ensemble="orthogonal", norms=norms)
    if not est.supports.theorem2:
        raise ValueError(f"norms={norms!r} is not supported by Theorem 2 (it assumes chi norms); "
                         f"use exact_mse(..., ensemble='orthogonal', norms={norms!r})")
    m = _check_m(m, geom)
    if np.any(m > geom.d):
        raise ValueError("Theorem 2 holds for m <= d only (one orthogonal block); "
                         "use exact_mse(..., ensemble='orthogonal') for stacked blocks")
    s = geom.s
    # MSE_pos - 2(m-1)/(m(d+2)) (SM - Λ)^2
    #   = MSE_pos * (1 - 2(m-1)/(d+2) * expm1(s/2)^2 / (e^s expm1(s)))
    log_pos = est.kind.lemma2(geom, m)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(
            s > 0,
            np.exp(2.0 * _log_expm1(s / 2.0) - s - _log_expm1(np.where(s > 0, s, 1.0))),
            0.0,
        )
        factor = 1.0 - 2.0 * (m - 1.0) / (geom.d + 2.0) * ratio
        out = log_pos + np.log(factor)
    return _finish(out, log, "Theorem 2 bound")


def theorem2_bound(x, y, m, *, norms="chi", log=False):
    r"""Theorem 2's upper bound on the orthogonal positive-feature MSE [1]_.

    .. math::

        \mathrm{MSE}^{ort}_{+} \le \mathrm{MSE}_{+}
            - \frac{2(m-1)}{m(d+2)} \left(SM - e^{-(|x|^2+|y|^2)/2}\right)^2

    for one orthogonal block (``m <= d``) with chi norms. :func:`exact_mse`
    with ``ensemble='orthogonal'`` gives the value the bound bounds.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021.
    """
    return theorem2_bound_from_geometry(geometry(x, y), m, norms=norms, log=log)


# ---------------------------------------------------------------------------
# Exact MSE
# ---------------------------------------------------------------------------


def _exact(geom, m, est, log, vectors):
    """The exact MSE of a validated :class:`rfkernels.estimators.Estimator` at a checked geometry.

    ``vectors``, the pair(s) ``(x, y)`` of ``geom``, reach the kind's theory
    (a kind whose MSE depends on the vectors themselves needs them). The
    estimator's target kernel rescales the pair (:func:`kernel_geometry`)
    and multiplies the MSE by its factor squared.
    """
    est.supports.exact_mse.require()
    if vectors is None and est.kind.theory_needs_vectors:
        raise ValueError(f"the exact MSE of kind={est.kind.name!r} depends on x and y themselves, "
                         "not only on their geometry: pass the vectors (x, y)")
    m = _check_m(m, geom)
    if est.ensemble.min_d > 1 and np.any(np.asarray(geom.d) < est.ensemble.min_d):
        estimator(est.kind.name, ensemble=est.ensemble.name, d=int(np.min(geom.d)))  # its message
    A = getattr(est.params, "A", None)
    if A is not None:
        try:
            np.broadcast_shapes(np.shape(A), np.shape(geom.s))
        except ValueError:
            raise ValueError(f"A of shape {np.shape(A)} does not broadcast with the batch shape "
                             f"{np.shape(geom.s)}") from None
    geom, log_factor = _folded(*kernel_geometry(geom, est), est)
    if vectors is not None and est.scale != 1.0:
        vectors = tuple(est.scale * np.asarray(v) for v in vectors)
    with np.errstate(invalid="ignore"):
        out = est.kind.log_mse(geom, m, est, vectors) + 2.0 * log_factor
    return _finish(out, log, "exact MSE")


def _folded(geom, log_factor, est):
    r"""``(geom, log_factor)`` with the factor folded into the geometry for kinds on x - y.

    Their MSE is ``e^{2 half_sq} f(|x - y|^2)`` (the estimate over
    :math:`\Lambda^{-1}` depends on x - y only), so the factor enters as
    ``half_sq + log_factor``, which is exactly 0 for the Gaussian kernel:
    no cancellation of two terms of order ``|x'|^2`` in the log. ``s`` moves
    with it (``s + t = 4 half_sq``), so a formula written with ``s`` and
    ``x.y`` (Lemma 2's) gives the same value.
    """
    if est.kind.on_sum or est.kernel.name == "softmax":
        return geom, log_factor
    half_sq = geom.half_sq + log_factor
    return geom._replace(half_sq=half_sq, s=4.0 * half_sq - geom.t), 0.0


@fill(
    m="""\
m : int or array_like of int
    Number of projections, broadcast against the batch; orthogonal and
    simplex projections come in independent blocks of ``d`` rows, the
    last one partial.""",
    A="""\
A : float or array_like, optional
    ``kind='oprf'``: a float < 1/8, broadcast against the batch; left out,
    each pair's optimal ``A*`` (:func:`oprf_optimal_a`). ``kind='derf'``:
    a float a (aI) or a symmetric (d, d) array, :math:`8A \\prec I`, shared
    by the batch.""",
    population="""\
population : tuple of array_like, optional
    ``(queries, keys)``, (n, d) and (n', d), on which the data-fitted kinds
    ``'saderf'``, ``'aderf'``, ``'sderf'`` are fitted (default: the rows of
    x and of y as given; a single pair is refused).""")
def exact_mse(x, y, m, kind, *, ensemble="iid", norms="chi", A=None, log=False, kernel="softmax",
              gamma=None, B_query=None, B_key=None, population=None, vectors=None):
    r"""Exact MSE of an estimator: every kind, ensemble and norm law with a closed form.

    The one exact-MSE function; the ``mse`` of :func:`rfkernels.estimator`'s
    frozen value calls it with its validated estimator.

    Parameters
    ----------
    x, y : array_like of shape (..., d), or a Geometry and None
        The pair(s) of inputs, broadcast together; or ``x`` a
        :class:`Geometry` (of a batch of pairs) and ``y`` None.
    %(m)s
    %(kind_or_spec)s
        :func:`no_closed_form_reason` says why a choice has no closed form.
    %(ensemble)s
    %(norms)s
    %(A)s
    %(B)s
    %(population)s
    %(log)s
    %(kernel)s
    %(gamma)s
    vectors : tuple of array_like, optional
        With a Geometry only: the pair(s) ``(x, y)`` it is the geometry of,
        for the kinds whose MSE depends on the vectors themselves.

    Returns
    -------
    ndarray
        MSE of the estimate of the kernel (``exp(x·y)`` by default), batch shape.

    Raises
    ------
    ValueError
        Non-finite, non-real ("Complex data not supported") or badly shaped
        x, y; m < 1 or not broadcastable; unknown kind, ensemble or norms;
        a choice without a closed form (the estimator's
        ``supports.exact_mse`` reason); ``A`` >= 1/8 or given for another
        kind; simplex with d = 1.
    OverflowError
        Simplex ensembles with ``|x ± y|^2/(d - 1)`` beyond about 3300 (the
        quadrature's range).
    TypeError
        ``log`` not a bool; non-integer m.
    FloatingPointError
        The MSE overflows float64 (use ``log=True``), or ``|x|^2``, ``|y|^2``
        or ``|x ± y|^2`` do (norms beyond about 1.3e154), where even the log
        of the MSE cannot be represented.
    MemoryError
        If the batch is too large for this machine (checked before any work).

    Notes
    -----
    .. math::

        \mathrm{MSE} = \mathrm{bias}^2 + \frac{m V + P C}{m^2},
        \qquad P = \sum_j b_j (b_j - 1)

    With chi norms, for positive and hyperbolic features
    :math:`C = \Lambda^2 (\,{}_1F_1(d; d/2; |u|^2/2) - e^{|u|^2})`, and for
    trig features :math:`C = \Lambda^{-2} ({}_1F_1(d; d/2; -|z|^2/2) - e^{-|z|^2})`.
    Each difference is summed as one series with cancellation-free
    coefficients (small arguments), from the positive Taylor series scaled by
    :math:`e^{-2x}` (large positive arguments), from Kummer's transformation
    (large negative arguments) or asymptotically (beyond 5000). OPRF and
    simplex come from :mod:`rfkernels.numerics.oprf_simplex` (the simplex
    pair term is a one-dimensional Gauss-Jacobi quadrature;
    ``docs/beyond.rst``). ``kind='offset'``: trig's MSE plus
    :math:`e^{|x|^2 + |y|^2}/(2m)` (``1/(2m)`` for the Gaussian kernel).

    Accuracy: within 1e-10 relative of 50-digit mpmath for
    :math:`|x \pm y|^2 \in [10^{-8}, 10^3]` and d from 1 to 4096
    (``tests/test_theory.py::test_exact_mse_against_mpmath``,
    ``tests/test_beyond_theory.py``); the measured worst cases are in
    ``docs/performance.md``.

    Examples
    --------
    >>> import numpy as np
    >>> from rfkernels import theory
    >>> x, y = theory.pair(16, 0.5, 0.5, 1.0)
    >>> iid = theory.exact_mse(x, y, 16, "positive")
    >>> ort = theory.exact_mse(x, y, 16, "positive", ensemble="orthogonal")
    >>> bool(ort < iid)
    True
    """
    log = check_bool(log, "log")
    if isinstance(x, Geometry):
        if y is not None:
            raise ValueError("y must be None when x is a theory.Geometry (it holds the pairs)")
        geom = _checked_geometry(x)
        d = None
    else:
        if y is None:
            raise TypeError("y is None: then x must be a theory.Geometry (d, half_sq, s, t) of the "
                            f"pairs; got {type(x).__name__}")
        if vectors is not None:
            raise ValueError("vectors go with a theory.Geometry x only; here x and y are the vectors")
        geom = geometry(x, y)
        vectors = np.broadcast_arrays(np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64))
        d = _derf_d(kind, x)
    est = as_estimator(kind, ensemble=ensemble, norms=norms, A=A, batch=True, kernel=kernel,
                       gamma=gamma, B_query=B_query, B_key=B_key, d=d)
    if vectors is not None and isinstance(x, Geometry):
        # checked where this estimator's theory or fit reads them; others leave them unread
        uses = est.kind.theory_needs_vectors or est.needs_fit
        vectors = check_pair_vectors(geom, vectors) if uses else None
    rows = (None, None) if vectors is None else vectors
    est = fit_population(est, *rows, population)
    return _exact(geom, m, est, log, vectors)


def check_pair_vectors(geom, vectors):
    """``vectors``, the pair(s) ``(x, y)``, as float64 arrays, checked to be those whose geometry ``geom`` is.

    ValueError where they are not (d, the squared lengths within 1e-12 relative).
    """
    if not isinstance(vectors, (tuple, list)) or len(vectors) != 2:
        raise ValueError("vectors must be the pair (x, y) of arrays the geometry is of")
    x, y = np.broadcast_arrays(*(check_vectors(v, n) for v, n in zip(vectors, ("vectors[0]",
                                                                            "vectors[1]"))))
    got = geometry(x, y)
    same = all(np.allclose(a, b, rtol=1e-12, atol=0.0) for a, b in zip(
        np.broadcast_arrays(got.d, got.half_sq, got.s, got.t),
        np.broadcast_arrays(geom.d, geom.half_sq, geom.s, geom.t)))
    if not same:
        raise ValueError("vectors=(x, y) do not have the given geometry (d, |x|^2 + |y|^2, "
                         "|x+y|^2, |x-y|^2 differ): pass theory.geometry(x, y) with its vectors")
    return x, y


def _derf_d(kind, x):
    """d for a DERF kind's estimator (its (d, d) parameters are checked against it), else None."""
    return int(np.shape(x)[-1]) if isinstance(kind, str) and is_derf(kind) else None


def fit_population(est, x, y, population=None):
    """``est`` fitted on ``population`` (or the rows of x and y) where its kind is data-fitted.

    ``population`` is ``(queries, keys)``; the rows are those given (a
    broadcast x is not repeated). Other kinds: ``est`` itself, and a
    population given to them is refused.
    """
    if not est.needs_fit:
        if population is not None:
            what = "is fitted already" if est.kind.population else "is not one"
            raise ValueError(f"population is where the data-fitted kinds are fitted; "
                             f"kind={est.kind.name!r} {what}")
        return est
    if population is None:
        if x is None:
            raise ValueError(f"kind={est.kind.name!r} is fitted on data: pass population=(queries, "
                             "keys), or the pairs x, y themselves")
        population = (x, y)
    elif not isinstance(population, (tuple, list)) or len(population) != 2:
        raise ValueError("population must be a pair (queries, keys) of (n, d) arrays")
    q, k = (check_vectors(v, name).reshape(-1, np.shape(v)[-1])
            for v, name in zip(population, ("population[0]", "population[1]")))
    d = q.shape[1] if x is None else np.shape(x)[-1]
    if q.shape[1] != d or k.shape[1] != d:
        raise ValueError(f"population holds vectors of d = {q.shape[1]} and {k.shape[1]}; the pairs "
                         f"have d = {d}")
    c = est.scale  # the target kernel's features act on c x: the fit is of those rows
    return est.fitted_on(c * q, c * k) if c != 1.0 else est.fitted_on(q, k)


def oprf_optimal_a(x, y):
    r"""The variance-minimising OPRF parameter ``A*`` of the pair(s) (x, y).

    .. math:: A^* = \frac{1 - 2\rho - \sqrt{(2\rho + 1)^2 + 8\rho}}{16} \le 0,
        \qquad \rho = |x + y|^2 / d,

    evaluated without cancellation (full relative accuracy as rho -> 0,
    where ``A* ~ -rho/2``). Broadcasts like :func:`geometry`; the default
    ``A`` of :func:`exact_mse` with ``kind='oprf'``.
    """
    return oprf_optimal_a_from_geometry(geometry(x, y))


def oprf_optimal_a_from_geometry(geom):
    """:func:`oprf_optimal_a` for a :class:`Geometry` (``rho = s / d``)."""
    return _oprf_simplex.oprf_optimal_a_from_geometry(geom)


def pairs_in_blocks(m, d, ensemble):
    """``P = sum_j b_j (b_j - 1)``: ordered pairs of projections sharing a block.

    ``ensemble`` is a registered ensemble's name
    (``rfkernels.estimators.names('ensemble')``): where its rows come in
    blocks of ``d`` (:attr:`rfkernels.estimators.registry.Ensemble.blocked`,
    the last block partial), the pairs within them; otherwise rows share no
    block (P = 0).
    """
    return _cf.pairs_in_blocks(m, d, blocked=registry.entry("ensemble", ensemble).blocked)


def pair(d, norm_x, norm_y, angle):
    """Vectors x, y in R^d with the given norms and angle (radians).

    ``x = |x| e_1`` and ``y = |y| (cos θ e_1 + sin θ e_2)``. ``norm_x``,
    ``norm_y`` and ``angle`` broadcast, giving arrays of shape ``(..., d)``;
    ``d`` is one integer. Angles lie in [0, π]; ``d = 1`` allows 0 and π only.

    Examples
    --------
    >>> from rfkernels.theory import pair
    >>> x, y = pair(3, 1.0, 2.0, 0.0)
    >>> x.tolist(), y.tolist()
    ([1.0, 0.0, 0.0], [2.0, 0.0, 0.0])
    """
    d = check_int(d, "d", minimum=1)
    _, nx, ny, th = _angle_arguments(d, norm_x, norm_y, angle)  # validates every argument
    check_memory(2 * 8 * nx.size * d,
                 f"theory.pair(d={d}) of batch shape {nx.shape} (two arrays of shape "
                 f"{nx.shape + (d,)})")
    x = np.zeros(nx.shape + (d,))
    y = np.zeros(nx.shape + (d,))
    x[..., 0] = nx
    if d == 1:
        y[..., 0] = np.where(th == 0, ny, -ny)
    else:
        y[..., 0] = ny * np.cos(th)
        y[..., 1] = ny * np.sin(th)
    return x, y


__all__ = [
    "Geometry",
    "THEORY_ENSEMBLES",
    "check_pair_vectors",
    "exact_mse",
    "geometry",
    "geometry_from_angle",
    "kernel_geometry",
    "kernel_log_value",
    "lemma2_mse",
    "no_closed_form_reason",
    "no_lemma2_reason",
    "no_theorem2_reason",
    "lemma2_mse_from_geometry",
    "lemma2_of",
    "oprf_optimal_a",
    "oprf_optimal_a_from_geometry",
    "pair",
    "pairs_in_blocks",
    "theorem2_bound",
    "theorem2_bound_from_geometry",
]


#: Names this module no longer holds (``CHANGELOG.md``): the registry's lists.
_RENAMED = {
    "KINDS": ("rfkernels.KINDS", lambda: registry.names("kind")),
    "NORMS": ("rfkernels.NORMS", lambda: registry.names("norms")),
    "PAPER_KINDS": ("rfkernels.PAPER_KINDS",
                    lambda: tuple(k.name for k in registry.entries("kind") if k.paper)),
    # one exact-MSE function: its Geometry form and log= cover these
    "exact_mse_from_geometry": ("rfkernels.theory.exact_mse(geom, None, m, kind, ...)",
                                lambda: _exact_mse_from_geometry),
    "log_exact_mse": ("rfkernels.theory.exact_mse(..., log=True)", lambda: _log_exact_mse),
    "exact_log_mse": ("rfkernels.theory.exact_mse(geom, None, m, est, log=True, vectors=...)",
                      lambda: _exact_log_mse),
}


def _exact_mse_from_geometry(geom, m, kind, *, ensemble="iid", norms="chi", A=None, log=False,
                             kernel="softmax", gamma=None):
    return exact_mse(geom, None, m, kind, ensemble=ensemble, norms=norms, A=A, log=log,
                     kernel=kernel, gamma=gamma)


def _log_exact_mse(x, y, m, kind, **choices):
    return exact_mse(x, y, m, kind, log=True, **choices)


def _exact_log_mse(geom, m, est, *, log=True, vectors=None):
    return exact_mse(geom, None, m, est, log=log, vectors=vectors)


def __getattr__(name):
    return renamed(__name__, _RENAMED, name)

