r"""Random-feature attention in float64, float32, float16 and bfloat16: rounding against sampling.

A feature map that is exact in float64 may overflow, underflow or lose its
digits in the dtypes that attention runs in on accelerators. This module
measures that on the user's data, beside the sampling error the random
features make anyway:

- :class:`Rounding` and :func:`exponent_limits`: the arithmetic of a dtype
  and the exponents it holds;
- :func:`rounded_attention`: :func:`rfkernels.presets.preset_attention` (a
  preset's numerics, :mod:`rfkernels.presets`) with every step rounded;
- :func:`overflow_report`: from the float64 exponents, which maps overflow
  or underflow in each dtype, with and without the preset's shifts;
- :func:`precision_study`: rounding error against sampling error over
  several projection draws;
- :func:`elu1`, :func:`elu1_naive_zero`, :func:`elu1_attention_error`: the
  ELU+1 map of linear attention, whose textbook form ``elu(x) + 1`` rounds
  to 0 in bfloat16 from x = -6.234 on.

Notes
-----
**The emulation.** There is no BLAS for float16 or bfloat16 in NumPy, so
their arithmetic is emulated: inputs (q, k, v, W) are rounded to the dtype,
the computation runs in float32, and the result of every step
(:func:`rfkernels.presets.preset_attention`'s ``rnd`` hook) is rounded to
the dtype and back to float32 (``ml_dtypes`` gives NumPy its bfloat16).
float32 runs in float32 (nothing more to round), float64 in float64 with no
rounding. A "step" is one NumPy operation: a matrix product or a sum is
accumulated in float32 and rounded once, like a kernel that accumulates in
float32 and stores its result in the dtype.

**Limits: this is not a real fp16 GPU kernel.**

- Tensor cores and fused kernels accumulate products in float32 (or wider)
  with fused multiply-adds, in their own order and block sizes, and may keep
  intermediates (the exponent, the feature) in registers unrounded; NumPy's
  float32 BLAS sums in yet another order. A kernel that accumulates *in* the
  dtype rounds after every addition and loses more than this emulation.
- ``exp`` is NumPy's float32 exponential, rounded: GPUs use hardware
  approximations (``ex2.approx``, half-precision ``hexp``) with errors of a
  few ulp.
- Subnormals are kept (gradual underflow); kernels compiled with
  fast-math flush them to zero, and some bfloat16 hardware does: there,
  features underflow from ``log_min_normal`` on (:func:`exponent_limits`),
  not from ``log_tiny``.
- Rounding a float32 result to the dtype is a double rounding; for one
  addition, multiplication or division it gives the correctly rounded
  result (float32 has at least 2p + 2 bits for float16's and bfloat16's p),
  for a sum of many terms it is one rounding of the float32 sum.

The rounding error measured here is thus the error of the dtype's storage
of every intermediate, not of a particular kernel; treat its size (an order
of magnitude) and its overflow and underflow thresholds, which depend only
on the exponent range, as what transfers.

The formats are IEEE 754's [1]_ (bfloat16: float32's exponent with 8
significand bits); the maps are the Performer's [2]_ and linear attention's
ELU+1 [3]_.

References
----------
.. [1] IEEE 754-2019, "IEEE Standard for Floating-Point Arithmetic"
   (binary16, binary32, binary64; round to nearest, ties to even).
.. [2] K. Choromanski et al., "Rethinking Attention with Performers",
   ICLR 2021. https://arxiv.org/abs/2009.14794
.. [3] A. Katharopoulos, A. Vyas, N. Pappas and F. Fleuret, "Transformers
   are RNNs: Fast Autoregressive Transformers with Linear Attention",
   ICML 2020 (the ELU+1 map). https://arxiv.org/abs/2006.16236
"""

from __future__ import annotations

import importlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Optional

import numpy as np

from rfkernels.attention import linear_attention, softmax_attention
from rfkernels.estimators import check_kind
from rfkernels.estimators import registry
from rfkernels.pairs import check_map_param, fit_map_param
from rfkernels.presets import check_preset, preset_attention
from rfkernels.strict_json import NULL_REASONS, json_safe
from rfkernels.validation import (
    check_choice,
    check_finite,
    check_int_array,
    check_matrix,
    check_same_d,
)

__all__ = [
    "DTYPES",
    "ELU1_FORMS",
    "ExponentLimits",
    "RoundedAttention",
    "Rounding",
    "elu1",
    "elu1_attention_error",
    "elu1_naive_zero",
    "exponent_limits",
    "overflow_report",
    "precision_study",
    "rounded_attention",
]

#: The dtypes studied, widest first.
DTYPES = ("float64", "float32", "float16", "bfloat16")
#: The two ways of computing ELU+1 (:func:`elu1`).
ELU1_FORMS = ("accurate", "naive")
#: What to install when bfloat16 is asked for without ml_dtypes.
INSTALL_HINT = 'pip install "rfkernels[precision]"'


def _ml_dtypes():
    try:
        return importlib.import_module("ml_dtypes")
    except ImportError:
        raise ImportError(f"dtype 'bfloat16' needs the ml_dtypes package: {INSTALL_HINT}") from None


@dataclass(frozen=True)
class Rounding:
    """``rnd(a)``: ``a`` rounded to a dtype and returned in the working dtype.

    Parameters
    ----------
    name : {"float64", "float32", "float16", "bfloat16"}
        The dtype (:data:`DTYPES`).

    Attributes
    ----------
    dtype : numpy.dtype
        The dtype rounded to (bfloat16 from ``ml_dtypes``, imported when asked for).
    work : numpy.dtype
        The dtype the arithmetic runs in: float64 for "float64" (and no
        rounding: ``rnd`` returns its float64 input unchanged), float32 for
        the others (module docstring, Notes).
    """

    name: str
    dtype: Any = field(init=False, repr=False, compare=False)
    work: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self):
        check_choice(self.name, "dtype", DTYPES)
        dtype = np.dtype(_ml_dtypes().bfloat16) if self.name == "bfloat16" else np.dtype(self.name)
        object.__setattr__(self, "dtype", dtype)
        work = np.float64 if self.name == "float64" else np.float32
        object.__setattr__(self, "work", np.dtype(work))

    def __call__(self, a):
        a = np.asarray(a)
        if self.name == "float64":
            return a.astype(np.float64, copy=False)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            return a.astype(self.dtype).astype(self.work)

    def finfo(self):
        """The dtype's ``finfo`` (``ml_dtypes.finfo`` for bfloat16)."""
        return _ml_dtypes().finfo(self.dtype) if self.name == "bfloat16" else np.finfo(self.dtype)


@dataclass(frozen=True)
class ExponentLimits:
    """The natural-log range of a dtype (:func:`exponent_limits`)."""

    dtype: str
    log_max: float
    log_min_normal: float
    log_tiny: float
    bits: int

    def to_dict(self):
        return asdict(self)


def exponent_limits(dtype):
    """The exponents a dtype holds, from its ``finfo``.

    Returns
    -------
    ExponentLimits
        ``log_max``: log of the largest finite value (``exp(e)`` overflows
        for ``e > log_max``: 709.78, 88.72, 11.09, 88.72 for float64,
        float32, float16, bfloat16); ``log_min_normal``: log of the
        smallest normal value (where flush-to-zero hardware stops);
        ``log_tiny``: log of the smallest positive subnormal (-744.44,
        -103.28, -16.64, -92.19; ``exp(e)`` rounds to 0 below
        ``log_tiny - log 2`` and keeps no significant bit below ``log_tiny``);
        ``bits``: significand bits p, the implicit bit included (53, 24, 11, 8).
    """
    rounding = Rounding(dtype)
    info = rounding.finfo()
    return ExponentLimits(rounding.name, math.log(float(info.max)), math.log(float(info.tiny)),
                          math.log(float(info.smallest_subnormal)), int(info.nmant) + 1)


# ---------------------------------------------------------------------------
# Attention with every step rounded
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Spec:
    """Validated inputs of one rounded attention (the study validates them once)."""

    q: np.ndarray  # the query rows studied
    k: np.ndarray
    v: np.ndarray
    w: np.ndarray
    kind: str
    entry: Any
    A: Optional[float]
    rows: np.ndarray


def _check_rows(rows, n):
    if rows is None:
        return np.arange(n, dtype=np.int64)
    out = check_int_array(rows, "rows", minimum=0).reshape(-1)
    if out.size == 0 or int(out.max()) >= n:
        raise ValueError(f"rows must be a non-empty list of query indices in [0, {n}); "
                         f"got {rows!r}")
    return out


def precision_reason(kind):
    """Why the precision study does not round ``kind``'s steps (None: it does)."""
    fmap = registry.entry("kind", kind).feature_map
    if fmap is not None and fmap.two_roles:
        return (f"kind={kind!r} has a query map and a key map: its attention runs as "
                f"kind={fmap.runs_as!r} on transformed rows (favor_attention); the "
                "precision study takes kinds with one map")
    if fmap is not None and not fmap.symmetric:
        return (f"kind={kind!r} has a key map of its own (its angular weight), whose steps the "
                "emulated precisions do not round; run it in float64")
    return None


def _one_map(kind):
    """The precision study computes with one map (a kind with two runs as another: favor_attention)."""
    reason = precision_reason(kind)
    if reason is not None:
        raise ValueError(reason)
    return kind


def _spec(q, k, v, w, kind, preset, A, rows):
    kind = _one_map(check_kind(kind))
    entry = check_preset(preset, kind)
    q, k, v = check_matrix(q, "q"), check_matrix(k, "k"), check_matrix(v, "v")
    if v.shape[0] != k.shape[0]:
        raise ValueError(f"v must have one row per key: k has {k.shape[0]} rows, "
                         f"v has {v.shape[0]}")
    A = fit_map_param(kind, check_map_param(kind, A), q, k)  # "auto": on every query, as attention
    rows = _check_rows(rows, q.shape[0])
    return _with_w(_Spec(q[rows], k, v, None, kind, entry, A, rows), w)


def _with_w(spec, w):
    w = check_matrix(w, "w")
    check_same_d([spec.q.shape, spec.k.shape, w.shape], ["q", "k", "w"])
    return _Spec(spec.q, spec.k, spec.v, w, spec.kind, spec.entry, spec.A, spec.rows)


@dataclass(frozen=True)
class RoundedAttention:
    """Output of :func:`rounded_attention`.

    Attributes
    ----------
    output : ndarray of shape (n_rows, d_v), float64, or None
        The attention rows, NaN on every failed or non-positive row; None
        when the features overflowed.
    denominators : ndarray of shape (n_rows,), float64, or None
        The normalisers as computed (after the preset's guard).
    stabiliser_share : ndarray or None
        Each row's share of its normaliser due to the preset's epsilon.
    rows : ndarray of int64
        The query rows.
    n_underflow : int
        Rows whose normaliser is 0: every feature product underflowed.
    n_overflow : int
        Rows whose normaliser, numerator or quotient is not finite (the
        sums overflowed, not the features).
    n_negative : int
        Rows with a negative normaliser (trig features can give one).
    overflow : {None, "keys", "queries"}
        Which side's features overflowed (then nothing else was computed).
    message : str or None
        The preset's overflow message.
    """

    dtype: str
    preset: str
    kind: str
    output: Any
    denominators: Any
    stabiliser_share: Any
    rows: np.ndarray
    n_underflow: int = 0
    n_overflow: int = 0
    n_negative: int = 0
    overflow: Optional[str] = None
    message: Optional[str] = None

    @property
    def n_failed(self):
        """Rows with a normaliser 0 or non-finite (underflow or overflow)."""
        return self.n_underflow + self.n_overflow

    def to_dict(self):
        """The scalars (strict JSON)."""
        return json_safe({"dtype": self.dtype, "preset": self.preset, "kind": self.kind,
                          "n_rows": int(self.rows.size), "n_underflow": self.n_underflow,
                          "n_overflow": self.n_overflow, "n_negative": self.n_negative,
                          "n_failed": self.n_failed, "overflow": self.overflow,
                          "message": self.message})


def _attention(spec, rounding):
    """The preset's attention on ``spec`` in ``rounding``'s arithmetic (validated inputs)."""
    r = rounding
    q, k, v, w = r(spec.q), r(spec.k), r(spec.v), r(spec.w)
    rnd = None if r.name == "float64" else r
    head = dict(dtype=r.name, preset=spec.entry.name, kind=spec.kind, rows=spec.rows)
    with np.errstate(all="ignore"):
        try:
            num, den, share = preset_attention(q, k, v, w, spec.kind, spec.entry, A=spec.A, rnd=rnd)
        except FloatingPointError as exc:
            try:  # no query rows: only the keys' features are computed
                preset_attention(q[:0], k, v, w, spec.kind, spec.entry, A=spec.A, rnd=rnd)
                side = "queries"
            except FloatingPointError:
                side = "keys"
            return RoundedAttention(output=None, denominators=None, stabiliser_share=None,
                                    overflow=side, message=str(exc), **head)
        den = np.asarray(den, dtype=np.float64)
        out = r(np.asarray(num, dtype=r.work) / np.asarray(den, dtype=r.work)[:, None])
    out = np.asarray(out, dtype=np.float64)
    finite = np.isfinite(den) & np.all(np.isfinite(out), axis=1)
    zero = den == 0
    negative = den < 0
    out[~finite | zero | negative] = np.nan
    return RoundedAttention(output=out, denominators=den, stabiliser_share=np.asarray(share),
                            n_underflow=int(np.sum(zero)), n_overflow=int(np.sum(~finite & ~zero)),
                            n_negative=int(np.sum(negative & finite)), **head)


def rounded_attention(q, k, v, w, kind, preset, dtype, *, A=None, rows=None):
    """A preset's bidirectional attention with every step rounded to ``dtype``.

    Parameters
    ----------
    q, k, v, w : array_like
        Queries (L, d), keys (L_k, d), values (L_k, d_v), projections (m, d),
        pre-scaled as for :func:`rfkernels.favor_attention`; rounded to
        ``dtype`` before anything else.
    kind : str
        A random-feature kind the preset offers.
    preset : str
        :data:`rfkernels.attention.PRESETS`.
    dtype : str
        :data:`DTYPES`.
    A : float or "auto", optional
        OPRF's parameter (``"auto"`` resolved on all of q and k).
    rows : sequence of int, optional
        The query rows computed (default all); each row's output depends on
        the keys and its own query only.

    Returns
    -------
    RoundedAttention
        Float64 output and normalisers, the counts of failed rows, and
        ``overflow`` (which side's features overflowed: reported, not raised).
        In float64 the output is :func:`rfkernels.favor_attention`'s
        ``(..., preset=preset)`` to rounding (1e-12).
    """
    return _attention(_spec(q, k, v, w, kind, preset, A, rows), Rounding(dtype))


# ---------------------------------------------------------------------------
# Overflow and underflow thresholds from the float64 exponents
# ---------------------------------------------------------------------------


def _unshifted(x, w, kind, A):
    """The float64 exponents of the unstabilised map (rfkernels' feature_map)."""
    proj = x @ w.T
    half_sq = 0.5 * np.sum(x * x, axis=1, keepdims=True)
    # exponents - |x|²/2; a signed map's exp(|x|²/2) scales its bounded part
    return registry.entry("kind", kind).feature_map.key_log_features(proj, w, half_sq, A, np)[0]


def _preset_exponents(q, k, w, kind, entry, A, eq, ek):
    """The float64 exponents the preset exponentiates: (queries or None, keys)."""
    if not entry.shifted:  # xformers: its constant inside the exponent
        offset = entry.log_offset - math.log(math.sqrt(eq.shape[1]))
        return eq + offset, ek + offset
    if entry.exact:
        if not registry.entry("kind", kind).feature_map.nonnegative:
            # a signed map's query features are its bounded part; keys' exp(|k|²/2 − b)
            return None, ek - np.max(ek)
        return eq - np.max(eq, axis=1, keepdims=True), ek - np.max(ek)
    # performer-pytorch, google-research: u − h − max u (the shift leaves −|x|²/2 in)
    uq, uk = q @ w.T, k @ w.T
    hq, hk = 0.5 * np.sum(q * q, axis=1, keepdims=True), 0.5 * np.sum(k * k, axis=1, keepdims=True)
    return uq - hq - np.max(uq, axis=1, keepdims=True), uk - hk - np.max(uk)


def _side(queries, keys):
    sides = {(True, True): "both", (True, False): "queries", (False, True): "keys"}
    return sides.get((queries, keys))


def overflow_report(q, k, w, kind, preset, dtypes=DTYPES, *, A=None):
    r"""Which features overflow or underflow in each dtype, from the float64 exponents.

    Parameters
    ----------
    q, k, w : array_like
        Queries (L, d), keys (L_k, d) and projections (m, d).
    kind, preset : str
        As for :func:`rounded_attention`.
    dtypes : sequence of str
        :data:`DTYPES` to report.
    A : float or "auto", optional
        OPRF's parameter.

    Returns
    -------
    list of dict
        One row per dtype (strict JSON). ``max_exponent_queries`` and
        ``max_exponent_keys``: the largest **unshifted** exponent
        :math:`\pm\omega^\top x - |x|^2/2` (trig: :math:`|x|^2/2`, the only
        factor that can overflow); ``unshifted_offset``: the constant the
        unstabilised map adds inside ``exp`` (xformers:
        :math:`10^{-6} - \log\sqrt r`; :func:`rfkernels.feature_map`, i.e.
        rfkernels with ``stabilize=False``: 0, it divides afterwards);
        ``unshifted_overflows`` (and ``unshifted_overflow_side``): whether
        exponent plus offset passes ``log_max`` — what xformers' preset
        computes, or rfkernels unstabilised. Then the features **as the
        preset computes them** (shifted for rfkernels, performer-pytorch
        and google-research; unshifted for xformers): ``max_feature_exponent``,
        ``feature_overflows``, the shares of query and key features below
        ``log_tiny`` (they underflow to 0, or to the smallest subnormal
        with no significant bit), and the shares of query and key rows whose
        every feature underflows. With an additive epsilon (performer-pytorch,
        google-research) such a query's features are all epsilon: its output
        no longer depends on the query (each key weighted by the sum of its
        features; the mean of V when the keys' features underflow too).
        Without one, its normaliser is 0. rfkernels' per-query shift leaves
        each query a feature equal to 1, so its rows never underflow
        entirely; trig query features (sines and cosines) are not counted.

    Notes
    -----
    A prediction: the exponents are float64, the rounded computation forms
    them in the dtype (:func:`rounded_attention` measures). Overflow of the
    sums (a float16 key sum passes 65504 beyond about 65504 keys) is not
    predicted here.
    """
    kind = _one_map(check_kind(kind))
    entry = check_preset(preset, kind)
    q, k, w = check_matrix(q, "q"), check_matrix(k, "k"), check_matrix(w, "w")
    check_same_d([q.shape, k.shape, w.shape], ["q", "k", "w"])
    A = fit_map_param(kind, check_map_param(kind, A), q, k)
    limits = [exponent_limits(name) for name in dtypes]
    eq, ek = _unshifted(q, w, kind, A), _unshifted(k, w, kind, A)
    offset = 0.0
    if not entry.shifted:
        offset = entry.log_offset - math.log(math.sqrt(eq.shape[1]))
    fq, fk = _preset_exponents(q, k, w, kind, entry, A, eq, ek)
    top_q, top_k = float(np.max(eq)), float(np.max(ek))
    top_f = max(float(np.max(fk)), -math.inf if fq is None else float(np.max(fq)))
    unshifted_map = entry.name if not entry.shifted else "rfkernels stabilize=False"
    out = []
    for lim in limits:
        low_q = np.zeros((q.shape[0], 1), dtype=bool) if fq is None else fq < lim.log_tiny
        low_k = fk < lim.log_tiny
        out.append(json_safe({
            "dtype": lim.dtype, "preset": entry.name, "kind": kind,
            "log_max": lim.log_max, "log_tiny": lim.log_tiny,
            "max_exponent_queries": top_q, "max_exponent_keys": top_k,
            "unshifted_offset": offset,
            "unshifted_map": unshifted_map,
            "unshifted_overflows": bool(max(top_q, top_k) + offset > lim.log_max),
            "unshifted_overflow_side": _side(top_q + offset > lim.log_max,
                                             top_k + offset > lim.log_max),
            "shifted": entry.shifted,
            "max_feature_exponent": top_f,
            "feature_overflows": bool(top_f > lim.log_max),
            "query_feature_underflow_share": float(np.mean(low_q)),
            "key_feature_underflow_share": float(np.mean(low_k)),
            "query_rows_all_underflow_share": float(np.mean(np.all(low_q, axis=1))),
            "key_rows_all_underflow_share": float(np.mean(np.all(low_k, axis=1))),
        }))
    return out


# ---------------------------------------------------------------------------
# Rounding error against sampling error
# ---------------------------------------------------------------------------


def _mean_se(values):
    """(mean, standard error, reason or None) of the finite values."""
    vals = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=np.float64)
    if vals.size == 0:
        return None, None, "no draw with a finite value"
    if vals.size == 1:
        return float(vals[0]), None, "one draw: no standard error"
    return float(np.mean(vals)), float(np.std(vals, ddof=1) / math.sqrt(vals.size)), None


def _draw_errors(res, ref, exact):
    """(rounding MSE, sampling MSE, output mean square) of one draw on the rows finite in both."""
    if res.output is None or ref.output is None:
        return None, None, None
    ok = np.all(np.isfinite(res.output), axis=1) & np.all(np.isfinite(ref.output), axis=1)
    if not np.any(ok):
        return None, None, None
    return (float(np.mean((res.output[ok] - ref.output[ok]) ** 2)),
            float(np.mean((ref.output[ok] - exact[ok]) ** 2)),
            float(np.mean(ref.output[ok] ** 2)))


def precision_study(q, k, v, w_list, kind, preset, dtypes=DTYPES, *, A=None, rows=None):
    r"""Rounding error against sampling error, per dtype, over several projection draws.

    Parameters
    ----------
    q, k, v : array_like
        Queries, keys and values (:func:`rounded_attention`).
    w_list : sequence of array_like
        Projection matrices (m, d), one per draw (:func:`rfkernels.draw_projections`).
    kind, preset : str
        As for :func:`rounded_attention`.
    dtypes : sequence of str
        :data:`DTYPES` studied.
    A : float or "auto", optional
        OPRF's parameter.
    rows : sequence of int, optional
        Query rows (a subsample keeps the emulation cheap; default all).

    Returns
    -------
    list of dict
        One row per dtype, strict JSON (a null carries its reason in
        ``null_reasons``): ``rounding_mse`` (and ``_se``), the mean over
        draws of :math:`\operatorname{mean}(\mathrm{out}_{dtype} - \mathrm{out}_{float64})^2`;
        ``sampling_mse`` (and ``_se``), the mean over draws of
        :math:`\operatorname{mean}(\mathrm{out}_{float64} - \mathrm{exact})^2`
        with exact = :func:`rfkernels.softmax_attention` on the same rows;
        ``ratio`` = rounding / sampling; ``relative_rounding_rms`` =
        :math:`\sqrt{\mathrm{rounding\_mse} / \overline{\mathrm{out}^2}}`;
        per draw, MSEs are over the rows finite in both outputs.
        ``n_overflow_draws`` (and ``overflow_sides``): draws whose
        features overflowed; ``n_underflow_rows``, ``n_overflow_rows``,
        ``n_negative_rows``: summed over draws.
    """
    w_list = list(w_list)
    if not w_list:
        raise ValueError("w_list must hold at least one projection matrix (m, d)")
    base = _spec(q, k, v, w_list[0], kind, preset, A, rows)
    specs = [base] + [_with_w(base, w) for w in w_list[1:]]
    roundings = [Rounding(name) for name in dtypes]
    exact = softmax_attention(base.q, base.k, base.v)
    stats = {r.name: {"rounding": [], "sampling": [], "power": [], "sides": [], "under": 0,
                      "over": 0, "neg": 0} for r in roundings}
    for spec in specs:
        ref = _attention(spec, Rounding("float64"))
        for r in roundings:
            res = ref if r.name == "float64" else _attention(spec, r)
            s = stats[r.name]
            rounding_mse, sampling_mse, power = _draw_errors(res, ref, exact)
            s["rounding"].append(rounding_mse)
            s["sampling"].append(sampling_mse)
            s["power"].append(power)
            if res.overflow is not None:
                s["sides"].append(res.overflow)
            s["under"] += res.n_underflow
            s["over"] += res.n_overflow
            s["neg"] += res.n_negative
    return [_study_row(r.name, stats[r.name], base, len(specs)) for r in roundings]


def _study_row(name, s, spec, n_draws):
    reasons = {}
    rounding, rounding_se, why = _mean_se(s["rounding"])
    for key, value in (("rounding_mse", rounding), ("rounding_mse_se", rounding_se)):
        if value is None:
            reasons[key] = why if not s["sides"] or why != "no draw with a finite value" else \
                f"the {', '.join(sorted(set(s['sides'])))}' features overflow in every draw"
    sampling, sampling_se, why = _mean_se(s["sampling"])
    for key, value in (("sampling_mse", sampling), ("sampling_mse_se", sampling_se)):
        if value is None:
            reasons[key] = why
    power, _, _ = _mean_se(s["power"])
    ratio = relative = None
    if rounding is None or sampling is None:
        reasons["ratio"] = "rounding or sampling MSE undefined"
    elif sampling == 0:
        reasons["ratio"] = "sampling MSE is 0"
    else:
        ratio = rounding / sampling
    if rounding is None or not power:
        reasons["relative_rounding_rms"] = "rounding MSE or output power undefined"
    else:
        relative = math.sqrt(rounding / power)
    return json_safe({
        "dtype": name, "preset": spec.entry.name, "kind": spec.kind, "m": int(spec.w.shape[0]),
        "n_draws": n_draws, "n_rows": int(spec.rows.size),
        "n_draws_used": sum(x is not None for x in s["rounding"]),
        "rounding_mse": rounding, "rounding_mse_se": rounding_se,
        "sampling_mse": sampling, "sampling_mse_se": sampling_se,
        "ratio": ratio, "relative_rounding_rms": relative,
        "n_overflow_draws": len(s["sides"]), "overflow_sides": sorted(set(s["sides"])),
        "n_underflow_rows": s["under"], "n_overflow_rows": s["over"], "n_negative_rows": s["neg"],
        NULL_REASONS: reasons,
    })


# ---------------------------------------------------------------------------
# ELU+1
# ---------------------------------------------------------------------------


def _elu1(x, r, form):
    """ELU+1 of the already rounded ``x`` in ``r``'s arithmetic (working dtype)."""
    with np.errstate(over="ignore", under="ignore"):
        if form == "naive":  # elu(x) = expm1(x) for x < 0, then + 1: each step rounded
            elu = np.where(x < 0, r(np.expm1(np.minimum(x, 0))), x)
            return r(elu + 1)
        return np.where(x >= 0, r(x + 1), r(np.exp(np.minimum(x, 0))))


def elu1(x, dtype, form="accurate"):
    r"""The ELU+1 feature map of linear attention, evaluated in ``dtype``.

    Parameters
    ----------
    x : array_like
        Finite inputs; rounded to ``dtype`` first.
    dtype : str
        :data:`DTYPES`.
    form : {"accurate", "naive"}
        ``"naive"``: :math:`\operatorname{elu}(x) + 1` as written, each
        operation rounded: :math:`\mathrm{rnd}(\mathrm{rnd}(\operatorname{expm1}(x)) + 1)`
        for x < 0, :math:`\mathrm{rnd}(x + 1)` else. ``"accurate"``:
        :math:`x + 1` for x >= 0 and :math:`e^x` else, rounded once (the
        same function: :math:`\operatorname{expm1}(x) + 1 = e^x`).

    Returns
    -------
    ndarray, float64
        The values in the dtype.

    Notes
    -----
    The naive form cancels: for x < 0, :math:`\operatorname{expm1}(x)` is
    rounded near -1, where the dtype's spacing is :math:`2^{-p}` (p
    significand bits), so :math:`e^x` keeps an absolute error of up to
    :math:`2^{-p-1}` and is exactly 0 once :math:`e^x` is below half that
    spacing, :math:`x \lesssim -(p + 1)\log 2`. Measured by bisection
    (:func:`elu1_naive_zero`; x is rounded to the dtype first), the naive
    form is 0 for every x <= -6.234 in bfloat16, below -8.316 in float16,
    below -17.3 in float32 (-17.329 with a correctly rounded float32
    expm1; NumPy 2.4.6's, faithful but not correctly rounded, gives
    -17.318) and below -37.430 in float64. In bfloat16 at
    x = -8 it gives exactly 0, the accurate form 3.357e-4 (true
    :math:`e^{-8} = 3.3546 \times 10^{-4}`). The accurate form is 0 only
    where :math:`e^x` underflows (below about ``log_tiny - log 2`` of
    :func:`exponent_limits`: -17.33 in float16, -92.9 in bfloat16).
    """
    r = Rounding(dtype)
    check_choice(form, "form", ELU1_FORMS)
    return np.asarray(_elu1(r(check_finite(x, "x")), r, form), dtype=np.float64)


def elu1_naive_zero(dtype):
    """The largest x at which naive ELU+1 (:func:`elu1`) is 0 in ``dtype``, by bisection.

    The naive form is non-decreasing in x, 0 at x = -64 and 1 at 0; the
    bisection runs on float64 x down to adjacent doubles, so the value
    returned gives 0 and the next double above it does not.
    """
    r = Rounding(dtype)
    lo, hi = -64.0, 0.0
    while True:
        mid = 0.5 * (lo + hi)
        if mid in (lo, hi):
            return lo
        if _elu1(r(np.array([mid])), r, "naive")[0] == 0:
            lo = mid
        else:
            hi = mid


def elu1_attention_error(q, k, v, dtype, form="accurate"):
    """Linear attention with ELU+1 features in ``dtype`` against float64.

    The reference is :func:`rfkernels.linear_attention` ``(q, k, v, None, "elu1")``
    in float64. The dtype version rounds q, k, v, then every step: the
    features (:func:`elu1` in ``form``), the state :math:`\\sum_j \\varphi(k_j) v_j^\\top`,
    the key sum, the numerators, the normalisers and the quotient.

    Returns
    -------
    dict
        Strict JSON: ``mse`` and ``max_abs_error`` against the reference,
        ``relative_rms`` (root MSE over the reference's root mean square),
        over the rows whose rounded normaliser is positive and output finite;
        ``zero_feature_share`` (features exactly 0, queries and keys);
        ``n_failed_rows``.
    """
    check_choice(form, "form", ELU1_FORMS)
    r = Rounding(dtype)
    ref = np.asarray(linear_attention(q, k, v, None, "elu1").output)
    q, k, v = check_matrix(q, "q"), check_matrix(k, "k"), check_matrix(v, "v")
    pq, pk = _elu1(r(q), r, form), _elu1(r(k), r, form)
    with np.errstate(all="ignore"):
        state, z = r(pk.T @ r(v)), r(np.sum(pk, axis=0))
        num, den = r(pq @ state), r(pq @ z)
        out = np.asarray(r(num / den[:, None]), dtype=np.float64)
    ok = (den > 0) & np.all(np.isfinite(out), axis=1) & np.all(np.isfinite(ref), axis=1)
    reasons = {}
    err = (out[ok] - ref[ok]) if np.any(ok) else None
    if err is None:
        reasons.update({key: "no row with a positive finite normaliser"
                        for key in ("mse", "max_abs_error", "relative_rms")})
    return json_safe({
        "dtype": r.name, "form": form,
        "mse": None if err is None else float(np.mean(err ** 2)),
        "max_abs_error": None if err is None else float(np.max(np.abs(err))),
        "relative_rms": None if err is None else float(np.sqrt(np.mean(err ** 2)
                                                               / np.mean(ref[ok] ** 2))),
        "zero_feature_share": float((np.sum(pq == 0) + np.sum(pk == 0)) / (pq.size + pk.size)),
        "n_failed_rows": int(np.sum(~ok)),
        NULL_REASONS: reasons,
    })
