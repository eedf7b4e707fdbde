"""The figures on a pool of worker processes: longest first, the same files and numbers.

:func:`make_on_pool` runs each figure, and each part shared between
figures (:class:`rfkernels.figures._attention_study.Part`), as a job of a
:class:`concurrent.futures.ProcessPoolExecutor`. A figure's job starts once
the parts it needs are done, with their values preloaded in its worker;
among the jobs ready, the one with the largest declared budget starts first
(longest-processing-time list scheduling; a part counts with the longest
figure waiting for it), so that the workers finish together. Every job is
deterministic from the seed, so where and in what order it runs changes no
number; the results come back in the order asked.
One exception needs care: a figure whose numbers depend on how many threads
BLAS uses (``SAME_BLAS_THREADS = True``: LAPACK's SVD in ``capacity``) runs
with the BLAS threads of the parent, as in one process, and alone (first,
while the other workers start), so that it oversubscribes no CPU.

Workers. They are started with ``spawn`` (a fresh interpreter: a parent
that already ran Numba's OpenMP threads cannot safely fork), with SIGINT
ignored (Ctrl-C is the parent's to handle: it stops them), with the
numerical libraries limited to ``usable CPUs // workers`` threads each
(OpenMP, OpenBLAS, MKL and Numba, through the environment they start with,
then :mod:`threadpoolctl` and :func:`numba.set_num_threads`), and die with
their parent (Linux ``PR_SET_PDEATHSIG``, and everywhere a thread that
watches the parent). On an error, an interrupt or a dead worker the parent
stops every worker before it raises.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field

from rfkernels.workers import end_with, usable_cpus

#: Seconds between the parent's looks at progress and interrupts while jobs run.
POLL = 0.1
#: Seconds a stopped worker is given to end after SIGTERM, before SIGKILL.
STOP_GRACE = 2.0
#: Environment variables that set the thread count of the numerical libraries.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                    "NUMBA_NUM_THREADS")

_WORKER = {}  # in a worker: its progress queue and thread limits (set by init_worker)


def threads_per_worker(workers, cpus=None):
    """Threads each of ``workers`` processes may use: ``cpus // workers``, at least 1."""
    cpus = usable_cpus() if cpus is None else cpus
    return max(1, cpus // max(1, workers))


# ---------------------------------------------------------------------------
# In the worker
# ---------------------------------------------------------------------------

def init_worker(queue, parent_pid, threads):
    """Pool initializer: ignore SIGINT, die with the parent, limit threads, keep the queue."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    end_with(parent_pid, "rfkernels-figures-watch-parent")
    from threadpoolctl import threadpool_limits

    import numba

    numba.set_num_threads(max(1, min(threads, numba.config.NUMBA_NUM_THREADS)))
    _WORKER.update(queue=queue, threads=threads, limits=threadpool_limits(limits=threads))


def _report(message):
    queue = _WORKER.get("queue")
    if queue is not None:
        queue.put(message)


def run_part(part):
    """Job: compute a shared part; returns ``(value, seconds, cpu_seconds)``."""
    start, cpu = time.perf_counter(), time.process_time()
    value = part.compute(progress=lambda n: _report(("part", part.group, n)))
    return value, time.perf_counter() - start, time.process_time() - cpu


def start_worker():
    """Job: nothing (its worker imports this package to find it); started beside an exclusive
    job, so that every worker starts with SIGINT ignored, while the parent ignores it too."""


def run_figure(module_name, out_dir, quick, seed, preloaded, blas_threads):
    """Job: make the figure of module ``module_name`` with ``preloaded`` ``(part, value)`` in cache.

    A figure module with ``SAME_BLAS_THREADS = True`` (its numbers depend on
    how many threads BLAS and LAPACK use) runs with ``blas_threads``, the
    parent's BLAS threads, as it would in one process; any other with the
    worker's limit.
    """
    import importlib

    from threadpoolctl import threadpool_limits

    from ._common import make_figure

    module = importlib.import_module(module_name)
    for part, value in preloaded:
        part.preload(value)

    def progress(done, total):
        _report(("figure", module.NAME, done, total))

    if getattr(module, "SAME_BLAS_THREADS", False) and blas_threads:
        limits = threadpool_limits(limits=blas_threads, user_api="blas")
    else:  # again: libraries loaded since the worker started
        limits = threadpool_limits(limits=_WORKER.get("threads", 1))
    with limits:
        return make_figure(module, out_dir, quick=quick, seed=seed, progress=progress)


def blas_threads():
    """The BLAS threads of this process (:mod:`threadpoolctl`), None without a BLAS."""
    from threadpoolctl import threadpool_info

    counts = [lib["num_threads"] for lib in threadpool_info() if lib.get("user_api") == "blas"]
    return max(counts) if counts else None


# ---------------------------------------------------------------------------
# In the parent
# ---------------------------------------------------------------------------

@dataclass
class Job:
    """A figure (``part`` None) or a shared part, its budget and the parts it waits for.

    An ``exclusive`` job (a figure with ``SAME_BLAS_THREADS``, whose BLAS
    uses every CPU) runs while no other job does.
    """

    name: str
    budget: float
    part: object = None
    needs: list = field(default_factory=list)
    exclusive: bool = False
    rank: float | None = None

    @property
    def priority(self):
        """Its budget plus the longest of the jobs waiting for it (``rank``): the start order."""
        return self.budget if self.rank is None else self.rank


def jobs_of(names, needs, budgets, exclusive=()):
    """The jobs of figures ``names`` (report order) with ``needs[name]`` parts each.

    A part is a job of its own, listed once; ``budgets[name]`` is a figure's
    own budget (its parts excluded); the figures in ``exclusive`` run alone.
    """
    parts = list(dict.fromkeys(p for n in names for p in needs.get(n, ())))
    figures = [Job(n, budgets[n], needs=list(needs.get(n, ())), exclusive=n in exclusive)
               for n in names]
    return [Job(p.group, p.budget, part=p,
                rank=p.budget + max((f.budget for f in figures if p in f.needs), default=0.0))
            for p in parts] + figures


class Spawning:
    """While workers start: SIGINT ignored (a spawned worker starts so) and their thread counts
    in the environment (a user's smaller count is kept); :meth:`restore` undoes both."""

    def __init__(self, threads):
        self.saved = {k: os.environ.get(k) for k in THREAD_VARIABLES}
        for k, v in self.saved.items():
            try:
                given = int(v) if v else threads
            except ValueError:
                given = threads
            os.environ[k] = str(max(1, min(given, threads)))
        self.main = threading.current_thread() is threading.main_thread()
        self.handler = signal.signal(signal.SIGINT, signal.SIG_IGN) if self.main else None

    def restore(self):
        """Undo (once; later calls do nothing)."""
        if self.saved is None:
            return
        if self.main:
            signal.signal(signal.SIGINT, self.handler)
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        self.saved = None


class PoolRun:
    """The parent's side of :func:`make_on_pool`: submit by budget, gather, report progress."""

    def __init__(self, jobs, workers, figure_args, progress, check, module_names=None):
        self.waiting = list(jobs)  # in the order given: ties keep it
        self.workers = workers
        self.figure_args = figure_args  # (out_dir, quick, seed), then the parent's BLAS threads
        self.module_names = module_names or {}  # figure name -> its module's name
        self.progress = progress
        self.check = check
        self.values = {}  # part -> (value, seconds, cpu seconds)
        self.results = {}
        self.running = {}  # future -> job
        self.submitted = 0
        self.group_done, self.group_total = {}, {}
        for j in jobs:
            if j.part is not None:
                self.group_total[j.name] = self.group_total.get(j.name, 0) + j.part.units

    def ready(self):
        return [j for j in self.waiting if all(p in self.values for p in j.needs)]

    def submit_ready(self, pool):
        """Start the ready jobs, highest :attr:`Job.priority` first, while a worker is free.

        An exclusive job starts only when nothing runs (so, in practice,
        first: the other workers then only start), and nothing starts beside it.
        """
        if any(j.exclusive for j in self.running.values()):
            return
        ready = sorted(self.ready(), key=lambda j: -j.priority)  # stable: ties in report order
        alone = [j for j in ready if j.exclusive]
        if alone and not self.running:
            first = not self.submitted
            self.submit(pool, alone[0])
            for _ in range(self.workers - 1 if first else 0):
                self.running[pool.submit(start_worker)] = Job("", 0.0)
            return
        for job in [j for j in ready if not j.exclusive][:self.workers - len(self.running)]:
            self.submit(pool, job)

    def submit(self, pool, job):
        self.waiting.remove(job)
        self.submitted += 1
        if job.part is not None:
            fut = pool.submit(run_part, job.part)
        else:
            preloaded = [(p, self.values[p][0]) for p in job.needs]
            out_dir, quick, seed, blas = self.figure_args
            module = self.module_names.get(job.name, job.name)
            fut = pool.submit(run_figure, module, out_dir, quick, seed, preloaded, blas)
        self.running[fut] = job

    def collect(self, fut):
        result = fut.result()  # a worker's error is raised here, its job still listed as running
        job = self.running.pop(fut)
        if job.part is not None:
            self.values[job.part] = result
        elif job.name:  # not a worker's start
            self.results[job.name] = result

    def drain(self, queue):
        """Pass on the progress the workers reported (a ``SimpleQueue``: no feeder thread)."""
        while not queue.empty():
            message = queue.get()
            if self.progress is None:
                continue
            if message[0] == "part":
                group = message[1]
                self.group_done[group] = self.group_done.get(group, 0) + message[2]
                self.progress(group, self.group_done[group], self.group_total[group])
            else:
                self.progress(*message[1:])

    def run(self, pool, queue, started):
        """Submit and gather until every job is done; ``started()`` once the first are submitted."""
        from concurrent.futures import FIRST_COMPLETED, wait

        self.submit_ready(pool)
        started()
        while self.running:
            done, _ = wait(list(self.running), timeout=POLL, return_when=FIRST_COMPLETED)
            self.drain(queue)
            self.check()
            for fut in done:
                self.collect(fut)
            self.submit_ready(pool)
        self.drain(queue)

    def owned_times(self, needs, names):
        """Each part's seconds added to the first figure in ``names`` that needs it."""
        seen = set()
        for name in names:
            res = self.results[name]
            for part in needs.get(name, ()):
                if part in seen or part not in self.values:
                    continue
                seen.add(part)
                _, seconds, cpu = self.values[part]
                res.seconds = (res.seconds or 0.0) + seconds
                res.cpu_seconds = (res.cpu_seconds or 0.0) + cpu


def make_on_pool(modules, needs, out_dir, *, quick, seed, progress, workers, check):
    """Make the figures of ``modules`` ({name: module}) on ``workers`` processes.

    Returns {name: FigureResult} in the order of ``modules``. ``needs[name]``:
    the shared parts figure ``name`` uses; each module's ``BUDGET[quick]``
    is its own budget; ``progress(name, done, total)`` as a figure or a
    group of parts advances; ``check()`` raises ``KeyboardInterrupt`` after
    an interrupt (see :mod:`rfkernels.figures._interrupt`).
    """
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    names = list(modules)
    alone = {n for n, m in modules.items() if getattr(m, "SAME_BLAS_THREADS", False)}
    jobs = jobs_of(names, needs, {n: m.BUDGET[bool(quick)] for n, m in modules.items()}, alone)
    workers = max(1, min(workers, len(jobs)))
    threads = threads_per_worker(workers)
    context = multiprocessing.get_context("spawn")
    queue = context.SimpleQueue()
    before = set(multiprocessing.active_children())
    state = PoolRun(jobs, workers, (out_dir, quick, seed, blas_threads()), progress, check,
                    {n: m.__name__ for n, m in modules.items()})
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=context, initializer=init_worker,
                               initargs=(queue, os.getpid(), threads))
    try:
        spawning = Spawning(threads)
        try:
            state.run(pool, queue, started=spawning.restore)
        finally:
            spawning.restore()
        pool.shutdown(wait=True)
    except BrokenProcessPool:
        stop_workers(pool, before)
        running = ", ".join(dict.fromkeys(j.name for j in state.running.values() if j.name))
        raise RuntimeError(f"a worker process of rfkernels figures died (killed, or out of "
                           f"memory?); the jobs running were: {running or 'none'}") from None
    except BaseException:
        stop_workers(pool, before)
        raise
    finally:
        queue.close()
    state.owned_times(needs, names)
    return {n: state.results[n] for n in names}


def stop_workers(pool, before):
    """Cancel what has not started and end the pool's worker processes (SIGTERM, then SIGKILL)."""
    import multiprocessing

    pool.shutdown(wait=False, cancel_futures=True)
    procs = [p for p in multiprocessing.active_children() if p not in before]
    for p in procs:
        with contextlib.suppress(OSError, ValueError):
            p.terminate()
    deadline = time.monotonic() + STOP_GRACE
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            with contextlib.suppress(OSError, ValueError):
                p.kill()
            p.join(STOP_GRACE)
    pool.shutdown(wait=True)
