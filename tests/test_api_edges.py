"""The public API at its edges: non-real data, non-boolean flags, over-specified or
incomplete geometries, overflow in x.y and |x|^2, and memory beyond the machine.

Each error is raised before any work, names the argument, and is one of the
exceptions the command line turns into one line (ValueError, TypeError,
FloatingPointError, MemoryError).
"""

import math
import tracemalloc

import numpy as np
import pytest
from rfkernels.analysis import attention as attention_study
from rfkernels.analysis import compare, evaluate_point, monte_carlo_mse, trial_estimates
from rfkernels.analysis.attention import attention_mse
from rfkernels.analysis.points import point_geometry

import rfkernels
from rfkernels import (
    draw_projections,
    estimate,
    favor_attention,
    feature_map,
    log_estimate,
    log_softmax_kernel,
    engine,
    rng,
    softmax_attention,
    softmax_kernel,
    theory,
    validation,
)
from rfkernels.backends import cupy_available
from rfkernels.projections import orthogonal_blocks

COMPLEX = "Complex data not supported"
X, Y = theory.pair(3, 0.6, 0.5, 1.0)
W = draw_projections(4, 3, seed=0)
Q = 0.3 * np.random.default_rng(0).standard_normal((5, 3))


# ---------------------------------------------------------------------------
# Non-real data is refused, never cast
# ---------------------------------------------------------------------------

COMPLEX_CALLS = {
    "estimate": lambda: estimate(X + 1j, Y, W, "positive"),
    "estimate W": lambda: estimate(X, Y, W + 0j, "trig"),
    "feature_map": lambda: feature_map(X + 1j, W, "trig"),
    "log_estimate": lambda: log_estimate(X, Y + 1j, W, "hyperbolic"),
    "softmax_kernel": lambda: softmax_kernel(X + 1j, Y),
    "log_softmax_kernel": lambda: log_softmax_kernel(X, Y * 1j),
    "exact_mse": lambda: theory.exact_mse(X + 1j, Y, 8, "positive"),
    "log_exact_mse": lambda: theory.exact_mse(X, Y + 0j, 8, "trig", log=True),
    "exact_mse m": lambda: theory.exact_mse(X, Y, 8 + 0j, "positive"),
    "lemma2_mse": lambda: theory.lemma2_mse(X + 1j, Y, 8, "positive"),
    "theorem2_bound": lambda: theory.theorem2_bound(X, Y + 1j, 2),
    "geometry": lambda: theory.geometry(X + 1j, Y),
    "geometry_from_angle": lambda: theory.geometry_from_angle(3, 1.0 + 1j, 1.0, 0.5),
    "pair": lambda: theory.pair(3, 1.0, 1.0, 0.5 + 0j),
    "monte_carlo_mse": lambda: monte_carlo_mse(X + 1j, Y, 8, "positive", trials=10),
    "trial_estimates": lambda: trial_estimates(X, Y + 1j, 8, "positive", trials=10),
    "favor_attention Q": lambda: favor_attention(Q + 1j, Q, Q, W, "positive"),
    "favor_attention V": lambda: favor_attention(Q, Q, Q + 1j, W, "positive"),
    "favor_attention W": lambda: favor_attention(Q, Q, Q, W + 1j, "positive"),
    "softmax_attention": lambda: softmax_attention(Q, Q + 1j, Q),
    "object array": lambda: estimate(np.array([1, 1j, 0], dtype=object), Y, W, "positive"),
    "normalised_estimates": lambda: engine.normalised_estimates(
        rng.key_from_seed(0), engine.trial_counters(0, 4) + 0j, 8, 3, "positive", 1.0),
    "compare": lambda: compare({"d": 3, "angle": 0.5 + 1j}, trials=10),
    "bias_audit": lambda: __import__("rfkernels.analysis.comparison", fromlist=["x"]).bias_audit(
        d=3, m=3, directions=[[1, 0, 1j]], trials=10),
}


@pytest.mark.parametrize("call", COMPLEX_CALLS.values(), ids=COMPLEX_CALLS.keys())
def test_complex_data_is_refused_not_cast(call):
    with pytest.raises(ValueError, match=COMPLEX):
        call()


def test_complex_refusal_wording_is_scikit_learns():
    with pytest.raises(ValueError, match=r"^Complex data not supported: X is of complex dtype"):
        estimate(X + 1j, Y, W, "positive")


@pytest.mark.parametrize("bad, what", [
    (["0.1", "0.2", "0.3"], "strings"),
    (np.array([0.1, None, 0.3], dtype=object), "None or strings"),
    (np.array(["2020-01-01"] * 3, dtype="datetime64[D]"), "datetimes"),
])
def test_non_numeric_data_is_refused(bad, what):
    with pytest.raises(ValueError, match=f"X must hold real numbers; got .*{what}"):
        estimate(bad, Y, W, "positive")
    with pytest.raises(ValueError, match="must hold real numbers"):
        theory.exact_mse(bad, Y, 4, "positive")


def test_real_numbers_of_any_real_dtype_are_accepted():
    want = estimate(X, Y, W, "positive")
    assert estimate(X.astype(np.float32).astype(object), Y, W, "positive") == pytest.approx(
        want, rel=1e-6)
    assert estimate(np.array([1, 0, 0]), Y, W, "positive") == pytest.approx(
        estimate(np.array([1.0, 0.0, 0.0]), Y, W, "positive"), rel=0, abs=0)


BOOL_CALLS = {
    "exact_mse log": lambda v: theory.exact_mse(X, Y, 8, "positive", log=v),
    "log via geometry": lambda v: theory.exact_mse(theory.geometry(X, Y), None, 8,
                                                                  "trig", log=v),
    "lemma2_mse log": lambda v: theory.lemma2_mse(X, Y, 8, "positive", log=v),
    "theorem2_bound log": lambda v: theory.theorem2_bound(X, Y, 2, log=v),
    "favor causal": lambda v: favor_attention(Q, Q, Q, W, "positive", causal=v),
    "favor stabilize": lambda v: favor_attention(Q, Q, Q, W, "positive", stabilize=v),
    "softmax causal": lambda v: softmax_attention(Q, Q, Q, causal=v),
    "attention_mse causal": lambda v: attention_mse(8, 3, 4, samples=2, causal=v),
    "fix_signs": lambda v: orthogonal_blocks(1, 3, 0, fix_signs=v),
    "theory_only": lambda v: evaluate_point(
        {"kind": "positive", "ensemble": "iid", "norms": "chi", "d": 3, "m": 4, "angle": 0.5,
         "norm_x": 1.0, "norm_y": 1.0}, trials=10, seed=0, theory_only=v),
}


@pytest.mark.parametrize("value", ["yes", 1, None, "False"])
@pytest.mark.parametrize("call", BOOL_CALLS.values(), ids=BOOL_CALLS.keys())
def test_boolean_flags_must_be_booleans(call, value):
    with pytest.raises(TypeError, match="must be True or False"):
        call(value)


def test_numpy_booleans_are_booleans():
    assert theory.exact_mse(X, Y, 8, "positive", log=np.bool_(True)) == pytest.approx(
        theory.exact_mse(X, Y, 8, "positive", log=True))


# ---------------------------------------------------------------------------
# compare(): one value where one is meant, complete and consistent geometries
# ---------------------------------------------------------------------------

GEOM = {"d": 4, "angle": 1.0, "norm_x": 1.0, "norm_y": 1.0}


def test_compare_accepts_single_values():
    rows = compare(GEOM, kinds="positive", ensembles="iid", m=8, trials=50)
    assert [(r["kind"], r["ensemble"], r["m"]) for r in rows] == [("positive", "iid", 8)]
    want = theory.exact_mse(*theory.pair(4, 1.0, 1.0, 1.0), 8, "positive")
    assert rows[0]["mse_exact"] == pytest.approx(float(want), rel=1e-12)
    two = compare([GEOM, (4, 1.0, 1.0, 1.0)], kinds=("trig",), ensembles="orthogonal", m=[4, 8],
                  trials=50)
    assert [r["m"] for r in two] == [4, 8, 4, 8]
    assert compare((4, 1.0, 1.0, 1.0), m=np.int64(8), ensembles="iid", trials=50)[0]["m"] == 8


def test_compare_refuses_over_specified_geometries():
    # norm_sum = 2 at angle 1 means |x| = |y| = 1/cos(1/2) = 1.14, not the stated 1.0
    geom = {"d": 4, "angle": 1.0, "norm_sum": 2.0, "norm_x": 1.0, "norm_y": 1.0}
    with pytest.raises(ValueError, match=r"geometries\[0\]: give either norm_sum or norm_x/norm_y"):
        compare([geom], trials=50)
    with pytest.raises(ValueError, match="not both"):
        compare([{"d": 4, "angle": 1.0, "norm_sum": 2.0, "norm_y": 1.0}], trials=50)
    # the one shared check also guards every evaluation of a point
    with pytest.raises(ValueError, match="give either norm_sum or norm_x/norm_y, not both"):
        point_geometry(geom)


def test_compare_norm_sum_alone_is_fine():
    (row,) = compare({"d": 4, "angle": 1.0, "norm_sum": 2.0}, ensembles="iid", trials=50)
    n = 2.0 / (2 * math.cos(0.5))
    want = theory.exact_mse(*theory.pair(4, n, n, 1.0), 8, "positive")
    assert row["norm_sum"] == 2.0 and row["norm_x"] is None
    assert row["mse_exact"] == pytest.approx(float(want), rel=1e-12)


@pytest.mark.parametrize("geometry, match", [
    ({"d": 4, "norm_x": 1.0, "norm_y": 1.0}, r"geometries\[0\]: missing key 'angle'"),
    ({"angle": 1.0}, r"geometries\[0\]: missing key 'd'"),
    ({"d": 4, "angle": 1.0, "norm-x": 2.0}, r"geometries\[0\]: unknown key 'norm-x'"),
    ((4, 1.0, 1.0), r"a tuple geometry is \(d, norm_x, norm_y, angle\); got 3"),
    ({"d": 4, "angle": "wide"}, r"geometries\[0\]\['angle'\] must hold real numbers"),
    ({"d": 4, "angle": [0.1, 0.2]}, r"geometries\[0\]\['angle'\] must be one number"),
])
def test_compare_names_what_is_missing_or_wrong(geometry, match):
    with pytest.raises(ValueError, match=match):
        compare([geometry], trials=50)


@pytest.mark.parametrize("kwargs, error, match", [
    ({"kinds": "cosine"}, ValueError, "kind must be one of"),
    ({"kinds": []}, ValueError, "kinds must hold at least one value"),
    ({"ensembles": "orthogonal-qr"}, ValueError, "ensemble must be one of"),
    ({"m": "8"}, TypeError, "m must be an integer"),
    ({"m": [8, 0]}, ValueError, "m must be an integer >= 1"),
    ({"seed": 1.5}, TypeError, "seed must be None, a non-negative int"),
    ({"seed": np.random.SeedSequence(1, spawn_key=(2,))}, ValueError, "root SeedSequence"),
    ({"geometries": "d=4"}, TypeError, "geometries must be a dict"),
])
def test_compare_refuses_bad_arguments(kwargs, error, match):
    kw = {"geometries": [GEOM], "trials": 50, **kwargs}
    with pytest.raises(error, match=match):
        compare(**kw)


# ---------------------------------------------------------------------------
# x.y and |x|^2 beyond float64
# ---------------------------------------------------------------------------


def test_log_softmax_kernel_is_exported_and_named_by_the_overflow_error():
    assert rfkernels.log_softmax_kernel is log_softmax_kernel
    assert "log_softmax_kernel" in rfkernels.__all__
    with pytest.raises(FloatingPointError, match=r"use rfkernels\.log_softmax_kernel"):
        softmax_kernel([30.0, 0.0], [30.0, 0.0])
    assert log_softmax_kernel([30.0, 0.0], [30.0, 0.0]) == 900.0


def test_log_softmax_kernel_does_not_overflow_in_the_dot_product():
    # x.y = 1e400 - 1e400 = 0: the partial products overflow, the value does not
    assert log_softmax_kernel([1e200, 1e200], [1e200, -1e200]) == 0.0
    assert softmax_kernel([1e200, 1e200], [1e200, -1e200]) == 1.0
    # the same cancellation in range, which fused multiply-add kernels get wrong by
    # d eps |x||y|, is exact too (the result does not depend on the BLAS kernel)
    assert log_softmax_kernel([1e100, 1e100], [1e100, -1e100]) == 0.0
    assert log_softmax_kernel([1e150, 1e150], [1e150, 1e150]) == pytest.approx(2e300, rel=1e-15)
    got = log_softmax_kernel([[1e200, 0.0], [3.0, 4.0]], [[1e-200, 5.0], [1.0, 2.0]])
    np.testing.assert_allclose(got, [[1.0, 1e200], [20.0, 11.0]], rtol=1e-15)


def test_log_softmax_kernel_raises_where_x_dot_y_itself_overflows():
    with pytest.raises(FloatingPointError, match=r"x\.y overflows float64 at 1 pair"):
        log_softmax_kernel([1e200, 1e200], [1e200, 1e200])


def test_log_softmax_kernel_matches_the_matrix_product_in_range():
    rng_ = np.random.default_rng(3)
    a, b = rng_.standard_normal((7, 5)), rng_.standard_normal((4, 5))
    np.testing.assert_allclose(log_softmax_kernel(a, b), a @ b.T, rtol=1e-13, atol=1e-15)


@pytest.mark.parametrize("norms", ["chi", "fixed"])
@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trig"])
def test_log_exact_mse_of_huge_inputs_raises_clearly(kind, norms):
    # |x|^2 = 1e320 is beyond float64, and so is the log of the MSE (of that order)
    with pytest.raises(FloatingPointError, match=r"overflow float64 .*cannot be represented"):
        theory.exact_mse(X * 1e160, Y, 8, kind, norms=norms, log=True)
    with pytest.raises(FloatingPointError, match="squared norms"):
        theory.exact_mse(X * 1e160, Y, 8, kind, norms=norms, log=True)
    with pytest.raises(FloatingPointError, match="squared norms"):
        theory.geometry_from_angle(3, 1e160, 1.0, 0.5)


def test_log_exact_mse_stays_finite_below_the_overflow():
    # |x|^2 = 1e300: the MSE is e^(~1e300), its log a float
    got = theory.exact_mse(*theory.pair(3, 1e150, 1.0, 1.0), 8, "positive", log=True)
    assert np.isfinite(got) and got > 1e299
    x, _ = theory.pair(3, 1e160, 1.0, 1.0)  # building the vectors is fine
    assert x[0] == 1e160


# ---------------------------------------------------------------------------
# FAVOR: |q|^2 and |k|^2 overflowing are named, V is not blamed
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trig"])
def test_favor_attention_names_the_overflowing_norm(kind, causal):
    K, V = Q[::-1].copy(), Q + 1.0
    with pytest.raises(FloatingPointError, match=r"\|q\|\^2 overflows float64 for 5 row\(s\) of Q"):
        favor_attention(Q * 1e200, K, V, W, kind, causal=causal)
    with pytest.raises(FloatingPointError, match=r"\|k\|\^2 overflows float64 for 1 row\(s\) of K \(rows 2;"):
        K2 = K.copy()
        K2[2] *= 1e200
        favor_attention(Q, K2, V, W, kind, causal=causal)
    with pytest.raises(FloatingPointError, match=r"projections W @ q and W @ k"):
        favor_attention(Q, K, V, W * 1e300, kind, causal=causal)
    # huge values are fine: only their weighted sums could overflow
    assert np.isfinite(favor_attention(Q, K, V * 1e300, W, kind, causal=causal,
                                       nonpositive="divide").output).all()


# ---------------------------------------------------------------------------
# Memory: estimated before any allocation, refused with a MemoryError naming the sizes
# ---------------------------------------------------------------------------


@pytest.fixture
def small_machine(monkeypatch):
    """A machine with 1 GiB: the checks refuse anything above 0.8 GiB."""
    monkeypatch.setattr(validation, "available_memory", lambda: 2**30)


@pytest.mark.parametrize("backend", ["numpy", "numba"])
@pytest.mark.parametrize("method", ["reduced", "literal"])
def test_monte_carlo_with_huge_m_is_refused_before_allocating(small_machine, backend, method):
    tracemalloc.start()
    try:
        with pytest.raises(MemoryError, match=r"m=1000000000 projections, d=3, 1 pair\(s\) and "
                                              r"\d+ trial\(s\) per chunk"):
            monte_carlo_mse(X, Y, 1e9, "positive", trials=100, backend=backend, method=method)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2**26  # nothing big was allocated


def test_monte_carlo_memory_names_the_chunk(small_machine):
    with pytest.raises(MemoryError, match=r"m=1000 projections.*200000 trial\(s\) per chunk"):
        monte_carlo_mse(X, Y, 1000, "positive", trials=10**6, chunk=200_000)
    # the default chunk keeps the same run small
    assert monte_carlo_mse(X, Y, 1000, "positive", trials=200).trials == 200


def test_trial_estimates_counts_the_estimates_it_keeps(small_machine):
    with pytest.raises(MemoryError, match=r"keeping all 100000000 estimates"):
        trial_estimates(X, Y, 8, "positive", trials=10**8)


def test_theory_vectors_and_batches_are_checked(small_machine):
    with pytest.raises(MemoryError, match=r"theory\.pair\(d=2147483648\)"):
        theory.pair(2**31, 1.0, 1.0, 0.5)
    with pytest.raises(MemoryError, match=r"batch shape \(100000, 100000\)"):
        theory.geometry_from_angle(4, np.ones((100_000, 1)), 1.0, np.full(100_000, 0.5))
    with pytest.raises(MemoryError, match=r"batch shape \(10000, 100000\)"):
        theory.exact_mse(np.broadcast_to(X, (100_000, 3)), Y,
                         np.arange(1, 10_001).reshape(10_000, 1), "positive")
    assert theory.exact_mse(*theory.pair(16, 1.0, 1.0, 0.5), 8, "positive") > 0


def test_projections_and_attention_are_checked(small_machine):
    with pytest.raises(MemoryError, match=r"draw_projections\(m=1000000000, d=64"):
        draw_projections(10**9, 64)
    with pytest.raises(MemoryError, match=r"orthogonal_blocks\(n_blocks=100000, d=1000\)"):
        orthogonal_blocks(100_000, 1000, 0)
    with pytest.raises(MemoryError, match=r"attention study with L=1000000, d=1000"):
        attention_mse(10**6, 1000, 16, samples=2)
    with pytest.raises(MemoryError, match=r"attention_inputs\(L=10000000, d=1000\)"):
        attention_study.attention_inputs(10**7, 1000)
    with pytest.raises(MemoryError, match=r"favor_attention with L=100000, r=2000000"):
        favor_attention(np.zeros((100_000, 2)), np.zeros((1, 2)), np.zeros((1, 1)),
                        np.zeros((10**6, 2)), "trig")
    with pytest.raises(MemoryError, match=r"n_x=100000, n_y=100000"):
        softmax_kernel(np.zeros((100_000, 2)), np.zeros((100_000, 2)))


def test_theory_batch_estimate_bounds_the_measured_peak():
    n = 20_000
    r = np.random.default_rng(0)
    for norms in ("chi", "fixed"):
        for kind in ("positive", "hyperbolic", "trig"):
            g = theory.geometry_from_angle(16, r.uniform(0.1, 1, n), r.uniform(0.1, 1, n),
                                           r.uniform(0, 3, n))
            tracemalloc.start()
            try:
                theory.exact_mse(g, None, 24, kind, ensemble="orthogonal", norms=norms,
                                               log=True)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert peak <= theory._BATCH_TEMPORARIES * 8 * n, (norms, kind, peak / (8 * n))


# ---------------------------------------------------------------------------
# The same refusals on the GPU path (xp = cupy)
# ---------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_inputs_get_the_same_checks():
    import cupy

    cx, cy, cw, cq = (cupy.asarray(a) for a in (X, Y, W, Q))
    with pytest.raises(ValueError, match=COMPLEX):
        estimate(cx + 1j, cy, cw, "positive")
    with pytest.raises(ValueError, match=COMPLEX):
        favor_attention(cq, cq, cq + 1j, cw, "positive")
    with pytest.raises(TypeError, match="must be True or False"):
        favor_attention(cq, cq, cq, cw, "positive", causal="no")
    with pytest.raises(FloatingPointError, match=r"\|q\|\^2 overflows"):
        favor_attention(cq * 1e200, cq, cq, cw, "trig")
    got = log_softmax_kernel(cupy.asarray([[1e200, 1e200]]), cupy.asarray([[1e200, -1e200]]))
    assert isinstance(got, cupy.ndarray) and float(got[0, 0]) == 0.0
    np.testing.assert_allclose(cupy.asnumpy(log_softmax_kernel(cx, cy)), log_softmax_kernel(X, Y),
                               rtol=1e-13, atol=1e-15)


def test_complex_degrees_of_freedom_are_refused():
    from rfkernels import rng

    key = rng.key_from_seed(0)
    trials, slots = np.arange(3), np.zeros(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="Complex data not supported"):
        rng.chi_square(key, trials, slots, 4.0 + 1j)
    assert np.all(rng.chi_square(key, trials, slots, 4.0) > 0)


def test_geometry_entries_take_scalar_fields_and_refuse_bad_ones():
    """A user's Geometry may hold plain floats; bad fields get one-line errors, not AttributeError."""
    import numpy as np
    import pytest

    from rfkernels import theory

    g = theory.Geometry(16.0, 2.0, 3.0, 1.0)
    arr = theory.Geometry(*(np.array([v]) for v in g))
    assert theory.exact_mse(g, None, 8, "positive") == pytest.approx(
        theory.exact_mse(arr, None, 8, "positive")[0], rel=1e-15)
    assert np.isfinite(theory.lemma2_mse_from_geometry(g, 8, "trig"))
    assert np.isfinite(theory.theorem2_bound_from_geometry(g, 8))
    with pytest.raises(ValueError, match="geom.d must hold whole numbers >= 1"):
        theory.exact_mse(theory.Geometry(0.5, 2.0, 3.0, 1.0), None, 8, "positive")
    with pytest.raises(ValueError, match="geom.half_sq is a squared length"):
        theory.exact_mse(theory.Geometry(16, -2.0, 3.0, 1.0), None, 8, "positive")
    with pytest.raises(ValueError, match="do not broadcast"):
        theory.exact_mse(theory.Geometry(16, [1, 2], [1, 2, 3], 1.0), None, 8, "trig")
    with pytest.raises(TypeError, match="then x must be a theory.Geometry"):
        theory.exact_mse((16, 2, 3, 1), None, 8, "positive")
