"""RandomFeatures and RandomFourierFeatures: one scikit-learn base, one vocabulary, the old keyword.

Both are :class:`rfkernels.sklearn_base.BaseRandomFeatures` (scikit-learn's
``BaseEstimator`` and ``TransformerMixin``) and differ in their target kernel
and defaults; RandomFourierFeatures' ``features=`` is deprecated for
``kind=`` and gives the same bits with a DeprecationWarning.
"""

import inspect
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.utils.estimator_checks import check_estimator

from rfkernels import RandomFeatures, RandomFourierFeatures, draw_phases, draw_projections
from rfkernels import feature_map, theory
from rfkernels.docstrings import PARAMETERS
from rfkernels.features import mapped_kinds, oprf_auto_a
from rfkernels.sklearn_base import FEATURES, BaseRandomFeatures, ExpectedMSE

X = np.random.default_rng(0).normal(scale=0.5, size=(14, 3))
Y = np.random.default_rng(1).normal(scale=0.5, size=(4, 3))
BOTH = (RandomFeatures, RandomFourierFeatures)
METHODS = ("fit", "transform", "fit_transform", "kernel", "get_feature_names_out", "expected_mse",
           "gram_error", "n_components_for", "get_params", "set_params")


def _params(cls):
    return {name: p.default for name, p in inspect.signature(cls.__init__).parameters.items()
            if name != "self"}


def test_one_base_holds_every_method():
    for cls in BOTH:
        assert issubclass(cls, BaseRandomFeatures)
        assert issubclass(cls, BaseEstimator) and issubclass(cls, TransformerMixin)
        assert not {name for name in METHODS if name in vars(cls)}, cls  # all inherited
    assert RandomFeatures.target_kernel == "softmax"
    assert RandomFourierFeatures.target_kernel == "gaussian"


def test_one_vocabulary_and_each_class_keeps_its_defaults():
    """The registry's names (kind, ensemble, norms), n_components, random_state, A; gamma its kernel's."""
    rf, rff = _params(RandomFeatures), _params(RandomFourierFeatures)
    assert set(rf) == {"kind", "n_components", "ensemble", "norms", "random_state", "A"}
    assert set(rff) == set(rf) | {"gamma", "features"}
    assert set(RandomFeatures().get_params()) == set(rf)
    assert set(RandomFourierFeatures().get_params()) == set(rff)
    assert (rf["kind"], rf["ensemble"], rf["n_components"]) == ("positive", "orthogonal", 256)
    assert (rff["kind"], rff["ensemble"], rff["n_components"]) == ("offset", "iid", 100)  # RBFSampler's
    assert rf["norms"] == rff["norms"] == "chi" and rf["A"] is rff["A"] is None
    assert rff["features"] == "deprecated" and rff["gamma"] == 1.0


def test_the_shared_parameter_text_is_in_both_docstrings():
    for cls in BOTH:
        doc = cls.__doc__
        assert "%(" not in doc
        for line in PARAMETERS["norms"].splitlines()[1:]:
            assert line.strip() in doc, (cls, line)
        for name in _params(cls):
            assert f"\n    {name} : " in doc, (cls, name)


@pytest.mark.parametrize("cls", BOTH)
def test_check_estimator_passes_with_the_defaults(cls):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = check_estimator(cls(), on_fail=None)
    failed = [(r["check_name"], str(r["exception"])[:200]) for r in results
              if r["status"] == "failed"]
    assert not failed
    assert sum(r["status"] == "passed" for r in results) >= 40
    assert not [w for w in caught if issubclass(w.category, DeprecationWarning)
                and "rfkernels" in str(w.filename)]


@pytest.mark.parametrize("features", sorted(FEATURES))
@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
def test_deprecated_features_warns_and_gives_the_same_bits(features, ensemble):
    kind = FEATURES[features]
    new = RandomFourierFeatures(0.3, 10, kind=kind, ensemble=ensemble, random_state=4)
    old = RandomFourierFeatures(0.3, 10, features=features, ensemble=ensemble, random_state=4)
    assert clone(old).get_params() == old.get_params()  # no warning: only fit reads it
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        new.fit(X)
        new_err = new.expected_mse(X, Y)
        new_gram = new.gram_error(X, [2, 8])
    with pytest.warns(DeprecationWarning, match=r"features is deprecated; use kind") as record:
        old.fit(X)
    assert record[0].filename == __file__  # it points at the caller
    assert old.kind_ == kind
    for a, b in [(old.transform(Y), new.transform(Y)), (old.kernel(X, Y), new.kernel(X, Y)),
                 (old.projections_, new.projections_),
                 (old.expected_mse(X, Y).entries, new_err.entries)]:
        np.testing.assert_array_equal(a, b)
    if kind == "offset":
        np.testing.assert_array_equal(old.random_offset_, new.random_offset_)
    with pytest.warns(DeprecationWarning, match="use kind"):
        np.testing.assert_array_equal(old.gram_error(X, [2, 8]), new_gram)
    if kind != "positive":
        with pytest.warns(DeprecationWarning, match="use kind"):
            assert old.n_components_for(X, 0.2) == new.n_components_for(X, 0.2)


def test_features_given_overrides_the_default_kind():
    with pytest.warns(DeprecationWarning, match="'paired' is kind='trig'"):
        rff = RandomFourierFeatures(4, 8, features="paired", random_state=0).fit(X)
    assert rff.kind_ == "trig" and rff.transform(X).shape == (14, 8)


def test_expected_mse_features_is_deprecated_for_kind():
    rff = RandomFourierFeatures(0.5, 8, kind="trig", random_state=0).fit(X)
    err = rff.expected_mse(X)
    assert isinstance(err, ExpectedMSE) and err.kind == "trig"
    with pytest.warns(DeprecationWarning, match="use ExpectedMSE.kind"):
        assert err.features == "paired"


def _fit_gaussian(kind, ensemble, gamma=0.4):
    A = "auto" if kind == "oprf" else None
    r = 12
    return RandomFourierFeatures(gamma, r, kind=kind, ensemble=ensemble, A=A, random_state=2).fit(X)


@pytest.mark.parametrize("kind", mapped_kinds())
def test_the_gaussian_twin_takes_every_kind_the_softmax_one_takes(kind):
    """Every kind with one literal map: the core feature map at the fitted W, and its exact MSE."""
    gamma, ensemble = 0.4, "orthogonal"
    rff = _fit_gaussian(kind, ensemble, gamma)
    m = rff.projections_.shape[0]
    rng = np.random.default_rng(2)
    np.testing.assert_array_equal(rff.projections_, draw_projections(m, 3, ensemble=ensemble,
                                                                     seed=rng))
    phase = draw_phases(m, seed=rng) if kind == "offset" else None
    if kind == "oprf":
        c = np.sqrt(2 * gamma)
        assert rff.A_ == pytest.approx(oprf_auto_a(c * X), rel=1e-15)
    np.testing.assert_array_equal(rff.transform(Y), feature_map(
        Y, rff.projections_, kind, A=rff.A_, phase=phase, kernel="gaussian", gamma=gamma))
    ref = theory.exact_mse(X[:, None], Y[None], m, kind, ensemble=ensemble, A=rff.A_,
                           kernel="gaussian", gamma=gamma)
    np.testing.assert_allclose(rff.expected_mse(X, Y).entries, ref, rtol=1e-12, atol=1e-300)


@pytest.mark.parametrize("kind", ["trig", "positive"])
def test_the_two_kernels_are_one_rescaling(kind):
    """K_gamma(x, y) = exp(-(|x'|^2 + |y'|^2)/2) SM(x', y'), x' = sqrt(2 gamma) x: the same W."""
    gamma = 0.7
    c = np.sqrt(2 * gamma)
    rff = RandomFourierFeatures(gamma, 16, kind=kind, ensemble="orthogonal", random_state=5).fit(X)
    rf = RandomFeatures(kind, 16, ensemble="orthogonal", random_state=5).fit(c * X)
    np.testing.assert_array_equal(rff.projections_, rf.projections_)
    factor = np.exp(-0.5 * ((c * X) ** 2).sum(1))
    np.testing.assert_allclose(rff.transform(X), factor[:, None] * rf.transform(c * X),
                               rtol=1e-13)
    np.testing.assert_allclose(rff.expected_mse(X).entries,
                               np.outer(factor, factor) ** 2 * rf.expected_mse(c * X).entries,
                               rtol=1e-10, atol=1e-300)


def test_features_and_a_different_kind_are_refused():
    import numpy as np
    import pytest

    from rfkernels import RandomFourierFeatures

    X = np.random.default_rng(0).normal(size=(5, 3))
    with pytest.raises(ValueError, match="features='paired' .deprecated. and kind='positive' disagree"):
        with pytest.warns(DeprecationWarning):
            RandomFourierFeatures(features="paired", kind="positive").fit(X)
    with pytest.warns(DeprecationWarning, match="features is deprecated"):
        assert RandomFourierFeatures(features="paired", kind="trig").fit(X).kind_ == "trig"
