"""Paper-style figures (installed as ``rfkernels.figures``).

One module per figure; each has ``NAME``, ``TITLE``, ``BUDGET``,
``compute(quick, seed, progress)`` returning the plotted data and
``plot(data, out_dir)`` writing PDF and PNG;
:func:`rfkernels.figures._common.make_figure` runs both and writes the data
as CSV. :func:`make_figures` runs a selection of them, in this process or on
worker processes (``workers``), and writes a short report of the
theory-versus-Monte-Carlo checks (``report.md``) with its provenance, each
figure's measured seconds and budget, and the list of files written
(``figures.json``). It refuses an output folder holding files it did not
write, before any work.

Budgets. ``BUDGET = {False: seconds, True: seconds}`` (default run,
``--quick``) declares the wall seconds a figure takes warm (Numba kernels
cached), alone in one process on 2 idle cores. It is documentation and the
pool's schedule (longest first), not a timed test; a new figure keeps its
default run within 15 s. A figure that shares computations with others
(``shared(quick, seed)``: the attention study's tables and theory lines,
:class:`rfkernels.figures._attention_study.Part`) declares its own work
only; each part has its budget, counted (and measured) for the first
figure in report order that needs it: :func:`budget`. On a pool, the
engine's kernels that are not yet in Numba's disk cache are parts too,
compiled once up front (:mod:`rfkernels.figures._kernels`).
"""

from __future__ import annotations

import importlib
import os
import time

from ._common import make_figure
from ._output import MANIFEST_NAME, REPORT_NAME
from rfkernels.workers import usable_cpus

__all__ = ["FIGURES", "MANIFEST_NAME", "REPORT_NAME", "budget", "figure_module", "make_figures",
           "shared_parts", "usable_cpus"]

#: Figure name -> module, in report order.
FIGURES = {
    "ratio": "ratio",
    "attention": "attention_mse",
    "attention_regime": "attention_regime",
    "figure4": "figure4",
    "mse_vs_m": "mse_vs_m",
    "mse_vs_angle": "mse_vs_angle",
    "orthogonality_gain": "orthogonality_gain",
    "feature_budget": "feature_budget",
    "beyond": "oprf_simplex_ratio",
    "estimator_choice": "estimator_choice",
    "gaussian": "gaussian",
    "real_data": "real_data",
    "bias_audit": "bias_audit",
    "zoo_attention": "zoo_attention",
    "capacity": "capacity",
    "floor": "floor",
    "causal": "causal",
    "qmc": "qmc",
    "hybrid": "hybrid",
}


def figure_module(name):
    """The module of figure ``name`` (ValueError listing the valid names)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; valid figures are {', '.join(FIGURES)}")
    return importlib.import_module(f"{__name__}.{FIGURES[name]}")


def shared_parts(names, quick=False, seed=0):
    """{name: the shared parts figure ``name`` uses} (``shared(quick, seed)``; [] for most)."""
    out = {}
    for n in names:
        shared = getattr(figure_module(n), "shared", None)
        out[n] = list(shared(quick, seed)) if shared is not None else []
    return out


def budget(name, quick=False, names=None):
    """Declared warm seconds of figure ``name`` in a run of figures ``names`` (default: all).

    Its module's ``BUDGET[quick]`` plus the budget of each shared part it is
    the first of ``names`` (report order) to need.
    """
    names = list(FIGURES) if names is None else list(names)
    if name not in names:
        names.append(name)
    needs = shared_parts(names, quick)
    earlier = {p for n in names[:names.index(name)] for p in needs[n]}
    own = figure_module(name).BUDGET[bool(quick)]
    return own + sum(p.budget for p in dict.fromkeys(needs[name]) if p not in earlier)


def make_figures(out_dir, only=None, quick=False, seed=0, progress=None, workers=1):
    """Make the figures named in ``only`` (default: all) and the report; returns {name: FigureResult}.

    ``out_dir`` must be new, empty or an earlier output folder of this
    function (checked before any work: see
    :func:`rfkernels.figures._output.check_out_dir`); ``report.md`` and
    ``figures.json`` are written beside the figures.
    ``progress(name, done, total)`` is called as each figure (or, on
    workers, a group of shared parts such as ``"attention study"``)
    advances. ``workers`` > 1 makes the figures on that many worker
    processes (:mod:`rfkernels.figures._pool`); the files, the data and the
    report's numbers are the same, the results in the same order. The
    workers are spawned (fresh interpreters), so a script that calls this
    with ``workers`` > 1 needs the ``if __name__ == "__main__":`` guard.
    Ctrl-C raises ``KeyboardInterrupt`` after stopping the workers, even
    where Python would have swallowed it (:mod:`rfkernels.figures._interrupt`).
    """
    from ._output import FORMAT, check_out_dir, manifest_files, write_manifest
    from .report import write_report

    names = list(dict.fromkeys(FIGURES if not only else only))
    modules = {n: figure_module(n) for n in names}  # validate every name before any work
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"workers must be an integer >= 1; got {workers!r}")
    check_out_dir(out_dir, FIGURES)
    start = time.perf_counter()
    manifest = os.path.join(out_dir, MANIFEST_NAME)
    created, folder = [], os.path.abspath(out_dir)
    while not os.path.exists(folder):  # the folders this call creates, innermost first
        created.append(folder)
        folder = os.path.dirname(folder)
    had_manifest = os.path.exists(manifest)
    os.makedirs(out_dir, exist_ok=True)
    # claim the folder before the first figure file, so that an interrupted run's files stay ours
    write_manifest(out_dir, {"format": FORMAT, "status": "running", "figures": names,
                             "files": manifest_files(out_dir)})
    needs = shared_parts(names, quick, seed)
    jobs = len(names) + len({p for n in names for p in needs[n]})
    workers = 1 if jobs == 1 else min(workers, jobs)  # the worker processes the run uses
    try:
        results = _make(modules, needs, out_dir, quick, seed, progress, workers)
    except BaseException:
        if not had_manifest and os.listdir(out_dir) == [MANIFEST_NAME]:
            os.unlink(manifest)  # nothing else written: leave the folder as it was found
            for folder in created:
                if not os.listdir(folder):
                    os.rmdir(folder)
        raise
    for name, res in results.items():
        res.budget_seconds = budget(name, quick, names)
    write_report(results, out_dir, time.perf_counter() - start, seed=seed, quick=quick,
                 workers=workers, cpus=usable_cpus())
    return results


def _make(modules, needs, out_dir, quick, seed, progress, workers):
    """The figures of ``modules``, in this process (``workers`` 1) or on a pool."""
    from ._interrupt import interrupts

    with interrupts() as guard:
        if workers > 1:
            from ._kernels import pending
            from ._pool import make_on_pool

            # the engine's kernels not yet cached: parts of their own, compiled once up front
            needs = {n: needs[n] + pending(m) for n, m in modules.items()}
            return make_on_pool(modules, needs, out_dir, quick=quick, seed=seed, progress=progress,
                                workers=workers, check=guard.check)
        results = {}
        for name, module in modules.items():
            def cb(done, total, name=name):
                guard.check()
                if progress is not None:
                    progress(name, done, total)

            results[name] = make_figure(module, out_dir, quick=quick, seed=seed, progress=cb)
            guard.check()
        return results
