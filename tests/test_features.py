"""Tests of rfkernels.features: the three feature maps, the estimates they give,
the exact kernel, the log-domain path and the overflow and validation policy.

Monte Carlo tests use fixed seeds, moderate |x + y| (MATH.md: the error of
positive and hyperbolic estimates is heavy-tailed for |u|^2 >~ 1), |z| < 4, and
check that no single trial dominates the squared error.
"""

import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special

import rfkernels.features as features_mod
from rfkernels import PAPER_KINDS as KINDS  # oprf: tests/test_beyond.py
from rfkernels.backends import cupy_available
from rfkernels.features import (
    estimate,
    feature_map,
    log_estimate,
    log_softmax_kernel,
    softmax_kernel,
)
from rfkernels.projections import draw_projections

R_PER_M = {"trig": 2, "positive": 1, "hyperbolic": 2}


@pytest.fixture
def data():
    rng = np.random.default_rng(2024)
    X = 0.4 * rng.standard_normal((5, 4))
    Y = 0.4 * rng.standard_normal((3, 4))
    W = draw_projections(9, 4, ensemble="orthogonal", seed=7)
    return X, Y, W


def reference_estimate(x, y, W, kind):
    """MATH.md's scalar formulas, written independently of the feature maps."""
    u, z = x + y, x - y
    lam = np.exp(-(x @ x + y @ y) / 2)
    if kind == "trig":
        return np.exp((x @ x + y @ y) / 2) * np.mean(np.cos(W @ z))
    if kind == "positive":
        return lam * np.mean(np.exp(W @ u))
    return lam * np.mean(np.cosh(W @ u))


def zscore(samples, target):
    samples = np.asarray(samples, dtype=float)
    return (samples.mean() - target) / (samples.std(ddof=1) / np.sqrt(samples.size))


# ------------------------------------------------------------ shapes and identities


@pytest.mark.parametrize("kind", KINDS)
def test_feature_shapes(data, kind):
    X, Y, W = data
    phi = feature_map(X, W, kind)
    assert phi.shape == (5, R_PER_M[kind] * 9)
    assert phi.dtype == np.float64
    assert estimate(X, Y, W, kind).shape == (5, 3)
    assert softmax_kernel(X, Y).shape == (5, 3)
    sign, logabs = log_estimate(X, Y, W, kind)
    assert sign.shape == logabs.shape == (5, 3)


@pytest.mark.parametrize("kind", KINDS)
def test_feature_products_equal_estimate(data, kind):
    X, Y, W = data
    np.testing.assert_allclose(
        feature_map(X, W, kind) @ feature_map(Y, W, kind).T,
        estimate(X, Y, W, kind),
        rtol=1e-14,
    )


@pytest.mark.parametrize("kind", KINDS)
def test_estimate_matches_math_md_formulas(data, kind):
    X, Y, W = data
    expected = np.array([[reference_estimate(x, y, W, kind) for y in Y] for x in X])
    np.testing.assert_allclose(estimate(X, Y, W, kind), expected, rtol=1e-12)


def test_feature_maps_explicit():
    """The exact column layout: [sin | cos] and [exp(+) | exp(-)], 1/sqrt(m) included."""
    x = np.array([0.3, -0.2])
    W = np.array([[1.0, 2.0], [-0.5, 0.25], [0.0, 1.0]])
    p = W @ x
    h = x @ x / 2
    np.testing.assert_allclose(
        feature_map(x, W, "trig"), np.exp(h) * np.r_[np.sin(p), np.cos(p)] / np.sqrt(3), rtol=1e-15
    )
    np.testing.assert_allclose(
        feature_map(x, W, "positive"), np.exp(p - h) / np.sqrt(3), rtol=1e-15
    )
    np.testing.assert_allclose(
        feature_map(x, W, "hyperbolic"), np.exp(-h) * np.r_[np.exp(p), np.exp(-p)] / np.sqrt(6),
        rtol=1e-14,
    )


def test_softmax_kernel_and_log(data):
    X, Y, _ = data
    np.testing.assert_allclose(softmax_kernel(X, Y), np.exp(X @ Y.T), rtol=1e-15)
    np.testing.assert_allclose(log_softmax_kernel(X, Y), X @ Y.T, rtol=1e-15)


@pytest.mark.parametrize("kind", KINDS)
def test_one_dimensional_inputs_are_single_rows(data, kind):
    X, Y, W = data
    full = estimate(X, Y, W, kind)
    assert np.ndim(estimate(X[1], Y[2], W, kind)) == 0
    assert estimate(X[1], Y[2], W, kind) == pytest.approx(full[1, 2], rel=1e-14)
    np.testing.assert_allclose(estimate(X[1], Y, W, kind), full[1], rtol=1e-14)
    np.testing.assert_allclose(estimate(X, Y[2], W, kind), full[:, 2], rtol=1e-14)
    np.testing.assert_allclose(feature_map(X[1], W, kind), feature_map(X, W, kind)[1], rtol=1e-15)
    sign, logabs = log_estimate(X[1], Y, W, kind)
    assert sign.shape == logabs.shape == (3,)
    assert softmax_kernel(X[1], Y[2]) == pytest.approx(math.exp(X[1] @ Y[2]), rel=1e-15)
    assert np.ndim(log_softmax_kernel(X[1], Y[2])) == 0


def test_empty_batches(data):
    _, Y, W = data
    X = np.empty((0, 4))
    assert estimate(X, Y, W, "positive").shape == (0, 3)
    assert log_estimate(X, Y, W, "hyperbolic")[1].shape == (0, 3)
    assert feature_map(X, W, "trig").shape == (0, 18)


def test_lists_are_accepted():
    assert estimate([[0.1, 0.2]], [[0.3, 0.0]], [[1.0, 0.0]], "positive").shape == (1, 1)


# ------------------------------------------------------------ unbiasedness


def _pair(d, seed):
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((2, d))
    x = 0.55 * a / np.linalg.norm(a)
    y = 0.55 * b / np.linalg.norm(b)
    return x, y


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
@pytest.mark.parametrize("kind", KINDS)
def test_unbiased(kind, ensemble):
    """m = 12, d = 8 (the orthogonal W has a partial second block), 4000 trials."""
    d, m, n = 8, 12, 4000
    x, y = _pair(d, 5)
    u2 = (x + y) @ (x + y)
    assert 0.1 < u2 < 1.3  # moderate |u|: the Monte Carlo tail is tame
    g = np.random.default_rng(100 + KINDS.index(kind))
    est = np.array(
        [estimate(x, y, draw_projections(m, d, ensemble=ensemble, seed=g), kind) for _ in range(n)]
    )
    sm = math.exp(x @ y)
    sq = (est - sm) ** 2
    assert sq.max() / sq.sum() < 0.02
    assert abs(zscore(est, sm)) < 4


def test_fixed_norms_mean_is_hyp0f1():
    """SMREG (rows of length sqrt(d)): E[positive] = Lambda 0F1(; d/2; d|u|^2/4), not SM."""
    d, m, n = 8, 12, 4000
    x, y = _pair(d, 5)
    u2 = (x + y) @ (x + y)
    g = np.random.default_rng(7)
    est = np.array(
        [
            estimate(x, y, draw_projections(m, d, norms="fixed", seed=g), "positive")
            for _ in range(n)
        ]
    )
    lam = math.exp(-(x @ x + y @ y) / 2)
    assert abs(zscore(est, lam * special.hyp0f1(d / 2, d * u2 / 4))) < 4


def test_unbiasedness_test_can_fail():
    """The same Monte Carlo check rejects an estimator that is off by 3 %."""
    d, m, n = 8, 12, 4000
    x, y = _pair(d, 5)
    g = np.random.default_rng(100)
    est = np.array(
        [estimate(x, y, draw_projections(m, d, seed=g), "positive") for _ in range(n)]
    )
    assert abs(zscore(est, 1.03 * math.exp(x @ y))) > 4


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
@pytest.mark.parametrize("kind", KINDS)
def test_estimate_converges_to_softmax_kernel(kind, ensemble):
    rng = np.random.default_rng(8)
    X = 0.35 * rng.standard_normal((4, 6))
    Y = 0.35 * rng.standard_normal((5, 6))
    exact = softmax_kernel(X, Y)
    errors = []
    for m in (16, 65536):
        W = draw_projections(m, 6, ensemble=ensemble, seed=m)
        errors.append(np.mean(np.abs(estimate(X, Y, W, kind) / exact - 1)))
    # error ~ 1/sqrt(m): a factor 64 expected, at least 10 demanded
    assert errors[1] < 0.02
    assert errors[0] / errors[1] > 10


# ------------------------------------------------------------ log domain


@pytest.mark.parametrize("kind", KINDS)
def test_log_estimate_matches_log_of_estimate(kind):
    rng = np.random.default_rng(9)
    X = 0.8 * rng.standard_normal((6, 5))
    Y = 0.8 * rng.standard_normal((7, 5))
    W = draw_projections(33, 5, ensemble="orthogonal", seed=9)
    est = estimate(X, Y, W, kind)
    sign, logabs = log_estimate(X, Y, W, kind)
    np.testing.assert_array_equal(sign, np.sign(est))
    np.testing.assert_allclose(logabs, np.log(np.abs(est)), rtol=1e-10, atol=1e-13)


def test_log_estimate_trig_negative_entries_have_sign_minus_one():
    x = np.array([1.0, 0.0])
    W = np.array([[math.pi / 2, 0.0]])  # cos(W(x - (-x))) = cos(pi) = -1
    sign, logabs = log_estimate(x, -x, W, "trig")
    assert sign == -1.0
    assert logabs == pytest.approx(1.0, rel=1e-12)  # (|x|^2 + |y|^2)/2 + log 1


def test_log_estimate_trig_exact_zero():
    # cos(0) + cos(pi) + cos(0) + cos(pi) = 0. With m = 4 and y = 0 the features of y are
    # exactly 0 (sin) and 1/sqrt(4) = 0.5 (cos), so every product in the matrix product is
    # exact and every partial sum a multiple of exp(pi^2/2)/4: the result is exactly 0
    # whatever the BLAS kernel's order and use of fused multiply-adds. (With m = 2 the
    # features are +-c/sqrt(2), and an FMA kernel returns the rounding error of c/sqrt(2)
    # times 1/sqrt(2), -4.9e-15, instead of 0.)
    W = np.array([[0.0], [1.0], [0.0], [1.0]])
    x, y = np.array([math.pi]), np.array([0.0])
    assert math.cos(math.pi) == -1.0  # the premise: cos(fl(pi)) rounds to -1 exactly
    sign, logabs = log_estimate(x, y, W, "trig")
    assert sign == 0.0
    assert logabs == -np.inf
    assert estimate(x, y, W, "trig") == 0.0


def _big_pair():
    x = np.zeros(3)
    x[0] = 40.0
    return x, x.copy()


def test_log_estimate_analytic_overflow_cases():
    """m = 1, |x| = |y| = 40 (x = y): estimate overflows, the log stays exact."""
    x, y = _big_pair()
    W = np.array([[30.0, 0.0, 0.0]])
    wu = W[0] @ (x + y)  # 2400
    half = (x @ x + y @ y) / 2  # 1600
    s, l = log_estimate(x, y, W, "positive")
    assert (s, l) == (1.0, pytest.approx(wu - half, rel=1e-15))  # 800
    s, l = log_estimate(x, y, W, "hyperbolic")
    assert (s, l) == (1.0, pytest.approx(wu - half - math.log(2), rel=1e-15))  # log cosh
    # trig: exp(1600) cos(w.(x - y)); use y = x rotated so the cosine is not 1
    y2 = np.array([0.0, 40.0, 0.0])
    W2 = np.array([[0.01, 0.02, 0.0]])
    s, l = log_estimate(x, y2, W2, "trig")
    c = math.cos(W2[0] @ (x - y2))
    assert s == np.sign(c)
    assert l == pytest.approx(1600 + math.log(abs(c)), rel=1e-14)
    for kind, w in (("positive", W), ("hyperbolic", W), ("trig", W2)):
        with pytest.raises(FloatingPointError):
            estimate(x, y2 if kind == "trig" else y, w, kind)


def _mp_log_estimate(x, y, W, kind):
    mpmath.mp.dps = 50
    x = [mpmath.mpf(float(v)) for v in x]
    y = [mpmath.mpf(float(v)) for v in y]
    dot = lambda a, b: mpmath.fsum(p * q for p, q in zip(a, b))  # noqa: E731
    sq = (dot(x, x) + dot(y, y)) / 2
    rows = [[mpmath.mpf(float(v)) for v in w] for w in W]
    if kind == "trig":
        mean = mpmath.fsum(mpmath.cos(dot(w, x) - dot(w, y)) for w in rows) / len(rows)
        return int(mpmath.sign(mean)), float(sq + mpmath.log(abs(mean)))
    f = mpmath.exp if kind == "positive" else mpmath.cosh
    mean = mpmath.fsum(f(dot(w, x) + dot(w, y)) for w in rows) / len(rows)
    return 1, float(mpmath.log(mean) - sq)


@pytest.mark.parametrize("kind", KINDS)
def test_log_estimate_large_inputs_against_mpmath(kind):
    rng = np.random.default_rng(11)
    d = 4
    X = rng.standard_normal((3, d))
    Y = rng.standard_normal((2, d))
    X *= 40 / np.linalg.norm(X, axis=1, keepdims=True)
    Y *= 40 / np.linalg.norm(Y, axis=1, keepdims=True)
    W = draw_projections(7, d, ensemble="orthogonal", seed=11)
    sign, logabs = log_estimate(X, Y, W, kind)
    assert np.all(np.isfinite(logabs))
    for i in range(3):
        for j in range(2):
            s_ref, l_ref = _mp_log_estimate(X[i], Y[j], W, kind)
            assert sign[i, j] == s_ref
            assert abs(logabs[i, j] - l_ref) < 1e-9 * max(1.0, abs(l_ref)), (i, j)


def test_log_estimate_when_the_shifted_product_underflows():
    """x's largest exponent and y's sit on different features: the max-shifted
    product is exp(-800) -> 0 and the exact per-pair fallback must take over."""
    x = np.array([20.0, -20.0])
    y = -x
    W = 20.0 * np.eye(2)
    for kind in ("positive", "hyperbolic"):
        assert estimate(x, y, W, kind) == 0.0  # underflow is not an error
        s, l = log_estimate(x, y, W, kind)
        assert s == 1.0
        assert l == pytest.approx(-800.0, rel=1e-15)


@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_log_estimate_batch_equals_pairs_with_chunked_fallback(kind, monkeypatch):
    rng = np.random.default_rng(12)
    big = np.array([[20.0, -20.0], [-20.0, 20.0], [15.0, -25.0]])
    X = np.vstack([big, 0.5 * rng.standard_normal((2, 2))])
    Y = np.vstack([-big, 0.5 * rng.standard_normal((3, 2))])
    W = np.vstack([20.0 * np.eye(2), 0.1 * rng.standard_normal((3, 2))])
    pairs = np.array([[log_estimate(x, y, W, kind)[1] for y in Y] for x in X])
    monkeypatch.setattr(features_mod, "LME_CHUNK", 5)  # force several fallback chunks
    sign, logabs = log_estimate(X, Y, W, kind)
    assert np.all(sign == 1.0)
    np.testing.assert_allclose(logabs, pairs, rtol=1e-13)
    for i in range(3):
        for j in range(3):
            ref = _mp_log_estimate(X[i], Y[j], W, kind)[1]
            assert logabs[i, j] == pytest.approx(ref, rel=1e-12)


# ------------------------------------------------------------ overflow policy


def test_estimate_overflow_raises():
    x, y = _big_pair()
    W = draw_projections(4, 3, seed=0)
    with pytest.raises(FloatingPointError, match="too large for the linear domain.*log_estimate"):
        estimate(x, y, W, "trig")


def test_feature_map_overflow_raises():
    x = np.array([40.0, 0.0])
    W = np.ones((2, 2))
    with pytest.raises(FloatingPointError, match="too large for the linear domain.*log_estimate"):
        feature_map(x, W, "trig")
    with pytest.raises(FloatingPointError, match="feature_map"):
        feature_map(x, 60 * W, "positive")  # exp(2400 - 800)


def test_softmax_kernel_overflow_raises():
    x, y = _big_pair()
    with pytest.raises(
        FloatingPointError, match="too large for the linear domain.*log_softmax_kernel"
    ):
        softmax_kernel(x, y)
    assert log_softmax_kernel(x, y) == 1600.0


def test_no_floating_point_warnings_escape():
    """Under a caller's errstate(all='raise') the only error is ours; underflow is fine."""
    x, y = _big_pair()
    W = draw_projections(4, 3, seed=0)
    with np.errstate(all="raise"):
        with pytest.raises(FloatingPointError, match="linear domain"):
            estimate(x, y, W, "trig")
        # positive at |x| = |y| = 40: typical estimates are ~exp(-1000), they underflow to 0
        assert np.all(estimate(x, y, W, "positive") >= 0)
        for kind in KINDS:
            assert np.all(np.isfinite(log_estimate(x, y, W, kind)[1]))


@pytest.mark.parametrize("kind", KINDS)
def test_log_estimate_raises_beyond_the_log_domain(kind):
    x = np.array([1e200, 0.0])  # |x|^2 = inf in float64
    with pytest.raises(FloatingPointError, match="even in the log domain"):
        log_estimate(x, x, np.eye(2), kind)


# ------------------------------------------------------------ validation


FUNCS_WITH_W = [
    lambda X, Y, W, k: estimate(X, Y, W, k),
    lambda X, Y, W, k: log_estimate(X, Y, W, k),
    lambda X, Y, W, k: feature_map(X, W, k),
]


@pytest.mark.parametrize("f", FUNCS_WITH_W)
def test_unknown_kind(data, f):
    X, Y, W = data
    with pytest.raises(ValueError, match="kind must be one of 'trig', 'positive', 'hyperbolic'"):
        f(X, Y, W, "gaussian")


@pytest.mark.parametrize("f", FUNCS_WITH_W[:2])
@pytest.mark.parametrize("which", ["X", "Y", "W"])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite(data, f, which, bad):
    args = dict(zip("XYW", (a.copy() for a in data)))
    args[which][0, 0] = bad
    with pytest.raises(ValueError, match=f"{which} must be finite"):
        f(args["X"], args["Y"], args["W"], "positive")


def test_non_finite_feature_map_and_kernel(data):
    X, Y, W = data
    X = X.copy()
    X[1, 1] = np.nan
    with pytest.raises(ValueError, match="X must be finite"):
        feature_map(X, W, "trig")
    with pytest.raises(ValueError, match="X must be finite"):
        softmax_kernel(X, Y)
    with pytest.raises(ValueError, match="X must be finite"):
        log_softmax_kernel(X, Y)


def test_dimension_mismatch(data):
    X, Y, W = data
    with pytest.raises(ValueError, match="X has d=4, Y has d=4, W has d=3"):
        estimate(X, Y, W[:, :3], "trig")
    with pytest.raises(ValueError, match="X has d=4, Y has d=2, W has d=4"):
        log_estimate(X, Y[:, :2], W, "positive")
    with pytest.raises(ValueError, match="X has d=4, W has d=3"):
        feature_map(X, W[:, :3], "hyperbolic")
    with pytest.raises(ValueError, match="X has d=4, Y has d=3"):
        softmax_kernel(X, Y[:, :3])
    with pytest.raises(ValueError, match="X has d=4, Y has d=3"):
        log_softmax_kernel(X, Y[:, :3])


@pytest.mark.parametrize("shape", [(), (2, 3, 4)])
def test_bad_ndim(data, shape):
    X, Y, W = data
    bad = np.zeros(shape)
    with pytest.raises(ValueError, match=r"X must be a 1-D vector \(d,\) or a 2-D array"):
        estimate(bad, Y, W, "positive")
    with pytest.raises(ValueError, match=r"Y must be a 1-D vector \(d,\) or a 2-D array"):
        softmax_kernel(X, bad)


def test_zero_dimension(data):
    _, Y, W = data
    with pytest.raises(ValueError, match="X must have d >= 1 columns"):
        estimate(np.zeros((2, 0)), Y, W, "positive")
    with pytest.raises(ValueError, match="X must have d >= 1 entries"):
        feature_map(np.zeros(0), W, "positive")


def test_bad_W(data):
    X, Y, W = data
    with pytest.raises(ValueError, match=r"W must be a 2-D array of shape \(m, d\)"):
        estimate(X, Y, W[0], "positive")
    with pytest.raises(ValueError, match="W must have m >= 1 rows"):
        estimate(X, Y, W[:0], "positive")
    with pytest.raises(ValueError, match="W must be finite"):
        feature_map(X, np.full((2, 4), np.nan), "trig")


def test_kind_checked_before_arrays(data):
    X, Y, W = data
    with pytest.raises(ValueError, match="kind must be one of"):
        estimate(np.full((2, 4), np.nan), Y, W, "nope")


# ------------------------------------------------------------ property test


@settings(max_examples=60, deadline=None)
@given(
    n_x=st.integers(1, 4),
    n_y=st.integers(1, 4),
    m=st.integers(1, 5),
    d=st.integers(1, 4),
    kind=st.sampled_from(KINDS),
    ensemble=st.sampled_from(["iid", "orthogonal"]),
    scale=st.floats(0.0, 1.5),
    seed=st.integers(0, 2**32 - 1),
)
def test_shapes_and_symmetry_property(n_x, n_y, m, d, kind, ensemble, scale, seed):
    rng = np.random.default_rng(seed)
    X = scale * rng.standard_normal((n_x, d))
    Y = scale * rng.standard_normal((n_y, d))
    W = draw_projections(m, d, ensemble=ensemble, seed=rng)
    assert feature_map(X, W, kind).shape == (n_x, R_PER_M[kind] * m)
    k_xy = estimate(X, Y, W, kind)
    assert k_xy.shape == (n_x, n_y)
    # X @ Y.T and Y @ X.T may run different BLAS kernels: compare up to the rounding of a
    # sum of 2m features, each at most exp((|x|^2 + |y|^2)/2) in magnitude (trig can cancel)
    half_sq = 0.5 * (X * X).sum(1)[:, None] + 0.5 * (Y * Y).sum(1)[None, :]
    scale = np.exp(half_sq) if kind == "trig" else np.abs(k_xy)
    np.testing.assert_array_less(np.abs(k_xy - estimate(Y, X, W, kind).T),
                                 1e-12 * scale + 1e-300)
    sign, logabs = log_estimate(X, Y, W, kind)
    sign_t, logabs_t = log_estimate(Y, X, W, kind)
    assert sign.shape == logabs.shape == (n_x, n_y)
    clear = (logabs - half_sq > np.log(1e-9)) if kind == "trig" else np.ones_like(sign, bool)
    np.testing.assert_array_equal(sign[clear], sign_t.T[clear])  # signs beyond rounding
    np.testing.assert_allclose(logabs[clear], logabs_t.T[clear], rtol=1e-12, atol=1e-12)
    nonzero = sign != 0
    np.testing.assert_array_less(  # as above: trig sums may cancel to the rounding level
        np.abs(sign * np.exp(logabs) - k_xy)[nonzero],
        (1e-9 * np.abs(k_xy) + 1e-12 * scale + 1e-300)[nonzero],
    )
    if kind != "trig":
        assert np.all(sign == 1.0)
        assert np.all(k_xy > 0)


# ------------------------------------------------------------ backends


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("kind", KINDS)
def test_cupy_in_cupy_out(data, kind):
    import cupy

    X, Y, W = data
    Xc, Yc, Wc = (cupy.asarray(a) for a in data)
    for got, want in [
        (estimate(Xc, Yc, Wc, kind), estimate(X, Y, W, kind)),
        (feature_map(Xc, Wc, kind), feature_map(X, W, kind)),
        (log_estimate(Xc, Yc, Wc, kind)[1], log_estimate(X, Y, W, kind)[1]),
        (softmax_kernel(Xc, Yc), softmax_kernel(X, Y)),
    ]:
        assert isinstance(got, cupy.ndarray)
        np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-12)
    with pytest.raises(FloatingPointError, match="linear domain"):
        softmax_kernel(cupy.full((1, 1), 40.0), cupy.full((1, 1), 40.0))
