"""Tests of the fixed-operation elementary functions (rfkernels.numerics.elementary).

The vectorised (NumPy) and scalar Numba versions must be bit-identical, and
both accurate to a couple of ulp against 30-digit mpmath.
"""

import platform

import mpmath as mp
import numba
import numpy as np
import pytest

from rfkernels.numerics import elementary as el
from rfkernels.numerics import elementary_numba as eln
from rfkernels.backends import cupy_available


@numba.njit(error_model="numpy")
def _log_loop(x, out):
    for i in range(x.size):
        out[i] = eln.log(x[i])


@numba.njit(error_model="numpy")
def _exp_loop(x, out):
    for i in range(x.size):
        out[i] = eln.exp(x[i])


@numba.njit(error_model="numpy")
def _sincos_loop(u, s, c):
    for i in range(u.size):
        s[i], c[i] = eln.sincos_2pi(u[i])


def _uniforms(n, seed=0):
    rng = np.random.default_rng(seed)
    u = (rng.integers(0, 2**52, n).astype(np.float64) + 0.5) * 2.0**-52
    edges = [2.0**-53, 1 - 2.0**-53, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875, 1.0, 0.0]
    return np.concatenate([edges, u, (np.arange(4096) + 0.5) * 2.0**-12])


def _ulps(got, want_mp):
    want = float(want_mp)
    if want == 0.0:
        return abs(got) / np.spacing(0.0)
    return abs(mp.mpf(got) - want_mp) / np.spacing(abs(want))


def test_numpy_equals_numba_bit_for_bit():
    u = _uniforms(100_000)
    x = np.concatenate([np.random.default_rng(1).uniform(-760, 720, 100_000),
                        [-746.0, -745.2, -745.1, -708.5, 0.0, -0.0, 1e-300, 709.78, 709.79, 800.0]])
    out, out2 = np.empty_like(u), np.empty_like(u)
    pos = u[u > 0]
    res = np.empty_like(pos)
    _log_loop(pos, res)
    np.testing.assert_array_equal(res, el.log(pos))
    res = np.empty_like(x)
    _exp_loop(x, res)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(res, el.exp(x))
    _sincos_loop(u, out, out2)
    s, c = el.sincos_2pi(u)
    np.testing.assert_array_equal(out, s)
    np.testing.assert_array_equal(out2, c)


@mp.workdps(30)
def test_log_accuracy():
    u = _uniforms(3000, seed=2)
    u = np.concatenate([u[u > 0], [1e-300, 3.0, 1e300, np.sqrt(0.5), np.sqrt(2.0)]])
    got = el.log(u)
    worst = max(_ulps(g, mp.log(mp.mpf(v))) for g, v in zip(got, u) if v != 1.0)
    assert worst < 1.0
    assert el.log(1.0) == 0.0


@mp.workdps(30)
def test_exp_accuracy_and_range():
    x = np.concatenate([np.random.default_rng(3).uniform(-700, 700, 3000),
                        np.random.default_rng(4).normal(0, 2, 1000), [0.0, 1e-20, -1e-20]])
    got = el.exp(x)
    assert max(_ulps(g, mp.exp(mp.mpf(v))) for g, v in zip(got, x)) < 1.0
    # subnormal results rounded once; clamped ends give 0 and inf (no NaN)
    assert el.exp(-745.1) == 5e-324
    assert el.exp(-745.2) == 0.0 and el.exp(-1e5) == 0.0
    assert el.exp(709.78) == pytest.approx(np.exp(709.78), rel=1e-15)
    assert el.exp(709.79) == np.inf and el.exp(1e5) == np.inf


@mp.workdps(60)  # sin(2 pi u) near u = 1 loses ~16 digits to cancellation in mpmath too
def test_sincos_accuracy_and_exact_quadrants():
    u = _uniforms(2000, seed=5)
    s, c = el.sincos_2pi(u)
    ws = max(_ulps(g, mp.sin(2 * mp.pi * mp.mpf(v))) for g, v in zip(s, u) if abs(g) > 1e-300)
    wc = max(_ulps(g, mp.cos(2 * mp.pi * mp.mpf(v))) for g, v in zip(c, u) if abs(g) > 1e-300)
    assert ws < 2.0 and wc < 2.0
    # the reduction is exact: quarter turns give exact zeros and ones
    q_s, q_c = el.sincos_2pi(np.array([0.0, 0.25, 0.5, 0.75, 1.0]))
    assert q_s.tolist() == [0.0, 1.0, 0.0, -1.0, 0.0]
    assert q_c.tolist() == [1.0, 0.0, -1.0, 0.0, 1.0]
    np.testing.assert_allclose(s * s + c * c, 1.0, rtol=4e-16)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 assembly")
def test_numba_loops_vectorise():
    # the point of the Numba versions: inlined, no library calls, packed (SIMD)
    # arithmetic; "divpd" is a packed division, a scalar loop would use "divsd"
    for loop, args in ((_log_loop, 1), (_exp_loop, 1), (_sincos_loop, 2)):
        x = np.linspace(0.1, 0.9, 64)
        loop(x, *[np.empty_like(x) for _ in range(args)])
        asm = loop.inspect_asm(loop.signatures[0])
        assert "divpd" in asm or "mulpd" in asm, loop.__name__


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
def test_cupy_equals_numpy():
    import cupy

    u = _uniforms(50_000)
    x = np.random.default_rng(1).uniform(-760, 720, 50_000)
    pos = u[u > 0]
    np.testing.assert_array_equal(el.log(cupy.asarray(pos), cupy).get(), el.log(pos))
    np.testing.assert_array_equal(el.exp(cupy.asarray(x), cupy).get(), el.exp(x))
    for got, want in zip(el.sincos_2pi(cupy.asarray(u), cupy), el.sincos_2pi(u)):
        np.testing.assert_array_equal(got.get(), want)
