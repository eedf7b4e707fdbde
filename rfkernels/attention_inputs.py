"""The checks of attention's inputs Q, K, V (and W), shared by its entry points."""

from __future__ import annotations

import numpy as np

from .backends import to_numpy
from .validation import check_bool, check_finite, check_same_d

__all__ = ["causal_blocks", "check_fit_rows", "check_matrix_xp", "check_qkv", "check_query_rows",
           "check_squared_norms"]


def check_matrix_xp(value, name, shape_text, xp):
    """A finite 2-D array (of ``xp``) with at least one row and one column."""
    arr = check_finite(value, name, xp)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array of shape {shape_text}; got shape {arr.shape}")
    if arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(
            f"{name} must have at least one row and one column, shape {shape_text}; "
            f"got shape {arr.shape}"
        )
    return arr


def check_squared_norms(a, name, letter, xp, caller="favor_attention"):
    """Largest row norm of ``a``; refuses rows whose squared norm overflows float64."""
    with np.errstate(over="ignore"):
        sq = xp.sum(a * a, axis=1)
    bad = ~xp.isfinite(sq)
    if bool(xp.any(bad)):
        rows = to_numpy(xp.nonzero(bad)[0])
        shown = ", ".join(str(int(i)) for i in rows[:10]) + (", ..." if rows.size > 10 else "")
        raise FloatingPointError(
            f"{caller}: |{letter}|^2 overflows float64 for {rows.size} row(s) of {name} "
            f"(rows {shown}; entries beyond about 1e154). Every feature map needs "
            f"|{letter}|^2/2 (exp(+-w.{letter} - |{letter}|^2/2), or exp(|{letter}|^2/2) for "
            "trig), so FAVOR cannot represent these rows; rescale Q and K"
        )
    return float(xp.sqrt(xp.max(sq)))


def check_qkv(Q, K, V, causal, xp):
    """Validate the shared arguments of both attentions; returns (q, k, v, causal)."""
    causal = check_bool(causal, "causal")
    q = check_matrix_xp(Q, "Q", "(L, d)", xp)
    k = check_matrix_xp(K, "K", "(L_k, d)", xp)
    v = check_matrix_xp(V, "V", "(L_k, d_v)", xp)
    check_same_d([q.shape, k.shape], ["Q", "K"])
    if v.shape[0] != k.shape[0]:
        raise ValueError(
            f"V must have one row per key: K has L_k={k.shape[0]} rows, V has {v.shape[0]}"
        )
    if causal and q.shape[0] != k.shape[0]:
        raise ValueError(
            f"causal attention needs as many queries as keys: Q has L={q.shape[0]} rows, "
            f"K has L_k={k.shape[0]}"
        )
    return q, k, v, causal


def check_fit_rows(value, d):
    """``(Q_fit, K_fit)``: two finite float64 NumPy arrays of shape (n, d), the rows a kind is fitted on."""
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"fit_rows must be a pair (Q_fit, K_fit) of (n, d) arrays; got "
                         f"{type(value).__name__}")
    out = []
    for arr, name in zip(value, ("fit_rows[0] (Q_fit)", "fit_rows[1] (K_fit)")):
        arr = check_matrix_xp(to_numpy(arr) if not isinstance(arr, (list, tuple)) else arr,
                              name, "(n, d)", np)
        if arr.shape[1] != d:
            raise ValueError(f"{name} has d = {arr.shape[1]} but Q has d = {d}")
        out.append(np.asarray(arr, dtype=np.float64))
    return tuple(out)


def check_query_rows(value, L):
    """``rows``: distinct, ascending query rows in [0, L), as an int64 NumPy array."""
    arr = np.asarray(to_numpy(value) if not isinstance(value, (list, tuple)) else value)
    if arr.ndim != 1 or arr.size == 0 or not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"rows must be a non-empty 1-D array of query row indices; got "
                         f"{'shape ' + str(arr.shape) if arr.ndim != 1 or arr.size == 0 else arr.dtype}")
    arr = arr.astype(np.int64)
    if arr[0] < 0 or arr[-1] >= L or np.any(np.diff(arr) <= 0):
        raise ValueError(f"rows must be distinct and ascending in [0, {L}); got {arr.size} rows "
                         f"from {int(arr.min())} to {int(arr.max())}"
                         + ("" if np.all(np.diff(arr) > 0) else ", not strictly ascending"))
    return arr


def causal_blocks(n, block, rows, xp):
    """The blocks of causal attention over n rows: ``(start, stop, out, mine, future)`` each.

    Keys ``start:stop`` form the block; ``mine`` are its query rows that are
    computed (all of them, or those of the ascending ``rows`` inside it),
    ``out`` their slice of the output, and ``future`` the (len(mine),
    stop - start) mask of the block's keys after each row (j > i), to be zeroed.
    """
    bounds = None if rows is None else np.searchsorted(rows, np.arange(0, n + block, block))
    for b, start in enumerate(range(0, n, block)):
        stop = min(n, start + block)
        if bounds is None:
            out, mine = slice(start, stop), xp.arange(start, stop)
        else:
            out = slice(int(bounds[b]), int(bounds[b + 1]))
            mine = xp.asarray(rows[out])
        yield start, stop, out, mine, xp.arange(start, stop)[None, :] > mine[:, None]
