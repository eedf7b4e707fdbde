"""The regime map of the attention study: where the Performer paper's claims hold over σ and m.

:func:`attention_regime` runs :func:`rfkernels.analysis.attention.attention_mse`
at several input scales; :func:`attention_regime_from_tables` compares the
tables (section "What the data shows" of :mod:`rfkernels.analysis.attention`).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .attention_data import AttentionMSETable, check_scale
from .favor_study import attention_mse

__all__ = [
    "CLAIMS",
    "CLAIM_Z",
    "HEAVY_TAIL_SHARE",
    "SLOPE_TOLERANCE",
    "AttentionRegime",
    "attention_regime",
    "attention_regime_from_tables",
    "local_slopes",
]

#: A point is flagged heavy-tailed when one input carries more than this share
#: of the mean over inputs (``mse_max_share``; 1/15 when 15 inputs agree).
HEAVY_TAIL_SHARE = 0.5
#: The MSE "falls like 1/m" at a grid point when its local slope of log MSE
#: against log m is within this distance of -1.
SLOPE_TOLERANCE = 0.25
#: A comparison holds (or is reversed) when the paired mean difference of the
#: per-input MSEs is more than this many standard errors from 0.
CLAIM_Z = 2.0
#: The paper's two claims, each about two named series: ``(comparison, axis, (a, b),
#: sign, statement)`` compares the series ``a`` and ``b`` of ``axis`` within each value
#: of the other axis (ratio a/b, paired z of a - b); the claim is ``sign * z > 0``.
CLAIMS = (
    ("trig/positive", "kind", ("trig", "positive"), 1.0,
     "positive features below trigonometric ones (ratio > 1)"),
    ("orthogonal/iid", "ensemble", ("orthogonal", "iid"), -1.0,
     "orthogonal projections below iid ones (ratio < 1)"),
)


def _check_slope_grid(m_values, mse):
    """(m as floats, mse as a list) after checking the grid of :func:`local_slopes`."""
    if isinstance(m_values, (str, bytes)) or isinstance(mse, (str, bytes)):
        raise TypeError("m_values and mse must be sequences of numbers")
    try:
        m = np.asarray(m_values, dtype=float)
    except (TypeError, ValueError):
        raise ValueError(f"m_values must be a 1-D sequence of positive numbers; "
                         f"got {m_values!r}") from None
    if m.ndim != 1 or m.size == 0:
        raise ValueError(f"m_values must be a non-empty 1-D sequence; got {m_values!r}")
    if not (np.all(np.isfinite(m)) and np.all(m > 0)):
        raise ValueError(f"m_values must be positive and finite; got {m_values!r}")
    if np.any(np.diff(m) <= 0):
        raise ValueError(f"m_values must be strictly increasing; got {m_values!r}")
    mse = list(mse)
    if len(mse) != m.size:
        raise ValueError(f"mse must have one value per m: {m.size} m_values, {len(mse)} mse values")
    for i, v in enumerate(mse):
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (numbers.Real, np.floating)) or not (
                math.isfinite(v) and v > 0):
            raise ValueError(f"mse values must be positive finite numbers or None (missing); "
                             f"got mse[{i}] = {v!r}")
    return m, mse


def local_slopes(m_values, mse):
    """Local slope of log MSE against log m on a grid (centred inside, one-sided at the ends).

    ``m_values`` positive and strictly increasing; ``mse`` one value per m,
    each a positive finite number or None (missing). The slope is None where
    a neighbour's MSE is missing; a single m gives [None].

    Raises
    ------
    ValueError, TypeError
        Any other m_values or mse (zero, negative, non-finite, repeated or
        unsorted m, lengths that differ).
    """
    m, mse = _check_slope_grid(m_values, mse)
    y = np.array([np.nan if v is None else math.log(v) for v in mse])
    x = np.log(m)
    out = []
    for i in range(m.size):
        lo, hi = max(0, i - 1), min(m.size - 1, i + 1)
        if lo == hi or not (np.isfinite(y[lo]) and np.isfinite(y[hi])):
            out.append(None)
        else:
            out.append(float((y[hi] - y[lo]) / (x[hi] - x[lo])))
    return out


class AttentionRegime:
    """Result of :func:`attention_regime`: where the paper's claims hold, over σ and m.

    Attributes
    ----------
    tables : dict
        Input scale σ -> :class:`AttentionMSETable` (all the same grid and seed).
    rows : list of dict
        One per (σ, m, kind, ensemble): ``mse_mean``, ``mse_std``, ``mse_se``,
        ``mse_max_share``, ``heavy_tail`` (share > :data:`HEAVY_TAIL_SHARE`),
        ``exact_output_mean_square``, ``slope`` (:func:`local_slopes`) and
        ``one_over_m`` (``|slope + 1| <= slope_tolerance``).
    comparisons : list of dict
        One per (σ, m, comparison): ``"trig/positive"`` per ensemble (the
        paper's first claim: positive below trig) and ``"orthogonal/iid"``
        per kind (the second: orthogonal below iid). ``ratio`` is the ratio
        of the mean MSEs (numerator's over denominator's); ``z`` the paired
        z of the per-input differences; ``holds`` (z > claim_z),
        ``reversed`` (z < -claim_z); ``one_over_m`` when both series fall
        like 1/m there.
    """

    def __init__(self, tables, rows, comparisons, meta):
        self.tables, self.rows, self.comparisons, self.meta = tables, rows, comparisons, meta


def _paired(table, a, b):
    ia = table.rows.index(table.select(**a)[0])
    ib = table.rows.index(table.select(**b)[0])
    xa, xb = table.per_sample_mse[ia], table.per_sample_mse[ib]
    ok = np.isfinite(xa) & np.isfinite(xb)
    diff = xa[ok] - xb[ok]
    ma, mb = table.rows[ia]["mse_mean"], table.rows[ib]["mse_mean"]
    ratio = None if not (ma and mb) else ma / mb
    if diff.size < 2:
        return ratio, None
    sd = float(diff.std(ddof=1))
    z = None if sd == 0 else float(diff.mean() / (sd / math.sqrt(diff.size)))
    return ratio, z


def attention_regime_from_tables(tables, *, slope_tolerance=SLOPE_TOLERANCE, claim_z=CLAIM_Z,
                                 heavy_tail_share=HEAVY_TAIL_SHARE):
    """The regime map (:class:`AttentionRegime`) from tables of the attention study.

    ``tables`` maps σ to a table of :func:`~rfkernels.analysis.attention.attention_mse`;
    every table must hold the same m, kinds and ensembles. Comparisons are made where both series are present.
    """
    if not tables:
        raise ValueError("tables must map at least one input scale to an AttentionMSETable")
    rows, comps = [], []
    for scale in sorted(tables):
        t = tables[scale]
        if not isinstance(t, AttentionMSETable):
            raise TypeError(f"tables[{scale!r}] must be an AttentionMSETable; got {type(t).__name__}")
        ms = sorted(t.meta["m_values"])
        base = float(np.mean(t.meta["exact_output_mean_square"]))
        slope = {}
        for kind in t.meta["kinds"]:
            for ens in t.meta["ensembles"]:
                series = [t.select(m=m, kind=kind, ensemble=ens)[0] for m in ms]
                means = [r["mse_mean"] if r["mse_mean"] else None for r in series]  # 0: no log
                for m, r, s in zip(ms, series, local_slopes(ms, means)):
                    slope[(m, kind, ens)] = s
                    rows.append({
                        "input_scale": scale, "L": t.meta["L"], "d": t.meta["d"], "m": m,
                        "r": r["r"], "kind": kind, "ensemble": ens, "samples": r["samples"],
                        "mse_mean": r["mse_mean"], "mse_std": r["mse_std"], "mse_se": r["mse_se"],
                        "mse_max_share": r["mse_max_share"],
                        "heavy_tail": bool(r["mse_max_share"] is not None
                                           and r["mse_max_share"] > heavy_tail_share),
                        "exact_output_mean_square": base,
                        "slope": s,
                        "one_over_m": bool(s is not None and abs(s + 1.0) <= slope_tolerance),
                        "nonpositive_rows_mean": r["nonpositive_rows_mean"],
                    })
        pairs = []
        for name, axis, series, sign, _ in CLAIMS:  # where the table holds both series
            other = "ensemble" if axis == "kind" else "kind"
            for within in t.meta[other + "s"]:
                a, b = ({axis: s, other: within} for s in series)
                if t.select(**a) and t.select(**b):
                    pairs.append((name, within, sign, a, b))
        for name, within, sign, a, b in pairs:
            for m in ms:
                ratio, z = _paired(t, dict(a, m=m), dict(b, m=m))
                zc = None if z is None else sign * z
                sa = slope[(m, a["kind"], a["ensemble"])]
                sb = slope[(m, b["kind"], b["ensemble"])]
                comps.append({
                    "input_scale": scale, "m": m, "comparison": name, "within": within,
                    "ratio": ratio, "z_claim": zc,
                    "holds": bool(zc is not None and zc > claim_z),
                    "reversed": bool(zc is not None and zc < -claim_z),
                    "one_over_m": bool(sa is not None and sb is not None
                                       and abs(sa + 1) <= slope_tolerance
                                       and abs(sb + 1) <= slope_tolerance),
                })
    meta = {"input_scales": sorted(tables), "slope_tolerance": slope_tolerance, "claim_z": claim_z,
            "heavy_tail_share": heavy_tail_share,
            "claims": {name: statement for name, _, _, _, statement in CLAIMS}}
    return AttentionRegime(dict(tables), rows, comps, meta)


def attention_regime(L, d, input_scales, m_values, kinds=None, ensembles=None, *, samples=15,
                     seed=0, norms="chi", nonpositive="divide", progress=None,
                     slope_tolerance=SLOPE_TOLERANCE, claim_z=CLAIM_Z):
    r"""The paper's two claims over input scale σ and m: one :func:`~rfkernels.analysis.attention.attention_mse` per σ.

    Every σ uses the same seed, so the same standard-normal inputs (scaled)
    and the same projections: the map is paired across σ, and its σ = 1
    column equals ``attention_mse(..., input_scale=1)`` exactly. Arguments as
    in :func:`~rfkernels.analysis.attention.attention_mse` (default kinds :data:`DEFAULT_KINDS`);
    ``input_scales`` a non-empty sequence of σ > 0. Returns
    :class:`AttentionRegime`.
    """
    if isinstance(input_scales, (numbers.Real, np.floating)):
        input_scales = [input_scales]
    scales = [check_scale(s, "input_scales") for s in input_scales]
    if not scales or len(set(scales)) != len(scales):
        raise ValueError(f"input_scales must be a non-empty sequence without repeats; got {input_scales!r}")
    tables = {s: attention_mse(L, d, m_values, kinds, ensembles, samples=samples, seed=seed,
                               input_scale=s, norms=norms, nonpositive=nonpositive,
                               progress=progress) for s in scales}
    return attention_regime_from_tables(tables, slope_tolerance=slope_tolerance, claim_z=claim_z)
