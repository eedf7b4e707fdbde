"""``rfkernels figures``: regenerate every figure, its data and the theory/Monte Carlo report."""

from __future__ import annotations

import sys
import time

from ..cli import command


def _add(p):
    p.add_argument("--out", default="rfkernels-figures", help="output folder")
    p.add_argument("--only", nargs="+", metavar="NAME", help="make only these figures")
    p.add_argument("--quick", action="store_true", help="few Monte Carlo trials (for tests, ~1 min)")
    p.add_argument("--seed", type=int, default=0, help="root seed of every Monte Carlo point")
    p.add_argument("--list", action="store_true", help="list the figures and exit")


@command("figures", "regenerate the paper-style figures with their data and a check report")(_add)
def _run(args):
    from ..figures import FIGURES, figure_module, make_figures
    from ..figures.report import write_report

    if args.list:
        for name in FIGURES:
            print(f"{name:20s} {figure_module(name).TITLE}")
        return 0
    from tqdm.auto import tqdm

    names = args.only or list(FIGURES)
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

    start = time.perf_counter()
    results = make_figures(args.out, only=names, quick=args.quick, seed=args.seed, progress=progress)
    for bar in bars.values():
        bar.close()
    report, bad = write_report(results, args.out, time.perf_counter() - start)
    for name, res in results.items():
        print(f"{name:20s} {', '.join(p for p in res.paths if p.endswith('.png'))}")
    print(f"report: {report} ({bad} inconsistent point(s)); {time.perf_counter() - start:.0f} s")
    return 1 if bad else 0
