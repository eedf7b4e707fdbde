"""One scalar source, two compile targets: Numba CPU (``njit``) and Numba CUDA (device functions).

The scalar code of the Monte Carlo engine (Philox, the uniforms, Box--Muller,
the Marsaglia--Tsang stages, ``log``/``exp``/``sincos``, the projections of a
trial, the three estimators and the fixed-order sums) is written once, as
plain Python functions, in :mod:`rfkernels.numerics.elementary_numba`,
:mod:`rfkernels.engine.rng_numba` and :mod:`rfkernels.engine.cpu`.
Each is decorated with :func:`scalar`, which

- returns its CPU build, a ``numba.njit`` dispatcher (these are what the CPU
  kernels and the tests call), and
- records the plain Python function, its *source*.

:func:`cuda_twin` builds the CUDA target from those sources: for each source
function it makes a new Python function with the same code object but
globals in which every name bound to a registered source function is bound
to that function's CUDA twin instead, and compiles it with
``numba.cuda.jit(device=True)``. The CUDA twin never calls CPU-compiled
code. This matters twice:

- under Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) a device function
  built this way runs as plain Python, all the way down, so a simulator test
  exercises the very source the device compiles (a simulated kernel calling
  an ``njit`` helper would run that helper as compiled CPU code and prove
  nothing about the device path);
- CPU-only intrinsics (the bit casts ``f64_bits`` and ``bits_f64``) are
  registered with :func:`intrinsic_twins`: a CUDA intrinsic (same LLVM
  ``bitcast``) for the device and a NumPy formulation for the simulator.

Names are rebound only where a function's globals refer to a registered
source function directly (``from ._elementary_numba import log``), not
through a module attribute (``elem.log``): the scalar sources import what
they call by name.
"""

from __future__ import annotations

import types as pytypes

import numba

#: dispatcher (CPU build) -> its plain Python source function
_SOURCES = {}
#: CPU intrinsic -> (cuda factory, simulator function)
_INTRINSICS = {}
#: (id of a CPU build, simulator?) -> CUDA twin
_TWINS = {}
#: dispatcher (CPU build) -> the njit options it was built with
_OPTIONS = {}
#: (id of a CPU build, rebound names and ids) -> its specialisation
_SPECIALISED = {}


def scalar(**njit_options):
    """Decorator: register a scalar source function and return its CPU build ``numba.njit(**njit_options)``."""

    def decorate(fn):
        dispatcher = numba.njit(**njit_options)(fn)
        _SOURCES[dispatcher] = fn
        _OPTIONS[dispatcher] = dict(njit_options)
        return dispatcher

    return decorate


def intrinsic_twins(cpu, cuda_factory, simulated):
    """Register the CUDA twin of a CPU intrinsic.

    ``cuda_factory()`` returns the device intrinsic (called only when a CUDA
    twin is built, so that ``numba.cuda`` is imported only then);
    ``simulated`` is a plain Python function computing the same thing, used
    under the CUDA simulator.
    """
    _INTRINSICS[cpu] = (cuda_factory, simulated)


def simulator_enabled():
    """True when ``numba.cuda`` is Numba's CUDA simulator (imports ``numba.cuda``)."""
    from numba import config

    return bool(config.ENABLE_CUDASIM)


def source(dispatcher):
    """The plain Python function a :func:`scalar` CPU build was compiled from."""
    return _SOURCES[dispatcher]


def rebind(fn, **bindings):
    """A copy of the plain function ``fn`` whose global names in ``bindings`` are rebound."""
    namespace = dict(fn.__globals__)
    namespace.update(bindings)
    rebuilt = pytypes.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__)
    rebuilt.__qualname__ = fn.__qualname__
    rebuilt.__doc__ = fn.__doc__
    rebuilt.__module__ = fn.__module__
    return rebuilt


def specialise(dispatcher, **bindings):
    """The scalar built from ``dispatcher``'s source with some global names rebound (built once).

    Each binding is a registered scalar (e.g. a kind's terms): the result is
    a registered scalar too, so its CUDA twin (:func:`cuda_twin`) calls the
    bindings' twins. This is how one kernel source serves every registered
    kind without naming any.
    """
    key = (id(dispatcher), tuple(sorted((name, id(v)) for name, v in bindings.items())))
    if key not in _SPECIALISED:
        fn = rebind(_SOURCES[dispatcher], **bindings)
        _SPECIALISED[key] = scalar(**_OPTIONS[dispatcher])(fn)
    return _SPECIALISED[key]


def _registered(value):
    try:
        return value in _SOURCES or value in _INTRINSICS
    except TypeError:  # unhashable global
        return False


def cuda_twin(dispatcher):
    """The CUDA device function compiled from the same source as ``dispatcher`` (built once).

    Under the CUDA simulator the twin is a simulated device function that runs
    the source as Python; its callees are twins too.
    """
    sim = simulator_enabled()
    key = (id(dispatcher), sim)
    if key in _TWINS:
        return _TWINS[key]
    if dispatcher in _INTRINSICS:
        cuda_factory, simulated = _INTRINSICS[dispatcher]
        twin = simulated if sim else cuda_factory()
        _TWINS[key] = twin
        return twin
    from numba import cuda

    fn = _SOURCES[dispatcher]
    twins = {}
    for name in fn.__code__.co_names:
        value = fn.__globals__.get(name)
        if value is not None and _registered(value):
            twins[name] = cuda_twin(value)
    twin = cuda.jit(device=True)(rebind(fn, **twins))
    _TWINS[key] = twin
    return twin
