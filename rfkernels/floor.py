r"""The variance floor: the least error of any sampling policy of independent draws (MATH.md).

An estimator of the form :math:`\hat K = \frac1m\sum_i \varphi(x, \omega_i)\cdot
\varphi(y, \omega_i)\,\Omega(\omega_i)/\rho(\omega_i)`, the :math:`\omega_i` drawn
independently from one policy :math:`\rho` shared by every pair, has on a
population of pairs (weights :math:`w_p`) a mean relative MSE of at least
:math:`F/m`, with

.. math:: F = \bigl(E_{\omega\sim\Omega}\sqrt{G(\omega)}\bigr)^2 - 1,
   \qquad G = \sum_p w_p\, g_p(\omega)^2,\quad g_p = \varphi(x_p)\cdot\varphi(y_p)/K_p,

attained by :math:`\rho^* \propto \Omega\sqrt G` (Cauchy--Schwarz). For
attention, to first order, the least relative MSE is
:math:`(E_\Omega\sqrt H)^2/(m\sum_q|o_q|^2)` with
:math:`H = \sum_q |\varphi(q)\cdot(S_v - o_q S_1)|^2/D_q^2`.

- :func:`kernel_floor`: F of matched pairs or of all queries x keys;
- :func:`attention_floor`: the first-order attention floor of Q, K, V, with
  the validity of the first-order expansion under :math:`\rho^*`.

Both are *per representation* (:mod:`rfkernels.estimators.representations`:
the positive map, the :math:`(\omega, -\omega)` pairing, trig; a DERF kind on
its transformed pairs) and reported per output feature r (times
:attr:`~rfkernels.estimators.Representation.features_per_draw`). They bound
independent draws only: orthogonal, simplex, antithetic and quasi-Monte
Carlo draws are coupled and can go below.

The expectation is a Monte Carlo estimate with its standard error, drawn
from the mixture of tilts (nonnegative representations: the ratio is
bounded, MATH.md "Computing it") or from :math:`\Omega` (trig), until the
standard error is at most ``rtol`` of the value. Everything is in log space.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numba
import numpy as np

from .estimators import registry
from .validation import check_bool, check_choice, check_int, check_matrix, check_real, check_seed

__all__ = ["AttentionFloor", "Floor", "NORMALISER_SD_MAX", "attention_floor", "causal_h", "kernel_floor",
           "valid_from"]

#: Default precision: the standard error at most this share of the value.
DEFAULT_RTOL = 0.01
#: Draws of omega before the precision is first judged, and the most by default.
MIN_DRAWS = 4096
MAX_DRAWS = 1 << 19
#: Pairs of the largest pair sample (a larger population is sampled), and of the first one
#: of the history (the samples double from there).
MAX_PAIRS = 1 << 18
FIRST_PAIRS = 1 << 12
#: Precision of the history's pair samples before the last.
HISTORY_RTOL = 0.03
#: Share of the attention floor's mixture drawn from Omega itself (bounds the ratio).
DEFENSIVE = 0.1
#: The first-order theory is flagged valid where the normalisers' predicted
#: relative standard deviation, :math:`\sqrt{\operatorname{Var}\hat D_i / D_i^2}`
#: averaged over its rows, is at most this: the delta method needs the
#: ratio's denominator nearly exact (its variance matched Monte Carlo to
#: ``|z| < 2`` at L = 32, d = 4, m = 8, entries N(0, 0.2^2), every kind). The
#: diagnosis (its first-order columns) and the floor (under the optimal policy) share it.
NORMALISER_SD_MAX = 0.1
#: A floor above this share of its bound N - 1 is reported as near it.
NEAR_BOUND = 0.5
#: Elements of one batch's largest (draws x pairs) array.
_CHUNK = 1 << 21


def valid_from(normaliser_rel_sd, r):
    """The r from which the first-order expansion holds, given the normalisers' relative standard
    deviation at ``r`` (it falls as 1/sqrt(r)): where it reaches :data:`NORMALISER_SD_MAX`."""
    return r * (normaliser_rel_sd / NORMALISER_SD_MAX) ** 2


@dataclass(frozen=True)
class _Estimate:
    """The fields every floor has (:class:`Floor`, :class:`AttentionFloor`)."""

    value: float
    stderr: float
    per_draw: float
    representation: str
    features_per_draw: int
    draws: int
    rtol: float
    reached: bool
    history: tuple
    sampler: str

    def mse(self, r):
        """The floor at ``r`` output features: ``value / r``."""
        return self.value / check_int(r, "r")


@dataclass(frozen=True)
class Floor(_Estimate):
    """Result of :func:`kernel_floor`.

    Attributes
    ----------
    value, stderr : float
        The least mean relative MSE times r (per output feature), and its
        Monte Carlo standard error: at r features no policy of independent
        draws has a mean relative MSE below ``value / r`` (:meth:`mse`).
    per_draw : float
        F itself, per draw of omega (``value / features_per_draw``).
    representation : str
    features_per_draw : int
    draws, rtol, reached : int, float, bool
        Draws of omega, the precision asked for and whether it was reached.
    history : tuple of (pairs, draws, value, stderr)
        The floor of pair samples of doubling size, the last the value's
        (for the attention floor: (draws, value, stderr) at each check).
    sampler : str
        Where omega was drawn from.
    pairs, population : int
        Pairs the value is computed on, and in the population (more where
        it was sampled: ``max_pairs``).
    bound : float or None
        ``value``'s bound for a nonnegative representation (F + 1 <= max 1/w_p,
        times ``features_per_draw``); None for trig.
    near_bound : bool
        ``value`` above :data:`NEAR_BOUND` of ``bound``: if these pairs are a
        sample of a larger population, its floor is larger than they show.
    """

    pairs: int = 0
    population: int = 0
    bound: Optional[float] = None
    near_bound: bool = False


@dataclass(frozen=True)
class AttentionFloor(_Estimate):
    r"""Result of :func:`attention_floor` (first order).

    Attributes
    ----------
    value, stderr : float
        The least relative attention MSE (MSE over the exact output's mean
        square) times r, per output feature, and its standard error
        (:meth:`mse`: at r features).
    per_draw, representation, features_per_draw, draws, rtol, reached, history, sampler
        As in :class:`Floor`.
    normaliser_rel_var, normaliser_rel_var_stderr : float
        Under the optimal policy at one draw, the normalisers' relative
        variance averaged over rows (at m draws: divided by m), a Monte Carlo
        estimate with its standard error. Its integrand has
        :math:`1/\sqrt{H}`, heavy where H is small: where the standard error
        is of the order of the value the validity is not resolved, and a
        negative value is noise around 0 (inf: the optimal policy never
        draws where some normaliser's integrand lives).
    rows, keys : int
    causal : bool
        Each row with its own key prefix (``favor_attention(causal=True)``).
    """

    normaliser_rel_var: float = 0.0
    normaliser_rel_var_stderr: float = 0.0
    causal: bool = False
    rows: int = 0
    keys: int = 0

    def valid_at(self, r):
        """Whether the first-order expansion holds at ``r`` features under the optimal policy
        (the normalisers' relative standard deviation at most :data:`NORMALISER_SD_MAX`)."""
        return bool(check_int(r, "r") >= self.valid_from())

    def valid_from(self):
        """The r from which the first-order expansion holds under the optimal policy."""
        return valid_from(math.sqrt(max(self.normaliser_rel_var, 0.0) * self.features_per_draw), 1)


# ---------------------------------------------------------------------------
# Validation: once, here
# ---------------------------------------------------------------------------


def _representation(representation, x, y):
    """``(Representation entry, x~, y~)``: a registered representation, or a kind's (a kind name
    or an estimator: its ``spec``), its pairs transformed where the kind says so."""
    if isinstance(representation, str):
        if representation in registry.names("representation"):
            return registry.entry("representation", representation), x, y
        if representation not in registry.names("kind"):
            raise ValueError(f"representation must be one of "
                             f"{', '.join(map(repr, registry.names('representation')))}, a kind "
                             f"name or a fitted estimator; got {representation!r}")
        kind, params = registry.entry("kind", representation), None
        if kind.representation_pairs is not None:
            raise ValueError(f"representation: kind {representation!r} has parameters fitted on "
                             "data; pass the fitted estimator (rfkernels.estimator(kind).fit(Q, K))")
    else:
        spec = getattr(representation, "spec", representation)
        kind, params = getattr(spec, "kind", None), getattr(spec, "params", None)
        if not isinstance(kind, registry.Kind):
            raise TypeError(f"representation must be a name or an estimator; got "
                            f"{type(representation).__name__}")
        if getattr(spec, "needs_fit", False):
            raise ValueError(f"representation: kind {kind.name!r} is fitted on data; fit the "
                             "estimator first (est.fit(Q, K))")
    if kind.representation is None:
        raise ValueError(f"representation: kind {kind.name!r} has no registered representation "
                         f"(its random phase is part of its map); floors exist for "
                         f"{', '.join(map(repr, registry.names('representation')))}")
    if kind.representation_pairs is not None:
        x, y = kind.representation_pairs(params, x, y)
    return registry.entry("representation", kind.representation), x, y


def _kernel_scale(kernel, gamma):
    entry = registry.entry("kernel", kernel)
    values = {} if gamma is None else {"gamma": gamma}
    if set(values) - set(entry.param_names):
        raise ValueError(f"gamma is for kernel='gaussian'; kernel={kernel!r} takes no gamma")
    return entry.scale(entry.check_params(values))


def _weights(weights, shape, pairs):
    """log weights of shape ``shape``, summing to 1."""
    if weights is None:
        return np.full(shape, -math.log(math.prod(shape)))
    w = check_real(weights, "weights")
    if w.shape != shape:
        expected = "one per matched pair" if pairs == "matched" else "(L_q, L_k): one per query-key pair"
        raise ValueError(f"weights must have shape {shape} ({expected}); got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError("weights must be finite, >= 0 and not all 0")
    with np.errstate(divide="ignore"):
        return np.log(w) - math.log(float(w.sum()))


def _checked_precision(rtol, max_draws):
    rtol = float(check_real(rtol, "rtol"))
    if not 0.0 < rtol < 1.0:
        raise ValueError(f"rtol must be in (0, 1); got {rtol!r}")
    return rtol, check_int(max_draws, "max_draws", minimum=MIN_DRAWS)


# ---------------------------------------------------------------------------
# Log-space pieces
# ---------------------------------------------------------------------------


def _signed_logsumexp(terms):
    """``(log|sum|, sign)`` of ``sum_c sign_c exp(log_c)`` over a list of ``(log, sign or None)``."""
    top = np.max([t[0] for t in terms], axis=0)
    top = np.where(np.isfinite(top), top, 0.0)
    total = sum((1.0 if s is None else s) * np.exp(lg - top) for lg, s in terms)
    with np.errstate(divide="ignore"):
        return np.log(np.abs(total)) + top, np.sign(total)


def _logsumexp(a, axis, b=None):
    top = np.max(a, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    e = np.exp(a - top)
    s = np.sum(e if b is None else e * b, axis=axis)
    with np.errstate(divide="ignore"):
        return np.log(s) + np.squeeze(top, axis=axis)


def _components(rep, omega, x):
    """The representation's components at the rows ``x`` for each omega: [(log (B, n), sign)]."""
    return rep.components(omega @ x.T, 0.5 * np.sum(x * x, axis=1))


# ---------------------------------------------------------------------------
# The kernel-level floor
# ---------------------------------------------------------------------------


class _Population:
    """The pairs: matched rows or all queries x keys, with log weights; log(sqrt G / mixture)."""

    def __init__(self, rep, x, y, pairs, logw):
        self.rep, self.x, self.y, self.all, self.logw = rep, x, y, pairs == "all", logw
        self.tilted = rep.tilt_signs is not None
        p = np.exp(logw.ravel())
        self.prob = p / p.sum()  # the tilts' sampling probabilities (the pairs' weights)
        if self.all:
            xy = x @ y.T
            self.m2 = float(np.max(logw - 2.0 * xy))
            self.w2 = np.exp(logw - 2.0 * xy - self.m2)  # w e^{-2x.y}, scaled
            self.m1 = float(np.max(logw - xy))
            self.w1 = np.exp(logw - xy - self.m1)  # w e^{-x.y}: the mixture's weights s = w
            self.n = x.shape[0] * y.shape[0]
        else:
            self.xy = np.sum(x * y, axis=1)
            self.n = x.shape[0]

    def centres(self, rng, size):
        """Tilt centres u_p = x_p + y_p of ``size`` pairs drawn by weight."""
        idx = rng.choice(self.prob.size, size=size, p=self.prob)
        if self.all:
            i, j = np.divmod(idx, self.y.shape[0])
            return self.x[i] + self.y[j]
        return self.x[idx] + self.y[idx]

    def log_ratio(self, omega):
        """log of sqrt(G(omega)) over the mixture's density ratio M/Omega (tilted), or of sqrt(G)."""
        cx, cy = _components(self.rep, omega, self.x), _components(self.rep, omega, self.y)
        if self.all:
            log_g2, log_g = self._factorised(cx, cy)
        else:
            log_g, _ = _signed_logsumexp([(lx + ly - self.xy, None if sx is None else sx * sy)
                                          for (lx, sx), (ly, sy) in zip(cx, cy)])
            log_g2 = _logsumexp(self.logw + 2.0 * log_g, axis=1)
            log_g = _logsumexp(self.logw + log_g, axis=1) if self.tilted else None
        return 0.5 * log_g2 - (log_g if self.tilted else 0.0)

    def _factorised(self, cx, cy):
        """All pairs through (L_q, L_k) matrix products: log sum_p w_p g_p^2 and log sum_p w_p g_p."""
        ax = 2.0 * np.max([c[0] for c in cx], axis=(0, 2))[:, None]
        ay = 2.0 * np.max([c[0] for c in cy], axis=(0, 2))[:, None]
        total = 0.0
        for a, (lxa, sxa) in enumerate(cx):
            for b, (lxb, sxb) in enumerate(cx):
                px = np.exp(lxa + lxb - ax) * (1.0 if sxa is None else sxa * sxb)
                (lya, sya), (lyb, syb) = cy[a], cy[b]
                py = np.exp(lya + lyb - ay) * (1.0 if sya is None else sya * syb)
                total = total + np.sum((px @ self.w2) * py, axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_g2 = np.log(total) + (ax + ay)[:, 0] + self.m2
        log_g = None
        if self.tilted:
            bx, by = 0.5 * ax, 0.5 * ay
            first = sum(np.sum((np.exp(lx - bx) @ self.w1) * np.exp(ly - by), axis=1)
                        for (lx, _), (ly, _) in zip(cx, cy))
            with np.errstate(divide="ignore"):
                log_g = np.log(first) + (bx + by)[:, 0] + self.m1
        bad = ~np.isfinite(log_g2) | (total <= 1e-290)
        if log_g is not None:
            bad |= ~np.isfinite(log_g)
        if np.any(bad):  # underflow of the scaled products: every pair in log space
            exact = self._direct([(lx[bad], sx if sx is None else sx[bad]) for lx, sx in cx],
                                 [(ly[bad], sy if sy is None else sy[bad]) for ly, sy in cy])
            log_g2[bad] = exact[0]
            if log_g is not None:
                log_g[bad] = exact[1]
        return log_g2, log_g

    def _direct(self, cx, cy):
        """All pairs in log space, a few draws at a time (the factorised products' fallback)."""
        xy = self.x @ self.y.T
        out2, out1 = [], []
        for b in range(cx[0][0].shape[0]):
            terms = [(lx[b][:, None] + ly[b][None, :] - xy,
                      None if sx is None else sx[b][:, None] * sy[b][None, :])
                     for (lx, sx), (ly, sy) in zip(cx, cy)]
            lg, _ = _signed_logsumexp(terms)
            out2.append(_logsumexp((self.logw + 2.0 * lg).ravel(), axis=0))
            out1.append(_logsumexp((self.logw + lg).ravel(), axis=0))
        return np.array(out2), np.array(out1)


def _draw(pop_centres, rep, rng, batch, d, defensive=0.0):
    """``batch`` omegas: N(0, I), or the mixture of tilts (``defensive`` of them N(0, I))."""
    omega = rng.standard_normal((batch, d))
    if rep.tilt_signs is None:
        return omega
    tilted = rng.random(batch) >= defensive
    k = int(np.count_nonzero(tilted))
    signs = np.asarray(rep.tilt_signs)[rng.integers(0, len(rep.tilt_signs), size=k)]
    omega[tilted] += signs[:, None] * pop_centres(rng, k)
    return omega


class _Mean:
    """A running Monte Carlo mean of exp(log values), with the history of E^2 as the draws double."""

    def __init__(self, rtol, max_draws):
        self.rtol, self.max_draws = rtol, max_draws
        self.logs, self.extra, self.history = [], [], []
        self.next_check = MIN_DRAWS

    def add(self, log_values, extra=None):
        self.logs.append(log_values)
        if extra is not None:
            self.extra.append(extra)

    @property
    def n(self):
        return sum(v.size for v in self.logs)

    def square(self):
        """(E^2 estimated without bias, its standard error, E) from the draws so far."""
        logs = np.concatenate(self.logs)
        if np.any(np.isnan(logs) | (logs == np.inf)):  # -inf is a ratio of 0 (H or G is 0 there)
            raise FloatingPointError("the floor's Monte Carlo ratio is not finite for some draws "
                                     "(its terms overflow float64)")
        top = float(np.max(logs))
        if top == -math.inf:
            return 0.0, 0.0, 0.0
        r = np.exp(logs - top)
        n = r.size
        mean, var = float(np.mean(r)), float(np.var(r, ddof=1))
        scale = math.exp(2.0 * top) if top < 354.0 else math.inf
        if not math.isfinite(scale):
            raise OverflowError(f"the floor exceeds float64 (log E[sqrt G] = {top:.1f}): out of range")
        return (mean * mean - var / n) * scale, 2.0 * mean * math.sqrt(var / n) * scale, mean * math.exp(top)

    def done(self, value_of):
        """After a batch: at each check, record the estimate and aim the next check at the draws
        the standard error asks for (at most twice as many); True once precise or at the cap."""
        n = self.n
        if n < self.next_check and n < self.max_draws:
            return False
        value, se = value_of()
        self.history.append((n, value, se))
        if se <= self.rtol * abs(value) or n >= self.max_draws or se == 0.0:
            return True
        wanted = n * (se / (self.rtol * abs(value))) ** 2 * 1.05 if value else 2.0 * n
        self.next_check = int(min(2 * n, max(n + 1, wanted)))
        return False


def _batch_size(n_items):
    return int(min(1024, max(16, _CHUNK // max(n_items, 1))))


def kernel_floor(X, Y, *, pairs="matched", weights=None, kernel="softmax", gamma=None,
                 representation="positive", seed=0, rtol=DEFAULT_RTOL, max_draws=MAX_DRAWS,
                 max_pairs=MAX_PAIRS):
    r"""The least mean relative MSE of any policy of independent draws on a population of pairs.

    Parameters
    ----------
    X, Y : array_like of shape (N, d) and (N, d), or (L_q, d) and (L_k, d)
        Queries and keys.
    pairs : {"matched", "all"}
        Row p of X with row p of Y, or every query with every key.
    weights : array_like, optional
        Nonnegative: (N,) per matched pair, or (L_q, L_k); default equal.
    kernel : {"softmax", "gaussian"}, gamma : float
        The target kernel (the Gaussian kernel's relative errors are the
        softmax kernel's at :math:`\sqrt{2\gamma}` times the inputs).
    representation : str or estimator
        A registered representation (``"positive"``, ``"pairing"``,
        ``"trig"``), a kind name, or a fitted estimator (a DERF kind: its
        transformed pairs).
    seed : None, int, SeedSequence or Generator
    rtol : float
        Draw until the standard error is at most this share of the value.
    max_draws : int
        The most draws of omega.
    max_pairs : int
        The most pairs the floor is computed on: a larger population is
        sampled (matched pairs by weight; all pairs as a sub-grid of queries
        x keys). The history doubles the pair sample from
        :data:`FIRST_PAIRS` to that size, each before the last to
        :data:`HISTORY_RTOL`; a floor that still grows at the last doubling,
        or is ``near_bound``, is larger for the whole population.

    Returns
    -------
    Floor
        ``value``: the least mean relative MSE times r; at r output
        features no such policy goes below ``value / r``.
    """
    x, y = check_matrix(X, "X"), check_matrix(Y, "Y")
    if x.shape[1] != y.shape[1]:
        raise ValueError(f"X and Y must share d; got {x.shape[1]} and {y.shape[1]}")
    check_choice(pairs, "pairs", ("matched", "all"))
    if pairs == "matched" and x.shape[0] != y.shape[0]:
        raise ValueError(f"pairs='matched' needs as many rows in X as in Y; got {x.shape[0]} and "
                         f"{y.shape[0]} (pairs='all' pairs every row of X with every row of Y)")
    shape = (x.shape[0],) if pairs == "matched" else (x.shape[0], y.shape[0])
    logw = _weights(weights, shape, pairs)
    c = _kernel_scale(kernel, gamma)
    rtol, max_draws = _checked_precision(rtol, max_draws)
    rng = check_seed(seed)
    max_pairs = check_int(max_pairs, "max_pairs", minimum=2)
    rng = check_seed(seed)
    rep, x, y = _representation(representation, c * x, c * y)
    fpd = rep.features_per_draw
    history, samples = [], list(_pair_samples(pairs, x, y, logw, rng, max_pairs))
    for i, (xs, ys, lw) in enumerate(samples):
        last = i == len(samples) - 1
        pop = _Population(rep, xs, ys, pairs, lw)
        value, se, acc = _floor_of(pop, rng, rtol if last else max(rtol, HISTORY_RTOL), max_draws)
        history.append((pop.n, acc.n, value, se))
    bound = fpd * (math.exp(-float(np.min(lw))) - 1.0) if pop.tilted else None
    total = x.shape[0] if pairs == "matched" else x.shape[0] * y.shape[0]
    return Floor(value=value, stderr=se, per_draw=value / fpd, representation=rep.name,
                 features_per_draw=fpd, pairs=pop.n, population=total, bound=bound,
                 near_bound=bool(bound is not None and value > NEAR_BOUND * bound),
                 draws=acc.n, rtol=rtol, reached=bool(se <= rtol * abs(value) or se == 0.0),
                 history=tuple(history),
                 sampler="the mixture of tilts at the pairs (by weight)" if pop.tilted
                 else "omega ~ N(0, I) (the representation changes sign: no tilt)")


def _floor_of(pop, rng, rtol, max_draws):
    """(value, stderr, the accumulator) of one population of pairs, per output feature."""
    fpd = pop.rep.features_per_draw
    batch = _batch_size(pop.n if not pop.all else pop.x.shape[0] + pop.y.shape[0])
    acc = _Mean(rtol, max_draws)

    def value_of():
        sq, se, _ = acc.square()
        return fpd * (sq - 1.0), fpd * se

    while True:
        acc.add(pop.log_ratio(_draw(pop.centres, pop.rep, rng, batch, pop.x.shape[1])))
        if acc.done(value_of):
            break
    value, se = acc.history[-1][1:]
    return value, se, acc


def _pair_samples(pairs, x, y, logw, rng, max_pairs):
    """``(x, y, log weights)`` of pair samples of doubling size from :data:`FIRST_PAIRS`, the last
    the whole population or ``max_pairs`` pairs: matched pairs drawn by weight (then equally
    weighted), all pairs as a sub-grid of random queries x random keys."""
    n = x.shape[0] if pairs == "matched" else x.shape[0] * y.shape[0]
    top = min(n, max_pairs)
    sizes = [FIRST_PAIRS << i for i in range(64) if FIRST_PAIRS << i < top] + [top]
    for size in sizes:
        if size >= n:
            yield x, y, logw
        elif pairs == "matched":
            p = np.exp(logw - logw.max())
            idx = rng.choice(n, size=size, p=p / p.sum())
            yield x[idx], y[idx], np.full(size, -math.log(size))
        else:
            share = math.sqrt(size / n)
            rows = np.sort(rng.choice(x.shape[0], max(1, round(share * x.shape[0])), replace=False))
            cols = np.sort(rng.choice(y.shape[0], max(1, round(share * y.shape[0])), replace=False))
            lw = logw[np.ix_(rows, cols)]
            yield x[rows], y[cols], lw - _logsumexp(lw.ravel(), axis=0)


# ---------------------------------------------------------------------------
# The attention floor, to first order
# ---------------------------------------------------------------------------


class _Head:
    """One head's exact attention and, per omega, log sqrt(H) over the mixture's ratio.

    Causal: row i attends the keys j <= i, so its sums over keys are prefix sums.
    """

    def __init__(self, rep, q, k, v, defensive, causal=False):
        self.rep, self.q, self.k, self.v, self.defensive = rep, q, k, v, defensive
        self.causal = causal
        logits = q @ k.T
        if causal:
            logits = np.where(np.tri(q.shape[0], k.shape[0], dtype=bool), logits, -np.inf)
        self.log_den = _logsumexp(logits, axis=1)  # log D_q
        p = np.exp(logits - self.log_den[:, None])  # softmax weights K_qj / D_q (0 beyond i)
        self.o = p @ v
        self.out_sq = float(np.sum(self.o * self.o))
        sq = (np.sum(v * v, axis=1)[None, :] - 2.0 * (self.o @ v.T)
              + np.sum(self.o * self.o, axis=1)[:, None])
        self.spread = np.sqrt(np.maximum(sq, 0.0))  # |v_j - o_q|, (L_q, L_k)
        if causal:
            self.spread = np.where(np.isfinite(logits), self.spread, 0.0)
        c = p * self.spread  # the tilts' weights c_qj = K_qj |v_j - o_q| / D_q
        self.c_total = float(np.sum(c))
        self.c_prob = (c / self.c_total).ravel() if self.c_total > 0 else None
        self.tilted = rep.tilt_signs is not None and self.c_prob is not None
        self.o_sq = np.sum(self.o * self.o, axis=1)

    def centres(self, rng, size):
        idx = rng.choice(self.c_prob.size, size=size, p=self.c_prob)
        i, j = np.divmod(idx, self.k.shape[0])
        return self.q[i] + self.k[j]

    def logs(self, omega):
        """(log sqrt(H) - log(M/Omega), log U - log sqrt(H) - log(M/Omega) + shift) per omega,
        U the rows' mean (phi(q).S_1 / D_q)^2 (the normalisers' second moment)."""
        cq, ck = _components(self.rep, omega, self.q), _components(self.rep, omega, self.k)
        aq = np.max([lq - self.log_den for lq, _ in cq], axis=(0, 2))
        ak = np.max([lk for lk, _ in ck], axis=(0, 2))
        pq, pks, sv, s1 = [], [], [], []
        mix = 0.0
        for (lq, sq), (lk, sk) in zip(cq, ck):
            p = np.exp(lq - self.log_den - aq[:, None])  # phi_c(q) / D_q, scaled, (B, L_q)
            pq.append(p if sq is None else p * sq)
            pk = np.exp(lk - ak[:, None])  # phi_c(k), scaled, (B, L_k)
            if self.tilted:
                mix = mix + np.sum(p * (pk @ self.spread.T), axis=1)
            pk = pk if sk is None else pk * sk
            if self.causal:
                pks.append(pk)
            else:
                sv.append(pk @ self.v)  # S_v,c (B, d_v)
                s1.append(np.sum(pk, axis=1))  # S_1,c (B,)
        if self.causal:  # each row's own keys: running prefix sums, one pass (no (B, L, d_v) array)
            h, s1q = causal_h(np.stack(pq), np.stack(pks), self.v, self.o)
        else:
            h = self._h(pq, sv, s1)
            s1q = sum(p * s[:, None] for p, s in zip(pq, s1))  # phi(q).S_1 / D_q, scaled
        with np.errstate(divide="ignore"):
            log_h = 0.5 * np.log(np.maximum(h, 0.0)) + aq + ak  # log sqrt(H)
            log_u = np.log(np.mean(s1q * s1q, axis=1)) + 2.0 * (aq + ak)
            if self.tilted:
                tilt = np.log(mix) + aq + ak - math.log(self.c_total)
                log_mix = np.logaddexp(math.log1p(-self.defensive) + tilt, math.log(self.defensive))
            else:
                log_mix = np.zeros_like(log_h)
        return log_h - log_mix, log_u - log_h - log_mix


    def _h(self, pq, sv, s1):
        """sum_q |sum_c phi_c(q) (S_vc - o_q S_1c)|^2 / D_q^2 (scaled), through
        (B, L_q) @ (L_q, .) products (bidirectional)."""
        h = 0.0
        for a in range(len(pq)):
            for b in range(len(pq)):
                alpha = pq[a] * pq[b]
                h = h + (np.sum(alpha, axis=1) * np.sum(sv[a] * sv[b], axis=1)
                         - np.sum((alpha @ self.o) * (sv[a] * s1[b][:, None] + sv[b] * s1[a][:, None]),
                                  axis=1)
                         + (alpha @ self.o_sq) * s1[a] * s1[b])
        return h


@numba.njit(cache=True, nogil=True, error_model="numpy")
def causal_h(pq, pk, v, o):
    r"""Causal H and the normalisers of each omega: ``(h (B,), s1q (B, L))``.

    ``pq``, ``pk``: (components, B, L) the (scaled) features :math:`\varphi_c(q_i)/D_i`
    and :math:`\varphi_c(k_j)`; ``v``, ``o`` (L, d_v) the values and the exact
    outputs. With the prefix sums :math:`S_{vc}(i) = \sum_{j \le i}\varphi_c(k_j) v_j`,
    :math:`S_{1c}(i) = \sum_{j \le i}\varphi_c(k_j)`:
    :math:`h = \sum_i |\sum_c \varphi_c(q_i)(S_{vc}(i) - o_i S_{1c}(i))/D_i|^2` and
    ``s1q[b, i]`` :math:`= \sum_c \varphi_c(q_i) S_{1c}(i)/D_i`, in one running pass.
    """
    n_c, n_b, n = pq.shape
    dv = v.shape[1]
    h = np.zeros(n_b)
    s1q = np.empty((n_b, n))
    sv = np.empty((n_c, dv))
    s1 = np.empty(n_c)
    t = np.empty(dv)
    for b in range(n_b):
        sv[:] = 0.0
        s1[:] = 0.0
        acc = 0.0
        for i in range(n):
            for c in range(n_c):
                w = pk[c, b, i]
                s1[c] += w
                for e in range(dv):
                    sv[c, e] += w * v[i, e]
            t[:] = 0.0
            norm = 0.0
            for c in range(n_c):
                p = pq[c, b, i]
                norm += p * s1[c]
                for e in range(dv):
                    t[e] += p * (sv[c, e] - o[i, e] * s1[c])
            for e in range(dv):
                acc += t[e] * t[e]
            s1q[b, i] = norm
        h[b] = acc
    return h, s1q


def _normaliser_rel_var(acc):
    """The normalisers' relative variance at one draw under the optimal policy, and its standard
    error: Z E_M[(phi(q).S_1/D_q)^2 / sqrt(H) Omega/M] - 1, Z = E sqrt(H) (inf where some drawn
    omega has H = 0: the optimal policy never draws there, and the normaliser's variance under it
    is infinite)."""
    _, _, z = acc.square()
    extra = np.concatenate(acc.extra)
    if z == 0.0 or np.any(extra == np.inf):
        return math.inf, math.inf
    top = float(np.max(extra))
    scaled = np.exp(extra - top)
    scale = z * math.exp(top)
    return (scale * float(np.mean(scaled)) - 1.0,
            scale * float(np.std(scaled, ddof=1)) / math.sqrt(scaled.size))


def attention_floor(Q, K, V, *, scale=None, representation="positive", causal=False, seed=0,
                    rtol=DEFAULT_RTOL, max_draws=MAX_DRAWS, defensive=DEFENSIVE):
    r"""The least relative attention MSE of any policy of independent draws, to first order.

    Bidirectional attention of queries ``Q`` (L_q, d), keys ``K`` (L_k, d)
    and values ``V`` (L_k, d_v) at temperature ``scale`` (default
    :math:`1/\sqrt d`, split symmetrically as in ``diagnose``: the kernel is
    :math:`e^{q'\cdot k'}` with :math:`q' = \sqrt{scale}\,q`). Omega is drawn
    from tilts at :math:`q' + k'_j` weighted by :math:`K_{qj}|v_j - o_q|/D_q`,
    with a share ``defensive`` from :math:`\Omega` (a nonnegative
    representation; trig samples :math:`\Omega`), so the ratio is bounded.
    ``causal=True``: row i attends the keys j <= i (L_q = L_k), each row's
    sums over keys are prefix sums and its tilts are its own pairs; the
    prefix-sum attention of ``favor_attention(causal=True)`` has this floor.

    Returns
    -------
    AttentionFloor
        ``value``: the least relative attention MSE (over the exact output's
        mean square) times r; ``valid_at(r)``: whether the first-order
        expansion holds there under the optimal policy.
    """
    q, k, v = check_matrix(Q, "Q"), check_matrix(K, "K"), check_matrix(V, "V")
    if q.shape[1] != k.shape[1]:
        raise ValueError(f"Q and K must share d; got {q.shape[1]} and {k.shape[1]}")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"V must have one row per key ({k.shape[0]}); got {v.shape[0]}")
    causal = check_bool(causal, "causal")
    if causal and q.shape[0] != k.shape[0]:
        raise ValueError(f"causal=True needs one key per query row (row i attends keys j <= i); "
                         f"got {q.shape[0]} queries and {k.shape[0]} keys")
    scale = 1.0 / math.sqrt(q.shape[1]) if scale is None else float(check_real(scale, "scale"))
    if not (math.isfinite(scale) and scale > 0):
        raise ValueError(f"scale must be a finite number > 0; got {scale!r}")
    defensive = float(check_real(defensive, "defensive"))
    if not 0.0 < defensive < 1.0:
        raise ValueError(f"defensive must be in (0, 1); got {defensive!r}")
    rtol, max_draws = _checked_precision(rtol, max_draws)
    rng = check_seed(seed)
    root = math.sqrt(scale)
    rep, q, k = _representation(representation, root * q, root * k)
    head = _Head(rep, q, k, v, defensive, causal)
    if head.out_sq == 0.0:
        raise ValueError("the exact attention output is zero: no relative MSE")
    if not np.any(np.ptp(v, axis=0)):  # V the same for every key: every draw gives o exactly
        return AttentionFloor(value=0.0, stderr=0.0, per_draw=0.0, representation=rep.name,
                              features_per_draw=rep.features_per_draw, draws=0, rtol=rtol,
                              reached=True, history=(), rows=q.shape[0], keys=k.shape[0],
                              causal=causal,
                              sampler="none: V is the same for every key, so H = 0 and every "
                                      "estimator with positive normalisers returns o exactly")
    fpd = rep.features_per_draw
    batch = _batch_size(q.shape[0] * (v.shape[1] + 1) if causal else q.shape[0] + k.shape[0])
    acc = _Mean(rtol, max_draws)

    def value_of():
        sq, se, _ = acc.square()
        return fpd * sq / head.out_sq, fpd * se / head.out_sq

    while True:
        omega = _draw(head.centres, rep, rng, batch, q.shape[1], defensive) if head.tilted else \
            rng.standard_normal((batch, q.shape[1]))
        acc.add(*head.logs(omega))
        if acc.done(value_of):
            break
    value, se = acc.history[-1][1:]
    rel_var, rel_var_se = _normaliser_rel_var(acc)
    return AttentionFloor(value=value, stderr=se, per_draw=value / fpd, normaliser_rel_var=rel_var,
                          normaliser_rel_var_stderr=rel_var_se,
                          representation=rep.name, features_per_draw=fpd, rows=q.shape[0],
                          keys=k.shape[0], causal=causal, draws=acc.n, rtol=rtol,
                          reached=bool(se <= rtol * abs(value) or se == 0.0),
                          history=tuple(acc.history),
                          sampler=(f"tilts at q' + k'_j weighted by K_qj |v_j - o_q| / D_q, "
                                   f"{defensive:g} from N(0, I)") if head.tilted
                          else "omega ~ N(0, I)")
