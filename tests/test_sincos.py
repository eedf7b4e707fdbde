"""The vectorised sine and cosine of the trigonometric features (rfkernels.numerics.sincos)."""

import math

import mpmath
import numpy as np
import pytest

from rfkernels.numerics.sincos import LIMIT, sin_cos


def _arguments():
    rng = np.random.default_rng(0)
    quarter = np.arange(-3000, 3000) * (math.pi / 4)
    half = np.arange(1, 2000) * (math.pi / 2)
    return np.concatenate([
        rng.standard_normal(3000) * 10, rng.uniform(-LIMIT, LIMIT, 3000),
        rng.uniform(-1, 1, 500) * 1e-9, quarter, half, np.nextafter(half, 0.0),
        np.array([0.0, -0.0, 5e-324, LIMIT, -LIMIT]),
    ])


def _ulps(got, exact):
    ref = float(exact)
    return float(abs(mpmath.mpf(float(got)) - exact) / (math.ulp(ref) if ref else 5e-324))


def test_within_one_ulp_of_200_bit_mpmath():
    x = _arguments()
    out = sin_cos(x[None, :])[0]
    mpmath.mp.prec = 200
    worst = 0.0
    for xi, s, c in zip(x, out[:x.size], out[x.size:]):
        arg = mpmath.mpf(float(xi))
        worst = max(worst, _ulps(s, mpmath.sin(arg)), _ulps(c, mpmath.cos(arg)))
    assert worst < 1.0, worst


def test_sines_then_cosines_per_row_as_numpy_within_an_ulp():
    p = np.random.default_rng(1).standard_normal((7, 5)) * 30
    out = sin_cos(p)
    assert out.shape == (7, 10)
    np.testing.assert_allclose(out[:, :5], np.sin(p), rtol=0, atol=2.3e-16)
    np.testing.assert_allclose(out[:, 5:], np.cos(p), rtol=0, atol=2.3e-16)


def test_beyond_the_range_and_non_finite_arguments_use_the_c_library():
    p = np.array([[LIMIT * 3, -1e300, np.inf, np.nan, 1.0]])
    out = sin_cos(p)
    np.testing.assert_array_equal(out[0, :3], [math.sin(LIMIT * 3), math.sin(-1e300), np.nan])
    assert np.isnan(out[0, 3]) and np.isnan(out[0, 8])
    assert out[0, 4] == pytest.approx(math.sin(1.0), abs=2e-16)


def test_a_non_contiguous_integer_matrix_is_taken():
    p = np.arange(12).reshape(3, 4)[:, ::2]
    np.testing.assert_allclose(sin_cos(p), np.concatenate([np.sin(p), np.cos(p)], axis=1),
                               rtol=0, atol=2.3e-16)
