"""A grid as arrays: each point's position on every axis, its values and its id, by blocks."""

from __future__ import annotations

import math

import numpy as np

from ..points import GRID_AXES, axis_text, point_ids
from .spec import takes_gamma


def axis_values(spec):
    """Every axis of :data:`GRID_AXES` -> the values it takes (``[None]`` if unused)."""
    return {a: list(spec.grid.get(a, [None])) for a in GRID_AXES}


def _no_gamma(spec):
    """Positions on the kernel axis of the kernels without gamma, where the grid has gamma."""
    if "gamma" not in spec.grid:
        return []
    return [i for i, k in enumerate(spec.grid["kernel"]) if not takes_gamma(k)]


def point_axes(spec, index):
    """``(values, index)`` of points for :func:`~rfkernels.analysis.points.point_ids`:
    :func:`axis_values` and the grid positions ``index`` (:func:`grid_index`),
    but with gamma None at the points of a kernel without it (as their dicts
    have it, :meth:`~rfkernels.analysis.sweep.spec.GridPoints`)."""
    values = axis_values(spec)
    bare = _no_gamma(spec)
    if not bare:
        return values, index
    values["gamma"] = values["gamma"] + [None]
    index = dict(index)
    index["gamma"] = np.where(np.isin(index["kernel"], bare), len(values["gamma"]) - 1,
                              index["gamma"])
    return values, index


def grid_index(spec, start=0, stop=None):
    """Positions on every axis (``GRID_AXES``) of grid points ``start:stop`` (int64 arrays)."""
    values = axis_values(spec)
    sizes = [len(values[a]) for a in GRID_AXES]
    n = math.prod(sizes)
    stop = n if stop is None else min(stop, n)
    flat = np.arange(start, stop, dtype=np.int64)
    return dict(zip(GRID_AXES, np.unravel_index(flat, sizes))) if flat.size else {
        a: flat for a in GRID_AXES}


def grid_arrays(spec, start=0, stop=None):
    """The grid as column arrays in :meth:`SweepSpec.points` order (no per-point Python).

    Returns ``(cols, index)``: ``cols[axis]`` holds each point's value and
    ``index[axis]`` its position along that axis. ``start`` and ``stop``
    select the points ``start:stop`` of the grid (all by default).
    """
    index_all = grid_index(spec, start, stop)
    n = index_all["kind"].size
    cols, index = {}, {}
    for a in GRID_AXES:
        if a not in spec.grid:
            cols[a] = np.full(n, None, dtype=object)
            continue
        values = spec.grid[a]
        dtype = object if isinstance(values[0], str) else type(values[0])
        index[a] = index_all[a]
        cols[a] = np.asarray(values, dtype=dtype)[index[a]]
    bare = _no_gamma(spec)
    if bare:  # the points of a kernel without gamma: None there
        cols["gamma"] = cols["gamma"].astype(object)
        cols["gamma"][np.isin(index["kernel"], bare)] = None
    return cols, index


def grid_ids(spec, start=0, stop=None):
    """``point_id`` of the grid points ``start:stop``, vectorised."""
    return point_ids(*point_axes(spec, grid_index(spec, start, stop)))


class GridLocator:
    """The grid position of a point given by its values, without a table of the grid's points.

    A value stands for an axis value of the grid when their canonical JSON
    texts (what :func:`~rfkernels.analysis.points.point_id` hashes) agree,
    so a row is located exactly when its ``point_id`` is a point of the grid.
    """

    def __init__(self, spec):
        values = axis_values(spec)
        self.sizes = tuple(len(values[a]) for a in GRID_AXES)
        self.n = math.prod(self.sizes)
        self._where = {a: {axis_text(a, v): i for i, v in enumerate(values[a])}
                       for a in GRID_AXES}
        if _no_gamma(spec):  # the points of a kernel without gamma: gamma None, at the one gamma
            self._where["gamma"][axis_text("gamma", None)] = 0

    def positions(self, values, index):
        """Grid positions of points (``-1`` where one is not a point of the grid).

        ``values[axis]`` lists distinct values of an axis and ``index[axis]``
        each point's entry in that list (integer arrays of one length), as
        :func:`~rfkernels.analysis.points.point_ids` takes them.
        """
        multi, outside = [], None
        for a in GRID_AXES:
            where = self._where[a]
            local = np.array([where.get(axis_text(a, v), -1) for v in values[a]],
                             dtype=np.int64)
            at = local[np.asarray(index[a], dtype=np.int64)]
            outside = at < 0 if outside is None else outside | (at < 0)
            multi.append(np.maximum(at, 0))
        if not multi[0].size:
            return np.zeros(0, dtype=np.int64)
        pos = np.ravel_multi_index(multi, self.sizes).astype(np.int64)
        pos[outside] = -1
        return pos


def points_to_do(spec, done=None, block=1 << 16):
    """``(position, point)`` of each grid point not flagged in ``done``, in grid order.

    ``done`` is None or one flag per grid point (a boolean array); points
    are made as they are taken, never held all at once.
    """
    points = spec.points()
    if done is None:
        yield from enumerate(points)
        return
    for start in range(0, len(points), block):
        for i in (start + np.flatnonzero(~done[start : start + block])).tolist():
            yield i, points[i]
