"""Memory planning of a diagnosis: its peak bytes per head, checked before any work.

:func:`check_plan_memory` raises :class:`DiagnoseMemoryError` naming the
argument (``draws``, ``pairs``) or option (``--draws``, ``--pairs``) to
reduce and the range that fits, where reducing that one alone is enough.
"""

from __future__ import annotations

from rfkernels.attention import FAVOR_BLOCK
from rfkernels.features import feature_dimension

from ..points import independent_rows
from .inputs import gib, memory_limit

__all__ = ["DiagnoseMemoryError", "PAIR_CHUNK", "ROUNDING_BYTES", "bytes_per_head",
           "check_plan_memory", "memory_units", "pairs_used"]

#: Pairs per chunk of the kernel-level theory.
PAIR_CHUNK = 8192

#: Bytes kept per draw, cell and emulated dtype of the rounding errors (a tuple of floats).
ROUNDING_BYTES = 256


class DiagnoseMemoryError(MemoryError):
    """A planned diagnosis that would not fit in this machine's memory, raised before any work.

    ``render(cli)`` is the message naming the arguments as :func:`diagnose`
    takes them (``draws=...``) or, with ``cli`` true, as ``rfkernels
    diagnose``'s options (``--draws ...``); ``str()`` is the former.
    """

    def __init__(self, render):
        self.render = render
        super().__init__(render(False))


def memory_units(plan):
    """Bytes one head keeps per projection draw and per kernel-level pair."""
    cells = len(plan.preset_kinds) * len(plan.ensembles) * len(plan.ms)
    per_draw = cells * (8 * 5 + ROUNDING_BYTES * (len(plan.dtypes) - 1))
    per_pair = 8 * (2 + len(plan.kinds) * len(plan.ensembles) * len(plan.ms))
    return per_draw, per_pair


def pairs_used(plan):
    """Kernel-level pairs per head: ``pairs``, or all L * L_k pairs when there are no more."""
    return min(plan.pairs, plan.L * plan.Lk)


def bytes_per_head(plan):
    """Peak bytes one head's work allocates (an upper estimate)."""
    r = max(feature_dimension(k, plan.d, m=max(plan.ms)) for k in plan.kinds)
    rows = min(plan.queries, plan.L)
    favor = 8 * (3 * (plan.Lk + min(rows, FAVOR_BLOCK)) * r + 2 * r * plan.dv)
    exact = 8 * (2 * plan.L * plan.dv + 3 * (1 << 22) + plan.Lk * (plan.d + plan.dv))
    per_draw, per_pair = memory_units(plan)
    kernel = 8 * 3 * PAIR_CHUNK * plan.d + per_pair * pairs_used(plan)
    first = 0
    if plan.fo_queries and any(independent_rows(e) for e in plan.ensembles):
        batch = max(1, min(plan.fo_queries, (1 << 23) // (plan.Lk * plan.dv)))
        block = max(1, min(plan.Lk, (1 << 22) // plan.Lk))
        first = 8 * (3 * block * plan.Lk + 4 * plan.Lk * batch * plan.dv + 3 * batch * plan.Lk)
    return exact + kernel + per_draw * plan.draws + max(favor, first)


def check_plan_memory(plan):
    """:class:`DiagnoseMemoryError` where the plan's estimated peak does not fit in memory: naming
    ``draws`` or ``pairs`` and the range that fits when reducing that one alone is enough."""
    limit = memory_limit()
    per_head = bytes_per_head(plan)
    need = plan.workers * per_head
    if limit is None or need <= limit[1]:
        return
    total, allowed = limit
    per_draw, per_pair = memory_units(plan)
    sizes = (f"L={plan.L}, L_k={plan.Lk}, d={plan.d}, m up to {max(plan.ms)}, "
             f"{len(plan.kinds)} kind(s), {len(plan.ensembles)} ensemble(s), "
             f"{len(plan.presets)} preset(s), {len(plan.dtypes) - 1} emulated dtype(s), "
             f"{plan.workers} worker(s)")
    terms = sorted([("draws", plan.draws, plan.draws, per_draw, 2),
                    ("pairs", plan.pairs, pairs_used(plan), per_pair, 1)],
                   key=lambda t: t[2] * t[3], reverse=True)
    for name, given, used, unit, low in terms:
        most = int((allowed / plan.workers - (per_head - used * unit)) // unit)
        if most >= low:
            def render(cli, name=name, given=given, low=low, most=most):
                option = f"--{name}" if cli else name
                return (f"{option}{' ' if cli else '='}{given} needs about {gib(need)} of memory "
                        f"with {sizes}; this machine has {gib(total)}: {option} takes an integer "
                        f"from {low} to {most} here")
            raise DiagnoseMemoryError(render)

    def render(cli):
        m, workers = ("--m", "--workers") if cli else ("m", "workers")
        return (f"diagnose with {sizes} needs about {gib(need)} of memory; this machine has "
                f"{gib(total)}: use a smaller {m}, fewer {workers}, or shorter inputs")
    raise DiagnoseMemoryError(render)
