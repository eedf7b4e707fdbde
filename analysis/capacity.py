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

Range: no readout changes when Φ is multiplied by a constant (and the sum
rule's none when a row of G is), so features far from 1 are scaled by a
power of two (exact) before G is formed, the keys first for the homogeneous
maps (identity, DPFP), and the exact kernel's G row by row where
:math:`e^{k^\top k'}` would not fit. A ``key_scale`` at which float64 still
cannot hold a map's features (overflow, or a key's features underflowing to
0) raises OverflowError naming the largest key_scale that works; no result
is NaN or inf. A SCR is infinite (null in the rows, with its reason) where a
key's crosstalk is 0 or below float64's resolution beside its signal.

Seeds: keys and values of trial t from ``SeedSequence(entropy,
spawn_key=(0, t))``, projections of a random map from
``SeedSequence(entropy, spawn_key=(1, t, seed_index(kind), m,
seed_index(ensemble)))``, the frozen ``seed_index`` of the kind's and the
ensemble's registry entries (:attr:`rfkernels.estimators.Kind.seed_index`),
so a number depends only on its own identity.

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
    FEATURE_MAPS,
    draw_projections,
    feature_dimension,
    feature_map,
    log_softmax_kernel,
    softmax_kernel,
)
from rfkernels.estimators import registry
from rfkernels.validation import (
    check_bool,
    check_int,
    check_int_array,
    check_memory,
)

from .attention_data import check_scale, root_entropy, seed_index, seed_indices

__all__ = [
    "DEFAULT_ENSEMBLE",
    "DEFAULT_MAPS",
    "MAP_GRAMMAR",
    "CapacityResult",
    "FeatureMapSpec",
    "capacity",
    "parse_map",
    "random_kinds",
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
#: The ensemble of a random map whose spec names none (FAVOR+'s).
DEFAULT_ENSEMBLE = "orthogonal"


def random_kinds():
    """The kinds a random map may have: the Performer paper's (:attr:`rfkernels.estimators.Kind.paper`)."""
    return tuple(k.name for k in registry.entries("kind") if k.paper)


#: The feature maps :func:`parse_map` reads, in words (for error messages and help).
MAP_GRAMMAR = ("'identity', 'elu1', 'dpfp:NU', KIND:M[:ENSEMBLE] with KIND among "
                f"{', '.join(random_kinds())} (e.g. 'positive:128' or 'positive:128:iid'), or 'softmax' "
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
        entry = registry.entry("kind", self.kind)
        # FAVOR+: the Performer's positive map (m nonnegative features of one projection each)
        favor = entry.paper and entry.nonnegative and entry.features_per_projection == 1
        name = "FAVOR+" if favor else self.kind
        # the ensemble where the spec without one would not give it
        ens = "" if parse_map(f"{self.kind}:{self.m}") == self else f" {self.ensemble}"
        return f"{name} m={self.m}{ens}"

    def d_dot(self, d):
        """The feature dimension (state size) for inputs of dimension d (None: infinite)."""
        if self.kind == "softmax":
            return None
        return feature_dimension(self.kind, d, m=self.m, nu=self.nu)


def parse_map(spec):
    """A :class:`FeatureMapSpec` from ``'elu1'``, ``'dpfp:2'``, ``'positive:128[:iid]'``, ``'softmax'``.

    ``'softmax'`` is the exact kernel :math:`e^{k^\top k'}` (infinite d_dot),
    the limit of FAVOR+ as m grows: a reference for the sum rule. Random
    kinds (:func:`random_kinds`) need the number of projections m; their
    ensemble defaults to :data:`DEFAULT_ENSEMBLE` (FAVOR+'s). A
    :class:`FeatureMapSpec` is returned as is.
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
    if kind in random_kinds() and len(parts) in (2, 3):
        ensemble = parts[2] if len(parts) == 3 else DEFAULT_ENSEMBLE
        if ensemble not in registry.names("ensemble"):
            raise ValueError(f"feature map {spec!r}: ensemble must be one of "
                             f"{', '.join(registry.names('ensemble'))}; got {ensemble!r}")
        return FeatureMapSpec(kind, m=count(parts[1], "m"), ensemble=ensemble)
    raise ValueError(f"unknown feature map {spec!r}; expected {MAP_GRAMMAR}")


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


def least_squares_error(phi, v):
    """Relative retrieval error of the least-squares memory, and the numerical rank of phi.

    The retrievals are the projection of ``v`` (n, d_v) onto the column space
    of ``phi`` (n, d_dot), from its SVD with ``numpy.linalg.matrix_rank``'s
    tolerance; returns ``(error, rank)``, error 1 for a zero ``phi``.
    """
    u, s, _ = np.linalg.svd(phi, full_matrices=False)
    if s.size == 0 or s[0] == 0:
        return 1.0, 0
    tol = s[0] * max(phi.shape) * np.finfo(np.float64).eps  # numpy.linalg.matrix_rank's
    rank = int(np.count_nonzero(s > tol))
    ur = u[:, :rank]
    residual = v - ur @ (ur.T @ v)
    return float(np.linalg.norm(residual) / np.linalg.norm(v)), rank


def sum_rule_error(gram, v, n):
    """Relative error of the rescaled sum-rule readout S phi(k_i) / G_ii for the first n pairs.

    ``gram`` is G = Phi Phi^T of all keys (or G with each row scaled by a
    positive factor: the readout uses G row by row), ``v`` the values.
    """
    g = gram[:n, :n]
    diag = np.diag(g)
    readout = g @ v[:n]
    ok = diag > 0  # a key with phi(k) = 0 is not stored at all: its readout is 0
    readout[ok] /= diag[ok, None]
    readout[~ok] = 0.0
    diff = readout - v[:n]
    with np.errstate(over="ignore"):
        err = np.linalg.norm(diff)
    if not np.isfinite(err):  # |diff|^2 beyond float64, |diff| not: scale first
        top = float(np.max(np.abs(diff)))
        err = top * np.linalg.norm(diff / top)
    return float(err / np.linalg.norm(v[:n]))


def signal_to_crosstalk(gram):
    """SCR_n for n = 1..N from the nested Gram matrix: the median over keys i < n of
    G_ii / sqrt(sum_{j < n, j != i} G_ij^2) (inf at n = 1: no crosstalk).

    Invariant to scaling each row of ``gram`` by a positive factor. A key's
    SCR is also infinite where its crosstalk sum is below float64's
    resolution beside G_ii^2 (SCR above about 1e8): it is lost to rounding.
    """
    sq = gram * gram
    n_all = gram.shape[0]
    cross = np.cumsum(sq, axis=1) - np.diag(sq)[:, None]  # (i, n-1): sum_{j<n} G_ij^2 - G_ii^2
    out = np.full(n_all, np.inf)
    diag = np.abs(np.diag(gram))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        c = np.maximum(cross, 0.0)  # rounding can leave -tiny
        # column n - 1: the SCR of each key i (rows i < n; the rows i >= n are not in it)
        scr = np.where(c > 0, diag[:, None] / np.sqrt(c), np.inf)
        if n_all < 2:
            return out
        if np.isnan(scr).any():  # np.median's NaN rule, key by key: as it was
            for n in range(2, n_all + 1):
                out[n - 1] = np.median(scr[:n, n - 1])
            return out
        # All the medians at once, the same numbers as np.median column by column:
        # the keys i >= n sort last (+inf), so the middle of the first n sorted
        # entries is the median, the mean of the two middle ones (a + b) / 2 for even n.
        scr[np.tri(n_all, k=-1, dtype=bool)] = np.inf
        scr.sort(axis=0)
        n = np.arange(2, n_all + 1)
        low, high = scr[(n - 1) // 2, n - 1], scr[n // 2, n - 1]
        out[1:] = np.where(n % 2 == 1, low, (low + high) / 2.0)
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
            cache[n] = least_squares_error(phi[:n], v[:n])
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


# ----------------------------------------------------------- float64's range

#: Largest |feature| (and, below it, smallest) left as computed: outside
#: [2**-_SAFE_EXP, 2**_SAFE_EXP] the features are scaled by a power of two
#: (exact), so that G and its squares stay inside float64.
_SAFE_EXP = 64
#: The exact kernel's Gram matrix is used as computed while its largest entry
#: is below this (its squares are summed); beyond, each row is scaled.
_SOFTMAX_GRAM_MAX = 2.0 ** 256
#: Smallest diagonal of the row-scaled exact-kernel Gram matrix (each row's
#: largest entry is 1): below it the readout G v / G_ii could overflow.
_SOFTMAX_DIAG_MIN = 2.0 ** -600
#: Maps whose features are homogeneous in k (phi(c k) = c^p phi(k)): the keys
#: are brought into range by a power of two, which changes no readout.
_HOMOGENEOUS = ("identity", "dpfp")
#: Maps whose features of a key may all be 0 exactly (DPFP: no two entries of
#: relu([k, -k]) 1..nu apart both positive); for the others a zero row is underflow.
_MAY_VANISH = ("dpfp",)


class _OutOfRange(Exception):
    """The Gram matrix of one map at this key scale is beyond float64 (message: why)."""


def _in_range(a):
    """``a`` times a power of two (exact) with its largest |entry| in range (see _SAFE_EXP)."""
    top = float(np.max(np.abs(a))) if a.size else 0.0
    if top == 0.0 or 2.0 ** -_SAFE_EXP <= top <= 2.0 ** _SAFE_EXP:
        return a
    return np.ldexp(a, -math.frexp(top)[1])


def _softmax_gram(keys):
    """G = exp(k_i.k_j), each row scaled by exp(-max_j k_i.k_j) where G itself would not fit."""
    try:
        with np.errstate(over="ignore"):
            gram = softmax_kernel(keys, keys)
        if float(gram.max()) <= _SOFTMAX_GRAM_MAX:
            return gram
    except FloatingPointError:
        pass
    try:
        logits = log_softmax_kernel(keys, keys)
    except FloatingPointError:
        raise _OutOfRange("the exponents k.k' themselves overflow float64") from None
    with np.errstate(under="ignore"):
        gram = np.exp(logits - logits.max(axis=1, keepdims=True))
    if float(np.diag(gram).min()) < _SOFTMAX_DIAG_MIN:
        raise _OutOfRange("some key's signal exp(|k|^2) is more than 2^600 times below its "
                          "crosstalk exp(k.k') with another key")
    return gram


def _features(spec, keys, w):
    """phi(keys), scaled by a power of two into float64's comfortable range."""
    x = _in_range(keys) if spec.kind in _HOMOGENEOUS else keys
    try:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            phi = feature_map(x, w, spec.kind, nu=spec.nu)
    except FloatingPointError:
        raise _OutOfRange("its features overflow float64") from None
    if not np.all(np.isfinite(phi)):
        raise _OutOfRange("its features overflow float64")
    return _in_range(phi)


def _check_stored(spec, phi, gram):
    """Raise _OutOfRange where underflow lost a stored key (its |phi(k)|^2 = G_ii is 0)."""
    zero_row = ~np.any(phi != 0, axis=1)
    if np.any((np.diag(gram) == 0) & ~zero_row) or (spec.kind not in _MAY_VANISH
                                                    and np.any(zero_row)):
        raise _OutOfRange("the features of some key underflow to 0")


def _gram_of(spec, keys, w):
    """(phi or None for the exact kernel, G): G row-scaled where needed; raises _OutOfRange."""
    if not np.all(np.isfinite(keys)):
        raise _OutOfRange("the keys themselves overflow float64")
    if spec.kind == "softmax":
        return None, _softmax_gram(keys)
    phi = _features(spec, keys, w)
    gram = phi @ phi.T
    _check_stored(spec, phi, gram)
    return phi, gram


def _largest_scale(spec, pools, d_k, scale):
    """About the largest key scale <= ``scale`` (within 2%) at which ``spec`` is in range
    for every trial's keys, by bisection on log2; None if none down to scale * 2**-1024."""
    def works(s):
        try:
            for z, w in pools:
                with np.errstate(over="ignore"):
                    keys = z * (s / math.sqrt(d_k))
                _gram_of(spec, keys, w)
        except _OutOfRange:
            return False
        return True

    hi = math.log2(scale)
    step = 1.0
    while not works(2.0 ** (hi - step)):
        if step >= 1024:
            return None
        step *= 2
    lo, hi = hi - step, hi - step / 2 if step > 1 else hi
    while hi - lo > 0.03:
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if works(2.0 ** mid) else (lo, mid)
    return 2.0 ** lo


def _out_of_range(run, spec, reason):
    """The one-line OverflowError of a map whose Gram matrix is beyond float64 at run.scale."""
    pools = [_trial_pool(run, t) for t in range(run.trials)]
    pools = [(z, _projections(run, spec, t)) for t, (z, _) in enumerate(pools)]
    best = _largest_scale(spec, pools, run.d_k, run.scale)
    hint = (f"the largest key_scale that works for this map and seed is about {best:.3g}"
            if best is not None else "no smaller key_scale works either")
    return OverflowError(f"key_scale = {run.scale:g} (--key-scale) is out of float64's range for "
                         f"map {spec.name!r} at d_k = {run.d_k}: {reason}; {hint}")


# ----------------------------------------------------------------- the run

@dataclass(frozen=True)
class _Run:
    """The validated arguments of one :func:`capacity` run."""

    d_k: int
    d_v: int
    ns: list
    specs: list
    d_dots: list
    trials: int
    scale: float
    fail_tol: float
    find_failures: bool
    entropy: object


def _validated(d_k, n_values, maps, d_v, trials, key_scale, seed, fail_tol, find_failures,
               progress):
    """A :class:`_Run` from the arguments of :func:`capacity`, after all checks (memory too)."""
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
    scale = check_scale(key_scale, "key_scale")
    if isinstance(fail_tol, bool) or not isinstance(fail_tol, numbers.Real) or not (
            0 < float(fail_tol) < 1):
        raise ValueError(f"fail_tol must be a number in (0, 1); got {fail_tol!r}")
    fail_tol = float(fail_tol)
    find_failures = check_bool(find_failures, "find_failures")
    entropy = root_entropy(seed)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    n_max = ns[-1]
    r_max = max([r for r in d_dots if r is not None], default=1)
    check_memory(8 * (3 * n_max * r_max + 3 * n_max * n_max + 2 * n_max * (d_k + d_v)),
                 f"capacity with n up to {n_max} and d_dot up to {r_max}")
    return _Run(d_k, d_v, ns, specs, d_dots, trials, scale, fail_tol, find_failures, entropy)


def _trial_pool(run, t):
    """(standard-normal key draws z, values) of trial t; the keys are z * key_scale / sqrt(d_k)."""
    rng = np.random.default_rng(np.random.SeedSequence(run.entropy, spawn_key=(_SPAWN_INPUTS, t)))
    z = rng.standard_normal((run.ns[-1], run.d_k))
    return z, rng.standard_normal((run.ns[-1], run.d_v))


def _projections(run, spec, t):
    """The projections of a random map in trial t (None for the deterministic maps and softmax)."""
    if spec.kind == "softmax" or spec.kind in FEATURE_MAPS:
        return None
    key = (_SPAWN_PROJECTIONS, t, seed_index("kind", spec.kind), spec.m,
           seed_index("ensemble", spec.ensemble))
    return draw_projections(spec.m, run.d_k, ensemble=spec.ensemble,
                            seed=np.random.SeedSequence(run.entropy, spawn_key=key))


def _first_sum_failure(scr_all):
    """The first n >= 2 whose median SCR is below 1 (None if none)."""
    below = np.flatnonzero(scr_all[1:] < 1.0)
    return int(below[0]) + 2 if below.size else None


def _measure(run, spec, keys, values, w):
    """One (trial, map): per n the LS error and rank, sum-rule error and SCR; the failure points."""
    try:
        phi, gram = _gram_of(spec, keys, w)
    except _OutOfRange as exc:
        raise _out_of_range(run, spec, str(exc)) from None
    scr_all = signal_to_crosstalk(gram)
    out = {"ls_err": [], "ls_rank": [], "sum_err": [], "scr": [], "ls_fail": None,
           "sum_fail": None}
    cache = {}
    for n in run.ns:
        if phi is not None:
            cache[n] = least_squares_error(phi[:n], values[:n])
            out["ls_err"].append(cache[n][0])
            out["ls_rank"].append(cache[n][1])
        out["sum_err"].append(sum_rule_error(gram, values, n))
        out["scr"].append(scr_all[n - 1])
    if run.find_failures:
        if phi is not None:
            out["ls_fail"] = _first_ls_failure(phi, values, run.fail_tol, cache)
        out["sum_fail"] = _first_sum_failure(scr_all)
    if not (np.all(np.isfinite(out["ls_err"] + out["sum_err"]))
            and not np.any(np.isnan(out["scr"]))):
        raise _out_of_range(run, spec, "its readouts are not finite")
    return out


def _measure_all(run, progress):
    """Every (trial, map): arrays (map, n, trial) of the measures and per-map failure lists."""
    shape = (len(run.specs), len(run.ns), run.trials)
    arrays = {"ls_err": np.full(shape, np.nan), "ls_rank": np.zeros(shape),
              "sum_err": np.full(shape, np.nan), "scr": np.full(shape, np.nan)}
    fails = {"ls_fail": [[None] * run.trials for _ in run.specs],
             "sum_fail": [[None] * run.trials for _ in run.specs]}
    for t in range(run.trials):
        z, values = _trial_pool(run, t)
        with np.errstate(over="ignore"):  # keys beyond float64: _gram_of says so
            keys = z * (run.scale / math.sqrt(run.d_k))
        for a, spec in enumerate(run.specs):
            got = _measure(run, spec, keys, values, _projections(run, spec, t))
            for name, arr in arrays.items():
                if got[name]:
                    arr[a, :, t] = got[name]
            for name, lists in fails.items():
                lists[a][t] = got[name]
            if progress is not None:
                progress(1)
    return arrays, fails


def _capacity_rows(run, arrays):
    """The rows of :class:`CapacityResult` (one per map and n) and the SCR null reasons."""
    rows, infinite_scr = [], set()
    for a, spec in enumerate(run.specs):
        ls = spec.kind != "softmax"
        for b, n in enumerate(run.ns):
            s = arrays["scr"][a, b]
            finite = s[np.isfinite(s)]
            if finite.size < run.trials and n > 1:
                infinite_scr.add(n)
            rows.append({
                "map": spec.name, "label": spec.label, "kind": spec.kind, "nu": spec.nu,
                "m": spec.m, "ensemble": spec.ensemble, "d_k": run.d_k, "d_dot": run.d_dots[a],
                "n": n, "trials": run.trials,
                "ls_error_mean": float(arrays["ls_err"][a, b].mean()) if ls else None,
                "ls_error_max": float(arrays["ls_err"][a, b].max()) if ls else None,
                "ls_rank_mean": float(arrays["ls_rank"][a, b].mean()) if ls else None,
                "sum_error_mean": float(arrays["sum_err"][a, b].mean()),
                "scr_mean": float(finite.mean()) if finite.size == run.trials else None,
                "scr_min": float(finite.min()) if finite.size == run.trials else None,
            })
    reasons = []
    if run.ns[0] == 1:
        reasons.append("n = 1: a single stored pair has no crosstalk (SCR infinite)")
    if infinite_scr:
        reasons.append(f"n = {', '.join(map(str, sorted(infinite_scr)))}: in some trial the median "
                       "SCR over keys is infinite: most keys' crosstalk is 0 (features sharing no "
                       "support with the other keys') or below float64's resolution beside their "
                       "signal (SCR above about 1e8)")
    return rows, ({"scr_mean": "; ".join(reasons), "scr_min": "; ".join(reasons)}
                  if reasons else {})


def _failure_summary(values):
    """(median, min, max) of a map's per-trial failure points (median, max None if one is None)."""
    found = [v for v in values if v is not None]
    if len(found) < len(values):  # some trial did not fail up to n_max
        return None, (min(found) if found else None), None
    return float(np.median(found)), min(found), max(found)


def _failure_rows(run, fails):
    """The failure rows of :class:`CapacityResult`, one per map."""
    failures = []
    for a, spec in enumerate(run.specs):
        ls_ok = run.find_failures and spec.kind != "softmax"
        ls_med, ls_min, ls_max = _failure_summary(fails["ls_fail"][a]) if ls_ok else (None,) * 3
        sum_med, sum_min, sum_max = (_failure_summary(fails["sum_fail"][a]) if run.find_failures
                                     else (None,) * 3)
        failures.append({
            "map": spec.name, "label": spec.label, "d_dot": run.d_dots[a],
            "ls_fail_median": ls_med, "ls_fail_min": ls_min, "ls_fail_max": ls_max,
            "sum_fail_median": sum_med, "sum_fail_min": sum_min, "sum_fail_max": sum_max,
            "ls_fail": list(fails["ls_fail"][a]), "sum_fail": list(fails["sum_fail"][a]),
        })
    return failures


def _capacity_meta(run, failures, null_reasons, seconds):
    """The ``meta`` of :class:`CapacityResult`."""
    n_max = run.ns[-1]
    if any(s.kind == "softmax" for s in run.specs):
        null_reasons["least_squares"] = _NO_LS
        null_reasons["d_dot"] = "softmax: infinite (no finite feature map)"
    if run.find_failures and any(None in f["sum_fail"] + ([] if s.kind == "softmax" else f["ls_fail"])
                                 for f, s in zip(failures, run.specs)):
        null_reasons["failures"] = (f"a null failure n: that readout did not fail for n up to "
                                    f"{n_max} (the largest n_values) in that trial")
    return {
        "study": "capacity",
        "d_k": run.d_k, "d_v": run.d_v, "n_values": run.ns, "maps": [s.name for s in run.specs],
        "trials": run.trials, "key_scale": run.scale, "fail_tol": run.fail_tol,
        "keys": "k ~ N(0, (key_scale^2/d_k) I), v ~ N(0, I_{d_v}); the first n of one pool",
        "sum_rule": "S = sum_j v_j phi(k_j)^T; readout S phi(k_i) / G_ii; fails where the "
                    "median over keys of SCR_i = G_ii / sqrt(sum_{j!=i} G_ij^2) is < 1",
        "least_squares": "S = V^T pinv(Phi) (numerical rank as numpy.linalg.matrix_rank); "
                         "fails where the relative retrieval error > fail_tol",
        "entropy": run.entropy,
        "spawn_keys": {"inputs": "(0, trial)",
                       "projections": "(1, trial, seed_index(kind), m, seed_index(ensemble))",
                       "seed_index": seed_indices(
                           dict.fromkeys(s.kind for s in run.specs if s.m is not None),
                           dict.fromkeys(s.ensemble for s in run.specs if s.m is not None))},
        "seconds": seconds,
        "null_reasons": null_reasons,
    }


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
    OverflowError
        If ``key_scale`` puts a map's features or Gram matrix beyond float64
        (overflow, or a stored key's features underflowing to 0), naming the
        map and about the largest key_scale that works. Short of that,
        features are scaled by a power of two (which changes no readout) and
        the exact kernel's Gram matrix row by row: no result is NaN or inf.
    """
    run = _validated(d_k, n_values, maps, d_v, trials, key_scale, seed, fail_tol, find_failures,
                     progress)
    t0 = time.perf_counter()
    arrays, fails = _measure_all(run, progress)
    seconds = time.perf_counter() - t0
    rows, null_reasons = _capacity_rows(run, arrays)
    failures = _failure_rows(run, fails)
    return CapacityResult(rows, failures, _capacity_meta(run, failures, null_reasons, seconds))
