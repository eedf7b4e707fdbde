"""The precision study (rfkernels.analysis.precision): rounding, limits, overflow, ELU+1."""

from __future__ import annotations

import json
import math
import sys

import numpy as np
import pytest

import rfkernels as rk
from rfkernels.analysis import precision as P

ml_dtypes = pytest.importorskip("ml_dtypes")


def _data(L=96, d=16, dv=3, scale=1.0, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(L, d)) * d ** -0.25 * scale
    k = rng.normal(size=(L, d)) * d ** -0.25 * scale
    return q, k, rng.normal(size=(L, dv))


# ---------------------------------------------------------------- Rounding


def test_rounding_round_trips():
    third = np.array([1.0 / 3.0])
    half = P.Rounding("float16")
    assert half.work == np.float32 and half.name == "float16"
    assert half(third)[0] == np.float16(1 / 3) and half(third)[0] != np.float32(1 / 3)
    assert half(third).dtype == np.float32
    assert P.Rounding("float32")(third)[0] == np.float32(1 / 3)
    assert P.Rounding("bfloat16")(third)[0] == np.float32(ml_dtypes.bfloat16(1 / 3))
    assert P.Rounding("bfloat16")(third)[0] == np.float32(0.333984375)  # 8 significant bits
    # round to nearest, ties to even: 2049 lies halfway between float16's 2048 and 2050
    assert half(np.array([2049.0, 2051.0])).tolist() == [2048.0, 2052.0]
    assert np.isinf(half(np.array([65520.0]))[0]) and half(np.array([65519.0]))[0] == 65504.0


def test_float64_rounding_is_the_identity_bit_for_bit():
    a = np.random.default_rng(1).normal(size=1000) * np.logspace(-320, 300, 1000)
    r = P.Rounding("float64")
    assert r.work == np.float64
    out = r(a)
    assert out.dtype == np.float64
    assert np.array_equal(out.view(np.uint64), a.view(np.uint64))


def test_unknown_dtype_lists_the_dtypes():
    with pytest.raises(ValueError, match="'float64', 'float32', 'float16', 'bfloat16'; got 'fp8'"):
        P.Rounding("fp8")
    with pytest.raises(ValueError, match="dtype must be one of"):
        P.exponent_limits("float128")


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import ml_dtypes now raises ImportError
    with pytest.raises(ImportError, match=r'pip install "rfkernels\[precision\]"'):
        P.Rounding("bfloat16")
    assert P.Rounding("float16")(np.array([1 / 3]))[0] == np.float16(1 / 3)  # not needed there


@pytest.mark.parametrize("dtype, log_max, log_tiny, bits", [
    ("float64", 709.78, -744.44, 53), ("float32", 88.72, -103.28, 24),
    ("float16", 11.09, -16.64, 11), ("bfloat16", 88.72, -92.19, 8)])
def test_exponent_limits(dtype, log_max, log_tiny, bits):
    lim = P.exponent_limits(dtype)
    assert round(lim.log_max, 2) == log_max and round(lim.log_tiny, 2) == log_tiny
    assert lim.bits == bits and lim.log_tiny < lim.log_min_normal < 0
    # they are the dtype's limits: exp just below log_max is finite, just above is not
    r = P.Rounding(dtype)
    with np.errstate(over="ignore"):
        below = r(np.exp(np.array([lim.log_max - 1e-3])))[0]
        above = r(np.exp(np.array([lim.log_max + 1e-2])))[0]
    assert np.isfinite(below) and np.isinf(above)
    if dtype != "float64":  # float64 has no wider dtype to round from
        assert r(np.array([math.exp(lim.log_tiny)]))[0] > 0
        assert r(np.array([math.exp(lim.log_tiny) * 0.49]))[0] == 0


# ---------------------------------------------------------------- attention


@pytest.mark.parametrize("preset, kind", [
    ("rfkernels", "trig"), ("rfkernels", "positive"), ("rfkernels", "hyperbolic"),
    ("performer-pytorch", "positive"), ("google-research", "positive"),
    ("xformers", "positive"), ("xformers", "hyperbolic"),
    ("rfkernels", "oprf"),
])
def test_float64_equals_favor_attention(preset, kind):
    q, k, v = _data(L=600)  # more than one block of 512
    w = rk.draw_projections(32, 16, ensemble="orthogonal", seed=3)
    A = 0.05 if kind == "oprf" else None
    ref = rk.favor_attention(q, k, v, w, kind, A=A, preset=preset).output
    res = P.rounded_attention(q, k, v, w, kind, preset, "float64", A=A)
    assert res.overflow is None and res.output.dtype == np.float64
    np.testing.assert_allclose(res.output, ref, rtol=0, atol=1e-12)
    assert np.array_equal(np.isnan(res.output), np.isnan(ref))
    assert res.n_negative == (np.isnan(ref).any(axis=1).sum() if kind == "trig" else 0)
    rows = [5, 0, 599]
    sub = P.rounded_attention(q, k, v, w, kind, preset, "float64", A=A, rows=rows)
    np.testing.assert_allclose(sub.output, ref[rows], rtol=0, atol=1e-12)


def test_float32_rounding_is_far_below_sampling_at_m64():
    q, k, v = _data(L=256)
    ws = [rk.draw_projections(64, 16, ensemble="orthogonal", seed=s) for s in range(4)]
    rows = {r["dtype"]: r for r in P.precision_study(q, k, v, ws, "positive", "rfkernels",
                                                     ("float64", "float32", "float16"))}
    assert rows["float64"]["rounding_mse"] == 0.0
    exact = rk.softmax_attention(q, k, v)
    sampling = np.mean([np.mean((rk.favor_attention(q, k, v, w, "positive").output - exact) ** 2)
                        for w in ws])
    for row in rows.values():  # float64's sampling error, the same beside every dtype
        assert row["sampling_mse"] == pytest.approx(sampling, rel=1e-10)
    f32 = rows["float32"]
    assert 1e-8 < f32["relative_rounding_rms"] < 1e-6  # a few float32 ulps (2^-24 = 6e-8)
    assert f32["sampling_mse"] > 1e-4 and f32["ratio"] < 1e-9
    assert f32["rounding_mse_se"] > 0 and f32["n_draws_used"] == 4
    # the rounding does happen: float16 (2^-11 = 4.9e-4) is thousands of times worse
    assert 1e-4 < rows["float16"]["relative_rounding_rms"] < 1e-2
    json.dumps(list(rows.values()), allow_nan=False)


def _aligned(d=32, m=64, seed=2):
    """Keys along the projections: exponents w.k - |k|^2/2 near |w|^2/2 ~ d/2 = 16."""
    rng = np.random.default_rng(seed)
    w = rk.draw_projections(m, d, ensemble="orthogonal", seed=seed)
    aligned = w[:16] + 0.01 * rng.normal(size=(16, d))
    return w, aligned, rng.normal(size=(8, d)) * d ** -0.25, rng.normal(size=(16, 2))


def test_float16_xformers_overflow_is_reported_and_rfkernels_is_not():
    w, k, q, v = _aligned()
    res = P.rounded_attention(q, k, v, w, "positive", "xformers", "float16")  # no raise
    assert res.overflow == "keys" and res.output is None and "overflow" in res.message
    assert json.loads(json.dumps(res.to_dict(), allow_nan=False))["overflow"] == "keys"
    # the same data as queries overflows on the queries' side
    flipped = P.rounded_attention(k, q, v[:8], w, "positive", "xformers", "float16")
    assert flipped.overflow == "queries"
    for dtype in ("float64", "float32", "bfloat16"):  # 16 - log 8 is far below 88.72
        assert P.rounded_attention(q, k, v, w, "positive", "xformers", dtype).overflow is None
    ref = P.rounded_attention(q, k, v, w, "positive", "rfkernels", "float64").output
    ours = P.rounded_attention(q, k, v, w, "positive", "rfkernels", "float16")
    assert ours.overflow is None and ours.n_failed == 0
    np.testing.assert_allclose(ours.output, ref, atol=1e-2 * np.abs(ref).max())
    # float64 computes it (the overflow is float16's), and agrees with favor_attention
    f64 = P.rounded_attention(q, k, v, w, "positive", "xformers", "float64").output
    np.testing.assert_allclose(f64, rk.favor_attention(q, k, v, w, "positive",
                                                       preset="xformers").output, atol=1e-12)
    report = {r["dtype"]: r for r in P.overflow_report(q, k, w, "positive", "xformers")}
    assert report["float16"]["unshifted_overflow_side"] == "keys"
    offset = 1e-6 - math.log(math.sqrt(64))  # xformers' constant inside exp, r = m = 64
    assert report["float16"]["unshifted_offset"] == pytest.approx(offset, abs=1e-15)
    assert report["float16"]["max_feature_exponent"] == pytest.approx(
        report["float16"]["max_exponent_keys"] + offset, abs=1e-12)
    assert not report["float32"]["unshifted_overflows"]


def test_study_reports_overflow_as_null_with_reason():
    w, k, q, v = _aligned()
    rows = {r["dtype"]: r for r in P.precision_study(q, k, v, [w, w], "positive", "xformers",
                                                     ("float64", "float16"))}
    f16 = rows["float16"]
    assert f16["n_overflow_draws"] == 2 and f16["overflow_sides"] == ["keys"]
    assert f16["rounding_mse"] is None and f16["ratio"] is None
    assert "keys' features overflow in every draw" in f16["null_reasons"]["rounding_mse"]
    assert rows["float64"]["rounding_mse"] == 0.0 and rows["float64"]["sampling_mse"] > 0
    json.dumps(list(rows.values()), allow_nan=False)


def test_validation():
    q, k, v = _data(L=8)
    w = rk.draw_projections(4, 16, seed=0)
    with pytest.raises(ValueError, match="preset 'performer-pytorch' offers kind"):
        P.rounded_attention(q, k, v, w, "trig", "performer-pytorch", "float32")
    with pytest.raises(ValueError, match=r"rows must be a non-empty list of query indices in \[0, 8\)"):
        P.rounded_attention(q, k, v, w, "positive", "rfkernels", "float32", rows=[8])
    with pytest.raises(ValueError, match="v must have one row per key"):
        P.rounded_attention(q, k, v[:5], w, "positive", "rfkernels", "float32")
    with pytest.raises(ValueError, match="dimension mismatch"):
        P.rounded_attention(q, k, v, w[:, :3], "positive", "rfkernels", "float32")
    with pytest.raises(ValueError, match="w_list must hold at least one"):
        P.precision_study(q, k, v, [], "positive", "rfkernels")
    with pytest.raises(ValueError, match="form must be one of 'accurate', 'naive'"):
        P.elu1([0.0], "float16", form="textbook")


# ---------------------------------------------------------------- overflow_report


def test_overflow_report_thresholds_on_constructed_inputs():
    # d = 1, w = sqrt(24), x = sqrt(24): w.x - |x|^2/2 = 24 - 12 = 12
    x = np.array([[math.sqrt(24.0)]])
    rep = {r["dtype"]: r for r in P.overflow_report(x, x, x, "positive", "rfkernels")}
    assert rep["float16"]["max_exponent_keys"] == pytest.approx(12.0, abs=1e-12)
    assert rep["float16"]["unshifted_overflows"] and rep["float16"]["unshifted_overflow_side"] == "both"
    for dtype in ("float64", "float32", "bfloat16"):
        assert not rep[dtype]["unshifted_overflows"] and rep[dtype]["unshifted_overflow_side"] is None
    assert not any(r["feature_overflows"] for r in rep.values())  # shifted: exponents <= 0
    assert rep["float16"]["max_feature_exponent"] == 0.0
    # xformers (r = m = 1: offset 1e-6) computes exactly the unshifted exponent
    xf = {r["dtype"]: r for r in P.overflow_report(x, x, x, "positive", "xformers")}
    assert xf["float16"]["feature_overflows"] and not xf["float32"]["feature_overflows"]
    assert xf["float16"]["unshifted_offset"] == pytest.approx(1e-6)
    # exponent 11 stays below float16's 11.09: w = x = sqrt(22)
    y = np.array([[math.sqrt(22.0)]])
    assert not P.overflow_report(y, y, y, "positive", "rfkernels", ("float16",))[0]["unshifted_overflows"]


def test_overflow_report_underflow_shares_on_constructed_inputs():
    w = np.array([[1.0]])
    # exponents 0.5, -17.5 and -9.625: -18 and -10.125 below the key maximum
    keys = np.array([[1.0], [-5.0], [-3.5]])
    rep = {r["dtype"]: r for r in P.overflow_report(keys, keys, w, "positive", "rfkernels")}
    # -18 < -16.64 underflows; -10.125 is subnormal in float16 (below -9.70), not 0
    assert rep["float16"]["key_feature_underflow_share"] == pytest.approx(1 / 3)
    assert rep["bfloat16"]["key_feature_underflow_share"] == 0.0  # -18 > -92.19
    assert rep["float16"]["query_rows_all_underflow_share"] == 0.0  # per-query shift: max is 1
    # performer-pytorch's query shift leaves -|q|^2/2 in: q = 6 gives exp(-18) alone
    q = np.array([[6.0], [0.5]])
    pp = {r["dtype"]: r for r in P.overflow_report(q, keys, w, "positive", "performer-pytorch")}
    assert pp["float16"]["query_rows_all_underflow_share"] == 0.5
    assert pp["float32"]["query_rows_all_underflow_share"] == 0.0
    # and the rounded attention shows it: that row's features are all epsilon in float16
    v = np.array([[1.0], [0.0], [0.0]])
    res = P.rounded_attention(q, keys, v, w, "positive", "performer-pytorch", "float16")
    f64 = P.rounded_attention(q, keys, v, w, "positive", "performer-pytorch", "float64")
    assert res.stabiliser_share[0] == 1.0  # exp(-18) rounds to 0: the row is epsilon alone
    assert 0.999 < f64.stabiliser_share[0] < 1.0  # float64 keeps it, but 1e-4 >> 1.5e-8 already
    # trig: only |x|^2/2 scales; the rfkernels queries are sines and cosines
    tr = P.overflow_report(np.array([[5.0]]), np.array([[5.0]]), w, "trig", "rfkernels", ("float16",))
    assert tr[0]["max_exponent_keys"] == 12.5 and tr[0]["unshifted_overflows"]
    assert tr[0]["query_feature_underflow_share"] == 0.0 and not tr[0]["feature_overflows"]


# ---------------------------------------------------------------- ELU+1


def test_elu1_at_minus_8_in_bfloat16():
    assert P.elu1([-8.0], "bfloat16", "naive")[0] == 0.0
    accurate = P.elu1([-8.0], "bfloat16", "accurate")[0]
    assert f"{accurate:.3g}" == "0.000336" and accurate == 0.000335693359375  # 3.357e-4
    assert abs(accurate - math.exp(-8)) <= math.exp(-8) * 2.0 ** -9  # half a bfloat16 ulp
    assert P.elu1([-8.0], "float32", "naive")[0] == pytest.approx(math.exp(-8), rel=1e-3)
    x = np.linspace(-5, 5, 101)
    assert np.array_equal(P.elu1(x, "float64"), rk.feature_map(x[:, None], None, "elu1")[:, 0])
    # the naive form's error is absolute, about half an ulp of 1 (2^-53), even in float64
    gap = np.abs(P.elu1(x, "float64", "naive") - P.elu1(x, "float64"))
    assert gap.max() <= 2.0 ** -52 and gap[x < 0].max() / math.exp(-5) > 1e-15


def _bisect_naive_zero(dtype):
    lo, hi = -64.0, 0.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        if P.elu1([mid], dtype, "naive")[0] == 0:
            lo = mid
        else:
            hi = mid
    return lo, hi


@pytest.mark.parametrize("dtype, stated", [
    ("bfloat16", -6.234), ("float16", -8.316), ("float32", -17.3), ("float64", -37.430)])
def test_naive_elu1_first_zero(dtype, stated):
    lo, hi = _bisect_naive_zero(dtype)
    assert P.elu1([lo], dtype, "naive")[0] == 0 and P.elu1([hi], dtype, "naive")[0] > 0
    assert P.elu1([lo - 1.0, lo - 20.0], dtype, "naive").tolist() == [0.0, 0.0]  # 0 below too
    assert P.elu1_naive_zero(dtype) == pytest.approx(lo, abs=1e-12)
    # the docstring's claim; float32's point depends on the build's float32 expm1 (NumPy 2.4.6's is
    # faithful, not correctly rounded: -17.318 against -17.329), so it is stated to 0.1 there
    ndigits = 1 if dtype == "float32" else 3
    assert round(lo, ndigits) == round(stated, ndigits) and f"{stated:.{ndigits}f}" in P.elu1.__doc__
    # where e^x falls below half an ulp of 1: x ~ -(p + 1) log 2, within the dtype's spacing there
    # (a faithful expm1, one ulp of 1 off, moves it by at most log 2)
    p = P.exponent_limits(dtype).bits
    spacing = 2.0 ** (math.floor(math.log2(-lo)) + 1 - p)  # between the dtype's numbers there
    assert abs(lo + (p + 1) * math.log(2)) <= (math.log(2) if dtype == "float32" else spacing)
    assert P.elu1([lo], dtype, "accurate")[0] > 0  # the accurate form is far from 0 there


def test_elu1_attention_error_shows_the_naive_form():
    rng = np.random.default_rng(3)
    q = rng.uniform(-9, -3, size=(64, 16))  # ELU+1 queries on the exponential branch
    k, v = rng.normal(size=(64, 16)) * 2, rng.normal(size=(64, 4))
    exact = P.elu1_attention_error(q, k, v, "float64", "accurate")
    assert exact["mse"] < 1e-28 and exact["n_failed_rows"] == 0
    naive = P.elu1_attention_error(q, k, v, "bfloat16", "naive")
    accurate = P.elu1_attention_error(q, k, v, "bfloat16", "accurate")
    assert naive["mse"] > 10 * accurate["mse"] and naive["zero_feature_share"] > 0.1
    assert accurate["zero_feature_share"] == 0.0
    q[0] = -8.0  # every feature of row 0 rounds to 0 in the naive form: its normaliser is 0
    assert P.elu1_attention_error(q, k, v, "bfloat16", "naive")["n_failed_rows"] == 1
    assert P.elu1_attention_error(q, k, v, "bfloat16", "accurate")["n_failed_rows"] == 0
    json.dumps(naive, allow_nan=False)
