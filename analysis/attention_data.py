r"""Inputs, seeds and result tables of the attention study (:mod:`rfkernels.analysis.attention`).

The random Q, K, V of the study (:func:`attention_inputs`, :func:`study_inputs`),
its spawn-key scheme, its memory estimate (:func:`attention_bytes`), the tidy
table :class:`AttentionMSETable`, and the argument checks and per-grid-point
summary shared by :func:`rfkernels.analysis.attention.attention_mse` and
:func:`rfkernels.analysis.attention.feature_map_attention_mse`.
"""

from __future__ import annotations

import csv
import io
import math
import numbers

import numpy as np

from rfkernels.attention import FAVOR_BLOCK, SOFTMAX_BLOCK_ELEMENTS
from rfkernels.estimators import registry
from rfkernels.validation import (
    check_int,
    check_int_array,
    check_memory,
    check_seed,
    seed_sequence,
)

__all__ = [
    "DEFAULT_ENSEMBLES",
    "check_ensembles",
    "ensembles_for",
    "DEFAULT_INPUT_SCALE",
    "DEFAULT_KINDS",
    "INPUT_DISTRIBUTION",
    "SPAWN_INPUTS",
    "SPAWN_PROJECTIONS",
    "AttentionMSETable",
    "attention_bytes",
    "attention_inputs",
    "check_names",
    "check_scale",
    "distinct_ints",
    "root_entropy",
    "sample_summary",
    "seed_index",
    "seed_indices",
    "study_inputs",
]

#: Default σ of :func:`attention_inputs`: E|q|² = E|k|² = 1.
DEFAULT_INPUT_SCALE = 1.0
#: Default kinds of the study: the Performer paper's (:attr:`rfkernels.estimators.Kind.paper`;
#: seeds use each kind's frozen ``seed_index``, so adding kinds moves no number).
DEFAULT_KINDS = tuple(k.name for k in registry.entries("kind") if k.paper)
#: Default ensembles of the study.
DEFAULT_ENSEMBLES = ("iid", "orthogonal")


def ensembles_for(norms, defaults=DEFAULT_ENSEMBLES):
    """The ``defaults`` the norm law ``norms`` applies to (antithetic norms: not iid).

    The default ensembles of a study or a diagnosis given ``norms`` only.
    """
    law = registry.entry("norms", norms)
    return tuple(e for e in defaults if law.refusal(e) is None)


def check_ensembles(ensembles, norms, check, defaults=DEFAULT_ENSEMBLES):
    """The validated ``ensembles`` (:func:`check_names`; None: :func:`ensembles_for`) of a norm law.

    An ensemble the law refuses raises its one-line ValueError before any work.
    """
    law = registry.entry("norms", norms)
    out = check_names(ensembles, "ensembles", check, ensembles_for(norms, defaults))
    for ens in out:
        refused = law.refusal(ens)
        if refused is not None:
            raise ValueError(refused)
    return out
#: One-line description of the inputs, recorded in every table's metadata.
INPUT_DISTRIBUTION = (
    "q_i, k_j ~ N(0, (input_scale^2/d) I_d) iid, v_j ~ N(0, I_d) iid; "
    "kernel exp(q.k) (temperature absorbed)"
)
#: First spawn-key entry of the inputs of sample s: ``(SPAWN_INPUTS, s)``.
SPAWN_INPUTS = 0
#: First spawn-key entry of the projections: ``(SPAWN_PROJECTIONS, s, m, kind, ensemble)``,
#: the kind and the ensemble by their :func:`seed_index`.
SPAWN_PROJECTIONS = 1


def check_scale(value, name):
    """``value`` as a float, after checking that it is a positive finite real (not a bool).

    Raises TypeError (not a real number) or ValueError (not positive and finite),
    naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a positive real number; got {value!r}")
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number; got {value!r}")
    return value


def root_entropy(seed):
    """The root entropy behind ``seed`` (:func:`rfkernels.validation.seed_sequence`, root=True)."""
    return seed_sequence(seed, root=True).entropy


def seed_index(axis, name):
    """The frozen place of a registered kind or ensemble in studies' spawn keys.

    :attr:`rfkernels.estimators.Kind.seed_index` (``axis="kind"``) or
    :attr:`rfkernels.estimators.Ensemble.seed_index` (``axis="ensemble"``):
    the built-in entries' positions when studies seeded by position, so no
    published number moves when an entry is added.
    """
    return registry.entry(axis, name).seed_index


def seed_indices(kinds, ensembles):
    """``{"kind": {name: index}, "ensemble": {name: index}}`` of :func:`seed_index`, as metadata records them."""
    return {"kind": {k: seed_index("kind", k) for k in kinds},
            "ensemble": {e: seed_index("ensemble", e) for e in ensembles}}


def attention_inputs(L, d, *, input_scale=DEFAULT_INPUT_SCALE, seed=None):
    r"""Random Q, K, V of the Figure 4 study (:mod:`rfkernels.analysis.attention`).

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
    scale = check_scale(input_scale, "input_scale")
    rng = check_seed(seed)
    check_memory(8 * 4 * L * d, f"attention_inputs(L={L}, d={d}): three L x d arrays")
    s = scale / math.sqrt(d)
    q = s * rng.standard_normal((L, d))
    k = s * rng.standard_normal((L, d))
    v = rng.standard_normal((L, d))
    return q, k, v


def study_inputs(L, d, sample, *, input_scale=DEFAULT_INPUT_SCALE, seed=0):
    """Q, K, V of input ``sample`` of :func:`~rfkernels.analysis.attention.attention_mse`.

    The same ``seed`` and ``input_scale`` give the same inputs as that study.
    """
    sample = check_int(sample, "sample", minimum=0)
    ss = np.random.SeedSequence(root_entropy(seed), spawn_key=(SPAWN_INPUTS, sample))
    return attention_inputs(L, d, input_scale=input_scale, seed=ss)


def attention_bytes(L, d, m):
    """Estimated peak bytes of one sample of the attention study (an upper estimate).

    The study is :func:`~rfkernels.analysis.attention.attention_mse`; counted:
    Q, K, V, the exact and FAVOR outputs and their difference (six L×d
    arrays); the exact attention's block of logits (about
    ``SOFTMAX_BLOCK_ELEMENTS``, at least one row of L); FAVOR's block
    features and state for r = 2m features; the (m, d) projections.
    """
    r = 2 * m
    rows = min(FAVOR_BLOCK, L)
    logits = min(L, max(1, SOFTMAX_BLOCK_ELEMENTS // L)) * L
    lean = 6 * L * r  # LeanFavor: projections, features and their products for all L rows
    return 8 * (6 * L * d + 3 * logits + max(6 * rows * r + 2 * rows * rows, lean) + 2 * r * d
                + 4 * m * d)


class AttentionMSETable:
    """Tidy result of :func:`~rfkernels.analysis.attention.attention_mse`: a row per (m, kind, ensemble).

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


def check_names(values, name, check, default):
    """A non-empty tuple of distinct choices (``default`` for None), each passed to ``check``."""
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


def distinct_ints(values, name):
    """A non-empty list of distinct integers >= 1 from one integer or a 1-D sequence."""
    arr = check_int_array(values, name)
    if arr.ndim > 1 or arr.size == 0:
        raise ValueError(f"{name} must be an integer or a non-empty 1-D sequence; got {values!r}")
    out = [int(v) for v in arr.reshape(-1)]
    if len(set(out)) != len(out):
        raise ValueError(f"{name} must not repeat a value; got {values!r}")
    return out


def sample_summary(values, n_bad_rows):
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
