r"""Attention numerics: rfkernels' stabilised features, and what public implementations compute.

A **preset** is the arithmetic an implementation of FAVOR performs on the
same pre-scaled inputs (kernel :math:`\exp(q^\top k)`: a library's own
:math:`d^{-1/4}` is the caller's scaling) and the same projections W.
Projection laws are kept apart: they are :func:`rfkernels.draw_projections`
ensembles (each preset names its library's default in ``ensemble`` and
``norms``), so any W may be used with any preset.

``"rfkernels"``
    The estimators as MATH.md states them, stabilised by factors that cancel
    exactly in each row's ratio (:func:`query_features`,
    :class:`KeyState`; :func:`rfkernels.favor_attention`, Notes).
``"performer-pytorch"``
    lucidrains/performer-pytorch at commit
    ``fc8b78441b1e27eb5d9b01fc738a8772cee07127``,
    ``performer_pytorch/performer_pytorch.py``: ``softmax_kernel`` (L90-115)
    and ``linear_attention`` (L170-175). With :math:`u_l = \omega_l^\top x`
    and :math:`h = |x|^2/2`, each feature is
    :math:`m^{-1/2}(e^{u_l - h - c} + \varepsilon)`, :math:`\varepsilon = 10^{-4}`,
    with :math:`c = \max_l u_l` per query and :math:`c = \max_{j, l} u_{jl}`
    over every key and feature of the head (the shift does not include
    :math:`-h`); the normaliser is :math:`\hat D_i = \varphi(q_i)^\top \sum_j \varphi(k_j)`
    with no guard. Kind ``"positive"`` only (its ``generalized_kernel`` is
    a deterministic ReLU map). Default law: QR blocks without the sign fix,
    chi norms (``"orthogonal-unfixed-qr"``, ``"chi"``). **Causal**
    (``causal_linear_attention``, L179-198, and its reference
    ``causal_linear_attention_noncuda``, L202-219): the same features (the
    key shift still over the whole sequence), the numerator's prefix sums
    with no epsilon, and the normaliser
    :math:`\hat D_i = \varphi(q_i)^\top(\sum_{j\le i}\varphi(k_j) + 10^{-6}\mathbf 1)`:
    ``k_cumsum = k.cumsum(dim=-2) + eps``, eps = 1e-6 added to every
    coordinate of the running key sum.
``"google-research"``
    google-research/google-research, ``performer/fast_attention/jax/fast_attention.py``
    at commit ``8de59738d37133bc2537b62831674d3929da3c5b``: the same
    features (``nonnegative_softmax_kernel_feature_creator``, L52-111; the
    key maximum over features and the sequence) with the
    :math:`\varepsilon = 10^{-6}` that ``make_fast_softmax_attention``
    passes as ``numerical_stabilizer`` (its signature, L205-215; passed on at
    L238-240), and the normaliser guard
    :math:`R \leftarrow R + 2\varepsilon\,[|R| \le \varepsilon]` before the
    reciprocal (``dot_product_attention``, near the end of the file). Kind ``"positive"`` only; default law as above.
    **Causal** (``unidirectional=True``: ``_numerator`` and ``_denominator``,
    ``lax.scan`` prefix sums, then the same guard in ``dot_product_attention``): the same
    features, :math:`\hat D_i = \varphi(q_i)^\top\sum_{j\le i}\varphi(k_j)`
    guarded as above.
``"xformers"``
    facebookresearch/xformers at commit
    ``279e083384ea26b5359ac65d116fd12b15b32643`` (the last with FAVOR),
    ``xformers/components/attention/feature_maps/softmax.py`` (L45-89,
    L160-228) and ``favor.py`` (L159-168): features
    :math:`\exp(\pm u_l - h - \log\sqrt{r} + 10^{-6})` with **no max shift**
    (the :math:`10^{-6}` is inside the exponent, a factor that cancels), r
    the feature count; no guard; bidirectional only here (its causal path
    is not transcribed). Kinds ``"positive"`` (SMOrf) and
    ``"hyperbolic"`` (SMHyperbolic, SMReg). Default law: its own
    construction (``"orthogonal-xformers"``), fixed norms (SMReg, the
    default feature map). Its features overflow where :math:`\pm u_l - h`
    passes the dtype's largest exponent (709.78 in float64, 88.72 in
    float32, 11.09 in float16): reported as ``FloatingPointError``.

The max shifts cancel in the ratio; an additive :math:`\varepsilon` does
not: once the keys' shifted features are far below it, every normaliser is
dominated by it and each output row tends to the mean of V. The share of
the normaliser due to :math:`\varepsilon`,
:math:`1 - \hat D_i^{(\varepsilon = 0)} / \hat D_i`, is returned per row
(``stabiliser_share``).

Every function here takes an optional ``rnd``: a callable applied to the
result of every arithmetic step (None: none), with which
:mod:`rfkernels.analysis.precision` emulates float32, float16 and bfloat16
arithmetic on the same code.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from .attention_inputs import causal_blocks
from .estimators import registry
from .features import feature_map

__all__ = [
    "PRESETS",
    "KeyState",
    "Preset",
    "causal_presets",
    "check_preset",
    "key_log_features",
    "preset",
    "preset_attention",
    "query_features",
]


def _same(a):
    return a


@dataclass(frozen=True)
class Preset:
    """The numerics of one implementation (module docstring).

    Attributes
    ----------
    name, summary, source : str
        ``source``: repository, pinned commit, file and lines.
    transcribed : tuple of str or None
        The kinds the implementation transcribes (others are refused); None:
        every registered kind whose feature map takes attention
        (``feature_map.attention_reason`` is None). :attr:`kinds` lists them.
    ensemble, norms : str
        Its default projection law, as a :func:`rfkernels.draw_projections` ensemble.
    epsilon : float
        The additive stabiliser of every feature (0: none).
    guard : bool
        The normaliser becomes :math:`R + 2\\varepsilon [|R| \\le \\varepsilon]`.
    shifted : bool
        Exponents are shifted by the query's and the key set's maxima of
        :math:`\\omega^\\top x` (False: unshifted, they can overflow).
    log_offset : float
        A constant inside every exponent (cancels in the ratio).
    exact : bool
        The estimators as MATH.md states them, stabilised only by factors
        that cancel (the kinds' own maps: ``query_features``,
        ``key_log_features``); False: a library's arithmetic, transcribed.
    causal : bool
        Its causal (prefix-sum) path is transcribed too (``causal=True``).
    cumsum_epsilon : float
        Causal only: added to every coordinate of the running key sum in the
        normaliser (performer-pytorch's ``k.cumsum(dim=-2) + eps``; 0: none).
    """

    name: str
    summary: str
    source: str
    transcribed: Optional[tuple]
    ensemble: str
    norms: str
    epsilon: float = 0.0
    guard: bool = False
    shifted: bool = True
    log_offset: float = 0.0
    exact: bool = False
    causal: bool = False
    cumsum_epsilon: float = 0.0

    @property
    def kinds(self):
        """The names of the kinds this preset offers, in the registry's order."""
        return tuple(k.name for k in registry.entries("kind") if self.refusal(k) is None)

    def refusal(self, kind):
        """Why this preset does not take ``kind`` (a registered :class:`Kind`), None if it does."""
        if self.transcribed is not None:
            if kind.name in self.transcribed:
                return None
            return (f"preset {self.name!r} offers kind(s) {', '.join(map(repr, self.transcribed))} "
                    f"only ({self.source.split(' ')[0]}); got kind={kind.name!r}")
        if kind.pair_transform is not None:  # two maps: rfkernels.favor_attention's own path
            return None
        fmap = kind.feature_map
        reason = kind.feature_map_reason if fmap is None else fmap.attention_reason
        if fmap is None or reason is not None:
            return (reason or f"kind={kind.name!r} has no literal feature map registered; "
                              "attention needs one")
        return None


#: The built-in presets, by name (module docstring); each is registered on the
#: registry's ``"preset"`` axis, which every caller asks.
PRESETS = {p.name: registry.register("preset", p) for p in (
    Preset("rfkernels", "the estimators as MATH.md states them, stabilised by factors that cancel",
           "rfkernels", None, "orthogonal", "chi", exact=True, causal=True),
    Preset("performer-pytorch", "softmax_kernel: max shifts, epsilon 1e-4 added to every feature",
           "lucidrains/performer-pytorch@fc8b78441b1e27eb5d9b01fc738a8772cee07127 "
           "performer_pytorch/performer_pytorch.py L90-115, L170-175; causal L179-219",
           ("positive",), "orthogonal-unfixed-qr", "chi", epsilon=1e-4, causal=True,
           cumsum_epsilon=1e-6),
    Preset("google-research", "fast_attention (JAX): max shifts, epsilon 1e-6, normaliser guard",
           "google-research/google-research@8de59738d37133bc2537b62831674d3929da3c5b "
           "performer/fast_attention/jax/fast_attention.py L52-111, L205-215, L238-240, "
           "dot_product_attention; causal _numerator, _denominator",
           ("positive",), "orthogonal-unfixed-qr", "chi", epsilon=1e-6, guard=True, causal=True),
    Preset("xformers", "SMOrf / SMHyperbolic / SMReg: unshifted features, 1e-6 inside the exponent",
           "facebookresearch/xformers@279e083384ea26b5359ac65d116fd12b15b32643 "
           "xformers/components/attention/feature_maps/softmax.py L45-89, L160-228; "
           "xformers/components/attention/favor.py L159-168",
           ("positive", "hyperbolic"), "orthogonal-xformers", "fixed", shifted=False,
           log_offset=1e-6),
)}


def preset(name):
    """The registered :class:`Preset` named ``name`` (ValueError listing them otherwise)."""
    return registry.entry("preset", name)


def causal_presets():
    """The names of the presets whose causal (prefix-sum) path is reproduced (:attr:`Preset.causal`)."""
    return tuple(p.name for p in registry.entries("preset") if p.causal)


def exact_presets():
    """The names of the presets that compute the estimators exactly (:attr:`Preset.exact`)."""
    return tuple(p.name for p in registry.entries("preset") if p.exact)


def check_preset(name, kind, causal=False):
    """The :class:`Preset` for ``kind`` (already a valid kind), refusing what it does not offer."""
    entry = preset(name)
    reason = entry.refusal(registry.entry("kind", kind))
    if reason is not None:
        raise ValueError(reason)
    if causal and not entry.causal:
        raise ValueError(f"preset {entry.name!r}: only bidirectional attention is reproduced; "
                         f"causal=True needs {' or '.join(f'preset={p!r}' for p in causal_presets())}")
    return entry


# ---------------------------------------------------------------------------
# rfkernels' own stabilised features (used by rfkernels.favor_attention)
# ---------------------------------------------------------------------------


def query_features(q, w, kind, stabilize, xp, A=None, rnd=None):
    """φ(q) for a block of queries, divided by a positive per-row factor if stabilised.

    Stabilised, the kind's map drops the row's positive factors
    (:meth:`rfkernels.estimators.maps.ExponentialMap.query_features`: the
    exponents minus their row maximum, which absorbs :math:`-|q|^2/2` and
    the constants; a signed map keeps its bounded part).
    """
    r = _same if rnd is None else rnd
    if not stabilize:
        return feature_map(q, w, kind, A=A)
    half_sq = r(0.5 * xp.sum(r(q * q), axis=1, keepdims=True))  # for maps whose blocks differ in it
    return registry.entry("kind", kind).feature_map.query_features(r(q @ w.T), w, A, xp, r,
                                                                   half_sq=half_sq)


def key_log_features(k, w, kind, xp, A=None, rnd=None):
    """Key features as (log-part, sign-part): φ(k) ∝ exp(log-part) · sign-part (None: no sign part)."""
    r = _same if rnd is None else rnd
    proj = r(k @ w.T)
    half_sq = r(0.5 * xp.sum(r(k * k), axis=1, keepdims=True))
    return registry.entry("kind", kind).feature_map.key_log_features(proj, w, half_sq, A, xp, r)


class KeyState:
    """Running key shift b: the maximum of the key exponents seen so far."""

    def __init__(self, kind, stabilize, xp, A=None):
        self.kind, self.stabilize, self.xp, self.A = kind, stabilize, xp, A
        self.shift = xp.asarray(-xp.inf)

    def features(self, k, w):
        """(φ(k_block) / exp(b_new), exp(b_old − b_new)); rescale earlier sums by the latter."""
        xp = self.xp
        if not self.stabilize:
            return feature_map(k, w, self.kind, A=self.A, role="key"), None
        log_part, sign_part = key_log_features(k, w, self.kind, xp, self.A)
        new = xp.maximum(self.shift, xp.max(log_part))
        rescale = xp.exp(self.shift - new)  # exp(-inf) = 0 on the first block, sums are 0 then
        self.shift = new
        phi = xp.exp(log_part - new)
        return (phi if sign_part is None else phi * sign_part), rescale


# ---------------------------------------------------------------------------
# Every preset on one bidirectional path
# ---------------------------------------------------------------------------


def _library_features(x, w, kind, entry, shift, r, xp):
    """(features, features without epsilon) of one block as the library computes them."""
    u = registry.entry("kind", kind).feature_map.exponents(r(x @ w.T), w, None, xp)  # ±ω·x
    h = r(0.5 * xp.sum(r(x * x), axis=1, keepdims=True))
    if entry.shifted:
        c = xp.max(u, axis=1, keepdims=True) if shift is None else shift
        e = r(xp.exp(r(r(u - h) - c)))
    else:
        e = r(xp.exp(r(u + r(entry.log_offset - h - math.log(math.sqrt(u.shape[1]))))))
        return e, e
    ratio = 1.0 / math.sqrt(u.shape[1])
    return r(ratio * r(e + entry.epsilon)), r(ratio * e)


def _key_shift(k, w, kind, entry, block, A, r, xp):
    """The key set's shift, computed before any feature (a library adds epsilon after it)."""
    if entry.exact:
        top = -math.inf
        for s in range(0, k.shape[0], block):
            log_part, _ = key_log_features(k[s:s + block], w, kind, xp, A, r)
            top = max(top, float(xp.max(log_part)))
        return top
    if not entry.shifted:
        return None
    return max(float(xp.max(r(k[s:s + block] @ w.T))) for s in range(0, k.shape[0], block))


def _keys(k, w, kind, entry, shift, A, r, xp):
    """(φ(k), φ(k) without epsilon) of a block of keys."""
    if entry.exact:
        log_part, sign_part = key_log_features(k, w, kind, xp, A, r)
        phi = r(xp.exp(r(log_part - shift)))
        phi = phi if sign_part is None else r(phi * sign_part)
        return phi, phi
    return _library_features(k, w, kind, entry, shift, r, xp)


def _queries(q, w, kind, entry, A, r, xp):
    if entry.exact:
        phi = query_features(q, w, kind, True, xp, A, r)
        return phi, phi
    return _library_features(q, w, kind, entry, None, r, xp)


def preset_attention(q, k, v, w, kind, entry, *, A=None, block=512, rnd=None, xp=np, causal=False,
                     rows=None):
    """Attention with a preset's numerics: ``(numerators, normalisers, share)``.

    ``causal``: prefix sums (:func:`_causal_preset`), at the query rows ``rows``
    (ascending; None: every row).

    ``q``, ``k``, ``v``, ``w`` are validated arrays (:func:`rfkernels.favor_attention`
    checks them); ``entry`` a :class:`Preset` that offers ``kind``. The
    normalisers are after the preset's guard; ``share`` is each row's share
    of its normaliser due to the additive epsilon (zeros where there is
    none; the normaliser divided by, the guard included). Keys are read twice when the preset shifts them (the shift must
    be known before epsilon is added). Features that overflow raise
    ``FloatingPointError``.
    """
    r = _same if rnd is None else rnd
    shift = _key_shift(k, w, kind, entry, block, A, r, xp)
    if causal:
        return _causal_preset(q, k, v, w, kind, entry, shift, A, block, r, xp, rows)
    dv = v.shape[1]
    state = norm = bare = None
    for s in range(0, k.shape[0], block):
        phi, phi0 = _keys(k[s:s + block], w, kind, entry, shift, A, r, xp)
        if not bool(xp.all(xp.isfinite(phi))):
            raise FloatingPointError(_overflow(entry, kind, "keys"))
        blk = (r(phi.T @ v[s:s + block]), r(xp.sum(phi, axis=0)), r(xp.sum(phi0, axis=0)))
        state, norm, bare = blk if state is None else (r(state + blk[0]), r(norm + blk[1]),
                                                       r(bare + blk[2]))
    num = xp.empty((q.shape[0], dv))
    den = xp.empty(q.shape[0])
    bare_den = xp.empty(q.shape[0])
    for s in range(0, q.shape[0], block):
        phi, phi0 = _queries(q[s:s + block], w, kind, entry, A, r, xp)
        if not bool(xp.all(xp.isfinite(phi))):
            raise FloatingPointError(_overflow(entry, kind, "queries"))
        num[s:s + block] = r(phi @ state)
        den[s:s + block] = r(phi @ norm)
        bare_den[s:s + block] = phi0 @ bare
    if entry.guard:  # its 2 epsilon is part of the stabiliser too
        den = r(den + 2.0 * entry.epsilon * (xp.abs(den) <= entry.epsilon))
    share = xp.zeros(q.shape[0])
    if entry.epsilon:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = 1.0 - bare_den / den
    return num, den, share


def _causal_preset(q, k, v, w, kind, entry, shift, A, block, r, xp, rows=None):
    """Causal attention with a preset's numerics, block by block: ``(numerators, normalisers,
    share)`` at ``rows`` (every row where None). The key shift is the whole sequence's, as the
    libraries compute it; the normaliser adds ``cumsum_epsilon`` to every coordinate of the
    running key sum, then the guard."""
    n, dv = q.shape[0], v.shape[1]
    n_out = n if rows is None else len(rows)
    num, den, bare_den = xp.empty((n_out, dv)), xp.empty(n_out), xp.empty(n_out)
    state = norm = bare = None
    for start, stop, out, mine, future in causal_blocks(n, block, rows, xp):
        phi_k, phi0_k = _keys(k[start:stop], w, kind, entry, shift, A, r, xp)
        if not bool(xp.all(xp.isfinite(phi_k))):
            raise FloatingPointError(_overflow(entry, kind, "keys"))
        if state is None:
            state, norm, bare = (xp.zeros((phi_k.shape[1], dv)), xp.zeros(phi_k.shape[1]),
                                 xp.zeros(phi_k.shape[1]))
        if out.stop > out.start:
            phi, phi0 = _queries(q[mine], w, kind, entry, A, r, xp)
            if not bool(xp.all(xp.isfinite(phi))):
                raise FloatingPointError(_overflow(entry, kind, "queries"))
            local = r(phi @ phi_k.T)
            local[future] = 0.0
            local0 = phi0 @ phi0_k.T
            local0[future] = 0.0
            num[out] = r(r(phi @ state) + r(local @ v[start:stop]))
            den[out] = r(r(phi @ norm) + r(xp.sum(local, axis=1)))
            if entry.cumsum_epsilon:
                den[out] = r(den[out] + r(entry.cumsum_epsilon * r(xp.sum(phi, axis=1))))
            bare_den[out] = phi0 @ bare + xp.sum(local0, axis=1)
        state = r(state + r(phi_k.T @ v[start:stop]))
        norm = r(norm + r(xp.sum(phi_k, axis=0)))
        bare = bare + xp.sum(phi0_k, axis=0)
    if entry.guard:
        den = r(den + 2.0 * entry.epsilon * (xp.abs(den) <= entry.epsilon))
    share = xp.zeros(n_out)
    if entry.epsilon or entry.cumsum_epsilon:
        with np.errstate(divide="ignore", invalid="ignore"):
            share = 1.0 - bare_den / den
    return num, den, share


def _overflow(entry, kind, what):
    return (f"preset {entry.name!r} (kind={kind!r}): the {what}' features overflow: "
            f"{'unshifted exponents' if not entry.shifted else 'the exponents'} pass the largest "
            "the dtype holds (float64: 709.78); the library computes them so, and so would fail")

