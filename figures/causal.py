"""Causal attention: the error against position on the synthetic heads.

Relative attention MSE against the number of keys a row sees (position
deciles; each decile relative to its own exact output's mean square) for
causal, prefix-sum attention on the four heads of
:func:`rfkernels.analysis.synthetic_qkv` (L = 512, d = 32, gains 0.25 to 2,
the model of docs/diagnose.rst) at m = 64 projections: positive, hyperbolic
and trigonometric features with iid and orthogonal projections (Monte
Carlo, 8 draws, ± 2 standard errors; :func:`rfkernels.analysis.diagnose`
with ``causal=True``), the causal first-order prediction of the iid
projections (dotted, one theory row per decile) and causal uniform
attention, each row the mean of the values it sees (grey). Each panel's y
axis spans its measured points; a prediction far above them (on the sharp
heads, where the first order fails: up to 1e37) is cut off there and kept in
causal.csv.
"""

from __future__ import annotations

import math

from rfkernels.analysis import diagnose, synthetic_qkv

from ._common import (KIND_COLOURS, counter, estimator_curves, finish_log_panel, head_panels,
                      legend_with_lines, paper_style, save)

NAME = "causal"
TITLE = "Causal attention: the error against position on four synthetic heads"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 4.0, True: 3.0}
KINDS = ("positive", "hyperbolic", "trig")
ENSEMBLES = ("iid", "orthogonal")
M = 64


def settings(quick):
    if quick:
        return {"L": 128, "draws": 4, "queries": 128}
    return {"L": 512, "draws": 8, "queries": 512}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    q, k, v = synthetic_qkv(L=cfg["L"])
    tick = counter(progress, 1)
    diag = diagnose(q, k, v, m=[M], kinds=KINDS, ensembles=ENSEMBLES, draws=cfg["draws"],
                    queries=cfg["queries"], first_order_queries=10, pairs=2000, causal=True,
                    seed=seed, workers=1)
    tick()
    rows = []
    for row in diag.positions:
        if row["head"] == "all":
            continue
        zero = row["zero_mse"]
        se = row["attention_mse_stderr"]
        rows.append({"head": row["head"], "kind": row["kind"], "ensemble": row["ensemble"],
                     "m": row["m"], "r": row["r"], "bucket": row["bucket"],
                     "keys_min": row["keys_min"], "keys_max": row["keys_max"],
                     "relative_mse": row["relative_mse"],
                     "relative_mse_stderr": None if se is None or zero <= 0 else se / zero,
                     "uniform": row["uniform_mse"] / zero if zero > 0 else None,
                     "first_order": (None if row["first_order_mse"] is None or zero <= 0
                                     else row["first_order_mse"] / zero)})
    return {"rows": rows, "run": {"trials": cfg["draws"], "unit": "projection draws per point",
                                  "backend": "numpy"}}


def _x(row):
    """A decile's place on the axis: the geometric mean of the keys its rows see."""
    return math.sqrt(row["keys_min"] * row["keys_max"])


def _finite(value):
    return value is not None and math.isfinite(value) and value > 0


def plot(data, out_dir):
    with paper_style() as plt:
        fig, panels = head_panels(plt, data["rows"])
        for ax, h, mine in panels:
            estimator_curves(ax, mine, KINDS, ENSEMBLES, x=_x, order=lambda p: p["bucket"])
            for kind in KINDS:
                colour = KIND_COLOURS[kind]
                theory = sorted((r for r in mine if r["kind"] == kind and r["ensemble"] == "iid"
                                 and _finite(r["first_order"])), key=lambda r: r["bucket"])
                if theory:
                    ax.plot([_x(p) for p in theory], [p["first_order"] for p in theory],
                            color=colour, lw=1.0, ls=":")
            base = sorted((r for r in mine if r["kind"] == KINDS[0] and r["ensemble"] == ENSEMBLES[0]
                           and _finite(r["uniform"])), key=lambda r: r["bucket"])
            ax.plot([_x(p) for p in base], [p["uniform"] for p in base], color="0.55", lw=1.0,
                    ls="-.")
            shown = [r["relative_mse"] for r in mine if _finite(r["relative_mse"])]
            finish_log_panel(ax, shown + [p["uniform"] for p in base],
                             "keys a row sees (position decile)",
                             f"head {h} (gain {(0.25, 0.5, 1.0, 2.0)[h % 4]:g}), m = {M}")
        first = panels[0][0]
        first.set_ylabel("relative attention MSE")
        legend_with_lines(first, plt, [
            (dict(color="0.3", lw=1.0, ls=":"), "first order (iid), causal"),
            (dict(color="0.55", lw=1.0, ls="-."), "causal uniform attention (prefix mean of V)")])
        return save(fig, out_dir, NAME)
