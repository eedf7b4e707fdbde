r"""Data-fitted DERF parameters: SADERF, ADERF and SDERF on a population of queries and keys.

The fits behind the kinds ``saderf``, ``aderf``, ``sderf`` (:mod:`rfkernels.estimators.derf`). float64 NumPy/SciPy.
Each fit takes queries ``x`` (n1, d) and keys ``y`` (n2, d) and returns a
:class:`DERFFit` whose ``params`` is a :class:`~rfkernels.numerics.derf.DERFParams`
from :func:`~rfkernels.numerics.derf.derf_params` (so the exact second
moment, iid MSE and, for isotropic A, orthogonal MSE of
:mod:`rfkernels.numerics.derf` apply unchanged).

The objective
-------------
Following the paper [1]_, the parameters minimise the **mean over all
pairs** (i, j) of the log second moment of one feature,
:math:`\overline{\log E[f_1(\omega,x_i)^2 f_2(\omega,y_j)^2]}`, not the MSE.
Since :math:`\log E[f_1^2 f_2^2] = 2x\cdot y + g(x, y)` with ``g`` of
:func:`~rfkernels.numerics.derf.derf_log_moment_ratio` (the log of one plus
the relative variance), and :math:`\overline{2x_i\cdot y_j} = 2\mu_1\cdot\mu_2`
does not depend on the parameters, this is the minimum of

.. math::

    \bar g = \sum_l \tfrac12 \operatorname{log1p}\Bigl(\frac{16\lambda_l^2}{1-8\lambda_l}\Bigr)
      + \operatorname{tr}\bigl[W\,\overline{v v^\top}\bigr],
    \qquad W = (I-8A)^{-1}(I-4A)^{-1},\quad v = B_1 x + B_2 y,

with :math:`\overline{vv^\top} = B_1 M_1 B_1^\top + B_2 M_2 B_2^\top + B_1\mu_1\mu_2^\top B_2^\top
+ B_2\mu_2\mu_1^\top B_1^\top`, where :math:`M_1 = \overline{x x^\top}`,
:math:`M_2 = \overline{y y^\top}` (means over the rows, *not* sums) and
:math:`\mu_1, \mu_2` the mean query and key. It needs no pairs:
O((n1 + n2) d^2).

Isotropic A = aI (OPRF, SADERF, ADERF)
--------------------------------------
Write :math:`B_1 = \sqrt{1-4a}\,P`; the unbiasedness identity
:math:`B_1^\top(I-4A)^{-1}B_2 = I` gives :math:`B_2 = \sqrt{1-4a}\,P^{-\top}`
and :math:`W = 1/((1-8a)(1-4a))`, so

.. math::

    \bar g = \frac d2 \operatorname{log1p}\Bigl(\frac{16a^2}{1-8a}\Bigr)
      + \frac{F(P) + 2\mu_1\cdot\mu_2}{1-8a},
    \qquad F(P) = \operatorname{tr}(P M_1 P^\top) + \operatorname{tr}(P^{-\top} M_2 P^{-1})

(the cross term :math:`\operatorname{tr}(P\mu_1\mu_2^\top P^{-1}) = \mu_1\cdot\mu_2`
is invariant). F does not involve a, so P minimises F and then a is OPRF's
:math:`A^*(\rho)` [2]_ (:func:`~rfkernels.numerics.oprf_simplex.oprf_optimal_a`) at
:math:`\rho = (F_{\min} + 2\mu_1\cdot\mu_2)/d` -- OPRF's own
:math:`\rho = \overline{|x+y|^2}/d` is the case P = I.

- **SADERF** (P = Psi diagonal): :math:`F = \sum_l \psi_l^2 (M_1)_{ll} + (M_2)_{ll}/\psi_l^2`,
  minimised by :math:`\psi_l = ((M_2)_{ll}/(M_1)_{ll})^{1/4}`, with
  :math:`F_{\min} = 2\sum_l \sqrt{(M_1)_{ll}(M_2)_{ll}}`. This is the paper's
  :math:`(\sum_j y_{jl}^2/\sum_i x_{il}^2)^{1/4}` when there are as many
  queries as keys; with n1 != n2 the minimiser is the ratio of the *means*.
  SADERF is OPRF on :math:`(\Psi x, \Psi^{-1}y)`.
- **ADERF** (P general): with :math:`S = P^\top P`,
  :math:`F = \operatorname{tr}(M_1 S) + \operatorname{tr}(M_2 S^{-1})`, convex in
  S; stationarity :math:`S M_1 S = M_2` gives the matrix geometric mean
  :math:`S = M_1^{-1/2}(M_1^{1/2}M_2M_1^{1/2})^{1/2}M_1^{-1/2}` and
  :math:`F_{\min} = 2\|M_1^{1/2}M_2^{1/2}\|_*` (sum of singular values). With
  :math:`M_k^{1/2}`'s factors from the data, :math:`x/\sqrt{n_1} = U_1 S_1 V_1^\top`,
  :math:`y/\sqrt{n_2} = U_2 S_2 V_2^\top`, and the SVD
  :math:`S_1V_1^\top V_2S_2 = U\Sigma V^\top` (the geometric mean [3]_):

  .. math::

      B_1 = \sqrt{1-4a}\,\Sigma^{1/2}U^\top S_1^{-1}V_1^\top, \qquad
      B_2 = \sqrt{1-4a}\,\Sigma^{1/2}V^\top S_2^{-1}V_2^\top,
      \qquad \rho = \frac{2\operatorname{tr}\Sigma + 2\mu_1\cdot\mu_2}{d}.

  P is unique up to a left orthogonal factor, which changes neither the
  iid nor the orthogonal MSE (:math:`|v|` is invariant).

Symmetric B (SDERF)
-------------------
:math:`B_1 = B_2 = B` and the identity force :math:`B = (I-4A)^{1/2}R`, R
orthogonal; then :math:`v = B(x+y)` and, with A's eigenbasis Q and
:math:`O = Q^\top R`, :math:`\bar g = \sum_l h((O M_3 O^\top)_{ll})` after
minimising each eigenvalue, where :math:`M_3 = \overline{(x+y)(x+y)^\top}
= M_1 + M_2 + \mu_1\mu_2^\top + \mu_2\mu_1^\top` and
:math:`h(t) = \min_\lambda [\frac12\operatorname{log1p}(16\lambda^2/(1-8\lambda))
+ t/(1-8\lambda)]` (attained at OPRF's :math:`A^*` with d = 1, :math:`\rho = t`).
h is concave (a minimum of functions affine in t) and, by Schur-Horn, the
diagonal of :math:`OM_3O^\top` ranges over the permutohedron of M3's
eigenvalues, so the minimum is at a vertex: O diagonalises M3,

.. math::

    M_3 = Q_3\Lambda_3Q_3^\top,\quad A = Q_3\,\mathrm{diag}(A^*(\Lambda_{3,l}))\,Q_3^\top,
    \quad B = (I - 4A)^{1/2} = Q_3\,\mathrm{diag}\bigl(\sqrt{1-4A^*(\Lambda_{3,l})}\bigr)Q_3^\top.

Nestings (each family contains the one before, so each fitted optimum is
at most the one before): FAVOR+ (a = 0, P = I) in OPRF (P = I) in SADERF (P
diagonal) in ADERF (P any); and OPRF in SDERF. SADERF/ADERF and SDERF are
not nested.

Degenerate populations
----------------------
Refused with one-line ``ValueError``: a single pair (one query and one
key), where the optimum is degenerate -- with :math:`x\cdot y < 0`, A = 0,
:math:`B_2 = B_1^{-\top}` and :math:`B_1^\top B_1 x = -y` (an SPD solution
exists iff :math:`x\cdot y < 0`) give zero variance on that pair and
nothing for any other; a zero column (SADERF's :math:`\psi_l` is 0 or
infinite; ADERF's :math:`M_k` is singular); and for ADERF any rank-deficient
:math:`M_1` or :math:`M_2` (fewer rows than d, collinear rows): the
infimum of F is then not attained, :math:`B_1` or :math:`B_2` diverges.
SDERF needs neither (M3 may be singular: :math:`A^*(0) = 0`).

References
----------
.. [1] V. Likhosherstov, K. Choromanski, A. Dubey, F. Liu, T. Sarlos and
   A. Weller, "Dense-Exponential Random Features: Sharp Positive Estimators
   of the Gaussian Kernel", NeurIPS 2023 (arXiv:2302.00787, first titled
   "FAVOR#: Sharp Attention Kernel Approximations via New Classes of
   Positive Random Features").
.. [2] V. Likhosherstov et al., "Chefs' Random Tables: Non-Trigonometric
   Random Features", NeurIPS 2022 (OPRF and its :math:`A^*`).
.. [3] R. Bhatia, "Positive Definite Matrices", Princeton University Press,
   2007, ch. 4 (the matrix geometric mean solves :math:`S M_1 S = M_2`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from . import derf
from .oprf_simplex import oprf_optimal_a
from ..validation import check_matrix, check_same_d

#: Smallest singular value of a data matrix, relative to its largest, that ADERF accepts.
RANK_RTOL = 1e-8


@dataclass(frozen=True, eq=False)
class PopulationMoments:
    r"""Means over the rows of a population (queries ``x``, keys ``y``).

    Attributes
    ----------
    M1, M2 : ndarray, shape (d, d)
        :math:`M_1 = \frac1{n_1}\sum_i x_i x_i^\top`, :math:`M_2 = \frac1{n_2}\sum_j y_j y_j^\top`.
    mu1, mu2 : ndarray, shape (d,)
        Mean query and mean key.
    n_queries, n_keys : int
        n1 and n2.
    S1, S2 : ndarray, shape (d, d)
        The covariances :math:`M_k - \mu_k\mu_k^\top`, from the centred rows
        (not by that difference, which cancels when the means are large).
    """

    M1: np.ndarray
    M2: np.ndarray
    mu1: np.ndarray
    mu2: np.ndarray
    n_queries: int
    n_keys: int
    S1: np.ndarray
    S2: np.ndarray

    @property
    def d(self):
        """The input dimension."""
        return self.M1.shape[0]

    @property
    def M3(self):
        r""":math:`M_3 = \overline{(x_i + y_j)(x_i + y_j)^\top}` over all pairs (symmetric).

        As :math:`S_1 + S_2 + (\mu_1 + \mu_2)(\mu_1 + \mu_2)^\top`: no
        cancellation when the mean query and key are large and opposite.
        """
        mu = self.mu1 + self.mu2
        return self.S1 + self.S2 + np.outer(mu, mu)


@dataclass(frozen=True, eq=False)
class DERFFit:
    r"""A DERF fitted on a population.

    Attributes
    ----------
    kind : str
        The fitted family (:data:`rfkernels.estimators.derf.FIT_KINDS`).
    params : DERFParams
        From :func:`rfkernels.numerics.derf.derf_params` (validated, unbiased
        to its tolerance).
    objective : float
        The minimised :math:`\bar g`: mean over all pairs of
        :math:`\log E[f_1^2f_2^2] - 2x_i\cdot y_j` (:func:`mean_log_moment_ratio`).
    mean_log_second_moment : float
        :math:`\bar g + 2\mu_1\cdot\mu_2`, the paper's objective.
    rho : float or None
        Isotropic kinds: the :math:`\rho` at which :math:`A = A^*(\rho)`
        (FAVOR+: OPRF's rho, unused). None for SDERF.
    psi : ndarray or None
        SADERF's diagonal :math:`\psi_l` (queries map to :math:`\Psi x`,
        keys to :math:`\Psi^{-1}y`); None otherwise.
    moments : PopulationMoments
        The population's moments the fit used.
    keywords : dict
        ``{"A", "B_query", "B_key"}``: the fit as the keyword arguments of
        kind ``'derf'`` (``A`` a float where it is isotropic), e.g.
        ``feature_map(X, W, "derf", **fit.keywords, role="key")``.
    """

    kind: str
    params: derf.DERFParams
    objective: float
    mean_log_second_moment: float
    rho: float | None
    psi: np.ndarray | None
    moments: PopulationMoments

    @property
    def keywords(self):
        p = self.params
        return {"A": p.a if p.isotropic else p.A, "B_query": p.B1, "B_key": p.B2}


def _population(x, y):
    """``(x, y)`` as float64 (n, d) arrays sharing d, both non-empty."""
    x = check_matrix(x, "x")
    y = check_matrix(y, "y")
    check_same_d([x.shape, y.shape], ["x", "y"])
    for name, arr in (("x", x), ("y", y)):
        if arr.shape[0] < 1:
            raise ValueError(f"{name} must hold at least one row; got shape {arr.shape}")
    return x, y


def population_moments(x, y):
    r"""The means :math:`M_1, M_2, \mu_1, \mu_2` of queries ``x`` (n1, d) and keys ``y`` (n2, d).

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Finite real rows.

    Returns
    -------
    PopulationMoments

    Raises
    ------
    ValueError
        Not 2-D, different d, no rows, or non-finite entries.
    FloatingPointError
        A second moment overflows float64.

    Notes
    -----
    .. math:: M_1 = \frac1{n_1}\sum_i x_ix_i^\top,\qquad \mu_1 = \frac1{n_1}\sum_i x_i

    (and likewise for the keys): means, so that populations of different
    sizes weigh every pair equally.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _population(x, y)
    mu1, mu2 = x.mean(axis=0), y.mean(axis=0)
    with np.errstate(over="ignore", invalid="ignore"):
        M1 = x.T @ x / x.shape[0]
        M2 = y.T @ y / y.shape[0]
        S1 = (x - mu1).T @ (x - mu1) / x.shape[0]
        S2 = (y - mu2).T @ (y - mu2) / y.shape[0]
    if not all(np.all(np.isfinite(v)) for v in (M1, M2, S1, S2)):
        raise FloatingPointError("population_moments: a second moment overflows float64; "
                                 "rescale the inputs")
    return PopulationMoments(M1=0.5 * (M1 + M1.T), M2=0.5 * (M2 + M2.T), mu1=mu1, mu2=mu2,
                             n_queries=x.shape[0], n_keys=y.shape[0], S1=0.5 * (S1 + S1.T),
                             S2=0.5 * (S2 + S2.T))


def mean_pair_square(x, y):
    r""":math:`\overline{|x_i + y_j|^2}` over all pairs of rows, without forming the pairs.

    As :math:`\overline{|x - \bar x|^2} + \overline{|y - \bar y|^2} + |\bar x + \bar y|^2`,
    every term non-negative: the form :math:`\overline{|x|^2} + \overline{|y|^2} +
    2\bar x\cdot\bar y` cancels when the means are large and opposite (1e-4
    relative at means of 1e6, everything at 1e8). ``x`` (n1, d), ``y`` (n2, d)
    finite float64 (checked by the caller); may overflow to inf.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        cx, cy = x - x.mean(axis=0), y - y.mean(axis=0)
        mean = x.mean(axis=0) + y.mean(axis=0)
        return float(np.mean(np.einsum("ij,ij->i", cx, cx)) + np.mean(np.einsum("ij,ij->i", cy, cy))
                     + mean @ mean)


def mean_log_moment_ratio(x, y, params):
    r"""Mean over all pairs (i, j) of ``g``: the exact, pair-free :math:`\bar g`.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys (the population).
    params : DERFParams
        Any DERF parameters (:func:`rfkernels.numerics.derf.derf_params`).

    Returns
    -------
    float
        :math:`\frac1{n_1n_2}\sum_{i,j} g(x_i, y_j)`, ``g`` of
        :func:`rfkernels.numerics.derf.derf_log_moment_ratio`; >= 0.

    Notes
    -----
    With :math:`A = Q\,\mathrm{diag}(\lambda)Q^\top`,
    :math:`s_l = ((1-8\lambda_l)(1-4\lambda_l))^{-1/2}`,
    :math:`t_i = \mathrm{diag}(s)Q^\top B_1x_i` and
    :math:`u_j = \mathrm{diag}(s)Q^\top B_2y_j`,

    .. math::

        \bar g = \sum_l \tfrac12\operatorname{log1p}\Bigl(\frac{16\lambda_l^2}{1-8\lambda_l}\Bigr)
        + \overline{|t|^2} + \overline{|u|^2} + 2\,\bar t\cdot\bar u,

    the mean of :math:`|t_i + u_j|^2` over pairs without forming them:
    O((n1 + n2) d^2).

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _population(x, y)
    if x.shape[1] != params.d:
        raise ValueError(f"x and y must have d = {params.d} (the parameters'); "
                         f"got d = {x.shape[1]}")
    lam, Q = params.eigenvalues, params.eigenvectors
    s = 1.0 / np.sqrt((1.0 - 8.0 * lam) * (1.0 - 4.0 * lam))
    with np.errstate(over="ignore", invalid="ignore"):
        t = (x @ params.B1.T @ Q) * s
        u = (y @ params.B2.T @ Q) * s
        quad = mean_pair_square(t, u)
    det_part = 0.5 * float(np.sum(np.log1p(16.0 * lam**2 / (1.0 - 8.0 * lam))))
    out = det_part + quad
    if not math.isfinite(out):
        raise FloatingPointError("mean_log_moment_ratio: not representable in float64; "
                                 "rescale the inputs")
    return out


def mean_log_second_moment(x, y, params):
    r"""The paper's objective: the mean over all pairs of :math:`\log E[f_1^2 f_2^2]`.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
    params : DERFParams

    Returns
    -------
    float
        :math:`2\mu_1\cdot\mu_2 + \bar g` (:func:`mean_log_moment_ratio`).

    Notes
    -----
    .. math:: \overline{\log E[f_1^2f_2^2]} = \overline{2x_i\cdot y_j} + \bar g
        = 2\mu_1\cdot\mu_2 + \bar g.

    Not the MSE: the mean of :math:`e^{2x\cdot y}\operatorname{expm1}(g)/m`
    weighs large kernel values far more than this mean of logs does.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _population(x, y)
    return 2.0 * float(x.mean(axis=0) @ y.mean(axis=0)) + mean_log_moment_ratio(x, y, params)


def _refuse_single_pair(x, y, kind):
    if x.shape[0] == 1 and y.shape[0] == 1:
        raise ValueError(
            f"fit_{kind}: a single pair (1 query, 1 key) is a degenerate population (with "
            "x.y < 0 a DERF has zero variance on it, and the fit says nothing about any other "
            "pair): fit on a population of queries and keys")


def _refuse_zero_columns(mom, kind):
    for name, M in (("x", mom.M1), ("y", mom.M2)):
        zero = np.flatnonzero(np.diag(M) == 0.0)
        if zero.size:
            raise ValueError(
                f"fit_{kind}: column(s) {zero.tolist()} of {name} are all zero, so the optimal "
                "scaling of that coordinate is 0 or infinite; drop the coordinate(s)")


def _finish(kind, params, x, y, mom, *, rho=None, psi=None):
    objective = mean_log_moment_ratio(x, y, params)
    if psi is not None:
        psi = np.array(psi, dtype=np.float64)
        psi.setflags(write=False)
    return DERFFit(kind=kind, params=params, objective=objective,
                   mean_log_second_moment=objective + 2.0 * float(mom.mu1 @ mom.mu2),
                   rho=rho, psi=psi, moments=mom)


def _isotropic_a(mean_pair_sq, d, kind):
    """``(rho, A*(rho))`` for the mean over pairs of ``|P x + P^-T y|^2``."""
    rho = mean_pair_sq / d
    if not math.isfinite(rho):
        raise FloatingPointError(f"fit_{kind}: the mean |x + y|^2 overflows float64; "
                                 "rescale the inputs")
    return rho, float(oprf_optimal_a(rho))


def fit_favor_plus(x, y):
    r"""FAVOR+ (A = 0, B = I) as a :class:`DERFFit` on the population (nothing is fitted).

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys.

    Returns
    -------
    DERFFit
        ``params.is_favor_plus`` is True; ``rho`` is OPRF's (unused).

    Notes
    -----
    :math:`\bar g = \overline{|x_i + y_j|^2} = d\rho`: the top of the nesting
    FAVOR+ >= OPRF >= SADERF >= ADERF.

    References
    ----------
    .. [1] K. Choromanski et al., "Rethinking Attention with Performers", ICLR 2021.
    """
    x, y = _population(x, y)
    mom = population_moments(x, y)
    params = derf.derf_params(0.0, np.eye(mom.d), np.eye(mom.d), d=mom.d)
    return _finish("favor+", params, x, y, mom, rho=float(np.trace(mom.M3)) / mom.d)


def fit_oprf(x, y):
    r"""OPRF with A = A* fitted on the population, as a :class:`DERFFit`.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys.

    Returns
    -------
    DERFFit
        ``params.is_oprf`` is True (A = aI, :math:`B_1 = B_2 = \sqrt{1-4a}\,I`).

    Notes
    -----
    :math:`a = A^*(\rho)`, :math:`\rho = \overline{|x_i + y_j|^2}/d =
    (\overline{|x|^2} + \overline{|y|^2} + 2\mu_1\cdot\mu_2)/d`, as
    ``rfkernels.estimators.oprf.fit`` computes it; it minimises
    :math:`\bar g = \frac d2\operatorname{log1p}(16a^2/(1-8a)) + d\rho/(1-8a)`.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Chefs' Random Tables: Non-Trigonometric
       Random Features", NeurIPS 2022.
    """
    x, y = _population(x, y)
    _refuse_single_pair(x, y, "oprf")
    mom = population_moments(x, y)
    rho, a = _isotropic_a(mean_pair_square(x, y), mom.d, "oprf")
    b = math.sqrt(1.0 - 4.0 * a)
    params = derf.derf_params(a, b * np.eye(mom.d), b * np.eye(mom.d), d=mom.d)
    return _finish("oprf", params, x, y, mom, rho=rho)


def fit_saderf(x, y):
    r"""SADERF: coordinate rescaling :math:`\Psi` plus OPRF, fitted on the population.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys; not a single pair, no all-zero column.

    Returns
    -------
    DERFFit
        ``params``: A = aI, :math:`B_1 = \sqrt{1-4a}\,\Psi`,
        :math:`B_2 = \sqrt{1-4a}\,\Psi^{-1}`; ``psi`` the diagonal of
        :math:`\Psi`. The exact MSE equals OPRF's at A = a on the pairs
        :math:`(\Psi x, \Psi^{-1}y)`.

    Raises
    ------
    ValueError
        A single pair, or an all-zero column of ``x`` or ``y``.

    Notes
    -----
    .. math::

        \psi_l = \Bigl(\frac{\frac1{n_2}\sum_j y_{jl}^2}{\frac1{n_1}\sum_i x_{il}^2}\Bigr)^{1/4},
        \qquad a = A^*(\rho),\quad
        \rho = \frac1d\,\overline{|\Psi x_i + \Psi^{-1}y_j|^2}
             = \frac{2\sum_l\sqrt{(M_1)_{ll}(M_2)_{ll}} + 2\mu_1\cdot\mu_2}{d}.

    :math:`\Psi` minimises the mean log second moment over all positive
    diagonal rescalings, jointly with a (module notes). The paper writes
    :math:`\psi_l` with sums, which is the same when n1 = n2.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _population(x, y)
    _refuse_single_pair(x, y, "saderf")
    mom = population_moments(x, y)
    _refuse_zero_columns(mom, "saderf")
    r1 = np.sqrt(np.diag(mom.M1))  # column rms of the queries
    r2 = np.sqrt(np.diag(mom.M2))
    psi = np.sqrt(r2 / r1)
    rho, a = _isotropic_a(mean_pair_square(x * psi, y / psi), mom.d, "saderf")
    b = math.sqrt(1.0 - 4.0 * a)
    params = derf.derf_params(a, b * np.diag(psi), b * np.diag(1.0 / psi), d=mom.d)
    return _finish("saderf", params, x, y, mom, rho=rho, psi=psi)


def _whitening_factor(arr, name, kind):
    """``(S, V)`` of the thin SVD ``arr / sqrt(n) = U S V^T``, refusing rank < d."""
    n, d = arr.shape
    if n < d:
        raise ValueError(f"fit_{kind}: {name} has {n} row(s) < d = {d}, so its second-moment "
                         "matrix is singular and the optimal B diverges; use more rows, "
                         "fit_saderf or fit_sderf")
    _, s, vt = linalg.svd(arr / math.sqrt(n), full_matrices=False)
    if not s[-1] > RANK_RTOL * s[0]:
        raise ValueError(f"fit_{kind}: the second-moment matrix of {name} is (numerically) "
                         f"singular (smallest/largest singular value of the data "
                         f"{s[-1] / s[0]:.3g} <= {RANK_RTOL:g}): the optimal B diverges; use "
                         "fit_saderf or fit_sderf")
    return s, vt.T


def fit_aderf(x, y):
    r"""ADERF: isotropic A = aI and general :math:`B_1`, :math:`B_2`, fitted on the population.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys; :math:`M_1` and :math:`M_2` must be non-singular
        (at least d rows each, not confined to a subspace).

    Returns
    -------
    DERFFit
        ``params``: A = aI (the orthogonal-ensemble theory applies) and the
        closed-form :math:`B_1, B_2` below.

    Raises
    ------
    ValueError
        A single pair, an all-zero column, fewer rows than d, or a
        numerically singular :math:`M_1` or :math:`M_2` (relative
        :data:`RANK_RTOL` on the data's singular values): the infimum is
        then not attained.

    Notes
    -----
    With :math:`x/\sqrt{n_1} = U_1S_1V_1^\top`, :math:`y/\sqrt{n_2} = U_2S_2V_2^\top`
    (thin SVDs, so :math:`M_k = V_kS_k^2V_k^\top`) and :math:`S_1V_1^\top V_2S_2 = U\Sigma V^\top`,

    .. math::

        B_1 = \sqrt{1-4a}\,\Sigma^{1/2}U^\top S_1^{-1}V_1^\top,\qquad
        B_2 = \sqrt{1-4a}\,\Sigma^{1/2}V^\top S_2^{-1}V_2^\top,\qquad
        a = A^*\Bigl(\frac{2\operatorname{tr}\Sigma + 2\mu_1\cdot\mu_2}{d}\Bigr),

    so :math:`B_1^\top B_2 = (1-4a)I` and :math:`P = B_1/\sqrt{1-4a}` has
    :math:`P^\top P = M_1^{-1}\#M_2` (the matrix geometric mean, :math:`SM_1S = M_2`),
    the global minimiser of the convex
    :math:`\operatorname{tr}(M_1S) + \operatorname{tr}(M_2S^{-1})`;
    :math:`\operatorname{tr}\Sigma = \|M_1^{1/2}M_2^{1/2}\|_*`. Derivation in
    the module notes.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    .. [2] R. Bhatia, "Positive Definite Matrices", Princeton University
       Press, 2007.
    """
    x, y = _population(x, y)
    _refuse_single_pair(x, y, "aderf")
    mom = population_moments(x, y)
    _refuse_zero_columns(mom, "aderf")
    s1, v1 = _whitening_factor(x, "x", "aderf")
    s2, v2 = _whitening_factor(y, "y", "aderf")
    U, sig, Vt = linalg.svd((s1[:, None] * (v1.T @ v2)) * s2[None, :])
    root = np.sqrt(sig)[:, None]
    P = (root * (U.T / s1[None, :])) @ v1.T  # B1 = b P, B2 = b P^-T
    P_inv_t = (root * (Vt / s2[None, :])) @ v2.T
    rho, a = _isotropic_a(mean_pair_square(x @ P.T, y @ P_inv_t.T), mom.d, "aderf")
    b = math.sqrt(1.0 - 4.0 * a)
    B1, B2 = b * P, b * P_inv_t
    params = derf.derf_params(a, B1, B2, d=mom.d)
    return _finish("aderf", params, x, y, mom, rho=rho)


def fit_sderf(x, y):
    r"""SDERF: symmetric A and :math:`B_1 = B_2 = (I - 4A)^{1/2}`, fitted on the population.

    Parameters
    ----------
    x, y : array_like, shape (n1, d) and (n2, d)
        Queries and keys; not a single pair.

    Returns
    -------
    DERFFit
        ``params``: A non-isotropic in general (exact iid theory; the
        orthogonal ensemble is Monte Carlo only), ``rho`` None.

    Raises
    ------
    ValueError
        A single pair.

    Notes
    -----
    With :math:`M_3 = \overline{(x_i+y_j)(x_i+y_j)^\top} = M_1 + M_2 + \mu_1\mu_2^\top
    + \mu_2\mu_1^\top = Q_3\Lambda_3Q_3^\top`,

    .. math::

        A = Q_3\,\mathrm{diag}(\lambda)\,Q_3^\top,\qquad
        \lambda_l = \frac{1 - 2\Lambda_{3,l} - \sqrt{(2\Lambda_{3,l}+1)^2 + 8\Lambda_{3,l}}}{16},
        \qquad B = Q_3\,\mathrm{diag}(\sqrt{1-4\lambda_l})\,Q_3^\top,

    the global minimiser of the mean log second moment over symmetric A
    (8A < I) and :math:`B_1 = B_2` (any :math:`B = (I-4A)^{1/2}R` with R
    orthogonal satisfies the identity; the minimum is at R = I in this
    basis, by concavity and Schur-Horn: module notes). A zero column is
    accepted (an eigenvalue 0 of M3 gives :math:`\lambda = 0`).

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _population(x, y)
    _refuse_single_pair(x, y, "sderf")
    mom = population_moments(x, y)
    m3 = mom.M3
    if not np.all(np.isfinite(m3)):
        raise FloatingPointError("fit_sderf: the mean (x + y)(x + y)^T overflows float64; "
                                 "rescale the inputs")
    lam3, q3 = linalg.eigh(m3)
    lam = np.asarray(oprf_optimal_a(np.maximum(lam3, 0.0)), dtype=np.float64)  # PSD up to rounding
    A = (q3 * lam) @ q3.T
    B = (q3 * np.sqrt(1.0 - 4.0 * lam)) @ q3.T
    params = derf.derf_params(0.5 * (A + A.T), B, B, d=mom.d)
    return _finish("sderf", params, x, y, mom)


__all__ = [
    "DERFFit",
    "PopulationMoments",
    "RANK_RTOL",
    "fit_aderf",
    "fit_favor_plus",
    "fit_oprf",
    "fit_saderf",
    "fit_sderf",
    "mean_pair_square",
    "mean_log_moment_ratio",
    "mean_log_second_moment",
    "population_moments",
]
