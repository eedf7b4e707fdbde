"""Reading a results table: every row checked, block by block, with the line named when wrong."""

from __future__ import annotations

import csv
import math

import numpy as np

from ..points import GRID_AXES, output_dimension, point_ids
from .grid import GridLocator
from .rows import COLUMNS, HEADER, LEGACY_COLUMNS, LEGACY_HEADER, upgrade_fields
from .spec import CHOICE_AXES, SweepError, axis_choices, takes_gamma

#: Text columns with a fixed set of values ('' where Monte Carlo did not run).
_WORDS = {"proposal": ("", "plain", "tilted")}
#: Float columns that may be empty (not applicable, or beyond float64 with a note).
_OPTIONAL_FLOATS = ("norm_x", "norm_y", "norm_sum", "gamma", "mse_mc", "stderr", "ci_low",
                    "ci_high", "bias", "bias_stderr", "mse_exact", "mse_lemma2", "theorem2_bound",
                    "z", "k_hat", "max_share", "ess")
_HEX = frozenset("0123456789abcdef")
#: The header line of a table -> its line end (LF as written, or CRLF as some tools rewrite it).
_HEADERS = {HEADER: "\n", HEADER[:-1] + "\r\n": "\r\n"}
#: The same for a table written before the target-kernel axes (:data:`LEGACY_COLUMNS`).
_LEGACY_HEADERS = {LEGACY_HEADER: "\n", LEGACY_HEADER[:-1] + "\r\n": "\r\n"}


def _first(flags):
    """Index of the first True of a sequence of flags (None if there is none)."""
    return next((i for i, f in enumerate(flags) if f), None)


def _check_column(column, texts):
    """The typed values of one column of a block of rows, or ``(None, (i, problem))``
    for its first bad field ``i``."""
    if column in CHOICE_AXES:
        allowed = axis_choices(column)
        if set(texts) <= set(allowed):
            return list(texts), None
        i = _first(t not in allowed for t in texts)
        return None, (i, f"{column} = {texts[i]!r} is not one of {', '.join(allowed)}")
    if column in ("d", "m", "trials", "output_dimension"):
        lowest = 0 if column == "trials" else 1
        bad = [not (t.isascii() and t.isdigit() and len(t) <= 19) or int(t) < lowest for t in texts]
        i = _first(bad)
        if i is None:
            return list(map(int, texts)), None
        return None, (i, f"{column} = {texts[i]!r} is not an integer >= {lowest}")
    if column == "tail_ok":
        words = {"true": True, "false": False, "": None}
        i = _first(t not in words for t in texts)
        if i is None:
            return [words[t] for t in texts], None
        return None, (i, f"tail_ok = {texts[i]!r} is not true, false or empty")
    if column in _WORDS:  # typed: the word, None where empty
        allowed = _WORDS[column]
        i = _first(t not in allowed for t in texts)
        if i is None:
            return [t or None for t in texts], None
        return None, (i, f"{column} = {texts[i]!r} is not one of "
                         f"{', '.join(repr(w) for w in allowed)}")
    if column == "note":
        return list(texts), None
    if column == "point_id":
        i = _first(len(t) != 16 or not _HEX.issuperset(t) for t in texts)
        if i is None:
            return list(texts), None
        return None, (i, f"point_id = {texts[i]!r} is not 16 hexadecimal digits")
    # floats: empty only where the column may be empty; finite; seconds >= 0
    optional = column in _OPTIONAL_FLOATS
    where = [i for i, t in enumerate(texts) if t or not optional]
    try:
        numbers = np.array([texts[i] for i in where], dtype=np.float64)
    except ValueError:
        numbers = None
    if numbers is None:  # find the first field float() refuses
        for i in where:
            try:
                float(texts[i])
            except ValueError:
                return None, (i, f"{column} = {texts[i]!r} is not a number")
    bad = ~np.isfinite(numbers)
    if column in ("seconds", "gamma"):
        bad |= numbers < 0 if column == "seconds" else numbers <= 0
    if bad.any():
        i = where[int(np.argmax(bad))]
        what = "is not finite"
        if np.isfinite(numbers[np.argmax(bad)]):
            what = "is negative" if column == "seconds" else "is not > 0"
        return None, (i, f"{column} = {texts[i]!r} {what}")
    values = [None] * len(texts)
    for i, v in zip(where, numbers.tolist()):
        values[i] = v
    return values, None


class ResultsTable:
    """A results CSV, checked block by block (see :func:`read_results`).

    ``keep``: "raw" (dicts of strings), "typed" (dicts of values) or None
    (nothing per row: what a resume needs, below).

    A table written before the target-kernel axes (:data:`LEGACY_COLUMNS`:
    no kernel, gamma or output_dimension) is read as well, its rows as
    :data:`COLUMNS` has them (:func:`upgrade_fields`: softmax rows);
    ``legacy`` says so.

    With ``spec`` every row must be a point of its grid, and the table
    records which points it holds as one flag per grid point (``done``),
    never as a Python object per row. It also records where its rows run in
    increasing grid order (``run_starts``: the byte offset of each row that
    comes before the row above it in the grid) and the position of its last
    row (``last``), so a resume knows whether the finished table is in grid
    order. Without ``spec`` the ids are a set (``ids``), beside the rows.
    """

    BLOCK = 1 << 16  # rows checked together

    def __init__(self, path, spec=None, keep="raw"):
        self.path, self.keep = path, keep
        self.rows, self.ids, self.seconds = [], set(), 0.0
        self.good_bytes, self.torn, self.tail = 0, False, b""
        self.locator = GridLocator(spec) if spec is not None else None
        self.done = np.zeros(self.locator.n, dtype=bool) if spec is not None else None
        self.count, self.last, self._starts, self._breaks = 0, -1, [], []
        with open(path, "rb") as fh:
            lines = self._lines(fh)
            header = next(lines, None)
            if header is None:
                self._no_header()
            #: Whether the table has the columns of a table written before the kernel axes.
            self.legacy = header in _LEGACY_HEADERS
            if header not in _HEADERS and not self.legacy:
                raise SweepError(f"{path} does not have the columns of a results table; "
                                 "refusing to touch it")
            #: The file's line end (its header's): rows appended to it end the same way.
            self.newline = (_LEGACY_HEADERS if self.legacy else _HEADERS)[header]
            self.header_bytes = self.good_bytes
            self._starts.clear()
            self._read_rows(csv.reader(lines))
        self.run_starts = (np.concatenate(self._breaks) if self._breaks
                           else np.zeros(0, dtype=np.int64))

    def _read_rows(self, reader):
        block, first = [], 2
        while True:
            try:
                fields = next(reader)
            except StopIteration:
                break
            except csv.Error as exc:
                self._fail(reader.line_num + 1, f"is not CSV ({exc})")
            if reader.line_num != first + len(block) - 1:  # ran over the end of its line
                self._fail(first + len(block), "is not one CSV record (an unclosed quote)")
            block.append(fields)
            if len(block) == self.BLOCK:
                self._check_block(block, first)
                first += len(block)
                block = []
        self._check_block(block, first)

    @property
    def in_order(self):
        """Whether the rows are in grid order (with ``spec``)."""
        return self.run_starts.size == 0

    def _no_header(self):
        """Raise the error for a file without a complete first line."""
        if not self.torn:
            raise SweepError(f"{self.path} is empty: not a results file")
        if any(h.encode().startswith(self.tail) for h in _HEADERS):
            have = len(self.tail.rstrip(b"\r"))
            raise SweepError(f"{self.path}: the file ends inside its header (line 1 has "
                             f"{have} of the {len(HEADER) - 1} characters of the columns, and "
                             "no line end): it is truncated and was left as it is")
        raise SweepError(f"{self.path} does not have the columns of a results table; "
                         "refusing to touch it")

    def _lines(self, fh):
        """Complete lines as text (a torn last line is left out); counts their bytes and
        notes where each starts.

        A line ends with LF or CRLF (a cut between CR and LF is a torn line).
        """
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):  # only the last line can end without one
                self.torn, self.tail = True, raw
                return
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                self._fail(lineno, "is not UTF-8 text")
            self._starts.append(self.good_bytes)
            self.good_bytes += len(raw)
            yield text

    def _check_block(self, block, first):
        """Types and finiteness, identity and uniqueness of rows ``first...`` (line numbers)."""
        starts, self._starts = self._starts[: len(block)], self._starts[len(block) :]
        if not block:
            return
        problems = []
        expected = len(LEGACY_COLUMNS if self.legacy else COLUMNS)
        k = _first(len(f) != expected for f in block)
        if k is not None:
            problems.append((k, f"has {len(block[k])} fields, expected {expected}"))
            block = block[:k]
        if self.legacy:
            block = [upgrade_fields(f) for f in block]
        texts = list(zip(*block)) if block else [()] * len(COLUMNS)
        typed = {}
        for column, col in zip(COLUMNS, texts):
            typed[column], bad = _check_column(column, col)
            if bad is not None:
                problems.append((bad[0], f"has {bad[1]}"))
        if not problems:
            problems += _kernel_problems(typed)
        if problems:
            i, what = min(problems, key=lambda p: p[0])  # the first line wrong
            self._fail(first + i, what)
        # identity: each point_id is the point its values say (and, with a grid, a point of it)
        values, index = axis_columns(texts[1 : 1 + len(GRID_AXES)])
        want = point_ids(values, index)
        i = _first(w != got for w, got in zip(want, typed["point_id"]))
        if i is not None:
            self._fail(first + i, f"has point_id {typed['point_id'][i]}, which is not the point "
                       f"its values say ({want[i]})")
        ids = typed["point_id"]
        if self.locator is not None:
            self._locate(self.locator.positions(values, index), ids, starts, first)
        else:
            for i, pid in enumerate(ids):
                if pid in self.ids:
                    self._repeats(first + i, pid)
                self.ids.add(pid)
        self.count += len(ids)
        self.seconds += math.fsum(typed["seconds"])
        if self.keep == "raw":
            self.rows.extend(dict(zip(COLUMNS, f)) for f in block)
        elif self.keep == "typed":
            self.rows.extend(dict(zip(COLUMNS, v)) for v in zip(*(typed[c] for c in COLUMNS)))

    def _locate(self, pos, ids, starts, first):
        """Mark the rows' grid positions ``pos`` done; note where grid order breaks."""
        outside = np.flatnonzero(pos < 0)
        if outside.size:
            raise SweepError(f"{self.path}: line {first + int(outside[0])} is not a point of "
                             "this grid; refusing to touch it")
        repeat = self.done[pos].copy()  # done by an earlier block
        _, once = np.unique(pos, return_index=True)
        later = np.ones(pos.size, dtype=bool)
        later[once] = False  # a second row of a point within this block
        repeat |= later
        if repeat.any():
            i = int(np.argmax(repeat))
            self._repeats(first + i, ids[i])
        self.done[pos] = True
        before = np.concatenate(([self.last], pos[:-1]))
        breaks = np.flatnonzero(pos < before)
        if breaks.size:
            self._breaks.append(np.asarray(starts, dtype=np.int64)[breaks])
        self.last = int(pos[-1])

    def _repeats(self, lineno, pid):
        raise SweepError(f"{self.path}: line {lineno} repeats point {pid}; refusing to touch it")

    def _fail(self, lineno, what):
        raise SweepError(f"{self.path}: line {lineno} {what}; the file is corrupt and was left "
                         "as it is")


def _kernel_problems(typed):
    """``[(i, problem)]`` of the first row of a block (its columns typed) whose gamma does not go
    with its kernel, or whose output_dimension is not its kind's at its m (``[]`` if none)."""
    takes = {k: takes_gamma(k) for k in set(typed["kernel"])}
    i = _first(takes[k] != (g is not None) for k, g in zip(typed["kernel"], typed["gamma"]))
    out = []
    if i is not None:
        k, g = typed["kernel"][i], typed["gamma"][i]
        out.append((i, f"has no gamma with kernel = {k!r} (that kernel needs gamma > 0)" if takes[k]
                    else f"has gamma = {g!r} with kernel = {k!r} (a kernel without gamma: empty)"))
    dims = {}
    for j, (kind, m, od) in enumerate(zip(typed["kind"], typed["m"], typed["output_dimension"])):
        want = dims.setdefault((kind, m), output_dimension(kind, m))
        if od != want:
            out.append((j, f"has output_dimension = {od} where kind {kind!r} at m = {m} has "
                           f"{want}"))
            break
    return out


def axis_columns(texts):
    """The grid axes of a block of rows as ``(values, index)`` for
    :func:`~rfkernels.analysis.points.point_ids`: per axis, its distinct typed
    values and each row's entry among them.

    ``texts`` holds the text column of each axis of :data:`GRID_AXES`, in
    that order (fields already checked).
    """
    values, index = {}, {}
    for a, col in zip(GRID_AXES, texts):
        seen = {}
        index[a] = np.fromiter((seen.setdefault(t, len(seen)) for t in col), dtype=np.int64,
                               count=len(col))
        values[a] = [_check_column(a, [t])[0][0] for t in seen]  # dicts keep insertion order
    return values, index


def upgrade_table(path, newline="\n"):
    """Rewrite a table of :data:`LEGACY_COLUMNS` (complete lines only) with :data:`COLUMNS`.

    Every row gets ``kernel`` softmax, ``gamma`` empty and its
    ``output_dimension`` (:func:`upgrade_fields`), every other field as it
    was; lines end in ``newline``. The file is replaced atomically: the
    table is what a sweep of this version would have written.
    """
    from rfkernels.storage import atomic_write

    def write(fh):
        writer = csv.writer(fh, lineterminator=newline)
        with open(path, newline="", encoding="utf-8") as inp:
            reader = csv.reader(inp)
            next(reader)  # the legacy header
            fh.write(HEADER[:-1] + newline)
            for fields in reader:
                writer.writerow(upgrade_fields(fields))

    atomic_write(path, write)


def read_results(path, spec=None):
    """Parse a results CSV; returns ``(rows, torn)`` (rows as dicts of strings).

    ``torn`` is True when the last line is incomplete (a killed sweep); that
    line is not returned. Every other line is checked: its field count, the
    type of every field (integers, finite floats, empty only where a column
    may be empty, known kinds, ensembles, norms, backends and proposals), that its
    ``point_id`` is the point its values say (with ``spec``: a point of that
    grid, with exactly the grid's values), and that no point repeats. Raises
    :class:`SweepError` naming the line otherwise.
    """
    table = ResultsTable(path, spec)
    return table.rows, table.torn


def load_table(path):
    """A results CSV as a list of dicts with typed values (floats, ints, bools, text, None).

    An empty field is None (``note`` stays text: ``""``).

    Every row is checked as :func:`read_results` does; a corrupt table raises
    :class:`SweepError` naming the line.
    """
    return ResultsTable(path, keep="typed").rows
