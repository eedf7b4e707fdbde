"""The attention study shared by the attention figures: one computation per (mode, seed, σ).

``attention``, ``attention_regime`` and ``figure4`` plot the same
:func:`rfkernels.analysis.attention_mse` tables (L = 4096, d = 16, 15 random
inputs, m = 2..256, the paper's three kinds, iid and orthogonal) at
different input scales σ; within one process each table, and each
first-order theory line, is computed once and reused.

On a pool of worker processes (``rfkernels figures --workers N``) each
table and each theory line is a :class:`Part` of its own, computed once on
any worker and preloaded (:meth:`Part.preload`) into the worker that makes
a figure needing it; a figure module lists its parts with ``shared(quick,
seed)``. The parts are deterministic (seeded by the study's seed and σ),
so a figure's numbers do not depend on where its parts were computed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from rfkernels import feature_dimension
from rfkernels.analysis import attention_mse, attention_mse_first_order, study_inputs
from rfkernels.analysis.attention import DEFAULT_ENSEMBLES, DEFAULT_KINDS
from rfkernels.workers import map_in_order

FULL = {"L": 4096, "d": 16, "m_values": [2, 4, 8, 16, 32, 64, 128, 256], "samples": 15,
        "scales": (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0),
        "theory_inputs": 3, "theory_rows": 16}
QUICK = {"L": 512, "d": 16, "m_values": [2, 8, 32, 128], "samples": 4,
         "scales": (0.5, 1.0, 1.5), "theory_inputs": 2, "theory_rows": 8}
#: The σ at which both of the paper's claims hold over m = 2..128 in the
#: regime map (``rfkernels figures --only attention_regime``), Figure 4's left panel.
CLAIMS_SCALE = 1.5

_TABLES = {}
_THEORY = {}


def settings(quick):
    return QUICK if quick else FULL


def units(quick, scales):
    """Progress units of the tables not yet computed (one per exact and per FAVOR attention)."""
    cfg = settings(quick)
    per = cfg["samples"] * (1 + len(cfg["m_values"]) * len(DEFAULT_KINDS) * len(DEFAULT_ENSEMBLES))
    return per * len(scales)


def table(quick, seed, scale, progress=None):
    """The study's :class:`~rfkernels.analysis.AttentionMSETable` at σ = ``scale`` (cached)."""
    key = (bool(quick), seed, float(scale))
    if key not in _TABLES:
        cfg = settings(quick)
        _TABLES[key] = attention_mse(cfg["L"], cfg["d"], cfg["m_values"], DEFAULT_KINDS,
                                     DEFAULT_ENSEMBLES, samples=cfg["samples"], seed=seed,
                                     input_scale=scale, progress=progress)
    elif progress is not None:
        progress(units(quick, [scale]))
    return _TABLES[key]


def theory(quick, seed, scale):
    """First-order (iid) MSE at m = 1 per kind, pooled over query rows of the first inputs (cached).

    Returns ``{kind: (mse_at_m_1, stderr)}``: ``theory_rows`` random query rows
    of each of the first ``theory_inputs`` inputs of the study (the same
    inputs as the Monte Carlo markers); the line at m is the value over m.
    """
    key = (bool(quick), seed, float(scale))
    if key not in _THEORY:
        cfg = settings(quick)

        def per_row(job):  # one kind on one input: independent, on this process's threads
            kind, s = job
            q, k, v = study_inputs(cfg["L"], cfg["d"], s, input_scale=scale, seed=seed)
            return attention_mse_first_order(q, k, v, 1, kind, queries=cfg["theory_rows"],
                                             seed=np.random.SeedSequence(seed, spawn_key=(2, s))).per_row

        inputs = range(cfg["theory_inputs"])
        jobs = [(kind, s) for kind in DEFAULT_KINDS for s in inputs]
        done = dict(zip(jobs, map_in_order(per_row, jobs, name="rfkernels-attention-theory")))
        out = {}
        for kind in DEFAULT_KINDS:
            rows = np.concatenate([done[kind, s] for s in inputs])
            out[kind] = (float(rows.mean()), float(rows.std(ddof=1) / np.sqrt(rows.size)))
        _THEORY[key] = out
    return _THEORY[key]


def theory_rows(quick, seed, scale, m_values):
    """Rows of the first-order line at σ for every kind and m (iid only)."""
    cfg = settings(quick)
    out = []
    for kind, (c, se) in theory(quick, seed, scale).items():
        for m in m_values:
            out.append({"input_scale": float(scale), "kind": kind, "ensemble": "iid", "m": m,
                        "r": feature_dimension(kind, 1, m=m), "mse_first_order": c / m,
                        "stderr": se / m, "inputs": cfg["theory_inputs"],
                        "rows_per_input": cfg["theory_rows"]})
    return out


def bars(mean, spread):
    """Error bars (lower, upper, log_space) of mean ± spread, in log space where mean − spread <= 0.

    Where the lower end would not be positive the bar is mean ×/÷ exp(spread/mean)
    (the delta-method bar of log(mean)), drawable on a log axis.
    """
    mean = np.asarray(mean, dtype=float)
    spread = np.asarray(spread, dtype=float)
    log_space = mean - spread <= 0
    factor = np.exp(np.where(log_space, spread / mean, 0.0))
    lower = np.where(log_space, mean - mean / factor, spread)
    upper = np.where(log_space, mean * factor - mean, spread)
    return lower, upper, log_space


#: Seconds of one shared part, warm, alone on 2 idle cores: {what: {quick: seconds}} (see
#: :func:`rfkernels.figures.budget`; each figure's ``BUDGET`` leaves its parts out).
PART_BUDGET = {"table": {False: 9.0, True: 0.25}, "theory": {False: 3.0, True: 0.25}}


@dataclass(frozen=True)
class Part:
    """One shared computation of the study: a table (``what="table"``) or a theory line at σ.

    Picklable and hashable, so that a pool can compute it on one worker and
    send its value to the workers of the figures that need it.
    """

    what: str
    quick: bool
    seed: int
    scale: float

    #: The progress bar the parts report to (``rfkernels figures``).
    group = "attention study"

    @property
    def budget(self):
        """Declared seconds (:data:`PART_BUDGET`)."""
        return PART_BUDGET[self.what][self.quick]

    @property
    def units(self):
        """Progress units: those of :func:`table`, or 1 for a theory line."""
        return units(self.quick, [self.scale]) if self.what == "table" else 1

    def compute(self, progress=None):
        """The part's value (cached here too); ``progress(n)`` as units are done."""
        if self.what == "table":
            return table(self.quick, self.seed, self.scale, progress=progress)
        value = theory(self.quick, self.seed, self.scale)
        if progress is not None:
            progress(1)
        return value

    def preload(self, value):
        """Store ``value`` (from :meth:`compute`, maybe in another process) in this process's cache."""
        key = (self.quick, self.seed, self.scale)
        (_TABLES if self.what == "table" else _THEORY)[key] = value


def parts(quick, seed, *, tables=(), theory_lines=()):
    """The :class:`Part` objects of the tables at σ in ``tables`` and theory lines at ``theory_lines``."""
    return ([Part("table", bool(quick), seed, float(s)) for s in tables]
            + [Part("theory", bool(quick), seed, float(s)) for s in theory_lines])
