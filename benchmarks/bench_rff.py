"""Transform throughput of RandomFourierFeatures against scikit-learn's RBFSampler (no number asserted).

For each output dimension r (default 256, 1024, 4096) at n = 10000 rows of
d = 64 (N(0, 1/d) entries, gamma = 1/d), this times ``transform`` of, in
the same run:

- ``RBFSampler``: ``sklearn.kernel_approximation.RBFSampler(gamma, n_components=r)``
  (``X @ W + b``, cos, scale; float64 input);
- ``offset iid``: ``RandomFourierFeatures(gamma, r)``, RBFSampler's law;
- ``offset orthogonal``, ``paired iid``, ``paired orthogonal``: the other
  feature map (r/2 frequencies, [sin | cos]) and orthogonal frequencies.

All are fitted once before timing (fitting is not timed). Each time is the
best of ``--repeat`` runs; the ratio is the time over RBFSampler's from the
same run (above 1: slower than RBFSampler). Prints a Markdown table for
``docs/performance.md``, with the machine's CPU count and library versions.

Run from the repository root with the package installed (``pip install -e .``)::

    python benchmarks/bench_rff.py                 # r = 256, 1024, 4096 (~20 s on 2 cores)
    python benchmarks/bench_rff.py --r 256 --n 2000
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from _timing import best_of, int_list

from rfkernels import RandomFourierFeatures

#: (label, kind, ensemble) of the rfkernels rows of the table.
CONFIGS = [("offset iid", "offset", "iid"), ("offset orthogonal", "offset", "orthogonal"),
           ("paired iid", "trig", "iid"), ("paired orthogonal", "trig", "orthogonal")]


def main(argv=None):
    from sklearn import __version__ as sklearn_version
    from sklearn.kernel_approximation import RBFSampler

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--r", type=int_list, default="256,1024,4096",
                   help="comma-separated output dimensions")
    p.add_argument("--n", type=int, default=10000, help="rows transformed")
    p.add_argument("--d", type=int, default=64, help="input dimension")
    p.add_argument("--repeat", type=int, default=5, help="timed runs per measurement (best kept)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, NumPy {np.__version__}, scikit-learn {sklearn_version}")
    gamma = 1.0 / args.d
    print(f"n = {args.n} rows, d = {args.d}, gamma = 1/d; transform only, best of "
          f"{args.repeat}; ratio = time / RBFSampler's time in the same run\n")
    print("| r | estimator | time (ms) | rows/s | ratio to RBFSampler |")
    print("|---:|---|---:|---:|---:|")

    X = np.random.default_rng(args.seed).normal(scale=1.0 / np.sqrt(args.d), size=(args.n, args.d))
    for r in args.r:
        sampler = RBFSampler(gamma=gamma, n_components=r, random_state=args.seed).fit(X)
        sampler.transform(X)  # warm-up
        base = best_of(lambda: sampler.transform(X), args.repeat)
        print(f"| {r} | RBFSampler | {1e3 * base:.1f} | {args.n / base:.3g} | 1.00 |", flush=True)
        for label, kind, ensemble in CONFIGS:
            rff = RandomFourierFeatures(gamma, r, kind=kind, ensemble=ensemble,
                                        random_state=args.seed).fit(X)
            rff.transform(X)
            t = best_of(lambda: rff.transform(X), args.repeat)
            print(f"| {r} | {label} | {1e3 * t:.1f} | {args.n / t:.3g} | {t / base:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
