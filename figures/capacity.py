"""Memory capacity of linear attention: retrieval error against the number of stored pairs.

n random key/value pairs (d_k = 64, keys N(0, I/d_k), values N(0, I)) are
stored in S = Σ v φ(k)ᵀ and read back with φ(k_i)
(:func:`rfkernels.analysis.capacity`). Left: the least-squares (delta-rule
limit) memory, exact iff n <= rank Φ(K) = d_dot. Right: the sum rule's
signal-to-crosstalk ratio (median over keys), which fails (< 1) far below
d_dot for random, untrained keys; FAVOR+ follows the exact softmax kernel
whatever m. Lines: mean over trials.
"""

from __future__ import annotations

import numpy as np
from rfkernels.analysis.capacity import DEFAULT_MAPS, capacity, parse_map

from ._common import counter, legend_below, paper_style, save

NAME = "capacity"
TITLE = "Kernel Zoo: memory capacity of ELU+1, DPFP-ν and FAVOR+ (least squares and sum rule)"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 4.5, True: 1.5}
#: Its numbers depend on the BLAS threads (LAPACK's SVD rounds differently on 1 and 2 threads),
#: so a worker process runs it with the BLAS threads a run in one process has.
SAME_BLAS_THREADS = True

_BLUES = ("#9ecae1", "#4292c6", "#2171b5", "#08306b")
_ORANGES = ("#fdae6b", "#e6550d", "#a63603")


def settings(quick):
    if quick:
        return {"d_k": 16, "maps": ("elu1", "dpfp:1", "dpfp:2", "dpfp:3", "positive:16",
                                    "positive:32", "positive:64", "softmax"),
                "n_values": [2, 4, 8, 16, 17, 24, 32, 33, 48, 64, 65, 96, 97, 128, 160],
                "trials": 2}
    return {"d_k": 64, "maps": DEFAULT_MAPS,
            "n_values": [2, 4, 8, 16, 32, 64, 65, 96, 128, 129, 192, 256, 257, 384, 385, 512,
                         513, 600],
            "trials": 3}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    total = cfg["trials"] * len(cfg["maps"])
    tick = counter(progress, total)

    res = capacity(cfg["d_k"], cfg["n_values"], cfg["maps"], trials=cfg["trials"], seed=seed,
                   progress=tick)
    failures = [{k: v for k, v in f.items() if k not in ("ls_fail", "sum_fail")}
                for f in res.failures]
    return {"rows": res.rows, "failures": failures, "d_k": cfg["d_k"],
            "fail_tol": res.meta["fail_tol"],
            "run": {"trials": cfg["trials"], "unit": "random key/value pools",
                    "backend": "numpy"}}


def _styles(names):
    """Colour and marker per map: ELU+1 pink, DPFP oranges, FAVOR+ blues by m."""
    dpfp = sorted({parse_map(n).nu for n in names if parse_map(n).kind == "dpfp"})
    rand = sorted({parse_map(n).m for n in names if parse_map(n).m is not None})
    out = {}
    for n in names:
        spec = parse_map(n)
        if spec.kind == "elu1":
            out[n] = ("#CC79A7", "^", "-")
        elif spec.kind == "identity":
            out[n] = ("0.3", "x", "-")
        elif spec.kind == "softmax":
            out[n] = ("black", "*", "-")
        elif spec.kind == "dpfp":
            out[n] = (_ORANGES[dpfp.index(spec.nu) % len(_ORANGES)], "D", "-")
        else:
            out[n] = (_BLUES[rand.index(spec.m) % len(_BLUES)], "o", "--")
    return out


def plot(data, out_dir):
    rows = data["rows"]
    names = list(dict.fromkeys(r["map"] for r in rows))
    styles = _styles(names)
    with paper_style() as plt:
        fig, (ax_ls, ax_sum) = plt.subplots(1, 2, figsize=(9.0, 4.6))
        for name in names:
            sel = [r for r in rows if r["map"] == name]
            colour, marker, ls = styles[name]
            d_dot = "∞, sum rule only" if sel[0]["d_dot"] is None else sel[0]["d_dot"]
            label = f"{sel[0]['label']} (d_dot = {d_dot})"
            n = np.array([r["n"] for r in sel], dtype=float)
            if sel[0]["ls_error_mean"] is not None:
                ax_ls.plot(n, [r["ls_error_mean"] for r in sel], color=colour, marker=marker, ms=3,
                           lw=1.0, ls=ls, label=label)
            else:  # the exact kernel: in the legend through the right panel's line
                ax_ls.plot([], [], color=colour, marker=marker, ms=3, lw=1.0, ls=ls, label=label)
            scr = [np.nan if r["scr_mean"] is None else r["scr_mean"] for r in sel]
            ax_sum.plot(n, scr, color=colour, marker=marker, ms=3, lw=1.0, ls=ls)
        ax_ls.axhline(data["fail_tol"], color="0.4", ls=":", lw=1.0,
                      label=f"failure: relative error > {data['fail_tol']:g}")
        ax_sum.axhline(1.0, color="0.4", ls="-.", lw=1.0, label="failure: signal = crosstalk")
        for ax in (ax_ls, ax_sum):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("n (stored key/value pairs)")
        ax_ls.set_ylabel("relative retrieval error")
        ax_ls.set_title("least squares (delta-rule limit):\nexact iff n ≤ rank Φ(K) = d_dot",
                        fontsize=9)
        ax_sum.set_ylabel("signal-to-crosstalk ratio (median over keys)")
        ax_sum.set_title("sum rule S = Σ v φ(k)ᵀ:\nsignal-to-crosstalk ratio", fontsize=9)
        trials = rows[0]["trials"]
        fig.suptitle(f"Random keys N(0, I/d_k), d_k = {data['d_k']}, values N(0, I); "
                     f"mean over {trials} trials", fontsize=9)
        handles, labels = ax_ls.get_legend_handles_labels()
        h2, l2 = ax_sum.get_legend_handles_labels()
        legend_below(ax_ls, ncol=3, handles=handles + h2, labels=labels + l2)
        return save(fig, out_dir, NAME)
