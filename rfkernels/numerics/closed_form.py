r"""The closed-form numerics of the paper's estimators, in log space (no validation here).

:mod:`rfkernels.theory` validates its arguments once, into an
:class:`rfkernels.estimators.Estimator`, and the registry's kinds call these
functions with arrays they trust, their term's
:class:`~rfkernels.numerics.term_form.TermForm` and their ensemble's blocks
(never a name). Formulas: :mod:`rfkernels.theory`'s notes and
``docs/theory.rst``.
"""

from __future__ import annotations

import numpy as np

from . import hypergeometric as hg

_LN2 = np.log(2.0)


def pairs_in_blocks(m, d, *, blocked):
    """``P = sum_j b_j (b_j - 1)``: ordered pairs of projections sharing a block.

    ``blocked``: the projections come in blocks of ``d`` rows (the last one
    partial); otherwise they share no block (P = 0).
    """
    m = np.asarray(m, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    if not blocked:
        return np.zeros(np.broadcast_shapes(m.shape, d.shape))
    q, r = np.divmod(m, d)
    return (q * d * (d - 1) + r * (r - 1)).astype(np.float64)


def finish(log_value, log, what):
    """Return ``log_value`` or its exponential, refusing silent overflow."""
    log_value = np.asarray(log_value, dtype=np.float64)
    if np.any(np.isnan(log_value)):  # a bug, never an input condition
        raise FloatingPointError(f"{what}: internal error (NaN)")
    if np.any(log_value == np.inf):  # |x|^2 near float64's limit: even the log overflows
        raise FloatingPointError(
            f"{what}: the natural log of the value overflows float64 at "
            f"{int(np.count_nonzero(log_value == np.inf))} point(s) (squared norms near "
            "1.8e308); rescale the inputs"
        )
    if log:
        return log_value[()]
    over = log_value > np.log(np.finfo(np.float64).max)
    if np.any(over):
        raise FloatingPointError(
            f"{what} overflows float64 at {int(np.count_nonzero(over))} of "
            f"{log_value.size} point(s); use log=True (or the log_* function) "
            "for the natural log of the value"
        )
    return np.exp(log_value)[()]


def log_expm1(a):
    """``log(e^a - 1)`` for a > 0 without overflow."""
    a = np.asarray(a, dtype=np.float64)
    small = a <= 30.0
    with np.errstate(under="ignore", divide="ignore"):  # a = 0 is never taken from here
        big = a + np.log1p(-np.exp(-a))
    return np.where(small, np.log(np.expm1(np.where(small, a, 1.0))), big)


def log_neg_expm1_neg(a):
    """``log(1 - e^{-a})`` for a >= 0."""
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(-np.asarray(a, dtype=np.float64)))


def orthogonal_rows(cosine, d):
    """True where the closed forms' pair law holds: independent rows or orthogonal blocks.

    ``cosine`` is None (independent rows) or ``cosine(d)``, the cosine of
    two rows of a block (:attr:`rfkernels.estimators.registry.Ensemble.cosine`);
    True where it is 0 at every ``d`` (another cosine needs the quadrature of
    :mod:`rfkernels.numerics.oprf_simplex`).
    """
    return cosine is None or bool(np.all(np.asarray(cosine(d)) == 0.0))


def _closed_form(form):
    """Refuse a term with ``A|w|^2`` (its MSE is :func:`rfkernels.numerics.oprf_simplex.log_mse`)."""
    if form.quadratic:
        raise ValueError("the closed forms serve terms without A|w|^2 (quadratic=False); the "
                         "exact MSE of those is rfkernels.numerics.oprf_simplex.log_mse")


def log_mse_chi(geom, m, form, pairs):
    """log MSE for chi norms (unbiased): log(V/m) + log1p((P/m) C/V); ``form`` a TermForm."""
    _closed_form(form)
    s, t, d = geom.s, geom.t, geom.d
    two_log_lam = -2.0 * geom.half_sq
    if form.on_sum:
        s_safe = np.where(s > 0, s, 1.0)
        if not form.symmetric:
            log_v_over = s + log_expm1(s_safe)
        else:
            log_v_over = 2.0 * log_expm1(s_safe) - _LN2
        log_v = two_log_lam + log_v_over
        # C / V = D(s/2) / (V / Λ²),  D < 0
        log_neg_d = hg.log_neg_chi_diff(np.where(s > 0, s, 0.0) / 2.0, d)
        ratio = -np.exp(log_neg_d - log_v_over)
        zero = s == 0
    else:
        t_safe = np.where(t > 0, t, 1.0)
        log_v_over = 2.0 * np.log(-np.expm1(-t_safe)) - _LN2
        log_v = -two_log_lam + log_v_over
        # C/V = D(-t/2) / (V Λ²) -> -1/(d + 2) as t -> 0 (D ~ -t²/(2(d+2)), V Λ² ~ t²/2);
        # below t = 1e-100 that limit is exact to rounding, and D/V would be 0 * inf
        tiny = t < 1e-100
        dval = hg.chi_diff_neg(np.where(tiny, 1.0, t) / 2.0, d)
        ratio = np.where(tiny, -1.0 / (d + 2.0), dval * np.exp(-np.where(tiny, 0.0, log_v_over)))
        zero = t == 0
    with np.errstate(divide="ignore"):
        out = log_v - np.log(m) + np.log1p(pairs / m * ratio)
    return np.where(zero, -np.inf, out)


def log_mse_fixed(geom, m, form, pairs):
    """log MSE for fixed norms: bias² + (V + (P/m) C)/m, over the prefactor Λ^{±2}; ``form`` a TermForm."""
    _closed_form(form)
    d = geom.d
    q = geom.s if form.on_sum else -geom.t
    y = d * q / 4.0
    ratio = pairs / m
    gap = ((d - 1.0) * m - pairs) / m  # exact: integers below 2**53
    shape = np.broadcast_shapes(y.shape, np.shape(ratio))
    y, d, ratio, gap = (np.broadcast_to(a, shape) for a in (y, d, ratio, gap))
    m = np.broadcast_to(m, shape)
    log_bias, log_w = np.empty(shape), np.empty(shape)
    b = d / 2.0
    ay = np.abs(y)
    # The series serve y >= 0 (same-sign terms) and negative y whose absolute
    # series stays below e^6; beyond, the cosine term's moments come from quadrature,
    # whose absolute accuracy suffices because the variance is then O(1).
    series = (y >= 0) | (np.minimum(4.0 * ay / b, 4.0 * np.sqrt(ay)) <= 6.0)
    if np.any(series):
        (lb, _), (lw, sw) = hg.fixed_pieces_series(
            y[series], d[series], ratio[series], gap[series], symmetric=form.symmetric
        )
        log_bias[series] = lb
        log_w[series] = np.where(sw > 0, lw, -np.inf)  # a variance: rounding below 0 is 0
    quad = ~series
    if np.any(quad):
        yy, dd, rr = -y[quad], d[quad], ratio[quad]
        f1, f2, f4 = (hg.hyp0f1_neg(c * yy, dd) for c in (1.0, 2.0, 4.0))
        bias = f1 - np.exp(-yy / (dd / 2.0))
        w = (1.0 + f4) / 2.0 - f1**2 + rr * (f2 - f1**2)
        with np.errstate(divide="ignore"):
            log_bias[quad] = np.log(np.abs(bias))
            log_w[quad] = np.where(w > 0, np.log(np.abs(w)), -np.inf)
    two_log_pref = -2.0 * geom.half_sq if form.on_sum else 2.0 * geom.half_sq
    return np.logaddexp(2.0 * log_bias, log_w - np.log(m)) + two_log_pref
