"""Faults of the analysis layer: float64's range in the capacity study and the
first-order attention theory, and argument checks of local_slopes and evaluate_point.

Each test failed before its fix: NaN or 0.0 reported as results, a wrong
reason for a null value, a Python API function named to a command-line user,
IndexError / KeyError instead of a one-line ValueError.
"""

import json
import math

import numpy as np
import pytest
from rfkernels.analysis import (
    attention_inputs,
    attention_mse_first_order,
    capacity,
    evaluate_point,
    local_slopes,
)
from rfkernels.analysis.capacity import sum_rule_error

from rfkernels.commands.cli import main


def _finite_rows(res):
    """Every number of a capacity result is finite (None where a value does not exist)."""
    for row in res.rows:
        for key, value in row.items():
            if isinstance(value, float):
                assert math.isfinite(value), (key, row)
    return True


# ----------------------------------------------------------------- capacity


def test_capacity_overflow_raises_naming_key_scale_and_a_scale_that_works():
    with pytest.raises(OverflowError, match=r"key_scale = 1e\+300 .*'elu1'.*about ([0-9.e+]+)") as info:
        capacity(4, [4, 8], ["elu1"], trials=2, key_scale=1e300)
    text = str(info.value)
    assert "\n" not in text and "--key-scale" in text
    best = float(text.rsplit("about ", 1)[1])
    res = capacity(4, [4, 8], ["elu1"], trials=2, key_scale=best)  # the scale it names works
    assert _finite_rows(res)


def test_cli_capacity_overflow_is_one_line_without_api_names(capsys):
    argv = ["capacity", "--d-k", "4", "--n", "4,8", "--trials", "2"]
    for extra in (["--map", "elu1", "--key-scale", "1e300"], ["--map", "trig:8", "--key-scale", "30"],
                  ["--map", "softmax", "--key-scale", "1e160"], ["--map", "dpfp:1,positive:8",
                                                                 "--key-scale", "100"]):
        assert main(argv + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err and "--key-scale" in err
        assert "rfkernels." not in err and "log_estimate" not in err and "log_softmax" not in err


def test_capacity_of_homogeneous_maps_does_not_depend_on_the_key_scale():
    """identity and DPFP: phi(c k) = c^p phi(k), and no readout depends on a global scale."""
    ref = capacity(4, [4, 8, 12], ["identity", "dpfp:1"], trials=2, key_scale=1.0)
    for scale in (1e-200, 1e160, 1e300):
        res = capacity(4, [4, 8, 12], ["identity", "dpfp:1"], trials=2, key_scale=scale)
        assert _finite_rows(res)
        for a, b in zip(ref.rows, res.rows):
            for key in ("sum_error_mean", "scr_mean", "ls_rank_mean"):
                assert (a[key] is None and b[key] is None) or b[key] == pytest.approx(a[key], rel=1e-9)
        assert [f["sum_fail"] for f in res.failures] == [f["sum_fail"] for f in ref.failures]


def test_capacity_null_scr_has_the_right_reason(capsys):
    # exp(k.k') at key_scale 10, d_k = 4: the crosstalk is lost beside G_ii^2, SCR infinite
    assert main(["capacity", "--d-k", "4", "--n", "4,8", "--map", "softmax", "--trials", "2",
                 "--key-scale", "10", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for row in data["rows"]:
        assert row["sum_error_mean"] is not None and math.isfinite(row["sum_error_mean"])
        assert row["scr_mean"] is None
        reason = row["null_reasons"]["scr_mean"]
        assert "n = 1" not in reason and f"n = 4, 8" in reason and "resolution" in reason
    # and at the softmax kernel's edge the sum errors stay finite (no NaN, no inf)
    res = capacity(4, [4, 8], ["softmax"], trials=2, key_scale=30.0)
    assert _finite_rows(res)


def test_sum_rule_error_is_finite_where_its_square_is_not():
    gram = np.array([[1e-200, 1.0], [1.0, 1.0]])
    v = np.array([[1.0], [2.0]])
    err = sum_rule_error(gram, v, 2)  # readout of key 0: 2e200
    assert math.isfinite(err) and err == pytest.approx(2e200 / math.sqrt(5), rel=1e-12)


# ------------------------------------------------------ first-order theory


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_first_order_at_large_scales_raises_like_at_30(kind):
    """Before: OverflowError at input_scale 30, but MSE 0.0 (no row clipped) at 100 and 300."""
    for scale in (30, 100, 300):
        q, k, v = attention_inputs(4, 2, input_scale=scale, seed=1)
        with pytest.raises(OverflowError, match="beyond float64"):
            attention_mse_first_order(q, k, v, 16, kind)


def test_first_order_trig_at_large_scales_raises():
    q, k, v = attention_inputs(2, 2, seed=1)
    for scale in (30, 100, 300):
        with pytest.raises(OverflowError, match="attention_mse_first_order: .*too large"):
            attention_mse_first_order(q * scale, k * scale, v, 16, "trig")
    with pytest.raises(OverflowError, match=r"\|q\|\^2 or \|k\|\^2"):
        attention_mse_first_order(q * 1e5, k, v, 16, "trig")


@pytest.mark.parametrize("kind, factor", [("positive", 1.0), ("hyperbolic", 0.5), ("trig", 0.5)])
def test_first_order_of_one_hot_attention(kind, factor):
    """q = (t, 0), keys (±t, 0): a logit gap 2t² = 800, attention one-hot beyond float64.

    The residual of the top key is e^-800 (v_1 - v_2), its weight x is the
    largest, and every exponential factor cancels: MSE = factor |v_1 - v_2|² / (m d_v)
    (checked with mpmath at 800 digits). Before: 0.0 for positive and hyperbolic.
    """
    t, m = 20.0, 8
    q = np.array([[t, 0.0]])
    k = np.array([[t, 0.0], [-t, 0.0]])
    v = np.array([[1.0, -0.5], [0.25, 2.0]])
    want = factor * float(np.sum((v[0] - v[1]) ** 2)) / (m * 2)
    assert attention_mse_first_order(q, k, v, m, kind).mse == pytest.approx(want, rel=1e-9)


def _first_order_reference(q, k, v, m, dps=400):
    """Positive-feature first-order MSE of MATH.md with mpmath (no cancellation at 400 digits)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = dps
    Q, K, V = ([[mp.mpf(float(x)) for x in r] for r in a] for a in (q, k, v))
    dot = lambda a, b: mp.fsum(x * y for x, y in zip(a, b))  # noqa: E731
    total = 0
    for qi in Q:
        e = [mp.e ** dot(qi, kj) for kj in K]
        D = mp.fsum(e)
        att = [mp.fsum(e[j] * V[j][c] for j in range(len(K))) / D for c in range(len(V[0]))]
        s = 0
        for j, kj in enumerate(K):
            for jp, kjp in enumerate(K):
                diff = [x - y for x, y in zip(kj, kjp)]
                g = mp.e ** (dot(qi, qi) + 2 * dot(qi, kj) + dot(kj, kj) / 2 + 2 * dot(qi, kjp)
                             + dot(kjp, kjp) / 2 - dot(diff, diff) / 2)
                s += g * mp.fsum((V[j][c] - att[c]) * (V[jp][c] - att[c]) for c in range(len(att)))
        total += s / (m * D ** 2 * len(att))
    return float(total / len(Q))


def test_first_order_is_accurate_where_attention_is_peaked():
    """Peaked rows: v_top - Att lost its digits (1.7e38 reported for 1.97e137)."""
    q, k, v = attention_inputs(4, 4, seed=1)
    q, k = 10 * q, 10 * k
    got = attention_mse_first_order(q, k, v, 16, "positive").mse
    assert got == pytest.approx(_first_order_reference(q, k, v, 16), rel=1e-9)


# ------------------------------------------------------------ local_slopes


@pytest.mark.parametrize("m, mse, match", [
    ([0, 2], [1.0, 0.5], "m_values must be positive"),
    ([-2, 2], [1.0, 0.5], "m_values must be positive"),
    ([2, 2], [1.0, 0.5], "m_values must be strictly increasing"),
    ([4, 2], [1.0, 0.5], "m_values must be strictly increasing"),
    ([2, 4, 8], [1.0, 0.5], "mse must have one value per m: 3 m_values, 2 mse values"),
    ([2, 4], [1.0, 0.5, 0.2], "one value per m"),
    ([2, 4], [0.0, 0.5], r"mse\[0\] = 0.0"),
    ([2, 4], [1.0, -0.5], r"mse\[1\] = -0.5"),
    ([2, 4], [1.0, float("nan")], r"mse\[1\] = nan"),
    ([2, 4], [float("inf"), 1.0], r"mse\[0\] = inf"),
    ([], [], "non-empty"),
])
def test_local_slopes_refuses_bad_grids(m, mse, match):
    with pytest.raises(ValueError, match=match):
        local_slopes(m, mse)


def test_local_slopes_still_accepts_missing_values():
    assert local_slopes([2, 4, 8], [1.0, 0.5, 0.25]) == pytest.approx([-1, -1, -1])
    s = local_slopes([2, 4, 8], [1.0, None, 0.25])
    assert s[0] is None and s[1] == pytest.approx(-1) and s[2] is None
    assert local_slopes([16], [0.1]) == [None]


# ---------------------------------------------------------- evaluate_point


POINT = {"kind": "positive", "ensemble": "iid", "norms": "chi", "d": 4, "m": 4, "angle": 1.0,
         "norm_x": 1.0, "norm_y": 1.0}


@pytest.mark.parametrize("drop", ["m", "kind", "angle", "norm_y"])
def test_evaluate_point_names_missing_keys(drop):
    point = {k: v for k, v in POINT.items() if k != drop}
    with pytest.raises(ValueError, match=f"point is missing {drop}; a point needs kind, ensemble, "
                                         "norms, d, m, angle and norm_x, norm_y"):
        evaluate_point(point, trials=10, seed=0)


def test_evaluate_point_with_norm_sum_and_not_a_dict():
    point = {k: v for k, v in POINT.items() if k not in ("norm_x", "norm_y")}
    row = evaluate_point(dict(point, norm_sum=1.5), trials=10, seed=0, theory_only=True)
    assert row["mse_exact"] > 0
    with pytest.raises(TypeError, match="point must be a dict"):
        evaluate_point([1, 2], trials=10, seed=0)
