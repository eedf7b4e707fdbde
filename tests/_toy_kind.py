"""A toy kind in one module: what docs/architecture.rst's recipe asks of a new estimator.

Kind ``"toy"``: mirrored positive features
:math:`\\varphi_i(x) = e^{-\\omega_i\\cdot x - |x|^2/2} / \\sqrt m`, so the
normalised term of projection i is :math:`e^{-a p_i - a^2/2}`
(:math:`a = |x + y|`, :math:`p_i` the scalar projection on :math:`u / |u|`):
unbiased for chi norms (:math:`E e^{-ap} = e^{a^2/2}`), with per-term
variance :math:`SM^2 (e^{|u|^2} - 1)`, so for iid rows with chi norms

.. math:: \\mathrm{MSE} = SM^2 (e^{|x+y|^2} - 1) / m.

At one W its features differ from every built-in kind's (FAVOR+'s are
:math:`e^{+\\omega\\cdot x}`), so a layer that fell through to another
kind's map would be caught. Importing this module registers it; nothing
else in the project is edited.
"""

import numpy as np

from rfkernels.numerics import elementary as elem
from rfkernels.numerics.elementary_numba import exp
from rfkernels.numerics.scalar import scalar
from rfkernels.estimators import Kind, register
from rfkernels.estimators.maps import ExponentialMap


def terms(p, w2, length, consts, xp):
    return elem.exp(-length * p - 0.5 * length * length, xp)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    half = 0.5 * length * length
    for i in range(m):
        p[i] = exp(-length * p[i] - half)


def exponents(proj, w, value, xp):
    return -proj


def log_mse(geom, m, est, vectors=None):
    return 2.0 * geom.log_sm + np.log(np.expm1(geom.s)) - np.log(m)


def theory_reason(ensemble, norms):
    if not ensemble.independent or not norms.independent_chi:
        return "the toy kind's exact MSE is derived for iid projections with chi norms only"
    return None


KIND = register("kind", Kind(
    name="toy", summary="a toy kind (tests: one module, every layer)",
    features_per_projection=1, on_sum=True, paper=False, nonnegative=True,
    terms=terms, scalar_terms=scalar_terms, log_mse=log_mse, theory_reason=theory_reason,
    tilt_reason="the toy kind has no tilted proposal; use proposal='plain'",
    feature_map=ExponentialMap(exponents),
))
