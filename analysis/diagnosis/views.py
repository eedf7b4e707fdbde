"""What each kind of a diagnosis runs on: its fitted parameters and, for DERF, its transformed head.

An isotropic DERF (the data-fitted ``saderf`` and ``aderf``) *is* OPRF on
:math:`q' = B_1 q/\\sqrt{1-4a}`, :math:`k' = B_2 k/\\sqrt{1-4a}` (with
:math:`q'\\cdot k' = q\\cdot k`; :mod:`rfkernels.estimators.derf`), so a
diagnosis fits it on the head's queries and keys and then runs every OPRF
path (the exact kernel-level MSE, attention, rounding) on ``(q', k')`` with
``A = a``. Its rows keep the kind's name; its fitted parameter is that a.
Also the first-order theory per kind.
"""

from __future__ import annotations

import numpy as np

from rfkernels.estimators import estimator, registry
from rfkernels.floor import attention_floor

from ..attention_theory import attention_mse_first_order, first_order_kinds
from ..points import independent_rows

__all__ = ["FLOOR_RTOL", "KindView", "first_order", "fit_views", "floors"]

#: Precision of a diagnosis' floors: the standard error at most this share of each.
FLOOR_RTOL = 0.03


class KindView:
    """The arrays and the kind a diagnosed kind runs as: ``q``, ``k``, ``kind``, ``params`` (keywords)."""

    __slots__ = ("q", "k", "kind", "params")

    def __init__(self, q, k, kind, params):
        self.q, self.k, self.kind, self.params = q, k, kind, params


def fit_views(kinds, q, k):
    """``{kind: KindView}``: each kind fitted on the head's ``q`` and ``k`` (float64 (L, d), (L_k, d)).

    OPRF's ``A*`` through its :attr:`Kind.fit`; a data-fitted DERF kind
    through its fit, then as OPRF on the transformed head (module notes).
    """
    out = {}
    for kind in kinds:
        entry = registry.entry("kind", kind)
        if entry.population:
            est = estimator(kind).fitted_on(q, k)
            fmap = entry.feature_map
            qt, kt, a = fmap.attention_inputs(est, q, k, np)
            param = registry.entry("kind", fmap.runs_as).feature_map.param
            out[kind] = KindView(qt, kt, fmap.runs_as, {param.name: float(a)})
        else:
            out[kind] = KindView(q, k, kind, {} if entry.fit is None else dict(entry.fit(q, k)))
    return out


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
                fo = attention_mse_first_order(view.q, view.k, v, 1, kind, queries=plan.fo_queries,
                                               seed=seed, normalisers=True)
            except OverflowError as exc:
                out[kind] = " ".join(str(exc).split())
            else:
                out[kind] = (fo.mse, fo.stderr, fo.normaliser_rel_var)
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
                                            seed=seed, rtol=FLOOR_RTOL)
            except (OverflowError, FloatingPointError) as exc:
                done[key] = " ".join(str(exc).split())
        out[kind] = done[key]
    return out
