"""``rfkernels figures``: regenerate every figure, its data and the theory/Monte Carlo report."""

from __future__ import annotations

import sys
import time

from .cli import command
from ._options import MAX_WORKERS, ExtendList, int_range, name_value, seed_value, str_list


def _add(p):
    p.add_argument("--out", default="rfkernels-figures", type=name_value("folder name"),
                   help="output folder: new, empty, or an earlier output of this command "
                        "(any other file in it is refused before any work)")
    p.add_argument("--only", nargs="+", type=str_list, action=ExtendList, metavar="NAME",
                   help="make only these figures (names separated by spaces or commas, or repeated)")
    p.add_argument("--quick", action="store_true",
                   help="fewer Monte Carlo trials (a smoke run, well under a minute on 2 cores)")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed of every Monte Carlo point")
    p.add_argument("--workers", type=int_range(1, MAX_WORKERS), default=None,
                   help="worker processes making figures side by side, longest first, with the "
                        "same files and numbers (default: the usable CPUs; 1: in this process)")
    p.add_argument("--list", action="store_true", help="list the figures and exit")


@command("figures", "regenerate the paper-style figures with their data and a check report")(_add)
def _run(args):
    import os

    from ..figures import FIGURES, REPORT_NAME, figure_module, make_figures, usable_cpus
    from ..figures.report import summarise

    if args.list:
        for name in FIGURES:
            print(f"{name:20s} {figure_module(name).TITLE}")
        return 0
    from tqdm.auto import tqdm

    names = list(args.only) if args.only else list(FIGURES)  # ExtendList joins the groups
    for n in names:  # validate before any work
        figure_module(n)
    bars = {}
    disable = not sys.stderr.isatty()

    def progress(name, done, total):
        bar = bars.get(name)
        if bar is None:
            bar = bars[name] = tqdm(total=total, desc=name, disable=disable, leave=True)
        bar.total = total
        bar.n = done
        bar.refresh()

    workers = usable_cpus() if args.workers is None else args.workers
    start = time.perf_counter()
    try:  # checks --out (a folder, writable, holding only this command's files) before any figure
        results = make_figures(args.out, only=names, quick=args.quick, seed=args.seed,
                               progress=progress, workers=workers)
    finally:
        for bar in bars.values():
            bar.close()
    _, bad = summarise(results)
    report = os.path.join(args.out, REPORT_NAME)
    for name, res in results.items():
        print(f"{name:20s} {', '.join(p for p in res.paths if p.endswith('.png'))}")
    print(f"report: {report} ({bad} inconsistent point(s)); {time.perf_counter() - start:.0f} s")
    return 1 if bad else 0
