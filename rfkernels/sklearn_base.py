r"""The scikit-learn transformer base of :class:`rfkernels.RandomFeatures` and its Gaussian twin.

:class:`BaseRandomFeatures` is a ``sklearn.base.BaseEstimator`` and
``TransformerMixin`` following ``sklearn.kernel_approximation.RBFSampler``:
the constructor only stores the registry's choices (``kind``, ``ensemble``,
``norms``, ``n_components`` the output dimension, ``random_state``);
:meth:`~BaseRandomFeatures.fit` draws the projections
(:func:`rfkernels.draw_projections`), :meth:`~BaseRandomFeatures.transform`
applies the kind's feature map (:func:`rfkernels.feature_map`), and the
exact-error methods (:meth:`~BaseRandomFeatures.expected_mse`,
:meth:`~BaseRandomFeatures.gram_error`,
:meth:`~BaseRandomFeatures.n_components_for`) evaluate
:func:`rfkernels.theory.exact_mse` with the frozen estimator
(:func:`rfkernels.estimators.estimator`) where its ``supports.exact_mse``
holds, and raise its reason elsewhere. A subclass names its target kernel
(:attr:`BaseRandomFeatures.target_kernel`) and its defaults.
"""

from __future__ import annotations

import math
import numbers
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from .estimators import estimator, registry
from .features import estimate, feature_map, fitted_features, fitted_map_kinds, mapped_kinds
from .projections import draw_phases, draw_projections
from .theory import exact_mse, geometry, kernel_log_value, pairs_in_blocks
from .docstrings import fill
from .validation import (check_choice, check_finite, check_int, check_int_array, check_memory,
                         check_seed)

__all__ = ["BaseRandomFeatures", "CRITERIA", "ExpectedMSE", "FEATURES", "MAX_COMPONENTS",
           "NotFittedError", "check_samples", "feature_names", "fit_seed", "parameter_texts"]

#: What :meth:`BaseRandomFeatures.n_components_for` can hold to a target.
CRITERIA = ("frobenius", "quantile")
#: The largest output dimension :meth:`BaseRandomFeatures.n_components_for` searches.
MAX_COMPONENTS = 1 << 24
#: ``RandomFourierFeatures``' former ``features`` vocabulary (deprecated): each name's kind.
FEATURES = {"offset": "offset", "paired": "trig", "positive": "positive"}
#: Input elements (pairs times d) per block of the direct evaluation (8 MiB a temporary).
_BLOCK_ELEMENTS = 1 << 20


# ---------------------------------------------------------------------------
# Input checks (scikit-learn's rules, with this package's messages)
# ---------------------------------------------------------------------------


def feature_names(X):
    """Column names of a DataFrame-like X when all are strings, else None (scikit-learn's rule)."""
    if not hasattr(X, "columns"):
        return None
    names = np.asarray(X.columns, dtype=object)
    types = sorted(t.__qualname__ for t in {type(v) for v in names})
    if len(types) > 1 and "str" in types:
        raise TypeError(
            "Feature names are only supported if all input features have string names, but "
            f"your input has {types} as feature name / column name types; convert them all "
            "to strings (X.columns = X.columns.astype(str))")
    return names if types == ["str"] else None


def _name_list(names):
    out = ""
    for i, name in enumerate(names):
        if i >= 5:
            return out + "- ...\n"
        out += f"- {name}\n"
    return out


def check_samples(X, name="X"):
    """X as a finite real float64 (n, d) array with n, d >= 1 (sparse, 1-D and complex refused)."""
    if hasattr(X, "toarray") or type(X).__module__.startswith("scipy.sparse"):
        raise TypeError(f"{name} is a sparse matrix: sparse input is not supported; pass a dense "
                        f"array ({name}.toarray())")
    raw = X
    if isinstance(X, np.ndarray) and X.dtype == object:
        flat = X.reshape(-1)
        if not any(isinstance(v, numbers.Complex) and not isinstance(v, numbers.Real) for v in flat):
            try:  # numbers stored as objects are fine; anything else is a TypeError
                raw = X.astype(np.float64)
            except (TypeError, ValueError) as exc:
                raise TypeError(f"{name} must hold real numbers: {exc}") from None
    arr = check_finite(raw, name)
    if arr.ndim != 2:
        raise ValueError(
            f"Expected a 2-D array for {name}, got shape {arr.shape}. Reshape your data with "
            "X.reshape(-1, 1) for a single feature or X.reshape(1, -1) for a single sample")
    if arr.shape[0] < 1:
        raise ValueError(f"Found array with 0 sample(s) (shape={arr.shape}) while a minimum of 1 "
                         f"is required ({name}).")
    if arr.shape[1] < 1:
        raise ValueError(f"Found array with 0 feature(s) (shape={arr.shape}) while a minimum of 1 "
                         f"is required ({name}).")
    return arr


def fit_seed(random_state):
    """The seed :meth:`BaseRandomFeatures.fit` draws from: a ``RandomState`` is consumed once for an int.

    scikit-learn's estimators take a ``RandomState``; this package seeds a
    ``numpy.random.Generator`` (:func:`rfkernels.validation.check_seed`), so a
    ``RandomState`` gives one integer, as scikit-learn would draw one.
    Integers become Python ints; every other form is returned as it is.
    """
    seed = random_state
    if isinstance(seed, np.random.RandomState):
        seed = int(seed.randint(np.iinfo(np.int32).max))
    elif isinstance(seed, numbers.Integral) and not isinstance(seed, (bool, np.bool_)):
        seed = int(seed)
    return seed


def _positive(value, name):
    """One finite real number > 0, as a float."""
    if isinstance(value, (bool, np.bool_, str)) or not isinstance(value, (numbers.Real, np.floating)):
        raise TypeError(f"{name} must be a finite number > 0; got {value!r}")
    out = float(value)
    if not (math.isfinite(out) and out > 0):
        raise ValueError(f"{name} must be a finite number > 0; got {value!r}")
    return out


# ---------------------------------------------------------------------------
# The exact error of a Gram matrix
# ---------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ExpectedMSE:
    r"""The exact expected squared error of a Gram matrix estimated by random features.

    Returned by :meth:`BaseRandomFeatures.expected_mse`. The expectation is
    over the law of the fit (the projections and phases that
    ``random_state`` would draw), not conditional on one fitted instance.

    Attributes
    ----------
    entries : ndarray of shape (n_x, n_y)
        :math:`E(\hat K_{ij} - K_{ij})^2` for every entry, diagonal included.
    mse_sum : float
        :math:`E\|\hat K - K\|_F^2 = \sum_{ij}` ``entries``.
    kernel_sq_sum : float
        :math:`\|K\|_F^2 = \sum_{ij} K_{ij}^2`.
    relative_frobenius : float
        :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2` (``mse_sum / kernel_sq_sum``).
    kind, ensemble, norms : str
        The fitted estimator's registered names.
    n_components : int
        Output dimension r.
    m : int
        Number of projections (r, or r/2 for kinds whose features come in pairs).
    kernel : str
        The target kernel (``"softmax"`` or ``"gaussian"``).
    gamma : float or None
        The Gaussian kernel's ``gamma_`` (None for the softmax kernel).
    """

    entries: np.ndarray
    mse_sum: float
    kernel_sq_sum: float
    relative_frobenius: float
    kind: str
    ensemble: str
    norms: str
    n_components: int
    m: int
    kernel: str
    gamma: float = None

    @property
    def features(self):
        """Deprecated: :attr:`kind` in ``RandomFourierFeatures``' former words (``'paired'``: ``'trig'``)."""
        warnings.warn("ExpectedMSE.features is deprecated; use ExpectedMSE.kind ('paired' is "
                      "kind 'trig')", DeprecationWarning, stacklevel=2)
        return {kind: name for name, kind in FEATURES.items()}.get(self.kind, self.kind)

    def to_dict(self):
        """The fields as JSON-ready Python values (``entries`` as nested lists)."""
        return {"entries": self.entries.tolist(), "mse_sum": self.mse_sum,
                "kernel_sq_sum": self.kernel_sq_sum, "relative_frobenius": self.relative_frobenius,
                "kind": self.kind, "ensemble": self.ensemble, "norms": self.norms,
                "n_components": self.n_components, "m": self.m, "kernel": self.kernel,
                "gamma": self.gamma}


def pair_errors(x, y, m, est):
    """``(mse, log_k)``: the exact MSE and the log target kernel at every pair of rows (x_i, y_j).

    ``y=None``: x with itself, each pair i <= j once (then mirrored). The
    geometry of each pair comes from the vectors
    (:func:`rfkernels.theory.geometry`), in row blocks, so an entry is
    :func:`rfkernels.theory.exact_mse` at ``(x_i, y_j)`` itself.
    """
    other = x if y is None else y
    n_x, n_y, d = x.shape[0], other.shape[0], x.shape[1]
    mse = np.empty((n_x, n_y))
    log_k = np.empty((n_x, n_y))
    step = max(1, _BLOCK_ELEMENTS // (n_y * d))
    for lo in range(0, n_x, step):
        hi = min(n_x, lo + step)
        cols = slice(lo, None) if y is None else slice(None)
        a, b = np.broadcast_arrays(x[lo:hi, None, :], other[None, cols, :])
        geom = geometry(a, b)
        mse[lo:hi, cols] = exact_mse(geom, None, m, est, vectors=(a, b))  # read where the kind needs them
        log_k[lo:hi, cols] = kernel_log_value(geom, est)
        if y is None:
            mse[lo:, lo:hi] = mse[lo:hi, lo:].T
            log_k[lo:, lo:hi] = log_k[lo:hi, lo:].T
    return mse, log_k


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


# ---------------------------------------------------------------------------
# Parameter text shared by the transformers' docstrings
# ---------------------------------------------------------------------------


#: The fitted attributes every transformer has (``%(fitted)s`` in their docstrings).
FITTED_TEXT = """\
kind_, ensemble_, norms_ : str
    What was fitted (parameters changed by ``set_params`` take effect at
    the next :meth:`fit`).
n_features_in_ : int
    Number of features seen during :meth:`fit`.
feature_names_in_ : ndarray of shape (d,)
    Column names seen during :meth:`fit`, when X had string column names."""


def parameter_texts(*, kind, n_components, ensemble):
    """The transformers' parameter entries for :func:`rfkernels.docstrings.fill`, with a class's defaults.

    ``kind`` and ``ensemble`` replace the shared texts of those names (the
    transformers take the kinds with one literal feature map); ``norms``
    is the shared text.
    """
    return {
        "fitted": FITTED_TEXT,
        "kind": f"""\
kind : str, default {kind!r}
    A registered kind with one literal feature map
    (:func:`rfkernels.features.mapped_kinds`), or a data-fitted kind whose
    one map serves every row (``"data-tilted"``,
    :func:`rfkernels.features.fitted_map_kinds`: fitted on the training
    rows at :meth:`fit`, ``fitted_params_``); a kind with a query map and a key
    map (or none) is refused, naming the kinds taken. ``"offset"`` draws
    its phases ``random_offset_`` after the projections, from the same
    generator.""",
        "n_components": f"""\
n_components : int, default {n_components}
    Output dimension r, as in ``RBFSampler``: r projections for the kinds
    with one feature per projection, r/2 for those whose features come in
    pairs (``"trig"``, ``"hyperbolic"``), so r must be even there.""",
        "ensemble": f"""\
ensemble : str, default {ensemble!r}
    The projections' joint law, a registered ensemble
    (:func:`rfkernels.draw_projections`); those without a closed form
    (``supports.exact_mse``) transform but have no exact error.""",
        "random_state": """\
random_state : None, int, numpy.random.Generator, SeedSequence or RandomState, default None
    Seed of :meth:`fit`: the projections are drawn first, then (``"offset"``)
    the phases, from one Generator (:func:`rfkernels.validation.check_seed`;
    a ``RandomState`` is consumed once for an integer seed, as scikit-learn
    would).""",
        "A": """\
A : float or "auto", optional
    The OPRF parameter, required for ``kind="oprf"`` (refused otherwise): a
    float < 1/8, or ``"auto"``: the optimal A* for the mean
    ``|x_i + x_j|^2 / d`` over all pairs of rows of the training X (of the
    scaled rows for a rescaled target kernel), fixed at fit time.""",
    }


# ---------------------------------------------------------------------------
# The base class
# ---------------------------------------------------------------------------


@fill(fitted=FITTED_TEXT)
class BaseRandomFeatures(TransformerMixin, BaseEstimator):
    r"""Random features of a target kernel as a scikit-learn transformer, with their exact error.

    Not used directly: :class:`rfkernels.RandomFeatures` (the softmax kernel)
    and :class:`rfkernels.RandomFourierFeatures` (the Gaussian kernel) set
    :attr:`target_kernel`, their defaults and, for a kernel with parameters,
    how they are resolved on the training data. The constructor parameters
    are those of the subclass; the fitted attributes are common.

    Attributes
    ----------
    projections_ : ndarray of shape (m, d)
        The projections drawn by :meth:`fit` (in the coordinates of the
        softmax kernel: those of the scaled inputs for a rescaled target).
    A_ : float or None
        The OPRF parameter in use (None for the other kinds).
    fitted_params_ : object or None
        A data-fitted kind's parameters fitted on the training rows
        (``"data-tilted"``: its :class:`rfkernels.estimators.tilted.TiltPolicy`);
        None for the other kinds.
    random_offset_ : ndarray of shape (m,) or None
        The phases of ``kind="offset"`` (:func:`rfkernels.draw_phases`); None
        for the other kinds.
    %(fitted)s
    """

    #: The registered target kernel (:func:`rfkernels.estimators.registry.names` ``("kernel")``).
    target_kernel = "softmax"

    # ------------------------------------------------------------ hooks

    def _kernel_values(self, x):
        """The target kernel's parameters by name, checked (``x=None``) or resolved on training rows x."""
        return {}

    def _ensembles(self):
        """The ensembles this transformer offers (every registered one)."""
        return registry.names("ensemble")

    def _kind_choice(self):
        """``(kind, label)``: the checked kind and how error messages name the parameter given."""
        kind, taken = self.kind, mapped_kinds() + fitted_map_kinds()
        if kind in registry.names("kind") and kind not in taken:
            raise ValueError(f"kind={kind!r} has no one literal feature map for "
                             f"{type(self).__name__} (a query map and a key map, or none); it "
                             f"takes {', '.join(map(repr, taken))}")
        kind = check_choice(kind, "kind", taken)
        return kind, f"kind={kind!r}"

    def _pair_errors(self, x, y, m, est):
        """``(mse, aux)`` of every pair of rows, ``aux`` what :meth:`_kernel_sq_sum` takes."""
        return pair_errors(x, y, m, est)

    def _kernel_sq_sum(self, aux, est):
        """:math:`\\|K\\|_F^2` from :meth:`_pair_errors`' ``aux`` (here the log kernel, overwritten)."""
        aux *= 2.0
        return float(np.exp(aux, out=aux).sum())

    # ------------------------------------------------------------ fitting

    def _checked_params(self):
        """``(kind, label, m, seed)`` from the constructor's parameters, checked before any work."""
        self._kernel_values(None)
        kind, label = self._kind_choice()
        check_choice(self.ensemble, "ensemble", self._ensembles())
        r = check_int(self.n_components, "n_components")
        param = registry.entry("kind", kind).feature_map.param
        if param is not None and getattr(self, param.name, None) is None:
            raise ValueError(f"kind={kind!r} needs its parameter {param.name}: a float or 'auto' "
                             "(fitted on the training data); got None")
        per = estimator(kind, A=self.A).kind.features_per_projection  # A checked there, once
        if r % per:
            raise ValueError(f"n_components must be even for {label} (r = 2m: a sin/cos or "
                             f"exp(+)/exp(-) pair per projection); got {r}")
        return kind, label, r // per, fit_seed(self.random_state)

    def _spec(self, kind, x, batch=False):
        """``(estimator, A)``: the frozen estimator of these parameters on training rows x, A resolved."""
        values = self._kernel_values(x)
        est = estimator(kind, ensemble=self.ensemble, norms=self.norms, kernel=self.target_kernel,
                        A=self.A, d=x.shape[1], batch=batch, **values)
        param = registry.entry("kind", kind).feature_map.param
        if param is None:
            return est, None
        a = param.check(self.A)
        if isinstance(a, str):  # "auto": fitted on the (scaled) training rows with themselves
            c = est.scale
            xs = c * x if c != 1.0 else x
            a = param.fit(xs, xs)
        a = float(a)
        return estimator(kind, ensemble=self.ensemble, norms=self.norms,
                         kernel=self.target_kernel, A=a, d=x.shape[1], batch=batch, **values), a

    def fit(self, X, y=None):
        """Draw the projections (then, for ``kind="offset"``, the phases) for X; returns self.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training data; only its number of features matters, and its
            rows where a parameter is fitted on them (``A="auto"``,
            ``gamma="scale"``).
        y : ignored
        """
        kind, _, m, seed = self._checked_params()
        names = feature_names(X)
        x = check_samples(X)
        est, a = self._spec(kind, x)
        if est.needs_fit:  # a data-fitted kind (data-tilted): fitted on the (scaled) training rows
            xs = est.scale * x if est.scale != 1.0 else x
            est = est.fitted_on(xs, xs)
        self.fitted_params_ = est.params if est.kind.population else None
        rng = check_seed(seed)  # the projections, then (offset) their phases
        self.projections_ = draw_projections(m, x.shape[1], ensemble=self.ensemble,
                                             norms=self.norms, seed=rng)
        self.kind_, self.ensemble_, self.norms_ = kind, self.ensemble, self.norms
        self.random_offset_ = draw_phases(m, seed=rng) if est.kind.random_phase else None
        self.A_ = a
        for name, value in est.kernel_values().items():  # gamma_
            setattr(self, name + "_", value)
        self.n_features_in_ = x.shape[1]
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

    def __sklearn_is_fitted__(self):
        return hasattr(self, "projections_")

    # ------------------------------------------------------------ features

    def _checked_input(self, X, name="X"):
        check_is_fitted(self)
        self._check_names(X)
        x = check_samples(X, name)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"{name} has {x.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input.")
        return x

    def _check_names(self, X):
        fitted = getattr(self, "feature_names_in_", None)
        names = feature_names(X)
        cls = type(self).__name__
        if fitted is None and names is None:
            return
        if fitted is None:
            warnings.warn(f"X has feature names, but {cls} was fitted without feature names",
                          UserWarning, stacklevel=3)
            return
        if names is None:
            warnings.warn(f"X does not have valid feature names, but {cls} was fitted with "
                          "feature names", UserWarning, stacklevel=3)
            return
        if len(fitted) == len(names) and np.all(fitted == names):
            return
        message = "The feature names should match those that were passed during fit.\n"
        unexpected = sorted(set(names) - set(fitted))
        missing = sorted(set(fitted) - set(names))
        if unexpected:
            message += "Feature names unseen at fit time:\n" + _name_list(unexpected)
        if missing:
            message += "Feature names seen at fit time, yet now missing:\n" + _name_list(missing)
        if not unexpected and not missing:
            message += "Feature names must be in the same order as they were in fit.\n"
        raise ValueError(message)

    def _target(self):
        """The fitted target kernel as :func:`rfkernels.feature_map`'s keywords."""
        names = registry.entry("kernel", self.target_kernel).param_names
        return {"kernel": self.target_kernel, **{n: getattr(self, n + "_") for n in names}}

    def transform(self, X):
        """The features of X: an (n_samples, n_components) float64 array.

        Raises FloatingPointError where a feature overflows float64 (use
        :meth:`kernel` or :func:`rfkernels.log_estimate` for the estimate).
        """
        x = self._checked_input(X)
        if getattr(self, "fitted_params_", None) is not None:
            return fitted_features(x, self.projections_, self._fitted_spec())
        return feature_map(x, self.projections_, self.kind_, A=self.A_,
                           phase=self.random_offset_, **self._target())

    def kernel(self, X, Y=None):
        """The estimate of the target kernel at every pair of rows (Y=None: Y = X), shape (n_x, n_y).

        Equals ``transform(X) @ transform(Y).T`` (:func:`rfkernels.estimate`).
        """
        x = self._checked_input(X)
        y = x if Y is None else self._checked_input(Y, "Y")
        if getattr(self, "fitted_params_", None) is not None:  # one fitted map: the features' products
            est = self._fitted_spec()
            return (fitted_features(x, self.projections_, est)
                    @ fitted_features(y, self.projections_, est).T)
        return estimate(x, y, self.projections_, self.kind_, A=self.A_,
                        phase=self.random_offset_, **self._target())

    def get_feature_names_out(self, input_features=None):
        """Output feature names: the class name in lower case, numbered 0 .. r-1 (as RBFSampler's)."""
        check_is_fitted(self)
        r = self.projections_.shape[0] * registry.entry("kind", self.kind_).features_per_projection
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(r)], dtype=object)

    # ------------------------------------------------------------ exact error

    def _fitted_spec(self):
        """The fitted estimator (its fitted parameters for a data-fitted kind)."""
        values = {n: getattr(self, n + "_") for n in registry.entry("kernel", self.target_kernel)
                  .param_names}
        fitted = getattr(self, "fitted_params_", None)
        if fitted is not None:
            return estimator(self.kind_, ensemble=self.ensemble_, norms=self.norms_,
                             kernel=self.target_kernel, params=fitted, batch=True, **values)
        return estimator(self.kind_, ensemble=self.ensemble_, norms=self.norms_,
                         kernel=self.target_kernel, A=self.A_, batch=True, **values)

    def expected_mse(self, X, Y=None):
        r"""The exact expected squared error of every entry of :meth:`kernel` ``(X, Y)``.

        The expectation is over the law of the fit (what :meth:`fit` draws
        for the fitted kind, ensemble, norm law, dimension, number of
        projections and kernel parameters), not the error of this fitted
        instance's projections: :func:`rfkernels.theory.exact_mse` at each
        pair of rows.

        Parameters
        ----------
        X : array_like of shape (n_x, n_features)
        Y : array_like of shape (n_y, n_features), optional
            Default X; the matrix is then symmetric and computed once per
            pair i <= j, the diagonal included.

        Returns
        -------
        ExpectedMSE
            ``entries`` (n_x, n_y) and the Gram-level summary
            ``relative_frobenius`` :math:`= E\|\hat K - K\|_F^2 / \|K\|_F^2`.

        Raises
        ------
        ValueError
            No closed form for the fitted choices (the estimator's
            ``supports.exact_mse`` reason is the message), bad X or Y, a
            feature-count mismatch.
        NotFittedError
            Before :meth:`fit`.
        MemoryError
            If the (n_x, n_y) arrays do not fit in this machine's memory.
        FloatingPointError
            An entry overflows float64 (the softmax kernel at large norms).
        """
        x = self._checked_input(X)
        y = None if Y is None else self._checked_input(Y, "Y")
        est = self._fitted_spec()
        est.supports.exact_mse.require()
        n_y = x.shape[0] if y is None else y.shape[0]
        check_memory(8 * 4 * x.shape[0] * n_y, f"expected_mse of a ({x.shape[0]}, {n_y}) kernel "
                                               "matrix")
        m = self.projections_.shape[0]
        entries, aux = self._pair_errors(x, y, m, est)
        kernel_sq_sum = self._kernel_sq_sum(aux, est)
        mse_sum = float(entries.sum())
        gamma = getattr(est.kernel_params, "gamma", None)
        return ExpectedMSE(entries=entries, mse_sum=mse_sum, kernel_sq_sum=kernel_sq_sum,
                           relative_frobenius=mse_sum / kernel_sq_sum, kind=self.kind_,
                           ensemble=self.ensemble_, norms=self.norms_,
                           n_components=m * est.kind.features_per_projection, m=m,
                           kernel=self.target_kernel, gamma=gamma)

    def _error_terms(self, X, kind):
        """``(V, C, |K|_F^2, estimator, d)`` on X: every entry's MSE is ``V/m + P(m) C/m^2``.

        Two exact evaluations: m = 1 gives V (one projection shares no
        block) and m = d gives ``V/d + (d - 1) C/d``; C = 0 for iid
        projections. Parameters fitted on data (``gamma="scale"``,
        ``A="auto"``) are resolved on X.
        """
        x = check_samples(X)
        est, _ = self._spec(kind, x, batch=True)
        est.supports.exact_mse.require()
        n, d = x.shape
        check_memory(8 * 6 * n * n, f"the exact error on {n} rows ({n} x {n} entries)")
        v, aux = self._pair_errors(x, None, 1, est)
        c = np.zeros_like(v)
        if est.ensemble.blocked and d > 1:  # rows that share a block: their covariance
            c = (d * self._pair_errors(x, None, d, est)[0] - v) / (d - 1.0)
        return v, c, self._kernel_sq_sum(aux, est), est, d

    def _gram_direct(self, X, kind, ms):
        """The relative Frobenius error at each m of ``ms``, one exact evaluation each."""
        x = check_samples(X)
        est, _ = self._spec(kind, x, batch=True)
        est.supports.exact_mse.require()
        n = x.shape[0]
        check_memory(8 * 4 * n * n, f"the exact error on {n} rows ({n} x {n} entries)")
        out, k2 = np.empty(ms.shape), None
        for i, m in enumerate(ms.reshape(-1)):
            mse, aux = self._pair_errors(x, None, int(m), est)
            k2 = self._kernel_sq_sum(aux, est) if k2 is None else k2
            out.reshape(-1)[i] = float(mse.sum()) / k2
        return out

    def gram_error(self, X, n_components=None):
        r"""The exact Gram-level relative error on X at each output dimension in ``n_components``.

        :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2` of the (n, n) Gram matrix of
        X, diagonal included (:attr:`ExpectedMSE.relative_frobenius`), for
        these parameters (those fitted on data resolved on X); no fit
        needed. With independent chi norms the whole curve costs two exact
        evaluations over the pairs (:meth:`n_components_for`, Notes); with
        other norm laws one per output dimension.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
        n_components : int or array_like of int, optional
            Output dimensions r (even for kinds whose features come in
            pairs); default the estimator's ``n_components``.

        Returns
        -------
        float or ndarray of float
            The relative error at each r, shaped as ``n_components``.

        Raises
        ------
        ValueError
            No closed form for these choices (the reason), an odd r where
            features come in pairs, bad arguments.
        """
        kind, label, _, _ = self._checked_params()
        r = check_int_array(self.n_components if n_components is None else n_components,
                            "n_components")
        per = registry.entry("kind", kind).features_per_projection
        if np.any(r % per):
            raise ValueError(f"n_components must be even for {label} (r = 2m); got "
                             f"{n_components!r}")
        if not registry.entry("norms", self.norms).independent_chi:
            out = self._gram_direct(X, kind, r // per)
        else:
            v, c, k2, est, d = self._error_terms(X, kind)
            out = _error_at(float(v.sum()) / k2, float(c.sum()) / k2, d, est.ensemble.name, r // per)
        return float(out) if out.ndim == 0 else out

    def n_components_for(self, X, target, *, criterion="frobenius", q=0.9):
        r"""The smallest output dimension whose exact error on X meets ``target``.

        For these parameters (those fitted on data resolved on X; no fit
        needed), the least r with

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
            The output dimension r (even where features come in pairs).

        Raises
        ------
        ValueError
            No closed form for these choices (the reason), norms other than
            independent chi (no V/m + P C/m^2 form: use :meth:`gram_error`
            on a grid), a target not met below :data:`MAX_COMPONENTS`
            outputs, bad arguments.

        Notes
        -----
        With independent chi norms every entry's MSE at m projections is
        :math:`V_{ij}/m + P(m)\,C_{ij}/m^2` (``P(m)`` ordered pairs sharing
        an orthogonal or simplex block, 0 for iid; the offset map's phase
        term is in :math:`V_{ij}`), so two exact evaluations (m = 1 and
        m = d) give :math:`V` and :math:`C` and then the error at every m.
        The Frobenius criterion scans every m up to a bound that meets the
        target, so r is the first output dimension that meets it even where
        the error is not monotone in m (orthogonal projections where
        :math:`C > 0`); hence r never grows when the target does. The
        quantile criterion bisects on the doubling grid that first meets
        the target, which is exact where the quantile decreases with m.
        """
        target = _positive(target, "target")
        check_choice(criterion, "criterion", CRITERIA)
        if criterion == "quantile":
            q = _positive(q, "q")
            if q > 1.0:
                raise ValueError(f"q must be in (0, 1]; got {q!r}")
        kind, _, _, _ = self._checked_params()
        if not registry.entry("norms", self.norms).independent_chi:
            raise ValueError(f"n_components_for needs independent chi norms, where the error at m "
                             f"projections is V/m + P(m) C/m^2; got norms={self.norms!r}: use "
                             "gram_error on a grid of n_components")
        v, c, k2, est, d = self._error_terms(X, kind)
        if criterion == "frobenius":
            m = _first_m(float(v.sum()) / k2, float(c.sum()) / k2, d, est.ensemble.name, target)
        else:
            m = _first_m_quantile(v.reshape(-1), c.reshape(-1), d, est.ensemble.name, target, q)
        if m is None:
            raise ValueError(f"target={target!r} is not met below n_components={MAX_COMPONENTS} "
                             f"({criterion}); ask for a larger target")
        return est.kind.features_per_projection * m
