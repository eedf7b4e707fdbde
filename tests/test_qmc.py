"""Ensemble 'qmc': scrambled Sobol frequencies through the normal quantile (issue 41)."""

import math

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_projections, estimate, feature_map, theory
from rfkernels.analysis import monte_carlo_mse
from rfkernels.estimators import estimator
from rfkernels.estimators.ensembles import QMC_MAX_D, qmc_gaussian_rows
from rfkernels.floor import kernel_floor


def test_the_seed_fixes_the_scramble_and_other_m_take_the_first_points():
    a = draw_projections(64, 5, ensemble="qmc", seed=3)
    assert np.array_equal(a, draw_projections(64, 5, ensemble="qmc", seed=3))
    assert not np.array_equal(a, draw_projections(64, 5, ensemble="qmc", seed=4))
    # m = 50: the first 50 points of the same scrambled set of 64
    np.testing.assert_array_equal(draw_projections(50, 5, ensemble="qmc", seed=3), a[:50])


def test_each_row_is_marginally_standard_normal_and_the_set_is_balanced():
    draws = np.stack([qmc_gaussian_rows(16, 3, np.random.default_rng(t)) for t in range(600)])
    first = draws[:, 0, :]  # one row over scrambles: N(0, I)
    z_mean = first.mean(axis=0) / (1 / math.sqrt(600))
    assert np.all(np.abs(z_mean) < 4), z_mean
    assert np.all(np.abs(first.var(axis=0, ddof=1) - 1) < 4 * math.sqrt(2 / 599))
    # within one set of 16 points each coordinate's uniforms fill the 16 strata once
    from scipy import special
    u = special.ndtr(draws[0])
    assert all(sorted(np.floor(16 * u[:, j]).astype(int)) == list(range(16)) for j in range(3))


def test_fixed_norms_rescale_the_rows_and_antithetic_is_refused():
    w = draw_projections(40, 6, ensemble="qmc", norms="fixed", seed=1)
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), math.sqrt(6), rtol=1e-12)
    with pytest.raises(ValueError, match="antithetic"):
        draw_projections(8, 6, ensemble="qmc", norms="antithetic", seed=1)


@pytest.mark.parametrize("kind", ["trig", "positive", "hyperbolic"])
def test_unbiased_over_scrambles(kind):
    x, y = theory.pair(4, 0.5, 0.4, 1.3)
    draws = 1500
    vals = np.array([estimate(x, y, draw_projections(16, 4, ensemble="qmc", seed=t), kind)
                     for t in range(draws)])
    z = (vals.mean() - math.exp(x @ y)) / (vals.std(ddof=1) / math.sqrt(draws))
    assert abs(z) < 4, z


def _relative_mse(ensemble, X, Y, m, draws):
    exact = np.exp(np.sum(X * Y, axis=1))
    rel = []
    for t in range(draws):
        w = draw_projections(m, X.shape[1], ensemble=ensemble, seed=t)
        est = np.sum(feature_map(X, w, "trig") * feature_map(Y, w, "trig"), axis=1)
        rel.append(np.mean((est / exact - 1.0) ** 2))
    rel = np.asarray(rel)
    return rel.mean(), rel.std(ddof=1) / math.sqrt(draws)


def test_trig_in_low_dimension_goes_below_iid_and_below_the_floor_of_independent_draws():
    """Measured: d = 3, m = 64, 20 pairs of norm about 0.7: iid 0.023, orthogonal 0.011,
    qmc 0.0018, the trig floor of independent draws 0.021 (relative MSE)."""
    rng = np.random.default_rng(0)
    X, Y = 0.4 * rng.standard_normal((20, 3)), 0.4 * rng.standard_normal((20, 3))
    iid, se_iid = _relative_mse("iid", X, Y, 64, 200)
    qmc, se_qmc = _relative_mse("qmc", X, Y, 64, 200)
    assert iid - qmc > 4 * math.hypot(se_iid, se_qmc), (iid, qmc)
    floor = kernel_floor(X, Y, representation="trig", seed=0)
    r = 64 * floor.features_per_draw
    assert floor.value / r - qmc > 4 * math.hypot(floor.stderr / r, se_qmc)


def test_capabilities_say_monte_carlo_and_the_literal_engine_only():
    est = estimator("trig", ensemble="qmc", m=8, d=4)
    assert not est.supports.exact_mse and "scrambles" in est.supports.exact_mse.reason
    assert not est.supports.reduced and "method='literal'" in est.supports.reduced.reason
    x, y = theory.pair(4, 0.5, 0.4, 1.3)
    with pytest.raises(ValueError, match="method='literal'"):
        monte_carlo_mse(x, y, 8, est, trials=10)
    res = monte_carlo_mse(x, y, 8, est, trials=200, method="literal")
    assert res.mse_exact is None and res.mse > 0


def test_the_transformer_and_the_dimension_limit():
    X = np.random.default_rng(0).standard_normal((30, 5))
    rf = rfkernels.RandomFourierFeatures(ensemble="qmc", n_components=64, random_state=0).fit(X)
    assert rf.transform(X).shape == (30, 64)
    with pytest.raises(ValueError, match="no closed form for the qmc ensemble"):
        rf.expected_mse(X)
    with pytest.raises(ValueError, match=f"d <= {QMC_MAX_D}"):
        draw_projections(4, QMC_MAX_D + 1, ensemble="qmc", seed=0)


def test_the_uniforms_leave_sobols_grid_so_the_normal_is_not_truncated():
    """SciPy's scrambled points lie on a 2**-30 grid, whose largest point maps to 6.01: the
    jitter within each cell makes every uniform continuous (and the tails reach past it)."""
    from scipy import special

    w = qmc_gaussian_rows(256, 4, np.random.default_rng(7))
    scaled = special.ndtr(w) * 2.0 ** 30
    assert np.all(np.abs(scaled - np.round(scaled)) > 1e-6)
    # each coordinate still fills its 256 strata once (the jitter stays within a cell)
    for j in range(4):
        assert sorted(np.floor(256 * special.ndtr(w[:, j])).astype(int)) == list(range(256))
