"""The front door's cost: a frozen estimator against the functions, and what ``import rfkernels`` loads.

Three ratios, each against a baseline measured in the same run:

- ``est.mse(x, y)`` (validated once, when built) against
  ``theory.exact_mse(x, y, m, kind, ...)`` (validated on every call), for one
  pair and for a batch of pairs;
- ``est.draw(seed).features(X)`` against
  ``feature_map(X, draw_projections(...), kind)``;
- a cold ``import rfkernels`` against ``import rfkernels`` followed by the
  first use of ``rfkernels.RandomFeatures`` (which imports scikit-learn)
  and of ``rfkernels.estimator`` (which imports the analysis layer), each in a
  fresh interpreter.

Usage (from the repository root, package installed)::

    python benchmarks/bench_front.py
"""

import subprocess
import sys
import time

import numpy as np
from _timing import best_of

import rfkernels
from rfkernels import draw_projections, feature_map, theory


def per_call(fn, calls):
    return best_of(lambda: [fn() for _ in range(calls)]) / calls


def interpreter(code, repeat=5):
    """Median wall seconds of ``python -c code`` in a fresh interpreter."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main():
    x, y = theory.pair(64, 0.5, 0.5, 1.0)
    est = rfkernels.estimator("positive", ensemble="orthogonal", m=64, d=64)
    t_fun = per_call(lambda: theory.exact_mse(x, y, 64, "positive", ensemble="orthogonal"), 2000)
    t_est = per_call(lambda: est.mse(x, y), 2000)
    print(f"one pair:   exact_mse {t_fun * 1e6:8.1f} us   est.mse {t_est * 1e6:8.1f} us   "
          f"ratio {t_est / t_fun:.2f}")
    X, Y = theory.pair(64, 0.5, 0.5, np.linspace(0, np.pi, 100_000))
    t_fun = per_call(lambda: theory.exact_mse(X, Y, 64, "positive", ensemble="orthogonal"), 5)
    t_est = per_call(lambda: est.mse(X, Y), 5)
    print(f"1e5 pairs:  exact_mse {t_fun * 1e3:8.1f} ms   est.mse {t_est * 1e3:8.1f} ms   "
          f"ratio {t_est / t_fun:.2f}")
    rows = np.random.default_rng(0).normal(scale=0.2, size=(4096, 64))
    t_fun = per_call(lambda: feature_map(rows, draw_projections(64, 64, ensemble="orthogonal",
                                                                seed=0), "positive"), 20)
    t_est = per_call(lambda: est.draw(0).features(rows), 20)
    print(f"features:   feature_map {t_fun * 1e3:6.2f} ms   est.draw().features {t_est * 1e3:6.2f} ms   "
          f"ratio {t_est / t_fun:.2f}")
    t_import = interpreter("import rfkernels")
    t_sklearn = interpreter("import rfkernels; rfkernels.RandomFeatures")
    t_front = interpreter("import rfkernels; rfkernels.estimator")
    print(f"import rfkernels {t_import:.2f} s; + RandomFeatures {t_sklearn:.2f} s "
          f"(ratio {t_sklearn / t_import:.2f}); + estimator {t_front:.2f} s "
          f"(ratio {t_front / t_import:.2f})")


if __name__ == "__main__":
    main()
