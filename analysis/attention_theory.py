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
can be negative; the total cannot). Where a row's attention is peaked,
:math:`a_j = v_j - \operatorname{Att}_i` cancels at its top key; there it is
computed as :math:`\sum_{j'} p_{j'} (v_j - v_{j'})`, and kept as a value and
a log factor where it is below float64's range (a logit gap above about
665). Inputs with :math:`|q|^2` or :math:`|k|^2` beyond about 4.5e9, where
the exponents keep no 6 digits, and predictions beyond float64 raise
OverflowError. The prediction is exactly 1/m times a
constant: it cannot follow Monte Carlo where the ratio's nonlinearity
matters (small m, trig normalisers near 0) or where :math:`E[g_j g_{j'}]` is
dominated by rare huge g (positive and hyperbolic features at
:math:`|q|^2 \gtrsim 1`: 850x too high at L = 64, d = 4, :math:`|q|^2 \approx 1`,
m = 64, while the positive-feature output stays a convex combination of
the values).

**Causal attention** (prefix sums): row i attends to keys :math:`j \le i`
only; every sum above runs over that prefix (the key weights of later keys
are 0), so each row has its own :math:`D_i`, residuals and key set. Row 0
sees one key: its output is that key's value whatever the estimate, and its
first-order error is 0.

Orthogonal projections: the pair term needs
:math:`E[g_{lj} g_{l'j'}]` for orthogonal :math:`\omega_l \perp \omega_{l'}` with
different vectors :math:`q + k_j`, :math:`q + k_{j'}`, which has no closed
form here; the theory is **iid only** and refuses other ensembles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkernels.estimators import registry
from rfkernels.validation import (
    check_bool,
    check_choice,
    check_finite,
    check_int,
    check_memory,
    check_same_d,
    check_seed,
)

__all__ = ["FIRST_ORDER_KINDS", "FirstOrderMSE", "attention_mse_first_order", "first_order_kinds"]


def first_order_kinds():
    """Kinds with a closed-form E[g_j g_j'] (MATH.md): :attr:`Kind.first_order` is set."""
    return tuple(k.name for k in registry.entries("kind") if k.first_order is not None)


def first_order_ensembles():
    """Ensembles the first-order theory holds for: independent rows (:attr:`Ensemble.independent`)."""
    return tuple(e.name for e in registry.entries("ensemble") if e.independent)


def __getattr__(name):
    if name == "FIRST_ORDER_KINDS":  # the registry's, at the time of asking
        return first_order_kinds()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

#: Keys per block of the L×L key matrices (about 4 Mi doubles, 32 MiB, per block).
_BLOCK_ELEMENTS = 1 << 22
#: Doubles in the (L, rows·d_v) matrix of weighted residuals of one batch of query rows.
_BATCH_ELEMENTS = 1 << 23
#: A row whose attention weights other than the largest sum to less than this
#: share of it is *peaked*: there v_top − Att loses its digits, and the residual
#: of its top key is computed as Σ_j p_j (v_top − v_j) / Σ_j p_j instead.
_PEAKED = 2.0 ** -20
#: A peaked row whose second weight is below this share of the first (logit gap
#: above about 665) is one-hot beyond float64: its top key's residual is kept
#: in two parts (value, log factor) and its weighted residuals formed from logs.
_ONE_HOT = 2.0 ** -960
#: Largest |q|² or |k|²: beyond, the rounding error of the exponents (about
#: eps·|x|²) exceeds 1e-6 and the key matrices lose their meaning.
_NORM_SQ_MAX = 1e-6 / float(np.finfo(np.float64).eps)
#: The weighted residuals of a row are scaled by a power of two (exact) when
#: their largest |entry| leaves [2**-_U_EXP, 2**_U_EXP], so their quadratic
#: form neither underflows nor overflows.
_U_EXP = 100


@dataclass(frozen=True)
class FirstOrderMSE:
    r"""Result of :func:`attention_mse_first_order`.

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
    causal : bool
        Each row attended to its own key prefix.
    normaliser_rel_var : float or None
        The relative variance :math:`\operatorname{Var}\hat D_i / D_i^2` of
        the rows' normalisers at this m, averaged over the rows used (the
        same closed forms with every :math:`a_j = 1`, minus 1): the
        expansion needs it small. None where it was not asked for.
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
    normaliser_rel_var: float | None = None
    causal: bool = False


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


def _weighted(a, weights, log_weights, tiny):
    """u = a∘w per row, each row divided by a factor; returns (u, natural log of each factor).

    A row whose largest |u| leaves [2**-_U_EXP, 2**_U_EXP] is divided by a
    power of two (exact). A row of ``tiny``, ``(row, key, shift)``: the
    residual a[row, key] is e^shift times its stored value, beyond float64,
    and that row's u is formed from logs (``log_weights`` = log w).
    """
    u = a * weights[:, :, None]
    top = np.max(np.abs(u), axis=(1, 2))
    exp2 = np.frexp(top)[1]
    exp2[(top == 0) | ((top >= 2.0 ** -_U_EXP) & (top <= 2.0 ** _U_EXP))] = 0
    if np.any(exp2):
        u = np.ldexp(u, -exp2[:, None, None])
    log_div = math.log(2.0) * exp2
    for r, j, shift in tiny:
        with np.errstate(divide="ignore"):
            lu = np.log(np.abs(a[r])) + log_weights[r][:, None]
        lu[j] += shift
        top_r = float(np.max(lu))
        if math.isfinite(top_r):  # else every residual of the row is 0: so is u[r]
            log_div[r] = top_r
            u[r] = np.sign(a[r]) * np.exp(lu - top_r)
    return u, log_div


def _term(parts, weights, log_weights, k, half, sign, log_scale, log_factor):
    """Per part ``(a, tiny)``: (log |S|, sign S) of S = Σ_c (a_c∘w)ᵀ H (a_c∘w) per row.

    Times exp(log_scale + log_factor). The parts share one pass over the key
    matrix H (their columns are independent).
    """
    cols, shapes, divs = [], [], []
    for a, tiny in parts:
        nb, lk, dv = a.shape
        u, log_div = _weighted(a, weights, log_weights, tiny)
        cols.append(u.transpose(1, 0, 2).reshape(lk, nb * dv))
        shapes.append((nb, dv))
        divs.append(log_div)
    forms = _quadratic_forms(k, half, np.concatenate(cols, axis=1), sign)
    out, start = [], 0
    for (nb, dv), log_div in zip(shapes, divs):
        s = forms[start:start + nb * dv].reshape(nb, dv).sum(axis=1)
        start += nb * dv
        with np.errstate(divide="ignore"):
            out.append((np.log(np.abs(s)) + log_scale + log_factor + 2.0 * log_div, np.sign(s)))
    return out


def _residuals(logits, p, psum, att, v, visible=None):
    """a_jc = v_jc − Att_ic of a batch of rows, (n, L_k, d_v), and the list of one-hot rows.

    In a peaked row (:data:`_PEAKED`) the top key's residual v_top − Att is
    the small difference of two nearly equal numbers; it is computed from its
    sum form Σ_j p_j (v_top − v_j) / Σ_j p_j instead, with the weights taken
    relative to the second largest, e^-gap. Where e^-gap is below
    :data:`_ONE_HOT` the residual is stored without it and ``(row, top key,
    -gap)`` is listed (see :func:`_weighted`).
    """
    a = v[None, :, :] - att[:, None, :]  # (n, L_k, d_v)
    tiny = []
    if v.shape[0] < 2:
        return a, tiny
    seen = np.full(logits.shape[0], v.shape[0]) if visible is None else visible.sum(axis=1)
    for r in np.flatnonzero(psum - 1.0 < _PEAKED):
        top = int(np.argmax(logits[r]))
        if seen[r] < 2:  # one visible key: the output is its value, the residual exactly 0
            a[r, top] = 0.0
            continue
        second = float(np.max(np.delete(logits[r], top)))
        rel = np.exp(np.minimum(logits[r] - second, 0.0))  # <= 1 but at the top key
        rel[top] = 0.0
        scaled = (rel @ (v[top][None, :] - v)) / psum[r]
        gap = float(logits[r, top]) - second
        if math.exp(-gap) >= _ONE_HOT:
            a[r, top] = scaled * math.exp(-gap)
        else:
            a[r, top] = scaled
            tiny.append((int(r), top, -gap))
    return a, tiny


def _combine(terms):
    """log of the signed sum of terms given as (log-magnitude, sign) per row; rows clipped."""
    logs = np.stack([t[0] for t in terms])
    signs = np.stack([t[1] for t in terms])
    top_log = np.max(np.where(signs != 0, logs, -np.inf), axis=0)
    finite_top = np.isfinite(top_log)
    shifted = np.where(signs != 0, signs * np.exp(logs - np.where(finite_top, top_log, 0.0)), 0.0)
    total = shifted.sum(axis=0)
    bad = ~finite_top | (total <= 0)
    with np.errstate(divide="ignore"):
        log_total = np.where(bad, -np.inf, top_log + np.log(np.where(bad, 1.0, total)))
    return log_total, int(np.sum(bad & finite_top))


def _batch_log_mse(qb, k, v, half, y, log_y_max, kind, normalisers=False, visible=None):
    """For query rows ``qb``: log of Σ_c Σ_jj' a a' E[g g'], log D, the rows clipped, and
    (``normalisers``) the log of E[(Σ_j g_j)^2], the normalisers' second moment at m = 1
    (every a_j = 1), else None. ``visible`` (n, L_k) bool: the keys each row attends
    to (causal: its prefix); None: every key.
    """
    nb, Lk = qb.shape[0], k.shape[0]
    logits = qb @ k.T  # (n, L_k)
    if visible is not None:  # a hidden key has weight 0: logit -inf, x_j = y_j = 0
        logits = np.where(visible, logits, -np.inf)
    top = logits.max(axis=1, keepdims=True)
    p = np.exp(logits - top)
    psum = p.sum(axis=1)
    att = (p @ v) / psum[:, None]  # exact attention rows
    log_d = top[:, 0] + np.log(psum)
    parts = [_residuals(logits, p, psum, att, v, visible)]
    if normalisers:
        parts.append((np.ones((nb, Lk, 1)), []))
    log_x = 2.0 * logits + half[None, :]
    x_max = log_x.max(axis=1)
    log_xw = log_x - x_max[:, None]
    x = np.exp(log_xw)
    qq = np.sum(qb * qb, axis=1)
    terms = []  # per term, per part: (log-magnitude, sign), each (nb,)
    for on_logits, sign, qq_sign, log_weight in registry.entry("kind", kind).first_order:
        factor = (qq if qq_sign > 0 else -qq) + log_weight
        if on_logits:
            terms.append(_term(parts, x, log_xw, k, half, sign, 2.0 * x_max, factor))
        else:
            yw = np.broadcast_to(y, (nb, Lk))
            log_yw = np.broadcast_to(half - log_y_max, (nb, Lk))
            if visible is not None:
                yw, log_yw = np.where(visible, yw, 0.0), np.where(visible, log_yw, -np.inf)
            terms.append(_term(parts, yw, log_yw, k, half, sign, 2.0 * log_y_max, factor))
    log_total, clipped = _combine([t[0] for t in terms])
    second = _combine([t[1] for t in terms])[0] if normalisers else None
    return log_total, log_d, clipped, second


def _batches(rows, batch, causal_length=None):
    """``(start, rows)`` of each batch of the sorted ``rows``: at most ``batch`` rows; causal
    (``causal_length`` L), never across a tenth of L, so each batch's key prefix stays short."""
    if causal_length is None:
        return [(b0, rows[b0:b0 + batch]) for b0 in range(0, rows.size, batch)]
    tenth = rows * 10 // causal_length
    out, start = [], 0
    for group in np.split(rows, np.flatnonzero(np.diff(tenth)) + 1):
        out += [(start + b0, group[b0:b0 + batch]) for b0 in range(0, group.size, batch)]
        start += group.size
    return out


def _too_large(what):
    """The OverflowError of inputs beyond the first-order theory's float64 range."""
    return OverflowError(f"attention_mse_first_order: {what}; the inputs are too large for the "
                         "first-order theory to mean anything")


def attention_mse_first_order(Q, K, V, m, kind, *, ensemble="iid", queries=None, seed=None,
                              normalisers=False, causal=False, rows=None):
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
    kind : str
        The feature map: a kind with a first-order closed form (:func:`first_order_kinds`).
    ensemble : str, default "iid"
        Only independent rows have the theory (:attr:`Ensemble.independent`,
        see the module docstring); anything else raises ValueError.
    queries : None or int, default None
        None: every query row (exact first-order value). An int n: n query
        rows drawn without replacement from ``seed`` (all rows if n >= L),
        and ``stderr`` is the sampling error of the row average.
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Randomness of the row subset (unused when every row is taken).
    normalisers : bool, default False
        Also compute ``normaliser_rel_var``, the normalisers' relative
        variance at m (about 1/d_v more work).
    causal : bool, default False
        Row i attends to keys j <= i only (needs L = L_k): each row's own
        prefix (module notes).
    rows : array_like of int, optional
        The query rows to use (distinct, in range), instead of ``queries``:
        ``stderr`` is then None and ``mse`` their mean (a stratified sample's
        caller weighs them itself).

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
        When a predicted row MSE is beyond float64 (reported, never inf or a
        false 0), or some ``|q|²`` or ``|k|²`` is beyond about 4.5e9, before any work.

    Notes
    -----
    Cost: O(L_k² d) to build the key matrices and O(n L_k² d_v) for the
    quadratic forms of n rows (two forms per row for trig and hyperbolic,
    one for positive); memory O(L_k·block + L_k·batch·d_v). Timings:
    docs/performance.md.
    """
    check_choice(kind, "kind", first_order_kinds())
    if ensemble not in first_order_ensembles():
        raise ValueError(
            f"attention_mse_first_order: ensemble must be "
            f"{' or '.join(map(repr, first_order_ensembles()))}; got {ensemble!r}. The first-order "
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
    normalisers = check_bool(normalisers, "normalisers")
    causal = check_bool(causal, "causal")
    L, Lk, dv = q.shape[0], k.shape[0], v.shape[1]
    if causal and L != Lk:
        raise ValueError(f"causal=True needs one key per query (L = L_k); got L={L}, L_k={Lk}")
    if rows is not None:
        if queries is not None:
            raise ValueError("give rows or queries, not both")
        rows = np.unique(np.asarray(rows, dtype=np.int64))
        if rows.size == 0 or rows[0] < 0 or rows[-1] >= L:
            raise ValueError(f"rows must be distinct query rows in [0, {L}); got {rows.size} rows "
                             f"spanning [{rows.min() if rows.size else None}, "
                             f"{rows.max() if rows.size else None}]")
    elif queries is None:
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

    with np.errstate(over="ignore"):
        norm_sq = max(float(np.max(np.sum(q * q, axis=1))), float(np.max(np.sum(k * k, axis=1))))
    if not norm_sq <= _NORM_SQ_MAX:
        raise _too_large(f"|q|^2 or |k|^2 reaches {norm_sq:.3g}, beyond {_NORM_SQ_MAX:.3g} where "
                         "the exponents q.k and |k - k'|^2 keep 6 digits")
    half = 0.5 * np.sum(k * k, axis=1)  # h_j
    log_y_max = float(half.max())
    y = np.exp(half - log_y_max)

    log_total = np.empty(rows.size)
    rel_var = np.empty(rows.size) if normalisers else None
    clipped = 0
    for b0, idx in _batches(rows, batch, L if causal else None):
        if causal:  # the batch's key prefix only: later keys have weight 0 for every row of it
            top = int(idx[-1]) + 1
            visible = np.arange(top)[None, :] <= idx[:, None]
            logs, log_d, n_clipped, second = _batch_log_mse(
                q[idx], k[:top], v[:top], half[:top], y[:top], log_y_max, kind, normalisers,
                visible)
        else:
            logs, log_d, n_clipped, second = _batch_log_mse(q[idx], k, v, half, y, log_y_max,
                                                            kind, normalisers)
        log_total[b0:b0 + idx.size] = logs
        log_total[b0:b0 + idx.size] += -2.0 * log_d - math.log(m) - math.log(dv)
        clipped += n_clipped
        if normalisers:
            with np.errstate(over="ignore"):
                rel_var[b0:b0 + idx.size] = np.maximum(np.expm1(second - 2.0 * log_d), 0.0) / m

    if np.any(log_total > 709.0):
        raise _too_large(f"the predicted MSE of {int(np.sum(log_total > 709.0))} row(s) is beyond "
                         f"float64 (log up to {float(log_total.max()):.4g})")
    per_row = np.exp(log_total)
    mse = float(per_row.mean())
    stderr = None if all_rows or queries is None else (float(per_row.std(ddof=1) / math.sqrt(per_row.size))
                                    if per_row.size >= 2 else None)
    return FirstOrderMSE(mse=mse, stderr=stderr, per_row=per_row, rows=rows, m=m, kind=kind,
                         ensemble=ensemble, all_rows=bool(all_rows), rows_clipped=clipped,
                         normaliser_rel_var=None if rel_var is None else float(rel_var.mean()),
                         causal=causal)
