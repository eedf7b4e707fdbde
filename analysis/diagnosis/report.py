"""The report of a diagnosis: Markdown for people, CSV for tables.

:func:`markdown_report` writes what :func:`rfkernels.analysis.diagnose`
found in the order a user asks: what the data looks like (how large
|q' + k'|^2 gets), the verdict (which estimators are worse than uniform
attention, in plain words), the pooled table, the advice and, for several
heads, one line per head. :func:`write_csv` writes the per-head rows or the
pooled summary with fixed columns (:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

import csv
import io
import math

from rfkernels.estimators import registry
from rfkernels.floor import valid_from
from rfkernels.presets import preset as preset_entry

from .advice import EXTRAPOLATE_MAX

__all__ = ["CSV_COLUMNS", "POSITION_COLUMNS", "markdown_report", "null_reason", "write_csv"]

#: Columns of the CSV files, in order (summary rows add ``heads`` and ``heads_worse_than_uniform``).
CSV_COLUMNS = (
    "head", "preset", "kind", "ensemble", "norms", "m", "r", "params",
    "attention_mse", "attention_mse_stderr", "relative_mse", "uniform_mse", "zero_mse",
    "worse_than_uniform", "better_than_uniform", "worse_than_zero", "draws", "draws_nonfinite",
    "nonpositive_rows_share", "stabiliser_share_mean", "stabiliser_share_max", "overflow_draws",
    "first_order_mse", "first_order_stderr", "first_order_valid", "first_order_ratio",
    "normaliser_rel_sd",
    "kernel_rel_mse_median", "kernel_rel_mse_q90", "kernel_rel_mse_q99", "kernel_rel_mse_max",
    "kernel_rel_mse_mean", "kernel_rel_mse_mean_stderr", "kernel_share_rel_mse_above_1",
    "heads", "heads_worse_than_uniform", "first_order_reason", "kernel_reason",
    "floor_mse", "floor_stderr", "floor_valid", "floor_normaliser_rel_sd", "floor_reason",
)
#: Columns of the causal position rows (``diagnosis_positions.csv``).
POSITION_COLUMNS = (
    "head", "preset", "kind", "ensemble", "norms", "m", "r", "bucket", "first_row", "last_row",
    "keys_min", "keys_max", "attention_mse", "attention_mse_stderr", "relative_mse", "zero_mse",
    "uniform_mse", "worse_than_uniform", "first_order_mse", "first_order_reason", "heads",
)
#: The variance floor's fields of a row (their reason: ``floor_reason``): the least attention
#: MSE at r of any policy of independent draws of the kind's representation, first order.
FLOOR_FIELDS = ("floor_mse", "floor_stderr", "floor_valid", "floor_normaliser_rel_sd")


#: Attention-level fields, undefined where a draw's output was not finite.
_ATTENTION_FIELDS = ("attention_mse", "attention_mse_stderr", "relative_mse", "first_order_ratio")
#: Fields of the first-order theory that are not named ``first_order_*``.
_FIRST_ORDER_FIELDS = ("normaliser_rel_sd",)
#: Reasons of the other nulls a diagnosis can hold, by field: ``reason(row)``.
_OTHER_NULLS = {
    "relative_mse": lambda row: ("the exact output is zero (mean square 0): no relative MSE"
                                 if row.get("zero_mse") == 0 else None),
    "first_order_ratio": lambda row: "the attention MSE is 0 or not finite",
    "first_order_stderr": lambda row: "the first-order theory used every query row: no sampling error",
    "kernel_rel_mse_mean_stderr": lambda row: "fewer than 2 pairs: no standard error",
    "params": lambda row: (f"pooled over {row.get('heads')} heads, each with its own fitted "
                           "parameters (see the rows)"),
    "r_needed": lambda row: row.get("note"),
    "best": lambda row: row.get("note") or "no estimator has a finite relative MSE at this r",
    "note": lambda row: "nothing to add",
    "scheduler": lambda row: "no Dask scheduler: the heads ran on this machine's processes",
    "unshifted_overflow_side": lambda row: "no side overflows unshifted in this dtype",
    "ahead_of_runner_up": lambda row: ("not decided: the best and the runner-up are not both "
                                       "measured at this r with standard errors"),
    "relative_mse_stderr": lambda row: ("interpolated between grid points: no standard error"
                                        if row.get("measured") is False else None),
    "rounding_mse": lambda row: "every draw overflowed in this dtype, or a row failed in each",
    "rounding_to_sampling": lambda row: "no finite rounding or sampling MSE",
    "stabiliser_share_mean": lambda row: ("preset 'rfkernels' adds no epsilon"
                                          if _exact(row.get("preset")) else
                                          "every draw's features overflowed"),
    "stabiliser_share_max": lambda row: ("preset 'rfkernels' adds no epsilon"
                                         if _exact(row.get("preset")) else
                                         "every draw's features overflowed"),
}


def null_reason(key, value, row):
    """Why a value of a diagnosis is null in its strict JSON (``explain`` of
    :func:`rfkernels.strict_json.json_safe`): the row's own reason fields, a
    draw that was not finite, beyond float64, or the field's meaning."""
    base = key.split("[", 1)[0]
    if base.endswith("_reason"):
        return "nothing to explain: the fields it would explain have values"
    if (base.startswith("first_order_") or base in _FIRST_ORDER_FIELDS) and row.get("first_order_reason"):
        return row["first_order_reason"]
    if base.startswith("kernel_") and row.get("kernel_reason"):
        return row["kernel_reason"]
    if base.startswith("floor_") and row.get("floor_reason"):
        return row["floor_reason"]
    if base.startswith("rounding_") and row.get("rounding_reason"):
        return row["rounding_reason"]
    if base in _ATTENTION_FIELDS and row.get("draws_nonfinite"):
        return (f"{row['draws_nonfinite']} of {row.get('draws')} projection draws gave an attention "
                "output that is not finite (a normaliser exactly 0, or an overflow), so the mean "
                "over draws is not defined")
    if isinstance(value, float) and math.isinf(value):
        return "beyond float64" if value > 0 else "-inf: beyond float64"
    if value is not None:
        return None  # NaN: the generic reason
    return _OTHER_NULLS.get(base, lambda row: None)(row)


def _cell(value):
    if value is None:
        return ""
    if isinstance(value, dict):
        return ";".join(f"{k}={v!r}" for k, v in value.items())
    if isinstance(value, float):
        return repr(value)
    return value


def _write(rows, fh, columns=CSV_COLUMNS):
    writer = csv.DictWriter(fh, fieldnames=columns, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in columns})


def write_csv(rows, file=None, columns=CSV_COLUMNS):
    """Write ``rows`` (``columns``) as CSV to a path or a text file; with no file return the text."""
    if file is None:
        buf = io.StringIO()
        _write(rows, buf, columns)
        return buf.getvalue()
    if hasattr(file, "write"):
        _write(rows, file, columns)
        return None
    with open(file, "w", newline="") as fh:
        _write(rows, fh, columns)
    return None


# ---------------------------------------------------------------------------
# Markdown
# ---------------------------------------------------------------------------


def _num(value, digits=3):
    """A number for a table: 3 significant digits, '—' for none, 'beyond float64' for inf."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "beyond float64"
    return f"{value:.{digits}g}"


def _nonnegative(kind):
    """The kind's features are >= 0 (its normalisers too): a bad estimate is the heavy tail's."""
    return registry.entry("kind", kind).nonnegative


def _exact(name):
    """Whether the preset ``name`` (None: none) computes the estimators exactly (:attr:`Preset.exact`)."""
    return name is not None and preset_entry(name).exact


def _name(row):
    text = f"{row['kind']} {row['ensemble']}"
    return text if _exact(row["preset"]) else f"{text} ({row['preset']})"


def _table(header, lines):
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c) for c in line) + " |" for line in lines]
    return out


def _provenance(diag, provenance):
    meta = diag.meta
    lines = ["## Provenance", ""]
    for key, value in (provenance or {}).items():
        lines.append(f"- **{key}**: `{value}`" if not isinstance(value, dict)
                     else f"- **{key}**: " + ", ".join(f"{k} `{v}`" for k, v in value.items()))
    lines += [
        f"- **rfkernels**: {meta['version']}; seed entropy `{meta['entropy']}`; "
        f"{meta['seconds']:.1f} s on {meta['workers']} worker(s)",
        f"- **kernel**: {meta['kernel']}, scale = {meta['scale']:.6g}",
        f"- **attention**: {meta['attention']}",
        f"- **grid**: m = {', '.join(map(str, meta['m_values']))}; kinds {', '.join(meta['kinds'])}; "
        f"ensembles {', '.join(meta['ensembles'])}; presets {', '.join(meta['presets'])}; "
        f"norms {meta['norms']}",
        f"- **sampling**: {meta['draws']} projection draws per (m, ensemble), each on "
        f"{meta['queries']} query rows; {meta['pairs']} query-key pairs per head for the kernel "
        f"level; {meta['first_order_queries']} rows for the first-order theory",
        "",
    ]
    return lines


def _data(diag):
    meta, heads = diag.meta, diag.heads
    heavy = _heavy_share(diag)
    q50 = [h["u2_quantiles"]["q50"] for h in heads]
    q99 = [h["u2_quantiles"]["q99"] for h in heads]
    exact = sum(h["exact_mean_square"] for h in heads) / len(heads)
    uniform = sum(h["uniform_mse"] for h in heads) / len(heads)
    lines = ["## Your data", "",
             f"- {meta['heads']} head(s) (leading shape {tuple(meta['head_shape'])}), L = {meta['L']} "
             f"queries, L_k = {meta['L_k']} keys, d = {meta['d']}, d_v = {meta['d_v']}; values "
             f"{meta['values']}.",
             f"- |q' + k'|^2 of the scaled vectors: median {_num(min(q50))} to {_num(max(q50))} "
             f"over heads, 99th percentile up to {_num(max(q99))}, largest "
             f"{_num(max(h['u2_max'] for h in heads))}.",
             f"- **{100 * heavy:.1f}%** of the sampled pairs are in the heavy-tail regime "
             f"(|q' + k'|^2 > {meta['heavy_tail_u2']:g}), where positive-type estimates have a "
             "roughly log-normal error and Monte Carlo converges slowly.",
             f"- Exact attention output: mean square {_num(exact)} (the MSE of a zero output); "
             f"uniform attention (every row the mean of V) has MSE {_num(uniform)}, "
             f"{_num(uniform / exact if exact > 0 else None)} of it.",
             ]
    fitted = {}
    for h in heads:
        for kind, params in h["fitted"].items():
            for name, value in params.items():
                fitted.setdefault(f"{kind} {name}", []).append(value)
    for name, values in fitted.items():
        lines.append(f"- Fitted on each head's queries and keys: {name} from {_num(min(values))} "
                     f"to {_num(max(values))}.")
    return lines + [""]


#: A pooled attention MSE whose standard error is above this share of it is not resolved from 0
#: at 3 standard errors (a heavy tail): its comparison with uniform attention is "unresolved".
UNRESOLVED_SE = 1.0 / 3.0


def _vs_uniform(row):
    """'worse', 'better', 'unresolved' (standard error above a third of the MSE) or 'within 2 se'."""
    if row["worse_than_uniform"]:
        return "worse"
    if row["better_than_uniform"]:
        return "better"
    mse, se = row["attention_mse"], row["attention_mse_stderr"]
    if mse is not None and se is not None and se > UNRESOLVED_SE * mse:
        return "unresolved"
    return "within 2 se"


def _heavy_share(diag):
    pairs = sum(h["pairs"] for h in diag.heads)
    return sum(h["heavy_tail_share"] * h["pairs"] for h in diag.heads) / pairs


def _verdict(diag):
    lines = ["## Verdict", ""]
    groups = {}
    for row in diag.summary:
        groups.setdefault(_name(row), []).append(row)
    for name, rows in groups.items():
        worse = [r for r in rows if r["worse_than_uniform"]]
        finite = [r for r in rows if r["relative_mse"] is not None]
        best = min(finite, key=lambda r: r["relative_mse"]) if finite else None
        better = [r for r in rows if r["better_than_uniform"]]
        unclear = [r for r in rows if _vs_uniform(r) == "within 2 se"]
        unresolved = [r for r in rows if _vs_uniform(r) == "unresolved"]
        if len(worse) == len(rows):
            lines.append(f"- **{name}: worse than uniform attention at every m measured** "
                         f"(r = {', '.join(str(r['r']) for r in rows)}). Returning the mean of V "
                         "would be more accurate" + (": far in the heavy tail the unbiased "
                                                     "estimator picks keys almost at random."
                                                     if _nonnegative(rows[0]["kind"]) else
                                                     ": its normalisers are noisy and change sign."))
        elif len(better) == len(rows):
            lines.append(f"- {name}: better than uniform attention at every m measured.")
        else:
            parts = [f"{label} at m = {', '.join(str(r['m']) for r in group)}"
                     for label, group in (("**worse than uniform attention**", worse),
                                          ("better than uniform attention", better),
                                          ("within 2 se of uniform attention", unclear),
                                          ("**unresolved** against uniform attention", unresolved))
                     if group]
            if unresolved:
                parts[-1] += (" (the standard error is above a third of the MSE: a heavy tail; "
                              f"{100 * _heavy_share(diag):.1f}% of the sampled pairs are in the "
                              "heavy-tail regime, per head in the last table)")
            lines.append(f"- **{name}**: " + "; ".join(parts) + ".")
        if best is not None:
            lines[-1] += (f" Lowest relative attention MSE {_num(best['relative_mse'])} at "
                          f"r = {best['r']}.")
    return lines + [""]


def _summary_table(diag):
    header = ["estimator", "m", "r", "attention MSE ± se", "relative", "vs uniform",
              "first order (valid)", "kernel rel. MSE median / 99%"]
    lines = []
    for row in diag.summary:
        fo = ("—" if row["first_order_mse"] is None else
              f"{_num(row['first_order_mse'])} ({_num(row['first_order_valid'])})")
        vs = _vs_uniform(row)
        lines.append([_name(row), row["m"], row["r"],
                      f"{_num(row['attention_mse'])} ± {_num(row['attention_mse_stderr'], 2)}",
                      _num(row["relative_mse"]), vs, fo,
                      f"{_num(row['kernel_rel_mse_median'])} / {_num(row['kernel_rel_mse_q99'])}"])
    return ["## Attention error, pooled over heads", "",
            "Relative = attention MSE / mean square of the exact output. Kernel level: the exact "
            "MSE of each exp(scale q.k) over its square, on the sampled pairs.", ""] + \
        _table(header, lines) + [""]


def _presets(diag):
    rows = [r for r in diag.summary if not _exact(r["preset"])]
    if not rows:
        return []
    plain = {(r["kind"], r["ensemble"], r["m"]): r for r in diag.summary if _exact(r["preset"])}
    lines = []
    for row in rows:
        ref = plain.get((row["kind"], row["ensemble"], row["m"]))
        lines.append([row["preset"], f"{row['kind']} {row['ensemble']}", row["m"],
                      _num(row["relative_mse"]), "—" if ref is None else _num(ref["relative_mse"]),
                      _num(row["stabiliser_share_mean"]), _num(row["stabiliser_share_max"]),
                      row["overflow_draws"], _vs_uniform(row)])
    header = ["preset", "estimator", "m", "relative MSE", "rfkernels' relative MSE",
              "epsilon share of D (mean)", "(max)", "draws overflowed", "vs uniform"]
    return ["## What the libraries compute", "",
            "The same W and rows through each library's numerics (rfkernels.presets). The epsilon "
            "share is the part of each row's normaliser that the additive stabiliser makes: near 1, "
            "every output row is close to the mean of V (uniform attention), whatever the error "
            "looks like.", ""] + _table(header, lines) + [""]


def _precision(diag):
    if not diag.precision:
        return []
    lines = []
    for row in diag.precision:
        if len(diag.heads) > 1 and row["m"] != max(diag.meta["m_values"]):
            continue
        lines.append([row["head"], _name(row), row["m"], row["dtype"], _num(row["rounding_mse"]),
                      _num(row["sampling_mse"]), _num(row["rounding_to_sampling"]),
                      f"{100 * row['failed_rows_share']:.1f}%", row["overflow_draws"]])
    header = ["head", "estimator", "m", "dtype", "rounding MSE", "sampling MSE", "ratio",
              "failed rows", "draws overflowed"]
    return ["## Precision", "",
            "The same attention with every step rounded to the dtype (float32 results rounded: an "
            "emulation, not a GPU kernel; rfkernels.analysis.precision), against its float64 "
            "output; the sampling MSE is the float64 error against exact attention. A ratio far "
            "below 1: precision is not the problem."
            + (f" Shown at m = {max(diag.meta['m_values'])}." if len(diag.heads) > 1 else ""),
            ""] + _table(header, lines) + [""] + _overflow(diag)


def _overflow(diag):
    if not diag.overflow:
        return []
    lines = [[r["head"], r["preset"], r["kind"], r["dtype"], _num(r["log_max"]),
              _num(max(r["max_exponent_queries"], r["max_exponent_keys"]) + r["unshifted_offset"]),
              _num(r["unshifted_overflows"]), _num(r["feature_overflows"]),
              f"{100 * r['key_feature_underflow_share']:.1f}%"]
             for r in diag.overflow if r["dtype"] != "float64"]
    header = ["head", "preset", "kind", "dtype", "dtype's largest exponent", "unshifted exponent",
              "overflows unshifted", "overflows as computed", "key features underflowing"]
    return ["Overflow on this data, one W per head (the first draw's, at the largest m): the "
            "largest unshifted exponent against the dtype's, and the features as each preset "
            "computes them.", ""] + _table(header, lines) + [""]


def _advice(diag):
    adv = diag.advice
    lines = ["## Advice", "",
             f"Target: relative attention MSE <= {adv['target']:g} "
             f"({100 * math.sqrt(adv['target']):.3g}% root-mean-square relative error).", ""]
    rows = [[_name(b), _num(b["r_needed"]), b["how"], b["note"]] for b in adv["budget"]]
    lines += _table(["estimator", "features r needed", "how", "note"], rows) + [""]
    best = []
    for b in adv["best"]:
        if b["best"] is None:
            best.append([b["r"], "—", "—", "—"])
            continue
        ahead = {True: "yes", False: "no (within 2 se)", None: "not tested"}[b["ahead_of_runner_up"]]
        best.append([b["r"], _name(b["best"]), _num(b["best"]["relative_mse"])
                     + ("" if b["best"]["measured"] else " (interpolated)"), ahead])
    lines += _table(["r", "best estimator", "relative MSE", "ahead of runner-up"], best)
    if adv.get("per_head"):
        lines += ["", "Per head, the features r needed (the layer needs the largest):", ""]
        names = [_name(b) for b in adv["per_head"][0]["budget"]]
        cells = []
        for entry in adv["per_head"]:
            got = {_name(b): b for b in entry["budget"]}
            cells.append([entry["head"]] + [
                "—" if got[n]["r_needed"] is None else
                f"{got[n]['r_needed']}" + ("" if got[n]["how"] in ("interpolated", "at most")
                                           else f" ({got[n]['how']})") for n in names])
        lines += _table(["head"] + names, cells)
    return lines + [""]


def _floor_reach(row, target):
    """(r at which the floor reaches ``target``, r from which its first order is valid) of a row,
    as floats (the floor is exactly c / r, so no grid is needed)."""
    c = row["floor_mse"] / row["zero_mse"] * row["r"]
    return c / target, valid_from(row["floor_normaliser_rel_sd"], row["r"])


def _r_text(r, practical):
    """An r to print: a whole number, or beyond ``practical`` its order of magnitude only."""
    return f"{math.ceil(r)}" if r <= practical else f"{r:.2g} (beyond any practical r)"


def _floor_verdict(r_target, r_valid, practical):
    if r_target > practical:
        return (f"not reachable at any practical r by independent draws: the floor needs r = "
                f"{r_target:.2g}, more than {EXTRAPOLATE_MAX} times the largest r measured")
    if r_valid <= r_target:
        return (f"no policy of independent draws reaches it below r = {math.ceil(r_target)} "
                f"(first order valid from r = {math.ceil(r_valid)})")
    return (f"the floor reaches it at r = {math.ceil(r_target)}, but its first order holds only "
            f"from r = {_r_text(r_valid, practical)}: below that the floor bounds nothing")


def _floor(diag):
    """The variance floor: per kind, pooled, and the r at which even it reaches the target."""
    if not diag.meta.get("floor"):
        return []
    target = diag.advice["target"]
    top_m = max(diag.meta["m_values"])
    practical = EXTRAPOLATE_MAX * max(r["r"] for r in diag.summary)
    by_kind = {}
    for row in diag.summary:
        if _exact(row["preset"]) and row["ensemble"] == diag.meta["ensembles"][0]:
            by_kind.setdefault(row["kind"], []).append(row)
    measured = {(r["kind"], r["ensemble"]): r["relative_mse"] for r in diag.summary
                if _exact(r["preset"]) and r["m"] == top_m}
    lines = ["## The variance floor", "",
             "The least relative attention MSE of any policy of independent draws of each kind's "
             "representation (`rfkernels.floor.attention_floor`, first order, pooled over heads), "
             "beside what was measured. Coupled draws (orthogonal, simplex, antithetic) can go "
             "below it: their measured ratio to iid is shown.", ""]
    rows = []
    for kind, group in by_kind.items():
        group = sorted(group, key=lambda r: r["r"])
        last = group[-1]
        if last["floor_mse"] is None:
            rows.append([kind, "—", "—", "—", last["floor_reason"], "—"])
            continue
        floors = ", ".join(f"{_num(r['floor_mse'] / r['zero_mse'])} (r = {r['r']})" for r in group)
        r_target, r_valid = _floor_reach(last, target)
        iid, orth = measured.get((kind, "iid")), measured.get((kind, "orthogonal"))
        gain = _num(orth / iid) if iid and orth is not None and math.isfinite(iid) else "—"
        over = (last["relative_mse"] / (last["floor_mse"] / last["zero_mse"])
                if last["relative_mse"] is not None and last["floor_mse"] > 0 else None)
        rows.append([kind, floors, _num(last["relative_mse"]), _num(over),
                     _floor_verdict(r_target, r_valid, practical), gain])
    lines += _table(["kind", "floor (relative MSE)", f"measured at m = {top_m}", "measured / floor",
                     f"target {target:g}", f"orthogonal / iid at m = {top_m}"], rows)
    heads, ratios = {}, {}
    for row in diag.rows:
        if (_exact(row["preset"]) and row["m"] == top_m and row["floor_mse"] is not None
                and row["ensemble"] == diag.meta["ensembles"][0]):
            r_target, r_valid = _floor_reach(row, target)
            heads.setdefault(row["head"], {})[row["kind"]] = _r_text(r_target, practical) + (
                "" if r_valid <= r_target else f" (valid from {_r_text(r_valid, practical)})")
            ratios.setdefault(row["head"], {})[row["kind"]] = _floor_ratio(row)
    if len(heads) > 1:
        kinds = list(by_kind)
        index = {h["head"]: tuple(h["index"]) for h in diag.heads}
        lines += ["", f"Per head, the r at which the floor reaches {target:g} (and where its "
                      "first order holds, if only above that):", ""]
        lines += _table(["head", "index"] + kinds, [[h, index[h]] + [got.get(k, "—") for k in kinds]
                                                    for h, got in heads.items()])
        lines += ["", f"Per head, the measured attention MSE over the floor at m = {top_m} "
                      f"({diag.meta['ensembles'][0]}; ± its standard error, from the draws and the "
                      "floor's; * where the floor's first order is not valid there, so the ratio "
                      "can be below 1):", ""]
        lines += _table(["head", "index"] + kinds, [[h, index[h]] + [got.get(k, "—") for k in kinds]
                                                    for h, got in ratios.items()])
    return lines + [""]


def _floor_ratio(row):
    """``measured / floor ± se`` of a row (``*`` where the floor's first order is not valid)."""
    floor, se_f = row["floor_mse"], row["floor_stderr"]
    mse, se = row["attention_mse"], row["attention_mse_stderr"]
    if mse is None or se is None or not floor > 0 or not math.isfinite(mse):
        return "—"
    ratio = mse / floor
    se_ratio = ratio * math.hypot(se / mse if mse > 0 else 0.0, (se_f or 0.0) / floor)
    return f"{_num(ratio)} ± {_num(se_ratio)}" + ("" if row["floor_valid"] else "*")


def _positions(diag):
    """Causal attention: the pooled relative MSE per position decile at the largest m, and the r
    each estimator needs on the first 10% of rows and on the rest."""
    if not diag.meta.get("causal") or not diag.positions:
        return []
    top_m = max(diag.meta["m_values"])
    pooled = [r for r in diag.positions if r["head"] == "all" and r["m"] == top_m]
    buckets = sorted({(r["bucket"], r["keys_min"], r["keys_max"]) for r in pooled})
    curves = {}
    for row in pooled:
        curves.setdefault((row["preset"], row["kind"], row["ensemble"]), {})[row["bucket"]] = row
    lines = ["## Error against position (causal attention)", "",
             "Row i attends to its first i + 1 keys (prefix sums), so the error depends on the "
             "position. The rows are split into deciles; per decile, the relative attention MSE "
             f"at m = {top_m}, pooled over heads (each decile relative to its own exact output's "
             "mean square; ± one standard error; *worse* where worse than causal uniform "
             "attention there, each row the mean of the values it sees):", ""]
    header = ["estimator"] + [f"keys {lo}-{hi}" for _, lo, hi in buckets]
    table = []
    for (p, kind, ens), by_bucket in curves.items():
        cells = []
        for b, _, _ in buckets:
            row = by_bucket.get(b)
            if row is None or row["relative_mse"] is None:
                cells.append("—")
                continue
            se = row["attention_mse_stderr"] / row["zero_mse"] if row["zero_mse"] > 0 else None
            cells.append(f"{_num(row['relative_mse'])} ± {_num(se, 2)}"
                         + (" *worse*" if row["worse_than_uniform"] else ""))
        table.append([f"{kind}/{ens}" + ("" if _exact(p) else f" ({p})")] + cells)
    lines += _table(header, table)
    advice = diag.advice.get("positions") or []
    if advice:
        target = diag.advice["target"]
        lines += ["", f"The r each estimator needs for relative MSE {target:g} on the first 10% of "
                      "rows and on the rest (as the advice above, on each range's pooled curve):", ""]
        rows = []
        for entry in advice:
            cells = []
            for label in ("first 10%", "rest"):
                got = entry.get(label)
                cells.append("—" if got is None else
                             (f"{got['r_needed']} ({got['how']})" if got["r_needed"] is not None
                              else got["how"] + ": " + got["note"]))
            rows.append([f"{entry['kind']}/{entry['ensemble']}"
                         + ("" if _exact(entry["preset"]) else f" ({entry['preset']})")] + cells)
        lines += _table(["estimator", "first 10% of rows", "the rest"], rows)
    return lines + [""]


def _per_head(diag):
    if len(diag.heads) < 2:
        return []
    worse, best = {}, {}
    top_m = max(diag.meta["m_values"])
    for row in diag.rows:
        if row["m"] == top_m and row["worse_than_uniform"]:
            worse.setdefault(row["head"], []).append(_name(row))
        rel = row["relative_mse"]
        if rel is not None and (row["head"] not in best or rel < best[row["head"]]["relative_mse"]):
            best[row["head"]] = row
    lines = []
    for h in diag.heads:
        b = best.get(h["head"])
        lines.append([h["head"], tuple(h["index"]), _num(h["u2_quantiles"]["q50"]),
                      _num(h["u2_quantiles"]["q99"]), f"{100 * h['heavy_tail_share']:.1f}%",
                      _num(h["uniform_mse"] / h["exact_mean_square"]
                           if h["exact_mean_square"] > 0 else None),
                      "—" if b is None else f"{_num(b['relative_mse'])} ({_name(b)}, r = {b['r']})",
                      ", ".join(worse.get(h["head"], [])) or "none"])
    header = ["head", "index", "\\|q'+k'\\|^2 median", "99%", "heavy tail", "uniform / zero MSE",
              "lowest relative MSE", f"worse than uniform at m = {top_m}"]
    return ["## Per head", ""] + _table(header, lines) + [""]


def markdown_report(diagnosis, provenance=None):
    """The Markdown report of a :class:`rfkernels.analysis.diagnosis.Diagnosis`."""
    lines = ["# Random-feature attention on your data", ""]
    lines += _provenance(diagnosis, provenance)
    lines += _data(diagnosis)
    lines += _verdict(diagnosis)
    lines += _summary_table(diagnosis)
    lines += _presets(diagnosis)
    lines += _precision(diagnosis)
    lines += _advice(diagnosis)
    lines += _floor(diagnosis)
    lines += _positions(diagnosis)
    lines += _per_head(diagnosis)
    lines += ["## How to read this", "",
              "- *Attention MSE*: mean over query rows and value coordinates of (estimate - exact)^2, "
              "averaged over projection draws; ± one standard error over draws (fresh query rows "
              "each draw, so it covers the row sample too).",
              "- *Worse (better) than uniform*: the attention MSE is above (below) uniform "
              "attention's by more than 2 standard errors; else within 2 se, not distinguishable, "
              "or *unresolved* where the standard error is above a third of the MSE (a heavy tail: "
              "the MSE itself is not measured).",
              "- *First order*: the delta-method prediction (iid only), exactly 1/m; flagged valid "
              "where the normalisers' predicted relative standard deviation is at most "
              f"{diagnosis.meta['normaliser_sd_max']:g}.",
              "- *Advice*: curves of relative MSE against r; 'interpolated' between grid points in "
              "log-log, 'extrapolated' beyond the grid with the last local slope (an assumption), "
              "'unreachable' where the error does not fall with r or would need more than "
              f"{EXTRAPOLATE_MAX} times the largest r measured.", ""]
    return "\n".join(lines)
