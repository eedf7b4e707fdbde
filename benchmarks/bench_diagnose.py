"""``rfkernels diagnose`` on 8 heads of L = 4096, d = 64 with its defaults (target: under 60 s on 2 cores).

The input is :func:`rfkernels.analysis.synthetic_qkv` at that size
(d_model = 256, seed 7; gains 0.25, 0.5, 1, 2 twice over), the model of
``docs/diagnose.rst``. Timed, best of
``--repeat`` (1) runs:

- the command, end to end, in a fresh subprocess (imports, loading the
  .npz, the diagnosis with its defaults: m = 16, 64, 256, every kind, iid
  and orthogonal, 8 draws of 512 query rows, 20,000 pairs and 8
  first-order rows per head, workers = the usable CPUs; the report, JSON,
  CSVs and figure);
- the API's parts in this process: the whole call, the call without the
  first-order theory (``first_order_queries=0``), and the baseline, exact
  softmax attention of every head (:func:`rfkernels.softmax_attention`),
  so the ratios compare costs on the same machine state.

Prints a Markdown table for docs/performance.md::

    python benchmarks/bench_diagnose.py

With ``--sincos``, only the sine and cosine of the trigonometric features
(:mod:`rfkernels.numerics.sincos`) on a (512, 256) matrix of N(0, 20^2)
projections, in ns per projection for both: NumPy's two calls, a Numba loop
over the C library's ``sin`` and ``cos``, and ``sin_cos``::

    python benchmarks/bench_diagnose.py --sincos --repeat 5
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _timing import best_of

from rfkernels import softmax_attention
from rfkernels.analysis import diagnose, synthetic_qkv


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--sincos", action="store_true", help="time the sine and cosine only")
    args = parser.parse_args()
    if args.sincos:
        return sincos(args.repeat)
    q, k, v = synthetic_qkv(L=4096, d=64, heads=8, d_model=256)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "model.npz")
        np.savez(path, q=q, k=k, v=v)

        def command():
            out = os.path.join(tmp, "out")
            subprocess.run([sys.executable, "-m", "rfkernels", "diagnose", path, "--out", out],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        t_cmd = best_of(command, args.repeat)
    scale = q.shape[-1] ** -0.25
    t_exact = best_of(lambda: [softmax_attention(scale * a, scale * b, c) for a, b, c in zip(q, k, v)],
                      args.repeat)
    t_api = best_of(lambda: diagnose(q, k, v), args.repeat)
    t_no_fo = best_of(lambda: diagnose(q, k, v, first_order_queries=0), args.repeat)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"8 heads, L = 4096, d = d_v = 64, defaults; {cpus} CPU(s), "
          f"{time.strftime('%Y-%m-%d')}, best of {args.repeat}\n")
    print("| what | seconds | / exact attention |")
    print("|---|---|---|")
    for name, t in (("`rfkernels diagnose` (command, end to end)", t_cmd),
                    ("`diagnose(Q, K, V)` (API)", t_api),
                    ("`diagnose(..., first_order_queries=0)`", t_no_fo),
                    ("exact softmax attention, 8 heads (baseline)", t_exact)):
        print(f"| {name} | {t:.1f} | {t / t_exact:.0f} |")


def _calls(fn, n):
    for _ in range(n):  # each result freed before the next call, as in attention
        fn()


def sincos(repeat):
    import math

    import numba

    from rfkernels.numerics.sincos import sin_cos

    @numba.njit(nogil=True)
    def c_library(p, out):
        n, m = p.shape
        for i in range(n):
            for j in range(m):
                out[i, j] = math.sin(p[i, j])
                out[i, m + j] = math.cos(p[i, j])

    p = np.random.default_rng(0).standard_normal((512, 256)) * 20
    out = np.empty((512, 512))
    c_library(p, out)
    sin_cos(p)
    print(f"sine and cosine of {p.size} projections, ns per projection, best of {repeat} x 20 calls\n")
    print("| how | ns |")
    print("|---|---|")
    for name, fn in (("NumPy: np.sin, np.cos, concatenate",
                      lambda: np.concatenate([np.sin(p), np.cos(p)], axis=1)),
                     ("Numba loop over the C library's sin, cos", lambda: c_library(p, out)),
                     ("rfkernels.numerics.sincos.sin_cos", lambda: sin_cos(p))):
        t = best_of(lambda: _calls(fn, 20), repeat)
        print(f"| {name} | {t / 20 / p.size * 1e9:.1f} |")


if __name__ == "__main__":
    main()
