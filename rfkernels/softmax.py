"""The exact softmax kernel exp(x·y), in the linear and the log domain, without intermediate overflow,
and exact softmax attention (:func:`softmax_attention`, the reference of every estimate)."""

from __future__ import annotations

import numpy as np

from .attention_inputs import check_qkv
from .backends import get_array_module
from .pairs import check_memory_pairs, check_pair, require_finite, squeeze_pairs
from .validation import check_int

#: Elements per chunk of the exact (pairs × features) fallback.
LME_CHUNK = 1 << 22

__all__ = ["SOFTMAX_BLOCK_ELEMENTS", "log_softmax_kernel", "softmax_attention", "softmax_kernel"]


def safe_dot(x, y, xp):
    """``x @ y.T`` without intermediate overflow, accurate where it cancels.

    Each row is scaled by a power of two, ``2**-e`` with ``e`` the binary
    exponent of its largest entry, which is exact, so the scaled product has
    the rounding of the plain one but no overflowing partial products or
    sums (``[1e200, 1e200] . [1e200, -1e200]`` is not ``inf - inf``). The
    matrix product's error is up to about ``d eps |x||y|`` and depends on
    the BLAS kernel (with fused multiply-adds that example comes out as
    1e383, not 0). Nonzero entries within that bound, and entries that
    overflow when scaled back, are recomputed by :func:`accurate_dot`
    (error-free products and compensated sums: as accurate as twice the
    precision, and independent of BLAS). An entry whose value is beyond
    float64 raises ``FloatingPointError``.
    """
    _, ex = xp.frexp(xp.max(xp.abs(x), axis=1))
    _, ey = xp.frexp(xp.max(xp.abs(y), axis=1))
    xs = xp.ldexp(x, -ex[:, None])  # entries in (-1, 1)
    ys = xp.ldexp(y, -ey[:, None])
    scaled = xs @ ys.T  # |entries| <= d
    with np.errstate(over="ignore", under="ignore"):
        if int(xp.max(xp.abs(ex))) <= 500 and int(xp.max(xp.abs(ey))) <= 500:
            # 2**(ex + ey) is a normal float64: one exact multiplication (ldexp is slow)
            out = scaled * (xp.ldexp(1.0, ex)[:, None] * xp.ldexp(1.0, ey)[None, :])
        else:
            out = xp.ldexp(scaled, ex[:, None] + ey[None, :])
        bound = (4.0 * x.shape[1] * float(np.finfo(np.float64).eps)) * (
            xp.sqrt(xp.sum(xs * xs, axis=1))[:, None] * xp.sqrt(xp.sum(ys * ys, axis=1))[None, :]
        )
    # exact zeros are left alone: orthogonal inputs (one-hot, disjoint supports) give them
    redo = ((xp.abs(scaled) <= bound) & (scaled != 0)) | ~xp.isfinite(out)
    ii, jj = xp.nonzero(redo)
    step = max(1, LME_CHUNK // (4 * x.shape[1]))
    for start in range(0, int(ii.shape[0]), step):
        i, j = ii[start : start + step], jj[start : start + step]
        with np.errstate(over="ignore", under="ignore"):
            out[i, j] = xp.ldexp(accurate_dot(xs[i], ys[j], xp), ex[i] + ey[j])
    over = ~xp.isfinite(out)
    if bool(xp.any(over)):
        raise FloatingPointError(
            f"x.y overflows float64 at {int(xp.count_nonzero(over))} pair(s): the log of the "
            "softmax kernel itself (x.y, beyond 1.8e308) cannot be represented; rescale the inputs"
        )
    return out


def accurate_dot(a, b, xp):
    """Row-wise ``sum(a * b, axis=1)`` as if computed in twice the working precision.

    Ogita, Rump and Oishi's Dot2 in a pairwise arrangement: each product is
    split exactly into ``p + e`` (Dekker's TwoProduct with Veltkamp's
    splitting, no fused multiply-add needed) and the ``p`` are summed with
    TwoSum, whose rounding errors are collected with the ``e``. Entries of
    ``a`` and ``b`` must be below 1 in magnitude (see :func:`safe_dot`).
    """
    split = 134217729.0  # 2**27 + 1
    ca, cb = split * a, split * b
    a_hi = ca - (ca - a)
    b_hi = cb - (cb - b)
    a_lo, b_lo = a - a_hi, b - b_hi
    p = a * b
    errors = xp.sum(((a_hi * b_hi - p) + a_hi * b_lo + a_lo * b_hi) + a_lo * b_lo, axis=1)
    while p.shape[1] > 1:
        if p.shape[1] % 2:
            p = xp.concatenate([p, xp.zeros((p.shape[0], 1))], axis=1)
        u, v = p[:, 0::2], p[:, 1::2]
        total = u + v
        w = total - u
        errors = errors + xp.sum((u - (total - w)) + (v - w), axis=1)
        p = total
    return p[:, 0] + errors


def softmax_kernel(X, Y):
    r"""The exact softmax kernel exp(X @ Y.T).

    Parameters
    ----------
    X : array_like of shape (n_x, d) or (d,)
    Y : array_like of shape (n_y, d) or (d,)

    Returns
    -------
    K : ndarray of shape (n_x, n_y)
        :math:`SM(x, y) = e^{x^\top y}`; a 1-D argument's axis is dropped.

    Raises
    ------
    ValueError
        Non-finite or badly shaped inputs, d mismatch.
    FloatingPointError
        If exp overflows; use :func:`log_softmax_kernel`.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    """
    xp, x, y, _, x1, y1 = check_pair(X, Y)
    check_memory_pairs(x, y, None, xp)
    log_k = safe_dot(x, y, xp)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        k = xp.exp(log_k)
    require_finite(k, xp, "softmax_kernel", "log_softmax_kernel")
    return squeeze_pairs(k, x1, y1)


# --------------------------------------------------------------- log domain


def log_softmax_kernel(X, Y):
    r"""log SM(X, Y) = X @ Y.T, the log-domain companion of :func:`softmax_kernel`.

    Parameters
    ----------
    X : array_like of shape (n_x, d) or (d,)
    Y : array_like of shape (n_y, d) or (d,)

    Returns
    -------
    L : ndarray of shape (n_x, n_y)
        ``x.y`` for every pair, computed without intermediate overflow (each
        vector is scaled by a power of two first): finite whenever the
        value itself is a float64, e.g. 0 for ``[1e200, 1e200]`` and
        ``[1e200, -1e200]``. A 1-D argument's axis is dropped.

    Raises
    ------
    ValueError
        Non-finite, non-real or badly shaped inputs, d mismatch.
    FloatingPointError
        If some ``x.y`` is beyond float64 (about 1.8e308), where not even the
        log of the kernel can be represented.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    """
    xp, x, y, _, x1, y1 = check_pair(X, Y)
    check_memory_pairs(x, y, None, xp)
    return squeeze_pairs(safe_dot(x, y, xp), x1, y1)


#: :func:`softmax_attention` picks ``block = SOFTMAX_BLOCK_ELEMENTS // L_k`` rows
#: (at least 1), so each block's logits hold about 4 Mi doubles (32 MiB).
SOFTMAX_BLOCK_ELEMENTS = 1 << 22


def softmax_attention(Q, K, V, *, causal=False, block_size=None):
    r"""Exact softmax attention, in blocks of query rows with a stable softmax.

    Parameters
    ----------
    Q : array_like of shape (L, d)
        Queries, already scaled (the kernel is :math:`\exp(q^\top k)`; pass
        ``Q * d**-0.25`` for the Transformer's :math:`\exp(q^\top k/\sqrt d)`).
    K : array_like of shape (L_k, d)
        Keys, scaled like Q.
    V : array_like of shape (L_k, d_v)
        Values.
    causal : bool, default False
        If True, row i attends to keys j <= i only (needs L = L_k).
    block_size : int, optional
        Query rows per block; default ``max(1, SOFTMAX_BLOCK_ELEMENTS // L_k)``
        (4096 rows at L_k = 1024, 64 rows at L_k = 65536), so that a block's
        logits hold about 4 Mi doubles.

    Returns
    -------
    out : ndarray of shape (L, d_v), float64
        Same array type as the inputs (NumPy or CuPy).

    Raises
    ------
    ValueError
        Non-finite or badly shaped Q, K or V; d mismatch between Q and K;
        V without one row per key; causal with L != L_k; block_size < 1.
    TypeError
        causal not a bool, block_size not an integer.
    FloatingPointError
        If a logit :math:`q^\top k` overflows (inputs near 1e154), which the
        shifted softmax cannot represent.

    Notes
    -----
    For each block of rows the logits :math:`s_{ij} = q_i^\top k_j` are
    shifted by their row maximum :math:`M_i`, so that

    .. math:: \operatorname{Att}_i
        = \frac{\sum_j e^{s_{ij} - M_i} v_j}{\sum_j e^{s_{ij} - M_i}}

    with every exponential in (0, 1] and a denominator >= 1: no overflow and
    no division by zero for any finite logits. Causal blocks only read the
    keys up to their last row and mask the rest with :math:`-\infty`.
    Memory is O(block·L_k) on top of the inputs and output; time O(L·L_k·(d + d_v)).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Section 2.1. https://arxiv.org/abs/2009.14794
    """
    xp = get_array_module(Q, K, V)
    q, k, v, causal = check_qkv(Q, K, V, causal, xp)
    n_rows, n_keys = q.shape[0], k.shape[0]
    if block_size is None:
        block = max(1, SOFTMAX_BLOCK_ELEMENTS // n_keys)
    else:
        block = check_int(block_size, "block_size")

    out = xp.empty((n_rows, v.shape[1]), dtype=xp.float64)
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        for start in range(0, n_rows, block):
            stop = min(n_rows, start + block)
            end = stop if causal else n_keys
            logits = q[start:stop] @ k[:end].T
            if causal:
                future = xp.arange(end)[None, :] > xp.arange(start, stop)[:, None]
                logits[future] = -xp.inf
            logits -= xp.max(logits, axis=1, keepdims=True)
            p = xp.exp(logits, out=logits)
            out[start:stop] = (p @ v[:end]) / xp.sum(p, axis=1, keepdims=True)
            del logits, p  # free the block before the next one is allocated
    if not bool(xp.all(xp.isfinite(out))):
        raise FloatingPointError(
            "softmax_attention overflowed: a logit q.k is too large to represent; "
            "the inputs are too large"
        )
    return out


# --------------------------------------------------------------- FAVOR
