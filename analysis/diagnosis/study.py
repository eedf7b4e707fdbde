"""One diagnosis: the validated plan, each head's work, its rows and the :class:`Diagnosis`.

:func:`diagnose` checks everything once into a plan, runs the heads (the
kernel level, the attention level, the first-order theory and the rounding
of each requested dtype) and pools them; the conventions are those of the
package, :mod:`rfkernels.analysis.diagnosis`.
"""
from __future__ import annotations

import math
import time

import numpy as np

from rfkernels import theory
from rfkernels.attention import PRESETS, softmax_attention
from rfkernels.presets import causal_presets, preset as preset_entry
from rfkernels.estimators import check_ensemble, check_kind, check_norms, estimator, registry
from rfkernels.features import feature_dimension
from rfkernels.floor import NORMALISER_SD_MAX
from rfkernels.projections import draw_projections, with_extra_rows
from rfkernels.strict_json import json_safe
from rfkernels.validation import check_bool, check_choice, check_int, check_real
from rfkernels.version import __version__
from rfkernels.workers import map_on_processes, usable_cpus

from ..attention_data import (
    check_ensembles,
    check_names,
    check_scale,
    distinct_ints,
    root_entropy,
    seed_index,
)
from ..lean_favor import one_blas_thread
from ..points import independent_rows
from ..precision import precision_reason
from .memory import PAIR_CHUNK, check_plan_memory
from .advice import DEFAULT_TARGET, advise, check_target, pool_heads
from .fields import head_info, head_rows, library_reason, log_quantiles
from .report import POSITION_COLUMNS, markdown_report, null_reason, write_csv
from .rounding import check_dtypes, overflow_rows, precision_rows, rounding_errors
from .positions import (bucket_edges, bucket_means, head_baselines, pooled_positions,
                        position_advice, position_rows, prefix_uniform, stratified_rows)
from .views import floors, first_order, fit_views, view_attention

__all__ = [
    "attention_kinds",
    "diagnose_kinds",
    "DEFAULT_DRAWS",
    "DEFAULT_ENSEMBLES",
    "DEFAULT_M",
    "DEFAULT_PAIRS",
    "DEFAULT_QUERIES",
    "HEAVY_TAIL_U2",
    "NORMALISER_SD_MAX",
    "SPAWN_KEYS",
    "Diagnosis",
    "diagnose",
]

#: Default numbers of projections (r = m or 2m features).
DEFAULT_M = (16, 64, 256)
#: Default ensembles; every registered one may be asked for.
DEFAULT_ENSEMBLES = ("iid", "orthogonal")

#: Default presets: the estimators as stated; the libraries' numerics on request.
DEFAULT_PRESETS = ("rfkernels",)
#: Default projection draws per (m, ensemble) and head.
DEFAULT_DRAWS = 8
#: Default query rows per draw (fresh rows each draw).
DEFAULT_QUERIES = 512
#: Default query-key pairs per head for the kernel-level statistics.
DEFAULT_PAIRS = 20000
#: Default query rows of the first-order theory (its cost is O(rows L_k^2 d_v)).
DEFAULT_FIRST_ORDER_QUERIES = 8
#: |q' + k'|^2 above which a pair is in the heavy-tail regime (MATH.md).
HEAVY_TAIL_U2 = 1.0
#: Bins of the |q' + k'|^2 histogram.
HISTOGRAM_BINS = 40
#: Spawn keys of the randomness, under the root entropy.
SPAWN_KEYS = {
    "values": "(0, head): synthetic V when none is given",
    "pairs": "(1, head): the kernel-level pair sample",
    "rows": "(2, head, draw): the query rows of a draw",
    "projections": "(3, head, draw, m, seed_index(ensemble)): the ensemble's frozen registry index",
    "first_order": "(4, head): the first-order theory's query rows",
    "floor": "(5, head): the draws of every floor of the head (floor=True)",
}


# ---------------------------------------------------------------------------
# Validation: once, here, into a frozen plan
# ---------------------------------------------------------------------------


def _array(value, name, required=True):
    """A real float64 array with at least 2 axes, non-empty and finite (one-line errors)."""
    if value is None:
        if required:
            raise ValueError(f"{name} is missing: diagnose needs queries Q and keys K")
        return None
    arr = check_real(value, name)
    if arr.ndim < 2:
        raise ValueError(f"{name} must have shape (L, d) or (..., L, d); got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {arr.shape}); every axis needs length >= 1")
    if not bool(np.all(np.isfinite(arr))):
        raise ValueError(f"{name} must be finite: it holds {int(np.sum(~np.isfinite(arr)))} "
                         "inf or NaN entries")
    return arr


def _check_shapes(q, k, v):
    """The broadcast leading (head) shape, after the one-line checks of d, L_k and the heads."""
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"dimension mismatch: Q has d={q.shape[-1]}, K has d={k.shape[-1]}; "
                         "queries and keys must share d")
    if v is not None and v.shape[-2] != k.shape[-2]:
        raise ValueError(f"V must have one row per key: K has L_k={k.shape[-2]} rows, "
                         f"V has {v.shape[-2]}")
    shapes = [q.shape[:-2], k.shape[:-2]] + ([] if v is None else [v.shape[:-2]])
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        names = "Q, K" + ("" if v is None else ", V")
        raise ValueError(f"the leading (batch, head) axes of {names} do not broadcast: "
                         f"{', '.join(str(tuple(s)) for s in shapes)}") from None


class _Plan:
    """The validated arguments of one diagnosis (read-only by convention: the layers trust it)."""

    __slots__ = ("L", "Lk", "d", "dv", "heads", "head_shape", "ms", "kinds", "ensembles",
                 "presets", "preset_kinds", "norms", "scale", "draws", "queries", "pairs", "fo_queries",
                 "target", "budgets", "entropy", "workers", "synthetic_v", "dtypes", "floor",
                 "causal")

    def __init__(self, **kw):
        for key, value in kw.items():
            setattr(self, key, value)


#: Outputs per projection of the kinds diagnose runs by default (the hybrid's 27 would multiply
#: the run's cost by about 27 at every m: it runs when asked for, ``--kind hybrid``).
DEFAULT_MAX_OUTPUTS = 2


def _one_map_attention(k):
    return not k.random_phase and k.pair_transform is None and not k.population


def attention_kinds():
    """The kinds diagnose runs by default: all but those with a random phase (offset), DERF's,
    the data-fitted ones and those spending more than :data:`DEFAULT_MAX_OUTPUTS` outputs per projection."""
    return tuple(k.name for k in registry.entries("kind") if _one_map_attention(k)
                 and k.features_per_projection <= DEFAULT_MAX_OUTPUTS)


def diagnose_kinds():
    """The kinds diagnose takes: :func:`attention_kinds`, the costlier one-map kinds (``hybrid``) and
    the kinds fitted on each head whose attention exists (``saderf``, ``aderf``: isotropic A;
    ``data-tilted``, cross-fitted)."""
    return attention_kinds() + tuple(k.name for k in registry.entries("kind") if _one_map_attention(k)
                                     and k.features_per_projection > DEFAULT_MAX_OUTPUTS) + tuple(
        k.name for k in registry.entries("kind") if k.population and k.diagnose_reason is None)


def _check_diagnose_kind(kind):
    kind = check_kind(kind)
    entry = registry.entry("kind", kind)
    if (entry.pair_transform is not None or entry.population) and kind not in diagnose_kinds():
        fitted = [k.name for k in registry.entries("kind") if k.population and k.diagnose_reason is None]
        raise ValueError(f"kinds: {kind!r}: " + (entry.diagnose_reason or "its parameters are the "
                         f"user's; diagnose fits {' and '.join(map(repr, fitted))} on each head"))
    return kind


def _causal_checks(plan):
    """What a causal diagnosis needs, before any work: one key per query, presets whose causal path
    is transcribed, float64."""
    if plan.L != plan.Lk:
        raise ValueError(f"causal=True needs one key per query (L = L_k); got L={plan.L}, "
                         f"L_k={plan.Lk}")
    bidirectional = [p for p in plan.presets if not preset_entry(p).causal]
    if bidirectional:
        raise ValueError(f"causal=True: preset(s) {', '.join(map(repr, bidirectional))} reproduce "
                         "bidirectional attention only; their causal paths are not transcribed "
                         f"(causal: {', '.join(map(repr, causal_presets()))})")
    if len(plan.dtypes) > 1:
        raise ValueError("causal=True runs in float64 only: the emulated dtypes are for "
                         "bidirectional attention")


def _grid_checks(plan):
    """Every kind x ensemble x m must exist at this d (the registry's own errors), before any work."""
    for kind in plan.kinds:
        if kind not in diagnose_kinds():
            raise ValueError(f"kinds: {kind!r} has random phases drawn with W (a Gaussian-kernel "
                             f"map) and attention does not take it; use 'trig', its paired form")
    for kind in plan.kinds:
        for ens in plan.ensembles:
            estimator(kind, ensemble=ens, norms=plan.norms, d=plan.d)
        fmap = registry.entry("kind", kind).feature_map  # two maps run as another kind (views)
        if len(plan.dtypes) > 1 and not fmap.two_roles and precision_reason(kind) is not None:
            raise ValueError(f"dtypes: {precision_reason(kind)}")
    # a DERF kind runs as OPRF on its transformed head (views), with rfkernels' numerics
    plan.preset_kinds = [(p, kind) for p in plan.presets for kind in plan.kinds
                         if kind in preset_entry(p).kinds]
    if not plan.preset_kinds:
        raise ValueError(f"no preset among {', '.join(map(repr, plan.presets))} offers a kind among "
                         f"{', '.join(map(repr, plan.kinds))} (e.g. 'performer-pytorch' offers "
                         "'positive' only)")


def _plan(Q, K, V, m, kinds, ensembles, presets, norms, scale, draws, queries, pairs,
          first_order_queries, target, budgets, seed, workers, dtypes, floor=False, causal=False):
    q = _array(Q, "Q")
    k = _array(K, "K")
    v = _array(V, "V", required=False)
    head_shape = _check_shapes(q, k, v)
    d = q.shape[-1]
    plan = _Plan(
        L=q.shape[-2], Lk=k.shape[-2], d=d, dv=d if v is None else v.shape[-1],
        heads=int(np.prod(head_shape, dtype=np.int64)), head_shape=head_shape,
        ms=distinct_ints(m, "m"),
        kinds=check_names(kinds, "kinds", _check_diagnose_kind, attention_kinds()),
        ensembles=check_ensembles(ensembles, norms, check_ensemble, DEFAULT_ENSEMBLES),
        presets=check_names(presets, "presets", lambda p: check_choice(p, "presets", PRESETS),
                            DEFAULT_PRESETS),
        preset_kinds=None,
        norms=check_norms(norms),
        scale=1.0 / math.sqrt(d) if scale is None else check_scale(scale, "scale"),
        draws=check_int(draws, "draws", minimum=2),
        queries=check_int(queries, "queries"),
        pairs=check_int(pairs, "pairs"),
        fo_queries=check_int(first_order_queries, "first_order_queries", minimum=0),
        target=check_target(target),
        budgets=None if budgets is None else distinct_ints(budgets, "budgets"),
        entropy=root_entropy(seed),
        workers=None, synthetic_v=v is None, dtypes=check_dtypes(dtypes),
        floor=check_bool(floor, "floor"), causal=check_bool(causal, "causal"),
    )
    if plan.causal:
        _causal_checks(plan)
    if workers is None:
        plan.workers = max(1, min(plan.heads, usable_cpus()))
    else:
        plan.workers = min(check_int(workers, "workers"), plan.heads)
    _grid_checks(plan)
    check_plan_memory(plan)
    return plan, (q, k, v)


# ---------------------------------------------------------------------------
# One head
# ---------------------------------------------------------------------------


def _seed(plan, *key):
    return np.random.SeedSequence(plan.entropy, spawn_key=tuple(int(x) for x in key))


def _remote_head(plan, h, arrays):
    """:func:`_head` in a worker process or on Dask, on one BLAS thread as here: the same numbers."""
    with one_blas_thread():
        return _head(plan, h, arrays, None)


def _pooled_head(shared, h):
    plan, arrays = shared
    return _remote_head(plan, h, arrays)


def _run_heads(plan, arrays, progress, client=None):
    """Every head's results, in order: in this process, on ``plan.workers`` processes, or on Dask.

    Processes, not threads: a head is thousands of small NumPy steps that
    hold the GIL (the default grid on MiniLM's 72 heads, 2 cores, the C
    library's sine and cosine then: 32.7 s in one process, 23.5 s on two
    threads, 18.3 s on two processes). An exception
    here (Ctrl-C's KeyboardInterrupt) or of a head terminates the workers
    at once (:func:`rfkernels.workers.map_on_processes`).
    """
    per_head = 2 + plan.draws * len(plan.ms) * len(plan.ensembles)
    if client is not None:  # one task per head; the arrays go to every worker once
        from distributed import as_completed

        shared = [None if a is None else client.scatter(a, broadcast=True) for a in arrays]
        futures = [client.submit(_remote_head, plan, h, shared, pure=False) for h in range(plan.heads)]
        for _ in as_completed(futures):
            if progress is not None:
                progress(per_head)
        return client.gather(futures)
    if plan.workers == 1:
        return [_head(plan, h, arrays, progress) for h in range(plan.heads)]
    return map_on_processes(_pooled_head, (plan, arrays), range(plan.heads), plan.workers,
                            None if progress is None else lambda: progress(per_head))


def _pair_sample(plan, h):
    """(i, j) indices of the kernel-level pairs and whether they are all the pairs."""
    if plan.causal:  # the pairs of the lower triangle, j <= i, uniformly (t -> (i, j))
        total = plan.L * (plan.L + 1) // 2
        t = (np.arange(total, dtype=np.int64) if total <= plan.pairs else
             np.random.default_rng(_seed(plan, 1, h)).integers(0, total, plan.pairs))
        i = ((np.sqrt(8.0 * t + 1.0) - 1.0) // 2).astype(np.int64)
        i -= (i * (i + 1) // 2 > t)  # the float root's rounding, either way
        i += ((i + 1) * (i + 2) // 2 <= t)
        return i, t - i * (i + 1) // 2, total <= plan.pairs
    total = plan.L * plan.Lk
    if total <= plan.pairs:
        i, j = np.divmod(np.arange(total, dtype=np.int64), plan.Lk)
        return i, j, True
    rng = np.random.default_rng(_seed(plan, 1, h))
    return rng.integers(0, plan.L, plan.pairs), rng.integers(0, plan.Lk, plan.pairs), False


def _kernel_level(plan, h, q, k, views):
    """Per-pair |q'+k'|^2 and the log relative MSE of every (kind, ensemble, m), or their reasons."""
    i, j, all_pairs = _pair_sample(plan, h)
    n = i.size
    u2 = np.empty(n)
    logs = {}
    reasons = {}
    ests = {}
    for kind in plan.kinds:
        for ens in plan.ensembles:
            view = views[kind]
            est = estimator(view.kind, ensemble=ens, norms=plan.norms, batch=True, **view.params)
            if not est.supports.exact_mse:
                reasons[(kind, ens)] = est.supports.exact_mse.reason
            else:
                ests[(kind, ens)] = est
                for m in plan.ms:
                    logs[(kind, ens, m)] = np.empty(n)
    for c0 in range(0, n, PAIR_CHUNK):
        x, y = q[i[c0:c0 + PAIR_CHUNK]], k[j[c0:c0 + PAIR_CHUNK]]
        geom = theory.geometry(x, y)
        sl = slice(c0, c0 + x.shape[0])
        u2[sl] = geom.s
        two_logit = 2.0 * np.einsum("ij,ij->i", x, y)
        for (kind, ens), est in list(ests.items()):
            view = views[kind]
            xv, yv, gv = x, y, geom
            if view.q is not q:  # a DERF kind: OPRF on its transformed head
                xv, yv = view.q[i[c0:c0 + PAIR_CHUNK]], view.k[j[c0:c0 + PAIR_CHUNK]]
                gv = theory.geometry(xv, yv)
            try:
                for m in plan.ms:
                    logs[(kind, ens, m)][sl] = (theory.exact_mse(gv, None, m, est, log=True,
                                                                  vectors=(xv, yv))
                                                - two_logit)
            except OverflowError as exc:  # beyond the theory's range (simplex quadrature)
                reasons[(kind, ens)] = " ".join(str(exc).split())
                del ests[(kind, ens)]
                for m in plan.ms:
                    del logs[(kind, ens, m)]
    return {"u2": u2, "all_pairs": all_pairs, "log_rel": logs, "reasons": reasons}


def _mse(out, exact):
    with np.errstate(over="ignore", invalid="ignore"):
        err = out - exact
        value = float(np.mean(err * err))
    return value if math.isfinite(value) else (math.inf if not np.any(np.isnan(out)) else math.nan)


def _monte_carlo(plan, h, q, k, v, exact, views, progress):
    """Per (preset, kind, ensemble, m), per draw: the MSE, the share of rows with D <= 0, the
    stabiliser's mean and largest share of the normalisers, and whether the features overflowed."""
    cells = [(p, kind, ens, m) for p, kind in plan.preset_kinds for ens in plan.ensembles
             for m in plan.ms]
    out = {c: np.zeros((5, plan.draws)) for c in cells}  # mse, bad, share mean, share max, overflow
    edges = bucket_edges(plan.L)
    by_position = {c: np.zeros((edges.size - 1, plan.draws)) for c in cells} if plan.causal else None
    rounding = {}  # (preset, kind, ensemble, m, dtype) -> per-draw rounding_errors tuples
    for t in range(plan.draws):
        rng = np.random.default_rng(_seed(plan, 2, h, t))
        if plan.causal:  # stratified by position
            rows = stratified_rows(plan.L, plan.queries, rng)
        elif plan.L <= plan.queries:
            rows = np.arange(plan.L)
        else:
            rows = np.sort(rng.choice(plan.L, size=plan.queries, replace=False))
        ex = exact[rows]
        for ens in plan.ensembles:
            for m in plan.ms:
                w = draw_projections(m, plan.d, ensemble=ens, norms=plan.norms,
                                     seed=_seed(plan, 3, h, t, m, seed_index("ensemble", ens)))
                for p, kind in plan.preset_kinds:
                    cell = out[(p, kind, ens, m)]
                    try:  # a DERF kind: OPRF on its transformed head; data-tilted: cross-fitted
                        wk = with_extra_rows(w, kind, _seed(plan, 6, h, t, m, seed_index("ensemble", ens)))
                        res, errors = view_attention(views[kind], rows, v, wk, p, plan.dtypes,
                                                     rounding_errors, plan.causal)
                    except FloatingPointError:  # a library's unshifted features overflow
                        cell[:, t] = (math.inf, 0.0, math.nan, math.nan, 1.0)
                        if by_position is not None:  # the draw failed in every position too
                            by_position[(p, kind, ens, m)][:, t] = math.inf
                        continue
                    share = res.stabiliser_share
                    cell[:, t] = (_mse(res.output, ex), res.n_nonpositive_denominators / rows.size,
                                  math.nan if share is None else float(np.mean(share)),
                                  math.nan if share is None else float(np.max(share)), 0.0)
                    for dt, got in errors.items():
                        rounding.setdefault((p, kind, ens, m, dt), []).append(got)
                    if by_position is not None:
                        with np.errstate(over="ignore", invalid="ignore"):
                            sq = np.mean((res.output - ex) ** 2, axis=1)
                        by_position[(p, kind, ens, m)][:, t] = bucket_means(sq, rows, edges)
                if progress is not None:
                    progress(1)
    return out, rounding, by_position


def _head(plan, h, arrays, progress):
    """Everything of head ``h``: the per-head rows' raw material."""
    idx = np.unravel_index(h, plan.head_shape) if plan.head_shape else ()
    q0, k0, v0 = arrays
    root = math.sqrt(plan.scale)
    q = root * np.broadcast_to(q0, plan.head_shape + q0.shape[-2:])[idx]
    k = root * np.broadcast_to(k0, plan.head_shape + k0.shape[-2:])[idx]
    if v0 is None:
        v = np.random.default_rng(_seed(plan, 0, h)).standard_normal((plan.Lk, plan.dv))
    else:
        v = np.ascontiguousarray(np.broadcast_to(v0, plan.head_shape + v0.shape[-2:])[idx])
    views = fit_views(plan.kinds, q, k)
    fitted = {kind: view.params for kind, view in views.items()}
    kernel = _kernel_level(plan, h, q, k, views)
    if progress is not None:
        progress(1)
    exact = softmax_attention(q, k, v, causal=plan.causal)
    exact_ms = float(np.mean(exact * exact))
    uniform = prefix_uniform(v) if plan.causal else v.mean(axis=0)  # each row the mean of its keys' values
    uniform_mse = float(np.mean((exact - uniform) ** 2))
    heavy = float(np.mean(kernel["u2"] > HEAVY_TAIL_U2))
    mc = _monte_carlo(plan, h, q, k, v, exact, views, progress)
    overflow = []
    if len(plan.dtypes) > 1:  # the thresholds on this head's data, for the first draw's W
        m, ens = max(plan.ms), plan.ensembles[0]
        w = draw_projections(m, plan.d, ensemble=ens, norms=plan.norms, seed=_seed(
            plan, 3, h, 0, m, seed_index("ensemble", ens)))
        overflow = overflow_rows(h, w, plan.preset_kinds, plan.dtypes, views)
    fo = first_order(plan, views, v, _seed(plan, 4, h))
    head_floors = floors(plan, views, v, _seed(plan, 5, h)) if plan.floor else None
    if progress is not None:
        progress(1)
    positions = None
    if plan.causal:
        edges = bucket_edges(plan.L)
        zero, base = head_baselines(exact, v, edges)
        positions = {"cells": mc[2], "edges": edges, "zero": zero, "uniform": base,
                     "iid": {e for e in plan.ensembles if independent_rows(e)},
                     "first_order": {kind: got[3] for kind, got in fo.items()
                                     if not isinstance(got, str)},
                     "first_order_reasons": {kind: got for kind, got in fo.items()
                                             if isinstance(got, str)},
                     "library_reasons": {p: library_reason(p) for p in plan.presets
                                         if not preset_entry(p).exact}}
    return {"head": h, "index": [int(x) for x in idx], "fitted": fitted, "kernel": kernel,
            "exact_ms": exact_ms, "uniform_mse": uniform_mse, "heavy_share": heavy,
            "mc": mc, "first_order": fo, "floors": head_floors, "overflow": overflow,
            "positions": positions}


# ---------------------------------------------------------------------------
# Rows
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# The result and the entry point
# ---------------------------------------------------------------------------


class Diagnosis:
    """Result of :func:`diagnose`.

    Attributes
    ----------
    rows : list of dict
        One per head x preset x kind x ensemble x m (:data:`ROW_COLUMNS`
        and ``params``, the kind's fitted parameters).
    summary : list of dict
        The same keys pooled over heads (``head`` is ``"all"``): MSEs and
        baselines averaged over heads, standard errors combined, and
        ``heads_worse_than_uniform``; the kernel-level statistics of the
        pooled pairs.
    heads : list of dict
        Per head: its index, sizes, ``|q' + k'|^2`` quantiles and histogram
        (edges ``meta["histogram_edges"]``), heavy-tail share, the exact
        output's mean square, the uniform baseline and the fitted parameters.
    advice : dict
        ``{"target": ..., "budget": [...], "best": [...]}``
        (:func:`rfkernels.analysis.diagnosis.advice.advise`) of the pooled
        rows, and with several heads ``"per_head"``: ``[{"head": h, "budget":
        [...]}]``, each head's own budgets (the pooled error is dominated by
        the heads with the largest outputs' errors).
    meta : dict
        Arguments, sizes, seed entropy and spawn keys, version, timings.
    precision : list of dict
        With ``dtypes``: per head x preset x kind x ensemble x m x dtype, the
        rounding MSE (against float64, same W and rows) with its standard
        error, the sampling MSE, their ratio, the share of rows whose
        normaliser failed and the draws whose features overflowed
        (:mod:`rfkernels.analysis.diagnosis.rounding`).
    overflow : list of dict
        With ``dtypes``: per head x preset x kind x dtype, each map's overflow
        and underflow on the head's data for one W, unshifted and as the
        preset computes it (:func:`rfkernels.analysis.precision.overflow_report`).
    positions : list of dict
        With ``causal=True``: per head (and pooled, ``head`` "all") x preset x
        kind x ensemble x m x position bucket, the attention MSE of the
        bucket's rows with its standard error, relative to the bucket's exact
        mean square, its causal uniform baseline and first-order prediction
        (:mod:`rfkernels.analysis.diagnosis.positions`).
    """

    def __init__(self, rows, summary, heads, advice, meta, precision=(), overflow=(), positions=()):
        self.rows, self.summary, self.heads, self.advice, self.meta = rows, summary, heads, advice, meta
        self.precision, self.overflow = list(precision), list(overflow)
        self.positions = list(positions)

    def select(self, table="summary", **where):
        """Rows of ``table`` ("summary" or "rows") whose columns equal the given values."""
        check_choice(table, "table", ("summary", "rows"))
        rows = self.summary if table == "summary" else self.rows
        return [r for r in rows if all(r.get(k) == v for k, v in where.items())]

    def to_dict(self):
        """Everything as strict JSON content: ``meta``, ``heads``, ``summary``, ``advice``, ``rows``.

        ``json.dumps(d, allow_nan=False)`` works: a value beyond float64
        (``inf`` in :attr:`rows`) is null here, and every null of an object
        has its reason in that object's ``"null_reasons"``
        (:func:`rfkernels.analysis.diagnosis.report.null_reason`).
        """
        return json_safe({"meta": self.meta, "heads": self.heads, "summary": self.summary,
                          "advice": self.advice, "rows": self.rows, "precision": self.precision,
                          "overflow": self.overflow, "positions": self.positions},
                         explain=null_reason)

    def to_csv(self, file=None, table="rows"):
        """``table`` ("rows", "summary" or, causal, "positions") as CSV to a path or text file; no
        file: the text."""
        check_choice(table, "table", ("summary", "rows", "positions"))
        if table == "positions":
            return write_csv(self.positions, file, columns=POSITION_COLUMNS)
        return write_csv(self.summary if table == "summary" else self.rows, file)

    def to_markdown(self, provenance=None):
        """The report as Markdown; ``provenance`` (a dict: inputs, command) heads it."""
        return markdown_report(self, provenance)


def _meta(plan, edges, seconds):
    return {
        "study": "diagnose", "version": __version__,
        "kernel": "exp(scale q.k), scale split symmetrically: q' = sqrt(scale) q, k' = sqrt(scale) k",
        "scale": plan.scale, "L": plan.L, "L_k": plan.Lk, "d": plan.d, "d_v": plan.dv,
        "head_shape": list(plan.head_shape), "heads": plan.heads,
        "values": ("synthetic: N(0, 1) entries, d_v = d (no V given)" if plan.synthetic_v
                   else "given"),
        "m_values": list(plan.ms), "kinds": list(plan.kinds), "ensembles": list(plan.ensembles),
        "presets": list(plan.presets), "norms": plan.norms, "draws": plan.draws,
        "dtypes": list(plan.dtypes),
        "queries": min(plan.queries, plan.L), "pairs": plan.pairs,
        "first_order_queries": plan.fo_queries, "target": plan.target, "floor": plan.floor,
        "heavy_tail_u2": HEAVY_TAIL_U2, "normaliser_sd_max": NORMALISER_SD_MAX,
        "histogram_edges": [float(e) for e in edges],
        "attention": (("causal (prefix sums; rows sampled stratified by position)" if plan.causal
                       else "bidirectional") + "; rows with a normaliser <= 0 divided anyway and "
                      "counted"),
        "causal": plan.causal,
        "entropy": plan.entropy, "spawn_keys": dict(SPAWN_KEYS),
        "seed_index": {e: seed_index("ensemble", e) for e in plan.ensembles},
        "workers": plan.workers,
        "seconds": seconds,
    }


def diagnose(Q, K, V=None, *, m=DEFAULT_M, kinds=None, ensembles=None, presets=None, norms="chi",
             scale=None, draws=DEFAULT_DRAWS, queries=DEFAULT_QUERIES, pairs=DEFAULT_PAIRS,
             first_order_queries=DEFAULT_FIRST_ORDER_QUERIES, target=DEFAULT_TARGET, budgets=None,
             dtypes=None, floor=False, causal=False, seed=0, workers=None, scheduler=None,
             progress=None):
    r"""Diagnose random-feature attention on these queries, keys and values (:mod:`rfkernels.analysis.diagnosis`).

    Parameters
    ----------
    Q : array_like of shape (L, d) or (..., L, d)
        Queries as the model computes them, *before* the temperature.
    K : array_like of shape (L_k, d) or (..., L_k, d)
        Keys; the leading axes broadcast with Q's (and V's), one head per index.
    V : array_like of shape (L_k, d_v) or (..., L_k, d_v), optional
        Values; default: synthetic N(0, 1) values with d_v = d (``meta["values"]`` says so).
    m : int or sequence of int, default :data:`DEFAULT_M`
        Numbers of projections; r = m or 2m features
        (:attr:`rfkernels.estimators.Kind.features_per_projection` per projection).
    kinds : sequence of str, optional
        Registered kinds that attention takes; default all of them
        (:func:`attention_kinds`: every kind with one feature map and no random phase).
    ensembles : sequence of str, optional
        Registered ensembles; default :data:`DEFAULT_ENSEMBLES` (those that
        ``norms`` applies to: :func:`rfkernels.analysis.attention_data.ensembles_for`).
    presets : sequence of str, optional
        Numerics (:data:`rfkernels.attention.PRESETS`, :mod:`rfkernels.presets`);
        default ``("rfkernels",)``. Each preset runs with the requested kinds it
        offers (a library preset reports the share of its normalisers due to
        its epsilon, ``stabiliser_share_mean`` and ``_max``, and draws whose
        features overflowed, ``overflow_draws``).
    norms : str, default "chi"
        Row-norm law of the projections.
    scale : float, optional
        Temperature of the kernel :math:`\exp(\text{scale}\,q^\top k)`, > 0;
        default :math:`1/\sqrt d`.
    draws : int, default :data:`DEFAULT_DRAWS`
        Projection draws per (m, ensemble) and head, >= 2.
    queries : int, default :data:`DEFAULT_QUERIES`
        Query rows per draw (fresh each draw; all rows when L is not larger).
    pairs : int, default :data:`DEFAULT_PAIRS`
        Query-key pairs per head of the kernel-level statistics.
    first_order_queries : int, default 8
        Rows of the first-order theory (0: none).
    target : float, default :data:`rfkernels.analysis.diagnosis.advice.DEFAULT_TARGET`
        Target relative attention MSE (attention MSE over the exact output's mean square).
    budgets : sequence of int, optional
        Feature budgets r at which to name the best estimator; default every r of the grid.
    dtypes : sequence of str, optional
        Arithmetic to emulate beside float64 (``"float32"``, ``"float16"``,
        ``"bfloat16"``; :mod:`rfkernels.analysis.diagnosis.rounding`): the
        same attention with every step rounded, its rounding MSE beside the
        sampling MSE, in :attr:`Diagnosis.precision`. Default: float64 only.
    floor : bool, default False
        Also each head's variance floor (:func:`rfkernels.floor.attention_floor`,
        first order, to :data:`~rfkernels.analysis.diagnosis.views.FLOOR_RTOL`):
        per row, the least attention MSE at its r of any policy of independent
        draws of the kind's representation (``floor_mse``, ``floor_stderr``,
        comparable with ``attention_mse``), and whether the first-order expansion holds there
        under that policy (``floor_valid``). About 0.2 s per head and
        representation on MiniLM's heads (L = 512, d = 32).
    causal : bool, default False
        Causal attention (prefix sums; needs L = L_k): row i attends to keys
        j <= i, in the exact reference, the estimators, the uniform baseline
        (each row the mean of the values it sees), the kernel-level pairs
        (j <= i), the first-order theory and the floor. Each draw's rows are
        sampled stratified by position, and :attr:`Diagnosis.positions`
        reports the error per position decile
        (:mod:`rfkernels.analysis.diagnosis.positions`), ``advice["positions"]``
        the r needed on the first 10% of rows and on the rest. Preset
        ``"rfkernels"`` and float64 only.
    seed : None, int or numpy.random.SeedSequence, default 0
        Root of all randomness (:data:`SPAWN_KEYS`); None draws fresh entropy (recorded).
    workers : int, optional
        Processes working on heads side by side (same numbers whatever the
        count; 1: this process); default min(heads, usable CPUs).
    scheduler : str, optional
        Address of a Dask scheduler (``tcp://host:port``, the ``dask``
        extra): each head is one task there, with the numbers of a local run.
    progress : callable, optional
        ``progress(n)`` after each unit of work; ``meta["units"]`` units in all.

    Returns
    -------
    Diagnosis

    Raises
    ------
    ValueError, TypeError
        Missing Q or K, complex, non-numeric, non-finite or empty arrays,
        fewer than 2 axes, mismatched d, V without one row per key, head
        axes that do not broadcast, unknown kinds, ensembles, presets or
        norms, a kind-ensemble pair that does not exist at this d, bad
        m, scale, draws, queries, pairs, target, budgets, seed or workers.
        All before any work.
    MemoryError
        When the estimated peak allocation does not fit, before any work.

    Where a theory is out of its range on these data (an OverflowError of
    the exact MSE or of the first-order theory), the fields are None and the
    row's ``kernel_reason`` or ``first_order_reason`` says why; nothing is inf
    or NaN without its reason.
    """
    t0 = time.perf_counter()
    plan, arrays = _plan(Q, K, V, m, kinds, ensembles, presets, norms, scale, draws, queries,
                         pairs, first_order_queries, target, budgets, seed, workers, dtypes, floor,
                         causal)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    from ..sweep.executors import dask_client

    with dask_client(scheduler, None) as client, one_blas_thread():
        results = _run_heads(plan, arrays, progress, client)
    top = max(float(r["kernel"]["u2"].max()) for r in results)
    edges = np.linspace(0.0, top if top > 0 else 1.0, HISTOGRAM_BINS + 1)
    rows = [row for res in results for row in head_rows(plan, res)]
    heads = [head_info(plan, res, edges) for res in results]
    pooled_logs = {key: np.concatenate([r["kernel"]["log_rel"][key] for r in results])
                   for key in results[0]["kernel"]["log_rel"]
                   if all(key in r["kernel"]["log_rel"] for r in results)}
    summary = pool_heads(rows, heads, pooled_logs, log_quantiles)
    collected = {(res["head"],) + key: draws
                 for res in results for key, draws in res["mc"][1].items()}
    precision = precision_rows(rows, collected)
    advice = advise(summary, plan.target, plan.budgets)
    if plan.heads > 1:  # one budget per head: which heads the layer's budget is for
        advice["per_head"] = [{"head": res["head"], "budget": advise(
            [r for r in rows if r["head"] == res["head"]], plan.target, [])["budget"]}
            for res in results]
    positions = []
    if plan.causal:
        for res in results:
            positions += position_rows(res, {"head": res["head"], "norms": plan.norms},
                                       lambda kind, m_: feature_dimension(kind, plan.d, m=m_))
        positions += pooled_positions(positions)
        advice["positions"] = position_advice([r for r in positions if r["head"] == "all"],
                                              plan.target)
    meta = _meta(plan, edges, time.perf_counter() - t0)
    meta["units"] = plan.heads * (2 + plan.draws * len(plan.ms) * len(plan.ensembles))
    meta["scheduler"] = scheduler
    overflow = [row for res in results for row in res["overflow"]]
    return Diagnosis(rows, summary, heads, advice, meta, precision, overflow, positions)
