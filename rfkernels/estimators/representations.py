r"""The representations of the softmax kernel that the registered kinds sample (MATH.md, "The variance floor").

- ``"positive"``: :math:`\varphi(x, \omega) = e^{\omega\cdot x - |x|^2/2}`
  (FAVOR+, OPRF with one A, SDERF; the DERF family on its transformed pairs);
  :math:`g_p\,\Omega = N(u_p, I)`.
- ``"pairing"``: the pair :math:`(\omega, -\omega)`,
  :math:`\varphi = (e^{\omega\cdot x}, e^{-\omega\cdot x})\,e^{-|x|^2/2}/\sqrt2`
  (the hyperbolic kind), two features per draw;
  :math:`g_p\,\Omega = \tfrac12 N(u_p, I) + \tfrac12 N(-u_p, I)`.
- ``"trig"``: :math:`\varphi = e^{|x|^2/2}(\cos, \sin)(\omega\cdot x)`, two
  features per draw; :math:`g_p = \cos(\omega\cdot z_p)\,e^{|z_p|^2/2}` changes
  sign, so its floor samples :math:`\Omega` itself (the integrand is bounded).
"""

from __future__ import annotations

import math

import numpy as np

from . import registry

_LOG_HALF_SQRT = -0.5 * math.log(2.0)


def _positive(proj, half_sq):
    return [(proj - half_sq, None)]


def _pairing(proj, half_sq):
    return [(proj - half_sq + _LOG_HALF_SQRT, None), (-proj - half_sq + _LOG_HALF_SQRT, None)]


def _trig(proj, half_sq):
    out = []
    for part in (np.cos(proj), np.sin(proj)):
        with np.errstate(divide="ignore"):
            out.append((np.log(np.abs(part)) + half_sq, np.sign(part)))
    return out


POSITIVE = registry.register("representation", registry.Representation(
    name="positive", summary="exp(w.x - |x|^2/2): FAVOR+, OPRF, SDERF, DERF on its transformed pairs",
    features_per_draw=1, components=_positive, tilt_signs=(1.0,)))
PAIRING = registry.register("representation", registry.Representation(
    name="pairing", summary="the pair (w, -w) of the positive map: hyperbolic features",
    features_per_draw=2, components=_pairing, tilt_signs=(1.0, -1.0)))
TRIG = registry.register("representation", registry.Representation(
    name="trig", summary="exp(|x|^2/2) (cos, sin)(w.x): trigonometric features",
    features_per_draw=2, components=_trig))
