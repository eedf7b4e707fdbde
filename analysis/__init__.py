"""Analysis layer (installed as ``rfkernels.analysis``): Monte Carlo against theory.

:mod:`rfkernels.analysis.monte_carlo` measures the MSE of an estimator by
Monte Carlo, with error bars and a tail diagnostic, beside the exact theory.
"""

from .monte_carlo import (
    METHODS,
    MonteCarloBatch,
    MonteCarloResult,
    TailDiagnostic,
    monte_carlo_mse,
    monte_carlo_mse_batch,
    pareto_k_hat,
    trial_estimates,
)

__all__ = [
    "METHODS",
    "MonteCarloBatch",
    "MonteCarloResult",
    "TailDiagnostic",
    "monte_carlo_mse",
    "monte_carlo_mse_batch",
    "pareto_k_hat",
    "trial_estimates",
]
