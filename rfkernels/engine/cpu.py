"""Numba kernels of the reduced Monte Carlo sampler: :mod:`rfkernels.engine`, in parallel.

:func:`reduced_estimates` fills ``out[k]`` with the normalised estimate of
trial counter ``base + k`` exactly as
:func:`rfkernels.engine.normalised_estimates` does (same counters, same
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
inlined building blocks (:mod:`rfkernels.engine.rng_numba`,
:mod:`rfkernels.numerics.elementary_numba`), so LLVM vectorises them
(Philox, Box--Muller, the first Marsaglia--Tsang attempt, ``exp``); the
rare rejected chi-square attempts are redone by a scalar loop afterwards.
Kernels are compiled with ``error_model="numpy"`` (no division checks, which
would block vectorisation) and without ``fastmath`` (which would change the
numbers).

Caching. ``cache=True`` stores the compiled kernel next to this file, but
Numba only checks *this* file's timestamp, while the kernel inlines code
from :mod:`rfkernels.engine.rng_numba`,
:mod:`rfkernels.numerics.elementary_numba` and :mod:`rfkernels.numerics.elementary`.
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

from ..numerics.elementary_numba import exp, log
from .rng_numba import (
    antithetic_squared_norms,
    chi_square_at,
    chi_square_normal_at,
    mt_first_stage,
    mt_params,
    mt_second_stage,
    normal_pair_inline,
    normals_into,
    uniform_pair_inline,
)
from ..numerics.scalar import rebind, scalar, specialise
from ..estimators import positive
from .kernel_args import (  # noqa: F401  (re-exported: the kernels' argument conventions)
    ENSEMBLE_CODES,
    HYPERBOLIC,
    IID,
    OPRF,
    ORTHOGONAL,
    POSITIVE,
    SIMPLEX,
    TRIG,
    KIND_CODES,
    constants_args,
    cpu_kernel_key,
    kind_entry,
    kind_id,
    tilt_params,
)

#: Consecutive trials per parallel work item.
BATCH = 256

#: Positions in ``tp``, the tilt's floats as the kernels take them (:func:`tilt_params`):
#: the fields of :class:`rfkernels.engine.Tilt`, in this order.
TP_ALPHA0, TP_SHIFT, TP_WSCALE, TP_C1, TP_C0, TP_E_PLUS, TP_E_MINUS, TP_C_MINUS, TP_N1 = range(9)

# the counter layout of the vectorised twin, imported, never retyped
from .streams import STREAM_ANTITHETIC as _STREAM_ANTITHETIC
from .streams import STREAM_DIRECTION as _STREAM_DIRECTION
from .streams import STREAM_LENGTH as _STREAM_LENGTH
from .streams import STREAM_OPRF_TAIL as _STREAM_OPRF_TAIL
from .streams import STREAM_PHASE as _STREAM_PHASE
from .streams import STREAM_PROPOSAL as _STREAM_PROPOSAL
from .streams import STREAM_SIMPLEX as _STREAM_SIMPLEX
from .streams import STREAM_SIMPLEX_LENGTH as _STREAM_SIMPLEX_LENGTH
from .streams import STREAM_TAIL as _STREAM_TAIL


@scalar(inline="never")
def _sum8(x, start, k):
    """Fixed-order sum of ``x[start:start + k]``; = :func:`rfkernels.engine.fixed_order_sum`."""
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


@scalar(inline="never")
def _normals(k0, k1, trial, m, g):
    """g[i], i < m, from the direction stream (pairs of slots share a block)."""
    normals_into(k0, k1, trial, m, _STREAM_DIRECTION, g)


@scalar(inline="never")
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


@scalar(error_model="numpy")
def _chi_square(k0, k1, trial, slot, stream, dof):
    """One chi-square (= chi_square_at), with the usual first-attempt acceptance inlined."""
    if dof >= 2.0:
        d, c = mt_params(dof)
        squeezed, v, x2, u, _ = mt_first_stage(k0, k1, trial, slot, stream, 0, d, c)
        if squeezed or mt_second_stage(v, x2, u, d):
            return 2.0 * (d * v)
    return chi_square_at(k0, k1, trial, slot, stream, dof)


@scalar(inline="never")
def _directions(k0, k1, trial, m, d, p, g):
    """p[i] = g[i] / sqrt(S) per orthogonal block of d rows (the last one partial), S its squared norm."""
    for i in range(m):
        p[i] = g[i] * g[i]
    for i0 in range(0, m, d):
        b = min(d, m - i0)
        total = _sum8(p, i0, b)
        if b < d:  # the partial block's tail, at the block's index as slot
            total = total + _chi_square(k0, k1, trial, i0 // d, _STREAM_TAIL, float(d - b))
        root = math.sqrt(total)
        for i in range(i0, i0 + b):
            p[i] = g[i] / root


# The scalar projections of one trial, one function per (ensemble, norms), each
# = rfkernels.engine.scalar_projections: p[i], i < m. Scratch: g, q (float64),
# ok (bool) of length >= m, work (float64, (3, >= m)).


@scalar(inline="never")
def _projections_iid_chi(k0, k1, trial, m, d, p, g, q, ok, work):
    _normals(k0, k1, trial, m, p)


@scalar(inline="never")
def _projections_iid_fixed(k0, k1, trial, m, d, p, g, q, ok, work):
    # the direction coordinates c (times sqrt(d) by _scale_fixed)
    _normals(k0, k1, trial, m, g)
    if d == 1:
        for i in range(m):
            p[i] = g[i] / math.sqrt(g[i] * g[i] + 0.0)
    else:  # tails chi2(d - 1) per projection (their companion normals, into p, are unused)
        _chi_squares_with_normals(k0, k1, trial, m, float(d - 1), _STREAM_TAIL, q, p, ok, work)
        for i in range(m):
            p[i] = g[i] / math.sqrt(g[i] * g[i] + q[i])


@scalar(inline="never")
def _projections_orthogonal_chi(k0, k1, trial, m, d, p, g, q, ok, work):
    # the (length, direction) draws are per slot: all of them first, then block by block;
    # the direction coordinates c in p, the squared lengths in q (p = sqrt(q) c by _scale_chi)
    _chi_squares_with_normals(k0, k1, trial, m, float(d), _STREAM_LENGTH, q, g, ok, work)
    _directions(k0, k1, trial, m, d, p, g)


@scalar(inline="never")
def _projections_orthogonal_fixed(k0, k1, trial, m, d, p, g, q, ok, work):
    _normals(k0, k1, trial, m, g)
    _directions(k0, k1, trial, m, d, p, g)


@scalar(inline="never")
def _simplex_directions(k0, k1, trial, m, d, p, g):
    """p[i] = c_d (h_i - mean h) / |h| per simplex block (= rfkernels.engine._simplex_directions).

    The d normals of a block are summed on the fly into the eight lanes of
    :func:`_sum8` (coordinate k into lane k % 8), so the sums are
    :func:`rfkernels.engine.fixed_order_sum`'s bits; only the first b
    coordinates are kept (in ``g``).
    """
    half = (d + 1) // 2
    scale = math.sqrt(d / (d - 1.0))
    for i0 in range(0, m, d):
        j = i0 // d
        b = min(d, m - i0)
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
        for k2 in range(half):
            z0, z1 = normal_pair_inline(k0, k1, trial, j * half + k2, _STREAM_SIMPLEX)
            k = 2 * k2
            if k + 1 >= d:  # d odd: the pair's second normal is not a coordinate (+0.0 changes nothing)
                z1 = 0.0
            if k < b:
                g[i0 + k] = z0
            if k + 1 < b:
                g[i0 + k + 1] = z1
            lane = k2 % 4
            if lane == 0:
                a0 += z0
                a1 += z1
                s0 += z0 * z0
                s1 += z1 * z1
            elif lane == 1:
                a2 += z0
                a3 += z1
                s2 += z0 * z0
                s3 += z1 * z1
            elif lane == 2:
                a4 += z0
                a5 += z1
                s4 += z0 * z0
                s5 += z1 * z1
            else:
                a6 += z0
                a7 += z1
                s6 += z0 * z0
                s7 += z1 * z1
        mean = (((a0 + a1) + (a2 + a3)) + ((a4 + a5) + (a6 + a7))) / d
        root = math.sqrt(((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7)))
        for i in range(i0, i0 + b):
            p[i] = scale * ((g[i] - mean) / root)


@scalar(inline="never")
def _projections_simplex_chi(k0, k1, trial, m, d, p, g, q, ok, work):
    # squared chi(d) norms into q (their companion normals, into p, are unused), then the directions
    _chi_squares_with_normals(k0, k1, trial, m, float(d), _STREAM_SIMPLEX_LENGTH, q, p, ok, work)
    _simplex_directions(k0, k1, trial, m, d, p, g)


@scalar(inline="never")
def _projections_simplex_fixed(k0, k1, trial, m, d, p, g, q, ok, work):
    _simplex_directions(k0, k1, trial, m, d, p, g)


@scalar(inline="never")
def _projections_orthogonal_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table):
    # the fixed-norm directions (coordinates in p), the coupled squared lengths in q
    _normals(k0, k1, trial, m, g)
    _directions(k0, k1, trial, m, d, p, g)
    antithetic_squared_norms(k0, k1, trial, m, d, _STREAM_ANTITHETIC, q, table)


@scalar(inline="never")
def _projections_simplex_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table):
    antithetic_squared_norms(k0, k1, trial, m, d, _STREAM_ANTITHETIC, q, table)
    _simplex_directions(k0, k1, trial, m, d, p, g)


@scalar(inline="never")
def _scale_chi(m, p, q):
    """p[i] <- sqrt(q[i]) p[i]: the projections from the direction coordinates and squared lengths."""
    for i in range(m):
        p[i] = math.sqrt(q[i]) * p[i]


@scalar(inline="never")
def _scale_fixed(m, d, p):
    """p[i] <- sqrt(d) p[i]: the projections of rows of norm sqrt(d)."""
    sqrt_d = math.sqrt(d)
    for i in range(m):
        p[i] = sqrt_d * p[i]


@scalar(inline="never")
def _iid_chi_tails(k0, k1, trial, m, d, g, q, ok, work):
    """q[i] = the chi2(d - 1) part of |w_i|^2 for iid projections with chi norms (oprf only)."""
    if d == 1:
        for i in range(m):
            q[i] = 0.0
    else:  # companion normals into g, unused
        _chi_squares_with_normals(k0, k1, trial, m, float(d - 1), _STREAM_OPRF_TAIL, q, g, ok, work)


@scalar(inline="never")
def _add_squares(m, p, q):
    """q[i] <- p[i]^2 + q[i]: |w_i|^2 from the projection and the tail."""
    for i in range(m):
        q[i] = p[i] * p[i] + q[i]


# The tilted proposal (rfkernels.engine.Tilt): the mixture component, the move, the weight.
# ``tp`` is rfkernels.engine.Tilt's floats: (alpha0, shift, wscale, c1, c0, e_plus, e_minus,
# c_minus, n1) (tilt_params).


@scalar(inline="always")
def _choose(k0, k1, trial, m, alpha0, symmetric):
    """(component, negative) of one trial (= rfkernels.engine._proposal_draws); component -1: plain."""
    u, v, bit = uniform_pair_inline(k0, k1, trial, 0, _STREAM_PROPOSAL)
    comp = min(np.int64(v * m), m - 1)
    if u < alpha0:
        comp = -1
    return comp, symmetric and bit


@scalar(inline="never")
def _move_row(c, q, comp, negative, m, block, gamma, chi, tp):
    """Move row ``comp`` (= rfkernels.engine._move_block, same operations).

    ``c``: direction coordinates; ``q``: squared lengths (chi norms);
    ``block``: the rows per block (d; 1 for iid rows).
    """
    i0 = (comp // block) * block
    b = min(block, m - i0)
    cj = c[comp]
    one = 1.0 - cj * cj
    if chi:
        pj = math.sqrt(q[comp]) * cj
        w = (q[comp] * one) * tp[TP_WSCALE]
        pn = pj + (-tp[TP_SHIFT] if negative else tp[TP_SHIFT])
        r2 = pn * pn + w
        cn = pn / math.sqrt(r2)
        q[comp] = r2
    else:
        k = tp[TP_E_MINUS] if negative else tp[TP_E_PLUS]
        up = (1.0 + cj) * k
        down = 1.0 - cj
        cn = (up - down) / (up + down)
    rho = math.sqrt((1.0 - cn * cn) / one) if one > 0.0 else 0.0
    for i in range(i0, i0 + b):
        c[i] = rho * (c[i] - gamma * cj) + gamma * cn
    c[comp] = cn


# The trial's likelihood-ratio weight (= rfkernels.engine.tilt_weights), one function per
# case so that a kernel compiles (and LLVM vectorises) only its own loop: r[i] <- the ratio of
# component i, then _mixture. ``v``: projections (chi norms) or direction coordinates (fixed).


@scalar(inline="never")
def _ratios_chi(v, r, m, tp):
    for i in range(m):
        r[i] = exp(tp[TP_SHIFT] * v[i] + tp[TP_C0])


@scalar(inline="never")
def _ratios_chi_symmetric(v, r, m, tp):
    shift = tp[TP_SHIFT]
    c0 = tp[TP_C0]
    for i in range(m):
        r[i] = 0.5 * (exp(shift * v[i] + c0) + exp(c0 - shift * v[i]))


@scalar(inline="never")
def _ratios_chi_length(v, q, r, m, tp):
    """OPRF: W_i = q[i] - v[i]^2 (squared length minus squared projection)."""
    for i in range(m):
        r[i] = exp(tp[TP_SHIFT] * v[i] + (tp[TP_C1] * (q[i] - v[i] * v[i]) + tp[TP_C0]))


@scalar(inline="never")
def _ratios_fixed(v, r, m, tp):
    for i in range(m):
        r[i] = exp(tp[TP_C0] - tp[TP_N1] * log((1.0 - v[i]) + tp[TP_E_MINUS] * (1.0 + v[i])))


@scalar(inline="never")
def _ratios_fixed_symmetric(v, r, m, tp):
    for i in range(m):
        down = 1.0 - v[i]
        up = 1.0 + v[i]
        r[i] = 0.5 * (exp(tp[TP_C0] - tp[TP_N1] * log(down + tp[TP_E_MINUS] * up))
                      + exp(tp[TP_C_MINUS] - tp[TP_N1] * log(down + tp[TP_E_PLUS] * up)))


@scalar(inline="never")
def _mixture(r, m, tp):
    """The weight 1 / (alpha0 + (1 - alpha0) mean_i r_i)."""
    return 1.0 / (tp[TP_ALPHA0] + (1.0 - tp[TP_ALPHA0]) * (_sum8(r, 0, m) / m))


@scalar(inline="never")
def _weight(v, q, r, m, symmetric, chi, with_w, tp):
    """The weight of a trial, the case chosen at run time (the CUDA kernel's way).

    ``with_w``: include the W term, ``W = q - v**2`` (OPRF, ``q`` the squared lengths).
    """
    if chi:
        if with_w:
            _ratios_chi_length(v, q, r, m, tp)
        elif symmetric:
            _ratios_chi_symmetric(v, r, m, tp)
        else:
            _ratios_chi(v, r, m, tp)
    elif symmetric:
        _ratios_fixed_symmetric(v, r, m, tp)
    else:
        _ratios_fixed(v, r, m, tp)
    return _mixture(r, m, tp)


_TWO_PI = 2.0 * math.pi


@scalar(inline="never")
def _add_phases(k0, k1, trial, m, p):
    """p[i] += cos(2 pi U_i), i < m; = :func:`rfkernels.engine.laws.phase_terms` (pairs of slots share a block)."""
    npairs = m // 2
    for j in range(npairs):
        u, v, _ = uniform_pair_inline(k0, k1, trial, j, _STREAM_PHASE)
        p[2 * j] = p[2 * j] + math.cos(_TWO_PI * u)
        p[2 * j + 1] = p[2 * j + 1] + math.cos(_TWO_PI * v)
    if m % 2:
        u, v, _ = uniform_pair_inline(k0, k1, trial, npairs, _STREAM_PHASE)
        p[m - 1] = p[m - 1] + math.cos(_TWO_PI * u)


#: The terms of the generic sources below: rebound per kind (:func:`trial_estimate_for`,
#: :func:`kernel_for`) to its registry entry's ``scalar_terms``; the unspecialised
#: sources compute positive features.
_terms = positive.scalar_terms


@scalar(inline="always")
def trial_estimate(k0, k1, trial, m, d, ensemble, chi, coupled, needs_w2, phase, length, slope,
                   curvature, offset, tilted, symmetric, tp, table, p, g, q, ok, work):
    """``(e, w)``: the normalised estimate of trial counter ``trial`` and its weight.

    ``e`` is one entry of :func:`rfkernels.engine.normalised_estimates`.
    ``ensemble`` is :data:`IID`, :data:`ORTHOGONAL` or :data:`SIMPLEX`;
    ``slope, curvature, offset`` are the kind's constants
    (:attr:`rfkernels.estimators.Kind.constants`) and ``needs_w2`` its
    ``needs_squared_norms``; the terms are ``_terms``, the kind's
    ``scalar_terms`` in the specialisation :func:`trial_estimate_for`. With ``tilted`` the trial is drawn
    from the proposal of :class:`rfkernels.engine.Tilt` (``symmetric`` and
    the floats ``tp`` of :func:`tilt_params`) and ``w`` is its weight
    (:func:`rfkernels.engine.tilt_weights`); otherwise ``w`` is 1. ``coupled``
    (with ``chi``): antithetic norms from the quantile ``table``
    (:func:`rfkernels.numerics.chi_quantile.quantile_table`; never tilted). ``p``,
    ``g``, ``q`` (float64) and ``ok`` (bool) of length >= m and ``work``
    (float64, (3, >= m)) are scratch. The CUDA kernels
    (:mod:`rfkernels.engine.cuda`) call its CUDA twin; the CPU kernel below
    makes the same choices, but on literal arguments, so that Numba compiles
    only the branch a call takes.
    """
    comp = -1
    negative = False
    if tilted:
        comp, negative = _choose(k0, k1, trial, m, tp[TP_ALPHA0], symmetric)
    if ensemble == ORTHOGONAL:
        if coupled:
            _projections_orthogonal_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table)
        elif chi:
            _projections_orthogonal_chi(k0, k1, trial, m, d, p, g, q, ok, work)
        else:
            _projections_orthogonal_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
    elif ensemble == SIMPLEX:
        if coupled:
            _projections_simplex_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table)
        elif chi:
            _projections_simplex_chi(k0, k1, trial, m, d, p, g, q, ok, work)
        else:
            _projections_simplex_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
    elif chi:
        _projections_iid_chi(k0, k1, trial, m, d, p, g, q, ok, work)
    else:
        _projections_iid_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
    w = 1.0
    block = d if ensemble != IID else 1
    gamma = -1.0 / (d - 1.0) if ensemble == SIMPLEX else 0.0
    use_w = needs_w2  # c1 = 0 (A = 0) gives 0 * W + c0 = c0: rfkernels.engine's bits
    if not chi:  # p holds the direction coordinates
        if comp >= 0:
            _move_row(p, q, comp, negative, m, block, gamma, False, tp)
        if tilted:
            w = _weight(p, q, g, m, symmetric, False, False, tp)
        _scale_fixed(m, d, p)
    else:
        if ensemble == IID:  # p holds the projections
            if comp >= 0:
                p[comp] = p[comp] + (-tp[TP_SHIFT] if negative else tp[TP_SHIFT])
            if needs_w2:
                _iid_chi_tails(k0, k1, trial, m, d, g, q, ok, work)
                if comp >= 0:
                    q[comp] = q[comp] * tp[TP_WSCALE]
                _add_squares(m, p, q)
        else:  # direction coordinates in p, squared lengths in q
            if comp >= 0:
                _move_row(p, q, comp, negative, m, block, gamma, True, tp)
            _scale_chi(m, p, q)
        if tilted:
            w = _weight(p, q, g, m, symmetric, True, use_w, tp)
    _terms(length, slope, curvature, offset, m, d, chi, p, q)
    if phase:
        _add_phases(k0, k1, trial, m, p)
    return _sum8(p, 0, m) / m, w


def trial_estimate_for(kind):
    """:func:`trial_estimate` with ``_terms`` bound to ``kind``'s (a :class:`rfkernels.estimators.Kind`)."""
    return specialise(trial_estimate, _terms=kind.scalar_terms)


def _make_kernel(ENSEMBLE, CHI, COUPLED, NEEDS_W2, SYMMETRIC, KIND_ID, terms):
    """The parallel CPU kernel of one (ensemble, norms, kind), compiled on first use and cached.

    The per-trial work is that of :func:`trial_estimate`, spelled out here
    with the choices as closure constants: Numba prunes the branches not taken
    before it inlines the scalar functions, so a call compiles one of the
    paths rather than all of them. Numba's cache keys closures by the values
    of their constants, so each path is cached on its own. The proposal is
    an argument, not a constant: one compilation serves a plain pilot and
    the tilted run that may follow it (``tilted``: draw from the tilted
    proposal and write the weights to ``weights``; otherwise ``weights`` is
    not touched). So is ``phase`` (:attr:`rfkernels.estimators.Kind.random_phase`:
    add the random-phase terms after the kind's terms), so that the offset
    kind runs trig's kernel, not a specialisation of its own. The per-trial functions (a loop over the m projections
    each) are called, not inlined into the kernel (``inline="never"``): that
    halves the compilation, while the leaf functions they call (Philox,
    Box--Muller, ``exp``) are still inlined into their loops, which LLVM
    vectorises (docs/performance.md). The kind enters as
    its flags and its ``terms`` (a registered scalar, bound to the global
    name ``_terms`` of the kernel's source); ``KIND_ID`` (:func:`kind_id`, from
    the kind's name and the source of its terms) is a closure constant so
    that each kind's kernel has its own cache entry.
    """
    BLOCK_IID = ENSEMBLE == IID

    def kernel(k0, k1, base, m, d, length, slope, curvature, offset, tilted, phase, tp, table, out,
               weights):
        if KIND_ID < 0:  # never: names the kind in the cache key
            return
        n = out.shape[0]
        n_batches = (n + BATCH - 1) // BATCH
        block = 1 if BLOCK_IID else d
        gamma = -1.0 / (d - 1.0) if ENSEMBLE == SIMPLEX else 0.0
        for batch in numba.prange(n_batches):
            p = np.empty(m)
            g = np.empty(m)
            q = np.empty(m)
            ok = np.empty(m, dtype=np.bool_)
            work = np.empty((3, m))
            for t in range(batch * BATCH, min(n, (batch + 1) * BATCH)):
                trial = base + np.uint64(t)
                comp = -1
                negative = False
                if tilted:
                    comp, negative = _choose(k0, k1, trial, m, tp[TP_ALPHA0], SYMMETRIC)
                if ENSEMBLE == ORTHOGONAL:
                    if COUPLED:
                        _projections_orthogonal_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table)
                    elif CHI:
                        _projections_orthogonal_chi(k0, k1, trial, m, d, p, g, q, ok, work)
                    else:
                        _projections_orthogonal_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
                elif ENSEMBLE == SIMPLEX:
                    if COUPLED:
                        _projections_simplex_antithetic(k0, k1, trial, m, d, p, g, q, ok, work, table)
                    elif CHI:
                        _projections_simplex_chi(k0, k1, trial, m, d, p, g, q, ok, work)
                    else:
                        _projections_simplex_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
                elif CHI:
                    _projections_iid_chi(k0, k1, trial, m, d, p, g, q, ok, work)
                else:
                    _projections_iid_fixed(k0, k1, trial, m, d, p, g, q, ok, work)
                if not CHI:
                    if tilted:
                        if comp >= 0:
                            _move_row(p, q, comp, negative, m, block, gamma, False, tp)
                        if SYMMETRIC:
                            _ratios_fixed_symmetric(p, g, m, tp)
                        else:
                            _ratios_fixed(p, g, m, tp)
                        weights[t] = _mixture(g, m, tp)
                    _scale_fixed(m, d, p)
                else:
                    if BLOCK_IID:
                        if tilted and comp >= 0:
                            p[comp] = p[comp] + (-tp[TP_SHIFT] if negative else tp[TP_SHIFT])
                        if NEEDS_W2:
                            _iid_chi_tails(k0, k1, trial, m, d, g, q, ok, work)
                            if tilted and comp >= 0:
                                q[comp] = q[comp] * tp[TP_WSCALE]
                            _add_squares(m, p, q)
                    else:
                        if tilted and comp >= 0:
                            _move_row(p, q, comp, negative, m, block, gamma, True, tp)
                        _scale_chi(m, p, q)
                    if tilted:  # p: the projections; q: |w_i|^2 (oprf)
                        if NEEDS_W2:
                            _ratios_chi_length(p, q, g, m, tp)
                        elif SYMMETRIC:
                            _ratios_chi_symmetric(p, g, m, tp)
                        else:
                            _ratios_chi(p, g, m, tp)
                        weights[t] = _mixture(g, m, tp)
                _terms(length, slope, curvature, offset, m, d, CHI, p, q)
                if phase:
                    _add_phases(k0, k1, trial, m, p)
                out[t] = _sum8(p, 0, m) / m

    return numba.njit(parallel=True, cache=True, error_model="numpy")(
        rebind(kernel, _terms=terms))


_KERNELS = {}
_selected = None


def kernel_for(ensemble, chi, kind, coupled=False):
    """The CPU kernel dispatcher of one (ensemble, norms, kind) (created, not compiled, on first request).

    One kernel serves both proposals (its argument ``tilted``).

    ``ensemble``: :data:`IID`, :data:`ORTHOGONAL` or :data:`SIMPLEX` (``False``/``True``: iid/orthogonal);
    ``kind``: see :func:`kind_entry`.
    """
    global _selected
    entry = kind_entry(kind)
    if int(ensemble) not in ENSEMBLE_CODES:
        raise ValueError(f"ensemble must be one of the codes {sorted(ENSEMBLE_CODES)}; "
                         f"got {ensemble!r}")
    key = cpu_kernel_key(ensemble, chi, entry, coupled)
    if key not in _KERNELS:
        _KERNELS[key] = _make_kernel(int(ensemble), bool(chi), bool(coupled), entry.needs_squared_norms,
                                     entry.symmetric_tilt, kind_id(entry), entry.scalar_terms)
    _selected = _KERNELS[key]
    return _selected


def _reduced_estimates_kernel(k0, k1, base, m, d, ensemble, chi, kind, length, out, oprf=None,
                              tilt=None, weights=None, table=None):
    """Normalised estimates of trials with counters ``base .. base + len(out) - 1``.

    Parameters
    ----------
    k0, k1 : uint32
        Philox key words.
    base : uint64
        Trial counter of ``out[0]`` (:func:`rfkernels.engine.trial_counters`).
    m, d : int64
        Projections and dimension.
    ensemble : int
        :data:`IID`, :data:`ORTHOGONAL` or :data:`SIMPLEX` (``False``/``True``: iid/orthogonal).
    chi : bool
        Norms (chi or fixed).
    kind : Kind, str or int
        A registered kind, its name, or a built-in code (:func:`kind_entry`).
    length : float64
        ``a``, the length of ``x + y`` (``x - y`` for trig).
    out : float64 array
        Filled in place.
    oprf : (float, float, float), optional
        The kind's constants ``(slope, curvature, offset)``
        (:func:`rfkernels.engine.oprf_constants` for oprf); required for kinds
        with parameters, ``(length, 0, 0)`` by default.
    tilt : rfkernels.engine.Tilt, optional
        Draw from this proposal; ``weights`` (float64, like ``out``) receives
        the weights.
    table : float64 array, optional
        Antithetic norms (with ``chi``): the chi-square quantile table of d
        (:func:`rfkernels.numerics.chi_quantile.quantile_table`); None:
        independent norms.
    """
    slope, curvature, offset = constants_args(kind, length, oprf)
    _, tp, weights = tilt_params(tilt, weights, out)  # symmetric follows from the kind
    kernel_for(ensemble, chi, kind, table is not None)(
        k0, k1, base, m, d, length, slope, curvature, offset, tilt is not None,
        kind_entry(kind).random_phase, tp, NO_TABLE if table is None else table, out, weights)


#: The table argument of the kernels with independent norms (read-only, as the real ones).
NO_TABLE = np.zeros((4, 1))
NO_TABLE.setflags(write=False)


#: How long the compile notice says a cold compile takes (the measurement: docs/performance.md).
COLD_COMPILE_NOTE = "about 10-25 s on 2 cores, per estimator and ensemble"


def compile_pending(dispatcher=None):
    """True if the next call of ``dispatcher`` compiles (nothing in memory or in the disk cache).

    ``dispatcher`` defaults to the kernel :func:`kernel_for` returned last.
    """
    if dispatcher is None:
        dispatcher = _selected
    try:
        if dispatcher.signatures:
            return False
        index = dispatcher._cache._cache_file._load_index()
        try:  # entries of this closure's constants (the specialisations share one index)
            mine = dispatcher._cache._index_key(None, dispatcher.targetctx.codegen())[1:]
            return not any(key[1:] == mine for key in index)
        except AttributeError:
            return not index
    except Exception:  # noqa: BLE001 - private Numba API; unknown means "may compile"
        return True


def reduced_estimates(k0, k1, base, m, d, ensemble, chi, kind, length, out, oprf=None, tilt=None,
                      weights=None, table=None, notice=True):
    """Fill ``out`` with the normalised estimates of trials ``base .. base + len(out) - 1``.

    With ``tilt`` (a :class:`rfkernels.engine.Tilt`) the trials come from
    that proposal and ``weights`` receives their weights. Runs the parallel
    kernel; before its first compilation in a process with an empty cache,
    one line saying so goes to stderr (unless ``notice`` is False), so a
    first run is not mistaken for a hang.
    """
    constants_args(kind, length, oprf)
    tilt_params(tilt, weights, out)
    kernel_for(ensemble, chi, kind, table is not None)
    if notice and compile_pending():
        print(f"rfkernels: compiling the Numba Monte Carlo kernel once ({COLD_COMPILE_NOTE}; "
              "cached for later runs) ...", file=sys.stderr, flush=True)
    _reduced_estimates_kernel(k0, k1, base, m, d, ensemble, chi, kind, length, out, oprf, tilt,
                              weights, table)


def _flush_if_dependencies_changed(dispatcher=None):
    """Empty ``dispatcher``'s on-disk cache if the sources it inlines changed since it was written."""
    from ..numerics import elementary, elementary_numba, scalar
    from . import rng_numba

    if dispatcher is None:  # the specialisations share one cache index (one closure)
        dispatcher = kernel_for(IID, True, "positive")

    try:
        digest = hashlib.sha256()
        for module in (elementary, elementary_numba, rng_numba, scalar):
            with open(module.__file__, "rb") as f:
                digest.update(f.read())
        stamp = digest.hexdigest()
        path = os.path.join(dispatcher._cache._cache_path, "cpu.dependencies.sha256")
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

