"""Tests of the counter-based generator: Philox4x32-10, normal, chi-square, chi.

The vectorised code (rfkernels.rng) and the scalar Numba code
(rfkernels.engine.rng_numba) must give the same numbers; both must match
Random123's known answers; the variates must have the right laws.
"""

import numpy as np
import pytest
from scipy import stats

from rfkernels import rng
from rfkernels.engine import rng_numba as rn
from rfkernels.backends import cupy_available

# Random123, tests/kat_vectors, the three "philox4x32 10" lines:
# counter (4 words), key (2 words), expected output (4 words).
KAT_PHILOX4X32_10 = [
    (
        (0x00000000, 0x00000000, 0x00000000, 0x00000000),
        (0x00000000, 0x00000000),
        (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8),
    ),
    (
        (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF),
        (0xFFFFFFFF, 0xFFFFFFFF),
        (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD),
    ),
    (
        (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
        (0xA4093822, 0x299F31D0),
        (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
    ),
]
KAT_IDS = ["zeros", "ones", "pi"]

DOFS = [0.5, 1.0, 3.7, 16.0, 4096.0]


@pytest.fixture(scope="module")
def key():
    return rng.key_from_seed(20240611)


def _k(key):
    # one Numba signature for every call: uint32 key words, uint64 trial, int64 slot/stream
    return np.uint32(key[0]), np.uint32(key[1])


# --------------------------------------------------------------------------
# Philox known answers
# --------------------------------------------------------------------------


@pytest.mark.parametrize("ctr, k, want", KAT_PHILOX4X32_10, ids=KAT_IDS)
def test_philox_kat_vectorised(ctr, k, want):
    out = rng.philox4x32_10(np.array(ctr, dtype=np.uint32), np.array(k, dtype=np.uint32))
    assert out.dtype == np.uint32
    assert out.tolist() == list(want)


def test_philox_kat_vectorised_batched():
    ctr = np.array([c for c, _, _ in KAT_PHILOX4X32_10], dtype=np.uint32)
    k = np.array([k for _, k, _ in KAT_PHILOX4X32_10], dtype=np.uint32)
    want = np.array([w for _, _, w in KAT_PHILOX4X32_10], dtype=np.uint32)
    np.testing.assert_array_equal(rng.philox4x32_10(ctr, k), want)
    # a single key broadcast against a batch of counters
    out = rng.philox4x32_10(np.zeros((5, 4), dtype=np.uint32), np.zeros(2, dtype=np.uint32))
    assert out.shape == (5, 4)
    assert (out == want[0]).all()


@pytest.mark.parametrize("ctr, k, want", KAT_PHILOX4X32_10, ids=KAT_IDS)
def test_philox_kat_scalar(ctr, k, want):
    out = rn.philox4x32_10_scalar(*ctr, *k)
    assert [int(v) for v in out] == list(want)
    # inside Numba the result is a tuple of four uint32 (boxed to Python ints outside)
    types = {str(s.return_type) for s in rn.philox4x32_10_scalar.nopython_signatures}
    assert types == {"UniTuple(uint32 x 4)"}


def test_philox_vectorised_equals_scalar_random_words():
    words = np.random.default_rng(0).integers(0, 2**32, size=(200, 6), dtype=np.uint64)
    vec = rng.philox4x32_10(words[:, :4], words[:, 4:])
    for row, out in zip(words, vec):
        assert [int(v) for v in rn.philox4x32_10_scalar(*row)] == out.tolist()


def test_philox_bad_words():
    with pytest.raises(ValueError, match=r"counter must have shape \(\.\.\., 4\)"):
        rng.philox4x32_10(np.zeros(3, dtype=np.uint32), np.zeros(2, dtype=np.uint32))
    with pytest.raises(ValueError, match=r"key words must lie in \[0, 2\*\*32 - 1\]"):
        rng.philox4x32_10(np.zeros(4, dtype=np.uint32), np.array([0, 2**32]))
    with pytest.raises(TypeError, match="integer array"):
        rng.philox4x32_10(np.zeros(4), np.zeros(2, dtype=np.uint32))


# --------------------------------------------------------------------------
# Uniforms
# --------------------------------------------------------------------------


def test_uniforms_open_interval():
    lo = np.array([0, 0xFFFFFFFF], dtype=np.uint64)
    u52 = rng._uniform52(lo, lo, np)
    u32 = rng._uniform32(lo, np)
    for u in (u52, u32):
        assert u[0] > 0.0 and u[1] < 1.0
        np.testing.assert_allclose(u[0] + u[1], 1.0, rtol=0, atol=0)  # symmetric
    assert rn._uniform52(np.uint64(0xFFFFFFFF), np.uint64(0xFFFFFFFF)) == u52[1]
    assert rn._uniform32(np.uint64(0)) == u32[0]


# --------------------------------------------------------------------------
# Keys and bad input
# --------------------------------------------------------------------------


def test_key_from_seed():
    k = rng.key_from_seed(12345)
    assert k.dtype == np.uint32 and k.shape == (2,)
    np.testing.assert_array_equal(k, np.random.SeedSequence(12345).generate_state(2, np.uint32))
    child = np.random.SeedSequence(7).spawn(3)[2]
    np.testing.assert_array_equal(rng.key_from_seed(child), child.generate_state(2, np.uint32))
    assert not np.array_equal(rng.key_from_seed(1), rng.key_from_seed(2))


def test_bad_seed():
    with pytest.raises(ValueError, match="seed must be a non-negative integer; got -1"):
        rng.key_from_seed(-1)
    with pytest.raises(TypeError, match="seed must be None, a non-negative int, a numpy.random.SeedSequence or"):
        rng.key_from_seed(1.5)
    with pytest.raises(TypeError, match="seed must be None, a non-negative int, a numpy.random.SeedSequence or"):
        rng.key_from_seed(True)


@pytest.mark.parametrize("dof", [0.0, -1.0, np.inf, np.nan, [3.0, 0.0]])
def test_bad_dof(key, dof):
    with pytest.raises(ValueError, match=r"dof must be finite and > 0"):
        rng.chi_square(key, 0, np.arange(2), dof)
    with pytest.raises(ValueError, match=r"dof must be finite and > 0"):
        rng.chi(key, 0, np.arange(2), dof)


@pytest.mark.parametrize("dof", [0.0, -2.0])
def test_bad_dof_scalar(key, dof):
    k0, k1 = _k(key)
    with pytest.raises(ValueError, match=r"dof must be finite and > 0"):
        rn.chi_square_at(k0, k1, np.uint64(0), 0, 2, dof)


def test_bad_indices(key):
    with pytest.raises(ValueError, match="trial must be >= 0"):
        rng.normal(key, -1, 0)
    with pytest.raises(ValueError, match=r"slot must be < 2\*\*32"):
        rng.normal(key, 0, 2**32)
    with pytest.raises(TypeError, match="slot must be a non-negative integer"):
        rng.normal(key, 0, 1.0)
    with pytest.raises(ValueError, match=r"stream must be an integer in \[0, 65535\]"):
        rng.normal(key, 0, 0, stream=2**16)
    with pytest.raises(ValueError, match=r"key must have shape \(\.\.\., 2\)"):
        rng.normal(np.zeros(3, dtype=np.uint32), 0, 0)


# --------------------------------------------------------------------------
# Vectorised == scalar
# --------------------------------------------------------------------------


def _grid(n_trials, n_slots, first_trial=0):
    trial = np.arange(first_trial, first_trial + n_trials, dtype=np.uint64)[:, None]
    slot = np.arange(n_slots, dtype=np.int64)[None, :]
    return trial, slot


def test_normal_vectorised_equals_scalar(key):
    trial, slot = _grid(20, 50, first_trial=2**40 - 3)  # crosses into c3 != 0 words
    z = rng.normal(key, trial, slot, stream=5)
    assert z.shape == (20, 50) and z.dtype == np.float64
    k0, k1 = _k(key)
    ref = np.array(
        [[rn.normal_at(k0, k1, t, int(s), 5) for s in slot[0]] for t in trial[:, 0]]
    )
    np.testing.assert_allclose(z, ref, rtol=1e-12, atol=0)


def test_normal_pairs_share_a_block(key):
    # slots 2j and 2j+1 are the cosine and sine branches of one Box-Muller transform
    trial, pair = _grid(7, 60, first_trial=2**33)
    z0, z1 = rng.normal_pair(key, trial, pair, stream=3)
    np.testing.assert_array_equal(z0, rng.normal(key, trial, 2 * pair, stream=3))
    np.testing.assert_array_equal(z1, rng.normal(key, trial, 2 * pair + 1, stream=3))
    k0, k1 = _k(key)
    for t in (0, 6):
        for j in (0, 59):
            ref = rn.normal_pair_at(k0, k1, trial[t, 0], int(pair[0, j]), 3)
            np.testing.assert_allclose([z0[t, j], z1[t, j]], ref, rtol=1e-12, atol=0)
    # the two branches are uncorrelated
    a, b = rng.normal_pair(key, 0, np.arange(N_DIST // 2))
    assert abs(np.corrcoef(a, b)[0, 1]) * np.sqrt(a.size) < 4
    with pytest.raises(ValueError, match=r"pair must be < 2\*\*31"):
        rng.normal_pair(key, 0, 2**31)


@pytest.mark.parametrize("dof", [0.7, 3.0, 64.0])
def test_chi_square_with_normal(key, dof):
    trial, slot = _grid(30, 80)
    q, z = rng.chi_square_with_normal(key, trial, slot, dof, stream=9)
    np.testing.assert_array_equal(q, rng.chi_square(key, trial, slot, dof, stream=9))
    k0, k1 = _k(key)
    for t in (0, 29):
        for s in (0, 41, 79):
            ref = rn.chi_square_normal_at(k0, k1, trial[t, 0], int(slot[0, s]), 9, dof)
            np.testing.assert_allclose([q[t, s], z[t, s]], ref, rtol=1e-12, atol=0)
    # the companion is a standard normal independent of the chi-square
    q, z = rng.chi_square_with_normal(rng.key_from_seed(106), 0, np.arange(N_DIST), dof)
    assert stats.kstest(z, "norm").pvalue > 1e-4
    assert abs(stats.spearmanr(q, z)[0]) * np.sqrt(z.size) < 4
    assert abs(stats.spearmanr(q, z * z)[0]) * np.sqrt(z.size) < 4


def test_largest_trial_and_slot(key):
    t = np.uint64(2**64 - 1)
    z = rng.normal(key, 2**64 - 1, 2**32 - 1)
    k0, k1 = _k(key)
    np.testing.assert_allclose(z, rn.normal_at(k0, k1, t, 2**32 - 1, 0), rtol=1e-12)
    q = rng.chi_square(key, 2**64 - 1, 2**32 - 1, 3.0)
    np.testing.assert_allclose(q, rn.chi_square_at(k0, k1, t, 2**32 - 1, 2, 3.0), rtol=1e-12)


@pytest.mark.parametrize("dof", DOFS)
def test_chi_square_vectorised_equals_scalar(key, dof):
    trial, slot = _grid(40, 100)
    q, attempts, _ = rng._chi_square(key, trial, slot, dof, 2, np)
    # the rejection path is exercised: some entries needed more than one attempt
    # (at dof = 4096 the acceptance rate is so close to 1 that none may)
    assert attempts.min() == 1
    if dof <= 16:
        assert attempts.max() >= 2
    k0, k1 = _k(key)
    ref = np.array(
        [[rn.chi_square_at(k0, k1, t, int(s), 2, dof) for s in slot[0]] for t in trial[:, 0]]
    )
    np.testing.assert_allclose(q, ref, rtol=1e-12, atol=0)
    r = rng.chi(key, trial[:3], slot, dof)
    ref_chi = np.array(
        [[rn.chi_at(k0, k1, t, int(s), 1, dof) for s in slot[0]] for t in trial[:3, 0]]
    )
    np.testing.assert_allclose(r, ref_chi, rtol=1e-12, atol=0)


def test_chi_square_mixed_dof_array(key):
    dof = np.array(DOFS * 40)
    slot = np.arange(dof.size)
    q = rng.chi_square(key, 11, slot, dof)
    k0, k1 = _k(key)
    ref = [rn.chi_square_at(k0, k1, np.uint64(11), int(s), 2, f) for s, f in zip(slot, dof)]
    np.testing.assert_allclose(q, ref, rtol=1e-12, atol=0)
    # one dof at a time gives the same numbers
    for f in DOFS:
        np.testing.assert_array_equal(q[dof == f], rng.chi_square(key, 11, slot[dof == f], f))


# --------------------------------------------------------------------------
# Reproducibility
# --------------------------------------------------------------------------


def test_same_counter_same_value_any_shape_or_order(key):
    trial, slot = _grid(30, 40)
    z = rng.normal(key, trial, slot)
    q = rng.chi_square(key, trial, slot, 2.5)
    tt, ss = np.broadcast_arrays(trial, slot)
    perm = np.random.default_rng(1).permutation(tt.size)
    tf, sf = tt.reshape(-1)[perm], ss.reshape(-1)[perm]
    np.testing.assert_array_equal(rng.normal(key, tf, sf), z.reshape(-1)[perm])
    np.testing.assert_array_equal(rng.chi_square(key, tf, sf, 2.5), q.reshape(-1)[perm])
    # chunks, single entries, and python ints give the same numbers
    np.testing.assert_array_equal(rng.chi_square(key, trial[7:9], slot[:, 3:30], 2.5), q[7:9, 3:30])
    assert rng.normal(key, 12, 17) == z[12, 17]
    assert rng.chi_square(key, 12, 17, 2.5) == q[12, 17]
    # the key may be given as a list, or batched along a leading axis
    assert rng.normal([int(key[0]), int(key[1])], 12, 17) == z[12, 17]
    keys = np.stack([key, rng.key_from_seed(3)])
    zz = rng.normal(keys, 12, 17)
    assert zz[0] == z[12, 17] and zz[1] == rng.normal(rng.key_from_seed(3), 12, 17)


def test_numpy_chunked_path_same_numbers(key):
    # beyond rng._CHUNK entries NumPy works chunk by chunk; nothing may change
    n = 2 * rng._CHUNK + 123
    slot = np.arange(n)
    dof = np.where(slot % 3 == 0, 0.7, 5.0)  # per-entry shapes, both branches
    keys = np.stack([key, rng.key_from_seed(9)])[slot % 2]  # per-entry keys
    z = rng.normal(keys, 4, slot)
    q = rng.chi_square(keys, 4, slot, dof)
    pick = np.r_[0:3, rng._CHUNK - 2 : rng._CHUNK + 2, n - 3 : n]
    np.testing.assert_array_equal(z[pick], rng.normal(keys[pick], 4, pick))
    np.testing.assert_array_equal(q[pick], rng.chi_square(keys[pick], 4, pick, dof[pick]))
    for i in pick:
        k0, k1 = _k(keys[i])
        np.testing.assert_allclose(z[i], rn.normal_at(k0, k1, np.uint64(4), int(i), 0), rtol=1e-12)
        ref = rn.chi_square_at(k0, k1, np.uint64(4), int(i), 2, dof[i])
        np.testing.assert_allclose(q[i], ref, rtol=1e-12)


def test_different_counters_differ(key):
    slot = np.arange(1000)
    base = rng.normal(key, 0, slot)
    assert np.unique(base).size == base.size
    for other in (
        rng.normal(key, 0, slot, stream=1),
        rng.normal(key, 1, slot),
        rng.normal(key, 2**32, slot),  # high word of the trial
        rng.normal(key, 0, slot + 1000),
        rng.normal(rng.key_from_seed(1), 0, slot),
    ):
        assert not np.any(other == base)
        # and are uncorrelated
        assert abs(np.corrcoef(base, other)[0, 1]) < 4 / np.sqrt(slot.size)
    q = rng.chi_square(key, 0, slot, 3.0)
    assert not np.any(q == rng.chi_square(key, 0, slot, 3.0, stream=7))
    assert not np.any(q == rng.chi_square(key, 1, slot, 3.0))


# --------------------------------------------------------------------------
# Distributions (fixed seeds, |z| < 4 from standard errors)
# --------------------------------------------------------------------------

N_DIST = 200_000


def test_normal_moments():
    z = rng.normal(rng.key_from_seed(101), 0, np.arange(N_DIST))
    n = z.size
    assert abs(z.mean()) / np.sqrt(1 / n) < 4
    assert abs(z.var() - 1) / np.sqrt(2 / n) < 4
    assert abs(stats.skew(z)) / np.sqrt(6 / n) < 4
    assert abs(stats.kurtosis(z)) / np.sqrt(24 / n) < 4


def test_normal_ks():
    z = rng.normal(rng.key_from_seed(102), np.arange(100)[:, None], np.arange(1000))
    assert stats.kstest(z.reshape(-1), "norm").pvalue > 1e-4


@pytest.mark.parametrize("dof", [0.5, 1.0, 3.7, 16.0, 4096.0])
def test_chi_square_moments(dof):
    q = rng.chi_square(rng.key_from_seed(103), 0, np.arange(N_DIST), dof)
    n = q.size
    assert np.all(q >= 0)
    assert abs(q.mean() - dof) / np.sqrt(2 * dof / n) < 4
    # Var of the sample variance: (mu4 - sigma**4) / n, mu4 = 12 k (k + 4)
    se_var = np.sqrt((8 * dof**2 + 48 * dof) / n)
    assert abs(q.var() - 2 * dof) / se_var < 4


@pytest.mark.parametrize("dof", [0.5, 3.0, 64.0])
def test_chi_square_ks(dof):
    q = rng.chi_square(rng.key_from_seed(104), 0, np.arange(N_DIST), dof)
    assert stats.kstest(q, stats.chi2(dof).cdf).pvalue > 1e-4


def test_chi_ks():
    r = rng.chi(rng.key_from_seed(105), 0, np.arange(N_DIST), 7.0)
    assert stats.kstest(r, stats.chi(7.0).cdf).pvalue > 1e-4


# --------------------------------------------------------------------------
# CuPy
# --------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_matches_numpy(key):
    import cupy

    trial, slot = _grid(20, 300)
    ct, cs = cupy.asarray(trial), cupy.asarray(slot)
    np.testing.assert_array_equal(
        rng.philox4x32_10(cupy.zeros(4, dtype=cupy.uint32), cupy.zeros(2, dtype=cupy.uint32)).get(),
        KAT_PHILOX4X32_10[0][2],
    )
    np.testing.assert_allclose(rng.normal(key, ct, cs).get(), rng.normal(key, trial, slot), rtol=1e-12)
    for dof in DOFS:
        np.testing.assert_allclose(
            rng.chi_square(key, ct, cs, dof).get(), rng.chi_square(key, trial, slot, dof), rtol=1e-12
        )
