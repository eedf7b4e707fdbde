"""``rfkernels sweep``: a resumable grid of Monte Carlo and theory, to CSV + JSON."""

from __future__ import annotations

import time

from .cli import command
from ._options import (LIST_NOTE, MAX_WORKERS, add_list, angle_in_range, choice, float_value,
                       int_range, int_value, name_value, norm_value, seed_value)
from ._output import dumps

#: Grid axes settable on the command line (list options; their element parsers are
#: in :func:`_add`, the names' choices the registry's when the parser is built).
GRID_OPTIONS = ("kind", "ensemble", "norms", "kernel", "gamma", "backends", "d", "m", "angle",
                "norm_x", "norm_y", "norm_sum")

#: How the target-kernel axes go together, for --help.
KERNEL_NOTE = ("--kernel gaussian estimates K(x, y) = exp(-gamma |x - y|^2) (scikit-learn's RBF\n"
               "convention) at each --gamma; gamma is required with gaussian and refused\n"
               "without it, and a grid of both kernels takes one gamma (softmax rows have\n"
               "gamma empty). The table's output_dimension is the feature map's outputs.")



def _add(p):
    from ..backends import BACKENDS
    from ..engine import PROPOSALS

    p.epilog = LIST_NOTE + ("\n\nOptions override the TOML file's keys; a default shown applies when "
                           "neither sets it.\n\n" + KERNEL_NOTE)
    p.add_argument("grid", nargs="?", type=name_value("TOML file name"),
                   help="TOML file with [grid] and [run] tables (options below override its keys)")
    p.add_argument("--out", required=True, type=name_value("folder name"),
                   help="output folder (results.csv, sweep.json)")
    p.add_argument("--resume", action="store_true", help="continue a sweep of the same grid in --out")
    p.add_argument("--workers", type=int_range(1, MAX_WORKERS), default=1,
                   help=f"local worker processes, 1 to {MAX_WORKERS}")
    p.add_argument("--scheduler", default=None, type=name_value("scheduler address"),
                   help="Dask scheduler address, e.g. tcp://HOST:8786 (needs the dask extra)")
    p.add_argument("--theory-only", action="store_true", default=None,
                   help="evaluate the closed forms only (vectorised, no Monte Carlo)")
    g = p.add_argument_group("grid axes (lists)")
    kinds, ensembles, norms = choice("kind"), choice("ensemble"), choice("norms")
    backends = choice(BACKENDS, "backend")
    add_list(g, "--kind", convert=kinds, help=f"{', '.join(kinds.choices)} (default: positive)")
    add_list(g, "--ensemble", convert=ensembles,
             help=f"{', '.join(ensembles.choices)} (default: iid; orthogonal-unfixed-qr and sorf "
                  "need --method literal)")
    add_list(g, "--norms", convert=norms, help=f"{', '.join(norms.choices)} (default: chi)")
    kernels = choice("kernel")
    add_list(g, "--kernel", convert=kernels,
             help=f"target kernels among {', '.join(kernels.choices)}: softmax exp(x.y) or "
                  "gaussian exp(-gamma |x - y|^2) (default: softmax)")
    add_list(g, "--gamma", convert=float_value,
             help="the Gaussian kernel's gamma values, finite numbers > 0 (with --kernel "
                  "gaussian only)")
    add_list(g, "--backends", convert=backends,
             help=f"backends as a grid axis, among {', '.join(backends.choices)} "
                  "(default: --backend)")
    add_list(g, "--d", convert=int_value, help="dimensions (required here or in the file)")
    add_list(g, "--m", convert=int_value, help="numbers of projections (required)")
    add_list(g, "--angle", convert=angle_in_range,
             help="angles between x and y, radians in [0, pi]: 1.5, pi/2, 3pi/4, ... (required)")
    add_list(g, "--norm-x", dest="norm_x", convert=norm_value, help="|x| (default: 1)")
    add_list(g, "--norm-y", dest="norm_y", convert=norm_value, help="|y| (default: 1)")
    add_list(g, "--norm-sum", dest="norm_sum", convert=norm_value,
             help="|x + y| with |x| = |y| (instead of --norm-x/--norm-y)")
    r = p.add_argument_group("run")
    r.add_argument("--trials", type=int_value, help="Monte Carlo trials per point (default: 100000)")
    r.add_argument("--seed", type=seed_value, help="root seed (default: 0)")
    r.add_argument("--backend", type=backends,
                   help=f"{', '.join(backends.choices)} (default: numpy)")
    r.add_argument("--method", help="reduced or literal (default: reduced)")
    r.add_argument("--chunk", type=int_value, help="trials per chunk (default: automatic)")
    proposals = choice(PROPOSALS, "proposal")
    r.add_argument("--proposal", type=proposals,
                   help=f"Monte Carlo proposal, one of {', '.join(proposals.choices)}: plain, "
                        "tilted (importance sampling of the heavy tail; trig points stay plain) or "
                        "auto (default: auto)")
    p.add_argument("--progress", action="store_true", default=None, help="force the progress bar")
    p.add_argument("--json", action="store_true", help="print a JSON summary")


@command("sweep", "run a resumable sweep over m, d, angles, norms, kinds, ensembles and "
                  "kernels")(_add)
def _run(args):
    from ..analysis.sweep import SweepSpec, run_sweep

    grid = {}
    for opt in GRID_OPTIONS:
        value = getattr(args, opt)
        if value is not None:
            grid["backend" if opt == "backends" else opt] = value
    run = {k: getattr(args, k) for k in ("trials", "seed", "backend", "method", "chunk", "proposal")
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
        print(dumps(summary))
    else:
        print(f"{summary['points']} points -> {path} ({summary['seconds']:.1f} s; "
              f"grid fingerprint {summary['fingerprint']})")
    return 0
