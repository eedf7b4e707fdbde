"""Causal diagnose against the bidirectional diagnose of the same heads (issue 40's speed item).

``python benchmarks/bench_causal.py [--L 4096] [--d 64] [--heads 8] [--repeat 1]`` times
:func:`rfkernels.analysis.diagnose` on the synthetic heads of
:func:`rfkernels.analysis.synthetic_qkv` (L = 4096, d = 64, 8 heads by default),
default grid, on 2 worker processes, bidirectional then causal, each in this
process after one warm-up of the kernels on a small run; prints the seconds
and the ratio (the issue's limit: causal at most 1.5 times bidirectional).
"""

from __future__ import annotations

import argparse
import time

from rfkernels.analysis import diagnose, synthetic_qkv


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--L", type=int, default=4096)
    parser.add_argument("--d", type=int, default=64)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    q, k, v = synthetic_qkv(L=args.L, d=args.d, heads=args.heads)
    small = synthetic_qkv(L=64, d=args.d, heads=1)
    for causal in (False, True):  # warm-up: every kernel compiled, every module imported
        diagnose(*small, m=[4], draws=2, causal=causal, workers=1)
    best = {}
    for causal in (False, True):
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            diagnose(q, k, v, causal=causal, workers=args.workers)
            times.append(time.perf_counter() - t0)
        best[causal] = min(times)
        print(f"{'causal' if causal else 'bidirectional':>13}: {best[causal]:.1f} s "
              f"(best of {args.repeat})", flush=True)
    print(f"causal / bidirectional: {best[True] / best[False]:.2f} "
          f"(L = {args.L}, d = {args.d}, {args.heads} heads, {args.workers} workers)")


if __name__ == "__main__":
    main()
