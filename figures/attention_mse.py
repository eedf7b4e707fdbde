"""Figure 4 of the paper: MSE of the attention output against m.

L = 4096, d = 16, 15 random inputs (:func:`rfkernels.analysis.attention.attention_inputs`),
bidirectional FAVOR attention against the exact blocked softmax attention,
orthogonal vs iid projections and trigonometric vs positive (plus
hyperbolic) features at the study's default σ = 1, m = 2..256; markers are
the mean over inputs with their standard error (error bars: 95%); dotted
lines the first-order (iid) theory. The faithful Figure 4 (m = 2..128, sd
bars, two input scales) is :mod:`rfkernels.figures.figure4`; the regime
over σ and m is :mod:`rfkernels.figures.attention_regime`. The tables are
shared with them (:mod:`rfkernels.figures._attention_study`).
"""

from __future__ import annotations

import numpy as np

from . import _attention_study as study
from ._common import (
    ENSEMBLE_STYLES,
    KIND_COLOURS,
    KIND_LABELS,
    counter,
    interval95,
    legend_below,
    paper_style,
    save,
)

NAME = "attention"
TITLE = "Figure 4 (paper): attention-output MSE against m"
KINDS = ("positive", "hyperbolic", "trig")


#: Seconds of this figure's own work, warm, alone on 2 idle cores: {quick: seconds}; the
#: study's parts (:func:`shared`) have their own (:func:`rfkernels.figures.budget`).
BUDGET = {False: 2.0, True: 1.5}


def settings(quick):
    cfg = study.settings(quick)
    return {"L": cfg["L"], "d": cfg["d"], "m_values": cfg["m_values"], "samples": cfg["samples"]}


def shared(quick, seed):
    """The study's parts :func:`compute` uses: the table and the theory line at σ = 1."""
    return study.parts(quick, seed, tables=[1.0], theory_lines=[1.0])


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    total = study.units(quick, [1.0])
    tick = counter(progress, total)

    table = study.table(quick, seed, 1.0, progress=tick)
    return {"rows": [r for r in table.rows if r["kind"] in KINDS], "meta": table.meta,
            "lines": study.theory_rows(quick, seed, 1.0, cfg["m_values"]),
            "run": {"trials": cfg["samples"], "unit": "random inputs (one projection draw each)",
                    "backend": table.meta["backend"]}}


def plot(data, out_dir):
    rows = data["rows"]
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(5.6, 4.6))
        any_geometric = False
        for kind in KINDS:
            for ensemble in ("iid", "orthogonal"):
                sel = sorted((r for r in rows if r["kind"] == kind and r["ensemble"] == ensemble
                              and r["mse_mean"] is not None), key=lambda r: r["m"])
                m = np.array([r["m"] for r in sel], dtype=float)
                y = np.array([r["mse_mean"] for r in sel])
                se = np.array([np.nan if r["mse_se"] is None else r["mse_se"] for r in sel])
                lower, upper, geo = interval95(y, np.nan_to_num(se))
                shift = 1.05 if ensemble == "orthogonal" else 0.95
                style = {"color": KIND_COLOURS[kind], "ms": 3.5, "lw": 1.0,
                         "marker": ENSEMBLE_STYLES[ensemble]["marker"]}
                ax.errorbar(m * shift, y, yerr=np.where(geo, 0.0, [lower, upper]),
                            ls=ENSEMBLE_STYLES[ensemble]["linestyle"],
                            label=f"{KIND_LABELS[kind]}, {ensemble}", **style)
                if geo.any():  # geometric bars: with caps, so that they read as different
                    any_geometric = True
                    ax.errorbar(m[geo] * shift, y[geo], yerr=[lower[geo], upper[geo]], ls="none",
                                capsize=2.5, elinewidth=0.8, **style)
        for kind in KINDS:
            th = sorted((r for r in data.get("lines", []) if r["kind"] == kind), key=lambda r: r["m"])
            if th:
                ax.plot([r["m"] for r in th], [r["mse_first_order"] for r in th], ls=":", lw=1.4,
                        color=KIND_COLOURS[kind], label=f"{KIND_LABELS[kind]}, first-order theory (iid)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        r0 = rows[0]
        ax.set_xlabel("m (random projections; feature dimension r = m or 2m)")
        ax.set_ylabel("MSE of the attention output")
        ax.set_title(f"bidirectional attention, L = {r0['L']}, d = {r0['d']}, {r0['samples']} random "
                     "inputs;\nmarkers: mean over inputs, bars: 95% (mean ± 1.96 se)", fontsize=8)
        handles, labels = ax.get_legend_handles_labels()
        if any_geometric:
            handles.append(ax.errorbar([np.nan], [np.nan], yerr=[1.0], color="0.3", ls="none",
                                       marker="none", capsize=2.5, elinewidth=0.8))
            labels.append("capped: mean − 1.96 se ≤ 0, so the\n95% interval of log(mean):\n"
                          "mean ×/÷ exp(1.96 se / mean)")
        legend_below(ax, ncol=2, handles=handles, labels=labels)
        return save(fig, out_dir, NAME)
