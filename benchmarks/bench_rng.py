"""Throughput of the counter-based generator (rfkernels.rng), no numbers asserted.

Prints variates per second for

- ``normal`` vectorised with NumPy,
- a Numba ``prange`` loop calling ``normal_at`` with 1 and 2 threads,
- ``chi_square(dof=64)`` vectorised and in a Numba ``prange`` loop.

Run ``python benchmarks/bench_rng.py [n]`` (default n = 2**22 variates) with
the package installed (``pip install -e .``) or ``PYTHONPATH=.`` from the
repository root.
The first Numba call of each kernel compiles it and is not timed.
"""

from __future__ import annotations

import sys
import time

import numba
import numpy as np

from rfkernels import rng
from rfkernels.engine.rng_numba import chi_square_at, normal_at


@numba.njit(parallel=True)
def _normals_prange(k0, k1, trial, n, out):
    for i in numba.prange(n):
        out[i] = normal_at(k0, k1, trial, np.int64(i), 0)


@numba.njit(parallel=True)
def _chi_square_prange(k0, k1, trial, n, dof, out):
    for i in numba.prange(n):
        out[i] = chi_square_at(k0, k1, trial, np.int64(i), 2, dof)


def _best_rate(fn, n, repeat=3):
    best = np.inf
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return n / best


def main(n=1 << 22):
    key = rng.key_from_seed(0)
    k0, k1 = np.uint32(key[0]), np.uint32(key[1])
    trial = np.uint64(3)
    slots = np.arange(n, dtype=np.uint64)
    out = np.empty(n)

    print(f"n = {n} variates per call, best of 3; numba threads available: {numba.config.NUMBA_NUM_THREADS}")
    rate = _best_rate(lambda: rng.normal(key, trial, slots), n)
    print(f"normal      numpy (vectorised) : {rate / 1e6:8.2f} M/s")

    _normals_prange(k0, k1, trial, 16, out)  # compile
    for threads in (1, 2):
        if threads > numba.config.NUMBA_NUM_THREADS:
            continue
        numba.set_num_threads(threads)
        rate = _best_rate(lambda: _normals_prange(k0, k1, trial, n, out), n)
        print(f"normal      numba prange, {threads} thr : {rate / 1e6:8.2f} M/s")
    np.testing.assert_allclose(out, rng.normal(key, trial, slots), rtol=1e-12)  # same numbers

    rate = _best_rate(lambda: rng.chi_square(key, trial, slots, 64.0), n)
    print(f"chi2(64)    numpy (vectorised) : {rate / 1e6:8.2f} M/s")
    _chi_square_prange(k0, k1, trial, 16, 64.0, out)  # compile
    for threads in (1, 2):
        if threads > numba.config.NUMBA_NUM_THREADS:
            continue
        numba.set_num_threads(threads)
        rate = _best_rate(lambda: _chi_square_prange(k0, k1, trial, n, 64.0, out), n)
        print(f"chi2(64)    numba prange, {threads} thr : {rate / 1e6:8.2f} M/s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 22)
