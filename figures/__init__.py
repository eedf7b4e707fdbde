"""Paper-style figures (installed as ``rfkernels.figures``).

One module per figure; each has ``NAME``, ``TITLE``, ``compute(quick, seed,
progress)`` returning the plotted data and ``plot(data, out_dir)`` writing
PDF and PNG; :func:`rfkernels.figures._common.make_figure` runs both and
writes the data as CSV. :func:`make_figures` runs a selection of them and writes a short
report of the theory-versus-Monte-Carlo checks.
"""

from __future__ import annotations

import importlib

from ._common import make_figure

#: Figure name -> module, in report order.
FIGURES = {
    "ratio": "ratio",
    "attention": "attention_mse",
    "mse_vs_m": "mse_vs_m",
    "mse_vs_angle": "mse_vs_angle",
    "orthogonality_gain": "orthogonality_gain",
    "feature_budget": "feature_budget",
    "bias_audit": "bias_audit",
}


def figure_module(name):
    """The module of figure ``name`` (ValueError listing the valid names)."""
    if name not in FIGURES:
        raise ValueError(f"unknown figure {name!r}; valid figures are {', '.join(FIGURES)}")
    return importlib.import_module(f"{__name__}.{FIGURES[name]}")


def make_figures(out_dir, only=None, quick=False, seed=0, progress=None):
    """Make the figures named in ``only`` (default: all); returns {name: FigureResult}.

    ``progress(name, done, total)`` is called as each figure advances.
    """
    names = list(FIGURES) if not only else list(only)
    modules = {n: figure_module(n) for n in names}  # validate every name before any work
    results = {}
    for name, module in modules.items():
        cb = None if progress is None else (lambda done, total, _n=name: progress(_n, done, total))
        results[name] = make_figure(module, out_dir, quick=quick, seed=seed, progress=cb)
    return results
