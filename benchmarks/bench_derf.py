"""Dense-exponential random features (issue 24): exact MSE throughput and Monte Carlo cost per trial.

1. Exact MSE points per second, ``theory.exact_mse(x, y, m, kind, ...)``
   on 100,000 pairs with shared parameters (d = 16 and 64, m = d), iid and
   orthogonal, DERF (dense A: iid only) beside OPRF in the same run. Target
   >= 1e5 points/s.
2. Reduced engine, per trial: SADERF and ADERF (isotropic A: OPRF's kernel
   at the transformed pair) against OPRF at the same pair, m = d = 64,
   Numba backend, plain trials after a warm-up; per trial is the slope between
   100,000 and 400,000 trials (the fixed cost of validation, fit and exact
   MSE printed beside it). Target: within 1.5x.
3. SDERF (dense A, d normals per feature): the literal method against the
   literal method of OPRF (the literal reference), 2,000 trials.

Usage (from the repository root, package installed)::

    python benchmarks/bench_derf.py
"""

from functools import partial

import numpy as np
from _timing import best_of

from rfkernels import fit_derf, theory
from rfkernels.analysis import monte_carlo_mse


def _population(rng, n, d):
    scale = 0.6 * d ** -0.25  # |x|^2 about 0.36 sqrt(d)
    return rng.normal(size=(n, d)) * scale, rng.normal(size=(n, d)) * scale


def exact_throughput(rng):
    k = 100_000
    for d in (16, 64):
        x, y = (rng.normal(size=(k, d)) * (1.0 / np.sqrt(d)) for _ in range(2))
        fits = {kind: fit_derf(kind, x[:500], y[:500]).keywords for kind in ("saderf", "sderf")}
        print(f"d = m = {d}, {k} pairs, parameters shared:")
        rows = [("oprf iid (A = -0.05)", "oprf", "iid", {"A": -0.05}),
                ("oprf orthogonal", "oprf", "orthogonal", {"A": -0.05}),
                ("derf iid (SADERF's fit)", "derf", "iid", fits["saderf"]),
                ("derf orthogonal (SADERF's fit)", "derf", "orthogonal", fits["saderf"]),
                ("derf iid (SDERF's dense A)", "derf", "iid", fits["sderf"])]
        for label, kind, ens, kw in rows:
            t = best_of(partial(theory.exact_mse, x, y, d, kind, ensemble=ens, log=True, **kw))
            print(f"  {label:<34} {t:8.3f} s  {k / t:10.3g} points/s")


def per_trial(rng):
    d = m = 64
    q, k = _population(rng, 256, d)
    x, y = q[:1], k[:1]
    pop = (q, k)
    opts = dict(ensemble="orthogonal", backend="numba", proposal="plain", seed=1)
    a = fit_derf("oprf", *pop).keywords["A"]
    cases = [("oprf (A of the population)", dict(kind="oprf", A=a)),
             ("saderf", dict(kind="saderf", population=pop)),
             ("aderf", dict(kind="aderf", population=pop))]
    small, large = 100_000, 400_000
    print(f"reduced engine, m = d = {d}, orthogonal, Numba, one pair; per trial = the slope between "
          f"{small} and {large} trials, fixed = the rest (validation, fit, exact MSE):")
    base = None
    for label, kw in cases:
        kind = kw.pop("kind")
        monte_carlo_mse(x[0], y[0], m, kind, trials=1000, **opts, **kw)  # compile / warm
        t = [best_of(partial(monte_carlo_mse, x[0], y[0], m, kind, trials=n, **opts, **kw), 3)
             for n in (small, large)]
        per = (t[1] - t[0]) / (large - small)
        base = per if base is None else base
        print(f"  {label:<28} {per * 1e6:8.3f} us/trial  ({per / base:.2f}x OPRF)   fixed "
              f"{(t[0] - small * per) * 1e3:6.1f} ms")
    trials = 2_000
    print(f"literal method, m = d = {d}, iid, NumPy, {trials} trials, 8 pairs:")
    q, k = q[:8], k[:8]  # 8 pairs of the population (SDERF is fitted on them: d x d from 8 rows)
    t0 = best_of(partial(monte_carlo_mse, q, k, m, "oprf", A=a, trials=trials, seed=1,
                         method="literal", proposal="plain"), 2)
    t1 = best_of(partial(monte_carlo_mse, q, k, m, "sderf", trials=trials, seed=1,
                         method="literal", proposal="plain"), 2)
    print(f"  {'oprf literal (reference)':<28} {t0 / trials * 1e6:8.2f} us/trial")
    print(f"  {'sderf literal':<28} {t1 / trials * 1e6:8.2f} us/trial  ({t1 / t0:.2f}x OPRF literal)")


def main():
    rng = np.random.default_rng(0)
    exact_throughput(rng)
    per_trial(rng)


if __name__ == "__main__":
    main()
