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

from .backends import check_backend
from .estimators import registry
from .estimators.ensembles import (
    fwht,
    orthogonal_blocks,
    simplex_directions,
    sorf_blocks,
    xformers_features,
)
from .estimators.norms import antithetic_squared_norms
from .estimators.registry import check_ensemble, check_norms
from .estimators.spec import check_sizes
from .validation import check_int, check_memory, check_seed

__all__ = [
    "antithetic_squared_norms",
    "draw_kind_projections",
    "draw_phases",
    "draw_projections",
    "fwht",
    "orthogonal_blocks",
    "projection_bytes",
    "simplex_directions",
    "sorf_blocks",
    "xformers_features",
]


def projection_bytes(m, d, ensemble="iid"):
    """Peak bytes :func:`draw_projections` allocates for an (m, d) matrix (an upper estimate).

    The ensemble's own estimate (:attr:`rfkernels.estimators.Ensemble.matrix_bytes`),
    e.g. iid: the (m, d) normals and up to two copies (row norms, contiguous
    result); orthogonal: ``ceil(m/d)`` Gaussian d×d blocks, their Q and R
    and LAPACK's workspace, then the rows; xformers' ``ceil(d/m)`` Gaussian
    m×m blocks, O(m²) even when d is small.
    """
    return registry.entry("ensemble", ensemble).matrix_bytes(m, d)


def draw_projections(m, d, *, ensemble="iid", norms="chi", seed=None, backend="numpy"):
    r"""Draw an (m, d) projection matrix W whose rows are the ω_i.

    Parameters
    ----------
    m : int
        Number of projections (rows), >= 1. The feature dimension r is m for
        positive features and 2m for trigonometric and hyperbolic ones.
    d : int
        Input dimension (columns), >= 1.
    ensemble : str, default "iid"
        A registered ensemble (:func:`rfkernels.estimators.names`\ ``("ensemble")``);
        its entry's sampler draws W (:attr:`rfkernels.estimators.Ensemble.sample`).
        The built-in ones:
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
    norms : str, default "chi"
        A registered norm law (:func:`rfkernels.estimators.names`\ ``("norms")``)
        that applies to ``ensemble`` (:meth:`rfkernels.estimators.NormLaw.refusal`);
        its entry gives the rows their lengths
        (:attr:`rfkernels.estimators.NormLaw.with_lengths`). The built-in ones:
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
        lists the valid choices), or the norm law does not apply to the ensemble.
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
    ens = registry.entry("ensemble", check_ensemble(ensemble))
    check_sizes(ens, None, d)  # the ensemble's least d
    law = registry.entry("norms", check_norms(norms))
    refused = law.refusal(ens.name)
    if refused is not None:
        raise ValueError(refused)
    if ens.sample is None:
        raise ValueError(f"ensemble={ens.name!r} has no whole-matrix sampler (draw_projections)")
    if law.with_lengths is None:
        raise ValueError(f"norms={law.name!r} has no whole-matrix sampler (draw_projections)")
    backend = check_backend(backend)
    rng = check_seed(seed)
    check_memory(ens.matrix_bytes(m, d), f"draw_projections(m={m}, d={d}, ensemble={ens.name!r})")

    w = ens.sample(m, d, law, rng)
    w = np.ascontiguousarray(w, dtype=np.float64)

    return _on_backend(w, backend)


def _on_backend(w, backend):
    if backend == "cupy":
        from .backends import array_namespace

        return array_namespace("cupy").asarray(w)
    return w


def draw_kind_projections(m, d, kind, *, ensemble="iid", norms="chi", seed=None, backend="numpy"):
    """The W a kind's map reads: :func:`draw_projections`, then the kind's extra rows.

    The ensemble's (m, d) rows, then :attr:`rfkernels.estimators.Kind.extra_rows`
    rows iid N(0, I_d) drawn next from the same generator, independent of
    them (the hybrid's 8 angular projections): an ``(m + extra_rows, d)``
    array. For every other kind it is ``draw_projections`` itself, the same bits.

    >>> draw_kind_projections(4, 3, "hybrid", seed=0).shape
    (12, 3)
    """
    rng = check_seed(seed)
    w = draw_projections(m, d, ensemble=ensemble, norms=norms, seed=rng)
    return _on_backend(with_extra_rows(w, kind, rng), check_backend(backend))


def with_extra_rows(w, kind, seed):
    """``w`` (NumPy, (m, d)) with the kind's :attr:`~rfkernels.estimators.Kind.extra_rows` iid
    N(0, I) rows appended, drawn from ``seed`` (a Generator: drawn from as given); ``w`` itself
    for a kind without them. Callers that share one ensemble draw among kinds (a diagnosis) add
    the rows per kind from a stream of their own."""
    extra = registry.entry("kind", registry.check_kind(kind)).extra_rows
    if not extra:
        return w
    check_memory(8 * 2 * (w.shape[0] + extra) * w.shape[1], f"the extra rows of kind={kind!r}")
    return np.concatenate([w, check_seed(seed).standard_normal((extra, w.shape[1]))], axis=0)


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
