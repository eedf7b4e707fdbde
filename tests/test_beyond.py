"""Beyond the paper (issue 11), wired into the public API: OPRF features, simplex
and SORF projections, their exact theory against literal Monte Carlo, and the
Monte Carlo and comparison entries that take them.

The quadrature itself is checked against mpmath in tests/test_beyond_theory.py.
Statistical checks use fixed seeds and |z| < 4; each also checks that the
nearest wrong answer is many standard errors away, so that it can fail.
"""

import numpy as np
import pytest
import scipy.linalg
from rfkernels.analysis import (
    compare,
    monte_carlo_mse,
    trial_estimates,
)

import rfkernels
from rfkernels import draw_projections, estimate, feature_map, log_estimate, theory
from rfkernels.features import oprf_auto_a
from rfkernels.projections import fwht, simplex_directions, sorf_blocks
from rfkernels import ENSEMBLES, KINDS, PAPER_KINDS


def _z(samples, target):
    samples = np.asarray(samples, dtype=float)
    return (samples.mean() - target) / (samples.std(ddof=1) / np.sqrt(samples.size))


def test_lists_are_the_registrys_and_paper_kinds_kept():
    assert KINDS == rfkernels.estimators.names("kind")  # one list, the registry's
    assert KINDS[:5] == ("trig", "positive", "hyperbolic", "oprf", "offset")  # appended
    entry = rfkernels.estimators.entry
    assert [entry("kind", k).seed_index for k in KINDS] == list(range(len(KINDS)))  # frozen
    assert [entry("ensemble", e).seed_index for e in ENSEMBLES] == list(range(len(ENSEMBLES)))
    assert PAPER_KINDS == ("trig", "positive", "hyperbolic")
    assert ENSEMBLES == ("iid", "orthogonal", "orthogonal-unfixed-qr", "simplex", "sorf",
                         "orthogonal-xformers", "qmc")
    assert ENSEMBLES == rfkernels.estimators.names("ensemble")  # one order, the registry's
    assert rfkernels.NORMS == ("chi", "fixed", "antithetic") == rfkernels.estimators.names("norms")
    assert theory.THEORY_ENSEMBLES == ("iid", "orthogonal", "simplex")
    assert rfkernels.PAPER_KINDS == PAPER_KINDS


# ---------------------------------------------------------------------------
# Simplex projections
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("norms", ["chi", "fixed"])
def test_simplex_gram_structure(norms):
    m, d = 11, 4  # blocks: rows 0-3, 4-7 and the partial block 8-10
    w = draw_projections(m, d, ensemble="simplex", norms=norms, seed=3)
    u = w / np.linalg.norm(w, axis=1, keepdims=True)
    gram = u @ u.T
    c = -1.0 / (d - 1)
    for start, stop in [(0, 4), (4, 8), (8, 11)]:
        b = stop - start
        want = np.full((b, b), c) + (1 - c) * np.eye(b)
        np.testing.assert_allclose(gram[start:stop, start:stop], want, atol=1e-13)
    assert np.max(np.abs(gram[:4, 4:] - c)) > 1e-3  # blocks are independent
    np.testing.assert_allclose(u[:4].sum(axis=0), 0.0, atol=1e-13)  # a whole simplex sums to 0
    if norms == "fixed":
        np.testing.assert_allclose(np.linalg.norm(w, axis=1), np.sqrt(d), rtol=1e-14)


def test_simplex_directions_and_small_d():
    s = simplex_directions(5)
    np.testing.assert_allclose(np.linalg.norm(s, axis=1), 1.0, rtol=1e-15)
    np.testing.assert_allclose(s @ s.T, np.full((5, 5), -0.25) + 1.25 * np.eye(5), atol=1e-15)
    with pytest.raises(ValueError, match="d >= 2"):
        draw_projections(3, 1, ensemble="simplex")
    w = draw_projections(2, 2, ensemble="simplex", seed=0)  # d = 2: antipodal pair
    np.testing.assert_allclose(w[0] / np.linalg.norm(w[0]), -w[1] / np.linalg.norm(w[1]), atol=1e-14)


def test_simplex_chi_norms_and_rows_marginally_gaussian():
    d, trials = 5, 4000
    w = draw_projections(trials * d, d, ensemble="simplex", seed=7)
    sq = np.sum(w * w, axis=1)
    assert abs(_z(sq, d)) < 4  # E|w|^2 = d
    assert abs(_z(sq**2, d * (d + 2))) < 4  # chi^2(d) second moment
    assert abs(_z(w[:, 0] ** 2, 1.0)) < 4  # Haar rotation: each coordinate N(0, 1)


def _block_estimates(x, y, d, m, trials, ensemble, kind, seed, A=None, norms="chi"):
    """Per-trial estimates from trials independent draws of m rows (first m of whole blocks)."""
    size = d if ensemble != "sorf" else 1 << (d - 1).bit_length()
    per = -(-m // size) * size
    w = draw_projections(trials * per, d, ensemble=ensemble, norms=norms, seed=seed)
    w = w.reshape(trials, per, d)[:, :m, :].reshape(trials * m, d)
    total = w.shape[0]
    terms = (feature_map(x, w, kind, A=A) * feature_map(y, w, kind, A=A)) * total
    if kind in ("trig", "hyperbolic"):  # [sin | cos] or [exp+ | exp-]: pair the halves
        terms = terms[:total] + terms[total:]
    return terms.reshape(trials, m).mean(axis=1)


def test_positive_simplex_estimates_are_unbiased():
    x, y = theory.pair(6, 0.6, 0.5, 1.0)
    sm = float(np.exp(x @ y))
    est = _block_estimates(x, y, 6, 6, 40_000, "simplex", "positive", seed=11)
    z = _z(est, sm)
    assert abs(z) < 4, z
    # the check can fail: a 3% bias is far outside the error bars
    assert abs(_z(est, 1.03 * sm)) > 8


# ---------------------------------------------------------------------------
# SORF projections
# ---------------------------------------------------------------------------


def test_fwht_is_the_normalised_hadamard_transform():
    a = np.random.default_rng(0).standard_normal((3, 16, 5))
    want = np.einsum("ij,bjk->bik", scipy.linalg.hadamard(16) / 4.0, a)
    np.testing.assert_allclose(fwht(a, axis=1), want, atol=1e-14)
    with pytest.raises(ValueError, match="power-of-two"):
        fwht(np.ones(6))


@pytest.mark.parametrize("d", [1, 3, 8, 13])
def test_sorf_blocks_equal_the_dense_hadamard_product(d):
    big_d = 1 << (d - 1).bit_length()
    blocks = sorf_blocks(2, d, np.random.default_rng(5))
    signs = 2.0 * np.random.default_rng(5).integers(0, 2, size=(2, 3, big_d)) - 1.0
    h = scipy.linalg.hadamard(big_d) / np.sqrt(big_d)
    for b in range(2):
        dense = np.sqrt(big_d) * h @ np.diag(signs[b, 0]) @ h @ np.diag(signs[b, 1]) @ h @ np.diag(
            signs[b, 2])
        np.testing.assert_allclose(blocks[b], dense[:, :d], atol=1e-12)


@pytest.mark.parametrize("m, d", [(1, 1), (5, 3), (16, 16), (40, 13)])
@pytest.mark.parametrize("norms", ["chi", "fixed"])
def test_sorf_shapes_norms_and_orthogonality(m, d, norms):
    w = draw_projections(m, d, ensemble="sorf", norms=norms, seed=2)
    assert w.shape == (m, d) and w.dtype == np.float64 and np.all(np.isfinite(w))
    np.testing.assert_array_equal(w, draw_projections(m, d, ensemble="sorf", norms=norms, seed=2))
    if d == 16 and norms == "fixed":  # d a power of two: orthogonal rows of length sqrt(d)
        np.testing.assert_allclose(w @ w.T, d * np.eye(m), atol=1e-11)


def test_sorf_chi_norms_and_fixed_mean_length():
    d, m = 13, 16 * 400  # D = 16: first 13 columns
    fixed = draw_projections(m, d, ensemble="sorf", norms="fixed", seed=4)
    assert abs(_z(np.sum(fixed**2, axis=1), d)) < 4  # squared length d on average
    chi = draw_projections(m, d, ensemble="sorf", norms="chi", seed=4)
    sq = np.sum(chi**2, axis=1)
    assert abs(_z(sq, d)) < 4 and abs(_z(sq**2, d * (d + 2))) < 4


def test_fwht_needs_no_hadamard_matrix():
    """O(D log D) per vector: at D = 2**20 a dense H would need 8 TiB."""
    col = np.zeros((1, 1 << 20, 1))
    col[0, 0, 0] = 1.0
    out = fwht(col, axis=1)
    np.testing.assert_allclose(out, 2.0**-10, rtol=1e-12)


# ---------------------------------------------------------------------------
# OPRF feature maps
# ---------------------------------------------------------------------------


def test_oprf_features_and_log_estimate():
    g = np.random.default_rng(0)
    X, Y = 0.3 * g.standard_normal((5, 4)), 0.3 * g.standard_normal((3, 4))
    W = draw_projections(64, 4, seed=1)
    for a in (-0.2, -0.05, 0.1):
        k = estimate(X, Y, W, "oprf", A=a)
        np.testing.assert_allclose(feature_map(X, W, "oprf", A=a) @ feature_map(Y, W, "oprf", A=a).T,
                                   k, rtol=1e-13)
        sign, logabs = log_estimate(X, Y, W, "oprf", A=a)
        assert np.all(sign == 1.0)
        np.testing.assert_allclose(np.exp(logabs), k, rtol=1e-12)
    np.testing.assert_allclose(estimate(X, Y, W, "oprf", A=0.0), estimate(X, Y, W, "positive"),
                               rtol=1e-14)
    assert feature_map(X, W, "oprf", A=-0.1).shape == (5, 64)
    assert rfkernels.feature_dimension("oprf", 4, m=64) == 64
    np.testing.assert_allclose(feature_map(X, W, "oprf", A=-0.1, sum_normalize=True).sum(axis=1), 1.0)
    # log domain far beyond the linear one: a log-sum-exp of the exponents
    from scipy.special import logsumexp

    big = np.full(4, 20.0)
    a = -0.1
    expo = (np.sqrt(1 - 4 * a) * (W @ (2 * big)) + 2 * a * np.sum(W * W, axis=1)
            + 0.5 * 4 * np.log1p(-4 * a) - big @ big)
    got = log_estimate(big, big, W, "oprf", A=a)[1]
    assert got == pytest.approx(logsumexp(expo) - np.log(64), rel=1e-13)


def test_oprf_estimate_is_unbiased_for_any_a():
    x, y = theory.pair(4, 0.5, 0.4, 1.0)
    sm = float(np.exp(x @ y))
    for a in (-0.3, 0.05):
        est = _block_estimates(x, y, 4, 4, 30_000, "iid", "oprf", seed=21, A=a)
        assert abs(_z(est, sm)) < 4, a
        assert abs(_z(est, 1.05 * sm)) > 8


def test_oprf_auto_a_identity():
    g = np.random.default_rng(1)
    X, Y = g.standard_normal((7, 3)) + 0.3, 0.5 * g.standard_normal((4, 3))
    rho = np.mean([[np.sum((x + y) ** 2) for y in Y] for x in X]) / 3
    want = float(theory.oprf_optimal_a(np.sqrt(rho * 3) * np.eye(3)[0], np.zeros(3)))
    assert oprf_auto_a(X, Y) == pytest.approx(want, rel=1e-13)
    assert oprf_auto_a(X) == pytest.approx(oprf_auto_a(X, X), rel=1e-15)
    W = draw_projections(8, 3, seed=0)
    np.testing.assert_allclose(estimate(X, Y, W, "oprf", A="auto"),
                               estimate(X, Y, W, "oprf", A=oprf_auto_a(X, Y)), rtol=1e-15)
    np.testing.assert_allclose(feature_map(X, W, "oprf", A="auto"),
                               feature_map(X, W, "oprf", A=oprf_auto_a(X)), rtol=1e-15)


def test_oprf_a_is_checked():
    X, W = np.ones((2, 3)), np.ones((4, 3))
    with pytest.raises(ValueError, match="needs its parameter A"):
        feature_map(X, W, "oprf")
    with pytest.raises(ValueError, match="needs its parameter A"):
        estimate(X, X, W, "oprf")
    with pytest.raises(ValueError, match="< 1/8"):
        feature_map(X, W, "oprf", A=0.125)
    with pytest.raises(ValueError, match="'auto'"):
        feature_map(X, W, "oprf", A="best")
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        feature_map(X, W, "positive", A=-0.1)
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        log_estimate(X, X, W, "trig", A=-0.1)
    with pytest.raises(ValueError, match="one number"):
        feature_map(X, W, "oprf", A=[-0.1, -0.2])
    with pytest.raises(ValueError, match="needs its parameter A"):  # before any work
        rfkernels.favor_attention(X, X, X, W, "oprf")


# ---------------------------------------------------------------------------
# Theory wiring
# ---------------------------------------------------------------------------


def test_theory_wiring():
    x = np.array([0.3, -0.2, 0.1, 0.25])
    y = np.array([0.1, 0.3, -0.2, 0.15])
    got = [float(theory.exact_mse(x, y, 4, "positive", ensemble=e))
           for e in ("iid", "orthogonal", "simplex")]
    assert [round(v, 4) for v in got] == [0.0987, 0.0923, 0.0261]  # MATH.md's example
    a_star = float(theory.oprf_optimal_a(x, y))
    assert a_star < 0
    best = theory.exact_mse(x, y, 4, "oprf")
    assert best == theory.exact_mse(x, y, 4, "oprf", A=a_star)
    for a in (a_star - 0.05, a_star + 0.05):
        assert theory.exact_mse(x, y, 4, "oprf", A=a) > best
    np.testing.assert_allclose(theory.exact_mse(x, y, 4, "oprf", ensemble="orthogonal", A=0.0),
                               theory.exact_mse(x, y, 4, "positive", ensemble="orthogonal"),
                               rtol=1e-13)
    np.testing.assert_allclose(theory.exact_mse(x, y, 4, "oprf", A=-0.1, log=True),
                               np.log(theory.exact_mse(x, y, 4, "oprf", A=-0.1)), rtol=1e-14)
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        theory.exact_mse(x, y, 4, "positive", A=-0.1)
    with pytest.raises(ValueError, match="beyond the paper"):
        theory.lemma2_mse(x, y, 4, "oprf")
    with pytest.raises(ValueError, match="no closed form for the sorf ensemble"):
        theory.exact_mse(x, y, 4, "positive", ensemble="sorf")
    with pytest.raises(ValueError, match="norms='fixed'"):
        theory.exact_mse(x, y, 4, "positive", ensemble="simplex", norms="fixed")


# (d, m, ensemble, kind, |x|, |y|, angle): tame cases, |x + y|^2 below about 1
THEORY_CASES = [
    (4, 4, "iid", "oprf", 0.5, 0.45, 1.2),
    (5, 7, "orthogonal", "oprf", 0.5, 0.4, 1.0),
    (4, 4, "simplex", "positive", 0.5, 0.45, 1.2),
    (3, 5, "simplex", "hyperbolic", 0.45, 0.4, 0.9),
    (6, 6, "simplex", "trig", 0.5, 0.4, 1.8),
    (4, 6, "simplex", "oprf", 0.5, 0.45, 1.2),
]


@pytest.mark.parametrize("d, m, ensemble, kind, nx, ny, angle", THEORY_CASES)
def test_exact_mse_against_literal_monte_carlo(d, m, ensemble, kind, nx, ny, angle):
    """draw_projections + feature_map (the code users run) against the exact MSE."""
    trials = 40_000
    x, y = theory.pair(d, nx, ny, angle)
    sm = float(np.exp(x @ y))
    a = float(theory.oprf_optimal_a(x, y)) if kind == "oprf" else None
    err2 = (_block_estimates(x, y, d, m, trials, ensemble, kind, seed=np.random.SeedSequence([d, m, len(kind)]), A=a) - sm) ** 2
    exact = float(theory.exact_mse(x, y, m, kind, ensemble=ensemble))
    z = _z(err2, exact)
    se = err2.std(ddof=1) / np.sqrt(trials)
    print(f"{kind} {ensemble} d={d} m={m}: MC {err2.mean():.5g} exact {exact:.5g} z={z:+.2f}")
    assert abs(z) < 4
    # the nearest wrong answer (FAVOR+'s A = 0, or the orthogonal coupling) is far away
    if kind == "oprf":
        other = float(theory.exact_mse(x, y, m, "oprf", ensemble=ensemble, A=0.0))
    else:
        other = float(theory.exact_mse(x, y, m, kind, ensemble="orthogonal"))
    assert abs(other - exact) > 6 * se


# ---------------------------------------------------------------------------
# Monte Carlo API and comparisons
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind, ensemble", [("oprf", "sorf"), ("positive", "sorf")])
def test_reduced_method_refuses_clearly(kind, ensemble):
    x, y = theory.pair(4, 0.5, 0.5, 1.0)
    with pytest.raises(ValueError, match="no reduced sampler yet.*method='literal'"):
        monte_carlo_mse(x, y, 4, kind, ensemble=ensemble, trials=100)
    with pytest.raises(ValueError, match="no reduced sampler yet.*method='literal'"):
        compare((4, 0.5, 0.5, 1.0), kinds=kind, ensembles=ensemble, trials=100)


def test_literal_monte_carlo_new_kinds_and_ensembles():
    x, y = theory.pair(4, 0.5, 0.45, 1.2)
    r = monte_carlo_mse(x, y, 4, "oprf", ensemble="simplex", trials=4000, seed=1, method="literal")
    assert r.mse_exact == pytest.approx(float(theory.exact_mse(x, y, 4, "oprf", ensemble="simplex")))
    assert abs(r.z) < 4
    r2 = monte_carlo_mse(x, y, 4, "oprf", trials=4000, seed=1, method="literal", A=-0.2)
    assert r2.mse_exact == pytest.approx(float(theory.exact_mse(x, y, 4, "oprf", A=-0.2)))
    est = trial_estimates(x, y, 4, "oprf", trials=3, seed=5, method="literal", A=-0.2)
    w = draw_projections(4, 4, seed=np.random.default_rng(np.random.SeedSequence(5)))
    assert est[0] == pytest.approx(float(estimate(x, y, w, "oprf", A=-0.2)), rel=1e-12)
    sorf = monte_carlo_mse(x, y, 4, "positive", ensemble="sorf", trials=2000, method="literal")
    assert sorf.mse_exact is None and sorf.z is None and sorf.mse > 0
    fixed = monte_carlo_mse(x, y, 4, "positive", ensemble="simplex", norms="fixed", trials=2000,
                            method="literal")
    assert fixed.mse_exact is None
    with pytest.raises(ValueError, match="kind='oprf' or kind='derf' only"):
        monte_carlo_mse(x, y, 4, "positive", trials=100, method="literal", A=-0.1)
    with pytest.raises(ValueError, match="d >= 2"):
        monte_carlo_mse([0.5], [0.3], 2, "positive", ensemble="simplex", trials=100, method="literal")


def test_batch_gives_each_pair_its_own_a_star():
    X = np.array([[0.5, 0.0, 0.0], [0.2, 0.1, 0.0]])
    Y = np.array([[0.4, 0.1, 0.0], [0.0, 0.3, 0.2]])
    batch = monte_carlo_mse(X, Y, 3, "oprf", trials=500, seed=2, method="literal")
    for k in range(2):
        assert batch[k].mse_exact == pytest.approx(float(theory.exact_mse(X[k], Y[k], 3, "oprf")))
        one = monte_carlo_mse(X[k], Y[k], 3, "oprf", trials=500, seed=2, method="literal")
        assert one.mse == pytest.approx(batch[k].mse, rel=1e-12)


def test_compare_takes_new_kind_and_ensembles_with_literal():
    rows = compare((4, 0.5, 0.45, 1.2), kinds=("oprf", "positive"), ensembles=("simplex", "sorf"),
                   m=4, trials=3000, seed=0, method="literal")
    by = {(r["kind"], r["ensemble"]): r for r in rows}
    assert np.isnan(by["positive", "sorf"]["mse_exact"]) and by["positive", "sorf"]["trials"] == 3000
    assert np.isnan(by["oprf", "simplex"]["mse_lemma2"])  # Lemma 2 is the paper's statement
    assert by["positive", "simplex"]["mse_lemma2"] > 0
    for key in (("oprf", "simplex"), ("positive", "simplex")):
        assert abs(by[key]["z"]) < 4


def test_capacity_keeps_the_paper_kinds():
    from rfkernels.analysis.capacity import parse_map

    assert parse_map("positive:8:simplex").ensemble == "simplex"
    with pytest.raises(ValueError, match="unknown feature map 'oprf:8'"):
        parse_map("oprf:8")
