"""The ``dtypes`` axis of :func:`rfkernels.analysis.diagnose`: rounding error beside sampling error.

For every draw, preset, kind, ensemble and m that :func:`~rfkernels.analysis.diagnose`
runs, and every requested dtype other than float64, the same attention (same
W, same query rows) is recomputed with every step rounded to the dtype
(:func:`rfkernels.analysis.precision.rounded_attention`; the emulation and
its limits are in :mod:`rfkernels.analysis.precision`). The **rounding
MSE** is its mean squared difference from the float64 output of the same
preset; the **sampling MSE** is the float64 attention MSE against exact
attention (``attention_mse``). Draws whose features overflow in the dtype
are counted (``overflow_draws``), and rows whose normaliser underflows to 0
or overflows (``failed_rows_share``). Each map's overflow and underflow
thresholds on the data, with and without its shifts, come from
:func:`rfkernels.analysis.precision.overflow_report` on one W per head (the
first draw's, at the largest m and the first ensemble): :func:`overflow_rows`.
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels.validation import check_choice

from ..precision import DTYPES, Rounding, overflow_report, rounded_attention
from .views import view_inputs

__all__ = ["check_dtypes", "overflow_rows", "precision_rows", "rounding_errors"]


def check_dtypes(dtypes):
    """A tuple of distinct :data:`~rfkernels.analysis.precision.DTYPES` (float64 first, added)."""
    if dtypes is None:
        return ("float64",)
    if isinstance(dtypes, str):
        dtypes = (dtypes,)
    out = ["float64"]
    for d in dtypes:
        check_choice(d, "dtypes", DTYPES)
        Rounding(d)  # bfloat16 without ml_dtypes: its ImportError, before any work
        if d not in out:
            out.append(d)
    return tuple(out)


def rounding_errors(q, k, v, w, kind, preset, dtypes, reference, A=None):
    """Per dtype (float64 excluded): (rounding MSE, share of failed rows, overflowed?)."""
    out = {}
    for d in dtypes:
        if d == "float64":
            continue
        res = rounded_attention(q, k, v, w, kind, preset, d, A=A)
        if res.overflow is not None:
            out[d] = (math.inf, 1.0, True)
            continue
        ok = np.all(np.isfinite(res.output), axis=1)
        err = res.output[ok] - reference[ok]
        out[d] = (float(np.mean(err * err)) if ok.any() else math.inf,
                  float(1.0 - ok.mean()), False)
    return out


def _stats(values, sampling):
    """(mean, its standard error, mean / sampling, reason): None with the reason where undefined."""
    vals = np.asarray(values, dtype=np.float64)
    n = vals.size
    bad = int(np.sum(~np.isfinite(vals)))
    if bad:
        return None, None, None, (f"{bad} of {n} draws overflowed in this dtype or had every row's "
                                  "normaliser fail: no rounding MSE")
    mse = float(vals.mean())
    se = float(vals.std(ddof=1) / math.sqrt(n)) if n >= 2 else None
    ratio = mse / sampling if sampling and math.isfinite(sampling) else None
    why = None
    if se is None:
        why = "one draw: no standard error"
    elif ratio is None:
        why = "the sampling MSE is 0 or not finite: no ratio"
    return mse, se, ratio, why


def precision_rows(rows, collected):
    """One row per head x preset x kind x ensemble x m x dtype (dtype != float64).

    ``rows`` are the diagnosis rows (for each cell's ``attention_mse``);
    ``collected[(head, preset, kind, ensemble, m, dtype)]`` the per-draw
    tuples of :func:`rounding_errors`.
    """
    sampling = {(r["head"], r["preset"], r["kind"], r["ensemble"], r["m"]): r["attention_mse"]
                for r in rows}
    out = []
    for (h, p, kind, ens, m, d), draws in collected.items():
        ref = sampling[(h, p, kind, ens, m)]
        mse, se, ratio, why = _stats([x[0] for x in draws], ref)
        out.append({"head": h, "preset": p, "kind": kind, "ensemble": ens, "m": m, "dtype": d,
                    "rounding_mse": mse, "rounding_mse_stderr": se, "sampling_mse": ref,
                    "rounding_to_sampling": ratio, "rounding_reason": why,
                    "failed_rows_share": float(np.mean([x[1] for x in draws])),
                    "overflow_draws": int(sum(x[2] for x in draws)), "draws": len(draws)})
    return out


def overflow_rows(head, w, preset_kinds, dtypes, views):
    """Per (preset, kind) and dtype: the overflow report of one head and one W, with its head.

    ``views`` (:func:`rfkernels.analysis.diagnosis.views.fit_views`) give each kind's
    queries, keys, the kind it runs as and its parameters.
    """
    out = []
    for p, kind in preset_kinds:  # a cross-fitted view: its first run (the even query rows)
        _, q, k, wv, run, params = view_inputs(views[kind], np.arange(views[kind].q.shape[0]), w)[0]
        for row in overflow_report(q, k, wv, run, p, dtypes, A=params.get("A")):
            out.append({"head": head, "m": int(w.shape[0]), **row, "kind": kind})
    return out
