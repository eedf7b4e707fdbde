r"""Memory capacity of linear attention: how many key/value pairs a feature map stores.

Linear attention is an associative memory (Schlag et al. [1]_): after n
key/value pairs the state is

.. math:: S_n = \sum_{j \le n} v_j\, \varphi(k_j)^\top \in \mathbb R^{d_v \times d_{dot}},

and querying it with :math:`\varphi(k_i)` returns

.. math::

    S_n \varphi(k_i) = \underbrace{G_{ii}\, v_i}_{\text{signal}}
        + \underbrace{\sum_{j \ne i} G_{ij}\, v_j}_{\text{crosstalk}},
    \qquad G = \Phi\Phi^\top,\ \Phi = \varphi(K) \in \mathbb R^{n \times d_{dot}}.

:func:`capacity` stores n random pairs and measures two readouts:

- **sum rule** (the additive update :math:`S \mathrel{+}= v\varphi(k)^\top`):
  the signal-to-crosstalk ratio of key i,
  :math:`\mathrm{SCR}_i = G_{ii} / \sqrt{\sum_{j \ne i} G_{ij}^2}` (the
  ratio of signal to crosstalk amplitude for values with uncorrelated,
  equal-variance entries; 5/4 for the source's d = 2 example, where
  :math:`G = [[5, 4], [4, 5]]`), summarised by its median over the n keys
  (robust to the few keys with a huge :math:`|\varphi(k)|^2` that
  heavy-tailed random features produce), and the relative retrieval error
  of the rescaled readout :math:`S\varphi(k_i)/G_{ii}`. It *fails* at the
  first n whose median SCR is below 1 (half the keys are drowned).
- **least squares** (the limit of the delta rule): the S minimising
  :math:`\sum_i |S\varphi(k_i) - v_i|^2`, whose retrievals are the
  projection of V onto the column space of Φ. It is exact iff
  n <= rank Φ (<= d_dot); it *fails* at the first n whose relative
  retrieval error exceeds ``fail_tol`` (1e-6). The projection is computed
  from the SVD of Φ with NumPy's ``matrix_rank`` tolerance
  (:math:`\sigma > \sigma_{max}\max(n, d_{dot})\,\epsilon`), so the error is
  at rounding level (about 1e-15) for n <= rank and about
  :math:`\sqrt{(n - \mathrm{rank})/n}` beyond, whatever the BLAS.

Inputs: keys :math:`k \sim N(0, (\sigma^2/d_k) I)` (:math:`E|k|^2 = \sigma^2`,
the convention of :mod:`rfkernels.analysis.attention`), values
:math:`v \sim N(0, I_{d_v})`, the n pairs of a run being the first n of one
pool (so the curves of one trial are nested). Nothing is trained: the keys
are random, not learned. See docs/kernel_zoo.rst for what that can and
cannot reproduce of the source's trained-model results.

Seeds: keys and values of trial t from ``SeedSequence(entropy,
spawn_key=(0, t))``, projections of a random map from
``SeedSequence(entropy, spawn_key=(1, t, KINDS.index(kind), m,
ENSEMBLES.index(ensemble)))``, so a number depends only on its own identity.

References
----------
.. [1] I. Schlag, K. Irie and J. Schmidhuber, "Linear Transformers Are
   Secretly Fast Weight Programmers", ICML 2021, Sections 4-5 and Figure 2.
   https://arxiv.org/abs/2102.11174
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

from rfkernels import (
    ENSEMBLES,
    FEATURE_MAPS,
    KINDS,
    draw_projections,
    feature_dimension,
    feature_map,
    softmax_kernel,
)
from rfkernels.validation import (
    PAPER_KINDS,
    check_bool,
    check_int,
    check_int_array,
    check_memory,
)

from .attention import _check_scale, _entropy

__all__ = [
    "DEFAULT_MAPS",
    "CapacityResult",
    "FeatureMapSpec",
    "capacity",
    "parse_map",
]

#: The maps of the source's comparison at d_k = 64: ELU+1, DPFP-1/2/3 and
#: FAVOR+ (positive, orthogonal) with m = 64, 128, 256 and 512 features, and
#: the exact softmax kernel (FAVOR+'s limit, sum rule only) for reference.
DEFAULT_MAPS = ("elu1", "dpfp:1", "dpfp:2", "dpfp:3", "positive:64", "positive:128",
                "positive:256", "positive:512", "softmax")
#: The default numbers of stored pairs: below, at and just beyond each d_dot of
#: :data:`DEFAULT_MAPS`.
DEFAULT_N = (2, 4, 8, 16, 32, 48, 64, 65, 72, 96, 128, 129, 160, 192, 256, 257, 320, 384,
             385, 448, 512, 513, 600)

_SPAWN_INPUTS = 0
_SPAWN_PROJECTIONS = 1
_MAP_GRAMMAR = ("'identity', 'elu1', 'dpfp:NU', KIND:M[:ENSEMBLE] with KIND among "
                f"{', '.join(PAPER_KINDS)} (e.g. 'positive:128' or 'positive:128:iid'), or 'softmax' "
                "(the exact kernel exp(k.k'), sum rule only)")
#: Why least-squares values are null for the exact kernel.
_NO_LS = ("the exact softmax kernel has no finite feature matrix: the least-squares readout "
          "does not apply (d_dot is infinite)")


@dataclass(frozen=True)
class FeatureMapSpec:
    """One feature map of a capacity run: its kind and parameters (see :func:`parse_map`)."""

    kind: str
    nu: int | None = None
    m: int | None = None
    ensemble: str | None = None

    @property
    def name(self):
        """The spec as :func:`parse_map` reads it, e.g. ``'dpfp:2'``, ``'positive:128:orthogonal'``."""
        if self.kind == "softmax":
            return "softmax"
        if self.kind == "dpfp":
            return f"dpfp:{self.nu}"
        if self.kind in FEATURE_MAPS:
            return self.kind
        return f"{self.kind}:{self.m}:{self.ensemble}"

    @property
    def label(self):
        """A short label for figures: ``ELU+1``, ``DPFP-2``, ``FAVOR+ m=128``."""
        if self.kind == "elu1":
            return "ELU+1"
        if self.kind == "dpfp":
            return f"DPFP-{self.nu}"
        if self.kind == "identity":
            return "identity"
        if self.kind == "softmax":
            return "softmax (exact)"
        name = "FAVOR+" if self.kind == "positive" else self.kind
        ens = "" if self.ensemble == "orthogonal" else f" {self.ensemble}"
        return f"{name} m={self.m}{ens}"

    def d_dot(self, d):
        """The feature dimension (state size) for inputs of dimension d (None: infinite)."""
        if self.kind == "softmax":
            return None
        return feature_dimension(self.kind, d, m=self.m, nu=self.nu)


def parse_map(spec):
    """A :class:`FeatureMapSpec` from ``'elu1'``, ``'dpfp:2'``, ``'positive:128[:iid]'``, ``'softmax'``.

    ``'softmax'`` is the exact kernel :math:`e^{k^\top k'}` (infinite d_dot),
    the limit of FAVOR+ as m grows: a reference for the sum rule. Random kinds need the number of projections m; their ensemble defaults
    to ``'orthogonal'`` (FAVOR+). A :class:`FeatureMapSpec` is returned as is.
    """
    if isinstance(spec, FeatureMapSpec):
        return spec
    if not isinstance(spec, str):
        raise TypeError(f"a feature map must be a string such as 'dpfp:2'; got {spec!r}")
    parts = spec.strip().split(":")
    kind = parts[0]

    def count(text, what):
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"feature map {spec!r}: {what} must be an integer; got {text!r}") from None
        if value < 1:
            raise ValueError(f"feature map {spec!r}: {what} must be >= 1; got {value}")
        return value

    if kind in ("identity", "elu1", "softmax") and len(parts) == 1:
        return FeatureMapSpec(kind)
    if kind == "dpfp" and len(parts) == 2:
        return FeatureMapSpec(kind, nu=count(parts[1], "nu"))
    if kind in PAPER_KINDS and len(parts) in (2, 3):
        ensemble = parts[2] if len(parts) == 3 else "orthogonal"
        if ensemble not in ENSEMBLES:
            raise ValueError(f"feature map {spec!r}: ensemble must be one of {', '.join(ENSEMBLES)}; "
                             f"got {ensemble!r}")
        return FeatureMapSpec(kind, m=count(parts[1], "m"), ensemble=ensemble)
    raise ValueError(f"unknown feature map {spec!r}; expected {_MAP_GRAMMAR}")


class CapacityResult:
    """Result of :func:`capacity`.

    Attributes
    ----------
    rows : list of dict
        One row per (map, n), columns :data:`COLUMNS`: means over trials
        (and the largest least-squares error; ``scr_mean`` and ``scr_min``
        are the mean and minimum over trials of the median SCR over keys),
        ``None`` with a reason in ``meta["null_reasons"]`` where a value
        does not exist.
    failures : list of dict
        One row per map, columns :data:`FAILURE_COLUMNS`: the first n at which
        each readout fails, per trial and summarised (median, min, max);
        ``None`` where it did not fail up to the largest n.
    meta : dict
        Parameters, seed entropy, spawn keys, definitions, timings.
    """

    COLUMNS = ("map", "label", "kind", "nu", "m", "ensemble", "d_k", "d_dot", "n", "trials",
               "ls_error_mean", "ls_error_max", "ls_rank_mean", "sum_error_mean", "scr_mean",
               "scr_min")
    FAILURE_COLUMNS = ("map", "label", "d_dot", "ls_fail_median", "ls_fail_min", "ls_fail_max",
                       "sum_fail_median", "sum_fail_min", "sum_fail_max", "ls_fail", "sum_fail")

    def __init__(self, rows, failures, meta):
        self.rows, self.failures, self.meta = rows, failures, meta

    def failure(self, spec):
        """The failure row of a map (a spec string or :class:`FeatureMapSpec`)."""
        name = parse_map(spec).name
        for row in self.failures:
            if row["map"] == name:
                return row
        raise ValueError(f"no map {name!r} in this result; maps are "
                         f"{', '.join(r['map'] for r in self.failures)}")


def _least_squares_error(phi, v):
    """Relative retrieval error of the least-squares memory, and the numerical rank of phi."""
    u, s, _ = np.linalg.svd(phi, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return 1.0, 0
    tol = s[0] * max(phi.shape) * np.finfo(np.float64).eps  # numpy.linalg.matrix_rank's
    rank = int(np.count_nonzero(s > tol))
    ur = u[:, :rank]
    residual = v - ur @ (ur.T @ v)
    return float(np.linalg.norm(residual) / np.linalg.norm(v)), rank


def _sum_rule(gram, v, n):
    """Relative error of the rescaled sum-rule readout S phi(k_i) / G_ii for the first n pairs."""
    g = gram[:n, :n]
    diag = np.diag(g)
    readout = g @ v[:n]
    ok = diag > 0  # a key with phi(k) = 0 is not stored at all: its readout is 0
    readout[ok] /= diag[ok, None]
    readout[~ok] = 0.0
    return float(np.linalg.norm(readout - v[:n]) / np.linalg.norm(v[:n]))


def _scr_all(gram):
    """SCR_n for n = 1..N from the nested Gram matrix: the median over keys i < n of
    G_ii / sqrt(sum_{j < n, j != i} G_ij^2) (inf at n = 1: no crosstalk)."""
    sq = gram * gram
    n_all = gram.shape[0]
    cross = np.cumsum(sq, axis=1) - np.diag(sq)[:, None]  # (i, n-1): sum_{j<n} G_ij^2 - G_ii^2
    out = np.full(n_all, np.inf)
    diag = np.abs(np.diag(gram))
    with np.errstate(divide="ignore", invalid="ignore"):
        for n in range(2, n_all + 1):
            c = np.maximum(cross[:n, n - 1], 0.0)  # rounding can leave -tiny
            out[n - 1] = np.median(np.where(c > 0, diag[:n] / np.sqrt(c), np.inf))
    return out


def _first_ls_failure(phi, v, fail_tol, cache):
    """Smallest n <= len(phi) whose least-squares error exceeds fail_tol (None if none).

    The predicate is monotone in n: the error is above rounding level iff
    n > rank(Phi_n), and n - rank(Phi_n) never decreases along nested keys
    (each key adds at most 1 to the rank). With R = rank(Phi_N) of all N keys,
    every n > R fails (rank(Phi_n) <= R), so the first failure is R + 1 when
    n = R does not fail; otherwise (degenerate keys) it is found by bisection.
    """
    n_max = phi.shape[0]

    def fails(n):
        if n not in cache:
            cache[n] = _least_squares_error(phi[:n], v[:n])
        return cache[n][0] > fail_tol

    if not fails(n_max):
        return None
    rank = cache[n_max][1]
    if rank == 0:
        return 1
    if not fails(rank):
        return rank + 1 if fails(rank + 1) else None  # None: the error is not monotone here
    lo, hi = 0, rank  # fails(hi), not fails(lo) (n = 0 stores nothing)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fails(mid):
            hi = mid
        else:
            lo = mid
    return hi


def capacity(
    d_k=64,
    n_values=DEFAULT_N,
    maps=DEFAULT_MAPS,
    *,
    d_v=None,
    trials=5,
    key_scale=1.0,
    seed=0,
    fail_tol=1e-6,
    find_failures=True,
    progress=None,
):
    r"""Store n random key/value pairs in a linear-attention memory and read them back.

    The memory after n pairs is :math:`S = \sum_{j \le n} v_j\varphi(k_j)^\top`;
    with :math:`G = \Phi\Phi^\top`, :math:`\Phi = \varphi(K)`, two readouts
    are measured (details and seeds: the module ``rfkernels.analysis.capacity``,
    and docs/kernel_zoo.rst):

    - sum rule: :math:`S\varphi(k_i) = G_{ii}v_i + \sum_{j \ne i} G_{ij}v_j`
      (signal + crosstalk); the relative error of :math:`S\varphi(k_i)/G_{ii}`
      and the median over keys of
      :math:`G_{ii}/\sqrt{\sum_{j \ne i} G_{ij}^2}` (SCR). Fails at the
      first n with SCR < 1.
    - least squares (delta-rule limit): retrievals are the projection of V
      onto the column space of Φ (SVD, ``numpy.linalg.matrix_rank``'s
      tolerance): exact iff n <= rank Φ <= d_dot. Fails at the first n whose
      relative retrieval error exceeds ``fail_tol``.

    Keys are :math:`N(0, (\sigma^2/d_k) I)`, values :math:`N(0, I_{d_v})`;
    the n pairs are the first n of one pool per trial.

    Parameters
    ----------
    d_k : int, default 64
        Key dimension.
    n_values : int or sequence of int, default :data:`DEFAULT_N`
        Numbers of stored pairs, each >= 1 (SCR needs n >= 2).
    maps : sequence of str or FeatureMapSpec, default :data:`DEFAULT_MAPS`
        Feature maps, e.g. ``"elu1"``, ``"dpfp:2"``, ``"positive:128"``
        (orthogonal projections) or ``"positive:128:iid"``; see :func:`parse_map`.
    d_v : int, optional
        Value dimension (default d_k).
    trials : int, default 5
        Independent key/value pools (and projection draws), >= 1.
    key_scale : float, default 1
        σ: keys are :math:`N(0, (\sigma^2/d_k) I)`.
    seed : None, int or numpy.random.SeedSequence, default 0
        Root of all randomness (see the module docstring).
    fail_tol : float, default 1e-6
        Least-squares failure: relative retrieval error above this.
    find_failures : bool, default True
        Also locate the exact first failing n of each trial (least squares:
        by bisection up to max(n_values); sum rule: every n up to it).
    progress : callable, optional
        ``progress(1)`` after each (trial, map).

    Returns
    -------
    CapacityResult
        ``rows`` per (map, n) and ``failures`` per map.

    Raises
    ------
    ValueError, TypeError
        Bad arguments (unknown map, DPFP ν > 2 d_k - 1, n < 1, ...), before any work.
    MemoryError
        If the feature matrices and Gram matrix would not fit.
    """
    d_k = check_int(d_k, "d_k")
    d_v = d_k if d_v is None else check_int(d_v, "d_v")
    ns = check_int_array(n_values, "n_values")
    if ns.ndim > 1 or ns.size == 0:
        raise ValueError(f"n_values must be an integer or a non-empty 1-D sequence; got {n_values!r}")
    ns = sorted({int(n) for n in ns.reshape(-1)})
    if isinstance(maps, (str, FeatureMapSpec)):
        maps = (maps,)
    specs = [parse_map(s) for s in maps]
    if not specs:
        raise ValueError("maps must name at least one feature map")
    if len({s.name for s in specs}) != len(specs):
        raise ValueError(f"maps must not repeat a map; got {[s.name for s in specs]}")
    d_dots = [s.d_dot(d_k) for s in specs]  # validates nu <= 2 d_k - 1
    trials = check_int(trials, "trials")
    scale = _check_scale(key_scale, "key_scale")
    if isinstance(fail_tol, bool) or not isinstance(fail_tol, numbers.Real) or not (
            0 < float(fail_tol) < 1):
        raise ValueError(f"fail_tol must be a number in (0, 1); got {fail_tol!r}")
    fail_tol = float(fail_tol)
    find_failures = check_bool(find_failures, "find_failures")
    entropy = _entropy(seed)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    n_max = ns[-1]
    r_max = max([r for r in d_dots if r is not None], default=1)
    check_memory(8 * (3 * n_max * r_max + 3 * n_max * n_max + 2 * n_max * (d_k + d_v)),
                 f"capacity with n up to {n_max} and d_dot up to {r_max}")

    shape = (len(specs), len(ns), trials)
    ls_err, ls_rank = np.full(shape, np.nan), np.zeros(shape)
    sum_err, scr = np.full(shape, np.nan), np.full(shape, np.nan)
    ls_fail = [[None] * trials for _ in specs]
    sum_fail = [[None] * trials for _ in specs]
    t0 = time.perf_counter()
    for t in range(trials):
        rng = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(_SPAWN_INPUTS, t)))
        keys = rng.standard_normal((n_max, d_k)) * (scale / math.sqrt(d_k))
        values = rng.standard_normal((n_max, d_v))
        for a, spec in enumerate(specs):
            if spec.kind == "softmax":
                gram = softmax_kernel(keys, keys)
                scr_all = _scr_all(gram)
                for b, n in enumerate(ns):
                    sum_err[a, b, t] = _sum_rule(gram, values, n)
                    scr[a, b, t] = scr_all[n - 1]
                if find_failures:
                    below = np.flatnonzero(scr_all[1:] < 1.0)
                    sum_fail[a][t] = int(below[0]) + 2 if below.size else None
                if progress is not None:
                    progress(1)
                continue
            if spec.kind in FEATURE_MAPS:
                w = None
            else:
                key = (_SPAWN_PROJECTIONS, t, KINDS.index(spec.kind), spec.m,
                       ENSEMBLES.index(spec.ensemble))
                w = draw_projections(spec.m, d_k, ensemble=spec.ensemble,
                                     seed=np.random.SeedSequence(entropy, spawn_key=key))
            phi = feature_map(keys, w, spec.kind, nu=spec.nu)
            gram = phi @ phi.T
            scr_all = _scr_all(gram)
            cache = {}
            for b, n in enumerate(ns):
                cache[n] = _least_squares_error(phi[:n], values[:n])
                ls_err[a, b, t], ls_rank[a, b, t] = cache[n]
                sum_err[a, b, t] = _sum_rule(gram, values, n)
                scr[a, b, t] = scr_all[n - 1]
            if find_failures:
                ls_fail[a][t] = _first_ls_failure(phi, values, fail_tol, cache)
                below = np.flatnonzero(scr_all[1:] < 1.0)
                sum_fail[a][t] = int(below[0]) + 2 if below.size else None
            if progress is not None:
                progress(1)
    seconds = time.perf_counter() - t0

    null_reasons = {}
    rows = []
    for a, spec in enumerate(specs):
        for b, n in enumerate(ns):
            s = scr[a, b]
            finite = s[np.isfinite(s)]
            ls = spec.kind != "softmax"
            rows.append({
                "map": spec.name, "label": spec.label, "kind": spec.kind, "nu": spec.nu,
                "m": spec.m, "ensemble": spec.ensemble, "d_k": d_k, "d_dot": d_dots[a], "n": n,
                "trials": trials,
                "ls_error_mean": float(ls_err[a, b].mean()) if ls else None,
                "ls_error_max": float(ls_err[a, b].max()) if ls else None,
                "ls_rank_mean": float(ls_rank[a, b].mean()) if ls else None,
                "sum_error_mean": float(sum_err[a, b].mean()),
                "scr_mean": float(finite.mean()) if finite.size == trials else None,
                "scr_min": float(finite.min()) if finite.size == trials else None,
            })
        if ns[0] == 1:
            null_reasons["scr_mean"] = null_reasons["scr_min"] = (
                "n = 1: a single stored pair has no crosstalk (SCR infinite)")

    def summary(values):
        found = [v for v in values if v is not None]
        if len(found) < len(values):  # some trial did not fail up to n_max
            return None, (min(found) if found else None), None
        return float(np.median(found)), min(found), max(found)

    failures = []
    for a, spec in enumerate(specs):
        ls_ok = find_failures and spec.kind != "softmax"
        ls_med, ls_min, ls_max = summary(ls_fail[a]) if ls_ok else (None,) * 3
        sum_med, sum_min, sum_max = summary(sum_fail[a]) if find_failures else (None,) * 3
        failures.append({
            "map": spec.name, "label": spec.label, "d_dot": d_dots[a],
            "ls_fail_median": ls_med, "ls_fail_min": ls_min, "ls_fail_max": ls_max,
            "sum_fail_median": sum_med, "sum_fail_min": sum_min, "sum_fail_max": sum_max,
            "ls_fail": list(ls_fail[a]), "sum_fail": list(sum_fail[a]),
        })
    if any(s.kind == "softmax" for s in specs):
        null_reasons["least_squares"] = _NO_LS
        null_reasons["d_dot"] = "softmax: infinite (no finite feature map)"
    if find_failures and any(None in f["sum_fail"] + ([] if s.kind == "softmax" else f["ls_fail"])
                             for f, s in zip(failures, specs)):
        null_reasons["failures"] = (f"a null failure n: that readout did not fail for n up to "
                                    f"{n_max} (the largest n_values) in that trial")
    meta = {
        "study": "capacity",
        "d_k": d_k, "d_v": d_v, "n_values": ns, "maps": [s.name for s in specs],
        "trials": trials, "key_scale": scale, "fail_tol": fail_tol,
        "keys": "k ~ N(0, (key_scale^2/d_k) I), v ~ N(0, I_{d_v}); the first n of one pool",
        "sum_rule": "S = sum_j v_j phi(k_j)^T; readout S phi(k_i) / G_ii; fails where the "
                    "median over keys of SCR_i = G_ii / sqrt(sum_{j!=i} G_ij^2) is < 1",
        "least_squares": "S = V^T pinv(Phi) (numerical rank as numpy.linalg.matrix_rank); "
                         "fails where the relative retrieval error > fail_tol",
        "entropy": entropy,
        "spawn_keys": {"inputs": "(0, trial)",
                       "projections": "(1, trial, KINDS.index(kind), m, ENSEMBLES.index(ensemble))"},
        "seconds": seconds,
        "null_reasons": null_reasons,
    }
    return CapacityResult(rows, failures, meta)
