r"""First-order (delta-method) theory of the attention-output error of FAVOR.

Exact attention is :math:`\operatorname{Att}_i = N_i / D_i` with
:math:`D_i = \sum_j K_{ij}`, :math:`N_i = \sum_j K_{ij} v_j`,
:math:`K_{ij} = \exp(q_i^\top k_j)`. FAVOR replaces every :math:`K_{ij}` by
an unbiased estimate :math:`\hat K_{ij} = \frac1m \sum_{l=1}^m g_{lj}`,
:math:`g_{lj} = \varphi_{\omega_l}(q_i)^\top\varphi_{\omega_l}(k_j)` the
single-projection product. To first order in :math:`\delta K = \hat K - K`,

.. math::

    \widehat{\operatorname{Att}}_i - \operatorname{Att}_i
      \approx \frac{1}{D_i} \sum_j \delta K_{ij}\,(v_j - \operatorname{Att}_i),

and since :math:`\sum_j K_{ij}(v_j - \operatorname{Att}_i) = 0` exactly, for
iid projections (MATH.md, "Attention-level error to first order")

.. math::

    E\,|\widehat{\operatorname{Att}}_i - \operatorname{Att}_i|^2 \approx
      \frac{1}{m D_i^2} \sum_c \sum_{j, j'} a_{jc} a_{j'c}\, E[g_j g_{j'}],
    \qquad a_{jc} = v_{jc} - \operatorname{Att}_{ic}.

With :math:`h_j = |k_j|^2/2`, :math:`x_j = e^{2 q\cdot k_j + h_j}`,
:math:`y_j = e^{h_j}` and the two query-independent key matrices
:math:`H^-_{jj'} = e^{-|k_j - k_{j'}|^2/2}` and
:math:`H^+_{jj'} = e^{-|k_j + k_{j'}|^2/2}` (entries in (0, 1]), the closed
forms of MATH.md become

- positive: :math:`E[g_j g_{j'}] = e^{|q|^2}\, x_j x_{j'} H^-_{jj'}`;
- trig: :math:`\tfrac12\bigl(e^{-|q|^2} x_j x_{j'} H^+_{jj'} + e^{|q|^2} y_j y_{j'} H^-_{jj'}\bigr)`;
- hyperbolic: :math:`\tfrac12\bigl(e^{|q|^2} x_j x_{j'} H^-_{jj'} + e^{-|q|^2} y_j y_{j'} H^+_{jj'}\bigr)`,

so each query needs quadratic forms :math:`\sum_c (a_c\circ x)^\top H (a_c\circ x)`
(and the same with y) with an L×L key matrix: O(L² d_v) per query row.
Everything is evaluated with the largest exponent of each row factored out
(log space) and the terms combined with their signs (the :math:`H^+` forms
can be negative; the total cannot). The prediction is exactly 1/m times a
constant: it cannot follow Monte Carlo where the ratio's nonlinearity
matters (small m, trig normalisers near 0) or where :math:`E[g_j g_{j'}]` is
dominated by rare huge g (positive and hyperbolic features at
:math:`|q|^2 \gtrsim 1`: 850x too high at L = 64, d = 4, :math:`|q|^2 \approx 1`,
m = 64, while the positive-feature output stays a convex combination of
the values).

Orthogonal projections: the pair term needs
:math:`E[g_{lj} g_{l'j'}]` for orthogonal :math:`\omega_l \perp \omega_{l'}` with
different vectors :math:`q + k_j`, :math:`q + k_{j'}`, which has no closed
form here; the theory is **iid only** and refuses other ensembles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkernels.validation import (
    check_choice,
    check_finite,
    check_int,
    check_memory,
    check_same_d,
    check_seed,
)

__all__ = ["FIRST_ORDER_KINDS", "FirstOrderMSE", "attention_mse_first_order"]

#: Kinds with a closed-form E[g_j g_j'] (MATH.md).
FIRST_ORDER_KINDS = ("trig", "positive", "hyperbolic")

#: Keys per block of the L×L key matrices (about 4 Mi doubles, 32 MiB, per block).
_BLOCK_ELEMENTS = 1 << 22
#: Doubles in the (L, rows·d_v) matrix of weighted residuals of one batch of query rows.
_BATCH_ELEMENTS = 1 << 23


@dataclass(frozen=True)
class FirstOrderMSE:
    """Result of :func:`attention_mse_first_order`.

    Attributes
    ----------
    mse : float
        Predicted MSE of the attention output, averaged over the query rows
        used and the value coordinates (the quantity that
        :func:`rfkernels.analysis.attention_mse` measures per sample).
    stderr : float or None
        Sampling error of ``mse`` from the random subset of query rows
        (standard deviation of ``per_row`` over sqrt(rows)); None when every
        row was used (then ``mse`` is exact for the first-order theory).
    per_row : numpy.ndarray
        Predicted MSE of each row used (averaged over value coordinates).
    rows : numpy.ndarray of int64
        The query rows used, ascending.
    m, kind, ensemble :
        The arguments.
    all_rows : bool
        True when every query row was used.
    rows_clipped : int
        Rows whose signed sum of terms came out <= 0 by rounding and was set
        to 0 (trig and hyperbolic only; 0 in every measured case).
    """

    mse: float
    stderr: float | None
    per_row: np.ndarray
    rows: np.ndarray
    m: int
    kind: str
    ensemble: str
    all_rows: bool
    rows_clipped: int = 0


def _matrix(value, name, shape):
    arr = check_finite(value, name)
    if arr.ndim != 2 or arr.shape[0] < 1 or arr.shape[1] < 1:
        raise ValueError(f"{name} must be a non-empty 2-D array of shape {shape}; got shape {arr.shape}")
    return np.asarray(arr, dtype=np.float64)


def _quadratic_forms(K, half, X, sign):
    """Σ_j X_j (H X)_j per column of X, H = exp(sign·k_j·k_j' − h_j − h_j'), in key blocks."""
    L = K.shape[0]
    block = max(1, min(L, _BLOCK_ELEMENTS // L))
    out = np.zeros(X.shape[1])
    for start in range(0, L, block):
        stop = min(L, start + block)
        with np.errstate(under="ignore"):
            H = np.exp(sign * (K[start:stop] @ K.T) - half[start:stop, None] - half[None, :])
        out += np.einsum("jc,jc->c", X[start:stop], H @ X)
    return out


def _term(a, weights, k, half, sign, log_scale, log_factor):
    """(log |S|, sign S) of S = Σ_c (a_c∘w)ᵀ H (a_c∘w) per row, times exp(log_scale + log_factor)."""
    nb, lk, dv = a.shape
    cols = (a * weights[:, :, None]).transpose(1, 0, 2).reshape(lk, nb * dv)
    s = _quadratic_forms(k, half, cols, sign).reshape(nb, dv).sum(axis=1)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(s)) + log_scale + log_factor, np.sign(s)


def attention_mse_first_order(Q, K, V, m, kind, *, ensemble="iid", queries=None, seed=None):
    r"""Delta-method MSE of FAVOR attention for iid projections (module docstring).

    Parameters
    ----------
    Q : array_like of shape (L, d)
        Queries, already scaled (kernel :math:`\exp(q^\top k)`).
    K : array_like of shape (L_k, d)
        Keys.
    V : array_like of shape (L_k, d_v)
        Values.
    m : int
        Number of projections (>= 1); the prediction is proportional to 1/m.
    kind : {"trig", "positive", "hyperbolic"}
        Feature map.
    ensemble : {"iid"}, default "iid"
        Only iid projections have the theory (see the module docstring);
        anything else raises ValueError.
    queries : None or int, default None
        None: every query row (exact first-order value). An int n: n query
        rows drawn without replacement from ``seed`` (all rows if n >= L),
        and ``stderr`` is the sampling error of the row average.
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Randomness of the row subset (unused when every row is taken).

    Returns
    -------
    FirstOrderMSE
        ``.mse`` the predicted MSE averaged over rows and value coordinates,
        ``.stderr`` its row-sampling error (None for all rows).

    Raises
    ------
    ValueError, TypeError
        Bad arguments, an ensemble other than "iid", before any work.
    MemoryError
        When the key blocks or the batch of residuals would not fit.
    OverflowError
        When a predicted row MSE is beyond float64 (reported, never inf).

    Notes
    -----
    Cost: O(L_k² d) to build the key matrices and O(n L_k² d_v) for the
    quadratic forms of n rows (two forms per row for trig and hyperbolic,
    one for positive); memory O(L_k·block + L_k·batch·d_v). Measured: L =
    4096, d = d_v = 16, 16 rows, positive, about 0.3 s on 2 CPUs.
    """
    check_choice(kind, "kind", FIRST_ORDER_KINDS)
    if ensemble != "iid":
        raise ValueError(
            f"attention_mse_first_order: ensemble must be 'iid'; got {ensemble!r}. The first-order "
            "theory needs E[g g'] of two projections; for orthogonal ones that pair term has no "
            "closed form here, so the theory is for iid projections only"
        )
    q = _matrix(Q, "Q", "(L, d)")
    k = _matrix(K, "K", "(L_k, d)")
    v = _matrix(V, "V", "(L_k, d_v)")
    check_same_d([q.shape, k.shape], ["Q", "K"])
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"V must have one row per key: K has L_k={k.shape[0]} rows, V has {v.shape[0]}")
    m = check_int(m, "m")
    L, Lk, dv = q.shape[0], k.shape[0], v.shape[1]
    if queries is None:
        rows = np.arange(L, dtype=np.int64)
    else:
        n = check_int(queries, "queries")
        if n >= L:
            rows = np.arange(L, dtype=np.int64)
        else:
            rng = check_seed(seed)
            rows = np.sort(rng.choice(L, size=n, replace=False)).astype(np.int64)
    all_rows = rows.size == L
    batch = max(1, min(rows.size, _BATCH_ELEMENTS // (Lk * dv)))
    block = max(1, min(Lk, _BLOCK_ELEMENTS // Lk))
    check_memory(8 * (3 * block * Lk + 4 * Lk * batch * dv + 3 * batch * Lk),
                 f"attention_mse_first_order with L_k={Lk}, d_v={dv}")

    half = 0.5 * np.sum(k * k, axis=1)  # h_j
    log_y_max = float(half.max())
    y = np.exp(half - log_y_max)
    need_x_minus = kind in ("positive", "hyperbolic")
    need_x_plus = kind == "trig"
    need_y_minus = kind == "trig"
    need_y_plus = kind == "hyperbolic"

    log_total = np.empty(rows.size)
    clipped = 0
    for b0 in range(0, rows.size, batch):
        idx = rows[b0:b0 + batch]
        qb = q[idx]
        logits = qb @ k.T  # (n, L_k)
        top = logits.max(axis=1, keepdims=True)
        p = np.exp(logits - top)
        psum = p.sum(axis=1)
        att = (p @ v) / psum[:, None]  # exact attention rows
        log_d = top[:, 0] + np.log(psum)
        a = v[None, :, :] - att[:, None, :]  # (n, L_k, d_v)
        log_x = 2.0 * logits + half[None, :]
        x_max = log_x.max(axis=1)
        x = np.exp(log_x - x_max[:, None])
        qq = np.sum(qb * qb, axis=1)
        nb = idx.size
        terms = []  # (log-magnitude, sign) per term, each (nb,)
        if need_x_minus:
            terms.append(_term(a, x, k, half, +1.0, 2.0 * x_max,
                               qq + (math.log(0.5) if kind == "hyperbolic" else 0.0)))
        if need_x_plus:
            terms.append(_term(a, x, k, half, -1.0, 2.0 * x_max, -qq + math.log(0.5)))
        if need_y_minus or need_y_plus:
            yw = np.broadcast_to(y, (nb, Lk))
            terms.append(_term(a, yw, k, half, +1.0 if need_y_minus else -1.0, 2.0 * log_y_max,
                               (qq if need_y_minus else -qq) + math.log(0.5)))
        logs = np.stack([t[0] for t in terms])
        signs = np.stack([t[1] for t in terms])
        top_log = np.max(np.where(signs != 0, logs, -np.inf), axis=0)
        finite_top = np.isfinite(top_log)
        shifted = np.where(signs != 0, signs * np.exp(logs - np.where(finite_top, top_log, 0.0)), 0.0)
        total = shifted.sum(axis=0)
        bad = ~finite_top | (total <= 0)
        clipped += int(np.sum(bad & finite_top))
        with np.errstate(divide="ignore"):
            log_total[b0:b0 + nb] = np.where(bad, -np.inf,
                                             top_log + np.log(np.where(bad, 1.0, total)))
        log_total[b0:b0 + nb] += -2.0 * log_d - math.log(m) - math.log(dv)

    if np.any(log_total > 709.0):
        raise OverflowError(
            f"attention_mse_first_order: the predicted MSE of {int(np.sum(log_total > 709.0))} row(s) "
            f"is beyond float64 (log up to {float(log_total.max()):.4g}); the inputs are too large "
            "for the first-order theory to mean anything"
        )
    per_row = np.exp(log_total)
    mse = float(per_row.mean())
    stderr = None if all_rows else (float(per_row.std(ddof=1) / math.sqrt(per_row.size))
                                    if per_row.size >= 2 else None)
    return FirstOrderMSE(mse=mse, stderr=stderr, per_row=per_row, rows=rows, m=m, kind=kind,
                         ensemble=ensemble, all_rows=bool(all_rows), rows_clipped=clipped)
