"""``rfkernels sweep``: a resumable grid of Monte Carlo and theory, to CSV + JSON."""

from __future__ import annotations

import json
import time

from ..cli import command
from ._options import float_list, int_list, int_value, str_list

#: Grid axes settable on the command line: option -> (grid key, parser).
GRID_OPTIONS = {
    "kind": str_list, "ensemble": str_list, "norms": str_list, "backends": str_list,
    "d": int_list, "m": int_list, "angle": float_list,
    "norm_x": float_list, "norm_y": float_list, "norm_sum": float_list,
}


def _add(p):
    p.add_argument("grid", nargs="?", help="TOML file with [grid] and [run] tables "
                   "(options below override its keys)")
    p.add_argument("--out", required=True, help="output folder (results.csv, sweep.json)")
    p.add_argument("--resume", action="store_true", help="continue a sweep of the same grid in --out")
    p.add_argument("--workers", type=int_value, default=1, help="local worker processes")
    p.add_argument("--scheduler", default=None,
                   help="Dask scheduler address, e.g. tcp://HOST:8786 (needs the dask extra)")
    p.add_argument("--theory-only", action="store_true", default=None,
                   help="evaluate the closed forms only (vectorised, no Monte Carlo)")
    g = p.add_argument_group("grid axes (comma-separated lists)")
    g.add_argument("--kind", type=str_list, help="trig, positive, hyperbolic [default: positive]")
    g.add_argument("--ensemble", type=str_list,
                   help="iid, orthogonal, orthogonal-unfixed-qr [default: iid]")
    g.add_argument("--norms", type=str_list, help="chi, fixed [default: chi]")
    g.add_argument("--backends", type=str_list, help="backends as a grid axis [default: --backend]")
    g.add_argument("--d", type=int_list, help="dimensions (required here or in the file)")
    g.add_argument("--m", type=int_list, help="numbers of projections (required)")
    g.add_argument("--angle", type=float_list, help="angles between x and y, radians in [0, pi] (required)")
    g.add_argument("--norm-x", dest="norm_x", type=float_list, help="|x| [default: 1]")
    g.add_argument("--norm-y", dest="norm_y", type=float_list, help="|y| [default: 1]")
    g.add_argument("--norm-sum", dest="norm_sum", type=float_list,
                   help="|x + y| with |x| = |y| (instead of --norm-x/--norm-y)")
    r = p.add_argument_group("run")
    r.add_argument("--trials", type=int_value, help="Monte Carlo trials per point [default: 100000]")
    r.add_argument("--seed", type=int_value, help="root seed [default: 0]")
    r.add_argument("--backend", help="numpy, numba or cupy [default: numpy]")
    r.add_argument("--method", help="reduced or literal [default: reduced]")
    r.add_argument("--chunk", type=int_value, help="trials per chunk [default: automatic]")
    p.add_argument("--progress", action="store_true", default=None, help="force the progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


@command("sweep", "run a resumable sweep over m, d, angles, norms, kinds and ensembles")(_add)
def _run(args):
    from ..analysis.sweep import SweepSpec, run_sweep

    grid = {}
    for opt in GRID_OPTIONS:
        value = getattr(args, opt)
        if value is not None:
            grid["backend" if opt == "backends" else opt] = value
    run = {k: getattr(args, k) for k in ("trials", "seed", "backend", "method", "chunk")
           if getattr(args, k) is not None}
    if args.theory_only is not None:
        run["theory_only"] = args.theory_only
    if args.grid:
        spec = SweepSpec.from_toml(args.grid, overrides={"grid": grid, "run": run})
    else:
        spec = SweepSpec.from_dict(grid, run)
    start = time.perf_counter()
    path = run_sweep(spec, args.out, resume=args.resume, workers=args.workers,
                     scheduler=args.scheduler, progress=args.progress)
    summary = {"results": path, "points": len(spec.points()), "fingerprint": spec.fingerprint(),
               "seconds": time.perf_counter() - start}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"{summary['points']} points -> {path} ({summary['seconds']:.1f} s)")
    return 0
