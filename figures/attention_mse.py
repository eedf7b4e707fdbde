"""Figure 4 of the paper: MSE of the attention output against m.

L = 4096, d = 16, 15 random inputs (:func:`rfkernels.analysis.attention.attention_inputs`),
bidirectional FAVOR attention against the exact blocked softmax attention,
orthogonal vs iid projections and trigonometric vs positive (plus
hyperbolic) features; markers are the mean over inputs with their standard
error (error bars: 95%).
"""

from __future__ import annotations

import numpy as np

from rfkernels.analysis.attention import attention_mse

from ._common import ENSEMBLE_STYLES, KIND_COLOURS, KIND_LABELS, paper_style, save

NAME = "attention"
TITLE = "Figure 4 (paper): attention-output MSE against m"
KINDS = ("positive", "hyperbolic", "trig")


def settings(quick):
    if quick:
        return {"L": 512, "d": 16, "m_values": [4, 16, 64], "samples": 4}
    return {"L": 4096, "d": 16, "m_values": [2, 4, 8, 16, 32, 64, 128, 256], "samples": 15}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    total = cfg["samples"] * (1 + len(cfg["m_values"]) * len(KINDS) * 2)
    done = [0]

    def tick(n=1):
        done[0] += n
        if progress:
            progress(done[0], total)

    table = attention_mse(cfg["L"], cfg["d"], cfg["m_values"], KINDS, ("iid", "orthogonal"),
                          samples=cfg["samples"], seed=seed, progress=tick)
    return {"rows": list(table.rows), "meta": table.meta}


def plot(data, out_dir):
    rows = data["rows"]
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(5.6, 3.8))
        for kind in KINDS:
            for ensemble in ("iid", "orthogonal"):
                sel = sorted((r for r in rows if r["kind"] == kind and r["ensemble"] == ensemble),
                             key=lambda r: r["m"])
                m = np.array([r["m"] for r in sel], dtype=float)
                y = np.array([r["mse_mean"] for r in sel])
                e = 1.96 * np.array([r["mse_se"] for r in sel])
                shift = 1.05 if ensemble == "orthogonal" else 0.95
                ax.errorbar(m * shift, y, yerr=np.minimum(e, 0.999 * y), color=KIND_COLOURS[kind],
                            ls=ENSEMBLE_STYLES[ensemble]["linestyle"],
                            marker=ENSEMBLE_STYLES[ensemble]["marker"], ms=3.5, lw=1.0,
                            label=f"{KIND_LABELS[kind]}, {ensemble}")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        r0 = rows[0]
        ax.set_xlabel("m (random projections; feature dimension r = m or 2m)")
        ax.set_ylabel("MSE of the attention output")
        ax.set_title(f"bidirectional attention, L = {r0['L']}, d = {r0['d']}, "
                     f"{r0['samples']} random inputs (95% error bars)", fontsize=8)
        ax.legend(fontsize=6.5, ncol=1, loc="lower left")
        return save(fig, out_dir, NAME)
