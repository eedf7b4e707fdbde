"""Kind ``"trig"``: random Fourier features :math:`\\Lambda^{-1} (\\cos, \\sin)(\\omega \\cdot x)`.

The normalised term of projection i is :math:`\\cos(a p_i)`, :math:`a = |x - y|`
(the estimate over :math:`\\Lambda^{-1}`). Bounded, so it has no heavy tail
to tilt toward.
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics import closed_form as cf
from ..numerics.scalar import scalar
from ..numerics.sincos import sin_cos
from ..numerics.term_form import TermForm
from . import maps, pair_law, registry


def terms(p, w2, length, consts, xp):
    """The normalised terms (m, n) of the scalar projections ``p``."""
    return xp.cos(length * p)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    """p[i] <- cos(a p_i), in place."""
    for i in range(m):
        p[i] = math.cos(length * p[i])


def features(proj, w, half_sq, shift, value, phase, xp):
    """:math:`e^{|x|^2/2} [\\sin, \\cos](\\omega^\\top x) / \\sqrt m` (2m outputs); ``shift`` a per-row log factor."""
    scale = xp.exp(half_sq + shift) / math.sqrt(proj.shape[1])
    return xp.concatenate([xp.sin(proj), xp.cos(proj)], axis=1) * scale


def mean_product(px, py, phase, xp):
    """The mean cosine of the projections' differences, :math:`\\frac1m \\sum_l \\cos(\\omega_l^\\top (x - y))`."""
    return (xp.cos(px) @ xp.cos(py).T + xp.sin(px) @ xp.sin(py).T) / px.shape[1]


def parts(proj, phase, xp, r):
    """The bounded part :math:`[\\sin, \\cos](\\omega^\\top x)`, each rounded by ``r``.

    On NumPy float64 matrices, in one compiled pass (:func:`rfkernels.numerics.sincos.sin_cos`).
    """
    if xp is np and proj.ndim == 2 and proj.dtype == np.float64:
        return r(sin_cos(proj))
    return xp.concatenate([r(xp.sin(proj)), r(xp.cos(proj))], axis=1)


def lemma2(geom, m):
    """log of Lemma 2's MSE: :math:`\\frac1{2m} e^{|u|^2} SM^{-2} (1 - e^{-|z|^2})^2`."""
    with np.errstate(divide="ignore"):
        return (geom.s - 2.0 * geom.log_sm + 2.0 * cf.log_neg_expm1_neg(geom.t)
                - np.log(2.0 * m))


#: The term, for the exact-MSE numerics: cos(w.(x - y)).
TERM_FORM = TermForm(on_sum=False, symmetric=True)

KIND = registry.register("kind", registry.Kind(
    name="trig", code=2, seed_index=0,
    representation="trig",
    summary="trigonometric random features (cos/sin, 2m outputs)",
    features_per_projection=2, on_sum=False, paper=True, nonnegative=False,
    terms=terms, scalar_terms=scalar_terms,
    log_mse=pair_law.paper_log_mse(TERM_FORM), theory_reason=pair_law.paper_theory_reason,
    lemma2=lemma2, feature_map=maps.SignedMap(features, mean_product, parts),
    first_order=((True, -1.0, -1.0, math.log(0.5)), (False, +1.0, +1.0, math.log(0.5))),
    tilt_reason=("proposal='tilted' is for positive, hyperbolic and oprf features: trig estimates "
                 "are bounded (|cos| <= 1), their squared errors have every moment, and there is "
                 "no heavy tail to tilt toward; use proposal='plain' or 'auto'"),
))
