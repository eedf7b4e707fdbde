"""CUDA kernels of the reduced Monte Carlo sampler, compiled from the CPU kernel's scalar source.

The per-trial work is :func:`rfkernels.engine.cpu.trial_estimate`,
built for the CUDA target by :func:`rfkernels.numerics.scalar.cuda_twin`
from the same Python source as the CPU build (Philox, normals,
chi-squares, projections (iid, orthogonal, simplex), the kinds' terms and random phases, the fixed-order sums). Each
thread runs whole trials, trial ``t`` from Philox trial counter ``base + t``
only, in a grid-stride loop, so a trial's numbers do not depend on the
launch shape. The per-trial scratch of the CPU kernel lives in per-thread
local arrays of a fixed capacity (the next power of two >= m, one kernel per
capacity, compiled on first use); m is limited to :data:`MAX_M`.

The entry, :func:`gpu_reduced_estimates`, fills ``out`` with the per-trial
estimates (same argument convention as
:func:`rfkernels.engine.cpu.reduced_estimates`; arrays are CuPy arrays or
any object with ``__cuda_array_interface__``, or NumPy arrays under the
simulator); the run's statistics are accumulated by the caller
(:mod:`rfkernels.analysis.monte_carlo`), as for every backend.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before
``numba.cuda`` is first imported) every device function runs as Python from
the scalar source; tests/test_gpu_kernel.py checks there that the estimates
equal the CPU kernel's bit for bit. On a device, NVVM may contract
``a * b + c`` into fused multiply-adds, which changes last bits (not
measured on a device: docs/performance.md).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import (  # numba-cuda; the simulator when NUMBA_ENABLE_CUDASIM=1 was set first
    cuda,
    float64,
)
from numba import types as nbtypes

from . import cpu as _mc_numba
from ..numerics.scalar import cuda_twin, simulator_enabled

#: Largest m the GPU kernels take (per-thread scratch is 6 local arrays of up to this many doubles).
MAX_M = 1024
#: Threads per block of the estimates kernel, and blocks per multiprocessor launched by default.
THREADS = 128
_BLOCKS_PER_SM = 8



def cuda_available():
    """True when ``numba.cuda`` (package ``numba-cuda``) imports and sees a device or is the simulator."""
    try:
        return bool(cuda.is_available())
    except Exception:  # noqa: BLE001 - driver or toolkit problems mean "not available"
        return False


def _check(m, out):
    if not 1 <= int(m) <= MAX_M:
        raise ValueError(f"m must be in [1, {MAX_M}] for the GPU kernel; got {m}")
    if len(out.shape) != 1 or out.dtype != np.float64:
        raise TypeError(f"out must be a 1-D float64 array; got shape {out.shape} and dtype {out.dtype}")


def _capacity(m):
    return max(8, 1 << (int(m) - 1).bit_length())


@functools.cache
def _kernels(capacity, sim, kind):
    """The estimates kernel of ``kind`` with per-thread scratch of ``capacity``."""
    trial_estimate = cuda_twin(_mc_numba.trial_estimate_for(kind))
    cap = capacity

    @cuda.jit
    def estimates(k0, k1, base, m, d, ensemble, chi, coupled, needs_w2, phase, length, slope, curvature,
                  offset, tilted, symmetric, tp, table, out, weights):
        p = cuda.local.array(cap, float64)
        g = cuda.local.array(cap, float64)
        q = cuda.local.array(cap, float64)
        ok = cuda.local.array(cap, nbtypes.boolean)
        work = cuda.local.array((3, cap), float64)
        n = out.shape[0]
        for t in range(cuda.grid(1), n, cuda.gridsize(1)):
            e, w = trial_estimate(k0, k1, base + np.uint64(t), m, d, ensemble, chi, coupled, needs_w2,
                                  phase, length, slope, curvature, offset, tilted, symmetric, tp,
                                  table, p, g, q, ok, work)
            out[t] = e
            if tilted:
                weights[t] = w

    return estimates


def _launch_blocks(n, threads):
    want = (n + threads - 1) // threads
    try:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    except Exception:  # noqa: BLE001 - simulator or no device attribute
        sms = 1
    return max(1, min(want, sms * _BLOCKS_PER_SM))


def _args(k0, k1, base, m, d, ensemble, chi, coupled, kind, length, oprf):
    """The kernels' arguments; ``ensemble`` an ensemble code (False/True: iid/orthogonal)."""
    slope, curvature, offset = _mc_numba.constants_args(kind, length, oprf)
    return (np.uint32(k0), np.uint32(k1), np.uint64(base), np.int64(m), np.int64(d), np.int64(ensemble),
            bool(chi), bool(coupled), bool(kind.needs_squared_norms), bool(kind.random_phase),
            float(length), slope, curvature, offset)


def gpu_reduced_estimates(k0, k1, base, m, d, ensemble, chi, kind, length, out, oprf=None, *,
                          threads=THREADS, blocks=None, tilt=None, weights=None, table=None):
    """Fill ``out`` (a CuPy array, or NumPy under the simulator) with the normalised estimates of
    trials ``base .. base + len(out) - 1``; = :func:`rfkernels.engine.cpu.reduced_estimates`.

    ``kind``: see :func:`rfkernels.engine.cpu.kind_entry`; ``oprf``: its
    constants (:func:`rfkernels.engine.oprf_constants` for oprf).
    ``tilt``: draw from that :class:`rfkernels.engine.Tilt` and write the
    weights to ``weights`` (an array like ``out``). ``table``: antithetic
    norms' quantile table (None: independent norms), as for the CPU kernel.
    ``threads`` (per block) and ``blocks`` set the launch shape (default: enough
    blocks to fill the device); the estimates do not depend on it.
    """
    _check(m, out)
    n = out.shape[0]
    if n == 0:
        return
    symmetric, tp, weights = _mc_numba.tilt_params(tilt, weights, out)
    kind = _mc_numba.kind_entry(kind)
    estimates = _kernels(_capacity(m), simulator_enabled(), kind)
    blocks = _launch_blocks(n, threads) if blocks is None else int(blocks)
    coupled = table is not None
    table = _mc_numba.NO_TABLE if table is None else table
    # 36 KiB copied per call: to the device, or (the simulator writes its arguments back) a writable copy
    table = np.array(table) if simulator_enabled() else cuda.to_device(np.ascontiguousarray(table))
    estimates[blocks, threads](*_args(k0, k1, base, m, d, ensemble, chi, coupled, kind, length, oprf),
                               tilt is not None, bool(symmetric), tp, table, out, weights)
