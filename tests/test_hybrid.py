"""Kind 'hybrid' (angular hybrid random features): its map, its exact MSE, its placement, its layers.

The exact MSE is checked against an mpmath evaluation written from the
moments themselves (not from the module's code) and against Monte Carlo
(|z| < 4, tame pairs: norms <= 1). The placement identity
``MSE(reversed) - MSE(registered) = (1 - 2p)(Var B - Var A)`` is checked at
random geometries.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest

import rfkernels
from rfkernels import draw_kind_projections, draw_projections, estimate, feature_map, theory
from rfkernels.estimators import hybrid
from rfkernels.ranking import rank_estimators

N = hybrid.ANGULAR


def _mp_mse(x, y, m, placement="1-theta/pi"):
    """The hybrid's MSE in mpmath (60 digits), from the single-feature moments."""
    mp.mp.dps = 60
    x = [mp.mpf(float(v)) for v in x]
    y = [mp.mpf(float(v)) for v in y]
    dot = lambda a, b: mp.fsum(p * q for p, q in zip(a, b))  # noqa: E731
    xx, yy, xy = dot(x, x), dot(y, y), dot(x, y)
    s = [a + b for a, b in zip(x, y)]
    z = [a - b for a, b in zip(x, y)]
    ss, zz = dot(s, s), dot(z, z)
    sm = mp.e ** xy
    var_a = (mp.e ** (xx + yy) * (1 + mp.e ** (-2 * zz)) / 2 - sm ** 2) / m  # E[cos^2] = (1 + e^{-2|z|^2})/2
    var_b = (mp.e ** (2 * ss - xx - yy) - sm ** 2) / m  # E[e^{2 w.s}] = e^{2|s|^2}
    cov = (mp.e ** (2 * xy) * mp.cos(xx - yy) - sm ** 2) / m  # E[e^{w.s} cos w.z]
    p = mp.acos(xy / mp.sqrt(xx * yy)) / mp.pi
    e1, e2 = p, p * p + p * (1 - p) / N  # E p-hat, E p-hat^2 (binomial(n, p)/n)
    near, far = 1 - 2 * e1 + e2, e2  # E(1 - p-hat)^2, E p-hat^2
    c_a, c_b = (near, far) if placement == "1-theta/pi" else (far, near)
    return c_a * var_a + c_b * var_b + 2 * (e1 - e2) * cov


GEOMETRIES = [(4, 0.5, 0.5, 0.3), (4, 0.8, 0.3, 1.2), (16, 1.0, 1.0, 2.0), (16, 1.5, 0.7, 2.9),
              (8, 3.0, 2.5, 0.7), (8, 6.0, 6.0, 2.5), (32, 0.1, 4.0, 1.6), (3, 2.0, 2.0, 3.1)]


@pytest.mark.parametrize("d, nx, ny, angle", GEOMETRIES)
@pytest.mark.parametrize("placement", hybrid.PLACEMENTS)
def test_exact_mse_matches_mpmath(d, nx, ny, angle, placement):
    x, y = theory.pair(d, nx, ny, angle)
    for m in (1, 16, 1000):
        got = float(hybrid.log_mse_placed(theory.geometry(x, y), m, (x, y), placement))
        want = float(mp.log(_mp_mse(x, y, m, placement)))
        assert got == pytest.approx(want, rel=1e-9, abs=1e-9), (m, got, want)


def test_front_door_is_the_registered_placement():
    x, y = theory.pair(8, 0.9, 0.6, 1.1)
    est = rfkernels.estimator("hybrid", m=32, d=8)
    assert est.mse(x, y) == pytest.approx(float(_mp_mse(x, y, 32)), rel=1e-10)
    assert est.spec.output_dimension == 27 * 32
    with pytest.raises(ValueError, match="depends on x and y themselves"):
        theory.exact_mse(theory.geometry(x, y), None, 32, "hybrid")


def test_zero_at_both_ends_for_equal_lengths():
    """p-hat is exactly 0 at theta = 0 and 1 at theta = pi: the registered placement is exact there."""
    x = np.array([0.6, -0.3, 0.8])
    for y in (x, -x):
        assert float(hybrid.log_mse_placed(theory.geometry(x, y), 16, (x, y), "1-theta/pi")) == -math.inf
        w = draw_kind_projections(16, 3, "hybrid", seed=0)
        assert float(estimate(x, y, w, "hybrid")) == pytest.approx(math.exp(float(x @ y)), rel=1e-12)
    reversed_at_zero = hybrid.log_mse_placed(theory.geometry(x, x), 16, (x, x), "theta/pi")
    assert float(reversed_at_zero) > 0.0  # the positive estimator's variance


def test_placement_difference_identity():
    """MSE(theta/pi) - MSE(1 - theta/pi) = (1 - 2p)(Var B - Var A) exactly; the registered wins below pi/2."""
    rng = np.random.default_rng(3)
    for _ in range(40):
        d = int(rng.integers(2, 20))
        x, y = rng.normal(size=d) * rng.uniform(0.1, 1.5), rng.normal(size=d) * rng.uniform(0.1, 1.5)
        geom = theory.geometry(x, y)
        log_a, log_b, _, p, _ = hybrid.log_mse_parts(geom, 8, (x, y))
        reg, rev = (math.exp(float(hybrid.log_mse_placed(geom, 8, (x, y), pl))) for pl in hybrid.PLACEMENTS)
        diff = (1 - 2 * float(p)) * (math.exp(float(log_b)) - math.exp(float(log_a)))
        assert rev - reg == pytest.approx(diff, rel=1e-9, abs=1e-12 * max(reg, rev))
        if float(x @ y) > 0:  # theta < pi/2: Var trig < Var positive always (Lemma 2's ratio < 1/2)
            assert reg < rev


def _terms(x, y, m, draws, ensemble="iid"):
    half = 0.5 * float(x @ x + y @ y)
    out = np.empty((draws, 3))
    for t in range(draws):
        w = draw_kind_projections(m, x.size, "hybrid", ensemble=ensemble, seed=t)
        a = math.exp(half) * float(np.mean(np.cos(w[:m] @ (x - y))))
        b = math.exp(-half) * float(np.mean(np.exp(w[:m] @ (x + y))))
        out[t] = a, b, float(np.mean(np.sign(w[m:] @ x) != np.sign(w[m:] @ y)))
    return out


def _z(values, exact):
    return (values.mean() - exact) / (values.std(ddof=1) / math.sqrt(values.size))


@pytest.mark.parametrize("angle", [0.4, 1.3, 2.2, 2.9])
def test_both_placements_against_monte_carlo(angle):
    x, y = theory.pair(6, 0.8, 0.6, angle)
    m, draws = 8, 3000
    t = _terms(x, y, m, draws)
    sm = math.exp(float(x @ y))
    for placement, (wa, wb) in (("1-theta/pi", (1 - t[:, 2], t[:, 2])), ("theta/pi", (t[:, 2], 1 - t[:, 2]))):
        sq = (wa * t[:, 0] + wb * t[:, 1] - sm) ** 2
        exact = math.exp(float(hybrid.log_mse_placed(theory.geometry(x, y), m, (x, y), placement)))
        assert abs(_z(sq, exact)) < 4, (placement, sq.mean(), exact)
    # the covariance of the two estimators on shared rows, against its closed form
    cov = sm * sm * (math.cos(float(x @ x - y @ y)) - 1.0) / m
    assert abs(_z((t[:, 0] - sm) * (t[:, 1] - sm), cov)) < 4


def test_literal_monte_carlo_and_the_map():
    """The kind's literal Monte Carlo agrees with its theory; its map is the weighted estimators."""
    x, y = theory.pair(5, 0.7, 0.9, 1.7)
    res = rfkernels.estimator("hybrid", m=12, d=5).monte_carlo(x, y, trials=3000, seed=2, method="literal")
    assert abs(res.z) < 4 and abs(res.bias_z) < 4
    w = draw_kind_projections(12, 5, "hybrid", seed=9)
    t_half = 0.5 * float(x @ x + y @ y)
    a = math.exp(t_half) * float(np.mean(np.cos(w[:12] @ (x - y))))
    b = math.exp(-t_half) * float(np.mean(np.exp(w[:12] @ (x + y))))
    p = float(np.mean(np.sign(w[12:] @ x) != np.sign(w[12:] @ y)))
    assert float(estimate(x, y, w, "hybrid")) == pytest.approx((1 - p) * a + p * b, rel=1e-12)
    # the key map differs from the query map by the positive block's angular signs
    fq, fk = feature_map(x, w, "hybrid"), feature_map(x, w, "hybrid", role="key")
    assert fq.shape == (27 * 12,) and np.any(fq != fk)
    sign, logabs = rfkernels.log_estimate(x * 30, y * 30, w, "hybrid")  # far past float64's range
    assert np.isfinite(logabs) and sign != 0


def test_unbiased_with_orthogonal_base_rows():
    x, y = theory.pair(4, 0.6, 0.5, 1.0)
    t = _terms(x, y, 4, 3000, ensemble="orthogonal")
    h = (1 - t[:, 2]) * t[:, 0] + t[:, 2] * t[:, 1]
    assert abs(_z(h, math.exp(float(x @ y)))) < 4


def test_w_rows_and_capabilities():
    w = draw_projections(8, 3, seed=0)  # no angular rows beyond the 8
    with pytest.raises(ValueError, match=r"m \+ 8, d\).*got 8 rows"):
        estimate(np.ones(3), np.ones(3), w, "hybrid")
    wk = draw_kind_projections(8, 3, "hybrid", seed=0)
    np.testing.assert_array_equal(wk[:8], w)  # the ensemble's rows, then the extra ones
    np.testing.assert_array_equal(draw_kind_projections(8, 3, "trig", seed=0), w)
    est = rfkernels.estimator("hybrid", ensemble="orthogonal", m=8, d=3)
    assert not est.supports.exact_mse and "ensemble='iid'" in est.supports.exact_mse.reason
    assert not est.supports.reduced and "method='literal'" in est.supports.reduced.reason
    with pytest.raises(ValueError, match="a query map and a key map"):
        rfkernels.RandomFeatures(kind="hybrid", n_components=27 * 4).fit(np.ones((3, 3)))


def test_attention_is_the_quadratic_computation():
    rng = np.random.default_rng(1)
    q, k, v = rng.normal(size=(20, 4)) * 0.7, rng.normal(size=(20, 4)) * 0.7, rng.normal(size=(20, 3))
    w = draw_kind_projections(16, 4, "hybrid", seed=4)
    kern = estimate(q, k, w, "hybrid")
    for causal, mask in ((False, np.ones((20, 20))), (True, np.tril(np.ones((20, 20))))):
        km = kern * mask
        want = (km @ v) / km.sum(axis=1, keepdims=True)
        for stabilize in (True, False):
            got = rfkernels.favor_attention(q, k, v, w, "hybrid", causal=causal, stabilize=stabilize,
                                            nonpositive="divide")
            np.testing.assert_allclose(got.output, want, rtol=1e-9, atol=1e-12)
    big = rfkernels.favor_attention(q * 12, k * 12, v, w, "hybrid")  # stabilised: no overflow
    assert np.all(np.isfinite(big.output[np.setdiff1d(np.arange(20), big.nonpositive_rows)]))


def test_rank_compares_at_equal_outputs():
    x, y = theory.pair(16, 1.0, 1.0, 1.5)
    rows = {(r.kind, r.ensemble, r.norms): r for r in rank_estimators(x, y, r=432).rows}
    row = rows[("hybrid", "iid", "chi")]
    assert row.m == 16 and row.rank is not None
    assert row.mse == pytest.approx(rfkernels.estimator("hybrid", m=16, d=16).mse(x, y), rel=1e-12)
    assert rows[("hybrid", "orthogonal", "chi")].rank is None


def test_figure_is_the_theory_and_its_monte_carlo_agrees():
    from rfkernels.figures import hybrid as fig

    data = fig.compute(quick=True)
    rows = data["rows"]
    for row in rows[:: max(1, len(rows) // 60)]:
        x, y = theory.pair(fig.D, row["length"], row["length"], row["angle"])
        if row["curve"] in ("hybrid", "reversed"):
            place = "1-theta/pi" if row["curve"] == "hybrid" else "theta/pi"
            want = float(hybrid.log_mse_placed(theory.geometry(x, y), row["m"], (x, y), place))
        else:
            want = math.log(rfkernels.estimator(row["curve"], m=row["m"], d=fig.D).mse(x, y))
        assert math.log(row["relative_mse"]) == pytest.approx(want - 2.0 * float(x @ y), rel=1e-10)
    mc = data["monte_carlo"]
    assert mc and all(r["tail_ok"] for r in mc)
    for row in mc:
        x, y = theory.pair(fig.D, row["length"], row["length"], row["angle"])
        place = "1-theta/pi" if row["curve"] == "hybrid" else "theta/pi"
        log_mse = float(hybrid.log_mse_placed(theory.geometry(x, y), fig.M, (x, y), place))
        assert row["mse_exact"] == pytest.approx(math.exp(log_mse - 2.0 * float(x @ y)), rel=1e-12)
        assert abs(row["z"]) < 4, row


def test_diagnose_runs_it_when_asked_and_refuses_emulated_precision():
    from rfkernels.analysis import diagnose
    from rfkernels.analysis.diagnosis import attention_kinds, diagnose_kinds

    assert "hybrid" not in attention_kinds() and "hybrid" in diagnose_kinds()  # 27 outputs: opt-in
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(48, 6)) * 0.3, rng.normal(size=(48, 6)) * 0.3, rng.normal(size=(48, 3))
    kw = dict(m=[8], kinds=["hybrid"], ensembles=["iid", "orthogonal"], draws=3, seed=0, workers=1)
    rows = diagnose(q, k, v, **kw).rows
    assert {r["r"] for r in rows} == {27 * 8}
    assert all(math.isfinite(r["attention_mse"]) for r in rows)
    with pytest.raises(ValueError, match="dtypes: kind='hybrid' has a key map of its own"):
        diagnose(q, k, v, dtypes=["float64", "float32"], **kw)


def test_gaussian_kernel_is_the_softmax_hybrid_at_the_scaled_pair():
    """K = exp(-gamma |x - y|^2) = f SM(x', y'), x' = sqrt(2 gamma) x: the MSE is f^2 times the hybrid's at (x', y')."""
    x, y = theory.pair(4, 0.9, 0.7, 1.1)
    gamma = 0.3
    c = math.sqrt(2 * gamma)
    xs, ys = c * x, c * y
    f2 = mp.e ** (-(mp.mpf(float(xs @ xs)) + mp.mpf(float(ys @ ys))))
    est = rfkernels.estimator("hybrid", m=8, d=4, kernel="gaussian", gamma=gamma)
    assert est.mse(x, y) == pytest.approx(float(f2 * _mp_mse(xs, ys, 8)), rel=1e-10)
    res = est.monte_carlo(x, y, trials=3000, seed=4, method="literal")
    assert abs(res.z) < 4 and abs(res.bias_z) < 4


def test_accurate_near_pi_and_where_one_weight_is_zero():
    x, y = np.array([1.0, 0.0, 0.0]), np.array([-1.0, 1e-17, 0.0])  # 1 - theta/pi ~ 3e-18
    got = float(hybrid.log_mse_placed(theory.geometry(x, y), 16, (x, y)))
    assert got == pytest.approx(float(mp.log(_mp_mse(x, y, 16))), rel=1e-12)
    # p-hat = 1: the positive estimate alone, though the (discarded) trig term is e^800 larger
    x, y = np.array([20.0, 0, 0, 0, 0]), np.array([-20.0, 0.5, 0, 0, 0])
    w = draw_kind_projections(16, 5, "hybrid", seed=0)
    sign, logabs = rfkernels.log_estimate(x, y, w, "hybrid")
    b = mp.log(mp.fsum(mp.e ** mp.mpf(float(v)) for v in w[:16] @ (x + y)) / 16) - mp.mpf(400.125)
    assert sign == 1.0 and float(logabs) == pytest.approx(float(b), rel=1e-12)
    # literal Monte Carlo mixes in log space: no rounding of the trig block where its weight is 0
    # (y = -x: p-hat = 1 and the positive estimate exact; the linear features leave about 1e-6 here)
    x = np.array([5.0, 0.0, 0.0])
    res = rfkernels.estimator("hybrid", m=16, d=3).monte_carlo(x, -x, trials=50, seed=0, method="literal")
    assert res.mse <= (1e-12 * res.sm) ** 2


def test_compare_reads_the_pair_itself():
    from rfkernels.analysis.comparison import evaluate_point

    point = {"d": 4, "norm_x": 0.5, "norm_y": 0.5, "angle": 1.0, "m": 8, "kind": "hybrid",
             "ensemble": "iid", "norms": "chi"}
    row = evaluate_point(point, trials=10, seed=0, theory_only=True)
    x, y = theory.pair(4, 0.5, 0.5, 1.0)
    assert row["mse_exact"] == pytest.approx(rfkernels.estimator("hybrid", m=8, d=4).mse(x, y), rel=1e-12)
