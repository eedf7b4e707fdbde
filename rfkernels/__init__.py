"""rfkernels: variance of random-feature estimators of the softmax kernel.

Core layer: projection ensembles (:func:`draw_projections`), the three feature
maps (:func:`feature_map`, :func:`estimate`, :func:`log_estimate`), the exact
kernel (:func:`softmax_kernel`) and closed-form theory (:mod:`rfkernels.theory`).
"""

from ._validation import ENSEMBLES, KINDS, NORMS
from .features import estimate, feature_map, log_estimate, softmax_kernel
from .theory import pair
from .projections import draw_projections

__version__ = "0.1.0"

__all__ = [
    "ENSEMBLES",
    "KINDS",
    "NORMS",
    "draw_projections",
    "estimate",
    "feature_map",
    "log_estimate",
    "pair",
    "softmax_kernel",
    "__version__",
]
