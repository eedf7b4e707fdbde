r"""Which estimator at equal features: exact MSE ratio to FAVOR+ iid against :math:`|x + y|^2`.

At a feature budget of r = d outputs (every series here has one output
per projection, so m = r // ``features_per_projection`` = d), for d in
{16, 64}: the mean exact MSE over a population of query/key pairs of
FAVOR+ with orthogonal projections, OPRF (orthogonal) with one A fitted on
the population, SADERF (orthogonal) fitted on the population, FAVOR+
orthogonal with antithetic row norms (``norms="antithetic"``) and FAVOR+
with simplex projections, divided by the mean exact MSE of FAVOR+ with iid
projections over the same pairs.

Populations. Each bin centre :math:`c` (a log grid, :data:`CENTRES`) has
its own seeded population of :data:`N_PAIRS` pairs: x and y iid
:math:`N(0, \tfrac{c}{2d} I_d)` (so that :math:`E|x + y|^2 = E|x - y|^2 =
c`), then x + y rescaled to a length :math:`|x + y|^2` drawn log-uniformly
in :math:`c \times [1 - w, 1 + w]` (:data:`SPREAD`) with x - y kept:
random directions, random :math:`|x - y|^2`. The data-fitted kinds are
fitted on the population's queries and keys as those fits define it, on
every pair :math:`(x_i, y_j)`: OPRF's A by
:func:`rfkernels.features.oprf_auto_a` (``A*`` at the mean
:math:`|x_i + y_j|^2 / d`) and SADERF by
:meth:`rfkernels.estimators.Estimator.fitted_on`. With this scale the
cross pairs have about the bin's :math:`|x + y|^2` too (for x, y of unit
variance and small :math:`|x + y|^2` they would not, and the fitted A would
be that of a larger :math:`|x + y|^2`).

Monte Carlo markers at the tame bins :data:`MC_CENTRES`: the reduced
sampler (:func:`rfkernels.analysis.monte_carlo_mse`, the backend and
proposal of the figures' other points; antithetic norms run plain: the
tilted proposal refuses them) over the first :data:`N_MC` pairs of the
bin, with the parameters fitted on the whole bin as for the line. The
marker is the mean Monte Carlo MSE over those pairs divided by the mean
exact FAVOR+ iid MSE over the same pairs; its 95% interval and z come from
the pairs' combined standard errors, and it is hollow unless every pair's
tail is tame.
"""

from __future__ import annotations

import math

import numpy as np
from rfkernels.analysis import monte_carlo_mse
from scipy.special import logsumexp

from rfkernels import theory
from rfkernels.estimators import estimator
from rfkernels.features import oprf_auto_a

from ._common import Z95, counter, legend_below, mc_errorbars, paper_style, save
from ._mc import BACKEND, PROPOSAL

NAME = "estimator_choice"
TITLE = "Which estimator at equal features: exact MSE ratio to FAVOR+ iid against |x+y|^2"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 7.5, True: 3.5}
DIMS = (16, 64)
#: The reference of every ratio: (kind, ensemble, norms).
REFERENCE = ("positive", "iid", "chi")
#: name -> (kind, ensemble, norms) of each line; "fitted" kinds are fitted on the bin's population.
SERIES = {"favor_orthogonal": ("positive", "orthogonal", "chi"),
          "oprf_fitted": ("oprf", "orthogonal", "chi"),
          "saderf_fitted": ("saderf", "orthogonal", "chi"),
          "antithetic": ("positive", "orthogonal", "antithetic"),
          "simplex": ("positive", "simplex", "chi")}
#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = tuple(SERIES.values())
LABELS = {"favor_orthogonal": "FAVOR+, orthogonal",
          "oprf_fitted": "OPRF (one A fitted on the bin), orthogonal",
          "saderf_fitted": "SADERF (fitted on the bin), orthogonal",
          "antithetic": "FAVOR+, orthogonal, antithetic norms",
          "simplex": "FAVOR+, simplex"}
STYLES = {"favor_orthogonal": ("#0072B2", "-", "s"),
          "oprf_fitted": ("#CC79A7", "-", "o"),
          "saderf_fitted": ("#009E73", "--", "D"),
          "antithetic": ("#56B4E9", ":", "v"),
          "simplex": ("#E69F00", "-.", "^")}
#: Bin centres c_k = 0.05 * 10^(k/4), k = 0 .. 12 (0.05 .. 50); --quick takes every other one.
CENTRE_FIRST, PER_DECADE, N_CENTRES = 0.05, 4, 13
#: Half-width of a bin: |x + y|^2 log-uniform in c [1 - SPREAD, 1 + SPREAD].
SPREAD = 0.15
#: Pairs per bin population (every mode).
N_PAIRS = 20
#: Bin indices k of the Monte Carlo markers (tame tails: small |x + y|^2), by mode.
MC_BINS = {False: (0, 2, 4), True: (2, 4)}
#: Pairs of a bin (its first ones) each Monte Carlo marker averages over, by mode.
N_MC = {False: 8, True: 4}
#: Trials per pair of a Monte Carlo marker (default run, --quick).
TRIALS = {False: 10_000, True: 2_000}
#: Spawn-key streams of the populations and of the Monte Carlo points.
POPULATION_STREAM, MC_STREAM = 1, 2


def bin_indices(quick=False):
    """The bin indices k of a run: all of them, or every other one with ``quick``."""
    return tuple(range(0, N_CENTRES, 2 if quick else 1))


def centre(k):
    """Bin centre ``c_k = 0.05 * 10^(k/4)`` of :math:`|x + y|^2`."""
    return CENTRE_FIRST * 10.0 ** (k / PER_DECADE)


#: Every bin centre (the full run's grid).
CENTRES = tuple(centre(k) for k in range(N_CENTRES))
#: The Monte Carlo bin centres of the full run.
MC_CENTRES = tuple(centre(k) for k in MC_BINS[False])


def population(d, k, seed=0, n=N_PAIRS):
    """The seeded population ``(X, Y)``, (n, d) each, of bin ``k`` in dimension ``d``.

    x, y iid :math:`N(0, c/(2d) I)` with c the bin centre, then x + y
    rescaled to :math:`|x + y|^2` log-uniform in :math:`c [1 - w, 1 + w]`,
    x - y kept. The stream is ``SeedSequence(seed, spawn_key=(1, d, k))``:
    the same pairs in the default run and with ``--quick``.
    """
    c = centre(k)
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(POPULATION_STREAM, d, k)))
    sigma = math.sqrt(c / (2.0 * d))
    x, y = rng.standard_normal((2, n, d)) * sigma
    u, v = x + y, x - y
    s = c * np.exp(rng.uniform(math.log1p(-SPREAD), math.log1p(SPREAD), n))
    u *= np.sqrt(s / np.einsum("ij,ij->i", u, u))[:, None]
    return 0.5 * (u + v), 0.5 * (u - v)


def estimators_for(X, Y):
    """{series or 'reference': the validated estimator at m = d}, fitted kinds fitted on (X, Y).

    OPRF's one A is :func:`rfkernels.features.oprf_auto_a` of the
    population; SADERF is :meth:`~rfkernels.estimators.Estimator.fitted_on`
    it. ``m`` is the budget r = d over the kind's outputs per projection.
    """
    d = X.shape[1]
    out = {}
    for name, (kind, ensemble, norms) in {"reference": REFERENCE, **SERIES}.items():
        A = oprf_auto_a(X, Y) if kind == "oprf" else None
        est = estimator(kind, ensemble=ensemble, norms=norms, d=d, A=A)
        if est.needs_fit:
            est = est.fitted_on(X, Y)
        out[name] = est.with_size(m=d // est.kind.features_per_projection)
    return out


def log_mse_pairs(est, X, Y):
    """Natural log of the exact MSE of ``est`` at each pair ``(X[i], Y[i])``."""
    return np.asarray(theory.exact_mse(theory.geometry(X, Y), None, est.m, est, vectors=(X, Y), log=True),
                      dtype=float)


def log_mean(logs):
    """log of the mean of ``exp(logs)``, overflow-free."""
    return float(logsumexp(logs) - math.log(len(logs)))


def _population_row(d, k, seed, X, Y, ests):
    s = np.einsum("ij,ij->i", X + Y, X + Y)
    t = np.einsum("ij,ij->i", X - Y, X - Y)
    sad = ests["saderf_fitted"].params.derf
    psi = np.diag(sad.B1) / math.sqrt(1.0 - 4.0 * sad.a)
    return {"d": d, "bin": k, "centre": centre(k), "n_pairs": int(X.shape[0]), "spread": SPREAD,
            "sigma": math.sqrt(centre(k) / (2.0 * d)), "seed": int(seed),
            "spawn_key": f"({POPULATION_STREAM}, {d}, {k})",
            "u_sq_min": float(s.min()), "u_sq_mean": float(s.mean()), "u_sq_max": float(s.max()),
            "t_min": float(t.min()), "t_mean": float(t.mean()), "t_max": float(t.max()),
            "oprf_A": float(ests["oprf_fitted"].params.A),
            "oprf_A_star_at_mean_u_sq": float(theory.oprf_optimal_a_from_geometry(
                theory.Geometry(float(d), 0.0, float(s.mean()), 0.0))),
            "saderf_a": float(sad.a), "saderf_psi_min": float(psi.min()),
            "saderf_psi_max": float(psi.max())}


def _lines(d, k, X, Y, ests):
    ref = log_mean(log_mse_pairs(ests["reference"], X, Y))
    rows = []
    for name, (kind, ensemble, norms) in SERIES.items():
        est = ests[name]
        lm = log_mean(log_mse_pairs(est, X, Y))
        rows.append({"d": d, "series": name, "kind": kind, "ensemble": ensemble, "norms": norms,
                     "m": est.m, "r": est.feature_dimension, "bin": k, "u_sq": centre(k),
                     "log_mse_mean": lm, "log_mse_positive_iid_mean": ref,
                     "ratio_exact": math.exp(lm - ref)})
    return rows


def _mc_point(d, k, name, est, ref_est, X, Y, quick, seed):
    """One marker: the first N_MC pairs of the bin, ``est`` fitted on the whole bin."""
    n, trials = N_MC[bool(quick)], TRIALS[bool(quick)]
    Xs, Ys = X[:n], Y[:n]
    key = (MC_STREAM, d, k, list(SERIES).index(name))
    batch = monte_carlo_mse(Xs, Ys, est.m, est, trials=trials,
                                  seed=np.random.SeedSequence(seed, spawn_key=key),
                                  backend=BACKEND, proposal=PROPOSAL)
    mc = float(np.mean(batch.mse))
    se = float(math.sqrt(np.sum(np.square(batch.stderr)))) / n
    exact = float(np.mean(batch.mse_exact.astype(float)))
    ref = math.exp(log_mean(log_mse_pairs(ref_est, Xs, Ys)))
    tilted = sum(r.proposal == "tilted" for r in batch)
    low = mc - Z95 * se
    if low <= 0:  # the delta-method interval of log(mean): its lower end stays positive
        low = mc * math.exp(-Z95 * se / mc)
    kind, ensemble, norms = SERIES[name]
    return {"d": d, "series": name, "kind": kind, "ensemble": ensemble, "norms": norms,
            "m": est.m, "bin": k, "u_sq": centre(k), "pairs": n, "trials": trials,
            "mse_mc": mc, "stderr": se, "ci_low": low, "ci_high": mc + Z95 * se,
            "mse_exact": exact, "z": (mc - exact) / se if se > 0 else 0.0,
            "k_hat": float(max(r.tail.k_hat for r in batch)),
            "max_share": float(max(r.tail.max_share for r in batch)),
            "tail_ok": all(bool(r.tail_ok) for r in batch),
            "tame_pairs": sum(bool(r.tail_ok) for r in batch),
            "proposal": "plain" if tilted == 0 else ("tilted" if tilted == n else "mixed"),
            "tilted_pairs": tilted, "ess": float(min(r.ess for r in batch)),
            "mse_positive_iid": ref, "ratio_exact": exact / ref, "ratio_mc": mc / ref,
            "ratio_ci_low": low / ref, "ratio_ci_high": (mc + Z95 * se) / ref}


def compute(quick=False, seed=0, progress=None):
    bins = bin_indices(quick)
    mc_bins = MC_BINS[bool(quick)]
    tick = counter(progress, len(DIMS) * (len(bins) + len(mc_bins) * len(SERIES)))
    lines, pops, points = [], [], []
    for d in DIMS:
        for k in bins:
            X, Y = population(d, k, seed)
            ests = estimators_for(X, Y)
            pops.append(_population_row(d, k, seed, X, Y, ests))
            lines += _lines(d, k, X, Y, ests)
            tick()
            if k not in mc_bins:
                continue
            for name in SERIES:
                points.append(_mc_point(d, k, name, ests[name], ests["reference"], X, Y, quick,
                                        seed))
                tick()
    return {"lines": lines, "monte_carlo": points, "populations": pops,
            "run": {"trials": TRIALS[bool(quick)],
                    "unit": f"trials per pair ({N_MC[bool(quick)]} pairs per point)",
                    "backend": BACKEND, "proposal": PROPOSAL}}


#: Multiplicative x offsets of each series' markers (to separate them on the log axis).
MC_SHIFT = dict(zip(SERIES, (0.86, 0.93, 1.0, 1.075, 1.16)))
Y_RANGE = (1e-4, 2.0)


def _panel(ax, data, d):
    ax.axhline(1.0, color="0.4", lw=0.8, label="FAVOR+, iid: the reference")
    for name in SERIES:
        colour, ls, marker = STYLES[name]
        rows = [r for r in data["lines"] if r["d"] == d and r["series"] == name]
        ax.loglog([r["u_sq"] for r in rows], [r["ratio_exact"] for r in rows], color=colour,
                  ls=ls, label=LABELS[name])
        pts = [r for r in data["monte_carlo"] if r["d"] == d and r["series"] == name]
        mc_errorbars(ax, pts, "u_sq", colour, marker, shift=MC_SHIFT[name], y="ratio_mc",
                     low="ratio_ci_low", high="ratio_ci_high")
    ax.set_title(f"d = {d}, r = m = {d}", fontsize=9)
    ax.set_xlabel(r"$|x + y|^2$ (bin centre; populations of pairs)")
    ax.set_xlim(CENTRES[0] / 1.3, CENTRES[-1] * 1.3)
    ax.set_ylim(*Y_RANGE)


def plot(data, out_dir):
    with paper_style() as plt:
        fig, axes = plt.subplots(1, len(DIMS), figsize=(8.0, 3.8), sharey=True)
        for ax, d in zip(axes, DIMS):
            _panel(ax, data, d)
        axes[0].set_ylabel("mean MSE / mean MSE of FAVOR+ iid")
        fig.suptitle("Which estimator at r = d outputs: lines exact (mean over each bin's pairs); "
                     "markers Monte Carlo, 95% intervals (hollow: heavy tail)", fontsize=8)
        legend_below(axes[0], ncol=3)
        return save(fig, out_dir, NAME)
