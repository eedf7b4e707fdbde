"""norms='antithetic' (issue 25): the norm law, its samplers and its exact MSE.

Rows (2k, 2k+1) of each orthogonal or simplex block share one normal z:
R1^2 = Q(z), R2^2 = Q(-z) (the chi-square quantile table of
rfkernels.numerics.chi_quantile); the theory is the chi-norm MSE plus the
coupled pairs' change (rfkernels.numerics.antithetic_mse). Statistical checks
use fixed seeds and |z| < 4 on tame cases (trig features, small |x + y|^2).
"""

import math

import numpy as np
import pytest
from scipy import special, stats

from rfkernels import draw_projections, rng, theory
from rfkernels.analysis import monte_carlo_mse
from rfkernels.engine import estimate_chunks, squared_norms
from rfkernels.estimators import estimator
from rfkernels.numerics import antithetic, antithetic_mse, chi_quantile, hypergeometric


def _pair(d, s, t):
    """x, y in R^d with |x + y|^2 = s and |x - y|^2 = t."""
    u = np.zeros(d)
    v = np.zeros(d)
    u[0], v[1 % d] = math.sqrt(s), math.sqrt(t)
    return (u + v) / 2, (u - v) / 2


# -- the law -----------------------------------------------------------------


@pytest.mark.parametrize("ensemble", ["iid", "sorf", "orthogonal-unfixed-qr", "orthogonal-xformers"])
def test_ensembles_without_blocks_refuse_it(ensemble):
    with pytest.raises(ValueError, match=f"norms='antithetic' needs ensemble in .*got ensemble='{ensemble}'"):
        estimator("positive", ensemble=ensemble, norms="antithetic")
    with pytest.raises(ValueError, match="norms='antithetic' needs ensemble"):
        draw_projections(4, 3, ensemble=ensemble, norms="antithetic", seed=0)


def test_capabilities():
    est = estimator("positive", ensemble="orthogonal", norms="antithetic", m=4, d=4)
    assert est.supports.exact_mse and est.supports.reduced
    assert "does not take norms='antithetic'" in est.supports.tilted.reason
    assert not est.supports.theorem2 and "norms are 'antithetic'" in est.supports.theorem2.reason
    assert "Monte Carlo only" in estimator("oprf", ensemble="simplex", norms="antithetic").supports.exact_mse.reason
    assert "Monte Carlo only" in estimator("saderf", ensemble="orthogonal", norms="antithetic").supports.exact_mse.reason


def test_tilted_proposal_refused_and_auto_stays_plain():
    x, y = _pair(4, 1.0, 0.5)
    with pytest.raises(ValueError, match="does not take norms='antithetic'"):
        monte_carlo_mse(x, y, 4, "positive", ensemble="orthogonal", norms="antithetic", trials=100,
                        proposal="tilted")
    r = monte_carlo_mse(x, y, 4, "positive", ensemble="orthogonal", norms="antithetic", trials=100)
    assert r.proposal == "plain" and "antithetic" in r.proposal_note


def test_pairing_of_rows():
    units, unit, sign = chi_quantile.pairing(7, 3)  # blocks (0 1 2) (3 4 5) (6)
    assert units == 5
    assert unit.tolist() == [0, 0, 1, 2, 2, 3, 4]
    assert sign.tolist() == [1, -1, 1, 1, -1, 1, 1]


@pytest.mark.parametrize("ensemble", ["orthogonal", "simplex"])
def test_reduced_norms_are_antithetic_with_chi_marginals(ensemble):
    m, d, n = 7, 3, 40_000
    q = squared_norms(rng.key_from_seed(11), np.arange(n, dtype=np.uint64), m, d, ensemble=ensemble,
                      norms="antithetic")
    F = stats.chi2(d).cdf(q)
    for a, b in ((0, 1), (3, 4)):  # coupled: F(R1) + F(R2) = 1 up to the table's accuracy
        assert np.max(np.abs(F[a] + F[b] - 1.0)) < 1e-9
    for i in range(m):  # every row marginally chi(d)
        assert stats.kstest(q[i], stats.chi2(d).cdf).pvalue > 1e-4, i
    for a, b in ((2, 6), (0, 3), (2, 5)):  # lone rows and rows of different blocks: independent
        r = np.corrcoef(q[a], q[b])[0, 1]
        assert abs(r) < 4.0 / math.sqrt(n), (a, b, r)


@pytest.mark.parametrize("ensemble", ["orthogonal", "simplex"])
def test_literal_norms_are_antithetic_with_chi_marginals(ensemble):
    m, d = 5, 4
    gen = np.random.default_rng(3)
    lengths = np.array([np.sum(draw_projections(m, d, ensemble=ensemble, norms="antithetic", seed=gen) ** 2,
                               axis=1) for _ in range(4000)]).T
    F = stats.chi2(d).cdf(lengths)
    assert np.max(np.abs(F[0] + F[1] - 1.0)) < 1e-9 and np.max(np.abs(F[2] + F[3] - 1.0)) < 1e-9
    for i in range(m):
        assert stats.kstest(lengths[i], stats.chi2(d).cdf).pvalue > 1e-4, i


def test_table_accuracy():
    z = np.concatenate([np.random.default_rng(0).uniform(-8.6, 8.6, 100_000), np.linspace(-8.6, 8.6, 20_001)])
    for d in (1, 2, 3, 16, 64, 1024):
        table = chi_quantile.quantile_table(d)
        got = np.exp(chi_quantile.log_quantile(z, table))
        ref = 2.0 * np.where(z < 0, special.gammaincinv(d / 2, special.ndtr(z)),
                             special.gammainccinv(d / 2, special.ndtr(-z)))
        assert np.max(np.abs(got / ref - 1.0)) < chi_quantile.REL_ERROR, d


def test_engine_backends_give_the_same_bits():
    key = rng.key_from_seed(5)
    for ensemble in ("orthogonal", "simplex"):
        for kind, A in (("positive", None), ("trig", None), ("oprf", -0.05)):
            runs = [np.concatenate([np.array(c[1]) for c in estimate_chunks(
                key, 0.9, 7, 4, kind, ensemble=ensemble, norms="antithetic", trials=2000, backend=b, A=A)])
                for b in ("numpy", "numba")]
            np.testing.assert_array_equal(runs[0], runs[1])


# -- the exact MSE -------------------------------------------------------------


def test_coupled_pairs():
    # blocks of d = 3: m = 7 -> 3 + 3 + 1 rows: 2 + 2 + 0 ordered coupled pairs
    assert antithetic_mse.coupled_pairs(7, 3) == 4.0
    assert antithetic_mse.coupled_pairs(4, 4) == 4.0
    assert antithetic_mse.coupled_pairs(1, 4) == 0.0


@pytest.mark.parametrize("kind", ["positive", "hyperbolic", "trig"])
def test_composition_against_pair_terms(kind):
    """MSE_anti = MSE_chi + P_c/m^2 Lambda^{+-2} (pair_anti - pair_ind), orthogonal blocks."""
    d, m = 5, 7
    x, y = _pair(d, 0.8, 0.6)
    got = theory.exact_mse(x, y, m, kind, ensemble="orthogonal", norms="antithetic")
    base = theory.exact_mse(x, y, m, kind, ensemble="orthogonal", norms="chi")
    half_sq = (x @ x + y @ y) / 2
    if kind == "trig":
        q, pref2, sign = 0.6, 2 * half_sq, -1
        ind = hypergeometric.chi_diff_neg(q / 2, d)
    else:
        q, pref2, sign = 0.8, -2 * half_sq, 1
        ind = -math.exp(hypergeometric.log_neg_chi_diff(q / 2, d))
    anti = antithetic.pair_difference(q, d, sign)
    pc = 2 * (5 // 2) + 2 * (2 // 2)
    assert got == pytest.approx(base + pc / m**2 * math.exp(pref2) * (anti - ind), rel=1e-12)


@pytest.mark.parametrize("kind, ensemble, s, t, m, d", [
    ("trig", "orthogonal", 1.5, 2.0, 5, 3),
    ("trig", "orthogonal", 0.7, 4.0, 16, 16),
    ("trig", "simplex", 1.5, 2.0, 5, 3),
    ("trig", "simplex", 0.3, 3.0, 9, 8),
    ("trig", "orthogonal", 1.0, 20.0, 4, 2),  # where antithetic norms raise the MSE (by 17%)
    ("trig", "simplex", 1.0, 40.0, 6, 3),
    ("positive", "orthogonal", 0.4, 1.0, 4, 4),
    ("positive", "simplex", 0.4, 1.0, 5, 4),
    ("hyperbolic", "orthogonal", 0.4, 1.0, 6, 4),
    ("hyperbolic", "simplex", 0.4, 1.0, 3, 3),
    ("oprf", "orthogonal", 0.5, 1.0, 5, 4),
])
def test_exact_mse_against_monte_carlo(kind, ensemble, s, t, m, d):
    x, y = _pair(d, s, t)
    r = monte_carlo_mse(x, y, m, kind, ensemble=ensemble, norms="antithetic", trials=200_000, seed=2,
                        backend="numba", proposal="plain")
    exact = theory.exact_mse(x, y, m, kind, ensemble=ensemble, norms="antithetic")
    assert abs(r.mse - exact) < 4 * r.stderr, (r.mse, r.stderr, exact)


def test_gain_and_its_sign():
    # orthogonal positive and hyperbolic: antithetic norms lower the MSE (convex pair term)
    for kind in ("positive", "hyperbolic"):
        x, y = _pair(16, 2.0, 1.0)
        assert (theory.exact_mse(x, y, 16, kind, ensemble="orthogonal", norms="antithetic")
                < theory.exact_mse(x, y, 16, kind, ensemble="orthogonal", norms="chi"))
    # simplex positive: the coupling lowers E[R1 R2], which the simplex's negative cosine weighs
    # against the variance of S: antithetic norms can raise the MSE there (measured, not assumed)
    x, y = _pair(4, 1.22, 0.5)
    anti = theory.exact_mse(x, y, 3, "positive", ensemble="simplex", norms="antithetic")
    chi = theory.exact_mse(x, y, 3, "positive", ensemble="simplex", norms="chi")
    assert anti > chi


def test_trig_gain_changes_sign():
    # d = 2 (benchmarks/antithetic_trig_sign.py): the pair term rises on |z|^2 in [8.27, 22.8]
    ratios = []
    for t in (4.0, 20.0):
        x, y = _pair(2, 1.0, t)
        ratios.append(theory.exact_mse(x, y, 4, "trig", ensemble="orthogonal", norms="antithetic")
                      / theory.exact_mse(x, y, 4, "trig", ensemble="orthogonal", norms="chi"))
    assert ratios[0] < 0.5 and ratios[1] > 1.1, ratios


def test_refuses_beyond_the_quadrature():
    x, y = _pair(4, 900.0, 1.0)
    with pytest.raises(ValueError, match=r"\|x \+ y\|\^2 <= 800"):
        theory.exact_mse(x, y, 4, "positive", ensemble="orthogonal", norms="antithetic")


def test_large_s_is_finite_and_at_most_chi():
    for s, strict in ((10.0, True), (300.0, False)):
        x, y = _pair(16, s, 1.0)
        anti = theory.exact_mse(x, y, 16, "positive", ensemble="orthogonal", norms="antithetic", log=True)
        chi = theory.exact_mse(x, y, 16, "positive", ensemble="orthogonal", norms="chi", log=True)
        # at s = 300 the coupled pairs change the MSE by far less than its rounding (module notes)
        assert np.isfinite(anti) and (anti < chi if strict else anti == chi), (s, anti, chi)


@pytest.mark.parametrize("ensemble", ["orthogonal", "simplex"])
def test_peak_bytes_bounds_the_antithetic_sampler(ensemble):
    """The memory estimate (peak_bytes) covers the quantile lookups' temporaries (tracemalloc)."""
    import tracemalloc

    from rfkernels.analysis import monte_carlo_mse
    from rfkernels.analysis.monte_carlo import peak_bytes

    X, Y = np.full((2, 8), 0.1), np.full((2, 8), 0.05)
    m, chunk = 2000, 128
    for kind in ("trig", "hyperbolic"):
        tracemalloc.start()
        try:
            monte_carlo_mse(X, Y, m, kind, ensemble=ensemble, norms="antithetic", trials=chunk,
                                  chunk=chunk, backend="numpy", seed=0, proposal="plain")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak <= peak_bytes(m, 8, 2, chunk, method="reduced", ensemble=ensemble) + 2**21, kind


def test_oprf_at_u_zero_with_a_given_a_against_monte_carlo():
    """x = -y: (1 - 4A)^d E[e^{2AS}] != 1 with coupled norms, so the pair term changes at q = 0 too."""
    x = np.array([0.5, 0.0, 0.0, 0.0])
    exact = theory.exact_mse(x, -x, 4, "oprf", ensemble="orthogonal", norms="antithetic", A=-0.1)
    chi = theory.exact_mse(x, -x, 4, "oprf", ensemble="orthogonal", norms="chi", A=-0.1)
    assert exact < 1e-3 * chi
    r = monte_carlo_mse(x, -x, 4, "oprf", ensemble="orthogonal", norms="antithetic", A=-0.1,
                        trials=200_000, seed=4, backend="numba", proposal="plain")
    assert abs(r.mse - exact) < 4 * r.stderr, (r.mse, r.stderr, exact)


def test_oprf_refuses_where_its_logs_cannot_resolve_the_change():
    x, y = theory.pair(8, 0.5, 0.5, np.pi - 1e-7)  # |x + y|^2 = 2.5e-15
    with pytest.raises(FloatingPointError, match="beyond float64's resolution at"):
        theory.exact_mse(x, y, 8, "oprf", ensemble="orthogonal", norms="antithetic")
    # the paper's kinds are summed without cancellation there
    assert np.isfinite(theory.exact_mse(x, y, 8, "positive", ensemble="orthogonal", norms="antithetic"))


def test_oprf_array_a_broadcasts_as_for_chi_norms():
    rng_ = np.random.default_rng(0)
    X, Y = rng_.normal(size=(2, 5, 4)) * 0.3
    A = np.array([[-0.05], [0.02]])
    got = theory.exact_mse(X, Y, 4, "oprf", ensemble="orthogonal", norms="antithetic", A=A)
    assert got.shape == (2, 5)
    one = theory.exact_mse(X[3], Y[3], 4, "oprf", ensemble="orthogonal", norms="antithetic", A=0.02)
    assert got[1, 3] == pytest.approx(one, rel=1e-13)
