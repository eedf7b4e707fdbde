"""Random-feature attention transplanted into a pretrained encoder: what it does to the embeddings.

The Performer paper's question (Choromanski et al., ICLR 2021, Section 4.3:
a pretrained model with its softmax swapped for FAVOR started at an
accuracy of 0.07): :func:`transplant` replaces the softmax attention of
every layer (or the chosen ones, or the chosen heads) of a
:class:`rfkernels.models.Model` by FAVOR attention with one estimator at
each m, with fresh projections per draw, layer and head (one draw is one
transplanted model: the same W for every sentence), and measures against
the exact model:

- ``cosine``: each sentence embedding's cosine to the exact model's, averaged
  over the sentences (``cosine_worst``: the lowest sentence's);
- ``top1``: the share of sentences whose nearest neighbour among the other
  sentences (by the embeddings' cosine) is the exact model's;
- ``top5``: the mean overlap of each sentence's 5 nearest neighbours with the
  exact model's, over 5 (None with fewer than 6 sentences);

each as the mean over draws with its standard error (``*_se``; draws whose
embeddings are not finite are counted in ``draws_nonfinite`` and left out).
Rows for uniform attention (every query the mean of V: deterministic) and for
the exact model (cosine 1, agreement 1) frame them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..attention import PRESETS, favor_attention
from ..estimators import estimator, registry
from ..features import feature_dimension
from ..projections import draw_kind_projections
from ..validation import check_choice, check_int, seed_sequence

__all__ = ["TOP_K", "TransplantResult", "neighbour_agreement", "served_heads", "transplant"]

#: The neighbourhood of ``top5``.
TOP_K = 5
#: Spawn key of the projections: (SPAWN, m, draw, layer, head).
SPAWN = 7


@dataclass(frozen=True)
class TransplantResult:
    """Rows (one per estimator and m, then uniform attention and the exact model) and meta."""

    rows: list
    meta: dict = field(default_factory=dict)

    def to_dict(self):
        return {"meta": self.meta, "rows": self.rows}


def neighbour_agreement(exact, other, k=TOP_K):
    """``(top1, topk)`` agreement of ``other``'s nearest neighbours with ``exact``'s (module docstring)."""
    def ranked(e):
        u = e / np.linalg.norm(e, axis=1, keepdims=True)
        sim = u @ u.T
        np.fill_diagonal(sim, -np.inf)
        return np.argsort(-sim, axis=1, kind="stable")

    a, b = ranked(exact), ranked(other)
    top1 = float(np.mean(a[:, 0] == b[:, 0]))
    if exact.shape[0] <= k:
        return top1, None
    overlap = [len(set(a[i, :k]) & set(b[i, :k])) / k for i in range(exact.shape[0])]
    return top1, float(np.mean(overlap))


def served_heads(rows, shape, kind, ensemble, m, preset="rfkernels"):
    """The (layers, heads) mask of the heads a diagnosis found ``kind`` ``ensemble`` better than
    uniform attention in at ``m`` (its per-head ``rows``: :attr:`rfkernels.analysis.Diagnosis.rows`,
    or ``diagnosis.json``'s ``"rows"``; flat head h is (h // heads, h % heads))."""
    mask = np.zeros(shape, dtype=bool)
    found = False
    for row in rows:
        if (row.get("preset"), row.get("kind"), row.get("ensemble"), row.get("m")) == (
                preset, kind, ensemble, m):
            found = True
            layer, head = divmod(int(row["head"]), shape[1])
            if layer >= shape[0]:
                raise ValueError(f"the diagnosis has head {row['head']}, beyond this model's "
                                 f"{shape[0]} x {shape[1]} heads")
            mask[layer, head] = bool(row.get("better_than_uniform"))
    if not found:
        raise ValueError(f"the diagnosis has no rows of {kind} {ensemble} ({preset}) at m = {m}; "
                         "diagnose with that estimator and m first")
    return mask


def _cosines(exact, other):
    num = np.sum(exact * other, axis=1)
    return num / (np.linalg.norm(exact, axis=1) * np.linalg.norm(other, axis=1))


def _mean_se(values):
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    se = float(np.std(values, ddof=1) / math.sqrt(len(values))) if len(values) > 1 else None
    return float(np.mean(values)), se


class _Replaced:
    """``attend(layer, q, k, v, scale)``: ``head(layer, h, q, k, v, scale)`` in the chosen heads,
    softmax elsewhere (computed only in a layer that keeps a head)."""

    def __init__(self, heads, head, softmax):
        self.heads, self.head, self.softmax = heads, head, softmax

    def __call__(self, layer, q, k, v, scale):
        chosen = np.flatnonzero(self.heads[layer])
        out = np.empty_like(v) if chosen.size == v.shape[0] else self.softmax(layer, q, k, v, scale)
        for h in chosen:
            out[h] = self.head(layer, h, q, k, v, scale)
        return out


def _favor_head(w, kind, preset, params):
    """FAVOR attention of one head with the draw's projections ``w[layer][head]``."""
    def head(layer, h, q, k, v, scale):
        root = math.sqrt(scale)
        return favor_attention(q[h] * root, k[h] * root, v[h], w[layer][h], kind,
                               nonpositive="divide", preset=preset, **params).output

    return head


def _uniform_head(layer, h, q, k, v, scale):
    """Uniform attention of one head: every query the mean of V."""
    return v[h].mean(axis=0)


def _heads_mask(model, layers, heads):
    if heads is not None:
        mask = np.asarray(heads, dtype=bool)
        if mask.shape != (model.layers, model.heads):
            raise ValueError(f"heads must be a boolean array of shape ({model.layers}, "
                             f"{model.heads}); got shape {mask.shape}")
        return mask
    mask = np.zeros((model.layers, model.heads), dtype=bool)
    chosen = range(model.layers) if layers is None else layers
    for layer in chosen:
        layer = check_int(layer, "layers", minimum=0)
        if layer >= model.layers:
            raise ValueError(f"layers: {layer} is not a layer of this model (0 to {model.layers - 1})")
        mask[layer] = True
    return mask


def transplant(model, texts, *, kind="positive", ensemble="orthogonal", m=(16, 64, 256, 1024),
               norms="chi", draws=4, seed=0, preset="rfkernels", layers=None, heads=None,
               max_tokens=None, progress=None):
    """Transplant FAVOR attention into ``model`` and compare its embeddings of ``texts`` (module docstring).

    ``layers`` (indices) or ``heads`` (a (layers, heads) boolean mask)
    choose where attention is replaced (default: everywhere). Texts are cut at
    ``max_tokens`` (default: the model's ``max_seq_length``). Returns a
    :class:`TransplantResult`; ``progress(n)`` after each draw.
    """
    from .bert import softmax_attend

    texts = [texts] if isinstance(texts, str) else list(texts)
    if len(texts) < 2:
        raise ValueError(f"texts: at least 2 sentences are needed (nearest neighbours); got {len(texts)}")
    ms = [check_int(v, "m") for v in ([m] if isinstance(m, (int, np.integer)) else m)]
    draws = check_int(draws, "draws", minimum=2)
    check_choice(preset, "preset", PRESETS)
    for v in ms:
        estimator(kind, ensemble=ensemble, norms=norms, m=v, d=model.d_head)
    param = registry.entry("kind", kind).feature_map.param
    params = {} if param is None else {param.name: "auto"}  # fitted on each head's Q and K
    probe = np.zeros((2, model.d_head))
    try:  # the attention's refusals (a kind it does not take, a preset's kinds) before any work
        favor_attention(probe, probe, probe, draw_kind_projections(1, model.d_head, kind, seed=0), kind,
                        preset=preset, nonpositive="divide", **params)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"kind {kind!r} (preset {preset!r}): {exc}") from None
    mask = _heads_mask(model, layers, heads)
    limit = model.max_seq_length if max_tokens is None else check_int(max_tokens, "max_tokens",
                                                                      minimum=2)
    entropy = seed_sequence(seed, root=True).entropy
    exact = model.embed(texts, max_tokens=limit)
    rows = []
    for v in ms:
        stats = {"cosine": [], "cosine_worst": [], "top1": [], "top5": []}
        bad = 0
        for draw in range(draws):
            w = [[draw_kind_projections(v, model.d_head, kind, ensemble=ensemble, norms=norms,
                                        seed=np.random.SeedSequence(entropy, spawn_key=(SPAWN, v, draw, i, h)))
                  for h in range(model.heads)] for i in range(model.layers)]
            attend = _Replaced(mask, _favor_head(w, kind, preset, params), softmax_attend)
            with np.errstate(all="ignore"):
                emb = model.embed(texts, attend=attend, max_tokens=limit)
            if not np.all(np.isfinite(emb)):
                bad += 1
            else:
                cos = _cosines(exact, emb)
                top1, top5 = neighbour_agreement(exact, emb)
                for key, val in (("cosine", float(cos.mean())), ("cosine_worst", float(cos.min())),
                                 ("top1", top1), ("top5", top5)):
                    stats[key].append(val)
            if progress is not None:
                progress(1)
        row = {"estimator": f"{kind} {ensemble}", "kind": kind, "ensemble": ensemble, "norms": norms,
               "preset": preset, "m": v, "r": feature_dimension(kind, model.d_head, m=v),
               "heads_replaced": int(mask.sum()), "draws": draws, "draws_nonfinite": bad}
        for key, vals in stats.items():
            row[key], row[key + "_se"] = _mean_se(vals)
        rows.append(row)
    uniform = model.embed(texts, attend=_Replaced(mask, _uniform_head, softmax_attend), max_tokens=limit)
    top1, top5 = neighbour_agreement(exact, uniform)
    cos = _cosines(exact, uniform)
    base = {"norms": None, "preset": None, "m": None, "r": None, "draws": 1, "draws_nonfinite": 0,
            "cosine_se": None, "cosine_worst_se": None, "top1_se": None, "top5_se": None}
    rows.append({**base, "estimator": "uniform attention", "kind": None, "ensemble": None,
                 "heads_replaced": int(mask.sum()),
                 "cosine": float(cos.mean()), "cosine_worst": float(cos.min()), "top1": top1,
                 "top5": top5})
    rows.append({**base, "estimator": "exact model", "kind": None, "ensemble": None,
                 "heads_replaced": 0, "cosine": 1.0,
                 "cosine_worst": 1.0, "top1": 1.0, "top5": None if len(texts) <= TOP_K else 1.0})
    meta = {"model": model.source, "sentences": len(texts), "max_tokens": limit,
            "heads_replaced": int(mask.sum()), "heads": int(mask.size),
            "layers_replaced": [int(i) for i in np.flatnonzero(mask.any(axis=1))],
            "kind": kind, "ensemble": ensemble, "norms": norms, "preset": preset, "m_values": ms,
            "draws": draws, "entropy": entropy, "spawn_keys": "(7, m, draw, layer, head)",
            "nonpositive": "divide: the plain quotient N/D, as a transplanted model computes it"}
    return TransplantResult(rows, meta)
