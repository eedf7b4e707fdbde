r"""Softmax attention, exact and approximated by random features (FAVOR).

Both functions compute row-normalised attention with the softmax kernel
:math:`SM(q, k) = \exp(q^\top k)` *as given*:

.. math::

    \operatorname{Att}(Q, K, V)_i
        = \frac{\sum_j SM(q_i, k_j)\, v_j}{\sum_j SM(q_i, k_j)},

the sums running over all keys (bidirectional) or over :math:`j \le i`
(causal). No temperature is applied: as everywhere in :mod:`rfkernels`, the
:math:`1/\sqrt{d}` of Transformer attention :math:`\operatorname{softmax}(QK^\top/\sqrt{d})`
is absorbed into the inputs, so **the caller pre-scales**: pass
``Q * d**-0.25`` and ``K * d**-0.25`` to get the paper's
:math:`\exp(q^\top k/\sqrt{d})`.

- :func:`softmax_attention` is the exact reference, computed in blocks of
  query rows with a max-shifted softmax; memory O(L·block).
- :func:`linear_attention` is linear attention with any feature map:
  the random kinds (FAVOR) or the deterministic maps of linear attention
  (identity, ELU+1, DPFP-ν; :data:`rfkernels.features.FEATURE_MAPS`), with
  the usual attention normalisation or Schlag et al.'s sum normalisation
  [2]_. :func:`favor_attention` is its random-feature form.
- :func:`favor_attention` replaces :math:`SM(q_i, k_j)` by
  :math:`\varphi(q_i)^\top\varphi(k_j)` with the feature maps of
  :mod:`rfkernels.features` for a projection matrix W of any ensemble
  (:func:`rfkernels.draw_projections`). It costs O(L·r·(d + d_v)) time and
  never forms an L×L matrix; it returns an :class:`AttentionResult`, which
  carries the output and the diagnostics of its row normalisers.

Shapes: Q is (L, d), K is (L_k, d), V is (L_k, d_v), W is (m, d); causal
attention needs L = L_k. NumPy in gives NumPy out, CuPy in gives CuPy out.

References
----------
.. [1] K. Choromanski, V. Likhosherstov, D. Dohan, X. Song, A. Gane,
   T. Sarlos, P. Hawkins, J. Davis, A. Mohiuddin, L. Kaiser, D. Belanger,
   L. Colwell and A. Weller, "Rethinking Attention with Performers",
   ICLR 2021, Section 2 and Figure 4. https://arxiv.org/abs/2009.14794
.. [2] I. Schlag, K. Irie and J. Schmidhuber, "Linear Transformers Are
   Secretly Fast Weight Programmers", ICML 2021, Section 5.
   https://arxiv.org/abs/2102.11174
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .backends import get_array_module, to_numpy
from .features import (
    FEATURE_MAPS,
    check_feature_map,
    feature_dimension,
    feature_map,
)
from .softmax import SOFTMAX_BLOCK_ELEMENTS, softmax_attention  # noqa: F401  (re-exported: the exact reference)
from .attention_inputs import (causal_blocks, check_fit_rows, check_matrix_xp, check_qkv,
                               check_query_rows, check_squared_norms)
from .estimators import estimator
from .pairs import check_map_param, fit_map_param, is_derf, refuse_derf_parameters, require_projections
from .estimators.registry import check_kind, entries as registry_entries, entry as registry_entry
from .estimators.registry import names as registry_names
from .presets import PRESETS as PRESET_ENTRIES
from .presets import KeyState, check_preset, exact_presets, preset_attention, query_features
from .validation import (
    check_bool,
    check_choice,
    check_int,
    check_memory,
    check_same_d,
)

__all__ = [
    "NONPOSITIVE_POLICIES",
    "NORMALIZATIONS",
    "PRESETS",
    "AttentionResult",
    "favor_attention",
    "linear_attention",
    "softmax_attention",
]

#: What :func:`linear_attention` and :func:`favor_attention` do with rows whose normaliser is <= 0.
NONPOSITIVE_POLICIES = ("nan", "divide", "raise")
#: Numerics of attention with random features (:mod:`rfkernels.presets`):
#: ``"rfkernels"`` (the estimators as MATH.md states them) and what public
#: implementations compute on the same inputs and W.
PRESETS = tuple(PRESET_ENTRIES)
#: Output normalisations of :func:`linear_attention`: divide by the attention
#: normaliser φ(q)ᵀΣφ(k), or sum-normalise φ(q) and φ(k) and divide by nothing.
NORMALIZATIONS = ("attention", "sum")

#: Default rows per block of :func:`favor_attention`, bidirectional and causal.
#: Causal blocks are smaller: each costs a (block, block) product on top of the
#: (r, d_v) state, so large blocks do more work (benchmarks/bench_attention.py).
FAVOR_BLOCK = 512
FAVOR_CAUSAL_BLOCK = 128


@dataclass(frozen=True)
class AttentionResult:
    """Output of :func:`linear_attention` (and :func:`favor_attention`) and its normalisers.

    Attributes
    ----------
    output : ndarray of shape (L, d_v)
        The approximate attention. Rows listed in ``nonpositive_rows`` are NaN
        under ``nonpositive="nan"``; under ``"divide"`` they hold the quotient
        (NaN where the normaliser is exactly 0 or the quotient overflows).
        Every other entry is finite.
    denominators : ndarray of shape (L,)
        The row normalisers :math:`\\hat D_i = \\sum_j \\varphi(q_i)^\\top\\varphi(k_j)`
        as computed, i.e. divided by the positive factors that the
        stabilisation removes (see :func:`favor_attention`, Notes); their
        signs are those of the unshifted normalisers, their magnitudes are
        not comparable between rows. Same array type as ``output``.
        None under ``normalization="sum"``, which divides by nothing.
    n_nonpositive_denominators : int
        Number of rows with :math:`\\hat D_i \\le 0`: a negative or zero
        estimate (trig features) or an underflow to 0 (positive and
        hyperbolic features, only for extreme inputs).
    nonpositive_rows : numpy.ndarray of int64
        Their indices, ascending (always a NumPy array).
    kind, causal, stabilize, nonpositive, normalization, nu :
        The arguments the result was computed with (``nu`` is None except
        for DPFP).
    A : float or None
        The OPRF parameter used (``A="auto"`` resolved to its float); None
        for every other kind.
    preset : str
        The numerics (:mod:`rfkernels.presets`).
    stabiliser_share : ndarray of shape (L,) or None
        Per row, the share of the normaliser due to the preset's additive
        epsilon, :math:`1 - \\hat D_i^{(\\varepsilon = 0)}/\\hat D_i` (0 for
        presets without one); None for ``"rfkernels"``.
    """

    output: Any
    denominators: Any
    n_nonpositive_denominators: int
    nonpositive_rows: np.ndarray
    kind: str
    causal: bool
    stabilize: bool
    nonpositive: str
    normalization: str = "attention"
    nu: Any = None
    A: Any = None
    preset: str = "rfkernels"
    stabiliser_share: Any = None


# --------------------------------------------------------------- exact reference


def favor_attention(
    Q, K, V, W, kind, *, A=None, causal=False, stabilize=True, nonpositive="nan", block_size=None,
    preset="rfkernels", B_query=None, B_key=None, fit_rows=None, rows=None,
):
    r"""Linear-time attention with random features (FAVOR), bidirectional or causal.

    The random-feature form of :func:`linear_attention` (which also takes the
    deterministic maps and sum normalisation); the same computation.

    Parameters
    ----------
    Q : array_like of shape (L, d)
        Queries, already scaled: the kernel approximated is
        :math:`\exp(q^\top k)`. Pass ``Q * d**-0.25`` (and the same for K) for
        the Transformer's :math:`\exp(q^\top k/\sqrt d)`, as in [1]_.
    K : array_like of shape (L_k, d)
        Keys, scaled like Q.
    V : array_like of shape (L_k, d_v)
        Values.
    W : array_like of shape (m, d)
        Projections :math:`\omega_1..\omega_m` as rows, of any ensemble
        (:func:`rfkernels.draw_projections`); the same W serves queries and keys.
    kind : str
        A registered kind that the preset offers (:attr:`rfkernels.presets.Preset.kinds`;
        :data:`rfkernels.KINDS` lists every kind).
        The feature map (:func:`rfkernels.feature_map`); r = 2m, m, 2m, m features.
    A : float or "auto", optional
        The parameter of ``kind="oprf"`` (optimal positive random features;
        required there, refused for the other kinds): a float ``A < 1/8``
        shared by every query and key, or ``"auto"``, the optimal ``A*`` for
        :math:`\rho = \operatorname{mean}_{i,j}|q_i + k_j|^2/d` over all
        query-key pairs (:func:`rfkernels.features.oprf_auto_a` ``(Q, K)``,
        O((L + L_k) d), computed on the host); the value used is
        ``result.A``. With ``kind="derf"``: its A (a float or a symmetric
        (d, d) array).
    B_query, B_key : array_like of shape (d, d), optional
        ``kind="derf"`` only (``docs/derf.rst``). The data-fitted kinds
        ``"saderf"``, ``"aderf"``, ``"sderf"`` take no parameter: they are
        fitted on Q and K (:func:`rfkernels.fit_derf`). An isotropic A runs
        as OPRF on :math:`(B_1q, B_2k)/\sqrt{1-4a}` (``result.A`` is that a), a
        dense A as positive features in d + 2 dimensions; ``preset`` must be
        ``"rfkernels"``. ``kind="data-tilted"`` (data-tilted positive features) is
        fitted on Q and K too, and runs as positive features in d + 1
        dimensions (:mod:`rfkernels.estimators.tilted`).
    fit_rows : tuple of array_like, optional
        ``(Q_fit, K_fit)``: the queries and keys a data-fitted kind is fitted
        on, when not Q and K themselves (fit on some rows, measure on others);
        the data-fitted kinds only.
    rows : array_like of int, optional
        Compute only these query rows (distinct, ascending): the output, the
        normalisers and ``stabiliser_share`` have one row per entry, and
        ``nonpositive_rows`` index them. Causal attention then forms the query
        features of these rows only (their prefix sums still read every key
        before them): a sample of rows costs the keys' side, not the
        queries'. Default: every row.
    causal : bool, default False
        If True, row i attends to keys j <= i only (needs L = L_k), through
        running prefix sums.
    stabilize : bool, default True
        Remove the positive per-query and per-key-set factors listed in Notes
        before exponentiating; they cancel in each row's ratio, so the output
        is mathematically unchanged. ``False`` uses :func:`rfkernels.feature_map`
        verbatim (and raises ``FloatingPointError`` where it overflows);
        it exists to check the stabilised path.
    nonpositive : {"nan", "divide", "raise"}, default "nan"
        What to do with rows whose normaliser :math:`\hat D_i \le 0` (see
        Notes). Such rows are always counted in the result.
        ``"nan"``: set them to NaN. ``"divide"``: divide anyway, as an
        unguarded implementation would (a negative normaliser flips the row's
        weights; a zero one gives NaN). ``"raise"``: raise ``FloatingPointError``.
    block_size : int, optional
        Rows processed at a time; default :data:`FAVOR_BLOCK` (512), or
        :data:`FAVOR_CAUSAL_BLOCK` (128) when causal. Memory is
        O(block·(r + d_v)) plus, for causal, O(block²); results agree between
        block sizes to rounding.
    preset : str, default "rfkernels"
        The numerics (:data:`PRESETS`, :mod:`rfkernels.presets`): the
        estimators as stated, or what ``"performer-pytorch"``,
        ``"google-research"`` or ``"xformers"`` compute on the same inputs and
        W (their epsilon, shifts and guard; bidirectional, NumPy, and the
        kinds each library offers; ``stabilize`` applies to ``"rfkernels"``
        only). ``result.stabiliser_share`` is each row's share of its
        normaliser due to the library's epsilon.

    Returns
    -------
    AttentionResult
        ``.output`` (L, d_v), ``.denominators`` (L,),
        ``.n_nonpositive_denominators``, ``.nonpositive_rows`` and the
        arguments; see :class:`AttentionResult`.

    Raises
    ------
    ValueError
        Non-finite or badly shaped Q, K, V or W; Q, K and W not sharing d;
        V without one row per key; causal with L != L_k; unknown kind or
        nonpositive policy (a deterministic map: use :func:`linear_attention`);
        block_size < 1; ``A`` missing for ``kind="oprf"``, not a float < 1/8
        or ``"auto"``, or given for another kind. All before any work.
    TypeError
        causal or stabilize not a bool; block_size not an integer.
    FloatingPointError
        Before any work: some ``|q|^2`` or ``|k|^2`` overflows float64
        (entries beyond about 1e154; every feature map needs it), or
        ``|w||q|`` exceeds 1e300 (the projections could overflow). After:
        ``nonpositive="raise"`` and some normaliser is <= 0; or an output
        entry that is not reported as a non-positive row overflows (only for
        ``stabilize=False``, or ``|V|`` near 1e308).
    MemoryError
        If the blocks and state would not fit in memory (NumPy arrays; the
        message names L, r and the block size).

    Notes
    -----
    **Bidirectional** [1]_: with :math:`Q' = \varphi(Q)` (L, r) and
    :math:`K' = \varphi(K)` (L_k, r),

    .. math::

        \hat N = Q' \bigl(K'^\top V\bigr), \qquad
        \hat D = Q' \bigl(K'^\top \mathbf 1\bigr), \qquad
        \widehat{\operatorname{Att}}_i = \hat N_i / \hat D_i,

    accumulated over blocks of keys into the (r, d_v) and (r,) states, then
    applied to blocks of queries.

    **Causal**: the same with prefix sums
    :math:`S_i = \sum_{j \le i} \varphi(k_j) v_j^\top`,
    :math:`z_i = \sum_{j \le i} \varphi(k_j)`. Rows are processed in blocks:
    a block's output is :math:`Q'_b S + \operatorname{tril}(Q'_b K_b'^\top) V_b`
    with S the state of all earlier blocks, then S and z absorb the block.
    Only the (r, d_v) state and one (block, block) matrix are held; the
    (L, r, d_v) tensor of all prefix sums is never stored.

    **Stabilisation** (``stabilize=True``). A factor :math:`c_i > 0` common to
    all terms of row i cancels in :math:`\hat N_i / \hat D_i`, and so does a
    factor common to all keys. The features used are:

    - positive and hyperbolic queries: the exponents
      :math:`e_{il} = \pm\omega_l^\top q_i - |q_i|^2/2` (both signs for
      hyperbolic) are shifted by the **per-query** maximum
      :math:`a_i = \max_l e_{il}`, so :math:`\varphi(q_i) \propto e^{e_{il} - a_i} \in (0, 1]`
      (the :math:`|q_i|^2/2` and :math:`1/\sqrt{m}` or :math:`1/\sqrt{2m}` drop out with it);
    - positive and hyperbolic keys: the exponents
      :math:`f_{jl} = \pm\omega_l^\top k_j - |k_j|^2/2` are shifted by the
      **key-set** maximum :math:`b = \max_{j, l} f_{jl}`, taken as a running
      maximum over the blocks of keys read so far: when a block raises it
      from b to b', the accumulated state is multiplied by
      :math:`e^{b - b'} \le 1`. Bidirectional rows thus all use the global
      maximum over all keys; causal rows of a block use the maximum over the
      keys up to the end of that block. Each row uses one shift for all of
      its keys, so it cancels;
    - OPRF queries and keys: the same shifts of the exponents
      :math:`\sqrt{1 - 4A}\,\omega_l^\top x + A|\omega_l|^2 - |x|^2/2`
      (the constant :math:`(1 - 4A)^{d/4}/\sqrt m` drops out with them);
    - trig queries: the per-query factor :math:`e^{|q_i|^2/2}/\sqrt m` is
      dropped, leaving :math:`[\sin\omega_l^\top q_i, \cos\omega_l^\top q_i]`;
    - trig keys: :math:`e^{|k_j|^2/2}` is divided by the running maximum
      :math:`e^{b}` with :math:`b = \max_j |k_j|^2/2`, as above. The sines and
      cosines themselves cannot be shifted (they change sign).

    All shifted features lie in [−1, 1], so no sum overflows. What remains
    is underflow: a positive or hyperbolic row whose every term is below
    about 1e-308 of the key-set maximum comes out with :math:`\hat D_i = 0`
    and is reported as non-positive.

    **Non-positive normalisers.** Trig estimates of :math:`SM` can be
    negative, so :math:`\hat D_i` can be zero or negative; the row's
    quotient is then meaningless (its weights change sign) and may be
    arbitrarily large. These rows are counted in
    ``n_nonpositive_denominators``, listed in ``nonpositive_rows`` and
    handled by ``nonpositive``; nothing is divided by zero silently.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Sections 2.2-2.3 and Appendix B.1. https://arxiv.org/abs/2009.14794
    """
    if isinstance(kind, str) and kind in FEATURE_MAPS:
        raise ValueError(
            f"favor_attention takes the random-feature kinds "
            f"{', '.join(map(repr, registry_names('kind')))}; "
            f"for the deterministic map {kind!r} use linear_attention(Q, K, V, None, {kind!r})"
        )
    check_kind(kind)
    refuse_derf_parameters(kind, B_query, B_key)
    if fit_rows is not None and not registry_entry("kind", kind).population:
        raise ValueError(f"fit_rows is for the data-fitted kinds "
                         f"({', '.join(repr(k.name) for k in registry_entries('kind') if k.population)}); "
                         f"got kind={kind!r}")
    if is_derf(kind):  # DERF: OPRF on (q', k'), or positive features in d + 2 dimensions
        check_choice(preset, "preset", exact_presets())
        return _derf_attention(Q, K, V, W, kind, A, B_query, B_key, causal=causal, stabilize=stabilize,
                               nonpositive=nonpositive, block_size=block_size, fit_rows=fit_rows,
                               rows=rows)
    entry = check_preset(preset, kind, causal is True)
    if not entry.exact:
        if stabilize is not True:
            raise ValueError(f"stabilize applies to preset='rfkernels'; preset={entry.name!r} "
                             "computes what its library computes")
        return _linear_attention(Q, K, V, W, kind, None, "attention", causal, True, nonpositive,
                                 block_size, "favor_attention", A, entry, rows=rows)
    return _linear_attention(Q, K, V, W, kind, None, "attention", causal, stabilize,
                             nonpositive, block_size, "favor_attention", A, rows=rows)


def linear_attention(
    Q, K, V, W, kind, *, nu=None, A=None, normalization="attention", causal=False,
    stabilize=True, nonpositive="nan", block_size=None, B_query=None, B_key=None,
):
    r"""Linear attention with any feature map, bidirectional or causal.

    Replaces :math:`\exp(q_i^\top k_j)` by :math:`\varphi(q_i)^\top\varphi(k_j)`
    for a random-feature kind (FAVOR; then identical to
    :func:`favor_attention`) or a deterministic map of linear attention
    (identity, ELU+1, DPFP-ν [2]_), in O(L·r·(d + d_v)) time without an
    L×L matrix. The bidirectional and causal algorithms, the blocks and the
    stabilisation are those of :func:`favor_attention` (one implementation).

    Parameters
    ----------
    Q : array_like of shape (L, d)
        Queries (pre-scaled as in :func:`favor_attention`).
    K : array_like of shape (L_k, d)
        Keys.
    V : array_like of shape (L_k, d_v)
        Values.
    W : array_like of shape (m, d), or None
        Projections for the random kinds; None for the deterministic maps.
    kind : str
        A registered kind with a literal feature map (:func:`rfkernels.features.mapped_kinds`)
        or a deterministic map of :data:`rfkernels.FEATURE_MAPS`.
        The feature map (:func:`rfkernels.feature_map`).
    nu : int, optional
        DPFP's ν (default 1, d_dot = 2dν); only for ``kind="dpfp"``.
    A, B_query, B_key : optional
        The OPRF parameter, only (and required) for ``kind="oprf"``, and the
        DERF parameters (``kind="derf"``), as in :func:`favor_attention`.
    normalization : {"attention", "sum"}, default "attention"
        ``"attention"``: :math:`\mathrm{out}_i = S_i\varphi(q_i) / z_i^\top\varphi(q_i)`
        with :math:`S_i = \sum_j v_j\varphi(k_j)^\top`,
        :math:`z_i = \sum_j \varphi(k_j)` (sums over all j, or j <= i when
        causal): the rows are weighted means of the values. ``"sum"``
        (Schlag et al. [2]_): queries and keys are sum-normalised,
        :math:`\varphi' = \varphi / \sum_l \varphi_l`, and
        :math:`\mathrm{out}_i = S'_i\varphi'(q_i)` with
        :math:`S'_i = \sum_j v_j\varphi'(k_j)^\top` — no denominator. Only
        for non-negative maps (positive, hyperbolic, oprf, elu1, dpfp).
    causal : bool, default False
        Row i attends to keys j <= i only (needs L = L_k).
    stabilize : bool, default True
        The shifts of :func:`favor_attention` for the random kinds (attention
        normalisation); deterministic maps and sum normalisation need none
        (sum normalisation divides each row by its own sum, which cancels
        every per-row factor), so there it has no effect.
    nonpositive : {"nan", "divide", "raise"}, default "nan"
        Rows with an attention normaliser <= 0, as in :func:`favor_attention`:
        trig and identity features can make it negative, DPFP features 0 (a
        query whose features share no support with any key's). Unused under
        ``normalization="sum"``.
    block_size : int, optional
        Rows per block, as in :func:`favor_attention`.

    Returns
    -------
    AttentionResult
        ``.output`` (L, d_v); ``.denominators`` (None under sum
        normalisation); the non-positive rows and the arguments.

    Raises
    ------
    ValueError
        As :func:`favor_attention`; W given for a deterministic map or
        missing for a random kind; nu out of 1..2d-1 or given for another
        kind; unknown normalization; sum normalisation of trig or identity
        features. All before any work.
    TypeError
        causal or stabilize not a bool; nu or block_size not an integer.
    FloatingPointError
        As :func:`favor_attention`; a DPFP feature overflows (entries beyond
        about 1e154); under sum normalisation, a query or key whose features
        are all 0 (then φ' is undefined).
    MemoryError
        If the blocks and state would not fit in memory.

    Notes
    -----
    The memory view [2]_: :math:`S = \sum_j v_j \varphi(k_j)^\top` is an
    associative memory of d_dot = r columns; see
    :func:`rfkernels.analysis.capacity`. For the deterministic maps the
    error against softmax attention is a bias: nothing is random.

    Example (Schlag et al.'s d = 2 memory, checked in the tests): with keys
    (0, 1), (1, 0) and values (1, 0), (0, 1), ELU+1 features (1, 2) and
    (2, 1), the query φ(k_1) reads :math:`S\varphi(k_1) = (5, 4)`: signal
    5·v_1 plus crosstalk 4·v_2; attention normalisation returns (5, 4)/9.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    .. [2] I. Schlag, K. Irie and J. Schmidhuber, "Linear Transformers Are
       Secretly Fast Weight Programmers", ICML 2021, Sections 4-5.
       https://arxiv.org/abs/2102.11174
    """
    if is_derf(kind):
        if nu is not None:
            raise ValueError(f"nu is the parameter of kind='dpfp' only; got nu={nu!r} with kind={kind!r}")
        return _derf_attention(Q, K, V, W, kind, A, B_query, B_key, normalization=normalization,
                               causal=causal, stabilize=stabilize, nonpositive=nonpositive,
                               block_size=block_size, caller="linear_attention")
    refuse_derf_parameters(kind, B_query, B_key)
    return _linear_attention(Q, K, V, W, kind, nu, normalization, causal, stabilize,
                             nonpositive, block_size, "linear_attention", A)


def _derf_attention(Q, K, V, W, kind, A, B_query, B_key, *, normalization="attention", causal=False,
                    stabilize=True, nonpositive="nan", block_size=None, caller="favor_attention",
                    fit_rows=None, rows=None):
    """A two-map kind's attention: fitted on ``fit_rows`` or Q and K (data-fitted kinds), then its
    map's ``runs_as`` on (q', k')."""
    xp = get_array_module(Q, K, V) if W is None else get_array_module(Q, K, V, W)
    require_projections(kind, W)
    q, k, _, _ = check_qkv(Q, K, V, causal, xp)
    est = estimator(kind, A=A, B_query=B_query, B_key=B_key, d=q.shape[1])
    population = (to_numpy(q), to_numpy(k)) if fit_rows is None else check_fit_rows(fit_rows, q.shape[1])
    if est.needs_fit:
        est = est.fitted_on(*population)
    fmap = est.kind.feature_map
    if not fmap.two_roles:  # another kind's parameters (FAVOR+'s, OPRF's): that kind, the same bits
        run, label = est.kind.name, est.kind.name
        a = None if fmap.param is None else getattr(est.params, fmap.param.name)
    elif est.supports.scalar_law:  # isotropic A: OPRF on (q', k')
        (q, k, a), run, label = fmap.attention_inputs(est, q, k, xp), fmap.runs_as, kind
    else:  # a dense A: positive features in d + 2 dimensions
        w = check_matrix_xp(W, "W", "(m, d)", xp)
        check_same_d([q.shape, w.shape], ["Q", "W"])
        (q, k, W), a, run, label = (fmap.dense_attention_inputs(est, q, k, w, xp), None,
                                    fmap.dense_runs_as, kind)
    res = _linear_attention(q, k, V, W, run, None, normalization,
                            causal, stabilize, nonpositive, block_size, caller, a, rows=rows)
    return replace(res, kind=label)


class _Features:
    """How blocks of queries and keys become features in one linear attention.

    ``queries(q)`` gives φ(q) up to a positive per-row factor (which cancels
    in attention normalisation); ``keys(k)`` gives ``(φ(k), rescale)``, where
    ``rescale`` (or None) multiplies the sums accumulated so far (the
    running key shift of the random kinds, see :class:`rfkernels.presets.KeyState`).
    """

    def __init__(self, w, kind, nu, normalization, stabilize, xp, A=None):
        self.w, self.kind, self.nu, self.xp, self.A = w, kind, nu, xp, A
        self.sum = normalization == "sum"
        self.random = kind not in FEATURE_MAPS
        self.shifted = self.random and not self.sum and stabilize
        self.key_state = KeyState(kind, stabilize, xp, A) if self.shifted else None

    def _plain(self, x, role):
        return feature_map(x, self.w, self.kind, nu=self.nu, sum_normalize=self.sum, A=self.A, role=role)

    def queries(self, q):
        if self.shifted:
            return query_features(q, self.w, self.kind, True, self.xp, self.A)
        return self._plain(q, "query")

    def keys(self, k):
        if self.shifted:
            return self.key_state.features(k, self.w)
        return self._plain(k, "key"), None


def _linear_attention(Q, K, V, W, kind, nu, normalization, causal, stabilize, nonpositive,
                      block_size, caller, A=None, entry=None, rows=None):
    """Validate everything, then run the one linear-attention core (at ``rows`` only, if given)."""
    xp = get_array_module(Q, K, V) if W is None else get_array_module(Q, K, V, W)
    deterministic, nu, _ = check_feature_map(kind, W, nu, False, A=A)
    A = None if deterministic else check_map_param(kind, A)
    fmap = None if deterministic else registry_entry("kind", kind).feature_map
    if fmap is not None and fmap.attention_reason is not None:
        raise ValueError(f"{caller} does not take kind={kind!r}: {fmap.attention_reason}")
    check_choice(normalization, "normalization", NORMALIZATIONS)
    q, k, v, causal = check_qkv(Q, K, V, causal, xp)
    query_rows = None if rows is None else check_query_rows(rows, q.shape[0])
    stabilize = check_bool(stabilize, "stabilize")
    check_choice(nonpositive, "nonpositive", NONPOSITIVE_POLICIES)
    check_feature_map(kind, W, nu, normalization == "sum", q.shape[1], A=A)  # nu <= 2d - 1; sum-normalisable
    if block_size is None:
        block = FAVOR_CAUSAL_BLOCK if causal else FAVOR_BLOCK
    else:
        block = check_int(block_size, "block_size")
    if deterministic:
        w = None
        r = feature_dimension(kind, q.shape[1], nu=nu)
    else:
        w = check_matrix_xp(W, "W", "(m, d)", xp)
        check_same_d([q.shape, k.shape, w.shape], ["Q", "K", "W"])
        r = feature_dimension(kind, q.shape[1], m=registry_entry("kind", kind).base_rows(w.shape[0]))
        longest = max(check_squared_norms(q, "Q", "q", xp, caller),
                      check_squared_norms(k, "K", "k", xp, caller))
        with np.errstate(over="ignore"):
            reach = longest * float(xp.sqrt(xp.max(xp.sum(w * w, axis=1))))
        if reach > 1e300:  # |w.q| <= |w||q|: the projections may overflow
            raise FloatingPointError(
                f"{caller}: the projections W @ q and W @ k can reach |w||q| = {reach:.3g}, "
                "beyond 1e300 (float64 ends at 1.8e308); rescale W, Q and K"
            )
    if xp is np:
        rows = min(block, max(q.shape[0], k.shape[0]))
        # state (r, d_v) and sums, features and projections of a block (a few (rows, r)
        # arrays), the causal (rows, rows) matrix, the (L, d_v) output and normalisers
        nbytes = 8 * (2 * r * v.shape[1] + 6 * rows * r + 2 * rows * rows
                      + q.shape[0] * (v.shape[1] + 2))
        check_memory(nbytes, f"{caller} with L={q.shape[0]}, r={r} features and "
                             f"block_size={block}")

    if isinstance(A, str):  # "auto": fitted by the map on the queries and keys (OPRF: O((L + L_k) d))
        A = fit_map_param(kind, A, q, k)
    if query_rows is not None and not causal:  # bidirectional rows are independent: those alone
        q = q[xp.asarray(query_rows)]
    if entry is not None:  # a library's numerics (rfkernels.presets)
        if xp is not np:
            raise ValueError(f"preset={entry.name!r} runs on NumPy arrays only")
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            try:
                num, den, share = preset_attention(q, k, v, w, kind, entry, A=A, block=block,
                                                   causal=causal, rows=query_rows)
            except FloatingPointError as exc:
                raise FloatingPointError(f"{caller}: {exc}") from None
        try:
            res = _normalise(num, den, kind, nu, causal, True, nonpositive, xp, v, w, caller, A)
        except FloatingPointError:
            raise FloatingPointError(
                f"{caller}(preset={entry.name!r}, kind={kind!r}) overflowed in rows with a positive "
                "normaliser: the library's sums of features exceed float64 (it computes them so)"
            ) from None
        return replace(res, preset=entry.name, stabiliser_share=share)
    feats = _Features(w, kind, nu, normalization, stabilize, xp, A)
    try:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            if causal:
                num, den = _causal(q, k, v, feats, r, block, xp, query_rows)
            else:
                num, den = _bidirectional(q, k, v, feats, r, block, xp)
    except FloatingPointError as exc:  # raised by feature_map
        if not deterministic and normalization == "attention" and not stabilize:
            raise FloatingPointError(
                f"{caller}(kind={kind!r}, stabilize=False): the unshifted features "
                "overflow for these inputs; stabilize=True removes the factors that overflow"
            ) from None
        raise FloatingPointError(f"{caller}: {exc}") from None
    if normalization == "sum":
        if not bool(xp.all(xp.isfinite(num))):
            raise FloatingPointError(
                f"{caller}(kind={kind!r}, normalization='sum') overflowed: the weighted sums of V "
                f"(max |V| = {float(xp.max(xp.abs(v))):.3g}) exceed float64"
            )
        return AttentionResult(
            output=num, denominators=None, n_nonpositive_denominators=0,
            nonpositive_rows=np.zeros(0, dtype=np.int64), kind=kind, causal=causal,
            stabilize=stabilize, nonpositive=nonpositive, normalization="sum", nu=nu, A=A,
        )
    return _normalise(num, den, kind, nu, causal, stabilize, nonpositive, xp, v, w, caller, A)


def _bidirectional(q, k, v, feats, r, block, xp):
    state = xp.zeros((r, v.shape[1]), dtype=xp.float64)  # K'ᵀV
    norm = xp.zeros(r, dtype=xp.float64)  # K'ᵀ1
    for start in range(0, k.shape[0], block):
        phi_k, rescale = feats.keys(k[start : start + block])
        if rescale is not None:
            state *= rescale
            norm *= rescale
        state += phi_k.T @ v[start : start + block]
        norm += xp.sum(phi_k, axis=0)

    num = xp.empty((q.shape[0], v.shape[1]), dtype=xp.float64)
    den = xp.empty(q.shape[0], dtype=xp.float64)
    for start in range(0, q.shape[0], block):
        phi_q = feats.queries(q[start : start + block])
        num[start : start + block] = phi_q @ state
        den[start : start + block] = phi_q @ norm
    return num, den


def _causal(q, k, v, feats, r, block, xp, rows=None):
    """Prefix sums block by block; with ``rows`` (ascending), only those rows' outputs, their
    query features alone formed (the keys' side is the same)."""
    n = q.shape[0]
    state = xp.zeros((r, v.shape[1]), dtype=xp.float64)  # Σ_{j < block} φ(k_j) v_jᵀ
    norm = xp.zeros(r, dtype=xp.float64)  # Σ_{j < block} φ(k_j)
    n_out = n if rows is None else len(rows)
    num = xp.empty((n_out, v.shape[1]), dtype=xp.float64)
    den = xp.empty(n_out, dtype=xp.float64)
    for start, stop, out, mine, future in causal_blocks(n, block, rows, xp):
        phi_k, rescale = feats.keys(k[start:stop])
        if rescale is not None:  # the block's rows use the shift including its own keys
            state *= rescale
            norm *= rescale
        v_b = v[start:stop]
        if out.stop > out.start:
            phi_q = feats.queries(q[mine])
            local = phi_q @ phi_k.T  # (rows of the block, keys of the block)
            local[future] = 0.0  # keep keys j <= i
            num[out] = phi_q @ state + local @ v_b
            den[out] = phi_q @ norm + xp.sum(local, axis=1)
        state += phi_k.T @ v_b
        norm += xp.sum(phi_k, axis=0)
    return num, den


def _normalise(num, den, kind, nu, causal, stabilize, nonpositive, xp, v, w, caller, A=None):
    bad = den <= 0
    rows = to_numpy(xp.nonzero(bad)[0]).astype(np.int64)
    n_bad = int(rows.size)
    if n_bad and nonpositive == "raise":
        shown = ", ".join(str(i) for i in rows[:10]) + (", ..." if n_bad > 10 else "")
        raise FloatingPointError(
            f"{caller}(kind={kind!r}): {n_bad} row(s) have a non-positive "
            f"normaliser sum_j phi(q_i).phi(k_j) <= 0 (rows {shown}); "
            "pass nonpositive='nan' or 'divide' to get the output with these rows reported"
        )
    out = num  # divided in place: the output is the only (L, d_v) array held
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if nonpositive == "nan":
            out /= xp.where(bad, 1.0, den)[:, None]
            out[bad] = xp.nan
        else:  # "divide"
            zero = den == 0
            out /= xp.where(zero, 1.0, den)[:, None]
            out[zero] = xp.nan
    finite_rows = xp.all(xp.isfinite(out), axis=1)
    if not bool(xp.all(finite_rows | bad)):
        if w is None:
            why = (f"; the weighted sums of V (max |V| = {float(xp.max(xp.abs(v))):.3g}) "
                   "or the features exceed float64")
        elif not stabilize:
            why = "; stabilize=True removes the factors that overflow"
        else:
            why = (f"; the weighted sums of V (max |V| = {float(xp.max(xp.abs(v))):.3g}) or "
                   "the projections W @ q, W @ k (max |W| = "
                   f"{float(xp.max(xp.abs(w))):.3g}) exceed float64")
        raise FloatingPointError(
            f"{caller}(kind={kind!r}, stabilize={stabilize}) overflowed in rows "
            "with a positive normaliser" + why
        )
    if nonpositive == "divide":
        out[bad & ~finite_rows] = xp.nan  # reported rows whose quotient overflowed
    return AttentionResult(
        output=out,
        denominators=den,
        n_nonpositive_denominators=n_bad,
        nonpositive_rows=rows,
        kind=kind,
        causal=causal,
        stabilize=stabilize,
        nonpositive=nonpositive,
        normalization="attention",
        nu=nu,
        A=A,
    )
