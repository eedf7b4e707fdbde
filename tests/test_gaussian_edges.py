"""The Gaussian kernel's edges: far from the origin, huge gamma, and what a fit remembers."""

import math

import numpy as np
import pytest

from rfkernels import RandomFeatures, RandomFourierFeatures, theory
from rfkernels.analysis import monte_carlo_mse
from rfkernels.analysis.comparison import theory_columns
from rfkernels.estimators import estimator

#: a pair far from the origin (|x'|^2 = 9e14) whose difference is small: K = exp(-0.545)
FAR_X = np.array([3e7, 0.0, 0.0])
FAR_Y = np.array([3e7, 1.0, 0.3])
FAR_K = math.exp(-0.5 * 1.09)


@pytest.mark.parametrize("method", ["reduced", "literal"])
@pytest.mark.parametrize("kind", ["trig", "offset"])
def test_far_from_the_origin_the_kernel_and_the_mse_come_from_x_minus_y(kind, method):
    """x'.y' - (|x'|^2 + |y'|^2)/2 would cancel 1e15 to 0.5: K and the errors are computed from t."""
    r = monte_carlo_mse(FAR_X, FAR_Y, 8, kind, trials=4000, seed=3, method=method,
                        kernel="gaussian", gamma=0.5)
    assert r.sm == pytest.approx(FAR_K, rel=1e-12)
    assert r.tail_ok and abs(r.z) < 4
    near = theory.exact_mse(FAR_X - FAR_X, FAR_Y - FAR_X, 8, kind, kernel="gaussian", gamma=0.5)
    assert r.mse_exact == pytest.approx(float(near), rel=1e-12)  # translation invariant


def test_the_kernel_value_is_exact_for_the_gaussian_and_x_dot_y_for_softmax():
    g = theory.geometry(FAR_X, FAR_Y)
    est = estimator("trig", kernel="gaussian", gamma=0.5)
    assert float(theory.kernel_log_value(g, est)) == pytest.approx(-0.545, rel=1e-14)
    x, y = theory.pair(4, 0.5, 0.7, 1.0)
    assert float(theory.kernel_log_value(theory.geometry(x, y), estimator("trig"))) == \
        pytest.approx(float(x @ y), rel=1e-14)


@pytest.mark.parametrize("gamma", [1e308, 9e307])
def test_a_gamma_whose_scale_overflows_is_refused_naming_gamma(gamma):
    with pytest.raises(ValueError, match="gamma must be below 8.9e307"):
        estimator("trig", kernel="gaussian", gamma=gamma)
    with pytest.raises(ValueError, match="gamma must be below"):
        RandomFourierFeatures(gamma=gamma).fit(np.zeros((2, 3)))


def test_an_estimator_with_kernel_keywords_is_refused():
    g = theory.geometry(*theory.pair(3, 0.5, 0.5, 1.0))
    with pytest.raises(ValueError, match="kind is an Estimator"):
        theory_columns(g, 4, estimator("trig"), kernel="gaussian", gamma=0.5)


def test_a_fit_remembers_its_kind_and_ensemble_until_the_next_fit():
    X = np.random.default_rng(0).normal(size=(5, 3))
    rf = RandomFeatures(kind="trig", n_components=8, random_state=0).fit(X)
    before = rf.transform(X)
    rf.set_params(kind="offset")
    np.testing.assert_array_equal(rf.transform(X), before)  # still the fitted trig map
    assert rf.fit(X).transform(X).shape == (5, 8) and rf.random_offset_.shape == (8,)
    rff = RandomFourierFeatures(gamma=0.3, n_components=8, ensemble="orthogonal",
                                random_state=0).fit(X)
    ort = rff.expected_mse(X)
    rff.set_params(ensemble="iid")
    again = rff.expected_mse(X)
    assert again.ensemble == "orthogonal"
    np.testing.assert_array_equal(again.entries, ort.entries)
    assert rff.fit(X).expected_mse(X).ensemble == "iid"
