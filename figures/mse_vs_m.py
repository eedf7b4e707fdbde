"""Theory against Monte Carlo over the number of projections m, for each estimator.

Lines: Lemma 2 (iid), the exact orthogonal MSE (stacked blocks beyond d,
hence the kinks at multiples of d) and, for positive features with m <= d,
Theorem 2's bound. Markers: Monte Carlo with 95% intervals, iid and
orthogonal; hollow where the tail diagnostic says the interval cannot be
trusted.
Trials: 250,000 per point (1,000,000 until issue 37: the 95% intervals, at most
±2.7% of the value, are still shorter than a marker on these log axes).
"""

from __future__ import annotations

import numpy as np

import rfkernels
from rfkernels import theory

from ._common import ENSEMBLE_STYLES, KIND_COLOURS, KIND_LABELS, legend_below, mc_errorbars, paper_style, save
from ._mc import mc_point, run_info

NAME = "mse_vs_m"
TITLE = "Theory vs Monte Carlo against m (log-log), each estimator"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 14.0, True: 2.0}
D, NORM, ANGLE = 16, 0.5, np.pi / 3
KINDS = ("positive", "hyperbolic", "trig")
#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = tuple((kind, ensemble, "chi") for kind in KINDS for ensemble in ("iid", "orthogonal"))


def compute(quick=False, seed=0, progress=None):
    geom = theory.geometry_from_angle(D, NORM, NORM, ANGLE)
    m_line = np.arange(1, 129)
    lines = []
    for kind in KINDS:
        lemma = theory.lemma2_mse_from_geometry(geom, m_line, kind)
        orthogonal = rfkernels.estimator(kind, ensemble="orthogonal", d=D)
        iid = rfkernels.estimator(kind, d=D).mse(geom, m=m_line)
        ort = orthogonal.mse(geom, m=m_line)
        bound = np.full(m_line.shape, np.nan)
        if orthogonal.at(m=D).supports.theorem2:  # one block of positive features
            sel = m_line <= D
            bound[sel] = theory.theorem2_bound_from_geometry(geom, m_line[sel])
        for m, a, b, c, e in zip(m_line, lemma, iid, ort, bound):
            lines.append({"kind": kind, "m": int(m), "lemma2": float(a), "exact_iid": float(b),
                          "exact_orthogonal": float(c), "theorem2_bound": float(e)})
    m_mc = [1, 4, 16, 64] if quick else [1, 2, 4, 8, 16, 32, 64, 128]
    points, total = [], len(KINDS) * 2 * len(m_mc)
    for kind in KINDS:
        for ensemble in ("iid", "orthogonal"):
            for m in m_mc:
                points.append(mc_point(kind=kind, ensemble=ensemble, d=D, m=m, angle=ANGLE,
                                       norm_x=NORM, norm_y=NORM, quick=quick, seed=seed))
                if progress:
                    progress(len(points), total)
    return {"lines": lines, "monte_carlo": points, "run": run_info(quick)}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.7), sharey=False)
        for ax, kind in zip(axes, KINDS):
            rows = [r for r in data["lines"] if r["kind"] == kind]
            m = np.array([r["m"] for r in rows])
            col = KIND_COLOURS[kind]
            ax.loglog(m, [r["lemma2"] for r in rows], color=col, ls="--", label="Lemma 2 (iid)")
            ax.loglog(m, [r["exact_orthogonal"] for r in rows], color=col, ls="-",
                      label="exact orthogonal")
            if kind == "positive":
                ax.loglog(m, [r["theorem2_bound"] for r in rows], color="k", ls=":", lw=1.2,
                          label="Theorem 2 bound")
            for ensemble in ("iid", "orthogonal"):
                pts = [r for r in data["monte_carlo"] if r["kind"] == kind and r["ensemble"] == ensemble]
                mc_errorbars(ax, pts, "m", col, ENSEMBLE_STYLES[ensemble]["marker"],
                             shift=1.06 if ensemble == "orthogonal" else 0.94, label=f"MC {ensemble}")
            ax.axvline(D, color="0.7", lw=0.7)
            ax.set_xlabel("m (projections)")
            ax.set_title(KIND_LABELS[kind])
        axes[0].set_ylabel(r"MSE of the estimate of $\exp(x^\top y)$")
        # one legend for the three panels (colour: the panel's kind), below them, off the data
        grey = {"color": "0.3"}
        handles = [plt.Line2D([], [], ls="--", **grey), plt.Line2D([], [], ls="-", **grey),
                   plt.Line2D([], [], ls=":", lw=1.2, color="k"),
                   plt.Line2D([], [], ls="none", marker=ENSEMBLE_STYLES["iid"]["marker"], ms=3.5, **grey),
                   plt.Line2D([], [], ls="none", marker=ENSEMBLE_STYLES["orthogonal"]["marker"], ms=3.5,
                              **grey)]
        labels = ["Lemma 2 (iid)", "exact orthogonal", "Theorem 2 bound (positive, m <= d)",
                  "Monte Carlo iid, 95%", "Monte Carlo orthogonal, 95% (hollow: heavy tail)"]
        legend_below(axes[0], ncol=5, handles=handles, labels=labels)
        fig.suptitle(f"d = {D}, |x| = |y| = {NORM}, angle = π/3 (vertical line: m = d)", fontsize=9)
        return save(fig, out_dir, NAME)
