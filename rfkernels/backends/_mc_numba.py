"""Numba kernels of the reduced Monte Carlo sampler: :mod:`rfkernels.reduced`, in parallel.

:func:`reduced_estimates` fills ``out[k]`` with the normalised estimate of
trial counter ``base + k`` exactly as
:func:`rfkernels.reduced.normalised_estimates` does (same counters, same
transforms, same operation order, same fixed-order sums), so the two agree
to the bit for positive and hyperbolic features and to the math library's
rounding of ``cos`` for trig features.

Parallelism and reproducibility. Trials are split into batches of
:data:`BATCH` consecutive trials, the batches distributed over threads with
``prange``. Every trial is computed by one thread from its own counters and
written to its own slot, and nothing is reduced across trials here, so the
output does not depend on the number of threads or on how the work is
scheduled. The batch only amortises the allocation of the per-trial scratch
arrays.

Speed. The inner loops over projections are written branch-free from
inlined building blocks (:mod:`rfkernels.backends._rng_numba`,
:mod:`rfkernels.backends._elementary_numba`), so LLVM vectorises them
(Philox, Box--Muller, the first Marsaglia--Tsang attempt, ``exp``); the
rare rejected chi-square attempts are redone by a scalar loop afterwards.
Kernels are compiled with ``error_model="numpy"`` (no division checks, which
would block vectorisation) and without ``fastmath`` (which would change the
numbers).

Caching. ``cache=True`` stores the compiled kernel next to this file, but
Numba only checks *this* file's timestamp, while the kernel inlines code
from :mod:`rfkernels.backends._rng_numba`,
:mod:`rfkernels.backends._elementary_numba` and :mod:`rfkernels._elementary`.
On import, :func:`_flush_if_dependencies_changed` compares a hash of those
sources with the one recorded at the last compilation and empties the cache
index when they differ, so an edited generator is never run from a stale
kernel.
"""

from __future__ import annotations

import hashlib
import math
import os
import sys

import numba
import numpy as np

from . import _elementary_numba as elem
from ._rng_numba import (
    chi_square_at,
    chi_square_normal_at,
    mt_first_stage,
    mt_params,
    mt_second_stage,
    normal_pair_inline,
)

#: Consecutive trials per parallel work item.
BATCH = 256

#: Estimator codes (``kind``).
POSITIVE, HYPERBOLIC, TRIG = 0, 1, 2
KIND_CODES = {"positive": POSITIVE, "hyperbolic": HYPERBOLIC, "trig": TRIG}

# must equal rfkernels.reduced.STREAM_*
_STREAM_DIRECTION = 16
_STREAM_LENGTH = 17
_STREAM_TAIL = 18


@numba.njit(inline="always")
def _sum8(x, start, k):
    """Fixed-order sum of ``x[start:start + k]``; = :func:`rfkernels.reduced.fixed_order_sum`."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
    full = k - k % 8
    for j in range(start, start + full, 8):
        a0 += x[j]
        a1 += x[j + 1]
        a2 += x[j + 2]
        a3 += x[j + 3]
        a4 += x[j + 4]
        a5 += x[j + 5]
        a6 += x[j + 6]
        a7 += x[j + 7]
    r = k - full
    b = start + full
    if r > 0:
        a0 += x[b]
    if r > 1:
        a1 += x[b + 1]
    if r > 2:
        a2 += x[b + 2]
    if r > 3:
        a3 += x[b + 3]
    if r > 4:
        a4 += x[b + 4]
    if r > 5:
        a5 += x[b + 5]
    if r > 6:
        a6 += x[b + 6]
    return ((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))


@numba.njit(inline="always")
def _normals(k0, k1, trial, m, g):
    """g[i], i < m, from the direction stream (pairs of slots share a block)."""
    npairs = m // 2
    for j in range(npairs):
        z0, z1 = normal_pair_inline(k0, k1, trial, j, _STREAM_DIRECTION)
        g[2 * j] = z0
        g[2 * j + 1] = z1
    if m % 2:
        z0, z1 = normal_pair_inline(k0, k1, trial, npairs, _STREAM_DIRECTION)
        g[m - 1] = z0


@numba.njit(inline="always")
def _chi_squares_with_normals(k0, k1, trial, m, dof, stream, q, z, ok, work):
    """(q[i], z[i]) = chi_square_with_normal(dof) at slots i < m of ``stream``.

    First attempts up to the squeeze in one vectorised loop; the ~10% that
    the squeeze does not accept get the logarithmic test in a second loop,
    and the rare rejected ones (< 1% for dof >= 8) the full scalar sampler.
    ``work`` is (3, m) scratch.
    """
    if dof >= 2.0:
        d, c = mt_params(dof)
        for i in range(m):
            squeezed, v, x2, u, companion = mt_first_stage(k0, k1, trial, i, stream, 0, d, c)
            q[i] = 2.0 * (d * v)
            z[i] = companion
            ok[i] = squeezed
            work[0, i] = v
            work[1, i] = x2
            work[2, i] = u
        for i in range(m):
            if not ok[i] and not mt_second_stage(work[0, i], work[1, i], work[2, i], d):
                q[i], z[i] = chi_square_normal_at(k0, k1, trial, i, stream, dof)
    else:
        for i in range(m):
            q[i], z[i] = chi_square_normal_at(k0, k1, trial, i, stream, dof)


@numba.njit(inline="always")
def _chi_square(k0, k1, trial, slot, stream, dof):
    """One chi-square (= chi_square_at), with the usual first-attempt acceptance inlined."""
    if dof >= 2.0:
        d, c = mt_params(dof)
        squeezed, v, x2, u, _ = mt_first_stage(k0, k1, trial, slot, stream, 0, d, c)
        if squeezed or mt_second_stage(v, x2, u, d):
            return 2.0 * (d * v)
    return chi_square_at(k0, k1, trial, slot, stream, dof)


@numba.njit(inline="always")
def _projections(k0, k1, trial, m, d, orthogonal, chi, p, g, q, ok, work):
    """p[i] = the scalar projections of one trial; = :func:`rfkernels.reduced.scalar_projections`."""
    if not orthogonal:
        _normals(k0, k1, trial, m, g)
        if chi:
            for i in range(m):
                p[i] = g[i]
        else:
            sqrt_d = math.sqrt(d)
            if d == 1:
                for i in range(m):
                    p[i] = sqrt_d * (g[i] / math.sqrt(g[i] * g[i] + 0.0))
            else:  # tails chi2(d - 1) per projection (their companion normals, into p, are unused)
                _chi_squares_with_normals(k0, k1, trial, m, float(d - 1), _STREAM_TAIL, q, p, ok, work)
                for i in range(m):
                    p[i] = sqrt_d * (g[i] / math.sqrt(g[i] * g[i] + q[i]))
        return
    # the (length, direction) draws are per slot: all of them first, then block by block
    if chi:
        _chi_squares_with_normals(k0, k1, trial, m, float(d), _STREAM_LENGTH, q, g, ok, work)
    else:
        _normals(k0, k1, trial, m, g)
    for i in range(m):
        p[i] = g[i] * g[i]
    sqrt_d = math.sqrt(d)
    for i0 in range(0, m, d):
        b = min(d, m - i0)
        total = _sum8(p, i0, b)
        if b < d:  # the partial block's tail, at the block's index as slot
            total = total + _chi_square(k0, k1, trial, i0 // d, _STREAM_TAIL, float(d - b))
        root = math.sqrt(total)
        if chi:
            for i in range(i0, i0 + b):
                p[i] = math.sqrt(q[i]) * (g[i] / root)
        else:
            for i in range(i0, i0 + b):
                p[i] = sqrt_d * (g[i] / root)


@numba.njit(parallel=True, cache=True, error_model="numpy")
def _reduced_estimates_kernel(k0, k1, base, m, d, orthogonal, chi, kind, length, out):
    """Normalised estimates of trials with counters ``base .. base + len(out) - 1``.

    Parameters
    ----------
    k0, k1 : uint32
        Philox key words.
    base : uint64
        Trial counter of ``out[0]`` (:func:`rfkernels.reduced.trial_counters`).
    m, d : int64
        Projections and dimension.
    orthogonal, chi : bool
        Ensemble (orthogonal or iid) and norms (chi or fixed).
    kind : int64
        :data:`POSITIVE`, :data:`HYPERBOLIC` or :data:`TRIG`.
    length : float64
        ``a``, the length of ``x + y`` (``x - y`` for trig).
    out : float64 array
        Filled in place.
    """
    n = out.shape[0]
    half = 0.5 * length * length
    n_batches = (n + BATCH - 1) // BATCH
    for batch in numba.prange(n_batches):
        p = np.empty(m)
        g = np.empty(m + 1)
        q = np.empty(m)
        ok = np.empty(m, dtype=np.bool_)
        work = np.empty((3, m))
        for t in range(batch * BATCH, min(n, (batch + 1) * BATCH)):
            trial = base + np.uint64(t)
            _projections(k0, k1, trial, m, d, orthogonal, chi, p, g, q, ok, work)
            if kind == POSITIVE:
                for i in range(m):
                    p[i] = elem.exp(length * p[i] - half)
            elif kind == HYPERBOLIC:
                for i in range(m):
                    ap = length * p[i]
                    p[i] = 0.5 * (elem.exp(ap - half) + elem.exp(-ap - half))
            else:
                for i in range(m):
                    p[i] = math.cos(length * p[i])
            out[t] = _sum8(p, 0, m) / m


#: Seconds a cold compile of the kernel took, measured (see docs/performance.md).
COLD_COMPILE_NOTE = "about 30-60 s on 2 cores"


def compile_pending(dispatcher=_reduced_estimates_kernel):
    """True if the next call of ``dispatcher`` compiles (nothing in memory or in the disk cache)."""
    try:
        if dispatcher.signatures:
            return False
        return not dispatcher._cache._cache_file._load_index()
    except Exception:  # noqa: BLE001 - private Numba API; unknown means "may compile"
        return True


def reduced_estimates(k0, k1, base, m, d, orthogonal, chi, kind, length, out):
    """Fill ``out`` with the normalised estimates of trials ``base .. base + len(out) - 1``.

    Runs the parallel kernel; before its first compilation in a process
    with an empty cache, one line saying so goes to stderr, so a first run
    is not mistaken for a hang.
    """
    if compile_pending():
        print(f"rfkernels: compiling the Numba Monte Carlo kernel once ({COLD_COMPILE_NOTE}; "
              "cached for later runs) ...", file=sys.stderr, flush=True)
    _reduced_estimates_kernel(k0, k1, base, m, d, orthogonal, chi, kind, length, out)


def _flush_if_dependencies_changed(dispatcher=_reduced_estimates_kernel):
    """Empty ``dispatcher``'s on-disk cache if the sources it inlines changed since it was written."""
    from .. import _elementary
    from . import _elementary_numba, _rng_numba

    try:
        digest = hashlib.sha256()
        for module in (_elementary, _elementary_numba, _rng_numba):
            with open(module.__file__, "rb") as f:
                digest.update(f.read())
        stamp = digest.hexdigest()
        path = os.path.join(dispatcher._cache._cache_path, "_mc_numba.dependencies.sha256")
        try:
            with open(path) as f:
                if f.read().strip() == stamp:
                    return
        except OSError:
            pass
        dispatcher._cache.flush()
        with open(path, "w") as f:
            f.write(stamp + "\n")
    except (AttributeError, OSError):  # no cache (read-only install, other Numba): nothing to flush
        pass


_flush_if_dependencies_changed()
