r"""Attention-level error of random-feature estimators: the Figure 4 study of [1]_.

Kernel-level MSE (:mod:`rfkernels.theory`) says how well one
:math:`\exp(q^\top k)` is estimated; here the estimates are summed over
L keys and renormalised, and what is measured is the error of the attention
output itself:

.. math::

    \mathrm{MSE} = \frac{1}{L d_v} \sum_{i, c}
        \bigl(\widehat{\operatorname{Att}}_{ic} - \operatorname{Att}_{ic}\bigr)^2,

one number per random input (a *sample*) and projection draw, averaged over
samples for each (m, kind, ensemble).

Input distribution
------------------
The paper only says "appropriately normalized random matrix input data".
:func:`attention_inputs` draws, independently,

.. math::

    q_i,\ k_j \sim N\!\bigl(0, \tfrac{\sigma^2}{d} I_d\bigr), \qquad
    v_j \sim N(0, I_{d_v}),\ d_v = d,

in the convention of :mod:`rfkernels.attention` (kernel :math:`\exp(q^\top k)`,
temperature already absorbed), with :math:`\sigma` = ``input_scale``. So
:math:`E|q|^2 = \sigma^2` whatever d, and the logits :math:`q^\top k` have
standard deviation about :math:`\sigma^2/\sqrt d`. Raw N(0, 1) entries
divided by the Transformer's :math:`d^{1/4}` are the case
:math:`\sigma = d^{1/4}` (2 at d = 16).

What the data shows
-------------------
The paper [1]_ reports positive features about 100x below trigonometric ones
at every m in 2..128 and orthogonal projections below iid ones everywhere.
Neither holds at every input scale; as conditions on σ and m (L = 4096,
d = 16, 15 inputs, seed 0, measured with
``rfkernels figures --only attention_regime``, tables
``attention_regime_rows.csv`` and ``attention_regime_comparisons.csv``):

- **Claim 1, positive below trig**, holds at small m for σ >= 0.75 and at
  every m <= 128 only for σ >= 1.5. At σ = 1 (the default) it holds for
  m <= 16 iid (trig/positive 3.7e3 at m = 2, 2.2e2 at m = 16) and m <= 8
  orthogonal (3.1e4 at m = 2), and reverses from m = 32 iid (0.63, 0.34 at
  m = 128) and m = 16 orthogonal (0.28, 0.14 at m = 128): trig features
  are noisy at small m because their normalisers are noisy and often
  negative, and better once m is large enough. At σ = 0.5 trig is below
  positive at every m >= 4 (iid) and every m (orthogonal). At σ = 1.5
  positive is below trig at every m <= 128 (ratios >= 3.3), but its MSE
  (orthogonal: 1.1e-3 at m = 2, 3.2e-4 at m = 128) is not below the exact
  outputs' mean square (3.2e-4: the MSE of returning zeros) and its local
  slope of log MSE against log m is -0.53 to -0.03, far from 1/m.
- **Claim 2, orthogonal below iid**, holds for trig and hyperbolic
  features at m >= 8 where their MSE falls like 1/m: iid/orthogonal about
  10 for trig at σ <= 0.5 and about 3 at σ = 1; for hyperbolic 1.4 to 10 at
  σ <= 0.75, and at σ = 1 significant only at m = 16, 32 and 256. For positive features it is small: orthogonal/iid below 1
  from m = 8 to 64 at σ <= 1, significantly (paired z > 2) only at
  m = 16, 32 (0.56 to 0.75); at m = 2, 4 it is 1.1 to 1.3 (not significant) and at m >= 64 and
  σ >= 1.25 orthogonal is above iid (1.7 at σ = 1.5, m = 256). "Orthogonal
  beats iid most at small m" is false for positive features.
- **1/m.** The positive MSE falls like 1/m (local slope within
  :data:`SLOPE_TOLERANCE` of -1) for σ <= 0.75 at m <= 128; at σ = 1 the
  slope is -0.6 to -0.94, at σ >= 1.5 near 0: the squared error is roughly
  log-normal with a log-variance growing like :math:`|q + k|^2 \approx 2\sigma^2`
  (MATH.md), and one input can carry most of a mean (``heavy_tail``: one
  input above :data:`HEAVY_TAIL_SHARE` of it).

So no input scale makes both claims hold at every m of the paper's plot:
σ = 1.5 gives claim 1 everywhere, with MSEs no better than zeros and no
orthogonal gain for positive features. Figure 4 at that σ and at σ = 1 is
``rfkernels figures --only figure4``.

The seed summary's levels (positive about 1e-8 at m = 32 and 1e-10 at
m = 128, trig 1e-6 and 1e-7) are doubtful: a 100x drop over a 4x increase
of m is not the 1/m behaviour of any series here. The trig levels are met
near σ = 0.5 (iid 7.8e-7 at m = 32, 1.9e-7 at m = 128); the positive ones
by no σ of the map (σ = 0.25, orthogonal: 4.5e-7 and 1.1e-7), and at the
scales where positive features would be that small, trig features are
below them.

The first-order theory (:func:`rfkernels.analysis.attention_mse_first_order`,
iid) is the dotted line of the attention figures: exactly 1/m, it follows
Monte Carlo where the expansion holds (small σ, m large enough that trig
normalisers stay positive) and is far above it where E[g g'] is dominated
by rare huge features (positive and hyperbolic at σ >= 1).

Deterministic feature maps
--------------------------
:func:`feature_map_attention_mse` measures, on the same inputs (same seed,
same spawn keys), the error of linear attention with the deterministic maps
of Schlag et al. (identity, ELU+1, DPFP-ν; :func:`rfkernels.linear_attention`,
attention normalisation). Nothing is random but the inputs: the error is a
bias, and its spread is over inputs only. Measured with
``rfkernels figures --only zoo_attention`` (L = 4096, d = 16, 15 samples,
seed 0; the exact outputs' mean square is 2.4e-4 at σ = 1, 6.9e-4 at σ = 2):

- σ = 1: ELU+1 (d_dot = 16) 1.6e-5, below FAVOR+ with m = 16 (5.3e-5
  orthogonal, 8.8e-5 iid) and matched by FAVOR+ only at m = 128 (1.3e-5);
  DPFP-1/2/3 (d_dot = 32/64/96) 5.7e-4, 3.4e-4, 2.6e-4: no better than
  returning zeros.
- σ = 2: ELU+1 4.5e-4, DPFP-1/2/3 6.3e-4, 3.8e-4, 3.0e-4; FAVOR+ 1.9e-3 to
  8.6e-3 for m = 16 to 256, above the outputs' mean square (its heavy tail,
  see above).

Seeds
-----
All randomness derives from one :class:`numpy.random.SeedSequence` entropy
(recorded in the table's metadata) through fixed spawn keys:

- inputs of sample s: ``SeedSequence(entropy, spawn_key=(0, s))``;
- projections of (s, m, kind, ensemble):
  ``SeedSequence(entropy, spawn_key=(1, s, m, seed_index(kind), seed_index(ensemble)))``,
  the frozen ``seed_index`` of the kind's and the ensemble's registry entries
  (:func:`~rfkernels.analysis.attention_data.seed_index`), recorded in the
  table's metadata.

Every number therefore depends only on its own identity, not on the order
of the loops or on which other m, kinds or ensembles were requested.

Modules
-------
This module gathers the study's public names from where they live:
:mod:`~rfkernels.analysis.attention_data` (inputs, seeds, tables),
:mod:`~rfkernels.analysis.favor_study` (:func:`attention_mse`),
:mod:`~rfkernels.analysis.lean_favor` (its NumPy FAVOR passes),
:mod:`~rfkernels.analysis.deterministic_attention` (:func:`feature_map_attention_mse`)
and :mod:`~rfkernels.analysis.regime_map` (:func:`attention_regime`).

References
----------
.. [1] K. Choromanski, V. Likhosherstov, D. Dohan, X. Song, A. Gane,
   T. Sarlos, P. Hawkins, J. Davis, A. Mohiuddin, L. Kaiser, D. Belanger,
   L. Colwell and A. Weller, "Rethinking Attention with Performers",
   ICLR 2021, Figure 4 (L = 4096, d = 16, 15 samples).
   https://arxiv.org/abs/2009.14794
"""

from __future__ import annotations

from .attention_data import (
    DEFAULT_ENSEMBLES,
    ensembles_for,
    DEFAULT_INPUT_SCALE,
    DEFAULT_KINDS,
    INPUT_DISTRIBUTION,
    AttentionMSETable,
    attention_bytes,
    attention_inputs,
    study_inputs,
)
from .deterministic_attention import FeatureMapMSETable, feature_map_attention_mse
from .favor_study import attention_mse
from .lean_favor import LeanFavor
from .regime_map import (
    CLAIM_Z,
    HEAVY_TAIL_SHARE,
    SLOPE_TOLERANCE,
    AttentionRegime,
    attention_regime,
    attention_regime_from_tables,
    local_slopes,
)

__all__ = [
    "CLAIM_Z",
    "DEFAULT_ENSEMBLES",
    "ensembles_for",
    "DEFAULT_INPUT_SCALE",
    "DEFAULT_KINDS",
    "HEAVY_TAIL_SHARE",
    "INPUT_DISTRIBUTION",
    "SLOPE_TOLERANCE",
    "AttentionMSETable",
    "AttentionRegime",
    "FeatureMapMSETable",
    "LeanFavor",
    "attention_bytes",
    "attention_inputs",
    "attention_mse",
    "attention_regime",
    "attention_regime_from_tables",
    "feature_map_attention_mse",
    "local_slopes",
    "study_inputs",
]
