"""How much orthogonal projections gain over iid ones, against the dimension d.

Exact MSE_orthogonal / MSE_iid (theory only) for several m/d and |x + y|,
beside the ratio Theorem 2 guarantees for positive features (bound /
Lemma 2, m <= d). For m a multiple of d the ratio equals the m = d one
(P/m = d - 1 either way). Trigonometric features gain far more at small
|x - y|; at large |x - y| their gain vanishes, and for some d the pair
covariance even turns positive (ratio above 1 by 0.5% at d = 3,
|x - y|² = 20).
"""

from __future__ import annotations

import numpy as np

from rfkernels import theory

from ._common import paper_style, save

NAME = "orthogonality_gain"
TITLE = "Orthogonality gain MSE_orth / MSE_iid against d"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 2.0, True: 2.0}
M_OVER_D = (0.25, 0.5, 1.0)  # m a multiple of d gives the m = d ratio exactly
NORM_SUMS = (0.5, 1.5)
TRIG_NORM_DIFFS = (1.0, 2.5)


def compute(quick=False, seed=0, progress=None):
    # multiples of 4, so that every m/d is a whole number of projections
    d = 4 * np.unique(np.round(np.geomspace(1, 256, 12 if quick else 40)).astype(int))
    rows = []
    for kind, sizes in (("positive", NORM_SUMS), ("trig", TRIG_NORM_DIFFS)):
        for size in sizes:
            # |x| = |y|, angle π/2: |x + y| = |x - y| = size
            r = size / np.sqrt(2.0)
            geom = theory.geometry_from_angle(d, r, r, np.pi / 2)
            for ratio in M_OVER_D:
                m = np.maximum(1, np.round(ratio * d)).astype(int)
                iid = theory.exact_mse(geom, None, m, kind, log=True)
                ort = theory.exact_mse(geom, None, m, kind, ensemble="orthogonal", log=True)
                guaranteed = np.full(d.shape, np.nan)
                if kind == "positive" and ratio <= 1:
                    guaranteed = np.exp(theory.theorem2_bound_from_geometry(geom, m, log=True) - iid)
                for di, mi, o, i, gr in zip(d, m, ort, iid, guaranteed):
                    rows.append({"kind": kind, "size": size, "m_over_d": ratio, "d": int(di),
                                 "m": int(mi), "gain": float(np.exp(o - i)),
                                 "theorem2_ratio": float(gr)})
    return {"rows": rows, "run": {"trials": None, "backend": None}}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.0, 4.0))
        styles = {0.25: ":", 0.5: "--", 1.0: "-"}
        for ax, kind, sizes, what in ((ax1, "positive", NORM_SUMS, "|x+y|"),
                                      (ax2, "trig", TRIG_NORM_DIFFS, "|x-y|")):
            for ci, size in enumerate(sizes):
                for ratio in M_OVER_D:
                    rows = [r for r in data["rows"] if r["kind"] == kind and r["size"] == size
                            and r["m_over_d"] == ratio]
                    ax.semilogx([r["d"] for r in rows], [r["gain"] for r in rows], color=f"C{ci}",
                                ls=styles[ratio], label=f"{what} = {size}, m = {ratio:g}d")
                    if kind == "positive" and ratio <= 1:
                        ax.semilogx([r["d"] for r in rows], [r["theorem2_ratio"] for r in rows],
                                    color=f"C{ci}", ls=styles[ratio], lw=0.6, alpha=0.6, marker=".",
                                    ms=2)
            ax.axhline(1.0, color="0.5", lw=0.8)
            ax.set_xlabel("dimension d")
            ax.set_title(f"{kind} features (angle π/2, |x| = |y|)")
        ax1.set_ylabel(r"$\mathrm{MSE}_{orth} / \mathrm{MSE}_{iid}$ (exact)")
        # legends below each panel (never on the curves); the note on the thin lines is an entry
        handles, labels = ax1.get_legend_handles_labels()
        handles.append(plt.Line2D([], [], color="0.4", lw=0.6, marker=".", ms=2))
        labels.append("thin, with dots: Theorem 2's\nguarantee (bound / Lemma 2)")
        for ax, (h, lab) in ((ax1, (handles, labels)), (ax2, ax2.get_legend_handles_labels())):
            ax.legend(h, lab, fontsize=6.5, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.2),
                      borderaxespad=0.0)
        return save(fig, out_dir, NAME)
