"""Worker processes that end with their parent, even after ``kill -9`` of the parent.

A pool worker blocked on its task queue outlives a parent killed with
SIGKILL (it is reparented and waits for ever). :func:`die_with_parent`, called
in a pool's initializer (through :func:`end_with`), asks Linux to send the worker SIGKILL when its
parent dies (``prctl(PR_SET_PDEATHSIG)``) and, everywhere, starts a thread
that ends the worker once its parent pid changes. Used by the sweep's pool
(:mod:`rfkernels.analysis.sweep.executors`), :func:`map_on_processes` and the figures' pool
(:mod:`rfkernels.figures`).

Threads. :func:`map_in_order` runs independent items of one computation
(each owning its randomness) on this process's threads, :func:`thread_count`
of them, with the same numbers in the same order as a loop.

Processes. :func:`map_on_processes` runs such items on a local process pool
where the items hold the GIL too long for threads (many small NumPy steps:
the heads of ``diagnose``), with the same numbers in the same order.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

#: ``prctl`` option: the signal the kernel sends a process when its parent dies (Linux).
PR_SET_PDEATHSIG = 1
#: Seconds between two looks of the watch thread at the parent's pid.
PARENT_POLL = 0.5


def usable_cpus():
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_count():
    """Threads a parallel section of this process may use: Numba's thread count.

    Numba's default is the usable CPUs (or ``NUMBA_NUM_THREADS``); the
    figures' pool sets it per worker (its CPUs over its workers).
    """
    try:
        import numba

        return max(1, int(numba.get_num_threads()))
    except Exception:  # noqa: BLE001 - no working Numba: one thread
        return 1


def map_in_order(fn, items, threads=None, name="rfkernels"):
    """``[fn(item) for item in items]`` on up to ``threads`` threads (default :func:`thread_count`).

    For work that releases the GIL (NumPy, BLAS, LAPACK, Numba) and whose
    items are independent, each drawing from its own seed: the results are
    those of the loop, in its order. While more than one thread runs, BLAS
    is limited to one thread (:mod:`threadpoolctl`), so that the threads do
    not oversubscribe the CPUs. An exception of one item is raised after
    the items already running end.
    """
    items = list(items)
    threads = min(thread_count() if threads is None else int(threads), len(items))
    if threads <= 1:
        return [fn(item) for item in items]
    from concurrent.futures import ThreadPoolExecutor

    from threadpoolctl import threadpool_limits

    with threadpool_limits(limits=1, user_api="blas"), \
            ThreadPoolExecutor(threads, thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))


def map_on_processes(fn, shared, items, processes, done=None):
    """``[fn(shared, item) for item in items]`` on ``processes`` local worker processes, in order.

    ``shared`` reaches each worker once (inherited where the start method
    forks, pickled otherwise); ``fn`` must be a module-level function. The
    workers ignore SIGINT (Ctrl-C reaches this process, which stops them) and
    end with this process (:func:`die_with_parent`). An exception here
    (Ctrl-C's KeyboardInterrupt) or of an item terminates the workers at
    once and is raised. ``done()`` is called here after each item, in order.
    """
    import multiprocessing

    context = multiprocessing.get_context()
    direct = context.get_start_method() != "forkserver"  # this process is the workers' parent
    pool = context.Pool(processes, initializer=_init_process,
                        initargs=(fn, shared, os.getpid(), direct))
    try:
        results = []
        for result in pool.imap(_call_process, items):
            results.append(result)
            if done is not None:
                done()
    except BaseException:
        pool.terminate()
        raise
    pool.close()
    pool.join()
    return results


#: In a worker of :func:`map_on_processes`: (fn, shared).
_TASK = None


def _init_process(fn, shared, parent_pid, direct):
    global _TASK
    _TASK = (fn, shared)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with(parent_pid, "rfkernels-pool-watch-parent", direct)


def _call_process(item):
    fn, shared = _TASK
    return fn(shared, item)


def end_with(parent_pid, name, direct=True):
    """In a pool worker: :func:`die_with_parent`, and end at once if the process that started the
    pool, ``parent_pid``, is already gone. ``direct``: it is this process's parent (compare the
    pids); else a forkserver stands between them (ask whether it is alive)."""
    parent = die_with_parent(name)
    if (direct and parent != parent_pid) or not alive(parent_pid):
        die()  # the parent died before the guard was set


def die_with_parent(name="rfkernels-watch-parent", poll=PARENT_POLL):
    """Make this process end when its parent does; returns the parent's pid.

    If the parent is already gone (this process was reparented before the
    guard was set), the process ends at once.
    """
    parent = os.getppid()
    set_parent_death_signal()
    if os.getppid() != parent:
        die()
    threading.Thread(target=watch_parent, args=(parent, poll), daemon=True, name=name).start()
    return parent


def set_parent_death_signal():
    """Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; elsewhere nothing (the watch thread acts)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no libc symbols: the watch thread still acts
        pass


def watch_parent(parent, poll=PARENT_POLL):
    """Loop of the watch thread: end the process as soon as its parent is not ``parent``."""
    while os.getppid() == parent:
        time.sleep(poll)
    die()


def alive(pid):
    """True if a process ``pid`` exists (ours or someone else's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def die():
    """End this process at once, without cleanup (its parent is gone)."""
    os.kill(os.getpid(), signal.SIGKILL)
