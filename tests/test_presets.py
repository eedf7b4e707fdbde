"""Tests of rfkernels.presets: ``favor_attention(preset=...)`` against NumPy transcriptions.

Each library's FAVOR path is transcribed below, step by step, from its source
at the commit pinned in :mod:`rfkernels.presets` (the comments give the
lines). The transcriptions take RAW inputs, as a user of that library passes
them (the library applies its own ``d**-0.25``), in the library's own array
layout (several heads), and import nothing from rfkernels. rfkernels is then
given the pre-scaled inputs of one head and the same projections:

- performer-pytorch, lucidrains/performer-pytorch@fc8b78441b1e27eb5d9b01fc738a8772cee07127,
  ``performer_pytorch/performer_pytorch.py``: ``softmax_kernel`` L90-115,
  ``gaussian_orthogonal_random_matrix`` L133-165, ``FastAttention.forward``
  L267-273, ``linear_attention`` L170-175. W = ``projection_matrix`` (m, d).
- google-research, google-research/google-research@8de59738d37133bc2537b62831674d3929da3c5b,
  ``performer/fast_attention/jax/fast_attention.py``:
  ``nonnegative_softmax_kernel_feature_creator`` L52-111,
  ``make_fast_softmax_attention`` (``numerical_stabilizer=1e-6`` L208, passed
  to the feature creator L238-240), ``FastAttentionviaLowRankDecomposition.dot_product_attention``
  (the bidirectional renormalised branch and the guard ``R + 2ε[|R| <= ε]``,
  the reciprocal and ``W * R`` at the end of the method). W = the projection matrix (m, d).
- xformers, facebookresearch/xformers@279e083384ea26b5359ac65d116fd12b15b32643,
  ``xformers/components/attention/feature_maps/softmax.py``: ``pre_scale``
  L41-43, L45-89; ``_get_random_ortho_matrix`` L113-127; ``SMOrf`` L151-167;
  ``SMHyperbolic`` L194, L208-228; ``feature_maps/base.py`` (``dim_feature_map``);
  ``favor.py`` ``FavorAttention.forward`` L147-168 (bidirectional). xformers
  applies ``x @ features`` with features (d, m): W = ``features.T``.
"""

import math

import numpy as np
import pytest

from rfkernels import draw_projections
from rfkernels.attention import favor_attention
from rfkernels.presets import PRESETS, preset, preset_attention

LIBRARIES = ("performer-pytorch", "google-research", "xformers")
KINDS = ("trig", "positive", "hyperbolic", "oprf")

# (L, L_k, d, m): L != L_k, m < d, m = d, m > d
SHAPES = [(7, 11, 8, 5), (9, 4, 4, 13), (12, 12, 6, 6), (5, 23, 16, 40)]
HEADS = 2



# =============================================================================
# Transcriptions (NumPy; nothing from rfkernels)
# =============================================================================

# ---- lucidrains/performer-pytorch @ fc8b784, performer_pytorch/performer_pytorch.py


def pp_gaussian_orthogonal_random_matrix(nb_rows, nb_columns, rng, scaling=0):
    """L133-165: QR blocks (no sign fix), rows scaled by norms of Gaussian rows."""
    def orthogonal_matrix_chunk(cols):  # L133-140
        unstructured_block = rng.standard_normal((cols, cols))
        q, r = np.linalg.qr(unstructured_block, mode="reduced")
        return q.T
    nb_full_blocks = int(nb_rows / nb_columns)  # L143
    block_list = [orthogonal_matrix_chunk(nb_columns) for _ in range(nb_full_blocks)]  # L145-149
    remaining_rows = nb_rows - nb_full_blocks * nb_columns  # L151
    if remaining_rows > 0:  # L152-154
        block_list.append(orthogonal_matrix_chunk(nb_columns)[:remaining_rows])
    final_matrix = np.concatenate(block_list)  # L156
    if scaling == 0:  # L158-159
        multiplier = np.linalg.norm(rng.standard_normal((nb_rows, nb_columns)), axis=1)
    else:  # L160-161
        multiplier = math.sqrt(float(nb_columns)) * np.ones((nb_rows,))
    return np.diag(multiplier) @ final_matrix  # L165


def pp_softmax_kernel(data, *, projection_matrix, is_query, normalize_data=True, eps=1e-4):
    """L90-115, on data (b, h, n, d)."""
    b, h = data.shape[:2]  # L91
    data_normalizer = (data.shape[-1] ** -0.25) if normalize_data else 1.0  # L93
    ratio = projection_matrix.shape[0] ** -0.5  # L95
    projection = np.broadcast_to(projection_matrix, (b, h) + projection_matrix.shape)  # L97
    data_dash = np.einsum("...id,...jd->...ij", data_normalizer * data, projection)  # L100
    diag_data = data ** 2  # L102
    diag_data = np.sum(diag_data, axis=-1)  # L103
    diag_data = (diag_data / 2.0) * (data_normalizer ** 2)  # L104
    diag_data = diag_data[..., None]  # L105
    if is_query:  # L107-110
        data_dash = ratio * (
            np.exp(data_dash - diag_data - np.amax(data_dash, axis=-1, keepdims=True)) + eps)
    else:  # L111-113
        data_dash = ratio * (
            np.exp(data_dash - diag_data - np.amax(data_dash, axis=(-1, -2), keepdims=True))
            + eps)
    return data_dash


def pp_linear_attention(q, k, v):
    """L170-175 (non-causal), also returning the normaliser it inverts."""
    k_cumsum = k.sum(axis=-2)  # L171
    denominator = np.einsum("...nd,...d->...n", q, k_cumsum)
    D_inv = 1.0 / denominator  # L172
    context = np.einsum("...nd,...ne->...de", k, v)  # L173
    out = np.einsum("...de,...nd,...n->...ne", context, q, D_inv)  # L174
    return out, denominator


def performer_pytorch(q, k, v, projection_matrix, eps=1e-4):
    """FastAttention.forward (L267-273, softmax kernel, non-causal) on (b, h, n, d) inputs.

    Returns (out, denominator, denominator with eps = 0 and the same shifts).
    """
    with np.errstate(under="ignore"):
        qp = pp_softmax_kernel(q, projection_matrix=projection_matrix, is_query=True, eps=eps)
        kp = pp_softmax_kernel(k, projection_matrix=projection_matrix, is_query=False, eps=eps)
        out, den = pp_linear_attention(qp, kp, v)
        q0 = pp_softmax_kernel(q, projection_matrix=projection_matrix, is_query=True, eps=0.0)
        k0 = pp_softmax_kernel(k, projection_matrix=projection_matrix, is_query=False, eps=0.0)
        _, den0 = pp_linear_attention(q0, k0, v)
    return out, den, den0


# ---- google-research/google-research @ 8de5973, performer/fast_attention/jax/fast_attention.py


def gr_nonnegative_softmax_kernel_feature_creator(data, projection_matrix, attention_dims_t,
                                                  batch_dims_t, is_query, normalize_data=True,
                                                  eps=0.0001):
    """L52-111, on data (bs, heads, L, channels) (after dot_product_attention's transpose)."""
    if normalize_data:  # L78-83
        data_normalizer = 1.0 / (np.sqrt(np.sqrt(data.shape[-1])))
    else:
        data_normalizer = 1.0
    ratio = 1.0 / np.sqrt(projection_matrix.shape[0])  # L84
    data_mod_shape = data.shape[0:len(batch_dims_t)] + projection_matrix.shape  # L85
    data_thick_random_matrix = np.zeros(data_mod_shape) + projection_matrix  # L86
    # L88-93: lax.dot_general contracting the last dims, batch dims (0, 1): (bs, h, L, m)
    data_dash = np.einsum("bhld,bhmd->bhlm", data_normalizer * data, data_thick_random_matrix)
    diag_data = np.square(data)  # L95
    diag_data = np.sum(diag_data, axis=data.ndim - 1)  # L96
    diag_data = (diag_data / 2.0) * data_normalizer * data_normalizer  # L97
    diag_data = np.expand_dims(diag_data, axis=data.ndim - 1)  # L98
    last_dims_t = (len(data_dash.shape) - 1,)  # L100
    if is_query:  # L101-104
        data_dash = ratio * (
            np.exp(data_dash - diag_data - np.max(data_dash, axis=last_dims_t, keepdims=True))
            + eps)
    else:  # L105-109
        data_dash = ratio * (
            np.exp(data_dash - diag_data - np.max(
                data_dash, axis=last_dims_t + attention_dims_t, keepdims=True)) + eps)
    return data_dash


def gr_dot_product_attention(query, key, value, projection_matrix, numerical_stabilizer=1e-6,
                             guard=True):
    """make_fast_softmax_attention(...) (nonnegative features, bidirectional, renormalised).

    query, key [bs, L, heads, channels], value [bs, L_k, heads, v_channels]; the
    projection matrix as given (redraw_features off). Returns (result, R after
    the guard, R with eps = 0 and the same shifts, R before the guard).
    """
    n = key.ndim
    axis = tuple(range(1, key.ndim - 2))  # axis=None
    batch_dims = tuple(np.delete(np.arange(n), axis + (n - 1,)))  # (0, 2)
    qk_perm = batch_dims + axis + (n - 1,)
    k_extra_perm = axis + batch_dims + (n - 1,)
    key_extra = key.transpose(k_extra_perm)
    key = key.transpose(qk_perm)
    query = query.transpose(qk_perm)
    v_perm = batch_dims + axis + (n - 1,)
    value = value.transpose(v_perm)
    batch_dims_t = tuple(range(len(batch_dims)))
    attention_dims_t = tuple(range(len(batch_dims), len(batch_dims) + len(axis)))

    def kernel_feature_creator(data, is_query, eps):  # L231-240: eps = numerical_stabilizer
        return gr_nonnegative_softmax_kernel_feature_creator(
            data, projection_matrix, attention_dims_t, batch_dims_t, is_query, True, eps)

    def bidirectional(eps):
        query_prime = kernel_feature_creator(query, True, eps)
        key_prime = kernel_feature_creator(key, False, eps)
        # Z = (K')^T V; W = Q' Z (dot_generals over the attention dims, batch dims (0, 1))
        Z = np.einsum("bhlm,bhle->bhme", key_prime, value)
        W = np.einsum("bhlm,bhme->bhle", query_prime, Z)
        thick_all_ones = np.zeros(key.shape[0:-1]) + np.ones(key_extra.shape[0:len(axis)])
        T = np.einsum("bhlm,bhl->bhm", key_prime, thick_all_ones)  # T = (K')^T 1_L
        R = np.einsum("bhlm,bhm->bhl", query_prime, T)  # R = Q' T
        return W, R

    with np.errstate(under="ignore"):
        W, R = bidirectional(numerical_stabilizer)
        _, R0 = bidirectional(0.0)
    raw = R
    if guard:
        R = R + 2 * numerical_stabilizer * (np.abs(R) <= numerical_stabilizer)
    R_inv = np.reciprocal(R)
    R_inv = np.expand_dims(R_inv, len(R_inv.shape))
    result = W * R_inv
    perm_inv = [0] * len(qk_perm)  # _invert_perm
    for i, j in enumerate(qk_perm):
        perm_inv[j] = i
    return result.transpose(perm_inv), R, R0, raw


# ---- facebookresearch/xformers @ 279e083, xformers/components/attention/


def xf_get_random_ortho_matrix(blocks, dim, rng, xi=True):
    """feature_maps/softmax.py L113-127: sign fix applied to Q's rows (diag(sign R) @ Q)."""
    H = rng.standard_normal((blocks, dim, dim))  # L113
    if xi:  # L116-118
        norms = np.sqrt(np.einsum("...d,...d->...", H, H))
    Q, R = np.linalg.qr(H)  # L120
    Q = np.einsum("bi,bij->bij", np.sign(np.diagonal(R, axis1=1, axis2=2)), Q)  # L121
    if xi:  # L124-125
        return np.einsum("bi,bij->bij", norms, Q)
    return Q


def xf_smorf_features(dim_input, dim_feature_map, rng):
    """SMOrf._get_feature_map (L140-158): (d, m)."""
    features = xf_get_random_ortho_matrix(math.ceil(dim_input / dim_feature_map),
                                          dim_feature_map, rng)
    return features.reshape(-1, dim_feature_map)[:dim_input]


def xf_feature_map(x, features, hyperbolic, dim_features, epsilon=1e-6):
    """SoftMaxPositiveEstimators.pre_scale + SMOrf.forward / SMHyperbolic.forward.

    dim_features is the constructor's (FavorAttention's ``dim_features``): m for
    SMOrf, 2m for SMHyperbolic (whose dim_feature_map is dim_features // 2, L194).
    normalize_inputs=False (FavorAttention's default), softmax_temp=-1.
    """
    h_scale = math.log(math.sqrt(dim_features))  # L43
    softmax_temp = x.shape[-1] ** -0.25  # L71-73
    x_scaled = x * softmax_temp  # L75
    norm_x_2 = np.einsum("...d,...d->...", x_scaled, x_scaled)[..., None]  # L80
    offset = -0.5 * norm_x_2 - h_scale + epsilon  # L81
    x_scaled = x_scaled @ features  # L166 / L224
    if not hyperbolic:
        return np.exp(x_scaled + offset)  # L167
    return np.concatenate([np.exp(x_scaled + offset), np.exp(-x_scaled + offset)],
                          axis=-1)  # L225-228


def xformers(q, k, v, features, hyperbolic):
    """FavorAttention.forward (favor.py L147-168, non-causal) on (B, S, E) inputs.

    Returns (att, att_normalization[..., 0]).
    """
    dim_features = 2 * features.shape[1] if hyperbolic else features.shape[1]
    with np.errstate(under="ignore", over="ignore", invalid="ignore"):
        k_prime = xf_feature_map(k, features, hyperbolic, dim_features)  # L147
        q_prime = xf_feature_map(q, features, hyperbolic, dim_features)  # L148
        att_normalization = q_prime @ (np.swapaxes(k_prime, -2, -1) @ np.ones_like(v))  # L159-161
        att_raw = q_prime @ (np.swapaxes(k_prime, -2, -1) @ v)  # L162
        att = att_raw / att_normalization  # L168
    return att, att_normalization[..., 0]


# =============================================================================
# Data
# =============================================================================


def raw_inputs(L, L_k, d, d_v=3, heads=HEADS, seed=0, key_spread=1.5, query_scale=0.6):
    """RAW (unscaled) Q, K, V (heads, n, ·); key rows scaled by exp(U(-spread, 0.6 spread))."""
    rng = np.random.default_rng(seed)
    Q = query_scale * rng.standard_normal((heads, L, d))
    K = rng.standard_normal((heads, L_k, d)) * np.exp(
        rng.uniform(-key_spread, key_spread * 0.6, size=(heads, L_k, 1)))
    V = rng.standard_normal((heads, L_k, d_v))
    return Q, K, V


def run(Q, K, V, W, kind, name, head, **kw):
    """rfkernels on one head's pre-scaled inputs."""
    s = Q.shape[-1] ** -0.25
    return favor_attention(Q[head] * s, K[head] * s, V[head], W, kind, preset=name, **kw)


def library(name, Q, K, V, W, kind):
    """(out, D, D_noeps) of the transcription, per head: arrays (heads, L, ·)."""
    if name == "performer-pytorch":
        out, den, den0 = performer_pytorch(Q[None], K[None], V[None], W)
        return out[0], den[0], den0[0]
    if name == "google-research":
        # google-research's layout: [bs, L, heads, channels]
        out, R, R0, _ = gr_dot_product_attention(
            Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None], V.transpose(1, 0, 2)[None], W)
        return out[0].transpose(1, 0, 2), R[0], R0[0]
    out, den = xformers(Q, K, V, W.T, kind == "hyperbolic")
    return out, den, den


def library_w(name, m, d, seed):
    """W drawn as the library draws it (the transcriptions above), in rfkernels' (m, d) layout."""
    rng = np.random.default_rng(1000 + seed)
    if name == "xformers":
        return xf_smorf_features(d, m, rng).T
    return pp_gaussian_orthogonal_random_matrix(m, d, rng)


CASES = [(name, kind) for name in LIBRARIES for kind in PRESETS[name].kinds]


# =============================================================================
# 1. outputs and normalisers against the transcriptions
# =============================================================================


@pytest.mark.parametrize("name,kind", CASES)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "L{}-Lk{}-d{}-m{}".format(*s))
@pytest.mark.parametrize("law", ["library", "iid"])
def test_matches_transcription(name, kind, shape, law):
    L, L_k, d, m = shape
    Q, K, V = raw_inputs(L, L_k, d, seed=sum(shape))
    if law == "library":
        W = library_w(name, m, d, seed=sum(shape))
    else:
        W = np.random.default_rng(7).standard_normal((m, d))
    out, den, _ = library(name, Q, K, V, W, kind)
    assert np.all(np.isfinite(out))
    for h in range(HEADS):
        res = run(Q, K, V, W, kind, name, h)
        assert res.preset == name and res.kind == kind
        np.testing.assert_allclose(res.output, out[h], rtol=1e-10, atol=0)
        np.testing.assert_allclose(res.denominators, den[h], rtol=1e-10, atol=0)


def test_key_spread_makes_epsilon_matter():
    """The data of the test above is where performer-pytorch's epsilon is not negligible."""
    Q, K, V = raw_inputs(5, 23, 16, seed=sum(SHAPES[3]))
    W = library_w("performer-pytorch", 40, 16, seed=sum(SHAPES[3]))
    _, den, den0 = library("performer-pytorch", Q, K, V, W, "positive")
    share = 1 - den0 / den
    assert share.max() > 0.05
    sq = np.sum(K * K, axis=-1) / 4.0  # |k|² after d**-0.25, d = 16
    assert sq.max() / sq.min() > 100


def test_heads_are_independent():
    """The key maximum is per head (performer-pytorch dims (-1, -2), google-research L, m)."""
    Q, K, V = raw_inputs(6, 9, 4, seed=3)
    K[1] *= 4.0  # a head with much longer keys: a shared maximum would change head 0
    W = library_w("performer-pytorch", 7, 4, seed=3)
    for name in ("performer-pytorch", "google-research"):
        out, _, _ = library(name, Q, K, V, W, "positive")
        np.testing.assert_allclose(run(Q, K, V, W, "positive", name, 0).output, out[0],
                                   rtol=1e-10)


def test_transcriptions_are_favor():
    """Sanity of the transcriptions themselves: with eps -> 0 all three agree with each other."""
    Q, K, V = raw_inputs(8, 10, 4, seed=11, key_spread=0.3)
    W = library_w("performer-pytorch", 6, 4, seed=11)
    pp, _, _ = performer_pytorch(Q[None], K[None], V[None], W, eps=0.0)
    gr, _, _, _ = gr_dot_product_attention(Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None],
                                           V.transpose(1, 0, 2)[None], W, 0.0, guard=False)
    xf, _ = xformers(Q, K, V, W.T, False)
    np.testing.assert_allclose(pp[0], xf, rtol=1e-12)
    np.testing.assert_allclose(gr[0].transpose(1, 0, 2), xf, rtol=1e-12)


def guard_inputs():
    """google-research: queries 0-2 moderate, 3-4 far from every key (all features ~ ratio·eps).

    Far queries have |q|²/2 = 100 after d**-0.25, so their shifted features
    exp(u - |q|²/2 - max u) are ~e^-100 and each is ratio·ε; the keys are
    long too, so R ~ L_k ε² << ε for those rows and the guard adds 2ε.
    """
    d, L_k = 4, 6
    rng = np.random.default_rng(5)
    s = d ** 0.25  # raw = scaled * d**(1/4)
    q = rng.standard_normal((5, d)) * 0.3
    q[3:] = rng.standard_normal((2, d))
    q[3:] *= math.sqrt(200.0) / np.linalg.norm(q[3:], axis=1, keepdims=True)
    k = rng.standard_normal((L_k, d))
    k *= 3.0 / np.linalg.norm(k, axis=1, keepdims=True)
    v = rng.standard_normal((L_k, 2))
    W = library_w("google-research", 8, d, seed=5)
    return (q * s)[None], (k * s)[None], v[None], W


def test_google_research_guard():
    Q, K, V, W = guard_inputs()
    out, R, _, raw = gr_dot_product_attention(
        Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None], V.transpose(1, 0, 2)[None], W)
    out, R, raw = out[0][:, 0], R[0, 0], raw[0, 0]
    guarded = np.abs(raw) <= 1e-6
    assert guarded[3:].all() and not guarded[:3].any()
    res = run(Q, K, V, W, "positive", "google-research", 0)
    np.testing.assert_allclose(res.output, out, rtol=1e-10, atol=0)
    np.testing.assert_allclose(res.denominators, R, rtol=1e-10, atol=0)
    np.testing.assert_allclose(res.denominators[guarded], raw[guarded] + 2e-6, rtol=1e-10)
    # the guard's effect: guarded rows are the unguarded ratio W/R scaled by R/(R + 2ε) << 1,
    # rows above ε are untouched
    unguarded, _, _, _ = gr_dot_product_attention(
        Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None], V.transpose(1, 0, 2)[None], W,
        guard=False)
    unguarded = unguarded[0][:, 0]
    factor = raw / (raw + 2e-6 * guarded)
    assert factor[guarded].max() < 0.01
    np.testing.assert_allclose(res.output, unguarded * factor[:, None], rtol=1e-10)
    np.testing.assert_allclose(res.output[~guarded], unguarded[~guarded], rtol=1e-12)


# =============================================================================
# 2. stabiliser_share
# =============================================================================


@pytest.mark.parametrize("name,kind", CASES)
@pytest.mark.parametrize("shape", SHAPES[:3], ids=lambda s: "L{}-Lk{}-d{}-m{}".format(*s))
def test_stabiliser_share(name, kind, shape):
    L, L_k, d, m = shape
    Q, K, V = raw_inputs(L, L_k, d, seed=sum(shape))
    W = library_w(name, m, d, seed=sum(shape))
    _, den, den0 = library(name, Q, K, V, W, kind)
    for h in range(HEADS):
        res = run(Q, K, V, W, kind, name, h)
        if name == "xformers":
            assert np.array_equal(res.stabiliser_share, np.zeros(L))
        else:
            assert np.all(den[h] > 1e-6)  # no row guarded: before and after the guard agree
            np.testing.assert_allclose(res.stabiliser_share, 1.0 - den0[h] / den[h],
                                       rtol=0, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_stabiliser_share_none_for_rfkernels(kind):
    Q, K, V = raw_inputs(5, 6, 4, seed=1)
    W = np.random.default_rng(2).standard_normal((5, 4))
    res = run(Q, K, V, W, kind, "rfkernels", 0, A=-0.1 if kind == "oprf" else None)
    assert res.preset == "rfkernels" and res.stabiliser_share is None


def _guarded_share_case():
    """google-research rows with R <= ε whose ε-free normaliser is a fair part of R."""
    d, L_k = 4, 3
    rng = np.random.default_rng(9)
    q = 0.8 * rng.standard_normal((4, d))
    k = rng.standard_normal((L_k, d))
    k *= math.sqrt(22.0) / np.linalg.norm(k, axis=1, keepdims=True)  # |k|²/2 = 11: e^-11 << 1
    v = rng.standard_normal((L_k, 2))
    W = library_w("google-research", 16, d, seed=9)
    s = d ** 0.25
    Q, K, V = (q * s)[None], (k * s)[None], v[None]
    _, R, R0, raw = gr_dot_product_attention(
        Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None], V.transpose(1, 0, 2)[None], W)
    return Q, K, V, W, R[0, 0], R0[0, 0], raw[0, 0]


def _gr_output(Q, K, V, W):
    out, _, _, _ = gr_dot_product_attention(
        Q.transpose(1, 0, 2)[None], K.transpose(1, 0, 2)[None], V.transpose(1, 0, 2)[None], W)
    return out[0][:, 0]


def test_guarded_share_case_is_informative():
    """The rows of the test below: guarded, and the share depends on which R it divides."""
    Q, K, V, W, R, R0, raw = _guarded_share_case()
    guarded = np.abs(raw) <= 1e-6
    assert guarded.all()
    before, after = 1 - R0 / raw, 1 - R0 / R
    assert np.all(np.abs(after - before) > 0.05)
    res = run(Q, K, V, W, "positive", "google-research", 0)
    np.testing.assert_allclose(res.output, _gr_output(Q, K, V, W), rtol=1e-10)


def test_guarded_share_uses_the_normaliser_divided_by():
    Q, K, V, W, R, R0, raw = _guarded_share_case()
    res = run(Q, K, V, W, "positive", "google-research", 0)
    np.testing.assert_allclose(res.denominators, R, rtol=1e-10)
    np.testing.assert_allclose(res.stabiliser_share, 1.0 - R0 / res.denominators, atol=1e-10)


# =============================================================================
# 3. epsilon drives performer-pytorch towards uniform attention
# =============================================================================


def test_epsilon_makes_attention_uniform():
    d, L, m = 8, 32, 512
    rng = np.random.default_rng(4)
    s = d ** 0.25
    # scaled keys: most short, a few long; the long ones set the key maximum of ω·k
    k = 0.8 * rng.standard_normal((L, d)) / math.sqrt(d) * 2
    k[:3] *= 6.0
    q = rng.standard_normal((L, d)) / math.sqrt(d) * 1.5
    v = rng.standard_normal((L, 3))
    W = library_w("performer-pytorch", m, d, seed=4)
    Q, K, V = (q * s)[None], (k * s)[None], v[None]
    out, den, den0 = library("performer-pytorch", Q, K, V, W, "positive")
    res = run(Q, K, V, W, "positive", "performer-pytorch", 0)
    np.testing.assert_allclose(res.output, out[0], rtol=1e-10)
    mean = v.mean(axis=0)
    assert np.abs(res.output - mean).max() < 1e-3
    assert res.stabiliser_share.min() > 0.99
    np.testing.assert_allclose(res.stabiliser_share, 1 - den0[0] / den[0], atol=1e-10)
    ours = run(Q, K, V, W, "positive", "rfkernels", 0).output
    assert np.abs(ours - mean).max() > 0.1


# =============================================================================
# 4. refusals
# =============================================================================


def _qkvw(d=4):
    rng = np.random.default_rng(0)
    return (0.3 * rng.standard_normal((5, d)), 0.3 * rng.standard_normal((6, d)),
            rng.standard_normal((6, 2)), rng.standard_normal((7, d)))


REFUSED = [(name, kind) for name in LIBRARIES for kind in KINDS if kind not in PRESETS[name].kinds]


def test_refused_kinds_are_the_documented_ones():
    assert set(REFUSED) == {("performer-pytorch", k) for k in ("trig", "hyperbolic", "oprf")} | {
        ("google-research", k) for k in ("trig", "hyperbolic", "oprf")} | {
        ("xformers", k) for k in ("trig", "oprf")}


@pytest.mark.parametrize("name,kind", REFUSED)
def test_refuses_kind(name, kind):
    q, k, v, w = _qkvw()
    with pytest.raises(ValueError) as err:
        favor_attention(q, k, v, w, kind, preset=name, A=-0.1 if kind == "oprf" else None)
    msg = str(err.value)
    assert "\n" not in msg and repr(name) in msg and repr(kind) in msg


@pytest.mark.parametrize("name", [n for n in LIBRARIES if not preset(n).causal])
def test_refuses_causal(name):
    q, k, v, w = _qkvw()
    with pytest.raises(ValueError) as err:
        favor_attention(q, k[:5], v[:5], w, "positive", preset=name, causal=True)
    msg = str(err.value)
    assert "\n" not in msg and repr(name) in msg and "causal" in msg


@pytest.mark.parametrize("name", LIBRARIES)
def test_refuses_stabilize_false(name):
    q, k, v, w = _qkvw()
    with pytest.raises(ValueError) as err:
        favor_attention(q, k, v, w, "positive", preset=name, stabilize=False)
    msg = str(err.value)
    assert "\n" not in msg and repr(name) in msg and "stabilize" in msg


def test_refuses_unknown_preset():
    q, k, v, w = _qkvw()
    with pytest.raises(ValueError) as err:
        favor_attention(q, k, v, w, "positive", preset="jax")
    msg = str(err.value)
    assert "\n" not in msg and "preset" in msg and "'jax'" in msg
    assert all(repr(p) in msg for p in PRESETS)
    with pytest.raises(ValueError, match="preset"):
        preset("jax")


def _overflowing(where):
    """Unshifted exponent ω·x - |x|²/2 = 40·a - a²/2 = 800 > 709.78 at a = 40 for one row."""
    d = 4
    w = np.eye(d)[:3] * 1.0
    w[0, 0] = 40.0
    rng = np.random.default_rng(1)
    q, k = 0.1 * rng.standard_normal((3, d)), 0.1 * rng.standard_normal((4, d))
    v = rng.standard_normal((4, 2))
    (q if where == "queries" else k)[0] = [40.0, 0, 0, 0]
    return q, k, v, w


@pytest.mark.parametrize("where", ["queries", "keys"])
@pytest.mark.parametrize("kind", ["positive", "hyperbolic"])
def test_xformers_overflow(where, kind):
    q, k, v, w = _overflowing(where)
    s = 4 ** 0.25
    with np.errstate(over="ignore", invalid="ignore"):  # what the library returns: not finite
        att, _ = xformers((q * s)[None], (k * s)[None], v[None], w.T, kind == "hyperbolic")
    assert not np.all(np.isfinite(att))
    with pytest.raises(FloatingPointError) as err:
        favor_attention(q, k, v, w, kind, preset="xformers")
    msg = str(err.value)
    assert "'xformers'" in msg and where in msg and "\n" not in msg
    # the shifted presets compute the same inputs without trouble
    for name in ("rfkernels", "performer-pytorch", "google-research"):
        if kind in PRESETS[name].kinds:
            assert np.all(np.isfinite(favor_attention(q, k, v, w, kind, preset=name).output))


def test_xformers_product_overflow_names_the_preset():
    q, k, v, w = _overflowing("queries")
    w[0, 0] = 30.0
    q[0] = k[0] = [30.0, 0, 0, 0]  # each feature exp(450): finite; q'·k' = exp(900): not
    with pytest.raises(FloatingPointError) as err:
        favor_attention(q, k, v, w, "positive", preset="xformers")
    assert "xformers" in str(err.value)


@pytest.mark.parametrize("name", list(PRESETS))
def test_default_law_can_be_drawn(name):
    entry = preset(name)
    W = draw_projections(6, 4, ensemble=entry.ensemble, norms=entry.norms, seed=0)
    assert W.shape == (6, 4) and np.all(np.isfinite(W))


# =============================================================================
# 5. the 'rfkernels' branch of preset_attention (the precision study's path)
# =============================================================================


def _kind_params():
    return list(KINDS)


@pytest.mark.parametrize("kind", _kind_params())
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "L{}-Lk{}-d{}-m{}".format(*s))
def test_rfkernels_branch_equals_favor(kind, shape):
    L, L_k, d, m = shape
    Q, K, V = raw_inputs(L, L_k, d, seed=sum(shape), key_spread=0.5, query_scale=0.4)
    s = d ** -0.25
    q, k, v = Q[0] * s, K[0] * s, V[0]
    W = np.random.default_rng(3).standard_normal((m, d))
    A = -0.15 if kind == "oprf" else None
    num, den, share = preset_attention(q, k, v, W, kind, preset("rfkernels"), A=A, block=4)
    ref = favor_attention(q, k, v, W, kind, A=A, nonpositive="divide").output
    assert np.all(den != 0) and np.array_equal(share, np.zeros(L))
    np.testing.assert_allclose(num / den[:, None], ref, rtol=1e-12, atol=0)


# =============================================================================
# 6. the rounding hook
# =============================================================================


RND_CASES = [("rfkernels", k) for k in KINDS] + CASES


@pytest.mark.parametrize("name,kind", RND_CASES)
def test_identity_rnd_is_bit_identical(name, kind):
    Q, K, V = raw_inputs(9, 13, 6, seed=21)
    s = 6 ** -0.25
    q, k, v = Q[0] * s, K[0] * s, V[0]
    W = np.random.default_rng(4).standard_normal((8, 6))
    A = -0.1 if kind == "oprf" else None
    calls = []

    def rnd(a):
        calls.append(1)
        return a

    with np.errstate(under="ignore"):
        plain = preset_attention(q, k, v, W, kind, preset(name), A=A, block=5)
        hooked = preset_attention(q, k, v, W, kind, preset(name), A=A, block=5, rnd=rnd)
    assert calls  # the hook is used
    for a, b in zip(plain, hooked):
        assert a.tobytes() == b.tobytes()
