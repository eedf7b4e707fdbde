"""QMC frequencies: the normal quantile of a Sobol point, or QMC directions with chi norms? (issue 41).

``python benchmarks/qmc_norms.py [--draws 400]`` prints one Markdown table:
the MSE over ``--draws`` scrambles, as a ratio to iid rows' MSE, of four
constructions of m = 64 rows that are each marginally N(0, I_d) (so every
estimator stays unbiased):

- ``quantile``: ensemble ``"qmc"`` as registered, :math:`\\Phi^{-1}(u)`
  coordinate by coordinate of a scrambled Sobol point u in d dimensions;
- ``dir+chi``: the direction of that row, :math:`g/|g|`, times an
  independent chi(d) length;
- ``dir+anti``: the same directions with antithetic chi(d) lengths in pairs
  of rows (1, 2), (3, 4), ... (one uniform u and its 1 - u);
- ``dir+qmc``: a Sobol point in d + 1 dimensions, its first d coordinates
  giving the direction and the last the chi(d) length through its quantile.

Pairs as in ``benchmarks/qmc_regimes.py``: ``|x| = |y| = rho`` at angle 1,
turned by a fixed Haar rotation; trig and positive features. A ratio is
"unresolved" where either side's standard error is above a third of its value.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import special

from rfkernels import draw_projections, estimate, theory
from rfkernels.estimators.ensembles import qmc_gaussian_rows
from rfkernels.projections import orthogonal_blocks

from qmc_regimes import ratio_text  # the same "unresolved" rule (run from benchmarks/)

M = 64
CONSTRUCTIONS = ("quantile", "dir+chi", "dir+anti", "dir+qmc")


def _unit(g):
    return g / np.linalg.norm(g, axis=1, keepdims=True)


def rows(kind, m, d, seed):
    rng = np.random.default_rng(seed)
    if kind == "iid":
        return draw_projections(m, d, seed=rng)
    if kind == "quantile":
        return qmc_gaussian_rows(m, d, rng)
    if kind == "dir+qmc":
        g = qmc_gaussian_rows(m, d + 1, rng)
        u = special.ndtr(g[:, -1])  # the last coordinate back to its uniform
        r2 = 2.0 * special.gammaincinv(0.5 * d, u)
        return _unit(g[:, :d]) * np.sqrt(r2)[:, None]
    g = qmc_gaussian_rows(m, d, rng)
    if kind == "dir+chi":
        return _unit(g) * np.sqrt(rng.chisquare(d, size=m))[:, None]
    u = rng.random((m + 1) // 2)  # dir+anti: rows 2k and 2k + 1 share u
    r2 = np.empty(m)
    r2[0::2] = 2.0 * special.gammaincinv(0.5 * d, u[: (m + 1) // 2])
    r2[1::2] = 2.0 * special.gammainccinv(0.5 * d, u[: m // 2])
    return _unit(g) * np.sqrt(r2)[:, None]


def mse(x, y, kind, ensemble, draws):
    exact = math.exp(float(x @ y))
    err = np.array([float(estimate(x, y, rows(ensemble, M, x.size, t), kind)) - exact
                    for t in range(draws)])
    sq = err * err
    return sq.mean(), sq.std(ddof=1) / math.sqrt(draws)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=400)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print("| d | rho | kind | " + " | ".join(f"{c} / iid" for c in CONSTRUCTIONS) + " |")
    print("|---|---|---|" + "---|" * len(CONSTRUCTIONS))
    for d in (2, 4, 8, 32):
        turn = orthogonal_blocks(1, d, np.random.default_rng(d))[0]  # the rotation of qmc_regimes.py
        for rho in (0.6, 1.2):
            x, y = theory.pair(d, rho, rho, 1.0)
            x, y = turn @ x, turn @ y
            for kind in ("trig", "positive"):
                base = mse(x, y, kind, "iid", args.draws)
                cells = [ratio_text(mse(x, y, kind, c, args.draws), base) for c in CONSTRUCTIONS]
                print(f"| {d} | {rho} | {kind} | " + " | ".join(cells) + " |")
    print(f"\n({time.perf_counter() - start:.1f} s, m = {M}, {args.draws} draws per cell)")


if __name__ == "__main__":
    main()
