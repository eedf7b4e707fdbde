r"""Random Fourier features of the Gaussian kernel, a drop-in for scikit-learn's ``RBFSampler``.

:class:`RandomFourierFeatures` is :class:`rfkernels.sklearn_base.BaseRandomFeatures`
with the Gaussian kernel :math:`K_\gamma(x, y) = e^{-\gamma |x - y|^2}`
(scikit-learn's RBF convention) as its target: the kinds, ensembles and norm
laws of :class:`rfkernels.RandomFeatures` (by default ``RBFSampler``'s
random-offset map, ``kind="offset"``, with iid frequencies), and the exact
error of every kernel-matrix entry before any data is transformed
(:meth:`~RandomFourierFeatures.expected_mse`,
:meth:`~RandomFourierFeatures.gram_error`,
:meth:`~RandomFourierFeatures.n_components_for`). The Gaussian estimates of
the kinds on x - y (trig, offset) depend on the pair through
:math:`|x - y|^2` alone: this module computes their exact MSE from the
squared distances (:func:`squared_distances`), interpolated in
:math:`|x - y|^2` where the theory is a quadrature (simplex).

Examples
--------
>>> import numpy as np
>>> from rfkernels import RandomFourierFeatures
>>> X = np.random.default_rng(0).normal(size=(6, 3))
>>> rff = RandomFourierFeatures(gamma=0.5, n_components=64, random_state=0).fit(X)
>>> rff.transform(X).shape, rff.projections_.shape, rff.random_offset_.shape
((6, 64), (64, 3), (64,))
>>> err = rff.expected_mse(X)
>>> err.entries.shape, bool(np.allclose(np.diag(err.entries), 1 / (2 * 64)))
((6, 6), True)
"""

from __future__ import annotations

import math
import inspect
import warnings

import numpy as np
from numpy.polynomial import chebyshev

from .docstrings import fill
from .estimators import registry
from .estimators.kernels import check_gamma
from .sklearn_base import (CRITERIA, FEATURES, MAX_COMPONENTS, BaseRandomFeatures, ExpectedMSE,
                           parameter_texts)
from .theory import Geometry, exact_mse
from .validation import check_choice

__all__ = ["CRITERIA", "ExpectedMSE", "FEATURES", "FOURIER_ENSEMBLES", "MAX_COMPONENTS",
           "RandomFourierFeatures", "fourier_ensembles", "squared_distances"]


def features_kind(features):
    """The kind a (deprecated) ``features`` choice of :class:`RandomFourierFeatures` names (checked)."""
    return dict(FEATURES)[check_choice(features, "features", tuple(FEATURES))]


def fourier_ensembles():
    """The frequency ensembles :class:`RandomFourierFeatures` offers, in registration order.

    Every registered ensemble but the reference codes' biased constructions
    (:attr:`rfkernels.estimators.Ensemble.reference`).
    """
    return tuple(e.name for e in registry.entries("ensemble") if not e.reference)


#: :func:`fourier_ensembles` of the built-in entries (SORF has no exact theory).
FOURIER_ENSEMBLES = fourier_ensembles()
#: Pairs per theory evaluation in :meth:`RandomFourierFeatures.expected_mse`; it bounds the
#: temporaries (the theory holds up to 40 arrays of the chunk's size: 20 MiB).
_CHUNK = 1 << 16
#: Above this many entries the MSE of kinds on x - y is interpolated in t where it is a quadrature
#: (:attr:`rfkernels.estimators.Ensemble.quadrature_theory`, simplex; :func:`_interpolated`).
_INTERPOLATE_ABOVE = 4096
#: Chebyshev degrees tried in turn, points checked against the exact value, and the tolerance
#: (absolute, relative to the largest MSE on [0, max t]).
_CHEB_DEGREES = (64, 128, 256, 512)
_CHEB_CHECKS = 32
_CHEB_TOL = 1e-12
#: Entries below this fraction of the largest MSE are computed directly (1e-12 / 1e-4 = 1e-8 relative).
_CHEB_DIRECT_BELOW = 1e-4


def _checked_gamma(gamma):
    """``gamma`` as a float > 0, or the string ``"scale"`` (resolved at fit time)."""
    if isinstance(gamma, str):
        if gamma == "scale":
            return gamma
        raise ValueError(f"gamma must be a finite number > 0 or 'scale'; got {gamma!r}")
    if gamma is None:
        raise TypeError("gamma must be a finite number > 0 or 'scale'; got None")
    return check_gamma(gamma)


def _scale_gamma(x):
    """scikit-learn's ``gamma="scale"`` (``SVC``, ``RBFSampler``): 1 / (n_features X.var()), or 1.0.

    1.0 where ``X.var() == 0``, as scikit-learn does.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        var = float(x.var())
        gamma = 1.0 / (x.shape[1] * var) if var != 0 else 1.0
    if not (math.isfinite(gamma) and gamma > 0):
        raise ValueError(f"gamma='scale' gives 1 / (n_features * X.var()) = {gamma!r} for this X "
                         f"(X.var() = {var!r}); pass a number for gamma or rescale X")
    return gamma


def squared_distances(x, y=None):
    """``|x_i - y_j|^2`` for every pair of rows (``y=None``: x with itself, symmetric, diagonal 0).

    The rows are first centred on the mean of x (the distances are
    translation invariant), then ``|x|^2 + |y|^2 - 2 x.y`` by one matrix
    product, rounding below 0 clipped to 0. The absolute error of an entry is
    a few eps times ``|x_i - c|^2 + |y_j - c|^2`` (c the mean), not
    relative to ``|x_i - y_j|^2``: nearly coincident rows far from the mean
    get a larger relative error (see :meth:`RandomFourierFeatures.expected_mse`
    for what that does to the MSE).
    """
    centre = x.mean(axis=0)
    a = x - centre
    b = a if y is None else y - centre
    sq_a = np.einsum("ij,ij->i", a, a)
    sq_b = sq_a if y is None else np.einsum("ij,ij->i", b, b)
    t = a @ b.T
    t *= -2.0
    t += sq_a[:, None]
    t += sq_b[None, :]
    np.maximum(t, 0.0, out=t)
    if y is None:  # exactly symmetric (the product's rounding is not), diagonal exactly 0
        t += t.T
        t *= 0.5
        np.fill_diagonal(t, 0.0)
    return t


def _interpolates(est, size):
    """Whether the MSE of ``size`` entries is interpolated in t (a quadrature theory, kinds on x - y)."""
    return est.ensemble.quadrature_theory and not est.kind.on_sum and size > _INTERPOLATE_ABOVE


def _direct(t, h, d, m, est):
    """The exact MSE at flat ``t`` (``h``: the entries' half_sq, None for kinds on x - y), in chunks.

    Under the Gaussian kernel the trig and offset estimates depend on
    (x, y) only through x - y, so the MSE at (x, y) is that of the pair
    (z/2, -z/2): the :class:`rfkernels.theory.Geometry` (d, t/4, 0, t).
    Other kinds (positive) take the pair's own ``half_sq = (|x|^2 + |y|^2)/2``
    and ``s = 4 half_sq - t``.
    """
    out = np.empty_like(t)
    for lo in range(0, t.size, _CHUNK):
        tc = t[lo:lo + _CHUNK]
        if h is None:
            geom = Geometry(np.full(tc.shape, float(d)), tc / 4.0, np.zeros_like(tc), tc)
        else:
            hc = h[lo:lo + _CHUNK]
            geom = Geometry(np.full(tc.shape, float(d)), hc, np.maximum(4.0 * hc - tc, 0.0), tc)
        out[lo:lo + _CHUNK] = exact_mse(geom, None, m, est, log=False)
    return out


def _interpolated(t, d, m, est):
    """The MSE at flat ``t`` from a Chebyshev interpolant in t on [0, max t], or None.

    The degree doubles from 64 to 512 until the interpolant is within
    :data:`_CHEB_TOL` times the largest MSE of the exact value at both ends
    and at :data:`_CHEB_CHECKS` of the data's own t (its quantiles); None
    where no degree is. Entries whose interpolated MSE is below
    :data:`_CHEB_DIRECT_BELOW` times the largest (the near-duplicate rows
    around t = 0, where the absolute tolerance would be a large relative
    error) are computed directly, so an entry's relative error is about
    1e-8 at most (1e-12 / 1e-4, where the tolerance holds).
    """
    hi = float(t.max())
    if not hi > 0:
        return None
    probe = np.concatenate([[0.0, hi], np.quantile(t, np.linspace(0.0, 1.0, _CHEB_CHECKS),
                                                   method="inverted_cdf")])
    exact = _direct(probe, None, d, m, est)
    for degree in _CHEB_DEGREES:
        nodes = np.cos(np.pi * (np.arange(degree + 1) + 0.5) / (degree + 1))
        values = _direct((nodes + 1.0) * (hi / 2.0), None, d, m, est)
        coef = chebyshev.chebfit(nodes, values, degree)
        scale = max(float(np.max(np.abs(values))), float(np.max(np.abs(exact))))
        if np.max(np.abs(chebyshev.chebval(probe * (2.0 / hi) - 1.0, coef) - exact)) <= _CHEB_TOL * scale:
            out = np.empty_like(t)
            for lo in range(0, t.size, _CHUNK):
                out[lo:lo + _CHUNK] = chebyshev.chebval(t[lo:lo + _CHUNK] * (2.0 / hi) - 1.0, coef)
            small = out < _CHEB_DIRECT_BELOW * scale  # near t = 0: exact, for relative accuracy
            out[small] = _direct(t[small], None, d, m, est)
            return out
    return None


def _mse_of(t, h, d, m, est):
    """The exact MSE of the entries at ``t`` (any shape, unscaled; ``h`` alike or None).

    Simplex frequencies on kinds on x - y are interpolated in t
    (:func:`_interpolated`) above :data:`_INTERPOLATE_ABOVE` entries:
    their theory is a quadrature, much slower per pair than the others'.
    """
    flat = t.reshape(-1)
    out = _interpolated(flat, d, m, est) if _interpolates(est, flat.size) else None
    if out is None:
        out = _direct(flat, None if h is None else h.reshape(-1), d, m, est)
    return out.reshape(t.shape)


def _symmetric_mse(t, h, d, m, est):
    """:func:`_mse_of` of symmetric (n, n) ``t`` and ``h``, once per pair i <= j (then mirrored).

    Row blocks ``[lo, hi)`` take the columns ``j >= lo``: the block's own
    square is computed twice (about n * _CHUNK / (2 n) extra pairs in all),
    and the result is exactly symmetric. An interpolated MSE is elementwise
    in t, hence symmetric already: it is evaluated on the whole matrix.
    """
    if _interpolates(est, t.size):
        return _mse_of(t, h, d, m, est)
    n = t.shape[0]
    out = np.empty_like(t)
    step = max(1, _CHUNK // n)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        block = _mse_of(t[lo:hi, lo:], None if h is None else h[lo:hi, lo:], d, m, est)
        out[lo:hi, lo:] = block
        out[lo:, lo:hi] = block.T
    return out


def _entries(x, y, m, est):
    """``(mse, t)``: the exact MSE of every entry of the (n_x, n_y) Gram matrix, and its |x - y|^2.

    ``y=None``: x with itself, once per pair. Kinds on x - y need the
    squared distances only; the others (positive) also each pair's
    ``(|x|^2 + |y|^2) / 2`` of the raw rows (their error is not translation
    invariant).
    """
    t = squared_distances(x, y)
    h = None
    if est.kind.on_sum:
        sq_x = np.einsum("ij,ij->i", x, x)
        sq_y = sq_x if y is None else np.einsum("ij,ij->i", y, y)
        h = (sq_x[:, None] + sq_y[None, :]) * 0.5
    if y is None:
        return _symmetric_mse(t, h, x.shape[1], m, est), t
    return _mse_of(t, h, x.shape[1], m, est), t


def _kernel_sq_sum(t, gamma):
    """``sum exp(-2 gamma t)``: the squared Frobenius norm of the Gram matrix (``t`` is overwritten)."""
    t *= -2.0 * gamma
    return float(np.exp(t, out=t).sum())


_TEXTS = {
    **parameter_texts(kind="offset", n_components=100, ensemble="iid"),
    "gamma": """\
gamma : float or "scale", default 1.0
    The kernel's parameter (a finite number > 0), or ``"scale"``:
    ``1 / (n_features * X.var())`` of the training X (1.0 if that variance
    is 0), as scikit-learn's ``SVC`` and ``RBFSampler``.""",
    "ensemble": """\
ensemble : str, default 'iid'
    The frequencies' joint law (:func:`rfkernels.draw_projections`): a
    registered ensemble other than the reference codes' biased
    constructions (:func:`fourier_ensembles`); those without a closed form
    (``"sorf"``) transform but have no exact error.""",
    "features": """\
features : {"offset", "paired", "positive"}, default "deprecated"
    Deprecated, use ``kind`` (``"paired"`` is ``kind="trig"``; ``"offset"``
    and ``"positive"`` keep their names). Given, it overrides ``kind``, and
    :meth:`fit`, :meth:`gram_error` and :meth:`n_components_for` warn
    (DeprecationWarning).""",
}


@fill(**_TEXTS)
class RandomFourierFeatures(BaseRandomFeatures):
    r"""Random Fourier features of the Gaussian kernel ``exp(-gamma |x - y|^2)``, with their exact MSE.

    ``transform(X) @ transform(Y).T`` estimates ``exp(-gamma |x_i - y_j|^2)``,
    without bias for iid, orthogonal and simplex frequencies with chi norms
    (every frequency marginally :math:`N(0, 2\gamma I_d)`; SORF's are not,
    and it is biased); :meth:`expected_mse` gives the exact mean squared
    error of every entry. Every kind is the softmax kind of
    :class:`rfkernels.RandomFeatures` at the scaled inputs
    :math:`x' = \sqrt{2\gamma}\, x`, times :math:`e^{-|x'|^2/2}`.

    Parameters
    ----------
    %(gamma)s
    %(n_components)s
    %(kind)s
    %(ensemble)s
    %(norms)s
    %(random_state)s
    %(A)s
    %(features)s

    Attributes
    ----------
    projections_ : ndarray of shape (m, d)
        The frequencies in the scaled coordinates :math:`x' = \sqrt{2\gamma}\, x`
        (rows N(0, I_d) marginally): ``RBFSampler``'s ``random_weights_``
        corresponds to ``sqrt(2 * gamma_) * projections_.T``.
    random_offset_ : ndarray of shape (m,) or None
        The offsets :math:`b_i \sim U[0, 2\pi)` (``kind="offset"``; None otherwise).
    gamma_ : float
        The gamma in use (``"scale"`` resolved on the training X).
    A_ : float or None
        The OPRF parameter in use, of the scaled inputs (None for the other kinds).
    %(fitted)s

    See Also
    --------
    rfkernels.RandomFeatures : the same transformer for the softmax kernel.

    Notes
    -----
    The maps: ``"offset"``, :math:`\sqrt{2/r}\cos(\omega_i \cdot x' + b_i)`,
    ``RBFSampler``'s; ``"trig"`` (the paired map),
    :math:`[\sin, \cos](\omega_i \cdot x') / \sqrt{r/2}`, columns ordered
    [sin | cos]; ``"positive"``, :math:`e^{-|x'|^2}\, e^{\omega_i \cdot x'} / \sqrt{r}`
    (FAVOR+ of the rescaled pair), non-negative, whose error depends on x
    and y and not only on x - y: large away from the origin.

    With frequencies :math:`\omega_i` (rows of ``projections_``), the offset
    estimate is
    :math:`\frac1m \sum_i 2\cos(\omega_i \cdot x' + b_i)\cos(\omega_i \cdot y' + b_i)
    = \frac1m \sum_i [\cos(\omega_i \cdot z') + \cos(\omega_i \cdot u' + 2 b_i)]`
    (:math:`z' = x' - y'`, :math:`u' = x' + y'`), the paired estimate
    :math:`\frac1m \sum_i \cos(\omega_i \cdot z')`. The offset term has mean
    0, variance 1/2 and is uncorrelated with the rest, so for every ensemble

    .. math::

        \mathrm{MSE}_{\text{offset}}(m) = \mathrm{MSE}_{\text{paired}}(m) + \frac{1}{2m},
        \qquad \mathrm{MSE}_{\text{paired, iid}}(m) = \frac{(1 - k^2)^2}{2m},

    :math:`k = K_\gamma(x, y)` (MATH.md, "The Gaussian (RBF) kernel"). At
    equal output dimension r the iid MSEs are :math:`(1 - k^2 + k^4/2)/r`
    (offset) and :math:`(1 - k^2)^2/r` (paired) [2]_. On the diagonal
    (x = y) paired features are exact and offset ones have MSE 1/(2m).

    With ``kind="offset", ensemble="iid"`` the estimator follows
    ``RBFSampler``'s law exactly [1]_, but not its bits for a given
    ``random_state``: ``RBFSampler`` draws
    ``RandomState.normal(size=(n_features, n_components)) * sqrt(2 gamma)``
    then ``uniform(0, 2 pi)`` from a legacy ``RandomState``; this class
    draws from a ``numpy.random.Generator`` (the package's one seed helper,
    whose streams are reproducible across versions and spawnable) and keeps
    the frequencies unscaled, scaling the input instead, as every rfkernels
    estimator does for the Gaussian kernel. Other differences: the output
    is always float64 (``RBFSampler`` keeps float32), sparse input is
    refused, and ``gamma=0`` (accepted by ``RBFSampler``) is refused.

    :meth:`expected_mse` evaluates :func:`rfkernels.theory.exact_mse` at
    the pair (z/2, -z/2) of each squared distance for the kinds on x - y
    (trig, offset), whose Gaussian MSE depends on :math:`2\gamma|x - y|^2`,
    d and m alone, and at each pair's own :math:`|x|^2 + |y|^2` for the
    others. The squared distances come from one matrix product
    (:func:`squared_distances`), with an absolute error of a few eps times
    the rows' squared distances to the mean of X. Where the theory is a
    quadrature (simplex) and there are more than 4,096 entries, the MSE of
    the kinds on x - y is interpolated in t by a Chebyshev series on
    [0, max t] of degree 64 to 512, accepted only once it is within 1e-12
    times the largest MSE of the exact value at both ends and at 32
    quantiles of the data's own t (otherwise every entry is computed
    directly); entries below 1e-4 times the largest (near-duplicate rows)
    are computed directly, so an entry's relative error is about 1e-8 at
    most.

    References
    ----------
    .. [1] A. Rahimi and B. Recht, "Random Features for Large-Scale Kernel
       Machines", NeurIPS 2007.
    .. [2] D. J. Sutherland and J. Schneider, "On the Error of Random Fourier
       Features", UAI 2015.
    .. [3] F. X. Yu et al., "Orthogonal Random Features", NeurIPS 2016.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(1).normal(size=(4, 3))
    >>> rff = RandomFourierFeatures(gamma=0.2, n_components=4000, kind="trig",
    ...                             ensemble="orthogonal", random_state=0).fit(X)
    >>> K = np.exp(-0.2 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.allclose(rff.kernel(X), K, atol=0.05))
    True
    >>> X = np.random.default_rng(2).normal(size=(50, 4))
    >>> rff = RandomFourierFeatures(gamma=0.1, kind="trig", ensemble="orthogonal")
    >>> err = rff.gram_error(X, [8, 64])
    >>> bool(err[0] > err[1]), bool(np.isclose(err[1], rff.set_params(n_components=64)
    ...                                     .fit(X).expected_mse(X).relative_frobenius))
    (True, True)
    """

    target_kernel = "gaussian"

    def __init__(self, gamma=1.0, n_components=100, *, kind="offset", ensemble="iid", norms="chi",
                 random_state=None, A=None, features="deprecated"):
        self.gamma = gamma
        self.n_components = n_components
        self.kind = kind
        self.ensemble = ensemble
        self.norms = norms
        self.random_state = random_state
        self.A = A
        self.features = features

    def _kernel_values(self, x):
        """``{"gamma": ...}``: checked (``x=None``), or with ``"scale"`` resolved on training rows x."""
        gamma = _checked_gamma(self.gamma)
        if x is not None and gamma == "scale":
            gamma = _scale_gamma(x)
        return {"gamma": gamma}

    def _ensembles(self):
        return fourier_ensembles()

    def _kind_choice(self):
        """The kind, from the deprecated ``features`` where it is given (with its warning)."""
        if isinstance(self.features, str) and self.features == "deprecated":
            return super()._kind_choice()
        warnings.warn("RandomFourierFeatures' features is deprecated; use kind (features='paired' "
                      "is kind='trig'; 'offset' and 'positive' keep their names)",
                      DeprecationWarning, stacklevel=4)
        kind = features_kind(self.features)
        default = inspect.signature(type(self).__init__).parameters["kind"].default
        if not (isinstance(self.kind, str) and self.kind in (default, kind)):  # left alone, or agreeing
            raise ValueError(f"features={self.features!r} (deprecated) and kind={self.kind!r} "
                             "disagree: give kind only")
        return kind, f"features={self.features!r}"

    def _pair_errors(self, x, y, m, est):
        """``(mse, t)`` from the squared distances (:func:`_entries`)."""
        return _entries(x, y, m, est)

    def _kernel_sq_sum(self, aux, est):
        return _kernel_sq_sum(aux, est.kernel_params.gamma)
