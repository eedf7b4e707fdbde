"""The Monte Carlo MSE entry points and their one validation.

:func:`monte_carlo_mse`, :func:`monte_carlo_mse_batch`,
:func:`monte_carlo_mse_from_geometry` and :func:`trial_estimates` check
everything once, before any work, into a frozen setup that
:mod:`rfkernels.analysis.monte_carlo.trials` runs; the package's face,
:mod:`rfkernels.analysis.monte_carlo`, describes the methods, the streaming,
the scale and the proposals.
"""

from __future__ import annotations

import inspect
import math
import numbers
from dataclasses import dataclass

import numpy as np

from rfkernels import engine, theory
from rfkernels.backends import BACKENDS, check_backend, to_numpy
from rfkernels.projections import projection_bytes
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

from ..moments import MOMENT_BLOCK
from ..results import MonteCarloBatch, MonteCarloResult
from ..tail import (
    MIN_TAIL,
    REACH_MIN,
    TAIL_K_MAX,
    TailDiagnostic,
    pareto_k_hat,
    tail_size,
)
from .trials import LOG_MAX, PILOT_TRIALS, TILT_LOG_MAX, literal_chunks, reduced_chunks, run

#: Monte Carlo proposals (see the module notes).
PROPOSALS = engine.PROPOSALS

__all__ = [
    "METHODS",
    "PILOT_TRIALS",
    "PROPOSALS",
    "MIN_TAIL",
    "MOMENT_BLOCK",
    "REACH_MIN",
    "TAIL_K_MAX",
    "TILT_LOG_MAX",
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

#: Trials per chunk of the literal method (one projection draw per trial).
LITERAL_CHUNK = 1024

#: ``(ensemble, norms, kernel)`` left out: :func:`rfkernels.estimators.estimator`'s
#: defaults, which the entry points share; beside an Estimator, which carries its
#: own, they must be.
LEFT_OUT = tuple(inspect.signature(estimator).parameters[name].default
                 for name in ("ensemble", "norms", "kernel"))


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Setup:
    """A validated run: the estimator, the engine and everything known per pair before any trial.

    Built by :func:`_setup`, the one place a Monte Carlo run is checked, and
    not changed after; each pair's proposal is a :class:`rfkernels.analysis.monte_carlo.trials.Plan`.
    ``norm``, ``a`` and ``consts`` are those of the scaled pair
    (``sqrt(2 gamma) x`` for the Gaussian kernel), whose softmax estimate
    times ``exp(log_factor)`` is the target's; ``X``, ``Y`` (the pairs as
    given: the literal method's feature maps take the kernel), ``sm`` and
    ``exact`` are the target's.
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
    log_factor: tuple = ()  # the target kernel's log factor per pair (0.0 for softmax)

    kind = property(lambda self: self.est.kind.name)
    ensemble = property(lambda self: self.est.ensemble.name)
    norms = property(lambda self: self.est.norms.name)
    m = property(lambda self: self.est.m)
    d = property(lambda self: self.est.d)


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



def _d_hint(X, geometry):
    """The pairs' d where it is plain before validation (a (d, d) kind parameter is checked against it)."""
    if X is not None:
        return np.shape(X)[-1] if np.ndim(X) in (1, 2) and np.shape(X)[-1] >= 1 else None
    return None if geometry is None else int(geometry.d)


def _per_pair(est, geometry, exact, Xa, Ya, pairs, run_engine):
    """What :func:`_setup` knows per pair before any trial: normalisation, exact MSE, SM, the
    kind's value and constants, the target kernel's log factor (lists, one entry per pair)."""
    known = geometry is not None
    geom = geometry if known else theory.geometry(Xa, Ya)
    has_theory = bool(est.supports.exact_mse)
    norm, exacts, sm, values, consts, factors = [], [], [], [], [], []
    for k in range(pairs):
        g = geom if known else theory.Geometry(*(np.asarray(a)[k] for a in geom))
        gs, log_factor = theory.kernel_geometry(g, est)  # the scaled pair (softmax: g itself)
        factors.append(float(log_factor))
        value = est.kind.resolve(est.params, gs)
        values.append(value)
        log_sm = float(theory.kernel_log_value(g, est))  # the target's log (softmax: x.y)
        if log_sm > LOG_MAX:
            raise FloatingPointError(
                f"SM = exp(x.y) = e^{log_sm:.1f} overflows float64 at pair {k}; rescale x and y"
            )
        if est.kind.pair_transform is not None and est.supports.scalar_law:  # DERF: OPRF at (x', y')
            gs = theory.geometry(*est.kind.pair_transform(value, est.scale * Xa[k], est.scale * Ya[k]))
        nm = engine.normalisation_of(est.kind, float(gs.half_sq), float(gs.s), float(gs.t))
        norm.append(nm)
        consts.append(None if run_engine is None else run_engine.constants(value, nm.length))
        sm.append(math.exp(log_sm))
        if known and not (isinstance(exact, str) and exact == COMPUTE):
            exacts.append(exact)
        elif has_theory:
            vectors = None if Xa is None else (Xa[k], Ya[k])
            log_exact = float(theory.exact_mse(g, None, est.m, est.for_pair(value), vectors=vectors, log=True))
            if log_exact > LOG_MAX:
                raise FloatingPointError(
                    f"the MSE at pair {k} is about e^{log_exact:.1f}, beyond float64; rescale x and y"
                )
            exacts.append(math.exp(log_exact))
        else:
            exacts.append(None)
    return norm, exacts, sm, values, consts, factors


def _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
           names=("X", "Y"), keep_all=False, geometry=None, exact=None, A=None, proposal="plain",
           kernel="softmax", gamma=None, derf=(None, None, None)):
    """Every check, before any work; returns the validated :class:`_Setup`.

    ``geometry`` (one pair's :class:`rfkernels.theory.Geometry`) and its
    ``exact`` MSE (None: no closed form) may come from a caller that has
    computed them already (:func:`rfkernels.analysis.comparison.evaluate_point`);
    the reduced method then needs no vectors (``X = Y = None``). ``derf`` is
    ``(B_query, B_key, population)`` of the DERF kinds.
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
        if (ensemble, norms, kernel) != LEFT_OUT or any(
                v is not None for v in (A, gamma, derf[0], derf[1])):
            raise ValueError("kind is an Estimator: its ensemble, norms, A, B_query, B_key, kernel "
                             "and gamma are its own; leave them out")
        est = kind.with_size(m=m)
    else:
        est = estimator(kind, ensemble=ensemble, norms=norms, m=m, A=A, kernel=kernel, gamma=gamma,
                        B_query=derf[0], B_key=derf[1], d=_d_hint(X, geometry))
    population = derf[2]
    if geometry is not None and est.kind.theory_needs_vectors and X is None:
        raise ValueError(f"kind={est.kind.name!r} depends on x and y themselves, not only on their "
                         "geometry: pass the vectors")
    if method == "reduced":
        est.supports.reduced.require()
    elif proposal == "tilted":
        raise ValueError("proposal='tilted' needs method='reduced' (the literal sampler draws "
                         "whole projection matrices from NumPy's generator and has no proposal); "
                         "use proposal='plain' or 'auto'")
    if proposal == "tilted":
        est.supports.tilted.require()
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
    est = theory.fit_population(est.with_size(d=d), Xa, Ya, population)
    if method == "reduced":  # the fitted parameters decide (a non-isotropic A: literal only)
        est.supports.reduced.require()
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

    norm, exacts, sm, values, consts, factors = _per_pair(est, geometry, exact, Xa, Ya, pairs,
                                                          run_engine)
    return _Setup(Xa, Ya, est, trials, seq, backend, method, chunk, progress, run_engine, norm, exacts,
                  sm, values, consts, proposal, tuple(factors))


# ---------------------------------------------------------------------------
# Samplers: each yields (pair, first trial, normalised estimates) chunk by chunk
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
                    proposal="auto", kernel="softmax", gamma=None, B_query=None, B_key=None,
                    population=None):
    r"""Monte Carlo MSE of an estimator of :math:`SM(x, y) = e^{x \cdot y}`, beside theory.

    Parameters
    ----------
    x, y : array_like of shape (d,)
        The pair.
    m : int
        Number of projections (features: m positive, 2m trig/hyperbolic).
    kind : str or rfkernels.estimators.Estimator
        A registered kind (``rfkernels.estimators.names("kind")``), or an
        :class:`~rfkernels.estimators.Estimator` already validated (its
        ensemble, norms and A are then its own: leave those keywords out).
    ensemble : str, default 'iid'
        A registered projection ensemble (``rfkernels.estimators.names("ensemble")``);
        one without a reduced sampler needs ``method='literal'``
        (:attr:`rfkernels.estimators.Estimator.supports.reduced` says why), one
        without a closed form has no theory (``mse_exact`` None).
    norms : str, default 'chi'
        A registered norm law of the rows (``rfkernels.estimators.names("norms")``;
        chi(d) norms are unbiased, fixed sqrt(d) ones the regularised variant).
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
    B_query, B_key : array_like of shape (d, d), optional
        ``kind='derf'`` (with ``A`` a float or a symmetric (d, d) array):
        :func:`rfkernels.theory.exact_mse`'s. An isotropic ``A = aI`` runs
        OPRF's reduced sampler at :math:`(B_1x, B_2y)/\sqrt{1 - 4a}`; a
        dense A needs ``method='literal'``.
    population : tuple of array_like, optional
        ``(queries, keys)`` where a data-fitted kind
        (:attr:`rfkernels.estimators.Kind.population`) is fitted; required
        for one pair (a fit on a single pair is degenerate and refused).
    proposal : {'auto', 'plain', 'tilted'}, default 'auto'
        Law the trials are drawn from (see the module notes): the plain law,
        the tilted importance-sampling proposal with exact weights (reduced
        method; not for trig features), or chosen per pair by a pilot run.
        The result records the choice, its parameters and why
        (``proposal``, ``proposal_note``, ``proposal_shift``, ...), and the
        weights' effective sample size (``ess``).
    kernel : {'softmax', 'gaussian'}, default 'softmax'
        The target: ``exp(x·y)`` or ``exp(-gamma |x - y|^2)``, estimated by
        the softmax estimators at ``sqrt(2 gamma) (x, y)`` times
        ``exp(-gamma (|x|^2 + |y|^2))`` (:func:`rfkernels.theory.exact_mse`);
        ``sm``, ``mse`` and ``bias`` are then the Gaussian kernel's, and
        ``A`` (and its default ``A*``) is that of the scaled pair.
    gamma : float, optional
        The Gaussian kernel's parameter (> 0; ``kernel='gaussian'`` only).

    Returns
    -------
    MonteCarloResult

    Raises
    ------
    ValueError
        Unknown kind, ensemble, norms, backend or method (the message lists the
        valid ones); trials < 2; badly shaped, non-finite or non-real
        (complex: "Complex data not supported") x, y; the reduced method with
        an ensemble that has no reduced sampler.
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
               names=("x", "y"), A=A, proposal=proposal, kernel=kernel, gamma=gamma,
               derf=(B_query, B_key, population))
    return run(s)[0]


#: ``mse_exact`` default of :func:`monte_carlo_mse_from_geometry`: compute it.
COMPUTE = "compute"


def monte_carlo_mse_from_geometry(geometry, m, kind, *, ensemble="iid", norms="chi", trials,
                                  seed=0, backend="numpy", method="reduced", chunk=None,
                                  progress=None, vectors=None, mse_exact=COMPUTE, A=None,
                                  proposal="auto", kernel="softmax", gamma=None):
    """:func:`monte_carlo_mse` of the pair whose :class:`rfkernels.theory.Geometry` is ``geometry``.

    The estimators depend on (x, y) only through the geometry's invariants,
    so the reduced method needs nothing else; the literal method also needs
    the vectors, ``vectors=(x, y)``. A caller that already holds the exact
    MSE passes it as ``mse_exact`` (a float, or None where there is no closed
    form), so that it is computed once; by default it is computed here.
    ``geometry`` and ``vectors`` are those of the pair as given (the target
    kernel rescales them itself).
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
               proposal=proposal, kernel=kernel, gamma=gamma)
    return run(s)[0]


def monte_carlo_mse_batch(X, Y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                          backend="numpy", method="reduced", chunk=None, progress=None, A=None,
                          proposal="auto", kernel="softmax", gamma=None, B_query=None, B_key=None,
                          population=None):
    """:func:`monte_carlo_mse` for the pairs ``(X[k], Y[k])``, k = 0 .. n - 1.

    Parameters
    ----------
    X, Y : array_like of shape (n, d)
        The pairs, row by row.
    m, kind, ensemble, norms, trials, seed, backend, method, chunk, A, proposal, kernel, gamma
        As in :func:`monte_carlo_mse` (the same for every pair; ``A=None``
        gives each pair its own ``A*``, ``proposal='auto'`` decides per pair).
    B_query, B_key, population
        As in :func:`monte_carlo_mse`; the data-fitted DERF kinds are fitted
        on ``population`` (default: the rows of X and Y, all pairs sharing
        the fit).
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
               proposal=proposal, kernel=kernel, gamma=gamma, derf=(B_query, B_key, population))
    return MonteCarloBatch(run(s))


def trial_estimates(x, y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                    backend="numpy", method="reduced", start=0, A=None, kernel="softmax",
                    gamma=None, B_query=None, B_key=None, population=None):
    """The per-trial estimates of SM that :func:`monte_carlo_mse` averages over (plain proposal).

    Parameters
    ----------
    x, y, m, kind, ensemble, norms, seed, backend, method, A, kernel, gamma, B_query, B_key, population
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
               names=("x", "y"), keep_all=True, A=A, kernel=kernel, gamma=gamma,
               derf=(B_query, B_key, population))
    if start + s.trials > engine.MAX_TRIALS:
        raise ValueError(f"start + trials must be at most 2**{engine.PAIR_SHIFT}")
    chunks = reduced_chunks(s, first=start) if s.method == "reduced" else literal_chunks(s, start)
    parts = [to_numpy(e).copy() for _, _, e, _, _ in chunks]
    e = np.concatenate(parts)
    if not np.all(np.isfinite(e)):
        raise FloatingPointError("an estimate overflowed even after normalisation")
    log_c = s.norm[0].log_scale + s.log_factor[0]
    if abs(log_c) >= 700.0:
        raise FloatingPointError(f"estimates are of order e^{log_c:.1f}, beyond the linear domain")
    return e * math.exp(log_c)
