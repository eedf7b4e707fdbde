"""Checks before a sweep does any work: every geometry and backend usable, every point fits."""

from __future__ import annotations

import math

import numpy as np

from rfkernels.validation import check_memory

from ..points import independent_rows, norms_from_sum
from .spec import SweepError


def check_geometries(spec, block=1 << 16):
    """Every grid geometry and backend is usable, before anything is written.

    Checks the product of the geometry axes (d, angle and the norms), not
    every point of the grid, ``block`` geometries at a time (the product
    can be as large as the grid).
    """
    from rfkernels import theory
    from rfkernels.backends import check_backend

    for backend in spec.grid["backend"]:
        check_backend(backend)
    g = spec.grid
    norm_axes = ["norm_sum"] if "norm_sum" in g else ["norm_x", "norm_y"]
    axes = [np.asarray(g["d"], dtype=np.int64)]
    axes += [np.asarray(g[a], dtype=float) for a in ["angle"] + norm_axes]
    sizes = [a.size for a in axes]
    total = math.prod(sizes)
    for start in range(0, total, block):
        flat = np.arange(start, min(start + block, total), dtype=np.int64)
        d, angle, *norms = (a[i] for a, i in zip(axes, np.unravel_index(flat, sizes)))
        try:
            if "norm_sum" in g:
                nx = ny = norms_from_sum(norms[0], angle)
            else:
                nx, ny = norms
            theory.geometry_from_angle(d, nx, ny, angle)
        except ValueError as exc:
            raise SweepError(f"grid: {exc}") from None


def point_memory(d, m, method="reduced", ensemble="iid"):
    """Estimated peak bytes of one Monte Carlo point, for the check before a sweep.

    32 MiB for the sampler's chunk arrays (NumPy: about 16 MiB), 32 d bytes
    for x, y and their copies, and 128 m bytes for the reduced sampler's
    per-trial arrays (NumPy: 16 arrays of m values; Numba: 2); the literal
    method instead holds a trial's projections with QR's copies, 48 d m
    bytes, or 48 d max(m, d) for the orthogonal ensembles (whole d x d
    blocks). ``tests/test_sweep.py`` checks it bounds the traced peak.
    """
    d, m = int(d), int(m)
    if method == "literal":
        rows = m if independent_rows(ensemble) else max(m, d)
        return (32 << 20) + 32 * d + 48 * d * rows
    return (32 << 20) + 32 * d + 128 * m


def check_point_memory(spec, workers, remote):
    """The largest Monte Carlo point fits this machine (once per local worker), before any work.

    Theory-only sweeps work in blocks of
    :data:`~rfkernels.analysis.sweep.theory_only.THEORY_BLOCK` points (tens of
    MiB whatever d and m); Dask workers are other machines.
    """
    if spec.run["theory_only"] or remote:
        return
    d, m = max(spec.grid["d"]), max(spec.grid["m"])
    parallel = min(workers, len(spec.points()))
    what = f"the grid point d = {d}, m = {m} (Monte Carlo, method {spec.run['method']})"
    if parallel > 1:
        what += f" on {parallel} workers at once"
    per_point = max(point_memory(d, m, spec.run["method"], e) for e in spec.grid["ensemble"])
    check_memory(per_point * parallel, what,
                 reduce="grid.d or grid.m (--d, --m)"
                        + (", or workers (--workers)" if parallel > 1 else ""))
