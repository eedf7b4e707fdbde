"""Analysis layer (installed as ``rfkernels.analysis``): Monte Carlo against theory.

- :mod:`~rfkernels.analysis.monte_carlo` measures the MSE of an estimator by
  Monte Carlo, with error bars and a tail diagnostic, beside the exact theory;
- :mod:`~rfkernels.analysis.comparison` tabulates theory against Monte Carlo and
  audits the bias of the orthogonal constructions;
- :mod:`~rfkernels.analysis.sweep` runs resumable grids locally or on Dask;
- :mod:`~rfkernels.analysis.attention` is the attention-level study
  (Figure 4 of the Performer paper), with the deterministic feature maps;
- :mod:`~rfkernels.analysis.capacity` measures the memory capacity of linear
  attention (how many key/value pairs a feature map stores).
"""

from .monte_carlo import (
    METHODS,
    MonteCarloBatch,
    MonteCarloResult,
    TailDiagnostic,
    monte_carlo_mse,
    monte_carlo_mse_batch,
    monte_carlo_mse_from_geometry,
    pareto_k_hat,
    trial_estimates,
)

from .attention import AttentionMSETable, attention_inputs, attention_mse
from .comparison import bias_audit, compare, evaluate_point
from .sweep import SweepError, SweepIOError, SweepSpec, load_table, run_sweep
from .attention import FeatureMapMSETable, feature_map_attention_mse
from .capacity import CapacityResult, FeatureMapSpec, capacity, parse_map

__all__ = [
    "AttentionMSETable",
    "SweepError",
    "SweepIOError",
    "SweepSpec",
    "attention_inputs",
    "attention_mse",
    "bias_audit",
    "compare",
    "evaluate_point",
    "load_table",
    "run_sweep",
    "METHODS",
    "MonteCarloBatch",
    "MonteCarloResult",
    "TailDiagnostic",
    "monte_carlo_mse",
    "monte_carlo_mse_batch",
    "monte_carlo_mse_from_geometry",
    "pareto_k_hat",
    "trial_estimates",
    "FeatureMapMSETable",
    "feature_map_attention_mse",
    "CapacityResult",
    "FeatureMapSpec",
    "capacity",
    "parse_map",
]
