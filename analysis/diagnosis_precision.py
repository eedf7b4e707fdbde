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
or overflows (``failed_rows_share``).
"""

from __future__ import annotations

import math

import numpy as np

from rfkernels.validation import check_choice

from .precision import DTYPES, Rounding, rounded_attention

__all__ = ["check_dtypes", "precision_rows", "rounding_errors"]


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
    vals = np.asarray(values, dtype=np.float64)
    finite = vals[np.isfinite(vals)]
    n = vals.size
    mse = float(finite.mean()) if finite.size == n else math.inf
    se = float(finite.std(ddof=1) / math.sqrt(n)) if finite.size == n and n >= 2 else None
    ratio = mse / sampling if sampling and math.isfinite(mse) and math.isfinite(sampling) else None
    return mse, se, ratio


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
        mse, se, ratio = _stats([x[0] for x in draws], ref)
        out.append({"head": h, "preset": p, "kind": kind, "ensemble": ens, "m": m, "dtype": d,
                    "rounding_mse": mse, "rounding_mse_stderr": se, "sampling_mse": ref,
                    "rounding_to_sampling": ratio,
                    "failed_rows_share": float(np.mean([x[1] for x in draws])),
                    "overflow_draws": int(sum(x[2] for x in draws)), "draws": len(draws)})
    return out
