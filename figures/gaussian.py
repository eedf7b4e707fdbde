r"""Gaussian kernel: exact MSE of random Fourier features against the output dimension r.

The target is :math:`K(x, y) = e^{-\gamma |x - y|^2}` (scikit-learn's RBF
convention; ``kernel="gaussian"`` of :func:`rfkernels.theory.exact_mse`).
Random-offset features (kind ``"offset"``: scikit-learn's ``RBFSampler``,
:math:`\sqrt{2/m} \cos(\omega \cdot x' + b)`) spend one output per
frequency, paired cos/sin features (kind ``"trig"``) two, positive features
one. Their MSE depends on the pair through
:math:`t = 2\gamma |x - y|^2` only (trig, offset) and
:math:`\mathrm{MSE}_{offset}(m) = \mathrm{MSE}_{trig}(m) + 1/(2m)`.

(a) MSE against r (log-log) at one pair: d = 16, γ = 1/d (scikit-learn's
default for unit-variance features), |x| = |y| = 2 at a right angle, so
|x - y|² = 8 and t = 1. Offset iid (``RBFSampler``), paired iid, paired
orthogonal, offset orthogonal, paired simplex and positive iid: exact lines at
every even r, Monte Carlo markers with 95% intervals at a few r (reduced
sampler, ``proposal="auto"``). The markers of the paired simplex features
run on the NumPy backend with fewer trials: Numba's kernel for that kind
and ensemble, which no other figure uses, is slow to compile (docs/performance.md).

(b) MSE_paired(r/2 frequencies) / MSE_offset(r frequencies) at equal r
against t: orthogonal frequencies at d = r = 2, 4, 16 and iid frequencies
(any d and r: :math:`2u^2/(1 + u^2)`, :math:`u = 1 - e^{-t}`, below 1
everywhere). Above 1 the offset features win. Monte Carlo ratios at
d = 2 and 4.
"""

from __future__ import annotations

import numpy as np
from rfkernels.analysis import monte_carlo_mse
from rfkernels.analysis.points import point_seed

from rfkernels import theory
from rfkernels.estimators import estimator

from ._common import KIND_COLOURS, interval95, paper_style, save
from ._mc import PROPOSAL

NAME = "gaussian"
TITLE = "Gaussian kernel: exact MSE of random Fourier features against output dimension"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 9.0, True: 6.5}
#: The pair of panel (a): dimension, kernel parameter, |x| = |y|, angle (t = 2 GAMMA |x - y|^2 = 1).
D, GAMMA, NORM, ANGLE = 16, 1.0 / 16, 2.0, np.pi / 2
KERNEL = {"kernel": "gaussian", "gamma": GAMMA}
#: (kind, ensemble) of panel (a), in legend order.
SERIES = (("offset", "iid"), ("trig", "iid"), ("trig", "orthogonal"), ("offset", "orthogonal"),
          ("trig", "simplex"), ("positive", "iid"))
LABELS = {("offset", "iid"): "offset cos(w.x + b), iid (RBFSampler)",
          ("trig", "iid"): "paired cos/sin, iid",
          ("trig", "orthogonal"): "paired cos/sin, orthogonal",
          ("offset", "orthogonal"): "offset, orthogonal",
          ("trig", "simplex"): "paired cos/sin, simplex",
          ("positive", "iid"): "positive (FAVOR+), iid"}
OFFSET_COLOUR = "#882255"
STYLES = {("offset", "iid"): (OFFSET_COLOUR, "--", "o"),
          ("trig", "iid"): (KIND_COLOURS["trig"], "--", "o"),
          ("trig", "orthogonal"): (KIND_COLOURS["trig"], "-", "s"),
          ("offset", "orthogonal"): (OFFSET_COLOUR, "-", "s"),
          ("trig", "simplex"): ("#E69F00", "-.", "^"),
          ("positive", "iid"): (KIND_COLOURS["positive"], ":", "v")}
#: Output dimensions of the lines (every even r up to R_MAX) and of the Monte Carlo markers.
R_MAX = 1024
MC_R = (4, 16, 64, 256)
#: Most trials per Monte Carlo point (default run, --quick); above, ``trials * r <= WORK``.
TRIALS = {False: 200_000, True: 4_000}
#: Trials times r per point by backend (default run, --quick): a constant cost per point.
WORK = {"numba": {False: 3_200_000, True: 10**9}, "numpy": {False: 400_000, True: 10**9}}
#: The Monte Carlo backend per (kind, ensemble): Numba where another figure compiles the kernel.
BACKENDS = {("trig", "simplex"): "numpy"}
DEFAULT_BACKEND = "numba"
#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = tuple((kind, ensemble, "chi") for kind, ensemble in SERIES
                if BACKENDS.get((kind, ensemble), DEFAULT_BACKEND) == "numba")
#: Panel (b): the orthogonal dimensions (r = d), the t grid, the Monte Carlo points.
RATIO_DIMS = (2, 4, 16)
T_RANGE = (1e-2, 1e2)
MC_RATIO_DIMS = (2, 4)
MC_RATIO_T = (1.0, 4.0, 16.0)


def projections(kind, r):
    """Frequencies m of ``kind`` at output dimension r (r / outputs per frequency)."""
    per = estimator(kind).kind.features_per_projection
    if r % per:
        raise ValueError(f"r = {r} is not a multiple of the {per} outputs per frequency of {kind!r}")
    return r // per


def pair_at_t(d, t, gamma=GAMMA):
    """``(x, y)`` with ``x = -y`` along the first axis and ``2 gamma |x - y|^2 = t`` (shape (..., d))."""
    t = np.asarray(t, dtype=float)
    x = np.zeros(t.shape + (int(d),))
    x[..., 0] = np.sqrt(t / (2.0 * gamma)) / 2.0
    return x, -x


def panel_pair():
    """The pair of panel (a): :func:`rfkernels.theory.pair` at ``D, NORM, NORM, ANGLE``."""
    return theory.pair(D, NORM, NORM, ANGLE)


def t_of(x, y, gamma=GAMMA):
    """``t = 2 gamma |x - y|^2``."""
    return float(2.0 * gamma * np.sum((np.asarray(x) - np.asarray(y)) ** 2))


def ratio_paired_offset(d, t, r, ensemble, gamma=GAMMA):
    """Exact MSE of paired features (r/2 frequencies) / offset features (r frequencies) at t."""
    x, y = pair_at_t(d, t, gamma)
    kw = {"kernel": "gaussian", "gamma": gamma}
    paired = theory.exact_mse(x, y, projections("trig", r), "trig", ensemble=ensemble, **kw)
    offset = theory.exact_mse(x, y, projections("offset", r), "offset", ensemble=ensemble, **kw)
    return paired / offset


def mc_trials(r, backend, quick):
    """Trials of a Monte Carlo point at output dimension r on ``backend``."""
    return int(min(TRIALS[bool(quick)], WORK[backend][bool(quick)] // r))


def _mc(x, y, kind, ensemble, m, trials, backend, point, seed):
    res = monte_carlo_mse(x, y, m, kind, ensemble=ensemble, trials=trials,
                          seed=point_seed(seed, point), backend=backend, proposal=PROPOSAL, **KERNEL)
    lower, upper, geometric = interval95(res.mse, res.stderr)
    return {"trials": int(res.trials), "mse_mc": float(res.mse), "stderr": float(res.stderr),
            "ci_low": float(res.mse - lower), "ci_high": float(res.mse + upper),
            "ci_geometric": bool(geometric), "mse_exact": float(res.mse_exact),
            "z": float("nan") if res.z is None else float(res.z), "k_hat": float(res.tail.k_hat),
            "tail_ok": bool(res.tail_ok), "proposal": res.proposal, "ess": float(res.ess)}


def _lines():
    x, y = panel_pair()
    t = t_of(x, y)
    r = np.arange(2, R_MAX + 1, 2)
    rows = []
    for kind, ensemble in SERIES:
        m = r // estimator(kind).kind.features_per_projection
        mse = theory.exact_mse(x, y, m, kind, ensemble=ensemble, **KERNEL)
        rows += [{"kind": kind, "ensemble": ensemble, "d": D, "gamma": GAMMA, "t": t, "r": int(ri),
                  "m": int(mi), "mse_exact": float(v)} for ri, mi, v in zip(r, m, mse)]
    return rows


def _ratio_lines(quick):
    t = np.geomspace(*T_RANGE, 61 if quick else 241)
    rows = []
    for ensemble, d in [("orthogonal", d) for d in RATIO_DIMS] + [("iid", D)]:
        ratio = ratio_paired_offset(d, t, d, ensemble)
        rows += [{"ensemble": ensemble, "d": d, "r": d, "m_paired": projections("trig", d),
                  "m_offset": projections("offset", d), "t": float(ti), "ratio_exact": float(v)}
                 for ti, v in zip(t, ratio)]
    return rows


def _mc_points(quick, seed, tick):
    x, y = panel_pair()
    t = t_of(x, y)
    points = []
    for kind, ensemble in SERIES:
        backend = BACKENDS.get((kind, ensemble), DEFAULT_BACKEND)
        for r in MC_R:
            m = projections(kind, r)
            point = {"kind": kind, "ensemble": ensemble, "norms": "chi", "d": D, "m": m,
                     "angle": ANGLE, "norm_x": NORM, "norm_y": NORM, "norm_sum": None, **KERNEL}
            row = {"kind": kind, "ensemble": ensemble, "d": D, "gamma": GAMMA, "t": t, "r": r,
                   "m": m, "backend": backend}
            row.update(_mc(x, y, kind, ensemble, m, mc_trials(r, backend, quick), backend, point,
                           seed))
            points.append(row)
            tick()
    return points


def _mc_ratio_points(quick, seed, tick):
    rows = []
    for d in MC_RATIO_DIMS:
        for t in MC_RATIO_T:
            x, y = pair_at_t(d, t)
            runs = {}
            for kind in ("trig", "offset"):
                m = projections(kind, d)
                point = {"kind": kind, "ensemble": "orthogonal", "norms": "chi", "d": d, "m": m,
                         "t": t, **KERNEL}
                runs[kind] = _mc(x, y, kind, "orthogonal", m, mc_trials(d, DEFAULT_BACKEND, quick),
                                 DEFAULT_BACKEND, point, seed)
            p, o = runs["trig"], runs["offset"]
            ratio = p["mse_mc"] / o["mse_mc"]
            rel = float(np.hypot(p["stderr"] / p["mse_mc"], o["stderr"] / o["mse_mc"]))
            theory_ratio = p["mse_exact"] / o["mse_exact"]
            lower, upper, _ = interval95(ratio, rel * ratio)
            rows.append({"ensemble": "orthogonal", "d": d, "r": d, "t": t, "trials": p["trials"],
                         "ratio_mc": ratio, "ratio_rel_stderr": rel,
                         "ratio_ci_low": float(ratio - lower), "ratio_ci_high": float(ratio + upper),
                         "ratio_theory": theory_ratio,
                         "z": float((ratio - theory_ratio) / (rel * ratio)),  # delta method
                         "mse_paired_mc": p["mse_mc"], "mse_paired_stderr": p["stderr"],
                         "mse_paired_exact": p["mse_exact"], "z_paired": p["z"],
                         "mse_offset_mc": o["mse_mc"], "mse_offset_stderr": o["stderr"],
                         "mse_offset_exact": o["mse_exact"], "z_offset": o["z"],
                         "tail_ok": p["tail_ok"] and o["tail_ok"], "proposal": "plain"})
            tick()
    return rows


def compute(quick=False, seed=0, progress=None):
    total = len(SERIES) * len(MC_R) + len(MC_RATIO_DIMS) * len(MC_RATIO_T)
    done = [0]

    def tick():
        done[0] += 1
        if progress:
            progress(done[0], total)

    return {"lines": _lines(), "monte_carlo": _mc_points(quick, seed, tick),
            "ratio": _ratio_lines(quick), "monte_carlo_ratio": _mc_ratio_points(quick, seed, tick),
            "run": {"trials": TRIALS[bool(quick)],
                    "unit": ("trials per point at most (trials x r <= "
                             + ", ".join(f"{WORK[b][bool(quick)]:,} on {b}" for b in WORK) + ")"),
                    "backend": DEFAULT_BACKEND + " (numpy for paired simplex)",
                    "proposal": PROPOSAL}}


def _errorbars(ax, x, y, low, high, ok, colour, marker):
    for tame in (True, False):
        sel = [i for i, v in enumerate(ok) if v == tame]
        if sel:
            yy = np.array([y[i] for i in sel])
            err = [yy - [low[i] for i in sel], [high[i] for i in sel] - yy]
            ax.errorbar([x[i] for i in sel], yy, yerr=np.maximum(err, 0), fmt=marker, color=colour,
                        mfc=colour if tame else "none", ms=3.5, lw=0.8)


def _panel_mse(ax, data):
    for key in SERIES:
        colour, ls, marker = STYLES[key]
        rows = [r for r in data["lines"] if (r["kind"], r["ensemble"]) == key]
        ax.loglog([r["r"] for r in rows], [r["mse_exact"] for r in rows], color=colour, ls=ls,
                  lw=1.1, label=LABELS[key])
        pts = [r for r in data["monte_carlo"] if (r["kind"], r["ensemble"]) == key]
        _errorbars(ax, [r["r"] for r in pts], [r["mse_mc"] for r in pts],
                   [r["ci_low"] for r in pts], [r["ci_high"] for r in pts],
                   [r["tail_ok"] for r in pts], colour, marker)
    t = data["lines"][0]["t"]
    ax.set_title(f"(a) d = {D}, γ = 1/{round(1 / GAMMA)}, t = 2γ|x − y|² = {t:.3g}")
    ax.set_xlabel("output dimension r (features per input)")
    ax.set_ylabel("MSE of the kernel estimate")
    ax.set_xlim(2, R_MAX)


def _panel_ratio(ax, data):
    colours = {2: "C0", 4: "C2", 16: "C3"}
    ax.axhline(1.0, color="0.5", lw=0.8)
    for ensemble, d in [("orthogonal", d) for d in RATIO_DIMS] + [("iid", D)]:
        rows = [r for r in data["ratio"] if r["ensemble"] == ensemble and r["d"] == d]
        if ensemble == "iid":
            style, label = {"color": "k", "ls": "--"}, "iid (any d, r)"
        else:
            style, label = {"color": colours[d], "ls": "-"}, f"orthogonal, d = r = {d}"
        ax.semilogx([r["t"] for r in rows], [r["ratio_exact"] for r in rows], lw=1.1, label=label,
                    **style)
    for d in MC_RATIO_DIMS:
        pts = [r for r in data["monte_carlo_ratio"] if r["d"] == d]
        _errorbars(ax, [r["t"] for r in pts], [r["ratio_mc"] for r in pts],
                   [r["ratio_ci_low"] for r in pts], [r["ratio_ci_high"] for r in pts],
                   [r["tail_ok"] for r in pts], colours[d], "o")
    ax.set_title("(b) equal r: paired (r/2 frequencies) / offset (r)")
    ax.set_xlabel(r"$t = 2\gamma\,|x - y|^2$")
    ax.set_ylabel(r"$\mathrm{MSE}_{paired} / \mathrm{MSE}_{offset}$ (> 1: offset wins)")
    ax.set_xlim(*T_RANGE)
    ax.set_ylim(0.0, 1.3)


def plot(data, out_dir):
    with paper_style() as plt:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 4.4))
        _panel_mse(ax1, data)
        _panel_ratio(ax2, data)
        marker = plt.Line2D([], [], color="0.3", marker="o", ls="none", ms=3.5)
        for ax, ncol in ((ax1, 2), (ax2, 2)):
            handles, labels = ax.get_legend_handles_labels()
            handles.append(marker)
            labels.append("Monte Carlo, 95% (hollow: heavy tail)")
            ax.legend(handles, labels, fontsize=6.5, ncol=ncol, loc="upper center",
                      bbox_to_anchor=(0.5, -0.17), borderaxespad=0.0)
        fig.suptitle("Gaussian kernel exp(−γ|x − y|²): lines exact, markers Monte Carlo",
                     fontsize=9)
        return save(fig, out_dir, NAME)
