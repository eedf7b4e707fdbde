"""The projection ensembles: how the rows of W are coupled (the pair law's first half).

Each entry carries its whole-matrix sampler (:attr:`Ensemble.sample`, what
:func:`rfkernels.draw_projections` calls) and that sampler's memory estimate
(:attr:`Ensemble.matrix_bytes`). The building blocks (:func:`orthogonal_blocks`,
:func:`simplex_directions`, :func:`sorf_blocks`, :func:`fwht`,
:func:`xformers_features`) are public in :mod:`rfkernels.projections`. The
reduced engine's laws of the scalar projections are in :mod:`rfkernels.engine`
(its kernels and vectorised laws are keyed by :attr:`Ensemble.code`).
"""

from __future__ import annotations

import numpy as np

from ..validation import check_bool, check_int, check_memory, check_seed
from . import registry

#: The literal-only ensembles' reason for the reduced engine.
_LITERAL = "use method='literal'"


def _no_sampler(name, why):
    """The reduced engine's refusal of a literal-only ensemble (one wording for all)."""
    return f"method='reduced' has no sampler for ensemble={name!r}: {why}; {_LITERAL}"


def _no_theory(name, what="Monte Carlo only"):
    """The theory's refusal of an ensemble without a closed form (one wording for all)."""
    return f"no closed form for the {name} ensemble ({what})"


# ---------------------------------------------------------------------------
# Peak bytes of the samplers (Ensemble.matrix_bytes)
# ---------------------------------------------------------------------------


def _rows_bytes(m, d):
    """The (m, d) normals and up to two copies (row norms, contiguous result)."""
    return 8 * 3 * int(m) * int(d)


def _block_bytes(m, d):
    """Orthogonal blocks: ``ceil(m/d)`` Gaussian d×d blocks, their Q and R and LAPACK's workspace, and the rows."""
    m, d = int(m), int(d)
    return _rows_bytes(m, d) + 8 * 4 * (-(-m // d)) * d * d


def _sorf_bytes(m, d):
    """SORF: ``ceil(m/D)`` blocks of (D, d) columns, a transform temporary, the signs, and the rows."""
    m, d = int(m), int(d)
    big_d = _next_pow2(d)
    return _rows_bytes(m, d) + 8 * (-(-m // big_d)) * big_d * (3 * d + 3)


def _xformers_bytes(m, d):
    """xformers: ``ceil(d/m)`` Gaussian m×m blocks (H, Q, R, the signed and the scaled Q): O(m²) even when d is small."""
    m, d = int(m), int(d)
    return _rows_bytes(m, d) + 8 * 5 * (-(-d // m)) * m * m


# ---------------------------------------------------------------------------
# Building blocks
# ---------------------------------------------------------------------------


def orthogonal_blocks(n_blocks, d, rng, fix_signs=True):
    r"""Independent random d×d orthogonal matrices from one batched QR.

    Parameters
    ----------
    n_blocks : int
        Number of matrices, >= 1.
    d : int
        Their size, >= 1.
    rng : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Source of randomness (see :func:`rfkernels.validation.check_seed`);
        a Generator is used in place, so its stream advances.
    fix_signs : bool, default True
        Multiply the columns of Q by ``sign(diag(R))``. With the fix the
        matrices are Haar-distributed on O(d); without it they are what
        ``numpy.linalg.qr`` returns, which is *not* Haar (see Notes).

    Returns
    -------
    Q : ndarray of shape (n_blocks, d, d)
        ``Q[b]`` is orthogonal. Exactly ``n_blocks * d * d`` standard normals
        are drawn from ``rng``.

    Notes
    -----
    Let :math:`G` have i.i.d. :math:`N(0, 1)` entries and :math:`G = QR` be
    its QR decomposition. :math:`G` is invariant in law under
    :math:`G \mapsto HG` for every orthogonal :math:`H`, but the QR
    factorisation is only unique up to :math:`Q \mapsto QS`,
    :math:`R \mapsto SR` with :math:`S` a diagonal sign matrix. Choosing the
    representative with :math:`\operatorname{diag}(R) > 0`, i.e.

    .. math:: Q_{\text{Haar}} = Q \, \operatorname{diag}(\operatorname{sign} R_{kk}),

    makes the map :math:`G \mapsto Q` equivariant (:math:`HG \mapsto HQ`),
    so :math:`Q_{\text{Haar}}` is Haar-distributed [2]_; this is what
    ``scipy.stats.ortho_group`` does.

    LAPACK's Householder QR (``dgeqrf``, behind ``numpy.linalg.qr``) does not
    choose that representative. Its first reflector maps the first column
    :math:`g_1` of :math:`G` to :math:`\beta e_1` with
    :math:`\beta = -\operatorname{sign}(G_{11})\,|g_1|`, so
    :math:`R_{11} = -\operatorname{sign}(G_{11})|g_1|` and the first column
    of Q is :math:`-\operatorname{sign}(G_{11})\, g_1/|g_1|`: its first entry
    :math:`Q_{11} = -|G_{11}|/|g_1|` is never positive. The same convention
    at every step skews the whole diagonal of Q (negative mean for
    :math:`k < d`, positive for the last entry, where the 1×1 reflector is
    the identity; for :math:`k < d` the k-th reflector maps :math:`e_k` to a
    vector whose k-th entry is :math:`1 - \tau_k \le 0`, before the earlier
    reflectors mix it). ``diag(R)`` itself still has random signs; what is fixed
    is its sign *relative to the pivot of G*, which ties Q to G's
    orientation. With ``fix_signs=False`` that bias is kept on purpose.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021. https://arxiv.org/abs/2009.14794
    .. [2] F. Mezzadri, "How to generate random matrices from the classical
       compact groups", Notices of the AMS 54(5), 592-604, 2007.
    """
    n_blocks = check_int(n_blocks, "n_blocks")
    d = check_int(d, "d")
    rng = check_seed(rng)
    fix_signs = check_bool(fix_signs, "fix_signs")
    check_memory(_block_bytes(n_blocks * d, d), f"orthogonal_blocks(n_blocks={n_blocks}, d={d})")
    gaussian = rng.standard_normal((n_blocks, d, d))
    q, r = np.linalg.qr(gaussian)
    if fix_signs:
        diag = np.diagonal(r, axis1=-2, axis2=-1)
        # sign(0) would zero a column; R_kk = 0 has probability zero, map it to +1.
        q = q * np.where(diag < 0, -1.0, 1.0)[:, np.newaxis, :]
    return q


def _next_pow2(d):
    """The smallest power of two >= d."""
    return 1 << (int(d) - 1).bit_length()


def fwht(a, axis=-1):
    r"""Normalised fast Walsh-Hadamard transform of ``a`` along ``axis``.

    Returns :math:`H a` with :math:`H = H_D / \sqrt{D}` the orthogonal
    (Sylvester-ordered) Hadamard matrix, ``D = a.shape[axis]`` a power of
    two: ``scipy.linalg.hadamard(D) @ a / sqrt(D)``, in ``log2(D)``
    butterfly passes of O(D) each (O(D log D) per vector, no D×D matrix).
    """
    a = np.moveaxis(np.array(a, dtype=np.float64, copy=True), axis, -1)
    big_d = a.shape[-1]
    if big_d & (big_d - 1):
        raise ValueError(f"fwht needs a power-of-two length along axis {axis}; got {big_d}")
    lead = a.shape[:-1]
    h = 1
    while h < big_d:
        v = a.reshape(lead + (big_d // (2 * h), 2, h))
        top, bottom = v[..., 0, :].copy(), v[..., 1, :]
        v[..., 0, :] += bottom
        v[..., 1, :] = top - bottom
        h *= 2
    if big_d > 1:
        a *= 1.0 / np.sqrt(big_d)
    return np.moveaxis(a, -1, axis)


def simplex_directions(d):
    r"""The d unit vertices of a regular simplex in R^d centred at 0, as rows.

    :math:`s_i = \sqrt{d/(d-1)}\,(e_i - \mathbf 1/d)`: unit length,
    pairwise cosine :math:`-1/(d-1)`, summing to 0. Needs d >= 2.
    """
    d = check_int(d, "d", minimum=2)
    return np.sqrt(d / (d - 1.0)) * (np.eye(d) - 1.0 / d)


def sorf_blocks(n_blocks, d, rng):
    r"""Structured orthogonal blocks :math:`\sqrt{D}\,H D_1 H D_2 H D_3` (first d columns).

    Parameters
    ----------
    n_blocks : int
        Number of independent blocks, >= 1.
    d : int
        Input dimension, >= 1; ``D`` is the next power of two >= d.
    rng : None, int, SeedSequence or Generator
        Draws ``n_blocks * 3 * D`` random signs (``rng.integers(0, 2)``, in
        the order block, diagonal ``D_1, D_2, D_3``, coordinate).

    Returns
    -------
    ndarray of shape (n_blocks, D, d)
        Block ``b`` is the first ``d`` columns of
        :math:`\sqrt{D}\,H D_1 H D_2 H D_3` (``H`` the normalised D×D
        Hadamard matrix, ``D_k`` diagonal ±1): the rows a zero-padded input
        sees. Built column by column with :func:`fwht`, O(d D log D) per
        block. With d = D the rows are orthogonal, of length sqrt(d).
    """
    n_blocks = check_int(n_blocks, "n_blocks")
    d = check_int(d, "d")
    rng = check_seed(rng)
    big_d = _next_pow2(d)
    signs = 2.0 * rng.integers(0, 2, size=(n_blocks, 3, big_d)) - 1.0
    # columns e_j of the D x D identity, j < d, as an (n_blocks, D, d) stack
    a = np.zeros((n_blocks, big_d, d))
    a[:, np.arange(d), np.arange(d)] = signs[:, 2, :d]  # D_3 e_j
    a = fwht(a, axis=1) * signs[:, 1, :, None]  # D_2 H D_3 e_j
    a = fwht(a, axis=1) * signs[:, 0, :, None]  # D_1 H D_2 H D_3 e_j
    return np.sqrt(big_d) * fwht(a, axis=1)


def xformers_features(m, d, rng, norms="chi"):
    r"""The (d, m) projection matrix of xformers' FAVOR feature maps, as its forward applies it.

    A re-statement (no code copied) of ``_get_random_ortho_matrix`` and
    ``_get_feature_map`` in ``xformers/components/attention/feature_maps/softmax.py``
    of facebookresearch/xformers at commit
    ``279e083384ea26b5359ac65d116fd12b15b32643`` (BSD-3-Clause): ``SMOrf``
    and ``SMHyperbolic`` (``norms="chi"``, xformers' ``NormDistribution.Xi``)
    and ``SMReg`` (``norms="fixed"``, ``NormDistribution.Uniform`` then a
    factor ``sqrt(d)``). Their forward computes ``x @ features``.

    Parameters
    ----------
    m : int
        Number of projections, >= 1 (xformers' ``dim_features`` for SMOrf,
        ``dim_features // 2`` for SMHyperbolic and SMReg, which concatenate
        the ``exp(+w.x)`` and ``exp(-w.x)`` features).
    d : int
        Input dimension, >= 1.
    rng : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Source of randomness (see :func:`rfkernels.validation.check_seed`);
        a Generator is used in place. Exactly ``ceil(d/m) * m * m`` standard
        normals are drawn, as one C-ordered array of shape
        ``(ceil(d/m), m, m)``, and nothing else.
    norms : str, default "chi"
        A registered norm law (:func:`rfkernels.estimators.names`\ ``("norms")``)
        that :meth:`~rfkernels.estimators.NormLaw.refusal` accepts for this
        ensemble; xformers has two. Chi(d) norms (``"chi"``, xformers' ``Xi``):
        row ``i`` of block ``b`` is scaled by the length of row ``i`` of the
        same Gaussian block (a :math:`\chi(m)` variate, not independent of
        Q). Fixed norms (``"fixed"``, ``SMReg``): every row is scaled by
        :math:`\sqrt d`.

    Returns
    -------
    features : ndarray of shape (d, m), float64
        Column ``j`` is the projection :math:`\omega_j`
        (:func:`rfkernels.draw_projections` returns the transpose).

    Notes
    -----
    With :math:`B = \lceil d/m \rceil` blocks :math:`H_b` of i.i.d.
    :math:`N(0, 1)` entries (m×m) and their QR factorisations
    :math:`H_b = Q_b R_b` (``numpy.linalg.qr``, LAPACK's Householder
    convention, the same as ``torch.linalg.qr`` on the CPU),

    .. math::

        Q'_b = S_b Q_b, \qquad S_b = \operatorname{diag}(\operatorname{sign} (R_b)_{kk}),

        F_b = \operatorname{diag}(|h_{b,1}|, \dots, |h_{b,m}|)\, Q'_b
        \ \text{(chi)} \qquad \text{or} \qquad F_b = \sqrt d\, Q'_b \ \text{(fixed)},

    with :math:`h_{b,i}` the rows of :math:`H_b`; ``features`` is the first
    d rows of :math:`[F_1; \dots; F_B]` (``flatten(0, 1)[:d]``). The signs
    multiply the *rows* of Q; the fix that makes Q Haar multiplies its
    columns, :math:`Q_b S_b` (see :func:`orthogonal_blocks`). Where
    :math:`R_{kk} = 0` (probability zero) the sign is taken as +1, where
    ``torch.sign`` would give 0.

    Consequences. The rows of ``features`` are orthogonal within a block:
    for :math:`m \ge d`, :math:`F F^\top = \operatorname{diag}(|h_i|^2)`
    (chi) or :math:`d I_d` (fixed). The projections are its *columns*:
    for :math:`m > d` the m vectors :math:`\omega_j \in \mathbb R^d` cannot
    be orthogonal, and the norms scale coordinates, not projections. Chi:
    :math:`\frac1m \sum_j E\,\omega_j\omega_j^\top = I_d`, but the
    :math:`\omega_j` are not :math:`N(0, I_d)`; with the Bartlett
    decomposition (:math:`H = Q_h R_+`, :math:`R_+` independent of the
    Haar :math:`Q_h`, :math:`E R_+R_+^\top = \operatorname{diag}(2(m-k)+1)`),

    .. math:: E|\omega_j|^2 = d\,\frac{m^2 + 4(m-j) + 2}{m(m+2)}, \qquad j = 1, \dots, m,

    e.g. 1.175 d for j = 1 and 0.825 d for j = m at m = 8. Fixed:
    :math:`\sum_j |\omega_j|^2 = d^2` exactly, so the mean squared length is
    :math:`d^2/m` (:math:`\sqrt d` lengths only when m = d). Since
    :math:`H \mapsto -H` maps Q to Q and R to :math:`-R`, the law of W is
    symmetric under :math:`W \mapsto -W`.

    References
    ----------
    .. [1] facebookresearch/xformers, ``xformers/components/attention/feature_maps/softmax.py``
       at commit 279e083384ea26b5359ac65d116fd12b15b32643: lines 93-127
       (``_get_random_ortho_matrix``), 151-167 (``SMOrf``'s feature map and
       forward) and 268-275 (``SMReg``'s feature map).
       https://github.com/facebookresearch/xformers
    """
    m = check_int(m, "m")
    d = check_int(d, "d")
    rng = check_seed(rng)
    law = registry.entry("norms", norms)
    refused = law.refusal(XFORMERS.name)
    if refused is not None:
        raise ValueError(refused)
    check_memory(_xformers_bytes(m, d), f"xformers_features(m={m}, d={d})")
    return _xformers_matrix(m, d, rng, law)


def _xformers_matrix(m, d, rng, norms):
    """:func:`xformers_features` of checked sizes, a Generator and a :class:`NormLaw` (chi or fixed lengths)."""
    n_blocks = -(-d // m)
    gaussian = rng.standard_normal((n_blocks, m, m))
    q, r = np.linalg.qr(gaussian)
    diag = np.diagonal(r, axis1=-2, axis2=-1)
    # xformers' sign "fix": diag(sign R_kk) @ Q, on the rows (Haar would be Q @ diag(sign R_kk))
    q = np.where(diag < 0, -1.0, 1.0)[:, :, np.newaxis] * q
    if norms.chi:  # xformers' Xi: the Gaussian block's row lengths
        q = np.linalg.norm(gaussian, axis=-1)[:, :, np.newaxis] * q
    else:  # fixed lengths (SMReg)
        q = np.sqrt(d) * q
    return q.reshape(n_blocks * m, m)[:d]


# ---------------------------------------------------------------------------
# The whole-matrix samplers (Ensemble.sample)
# ---------------------------------------------------------------------------


def _iid(m, d, norms, rng):
    """Independent N(0, I_d) rows (independent chi(d) lengths already); another law rescales them."""
    w = rng.standard_normal((m, d))
    return w if norms.independent_chi else norms.with_lengths(w, d, rng, unit=False)


def _orthogonal_rows(m, d, rng, fix_signs):
    """The first m rows of ``ceil(m/d)`` stacked orthogonal blocks (:func:`orthogonal_blocks`)."""
    n_blocks = -(-m // d)
    q = orthogonal_blocks(n_blocks, d, rng, fix_signs=fix_signs)
    return np.swapaxes(q, -1, -2).reshape(n_blocks * d, d)[:m]


def _orthogonal(m, d, norms, rng):
    """Haar-orthogonal blocks' rows with the law's lengths."""
    return norms.with_lengths(_orthogonal_rows(m, d, rng, True), d, rng)


def _orthogonal_unfixed(m, d, norms, rng):
    """The reference code's blocks (no sign fix) with the law's lengths."""
    return norms.with_lengths(_orthogonal_rows(m, d, rng, False), d, rng)


def _simplex(m, d, norms, rng):
    """The simplex vertices rotated by one Haar matrix per block, with the law's lengths."""
    n_blocks = -(-m // d)
    q = orthogonal_blocks(n_blocks, d, rng)
    # row i of block b: Q_b s_i (s_i the simplex vertices), i.e. S @ Q_b^T
    rows = (simplex_directions(d) @ np.swapaxes(q, -1, -2)).reshape(n_blocks * d, d)[:m]
    return norms.with_lengths(rows, d, rng)


def _sorf(m, d, norms, rng):
    """Structured rows: as they are with fixed lengths, else rescaled to the law's lengths."""
    big_d = _next_pow2(d)
    n_blocks = -(-m // big_d)
    w = sorf_blocks(n_blocks, d, rng).reshape(n_blocks * big_d, d)[:m]
    if not norms.chi:  # fixed lengths: the structured rows as they are (squared length d on average)
        return w
    # a row whose first d entries all vanish (possible when d < D) stays 0:
    # it projects every padded input to 0 whatever its length
    return norms.with_lengths(w, d, rng, unit=False)


def _xformers(m, d, norms, rng):
    """The transpose of xformers' (d, m) feature matrix (:func:`xformers_features`)."""
    return _xformers_matrix(m, d, rng, norms).T


#: SciPy's Sobol direction numbers reach this many dimensions.
QMC_MAX_D = 21201


def _sobol(d, rng):
    """SciPy's scrambled Sobol engine in d dimensions, its scramble drawn from the Generator ``rng``."""
    from scipy.stats import qmc

    try:
        return qmc.Sobol(d, scramble=True, rng=rng)
    except TypeError:  # SciPy before 1.15 names it seed
        return qmc.Sobol(d, scramble=True, seed=rng)


def qmc_gaussian_rows(m, d, rng):
    r"""m rows of scrambled Sobol points in d dimensions through the normal quantile.

    The first m of :math:`2^{\lceil\log_2 m\rceil}` points of one scrambled
    (Owen) Sobol set, its scramble drawn from the NumPy Generator ``rng``.
    SciPy's scrambled points lie on the grid of :math:`2^{-b}` (b = 30 bits),
    so each coordinate is completed by a uniform jitter within its cell, drawn
    next from ``rng``: every point is then uniform on the cube (the
    quantile of grid points alone would truncate the normal at 6.01, biasing
    the exponential features at long pairs), and the net's balance above the
    cell size is kept. The normal quantile is taken of u below 1/2 and as
    :math:`-\Phi^{-1}(1 - u)` above, with :math:`1 - u` formed exactly from
    the grid, so both tails reach about 10 standard deviations: each row is
    marginally :math:`N(0, I_d)`. At m a power of 2 the set is a whole net;
    other m take its first m points (still unbiased, partly balanced).
    """
    if d > QMC_MAX_D:
        raise ValueError(f"ensemble='qmc' needs d <= {QMC_MAX_D} (SciPy's Sobol direction "
                         f"numbers); got d={d}")
    from scipy import special

    engine = _sobol(d, rng)
    grid = engine.random_base2(max(0, int(m - 1).bit_length()))
    cell = 2.0 ** -int(getattr(engine, "bits", 30))
    jitter = rng.random(grid.shape) * cell
    lower = grid + jitter  # exact: grid points are multiples of the cell
    upper = (1.0 - grid) - jitter  # 1 - u, exact to rounding near 1
    tiny = np.finfo(np.float64).tiny
    w = np.where(lower < 0.5, special.ndtri(np.maximum(lower, tiny)),
                 -special.ndtri(np.maximum(upper, tiny)))
    return w[:m]


def _qmc(m, d, norms, rng):
    """Scrambled Sobol rows through the normal quantile (marginally N(0, I_d)); another law
    rescales them."""
    w = qmc_gaussian_rows(m, d, rng)
    return w if norms.independent_chi else norms.with_lengths(w, d, rng, unit=False)


def _qmc_bytes(m, d):
    """The next power of two of Sobol points, their uniforms and the rows."""
    m, d = int(m), int(d)
    return 8 * 3 * (1 << max(0, (m - 1).bit_length())) * d


# ---------------------------------------------------------------------------
# The entries
# ---------------------------------------------------------------------------

IID = registry.register("ensemble", registry.Ensemble(
    name="iid", seed_index=0, summary="independent Gaussian rows", blocked=False, cosine=None, code=0,
    independent=True, sample=_iid))

ORTHOGONAL = registry.register("ensemble", registry.Ensemble(
    name="orthogonal", seed_index=1, summary="Haar-orthogonal blocks of d rows (QR with the sign fix)",
    blocked=True, cosine=lambda d: 0.0, code=1, sample=_orthogonal,
    matrix_bytes=_block_bytes))

#: Why the reference constructions have no reduced sampler.
_NOT_INVARIANT = ("its projections are not rotation invariant, so the scalar projections cannot be "
                  "drawn on their own")

UNFIXED_QR = registry.register("ensemble", registry.Ensemble(
    name="orthogonal-unfixed-qr", seed_index=2,
    summary="the reference code's QR without the sign fix (not Haar: biased)",
    blocked=True, cosine=None,
    reduced_reason=_no_sampler("orthogonal-unfixed-qr", _NOT_INVARIANT),
    theory_reason=_no_theory("orthogonal-unfixed-qr"),
    sample=_orthogonal_unfixed, matrix_bytes=_block_bytes, reference=True))

SIMPLEX = registry.register("ensemble", registry.Ensemble(
    name="simplex", seed_index=3, summary="simplex random features: blocks with pairwise cosine -1/(d-1)",
    blocked=True, cosine=lambda d: -1.0 / (d - 1.0), min_d=2,
    min_d_note=" (a regular simplex of d unit vectors with pairwise cosine -1/(d-1))", code=2,
    sample=_simplex, matrix_bytes=_block_bytes, quadrature_theory=True))

SORF = registry.register("ensemble", registry.Ensemble(
    name="sorf", seed_index=4, summary="structured orthogonal random features (Hadamard-diagonal products)",
    blocked=True, cosine=None,
    reduced_reason=f"method='reduced': no reduced sampler yet for ensemble='sorf'; {_LITERAL}",
    theory_reason=_no_theory("sorf"),
    sample=_sorf, matrix_bytes=_sorf_bytes, block_rows=_next_pow2))

#: xformers' FAVOR feature maps (SMOrf, SMHyperbolic, SMReg at commit 279e0833;
#: :func:`xformers_features`): every row is coupled to every
#: other (a column of a slice of m x m blocks), hence not ``blocked``.
XFORMERS = registry.register("ensemble", registry.Ensemble(
    name="orthogonal-xformers", seed_index=5,
    summary=("xformers' feature maps: columns of a slice of m x m QR blocks, "
             "signs on the rows (not Gaussian: biased)"),
    blocked=False, cosine=None,
    reduced_reason=_no_sampler("orthogonal-xformers", _NOT_INVARIANT),
    theory_reason=_no_theory("orthogonal-xformers"),
    sample=_xformers, matrix_bytes=_xformers_bytes, reference=True))

#: Randomized quasi-Monte Carlo frequencies (issue 41): rows marginally N(0, I_d), so every
#: estimator stays unbiased; no scalar law, so the literal engine only.
QMC = registry.register("ensemble", registry.Ensemble(
    name="qmc", seed_index=6,
    summary="randomized quasi-Monte Carlo: scrambled Sobol points through the normal quantile",
    blocked=False, cosine=None,
    reduced_reason=_no_sampler("qmc", "its rows are one scrambled Sobol set drawn from NumPy's "
                               "generator (jointly balanced, no scalar law, no bit identity across "
                               "backends)"),
    theory_reason=_no_theory("qmc", "Monte Carlo over scrambles only"),
    sample=_qmc, matrix_bytes=_qmc_bytes))
