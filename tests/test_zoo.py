"""The Kernel Zoo of linear attention: identity, ELU+1, DPFP-nu beside FAVOR+ (issue 13).

Feature maps (values, shapes, positivity, errors), linear attention with any
map (against a direct O(L^2) computation, causality, sum normalisation), the
worked examples of the source document, and the attention-error study.
"""

import numpy as np
import pytest
from rfkernels.analysis.attention import attention_inputs, feature_map_attention_mse

from rfkernels import (
    FEATURE_MAPS,
    KINDS,
    draw_projections,
    favor_attention,
    feature_dimension,
    feature_map,
    linear_attention,
)
from rfkernels import PAPER_KINDS
from rfkernels.backends import cupy_available

RNG = np.random.default_rng(13)
X = RNG.standard_normal((7, 5))


def _elu1(x):
    return np.where(x > 0, x + 1, np.exp(np.minimum(x, 0)))


def _dpfp_loops(x, nu):
    """DPFP-nu written with explicit index arithmetic (i + s) mod 2d."""
    d = x.shape[-1]
    kt = np.maximum(np.concatenate([x, -x]), 0)
    return np.array([kt[i] * kt[(i + s) % (2 * d)] for s in range(1, nu + 1) for i in range(2 * d)])


# ---------------------------------------------------------------- feature maps


def test_feature_map_names_are_apart_from_the_random_kinds():
    from rfkernels.analysis import monte_carlo_mse

    from rfkernels import estimate, theory

    assert FEATURE_MAPS == ("identity", "elu1", "dpfp")
    assert not set(FEATURE_MAPS) & set(KINDS)
    # estimates, theory and Monte Carlo take the random kinds only
    x = np.ones(3) / 3
    for kind in FEATURE_MAPS:
        for call in (lambda k=kind: estimate(x, x, np.ones((2, 3)), k),
                     lambda k=kind: theory.exact_mse(x, x, 4, k),
                     lambda k=kind: monte_carlo_mse(x, x, 4, k, trials=10, backend="numpy")):
            with pytest.raises(ValueError, match="kind must be one of 'trig', 'positive', 'hyperbolic'"):
                call()


@pytest.mark.parametrize("nu", [1, 2, 3, 9])
def test_dpfp_values_and_shape(nu):
    phi = feature_map(X, None, "dpfp", nu=nu)
    assert phi.shape == (7, 2 * 5 * nu) == (7, feature_dimension("dpfp", 5, nu=nu))
    np.testing.assert_array_equal(phi, np.array([_dpfp_loops(x, nu) for x in X]))
    assert (phi >= 0).all()


def test_identity_and_elu1_values_shapes_and_positivity():
    np.testing.assert_array_equal(feature_map(X, None, "identity"), X)
    phi = feature_map(X, None, "elu1")
    np.testing.assert_allclose(phi, _elu1(X), rtol=1e-15)
    assert phi.shape == (7, 5) and (phi > 0).all()
    assert feature_map(X[0], None, "elu1").shape == (5,)
    # no overflow for large |x|: exp only ever sees x <= 0
    big = feature_map(np.array([[800.0, -800.0]]), None, "elu1")
    np.testing.assert_array_equal(big, [[801.0, 0.0]])
    a = feature_map(X, None, "identity")
    a[0, 0] = 99.0
    assert X[0, 0] != 99.0  # a copy, not a view of the caller's array


def test_seed_dpfp_example():
    """Section 6.5/6.6 of the source: DPFP-1 of (1.5, -0.8), (-0.5, 1.2), (1, 1), (0, 1)."""
    keys = np.array([[1.5, -0.8], [-0.5, 1.2], [1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 2.0]])
    phi = feature_map(keys, None, "dpfp", nu=1)
    np.testing.assert_allclose(phi[0], [0, 0, 0, 1.2], rtol=1e-15)
    np.testing.assert_allclose(phi[1], [0, 0.6, 0, 0], rtol=1e-15)
    np.testing.assert_array_equal(phi[2], [1, 0, 0, 0])
    np.testing.assert_array_equal(phi[3:], 0)  # the degenerate keys map to 0
    assert phi[0] @ phi[1] == 0.0 and keys[0] @ keys[1] == pytest.approx(-1.71)


def test_seed_sum_normalisation_example():
    """Section 7.3: phi'(q1) = (2/3, 1/3), phi'(k1) = (1/3, 2/3), similarity 4/9."""
    q = feature_map(np.array([1.0, 0.0]), None, "elu1", sum_normalize=True)
    k = feature_map(np.array([0.0, 1.0]), None, "elu1", sum_normalize=True)
    np.testing.assert_allclose(q, [2 / 3, 1 / 3], rtol=1e-15)
    np.testing.assert_allclose(k, [1 / 3, 2 / 3], rtol=1e-15)
    assert q @ k == pytest.approx(4 / 9, rel=1e-15)
    assert feature_map(np.array([1.0, 0.0]), None, "elu1") @ feature_map(
        np.array([0.0, 1.0]), None, "elu1") == 4.0


@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "elu1", "dpfp"])
def test_sum_normalisation_divides_by_the_sum(kind):
    W = draw_projections(6, 5, seed=1) if kind in KINDS else None
    nu = 2 if kind == "dpfp" else None  # DPFP-1 of X[5] (signs +-+-+) is 0: see test_feature_map_errors
    phi = feature_map(X, W, kind, nu=nu)
    phi_s = feature_map(X, W, kind, nu=nu, sum_normalize=True)
    np.testing.assert_allclose(phi_s, phi / phi.sum(axis=1, keepdims=True), rtol=1e-13)
    np.testing.assert_allclose(phi_s.sum(axis=1), 1.0, rtol=1e-14)


def test_sum_normalisation_does_not_overflow_where_the_features_would():
    W = draw_projections(6, 5, seed=1)
    assert (feature_map(X * 40, W, "positive") == 0).all()  # exp(w.x - |x|^2/2) underflows
    phi_s = feature_map(X * 40, W, "positive", sum_normalize=True)
    np.testing.assert_allclose(phi_s.sum(axis=1), 1.0, rtol=1e-14)
    e = (X * 40) @ W.T
    np.testing.assert_allclose(phi_s, np.exp(e - e.max(axis=1, keepdims=True))
                               / np.exp(e - e.max(axis=1, keepdims=True)).sum(axis=1, keepdims=True),
                               rtol=1e-13)
    big = feature_map(X * 1e200, None, "dpfp", nu=2, sum_normalize=True)
    np.testing.assert_allclose(big, feature_map(X, None, "dpfp", nu=2, sum_normalize=True),
                               rtol=1e-14)
    with pytest.raises(FloatingPointError, match="overflowed"):
        feature_map(X * 1e200, None, "dpfp")


@pytest.mark.parametrize(
    "call, exc, match",
    [
        (lambda: feature_map(X, np.ones((3, 5)), "elu1"), ValueError, "W must be None for the deterministic"),
        (lambda: feature_map(X, None, "positive"), ValueError, "W is required for the random"),
        (lambda: feature_map(X, None, "softplus"), ValueError, "kind must be one of .*'dpfp'"),
        (lambda: feature_map(X, None, "dpfp", nu=10), ValueError, r"nu must be between 1 and 2d - 1 = 9"),
        (lambda: feature_map(X, None, "dpfp", nu=0), ValueError, "nu"),
        (lambda: feature_map(X, None, "dpfp", nu=1.5), TypeError, "nu"),
        (lambda: feature_map(X, None, "elu1", nu=2), ValueError, "nu is the parameter of kind='dpfp'"),
        (lambda: feature_map(X, None, "identity", sum_normalize=True), ValueError, "can be negative"),
        (lambda: feature_map(X, np.ones((3, 5)), "trig", sum_normalize=True), ValueError, "can be negative"),
        (lambda: feature_map(X, None, "elu1", sum_normalize=1), TypeError, "sum_normalize"),
        (lambda: feature_map(np.array([[0.0, 1.0]]), None, "dpfp", sum_normalize=True),
         FloatingPointError, r"1 row\(s\) have features that are all 0 \(rows 0\)"),
        (lambda: feature_map(X, None, "dpfp", sum_normalize=True),  # X[5] has signs + - + - +
         FloatingPointError, r"1 row\(s\) have features that are all 0 \(rows 5\)"),
    ],
)
def test_feature_map_errors(call, exc, match):
    with pytest.raises(exc, match=match):
        call()


def test_feature_dimension():
    assert feature_dimension("elu1", 64) == feature_dimension("identity", 64) == 64
    assert [feature_dimension("dpfp", 64, nu=nu) for nu in (1, 2, 3)] == [128, 256, 384]
    assert feature_dimension("positive", 64, m=266) == 266
    assert feature_dimension("trig", 64, m=10) == 20
    with pytest.raises(ValueError, match="m .* is required"):
        feature_dimension("positive", 64)
    with pytest.raises(ValueError, match="m is the number of projections"):
        feature_dimension("elu1", 64, m=3)


# ---------------------------------------------------------------- linear attention


def _direct(Q, K, V, kind, W=None, nu=None, causal=False, normalization="attention"):
    """O(L^2): weights phi(q_i).phi(k_j), masked, then divided by their row sums (or not)."""
    s = normalization == "sum"
    fq = feature_map(Q, W, kind, nu=nu, sum_normalize=s)
    fk = feature_map(K, W, kind, nu=nu, sum_normalize=s)
    a = fq @ fk.T
    if causal:
        a = np.tril(a)
    out = a @ V
    with np.errstate(divide="ignore", invalid="ignore"):  # zero normalisers: NaN rows, skipped
        return out if s else out / a.sum(axis=1, keepdims=True)


def _qkv(L=37, d=4, d_v=3, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((L, d)) / 2, rng.standard_normal((L, d)) / 2,
            rng.standard_normal((L, d_v)))


CASES = [("identity", None), ("elu1", None), ("dpfp", 1), ("dpfp", 3), ("positive", None),
         ("hyperbolic", None)]


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind, nu, normalization",
                         [(k, n, norm) for k, n in CASES for norm in ("attention", "sum")
                          if not (norm == "sum" and k == "identity")])  # identity can be negative
def test_linear_attention_is_the_direct_computation(kind, nu, causal, normalization):
    Q, K, V = _qkv()
    if kind == "identity":
        Q[5] = 0.0  # a zero normaliser (reported, not divided by silently)
    W = draw_projections(8, 4, seed=2) if kind in KINDS else None
    want = _direct(Q, K, V, kind, W, nu, causal, normalization)
    weights = feature_map(Q, W, kind, nu=nu) @ feature_map(K, W, kind, nu=nu).T
    zero_rows = np.flatnonzero((np.tril(weights) if causal else weights).sum(axis=1) <= 0)
    for block in (None, 5):
        res = linear_attention(Q, K, V, W, kind, nu=nu, causal=causal, normalization=normalization,
                               block_size=block, nonpositive="divide")
        assert res.output.shape == (37, 3)
        ok = np.isfinite(want).all(axis=1)
        np.testing.assert_allclose(res.output[ok], want[ok], rtol=1e-10, atol=1e-12)
        assert res.normalization == normalization and res.nu == nu and res.kind == kind
        if normalization == "sum":
            assert res.denominators is None and res.n_nonpositive_denominators == 0
            continue
        # identity: phi(q_5) = 0; DPFP: rows whose features share no support with any key's
        np.testing.assert_array_equal(res.nonpositive_rows, zero_rows)
        if kind == "identity":
            assert 5 in zero_rows
        if kind not in ("identity", "dpfp"):
            assert zero_rows.size == 0 and (res.denominators > 0).all()


def test_linear_attention_is_favor_attention_for_random_kinds():
    Q, K, V = _qkv()
    W = draw_projections(8, 4, seed=2)
    for kind in PAPER_KINDS:
        for causal in (False, True):
            a = favor_attention(Q, K, V, W, kind, causal=causal, nonpositive="divide")
            b = linear_attention(Q, K, V, W, kind, causal=causal, nonpositive="divide")
            np.testing.assert_array_equal(a.output, b.output)


@pytest.mark.parametrize("kind, nu", CASES)
def test_causal_output_does_not_see_the_future(kind, nu):
    Q, K, V = _qkv(L=40)
    W = draw_projections(8, 4, seed=2) if kind in KINDS else None
    norm = "attention" if kind == "identity" else "sum"
    before = linear_attention(Q, K, V, W, kind, nu=nu, causal=True, block_size=16,
                              normalization=norm, nonpositive="divide").output
    Q2, K2, V2 = Q.copy(), K.copy(), V.copy()
    rng = np.random.default_rng(9)
    Q2[25:] = rng.standard_normal(Q2[25:].shape)
    K2[25:] = rng.standard_normal(K2[25:].shape)
    V2[25:] = 100 * rng.standard_normal(V2[25:].shape)
    after = linear_attention(Q2, K2, V2, W, kind, nu=nu, causal=True, block_size=16,
                             normalization=norm, nonpositive="divide").output
    np.testing.assert_array_equal(after[:25], before[:25])
    assert not np.allclose(after[25:], before[25:])


def test_seed_memory_example():
    """Section 2.3: d = 2 ELU+1 memory, keys (0,1), (1,0), values (1,0), (0,1): S phi(k1) = (5, 4)."""
    K = np.array([[0.0, 1.0], [1.0, 0.0]])
    V = np.array([[1.0, 0.0], [0.0, 1.0]])
    phi = feature_map(K, None, "elu1")
    np.testing.assert_array_equal(phi, [[1, 2], [2, 1]])
    S = V.T @ phi  # S = sum_j v_j phi(k_j)^T
    np.testing.assert_array_equal(S @ phi[0], [5, 4])
    # linear attention with the query k1 over both keys: (5, 4) / (5 + 4)
    res = linear_attention(K[:1], K, V, None, "elu1")
    np.testing.assert_allclose(res.output[0], [5 / 9, 4 / 9], rtol=1e-15)
    assert res.denominators[0] == 9.0


def test_linear_attention_errors():
    Q, K, V = _qkv()
    W = draw_projections(8, 4, seed=2)
    with pytest.raises(ValueError, match="W must be None"):
        linear_attention(Q, K, V, W, "elu1")
    with pytest.raises(ValueError, match="W is required"):
        linear_attention(Q, K, V, None, "positive")
    with pytest.raises(ValueError, match="use linear_attention"):
        favor_attention(Q, K, V, None, "elu1")
    with pytest.raises(ValueError, match="normalization must be one of"):
        linear_attention(Q, K, V, None, "elu1", normalization="softmax")
    with pytest.raises(ValueError, match="can be negative"):
        linear_attention(Q, K, V, W, "trig", normalization="sum")
    with pytest.raises(ValueError, match=r"nu must be between 1 and 2d - 1 = 7"):
        linear_attention(Q, K, V, None, "dpfp", nu=8)
    with pytest.raises(FloatingPointError, match="linear_attention: sum normalisation.*all 0"):
        linear_attention(np.zeros((3, 4)), K[:3], V[:3], None, "dpfp", normalization="sum")
    with pytest.raises(FloatingPointError, match="linear_attention: .*overflowed"):
        linear_attention(Q * 1e160, K, V, None, "dpfp")
    with pytest.raises(FloatingPointError, match=r"linear_attention: \|q\|\^2 overflows"):
        linear_attention(Q * 1e200, K, V, W, "positive", normalization="sum")


# ---------------------------------------------------------------- attention error study


def test_feature_map_attention_mse_matches_a_direct_computation():
    table = feature_map_attention_mse(64, 4, kinds=("elu1", "dpfp"), nu_values=(1, 2),
                                      samples=3, seed=5)
    assert [(r["kind"], r["nu"], r["d_dot"]) for r in table.rows] == [
        ("elu1", None, 4), ("dpfp", 1, 8), ("dpfp", 2, 16)]
    for s in range(3):
        ss = np.random.SeedSequence(5, spawn_key=(0, s))
        Q, K, V = attention_inputs(64, 4, seed=ss)
        a = np.exp(Q @ K.T)
        exact = (a @ V) / a.sum(axis=1, keepdims=True)
        for g, r in enumerate(table.rows):
            approx = _direct(Q, K, V, r["kind"], None, r["nu"])
            assert table.per_sample_mse[g, s] == pytest.approx(np.mean((approx - exact) ** 2),
                                                               rel=1e-10)
    r = table.rows[0]
    assert r["mse_mean"] == pytest.approx(table.per_sample_mse[0].mean(), rel=1e-12)
    assert r["mse_se"] == pytest.approx(table.per_sample_mse[0].std(ddof=1) / np.sqrt(3), rel=1e-12)
    with pytest.raises(ValueError, match="kinds must be among"):
        feature_map_attention_mse(64, 4, kinds=("positive",), samples=2)


def test_zoo_attention_figure_pairs_favor_and_the_maps_on_the_same_inputs():
    from rfkernels.analysis import attention_mse
    from rfkernels.figures import figure_module

    mod = figure_module("zoo_attention")
    data = mod.compute(quick=True, seed=2)
    cfg = mod.settings(True)
    rows = [r for r in data["rows"] if r["input_scale"] == 1.0]
    assert {r["d_dot"] for r in rows if r["map"] == "dpfp"} == {32 * nu for nu in cfg["nu_values"]}
    fav = attention_mse(cfg["L"], cfg["d"], [16], ("positive",), ("orthogonal",),
                        samples=cfg["samples"], seed=2)
    got = next(r for r in rows if r["map"] == "favor+" and r["m"] == 16 and r["ensemble"] == "orthogonal")
    assert got["mse_mean"] == pytest.approx(fav.rows[0]["mse_mean"], rel=1e-12)
    assert all(r["mse_mean"] > 0 for r in data["rows"])


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("kind, nu", [("identity", None), ("elu1", None), ("dpfp", 2)])
@pytest.mark.parametrize("normalization", ["attention", "sum"])
def test_cupy_in_cupy_out_for_the_deterministic_maps(kind, nu, normalization):
    import cupy

    if normalization == "sum" and kind == "identity":
        pytest.skip("identity features can be negative: no sum normalisation")
    Q, K, V = _qkv(L=300, d=8)
    for causal in (False, True):
        want = linear_attention(Q, K, V, None, kind, nu=nu, causal=causal, block_size=64,
                                normalization=normalization, nonpositive="divide")
        got = linear_attention(*(cupy.asarray(a) for a in (Q, K, V)), None, kind, nu=nu,
                               causal=causal, block_size=64, normalization=normalization,
                               nonpositive="divide")
        assert isinstance(got.output, cupy.ndarray)
        np.testing.assert_allclose(cupy.asnumpy(got.output), want.output, rtol=1e-9, atol=1e-12)
    phi = feature_map(cupy.asarray(Q), None, kind, nu=nu)
    np.testing.assert_allclose(cupy.asnumpy(phi), feature_map(Q, None, kind, nu=nu), rtol=1e-14)
