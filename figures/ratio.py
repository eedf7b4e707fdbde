"""Figure 2 of the paper: MSE_trig / MSE_positive over the angle and the length.

With |x| = |y| = l and angle φ, both iid MSEs (Lemma 2) have the same 1/m, so
their ratio depends on (l, φ) only:
``r = (1 - e^{-t})² / (2 SM⁴ (1 - e^{-s}))`` with ``s = 2l²(1 + cos φ)``,
``t = 2l²(1 - cos φ)``, ``SM = e^{l² cos φ}``. The map is symmetric in l and
in φ, and is drawn over l ∈ [-2, 2], φ ∈ [-π, π] as in the paper.
Trials: 250,000 per Monte Carlo point (1,000,000 until issue 37: the 95%
intervals of the ratio, at most ±1.8%, stay shorter than a marker).
"""

from __future__ import annotations

import numpy as np

from rfkernels import theory

from ._common import KIND_COLOURS, interval95, paper_style, save
from ._mc import mc_point, run_info

NAME = "ratio"
TITLE = "Figure 2 (paper): MSE ratio trig / positive over angle and length"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 6.0, True: 2.5}
SLICE_L = 1.0
D = 2  # the iid MSEs do not depend on d beyond the geometry
#: (kind, ensemble, norms) of the engine kernels its Monte Carlo points run (figures._kernels).
KERNELS = (("trig", "iid", "chi"), ("positive", "iid", "chi"))


def log_ratio(length, angle):
    """log(MSE_trig / MSE_positive), iid, from Lemma 2 (any m)."""
    g = theory.geometry_from_angle(D, np.abs(length), np.abs(length), np.abs(angle))
    return (theory.lemma2_mse_from_geometry(g, 1, "trig", log=True)
            - theory.lemma2_mse_from_geometry(g, 1, "positive", log=True))


def compute(quick=False, seed=0, progress=None):
    n_phi, n_l = (120, 80) if quick else (360, 240)  # even: φ = 0 (trig MSE 0) is no cell centre
    # cell centres: neither l = 0 (0/0) nor φ = ±π (MSE_positive = 0) is a grid point
    phi = -np.pi + (np.arange(n_phi) + 0.5) * 2 * np.pi / n_phi
    length = -2.0 + (np.arange(n_l) + 0.5) * 4.0 / n_l
    L, P = np.meshgrid(length, phi, indexing="ij")
    heat = log_ratio(L, P)
    heat_rows = [{"length": float(l_), "angle": float(p_), "log10_ratio": float(h / np.log(10))}
                 for l_, p_, h in zip(L.ravel(), P.ravel(), heat.ravel())]
    # the slice at l = 1, theory and Monte Carlo (m = 16, iid)
    phis = np.linspace(0.0, np.pi, 400)[:-1]
    g = theory.geometry_from_angle(D, SLICE_L, SLICE_L, phis)
    mse_trig = theory.lemma2_mse_from_geometry(g, 16, "trig")
    mse_pos = theory.lemma2_mse_from_geometry(g, 16, "positive")
    slice_rows = [{"angle": float(p), "mse_trig": float(a), "mse_positive": float(b),
                   "ratio": float(a / b), "softmax": float(np.exp(SLICE_L**2 * np.cos(p)))}
                  for p, a, b in zip(phis, mse_trig, mse_pos)]
    mc_angles = np.linspace(0.3, 2.9, 4 if quick else 9)  # trig MSE is 0 at angle 0 (x = y)
    mc_rows = []
    for i, a in enumerate(mc_angles):
        pair_rows = {k: mc_point(kind=k, ensemble="iid", d=D, m=16, angle=a, norm_x=SLICE_L,
                                 norm_y=SLICE_L, quick=quick, seed=seed) for k in ("trig", "positive")}
        t, p = pair_rows["trig"], pair_rows["positive"]
        ratio = t["mse_mc"] / p["mse_mc"]
        rel = np.hypot(t["stderr"] / t["mse_mc"], p["stderr"] / p["mse_mc"])
        ratio_theory = float(t["mse_exact"] / p["mse_exact"])
        mc_rows.append({"angle": float(a), "ratio_mc": ratio, "ratio_rel_stderr": float(rel),
                        "ratio_theory": ratio_theory,
                        "z": float((ratio - ratio_theory) / (rel * ratio)),  # delta method
                        "mse_trig_mc": t["mse_mc"], "mse_trig_stderr": t["stderr"],
                        "mse_positive_mc": p["mse_mc"], "mse_positive_stderr": p["stderr"],
                        "tail_ok": bool(t["tail_ok"] and p["tail_ok"]), "trials": t["trials"],
                        # trig estimates are bounded: only the positive point can be tilted
                        "proposal": p["proposal"], "ess_positive": p["ess"]})
        if progress:
            progress(i + 1, len(mc_angles))
    return {"heatmap": heat_rows, "slice": slice_rows, "monte_carlo": mc_rows,
            "shape": (n_l, n_phi), "run": run_info(quick)}


def plot(data, out_dir):
    n_l, n_phi = data["shape"]
    heat = np.array([r["log10_ratio"] for r in data["heatmap"]]).reshape(n_l, n_phi)
    length = np.array([r["length"] for r in data["heatmap"]]).reshape(n_l, n_phi)[:, 0]
    phi = np.array([r["angle"] for r in data["heatmap"]]).reshape(n_l, n_phi)[0]
    with paper_style() as plt:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(9.6, 3.6), gridspec_kw={"width_ratios": [1.1, 1]})
        lim = np.nanpercentile(np.abs(heat), 99)
        # rasterised: as vectors the 86,400 cells make a 2.3 MB PDF
        im = ax1.pcolormesh(phi, length, heat, cmap="RdBu_r", vmin=-lim, vmax=lim, shading="nearest",
                            rasterized=True)
        cb = fig.colorbar(im, ax=ax1)
        cb.set_label(r"$\log_{10}\,(\mathrm{MSE}_{trig}/\mathrm{MSE}_{+})$")
        ax1.set_xlabel(r"angle $\varphi$ between $x$ and $y$ (rad)")
        ax1.set_ylabel(r"length $l$ ($|x| = |y| = |l|$)")
        ax1.set_title("ratio of iid MSEs (any m, any d)")
        ax1.grid(False)
        s = data["slice"]
        ang = np.array([r["angle"] for r in s])
        ax2.semilogy(ang, [r["ratio"] for r in s], color="k", label="theory (Lemma 2)")
        mc = data["monte_carlo"]
        for ok, face in ((True, "k"), (False, "none")):
            pts = [r for r in mc if r["tail_ok"] == ok]
            if pts:
                y = np.array([r["ratio_mc"] for r in pts])
                lower, upper, geo = interval95(y, np.array([r["ratio_rel_stderr"] for r in pts]) * y)
                ax2.errorbar([r["angle"] for r in pts], y, yerr=[lower, upper], fmt="o", mfc=face,
                             mec="k", ecolor="k",
                             label="Monte Carlo, 95%" + ("" if ok else " (heavy tail)")
                             + ("\n(×/÷ exp(1.96 se / ratio) where ratio − 1.96 se ≤ 0)"
                                if geo.any() else ""))
        ax2.axhline(1.0, color="0.6", lw=0.8)
        ax2.set_xlabel(r"angle $\varphi$ (rad), $|x| = |y| = 1$")
        ax2.set_ylabel(r"$\mathrm{MSE}_{trig}/\mathrm{MSE}_{+}$")
        ax2.set_title("slice at l = 1 (m = 16, iid)")
        ax2.legend(loc="upper left")
        inset = ax2.inset_axes([0.55, 0.12, 0.42, 0.38])
        near = ang > 2.0
        inset.semilogy(ang[near], np.array([r["mse_trig"] for r in s])[near],
                       color=KIND_COLOURS["trig"], label="trig")
        inset.semilogy(ang[near], np.array([r["mse_positive"] for r in s])[near],
                       color=KIND_COLOURS["positive"], label="positive")
        inset.set_title("MSE where SM is small", fontsize=7)
        inset.tick_params(labelsize=6)
        inset.set_xticks([2.0, 2.5, 3.0])
        inset.legend(fontsize=6)
        return save(fig, out_dir, NAME)
