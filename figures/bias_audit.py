"""Bias audit: the reference code's unfixed QR against the Haar-correct sampler.

Relative bias of the orthogonal positive estimator (chi norms, literal
sampling, d = m = 16, |u| = 1) along each basis direction of u = x + y, along
(1, ..., 1) and along a random direction, with 95% intervals. The
Haar-correct sampler is unbiased everywhere; without the sign fix the first
row of Q always points away from e_1, which biases the estimate negatively
for most basis directions, positively for the last one, and most strongly
along (1, ..., 1).
Trials: 10,000 per direction (20,000 until issue 37): the intervals, ±0.55%,
still separate every biased direction of the unfixed QR (|z| >= 7.7, at 2-15%
bias) from zero.
"""

from __future__ import annotations

import numpy as np

from rfkernels.analysis.comparison import bias_audit

from ._common import paper_style, save

NAME = "bias_audit"
TITLE = "Bias of the orthogonal positive estimator: unfixed QR vs Haar"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 6.0, True: 2.0}
D = M = 16


def compute(quick=False, seed=0, progress=None):
    dirs = np.vstack([np.eye(D), np.ones(D), np.random.default_rng(12345).standard_normal(D)])
    labels = [f"e{i + 1}" for i in range(D)] + ["ones", "random"]
    trials = 2000 if quick else 10000
    rows = bias_audit(d=D, m=M, directions=dirs, trials=trials, seed=seed)
    for r in rows:
        r["direction"] = labels[int(r["direction"].split("_")[1])]
    if progress:
        progress(1, 1)
    # bias_audit draws with the core's NumPy samplers
    return {"rows": rows, "run": {"trials": trials, "unit": "trials per direction", "backend": "numpy"}}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        labels = list(dict.fromkeys(r["direction"] for r in data["rows"]))
        x = np.arange(len(labels))
        for k, (ensemble, colour, shift) in enumerate((("orthogonal", "C0", -0.15),
                                                       ("orthogonal-unfixed-qr", "C1", 0.15))):
            rows = {r["direction"]: r for r in data["rows"] if r["ensemble"] == ensemble}
            y = np.array([100 * rows[l_]["relative_bias"] for l_ in labels])
            e = np.array([196 * rows[l_]["stderr"] for l_ in labels])
            name = "Haar (sign of diag R fixed)" if ensemble == "orthogonal" else "reference code (unfixed QR)"
            ax.errorbar(x + shift, y, yerr=e, fmt="o", color=colour, ms=3.5, label=name)
        ax.axhline(0.0, color="0.4", lw=0.8)
        ax.set_xticks(x)
        # rotated: the longer names (ones, random) would run together side by side
        ax.set_xticklabels(labels, rotation=45, ha="right", rotation_mode="anchor", fontsize=6.5)
        ax.set_xlabel("direction of u = x + y (|u| = 1)")
        ax.set_ylabel("relative bias of the estimate (%)")
        ax.set_title(f"positive features, orthogonal, chi norms, d = m = {D} (95% intervals)")
        ax.legend(loc="lower left")
        return save(fig, out_dir, NAME)
