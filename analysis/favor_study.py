"""The Figure 4 study: MSE of FAVOR attention against exact softmax attention.

:func:`attention_mse`, re-exported by :mod:`rfkernels.analysis.attention`,
whose docstring describes the inputs, the findings and the seeds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

from rfkernels.attention import (
    NONPOSITIVE_POLICIES,
    favor_attention,
    softmax_attention,
)
from rfkernels.backends import array_namespace, check_backend
from rfkernels.estimators import check_ensemble, check_kind, check_norms, registry
from rfkernels.features import feature_dimension
from rfkernels.projections import draw_kind_projections
from rfkernels.validation import (
    available_memory,
    check_bool,
    check_choice,
    check_int,
    check_memory,
)
from rfkernels.workers import map_in_order, thread_count

from .attention_data import (
    check_ensembles,
    DEFAULT_INPUT_SCALE,
    DEFAULT_KINDS,
    INPUT_DISTRIBUTION,
    SPAWN_PROJECTIONS,
    AttentionMSETable,
    attention_bytes,
    check_names,
    check_scale,
    distinct_ints,
    root_entropy,
    sample_summary,
    seed_index,
    seed_indices,
    study_inputs,
)
from .lean_favor import LeanFavor, lean_kinds, one_blas_thread

__all__ = ["attention_mse"]


def _serialised(fn):
    """``fn`` called under a lock: a progress callback that threads share."""
    lock = threading.Lock()

    def call(*args):
        with lock:
            fn(*args)

    return call


@dataclass(frozen=True)
class _Study:
    """One attention study's settings; :meth:`sample` is the work of one random input."""

    L: int
    d: int
    scale: float
    entropy: object
    causal: bool
    nonpositive: str
    backend: str
    norms: str
    grid: list
    progress: object
    xp: object

    def sample(self, s):
        """(mean square of the exact output, MSE and non-positive rows per grid cell, seconds)."""
        xp, progress, grid = self.xp, self.progress, self.grid
        q, k, v = (xp.asarray(a) for a in study_inputs(self.L, self.d, s, input_scale=self.scale,
                                                      seed=self.entropy))
        t0 = time.perf_counter()
        exact = softmax_attention(q, k, v, causal=self.causal)
        exact_ms = float(xp.mean(exact * exact))
        t_exact = time.perf_counter() - t0
        if progress is not None:
            progress(1)
        lean = LeanFavor(q, k, v) if (self.backend == "numpy" and not self.causal) else None
        lean_ok = lean_kinds()
        mse, n_bad_rows, t_favor = np.full(len(grid), np.nan), np.zeros(len(grid)), 0.0
        with one_blas_thread():
            for g, (m, kind, ens) in enumerate(grid):
                key = (SPAWN_PROJECTIONS, s, m, seed_index("kind", kind), seed_index("ensemble", ens))
                w = draw_kind_projections(m, self.d, kind, ensemble=ens, norms=self.norms, backend=self.backend,
                                     seed=np.random.SeedSequence(self.entropy, spawn_key=key))
                t0 = time.perf_counter()
                if lean is not None and kind in lean_ok:
                    output, n_bad = lean.output(w, kind, self.nonpositive)
                else:
                    param = registry.entry("kind", kind).feature_map.param  # OPRF: A* of the data
                    fitted = {} if param is None else {param.name: "auto"}
                    res = favor_attention(q, k, v, w, kind, causal=self.causal,
                                          nonpositive=self.nonpositive, **fitted)
                    output, n_bad = res.output, res.n_nonpositive_denominators
                err = output - exact
                mse[g] = float(xp.mean(err * err))
                t_favor += time.perf_counter() - t0
                n_bad_rows[g] = n_bad
                if progress is not None:
                    progress(1)
        return exact_ms, mse, n_bad_rows, t_exact, t_favor


def study_kinds():
    """The kinds the study takes: one feature map for queries and keys alike.

    Not a kind with a query map and a key map (:attr:`rfkernels.estimators.Kind.pair_transform`:
    the DERF kinds), whose parameters the study does not fit.
    """
    return tuple(k.name for k in registry.entries("kind") if k.pair_transform is None)


def _check_study_kind(kind):
    kind = check_kind(kind)
    if registry.entry("kind", kind).pair_transform is not None:
        raise ValueError(f"kinds: {kind!r} is not among the study's kinds "
                         f"{', '.join(map(repr, study_kinds()))} "
                         "(the DERF kinds: favor_attention, or rfkernels.analysis.diagnose on the data)")
    return kind


def attention_mse(
    L,
    d,
    m_values,
    kinds=None,
    ensembles=None,
    *,
    samples=15,
    seed=0,
    input_scale=DEFAULT_INPUT_SCALE,
    norms="chi",
    causal=False,
    nonpositive="divide",
    backend="numpy",
    progress=None,
):
    r"""MSE of FAVOR attention against exact softmax attention (Figure 4 of [1]_).

    For each sample s the inputs come from
    :func:`~rfkernels.analysis.attention.attention_inputs` and the
    exact output from :func:`rfkernels.attention.softmax_attention` (computed
    once per sample); for each (m, kind, ensemble) one projection matrix is
    drawn and :func:`rfkernels.attention.favor_attention` is compared to it.

    Parameters
    ----------
    L : int
        Sequence length, >= 1 (paper: 4096).
    d : int
        Dimension of queries, keys and values, >= 1 (paper: 16).
    m_values : int or sequence of int
        Numbers of projections, each >= 1; m > d uses independent orthogonal
        blocks of d rows (the last partial). Feature dimension r = m
        (positive) or 2m (trig, hyperbolic).
    kinds : sequence of str, optional
        Registered kinds with one feature map (:func:`study_kinds`); default
        :data:`~rfkernels.analysis.attention_data.DEFAULT_KINDS`, the
        paper's. A kind with data-fitted parameters (:attr:`rfkernels.estimators.Kind.fit`:
        OPRF) runs with ``A="auto"`` (the optimal A* for the mean
        :math:`|q_i + k_j|^2/d` over all pairs of each input).
    ensembles : sequence of str, optional
        Registered ensembles; default
        :data:`~rfkernels.analysis.attention_data.DEFAULT_ENSEMBLES`, those
        ``norms`` applies to (:func:`rfkernels.analysis.attention_data.ensembles_for`).
    samples : int, default 15
        Random inputs, >= 2 (for a standard deviation).
    seed : None, int or numpy.random.SeedSequence, default 0
        Root of all randomness; see :mod:`rfkernels.analysis.attention` for the spawn keys.
        None draws fresh entropy, which is recorded in ``meta["entropy"]``.
    input_scale : float, default :data:`DEFAULT_INPUT_SCALE`
        σ of :func:`~rfkernels.analysis.attention.attention_inputs`: E|q|² = E|k|² = σ².
    norms : str, default "chi"
        A registered norm law (``rfkernels.estimators.names("norms")``): the
        row norms of the projections (:func:`rfkernels.draw_projections`).
    causal : bool, default False
        Causal (unidirectional) attention instead of bidirectional.
    nonpositive : {"divide", "nan", "raise"}, default "divide"
        Passed to :func:`favor_attention`. ``"divide"`` measures the plain
        quotient N/D (trig rows with a negative normaliser keep it, and
        dominate the trig MSE at small m); ``"nan"`` makes every sample with
        such a row non-finite, so it drops out of the statistics and is
        counted in ``samples_nonfinite``. The number of such rows is
        reported either way.
    backend : {"numpy", "cupy"}, default "numpy"
        Where the attention is computed (inputs and projections are drawn
        with NumPy, so the numbers do not depend on it beyond rounding).
    progress : callable, optional
        Called as ``progress(n)`` after each unit of work: n = 1 for an exact
        attention and for each FAVOR attention, ``samples·(1 + len(m)·len(kinds)·len(ensembles))``
        in all.

    Returns
    -------
    AttentionMSETable
        One row per (m, kind, ensemble) with ``mse_mean`` (mean over finite
        samples), ``mse_std`` (ddof = 1), ``mse_se`` (= std/sqrt(n)),
        ``mse_max_share`` (largest sample MSE over their sum: near 1/n when
        the samples agree, near 1 when one dominates; MATH.md's tail
        warning applies to positive features at large σ), ``samples``
        (finite samples used), ``samples_nonfinite`` (samples whose output
        held NaN, e.g. a normaliser exactly 0 under ``"divide"``, or any
        reported row under ``"nan"``), and ``nonpositive_rows_mean`` (rows
        with a normaliser <= 0 per sample, averaged).

    Raises
    ------
    ValueError, TypeError
        Bad L, d, m_values, kinds, ensembles, samples, seed, input_scale,
        norms, causal, nonpositive or backend, before any work.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Figure 4. https://arxiv.org/abs/2009.14794
    """
    L = check_int(L, "L")
    d = check_int(d, "d")
    ms = distinct_ints(m_values, "m_values")
    kinds = check_names(kinds, "kinds", _check_study_kind, DEFAULT_KINDS)
    check_norms(norms)
    ensembles = check_ensembles(ensembles, norms, check_ensemble)
    samples = check_int(samples, "samples", minimum=2)
    entropy = root_entropy(seed)
    scale = check_scale(input_scale, "input_scale")
    causal = check_bool(causal, "causal")
    check_choice(nonpositive, "nonpositive", NONPOSITIVE_POLICIES)
    check_choice(backend, "backend", ("numpy", "cupy"))
    check_backend(backend)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    xp = array_namespace(backend)
    if backend == "numpy":  # CuPy's allocator raises its own MemoryError on the device
        check_memory(attention_bytes(L, d, max(ms)),
                     f"an attention study with L={L}, d={d} and m up to {max(ms)}")

    grid = [(m, kind, ens) for m in ms for kind in kinds for ens in ensembles]

    # The samples are independent (each its own inputs and projections): on NumPy they run
    # on this process's threads, as many as memory allows, with the numbers of the loop.
    threads = 1
    if backend == "numpy":
        memory = available_memory()
        fit = thread_count() if memory is None else int(0.8 * memory // attention_bytes(L, d, max(ms)))
        threads = max(1, min(thread_count(), fit))
    if progress is not None and threads > 1:
        progress = _serialised(progress)
    study = _Study(L, d, scale, entropy, causal, nonpositive, backend, norms, grid, progress, xp)
    done = map_in_order(study.sample, range(samples), threads, name="rfkernels-attention-study")
    exact_ms = np.array([r[0] for r in done])
    mse = np.stack([r[1] for r in done], axis=1)
    n_bad_rows = np.stack([r[2] for r in done], axis=1)
    t_exact = sum(r[3] for r in done)
    t_favor = sum(r[4] for r in done)

    rows = []
    for g, (m, kind, ens) in enumerate(grid):
        rows.append({
            "L": L, "d": d, "m": m, "r": feature_dimension(kind, d, m=m),
            "kind": kind, "ensemble": ens, "norms": norms, "causal": bool(causal),
            **sample_summary(mse[g], n_bad_rows[g]),
        })

    meta = {
        "study": "attention_mse",
        "L": L, "d": d, "d_v": d, "m_values": ms, "kinds": list(kinds),
        "ensembles": list(ensembles), "samples": samples, "norms": norms,
        "causal": bool(causal), "nonpositive": nonpositive, "backend": backend,
        "input_scale": scale, "input_distribution": INPUT_DISTRIBUTION,
        "kernel": "exp(q.k); temperature absorbed into Q and K",
        "mse": "mean over the L x d_v output entries of (favor - exact)^2, per sample",
        "entropy": entropy,
        "spawn_keys": {
            "inputs": "(0, sample)",
            "projections": "(1, sample, m, seed_index(kind), seed_index(ensemble))",
            "seed_index": seed_indices(kinds, ensembles),
        },
        "exact_output_mean_square": [float(x) for x in exact_ms],
        "seconds_exact": t_exact,
        "seconds_favor": t_favor,
    }
    return AttentionMSETable(rows, mse, meta)
