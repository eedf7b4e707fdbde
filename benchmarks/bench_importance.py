"""Importance sampling (issue 14): what the tilted proposal costs per trial and the variance it saves.

Four sections, each printed as a Markdown table (docs/performance.md,
"Importance sampling (issue 14)"; docs/importance.rst):

``cost``
    Time per trial of the reduced engine (:func:`rfkernels.engine.estimate_chunks`)
    with the tilted proposal (``tilt=rfkernels.engine.tilt_for(...)``) and
    without it, for positive, hyperbolic and oprf (A*) features, iid and
    orthogonal projections with chi norms, d = m = 16 and 64, on the Numba
    and NumPy backends. Each (plain, tilted) pair of timings is taken back to
    back (alternating which goes first) after a warm-up call, so compile time
    is excluded and load from other jobs hits both alike; the table shows the
    median over the repeats of each time and of their ratio. On Numba the
    whole run is timed too (``monte_carlo_mse`` of a geometry with
    ``proposal='plain'`` and ``'tilted'``: engine plus the weighted
    streaming statistics). Target: tilted / plain <= 1.5 on Numba.
``variance``
    Per trial, the variance of the plain squared error,
    :math:`\\mathrm{Var}_P[(\\hat K - 1)^2]` (K: the estimate divided by SM),
    against the variance of the tilted proposal's weighted squared error,
    :math:`\\mathrm{Var}_Q[w (\\hat K - 1)^2]`; their ratio is the variance
    reduction factor (VRF: how many plain trials one tilted trial is worth), with
    the weights' effective sample size per trial, ESS/n = (sum w)^2 / (n sum w^2).
    The plain variance is E_P[(K - 1)^4] - MSE^2 with the exact MSE and a
    fourth moment that is exact for iid projections (central moments of a
    mean of m iid terms whose raw moments are closed-form) and, for
    orthogonal blocks, itself estimated by importance sampling with the
    proposal tilted toward the *fourth* power of a term (shift 4a for
    positive and hyperbolic features; ``fourth_moment_tilt``); the iid
    rows check that estimate against the exact one (column M4 IS/exact).
    The plain *sample* variance of the same number of plain trials is
    shown beside it: for heavy tails it is far below the truth, which is
    why it is not used. The last column is what ``proposal="auto"`` chose
    for a run of the same length, and how that run did. Grid: the four
    cases of the issue's table, and |x + y|^2 in {0.5, 2.5, 8.45, 16} x
    d in {4, 16, 64}, m = d, for the three kinds and two ensembles, 2**20
    trials per run, each point with its own seed.
``table``
    The issue's table re-measured: ``monte_carlo_mse(..., backend="numba")``
    with ``proposal="plain"`` and ``"auto"``, 4e6 trials, d = m = 16, seed 0;
    then the same runs with seeds 1 to 8 (MC/exact minimum, median, maximum).
``large``
    |x + y|^2 = 16, positive features, orthogonal and simplex blocks with
    chi norms, d = m in {4, 16, 64}, ``proposal="tilted"``, 4e5 trials:
    the (p, W, Z) move of :class:`rfkernels.engine.Tilt` where the first
    proposal (shift g_i and tilt R_i^2) failed; and the fraction of those
    trials that took the plain component of the mixture.

Run from the repository root with the package installed::

    python benchmarks/bench_importance.py                 # everything (~10 min on 2 busy cores)
    python benchmarks/bench_importance.py --quick         # ~20 s: fewer trials, d = 16 timings
    python benchmarks/bench_importance.py --only table --json out.json
    python benchmarks/bench_importance.py --only cost --backends numba --repeat 11

``--json`` writes every number (strict JSON: NaN and inf as null).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numba
import numpy as np
from rfkernels.analysis import (
    monte_carlo_mse,
    pareto_k_hat,
)

from rfkernels import engine, rng, theory
from rfkernels.rng import key_from_seed
from rfkernels.validation import seed_sequence

SECTIONS = ("cost", "variance", "table", "large")
KINDS = ("positive", "hyperbolic", "oprf")
ENSEMBLES = ("iid", "orthogonal")
#: The issue's table: (|x + y|^2, kind, ensemble) at d = m = 16.
ISSUE_CASES = [(2.50, "positive", "orthogonal"), (3.96, "positive", "iid"),
               (5.76, "hyperbolic", "orthogonal"), (8.45, "positive", "iid")]
GRID_S = (0.5, 2.5, 8.45, 16.0)
GRID_D = (4, 16, 64)
#: |x + y|^2 of the pairs the cost section times (the cost does not depend on it).
COST_S = 8.45


# ---------------------------------------------------------------------------
# Pairs
# ---------------------------------------------------------------------------


class Case:
    """One pair x = y (|x + y|^2 = s) in R^d, with m projections, for one kind and ensemble."""

    def __init__(self, s, d, m, kind, ensemble):
        self.s, self.d, self.m, self.kind, self.ensemble = float(s), d, m, kind, ensemble
        x = np.zeros(d)
        x[0] = math.sqrt(s) / 2.0
        self.x, self.y = x, x.copy()
        self.geom = theory.geometry(x, self.y)
        self.a = math.sqrt(s)
        self.A = float(theory.oprf_optimal_a_from_geometry(self.geom)) if kind == "oprf" else None
        log_exact = float(theory.exact_mse(self.geom, None, m, kind, ensemble=ensemble,
                                                         A=self.A, log=True))
        self.rel_exact = math.exp(log_exact - 2.0 * float(self.geom.log_sm))  # MSE / SM^2

    def tilt(self):
        return engine.tilt_for(self.kind, self.ensemble, "chi", self.a, self.d, A=self.A)

    def chunks(self, key, n, backend="numba", tilt=None, pair=0):
        return engine.estimate_chunks(key, self.a, self.m, self.d, self.kind,
                                       ensemble=self.ensemble, trials=n, backend=backend,
                                       A=self.A, tilt=tilt, pair=pair)

    def draw(self, key, n, tilt=None, pair=0):
        """All n normalised estimates (and weights, None if plain) as NumPy arrays."""
        es, ws = [], []
        for c in self.chunks(key, n, tilt=tilt, pair=pair):
            es.append(np.array(c[1]))
            if tilt is not None:
                ws.append(np.array(c[2]))
        e = np.concatenate(es)
        w = np.concatenate(ws) if tilt is not None else None
        if not np.all(np.isfinite(e)) or (w is not None and not np.all(np.isfinite(w))):
            raise FloatingPointError(f"non-finite estimate or weight at {self.label()}")
        return e, w

    def label(self):
        return f"{self.kind} {self.ensemble} d={self.d} m={self.m} |x+y|^2={self.s:g}"


# ---------------------------------------------------------------------------
# Exact and importance-sampled fourth moments of the plain squared error
# ---------------------------------------------------------------------------


def term_raw_moment(case, k):
    """E[X^k] of one normalised term X (E X = 1) of an iid estimator with chi norms."""
    s, d = case.s, case.d
    if case.kind == "positive":  # X = exp(a g - s/2)
        return math.exp(0.5 * k * (k - 1) * s)
    if case.kind == "hyperbolic":  # X = (exp(a g - s/2) + exp(-a g - s/2)) / 2
        return sum(math.comb(k, j) * math.exp(0.5 * ((2 * j - k) ** 2 - k) * s)
                   for j in range(k + 1)) / 2.0**k
    # oprf: X = exp(B a p - s/2 + 2A (p^2 + chi2_{d-1}) + d/2 log(1 - 4A)), p ~ N(0, 1)
    A = case.A
    B2 = 1.0 - 4.0 * A
    q = 1.0 - 4.0 * k * A  # E[exp(k(2A |w|^2 + B a p))] needs q > 0
    if q <= 0.0:
        raise ValueError(f"E[X^{k}] is infinite for A = {A}")
    return math.exp(k * (0.5 * d * math.log(B2) - 0.5 * s) - 0.5 * d * math.log(q)
                    + 0.5 * k * k * B2 * s / q)


def exact_fourth_moment_iid(case):
    """E[(K - 1)^4], K the mean of m iid terms: (mu4 + 3 (m - 1) mu2^2) / m^3."""
    r2, r3, r4 = (term_raw_moment(case, k) for k in (2, 3, 4))
    mu2 = r2 - 1.0
    mu4 = r4 - 4.0 * r3 + 6.0 * r2 - 3.0
    m = case.m
    return (mu4 + 3.0 * (m - 1) * mu2 * mu2) / m**3


def fourth_moment_tilt(case):
    """A :class:`rfkernels.engine.Tilt` aimed at the fourth power of a term (chi norms).

    :func:`rfkernels.engine.tilt_for` aims at a term's square:
    omega ~ N(lambda e, sigma^2 I), sigma^2 = 1/(1 - 8A), lambda = 2 B a sigma^2.
    The fourth power's tilted law has sigma^2 = 1/(1 - 16A), lambda = 4 B a sigma^2
    (positive, hyperbolic: a shift of 4a); the fields follow the formulas of
    :class:`rfkernels.engine.Tilt`. Any tilt gives exact weights, so the
    weighted mean of (K - 1)^4 is unbiased for E_P[(K - 1)^4].
    """
    base = case.tilt()
    A = case.A if case.kind == "oprf" else 0.0
    sigma2 = 1.0 / (1.0 - 16.0 * A)
    mu = 4.0 * math.sqrt(1.0 - 4.0 * A) * case.a * sigma2
    n1 = case.d - 1.0
    return base._replace(shift=mu, wscale=sigma2, c1=0.5 * (1.0 - 1.0 / sigma2),
                         c0=-0.5 * mu * mu - 0.5 * n1 * math.log(sigma2))


def tail_numbers(q):
    """(k-hat, largest share) of the values q (>= 0)."""
    total = float(q.sum())
    share = float(q.max()) / total if total > 0 else math.nan
    return float(pareto_k_hat(q)), share


def variance_row(case, n, seed):
    """Variance reduction factor, ESS/n and the checks behind them at one case."""
    key = key_from_seed(seed)
    # tilted proposal (pair 1): weighted squared errors
    e, w = case.draw(key, n, tilt=case.tilt(), pair=1)
    q = w * (e - 1.0) ** 2
    mse_t, var_t = float(q.mean()), float(q.var(ddof=1))
    k_t, share_t = tail_numbers(q)
    ess_n = float(w.sum() ** 2 / (n * np.dot(w, w)))
    # fourth moment by importance sampling toward the fourth power (pair 2)
    e4, w4 = case.draw(key, n, tilt=fourth_moment_tilt(case), pair=2)
    r4 = w4 * (e4 - 1.0) ** 4
    m4_is = float(r4.mean())
    k4, share4 = tail_numbers(r4)
    m4_exact = exact_fourth_moment_iid(case) if case.ensemble == "iid" else None
    m4 = m4_exact if m4_exact is not None else m4_is
    var_p = m4 - case.rel_exact**2
    # plain trials (pair 0): the sample variance a plain run would report
    ep, _ = case.draw(key, n, pair=0)
    sq = (ep - 1.0) ** 2
    var_p_sample = float(sq.var(ddof=1))
    # what proposal="auto" does with a run of the same length (its own pilot decides)
    auto = monte_carlo_mse(case.geom, None, case.m, case.kind, ensemble=case.ensemble,
                                         trials=n, seed=seed, backend="numba", A=case.A,
                                         proposal="auto")
    return {
        "s": case.s, "d": case.d, "m": case.m, "kind": case.kind, "ensemble": case.ensemble,
        "A": case.A, "trials": n, "rel_mse_exact": case.rel_exact,
        "tilted_mc_over_exact": mse_t / case.rel_exact,
        "tilted_z": (mse_t - case.rel_exact) / math.sqrt(var_t / n),
        "tilted_k_hat": k_t, "tilted_max_share": share_t, "ess_per_trial": ess_n,
        "var_tilted": var_t, "var_plain": var_p,
        "var_plain_source": "exact" if m4_exact is not None else "importance-sampled M4",
        "m4_is_over_exact": m4_is / m4_exact if m4_exact is not None else None,
        "m4_is_k_hat": k4, "m4_is_max_share": share4,
        "var_plain_sample": var_p_sample, "plain_sample_over_var_plain": var_p_sample / var_p,
        "plain_mc_over_exact": float(sq.mean()) / case.rel_exact,
        "vrf": var_p / var_t,
        "auto_proposal": auto.proposal, "auto_note": auto.proposal_note,
        "auto_mc_over_exact": auto.mse / auto.mse_exact, "auto_z": auto.z,
        "auto_tail_ok": auto.tail_ok,
    }


# ---------------------------------------------------------------------------
# Sections
# ---------------------------------------------------------------------------


def section_cost(sizes, backends, repeat, trials, run_trials):
    key = key_from_seed(0)
    rows = []
    for backend in backends:
        for d in sizes:
            n = trials[backend] // (d // 16)
            for kind in KINDS:
                for ens in ENSEMBLES:
                    case = Case(COST_S, d, d, kind, ens)
                    tilt = case.tilt()

                    def engine(t, case=case, backend=backend, n=n):
                        for _ in case.chunks(key, n, backend=backend, tilt=t):
                            pass

                    engine(None)
                    engine(tilt)  # warm-up: compile or load both kernels
                    plain, tilted, ratio = [], [], []
                    for r in range(repeat):
                        order = (None, tilt) if r % 2 == 0 else (tilt, None)
                        got = {}
                        for t in order:
                            t0 = time.perf_counter()
                            engine(t)
                            got[t is None] = (time.perf_counter() - t0) / n
                        plain.append(got[True])
                        tilted.append(got[False])
                        ratio.append(got[False] / got[True])
                    row = {"backend": backend, "d": d, "m": d, "kind": kind, "ensemble": ens,
                           "trials": n, "repeats": repeat,
                           "plain_ns": 1e9 * statistics.median(plain),
                           "tilted_ns": 1e9 * statistics.median(tilted),
                           "ratio": statistics.median(ratio),
                           "ratio_min": min(ratio), "ratio_max": max(ratio)}
                    if backend == "numba":
                        row.update(_whole_run(case, repeat, run_trials // (d // 16)))
                    rows.append(row)
                    print(f"  {backend} d={d} {kind} {ens}: {row['ratio']:.2f}x", file=sys.stderr)
    return rows


def _whole_run(case, repeat, n):
    """Median seconds per trial of monte_carlo_mse, plain and tilted, and their ratio."""
    def run(proposal):
        t0 = time.perf_counter()
        monte_carlo_mse(case.geom, None, case.m, case.kind, ensemble=case.ensemble,
                                      trials=n, seed=0, backend="numba", A=case.A,
                                      proposal=proposal, mse_exact=None)
        return (time.perf_counter() - t0) / n

    run("plain")
    run("tilted")
    plain, tilted, ratio = [], [], []
    for r in range(repeat):
        if r % 2 == 0:
            a = run("plain")
            b = run("tilted")
        else:
            b = run("tilted")
            a = run("plain")
        plain.append(a)
        tilted.append(b)
        ratio.append(b / a)
    return {"run_trials": n, "run_plain_ns": 1e9 * statistics.median(plain),
            "run_tilted_ns": 1e9 * statistics.median(tilted), "run_ratio": statistics.median(ratio)}


def section_variance(grid_s, grid_d, n):
    cases = [Case(s, 16, 16, kind, ens) for s, kind, ens in ISSUE_CASES]
    cases += [Case(s, d, d, kind, ens) for kind in KINDS for ens in ENSEMBLES
              for d in grid_d for s in grid_s]
    rows = []
    for i, case in enumerate(cases):
        # each case its own key: rows are independent (the same key would give the three
        # kinds at one (s, d) the same underlying variates, hence correlated errors)
        row = variance_row(case, n, np.random.SeedSequence([14, i]))
        row["issue_case"] = i < len(ISSUE_CASES)
        rows.append(row)
        print(f"  {case.label()}: VRF {row['vrf']:.3g}", file=sys.stderr)
    return rows


def section_table(trials, seeds):
    rows, spread = [], []
    for s, kind, ens in ISSUE_CASES:
        case = Case(s, 16, 16, kind, ens)
        for proposal in ("plain", "auto"):
            t0 = time.perf_counter()
            r = monte_carlo_mse(case.x, case.y, 16, kind, ensemble=ens, trials=trials, seed=0,
                                backend="numba", proposal=proposal)
            rows.append({"s": s, "kind": kind, "ensemble": ens, "d": 16, "m": 16, "trials": trials,
                         "requested": proposal, "proposal": r.proposal,
                         "mc_over_exact": r.mse / r.mse_exact, "z": r.z, "k_hat": r.tail.k_hat,
                         "max_share": r.tail.max_share, "ess_per_trial": r.ess / r.trials,
                         "tail_ok": r.tail_ok, "note": r.proposal_note,
                         "seconds": time.perf_counter() - t0})
        # the plain sampler's answer is itself a heavy-tailed random number: other seeds
        for proposal in ("plain", "auto"):
            got = [monte_carlo_mse(case.x, case.y, 16, kind, ensemble=ens, trials=trials, seed=sd,
                                   backend="numba", proposal=proposal) for sd in seeds]
            ratios = [g.mse / g.mse_exact for g in got]
            spread.append({"s": s, "kind": kind, "ensemble": ens, "trials": trials,
                           "requested": proposal, "seeds": list(seeds),
                           "proposals": [g.proposal for g in got], "mc_over_exact": ratios,
                           "z": [g.z for g in got], "tail_ok": [g.tail_ok for g in got]})
    return rows, spread


def section_large(trials, sizes):
    rows = []
    for ens in ("orthogonal", "simplex"):
        for d in sizes:
            case = Case(16.0, d, d, "positive", ens)
            t0 = time.perf_counter()
            r = monte_carlo_mse(case.x, case.y, d, "positive", ensemble=ens, trials=trials,
                                seed=0, backend="numba", proposal="tilted")
            rows.append({"s": 16.0, "kind": "positive", "ensemble": ens, "d": d, "m": d,
                         "trials": trials, "mc_over_exact": r.mse / r.mse_exact, "z": r.z,
                         "k_hat": r.tail.k_hat, "max_share": r.tail.max_share,
                         "ess_per_trial": r.ess / r.trials, "tail_ok": r.tail_ok,
                         "seconds": time.perf_counter() - t0})
    # The mixture components of these runs (seed 0, pair 0; the same for every d and ensemble):
    # where a moved trial's weighted squared error is nearly constant, the run's error is the
    # binomial noise of how many trials took the plain component.
    key = key_from_seed(seed_sequence(0))
    u = rng.uniform_pair(key, engine.trial_counters(0, trials), 0, engine.STREAM_PROPOSAL)[0]
    frac = float(np.mean(u < engine.DEFENSIVE_WEIGHT))
    a0 = engine.DEFENSIVE_WEIGHT
    mixture = {"trials": trials, "plain_fraction": frac,
               "plain_fraction_z": (frac - a0) / math.sqrt(a0 * (1 - a0) / trials),
               "moved_fraction_over_expected": (1.0 - frac) / (1.0 - a0)}
    return rows, mixture


# ---------------------------------------------------------------------------
# Output
# ---------------------------------------------------------------------------


def _g(v, digits=3):
    if v is None:
        return "-"
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, float) and not math.isfinite(v):
        return "nan"
    return f"{v:.{digits}g}"


def _table(header, rows):
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def print_cost(rows):
    print("\n### Cost per trial, tilted / plain (median of repeats; chi norms)\n")
    body = []
    for r in rows:
        run = (f"{r['run_plain_ns']:.0f} / {r['run_tilted_ns']:.0f} ns = {r['run_ratio']:.2f}x"
               if "run_ratio" in r else "-")
        body.append([r["backend"], r["d"], r["kind"], r["ensemble"], f"{r['plain_ns']:.0f}",
                     f"{r['tilted_ns']:.0f}", f"{r['ratio']:.2f}x",
                     f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}", run])
    print(_table(["backend", "d = m", "kind", "ensemble", "plain ns/trial", "tilted ns/trial",
                  "engine tilted/plain", "range", "whole run plain / tilted"], body))
    numba_rows = [r for r in rows if r["backend"] == "numba"]
    if numba_rows:
        worst = max(numba_rows, key=lambda r: r["ratio"])
        print(f"\nNumba engine: largest median ratio {worst['ratio']:.2f}x "
              f"({worst['kind']}, {worst['ensemble']}, d = m = {worst['d']}); target <= 1.5x: "
              f"{'met' if worst['ratio'] <= 1.5 else 'NOT met'}.")


def print_variance(rows):
    print("\n### Variance reduction per trial: VRF = Var_P[(K-1)^2] / Var_Q[w (K-1)^2] "
          "(normalised estimates K, m = d)\n")
    body = []
    for r in rows:
        mse2 = r["rel_mse_exact"] ** 2
        check = (f"exact (IS/exact {r['m4_is_over_exact']:.4f})" if r["m4_is_over_exact"] is not None
                 else f"IS (share {r['m4_is_max_share']:.1e})")
        body.append([f"{r['s']:g}" + (" (issue)" if r["issue_case"] else ""), r["d"], r["kind"],
                     r["ensemble"], _g(r["rel_mse_exact"]), f"{r['tilted_mc_over_exact']:.4f}",
                     f"{r['tilted_z']:+.2f}", f"{r['tilted_k_hat']:.2f}",
                     f"{r['tilted_max_share']:.1e}", f"{r['ess_per_trial']:.3f}",
                     _g(r["var_plain"] / mse2), check,
                     _g(r["var_tilted"] / mse2), _g(r["vrf"]),
                     _g(r["plain_sample_over_var_plain"], 2),
                     f"{r['auto_proposal']} {r['auto_mc_over_exact']:.4f} {r['auto_tail_ok']}"])
    print(_table(["abs(x+y)^2", "d", "kind", "ensemble", "MSE/SM^2", "tilted MC/exact", "z",
                  "k-hat (w)", "share (w)", "ESS/n", "Var_P/MSE^2", "fourth moment",
                  "Var_Q/MSE^2", "VRF", "plain sample var / Var_P",
                  "auto: proposal, MC/exact, tail_ok"], body))
    print("\n((issue): the cases of the issue's table, d = m = 16. Var_P/MSE^2 and Var_Q/MSE^2: variance of one "
          "trial's (weighted) squared error relative to the exact MSE squared. Fourth moment of the "
          "plain error: exact (iid; in brackets the importance-sampled estimate over it) or "
          "importance-sampled toward the fourth power of a term (IS; its largest share shown).)")


def print_table(rows, title):
    print(f"\n### {title}\n")
    body = []
    for r in rows:
        body.append([f"{r['s']:g}", r["kind"], r["ensemble"], r["d"],
                     r.get("requested", "tilted") + " -> " + r.get("proposal", "tilted"),
                     f"{r['mc_over_exact']:.4f}", f"{r['z']:+.2f}", f"{r['k_hat']:.2f}",
                     f"{r['max_share']:.1e}", f"{r['ess_per_trial']:.3f}", r["tail_ok"],
                     f"{r['seconds']:.1f}"])
    print(_table(["abs(x+y)^2", "kind", "ensemble", "d = m", "proposal", "MC/exact", "z",
                  "k-hat", "largest share", "ESS/n", "tail_ok", "s"], body))


def print_spread(rows):
    print("\n### The same runs with seeds " + ", ".join(str(s) for s in rows[0]["seeds"])
          + ": MC/exact (min, median, max) and how many runs have tail_ok\n")
    body = []
    for r in rows:
        ratios = r["mc_over_exact"]
        body.append([f"{r['s']:g}", r["kind"], r["ensemble"], r["requested"],
                     "/".join(sorted(set(r["proposals"]))),
                     f"{min(ratios):.4f}", f"{statistics.median(ratios):.4f}", f"{max(ratios):.4f}",
                     f"{max(abs(z) for z in r['z']):.2f}", f"{sum(r['tail_ok'])} of {len(ratios)}"])
    print(_table(["abs(x+y)^2", "kind", "ensemble", "requested", "proposal", "min", "median", "max",
                  "max abs(z)", "tail_ok"], body))


def _strict(v):
    """JSON-ready: NaN and inf as None, NumPy scalars as Python numbers."""
    if isinstance(v, dict):
        return {k: _strict(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_strict(x) for x in v]
    if isinstance(v, (np.floating, float)):
        v = float(v)
        return v if math.isfinite(v) else None
    if isinstance(v, np.integer):
        return int(v)
    return v


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true",
                   help="~20 s: d = m = 16 timings with 3 repeats; 2**14 trials per variance point "
                        "and d in {4, 16}; 2e5 trials for the table (seeds 1, 2), 4e4 for |x+y|^2 = 16")
    p.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS),
                   help="sections to run (default: all)")
    p.add_argument("--repeat", type=int, default=None,
                   help="timings per cost entry (default: 7; 3 with --quick)")
    p.add_argument("--backends", nargs="+", choices=("numba", "numpy"), default=["numba", "numpy"],
                   help="backends the cost section times (default: both)")
    p.add_argument("--json", metavar="PATH", help="also write every number to this JSON file")
    args = p.parse_args(argv)
    quick = args.quick
    if args.repeat is not None and args.repeat < 1:
        p.error(f"--repeat must be >= 1; got {args.repeat}")
    repeat = args.repeat or (3 if quick else 7)

    started = time.perf_counter()
    info = {"python": platform.python_version(), "numpy": np.__version__,
            "numba": numba.__version__, "threads": numba.get_num_threads(),
            "cpus": os.cpu_count(), "machine": platform.processor() or platform.machine(),
            "quick": quick, "argv": sys.argv[1:] if argv is None else list(argv)}
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"# {info['machine']}, {info['cpus']} CPUs, Python {info['python']}, numpy "
          f"{info['numpy']}, numba {info['numba']} ({info['threads']} threads), load average "
          f"at start {load[0]:.2f}" if load else "")
    out = {"info": info}
    if "cost" in args.only:
        trials = {"numba": 1 << (17 if quick else 20), "numpy": 1 << (13 if quick else 16)}
        out["cost"] = section_cost((16,) if quick else (16, 64), args.backends, repeat,
                                   trials, 1 << (17 if quick else 20))
        print_cost(out["cost"])
    if "variance" in args.only:
        n = 1 << (14 if quick else 20)
        grid_d = (4, 16) if quick else GRID_D
        out["variance"] = section_variance(GRID_S, grid_d, n)
        print_variance(out["variance"])
    if "table" in args.only:
        trials = 200_000 if quick else 4_000_000
        seeds = range(1, 3) if quick else range(1, 9)
        out["table"], out["table_seeds"] = section_table(trials, seeds)
        print_table(out["table"], f"The issue's table, d = m = 16, {trials:.0e} trials, numba, seed 0")
        print_spread(out["table_seeds"])
    if "large" in args.only:
        trials = 40_000 if quick else 400_000
        out["large"], out["large_mixture"] = section_large(trials, GRID_D)
        print_table(out["large"], f"|x+y|^2 = 16, positive, chi norms, proposal='tilted', "
                                  f"{trials:.0e} trials, seed 0")
        mx = out["large_mixture"]
        print(f"\nMixture components of these runs: {mx['plain_fraction']:.5f} of the trials from "
              f"the plain law (expected {engine.DEFENSIVE_WEIGHT}, binomial z = "
              f"{mx['plain_fraction_z']:+.2f}); moved trials / expected = "
              f"{mx['moved_fraction_over_expected']:.4f}.")
    info["seconds"] = time.perf_counter() - started
    if load:
        info["load_average_start"] = load[0]
        info["load_average_end"] = os.getloadavg()[0]
    print(f"\n({info['seconds']:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(_strict(out), fh, indent=1, allow_nan=False)
            fh.write("\n")


if __name__ == "__main__":
    main()
