"""The row-norm laws (the pair law's second half): chi(d), fixed sqrt(d) or antithetic chi(d) lengths.

Each entry carries its whole-matrix sampler (:attr:`NormLaw.with_lengths`,
what :func:`rfkernels.draw_projections` calls after the ensemble's
directions); the reduced engine reads the flags ``chi`` and ``coupled``.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from ..numerics import chi_quantile
from . import registry


def _unit_rows(a):
    """The rows of ``a`` scaled to length 1 (a zero row stays 0: it has no direction)."""
    length = np.linalg.norm(a, axis=-1, keepdims=True)
    return a / np.where(length > 0, length, 1.0)


def _scaled(rows, squared, unit):
    """Unit ``rows`` (made unit first unless ``unit``) times the square roots of ``squared``."""
    return (rows if unit else _unit_rows(rows)) * np.sqrt(squared)[:, np.newaxis]


def antithetic_squared_norms(m, d, rng):
    r"""Squared antithetic chi(d) norms of m rows in blocks of d, drawn from the Generator ``rng``.

    Rows ``(2k, 2k+1)`` of each block share one uniform u:
    :math:`R^2 = 2\,\mathrm{gammaincinv}(d/2, u)` and
    :math:`2\,\mathrm{gammainccinv}(d/2, u)` (the quantile at 1 - u), SciPy's
    exact quantiles (:func:`rfkernels.numerics.chi_quantile.pairing` says
    which rows share); an odd block's last row has its own u.
    """
    units, row_unit, row_sign = chi_quantile.pairing(m, d)
    # cell midpoints of 2**53 cells: in (0, 1), so neither quantile is infinite
    u = ((rng.integers(0, 2**53, size=units, dtype=np.int64) + 0.5) * 2.0**-53)[row_unit]
    half = 0.5 * d
    return np.where(row_sign > 0, 2.0 * special.gammaincinv(half, u), 2.0 * special.gammainccinv(half, u))


def _chi_lengths(rows, d, rng, unit=True):
    """Independent chi(d) lengths: m chi-square(d) variates from ``rng``."""
    return _scaled(rows, rng.chisquare(d, size=rows.shape[0]), unit)


def _fixed_lengths(rows, d, rng, unit=True):
    """Every row of length sqrt(d) (nothing drawn)."""
    return np.sqrt(d) * _unit_rows(rows)


def _antithetic_lengths(rows, d, rng, unit=True):
    """Antithetic chi(d) lengths of the rows' blocks of d (:func:`antithetic_squared_norms`)."""
    return _scaled(rows, antithetic_squared_norms(rows.shape[0], d, rng), unit)


CHI = registry.register("norms", registry.NormLaw(
    name="chi", summary="chi(d) row norms: every row marginally N(0, I_d) (unbiased)", chi=True,
    with_lengths=_chi_lengths))

FIXED = registry.register("norms", registry.NormLaw(
    name="fixed", summary="every row of length sqrt(d) (the regularised, biased variant)",
    chi=False, with_lengths=_fixed_lengths))

ANTITHETIC = registry.register("norms", registry.NormLaw(
    name="antithetic",
    summary=("chi(d) row norms coupled in pairs (1, 2), (3, 4), ... of each block, "
             "R2 = F^-1(1 - F(R1)) (Reid et al. 2025): unbiased, lower variance"),
    chi=True, coupled=True, ensembles=("orthogonal", "simplex"),
    ensemble_reason=("antithetic norms pair the rows of an orthogonal or simplex block; "
                     "iid rows have no blocks (and the structured or reference ensembles "
                     "have no exact chi(d) law to couple)"),
    tilt_reason=("proposal='tilted' does not take norms='antithetic': its weights are those "
                 "of independent chi(d) norms; use proposal='plain' (or norms='chi')"),
    with_lengths=_antithetic_lengths))
