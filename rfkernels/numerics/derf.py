r"""Exact second moment and MSE of dense-exponential random features (DERF) [1]_.

The numerics of the DERF kinds (:mod:`rfkernels.estimators.derf`). Pure NumPy/SciPy,
float64, log space wherever an exponential can overflow. Everything is
vectorised over the leading axes of ``x`` and ``y`` (shape ``(..., d)``);
the parameters are shared.

The estimator
-------------
For :math:`\omega \sim N(0, I_d)`, a symmetric ``A`` with :math:`8A \prec I`
and ``k = 1`` (queries), ``k = 2`` (keys),

.. math::

    f_k(\omega, x) = D \exp(\omega^\top A \omega + \omega^\top B_k x + x^\top C_k x),
    \qquad C_k = -\tfrac12 B_k^\top (I - 4A)^{-1} B_k,
    \qquad D = \det(I - 4A)^{1/4},

and the m-feature estimate is :math:`\frac1m \sum_i f_1(\omega_i, x) f_2(\omega_i, y)`.
Write :math:`v = B_1 x + B_2 y` and :math:`c = x^\top C_1 x + y^\top C_2 y`, so
that :math:`f_1 f_2 = D^2 \exp(2\omega^\top A \omega + \omega \cdot v + c)`
(the quadratic form appears *twice*). The Gaussian moment generating
function :math:`E e^{\omega^\top Q \omega + b^\top \omega} = \det(I - 2Q)^{-1/2}
e^{b^\top (I - 2Q)^{-1} b / 2}` (``I - 2Q`` positive definite) gives

.. math::

    \log E[f_1 f_2] = c + \tfrac12 v^\top (I - 4A)^{-1} v
    = x^\top B_1^\top (I - 4A)^{-1} B_2\, y,

which is :math:`x \cdot y` for every pair iff :math:`B_1^\top (I-4A)^{-1} B_2 = I`
(the unbiasedness identity), and

.. math::

    \log E[f_1^2 f_2^2] = 4 \log D - \tfrac12 \log\det(I - 8A) + 2c
    + 2 v^\top (I - 8A)^{-1} v.

Cancellation-free variance
--------------------------
With the eigenvalues :math:`\lambda_j` of A and :math:`z = Q^\top v`
(:math:`A = Q \operatorname{diag}(\lambda) Q^\top`), the ratio of the two
moments is a sum of non-negative terms,

.. math::

    g := \log\frac{E[f_1^2 f_2^2]}{E[f_1 f_2]^2}
       = \sum_j \tfrac12 \operatorname{log1p}\Bigl(\frac{16\lambda_j^2}{1 - 8\lambda_j}\Bigr)
       + \sum_j \frac{z_j^2}{(1 - 8\lambda_j)(1 - 4\lambda_j)} \ \ge 0

(:math:`\log\det(I-4A) - \frac12\log\det(I-8A)` and
:math:`2(I-8A)^{-1} - (I-4A)^{-1} = (I-8A)^{-1}(I-4A)^{-1}`), so the
one-feature variance :math:`V = SM^2 \operatorname{expm1}(g)` keeps full
relative accuracy: the difference :math:`E f^2 - SM^2` never cancels, and
it vanishes only where A = 0 and :math:`B_1 x + B_2 y = 0` (possible for
``x . y < 0``: the degenerate single-pair optimum). The iid MSE is
``V / m``; its log is returned as :math:`2 x\cdot y + \log\operatorname{expm1}(g) - \log m`.
At OPRF's parameters (A = aI, :math:`B_k = \sqrt{1-4a} I`) ``g`` is OPRF's
:math:`\frac d2 \operatorname{log1p}(16a^2/(1-8a)) + |x+y|^2/(1-8a)`.

Orthogonal rows, isotropic A = aI
---------------------------------
Two rows :math:`\omega_i = R_i e_i` of a Haar-orthogonal block with
independent :math:`R_i \sim \chi(d)`: :math:`\omega_1 + \omega_2` has
squared length :math:`S = R_1^2 + R_2^2 \sim \chi^2(2d)` and, given S, a
uniform direction, so with :math:`E_e e^{r e\cdot v} = {}_0F_1(; d/2; r^2|v|^2/4)`,

.. math::

    E[f_1 f_2(\omega_1)\, f_1 f_2(\omega_2)]
      = (1-4a)^d e^{2c}\, E_S\bigl[e^{2aS}\, {}_0F_1(; \tfrac d2; S|v|^2/4)\bigr]
      = e^{2c}\, {}_1F_1(d; \tfrac d2; \sigma/2),
    \qquad \sigma = \frac{|v|^2}{1 - 4a}:

:math:`(1-4a)^d e^{2aS}` is the likelihood ratio that maps
:math:`(1-4a) S` back to a :math:`\chi^2(2d)` variable, and
:math:`E_{S \sim \chi^2(2d)}\, {}_0F_1(; d/2; qS/4) = {}_1F_1(d; d/2; q/2)`.
Since :math:`2c + \sigma = 2\log E[f_1 f_2] = 2x\cdot y`, the pair covariance is

.. math::

    \mathrm{Cov} = e^{2c}\bigl[{}_1F_1(d; \tfrac d2; \sigma/2) - e^{\sigma}\bigr]
    = SM^2 e^{-\sigma} \mathcal D(\sigma/2) \le 0,
    \qquad \mathcal D(t) = {}_1F_1(d; d/2; t) - e^{2t},

and with blocks of sizes :math:`b_j` (blocks of d rows, the last one
partial, :math:`P = \sum_j b_j(b_j - 1)`) :math:`\mathrm{MSE} = (mV + P\,\mathrm{Cov})/m^2`.
At OPRF's parameters [2]_ :math:`\sigma = |x+y|^2` and :math:`e^{2c} = \Lambda^2`:
OPRF's (A-independent) orthogonal covariance; at A = 0, B = I, FAVOR+'s
[3]_. For a non-isotropic A the
tilt :math:`e^{2 R^2 e^\top A e}` depends on each row's direction and the
pair term does not reduce to a radial integral: Monte Carlo only.

References
----------
.. [1] V. Likhosherstov, K. Choromanski, A. Dubey, F. Liu, T. Sarlos and
   A. Weller, "Dense-Exponential Random Features: Sharp Positive Estimators
   of the Gaussian Kernel", NeurIPS 2023.
.. [2] V. Likhosherstov, K. Choromanski, A. Dubey, F. Liu, T. Sarlos and
   A. Weller, "Chefs' Random Tables: Non-Trigonometric Random Features",
   NeurIPS 2022 (OPRF).
.. [3] K. Choromanski et al., "Rethinking Attention with Performers",
   ICLR 2021 (FAVOR+, orthogonal blocks).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy import linalg

from . import closed_form as cf
from . import hypergeometric as hg
from ..validation import check_bool, check_finite, check_int, check_int_array, check_vectors

#: Default relative tolerance of the unbiasedness identity (spectral norm of the residual).
IDENTITY_TOL = 1e-10
#: Relative asymmetry of A accepted (and symmetrised away) as rounding.
_SYMMETRY_TOL = 1e-12
#: Smallest singular value of B_query, relative to its largest, treated as non-zero.
_SINGULAR_RTOL = 1e-13
#: The least ``1 - 8 lambda_max`` of a non-isotropic A: its eigenvalues carry a rounding of
#: about eps |A| from the rotation, which ``1/(1 - 8 lambda)`` amplifies (a float A is exact).
_GAP_MIN = 1e-8


@dataclass(frozen=True, eq=False)
class DERFParams:
    r"""Validated DERF parameters (read-only float64 arrays).

    Attributes
    ----------
    A : ndarray, shape (d, d)
        Symmetric, :math:`8A \prec I`.
    B1, B2 : ndarray, shape (d, d)
        Query and key maps, with :math:`B_1^\top (I-4A)^{-1} B_2 = I` to
        ``identity_residual``.
    C1, C2 : ndarray, shape (d, d)
        :math:`C_k = -\frac12 B_k^\top (I-4A)^{-1} B_k` (symmetric).
    log_D : float
        :math:`\log D = \frac14 \log\det(I - 4A)`.
    eigenvalues, eigenvectors : ndarray
        :math:`A = Q \operatorname{diag}(\lambda) Q^\top` (``eigh``).
    a : float or None
        The scalar a where A is exactly ``a * I`` (isotropic), else None.
    identity_residual : float
        :math:`\|B_1^\top (I-4A)^{-1} B_2 - I\|_2` as computed in float64.
    is_oprf : bool
        Exactly OPRF's features with A = a: A = aI and B1 = B2 = sqrt(1 - 4a) I
        (``math.sqrt(1.0 - 4.0 * a)``), FAVOR+ (a = 0, B1 = B2 = I,
        :attr:`is_favor_plus`) included; the existing kinds' paths serve those.
    """

    A: np.ndarray
    B1: np.ndarray
    B2: np.ndarray
    C1: np.ndarray
    C2: np.ndarray
    log_D: float
    eigenvalues: np.ndarray
    eigenvectors: np.ndarray
    a: float | None
    identity_residual: float
    is_oprf: bool

    @property
    def d(self):
        """The input dimension."""
        return self.A.shape[0]

    @property
    def isotropic(self):
        """True where A = a I exactly (the orthogonal theory applies)."""
        return self.a is not None

    @property
    def is_favor_plus(self):
        """Exactly FAVOR+'s positive features (A = 0, B1 = B2 = I): OPRF's at a = 0."""
        return self.is_oprf and self.a == 0.0


def _frozen(arr):
    arr = np.array(arr, dtype=np.float64)
    arr.setflags(write=False)
    return arr


def _check_a(A, d):
    """``(A as (d, d) symmetric float64, a or None)``; refuses 8A not < I."""
    arr = check_finite(A, "A")
    if arr.ndim == 0:
        a = float(arr)
        if not a < 0.125:
            raise ValueError(f"A must satisfy 8A < I (A < 1/8 for a float A); got A = {a!r}")
        return a * np.eye(d), a
    if arr.shape != (d, d):
        raise ValueError(f"A must be a float or a symmetric (d, d) = ({d}, {d}) array; "
                         f"got shape {arr.shape}")
    scale = float(np.max(np.abs(arr), initial=0.0))
    asym = float(np.max(np.abs(arr - arr.T), initial=0.0))
    if asym > _SYMMETRY_TOL * scale:
        raise ValueError(f"A must be symmetric: max |A - A^T| = {asym:.3g} exceeds "
                         f"{_SYMMETRY_TOL:g} * max |A|")
    arr = 0.5 * (arr + arr.T)
    top = float(linalg.eigvalsh(arr)[-1])
    if not top < 0.125:
        raise ValueError(f"A must satisfy 8A < I (every eigenvalue below 1/8); "
                         f"its largest eigenvalue is {top!r}")
    if 1.0 - 8.0 * top < _GAP_MIN:
        raise ValueError(f"A's largest eigenvalue {top!r} is within {_GAP_MIN / 8:.3g} of 1/8: "
                         "the second moment's 1/(1 - 8 lambda) would amplify the eigenvalue's "
                         "rounding (about eps |A|) beyond 1e-7 relative; keep 1 - 8 lambda >= "
                         f"{_GAP_MIN:g}")
    diag = np.diag(arr)
    iso = bool(np.all(arr == np.diag(diag)) and np.all(diag == diag[0]))
    return arr, (float(diag[0]) if iso else None)


def _check_b(B, name, d):
    arr = check_finite(B, name)
    if arr.ndim == 0:
        return float(arr) * np.eye(d)
    if arr.shape != (d, d):
        raise ValueError(f"{name} must be a (d, d) = ({d}, {d}) array (or a float b for b*I); "
                         f"got shape {arr.shape}")
    return arr


def _identity_residual(B1, B2, m4):
    """``||B1^T (I-4A)^{-1} B2 - I||_2`` (a solve, no inverse)."""
    prod = B1.T @ linalg.solve(m4, B2, assume_a="pos")
    return float(np.linalg.norm(prod - np.eye(B1.shape[0]), 2))


def _derive_key(B1, m4, a):
    """``B2 = (I - 4A) B1^{-T}``, refusing a singular B_query."""
    sv = linalg.svdvals(B1)
    if not sv[-1] > _SINGULAR_RTOL * sv[0]:
        raise ValueError(f"B_query is singular (smallest/largest singular value "
                         f"{sv[-1] / sv[0] if sv[0] > 0 else 0.0:.3g}): B_key cannot be derived "
                         "from B_query^T (I - 4A)^{-1} B_key = I")
    d = B1.shape[0]
    if a is not None and np.all(B1 == B1[0, 0] * np.eye(d)):
        b = float(B1[0, 0])
        if b == math.sqrt(1.0 - 4.0 * a):  # OPRF: B2 = B1 exactly, not (1 - 4a)/b rounded
            return B1.copy()
        return ((1.0 - 4.0 * a) / b) * np.eye(d)
    # B2 B1^T = I - 4A (symmetric)  <=>  B2^T = B1^{-1} (I - 4A): one solve, no inverse
    return linalg.solve(B1, m4).T


def _is_oprf(A, B1, B2, a):
    """Exactly A = aI and B1 = B2 = sqrt(1 - 4a) I (at a = 0: B1 = B2 = I, FAVOR+)."""
    if a is None:
        return False
    eye = np.eye(A.shape[0])
    b = math.sqrt(1.0 - 4.0 * a)
    return bool(np.all(B1 == b * eye) and np.all(B2 == b * eye))


def derf_params(A, B_query, B_key=None, *, d, tol=IDENTITY_TOL):
    r"""Validate DERF parameters and derive ``B_key``, ``C_k`` and ``D``.

    Parameters
    ----------
    A : float or array_like, shape (d, d)
        A float means ``A * I``; an array must be symmetric (to a relative
        1e-12, then symmetrised) with every eigenvalue below 1/8
        (:math:`8A \prec I`; the second moment is infinite beyond).
    B_query : array_like, shape (d, d), or float
        :math:`B_1` (a float b means ``b * I``).
    B_key : array_like, shape (d, d), float, or None
        :math:`B_2`. None derives it from the unbiasedness identity,
        :math:`B_2 = (I - 4A) B_1^{-\top}` (``B_query`` must be
        non-singular). Given, the identity is checked.
    d : int
        The input dimension (keyword).
    tol : float
        Tolerance of the identity: :math:`\|B_1^\top (I-4A)^{-1} B_2 - I\|_2
        \le` ``tol``, relative to :math:`\|I\|_2 = 1`. A residual E makes
        the mean :math:`e^{x^\top (I + E) y}`, a relative bias of at most
        :math:`\operatorname{expm1}(\mathrm{tol}\,|x||y|)`; the theory here
        ignores that bias. A derived ``B_key`` is checked too (an
        ill-conditioned ``B_query`` can fail it).

    Returns
    -------
    DERFParams
        Frozen; ``is_oprf`` and ``is_favor_plus`` say whether the
        parameters are exactly OPRF's or FAVOR+'s.

    Raises
    ------
    ValueError
        One line naming the argument: 8A not below I, A not symmetric,
        wrong shapes, non-finite entries, singular ``B_query``, or the
        identity violated beyond ``tol``.

    Notes
    -----
    .. math::

        C_k = -\tfrac12 B_k^\top (I - 4A)^{-1} B_k, \qquad
        \log D = \tfrac14 \sum_j \operatorname{log1p}(-4\lambda_j),

    the :math:`\lambda_j` the eigenvalues of A; the solves use the Cholesky
    factor of the positive definite :math:`I - 4A`.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    d = check_int(d, "d")
    tol = float(check_finite(tol, "tol"))
    if not tol > 0:
        raise ValueError(f"tol must be > 0; got {tol!r}")
    A, a = _check_a(A, d)
    B1 = _check_b(B_query, "B_query", d)
    m4 = np.eye(d) - 4.0 * A
    if B_key is None:
        B2 = _derive_key(B1, m4, a)
        what = "the derived B_key violates"
    else:
        B2 = _check_b(B_key, "B_key", d)
        what = "B_query and B_key violate"
    residual = _identity_residual(B1, B2, m4)
    if not residual <= tol:
        raise ValueError(f"{what} the unbiasedness identity B_query^T (I - 4A)^-1 B_key = I: "
                         f"residual {residual:.3g} > tol = {tol:.3g} (spectral norm)")
    fac = linalg.cho_factor(m4)
    C1 = -0.5 * B1.T @ linalg.cho_solve(fac, B1)
    C2 = -0.5 * B2.T @ linalg.cho_solve(fac, B2)
    lam, Q = linalg.eigh(A)
    if a is not None:  # exact: eigh of a*I need not return a bitwise
        lam, Q = np.full(d, a), np.eye(d)
    return DERFParams(
        A=_frozen(A), B1=_frozen(B1), B2=_frozen(B2),
        C1=_frozen(0.5 * (C1 + C1.T)), C2=_frozen(0.5 * (C2 + C2.T)),
        log_D=0.25 * float(np.sum(np.log1p(-4.0 * lam))),
        eigenvalues=_frozen(lam), eigenvectors=_frozen(Q), a=a,
        identity_residual=residual, is_oprf=_is_oprf(A, B1, B2, a))


def _pair_arrays(x, y, params):
    """``(x, y)`` as float64 (..., d) arrays broadcast together, d checked."""
    x = check_vectors(x, "x")
    y = check_vectors(y, "y")
    d = params.d
    for name, arr in (("x", x), ("y", y)):
        if arr.shape[-1] != d:
            raise ValueError(f"{name} must have shape (..., d) with d = {d} (the parameters'); "
                             f"got shape {arr.shape}")
    shape = np.broadcast_shapes(x.shape, y.shape)
    return np.broadcast_to(x, shape), np.broadcast_to(y, shape)


def _v(x, y, params):
    return x @ params.B1.T + y @ params.B2.T


def _quiet(fn):
    """Overflow to inf is expected and refused by :func:`_finite` (no warning on the way)."""

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        with np.errstate(over="ignore", invalid="ignore"):
            return fn(*args, **kwargs)

    return wrapped


def _dot(x, y, what):
    """``x . y`` (the log of SM), refused where it is not finite (an overflow either way)."""
    out = np.einsum("...i,...i->...", x, y)
    if not np.all(np.isfinite(out)):
        raise FloatingPointError(f"{what}: x . y overflows float64 at some point; the inputs "
                                 "are too large")
    return out


def _finite(value, what):
    value = np.asarray(value, dtype=np.float64)
    if np.any(np.isnan(value)) or np.any(value == np.inf):
        raise FloatingPointError(f"{what}: not representable in float64 (NaN or +inf in the log) "
                                 "at some point; the inputs are too large")
    return value[()]


@_quiet
def derf_log_second_moment(x, y, params):
    r"""Log second moment :math:`\log E[f_1(\omega, x)^2 f_2(\omega, y)^2]` of one feature.

    Parameters
    ----------
    x, y : array_like, shape (..., d)
        Queries and keys, broadcast together over the leading axes.
    params : DERFParams
        From :func:`derf_params`.

    Returns
    -------
    ndarray
        Shape ``broadcast(x, y).shape[:-1]``.

    Notes
    -----
    The Gaussian moment generating function, for the parameters as given
    (the unbiasedness identity is not used):

    .. math::

        \log E[f_1^2 f_2^2] = 4\log D - \tfrac12 \log\det(I - 8A)
        + 2(x^\top C_1 x + y^\top C_2 y) + 2 v^\top (I - 8A)^{-1} v,
        \qquad v = B_1 x + B_2 y,

    with the log determinant and the solve from the Cholesky factor of
    :math:`I - 8A`. Its terms are large and of both signs when
    :math:`|x|, |y|` are: :func:`derf_log_moment_ratio` gives the
    cancellation-free :math:`g = \log(E[f_1^2 f_2^2]/SM^2)`.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _pair_arrays(x, y, params)
    out = 2.0 * _dot(x, y, "derf_log_second_moment") + derf_log_moment_ratio(x, y, params)
    return _finite(out, "derf_log_second_moment")


@_quiet
def derf_log_moment_ratio(x, y, params):
    r"""``g``: log of the second moment over the squared mean, :math:`\ge 0`, no cancellation.

    Parameters
    ----------
    x, y : array_like, shape (..., d)
    params : DERFParams

    Returns
    -------
    ndarray
        :math:`g = \log(E[f_1^2 f_2^2] / E[f_1 f_2]^2)`, batch shape; the
        one-feature variance is :math:`SM^2 \operatorname{expm1}(g)`.

    Notes
    -----
    .. math::

        g = \sum_j \tfrac12 \operatorname{log1p}\Bigl(\frac{16\lambda_j^2}{1 - 8\lambda_j}\Bigr)
          + \sum_j \frac{(Q^\top v)_j^2}{(1 - 8\lambda_j)(1 - 4\lambda_j)},

    :math:`A = Q\operatorname{diag}(\lambda)Q^\top`: every term is
    non-negative, so nothing cancels (module notes); the eigenvalues of a
    non-isotropic A carry a rounding of about eps ``|A|``, which the
    :math:`1/(1 - 8\lambda)` factors amplify, so such an A is refused
    within 1e-8 of :math:`8\lambda = 1`.
    This is also the quantity the paper's parameter choice averages (a
    mean log second moment, up to the ``2 x . y`` that does not depend on
    the parameters), not the MSE.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    x, y = _pair_arrays(x, y, params)
    lam = params.eigenvalues
    det_part = 0.5 * float(np.sum(np.log1p(16.0 * lam**2 / (1.0 - 8.0 * lam))))
    z = _v(x, y, params) @ params.eigenvectors
    weights = 1.0 / ((1.0 - 8.0 * lam) * (1.0 - 4.0 * lam))
    return _finite(det_part + (z * z) @ weights, "derf_log_moment_ratio")


@_quiet
def derf_log_pair_covariance(x, y, params):
    r"""``log(-Cov)``: covariance of two features of one orthogonal block (isotropic A only).

    Parameters
    ----------
    x, y : array_like, shape (..., d)
    params : DERFParams
        With A = a I (``params.isotropic``).

    Returns
    -------
    ndarray
        :math:`\log(-\mathrm{Cov})`, batch shape; ``-inf`` where
        :math:`\mathrm{Cov} = 0` (:math:`B_1 x + B_2 y = 0`). Cov <= 0 always.

    Notes
    -----
    Two rows of a Haar-orthogonal block with independent chi(d) norms:

    .. math::

        \mathrm{Cov} = e^{2c}\bigl[{}_1F_1(d; \tfrac d2; \tfrac\sigma2) - e^\sigma\bigr]
        = SM^2 e^{-\sigma} \mathcal D(\sigma/2),
        \quad \sigma = \frac{|B_1 x + B_2 y|^2}{1 - 4a},
        \quad c = x^\top C_1 x + y^\top C_2 y,

    :math:`\log(-\mathcal D)` from
    :func:`rfkernels.numerics.hypergeometric.log_neg_chi_diff` (a
    cancellation-free series). Derivation in the module notes.

    Raises
    ------
    ValueError
        A not isotropic: the pair term has no closed form here (Monte Carlo).

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    """
    _require_isotropic(params)
    x, y = _pair_arrays(x, y, params)
    sigma = _sigma(x, y, params)
    with np.errstate(divide="ignore", under="ignore"):
        lnd = hg.log_neg_chi_diff(sigma / 2.0, float(params.d))
    return _finite(2.0 * _dot(x, y, "derf_log_pair_covariance") - sigma + lnd,
                   "derf_log_pair_covariance")


def _sigma(x, y, params):
    v = _v(x, y, params)
    return np.einsum("...i,...i->...", v, v) / (1.0 - 4.0 * params.a)


def _require_isotropic(params):
    if not params.isotropic:
        raise ValueError("orthogonal blocks with a non-isotropic A have no exact theory "
                         "(the tilt exp(w^T A w) depends on each row's direction, so the pair "
                         "term is no radial integral): Monte Carlo only")


@_quiet
def derf_log_mse(x, y, m, params, *, orthogonal_blocks=False):
    r"""Log of the exact MSE of the m-feature DERF estimate of :math:`SM(x, y) = e^{x\cdot y}`.

    Parameters
    ----------
    x, y : array_like, shape (..., d)
        Queries and keys, broadcast together.
    m : int or array_like of int
        Number of features (>= 1), broadcast against the batch.
    params : DERFParams
        From :func:`derf_params` (unbiased to its ``tol``; the bias that
        a residual of the identity would leave is not included).
    orthogonal_blocks : bool
        True: Haar-orthogonal blocks of d rows with independent chi(d)
        norms, stacked, the last block partial (as
        :func:`rfkernels.draw_projections`), isotropic A only; False
        (default): independent Gaussian rows (keyword only).

    Returns
    -------
    ndarray
        log MSE, shape ``broadcast(batch, m)``. ``-inf`` only where the
        MSE is exactly zero (A = 0 and :math:`B_1 x + B_2 y = 0`).

    Raises
    ------
    ValueError
        Bad arguments, or ``orthogonal_blocks`` with a non-isotropic A (Monte
        Carlo only).
    FloatingPointError
        Orthogonal: :math:`1 + (P/m)\,\mathrm{Cov}/V` rounded to <= 0
        (the block covariance cancels the variance beyond float64), or a
        log that is not representable (inputs near float64's limit).

    Notes
    -----
    .. math::

        \log \mathrm{MSE} = 2x\cdot y + \log\operatorname{expm1}(g) - \log m
        + \operatorname{log1p}\Bigl(\frac Pm \frac{\mathrm{Cov}}{V}\Bigr),
        \qquad \frac{\mathrm{Cov}}{V} = \frac{e^{-\sigma}\mathcal D(\sigma/2)}
        {\operatorname{expm1}(g)},

    with ``g`` of :func:`derf_log_moment_ratio` (so the iid difference
    :math:`E f^2 - SM^2` is never formed, it cannot cancel),
    :math:`P = \sum_j b_j(b_j-1)` (0 for iid) and Cov of
    :func:`derf_log_pair_covariance`. At OPRF's and FAVOR+'s parameters
    this is :func:`rfkernels.theory.exact_mse` of those kinds.

    References
    ----------
    .. [1] V. Likhosherstov et al., "Dense-Exponential Random Features:
       Sharp Positive Estimators of the Gaussian Kernel", NeurIPS 2023.
    .. [2] K. Choromanski et al., "Rethinking Attention with Performers",
       ICLR 2021.
    """
    orthogonal_blocks = check_bool(orthogonal_blocks, "orthogonal_blocks")
    if orthogonal_blocks:
        _require_isotropic(params)
    x, y = _pair_arrays(x, y, params)
    m = check_int_array(m, "m")
    g = derf_log_moment_ratio(x, y, params)
    log_sm2 = 2.0 * _dot(x, y, "derf_log_mse")
    with np.errstate(divide="ignore"):
        log_ex = np.where(g > 0, cf.log_expm1(np.where(g > 0, g, 1.0)), -np.inf)
    pairs = cf.pairs_in_blocks(m, params.d, blocked=orthogonal_blocks)
    rel = np.zeros(np.broadcast_shapes(np.shape(g), pairs.shape))
    if orthogonal_blocks:
        sigma = _sigma(x, y, params)
        live = sigma > 0  # sigma = 0: Cov = 0 (and V = 0 where also a = 0)
        with np.errstate(divide="ignore", under="ignore", invalid="ignore"):
            lnd = hg.log_neg_chi_diff(np.where(live, sigma, 0.0) / 2.0, float(params.d))
            ratio = np.where(live, -np.exp(lnd - sigma - np.where(live, log_ex, 0.0)), 0.0)
        rel = pairs / m * ratio
        if np.any(rel <= -1.0):
            raise FloatingPointError(
                f"derf_log_mse (orthogonal blocks): 1 + (P/m) Cov/V rounded to <= 0 at "
                f"{int(np.count_nonzero(rel <= -1.0))} point(s); the block covariance cancels "
                "the variance beyond float64's resolution")
    with np.errstate(divide="ignore"):
        out = log_sm2 + log_ex - np.log(m) + np.log1p(rel)
    return _finite(np.broadcast_to(out, np.broadcast_shapes(np.shape(out), m.shape)),
                   "derf_log_mse")
