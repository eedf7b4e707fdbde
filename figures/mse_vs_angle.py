"""MSE against the angle between x and y, for the three estimators at fixed |x|, |y|.
Trials: 250,000 per point (1,000,000 until issue 37: the 95% intervals, at most
±2.3% of the value, are still shorter than a marker on the log axis).
"""

from __future__ import annotations

import numpy as np

import rfkernels
from rfkernels import theory

from ._common import (ENSEMBLE_STYLES, KIND_COLOURS, KIND_LABELS, legend_below, mc_errorbars, paper_style,
                      save, theory_curves)
from ._mc import mc_point, run_info

NAME = "mse_vs_angle"
TITLE = "MSE against the angle, three estimators, iid and orthogonal"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 8.0, True: 1.5}
D, M, NORM = 16, 16, 0.5
KINDS = ("positive", "hyperbolic", "trig")
#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = tuple((kind, ensemble, "chi") for kind in KINDS for ensemble in ("iid", "orthogonal"))


def compute(quick=False, seed=0, progress=None):
    angles = np.linspace(0.0, np.pi, 181)
    geom = theory.geometry_from_angle(D, NORM, NORM, angles)
    lines = []
    for kind in KINDS:
        for ensemble in ("iid", "orthogonal"):
            mse = rfkernels.estimator(kind, ensemble=ensemble, m=M).mse(geom)
            lines += [{"kind": kind, "ensemble": ensemble, "angle": float(a), "mse_exact": float(v)}
                      for a, v in zip(angles, mse)]
    mc_angles = np.linspace(0.25, np.pi - 0.25, 3 if quick else 7)
    points, total = [], len(KINDS) * 2 * len(mc_angles)
    for kind in KINDS:
        for ensemble in ("iid", "orthogonal"):
            for a in mc_angles:
                points.append(mc_point(kind=kind, ensemble=ensemble, d=D, m=M, angle=a,
                                       norm_x=NORM, norm_y=NORM, quick=quick, seed=seed))
                if progress:
                    progress(len(points), total)
    return {"lines": lines, "monte_carlo": points, "run": run_info(quick)}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(5.4, 4.3))
        theory_curves(ax, data["lines"], "angle", lambda k, e: f"{KIND_LABELS[k]}, {e}")
        for kind in KINDS:
            for ensemble in ("iid", "orthogonal"):
                pts = [r for r in data["monte_carlo"] if r["kind"] == kind and r["ensemble"] == ensemble]
                mc_errorbars(ax, pts, "angle", KIND_COLOURS[kind], ENSEMBLE_STYLES[ensemble]["marker"])
        limit_to_interior(ax, data["lines"])
        ax.set_xlabel(r"angle between $x$ and $y$ (rad)")
        ax.set_ylabel(r"MSE of the estimate of $\exp(x^\top y)$")
        ax.set_title(f"d = {D}, m = {M}, |x| = |y| = {NORM}; lines exact,\nmarkers Monte Carlo with 95% intervals (hollow: heavy tail)")
        handles, labels = ax.get_legend_handles_labels()
        for ensemble in ("iid", "orthogonal"):
            handles.append(plt.Line2D([], [], ls="none", color="0.3", ms=3.5,
                                      marker=ENSEMBLE_STYLES[ensemble]["marker"]))
            labels.append(f"Monte Carlo, {ensemble}")
        legend_below(ax, ncol=2, handles=handles, labels=labels)
        return save(fig, out_dir, NAME)


def limit_to_interior(ax, lines):
    """y-range of the curves away from the angles where an estimator is exact (MSE -> 0)."""
    inner = [r["mse_exact"] for r in lines if 0.15 < r["angle"] < 3.0]
    ax.set_ylim(min(inner) / 3.0, max(inner) * 3.0)
