"""The variance floor beside what the registered estimators measure, on the synthetic heads.

Relative attention MSE (MSE over the exact output's mean square) against the
feature budget r on the four heads of :func:`rfkernels.analysis.synthetic_qkv`
(L = 512, d = 32, gains 0.25 to 2, the model of docs/diagnose.rst):
positive, hyperbolic and trigonometric features and the data-tilted features
(positive features drawn from a mixture fitted on each head, cross-fitted on
the two halves of its queries) with iid and orthogonal projections (Monte
Carlo, 8 draws, ± 2 standard errors), and as lines each representation's
floor, the least error of any policy of independent draws of it
(:func:`rfkernels.floor.attention_floor`, first order, 3% standard error;
the data-tilted features share the positive one): solid where the
first-order expansion holds under the optimal policy, dotted where it does
not (there the floor bounds nothing).
Orthogonal draws are coupled and may go below the floor. The grey line is
uniform attention (every row the mean of V). Each panel's y axis spans its
measured points; a floor far above them (trig on the sharp heads, up to
1e25) is cut off there and kept in floor.csv.
"""

from __future__ import annotations

import math

from rfkernels.analysis import diagnose, synthetic_qkv
from rfkernels.estimators import registry
from rfkernels.floor import valid_from

from ._common import (KIND_COLOURS, counter, estimator_curves, finish_log_panel, head_panels,
                      legend_with_lines, paper_style, save)

NAME = "floor"
TITLE = "The variance floor against r beside the estimators, on four synthetic heads"
#: Seconds it takes warm, alone on 2 idle cores: {quick: seconds} (:func:`rfkernels.figures.budget`).
BUDGET = {False: 9.0, True: 4.0}
KINDS = ("positive", "hyperbolic", "trig", "data-tilted")
ENSEMBLES = ("iid", "orthogonal")


def settings(quick):
    if quick:
        return {"L": 128, "m": [8, 32, 128], "draws": 4}
    return {"L": 512, "m": [8, 32, 128, 512], "draws": 8}


def compute(quick=False, seed=0, progress=None):
    cfg = settings(quick)
    q, k, v = synthetic_qkv(L=cfg["L"])
    tick = counter(progress, 1)
    diag = diagnose(q, k, v, m=cfg["m"], kinds=KINDS, ensembles=ENSEMBLES, draws=cfg["draws"],
                    first_order_queries=0, pairs=2000, floor=True, seed=seed, workers=1)
    tick()
    rows = []
    for row in diag.rows:
        ms = row["zero_mse"]
        rows.append({"head": row["head"], "kind": row["kind"], "ensemble": row["ensemble"],
                     "m": row["m"], "r": row["r"], "relative_mse": row["relative_mse"],
                     "relative_mse_stderr": row["attention_mse_stderr"] / ms,
                     "uniform": row["uniform_mse"] / ms,
                     "floor": row["floor_mse"] / ms, "floor_stderr": row["floor_stderr"] / ms,
                     "floor_valid": row["floor_valid"],
                     "floor_normaliser_rel_sd": row["floor_normaliser_rel_sd"]})
    return {"rows": rows, "run": {"trials": cfg["draws"], "unit": "projection draws per point",
                                  "backend": "numpy"}}


def _floor_line(ax, rows, colour):
    """The floor c / r over the r range, solid where its first order holds, dotted below that."""
    r0, r1 = rows[0]["r"], rows[-1]["r"]
    c = rows[-1]["floor"] * rows[-1]["r"]
    r_valid = valid_from(rows[-1]["floor_normaliser_rel_sd"], rows[-1]["r"])
    grid = [r0 * (r1 / r0) ** (i / 40) for i in range(41)]
    valid = [r for r in grid if r >= r_valid]
    low = [r for r in grid if r <= r_valid] + ([min(valid)] if valid else [])
    if low:
        ax.loglog(low, [c / r for r in low], color=colour, lw=1.0, ls=":")
    if valid:
        ax.loglog(valid, [c / r for r in valid], color=colour, lw=1.6, ls="-")


def plot(data, out_dir):
    with paper_style() as plt:
        fig, panels = head_panels(plt, data["rows"])
        for ax, h, mine in panels:
            drawn = set()  # one floor line per representation
            estimator_curves(ax, mine, KINDS, ENSEMBLES, x=lambda p: p["r"], order=lambda p: p["r"])
            for kind in KINDS:
                colour = KIND_COLOURS[kind]
                floor = sorted((r for r in mine if r["kind"] == kind and r["ensemble"] == "iid"
                                and r["floor"] is not None), key=lambda r: r["r"])
                rep = registry.entry("kind", kind).representation
                if floor and rep not in drawn:
                    _floor_line(ax, floor, colour)
                    drawn.add(rep)
            ax.axhline(mine[0]["uniform"], color="0.55", lw=1.0, ls="-.")
            shown = [r["relative_mse"] for r in mine if r["relative_mse"] is not None
                     and math.isfinite(r["relative_mse"]) and r["relative_mse"] > 0]
            finish_log_panel(ax, shown + [mine[0]["uniform"]], "features r",
                             f"head {h} (gain {(0.25, 0.5, 1.0, 2.0)[h % 4]:g})")
        first = panels[0][0]
        first.set_ylabel("relative attention MSE")
        legend_with_lines(first, plt, [
            (dict(color="0.3", lw=1.6), "floor of independent draws (first order valid)"),
            (dict(color="0.3", lw=1.0, ls=":"), "floor where its first order fails (bounds nothing)"),
            (dict(color="0.55", lw=1.0, ls="-."), "uniform attention (mean of V)")])
        return save(fig, out_dir, NAME)
