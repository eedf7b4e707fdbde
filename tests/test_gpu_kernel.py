"""The GPU Monte Carlo kernel (rfkernels.engine.cuda) against the CPU kernel.

Without a device the kernels run in Numba's CUDA simulator. The simulator
must be chosen before ``numba.cuda`` is first imported, so the simulator
checks run in one subprocess (``NUMBA_ENABLE_CUDASIM=1``) that executes this
file as a script and prints its findings as JSON; the tests below read them.
There, every device function is the CUDA twin built from the scalar source
and runs as Python, so equality with the CPU kernel checks the source the
device compiles; the same holds for the tilted proposal's estimates and
weights (issue 14). Tests marked ``gpu`` use a real device through CuPy.
"""

import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from rfkernels.backends import cupy_available

KEY = (7, 9)
BASE = (3 << 40) | 2**33  # pair 3, trials from 2**33: high counter words in use
LENGTH = 0.9
#: (m, d): two orthogonal blocks, the last partial (chi-square tail with dof 1 < 2 at d = 2)
SHAPES = [(5, 3), (3, 2)]
TRIALS = 150
LAUNCHES = [(1, 1), (16, 3), (64, 1)]  # (threads per block, blocks)
CASES = [(orth, chi, kind) for orth in (False, True) for chi in (True, False) for kind in (0, 1, 2)]
KINDS = {0: "positive", 1: "hyperbolic", 2: "trig", 3: "oprf"}
#: the samplers of issue 11: (ensemble code 0 iid / 1 orthogonal / 2 simplex, chi, kind code)
BEYOND_CASES = [(2, True, 0), (2, False, 1), (2, True, 2), (2, True, 3), (0, True, 3), (0, False, 3),
                (1, True, 3)]
BEYOND_TRIALS = 60
#: the device's cases: the kinds' codes, and the offset kind (trig's kernel with its phase stream) by name
DEVICE_CASES = CASES + [(e, c, "offset") for e in (0, 1, 2) for c in (True, False)]
OPRF_A = -0.15
#: the tilted proposal of issue 14: (ensemble code, chi, kind code) for every sampler it applies to
TILT_CASES = [(ens, chi, kind) for ens in (0, 1, 2) for chi in (True, False) for kind in (0, 1, 3)]
#: (m, d) of the tilted cases: two blocks, the last partial; m < d; one projection; d = 1 (not simplex)
TILT_SHAPES = [(5, 3), (3, 2), (1, 4), (2, 1)]
TILT_TRIALS = 40
TILT_LENGTH = 1.7  # moves of about 2|x + y| = 3.4: far from the plain law's draws
TILT_OPRF_A = -0.2
ENSEMBLE_NAMES = ("iid", "orthogonal", "simplex")
#: antithetic norms (issue 25): (ensemble code 1 orthogonal / 2 simplex, kind code), both SHAPES and (7, 4)
ANTI_CASES = [(ens, kind) for ens in (1, 2) for kind in (0, 1, 2, 3)]
ANTI_SHAPES = SHAPES + [(7, 4)]
#: monte_carlo_mse(proposal="tilted") on the GPU kernel against Numba: (ensemble, norms, kind)
TILT_API = [("orthogonal", "chi", "positive"), ("simplex", "fixed", "hyperbolic"), ("iid", "chi", "oprf")]

needs_numba_cuda = pytest.mark.skipif(importlib.util.find_spec("numba_cuda") is None,
                                      reason="needs numba-cuda (the CUDA target of Numba)")


def _simulated():
    """Run in the subprocess: every comparison, as a JSON-able dict."""
    from rfkernels.engine import cuda as _mc_cuda, cpu as _mc_numba
    from rfkernels.numerics import scalar as _scalar

    assert _scalar.simulator_enabled()
    found = {"cases": {}, "launch": {}}
    for orth, chi, kind in CASES:
        for m, d in SHAPES:
            args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, orth, chi, kind, LENGTH)
            cpu = np.empty(TRIALS)
            _mc_numba.reduced_estimates(*args, cpu)
            threads, blocks = LAUNCHES[(m + kind) % len(LAUNCHES)]
            gpu = np.full(TRIALS, np.nan)
            _mc_cuda.gpu_reduced_estimates(*args, gpu, threads=threads, blocks=blocks)
            found["cases"][f"{orth}-{chi}-{kind}-{m}-{d}"] = {
                "equal": bool(np.array_equal(cpu, gpu)),
                "max_abs_diff": float(np.nanmax(np.abs(cpu - gpu))),
            }
    from rfkernels.engine import oprf_constants

    found["beyond"] = {}
    for ens, chi, kind in BEYOND_CASES:
        for m, d in SHAPES:
            args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, ens, chi, kind, LENGTH)
            oprf = oprf_constants(OPRF_A, LENGTH, d) if kind == 3 else None
            cpu = np.empty(BEYOND_TRIALS)
            _mc_numba.reduced_estimates(*args, cpu, oprf=oprf)
            threads, blocks = LAUNCHES[(m + kind) % len(LAUNCHES)]
            gpu = np.full(BEYOND_TRIALS, np.nan)
            _mc_cuda.gpu_reduced_estimates(*args, gpu, oprf=oprf, threads=threads, blocks=blocks)
            found["beyond"][f"{ens}-{chi}-{kind}-{m}-{d}"] = {
                "equal": bool(np.array_equal(cpu, gpu)),
                "max_abs_diff": float(np.nanmax(np.abs(cpu - gpu))),
            }
    # the tilted proposal: estimates and weights of the GPU kernel, the CPU kernel and NumPy
    from rfkernels.engine import estimate_chunks
    from rfkernels.numerics.chi_quantile import quantile_table

    found["antithetic"] = {}
    for ens, kind in ANTI_CASES:
        for m, d in ANTI_SHAPES:
            args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, ens, True, kind, LENGTH)
            oprf = oprf_constants(OPRF_A, LENGTH, d) if kind == 3 else None
            cpu = np.empty(BEYOND_TRIALS)
            _mc_numba.reduced_estimates(*args, cpu, oprf=oprf, table=quantile_table(d))
            threads, blocks = LAUNCHES[(m + kind) % len(LAUNCHES)]
            gpu = np.full(BEYOND_TRIALS, np.nan)
            _mc_cuda.gpu_reduced_estimates(*args, gpu, oprf=oprf, threads=threads, blocks=blocks,
                                           table=quantile_table(d))
            _, ref, _ = next(estimate_chunks(
                KEY, LENGTH, m, d, KINDS[kind], ensemble=ENSEMBLE_NAMES[ens], norms="antithetic",
                trials=BEYOND_TRIALS, first=BASE & (2**40 - 1), pair=BASE >> 40, backend="numpy",
                A=OPRF_A if kind == 3 else None))
            found["antithetic"][f"{ens}-{kind}-{m}-{d}"] = {
                "equal": bool(np.array_equal(cpu, gpu)),
                "numpy_equal": bool(np.array_equal(cpu, ref)),
                "max_abs_diff": float(np.nanmax(np.abs(cpu - gpu))),
            }

    found["tilted"] = {}
    for ens, chi, kind in TILT_CASES:
        for m, d in TILT_SHAPES:
            if ens == 2 and d < 2:
                continue
            A, tilt, oprf, args, cpu, cpu_w = _tilted_cpu(ens, chi, kind, m, d, TILT_TRIALS)
            threads, blocks = LAUNCHES[(m + kind) % len(LAUNCHES)]
            gpu, gpu_w = np.full(TILT_TRIALS, np.nan), np.full(TILT_TRIALS, np.nan)
            _mc_cuda.gpu_reduced_estimates(*args, gpu, oprf=oprf, threads=threads, blocks=blocks, tilt=tilt,
                                           weights=gpu_w)
            _, ref, ref_w = next(estimate_chunks(
                KEY, TILT_LENGTH, m, d, KINDS[kind], ensemble=ENSEMBLE_NAMES[ens],
                norms="chi" if chi else "fixed", trials=TILT_TRIALS, first=BASE & (2**40 - 1),
                pair=BASE >> 40, backend="numpy", A=A, tilt=tilt))
            found["tilted"][f"{ens}-{chi}-{kind}-{m}-{d}"] = {
                "equal": bool(np.array_equal(cpu, gpu)) and bool(np.array_equal(cpu_w, gpu_w)),
                "numpy_equal": bool(np.array_equal(cpu, ref)) and bool(np.array_equal(cpu_w, ref_w)),
                "max_abs_diff": float(max(np.nanmax(np.abs(cpu - gpu)), np.nanmax(np.abs(cpu_w - gpu_w)))),
                "weights_moved": bool(np.ptp(gpu_w) > 0) or tilt.shift == 0.0,
            }
    # launch shapes: the estimates of one case under several shapes
    args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), 5, 3, True, True, 0, LENGTH)
    outs = []
    for threads, blocks in LAUNCHES:
        out = np.empty(TRIALS)
        _mc_cuda.gpu_reduced_estimates(*args, out, threads=threads, blocks=blocks)
        outs.append(out)
    found["launch"]["estimates_equal"] = all(np.array_equal(outs[0], o) for o in outs[1:])
    # the twins run as Python: no CPU-compiled function among their callees
    twin = _scalar.cuda_twin(_mc_numba.trial_estimate)
    seen, stack, cpu_callees = set(), [twin], []
    while stack:
        fn = getattr(stack.pop(), "fn", None)
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        for name in fn.__code__.co_names:
            value = fn.__globals__.get(name)
            if value in _scalar._SOURCES:
                cpu_callees.append(name)
            elif hasattr(value, "fn"):
                stack.append(value)
    found["cpu_callees"] = cpu_callees
    found["twins_seen"] = len(seen)
    # the public API: monte_carlo_mse(backend="cupy") runs the GPU kernel, NumPy arrays standing in
    from rfkernels import engine, theory
    from rfkernels.analysis import monte_carlo_mse, trial_estimates

    found["api_kernel"] = engine.gpu_kernel_available()
    x, y = theory.pair(3, 0.4, 0.3, 1.0)
    api = {}
    for orth, chi, kind in CASES:
        opts = dict(ensemble="orthogonal" if orth else "iid", norms="chi" if chi else "fixed",
                    trials=300, seed=5)
        # plain: auto's pilot (16384 trials) would take minutes in the simulator
        runs = [monte_carlo_mse(x, y, 4, KINDS[kind], backend=b, proposal="plain", **opts)
                for b in ("cupy", "numba")]
        est = [trial_estimates(x, y, 4, KINDS[kind], backend=b, **opts) for b in ("cupy", "numba")]
        api[f"{orth}-{chi}-{kind}"] = {
            "result_equal": runs[0].to_dict() | {"elapsed_s": 0, "backend": ""}
            == runs[1].to_dict() | {"elapsed_s": 0, "backend": ""},
            "estimates_equal": bool(np.array_equal(est[0], est[1])),
        }
    found["api"] = api
    tilted_api = {}
    for ensemble, norms, kind in TILT_API:
        opts = dict(ensemble=ensemble, norms=norms, trials=300, seed=5, proposal="tilted")
        runs = [monte_carlo_mse(x, y, 4, kind, backend=b, **opts) for b in ("cupy", "numba")]
        tilted_api[f"{ensemble}-{norms}-{kind}"] = {
            "proposal": runs[0].proposal,
            "result_equal": runs[0].to_dict() | {"elapsed_s": 0, "backend": ""}
            == runs[1].to_dict() | {"elapsed_s": 0, "backend": ""},
        }
    found["tilted_api"] = tilted_api
    # issue 24: an isotropic DERF runs OPRF's kernel at (B1 x, B2 y)/sqrt(1 - 4a); SADERF fitted
    derf_api = {}
    derf = dict(A=0.05, B_query=np.diag([1.2, 0.9, 1.0]))
    for ens in ("iid", "orthogonal"):
        opts = dict(ensemble=ens, trials=300, seed=5, proposal="plain", **derf)
        runs = [monte_carlo_mse(x, y, 4, "derf", backend=b, **opts) for b in ("cupy", "numba", "numpy")]
        derf_api[ens] = [runs[0].to_dict() | {"elapsed_s": 0, "backend": ""}
                         == r.to_dict() | {"elapsed_s": 0, "backend": ""} for r in runs[1:]]
    found["derf_api"] = derf_api
    return found


@pytest.fixture(scope="module")
def simulated():
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1")
    proc = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=1500,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_numba_cuda
@pytest.mark.parametrize("orth, chi, kind", CASES,
                         ids=[f"{'orthogonal' if o else 'iid'}-{'chi' if c else 'fixed'}-{KINDS[k]}"
                              for o, c, k in CASES])
def test_simulated_gpu_estimates_equal_cpu_bit_for_bit(simulated, orth, chi, kind):
    for m, d in SHAPES:
        case = simulated["cases"][f"{orth}-{chi}-{kind}-{m}-{d}"]
        assert case["equal"], f"m={m}, d={d}: max |gpu - cpu| = {case['max_abs_diff']}"


@needs_numba_cuda
@pytest.mark.parametrize("ens, chi, kind", BEYOND_CASES,
                         ids=[f"{('iid', 'orthogonal', 'simplex')[e]}-{'chi' if c else 'fixed'}-{KINDS[k]}"
                              for e, c, k in BEYOND_CASES])
def test_simulated_gpu_simplex_and_oprf_equal_cpu_bit_for_bit(simulated, ens, chi, kind):
    for m, d in SHAPES:
        case = simulated["beyond"][f"{ens}-{chi}-{kind}-{m}-{d}"]
        assert case["equal"], f"m={m}, d={d}: max |gpu - cpu| = {case['max_abs_diff']}"


@needs_numba_cuda
@pytest.mark.parametrize("ens, kind", ANTI_CASES,
                         ids=[f"{ENSEMBLE_NAMES[e]}-antithetic-{KINDS[k]}" for e, k in ANTI_CASES])
def test_simulated_gpu_antithetic_norms_equal_cpu_and_numpy_bit_for_bit(simulated, ens, kind):
    for m, d in ANTI_SHAPES:
        case = simulated["antithetic"][f"{ens}-{kind}-{m}-{d}"]
        assert case["equal"], f"m={m}, d={d}: max |gpu - cpu| = {case['max_abs_diff']}"
        assert case["numpy_equal"], f"m={m}, d={d}: the CPU kernel differs from NumPy"


@needs_numba_cuda
@pytest.mark.parametrize("ens, chi, kind", TILT_CASES,
                         ids=[f"{ENSEMBLE_NAMES[e]}-{'chi' if c else 'fixed'}-{KINDS[k]}"
                              for e, c, k in TILT_CASES])
def test_simulated_gpu_tilted_estimates_and_weights_equal_cpu_bit_for_bit(simulated, ens, chi, kind):
    shapes = [(m, d) for m, d in TILT_SHAPES if ens != 2 or d >= 2]
    for m, d in shapes:
        case = simulated["tilted"][f"{ens}-{chi}-{kind}-{m}-{d}"]
        assert case["equal"], f"m={m}, d={d}: max |gpu - cpu| = {case['max_abs_diff']}"
        assert case["numpy_equal"], f"m={m}, d={d}: the CPU kernel differs from NumPy"
        assert case["weights_moved"], f"m={m}, d={d}: every weight equal"


@needs_numba_cuda
def test_simulated_monte_carlo_mse_tilted_on_cupy_equals_numba(simulated):
    assert len(simulated["tilted_api"]) == len(TILT_API)
    for case, found in simulated["tilted_api"].items():
        assert found["proposal"] == "tilted", case
        assert found["result_equal"], case


@needs_numba_cuda
def test_simulated_monte_carlo_mse_derf_on_cupy_equals_numba_and_numpy(simulated):
    """Issue 24: DERF (isotropic A) on the simulated GPU kernel, the same result as Numba and NumPy."""
    assert set(simulated["derf_api"]) == {"iid", "orthogonal"}
    for ens, equal in simulated["derf_api"].items():
        assert equal == [True, True], ens


@needs_numba_cuda
def test_simulated_gpu_results_do_not_depend_on_launch_shape(simulated):
    assert simulated["launch"]["estimates_equal"]


@needs_numba_cuda
def test_simulated_device_functions_are_built_from_the_scalar_source(simulated):
    assert simulated["cpu_callees"] == []
    assert simulated["twins_seen"] >= 10  # trial_estimate down to Philox and the bit casts


@needs_numba_cuda
def test_simulated_monte_carlo_mse_on_cupy_equals_numba(simulated):
    """monte_carlo_mse(backend="cupy") runs the GPU kernel (simulated) and reports the CPU's numbers."""
    assert simulated["api_kernel"] is True
    assert len(simulated["api"]) == len(CASES)
    for case, found in simulated["api"].items():
        assert found["estimates_equal"], case
        assert found["result_equal"], case


@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@needs_numba_cuda
@pytest.mark.parametrize("orth, chi, kind", DEVICE_CASES)
def test_device_estimates_match_cpu(orth, chi, kind):
    """On a device FMA contraction may change last bits: equal to rounding, and stable across shapes."""
    import cupy

    from rfkernels.engine import cuda as _mc_cuda, cpu as _mc_numba

    n = 4096
    args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), 64, 16, orth, chi, kind, LENGTH)
    cpu = np.empty(n)
    _mc_numba.reduced_estimates(*args, cpu)
    outs = []
    for threads, blocks in ((128, None), (32, 3)):
        out = cupy.empty(n)
        _mc_cuda.gpu_reduced_estimates(*args, out, threads=threads, blocks=blocks)
        outs.append(out.get())
    np.testing.assert_array_equal(outs[0], outs[1])
    np.testing.assert_allclose(outs[0], cpu, rtol=1e-12, atol=1e-13)
    print(f"device == cpu bit for bit: {np.array_equal(outs[0], cpu)}; "
          f"max |diff| {np.max(np.abs(outs[0] - cpu)):.3g}")



@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@needs_numba_cuda
@pytest.mark.parametrize("ens, kind", ANTI_CASES)
def test_device_antithetic_estimates_match_cpu(ens, kind):
    """Antithetic norms on a device (the quantile table copied there): the CPU's numbers to rounding."""
    import cupy

    from rfkernels.engine import cuda as _mc_cuda, cpu as _mc_numba
    from rfkernels.engine import oprf_constants
    from rfkernels.numerics.chi_quantile import quantile_table

    n, m, d = 4096, 64, 16
    args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, ens, True, kind, LENGTH)
    oprf = oprf_constants(OPRF_A, LENGTH, d) if kind == 3 else None
    cpu = np.empty(n)
    _mc_numba.reduced_estimates(*args, cpu, oprf=oprf, table=quantile_table(d))
    out = cupy.empty(n)
    _mc_cuda.gpu_reduced_estimates(*args, out, oprf=oprf, table=quantile_table(d))
    np.testing.assert_allclose(out.get(), cpu, rtol=1e-11, atol=1e-13)
    print(f"antithetic device == cpu bit for bit: {np.array_equal(out.get(), cpu)}")


def _tilted_cpu(ens, chi, kind, m, d, n):
    """(A, tilt, oprf, kernel args, estimates, weights) of the CPU kernel for one tilted case."""
    from rfkernels.engine import cpu as _mc_numba
    from rfkernels.engine import oprf_constants, tilt_for

    A = TILT_OPRF_A if kind == 3 else None
    tilt = tilt_for(KINDS[kind], ENSEMBLE_NAMES[ens], "chi" if chi else "fixed", TILT_LENGTH, d, A=A)
    oprf = oprf_constants(A, TILT_LENGTH, d) if kind == 3 else None
    args = (np.uint32(KEY[0]), np.uint32(KEY[1]), np.uint64(BASE), m, d, ens, chi, kind, TILT_LENGTH)
    cpu, cpu_w = np.empty(n), np.empty(n)
    _mc_numba.reduced_estimates(*args, cpu, oprf=oprf, tilt=tilt, weights=cpu_w)
    return A, tilt, oprf, args, cpu, cpu_w

@pytest.mark.gpu
@pytest.mark.skipif(not cupy_available(), reason="needs CuPy and a CUDA device")
@needs_numba_cuda
@pytest.mark.parametrize("ens, chi, kind", TILT_CASES)
def test_device_tilted_estimates_and_weights_match_cpu(ens, chi, kind):
    """The tilted proposal on a device: the same components, estimates and weights to rounding."""
    import cupy

    from rfkernels.engine import cuda as _mc_cuda

    n, m, d = 4096, 64, 16
    _, tilt, oprf, args, cpu, cpu_w = _tilted_cpu(ens, chi, kind, m, d, n)
    outs = []
    for threads, blocks in ((128, None), (32, 3)):
        out, w = cupy.empty(n), cupy.empty(n)
        _mc_cuda.gpu_reduced_estimates(*args, out, oprf=oprf, threads=threads, blocks=blocks, tilt=tilt,
                                       weights=w)
        outs.append((out.get(), w.get()))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    np.testing.assert_allclose(outs[0][0], cpu, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(outs[0][1], cpu_w, rtol=1e-10, atol=1e-13)
    print(f"tilted device == cpu bit for bit: estimates {np.array_equal(outs[0][0], cpu)}, "
          f"weights {np.array_equal(outs[0][1], cpu_w)}")


if __name__ == "__main__":  # the simulator subprocess of the fixture above
    print(json.dumps(_simulated()))
