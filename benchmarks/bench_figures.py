"""Wall and CPU time of ``rfkernels figures`` in one process and on workers; same bytes (no timing asserted).

Each run is a fresh ``python -m rfkernels figures`` process (interpreter
start and imports included) writing into a new folder; its CPU time is
that of the process and its worker processes (``resource.getrusage`` of
the children). Per figure: the seconds measured in ``figures.json``
against the declared budget (:func:`rfkernels.figures.budget`: warm, alone
on 2 idle cores). Last, the CSV and PNG files of every run are compared
byte for byte with the first run's (PDFs record when they were written):
the number of worker processes must change no number.

Run from the repository root with the package installed, the Numba cache
warm (run it once before timing)::

    python benchmarks/bench_figures.py --quick                 # --workers 1 and the usable CPUs
    python benchmarks/bench_figures.py --workers 1,2           # the default run (minutes)
    python benchmarks/bench_figures.py --quick --only ratio,capacity --workers 1,2

``--cold`` times each run first with an empty ``NUMBA_CACHE_DIR`` (what a
fresh machine compiles), then warm with the cache it filled; ``--repeat N``
keeps the best of N (the per-figure seconds are those of the best run)::

    python benchmarks/bench_figures.py --workers 2 --cold --repeat 3   # README's main job
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import resource
import subprocess
import sys
import tempfile
import time


def run(out, workers, quick, only, cache=None):
    """One ``rfkernels figures`` process (``NUMBA_CACHE_DIR=cache`` if given); returns (wall, cpu, figures.json)."""
    argv = [sys.executable, "-m", "rfkernels", "figures", "--out", out, "--workers", str(workers)]
    argv += ["--quick"] if quick else []
    argv += ["--only", only] if only else []
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    env = dict(os.environ, **({"NUMBA_CACHE_DIR": cache} if cache else {}))
    proc = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 1):  # 1: inconsistent points, still a complete run
        sys.exit(f"rfkernels figures failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "figures.json")) as fh:
        return wall, cpu, json.load(fh)


def same_bytes(a, b):
    """CSV and PNG files of folder ``b`` that differ from (or are missing in) folder ``a``."""
    names = sorted(f for f in os.listdir(a) if f.endswith((".csv", ".png")))
    other = {f for f in os.listdir(b) if f.endswith((".csv", ".png"))}
    diff = [f for f in names if f not in other
            or not filecmp.cmp(os.path.join(a, f), os.path.join(b, f), shallow=False)]
    return diff + sorted(other - set(names)), len(names)


def main():
    from rfkernels.figures import usable_cpus

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="the --quick run")
    p.add_argument("--only", default=None, help="comma-separated figures (default: all)")
    p.add_argument("--workers", default=f"1,{usable_cpus()}",
                   help="comma-separated numbers of worker processes to time")
    p.add_argument("--cold", action="store_true",
                   help="time each run with an empty Numba cache first, then warm")
    p.add_argument("--repeat", type=int, default=1, help="best of this many runs (default 1)")
    args = p.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    print(f"{'quick' if args.quick else 'default'} run, {usable_cpus()} usable CPUs, load "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}, best of {args.repeat}")
    states = ("cold", "warm") if args.cold else ("warm",)
    with tempfile.TemporaryDirectory(prefix="bench-figures-") as tmp:
        best = {}  # (state, workers) -> (wall, cpu, out, meta)
        for r in range(args.repeat):
            for w in counts:
                cache = os.path.join(tmp, f"cache-{r}-{w}") if args.cold else None
                for state in states:
                    out = os.path.join(tmp, f"{state}-w{w}-r{r}")
                    wall, cpu, meta = run(out, w, args.quick, args.only, cache)
                    if (state, w) not in best or wall < best[state, w][0]:
                        best[state, w] = (wall, cpu, out, meta)
        for state in states:
            for w in counts:
                wall, cpu = best[state, w][:2]
                print(f"{state} --workers {w}: wall {wall:7.1f} s  CPU {cpu:7.1f} s  "
                      f"(CPU / wall {cpu / wall:.2f})")
        keys = [(state, w) for state in states for w in counts]
        metas = [best[k][3] for k in keys]
        print(f"\n{'figure':20s}" + "".join(f"{state[0] + ' w' + str(w) + ' s':>10s}" for state, w in keys)
              + f"{'budget s':>10s}")
        for i, line in enumerate(metas[0]["summary"]):
            secs = "".join(f"{m['summary'][i]['seconds']:10.1f}" for m in metas)
            print(f"{line['figure']:20s}{secs}{line['budget_seconds']:10.1f}")
        first = best[keys[0]][2]
        for k in keys[1:]:
            diff, n = same_bytes(first, best[k][2])
            print(f"{k[0]} --workers {k[1]} against {keys[0][0]} --workers {keys[0][1]}: "
                  + (f"{n} CSV and PNG files identical" if not diff else f"DIFFER: {diff}"))


if __name__ == "__main__":
    main()
