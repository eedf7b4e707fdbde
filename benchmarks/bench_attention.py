"""Time and peak memory of FAVOR attention against the exact blocked reference.

For each sequence length L (default 1024 ... 65536) at d = d_v = 64 and
m = 256 orthogonal projections (positive features unless ``--kind``), this
measures, in the same run:

- ``exact``: :func:`rfkernels.attention.softmax_attention`, bidirectional
  (blocks of rows, stable softmax; O(L²·d) time, O(L·block) memory);
- ``favor``: :func:`rfkernels.attention.favor_attention`, bidirectional;
- ``favor causal``: the same with prefix sums.

Times are the best of ``--repeat`` runs (one run where the exact attention
takes over 2 s); the speed-up is exact / favor from the same run. Peak
memory is the largest traced allocation (``tracemalloc``, which sees every
NumPy array) during one extra call, inputs excluded, output included.
No number is asserted: the targets (FAVOR >= 5x faster than exact at
L = 16384; FAVOR memory linear in L) are read off the table, which is
printed as Markdown for ``docs/performance.md``.

Run ``python benchmarks/bench_attention.py`` from a checkout with the
package installed (``pip install -e .``), or with ``PYTHONPATH=.``;
``--help`` lists the options.
"""

from __future__ import annotations

import argparse
import os
import platform
import time
import tracemalloc

import numpy as np
from _timing import best_of, int_list

from rfkernels.attention import favor_attention, softmax_attention
from rfkernels.projections import draw_projections



def _peak_mib(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--L", type=int_list, default="1024,2048,4096,8192,16384,32768,65536",
                   help="comma-separated sequence lengths")
    p.add_argument("--d", type=int, default=64, help="dimension of queries, keys and values")
    p.add_argument("--m", type=int, default=256, help="number of projections")
    p.add_argument("--kind", default="positive", help="feature map")
    p.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best kept)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, NumPy {np.__version__}")
    print(f"d = d_v = {args.d}, m = {args.m} orthogonal projections, kind = {args.kind}; "
          f"inputs N(0, 1/d) rows for Q, K (unit norm), N(0, 1) for V\n")
    print("| L | exact (s) | favor (s) | favor causal (s) | speed-up exact/favor "
          "| exact peak (MiB) | favor peak (MiB) | favor causal peak (MiB) | output (MiB) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")

    rng = np.random.default_rng(args.seed)
    W = draw_projections(args.m, args.d, ensemble="orthogonal", seed=args.seed)
    for L in args.L:
        s = 1.0 / np.sqrt(args.d)
        Q = s * rng.standard_normal((L, args.d))
        K = s * rng.standard_normal((L, args.d))
        V = rng.standard_normal((L, args.d))

        def exact():
            return softmax_attention(Q, K, V)

        def favor():
            return favor_attention(Q, K, V, W, args.kind)

        def favor_causal():
            return favor_attention(Q, K, V, W, args.kind, causal=True)

        t0 = time.perf_counter()
        exact()  # warm-up, and decides how many repeats are affordable
        once = time.perf_counter() - t0
        repeat = args.repeat if once < 2.0 else 1
        t_exact = min(once, best_of(exact, repeat - 1)) if repeat > 1 else once
        favor()
        favor_causal()
        t_favor = best_of(favor, args.repeat)
        t_causal = best_of(favor_causal, args.repeat)
        m_exact = _peak_mib(exact)
        m_favor = _peak_mib(favor)
        m_causal = _peak_mib(favor_causal)
        out_mib = L * args.d * 8 / 2**20
        print(f"| {L} | {t_exact:.3f} | {t_favor:.4f} | {t_causal:.4f} | {t_exact / t_favor:.0f}x "
              f"| {m_exact:.1f} | {m_favor:.1f} | {m_causal:.1f} | {out_mib:.1f} |", flush=True)


if __name__ == "__main__":
    main()
