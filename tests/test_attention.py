"""Tests of rfkernels.attention (exact and FAVOR attention), the Figure 4 study in
rfkernels.analysis.attention and the ``rfkernels attention`` command.

Identities (prefix sums = masked computation, stabilised = unstabilised,
blocked = dense) are checked to rounding. Statistical tests use fixed seeds
and thresholds of several standard errors; log-MSE comparisons are paired
over samples that share their inputs.
"""

import csv
import json
import math
import os
import tracemalloc

import numpy as np
import pytest

from rfkernels import PAPER_KINDS
from rfkernels.analysis.attention import (
    DEFAULT_INPUT_SCALE,
    AttentionMSETable,
    attention_inputs,
    attention_mse,
)
from rfkernels.attention import (
    NONPOSITIVE_POLICIES,
    AttentionResult,
    favor_attention,
    softmax_attention,
)
from rfkernels.backends import cupy_available
from rfkernels.commands.cli import main
from rfkernels.features import feature_map, log_estimate
from rfkernels.projections import draw_projections

ENSEMBLES = ("iid", "orthogonal")


def qkv(L, d, d_v=None, L_k=None, scale=0.5, seed=0):
    rng = np.random.default_rng(seed)
    L_k = L if L_k is None else L_k
    d_v = d if d_v is None else d_v
    s = scale / math.sqrt(d)
    return (s * rng.standard_normal((L, d)), s * rng.standard_normal((L_k, d)),
            rng.standard_normal((L_k, d_v)))


def dense_softmax(Q, K, V, causal=False):
    logits = Q @ K.T
    if causal:
        logits = np.where(np.tril(np.ones_like(logits, dtype=bool)), logits, -np.inf)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    return (p @ V) / p.sum(axis=1, keepdims=True)


def explicit_favor(Q, K, V, W, kind, causal=False):
    """Q'K'ᵀ formed explicitly from rfkernels.feature_map, masked, renormalised."""
    a = feature_map(Q, W, kind) @ feature_map(K, W, kind).T
    if causal:
        a = np.tril(a)
    return (a @ V) / a.sum(axis=1, keepdims=True)


# ------------------------------------------------------------ exact attention


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("block_size", [None, 1, 4, 13, 64])
def test_softmax_equals_dense(causal, block_size):
    Q, K, V = qkv(29, 5, d_v=3, scale=2.0)
    got = softmax_attention(Q, K, V, causal=causal, block_size=block_size)
    np.testing.assert_allclose(got, dense_softmax(Q, K, V, causal), rtol=1e-12, atol=1e-15)


def test_softmax_rectangular_and_first_causal_row():
    Q, K, V = qkv(7, 4, d_v=2, L_k=19)
    np.testing.assert_allclose(softmax_attention(Q, K, V), dense_softmax(Q, K, V), rtol=1e-12)
    Q, K, V = qkv(7, 4, d_v=2)
    np.testing.assert_allclose(softmax_attention(Q, K, V, causal=True)[0], V[0], rtol=1e-15)


def test_softmax_large_logits_do_not_overflow():
    # logits up to 1e4: exp would overflow without the row-max shift
    Q = np.array([[100.0, 0.0], [0.0, 100.0], [-100.0, 0.0]])
    K = np.array([[100.0, 0.0], [99.0, 0.0], [0.0, 100.0]])
    V = np.array([[1.0], [2.0], [3.0]])
    out = softmax_attention(Q, K, V)
    # row 0: weights ∝ (1, e^-100, e^-1e4); row 1: key 2; row 2: (e^-1e4, e^-9900, 1)
    np.testing.assert_allclose(out[:, 0], [1.0, 3.0, 3.0], rtol=0, atol=1e-12)
    causal = softmax_attention(Q, K, V, causal=True)
    np.testing.assert_allclose(causal[:, 0], [1.0, 1.5, 3.0], rtol=0, atol=1e-12)


def test_softmax_overflowing_logits_raise():
    big = np.full((2, 1), 1e200)
    with pytest.raises(FloatingPointError, match="softmax_attention overflowed"):
        softmax_attention(big, big, np.ones((2, 1)))


def _peak_bytes(fn):
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_blocked_not_quadratic():
    """At L = 8192 an L×L float64 matrix is 512 MiB; both attentions stay far below."""
    L, d, d_v, m = 8192, 4, 16, 64
    Q, K, V = qkv(L, d, d_v=d_v)
    W = draw_projections(m, d, ensemble="orthogonal", seed=0)
    out_bytes = L * d_v * 8
    exact = _peak_bytes(lambda: softmax_attention(Q, K, V, causal=True))
    # a few (block × L) temporaries of 4 Mi doubles each
    assert exact < out_bytes + 6 * 8 * (1 << 22), exact
    # causal FAVOR: all prefix states (L × r × d_v) would be 128 MiB here; the first trig call
    # loads the compiled sine and cosine (rfkernels.numerics.sincos), which is not attention's memory
    favor_attention(Q[:2], K[:2], V[:2], W, "trig")
    for causal in (False, True):
        favor = _peak_bytes(lambda: favor_attention(Q, K, V, W, "trig", causal=causal))
        assert favor < out_bytes + 8 * 2**20, (causal, favor)
    # a causal block of 1024 rows holds a (1024, 1024) matrix: O(block²), not O(L²)
    big = _peak_bytes(lambda: favor_attention(Q, K, V, W, "trig", causal=True, block_size=1024))
    assert big < out_bytes + 24 * 2**20, big


# ------------------------------------------------------------ FAVOR = explicit forms


@pytest.mark.parametrize("kind", PAPER_KINDS)
@pytest.mark.parametrize("ensemble", ENSEMBLES)
@pytest.mark.parametrize("L, L_k", [(23, 23), (9, 31)])
def test_bidirectional_equals_explicit_features(kind, ensemble, L, L_k):
    Q, K, V = qkv(L, 6, d_v=3, L_k=L_k)
    W = draw_projections(11, 6, ensemble=ensemble, seed=3)  # m > d: two blocks
    res = favor_attention(Q, K, V, W, kind, block_size=8)
    assert isinstance(res, AttentionResult)
    assert res.output.shape == (L, 3) and res.denominators.shape == (L,)
    assert res.n_nonpositive_denominators == 0 and res.nonpositive_rows.size == 0
    np.testing.assert_allclose(res.output, explicit_favor(Q, K, V, W, kind), rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("kind", PAPER_KINDS)
@pytest.mark.parametrize("block_size", [1, 3, 7, 40, 1000])
def test_causal_prefix_sums_equal_masked_computation(kind, block_size):
    Q, K, V = qkv(40, 5, d_v=4)
    W = draw_projections(9, 5, ensemble="orthogonal", seed=1)
    res = favor_attention(Q, K, V, W, kind, causal=True, block_size=block_size)
    np.testing.assert_allclose(
        res.output, explicit_favor(Q, K, V, W, kind, causal=True), rtol=1e-11, atol=1e-13
    )


@pytest.mark.parametrize("kind", PAPER_KINDS)
def test_causal_row_depends_only_on_inputs_up_to_it(kind):
    L, i = 30, 12
    Q, K, V = qkv(L, 4, d_v=2, seed=5)
    W = draw_projections(8, 4, seed=2)
    rng = np.random.default_rng(9)
    Q2, K2, V2 = Q.copy(), K.copy(), V.copy()
    for a in (Q2, K2, V2):
        a[i + 1:] += rng.standard_normal(a[i + 1:].shape)
    for block_size in (1, 8, 64):
        a, b = (favor_attention(*x, W, kind, causal=True, block_size=block_size,
                                nonpositive="divide").output
                for x in ((Q, K, V), (Q2, K2, V2)))
        # the running key shift of a block may include later keys of that block:
        # it cancels exactly, so only rounding can differ
        np.testing.assert_allclose(a[: i + 1], b[: i + 1], rtol=1e-12, atol=1e-14)
        assert np.max(np.abs(a[i + 1:] - b[i + 1:])) > 1e-3  # the test can fail
    e1 = softmax_attention(Q, K, V, causal=True, block_size=7)
    e2 = softmax_attention(Q2, K2, V2, causal=True, block_size=7)
    np.testing.assert_allclose(e1[: i + 1], e2[: i + 1], rtol=1e-13, atol=1e-15)


# ------------------------------------------------------------ stabilisation


@pytest.mark.parametrize("kind", PAPER_KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_stabilisation_does_not_change_the_output(kind, causal):
    Q, K, V = qkv(50, 8, d_v=3, scale=3.0, seed=4)  # |q|² ≈ 9: unshifted features ~ e^±20
    W = draw_projections(16, 8, ensemble="orthogonal", seed=4)
    a = favor_attention(Q, K, V, W, kind, causal=causal, block_size=16, nonpositive="divide")
    b = favor_attention(Q, K, V, W, kind, causal=causal, block_size=16, nonpositive="divide",
                        stabilize=False)
    assert a.n_nonpositive_denominators == b.n_nonpositive_denominators
    np.testing.assert_allclose(a.output, b.output, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(np.sign(a.denominators), np.sign(b.denominators))


def _log_domain_reference(Q, K, V, W, kind):
    """Weights from log_estimate (sign, log|K̂|) with a per-row max shift."""
    sign, logabs = log_estimate(Q, K, W, kind)
    w = sign * np.exp(logabs - logabs.max(axis=1, keepdims=True))
    return (w @ V) / w.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("kind", PAPER_KINDS)
def test_stabilised_output_where_unstabilised_overflows(kind):
    # |q|, |k| ≈ 40: exp(±|x|²/2) ≈ e^±800 is out of range of float64
    Q, K, V = qkv(20, 4, d_v=2, scale=40.0, seed=6)
    W = draw_projections(64, 4, ensemble="orthogonal", seed=6)
    if kind == "trig":  # exp(|k|²/2) overflows
        with pytest.raises(FloatingPointError, match="stabilize=True removes the factors"):
            favor_attention(Q, K, V, W, kind, stabilize=False)
    else:  # each feature ~ e^-700 is representable, their products underflow to 0
        raw = favor_attention(Q, K, V, W, kind, stabilize=False)
        assert raw.n_nonpositive_denominators > 0
        assert np.all(raw.denominators[raw.nonpositive_rows] == 0)
    res = favor_attention(Q, K, V, W, kind, nonpositive="divide")
    ok = res.denominators != 0
    assert np.all(np.isfinite(res.output[ok]))
    ref = _log_domain_reference(Q, K, V, W, kind)
    if kind != "trig":  # sums of positive terms: accurate to rounding
        assert ok.all()
        np.testing.assert_allclose(res.output, ref, rtol=1e-8, atol=1e-12)
    else:  # the mean cosine cancels: compare rows whose normaliser is not tiny
        rel = np.abs(res.denominators) / np.max(np.abs(res.denominators))
        good = rel > 1e-6
        assert good.sum() >= 5
        np.testing.assert_allclose(res.output[good], ref[good], rtol=1e-6, atol=1e-9)


def test_positive_underflow_is_reported_not_divided():
    # ω = ±1, one key k = -400: its features ∝ (e^-800, 1); query 400 has (1, e^-800).
    # Row 0 is e^-800 (1 + 1) relative to the shifts: both terms underflow, 0/0.
    W = np.array([[1.0], [-1.0]])
    Q, K, V = np.array([[400.0], [-400.0]]), np.array([[-400.0]]), np.array([[2.0]])
    res = favor_attention(Q, K, V, W, "positive")
    assert res.n_nonpositive_denominators == 1 and res.denominators[0] == 0.0
    np.testing.assert_array_equal(res.nonpositive_rows, [0])
    assert np.isnan(res.output[0, 0]) and res.output[1, 0] == 2.0
    with pytest.raises(FloatingPointError, match="non-positive normaliser"):
        favor_attention(Q, K, V, W, "positive", nonpositive="raise")


# ------------------------------------------------------------ non-positive normalisers (trig)


def test_trig_negative_and_zero_normalisers_follow_the_policy():
    # m = 1, ω = e_1: the trig estimate is exp((|q|² + |k|²)/2) cos(q_1 - k_1)
    W = np.array([[1.0, 0.0]])
    K = np.array([[0.0, 1.0], [np.pi, 0.0]])  # weights e^{1/2} cos(q_1), e^{π²/2} cos(q_1 - π)
    V = np.array([[1.0, 2.0], [3.0, 5.0]])
    Q = np.array([[0.0, 0.0], [np.pi, 0.0], [0.5, 0.0]])  # normalisers < 0, > 0, < 0
    res = favor_attention(Q, K, V, W, "trig", nonpositive="nan")
    assert res.n_nonpositive_denominators == 2
    np.testing.assert_array_equal(res.nonpositive_rows, [0, 2])
    assert res.nonpositive_rows.dtype == np.int64
    assert np.all(res.denominators[[0, 2]] < 0) and res.denominators[1] > 0
    assert np.isnan(res.output[[0, 2]]).all() and np.isfinite(res.output[1]).all()
    div = favor_attention(Q, K, V, W, "trig", nonpositive="divide")
    np.testing.assert_array_equal(div.nonpositive_rows, [0, 2])
    np.testing.assert_allclose(div.output, explicit_favor(Q, K, V, W, "trig"), rtol=1e-12)
    with pytest.raises(FloatingPointError, match=r"2 row\(s\) have a non-positive normaliser"):
        favor_attention(Q, K, V, W, "trig", nonpositive="raise")

    # equal |k|² and projections 0 and π: cos 0 + cos(-π) = 0 exactly
    K0 = np.array([[0.0, np.pi], [np.pi, 0.0]])
    zero = favor_attention(Q[:1], K0, V, W, "trig", nonpositive="divide")
    assert zero.denominators[0] == 0.0
    assert zero.n_nonpositive_denominators == 1 and np.isnan(zero.output[0]).all()


@pytest.mark.parametrize("policy", NONPOSITIVE_POLICIES)
def test_policies_agree_when_all_normalisers_are_positive(policy):
    Q, K, V = qkv(12, 3)
    W = draw_projections(32, 3, seed=0)
    a = favor_attention(Q, K, V, W, "trig", nonpositive=policy)
    assert a.n_nonpositive_denominators == 0
    np.testing.assert_allclose(a.output, explicit_favor(Q, K, V, W, "trig"), rtol=1e-11)


# ------------------------------------------------------------ statistics


def test_positive_orthogonal_converges_to_exact():
    L, d = 256, 8
    ms = (16, 256, 4096)
    mse = np.empty((len(ms), 20))
    for s in range(20):
        Q, K, V = qkv(L, d, scale=1.0, seed=100 + s)
        exact = softmax_attention(Q, K, V)
        for i, m in enumerate(ms):
            W = draw_projections(m, d, ensemble="orthogonal", seed=1000 * s + m)
            mse[i, s] = np.mean((favor_attention(Q, K, V, W, "positive").output - exact) ** 2)
    mean = mse.mean(axis=1)
    for i in range(len(ms) - 1):  # each 16x more features: clearly smaller, paired over inputs
        diff = np.log(mse[i]) - np.log(mse[i + 1])
        z = diff.mean() / (diff.std(ddof=1) / np.sqrt(diff.size))
        assert z > 6 and diff.mean() > math.log(4), (i, z, mean)
    # and roughly the 1/m rate of an unbiased average (ratio 16 expected)
    ratio = mean[1] / mean[2]
    assert 6 < ratio < 40, ratio
    exact_ms = np.mean(exact**2)
    assert mean[2] < 0.02 * exact_ms


def test_attention_inputs_law():
    Q, K, V = attention_inputs(4000, 16, input_scale=1.5, seed=0)
    assert Q.shape == K.shape == V.shape == (4000, 16)
    for a, target in ((Q, 1.5**2), (K, 1.5**2), (V, 16.0)):
        sq = np.sum(a * a, axis=1)
        z = (sq.mean() - target) / (sq.std(ddof=1) / np.sqrt(sq.size))
        assert abs(z) < 4
    Q2, _, _ = attention_inputs(4000, 16, input_scale=1.5, seed=0)
    np.testing.assert_array_equal(Q, Q2)


@pytest.fixture(scope="module")
def small_study():
    return attention_mse(1024, 16, [4, 64], kinds=("trig", "positive"), samples=15, seed=0)


def _paired_log_z(table, a, b):
    """z of mean(log MSE_a - log MSE_b) over samples (same inputs)."""
    ia, ib = (table.rows.index(table.select(**w)[0]) for w in (a, b))
    diff = np.log(table.per_sample_mse[ia]) - np.log(table.per_sample_mse[ib])
    return diff.mean() / (diff.std(ddof=1) / np.sqrt(diff.size))


def test_study_paper_claims_at_default_scale(small_study):
    t = small_study
    assert t.meta["input_scale"] == DEFAULT_INPUT_SCALE
    # positive << trig at small m (paired over inputs, log scale)
    for ens in ENSEMBLES:
        z = _paired_log_z(t, dict(m=4, kind="trig", ensemble=ens),
                          dict(m=4, kind="positive", ensemble=ens))
        assert z > 4, (ens, z)
        trig, pos = (t.select(m=4, kind=k, ensemble=ens)[0]["mse_mean"] for k in ("trig", "positive"))
        assert trig > 100 * pos
    # orthogonal < iid (trig, where the effect is large)
    z = _paired_log_z(t, dict(m=64, kind="trig", ensemble="iid"),
                      dict(m=64, kind="trig", ensemble="orthogonal"))
    assert z > 4, z


def test_study_table_structure(small_study):
    t = small_study
    assert isinstance(t, AttentionMSETable) and len(t) == 2 * 2 * 2
    assert t.per_sample_mse.shape == (8, 15)
    for r in t:
        assert tuple(r) == AttentionMSETable.COLUMNS
        assert r["r"] == (r["m"] if r["kind"] == "positive" else 2 * r["m"])
        assert r["samples"] + r["samples_nonfinite"] == 15
        assert math.isclose(r["mse_se"], r["mse_std"] / math.sqrt(r["samples"]))
        assert 1 / 15 <= r["mse_max_share"] <= 1
    i = t.rows.index(t.select(m=64, kind="positive", ensemble="iid")[0])
    assert math.isclose(t.rows[i]["mse_mean"], t.per_sample_mse[i].mean(), rel_tol=1e-12)
    assert t.meta["entropy"] == 0 and len(t.meta["exact_output_mean_square"]) == 15
    rows = list(csv.DictReader(t.to_csv().splitlines()))
    assert len(rows) == 8 and tuple(rows[0]) == AttentionMSETable.COLUMNS
    assert float(rows[3]["mse_mean"]) == t.rows[3]["mse_mean"]
    with pytest.raises(ValueError, match="unknown column"):
        t.select(colour="red")


def test_study_numbers_depend_only_on_their_identity(small_study):
    part = attention_mse(1024, 16, [64], kinds=("positive",), ensembles=("orthogonal", "iid"),
                         samples=15, seed=0)
    for r in part:
        full = small_study.select(m=r["m"], kind=r["kind"], ensemble=r["ensemble"])[0]
        assert r["mse_mean"] == full["mse_mean"]
    other = attention_mse(256, 4, [4], kinds=("positive",), ensembles=("iid",), samples=2, seed=1)
    again = attention_mse(256, 4, [4], kinds=("positive",), ensembles=("iid",), samples=2, seed=1)
    assert other.rows == again.rows
    assert other.rows[0]["mse_mean"] != attention_mse(
        256, 4, [4], kinds=("positive",), ensembles=("iid",), samples=2, seed=2).rows[0]["mse_mean"]


def test_study_progress_causal_and_nan_policy():
    calls = []
    t = attention_mse(128, 4, [1, 2], kinds=("trig",), ensembles=("iid",), samples=4, seed=3,
                      input_scale=2.0, causal=True, nonpositive="nan", progress=calls.append)
    assert sum(calls) == 4 * (1 + 2)
    r = t.select(m=1)[0]
    assert r["causal"] is True
    # with one trig feature some row of every sample has a non-positive normaliser
    assert r["nonpositive_rows_mean"] > 0
    assert r["samples_nonfinite"] == 4 and r["mse_mean"] is None and r["samples"] == 0
    assert "mse_mean" in t.to_csv().splitlines()[0]


# ------------------------------------------------------------ bad input


def _good():
    Q, K, V = qkv(5, 3, d_v=2)
    return Q, K, V, draw_projections(4, 3, seed=0)


@pytest.mark.parametrize(
    "change, exc, match",
    [
        (dict(Q=np.ones(3)), ValueError, r"Q must be a 2-D array of shape \(L, d\)"),
        (dict(K=np.ones((5, 3, 1))), ValueError, r"K must be a 2-D array"),
        (dict(Q=np.ones((0, 3))), ValueError, "Q must have at least one row"),
        (dict(V=np.ones((5, 0))), ValueError, "V must have at least one row and one column"),
        (dict(K=np.ones((5, 4))), ValueError, "dimension mismatch: Q has d=3, K has d=4"),
        (dict(W=np.ones((4, 2))), ValueError, "dimension mismatch: .*W has d=2"),
        (dict(W=np.ones(3)), ValueError, r"W must be a 2-D array of shape \(m, d\)"),
        (dict(V=np.ones((4, 2))), ValueError, "V must have one row per key: K has L_k=5"),
        (dict(Q=np.full((5, 3), np.nan)), ValueError, "Q must be finite"),
        (dict(V=np.full((5, 2), np.inf)), ValueError, "V must be finite"),
        (dict(kind="gaussian"), ValueError, "kind must be one of 'trig', 'positive'"),
        (dict(nonpositive="ignore"), ValueError, "nonpositive must be one of 'nan', 'divide'"),
        (dict(block_size=0), ValueError, "block_size must be an integer >= 1"),
        (dict(block_size=2.5), TypeError, "block_size must be an integer"),
        (dict(causal="yes"), TypeError, "causal must be True or False"),
        (dict(stabilize=1), TypeError, "stabilize must be True or False"),
        (dict(causal=True, Q=np.ones((4, 3))), ValueError,
         "causal attention needs as many queries as keys: Q has L=4"),
    ],
)
def test_favor_bad_input(change, exc, match):
    Q, K, V, W = _good()
    args = dict(Q=Q, K=K, V=V, W=W, kind="positive")
    args.update(change)
    with pytest.raises(exc, match=match):
        favor_attention(**args)


@pytest.mark.parametrize(
    "change, exc, match",
    [
        (dict(Q=np.ones((5, 3, 2))), ValueError, "Q must be a 2-D array"),
        (dict(K=np.ones((5, 2))), ValueError, "dimension mismatch: Q has d=3, K has d=2"),
        (dict(V=np.ones((6, 2))), ValueError, "V must have one row per key"),
        (dict(K=np.full((5, 3), np.nan)), ValueError, "K must be finite"),
        (dict(block_size=-1), ValueError, "block_size must be an integer >= 1"),
        (dict(causal=1), TypeError, "causal must be True or False"),
        (dict(causal=True, K=np.ones((3, 3)), V=np.ones((3, 2))), ValueError,
         "causal attention needs as many queries as keys"),
    ],
)
def test_softmax_bad_input(change, exc, match):
    Q, K, V, _ = _good()
    args = dict(Q=Q, K=K, V=V)
    args.update(change)
    with pytest.raises(exc, match=match):
        softmax_attention(**args)


@pytest.mark.parametrize(
    "change, exc, match",
    [
        (dict(L=0), ValueError, "L must be an integer >= 1"),
        (dict(d=1.5), TypeError, "d must be an integer"),
        (dict(m_values=[]), ValueError, "m_values must be an integer or a non-empty"),
        (dict(m_values=[4, 0]), ValueError, "m_values must be >= 1"),
        (dict(m_values=[4, 4]), ValueError, "m_values must not repeat"),
        (dict(m_values=[[2, 4]]), ValueError, "m_values must be an integer or a non-empty 1-D"),
        (dict(kinds=("trig", "sin")), ValueError, "kind must be one of"),
        (dict(kinds=()), ValueError, "kinds must name at least one"),
        (dict(kinds=("trig", "trig")), ValueError, "kinds must not repeat"),
        (dict(ensembles=("ortho",)), ValueError, "ensemble must be one of"),
        (dict(samples=1), ValueError, "samples must be an integer >= 2"),
        (dict(seed=-1), ValueError, "seed must be a non-negative integer"),
        (dict(seed="zero"), TypeError, "seed must be None, a non-negative int"),
        (dict(input_scale=0.0), ValueError, "input_scale must be a positive finite number"),
        (dict(input_scale="1"), TypeError, "input_scale must be a positive real number"),
        (dict(norms="unit"), ValueError, "norms must be one of"),
        (dict(causal="no"), TypeError, "causal must be True or False"),
        (dict(nonpositive="skip"), ValueError, "nonpositive must be one of"),
        (dict(backend="jax"), ValueError, "backend must be one of 'numpy', 'cupy'"),
        (dict(progress=3), TypeError, "progress must be callable"),
    ],
)
def test_study_bad_input(change, exc, match):
    args = dict(L=16, d=2, m_values=[2])
    args.update(change)
    with pytest.raises(exc, match=match):
        attention_mse(**args)


def test_inputs_bad_input():
    with pytest.raises(ValueError, match="input_scale must be a positive finite number"):
        attention_inputs(4, 2, input_scale=float("inf"))
    with pytest.raises(ValueError, match="L must be an integer >= 1"):
        attention_inputs(0, 2)


# ------------------------------------------------------------ command line


CLI_ARGS = ["attention", "--L", "64", "--d", "4", "--m", "2,8", "--samples", "2",
            "--kind", "positive,trig", "--ensemble", "iid"]


def test_cli_writes_csv_and_sidecar(tmp_path, capsys):
    out = tmp_path / "res.csv"
    assert main(CLI_ARGS + ["--out", str(out)]) == 0
    captured = capsys.readouterr()
    assert "wrote" in captured.out and captured.err == ""  # no progress bar off a terminal
    rows = list(csv.DictReader(out.read_text().splitlines()))
    assert len(rows) == 4 and {r["kind"] for r in rows} == {"positive", "trig"}
    side = json.loads((tmp_path / "res.json").read_text())
    assert side["command"] == "attention" and side["csv"] == "res.csv"
    assert side["parameters"]["entropy"] == 0
    assert side["parameters"]["input_distribution"].startswith("q_i, k_j ~ N(0")
    assert set(side["versions"]) >= {"rfkernels", "numpy", "python"}
    assert "git_revision" in side and side["timings"]["total_s"] >= 0
    assert len(side["per_sample_mse"]) == 4 and len(side["per_sample_mse"][0]["mse"]) == 2
    assert sorted(os.listdir(tmp_path)) == ["res.csv", "res.json"]  # no temporary files left
    # same numbers as the library call
    t = attention_mse(64, 4, [2, 8], ("positive", "trig"), ("iid",), samples=2, seed=0)
    assert float(rows[0]["mse_mean"]) == t.rows[0]["mse_mean"]
    # an earlier output of the command is replaced without --force
    assert main(CLI_ARGS + ["--out", str(out), "--seed", "1"]) == 0
    assert json.loads((tmp_path / "res.json").read_text())["parameters"]["entropy"] == 1


def test_cli_progress_bar_on_a_terminal(tmp_path, capsys, monkeypatch):
    import sys

    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(CLI_ARGS + ["--out", str(tmp_path / "res.csv")]) == 0
    err = capsys.readouterr().err
    assert "rfkernels attention" in err and "10/10" in err  # 2 samples x (1 + 2 m x 2 kinds)


@pytest.mark.parametrize("victim", ["res.csv", "res.json"])
def test_cli_refuses_to_overwrite_unrelated_files(tmp_path, capsys, victim):
    out = tmp_path / "res.csv"
    (tmp_path / victim).write_text("precious\n")
    assert main(CLI_ARGS + ["--out", str(out)]) == 2
    assert "is not an output of 'rfkernels attention'" in capsys.readouterr().err
    assert (tmp_path / victim).read_text() == "precious\n"
    assert sorted(os.listdir(tmp_path)) == [victim]
    assert main(CLI_ARGS + ["--out", str(out), "--force"]) == 0
    assert (tmp_path / victim).read_text() != "precious\n"


def test_cli_bad_arguments(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["attention", "--m", "2,x"])
    assert "argument --m: expected an integer" in capsys.readouterr().err
    assert main(["attention", "--samples", "1", "--out", str(tmp_path / "a.csv")]) == 2
    assert "samples must be an integer >= 2" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # refused at parse time, the choices listed
        main(["attention", "--kind", "sin", "--out", str(tmp_path / "a.csv")])
    assert "argument --kind: invalid choice: 'sin'; expected one of trig" in capsys.readouterr().err
    assert main(["attention", "--out", str(tmp_path / "a.json")]) == 2
    assert "--out must not end in .json" in capsys.readouterr().err
    assert main(["attention", "--out", str(tmp_path / "nodir" / "a.csv")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------ backends


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("kind", PAPER_KINDS)
@pytest.mark.parametrize("causal", [False, True])
def test_cupy_in_cupy_out(kind, causal):
    import cupy

    Q, K, V = qkv(300, 8, d_v=3, scale=2.0)
    W = draw_projections(20, 8, ensemble="orthogonal", seed=0)
    want = favor_attention(Q, K, V, W, kind, causal=causal, block_size=64, nonpositive="divide")
    got = favor_attention(*(cupy.asarray(a) for a in (Q, K, V, W)), kind, causal=causal,
                          block_size=64, nonpositive="divide")
    assert isinstance(got.output, cupy.ndarray) and isinstance(got.nonpositive_rows, np.ndarray)
    np.testing.assert_array_equal(got.nonpositive_rows, want.nonpositive_rows)
    np.testing.assert_allclose(cupy.asnumpy(got.output), want.output, rtol=1e-9, atol=1e-12)
    exact = softmax_attention(*(cupy.asarray(a) for a in (Q, K, V)), causal=causal, block_size=50)
    assert isinstance(exact, cupy.ndarray)
    np.testing.assert_allclose(cupy.asnumpy(exact), softmax_attention(Q, K, V, causal=causal),
                               rtol=1e-12)


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_study_matches_numpy():
    a = attention_mse(256, 8, [4, 32], samples=3, seed=0)
    b = attention_mse(256, 8, [4, 32], samples=3, seed=0, backend="cupy")
    np.testing.assert_allclose(b.per_sample_mse, a.per_sample_mse, rtol=1e-6)


# ------------------------------------------------------------ module layout


def test_attention_module_keeps_its_public_names():
    """The study lives in several modules; rfkernels.analysis.attention still exports every name."""
    import rfkernels.analysis as analysis
    import rfkernels.analysis.attention as study

    for name in study.__all__:
        assert getattr(study, name) is not None
    for name in ("CLAIM_Z", "DEFAULT_ENSEMBLES", "DEFAULT_INPUT_SCALE", "DEFAULT_KINDS",
                 "HEAVY_TAIL_SHARE", "SLOPE_TOLERANCE", "AttentionMSETable", "attention_inputs",
                 "attention_mse", "attention_regime_from_tables", "feature_map_attention_mse"):
        assert name in study.__all__  # imported from here by figures, commands and tests
    for name in ("attention_mse", "attention_inputs", "attention_regime", "local_slopes",
                 "study_inputs", "AttentionRegime", "FeatureMapMSETable"):
        assert getattr(analysis, name) is getattr(study, name)


def test_attention_study_modules_stay_within_the_layout_limits():
    import ast
    import pathlib

    import rfkernels.analysis as analysis

    root = pathlib.Path(analysis.__file__).parent
    for name in ("attention", "attention_data", "favor_study", "lean_favor",
                 "deterministic_attention", "regime_map", "attention_theory", "capacity"):
        path = root / f"{name}.py"
        text = path.read_text()
        assert len(text.splitlines()) <= 800, path
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ImportFrom):
                assert not any(a.name.startswith("_") and not a.name.startswith("__")
                               for a in node.names), (path, node.module)
            if isinstance(node, ast.FunctionDef):
                body = node.body[1:] if isinstance(node.body[0], ast.Expr) else node.body
                assert not body or body[-1].end_lineno - body[0].lineno + 1 <= 100, (path, node.name)
