"""The checks every function of a pair of row sets shares: feature maps, estimates, the exact kernel.

``(X, Y, W)`` are validated once here, at the public entry, and the layers
below trust the arrays they get: the same array module (NumPy or CuPy),
float64 rows of the same dimension, memory within bounds, and a result that
is finite or an error naming the log-domain function to use instead.
"""

from __future__ import annotations

import numpy as np

from .backends import get_array_module, to_numpy
from .estimators.registry import check_kind, entries, entry, names
from .estimators.spec import refuse_parameter
from .validation import check_finite, check_memory, check_same_d, renamed

def check_rows(value, name, xp):
    """A finite float64 array of shape (n, d) and whether it came in 1-D."""
    arr = check_finite(value, name, xp)
    if arr.ndim == 1:
        if arr.shape[0] < 1:
            raise ValueError(f"{name} must have d >= 1 entries; got shape {arr.shape}")
        return arr[None, :], True
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 1-D vector (d,) or a 2-D array (n, d); got shape {arr.shape}"
        )
    if arr.shape[1] < 1:
        raise ValueError(f"{name} must have d >= 1 columns; got shape {arr.shape}")
    return arr, False


def check_projections(value, xp):
    w = check_finite(value, "W", xp)
    if w.ndim != 2:
        raise ValueError(f"W must be a 2-D array of shape (m, d); got shape {w.shape}")
    if w.shape[0] < 1 or w.shape[1] < 1:
        raise ValueError(f"W must have m >= 1 rows and d >= 1 columns; got shape {w.shape}")
    return w


def is_derf(kind):
    """A registered kind with a query map and a key map (its map is a :class:`~rfkernels.estimators.maps.PairMap`)."""
    if not isinstance(kind, str) or kind not in names("kind"):
        return False
    fmap = entry("kind", kind).feature_map
    return fmap is not None and fmap.two_roles


def refuse_derf_parameters(kind, B_query, B_key):
    """``B_query`` and ``B_key`` belong to the DERF kinds: refused with any other kind."""
    if not is_derf(kind):
        for name, value in (("B_query", B_query), ("B_key", B_key)):
            if value is not None:
                refuse_parameter(name, value, kind)


def require_projections(kind, W):
    """A random feature map needs its projections W: the one error when W is None."""
    if W is None:
        raise ValueError(f"W is required for the random feature map {kind!r}: an (m, d) array of "
                         "projections (rfkernels.draw_projections); got None")


def check_pair(X, Y, W=None, kind=None, A=None, phase=None):
    """Validate everything before any work; returns xp, arrays and squeeze flags (and the phases).

    With a ``kind``, its ``phase`` too (:func:`check_phase`); the phases are
    then returned after the squeeze flags.
    """
    args = (X, Y) if W is None else (X, Y, W)
    xp = get_array_module(*args)
    if kind is not None:
        check_kind(kind)
        if is_derf(kind):
            raise ValueError(f"kind={kind!r} has a query map and a key map: estimate its kernel as "
                             f"feature_map(X, W, {kind!r}, ..., role='query') @ feature_map(Y, W, "
                             f"{kind!r}, ..., role='key').T (the data-fitted kinds: fit_derf first)")
        check_map_param(kind, A)
    x, x1 = check_rows(X, "X", xp)
    y, y1 = check_rows(Y, "Y", xp)
    if W is None:
        check_same_d([x.shape, y.shape], ["X", "Y"])
        return xp, x, y, None, x1, y1
    w = check_projections(W, xp)
    check_same_d([x.shape, y.shape, w.shape], ["X", "Y", "W"])
    if kind is not None:
        return xp, x, y, w, x1, y1, check_phase(kind, phase, w.shape[0], xp)
    return xp, x, y, w, x1, y1


def check_phase(kind, phase, m, xp=np):
    """The phases ``b`` (m,) of a kind with a random phase (offset: required), None otherwise."""
    if not entry("kind", kind).random_phase:
        if phase is not None:
            owners = " or ".join(repr(k.name) for k in entries("kind") if k.random_phase)
            raise ValueError(f"phase is the parameter of kind={owners} only; got phase with "
                             f"kind={kind!r}")
        return None
    if phase is None:
        raise ValueError(f"kind={kind!r} needs phase: the (m,) phases b_i in [0, 2 pi) drawn with "
                         "the projections (rfkernels.draw_phases); got None")
    b = check_finite(phase, "phase", xp)
    if b.shape != (m,):
        raise ValueError(f"phase must have shape (m,) = ({m},), one per projection; got shape "
                         f"{b.shape}")
    return b


def check_target(kernel, gamma):
    """``(entry, scale)`` of a target kernel and its parameter (gamma: gaussian only)."""
    t = entry("kernel", kernel)
    values = {} if gamma is None else {"gamma": gamma}
    if gamma is not None and "gamma" not in t.param_names:
        refuse_parameter("gamma", gamma, None, t.name)
    return t, float(t.scale(t.check_params(values)))


def check_memory_pairs(x, y, w, xp, kind=None):
    """Refuse, before any work, a call whose arrays would not fit in memory (NumPy only).

    Features of X and Y (up to 2m columns each, or the kind's own outputs per
    projection where it has more: the hybrid's 27, of W's rows less its extra
    ones; with a few temporaries) and the (n_x, n_y) result with as many temporaries.
    """
    if xp is not np:
        return
    m = 0 if w is None else w.shape[0]
    per = 2
    if kind is not None and m:
        k = entry("kind", kind)
        m, per = k.base_rows(m), max(2, k.features_per_projection)
    r = per * m
    n_x, n_y = x.shape[0], 0 if y is None else y.shape[0]
    nbytes = 8 * (4 * (n_x + n_y) * r + 4 * n_x * n_y)
    if r:
        what = f"features of n_x={n_x}, n_y={n_y} inputs with m={m} projections ({r} outputs)"
    else:
        what = f"a kernel of n_x={n_x}, n_y={n_y} inputs"
    check_memory(nbytes, what)


def squeeze_pairs(a, x1, y1):
    """Drop the row axis of a 1-D X and/or Y from an (n_x, n_y) result."""
    if x1 and y1:
        return a[0, 0]
    if x1:
        return a[0]
    if y1:
        return a[:, 0]
    return a


def require_finite(a, xp, what, log_name):
    if not bool(xp.all(xp.isfinite(a))):
        raise FloatingPointError(
            f"{what} overflowed (inf or NaN): the input is too large for the linear "
            f"domain; use rfkernels.{log_name}, which works in the log domain"
        )
    return a


def fit_map_param(kind, A, x, y):
    """A checked map parameter (:func:`check_map_param`), ``'auto'`` fitted by the map on rows x, y (on the host)."""
    if isinstance(A, str):
        return entry("kind", kind).feature_map.param.fit(to_numpy(x), to_numpy(y))
    return A


def check_map_param(kind, A):
    """The parameter ``A`` of a kind's feature map, checked by the map (``'auto'`` or a value).

    None for a map without a parameter (``A`` given to one is refused); a
    kind without a literal feature map refuses with its reason.
    """
    param = entry("kind", kind).require_map().param
    if param is None:
        if A is not None:
            refuse_parameter("A", A, kind)
        return None
    return param.check(A)


#: Names this module no longer holds (``CHANGELOG.md``).
_RENAMED = {"check_oprf_a": ("rfkernels.pairs.check_map_param", lambda: check_map_param)}


def __getattr__(name):
    return renamed(__name__, _RENAMED, name)

