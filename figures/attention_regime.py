"""The regime map: where the paper's two attention claims hold, over input scale σ and m.

The attention study (L = 4096, d = 16, 15 random inputs, the same inputs
scaled by σ and the same projections at every σ) at σ in 0.25..3 and
m = 2..256. Colour: log10 of the MSE ratio, oriented so that blue means
the paper's claim holds — trig/positive (claim 1: positive features below
trigonometric ones) for iid and orthogonal projections, and iid/orthogonal
(claim 2: orthogonal projections below iid ones) per kind. Markers: circle
where the claim holds (paired z over inputs > 2), square where it is
reversed (z < −2), none where the inputs do not decide; filled where both
series still fall like 1/m (local slope of log MSE against log m within
0.25 of −1), hollow where not. Last panel: that local slope for positive
features with orthogonal projections. Tables:
``attention_regime_rows.csv`` (per σ, m, kind, ensemble) and
``attention_regime_comparisons.csv``.
"""

from __future__ import annotations

import math

import numpy as np
from rfkernels.analysis.attention import (
    CLAIM_Z,
    HEAVY_TAIL_SHARE,
    SLOPE_TOLERANCE,
    attention_regime_from_tables,
)

from . import _attention_study as study
from ._common import counter, legend_below, paper_style, save

NAME = "attention_regime"
TITLE = "Regime map: where positive features and orthogonal projections win, over σ and m"

PANELS = (("trig/positive", "iid", "claim 1, iid: log10(trig / positive)", 3.0),
          ("trig/positive", "orthogonal", "claim 1, orthogonal: log10(trig / positive)", 3.0),
          ("orthogonal/iid", "positive", "claim 2, positive: log10(iid / orthogonal)", 1.0),
          ("orthogonal/iid", "trig", "claim 2, trig: log10(iid / orthogonal)", 1.0),
          ("orthogonal/iid", "hyperbolic", "claim 2, hyperbolic: log10(iid / orthogonal)", 1.0))


#: Seconds of this figure's own work, warm, alone on 2 idle cores: {quick: seconds}; the
#: study's parts (:func:`shared`) have their own (:func:`rfkernels.figures.budget`).
BUDGET = {False: 2.0, True: 2.0}


def settings(quick):
    cfg = study.settings(quick)
    return {"L": cfg["L"], "d": cfg["d"], "samples": cfg["samples"], "m_values": cfg["m_values"],
            "scales": cfg["scales"]}


def shared(quick, seed):
    """The study's parts :func:`compute` uses: the tables at every σ of the map."""
    return study.parts(quick, seed, tables=settings(quick)["scales"])


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    total = study.units(quick, cfg["scales"])
    tick = counter(progress, total)

    tables = {s: study.table(quick, seed, s, progress=tick) for s in cfg["scales"]}
    regime = attention_regime_from_tables(tables)
    return {"rows": regime.rows, "comparisons": regime.comparisons, "L": cfg["L"], "d": cfg["d"],
            "samples": cfg["samples"], "meta": regime.meta,
            "run": {"trials": cfg["samples"], "unit": "random inputs (one projection draw each)",
                    "backend": "numpy"}}


def _grid(ms, scales, value):
    z = np.full((len(scales), len(ms)), np.nan)
    for i, s in enumerate(scales):
        for j, m in enumerate(ms):
            v = value(s, m)
            if v is not None:
                z[i, j] = v
    return z


def plot(data, out_dir):
    comps, rows = data["comparisons"], data["rows"]
    ms = sorted({c["m"] for c in comps})
    scales = sorted({c["input_scale"] for c in comps})
    xi, yi = np.arange(len(ms)), np.arange(len(scales))
    with paper_style() as plt:
        fig, axes = plt.subplots(2, 3, figsize=(10.5, 7.4), sharex=True, sharey=True)
        for ax, (name, within, title, lim) in zip(axes.flat, PANELS):
            here = {(c["input_scale"], c["m"]): c for c in comps
                    if c["comparison"] == name and c["within"] == within}
            sign = 1.0 if name == "trig/positive" else -1.0

            def value(s, m, here=here, sign=sign):
                c = here.get((s, m))
                return None if c is None or not c["ratio"] else sign * math.log10(c["ratio"])

            z = _grid(ms, scales, value)
            mesh = ax.pcolormesh(xi, yi, z, cmap="RdBu", vmin=-lim, vmax=lim, shading="nearest",
                                 rasterized=True)
            fig.colorbar(mesh, ax=ax, shrink=0.85, pad=0.02)
            for key, marker in (("holds", "o"), ("reversed", "s")):
                for ok in (True, False):
                    pts = [(ms.index(c["m"]), scales.index(c["input_scale"])) for c in here.values()
                           if c[key] and c["one_over_m"] == ok]
                    if pts:
                        px, py = zip(*pts)
                        ax.scatter(px, py, marker=marker, s=22, linewidths=0.9,
                                   facecolors="k" if ok else "none", edgecolors="k")
            ax.set_title(title, fontsize=8.5)
        ax = axes.flat[5]
        slope = {(r["input_scale"], r["m"]): r["slope"] for r in rows
                 if r["kind"] == "positive" and r["ensemble"] == "orthogonal"}
        z = _grid(ms, scales, lambda s, m: slope.get((s, m)))
        mesh = ax.pcolormesh(xi, yi, z, cmap="PuOr", vmin=-2, vmax=0, shading="nearest",
                             rasterized=True)
        fig.colorbar(mesh, ax=ax, shrink=0.85, pad=0.02)
        heavy = [(ms.index(r["m"]), scales.index(r["input_scale"])) for r in rows
                 if r["kind"] == "positive" and r["ensemble"] == "orthogonal" and r["heavy_tail"]]
        if heavy:
            px, py = zip(*heavy)
            ax.scatter(px, py, marker="^", s=22, facecolors="none", edgecolors="k", linewidths=0.9)
        ax.set_title("positive, orthogonal: local slope of log MSE vs log m", fontsize=8.5)
        for ax in axes.flat:
            ax.set_xticks(xi, [str(m) for m in ms])
            ax.set_yticks(yi, [f"{s:g}" for s in scales])
        for ax in axes[1]:
            ax.set_xlabel("m (random projections)")
        for ax in axes[:, 0]:
            ax.set_ylabel("input scale σ (E|q|² = σ²)")
        fig.suptitle(f"Where the paper's claims hold: L = {data['L']}, d = {data['d']}, "
                     f"{data['samples']} random inputs per cell, blue = claim holds", fontsize=9)
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], ls="none", marker="o", mfc="k", mec="k", ms=5),
                   Line2D([], [], ls="none", marker="o", mfc="none", mec="k", ms=5),
                   Line2D([], [], ls="none", marker="s", mfc="k", mec="k", ms=5),
                   Line2D([], [], ls="none", marker="s", mfc="none", mec="k", ms=5),
                   Line2D([], [], ls="none", marker="^", mfc="none", mec="k", ms=5)]
        labels = [f"claim holds (paired z > {CLAIM_Z:g}), both series fall like 1/m",
                  "claim holds, a series does not fall like 1/m",
                  f"claim reversed (z < −{CLAIM_Z:g}), both fall like 1/m",
                  "claim reversed, a series does not fall like 1/m",
                  f"heavy tail (one input > {HEAVY_TAIL_SHARE:.0%} of the mean)"]
        legend_below(axes[1, 1], ncol=2, handles=handles, labels=labels,
                     title=f"1/m: |local slope + 1| ≤ {SLOPE_TOLERANCE:g}; no marker: |z| ≤ {CLAIM_Z:g}",
                     fontsize=7.5, title_fontsize=7.5)
        return save(fig, out_dir, NAME)
