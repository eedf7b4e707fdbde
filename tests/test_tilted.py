"""Kind 'data-tilted' (rfkernels.estimators.tilted): its draw, unbiasedness, attention, fit rows,
diagnose's cross-fitting, rank's Monte Carlo and its place against the floor."""

import math

import numpy as np
import pytest

import rfkernels
from rfkernels import draw_projections, favor_attention, softmax_attention
from rfkernels.analysis import diagnose
from rfkernels.analysis.diagnosis.views import fit_views, view_inputs
from rfkernels.estimators import estimator, registry, tilted
from rfkernels.floor import attention_floor, kernel_floor

KIND = "data-tilted"


def _population(n=40, d=6, sd=0.35, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)) * sd, rng.standard_normal((n, d)) * sd


def _fitted(x, y, m=None):
    return estimator(KIND, m=m, d=x.shape[1]).fitted_on(x, y)


def _naive_features(x, w, policy):
    """phi_i(x) = exp(omega_i.x - |x|^2/2) sqrt(Omega/M)(omega_i) / sqrt(m), M a loop over rows."""
    m, d = w.shape
    s = tilted.shifts(policy, m)
    omega = w + s
    phi = np.empty((x.shape[0], m))
    for i in range(m):
        density = np.mean([math.exp(omega[i] @ s[l] - 0.5 * s[l] @ s[l]) for l in range(m)])
        phi[:, i] = np.exp(x @ omega[i] - 0.5 * np.sum(x * x, axis=1)) / math.sqrt(density * m)
    return phi


def test_the_features_are_the_mixture_weighted_positive_features_row_by_row():
    x, y = _population()
    est = _fitted(x, y)
    w = draw_projections(23, 6, seed=4)
    got = est.kind.feature_map.features(x[:5], w, est.params, "query", np)
    np.testing.assert_allclose(got, _naive_features(x[:5], w, est.params), rtol=1e-11)


def test_the_fit_is_deterministic_and_made_of_the_populations_pairs():
    x, y = _population()
    a, b = tilted.fit(x, y), tilted.fit(x.copy(), y.copy())
    np.testing.assert_array_equal(a["centres"], b["centres"])
    assert a["centres"].shape == (tilted.POOL, 6) and a["fitted_rows"] == (40, 40)
    sums = (x[:, None, :] + y[None, :, :]).reshape(-1, 6)
    dist = np.min(np.sum((a["centres"][:64, None, :] - sums[None]) ** 2, axis=2), axis=1)
    assert np.all(dist < 1e-24)  # every centre is some q_i + k_j
    # each query holds POOL / n centres
    counts = np.bincount(((np.arange(tilted.POOL) + 0.5) / tilted.POOL * 40).astype(int))
    assert set(counts) == {tilted.POOL // 40, tilted.POOL // 40 + 1}


def test_one_row_in_ten_is_defensive_and_bounds_the_weight():
    x, y = _population()
    policy = _fitted(x, y).params
    m = 57
    s = tilted.shifts(policy, m)
    assert np.all(s[::10] == 0.0) and np.all(np.any(s[np.arange(m) % 10 != 0] != 0.0, axis=1))
    omega = draw_projections(m, 6, seed=1) + s
    lam = tilted.log_weights(policy, omega)
    assert np.all(lam <= math.log(m / 6) + 1e-12)  # Omega / M <= m / #defensive rows (6)


def test_unbiased_for_every_pair_over_draws():
    x, y = _population(30, 4, 0.4, seed=2)
    est = _fitted(x, y)
    fmap = est.kind.feature_map
    draws, m = 1500, 16
    vals = np.empty((draws, 5))
    for t in range(draws):
        w = draw_projections(m, 4, seed=100 + t)
        vals[t] = np.sum(fmap.features(x[:5], w, est.params, "query", np)
                         * fmap.features(y[:5], w, est.params, "key", np), axis=1)
    z = (vals.mean(0) - np.exp(np.sum(x[:5] * y[:5], axis=1))) / (vals.std(0, ddof=1) / math.sqrt(draws))
    assert np.all(np.abs(z) < 4), z


def test_attention_is_the_quadratic_computation_with_its_features_fitted_on_the_stated_rows():
    q, k = _population(24, 5, 0.5, seed=3)
    v = np.random.default_rng(1).standard_normal((24, 2))
    w = draw_projections(32, 5, seed=2)
    for rows in (None, (q[::2], k)):
        res = favor_attention(q, k, v, w, KIND, fit_rows=rows)
        est = _fitted(*((q, k) if rows is None else rows))
        pq = est.kind.feature_map.features(q, w, est.params, "query", np)
        pk = est.kind.feature_map.features(k, w, est.params, "key", np)
        want = (pq @ pk.T @ v) / (pq @ pk.T).sum(axis=1)[:, None]
        np.testing.assert_allclose(res.output, want, rtol=1e-10)
        assert res.kind == KIND
    assert not np.allclose(favor_attention(q, k, v, w, KIND).output,
                           favor_attention(q, k, v, w, KIND, fit_rows=(q[::2], k)).output)


@pytest.mark.parametrize("rows, message", [
    ((np.zeros((3, 5)),), "fit_rows must be a pair"),
    ((np.zeros((3, 4)), np.zeros((3, 5))), r"fit_rows\[0\] \(Q_fit\) has d = 4"),
    ((np.full((3, 5), np.nan), np.zeros((3, 5))), "fit_rows"),
])
def test_bad_fit_rows_are_refused_in_one_line(rows, message):
    q, k = _population(6, 5)
    with pytest.raises(ValueError, match=message) as err:
        favor_attention(q, k, np.ones((6, 1)), draw_projections(4, 5, seed=0), KIND, fit_rows=rows)
    assert "\n" not in str(err.value)


def test_fit_rows_belong_to_the_data_fitted_kinds_and_one_pair_is_refused():
    q, k = _population(6, 5)
    w = draw_projections(4, 5, seed=0)
    with pytest.raises(ValueError, match="fit_rows is for the data-fitted kinds"):
        favor_attention(q, k, np.ones((6, 1)), w, "positive", fit_rows=(q, k))
    with pytest.raises(ValueError, match="never on one pair"):
        estimator(KIND, d=5).fitted_on(q[:1], k[:1])
    with pytest.raises(ValueError, match="no public feature_map parameters"):
        rfkernels.estimator(KIND, m=4, d=5).fit(q, k).draw(0)
    with pytest.raises(ValueError, match="no scalar reduction"):
        rfkernels.estimator(KIND, m=4, d=5).fit(q, k).monte_carlo(q[0], k[0], trials=10)


def test_diagnose_measures_each_query_row_with_the_policy_fitted_on_the_other_half():
    q, k = _population(10, 4, 0.5, seed=4)
    view = fit_views([KIND], q, k)[KIND]
    odd_fit, even_fit = view.halves
    np.testing.assert_array_equal(odd_fit.params.centres, tilted.fit(q[1::2], k)["centres"])
    np.testing.assert_array_equal(even_fit.params.centres, tilted.fit(q[0::2], k)["centres"])
    rows = np.array([0, 3, 4, 7])
    w = draw_projections(8, 4, seed=0)
    runs = view_inputs(view, rows, w)
    assert [list(pos) for pos, *_ in runs] == [[0, 2], [1, 3]]
    for (pos, qt, kt, wt, kind, params), est in zip(runs, view.halves):
        assert kind == "positive" and qt.shape == (2, 5) and wt.shape == (8, 5)
        want = favor_attention(q[rows[pos]], k, np.eye(10), w, KIND, fit_rows=(
            q[1::2] if est is odd_fit else q[0::2], k)).output
        got = favor_attention(qt, kt, np.eye(10), wt, kind).output
        np.testing.assert_allclose(got, want, rtol=1e-10)


def test_diagnose_runs_it_beside_the_floor():
    q, k = _population(64, 8, 0.6, seed=5)
    v = np.random.default_rng(0).standard_normal((64, 3))
    res = diagnose(q, k, v, m=[64], kinds=["positive", KIND], ensembles=["iid"], draws=6, seed=0,
                   workers=1, floor=True)
    rows = {r["kind"]: r for r in res.rows}
    assert math.isfinite(rows[KIND]["attention_mse"]) and rows[KIND]["attention_mse_stderr"] > 0
    assert rows[KIND]["floor_mse"] == rows["positive"]["floor_mse"]  # one representation, one floor
    assert KIND not in rfkernels.analysis.diagnosis.attention_kinds()  # opt-in, like saderf


def test_kernel_level_mse_is_at_or_above_the_floor_of_independent_draws():
    """Measured: the stratified rows (a coupling) do not go below the floor on this population."""
    x, y = _population(30, 4, 0.5, seed=6)
    est = _fitted(x, y)
    fmap, m, draws = est.kind.feature_map, 16, 800
    exact = np.exp(np.sum(x * y, axis=1))
    rel = np.empty(draws)
    for t in range(draws):
        w = draw_projections(m, 4, seed=t)
        e = np.sum(fmap.features(x, w, est.params, "query", np)
                   * fmap.features(y, w, est.params, "key", np), axis=1)
        rel[t] = np.mean((e / exact - 1.0) ** 2)
    floor = kernel_floor(x, y, seed=1)
    se = rel.std(ddof=1) / math.sqrt(draws)
    assert floor.value / m <= rel.mean() + 4 * math.hypot(se, floor.stderr / m), (
        floor.value / m, rel.mean(), se)


def test_attention_mse_held_out_is_at_or_above_the_attention_floor_where_first_order_holds():
    from rfkernels.analysis import synthetic_qkv

    q, k, v = synthetic_qkv(L=64, d=8, heads=1)
    s = 8 ** -0.25
    q, k, v = s * q[0], s * k[0], v[0]
    test = q[1::2]
    floor = attention_floor(test, k, v, scale=1.0, seed=2)
    m, draws = 64, 200
    assert floor.valid_at(m)
    exact = softmax_attention(test, k, v)
    errs = [np.mean((favor_attention(test, k, v, draw_projections(m, 8, seed=t), KIND,
                                     fit_rows=(q[0::2], k), nonpositive="divide").output
                     - exact) ** 2) for t in range(draws)]
    ms = np.mean(exact ** 2)
    mc, se = np.mean(errs) / ms, np.std(errs, ddof=1) / math.sqrt(draws) / ms
    assert floor.value / m <= mc + 4 * math.hypot(se, floor.stderr / m), (floor.value / m, mc, se)


def test_rank_gives_it_a_monte_carlo_mse_with_its_error_on_a_population_only():
    x, y = _population(50, 4, 0.3, seed=7)
    ranking = rfkernels.rank_estimators(x, y, r=16)
    row = ranking.row(KIND)
    assert row.rank is None and "Monte Carlo only" in row.reason
    assert row.mc_mse > 0 and 0 < row.mc_stderr < row.mc_mse
    # against the literal Monte Carlo of every pair, mean over the pairs
    est = rfkernels.estimator(KIND, m=16, d=4).fit(x, y)
    batch = est.monte_carlo(x, y, trials=600, method="literal", proposal="plain", seed=3)
    mse = np.mean([r.mse for r in batch])
    se = math.sqrt(np.sum([r.stderr ** 2 for r in batch])) / len(batch)
    assert abs(row.mc_mse - mse) < 4 * math.hypot(row.mc_stderr, se), (row.mc_mse, mse)
    pair = rfkernels.rank_estimators(x[0], y[0], r=16).row(KIND)
    assert pair.mc_mse is None and dict(pair.null_reasons)["mc_mse"].startswith("rank's Monte Carlo")


def test_registered_as_one_module_with_the_positive_representation():
    entry = registry.entry("kind", KIND)
    assert entry.population and entry.held_out_fit and entry.representation == "positive"
    assert entry.feature_map.dense_runs_as == "positive"
    assert not estimator(KIND).supports.reduced and not estimator(KIND).supports.exact_mse


def test_the_transformer_fits_it_on_the_training_rows_and_maps_new_rows():
    rng = np.random.default_rng(8)
    X, X_new = 0.4 * rng.standard_normal((120, 5)), 0.4 * rng.standard_normal((30, 5))
    tr = rfkernels.RandomFeatures(kind=KIND, n_components=64, random_state=0).fit(X)
    np.testing.assert_array_equal(tr.fitted_params_.centres, tilted.fit(X, X)["centres"])
    phi = tr.transform(X_new)
    assert phi.shape == (30, 64) and np.all(phi > 0)
    np.testing.assert_allclose(tr.kernel(X_new), phi @ phi.T, rtol=1e-12)
    with pytest.raises(ValueError, match="no closed form"):
        tr.expected_mse(X_new)
    gauss = rfkernels.RandomFourierFeatures(kind=KIND, n_components=32, gamma=0.5,
                                            random_state=0).fit(X)
    c = math.sqrt(2 * 0.5)  # the Gaussian kernel's scale: fitted on the scaled rows
    np.testing.assert_array_equal(gauss.fitted_params_.centres, tilted.fit(c * X, c * X)["centres"])
    assert np.all(np.isfinite(gauss.kernel(X_new)))
