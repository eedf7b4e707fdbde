"""Random projection matrices W (rows ω_1..ω_m) for random-feature estimators.

Drawing the randomness is kept apart from applying it: :func:`draw_projections`
returns a plain (m, d) array and the feature maps of :mod:`rfkernels.features`
are pure functions of it.

References
----------
.. [1] K. Choromanski, V. Likhosherstov, D. Dohan, X. Song, A. Gane,
   T. Sarlos, P. Hawkins, J. Davis, A. Mohiuddin, L. Kaiser, D. Belanger,
   L. Colwell and A. Weller, "Rethinking Attention with Performers",
   ICLR 2021. https://arxiv.org/abs/2009.14794
.. [2] F. Mezzadri, "How to generate random matrices from the classical
   compact groups", Notices of the AMS 54(5), 592-604, 2007.
   https://arxiv.org/abs/math-ph/0609050
"""

from __future__ import annotations

import numpy as np
from scipy import special

from .validation import (
    check_bool,
    check_int,
    check_memory,
    check_seed,
)
from .backends import check_backend
from .estimators import registry
from .estimators.registry import check_ensemble, check_norms
from .estimators.spec import check_sizes
from .numerics import chi_quantile

__all__ = [
    "draw_phases",
    "draw_projections",
    "fwht",
    "orthogonal_blocks",
    "projection_bytes",
    "simplex_directions",
    "sorf_blocks",
    "xformers_features",
]


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
    check_memory(projection_bytes(n_blocks * d, d, "orthogonal"),
                 f"orthogonal_blocks(n_blocks={n_blocks}, d={d})")
    gaussian = rng.standard_normal((n_blocks, d, d))
    q, r = np.linalg.qr(gaussian)
    if fix_signs:
        diag = np.diagonal(r, axis1=-2, axis2=-1)
        # sign(0) would zero a column; R_kk = 0 has probability zero, map it to +1.
        q = q * np.where(diag < 0, -1.0, 1.0)[:, np.newaxis, :]
    return q


def projection_bytes(m, d, ensemble="iid"):
    """Peak bytes :func:`draw_projections` allocates for an (m, d) matrix (an upper estimate).

    iid: the (m, d) normals and up to two copies (row norms, contiguous
    result). Orthogonal: ``ceil(m/d)`` Gaussian d×d blocks, their Q and R
    and LAPACK's workspace, then the (m, d) rows and their copies.
    ``"orthogonal-xformers"``: ``ceil(d/m)`` Gaussian m×m blocks (H, Q, R,
    the signed and the scaled Q), i.e. O(m²) even when d is small.
    """
    m, d = int(m), int(d)
    nbytes = 8 * 3 * m * d
    if ensemble == "orthogonal-xformers":
        nbytes += 8 * 5 * (-(-d // m)) * m * m
    elif ensemble == "sorf":
        big_d = _next_pow2(d)
        # ceil(m/D) blocks of (D, d) columns, a transform temporary, the signs
        nbytes += 8 * (-(-m // big_d)) * big_d * (3 * d + 3)
    elif ensemble != "iid":
        nbytes += 8 * 4 * (-(-m // d)) * d * d
    return nbytes


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
    norms : {"chi", "fixed"}, default "chi"
        ``"chi"``: row ``i`` of block ``b`` is scaled by the length of row
        ``i`` of the same Gaussian block (a :math:`\chi(m)` variate, not
        independent of Q). ``"fixed"``: every row is scaled by
        :math:`\sqrt d`.

    Returns
    -------
    features : ndarray of shape (d, m), float64
        Column ``j`` is the projection :math:`\omega_j`
        (:func:`draw_projections` returns the transpose).

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
    norms = check_norms(norms, ("chi", "fixed"))  # xformers' two laws
    n_blocks = -(-d // m)
    check_memory(projection_bytes(m, d, "orthogonal-xformers"),
                 f"xformers_features(m={m}, d={d})")
    gaussian = rng.standard_normal((n_blocks, m, m))
    q, r = np.linalg.qr(gaussian)
    diag = np.diagonal(r, axis1=-2, axis2=-1)
    # xformers' sign "fix": diag(sign R_kk) @ Q, on the rows (Haar would be Q @ diag(sign R_kk))
    q = np.where(diag < 0, -1.0, 1.0)[:, :, np.newaxis] * q
    if norms == "chi":
        q = np.linalg.norm(gaussian, axis=-1)[:, :, np.newaxis] * q
    else:
        q = np.sqrt(d) * q
    return q.reshape(n_blocks * m, m)[:d]


def _unit_rows(a):
    return a / np.linalg.norm(a, axis=-1, keepdims=True)


def antithetic_squared_norms(m, d, rng):
    r"""Squared antithetic chi(d) norms of m rows in blocks of d, drawn from the Generator ``rng``.

    Rows ``(2k, 2k+1)`` of each block share one uniform u:
    :math:`R^2 = 2\,\mathrm{gammaincinv}(d/2, u)` and
    :math:`2\,\mathrm{gammainccinv}(d/2, u)` (the quantile at 1 - u), SciPy's
    exact quantiles (:func:`rfkernels.numerics.chi_quantile.pairing` says
    which rows share); an odd block's last row has its own u.
    """
    units, row_unit, row_sign = chi_quantile.pairing(m, d)
    # cell midpoints of 2**53 cells: in (0, 1), so neither quantile is infinite
    u = ((rng.integers(0, 2**53, size=units, dtype=np.int64) + 0.5) * 2.0**-53)[row_unit]
    half = 0.5 * d
    return np.where(row_sign > 0, 2.0 * special.gammaincinv(half, u), 2.0 * special.gammainccinv(half, u))


def draw_projections(m, d, *, ensemble="iid", norms="chi", seed=None, backend="numpy"):
    r"""Draw an (m, d) projection matrix W whose rows are the ω_i.

    Parameters
    ----------
    m : int
        Number of projections (rows), >= 1. The feature dimension r is m for
        positive features and 2m for trigonometric and hyperbolic ones.
    d : int
        Input dimension (columns), >= 1.
    ensemble : {"iid", "orthogonal", "orthogonal-unfixed-qr", "simplex", "sorf", "orthogonal-xformers"}, default "iid"
        ``"iid"``: independent rows.
        ``"orthogonal"``: rows of independent Haar-random orthogonal d×d
        blocks (:func:`orthogonal_blocks`), stacked; when d does not divide m
        the last block is partial (its first ``m % d`` rows).
        ``"orthogonal-unfixed-qr"``: the same construction *without* the
        ``sign(diag(R))`` fix, as in the reference Performer code. Biased
        reference behaviour, kept so the analysis can show the bias; do not
        use it for estimation (see Notes).
        ``"simplex"`` (simplex random features, Reid et al. 2023 [3]_): the d
        unit vertices of a regular simplex (:func:`simplex_directions`,
        pairwise cosine -1/(d-1)) rotated by one Haar matrix per block,
        blocks of d rows stacked, the last partial (its first vertices).
        Needs d >= 2. Unbiased with chi norms.
        ``"sorf"`` (structured orthogonal random features, Yu et al. 2016
        [4]_): rows of :math:`\sqrt{D}\,H D_1 H D_2 H D_3`
        (:func:`sorf_blocks`; ``D`` the next power of two >= d, first d
        columns, blocks of D rows stacked, the last partial), drawn in
        O(D log D) per row. Not exactly Haar: biased for finite d.
        ``"orthogonal-xformers"``: the projections of xformers' FAVOR
        feature maps (SMOrf, SMHyperbolic, SMReg; :func:`xformers_features`):
        the transpose of the first d rows of ``ceil(d/m)`` stacked m×m QR
        blocks, with the signs of ``diag(R)`` on the rows of Q. For
        m >= d the rows ω_j are not orthogonal and not N(0, I_d); biased
        reference behaviour, Monte Carlo only (see Notes).
    norms : {"chi", "fixed", "antithetic"}, default "chi"
        ``"chi"``: every row is marginally :math:`N(0, I_d)` (iid Gaussian
        rows, or orthogonal directions times independent chi(d) lengths).
        ``"antithetic"`` (``"orthogonal"`` and ``"simplex"`` only; Reid et
        al. 2025): chi(d) lengths coupled in pairs of rows (1, 2), (3, 4),
        ... of each block, :math:`R_2 = F^{-1}(1 - F(R_1))`
        (:func:`antithetic_squared_norms`); every row still :math:`N(0, I_d)`.
        ``"fixed"``: every row has length exactly :math:`\sqrt{d}` (uniform
        directions for ``"iid"``); the regularised SMREG variant, biased
        for the softmax kernel. For ``"sorf"``, ``"fixed"`` keeps the
        structured rows as they are (the full rows have length sqrt(D); the
        first d columns, which a zero-padded input sees, have length sqrt(d)
        exactly when d is a power of two and squared length d on average
        otherwise) and ``"chi"`` rescales each row to an independent chi(d)
        length. For ``"orthogonal-xformers"`` the norms scale the
        *coordinates* (the rows of xformers' (d, m) matrix): ``"chi"``
        (xformers' ``Xi``) by the lengths of the Gaussian block's rows,
        ``"fixed"`` (``SMReg``) by :math:`\sqrt d`, so that the rows of W
        have mean squared length :math:`d^2/m`, not d.
    seed : None, int, numpy.random.SeedSequence or numpy.random.Generator
        Randomness. A Generator is used in place (its stream advances); the
        other forms start a fresh ``numpy.random.default_rng(seed)``.
    backend : {"numpy", "numba", "cupy"}, default "numpy"
        Array type of the result. The numbers are always drawn with NumPy
        from ``seed``, so every backend returns the same values: ``"numba"``
        returns the NumPy array and ``"cupy"`` a copy on the current device.

    Returns
    -------
    W : ndarray or cupy.ndarray of shape (m, d), float64

    Raises
    ------
    TypeError
        If m or d is not an integer, or seed is of an unsupported type.
    MemoryError
        If the matrix (and, for the orthogonal ensembles, its d×d blocks;
        for ``"orthogonal-xformers"`` its m×m blocks) would not fit in
        memory; checked before anything is drawn.
    ValueError
        If m or d < 1, or ensemble, norms or backend is unknown (the message
        lists the valid choices).
    ImportError
        If ``backend="cupy"`` and CuPy or a CUDA device is missing.

    Notes
    -----
    All three estimators of :math:`SM(x, y) = \exp(x^\top y)` [1]_ are
    unbiased when each :math:`\omega_i \sim N(0, I_d)` marginally, whatever
    the dependence between rows. For the orthogonal ensemble with chi norms,

    .. math:: \omega_i = \rho_i\, q_i, \qquad \rho_i \sim \chi(d),

    with :math:`q_i` the rows of :math:`Q^\top` for a Haar :math:`Q`; each
    :math:`q_i` is uniform on the sphere and independent of :math:`\rho_i`,
    so :math:`\omega_i \sim N(0, I_d)`, while :math:`\omega_i \perp \omega_j`
    within a block. Blocks are independent. With ``norms="fixed"``,
    :math:`\rho_i = \sqrt{d}` and, e.g., the positive estimator has mean
    :math:`\Lambda\, {}_0F_1(; d/2; d|u|^2/4)` instead of :math:`SM`.

    Why ``"orthogonal-unfixed-qr"`` is biased: without the sign fix the
    first column of Q, i.e. the first row :math:`q_1` of W's block, is
    :math:`-\operatorname{sign}(G_{11})\, g_1/|g_1|` (LAPACK's Householder
    convention, see :func:`orthogonal_blocks`), so its first coordinate is
    never positive. For :math:`u = x + y` along :math:`e_1`,
    :math:`\omega_1 \cdot u = -|u|\,|g|` with :math:`g \sim N(0, 1)`, and the
    positive estimator's first feature has mean
    :math:`\Lambda \cdot 2 e^{|u|^2/2}\Phi(-|u|)` instead of
    :math:`\Lambda e^{|u|^2/2}`. At :math:`d = m = 16`, :math:`|u| = 1` that
    is a relative bias of :math:`(2\Phi(-1) - 1)/16 \approx -4.3\%` of the
    whole estimate. The rest of Q's diagonal is skewed too (the k-th
    reflector sends :math:`e_k` to a vector whose k-th coordinate is
    :math:`1 - \tau_k \le 0`), so along any :math:`e_k` with :math:`k < d`
    the bias is similar, along :math:`e_d` it changes sign, along
    :math:`(1, \dots, 1)/\sqrt{d}` it is larger (about -14 % at
    :math:`d = m = 16`, :math:`|u| = 1`) and along a generic direction it is
    smaller but nonzero (Monte Carlo, 20000 trials).

    Why ``"orthogonal-xformers"`` is biased (chi norms): the ω_j are the
    columns of a slice whose rows are orthogonal, with the rows' lengths
    taken from the same Gaussian block. Their average second moment is
    :math:`I_d` and their law is symmetric (odd moments vanish), so the
    positive estimator's relative bias is :math:`O(|u|^4)` at small
    :math:`|u|`; but the fourth moments differ from the Gaussian ones:
    along :math:`(1, \dots, 1)/\sqrt d` at d = 4, m = 8, the mean over j
    of :math:`E(\omega_j \cdot v)^4` is about 2.58 instead of 3, and the
    relative bias is about -1.6 % at :math:`|u| = 1`, -19 % at
    :math:`|u| = 2`, indistinguishable from 0 at :math:`|u| = 0.2` with
    20000 trials (see ``docs/unfixed_qr.rst``).

    Draw order (for reproducibility): ``"iid"`` draws an (m, d) standard
    normal array; the orthogonal ensembles and ``"simplex"`` draw the
    ``ceil(m/d)`` Gaussian blocks, ``"sorf"`` its ``ceil(m/D)`` blocks of
    signs; then (chi norms) m chi-square(d) variates.
    ``"orthogonal-xformers"`` draws only its ``(ceil(d/m), m, m)`` Gaussian
    array (C order).

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021, Sections 2.3-2.4 and Theorem 2.
       https://arxiv.org/abs/2009.14794
    .. [3] I. Reid, K. Choromanski, V. Likhosherstov and A. Weller,
       "Simplex Random Features", ICML 2023. https://arxiv.org/abs/2301.13856
    .. [4] F. X. Yu, A. T. Suresh, K. Choromanski, D. Holtmann-Rice and
       S. Kumar, "Orthogonal Random Features", NeurIPS 2016.
       https://arxiv.org/abs/1610.09072

    Examples
    --------
    >>> W = draw_projections(5, 3, ensemble="orthogonal", seed=0)
    >>> W.shape
    (5, 3)
    >>> import numpy as np
    >>> bool(abs(W[0] @ W[1]) < 1e-12)
    True
    """
    m = check_int(m, "m")
    d = check_int(d, "d")
    ensemble = check_ensemble(ensemble)
    check_sizes(registry.entry("ensemble", ensemble), None, d)  # the ensemble's least d
    norms = check_norms(norms)
    refused = registry.entry("norms", norms).refusal(ensemble)
    if refused is not None:
        raise ValueError(refused)
    backend = check_backend(backend)
    rng = check_seed(seed)
    check_memory(projection_bytes(m, d, ensemble),
                 f"draw_projections(m={m}, d={d}, ensemble={ensemble!r})")

    if ensemble == "iid":
        w = rng.standard_normal((m, d))
        if norms == "fixed":
            w = np.sqrt(d) * _unit_rows(w)
    elif ensemble == "sorf":
        big_d = _next_pow2(d)
        n_blocks = -(-m // big_d)
        w = sorf_blocks(n_blocks, d, rng).reshape(n_blocks * big_d, d)[:m]
        if norms == "chi":
            # a row whose first d entries all vanish (possible when d < D) stays 0:
            # it projects every padded input to 0 whatever its length
            length = np.linalg.norm(w, axis=1, keepdims=True)
            w = w / np.where(length > 0, length, 1.0) * np.sqrt(rng.chisquare(d, size=m))[:, np.newaxis]
    elif ensemble == "simplex":
        n_blocks = -(-m // d)
        q = orthogonal_blocks(n_blocks, d, rng)
        # row i of block b: Q_b s_i (s_i the simplex vertices), i.e. S @ Q_b^T
        rows = (simplex_directions(d) @ np.swapaxes(q, -1, -2)).reshape(n_blocks * d, d)[:m]
        if norms == "antithetic":
            w = rows * np.sqrt(antithetic_squared_norms(m, d, rng))[:, np.newaxis]
        elif norms == "chi":
            w = rows * np.sqrt(rng.chisquare(d, size=m))[:, np.newaxis]
        else:
            w = np.sqrt(d) * _unit_rows(rows)
    elif ensemble == "orthogonal-xformers":
        w = xformers_features(m, d, rng, norms).T
    else:
        n_blocks = -(-m // d)
        q = orthogonal_blocks(n_blocks, d, rng, fix_signs=(ensemble == "orthogonal"))
        rows = np.swapaxes(q, -1, -2).reshape(n_blocks * d, d)[:m]
        if norms == "antithetic":
            w = rows * np.sqrt(antithetic_squared_norms(m, d, rng))[:, np.newaxis]
        elif norms == "chi":
            w = rows * np.sqrt(rng.chisquare(d, size=m))[:, np.newaxis]
        else:
            w = np.sqrt(d) * _unit_rows(rows)
    w = np.ascontiguousarray(w, dtype=np.float64)

    if backend == "cupy":
        from .backends import array_namespace

        return array_namespace("cupy").asarray(w)
    return w


def draw_phases(m, *, seed=None, backend="numpy"):
    r"""Draw the m phases :math:`b_i \sim U[0, 2\pi)` of random-offset features (kind ``"offset"``).

    ``seed`` as in :func:`draw_projections`; pass the same Generator right
    after it to draw the phases that go with those projections (as
    scikit-learn's ``RBFSampler`` draws ``random_offset_`` after
    ``random_weights_``). Returns a float64 array of shape (m,).

    Examples
    --------
    >>> import numpy as np
    >>> b = draw_phases(4, seed=0)
    >>> b.shape, bool(np.all((0 <= b) & (b < 2 * np.pi)))
    ((4,), True)
    """
    m = check_int(m, "m")
    backend = check_backend(backend)
    rng = check_seed(seed)
    check_memory(8 * m, f"draw_phases(m={m})")
    b = rng.uniform(0.0, 2.0 * np.pi, size=m)
    if backend == "cupy":
        from .backends import array_namespace

        return array_namespace("cupy").asarray(b)
    return b
