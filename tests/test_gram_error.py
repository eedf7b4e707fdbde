"""RandomFourierFeatures.gram_error, positive features, and the interpolated simplex entries."""

import numpy as np
import pytest

from rfkernels import RandomFourierFeatures, theory
from rfkernels import fourier

GAMMA = 0.15


@pytest.fixture(scope="module")
def x():
    return np.random.default_rng(4).normal(size=(120, 5))


def _k(a, b, gamma=GAMMA):
    return np.exp(-gamma * ((a[:, None] - b[None]) ** 2).sum(-1))


@pytest.mark.parametrize("kind,ensemble", [("offset", "iid"), ("trig", "orthogonal"),
                                           ("trig", "simplex"), ("positive", "iid"),
                                           ("positive", "orthogonal"), ("positive", "simplex")])
def test_gram_error_is_the_expected_mse_at_every_r(x, kind, ensemble):
    rff = RandomFourierFeatures(gamma=GAMMA, kind=kind, ensemble=ensemble)
    r = np.array([2, 6, 10, 24])
    got = rff.gram_error(x, r)
    assert got.shape == r.shape
    for ri, gi in zip(r, got):
        fit = RandomFourierFeatures(gamma=GAMMA, n_components=int(ri), kind=kind,
                                    ensemble=ensemble, random_state=0).fit(x)
        assert gi == pytest.approx(fit.expected_mse(x).relative_frobenius, rel=1e-10)
    scalar = rff.set_params(n_components=10).gram_error(x)
    assert isinstance(scalar, float) and scalar == pytest.approx(got[2], rel=1e-14)


def test_gram_error_refuses_what_it_cannot_give(x):
    with pytest.raises(ValueError, match="n_components must be even for kind='trig'"):
        RandomFourierFeatures(gamma=GAMMA, kind="trig").gram_error(x, [4, 5])
    with pytest.raises(ValueError, match="n_components must be >= 1|n_components"):
        RandomFourierFeatures(gamma=GAMMA).gram_error(x, [0])
    with pytest.raises(ValueError, match="sorf"):
        RandomFourierFeatures(gamma=GAMMA, ensemble="sorf").gram_error(x, 8)


def test_positive_features_estimate_the_gaussian_kernel_without_bias(x):
    """The mean of many fits' Gram matrices is K within |z| < 4 (entrywise, the exact MSE's se)."""
    small = x[:6] * 0.5
    m, fits = 64, 400
    est = np.mean([RandomFourierFeatures(gamma=GAMMA, n_components=m, kind="positive",
                                         random_state=s).fit(small).kernel(small)
                   for s in range(fits)], axis=0)
    fit = RandomFourierFeatures(gamma=GAMMA, n_components=m, kind="positive",
                                random_state=0).fit(small)
    assert np.all(fit.transform(small) > 0)
    se = np.sqrt(fit.expected_mse(small).entries / fits)
    z = (est - _k(small, small)) / se
    assert np.max(np.abs(z)) < 4
    assert fit.get_feature_names_out().shape == (m,)


def test_positive_entries_are_the_theory_at_each_pair_and_not_translation_invariant(x):
    a, b = x[:7], x[7:12] + 0.3
    fit = RandomFourierFeatures(gamma=GAMMA, n_components=16, kind="positive",
                                ensemble="orthogonal", random_state=1).fit(a)
    got = fit.expected_mse(a, b)
    ref = theory.exact_mse(a[:, None, :], b[None, :, :], 16, "positive", ensemble="orthogonal",
                           kernel="gaussian", gamma=GAMMA)
    assert np.allclose(got.entries, ref, rtol=1e-12, atol=0)
    assert got.kind == "positive" and got.n_components == 16 and got.m == 16
    shifted = fit.expected_mse(a + 1.0, b + 1.0)  # same distances, larger norms
    assert np.all(shifted.entries != got.entries)
    paired = RandomFourierFeatures(gamma=GAMMA, n_components=16, kind="trig",
                                   ensemble="orthogonal", random_state=1).fit(a)
    assert np.allclose(paired.expected_mse(a + 1.0, b + 1.0).entries,
                       paired.expected_mse(a, b).entries, rtol=1e-9)


def test_simplex_entries_are_interpolated_to_the_stated_tolerance(x, monkeypatch):
    big = np.random.default_rng(5).normal(size=(90, 5)) * 1.5  # 8,100 entries: interpolated
    fit = RandomFourierFeatures(gamma=GAMMA, n_components=10, kind="trig",
                                ensemble="simplex", random_state=0).fit(big)
    got = fit.expected_mse(big).entries
    assert np.array_equal(got, got.T) and np.all(np.diag(got) == 0.0)
    monkeypatch.setattr(fourier, "_INTERPOLATE_ABOVE", 10**9)  # every entry directly
    ref = fit.expected_mse(big).entries
    assert np.max(np.abs(got - ref)) <= 1e-12 * np.max(ref)
    assert not np.array_equal(got, ref)  # the interpolant was used
    monkeypatch.setattr(fourier, "_INTERPOLATE_ABOVE", 4096)
    monkeypatch.setattr(fourier, "_CHEB_DEGREES", (3,))  # no degree meets the tolerance
    assert np.array_equal(fit.expected_mse(big).entries, ref)  # so every entry is direct


def test_interpolated_entries_of_near_duplicate_rows_keep_their_relative_accuracy(monkeypatch):
    base = np.random.default_rng(6).normal(size=(60, 5))
    rows = np.vstack([base, base + 1e-4 * np.random.default_rng(7).normal(size=base.shape)])
    fit = RandomFourierFeatures(gamma=GAMMA, n_components=10, kind="trig",
                                ensemble="simplex", random_state=0).fit(rows)
    got = fit.expected_mse(rows).entries  # 14,400 entries: interpolated
    monkeypatch.setattr(fourier, "_INTERPOLATE_ABOVE", 10**9)
    ref = fit.expected_mse(rows).entries
    tiny = (ref > 0) & (ref < 1e-12)  # the pairs (i, i + 60): MSE of order 1e-19
    assert tiny.sum() >= 120
    assert np.allclose(got[tiny], ref[tiny], rtol=1e-8, atol=0)
    assert np.allclose(got, ref, rtol=1e-8, atol=0)
