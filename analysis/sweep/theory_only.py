"""Theory-only sweeps: the closed forms and the CSV text of a block of points at a time."""

from __future__ import annotations

import itertools

import numpy as np

from ..comparison import ESTIMATOR_COLUMNS, RESULT_COLUMNS, theory_columns
from ..points import GRID_AXES, norms_from_sum, output_dimension, point_ids
from .executors import pool_options, worker_died
from .grid import grid_arrays, grid_index, point_axes
from .rows import csv_field, float_texts, format_value, one_line
from .spec import takes_gamma

#: Points per block of a theory-only sweep (closed forms, CSV text, one ``write``).
THEORY_BLOCK = 1 << 16
#: The constant columns of a theory-only row (the others: NaN, written empty).
_THEORY_CONSTANTS = {"trials": 0, "tail_ok": "", "proposal": "", "seconds": 0.0}


def theory_table(spec, start=0, stop=None):
    """Theory columns of the grid points ``start:stop`` (all by default), vectorised.

    Returns a dict of column arrays (grid order) with the point variables,
    ``output_dimension``, ``mse_exact``, ``mse_lemma2`` and
    ``theorem2_bound`` (NaN where a statement does not apply) and ``note``,
    computed per (kind, ensemble, norms, kernel and gamma). For the Gaussian
    kernel they are those of its estimate at the pair as given
    (:func:`~rfkernels.analysis.comparison.theory_columns`). This is the fast
    path of theory-only sweeps.
    """
    from rfkernels import theory

    cols, index = grid_arrays(spec, start, stop)
    n = cols["d"].size
    for name in ("mse_exact", "mse_lemma2", "theorem2_bound"):
        cols[name] = np.full(n, np.nan)
    cols["note"] = np.full(n, "", dtype=object)
    angle = cols["angle"].astype(float)
    if "norm_sum" in spec.grid:
        nx = ny = norms_from_sum(cols["norm_sum"].astype(float), angle)
    else:
        nx, ny = cols["norm_x"].astype(float), cols["norm_y"].astype(float)
    g = spec.grid
    cols["output_dimension"] = np.zeros(n, dtype=np.int64)
    for i, kind in enumerate(g["kind"]):
        sel = index["kind"] == i
        cols["output_dimension"][sel] = output_dimension(kind, 1) * cols["m"][sel]
    for (i, kind), (j, ensemble), (k, norms), (t, kernel, gamma, at) in itertools.product(
        enumerate(g["kind"]), enumerate(g["ensemble"]), enumerate(g["norms"]), _targets(g)
    ):
        sel = (index["kind"] == i) & (index["ensemble"] == j) & (index["norms"] == k)
        sel &= index["kernel"] == t
        if at is not None:
            sel &= index["gamma"] == at
        if not sel.any():
            continue
        geom = theory.geometry_from_angle(cols["d"][sel], nx[sel], ny[sel], angle[sel])
        for name, values in theory_columns(geom, cols["m"][sel], kind, ensemble, norms,
                                           kernel=kernel, gamma=gamma).items():
            cols[name][sel] = values
    return cols


def _targets(g):
    """``(kernel position, kernel, gamma, gamma position)`` of each target kernel of a grid;
    a kernel without gamma once, with gamma None and position None."""
    out = []
    for t, kernel in enumerate(g["kernel"]):
        if takes_gamma(kernel):
            out += [(t, kernel, gamma, at) for at, gamma in enumerate(g["gamma"])]
        else:
            out.append((t, kernel, None, None))
    return out


def theory_block(spec, start, stop, skip=None):
    """CSV lines of the theory-only rows ``start:stop`` of the grid (byte for byte
    what :func:`~rfkernels.analysis.sweep.rows.row_line` writes for them), leaving
    out the rows flagged in ``skip`` (None, or a flag per point of the block).

    Returns ``(text, n_rows)``.
    """
    cols = theory_table(spec, start, stop)
    values, index = point_axes(spec, grid_index(spec, start, stop))
    ids = point_ids(values, index)
    exact = float_texts(cols["mse_exact"])
    lemma2 = float_texts(cols["mse_lemma2"], cols["mse_exact"], exact)
    bound = float_texts(cols["theorem2_bound"], cols["mse_exact"], exact)
    quoted = {text: csv_field(one_line(text)) for text in set(cols["note"].tolist())}
    notes = [quoted[t] for t in cols["note"].tolist()]
    # the line template: constant fields written in, one %s per field that varies
    fields, columns = ["%s"], [ids]
    for a in GRID_AXES:
        texts = [csv_field(format_value(v)) for v in values[a]]
        idx = index[a]
        if idx.min() == idx.max():
            fields.append(texts[int(idx[0])].replace("%", "%%"))
        else:
            fields.append("%s")
            columns.append(np.asarray(texts, dtype=object)[idx].tolist())
    for c in ESTIMATOR_COLUMNS:
        fields.append("%s")
        columns.append([str(v) for v in cols[c].tolist()])
    theory = {"mse_exact": exact, "mse_lemma2": lemma2, "theorem2_bound": bound, "note": notes}
    for c in RESULT_COLUMNS:
        if c in theory:
            fields.append("%s")
            columns.append(theory[c])
        else:
            fields.append(csv_field(format_value(_THEORY_CONSTANTS.get(c, float("nan")))))
    template = ",".join(fields) + "\n"
    rows = zip(*columns)
    if skip is not None and skip.any():
        lines = [template % r for r, s in zip(rows, skip.tolist()) if not s]
    else:
        lines = [template % r for r in rows]
    return "".join(lines), len(lines)


def theory_blocks(spec, done, workers, lock):
    """``(text, positions)`` of each block of a theory-only sweep, in grid order, made by
    ``workers`` processes: the CSV lines of the block's points not flagged in ``done``
    (None, or a flag per grid point) and their grid positions."""
    n = len(spec.points())
    starts = range(0, n, THEORY_BLOCK)

    def kept(start):
        stop = min(start + THEORY_BLOCK, n)
        skip = None if done is None else done[start:stop]
        todo = np.arange(start, stop) if skip is None else start + np.flatnonzero(~skip)
        return skip, todo

    if workers == 1 or len(starts) == 1:
        for start in starts:
            skip, todo = kept(start)
            if todo.size:
                yield theory_block(spec, start, start + THEORY_BLOCK, skip=skip)[0], todo
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=workers, **pool_options(lock)) as pool:
        # at most 2 blocks per worker in flight: memory stays a few blocks
        pending = []
        try:
            for start in starts:
                if not kept(start)[1].size:  # every point of the block is done
                    continue
                fut = pool.submit(theory_block, spec, start, start + THEORY_BLOCK)
                pending.append((start, fut))
                if len(pending) > 2 * workers:
                    start, fut = pending.pop(0)
                    yield _skip_done(fut.result()[0], *kept(start))
            for start, fut in pending:
                yield _skip_done(fut.result()[0], *kept(start))
        except BrokenProcessPool:
            raise worker_died() from None
        finally:
            for _, fut in pending:
                fut.cancel()


def _skip_done(text, skip, todo):
    """The lines of ``text`` not flagged in ``skip``, and the positions ``todo`` they hold."""
    if skip is None or not skip.any():
        return text, todo
    lines = [line + "\n" for line, s in zip(text.split("\n")[:-1], skip.tolist()) if not s]
    return "".join(lines), todo
