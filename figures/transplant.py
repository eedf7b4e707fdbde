"""The figure of ``rfkernels transplant``: what random-feature attention does to a model's embeddings.

:func:`plot_transplant` draws one PNG with two panels against the feature
budget r (log scale): (a) the mean cosine of each sentence embedding to the
exact model's, (b) the share of sentences whose nearest neighbour is the
exact model's (top-1 agreement); one line per estimator row (a mixed
transplant, which keeps softmax in the heads its diagnosis does not serve,
dashed), 95% error bars over draws, uniform attention as a grey line and the
exact model at 1. Not one of the paper's figures: it draws a result it is
given.
"""

from __future__ import annotations

import os

from ._common import Z95, legend_below, png_figure

__all__ = ["plot_transplant"]

_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9")


def _panel(ax, rows, key, label):
    series = {}
    for row in rows:
        if row["r"] is not None and row[key] is not None:
            series.setdefault(row["estimator"], []).append(row)
    for i, (name, pts) in enumerate(series.items()):
        pts = sorted(pts, key=lambda r: r["r"])
        r = [p["r"] for p in pts]
        y = [p[key] for p in pts]
        err = [0.0 if p[key + "_se"] is None else Z95 * p[key + "_se"] for p in pts]
        ax.errorbar(r, y, yerr=err, color=_COLOURS[i % len(_COLOURS)], marker="o", capsize=2,
                    ls="--" if "mixed" in name else "-", label=name)
    for row in rows:
        if row["r"] is None and row[key] is not None:
            style = {"color": "0.5", "ls": ":"} if row["estimator"].startswith("uniform") else \
                {"color": "k", "ls": "-", "lw": 0.7}
            ax.axhline(row[key], label=row["estimator"], **style)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("feature budget r (features per query and key)")
    ax.set_ylabel(label)


def plot_transplant(result, path):
    """Draw a transplant result (``TransplantResult.to_dict()``) as one PNG at ``path``, atomically."""
    path = os.fspath(path)
    rows = result["rows"]
    meta = result["meta"]
    with png_figure(path, 1, 2, figsize=(9.0, 4.2)) as (fig, (left, right)):
        _panel(left, rows, "cosine", "cosine to the exact model's embedding (mean)")
        _panel(right, rows, "top1", "nearest neighbour kept (top-1 agreement)")
        name = os.path.basename(str(meta["model"]).split(" (")[0].rstrip("/"))
        fig.suptitle(f"{name}: attention replaced in {meta['heads_replaced']} of {meta['heads']} "
                     f"heads, {meta['sentences']} sentences, {meta['draws']} draws (95% intervals)",
                     fontsize=8.5)
        legend_below(left, ncol=3)
    return path
