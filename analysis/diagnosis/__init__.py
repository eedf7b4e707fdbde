r"""Diagnose random-feature attention on the user's own queries, keys and values.

:func:`diagnose` answers the questions users ask about their own tensors
("FastAttention does not agree with standard attention", "the relative
error never falls below 100%"): how large :math:`|q + k|^2` gets on their
data, what each estimator's exact kernel error is there, what error it
gives the attention output, whether that beats the baselines every
estimator must beat, and which estimator and how many features reach a
target. Every registered kind whose entry does not refuse it
(:attr:`rfkernels.estimators.Kind.diagnose_reason`, or attention's refusal)
and every ensemble can be diagnosed; data-fitted kinds (OPRF's ``A*``, the
isotropic DERF kinds; the data-tilted kind, cross-fitted on the two halves of
the queries) are fitted on each head's queries and keys through
their registry entry (:attr:`rfkernels.estimators.Kind.fit`), so a kind
registered later appears without a change here.

Conventions
-----------
- **Temperature.** The kernel is :math:`\exp(\text{scale}\; q^\top k)`,
  ``scale`` = :math:`1/\sqrt d` by default as in Transformers. It is split
  symmetrically, :math:`q' = \sqrt{\text{scale}}\, q`,
  :math:`k' = \sqrt{\text{scale}}\, k` (the Performer's ``d^-1/4`` on both
  sides): the estimators' variance depends on the split, the kernel does not.
  Every |q + k|² reported is of the scaled vectors.
- **Heads.** Q (..., L, d), K (..., L_k, d), V (..., L_k, d_v); the leading
  axes broadcast (so one K may serve all heads) and each index of them is a
  head, numbered in C order (``head``; ``heads[h]["index"]`` is the tuple).
  Attention is bidirectional.
- **Kernel level** (exact, no Monte Carlo): over ``pairs`` query-key pairs
  drawn uniformly with replacement (all pairs when there are no more than
  ``pairs``), each estimator's exact relative MSE
  :math:`\mathrm{MSE}/\exp(2 q'^\top k')` at each m, from
  :func:`rfkernels.theory.exact_mse` in log space; quantiles are of
  the log, exponentiated. The heavy-tail share is the fraction of pairs with
  :math:`|q' + k'|^2 >` :data:`HEAVY_TAIL_U2` (MATH.md, "Monte Carlo error
  is heavy-tailed": there the squared error of positive-type estimates is
  roughly log-normal and sample MSEs converge slowly).
- **Attention level** (Monte Carlo): ``draws`` projection draws per (m,
  ensemble), each on ``queries`` query rows drawn without replacement
  afresh (all rows when L <= ``queries``) against every key, so each draw's
  MSE is unbiased for the MSE over all rows and the standard error
  (over draws, ddof = 1) covers both the projections and the rows. Every
  kind and preset at a draw uses the same W and rows (common random
  numbers). The exact output is :func:`rfkernels.attention.softmax_attention`
  on all rows; rows with a normaliser <= 0 are divided anyway
  (``nonpositive="divide"``, as an unguarded implementation does) and counted.
- **Baselines.** Uniform attention (every row the mean of V) and a zero
  output, their MSE exact over all rows. ``worse_than_uniform``: the
  attention MSE exceeds the uniform MSE by more than 2 standard errors.
- **First-order theory** (independent rows, the kinds with
  :attr:`rfkernels.estimators.Kind.first_order`,
  :func:`rfkernels.analysis.attention_mse_first_order`) on
  ``first_order_queries`` rows, exactly proportional to 1/m, with the
  normalisers' relative standard deviation ``normaliser_rel_sd`` from the
  same closed forms; see :data:`NORMALISER_SD_MAX` for its validity flag.
- **Advice** (:mod:`~rfkernels.analysis.diagnosis.advice`): from the
  pooled rows, the smallest feature budget r reaching ``target`` and the
  best estimator at each r.

Seeds: one :class:`numpy.random.SeedSequence` entropy (``meta["entropy"]``)
and the spawn keys of :data:`SPAWN_KEYS`.

Modules
-------
:mod:`~rfkernels.analysis.diagnosis.study` (the plan, each head's work, the
rows and :class:`Diagnosis`), :mod:`~rfkernels.analysis.diagnosis.views`
(what each kind runs on: its fitted parameters, a DERF kind's transformed
head, the first-order theory), :mod:`~rfkernels.analysis.diagnosis.rounding`
(the ``dtypes`` axis), :mod:`~rfkernels.analysis.diagnosis.advice` (pooling
over heads, the advice), :mod:`~rfkernels.analysis.diagnosis.report` (Markdown
and CSV) and :mod:`~rfkernels.analysis.diagnosis.inputs` (a user's ``.npz`` or
``.npy`` files, synthetic inputs).
"""

from .advice import DEFAULT_TARGET, EXTRAPOLATE_MAX, R_MAX, SLOPE_MIN, advise, pool_heads
from .inputs import SYNTHETIC_GAINS, LoadedQKV, load_qkv, synthetic_qkv
from .report import CSV_COLUMNS, markdown_report, null_reason, write_csv
from .rounding import precision_rows, rounding_errors
from .study import (
    DEFAULT_DRAWS,
    DEFAULT_ENSEMBLES,
    DEFAULT_FIRST_ORDER_QUERIES,
    DEFAULT_M,
    DEFAULT_PAIRS,
    DEFAULT_PRESETS,
    DEFAULT_QUERIES,
    HEAVY_TAIL_U2,
    NORMALISER_SD_MAX,
    SPAWN_KEYS,
    Diagnosis,
    attention_kinds,
    diagnose,
    diagnose_kinds,
)

__all__ = [
    "CSV_COLUMNS",
    "DEFAULT_DRAWS",
    "DEFAULT_ENSEMBLES",
    "DEFAULT_FIRST_ORDER_QUERIES",
    "DEFAULT_M",
    "DEFAULT_PAIRS",
    "DEFAULT_PRESETS",
    "DEFAULT_QUERIES",
    "DEFAULT_TARGET",
    "EXTRAPOLATE_MAX",
    "HEAVY_TAIL_U2",
    "NORMALISER_SD_MAX",
    "R_MAX",
    "SLOPE_MIN",
    "SPAWN_KEYS",
    "SYNTHETIC_GAINS",
    "Diagnosis",
    "LoadedQKV",
    "advise",
    "attention_kinds",
    "diagnose",
    "diagnose_kinds",
    "load_qkv",
    "markdown_report",
    "null_reason",
    "pool_heads",
    "precision_rows",
    "rounding_errors",
    "synthetic_qkv",
    "write_csv",
]
