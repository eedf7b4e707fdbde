"""Angular hybrid random features against their two parts, over the angle (issue 41).

The relative MSE (MSE / SM^2) against the angle between x and y, exact (iid
rows, chi norms; :mod:`rfkernels.estimators.hybrid`), for d = 16 and equal
lengths :math:`|x| = |y|` = :data:`LENGTHS`: trig, positive and the hybrid
with the trigonometric estimator weighted :math:`1 - \\theta/\\pi` (kind
``"hybrid"``) and :math:`\\theta/\\pi` (reversed), beside Monte Carlo
points of both hybrids (± 2 standard errors; checked against the exact value in the
main job's report, z and the tail's k-hat) where :math:`|x + y|^2 \\le`
:data:`MC_REACH` (beyond it the positive part's squared error is heavy
tailed: at :math:`|x| = 1`, angle 0.2, 1,000 draws read 0.013 against the
exact 0.13, with error bars that did not cover it). Left: every estimator at the
same m = 16 projections (the paper's Figure 1 comparison). Right: trig and
positive at the hybrid's feature count r = 27 m = 432 (``rank``'s
comparison). docs/qmc.rst reads it.
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels import draw_kind_projections, estimator, theory
from rfkernels.analysis.tail import TAIL_K_MAX, pareto_k_hat
from rfkernels.estimators import hybrid

from ._common import counter, legend_below, paper_style, save

NAME = "hybrid"
TITLE = "Angular hybrid random features against trig and positive ones, over the angle"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 3.0, True: 2.0}
D, M = 16, 16
LENGTHS = (0.5, 1.0)
#: Monte Carlo points only where |x + y|^2 is at most this (a tame tail of the positive part).
MC_REACH = 2.5
COLOURS = {"trig": "#0072B2", "positive": "#009E73", "hybrid": "#D55E00", "reversed": "#CC79A7"}


def settings(quick):
    if quick:
        return {"angles": 40, "mc_angles": [0.4, 1.6, 2.8], "draws": 200}
    return {"angles": 120, "mc_angles": [0.2, 0.8, 1.4, 2.0, 2.6, 3.0], "draws": 1000}


def _monte_carlo(x, y, draws):
    """Per placement: the relative squared errors over ``draws`` draws of W with its angular rows."""
    sm = math.exp(float(x @ y))
    a, b, p = np.array([hybrid.components(x, y, draw_kind_projections(M, D, "hybrid", seed=t))
                        for t in range(draws)]).T
    return {name: ((trig_weight * a + (1.0 - trig_weight) * b) / sm - 1.0) ** 2
            for name, trig_weight in (("hybrid", 1.0 - p), ("reversed", p))}


def _point(rho, angle, curve, sq, exact):
    """A Monte Carlo row the main job's report checks: z against the exact value, the tail's k-hat."""
    mean, se = float(sq.mean()), float(sq.std(ddof=1) / math.sqrt(sq.size))
    k = pareto_k_hat(sq)
    return {"length": rho, "angle": angle, "curve": curve, "m": M, "trials": int(sq.size),
            "relative_mse": mean, "stderr": se, "mse_exact": exact, "z": (mean - exact) / se,
            "k_hat": k, "tail_ok": bool(k < TAIL_K_MAX)}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    tick = counter(progress, len(LENGTHS))
    r = hybrid.FEATURES_PER_PROJECTION * M
    sizes = {"same m": {"trig": M, "positive": M}, f"same r = {r}": {"trig": r // 2, "positive": r}}
    rows, points = [], []
    for rho in LENGTHS:
        for angle in np.linspace(0.01, math.pi - 0.01, cfg["angles"]):
            x, y = theory.pair(D, rho, rho, float(angle))
            log_k2 = 2.0 * float(x @ y)
            for panel, ms in sizes.items():
                for kind, m in ms.items():
                    rel = math.exp(math.log(estimator(kind, m=m, d=D).mse(x, y)) - log_k2)
                    rows.append({"panel": panel, "length": rho, "curve": kind, "m": m,
                                 "angle": float(angle), "relative_mse": rel, "stderr": None})
                for curve, place in (("hybrid", "1-theta/pi"), ("reversed", "theta/pi")):
                    log_mse = float(hybrid.log_mse_placed(theory.geometry(x, y), M, (x, y), place))
                    rel = math.exp(log_mse - log_k2)
                    rows.append({"panel": panel, "length": rho, "curve": curve, "m": M,
                                 "angle": float(angle), "relative_mse": rel, "stderr": None})
        for angle in cfg["mc_angles"]:
            x, y = theory.pair(D, rho, rho, angle)
            if float((x + y) @ (x + y)) > MC_REACH:
                continue
            log_k2 = 2.0 * float(x @ y)
            for curve, sq in _monte_carlo(x, y, cfg["draws"]).items():
                place = "1-theta/pi" if curve == "hybrid" else "theta/pi"
                exact = math.exp(float(hybrid.log_mse_placed(theory.geometry(x, y), M, (x, y), place))
                                 - log_k2)
                points.append(_point(rho, angle, curve, sq, exact))
        tick()
    return {"rows": rows, "monte_carlo": points,
            "run": {"trials": cfg["draws"], "unit": "draws of W per Monte Carlo point", "backend": "numpy"}}


def plot(data, out_dir):
    rows = data["rows"]
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    labels = {"trig": "trig", "positive": "positive", "hybrid": "hybrid, trig weighted 1 - theta/pi",
              "reversed": "hybrid, trig weighted theta/pi (reversed)"}
    with paper_style() as plt:
        fig, axes = plt.subplots(1, len(panels) * len(LENGTHS), figsize=(10.4, 3.6))
        for ax, (panel, rho) in zip(np.atleast_1d(axes), [(p, L) for p in panels for L in LENGTHS]):
            here = [r for r in rows if r["panel"] == panel and r["length"] == rho]
            sizes = []
            for curve, colour in COLOURS.items():
                pts = sorted((r for r in here if r["curve"] == curve), key=lambda r: r["angle"])
                if curve in ("trig", "positive"):
                    sizes.append(f"{curve} {pts[0]['m']}")
                ax.plot([p["angle"] for p in pts], [p["relative_mse"] for p in pts],
                        "--" if curve == "reversed" else "-", color=colour, lw=1.0, label=labels[curve])
                mc = [r for r in data["monte_carlo"] if r["length"] == rho and r["curve"] == curve]
                for tame in (True, False):  # a heavy tail (k-hat >= 1/2): hollow, its error bar unreliable
                    pts_mc = [p for p in mc if p["tail_ok"] is tame]
                    if pts_mc:
                        ax.errorbar([p["angle"] for p in pts_mc], [p["relative_mse"] for p in pts_mc],
                                    yerr=[min(2 * p["stderr"], 0.99 * p["relative_mse"]) for p in pts_mc],
                                    fmt="o", color=colour, ms=3, capsize=1.5,
                                    mfc=colour if tame else "none")
            ax.set_yscale("log")
            ax.set_xlabel("angle between x and y (radians)")
            ax.set_title(f"{panel}, |x| = |y| = {rho}\nm: {', '.join(sizes)}, hybrid {M}", fontsize=7)
        handles, names = np.atleast_1d(axes)[0].get_legend_handles_labels()
        handles.append(plt.Line2D([], [], color="0.3", marker="o", ms=3, lw=0))
        names.append("Monte Carlo, ± 2 se (hollow: heavy tail)")
        legend_below(np.atleast_1d(axes)[0], ncol=5, handles=handles, labels=names, fontsize=7)
        np.atleast_1d(axes)[0].set_ylabel("relative MSE")
        return save(fig, out_dir, NAME)
