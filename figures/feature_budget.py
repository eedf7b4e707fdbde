"""Equal feature budget: the three estimators at the same feature dimension r.

Positive features spend one feature per projection (m = r); trigonometric
and hyperbolic ones spend two (m = r/2). At equal r the comparison is the
one that matters for memory and compute.
"""

from __future__ import annotations

import numpy as np

from rfkernels import theory

from ._common import KIND_COLOURS, KIND_LABELS, legend_below, mc_errorbars, paper_style, save, theory_curves
from ._mc import mc_point, run_info
from .mse_vs_angle import limit_to_interior

NAME = "feature_budget"
TITLE = "Equal feature budget r: hyperbolic vs positive vs trig"
D, R, NORM = 16, 32, 0.5
KINDS = ("positive", "hyperbolic", "trig")
PROJECTIONS = {"positive": R, "hyperbolic": R // 2, "trig": R // 2}


def compute(quick=False, seed=0, progress=None):
    angles = np.linspace(0.0, np.pi, 181)
    geom = theory.geometry_from_angle(D, NORM, NORM, angles)
    lines = []
    for kind in KINDS:
        for ensemble in ("iid", "orthogonal"):
            mse = theory.exact_mse_from_geometry(geom, PROJECTIONS[kind], kind, ensemble=ensemble)
            lines += [{"kind": kind, "ensemble": ensemble, "r": R, "m": PROJECTIONS[kind],
                       "angle": float(a), "mse_exact": float(v)} for a, v in zip(angles, mse)]
    mc_angles = np.linspace(0.3, np.pi - 0.3, 3 if quick else 6)
    points = []
    for kind in KINDS:
        for a in mc_angles:
            point = mc_point(kind=kind, ensemble="orthogonal", d=D, m=PROJECTIONS[kind], angle=a,
                             norm_x=NORM, norm_y=NORM, quick=quick, seed=seed)
            points.append({**point, "r": R})
            if progress:
                progress(len(points), len(KINDS) * len(mc_angles))
    return {"lines": lines, "monte_carlo": points, "run": run_info(quick)}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(5.4, 4.2))
        theory_curves(ax, data["lines"], "angle",
                      lambda k, e: f"{KIND_LABELS[k]} (m = {PROJECTIONS[k]}), {e}")
        for kind in KINDS:
            pts = [r for r in data["monte_carlo"] if r["kind"] == kind]
            mc_errorbars(ax, pts, "angle", KIND_COLOURS[kind], "s")
        limit_to_interior(ax, data["lines"])
        ax.set_xlabel(r"angle between $x$ and $y$ (rad)")
        ax.set_ylabel(r"MSE of the estimate of $\exp(x^\top y)$")
        ax.set_title(f"same feature dimension r = {R} (d = {D}, |x| = |y| = {NORM})\n"
                     "lines exact; markers Monte Carlo, orthogonal, 95% intervals "
                     "(hollow: heavy tail)", fontsize=8)
        legend_below(ax, ncol=2)
        return save(fig, out_dir, NAME)
