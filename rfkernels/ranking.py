r"""Which estimator for my budget? Every registered estimator's exact MSE at a feature budget, ranked.

:func:`rank_estimators` takes one pair of inputs (vectors, or a
:class:`rfkernels.theory.Geometry`) or a population of query/key pairs and
a budget of ``r`` feature-map **outputs**, builds every registered
(kind, ensemble, norm law) combination that :func:`rfkernels.estimators.estimator`
accepts, gives each ``m = r // features_per_projection`` projections
(trig and hyperbolic features spend two outputs per projection) and
returns their exact MSE (:mod:`rfkernels.theory`, computed in log space),
ranked, beside the ratio to FAVOR+ with iid projections (kind
``"positive"``, ensemble ``"iid"``, chi norms) at the same ``r``.

Combinations the estimator refuses (antithetic norms with iid rows, a
kind that needs parameters nobody gave: ``"derf"``) are not estimators and
are left out of the rows (:attr:`Ranking.refused` lists them). Estimators
without a value here are listed after the ranked ones with their reason:
no closed form (Monte Carlo only: SORF, the reference code's unfixed QR),
a budget too small for one projection, a data-fitted kind given one pair.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from . import theory
from .estimators import estimator, registry
from .floor import kernel_floor
from .projections import draw_projections
from .strict_json import json_safe
from .validation import check_finite, check_int, check_same_d, check_vectors

#: The reference of every ratio: FAVOR+ with iid projections and chi norms.
BASELINE = ("positive", "iid", "chi")
#: Precision of a population's floors (standard error over value), drawn from seed 0.
FLOOR_RTOL = 0.01
#: Why one pair has no floor here.
PAIR_FLOOR_REASON = ("the floor is for populations: for one pair the tilt at u = x + y gives the "
                     "positive and paired representations zero variance")

_LOG_MAX = math.log(np.finfo(np.float64).max)

#: Errors of the theory that mean "no value here" (a quadrature's range, an overflowing fit),
#: recorded as the row's reason rather than raised.
_THEORY_ERRORS = (ValueError, OverflowError, FloatingPointError)


@dataclass(frozen=True)
class RankedEstimator:
    """One estimator of a :class:`Ranking`: its names, its size at the budget and its exact MSE.

    Attributes
    ----------
    rank : int or None
        1 for the lowest MSE; None for an estimator without a value here.
    kind, ensemble, norms : str
        Registered names (:func:`rfkernels.estimators.registry.names`).
    m : int
        Projections the budget buys: ``r // features_per_projection`` (0
        where not even one fits).
    r : int
        The budget of feature-map outputs (the same for every row).
    outputs : int
        Outputs the ``m`` projections use (``r - 1`` for trig and
        hyperbolic at an odd ``r``).
    mse : float or None
        The exact MSE (the mean over the pairs for a population); None where
        there is none or where it is beyond float64 (``log_mse`` holds it).
    log_mse : float or None
        Its natural log; None where there is none or where the MSE is exactly 0.
    ratio : float or None
        ``mse`` over FAVOR+ iid's at the same ``r`` (from the logs).
    reason : str or None
        Why the estimator has no value here (None: it is ranked).
    null_reasons : tuple of (str, str)
        ``(field, why)`` for each other field that is None.
    relative_rmse : float or None
        ``sqrt(MSE) / K``, the root-mean-square error relative to the kernel
        K (for a population ``sqrt(mean MSE / mean K^2)``); 1 (100%) is the
        error of the estimate 0, e.g. a fixed-norm estimator at large norms.
        None where the row has no MSE, the kernel is 0 or beyond float64, or
        the ratio is beyond float64.
    floor_mse, floor_stderr : float or None
        For a population: the least mean MSE at the row's ``outputs`` of any
        policy of independent draws of the kind's representation
        (:func:`rfkernels.floor.kernel_floor`, the pairs weighted by K^2, a
        data-fitted kind on its transformed pairs), in the units of ``mse``,
        with its Monte Carlo standard error. Coupled draws (orthogonal,
        simplex, antithetic) can go below it. None with its reason otherwise.
    mc_mse, mc_stderr : float or None
        For a data-fitted kind without a closed form on a population (the
        data-tilted features): its mean MSE over the pairs by Monte Carlo
        (:data:`MC_DRAWS` draws of W, the literal map), in the units of
        ``mse``, with its standard error; the row stays unranked (ranks are
        exact). None with its reason otherwise.
    """

    rank: Optional[int]
    kind: str
    ensemble: str
    norms: str
    m: int
    r: int
    outputs: int
    mse: Optional[float]
    log_mse: Optional[float]
    ratio: Optional[float]
    reason: Optional[str] = None
    null_reasons: tuple = ()
    relative_rmse: Optional[float] = None
    floor_mse: Optional[float] = None
    floor_stderr: Optional[float] = None
    mc_mse: Optional[float] = None
    mc_stderr: Optional[float] = None

    @property
    def ranked(self):
        """The estimator has an exact MSE here."""
        return self.reason is None

    @property
    def name(self):
        """``kind/ensemble/norms``."""
        return f"{self.kind}/{self.ensemble}/{self.norms}"

    def to_dict(self):
        """The row as strict JSON content (every null with its reason in ``"null_reasons"``)."""
        out = {"rank": self.rank, "kind": self.kind, "ensemble": self.ensemble,
               "norms": self.norms, "m": self.m, "r": self.r, "outputs": self.outputs,
               "mse": self.mse, "log_mse": self.log_mse, "ratio": self.ratio,
               "relative_rmse": self.relative_rmse, "floor_mse": self.floor_mse,
               "floor_stderr": self.floor_stderr, "mc_mse": self.mc_mse,
               "mc_stderr": self.mc_stderr, "reason": self.reason}
        reasons = dict(self.null_reasons)
        if self.reason is None:
            reasons["reason"] = "ranked: the estimator has an exact MSE here"
        else:
            reasons["rank"] = "unranked: see reason"
        return json_safe({**out, "null_reasons": reasons})


@dataclass(frozen=True)
class Ranking:
    """The result of :func:`rank_estimators`: ranked rows first, the unranked after.

    Attributes
    ----------
    rows : tuple of RankedEstimator
        Ranked by MSE ascending (ties in registry order), then those without
        a value, in registry order.
    r, d : int
        The budget of outputs and the dimension.
    n_pairs : int
        Pairs the MSE is averaged over (1 for one pair).
    inputs : str
        ``"pair"`` (vectors), ``"geometry"`` or ``"population"``.
    kernel : str
    gamma : float or None
        The Gaussian kernel's parameter (None for softmax).
    baseline : tuple of str
        ``(kind, ensemble, norms)`` of the ratios' reference: :data:`BASELINE`.
    refused : tuple of (str, str, str, str)
        ``(kind, ensemble, norms, why)`` of every registered combination the
        estimator refuses (not an estimator; absent from ``rows``).
    """

    rows: tuple
    r: int
    d: int
    n_pairs: int
    inputs: str
    kernel: str
    gamma: Optional[float]
    baseline: tuple = BASELINE
    refused: tuple = ()

    @property
    def ranked(self):
        """The rows with an exact MSE, best first."""
        return tuple(row for row in self.rows if row.ranked)

    @property
    def unranked(self):
        """The rows without a value here, each with its reason."""
        return tuple(row for row in self.rows if not row.ranked)

    @property
    def best(self):
        """The ranked row with the lowest MSE (None where no row is ranked)."""
        ranked = self.ranked
        return ranked[0] if ranked else None

    def row(self, kind, ensemble="iid", norms="chi"):
        """The row of ``(kind, ensemble, norms)``; KeyError where it is not one (refused)."""
        for row in self.rows:
            if (row.kind, row.ensemble, row.norms) == (kind, ensemble, norms):
                return row
        raise KeyError(f"no row {kind}/{ensemble}/{norms} (not a registered estimator, "
                       "or one the estimator refuses)")

    def to_dict(self):
        """Everything as strict JSON content: ``json.dumps(d, allow_nan=False)`` works.

        A value that does not exist or is beyond float64 is null, with its
        reason in the enclosing object's ``"null_reasons"``.
        """
        out = {"study": "rank", "r": self.r, "d": self.d, "n_pairs": self.n_pairs,
               "inputs": self.inputs, "kernel": self.kernel, "gamma": self.gamma,
               "baseline": dict(zip(("kind", "ensemble", "norms"), self.baseline)),
               "rows": [row.to_dict() for row in self.rows],
               "refused": [dict(zip(("kind", "ensemble", "norms", "reason"), entry))
                           for entry in self.refused]}
        reasons = {}
        if self.gamma is None:
            reasons["gamma"] = f"the {self.kernel} kernel has no gamma (the Gaussian kernel's parameter)"
        return json_safe({**out, "null_reasons": reasons})


@dataclass(frozen=True)
class _Inputs:
    """The validated inputs: the geometry, the vectors (None for a Geometry), the population."""

    geom: theory.Geometry
    vectors: Optional[tuple]
    population: bool
    n_pairs: int
    d: int
    label: str


def rank_estimators(x=None, y=None, *, r, geom=None, kernel="softmax", gamma=None):
    r"""Every registered estimator's exact MSE at a budget of ``r`` feature-map outputs, ranked.

    Parameters
    ----------
    x, y : array_like, shape (d,) or (n, d)
        One pair (two vectors) or a population of n query/key pairs
        ``(x[i], y[i])`` (the MSE is the mean over the pairs; data-fitted
        kinds are fitted on the rows of x as queries and of y as keys).
        ``theory.pair(d, norm_x, norm_y, angle)`` gives a pair.
    r : int
        The budget: feature-map outputs (>= 1), not projections. Each
        estimator gets ``m = r // features_per_projection`` projections
        (2 outputs each for trig and hyperbolic, 1 otherwise).
    geom : rfkernels.theory.Geometry, optional
        One pair's invariants instead of ``x`` and ``y`` (scalar fields).
        Kinds whose MSE needs the vectors themselves are then listed with
        the theory's reason.
    kernel : str
        The target kernel (``"softmax"``, ``exp(x.y)``, or ``"gaussian"``).
    gamma : float, optional
        The Gaussian kernel's parameter (with ``kernel="gaussian"`` only).

    Returns
    -------
    Ranking
        The rows ranked by exact MSE ascending, then the estimators without
        a value here with their reason; :meth:`Ranking.to_dict` is strict JSON.

    Raises
    ------
    ValueError
        One line naming the argument: ``r`` < 1; x, y not finite, not of
        shape (d,) or (n, d), of different shapes or empty; both or neither
        of (x, y) and ``geom``; an unknown kernel or a bad ``gamma``.
    TypeError
        A non-integer ``r``; ``geom`` not a :class:`~rfkernels.theory.Geometry`.

    Notes
    -----
    Each value is :func:`rfkernels.theory.exact_mse` of the estimator
    at ``m`` projections, so it is the value :func:`rfkernels.theory.exact_mse`
    gives. OPRF's A is the variance-minimising :math:`A^*` of the pair; for a
    population, one A fitted on it (:func:`rfkernels.features.oprf_auto_a`'s
    rule), since one feature map serves every pair. For a population the mean
    over the pairs is taken in log space,

    .. math::

        \log \overline{\mathrm{MSE}} = \log \sum_i e^{\ell_i} - \log n,
        \qquad \ell_i = \log \mathrm{MSE}(x_i, y_i),

    so nothing overflows; ``mse`` is None where the mean is beyond float64
    and ``log_mse`` still holds it. The ratio to FAVOR+ iid is
    :math:`e^{\log \mathrm{MSE} - \log \mathrm{MSE}_{\mathrm{FAVOR+\,iid}}}`.
    Data-fitted kinds (SADERF, ADERF, SDERF) are fitted once per kind on the
    population (:meth:`rfkernels.estimators.Estimator.fitted_on`); a single
    pair cannot be fitted (its optimum is degenerate) and they are listed
    with that reason. ``docs/ranking.rst`` has an example.

    Examples
    --------
    >>> from rfkernels import rank_estimators, theory
    >>> ranking = rank_estimators(*theory.pair(16, 0.5, 0.5, 1.0), r=32)
    >>> ranking.row("positive", "iid", "chi").ratio
    1.0
    """
    r = check_int(r, "r", minimum=1)
    estimator(BASELINE[0], kernel=kernel, gamma=gamma)  # the kernel and gamma, checked once
    inputs = _check_inputs(x, y, geom)
    rows, refused, fits, floors = [], [], {}, {}
    # the theory works in log space: an overflow on the way (a huge gamma or norm) ends in
    # the row's value or reason, never in a NumPy warning
    with np.errstate(over="ignore"):
        log_k2 = _log_kernel_sq(inputs, estimator(BASELINE[0], kernel=kernel, gamma=gamma,
                                                  d=inputs.d))
        for kind in registry.entries("kind"):
            for ens in registry.entries("ensemble"):
                for law in registry.entries("norms"):
                    try:
                        est = estimator(kind.name, ensemble=ens.name, norms=law.name,
                                        kernel=kernel, gamma=gamma, d=inputs.d)
                    except ValueError as exc:
                        refused.append((kind.name, ens.name, law.name, _one_line(exc)))
                        continue
                    m = r // kind.features_per_projection
                    log_mse, reason = _log_mse(est, m, r, inputs, fits)
                    floor = _floor(est, m, inputs, fits, floors)
                    mc = _monte_carlo(est, m, inputs, fits, log_k2) if reason is not None else (
                        None, None, "the exact MSE is given")
                    rows.append(((kind.name, ens.name, law.name), m, log_mse, reason, floor + mc))
    return Ranking(rows=_finish_rows(rows, r, log_k2), r=r, d=inputs.d, n_pairs=inputs.n_pairs,
                   inputs=inputs.label, kernel=kernel,
                   gamma=None if gamma is None else float(gamma), refused=tuple(refused))


def _check_inputs(x, y, geom):
    """The validated :class:`_Inputs` of ``rank_estimators`` (one-line errors naming the argument)."""
    if geom is not None:
        if x is not None or y is not None:
            raise ValueError("geom and (x, y) exclude each other: give one pair's geometry "
                             "or its vectors (or a population X, Y)")
        geom = _check_geometry(geom)
        return _Inputs(geom, None, False, 1, int(geom.d), "geometry")
    if x is None or y is None:
        raise ValueError("give x and y (one pair of shape (d,) each, or a population of shape "
                         "(n, d) each) or geom=")
    x = check_vectors(x, "x")
    y = check_vectors(y, "y")
    for name, v in (("x", x), ("y", y)):
        if v.ndim > 2:
            raise ValueError(f"{name} must be one vector (d,) or a population (n, d); "
                             f"got shape {v.shape}")
    d = check_same_d([x.shape, y.shape], ["x", "y"])
    if x.shape != y.shape:
        raise ValueError(f"x and y must have the same shape (pairs x[i], y[i]); got {x.shape} "
                         f"and {y.shape}")
    if x.ndim == 2 and x.shape[0] == 0:
        raise ValueError(f"x and y must hold at least one pair; got shape {x.shape}")
    population = x.ndim == 2
    return _Inputs(theory.geometry(x, y), (x, y), population,
                   x.shape[0] if population else 1, int(d),
                   "population" if population else "pair")


def _check_geometry(geom):
    """One pair's :class:`rfkernels.theory.Geometry`: scalar fields, d a whole number >= 1, lengths >= 0."""
    if not isinstance(geom, theory.Geometry):
        raise TypeError(f"geom must be a theory.Geometry (d, half_sq, s, t); got "
                        f"{type(geom).__name__}")
    fields = {}
    for name in theory.Geometry._fields:
        value = check_finite(getattr(geom, name), f"geom.{name}")
        if value.ndim != 0:
            raise ValueError(f"geom.{name} must be a number (one pair); got shape {value.shape}: "
                             "for many pairs give x and y of shape (n, d)")
        if value < 0:
            raise ValueError(f"geom.{name} must be >= 0; got {float(value)!r}")
        fields[name] = value
    fields["d"] = np.asarray(float(check_int(float(fields["d"]), "geom.d")))
    return theory.Geometry(**fields)


def _one_line(exc):
    return " ".join(str(exc).split()) or type(exc).__name__


def _log_mse(est, m, r, inputs, fits):
    """``(log of the mean exact MSE, None)`` of ``est`` at ``m`` projections, or ``(None, reason)``."""
    fpp = est.kind.features_per_projection
    if m == 0:
        return None, (f"r = {r} outputs buy no projection of kind={est.kind.name!r} "
                      f"({fpp} outputs per projection)")
    if not est.supports.exact_mse:
        return None, est.supports.exact_mse.reason
    if est.needs_fit:
        if not inputs.population:
            return None, (f"kind={est.kind.name!r} is fitted on a population of queries and keys; "
                          "one pair cannot be fitted (its optimum is degenerate): give x and y "
                          "of shape (n, d)")
        est, reason = _fitted(est, inputs, fits)
        if reason is not None:
            return None, reason
        if not est.supports.exact_mse:  # the fitted parameters' own reason (SDERF's dense A, orthogonal)
            return None, est.supports.exact_mse.reason
    elif inputs.population and _free_parameters(est):
        # one feature map serves every pair: OPRF's A fitted on the population, not A* per pair
        values = est.kind.fit(*(est.scale * v for v in inputs.vectors))
        est = estimator(est.kind.name, ensemble=est.ensemble.name, norms=est.norms.name,
                        kernel=est.kernel.name, gamma=getattr(est.kernel_params, "gamma", None),
                        d=inputs.d, **values)
    try:
        logs = theory.exact_mse(inputs.geom, None, m, est, log=True, vectors=inputs.vectors)
    except _THEORY_ERRORS as exc:
        return None, f"the theory has no value here: {_one_line(exc)}"
    log_mse = _log_mean(np.asarray(logs, dtype=np.float64))
    if math.isnan(log_mse) or log_mse == math.inf:
        return None, f"the theory returned {log_mse} (a bug: please report it)"
    return log_mse, None


def _floor(est, m, inputs, fits, cache):
    """``(floor of the mean MSE at m projections, its stderr, None)`` or ``(None, None, why)``;
    one floor per representation and pairs (``cache``)."""
    kind = est.kind
    if not inputs.population:
        return None, None, PAIR_FLOOR_REASON
    if kind.representation is None:
        return None, None, f"kind={kind.name!r} has no registered representation: no floor"
    if m == 0:
        return None, None, "no projection at this r"
    rep, key = kind.representation, kind.representation
    if est.needs_fit:
        est, reason = _fitted(est, inputs, fits)
        if reason is not None:
            return None, None, reason
        rep, key = est, kind.name
    if key not in cache:
        try:
            logs = 2.0 * np.asarray(theory.kernel_log_value(inputs.geom, est), dtype=np.float64)
            floor = kernel_floor(*inputs.vectors, weights=np.exp(logs - logs.max()),
                                 kernel=est.kernel.name,
                                 gamma=getattr(est.kernel_params, "gamma", None),
                                 representation=rep, seed=0, rtol=FLOOR_RTOL)
            cache[key] = (floor, math.exp(_log_mean(logs)), None)
        except _THEORY_ERRORS as exc:
            cache[key] = (None, None, f"the floor has no value here: {_one_line(exc)}")
    floor, mean_k2, reason = cache[key]
    if reason is not None:
        return None, None, reason
    outputs = m * floor.features_per_draw
    return floor.value / outputs * mean_k2, floor.stderr / outputs * mean_k2, None


def _free_parameters(est):
    """A kind with parameters left to their per-pair default that it can fit on a population (OPRF)."""
    kind = est.kind
    return (bool(kind.param_names) and kind.fit is not None and not kind.population
            and all(getattr(est.params, name, None) is None for name in kind.param_names))


def _fitted(est, inputs, fits):
    """``(est fitted on the population, None)`` or ``(None, why)``; one fit per kind (``fits``)."""
    name = est.kind.name
    if name not in fits:
        try:
            fits[name] = (theory.fit_population(est, *inputs.vectors).params, None)
        except _THEORY_ERRORS as exc:
            fits[name] = (None, f"the fit on the population failed: {_one_line(exc)}")
    params, reason = fits[name]
    if reason is not None:
        return None, reason
    return estimator(name, ensemble=est.ensemble.name, norms=est.norms.name,
                     kernel=est.kernel.name, gamma=getattr(est.kernel_params, "gamma", None),
                     d=inputs.d, params=params), None


def _log_kernel_sq(inputs, est):
    """The log of the kernel's square at the pair (the mean over a population), or None."""
    try:
        logs = 2.0 * np.asarray(theory.kernel_log_value(inputs.geom, est), dtype=np.float64)
    except _THEORY_ERRORS:
        return None
    log_k2 = _log_mean(logs.reshape(-1))
    return None if math.isnan(log_k2) else log_k2


def _relative_rmse(log_mse, log_k2):
    """``(sqrt(MSE) / K, None)`` from the logs, or ``(None, why)``."""
    if log_k2 is None or math.isinf(log_k2):
        return None, ("the kernel is 0 or beyond float64 here: no relative error"
                      if log_k2 is not None else "the kernel has no value here")
    if log_mse == -math.inf:
        return 0.0, None
    log_rel = 0.5 * (log_mse - log_k2)
    if log_rel > _LOG_MAX:
        return None, "beyond float64: compare log_mse"
    return math.exp(log_rel), None


def _log_mean(logs):
    """``log(mean(exp(logs)))`` without overflow (``-inf`` where every MSE is 0)."""
    top = float(np.max(logs))
    if top == -math.inf:
        return -math.inf
    return top + math.log(float(np.mean(np.exp(logs - top))))


def _ratio(log_mse, base):
    """``(ratio, None)`` from the logs, or ``(None, why)``."""
    if base[0] is None:
        return None, f"FAVOR+ iid has no value here: {base[1]}"
    if log_mse == -math.inf and base[0] == -math.inf:
        return None, "both this MSE and FAVOR+ iid's are exactly 0"
    diff = log_mse - base[0]
    if diff > _LOG_MAX:
        return None, "beyond float64: compare log_mse"
    ratio = math.exp(diff)
    if ratio == 0.0 and log_mse != -math.inf:
        return None, "below float64's smallest number (not 0): compare log_mse"
    return ratio, None


def _finish_rows(rows, r, log_k2=None):
    """The :class:`RankedEstimator` rows: ranked by log MSE (stable), then the unranked."""
    by_names = {names: (log, reason) for names, _, log, reason, _ in rows}
    base = by_names.get(BASELINE, (None, "not registered"))  # the ratios' reference, by identity
    ranked = sorted((row for row in rows if row[3] is None), key=lambda row: row[2])
    out = []
    for rank, (names, m, log_mse, _, floor) in enumerate(ranked, 1):
        notes = []
        mse = math.exp(log_mse) if log_mse <= _LOG_MAX else None
        if mse is None:
            notes.append(("mse", "beyond float64: log_mse holds the value"))
        if log_mse == -math.inf:
            notes.append(("log_mse", "the MSE is exactly 0 (log 0 = -inf)"))
        ratio, why = _ratio(log_mse, base)
        if why is not None:
            notes.append(("ratio", why))
        rel, why = _relative_rmse(log_mse, log_k2)
        if why is not None:
            notes.append(("relative_rmse", why))
        out.append(_row(rank, names, m, r, mse, None if log_mse == -math.inf else log_mse,
                        ratio, None, tuple(notes), rel, floor))
    for names, m, _, reason, floor in rows:
        if reason is not None:
            notes = tuple((key, reason) for key in ("mse", "log_mse", "ratio", "relative_rmse"))
            out.append(_row(None, names, m, r, None, None, None, reason, notes, None, floor))
    return tuple(out)


def _row(rank, names, m, r, mse, log_mse, ratio, reason, notes, relative_rmse, extra):
    fpp = registry.entry("kind", names[0]).features_per_projection
    floor_mse, floor_se, why, mc_mse, mc_se, mc_why = extra
    if why is not None:
        notes = notes + (("floor_mse", why), ("floor_stderr", why))
    if mc_why is not None:
        notes = notes + (("mc_mse", mc_why), ("mc_stderr", mc_why))
    return RankedEstimator(rank, *names, m, r, m * fpp, mse, log_mse, ratio, reason, notes,
                           relative_rmse, floor_mse, floor_se, mc_mse, mc_se)


#: Draws of W of rank's Monte Carlo MSE (data-fitted kinds without a closed form), and its budget
#: of multiply-adds (draws x m x (2 n + m) x d) beyond which it is left out with the reason.
MC_DRAWS = 64
MC_BUDGET = 4e9
#: The seed of rank's Monte Carlo draws (draw t is ``SeedSequence([MC_SEED, t])``).
MC_SEED = 0


def _monte_carlo(est, m, inputs, fits, log_k2):
    """``(mean MSE over the pairs, its stderr, None)`` by Monte Carlo, or ``(None, None, why)``:
    for a data-fitted kind without a closed form, on a population, through its literal map."""
    if not (inputs.population and est.kind.population):
        return None, None, "rank's Monte Carlo is for data-fitted kinds without a closed form, on a population"
    if m == 0:
        return None, None, "no projection at this r"
    fmap = est.kind.feature_map
    if fmap is None or not fmap.two_roles or log_k2 is None or math.isinf(log_k2):
        return None, None, "no literal map with a finite kernel here"
    n, d = inputs.n_pairs, inputs.d
    if MC_DRAWS * m * (2 * n + m) * d > MC_BUDGET:
        return None, None, (f"beyond rank's Monte Carlo budget ({MC_DRAWS} draws of m = {m} on "
                            f"{n} pairs): measure it with rfkernels.analysis.monte_carlo_mse")
    if est.needs_fit:
        est, reason = _fitted(est, inputs, fits)
        if reason is not None:
            return None, None, reason
    value, c = est.kind.resolve(est.params, None), est.scale
    rows = []
    for z in inputs.vectors:
        z = c * z if c != 1.0 else z
        rows.append((z, est.kernel.log_factor(0.5 * np.sum(z * z, axis=1, keepdims=True))))
    log_k = np.asarray(theory.kernel_log_value(inputs.geom, est), dtype=np.float64)
    weight = np.exp(2.0 * log_k - 2.0 * np.max(log_k))
    weight /= weight.sum()
    per_draw = np.empty(MC_DRAWS)
    for t in range(MC_DRAWS):
        w = draw_projections(m, d, ensemble=est.ensemble.name, norms=est.norms.name,
                             seed=np.random.SeedSequence([MC_SEED, t]))
        logs = (fmap.log_features(rows[0][0], w, value, "query", np, rows[0][1])
                + fmap.log_features(rows[1][0], w, value, "key", np, rows[1][1]))
        top = np.max(logs, axis=1)
        log_est = top + np.log(np.sum(np.exp(logs - top[:, None]), axis=1)) - math.log(m)
        rel = np.expm1(log_est - log_k)  # the relative error of each pair's estimate
        per_draw[t] = float(np.sum(weight * rel * rel))  # mean MSE / mean K^2
    scale = math.exp(log_k2) if log_k2 <= _LOG_MAX else math.inf
    mean, se = float(np.mean(per_draw)), float(np.std(per_draw, ddof=1) / math.sqrt(MC_DRAWS))
    if not math.isfinite(mean * scale):
        return None, None, "beyond float64 (the relative error is finite: rank relative_rmse)"
    return mean * scale, se * scale, None


__all__ = ["BASELINE", "RankedEstimator", "Ranking", "rank_estimators"]
