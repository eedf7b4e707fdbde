r"""Tail diagnostics of the squared errors: when a Monte Carlo standard error can be trusted.

The squared error of positive and hyperbolic estimates is roughly
log-normal, with a fourth moment growing like :math:`e^{4|u|^2}`: for
:math:`|u|^2 \gtrsim 1` the sample MSE converges slowly, usually sits below
the truth, and its naive standard error is too small (MATH.md, "Monte Carlo
error is heavy-tailed"). We fit a generalized Pareto distribution to the
largest :math:`M = \lceil\min(0.2 S, 3\sqrt{S})\rceil` of the S squared
errors (Zhang and Stephens' estimator with the weak prior used by Pareto
smoothed importance sampling [1]_ [2]_). Its shape :math:`\hat k` says how
many moments the tail behaves as having: :math:`1/\hat k`. The standard
error needs a finite variance of the squared errors, i.e. :math:`k < 1/2`,
so ``tail_ok`` requires :math:`\hat k <` :data:`TAIL_K_MAX` (= 0.5). With
fewer than :data:`MIN_TAIL` tail points no fit is made and ``tail_ok`` is
False. The largest squared error's share of their sum (``max_share``) is
reported beside it. A top tail of nearly equal values (the largest at most
:data:`FLAT_TAIL_RATIO` times the mean) is bounded in effect, whatever k-hat
the fit gives to their tiny spread: a well-matched importance-sampling
proposal produces exactly that (the weighted squared errors of a positive
estimator are bounded by :math:`e^{|u|^2}/(1 - \alpha_0) + 1/\alpha_0` under
the iid proposal with chi norms, and pile up near one value); it counts as tame. Under a proposal,
the diagnostic is of the weighted squared errors, and ``reach`` counts the
proposal's draws.

A sample can only show the tail it has reached. For positive and
hyperbolic features the variance of one term :math:`e^{a p - a^2/2}`
(:math:`a = |x + y|`, :math:`p \approx N(0, 1)`) comes from draws near
:math:`p = 2a`, where :math:`e^{2ap - p^2/2}` peaks; far beyond the sample's
reach every estimate is close to its typical value, the squared errors look
tame (even constant) and the MSE is badly underestimated. ``tail.reach`` is
the expected number of projections drawn beyond :math:`2a`,
:math:`S\, m\, \bar\Phi(2a)` (twice that for hyperbolic features, which
have both tails); ``tail_ok`` also requires ``reach >=``
:data:`REACH_MIN` (= 100). Trig errors are bounded and have no such
region (``reach`` is None).

References
----------
.. [1] J. Zhang and M. A. Stephens, "A new and efficient estimation method
   for the generalized Pareto distribution", Technometrics 51(3), 316-325,
   2009.
.. [2] A. Vehtari, D. Simpson, A. Gelman, Y. Yao and J. Gabry, "Pareto
   smoothed importance sampling", JMLR 25(72), 1-58, 2024.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkernels.estimators import Kind, registry

__all__ = ["FLAT_TAIL_RATIO", "MIN_TAIL", "REACH_MIN", "TAIL_K_MAX", "TailDiagnostic", "pareto_k_hat",
           "tail_size"]

#: ``tail_ok`` is ``k_hat < TAIL_K_MAX``: below 1/2 the squared errors have a finite variance.
TAIL_K_MAX = 0.5
#: Fewest tail points for a Pareto fit (fewer: no k-hat, ``tail_ok`` False).
MIN_TAIL = 5
#: ``tail_ok`` needs at least this many projections expected beyond 2|x + y| (see ``reach``).
REACH_MIN = 100.0
#: A tail whose largest value is at most this many times the mean is bounded in effect:
#: ``tail_ok`` despite a k-hat >= 1/2 (see ``tail_from_top``).
FLAT_TAIL_RATIO = 10.0


@dataclass(frozen=True)
class TailDiagnostic:
    """The upper tail of the squared errors.

    Attributes
    ----------
    k_hat : float
        Generalized Pareto shape fitted to the largest ``n_tail`` squared
        errors; NaN when no fit was made (see ``note``).
    max_share : float
        Largest squared error / sum of squared errors (NaN if all are 0).
    n_tail : int
        Number of tail points fitted (``ceil(min(0.2 S, 3 sqrt(S)))``).
    reach : float or None
        Expected number of projections drawn where the MSE of a positive
        (hyperbolic) estimate comes from, beyond ``2|x + y|``:
        ``S m Phi(-2|x + y|)`` (twice that); None for trig features.
    ok : bool
        Whether the standard error of the MSE can be trusted:
        ``k_hat < TAIL_K_MAX`` and ``reach >= REACH_MIN``; or all squared
        errors 0 (an exact estimator).
    note : str
        Why ``ok`` is what it is.
    """

    k_hat: float
    max_share: float
    n_tail: int
    reach: float | None
    ok: bool
    note: str




def tail_size(samples):
    """``ceil(min(0.2 S, 3 sqrt(S)))``: how many of S values the tail fit uses."""
    return math.ceil(min(0.2 * samples, 3.0 * math.sqrt(samples)))


def _gpd_k(exceedances):
    """Zhang-Stephens estimate of the generalized Pareto shape, with PSIS's weak prior.

    ``exceedances`` are the values above the threshold minus the threshold,
    sorted ascending, at least :data:`MIN_TAIL` of them, the largest > 0.
    Returns the shape k (> 0: heavy tail with moments of order < 1/k).
    """
    x = np.asarray(exceedances, dtype=np.float64)
    n = x.size
    prior_bs, prior_k = 3.0, 10.0
    m_est = 30 + math.isqrt(n)
    quartile = x[int(n / 4 + 0.5) - 1]
    if quartile <= 0.0:  # ties at the threshold: use the smallest positive exceedance
        quartile = x[x > 0][0]
    b = 1.0 - np.sqrt(m_est / (np.arange(1, m_est + 1, dtype=np.float64) - 0.5))
    b = b / (prior_bs * quartile) + 1.0 / x[-1]
    # one b at a time: a (len(b), n) matrix would cost ~50 MB at n = 30000 (1e8 trials)
    k = np.array([np.log1p(-bj * x).mean() for bj in b])
    with np.errstate(divide="ignore", invalid="ignore"):
        len_scale = n * (np.log(-(b / k)) - k - 1.0)
    with np.errstate(over="ignore", invalid="ignore"):
        weights = 1.0 / np.exp(len_scale - len_scale[:, None]).sum(axis=1)
    keep = weights >= 10 * np.finfo(np.float64).eps  # NaN (a degenerate candidate) is not kept
    if not np.any(keep):  # e.g. exceedances tied up to rounding: every candidate degenerate
        return float("nan")
    weights, b = weights[keep], b[keep]
    weights = weights / weights.sum()
    b_post = float(np.sum(b * weights))
    k_post = float(np.log1p(-b_post * x).mean())
    return (n * k_post + prior_k * 0.5) / (n + prior_k)


def _above(z):
    """P(N(0, 1) > z)."""
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def reach(kind, length, samples, m, tilt=None, d=None, norms="chi", A=None):
    r"""Expected projections drawn where the MSE comes from (see :class:`TailDiagnostic`); None for trig.

    Chi norms: beyond 2a, a standard normal's tail (both tails for
    hyperbolic features). Fixed norms (``norms="fixed"``, ``d`` needed): the
    projection is :math:`\sqrt d\, c`, bounded by :math:`\sqrt d`, and the
    region is the direction coordinate's beyond the peak :math:`c^*` of its
    tilted law, :math:`(d - 1) c^* = \kappa (1 - c^{*2})`,
    :math:`\kappa = 2a\sqrt d`, where a uniform direction's coordinate lands
    with probability :math:`\tfrac12 I_{1 - c^{*2}}((d - 1)/2, 1/2)`.
    With ``tilt`` (a :class:`rfkernels.engine.Tilt`), under that proposal: a
    fraction ``1 - alpha0`` of the trials moves one projection to about
    ``shift`` (chi norms: then beyond 2a with probability
    ``P(N(shift, 1) > 2a)``) or its direction to about :math:`c^*` (fixed
    norms: beyond it with probability 1/2). For oprf features (parameter
    ``A``) the region is beyond :math:`2Ba/(1 - 8A)`, :math:`B = \sqrt{1 - 4A}`,
    where the tilted law of a term's square peaks (fixed norms: ``a`` is
    replaced by ``Ba`` in :math:`\kappa`).
    """
    kind = kind if isinstance(kind, Kind) else registry.entry("kind", kind)
    if kind.tilt_reason is not None:  # bounded terms (trig): no heavy tail to reach
        return None
    sides = 2.0 if kind.symmetric_tilt else 1.0
    if kind.param_names and A is None:
        raise ValueError(f"reach for kind={kind.name!r} needs its parameter A")
    B, A = kind.tilt_slope(A)  # 1, 0 for positive and hyperbolic: the same bits
    length = B * length
    chi = registry.entry("norms", norms).chi  # antithetic norms too: each row marginally N(0, I_d)
    if chi:
        a2 = 2.0 * length / (1.0 - 8.0 * A)
        plain = m * _above(a2) * sides
        moved = None if tilt is None else _above(a2 - tilt.shift)
    else:
        if d is None:
            raise ValueError("reach with norms='fixed' needs d")
        from scipy.special import betainc

        from rfkernels.engine import direction_peak

        c_star = direction_peak(length, d)
        per = 0.5 if d == 1 else 0.5 * float(betainc((d - 1.0) / 2.0, 0.5, 1.0 - c_star * c_star))
        plain, moved = m * per * sides, 0.5
    if tilt is None:
        return float(samples * plain)
    return float(samples * (tilt.alpha0 * plain + (1.0 - tilt.alpha0) * moved))


def tail_from_top(top, samples, total, maximum, constant, reach, below_resolution=False):
    """:class:`TailDiagnostic` from the ``n_tail + 1`` largest values (any order).

    ``below_resolution``: the normalised squared errors are so small that the
    rounding of the estimates themselves dominates them (or rounds them all
    to 0 where the exact MSE is not 0); nothing about the error can be read.
    """
    n_tail = tail_size(samples)
    share = maximum / total if total > 0 else float("nan")
    k, fit_problem = float("nan"), None
    if constant:
        fit_problem = "constant"
    elif n_tail < MIN_TAIL:
        fit_problem = f"too few trials for a tail fit (needs {MIN_TAIL} tail points)"
    else:
        top = np.sort(np.asarray(top, dtype=np.float64))[-(n_tail + 1):]
        exceed = top[1:] - top[0]
        if exceed[-1] <= 0.0:
            fit_problem = "the largest squared errors are tied: no tail fit"
        else:
            k = float(_gpd_k(exceed))
            if math.isnan(k):
                fit_problem = "the largest squared errors are tied up to rounding: no tail fit"

    if below_resolution:
        ok, note = False, ("the squared errors are at the rounding level of the estimates "
                           "(relative error below ~1e-14): the Monte Carlo MSE, its error bar "
                           "and z are not meaningful here; use the exact MSE")
    elif constant and maximum == 0.0:
        ok, note = True, "every squared error is 0: the estimator is exact here"
    elif reach is not None and reach < REACH_MIN:
        ok, note = False, (f"the trials reach the region the MSE comes from (see tail.reach) "
                           f"about {reach:.3g} times (< {REACH_MIN:g}): the MSE is likely "
                           "underestimated and its standard error meaningless")
    elif constant:
        ok, note = False, "every squared error is the same nonzero value: no spread was sampled"
    elif k < TAIL_K_MAX:
        ok, note = True, f"k_hat < {TAIL_K_MAX}: squared errors have a finite variance"
    elif n_tail >= MIN_TAIL and maximum <= FLAT_TAIL_RATIO * total / samples:
        ok, note = True, (f"the largest squared error is at most {FLAT_TAIL_RATIO:g} times their "
                          "mean: the tail is bounded in effect (a k_hat fits the spread of nearly "
                          "equal top values, not a heavy tail)")
    elif fit_problem is not None:
        ok, note = False, fit_problem
    else:
        ok, note = False, f"k_hat >= {TAIL_K_MAX}: heavy tail, the standard error is not reliable"
    return TailDiagnostic(k, float(share), n_tail, reach, bool(ok), note)


def pareto_k_hat(values):
    """Pareto k-hat of the upper tail of ``values`` (1-D, finite, >= 5 tail points).

    Fits a generalized Pareto distribution to the largest
    ``ceil(min(0.2 S, 3 sqrt(S)))`` values above the next one (Zhang and
    Stephens 2009, with the weak prior of Pareto smoothed importance
    sampling, Vehtari et al. 2024). ``k < 1/2``: finite variance;
    ``1/2 <= k < 1``: finite mean only; ``k >= 1``: not even that.

    Returns
    -------
    float
        The estimated shape; NaN if the tail is flat (all top values equal).
    """
    x = np.asarray(values, dtype=np.float64).reshape(-1)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    n_tail = tail_size(x.size)
    if n_tail < MIN_TAIL:
        raise ValueError(f"values must hold enough samples for {MIN_TAIL} tail points; got {x.size}")
    top = np.sort(x)[-(n_tail + 1):]
    exceed = top[1:] - top[0]
    return float("nan") if exceed[-1] <= 0 else float(_gpd_k(exceed))
