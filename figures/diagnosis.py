"""The figure of ``rfkernels diagnose``: relative attention MSE against r, the ``|q' + k'|^2`` histogram.

:func:`plot_diagnosis` draws one PNG of a
:class:`rfkernels.analysis.diagnosis.Diagnosis` in the package style, with
two panels:

(a) the relative attention MSE of every estimator (the summary rows'
    ``relative_mse``: attention MSE over the exact output's mean square,
    pooled over heads) against the feature budget r, one line per
    (preset, kind, ensemble), with 95% error bars (1.96 standard errors of
    ``attention_mse_stderr / zero_mse``); the baselines every estimator
    must beat, uniform attention (every row the mean of V) and a zero
    output (1 by definition), and the target (dashed);
(b) the pooled histogram of :math:`|q' + k'|^2` of the scaled vectors over
    every head's sampled pairs, with the heavy-tail threshold.

A point whose relative MSE is not finite (a draw's output was not finite,
the MSE is beyond float64, or the exact output is zero) is not drawn; the
panel's title says how many were left out. This is not one of the paper's
figures (:data:`rfkernels.figures.FIGURES`): it has no ``compute``, it draws
a diagnosis it is given.

:func:`plot_heads` draws a diagnosis whose heads have two leading axes
(``meta["head_shape"] == [layers, heads]``, as ``rfkernels diagnose --model``
gives) as a layer x head heat map, one PNG with two panels, rows = layers,
columns = heads:

(a) each head's best (lowest) relative attention MSE over every (preset,
    kind, ensemble) at one feature budget r (default: the largest r of the
    rows), on a log colour scale; a head without a finite value there is
    grey. The title names the estimator that is best on the most heads. A
    cross marks the heads where even the best estimator is worse than
    uniform attention (each row the mean of V) by more than 2 standard
    errors, the row's ``worse_than_uniform``, the rule of the report and the
    CSVs; the legend says so and counts them;
(b) each head's heavy-tail share: the share of its sampled query-key pairs
    with :math:`|q' + k'|^2` above ``meta["heavy_tail_u2"]`` (0 to 1, linear
    colour scale).

Any other head shape (one head, or one or three leading axes) is refused
with a ``ValueError``.
"""

from __future__ import annotations

import math
import os

import numpy as np

from ._common import (
    ENSEMBLE_STYLES,
    KIND_COLOURS,
    KIND_LABELS,
    interval95,
    legend_below,
    png_figure,
)

__all__ = ["best_head_panel", "heavy_tail_panel", "histogram_panel", "plot_diagnosis",
           "plot_heads", "relative_panel"]

#: Colours of kinds without one in :data:`rfkernels.figures._common.KIND_COLOURS`, in turn.
OTHER_COLOURS = ("#CC79A7", "#E69F00", "#56B4E9", "#000000", "#999999")
#: Line styles and markers of ensembles without one in ``ENSEMBLE_STYLES``, in turn.
OTHER_STYLES = ({"linestyle": "-.", "marker": "^"}, {"linestyle": ":", "marker": "D"},
                {"linestyle": (0, (5, 1)), "marker": "v"}, {"linestyle": (0, (1, 1)), "marker": "P"})


def _finite_positive(x):
    return x is not None and isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _series(summary):
    """(preset, kind, ensemble) -> summary rows sorted by r, in first-appearance order."""
    out = {}
    for row in summary:
        out.setdefault((row["preset"], row["kind"], row["ensemble"]), []).append(row)
    return {key: sorted(rows, key=lambda r: r["r"]) for key, rows in out.items()}


def _styles(series):
    """Colour per kind and (line style, marker) per ensemble, stable over the series."""
    kinds = list(dict.fromkeys(k for _, k, _ in series))
    ensembles = list(dict.fromkeys(e for _, _, e in series))
    extra_k = iter(OTHER_COLOURS * (1 + len(kinds) // len(OTHER_COLOURS)))
    extra_e = iter(OTHER_STYLES * (1 + len(ensembles) // len(OTHER_STYLES)))
    colours = {k: KIND_COLOURS.get(k) or next(extra_k) for k in kinds}
    styles = {e: ENSEMBLE_STYLES.get(e) or next(extra_e) for e in ensembles}
    return colours, styles


def relative_panel(ax, diagnosis):
    """Panel (a); returns the legend's handles and labels, the estimators before the baselines."""
    from matplotlib.lines import Line2D  # the baselines' artists (the estimators' are containers)

    summary = diagnosis.summary
    series = _series(summary)
    colours, styles = _styles(series)
    presets = {p for p, _, _ in series}
    ensembles = list(dict.fromkeys(e for _, _, e in series))
    skipped = 0
    for (preset, kind, ens), rows in series.items():
        ok = [r for r in rows if _finite_positive(r["relative_mse"])]
        skipped += len(rows) - len(ok)
        if not ok:
            continue
        # a small shift per ensemble on the log axis, so that error bars do not overlap
        shift = 2.0 ** (0.06 * (ensembles.index(ens) - (len(ensembles) - 1) / 2))
        r = np.array([row["r"] for row in ok], dtype=float) * shift
        y = np.array([row["relative_mse"] for row in ok])
        se = np.array([row["attention_mse_stderr"] / row["zero_mse"]
                       if row["attention_mse_stderr"] is not None else 0.0 for row in ok])
        lower, upper, _ = interval95(y, np.nan_to_num(se, nan=0.0, posinf=0.0))
        label = f"{KIND_LABELS.get(kind, kind)}, {ens}" + (f" ({preset})" if len(presets) > 1 else "")
        ax.errorbar(r, y, yerr=[lower, upper], color=colours[kind], ls=styles[ens]["linestyle"],
                    marker=styles[ens]["marker"], ms=3.5, lw=1.0, elinewidth=0.8, label=label)
    ratios = [row["uniform_mse"] / row["zero_mse"] for row in summary
              if _finite_positive(row["zero_mse"]) and row["uniform_mse"] is not None]
    uniform = float(np.mean(ratios)) if ratios else math.nan
    if math.isfinite(uniform) and uniform > 0:
        ax.axhline(uniform, color="0.45", lw=1.0, ls="-.", label="uniform attention (mean of V)")
    ax.axhline(1.0, color="0.2", lw=1.0, ls=":", label="zero output")
    target = diagnosis.advice["target"]
    ax.axhline(target, color="k", lw=1.0, ls="--", label=f"target {target:g}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("feature budget r (features per query and key)")
    ax.set_ylabel("relative attention MSE\n(MSE / mean square of the exact output)")
    meta = diagnosis.meta
    title = (f"(a) {meta['heads']} head(s), L = {meta['L']}, d = {meta['d']}, scale = "
             f"{meta['scale']:.3g}; {meta['draws']} draws, bars: 95%")
    if skipped:
        title += f"\n{skipped} of {len(summary)} points not finite, not drawn"
    ax.set_title(title, fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(handles)), key=lambda i: isinstance(handles[i], Line2D))
    return [handles[i] for i in order], [labels[i] for i in order]


def histogram_panel(ax, diagnosis):
    """Panel (b): the pooled ``|q' + k'|^2`` histogram and the heavy-tail threshold."""
    meta, heads = diagnosis.meta, diagnosis.heads
    edges = np.asarray(meta["histogram_edges"], dtype=float)
    counts = np.sum([h["histogram_counts"] for h in heads], axis=0)
    threshold = meta["heavy_tail_u2"]
    pairs = sum(h["pairs"] for h in heads)
    heavy = sum(h["heavy_tail_share"] * h["pairs"] for h in heads) / pairs if pairs else math.nan
    if np.all(np.isfinite(edges)):
        ax.stairs(counts, edges, fill=True, color="#0072B2", alpha=0.6, label="pairs")
        ax.axvline(threshold, color="k", ls="--", lw=1.0,
                   label=f"heavy-tail threshold {threshold:g}")
        ax.legend(loc="upper right")
    else:
        ax.text(0.5, 0.5, "|q' + k'|² beyond float64: no histogram", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("|q' + k'|² of the scaled vectors")
    ax.set_ylabel("query-key pairs")
    ax.set_title(f"(b) {pairs} query-key pairs, {len(heads)} head(s); share above {threshold:g}: "
                 f"{100 * heavy:.3g}%", fontsize=8)


def plot_diagnosis(diagnosis, path):
    """Draw ``diagnosis`` as one PNG at ``path`` (module docstring), atomically; returns the path.

    Parameters
    ----------
    diagnosis : rfkernels.analysis.diagnosis.Diagnosis
        The result of :func:`rfkernels.analysis.diagnose`.
    path : str or os.PathLike
        The PNG file; its folder must exist. Written through
        :func:`rfkernels.storage.atomic_write` (a reader never sees half a
        file; the umask applies).
    """
    path = os.fspath(path)
    with png_figure(path, 1, 2, figsize=(9.0, 4.4), width_ratios=(3, 2)) as (_, (left, right)):
        handles, labels = relative_panel(left, diagnosis)
        histogram_panel(right, diagnosis)
        legend_below(left, ncol=3, handles=handles, labels=labels)
    return path


# ---------------------------------------------------------------------------
# The layer x head heat map
# ---------------------------------------------------------------------------

#: Colour of a cell without a finite value.
BLANK = "0.82"


def _grid_shape(diagnosis):
    """(layers, heads) of a diagnosis whose heads have two leading axes; ValueError otherwise."""
    shape = list(diagnosis.meta.get("head_shape") or [])
    if len(shape) != 2:
        raise ValueError(f"plot_heads draws heads with two leading axes (layer, head); this "
                         f"diagnosis's head_shape is {shape}")
    return int(shape[0]), int(shape[1])


def _cells(diagnosis, values):
    """A (layers, heads) float array of ``values`` (flat head number -> value; NaN elsewhere)."""
    shape = _grid_shape(diagnosis)
    grid = np.full(shape, np.nan)
    for head, value in values.items():
        if value is not None and math.isfinite(value):
            grid[np.unravel_index(int(head), shape)] = value
    return grid


def _best_per_head(diagnosis, r):
    """Flat head number -> (lowest finite relative MSE at ``r``, its (preset, kind, ensemble),
    whether that row is worse than uniform attention)."""
    best = {}
    for row in diagnosis.rows:
        value = row["relative_mse"]
        if row["r"] == r and _finite_positive(value):
            if row["head"] not in best or value < best[row["head"]][0]:
                best[row["head"]] = (value, (row["preset"], row["kind"], row["ensemble"]),
                                     bool(row["worse_than_uniform"]))
    return best


def _estimator_name(key, presets):
    preset, kind, ensemble = key
    return f"{KIND_LABELS.get(kind, kind)}, {ensemble}" + (f" ({preset})" if len(presets) > 1 else "")


def _heat_axes(ax, shape):
    """Rows = layers, columns = heads, integer ticks, no grid."""
    from matplotlib.ticker import MaxNLocator

    for axis, n in ((ax.xaxis, shape[1]), (ax.yaxis, shape[0])):
        if n <= 24:
            axis.set_ticks(range(n))
        else:
            axis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.grid(False)


def _heat(ax, grid, norm, cmap, label):
    """``grid`` drawn on ``ax`` (NaN cells grey) with its colour bar."""
    import matplotlib
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import LogFormatterSciNotation

    colours = matplotlib.colormaps[cmap].with_extremes(bad=BLANK)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap=colours, norm=norm, aspect="auto",
                      interpolation="nearest")
    bar = ax.figure.colorbar(image, ax=ax, label=label, fraction=0.05, pad=0.02)
    if isinstance(norm, LogNorm) and norm.vmax / norm.vmin < 100:  # label 2, 3, 5 x 10^k too
        bar.ax.yaxis.set_minor_formatter(LogFormatterSciNotation(minor_thresholds=(2, 0.5)))
    _heat_axes(ax, grid.shape)
    return image


def best_head_panel(ax, diagnosis, r=None):
    """Panel (a) of :func:`plot_heads`; returns the legend's handles and labels."""
    from matplotlib.colors import LogNorm
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib import patheffects

    budgets = sorted({row["r"] for row in diagnosis.rows})
    if r is None and budgets:
        r = budgets[-1]
    if r not in budgets:
        raise ValueError(f"plot_heads: no rows at r = {r}; the rows' budgets are "
                         f"{', '.join(map(str, budgets)) or 'none'}")
    best = _best_per_head(diagnosis, r)
    grid = _cells(diagnosis, {h: v for h, (v, _, _) in best.items()})
    worse = _cells(diagnosis, {h: float(w) for h, (_, _, w) in best.items()}) == 1.0
    finite = grid[np.isfinite(grid)]
    low, high = (float(finite.min()), float(finite.max())) if finite.size else (0.1, 10.0)
    if high <= low * 1.01:
        low, high = low / 3, high * 3
    _heat(ax, grid, LogNorm(low, high), "viridis",
          "best relative attention MSE\n(MSE / mean square of the exact output)")
    rows, cols = np.nonzero(worse)
    handles, labels = [], []
    if rows.size:
        ax.scatter(cols, rows, marker="x", s=22, c="white", linewidths=1.1,
                   path_effects=[patheffects.withStroke(linewidth=2.2, foreground="black")])
    handles.append(Line2D([], [], ls="", marker="x", color="white", mec="black", ms=6,
                          path_effects=[patheffects.withStroke(linewidth=2.2, foreground="black")]))
    labels.append(f"best estimator worse than uniform attention (mean of V) by > 2 se: "
                  f"{rows.size} of {grid.size} heads")
    blank = int(np.count_nonzero(~np.isfinite(grid)))
    if blank:
        handles.append(Patch(facecolor=BLANK, edgecolor="0.5"))
        labels.append(f"no finite relative MSE at r = {r}: {blank} heads")
    presets = {key[0] for _, key, _ in best.values()}
    counts = {}
    for _, key, _ in best.values():
        counts[key] = counts.get(key, 0) + 1
    if counts:
        top = max(counts, key=counts.get)  # the first in the rows' order on a tie
        note = (f"most often best: {_estimator_name(top, presets)} "
                f"({counts[top]} of {grid.size} heads)")
    else:
        note = "no estimator has a finite relative MSE here"
    every = {(row["preset"], row["kind"], row["ensemble"]) for row in diagnosis.rows}
    here = {(row["preset"], row["kind"], row["ensemble"]) for row in diagnosis.rows
            if row["r"] == r}
    ax.set_title(f"(a) best relative attention MSE at r = {r}, over the {len(here)} of "
                 f"{len(every)} estimators measured there\n{note}", fontsize=8)
    return handles, labels


def heavy_tail_panel(ax, diagnosis):
    """Panel (b) of :func:`plot_heads`: each head's heavy-tail share."""
    from matplotlib.colors import Normalize

    shares = {info["head"]: info.get("heavy_tail_share") for info in diagnosis.heads}
    grid = _cells(diagnosis, shares)
    _heat(ax, grid, Normalize(0.0, 1.0), "cividis", "heavy-tail share of the sampled pairs")
    pairs = sorted({info["pairs"] for info in diagnosis.heads})
    per_head = f"{pairs[0]} pairs per head" if len(pairs) == 1 else \
        f"{pairs[0]} to {pairs[-1]} pairs per head"
    finite = grid[np.isfinite(grid)]
    low, high = (f"{100 * x:.3g}%" for x in (finite.min(), finite.max())) if finite.size else "--"
    spread = ("; no finite share" if not finite.size else
              f"; every head {low}" if low == high else f"; heads from {low} to {high}")
    ax.set_title(f"(b) heavy-tail share: pairs with |q' + k'|² > "
                 f"{diagnosis.meta['heavy_tail_u2']:g}\n{per_head}{spread}", fontsize=8)


def plot_heads(diagnosis, path, r=None):
    """Draw ``diagnosis``'s heads as a layer x head heat map in one PNG at ``path``; returns the path.

    Parameters
    ----------
    diagnosis : rfkernels.analysis.diagnosis.Diagnosis
        A result of :func:`rfkernels.analysis.diagnose` whose
        ``meta["head_shape"]`` has two axes (layer, head); any other is
        refused with a ``ValueError``, before anything is drawn or written.
    path : str or os.PathLike
        The PNG file; its folder must exist. Written through
        :func:`rfkernels.storage.atomic_write`, as :func:`plot_diagnosis`.
    r : int, optional
        The feature budget of panel (a) (default: the largest r of the
        rows); a ``ValueError`` when no row has it.
    """
    path = os.fspath(path)
    layers, heads = _grid_shape(diagnosis)
    width = min(4.0 + 0.62 * heads, 18.0)
    height = min(2.3 + 0.3 * layers, 12.0)
    with png_figure(path, 1, 2, figsize=(width, height)) as (_, (left, right)):
        handles, labels = best_head_panel(left, diagnosis, r)
        heavy_tail_panel(right, diagnosis)
        legend_below(left, ncol=len(handles), handles=handles, labels=labels)
    return path
