"""The Monte Carlo MSE entry points and their one validation.

:func:`monte_carlo_mse` (one pair, a batch of pairs or one pair's geometry) and
:func:`trial_estimates` check
everything once, before any work, into a frozen setup that
:mod:`rfkernels.analysis.monte_carlo.trials` runs; the package's face,
:mod:`rfkernels.analysis.monte_carlo`, describes the methods, the streaming,
the scale and the proposals.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from rfkernels import engine, theory
from rfkernels.backends import BACKENDS, check_backend, to_numpy
from rfkernels.projections import projection_bytes
from rfkernels.docstrings import fill
from rfkernels.estimators import Estimator, as_estimator
from rfkernels.validation import (
    check_choice,
    check_int,
    check_matrix,
    check_memory,
    check_same_d,
    check_vectors,
    renamed,
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
    "AUTO",
    "AUTO_NUMPY_WORK",
    "TailDiagnostic",
    "auto_backend",
    "monte_carlo_mse",
    "pareto_k_hat",
    "peak_bytes",
    "tail_size",
    "trial_estimates",
]

#: ``mse_exact`` default of :func:`monte_carlo_mse`: compute it.
COMPUTE = "compute"

#: ``backend`` that chooses: NumPy for a small run, Numba otherwise (:func:`auto_backend`).
AUTO = "auto"

#: Trial terms (trials x m x pairs) up to which ``backend='auto'`` runs on NumPy.
#: NumPy draws about 5e6 terms a second on one core (``benchmarks/bench_first_run.py``),
#: so such a run ends in about 0.2 s, while a cold Numba kernel compiles for several
#: seconds first; warm, Numba would save at most that 0.2 s.
AUTO_NUMPY_WORK = 1_000_000

#: Monte Carlo methods.
METHODS = ("reduced", "literal")

#: Trials per chunk of the literal method (one projection draw per trial).
LITERAL_CHUNK = 1024



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
            log_exact = float(theory.exact_mse(g, None, est.m, est.for_pair(value), log=True,
                                               vectors=vectors))
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
    if not (isinstance(backend, str) and backend == AUTO):
        check_choice(backend, "backend", BACKENDS + (AUTO,))
    check_choice(proposal, "proposal", PROPOSALS)
    trials = check_int(trials, "trials", minimum=2)
    if trials > engine.MAX_TRIALS:
        raise ValueError(f"trials must be at most 2**{engine.PAIR_SHIFT}; got {trials}")
    if chunk is not None:
        chunk = check_int(chunk, "chunk")
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable (done_trials, total_trials) or None; got {progress!r}")
    seq = seed_sequence(seed)
    est = as_estimator(kind, ensemble=ensemble, norms=norms, m=m, A=A, kernel=kernel, gamma=gamma,
                       B_query=derf[0], B_key=derf[1],
                       d=None if isinstance(kind, Estimator) else _d_hint(X, geometry))
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
    backend = auto_backend(backend, trials, est.m, pairs)
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


def auto_backend(backend, trials, m, pairs=1):
    """``backend``, with ``'auto'`` resolved: ``'numpy'`` for at most :data:`AUTO_NUMPY_WORK`
    trial terms, ``'numba'`` above. The estimates are the same on both (the same
    counter-based draws), so the choice changes the time only."""
    if not (isinstance(backend, str) and backend == AUTO):
        return backend
    return "numpy" if trials * m * pairs <= AUTO_NUMPY_WORK else "numba"


def _one_pair(x, y):
    xa = check_vectors(x, "x")
    ya = check_vectors(y, "y")
    for a, name in ((xa, "x"), (ya, "y")):
        if a.ndim != 1:
            raise ValueError(f"{name} must be a 1-D vector of shape (d,); got shape {a.shape} "
                             "or both (n, d) arrays of n pairs")
    check_same_d([xa.shape, ya.shape], ["x", "y"])
    return xa[None, :], ya[None, :]


@fill(A="""\
A : float, optional
    The OPRF parameter (< 1/8; ``kind='oprf'`` only; ``kind='derf'``: a float or a
    symmetric (d, d) array); left out, the pair's optimal ``A*``
    (:func:`rfkernels.theory.oprf_optimal_a`).""")
def monte_carlo_mse(x, y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0,
                    backend="numpy", method="reduced", chunk=None, progress=None, A=None,
                    proposal="auto", kernel="softmax", gamma=None, B_query=None, B_key=None,
                    population=None, vectors=None, mse_exact=COMPUTE):
    r"""Monte Carlo MSE of an estimator of :math:`SM(x, y) = e^{x \cdot y}`, beside theory.

    Parameters
    ----------
    x, y : array_like of shape (d,) or (n, d), or a Geometry and None
        One pair, ``n`` pairs row by row (a :class:`MonteCarloBatch` is
        returned), or ``x`` the :class:`rfkernels.theory.Geometry` of one
        pair and ``y`` None (the reduced method needs nothing else).
    %(m)s
    %(kind_or_spec)s
    %(ensemble)s
    %(norms)s
    %(trials)s
    %(seed)s
    %(backend)s
    %(method)s
    %(chunk)s
    %(progress)s
    %(A)s
    %(B)s
    population : tuple of array_like, optional
        ``(queries, keys)`` where a data-fitted kind is fitted (default: the
        rows of x and y; required for one pair, where a fit is degenerate).
    %(proposal)s
    %(kernel)s
    %(gamma)s
    vectors : tuple of array_like, optional
        With a Geometry only: the pair ``(x, y)`` it is the geometry of (the
        literal method draws whole projections and needs them).
    mse_exact : float or None, optional
        With a Geometry only: the exact MSE the caller holds already (None:
        no closed form), so that it is computed once; by default computed.

    Returns
    -------
    MonteCarloResult or MonteCarloBatch
        One pair's result, or one per pair of a batch. Pair 0 of a batch
        equals the one-pair result with the same seed; with the reduced
        method pair k uses the Philox counters ``(k << 40) | t`` (pairs
        independent), with the literal method the pairs share each trial's
        projection matrix (as in attention).

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
    if isinstance(x, theory.Geometry):
        if y is not None:
            raise ValueError("y must be None when x is a theory.Geometry (it holds the pair)")
        return _from_geometry(x, m, kind, ensemble=ensemble, norms=norms, trials=trials, seed=seed,
                              backend=backend, method=method, chunk=chunk, progress=progress,
                              vectors=vectors, mse_exact=mse_exact, A=A, proposal=proposal,
                              kernel=kernel, gamma=gamma, derf=(B_query, B_key, population))
    if vectors is not None or not _computed(mse_exact):
        raise ValueError("vectors and mse_exact go with a theory.Geometry x only")
    if np.ndim(x) == 2:
        s = _setup(x, y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
                   names=("x", "y"), A=A, proposal=proposal, kernel=kernel, gamma=gamma,
                   derf=(B_query, B_key, population))
        return MonteCarloBatch(run(s))
    X, Y = _one_pair(x, y)
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
               names=("x", "y"), A=A, proposal=proposal, kernel=kernel, gamma=gamma,
               derf=(B_query, B_key, population))
    return run(s)[0]


def _computed(mse_exact):
    return isinstance(mse_exact, str) and mse_exact == COMPUTE


def _from_geometry(geometry, m, kind, *, ensemble, norms, trials, seed, backend, method, chunk,
                   progress, vectors, mse_exact, A, proposal, kernel, gamma, derf):
    """:func:`monte_carlo_mse` of the one pair whose Geometry is ``geometry``.

    ``geometry`` and ``vectors`` are those of the pair as given (the target
    kernel rescales them itself); results equal those of the vectors.
    """
    if np.ndim(geometry.s) != 0:
        raise TypeError("x must be the rfkernels.theory.Geometry of one pair "
                        "(theory.geometry(x, y) of two vectors)")
    X = Y = None
    if vectors is not None:
        X, Y = _one_pair(*vectors)
        theory.check_pair_vectors(geometry, (X[0], Y[0]))
    elif method == "literal":
        raise ValueError("method='literal' draws whole projections and needs the vectors: "
                         "pass vectors=(x, y)")
    known = not _computed(mse_exact)
    if known and mse_exact is not None:
        if isinstance(mse_exact, (str, bool)) or not isinstance(mse_exact, (numbers.Real, np.floating)):
            raise TypeError(f"mse_exact must be a number, None (no closed form) or left out; "
                            f"got {mse_exact!r}")
        mse_exact = float(mse_exact)
        if not (math.isfinite(mse_exact) and mse_exact >= 0.0):
            raise ValueError(f"mse_exact must be finite and >= 0; got {mse_exact!r}")
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress,
               names=("x", "y"), geometry=geometry, exact=mse_exact if known else COMPUTE, A=A,
               proposal=proposal, kernel=kernel, gamma=gamma, derf=derf)
    return run(s)[0]


def _batch_alias(X, Y, m, kind, *, ensemble="iid", norms="chi", trials, seed=0, backend="numpy",
                 method="reduced", chunk=None, progress=None, A=None, proposal="auto",
                 kernel="softmax", gamma=None, B_query=None, B_key=None, population=None):
    s = _setup(X, Y, m, kind, ensemble, norms, trials, seed, backend, method, chunk, progress, A=A,
               proposal=proposal, kernel=kernel, gamma=gamma, derf=(B_query, B_key, population))
    return MonteCarloBatch(run(s))


def _geometry_alias(geometry, m, kind, **options):
    if not isinstance(geometry, theory.Geometry):
        raise TypeError("geometry must be the rfkernels.theory.Geometry of one pair "
                        f"(theory.geometry(x, y)); got {type(geometry).__name__}")
    return monte_carlo_mse(geometry, None, m, kind, **options)


#: Names this module no longer holds as entry points (``CHANGELOG.md``).
_RENAMED = {
    "monte_carlo_mse_batch": ("rfkernels.analysis.monte_carlo_mse(X, Y, ...) with (n, d) arrays",
                              lambda: _batch_alias),
    "monte_carlo_mse_from_geometry": ("rfkernels.analysis.monte_carlo_mse(geometry, None, ...)",
                                      lambda: _geometry_alias),
}


def deprecated(name, module=__name__):
    """A deprecated entry point's value, warning at the caller of the module's ``__getattr__``.

    The packages that re-export this module's names (``rfkernels.analysis``,
    ``rfkernels.analysis.monte_carlo``) forward their own ``__getattr__``
    here with their name, so the warning names what the user wrote.
    """
    return renamed(module, _RENAMED, name, stacklevel=4)


def __getattr__(name):
    return deprecated(name)


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
