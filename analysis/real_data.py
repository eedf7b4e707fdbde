r"""Random Fourier features on real data: the Gram-matrix error and the accuracy it buys.

The question of practice: on my data, how many outputs, with which
construction, for a given accuracy? This module answers it on the four
data sets scikit-learn ships inside its package (nothing is downloaded):
``load_digits`` (1,797 x 64, 10 classes), ``load_wine`` (178 x 13, 3
classes), ``load_breast_cancer`` (569 x 30, 2 classes) and
``load_diabetes`` (442 x 10, regression).

Protocol (:func:`load_real_data`)
    A fixed train/test split (:data:`TEST_SIZE` = 25% test,
    ``random_state`` :data:`SPLIT_SEED`, stratified for classification);
    every column standardised by the training rows' mean and standard
    deviation (constant columns left at 0); the kernel
    :math:`K(x, y) = e^{-\gamma |x - y|^2}` with the **median heuristic**
    :math:`\gamma = 1 / (2\,\mathrm{median}_{i<j} |x_i - x_j|^2)` over the
    training rows (the bandwidth :math:`\sigma` = the median distance, in
    :math:`e^{-|x - y|^2 / (2\sigma^2)}`), not 1/median.

Gram error (:func:`exact_gram_error`, :func:`gram_error_sample`)
    :math:`E\|\hat K - K\|_F^2 / \|K\|_F^2` of the training rows' Gram
    matrix, diagonal included, exactly
    (:meth:`rfkernels.RandomFourierFeatures.gram_error`), and its Monte
    Carlo value: one Gram matrix per seed, mean and standard error over
    seeds.

Downstream accuracy (:func:`downstream_scores`)
    Ridge regression on the features, :math:`w = (\Phi^T\Phi + \alpha I)^{-1}
    \Phi^T (Y - \bar Y)`, which is kernel ridge regression with
    :math:`\hat K = \Phi\Phi^T`; the exact kernel model is kernel ridge with
    K itself and the same :math:`\alpha` (:func:`exact_kernel_score`).
    Classification codes each class +1/-1 (scikit-learn's
    ``RidgeClassifier``) and predicts the largest output; the score is the
    test accuracy. Regression scores the test :math:`R^2`. Targets are
    centred on the training mean (no other intercept, so both models are
    the same estimator with a different Gram matrix). The penalty
    :data:`ALPHA` of each data set is chosen for the exact kernel model by
    5-fold cross-validation on the training rows (:func:`cv_alpha`, grid
    :data:`ALPHAS`), never on the test rows, and is the same for every
    construction and output dimension.

Constructions (:data:`CONSTRUCTIONS`)
    ``rbf_sampler``: scikit-learn's ``RBFSampler`` itself (its exact error
    is that of offset iid features, the law it draws); ``paired_iid``,
    ``paired_orthogonal``, ``paired_simplex``: cos/sin features
    (:class:`rfkernels.RandomFourierFeatures`, ``kind="trig"``);
    ``positive_orthogonal``: FAVOR+ features of the rescaled pair
    (``kind="positive"``), whose error depends on the rows' norms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rfkernels import RandomFourierFeatures
from rfkernels.estimators import registry

__all__ = ["ALPHA", "ALPHAS", "BOUNDED", "CONSTRUCTIONS", "DATASETS", "RealData", "SPLIT_SEED",
           "TEST_SIZE", "agreement", "cv_alpha", "downstream_scores", "exact_gram_error",
           "exact_kernel_score", "features_of", "gram_error_sample", "is_bounded", "load_real_data",
           "median_gamma", "ridge_predict"]

#: Data set name -> (scikit-learn loader, task).
DATASETS = {"digits": ("load_digits", "classification"),
            "wine": ("load_wine", "classification"),
            "breast_cancer": ("load_breast_cancer", "classification"),
            "diabetes": ("load_diabetes", "regression")}
#: The ridge penalties :func:`cv_alpha` chooses from.
ALPHAS = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0)
#: Ridge penalty per data set: :func:`cv_alpha` on the full training rows (every choice is
#: inside the grid; ``tests/test_real_data.py`` checks that it still chooses these).
ALPHA = {"digits": 1e-3, "wine": 10.0, "breast_cancer": 0.1, "diabetes": 1.0}
#: The fixed split: test fraction and ``train_test_split``'s ``random_state``.
TEST_SIZE = 0.25
SPLIT_SEED = 0
#: Construction name -> (``kind``, ``ensemble``) of :class:`rfkernels.RandomFourierFeatures`
#: whose law it is (``rbf_sampler``: offset iid, drawn by scikit-learn's ``RBFSampler``).
CONSTRUCTIONS = {"rbf_sampler": ("offset", "iid"),
                 "paired_iid": ("trig", "iid"),
                 "paired_orthogonal": ("trig", "orthogonal"),
                 "paired_simplex": ("trig", "simplex"),
                 "positive_orthogonal": ("positive", "orthogonal")}
#: Kinds whose Gram estimate is bounded (each entry within [-2, 2] offset, [-1, 1] trig),
#: asked of the registry (the feature map's ``bounded``): the error of one Gram matrix is
#: bounded, so the mean over seeds has a normal limit and a trustworthy standard error.
#: Positive features are unbounded (their Monte Carlo tail is heavy).
BOUNDED = tuple(k.name for k in registry.entries("kind")
                if k.feature_map is not None and k.feature_map.bounded)


def is_bounded(construction):
    """Whether a construction's Gram estimate is bounded (its kind's feature map says)."""
    return registry.entry("kind", CONSTRUCTIONS[construction][0]).feature_map.bounded


@dataclass(frozen=True, eq=False)
class RealData:
    """One data set after :func:`load_real_data`'s protocol (standardised, split, gamma chosen)."""

    name: str
    task: str
    x_train: np.ndarray
    x_test: np.ndarray
    y_train: np.ndarray
    y_test: np.ndarray
    gamma: float
    median_sq_distance: float

    @property
    def alpha(self):
        """The ridge penalty of this data set (:data:`ALPHA`)."""
        return ALPHA[self.name]


def median_gamma(x):
    r"""``(gamma, median)``: :math:`1 / (2\,\mathrm{median}_{i<j}|x_i - x_j|^2)` and that median."""
    from rfkernels.fourier import squared_distances

    t = squared_distances(np.asarray(x, dtype=np.float64))
    median = float(np.median(t[np.triu_indices(t.shape[0], 1)]))
    if not median > 0:
        raise ValueError("the median squared distance between rows is 0: the median heuristic "
                         "has no scale here")
    return 1.0 / (2.0 * median), median


def load_real_data(name, *, rows=None, seed=0):
    """A data set of :data:`DATASETS` under the module's protocol.

    ``rows``: keep a random subset of that many rows (drawn with ``seed``
    before the split; the tests use 300), default all.
    """
    from sklearn import datasets
    from sklearn.model_selection import train_test_split

    if name not in DATASETS:
        raise ValueError(f"unknown data set {name!r}; valid names are {', '.join(DATASETS)}")
    loader, task = DATASETS[name]
    x, y = getattr(datasets, loader)(return_X_y=True)
    x = np.asarray(x, dtype=np.float64)
    if rows is not None and rows < x.shape[0]:
        keep = np.sort(np.random.default_rng(seed).choice(x.shape[0], size=int(rows), replace=False))
        x, y = x[keep], y[keep]
    stratify = y if task == "classification" else None
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=TEST_SIZE, random_state=SPLIT_SEED, stratify=stratify)
    mean, sd = x_train.mean(axis=0), x_train.std(axis=0)
    sd[sd == 0] = 1.0
    x_train, x_test = (x_train - mean) / sd, (x_test - mean) / sd
    gamma, median = median_gamma(x_train)
    return RealData(name, task, x_train, x_test, y_train, y_test, gamma, median)


def _transformer(data, construction, r, seed=None):
    kind, ensemble = CONSTRUCTIONS[construction]
    return RandomFourierFeatures(gamma=data.gamma, n_components=int(r), kind=kind,
                                 ensemble=ensemble, random_state=seed)


def exact_gram_error(data, construction, r):
    """The exact relative Gram error on the training rows at output dimensions ``r``."""
    return _transformer(data, construction, 2).gram_error(data.x_train, r)


def features_of(data, construction, r, seed):
    """``(Phi_train, Phi_test)`` of one draw (``seed`` an int; ``RBFSampler`` for ``rbf_sampler``)."""
    if construction == "rbf_sampler":
        from sklearn.kernel_approximation import RBFSampler

        tr = RBFSampler(gamma=data.gamma, n_components=int(r), random_state=int(seed))
    else:
        tr = _transformer(data, construction, r, int(seed))
    tr.fit(data.x_train)
    return tr.transform(data.x_train), tr.transform(data.x_test)


def _kernel(data, a, b):
    from rfkernels.fourier import squared_distances

    t = squared_distances(a, b)
    t *= -data.gamma
    return np.exp(t, out=t)


def _targets(task, y_train):
    """``(Y, offset, classes)``: the centred training targets (one column per class) and their mean."""
    if task == "classification":
        classes = np.unique(y_train)
        codes = np.where(y_train[:, None] == classes[None, :], 1.0, -1.0)
    else:
        classes, codes = None, y_train.astype(np.float64)[:, None]
    offset = codes.mean(axis=0)
    return codes - offset, offset, classes


def _score(task, outputs, classes, y_true):
    """Accuracy of the largest output (classification) or R^2 (regression) against ``y_true``."""
    if task == "classification":
        return float(np.mean(classes[np.argmax(outputs, axis=1)] == y_true))
    resid = outputs[:, 0] - y_true
    return float(1.0 - resid @ resid / np.sum((y_true - y_true.mean()) ** 2))


def _kernel_ridge_score(task, k_train, k_eval, y_train, y_eval, alpha):
    """The score on the evaluation rows of kernel ridge fitted with ``k_train`` (n, n)."""
    y, offset, classes = _targets(task, y_train)
    k = k_train + alpha * np.eye(k_train.shape[0])
    return _score(task, k_eval @ np.linalg.solve(k, y) + offset, classes, y_eval)


def cv_alpha(data, folds=5):
    """The ridge penalty of :data:`ALPHAS` with the best mean score of exact kernel ridge.

    ``folds``-fold cross-validation on the training rows only (stratified
    for classification, ``shuffle=True, random_state=0``); ties go to the
    larger penalty. :data:`ALPHA` holds its choice on the full data sets.
    """
    from sklearn.model_selection import KFold, StratifiedKFold

    split = (StratifiedKFold if data.task == "classification" else KFold)(
        folds, shuffle=True, random_state=0)
    k = _kernel(data, data.x_train, data.x_train)
    means = []
    for alpha in ALPHAS:
        scores = [_kernel_ridge_score(data.task, k[np.ix_(tr, tr)], k[np.ix_(va, tr)],
                                      data.y_train[tr], data.y_train[va], alpha)
                  for tr, va in split.split(data.x_train, data.y_train)]
        means.append(np.mean(scores))
    best = max(means)
    return max(a for a, m in zip(ALPHAS, means) if m == best)


def ridge_predict(phi_train, targets, phi_test, alpha):
    r"""``phi_test @ w`` with :math:`w = (\Phi^T\Phi + \alpha I)^{-1}\Phi^T Y` (the dual when r > n).

    NumPy's solver, not SciPy's: SciPy links its own OpenBLAS, and
    alternating between the two libraries' thread pools made the figure's
    data slower (their idle threads spin; docs/performance.md).
    """
    n, r = phi_train.shape
    if r <= n:
        w = np.linalg.solve(phi_train.T @ phi_train + alpha * np.eye(r), phi_train.T @ targets)
        return phi_test @ w
    dual = np.linalg.solve(phi_train @ phi_train.T + alpha * np.eye(n), targets)
    return phi_test @ (phi_train.T @ dual)


def exact_kernel_score(data):
    """The test score of kernel ridge with the exact Gaussian kernel (the same alpha and targets)."""
    return _kernel_ridge_score(data.task, _kernel(data, data.x_train, data.x_train),
                               _kernel(data, data.x_test, data.x_train), data.y_train,
                               data.y_test, data.alpha)


def gram_error_sample(phi_train, kernel_train, kernel_sq=None, kernel_phi=None):
    r"""``||Phi Phi^T - K||_F^2 / ||K||_F^2`` of one draw, without the (n, n) matrix Phi Phi^T.

    :math:`\|\Phi^T\Phi\|_F^2 - 2\langle \Phi, K\Phi\rangle + \|K\|_F^2`: n^2 r
    multiply-adds, as the direct form, but no n x n temporary (faster:
    docs/performance.md). The terms cancel to the error, about
    1e-3 of each here, so about 3 digits of the 16 are lost.
    ``kernel_sq``: :math:`\|K\|_F^2` and ``kernel_phi``: :math:`K\Phi`, if already known.
    """
    k2 = float(np.vdot(kernel_train, kernel_train)) if kernel_sq is None else kernel_sq
    kphi = kernel_train @ phi_train if kernel_phi is None else kernel_phi
    gram = phi_train.T @ phi_train
    return (float(np.vdot(gram, gram)) - 2.0 * float(np.vdot(phi_train, kphi)) + k2) / k2


def downstream_scores(data, construction, r, seeds, *, gram=True):
    r"""``(scores, gram_errors)`` over ``seeds``: the test score and the Gram error of each draw.

    ``gram=False`` skips the Gram errors (None): they cost n^2 r per draw,
    the scores n r^2. The products :math:`K\Phi` of all draws are one
    matrix product (faster than one per draw: docs/performance.md).
    """
    y, offset, classes = _targets(data.task, data.y_train)
    draws = [features_of(data, construction, r, s) for s in seeds]
    scores = [_score(data.task, ridge_predict(phi, y, phi_test, data.alpha) + offset, classes,
                     data.y_test) for phi, phi_test in draws]
    if not gram:
        return np.array(scores), None
    k = _kernel(data, data.x_train, data.x_train)
    k2 = float(np.vdot(k, k))
    kphi = k @ np.concatenate([phi for phi, _ in draws], axis=1)
    errors = [gram_error_sample(phi, k, k2, kphi[:, i * r:(i + 1) * r])
              for i, (phi, _) in enumerate(draws)]
    return np.array(scores), np.array(errors)


def agreement(gram, score, score_se):
    """Whether the construction with the lowest exact Gram error also has the best mean score.

    ``gram``, ``score``, ``score_se``: {construction: value}. Returns a dict
    with ``lowest_gram_error``, ``best_score``, ``score_gap`` (best minus
    that of the lowest-error construction), ``gap_se`` and ``verdict``:
    ``"yes"`` (the same construction), ``"tie"`` (a different one, within 2
    standard errors of the gap) or ``"no"``.
    """
    low = min(gram, key=gram.get)
    best = max(score, key=score.get)
    gap = score[best] - score[low]
    se = math.hypot(score_se[best], score_se[low])
    verdict = "yes" if best == low else ("tie" if gap <= 2.0 * se else "no")
    return {"lowest_gram_error": low, "best_score": best, "score_gap": float(gap),
            "gap_se": float(se), "verdict": verdict}
