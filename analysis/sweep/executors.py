"""Where the points run: in this process, on a local process pool, or on a Dask cluster."""

from __future__ import annotations

import collections
import contextlib
import os

from rfkernels.workers import end_with

from ..comparison import evaluate_point
from ..points import point_id, point_seed
from .folder import SweepIOError

#: Seconds to wait for a Dask scheduler to answer.
DASK_CONNECT_TIMEOUT = 5.0
#: Points submitted and unfinished at once, per local worker or Dask worker thread.
WINDOW = 4
#: Points held (unfinished, or done and waiting for an earlier point, as rows are written in
#: grid order) per point of the window; what a killed sweep can lose unwritten.
HOLD = 16
#: The smallest number of points held, and of a Dask window.
MIN_HOLD = 64


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


def pool_options(lock):
    """``ProcessPoolExecutor`` keyword arguments for the sweep's workers (:func:`init_worker`)."""
    import multiprocessing

    context = multiprocessing.get_context()
    direct = context.get_start_method() != "forkserver"  # the sweep is the workers' parent
    return {"mp_context": context, "initializer": init_worker,
            "initargs": (lock.fd, lock.inode, os.getpid(), direct)}


def init_worker(lock_fd, lock_inode, sweep_pid, direct=True):
    """Pool initializer: forget the folder's lock and die with the sweep process.

    A worker blocks on its task queue while the sweep lives; were the sweep
    killed (``kill -9``), it would block for ever, reparented. So each
    worker asks the kernel for SIGKILL when its parent dies (Linux
    ``PR_SET_PDEATHSIG``) and, everywhere, watches from a thread that its
    parent is still the process it started under.
    """
    forget_lock(lock_fd, lock_inode)
    # the parent: the sweep, or (``direct`` False) a forkserver that dies with it
    end_with(sweep_pid, "rfkernels-sweep-watch-parent", direct)


def forget_lock(fd, inode):
    """Close a forked worker's copy of the lock descriptor, so the lock dies with the
    sweep process and not with its last worker."""
    try:
        st = os.fstat(fd)
    except OSError:
        return
    if (st.st_dev, st.st_ino) == inode:
        os.close(fd)


def worker_died():
    """The error of a sweep whose pool lost a worker process."""
    return RuntimeError("a worker process of the sweep died (killed, or out of memory?); the rows "
                        "done so far are kept: rerun with --resume to continue")


def run_local(todo, run, record):
    """Evaluate ``todo`` (``(position, point)`` pairs) here, recording each row in turn."""
    for i, p in todo:
        record(i, run_point(p, run))


def run_pool(todo, run, record, workers, lock):
    """Evaluate ``todo`` on ``workers`` local processes, recording rows in the order of ``todo``.

    At most :data:`WINDOW` points per worker are in the pool at once and
    :data:`HOLD` times more are held (never one task per grid point). When
    a worker dies the rows done so far are recorded, then
    :func:`worker_died` is raised.
    """
    import queue
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    finished = queue.SimpleQueue()
    with ProcessPoolExecutor(max_workers=workers, **pool_options(lock)) as pool:

        def submit(point):
            fut = pool.submit(run_point, point, run)
            fut.add_done_callback(finished.put)
            return fut

        try:
            window = WINDOW * workers
            in_todo_order(todo, submit, finished.get, record, window, max(MIN_HOLD, HOLD * window))
        except BrokenProcessPool:
            raise worker_died() from None


def in_todo_order(todo, submit, wait_one, record, window, hold):
    """Run the points of ``todo`` with at most ``window`` unfinished and ``hold`` unrecorded,
    recording each row in the order of ``todo``.

    ``submit(point)`` returns a future; ``wait_one()`` blocks until one more
    of the submitted futures has finished (each is reported once). When a
    point fails, the rows already done after it are recorded before its
    error is raised (a resume then redoes only the points that failed).
    """
    line = collections.deque()  # (position, future), in the order of todo
    todo = iter(todo)
    unreported = 0  # submitted, and not yet reported by wait_one
    more = True
    try:
        while True:
            while more and unreported < window and len(line) < hold:
                item = next(todo, None)
                if item is None:
                    more = False
                    break
                line.append((item[0], submit(item[1])))
                unreported += 1
            if not line:
                return
            wait_one()
            unreported -= 1
            while line and line[0][1].done():
                i, fut = line.popleft()
                try:
                    row = fut.result()
                except BaseException:
                    _record_finished(line, record)
                    raise
                record(i, row)
    finally:
        for _, fut in line:
            fut.cancel()


def _record_finished(line, record):
    """Record the rows of the futures in ``line`` that finished well; cancel the others."""
    while line:
        i, fut = line.popleft()
        if fut.done() and not fut.cancelled() and fut.exception() is None:
            record(i, fut.result())
        else:
            fut.cancel()


@contextlib.contextmanager
def dask_client(scheduler, client):
    """The client to use (None: local execution); one made for ``scheduler`` is closed after."""
    if scheduler is None:
        yield client
        return
    try:
        from distributed import Client
    except ImportError:
        raise ImportError("Dask execution needs the dask extra: pip install 'rfkernels[dask]'") from None
    import time

    start = time.monotonic()
    try:
        own = Client(scheduler, timeout=DASK_CONNECT_TIMEOUT)
    except (OSError, TimeoutError, ValueError) as exc:  # the time it really waited: a refused
        waited = time.monotonic() - start               # address fails before the timeout
        raise SweepIOError(f"cannot reach the Dask scheduler at {scheduler} (waited "
                           f"{waited:.1f} s): {' '.join(str(exc).split())}") from None
    try:
        yield own
    finally:
        own.close()


def run_dask(todo, run, record, client):
    """Evaluate ``todo`` on a Dask cluster, recording rows in the order of ``todo``.

    Points are submitted as the cluster finishes others: at most
    :data:`WINDOW` per worker thread (and at least :data:`MIN_HOLD`)
    unfinished at once, never one future per grid point.
    """
    from distributed import as_completed

    try:
        threads = sum(client.nthreads().values())
    except Exception:  # an unusual client: a window of the minimum size
        threads = 1
    window = max(MIN_HOLD, WINDOW * threads)
    finished = as_completed()

    def submit(point):
        fut = client.submit(run_point, point, run, pure=False)
        finished.add(fut)
        return fut

    in_todo_order(todo, submit, lambda: next(finished), record, window, HOLD * window)
