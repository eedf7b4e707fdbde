"""The row-norm laws (the pair law's second half): chi(d) or fixed sqrt(d) lengths."""

from __future__ import annotations

from . import registry

CHI = registry.register("norms", registry.NormLaw(
    name="chi", summary="chi(d) row norms: every row marginally N(0, I_d) (unbiased)", chi=True))

FIXED = registry.register("norms", registry.NormLaw(
    name="fixed", summary="every row of length sqrt(d) (the regularised, biased variant)",
    chi=False))
