r"""Kind ``"offset"``: random-offset Fourier features, scikit-learn's ``RBFSampler`` map.

One output per projection, :math:`\varphi(x)_i = e^{|x|^2/2} \sqrt{2/m} \cos(\omega_i \cdot x + b_i)`
with phases :math:`b_i \sim U[0, 2\pi)` independent of the projections
(for the Gaussian kernel the factor :math:`e^{|x'|^2/2}` cancels and this is
``RBFSampler``'s :math:`\sqrt{2/m} \cos(\omega_i \cdot x' + b_i)`). Since
:math:`2 \cos\alpha \cos\beta = \cos(\alpha - \beta) + \cos(\alpha + \beta)`,
the normalised term of projection i is

.. math:: \cos(a p_i) + \cos(\omega_i \cdot (x + y) + 2 b_i), \qquad a = |x - y|,

the trig term plus a phase term which, given :math:`\omega_i`, is the cosine
of a uniform angle: mean 0, variance 1/2, uncorrelated with every other
term. So for every ensemble and norm law (MATH.md, "The Gaussian (RBF)
kernel")

.. math:: \mathrm{MSE}_{offset}(m) = \mathrm{MSE}_{trig}(m) + \frac{\Lambda^{-2}}{2m},
    \qquad \Lambda^{-2} = e^{|x|^2 + |y|^2},

i.e. ``+ 1/(2m)`` for the Gaussian kernel. The engine draws the phase term
as :math:`\cos(2\pi U_i)` (its law, exactly) from its own counter stream:
the kernels are trig's with a runtime flag (:attr:`Kind.random_phase`).
"""

from __future__ import annotations

import math

import numpy as np

from . import maps, registry, trig


def log_mse(geom, m, est, vectors=None):
    """``log(MSE_trig + e^{2 half_sq} / (2m))`` (the phase term's variance, scaled)."""
    log_trig = trig.KIND.log_mse(geom, m, est, vectors)
    with np.errstate(divide="ignore"):
        return np.logaddexp(log_trig, 2.0 * geom.half_sq - np.log(2.0 * np.asarray(m, dtype=np.float64)))


def features(proj, w, half_sq, shift, value, phase, xp):
    """RBFSampler's :math:`\\sqrt{2/m} \\cos(\\omega^\\top x + b)`, times :math:`e^{|x|^2/2}`; in place on ``proj``."""
    m = proj.shape[1]
    proj += phase[None, :]
    xp.cos(proj, out=proj)
    proj *= xp.exp(half_sq + shift) * math.sqrt(2.0 / m)
    return proj


def mean_product(px, py, phase, xp):
    """:math:`\\frac2m \\sum_l \\cos(\\omega_l^\\top x + b_l) \\cos(\\omega_l^\\top y + b_l)`."""
    m = px.shape[1]
    return (2.0 / m) * (xp.cos(px + phase[None, :]) @ xp.cos(py + phase[None, :]).T)


#: Why attention does not take offset features.
ATTENTION_REASON = ("scikit-learn's RBFSampler map for kernel machines, whose features need the "
                    "phases drawn with W, which attention does not take; use kind='trig' (the same "
                    "kernel without the phase term's variance)")

KIND = registry.register("kind", registry.Kind(
    name="offset", seed_index=4,
    summary="random-offset Fourier features sqrt(2) cos(w.x + b) (RBFSampler; m outputs)",
    features_per_projection=1, on_sum=False, paper=False, nonnegative=False,
    terms=trig.terms, scalar_terms=trig.scalar_terms, random_phase=True,
    feature_map=maps.SignedMap(features, mean_product, attention_reason=ATTENTION_REASON),
    log_mse=log_mse, theory_reason=trig.KIND.theory_reason,
    tilt_reason=("proposal='tilted' is for positive, hyperbolic and oprf features: offset "
                 "estimates are bounded (|cos| <= 1), their squared errors have every moment, and "
                 "there is no heavy tail to tilt toward; use proposal='plain' or 'auto'"),
))
