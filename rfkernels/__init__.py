"""rfkernels: variance of random-feature estimators of the softmax kernel.

Core layer: projection ensembles (:func:`draw_projections`), the three feature
maps (:func:`feature_map`, :func:`estimate`, :func:`log_estimate`), the exact
kernel (:func:`softmax_kernel`, :func:`log_softmax_kernel`), closed-form theory (:mod:`rfkernels.theory`),
FAVOR and exact attention (:func:`favor_attention`, :func:`softmax_attention`)
the counter-based generator (:mod:`rfkernels.rng`), and a scikit-learn style
transformer (:class:`RandomFeatures`). Beyond the paper: optimal positive
features (kind ``"oprf"``), simplex and SORF ensembles (``docs/beyond.rst``); the
Gaussian kernel (``kernel="gaussian"``), random-offset features (kind
``"offset"``, :func:`draw_phases`) and :class:`RandomFourierFeatures` (``docs/gaussian.rst``);
dense-exponential features (kinds ``"derf"``, ``"saderf"``, ``"aderf"``, ``"sderf"``,
:func:`fit_derf`, ``docs/derf.rst``).
Which estimator for a budget of r outputs: :func:`rank_estimators` (every
registered estimator's exact MSE, ranked; ``docs/ranking.rst``).
The deterministic feature maps of linear attention (:data:`FEATURE_MAPS`:
identity, ELU+1, DPFP-ν) go through :func:`feature_map` with ``W=None`` and
:func:`linear_attention`.
"""

from .validation import ENSEMBLES, KINDS, NORMS, PAPER_KINDS
from .attention import favor_attention, softmax_attention
from .features import estimate, feature_map, log_estimate
from .softmax import log_softmax_kernel, softmax_kernel
from .theory import pair
from .projections import draw_phases, draw_projections

from .attention import linear_attention
from .features import FEATURE_MAPS, feature_dimension
from .transformer import RandomFeatures
from .fourier import RandomFourierFeatures

from .numerics.derf_fit import fit as fit_derf
from .ranking import rank_estimators
from .version import __version__

__all__ = [
    "ENSEMBLES",
    "KINDS",
    "NORMS",
    "PAPER_KINDS",
    "RandomFeatures",
    "RandomFourierFeatures",
    "draw_phases",
    "draw_projections",
    "estimate",
    "favor_attention",
    "feature_map",
    "fit_derf",
    "log_estimate",
    "log_softmax_kernel",
    "pair",
    "rank_estimators",
    "softmax_attention",
    "softmax_kernel",
    "__version__",
    "FEATURE_MAPS",
    "feature_dimension",
    "linear_attention",
]
