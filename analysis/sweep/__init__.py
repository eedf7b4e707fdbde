"""Resumable sweeps over grids of m, d, angles, norms, estimators, ensembles and target kernels.

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
    Pool workers die with the sweep process (Linux ``PR_SET_PDEATHSIG``,
    and everywhere a thread that watches their parent).

Streaming
    The grid is planned and run as a stream: points are made as they are
    taken, a pool or a Dask cluster holds a bounded window of them
    (:data:`~rfkernels.analysis.sweep.executors.WINDOW` per worker, at
    most :data:`~rfkernels.analysis.sweep.executors.HOLD` times more done
    and waiting), and rows are written in grid order as they come, so the
    memory of a sweep does not grow with its grid and the first row is out
    as soon as its point is done. A resume records the finished points as
    one flag per grid point.

Resuming
    Rows are appended as complete lines, one ``write`` per row (per block of
    rows in theory-only sweeps), and ``fsync``-ed at most once per second
    and when the sweep ends or fails. A killed process (even ``kill -9``)
    loses no written row and leaves at most a torn last line, which
    ``--resume`` drops before skipping the finished points; an operating
    system crash can lose the rows written since the last ``fsync`` (and a
    kill the rows done but held behind an unfinished earlier point). A write
    that fails (a full disk) is cut back to the last complete line. When
    every point is done the table is in grid order: rewritten (a merge of
    its sorted runs, streamed, then an atomic ``os.replace``) unless its
    rows were appended in that order, so a resumed sweep yields the same
    file as an uninterrupted one. Every resumed row is checked (types,
    finiteness, and that its ``point_id`` is the point of this grid its
    values say); a results file that belongs to another grid, or that is
    corrupt, is reported with the line number and never touched. A table
    whose lines end in CRLF (as some tools rewrite them) is read as well,
    and rows appended to it end in CRLF too.

Target kernels
    The ``kernel`` axis (``"softmax"``, the default, or ``"gaussian"``) and
    its ``gamma`` (required with gaussian, refused without it; one gamma in
    a grid of both kernels, whose softmax rows have gamma empty) add the
    ``kernel``, ``gamma`` and ``output_dimension`` columns. A softmax point
    keeps its identity and a softmax grid its fingerprint, so a sweep begun
    before the kernel axes resumes: its table (without those columns) is
    first rewritten with them (``table.upgrade_table``, atomic).

Layout
    :mod:`.spec` (the grid and its TOML file), :mod:`.grid` (the grid as
    arrays, streamed), :mod:`.rows` (a row's CSV text), :mod:`.table`
    (reading and checking a table), :mod:`.order` (a table put in grid
    order), :mod:`.folder` (the lock and durable appends), :mod:`.checks`
    (before any work), :mod:`.executors` (in-process, pool, Dask),
    :mod:`.theory_only` (the vectorised path) and :mod:`.runner`
    (:func:`run_sweep`).
"""

from __future__ import annotations

from .checks import point_memory
from .executors import DASK_CONNECT_TIMEOUT, run_point
from .folder import LOCK_NAME, SYNC_INTERVAL, SweepIOError
from .grid import grid_arrays
from .rows import COLUMNS
from .runner import FORMAT, RESULTS_NAME, SIDECAR_NAME, run_sweep
from .spec import RUN_DEFAULTS, GridPoints, SweepError, SweepSpec
from .table import load_table, read_results
from .theory_only import THEORY_BLOCK, theory_table

__all__ = [
    "COLUMNS",
    "DASK_CONNECT_TIMEOUT",
    "FORMAT",
    "LOCK_NAME",
    "RESULTS_NAME",
    "RUN_DEFAULTS",
    "SIDECAR_NAME",
    "SYNC_INTERVAL",
    "THEORY_BLOCK",
    "GridPoints",
    "SweepError",
    "SweepIOError",
    "SweepSpec",
    "grid_arrays",
    "load_table",
    "point_memory",
    "read_results",
    "run_point",
    "run_sweep",
    "theory_table",
]

# The errors are the package's: tracebacks and pickles name them where users import them.
SweepError.__module__ = SweepIOError.__module__ = __name__
