"""The Kernel Zoo in attention error: ELU+1, DPFP-ν and FAVOR+ against the state size d_dot.

Attention-output MSE against exact softmax attention on the inputs of the
attention study (:func:`rfkernels.analysis.attention.attention_inputs`,
L = 4096, d = 16, 15 random inputs, the same inputs for every series), at
the study's input scales σ = 1 (its default) and σ = 2 (raw N(0, 1) entries
with the Transformer's temperature). Deterministic maps
(:func:`rfkernels.analysis.feature_map_attention_mse`): ELU+1 (d_dot = d)
and DPFP-ν (d_dot = 2dν); FAVOR+ (:func:`rfkernels.analysis.attention_mse`,
positive features, iid and orthogonal) with m = d_dot. Markers: mean over
inputs; bars: 95% over inputs (for FAVOR+ they include the projection draw).
The dotted line is the exact outputs' mean square: the MSE of returning 0.
"""

from __future__ import annotations

import numpy as np
from rfkernels.analysis.attention import attention_mse, feature_map_attention_mse

from ._common import (
    ENSEMBLE_STYLES,
    KIND_COLOURS,
    counter,
    interval95,
    legend_below,
    paper_style,
    save,
)

NAME = "zoo_attention"
TITLE = "Kernel Zoo: attention-output MSE of ELU+1, DPFP-ν and FAVOR+ against d_dot"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 12.0, True: 1.0}
SCALES = (1.0, 2.0)
ZOO_COLOURS = {"elu1": "#CC79A7", "dpfp": "#E69F00"}


def settings(quick):
    if quick:
        return {"L": 512, "d": 16, "nu_values": [1, 2, 3], "m_values": [16, 32, 64, 96],
                "samples": 3}
    return {"L": 4096, "d": 16, "nu_values": [1, 2, 3, 4, 8],
            "m_values": [16, 32, 64, 96, 128, 256], "samples": 15}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    per_scale = cfg["samples"] * ((1 + 1 + len(cfg["nu_values"]))
                                  + (1 + 2 * len(cfg["m_values"])))
    total = len(SCALES) * per_scale
    tick = counter(progress, total)

    rows, baseline = [], []
    for scale in SCALES:
        zoo = feature_map_attention_mse(cfg["L"], cfg["d"], ("elu1", "dpfp"), cfg["nu_values"],
                                        samples=cfg["samples"], seed=seed, input_scale=scale,
                                        progress=tick)
        favor = attention_mse(cfg["L"], cfg["d"], cfg["m_values"], ("positive",),
                              ("iid", "orthogonal"), samples=cfg["samples"], seed=seed,
                              input_scale=scale, progress=tick)
        for r in zoo.rows:
            rows.append({"input_scale": scale, "map": "elu1" if r["kind"] == "elu1" else "dpfp",
                         "nu": r["nu"], "m": None, "ensemble": None, "d_dot": r["d_dot"],
                         "samples": r["samples"], "mse_mean": r["mse_mean"], "mse_se": r["mse_se"],
                         "mse_max_share": r["mse_max_share"]})
        for r in favor.rows:
            rows.append({"input_scale": scale, "map": "favor+", "nu": None, "m": r["m"],
                         "ensemble": r["ensemble"], "d_dot": r["r"], "samples": r["samples"],
                         "mse_mean": r["mse_mean"], "mse_se": r["mse_se"],
                         "mse_max_share": r["mse_max_share"]})
        ms = zoo.meta["exact_output_mean_square"]  # the same inputs as favor's
        baseline.append({"input_scale": scale, "exact_output_mean_square": float(np.mean(ms))})
    return {"rows": rows, "baseline": baseline, "L": cfg["L"], "d": cfg["d"],
            "run": {"trials": cfg["samples"], "unit": "random inputs (one projection draw each)",
                    "backend": "numpy"}}


def _series(ax, sel, colour, marker, ls, label, shift=1.0):
    sel = sorted((r for r in sel if r["mse_mean"] is not None), key=lambda r: r["d_dot"])
    if not sel:
        return
    x = np.array([r["d_dot"] for r in sel], dtype=float) * shift
    y = np.array([r["mse_mean"] for r in sel])
    se = np.array([0.0 if r["mse_se"] is None else r["mse_se"] for r in sel])
    lower, upper, _ = interval95(y, se)
    ax.errorbar(x, y, yerr=[lower, upper], color=colour, marker=marker, ms=4, lw=1.0, ls=ls,
                capsize=2, elinewidth=0.8, label=label)


def plot(data, out_dir):
    rows = data["rows"]
    scales = sorted({r["input_scale"] for r in rows})
    with paper_style() as plt:
        fig, axes = plt.subplots(1, len(scales), figsize=(8.4, 4.4), sharey=True)
        axes = np.atleast_1d(axes)
        for ax, scale in zip(axes, scales):
            here = [r for r in rows if r["input_scale"] == scale]
            for ens in ("iid", "orthogonal"):
                _series(ax, [r for r in here if r["map"] == "favor+" and r["ensemble"] == ens],
                        KIND_COLOURS["positive"], ENSEMBLE_STYLES[ens]["marker"],
                        ENSEMBLE_STYLES[ens]["linestyle"], f"FAVOR+ ({ens}), m = d_dot",
                        shift=1.04 if ens == "orthogonal" else 0.96)
            _series(ax, [r for r in here if r["map"] == "dpfp"], ZOO_COLOURS["dpfp"], "D", "-",
                    "DPFP-ν, ν = " + ", ".join(str(r["nu"]) for r in here if r["map"] == "dpfp"))
            _series(ax, [r for r in here if r["map"] == "elu1"], ZOO_COLOURS["elu1"], "^", "none",
                    "ELU+1 (d_dot = d)")
            base = [b["exact_output_mean_square"] for b in data["baseline"]
                    if b["input_scale"] == scale]
            if base:
                ax.axhline(base[0], color="0.4", ls=":", lw=1.0,
                           label="exact outputs' mean square (MSE of 0)")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("d_dot (state size: features per key)")
            ax.set_title(f"σ = {scale:g} (E|q|² = E|k|² = {scale * scale:g})", fontsize=9)
        axes[0].set_ylabel("MSE of the attention output")
        n = rows[0]["samples"]
        fig.suptitle(f"Linear attention against exact softmax attention, L = {data['L']}, "
                     f"d = {data['d']}, {n} random inputs;\nmarkers: mean over inputs, "
                     "bars: 95% (mean ± 1.96 se) over inputs", fontsize=9)
        handles, labels = axes[0].get_legend_handles_labels()
        legend_below(axes[0], ncol=3, handles=handles, labels=labels)
        return save(fig, out_dir, NAME)
