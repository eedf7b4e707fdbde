"""Resumable sweeps over grids of m, d, angles, norms, estimators and ensembles.

A sweep is a grid (the Cartesian product of its axes, in declared order)
evaluated point by point by :func:`rfkernels.analysis.comparison.evaluate_point`,
in-process, on a local process pool or on a Dask cluster, into a tidy CSV
table (one row per grid point) with a JSON sidecar. Theory-only sweeps take
a vectorised path: the closed forms and the CSV text of a block of 65,536
points at a time.

Determinism
    Each point's random stream is ``SeedSequence(root_seed,
    spawn_key=H(point))`` where ``H`` hashes the point's own variables, not
    its position in the execution order: the table is the same whatever the
    order, the number of workers or the scheduler. Every column but
    ``seconds`` is reproducible bit for bit (floats are written with
    ``repr``, which round-trips).

Proposal
    ``run.proposal`` (``"auto"`` by default, ``"plain"`` or ``"tilted"``)
    is the Monte Carlo proposal of every point
    (:func:`rfkernels.analysis.monte_carlo.monte_carlo_mse`); trig points
    run plain whatever it says. The row's ``proposal`` column says which
    law ran (empty without Monte Carlo) and ``ess`` the effective sample
    size of its weights (``trials`` where plain). Like every ``[run]`` key
    it is part of the sweep's fingerprint: a resume with another proposal
    is refused.

One writer per folder
    A sweep holds an exclusive ``flock`` on ``OUT/.sweep.lock`` (which
    records its pid) from before it reads anything in the folder until it
    ends. A second sweep on the same folder fails at once with "another
    sweep (pid N) is writing OUT". The operating system drops the lock when
    the process ends, however it ends, so ``kill -9`` leaves no stale lock.

Resuming
    Rows are appended as complete lines, one ``write`` per row (per block of
    rows in theory-only sweeps), and ``fsync``-ed at most once per second
    and when the sweep ends or fails. A killed process (even ``kill -9``)
    loses no written row and leaves at most a torn last line, which
    ``--resume`` drops before skipping the finished points; an operating
    system crash can lose the rows written since the last ``fsync``. A write
    that fails (a full disk) is cut back to the last complete line. When
    every point is done the table is in grid order: rewritten (temporary
    file, then an atomic ``os.replace``) unless its rows were appended in
    that order, so a resumed sweep yields the same file as an uninterrupted
    one. Every resumed row is checked (types, finiteness, and that its
    ``point_id`` is the point of this grid its values say); a results file
    that belongs to another grid, or that is corrupt, is reported with the
    line number and never touched.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from rfkernels import reduced, theory
from rfkernels.backends import BACKENDS
from rfkernels.storage import atomic_write, git_revision, package_versions
from rfkernels.estimators import estimator, registry
from rfkernels.validation import check_memory

from .comparison import RESULT_COLUMNS, evaluate_point, theory_columns
from .points import (
    GRID_AXES,
    check_norm_axes,
    norms_from_sum,
    point_id,
    point_ids,
    point_seed,
)

#: Keys of the ``[run]`` table and their defaults.
RUN_DEFAULTS = {
    "trials": 100_000,
    "seed": 0,
    "backend": "numpy",
    "method": "reduced",
    "chunk": None,
    "theory_only": False,
    "proposal": "auto",
}
_AXIS_DEFAULTS = {"kind": ["positive"], "ensemble": ["iid"], "norms": ["chi"]}
_REQUIRED = ("d", "m", "angle")
#: Columns of the results table.
COLUMNS = ("point_id",) + GRID_AXES + RESULT_COLUMNS
RESULTS_NAME = "results.csv"
SIDECAR_NAME = "sweep.json"
#: The lock file: held (``flock``) by the one sweep writing the folder; holds its pid.
LOCK_NAME = ".sweep.lock"
FORMAT = "rfkernels-sweep/1"
#: Points per block of a theory-only sweep (closed forms, CSV text, one ``write``).
THEORY_BLOCK = 1 << 16
#: Seconds between ``fsync`` calls on the results file (and one at the end).
SYNC_INTERVAL = 1.0
#: Seconds to wait for a Dask scheduler to answer.
DASK_CONNECT_TIMEOUT = 5.0


class SweepError(ValueError):
    """A sweep cannot start: bad grid, or results that must not be touched."""


@dataclass(frozen=True)
class SweepSpec:
    """A validated grid and run configuration.

    Use :meth:`from_dict` or :meth:`from_toml`; both check every key before
    any work and name the offending key in their errors.
    """

    grid: dict
    run: dict = field(default_factory=dict)

    # -- construction -------------------------------------------------------

    @classmethod
    def from_toml(cls, path, overrides=None):
        """Read ``[grid]`` and ``[run]`` tables from a TOML file (then apply ``overrides``)."""
        try:
            import tomllib
        except ModuleNotFoundError:  # Python < 3.11
            import tomli as tomllib
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except OSError as exc:
            raise SweepError(f"cannot read grid file {path}: {exc.strerror or exc}") from None
        except UnicodeDecodeError as exc:  # tomllib decodes the whole file first
            raise SweepError(f"grid file {path} is not valid TOML: it is not UTF-8 text "
                             f"(byte {exc.start} is {exc.object[exc.start:exc.start + 1]!r})") from None
        except tomllib.TOMLDecodeError as exc:
            raise SweepError(f"grid file {path} is not valid TOML: {exc}") from None
        unknown = set(data) - {"grid", "run"}
        if unknown:
            raise SweepError(f"{path}: unknown table(s) {sorted(unknown)}; expected [grid] and [run]")
        grid, run = dict(data.get("grid", {})), dict(data.get("run", {}))
        if overrides:
            grid.update(overrides.get("grid", {}))
            run.update(overrides.get("run", {}))
        return cls.from_dict(grid, run)

    @classmethod
    def from_dict(cls, grid, run=None):
        run = dict(run or {})
        grid = dict(grid)
        unknown = set(grid) - set(GRID_AXES)
        if unknown:
            key = min(unknown)
            raise SweepError(f"grid.{key}: unknown key; valid keys are {', '.join(GRID_AXES)}")
        unknown = set(run) - set(RUN_DEFAULTS)
        if unknown:
            key = min(unknown)
            raise SweepError(f"run.{key}: unknown key; valid keys are {', '.join(RUN_DEFAULTS)}")
        out = {}
        for axis in GRID_AXES:
            if axis not in grid:
                continue
            values = grid[axis]
            if not isinstance(values, (list, tuple)):
                values = [values]
            if len(values) == 0:
                raise SweepError(f"grid.{axis}: empty axis")
            out[axis] = [_check_axis_value(axis, v) for v in values]
            if len(set(map(repr, out[axis]))) != len(out[axis]):
                raise SweepError(f"grid.{axis}: repeated values {out[axis]}")
        for axis in _REQUIRED:
            if axis not in out:
                raise SweepError(f"grid.{axis}: missing (required axes: {', '.join(_REQUIRED)})")
        try:
            check_norm_axes(out, "grid.norm_sum")
        except ValueError as exc:
            raise SweepError(str(exc)) from None
        if "norm_sum" not in out:
            out.setdefault("norm_x", [1.0])
            out.setdefault("norm_y", [1.0])
        for axis, default in _AXIS_DEFAULTS.items():
            out.setdefault(axis, list(default))
        full_run = dict(RUN_DEFAULTS)
        full_run.update(run)
        full_run = _check_run(full_run)
        if "backend" not in out:
            out["backend"] = [full_run["backend"]]
        spec = cls(out, full_run)
        spec._check_combinations()
        return spec

    def _check_combinations(self):
        g = self.grid
        if 1 in g["d"] and any(a not in (0.0, math.pi) for a in g["angle"]):
            raise SweepError("grid.angle: with d = 1 the angle must be 0 or pi")
        if "norm_sum" in g and math.pi in g["angle"]:
            raise SweepError("grid.angle: pi is not allowed with norm_sum (|x + y| = 0 there)")
        # 'tilted' where nothing can be tilted is a mistake; in a grid that mixes kinds the
        # trig points run plain (evaluate_point), and their rows say so
        if self.run["proposal"] == "tilted" and not self.run["theory_only"]:
            if self.run["method"] != "reduced":
                raise SweepError("run.proposal: 'tilted' needs run.method = 'reduced' (the literal "
                                 "method samples the plain law only)")
            if not any(estimator(k).tilted for k in g["kind"]):
                raise SweepError("run.proposal: 'tilted' cannot apply to trig features (bounded "
                                 "estimates, no heavy tail); use 'auto' or 'plain'")
        if self.run["theory_only"]:
            for ensemble in g["ensemble"]:
                if ensemble not in theory.THEORY_ENSEMBLES:
                    raise SweepError(
                        f"grid.ensemble: {ensemble!r} has no closed form; a theory-only sweep "
                        f"accepts {', '.join(map(repr, theory.THEORY_ENSEMBLES))}"
                    )
        elif self.run["method"] == "reduced":
            for kind, ensemble in itertools.product(g["kind"], g["ensemble"]):
                try:
                    reduced.check_reduced(kind, ensemble)
                except ValueError as exc:
                    raise SweepError(f"grid: {exc} (set run.method = 'literal')") from None

    # -- points -------------------------------------------------------------

    def points(self):
        """The grid points, in declared order (the last axis varies fastest).

        A read-only sequence of dicts made on demand: ``len`` costs nothing
        and a million-point grid is never held as a million dicts.
        """
        return GridPoints(self.grid)

    def fingerprint(self):
        """Hash of everything that determines the table's numbers."""
        relevant = {k: v for k, v in self.run.items()}
        canon = json.dumps({"grid": self.grid, "run": relevant}, sort_keys=True)
        return hashlib.sha256(canon.encode()).hexdigest()[:20]

    def to_dict(self):
        return {"grid": self.grid, "run": self.run}


class GridPoints(Sequence):
    """The points of a grid in declared order, made one at a time (see :meth:`SweepSpec.points`)."""

    def __init__(self, grid):
        self._axes = [a for a in GRID_AXES if a in grid]
        self._values = [list(grid[a]) for a in self._axes]
        self._len = math.prod(len(v) for v in self._values)

    def __len__(self):
        return self._len

    def _point(self, combo):
        p = dict.fromkeys(GRID_AXES)
        p.update(zip(self._axes, combo))
        return p

    def __iter__(self):
        return (self._point(c) for c in itertools.product(*self._values))

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(self._len))]
        i = int(i)
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"grid point {i} out of range (the grid has {self._len})")
        combo = []
        for values in reversed(self._values):
            i, k = divmod(i, len(values))
            combo.append(values[k])
        return self._point(reversed(combo))


def _check_axis_value(axis, v):
    if axis in ("kind", "ensemble", "norms", "backend"):
        choices = _choices(axis)
        if v not in choices:
            raise SweepError(f"grid.{axis}: {v!r} is not one of {', '.join(choices)}")
        return v
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise SweepError(f"grid.{axis}: values must be numbers; got {v!r}")
    if not math.isfinite(float(v)):
        raise SweepError(f"grid.{axis}: values must be finite; got {v!r}")
    if axis in ("d", "m"):
        if float(v) != int(v) or not 1 <= int(v) <= 2**31:
            raise SweepError(f"grid.{axis}: values must be integers in [1, 2**31]; got {v!r}")
        return int(v)
    v = float(v)
    if axis == "angle" and not 0.0 <= v <= math.pi:
        raise SweepError(f"grid.angle: values must lie in [0, pi] radians; got {v!r}")
    if axis in ("norm_x", "norm_y", "norm_sum") and v < 0:
        raise SweepError(f"grid.{axis}: values must be >= 0; got {v!r}")
    return v


def _check_run(run):
    t = run["trials"]
    if isinstance(t, float) and t.is_integer():
        t = int(t)
    if isinstance(t, bool) or not isinstance(t, int) or t < 2:
        raise SweepError(f"run.trials: must be an integer >= 2; got {run['trials']!r}")
    from rfkernels.reduced import MAX_TRIALS

    if t > MAX_TRIALS:
        raise SweepError(f"run.trials: at most {MAX_TRIALS} per point; got {t}")
    run["trials"] = t
    seed = run["seed"]
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise SweepError(f"run.seed: must be a non-negative integer; got {seed!r}")
    if run["backend"] not in BACKENDS:
        raise SweepError(f"run.backend: {run['backend']!r} is not one of {', '.join(BACKENDS)}")
    if run["method"] not in ("reduced", "literal"):
        raise SweepError(f"run.method: {run['method']!r} is not one of reduced, literal")
    if run["chunk"] is not None and (not isinstance(run["chunk"], int) or run["chunk"] < 1):
        raise SweepError(f"run.chunk: must be a positive integer; got {run['chunk']!r}")
    if not isinstance(run["theory_only"], bool):
        raise SweepError(f"run.theory_only: must be true or false; got {run['theory_only']!r}")
    if not isinstance(run["proposal"], str) or run["proposal"] not in reduced.PROPOSALS:
        raise SweepError(f"run.proposal: {run['proposal']!r} is not one of "
                         f"{', '.join(reduced.PROPOSALS)}")
    return run


# ---------------------------------------------------------------------------
# Evaluating points
# ---------------------------------------------------------------------------


def run_point(point, run):
    """Evaluate one point (module-level so process pools and Dask can ship it)."""
    # point_seed ignores the backend: rows that differ only in backend agree
    what = {k: v for k, v in point.items() if k != "backend"}
    row = evaluate_point(
        what, trials=run["trials"], seed=point_seed(run["seed"], point), backend=point["backend"],
        method=run["method"], chunk=run["chunk"], theory_only=run["theory_only"],
        proposal=run["proposal"],
    )
    row["backend"] = point["backend"]
    row["point_id"] = point_id(point)
    return row


def _axis_values(spec):
    """Every axis of :data:`GRID_AXES` -> the values it takes (``[None]`` if unused)."""
    return {a: list(spec.grid.get(a, [None])) for a in GRID_AXES}


def _grid_index(spec, start=0, stop=None):
    """Positions on every axis (``GRID_AXES``) of grid points ``start:stop`` (int64 arrays)."""
    values = _axis_values(spec)
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
    index_all = _grid_index(spec, start, stop)
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
    return cols, index


def theory_table(spec, start=0, stop=None):
    """Theory columns of the grid points ``start:stop`` (all by default), vectorised.

    Returns a dict of column arrays (grid order) with the point variables,
    ``mse_exact``, ``mse_lemma2`` and ``theorem2_bound`` (NaN where a
    statement does not apply) and ``note``, computed per (kind, ensemble,
    norms). This is the fast path of theory-only sweeps.
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
    for (i, kind), (j, ensemble), (k, norms) in itertools.product(
        enumerate(g["kind"]), enumerate(g["ensemble"]), enumerate(g["norms"])
    ):
        sel = (index["kind"] == i) & (index["ensemble"] == j) & (index["norms"] == k)
        if not sel.any():
            continue
        geom = theory.geometry_from_angle(cols["d"][sel], nx[sel], ny[sel], angle[sel])
        for name, values in theory_columns(geom, cols["m"][sel], kind, ensemble, norms).items():
            cols[name][sel] = values
    return cols


def _grid_ids(spec, start=0, stop=None):
    """``point_id`` of the grid points ``start:stop``, vectorised."""
    return point_ids(_axis_values(spec), _grid_index(spec, start, stop))


def _id_positions(spec):
    """``point_id -> position in the grid`` for every grid point."""
    out = {}
    for start in range(0, len(spec.points()), THEORY_BLOCK):
        out.update(zip(_grid_ids(spec, start, start + THEORY_BLOCK), itertools.count(start)))
    return out


# ---------------------------------------------------------------------------
# CSV text
# ---------------------------------------------------------------------------


def _format(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):  # missing / not applicable
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return repr(v)
    return str(v)


def _row_line(row):
    buf = io.StringIO()
    fields = [_format(row.get(c)) for c in COLUMNS]
    fields[COLUMNS.index("note")] = _one_line(fields[COLUMNS.index("note")])
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


def _one_line(text):
    """A note on one line (a table row is one line of the file)."""
    return text.replace("\r", " ").replace("\n", " ")


def _csv_field(text):
    """``text`` as :func:`_row_line` writes it (quoted where the csv module quotes)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([text, ""])
    return buf.getvalue()[:-2]


#: The constant columns of a theory-only row (the others: NaN, written empty).
_THEORY_CONSTANTS = {"trials": 0, "tail_ok": "", "proposal": "", "seconds": 0.0}


def _float_texts(values, same=None, same_texts=None):
    """``_format`` of each float of an array (NaN: empty), without a call per value.

    Where ``values`` equals ``same`` (an array already formatted as
    ``same_texts``) the text is reused.
    """
    out = [""] * values.size
    todo = ~np.isnan(values)
    if same is not None:
        reuse = todo & (values.view(np.int64) == same.view(np.int64))  # same bits: same text
        for i in np.flatnonzero(reuse).tolist():
            out[i] = same_texts[i]
        todo &= ~reuse
    where = np.flatnonzero(todo).tolist()
    for i, text in zip(where, map(repr, values[todo].tolist())):
        out[i] = text
    return out


def _theory_block(spec, start, stop, skip=None):
    """CSV lines of the theory-only rows ``start:stop`` of the grid (byte for byte
    what :func:`_row_line` writes for them), leaving out the ids in ``skip``.

    Returns ``(text, n_rows)``.
    """
    cols = theory_table(spec, start, stop)
    index = _grid_index(spec, start, stop)
    values = _axis_values(spec)
    ids = point_ids(values, index)
    exact = _float_texts(cols["mse_exact"])
    lemma2 = _float_texts(cols["mse_lemma2"], cols["mse_exact"], exact)
    bound = _float_texts(cols["theorem2_bound"], cols["mse_exact"], exact)
    quoted = {text: _csv_field(_one_line(text)) for text in set(cols["note"].tolist())}
    notes = [quoted[t] for t in cols["note"].tolist()]
    # the line template: constant fields written in, one %s per field that varies
    fields, columns = ["%s"], [ids]
    for a in GRID_AXES:
        texts = [_csv_field(_format(v)) for v in values[a]]
        idx = index[a]
        if idx.min() == idx.max():
            fields.append(texts[int(idx[0])].replace("%", "%%"))
        else:
            fields.append("%s")
            columns.append(np.asarray(texts, dtype=object)[idx].tolist())
    theory = {"mse_exact": exact, "mse_lemma2": lemma2, "theorem2_bound": bound, "note": notes}
    for c in RESULT_COLUMNS:
        if c in theory:
            fields.append("%s")
            columns.append(theory[c])
        else:
            fields.append(_csv_field(_format(_THEORY_CONSTANTS.get(c, float("nan")))))
    template = ",".join(fields) + "\n"
    rows = zip(*columns)
    if skip:
        lines = [template % r for r in rows if r[0] not in skip]
    else:
        lines = [template % r for r in rows]
    return "".join(lines), len(lines)


# ---------------------------------------------------------------------------
# Reading and checking tables
# ---------------------------------------------------------------------------

def _choices(column):
    """The valid values of a text axis: the registry's names (kinds registered later included)."""
    return BACKENDS if column == "backend" else registry.names(column)


_CHOICE_COLUMNS = ("kind", "ensemble", "norms", "backend")
#: Text columns with a fixed set of values ('' where Monte Carlo did not run).
_WORDS = {"proposal": ("", "plain", "tilted")}
#: Float columns that may be empty (not applicable, or beyond float64 with a note).
_OPTIONAL_FLOATS = ("norm_x", "norm_y", "norm_sum", "mse_mc", "stderr", "ci_low", "ci_high", "bias",
                    "bias_stderr", "mse_exact", "mse_lemma2", "theorem2_bound", "z", "k_hat",
                    "max_share", "ess")
_HEX = frozenset("0123456789abcdef")


def _first(flags):
    """Index of the first True of a sequence of flags (None if there is none)."""
    return next((i for i, f in enumerate(flags) if f), None)


def _check_column(column, texts):
    """The typed values of one column of a block of rows, or ``(None, (i, problem))``
    for its first bad field ``i``."""
    if column in _CHOICE_COLUMNS:
        allowed = _choices(column)
        if set(texts) <= set(allowed):
            return list(texts), None
        i = _first(t not in allowed for t in texts)
        return None, (i, f"{column} = {texts[i]!r} is not one of {', '.join(allowed)}")
    if column in ("d", "m", "trials"):
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
    if column == "seconds":
        bad |= numbers < 0
    if bad.any():
        i = where[int(np.argmax(bad))]
        what = "is negative" if np.isfinite(numbers[np.argmax(bad)]) else "is not finite"
        return None, (i, f"{column} = {texts[i]!r} {what}")
    values = [None] * len(texts)
    for i, v in zip(where, numbers.tolist()):
        values[i] = v
    return values, None


class _Table:
    """A results CSV, checked block by block (see :func:`read_results`).

    ``keep``: "raw" (dicts of strings), "typed" (dicts of values) or None
    (only the ids, the total seconds and where the complete lines end).
    """

    BLOCK = 1 << 16  # rows checked together

    def __init__(self, path, spec=None, keep="raw"):
        self.path, self.keep = path, keep
        self.rows, self.ids, self.seconds = [], set(), 0.0
        self.good_bytes, self.torn = 0, False
        self.positions = _id_positions(spec) if spec is not None else None
        with open(path, "rb") as fh:
            lines = self._lines(fh)
            header = next(lines, None)
            if header is None:
                raise SweepError(f"{path} is empty: not a results file")
            if header != ",".join(COLUMNS) + "\n":
                raise SweepError(f"{path} does not have the columns of a results table; "
                                 "refusing to touch it")
            reader = csv.reader(lines)
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

    def _lines(self, fh):
        """Complete lines as text (a torn last line is left out); counts their bytes."""
        for lineno, raw in enumerate(fh, start=1):
            if not raw.endswith(b"\n"):  # only the last line can end without one
                self.torn = True
                return
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                self._fail(lineno, "is not UTF-8 text")
            self.good_bytes += len(raw)
            yield text

    def _check_block(self, block, first):
        """Types and finiteness, identity and uniqueness of rows ``first...`` (line numbers)."""
        if not block:
            return
        problems = []
        k = _first(len(f) != len(COLUMNS) for f in block)
        if k is not None:
            problems.append((k, f"has {len(block[k])} fields, expected {len(COLUMNS)}"))
            block = block[:k]
        texts = list(zip(*block)) if block else [()] * len(COLUMNS)
        typed = {}
        for column, col in zip(COLUMNS, texts):
            typed[column], bad = _check_column(column, col)
            if bad is not None:
                problems.append((bad[0], f"has {bad[1]}"))
        if problems:
            i, what = min(problems, key=lambda p: p[0])  # the first line wrong
            self._fail(first + i, what)
        # identity: each point_id is the point its values say (and, with a grid, a point of it)
        values, index = {}, {}
        for a, col in zip(GRID_AXES, texts[1 : 1 + len(GRID_AXES)]):
            seen = {}
            index[a] = np.fromiter((seen.setdefault(t, len(seen)) for t in col), dtype=np.int64,
                                   count=len(col))
            position = {j: t for t, j in seen.items()}
            values[a] = [_check_column(a, [position[j]])[0][0] for j in range(len(seen))]
        want = point_ids(values, index)
        i = _first(w != got for w, got in zip(want, typed["point_id"]))
        if i is not None:
            self._fail(first + i, f"has point_id {typed['point_id'][i]}, which is not the point "
                       f"its values say ({want[i]})")
        ids = typed["point_id"]
        if self.positions is not None:
            i = _first(pid not in self.positions for pid in ids)
            if i is not None:
                raise SweepError(f"{self.path}: line {first + i} is not a point of this grid; "
                                 "refusing to touch it")
        for i, pid in enumerate(ids):
            if pid in self.ids:
                raise SweepError(f"{self.path}: line {first + i} repeats point {pid}; refusing to "
                                 "touch it")
            self.ids.add(pid)
        self.seconds += math.fsum(typed["seconds"])
        if self.keep == "raw":
            self.rows.extend(dict(zip(COLUMNS, f)) for f in block)
        elif self.keep == "typed":
            self.rows.extend(dict(zip(COLUMNS, v)) for v in zip(*(typed[c] for c in COLUMNS)))

    def _fail(self, lineno, what):
        raise SweepError(f"{self.path}: line {lineno} {what}; the file is corrupt and was left "
                         "as it is")


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
    table = _Table(path, spec)
    return table.rows, table.torn


def load_table(path):
    """A results CSV as a list of dicts with typed values (floats, ints, bools, text, None).

    An empty field is None (``note`` stays text: ``""``).

    Every row is checked as :func:`read_results` does; a corrupt table raises
    :class:`SweepError` naming the line.
    """
    return _Table(path, keep="typed").rows


# ---------------------------------------------------------------------------
# The output folder: lock, checks, appends
# ---------------------------------------------------------------------------


class SweepIOError(OSError):
    """The output folder cannot be created, locked or written, or a Dask scheduler
    cannot be reached; the message says which, on one line."""


@contextlib.contextmanager
def _folder_io(out_dir, verb="write in"):
    """Turn an OSError of the folder's files into a one-line :class:`SweepIOError`."""
    try:
        yield
    except SweepIOError:
        raise
    except OSError as exc:
        raise SweepIOError(f"cannot {verb} the output folder {out_dir}: {_reason(exc)}") from exc


def _reason(exc):
    text = exc.strerror or " ".join(str(exc).split())
    return f"{text} ({exc.filename})" if exc.filename is not None else text


class _FolderLock:
    """An exclusive ``flock`` on ``out_dir/.sweep.lock``, which records the holder's pid.

    The kernel releases it when the last descriptor of the holder's open
    file closes, however the process ends: a killed sweep leaves no stale
    lock (the file may stay; the next sweep takes it over).
    """

    def __init__(self, out_dir):
        import fcntl

        path = os.path.join(out_dir, LOCK_NAME)
        while True:
            with _folder_io(out_dir):
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = _lock_holder(fd)
                os.close(fd)
                raise SweepError(f"another sweep (pid {pid}) is writing {out_dir}") from None
            except BaseException:
                os.close(fd)
                raise
            # a holder removes the file as it ends: make sure we hold the file that is there now
            try:
                st = os.stat(path)
            except FileNotFoundError:
                st = None
            own = os.fstat(fd)
            if st is not None and (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino):
                break
            os.close(fd)
        self.fd, self.path, self.inode = fd, path, (own.st_dev, own.st_ino)
        try:
            with _folder_io(out_dir):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            self.release()
            raise

    def release(self):
        if self.fd is None:
            return
        try:
            os.unlink(self.path)  # while still holding it (see the inode check above)
        except OSError:
            pass
        os.close(self.fd)
        self.fd = None


def _lock_holder(fd):
    """The pid a lock file records ('?' if its holder has not written it yet)."""
    for _ in range(20):
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        if text.isdigit():
            return text
        time.sleep(0.01)
    return "?"


def _forget_lock(fd, inode):
    """Pool initializer: close a forked worker's copy of the lock descriptor, so the
    lock dies with the sweep process and not with its last worker."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    if (st.st_dev, st.st_ino) == inode:
        os.close(fd)


def _make_folder(out_dir):
    """Create ``out_dir`` (and missing parents); return the folders created, deepest first."""
    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise SweepIOError(f"the output folder {out_dir} exists and is not a folder")
    missing = []
    path = os.path.abspath(out_dir)
    while not os.path.lexists(path):
        missing.append(path)
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    if missing and not os.path.isdir(path):
        raise SweepIOError(f"cannot create the output folder {out_dir}: {path} is not a folder")
    with _folder_io(out_dir, "create"):
        os.makedirs(out_dir, exist_ok=True)
    return missing


def _remove_folders(folders):
    """Remove folders this run created (deepest first), as long as they are empty."""
    for path in folders:
        try:
            os.rmdir(path)
        except OSError:
            break


class _Appender:
    """Appends complete lines to the results file; ``fsync`` at most every
    :data:`SYNC_INTERVAL` seconds, and on :meth:`close`.

    A failed write (a full disk) is cut back to the last complete line, so
    the file never ends in half a row while the process lives.
    """

    def __init__(self, path, out_dir):
        self.out_dir = out_dir
        with _folder_io(out_dir):
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND)
            self.size = os.fstat(self.fd).st_size
        self.rows = 0
        self.synced = time.monotonic()

    def append(self, text, n_rows):
        raw = text.encode()
        data = memoryview(raw)
        try:
            with _folder_io(self.out_dir):
                while data:
                    data = data[os.write(self.fd, data):]
                if time.monotonic() - self.synced >= SYNC_INTERVAL:
                    self.sync()
        except BaseException:
            try:
                os.ftruncate(self.fd, self.size)
            except OSError:
                pass
            raise
        self.size += len(raw)
        self.rows += n_rows

    def sync(self):
        os.fsync(self.fd)
        self.synced = time.monotonic()

    def close(self):
        if self.fd is None:
            return
        try:
            with _folder_io(self.out_dir):
                self.sync()
        finally:
            os.close(self.fd)
            self.fd = None


def _check_geometries(spec):
    """Every grid geometry and backend is usable, before anything is written.

    Checks the product of the geometry axes (d, angle and the norms), not
    every point of the grid.
    """
    from rfkernels import theory
    from rfkernels.backends import check_backend

    for backend in spec.grid["backend"]:
        check_backend(backend)
    g = spec.grid
    norm_axes = ["norm_sum"] if "norm_sum" in g else ["norm_x", "norm_y"]
    mesh = np.meshgrid(np.asarray(g["d"], dtype=np.int64),
                       *(np.asarray(g[a], dtype=float) for a in ["angle"] + norm_axes),
                       indexing="ij")
    d, angle, *norms = (a.ravel() for a in mesh)
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
        rows = m if ensemble == "iid" else max(m, d)
        return (32 << 20) + 32 * d + 48 * d * rows
    return (32 << 20) + 32 * d + 128 * m


def _check_memory(spec, workers, remote):
    """The largest Monte Carlo point fits this machine (once per local worker), before any work.

    Theory-only sweeps work in blocks of :data:`THEORY_BLOCK` points (tens of
    MiB whatever d and m); Dask workers are other machines.
    """
    if spec.run["theory_only"] or remote:
        return
    d, m = max(spec.grid["d"]), max(spec.grid["m"])
    ensemble = "iid" if spec.grid["ensemble"] == ["iid"] else "orthogonal"
    parallel = min(workers, len(spec.points()))
    what = f"the grid point d = {d}, m = {m} (Monte Carlo, method {spec.run['method']})"
    if parallel > 1:
        what += f" on {parallel} workers at once"
    check_memory(point_memory(d, m, spec.run["method"], ensemble) * parallel, what)


def _prepare_out(out_dir, spec, resume):
    """Check what ``out_dir`` holds (the lock held); cut a torn last line.

    Returns ``(ids of the rows done, their seconds, point_id -> grid
    position or None)``.
    """
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    has_results, has_sidecar = os.path.exists(results), os.path.exists(sidecar)
    if not has_results and not has_sidecar:
        return set(), 0.0, None
    try:
        with open(sidecar) as fh:
            meta = json.load(fh)
        if meta.get("format") != FORMAT:
            raise ValueError("format")
    except (OSError, ValueError):
        raise SweepError(
            f"{out_dir} holds {RESULTS_NAME if has_results else SIDECAR_NAME} that is not the "
            "results of an rfkernels sweep; refusing to write there (choose another --out)"
        ) from None
    if meta.get("fingerprint") != spec.fingerprint():
        raise SweepError(
            f"{out_dir} holds results of a different grid or run configuration "
            f"(fingerprint {meta.get('fingerprint')} vs {spec.fingerprint()}); they were left "
            "untouched: choose another --out"
        )
    if not resume:
        raise SweepError(f"{out_dir} already holds results of this sweep; pass --resume (resume=True) to continue "
                         "it, or choose another --out")
    if not has_results:
        return set(), 0.0, None
    n = len(spec.points())
    check_memory(_RESUME_BYTES_PER_POINT * n, f"resuming a sweep of {n} points")
    with _folder_io(out_dir, "read"):
        table = _Table(results, spec, keep=None)
    if table.torn:  # drop the torn line of a killed run
        with _folder_io(out_dir):
            os.truncate(results, table.good_bytes)
    return table.ids, table.seconds, table.positions


#: Bytes per grid point a resume holds at once (the table's text, an id per point).
_RESUME_BYTES_PER_POINT = 1000


def _json(meta):
    return json.dumps(meta, indent=1, allow_nan=False) + "\n"


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_sweep(spec, out_dir, *, resume=False, workers=1, scheduler=None, client=None,
              progress=None):
    """Run (or resume) a sweep into ``out_dir``; returns the path of the results CSV.

    Parameters
    ----------
    spec : SweepSpec
    out_dir : str or os.PathLike
        Folder for ``results.csv`` and ``sweep.json`` (created if missing).
    resume : bool
        Continue a sweep of the same grid, skipping finished points.
    workers : int
        Local processes (1: in this process).
    scheduler : str, optional
        Address of a Dask scheduler (``tcp://host:port``); needs the
        ``dask`` extra. ``client`` may be given instead (a
        ``distributed.Client``).
    progress : bool or None
        A tqdm bar; None shows it only on a terminal.

    Raises
    ------
    SweepError
        Another sweep is writing ``out_dir`` ("another sweep (pid N) is
        writing ..."); ``out_dir`` holds results of another grid, unrelated
        files or a corrupt table (the line is named); bad arguments.
    MemoryError
        The largest point needs more memory than the machine has (checked
        before anything is written).
    SweepIOError
        An ``OSError``: ``out_dir`` cannot be created or written (a file,
        under a file, read-only, a full disk: rows written before are kept),
        or the Dask scheduler does not answer within
        :data:`DASK_CONNECT_TIMEOUT` seconds.
    RuntimeError
        A local worker process died (killed, out of memory): the rows done
        are kept and ``resume=True`` continues.

    A run that fails before its first row leaves the folder as it found it.
    """
    if not isinstance(spec, SweepSpec):
        raise TypeError("spec must be a SweepSpec (use SweepSpec.from_dict or from_toml)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be an integer >= 1; got {workers!r}")
    if scheduler is not None and client is not None:
        raise SweepError("give scheduler or client, not both")
    out_dir = os.fspath(out_dir)
    started = time.time()
    _check_geometries(spec)
    _check_memory(spec, workers, remote=scheduler is not None or client is not None)

    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    created = _make_folder(out_dir)
    try:
        lock = _FolderLock(out_dir)
    except BaseException:
        _remove_folders(created)
        raise
    new_files, state = [], {"rows": 0}
    try:
        done, seconds_done, positions = _prepare_out(out_dir, spec, resume)
        new_files = [p for p in (results, sidecar) if not os.path.exists(p)]
        with _dask_client(scheduler, client) as dask:
            seconds, in_order = _run(spec, out_dir, done, workers, dask, lock, progress,
                                     scheduler, state)
        with _folder_io(out_dir):
            if not in_order:
                _rewrite_in_grid_order(spec, results, positions)
            meta = _meta(spec, workers, scheduler, client, "complete")
            meta["timings"] = {"wall_seconds_this_run": time.time() - started,
                               "point_seconds_total": seconds + seconds_done,
                               "points_this_run": len(spec.points()) - len(done)}
            atomic_write(sidecar, _json(meta))
    except BaseException as exc:
        rows = state["rows"]
        if rows == 0:  # nothing computed: leave the folder as this run found it
            for path in new_files:
                if os.path.exists(path):
                    os.unlink(path)
        lock.release()
        if rows == 0:
            _remove_folders(created)
        if isinstance(exc, SweepIOError) and isinstance(exc.__cause__, OSError) and rows:
            raise SweepIOError(f"{exc}; the {rows} rows written before are kept: "
                               "rerun with --resume to continue") from exc.__cause__
        raise
    lock.release()
    return results


def _meta(spec, workers, scheduler, client, status):
    return {
        "format": FORMAT, "fingerprint": spec.fingerprint(), **spec.to_dict(),
        "root_seed": spec.run["seed"], "n_points": len(spec.points()), "columns": list(COLUMNS),
        "versions": package_versions(), "git_revision": git_revision(),
        "backend": spec.grid["backend"], "status": status,
        "execution": {"workers": workers,
                      "scheduler": scheduler or (None if client is None else "client")},
    }


def _run(spec, out_dir, done, workers, client, lock, progress, scheduler, state):
    """Write the sidecar and header if new, then the row of every point not in ``done``.

    Returns ``(seconds of the rows written, whether the file is in grid
    order)``; ``state["rows"]`` counts the rows written so far.
    """
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    with _folder_io(out_dir):
        if not os.path.exists(sidecar):
            atomic_write(sidecar, _json(_meta(spec, workers, scheduler, client, "running")))
        if not os.path.exists(results):
            atomic_write(results, ",".join(COLUMNS) + "\n")
    n = len(spec.points())
    bar = _progress_bar(n, len(done), progress)
    appender = _Appender(results, out_dir)
    seconds, in_order = 0.0, not done  # rows after earlier ones: rewrite at the end

    def write(text, rows):
        appender.append(text, rows)
        state["rows"] = appender.rows
        bar.update(rows)

    try:
        if spec.run["theory_only"]:  # blocks of rows in grid order
            blocks = _theory_blocks(spec, done, workers, lock)
            try:
                for text, rows in blocks:
                    if rows:
                        write(text, rows)
            finally:
                blocks.close()  # a pool of workers: shut down now, not when collected
        else:
            ids = _grid_ids(spec)
            points = spec.points()
            todo = [(i, points[i]) for i, pid in enumerate(ids) if pid not in done]
            position = {ids[i]: i for i, _ in todo}
            last = -1

            def record(row):
                nonlocal seconds, in_order, last
                write(_row_line(row), 1)
                seconds += row["seconds"]
                i = position[row["point_id"]]
                in_order, last = in_order and i > last, i

            if client is not None:
                _run_dask(todo, spec.run, record, client)
            elif workers > 1:
                _run_pool(todo, spec.run, record, workers, lock)
            else:
                for _, p in todo:
                    record(run_point(p, spec.run))
    finally:
        try:
            appender.close()
        finally:
            bar.close()
    return seconds, in_order


def _theory_blocks(spec, done, workers, lock):
    """``(text, rows)`` of each block of a theory-only sweep, in grid order, made by
    ``workers`` processes (the rows in ``done`` left out)."""
    starts = range(0, len(spec.points()), THEORY_BLOCK)
    if workers == 1 or len(starts) == 1:
        for start in starts:
            yield _theory_block(spec, start, start + THEORY_BLOCK, skip=done)
        return
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=workers, initializer=_forget_lock,
                             initargs=(lock.fd, lock.inode)) as pool:
        # at most 2 blocks per worker in flight: memory stays a few blocks
        pending = []
        try:
            for start in starts:
                pending.append(pool.submit(_theory_block, spec, start, start + THEORY_BLOCK))
                if len(pending) > 2 * workers:
                    yield _skip_done(*pending.pop(0).result(), done)
            for fut in pending:
                yield _skip_done(*fut.result(), done)
        except BrokenProcessPool:
            raise _worker_died() from None
        finally:
            for fut in pending:
                fut.cancel()


def _worker_died():
    return RuntimeError("a worker process of the sweep died (killed, or out of memory?); the rows "
                        "done so far are kept: rerun with --resume to continue")


def _skip_done(text, rows, done):
    if not done:
        return text, rows
    lines = [line + "\n" for line in text.split("\n")[:-1] if line[:16] not in done]
    return "".join(lines), len(lines)


def _rewrite_in_grid_order(spec, results, positions=None):
    """Sort the rows of a complete table into grid order (atomic rewrite)."""
    with open(results, newline="") as fh:
        header, *lines = fh.read().split("\n")[:-1]  # one row per line (notes have no newline)
    order = positions if positions is not None else _id_positions(spec)
    lines.sort(key=lambda line: order[line[:16]])  # point_id: 16 hex digits, first

    def write(fh):
        fh.write(header + "\n")
        for start in range(0, len(lines), THEORY_BLOCK):
            fh.write("".join(line + "\n" for line in lines[start : start + THEORY_BLOCK]))

    atomic_write(results, write)


def _run_pool(todo, run, record, workers, lock):
    from concurrent.futures import ProcessPoolExecutor, as_completed
    from concurrent.futures.process import BrokenProcessPool

    with ProcessPoolExecutor(max_workers=workers, initializer=_forget_lock,
                             initargs=(lock.fd, lock.inode)) as pool:
        futures = [pool.submit(run_point, p, run) for _, p in todo]
        waiting = set(futures)
        try:
            for fut in as_completed(futures):
                waiting.discard(fut)
                record(fut.result())
        except BrokenProcessPool:
            for fut in futures:  # keep every point that finished before the worker died
                if fut in waiting and fut.done() and not fut.cancelled() and fut.exception() is None:
                    record(fut.result())
            raise _worker_died() from None
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


@contextlib.contextmanager
def _dask_client(scheduler, client):
    """The client to use (None: local execution); one made for ``scheduler`` is closed after."""
    if scheduler is None:
        yield client
        return
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("Dask execution needs the dask extra: pip install 'rfkernels[dask]'") from None
    try:
        own = Client(scheduler, timeout=DASK_CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:
        raise SweepIOError(f"cannot reach the Dask scheduler at {scheduler} (waited "
                           f"{DASK_CONNECT_TIMEOUT:g} s): {' '.join(str(exc).split())}") from None
    try:
        yield own
    finally:
        own.close()


def _run_dask(todo, run, record, client):
    from distributed import as_completed

    futures = [client.submit(run_point, p, run, pure=False) for _, p in todo]
    for fut in as_completed(futures):
        record(fut.result())


def _progress_bar(total, initial, progress):
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, initial=initial, disable=disable, unit="point", desc="sweep")
