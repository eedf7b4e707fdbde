"""The reduced Monte Carlo samplers of kind 'oprf' and ensemble 'simplex' (rfkernels.engine).

Exactness: NumPy == Numba bit for bit (trig to rounding), oprf with A = 0 ==
positive bit for bit. Laws: the simplex directions' and the squared norms'
moments. Statistics (fixed seeds, |z| < 4 from standard errors, tame
geometries as in tests/test_monte_carlo.py): the reduced MSE against the
exact theory and against the literal sampler. The simulated GPU kernel is
checked in tests/test_gpu_kernel.py.
"""

from math import lgamma

import numpy as np
import pytest
from rfkernels.analysis import monte_carlo_mse

from rfkernels import engine, rng, theory

KEY = rng.key_from_seed(3)
# d = 8, |x| = |y| = 0.5 at a right angle: |x + y|^2 = |x - y|^2 = 0.5 (tame tails);
# m = 12: one full block and one partial block of 4.
D, M = 8, 12
X, Y = theory.pair(D, 0.5, 0.5, np.pi / 2)


def _estimates(backend, kind, ensemble, norms, m, d, A=None, trials=700, length=0.8):
    (_n, e, _), = engine.estimate_chunks(KEY, length, m, d, kind, ensemble=ensemble, norms=norms,
                                         trials=trials, pair=2, first=5, backend=backend, A=A)
    return np.array(e)


# a few of the new kernel paths (each compiles on its own on first use)
NUMBA_PATHS = [
    ("positive", "simplex", "chi", None),
    ("hyperbolic", "simplex", "fixed", None),
    ("trig", "simplex", "chi", None),
    ("oprf", "simplex", "chi", -0.15),
    ("oprf", "iid", "chi", -0.15),
    ("oprf", "iid", "fixed", 0.05),
    ("oprf", "orthogonal", "chi", -0.15),
]


@pytest.mark.parametrize("kind, ensemble, norms, A", NUMBA_PATHS,
                         ids=[f"{k}-{e}-{n}" for k, e, n, _ in NUMBA_PATHS])
def test_numpy_equals_numba_element_by_element(kind, ensemble, norms, A):
    # (12, 8): a full block and a partial one; (5, 3): odd d (a pair split across the end of h)
    for m, d in ((M, D), (5, 3)):
        a = _estimates("numpy", kind, ensemble, norms, m, d, A)
        b = _estimates("numba", kind, ensemble, norms, m, d, A)
        assert np.all(np.isfinite(a))
        if kind == "trig":
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)
        else:
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal", "simplex"])
@pytest.mark.parametrize("norms", ["chi", "fixed"])
def test_oprf_with_a_zero_is_positive_bit_for_bit(ensemble, norms):
    for m, d in ((M, D), (5, 3), (3, 2)):
        oprf = _estimates("numpy", "oprf", ensemble, norms, m, d, A=0.0, trials=300)
        positive = _estimates("numpy", "positive", ensemble, norms, m, d, trials=300)
        np.testing.assert_array_equal(oprf, positive)


def test_oprf_constants():
    slope, curvature, offset = engine.oprf_constants(-0.25, 2.0, 6)
    assert slope == pytest.approx(np.sqrt(2.0) * 2.0, rel=1e-15)
    assert curvature == -0.5 and offset == pytest.approx(3.0 * np.log(2.0), rel=1e-15)
    assert engine.oprf_constants(0.0, 0.7, 5) == (0.7, 0.0, 0.0)
    for bad in (0.125, 0.2, float("nan")):
        with pytest.raises(ValueError, match="A must be"):
            engine.oprf_constants(bad, 1.0, 4)


def test_simplex_scalar_projection_laws():
    d, n = 5, 40_000
    t = engine.trial_counters(0, n)
    p = engine.scalar_projections(KEY, t, d, d, ensemble="simplex", norms="fixed")
    # a full block of unit simplex directions sums to 0
    np.testing.assert_allclose(p.sum(axis=0), 0.0, atol=1e-12)
    assert np.abs(p).max() <= np.sqrt(d) * (1 + 1e-12)  # |w_i| = sqrt(d)
    # E p_i^2 = 1 (|w|^2 = d, direction uniform), E p_i p_j = -1/(d - 1)
    for v, want in ((p[1] ** 2, 1.0), (p[0] * p[3], -1.0 / (d - 1))):
        z = (v.mean() - want) / (v.std() / np.sqrt(n))
        assert abs(z) < 4, (want, v.mean())
    q = engine.scalar_projections(KEY, t, 7, d, ensemble="simplex", norms="chi")
    assert not np.array_equal(q[5], q[0])  # the second block is another rotation
    mean_r = np.sqrt(2.0) * np.exp(lgamma((d + 1) / 2) - lgamma(d / 2))  # E chi(d)
    for v, want in ((q[5] ** 2, 1.0), (q[5] * q[6], -mean_r**2 / (d * (d - 1))), (q[0] * q[5], 0.0)):
        z = (v.mean() - want) / (v.std() / np.sqrt(n))
        assert abs(z) < 4, (want, v.mean())


@pytest.mark.parametrize("ensemble", ["iid", "orthogonal", "simplex"])
def test_squared_norms_laws(ensemble):
    d, m, n = 6, 4, 40_000
    t = engine.trial_counters(0, n)
    p = engine.scalar_projections(KEY, t, m, d, ensemble=ensemble, norms="chi")
    w2 = engine.squared_norms(KEY, t, m, d, ensemble=ensemble, norms="chi")
    assert np.all(w2 >= p * p * (1 - 1e-12))  # |w|^2 >= (w.e)^2
    # |w|^2 ~ chi2(d): mean d, variance 2d; and E[p^2 |w|^2] = E[R^4] E[c^2] = d (d + 2) / d
    for v, want in ((w2[1], d), ((w2[1] - d) ** 2, 2 * d), (p[2] ** 2 * w2[2], d + 2.0)):
        z = (v.mean() - want) / (v.std() / np.sqrt(n))
        assert abs(z) < 4, (want, v.mean())
    fixed = engine.squared_norms(KEY, t[:3], m, d, ensemble=ensemble, norms="fixed")
    np.testing.assert_array_equal(fixed, np.full((m, 3), float(d)))


def _two_sample_z(a, b):
    return (a.mse - b.mse) / np.hypot(a.stderr, b.stderr)


THEORY_CASES = [
    ("positive", "simplex", None),
    ("hyperbolic", "simplex", None),
    ("trig", "simplex", None),
    ("oprf", "simplex", None),
    ("oprf", "iid", None),
    ("oprf", "orthogonal", None),
    ("oprf", "orthogonal", -0.3),
]


@pytest.mark.parametrize("kind, ensemble, A", THEORY_CASES,
                         ids=[f"{k}-{e}-{a}" for k, e, a in THEORY_CASES])
def test_reduced_agrees_with_theory_and_literal(kind, ensemble, A):
    red = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, trials=200_000, seed=11, backend="numba",
                          A=A)
    lit = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, trials=4_000, seed=12, method="literal",
                          A=A)
    a_star = theory.oprf_optimal_a(X, Y) if (kind == "oprf" and A is None) else A
    exact = theory.exact_mse(X, Y, M, kind, ensemble=ensemble, A=a_star)
    assert red.mse_exact == pytest.approx(exact, rel=1e-12)
    assert red.tail_ok  # (4000 literal trials are too few for a reliable tail index)
    assert abs(red.z) < 4 and abs(lit.z) < 4
    assert abs(_two_sample_z(red, lit)) < 4
    assert red.stderr < 0.01 * exact


def test_numpy_backend_simplex_beyond_one_block_matches_theory():
    # m = 19 > 3d at d = 6: three full simplex blocks and a partial one
    x, y = theory.pair(6, 0.6, 0.4, 2.0)
    for kind in ("positive", "oprf"):
        r = monte_carlo_mse(x, y, 19, kind, ensemble="simplex", trials=40_000, seed=5)
        assert r.tail_ok and abs(r.z) < 4, (kind, r.z)


def test_refusals():
    with pytest.raises(ValueError, match="no reduced sampler yet for ensemble='sorf'"):
        engine.check_reduced("positive", "sorf")
    with pytest.raises(ValueError, match="kind='oprf' needs its parameter A"):
        next(engine.estimate_chunks(KEY, 1.0, 4, 4, "oprf", trials=10))
    with pytest.raises(ValueError, match="A is the parameter of kind='oprf' or kind='derf' only"):
        next(engine.estimate_chunks(KEY, 1.0, 4, 4, "positive", trials=10, A=0.0))
    with pytest.raises(ValueError, match="A must be < 1/8"):  # refused as everywhere (oprf.check_a)
        next(engine.estimate_chunks(KEY, 1.0, 4, 4, "oprf", trials=10, A=0.2))
    with pytest.raises(ValueError, match="ensemble='simplex' needs d >= 2"):
        next(engine.estimate_chunks(KEY, 1.0, 4, 1, "positive", ensemble="simplex", trials=10))
    with pytest.raises(ValueError, match="ensemble='simplex' needs d >= 2"):
        engine.scalar_projections(KEY, engine.trial_counters(0, 3), 2, 1, ensemble="simplex")
