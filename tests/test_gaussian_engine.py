"""Kind "offset" and kernel="gaussian" in the Monte Carlo engine.

Exactness: the offset estimate is trig's plus (1/m) sum_i cos(2 pi U_i), U_i
from STREAM_PHASE (uniform_pair at slot i // 2); NumPy, Numba and the CUDA
simulator give the same numbers (bit for bit where the platform's NumPy cos
is libm's, as for trig; to rounding always); trig's estimates are those of
the commit before the offset kind. Statistics (fixed seeds, |z| < 4 from
standard errors; trig and offset estimates are bounded, so every geometry is
tame; positive at |x' + y'|^2 = 0.5 as in tests/test_monte_carlo.py): the
Monte Carlo MSE of the Gaussian-kernel estimators against the exact theory,
reduced (NumPy, Numba) and literal. The simulator checks run in one
subprocess (NUMBA_ENABLE_CUDASIM=1) executing this file, as in
tests/test_gpu_kernel.py.
"""

import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from rfkernels import draw_phases, draw_projections, engine, feature_map, rng, theory
from rfkernels.engine import cpu as _mc_numba
from rfkernels.engine.streams import STREAM_PHASE

KEY = (7, 9)
BASE = (3 << 40) | 2**33  # pair 3, trials from 2**33: high counter words in use
LENGTH = 0.9
#: (m, d): m odd and even, partial blocks, m < d, one projection, d = 1 (not simplex)
SHAPES = [(5, 3), (4, 3), (7, 2), (6, 4), (1, 3), (3, 1)]
ENSEMBLES = {"iid": 0, "orthogonal": 1, "simplex": 2}
CASES = [(e, n) for e in ENSEMBLES for n in ("chi", "fixed")]
TRIALS = 200

needs_numba_cuda = pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None,
                                      reason="needs numba-cuda (the CUDA target of Numba)")


def _numpy_cos_is_libm():
    """True if NumPy's float64 cos gives libm's bits (then NumPy == Numba bit for bit, as trig)."""
    v = np.random.default_rng(0).uniform(-40.0, 40.0, 20_000)
    return bool(np.array_equal(np.cos(v), np.array([math.cos(a) for a in v])))


def _shapes(ensemble):
    return [(m, d) for m, d in SHAPES if ensemble != "simplex" or d >= 2]


def _numpy(kind, ensemble, norms, m, d, n=TRIALS, length=LENGTH):
    counters = np.uint64(BASE) + np.arange(n, dtype=np.uint64)
    return engine.normalised_estimates(np.array(KEY, dtype=np.uint32), counters, m, d, kind,
                                       length, ensemble=ensemble, norms=norms)


def _numba(kind, ensemble, norms, m, d, n=TRIALS, length=LENGTH):
    out = np.empty(n)
    _mc_numba.reduced_estimates(np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d,
                                ENSEMBLES[ensemble], norms == "chi", kind, length, out)
    return out


# ---------------------------------------------------------------------------
# Exactness
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ensemble, norms", CASES, ids=[f"{e}-{n}" for e, n in CASES])
def test_offset_numpy_equals_numba(ensemble, norms):
    bits = _numpy_cos_is_libm()
    for m, d in _shapes(ensemble):
        a, b = _numpy("offset", ensemble, norms, m, d), _numba("offset", ensemble, norms, m, d)
        assert np.all(np.isfinite(a)) and np.all(np.abs(a) <= 2.0)
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-14)
        if bits:  # the same operations in the same order with the same cos
            np.testing.assert_array_equal(b, a)
    print(f"NumPy cos is libm's here: {bits} (then offset NumPy == Numba bit for bit)")


def _phase_mean(m, n=TRIALS):
    """(1/m) sum_i cos(2 pi U_i), U_2j, U_2j+1 = uniform_pair(slot j of STREAM_PHASE)."""
    counters = np.uint64(BASE) + np.arange(n, dtype=np.uint64)
    key = np.array(KEY, dtype=np.uint32)
    U = np.empty((m, n))
    for i in range(m):
        u, v, _ = rng.uniform_pair(key, counters, np.uint64(i // 2), STREAM_PHASE)
        U[i] = u if i % 2 == 0 else v
    return np.cos(2 * math.pi * U).sum(axis=0) / m, U


@pytest.mark.parametrize("ensemble, norms", CASES, ids=[f"{e}-{n}" for e, n in CASES])
def test_offset_is_trig_plus_the_phase_stream(ensemble, norms):
    for m, d in _shapes(ensemble):
        off, trig = _numba("offset", ensemble, norms, m, d), _numba("trig", ensemble, norms, m, d)
        phase, _ = _phase_mean(m)
        np.testing.assert_allclose(off, trig + phase, rtol=0, atol=1e-14)
        np.testing.assert_allclose(_numpy("offset", ensemble, norms, m, d),
                                   _numpy("trig", ensemble, norms, m, d) + phase, rtol=0, atol=1e-14)


def test_phase_stream_is_uniform_and_separate():
    from scipy import stats

    _, U = _phase_mean(6, n=10_000)
    for row in U:
        assert stats.kstest(row, "uniform").pvalue > 1e-4
    assert abs(np.corrcoef(U[0], U[1])[0, 1]) * math.sqrt(U.shape[1]) < 4  # one block, two words
    # the phase of length 0 is still random: offset estimates vary, trig's are all 1
    off = _numba("offset", "iid", "chi", 3, 4, length=0.0)
    assert np.all(_numba("trig", "iid", "chi", 3, 4, length=0.0) == 1.0) and np.ptp(off) > 0.5


#: trial_estimates(pair(4, 0.6, 0.8, 1.1), m = 5, trials=64, seed=21) at the commit before
#: the offset kind (sha256 of the float64 bytes, first 16 hex digits), both backends
TRIG_AT_HEAD = {
    "iid-chi": "71e49de33a6682a1", "iid-fixed": "5a35cd12b2632d3c",
    "orthogonal-chi": "6bb5c96fde352c3a", "orthogonal-fixed": "d8b6585cbc95061b",
    "simplex-chi": "8d903623e0a22f3e", "simplex-fixed": "75d9600f490c6ff5",
}
OTHERS_AT_HEAD = {"positive-orthogonal-chi": "8bed0b0fc4c10077",
                  "hyperbolic-simplex-fixed": "f1c6ffcbc7f6c386"}
#: cos at a few arguments on the machine that produced the digests (glibc's libm)
COS_PROBE = {0.9: "0x1.3e43a9692e21cp-1", 2.5: "-0x1.9a2f7ef858b7dp-1", 37.1: "0x1.a6d41417ad72ap-1"}


def _digest(a):
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.float64).tobytes()).hexdigest()[:16]


def test_trig_estimates_unchanged_by_the_offset_kind():
    from rfkernels.analysis import trial_estimates

    x, y = theory.pair(4, 0.6, 0.8, 1.1)
    same_libm = all(math.cos(a).hex() == h for a, h in COS_PROBE.items())
    runs = {}
    for name in TRIG_AT_HEAD:
        ensemble, norms = name.split("-")
        kw = dict(ensemble=ensemble, norms=norms, trials=64, seed=21)
        before = trial_estimates(x, y, 5, "trig", backend="numba", **kw)
        trial_estimates(x, y, 5, "offset", backend="numba", **kw)  # the shared kernel, flag on
        after = trial_estimates(x, y, 5, "trig", backend="numba", **kw)
        np.testing.assert_array_equal(after, before)
        a = trial_estimates(x, y, 5, "trig", backend="numpy", **kw)
        np.testing.assert_allclose(a, before, rtol=1e-13, atol=0)
        runs[name] = (before, a)
        if same_libm:
            assert _digest(before) == TRIG_AT_HEAD[name], name
    for name, digest in OTHERS_AT_HEAD.items():  # not touched by the phase flag, on any machine
        kind, ensemble, norms = name.split("-")
        e = trial_estimates(x, y, 5, kind, ensemble=ensemble, norms=norms, trials=64, seed=21,
                            backend="numba")
        assert _digest(e) == digest, name
    print(f"libm as at HEAD: {same_libm}; trig NumPy == Numba bit for bit: "
          f"{all(np.array_equal(a, b) for a, b in runs.values())}")


# ---------------------------------------------------------------------------
# CUDA simulator (subprocess) and device
# ---------------------------------------------------------------------------

SIM_SHAPES = [(5, 3), (4, 3), (1, 2)]
SIM_TRIALS = 30


def _simulated():
    """Run in the subprocess: every comparison, as a JSON-able dict."""
    from rfkernels.analysis import monte_carlo_mse, trial_estimates
    from rfkernels.engine import cuda as _mc_cuda
    from rfkernels.numerics import scalar as _scalar

    assert _scalar.simulator_enabled()
    found = {"cases": {}, "api": {}}
    for ensemble, code in ENSEMBLES.items():
        for chi in (True, False):
            for m, d in SIM_SHAPES:
                for kind in ("offset", "trig"):
                    args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, code, chi,
                            kind, LENGTH)
                    cpu = np.empty(SIM_TRIALS)
                    _mc_numba.reduced_estimates(*args, cpu)
                    gpu = np.full(SIM_TRIALS, np.nan)
                    _mc_cuda.gpu_reduced_estimates(*args, gpu, threads=16, blocks=2)
                    found["cases"][f"{ensemble}-{chi}-{m}-{d}-{kind}"] = {
                        "equal": bool(np.array_equal(cpu, gpu)),
                        "max_abs_diff": float(np.nanmax(np.abs(cpu - gpu))),
                    }
    x, y = theory.pair(3, 0.4, 0.3, 1.0)
    for ensemble in ("orthogonal", "simplex"):
        opts = dict(ensemble=ensemble, trials=120, seed=5, kernel="gaussian", gamma=0.7)
        runs = [monte_carlo_mse(x, y, 4, "offset", backend=b, proposal="plain", **opts)
                for b in ("cupy", "numba")]
        est = [trial_estimates(x, y, 4, "offset", backend=b, **opts) for b in ("cupy", "numba")]
        found["api"][ensemble] = {
            "result_equal": runs[0].to_dict() | {"elapsed_s": 0, "backend": ""}
            == runs[1].to_dict() | {"elapsed_s": 0, "backend": ""},
            "estimates_equal": bool(np.array_equal(est[0], est[1])),
        }
    return found


@pytest.fixture(scope="module")
def simulated():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_numba_cuda
def test_simulated_gpu_offset_and_trig_equal_cpu_bit_for_bit(simulated):
    assert len(simulated["cases"]) == len(ENSEMBLES) * 2 * len(SIM_SHAPES) * 2
    for case, found in simulated["cases"].items():
        assert found["equal"], f"{case}: max |gpu - cpu| = {found['max_abs_diff']}"


@needs_numba_cuda
def test_simulated_monte_carlo_offset_gaussian_on_cupy_equals_numba(simulated):
    for case, found in simulated["api"].items():
        assert found["estimates_equal"] and found["result_equal"], case


# On a device: tests/test_gpu_kernel.py::test_device_estimates_match_cpu has the offset cases.
# ---------------------------------------------------------------------------
# Statistics against theory
# ---------------------------------------------------------------------------

D, M, GAMMA = 8, 12, 0.3
# the scaled pair x' = sqrt(2 gamma) x is pair(8, 0.5, 0.5, pi/2): |x' + y'|^2 = |x' - y'|^2 = 0.5
XS, YS = theory.pair(D, 0.5, 0.5, np.pi / 2)
X, Y = XS / math.sqrt(2 * GAMMA), YS / math.sqrt(2 * GAMMA)
GAUSS = dict(kernel="gaussian", gamma=GAMMA)
RUNS = [("numba", "reduced", 200_000, 0.01), ("numpy", "reduced", 40_000, 0.02),
        ("numpy", "literal", 1_000, 0.06)]


def _check_result(r, kind, ensemble, norms):
    assert r.kernel == "gaussian" and r.gamma == GAMMA
    assert r.sm == pytest.approx(math.exp(-GAMMA * float(np.sum((X - Y) ** 2))), rel=1e-15)
    assert r.output_dimension == (2 * M if kind in ("trig", "hyperbolic") else M)
    exact = theory.exact_mse(X, Y, M, kind, ensemble=ensemble, norms=norms, **GAUSS)
    assert r.mse_exact == pytest.approx(float(exact), rel=1e-14)
    assert r.tail_ok and abs(r.z) < 4, (r.mse, r.stderr, r.mse_exact)


@pytest.mark.parametrize("kind", ["offset", "trig"])
@pytest.mark.parametrize("ensemble", list(ENSEMBLES))
def test_monte_carlo_gaussian_matches_theory(kind, ensemble):
    from rfkernels.analysis import monte_carlo_mse

    for seed, (backend, method, trials, rel) in enumerate(RUNS):
        r = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, trials=trials, seed=31 + seed,
                            backend=backend, method=method, proposal="plain", **GAUSS)
        _check_result(r, kind, ensemble, "chi")
        assert r.stderr < rel * r.mse_exact  # tight enough for |z| < 4 to mean something
        assert r.method == method


@pytest.mark.parametrize("kind, ensemble", [("offset", "iid"), ("offset", "orthogonal"),
                                            ("trig", "orthogonal")])
def test_monte_carlo_gaussian_fixed_norms_bias_and_variance(kind, ensemble):
    """Fixed norms estimate a Bessel kernel: the MSE is bias^2 + variance, and the bias shows."""
    from rfkernels.analysis import monte_carlo_mse

    x, y = 2.0 * X, 2.0 * Y  # |x' - y'|^2 = 2: a visible bias
    r = monte_carlo_mse(x, y, M, kind, ensemble=ensemble, norms="fixed", trials=400_000, seed=7,
                        backend="numba", proposal="plain", **GAUSS)
    assert abs(r.z) < 4
    assert abs(r.bias_z) > 8  # 0F1(; d/2; -d t/4) != exp(-t/2)


def test_monte_carlo_positive_and_hyperbolic_gaussian():
    from rfkernels.analysis import monte_carlo_mse

    for kind in ("positive", "hyperbolic"):
        for ensemble in ("iid", "orthogonal"):
            r = monte_carlo_mse(X, Y, M, kind, ensemble=ensemble, trials=200_000, seed=3,
                                backend="numba", proposal="plain", **GAUSS)
            _check_result(r, kind, ensemble, "chi")
    r = monte_carlo_mse(X, Y, M, "positive", trials=1_500, seed=4, method="literal", **GAUSS)
    _check_result(r, "positive", "iid", "chi")


def test_monte_carlo_rejects_the_wrong_formula():
    """The z-tests can fail: offset data against the trig formula, trig data against offset's."""
    from rfkernels.analysis import monte_carlo_mse

    off = monte_carlo_mse(X, Y, M, "offset", trials=200_000, seed=9, backend="numba", **GAUSS)
    trig_exact = float(theory.exact_mse(X, Y, M, "trig", **GAUSS))
    assert (off.mse - trig_exact) / off.stderr > 50
    trig = monte_carlo_mse(X, Y, M, "trig", trials=200_000, seed=9, backend="numba", **GAUSS)
    assert (off.mse_exact - trig.mse) / trig.stderr > 50
    # and softmax's numbers are not the Gaussian's: the factor exp(-|x'|^2 - |y'|^2) = e^-0.5
    soft = monte_carlo_mse(XS, YS, M, "trig", trials=200_000, seed=9, backend="numba")
    assert soft.kernel == "softmax" and soft.gamma is None
    assert soft.mse * math.exp(-0.5) == pytest.approx(trig.mse, rel=1e-12)


@pytest.mark.parametrize("gamma", [1e-3, 0.5, 4.0])
def test_results_record_the_kernel(gamma):
    from rfkernels.analysis import monte_carlo_mse

    x, y = theory.pair(3, 0.4, 0.9, 2.0)
    k = math.exp(-gamma * float(np.sum((x - y) ** 2)))
    for kind, dim in (("offset", 5), ("trig", 10), ("positive", 5)):
        r = monte_carlo_mse(x, y, 5, kind, trials=500, seed=1, kernel="gaussian", gamma=gamma)
        assert r.sm == pytest.approx(k, rel=1e-15) and r.output_dimension == dim
        assert (r.kernel, r.gamma) == ("gaussian", gamma)
        assert r.to_dict()["kernel"] == "gaussian"
    b = monte_carlo_mse(np.stack([x, 2 * x]), np.stack([y, y]), 5, "offset", trials=500,
                              seed=1, kernel="gaussian", gamma=gamma)
    for r, (xx, yy) in zip(b, ((x, y), (2 * x, y))):
        assert r.sm == pytest.approx(math.exp(-gamma * float(np.sum((xx - yy) ** 2))), rel=1e-15)


# ---------------------------------------------------------------------------
# The literal method's draws
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("ensemble, norms", [("iid", "chi"), ("orthogonal", "fixed"),
                                             ("simplex", "chi")])
def test_literal_offset_draws_phases_right_after_w(ensemble, norms):
    from rfkernels.analysis import trial_estimates

    x, y = theory.pair(5, 0.7, 0.4, 1.0)
    m, gamma, n, seed = 7, 0.3, 6, 42
    got = trial_estimates(x, y, m, "offset", ensemble=ensemble, norms=norms, method="literal",
                          trials=n, seed=seed, kernel="gaussian", gamma=gamma)
    gen = np.random.default_rng(np.random.SeedSequence(seed))
    hand = []
    for _ in range(n):
        W = draw_projections(m, 5, ensemble=ensemble, norms=norms, seed=gen)
        b = draw_phases(m, seed=gen)
        fx = feature_map(x, W, "offset", phase=b, kernel="gaussian", gamma=gamma)
        fy = feature_map(y, W, "offset", phase=b, kernel="gaussian", gamma=gamma)
        hand.append(float(np.sum(fx * fy)))
    np.testing.assert_allclose(got, hand, rtol=0, atol=1e-14)


if __name__ == "__main__":  # the simulator subprocess of the fixture above
    print(json.dumps(_simulated()))
