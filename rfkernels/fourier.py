r"""Random Fourier features of the Gaussian kernel, a drop-in for scikit-learn's ``RBFSampler``.

:class:`RandomFourierFeatures` estimates :math:`K_\gamma(x, y) = e^{-\gamma |x - y|^2}`
(scikit-learn's RBF convention) with random-offset features (``features="offset"``,
``RBFSampler``'s map), paired cos/sin features (``features="paired"``) or
positive features (``features="positive"``, FAVOR+ of the rescaled pair), from
iid, orthogonal, simplex or SORF frequencies, and says, before any data is
transformed, how large the error of every kernel-matrix entry is in
expectation (:meth:`RandomFourierFeatures.expected_mse`, from
:mod:`rfkernels.theory`) and what the Gram-level error is at any output
dimension (:meth:`RandomFourierFeatures.gram_error`,
:meth:`RandomFourierFeatures.n_components_for`). It is
:class:`rfkernels.RandomFeatures` with kind ``"offset"``, ``"trig"`` or
``"positive"`` and ``kernel="gaussian"``.

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
import numbers
from dataclasses import dataclass

import numpy as np
from numpy.polynomial import chebyshev

from .estimators import estimator, registry
from .estimators.kernels import check_gamma
from .features import estimate, feature_map
from .theory import Geometry, exact_mse, pairs_in_blocks
from .transformer import NotFittedError, RandomFeatures, check_samples, fit_seed
from .validation import check_choice, check_int, check_int_array, check_memory

__all__ = ["CRITERIA", "ExpectedMSE", "FEATURES", "FOURIER_ENSEMBLES", "MAX_COMPONENTS",
           "RandomFourierFeatures", "fourier_ensembles", "squared_distances"]

#: The feature maps, with the rfkernels kind each one is.
FEATURES = {"offset": "offset", "paired": "trig", "positive": "positive"}


def features_kind(features):
    """The registered kind a ``features`` choice of :class:`RandomFourierFeatures` is (checked)."""
    return dict(FEATURES)[check_choice(features, "features", tuple(FEATURES))]


def fourier_ensembles():
    """The frequency ensembles :class:`RandomFourierFeatures` offers, in registration order.

    Every registered ensemble but the reference codes' biased constructions
    (:attr:`rfkernels.estimators.Ensemble.reference`).
    """
    return tuple(e.name for e in registry.entries("ensemble") if not e.reference)


#: :func:`fourier_ensembles` of the built-in entries (SORF has no exact theory).
FOURIER_ENSEMBLES = fourier_ensembles()
#: Pairs per theory evaluation in :meth:`RandomFourierFeatures.expected_mse`: measured fastest
#: per pair (about 0.2-0.4 us for iid and orthogonal at d = 64; 1.6e6 pairs in one call take
#: 0.35-0.75 us each, the temporaries falling out of cache), and it bounds the temporaries
#: (the theory holds up to 40 arrays of the chunk's size: 20 MiB).
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
#: What :meth:`RandomFourierFeatures.n_components_for` can hold to a target.
CRITERIA = ("frobenius", "quantile")
#: The largest output dimension :meth:`RandomFourierFeatures.n_components_for` searches.
MAX_COMPONENTS = 1 << 24


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
    at most about ``4 eps (|x_i - c|^2 + |y_j - c|^2)`` (c the mean; 4.0, 3.4
    and 3.0 eps measured on the digits data, on N(100, 1) rows and on
    1 + N(0, 1e-6) rows, against the direct sum over ``(x_i - y_j)^2``), not
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


@dataclass(frozen=True, eq=False)
class ExpectedMSE:
    r"""The exact expected squared error of a Gram matrix estimated by random Fourier features.

    Returned by :meth:`RandomFourierFeatures.expected_mse`. The expectation
    is over the law of the fit (the frequencies and offsets that
    ``random_state`` would draw), not conditional on one fitted instance.

    Attributes
    ----------
    entries : ndarray of shape (n_x, n_y)
        :math:`E(\hat K_{ij} - K_{ij})^2` for every entry (diagonal included;
        simplex entries of offset and paired features are interpolated in t,
        to about 1e-8 relative: :meth:`RandomFourierFeatures.expected_mse`).
    mse_sum : float
        :math:`E\|\hat K - K\|_F^2 = \sum_{ij}` ``entries``.
    kernel_sq_sum : float
        :math:`\|K\|_F^2 = \sum_{ij} K_{ij}^2`.
    relative_frobenius : float
        :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2` (``mse_sum / kernel_sq_sum``).
    features, ensemble : str
        The estimator's feature map (``"offset"``, ``"paired"`` or
        ``"positive"``) and frequency ensemble.
    n_components : int
        Output dimension r.
    m : int
        Number of frequencies (r for offset and positive features, r/2 for paired).
    gamma : float
        The kernel's gamma (``gamma_`` of the fit).
    """

    entries: np.ndarray
    mse_sum: float
    kernel_sq_sum: float
    relative_frobenius: float
    features: str
    ensemble: str
    n_components: int
    m: int
    gamma: float

    def to_dict(self):
        """The fields as JSON-ready Python values (``entries`` as nested lists)."""
        return {"entries": self.entries.tolist(), "mse_sum": self.mse_sum,
                "kernel_sq_sum": self.kernel_sq_sum, "relative_frobenius": self.relative_frobenius,
                "features": self.features, "ensemble": self.ensemble,
                "n_components": self.n_components, "m": self.m, "gamma": self.gamma}


def _positive(value, name):
    """One finite real number > 0, as a float."""
    if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (numbers.Real, np.floating)):
        raise TypeError(f"{name} must be a finite number > 0; got {value!r}")
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return out


def _error_at(v, c, d, ensemble, m):
    """``v/m + P(m) c/m^2`` at an int array ``m`` (v, c: sums or entries, broadcast; ``ensemble`` a name)."""
    pairs = pairs_in_blocks(m, d, ensemble)
    return v / m + pairs * c / (m * m.astype(np.float64))


def _first_m(v, c, d, ensemble, target):
    """The least m <= the m-limit with ``_error_at(v, c, m) <= target`` (None if there is none)."""
    limit = MAX_COMPONENTS
    hi = 1
    while hi <= limit and _error_at(v, c, d, ensemble, np.array([hi]))[0] > target:
        hi *= 2
    if hi > limit:
        hi = limit
        if _error_at(v, c, d, ensemble, np.array([hi]))[0] > target:
            return None
    for lo in range(1, hi + 1, 1 << 20):  # every m up to hi, in slices
        ms = np.arange(lo, min(hi, lo + (1 << 20) - 1) + 1, dtype=np.int64)
        ok = np.flatnonzero(_error_at(v, c, d, ensemble, ms) <= target)
        if ok.size:
            return int(ms[ok[0]])
    return None


def _first_m_quantile(v, c, d, ensemble, target, q):
    """The least m (bisection on the doubling grid) whose entries' q-quantile MSE is <= target."""
    def meets(m):
        return float(np.quantile(_error_at(v, c, d, ensemble, np.array([m])), q)) <= target

    hi = 1
    while hi <= MAX_COMPONENTS and not meets(hi):
        hi *= 2
    if hi > MAX_COMPONENTS:
        return None
    lo = hi // 2  # fails (or 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if meets(mid) else (mid, hi)
    return hi


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
    their theory is a quadrature, 10-25 us per pair.
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


def _error_terms(x, kind, ensemble, norms, gamma):
    """``(V, C, t)``: the (n, n) matrices of every entry's MSE ``V/m + P(m) C/m^2`` at m frequencies.

    Two exact evaluations: m = 1 gives V (one frequency shares no block)
    and m = d gives ``V/d + (d - 1) C/d``; C = 0 for iid frequencies.
    """
    est = estimator(kind, ensemble=ensemble, norms=norms, kernel="gaussian", gamma=gamma,
                    batch=True)
    est.exact_mse.require()  # SORF: ValueError with the reason
    n, d = x.shape
    check_memory(8 * 6 * n * n, f"the exact error on {n} rows ({n} x {n} entries)")
    v, t = _entries(x, None, 1, est)
    c = np.zeros_like(v)
    if est.ensemble.blocked and d > 1:  # rows that share a block: their covariance
        c = (d * _entries(x, None, d, est)[0] - v) / (d - 1.0)
    return v, c, t


class RandomFourierFeatures(RandomFeatures):
    r"""Random Fourier features of the Gaussian kernel ``exp(-gamma |x - y|^2)``, with their exact MSE.

    ``transform(X) @ transform(Y).T`` estimates ``exp(-gamma |x_i - y_j|^2)``,
    without bias for iid, orthogonal and simplex frequencies (chi norms:
    every frequency marginally :math:`N(0, 2\gamma I_d)`; SORF's are not, and
    it is biased); :meth:`expected_mse` gives the exact mean squared error
    of every entry.

    Parameters
    ----------
    gamma : float or "scale", default 1.0
        The kernel's parameter (a finite number > 0), or ``"scale"``:
        ``1 / (n_features * X.var())`` of the training X (1.0 if that
        variance is 0), as scikit-learn's ``SVC`` and ``RBFSampler``.
    n_components : int, default 100
        Output dimension r: r frequencies for ``"offset"`` and
        ``"positive"``, r/2 for ``"paired"`` (so r must be even there).
    features : {"offset", "paired", "positive"}, default "offset"
        ``"offset"``: :math:`\sqrt{2/r}\cos(\omega_i \cdot x + b_i)`,
        ``RBFSampler``'s map (rfkernels kind ``"offset"``); ``"paired"``:
        :math:`[\sin, \cos](\omega_i \cdot x) / \sqrt{r/2}` (kind ``"trig"``;
        columns ordered [sin | cos]), which has the smaller error at equal r
        for iid frequencies (Notes); ``"positive"``:
        :math:`e^{-|x'|^2}\, e^{\omega_i \cdot x'} / \sqrt{r}` with
        :math:`x' = \sqrt{2\gamma}\, x` (kind ``"positive"``, FAVOR+ of the
        rescaled pair), non-negative, whose error depends on x and y and
        not only on x - y: large away from the origin.
    ensemble : str, default "iid"
        The frequencies' joint law (:func:`rfkernels.draw_projections`): a
        registered ensemble other than the reference codes' biased
        constructions (:func:`fourier_ensembles`). The built-in ones:
        ``"iid"``, independent; ``"orthogonal"``, blocks of d orthogonal
        directions (the last partial); ``"simplex"``, simplex blocks
        (d >= 2); ``"sorf"``, structured SORF (no exact theory, so no
        :meth:`expected_mse`). Row norms are chi(d) (the class attribute
        ``norms``), so every built-in ensemble but SORF is unbiased.
    random_state : None, int, numpy.random.Generator, SeedSequence or RandomState, default None
        Seed of :meth:`fit`: the frequencies are drawn first, then the
        offsets, from one Generator (:func:`rfkernels.validation.check_seed`),
        so an int seed gives ``projections_ == draw_projections(m, d,
        ensemble=..., seed=random_state)``.

    Attributes
    ----------
    projections_ : ndarray of shape (m, d)
        The frequencies in the scaled coordinates :math:`x' = \sqrt{2\gamma}\, x`
        (rows N(0, I_d) marginally): ``RBFSampler``'s ``random_weights_``
        corresponds to ``sqrt(2 * gamma_) * projections_.T``.
    random_offset_ : ndarray of shape (m,) or None
        The offsets :math:`b_i \sim U[0, 2\pi)` (``features="offset"``; None for paired).
    gamma_ : float
        The gamma in use (``"scale"`` resolved on the training X).
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (d,)
        Column names seen during :meth:`fit`, when X had string column names.

    Notes
    -----
    With :math:`x' = \sqrt{2\gamma}\, x` and frequencies :math:`\omega_i`
    (rows of ``projections_``), the offset estimate is
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

    With ``features="offset", ensemble="iid"`` the estimator follows
    ``RBFSampler``'s law exactly [1]_ (``tests/test_fourier.py`` checks the
    empirical MSE of ``RBFSampler`` itself against this theory), but not its
    bits for a given ``random_state``: ``RBFSampler`` draws
    ``RandomState.normal(size=(n_features, n_components)) * sqrt(2 gamma)``
    then ``uniform(0, 2 pi)`` from a legacy ``RandomState``; this class
    draws from a ``numpy.random.Generator`` (the package's one seed helper,
    whose streams are reproducible across versions and spawnable) and keeps
    the frequencies unscaled, scaling the input instead, as every rfkernels
    estimator does for the Gaussian kernel. Other differences: the output
    is always float64 (``RBFSampler`` keeps float32), sparse input is
    refused, and ``gamma=0`` (accepted by ``RBFSampler``) is refused.

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
    >>> rff = RandomFourierFeatures(gamma=0.2, n_components=4000, features="paired",
    ...                             ensemble="orthogonal", random_state=0).fit(X)
    >>> K = np.exp(-0.2 * ((X[:, None] - X[None]) ** 2).sum(-1))
    >>> bool(np.allclose(rff.kernel(X), K, atol=0.05))
    True
    """

    #: Row norms of the frequencies: chi(d), every frequency marginally N(0, I_d).
    norms = "chi"

    def __init__(self, gamma=1.0, n_components=100, *, features="offset", ensemble="iid",
                 random_state=None):
        self.gamma = gamma
        self.n_components = n_components
        self.features = features
        self.ensemble = ensemble
        self.random_state = random_state

    # ------------------------------------------------------------ fitting

    def _checked_params(self):
        """``(kind, m, seed)`` for :meth:`RandomFeatures.fit` (which draws the offsets of kind offset)."""
        kind = features_kind(self.features)
        check_choice(self.ensemble, "ensemble", fourier_ensembles())
        r = check_int(self.n_components, "n_components")
        per = registry.entry("kind", kind).features_per_projection
        if r % per:
            raise ValueError(f"n_components must be even for features={self.features!r} (r = 2m: a "
                             f"cos/sin pair per frequency); got {r}")
        return kind, r // per, fit_seed(self.random_state)

    def fit(self, X, y=None):
        """Draw the frequencies (then, for offset features, the offsets) for X; returns self.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training data; only its number of features (and, for
            ``gamma="scale"``, its variance) matter.
        y : ignored
        """
        gamma = _checked_gamma(self.gamma)
        before = dict(vars(self))
        super().fit(X, y)  # validates X, draws projections_ and (offset) random_offset_
        try:
            if gamma == "scale":
                gamma = _scale_gamma(np.asarray(X, dtype=np.float64))
        except ValueError:
            vars(self).clear()
            vars(self).update(before)
            raise
        self.gamma_ = gamma
        return self

    # ------------------------------------------------------------ features

    def transform(self, X):
        """The features of X: an (n_samples, n_components) float64 array."""
        x = self._checked_input(X)
        return feature_map(x, self.projections_, self.kind_, phase=self.random_offset_,
                           kernel="gaussian", gamma=self.gamma_)

    def kernel(self, X, Y=None):
        """The estimate of ``exp(-gamma_ |x_i - y_j|^2)`` (Y=None: Y = X), shape (n_x, n_y).

        Equals ``transform(X) @ transform(Y).T`` (:func:`rfkernels.estimate`).
        """
        x = self._checked_input(X)
        y = x if Y is None else self._checked_input(Y, "Y")
        return estimate(x, y, self.projections_, self.kind_, phase=self.random_offset_,
                        kernel="gaussian", gamma=self.gamma_)

    def get_feature_names_out(self, input_features=None):
        """Output feature names ``randomfourierfeatures0 .. randomfourierfeatures{r-1}``."""
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet")
        r = self.projections_.shape[0] * estimator(self.kind_).kind.features_per_projection
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(r)], dtype=object)

    # ------------------------------------------------------------ theory

    def expected_mse(self, X, Y=None):
        r"""The exact expected squared error of every entry of :meth:`kernel` ``(X, Y)``.

        The expectation is over the law of the fit (what :meth:`fit` draws
        for the fitted ``gamma_``, dimension, number of frequencies,
        feature map and ensemble, ``ensemble_``), not the error of
        this fitted instance's frequencies. Under the Gaussian kernel the
        MSE of an offset or paired entry depends only on
        :math:`2\gamma |x_i - y_j|^2`, d and m; a positive entry's also on
        :math:`|x_i|^2 + |y_j|^2` (:func:`rfkernels.theory.exact_mse` with
        ``kernel="gaussian"``).

        Parameters
        ----------
        X : array_like of shape (n_x, n_features)
        Y : array_like of shape (n_y, n_features), optional
            Default X; the matrix is then symmetric and computed once per
            pair i <= j, the diagonal included (x = y: 0 for paired
            features, 1/(2m) for offset ones, :math:`(e^{4|x'|^2} - 1)/m` for
            positive ones, :math:`x' = \sqrt{2\gamma}\, x`).

        Returns
        -------
        ExpectedMSE
            ``entries`` (n_x, n_y) and the Gram-level summary
            ``relative_frobenius`` :math:`= E\|\hat K - K\|_F^2 / \|K\|_F^2`.

        Raises
        ------
        ValueError
            ``ensemble="sorf"`` (no exact theory: the reason is the message),
            bad X or Y, a feature-count mismatch.
        NotFittedError
            Before :meth:`fit`.
        MemoryError
            If the (n_x, n_y) arrays do not fit in this machine's memory.

        Notes
        -----
        The theory is :func:`rfkernels.theory.exact_log_mse` itself, at the
        pair (z/2, -z/2) of each squared distance (equal to
        :func:`rfkernels.theory.exact_mse` at (x_i, y_j) to 1e-14 relative,
        ``tests/test_fourier.py``). The squared distances come from one
        matrix product (:func:`squared_distances`), with an absolute error
        of at most about 4 eps times the rows' squared distances to the
        mean of X; the MSE's derivative in :math:`t' = 2\gamma|x - y|^2`
        is at most 0.34/m in absolute value (measured on t' in [0, 60],
        d in {1, 2, 3, 8, 64}, m in {1, 2, 3, d, 2d + 1, 100}, every
        ensemble and both feature maps; 0.25/m but for simplex at d = 2),
        so an entry's absolute error is below about
        :math:`0.34 \cdot 2\gamma \cdot 4\varepsilon (|x_i - c|^2 + |y_j - c|^2)/m`.

        The simplex theory is a quadrature, 10-25 us per pair. For offset
        and paired features, whose MSE is a smooth function of t alone,
        more than 4,096 entries are therefore interpolated in t by a
        Chebyshev series on [0, max t] of degree 64 to 512, accepted only
        once it is within 1e-12 times the largest MSE of the exact value at
        both ends and at 32 quantiles of the data's own t (otherwise every
        entry is computed directly); entries below 1e-4 times the largest
        (near-duplicate rows) are computed directly, so an entry's relative
        error is about 1e-8 at most. Positive simplex entries are always computed
        directly.

        Time, best of 3 on 2 shared cores: 1,797 rows of d = 64 (the digits
        data, 1.6e6 distinct pairs, r = 256, ``gamma="scale"``) take
        0.49-0.67 s for iid and orthogonal frequencies, either feature map,
        on an idle machine (docs/performance.md; up to 1.5 s under load).
        """
        x = self._checked_input(X)
        y = None if Y is None else self._checked_input(Y, "Y")
        est = estimator(self.kind_, ensemble=self.ensemble_, norms=self.norms,
                        kernel="gaussian", gamma=self.gamma_, batch=True)
        est.exact_mse.require()  # SORF: ValueError with the reason
        n_y = x.shape[0] if y is None else y.shape[0]
        size = x.shape[0] * n_y
        check_memory(8 * 4 * size, f"expected_mse of a ({x.shape[0]}, {n_y}) kernel matrix")
        m = self.projections_.shape[0]
        entries, t = _entries(x, y, m, est)
        t *= -2.0 * self.gamma_
        kernel_sq_sum = float(np.exp(t, out=t).sum())
        mse_sum = float(entries.sum())
        features = {kind: name for name, kind in FEATURES.items()}[self.kind_]
        return ExpectedMSE(entries=entries, mse_sum=mse_sum, kernel_sq_sum=kernel_sq_sum,
                           relative_frobenius=mse_sum / kernel_sq_sum, features=features,
                           ensemble=self.ensemble_, n_components=m * est.kind.features_per_projection,
                           m=m, gamma=self.gamma_)

    # ------------------------------------------------------------ budgets

    def n_components_for(self, X, target, *, criterion="frobenius", q=0.9):
        r"""The smallest output dimension whose exact error on X meets ``target``.

        For this estimator's ``features``, ``ensemble`` and ``gamma``
        (``"scale"`` resolved on X; no fit needed), the least r with

        - ``criterion="frobenius"`` (default): the Gram-level relative
          Frobenius error :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2 \le` ``target``
          (:attr:`ExpectedMSE.relative_frobenius`, diagonal included);
        - ``criterion="quantile"``: the ``q``-quantile over the entries of
          :math:`K` (diagonal included) of their MSE :math:`\le` ``target``.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        target : float
            A finite number > 0.
        criterion : {"frobenius", "quantile"}
        q : float, default 0.9
            The quantile of ``criterion="quantile"``, in (0, 1].

        Returns
        -------
        int
            The output dimension r (even for paired features).

        Raises
        ------
        ValueError
            ``ensemble="sorf"`` (no exact value: the reason), a target not
            met below :data:`MAX_COMPONENTS` outputs, bad arguments.

        Notes
        -----
        With chi norms every entry's MSE at m frequencies is
        :math:`V_{ij}/m + P(m)\,C_{ij}/m^2` (``P(m)`` ordered pairs sharing
        an orthogonal or simplex block, 0 for iid; the offset map's
        :math:`1/(2m)` is in :math:`V_{ij}`), so two exact evaluations (m = 1
        and m = d) give :math:`V` and :math:`C` and then the error at every
        m. The Frobenius criterion scans every m up to a bound that meets the
        target, so r is the first output dimension that meets it even where
        the error is not monotone in m (orthogonal frequencies at large
        :math:`|z'|^2`, where :math:`C > 0`); hence r never grows when the
        target does. The quantile criterion bisects on the doubling grid that
        first meets the target, which is exact where the quantile decreases
        with m (iid always; checked for orthogonal frequencies in
        ``tests/test_components_for.py``).

        Two exact evaluations over the pairs: on 300 standardised digits
        (target 0.05, ``gamma="scale"``, best of 3 on 2 cores) 0.03 s for
        iid, 0.05 s for orthogonal and 0.04 s for simplex frequencies (its
        entries interpolated in t, :meth:`expected_mse`). Positive features
        do not meet that target on those rows below :data:`MAX_COMPONENTS`
        (their Gram error is dominated by the rows of largest norm), so the
        ValueError for an unmet target is raised.
        """
        target = _positive(target, "target")
        check_choice(criterion, "criterion", CRITERIA)
        if criterion == "quantile":
            q = _positive(q, "q")
            if q > 1.0:
                raise ValueError(f"q must be in (0, 1]; got {q!r}")
        v, c, t, gamma, per, d = self._error_terms(X)
        if criterion == "frobenius":
            k2 = _kernel_sq_sum(t, gamma)
            m = _first_m(float(v.sum()) / k2, float(c.sum()) / k2, d, self.ensemble, target)
        else:
            m = _first_m_quantile(v.reshape(-1), c.reshape(-1), d, self.ensemble, target, q)
        if m is None:
            raise ValueError(f"target={target!r} is not met below n_components={MAX_COMPONENTS} "
                             f"({criterion}); ask for a larger target")
        return per * m

    def gram_error(self, X, n_components=None):
        r"""The exact Gram-level relative error on X at each output dimension in ``n_components``.

        :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2` of the (n, n) Gram matrix of
        X, diagonal included (:attr:`ExpectedMSE.relative_frobenius`), for
        this estimator's ``features``, ``ensemble`` and ``gamma``
        (``"scale"`` resolved on X); no fit needed, and the whole curve
        costs two exact evaluations over the pairs, as
        :meth:`n_components_for` does (its Notes).

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        n_components : int or array_like of int, optional
            Output dimensions r (even for paired features); default the
            estimator's ``n_components``.

        Returns
        -------
        float or ndarray of float
            The relative error at each r, shaped as ``n_components``.

        Raises
        ------
        ValueError
            ``ensemble="sorf"`` (no exact value: the reason), an odd r for
            paired features, bad arguments.

        Examples
        --------
        >>> import numpy as np
        >>> X = np.random.default_rng(2).normal(size=(50, 4))
        >>> rff = RandomFourierFeatures(gamma=0.1, features="paired", ensemble="orthogonal")
        >>> err = rff.gram_error(X, [8, 64])
        >>> bool(err[0] > err[1]), bool(np.isclose(err[1], rff.set_params(n_components=64)
        ...                                     .fit(X).expected_mse(X).relative_frobenius))
        (True, True)
        """
        self._checked_params()
        r = check_int_array(self.n_components if n_components is None else n_components,
                            "n_components")
        per = registry.entry("kind", features_kind(self.features)).features_per_projection
        if np.any(r % per):
            raise ValueError(f"n_components must be even for features='paired' (r = 2m); got "
                             f"{n_components!r}")
        v, c, t, gamma, _, d = self._error_terms(X)
        k2 = _kernel_sq_sum(t, gamma)
        out = _error_at(float(v.sum()) / k2, float(c.sum()) / k2, d, self.ensemble, r // per)
        return float(out) if out.ndim == 0 else out

    def _error_terms(self, X):
        """``(V, C, t, gamma, outputs per frequency, d)``: :func:`_error_terms` on X for these parameters."""
        kind, _, _ = self._checked_params()
        x = check_samples(X)
        gamma = _checked_gamma(self.gamma)
        gamma = _scale_gamma(x) if gamma == "scale" else gamma
        v, c, t = _error_terms(x, kind, self.ensemble, self.norms, gamma)
        return v, c, t, gamma, estimator(kind).kind.features_per_projection, x.shape[1]
