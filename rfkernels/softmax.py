"""The exact softmax kernel exp(x·y), in the linear and the log domain, without intermediate overflow."""

from __future__ import annotations

import numpy as np

from .pairs import check_memory_pairs, check_pair, require_finite, squeeze_pairs

#: Elements per chunk of the exact (pairs × features) fallback.
LME_CHUNK = 1 << 22

__all__ = ["log_softmax_kernel", "softmax_kernel"]


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
