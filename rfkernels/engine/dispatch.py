"""The engine: one estimator on one backend, chosen once per run.

:class:`Engine` holds what a run needs from its backend (the array
namespace, the chunk size, the memory estimate, the kernel) and
:func:`estimate_chunks` is the engine's validated public entry. The
targets: the vectorised NumPy/CuPy code of :mod:`rfkernels.engine.laws`,
the Numba CPU kernels of :mod:`rfkernels.engine.cpu` and the numba-cuda
kernels of :mod:`rfkernels.engine.cuda`, all from one scalar source.
"""

from __future__ import annotations

import numpy as np

from ..estimators import estimator, registry
from ..numerics.chi_quantile import quantile_table
from ..validation import check_choice, check_int, nonnegative_scalar
from .laws import estimates_of, reduced_law
from .proposal import Tilt
from .streams import MAX_PAIRS, MAX_TRIALS, PAIR_SHIFT, trial_counters


#: Default trials per chunk of :func:`estimate_chunks`; NumPy and the CuPy
#: array path hold about 20 arrays of ``m × chunk`` doubles, so theirs is
#: divided by m; the kernels hold one estimate per trial.
DEFAULT_CHUNK = {"numpy": 1 << 17, "numba": 1 << 16, "cupy": 1 << 24}


def gpu_kernel_available():
    """True if ``backend='cupy'`` runs the numba-cuda kernel (a device, or the CUDA simulator)."""
    from ..backends import cupy_available

    try:
        from ..numerics.scalar import simulator_enabled

        if simulator_enabled():
            return True
        if not cupy_available():
            return False
        from .cuda import cuda_available
    except ImportError:  # numba-cuda not installed: CuPy's array path
        return False
    return cuda_available()


def engine_namespace(backend):
    """The array module the estimates of ``backend`` come in.

    NumPy for ``'numpy'`` and ``'numba'``; CuPy for ``'cupy'``, except under
    Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``), where the GPU kernel
    runs on the CPU with NumPy arrays standing in for CuPy's.
    """
    from ..backends import BACKENDS, array_namespace

    check_choice(backend, "backend", BACKENDS)
    if backend == "cupy":
        from ..numerics.scalar import simulator_enabled

        return np if simulator_enabled() else array_namespace("cupy")
    return np


def default_chunk(backend, m):
    """Trials per chunk for ``backend`` at ``m`` projections (about 1 MiB per array on NumPy)."""
    chunk = DEFAULT_CHUNK[backend]
    if backend == "numpy" or (backend == "cupy" and not gpu_kernel_available()):
        chunk = max(1, chunk // m)
    return chunk


#: Arrays of ``m × chunk`` doubles the vectorised path holds at its peak (measured
#: 17 with tracemalloc; tests/test_monte_carlo.py::test_peak_bytes_bounds_the_measured_peak).
VECTORISED_ARRAYS = 20


def engine_bytes(m, chunk, backend, ensemble="iid", d=1):
    """Estimated peak bytes :func:`estimate_chunks` allocates on the host for ``chunk`` trials.

    Vectorised path: :data:`VECTORISED_ARRAYS` arrays of ``w × chunk``
    doubles, ``w`` the reduced law's width (:attr:`rfkernels.engine.laws.ReducedLaw.width`:
    m, or ``max(m, d)`` for the simplex ensemble, which draws all d coordinates of
    each block); Numba: per thread, seven length-m work arrays, plus the chunk;
    the GPU kernel: device memory only (0 on the host). ``ensemble`` is a
    registered ensemble with a reduced law (ValueError with its reason otherwise).
    """
    law = reduced_law(registry.entry("ensemble", ensemble))
    if backend == "numba":
        import numba

        from .cpu import BATCH

        threads = min(numba.get_num_threads(), -(-chunk // BATCH))
        return threads * 7 * 8 * (m + 1) + 8 * chunk
    if backend == "cupy":
        return 0
    return VECTORISED_ARRAYS * 8 * law.width(m, d) * chunk


def check_reduced(kind, ensemble):
    """Refuse, naming the argument, a kind or ensemble the reduced engine cannot sample."""
    estimator(kind, ensemble=ensemble).supports.reduced.require()


def _kernel_of(kind, ensemble, norms):
    """``(ensemble code, chi, kind entry, coupled)``: the CPU kernel's key of an estimator."""
    est = estimator(kind, ensemble=ensemble, norms=norms)
    est.supports.reduced.require()
    return est.ensemble.code, est.norms.chi, est.kind, est.norms.coupled


def kernel_pending(kind, ensemble="iid", norms="chi"):
    """Whether the Numba kernel the reduced engine runs for this estimator still has to compile.

    False once it is compiled in this process or stored in Numba's disk cache.
    """
    from .cpu import compile_pending, kernel_for

    return compile_pending(kernel_for(*_kernel_of(kind, ensemble, norms)))


def kernel_key(kind, ensemble="iid", norms="chi"):
    """A hashable name of the Numba kernel the reduced engine runs for this estimator.

    Equal for estimators that share one kernel (trig and offset, whose
    random phase is an argument).
    """
    from .kernel_args import cpu_kernel_key

    return cpu_kernel_key(*_kernel_of(kind, ensemble, norms))


def compile_kernel(kind, ensemble="iid", norms="chi"):
    """Compile the Numba kernel the reduced engine runs for this estimator (or load it from the cache).

    Returns True if it compiled. One kernel serves every m, d, pair and
    proposal of the estimator (and kinds that share their terms, as trig
    and offset do): a pool of processes compiles each kernel once, up front
    and in parallel, and the processes that then run it load it from Numba's
    disk cache.
    """
    from .cpu import NO_TABLE, compile_pending, kernel_for, reduced_estimates

    code, chi, entry, coupled = _kernel_of(kind, ensemble, norms)
    pending = compile_pending(kernel_for(code, chi, entry, coupled))
    # no trials, with the argument types of a real call: the signature a run then finds compiled
    reduced_estimates(np.uint32(0), np.uint32(0), np.uint64(0), np.int64(2), np.int64(2), code, chi,
                      entry, 0.0, np.empty(0), oprf=(0.0, 0.0, 0.0) if entry.param_names else None,
                      table=NO_TABLE if coupled else None, notice=False)
    return pending


class Engine:
    """The reduced Monte Carlo engine of one estimator on one backend, chosen once per run.

    Holds what a run needs from its backend: the array namespace ``xp`` the
    estimates come in, the chunk size, the memory estimate and the kernel
    (the Numba CPU kernel, the numba-cuda kernel, or the vectorised NumPy or
    CuPy code). :meth:`chunks` yields ``(n, e, w)`` for every proposal, ``w``
    None for the plain law.

    Parameters
    ----------
    est : rfkernels.estimators.Estimator
        Validated, with m and d, and :attr:`~rfkernels.estimators.Estimator.supports.reduced`.
    backend : {'numpy', 'numba', 'cupy'}
        Validated; ``'cupy'`` needs CuPy or the CUDA simulator (ImportError otherwise).
    chunk : int, optional
        Trials per chunk (default :func:`default_chunk`).
    """

    def __init__(self, est, backend, chunk=None):
        self.est, self.backend = est, backend
        self.xp = engine_namespace(backend)
        self.uses_kernel = backend == "numba" or (backend == "cupy" and gpu_kernel_available())
        # the vectorised law's widest arrays (simplex: d x chunk, all coordinates of a block)
        self.width = reduced_law(est.ensemble).width(est.m, est.d)
        self.chunk = default_chunk(backend, self.width) if chunk is None else chunk
        self._kernel = None
        #: Antithetic norms: the chi-square quantile table of d the kernels read (None: independent).
        self.table = quantile_table(est.d) if est.norms.coupled else None
        if self.uses_kernel:
            if backend == "numba":
                from .cpu import reduced_estimates as kernel
            else:
                from .cuda import gpu_reduced_estimates as kernel
            self._kernel = kernel

    def bytes(self, n):
        """Estimated peak host bytes for chunks of ``n`` trials (:func:`engine_bytes`)."""
        return engine_bytes(self.est.m, n, self.backend, self.est.ensemble.name, self.est.d)

    def constants(self, value, length):
        """The kind's constants of a pair (``value``: :attr:`Kind.resolve`; ``length``: ``a``)."""
        return self.est.kind.constants(value, length, self.est.d)

    def chunks(self, key, length, consts, *, trials, first=0, pair=0, tilt=None):
        """``(n, e, w)`` chunk by chunk: trials ``first .. first + trials - 1`` of ``pair``.

        ``e`` (and the weights ``w`` of a :class:`Tilt`; None when plain)
        are arrays of :attr:`xp`, reused by the next chunk: consume or copy
        them first. Nothing is checked here (see :func:`estimate_chunks`).
        """
        est, xp, chunk = self.est, self.xp, self.chunk
        stop = first + trials
        if self.uses_kernel:
            k = np.asarray(key)
            k0, k1 = np.uint32(k[0]), np.uint32(k[1])
            buf = xp.empty(min(chunk, trials))
            wbuf = xp.empty(min(chunk, trials)) if tilt is not None else None
            for start in range(first, stop, chunk):
                n = min(chunk, stop - start)
                out = buf[:n]
                weights = wbuf[:n] if tilt is not None else None
                self._kernel(k0, k1, np.uint64((pair << PAIR_SHIFT) | start), np.int64(est.m),
                             np.int64(est.d), est.ensemble.code, est.norms.chi, est.kind, length,
                             out, oprf=consts, tilt=tilt, weights=weights, table=self.table)
                yield n, out, weights
            return
        key = xp.asarray(key)
        for start in range(first, stop, chunk):
            n = min(chunk, stop - start)
            counters = trial_counters(start, n, pair, xp=xp)
            with np.errstate(over="ignore", under="ignore"):
                e = estimates_of(est, key, counters, length, consts, xp, tilt)
            yield (n, e, None) if tilt is None else (n, *e)


def estimate_chunks(key, length, m, d, kind, *, ensemble="iid", norms="chi", trials, first=0,
                    pair=0, chunk=None, backend="numpy", A=None, tilt=None):
    """Normalised estimates of one pair, chunk by chunk: the Monte Carlo engine's public entry.

    Validates its arguments once (into an :class:`rfkernels.estimators.Estimator`
    and an :class:`Engine`) and yields :meth:`Engine.chunks`: ``(n, e, w)``,
    ``e`` the normalised estimates of trials ``first .. first + n - 1`` of pair
    ``pair`` (the counters of :func:`trial_counters`), ``w`` their
    likelihood-ratio weights under ``tilt`` (a :class:`Tilt` from
    :func:`tilt_for`), None without one; arrays of :func:`engine_namespace`,
    which may be reused by the next chunk. ``A`` is the OPRF parameter,
    required for ``kind='oprf'`` (refused otherwise); trig estimates are
    bounded and are not tilted.

    ``backend`` chooses where they are computed, with the same bits
    (positive, hyperbolic and oprf; trig up to each target's ``cos``):

    - ``'numpy'``: :func:`normalised_estimates`, vectorised;
    - ``'numba'``: the parallel CPU kernels of :mod:`rfkernels.engine.cpu`;
    - ``'cupy'``: the GPU kernel of :mod:`rfkernels.engine.cuda`, compiled by
      numba-cuda from the same scalar source as the CPU kernels (without
      numba-cuda: :func:`normalised_estimates` on CuPy arrays).
    """
    from ..backends import BACKENDS

    est = estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d, A=A)
    est.supports.reduced.require()
    trials, first = check_int(trials, "trials"), check_int(first, "first", minimum=0)
    if first + trials > MAX_TRIALS:
        raise ValueError(f"first + trials must be at most 2**{PAIR_SHIFT}; got {first + trials}")
    pair = check_int(pair, "pair", minimum=0)
    if pair >= MAX_PAIRS:
        raise ValueError(f"pair must be below 2**{64 - PAIR_SHIFT}; got {pair}")
    a = nonnegative_scalar(length, "length")
    consts = est.kind.constants(est.kind.resolve(est.params, None), a, est.d)
    if tilt is not None:
        if not isinstance(tilt, Tilt):
            raise TypeError(f"tilt must be a rfkernels.engine.Tilt (tilt_for); got {tilt!r}")
        if est.kind.tilt_reason is not None:
            raise ValueError("tilt: trig estimates are bounded and are not tilted; pass tilt=None")
        if not est.supports.tilted:  # antithetic norms: the tilt's weights are independent norms'
            raise ValueError(f"tilt: {est.supports.tilted.reason.split('; use ')[0]}; pass tilt=None")
    check_choice(backend, "backend", BACKENDS)
    engine = Engine(est, backend, None if chunk is None else check_int(chunk, "chunk"))
    return engine.chunks(key, a, consts, trials=trials, first=first, pair=pair, tilt=tilt)
