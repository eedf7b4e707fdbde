"""Kind ``"hyperbolic"``: the Performer's hyperbolic features, :math:`\\Lambda \\cosh(\\omega \\cdot x)` in pairs.

The normalised term of projection i is
:math:`\\tfrac12 (e^{a p_i - a^2/2} + e^{-a p_i - a^2/2})`, :math:`a = |x + y|`;
large on both sides, so the tilted proposal moves either way.
"""

from __future__ import annotations

import math

import numpy as np

from ..numerics import elementary as elem
from ..numerics import closed_form as cf
from ..numerics.elementary_numba import exp
from ..numerics.scalar import scalar
from ..numerics.term_form import TermForm
from . import maps, pair_law, positive, registry


def terms(p, w2, length, consts, xp):
    """The normalised terms (m, n) of the scalar projections ``p``."""
    half = 0.5 * length * length
    ap = length * p
    return 0.5 * (elem.exp(ap - half, xp) + elem.exp(-ap - half, xp))


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    """p[i] <- cosh form of :func:`terms`, in place."""
    half = 0.5 * length * length
    for i in range(m):
        ap = length * p[i]
        p[i] = 0.5 * (exp(ap - half) + exp(-ap - half))


def exponents(proj, w, value, xp):
    """The pair :math:`[\\omega_l^\\top x, -\\omega_l^\\top x]` (2m outputs)."""
    return xp.concatenate([proj, -proj], axis=1)


def lemma2(geom, m):
    """log of Lemma 2's MSE: :math:`\\tfrac12 (1 - e^{-|u|^2})` times the positive one."""
    with np.errstate(divide="ignore"):
        return np.log(0.5) + cf.log_neg_expm1_neg(geom.s) + positive.lemma2(geom, m)


#: The term, for the exact-MSE numerics: the cosh pair (e^{w.(x + y)} + e^{-w.(x + y)})/2.
TERM_FORM = TermForm(on_sum=True, symmetric=True)

KIND = registry.register("kind", registry.Kind(
    name="hyperbolic", code=1, seed_index=2,
    representation="pairing",
    summary="hyperbolic random features (cosh, 2m outputs)",
    features_per_projection=2, on_sum=True, paper=True, nonnegative=True,
    terms=terms, scalar_terms=scalar_terms,
    log_mse=pair_law.paper_log_mse(TERM_FORM), theory_reason=pair_law.paper_theory_reason,
    lemma2=lemma2, symmetric_tilt=True, feature_map=maps.ExponentialMap(exponents),
    first_order=((True, +1.0, +1.0, math.log(0.5)), (False, -1.0, -1.0, math.log(0.5))),
))
