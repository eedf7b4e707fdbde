"""OPRF (optimal positive random features) in favor_attention and linear_attention (issue 11)."""

import numpy as np
import pytest

from rfkernels import draw_projections, favor_attention, feature_map, linear_attention
from rfkernels.features import oprf_auto_a
from rfkernels.theory import oprf_optimal_a


def _inputs(L=37, d=6, dv=3, m=20, scale=0.6, seed=0):
    rng = np.random.default_rng(seed)
    Q = scale * rng.standard_normal((L, d))
    K = scale * rng.standard_normal((L, d)) + 0.3
    V = rng.standard_normal((L, dv))
    W = draw_projections(m, d, ensemble="orthogonal", seed=seed)
    return Q, K, V, W


def _direct(Q, K, V, W, A, causal):
    """O(L^2) attention with the explicit OPRF features phi(q).phi(k)."""
    kern = feature_map(Q, W, "oprf", A=A) @ feature_map(K, W, "oprf", A=A).T
    if causal:
        kern = np.tril(kern)
    return (kern @ V) / kern.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("stabilize", [True, False])
@pytest.mark.parametrize("A", [-0.3, 0.05])
def test_oprf_attention_matches_direct_features(causal, stabilize, A):
    Q, K, V, W = _inputs()
    want = _direct(Q, K, V, W, A, causal)
    # block 8 < L: several key blocks (running shift) and query blocks
    got = favor_attention(Q, K, V, W, "oprf", A=A, causal=causal, stabilize=stabilize,
                          block_size=8)
    np.testing.assert_allclose(got.output, want, rtol=1e-10, atol=1e-12)
    assert got.A == A and got.n_nonpositive_denominators == 0
    same = linear_attention(Q, K, V, W, "oprf", A=A, causal=causal, stabilize=stabilize)
    np.testing.assert_allclose(same.output, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True])
def test_oprf_attention_auto_a_is_the_pairs_a_star(causal):
    Q, K, V, W = _inputs(seed=1)
    a = oprf_auto_a(Q, K)
    # the definition, over all L * L_k pairs
    rho = np.mean(np.sum((Q[:, None, :] + K[None, :, :]) ** 2, axis=2)) / Q.shape[1]
    # A* of theory.oprf_optimal_a at a pair with |x + y|^2 = d * rho
    x = np.zeros(Q.shape[1])
    x[0] = np.sqrt(Q.shape[1] * rho) / 2
    assert a == pytest.approx(float(oprf_optimal_a(x, x)), rel=1e-12)
    got = favor_attention(Q, K, V, W, "oprf", A="auto", causal=causal, block_size=16)
    assert got.A == pytest.approx(a, rel=1e-15)
    np.testing.assert_allclose(got.output, _direct(Q, K, V, W, a, causal), rtol=1e-10, atol=1e-12)


def test_oprf_attention_stabilised_where_the_features_underflow():
    """|q| = |k| = 40: every unshifted feature underflows to 0 (exp(-800 + ...)), so the
    unstabilised path has only zero normalisers; the shifted path gives the attention of a
    log-domain direct computation."""
    Q, K, V, W = _inputs(L=12, d=4, m=16, scale=1.0, seed=2)
    Q = 40.0 * Q / np.linalg.norm(Q, axis=1, keepdims=True)
    K = 40.0 * K / np.linalg.norm(K, axis=1, keepdims=True)
    A = -0.2
    plain = favor_attention(Q, K, V, W, "oprf", A=A, stabilize=False)
    assert plain.n_nonpositive_denominators == 12
    got = favor_attention(Q, K, V, W, "oprf", A=A, causal=True, block_size=5)
    c = np.sqrt(1 - 4 * A)
    eq = c * Q @ W.T + A * np.sum(W * W, axis=1)
    ek = c * K @ W.T + A * np.sum(W * W, axis=1) - 0.5 * np.sum(K * K, axis=1)[:, None]
    logk = np.logaddexp.reduce(eq[:, None, :] + ek[None, :, :], axis=2)  # up to per-row terms
    logk = np.where(np.tril(np.ones((12, 12), bool)), logk, -np.inf)
    p = np.exp(logk - logk.max(axis=1, keepdims=True))
    want = (p @ V) / p.sum(axis=1, keepdims=True)
    assert got.n_nonpositive_denominators == 0
    np.testing.assert_allclose(got.output, want, rtol=1e-8, atol=1e-11)


def test_oprf_attention_sum_normalisation():
    Q, K, V, W = _inputs(seed=3)
    A = -0.1
    pq = feature_map(Q, W, "oprf", A=A)
    pk = feature_map(K, W, "oprf", A=A)
    pq, pk = pq / pq.sum(1, keepdims=True), pk / pk.sum(1, keepdims=True)
    got = linear_attention(Q, K, V, W, "oprf", A=A, normalization="sum")
    np.testing.assert_allclose(got.output, pq @ (pk.T @ V), rtol=1e-10, atol=1e-13)


def test_oprf_attention_a_validated_before_work():
    Q, K, V, W = _inputs()
    with pytest.raises(ValueError, match="needs its parameter A"):
        favor_attention(Q, K, V, W, "oprf")
    with pytest.raises(ValueError, match="< 1/8"):
        favor_attention(Q, K, V, W, "oprf", A=0.2)
    with pytest.raises(ValueError, match="'auto'"):
        favor_attention(Q, K, V, W, "oprf", A="best")
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        favor_attention(Q, K, V, W, "positive", A=-0.1)
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        linear_attention(Q, K, V, None, "elu1", A=-0.1)
    assert favor_attention(Q, K, V, W, "positive").A is None


def test_oprf_attention_a_zero_is_favor_plus():
    Q, K, V, W = _inputs(seed=4)
    a = favor_attention(Q, K, V, W, "oprf", A=0.0, causal=True, block_size=8).output
    b = favor_attention(Q, K, V, W, "positive", causal=True, block_size=8).output
    np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
