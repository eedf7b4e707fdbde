r"""Monte Carlo MSE of the random-feature estimators, with honest error bars.

:func:`monte_carlo_mse` runs ``trials`` independent estimates of
:math:`SM(x, y) = e^{x \cdot y}` and reports their mean squared error with
its standard error, a 95% interval, the bias, the exact MSE of
:func:`rfkernels.theory.exact_mse` and the z-score between the two, and a
diagnostic of the tail of the squared errors that says when the standard
error can be trusted. :func:`monte_carlo_mse_batch` does the same for many
pairs at once.

Methods
-------
``"reduced"`` (default, fast)
    Draws, per trial, only the m scalar projections the estimate depends
    on, exactly in distribution (:mod:`rfkernels.engine`; counter-based
    Philox numbers keyed by the seed). The ``numba`` backend runs the same
    computation in parallel kernels (:mod:`rfkernels.engine.cpu`),
    ``cupy`` runs the NumPy code on the GPU; the estimates are the same on
    every backend and every thread count (bit for bit, except the rounding
    of ``cos`` for trig features).
``"literal"``
    Draws the full (m, d) projection matrix per trial with
    :func:`rfkernels.draw_projections` (a NumPy ``Generator`` seeded with
    the seed) and evaluates :func:`rfkernels.feature_map`: the code users
    run. It is the only method for ``ensemble="orthogonal-unfixed-qr"``
    and, until its reduced sampler exists, for the ``"sorf"`` ensemble
    (``docs/beyond.rst``).

Streaming
---------
Trials are processed in chunks: each chunk's estimates are written to one
array, cut into blocks of :data:`MOMENT_BLOCK` consecutive trials, each block
reduced to its count, mean and sum of squared deviations (of the errors and
of the squared errors) and merged, block after block in trial order, into
the running totals with Chan et al.'s pairwise update. The largest squared
errors are kept in a buffer of fixed size for the tail fit. Memory does not
grow with ``trials``; because the blocks and their order do not depend on
how trials are chunked, the NumPy and Numba backends report bit-identical
results at any chunk size and thread count (tested for positive and
hyperbolic features; trig estimates round ``cos`` with each library's own).

Scale
-----
Estimates are accumulated divided by a scale ``C`` (``SM`` for positive and
hyperbolic features, ``exp((|x|² + |y|²)/2)`` for trig features,
:func:`rfkernels.engine.normalisation`), so that they stay O(1) where SM
itself is huge or tiny; the reported values are multiplied back in log
space and a result beyond float64 raises :class:`FloatingPointError`.

Proposals
---------
``proposal="plain"`` draws every trial from the estimator's own law.
``"tilted"`` draws them from a defensive mixture that moves one projection
toward where the squared error comes from and weights each trial by the
exact likelihood ratio (:class:`rfkernels.engine.Tilt`), so that the
weighted mean squared error and mean stay unbiased while the heavy tail of
positive, hyperbolic and oprf estimates is sampled (docs/importance.rst).
``"auto"`` (default) tilts a pair when the plain run would not reach the
region its MSE comes from (``tail.reach`` below :data:`REACH_MIN`) or when a
pilot of :data:`PILOT_TRIALS` plain trials, on counters the run does not
use, has a Pareto k-hat of at least :data:`TAIL_K_MAX`, and runs a pair
again tilted if its plain run still ends with such a k-hat and an untrusted
tail; trig features, which are bounded, and the literal method are always
plain.

Tail diagnostic
---------------
Beside every error bar: a generalized Pareto fit to the largest squared
errors and the reach of the sample into the region the MSE comes from
(:mod:`rfkernels.analysis.tail`). ``tail_ok`` says whether ``stderr``,
``ci95`` and ``z`` can be trusted.

"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass

import numpy as np

from rfkernels import engine, theory
from rfkernels.backends import BACKENDS, array_namespace, check_backend, to_numpy
from rfkernels.features import feature_map, log_estimate
from rfkernels.projections import draw_projections, projection_bytes
from rfkernels.rng import key_from_seed
from rfkernels.estimators import Estimator, estimator
from rfkernels.validation import (
    check_choice,
    check_int,
    check_matrix,
    check_memory,
    check_same_d,
    check_vectors,
    seed_sequence,
)

from .moments import MOMENT_BLOCK, Accumulator
from .results import MonteCarloBatch, MonteCarloResult
from .tail import (
    MIN_TAIL,
    REACH_MIN,
    TAIL_K_MAX,
    TailDiagnostic,
    pareto_k_hat,
    reach,
    tail_from_top,
    tail_size,
)

#: Monte Carlo proposals (see the module notes).
PROPOSALS = engine.PROPOSALS
#: Plain trials of the pilot run with which ``proposal="auto"`` decides.
PILOT_TRIALS = 1 << 14
#: ``proposal="auto"`` stays plain above this |x + y|^2: a moved term's squared error,
#: about e^{3|x + y|^2} relative to SM^2 before its weight e^{-2|x + y|^2} scales it
#: down, would not fit in float64 (it overflows near |x + y|^2 = 236).
TILT_LOG_MAX = 200.0

__all__ = [
    "METHODS",
    "PILOT_TRIALS",
    "PROPOSALS",
    "MIN_TAIL",
    "MOMENT_BLOCK",
    "REACH_MIN",
    "TAIL_K_MAX",
    "MonteCarloBatch",
    "MonteCarloResult",
    "TailDiagnostic",
    "monte_carlo_mse",
    "monte_carlo_mse_batch",
    "monte_carlo_mse_from_geometry",
    "pareto_k_hat",
    "peak_bytes",
    "tail_size",
    "trial_estimates",
]

#: Monte Carlo methods.
METHODS = ("reduced", "literal")
#: Normal quantile of a two-sided 95% interval.
Z95 = 1.959963984540054

_LOG_MAX = math.log(np.finfo(np.float64).max)
#: Trials per chunk of the literal method (one projection draw per trial).
LITERAL_CHUNK = 1024


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    """A validated run: the estimator, the engine and everything known per pair before any trial.

    Built by :func:`_setup`, the one place a Monte Carlo run is checked, and
    not changed after; each pair's proposal is a :class:`_Plan`.
    """

    X: np.ndarray
    Y: np.ndarray
    est: Estimator  # kind, ensemble, norms, m, d (validated)
    trials: int
    seq: np.random.SeedSequence
    backend: str
    method: str
    chunk: int
    progress: object
    engine: object  # engine.Engine (method 'reduced') or None
    norm: list  # Normalisation per pair
    exact: list  # exact MSE per pair or None
    sm: list
    a: list  # the kind's parameter per pair (OPRF: A; None for the other kinds)
    consts: list  # the kind's constants per pair (the engine's floats)
    proposal: str = "plain"  # as requested: plain, tilted or auto

    kind = property(lambda self: self.est.kind.name)
    ensemble = property(lambda self: self.est.ensemble.name)
    norms = property(lambda self: self.est.norms.name)
    m = property(lambda self: self.est.m)
    d = property(lambda self: self.est.d)


@dataclass
class _Plan:
    """Each pair's proposal (:func:`_choose_proposals`), revised where a plain run is rerun tilted."""

    tilts: list  # per pair: the Tilt drawn from, or None (plain)
    notes: list  # per pair: why that proposal
    pilot_k: list  # per pair: the pilot's k-hat, or None (no pilot)
    fallback: list  # per pair: the Tilt to rerun with if auto's plain run comes out heavy

    @classmethod
    def plain(cls, pairs, note=""):
        return cls([None] * pairs, [note] * pairs, [None] * pairs, [None] * pairs)


def _recorded_entropy(entropy):
    """A SeedSequence's entropy as results record it: an int, or a tuple of ints."""
    if isinstance(entropy, (numbers.Integral, np.integer)):
        return int(entropy)
    return tuple(int(v) for v in entropy)


def peak_bytes(m, d, pairs, chunk, *, method="reduced", backend="numpy", ensemble="iid"):
    """Estimated peak bytes a Monte Carlo run allocates (the checks' upper estimate).

    - reduced: the engine's own estimate (:func:`rfkernels.engine.engine_bytes`);
    - literal: one projection matrix (:func:`rfkernels.projections.projection_bytes`),
      the features of all pairs (about 16 ``pairs × m`` doubles), the
      pairs × pairs log-domain fallback and the ``pairs × chunk`` block;

    each plus the accumulator's few arrays of ``chunk`` doubles. Memory does
    not grow with the number of trials.
    """
    accumulate = 8 * 8 * chunk
    if method == "reduced":
        return engine.engine_bytes(m, chunk, backend, ensemble, d) + accumulate
    return (projection_bytes(m, d, ensemble)
            + 8 * (16 * pairs * m + 2 * pairs * pairs + pairs * chunk) + accumulate)



def _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
           names=("X", "Y"), keep_all=False, geometry=None, exact=None, A=None, proposal="plain"):
    """Every check, before any work; returns the validated :class:`_Setup`.

    ``geometry`` (one pair's :class:`rfkernels.theory.Geometry`) and its
    ``exact`` MSE (None: no closed form) may come from a caller that has
    computed them already (:func:`rfkernels.analysis.comparison.evaluate_point`);
    the reduced method then needs no vectors (``X = Y = None``).
    """
    check_choice(method, "method", METHODS)
    check_choice(backend, "backend", BACKENDS)
    check_choice(proposal, "proposal", PROPOSALS)
    trials = check_int(trials, "trials", minimum=2)
    if trials > engine.MAX_TRIALS:
        raise ValueError(f"trials must be at most 2**{engine.PAIR_SHIFT}; got {trials}")
    if chunk is not None:
        chunk = check_int(chunk, "chunk")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable (done_trials, total_trials) or None; got {progress!r}")
    seq = seed_sequence(seed)
    if isinstance(kind, Estimator):  # validated by the caller (rfkernels mse builds it once)
        if (ensemble, norms, A) != ("iid", "chi", None):
            raise ValueError("kind is an Estimator: its ensemble, norms and A are its own; "
                             "leave ensemble, norms and A out")
        est = kind.with_size(m=m)
    else:
        est = estimator(kind, ensemble=ensemble, norms=norms, m=m, A=A)
    if method == "reduced":
        est.reduced.require()
    elif proposal == "tilted":
        raise ValueError("proposal='tilted' needs method='reduced' (the literal sampler draws "
                         "whole projection matrices from NumPy's generator and has no proposal); "
                         "use proposal='plain' or 'auto'")
    if proposal == "tilted":
        est.tilted.require()
    if geometry is None or X is not None or method == "literal":
        Xa = check_matrix(X, names[0])
        Ya = check_matrix(Y, names[1])
        d = check_same_d([Xa.shape, Ya.shape], list(names))
        if Xa.shape[0] != Ya.shape[0]:
            raise ValueError(f"{names[0]} and {names[1]} must hold the same number of rows (pairs); "
                             f"got {Xa.shape[0]} and {Ya.shape[0]}")
        pairs = Xa.shape[0]
    else:
        Xa = Ya = None
        d, pairs = int(geometry.d), 1
    est = est.with_size(d=d)
    if pairs > engine.MAX_PAIRS:
        raise ValueError(f"at most 2**{64 - engine.PAIR_SHIFT} pairs per batch; got {Xa.shape[0]}")
    run_engine = None
    if method == "reduced":  # cupy without CuPy, a device or the CUDA simulator: ImportError
        run_engine = engine.Engine(est, backend, chunk)
        chunk = run_engine.chunk
    else:
        check_backend(backend)  # cupy without CuPy or a device: ImportError naming the gpu extra
        if chunk is None:
            chunk = LITERAL_CHUNK
    n = min(chunk, trials)
    if backend != "cupy":  # CuPy's arrays live on the device, whose allocator raises MemoryError
        check_memory(
            peak_bytes(est.m, d, pairs, n, method=method, backend=backend, ensemble=est.ensemble.name)
            + 16 * trials * int(keep_all),
            f"a Monte Carlo run with m={est.m} projections, d={d}, {pairs} pair(s) and "
            f"{n} trial(s) per chunk (method={method!r}, backend={backend!r})"
            + (f", keeping all {trials} estimates" if keep_all else ""),
        )

    known = geometry is not None
    geom = geometry if known else theory.geometry(Xa, Ya)
    has_theory = bool(est.exact_mse)
    norm, exacts, sm, values, consts = [], [], [], [], []
    for k in range(pairs):
        g = geom if known else theory.Geometry(*(np.asarray(a)[k] for a in geom))
        value = est.kind.resolve(est.params, g)
        values.append(value)
        log_sm = float(g.log_sm)
        if log_sm > _LOG_MAX:
            raise FloatingPointError(
                f"SM = exp(x.y) = e^{log_sm:.1f} overflows float64 at pair {k}; rescale x and y"
            )
        nm = engine.normalisation_of(est.kind, float(g.half_sq), float(g.s), float(g.t))
        norm.append(nm)
        consts.append(None if run_engine is None else run_engine.constants(value, nm.length))
        sm.append(math.exp(log_sm))
        if known and not (isinstance(exact, str) and exact == COMPUTE):
            exacts.append(exact)
        elif has_theory:
            log_exact = float(theory.exact_log_mse(g, est.m, est.for_pair(value)))
            if log_exact > _LOG_MAX:
                raise FloatingPointError(
                    f"the MSE at pair {k} is about e^{log_exact:.1f}, beyond float64; rescale x and y"
                )
            exacts.append(math.exp(log_exact))
        else:
            exacts.append(None)
    return _Setup(Xa, Ya, est, trials, seq, backend, method, chunk, progress, run_engine, norm, exacts,
                  sm, values, consts, proposal)


# ---------------------------------------------------------------------------
# Samplers: each yields (pair, first trial, normalised estimates) chunk by chunk
# ---------------------------------------------------------------------------


def _reduced_chunks(s, tilts=None, first=0, pairs=None):
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


def _choose_proposals(s):
    """Each pair's proposal (a :class:`_Plan`) as ``s.proposal`` asks."""
    pairs = len(s.norm)
    if s.proposal == "plain":
        return _Plan.plain(pairs, "plain: as requested")
    if s.est.kind.tilt_reason is not None or s.method != "reduced":
        why = ("trig estimates are bounded: nothing to tilt" if s.est.kind.tilt_reason is not None
               else "the literal method has no proposal")
        return _Plan.plain(pairs, f"plain: {why}")
    plan = _Plan.plain(pairs)
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


def _literal_chunks(s, first=0):
    """Normalised estimates of all pairs per trial (pairs share each trial's W)."""
    xp = array_namespace(s.backend)
    gen = np.random.default_rng(s.seq)
    X, Y = xp.asarray(s.X), xp.asarray(s.Y)
    log_scale = np.array([nm.log_scale for nm in s.norm])
    linear = bool(np.all(np.abs(log_scale) < 700.0))
    inv_scale = xp.asarray(np.exp(-log_scale)) if linear else None
    draw_backend = "cupy" if s.backend == "cupy" else "numpy"

    def draw():
        return draw_projections(s.m, s.d, ensemble=s.ensemble, norms=s.norms, seed=gen,
                                backend=draw_backend)

    # pairs sharing one OPRF parameter go through one feature_map call
    groups = [(None, None)]
    if s.kind == "oprf":
        groups = [(a, xp.asarray(np.flatnonzero(np.array(s.a) == a))) for a in dict.fromkeys(s.a)]

    def estimates(w):
        if len(groups) == 1:
            a = groups[0][0]
            return xp.sum(feature_map(X, w, s.kind, A=a) * feature_map(Y, w, s.kind, A=a), axis=1)
        est = xp.empty(X.shape[0])
        for a, idx in groups:
            est[idx] = xp.sum(feature_map(X[idx], w, s.kind, A=a)
                              * feature_map(Y[idx], w, s.kind, A=a), axis=1)
        return est

    def log_estimates(w):
        sign, logabs = xp.empty(X.shape[0]), xp.empty(X.shape[0])
        for a, idx in groups:
            xs, ys = (X, Y) if idx is None else (X[idx], Y[idx])
            sg, la = log_estimate(xs, ys, w, s.kind, A=a)
            sl = slice(None) if idx is None else idx
            sign[sl], logabs[sl] = xp.diagonal(sg), xp.diagonal(la)
        return sign, logabs

    for _ in range(first):  # skip the trials before `first` (the Generator is sequential)
        draw()
    for start in range(0, s.trials, s.chunk):
        n = min(s.chunk, s.trials - start)
        block = xp.empty((X.shape[0], n))
        for j in range(n):
            w = draw()
            est = None
            if linear:
                try:
                    est = estimates(w) * inv_scale
                except FloatingPointError:
                    est = None
            if est is None or not bool(xp.all(xp.isfinite(est))):
                # overflow in the linear domain: the same estimate through log_estimate
                sign, logabs = log_estimates(w)
                est = sign * xp.exp(logabs - xp.asarray(log_scale))
            block[:, j] = est
        for pair in range(X.shape[0]):
            yield pair, n, block[pair], None, xp


def _run(s):
    """Every pair's result; ``proposal="auto"`` reruns tilted a pair whose plain run came out heavy.

    The pilot's k-hat is an estimate: a pair it left plain whose own run
    ends with ``k_hat >= TAIL_K_MAX`` and an untrusted tail is run again,
    tilted (the progress total grows by those trials).
    """
    started = time.perf_counter()
    plan = _choose_proposals(s)
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
    chunks = (_reduced_chunks(s, plan.tilts, pairs=set(pairs)) if s.method == "reduced"
              else _literal_chunks(s))
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
    if log_abs > _LOG_MAX:
        raise FloatingPointError(f"{what} is about e^{log_abs:.1f}, beyond float64")
    return math.copysign(math.exp(log_abs), value)


def _result(s, plan, pair, acc, elapsed):
    nm = s.norm[pair]
    n = acc.sq.n
    log_c, log_c2 = nm.log_scale, 2.0 * nm.log_scale
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
                          reach(s.est.kind, nm.length, n, s.m, tilt, s.d, s.norms, s.a[pair]),
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
        seed_entropy=_recorded_entropy(s.seq.entropy), seed_spawn_key=tuple(int(k) for k in s.seq.spawn_key),
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
        elapsed_s=elapsed,
    )


# ---------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------


def _one_pair(x, y):
    xa = check_vectors(x, "x")
    ya = check_vectors(y, "y")
    for a, name in ((xa, "x"), (ya, "y")):
        if a.ndim != 1:
            raise ValueError(f"{name} must be a 1-D vector of shape (d,); got shape {a.shape} "
                             "(use monte_carlo_mse_batch for many pairs)")
    check_same_d([xa.shape, ya.shape], ["x", "y"])
    return xa[None, :], ya[None, :]


def monte_carlo_mse(x, y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                    backend="numpy", method="reduced", chunk=None, progress=None, A=None,
                    proposal="auto"):
    r"""Monte Carlo MSE of an estimator of :math:`SM(x, y) = e^{x \cdot y}`, beside theory.

    Parameters
    ----------
    x, y : array_like of shape (d,)
        The pair.
    m : int
        Number of projections (features: m positive, 2m trig/hyperbolic).
    kind : str or rfkernels.estimators.Estimator
        A registered kind ('trig', 'positive', 'hyperbolic', 'oprf', ...), or
        an :class:`~rfkernels.estimators.Estimator` already validated (its
        ensemble, norms and A are then its own: leave those keywords out).
    ensemble : {'iid', 'orthogonal', 'orthogonal-unfixed-qr', 'simplex', 'sorf'}, default 'iid'
        Projection ensemble; ``'orthogonal-unfixed-qr'`` and
        ``'sorf'`` need ``method='literal'``; ``'orthogonal-unfixed-qr'``
        and ``'sorf'`` have no theory (``mse_exact`` None).
    norms : {'chi', 'fixed'}, default 'chi'
        Row norms (chi(d): unbiased; sqrt(d): the regularised variant).
    trials : int
        Number of independent estimates, >= 2 (integral floats such as
        ``1e6`` are accepted).
    seed : None, int >= 0, numpy.random.SeedSequence or numpy.random.Generator, default 0
        Root of all randomness (:func:`rfkernels.validation.seed_sequence`;
        a Generator is consumed once to seed a new SeedSequence); recorded
        in the result (entropy and spawn key). The same seed gives the same
        estimates on every backend.
    backend : {'numpy', 'numba', 'cupy'}, default 'numpy'
        Where the reduced method runs; the literal method evaluates the core's
        feature maps on NumPy (``numpy``, ``numba``) or CuPy arrays.
    method : {'reduced', 'literal'}, default 'reduced'
        See the module notes.
    chunk : int, optional
        Trials per chunk (memory and progress granularity). The default
        keeps chunk arrays near 1 MiB on NumPy. Results do not depend on it
        (moments are merged in fixed blocks of trials).
    progress : callable, optional
        ``progress(done_trials, total_trials)``, called after each chunk.
    A : float, optional
        The OPRF parameter (< 1/8; ``kind='oprf'`` only), used by the
        feature maps and the exact MSE; default: the pair's optimal ``A*``
        (:func:`rfkernels.theory.oprf_optimal_a`).
    proposal : {'auto', 'plain', 'tilted'}, default 'auto'
        Law the trials are drawn from (see the module notes): the plain law,
        the tilted importance-sampling proposal with exact weights (reduced
        method; not for trig features), or chosen per pair by a pilot run.
        The result records the choice, its parameters and why
        (``proposal``, ``proposal_note``, ``proposal_shift``, ...), and the
        weights' effective sample size (``ess``).

    Returns
    -------
    MonteCarloResult

    Raises
    ------
    ValueError
        Unknown kind, ensemble, norms, backend or method (the message lists the
        valid ones); trials < 2; badly shaped, non-finite or non-real
        (complex: "Complex data not supported") x, y; the reduced method with
        ``'orthogonal-unfixed-qr'`` or ``'sorf'``.
    TypeError
        Non-integer trials, m or chunk; bad seed; progress not callable.
    ImportError
        ``backend='cupy'`` without CuPy or a CUDA device (names the ``gpu`` extra).
    MemoryError
        Before any work, if the estimated peak allocation (:func:`peak_bytes`:
        per chunk, e.g. 20 arrays of m × chunk doubles for the reduced NumPy
        sampler) exceeds 80% of the machine's memory; the message names m, d
        and the chunk. NumPy and Numba only (CuPy's allocator raises its own).
    FloatingPointError
        If SM, the MSE or an estimate is beyond float64.

    Notes
    -----
    With S trials, errors :math:`\epsilon_k = \widehat{SM}_k - SM`:

    .. math::

        \widehat{\mathrm{MSE}} = \frac1S \sum_k w_k \epsilon_k^2, \qquad
        \mathrm{se} = \sqrt{\frac{\widehat{\mathrm{Var}}(w \epsilon^2)}{S}}, \qquad
        z = \frac{\widehat{\mathrm{MSE}} - \mathrm{MSE}_{exact}}{\mathrm{se}},

    with weights :math:`w_k = 1` for the plain proposal and the likelihood
    ratios of :class:`rfkernels.engine.Tilt` for the tilted one (the bias
    likewise from :math:`w_k \epsilon_k`). ``se``, the interval and ``z``
    assume a finite variance of the (weighted) squared errors, which the tail
    diagnostic checks (``tail_ok``).

    Examples
    --------
    >>> from rfkernels.theory import pair
    >>> x, y = pair(8, 0.5, 0.5, 1.5)
    >>> r = monte_carlo_mse(x, y, 8, "positive", ensemble="orthogonal", trials=20000, seed=1)
    >>> bool(abs(r.z) < 4 and r.tail_ok)
    True
    """
    X, Y = _one_pair(x, y)
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
               names=("x", "y"), A=A, proposal=proposal)
    return _run(s)[0]


#: ``mse_exact`` default of :func:`monte_carlo_mse_from_geometry`: compute it.
COMPUTE = "compute"


def monte_carlo_mse_from_geometry(geometry, m, kind, *, ensemble="iid", norms="chi", trials,
                                  seed=0, backend="numpy", method="reduced", chunk=None,
                                  progress=None, vectors=None, mse_exact=COMPUTE, A=None,
                                  proposal="auto"):
    """:func:`monte_carlo_mse` of the pair whose :class:`rfkernels.theory.Geometry` is ``geometry``.

    The estimators depend on (x, y) only through the geometry's invariants,
    so the reduced method needs nothing else; the literal method also needs
    the vectors, ``vectors=(x, y)``. A caller that already holds the exact
    MSE passes it as ``mse_exact`` (a float, or None where there is no closed
    form), so that it is computed once; by default it is computed here.
    Results equal :func:`monte_carlo_mse`'s for the same seed.
    """
    if not isinstance(geometry, theory.Geometry) or np.ndim(geometry.s) != 0:
        raise TypeError("geometry must be the rfkernels.theory.Geometry of one pair "
                        f"(theory.geometry(x, y)); got {type(geometry).__name__}")
    X = Y = None
    if vectors is not None:
        X, Y = _one_pair(*vectors)
        given = theory.geometry(X[0], Y[0])
        if int(given.d) != int(geometry.d) or not np.allclose(
                [given.s, given.t, given.half_sq], [geometry.s, geometry.t, geometry.half_sq],
                rtol=1e-12, atol=0.0):
            raise ValueError("vectors=(x, y) do not have the given geometry (d, |x+y|^2, |x-y|^2, "
                             "|x|^2 + |y|^2 differ): pass theory.geometry(x, y) with its vectors")
    elif method == "literal":
        raise ValueError("method='literal' draws whole projections and needs the vectors: "
                         "pass vectors=(x, y)")
    known = not (isinstance(mse_exact, str) and mse_exact == COMPUTE)
    if known and mse_exact is not None:
        if isinstance(mse_exact, (str, bool)) or not isinstance(mse_exact, (numbers.Real, np.floating)):
            raise TypeError(f"mse_exact must be a number, None (no closed form) or left out; "
                            f"got {mse_exact!r}")
        mse_exact = float(mse_exact)
        if not (math.isfinite(mse_exact) and mse_exact >= 0.0):
            raise ValueError(f"mse_exact must be finite and >= 0; got {mse_exact!r}")
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
               names=("x", "y"), geometry=geometry, exact=mse_exact if known else COMPUTE, A=A,
               proposal=proposal)
    return _run(s)[0]


def monte_carlo_mse_batch(X, Y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                          backend="numpy", method="reduced", chunk=None, progress=None, A=None,
                          proposal="auto"):
    """:func:`monte_carlo_mse` for the pairs ``(X[k], Y[k])``, k = 0 .. n - 1.

    Parameters
    ----------
    X, Y : array_like of shape (n, d)
        The pairs, row by row.
    m, kind, ensemble, norms, trials, seed, backend, method, chunk, A, proposal
        As in :func:`monte_carlo_mse` (the same for every pair; ``A=None``
        gives each pair its own ``A*``, ``proposal='auto'`` decides per pair).
    progress : callable, optional
        ``progress(done, total)`` with ``total = n * trials``.

    Returns
    -------
    MonteCarloBatch
        One :class:`MonteCarloResult` per pair.

    Notes
    -----
    Pair 0's result equals ``monte_carlo_mse(X[0], Y[0], ...)`` with the same
    seed. With the reduced method, pair k uses the Philox trial counters
    ``(k << 40) | t``, so the pairs are independent. With the literal method
    the pairs share each trial's projection matrix (one draw and one QR per
    trial for all pairs, as in attention), so their errors are correlated
    across pairs; each pair's own statistics are unaffected.
    """
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress, A=A,
               proposal=proposal)
    return MonteCarloBatch(_run(s))


def trial_estimates(x, y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                    backend="numpy", method="reduced", start=0, A=None):
    """The per-trial estimates of SM that :func:`monte_carlo_mse` averages over (plain proposal).

    Parameters
    ----------
    x, y, m, kind, ensemble, norms, seed, backend, method, A
        As in :func:`monte_carlo_mse`.
    trials : int
        How many estimates, >= 2.
    start : int, default 0
        Index of the first trial: trials ``start .. start + trials - 1`` of
        the run :func:`monte_carlo_mse` would make with the same seed (the
        literal method draws and discards the earlier trials).

    Returns
    -------
    ndarray of shape (trials,)
        The estimates, as a NumPy array whatever the backend.
    """
    X, Y = _one_pair(x, y)
    start = check_int(start, "start", minimum=0)
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, None, None,
               names=("x", "y"), keep_all=True, A=A)
    if start + s.trials > engine.MAX_TRIALS:
        raise ValueError(f"start + trials must be at most 2**{engine.PAIR_SHIFT}")
    chunks = _reduced_chunks(s, first=start) if s.method == "reduced" else _literal_chunks(s, start)
    parts = [to_numpy(e).copy() for _, _, e, _, _ in chunks]
    e = np.concatenate(parts)
    if not np.all(np.isfinite(e)):
        raise FloatingPointError("an estimate overflowed even after normalisation")
    log_c = s.norm[0].log_scale
    if abs(log_c) >= 700.0:
        raise FloatingPointError(f"estimates are of order e^{log_c:.1f}, beyond the linear domain")
    return e * math.exp(log_c)
