"""Grid points: their canonical form, identity, random stream and geometry.

A *point* is a dict of the grid variables (:data:`GRID_AXES`): estimator
``kind``, ``ensemble``, ``norms``, target ``kernel`` (``"softmax"`` or
``"gaussian"``) and its ``gamma`` (None but for the Gaussian kernel),
``backend``, ``d``, ``m``, ``angle`` and ``norm_x``/``norm_y`` or
``norm_sum`` (= |x + y| with |x| = |y|). Comparisons, sweeps and figures all
derive a point's random stream here, from what the point *is*, so one
geometry gets one stream wherever it is evaluated.
"""

from __future__ import annotations

import hashlib
import json
import math

import numpy as np

from rfkernels import theory
from rfkernels.validation import check_int

#: Grid axes, in the order they appear in tables.
GRID_AXES = ("kind", "ensemble", "norms", "kernel", "gamma", "backend", "d", "m", "angle",
             "norm_x", "norm_y", "norm_sum")
#: The target-kernel axes, and the kernel a point without them has.
KERNEL_AXES = ("kernel", "gamma")
DEFAULT_KERNEL = "softmax"
_INT_AXES = ("d", "m")
_FLOAT_AXES = ("angle", "norm_x", "norm_y", "norm_sum", "gamma")


def canonical_point(point):
    """The point with ints for d and m, floats for angle, norms and gamma, and no backend.

    ``1`` and ``1.0`` are the same norm, and the backend does not change what
    is sampled (rows that differ only in backend agree), so neither may
    change the point's identity. The target-kernel axes are left out where
    they hold their defaults (``kernel`` None or ``"softmax"``, ``gamma``
    None): a softmax point has the identity, and so the random stream, it
    had before the kernel axes existed. Keys outside :data:`GRID_AXES` are kept.
    """
    out = {}
    for key, value in point.items():
        if key == "backend" or (key in KERNEL_AXES and value in (None, DEFAULT_KERNEL)):
            continue
        if value is not None and key in _INT_AXES:
            value = check_int(value, key)
        elif value is not None and key in _FLOAT_AXES:
            value = float(value)
            if not math.isfinite(value):
                raise ValueError(f"{key} must be finite; got {value!r}")
        out[key] = value
    return out


def _digest(point):
    canon = json.dumps(canonical_point(point), sort_keys=True)
    return hashlib.sha256(canon.encode()).digest()


def point_seed(root_seed, point):
    """``SeedSequence(root_seed, spawn_key=H(point))``: the point's own stream.

    ``H`` is SHA-256 of the canonical point's JSON, cut into four 32-bit
    words: the stream depends on what the point is, not on when, where or
    by which backend it runs.
    """
    digest = _digest(point)
    key = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))
    entropy = root_seed.entropy if isinstance(root_seed, np.random.SeedSequence) else int(root_seed)
    return np.random.SeedSequence(entropy, spawn_key=key)


def point_id(point):
    """A short stable identifier of a grid row (its backend included)."""
    canon = json.dumps({"point": canonical_point(point), "backend": point.get("backend")},
                       sort_keys=True)
    return hashlib.sha256(canon.encode()).hexdigest()[:16]


def axis_text(axis, value):
    """The JSON text of one axis value in a point's canonical form (its identity).

    ``""`` where :func:`canonical_point` leaves the axis out (a target-kernel
    axis at its default).
    """
    if axis == "backend":
        return json.dumps(value)
    canon = canonical_point({axis: value})
    return json.dumps(canon[axis]) if axis in canon else ""


def point_ids(axis_values, axis_index):
    """:func:`point_id` of many points at once, without a dict per point.

    The points hold every axis of :data:`GRID_AXES` (None where an axis is
    unused), as grid points do. ``axis_values[axis]`` lists the values an
    axis takes (``[None]`` for an unused axis) and ``axis_index[axis]``
    holds each point's position on it (integer arrays of one length).
    Returns a list of ids, ``point_id`` of each point: the canonical JSON of
    every distinct axis value is made once and each point's text is
    assembled from those pieces.
    """
    keys = sorted(a for a in GRID_AXES if a != "backend")
    assert keys[0] not in KERNEL_AXES  # the first key is always there: no separator before it
    texts, columns = [], []
    for n, axis in enumerate(["backend", *keys]):
        found = [axis_text(axis, v) for v in axis_values[axis]]
        if axis == "backend":
            pieces = ['{"backend": ' + t + ', "point": {' for t in found]
        else:  # "key": value, or nothing where the canonical point leaves the key out
            sep = "" if n == 1 else ", "
            pieces = [f"{sep}{json.dumps(axis)}: {t}" if t else "" for t in found]
        idx = np.asarray(axis_index[axis])
        if idx.size and idx.min() == idx.max():  # the same value for every point: into the template
            texts.append(pieces[int(idx[0])].replace("%", "%%"))
        else:
            texts.append("%s")
            columns.append(np.asarray(pieces, dtype=object)[idx].tolist())
    template = "".join(texts) + "}}"
    sha256 = hashlib.sha256
    if not columns:
        n = len(np.asarray(axis_index["kind"]))
        return [sha256(template.replace("%%", "%").encode()).hexdigest()[:16]] * n
    digests = b"".join([sha256((template % t).encode()).digest()[:8] for t in zip(*columns)]).hex()
    return [digests[i : i + 16] for i in range(0, len(digests), 16)]


def norms_from_sum(norm_sum, angle):
    """|x| = |y| giving |x + y| = ``norm_sum`` at ``angle``: ``norm_sum / (2 cos(θ/2))``.

    Broadcasts over arrays; ``angle`` must be below π (|x + y| is 0 there).
    """
    c = np.cos(np.asarray(angle, dtype=np.float64) / 2.0)
    if np.any(np.asarray(angle) >= math.pi) or np.any(c <= 0.0):
        raise ValueError("norm_sum needs angle < pi (|x + y| = 0 at angle pi)")
    out = np.asarray(norm_sum, dtype=np.float64) / (2.0 * c)
    return out[()] if out.ndim == 0 else out


def check_norm_axes(point, where="geometry"):
    """Refuse a point (or grid) that gives ``norm_sum`` and ``norm_x``/``norm_y`` together.

    ``norm_sum`` fixes |x| = |y| from |x + y| and the angle, so with
    ``norm_x`` or ``norm_y`` as well the geometry is over-specified: one
    would be used and the other reported. Keys set to None count as absent.
    """
    given = [k for k in ("norm_x", "norm_y") if point.get(k) is not None]
    if point.get("norm_sum") is not None and given:
        raise ValueError(
            f"{where}: give either norm_sum or norm_x/norm_y, not both "
            f"(got norm_sum and {' and '.join(given)})"
        )
    return point


def point_norms(point):
    """``(|x|, |y|)`` of a point: ``norm_x``, ``norm_y``, or both from ``norm_sum``."""
    check_norm_axes(point)
    if point.get("norm_sum") is not None:
        n = float(norms_from_sum(point["norm_sum"], point["angle"]))
        return n, n
    return point["norm_x"], point["norm_y"]


def point_geometry(point):
    """The :class:`rfkernels.theory.Geometry` of a point's ``d``, norms and ``angle``."""
    return theory.geometry_from_angle(point["d"], *point_norms(point), point["angle"])


def point_vectors(point):
    """x, y (shape (d,)) realising a point's geometry."""
    return theory.pair(point["d"], *point_norms(point), point["angle"])


def output_dimension(kind, m):
    """Outputs of the feature map of ``kind`` at ``m`` projections (:attr:`Estimator.output_dimension`)."""
    from rfkernels.estimators import estimator

    return estimator(kind, m=int(m)).output_dimension


def independent_rows(ensemble):
    """Whether a registered ensemble draws every row independently (iid rows).

    The law Lemma 2 and the first-order attention theory assume: the
    entry's :attr:`rfkernels.estimators.Ensemble.independent`.
    """
    from rfkernels.estimators import registry

    return registry.entry("ensemble", ensemble).independent


def point_kernel(point):
    """``(kernel, gamma)`` of a point: its target kernel (softmax where absent) and gamma."""
    return point.get("kernel") or DEFAULT_KERNEL, point.get("gamma")
