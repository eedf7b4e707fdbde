"""The fields of a diagnosis' rows and heads, from one head's raw results (:mod:`.study`).

Each function turns part of a head's results into the columns of
:data:`rfkernels.analysis.diagnosis.report.ROW_COLUMNS`, every None with its
reason in the row.
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels.features import feature_dimension
from rfkernels.floor import NORMALISER_SD_MAX
from rfkernels.presets import preset as preset_entry

from ..points import independent_rows
from .advice import beyond
from .report import FLOOR_FIELDS

__all__ = ["FIRST_ORDER_FIELDS", "KERNEL_FIELDS", "KERNEL_QUANTILES", "attention_fields",
           "exp_or_inf", "first_order_fields", "floor_fields", "head_info", "head_rows",
           "kernel_fields", "library_reason", "log_quantiles", "preset_fields"]

#: Kernel-level quantiles reported.
KERNEL_QUANTILES = (0.5, 0.9, 0.99)


def log_quantiles(logs):
    """Kernel-level statistics of one estimator from its pairs' log relative MSEs.

    Quantiles are empirical (no interpolation, so a pair of exact-zero MSE,
    log = -inf, cannot turn them into NaN); the mean and its standard error
    are formed with the largest value factored out, inf beyond float64.
    """
    n = logs.size
    top = float(logs.max())
    out = {f"kernel_rel_mse_q{int(round(100 * p)):02d}": exp_or_inf(float(x))
           for p, x in zip(KERNEL_QUANTILES, np.quantile(logs, KERNEL_QUANTILES, method="inverted_cdf"))}
    out["kernel_rel_mse_median"] = out.pop("kernel_rel_mse_q50")
    if top == -math.inf:  # every sampled pair is estimated exactly
        mean, spread = 0.0, 0.0
    else:
        rel = np.exp(logs - top)
        mean = exp_or_inf(top + math.log(float(rel.mean())))
        sd = float(rel.std(ddof=1)) if n >= 2 else None
        spread = None if sd is None else (0.0 if sd == 0 else exp_or_inf(top + math.log(sd / math.sqrt(n))))
    out.update({
        "kernel_rel_mse_max": exp_or_inf(top),
        "kernel_rel_mse_mean": mean,
        "kernel_rel_mse_mean_stderr": spread,
        "kernel_share_rel_mse_above_1": float(np.mean(logs > 0.0)),
    })
    return out


def exp_or_inf(x):
    """exp(x) as a float, +inf beyond float64 (the JSON says why); exp(-inf) = 0."""
    return math.exp(x) if x < 709.78 else math.inf


KERNEL_FIELDS = ("kernel_rel_mse_median", "kernel_rel_mse_q90", "kernel_rel_mse_q99",
                  "kernel_rel_mse_max", "kernel_rel_mse_mean", "kernel_rel_mse_mean_stderr",
                  "kernel_share_rel_mse_above_1")


def kernel_fields(kernel, kind, ens, m):
    logs = kernel["log_rel"].get((kind, ens, m))
    if logs is None:
        out = dict.fromkeys(KERNEL_FIELDS)
        out["kernel_reason"] = kernel["reasons"][(kind, ens)]
        return out
    out = log_quantiles(logs)
    if kernel["all_pairs"]:
        out["kernel_rel_mse_mean_stderr"] = 0.0
    out["kernel_reason"] = None
    return out


def first_order_fields(res, kind, ens, m, mc_mse):
    fo = res["first_order"][kind]
    if not independent_rows(ens) or isinstance(fo, str):
        why = fo if isinstance(fo, str) else "the first-order theory is for iid projections only"
        return {"first_order_mse": None, "first_order_stderr": None, "first_order_valid": None,
                "first_order_ratio": None, "normaliser_rel_sd": None, "first_order_reason": why}
    mse, se = fo[0] / m, None if fo[1] is None else fo[1] / m
    sd = math.sqrt(fo[2] / m) if math.isfinite(fo[2]) else math.inf
    return {"first_order_mse": mse, "first_order_stderr": se,
            "first_order_valid": bool(sd <= NORMALISER_SD_MAX),
            "first_order_ratio": mse / mc_mse if mc_mse and math.isfinite(mc_mse) else None,
            "normaliser_rel_sd": sd, "first_order_reason": None}


def attention_fields(draws, bad, exact_ms, uniform_mse):
    finite = draws[np.isfinite(draws)]
    n = draws.size
    if finite.size < n:
        mean, se = (math.nan if np.any(np.isnan(draws)) else math.inf), None
    else:
        mean, se = float(draws.mean()), float(draws.std(ddof=1) / math.sqrt(n))
    ok = se is not None
    return {
        "attention_mse": mean, "attention_mse_stderr": se, "draws": n,
        "draws_nonfinite": int(n - finite.size),
        "relative_mse": mean / exact_ms if ok and exact_ms > 0 else None,
        "uniform_mse": uniform_mse, "zero_mse": exact_ms,
        "worse_than_uniform": beyond(mean, uniform_mse, se, exact_ms) if ok else bool(finite.size < n),
        "better_than_uniform": beyond(uniform_mse, mean, se, exact_ms) if ok else False,
        "worse_than_zero": beyond(mean, exact_ms, se, exact_ms) if ok else bool(finite.size < n),
        "nonpositive_rows_share": float(bad.mean()),
    }


def preset_fields(cell, preset):
    """The stabiliser's share of the normalisers and the overflows of a library preset."""
    if preset_entry(preset).exact:
        return {"stabiliser_share_mean": None, "stabiliser_share_max": None, "overflow_draws": 0}
    ok = cell[4] == 0
    return {"stabiliser_share_mean": float(np.mean(cell[2][ok])) if ok.any() else None,
            "stabiliser_share_max": float(np.max(cell[3][ok])) if ok.any() else None,
            "overflow_draws": int(cell[4].sum())}


def library_reason(preset):
    return (f"preset {preset!r} computes a library's numerics of the estimator; the kernel-level and "
            "first-order theory are those of the estimator itself: see preset 'rfkernels'")


def head_rows(plan, res):
    rows = []
    for (p, kind, ens, m), cell in res["mc"][0].items():
        row = {"head": res["head"], "preset": p, "kind": kind, "ensemble": ens, "norms": plan.norms,
               "m": m, "r": feature_dimension(kind, plan.d, m=m),
               "params": {k: float(v) for k, v in res["fitted"][kind].items()}}
        row.update(attention_fields(cell[0], cell[1], res["exact_ms"], res["uniform_mse"]))
        row.update(preset_fields(cell, p))
        if preset_entry(p).exact:
            row.update(first_order_fields(res, kind, ens, m, row["attention_mse"]))
            row.update(kernel_fields(res["kernel"], kind, ens, m))
            row.update(floor_fields(res, kind, row["r"]))
        else:
            why = library_reason(p)
            row.update({**dict.fromkeys(FIRST_ORDER_FIELDS), "first_order_reason": why,
                        **dict.fromkeys(KERNEL_FIELDS), "kernel_reason": why,
                        **dict.fromkeys(FLOOR_FIELDS), "floor_reason": why})
        rows.append(row)
    return rows


def floor_fields(res, kind, r):
    """The floor of the kind's representation at r (an attention MSE, as ``attention_mse``), or
    its reason."""
    if res["floors"] is None:
        return {**dict.fromkeys(FLOOR_FIELDS), "floor_reason": "not computed (floor=False)"}
    floor = res["floors"][kind]
    if isinstance(floor, str):
        return {**dict.fromkeys(FLOOR_FIELDS), "floor_reason": floor}
    ms = res["exact_ms"]
    m = r / floor.features_per_draw
    return {"floor_mse": floor.mse(r) * ms, "floor_stderr": floor.stderr / r * ms,
            "floor_valid": floor.valid_at(r),
            "floor_normaliser_rel_sd": math.sqrt(max(floor.normaliser_rel_var, 0.0) / m),
            "floor_reason": None}


#: The first-order fields of a row (their reason: ``first_order_reason``).
FIRST_ORDER_FIELDS = ("first_order_mse", "first_order_stderr", "first_order_valid",
                       "first_order_ratio", "normaliser_rel_sd")


def head_info(plan, res, edges):
    u2 = res["kernel"]["u2"]
    n = u2.size
    heavy = res["heavy_share"]
    counts, _ = np.histogram(u2, bins=edges)
    return {
        "head": res["head"], "index": res["index"], "L": plan.L, "L_k": plan.Lk, "d": plan.d,
        "d_v": plan.dv, "pairs": int(n), "all_pairs": res["kernel"]["all_pairs"],
        "u2_quantiles": {f"q{int(round(100 * p)):02d}": float(x)
                         for p, x in zip((0.01, 0.5, 0.9, 0.99), np.quantile(u2, (0.01, 0.5, 0.9, 0.99)))},
        "u2_max": float(u2.max()),
        "heavy_tail_share": heavy,
        "heavy_tail_share_stderr": 0.0 if res["kernel"]["all_pairs"] else math.sqrt(heavy * (1 - heavy) / n),
        "histogram_counts": [int(c) for c in counts],
        "exact_mean_square": res["exact_ms"], "uniform_mse": res["uniform_mse"],
        "fitted": {kind: {k: float(v) for k, v in p.items()} for kind, p in res["fitted"].items() if p},
    }
