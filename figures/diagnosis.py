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
"""

from __future__ import annotations

import io
import math
import os

import numpy as np

from rfkernels.storage import atomic_write

from ._common import (
    ENSEMBLE_STYLES,
    KIND_COLOURS,
    KIND_LABELS,
    interval95,
    legend_below,
    naming,
    paper_style,
)

__all__ = ["histogram_panel", "plot_diagnosis", "relative_panel"]

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
    with paper_style() as plt:

        fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 4.4), width_ratios=(3, 2))
        try:
            handles, labels = relative_panel(left, diagnosis)
            histogram_panel(right, diagnosis)
            legend_below(left, ncol=3, handles=handles, labels=labels)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
        finally:
            plt.close(fig)
    image = buf.getvalue()
    with naming(path):
        # atomic_write's file object is text; the image bytes go to its binary buffer
        atomic_write(path, lambda fh: fh.buffer.write(image))
    return path
