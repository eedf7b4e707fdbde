"""Tests of rfkernels.projections: structure, reproducibility, Haar law, and the
bias of the reference Performer construction (QR without the sign fix).

Statistical tests use fixed seeds; thresholds are |z| < 4 for "agrees" and
|z| > 8 for "detectably differs", p > 1e-4 for KS tests that should pass.
"""

import numpy as np
import pytest
from scipy import special, stats

from rfkernels.estimators import registry
from rfkernels import ENSEMBLES, NORMS
from rfkernels.backends import cupy_available
from rfkernels.projections import draw_projections, orthogonal_blocks

ORTHO = ("orthogonal", "orthogonal-unfixed-qr")


def zscore(samples, target):
    samples = np.asarray(samples, dtype=float)
    return (samples.mean() - target) / (samples.std(ddof=1) / np.sqrt(samples.size))


def unit_rows(w):
    return w / np.linalg.norm(w, axis=1, keepdims=True)


def _refused(ensemble, norms):
    """True (after checking the refusal) where the norm law does not take the ensemble."""
    if registry.entry("norms", norms).refusal(ensemble) is None:
        return False
    with pytest.raises(ValueError, match=f"norms={norms!r} needs ensemble in"):
        draw_projections(4, 3, ensemble=ensemble, norms=norms, seed=0)
    return True


# ------------------------------------------------------------ shape and structure


@pytest.mark.parametrize("ensemble", ENSEMBLES)
@pytest.mark.parametrize("norms", NORMS)
@pytest.mark.parametrize("m, d", [(1, 1), (3, 5), (5, 5), (11, 4), (2, 1)])
def test_shape_dtype_finite(ensemble, norms, m, d):
    if _refused(ensemble, norms):
        return
    if ensemble == "simplex" and d == 1:  # no regular simplex of 1 unit vector in R^1
        with pytest.raises(ValueError, match="simplex.*d >= 2"):
            draw_projections(m, d, ensemble=ensemble, norms=norms, seed=0)
        return
    w = draw_projections(m, d, ensemble=ensemble, norms=norms, seed=0)
    assert isinstance(w, np.ndarray)
    assert w.shape == (m, d)
    assert w.dtype == np.float64
    assert w.flags.c_contiguous
    assert np.all(np.isfinite(w))


@pytest.mark.parametrize("ensemble", ORTHO)
@pytest.mark.parametrize("norms", NORMS)
def test_rows_orthogonal_within_blocks_only(ensemble, norms):
    if _refused(ensemble, norms):
        return
    m, d = 11, 4  # blocks: rows 0-3, 4-7 and the partial block 8-10
    u = unit_rows(draw_projections(m, d, ensemble=ensemble, norms=norms, seed=1))
    gram = u @ u.T
    for start, stop in [(0, 4), (4, 8), (8, 11)]:
        block = gram[start:stop, start:stop]
        np.testing.assert_allclose(block, np.eye(stop - start), atol=1e-13)
    # independent blocks are not orthogonal to each other
    assert np.min(np.abs(gram[:4, 4:])) > 0
    assert np.max(np.abs(gram[:4, 4:])) > 1e-3
    assert np.max(np.abs(gram[8:, :8])) > 1e-3


def test_partial_block_is_first_rows_of_an_independent_block():
    """Rows are the rows of Q[b].T (columns of Q[b]), blocks stacked, then cut to m."""
    m, d = 11, 4
    w = draw_projections(m, d, ensemble="orthogonal", norms="fixed", seed=5)
    q = orthogonal_blocks(3, d, 5)
    rows = np.swapaxes(q, -1, -2).reshape(12, d)[:m]
    np.testing.assert_allclose(w / np.sqrt(d), rows, rtol=0, atol=1e-14)


def test_unfixed_rows_are_the_fixed_rows_up_to_sign():
    """Same Gaussian blocks, so the two constructions differ only by column signs."""
    kw = dict(m=9, d=4, norms="chi", seed=11)
    a = draw_projections(ensemble="orthogonal", **kw)
    b = draw_projections(ensemble="orthogonal-unfixed-qr", **kw)
    np.testing.assert_allclose(np.abs(a), np.abs(b), rtol=1e-14)
    ratio = a / b
    assert np.all(np.isclose(np.abs(ratio), 1.0))
    assert np.all(np.ptp(ratio, axis=1) < 1e-12)  # a whole row flips, or none does
    assert np.any(ratio[:, 0] < 0)  # ... and some do flip


# sorf: test_beyond.py; orthogonal-xformers: its "fixed" law is SMReg's (coordinates scaled by
# sqrt(d), not rows), test_xformers_ensemble.py
@pytest.mark.parametrize("ensemble", [e for e in ENSEMBLES if e not in ("sorf", "orthogonal-xformers")])
@pytest.mark.parametrize("d", [1, 3, 16])
def test_fixed_norms_are_sqrt_d(ensemble, d):
    if ensemble == "simplex" and d == 1:
        return
    w = draw_projections(2 * d + 1, d, ensemble=ensemble, norms="fixed", seed=2)
    np.testing.assert_allclose(np.linalg.norm(w, axis=1), np.sqrt(d), rtol=1e-14)


def test_orthogonal_blocks_are_orthogonal():
    q = orthogonal_blocks(50, 6, 0)
    assert q.shape == (50, 6, 6)
    eye = np.broadcast_to(np.eye(6), q.shape)
    np.testing.assert_allclose(q @ np.swapaxes(q, -1, -2), eye, atol=1e-13)
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, eye, atol=1e-13)


# ------------------------------------------------------------ reproducibility


@pytest.mark.parametrize("ensemble", ENSEMBLES)
@pytest.mark.parametrize("norms", NORMS)
def test_same_seed_same_numbers(ensemble, norms):
    if _refused(ensemble, norms):
        return
    kw = dict(ensemble=ensemble, norms=norms)
    a = draw_projections(7, 3, seed=123, **kw)
    np.testing.assert_array_equal(a, draw_projections(7, 3, seed=123, **kw))
    np.testing.assert_array_equal(a, draw_projections(7, 3, seed=np.int64(123), **kw))
    ss = np.random.SeedSequence(123)
    np.testing.assert_array_equal(a, draw_projections(7, 3, seed=ss, **kw))
    np.testing.assert_array_equal(
        a, draw_projections(7, 3, seed=np.random.default_rng(123), **kw)
    )
    assert not np.array_equal(a, draw_projections(7, 3, seed=124, **kw))


def test_seed_none_is_fresh_randomness():
    assert not np.array_equal(draw_projections(4, 4, seed=None), draw_projections(4, 4, seed=None))


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_generator_argument_advances(ensemble):
    g = np.random.default_rng(3)
    a = draw_projections(5, 3, ensemble=ensemble, seed=g)
    b = draw_projections(5, 3, ensemble=ensemble, seed=g)
    assert not np.array_equal(a, b)
    g2 = np.random.default_rng(3)
    np.testing.assert_array_equal(a, draw_projections(5, 3, ensemble=ensemble, seed=g2))
    np.testing.assert_array_equal(b, draw_projections(5, 3, ensemble=ensemble, seed=g2))


def test_orthogonal_blocks_generator_advances():
    g = np.random.default_rng(4)
    assert not np.array_equal(orthogonal_blocks(2, 3, g), orthogonal_blocks(2, 3, g))


@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_numba_backend_same_numpy_numbers(ensemble):
    a = draw_projections(6, 4, ensemble=ensemble, seed=9)
    b = draw_projections(6, 4, ensemble=ensemble, seed=9, backend="numba")
    assert type(b) is np.ndarray
    np.testing.assert_array_equal(a, b)


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@pytest.mark.parametrize("ensemble", ENSEMBLES)
def test_cupy_backend_same_numbers(ensemble):
    import cupy

    a = draw_projections(6, 4, ensemble=ensemble, seed=9)
    b = draw_projections(6, 4, ensemble=ensemble, seed=9, backend="cupy")
    assert isinstance(b, cupy.ndarray)
    assert b.dtype == cupy.float64
    np.testing.assert_array_equal(a, cupy.asnumpy(b))


@pytest.mark.skipif(cupy_available(), reason="CuPy is usable here")
def test_cupy_backend_missing_raises_import_error():
    with pytest.raises(ImportError, match="CuPy"):
        draw_projections(3, 3, backend="cupy")


# ------------------------------------------------------------ Haar law


def test_haar_diagonal_entries_have_mean_zero():
    """The Haar law is invariant under Q -> SQ, S a diagonal sign matrix: every entry has mean 0."""
    n, d = 20000, 5
    q = orthogonal_blocks(n, d, 20)
    for k in range(d):
        assert abs(zscore(q[:, k, k], 0.0)) < 4, k


def test_unfixed_qr_diagonal_is_skewed():
    """LAPACK's Householder convention: Q[0, 0] = -|G[0, 0]|/|G[:, 0]| <= 0 always."""
    n, d = 20000, 5
    q = orthogonal_blocks(n, d, 20, fix_signs=False)
    assert np.all(q[:, 0, 0] <= 0)
    assert zscore(q[:, 0, 0], 0.0) < -8
    # the skew reaches the whole diagonal: negative means, the last one positive
    for k in range(d - 1):
        assert zscore(q[:, k, k], 0.0) < -8, k
    assert zscore(q[:, d - 1, d - 1], 0.0) > 8


def _projection_law(d):
    """Law of c = q·v for q uniform on the unit sphere of R^d: (c+1)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    a = (d - 1) / 2
    return stats.beta(a, a, loc=-1, scale=2)


@pytest.mark.parametrize("d", [3, 6])
def test_haar_fixed_direction_projection_law(d):
    """For Haar Q, every row q_i of Q.T projected on a fixed unit v has the uniform-sphere law."""
    n = 4000
    rng = np.random.default_rng(30 + d)
    v = rng.standard_normal(d)
    v /= np.linalg.norm(v)
    rows = np.swapaxes(orthogonal_blocks(n, d, 31), -1, -2)  # rows[b, i] = i-th row of W's block b
    law = _projection_law(d)
    for direction in (np.eye(d)[0], v):
        for i in range(d):
            p = stats.kstest(rows[:, i] @ direction, law.cdf).pvalue
            assert p > 1e-4, (i, p)


def test_unfixed_qr_fails_the_projection_law():
    n, d = 4000, 6
    rows = np.swapaxes(orthogonal_blocks(n, d, 31, fix_signs=False), -1, -2)
    p = stats.kstest(rows[:, 0, 0], _projection_law(d).cdf).pvalue
    assert p < 1e-10


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal"])
def test_chi_row_norms_ks(ensemble):
    d = 6
    w = draw_projections(3000, d, ensemble=ensemble, norms="chi", seed=40)
    p = stats.kstest(np.linalg.norm(w, axis=1), stats.chi(d).cdf).pvalue
    assert p > 1e-4, p


def test_chi_row_norms_ks_can_fail():
    d = 6
    w = draw_projections(3000, d, ensemble="orthogonal", norms="fixed", seed=40)
    assert stats.kstest(np.linalg.norm(w, axis=1), stats.chi(d).cdf).pvalue < 1e-10


@pytest.mark.parametrize(
    "ensemble, norms", [("iid", "chi"), ("orthogonal", "chi"), ("orthogonal", "fixed")]
)
def test_every_entry_has_mean_zero_variance_one(ensemble, norms):
    """m = 7 rows, d = 5: a full block and a partial one; each entry ~ mean 0, var 1."""
    n, m, d = 3000, 7, 5
    g = np.random.default_rng(50)
    w = np.stack([draw_projections(m, d, ensemble=ensemble, norms=norms, seed=g) for _ in range(n)])
    mean = w.mean(axis=0)
    var = w.var(axis=0, ddof=1)
    assert np.max(np.abs(mean)) < 5 / np.sqrt(n)
    # var of a sample variance of N(0,1) data is 2/(n-1); fixed norms have lighter tails
    assert np.max(np.abs(var - 1)) < 5 * np.sqrt(2 / n)


def test_unfixed_qr_first_entry_has_nonzero_mean():
    n, d = 3000, 5
    w = draw_projections(n * d, d, ensemble="orthogonal-unfixed-qr", seed=50).reshape(n, d, d)
    assert zscore(w[:, 0, 0], 0.0) < -8
    assert abs(zscore(w[:, 1, 0], 0.0)) < 4  # other rows' first coordinates are symmetric


# ------------------------------------------------------------ bias of the unfixed QR


def _positive_estimates(ensemble, n_trials, d, u, seed):
    """Λ·mean_i exp(ω_i·u) for n_trials independent W of m = d rows (one block each)."""
    w = draw_projections(n_trials * d, d, ensemble=ensemble, norms="chi", seed=seed)
    w = w.reshape(n_trials, d, d)
    return np.exp(w @ u).mean(axis=1)


def test_unfixed_qr_positive_estimator_is_biased():
    """d = m = 16, x = y = e_1/2 (u = e_1, |u|^2 = 1, SM = e^{1/4}).

    Haar blocks: mean estimate agrees with SM (|z| < 4). Unfixed QR: omega_1·u =
    -|u||g| always, so the first feature's mean drops from e^{1/2} to
    2e^{1/2}Phi(-1) and the estimate's relative bias is (2Phi(-1) - 1)/16 = -4.27%.
    """
    d, n = 16, 20000
    x = np.zeros(d)
    x[0] = 0.5
    y = x.copy()
    u = x + y
    lam = np.exp(-(x @ x + y @ y) / 2)
    sm = np.exp(x @ y)

    haar = lam * _positive_estimates("orthogonal", n, d, u, seed=61)
    unfixed = lam * _positive_estimates("orthogonal-unfixed-qr", n, d, u, seed=62)
    # the tail is tame at |u|^2 = 1: no single trial dominates the squared error
    for est in (haar, unfixed):
        sq = (est - est.mean()) ** 2
        assert sq.max() / sq.sum() < 0.02

    assert abs(zscore(haar, sm)) < 4
    assert zscore(unfixed, sm) < -8
    predicted = sm * (1 + (2 * special.ndtr(-1.0) - 1) / d)
    assert abs(zscore(unfixed, predicted)) < 4


def test_unfixed_qr_bias_follows_the_diagonal_skew():
    """The cause is the skewed diagonal of Q: Q[k,k] leans negative for k < d and
    positive for k = d, so the bias along e_d has the opposite sign to e_1's."""
    d, n = 16, 20000
    target = np.exp(0.5)  # E exp(ω·u) for |u| = 1
    along_first = _positive_estimates("orthogonal-unfixed-qr", n, d, np.eye(d)[0], seed=63)
    along_last = _positive_estimates("orthogonal-unfixed-qr", n, d, np.eye(d)[-1], seed=64)
    assert zscore(along_first, target) < -8
    assert zscore(along_last, target) > 8


# ------------------------------------------------------------ validation


@pytest.mark.parametrize("bad", [2.5, "3", None, [3]])
def test_m_not_integer(bad):
    with pytest.raises(TypeError, match="m must be an integer"):
        draw_projections(bad, 3)


@pytest.mark.parametrize("bad", [2.5, "3", True])
def test_d_not_integer(bad):
    with pytest.raises(TypeError, match="d must be an integer"):
        draw_projections(3, bad)


@pytest.mark.parametrize("name, args", [("m", (0, 3)), ("d", (3, 0)), ("m", (-1, 3))])
def test_m_d_below_one(name, args):
    with pytest.raises(ValueError, match=f"{name} must be an integer >= 1"):
        draw_projections(*args)


def test_integral_float_m_accepted():
    assert draw_projections(4.0, 2, seed=0).shape == (4, 2)


def test_unknown_ensemble():
    with pytest.raises(ValueError, match="ensemble must be one of 'iid', 'orthogonal', "):
        draw_projections(3, 3, ensemble="gaussian")


def test_unknown_norms():
    with pytest.raises(ValueError, match="norms must be one of 'chi', 'fixed', 'antithetic'; got 'unit'"):
        draw_projections(3, 3, norms="unit")


def test_unknown_backend():
    with pytest.raises(ValueError, match="backend must be one of 'numpy', 'numba', 'cupy'"):
        draw_projections(3, 3, backend="torch")


def test_negative_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        draw_projections(3, 3, seed=-1)


@pytest.mark.parametrize("bad", [1.5, "0", True])
def test_bad_seed_type(bad):
    with pytest.raises(TypeError, match="seed must be None"):
        draw_projections(3, 3, seed=bad)


def test_validation_happens_before_drawing():
    """A bad argument raises without consuming randomness from a Generator."""
    g = np.random.default_rng(0)
    state = g.bit_generator.state
    with pytest.raises(ValueError):
        draw_projections(3, 3, ensemble="nope", seed=g)
    assert g.bit_generator.state == state


def test_orthogonal_blocks_validation():
    with pytest.raises(TypeError, match="n_blocks must be an integer"):
        orthogonal_blocks(1.5, 3, 0)
    with pytest.raises(ValueError, match="d must be an integer >= 1"):
        orthogonal_blocks(2, 0, 0)
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        orthogonal_blocks(2, 3, -5)
