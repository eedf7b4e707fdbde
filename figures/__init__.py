"""Paper-style figures (installed as ``rfkernels.figures``).

One module per figure; each has ``NAME``, ``TITLE``, ``compute(quick, seed,
progress)`` returning the plotted data and ``plot(data, out_dir)`` writing
PDF and PNG; :func:`rfkernels.figures._common.make_figure` runs both and
writes the data as CSV. :func:`make_figures` runs a selection of them and writes a short
report of the theory-versus-Monte-Carlo checks (``report.md``) with its
provenance and the list of files written (``figures.json``). It refuses an
output folder holding files it did not write, before any work.
"""

from __future__ import annotations

import importlib
import os
import time

from ._common import make_figure

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
    "beyond": "beyond",
    "bias_audit": "bias_audit",
    "zoo_attention": "zoo_attention",
    "capacity": "capacity",
}


def figure_module(name):
    """The module of figure ``name`` (ValueError listing the valid names)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; valid figures are {', '.join(FIGURES)}")
    return importlib.import_module(f"{__name__}.{FIGURES[name]}")


def make_figures(out_dir, only=None, quick=False, seed=0, progress=None):
    """Make the figures named in ``only`` (default: all) and the report; returns {name: FigureResult}.

    ``out_dir`` must be new, empty or an earlier output folder of this
    function (checked before any work: see
    :func:`rfkernels.figures._output.check_out_dir`); ``report.md`` and
    ``figures.json`` are written beside the figures.
    ``progress(name, done, total)`` is called as each figure advances.
    """
    from ._output import (
        FORMAT,
        MANIFEST_NAME,
        check_out_dir,
        manifest_files,
        write_manifest,
    )
    from .report import write_report

    names = list(FIGURES) if not only else list(only)
    modules = {n: figure_module(n) for n in names}  # validate every name before any work
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
    results = {}
    try:
        for name, module in modules.items():
            cb = None if progress is None else (lambda done, total, _n=name: progress(_n, done, total))
            results[name] = make_figure(module, out_dir, quick=quick, seed=seed, progress=cb)
    except BaseException:
        if not had_manifest and os.listdir(out_dir) == [MANIFEST_NAME]:
            os.unlink(manifest)  # nothing else written: leave the folder as it was found
            for folder in created:
                if not os.listdir(folder):
                    os.rmdir(folder)
        raise
    write_report(results, out_dir, time.perf_counter() - start, seed=seed, quick=quick)
    return results
