"""Randomized quasi-Monte Carlo frequencies against iid and orthogonal ones (issue 41).

Left, two panels: the relative MSE of the trigonometric estimate of
:math:`e^{x\\cdot y}` against the feature budget r = 2m on one pair
(:math:`|x| = |y| = 0.6`, angle 1, turned by a fixed random rotation: a Sobol
set is not rotation invariant) in d = 4 and d = 32, over independent
scrambles or draws (± 2 standard errors), for ensembles ``"iid"``,
``"orthogonal"`` and ``"qmc"``; the legend gives each curve's fitted slope
of log MSE against log r (iid's is -1). Right, four panels: the relative
Gram error :math:`\\|\\hat K - K\\|_F^2/\\|K\\|_F^2` of the Gaussian kernel's
cos/sin features (:class:`rfkernels.RandomFourierFeatures`, ``kind="trig"``)
on the training rows of scikit-learn's four data sets
(:mod:`rfkernels.analysis.real_data`'s protocol, median-heuristic gamma),
over :data:`SEEDS` seeds each, against r. docs/qmc.rst reads it.
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels import RandomFourierFeatures, draw_projections, estimate, theory
from rfkernels.analysis import real_data as rd
from rfkernels.fourier import squared_distances
from rfkernels.projections import orthogonal_blocks

from ._common import counter, paper_style, save

NAME = "qmc"
TITLE = "Randomized quasi-Monte Carlo frequencies against iid and orthogonal ones"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 9.0, True: 5.0}
ENSEMBLES = ("iid", "orthogonal", "qmc")
COLOURS = {"iid": "#0072B2", "orthogonal": "#009E73", "qmc": "#D55E00"}
DIMENSIONS = (4, 32)
#: Seeds (draws or scrambles) per Gram error point.
SEEDS = 10


def settings(quick):
    if quick:
        return {"ms": [8, 32, 128], "draws": 100, "rs": [16, 64], "rows": 300}
    return {"ms": [8, 16, 32, 64, 128, 256, 512], "draws": 200, "rs": [16, 64, 256], "rows": None}


def _pair_points(d, m, ensemble, draws):
    turn = orthogonal_blocks(1, d, np.random.default_rng(d))[0]
    x, y = (turn @ v for v in theory.pair(d, 0.6, 0.6, 1.0))
    exact = math.exp(float(x @ y))
    rel = np.array([(estimate(x, y, draw_projections(m, d, ensemble=ensemble, seed=t), "trig")
                     / exact - 1.0) ** 2 for t in range(draws)])
    return float(rel.mean()), float(rel.std(ddof=1) / math.sqrt(draws))


def _gram_points(data, ensemble, r):
    kernel = np.exp(-data.gamma * squared_distances(data.x_train))
    k2 = float(np.vdot(kernel, kernel))
    errors = []
    for seed in range(SEEDS):
        rf = RandomFourierFeatures(gamma=data.gamma, n_components=r, kind="trig", ensemble=ensemble,
                                   random_state=seed).fit(data.x_train)
        errors.append(rd.gram_error_sample(rf.transform(data.x_train), kernel, k2))
    errors = np.asarray(errors)
    return float(errors.mean()), float(errors.std(ddof=1) / math.sqrt(SEEDS))


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    tick = counter(progress, len(DIMENSIONS) + len(rd.DATASETS))
    rows = []
    for d in DIMENSIONS:
        for ens in ENSEMBLES:
            for m in cfg["ms"]:
                mse, se = _pair_points(d, m, ens, cfg["draws"])
                rows.append({"panel": f"pair, d = {d}", "ensemble": ens, "r": 2 * m,
                             "relative_mse": mse, "stderr": se})
        tick()
    for name in rd.DATASETS:
        data = rd.load_real_data(name, rows=cfg["rows"], seed=seed)
        for ens in ENSEMBLES:
            for r in cfg["rs"]:
                mse, se = _gram_points(data, ens, r)
                rows.append({"panel": f"{name} (d = {data.x_train.shape[1]})", "ensemble": ens,
                             "r": r, "relative_mse": mse, "stderr": se})
        tick()
    return {"rows": rows, "run": {"trials": cfg["draws"], "unit": "draws or scrambles per pair "
                                  f"point; {SEEDS} seeds per Gram point", "backend": "numpy"}}


def slope(points):
    """The fitted slope of log MSE against log r (None with fewer than 2 positive points)."""
    pts = [(p["r"], p["relative_mse"]) for p in points if p["relative_mse"] > 0]
    if len(pts) < 2:
        return None
    r, e = np.log([p[0] for p in pts]), np.log([p[1] for p in pts])
    return float(np.polyfit(r, e, 1)[0])


def plot(data, out_dir):
    rows = data["rows"]
    panels = list(dict.fromkeys(r["panel"] for r in rows))
    with paper_style() as plt:
        fig, axes = plt.subplots(1, len(panels), figsize=(2.6 * len(panels), 3.4))
        for ax, panel in zip(np.atleast_1d(axes), panels):
            for ens in ENSEMBLES:
                pts = sorted((r for r in rows if r["panel"] == panel and r["ensemble"] == ens),
                             key=lambda r: r["r"])
                s = slope(pts)
                ax.errorbar([p["r"] for p in pts], [p["relative_mse"] for p in pts],
                            yerr=[min(2 * p["stderr"], 0.99 * p["relative_mse"]) for p in pts],
                            color=COLOURS[ens], marker="o", ms=3, lw=0.9, capsize=1.5,
                            label=f"{ens} (slope {s:.2f})" if s is not None else ens)
            ax.set_xscale("log")
            ax.set_yscale("log")
            grid = sorted({r["r"] for r in rows if r["panel"] == panel})
            if len(grid) <= 4:  # a short grid: its own r as the ticks, no minor labels
                from matplotlib.ticker import NullFormatter

                ax.set_xticks(grid)
                ax.set_xticklabels([str(r) for r in grid])
                ax.xaxis.set_minor_formatter(NullFormatter())
            ax.set_xlabel("features r")
            ax.set_title(panel, fontsize=8)
            ax.legend(fontsize=6)
        np.atleast_1d(axes)[0].set_ylabel("relative MSE (pairs) / relative Gram error")
        return save(fig, out_dir, NAME)
