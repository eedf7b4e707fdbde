"""Throughput of the closed-form theory: a theory-only sweep grid, points per second.

Baseline, measured in the same run: the same exact orthogonal MSE written
naively with ``scipy.special.hyp1f1`` (no cancellation control: it loses
every digit of the covariance at small |x+y|, which is why the toolkit does
not use it). Usage (from the repository root, package installed)::

    python benchmarks/bench_theory.py
"""


import numpy as np
from _timing import best_of
from scipy import special

from rfkernels import theory
from rfkernels.analysis.sweep import SweepSpec, theory_table



def naive_orthogonal_positive(geom, m):
    """(m V + P C) / m^2 with C from scipy's 1F1 (cancels catastrophically at small s)."""
    s, d = geom.s, geom.d
    lam2 = np.exp(-2 * geom.half_sq)
    v = lam2 * np.exp(s) * np.expm1(s)
    c = lam2 * (special.hyp1f1(d, d / 2, s / 2) - np.exp(s))
    pairs = theory.pairs_in_blocks(m, d.astype(int), "orthogonal")
    return (m * v + pairs * c) / m**2


def main():
    grid = {"kind": ["positive", "hyperbolic", "trig"], "ensemble": ["iid", "orthogonal"],
            "d": [4, 16, 64], "m": list(range(1, 65)), "angle": list(np.linspace(0, np.pi, 40)),
            "norm_x": list(np.linspace(0.1, 1.5, 15)), "norm_y": [0.5, 1.0]}
    spec = SweepSpec.from_dict(grid, {"theory_only": True})
    n = len(spec.points())
    t_table = best_of(lambda: theory_table(spec))
    # one (kind, ensemble) slice, ours against the naive SciPy formula
    rng = np.random.default_rng(0)
    k = 1_000_000
    geom = theory.geometry_from_angle(16, rng.uniform(0, 1.5, k), rng.uniform(0, 1.5, k),
                                      rng.uniform(0, np.pi, k))
    m = rng.integers(1, 65, k)
    t_ours = best_of(lambda: theory.exact_mse(geom, None, m, "positive", ensemble="orthogonal"))
    t_naive = best_of(lambda: naive_orthogonal_positive(geom, m))
    ours = theory.exact_mse(geom, None, m, "positive", ensemble="orthogonal")
    naive = naive_orthogonal_positive(geom, m)
    rel = np.abs(naive / ours - 1)
    print(f"theory-only sweep grid: {n} points (3 kinds x 2 ensembles x ...), "
          f"{t_table:.2f} s -> {n / t_table:.3g} points/s (all theory columns)")
    print(f"exact orthogonal positive MSE, {k} random points at d = 16:")
    print(f"  rfkernels.theory   {t_ours:.3f} s  {k / t_ours:.3g} points/s")
    print(f"  naive scipy hyp1f1 {t_naive:.3f} s  {k / t_naive:.3g} points/s "
          f"(ratio ours/naive time {t_ours / t_naive:.2f}); its relative error: "
          f"median {np.median(rel):.1e}, max {np.max(rel):.1e}")


if __name__ == "__main__":
    main()
