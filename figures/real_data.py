r"""Random Fourier features on scikit-learn's real data sets: Gram error and downstream accuracy.

Four data sets shipped inside scikit-learn (digits, wine, breast cancer,
diabetes), standardised on a fixed 75/25 train/test split, with the
Gaussian kernel :math:`e^{-\gamma |x - y|^2}` at the median heuristic
:math:`\gamma = 1/(2\,\mathrm{median}_{i<j}|x_i - x_j|^2)` of the training
rows (:mod:`rfkernels.analysis.real_data`, which states the protocol).

Top row: the relative Gram error :math:`E\|\hat K - K\|_F^2/\|K\|_F^2` of
the training rows against the output dimension r, exact as lines
(:meth:`rfkernels.RandomFourierFeatures.gram_error`) for scikit-learn's
``RBFSampler`` (offset iid, its law), paired cos/sin features with iid,
orthogonal and simplex frequencies, and positive (FAVOR+) features with
orthogonal frequencies; Monte Carlo markers at r = 8 and 32 (one Gram
matrix per seed, 95% intervals over :data:`SEEDS` seeds; ``RBFSampler``
itself for its markers). Positive features are unbounded: their markers are hollow (heavy
tail) and their exact error is often far off the scale (the title says
how far), dominated by the rows of largest norm.

Bottom row: the test score of ridge regression on those features (accuracy
for the three classification sets, :math:`R^2` for diabetes; mean and
standard deviation over the same seeds) against kernel ridge with the
exact kernel (dashed), the same penalty.

``real_data_agreement.csv`` says, per data set and r, whether the
construction with the lowest exact Gram error also gives the best mean
score. ``--quick`` uses a 300-row subset of each data set.
"""

from __future__ import annotations

import numpy as np
from rfkernels.analysis import real_data as rd

from ._common import interval95, legend_below, mc_errorbars, paper_style, save

NAME = "real_data"
TITLE = "Random Fourier features on real data: Gram error and downstream accuracy"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 14.0, True: 9.0}
#: Output dimensions of the exact lines, of the downstream points, and of the Monte Carlo Gram
#: errors (n^2 r work per draw, so none at r = 128: 1,347^2 x 128 x 24 draws x 5 constructions;
#: the cost: docs/performance.md).
R_LINES = np.arange(2, 1025, 2)
R_POINTS = (8, 32, 128)
R_MC = (8, 32)
#: Draws (seeds) per point; rows per data set in --quick mode (all by default).
SEEDS = 20
QUICK_ROWS = 300
#: Construction -> (label, colour, line style, marker), in legend order.
STYLES = {"rbf_sampler": ("RBFSampler (offset, iid)", "#882255", "--", "o"),
          "paired_iid": ("paired cos/sin, iid", "#D55E00", "--", "o"),
          "paired_orthogonal": ("paired cos/sin, orthogonal", "#D55E00", "-", "s"),
          "paired_simplex": ("paired cos/sin, simplex", "#E69F00", "-.", "^"),
          "positive_orthogonal": ("positive (FAVOR+), orthogonal", "#0072B2", ":", "v")}
#: The Gram-error axis: errors above the top are off the scale (the panel title gives them).
Y_RANGE = (1e-4, 3.0)


def draw_seeds(seed, n=SEEDS):
    """The ``n`` integer seeds of the draws (the same for every construction and r)."""
    return [int(s) for s in np.random.SeedSequence([int(seed), 23]).generate_state(n)]


def _points(data, construction, exact, seeds):
    mc, down = [], []
    n = len(seeds)
    for r in R_POINTS:
        scores, errors = rd.downstream_scores(data, construction, r, seeds, gram=r in R_MC)
        down.append({"dataset": data.name, "task": data.task, "construction": construction,
                     "r": r, "seeds": n, "score_mean": float(scores.mean()),
                     "score_sd": float(scores.std(ddof=1)),
                     "score_se": float(scores.std(ddof=1) / np.sqrt(n)),
                     "score_min": float(scores.min()), "score_max": float(scores.max()),
                     "gram_error_exact": exact[r]})
        if errors is None:
            continue
        mean, se = float(errors.mean()), float(errors.std(ddof=1) / np.sqrt(n))
        lower, upper, geometric = interval95(mean, se)
        mc.append({"dataset": data.name, "construction": construction, "r": r, "trials": n,
                   "mse_mc": mean, "stderr": se, "ci_low": float(mean - lower),
                   "ci_high": float(mean + upper), "ci_geometric": bool(geometric),
                   "mse_exact": exact[r], "z": (mean - exact[r]) / se if se > 0 else float("nan"),
                   "tail_ok": rd.is_bounded(construction),
                   "proposal": "plain"})
    return mc, down


def _dataset(name, quick, seeds, tick):
    data = rd.load_real_data(name, rows=QUICK_ROWS if quick else None)
    lines, mc, down = [], [], []
    for construction in rd.CONSTRUCTIONS:
        err = rd.exact_gram_error(data, construction, R_LINES)
        exact = {int(r): float(v) for r, v in zip(R_LINES, err)}
        lines += [{"dataset": name, "construction": construction, "r": int(r),
                   "gram_error_exact": v} for r, v in exact.items()]
        m, dn = _points(data, construction, exact, seeds)
        mc += m
        down += dn
        tick()
    model = {"dataset": name, "task": data.task,
             "metric": "accuracy" if data.task == "classification" else "R^2",
             "alpha": data.alpha, "gamma": data.gamma,
             "median_sq_distance": data.median_sq_distance, "n_train": data.x_train.shape[0],
             "n_test": data.x_test.shape[0], "d": data.x_train.shape[1],
             "exact_kernel_score": rd.exact_kernel_score(data)}
    return lines, mc, down, model


def _agreement(down):
    rows = []
    for name in dict.fromkeys(r["dataset"] for r in down):
        for r in R_POINTS:
            sel = {p["construction"]: p for p in down if p["dataset"] == name and p["r"] == r}
            verdict = rd.agreement({c: p["gram_error_exact"] for c, p in sel.items()},
                                   {c: p["score_mean"] for c, p in sel.items()},
                                   {c: p["score_se"] for c, p in sel.items()})
            rows.append({"dataset": name, "r": r, **verdict})
    return rows


def compute(quick=False, seed=0, progress=None):
    # One BLAS thread: the Gram matrices and fits then round alike in one process and on a
    # pool's workers (with the process's BLAS threads, --workers 1 and 2 differed by up to
    # 1e-11 relative).
    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"):
        return _compute(quick, seed, progress)


def _compute(quick, seed, progress):
    seeds = draw_seeds(seed)
    total = len(rd.DATASETS) * len(rd.CONSTRUCTIONS)
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(done[0], total)

    lines, mc, down, models = [], [], [], []
    for name in rd.DATASETS:
        lo, m, dn, model = _dataset(name, quick, seeds, tick)
        lines += lo
        mc += m
        down += dn
        models.append(model)
    return {"lines": lines, "monte_carlo": mc, "downstream": down, "exact_model": models,
            "agreement": _agreement(down),
            "run": {"trials": SEEDS, "unit": "draws (seeds) per point, one Gram matrix each",
                    "backend": "numpy (feature maps and BLAS)", "proposal": "plain",
                    "rows": f"{QUICK_ROWS} per data set" if quick else "all"}}


def _gram_panel(ax, data, name):
    off = []
    for c, (label, colour, ls, marker) in STYLES.items():
        rows = [r for r in data["lines"] if r["dataset"] == name and r["construction"] == c]
        r = np.array([p["r"] for p in rows])
        y = np.array([p["gram_error_exact"] for p in rows])
        ax.loglog(r, np.minimum(y, 10 * Y_RANGE[1]), color=colour, ls=ls, lw=1.1, label=label)
        if y.min() > Y_RANGE[1]:
            off.append(f"{y[r == R_POINTS[-1]][0]:.1e}")
        pts = [p for p in data["monte_carlo"] if p["dataset"] == name and p["construction"] == c]
        mc_errorbars(ax, pts, "r", colour, marker)
    ax.set_ylim(*Y_RANGE)
    ax.set_xlim(2, R_LINES[-1])
    ax.minorticks_off()  # a log axis's minor ticks cost layout time per panel (docs/performance.md)
    model = next(m for m in data["exact_model"] if m["dataset"] == name)
    title = f"{name} (n = {model['n_train']}, d = {model['d']})"
    if off:
        title += f"\npositive exact {off[0]} at r = {R_POINTS[-1]}"
    ax.set_title(title, fontsize=8)
    ax.set_xlabel("output dimension r")


def _score_panel(ax, data, name):
    model = next(m for m in data["exact_model"] if m["dataset"] == name)
    ax.axhline(model["exact_kernel_score"], color="k", ls="--", lw=0.9, label="exact kernel ridge")
    shifts = np.geomspace(0.86, 1.16, len(STYLES))
    for shift, (c, (label, colour, _, marker)) in zip(shifts, STYLES.items()):
        rows = [p for p in data["downstream"] if p["dataset"] == name and p["construction"] == c]
        ax.errorbar([p["r"] * shift for p in rows], [p["score_mean"] for p in rows],
                    yerr=[p["score_sd"] for p in rows], fmt=marker + "-", color=colour, ms=3.5,
                    lw=0.8)
    ax.set_xscale("log")
    ax.set_xticks(R_POINTS, [str(r) for r in R_POINTS])
    ax.minorticks_off()
    ax.set_xlabel("output dimension r")
    ax.set_title(f"test {model['metric']}, ridge α = {model['alpha']:g}", fontsize=8)


def plot(data, out_dir):
    names = list(dict.fromkeys(m["dataset"] for m in data["exact_model"]))
    with paper_style() as plt:
        fig, axes = plt.subplots(2, len(names), figsize=(12.0, 6.6))
        for j, name in enumerate(names):
            _gram_panel(axes[0, j], data, name)
            _score_panel(axes[1, j], data, name)
        axes[0, 0].set_ylabel(r"$E\|\hat K - K\|_F^2 / \|K\|_F^2$ (train rows)")
        axes[1, 0].set_ylabel("test score (mean ± sd over seeds)")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        h2, l2 = axes[1, 0].get_legend_handles_labels()
        marker = plt.Line2D([], [], color="0.3", marker="o", ls="none", ms=3.5)
        legend_below(axes[0, 0], ncol=4, handles=handles + h2 + [marker],
                     labels=labels + l2 + ["Monte Carlo, 95% (hollow: heavy tail)"], fontsize=7)
        fig.suptitle("Gaussian kernel, γ = 1/(2 median |x − x'|²): lines exact, markers Monte Carlo",
                     fontsize=9)
        return save(fig, out_dir, NAME)
