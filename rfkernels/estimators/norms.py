"""The row-norm laws (the pair law's second half): chi(d), fixed sqrt(d) or antithetic chi(d) lengths."""

from __future__ import annotations

from . import registry

CHI = registry.register("norms", registry.NormLaw(
    name="chi", summary="chi(d) row norms: every row marginally N(0, I_d) (unbiased)", chi=True))

FIXED = registry.register("norms", registry.NormLaw(
    name="fixed", summary="every row of length sqrt(d) (the regularised, biased variant)",
    chi=False))

ANTITHETIC = registry.register("norms", registry.NormLaw(
    name="antithetic",
    summary=("chi(d) row norms coupled in pairs (1, 2), (3, 4), ... of each block, "
             "R2 = F^-1(1 - F(R1)) (Reid et al. 2025): unbiased, lower variance"),
    chi=True, coupled=True, ensembles=("orthogonal", "simplex"),
    ensemble_reason=("antithetic norms pair the rows of an orthogonal or simplex block; "
                     "iid rows have no blocks (and the structured or reference ensembles "
                     "have no exact chi(d) law to couple)"),
    tilt_reason=("proposal='tilted' does not take norms='antithetic': its weights are those "
                 "of independent chi(d) norms; use proposal='plain' (or norms='chi')")))
