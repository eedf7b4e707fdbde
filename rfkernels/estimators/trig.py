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
from ..numerics.term_form import TermForm
from . import pair_law, registry


def terms(p, w2, length, consts, xp):
    """The normalised terms (m, n) of the scalar projections ``p``."""
    return xp.cos(length * p)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    """p[i] <- cos(a p_i), in place."""
    for i in range(m):
        p[i] = math.cos(length * p[i])


def lemma2(geom, m):
    """log of Lemma 2's MSE: :math:`\\frac1{2m} e^{|u|^2} SM^{-2} (1 - e^{-|z|^2})^2`."""
    with np.errstate(divide="ignore"):
        return (geom.s - 2.0 * geom.log_sm + 2.0 * cf.log_neg_expm1_neg(geom.t)
                - np.log(2.0 * m))


#: The term, for the exact-MSE numerics: cos(w.(x - y)).
TERM_FORM = TermForm(on_sum=False, symmetric=True)

KIND = registry.register("kind", registry.Kind(
    name="trig", seed_index=0,
    summary="trigonometric random features (cos/sin, 2m outputs)",
    features_per_projection=2, on_sum=False, paper=True, nonnegative=False,
    terms=terms, scalar_terms=scalar_terms,
    log_mse=pair_law.paper_log_mse(TERM_FORM), theory_reason=pair_law.paper_theory_reason,
    lemma2=lemma2,
    tilt_reason=("proposal='tilted' is for positive, hyperbolic and oprf features: trig estimates "
                 "are bounded (|cos| <= 1), their squared errors have every moment, and there is "
                 "no heavy tail to tilt toward; use proposal='plain' or 'auto'"),
))
