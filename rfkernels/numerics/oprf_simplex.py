r"""Exact MSE of optimal positive (OPRF) features and of simplex blocks (rows at a fixed cosine).

Numerics for :mod:`rfkernels.theory`, below the registry: a kind
module passes its term's :class:`~rfkernels.numerics.term_form.TermForm`
and its ensemble's row cosine (``cosine(d)``, None for independent rows),
never a name. Everything is vectorised over the invariants of a
:class:`rfkernels.theory.Geometry` (``d``, ``half_sq = (|x|^2 + |y|^2)/2``,
``s = |x + y|^2``, ``t = |x - y|^2``) and works in log space, so nothing
overflows at ``s = 1e3`` (nor far beyond).

Notation as in :mod:`rfkernels.theory`: :math:`\Lambda = e^{-\mathrm{half\_sq}}`,
:math:`SM = \Lambda e^{s/2}`, :math:`D(x) = {}_1F_1(d; d/2; x) - e^{2x}`. ``m``
projections in blocks of sizes ``b_j`` (blocks of ``d`` rows, the last one
partial, for both ``orthogonal`` and ``simplex``), ``P = sum_j b_j (b_j - 1)``.
Every estimator here is unbiased (chi(d) norms), so

.. math:: \mathrm{MSE} = (m V + P C) / m^2,

``V`` the variance of one per-projection term and ``C`` the covariance of
two terms of one block. The code returns
``log V - log m + log1p((P/m) C/V)``, as :mod:`rfkernels.theory` does.

OPRF (Likhosherstov et al. 2022)
--------------------------------
``f_A(w, x) = (1-4A)^{d/4} exp(A|w|^2 + sqrt(1-4A) w.x - |x|^2/2)``, A < 1/8.
For ``w ~ N(0, I_d)``, ``E exp(a|w|^2 + b.w) = (1-2a)^{-d/2} exp(|b|^2/(2(1-2a)))``
gives, with ``r = 1 - 8A > 0``,

.. math::

    \log\frac{E[(f_A(w,x) f_A(w,y))^2]}{SM^2}
      = g = \frac d2 \log\Bigl(1 + \frac{(r-1)^2}{4r}\Bigr) + \frac sr,
    \qquad V_A = SM^2\,\mathrm{expm1}(g).

Both terms of ``g`` are non-negative (``(1-4A)^2/(1-8A) = 1 + 16A^2/(1-8A)``),
so ``g`` has full relative accuracy and ``expm1`` keeps it in ``V_A``: the
difference ``E f^2 - SM^2`` never cancels. Minimising ``g`` over ``v = 1/r``
gives ``2 rho v^2 + (1 + 2 rho) v - 1 = 0`` (``rho = s/d``), hence
``r* = (1 + 2 rho + S)/2`` with ``S = sqrt((2 rho + 1)^2 + 8 rho)`` and
``A* = (1 - 2 rho - S)/16 = -(r* - 1)/8``, where
``r* - 1 = ((12 rho + 4 rho^2)/(1 + S) + 2 rho)/2`` has no cancellation.

Pair term: with independent chi(d) radii, ``(1-4A)^{d/2} e^{2A R^2}`` is the
likelihood ratio that turns ``sqrt(1-4A) R`` into a chi(d) variable again,
so ``E[f_A f_A'] `` over two rows of any coupling of the *directions*
(orthogonal, simplex) equals the FAVOR+ (A = 0) value: the OPRF pair
covariance is the positive-feature one, for every A. Fixed norms are not
supported: with ``|w|^2 = d`` the factor ``e^{A|w|^2}`` is a constant, the
estimator is a rescaled, biased fixed-norm positive estimator, and A loses
the meaning it has in the unbiased construction.

Simplex (Reid et al. 2023)
--------------------------
Two rows ``w_i = R_i e_i`` of one block have ``e_1.e_2 = c = -1/(d-1)``,
a Haar-random common rotation and independent chi(d) radii. Nothing below
uses more of ``c`` than its value, so the quadrature serves any cosine of
a block's rows (``c = 0``, orthogonal rows, has the closed form
``1F1(d; d/2; q/2)`` instead). In polar form
``R_1 = rho cos(phi)``, ``R_2 = rho sin(phi)``: ``rho^2 ~ chi^2(2d)`` is
independent of ``W = sin(2 phi) = sqrt(B)`` with ``B ~ Beta(d/2, 1/2)``,
i.e. ``W`` has density ``2 W^{d-1} (1 - W^2)^{-1/2} / B(d/2, 1/2)`` on
[0, 1]. ``|w_1 + a w_2|^2 = rho^2 (1 + a c W)`` for ``a = ±1`` and the
direction of the sum is uniform, so (moment generating function of the
chi^2(2d) radius against ``0F1(; d/2; .)``)

.. math::

    M_\pm(q) := E\,e^{(w_1 \pm w_2)\cdot v} = E_W\,{}_1F_1(d; d/2; q(1 \pm cW)/2),
    \qquad |v|^2 = q,

and ``E cos((w_1 ± w_2).v) = E_W 1F1(d; d/2; -q(1 ± cW)/2)`` (the same
with ``q -> -q``). ``w_1 - w_2`` is the cosine ``-c`` geometry; ``M_+``
and ``M_-`` together are the average over ``W`` in [-1, 1] with the even
weight ``|W|^{d-1} (1 - W^2)^{-1/2}``, written ``E_sym`` below.

* positive (and OPRF): ``f = Lambda e^{w.u}``, ``E f f' = Lambda^2 M_+(s)``:

  ``C/Lambda^2 = M_+(s) - e^s = E_W[D(t_W)] + e^s E_W[expm1(s c W)]``,
  ``t_W = s(1 + cW)/2``; both terms are <= 0 (``c < 0``), so ``-C`` is a
  sum of positive terms, summed in log space (no cancellation anywhere).

* hyperbolic: ``f = Lambda cosh(w.u)``;
  ``cosh a cosh b = (cosh(a+b) + cosh(a-b))/2`` and the direction of
  ``w_1 ± w_2`` is symmetric, so ``E f f' = Lambda^2 (M_+(s) + M_-(s))/2``:

  ``C/Lambda^2 = E_sym[1F1(d; d/2; s(1+cW)/2)] - e^s
  = E_sym[D(s(1+cW)/2)] + e^s E_W[2 sinh^2(s c W/2)]``

  (``expm1(a) + expm1(-a) = 4 sinh^2(a/2)``). The first term is negative,
  the second positive. Where their magnitudes stay below ``e^s`` they are
  combined directly (small ``s``: a loss of at most a few bits, e.g.
  ``C ~ Lambda^2 s^2 (c^2 d - 1)/(2(d+2))`` from terms ``~ s^2/(2(d+2))``);
  elsewhere (large ``s``, where ``e^{s|c|W}`` makes both huge)
  ``C/Lambda^2 = e^s expm1(L)`` with
  ``L = log E_sym[e^{s c W} e^{-2t} 1F1(d; d/2; t)]``, ``t = s(1+cW)/2``,
  summed in log space.

* trig: ``f = Lambda^{-1} cos(w.z)`` (``Lambda^{-1} = e^{half_sq}``);
  ``cos a cos b = (cos(a+b) + cos(a-b))/2``:

  ``C Lambda^2 = E_sym[1F1(d; d/2; -t(1+cW)/2)] - e^{-t}
  = E_sym[D(-t(1+cW)/2)] + e^{-t} E_W[2 sinh^2(t c W/2)]``,

  each term bounded by one in absolute value (``e^{-t} cosh(t c W) <= 1``),
  so the sum has the absolute accuracy (~1e-15) that the trig MSE needs
  beside a variance ``(1 - e^{-t})^2/2``, and relative accuracy at small
  ``t`` (the series of ``D`` at negative argument).

As ``q -> 0`` (``q = s`` or ``t``) the hyperbolic and trig ``C/V`` tend to
``(c^2 d - 1)/(d + 2)`` (``-1/(d+2)`` for orthogonal rows, ``c = 0``):
simplex coupling is worse than orthogonal there. Positive features gain at
first order: ``C/V -> c E[W]``.

Quadrature: ``E_W[h(W)]`` is a Gauss-Jacobi rule in ``W`` itself for the
weight ``W^{d-1} (1 - W)^{-1/2}`` on [0, 1] (Golub-Welsch), applied to
``h(W) (1 + W)^{-1/2}``, which is analytic on [0, 1] (the variable
``B = W^2`` would put a square root into the integrand). The number of
nodes grows with ``q |c|``, the rate of the exponential ``e^{q c W}`` in
the integrand.
"""

from __future__ import annotations

import numpy as np
from scipy import linalg, special

from . import hypergeometric as hg
from . import closed_form as cf
from ..validation import check_finite


_LN2 = np.log(2.0)
#: Largest (points x nodes) array evaluated at once.
_CHUNK_ELEMENTS = 1 << 18
#: Below this q the hyperbolic and trig C/V are their q -> 0 limit (exact to rounding).
_TINY = 1e-100


# ---------------------------------------------------------------------------
# OPRF
# ---------------------------------------------------------------------------


def _oprf_r_minus_1(rho):
    """``r* - 1 = -8 A*`` for ``rho = |u|^2/d >= 0``, without cancellation."""
    rho = np.asarray(rho, dtype=np.float64)
    big = np.sqrt((2.0 * rho + 1.0) ** 2 + 8.0 * rho)
    return ((12.0 * rho + 4.0 * rho**2) / (1.0 + big) + 2.0 * rho) / 2.0


def oprf_optimal_a(rho):
    r"""The variance-minimising OPRF parameter ``A*`` for ``rho = |x + y|^2 / d``.

    .. math:: A^* = \frac{1 - 2\rho - \sqrt{(2\rho + 1)^2 + 8\rho}}{16} \le 0,

    evaluated as ``-((12 rho + 4 rho^2)/(1 + S) + 2 rho)/16`` with
    ``S = sqrt((2 rho + 1)^2 + 8 rho)``, which keeps full relative accuracy
    as ``rho -> 0`` (where ``A* ~ -rho/2``). Vectorised; ``rho >= 0``.
    """
    rho = check_finite(rho, "rho")
    if np.any(rho < 0):
        raise ValueError("rho = |x + y|^2 / d must be >= 0")
    return (-_oprf_r_minus_1(rho) / 8.0)[()]


def oprf_optimal_a_from_geometry(geom):
    """``A*`` of :func:`oprf_optimal_a` at ``rho = s / d`` of a Geometry."""
    return oprf_optimal_a(np.asarray(geom.s) / np.asarray(geom.d))


def _oprf_log_g_terms(s, d, A):
    """``(g, r)`` with ``g = log(E f_A^2 / SM^2)``; ``A=None`` means ``A*``."""
    s = np.asarray(s, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    rm1 = _oprf_r_minus_1(s / d) if A is None else -8.0 * np.asarray(A, dtype=np.float64)
    r = 1.0 + rm1
    g = (d / 2.0) * np.log1p(rm1**2 / (4.0 * r)) + s / r
    return g, r


def oprf_log_variance_from_geometry(geom, A=None):
    r"""``log V_A``, the variance of one OPRF term ``f_A(w, x) f_A(w, y)``.

    ``V_A = SM^2 expm1(g)`` with ``g`` of the module notes (a sum of two
    non-negative terms, so no cancellation); ``A=None`` uses ``A*`` of each
    point. ``-inf`` where ``V_A = 0`` (``s = 0`` and ``A = 0``).
    """
    g, _ = _oprf_log_g_terms(geom.s, geom.d, A)
    with np.errstate(divide="ignore"):
        out = -2.0 * geom.half_sq + geom.s + _log_expm1(g)
    return np.asarray(out)[()]


def _log_expm1(a):
    """``log(e^a - 1)`` for ``a >= 0`` (``-inf`` at 0), overflow-free."""
    a = np.asarray(a, dtype=np.float64)
    small = a <= 30.0
    with np.errstate(divide="ignore", under="ignore"):
        return np.where(small, np.log(np.expm1(np.where(small, a, 1.0))),
                        a + np.log1p(-np.exp(-np.where(small, 31.0, a))))


def _log_neg_expm1_neg(a):
    """``log(1 - e^{-a})`` for ``a >= 0`` (``-inf`` at 0)."""
    with np.errstate(divide="ignore"):
        return np.log(-np.expm1(-np.asarray(a, dtype=np.float64)))


def _log_2sinh2(a):
    """``log(2 sinh(a)^2)`` for ``a >= 0`` (``-inf`` at 0), overflow-free."""
    a = np.asarray(a, dtype=np.float64)
    # sinh a = e^a (1 - e^{-2a}) / 2
    return 2.0 * (a + _log_neg_expm1_neg(2.0 * a)) - _LN2


# ---------------------------------------------------------------------------
# Rows at a cosine c (simplex: -1/(d-1)): quadrature over W = sqrt(B), B ~ Beta(d/2, 1/2)
# ---------------------------------------------------------------------------


_RULE_CACHE: dict = {}


def _jacobi_rule_01(n, dim):
    """Gauss rule on [0, 1] for the weight ``W^{dim-1} (1-W)^{-1/2}``.

    Returns ``(W, log_weights)`` with the weights *times* ``(1 + W)^{-1/2}``
    normalised to sum to one, so that ``sum exp(log_w) h(W) = E h(W)`` for
    ``W = sqrt(B)``, ``B ~ Beta(dim/2, 1/2)``. Golub-Welsch on the Jacobi
    matrix of ``(1-x)^a (1+x)^b``, ``a = -1/2``, ``b = dim - 1`` (monic
    recurrence), ``x = 2W - 1``; accurate for the large ``b`` of high
    dimensions. (:func:`rfkernels.numerics.hypergeometric._jacobi_rule` serves the
    symmetric weight ``(1-u^2)^alpha`` only.)
    """
    key = (n, dim)
    rule = _RULE_CACHE.get(key)
    if rule is None:
        a, b = -0.5, dim - 1.0
        k = np.arange(n, dtype=np.float64)
        ab = a + b
        diag = (b * b - a * a) / ((2.0 * k + ab) * (2.0 * k + ab + 2.0))
        kk = k[1:]
        off2 = (4.0 * kk * (kk + a) * (kk + b) * (kk + ab)
                / ((2.0 * kk + ab) ** 2 * (2.0 * kk + ab + 1.0) * (2.0 * kk + ab - 1.0)))
        nodes, vecs = linalg.eigh_tridiagonal(diag, np.sqrt(off2))
        w = np.clip((1.0 + nodes) / 2.0, 0.0, 1.0)
        with np.errstate(divide="ignore"):
            log_w = 2.0 * np.log(np.abs(vecs[0])) - 0.5 * np.log1p(w)
        log_w -= special.logsumexp(log_w)
        rule = (w, log_w)
        if len(_RULE_CACHE) > 128:
            _RULE_CACHE.clear()
        _RULE_CACHE[key] = rule
    return rule


#: Most Gauss nodes built (Golub-Welsch holds an n x n eigenvector matrix: 32 MiB).
MAX_NODES = 2048


def _n_nodes(rate):
    """Nodes for ``E_W`` of an integrand growing like ``e^{rate W}`` (rate = q|c|).

    ``24 + rate/2 + 6 sqrt(rate)``: measured to reach full double accuracy
    against mpmath for rate up to 1e3 (tests/test_beyond_theory.py).
    """
    rate = float(rate)
    n = int(np.ceil(24.0 + 0.5 * rate + 6.0 * np.sqrt(rate)))
    if n > MAX_NODES:
        raise OverflowError(
            f"the simplex quadrature would need {n} nodes: |x ± y|^2 |c| = {rate:.4g} (c the rows' "
            f"cosine, -1/(d - 1) for simplex blocks) is "
            f"beyond the range of the exact simplex theory (at most about 3300)")
    return 8 * ((n + 7) // 8)  # few distinct rules: the cache stays small


def _groups(q, d, cosine):
    """Yield ``(dim, index array)`` chunks: one dimension, similar q, bounded size."""
    for dim in np.unique(d):
        idx = np.flatnonzero(d == dim)
        idx = idx[np.argsort(q[idx], kind="stable")]
        start = 0
        while start < idx.size:
            # at most _CHUNK_ELEMENTS (points x nodes), n from the largest q of this d
            stop = idx.size
            n = _n_nodes(q[idx[stop - 1]] * abs(cosine(float(dim))))
            per = max(1, _CHUNK_ELEMENTS // n)
            if stop - start > per:
                stop = start + per
            yield float(dim), idx[start:stop]
            start = stop


def _logsumexp_rows(x, axis=-1):
    with np.errstate(divide="ignore", invalid="ignore"):
        return special.logsumexp(x, axis=axis)


_COEF_CACHE: dict = {}


def _log_1f1_coefficients(dim, n):
    """``log((d)_k / ((d/2)_k k!))``, k < n: the Taylor coefficients of 1F1(d; d/2; .)."""
    key = (dim, n)
    coef = _COEF_CACHE.get(key)
    if coef is None:
        k = np.arange(n, dtype=np.float64)
        b = dim / 2.0
        coef = (special.gammaln(dim + k) - special.gammaln(dim) - special.gammaln(b + k)
                + special.gammaln(b) - special.gammaln(k + 1.0))
        if len(_COEF_CACHE) > 64:
            _COEF_CACHE.clear()
        _COEF_CACHE[key] = coef
    return coef


#: Width (in x) of the bins of :func:`_log_scaled_1f1`: values within a bin
#: differ by at most e^{2 * 150} from its largest, far from underflow.
_BIN = 150.0


def _log_scaled_1f1(x, dim):
    """``log(e^{-2x} 1F1(d; d/2; x))`` for ``x >= 0``, any shape.

    The positive Taylor series by Horner's rule in ``x / sigma``, coefficients
    scaled by ``sigma^k`` and by their largest value (``sigma`` the largest x
    of a bin of width 150, so nothing over- or underflows): one multiply-add
    per term and point, against a ``logaddexp`` per term in
    :func:`rfkernels.numerics.hypergeometric._log_scaled_1f1_2b_b` (same series, same
    number of terms): faster (docs/performance.md) and closer to 50-digit
    mpmath (largest absolute log error 1.8e-12 against 1.0e-10 at x in
    [1e-6, 4999], d in {2, 3, 65};
    ``tests/test_beyond_theory.py::test_log_scaled_1f1_against_mpmath``
    asserts below 5e-12). Beyond ``X_ASYMPTOTIC`` the leading
    asymptotic term, as :func:`rfkernels.numerics.hypergeometric.log_neg_chi_diff` does.
    """
    x = np.asarray(x, dtype=np.float64)
    flat = x.ravel()
    out = np.zeros(flat.shape)  # x = 0: log(1) = 0
    big = flat > hg.X_ASYMPTOTIC
    if np.any(big):
        xb = flat[big]
        out[big] = (special.gammaln(dim / 2.0) - special.gammaln(dim) - xb
                    + (dim / 2.0) * np.log(xb))
    todo = np.flatnonzero((flat > 0) & ~big)
    todo = todo[np.argsort(flat[todo])]
    while todo.size:
        sigma = flat[todo[-1]]
        first = np.searchsorted(flat[todo], sigma - _BIN)
        idx, todo = todo[first:], todo[:first]
        n = hg.n_terms(2.0 * sigma)
        log_c = _log_1f1_coefficients(dim, n) + np.arange(n) * np.log(sigma)
        top = log_c.max()
        with np.errstate(under="ignore"):
            coef = np.exp(log_c - top)
        w = flat[idx] / sigma
        acc = np.zeros(idx.size)
        for c in coef[::-1]:
            acc = acc * w + c
        out[idx] = np.log(acc) + top - 2.0 * flat[idx]
    return out.reshape(x.shape)


def _log_neg_d(x, dim):
    """``log(-D(x))``, ``D(x) = 1F1(d; d/2; x) - e^{2x} <= 0``, for ``x >= 0``, any shape.

    :func:`rfkernels.numerics.hypergeometric.log_neg_chi_diff` (its cancellation-free
    series) for ``x <= 10``; beyond, ``-D = e^{2x} (1 - S)`` with
    ``S = e^{-2x} 1F1`` from :func:`_log_scaled_1f1` (the same formula as
    there, with the faster series).
    """
    x = np.asarray(x, dtype=np.float64)
    out = np.empty(x.shape)
    small = x <= 10.0
    out[small] = hg.log_neg_chi_diff(x[small], dim)
    xl = x[~small]
    out[~small] = 2.0 * xl + np.log(-np.expm1(np.minimum(_log_scaled_1f1(xl, dim), -1e-300)))
    return out


def _quiet(fn):
    """Run ``fn`` with log(0) = -inf and underflow to 0 expected (not warnings)."""

    def wrapped(*args):
        with np.errstate(divide="ignore", under="ignore"):
            return fn(*args)

    wrapped.__doc__ = fn.__doc__
    return wrapped


@_quiet
def _block_cov_exp(q, dim, c):
    """``log(-C/Lambda^2)`` for one exponential (positive, OPRF), q = s > 0 (flat arrays), cosine c < 0."""
    w, log_w = _jacobi_rule_01(_n_nodes(np.max(q) * abs(c)), dim)
    qq = q[:, None]
    tw = qq * (1.0 + c * w) / 2.0
    lnd = _log_neg_d(tw, dim)
    part_d = _logsumexp_rows(log_w + lnd)
    part_e = q + _logsumexp_rows(log_w + _log_neg_expm1_neg(qq * abs(c) * w))
    return np.logaddexp(part_d, part_e)


@_quiet
def _block_cov_cosh(q, dim, c):
    """``(log|C/Lambda^2|, sign C)`` for a cosh pair (hyperbolic), q = s > 0, cosine c."""
    w, log_w = _jacobi_rule_01(_n_nodes(np.max(q) * abs(c)), dim)
    qq = q[:, None]
    t_plus = qq * (1.0 + c * w) / 2.0
    t_minus = qq * (1.0 - c * w) / 2.0
    lnd = np.logaddexp(_log_neg_d(t_plus, dim), _log_neg_d(t_minus, dim)) - _LN2
    l_neg = _logsumexp_rows(log_w + lnd)  # log E_sym[-D]
    l_pos = q + _logsumexp_rows(log_w + _log_2sinh2(qq * abs(c) * w / 2.0))
    hi = np.maximum(l_neg, l_pos)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_abs = hi + _log_neg_expm1_neg(np.abs(l_pos - l_neg))
    sign = np.sign(l_pos - l_neg)
    # where the two parts exceed e^s, combine the unsplit form instead
    direct = np.logaddexp(l_neg, l_pos) > q
    if np.any(direct):
        qd = qq[direct]
        tp, tm = t_plus[direct], t_minus[direct]
        cw = c * w * qd
        terms = np.logaddexp(cw + _log_scaled_1f1(tp, dim), -cw + _log_scaled_1f1(tm, dim)) - _LN2
        big_l = _logsumexp_rows(log_w + terms)  # log E_sym[e^{-s} 1F1(t)]
        with np.errstate(divide="ignore"):
            log_abs[direct] = q[direct] + np.log(np.abs(np.expm1(big_l)))
        sign[direct] = np.sign(big_l)
    return log_abs, sign


@_quiet
def _block_cov_cos(q, dim, c):
    """``C Lambda^2`` (linear, absolute accuracy ~1e-15) for a cosine (trig), q = t > 0, cosine c."""
    w, log_w = _jacobi_rule_01(_n_nodes(np.max(q) * abs(c)), dim)
    qq = q[:, None]
    d_plus = hg.chi_diff_neg(qq * (1.0 + c * w) / 2.0, dim)
    d_minus = hg.chi_diff_neg(qq * (1.0 - c * w) / 2.0, dim)
    weights = np.exp(log_w)
    part_d = ((d_plus + d_minus) / 2.0) @ weights
    part_s = np.exp(-qq + log_w + _log_2sinh2(qq * abs(c) * w / 2.0)).sum(axis=1)
    return part_d + part_s


def _block_cov_ratio(q, d, form, cosine, log_v_over):
    """``C / V`` at each point (flat arrays), V over its prefactor given as a log; rows at ``cosine(d)``."""
    ratio = np.zeros(q.shape)
    live = q > 0
    if form.symmetric:
        tiny = live & (q < _TINY)
        cc = cosine(d[tiny])
        ratio[tiny] = (cc**2 * d[tiny] - 1.0) / (d[tiny] + 2.0)
        live &= ~tiny
    for dim, idx in _groups(np.where(live, q, 0.0), d, cosine):
        idx = idx[live[idx]]
        if idx.size == 0:
            continue
        qi, c = q[idx], cosine(dim)
        if not form.symmetric:
            ratio[idx] = -np.exp(_block_cov_exp(qi, dim, c) - log_v_over[idx])
        elif form.on_sum:
            log_abs, sign = _block_cov_cosh(qi, dim, c)
            ratio[idx] = sign * np.exp(log_abs - log_v_over[idx])
        else:
            ratio[idx] = _block_cov_cos(qi, dim, c) * np.exp(-log_v_over[idx])
    return ratio


def log_independent_pair_term(q, d, symmetric, cosine):
    r"""log of the pair term of two rows of a block with independent chi(d) norms (over :math:`\Lambda^2`).

    Terms on :math:`w\cdot(x + y)` at ``q`` = :math:`|x + y|^2 > 0` (flat
    array), one integer ``d``, rows at the cosine ``c = cosine(d)``:
    :math:`\log {}_1F_1(d; d/2; q/2)` for orthogonal rows (c = 0);
    :math:`\log E_W\,{}_1F_1(d; d/2; q(1 \pm cW)/2)` otherwise (the
    sum for one exponential, positive and OPRF features, whose pair term
    does not depend on A; the mean over both signs where ``symmetric``, a
    cosh pair; module notes). Computed directly, not as :math:`e^q` plus the
    covariance, so it keeps its accuracy where the covariance cancels
    :math:`e^q` (large q).
    """
    q = np.asarray(q, dtype=np.float64)
    c = cosine(d)
    if c == 0.0:
        return q + _log_scaled_1f1(q / 2.0, d)
    w, log_w = _jacobi_rule_01(_n_nodes(np.max(q) * abs(c)), d)
    qq = q[:, None]
    tp = qq * (1.0 + c * w) / 2.0
    terms = 2.0 * tp + _log_scaled_1f1(tp, d)
    if symmetric:
        tm = qq * (1.0 - c * w) / 2.0
        terms = np.logaddexp(terms, 2.0 * tm + _log_scaled_1f1(tm, d)) - _LN2
    return _logsumexp_rows(log_w + terms)


def log_block_covariance_from_geometry(geom, form, cosine):
    r"""``(log|C|, sign C)``: covariance of two terms of one block whose rows are at a cosine.

    ``form`` the term's :class:`~rfkernels.numerics.term_form.TermForm`
    (one exponential's is the positive one for every A of ``quadratic``);
    ``cosine(d)`` the cosine of the block's rows, below 0 (simplex blocks:
    ``-1/(d-1)``, ``d >= 2``), by quadrature. See the module notes for the
    formulas. ``(-inf, 0)`` where ``C = 0`` (``q = 0``).
    """
    d, q, pref2 = form.arrays(geom)
    shape = q.shape
    qf, df = q.ravel(), d.ravel()
    log_abs = np.full(qf.shape, -np.inf)
    sign = np.zeros(qf.shape)
    for dim, idx in _groups(np.where(qf > 0, qf, 0.0), df, cosine):
        idx = idx[qf[idx] > 0]
        if idx.size == 0:
            continue
        qi, c = qf[idx], cosine(dim)
        if not form.symmetric:
            log_abs[idx], sign[idx] = _block_cov_exp(qi, dim, c), -1.0
        elif form.on_sum:
            log_abs[idx], sign[idx] = _block_cov_cosh(qi, dim, c)
        else:
            val = _block_cov_cos(qi, dim, c)
            with np.errstate(divide="ignore"):
                log_abs[idx], sign[idx] = np.log(np.abs(val)), np.sign(val)
    log_abs = log_abs.reshape(shape) + pref2.reshape(shape)
    return log_abs[()], sign.reshape(shape)[()]


# ---------------------------------------------------------------------------
# The exact MSE
# ---------------------------------------------------------------------------


def _log_v_over(form, q, g=None):
    """log of V over its prefactor (``Lambda^2`` or ``Lambda^-2``), q > 0 where used; ``g`` of A|w|^2."""
    qs = np.where(q > 0, q, 1.0)
    if form.quadratic:
        out = q + _log_expm1(g)
    elif not form.symmetric:
        out = qs + _log_expm1(qs)
    elif form.on_sum:
        out = 2.0 * _log_expm1(qs) - _LN2
    else:
        out = 2.0 * _log_neg_expm1_neg(qs) - _LN2
    if not form.quadratic:
        out = np.where(q > 0, out, -np.inf)
    return out


def log_mse(geom, m, form, cosine, A):
    r"""log of the exact MSE with chi(d) norms: OPRF features (any rows), and any term on simplex blocks.

    Nothing is checked here: :func:`rfkernels.theory.exact_mse`
    validates (into an :class:`rfkernels.estimators.Estimator`) and the
    registry's kinds call this with what they trust.

    Parameters
    ----------
    geom : rfkernels.theory.Geometry
        Invariants of the pair(s).
    m : ndarray of int
        Projections (>= 1, broadcast with the batch); rows in blocks come in
        blocks of ``d``, the last one partial (a partial simplex block: its
        first vertices).
    form : rfkernels.numerics.term_form.TermForm
        The term: ``quadratic`` (OPRF, the parameter ``A``) with any rows;
        otherwise rows at a non-zero cosine (simplex blocks; the closed forms
        of :mod:`rfkernels.numerics.closed_form` serve independent and
        orthogonal rows).
    cosine : callable or None
        ``cosine(d)``, the cosine of two rows of a block (the ensemble's
        :attr:`~rfkernels.estimators.registry.Ensemble.cosine`: 0 orthogonal,
        ``-1/(d-1)`` simplex, d >= 2); None: independent rows (no blocks).
    A : None, float or ndarray
        The parameter of ``quadratic`` terms (< 1/8), broadcast against the
        batch; ``None`` means the optimal ``A*`` of each pair. Unused otherwise.

    Returns
    -------
    ndarray
        The log of the MSE, batch shape.

    Raises
    ------
    ValueError
        Orthogonal rows with a term on ``x - y`` (the closed forms serve it).
    OverflowError
        ``|x ± y|^2 |c|`` beyond about 3300 (the quadrature).
    FloatingPointError
        ``1 + (P/m) C/V`` rounded to <= 0.

    Notes
    -----
    ``MSE = (m V + P C)/m^2``: for OPRF, ``V = V_A`` and ``C`` the
    positive-feature covariance (``Lambda^2 D(s/2)`` orthogonal, the simplex
    integral for simplex); for simplex, ``V`` is the iid variance of the term
    and ``C`` the simplex pair covariance (module notes).

    Accuracy against mpmath (``tests/_mpmath_beyond.py``, 40 digits, the
    simplex integral by ``mpmath.quad``): the ``*_against_mpmath`` tests of
    ``tests/test_beyond_theory.py`` assert
    ``|log got - log ref| <= 1e-9`` for ``|x ± y|^2`` in [1e-8, 1e3],
    d in {2, 3, 4, 16, 65, 256, 1024} (and d = 1 for OPRF iid/orthogonal),
    m in {1, 2, 3, d, 2d + 1}. The worst errors they print: simplex positive
    4.4e-12, hyperbolic 2.3e-12, trig 2.4e-13, OPRF (A*) 5.3e-12; OPRF iid
    and orthogonal 2.3e-13 (A*, -0.1, 0.05).
    """
    d, q, pref2 = form.arrays(geom)
    # C/V depends on the geometry (and A), not on m: evaluate it on that shape only
    point_shape = np.broadcast_shapes(q.shape, np.shape(A) if A is not None else ())
    d, q, pref2 = (np.broadcast_to(a, point_shape) for a in (d, q, pref2))
    a_arr = None if A is None else np.broadcast_to(A, point_shape)
    g = _oprf_log_g_terms(q, d, a_arr)[0] if form.quadratic else None
    log_v_over = _log_v_over(form, q, g)
    pairs = cf.pairs_in_blocks(m, np.asarray(geom.d).astype(np.int64), blocked=cosine is not None)
    ratio = np.zeros(point_shape)
    if cosine is None:
        pass  # independent rows: no pair term
    elif cf.orthogonal_rows(cosine, d):  # one exponential's covariance Lambda^2 D(s/2)
        if not form.on_sum:
            raise ValueError("orthogonal rows with a term on w.(x - y): its exact MSE is "
                             "rfkernels.numerics.closed_form.log_mse_chi")
        live = q > 0
        with np.errstate(divide="ignore", under="ignore", invalid="ignore"):
            lnd = hg.log_neg_chi_diff(np.where(live, q, 0.0) / 2.0, d)
            ratio = np.where(live, -np.exp(lnd - log_v_over), 0.0)
    elif np.any(pairs > 0):
        ratio = _block_cov_ratio(q.ravel(), d.ravel(), form, cosine,
                                 log_v_over.ravel()).reshape(point_shape)
    rel = pairs / m * ratio  # (P/m) C/V >= -1 exactly (the MSE is a variance)
    if np.any(rel <= -1.0):
        bad = int(np.count_nonzero(rel <= -1.0))
        raise FloatingPointError(
            f"exact MSE: 1 + (P/m) C/V rounded to <= 0 at {bad} point(s); "
            "the block covariance cancels the variance beyond float64's resolution")
    with np.errstate(divide="ignore"):
        out = pref2 + log_v_over - np.log(m) + np.log1p(rel)
    out = np.broadcast_to(out, np.broadcast_shapes(point_shape, m.shape, pairs.shape))
    return out
