"""Equal feature budget: the estimators at the same feature dimension r.

Positive features spend one feature per projection (m = r); trigonometric
and hyperbolic ones spend two (m = r/2). At equal r the comparison is the
one that matters for memory and compute.

Beyond the paper (``docs/beyond.rst``), the same budget for OPRF features
(one per projection, at each pair's optimal A*, iid and orthogonal) and
simplex positive features (m = r = 2d: two stacked simplex blocks): exact
lines (the ``beyond`` table), with Monte Carlo markers for those that
:mod:`rfkernels.engine` samples (read at run time).
Trials: 250,000 per point (1,000,000 until issue 37: the 95% intervals, at most
±1.5% of the value, are still shorter than a marker on the log axis).
"""

from __future__ import annotations

import numpy as np

from rfkernels import engine, theory

from ._common import (
    KIND_COLOURS,
    KIND_LABELS,
    legend_below,
    mc_errorbars,
    paper_style,
    save,
    theory_curves,
)
from ._mc import mc_point, run_info
from .mse_vs_angle import limit_to_interior

NAME = "feature_budget"
TITLE = "Equal feature budget r: hyperbolic vs positive vs trig"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 10.0, True: 1.5}
D, R, NORM = 16, 32, 0.5
KINDS = ("positive", "hyperbolic", "trig")
PROJECTIONS = {"positive": R, "hyperbolic": R // 2, "trig": R // 2}
#: The estimators after the paper (kind, ensemble), m = R each, and how they are drawn.
BEYOND = (("oprf", "iid"), ("oprf", "orthogonal"), ("positive", "simplex"))
BEYOND_STYLES = {("oprf", "iid"): ("#CC79A7", "--", "o"), ("oprf", "orthogonal"): ("#CC79A7", "-", "s"),
                 ("positive", "simplex"): ("#E69F00", "-.", "^")}
BEYOND_LABELS = {("oprf", "iid"): f"OPRF, A* (m = {R}), iid",
                 ("oprf", "orthogonal"): f"OPRF, A* (m = {R}), orthogonal",
                 ("positive", "simplex"): f"positive (m = {R}), simplex"}
#: Monte Carlo markers for these: the orthogonal and simplex ones, where a reduced sampler exists.
BEYOND_MC = (("oprf", "orthogonal"), ("positive", "simplex"))


def _sampled(kind, ensemble):
    return kind in engine.REDUCED_KINDS and ensemble in engine.REDUCED_ENSEMBLES


#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = tuple((kind, ensemble, "chi") for kind, ensemble in
                (*((kind, "orthogonal") for kind in KINDS), *BEYOND_MC) if _sampled(kind, ensemble))


def compute(quick=False, seed=0, progress=None):
    angles = np.linspace(0.0, np.pi, 181)
    geom = theory.geometry_from_angle(D, NORM, NORM, angles)
    lines = []
    for kind in KINDS:
        for ensemble in ("iid", "orthogonal"):
            mse = theory.exact_mse(geom, None, PROJECTIONS[kind], kind, ensemble=ensemble)
            lines += [{"kind": kind, "ensemble": ensemble, "r": R, "m": PROJECTIONS[kind],
                       "angle": float(a), "mse_exact": float(v)} for a, v in zip(angles, mse)]
    beyond = []
    for kind, ensemble in BEYOND:
        mse = theory.exact_mse(geom, None, R, kind, ensemble=ensemble)
        beyond += [{"kind": kind, "ensemble": ensemble, "r": R, "m": R, "angle": float(a),
                    "mse_exact": float(v)} for a, v in zip(angles, mse)]
    mc_angles = np.linspace(0.3, np.pi - 0.3, 3 if quick else 6)
    jobs = [(kind, "orthogonal", PROJECTIONS[kind]) for kind in KINDS]
    jobs += [(kind, ensemble, R) for kind, ensemble in BEYOND_MC if _sampled(kind, ensemble)]
    points = []
    for kind, ensemble, m in jobs:
        for a in mc_angles:
            point = mc_point(kind=kind, ensemble=ensemble, d=D, m=m, angle=a,
                             norm_x=NORM, norm_y=NORM, quick=quick, seed=seed)
            points.append({**point, "r": R})
            if progress:
                progress(len(points), len(jobs) * len(mc_angles))
    return {"lines": lines, "beyond": beyond, "monte_carlo": points, "run": run_info(quick)}


def plot(data, out_dir):
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(5.4, 4.2))
        theory_curves(ax, data["lines"], "angle",
                      lambda k, e: f"{KIND_LABELS[k]} (m = {PROJECTIONS[k]}), {e}")
        for kind in KINDS:
            pts = [r for r in data["monte_carlo"] if r["kind"] == kind and r["ensemble"] == "orthogonal"]
            mc_errorbars(ax, pts, "angle", KIND_COLOURS[kind], "s")
        for key in BEYOND:
            colour, ls, marker = BEYOND_STYLES[key]
            rows = [r for r in data.get("beyond", []) if (r["kind"], r["ensemble"]) == key]
            if rows:
                ax.semilogy([r["angle"] for r in rows], [r["mse_exact"] for r in rows], color=colour,
                            ls=ls, label=BEYOND_LABELS[key])
            pts = [r for r in data["monte_carlo"] if (r["kind"], r["ensemble"]) == key]
            mc_errorbars(ax, pts, "angle", colour, marker)
        limit_to_interior(ax, data["lines"] + data.get("beyond", []))
        ax.set_xlabel(r"angle between $x$ and $y$ (rad)")
        ax.set_ylabel(r"MSE of the estimate of $\exp(x^\top y)$")
        ax.set_title(f"same feature dimension r = {R} (d = {D}, |x| = |y| = {NORM})\n"
                     "lines exact; markers Monte Carlo (orthogonal, simplex),\n"
                     "95% intervals (hollow: heavy tail)", fontsize=8)
        legend_below(ax, ncol=2)
        return save(fig, out_dir, NAME)
