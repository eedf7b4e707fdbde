"""How a kind's per-feature moments and pair terms make the exact MSE, per pair law.

``MSE = bias^2 + (m V + P C) / m^2``: ``V`` the variance of one term, ``C``
the covariance of two terms of one block, ``P`` the ordered pairs sharing a
block (:func:`rfkernels.numerics.closed_form.pairs_in_blocks`). The pair law is the
ensemble's coupling of two rows (independent, orthogonal, simplex) with the
norm law's coupling of their lengths (chi, fixed or antithetic: :mod:`rfkernels.numerics.antithetic_mse`). The numerics are in
:mod:`rfkernels.numerics.closed_form` (iid and orthogonal, chi and fixed norms, the
paper's kinds) and :mod:`rfkernels.numerics.beyond` (OPRF, simplex); this
module says which applies. Nothing here validates: the estimator is.
"""

from __future__ import annotations

import numpy as np

from ..numerics import antithetic_mse as am
from ..numerics import beyond as bt
from ..numerics import closed_form as cf


def chi_only_reason(ensemble, norms, what, coupled=()):
    """The reason a chi-norm-only theory gives for other norms (None where it applies).

    ``coupled``: the ensembles whose antithetic-norm theory exists for this kind.
    """
    if not norms.chi:
        return (f"norms='fixed' has no exact theory for {what}: they are defined with chi(d) norms "
                "(every row marginally N(0, I_d)); use norms='chi'")
    if norms.coupled and ensemble.name not in coupled:
        return (f"norms={norms.name!r} has no exact theory for {what} with ensemble="
                f"{ensemble.name!r} (Monte Carlo only)")
    return None


def paper_theory_reason(ensemble, norms):
    """The paper's kinds: every pair law but simplex with fixed norms (antithetic norms: both blocks)."""
    if ensemble.name == "simplex":
        return chi_only_reason(ensemble, norms, "simplex random features", ("simplex",))
    return None


def paper_log_mse(kind_name):
    """``log_mse(geom, m, est)`` of one of the paper's kinds (their closed forms share one shape)."""

    def log_mse(geom, m, est, vectors=None):
        if est.ensemble.name == "simplex":
            out = bt.log_mse_beyond(geom, m, kind_name, "simplex", None)
        else:
            pairs = cf.pairs_in_blocks(m, geom.d.astype(np.int64), est.ensemble.name)
            with np.errstate(over="ignore"):
                if est.norms.chi:
                    out = cf.log_mse_chi(geom, m, kind_name, pairs)
                else:
                    return cf.log_mse_fixed(geom, m, kind_name, pairs)
        if est.norms.coupled:
            return am.log_mse_antithetic(geom, m, kind_name, est.ensemble.name, out)
        return out

    log_mse.__name__ = f"{kind_name}_log_mse"
    return log_mse
