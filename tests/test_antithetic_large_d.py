"""Antithetic norms at large d: 0F1(; b; +-z) of large order b (the Debye branch of
rfkernels.numerics.antithetic) against mpmath, the exact MSE finite (and unchanged for d <= 256),
and a Monte Carlo check at d = 1024."""

import numpy as np
import pytest

from rfkernels import theory
from rfkernels.numerics import antithetic as at

mpmath = pytest.importorskip("mpmath")

ORDERS = (0.5, 1.0, 8.0, 128.0, 256.0, 512.0, 2048.0, 5e6)


def _grid(b):
    # z from 1 (the series covers z < 1) to 1e3 b: past the theory's z = S q / 4 <= 200 S ~ 400 d
    # at every b here but 5e6, and past the turning point nu^2/4 of J_{b-1} for b <= 2048
    return np.concatenate([np.geomspace(1e-6, 0.99, 6), np.geomspace(1.0, 1e3 * max(b, 1.0), 40)])


@pytest.mark.parametrize("b", ORDERS)
def test_log_0f1_positive_against_mpmath(b):
    mpmath.mp.dps = 50
    z = _grid(b)
    got = at._log_0f1_pos(b, z)
    ref = np.array([float(mpmath.log(mpmath.hyp0f1(b, mpmath.mpf(zi)))) for zi in z])
    assert np.all(np.isfinite(got))
    err = np.abs(got - ref)
    # b <= 128 is the unchanged Bessel form: its log cancels Gamma(b) (2e-13 absolute at b = 128,
    # z = 1, i.e. 1e-11 relative to log 0F1 ~ 1/128); the Debye branch keeps the log's relative error
    scale = np.abs(ref) if b > at._B_DEBYE else np.maximum(np.abs(ref), 1.0)
    assert np.max(err / scale) <= 1e-12


@pytest.mark.parametrize("b", [b for b in ORDERS if b > at._B_DEBYE])
def test_0f1_negative_against_mpmath(b):
    mpmath.mp.dps = 50
    z = _grid(b)
    z = z[z >= 1.0]
    got = at._0f1_neg(b, z)
    ref = [mpmath.hyp0f1(b, -mpmath.mpf(zi)) for zi in z]
    ref_f = np.array([float(r) for r in ref])
    nu = b - 1.0
    monotone = 4.0 * z < 0.9 * nu * nu  # below J's turning point: 0F1 > 0, no zeros
    assert np.all(np.isfinite(got))
    # where it is positive and representable: the log's relative error (the value's where log ~ 0)
    live = monotone & (ref_f > 1e-300)
    log_ref = np.array([float(mpmath.log(r)) for r, k in zip(ref, live) if k])
    log_got = np.log(got[live])
    assert np.all(np.abs(log_got - log_ref) <= 1e-12 * np.maximum(np.abs(log_ref), 1.0))
    # everywhere (oscillating beyond the turning point, underflowing): absolute
    assert np.max(np.abs(got - ref_f)) <= 1e-15


LARGE = (512, 1024, 4096, 10_000, 10_000_000)
CASES = [("trig", "orthogonal"), ("trig", "simplex"), ("positive", "orthogonal"),
         ("positive", "simplex"), ("oprf", "orthogonal"), ("offset", "orthogonal"),
         ("offset", "simplex"), ("hyperbolic", "orthogonal")]


@pytest.mark.parametrize("kind,ensemble", CASES)
def test_exact_mse_finite_at_large_d(kind, ensemble):
    for d in LARGE:
        x, y = theory.pair(d, np.array([0.5, 0.1]), np.array([0.5, 0.2]), np.array([1.0, 0.3]))
        anti = theory.exact_mse(x, y, 64, kind, ensemble=ensemble, norms="antithetic", log=True)
        chi = theory.exact_mse(x, y, 64, kind, ensemble=ensemble, norms="chi", log=True)
        assert np.all(np.isfinite(anti)), (kind, ensemble, d)
        # the coupling of 32 pairs among 64 * 63 changes the MSE by little (before the fix,
        # positive features at d = 1024 gave log MSE -5.84 against chi's -3.76, silently)
        assert np.all(np.abs(anti - chi) < 0.05), (kind, ensemble, d, anti, chi)


# log MSE at m = 8, 64, 300 from the code before the Debye branch (commit 1b394de): unchanged
BEFORE = {
    ("trig", "orthogonal", 256, 0.5, 0.5, 1.0): [-5.4701071704339626, -7.8023514930670395, -11.098568510038257],
    ("trig", "simplex", 256, 1.0, 0.7, 2.0): [-1.573984414201851, -3.825770949546279, -6.1481528472136615],
    ("positive", "orthogonal", 256, 0.1, 0.2, 0.3): [-4.4261003940354255, -6.514747375163197, -8.086578608338328],
    ("oprf", "orthogonal", 256, 0.5, 0.5, 1.0): [-1.6772841645580483, -3.8144046684988053, -5.54636126665453],
    ("offset", "orthogonal", 255, 2.0, 1.5, 0.5): [3.8002179926565236, 1.6615324240265865, -0.0743229136966458],
    ("hyperbolic", "simplex", 100, 1.0, 0.7, 2.0): [-3.5550717261601403, -6.402506897813652, -9.305234197300072],
    ("trig", "orthogonal", 16, 2.0, 1.5, 0.5): [1.944994223713119, -1.8321114968170902, -3.291545809924299],
}


@pytest.mark.parametrize("key", list(BEFORE))
def test_small_d_unchanged(key):
    kind, ensemble, d, nx, ny, angle = key
    x, y = theory.pair(d, nx, ny, angle)
    got = theory.exact_mse(x, y, np.array([8, 64, 300]), kind, ensemble=ensemble, norms="antithetic", log=True)
    assert got.tolist() == BEFORE[key]


def test_monte_carlo_trig_d1024():
    from rfkernels.analysis import monte_carlo_mse

    x, y = theory.pair(1024, 0.5, 0.5, 1.0)
    r = monte_carlo_mse(x, y, 64, "trig", ensemble="orthogonal", norms="antithetic",
                        trials=200_000, seed=1, backend="numba")
    assert r.tail_ok
    assert np.isfinite(r.mse_exact)
    assert abs(r.z) < 4.0
