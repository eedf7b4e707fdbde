"""The variance floor (rfkernels.floor) against MATH.md's checks, mpmath, exact MSEs and Monte Carlo."""

import math

import mpmath
import numpy as np
import pytest

import rfkernels
from rfkernels import draw_projections, favor_attention, softmax_attention
from rfkernels.floor import attention_floor, kernel_floor


def _population(n=40, d=8, sd=0.3, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * sd, rng.standard_normal((n, d)) * sd


def _z(floor, exact):
    return (floor.value - exact) / floor.stderr


def test_one_pair_has_floor_zero_and_identical_pairs_too():
    x, y = _population(1, 4)
    one = kernel_floor(x, y)
    assert one.value == 0.0 and one.stderr == 0.0 and one.reached
    same = kernel_floor(np.repeat(x, 5, axis=0), np.repeat(y, 5, axis=0))
    assert abs(same.value) < 1e-12


def test_two_collinear_pairs_against_the_one_dimensional_integral_in_mpmath():
    a, b = 0.7, 1.9
    e = np.array([1.0, 0.0, 0.0])
    X = np.array([a * e / 2, b * e / 2])
    floor = kernel_floor(X, X.copy(), rtol=0.003, seed=1)
    mpmath.mp.dps = 30

    def integrand(z):
        g2 = (mpmath.exp(2 * a * z - a * a) + mpmath.exp(2 * b * z - b * b)) / 2
        return mpmath.sqrt(g2) * mpmath.npdf(z)

    exact = float(mpmath.quad(integrand, [-mpmath.inf, 0, mpmath.inf]) ** 2 - 1)
    assert abs(_z(floor, exact)) < 4, (floor.value, floor.stderr, exact)


def test_mutually_orthogonal_long_pairs_tend_to_n_minus_one_and_say_so():
    n = 6
    X = np.eye(n) * 4.0  # u_p = 8 e_p: tilts that never overlap
    floor = kernel_floor(X, X.copy())
    assert floor.value == pytest.approx(n - 1, rel=2e-3)
    assert floor.bound == pytest.approx(n - 1) and floor.near_bound
    assert floor.value <= floor.bound + 4 * floor.stderr


@pytest.mark.parametrize("representation", ["positive", "pairing", "trig"])
def test_all_pairs_equal_the_matched_grid_of_every_query_and_key(representation):
    rng = np.random.default_rng(3)
    X, Y = rng.standard_normal((20, 6)) * 0.35, rng.standard_normal((15, 6)) * 0.35
    every = kernel_floor(X, Y, pairs="all", representation=representation, seed=1)
    grid = kernel_floor(np.repeat(X, 15, axis=0), np.tile(Y, (20, 1)), representation=representation,
                        seed=2)
    z = (every.value - grid.value) / math.hypot(every.stderr, grid.stderr)
    assert abs(z) < 4, (every.value, grid.value)


def test_weights_count_a_pair_as_often_as_it_is_weighted():
    X, Y = _population(12, 5, 0.4, seed=4)
    weighted = kernel_floor(X, Y, weights=np.r_[np.full(6, 2.0), np.ones(6)], seed=1)
    doubled = kernel_floor(np.r_[X[:6], X], np.r_[Y[:6], Y], seed=2)
    z = (weighted.value - doubled.value) / math.hypot(weighted.stderr, doubled.stderr)
    assert abs(z) < 4
    assert weighted.bound == pytest.approx(18 - 1)  # max 1/w - 1: the pairs of weight 1/18


def test_the_gaussian_kernel_is_the_softmax_kernel_at_the_scaled_inputs():
    X, Y = _population(10, 4, 1.0)
    gamma = 0.3
    c = math.sqrt(2 * gamma)
    got = kernel_floor(X, Y, kernel="gaussian", gamma=gamma, seed=5)
    assert got.value == kernel_floor(c * X, c * Y, seed=5).value


def _mean_relative_mse(est, X, Y, m):
    return float(np.mean(est.mse(X, Y, m=m) / np.exp(2 * np.sum(X * Y, axis=1))))


def test_floor_over_m_is_below_every_estimator_of_its_representation_with_independent_draws():
    """MATH.md: FAVOR+, OPRF with one A, SDERF (positive), the DERF family on its transformed
    pairs, hyperbolic (the pairing) and trig, all iid: F / m at most their exact mean MSE."""
    X, Y = _population()
    m = 8
    cases = [(rfkernels.estimator("positive"), "positive"),
             (rfkernels.estimator("oprf", A="auto").fit(X, Y), "positive"),
             (rfkernels.estimator("sderf").fit(X, Y), None),
             (rfkernels.estimator("saderf").fit(X, Y), None),
             (rfkernels.estimator("aderf").fit(X, Y), None),
             (rfkernels.estimator("hyperbolic"), "pairing"),
             (rfkernels.estimator("trig"), "trig")]
    for est, rep in cases:
        floor = kernel_floor(X, Y, representation=est if rep is None else rep)
        r = m * floor.features_per_draw
        exact = _mean_relative_mse(est, X, Y, m)
        assert floor.value / r <= exact + 4 * floor.stderr / r, (est.kind, floor.value / r, exact)


def test_a_derf_kind_is_its_transformed_population_and_sderf_the_plain_one():
    X, Y = _population(seed=6)
    sderf = rfkernels.estimator("sderf").fit(X, Y)
    plain = kernel_floor(X, Y, seed=3)
    assert kernel_floor(X, Y, representation=sderf, seed=3).value == pytest.approx(plain.value,
                                                                                  rel=1e-9)
    saderf = rfkernels.estimator("saderf").fit(X, Y)
    xt, yt = saderf.spec.kind.representation_pairs(saderf.spec.params, X, Y)
    assert np.allclose(np.sum(xt * yt, axis=1), np.sum(X * Y, axis=1))
    assert kernel_floor(X, Y, representation=saderf, seed=3).value == \
        kernel_floor(xt, yt, seed=3).value


def _favor_mse(q, k, v, kind, m, draws):
    exact = softmax_attention(q, k, v)
    errs = [np.mean((favor_attention(q, k, v, draw_projections(m, q.shape[1], seed=t), kind,
                                     nonpositive="divide").output - exact) ** 2)
            for t in range(draws)]
    scale = np.mean(exact ** 2)
    return np.mean(errs) / scale, np.std(errs, ddof=1) / math.sqrt(draws) / scale


@pytest.mark.parametrize("kind, representation", [("positive", "positive"),
                                                  ("hyperbolic", "pairing"), ("trig", "trig")])
def test_attention_floor_is_below_the_monte_carlo_attention_mse_where_first_order_holds(
        kind, representation):
    from rfkernels.analysis import synthetic_qkv

    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    q, k, v = q[0], k[0], v[0]
    floor = attention_floor(q, k, v, representation=representation, seed=2)
    m = 64
    r = m * floor.features_per_draw
    assert floor.valid_at(r)
    s = 8 ** -0.25
    mc, se = _favor_mse(s * q, s * k, v, kind, m, 200)
    assert floor.value / r <= mc + 4 * math.hypot(se, floor.stderr / r), (floor.value / r, mc, se)


def test_attention_floor_validity_follows_the_normalisers_at_r():
    from rfkernels.analysis import synthetic_qkv

    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    floor = attention_floor(q[0], k[0], v[0])
    r_edge = floor.normaliser_rel_var / 0.1 ** 2
    assert floor.valid_at(math.ceil(r_edge) + 1) and not floor.valid_at(max(1, math.floor(r_edge) - 1))


@pytest.mark.parametrize("call, message", [
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((4, 2))), "pairs='matched' needs as many rows"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 3))), "X and Y must share d"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), pairs="some"), "pairs"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), weights=[1, -1, 1]), "weights must be"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((4, 2)), pairs="all", weights=np.ones(3)),
     r"weights must have shape \(3, 4\)"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), representation="offset"),
     "has no registered representation"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), representation="saderf"),
     "pass the fitted estimator"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), representation="cosine"),
     "representation must be one of"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), gamma=0.5), "gamma is for"),
    (lambda: kernel_floor(np.ones((3, 2)), np.ones((3, 2)), rtol=0), "rtol must be in"),
    (lambda: attention_floor(np.ones((3, 2)), np.ones((4, 2)), np.ones((3, 1))), "one row per key"),
    (lambda: attention_floor(np.ones((3, 2)), np.ones((4, 2)), np.zeros((4, 1))), "output is zero"),
])
def test_bad_input_is_refused_in_one_line_before_any_work(call, message):
    with pytest.raises((ValueError, TypeError), match=message) as info:
        call()
    assert "\n" not in str(info.value)


def test_coupled_draws_go_below_the_floor_of_independent_draws():
    """MATH.md: the floor bounds independent draws only. On 40 pairs of norm 0.7 in d = 8, m = 8:
    positive simplex, hyperbolic orthogonal (the pairing) and trig orthogonal, chi or antithetic
    norms, all below their representation's floor at the same r."""
    rng = np.random.default_rng(0)
    unit = rng.standard_normal((80, 8))
    unit /= np.linalg.norm(unit, axis=1, keepdims=True)
    X, Y = 0.7 * unit[:40], 0.7 * unit[40:]
    m = 8
    for kind, ensemble, norms, representation in [
            ("positive", "simplex", "chi", "positive"),
            ("hyperbolic", "orthogonal", "chi", "pairing"),
            ("hyperbolic", "orthogonal", "antithetic", "pairing"),
            ("trig", "orthogonal", "chi", "trig"),
            ("trig", "orthogonal", "antithetic", "trig")]:
        floor = kernel_floor(X, Y, representation=representation)
        r = m * floor.features_per_draw
        coupled = _mean_relative_mse(rfkernels.estimator(kind, ensemble=ensemble, norms=norms), X, Y, m)
        assert coupled < floor.value / r - 4 * floor.stderr / r, (kind, ensemble, norms, coupled,
                                                                  floor.value / r)


def test_rank_gives_each_population_row_its_representations_floor_in_its_units():
    """rank_estimators: the floor of the mean MSE (pairs weighted by K^2) at the row's outputs;
    every unbiased estimator with independent draws (iid, chi norms) at or above it."""
    from rfkernels import rank_estimators

    X, Y = _population(seed=7)
    ranking = rank_estimators(X, Y, r=16)
    json_ready = ranking.to_dict()
    assert all("floor_mse" in row for row in json_ready["rows"])
    checked = 0
    for row in ranking.rows:
        if row.ensemble == "iid" and row.norms == "chi" and row.mse is not None \
                and row.floor_mse is not None:
            assert row.mse >= row.floor_mse - 4 * row.floor_stderr, (row.name, row.mse, row.floor_mse)
            checked += 1
    assert checked >= 6
    positive = ranking.row("positive", "iid", "chi")
    k2 = np.exp(2 * np.sum(X * Y, axis=1))
    alone = kernel_floor(X, Y, weights=k2, seed=0, rtol=0.01)
    assert positive.floor_mse == pytest.approx(alone.value / 16 * k2.mean(), rel=1e-9)
    assert ranking.row("offset", "iid", "chi").floor_mse is None
    one = rank_estimators(X[0], Y[0], r=16).row("positive", "iid", "chi").to_dict()
    assert one["floor_mse"] is None and "populations" in one["null_reasons"]["floor_mse"]


def test_constant_values_have_floor_zero_and_say_why():
    X, Y = _population(20, 4, 1.0)
    floor = attention_floor(X, Y, np.full((20, 2), 3.0))
    assert floor.value == 0.0 and floor.reached and "returns o exactly" in floor.sampler
    assert floor.valid_at(1)


def test_the_normalisers_variance_under_the_optimal_policy_comes_with_its_error():
    from rfkernels.analysis import synthetic_qkv

    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    floor = attention_floor(q[0], k[0], v[0])
    assert 0 < floor.normaliser_rel_var_stderr < 0.2 * floor.normaliser_rel_var
    assert floor.valid_from() == pytest.approx(floor.normaliser_rel_var / 0.1 ** 2, rel=1e-12)


def test_all_pairs_far_apart_fall_back_to_log_space_with_the_same_floor(monkeypatch):
    """Norms of about 18: the factored matrix products underflow and the draws take the log-space path."""
    from rfkernels import floor as module

    rng = np.random.default_rng(8)
    X, Y = rng.standard_normal((8, 4)) * 9.0, rng.standard_normal((6, 4)) * 9.0
    direct = []
    original = module._Population._direct

    def counted(self, cx, cy):
        direct.append(cx[0][0].shape[0])
        return original(self, cx, cy)

    monkeypatch.setattr(module._Population, "_direct", counted)
    every = kernel_floor(X, Y, pairs="all", seed=1)
    grid = kernel_floor(np.repeat(X, 6, axis=0), np.tile(Y, (8, 1)), seed=2)
    assert sum(direct) > 0
    assert abs(every.value - grid.value) / math.hypot(every.stderr, grid.stderr) < 4


def test_the_history_doubles_the_pair_sample_up_to_the_population_or_max_pairs():
    rng = np.random.default_rng(9)
    X, Y = rng.standard_normal((10000, 3)) * 0.8, rng.standard_normal((10000, 3)) * 0.8
    whole = kernel_floor(X, Y, rtol=0.02)
    assert [h[0] for h in whole.history] == [4096, 8192, 10000]
    assert whole.pairs == whole.population == 10000 and whole.history[-1][2] == whole.value
    capped = kernel_floor(X, Y, rtol=0.02, max_pairs=5000)
    assert [h[0] for h in capped.history] == [4096, 5000]
    assert capped.pairs == 5000 and capped.population == 10000
    grid = kernel_floor(X[:100], Y[:90], pairs="all", rtol=0.02)
    assert [h[0] for h in grid.history][-1] == 9000 and grid.history[0][0] < 9000


@pytest.mark.parametrize("causal", [False, True])
def test_h_is_the_first_order_sum_over_rows_computed_term_by_term(causal):
    """H(w) = sum_q |phi(q).(S_v - o_q S_1)|^2 / D_q^2 with each row's keys (all, or j <= q),
    against a loop over rows and keys, for the positive map and the pairing."""
    from rfkernels.estimators import registry
    from rfkernels.floor import _Head

    rng = np.random.default_rng(10)
    q, k, v = rng.normal(size=(6, 3)) * 0.6, rng.normal(size=(6, 3)) * 0.6, rng.normal(size=(6, 2))
    omega = rng.normal(size=(3, 3))
    for name in ("positive", "pairing"):
        rep = registry.entry("representation", name)
        head = _Head(rep, q, k, v, 0.1, causal)
        head.tilted = False  # logs() then returns log sqrt(H)
        got = 2.0 * head.logs(omega)[0]
        for b, w in enumerate(omega):
            phis = lambda x: np.array([np.exp(s * (w @ x) - x @ x / 2) for s in rep.tilt_signs]) \
                / math.sqrt(len(rep.tilt_signs))
            total = 0.0
            for i in range(6):
                keys = range(i + 1) if causal else range(6)
                kern = np.array([math.exp(q[i] @ k[j]) for j in keys])
                o = kern @ v[list(keys)] / kern.sum()
                t = sum(phis(q[i]) @ phis(k[j]) * (v[j] - o) for j in keys)
                total += (t @ t) / kern.sum() ** 2
            assert math.exp(got[b]) == pytest.approx(total, rel=1e-9)


def test_causal_floor_is_below_prefix_sum_favor_and_zero_for_one_row():
    from rfkernels.analysis import synthetic_qkv

    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    q, k, v = q[0], k[0], v[0]
    floor = attention_floor(q, k, v, causal=True, seed=3)
    assert floor.causal and floor.valid_at(64)
    s = 8 ** -0.25
    exact = softmax_attention(s * q, s * k, v, causal=True)
    errs = [np.mean((favor_attention(s * q, s * k, v, draw_projections(64, 8, seed=t), "positive",
                                     causal=True, nonpositive="divide").output - exact) ** 2)
            for t in range(200)]
    mc, se = np.mean(errs) / np.mean(exact ** 2), np.std(errs, ddof=1) / math.sqrt(200) / np.mean(exact ** 2)
    assert floor.mse(64) <= mc + 4 * math.hypot(se, floor.stderr / 64)
    assert attention_floor(q[:1], k[:1], v[:1], causal=True).value == 0.0
    with pytest.raises(ValueError, match="one key per query row"):
        attention_floor(q[:3], k, v, causal=True)
