"""Attention-output MSE of the deterministic feature maps (identity, ELU+1, DPFP-ν).

:func:`feature_map_attention_mse`, re-exported by :mod:`rfkernels.analysis.attention`
(section "Deterministic feature maps" of its docstring): the same inputs as
:func:`rfkernels.analysis.attention.attention_mse`, linear attention against
exact softmax attention.
"""

from __future__ import annotations

import time

import numpy as np

from rfkernels.attention import (
    NONPOSITIVE_POLICIES,
    linear_attention,
    softmax_attention,
)
from rfkernels.features import FEATURE_MAPS, feature_dimension
from rfkernels.validation import (
    check_bool,
    check_choice,
    check_int,
    check_memory,
)

from .attention_data import (
    DEFAULT_INPUT_SCALE,
    INPUT_DISTRIBUTION,
    AttentionMSETable,
    attention_bytes,
    check_names,
    check_scale,
    distinct_ints,
    root_entropy,
    sample_summary,
    study_inputs,
)

__all__ = ["FeatureMapMSETable", "feature_map_attention_mse"]


class FeatureMapMSETable(AttentionMSETable):
    """Tidy result of :func:`feature_map_attention_mse`: one row per deterministic map.

    Same attributes and methods as :class:`AttentionMSETable`, other columns.
    """

    #: Columns of :attr:`rows` and of the CSV, in order.
    COLUMNS = (
        "L", "d", "kind", "nu", "d_dot", "causal", "input_scale", "samples",
        "mse_mean", "mse_std", "mse_se", "mse_max_share", "samples_nonfinite",
        "nonpositive_rows_mean",
    )


def feature_map_attention_mse(
    L,
    d,
    kinds=("elu1", "dpfp"),
    nu_values=(1, 2, 3),
    *,
    samples=15,
    seed=0,
    input_scale=DEFAULT_INPUT_SCALE,
    causal=False,
    nonpositive="divide",
    progress=None,
):
    r"""Attention-output MSE of the deterministic feature maps against exact softmax attention.

    The inputs are those of :func:`~rfkernels.analysis.attention.attention_mse` with the same ``seed``
    (spawn key ``(0, sample)``), so its FAVOR rows and these rows are paired
    by input. For each input the exact output is
    :func:`rfkernels.softmax_attention` and each map's output is
    :func:`rfkernels.linear_attention` with attention normalisation. There is
    no projection draw: each map's error is a bias, and ``mse_std`` /
    ``mse_se`` describe the spread over inputs only.

    Parameters
    ----------
    L, d : int
        Sequence length and dimension (d_v = d), >= 1.
    kinds : sequence of {"identity", "elu1", "dpfp"}, default ("elu1", "dpfp")
        Deterministic maps (:data:`rfkernels.FEATURE_MAPS`).
    nu_values : int or sequence of int, default (1, 2, 3)
        DPFP's ν, one row each (1 <= ν <= 2d - 1); d_dot = 2dν.
    samples : int, default 15
        Random inputs, >= 2.
    seed : None, int or numpy.random.SeedSequence, default 0
        As in :func:`~rfkernels.analysis.attention.attention_mse`.
    input_scale : float, default :data:`DEFAULT_INPUT_SCALE`
        σ: E|q|² = E|k|² = σ².
    causal : bool, default False
    nonpositive : {"divide", "nan", "raise"}, default "divide"
        Rows whose normaliser is <= 0 (identity features; DPFP rows whose
        features share no support with any key's), as in :func:`~rfkernels.analysis.attention.attention_mse`.
    progress : callable, optional
        ``progress(1)`` after each exact attention and each map's attention.

    Returns
    -------
    FeatureMapMSETable
        One row per map (DPFP: per ν), columns :attr:`FeatureMapMSETable.COLUMNS`;
        ``meta`` holds the parameters, entropy, exact outputs' mean square
        and timings.

    Raises
    ------
    ValueError, TypeError
        Bad arguments (a random kind in ``kinds``: use :func:`~rfkernels.analysis.attention.attention_mse`),
        before any work.
    """
    L = check_int(L, "L")
    d = check_int(d, "d")
    kinds = check_names(kinds, "kinds", lambda k: check_choice(k, "kinds must be among "
                                                                   f"{FEATURE_MAPS}; kind", FEATURE_MAPS),
                         FEATURE_MAPS)
    nus = distinct_ints(nu_values, "nu_values")
    if max(nus) > 2 * d - 1:
        raise ValueError(f"nu_values must be <= 2d - 1 = {2 * d - 1}; got {max(nus)}")
    samples = check_int(samples, "samples", minimum=2)
    entropy = root_entropy(seed)
    scale = check_scale(input_scale, "input_scale")
    causal = check_bool(causal, "causal")
    check_choice(nonpositive, "nonpositive", NONPOSITIVE_POLICIES)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be callable or None; got {type(progress).__name__}")
    grid = [(k, n) for k in kinds for n in (nus if k == "dpfp" else [None])]
    r_max = max(feature_dimension(k, d, nu=n) for k, n in grid)
    check_memory(attention_bytes(L, d, r_max),
                 f"an attention study with L={L}, d={d} and {r_max} features")

    mse = np.full((len(grid), samples), np.nan)
    n_bad_rows = np.zeros((len(grid), samples))
    exact_ms = np.empty(samples)
    t_exact = t_maps = 0.0
    for s in range(samples):
        q, k, v = study_inputs(L, d, s, input_scale=scale, seed=entropy)
        t0 = time.perf_counter()
        exact = softmax_attention(q, k, v, causal=causal)
        exact_ms[s] = float(np.mean(exact * exact))
        t_exact += time.perf_counter() - t0
        if progress is not None:
            progress(1)
        for g, (kind, nu) in enumerate(grid):
            t0 = time.perf_counter()
            res = linear_attention(q, k, v, None, kind, nu=nu, causal=causal,
                                   nonpositive=nonpositive)
            err = res.output - exact
            mse[g, s] = float(np.mean(err * err))
            t_maps += time.perf_counter() - t0
            n_bad_rows[g, s] = res.n_nonpositive_denominators
            if progress is not None:
                progress(1)

    rows = []
    for g, (kind, nu) in enumerate(grid):
        rows.append({
            "L": L, "d": d, "kind": kind, "nu": nu, "d_dot": feature_dimension(kind, d, nu=nu),
            "causal": causal, "input_scale": scale, **sample_summary(mse[g], n_bad_rows[g]),
        })
    meta = {
        "study": "feature_map_attention_mse",
        "L": L, "d": d, "d_v": d, "kinds": list(kinds), "nu_values": nus, "samples": samples,
        "causal": causal, "nonpositive": nonpositive, "normalization": "attention",
        "input_scale": scale, "input_distribution": INPUT_DISTRIBUTION,
        "kernel": "phi(q).phi(k) of the deterministic map, against exp(q.k)",
        "mse": "mean over the L x d_v output entries of (linear - exact)^2, per sample",
        "entropy": entropy,
        "spawn_keys": {"inputs": "(0, sample)  (the inputs of attention_mse with the same seed)"},
        "exact_output_mean_square": [float(x) for x in exact_ms],
        "seconds_exact": t_exact,
        "seconds_maps": t_maps,
    }
    return FeatureMapMSETable(rows, mse, meta)
