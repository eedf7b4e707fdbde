"""The DERF kinds end to end (issue 24): registry, dispatch, theory, Monte Carlo, features, attention.

The numerics themselves (second moment, orthogonal covariance, fits) are
checked against mpmath in tests/test_derf_theory.py and test_derf_fit.py.
"""

import math

import numpy as np
import pytest

import rfkernels
from rfkernels import favor_attention, feature_map, fit_derf, theory
from rfkernels.analysis import monte_carlo_mse, trial_estimates
from rfkernels.estimators import estimator
from rfkernels.estimators.derf import pair_transform
from rfkernels.numerics.derf import derf_log_mse, derf_params

D = 4
B = np.diag([1.3, 0.8, 1.0, 0.9])
A_DENSE = np.diag([0.05, 0.0, -0.1, 0.02])


def _pair(seed=0, scale=0.4):
    rng = np.random.default_rng(seed)
    return rng.normal(size=D) * scale, rng.normal(size=D) * scale


def _population(seed=1, n=6):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, D)) * 0.4, rng.normal(size=(n, D)) * 0.4 + 0.1


# -- registry and dispatch ----------------------------------------------------


def test_favor_plus_and_oprf_parameters_are_those_kinds():
    assert estimator("derf", A=0.0, B_query=np.eye(D)).kind.name == "positive"
    e = estimator("derf", A=0.05, B_query=math.sqrt(0.8) * np.eye(D))
    assert e.kind.name == "oprf" and e.params.A == 0.05
    assert estimator("derf", A=0.05, B_query=B).kind.name == "derf"


@pytest.mark.parametrize("ens", ["iid", "orthogonal"])
def test_dispatch_gives_the_same_bits(ens):
    x, y = _population()
    b = math.sqrt(0.8) * np.eye(D)
    assert np.array_equal(theory.exact_mse(x, y, 8, "derf", A=0.05, B_query=b, ensemble=ens),
                          theory.exact_mse(x, y, 8, "oprf", A=0.05, ensemble=ens))
    assert np.array_equal(theory.exact_mse(x, y, 8, "derf", A=0.0, B_query=np.eye(D), ensemble=ens),
                          theory.exact_mse(x, y, 8, "positive", ensemble=ens))
    w = rfkernels.draw_projections(8, D, seed=3)
    assert np.array_equal(feature_map(x, w, "derf", A=0.05, B_query=b, role="key"),
                          feature_map(x, w, "oprf", A=0.05))
    r1 = monte_carlo_mse(x[0], y[0], 8, "derf", A=0.05, B_query=b, ensemble=ens, trials=500, seed=2)
    r2 = monte_carlo_mse(x[0], y[0], 8, "oprf", A=0.05, ensemble=ens, trials=500, seed=2)
    assert r1.mse == r2.mse and r1.kind == "oprf"


@pytest.mark.parametrize("call, match", [
    (lambda: estimator("derf", A=0.05), "needs B_query"),
    (lambda: estimator("derf", A=0.2, B_query=B), "8A < I"),
    (lambda: estimator("derf", A=0.05, B_query=0.9), r"a \(d, d\) array"),
    (lambda: estimator("saderf", A=0.05), "A is the parameter of kind='oprf' or kind='derf' only"),
    (lambda: estimator("positive", B_query=B), "B_query is the parameter of kind='derf' only"),
    (lambda: estimator("derf", A=0.05, B_query=B, d=3), r"\(4, 4\) arrays but the inputs have d = 3"),
    (lambda: estimator("derf", A=0.05, B_query=B, B_key=B), "unbiasedness identity"),
])
def test_bad_parameters_raise_one_line(call, match):
    with pytest.raises(ValueError, match=match) as info:
        call()
    assert "\n" not in str(info.value)


def test_capabilities_say_why():
    dense = estimator("derf", A=A_DENSE, B_query=B)
    assert "non-isotropic" in dense.supports.reduced.reason
    assert dense.supports.exact_mse  # iid: the second moment holds for any A
    assert "no exact theory" in estimator("derf", A=A_DENSE, B_query=B,
                                          ensemble="orthogonal").supports.exact_mse.reason
    assert "chi" in estimator("derf", A=0.05, B_query=B, norms="fixed").supports.exact_mse.reason
    assert "Monte Carlo only" in estimator("derf", A=0.05, B_query=B, ensemble="simplex").supports.exact_mse.reason


# -- theory --------------------------------------------------------------------


@pytest.mark.parametrize("ens", ["iid", "orthogonal"])
def test_exact_mse_is_the_numerics(ens):
    x, y = _population()
    got = theory.exact_mse(x, y, 8, "derf", A=0.05, B_query=B, ensemble=ens, log=True)
    ref = derf_log_mse(x, y, 8, derf_params(0.05, B, d=D), orthogonal_blocks=ens == "orthogonal")
    assert np.array_equal(got, ref)


def test_exact_mse_needs_the_vectors():
    g = theory.geometry(*_pair())
    with pytest.raises(ValueError, match="depends on x and y themselves"):
        theory.exact_mse(g, None, 8, estimator("derf", A=0.05, B_query=B), log=True)


def test_data_fitted_kinds_fit_on_the_population_never_one_pair():
    x, y = _population()
    for kind in ("saderf", "aderf", "sderf"):
        got = theory.exact_mse(x, y, 8, kind)
        fit = fit_derf(kind, x, y)
        assert np.array_equal(got, theory.exact_mse(x, y, 8, "derf", **fit.keywords)), kind
        with pytest.raises(ValueError, match="single pair|one pair"):
            theory.exact_mse(x[0], y[0], 8, kind)
    # a stated population: the fit there, the MSE here
    qp, kp = _population(seed=7, n=20)
    got = theory.exact_mse(x, y, 8, "saderf", population=(qp, kp))
    assert np.array_equal(got, theory.exact_mse(x, y, 8, "derf", **fit_derf("saderf", qp, kp).keywords))
    with pytest.raises(ValueError, match="population is where the data-fitted kinds are fitted"):
        theory.exact_mse(x, y, 8, "positive", population=(qp, kp))


# -- the engine -----------------------------------------------------------------


def test_isotropic_derf_is_oprf_at_the_transformed_pair_bit_for_bit():
    x, y = _pair()
    p = derf_params(0.05, B, d=D)
    xt, yt = pair_transform(p, x, y)
    assert abs(xt @ yt - x @ y) < 1e-13
    got = trial_estimates(x, y, 8, "derf", A=0.05, B_query=B, trials=64, seed=4, ensemble="orthogonal")
    # the normalised estimates are OPRF's at (x', y'); both scale by e^{x'.y'}
    ref = trial_estimates(xt, yt, 8, "oprf", A=0.05, trials=64, seed=4, ensemble="orthogonal")
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("ens, backend", [("iid", "numpy"), ("orthogonal", "numpy"), ("orthogonal", "numba")])
def test_monte_carlo_matches_theory(ens, backend):
    x, y = _pair()
    r = monte_carlo_mse(x, y, 8, "derf", A=0.05, B_query=B, ensemble=ens, trials=20_000, seed=1,
                        backend=backend)
    assert r.tail_ok and abs(r.z) < 4, r


def test_numba_equals_numpy():
    x, y = _pair()
    runs = [monte_carlo_mse(x, y, 8, "derf", A=-0.05, B_query=B, ensemble="orthogonal", trials=2000,
                            seed=3, backend=b, proposal="plain") for b in ("numpy", "numba")]
    assert runs[0].mse == runs[1].mse and runs[0].bias == runs[1].bias


def test_tilted_proposal_works_for_isotropic_and_refuses_dense():
    x, y = _pair(scale=0.6)
    r = monte_carlo_mse(x, y, 8, "derf", A=0.05, B_query=B, trials=20_000, seed=1, proposal="tilted")
    assert r.proposal == "tilted" and abs(r.z) < 4
    with pytest.raises(ValueError, match="non-isotropic"):
        monte_carlo_mse(x, y, 8, "derf", A=A_DENSE, B_query=B, trials=100, proposal="tilted")


def test_literal_method_for_a_dense_a():
    x, y = _pair()
    r = monte_carlo_mse(x, y, 8, "derf", A=A_DENSE, B_query=B, trials=20_000, seed=1, method="literal")
    assert r.tail_ok and abs(r.z) < 4, r
    with pytest.raises(ValueError, match="method='literal'"):
        monte_carlo_mse(x, y, 8, "derf", A=A_DENSE, B_query=B, trials=100)


def test_batch_of_fitted_kinds():
    x, y = _population()
    res = monte_carlo_mse(x, y, 8, "saderf", trials=20_000, seed=2)
    assert max(abs(r.z) for r in res) < 4
    res = monte_carlo_mse(x, y, 8, "sderf", trials=4_000, seed=2, method="literal")
    assert max(abs(r.z) for r in res) < 4
    with pytest.raises(ValueError, match="one pair|single pair"):
        monte_carlo_mse(x[0], y[0], 8, "saderf", trials=100)


# -- features and attention -------------------------------------------------------


def test_features_estimate_the_kernel_unbiasedly():
    x, y = _pair()
    w = rfkernels.draw_projections(200_000, D, seed=5)
    for A in (0.05, A_DENSE):
        fq = feature_map(x, w, "derf", A=A, B_query=B, role="query")
        fk = feature_map(y, w, "derf", A=A, B_query=B, role="key")
        prod = fq * fk * w.shape[0]
        se = prod.std() / math.sqrt(w.shape[0])
        assert abs(prod.mean() - math.exp(x @ y)) < 4 * se


def test_attention_fits_on_q_and_k():
    rng = np.random.default_rng(0)
    Q, K, V = rng.normal(size=(16, D)) * 0.4, rng.normal(size=(20, D)) * 0.4, rng.normal(size=(20, 2))
    W = rfkernels.draw_projections(32, D, seed=1)
    got = favor_attention(Q, K, V, W, "saderf")
    ref = favor_attention(Q, K, V, W, "derf", **fit_derf("saderf", Q, K).keywords)
    assert got.kind == "saderf" and np.array_equal(got.output, ref.output)
    plain = favor_attention(Q, K, V, W, "derf", A=0.0, B_query=np.eye(D))
    assert np.array_equal(plain.output, favor_attention(Q, K, V, W, "positive").output)
    # a dense A (SDERF): positive features in d + 2 dimensions, DERF's attention to rounding
    for causal in (False, True):
        got = favor_attention(Q, K[:16], V[:16], W, "sderf", causal=causal)
        kw = fit_derf("sderf", Q, K[:16]).keywords
        fq = feature_map(Q, W, "derf", **kw, role="query")
        fk = feature_map(K[:16], W, "derf", **kw, role="key")
        s = np.tril(fq @ fk.T) if causal else fq @ fk.T
        ref = (s @ V[:16]) / s.sum(axis=1)[:, None]
        assert got.kind == "sderf" and np.max(np.abs(got.output - ref)) < 1e-12
    with pytest.raises(ValueError, match="preset"):
        favor_attention(Q, K, V, W, "saderf", preset="performer-pytorch")


def test_feature_map_refuses_an_unfitted_kind():
    x, _ = _pair()
    with pytest.raises(ValueError, match="fit_derf"):
        feature_map(x, np.ones((2, D)), "saderf")


def test_diagnose_fits_saderf_and_aderf_on_each_head():
    from rfkernels.analysis import diagnose

    rng = np.random.default_rng(3)
    Q = rng.normal(size=(12, D)) * np.array([0.2, 0.5, 1.0, 1.5])
    K = rng.normal(size=(10, D)) * np.array([1.5, 1.0, 0.5, 0.2])
    res = diagnose(Q, K, kinds=["oprf", "saderf"], m=[8], ensembles=["iid"], draws=2, scale=1.0)
    row = next(r for r in res.rows if r["kind"] == "saderf")
    fit = fit_derf("saderf", Q, K)
    assert row["params"] == {"A": fit.params.a}
    # every pair (12 x 10 < the pair sample): the kernel-level mean is DERF's exact MSE at its fit
    X, Y = np.repeat(Q, 10, axis=0), np.tile(K, (12, 1))
    ref = np.mean(np.exp(theory.exact_mse(X, Y, 8, "derf", log=True, **fit.keywords)
                         - 2.0 * np.einsum("ij,ij->i", X, Y)))
    assert row["kernel_rel_mse_mean"] == pytest.approx(ref, rel=1e-9)
    for kind, match in (("sderf", "not diagnosed yet"), ("derf", "parameters are the user's")):
        with pytest.raises(ValueError, match=match):
            diagnose(Q, K, kinds=[kind])


@pytest.mark.parametrize("call, match", [
    (lambda X, Y, W: rfkernels.estimate(X, Y, W, "derf", A=0.05), "a query map and a key map"),
    (lambda X, Y, W: theory.exact_mse(X, Y, 4, "derf", A=0.0, B_query=np.eye(D + 1)), "d = 4"),
    (lambda X, Y, W: feature_map(X, W, "derf", A=0.0, B_query=np.eye(D + 1)), "d = 4"),
    (lambda X, Y, W: monte_carlo_mse(X[0], Y[0], 4, "derf", A=0.0, B_query=np.eye(D + 1), trials=10),
     "d = 4"),
    (lambda X, Y, W: favor_attention(X, Y, Y, W, "derf", A=0.0, B_query=np.eye(D + 1)), "d = 4"),
    (lambda X, Y, W: monte_carlo_mse(X[0], Y[0], 4, "saderf", population=(np.ones((5, 3)),) * 2,
                                     trials=10), "population holds vectors of d = 3"),
    (lambda X, Y, W: monte_carlo_mse(X[0], Y[0], 4, estimator("derf", A=0.05, B_query=B),
                                     B_query=B, trials=10), "B_query, B_key"),
    (lambda X, Y, W: favor_attention(X, Y, Y, W, "positive", B_query=B), "B_query is the parameter"),
    (lambda X, Y, W: favor_attention(X, Y, Y, None, "derf", A=0.05, B_query=B), "W is required"),
    (lambda X, Y, W: estimator("derf", A=0.05, B_query=np.ones(D)), r"got shape \(4,\)"),
])
def test_refusals_name_the_problem(call, match):
    X, Y = _population()
    W = np.ones((3, D))
    with pytest.raises(ValueError, match=match):
        call(X, Y, W)


def test_gaussian_kernel_fits_on_the_scaled_rows():
    rng = np.random.default_rng(5)
    P = rng.normal(size=(200, D))
    gamma = 0.05
    got = theory.exact_mse(P[:20], P[20:40], 8, "saderf", kernel="gaussian", gamma=gamma,
                           population=(P, P[::-1]))
    c = math.sqrt(2.0 * gamma)
    fit = fit_derf("saderf", c * P, c * P[::-1])
    ref = theory.exact_mse(P[:20], P[20:40], 8, "derf", kernel="gaussian", gamma=gamma, **fit.keywords)
    assert np.array_equal(got, ref)
