"""A toy kind in one module: what docs/architecture.rst's recipe asks of a new estimator.

Kind ``"toy"``: the term of projection i is :math:`e^{2 a p_i - 2 a^2}`
(:math:`a = |x + y|`), i.e. the feature product
:math:`SM\\, e^{2\\omega\\cdot u - 2|u|^2}`: unbiased for chi norms
(:math:`E e^{2ap} = e^{2a^2}`), with per-term variance
:math:`SM^2 (e^{4|u|^2} - 1)`, so for iid rows with chi norms

.. math:: \\mathrm{MSE} = SM^2 (e^{4|x+y|^2} - 1) / m.

Importing this module registers it; nothing else in the project is edited.
"""

import numpy as np

from rfkernels.numerics import elementary as elem
from rfkernels.numerics.elementary_numba import exp
from rfkernels.numerics.scalar import scalar
from rfkernels.estimators import Kind, register


def terms(p, w2, length, consts, xp):
    return elem.exp(2.0 * length * p - 2.0 * length * length, xp)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    for i in range(m):
        p[i] = exp(2.0 * length * p[i] - 2.0 * length * length)


def log_mse(geom, m, est, vectors=None):
    return 2.0 * geom.log_sm + np.log(np.expm1(4.0 * geom.s)) - np.log(m)


def theory_reason(ensemble, norms):
    if ensemble.name != "iid" or not norms.chi:
        return "the toy kind's exact MSE is derived for iid projections with chi norms only"
    return None


KIND = register("kind", Kind(
    name="toy", summary="a toy kind (tests: one module, every layer)",
    features_per_projection=1, on_sum=True, paper=False, nonnegative=True,
    terms=terms, scalar_terms=scalar_terms, log_mse=log_mse, theory_reason=theory_reason,
    tilt_reason="the toy kind has no tilted proposal; use proposal='plain'",
))
