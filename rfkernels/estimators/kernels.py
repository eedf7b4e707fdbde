r"""Target kernels, as rescalings of the softmax kernel exp(x.y).

Every target here is :math:`K(x, y) = e^{\ell(x', y')} SM(x', y')` with
:math:`x' = c x`, :math:`y' = c y`: the softmax estimators at ``(x', y')``
estimate it after one factor, so their relative errors are those of the
softmax estimator at the scaled pair and their MSE is multiplied by
:math:`e^{2\ell}` (MATH.md, "The Gaussian (RBF) kernel").

- ``"softmax"``: :math:`SM(x, y) = e^{x \cdot y}`, c = 1, :math:`\ell = 0`.
- ``"gaussian"``: :math:`K_\gamma(x, y) = e^{-\gamma |x - y|^2}` (scikit-learn's
  convention, ``gamma`` > 0), :math:`c = \sqrt{2\gamma}`,
  :math:`\ell = -(|x'|^2 + |y'|^2)/2`.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from ..validation import check_real
from . import registry


@dataclass(frozen=True)
class GaussianParams:
    """The Gaussian kernel's ``gamma`` (a finite float > 0)."""

    gamma: float

    @property
    def scale(self):
        """``c = sqrt(2 gamma)``: the inputs' scaling to the softmax kernel."""
        return math.sqrt(2.0 * self.gamma)


def check_gamma(gamma):
    """The one check of the Gaussian kernel's ``gamma``: one finite real number > 0, as a float."""
    if gamma is None:
        raise ValueError("kernel='gaussian' needs gamma > 0 (K(x, y) = exp(-gamma |x - y|^2)); "
                         "got None")
    if isinstance(gamma, (bool, np.bool_)) or isinstance(gamma, str):
        raise TypeError(f"gamma must be a finite number > 0; got {gamma!r}")
    if isinstance(gamma, numbers.Number) or isinstance(gamma, np.ndarray):
        arr = check_real(gamma, "gamma")  # complex: "Complex data not supported"
    else:
        raise TypeError(f"gamma must be a finite number > 0; got {gamma!r}")
    if arr.ndim != 0 or not np.isfinite(arr) or not arr > 0:
        raise ValueError(f"gamma must be one finite number > 0; got {gamma!r}")
    if not math.isfinite(2.0 * float(arr)):  # the scale sqrt(2 gamma) must exist
        raise ValueError(f"gamma must be below 8.9e307 (2 gamma overflows float64); got {gamma!r}")
    return float(arr)


def _softmax_params(values):
    return None


def _gaussian_params(values):
    return GaussianParams(check_gamma(values.get("gamma")))


SOFTMAX = registry.register("kernel", registry.TargetKernel(
    name="softmax", summary="SM(x, y) = exp(x.y)",
    scale=lambda params: 1.0, log_factor=lambda half_sq: 0.0,
    check_params=_softmax_params))

GAUSSIAN = registry.register("kernel", registry.TargetKernel(
    name="gaussian", summary="K(x, y) = exp(-gamma |x - y|^2) (scikit-learn's RBF convention)",
    scale=lambda params: params.scale, log_factor=lambda half_sq: -half_sq,
    check_params=_gaussian_params, param_names=("gamma",)))
