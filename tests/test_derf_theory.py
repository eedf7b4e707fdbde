"""Exact theory of dense-exponential random features (rfkernels.numerics.derf; issue 24).

References: 50-digit mpmath (closed forms, and quadrature of the defining
integrals where it is cheap), the existing FAVOR+ / OPRF theory, an
independent quadrature of the orthogonal pair term over the Haar law of two
orthogonal rows, and Monte Carlo of the literal estimator with the rows of
:func:`rfkernels.draw_projections`.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest
from scipy import special

import rfkernels
from rfkernels import theory
from rfkernels.numerics import derf

RTOL_MP = 1e-9


@pytest.fixture(autouse=True)
def _fifty_digits():
    """Every mpmath expression of this module at 50 digits (differences included)."""
    with mpmath.workdps(50):
        yield


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _random_case(rng, d, *, lam=(-0.3, 0.1), sv=(0.6, 1.4), scale=0.6):
    """A symmetric non-isotropic A (8A < I), a well-conditioned B1 and a pair x, y."""
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    A = Q @ np.diag(rng.uniform(*lam, d)) @ Q.T
    A = 0.5 * (A + A.T)
    U = np.linalg.qr(rng.normal(size=(d, d)))[0]
    V = np.linalg.qr(rng.normal(size=(d, d)))[0]
    B1 = U @ np.diag(rng.uniform(*sv, d)) @ V
    x = rng.normal(size=d) * scale / math.sqrt(d)
    y = rng.normal(size=d) * scale / math.sqrt(d)
    return A, B1, x, y


def _mp(arr):
    return mpmath.matrix(np.asarray(arr, dtype=np.float64).tolist())


def _mp_moments(x, y, p):
    """50-digit ``(log E f1^2 f2^2, log E f1 f2, x.y)`` from the float64 A, B1, B2 (C, D recomputed)."""
    d = p.d
    with mpmath.workdps(50):
        A, B1, B2 = _mp(p.A), _mp(p.B1), _mp(p.B2)
        X, Y, eye = _mp(x.reshape(d, 1)), _mp(y.reshape(d, 1)), mpmath.eye(d)
        m4, m8 = eye - 4 * A, eye - 8 * A
        C1 = -B1.T * mpmath.inverse(m4) * B1 / 2
        C2 = -B2.T * mpmath.inverse(m4) * B2 / 2
        log_d = mpmath.log(mpmath.det(m4)) / 4
        v = B1 * X + B2 * Y
        c = (X.T * C1 * X)[0] + (Y.T * C2 * Y)[0]
        log_m2 = 4 * log_d - mpmath.log(mpmath.det(m8)) / 2 + 2 * c + 2 * (v.T * mpmath.inverse(m8) * v)[0]
        log_mean = c + (v.T * mpmath.inverse(m4) * v)[0] / 2
        return log_m2, log_mean, (X.T * Y)[0]


def _features(W, x, B, C, p):
    """Literal f_k(w, x) = D exp(w^T A w + w^T B x + x^T C x) for rows W (..., d)."""
    return np.exp(p.log_D + np.einsum("...i,ij,...j->...", W, p.A, W) + W @ (B @ x) + x @ C @ x)


def _chi_radial(k, beta, q):
    """``int_0^inf r^k exp(-beta r^2/2 + q r) dr`` (k >= 0), NumPy, by the recurrence
    ``J_{k+1} = (k J_{k-1} + q J_k) / beta``."""
    j0 = np.sqrt(np.pi / (2 * beta)) * np.exp(q * q / (2 * beta)) * special.erfc(-q / np.sqrt(2 * beta))
    j1 = (1.0 + q * j0) / beta
    jm, jk = j0, j1
    for n in range(1, k):
        jm, jk = jk, (n * jm + q * jk) / beta
    return j0 if k == 0 else jk


def _pair_moment_disk(x, y, p, n=200):
    """E[f1 f2(w1) f1 f2(w2)] for two Haar-orthogonal chi(d) rows, d >= 3, by quadrature.

    (e1.v/|v|, e2.v/|v|) is uniform-sphere's first two coordinates: density
    Gamma(d/2)/(pi Gamma(d/2 - 1)) (1 - rho^2)^{(d-4)/2} on the disk; given
    them the radial integrals factorise. rho = sin(psi) (Gauss-Legendre in
    psi), trapezoid in the angle phi. Independent of the chi^2(2d) argument.
    """
    d, a = p.d, p.a
    beta = 1.0 - 4.0 * a
    v = p.B1 @ x + p.B2 @ y
    nv = np.linalg.norm(v)
    c = x @ p.C1 @ x + y @ p.C2 @ y
    norm_r = 2.0 ** (d / 2 - 1) * special.gamma(d / 2)  # chi(d) density normaliser
    t, w = np.polynomial.legendre.leggauss(n)
    psi, wpsi = (t + 1) * np.pi / 4, w * np.pi / 4
    phi = np.arange(2 * n) * (2 * np.pi / (2 * n))
    rho = np.sin(psi)[:, None]
    i1 = _chi_radial(d - 1, beta, nv * rho * np.cos(phi)) / norm_r
    i2 = _chi_radial(d - 1, beta, nv * rho * np.sin(phi)) / norm_r
    jac = (np.sin(psi) * np.cos(psi) ** (d - 3) * wpsi)[:, None] * (2 * np.pi / (2 * n))
    dens = special.gamma(d / 2) / (np.pi * special.gamma(d / 2 - 1))
    return beta**d * np.exp(2 * c) * dens * np.sum(jac * i1 * i2)


def _pair_moment_d2_mpmath(x, y, p):
    """d = 2: w1 = R1 (cos t, sin t), w2 = +-R2 (-sin t, cos t), chi(2) radii; 1-D mpmath quad in t."""
    with mpmath.workdps(50):
        beta = 1 - 4 * mpmath.mpf(p.a)
        B1, B2 = _mp(p.B1), _mp(p.B2)
        X, Y = _mp(x.reshape(2, 1)), _mp(y.reshape(2, 1))
        v = B1 * X + B2 * Y
        bx, by = B1 * X, B2 * Y
        c = -((bx.T * bx)[0] + (by.T * by)[0]) / (2 * beta)

        def j1(q):  # E_R[exp(2a R^2 + R q)] for R ~ chi(2)
            j0 = mpmath.sqrt(mpmath.pi / (2 * beta)) * mpmath.exp(q * q / (2 * beta)) \
                * mpmath.erfc(-q / mpmath.sqrt(2 * beta))
            return (1 + q * j0) / beta

        def f(t):
            q1 = mpmath.cos(t) * v[0] + mpmath.sin(t) * v[1]
            q2 = -mpmath.sin(t) * v[0] + mpmath.cos(t) * v[1]
            return j1(q1) * (j1(q2) + j1(-q2)) / 2

        pair = beta**2 * mpmath.exp(2 * c) * mpmath.quad(f, mpmath.linspace(0, 2 * mpmath.pi, 9)) / (2 * mpmath.pi)
        mean2 = mpmath.exp(2 * c + (v.T * v)[0] / beta)
        return pair - mean2


def _rel(got, ref):
    return abs((mpmath.mpf(float(got)) - ref) / ref)


# ---------------------------------------------------------------------------
# mpmath: second moment and iid MSE
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 3, 8])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_second_moment_and_iid_mse_against_mpmath(d, seed):
    rng = np.random.default_rng(1000 * d + seed)
    A, B1, x, y = _random_case(rng, d)
    p = derf.derf_params(A, B1, d=d)
    assert not p.is_oprf and not p.isotropic or d == 1
    log_m2, log_mean, xy = _mp_moments(x, y, p)
    got = derf.derf_log_second_moment(x, y, p)
    assert _rel(math.exp(got), mpmath.exp(log_m2)) < RTOL_MP
    # g = log(E f^2 / E[f]^2) against the 50-digit difference of logs
    g = derf.derf_log_moment_ratio(x, y, p)
    assert _rel(g, log_m2 - 2 * log_mean) < RTOL_MP
    for m in (1, 5, 64):
        ref = (mpmath.exp(log_m2) - mpmath.exp(2 * xy)) / m
        assert _rel(math.exp(derf.derf_log_mse(x, y, m, p)), ref) < RTOL_MP


def test_tiny_variance_is_not_cancelled():
    """E f^2 - SM^2 ~ 1e-12 SM^2 (A ~ 1e-7, B1 x + B2 y ~ 1e-6): the naive difference loses
    every digit in float64; g keeps them."""
    rng = np.random.default_rng(11)
    d = 3
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    A = Q @ np.diag([1e-7, -2e-7, 3e-8]) @ Q.T
    A = 0.5 * (A + A.T)
    B1 = np.eye(d) + 0.2 * rng.normal(size=(d, d))
    p = derf.derf_params(A, B1, d=d)
    x = rng.normal(size=d) * 0.5
    y = np.linalg.solve(p.B2, -p.B1 @ x) + 1e-6 * rng.normal(size=d)  # v = B1 x + B2 y ~ 1e-6
    log_m2, log_mean, xy = _mp_moments(x, y, p)
    ref = mpmath.exp(log_m2) - mpmath.exp(2 * log_mean)
    assert ref / mpmath.exp(2 * xy) < 1e-10
    assert _rel(math.exp(derf.derf_log_mse(x, y, 1, p)), ref) < 1e-8
    naive = math.exp(derf.derf_log_second_moment(x, y, p)) - math.exp(2 * x @ y)
    assert abs(naive - float(ref)) > 1e-6 * float(ref)  # the case is a real test


def test_second_moment_formula_by_mpmath_quadrature_d1():
    """d = 1: the defining integrals E[f1 f2] and E[f1^2 f2^2] by mpmath.quad (not the MGF formula)."""
    p = derf.derf_params(-0.17, 0.83, d=1)
    x, y = np.array([0.7]), np.array([-0.4])
    with mpmath.workdps(50):
        a, b1, b2 = mpmath.mpf(p.A[0, 0]), mpmath.mpf(p.B1[0, 0]), mpmath.mpf(p.B2[0, 0])
        X, Y = mpmath.mpf(x[0]), mpmath.mpf(y[0])
        c1, c2 = -b1**2 / (2 * (1 - 4 * a)), -b2**2 / (2 * (1 - 4 * a))
        dd = (1 - 4 * a) ** mpmath.mpf(0.25)

        def prod(w):
            return dd * mpmath.exp(a * w * w + w * b1 * X + c1 * X * X) \
                * dd * mpmath.exp(a * w * w + w * b2 * Y + c2 * Y * Y)

        mean = mpmath.quad(lambda w: prod(w) * mpmath.npdf(w), [-mpmath.inf, 0, mpmath.inf])
        m2 = mpmath.quad(lambda w: prod(w) ** 2 * mpmath.npdf(w), [-mpmath.inf, 0, mpmath.inf])
        assert abs(mean / mpmath.exp(X * Y) - 1) < 1e-14  # unbiased (derived B_key)
        assert _rel(math.exp(derf.derf_log_second_moment(x, y, p)), m2) < RTOL_MP
        assert _rel(math.exp(derf.derf_log_mse(x, y, 3, p)), (m2 - mean**2) / 3) < RTOL_MP


# ---------------------------------------------------------------------------
# reductions to FAVOR+ and OPRF
# ---------------------------------------------------------------------------


MS = (1, 2, 3, 4, 5, 7, 9, 13)  # m > d (stacked blocks) and m not a multiple of d


@pytest.mark.parametrize("d", [1, 3, 4])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
def test_reduces_to_favor_plus(d, ensemble):
    rng = np.random.default_rng(d)
    x, y = rng.normal(size=(6, d)) * 0.5, rng.normal(size=(6, d)) * 0.5
    for p in (derf.derf_params(0.0, np.eye(d), d=d), derf.derf_params(np.zeros((d, d)), 1.0, 1.0, d=d)):
        assert p.is_favor_plus and p.is_oprf
        for m in MS:
            got = np.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=ensemble == "orthogonal"))
            ref = theory.exact_mse(x, y, m, "positive", ensemble=ensemble)
            np.testing.assert_allclose(got, ref, rtol=1e-10)


@pytest.mark.parametrize("d", [1, 3, 4])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
@pytest.mark.parametrize("a", [-0.3, -0.05, 0.07])
def test_reduces_to_oprf(d, ensemble, a):
    rng = np.random.default_rng(d + 17)
    x, y = rng.normal(size=(6, d)) * 0.6, rng.normal(size=(6, d)) * 0.6
    b = math.sqrt(1.0 - 4.0 * a)
    given = [derf.derf_params(a, b * np.eye(d), d=d),              # B_key derived
             derf.derf_params(a * np.eye(d), b, b * np.eye(d), d=d)]  # A as an array, both B given
    for p in given:
        assert p.is_oprf and not p.is_favor_plus and p.a == a
        np.testing.assert_array_equal(p.B2, b * np.eye(d))
        for m in MS:
            got = np.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=ensemble == "orthogonal"))
            ref = theory.exact_mse(x, y, m, "oprf", ensemble=ensemble, A=a)
            np.testing.assert_allclose(got, ref, rtol=1e-10)


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
def test_saderf_form_is_oprf_on_the_transformed_pair(ensemble):
    """A = aI, B1 = sqrt(1-4a) Psi, B2 = sqrt(1-4a) Psi^-1 (Psi diagonal) is OPRF on (Psi x, Psi^-1 y):
    the orthogonal formula with B not a multiple of I against the existing OPRF theory."""
    d, a = 5, -0.12
    rng = np.random.default_rng(5)
    psi = rng.uniform(0.5, 2.0, d)
    b = math.sqrt(1 - 4 * a)
    p = derf.derf_params(a, b * np.diag(psi), b * np.diag(1 / psi), d=d)
    assert not p.is_oprf and p.isotropic
    x, y = rng.normal(size=(4, d)) * 0.5, rng.normal(size=(4, d)) * 0.5
    for m in (1, 3, 5, 8, 11):
        got = np.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=ensemble == "orthogonal"))
        ref = theory.exact_mse(x * psi, y / psi, m, "oprf", ensemble=ensemble, A=a)
        np.testing.assert_allclose(got, ref, rtol=1e-10)


# ---------------------------------------------------------------------------
# orthogonal, isotropic A, B not a multiple of I
# ---------------------------------------------------------------------------


def _isotropic_case(rng, d, a=-0.07, spread=0.3, scale=0.5):
    B1 = np.eye(d) + spread * rng.normal(size=(d, d))
    x, y = rng.normal(size=d) * scale, rng.normal(size=d) * scale
    return derf.derf_params(a, B1, d=d), x, y


def test_orthogonal_pair_covariance_d2_against_mpmath_quadrature():
    rng = np.random.default_rng(3)
    p, x, y = _isotropic_case(rng, 2)
    ref = _pair_moment_d2_mpmath(x, y, p)
    got = -math.exp(derf.derf_log_pair_covariance(x, y, p))
    assert _rel(got, ref) < RTOL_MP


@pytest.mark.parametrize("d, a", [(3, -0.07), (4, 0.05), (8, -0.2)])
def test_orthogonal_pair_covariance_against_disk_quadrature(d, a):
    rng = np.random.default_rng(40 + d)
    p, x, y = _isotropic_case(rng, d, a=a, scale=0.4)
    _, log_mean, _ = _mp_moments(x, y, p)
    ref = _pair_moment_disk(x, y, p) - math.exp(2 * float(log_mean))
    got = -math.exp(derf.derf_log_pair_covariance(x, y, p))
    assert abs(got / ref - 1) < 1e-9


def test_orthogonal_mse_against_mpmath_closed_form():
    """The final formula at 50 digits: (m V + P e^{2c}[1F1(d; d/2; sigma/2) - e^sigma]) / m^2."""
    rng = np.random.default_rng(8)
    d = 3
    p, x, y = _isotropic_case(rng, d, a=-0.15, scale=0.9)
    log_m2, log_mean, _ = _mp_moments(x, y, p)
    with mpmath.workdps(50):
        a = mpmath.mpf(p.a)
        v = _mp(p.B1) * _mp(x.reshape(d, 1)) + _mp(p.B2) * _mp(y.reshape(d, 1))
        sigma = (v.T * v)[0] / (1 - 4 * a)
        e2c = mpmath.exp(2 * log_mean - sigma)
        cov = e2c * (mpmath.hyp1f1(d, mpmath.mpf(d) / 2, sigma / 2) - mpmath.exp(sigma))
        var = mpmath.exp(log_m2) - mpmath.exp(2 * log_mean)
        for m in (2, 3, 4, 7):
            q, r = divmod(m, d)
            pairs = q * d * (d - 1) + r * (r - 1)
            ref = (m * var + pairs * cov) / m**2
            assert _rel(math.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=True)), ref) < RTOL_MP


@pytest.mark.parametrize("d, m, trials, seed", [(4, 6, 100_000, 124), (3, 5, 60_000, 10)])
def test_orthogonal_mse_against_monte_carlo(d, m, trials, seed):
    """The literal estimator with Haar-orthogonal chi rows (draw_projections): |z| < 4.

    Each trial takes ceil(m/d) consecutive independent blocks of one large
    draw and keeps its first m rows (the last block partial, as in
    draw_projections(m, d)). Tame: |B1 x + B2 y|^2 < 1.5 and no draw holds
    over 1% of the squared error. The iid theory must be far off (power)."""
    rng = np.random.default_rng(seed)
    B1 = np.eye(d) + 0.3 * rng.normal(size=(d, d))
    p = derf.derf_params(-0.05, B1, d=d)
    x, y = rng.normal(size=d) * 0.35, rng.normal(size=d) * 0.35
    v = p.B1 @ x + p.B2 @ y
    assert v @ v < 1.5
    nb = -(-m // d)
    W = rfkernels.draw_projections(trials * nb * d, d, ensemble="orthogonal", seed=seed)
    W = W.reshape(trials, nb * d, d)[:, :m, :]
    est = (_features(W, x, p.B1, p.C1, p) * _features(W, y, p.B2, p.C2, p)).mean(axis=1)
    sq = (est - math.exp(x @ y)) ** 2
    mc, se = sq.mean(), sq.std(ddof=1) / math.sqrt(trials)
    assert sq.max() / sq.sum() < 1e-2  # tame tail
    exact = math.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=True))
    iid = math.exp(derf.derf_log_mse(x, y, m, p, orthogonal_blocks=False))
    assert abs(mc - exact) / se < 4
    assert abs(mc - iid) / se > 10


def test_orthogonal_gain_reduces_variance():
    """Cov <= 0: orthogonal never worse than iid; equal for m = 1 and at d = 1."""
    rng = np.random.default_rng(9)
    p, x, y = _isotropic_case(rng, 5)
    xs, ys = rng.normal(size=(20, 5)) * 0.7, rng.normal(size=(20, 5)) * 0.7
    for m in (2, 5, 12):
        orth = derf.derf_log_mse(xs, ys, m, p, orthogonal_blocks=True)
        iid = derf.derf_log_mse(xs, ys, m, p)
        assert np.all(orth <= iid) and np.any(orth < iid - 1e-3)
    np.testing.assert_array_equal(derf.derf_log_mse(xs, ys, 1, p, orthogonal_blocks=True),
                                  derf.derf_log_mse(xs, ys, 1, p))
    p1 = derf.derf_params(-0.1, 0.7, d=1)
    np.testing.assert_array_equal(
        derf.derf_log_mse(xs[:, :1], ys[:, :1], 4, p1, orthogonal_blocks=True),
        derf.derf_log_mse(xs[:, :1], ys[:, :1], 4, p1))


# ---------------------------------------------------------------------------
# B_key derivation
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 3, 6])
def test_derived_key_satisfies_the_identity(d):
    rng = np.random.default_rng(60 + d)
    A, B1, _, _ = _random_case(rng, d)
    p = derf.derf_params(A, B1, d=d)
    prod = p.B1.T @ np.linalg.solve(np.eye(d) - 4 * p.A, p.B2)
    np.testing.assert_allclose(prod, np.eye(d), atol=1e-13)
    assert p.identity_residual < 1e-13
    # given explicitly, the same B_key passes; C_k and D as defined
    q = derf.derf_params(A, B1, p.B2, d=d)
    np.testing.assert_allclose(q.C2, -0.5 * p.B2.T @ np.linalg.solve(np.eye(d) - 4 * A, p.B2), rtol=1e-12)
    assert q.log_D == pytest.approx(0.25 * np.linalg.slogdet(np.eye(d) - 4 * A)[1], rel=1e-12)


def test_derived_key_is_unbiased_by_monte_carlo():
    d, n = 3, 400_000
    rng = np.random.default_rng(77)
    A, B1, x, y = _random_case(rng, d, scale=0.8)
    p = derf.derf_params(A, B1, d=d)
    W = rfkernels.draw_projections(n, d, ensemble="iid", seed=78)
    vals = _features(W, x, p.B1, p.C1, p) * _features(W, y, p.B2, p.C2, p)
    z = (vals.mean() - math.exp(x @ y)) / (vals.std(ddof=1) / math.sqrt(n))
    assert abs(z) < 4
    # and its variance is the exact one (m = 1)
    sq = (vals - math.exp(x @ y)) ** 2
    zv = (sq.mean() - math.exp(derf.derf_log_mse(x, y, 1, p))) / (sq.std(ddof=1) / math.sqrt(n))
    assert abs(zv) < 4


# ---------------------------------------------------------------------------
# bad input, shapes, edges
# ---------------------------------------------------------------------------


def test_bad_input_is_refused():
    d = 3
    eye = np.eye(d)
    with pytest.raises(ValueError, match=r"A must satisfy 8A < I"):
        derf.derf_params(0.125, eye, d=d)
    with pytest.raises(ValueError, match=r"A must satisfy 8A < I .*largest eigenvalue"):
        derf.derf_params(np.diag([0.0, 0.1, 0.13]), eye, d=d)
    with pytest.raises(ValueError, match=r"A must be symmetric: max \|A - A\^T\|"):
        derf.derf_params(np.array([[0.0, 0.01, 0], [0, 0, 0], [0, 0, 0]]), eye, d=d)
    with pytest.raises(ValueError, match=r"A must be a float or a symmetric \(d, d\)"):
        derf.derf_params(np.zeros((2, 2)), eye, d=d)
    with pytest.raises(ValueError, match=r"B_query must be a \(d, d\)"):
        derf.derf_params(0.0, np.eye(2), d=d)
    with pytest.raises(ValueError, match=r"B_key must be a \(d, d\)"):
        derf.derf_params(0.0, eye, np.ones(d), d=d)
    with pytest.raises(ValueError, match=r"B_query is singular"):
        derf.derf_params(0.0, np.diag([1.0, 1.0, 0.0]), d=d)
    with pytest.raises(ValueError, match=r"B_query is singular"):
        derf.derf_params(-0.1, np.ones((d, d)), d=d)
    with pytest.raises(ValueError, match=r"B_query and B_key violate the unbiasedness identity.*residual"):
        derf.derf_params(0.0, eye, 1.001 * eye, d=d)
    with pytest.raises(ValueError, match=r"violate the unbiasedness identity"):
        derf.derf_params(-0.1, eye, eye, d=d)  # B2 must be (1 - 4a) B1^-T
    with pytest.raises(ValueError, match=r"A must be finite"):
        derf.derf_params(np.nan, eye, d=d)
    with pytest.raises(ValueError, match=r"B_query must be finite"):
        derf.derf_params(0.0, np.full((d, d), np.inf), d=d)
    with pytest.raises(ValueError, match=r"d must be an integer >= 1"):
        derf.derf_params(0.0, eye, d=0)
    p = derf.derf_params(0.0, eye, d=d)
    with pytest.raises(ValueError, match=r"x must have shape \(\.\.\., d\) with d = 3"):
        derf.derf_log_mse(np.ones(2), np.ones(3), 1, p)
    with pytest.raises(ValueError, match=r"y must have shape"):
        derf.derf_log_second_moment(np.ones(3), np.ones((2, 4)), p)
    with pytest.raises(ValueError, match=r"m must be >= 1"):
        derf.derf_log_mse(np.ones(3), np.ones(3), 0, p)
    with pytest.raises(TypeError, match=r"orthogonal_blocks must be True or False"):
        derf.derf_log_mse(np.ones(3), np.ones(3), 1, p, orthogonal_blocks="orthogonal")
    with pytest.raises(TypeError):  # keyword only: a positional ensemble name lands nowhere
        derf.derf_log_mse(np.ones(3), np.ones(3), 1, p, "orthogonal")


def test_tolerance_is_a_parameter():
    d = 2
    eye = np.eye(d)
    p = derf.derf_params(0.0, eye, (1 + 1e-8) * eye, d=d, tol=1e-6)
    assert p.identity_residual == pytest.approx(1e-8, rel=1e-6)
    with pytest.raises(ValueError, match=r"residual 1e-08 > tol = 1e-10"):
        derf.derf_params(0.0, eye, (1 + 1e-8) * eye, d=d)
    with pytest.raises(ValueError, match=r"tol must be > 0"):
        derf.derf_params(0.0, eye, d=d, tol=0.0)


def test_orthogonal_non_isotropic_is_monte_carlo_only():
    d = 3
    p = derf.derf_params(np.diag([0.01, -0.1, 0.0]), np.eye(d), d=d)
    assert not p.isotropic
    with pytest.raises(ValueError, match=r"non-isotropic A.*Monte Carlo only"):
        derf.derf_log_mse(np.ones(d) * 0.1, np.ones(d) * 0.1, 3, p, orthogonal_blocks=True)
    with pytest.raises(ValueError, match=r"Monte Carlo only"):
        derf.derf_log_pair_covariance(np.ones(d), np.ones(d), p)
    derf.derf_log_mse(np.ones(d) * 0.1, np.ones(d) * 0.1, 3, p)  # iid is fine


def test_params_are_frozen():
    p = derf.derf_params(-0.1, np.eye(2), d=2)
    with pytest.raises(AttributeError):
        p.a = 0.0
    with pytest.raises(ValueError):
        p.B1[0, 0] = 2.0


def test_vectorised_over_leading_axes():
    rng = np.random.default_rng(12)
    d = 4
    p, _, _ = _isotropic_case(rng, d)
    x = rng.normal(size=(3, 1, d)) * 0.5
    y = rng.normal(size=(5, d)) * 0.5
    m = np.array([1, 4, 6, 9, 2])
    for blocks in (False, True):
        out = derf.derf_log_mse(x, y, m, p, orthogonal_blocks=blocks)
        assert out.shape == (3, 5)
        for i in range(3):
            for j in range(5):
                one = derf.derf_log_mse(x[i, 0], y[j], int(m[j]), p, orthogonal_blocks=blocks)
                assert out[i, j] == pytest.approx(one, rel=1e-14)
    assert derf.derf_log_second_moment(x, y, p).shape == (3, 5)
    assert np.ndim(derf.derf_log_mse(x[0, 0], y[0], 3, p)) == 0


def test_edges_zero_and_overflow():
    d = 3
    fav = derf.derf_params(0.0, np.eye(d), d=d)
    z = np.zeros(d)
    assert derf.derf_log_mse(z, z, 3, fav) == -np.inf  # exactly zero: A = 0 and v = 0
    assert derf.derf_log_mse(z, z, 3, fav, orthogonal_blocks=True) == -np.inf
    oprf = derf.derf_params(-0.1, math.sqrt(1.4), d=d)
    assert np.isfinite(derf.derf_log_mse(z, z, 3, oprf, orthogonal_blocks=True))  # A != 0: V > 0
    # large norms stay finite in log space (far beyond float64's exp range)
    big = np.full(d, 12.0)
    assert np.isfinite(derf.derf_log_mse(big, big, 4, oprf, orthogonal_blocks=True))
    assert derf.derf_log_mse(big, big, 4, oprf) > 709
    with pytest.raises(FloatingPointError, match=r"not representable"):
        derf.derf_log_mse(np.full(d, 1e200), np.full(d, 1e200), 1, fav)


def test_overflowing_dot_product_and_a_near_one_eighth_are_refused():
    """x . y = -inf is an overflow, not an MSE of zero; A's top eigenvalue must keep a gap (review)."""
    from rfkernels.numerics import derf as dm

    p = dm.derf_params(0.05, np.sqrt(0.8) * np.eye(1), d=1)
    x = np.array([1e200])
    for call in (lambda: dm.derf_log_mse(x, -x, 4, p),
                 lambda: dm.derf_log_mse(x, -x, 4, p, orthogonal_blocks=True),
                 lambda: dm.derf_log_second_moment(x, -x, p),
                 lambda: dm.derf_log_pair_covariance(x, -x, p)):
        with pytest.raises(FloatingPointError, match="x . y overflows"):
            call()
    q = np.linalg.qr(np.random.default_rng(2).normal(size=(3, 3)))[0]
    near = q @ np.diag([0.125 * (1 - 1e-12), 0.0, -0.2]) @ q.T
    with pytest.raises(ValueError, match="within .* of 1/8"):
        dm.derf_params(near, np.eye(3), d=3)
    ok = q @ np.diag([0.1, 0.0, -0.2]) @ q.T
    assert dm.derf_params(ok, np.eye(3), d=3).d == 3
