"""Strict JSON for every output: no NaN or Infinity, every null explained.

JSON has no NaN or Infinity. :func:`json_safe` turns a non-finite float
into ``null`` and records why in the ``"null_reasons"`` object of the
enclosing dict (``{"field": "reason"}``; for an item of a list field the key
is ``"field[i]"``). A subcommand passes ``explain(key, value, row)``, which
knows what a null means in its rows and may also explain values that are
already None; a non-finite value it does not explain gets a generic reason
("NaN", "+inf: beyond float64", "-inf"). :func:`dumps` is the one way a
subcommand prints or writes JSON, and results whose ``to_dict()`` promises
strict JSON (:class:`rfkernels.analysis.Diagnosis`) pass through
:func:`json_safe`: ``json.dumps(..., allow_nan=False)``, so a
non-finite float that slipped through is an error, never invalid JSON.
"""

from __future__ import annotations

import json
import math
import numbers

import numpy as np

__all__ = ["NULL_REASONS", "dumps", "json_safe", "nonfinite_reason"]

#: Key of the per-object map from a null field to the reason it is null.
NULL_REASONS = "null_reasons"


def nonfinite_reason(value):
    """A generic reason for a non-finite float."""
    if math.isnan(value):
        return "not a number (NaN)"
    return "+inf: beyond float64" if value > 0 else "-inf: beyond float64"


def _scalar(value):
    """Python scalar for numpy scalars; non-finite floats stay floats (the caller decides)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def _is_nonfinite(value):
    return isinstance(value, float) and not math.isfinite(value)


def json_safe(obj, explain=None):
    """``obj`` with non-finite floats replaced by None, each null with its reason.

    Parameters
    ----------
    obj : dict, list, tuple or scalar
        Nested freely; numpy scalars become Python scalars, tuples lists.
    explain : callable, optional
        ``explain(key, value, row) -> str or None``, called for every field
        of every dict whose value is None or a non-finite float (and, for a
        list field, for each such item with key ``"field[i]"``); ``row`` is
        the original dict. A returned string is recorded under
        ``row["null_reasons"][key]``.
    """
    if isinstance(obj, dict):
        out, reasons = {}, dict(obj.get(NULL_REASONS) or {})
        for key, value in obj.items():
            if key == NULL_REASONS:
                continue
            if isinstance(value, (list, tuple)) and not any(isinstance(v, (dict, list, tuple)) for v in value):
                items = []
                for i, v in enumerate(value):
                    v = _scalar(v)
                    if v is None or _is_nonfinite(v):
                        why = explain(f"{key}[{i}]", v, obj) if explain else None
                        if why is None and v is not None:
                            why = nonfinite_reason(v)
                        if why is not None:
                            reasons.setdefault(f"{key}[{i}]", why)
                        v = None
                    items.append(v)
                out[key] = items
                continue
            if isinstance(value, (dict, list, tuple)):
                out[key] = json_safe(value, explain)
                continue
            value = _scalar(value)
            if value is None or _is_nonfinite(value):
                why = explain(key, value, obj) if explain else None
                if why is None and value is not None:
                    why = nonfinite_reason(value)
                if why is not None:
                    reasons.setdefault(key, why)
                value = None
            out[key] = value
        if reasons:
            out[NULL_REASONS] = reasons
        return out
    if isinstance(obj, (list, tuple)):
        out = []
        for v in obj:
            if isinstance(v, (dict, list, tuple)):
                out.append(json_safe(v, explain))
            else:
                v = _scalar(v)
                out.append(None if _is_nonfinite(v) else v)
        return out
    obj = _scalar(obj)
    return None if _is_nonfinite(obj) else obj


def dumps(obj, explain=None, **kwargs):
    """Strict JSON text of ``json_safe(obj, explain)``."""
    return json.dumps(json_safe(obj, explain), allow_nan=False, **kwargs)
