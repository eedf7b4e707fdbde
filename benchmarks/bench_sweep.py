"""End-to-end rate of a theory-only sweep: points per second into results.csv (no numbers asserted).

The sweep is what ``rfkernels sweep --theory-only`` runs, timed as the
command line runs it (``rfkernels.commands.cli.main``: the grid parsed, the folder
locked, the closed forms, the CSV text, the appends and their ``fsync``,
the sidecar), over 3 kinds x 2 ensembles x d in {4, 16, 64} x m in 1..64 x
``--angles`` angles (1000: 1,152,000 points), with ``--workers 1`` and
``--workers 2``, then resumed from half its rows. Each run is a fresh
Python process; its peak RSS is that process's ``VmHWM``. The engine alone
(:func:`rfkernels.analysis.sweep.theory_table` over the same grid) is timed
in the same run for the ratio. Best of ``--repeat``. "command wall" is the
whole process (interpreter start and imports included).

Run from the repository root with the package installed::

    python benchmarks/bench_sweep.py                 # 1,152,000 points
    python benchmarks/bench_sweep.py --angles 100    # a quicker look
    python benchmarks/bench_sweep.py --angles 500 --profile   # where the time goes
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
from _timing import best_of
from rfkernels.analysis.sweep import SweepSpec, theory_table

KINDS = "positive,hyperbolic,trig"
ENSEMBLES = "iid,orthogonal"
DS = "4,16,64"
MS = ",".join(str(m) for m in range(1, 65))

#: Runs one sweep through the CLI entry point in this (fresh) process and reports on it.
DRIVER = """
import json, resource, sys, time
from rfkernels.commands.cli import main
argv = json.loads(sys.argv[1])
start = time.perf_counter()
rc = main(argv)
seconds = time.perf_counter() - start
usage = resource.getrusage(resource.RUSAGE_SELF)
children = resource.getrusage(resource.RUSAGE_CHILDREN)
peak = usage.ru_maxrss / 1024  # Linux: may include the parent's memory at fork; VmHWM does not
try:
    with open("/proc/self/status") as fh:
        peak = next(int(l.split()[1]) for l in fh if l.startswith("VmHWM:")) / 1024
except (OSError, StopIteration):
    pass
print(json.dumps({"rc": rc, "seconds": seconds, "peak_rss_mib": peak,
                  "cpu_seconds": usage.ru_utime + usage.ru_stime,
                  "worker_cpu_seconds": children.ru_utime + children.ru_stime}))
"""


def sweep_argv(out, angles, workers):
    angle = ",".join(repr(float(a)) for a in np.linspace(0.0, 3.0, angles))
    return ["sweep", "--theory-only", "--kind", KINDS, "--ensemble", ENSEMBLES, "--d", DS,
            "--m", MS, "--angle", angle, "--workers", str(workers), "--out", out, "--json"]


def one_run(angles, workers):
    out = tempfile.mkdtemp(prefix="bench_sweep.")
    try:
        argv = sweep_argv(os.path.join(out, "o"), angles, workers)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argv)],
                              capture_output=True, text=True, check=True)
        wall = time.perf_counter() - start
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        path = os.path.join(out, "o", "results.csv")
        with open(path, "rb") as fh:
            rows = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 24), b"")) - 1
        report.update(wall=wall, rows=rows, mib=os.path.getsize(path) / 2**20)
        return report
    finally:
        shutil.rmtree(out, ignore_errors=True)


def resume_run(angles):
    """A fresh sweep cut in the middle of a line at half its bytes, then ``--resume``-d."""
    out = tempfile.mkdtemp(prefix="bench_sweep.")
    try:
        argv = sweep_argv(os.path.join(out, "o"), angles, 1)
        subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argv)], capture_output=True,
                       check=True)
        path = os.path.join(out, "o", "results.csv")
        with open(path, "rb") as fh:
            whole = fh.read()
        with open(path, "r+b") as fh:
            fh.truncate(len(whole) // 2 + 7)
        proc = subprocess.run([sys.executable, "-c", DRIVER, json.dumps(argv + ["--resume"])],
                              capture_output=True, text=True, check=True)
        report = json.loads(proc.stdout.strip().splitlines()[-1])
        with open(path, "rb") as fh:
            report["identical"] = fh.read() == whole
        return report
    finally:
        shutil.rmtree(out, ignore_errors=True)


def engine_seconds(angles, repeat):
    grid = {"kind": KINDS.split(","), "ensemble": ENSEMBLES.split(","),
            "d": [int(d) for d in DS.split(",")], "m": list(range(1, 65)),
            "angle": list(np.linspace(0.0, 3.0, angles))}
    spec = SweepSpec.from_dict(grid, {"theory_only": True})
    return len(spec.points()), best_of(lambda: theory_table(spec), repeat)


def profile(angles):
    import cProfile
    import pstats

    from rfkernels.commands.cli import main as cli

    out = tempfile.mkdtemp(prefix="bench_sweep.")
    try:
        argv = sweep_argv(os.path.join(out, "o"), angles, 1)
        prof = cProfile.Profile()
        prof.runcall(cli, argv)
        pstats.Stats(prof).sort_stats("tottime").print_stats(12)
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--angles", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true",
                        help="instead: one sweep (one worker) under cProfile, top functions")
    args = parser.parse_args()
    if args.profile:
        return profile(args.angles)
    n, engine = engine_seconds(args.angles, args.repeat)
    print(f"# theory-only sweep, {n} points; Python {platform.python_version()}, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    print(f"engine alone (theory_table, all theory columns): {engine:.2f} s, {n / engine:.3g} points/s")
    print("| workers | end to end (s) | points/s | end to end / engine | command wall (s) "
          "| CPU s (main + workers) | peak RSS of the main process (MiB) | CSV MiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for workers in (1, 2):
        runs = [one_run(args.angles, workers) for _ in range(args.repeat)]
        for r in runs:
            assert r["rc"] == 0 and r["rows"] == n, r
        best = min(runs, key=lambda r: r["seconds"])
        print(f"| {workers} | {best['seconds']:.2f} | {n / best['seconds']:.3g} "
              f"| {best['seconds'] / engine:.1f}x | {best['wall']:.2f} "
              f"| {best['cpu_seconds']:.1f} + {best['worker_cpu_seconds']:.1f} "
              f"| {best['peak_rss_mib']:.0f} | {best['mib']:.0f} |")
        sys.stdout.flush()
    r = resume_run(args.angles)
    print(f"resume of the same sweep cut at half its bytes (the half checked row by row, the rest "
          f"computed and appended in grid order, so no rewrite): {r['seconds']:.2f} s, peak RSS "
          f"{r['peak_rss_mib']:.0f} MiB, table identical to the uninterrupted one: {r['identical']}")


if __name__ == "__main__":
    main()
