"""The exact Gram error on real data: expected_mse, gram_error and the real_data figure's data.

On the 1,797 standardised digits (d = 64, all 1.6e6 distinct pairs, the
median-heuristic gamma of :mod:`rfkernels.analysis.real_data`), this times
in one run, best of ``--repeat``:

- ``expected_mse`` at r = 256 for offset iid (``RBFSampler``'s law: the
  baseline of the ratio column), paired iid, paired orthogonal, paired
  simplex (its entries interpolated in t) and positive orthogonal (each
  pair's own geometry);
- the simplex quadrature itself on ``--direct-pairs`` random pairs of rows,
  scaled to all pairs: what computing every simplex entry directly would
  cost (the interpolation avoids it);
- ``gram_error`` at every even r up to 1024 (two exact evaluations);
- the ``real_data`` figure's data (``compute``), default and ``--quick``.

The issue's target: ``expected_mse`` on the digits under 2 s for iid and
orthogonal frequencies. A measurement, nothing asserted. Run from the
repository root with the package installed::

    python benchmarks/bench_real_data.py            # about 1 min on 2 cores
    python benchmarks/bench_real_data.py --no-figure --repeat 1
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np
from _timing import best_of

from rfkernels import RandomFourierFeatures

#: (label, kind, ensemble) timed by expected_mse, the first being the baseline.
CONFIGS = [("offset iid (RBFSampler's law)", "offset", "iid"), ("paired iid", "trig", "iid"),
           ("paired orthogonal", "trig", "orthogonal"),
           ("paired simplex (interpolated)", "trig", "simplex"),
           ("positive orthogonal", "positive", "orthogonal")]


def _digits():
    from sklearn.datasets import load_digits

    from rfkernels.analysis.real_data import median_gamma  # the figure's protocol, on all rows

    x = load_digits().data.astype(np.float64)
    sd = x.std(axis=0)
    sd[sd == 0] = 1.0
    x = (x - x.mean(axis=0)) / sd
    return x, median_gamma(x)[0]


def _direct_simplex(x, gamma, pairs, repeat):
    """Seconds per pair of the simplex quadrature (the theory called directly on ``pairs`` pairs)."""
    from rfkernels.estimators import estimator
    from rfkernels.theory import Geometry, exact_mse

    rng = np.random.default_rng(0)
    i, j = rng.integers(0, x.shape[0], (2, pairs))
    t = np.sum((x[i] - x[j]) ** 2, axis=1)
    geom = Geometry(np.full(pairs, float(x.shape[1])), t / 4.0, np.zeros(pairs), t)
    est = estimator("trig", ensemble="simplex", kernel="gaussian", gamma=gamma, batch=True)
    return best_of(lambda: exact_mse(geom, None, 128, est, log=True), repeat) / pairs


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--repeat", type=int, default=3, help="timed runs per measurement (best kept)")
    p.add_argument("--direct-pairs", type=int, default=20000,
                   help="pairs of the direct simplex timing (scaled to all pairs)")
    p.add_argument("--no-figure", action="store_true", help="skip timing the figure's data")
    args = p.parse_args(argv)

    x, gamma = _digits()
    n = x.shape[0]
    pairs = n * (n + 1) / 2
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, NumPy {np.__version__}")
    print(f"digits: {n} x {x.shape[1]}, {pairs:.3g} pairs i <= j, gamma = {gamma:.5g} "
          f"(median heuristic), r = 256, best of {args.repeat}\n")
    print("| expected_mse | time (s) | ratio to offset iid | relative Frobenius |")
    print("|---|---:|---:|---:|")
    base = None
    for label, kind, ensemble in CONFIGS:
        rff = RandomFourierFeatures(gamma=gamma, n_components=256, kind=kind,
                                    ensemble=ensemble, random_state=0).fit(x)
        err = rff.expected_mse(x).relative_frobenius
        t = best_of(lambda: rff.expected_mse(x), args.repeat)
        base = t if base is None else base
        print(f"| {label} | {t:.2f} | {t / base:.2f} | {err:.4g} |", flush=True)
    per_pair = _direct_simplex(x, gamma, args.direct_pairs, 1)
    print(f"| paired simplex, every entry direct ({args.direct_pairs} pairs, scaled) | "
          f"{per_pair * pairs:.1f} | {per_pair * pairs / base:.1f} | |")

    rff = RandomFourierFeatures(gamma=gamma, kind="trig", ensemble="orthogonal")
    r = np.arange(2, 1025, 2)
    t = best_of(lambda: rff.gram_error(x, r), args.repeat)
    print(f"\ngram_error, paired orthogonal, {r.size} output dimensions: {t:.2f} s")

    if not args.no_figure:
        from rfkernels.figures import real_data

        for quick in (False, True):
            real_data.compute(quick, 0)  # warm: data sets loaded, imports done
            t0 = time.perf_counter()
            real_data.compute(quick, 0)
            print(f"real_data figure data ({'--quick' if quick else 'default'}): "
                  f"{time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
