"""scikit-learn's RBFSampler, and our own offset and trig maps, against the exact Gaussian-kernel MSE.

RBFSampler(gamma, n_components=D) draws the D columns of ``random_weights_``
iid N(0, 2 gamma I) and ``random_offset_`` iid U[0, 2 pi), and maps
x -> sqrt(2/D) cos(x W + b). So one fit with D = m n, cut into n blocks of m
consecutive columns, is n independent samplers of m components each, once
each block's features are rescaled by sqrt(n) (sqrt(2/(m n)) sqrt(n) =
sqrt(2/m)): block j's kernel estimate is n times the sum of its m feature
products. The empirical MSE over the blocks (fixed seeds, |z| < 4 from the
standard error of the mean squared error) is checked against
theory.exact_mse(x, y, m, "offset", kernel="gaussian", gamma=gamma), and the
formula of the paired map is shown to be rejected by the same data. Our own
maps are checked in the same way (orthogonal blocks of d rows are
independent, so m = 2d rows cut from one draw are independent samplers).
"""

import math

import numpy as np
import pytest

from rfkernels import draw_phases, draw_projections, feature_map, theory

sklearn = pytest.importorskip("sklearn")
from sklearn.kernel_approximation import RBFSampler  # noqa: E402


def _pair(d, nx, ny, angle):
    return theory.pair(d, nx, ny, angle if d > 1 else (0.0 if angle < np.pi / 2 else np.pi))


def _blocks(fx, fy, n, columns=None):
    """Kernel estimate of each of n blocks: n times the block sums of the feature products."""
    prod = fx * fy
    if columns is not None:  # trig: [sin | cos] columns of one projection add up
        prod = prod[:columns] + prod[columns:]
    return n * prod.reshape(n, -1).sum(axis=1)


def _z(estimates, k, exact):
    sq = (estimates - k) ** 2
    mse, se = sq.mean(), sq.std(ddof=1) / math.sqrt(sq.size)
    return (mse - exact) / se, mse, se


def _kernel(x, y, gamma):
    return math.exp(-gamma * float(np.sum((x - y) ** 2)))


# (d, m, gamma, |x|, |y|, angle): MATH.md's d = 5, m = 20, gamma = 0.3; one component; d = 1;
# a wide kernel in d = 16 with m < d; and a pair far apart (k ~ 0.02)
RBF_CASES = [(5, 20, 0.3, 1.0, 1.3, 1.0), (3, 1, 1.0, 0.5, 0.7, 2.0), (1, 4, 2.0, 0.3, 0.6, 0.0),
             (16, 7, 0.05, 2.0, 1.0, 1.5), (4, 9, 1.5, 1.0, 1.0, 2.5)]
N_BLOCKS = 20_000


def test_rbf_sampler_is_the_offset_map_and_a_block_is_a_sampler():
    d, m, n, gamma = 5, 6, 50, 0.3
    X = np.random.default_rng(1).standard_normal((4, d))
    rbf = RBFSampler(gamma=gamma, n_components=m * n, random_state=0).fit(X)
    W = rbf.random_weights_.T / math.sqrt(2 * gamma)  # rows ~ N(0, I): the x' coordinates
    b = rbf.random_offset_
    ours = feature_map(X, W, "offset", phase=b, kernel="gaussian", gamma=gamma)
    np.testing.assert_allclose(ours, rbf.transform(X), rtol=0, atol=1e-13)
    j = 17  # block j of the fit, rescaled by sqrt(n), is the m-component sampler of its columns
    cols = slice(j * m, (j + 1) * m)
    block = math.sqrt(n) * rbf.transform(X)[:, cols]
    single = feature_map(X, W[cols], "offset", phase=b[cols], kernel="gaussian", gamma=gamma)
    np.testing.assert_allclose(block, single, rtol=0, atol=1e-13)
    np.testing.assert_allclose(single, math.sqrt(2 / m) * np.cos(X @ rbf.random_weights_[:, cols]
                                                                 + b[cols]), rtol=0, atol=1e-13)


@pytest.mark.parametrize("d, m, gamma, nx, ny, angle", RBF_CASES)
def test_rbf_sampler_mse_matches_the_offset_formula(d, m, gamma, nx, ny, angle):
    x, y = _pair(d, nx, ny, angle)
    k = _kernel(x, y, gamma)
    exact = float(theory.exact_mse(x, y, m, "offset", kernel="gaussian", gamma=gamma))
    assert exact == pytest.approx((1 - k * k + k**4 / 2) / m, rel=1e-12)
    fits = 2 if m * N_BLOCKS > 200_000 else 1  # one fit of m n columns, or a few smaller ones
    est = []
    for seed in range(fits):
        n = N_BLOCKS // fits
        rbf = RBFSampler(gamma=gamma, n_components=m * n, random_state=100 + seed)
        f = rbf.fit_transform(np.stack([x, y]))
        est.append(_blocks(f[0], f[1], n))
    est = np.concatenate(est)
    z, mse, se = _z(est, k, exact)
    assert abs(z) < 4, (mse, se, exact)
    assert abs(est.mean() - k) < 4 * est.std(ddof=1) / math.sqrt(est.size)  # unbiased
    # the paired map's formulas would be rejected: m frequencies (2m outputs) and m/2 frequencies
    # (m outputs, the same output dimension); the gap (k^2 - k^4/2)/m is many errors wide unless
    # the pair is far apart (k = 0.0045 in the last case: every formula is about 1/m there)
    if k > 0.1:
        for paired in ((1 - k * k) ** 2 / (2 * m), (1 - k * k) ** 2 / m):
            assert (mse - paired) / se > 10, (mse, se, paired)


def test_rbf_sampler_several_fits_agree_with_one_large_fit():
    """Fits with different random_state are independent samplers too (MATH.md's d = 5, D = 20)."""
    d, m, gamma = 5, 20, 0.3
    x, y = _pair(d, 1.0, 1.3, 1.0)
    k = _kernel(x, y, gamma)
    exact = float(theory.exact_mse(x, y, m, "offset", kernel="gaussian", gamma=gamma))
    est = np.array([float(RBFSampler(gamma=gamma, n_components=m, random_state=s)
                          .fit_transform(np.stack([x, y])).prod(axis=0).sum())
                    for s in range(2_000)])
    z, mse, se = _z(est, k, exact)
    assert abs(z) < 4, (mse, se, exact)


# ---------------------------------------------------------------------------
# Our own maps: offset (iid, orthogonal) and paired trig (orthogonal)
# ---------------------------------------------------------------------------

OWN = [("offset", "iid", "chi"), ("offset", "orthogonal", "chi"), ("trig", "orthogonal", "chi"),
       ("trig", "iid", "chi"), ("offset", "orthogonal", "fixed"), ("trig", "orthogonal", "fixed")]


@pytest.mark.parametrize("kind, ensemble, norms", OWN, ids=["-".join(c) for c in OWN])
def test_own_maps_mse_matches_theory(kind, ensemble, norms):
    d, gamma = 4, 0.8
    m = 2 * d  # two full orthogonal blocks per sampler: samplers cut from one draw are independent
    n = 20_000
    x, y = _pair(d, 0.9, 0.6, 2.0)
    k = _kernel(x, y, gamma)
    gen = np.random.default_rng(np.random.SeedSequence(2024))
    W = draw_projections(m * n, d, ensemble=ensemble, norms=norms, seed=gen)
    kw = dict(kernel="gaussian", gamma=gamma)
    if kind == "offset":
        kw["phase"] = draw_phases(m * n, seed=gen)
    fx, fy = feature_map(x, W, kind, **kw), feature_map(y, W, kind, **kw)
    est = _blocks(fx, fy, n, columns=m * n if kind == "trig" else None)
    exact = float(theory.exact_mse(x, y, m, kind, ensemble=ensemble, norms=norms,
                                   kernel="gaussian", gamma=gamma))
    z, mse, se = _z(est, k, exact)
    assert abs(z) < 4, (mse, se, exact)
    if ensemble == "orthogonal" and norms == "chi":  # the iid formula would be rejected
        iid = float(theory.exact_mse(x, y, m, kind, kernel="gaussian", gamma=gamma))
        assert (iid - mse) / se > 6, (mse, se, iid)


def test_own_orthogonal_offset_with_a_partial_block():
    """m = d + 2: one full block and a partial one, each sampler drawn on its own."""
    d, gamma, trials = 5, 0.4, 4_000
    m = d + 2
    x, y = _pair(d, 1.2, 0.8, 1.8)
    k = _kernel(x, y, gamma)
    gen = np.random.default_rng(np.random.SeedSequence(7))
    est = np.empty(trials)
    for i in range(trials):
        W = draw_projections(m, d, ensemble="orthogonal", seed=gen)
        b = draw_phases(m, seed=gen)
        fx = feature_map(x, W, "offset", phase=b, kernel="gaussian", gamma=gamma)
        fy = feature_map(y, W, "offset", phase=b, kernel="gaussian", gamma=gamma)
        est[i] = float(fx @ fy)
    exact = float(theory.exact_mse(x, y, m, "offset", ensemble="orthogonal", kernel="gaussian",
                                   gamma=gamma))
    z, mse, se = _z(est, k, exact)
    assert abs(z) < 4, (mse, se, exact)
