r"""A scikit-learn style transformer: random features of the softmax kernel exp(x·y).

:class:`RandomFeatures` follows the conventions of
``sklearn.kernel_approximation.RBFSampler`` (``n_components`` is the output
dimension, ``fit`` draws the projections for the data's dimension,
``random_state``, ``get_params``/``set_params``, ``n_features_in_`` and
``feature_names_in_``) without importing scikit-learn: it works where
scikit-learn is not installed, and passes scikit-learn's
``check_estimator`` where it is (``tests/test_transformer.py``).

Examples
--------
>>> import numpy as np
>>> from rfkernels import RandomFeatures
>>> X = np.random.default_rng(0).normal(scale=0.3, size=(5, 4))
>>> rf = RandomFeatures(n_components=64, random_state=0).fit(X)
>>> rf.transform(X).shape
(5, 64)
>>> rf.projections_.shape
(64, 4)
"""

from __future__ import annotations

import inspect
import numbers
import warnings

import numpy as np

from .features import estimate, feature_map, mapped_kinds
from .projections import draw_phases, draw_projections
from .estimators import estimator, registry
from .validation import check_choice, check_finite, check_int, check_seed

__all__ = ["NotFittedError", "RandomFeatures", "check_samples", "fit_seed"]


class NotFittedError(ValueError, AttributeError):
    """``transform`` or ``kernel`` before ``fit`` (a ValueError and an AttributeError, as in scikit-learn)."""


def _feature_names(X):
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
    """The seed :meth:`RandomFeatures.fit` draws from: a ``RandomState`` is consumed once for an int.

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


class RandomFeatures:
    r"""Random features of the softmax kernel :math:`e^{x \cdot y}`, scikit-learn style.

    ``transform(X) @ transform(Y).T`` estimates ``exp(X @ Y.T)`` without
    bias (chi norms with the ``iid``, ``orthogonal`` and ``simplex``
    ensembles). It is :func:`rfkernels.feature_map` with projections drawn
    once by :func:`rfkernels.draw_projections` in :meth:`fit`.

    Parameters
    ----------
    kind : str, default "positive"
        A registered kind with a literal feature map
        (:func:`rfkernels.features.mapped_kinds`); ``"offset"`` draws its
        phases ``random_offset_`` after the projections, from the same
        generator.
    n_components : int, default 256
        Output dimension r, as in ``RBFSampler``: r projections for
        ``"positive"``, ``"oprf"`` and ``"offset"``, r/2 for ``"trig"`` and
        ``"hyperbolic"`` (whose features come in pairs), so r must be even there.
    ensemble : str, default "orthogonal"
        Projection ensemble, any of :func:`rfkernels.draw_projections`
        (:data:`rfkernels.ENSEMBLES`).
    norms : str, default "chi"
        Row norms (chi(d): unbiased; sqrt(d): the regularised variant; antithetic: chi(d)
        norms coupled in pairs of rows of each block, unbiased, ``docs/antithetic.rst``).
    random_state : None, int, numpy.random.Generator, SeedSequence or RandomState, default None
        Seed of the projections drawn in :meth:`fit` (a ``RandomState`` is
        consumed once for an integer seed, as scikit-learn would).
    A : float or "auto", optional
        The OPRF parameter, required for ``kind="oprf"`` (refused
        otherwise): a float < 1/8, or ``"auto"``: the optimal A* for the
        mean ``|x_i + x_j|^2 / d`` over all pairs of rows of the training X
        (:func:`rfkernels.features.oprf_auto_a`), fixed at fit time.

    Attributes
    ----------
    projections_ : ndarray of shape (m, d)
        The projections drawn by :meth:`fit`.
    A_ : float or None
        The OPRF parameter in use (None for the other kinds).
    kind_, ensemble_ : str
        The kind and ensemble fitted (parameters changed by ``set_params``
        take effect at the next :meth:`fit`).
    random_offset_ : ndarray of shape (m,) or None
        The phases :math:`b_i \sim U[0, 2\pi)` of ``kind="offset"``
        (:func:`rfkernels.draw_phases`); None for the other kinds.
    n_features_in_ : int
        Number of features seen during :meth:`fit`.
    feature_names_in_ : ndarray of shape (d,)
        Column names seen during :meth:`fit`, when X had string column names.

    Examples
    --------
    >>> import numpy as np
    >>> X = np.random.default_rng(1).normal(scale=0.2, size=(4, 3))
    >>> rf = RandomFeatures(kind="trig", n_components=4000, random_state=0).fit(X)
    >>> bool(np.allclose(rf.kernel(X), np.exp(X @ X.T), atol=0.1))
    True
    """

    def __init__(self, kind="positive", n_components=256, *, ensemble="orthogonal", norms="chi",
                 random_state=None, A=None):
        self.kind = kind
        self.n_components = n_components
        self.ensemble = ensemble
        self.norms = norms
        self.random_state = random_state
        self.A = A

    # ------------------------------------------------------------ parameters

    @classmethod
    def _param_names(cls):
        sig = inspect.signature(cls.__init__)
        return sorted(p.name for p in sig.parameters.values() if p.name != "self")

    def get_params(self, deep=True):
        """The constructor's parameters as a dict (``deep`` is accepted for scikit-learn)."""
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        """Set constructor parameters (validated at :meth:`fit`); returns self."""
        valid = self._param_names()
        for key, value in params.items():
            if key not in valid:
                raise ValueError(f"Invalid parameter {key!r} for estimator {type(self).__name__}; "
                                 f"valid parameters are {', '.join(valid)}")
            setattr(self, key, value)
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    def __sklearn_tags__(self):
        from sklearn.utils import InputTags, Tags, TargetTags, TransformerTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False),
                    transformer_tags=TransformerTags(preserves_dtype=["float64"]),
                    input_tags=InputTags())

    def __sklearn_is_fitted__(self):
        return hasattr(self, "projections_")

    # ------------------------------------------------------------ fitting

    def _checked_params(self):
        if self.kind in registry.names("kind") and self.kind not in mapped_kinds():
            raise ValueError(f"kind={self.kind!r} has no one literal feature map for RandomFeatures "
                             f"(a query map and a key map, or none); it takes "
                             f"{', '.join(map(repr, mapped_kinds()))}")
        kind = check_choice(self.kind, "kind", mapped_kinds())  # the kinds with one literal map
        r = check_int(self.n_components, "n_components")
        param = registry.entry("kind", kind).feature_map.param
        if param is not None and getattr(self, param.name, None) is None:
            raise ValueError(f"kind={kind!r} needs its parameter {param.name}: a float or 'auto' "
                             "(fitted on the training data); got None")
        per = estimator(kind, A=self.A).kind.features_per_projection  # A checked there, once
        if r % per:
            raise ValueError(f"n_components must be even for kind={kind!r} (r = 2m: a sin/cos "
                             f"or exp(+)/exp(-) pair per projection); got {r}")
        m = r // per
        return kind, m, fit_seed(self.random_state)

    def fit(self, X, y=None):
        """Draw the projections for X's number of features; returns self.

        Parameters
        ----------
        X : array_like of shape (n_samples, n_features)
            Training data; only its number of features (and, for
            ``A="auto"``, its rows) matter.
        y : ignored
        """
        kind, m, seed = self._checked_params()
        names = _feature_names(X)
        x = check_samples(X)
        a = None
        param = registry.entry("kind", kind).feature_map.param
        if param is not None:  # "auto": fitted on the training rows with themselves
            a = param.check(self.A)
            a = float(param.fit(x, x) if isinstance(a, str) else a)
        rng = check_seed(seed)  # the projections, then (offset) their phases
        w = draw_projections(m, x.shape[1], ensemble=self.ensemble, norms=self.norms, seed=rng)
        self.projections_ = w
        self.kind_, self.ensemble_ = kind, self.ensemble  # what was fitted (set_params waits for fit)
        self.random_offset_ = (draw_phases(m, seed=rng)
                               if registry.entry("kind", kind).random_phase else None)
        self.A_ = a
        self.n_features_in_ = x.shape[1]
        if names is not None:
            self.feature_names_in_ = names
        elif hasattr(self, "feature_names_in_"):
            del self.feature_names_in_
        return self

    def _checked_input(self, X, name="X"):
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet; call "
                                 "'fit' with appropriate arguments before using this estimator")
        self._check_names(X)
        x = check_samples(X, name)
        if x.shape[1] != self.n_features_in_:
            raise ValueError(f"{name} has {x.shape[1]} features, but {type(self).__name__} is "
                             f"expecting {self.n_features_in_} features as input.")
        return x

    def _check_names(self, X):
        fitted = getattr(self, "feature_names_in_", None)
        names = _feature_names(X)
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

    def transform(self, X):
        """The features of X: an (n_samples, n_components) float64 array.

        Raises FloatingPointError where a feature overflows float64 (use
        :meth:`kernel` or :func:`rfkernels.log_estimate` for the estimate).
        """
        x = self._checked_input(X)
        return feature_map(x, self.projections_, self.kind_, A=self.A_,
                           phase=getattr(self, "random_offset_", None))

    def fit_transform(self, X, y=None):
        """``fit(X).transform(X)``."""
        return self.fit(X, y).transform(X)

    def kernel(self, X, Y=None):
        """The estimate of ``exp(X @ Y.T)`` from the fitted projections (Y=None: Y = X).

        Equals ``transform(X) @ transform(Y).T`` (:func:`rfkernels.estimate`).
        """
        x = self._checked_input(X)
        y = x if Y is None else self._checked_input(Y, "Y")
        return estimate(x, y, self.projections_, self.kind_, A=self.A_,
                        phase=getattr(self, "random_offset_", None))

    def get_feature_names_out(self, input_features=None):
        """Output feature names ``randomfeatures0 .. randomfeatures{r-1}`` (as RBFSampler's)."""
        if not self.__sklearn_is_fitted__():
            raise NotFittedError(f"This {type(self).__name__} instance is not fitted yet")
        r = self.projections_.shape[0] * registry.entry("kind", self.kind_).features_per_projection
        prefix = type(self).__name__.lower()
        return np.asarray([f"{prefix}{i}" for i in range(r)], dtype=object)
