"""rfkernels: how wrong a random-feature estimate of a kernel is, by exact theory and Monte Carlo.

Start at :func:`estimator`: ``rfkernels.estimator(kind, ensemble=..., norms=...,
m=..., d=...)`` checks a choice once and returns a frozen estimator with its
exact MSE (``.mse``), its Monte Carlo MSE beside it (``.monte_carlo``), what
it supports and why not (``.supports``) and one draw of its randomness
(``.draw(seed)``: features, estimates, attention; :mod:`rfkernels.front`).

The functions below it: projections (:func:`draw_projections`,
:func:`draw_phases`), feature maps (:func:`feature_map`, :func:`estimate`,
:func:`log_estimate`), the exact kernel (:func:`softmax_kernel`,
:func:`log_softmax_kernel`), the theory (:mod:`rfkernels.theory`), attention
(:func:`favor_attention`, :func:`softmax_attention`, :func:`linear_attention`
for the deterministic maps of :data:`FEATURE_MAPS`), scikit-learn
transformers (:class:`RandomFeatures`, :class:`RandomFourierFeatures`), the
DERF fit (:func:`fit_derf`) and the ranking of estimators at a feature budget
(:func:`rank_estimators`). The registry's lists: :data:`KINDS`,
:data:`ENSEMBLES`, :data:`NORMS`, :data:`KERNELS`, :data:`PRESETS`.
"""

import importlib

from .estimators import registry as _registry
from .attention import favor_attention, softmax_attention
from .features import estimate, feature_map, log_estimate
from .softmax import log_softmax_kernel, softmax_kernel
from .theory import pair
from .projections import draw_kind_projections, draw_phases, draw_projections

from .attention import linear_attention
from .features import FEATURE_MAPS, feature_dimension

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
    "draw_kind_projections",
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
#: front door sits above the analysis layer (``rfkernels.front``), the
#: transformers import scikit-learn.
_LAZY = {
    "estimator": "rfkernels.front",
    "FrozenEstimator": "rfkernels.front",
    "FrozenFeatureMap": "rfkernels.front",
    "RandomFeatures": "rfkernels.transformer",  # scikit-learn's base class: imported on use
    "RandomFourierFeatures": "rfkernels.fourier",
}


def __dir__():
    return sorted(set(globals()) | set(__all__))


def __getattr__(name):
    if name in _LISTS:
        return _LISTS[name]()
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
