"""The engine's kernels the Monte Carlo figures run: compiled once, up front, on the pool.

A figure module whose Monte Carlo points run on the Numba engine lists its
estimators in ``KERNELS``, ``(kind, ensemble, norms)`` triples
(``tests/test_figures_kernels.py`` checks each list against the kernels its
``compute`` runs). On a pool of workers (``rfkernels figures --workers N``)
every kernel of the run that is not yet in Numba's disk cache is a
:class:`Kernel` part, one job: compiled once, on any worker and in parallel
with the other jobs, before the figures that need it start, which then load
it from the cache instead of each compiling it again. Warm (every kernel
cached) there is no such job; in one process a figure compiles what it
needs when it first runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

from rfkernels import engine


@dataclass(frozen=True, eq=False)
class Kernel:
    """The Numba kernel of one estimator, as a shared part of the figures that run it.

    Parts are equal where their kernel is (:func:`rfkernels.engine.kernel_key`:
    trig and offset share one), so that a pool compiles it once.
    """

    kind: str
    ensemble: str
    norms: str

    @property
    def key(self):
        return engine.kernel_key(self.kind, self.ensemble, self.norms)

    def __eq__(self, other):
        return isinstance(other, Kernel) and self.key == other.key

    def __hash__(self):
        return hash(self.key)

    #: The progress bar the kernels report to (``rfkernels figures``).
    group = "compiling engine kernels"
    #: Declared warm seconds: warm, the kernel is in the cache and no job is made.
    budget = 0.0
    units = 1

    def compute(self, progress=None):
        """Compile the kernel into Numba's disk cache; the value is whether it compiled."""
        compiled = engine.compile_kernel(self.kind, self.ensemble, self.norms)
        if progress is not None:
            progress(1)
        return compiled

    def preload(self, value):
        """Nothing: the figure's process loads the kernel from Numba's disk cache."""


def pending(module):
    """The :class:`Kernel` parts of ``module.KERNELS`` still to compile, one per kernel."""
    parts = (Kernel(*triple) for triple in getattr(module, "KERNELS", ()))
    return list(dict.fromkeys(p for p in parts if engine.kernel_pending(p.kind, p.ensemble, p.norms)))
