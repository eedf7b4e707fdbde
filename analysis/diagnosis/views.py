"""What each kind of a diagnosis runs on: its fitted parameters and, for DERF, its transformed head.

An isotropic DERF (the data-fitted ``saderf`` and ``aderf``) *is* OPRF on
:math:`q' = B_1 q/\\sqrt{1-4a}`, :math:`k' = B_2 k/\\sqrt{1-4a}` (with
:math:`q'\\cdot k' = q\\cdot k`; :mod:`rfkernels.estimators.derf`), so a
diagnosis fits it on the head's queries and keys and then runs every OPRF
path (the exact kernel-level MSE, attention, rounding) on ``(q', k')`` with
``A = a``. Its rows keep the kind's name; its fitted parameter is that a.

A kind fitted on held-out rows (:attr:`rfkernels.estimators.registry.Kind.held_out_fit`:
the data-tilted features, whose policy is made of the head's own pairs) is
fitted twice, on the odd and on the even query rows (every key), and each
query row is measured with the policy fitted on the other half (cross-fitting):
no row's error is measured by a policy fitted on it. Its attention runs as its
map's ``dense_runs_as`` on the inputs of each draw (:func:`view_inputs`).
Also the first-order theory per kind.
"""

from __future__ import annotations

import numpy as np

from rfkernels.attention import favor_attention
from rfkernels.estimators import estimator, registry
from rfkernels.floor import attention_floor

from ..attention_theory import attention_mse_first_order, first_order_kinds
from ..points import independent_rows
from .positions import bucket_edges, bucket_means, stratified_rows

__all__ = ["FLOOR_RTOL", "KindView", "ViewResult", "first_order", "fit_views", "floors",
           "view_attention", "view_inputs"]

#: Precision of a diagnosis' floors: the standard error at most this share of each.
FLOOR_RTOL = 0.03


class KindView:
    """The arrays and the kind a diagnosed kind runs as: ``q``, ``k``, ``kind``, ``params`` (keywords).

    ``halves``: for a kind fitted on held-out rows, its two fitted
    estimators ``(fitted on the odd query rows, fitted on the even ones)``,
    measured on the even and the odd rows respectively; None otherwise.
    """

    __slots__ = ("q", "k", "kind", "params", "halves")

    def __init__(self, q, k, kind, params, halves=None):
        self.q, self.k, self.kind, self.params, self.halves = q, k, kind, params, halves


def fit_views(kinds, q, k):
    """``{kind: KindView}``: each kind fitted on the head's ``q`` and ``k`` (float64 (L, d), (L_k, d)).

    OPRF's ``A*`` through its :attr:`Kind.fit`; a data-fitted DERF kind
    through its fit, then as OPRF on the transformed head (module notes).
    """
    out = {}
    for kind in kinds:
        entry = registry.entry("kind", kind)
        if entry.population and entry.held_out_fit:
            halves = tuple(estimator(kind).fitted_on(q[rows], k) if q[rows].shape[0] * k.shape[0] >= 2
                           else estimator(kind).fitted_on(q, k)  # one query: fitted on it (L = 1)
                           for rows in (slice(1, None, 2), slice(0, None, 2)))
            out[kind] = KindView(q, k, kind, {}, halves)
        elif entry.population:
            est = estimator(kind).fitted_on(q, k)
            fmap = entry.feature_map
            qt, kt, a = fmap.attention_inputs(est, q, k, np)
            param = registry.entry("kind", fmap.runs_as).feature_map.param
            out[kind] = KindView(qt, kt, fmap.runs_as, {param.name: float(a)})
        else:
            out[kind] = KindView(q, k, kind, {} if entry.fit is None else dict(entry.fit(q, k)))
    return out


def view_inputs(view, rows, w, causal=False):
    """The runs of a view's attention at the query rows ``rows`` (sorted indices) with projections ``w``.

    A list of ``(positions, q, k, w, kind, params)``: ``positions`` index
    ``rows`` (a slice for one run); cross-fitted views (``halves``) give one
    run per parity, each on its estimator's ``dense_attention_inputs``.
    ``causal``: each run's ``q`` is every query row (prefix sums need the
    whole sequence); the caller asks for ``rows[positions]`` of its output.
    """
    rows = np.asarray(rows)
    if view.halves is None:
        return [(slice(None), view.q if causal else view.q[rows], view.k, w, view.kind, view.params)]
    out = []
    for parity, est in enumerate(view.halves):
        pos = np.flatnonzero(rows % 2 == parity)
        if pos.size:
            fmap = est.kind.feature_map
            q = view.q if causal else view.q[rows[pos]]
            qt, kt, wt = fmap.dense_attention_inputs(est, q, view.k, w, np)
            out.append((pos, qt, kt, wt, fmap.dense_runs_as, {}))
    return out


class ViewResult:
    """What a diagnosis reads of one attention run: ``output``, ``n_nonpositive_denominators``,
    ``stabiliser_share`` (per row, or None)."""

    __slots__ = ("output", "n_nonpositive_denominators", "stabiliser_share")

    def __init__(self, output, n_nonpositive_denominators, stabiliser_share):
        self.output = output
        self.n_nonpositive_denominators = n_nonpositive_denominators
        self.stabiliser_share = stabiliser_share


def view_attention(view, rows, v, w, preset, dtypes, rounding_errors, causal=False):
    """``(ViewResult, {dtype: (rounding MSE, failed share, overflowed)})`` of a view at ``rows``.

    ``rounding_errors(q, k, v, w, kind, preset, dtypes, reference, A)`` measures each
    run against its float64 output; the runs' rounding errors are combined by
    their row counts. Raises FloatingPointError
    where a library's unshifted features overflow. ``causal``: prefix-sum
    attention over the whole sequence, computed at ``rows`` only.
    """
    parts = view_inputs(view, rows, w, causal)
    rows = np.asarray(rows)
    n = len(rows)
    output, share, bad, errors = np.empty((n, v.shape[1])), np.full(n, np.nan), 0, {}
    for pos, q, k, wv, kind, params in parts:
        # causal: the prefix sums of the whole sequence, read at the sampled rows only
        res = favor_attention(q, k, v, wv, kind, nonpositive="divide", preset=preset, causal=causal,
                              rows=rows[pos] if causal else None, **params)
        res_out, res_share = res.output, res.stabiliser_share
        res_bad = res.n_nonpositive_denominators
        output[pos] = res_out
        bad += res_bad
        if res_share is not None:
            share[pos] = res_share
        size = res_out.shape[0] / n
        for dt, (mse, failed, over) in rounding_errors(q, k, v, wv, kind, preset, dtypes,
                                                        res_out, params.get("A")).items():
            total = errors.get(dt, (0.0, 0.0, False))
            errors[dt] = (total[0] + size * mse, total[1] + size * failed, total[2] or over)
    has_share = not np.all(np.isnan(share))
    return ViewResult(output, bad, share if has_share else None), errors


def first_order(plan, views, v, seed):
    """Per kind: (MSE at m = 1, its stderr, the normaliser's relative variance) or the reason there is none."""
    out = {}
    for kind in plan.kinds:
        if registry.entry("kind", kind).first_order is None:
            out[kind] = (f"no first-order theory for kind={kind!r} "
                         f"(it has one for {', '.join(first_order_kinds())})")
        elif not any(independent_rows(e) for e in plan.ensembles):
            out[kind] = "the first-order theory is for iid projections only"
        elif not registry.entry("norms", plan.norms).independent_chi:
            out[kind] = (f"the first-order theory assumes Gaussian projections (chi norms); "
                         f"norms={plan.norms!r} changes E[g g']")
        elif plan.fo_queries == 0:
            out[kind] = "first_order_queries=0"
        else:
            view = views[kind]
            try:
                if plan.causal:  # rows stratified by position, at least one per bucket
                    edges = bucket_edges(plan.L)
                    rows = stratified_rows(plan.L, max(plan.fo_queries, edges.size - 1),
                                           np.random.default_rng(seed))
                    fo = attention_mse_first_order(view.q, view.k, v, 1, kind, rows=rows,
                                                   normalisers=True, causal=True)
                    se = (float(fo.per_row.std(ddof=1) / np.sqrt(fo.per_row.size))
                          if fo.per_row.size >= 2 and not fo.all_rows else None)
                    out[kind] = (fo.mse, se, fo.normaliser_rel_var,
                                 bucket_means(fo.per_row, fo.rows, edges))
                else:
                    fo = attention_mse_first_order(view.q, view.k, v, 1, kind,
                                                   queries=plan.fo_queries, seed=seed,
                                                   normalisers=True)
                    out[kind] = (fo.mse, fo.stderr, fo.normaliser_rel_var)
            except OverflowError as exc:
                out[kind] = " ".join(str(exc).split())
    return out


def floors(plan, views, v, seed):
    """Per kind: its representation's first-order attention floor on the head (an
    :class:`rfkernels.floor.AttentionFloor`) or the reason there is none.

    A kind runs on its view (a DERF kind: its transformed head), the view's
    kind naming the representation; kinds sharing a representation and arrays
    share one floor. ``seed`` draws every floor of the head.
    """
    out, done = {}, {}
    for kind in plan.kinds:
        view = views[kind]
        rep = registry.entry("kind", view.kind).representation
        if rep is None:
            out[kind] = f"kind {kind!r} has no registered representation: no floor"
            continue
        key = (rep, id(view.q), id(view.k))
        if key not in done:
            try:
                done[key] = attention_floor(view.q, view.k, v, scale=1.0, representation=rep,
                                            seed=seed, rtol=FLOOR_RTOL, causal=plan.causal)
            except (OverflowError, FloatingPointError) as exc:
                done[key] = " ".join(str(exc).split())
        out[kind] = done[key]
    return out
