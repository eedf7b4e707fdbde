"""Causal attention by position: the rows' buckets, their sample, their rows and their advice.

In causal attention row i attends to its prefix of i + 1 keys, so its error
depends on the position. A causal diagnosis (``diagnose(..., causal=True)``)
splits the rows into :data:`BUCKETS` position deciles of equal size (fewer
where L is smaller), samples each draw's query rows stratified over them
(the same number per bucket, so the plain mean over the sample is the mean
over all rows), and reports per bucket the measured attention MSE with its
standard error over the draws, relative to the bucket's own exact mean
square, beside the bucket's uniform baseline (each row the mean of the
values it sees: causal uniform attention) and the first-order prediction of
the bucket's theory rows. The advice names the r each estimator needs for
the target on the first 10% of rows (the first bucket) and on the rest.
"""

from __future__ import annotations

import math

import numpy as np

from .advice import advise, beyond

__all__ = ["BUCKETS", "bucket_edges", "bucket_of", "position_advice", "position_rows",
           "pooled_positions", "prefix_uniform", "stratified_rows"]

#: Position buckets of a causal diagnosis (deciles of the rows).
BUCKETS = 10


def bucket_edges(L):
    """The row edges of the position buckets: ``min(BUCKETS, L) + 1`` increasing ints from 0 to L."""
    n = min(BUCKETS, L)
    return np.round(np.linspace(0, L, n + 1)).astype(np.int64)


def bucket_of(rows, edges):
    """The bucket of each row."""
    return np.searchsorted(edges, rows, side="right") - 1


def stratified_rows(L, queries, rng):
    """Query rows sampled stratified by position: all rows where L <= queries, else the same
    number (at least one) from each bucket, without replacement, ascending."""
    if L <= queries:
        return np.arange(L, dtype=np.int64)
    edges = bucket_edges(L)
    per = max(1, queries // (edges.size - 1))
    out = [lo + rng.choice(hi - lo, size=min(per, hi - lo), replace=False)
           for lo, hi in zip(edges[:-1], edges[1:])]
    return np.sort(np.concatenate(out)).astype(np.int64)


def prefix_uniform(v):
    """Causal uniform attention: row i the mean of ``v[:i + 1]``."""
    return np.cumsum(v, axis=0) / np.arange(1, v.shape[0] + 1)[:, None]


def head_baselines(exact, v, edges):
    """Per bucket: the exact output's mean square and causal uniform attention's MSE (all rows)."""
    err = np.mean((exact - prefix_uniform(v)) ** 2, axis=1)
    sq = np.mean(exact * exact, axis=1)
    return ([float(sq[lo:hi].mean()) for lo, hi in zip(edges[:-1], edges[1:])],
            [float(err[lo:hi].mean()) for lo, hi in zip(edges[:-1], edges[1:])])


def bucket_means(per_row, rows, edges):
    """The mean of ``per_row`` (one value per sampled row) in each bucket (NaN where none)."""
    b = bucket_of(rows, edges)
    n = edges.size - 1
    total = np.bincount(b, weights=per_row, minlength=n)
    count = np.bincount(b, minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / np.maximum(count, 1), np.nan)


def _fields(draws, zero, uniform):
    n = draws.size
    finite = bool(np.all(np.isfinite(draws)))
    mean = float(draws.mean()) if finite else (math.nan if np.any(np.isnan(draws)) else math.inf)
    se = float(draws.std(ddof=1) / math.sqrt(n)) if finite and n >= 2 else None
    return _derived(mean, se, zero, uniform)


def _derived(mean, se, zero, uniform):
    """The MSE, its standard error (None: not resolved), relative to ``zero``, beside ``uniform``."""
    return {"attention_mse": mean, "attention_mse_stderr": se,
            "relative_mse": mean / zero if se is not None and zero > 0 else None,
            "zero_mse": zero, "uniform_mse": uniform,
            "worse_than_uniform": (beyond(mean, uniform, se, zero) if se is not None
                                   else not math.isfinite(mean))}


def _first_order_reason(pos, preset, kind, ensemble, fo, bucket):
    """Why a position row has no first-order prediction (None: it has one)."""
    if preset in pos["library_reasons"]:  # a library's numerics: the theory is the estimator's
        return pos["library_reasons"][preset]
    if fo is None:
        return pos["first_order_reasons"].get(kind, "no first-order theory for this kind")
    if ensemble not in pos["iid"]:
        return "the first-order theory is for iid projections only"
    if not math.isfinite(fo[bucket]):
        return "no theory row in this bucket"
    return None


def position_rows(res, base, r_of):
    """One row per cell x bucket of a head: ``res["positions"]`` ``{"cells": {(preset, kind,
    ensemble, m): (buckets, draws) array}, "edges", "zero", "uniform", "first_order"}``;
    ``base`` the row fields shared by every cell (head, norms), ``r_of(kind, m)`` the r."""
    pos = res["positions"]
    edges = pos["edges"]
    out = []
    for (p, kind, ens, m), cell in pos["cells"].items():
        fo = pos["first_order"].get(kind)
        for b in range(edges.size - 1):
            row = {**base, "preset": p, "kind": kind, "ensemble": ens, "m": m, "r": r_of(kind, m),
                   "bucket": b, "first_row": int(edges[b]), "last_row": int(edges[b + 1] - 1),
                   "keys_min": int(edges[b] + 1), "keys_max": int(edges[b + 1])}
            row.update(_fields(cell[b], pos["zero"][b], pos["uniform"][b]))
            row["first_order_reason"] = _first_order_reason(pos, p, kind, ens, fo, b)
            row["first_order_mse"] = None if row["first_order_reason"] else float(fo[b]) / m
            out.append(row)
    return out


def pooled_positions(rows):
    """The position rows pooled over heads (``head`` "all"): MSEs and baselines averaged, standard
    errors combined (the heads' draws are independent)."""
    groups = {}
    for row in rows:
        key = (row["preset"], row["kind"], row["ensemble"], row["m"], row["bucket"])
        groups.setdefault(key, []).append(row)
    out = []
    for group in groups.values():
        n = len(group)
        fo = [g["first_order_mse"] for g in group]
        row = {k: group[0][k] for k in ("preset", "kind", "ensemble", "norms", "m", "r", "bucket",
                                        "first_row", "last_row", "keys_min", "keys_max")}
        row["head"] = "all"
        row["heads"] = n
        row.update(_averaged(group))
        row.update({"first_order_mse": None if any(f is None for f in fo) else sum(fo) / n,
                    "first_order_reason": next((g["first_order_reason"] for g in group
                                                if g["first_order_reason"]), None)})
        out.append(row)
    return out


def _range_rows(pooled, buckets, label):
    """Summary-like rows of a range of buckets (for :func:`advise`): MSEs and baselines averaged."""
    groups = {}
    for row in pooled:
        if row["bucket"] in buckets:
            groups.setdefault((row["preset"], row["kind"], row["ensemble"], row["m"]), []).append(row)
    out = []
    for (p, kind, ens, m), group in groups.items():
        out.append({"preset": p, "kind": kind, "ensemble": ens, "m": m, "r": group[0]["r"],
                    "range": label, **_averaged(group)})
    return out


def _averaged(group):
    """Rows of independent draws averaged: MSEs and baselines by their mean, standard errors
    combined, and the fields :func:`_fields` derives from them."""
    n = len(group)
    ses = [g["attention_mse_stderr"] for g in group]
    mean = sum(g["attention_mse"] for g in group) / n
    se = None if any(s is None for s in ses) else math.sqrt(sum(s * s for s in ses)) / n
    return _derived(mean, se, sum(g["zero_mse"] for g in group) / n,
                    sum(g["uniform_mse"] for g in group) / n)


def position_advice(pooled, target):
    """Per (preset, kind, ensemble): the r needed for ``target`` on the first bucket (the first
    10% of rows) and on the rest, as :func:`advise` finds it on each range's pooled curve."""
    if not pooled:
        return []
    n = max(row["bucket"] for row in pooled) + 1
    ranges = {"first 10%": {0}, "rest": set(range(1, n))} if n > 1 else {"first 10%": {0}}
    found = {}
    for label, buckets in ranges.items():
        for entry in advise(_range_rows(pooled, buckets, label), target, [])["budget"]:
            key = (entry["preset"], entry["kind"], entry["ensemble"])
            found.setdefault(key, {})[label] = {k: entry[k] for k in ("r_needed", "how", "note")}
    return [{"preset": p, "kind": kind, "ensemble": ens, **got}
            for (p, kind, ens), got in found.items()]
