"""The front door: rfkernels.estimator(...) and its frozen feature map (rfkernels/front.py).

Each method is checked against the function it stands for, bit for bit: the
same numbers from the same arguments.
"""

import subprocess
import sys
import warnings

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_phases, draw_projections, favor_attention, feature_map, theory
from rfkernels.analysis import monte_carlo_mse, trial_estimates
from rfkernels.front import FrozenEstimator, FrozenFeatureMap

RNG = np.random.default_rng(7)
X = 0.3 * RNG.normal(size=(5, 8))
Y = 0.3 * RNG.normal(size=(5, 8))
V = RNG.normal(size=(5, 3))


def test_estimator_is_frozen_and_describes_itself():
    est = rfkernels.estimator("positive", ensemble="orthogonal", m=8, d=8)
    assert isinstance(est, FrozenEstimator)
    assert (est.kind, est.ensemble, est.norms, est.kernel, est.m, est.d) == (
        "positive", "orthogonal", "chi", "softmax", 8, 8)
    with pytest.raises(AttributeError):
        est.m = 4
    assert "ensemble='orthogonal'" in repr(est)
    assert est.at(m=16).m == 16 and est.m == 8


@pytest.mark.parametrize("kind,ensemble,norms", [("positive", "orthogonal", "chi"),
                                                  ("trig", "iid", "fixed"),
                                                  ("hyperbolic", "simplex", "chi"),
                                                  ("oprf", "orthogonal", "antithetic")])
def test_mse_is_the_exact_mse(kind, ensemble, norms):
    x, y = theory.pair(8, 0.6, 0.5, [0.2, 1.0, 2.5])
    est = rfkernels.estimator(kind, ensemble=ensemble, norms=norms, m=6)
    want = theory.exact_mse(x, y, 6, kind, ensemble=ensemble, norms=norms)
    assert np.array_equal(est.mse(x, y), want)
    assert np.array_equal(est.mse(theory.geometry(x, y), log=True),
                          theory.exact_mse(x, y, 6, kind, ensemble=ensemble, norms=norms, log=True))
    ms = np.array([[2], [6], [9]])
    assert np.array_equal(est.mse(x, y, m=ms),
                          theory.exact_mse(x, y, ms, kind, ensemble=ensemble, norms=norms))


def test_mse_of_the_gaussian_kernel():
    x, y = theory.pair(4, 0.7, 0.4, 1.1)
    est = rfkernels.estimator("offset", kernel="gaussian", gamma=0.3, m=5)
    assert est.mse(x, y) == theory.exact_mse(x, y, 5, "offset", kernel="gaussian", gamma=0.3)


@pytest.mark.parametrize("method", ["reduced", "literal"])
def test_monte_carlo_is_monte_carlo_mse(method):
    x, y = theory.pair(8, 0.5, 0.4, 1.3)
    est = rfkernels.estimator("hyperbolic", ensemble="orthogonal", m=4)
    got = est.monte_carlo(x, y, trials=3000, seed=11, method=method)
    want = monte_carlo_mse(x, y, 4, "hyperbolic", ensemble="orthogonal", trials=3000, seed=11,
                           method=method)
    assert (got.mse, got.stderr, got.mse_exact, got.z) == (want.mse, want.stderr, want.mse_exact, want.z)
    batch = est.monte_carlo(np.stack([x, y]), np.stack([y, x]), trials=500, seed=1, method=method)
    assert len(batch) == 2
    e = est.trial_estimates(x, y, trials=50, seed=2, method=method)
    assert np.array_equal(e, trial_estimates(x, y, 4, "hyperbolic", ensemble="orthogonal",
                                             trials=50, seed=2, method=method))


@pytest.mark.parametrize("kind,ensemble,norms", [("positive", "orthogonal", "chi"),
                                                  ("trig", "iid", "chi"),
                                                  ("hyperbolic", "simplex", "fixed"),
                                                  ("positive", "sorf", "chi")])
def test_draw_features_are_feature_map_of_draw_projections(kind, ensemble, norms):
    fmap = rfkernels.estimator(kind, ensemble=ensemble, norms=norms, m=12, d=8).draw(seed=4)
    W = draw_projections(12, 8, ensemble=ensemble, norms=norms, seed=4)
    assert np.array_equal(fmap.W, W)
    assert np.array_equal(fmap.features(X), feature_map(X, W, kind))
    assert np.array_equal(fmap.estimate(X, Y), feature_map(X, W, kind) @ feature_map(Y, W, kind).T)


def test_offset_draws_its_phases_after_the_projections():
    fmap = rfkernels.estimator("offset", kernel="gaussian", gamma=0.5, m=16, d=8).draw(seed=9)
    rng = np.random.default_rng(9)
    W = draw_projections(16, 8, seed=rng)
    phases = draw_phases(16, seed=rng)
    assert np.array_equal(fmap.phases, phases)
    assert np.array_equal(fmap.features(X), feature_map(X, W, "offset", phase=phases,
                                                        kernel="gaussian", gamma=0.5))
    with pytest.raises(ValueError, match="softmax kernel"):
        fmap.attention(X, Y, V)


@pytest.mark.parametrize("causal", [False, True])
def test_attention_is_favor_attention(causal):
    fmap = rfkernels.estimator("positive", ensemble="orthogonal", m=16, d=8).draw(seed=3)
    got = fmap.attention(X, Y, V, causal=causal).output
    want = favor_attention(X, Y, V, fmap.W, "positive", causal=causal).output
    assert np.array_equal(got, want)


def test_to_dict_and_npz_round_trip(tmp_path):
    fmap = rfkernels.estimator("oprf", A=-0.05, ensemble="orthogonal", m=8, d=8).draw(seed=1)
    d = fmap.to_dict()
    assert d["kind"] == "oprf" and d["A"] == -0.05 and d["W"].shape == (8, 8)
    assert set(d["seed"]) == {"entropy", "spawn_key"}
    fmap.save(tmp_path / "draw.npz")
    back = FrozenFeatureMap.load(tmp_path / "draw.npz")
    assert np.array_equal(back.features(X), fmap.features(X))
    assert back.spec.describe() == fmap.spec.describe()


def test_data_fitted_kinds_fit_first_and_refuse_otherwise(tmp_path):
    auto = rfkernels.estimator("oprf", A="auto", m=8, d=8)
    assert auto.needs_fit
    for call in (lambda: auto.draw(0), lambda: auto.mse(X[0], Y[0])):
        with pytest.raises(ValueError, match=r"A='auto' is fitted on data: call est.fit\(Q, K\)"):
            call()
    fitted = auto.fit(X, Y)
    a = rfkernels.pairs.fit_map_param("oprf", "auto", X, Y)
    assert fitted.spec.params.A == a and not fitted.needs_fit
    assert np.array_equal(fitted.draw(2).features(X), feature_map(X, draw_projections(8, 8, seed=2),
                                                                 "oprf", A=a))
    sderf = rfkernels.estimator("sderf", m=8, d=8)
    with pytest.raises(ValueError, match="kind='sderf' is fitted on data: call fit"):
        sderf.draw(0)
    fit = rfkernels.fit_derf("sderf", X, Y)
    drawn = sderf.fit(X, Y).draw(5)
    W = draw_projections(8, 8, seed=5)
    assert np.allclose(drawn.features(Y, role="key"),
                       feature_map(Y, W, "derf", **fit.keywords, role="key"), rtol=1e-12)
    drawn.save(tmp_path / "sderf.npz")
    assert np.array_equal(FrozenFeatureMap.load(tmp_path / "sderf.npz").features(X, role="key"),
                          drawn.features(X, role="key"))
    with pytest.raises(ValueError, match="has nothing to fit"):
        rfkernels.estimator("positive", m=4, d=8).fit(X, Y)


def test_refusals_name_what_is_missing():
    with pytest.raises(ValueError, match="draw needs m and d"):
        rfkernels.estimator("positive", m=8).draw(0)
    with pytest.raises(ValueError, match="m is unknown"):
        rfkernels.estimator("positive").mse(X[0], Y[0])
    with pytest.raises(ValueError, match="draws a map with one A"):
        rfkernels.estimator("oprf", m=8, d=8).draw(0)
    with pytest.raises(ValueError, match="kind must be one of"):
        rfkernels.estimator("gauss")
    with pytest.raises(ValueError, match="no closed form for the sorf ensemble"):
        rfkernels.estimator("trig", ensemble="sorf", m=4).mse(X[0], Y[0])


def test_supports_carry_reasons_and_the_old_names_warn():
    est = rfkernels.estimator("trig", ensemble="sorf", m=4, d=8)
    assert not est.supports.exact_mse and "sorf" in est.supports.exact_mse.reason
    assert est.supports.as_dict()["lemma2"] is None
    spec = est.spec
    with pytest.warns(DeprecationWarning, match="use Estimator.supports.reduced"):
        assert spec.reduced.reason == est.supports.reduced.reason
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.supports.tilted  # the new place does not warn


def test_import_rfkernels_stays_light():
    """``import rfkernels`` loads neither the front door, the analysis layer nor scikit-learn (lazy)."""
    code = ("import sys, rfkernels; print(any(m.startswith(('rfkernels.front', 'rfkernels.analysis',"
            " 'sklearn')) for m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_lazy_names_are_the_modules_own():
    from rfkernels.fourier import RandomFourierFeatures
    from rfkernels.transformer import RandomFeatures

    assert rfkernels.RandomFeatures is RandomFeatures
    assert rfkernels.RandomFourierFeatures is RandomFourierFeatures
    assert rfkernels.estimator is rfkernels.front.estimator
    assert {"estimator", "RandomFeatures", "RandomFourierFeatures"} <= set(rfkernels.__all__)


def test_inputs_are_checked_against_the_estimator_and_reprs_are_short():
    est = rfkernels.estimator("positive", ensemble="orthogonal", m=8, d=8)
    x, y = theory.pair(4, 0.5, 0.5, 1.0)
    for call in (lambda: est.mse(x, y), lambda: est.monte_carlo(x, y, trials=10)):
        with pytest.raises(ValueError, match="x has d = 4 but the estimator was built with d = 8"):
            call()
    with pytest.raises(ValueError, match=r"call est.fit\(Q, K\) first, or pass population"):
        rfkernels.estimator("saderf", m=4).mse(X[0], Y[0])
    pop = rfkernels.estimator("saderf", m=4).mse(X[0], Y[0], population=(X, Y))
    assert pop == rfkernels.estimator("saderf", m=4).fit(X, Y).mse(X[0], Y[0])
    assert repr(est.supports).startswith("Supports(exact_mse=True, lemma2=True, theorem2=True")
    assert repr(est.draw(0)) == ("FrozenFeatureMap(kind='positive', ensemble='orthogonal', "
                                 "norms='chi', m=8, d=8, seed=0)")
    assert str(est.supports.theorem2) == "supported"
    assert "estimator" in dir(rfkernels)


def test_review_edges_refused_or_kept(tmp_path):
    """Edges a review found: string parameters, d of a geometry batch, vectors of a geometry,
    a Generator seed, load without the suffix, fit twice."""
    with pytest.raises(ValueError, match="foo is not a parameter of any kind or kernel"):
        rfkernels.estimator("oprf", foo="auto", m=8, d=8)
    with pytest.raises(ValueError, match="B_query is the parameter of kind='derf' only"):
        rfkernels.estimator("oprf", B_query="auto", m=8, d=8)
    est = rfkernels.estimator("positive", m=5, d=4)
    with pytest.raises(ValueError, match="x has d = 8 but the estimator was built with d = 4"):
        est.mse(theory.geometry(X, Y))
    with pytest.raises(ValueError, match="Q has d = 8 but the estimator was built with d = 4"):
        rfkernels.estimator("saderf", m=5, d=4).fit(X, Y)
    fitted = rfkernels.estimator("saderf", m=5).fit(X, Y)
    with pytest.raises(ValueError, match="is fitted already"):
        fitted.fit(X, Y)
    g = theory.geometry(X, Y)
    assert np.array_equal(fitted.mse(g, vectors=(X, Y)), fitted.mse(X, Y))
    with pytest.raises(ValueError, match="do not have the given geometry"):
        fitted.mse(g, vectors=(X[::-1], Y[::-1]))
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    fmap = rfkernels.estimator("positive", m=4, d=8).draw(g1)
    assert np.array_equal(fmap.W, draw_projections(4, 8, seed=g2))
    fmap.save(tmp_path / "w")
    assert np.array_equal(FrozenFeatureMap.load(tmp_path / "w").W, fmap.W)
    with pytest.raises(ValueError, match="attention does not take kind='offset'"):
        rfkernels.estimator("offset", m=4, d=8).draw(0).attention(X, Y, V)


def test_deprecation_warnings_point_at_the_callers_line():
    import rfkernels.analysis as analysis

    for owner, name in ((analysis, "monte_carlo_mse_batch"), (theory, "exact_mse_from_geometry"),
                        (analysis.monte_carlo, "monte_carlo_mse_from_geometry")):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            getattr(owner, name)
        assert caught[0].filename == __file__ and f"{owner.__name__}.{name}" in str(caught[0].message)
    with pytest.raises(AttributeError):
        analysis._setup  # the forwarding serves the deprecated names only
