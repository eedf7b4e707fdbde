"""Figure 4 of the paper, faithful: attention-output MSE against m, at two input scales.

L = 4096, d = 16, 15 random inputs (:func:`rfkernels.analysis.attention_inputs`),
bidirectional FAVOR against exact softmax attention, m = 2..128 as in the
paper; positive, trigonometric and hyperbolic features, iid and orthogonal
projections. Markers: mean over the 15 inputs (one projection draw each);
error bars: the standard deviation over the inputs as in the paper
(``bars="ci95"`` in the data: the 95% interval of the mean instead); where
mean − sd <= 0 the bar is drawn in log space, mean ×/÷ exp(sd/mean).
Hollow markers: heavy tail (one input carries more than
:data:`rfkernels.analysis.attention.HEAVY_TAIL_SHARE` of the mean).
Lines: the first-order (delta-method, iid) theory
(:func:`rfkernels.analysis.attention_mse_first_order`). Left: σ =
:data:`_attention_study.CLAIMS_SCALE`, where both of the paper's claims hold
in the regime map; right: σ = 1, the study's default. Bottom row: the same
against the feature dimension r (trig and hyperbolic use 2m features).
"""

from __future__ import annotations

import numpy as np
from rfkernels.analysis.attention import HEAVY_TAIL_SHARE

from . import _attention_study as study
from ._common import (
    ENSEMBLE_STYLES,
    KIND_COLOURS,
    KIND_LABELS,
    Z95,
    counter,
    legend_below,
    paper_style,
    save,
)

NAME = "figure4"
TITLE = "Figure 4, faithful: m = 2..128, sd bars, heavy-tail flags, first-order theory, two σ"
KINDS = ("positive", "hyperbolic", "trig")
M_MAX = 128
#: Error bars: "sd" (the paper's) or "ci95" (95% interval of the mean).
BARS = "sd"


#: Seconds of this figure's own work, warm, alone on 2 idle cores: {quick: seconds}; the
#: study's parts (:func:`shared`) have their own (:func:`rfkernels.figures.budget`).
BUDGET = {False: 3.0, True: 3.0}


def settings(quick):
    cfg = study.settings(quick)
    return {"L": cfg["L"], "d": cfg["d"], "samples": cfg["samples"],
            "m_values": [m for m in cfg["m_values"] if m <= M_MAX],
            "scales": (study.CLAIMS_SCALE, 1.0)}


def shared(quick, seed):
    """The study's parts :func:`compute` uses: the tables and theory lines at both σ."""
    scales = settings(quick)["scales"]
    return study.parts(quick, seed, tables=scales, theory_lines=scales)


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    total = study.units(quick, cfg["scales"])
    tick = counter(progress, total)

    rows, lines = [], []
    for scale in cfg["scales"]:
        t = study.table(quick, seed, scale, progress=tick)
        base = float(np.mean(t.meta["exact_output_mean_square"]))
        for r in t.rows:
            if r["m"] > M_MAX or r["kind"] not in KINDS:
                continue
            share = r["mse_max_share"]
            rows.append({"input_scale": scale, "m": r["m"], "r": r["r"], "kind": r["kind"],
                         "ensemble": r["ensemble"], "samples": r["samples"],
                         "mse_mean": r["mse_mean"], "mse_std": r["mse_std"], "mse_se": r["mse_se"],
                         "mse_max_share": share,
                         "heavy_tail": bool(share is not None and share > HEAVY_TAIL_SHARE),
                         "exact_output_mean_square": base})
        lines += study.theory_rows(quick, seed, scale, cfg["m_values"])
    return {"rows": rows, "lines": lines, "bars": BARS, "L": cfg["L"], "d": cfg["d"],
            "run": {"trials": cfg["samples"], "unit": "random inputs (one projection draw each)",
                    "backend": "numpy"}}


def _panel(ax, rows, lines, x, bars):
    any_log = False
    for kind in KINDS:
        for ens in ("iid", "orthogonal"):
            sel = sorted((r for r in rows if r["kind"] == kind and r["ensemble"] == ens
                          and r["mse_mean"] is not None), key=lambda r: r[x])
            if not sel:
                continue
            xs = np.array([r[x] for r in sel], dtype=float) * (1.05 if ens == "orthogonal" else 0.95)
            y = np.array([r["mse_mean"] for r in sel])
            spread = np.array([0.0 if r["mse_std"] is None else
                               (r["mse_std"] if bars == "sd" else Z95 * r["mse_se"]) for r in sel])
            lower, upper, log_space = study.bars(y, spread)
            any_log |= bool(log_space.any())
            heavy = np.array([r["heavy_tail"] for r in sel])
            colour = KIND_COLOURS[kind]
            marker = ENSEMBLE_STYLES[ens]["marker"]
            ax.plot(xs, y, color=colour, ls=ENSEMBLE_STYLES[ens]["linestyle"], lw=0.9,
                    label=f"{KIND_LABELS[kind]}, {ens}")
            for flag in (False, True):
                pick = heavy == flag
                if pick.any():
                    ax.errorbar(xs[pick], y[pick], yerr=[lower[pick], upper[pick]], ls="none",
                                marker=marker, ms=3.5, color=colour, elinewidth=0.7,
                                mfc="none" if flag else colour, capsize=2 if flag else 0)
        th = sorted((r for r in lines if r["kind"] == kind), key=lambda r: r[x])
        if th:
            ax.plot([r[x] for r in th], [r["mse_first_order"] for r in th], color=KIND_COLOURS[kind],
                    ls=":", lw=1.4, label=f"{KIND_LABELS[kind]}, first-order theory (iid)")
    base = rows[0]["exact_output_mean_square"] if rows else None
    if base:
        ax.axhline(base, color="0.5", lw=0.8, ls="-.", label="exact outputs' mean square (MSE of 0)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    return any_log


def plot(data, out_dir, bars=None):
    bars = bars or data.get("bars", BARS)
    rows, lines = data["rows"], data.get("lines", [])
    scales = sorted({r["input_scale"] for r in rows}, key=lambda s: (s == 1.0, s))
    with paper_style() as plt:
        fig, axes = plt.subplots(2, len(scales), figsize=(9.2, 8.6), squeeze=False)
        any_log = False
        for col, scale in enumerate(scales):
            here = [r for r in rows if r["input_scale"] == scale]
            th = [r for r in lines if r["input_scale"] == scale]
            for row, x in enumerate(("m", "r")):
                ax = axes[row, col]
                any_log |= _panel(ax, here, th, x, bars)
                ax.set_xlabel("m (random projections)" if x == "m" else
                              "r (feature dimension: m positive, 2m trig and hyperbolic)")
                ax.set_title(f"input scale σ = {scale:g} (E|q|² = E|k|² = {scale * scale:g})"
                             + ("" if x == "m" else ", equal feature budget"), fontsize=8.5)
            axes[0, col].sharey(axes[1, col])
        for row in range(2):
            axes[row, 0].set_ylabel("MSE of the attention output")
        what = ("bars: sd over inputs" if bars == "sd" else "bars: 95% interval of the mean")
        fig.suptitle(f"Figure 4 (paper) setup: L = {data['L']}, d = {data['d']}, "
                     f"{rows[0]['samples']} random inputs; markers: mean over inputs, {what};\n"
                     f"hollow, capped: heavy tail (one input > {HEAVY_TAIL_SHARE:.0%} of the mean)"
                     + ("; bars in log space where mean − spread ≤ 0: mean ×/÷ exp(spread/mean)"
                        if any_log else ""), fontsize=8.5)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        legend_below(axes[0, 0], ncol=3, handles=handles, labels=labels, fontsize=7.5)
        return save(fig, out_dir, NAME)
