"""Kind ``"positive"``: FAVOR+'s positive features :math:`\\Lambda e^{\\omega \\cdot x}` (Performer, Lemma 1).

One module, the kind's whole story: its terms on every backend, its exact
theory (through :mod:`rfkernels.estimators.pair_law`), Lemma 2 and its
tilt. The normalised term of projection i is :math:`e^{a p_i - a^2/2}`,
:math:`a = |x + y|` (:mod:`rfkernels.engine`).
"""

from __future__ import annotations

import numpy as np

from ..numerics import elementary as elem
from ..numerics import closed_form as cf
from ..numerics.elementary_numba import exp
from ..numerics.scalar import scalar
from ..numerics.term_form import TermForm
from . import maps, pair_law, registry


def terms(p, w2, length, consts, xp):
    """The normalised terms (m, n) of the scalar projections ``p``."""
    return elem.exp(length * p - 0.5 * length * length, xp)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    """p[i] <- exp(a p_i - a^2/2), in place (the kernels' twin of :func:`terms`)."""
    half = 0.5 * length * length
    for i in range(m):
        p[i] = exp(length * p[i] - half)


def exponents(proj, w, value, xp):
    """FAVOR+'s exponents: the projections themselves, :math:`\\omega_l^\\top x`."""
    return proj


def lemma2(geom, m):
    """log of Lemma 2's MSE: :math:`\\frac1m e^{|u|^2} SM^2 (1 - e^{-|u|^2})`."""
    s, log_sm = geom.s, geom.log_sm
    with np.errstate(divide="ignore"):
        return s + 2.0 * log_sm + cf.log_neg_expm1_neg(s) - np.log(m)


#: The term, for the exact-MSE numerics: one exponential e^{w.(x + y)}.
TERM_FORM = TermForm(on_sum=True, symmetric=False)

KIND = registry.register("kind", registry.Kind(
    name="positive", code=0, seed_index=1,
    representation="positive",
    summary="positive random features (FAVOR+)",
    features_per_projection=1, on_sum=True, paper=True, nonnegative=True,
    terms=terms, scalar_terms=scalar_terms,
    log_mse=pair_law.paper_log_mse(TERM_FORM), theory_reason=pair_law.paper_theory_reason,
    lemma2=lemma2, feature_map=maps.ExponentialMap(exponents),
    first_order=((True, +1.0, +1.0, 0.0),),
))
