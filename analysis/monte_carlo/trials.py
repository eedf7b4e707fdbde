"""One validated Monte Carlo run's trials: the proposals, the chunks, the accumulation, the results.

:func:`run` takes the frozen setup :mod:`rfkernels.analysis.monte_carlo.mse`
validated (its attributes only) and returns every pair's
:class:`~rfkernels.analysis.results.MonteCarloResult`: it chooses each
pair's proposal (:func:`choose_proposals`; the ``"auto"`` pilot), draws the
trials chunk by chunk on the run's engine (:func:`reduced_chunks`) or
literally (:func:`literal_chunks`), merges them in fixed blocks
(:mod:`rfkernels.analysis.moments`) and runs a pair again tilted where its
plain run came out heavy.
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

from rfkernels import engine
from rfkernels.backends import array_namespace, to_numpy
from rfkernels.features import feature_map, log_estimate
from rfkernels.projections import draw_kind_projections, draw_phases
from rfkernels.rng import key_from_seed

from ..moments import Accumulator
from ..results import MonteCarloResult
from ..tail import MIN_TAIL, REACH_MIN, TAIL_K_MAX, pareto_k_hat, reach, tail_from_top, tail_size

#: Plain trials of the pilot run with which ``proposal="auto"`` decides.
PILOT_TRIALS = 1 << 14
#: ``proposal="auto"`` stays plain above this |x + y|^2: a moved term's squared error,
#: about e^{3|x + y|^2} relative to SM^2 before its weight e^{-2|x + y|^2} scales it
#: down, would not fit in float64 (it overflows near |x + y|^2 = 236).
TILT_LOG_MAX = 200.0
#: Normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054
#: Largest natural log of a float64.
LOG_MAX = math.log(np.finfo(np.float64).max)


@dataclass
class Plan:
    """Each pair's proposal (:func:`choose_proposals`), revised where a plain run is rerun tilted."""

    tilts: list  # per pair: the Tilt drawn from, or None (plain)
    notes: list  # per pair: why that proposal
    pilot_k: list  # per pair: the pilot's k-hat, or None (no pilot)
    fallback: list  # per pair: the Tilt to rerun with if auto's plain run comes out heavy

    @classmethod
    def plain(cls, pairs, note=""):
        return cls([None] * pairs, [note] * pairs, [None] * pairs, [None] * pairs)


def recorded_entropy(entropy):
    """A SeedSequence's entropy as results record it: an int, or a tuple of ints."""
    if isinstance(entropy, (numbers.Integral, np.integer)):
        return int(entropy)
    return tuple(int(v) for v in entropy)


def reduced_chunks(s, tilts=None, first=0, pairs=None):
    """``(pair, n, e, w, xp)`` of every pair (or of ``pairs``), chunk by chunk; ``w`` None if plain.

    ``tilts``: each pair's :class:`rfkernels.engine.Tilt` or None (default: all plain).
    """
    key = key_from_seed(s.seq)
    tilts = tilts or [None] * len(s.norm)
    xp = s.engine.xp
    for pair, nm in enumerate(s.norm):
        if pairs is not None and pair not in pairs:
            continue
        for n, e, w in s.engine.chunks(key, nm.length, s.consts[pair], trials=s.trials, first=first,
                                       pair=pair, tilt=tilts[pair]):
            yield pair, n, e, w, xp


def choose_proposals(s):
    """Each pair's proposal (a :class:`Plan`) as ``s.proposal`` asks."""
    pairs = len(s.norm)
    if s.proposal == "plain":
        return Plan.plain(pairs, "plain: as requested")
    if not s.est.supports.tilted or s.method != "reduced":
        if s.est.kind.tilt_reason is not None:
            fmap = s.est.kind.feature_map
            why = (f"{s.est.kind.name} estimates are bounded: nothing to tilt"
                   if fmap is not None and fmap.bounded else f"kind={s.est.kind.name!r} has no tilted proposal")
        elif s.method != "reduced":
            why = "the literal method has no proposal"
        else:  # the norm law (antithetic norms) or the kind's parameters refuse it
            why = "the tilted proposal " + s.est.supports.tilted.reason.removeprefix("proposal='tilted' ").split(";")[0]
        return Plan.plain(pairs, f"plain: {why}")
    plan = Plan.plain(pairs)
    key = key_from_seed(s.seq)
    for pair, nm in enumerate(s.norm):
        tilt = engine.tilt_of(s.est, s.a[pair], nm.length)
        if s.proposal == "tilted":
            plan.tilts[pair], plan.notes[pair] = tilt, "tilted: as requested"
            continue
        if nm.length * nm.length > TILT_LOG_MAX:
            plan.notes[pair] = (f"plain: |x+y|^2 = {nm.length * nm.length:.4g} > {TILT_LOG_MAX:g}; "
                             "a moved term's squared error (about e^(3|x+y|^2) relative to SM^2) "
                             "would overflow float64")
            continue
        plain_reach = reach(s.est.kind, nm.length, s.trials, s.m, d=s.d, norms=s.norms, A=s.a[pair])
        if plain_reach < REACH_MIN:
            plan.tilts[pair] = tilt
            plan.notes[pair] = (f"tilted: plain trials would reach the region the MSE comes from "
                             f"about {plain_reach:.3g} times (< {REACH_MIN:g})")
            continue
        n = min(PILOT_TRIALS, s.trials)  # a short run's pilot is as long as the run
        sq = []
        for _, e, _ in s.engine.chunks(key, nm.length, s.consts[pair], trials=n,
                                       first=engine.MAX_TRIALS - n, pair=pair):
            err = to_numpy(e) - nm.target
            sq.append(err * err)
        sq = np.concatenate(sq)
        k = pareto_k_hat(sq) if np.all(np.isfinite(sq)) and tail_size(n) >= MIN_TAIL else math.nan
        plan.pilot_k[pair] = None if math.isnan(k) else float(k)
        if not np.all(np.isfinite(sq)) or k >= TAIL_K_MAX:
            plan.tilts[pair] = tilt
            plan.notes[pair] = f"tilted: pilot k_hat = {k:.4g} >= {TAIL_K_MAX} ({n} plain trials)"
        else:
            shown = "undefined" if math.isnan(k) else f"{k:.4g} < {TAIL_K_MAX}"
            plan.notes[pair] = f"plain: pilot k_hat {shown} ({n} plain trials)"
            plan.fallback[pair] = tilt
    return plan


def literal_chunks(s, first=0):
    """Normalised estimates of all pairs per trial (pairs share each trial's W)."""
    xp = array_namespace(s.backend)
    gen = np.random.default_rng(s.seq)
    X, Y = xp.asarray(s.X), xp.asarray(s.Y)
    # the target's scale: the feature maps estimate the target kernel itself (kernel=, gamma=),
    # whose per-row factors cancel trig's and offset's exactly
    log_scale = np.array([nm.log_scale + f for nm, f in zip(s.norm, s.log_factor)])
    target = {"kernel": s.est.kernel.name, "gamma": getattr(s.est.kernel_params, "gamma", None)}
    # the linear domain where it cannot overflow, and where the map's linear estimate is not formed
    # by cancellation (the hybrid's angular weights: its log estimate instead)
    linear = bool(np.all(np.abs(log_scale) < 700.0)) and not s.est.kind.feature_map.linear_cancels
    inv_scale = xp.asarray(np.exp(-log_scale)) if linear else None
    draw_backend = "cupy" if s.backend == "cupy" else "numpy"

    def draw():  # the projections, then (offset) their phases, from the same Generator
        w = draw_kind_projections(s.m, s.d, s.kind, ensemble=s.ensemble, norms=s.norms, seed=gen,
                                  backend=draw_backend)
        b = draw_phases(s.m, seed=gen, backend=draw_backend) if s.est.kind.random_phase else None
        return w, b

    if s.est.kind.feature_map.two_roles:  # a query map and a key map (DERF; tilted)
        estimates, log_estimates = _derf_literal(s, X, Y, xp)
    # pairs sharing one value of the kind's parameter (OPRF's A per pair; None for a kind
    # without one) go through one feature_map call
    values = list(dict.fromkeys(s.a)) if s.est.kind.pair_transform is None else [None]
    groups = [(values[0], None)]
    if len(values) > 1:
        groups = [(a, xp.asarray(np.flatnonzero(np.array(s.a) == a))) for a in values]

    def plain_estimates(w, b):
        if len(groups) == 1:
            a = groups[0][0]
            return xp.sum(feature_map(X, w, s.kind, A=a, phase=b, **target)
                          * feature_map(Y, w, s.kind, A=a, phase=b, role="key", **target), axis=1)
        est = xp.empty(X.shape[0])
        for a, idx in groups:
            est[idx] = xp.sum(feature_map(X[idx], w, s.kind, A=a, **target)
                              * feature_map(Y[idx], w, s.kind, A=a, role="key", **target), axis=1)
        return est

    def plain_log_estimates(w, b):
        sign, logabs = xp.empty(X.shape[0]), xp.empty(X.shape[0])
        for a, idx in groups:
            xs, ys = (X, Y) if idx is None else (X[idx], Y[idx])
            sg, la = log_estimate(xs, ys, w, s.kind, A=a, phase=b, **target)
            sl = slice(None) if idx is None else idx
            sign[sl], logabs[sl] = xp.diagonal(sg), xp.diagonal(la)
        return sign, logabs

    if not s.est.kind.feature_map.two_roles:
        estimates, log_estimates = plain_estimates, plain_log_estimates
    for _ in range(first):  # skip the trials before `first` (the Generator is sequential)
        draw()
    for start in range(0, s.trials, s.chunk):
        n = min(s.chunk, s.trials - start)
        block = xp.empty((X.shape[0], n))
        for j in range(n):
            w, b = draw()
            est = None
            if linear:
                try:
                    est = estimates(w, b) * inv_scale
                except FloatingPointError:
                    est = None
            if est is None or not bool(xp.all(xp.isfinite(est))):
                # overflow in the linear domain: the same estimate through log_estimate
                sign, logabs = log_estimates(w, b)
                est = sign * xp.exp(logabs - xp.asarray(log_scale))
            block[:, j] = est
        for pair in range(X.shape[0]):
            yield pair, n, block[pair], None, xp


def _derf_literal(s, X, Y, xp):
    """``(estimates, log_estimates)`` of a DERF kind: the two maps' log features, per trial's W."""
    p, c = s.a[0], s.est.scale  # every pair shares the parameters
    log_features = s.est.kind.feature_map.log_features
    rows = []
    for Z in (X, Y):
        z = c * Z if c != 1.0 else Z
        rows.append((z, s.est.kernel.log_factor(0.5 * xp.sum(z * z, axis=1, keepdims=True))))

    def logs(w):
        (x, fx), (y, fy) = rows
        return (log_features(x, w, p, "query", xp, fx) + log_features(y, w, p, "key", xp, fy)
                - math.log(w.shape[0]))

    def estimates(w, b):
        return xp.sum(xp.exp(logs(w)), axis=1)

    def log_estimates(w, b):
        lg = logs(w)
        top = xp.max(lg, axis=1, keepdims=True)
        return xp.ones(lg.shape[0]), top[:, 0] + xp.log(xp.sum(xp.exp(lg - top), axis=1))

    return estimates, log_estimates


def run(s):
    """Every pair's result; ``proposal="auto"`` reruns tilted a pair whose plain run came out heavy.

    The pilot's k-hat is an estimate: a pair it left plain whose own run
    ends with ``k_hat >= TAIL_K_MAX`` and an untrusted tail is run again,
    tilted (the progress total grows by those trials).
    """
    started = time.perf_counter()
    plan = choose_proposals(s)
    todo = list(range(len(s.norm)))
    results = [None] * len(s.norm)
    progress = [0, s.trials * len(s.norm)]
    while todo:
        for pair, acc in zip(todo, _accumulate(s, plan, todo, progress)):
            results[pair] = _result(s, plan, pair, acc, time.perf_counter() - started)
        todo = [pair for pair in todo if _rerun_tilted(plan, pair, results[pair])]
        progress[1] += s.trials * len(todo)
    return tuple(results)


def _accumulate(s, plan, pairs, progress):
    """The finished :class:`Accumulator` of each of ``pairs``, in their order."""
    accs = {pair: Accumulator(s.trials, s.norm[pair].target, weighted=plan.tilts[pair] is not None)
            for pair in pairs}
    last = len(s.norm) - 1
    chunks = (reduced_chunks(s, plan.tilts, pairs=set(pairs)) if s.method == "reduced"
              else literal_chunks(s))
    for pair, n, e, w, xp in chunks:
        accs[pair].add(e, xp, w)
        progress[0] += n
        # the literal method yields every pair of a chunk in turn: report once per chunk
        if s.progress is not None and (s.method == "reduced" or pair == last):
            s.progress(progress[0], progress[1])
    for acc in accs.values():
        acc.finish()
    return [accs[pair] for pair in pairs]


def _rerun_tilted(plan, pair, result):
    """Switch ``pair`` to its fallback tilt if auto left it plain and its tail came out heavy."""
    tilt = plan.fallback[pair]
    k = result.tail.k_hat
    if tilt is None or result.tail_ok or not (k >= TAIL_K_MAX):
        return False
    plan.tilts[pair], plan.fallback[pair] = tilt, None
    plan.notes[pair] = (f"tilted: the plain run's k_hat = {k:.4g} >= {TAIL_K_MAX} "
                        f"(after {plan.notes[pair].removeprefix('plain: ')}); run again tilted")
    return True


#: Relative resolution of a normalised estimate (a few dozen roundings).
RESOLUTION = 64 * float(np.finfo(np.float64).eps)


def _scaled(value, log_factor, what):
    """``value * exp(log_factor)`` without intermediate overflow; raises if the result overflows."""
    if value == 0.0:
        return 0.0
    log_abs = math.log(abs(value)) + log_factor
    if log_abs > LOG_MAX:
        raise FloatingPointError(f"{what} is about e^{log_abs:.1f}, beyond float64")
    return math.copysign(math.exp(log_abs), value)


def _result(s, plan, pair, acc, elapsed):
    nm = s.norm[pair]
    n = acc.sq.n
    log_c = nm.log_scale + s.log_factor[pair]  # the target kernel's scale (its factor included)
    log_c2 = 2.0 * log_c
    mse = _scaled(acc.sq.mean, log_c2, "the MSE")
    stderr = _scaled(math.sqrt(max(acc.sq.variance, 0.0) / n), log_c2, "the MSE's standard error")
    bias = _scaled(acc.err.mean, log_c, "the bias")
    bias_se = _scaled(math.sqrt(max(acc.err.variance, 0.0) / n), log_c, "the bias's standard error")
    mean_est = _scaled(acc.err.mean + nm.target, log_c, "the mean estimate")
    exact = s.exact[pair]
    # Normalised estimates are O(1) and carry rounding of about eps each, so
    # squared errors below RESOLUTION**2 (or a spread of them below that
    # level) are rounding, not estimator error.
    constant = acc.sq.m2 <= (RESOLUTION * max(acc.sq.mean, RESOLUTION)) ** 2 * n
    below = acc.sq.mean < RESOLUTION**2 and exact != 0.0
    tilt = plan.tilts[pair]
    tail = tail_from_top(acc.top, n, acc.sq.mean * n, acc.maximum, constant,
                          reach(s.est.kind, nm.length, n, s.m, tilt, s.d, s.norms, s.a[pair])
                          if s.est.supports.scalar_law else None,
                          below_resolution=below)
    if tilt is None:
        ess, weight_mean = float(n), 1.0
    else:  # (sum w)^2 / sum w^2 from the weights' mean and spread
        weight_mean = acc.weight.mean
        second = acc.weight.m2 / n + weight_mean * weight_mean
        ess = float(n * weight_mean * weight_mean / second) if second > 0 else 0.0
    meaningful = exact is not None and stderr > 0 and not below and not constant
    z = (mse - exact) / stderr if meaningful else None
    return MonteCarloResult(
        kind=s.kind, ensemble=s.ensemble, norms=s.norms, method=s.method, backend=s.backend,
        d=s.d, m=s.m, trials=n, pair=pair,
        seed_entropy=recorded_entropy(s.seq.entropy), seed_spawn_key=tuple(int(k) for k in s.seq.spawn_key),
        generator="philox4x32-10" if s.method == "reduced" else "numpy-default_rng",
        sm=s.sm[pair], mse=mse, stderr=stderr,
        ci95=(max(0.0, mse - Z95 * stderr), mse + Z95 * stderr),
        mean_estimate=mean_est, bias=bias, bias_stderr=bias_se,
        bias_z=bias / bias_se if bias_se > 0 else None,
        mse_exact=exact, z=z, tail=tail, tail_ok=tail.ok,
        proposal="plain" if tilt is None else "tilted", proposal_note=plan.notes[pair],
        proposal_shift=None if tilt is None else tilt.shift,
        proposal_alpha0=None if tilt is None else tilt.alpha0,
        proposal_wscale=None if tilt is None else tilt.wscale,
        pilot_k_hat=plan.pilot_k[pair], ess=ess, weight_mean=weight_mean,
        elapsed_s=elapsed, kernel=s.est.kernel.name,
        gamma=getattr(s.est.kernel_params, "gamma", None),
        output_dimension=s.est.feature_dimension,
    )


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------
