r"""Pooling a diagnosis over heads, and the advice: how many features, which estimator.

:func:`pool_heads` turns the per-head rows of
:func:`rfkernels.analysis.diagnose` into one row per preset x kind x
ensemble x m: MSEs and baselines averaged over heads (the layer's error),
standard errors combined as independent (:math:`\sqrt{\sum_h se_h^2}/H`).

:func:`advise` reads the pooled rows as curves of the **relative attention
MSE** (attention MSE over the exact output's mean square, the MSE of a zero
output) against the feature budget r, one curve per preset x kind x
ensemble, and answers:

- ``budget``: the smallest r reaching ``target``: the smallest grid r if it
  already does (``how="at most"``: a smaller r may too); else between the
  two grid points around the first crossing, interpolated in log MSE
  against log r (``"interpolated"``); beyond the grid, extrapolated with
  the local slope of the two largest r when that slope is below
  :data:`SLOPE_MIN` and the r it gives is within :data:`EXTRAPOLATE_MAX`
  times the largest r measured (``"extrapolated"``: an assumption, said
  so); else
  ``"unreachable"`` (the error does not fall with r on the grid, as in the
  heavy-tail regime). r is rounded up to a whole number of projections.
- ``best``: at each budget r, the estimators ranked by relative MSE at r
  (measured where r is on their grid, log-log interpolated inside it,
  never extrapolated), with whether the best is ahead of the runner-up by
  more than 2 combined standard errors (both measured at r).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

__all__ = ["DEFAULT_TARGET", "EXTRAPOLATE_MAX", "ROUNDING_TIE", "SLOPE_MIN", "advise", "beyond",
           "check_target", "pool_heads"]

#: Default target relative attention MSE (a 10% root-mean-square relative error).
DEFAULT_TARGET = 0.01
#: A curve is extrapolated beyond its grid only where its local slope of log
#: MSE against log r is below this (the 1/r regime has slope -1).
SLOPE_MIN = -0.1
#: Two MSEs closer than this share of the exact output's mean square (a 1e-12 relative
#: error, squared) are equal to rounding: neither is "worse" than the other.
ROUNDING_TIE = 1e-24
#: Largest r the advice names (beyond: "unreachable").
R_MAX = 10 ** 9
#: An extrapolation is a number only up to this many times the largest r measured (two
#: decades of r); further it is "not reachable at any practical r", with the slope.
EXTRAPOLATE_MAX = 100

_KEY = ("preset", "kind", "ensemble")


def beyond(a, b, se, scale):
    """a exceeds b by more than 2 standard errors and by more than rounding (ROUNDING_TIE x scale)."""
    return bool(a - b > max(2.0 * se, ROUNDING_TIE * scale))


def check_target(value):
    """``target`` as a float in (0, 1], else a one-line error.

    The target is a relative attention MSE, the MSE over the exact output's
    mean square: the zero output's is 1, so a target above 1 asks for less
    than outputting zeros gives (and beyond float64's range for its plot).
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"target must be a positive real number (a relative attention MSE); "
                        f"got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"target must be a positive finite relative MSE; got {value!r}")
    if value > 1.0:
        raise ValueError(f"target must be a relative MSE of at most 1 (the zero output's: MSE "
                         f"over the exact output's mean square), greater than 0; got {value!r}")
    return value


# ---------------------------------------------------------------------------
# Pooling over heads
# ---------------------------------------------------------------------------


def _mean(values):
    vals = [v for v in values if v is not None]
    if len(vals) < len(values):
        return None
    return float(np.mean(vals))


def _combined_se(values):
    if any(v is None for v in values):
        return None
    return math.sqrt(sum(v * v for v in values)) / len(values)


def _pooled_first_order(group):
    reasons = [r["first_order_reason"] for r in group if r["first_order_reason"]]
    if reasons:
        return {"first_order_mse": None, "first_order_stderr": None, "first_order_valid": None,
                "first_order_ratio": None, "normaliser_rel_sd": None,
                "first_order_reason": reasons[0]}
    fo = _mean([r["first_order_mse"] for r in group])
    att = _mean([r["attention_mse"] for r in group])
    return {"first_order_mse": fo,
            "first_order_stderr": _combined_se([r["first_order_stderr"] for r in group]),
            "first_order_valid": all(r["first_order_valid"] for r in group),
            "first_order_ratio": fo / att if att and math.isfinite(att) else None,
            "normaliser_rel_sd": float(np.sqrt(np.mean([r["normaliser_rel_sd"] ** 2 for r in group]))),
            "first_order_reason": None}


def _pooled_floor(group):
    reasons = [r["floor_reason"] for r in group if r["floor_reason"]]
    if reasons:
        return {"floor_mse": None, "floor_stderr": None, "floor_valid": None,
                "floor_normaliser_rel_sd": None, "floor_reason": reasons[0]}
    return {"floor_mse": _mean([r["floor_mse"] for r in group]),
            "floor_stderr": _combined_se([r["floor_stderr"] for r in group]),
            "floor_valid": all(r["floor_valid"] for r in group),
            "floor_normaliser_rel_sd": float(np.sqrt(np.mean([r["floor_normaliser_rel_sd"] ** 2
                                                              for r in group]))),
            "floor_reason": None}


def _pooled_row(group, kernel):
    first = group[0]
    att = float(np.mean([r["attention_mse"] for r in group]))  # inf or NaN propagate
    se = _combined_se([r["attention_mse_stderr"] for r in group])
    uniform = float(np.mean([r["uniform_mse"] for r in group]))
    zero = float(np.mean([r["zero_mse"] for r in group]))
    ok = se is not None and math.isfinite(att)
    row = {key: first[key] for key in ("preset", "kind", "ensemble", "norms", "m", "r")}
    row["head"] = "all"
    row["params"] = first["params"] if len(group) == 1 else None
    row.update({
        "attention_mse": att, "attention_mse_stderr": se,
        "draws": first["draws"], "draws_nonfinite": int(sum(r["draws_nonfinite"] for r in group)),
        "relative_mse": att / zero if ok and zero > 0 else None,
        "uniform_mse": uniform, "zero_mse": zero,
        "worse_than_uniform": beyond(att, uniform, se, zero) if ok else True,
        "better_than_uniform": beyond(uniform, att, se, zero) if ok else False,
        "worse_than_zero": beyond(att, zero, se, zero) if ok else True,
        "nonpositive_rows_share": float(np.mean([r["nonpositive_rows_share"] for r in group])),
        "heads_worse_than_uniform": int(sum(r["worse_than_uniform"] for r in group)),
        "heads": len(group),
    })
    shares = [r["stabiliser_share_mean"] for r in group]
    tops = [r["stabiliser_share_max"] for r in group]
    row.update({"stabiliser_share_mean": None if None in shares else float(np.mean(shares)),
                "stabiliser_share_max": None if None in tops else float(np.max(tops)),
                "overflow_draws": int(sum(r["overflow_draws"] for r in group))})
    row.update(_pooled_first_order(group))
    row.update(_pooled_floor(group))
    row.update(kernel)
    return row


def pool_heads(rows, heads, pooled_logs, kernel_stats):
    """One row per preset x kind x ensemble x m, pooled over heads (module docstring).

    ``pooled_logs[(kind, ensemble, m)]`` holds the log relative kernel MSEs
    of every head's pairs; ``kernel_stats(logs)`` their statistics (the
    kernel fields of a row). Where a (kind, ensemble, m) has no exact value
    on some head, the pooled fields are None with that head's reason.
    """
    groups = {}
    for row in rows:
        groups.setdefault((row["preset"], row["kind"], row["ensemble"], row["m"]), []).append(row)
    all_pairs = all(h["all_pairs"] for h in heads)
    out = []
    for (p, kind, ens, m), group in groups.items():
        logs = pooled_logs.get((kind, ens, m))
        if logs is None:  # no theory, or out of its range on some head: that head's reason
            why = next(r for r in group if r["kernel_reason"] is not None)
            kernel = {k: (v if k == "kernel_reason" else None) for k, v in why.items()
                      if k.startswith("kernel_")}
        else:
            kernel = kernel_stats(logs)
            if all_pairs:
                kernel["kernel_rel_mse_mean_stderr"] = 0.0
            kernel["kernel_reason"] = None
        out.append(_pooled_row(group, kernel))
    return out


# ---------------------------------------------------------------------------
# Advice
# ---------------------------------------------------------------------------


def _curves(summary):
    """(preset, kind, ensemble) -> sorted [(r, m, relative MSE, its stderr, worse than uniform)]."""
    curves = {}
    for row in summary:
        rel = row["relative_mse"]
        se = row["attention_mse_stderr"]
        rel_se = None if rel is None or se is None else se / row["zero_mse"]
        curves.setdefault(tuple(row[k] for k in _KEY), []).append(
            (row["r"], row["m"], rel, rel_se, row["worse_than_uniform"]))
    return {key: sorted(pts) for key, pts in curves.items()}


def _round_up(r, per):
    """r rounded up to a whole number of projections (``per`` features each)."""
    return int(per * math.ceil(r / per - 1e-9))


def _crossing(pts, target, per):
    """(r_needed, how, note) of one curve (module docstring)."""
    finite = [(r, rel) for r, _, rel, _, _ in pts if rel is not None and rel >= 0 and math.isfinite(rel)]
    if not finite:
        return None, "unknown", "no finite attention MSE on the grid"
    if finite[0][1] <= target:
        return finite[0][0], "at most", f"the smallest r measured, {finite[0][0]}, already reaches it"
    for (r0, e0), (r1, e1) in zip(finite, finite[1:]):
        if e1 == 0:  # exact at r1 (no log to interpolate)
            return r1, "at most", f"exact (MSE 0) at r = {r1}, not reached at r = {r0}"
        if e1 <= target:
            slope = math.log(e1 / e0) / math.log(r1 / r0)
            r = r0 * (target / e0) ** (1.0 / slope)
            return _round_up(min(max(r, r0), r1), per), "interpolated", f"between r = {r0} and {r1}"
    if len(finite) < 2:
        return None, "unreachable", f"not reached at r = {finite[-1][0]}, the only finite point"
    (r0, e0), (r1, e1) = finite[-2], finite[-1]
    slope = math.log(e1 / e0) / math.log(r1 / r0)
    if slope >= SLOPE_MIN:
        return None, "unreachable", (f"not reached by r = {r1}, and the error does not fall with r "
                                     f"there (local slope {slope:.2f} of log MSE against log r)")
    r = r1 * (target / e1) ** (1.0 / slope)
    if r > min(R_MAX, EXTRAPOLATE_MAX * r1):
        return None, "unreachable", (f"not reachable at any practical r: at the local slope "
                                     f"{slope:.2f} it would need more than {EXTRAPOLATE_MAX} times "
                                     f"the largest r measured ({r1})")
    return _round_up(r, per), "extrapolated", f"beyond r = {r1}, with the local slope {slope:.2f}"


def _at(pts, r):
    """(relative MSE, stderr or None, measured?) of a curve at budget r, or None outside its grid."""
    finite = [p for p in pts if p[2] is not None and p[2] >= 0 and math.isfinite(p[2])]
    for rr, _, rel, se, _ in finite:
        if rr == r:
            return rel, se, True
    for (r0, _, e0, _, _), (r1, _, e1, _, _) in zip(finite, finite[1:]):
        if r0 < r < r1 and min(e0, e1) > 0:
            t = math.log(r / r0) / math.log(r1 / r0)
            return math.exp((1 - t) * math.log(e0) + t * math.log(e1)), None, False
    return None


def _best(curves, r):
    ranking = []
    for key, pts in curves.items():
        got = _at(pts, r)
        if got is not None:
            ranking.append({**dict(zip(_KEY, key)), "relative_mse": got[0],
                            "relative_mse_stderr": got[1], "measured": got[2]})
    ranking.sort(key=lambda e: e["relative_mse"])
    significant = None
    if len(ranking) >= 2 and ranking[0]["measured"] and ranking[1]["measured"]:
        s0, s1 = ranking[0]["relative_mse_stderr"], ranking[1]["relative_mse_stderr"]
        if s0 is not None and s1 is not None:
            gap = ranking[1]["relative_mse"] - ranking[0]["relative_mse"]
            significant = bool(gap > 2.0 * math.hypot(s0, s1))
    note = None
    if not ranking:
        grid = sorted({p[0] for pts in curves.values() for p in pts})
        note = (f"r = {r} is outside every estimator's measured grid (r from {grid[0]} to "
                f"{grid[-1]}) or between points that are not finite; not extrapolated")
    return {"r": int(r), "best": ranking[0] if ranking else None,
            "ahead_of_runner_up": significant, "ranking": ranking, "note": note}


def advise(summary, target, budgets=None):
    """The advice of a diagnosis from its pooled rows (module docstring).

    Returns ``{"target": target, "budget": [...], "best": [...]}``: one
    ``budget`` entry per curve (``r_needed``, ``how``, ``note``,
    ``worse_than_uniform_at``: the grid r where the estimator is worse than
    uniform attention) and one ``best`` entry per budget r (default: every r
    of the grid).
    """
    curves = _curves(summary)
    budget = []
    for key, pts in curves.items():
        per = pts[0][0] // pts[0][1]
        r, how, note = _crossing(pts, target, per)
        budget.append({**dict(zip(_KEY, key)), "r_needed": r, "how": how, "note": note,
                       "worse_than_uniform_at": [p[0] for p in pts if p[4]]})
    budget.sort(key=lambda e: (e["r_needed"] is None, e["r_needed"] or 0))
    rs = sorted({p[0] for pts in curves.values() for p in pts}) if budgets is None else budgets
    return {"target": target, "budget": budget, "best": [_best(curves, r) for r in rs]}
