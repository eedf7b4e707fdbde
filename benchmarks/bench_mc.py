"""Time per Monte Carlo trial: the reference way, the RNG floor, and our backends (no numbers asserted).

For each (d, m) (positive features, orthogonal projections, chi norms) it
times, in one run and on the same machine state:

1. ``literal-ref``: literal NumPy as the reference Performer code does it,
   batched: Gaussian (d, d) blocks -> batched QR -> rows scaled by chi(d)
   norms -> project x and y -> exp -> mean;
2. ``rng-floor``: NumPy merely drawing the variates an exact trial needs
   (m normals, m chi(d), one chi-square), batched: the floor a NumPy user
   hits however clever the rest is;
3. ``monte_carlo_mse(..., method="reduced")`` on our ``numpy`` backend, on
   ``numba`` with 1 and 2 threads, and on ``cupy`` when a GPU is present
   (the whole run: sampling, estimates and the streaming statistics).

Each timing is the best of ``--repeat`` runs; ratios compare timings of the
same run. Prints a Markdown table for docs/performance.md.

Run from a checkout with the package installed (``pip install -e .``)::

    python benchmarks/bench_mc.py            # full table (~30 s on 2 cores)
    python benchmarks/bench_mc.py --quick    # d = m = 64 only

It also times a cold ``rfkernels mse --trials 1e5`` (a subprocess with an
empty ``NUMBA_CACHE_DIR``: the first-use compile), and with CuPy and
``numba-cuda`` present the CUDA kernel alone (``gpu-kernel``).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import subprocess
import sys
import tempfile
import time

import numba
import numpy as np
from _timing import best_of
from rfkernels.analysis import monte_carlo_mse

from rfkernels import theory
from rfkernels.backends import cupy_available

CONFIGS = [(64, 64), (16, 16), (64, 16), (16, 64), (256, 256)]



def literal_reference(x, y, m, d, trials, rng, batch=256):
    """Reference literal Monte Carlo: QR of Gaussian blocks, chi norms, project, exp, mean."""
    nb = -(-m // d)
    hx, hy = 0.5 * x @ x, 0.5 * y @ y
    out = np.empty(trials)
    for start in range(0, trials, batch):
        n = min(batch, trials - start)
        q, _ = np.linalg.qr(rng.standard_normal((n, nb, d, d)))
        w = np.swapaxes(q, -1, -2).reshape(n, nb * d, d)[:, :m]
        w = w * np.sqrt(rng.chisquare(d, size=(n, m)))[:, :, None]
        out[start : start + n] = np.mean(np.exp(w @ x - hx) * np.exp(w @ y - hy), axis=1)
    return out


def rng_floor(m, d, trials, rng, batch=1 << 14):
    """The variates an exact reduced trial needs, drawn with NumPy's Generator."""
    for start in range(0, trials, batch):
        n = min(batch, trials - start)
        rng.standard_normal((n, m))
        np.sqrt(rng.chisquare(d, size=(n, m)))
        rng.chisquare(d, size=n)


def time_config(d, m, repeat, scale):
    x, y = theory.pair(d, 0.5, 0.5, 1.0)
    rng = np.random.default_rng(0)
    row = {"d": d, "m": m}
    n_lit = max(20, int(scale * 2e5 / (d * d * max(1, m // d))))  # literal: O(d^3) per block
    row["literal-ref"] = best_of(lambda: literal_reference(x, y, m, d, n_lit, rng), repeat) / n_lit
    n_fast = max(10_000, int(scale * 4e7 / m))
    row["rng-floor"] = best_of(lambda: rng_floor(m, d, n_fast, rng), repeat) / n_fast

    def ours(backend, trials):
        return best_of(lambda: monte_carlo_mse(x, y, m, "positive", ensemble="orthogonal",
                                               trials=trials, seed=1, backend=backend), repeat) / trials

    n_np = max(2_000, n_fast // 20)
    row["numpy"] = ours("numpy", n_np)
    before = numba.get_num_threads()
    try:
        for threads in (1, 2):
            if threads <= numba.config.NUMBA_NUM_THREADS:
                numba.set_num_threads(threads)
                row[f"numba-{threads}"] = ours("numba", n_fast)
    finally:
        numba.set_num_threads(before)
    if cupy_available():
        import cupy

        def on_gpu():
            monte_carlo_mse(x, y, m, "positive", ensemble="orthogonal", trials=n_gpu, seed=1,
                            backend="cupy")
            cupy.cuda.Device().synchronize()

        n_gpu = max(1_000_000, int(scale * 2e9 / m))
        on_gpu()  # warm up kernels
        row["cupy"] = best_of(on_gpu, repeat) / n_gpu
        if importlib.util.find_spec("numba_cuda") is not None:
            row["gpu-kernel"] = time_gpu_kernel(d, m, repeat, n_gpu)
    return row


def time_gpu_kernel(d, m, repeat, trials):
    """Seconds per trial of the CUDA kernel alone (estimates into a CuPy array, no statistics)."""
    import cupy

    from rfkernels.engine import cuda as _mc_cuda

    out = cupy.empty(trials)
    args = (np.uint32(1), np.uint32(2), np.uint64(0), m, d, True, True, 0, 1.0, out)

    def run():
        _mc_cuda.gpu_reduced_estimates(*args)
        cupy.cuda.Device().synchronize()

    run()  # compile
    return best_of(run, repeat) / trials


def cold_compile(argv=("mse", "--trials", "1e5", "--no-progress")):
    """Wall seconds and peak RSS (MiB) of ``rfkernels mse --trials 1e5`` with an empty Numba cache."""
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        code = ("import resource, sys; from rfkernels.commands.cli import main; rc = main(sys.argv[1:]); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); sys.exit(rc)")
        started = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", code, *argv], env=env, capture_output=True, text=True,
                              check=False)
        seconds = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"rfkernels {' '.join(argv)} failed: {proc.stderr.strip()[-500:]}")
    rss_mib = int(proc.stderr.strip().splitlines()[-1]) / 1024
    return seconds, rss_mib


def fmt_time(seconds):
    if seconds is None:
        return "-"
    ns = seconds * 1e9
    return f"{ns / 1e3:.1f} us" if ns >= 1e4 else f"{ns:.0f} ns"


#: (kind, ensemble, A, norms) of the reduced samplers timed by ``--beyond`` (m = d = 64)
BEYOND = [("positive", "iid", None, "chi"), ("positive", "orthogonal", None, "chi"),
          ("positive", "simplex", None, "chi"), ("oprf", "iid", -0.1, "chi"),
          ("oprf", "orthogonal", -0.1, "chi"), ("oprf", "simplex", -0.1, "chi"),
          ("positive", "orthogonal", None, "antithetic"), ("positive", "simplex", None, "antithetic"),
          ("oprf", "orthogonal", -0.1, "antithetic")]


def time_beyond(repeat, m=64, d=64):
    """ns per trial of the reduced engine for :data:`BEYOND` (Numba 4e5 trials, NumPy 4e4).

    Ends with issue 25's target: antithetic norms per trial within 2x of FAVOR+
    orthogonal (positive features, chi norms), on each backend.
    """
    from rfkernels import engine, rng

    key = rng.key_from_seed(0)
    print(f"Reduced engine, ns per trial (m = {m}, d = {d}, best of {repeat}):")
    found = {}
    for backend, trials in (("numba", 400_000), ("numpy", 40_000)):
        for kind, ens, A, norms in BEYOND:
            def run(n, kind=kind, ens=ens, A=A, backend=backend, norms=norms):
                for _ in engine.estimate_chunks(key, 0.7, m, d, kind, ensemble=ens, norms=norms,
                                                 trials=n, backend=backend, A=A):
                    pass
            run(1000)  # compile or load first
            best = float("inf")
            for _ in range(repeat):
                t = time.perf_counter()
                run(trials)
                best = min(best, time.perf_counter() - t)
            found[backend, kind, ens, norms] = best / trials
            print(f"  {backend:5s} {kind:8s} {ens:10s} {norms:10s} {best / trials * 1e9:8.0f} ns")
    for backend in ("numba", "numpy"):
        ratio = found[backend, "positive", "orthogonal", "antithetic"] / found[backend, "positive", "orthogonal", "chi"]
        print(f"Target: {backend} antithetic / chi (positive, orthogonal) = {ratio:.2f} (<= 2)")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="d = m = 64 only, shorter runs")
    p.add_argument("--repeat", type=int, default=3, help="timings per entry (the best is kept)")
    p.add_argument("--no-cold", action="store_true", help="skip the cold-compile measurement")
    p.add_argument("--beyond", action="store_true",
                   help="only the per-trial time of the oprf, simplex and antithetic-norm samplers "
                        "beside positive")
    args = p.parse_args(argv)
    if args.beyond:
        time_beyond(args.repeat)
        return
    cold = None if args.no_cold else cold_compile()  # first: nothing else competes for the CPUs
    scale = 0.25 if args.quick else 1.0
    configs = CONFIGS[:1] if args.quick else CONFIGS

    # compile (or load) the Numba kernels before any timing
    x, y = theory.pair(4, 0.5, 0.5, 1.0)
    monte_carlo_mse(x, y, 4, "positive", ensemble="orthogonal", trials=1000, backend="numba")

    print(f"# {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, numpy {np.__version__}, "
          f"numba {numba.__version__} ({numba.config.NUMBA_NUM_THREADS} threads), "
          f"cupy: {'yes' if cupy_available() else 'no'}; best of {args.repeat}")
    rows = [time_config(d, m, args.repeat, scale) for d, m in configs]

    cols = ["literal-ref", "rng-floor", "numpy", "numba-1", "numba-2", "cupy", "gpu-kernel"]
    print()
    print("Time per trial (positive features, orthogonal projections, chi norms):")
    print()
    print("| d | m | " + " | ".join(cols) + " | literal-ref / numba-2 | rng-floor / numba-2 | numba-1 / numba-2 |")
    print("|---|---|" + "---|" * len(cols) + "---|---|---|")
    for r in rows:
        best = r.get("numba-2", r.get("numba-1"))
        ratios = (r["literal-ref"] / best, r["rng-floor"] / best,
                  r["numba-1"] / r["numba-2"] if "numba-2" in r else float("nan"))
        print(f"| {r['d']} | {r['m']} | " + " | ".join(fmt_time(r.get(c)) for c in cols)
              + f" | {ratios[0]:.0f}x | {ratios[1]:.1f}x | {ratios[2]:.2f}x |")
    print()
    print("Feature samples per second (trials x m / time):")
    for r in rows:
        parts = [f"{c} {r['m'] / r[c]:.3g}" for c in ("numba-1", "numba-2", "cupy", "gpu-kernel") if c in r]
        print(f"  d={r['d']}, m={r['m']}: " + ", ".join(parts))
    main_row = rows[0]
    best = main_row.get("numba-2", main_row.get("numba-1"))
    print()
    print(f"Targets at d = m = {main_row['d']}: literal-ref / numba-2 = "
          f"{main_row['literal-ref'] / best:.0f}x (>= 400), rng-floor / numba-2 = "
          f"{main_row['rng-floor'] / best:.1f}x (>= 3), numba-1 / numba-2 = "
          f"{main_row['numba-1'] / best:.2f}x (>= 1.7)")
    for col in ("cupy", "gpu-kernel"):
        if col in main_row:
            print(f"GPU ({col}): {main_row['m'] / main_row[col]:.3g} feature samples/s (target >= 2e10 on an H200)")
    if cupy_available() and importlib.util.find_spec("numba_cuda") is None:
        print("GPU kernel: not timed, numba-cuda is not installed (pip install numba-cuda)")
    if cold is not None:
        print(f"Cold compile: `rfkernels mse --trials 1e5` with an empty Numba cache took {cold[0]:.1f} s, "
              f"peak RSS {cold[1]:.0f} MiB (target <= 10 s)")


if __name__ == "__main__":
    main()
