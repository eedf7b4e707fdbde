"""Data-fitted DERFs (rfkernels.numerics.derf_fit; issue 24): SADERF, ADERF, SDERF.

References: direct numerical minimisation (scipy.optimize, BFGS) of the
mean over all pairs of the log second moment within each family, the
brute-force mean over pairs of :func:`rfkernels.numerics.derf.derf_log_moment_ratio`,
the existing OPRF fit and theory, and Monte Carlo of the literal estimator.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import linalg, optimize

from rfkernels import theory
from rfkernels.estimators import oprf
from rfkernels.estimators.derf import FIT_KINDS, fit_derf
from rfkernels.numerics import derf
from rfkernels.numerics import derf_fit as df

RTOL_OBJ = 1e-6


# ---------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------


def _population(seed, d, n1=40, n2=30, scale=0.45):
    """Correlated, anisotropic queries and keys with non-zero means (n1 != n2)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n1, d)) @ rng.normal(size=(d, d)) * scale + 0.1
    y = rng.normal(size=(n2, d)) * rng.uniform(0.2, 1.2, d) * scale * 1.5 - 0.05
    return x, y


def _skew(v, d):
    S = np.zeros((d, d))
    S[np.triu_indices(d, 1)] = v
    return S - S.T


def _best_of(fun, starts):
    """The lowest BFGS minimum over the starting points."""
    best = math.inf
    for th0 in starts:
        res = optimize.minimize(fun, th0, method="BFGS", options={"gtol": 1e-9, "maxiter": 2000})
        best = min(best, float(res.fun))
    return best


def _iso_params(a, P, d):
    b = math.sqrt(1.0 - 4.0 * a)
    return derf.derf_params(a, b * P, d=d, tol=1e-6)


def _mean_g(mom, A, B1, B2=None):
    """Mean over pairs of MATH.md's g for any A, B1 (B2 from the identity if None), unvalidated.

    The general formula (no family-specific reduction): with A = Q diag(lam) Q^T,
    sum_l log1p(16 lam^2 / (1 - 8 lam)) / 2 + tr[Q diag(1 / ((1-8lam)(1-4lam))) Q^T mean(v v^T)].
    Lightweight, so that BFGS with numerical gradients stays fast.
    """
    lam, Q = np.linalg.eigh(A)
    if np.any(lam >= 0.125):
        return 1e6
    m4 = np.eye(len(lam)) - 4.0 * A
    if B2 is None:
        try:
            B2 = np.linalg.solve(B1, m4).T
        except np.linalg.LinAlgError:
            return 1e6
    c = np.outer(B1 @ mom.mu1, B2 @ mom.mu2)
    vv = B1 @ mom.M1 @ B1.T + B2 @ mom.M2 @ B2.T + c + c.T
    w = (Q / ((1.0 - 8.0 * lam) * (1.0 - 4.0 * lam))) @ Q.T
    return 0.5 * float(np.sum(np.log1p(16.0 * lam**2 / (1.0 - 8.0 * lam)))) + float(np.sum(w * vv))


# ---------------------------------------------------------------------------
# the objective
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 2, 4])
def test_pair_free_mean_equals_brute_force_mean_over_pairs(d):
    x, y = _population(10 + d, d)
    rng = np.random.default_rng(d)
    Q = np.linalg.qr(rng.normal(size=(d, d)))[0]
    A = Q @ np.diag(rng.uniform(-0.3, 0.1, d)) @ Q.T
    p = derf.derf_params(0.5 * (A + A.T), np.eye(d) + 0.3 * rng.normal(size=(d, d)), d=d)
    brute_g = derf.derf_log_moment_ratio(x[:, None], y[None], p).mean()
    brute_m2 = derf.derf_log_second_moment(x[:, None], y[None], p).mean()
    assert df.mean_log_moment_ratio(x, y, p) == pytest.approx(brute_g, rel=1e-12)
    assert df.mean_log_second_moment(x, y, p) == pytest.approx(brute_m2, rel=1e-10)
    mom = df.population_moments(x, y)
    assert _mean_g(mom, p.A, p.B1, p.B2) == pytest.approx(brute_g, rel=1e-10)


@pytest.mark.parametrize("kind", FIT_KINDS)
def test_fit_objective_is_its_params_objective(kind):
    x, y = _population(3, 3)
    f = fit_derf(kind, x, y)
    assert f.kind == kind
    assert f.objective == pytest.approx(
        derf.derf_log_moment_ratio(x[:, None], y[None], f.params).mean(), rel=1e-12)
    assert f.mean_log_second_moment == pytest.approx(
        derf.derf_log_second_moment(x[:, None], y[None], f.params).mean(), rel=1e-10)
    assert f.params.identity_residual < 1e-12
    if f.rho is not None:  # isotropic: OPRF's objective at rho, closed form
        a, dd = f.params.a, f.params.d
        closed = dd / 2 * math.log1p(16 * a * a / (1 - 8 * a)) + dd * f.rho / (1 - 8 * a)
        if kind != "favor+":
            assert f.objective == pytest.approx(closed, rel=1e-12)


# ---------------------------------------------------------------------------
# closed forms = numerical minimisers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 3, 4])
def test_saderf_is_the_minimum_over_diagonal_rescalings_and_a(d):
    x, y = _population(20 + d, d)
    f = df.fit_saderf(x, y)

    mom = f.moments

    def obj(th):
        a, psi = 0.125 - math.exp(th[0]), np.exp(th[1:])
        b = math.sqrt(1.0 - 4.0 * a)
        return _mean_g(mom, a * np.eye(d), b * np.diag(psi), b * np.diag(1 / psi))

    rng = np.random.default_rng(d)
    num = _best_of(obj, [np.r_[math.log(0.125), np.zeros(d)],
                         np.r_[math.log(0.3), rng.normal(size=d)]])
    assert num >= f.objective - 1e-10
    assert num == pytest.approx(f.objective, rel=RTOL_OBJ)
    assert np.allclose(f.params.B1, math.sqrt(1 - 4 * f.params.a) * np.diag(f.psi), rtol=1e-15)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_aderf_is_the_minimum_over_b1_at_its_a_and_jointly(d):
    x, y = _population(30 + d, d)
    f = df.fit_aderf(x, y)
    a = f.params.a

    mom = f.moments

    def at_a(th, a=a):
        return _mean_g(mom, a * np.eye(d), th.reshape(d, d))

    num = _best_of(at_a, [np.eye(d).ravel()])
    assert num >= f.objective - 1e-10
    assert num == pytest.approx(f.objective, rel=RTOL_OBJ)
    joint = _best_of(lambda th: at_a(th[1:], 0.125 - math.exp(th[0])),
                     [np.r_[math.log(0.125), np.eye(d).ravel()]])
    assert joint == pytest.approx(f.objective, rel=RTOL_OBJ)


@pytest.mark.parametrize("d", [2, 3, 4])
def test_sderf_is_the_minimum_over_symmetric_a_and_b1_equal_b2(d):
    x, y = _population(40 + d, d)
    f = df.fit_sderf(x, y)
    k = d * (d - 1) // 2

    def obj(th):
        lam = 0.125 - np.exp(th[:d])
        Q = linalg.expm(_skew(th[d:d + k], d))
        R = linalg.expm(_skew(th[d + k:], d))  # B = (I-4A)^{1/2} R: all B1 = B2 with the identity
        A = (Q * lam) @ Q.T
        B = (Q * np.sqrt(1 - 4 * lam)) @ Q.T @ R
        return _mean_g(f.moments, 0.5 * (A + A.T), B, B)

    rng = np.random.default_rng(d)
    starts = [np.r_[np.full(d, math.log(0.125)), rng.normal(size=2 * k)] for _ in range(3)]
    num = _best_of(obj, starts)
    assert num >= f.objective - 1e-10
    assert num == pytest.approx(f.objective, rel=RTOL_OBJ)


def test_aderf_closed_form_identities():
    d = 4
    x, y = _population(7, d)
    f = df.fit_aderf(x, y)
    mom = f.moments
    b2 = 1.0 - 4.0 * f.params.a
    P = f.params.B1 / math.sqrt(b2)
    S = P.T @ P
    assert np.allclose(S @ mom.M1 @ S, mom.M2, rtol=1e-10, atol=1e-13)  # geometric-mean equation
    assert np.allclose(f.params.B1.T @ f.params.B2, b2 * np.eye(d), atol=1e-12)
    nuclear = np.sum(linalg.svdvals(linalg.sqrtm(mom.M1).real @ linalg.sqrtm(mom.M2).real))
    assert f.rho == pytest.approx((2 * nuclear + 2 * mom.mu1 @ mom.mu2) / d, rel=1e-10)
    # a left rotation of P changes neither the objective nor the orthogonal MSE
    O = np.linalg.qr(np.random.default_rng(0).normal(size=(d, d)))[0]
    rot = _iso_params(f.params.a, O @ P, d)
    assert df.mean_log_moment_ratio(x, y, rot) == pytest.approx(f.objective, rel=1e-12)
    for blocks in (False, True):
        assert np.allclose(derf.derf_log_mse(x[:5], y[:5], d, rot, orthogonal_blocks=blocks),
                           derf.derf_log_mse(x[:5], y[:5], d, f.params, orthogonal_blocks=blocks),
                           rtol=1e-10)


def test_sderf_closed_form_structure():
    x, y = _population(8, 3)
    f = df.fit_sderf(x, y)
    A, B, m3 = f.params.A, f.params.B1, f.moments.M3
    assert np.allclose(A @ m3, m3 @ A, atol=1e-12)  # A shares M3's eigenvectors
    assert np.array_equal(f.params.B1, f.params.B2)
    assert np.allclose(B @ B, np.eye(3) - 4 * A, atol=1e-13)
    lam3 = linalg.eigvalsh(m3)
    expected = (1 - 2 * lam3 - np.sqrt((2 * lam3 + 1) ** 2 + 8 * lam3)) / 16
    assert np.allclose(np.sort(f.params.eigenvalues), np.sort(expected), rtol=1e-12)
    assert np.all(f.params.eigenvalues <= 0)


def test_saderf_is_oprf_on_the_rescaled_pairs():
    x, y = _population(9, 4)
    f = df.fit_saderf(x, y)
    tx, ty = x * f.psi, y / f.psi
    assert f.params.a == pytest.approx(oprf.fit(tx, ty)["A"], rel=1e-12)
    for ens in ("iid", "orthogonal"):
        ref = theory.exact_mse(tx[:6], ty[:6], 5, "oprf", ensemble=ens, A=f.params.a)
        got = np.exp(derf.derf_log_mse(x[:6], y[:6], 5, f.params, orthogonal_blocks=ens == "orthogonal"))
        assert np.allclose(got, ref, rtol=1e-10)


def test_saderf_psi_uses_means_not_sums():
    """With n1 != n2 the paper's sums give a worse psi; with n1 = n2 both agree."""
    d = 3
    x, y = _population(11, d, n1=50, n2=20)
    f = df.fit_saderf(x, y)
    psi_sum = (np.sum(y**2, 0) / np.sum(x**2, 0)) ** 0.25
    tx, ty = x * psi_sum, y / psi_sum
    a = oprf.fit(tx, ty)["A"]
    b = math.sqrt(1 - 4 * a)
    p_sum = derf.derf_params(a, b * np.diag(psi_sum), b * np.diag(1 / psi_sum), d=d)
    assert df.mean_log_moment_ratio(x, y, p_sum) > f.objective + 1e-3
    x2, y2 = _population(11, d, n1=25, n2=25)
    assert np.allclose(df.fit_saderf(x2, y2).psi,
                       (np.sum(y2**2, 0) / np.sum(x2**2, 0)) ** 0.25, rtol=1e-13)


def test_oprf_fit_matches_the_registry_fit():
    x, y = _population(12, 4)
    assert df.fit_oprf(x, y).params.a == oprf.fit(x, y)["A"]
    assert df.fit_oprf(x, y).params.is_oprf and df.fit_favor_plus(x, y).params.is_favor_plus


# ---------------------------------------------------------------------------
# nesting
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("seed,d,n1,n2", [(0, 2, 30, 30), (1, 4, 50, 20), (2, 8, 60, 80),
                                          (3, 5, 40, 40)])
def test_nesting_of_the_fitted_objectives(seed, d, n1, n2):
    """FAVOR+ >= OPRF >= SADERF >= ADERF and OPRF >= SDERF (families nested)."""
    x, y = _population(seed, d, n1, n2)
    g = {k: fit_derf(k, x, y).mean_log_second_moment for k in FIT_KINDS}
    eps = 1e-12 * max(abs(v) for v in g.values())
    assert g["favor+"] >= g["oprf"] - eps
    assert g["oprf"] >= g["saderf"] - eps
    assert g["saderf"] >= g["aderf"] - eps
    assert g["oprf"] >= g["sderf"] - eps


# ---------------------------------------------------------------------------
# unbiasedness by Monte Carlo
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["saderf", "aderf", "sderf"])
def test_fitted_estimator_is_unbiased_monte_carlo(kind):
    d, n_draws = 3, 200_000
    x, y = _population(50, d, scale=0.35)
    p = fit_derf(kind, x, y).params
    W = np.random.default_rng(123).normal(size=(n_draws, d))
    quad = np.einsum("ni,ij,nj->n", W, p.A, W)
    for i, j in [(0, 0), (3, 7), (11, 2)]:
        xi, yj = x[i], y[j]
        f1 = np.exp(p.log_D + quad + W @ (p.B1 @ xi) + xi @ p.C1 @ xi)
        f2 = np.exp(p.log_D + quad + W @ (p.B2 @ yj) + yj @ p.C2 @ yj)
        sm = math.exp(xi @ yj)
        var = sm**2 * math.expm1(float(derf.derf_log_moment_ratio(xi, yj, p)))
        z = (np.mean(f1 * f2) - sm) / math.sqrt(var / n_draws)
        assert abs(z) < 4, (kind, i, j, z)


# ---------------------------------------------------------------------------
# degenerate populations
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["oprf", "saderf", "aderf", "sderf"])
def test_single_pair_is_refused(kind):
    with pytest.raises(ValueError, match="single pair"):
        fit_derf(kind, [[0.5, -0.2]], [[-0.3, 0.4]])


@pytest.mark.parametrize("kind", ["saderf", "aderf"])
def test_zero_column_is_refused(kind):
    x, y = _population(60, 3)
    x[:, 1] = 0.0
    with pytest.raises(ValueError, match=r"column\(s\) \[1\] of x are all zero"):
        fit_derf(kind, x, y)
    x, y = _population(60, 3)
    y[:, 2] = 0.0
    with pytest.raises(ValueError, match=r"column\(s\) \[2\] of y"):
        fit_derf(kind, x, y)


def test_sderf_accepts_a_zero_column():
    x, y = _population(61, 3)
    x[:, 0] = y[:, 0] = 0.0
    f = df.fit_sderf(x, y)
    assert np.isfinite(f.objective) and f.params.identity_residual < 1e-12


def test_aderf_refuses_rank_deficient_moments():
    x, y = _population(62, 3)
    with pytest.raises(ValueError, match="row.* < d"):
        df.fit_aderf(x[:2], y)
    x_flat = np.outer(np.linspace(-1, 1, 20), [1.0, 2.0, -0.5])  # rank 1, no zero column
    with pytest.raises(ValueError, match="singular"):
        df.fit_aderf(x_flat, y)
    assert np.isfinite(df.fit_saderf(x_flat, y).objective)  # SADERF needs only the diagonal


def test_bad_inputs_are_refused():
    x, y = _population(63, 3)
    with pytest.raises(ValueError, match="dimension mismatch"):
        df.fit_saderf(x, y[:, :2])
    with pytest.raises(ValueError, match="finite"):
        df.fit_aderf(np.where(x > 0.5, np.nan, x), y)
    with pytest.raises(ValueError, match="2-D"):
        df.fit_sderf(x[0], y)
    with pytest.raises(ValueError, match="at least one row"):
        df.fit_sderf(x[:0], y)
    with pytest.raises(ValueError, match="kind"):
        fit_derf("derf", x, y)
    p = df.fit_sderf(x, y).params
    with pytest.raises(ValueError, match="d = 3"):
        df.mean_log_moment_ratio(x[:, :2], y[:, :2], p)


@pytest.mark.parametrize("kind", ["oprf", "saderf", "sderf"])
def test_fits_do_not_cancel_when_the_mean_query_and_key_are_large_and_opposite(kind):
    """The objective equals the brute-force mean of g over all pairs at means of +-1e8 (review).

    ADERF refuses such data: its uncentred second moments are numerically rank one.
    """
    from rfkernels.numerics import derf

    rng = np.random.default_rng(11)
    x = rng.normal(size=(40, 3)) + 1e8
    y = rng.normal(size=(30, 3)) - 1e8
    res = fit_derf(kind, x, y)
    brute = np.mean(derf.derf_log_moment_ratio(x[:, None, :], y[None, :, :], res.params))
    assert res.objective == pytest.approx(brute, rel=1e-6)
    assert df.mean_pair_square(x, y) == pytest.approx(
        np.mean(np.sum((x[:, None, :] + y[None, :, :]) ** 2, axis=-1)), rel=1e-6)
