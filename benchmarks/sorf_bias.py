"""Relative bias of SORF projections (positive features, chi norms, m = d = D) against d.

The positive estimator with m = d rows of one SORF block is
``Λ · mean_i exp(w_i·u)``, so its relative bias is ``E exp(w·u − |u|²/2) − 1``
averaged over the rows of a block. For d a power of two (d = D), the block
is ``sqrt(d) · H D1 H D2 H D3`` (H the normalised Hadamard matrix, D_k random
±1 diagonals), so all d projections ``(M u)_i`` of one block come from three
fast Walsh-Hadamard transforms of u; chi norms rescale row i (norm sqrt(d))
to an independent chi(d) length R_i: ``w_i·u = R_i (M u)_i / sqrt(d)``.
Blocks are independent, so the standard error is that of the block means.

This vectorised sampler is the law of :func:`rfkernels.draw_projections`
with ``ensemble="sorf"`` (checked against ``bias_audit`` at small d with
``--check``); it exists because the literal audit draws about 1e5 rows/s,
too slow to resolve biases below 1e-4.

    python benchmarks/sorf_bias.py [--seconds S] [--check]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from rfkernels.projections import fwht


def block_means(u, blocks, rng):
    """Per-block means of exp(w·u − |u|²/2) over the d rows of each of ``blocks`` SORF blocks."""
    d = u.size
    signs = rng.integers(0, 2, size=(3, blocks, d)) * 2.0 - 1.0
    v = np.broadcast_to(u, (blocks, d)) * signs[2]
    v = fwht(fwht(fwht(v) * signs[1]) * signs[0]) * math.sqrt(d)  # M u, M = sqrt(d) H D1 H D2 H D3
    radii = np.sqrt(rng.chisquare(d, size=(blocks, d)))
    proj = radii * v / math.sqrt(d)
    return np.exp(proj - 0.5 * float(u @ u)).mean(axis=1) - 1.0


def measure(d, direction, seconds, rng, batch=1 << 14):
    u = np.ones(d) / math.sqrt(d) if direction == "ones" else np.eye(d)[0]
    means, t0 = [], time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        means.append(block_means(u, batch, rng))
    b = np.concatenate(means)
    return float(b.mean()), float(b.std(ddof=1) / math.sqrt(b.size)), float(b.std(ddof=1)), b.size


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=20.0, help="per d and direction")
    p.add_argument("--check", action="store_true", help="compare with bias_audit at d = 4, 8")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.check:
        from rfkernels.analysis.comparison import bias_audit

        for d in (4, 8):
            dirs = np.stack([np.eye(d)[0], np.ones(d) / math.sqrt(d)])
            audit = bias_audit(d, d, directions=dirs, trials=200_000, seed=1, ensembles="sorf")
            for row, name in zip(audit, ("e_1", "ones")):
                mean, se, _, _ = measure(d, name, args.seconds, rng)
                z = (mean - row["relative_bias"]) / math.hypot(se, row["stderr"])
                print(f"check d={d} {name}: fast {mean:+.3e} ± {se:.1e}, bias_audit "
                      f"{row['relative_bias']:+.3e} ± {row['stderr']:.1e}, z = {z:+.2f}")
    print("| d | direction | blocks | relative bias | se | MC error of 1e6 trials | |bias| / MC error |")
    print("|---:|---|---:|---:|---:|---:|---:|")
    for d in (4, 8, 16, 32, 64, 128, 256):
        for name in ("e_1", "ones"):
            mean, se, sd, n = measure(d, name, args.seconds, rng)
            mc = sd / 1000.0  # standard error of a 1e6-trial mean estimate (one block per trial)
            print(f"| {d} | {name} | {n} | {mean:+.2e} | {se:.1e} | {mc:.1e} | {abs(mean) / mc:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
