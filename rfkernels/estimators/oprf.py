r"""Kind ``"oprf"``: optimal positive random features (Likhosherstov et al., 2022).

:math:`f_A(\omega, x) = (1-4A)^{d/4} \exp(A|\omega|^2 + \sqrt{1-4A}\,\omega\cdot x - |x|^2/2)`,
A < 1/8; A = 0 is FAVOR+. The parameter object :class:`OPRFParams` holds A
as the user gave it: a float (or, for the theory, an array broadcast
against the batch), or ``'auto'`` (also the default, None): each pair's
variance-minimising ``A*`` (:func:`rfkernels.theory.oprf_optimal_a`). The
normalised term is
:math:`\exp((B a p_i - a^2/2) + (2A|\omega_i|^2 + \tfrac d2 \log(1 - 4A)))`,
:math:`B = \sqrt{1 - 4A}`, so it needs the rows' squared lengths too.
Formulas: ``docs/beyond.rst`` and :mod:`rfkernels.numerics.oprf_simplex`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..numerics import antithetic_mse as am
from ..numerics import elementary as elem
from ..numerics import oprf_simplex
from ..numerics.derf_fit import mean_pair_square
from ..numerics.elementary_numba import exp
from ..numerics.scalar import scalar
from ..numerics.term_form import TermForm
from ..validation import check_finite
from . import maps, pair_law, registry

#: The value of A that means "each pair's optimum A*".
AUTO = "auto"


@dataclass(frozen=True)
class OPRFParams:
    """OPRF's parameter: ``A`` a float or float64 array (< 1/8), or None for ``'auto'``."""

    A: object = None

    @property
    def auto(self):
        return self.A is None


def check_a(A, *, batch=False, required=False):
    """The one check of OPRF's A: ``'auto'``/None (unless ``required``), or finite numbers < 1/8.

    Returns a float (or, with ``batch``, a float64 array of any shape), or
    None for ``'auto'``. Every entry point that takes A goes through here.
    """
    if A is None or (isinstance(A, str) and A == AUTO):
        if required:
            raise ValueError("kind='oprf' needs its parameter A (< 1/8); e.g. "
                             "rfkernels.theory.oprf_optimal_a(x, y)")
        return None
    if isinstance(A, str):
        raise ValueError(f"A must be a float < 1/8 or 'auto'; got {A!r}")
    a = check_finite(A, "A")
    if a.ndim != 0 and not batch:
        raise ValueError(f"A must be one number < 1/8 (the OPRF parameter) or 'auto'; "
                         f"got shape {a.shape}")
    if np.any(a >= 0.125):
        raise ValueError(f"A must be < 1/8 (the OPRF second moment is infinite beyond); got {A!r}")
    return a if batch and a.ndim else float(a)


def check_params(values, *, batch):
    return OPRFParams(check_a(values.get("A"), batch=batch))


def resolve(params, geom):
    """The float A of one pair: as given, or the pair's ``A*`` where A is 'auto'.

    Without a geometry (``geom=None``: the engine's entries, which see only
    ``|x + y|``) an explicit A is required.
    """
    if params.auto:
        if geom is None:
            check_a(None, required=True)
        return float(oprf_simplex.oprf_optimal_a_from_geometry(geom))
    return float(params.A)


def constants(A, length, d):
    """``(slope, curvature, offset)`` = :math:`(B a, 2A, \\tfrac d2 \\log(1 - 4A))`."""
    return math.sqrt(1.0 - 4.0 * A) * length, 2.0 * A, 0.5 * d * math.log1p(-4.0 * A)


def tilt_slope(A):
    return math.sqrt(1.0 - 4.0 * A), A


def terms(p, w2, length, consts, xp):
    """The normalised terms (m, n) from the projections ``p`` and squared lengths ``w2``."""
    slope, curvature, offset = consts
    half = 0.5 * length * length
    return elem.exp((slope * p - half) + (curvature * w2 + offset), xp)


@scalar(inline="never")
def scalar_terms(length, slope, curvature, offset, m, d, chi, p, q):
    """p[i] <- exp((slope p_i - a^2/2) + (curvature |w_i|^2 + offset)), q[i] = |w_i|^2."""
    if not chi:
        for i in range(m):
            q[i] = float(d)
    half = 0.5 * length * length
    for i in range(m):
        p[i] = exp((slope * p[i] - half) + (curvature * q[i] + offset))


def fit(x, y):
    r"""``{"A": A*}`` fitted on a population: queries ``x`` (n, d) and keys ``y`` (n', d).

    ``A*`` of :func:`rfkernels.theory.oprf_optimal_a` at
    :math:`\rho = \operatorname{mean}_{i,j} |x_i + y_j|^2 / d`, which needs
    no pairs (:func:`rfkernels.numerics.derf_fit.mean_pair_square`, the
    centred form that does not cancel when the means are large and
    opposite), O((n + n') d). The inputs are finite float64 arrays, already
    checked (:func:`rfkernels.features.oprf_auto_a` checks them).
    """
    rho = mean_pair_square(x, y) / x.shape[1]
    if not np.isfinite(rho):
        raise FloatingPointError("oprf_auto_a: the mean |x + y|^2 overflows float64; rescale the inputs")
    return {"A": float(oprf_simplex.oprf_optimal_a(rho))}


def exponents(proj, w, A, xp):
    """``sqrt(1-4A) ω·x + A|ω|² + (d/4) log(1-4A)``: the OPRF exponent before ``-|x|²/2``."""
    d = w.shape[1]
    return (math.sqrt(1.0 - 4.0 * A) * proj + A * xp.sum(w * w, axis=1)[None, :]
            + (d / 4.0) * math.log1p(-4.0 * A))


def check_map_a(A):
    """A feature map's A: ``'auto'`` (fitted on the rows the map is given) or a float < 1/8."""
    if A is None:
        raise ValueError(MISSING_A)
    if isinstance(A, str) and A == AUTO:
        return A
    return check_a(A)  # the one check of A (a float < 1/8)


#: The error when a feature map of kind 'oprf' is not given A.
MISSING_A = ("kind='oprf' needs its parameter A: a float < 1/8 shared by every pair of inputs, "
             "or A='auto' (the optimal A* for the mean |x_i + y_j|^2 / d over all pairs, "
             "rfkernels.features.oprf_auto_a); got None")


#: The term, for the exact-MSE numerics: one exponential of w.(x + y) with A|w|^2.
TERM_FORM = TermForm(on_sum=True, symmetric=False, quadratic=True)


def log_mse(geom, m, est, vectors=None):
    cosine = pair_law.row_cosine(est.ensemble)
    out = oprf_simplex.log_mse(geom, m, TERM_FORM, cosine, est.params.A)
    if est.norms.coupled:  # the coupled pair term depends on A (MATH.md)
        return am.log_mse_antithetic(geom, m, TERM_FORM, cosine, out, est.params.A)
    return out


def theory_reason(ensemble, norms):
    return pair_law.chi_only_reason(ensemble, norms, "OPRF features", ("orthogonal",))


KIND = registry.register("kind", registry.Kind(
    name="oprf", code=3, seed_index=3,
    representation="positive",
    summary="optimal positive random features (parameter A < 1/8, default A* per pair)",
    features_per_projection=1, on_sum=True, paper=False, nonnegative=True,
    terms=terms, scalar_terms=scalar_terms, log_mse=log_mse, theory_reason=theory_reason,
    resolve=resolve, fixed_params=lambda A: OPRFParams(float(A)), constants=constants, tilt_slope=tilt_slope,
    needs_squared_norms=True, param_names=("A",), check_params=check_params, fit=fit,
    example=lambda d: {"A": -0.1},
    feature_map=maps.ExponentialMap(exponents, maps.MapParam(
        "A", check=check_map_a, fit=lambda x, y: fit(x, y)["A"], missing=MISSING_A)),
))
