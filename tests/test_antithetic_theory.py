"""Antithetic-norm pair terms (issue 25, numerics) against mpmath.

The reference integrates over t (p = Phi(t)) at 30 digits, each chi-square
quantile by mpmath's root finder on the regularised incomplete gamma
function; a few points (each takes about a second).
"""

import math

import mpmath as mp
import numpy as np
import pytest
from scipy import special

from rfkernels.numerics import antithetic as an


def _quantiles(b, p):
    """(lower, upper): x with P(b, x/2) = p and Q(b, x/2) = p (chi-square with 2b dof).

    Newton's iteration from SciPy's float64 quantiles; the residual is checked.
    """
    out = []
    for upper, guess in ((False, special.gammaincinv(float(b), float(p))),
                         (True, special.gammainccinv(float(b), float(p)))):
        def f(y, upper=upper):  # in logs: x = e^y, log P or log Q minus log p
            x = mp.exp(y)
            a, c = (x / 2, mp.inf) if upper else (0, x / 2)
            return mp.log(mp.gammainc(b, a, c, regularized=True)) - mp.log(p)
        y = mp.findroot(f, mp.log(2 * mp.mpf(guess)), tol=mp.mpf(10) ** -40, verify=False)
        assert abs(f(y)) <= mp.mpf(10) ** -24, (p, upper)
        out.append(mp.exp(y))
    return out


def _reference(q, d, sign):
    """E[0F1(; d/2; sign S q/4)] - e^{sign q}, at 30 digits."""
    with mp.workdps(30):
        b = mp.mpf(d) / 2
        q = mp.mpf(q)

        def f(t):
            p = mp.ncdf(t)
            lo, hi = _quantiles(b, p)
            return mp.hyp0f1(b, sign * (lo + hi) * q / 4) * mp.npdf(t)

        peak = -mp.sqrt(q) if sign > 0 else 0
        val = 2 * mp.quad(f, [-30, peak - 6, peak, peak + 3, 0] if sign > 0 and q > 9 else [-30, -8, -3, 0])
        return val - mp.e ** (sign * q)


@pytest.mark.parametrize("q, d, sign", [
    (2.25, 4, 1), (1e-4, 16, 1), (0.5, 3, 1), (30.0, 16, 1), (1.0, 16, -1), (10.0, 16, -1), (1e-3, 2, -1),
])
def test_pair_difference_against_mpmath(q, d, sign):
    got = float(an.pair_difference(q, d, sign))
    ref = float(_reference(q, d, sign))
    assert abs(got - ref) <= 1e-9 * abs(ref), (got, ref)


def test_example_of_math_md():
    # d = 4, |u|^2 = 2.25: iid 9.488, orthogonal 7.195, antithetic 6.0275
    assert math.exp(float(an.log_pair_term(2.25, 4))) == pytest.approx(6.0275, abs=5e-5)


def test_log_pair_term_is_the_difference_plus_the_independent_value():
    q = np.array([0.3, 4.0, 25.0])
    for d in (3, 64):
        direct = np.exp(an.log_pair_term(q, d))
        assert np.allclose(direct, an.pair_difference(q, d) + np.exp(q), rtol=1e-10, atol=0)


def test_refuses_out_of_range():
    with pytest.raises(ValueError, match="q must be <= 800"):
        an.log_pair_term(900.0, 4)
    with pytest.raises(ValueError, match="q must be >= 0"):
        an.pair_difference(-1.0, 4)


def _oprf_reference(q, d, A):
    """log E[(1-4A)^d e^{2AS} 0F1(; d/2; (1-4A) S q/4)], at 30 digits."""
    with mp.workdps(30):
        b, q, A = mp.mpf(d) / 2, mp.mpf(q), mp.mpf(A)

        def f(t):
            lo, hi = _quantiles(b, mp.ncdf(t))
            s = lo + hi
            return mp.exp(2 * A * s) * mp.hyp0f1(b, (1 - 4 * A) * s * q / 4) * mp.npdf(t)

        return mp.log((1 - 4 * A) ** d * 2 * mp.quad(f, [-30, -8, -3, 0]))


@pytest.mark.parametrize("q, d, A", [(2.0, 4, -0.1768), (0.5, 16, 0.05), (8.0, 16, -0.1768)])
def test_oprf_pair_term_against_mpmath(q, d, A):
    got = float(an.oprf_log_pair_term(q, d, A))
    assert abs(got - float(_oprf_reference(q, d, A))) <= 1e-9


def test_antithetic_lowers_the_oprf_pair_term_at_its_optimum():
    # against independent chi norms, whose orthogonal pair term is A-free: 1F1(d; d/2; q/2)
    from rfkernels.numerics import oprf_simplex as bt

    for d in (4, 16, 64):
        for q in (0.5, 8.0, 32.0):
            A = float(bt.oprf_optimal_a(q / d))
            independent = float(mp.log(mp.hyp1f1(d, d / 2, q / 2)))
            assert an.oprf_log_pair_term(q, d, A) < independent
    assert float(an.oprf_log_pair_term(2.25, 4, 0.0)) == float(an.log_pair_term(2.25, 4))


@pytest.mark.parametrize("q, d", [(40.0, 16), (16.0, 64)])
def test_trig_antithetic_can_raise_the_pair_term(q, d):
    """Where benchmarks/antithetic_trig_sign.py finds antithetic norms worse than independent ones."""
    got = float(an.pair_difference(q, d, -1))
    ref = _reference(q, d, -1)
    assert abs(got - float(ref)) <= max(1e-8 * abs(float(ref)), 1e-13)  # trig: absolute ~1e-14
    independent = mp.hyp1f1(d, mp.mpf(d) / 2, -mp.mpf(q) / 2)
    assert ref + mp.e ** (-q) - independent > 0 and got + math.exp(-q) - float(independent) > 0


def _simplex_reference(q, d, sign, symmetric):
    """E[0F1(; d/2; sign L q/4)] - e^{sign q}, L = S + 2 gamma R1 R2 (and its mirror), at 30 digits."""
    with mp.workdps(30):
        b, q = mp.mpf(d) / 2, mp.mpf(q)
        gamma = -1 / mp.mpf(d - 1)

        def f(t):
            lo, hi = _quantiles(b, mp.ncdf(t))
            s, p = lo + hi, mp.sqrt(lo * hi)
            lengths = (s + 2 * gamma * p, s - 2 * gamma * p) if symmetric else (s + 2 * gamma * p,)
            return sum(mp.hyp0f1(b, sign * L * q / 4) for L in lengths) / len(lengths) * mp.npdf(t)

        return 2 * mp.quad(f, [-30, -8, -3, 0]) - mp.e ** (sign * q)


@pytest.mark.parametrize("q, d, sign, symmetric", [
    (1.5, 4, 1, False), (1e-3, 16, 1, False), (0.7, 3, 1, True), (2.0, 8, -1, True), (1e-2, 5, -1, True),
])
def test_simplex_pair_difference_against_mpmath(q, d, sign, symmetric):
    """Rows at the simplex cosine -1/(d-1): |w1 +- w2|^2 = S +- 2 gamma R1 R2 (hyperbolic, trig: both)."""
    got = float(an.pair_difference(q, d, sign, -1.0 / (d - 1), symmetric))
    ref = float(_simplex_reference(q, d, sign, symmetric))
    assert abs(got - ref) <= 1e-9 * abs(ref), (got, ref)
    if sign > 0 and q > 0.1:
        log_got = float(an.log_pair_term(q, d, -1.0 / (d - 1), symmetric))
        assert abs(math.exp(log_got) - (ref + math.exp(q))) <= 1e-12 * math.exp(q)


@pytest.mark.parametrize("kind, d, m, q", [("positive", 4, 7, 1.2), ("trig", 5, 12, 3.0),
                                           ("hyperbolic", 3, 4, 0.4)])
def test_exact_mse_against_mpmath(kind, d, m, q):
    """theory.exact_mse(norms='antithetic') = (m V + P_ind C + P_c C_anti) / m^2, all at 30 digits."""
    from rfkernels import theory

    x = np.zeros(d)
    y = np.zeros(d)
    x[0] = y[0] = math.sqrt(q) / 2  # x = y: |x + y|^2 = q
    if kind == "trig":  # x = -y: |x - y|^2 = q
        y = -y
    got = float(theory.exact_mse(x, y, m, kind, ensemble="orthogonal", norms="antithetic"))
    with mp.workdps(30):
        qm = mp.mpf(q)
        half_sq = qm / 4
        full, rest = divmod(m, d)
        pairs = full * d * (d - 1) + rest * (rest - 1)
        coupled = full * 2 * (d // 2) + 2 * (rest // 2)
        if kind == "trig":
            pref, var = mp.e ** (2 * half_sq), (1 - mp.e ** -qm) ** 2 / 2
            c_ind = mp.hyp1f1(d, mp.mpf(d) / 2, -qm / 2) - mp.e ** -qm
            c_anti = _reference(q, d, -1)
        else:
            pref = mp.e ** (-2 * half_sq)
            var = mp.e ** qm * mp.expm1(qm) if kind == "positive" else mp.expm1(qm) ** 2 / 2
            c_ind = mp.hyp1f1(d, mp.mpf(d) / 2, qm / 2) - mp.e ** qm
            c_anti = _reference(q, d, 1)
        ref = pref * (m * var + (pairs - coupled) * c_ind + coupled * c_anti) / m**2
    assert abs(got / float(ref) - 1.0) <= 1e-9, (got, float(ref))
