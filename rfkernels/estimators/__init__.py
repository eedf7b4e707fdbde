"""Estimators as values: a registry of kinds, ensembles, norm laws and target kernels,
and the frozen, validated :class:`Estimator` every layer passes down.

- :mod:`.registry`: the axes and their entry types (:class:`Kind`,
  :class:`Ensemble`, :class:`NormLaw`, :class:`TargetKernel`);
- one module per kind (:mod:`.trig`, :mod:`.positive`, :mod:`.hyperbolic`,
  :mod:`.oprf`, :mod:`.offset`, :mod:`.derf`, :mod:`.tilted`, :mod:`.hybrid`), the ensembles (:mod:`.ensembles`), the norm laws
  (:mod:`.norms`) and the target kernels (:mod:`.kernels`), each entry
  registering itself on import (here, in this order: the order of
  :func:`names`);
- :mod:`.spec`: :func:`estimator`, the one place a choice is checked, and
  the :class:`Estimator` with its capabilities.

``docs/architecture.rst`` has the recipe for adding an entry.
"""

from __future__ import annotations

from . import registry
from . import trig, positive, hyperbolic, oprf, offset  # noqa: F401  (kinds, in the order of KINDS)
from . import derf  # noqa: F401  (derf, saderf, aderf, sderf: after KINDS)
from . import tilted  # noqa: F401  (data-tilted positive features: after the DERF kinds)
from . import hybrid  # noqa: F401  (angular hybrid features: after data-tilted)
from . import representations  # noqa: F401  (positive, pairing, trig)
from . import ensembles, kernels, norms  # noqa: F401
from .registry import (
    Ensemble,
    Kind,
    NormLaw,
    TargetKernel,
    check_ensemble,
    check_kind,
    check_norms,
    entry,
    names,
    register,
    unregister,
)
from .spec import Capability, Estimator, Supports, as_estimator, estimator

__all__ = [
    "Capability",
    "Supports",
    "as_estimator",
    "Ensemble",
    "Estimator",
    "Kind",
    "NormLaw",
    "TargetKernel",
    "check_ensemble",
    "check_kind",
    "check_norms",
    "entry",
    "estimator",
    "names",
    "register",
    "registry",
    "unregister",
]
