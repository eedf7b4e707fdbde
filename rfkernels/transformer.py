r"""Random features of the softmax kernel exp(x·y) as a scikit-learn transformer.

:class:`RandomFeatures` is :class:`rfkernels.sklearn_base.BaseRandomFeatures`
with the softmax kernel as its target: ``sklearn.base.BaseEstimator`` and
``TransformerMixin``, the conventions of
``sklearn.kernel_approximation.RBFSampler`` (``n_components`` is the output
dimension, ``fit`` draws the projections for the data's dimension), and the
exact error of the kernel matrix it estimates.

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

from .docstrings import fill
from .sklearn_base import BaseRandomFeatures, NotFittedError, check_samples, fit_seed, parameter_texts

__all__ = ["NotFittedError", "RandomFeatures", "check_samples", "fit_seed"]


@fill(**parameter_texts(kind="positive", n_components=256, ensemble="orthogonal"))
class RandomFeatures(BaseRandomFeatures):
    r"""Random features of the softmax kernel :math:`e^{x \cdot y}`, a scikit-learn transformer.

    ``transform(X) @ transform(Y).T`` estimates ``exp(X @ Y.T)`` (without
    bias for chi and antithetic norms with the ``iid``, ``orthogonal`` and
    ``simplex`` ensembles). It is :func:`rfkernels.feature_map` with
    projections drawn once by :func:`rfkernels.draw_projections` in
    :meth:`fit`; :meth:`expected_mse`, :meth:`gram_error` and
    :meth:`n_components_for` give the exact error of the kernel matrix
    (:func:`rfkernels.theory.exact_mse`) wherever the choices have a closed
    form, and the reason where they have none.

    Parameters
    ----------
    %(kind)s
    %(n_components)s
    %(ensemble)s
    %(norms)s
    %(random_state)s
    %(A)s

    Attributes
    ----------
    projections_ : ndarray of shape (m, d)
        The projections drawn by :meth:`fit`.
    A_ : float or None
        The OPRF parameter in use (None for the other kinds).
    random_offset_ : ndarray of shape (m,) or None
        The phases :math:`b_i \sim U[0, 2\pi)` of ``kind="offset"``
        (:func:`rfkernels.draw_phases`); None for the other kinds.
    %(fitted)s

    See Also
    --------
    rfkernels.RandomFourierFeatures : the same transformer for the Gaussian kernel.

    Notes
    -----
    The exact MSE of an entry depends on the pair through
    :math:`|x|^2 + |y|^2`, :math:`|x + y|^2` and :math:`|x - y|^2`
    (:class:`rfkernels.theory.Geometry`), computed from the rows themselves;
    it grows like :math:`e^{2 x \cdot y}` and beyond, so at large norms it
    overflows float64 (FloatingPointError) where
    :func:`rfkernels.theory.exact_mse` with ``log=True`` does not.

    Examples
    --------
    >>> import numpy as np
    >>> from rfkernels import theory
    >>> X = np.random.default_rng(1).normal(scale=0.2, size=(4, 3))
    >>> rf = RandomFeatures(kind="trig", n_components=4000, random_state=0).fit(X)
    >>> bool(np.allclose(rf.kernel(X), np.exp(X @ X.T), atol=0.1))
    True
    >>> err = rf.expected_mse(X)
    >>> ref = theory.exact_mse(X[:, None], X[None], 2000, "trig", ensemble="orthogonal")
    >>> bool(np.allclose(err.entries, ref, rtol=1e-13)), err.n_components
    (True, 4000)
    """

    def __init__(self, kind="positive", n_components=256, *, ensemble="orthogonal", norms="chi",
                 random_state=None, A=None):
        self.kind = kind
        self.n_components = n_components
        self.ensemble = ensemble
        self.norms = norms
        self.random_state = random_state
        self.A = A
