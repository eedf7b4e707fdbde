"""How a kind's per-feature moments and pair terms make the exact MSE, per pair law.

``MSE = bias^2 + (m V + P C) / m^2``: ``V`` the variance of one term, ``C``
the covariance of two terms of one block, ``P`` the ordered pairs sharing a
block (:func:`rfkernels.numerics.closed_form.pairs_in_blocks`). The pair law is the
ensemble's coupling of two rows (independent, or blocks whose rows are at the
cosine :attr:`Ensemble.cosine <rfkernels.estimators.registry.Ensemble.cosine>`)
with the norm law's coupling of their lengths (chi, fixed or antithetic:
:mod:`rfkernels.numerics.antithetic_mse`). The numerics are in
:mod:`rfkernels.numerics.closed_form` (independent and orthogonal rows, chi
and fixed norms, the paper's kinds) and :mod:`rfkernels.numerics.oprf_simplex`
(OPRF, rows at another cosine: simplex); they take the kind's
:class:`~rfkernels.numerics.term_form.TermForm` and the ensemble's cosine,
never a name. This module says which applies. Nothing here validates: the
estimator is.
"""

from __future__ import annotations

import numpy as np

from ..numerics import antithetic_mse as am
from ..numerics import closed_form as cf
from ..numerics import oprf_simplex


def row_cosine(ensemble):
    """The numerics' pair law of an ensemble entry: ``cosine(d)`` of two rows of a block, or None.

    None for independent rows (no blocks); the ensemble's ``cosine``
    callable for blocked rows. An ensemble without an exact theory (its
    :attr:`~rfkernels.estimators.registry.Ensemble.theory_reason`), or blocks
    without a fixed cosine, raise ValueError with the reason.
    """
    if ensemble.theory_reason:
        raise ValueError(ensemble.theory_reason)
    if not ensemble.blocked:
        return None
    if ensemble.cosine is None:
        raise ValueError(f"ensemble={ensemble.name!r} has blocks but no fixed cosine between their "
                         "rows: no exact theory (Monte Carlo only)")
    return ensemble.cosine


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


def paper_log_mse(form):
    """``log_mse(geom, m, est)`` of one of the paper's kinds, whose term has the TermForm ``form``.

    Independent and orthogonal rows: the closed forms (chi and fixed norms);
    rows at another cosine (simplex): the quadrature (chi norms); antithetic
    norms add the coupled pairs' change to the chi-norm MSE.
    """

    def log_mse(geom, m, est, vectors=None):
        cosine = row_cosine(est.ensemble)
        if not cf.orthogonal_rows(cosine, geom.d):
            out = oprf_simplex.log_mse(geom, m, form, cosine, None)
        else:
            pairs = cf.pairs_in_blocks(m, geom.d.astype(np.int64), blocked=cosine is not None)
            with np.errstate(over="ignore"):
                if est.norms.chi:
                    out = cf.log_mse_chi(geom, m, form, pairs)
                else:
                    return cf.log_mse_fixed(geom, m, form, pairs)
        if est.norms.coupled:
            return am.log_mse_antithetic(geom, m, form, cosine, out)
        return out

    return log_mse
