r"""Pair terms of orthogonal rows with antithetic chi norms (Reid et al., ICLR 2025) [1]_.

The pair terms of ``norms="antithetic"`` (:mod:`rfkernels.numerics.antithetic_mse`
composes the MSE). Hyperbolic features have the positive pair term (:math:`E\cosh(\omega_1\cdot u)
\cosh(\omega_2\cdot u) = \tfrac12 E[\cosh((\omega_1+\omega_2)\cdot u) +
\cosh((\omega_1-\omega_2)\cdot u)]`, both sums isotropic of squared length S);
OPRF's is :func:`oprf_log_pair_term`. Two rows
of a Haar-orthogonal block with norms :math:`R_1, R_2` give
:math:`R_1e_1 + R_2e_2`, an isotropic vector of squared length
:math:`S = R_1^2 + R_2^2`, so the pair term of positive features is
:math:`E\,{}_0F_1(;d/2;Sq/4)` with :math:`q = |x + y|^2` (independent chi(d)
norms give back :math:`{}_1F_1(d; d/2; q/2)`), and that of trig features
:math:`E\,{}_0F_1(;d/2;-Sq/4)` with :math:`q = |x - y|^2`. Antithetic norms,
:math:`R_2 = F^{-1}(1 - F(R_1))` (F the chi(d) cdf), make it an integral
over :math:`p = F(R_1)`, symmetric under :math:`p \leftrightarrow 1 - p`.

Quadrature
----------
With :math:`p = \Phi(t)`, :math:`t \le 0` (the other half by symmetry),
:math:`S(t) = 2\,\mathrm{gammaincinv}(d/2, p) + 2\,\mathrm{gammainccinv}(d/2, p)`
(both quantiles from p itself, so the small one keeps its accuracy) and

.. math:: E\,g(S) = 2\int_{-\infty}^0 g(S(t))\,\varphi(t)\,dt,

evaluated by 24-point Gauss-Legendre panels of width 1 on
:math:`[-T, 0]`, ``T = 37`` (below it p underflows float64). For positive
features the integrand peaks near :math:`t \approx -\sqrt q`, and the
truncation is below 1e-10 relative for :math:`q \le` :data:`Q_MAX`; larger
q is refused. :math:`\log {}_0F_1(;b;z) = \log\Gamma(b) + \tfrac{1-b}2\log z
+ \log I_{b-1}(2\sqrt z)` (scaled Bessel functions) keeps the sums in log
space.
Above b = 128 (d > 256) the Bessel functions of order b - 1 underflow and
:math:`\Gamma(b)` overflows at the z the quadrature reaches (and the log
form cancels): there :math:`\log {}_0F_1(;b;\pm z)` comes from the
uniform (Debye) expansion of :math:`I_{b-1}` / :math:`J_{b-1}` with
:math:`\Gamma(b)` and the power of z cancelled in closed form (relative
error of the log below 1e-15 against mpmath), and beyond the turning point
of :math:`J_{b-1}` from scipy's ``jv`` with the prefactor in logs.

Cancellation
------------
:math:`E S = 2d` for every coupling that keeps the chi(d) marginals, so the
pair term and the independent-rows value :math:`e^{\pm q}` agree to first
order in q. The difference is computed as
:math:`E[h(Sq/4)] - (\mathrm{expm1}(\pm q) \mp q)` with
:math:`h(z) = {}_0F_1(;b;\pm z) - 1 \mp z/b` (its series from the second
term below :math:`z = 1`), so it keeps its relative accuracy as q -> 0. For trig the integrand is
bounded and oscillates: the sum's absolute error is about 1e-14 (4e-15
measured against mpmath at d = 64, q = 16, where the difference is
-1.1e-7), so its relative accuracy falls where the difference is small.

References
----------
.. [1] I. Reid, S. Markou, K. Choromanski, R. E. Turner and A. Weller, "Variance-Reducing
   Couplings for Random Features", ICLR 2025 (arXiv:2405.16541).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from ..validation import check_finite, check_int

#: Largest q (the squared length of x + y or x - y) with the stated accuracy (the t range is truncated).
Q_MAX = 800.0
_T_MAX = 37.0
_PANEL_POINTS = 24


@lru_cache(maxsize=64)
def _nodes(d):
    """``(log_weight, S, P)``: the half-line nodes in t with weight 2 phi(t) dt, S(t) and P(t) = R1 R2."""
    x, w = special.roots_legendre(_PANEL_POINTS)
    edges = np.arange(-_T_MAX, 0.0 + 0.5, 1.0)
    t = np.concatenate([0.5 * (x + 1.0) * (b - a) + a for a, b in zip(edges[:-1], edges[1:])])
    wt = np.concatenate([0.5 * w * (b - a) for a, b in zip(edges[:-1], edges[1:])])
    p = special.ndtr(t)
    half = 0.5 * d
    q1, q2 = 2.0 * special.gammaincinv(half, p), 2.0 * special.gammainccinv(half, p)
    S, P = q1 + q2, np.sqrt(q1 * q2)
    log_w = np.log(2.0 * wt) - 0.5 * t * t - 0.5 * math.log(2.0 * math.pi)
    for arr in (log_w, S, P):
        arr.setflags(write=False)
    return log_w, S, P


def _lengths(S, P, gamma):
    """The squared lengths of omega_1 + omega_2 and omega_1 - omega_2 (rows at cosine gamma)."""
    return S + 2.0 * gamma * P, S - 2.0 * gamma * P


def _series_h(b, z, sign):
    """0F1(; b; sign z) - 1 - sign z / b for 0 <= z < 1 (array): the series from its third term."""
    term = z * z / (b * (b + 1.0) * 2.0)
    acc = term.copy()
    for k in range(3, 40):
        term = term * (sign * z) / ((b + k - 1.0) * k)
        acc += term
    return acc


#: Above this b (d > 256) 0F1 comes from the Debye expansion: the Bessel functions of order
#: b - 1 underflow (and Gamma(b) overflows) at the z the theory reaches, and the log form cancels.
_B_DEBYE = 128.0


@lru_cache(maxsize=1)
def _debye_polynomials():
    """The Debye polynomials u_1 .. u_16 (DLMF 10.41.10), coefficients in ascending powers of t."""
    P = np.polynomial.polynomial
    u = [np.array([1.0])]
    # in floats: the recurrence's rounding (1e-16 relative) is far below the weight 1/nu^k (nu > 127)
    for _ in range(16):
        prev = u[-1]
        first = P.polymul([0.0, 0.0, 0.5, 0.0, -0.5], P.polyder(prev))
        second = P.polyint(P.polymul([1.0, 0.0, -5.0], prev)) / 8.0
        u.append(P.polyadd(first, second))
    return tuple(u[1:])


def _stirling(nu):
    """log Gamma(nu + 1) - (nu + 1/2) log nu + nu - log(2 pi)/2 for nu > 127 (Stirling's series)."""
    r = 1.0 / (nu * nu)
    return (1.0 / 12.0 - r * (1.0 / 360.0 - r * (1.0 / 1260.0 - r * (1.0 / 1680.0 - r / 1188.0)))) / nu


def _debye_log_0f1(b, z, sign):
    r"""``(log 0F1(; b; sign z), last)`` by the Debye expansion in nu = b - 1 (b > 128, z >= 0 array).

    With :math:`\zeta = 4z/\nu^2`, :math:`s = \sqrt{1 + \mathrm{sign}\,\zeta}`, t = 1/s
    (sign -1: :math:`\zeta < 1`, below the turning point of :math:`J_\nu`), Gamma(b) and the
    power of z cancel against the Bessel function's leading factors in closed form:

    .. math:: \log {}_0F_1 = \nu[(s - 1) - \log\tfrac{1+s}2] + \mathrm{st}(\nu)
              - \tfrac14\log s^2 + \log\sum_k u_k(t)/\nu^k,

    st the Stirling correction of log Gamma(nu + 1); no term is large, so the log keeps its
    relative accuracy down to z ~ 1. ``last`` is the magnitude of the series' last term (its
    truncation error's scale): sign -1 uses it where t > 1 makes the series diverge sooner.
    """
    nu = b - 1.0
    zeta = 4.0 * z / (nu * nu)
    arg = sign * zeta
    s = np.sqrt(1.0 + arg)
    sm1 = arg / (1.0 + s)  # s - 1 without cancellation
    t = 1.0 / s
    total = np.zeros_like(t)
    term = total
    for k, u in enumerate(_debye_polynomials(), start=1):
        term = np.polynomial.polynomial.polyval(t, u) / nu**k
        total = total + term
    lead = nu * (sm1 - np.log1p(0.5 * sm1))
    out = lead + _stirling(nu) - 0.25 * np.log1p(arg) + np.log1p(total)
    return out, np.abs(term)


def _log_0f1_bessel(b, z):
    """log 0F1(; b; z) for z >= 1 (array), from the exponentially scaled Bessel function
    (b <= _B_DEBYE), the Debye expansion above (the uniform one of I_{b-1}: every z > 0)."""
    if b > _B_DEBYE:
        return _debye_log_0f1(b, np.asarray(z, dtype=np.float64), 1)[0]
    r = 2.0 * np.sqrt(z)
    return special.gammaln(b) + 0.5 * (1.0 - b) * np.log(z) + np.log(special.ive(b - 1.0, r)) + r


def _0f1_neg(b, z):
    """0F1(; b; -z) for z >= 1 (array): scipy's below _B_DEBYE; above, the Debye expansion of
    J_{b-1} where it converges to float64 (z well below the turning point nu^2/4), else
    Gamma(b) z^{(1-b)/2} J_{b-1}(2 sqrt z) with the prefactor in logs (J may underflow to 0
    there, where the value is below e^{-0.07 nu} anyway: an absolute error only)."""
    z = np.asarray(z, dtype=np.float64)
    if b <= _B_DEBYE:
        return special.hyp0f1(b, -z)
    shape, z = z.shape, z.ravel()
    out = np.empty(z.shape)
    nu = b - 1.0
    below = 4.0 * z < 0.9 * nu * nu
    log_f, last = _debye_log_0f1(b, z[below], -1)
    good = last < 1e-17
    vals = np.exp(log_f)
    idx = np.nonzero(below)[0]
    rest = np.ones(z.shape, dtype=bool)
    out[idx[good]] = vals[good]
    rest[idx[good]] = False
    zr = z[rest]
    j = special.jv(nu, 2.0 * np.sqrt(zr))
    with np.errstate(divide="ignore"):
        log_mag = special.gammaln(b) - 0.5 * nu * np.log(zr) + np.log(np.abs(j))
    out[rest] = np.sign(j) * np.exp(log_mag)
    return out.reshape(shape)


def _log_0f1_pos(b, z):
    """log 0F1(; b; z) for z >= 0 (array): the series below z = 1 (the Bessel form underflows
    for tiny z at large b), the Bessel function above."""
    z = np.asarray(z, dtype=np.float64)
    out = np.empty(z.shape)
    small = z < 1.0
    zs = z[small]
    out[small] = np.log1p(zs / b + _series_h(b, zs, 1))
    out[~small] = _log_0f1_bessel(b, z[~small])
    return out


def _h(b, z, sign):
    """0F1(; b; sign z) - 1 - sign z / b without cancellation (z >= 0, array)."""
    out = np.empty_like(z)
    small = z < 1.0
    out[small] = _series_h(b, z[small], sign)
    zl = z[~small]
    if sign > 0:
        out[~small] = np.exp(_log_0f1_bessel(b, zl)) - 1.0 - zl / b
    else:
        out[~small] = _0f1_neg(b, zl) - 1.0 + zl / b
    return out


def _check(q, d):
    d = check_int(d, "d")
    q = check_finite(q, "q")
    if np.any(q < 0):
        raise ValueError("q must be >= 0 (a squared length |x +- y|^2)")
    if np.any(q > Q_MAX):
        raise ValueError(f"q must be <= {Q_MAX:g} (the antithetic pair term's quadrature is "
                         f"accurate to 1e-10 there); got max {float(np.max(q)):.4g}")
    return q, d


def _logsumexp(lg):
    top = np.max(lg, axis=-1, keepdims=True)
    return top[..., 0] + np.log(np.sum(np.exp(lg - top), axis=-1))


def log_pair_term(q, d, gamma=0.0, symmetric=False):
    r"""``log E[0F1(; d/2; S q/4)]``: the positive-feature pair term with antithetic norms.

    ``q`` = :math:`|x + y|^2` (array, 0 <= q <= :data:`Q_MAX`); the term of
    two coupled rows of a block, without the :math:`\Lambda^2` factor. Rows at
    cosine ``gamma`` (simplex: :math:`-1/(d-1)`; 0: orthogonal) have
    :math:`|\omega_1 \pm \omega_2|^2 = S \pm 2\gamma R_1R_2`; positive features
    see the sum, hyperbolic ones (``symmetric=True``) the mean over both signs.
    """
    q, d = _check(q, d)
    log_w, S, P = _nodes(d)
    qa = np.atleast_1d(q)[..., None]
    out = None
    for L in _lengths(S, P, gamma)[: 2 if symmetric and gamma else 1]:
        with np.errstate(divide="ignore"):
            z = L * qa / 4.0
            term = _logsumexp(log_w + _log_0f1_pos(0.5 * d, z))
        out = term if out is None else np.logaddexp(out, term) - math.log(2.0)
    return out.reshape(np.shape(q))


def pair_difference(q, d, sign=1, gamma=0.0, symmetric=None):
    r"""``E[0F1(; d/2; sign L q/4)] - e^{sign q}``: antithetic pair term minus independent rows'.

    ``sign = +1``: positive (hyperbolic with ``symmetric=True``) features at
    :math:`q = |x + y|^2`; ``-1``: trig at :math:`q = |x - y|^2` (symmetric
    by default). ``L`` is :math:`|\omega_1 \pm \omega_2|^2` (:func:`log_pair_term`:
    rows at cosine ``gamma``; ``symmetric`` averages both signs).
    Cancellation-free for small q (module notes); for positive features at
    large q prefer :func:`log_pair_term` (the value is then of order
    :math:`e^q`).
    """
    q, d = _check(q, d)
    if sign not in (1, -1):
        raise ValueError(f"sign must be 1 or -1; got {sign!r}")
    symmetric = sign < 0 if symmetric is None else bool(symmetric)
    log_w, S, P = _nodes(d)
    w = np.exp(log_w)
    lengths = _lengths(S, P, gamma)[: 2 if symmetric and gamma else 1]
    # E[z]/b = q + gamma q E[P]/d for the sum alone; the signs cancel in the mean of both
    drift = 0.0 if (symmetric or not gamma) else sign * gamma * float(np.sum(w * P)) / d
    qa = np.atleast_1d(q).ravel()
    out = np.empty(qa.shape)
    for i, qi in enumerate(qa):
        mean_h = sum(float(np.sum(w * _h(0.5 * d, L * qi / 4.0, sign))) for L in lengths) / len(lengths)
        out[i] = (mean_h + drift * qi) - (math.expm1(sign * qi) - sign * qi)
    return out.reshape(np.shape(q))


def oprf_log_pair_term(q, d, A):
    r"""``log E[(1-4A)^d e^{2AS} 0F1(; d/2; (1-4A) S q/4)]``: OPRF's antithetic pair term.

    For OPRF features (parameter ``A < 1/8``, one float) the pair term of two
    coupled rows is :math:`(1-4A)^d\Lambda^2 E[e^{2AS}{}_0F_1(;d/2;(1-4A)Sq/4)]`,
    :math:`q = |x + y|^2` (without :math:`\Lambda^2`). With independent chi
    norms the tilt :math:`e^{2AR^2}` of each radius is the likelihood ratio
    to another chi radius and the term does not depend on A; with coupled
    norms it does. A = 0 is :func:`log_pair_term`.
    """
    q, d = _check(q, d)
    A = float(check_finite(A, "A"))
    if not A < 0.125:
        raise ValueError(f"A must be < 1/8; got {A!r}")
    log_w, S, _ = _nodes(d)
    qa = np.atleast_1d(q)[..., None]
    c = 1.0 - 4.0 * A
    z = c * S * qa / 4.0
    out = d * math.log1p(-4.0 * A) + _logsumexp(log_w + 2.0 * A * S + _log_0f1_pos(0.5 * d, z))
    return out.reshape(np.shape(q))


__all__ = ["Q_MAX", "log_pair_term", "oprf_log_pair_term", "pair_difference"]
