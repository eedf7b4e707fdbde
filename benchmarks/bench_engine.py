"""Per-trial time of the reduced engine (``engine.estimate_chunks``) for a few estimator paths.

Times whatever ``rfkernels`` the interpreter imports, so two commits can be
compared from their own environments (docs/performance.md, "The estimator
registry")::

    python benchmarks/bench_engine.py

d = m = 64; Numba with 1 and 2 threads (65536 trials) and NumPy (8192);
best of 5 after one warm-up run (which compiles). No numbers asserted.
"""
import sys
import time

import numba
import numpy as np

from rfkernels import engine

KEY = (1, 2)
CASES = [("positive", "orthogonal", "chi", None, False), ("oprf", "iid", "chi", -0.1, False),
         ("hyperbolic", "simplex", "fixed", None, True)]
for kind, ens, norms, A, tilted in CASES:
    tilt = engine.tilt_for(kind, ens, norms, 0.7, 64, A=A) if tilted else None
    for backend, threads, n in (("numba", 1, 1 << 16), ("numba", 2, 1 << 16), ("numpy", 1, 1 << 13)):
        numba.set_num_threads(threads)

        def run():
            for c in engine.estimate_chunks(KEY, 0.7, 64, 64, kind, ensemble=ens, norms=norms,
                                             trials=n, backend=backend, A=A, tilt=tilt):
                pass

        run()
        best = min((lambda t0: (run(), time.perf_counter() - t0)[1])(time.perf_counter())
                   for _ in range(5))
        print(f"{kind}-{ens}-{norms}{'-tilted' if tilted else ''} {backend}-{threads}: "
              f"{best / n * 1e9:.0f} ns/trial", flush=True)
