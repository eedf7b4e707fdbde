"""Where randomized QMC frequencies help: MSE over scrambles against iid and orthogonal (issue 41).

``python benchmarks/qmc_regimes.py [--draws 400]`` prints two Markdown tables:

1. the ratio of the MSE with ensemble ``"qmc"`` (and ``"orthogonal"``) to the
   MSE with ``"iid"``, by dimension d (2 to 512) and kind, at m = 64 projections, on one
   pair turned by a fixed Haar rotation (the Sobol set is not rotation
   invariant: the pair of :func:`rfkernels.theory.pair` lies in the first two
   coordinates, where the set is a 2-D net; that axis-aligned pair's ratio is
   the last column), with ``|x| = |y| = 0.6`` at angle 1 (so ``|x - y|^2 = 0.33``,
   ``|x + y|^2 = 1.11``), and on pairs twice and about four times longer
   (``|x| = |y| = 1.2``, ``2.5``: ``|x - y|^2`` = 1.32, 5.75);
2. the fitted slope of log MSE against log m (m = 16 to 1024) for d = 4 and
   d = 32, trig and positive, each ensemble (iid is -1 in theory).

Each MSE is the mean over ``--draws`` independent scrambles (or draws) of
the squared error of the literal estimate, with its standard error; a ratio
is printed as "unresolved" where either side's standard error is above a
third of its value.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from rfkernels import draw_projections, estimate, theory
from rfkernels.projections import orthogonal_blocks

ENSEMBLES = ("iid", "orthogonal", "qmc")


def mse(x, y, m, kind, ensemble, draws):
    exact = math.exp(float(x @ y))
    err = np.array([estimate(x, y, draw_projections(m, x.shape[0], ensemble=ensemble, seed=t), kind)
                    - exact for t in range(draws)])
    sq = err * err
    return float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(draws))


def ratio_text(a, b):
    (ma, sa), (mb, sb) = a, b
    if sa > ma / 3 or sb > mb / 3:
        return "unresolved"
    r = ma / mb
    return f"{r:.3g} ± {r * math.hypot(sa / ma, sb / mb):.2g}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=400)
    args = parser.parse_args()
    started = time.perf_counter()
    print(f"MSE ratio to iid at m = 64 ({args.draws} scrambles or draws each)\n")
    print("| d | norm | kind | orthogonal / iid | qmc / iid | qmc / iid, axis-aligned pair |")
    print("|---|---|---|---|---|---|")
    for d in (2, 8, 32, 128, 512):
        turn = orthogonal_blocks(1, d, np.random.default_rng(d))[0]
        for norm in (0.6, 1.2, 2.5):
            x0, y0 = theory.pair(d, norm, norm, 1.0)
            x, y = turn @ x0, turn @ y0
            for kind in ("trig", "positive"):
                got = {e: mse(x, y, 64, kind, e, args.draws) for e in ENSEMBLES}
                aligned = mse(x0, y0, 64, kind, "qmc", args.draws), mse(x0, y0, 64, kind, "iid",
                                                                        args.draws)
                print(f"| {d} | {norm} | {kind} | {ratio_text(got['orthogonal'], got['iid'])} | "
                      f"{ratio_text(got['qmc'], got['iid'])} | {ratio_text(*aligned)} |", flush=True)
    print("\nFitted slope of log MSE against log m (m = 16, 64, 256, 1024; |x| = |y| = 0.6, the "
          "turned pair)\n")
    print("| d | kind | iid | orthogonal | qmc |")
    print("|---|---|---|---|---|")
    ms = np.array([16, 64, 256, 1024])
    for d in (4, 32):
        turn = orthogonal_blocks(1, d, np.random.default_rng(d))[0]
        x, y = (turn @ v for v in theory.pair(d, 0.6, 0.6, 1.0))
        for kind in ("trig", "positive"):
            slopes = []
            for e in ENSEMBLES:
                values = [mse(x, y, int(m), kind, e, args.draws // 2)[0] for m in ms]
                slopes.append(float(np.polyfit(np.log(ms), np.log(values), 1)[0]))
            print(f"| {d} | {kind} | " + " | ".join(f"{s:.2f}" for s in slopes) + " |", flush=True)
    print(f"\n({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
