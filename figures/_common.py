"""Shared plumbing of the figures: the style sheet, saving, the data beside each figure."""

from __future__ import annotations

import csv
import math
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from rfkernels.storage import atomic_write

#: The package style sheet (``plt.style.use(STYLE)``).
STYLE = os.path.join(os.path.dirname(__file__), "paper.mplstyle")

#: Colours and markers per estimator kind and ensemble, used by every figure.
KIND_COLOURS = {"positive": "#0072B2", "hyperbolic": "#009E73", "trig": "#D55E00",
                "data-tilted": "#CC79A7"}
KIND_LABELS = {"positive": "positive (FAVOR+)", "hyperbolic": "hyperbolic", "trig": "trigonometric",
               "data-tilted": "data-tilted (cross-fitted)"}
ENSEMBLE_STYLES = {"iid": {"linestyle": "--", "marker": "o"},
                   "orthogonal": {"linestyle": "-", "marker": "s"}}


@dataclass
class FigureResult:
    """What one figure module produced: files, the plotted data (rows) and its time.

    ``seconds`` and ``cpu_seconds`` (wall and CPU time of the process that
    made it, shared parts it owns included) and ``budget_seconds`` (see
    :func:`rfkernels.figures.budget`) are None until measured or declared.
    """

    name: str
    paths: list = field(default_factory=list)
    data: dict = field(default_factory=dict)
    seconds: float | None = None
    cpu_seconds: float | None = None
    budget_seconds: float | None = None


def is_temporary_of(filename, path):
    """Whether ``filename`` is one of :func:`rfkernels.storage.atomic_write`'s temporary files of ``path``."""
    base = os.path.basename(os.fspath(path))
    name = os.path.basename(os.fspath(filename))
    return name.startswith(f".{base}.") and name.endswith(".tmp")


@contextmanager
def naming(path):
    """Re-raise an ``OSError`` that names no file (or a temporary one) as one naming ``path``.

    A full disk (``ENOSPC``) or a quota can fail a write, a flush or the
    creation of the temporary file; the error then says which output it was.
    """
    try:
        yield
    except OSError as exc:
        if exc.filename is not None and not is_temporary_of(exc.filename, path):
            raise
        raise OSError(exc.errno, exc.strerror or str(exc) or type(exc).__name__,
                      os.fspath(path)) from exc


def pyplot():
    """``matplotlib.pyplot``, on the Agg backend when no backend is chosen (imported once per process)."""
    import matplotlib

    if "MPLBACKEND" not in os.environ:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


@contextmanager
def paper_style():
    """Matplotlib (:func:`pyplot`) with the package style."""
    plt = pyplot()
    with plt.style.context(STYLE):
        yield plt


@contextmanager
def png_figure(path, *args, **kwargs):
    """``(fig, axes)`` of ``plt.subplots(*args, **kwargs)`` in the package style, written to
    ``path`` as one PNG, atomically (a reader never sees half a file; the umask applies), when
    the block ends without an error; the figure is closed either way."""
    import io

    with paper_style() as plt:
        fig, axes = plt.subplots(*args, **kwargs)
        try:
            yield fig, axes
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
        finally:
            plt.close(fig)
    image = buf.getvalue()
    with naming(path):
        # atomic_write's file object is text; the image bytes go to its binary buffer
        atomic_write(path, lambda fh: fh.buffer.write(image))


def save(fig, out_dir, stem):
    """Write ``stem.pdf`` and ``stem.png`` into ``out_dir`` atomically; returns the paths."""
    import io

    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    try:
        for ext in ("pdf", "png"):
            path = os.path.join(out_dir, f"{stem}.{ext}")
            with naming(path):
                buf = io.BytesIO()
                fig.savefig(buf, format=ext)
                image = buf.getvalue()
                # atomic_write's file object is text; the image bytes go to its binary buffer
                atomic_write(path, lambda fh, image=image: fh.buffer.write(image))
            paths.append(path)
    finally:
        plt.close(fig)
    return paths


#: z of the two-sided 95% interval.
Z95 = 1.96


def interval95(mean, se):
    """95% error bars (lower, upper lengths) of a positive mean, drawable on a log axis.

    ``mean ± 1.96 se`` where its lower end is positive; elsewhere the
    geometric interval ``mean ×/÷ exp(1.96 se / mean)`` (the delta-method
    interval of log(mean)), whose lower end stays positive. Returns
    ``(lower, upper, geometric)`` with ``geometric`` the boolean mask of the
    second case.
    """
    mean = np.asarray(mean, dtype=float)
    half = Z95 * np.asarray(se, dtype=float)
    geometric = mean - half <= 0
    factor = np.exp(np.where(geometric, half / mean, 0.0))
    lower = np.where(geometric, mean - mean / factor, half)
    upper = np.where(geometric, mean * factor - mean, half)
    return lower, upper, geometric


def legend_below(ax, ncol=2, handles=None, labels=None, **kwargs):
    """The legend of ``ax`` in the figure, below the x label: never on the data.

    The figure's constrained layout (the style sheet) makes room for it.
    """
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    return ax.figure.legend(handles, labels, loc="outside lower center", ncol=ncol, **kwargs)


def write_csv(out_dir, stem, rows):
    """The plotted data as ``stem.csv`` (rows: list of dicts with one key set), atomically."""
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"{stem}.csv")
    if not rows:
        raise ValueError(f"figure {stem}: no data rows to write")
    keys = list(rows[0])

    def write(fh):
        w = csv.writer(fh)
        w.writerow(keys)
        for r in rows:
            w.writerow(["" if v is None or (isinstance(v, float) and math.isnan(v)) else
                        repr(v) if isinstance(v, float) else v for v in (r[k] for k in keys)])

    with naming(path):
        atomic_write(path, write)
    return path


def mc_errorbars(ax, rows, x, colour, marker, *, shift=1.0, label=None, y="mse_mc", low="ci_low",
                 high="ci_high"):
    """Monte Carlo markers with 95% intervals: filled where the tail is tame, hollow where not.

    ``rows`` carry the value ``y`` (``mse_mc``; a ratio's key for ratio
    plots), its interval ``low``, ``high`` and ``tail_ok``; ``x`` is the key
    of the abscissa, multiplied by ``shift`` (to separate series on a log
    axis).
    """
    for ok in (True, False):
        sel = [r for r in rows if bool(r["tail_ok"]) == ok]
        if not sel:
            continue
        err = [[max(r[y] - r[low], 0.0) for r in sel], [max(r[high] - r[y], 0.0) for r in sel]]
        y_values = [r[y] for r in sel]
        ax.errorbar([r[x] * shift for r in sel], y_values, yerr=err, fmt=marker, color=colour,
                    mfc=colour if ok else "none", ms=3.5, lw=0.8,
                    label=None if label is None else label + ("" if ok else " (heavy tail)"))


def make_figure(module, out_dir, quick=False, seed=0, progress=None):
    """Compute a figure module's data, plot it, and write each of its tables as CSV.

    A data entry that is a list of dicts is a table: it is written as
    ``NAME.csv`` when it is the only one, else ``NAME_KEY.csv`` (``lines``
    being named ``theory``). The result records the wall and CPU seconds
    of this process it took; matplotlib's import, a cost of the process
    paid once (as NumPy's is), is made before the clock starts.
    """
    pyplot()
    start, cpu = time.perf_counter(), time.process_time()
    data = module.compute(quick, seed, progress)
    paths = module.plot(data, out_dir)
    tables = {k: v for k, v in data.items() if isinstance(v, list) and v and isinstance(v[0], dict)}
    for key, rows in tables.items():
        stem = module.NAME if len(tables) == 1 else f"{module.NAME}_{'theory' if key == 'lines' else key}"
        paths.append(write_csv(out_dir, stem, rows))
    return FigureResult(module.NAME, paths, data, seconds=time.perf_counter() - start,
                        cpu_seconds=time.process_time() - cpu)


def theory_curves(ax, lines, x, label):
    """Exact MSE curves (log y), one per (kind, ensemble) in ``lines``, coloured by kind.

    ``label(kind, ensemble)`` names each curve; iid is dashed, orthogonal solid.
    """
    series = dict.fromkeys((r["kind"], r["ensemble"]) for r in lines)
    for kind, ensemble in series:
        rows = [r for r in lines if r["kind"] == kind and r["ensemble"] == ensemble]
        ax.semilogy([r[x] for r in rows], [r["mse_exact"] for r in rows], color=KIND_COLOURS[kind],
                    ls=ENSEMBLE_STYLES[ensemble]["linestyle"], label=label(kind, ensemble))


def head_panels(plt, rows):
    """``(figure, [(axes, head, the head's rows), ...])``: one panel per head, side by side."""
    heads = sorted({r["head"] for r in rows})
    fig, axes = plt.subplots(1, len(heads), figsize=(3.0 * len(heads), 3.6), sharey=False)
    axes = np.atleast_1d(axes)
    return fig, [(ax, h, [r for r in rows if r["head"] == h]) for ax, h in zip(axes, heads)]


def finish_log_panel(ax, shown, xlabel, title):
    """Log axes whose y range spans the values ``shown`` (a line far above them is cut off: the
    CSV keeps it), with the x label and the title."""
    ax.set_ylim(min(shown) / 3, max(shown) * 5)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_title(title, fontsize=8)


def legend_with_lines(ax, plt, lines):
    """The legend below ``ax``: its curves, then ``lines``, ``[(Line2D keywords, label), ...]``."""
    handles, labels = ax.get_legend_handles_labels()
    handles += [plt.Line2D([], [], **style) for style, _ in lines]
    labels += [label for _, label in lines]
    legend_below(ax, ncol=3, handles=handles, labels=labels, fontsize=6.5)


def estimator_curves(ax, rows, kinds, ensembles, x, order):
    """Each kind x ensemble's ``relative_mse`` against ``x(row)`` with ± 2 standard errors
    (``relative_mse_stderr``, capped below the value), in the kind's colour and the ensemble's
    style, points in ``order``; rows whose value is not finite and positive are left out."""
    for kind in kinds:
        for ens in ensembles:
            pts = sorted((r for r in rows if r["kind"] == kind and r["ensemble"] == ens
                          and r["relative_mse"] is not None and math.isfinite(r["relative_mse"])
                          and r["relative_mse"] > 0), key=order)
            if not pts:
                continue
            style = ENSEMBLE_STYLES[ens]
            ax.errorbar([x(p) for p in pts], [p["relative_mse"] for p in pts],
                        yerr=[min(2 * (p["relative_mse_stderr"] or 0.0), 0.99 * p["relative_mse"])
                              for p in pts],
                        color=KIND_COLOURS[kind], ls=style["linestyle"], marker=style["marker"],
                        ms=3, lw=0.8, capsize=1.5, label=f"{KIND_LABELS[kind]}, {ens}")


def counter(progress, total):
    """``tick(n=1)``: count n more units done and report ``progress(done, total)`` if given."""
    done = [0]

    def tick(n=1):
        done[0] += n
        if progress:
            progress(done[0], total)

    return tick
