"""rfkernels.RandomFeatures: a scikit-learn style transformer (issue 11).

scikit-learn is optional: its own estimator checks and a Pipeline run where it
is installed (the test extra installs it) and are skipped otherwise.
"""

import pickle
import warnings

import numpy as np
import pytest

from rfkernels import RandomFeatures, draw_projections, estimate, feature_map
from rfkernels.features import oprf_auto_a
from rfkernels.transformer import NotFittedError

X = np.random.default_rng(0).normal(scale=0.3, size=(20, 5))


@pytest.mark.parametrize("kind, r, m", [("positive", 16, 16), ("oprf", 16, 16), ("trig", 16, 8),
                                        ("hyperbolic", 16, 8)])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal", "simplex", "sorf"])
def test_fit_transform_is_the_core_feature_map(kind, r, m, ensemble):
    A = -0.05 if kind == "oprf" else None
    rf = RandomFeatures(kind, r, ensemble=ensemble, random_state=3, A=A)
    out = rf.fit_transform(X)
    assert out.shape == (20, r) and rf.projections_.shape == (m, 5) and rf.n_features_in_ == 5
    w = draw_projections(m, 5, ensemble=ensemble, seed=3)
    np.testing.assert_array_equal(rf.projections_, w)
    np.testing.assert_allclose(out, feature_map(X, w, kind, A=A), rtol=1e-15)
    np.testing.assert_allclose(rf.kernel(X[:3], X[5:9]), out[:3] @ out[5:9].T, rtol=1e-12)
    np.testing.assert_allclose(rf.kernel(X[:3]), estimate(X[:3], X[:3], w, kind, A=A), rtol=1e-15)
    assert len(rf.get_feature_names_out()) == r


def test_kernel_estimates_the_softmax_kernel():
    rf = RandomFeatures("positive", 20000, random_state=0).fit(X)
    np.testing.assert_allclose(rf.kernel(X[:4]), np.exp(X[:4] @ X[:4].T), rtol=0.05)


def test_oprf_a_auto_is_fixed_at_fit():
    rf = RandomFeatures("oprf", 8, random_state=0, A="auto").fit(X)
    assert rf.A_ == pytest.approx(oprf_auto_a(X), rel=1e-15) and rf.A_ < 0
    np.testing.assert_allclose(rf.transform(2 * X), feature_map(2 * X, rf.projections_, "oprf",
                                                                A=rf.A_))
    assert RandomFeatures(random_state=0).fit(X).A_ is None


def test_parameters_and_errors():
    rf = RandomFeatures()
    assert rf.get_params() == {"A": None, "ensemble": "orthogonal", "kind": "positive",
                               "n_components": 256, "norms": "chi", "random_state": None}
    assert rf.set_params(kind="trig", n_components=8) is rf and rf.kind == "trig"
    with pytest.raises(ValueError, match="Invalid parameter 'gamma'"):
        rf.set_params(gamma=1.0)
    with pytest.raises(NotFittedError, match="not fitted"):
        rf.transform(X)
    with pytest.raises(ValueError, match="even"):
        RandomFeatures("trig", 7).fit(X)
    with pytest.raises(ValueError, match="needs its parameter A"):
        RandomFeatures("oprf", 8).fit(X)
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        RandomFeatures("positive", 8, A=-0.1).fit(X)
    with pytest.raises(ValueError, match="< 1/8"):
        RandomFeatures("oprf", 8, A=0.2).fit(X)
    with pytest.raises(ValueError, match="kind must be one of"):
        RandomFeatures("elu1", 8).fit(X)
    with pytest.raises(ValueError, match="Complex data not supported"):
        RandomFeatures().fit(X + 1j)
    with pytest.raises(ValueError, match="2-D"):
        RandomFeatures().fit(X[0])
    fitted = RandomFeatures(n_components=4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 4 features, but RandomFeatures is expecting 5"):
        fitted.transform(X[:, :4])
    assert "RandomFeatures(" in repr(fitted)
    again = pickle.loads(pickle.dumps(fitted))
    np.testing.assert_array_equal(again.transform(X), fitted.transform(X))
    with pytest.raises(TypeError, match="sparse"):
        import scipy.sparse

        fitted.transform(scipy.sparse.csr_matrix(X))
    state = np.random.RandomState(1)  # scikit-learn's random_state type is accepted
    assert RandomFeatures(n_components=4, random_state=state).fit(X).projections_.shape == (4, 5)


def test_check_estimator():
    pytest.importorskip("sklearn")
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "does not inherit from BaseEstimator", skipped checks
        results = check_estimator(RandomFeatures(n_components=16), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert not failed
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_pipeline_with_ridge():
    pytest.importorskip("sklearn")
    from sklearn.linear_model import Ridge
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(1)
    Xt = rng.normal(scale=0.5, size=(400, 3))
    y = np.sin(2 * Xt[:, 0]) + Xt[:, 1] * Xt[:, 2]
    pipe = make_pipeline(RandomFeatures("positive", 200, random_state=0), Ridge(alpha=1e-3))
    pipe.fit(Xt[:300], y[:300])
    score = pipe.score(Xt[300:], y[300:])
    linear = Ridge(alpha=1e-3).fit(Xt[:300], y[:300]).score(Xt[300:], y[300:])
    assert score > 0.9 and score > linear + 0.05
    search = GridSearchCV(pipe, {"randomfeatures__kind": ["positive", "trig"]}, cv=2).fit(Xt, y)
    assert search.best_params_["randomfeatures__kind"] in ("positive", "trig")


def test_feature_names_follow_scikit_learn():
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame(X, columns=[f"c{i}" for i in range(5)])
    rf = RandomFeatures(n_components=4, random_state=0).fit(df)
    assert list(rf.feature_names_in_) == [f"c{i}" for i in range(5)]
    with pytest.raises(ValueError, match="same order"):
        rf.transform(df[df.columns[::-1]])
    with pytest.warns(UserWarning, match="does not have valid feature names"):
        rf.transform(X)
