"""How the CPU and CUDA kernels of the reduced sampler name a kind or an ensemble and take their arguments.

The ensemble codes are the registry entries' :attr:`rfkernels.estimators.Ensemble.code`
(:mod:`rfkernels.engine.laws` keys its vectorised laws by them too).
:func:`kind_entry` resolves a kind given as a registry entry, a name or a
built-in code; :func:`kind_id` is the kernels' cache key (kinds that share
their terms share a kernel); :func:`constants_args` and :func:`tilt_params`
turn a kind's constants and a :class:`rfkernels.engine.Tilt` into the plain
floats the kernels take. :mod:`rfkernels.engine.cpu` re-exports them.
"""

from __future__ import annotations

import hashlib

from ..estimators import Kind, ensembles, hyperbolic, oprf, positive, registry, trig
from ..numerics.scalar import source

#: The kernels' ensemble codes (their argument ``ensemble``; ``False``/``True`` still mean
#: iid/orthogonal): the codes of the registry entries whose laws they compute.
IID, ORTHOGONAL, SIMPLEX = ensembles.IID.code, ensembles.ORTHOGONAL.code, ensembles.SIMPLEX.code
#: Every ensemble code the kernels take.
ENSEMBLE_CODES = (IID, ORTHOGONAL, SIMPLEX)

#: Codes of the built-in kinds (:attr:`rfkernels.estimators.Kind.code`), accepted
#: wherever ``kind`` is (as are a registered kind's name and its
#: :class:`rfkernels.estimators.Kind`): the kernels take the kind's terms from its
#: registry entry, not from a code.
POSITIVE, HYPERBOLIC, TRIG, OPRF = (positive.KIND.code, hyperbolic.KIND.code, trig.KIND.code,
                                    oprf.KIND.code)


def kind_codes():
    """``{name: code}`` of the registered kinds that have a code."""
    return {k.name: k.code for k in registry.entries("kind") if k.code is not None}


def __getattr__(name):
    if name == "KIND_CODES":  # the registry's, at the time of asking
        return kind_codes()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def kind_entry(kind):
    """The :class:`rfkernels.estimators.Kind` of ``kind``: an entry, a registered name or a built-in code."""
    if isinstance(kind, Kind):
        return kind
    if isinstance(kind, str):
        return registry.entry("kind", kind)
    codes = {code: name for name, code in kind_codes().items()}
    try:
        return registry.entry("kind", codes[int(kind)])
    except (KeyError, TypeError, ValueError):
        raise ValueError(f"kind must be a registered kind, its name or one of the codes "
                         f"{sorted(codes)}; got {kind!r}") from None


def kind_id(kind):
    """A 62-bit number naming the terms of ``kind`` and their source (the kernels' cache key).

    Kinds that share their ``scalar_terms`` (and flags) share a kernel: trig
    and offset, whose random phase is a runtime argument.
    """
    if kind.name not in _KIND_IDS:
        import inspect

        terms = source(kind.scalar_terms)
        text = (f"{terms.__module__}.{terms.__qualname__}\0{kind.needs_squared_norms}"
                f"\0{kind.symmetric_tilt}\0" + inspect.getsource(terms))
        _KIND_IDS[kind.name] = int(hashlib.sha256(text.encode()).hexdigest()[:15], 16)
    return _KIND_IDS[kind.name]


_KIND_IDS = {}


def cpu_kernel_key(ensemble, chi, kind, coupled=False):
    """``(ensemble code, chi, coupled, kind_id)``: one compiled CPU kernel per key."""
    return int(ensemble), bool(chi), bool(coupled), kind_id(kind_entry(kind))


def tilt_params(tilt, weights, out):
    """``(symmetric, tp, weights)`` for the kernels: :class:`rfkernels.engine.Tilt` as plain values.

    ``tp`` is ``(alpha0, shift, wscale, c1, c0, e_plus, e_minus, c_minus, n1)``;
    without a tilt, zeros and an empty ``weights`` of ``out``'s kind.
    """
    if tilt is None:
        return False, (0.0,) * 9, out[:0]
    if weights is None or weights.shape != out.shape:
        raise ValueError("a tilted run needs weights, an array shaped like out")
    tp = tuple(float(v) for v in (tilt.alpha0, tilt.shift, tilt.wscale, tilt.c1, tilt.c0,
                                  tilt.e_plus, tilt.e_minus, tilt.c_minus, tilt.n1))
    return bool(tilt.symmetric), tp, weights


def constants_args(kind, length, oprf):
    """The kernels' ``(slope, curvature, offset)``: ``oprf`` (the kind's constants) where given.

    A kind with parameters needs them (:attr:`rfkernels.estimators.Kind.constants`,
    e.g. :func:`rfkernels.engine.oprf_constants`); the others default to ``(length, 0, 0)``.
    """
    entry = kind_entry(kind)
    if oprf is not None:
        return tuple(float(v) for v in oprf)
    if entry.param_names:
        raise ValueError(f"kind {entry.name!r} needs oprf=(slope, curvature, offset), its constants "
                         "(rfkernels.engine.oprf_constants for oprf)")
    return float(length), 0.0, 0.0
