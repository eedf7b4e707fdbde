"""rfkernels.RandomFourierFeatures: Gaussian-kernel random Fourier features, RBFSampler's drop-in.

The statistical tests compare empirical mean squared errors with
:meth:`RandomFourierFeatures.expected_mse` and :func:`rfkernels.theory.exact_mse`
through ``z = (mean - theory) / standard error`` with fixed seeds (so they are
deterministic); ``|z| < 4`` each. scikit-learn (a dependency) gives the
estimator checks, ``gamma="scale"`` of ``SVC`` and ``RBFSampler`` itself.
What both transformers share (the vocabulary, the deprecated ``features``)
is tested in ``tests/test_transformers_common.py``.
"""

import pickle
import warnings

import numpy as np
import pytest

from rfkernels import RandomFourierFeatures, draw_phases, draw_projections, theory
from rfkernels.estimators import estimator
from rfkernels.fourier import ExpectedMSE, squared_distances
from rfkernels.transformer import NotFittedError

X = np.random.default_rng(0).normal(size=(12, 3))
Y = np.random.default_rng(1).normal(size=(5, 3))


def gaussian(x, y, gamma):
    return np.exp(-gamma * ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1))


def z_scores(errors, expected):
    """``(mean - expected) / SE`` over axis 0 of the squared errors."""
    se = errors.std(axis=0, ddof=1) / np.sqrt(errors.shape[0])
    return (errors.mean(axis=0) - expected) / se


# ---------------------------------------------------------------- scikit-learn conventions


@pytest.mark.parametrize("kind", ["offset", "trig"])
def test_check_estimator(kind):
    """Every check passes for offset features; paired (trig) ones refuse the n_components=1 of six checks.

    scikit-learn sets ``n_components = 1`` in some checks (check_fit2d_1sample,
    check_fit2d_1feature, check_fit2d_predict1d, check_dont_overwrite_parameters,
    check_methods_subset_invariance, check_methods_sample_order_invariance);
    paired features need an even output dimension and say so.
    """
    from sklearn.utils.estimator_checks import check_estimator

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # skipped checks
        results = check_estimator(RandomFourierFeatures(n_components=16, kind=kind), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])) for r in results if r["status"] == "failed"]
    if kind == "trig":
        assert len(failed) <= 6 and all("n_components must be even for kind='trig'" in e
                                        and "got 1" in e for _, e in failed), failed
    else:
        assert not failed
    assert sum(r["status"] == "passed" for r in results) >= 40


def test_params_clone_and_repr():
    rff = RandomFourierFeatures(0.5, 32, kind="trig", ensemble="orthogonal", random_state=3)
    assert rff.get_params() == {"A": None, "ensemble": "orthogonal", "features": "deprecated",
                                "gamma": 0.5, "kind": "trig", "n_components": 32, "norms": "chi",
                                "random_state": 3}
    assert " ".join(repr(rff).split()) == (  # scikit-learn's repr: what differs from the defaults
        "RandomFourierFeatures(ensemble='orthogonal', gamma=0.5, kind='trig', n_components=32, "
        "random_state=3)")
    assert rff.set_params(gamma="scale", kind="offset") is rff
    assert rff.gamma == "scale" and rff.kind == "offset"
    with pytest.raises(ValueError, match="Invalid parameter 'kernel'"):
        rff.set_params(kernel="rbf")  # kernel is a method, not a parameter
    assert RandomFourierFeatures().norms == "chi" and RandomFourierFeatures.target_kernel == "gaussian"
    import sklearn.base as sklearn_base
    twin = sklearn_base.clone(rff)
    assert twin is not rff and twin.get_params() == rff.get_params()
    fitted = rff.fit(X)
    np.testing.assert_array_equal(sklearn_base.clone(fitted).fit(X).transform(X), fitted.transform(X))


@pytest.mark.parametrize("kind", ["offset", "trig"])
def test_pickle_round_trip(kind):
    rff = RandomFourierFeatures("scale", 10, kind=kind, random_state=0).fit(X)
    again = pickle.loads(pickle.dumps(rff))
    np.testing.assert_array_equal(again.transform(Y), rff.transform(Y))
    np.testing.assert_array_equal(again.expected_mse(Y).entries, rff.expected_mse(Y).entries)
    assert again.gamma_ == rff.gamma_


@pytest.mark.parametrize("kind, r, m", [("offset", 10, 10), ("offset", 7, 7), ("trig", 10, 5)])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal", "simplex", "sorf"])
def test_transform_is_the_documented_map(kind, r, m, ensemble):
    gamma = 0.3
    rff = RandomFourierFeatures(gamma, r, kind=kind, ensemble=ensemble, random_state=7)
    out = rff.fit_transform(X)
    assert out.shape == (12, r) and out.dtype == np.float64 and rff.n_features_in_ == 3
    assert rff.gamma_ == gamma and isinstance(rff.gamma_, float)
    rng = np.random.default_rng(7)  # an int seed: one Generator, frequencies then offsets
    w = draw_projections(m, 3, ensemble=ensemble, seed=rng)
    np.testing.assert_array_equal(rff.projections_, w)
    proj = np.sqrt(2 * gamma) * X @ w.T
    if kind == "offset":
        b = draw_phases(m, seed=rng)
        np.testing.assert_array_equal(rff.random_offset_, b)
        np.testing.assert_allclose(out, np.sqrt(2.0 / m) * np.cos(proj + b), atol=1e-15)
    else:
        assert rff.random_offset_ is None
        np.testing.assert_allclose(out, np.hstack([np.sin(proj), np.cos(proj)]) / np.sqrt(m),
                                   atol=1e-15)
    names = rff.get_feature_names_out()
    assert list(names) == [f"randomfourierfeatures{i}" for i in range(r)]
    np.testing.assert_allclose(rff.kernel(X, Y), out @ rff.transform(Y).T, atol=1e-14)
    np.testing.assert_allclose(rff.kernel(X), out @ out.T, atol=1e-14)


@pytest.mark.parametrize("kind", ["offset", "trig"])
def test_kernel_estimates_the_gaussian_kernel(kind):
    rff = RandomFourierFeatures(0.4, 20000, kind=kind, random_state=0).fit(X)
    np.testing.assert_allclose(rff.kernel(X, Y), gaussian(X, Y, 0.4), atol=0.03)


def test_seed_forms():
    a = RandomFourierFeatures(n_components=6, random_state=5).fit(X)
    state = np.random.RandomState(1)  # consumed once for an integer seed, as RandomFeatures does
    b = RandomFourierFeatures(n_components=6, random_state=state).fit(X)
    assert b.projections_.shape == (6, 3) and b.random_offset_.shape == (6,)
    gen = np.random.default_rng(5)
    c = RandomFourierFeatures(n_components=6, random_state=gen).fit(X)
    np.testing.assert_array_equal(c.projections_, a.projections_)
    np.testing.assert_array_equal(c.random_offset_, a.random_offset_)
    d = RandomFourierFeatures(n_components=6, random_state=gen).fit(X)  # the Generator advanced
    assert not np.array_equal(d.projections_, a.projections_)


# ---------------------------------------------------------------- gamma


def test_gamma_scale_is_svcs():
    svm = pytest.importorskip("sklearn.svm")
    y = (X[:, 0] > 0).astype(int)
    for data in (X, 3.0 * X + 1.0, np.full((6, 2), 2.5)):
        labels = y[:len(data)] if len(data) == len(X) else np.arange(len(data)) % 2
        expected = svm.SVC(gamma="scale").fit(data, labels)._gamma
        rff = RandomFourierFeatures("scale", 8, random_state=0).fit(data)
        assert rff.gamma_ == expected
        assert rff.gamma == "scale"  # the parameter is kept
    assert RandomFourierFeatures("scale", 8).fit(np.full((6, 2), 2.5)).gamma_ == 1.0  # var = 0


@pytest.mark.parametrize("gamma, error, match", [
    (0, ValueError, "gamma must be one finite number > 0; got 0"),
    (-1.0, ValueError, "gamma must be one finite number > 0"),
    (np.inf, ValueError, "gamma must be one finite number > 0"),
    (np.nan, ValueError, "gamma must be one finite number > 0"),
    (1j, ValueError, "Complex data not supported: gamma"),
    ("auto", ValueError, "gamma must be a finite number > 0 or 'scale'; got 'auto'"),
    (None, TypeError, "gamma must be a finite number > 0 or 'scale'; got None"),
    (True, TypeError, "gamma must be a finite number > 0"),
    ([1.0], TypeError, "gamma must be a finite number > 0"),
])
def test_bad_gamma(gamma, error, match):
    with pytest.raises(error, match=match.replace("(", r"\(")):
        RandomFourierFeatures(gamma).fit(X)


def test_gamma_scale_failure_leaves_the_fit_unchanged():
    rff = RandomFourierFeatures(0.5, 4, random_state=0).fit(X)
    before = rff.transform(Y)
    rff.set_params(gamma="scale")
    with pytest.raises(ValueError, match=r"gamma='scale' gives 1 / \(n_features \* X.var\(\)\)"):
        rff.fit(np.array([[1e300, -1e300], [0.0, 1.0]]))  # the variance overflows
    assert rff.gamma_ == 0.5 and rff.n_features_in_ == 3
    np.testing.assert_array_equal(rff.transform(Y), before)


def test_bad_parameters():
    with pytest.raises(ValueError, match="kind must be one of 'trig', 'positive', 'hyperbolic', "
                                         "'oprf', 'offset', 'data-tilted'; got 'cos'"):
        RandomFourierFeatures(kind="cos").fit(X)
    with pytest.raises(ValueError, match="kind='derf' has no one literal feature map for "
                                         "RandomFourierFeatures"):
        RandomFourierFeatures(kind="derf").fit(X)
    with pytest.raises(ValueError, match="n_components must be even for kind='trig'"):
        RandomFourierFeatures(n_components=7, kind="trig").fit(X)
    with pytest.warns(DeprecationWarning, match="use kind"):
        with pytest.raises(ValueError, match="features must be one of 'offset', 'paired', "
                                             "'positive'; got 'cos'"):
            RandomFourierFeatures(features="cos").fit(X)
    with pytest.warns(DeprecationWarning, match="use kind"):
        with pytest.raises(ValueError, match="n_components must be even for features='paired'"):
            RandomFourierFeatures(n_components=7, features="paired").fit(X)
    with pytest.raises(ValueError, match="n_components must be an integer >= 1"):
        RandomFourierFeatures(n_components=0).fit(X)
    with pytest.raises(TypeError, match="n_components must be an integer"):
        RandomFourierFeatures(n_components=2.5).fit(X)
    with pytest.raises(ValueError, match="ensemble must be one of 'iid', 'orthogonal', 'simplex', "
                                         "'sorf', 'qmc'; got 'orthogonal-xformers'"):
        RandomFourierFeatures(ensemble="orthogonal-xformers").fit(X)
    with pytest.raises(ValueError, match="simplex.*needs d >= 2"):
        RandomFourierFeatures(ensemble="simplex").fit(X[:, :1])
    rff = RandomFourierFeatures(n_components=4, random_state=0).fit(X)
    with pytest.raises(ValueError, match="X has 2 features, but RandomFourierFeatures is "
                                         "expecting 3"):
        rff.transform(X[:, :2])
    with pytest.raises(ValueError, match="Y has 2 features"):
        rff.expected_mse(X, Y[:, :2])
    with pytest.raises(ValueError, match="X must be finite"):
        rff.expected_mse(np.full((2, 3), np.nan))


def test_not_fitted():
    rff = RandomFourierFeatures()
    for call in (lambda: rff.transform(X), lambda: rff.kernel(X), lambda: rff.expected_mse(X),
                 rff.get_feature_names_out):
        with pytest.raises(NotFittedError, match="RandomFourierFeatures instance is not fitted"):
            call()
    validation = pytest.importorskip("sklearn.utils.validation")
    with pytest.raises(validation.NotFittedError):
        validation.check_is_fitted(rff)


# ---------------------------------------------------------------- expected_mse against theory


@pytest.mark.parametrize("kind, r", [("offset", 6), ("trig", 12)])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal", "simplex"])
def test_expected_mse_is_theory_entrywise(kind, r, ensemble):
    gamma = 0.35
    rff = RandomFourierFeatures(gamma, r, kind=kind, ensemble=ensemble, random_state=0).fit(X)
    m = 6
    res = rff.expected_mse(X, Y)
    ref = theory.exact_mse(X[:, None], Y[None], m, kind, ensemble=ensemble,
                           kernel="gaussian", gamma=gamma)
    assert isinstance(res, ExpectedMSE) and res.entries.shape == (12, 5)
    np.testing.assert_allclose(res.entries, ref, rtol=1e-13)
    sym = rff.expected_mse(X)
    ref = theory.exact_mse(X[:, None], X[None], m, kind, ensemble=ensemble,
                           kernel="gaussian", gamma=gamma)
    np.testing.assert_allclose(sym.entries, ref, rtol=1e-13, atol=1e-15)
    np.testing.assert_array_equal(sym.entries, sym.entries.T)
    # the diagonal: paired features are exact at x = y, offset ones have MSE 1/(2m)
    np.testing.assert_array_equal(np.diag(sym.entries), 1 / (2 * m) if kind == "offset" else 0)
    K = gaussian(X, X, gamma)
    assert sym.mse_sum == pytest.approx(ref.sum(), rel=1e-13)
    assert sym.kernel_sq_sum == pytest.approx((K ** 2).sum(), rel=1e-13)
    assert sym.relative_frobenius == pytest.approx(ref.sum() / (K ** 2).sum(), rel=1e-13)
    assert (sym.kind, sym.ensemble, sym.norms, sym.n_components, sym.m, sym.kernel, sym.gamma) == (
        kind, ensemble, "chi", r, m, "gaussian", gamma)
    d = sym.to_dict()
    assert d["entries"] == sym.entries.tolist() and d["relative_frobenius"] == sym.relative_frobenius
    assert (d["kind"], d["kernel"], d["gamma"]) == (kind, "gaussian", gamma) and "features" not in d


def test_expected_mse_iid_closed_forms():
    """MATH.md: offset (1 - k^2 + k^4/2)/m and paired (1 - k^2)^2/(2m), iid, m frequencies."""
    gamma, m = 0.8, 5
    k = gaussian(X, Y, gamma)
    off = RandomFourierFeatures(gamma, m, random_state=0).fit(X).expected_mse(X, Y)
    pai = RandomFourierFeatures(gamma, 2 * m, kind="trig", random_state=0).fit(X)
    np.testing.assert_allclose(off.entries, (1 - k**2 + k**4 / 2) / m, rtol=1e-12)
    np.testing.assert_allclose(pai.expected_mse(X, Y).entries, (1 - k**2) ** 2 / (2 * m),
                               rtol=1e-12)


def test_expected_mse_many_rows_in_chunks():
    """More pairs than one chunk (65536): the row blocks of the symmetric case cover every pair."""
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(400, 3))
    rff = RandomFourierFeatures(0.2, 8, kind="trig", ensemble="orthogonal", random_state=0).fit(Z)
    got = rff.expected_mse(Z).entries
    ref = theory.exact_mse(Z[:, None], Z[None], 4, "trig", ensemble="orthogonal",
                           kernel="gaussian", gamma=0.2)
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    np.testing.assert_array_equal(got, got.T)


def test_squared_distances():
    rng = np.random.default_rng(2)
    A = rng.normal(size=(30, 4)) + 100.0
    B = rng.normal(size=(7, 4)) + 100.0
    ref = ((A[:, None] - A[None]) ** 2).sum(-1)
    got = squared_distances(A)
    assert np.all(np.diag(got) == 0) and np.all(got >= 0)
    np.testing.assert_array_equal(got, got.T)
    centred = ((A - A.mean(0)) ** 2).sum(1)
    assert np.max(np.abs(got - ref) / (centred[:, None] + centred[None])) < 8 * np.finfo(float).eps
    np.testing.assert_allclose(squared_distances(A, B), ((A[:, None] - B[None]) ** 2).sum(-1),
                               rtol=1e-12)


def test_sorf_has_no_expected_mse():
    reason = estimator("trig", ensemble="sorf").supports.exact_mse.reason
    for kind in ("offset", "trig"):
        rff = RandomFourierFeatures(n_components=8, kind=kind, ensemble="sorf", random_state=0).fit(X)
        rff.transform(X)  # it still transforms
        with pytest.raises(ValueError, match=reason.replace("(", r"\(").replace(")", r"\)")):
            rff.expected_mse(X)


@pytest.mark.parametrize("kind, r", [("offset", 4), ("trig", 8)])
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
def test_expected_mse_against_monte_carlo_over_fits(kind, r, ensemble):
    """2000 fits (seeds 0..1999): the empirical MSE of every entry against expected_mse.

    m = 4 frequencies in d = 3: orthogonal frequencies are a full block and a partial one.
    """
    gamma, fits = 0.7, 2000
    P = np.random.default_rng(4).normal(scale=0.5, size=(4, 3))  # k from 0.15 to 0.84
    K = gaussian(P, P, gamma)
    rff = RandomFourierFeatures(gamma, r, kind=kind, ensemble=ensemble)
    errors = np.empty((fits, 4, 4))
    for seed in range(fits):
        errors[seed] = (rff.set_params(random_state=seed).fit(P).kernel(P) - K) ** 2
    expected = rff.expected_mse(P).entries
    off = ~np.eye(4, dtype=bool)
    z = z_scores(errors, expected)
    assert np.all(np.abs(z[off]) < 4), z
    if kind == "offset":
        assert np.all(np.abs(np.diag(z)) < 4), z
    else:  # exact on the diagonal, up to rounding
        assert np.max(errors[:, ~off]) < 1e-28


# ---------------------------------------------------------------- scikit-learn's RBFSampler


def _block_errors(Z, m, points, K):
    """Squared errors of the kernel estimates of n column blocks of m outputs each.

    ``Z`` (k, n m) are the features of ``points`` from one fit whose columns
    are independent (iid frequencies, one output each): block b is a sampler
    of m components, whose estimate is n times its share of ``Z @ Z.T``.
    """
    k = len(points)
    n = Z.shape[1] // m
    blocks = Z.reshape(k, n, m)
    est = n * np.einsum("ibm,jbm->bij", blocks, blocks)
    return (est - K) ** 2


@pytest.mark.parametrize("d, m, gamma", [(5, 20, 0.3), (2, 4, 2.0), (16, 64, 0.05)])
def test_rbfsampler_and_the_drop_in_follow_the_offset_theory(d, m, gamma):
    """scikit-learn's RBFSampler, and ours (offset, iid), against theory.exact_mse('offset')."""
    kernel_approximation = pytest.importorskip("sklearn.kernel_approximation")
    n = 20000
    rng = np.random.default_rng(d)
    points = rng.normal(scale=1.0 / np.sqrt(gamma * d), size=(3, d))
    K = gaussian(points, points, gamma)
    expected = theory.exact_mse(points[:, None], points[None], m, "offset", kernel="gaussian",
                                gamma=gamma)
    sampler = kernel_approximation.RBFSampler(gamma=gamma, n_components=m * n, random_state=0)
    ours = RandomFourierFeatures(gamma, m * n, random_state=0)
    for Z in (sampler.fit_transform(points), ours.fit_transform(points)):
        z = z_scores(_block_errors(Z, m, points, K), expected)
        assert np.all(np.abs(z) < 4), z
    np.testing.assert_allclose(RandomFourierFeatures(gamma, m).fit(points).expected_mse(points)
                               .entries, expected, rtol=1e-13)


def test_docstring_examples():
    import doctest

    from rfkernels import fourier

    result = doctest.testmod(fourier, optionflags=doctest.ELLIPSIS)
    assert result.attempted >= 6 and result.failed == 0


def test_pipeline_and_grid_search():
    pytest.importorskip("sklearn")
    from sklearn.linear_model import RidgeClassifier
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import make_pipeline

    rng = np.random.default_rng(5)
    data = rng.normal(size=(300, 2))
    labels = (np.hypot(data[:, 0], data[:, 1]) > 1.1).astype(int)  # a circle: not linear
    pipe = make_pipeline(RandomFourierFeatures(1.0, 200, random_state=0), RidgeClassifier(1.0))
    assert pipe.fit(data[:200], labels[:200]).score(data[200:], labels[200:]) > 0.9  # 0.97
    linear = RidgeClassifier(1.0).fit(data[:200], labels[:200]).score(data[200:], labels[200:])
    assert linear < 0.7  # 0.56
    search = GridSearchCV(pipe, {"randomfourierfeatures__kind": ["offset", "trig"],
                                 "randomfourierfeatures__gamma": [0.5, "scale"]}, cv=2)
    search.fit(data, labels)
    assert search.best_score_ > 0.9
