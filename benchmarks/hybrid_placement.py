"""Hybrid random features: which estimator gets the angle, measured; and what r buys (issue 41).

``python benchmarks/hybrid_placement.py [--draws 4000]`` prints three Markdown tables:

1. **Placement, exact** (iid rows, chi norms, m = 16, d = 16, n = 8 sign
   rows): the MSE with the trigonometric estimator weighted ``1 - theta/pi``
   (the registered kind) and ``theta/pi`` (reversed), over 157 angles in
   (0, pi), for equal lengths ``|x| = |y| = rho`` and for ``|y| = rho/2``:
   where the reversed placement is lower and by how much. The reversed MSE
   exceeds the registered one by ``(1 - 2 theta/pi)(Var positive - Var trig)`` exactly
   (:func:`rfkernels.estimators.hybrid.log_mse_placed`).
2. **Placement, Monte Carlo**: both placements' MSE over ``--draws``
   independent W (the 8 angular rows included) against the exact value
   (z), at four angles, ``rho = 1``; and the covariance of the two
   estimators against its closed form ``SM^2 (cos(|x|^2 - |y|^2) - 1)/m``
   at unequal lengths.
3. **Worst case over angles** of the relative MSE (MSE / SM^2), equal
   lengths: trig, positive and the hybrid at the same m = 16 projections
   (the paper's comparison), and trig and positive at the hybrid's r = 27 m
   = 432 outputs (rank's comparison).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from rfkernels import draw_kind_projections, estimator, theory
from rfkernels.estimators import hybrid

M, D = 16, 16
ANGLES = np.linspace(0.02, math.pi - 0.02, 157)


def _pair(rho_x, rho_y, angle):
    return theory.pair(D, rho_x, rho_y, angle)


def _log_mses(x, y, m=M):
    return {p: float(hybrid.log_mse_placed(theory.geometry(x, y), m, (x, y), p)) for p in hybrid.PLACEMENTS}


def placement_table():
    print("| norms of x, y | angles where reversed is lower | reversed / registered there | "
          "reversed / registered elsewhere (max) |")
    print("|---|---|---|---|")
    for rho in (0.5, 1.0, 1.5, 2.0):
        for rho_y in (rho, rho / 2):
            label = f"{rho}, {rho_y}"
            lower, ratios, worst = [], [], 0.0
            for a in ANGLES:
                x, y = _pair(rho, rho_y, a)
                got = _log_mses(x, y)
                reg, rev = got["1-theta/pi"], got["theta/pi"]
                if rev < reg:
                    lower.append(a)
                    ratios.append(math.exp(rev - reg))
                else:
                    worst = max(worst, math.exp(rev - reg))
            band = (f"{min(lower):.2f} to {max(lower):.2f} ({len(lower)} of {ANGLES.size})"
                    if lower else "none")
            there = f"{min(ratios):.3f} to {max(ratios):.3f}" if ratios else "-"
            print(f"| {label} | {band} | {there} | {worst:.3g} |")


def _draw_terms(x, y, m, draws):
    """Per draw: (trig estimate, positive estimate, p-hat) from W with its angular rows."""
    return np.array([hybrid.components(x, y, draw_kind_projections(m, D, "hybrid", seed=t))
                     for t in range(draws)])


def monte_carlo_table(draws):
    print("| angle | placement | MSE (Monte Carlo) | se | exact | z |")
    print("|---|---|---:|---:|---:|---:|")
    for a in (0.3, 1.2, 2.0, 2.8):
        x, y = _pair(1.0, 1.0, a)
        terms = _draw_terms(x, y, M, draws)
        sm = math.exp(float(x @ y))
        exact = _log_mses(x, y)
        for place, (wa, wb) in (("1-theta/pi", (1 - terms[:, 2], terms[:, 2])),
                                ("theta/pi", (terms[:, 2], 1 - terms[:, 2]))):
            sq = (wa * terms[:, 0] + wb * terms[:, 1] - sm) ** 2
            mse, se = float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(draws))
            ex = math.exp(exact[place])
            print(f"| {a} | {place} | {mse:.4g} | {se:.2g} | {ex:.4g} | {(mse - ex) / se:+.2f} |")
    x, y = _pair(1.2, 0.5, 1.0)
    terms = _draw_terms(x, y, M, draws)
    sm = math.exp(float(x @ y))
    prod = (terms[:, 0] - sm) * (terms[:, 1] - sm)
    cov = sm * sm * (math.cos(float(x @ x - y @ y)) - 1.0) / M
    print(f"\nCov(trig, positive) at |x| = 1.2, |y| = 0.5, angle 1, m = {M}: "
          f"{prod.mean():.4g} +- {prod.std(ddof=1) / math.sqrt(draws):.2g} (Monte Carlo), "
          f"{cov:.4g} (closed form)")


def worst_case_table():
    r = hybrid.FEATURES_PER_PROJECTION * M
    print(f"| norms of x and y | trig m = {M} | positive m = {M} | hybrid m = {M} (r = {r}) | "
          f"trig m = {r // 2} (r = {r}) | positive m = {r} (r = {r}) |")
    print("|---|---:|---:|---:|---:|---:|")
    for rho in (0.5, 1.0, 1.5, 2.0):
        worst = {}
        for a in ANGLES:
            x, y = _pair(rho, rho, a)
            log_k2 = 2.0 * float(x @ y)
            for name, kind, m in (("t", "trig", M), ("p", "positive", M), ("h", "hybrid", M),
                                  ("T", "trig", r // 2), ("P", "positive", r)):
                rel = math.exp(math.log(estimator(kind, m=m, d=D).mse(x, y)) - log_k2)
                worst[name] = max(worst.get(name, 0.0), rel)
        print(f"| {rho} | " + " | ".join(f"{worst[k]:.3g}" for k in "tphTP") + " |")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=4000)
    args = parser.parse_args(argv)
    start = time.perf_counter()
    print("## 1. Placement, exact\n")
    placement_table()
    print(f"\n## 2. Placement, Monte Carlo ({args.draws} draws)\n")
    monte_carlo_table(args.draws)
    print("\n## 3. Worst relative MSE over angles\n")
    worst_case_table()
    print(f"\n({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
