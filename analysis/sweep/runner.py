"""Running a sweep: the checks before any work, the folder's state, and the loop over points."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass

import numpy as np

from rfkernels.storage import atomic_write, git_revision, package_versions
from rfkernels.validation import check_memory

from .checks import check_geometries, check_point_memory
from .executors import dask_client, run_dask, run_local, run_pool
from .folder import (
    Appender,
    FolderLock,
    SweepIOError,
    folder_io,
    make_folder,
    remove_folders,
)
from .grid import points_to_do
from .order import rewrite_in_grid_order
from .rows import COLUMNS, HEADER, row_line
from .spec import SweepError, SweepSpec
from .table import ResultsTable, upgrade_table
from .theory_only import theory_blocks

RESULTS_NAME = "results.csv"
SIDECAR_NAME = "sweep.json"
FORMAT = "rfkernels-sweep/1"
#: Bytes a resume holds whatever the grid (a block of rows being checked), beside a byte
#: per grid point (its flag: done or not).
_RESUME_BYTES = 256 << 20


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
    check_geometries(spec)
    check_point_memory(spec, workers, remote=scheduler is not None or client is not None)

    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    created = make_folder(out_dir)
    try:
        lock = FolderLock(out_dir)
    except BaseException:
        remove_folders(created)
        raise
    new_files, state = [], {"rows": 0}
    try:
        before = _prepare_out(out_dir, spec, resume)
        new_files = [p for p in (results, sidecar) if not os.path.exists(p)]
        with dask_client(scheduler, client) as dask:
            how = _How(workers, dask, lock, progress, scheduler, client)
            seconds, order = _run(spec, out_dir, before, how, state)
        with folder_io(out_dir):
            if order.breaks:
                rewrite_in_grid_order(results, spec, order.header_bytes, order.run_starts())
            meta = _meta(spec, how, "complete")
            meta["timings"] = {
                "wall_seconds_this_run": time.time() - started,
                "point_seconds_total": seconds + (before.seconds if before else 0.0),
                "points_this_run": len(spec.points()) - (before.count if before else 0)}
            atomic_write(sidecar, _json(meta))
    except BaseException as exc:
        rows = state["rows"]
        if rows == 0:  # nothing computed: leave the folder as this run found it
            for path in new_files:
                if os.path.exists(path):
                    os.unlink(path)
        lock.release()
        if rows == 0:
            remove_folders(created)
        if isinstance(exc, SweepIOError) and isinstance(exc.__cause__, OSError) and rows:
            raise SweepIOError(f"{exc}; the {rows} rows written before are kept: "
                               "rerun with --resume to continue") from exc.__cause__
        raise
    lock.release()
    return results


@dataclass(frozen=True)
class _How:
    """Where and how the points of one run go (what the sidecar records of it)."""

    workers: int
    client: object  # a distributed.Client, or None: local
    lock: FolderLock
    progress: object
    scheduler: object = None
    given_client: object = None


class _Order:
    """Where the rows of the table break grid order: the table needs a rewrite if anywhere."""

    def __init__(self, before):
        self.header_bytes = before.header_bytes if before else len(HEADER.encode())
        self.last = before.last if before else -1
        self.before = before.run_starts if before else np.zeros(0, dtype=np.int64)
        self.new = []  # byte offsets of this run's rows that break the order
        self.breaks = bool(self.before.size)

    def note(self, first, last, offset):
        """Rows of grid positions ``first`` to ``last`` (increasing) are appended at ``offset``."""
        if first < self.last:
            self.new.append(offset)
            self.breaks = True
        self.last = last

    def run_starts(self):
        return np.concatenate((self.before, np.asarray(self.new, dtype=np.int64)))


#: Why a sidecar value is null, by its dotted key (``null_reasons`` records one per null).
NULL_REASONS = {
    "run.chunk": "not given: each backend's default chunk (rfkernels.engine.default_chunk)",
    "execution.scheduler": "no Dask scheduler: a local run",
    "git_revision": "not run from a git checkout",
}


def _meta(spec, how, status):
    meta = {
        "format": FORMAT, "fingerprint": spec.fingerprint(), **spec.to_dict(),
        "root_seed": spec.run["seed"], "n_points": len(spec.points()), "columns": list(COLUMNS),
        "versions": package_versions(), "git_revision": git_revision(),
        "backend": spec.grid["backend"], "status": status,
        "execution": {"workers": how.workers,
                      "scheduler": how.scheduler or (None if how.given_client is None
                                                     else "client")},
    }
    meta["null_reasons"] = {key: NULL_REASONS.get(key, "not given") for key in _null_keys(meta)}
    return meta


def _null_keys(value, prefix=""):
    """Dotted keys of the nulls in nested mappings."""
    if isinstance(value, dict):
        return [k for key, v in value.items() for k in _null_keys(v, f"{prefix}{key}.")]
    return [prefix[:-1]] if value is None else []


def _run(spec, out_dir, before, how, state):
    """Write the sidecar and header if new, then the row of every point not done ``before``.

    Rows go out in grid order (Monte Carlo ones as the points finish, held
    back only behind an unfinished earlier point). Returns ``(seconds of
    the rows written, their _Order)``; ``state["rows"]`` counts the rows
    written so far.
    """
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    with folder_io(out_dir):
        if not os.path.exists(sidecar):
            atomic_write(sidecar, _json(_meta(spec, how, "running")))
        if not os.path.exists(results):
            atomic_write(results, HEADER)
    done = before.done if before else None
    bar = _progress_bar(len(spec.points()), before.count if before else 0, how.progress)
    appender = Appender(results, out_dir, before.newline if before else "\n")
    order, seconds = _Order(before), 0.0

    def write(text, first, last, rows):
        order.note(first, last, appender.size)
        appender.append(text, rows)
        state["rows"] = appender.rows
        bar.update(rows)

    def record(i, row):
        nonlocal seconds
        write(row_line(row), i, i, 1)
        seconds += row["seconds"]

    try:
        if spec.run["theory_only"]:  # blocks of rows in grid order
            blocks = theory_blocks(spec, done, how.workers, how.lock)
            try:
                for text, positions in blocks:
                    if positions.size:
                        write(text, int(positions[0]), int(positions[-1]), positions.size)
            finally:
                blocks.close()  # a pool of workers: shut down now, not when collected
        elif how.client is not None:
            run_dask(points_to_do(spec, done), spec.run, record, how.client)
        elif how.workers > 1:
            run_pool(points_to_do(spec, done), spec.run, record, how.workers, how.lock)
        else:
            run_local(points_to_do(spec, done), spec.run, record)
    finally:
        try:
            appender.close()
        finally:
            bar.close()
    return seconds, order


def _prepare_out(out_dir, spec, resume):
    """Check what ``out_dir`` holds (the lock held); cut a torn last line.

    Returns the :class:`~rfkernels.analysis.sweep.table.ResultsTable` of the
    rows done (with a flag per grid point), or None when there are none yet.
    """
    results = os.path.join(out_dir, RESULTS_NAME)
    sidecar = os.path.join(out_dir, SIDECAR_NAME)
    has_results, has_sidecar = os.path.exists(results), os.path.exists(sidecar)
    if not has_results and not has_sidecar:
        return None
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
        return None
    n = len(spec.points())
    check_memory(_RESUME_BYTES + n, f"resuming a sweep of {n} points")
    with folder_io(out_dir, "read"):
        table = ResultsTable(results, spec, keep=None)
    if table.torn:  # drop the torn line of a killed run
        with folder_io(out_dir):
            os.truncate(results, table.good_bytes)
    if table.legacy:  # a table begun before the kernel axes: the current columns, then go on
        with folder_io(out_dir):
            upgrade_table(results, table.newline)
            meta["columns"] = list(COLUMNS)
            atomic_write(sidecar, _json(meta))
        with folder_io(out_dir, "read"):
            table = ResultsTable(results, spec, keep=None)
    return table


def _json(meta):
    return json.dumps(meta, indent=1, allow_nan=False) + "\n"


def _progress_bar(total, initial, progress):
    from tqdm.auto import tqdm

    disable = (not sys.stderr.isatty()) if progress is None else not progress
    return tqdm(total=total, initial=initial, disable=disable, unit="point", desc="sweep")
