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
  ``SeedSequence(entropy, spawn_key=(1, s, m, KINDS.index(kind), ENSEMBLES.index(ensemble)))``.

Every number therefore depends only on its own identity, not on the order
of the loops or on which other m, kinds or ensembles were requested.

References
----------
.. [1] K. Choromanski, V. Likhosherstov, D. Dohan, X. Song, A. Gane,
   T. Sarlos, P. Hawkins, J. Davis, A. Mohiuddin, L. Kaiser, D. Belanger,
   L. Colwell and A. Weller, "Rethinking Attention with Performers",
   ICLR 2021, Figure 4 (L = 4096, d = 16, 15 samples).
   https://arxiv.org/abs/2009.14794
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import time

import numpy as np

from rfkernels.attention import (
    FAVOR_BLOCK,
    NONPOSITIVE_POLICIES,
    SOFTMAX_BLOCK_ELEMENTS,
    favor_attention,
    linear_attention,
    softmax_attention,
)
from rfkernels.backends import array_namespace, check_backend
from rfkernels.features import FEATURE_MAPS, feature_dimension
from rfkernels.projections import draw_projections
from rfkernels.validation import (
    ENSEMBLES,
    KINDS,
    check_bool,
    check_choice,
    check_ensemble,
    check_int,
    check_int_array,
    check_kind,
    check_memory,
    check_norms,
    check_seed,
    seed_sequence,
)

__all__ = [
    "CLAIM_Z",
    "DEFAULT_ENSEMBLES",
    "DEFAULT_INPUT_SCALE",
    "DEFAULT_KINDS",
    "HEAVY_TAIL_SHARE",
    "INPUT_DISTRIBUTION",
    "SLOPE_TOLERANCE",
    "AttentionMSETable",
    "AttentionRegime",
    "FeatureMapMSETable",
    "attention_bytes",
    "attention_inputs",
    "attention_mse",
    "attention_regime",
    "attention_regime_from_tables",
    "feature_map_attention_mse",
    "local_slopes",
    "study_inputs",
]

#: Default σ of :func:`attention_inputs`: E|q|² = E|k|² = 1.
DEFAULT_INPUT_SCALE = 1.0
#: Default kinds of the study: the paper's three (not ``rfkernels.validation.KINDS``,
#: which may grow; seeds use ``KINDS.index(kind)``, stable because kinds are appended).
DEFAULT_KINDS = ("trig", "positive", "hyperbolic")
#: Default ensembles of the study.
DEFAULT_ENSEMBLES = ("iid", "orthogonal")
#: One-line description of the inputs, recorded in every table's metadata.
INPUT_DISTRIBUTION = (
    "q_i, k_j ~ N(0, (input_scale^2/d) I_d) iid, v_j ~ N(0, I_d) iid; "
    "kernel exp(q.k) (temperature absorbed)"
)

_SPAWN_INPUTS = 0
_SPAWN_PROJECTIONS = 1


def _check_scale(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive real number; got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number; got {value!r}")
    return value


def _entropy(seed):
    """The root entropy behind ``seed`` (:func:`rfkernels.validation.seed_sequence`, root=True)."""
    return seed_sequence(seed, root=True).entropy


#: Kinds whose bidirectional NumPy passes go through :class:`_LeanFavor`.
_LEAN_KINDS = ("trig", "positive", "hyperbolic")


def _one_blas_thread():
    """BLAS limited to one thread (threadpoolctl, a dependency).

    The study's matrix products are skinny ((L, 16) by (16, 2m), (L, 2m) by
    (2m, 17)); on 2 CPUs threaded BLAS made them 3 to 6 times slower
    (L = 4096, m = 16..256, measured with OPENBLAS_NUM_THREADS=1 against the default).
    """
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


class _LeanFavor:
    """Bidirectional FAVOR on NumPy for one input (Q, K, V), whole sequence at once.

    The study's inner loop: the same computation as
    :func:`rfkernels.attention.favor_attention` (equal to rounding, tested),
    with |k|²/2 and [V, 1] computed once per input and reused for every
    projection matrix, all L rows in one pass (no row blocks: the study's
    ``attention_bytes`` check covers the (L, 2m) feature arrays), and the
    same stabilisation: positive per-row / per-key-set maxima subtracted in
    the exponent, trig keys scaled by exp(|k|²/2 − max), query factors
    dropped. ``output(w, kind, nonpositive)`` returns ``(output, rows with a
    normaliser <= 0)`` under the policies of ``favor_attention``.
    """

    def __init__(self, q, k, v):
        self.q, self.k = q, k
        self.half_k = 0.5 * np.sum(k * k, axis=1)
        self.v1 = np.concatenate([v, np.ones((v.shape[0], 1))], axis=1)
        self.trig_scale = np.exp(self.half_k - self.half_k.max())[:, None]

    def _num_den(self, w, kind):
        pq = self.q @ w.T
        pk = self.k @ w.T
        if kind == "trig":
            sk, ck = np.sin(pk), np.cos(pk)
            sk *= self.trig_scale
            ck *= self.trig_scale
            out = np.sin(pq) @ (sk.T @ self.v1) + np.cos(pq) @ (ck.T @ self.v1)
        elif kind == "positive":
            lk = pk - self.half_k[:, None]
            phik = np.exp(lk - lk.max())
            phiq = np.exp(pq - pq.max(axis=1, keepdims=True))
            out = phiq @ (phik.T @ self.v1)
        else:  # hyperbolic: features exp(+-w.x - |x|^2/2)
            abs_k = np.abs(pk) - self.half_k[:, None]
            shift_k = abs_k.max()
            top_q = np.abs(pq).max(axis=1, keepdims=True)
            plus = np.exp(pk - self.half_k[:, None] - shift_k).T @ self.v1
            minus = np.exp(-pk - self.half_k[:, None] - shift_k).T @ self.v1
            out = np.exp(pq - top_q) @ plus + np.exp(-pq - top_q) @ minus
        return out[:, :-1], out[:, -1]

    def output(self, w, kind, nonpositive):
        with np.errstate(over="ignore", under="ignore", invalid="ignore", divide="ignore"):
            num, den = self._num_den(w, kind)
            bad = den <= 0
            n_bad = int(np.sum(bad))
            if n_bad and nonpositive == "raise":
                raise FloatingPointError(
                    f"attention_mse(kind={kind!r}): {n_bad} row(s) have a non-positive normaliser "
                    "sum_j phi(q_i).phi(k_j) <= 0; pass nonpositive='nan' or 'divide'"
                )
            zero = den == 0 if nonpositive == "divide" else bad
            out = num / np.where(zero, 1.0, den)[:, None]
            out[zero] = np.nan
        finite = np.all(np.isfinite(out), axis=1)
        if not bool(np.all(finite | bad)):
            raise FloatingPointError(
                f"attention_mse(kind={kind!r}) overflowed in rows with a positive normaliser; "
                "the inputs or projections are too large"
            )
        out[bad & ~finite] = np.nan
        return out, n_bad


def attention_inputs(L, d, *, input_scale=DEFAULT_INPUT_SCALE, seed=None):
    r"""Random Q, K, V of the Figure 4 study (see the module docstring).

    Parameters
    ----------
    L : int
        Sequence length (rows of Q, K and V), >= 1.
    d : int
        Dimension of queries, keys and values, >= 1.
    input_scale : float, default :data:`DEFAULT_INPUT_SCALE`
        σ > 0: rows of Q and K are :math:`N(0, (\sigma^2/d) I_d)`.
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator

    Returns
    -------
    Q, K, V : ndarray of shape (L, d), float64
        Drawn in that order from one generator, each as ``standard_normal((L, d))``.
    """
    L = check_int(L, "L")
    d = check_int(d, "d")
    scale = _check_scale(input_scale, "input_scale")
    rng = check_seed(seed)
    check_memory(8 * 4 * L * d, f"attention_inputs(L={L}, d={d}): three L x d arrays")
    s = scale / math.sqrt(d)
    q = s * rng.standard_normal((L, d))
    k = s * rng.standard_normal((L, d))
    v = rng.standard_normal((L, d))
    return q, k, v


def attention_bytes(L, d, m):
    """Estimated peak bytes of one sample of :func:`attention_mse` (an upper estimate).

    Q, K, V, the exact and FAVOR outputs and their difference (six L×d
    arrays); the exact attention's block of logits (about
    ``SOFTMAX_BLOCK_ELEMENTS``, at least one row of L); FAVOR's block
    features and state for r = 2m features; the (m, d) projections.
    """
    r = 2 * m
    rows = min(FAVOR_BLOCK, L)
    logits = min(L, max(1, SOFTMAX_BLOCK_ELEMENTS // L)) * L
    lean = 6 * L * r  # _LeanFavor: projections, features and their products for all L rows
    return 8 * (6 * L * d + 3 * logits + max(6 * rows * r + 2 * rows * rows, lean) + 2 * r * d
                + 4 * m * d)


class AttentionMSETable:
    """Tidy result of :func:`attention_mse`: one row per (m, kind, ensemble).

    Attributes
    ----------
    rows : list of dict
        Keys :data:`COLUMNS`, in grid order (m, then kind, then ensemble as
        requested).
    per_sample_mse : numpy.ndarray of shape (len(rows), samples)
        The MSE of every sample, row for row (NaN where a sample's output was
        not finite, see ``samples_nonfinite``).
    meta : dict
        Parameters, seed entropy and spawn-key scheme, input distribution,
        mean square of the exact outputs, timings (JSON-serialisable).
    """

    #: Columns of :attr:`rows` and of the CSV, in order.
    COLUMNS = (
        "L", "d", "m", "r", "kind", "ensemble", "norms", "causal", "samples",
        "mse_mean", "mse_std", "mse_se", "mse_max_share", "samples_nonfinite",
        "nonpositive_rows_mean",
    )

    def __init__(self, rows, per_sample_mse, meta):
        self.rows = rows
        self.per_sample_mse = per_sample_mse
        self.meta = meta

    def __len__(self):
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def select(self, **where):
        """Rows whose columns equal the given values, e.g. ``select(kind="trig")``."""
        unknown = set(where) - set(self.COLUMNS)
        if unknown:
            raise ValueError(f"unknown column(s) {sorted(unknown)}; columns are {self.COLUMNS}")
        return [r for r in self.rows if all(r[k] == v for k, v in where.items())]

    def to_csv(self, file=None):
        """Write the rows as CSV to a path or text file; with no argument return the text."""
        if file is None:
            buf = io.StringIO()
            self._write(buf)
            return buf.getvalue()
        if hasattr(file, "write"):
            self._write(file)
            return None
        with open(file, "w", newline="") as fh:
            self._write(fh)
        return None

    def _write(self, fh):
        writer = csv.DictWriter(fh, fieldnames=self.COLUMNS, lineterminator="\n")
        writer.writeheader()
        for row in self.rows:
            writer.writerow({k: ("" if v is None else repr(v) if isinstance(v, float) else v)
                             for k, v in row.items()})


def _check_names(values, name, check, default):
    if values is None:
        return tuple(default)
    if isinstance(values, str):
        values = (values,)
    values = tuple(values)
    if not values:
        raise ValueError(f"{name} must name at least one choice; got an empty sequence")
    for v in values:
        check(v)
    if len(set(values)) != len(values):
        raise ValueError(f"{name} must not repeat a choice; got {values!r}")
    return values


def _distinct_ints(values, name):
    """A non-empty list of distinct integers >= 1 from one integer or a 1-D sequence."""
    arr = check_int_array(values, name)
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{name} must be an integer or a non-empty 1-D sequence; got {values!r}")
    out = [int(v) for v in arr.reshape(-1)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value; got {values!r}")
    return out


def _sample_summary(values, n_bad_rows):
    """Columns of one grid point from its per-input MSEs: count, mean, sd, se, largest share."""
    finite = values[np.isfinite(values)]
    n = finite.size
    std = float(finite.std(ddof=1)) if n >= 2 else None
    total = float(finite.sum()) if n else 0.0
    return {
        "samples": n,
        "mse_mean": float(finite.mean()) if n else None,
        "mse_std": std,
        "mse_se": None if std is None else std / math.sqrt(n),
        "mse_max_share": float(finite.max() / total) if total > 0 else None,
        "samples_nonfinite": int(values.size - n),
        "nonpositive_rows_mean": float(n_bad_rows.mean()),
    }


def attention_mse(
    L,
    d,
    m_values,
    kinds=None,
    ensembles=None,
    *,
    samples=15,
    seed=0,
    input_scale=DEFAULT_INPUT_SCALE,
    norms="chi",
    causal=False,
    nonpositive="divide",
    backend="numpy",
    progress=None,
):
    r"""MSE of FAVOR attention against exact softmax attention (Figure 4 of [1]_).

    For each sample s the inputs come from :func:`attention_inputs` and the
    exact output from :func:`rfkernels.attention.softmax_attention` (computed
    once per sample); for each (m, kind, ensemble) one projection matrix is
    drawn and :func:`rfkernels.attention.favor_attention` is compared to it.

    Parameters
    ----------
    L : int
        Sequence length, >= 1 (paper: 4096).
    d : int
        Dimension of queries, keys and values, >= 1 (paper: 16).
    m_values : int or sequence of int
        Numbers of projections, each >= 1; m > d uses independent orthogonal
        blocks of d rows (the last partial). Feature dimension r = m
        (positive) or 2m (trig, hyperbolic).
    kinds : sequence of {"trig", "positive", "hyperbolic", "oprf"}, optional
        Default: the paper's three. ``"oprf"`` runs with ``A="auto"`` (the
        optimal A* for the mean :math:`|q_i + k_j|^2/d` over all pairs of
        each input, :func:`rfkernels.features.oprf_auto_a`).
    ensembles : sequence of {"iid", "orthogonal", "orthogonal-unfixed-qr"}, optional
        Default ``("iid", "orthogonal")``.
    samples : int, default 15
        Random inputs, >= 2 (for a standard deviation).
    seed : None, int or numpy.random.SeedSequence, default 0
        Root of all randomness; see the module docstring for the spawn keys.
        None draws fresh entropy, which is recorded in ``meta["entropy"]``.
    input_scale : float, default :data:`DEFAULT_INPUT_SCALE`
        σ of :func:`attention_inputs`: E|q|² = E|k|² = σ².
    norms : {"chi", "fixed"}, default "chi"
        Row norms of the projections (:func:`rfkernels.draw_projections`).
    causal : bool, default False
        Causal (unidirectional) attention instead of bidirectional.
    nonpositive : {"divide", "nan", "raise"}, default "divide"
        Passed to :func:`favor_attention`. ``"divide"`` measures the plain
        quotient N/D (trig rows with a negative normaliser keep it, and
        dominate the trig MSE at small m); ``"nan"`` makes every sample with
        such a row non-finite, so it drops out of the statistics and is
        counted in ``samples_nonfinite``. The number of such rows is
        reported either way.
    backend : {"numpy", "cupy"}, default "numpy"
        Where the attention is computed (inputs and projections are drawn
        with NumPy, so the numbers do not depend on it beyond rounding).
    progress : callable, optional
        Called as ``progress(n)`` after each unit of work: n = 1 for an exact
        attention and for each FAVOR attention, ``samples·(1 + len(m)·len(kinds)·len(ensembles))``
        in all.

    Returns
    -------
    AttentionMSETable
        One row per (m, kind, ensemble) with ``mse_mean`` (mean over finite
        samples), ``mse_std`` (ddof = 1), ``mse_se`` (= std/sqrt(n)),
        ``mse_max_share`` (largest sample MSE over their sum: near 1/n when
        the samples agree, near 1 when one dominates; MATH.md's tail
        warning applies to positive features at large σ), ``samples``
        (finite samples used), ``samples_nonfinite`` (samples whose output
        held NaN, e.g. a normaliser exactly 0 under ``"divide"``, or any
        reported row under ``"nan"``), and ``nonpositive_rows_mean`` (rows
        with a normaliser <= 0 per sample, averaged).

    Raises
    ------
    ValueError, TypeError
        Bad L, d, m_values, kinds, ensembles, samples, seed, input_scale,
        norms, causal, nonpositive or backend, before any work.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Figure 4. https://arxiv.org/abs/2009.14794
    """
    L = check_int(L, "L")
    d = check_int(d, "d")
    ms = _distinct_ints(m_values, "m_values")
    kinds = _check_names(kinds, "kinds", check_kind, DEFAULT_KINDS)
    ensembles = _check_names(ensembles, "ensembles", check_ensemble, DEFAULT_ENSEMBLES)
    samples = check_int(samples, "samples", minimum=2)
    entropy = _entropy(seed)
    scale = _check_scale(input_scale, "input_scale")
    check_norms(norms)
    causal = check_bool(causal, "causal")
    check_choice(nonpositive, "nonpositive", NONPOSITIVE_POLICIES)
    check_choice(backend, "backend", ("numpy", "cupy"))
    check_backend(backend)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    xp = array_namespace(backend)
    if backend == "numpy":  # CuPy's allocator raises its own MemoryError on the device
        check_memory(attention_bytes(L, d, max(ms)),
                     f"an attention study with L={L}, d={d} and m up to {max(ms)}")

    grid = [(m, kind, ens) for m in ms for kind in kinds for ens in ensembles]
    mse = np.full((len(grid), samples), np.nan)
    n_bad_rows = np.zeros((len(grid), samples))
    exact_ms = np.empty(samples)
    t_exact = t_favor = 0.0

    for s in range(samples):
        q, k, v = (xp.asarray(a) for a in study_inputs(L, d, s, input_scale=scale, seed=entropy))
        t0 = time.perf_counter()
        exact = softmax_attention(q, k, v, causal=causal)
        exact_ms[s] = float(xp.mean(exact * exact))
        t_exact += time.perf_counter() - t0
        if progress is not None:
            progress(1)
        lean = _LeanFavor(q, k, v) if (backend == "numpy" and not causal) else None
        with _one_blas_thread():
            for g, (m, kind, ens) in enumerate(grid):
                key = (_SPAWN_PROJECTIONS, s, m, KINDS.index(kind), ENSEMBLES.index(ens))
                w = draw_projections(
                    m, d, ensemble=ens, norms=norms, backend=backend,
                    seed=np.random.SeedSequence(entropy, spawn_key=key),
                )
                t0 = time.perf_counter()
                if lean is not None and kind in _LEAN_KINDS:
                    output, n_bad = lean.output(w, kind, nonpositive)
                else:
                    res = favor_attention(q, k, v, w, kind, causal=causal, nonpositive=nonpositive,
                                          A="auto" if kind == "oprf" else None)
                    output, n_bad = res.output, res.n_nonpositive_denominators
                err = output - exact
                mse[g, s] = float(xp.mean(err * err))
                t_favor += time.perf_counter() - t0
                n_bad_rows[g, s] = n_bad
                if progress is not None:
                    progress(1)

    rows = []
    for g, (m, kind, ens) in enumerate(grid):
        rows.append({
            "L": L, "d": d, "m": m, "r": feature_dimension(kind, d, m=m),
            "kind": kind, "ensemble": ens, "norms": norms, "causal": bool(causal),
            **_sample_summary(mse[g], n_bad_rows[g]),
        })

    meta = {
        "study": "attention_mse",
        "L": L, "d": d, "d_v": d, "m_values": ms, "kinds": list(kinds),
        "ensembles": list(ensembles), "samples": samples, "norms": norms,
        "causal": bool(causal), "nonpositive": nonpositive, "backend": backend,
        "input_scale": scale, "input_distribution": INPUT_DISTRIBUTION,
        "kernel": "exp(q.k); temperature absorbed into Q and K",
        "mse": "mean over the L x d_v output entries of (favor - exact)^2, per sample",
        "entropy": entropy,
        "spawn_keys": {
            "inputs": "(0, sample)",
            "projections": "(1, sample, m, KINDS.index(kind), ENSEMBLES.index(ensemble))",
            "KINDS": list(KINDS), "ENSEMBLES": list(ENSEMBLES),
        },
        "exact_output_mean_square": [float(x) for x in exact_ms],
        "seconds_exact": t_exact,
        "seconds_favor": t_favor,
    }
    return AttentionMSETable(rows, mse, meta)


class FeatureMapMSETable(AttentionMSETable):
    """Tidy result of :func:`feature_map_attention_mse`: one row per deterministic map.

    Same attributes and methods as :class:`AttentionMSETable`, other columns.
    """

    #: Columns of :attr:`rows` and of the CSV, in order.
    COLUMNS = (
        "L", "d", "kind", "nu", "d_dot", "causal", "input_scale", "samples",
        "mse_mean", "mse_std", "mse_se", "mse_max_share", "samples_nonfinite",
        "nonpositive_rows_mean",
    )


def feature_map_attention_mse(
    L,
    d,
    kinds=("elu1", "dpfp"),
    nu_values=(1, 2, 3),
    *,
    samples=15,
    seed=0,
    input_scale=DEFAULT_INPUT_SCALE,
    causal=False,
    nonpositive="divide",
    progress=None,
):
    r"""Attention-output MSE of the deterministic feature maps against exact softmax attention.

    The inputs are those of :func:`attention_mse` with the same ``seed``
    (spawn key ``(0, sample)``), so its FAVOR rows and these rows are paired
    by input. For each input the exact output is
    :func:`rfkernels.softmax_attention` and each map's output is
    :func:`rfkernels.linear_attention` with attention normalisation. There is
    no projection draw: each map's error is a bias, and ``mse_std`` /
    ``mse_se`` describe the spread over inputs only.

    Parameters
    ----------
    L, d : int
        Sequence length and dimension (d_v = d), >= 1.
    kinds : sequence of {"identity", "elu1", "dpfp"}, default ("elu1", "dpfp")
        Deterministic maps (:data:`rfkernels.FEATURE_MAPS`).
    nu_values : int or sequence of int, default (1, 2, 3)
        DPFP's ν, one row each (1 <= ν <= 2d - 1); d_dot = 2dν.
    samples : int, default 15
        Random inputs, >= 2.
    seed : None, int or numpy.random.SeedSequence, default 0
        As in :func:`attention_mse`.
    input_scale : float, default :data:`DEFAULT_INPUT_SCALE`
        σ: E|q|² = E|k|² = σ².
    causal : bool, default False
    nonpositive : {"divide", "nan", "raise"}, default "divide"
        Rows whose normaliser is <= 0 (identity features; DPFP rows whose
        features share no support with any key's), as in :func:`attention_mse`.
    progress : callable, optional
        ``progress(1)`` after each exact attention and each map's attention.

    Returns
    -------
    FeatureMapMSETable
        One row per map (DPFP: per ν), columns :attr:`FeatureMapMSETable.COLUMNS`;
        ``meta`` holds the parameters, entropy, exact outputs' mean square
        and timings.

    Raises
    ------
    ValueError, TypeError
        Bad arguments (a random kind in ``kinds``: use :func:`attention_mse`),
        before any work.
    """
    L = check_int(L, "L")
    d = check_int(d, "d")
    kinds = _check_names(kinds, "kinds", lambda k: check_choice(k, "kinds must be among "
                                                                   f"{FEATURE_MAPS}; kind", FEATURE_MAPS),
                         FEATURE_MAPS)
    nus = _distinct_ints(nu_values, "nu_values")
    if max(nus) > 2 * d - 1:
        raise ValueError(f"nu_values must be <= 2d - 1 = {2 * d - 1}; got {max(nus)}")
    samples = check_int(samples, "samples", minimum=2)
    entropy = _entropy(seed)
    scale = _check_scale(input_scale, "input_scale")
    causal = check_bool(causal, "causal")
    check_choice(nonpositive, "nonpositive", NONPOSITIVE_POLICIES)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    grid = [(k, n) for k in kinds for n in (nus if k == "dpfp" else [None])]
    r_max = max(feature_dimension(k, d, nu=n) for k, n in grid)
    check_memory(attention_bytes(L, d, r_max),
                 f"an attention study with L={L}, d={d} and {r_max} features")

    mse = np.full((len(grid), samples), np.nan)
    n_bad_rows = np.zeros((len(grid), samples))
    exact_ms = np.empty(samples)
    t_exact = t_maps = 0.0
    for s in range(samples):
        q, k, v = study_inputs(L, d, s, input_scale=scale, seed=entropy)
        t0 = time.perf_counter()
        exact = softmax_attention(q, k, v, causal=causal)
        exact_ms[s] = float(np.mean(exact * exact))
        t_exact += time.perf_counter() - t0
        if progress is not None:
            progress(1)
        for g, (kind, nu) in enumerate(grid):
            t0 = time.perf_counter()
            res = linear_attention(q, k, v, None, kind, nu=nu, causal=causal,
                                   nonpositive=nonpositive)
            err = res.output - exact
            mse[g, s] = float(np.mean(err * err))
            t_maps += time.perf_counter() - t0
            n_bad_rows[g, s] = res.n_nonpositive_denominators
            if progress is not None:
                progress(1)

    rows = []
    for g, (kind, nu) in enumerate(grid):
        rows.append({
            "L": L, "d": d, "kind": kind, "nu": nu, "d_dot": feature_dimension(kind, d, nu=nu),
            "causal": causal, "input_scale": scale, **_sample_summary(mse[g], n_bad_rows[g]),
        })
    meta = {
        "study": "feature_map_attention_mse",
        "L": L, "d": d, "d_v": d, "kinds": list(kinds), "nu_values": nus, "samples": samples,
        "causal": causal, "nonpositive": nonpositive, "normalization": "attention",
        "input_scale": scale, "input_distribution": INPUT_DISTRIBUTION,
        "kernel": "phi(q).phi(k) of the deterministic map, against exp(q.k)",
        "mse": "mean over the L x d_v output entries of (linear - exact)^2, per sample",
        "entropy": entropy,
        "spawn_keys": {"inputs": "(0, sample)  (the inputs of attention_mse with the same seed)"},
        "exact_output_mean_square": [float(x) for x in exact_ms],
        "seconds_exact": t_exact,
        "seconds_maps": t_maps,
    }
    return FeatureMapMSETable(rows, mse, meta)


# --------------------------------------------------------------- the regime map

#: A point is flagged heavy-tailed when one input carries more than this share
#: of the mean over inputs (``mse_max_share``; 1/15 when 15 inputs agree).
HEAVY_TAIL_SHARE = 0.5
#: The MSE "falls like 1/m" at a grid point when its local slope of log MSE
#: against log m is within this distance of -1.
SLOPE_TOLERANCE = 0.25
#: A comparison holds (or is reversed) when the paired mean difference of the
#: per-input MSEs is more than this many standard errors from 0.
CLAIM_Z = 2.0


def study_inputs(L, d, sample, *, input_scale=DEFAULT_INPUT_SCALE, seed=0):
    """Q, K, V of input ``sample`` of :func:`attention_mse` with the same ``seed`` and scale."""
    sample = check_int(sample, "sample", minimum=0)
    ss = np.random.SeedSequence(_entropy(seed), spawn_key=(_SPAWN_INPUTS, sample))
    return attention_inputs(L, d, input_scale=input_scale, seed=ss)


def local_slopes(m_values, mse):
    """Local slope of log MSE against log m on a grid (centred inside, one-sided at the ends).

    None where a neighbour's MSE is missing or not positive; a single m gives [None].
    """
    m = np.asarray(m_values, dtype=float)
    y = np.array([np.nan if v is None or not v > 0 else math.log(v) for v in mse])
    x = np.log(m)
    out = []
    for i in range(m.size):
        lo, hi = max(0, i - 1), min(m.size - 1, i + 1)
        if lo == hi or not (np.isfinite(y[lo]) and np.isfinite(y[hi])):
            out.append(None)
        else:
            out.append(float((y[hi] - y[lo]) / (x[hi] - x[lo])))
    return out


class AttentionRegime:
    """Result of :func:`attention_regime`: where the paper's claims hold, over σ and m.

    Attributes
    ----------
    tables : dict
        Input scale σ -> :class:`AttentionMSETable` (all the same grid and seed).
    rows : list of dict
        One per (σ, m, kind, ensemble): ``mse_mean``, ``mse_std``, ``mse_se``,
        ``mse_max_share``, ``heavy_tail`` (share > :data:`HEAVY_TAIL_SHARE`),
        ``exact_output_mean_square``, ``slope`` (:func:`local_slopes`) and
        ``one_over_m`` (``|slope + 1| <= slope_tolerance``).
    comparisons : list of dict
        One per (σ, m, comparison): ``"trig/positive"`` per ensemble (the
        paper's first claim: positive below trig) and ``"orthogonal/iid"``
        per kind (the second: orthogonal below iid). ``ratio`` is the ratio
        of the mean MSEs (numerator's over denominator's); ``z`` the paired
        z of the per-input differences; ``holds`` (z > claim_z),
        ``reversed`` (z < -claim_z); ``one_over_m`` when both series fall
        like 1/m there.
    """

    def __init__(self, tables, rows, comparisons, meta):
        self.tables, self.rows, self.comparisons, self.meta = tables, rows, comparisons, meta


def _paired(table, a, b):
    ia = table.rows.index(table.select(**a)[0])
    ib = table.rows.index(table.select(**b)[0])
    xa, xb = table.per_sample_mse[ia], table.per_sample_mse[ib]
    ok = np.isfinite(xa) & np.isfinite(xb)
    diff = xa[ok] - xb[ok]
    ma, mb = table.rows[ia]["mse_mean"], table.rows[ib]["mse_mean"]
    ratio = None if not (ma and mb) else ma / mb
    if diff.size < 2:
        return ratio, None
    sd = float(diff.std(ddof=1))
    z = None if sd == 0 else float(diff.mean() / (sd / math.sqrt(diff.size)))
    return ratio, z


def attention_regime_from_tables(tables, *, slope_tolerance=SLOPE_TOLERANCE, claim_z=CLAIM_Z,
                                 heavy_tail_share=HEAVY_TAIL_SHARE):
    """The regime map (:class:`AttentionRegime`) from tables of :func:`attention_mse`.

    ``tables`` maps σ to a table; every table must hold the same m, kinds
    and ensembles. Comparisons are made where both series are present.
    """
    if not tables:
        raise ValueError("tables must map at least one input scale to an AttentionMSETable")
    rows, comps = [], []
    for scale in sorted(tables):
        t = tables[scale]
        if not isinstance(t, AttentionMSETable):
            raise TypeError(f"tables[{scale!r}] must be an AttentionMSETable; got {type(t).__name__}")
        ms = sorted(t.meta["m_values"])
        base = float(np.mean(t.meta["exact_output_mean_square"]))
        slope = {}
        for kind in t.meta["kinds"]:
            for ens in t.meta["ensembles"]:
                series = [t.select(m=m, kind=kind, ensemble=ens)[0] for m in ms]
                for m, r, s in zip(ms, series, local_slopes(ms, [r["mse_mean"] for r in series])):
                    slope[(m, kind, ens)] = s
                    rows.append({
                        "input_scale": scale, "L": t.meta["L"], "d": t.meta["d"], "m": m,
                        "r": r["r"], "kind": kind, "ensemble": ens, "samples": r["samples"],
                        "mse_mean": r["mse_mean"], "mse_std": r["mse_std"], "mse_se": r["mse_se"],
                        "mse_max_share": r["mse_max_share"],
                        "heavy_tail": bool(r["mse_max_share"] is not None
                                           and r["mse_max_share"] > heavy_tail_share),
                        "exact_output_mean_square": base,
                        "slope": s,
                        "one_over_m": bool(s is not None and abs(s + 1.0) <= slope_tolerance),
                        "nonpositive_rows_mean": r["nonpositive_rows_mean"],
                    })
        pairs = []
        if {"trig", "positive"} <= set(t.meta["kinds"]):
            pairs += [("trig/positive", ens, {"kind": "trig", "ensemble": ens},
                       {"kind": "positive", "ensemble": ens}) for ens in t.meta["ensembles"]]
        if {"iid", "orthogonal"} <= set(t.meta["ensembles"]):
            pairs += [("orthogonal/iid", kind, {"kind": kind, "ensemble": "orthogonal"},
                       {"kind": kind, "ensemble": "iid"}) for kind in t.meta["kinds"]]
        for name, within, a, b in pairs:
            for m in ms:
                ratio, z = _paired(t, dict(a, m=m), dict(b, m=m))
                sign = 1.0 if name == "trig/positive" else -1.0  # the claim: trig > positive; orth < iid
                zc = None if z is None else sign * z
                sa = slope[(m, a["kind"], a["ensemble"])]
                sb = slope[(m, b["kind"], b["ensemble"])]
                comps.append({
                    "input_scale": scale, "m": m, "comparison": name, "within": within,
                    "ratio": ratio, "z_claim": zc,
                    "holds": bool(zc is not None and zc > claim_z),
                    "reversed": bool(zc is not None and zc < -claim_z),
                    "one_over_m": bool(sa is not None and sb is not None
                                       and abs(sa + 1) <= slope_tolerance
                                       and abs(sb + 1) <= slope_tolerance),
                })
    meta = {"input_scales": sorted(tables), "slope_tolerance": slope_tolerance, "claim_z": claim_z,
            "heavy_tail_share": heavy_tail_share,
            "claims": {"trig/positive": "positive features below trigonometric ones (ratio > 1)",
                       "orthogonal/iid": "orthogonal projections below iid ones (ratio < 1)"}}
    return AttentionRegime(dict(tables), rows, comps, meta)


def attention_regime(L, d, input_scales, m_values, kinds=None, ensembles=None, *, samples=15,
                     seed=0, norms="chi", nonpositive="divide", progress=None,
                     slope_tolerance=SLOPE_TOLERANCE, claim_z=CLAIM_Z):
    r"""The paper's two claims over input scale σ and m: one :func:`attention_mse` per σ.

    Every σ uses the same seed, so the same standard-normal inputs (scaled)
    and the same projections: the map is paired across σ, and its σ = 1
    column equals ``attention_mse(..., input_scale=1)`` exactly. Arguments as
    in :func:`attention_mse` (default kinds :data:`DEFAULT_KINDS`);
    ``input_scales`` a non-empty sequence of σ > 0. Returns
    :class:`AttentionRegime`.
    """
    if isinstance(input_scales, (numbers.Real, np.floating)):
        input_scales = [input_scales]
    scales = [_check_scale(s, "input_scales") for s in input_scales]
    if not scales or len(set(scales)) != len(scales):
        raise ValueError(f"input_scales must be a non-empty sequence without repeats; got {input_scales!r}")
    tables = {s: attention_mse(L, d, m_values, kinds, ensembles, samples=samples, seed=seed,
                               input_scale=s, norms=norms, nonpositive=nonpositive,
                               progress=progress) for s in scales}
    return attention_regime_from_tables(tables, slope_tolerance=slope_tolerance, claim_z=claim_z)
