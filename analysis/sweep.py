"""Resumable sweeps over grids of m, d, angles, norms, estimators and ensembles.

A sweep is a grid (the Cartesian product of its axes, in declared order)
evaluated point by point by :func:`rfkernels.analysis.comparison.evaluate_point`,
in-process, on a local process pool or on a Dask cluster, into a tidy CSV
table (one row per grid point) with a JSON sidecar.

Determinism
    Each point's random stream is ``SeedSequence(root_seed,
    spawn_key=H(point))`` where ``H`` hashes the point's own variables, not
    its position in the execution order: the table is the same whatever the
    order, the number of workers or the scheduler. Every column but
    ``seconds`` is reproducible bit for bit (floats are written with
    ``repr``, which round-trips).

Resuming
    Rows are appended one complete line per point (a single ``write`` and an
    ``fsync``); a sweep killed at any moment leaves at most a torn last line,
    which ``--resume`` drops before skipping the finished points. When every
    point is done the table is rewritten in grid order (temporary file, then
    an atomic ``os.replace``), so a resumed sweep yields the same file as an
    uninterrupted one. A results file that belongs to another grid, or that
    is corrupt, is reported and never touched.
"""

from __future__ import annotations

import csv
import hashlib
import io
import itertools
import json
import math
import os
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from rfkernels._io import atomic_write, git_revision, package_versions
from rfkernels._validation import ENSEMBLES, KINDS, NORMS
from rfkernels.backends import BACKENDS

from .comparison import RESULT_COLUMNS, evaluate_point, theory_columns
from .points import GRID_AXES, norms_from_sum, point_id, point_seed

#: Keys of the ``[run]`` table and their defaults.
RUN_DEFAULTS = {
    "trials": 100_000,
    "seed": 0,
    "backend": "numpy",
    "method": "reduced",
    "chunk": None,
    "theory_only": False,
}
_AXIS_DEFAULTS = {"kind": ["positive"], "ensemble": ["iid"], "norms": ["chi"]}
_REQUIRED = ("d", "m", "angle")
#: Columns of the results table.
COLUMNS = ("point_id",) + GRID_AXES + RESULT_COLUMNS
RESULTS_NAME = "results.csv"
SIDECAR_NAME = "sweep.json"
FORMAT = "rfkernels-sweep/1"


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
            raise SweepError(f"cannot read grid file {path}: {exc}") from None
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
            key = sorted(unknown)[0]
            raise SweepError(f"grid.{key}: unknown key; valid keys are {', '.join(GRID_AXES)}")
        unknown = set(run) - set(RUN_DEFAULTS)
        if unknown:
            key = sorted(unknown)[0]
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
        if "norm_sum" in out and ("norm_x" in out or "norm_y" in out):
            raise SweepError("grid.norm_sum: give either norm_sum or norm_x/norm_y, not both")
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
        if self.run["theory_only"] and "orthogonal-unfixed-qr" in g["ensemble"]:
            raise SweepError(
                "grid.ensemble: 'orthogonal-unfixed-qr' has no closed form; a theory-only "
                "sweep accepts 'iid' and 'orthogonal'"
            )
        if self.run["method"] == "reduced" and "orthogonal-unfixed-qr" in g["ensemble"]:
            raise SweepError(
                "grid.ensemble: 'orthogonal-unfixed-qr' can only be sampled literally; "
                "set run.method = 'literal'"
            )

    # -- points -------------------------------------------------------------

    def points(self):
        """The grid points, in declared order (the last axis varies fastest)."""
        axes = [a for a in GRID_AXES if a in self.grid]
        out = []
        for combo in itertools.product(*(self.grid[a] for a in axes)):
            p = {a: None for a in GRID_AXES}
            p.update(dict(zip(axes, combo)))
            out.append(p)
        return out

    def fingerprint(self):
        """Hash of everything that determines the table's numbers."""
        relevant = {k: v for k, v in self.run.items()}
        canon = json.dumps({"grid": self.grid, "run": relevant}, sort_keys=True)
        return hashlib.sha256(canon.encode()).hexdigest()[:20]

    def to_dict(self):
        return {"grid": self.grid, "run": self.run}


def _check_axis_value(axis, v):
    if axis in ("kind", "ensemble", "norms", "backend"):
        choices = {"kind": KINDS, "ensemble": ENSEMBLES, "norms": NORMS, "backend": BACKENDS}[axis]
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
    )
    row["backend"] = point["backend"]
    row["point_id"] = point_id(point)
    return row


def grid_arrays(spec):
    """The grid as column arrays in :meth:`SweepSpec.points` order (no per-point Python).

    Returns ``(cols, index)``: ``cols[axis]`` holds each point's value and
    ``index[axis]`` its position along that axis.
    """
    axes = [a for a in GRID_AXES if a in spec.grid]
    sizes = [len(spec.grid[a]) for a in axes]
    grid_index = np.indices(sizes, dtype=np.int32).reshape(len(axes), -1)
    cols, index = {}, {}
    for a, idx in zip(axes, grid_index):
        values = spec.grid[a]
        dtype = object if isinstance(values[0], str) else type(values[0])
        cols[a] = np.asarray(values, dtype=dtype)[idx]
        index[a] = idx
    n = grid_index.shape[1]
    for a in GRID_AXES:
        cols.setdefault(a, np.full(n, None, dtype=object))
    return cols, index


def theory_table(spec):
    """Theory columns of every grid point, vectorised per (kind, ensemble, norms).

    Returns a dict of column arrays (grid order) with the point variables,
    ``mse_exact``, ``mse_lemma2`` and ``theorem2_bound`` (NaN where a
    statement does not apply). This is the fast path of theory-only sweeps.
    """
    from rfkernels import theory

    cols, index = grid_arrays(spec)
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
        geom = theory.geometry_from_angle(cols["d"][sel], nx[sel], ny[sel], angle[sel])
        for name, values in theory_columns(geom, cols["m"][sel], kind, ensemble, norms).items():
            cols[name][sel] = values
    return cols


def _theory_rows(spec):
    """Rows (dicts) of a theory-only sweep."""
    cols = theory_table(spec)
    points = spec.points()
    rows = []
    for i, p in enumerate(points):
        r = dict(p)
        r["point_id"] = point_id(p)
        r.update({k: float("nan") for k in RESULT_COLUMNS})
        r["trials"], r["tail_ok"], r["seconds"] = 0, "", 0.0
        for name in ("mse_exact", "mse_lemma2", "theorem2_bound"):
            r[name] = float(cols[name][i])
        r["note"] = str(cols["note"][i])
        rows.append(r)
    return rows


# ---------------------------------------------------------------------------
# Storage
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
    csv.writer(buf, lineterminator="\n").writerow([_format(row.get(c)) for c in COLUMNS])
    return buf.getvalue()


def read_results(path, spec=None):
    """Parse a results CSV; returns ``(rows, torn)``.

    ``torn`` is True when the last line is incomplete (a killed sweep); that
    line is not returned. Raises :class:`SweepError` on anything else that
    is wrong (header, field count, unknown or repeated points).
    """
    with open(path, newline="") as fh:
        text = fh.read()
    torn = bool(text) and not text.endswith("\n")
    lines = text.split("\n")
    if torn:
        lines = lines[:-1]
    elif lines and lines[-1] == "":
        lines = lines[:-1]
    if not lines:
        raise SweepError(f"{path} is empty: not a results file")
    reader = csv.reader(lines)
    header = next(reader)
    if tuple(header) != COLUMNS:
        raise SweepError(f"{path} does not have the columns of a results table; refusing to touch it")
    ids = {point_id(p) for p in spec.points()} if spec is not None else None
    rows, seen = [], set()
    for lineno, fields in enumerate(reader, start=2):
        if len(fields) != len(COLUMNS):
            raise SweepError(f"{path}: line {lineno} has {len(fields)} fields, expected {len(COLUMNS)}; "
                             "the file is corrupt and was left as it is")
        row = dict(zip(COLUMNS, fields))
        if ids is not None and row["point_id"] not in ids:
            raise SweepError(f"{path}: line {lineno} is not a point of this grid; refusing to touch it")
        if row["point_id"] in seen:
            raise SweepError(f"{path}: line {lineno} repeats point {row['point_id']}; refusing to touch it")
        seen.add(row["point_id"])
        rows.append(row)
    return rows, torn


def _check_geometries(spec):
    """Every grid point's geometry and backend are usable, before anything is written."""
    from rfkernels import theory
    from rfkernels.backends import check_backend

    for backend in spec.grid["backend"]:
        check_backend(backend)
    cols, _ = grid_arrays(spec)
    angle = cols["angle"].astype(float)
    try:
        if "norm_sum" in spec.grid:
            nx = ny = norms_from_sum(cols["norm_sum"].astype(float), angle)
        else:
            nx, ny = cols["norm_x"].astype(float), cols["norm_y"].astype(float)
        theory.geometry_from_angle(cols["d"], nx, ny, angle)
    except ValueError as exc:
        raise SweepError(f"grid: {exc}") from None


def _prepare_out(out_dir, spec, resume):
    """Check what ``out_dir`` holds; return the rows already done (raw strings)."""
    os.makedirs(out_dir, exist_ok=True)
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    has_results, has_sidecar = os.path.exists(results), os.path.exists(sidecar)
    if not has_results and not has_sidecar:
        return []
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
        raise SweepError(f"{out_dir} already holds results of this sweep; pass --resume to continue "
                         "it, or choose another --out")
    if not has_results:
        return []
    rows, torn = read_results(results, spec)
    if torn:  # drop the torn line of a killed run, atomically
        atomic_write(results, "".join([",".join(COLUMNS) + "\n"] + [_row_line(r) for r in rows]))
    return rows


# ---------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------


def run_sweep(spec, out_dir, *, resume=False, workers=1, scheduler=None, client=None,
              progress=None):
    """Run (or resume) a sweep into ``out_dir``; returns the path of the results CSV.

    Parameters
    ----------
    spec : SweepSpec
    out_dir : str
        Folder for ``results.csv`` and ``sweep.json``.
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
    """
    if not isinstance(spec, SweepSpec):
        raise TypeError("spec must be a SweepSpec (use SweepSpec.from_dict or from_toml)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise SweepError(f"workers must be an integer >= 1; got {workers!r}")
    if scheduler is not None and client is not None:
        raise SweepError("give scheduler or client, not both")
    _check_geometries(spec)
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    new_files = [p for p in (results, sidecar) if not os.path.exists(p)]
    done_rows = _prepare_out(out_dir, spec, resume)
    points = spec.points()
    done = {r["point_id"] for r in done_rows}
    todo = [p for p in points if point_id(p) not in done]
    meta = {
        "format": FORMAT, "fingerprint": spec.fingerprint(), **spec.to_dict(),
        "root_seed": spec.run["seed"], "n_points": len(points), "columns": list(COLUMNS),
        "versions": package_versions(), "git_revision": git_revision(),
        "backend": spec.grid["backend"], "status": "running",
        "execution": {"workers": workers, "scheduler": scheduler or (None if client is None else "client")},
    }
    started = time.time()
    if not os.path.exists(sidecar):
        atomic_write(sidecar, json.dumps(meta, indent=1) + "\n")
    if not os.path.exists(results):
        atomic_write(results, ",".join(COLUMNS) + "\n")

    bar = _progress_bar(len(points), len(points) - len(todo), progress)
    fd = os.open(results, os.O_WRONLY | os.O_APPEND)
    recorded = [0]
    try:
        def record(row):
            os.write(fd, _row_line(row).encode())
            os.fsync(fd)
            recorded[0] += 1
            bar.update(1)

        if spec.run["theory_only"]:
            wanted = {point_id(p) for p in todo}
            for row in _theory_rows(spec):
                if row["point_id"] in wanted:
                    record(row)
        elif scheduler is not None or client is not None:
            _run_dask(todo, spec.run, record, scheduler, client)
        elif workers > 1:
            from concurrent.futures import ProcessPoolExecutor, as_completed

            with ProcessPoolExecutor(max_workers=workers) as pool:
                futures = [pool.submit(run_point, p, spec.run) for p in todo]
                for fut in as_completed(futures):
                    record(fut.result())
        else:
            for p in todo:
                record(run_point(p, spec.run))
    except BaseException:
        if recorded[0] == 0:  # nothing computed: leave the folder as this run found it
            for path in new_files:
                if os.path.exists(path):
                    os.unlink(path)
        raise
    finally:
        os.close(fd)
        bar.close()
    # every point done: rewrite in grid order, atomically
    rows, torn = read_results(results, spec)
    order = {point_id(p): i for i, p in enumerate(points)}
    rows.sort(key=lambda r: order[r["point_id"]])
    atomic_write(results, ",".join(COLUMNS) + "\n" + "".join(_row_line(r) for r in rows))
    seconds = sum(float(r["seconds"] or 0.0) for r in rows)
    meta.update({"status": "complete", "timings": {
        "wall_seconds_this_run": time.time() - started,
        "point_seconds_total": seconds,
        "points_this_run": len(todo),
    }})
    atomic_write(sidecar, json.dumps(meta, indent=1) + "\n")
    return results


def _run_dask(todo, run, record, scheduler, client):
    try:
        from distributed import Client, as_completed
    except ImportError:
        raise ImportError("Dask execution needs the dask extra: pip install 'rfkernels[dask]'") from None
    own = client is None
    if own:
        client = Client(scheduler)
    try:
        futures = [client.submit(run_point, p, run, pure=False) for p in todo]
        for fut in as_completed(futures):
            record(fut.result())
    finally:
        if own:
            client.close()


def _progress_bar(total, initial, progress):
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, initial=initial, disable=disable, unit="point", desc="sweep")


def load_table(path):
    """A results CSV as a list of dicts with typed values (floats, ints, bools, None)."""
    rows, _ = read_results(path)
    typed = []
    for r in rows:
        t = {}
        for k, v in r.items():
            if k in ("kind", "ensemble", "norms", "backend", "point_id", "note"):
                t[k] = v
            elif k in ("d", "m", "trials"):
                t[k] = int(v)
            elif k == "tail_ok":
                t[k] = {"true": True, "false": False, "": None}[v]
            else:
                t[k] = float(v) if v != "" else None
        typed.append(t)
    return typed
