"""Analysis layer (installed as ``rfkernels.analysis``): Monte Carlo against theory.

- :mod:`~rfkernels.analysis.monte_carlo` measures the MSE of an estimator by
  Monte Carlo, with error bars and a tail diagnostic, beside the exact theory;
- :mod:`~rfkernels.analysis.comparison` tabulates theory against Monte Carlo and
  audits the bias of the orthogonal constructions;
- :mod:`~rfkernels.analysis.sweep` runs resumable grids locally or on Dask;
- :mod:`~rfkernels.analysis.attention` is the attention-level study
  (Figure 4 of the Performer paper), with the deterministic feature maps;
- :mod:`~rfkernels.analysis.diagnosis` diagnoses random-feature attention on
  the user's own queries, keys and values (:func:`diagnose`);
- :mod:`~rfkernels.analysis.capacity` measures the memory capacity of linear
  attention (how many key/value pairs a feature map stores).
"""

from .attention import (
    AttentionMSETable,
    AttentionRegime,
    FeatureMapMSETable,
    attention_inputs,
    attention_mse,
    attention_regime,
    attention_regime_from_tables,
    feature_map_attention_mse,
    local_slopes,
    study_inputs,
)
from .attention_theory import FirstOrderMSE, attention_mse_first_order
from .capacity import CapacityResult, FeatureMapSpec, capacity, parse_map
from .comparison import bias_audit, compare, evaluate_point
from .diagnosis import Diagnosis, LoadedQKV, diagnose, load_qkv, synthetic_qkv
from .monte_carlo import (
    METHODS,
    MonteCarloBatch,
    MonteCarloResult,
    TailDiagnostic,
    monte_carlo_mse,
    pareto_k_hat,
    trial_estimates,
)
from .sweep import SweepError, SweepIOError, SweepSpec, load_table, run_sweep

__all__ = [
    "METHODS",
    "AttentionMSETable",
    "AttentionRegime",
    "CapacityResult",
    "Diagnosis",
    "FeatureMapMSETable",
    "FeatureMapSpec",
    "FirstOrderMSE",
    "LoadedQKV",
    "MonteCarloBatch",
    "MonteCarloResult",
    "SweepError",
    "SweepIOError",
    "SweepSpec",
    "TailDiagnostic",
    "attention_inputs",
    "attention_mse",
    "attention_mse_first_order",
    "attention_regime",
    "attention_regime_from_tables",
    "bias_audit",
    "capacity",
    "compare",
    "diagnose",
    "evaluate_point",
    "feature_map_attention_mse",
    "load_qkv",
    "load_table",
    "local_slopes",
    "monte_carlo_mse",
    "pareto_k_hat",
    "parse_map",
    "run_sweep",
    "study_inputs",
    "synthetic_qkv",
    "trial_estimates",
]


def __getattr__(name):  # the deprecated Monte Carlo entry points (CHANGELOG.md)
    from . import monte_carlo

    return monte_carlo.mse.deprecated(name, __name__)
