"""Putting a finished table in grid order: a merge of its sorted runs, read as streams.

A sweep writes its rows in grid order, so a table is out of order only
where a resume appended the points an earlier run left out: it is a few
*runs*, each in increasing grid order. Merging them reads each run as a
stream and holds a buffer per run, whatever the number of rows. A table
of more than :data:`FAN_IN` runs (written by an older version, in the
order points finished) is first cut into blocks of :data:`SORT_BLOCK`
rows, each sorted into a run, and the runs merged :data:`FAN_IN` at a
time, in passes through temporary files beside it.
"""

from __future__ import annotations

import csv
import heapq
import itertools
import os
import tempfile

import numpy as np

from rfkernels.storage import atomic_write

from ..points import GRID_AXES
from .grid import GridLocator
from .table import axis_columns

#: Runs merged at once.
FAN_IN = 64
#: Bytes read (and written) at a time, in all the runs of one merge together.
BUFFER = 1 << 24
#: Rows sorted at once into a run, where a table has more than :data:`FAN_IN` runs.
SORT_BLOCK = 1 << 16


def rewrite_in_grid_order(path, spec, header_bytes, run_starts):
    """Rewrite the complete table ``path`` with its rows in grid order (atomic replace).

    ``header_bytes`` is the length of its header line and ``run_starts`` the
    byte offsets of the rows that come before the row above them in the grid
    (:attr:`~rfkernels.analysis.sweep.table.ResultsTable.run_starts`). Line
    ends are kept as they are.
    """
    locator = GridLocator(spec)
    size = os.path.getsize(path)
    starts = np.concatenate(([header_bytes], np.asarray(run_starts, dtype=np.int64)))
    runs = np.stack([starts, np.append(starts[1:], size)], axis=1)
    with open(path, "rb") as fh:
        header = fh.read(header_bytes)
    src, temps = path, []
    try:
        if len(runs) > FAN_IN:  # many short runs: sort blocks of rows into long ones first
            src = _temporary(path, temps)
            with open(path, "rb") as inp, open(src, "wb") as out:
                inp.seek(header_bytes)
                runs = _sorted_blocks(inp, out, locator)
        while len(runs) > FAN_IN:  # merge groups of runs into fewer, longer runs
            tmp = _temporary(path, temps)
            merged = []
            with open(src, "rb") as inp, open(tmp, "wb") as out:
                for g in range(0, len(runs), FAN_IN):
                    begin = out.tell()
                    _merge(inp, runs[g : g + FAN_IN], out.write, locator)
                    merged.append((begin, out.tell()))
            os.unlink(src)
            src, runs = tmp, np.asarray(merged, dtype=np.int64)

        def write(fh):
            fh.flush()  # all bytes go to the binary layer below
            fh.buffer.write(header)
            with open(src, "rb") as inp:
                _merge(inp, runs, fh.buffer.write, locator)
            fh.buffer.flush()

        atomic_write(path, write)
    finally:
        for tmp in temps:
            if os.path.exists(tmp):
                os.unlink(tmp)


def _temporary(path, temps):
    """A new temporary file beside ``path`` (its name added to ``temps``, for the cleanup)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".merge",
                               dir=os.path.dirname(os.path.abspath(path)))
    os.close(fd)
    temps.append(tmp)
    return tmp


def _sorted_blocks(inp, out, locator):
    """Copy the lines of ``inp`` (from where it stands) to ``out``, each block of
    :data:`SORT_BLOCK` lines sorted; returns the byte ranges of the blocks in ``out``."""
    bounds = []
    while True:
        lines = list(itertools.islice(inp, SORT_BLOCK))
        if not lines:
            return np.asarray(bounds, dtype=np.int64).reshape(-1, 2)
        if not lines[-1].endswith(b"\n"):
            raise OSError("the results file does not end with a line end")
        order = np.argsort(_positions(lines, locator), kind="stable")
        begin = out.tell()
        out.write(b"".join([lines[i] for i in order.tolist()]))
        bounds.append((begin, out.tell()))


def _merge(inp, runs, write, locator):
    """Write the lines of the sorted byte ranges ``runs`` of ``inp`` as one sorted stream."""
    chunk = max(1 << 16, BUFFER // (2 * len(runs)))
    streams = [_run_lines(inp.fileno(), int(a), int(b), chunk, locator) for a, b in runs]
    out, size = [], 0
    for _, line in heapq.merge(*streams):  # positions are distinct: lines never compared
        out.append(line)
        size += len(line)
        if size >= chunk:
            write(b"".join(out))
            out, size = [], 0
    if out:
        write(b"".join(out))


def _run_lines(fd, begin, end, chunk, locator):
    """``(grid position, line)`` of each line in bytes ``begin:end`` of ``fd``, read in chunks."""
    rest = b""
    while begin < end:
        data = os.pread(fd, min(chunk, end - begin), begin)
        if not data:
            raise OSError(f"the results file ended at byte {begin}, before {end}")
        begin += len(data)
        data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut == 0:
            rest = data
            continue
        lines = [line + b"\n" for line in data[:cut].split(b"\n")[:-1]]
        rest = data[cut:]
        yield from zip(_positions(lines, locator).tolist(), lines)
    if rest:
        raise OSError("the results file does not end with a line end")


def _positions(lines, locator):
    """Grid positions of table lines (checked rows: their axis values are grid values)."""
    fields = list(csv.reader(line.decode("utf-8") for line in lines))
    values, index = axis_columns(list(zip(*fields))[1 : 1 + len(GRID_AXES)])
    return locator.positions(values, index)
