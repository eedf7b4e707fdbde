r"""Monte Carlo MSE of the random-feature estimators, with honest error bars.

:func:`monte_carlo_mse` runs ``trials`` independent estimates of
:math:`SM(x, y) = e^{x \cdot y}` and reports their mean squared error with
its standard error, a 95% interval, the bias, the exact MSE of
:func:`rfkernels.theory.exact_mse` and the z-score between the two, and a
diagnostic of the tail of the squared errors that says when the standard
error can be trusted; given (n, d) arrays it does the same for n pairs at
once, given a :class:`rfkernels.theory.Geometry` for the pair it describes.

Methods
-------
``"reduced"`` (default, fast)
    Draws, per trial, only the m scalar projections the estimate depends
    on, exactly in distribution (:mod:`rfkernels.engine`; counter-based
    Philox numbers keyed by the seed). The ``numba`` backend runs the same
    computation in parallel kernels (:mod:`rfkernels.engine.cpu`),
    ``cupy`` runs the NumPy code on the GPU; the estimates are the same on
    every backend and every thread count (bit for bit, except the rounding
    of ``cos`` for trig features).
``"literal"``
    Draws the full (m, d) projection matrix per trial with
    :func:`rfkernels.draw_projections` (a NumPy ``Generator`` seeded with
    the seed) and evaluates :func:`rfkernels.feature_map`: the code users
    run. It is the only method for an ensemble without a reduced sampler
    (:attr:`rfkernels.estimators.Estimator.supports.reduced` says why).

Streaming
---------
Trials are processed in chunks: each chunk's estimates are written to one
array, cut into blocks of :data:`MOMENT_BLOCK` consecutive trials, each block
reduced to its count, mean and sum of squared deviations (of the errors and
of the squared errors) and merged, block after block in trial order, into
the running totals with Chan et al.'s pairwise update. The largest squared
errors are kept in a buffer of fixed size for the tail fit. Memory does not
grow with ``trials``; because the blocks and their order do not depend on
how trials are chunked, the NumPy and Numba backends report bit-identical
results at any chunk size and thread count (tested for positive and
hyperbolic features; trig estimates round ``cos`` with each library's own).

Scale
-----
Estimates are accumulated divided by a scale ``C`` (``SM`` for positive and
hyperbolic features, ``exp((|x|² + |y|²)/2)`` for trig features,
:func:`rfkernels.engine.normalisation`), so that they stay O(1) where SM
itself is huge or tiny; the reported values are multiplied back in log
space and a result beyond float64 raises :class:`FloatingPointError`.

Proposals
---------
``proposal="plain"`` draws every trial from the estimator's own law.
``"tilted"`` draws them from a defensive mixture that moves one projection
toward where the squared error comes from and weights each trial by the
exact likelihood ratio (:class:`rfkernels.engine.Tilt`), so that the
weighted mean squared error and mean stay unbiased while the heavy tail of
positive, hyperbolic and oprf estimates is sampled (docs/importance.rst).
``"auto"`` (default) tilts a pair when the plain run would not reach the
region its MSE comes from (``tail.reach`` below :data:`REACH_MIN`) or when a
pilot of :data:`PILOT_TRIALS` plain trials, on counters the run does not
use, has a Pareto k-hat of at least :data:`TAIL_K_MAX`, and runs a pair
again tilted if its plain run still ends with such a k-hat and an untrusted
tail; trig features, which are bounded, and the literal method are always
plain.

Tail diagnostic
---------------
Beside every error bar: a generalized Pareto fit to the largest squared
errors and the reach of the sample into the region the MSE comes from
(:mod:`rfkernels.analysis.tail`). ``tail_ok`` says whether ``stderr``,
``ci95`` and ``z`` can be trusted.

Modules
-------
:mod:`~rfkernels.analysis.monte_carlo.mse` holds the entry points and their
one validation; :mod:`~rfkernels.analysis.monte_carlo.trials` runs the validated
trials (proposals, chunks, accumulation, results).
"""

from . import mse
from .mse import *  # noqa: F401,F403  (the face: the entry points' public names)

__all__ = list(mse.__all__)


def __getattr__(name):  # the deprecated entry points (CHANGELOG.md)
    return mse.deprecated(name, __name__)
