"""CUDA kernels of the reduced Monte Carlo sampler, compiled from the CPU kernel's scalar source.

The per-trial work is :func:`rfkernels._reduced_numba.trial_estimate`,
built for the CUDA target by :func:`rfkernels._scalar.cuda_twin`
from the same Python source as the CPU build (Philox, normals,
chi-squares, projections (iid, orthogonal, simplex), the four kinds, the fixed-order sums). Each
thread runs whole trials, trial ``t`` from Philox trial counter ``base + t``
only, in a grid-stride loop, so a trial's numbers do not depend on the
launch shape. The per-trial scratch of the CPU kernel lives in per-thread
local arrays of a fixed capacity (the next power of two >= m, one kernel per
capacity, compiled on first use); m is limited to :data:`MAX_M`.

Entries (same argument convention as
:func:`rfkernels._reduced_numba.reduced_estimates`; arrays are CuPy
arrays or any object with ``__cuda_array_interface__``, or NumPy arrays under
the simulator):

- :func:`gpu_reduced_estimates` fills ``out`` with the per-trial estimates;
- :func:`gpu_reduced_moments` does the same and also returns the streaming
  statistics of the normalised errors ``e - target`` and of their squares
  (count, mean, sum of squared deviations: what Chan et al.'s merge takes,
  and the largest squared error). Each block reduces its tiles of
  :data:`TILE` consecutive trials with a fixed tree in shared memory; the
  per-tile partials are merged on the host in tile order by a fixed pairwise
  tree, so the result depends neither on the scheduling nor on the grid.

Under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` set before
``numba.cuda`` is first imported) every device function runs as Python from
the scalar source; tests/test_gpu_kernel.py checks there that the estimates
equal the CPU kernel's bit for bit. On a device, NVVM may contract
``a * b + c`` into fused multiply-adds, which changes last bits (not
measured: no device was available when this was written).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import (  # numba-cuda; the simulator when NUMBA_ENABLE_CUDASIM=1 was set first
    cuda,
    float64,
)
from numba import types as nbtypes

from . import _reduced_numba as _mc_numba
from ._scalar import cuda_twin, simulator_enabled

#: Largest m the GPU kernels take (per-thread scratch is 6 local arrays of up to this many doubles).
MAX_M = 1024
#: Trials per reduction tile = threads per block of the reducing kernel.
TILE = 128
#: Threads per block of the estimates kernel, and blocks per multiprocessor launched by default.
THREADS = 128
_BLOCKS_PER_SM = 8

#: The tilt floats of a plain run (rfkernels._reduced_numba.tilt_params).
_NO_TILT = (0.0,) * 9

#: Columns of the per-tile partials.
_N, _ERR_MEAN, _ERR_M2, _SQ_MEAN, _SQ_M2, _SQ_MAX = range(6)


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
    """(estimates kernel, reducing kernel) of ``kind`` with per-thread scratch of ``capacity``."""
    trial_estimate = cuda_twin(_mc_numba.trial_estimate_for(kind))
    cap = capacity
    tile = TILE

    @cuda.jit
    def estimates(k0, k1, base, m, d, ensemble, chi, needs_w2, length, slope, curvature, offset, tilted,
                  symmetric, tp, out, weights):
        p = cuda.local.array(cap, float64)
        g = cuda.local.array(cap, float64)
        q = cuda.local.array(cap, float64)
        ok = cuda.local.array(cap, nbtypes.boolean)
        work = cuda.local.array((3, cap), float64)
        n = out.shape[0]
        for t in range(cuda.grid(1), n, cuda.gridsize(1)):
            e, w = trial_estimate(k0, k1, base + np.uint64(t), m, d, ensemble, chi, needs_w2, length,
                                  slope, curvature, offset, tilted, symmetric, tp, p, g, q, ok, work)
            out[t] = e
            if tilted:
                weights[t] = w

    @cuda.jit(device=True)
    def tree(acc, j, take_max):
        """acc[0] <- sum (or max) of acc[0:tile] by a fixed pairwise tree; every thread gets it."""
        cuda.syncthreads()
        stride = tile // 2
        while stride > 0:
            if j < stride:
                if take_max:
                    acc[j] = max(acc[j], acc[j + stride])
                else:
                    acc[j] = acc[j] + acc[j + stride]
            cuda.syncthreads()
            stride //= 2
        total = acc[0]
        cuda.syncthreads()
        return total

    @cuda.jit
    def reduce_tiles(k0, k1, base, m, d, ensemble, chi, needs_w2, length, slope, curvature, offset, target,
                     out, partials):
        """Tile ``i`` (trials ``i TILE .. i TILE + TILE - 1``) -> ``out`` and ``partials[i]``.

        Blocks of exactly TILE threads take tiles grid-stride; the partials of
        a tile depend only on its trials.
        """
        p = cuda.local.array(cap, float64)
        g = cuda.local.array(cap, float64)
        q = cuda.local.array(cap, float64)
        ok = cuda.local.array(cap, nbtypes.boolean)
        work = cuda.local.array((3, cap), float64)
        acc = cuda.shared.array(tile, float64)
        j = cuda.threadIdx.x
        n = out.shape[0]
        n_tiles = partials.shape[0]
        for i in range(cuda.blockIdx.x, n_tiles, cuda.gridDim.x):
            t = i * tile + j
            valid = t < n
            count = min(tile, n - i * tile)
            e = 0.0
            s = 0.0
            if valid:
                v, _ = trial_estimate(k0, k1, base + np.uint64(t), m, d, ensemble, chi, needs_w2, length,
                                      slope, curvature, offset, False, False, _NO_TILT, p, g, q,
                                      ok, work)
                out[t] = v
                e = v - target
                s = e * e
            acc[j] = e
            err_mean = tree(acc, j, False) / count
            acc[j] = (e - err_mean) * (e - err_mean) if valid else 0.0
            err_m2 = tree(acc, j, False)
            acc[j] = s
            sq_mean = tree(acc, j, False) / count
            acc[j] = (s - sq_mean) * (s - sq_mean) if valid else 0.0
            sq_m2 = tree(acc, j, False)
            acc[j] = s
            sq_max = tree(acc, j, True)
            if j == 0:
                partials[i, 0] = count
                partials[i, 1] = err_mean
                partials[i, 2] = err_m2
                partials[i, 3] = sq_mean
                partials[i, 4] = sq_m2
                partials[i, 5] = sq_max

    return estimates, reduce_tiles


def _launch_blocks(n, threads):
    want = (n + threads - 1) // threads
    try:
        sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    except Exception:  # noqa: BLE001 - simulator or no device attribute
        sms = 1
    return max(1, min(want, sms * _BLOCKS_PER_SM))


def _args(k0, k1, base, m, d, ensemble, chi, kind, length, oprf):
    """The kernels' arguments; ``ensemble`` an ensemble code (False/True: iid/orthogonal)."""
    slope, curvature, offset = _mc_numba.constants_args(kind, length, oprf)
    return (np.uint32(k0), np.uint32(k1), np.uint64(base), np.int64(m), np.int64(d), np.int64(ensemble),
            bool(chi), bool(kind.needs_squared_norms), float(length), slope, curvature, offset)


def gpu_reduced_estimates(k0, k1, base, m, d, ensemble, chi, kind, length, out, oprf=None, *,
                          threads=THREADS, blocks=None, tilt=None, weights=None):
    """Fill ``out`` (a CuPy array, or NumPy under the simulator) with the normalised estimates of
    trials ``base .. base + len(out) - 1``; = :func:`rfkernels._reduced_numba.reduced_estimates`.

    ``kind``: see :func:`rfkernels._reduced_numba.kind_entry`; ``oprf``: its
    constants (:func:`rfkernels.reduced.oprf_constants` for oprf).
    ``tilt``: draw from that :class:`rfkernels.reduced.Tilt` and write the
    weights to ``weights`` (an array like ``out``).
    ``threads`` (per block) and ``blocks`` set the launch shape (default: enough
    blocks to fill the device); the estimates do not depend on it.
    """
    _check(m, out)
    n = out.shape[0]
    if n == 0:
        return
    symmetric, tp, weights = _mc_numba.tilt_params(tilt, weights, out)
    kind = _mc_numba.kind_entry(kind)
    estimates, _ = _kernels(_capacity(m), simulator_enabled(), kind)
    blocks = _launch_blocks(n, threads) if blocks is None else int(blocks)
    estimates[blocks, threads](*_args(k0, k1, base, m, d, ensemble, chi, kind, length, oprf),
                               tilt is not None, bool(symmetric), tp, out, weights)


class TileMoments(tuple):
    """Streaming statistics of a run of trials: ``(n, err_mean, err_m2, sq_mean, sq_m2, sq_max)``.

    ``err`` is the normalised error ``e - target``, ``sq`` its square; ``*_m2``
    are sums of squared deviations from the mean (Chan et al.'s ``M2``), so
    ``(n, err_mean, err_m2)`` and ``(n, sq_mean, sq_m2)`` can be merged into
    running moments chunk by chunk. A non-finite estimate makes them NaN or inf.
    """

    __slots__ = ()
    n = property(lambda self: self[0])
    err_mean = property(lambda self: self[1])
    err_m2 = property(lambda self: self[2])
    sq_mean = property(lambda self: self[3])
    sq_m2 = property(lambda self: self[4])
    sq_max = property(lambda self: self[5])


def merge_tiles(partials):
    """Merge per-tile partials (rows ``(n, err_mean, err_m2, sq_mean, sq_m2, sq_max)``) in a fixed order.

    Adjacent rows are merged pairwise (Chan et al.), level by level, an odd
    last row carried up unchanged: the result depends only on the rows and
    their order. Host NumPy arithmetic.
    """
    a = np.array(partials, dtype=np.float64, copy=True)
    if a.ndim != 2 or a.shape[1] != 6 or a.shape[0] == 0:
        raise ValueError(f"partials must have shape (tiles >= 1, 6); got {a.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        while a.shape[0] > 1:
            carry = a[-1:] if a.shape[0] % 2 else a[:0]
            x, y = a[0:-1:2] if a.shape[0] % 2 else a[0::2], a[1::2]
            nx, ny = x[:, _N], y[:, _N]
            total = nx + ny
            merged = np.empty_like(x)
            merged[:, _N] = total
            for mean, m2 in ((_ERR_MEAN, _ERR_M2), (_SQ_MEAN, _SQ_M2)):
                delta = y[:, mean] - x[:, mean]
                merged[:, mean] = x[:, mean] + delta * (ny / total)
                merged[:, m2] = (x[:, m2] + y[:, m2]) + delta * delta * (nx * ny / total)
            merged[:, _SQ_MAX] = np.maximum(x[:, _SQ_MAX], y[:, _SQ_MAX])
            a = np.concatenate([merged, carry])
    row = a[0]
    return TileMoments((int(row[_N]),) + tuple(float(v) for v in row[1:]))


def gpu_reduced_moments(k0, k1, base, m, d, ensemble, chi, kind, length, target, out, *, blocks=None,
                        oprf=None):
    """:func:`gpu_reduced_estimates` into ``out``, and the run's :class:`TileMoments` about ``target``.

    Tiles of :data:`TILE` trials are reduced on the device (blocks of
    TILE threads, ``blocks`` of them, default enough to fill the device), the
    tiles' partials merged on the host by :func:`merge_tiles`; the result
    does not depend on ``blocks``.
    """
    _check(m, out)
    n = out.shape[0]
    if n == 0:
        raise ValueError("out must hold at least one trial")
    kind = _mc_numba.kind_entry(kind)
    _, reduce_tiles = _kernels(_capacity(m), simulator_enabled(), kind)
    n_tiles = (n + TILE - 1) // TILE
    partials = _device_empty_like(out, (n_tiles, 6))
    blocks = _launch_blocks(n, TILE) if blocks is None else int(blocks)
    reduce_tiles[blocks, TILE](*_args(k0, k1, base, m, d, ensemble, chi, kind, length, oprf),
                               float(target), out, partials)
    return merge_tiles(_to_host(partials))


def _device_empty_like(out, shape):
    """An uninitialised float64 array where ``out`` lives (CuPy on a device, NumPy otherwise)."""
    mod = type(out).__module__
    if mod.startswith("cupy"):
        import cupy

        return cupy.empty(shape, dtype=cupy.float64)
    if hasattr(out, "__cuda_array_interface__") and not isinstance(out, np.ndarray):
        return cuda.device_array(shape, dtype=np.float64)
    return np.empty(shape)


def _to_host(a):
    if type(a).__module__.startswith("cupy"):
        return a.get()
    if hasattr(a, "copy_to_host"):
        return a.copy_to_host()
    return np.asarray(a)

