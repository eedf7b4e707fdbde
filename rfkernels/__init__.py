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

import importlib

from .estimators import registry as _registry
from .attention import favor_attention, softmax_attention
from .features import estimate, feature_map, log_estimate
from .softmax import log_softmax_kernel, softmax_kernel
from .theory import pair
from .projections import draw_phases, draw_projections

from .attention import linear_attention
from .features import FEATURE_MAPS, feature_dimension
from .transformer import RandomFeatures
from .fourier import RandomFourierFeatures

from .estimators.derf import fit_derf
from .ranking import rank_estimators
from .version import __version__

__all__ = [
    "ENSEMBLES",
    "KERNELS",
    "KINDS",
    "NORMS",
    "PAPER_KINDS",
    "PRESETS",
    "RandomFeatures",
    "RandomFourierFeatures",
    "draw_phases",
    "draw_projections",
    "estimate",
    "estimator",
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
    "FrozenEstimator",
    "FrozenFeatureMap",
    "feature_dimension",
    "linear_attention",
]

#: The lists users read, asked of the registry when read (so a kind registered
#: later is in them): ``KINDS`` (every registered kind), ``PAPER_KINDS`` (the
#: Performer paper's three), ``ENSEMBLES``, ``NORMS``, ``KERNELS``, ``PRESETS``.
_LISTS = {
    "KINDS": lambda: _registry.names("kind"),
    "PAPER_KINDS": lambda: tuple(k.name for k in _registry.entries("kind") if k.paper),
    "ENSEMBLES": lambda: _registry.names("ensemble"),
    "NORMS": lambda: _registry.names("norms"),
    "KERNELS": lambda: _registry.names("kernel"),
    "PRESETS": lambda: _registry.names("preset"),
}


#: Names imported on first use, so that ``import rfkernels`` stays light: the
#: front door sits above the analysis layer (``rfkernels.front``).
_LAZY = {
    "estimator": "rfkernels.front",
    "FrozenEstimator": "rfkernels.front",
    "FrozenFeatureMap": "rfkernels.front",
}


def __getattr__(name):
    if name in _LISTS:
        return _LISTS[name]()
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
