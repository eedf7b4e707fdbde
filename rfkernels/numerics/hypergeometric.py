"""Series for the hypergeometric functions behind the exact MSE.

Private numerics of :mod:`rfkernels.theory`. Every function here is
vectorised over flat float64 arrays and evaluates a *difference* of two
nearly equal quantities as one series whose coefficients are formed without
cancellation (``expm1`` of a sum of ``log1p``), so the small-argument regime
keeps full relative accuracy. Same-sign series are summed in log space, so
no intermediate overflows.

Notation: ``b = d/2``; ``D(x) = 1F1(d; d/2; x) - exp(2x)`` (chi norms) and
``F(y) = 0F1(; d/2; y)`` (fixed norms).
"""

from __future__ import annotations

import numpy as np
from scipy import linalg, special

#: Largest number of series terms evaluated before giving up (a guard, not a knob).
MAX_TERMS = 400_000
#: |x| beyond which the chi-norm functions switch to asymptotic forms.
X_ASYMPTOTIC = 5000.0


def n_terms(peak):
    """Terms needed for a series whose terms behave like peak**k / k!."""
    peak = float(np.max(peak, initial=0.0))
    n = int(np.ceil(peak + 14.0 * np.sqrt(peak) + 40.0))
    if n > MAX_TERMS:
        raise OverflowError(
            f"series would need {n} terms (argument too large for the exact theory; "
            f"at most {MAX_TERMS} are evaluated)"
        )
    return n



def _horner(log_coef, sign_coef, v):
    """``sum_k sign_k exp(log_coef_k) v^k`` for one coefficient set and many v.

    The coefficients are rescaled by ``sigma^k`` with ``sigma = max|v|`` so
    that neither ``1/k!`` nor ``v^k`` under- or overflows, then Horner's rule
    runs on ``v / sigma`` in [-1, 1]: one multiply-add per term per point.
    """
    sigma = float(np.max(np.abs(v), initial=0.0))
    if sigma == 0.0:
        return np.full(v.shape, sign_coef[0] * np.exp(log_coef[0]))
    k = np.arange(log_coef.size)
    with np.errstate(under="ignore"):
        coef = sign_coef * np.exp(log_coef + k * np.log(sigma))
    w = v / sigma
    acc = np.zeros_like(v)
    for c in coef[::-1]:
        acc = acc * w + c
    return acc


def _by_dimension(d):
    """Yield ``(dimension, mask)`` for each distinct dimension in ``d``."""
    for dv in np.unique(d):
        yield float(dv), d == dv


_COEF_CACHE: dict = {}


def _cached(key, build):
    value = _COEF_CACHE.get(key)
    if value is None:
        if len(_COEF_CACHE) > 256:
            _COEF_CACHE.clear()
        value = _COEF_CACHE[key] = build()
    return value


def _chi_diff_log_coefficients(d, n):
    """log c_k, k < n, with ``-D(x) = sum_k c_k (2x)^k`` and ``c_k >= 0``.

    ``c_k = (1 - prod_{j<k} (1 - j/(d+2j))) / k!``, the product formed as
    ``expm1`` of a sum of ``log1p`` so that no digit cancels; c_0 = c_1 = 0.
    """

    def build():
        j = np.arange(n, dtype=np.float64)
        log_p = np.concatenate([[0.0], np.cumsum(np.log1p(-j[:-1] / (d + 2.0 * j[:-1])))])
        with np.errstate(divide="ignore"):
            return np.log(-np.expm1(log_p)) - special.gammaln(j + 1.0)

    return _cached(("chi_diff", d, n), build)


def _kummer_log_coefficients(d, n):
    """(log|k_k|, sign k_k) with ``1F1(-d/2; d/2; y) = sum_k k_k y^k``."""

    def build():
        b = d / 2.0
        j = np.arange(n - 1, dtype=np.float64)
        ratio = (j - b) / (b + j)
        with np.errstate(divide="ignore"):
            log_abs = np.concatenate([[0.0], np.cumsum(np.log(np.abs(ratio)))])
        sign = np.concatenate([[1.0], np.cumprod(np.sign(ratio))])
        return log_abs - special.gammaln(np.arange(n) + 1.0), sign

    return _cached(("kummer", d, n), build)


# ---------------------------------------------------------------------------
# Chi norms: D(x) = 1F1(d; d/2; x) - exp(2x)
# ---------------------------------------------------------------------------




def log_neg_chi_diff(x, d):
    """``log(-D(x))`` for x >= 0, where ``D(x) = 1F1(d; d/2; x) - e^{2x} <= 0``.

    Returns -inf where x == 0 (D vanishes). Relative accuracy ~1e-14 for
    0 < x <= 10 (the cancellation regime, summed as one negative series) and
    ~1e-13 beyond, where ``-D = e^{2x} (1 - S)`` with
    ``S = e^{-2x} 1F1(d; d/2; x)`` from the all-positive Taylor series.
    """
    shape = np.shape(x)
    x = np.asarray(x, dtype=np.float64).ravel()
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), shape).ravel()
    out = np.full(x.shape, -np.inf)
    small = (x > 0) & (x <= 10.0)
    mid = (x > 10.0) & (x <= X_ASYMPTOTIC)
    big = x > X_ASYMPTOTIC

    if np.any(small):
        for dv, sel in _by_dimension(d[small]):
            xs = x[small][sel]
            log_c = _chi_diff_log_coefficients(dv, n_terms(2.0 * xs))
            idx = np.flatnonzero(small)[sel]
            with np.errstate(divide="ignore"):  # a sum that underflows to 0: log 0 = -inf, as for x = 0
                out[idx] = np.log(_horner(log_c, np.ones_like(log_c), 2.0 * xs))

    if np.any(mid):
        xm, dm = x[mid], d[mid]
        log_s = np.empty(xm.shape)
        horner = xm <= X_HORNER
        for dv, sel in _by_dimension(dm[horner]):  # one cached coefficient set per d
            idx = np.flatnonzero(horner)[sel]
            log_c = _kummer_2b_b_log_coefficients(dv, n_terms(2.0 * xm[idx]))
            log_s[idx] = np.log(_horner(log_c, np.ones_like(log_c), xm[idx])) - 2.0 * xm[idx]
        if not np.all(horner):
            log_s[~horner] = _log_scaled_1f1_2b_b(xm[~horner], dm[~horner])
        out[mid] = 2.0 * xm + np.log(-np.expm1(log_s))

    if np.any(big):
        xb, db = x[big], d[big]
        # leading asymptotic term of S = e^{-2x} 1F1: Gamma(b)/Gamma(d) e^{-x} x^{d/2}
        log_s = special.gammaln(db / 2.0) - special.gammaln(db) - xb + (db / 2.0) * np.log(xb)
        log_s = np.minimum(log_s, -1e-300)
        out[big] = 2.0 * xb + np.log(-np.expm1(log_s))
    return out.reshape(shape)


#: Below this x the chi-norm series ``1F1(d; d/2; x)`` (at most about e^(2x)) is summed in
#: linear space by Horner's rule on cached coefficients; above, term by term in log space.
X_HORNER = 300.0


def _kummer_2b_b_log_coefficients(d, n):
    """log c_k, k < n, with ``1F1(d; d/2; x) = sum_k c_k x^k``, ``c_k = (d)_k / ((d/2)_k k!)``."""

    def build():
        j = np.arange(n, dtype=np.float64)
        log_ratio = np.log((d + j[:-1]) / (d / 2.0 + j[:-1]))
        return np.concatenate([[0.0], np.cumsum(log_ratio)]) - special.gammaln(j + 1.0)

    return _cached(("1f1_2b_b", d, n), build)


def _log_scaled_1f1_2b_b(x, d):
    """``log(e^{-2x} 1F1(d; d/2; x))`` for x > 0 from the positive Taylor series."""
    b = d / 2.0
    n = n_terms(2.0 * x)
    logx = np.log(x)
    log_t = -2.0 * x  # k = 0 term, scaled by e^{-2x}
    acc = log_t.copy()
    for k in range(0, n - 1):
        log_t = log_t + np.log((d + k) / (b + k)) + logx - np.log(k + 1.0)
        acc = np.logaddexp(acc, log_t)
    return acc


def chi_diff_neg(y, d):
    """``D(-y) = 1F1(d; d/2; -y) - e^{-2y}`` for y >= 0, in absolute terms.

    Absolute accuracy ~1e-15 (all that the trig MSE needs: D enters beside
    a variance of order one), relative accuracy for small y.
    For y <= 2 the difference series (alternating, small terms); for
    2 < y <= 5000 Kummer's transformation
    ``1F1(d; d/2; -y) = e^{-y} 1F1(-d/2; d/2; y)`` with every term scaled by
    ``e^{-y}`` (each term is at most one); beyond, the algebraic asymptotic
    ``Gamma(d/2)/Gamma(-d/2) y^{-d} sum_k (d)_k (1+d/2)_k / k! y^{-k}``
    (zero for even d, where the function decays exponentially).
    """
    shape = np.shape(y)
    y = np.asarray(y, dtype=np.float64).ravel()
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), shape).ravel()
    out = np.zeros(y.shape)
    small = (y > 0) & (y <= 2.0)
    mid = (y > 2.0) & (y <= X_ASYMPTOTIC)
    big = y > X_ASYMPTOTIC

    if np.any(small):  # D(x) = -sum_k c_k (2x)^k at x = -y: alternating, small terms
        for dv, sel in _by_dimension(d[small]):
            ys = y[small][sel]
            log_c = _chi_diff_log_coefficients(dv, n_terms(2.0 * ys))
            idx = np.flatnonzero(small)[sel]
            out[idx] = -_horner(log_c, np.ones_like(log_c), -2.0 * ys)

    if np.any(mid):  # Kummer: e^{-y} 1F1(-d/2; d/2; y); |terms| e^{-y} <= 1
        for dv, sel in _by_dimension(d[mid]):
            ym = y[mid][sel]
            idx = np.flatnonzero(mid)[sel]
            if np.max(ym) <= 300.0:  # Horner; the sum of |terms| stays below e^300
                log_c, sign_c = _kummer_log_coefficients(dv, n_terms(ym))
                out[idx] = np.exp(-ym) * _horner(log_c, sign_c, ym) - np.exp(-2.0 * ym)
            else:
                out[idx] = _kummer_scaled_terms(ym, dv)

    if np.any(big):
        yb, db = y[big], d[big]
        b = db / 2.0
        # 1/Gamma(-b) = -sin(pi b) Gamma(1+b) / pi (reflection) vanishes for
        # integer b (even d): the value is then O(e^{-y}) and set to zero.
        rg_sign = np.where(np.mod(db, 2.0) == 0.0, 0.0, -np.sign(np.sin(np.pi * b)))
        log_pref = (
            special.gammaln(b) + special.gammaln(1.0 + b) - np.log(np.pi) - db * np.log(yb)
        )
        series = np.ones_like(yb)
        term = np.ones_like(yb)
        active = np.ones(yb.shape, dtype=bool)
        for k in range(40):  # asymptotic: stop each element at its smallest term
            nxt = term * (db + k) * (1.0 + b + k) / ((k + 1.0) * yb)
            active &= np.abs(nxt) < np.abs(term)
            term = np.where(active, nxt, 0.0)
            series = series + term
        out[big] = rg_sign * np.exp(log_pref) * series
    return out.reshape(shape)


def _kummer_scaled_terms(y, d):
    """``e^{-y} 1F1(-d/2; d/2; y) - e^{-2y}`` term by term, each scaled by e^{-y}."""
    b = d / 2.0
    n = n_terms(y)
    logy = np.log(y)
    log_mag = -y  # log |term_k|, scaled by e^{-y}
    sign = np.ones_like(y)
    acc = np.exp(log_mag)
    for k in range(0, n - 1):
        ratio = (k - b) / (b + k)  # (-b)_{k+1}/(-b)_k over (b)_{k+1}/(b)_k
        sign = sign * np.sign(ratio)
        with np.errstate(divide="ignore"):  # ratio = 0 ends the polynomial (even d)
            log_mag = log_mag + np.log(np.abs(ratio)) + logy - np.log(k + 1.0)
        acc = acc + sign * np.exp(log_mag)
    return acc - np.exp(-2.0 * y)


# ---------------------------------------------------------------------------
# Fixed norms: F(y) = 0F1(; b; y), b = d/2
# ---------------------------------------------------------------------------




def fixed_pieces_series(y, d, ratio, gap, *, symmetric):
    """Series for the fixed-norm MSE at argument y (y >= 0, or small |y|).

    Returns ``((log|B|, sign B), (log|W|, sign W))`` where

    - ``B = F(y) - e^{y/b}`` is the bias of one term over its prefactor, and
    - ``W = V + r C`` the variance of the mean times m over the squared
      prefactor, with ``V`` the variance of one term (``F(4y) - F(y)^2`` for
      one exponential, ``(1 + F(4y))/2 - F(y)^2`` for a term even in w,
      ``symmetric``: a cosh pair or a cosine), ``C = F(2y) - F(y)^2`` the
      covariance of two orthogonal rows and ``r = P/m`` (``ratio``).

    ``gap = (d - 1) - r``, computed exactly by the caller from integers.

    With ``a_k = y^k / (k! (b)_k)`` and ``E_k = expm1(sum_{1<=j<k} log1p(j/(2b-1+j)))``
    (the square ``F(y)^2 = 1F2(b-1/2; b, 2b-1; 4y)`` has coefficients
    ``2^k (1 + E_k) a_k``), each is one series:
    ``B = sum_k (y/b)^k/k! expm1(-sum_{j<k} log1p(j/b))`` and
    ``W = sum_k a_k 2^k kappa_k`` with
    ``kappa_k = (2^k - 1) - (1 + r) E_k`` (one exponential) or
    ``kappa_k = (2^{k-1} - 1) - (1 + r) E_k`` (``symmetric``). For the
    latter, ``kappa_2 = gap/d`` and ``kappa_3 = 3 gap/d`` exactly: with one
    full block of fixed-norm rows, ``sum_i (w_i . u)^2 = d |u|^2`` is
    deterministic and the variance starts at order ``|u|^8``, so these two
    coefficients must vanish exactly, not to rounding.
    For y >= 0 the terms of B are all negative and summed in log space; W's
    coefficients are summed with their signs (they are non-negative for a
    variance, up to rounding in kappa_k for k >= 4).
    """
    y = np.asarray(y, dtype=np.float64)
    shape = y.shape
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), shape)
    ratio = np.broadcast_to(np.asarray(ratio, dtype=np.float64), shape)
    gap = np.broadcast_to(np.asarray(gap, dtype=np.float64), shape)
    b = d / 2.0
    ay = np.abs(y)
    neg = y < 0
    sgn_y = np.where(neg, -1.0, 1.0)
    # peak of |a_k| 4^k: where 4|y| ~ k (b + k)
    n = n_terms(np.minimum(4.0 * ay / b, 4.0 * np.sqrt(ay)) + ay / b)
    log_b = np.full(shape, -np.inf)  # log |B| (B's terms have sign (-1) * sgn_y^k)
    lin_b = np.zeros(shape)
    w_acc = np.zeros(shape)  # W, accumulated in units of exp(w_shift)
    w_shift = np.full(shape, -1e300)  # log scale of w_acc; "minus infinity" without NaNs
    with np.errstate(divide="ignore"):
        logay = np.log(ay)
    log_ayb = logay - np.log(b)
    log_a = np.zeros(shape)  # log |a_k|
    log_bk = np.zeros(shape)  # log (|y|/b)^k / k!
    log_poch_ratio = np.zeros(shape)  # sum_{j<k} log1p(j/b)
    l_k = np.zeros(shape)  # sum_{1<=j<k} log1p(j/(2b-1+j))
    ln2 = np.log(2.0)
    alternating = bool(np.any(neg))
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(1, n):
            log_a = log_a + logay - np.log(k) - np.log(b + (k - 1))
            log_bk = log_bk + log_ayb - np.log(k)
            log_poch_ratio = log_poch_ratio + np.log1p((k - 1) / b)
            if k >= 2:
                l_k = l_k + np.log1p((k - 1) / (2.0 * b - 1.0 + (k - 1)))
            sign_k = sgn_y**k
            if k >= 2:
                lt = log_bk + np.log(-np.expm1(-log_poch_ratio))
                log_b = np.logaddexp(log_b, lt)
                if alternating:
                    lin_b = lin_b - sign_k * np.exp(lt)
            # kappa_k / 2^p with p = k (one exponential) or k - 1 (symmetric: cosh, cos)
            p = k - 1 if symmetric else k
            if symmetric and k == 1:
                continue
            if symmetric and k in (2, 3):
                kappa = (gap / d) * (1.0 if k == 2 else 3.0) / 2.0**p
            elif k < 60:  # (2^p - 1) - (1 + r) E_k: at most a digit of cancellation
                kappa = ((2.0**p - 1.0) - (1.0 + ratio) * np.expm1(l_k)) / 2.0**p
            else:  # 2^{-p} and r 2^{-p} are negligible against one here
                kappa = 1.0 + ratio * 2.0**-p - (1.0 + ratio) * np.exp(l_k - p * ln2)
            # term = sign_k * a_k 2^k kappa, accumulated with a running scale
            lt = log_a + (k + p) * ln2
            new_shift = np.maximum(w_shift, lt)
            w_acc = w_acc * np.exp(w_shift - new_shift) + sign_k * kappa * np.exp(lt - new_shift)
            w_shift = new_shift
    sign_b = np.where(log_b == -np.inf, 0.0, -1.0)
    if alternating:
        with np.errstate(divide="ignore"):
            log_b = np.where(neg, np.log(np.abs(lin_b)), log_b)
        sign_b = np.where(neg, np.sign(lin_b), sign_b)
    with np.errstate(divide="ignore"):
        log_w = np.log(np.abs(w_acc)) + w_shift
    return (log_b, sign_b), (log_w, np.sign(w_acc))


def hyp0f1_neg(y, d):
    """``F(-y) = 0F1(; d/2; -y)`` for y >= 0 with absolute accuracy ~1e-15.

    ``F(-y) = E cos(2 sqrt(y) v_1)`` for v uniform on the unit sphere of
    R^d, i.e. an integral against the weight ``(1-u^2)^{(d-3)/2}`` on
    [-1, 1]; it is evaluated by Gauss-Jacobi quadrature (positive weights,
    |cos| <= 1, hence the absolute error bound). d = 1 is ``cos(2 sqrt(y))``.
    """
    y = np.asarray(y, dtype=np.float64)
    d = np.broadcast_to(np.asarray(d, dtype=np.float64), y.shape)
    out = np.empty(y.shape)
    omega = 2.0 * np.sqrt(y)
    one = d == 1
    out[one] = np.cos(omega[one])
    for dv in np.unique(d[~one]):
        sel = (d == dv) & ~one
        om = omega[sel]
        alpha = (dv - 3.0) / 2.0
        # degree needed: the weight's effective support is ~ few / sqrt(b)
        width = min(1.0, 12.0 / np.sqrt(dv / 2.0))
        n = int(np.ceil(np.max(om) * width + 60.0))
        nodes, weights = _jacobi_rule(n, alpha)
        out[sel] = np.cos(np.outer(om, nodes)) @ weights
    return out


_JACOBI_CACHE: dict = {}


def _jacobi_rule(n, alpha):
    """Gauss rule for the weight (1-u^2)^alpha on [-1, 1], weights summing to one.

    Golub-Welsch on the symmetric Jacobi matrix (monic recurrence
    ``beta_k = k (k + 2a) / ((2k + 2a + 1)(2k + 2a - 1))``), which stays
    accurate for the large exponents of high dimensions, where the
    Newton-refined roots of ``scipy.special.roots_jacobi`` break down.
    """
    key = (n, alpha)
    rule = _JACOBI_CACHE.get(key)
    if rule is None:
        k = np.arange(1, n, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            beta = k * (k + 2.0 * alpha) / ((2.0 * k + 2.0 * alpha + 1.0) * (2.0 * k + 2.0 * alpha - 1.0))
        if alpha == -0.5:  # Chebyshev weight: the general formula is 0/0 at k = 1
            beta[0] = 0.5
        nodes, vecs = linalg.eigh_tridiagonal(np.zeros(n), np.sqrt(beta))
        weights = vecs[0] ** 2
        rule = (nodes, weights / weights.sum())
        if len(_JACOBI_CACHE) > 64:
            _JACOBI_CACHE.clear()
        _JACOBI_CACHE[key] = rule
    return rule
