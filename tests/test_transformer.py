"""rfkernels.RandomFeatures: the softmax kernel's scikit-learn transformer, and its exact error.

scikit-learn's own estimator checks and a Pipeline run on it; the exact-error
methods are :func:`rfkernels.theory.exact_mse` at every pair of rows, or the
estimator's reason where there is no closed form. What it shares with
RandomFourierFeatures is tested in ``tests/test_transformers_common.py``.
"""

import pickle
import warnings

import numpy as np
import pytest

from rfkernels import RandomFeatures, draw_projections, estimate, feature_map, theory
from rfkernels.estimators import estimator
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
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped checks
        results = check_estimator(RandomFeatures(n_components=16), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert not failed
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_pipeline_with_ridge():
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


# ---------------------------------------------------------------- the exact error


XS = np.random.default_rng(2).normal(scale=0.3, size=(9, 4))
YS = np.random.default_rng(3).normal(scale=0.3, size=(5, 4))
CASES = [("positive", "iid", "chi", None), ("trig", "orthogonal", "chi", None),
         ("hyperbolic", "simplex", "chi", None), ("offset", "orthogonal", "fixed", None),
         ("oprf", "orthogonal", "chi", -0.05), ("positive", "orthogonal", "antithetic", None)]


@pytest.mark.parametrize("kind, ensemble, norms, A", CASES)
def test_expected_mse_is_the_theory_at_every_pair(kind, ensemble, norms, A):
    r = 12
    rf = RandomFeatures(kind, r, ensemble=ensemble, norms=norms, A=A, random_state=0).fit(XS)
    m = rf.projections_.shape[0]
    got = rf.expected_mse(XS, YS)
    ref = theory.exact_mse(XS[:, None], YS[None], m, kind, ensemble=ensemble, norms=norms, A=A)
    np.testing.assert_allclose(got.entries, ref, rtol=1e-13, atol=0)
    sym = rf.expected_mse(XS)
    ref = theory.exact_mse(XS[:, None], XS[None], m, kind, ensemble=ensemble, norms=norms, A=A)
    np.testing.assert_allclose(sym.entries, ref, rtol=1e-13, atol=0)
    np.testing.assert_array_equal(sym.entries, sym.entries.T)
    K = np.exp(XS @ XS.T)
    assert sym.kernel_sq_sum == pytest.approx((K ** 2).sum(), rel=1e-13)
    assert sym.relative_frobenius == pytest.approx(ref.sum() / (K ** 2).sum(), rel=1e-13)
    assert (sym.kind, sym.ensemble, sym.norms, sym.n_components, sym.m, sym.kernel, sym.gamma) == (
        kind, ensemble, norms, r, m, "softmax", None)


def test_expected_mse_in_row_blocks_covers_every_pair(monkeypatch):
    """Blocks of a few rows (the symmetric case mirrors each): the same entries as one block."""
    from rfkernels import sklearn_base

    rf = RandomFeatures("positive", 8, ensemble="orthogonal", random_state=0).fit(XS)
    whole = rf.expected_mse(XS).entries
    monkeypatch.setattr(sklearn_base, "_BLOCK_ELEMENTS", 2 * XS.shape[0] * XS.shape[1])
    blocks = rf.expected_mse(XS).entries
    np.testing.assert_array_equal(blocks, blocks.T)
    np.testing.assert_allclose(blocks, whole, rtol=1e-14, atol=0)  # the SIMD lanes differ
    np.testing.assert_allclose(rf.expected_mse(XS, XS).entries, whole, rtol=1e-14, atol=0)


@pytest.mark.parametrize("kind, ensemble, norms", [("positive", "orthogonal", "chi"),
                                                   ("trig", "iid", "chi"),
                                                   ("trig", "orthogonal", "fixed")])
def test_gram_error_is_the_expected_mse_at_every_r(kind, ensemble, norms):
    """Two evaluations with independent chi norms; one per r with fixed norms (bias² stays)."""
    rf = RandomFeatures(kind, ensemble=ensemble, norms=norms)
    r = np.array([2, 6, 10])
    got = rf.gram_error(XS, r)
    for ri, gi in zip(r, got):
        fit = RandomFeatures(kind, int(ri), ensemble=ensemble, norms=norms, random_state=0).fit(XS)
        assert gi == pytest.approx(fit.expected_mse(XS).relative_frobenius, rel=1e-10)
    assert isinstance(rf.set_params(n_components=6).gram_error(XS), float)


def test_n_components_for_meets_the_target_at_r_and_not_one_below():
    rf = RandomFeatures("positive", ensemble="orthogonal")
    r = rf.n_components_for(XS, 0.01)
    fit = RandomFeatures("positive", r, ensemble="orthogonal", random_state=0).fit(XS)
    below = RandomFeatures("positive", r - 1, ensemble="orthogonal", random_state=0).fit(XS)
    assert fit.expected_mse(XS).relative_frobenius <= 0.01 < below.expected_mse(XS).relative_frobenius
    q = rf.n_components_for(XS, 1e-3, criterion="quantile", q=0.5)
    assert rf.n_components_for(XS, 1e-3, criterion="quantile", q=0.9) >= q
    auto = RandomFeatures("oprf", ensemble="iid", A="auto").n_components_for(XS, 0.01)
    fit = RandomFeatures("oprf", auto, ensemble="iid", A="auto", random_state=0).fit(XS)
    assert fit.A_ == pytest.approx(oprf_auto_a(XS), rel=1e-15)
    assert fit.expected_mse(XS).relative_frobenius <= 0.01


@pytest.mark.parametrize("ensemble, norms, kind", [("sorf", "chi", "positive"),
                                                   ("orthogonal-xformers", "chi", "trig"),
                                                   ("orthogonal", "fixed", "oprf")])
def test_no_closed_form_is_refused_with_its_reason(ensemble, norms, kind):
    A = -0.05 if kind == "oprf" else None
    reason = estimator(kind, ensemble=ensemble, norms=norms, A=A).supports.exact_mse.reason
    assert reason
    rf = RandomFeatures(kind, 8, ensemble=ensemble, norms=norms, A=A, random_state=0).fit(XS)
    rf.transform(XS)  # it still transforms
    for call in (lambda: rf.expected_mse(XS), lambda: rf.gram_error(XS, 8),
                 lambda: rf.n_components_for(XS, 0.1)):
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == reason or "independent chi norms" in str(err.value)


def test_n_components_for_needs_independent_chi_norms():
    for norms in ("fixed", "antithetic"):
        with pytest.raises(ValueError, match=f"needs independent chi norms.*norms='{norms}'.*"
                                             "gram_error"):
            RandomFeatures("positive", ensemble="orthogonal", norms=norms).n_components_for(XS, 0.1)


def test_exact_error_requests_are_checked():
    rf = RandomFeatures("trig", 8)
    with pytest.raises(NotFittedError, match="RandomFeatures instance is not fitted"):
        rf.expected_mse(XS)
    with pytest.raises(ValueError, match="n_components must be even for kind='trig'"):
        rf.gram_error(XS, [4, 5])
    with pytest.raises(ValueError, match="target must be a finite number > 0"):
        rf.n_components_for(XS, 0.0)
    with pytest.raises(ValueError, match="criterion must be one of 'frobenius', 'quantile'"):
        rf.n_components_for(XS, 0.1, criterion="max")
    with pytest.raises(ValueError, match="is not met below n_components="):
        rf.n_components_for(XS, 1e-300)
    with pytest.raises(ValueError, match="Y has 3 features"):
        rf.fit(XS).expected_mse(XS, YS[:, :3])
