r"""Estimates drawn from the scalar projections they depend on, exactly in distribution.

Every estimator of :mod:`rfkernels.features` depends on the projections
:math:`\omega_1..\omega_m` only through one scalar per feature,
:math:`\omega_i \cdot v` with :math:`v = x + y` (positive, hyperbolic) or
:math:`v = x - y` (trig). Writing :math:`\omega_i \cdot v = |v|\, p_i` with
:math:`p_i = \omega_i \cdot e` for a unit vector :math:`e`, the law of
:math:`(p_1..p_m)` does not depend on :math:`e` (every ensemble here is
rotation invariant), so a Monte Carlo trial can draw the :math:`p_i`
directly: O(m) random numbers, no d×d matrix and no QR. This module does
that with the counter-based generator of :mod:`rfkernels.rng`, written once
against an array namespace (NumPy or CuPy);
:mod:`rfkernels.engine.cpu` computes the same numbers in Numba.

Laws of the :math:`p_i` (MATH.md, "Sampling only what the estimate depends
on"). Orthogonal projections come in blocks of d rows, the last block
partial, blocks independent; within a block of size :math:`b \le d`, the
directions' coordinates along :math:`e` are the first b coordinates of a
uniform unit vector of :math:`R^d`, :math:`c_i = g_i / \sqrt{S}` with
:math:`S = \sum_{j \le b} g_j^2 + \chi^2_{d-b}`:

=====================  ==============================================================  ==========================================
ensemble, norms        :math:`p_i`                                                     :math:`|\omega_i|^2` (kind ``'oprf'`` only)
=====================  ==============================================================  ==========================================
iid, chi               :math:`g_i` (a standard normal)                                 :math:`g_i^2 + \chi^2_{d-1}` (same g_i)
iid, fixed             :math:`\sqrt{d}\, g_i / \sqrt{g_i^2 + \chi^2_{d-1}}` (blocks of one)  d
orthogonal, chi        :math:`R_i\, g_i / \sqrt{S}`, :math:`R_i \sim \chi_d` independent  :math:`R_i^2`
orthogonal, fixed      :math:`\sqrt{d}\, g_i / \sqrt{S}`                                  d
simplex, chi           :math:`R_i\, c_d (h_i - \bar h) / |h|`, :math:`R_i \sim \chi_d`    :math:`R_i^2`
simplex, fixed         :math:`\sqrt{d}\, c_d (h_i - \bar h) / |h|`                         d
=====================  ==============================================================  ==========================================

Simplex (Reid et al. 2023): within a block of :math:`b \le d` rows the
directions are :math:`Q s_i`, :math:`s_i = c_d (e_i - \mathbf 1/d)`,
:math:`c_d = \sqrt{d/(d-1)}`, Q a Haar rotation; so
:math:`Q s_i \cdot e = s_i \cdot Q^T e` with :math:`Q^T e = h/|h|` uniform on
the sphere, :math:`h \sim N(0, I_d)` (all d coordinates are drawn: the mean
:math:`\bar h` and the norm :math:`|h|` need them; only the first b are
used). O(d) per block, blocks independent, the norms independent of the
directions.

OPRF (kind ``'oprf'``, parameter A < 1/8, :math:`B = \sqrt{1 - 4A}`): the
pair's feature product is
:math:`(1-4A)^{d/2} \exp(2A|\omega|^2 + B\,\omega\cdot u - (|x|^2+|y|^2)/2)`,
:math:`u = x + y`, so with ``C = SM`` the normalised term of projection i is
:math:`\exp\big((B a p_i - a^2/2) + (2A|\omega_i|^2 + \tfrac d2 \log(1-4A))\big)`,
:math:`a = |u|`: it needs :math:`(p_i, |\omega_i|^2)`, from the table's last
column (the orthogonal and simplex rows' squared length is the chi radius
squared :math:`R_i^2` already drawn; iid rows with chi norms have
:math:`|\omega_i|^2 = g_i^2 + \chi^2_{d-1}`, :math:`g_i` the same normal as
:math:`p_i`). The constants are :func:`oprf_constants`, computed once on the
host; with A = 0 the terms are those of ``'positive'`` bit for bit (B = 1,
the added constant is +0.0).

Counter layout (key from the seed, :func:`rfkernels.rng.key_from_seed`).
Trial ``t`` of pair ``k`` of a batch uses the Philox trial counter
``(k << 40) | t`` (:func:`trial_counters`); within it, projection ``i`` uses

- ``g_i``: :func:`rfkernels.rng.normal` at slot ``i`` of :data:`STREAM_DIRECTION`
  (slots ``2j``, ``2j + 1`` share a block), except for orthogonal
  projections with chi norms, where ``(R_i^2, g_i)`` is
  :func:`rfkernels.rng.chi_square_with_normal` at slot ``i`` of
  :data:`STREAM_LENGTH` with ``d`` degrees of freedom (one Philox block
  gives the length and the direction coordinate);
- the chi-square tails: :func:`rfkernels.rng.chi_square` of
  :data:`STREAM_TAIL`, at slot ``i`` (iid, fixed norms, ``d - 1`` degrees
  of freedom) or at slot ``j`` for block ``j`` (orthogonal, ``d - b_j``
  degrees of freedom, drawn only for a partial block);
- simplex: coordinate ``k`` of block ``j``'s normal vector h is the
  normal of slot ``2 (j H + k // 2) + k % 2`` of :data:`STREAM_SIMPLEX`,
  ``H = (d + 1) // 2`` pairs per block (:func:`rfkernels.rng.normal_pair`
  at pair ``j H + k // 2``), and the squared chi norm of projection i is
  :func:`rfkernels.rng.chi_square` (d degrees of freedom) at slot ``i`` of
  :data:`STREAM_SIMPLEX_LENGTH`;
- oprf, iid projections with chi norms: the :math:`\chi^2_{d-1}` of
  :math:`|\omega_i|^2` at slot ``i`` of :data:`STREAM_OPRF_TAIL`;
- the tilted proposal (:class:`Tilt`): the trial's mixture component and
  direction from :func:`rfkernels.rng.uniform_pair` at slot 0 of
  :data:`STREAM_PROPOSAL`; every other variate is drawn as for the plain law
  and then moved.

The new streams leave every earlier path's numbers unchanged.

Normalisation. The estimates are returned divided by a scale ``C`` chosen
so that they stay O(1) where the estimate itself would overflow:
``C = SM = exp(x·y)`` for positive, hyperbolic and oprf features (the estimate is
then :math:`\frac1m\sum_i e^{a p_i - a^2/2}`, resp. its cosh form, with
:math:`a = |x + y|`) and ``C = Λ⁻¹ = exp((|x|² + |y|²)/2)`` for trig
features (the estimate is then :math:`\frac1m\sum_i \cos(a p_i)`,
:math:`a = |x - y|`); see :func:`normalisation`.

Sums over projections are taken in one fixed order (eight interleaved
partial sums, then a fixed tree; :func:`fixed_order_sum`) on every backend,
so NumPy, CuPy and Numba give the same bits for the positive and hyperbolic
estimates; trig features use each library's ``cos`` and agree to rounding.
"""

from __future__ import annotations

from .streams import (
    PAIR_SHIFT,
    MAX_PAIRS,
    MAX_TRIALS,
    STREAM_DIRECTION,
    STREAM_LENGTH,
    STREAM_OPRF_TAIL,
    STREAM_PROPOSAL,
    STREAM_SIMPLEX,
    STREAM_SIMPLEX_LENGTH,
    STREAM_TAIL,
    fixed_order_sum,
    trial_counters,
)
from .proposal import (
    DEFENSIVE_WEIGHT,
    PROPOSALS,
    Tilt,
    direction_peak,
    tilt_for,
    tilt_of,
    tilt_weights,
)
from .laws import (
    estimates_of,
    normalisation_of,
    Normalisation,
    REDUCED_ENSEMBLES,
    REDUCED_KINDS,
    normalisation,
    normalised_estimates,
    oprf_constants,
    scalar_projections,
    squared_norms,
)
from .dispatch import (
    DEFAULT_CHUNK,
    Engine,
    check_reduced,
    compile_kernel,
    default_chunk,
    engine_bytes,
    engine_namespace,
    estimate_chunks,
    gpu_kernel_available,
    kernel_key,
    kernel_pending,
)

__all__ = [
    "PAIR_SHIFT",
    "estimates_of",
    "normalisation_of",
    "DEFAULT_CHUNK",
    "DEFENSIVE_WEIGHT",
    "PROPOSALS",
    "MAX_PAIRS",
    "MAX_TRIALS",
    "REDUCED_ENSEMBLES",
    "REDUCED_KINDS",
    "STREAM_DIRECTION",
    "STREAM_LENGTH",
    "STREAM_OPRF_TAIL",
    "STREAM_PROPOSAL",
    "STREAM_SIMPLEX",
    "STREAM_SIMPLEX_LENGTH",
    "STREAM_TAIL",
    "Engine",
    "Normalisation",
    "Tilt",
    "check_reduced",
    "compile_kernel",
    "default_chunk",
    "direction_peak",
    "engine_bytes",
    "engine_namespace",
    "estimate_chunks",
    "fixed_order_sum",
    "gpu_kernel_available",
    "kernel_key",
    "kernel_pending",
    "normalisation",
    "normalised_estimates",
    "oprf_constants",
    "scalar_projections",
    "squared_norms",
    "tilt_for",
    "tilt_of",
    "tilt_weights",
    "trial_counters",
]
