r"""The chi-square quantile as a function of a normal variate: the antithetic norms' table.

Antithetic norms (``norms="antithetic"``, Reid et al. 2025) pair two rows of
a block with :math:`R_1 = F^{-1}(p)`, :math:`R_2 = F^{-1}(1 - p)`, F the
chi(d) cdf. The samplers draw :math:`p = \Phi(z)` as a standard normal z,
so that :math:`1 - p = \Phi(-z)` and both squared norms are

.. math:: R_1^2 = Q(z), \qquad R_2^2 = Q(-z), \qquad
          Q(t) = 2\,\mathrm{gammaincinv}(d/2, \Phi(t)),

one normal per pair. :func:`quantile_table` tabulates :math:`\log Q` on the
grid :math:`t_k = -T + k h`, ``T =`` :data:`T_MAX`, ``h = 1/``:data:`PER_UNIT`,
with its exact derivative
:math:`(\log Q)' = \varphi(t) / (Q f_d(Q))` (:math:`f_d` the chi-square
density), as the coefficients of the cubic Hermite interpolant of each
interval; :func:`log_quantile` evaluates it (the Numba and CUDA kernels
evaluate the same coefficients in the same order,
:func:`rfkernels.engine.rng_numba.log_chi_square_quantile`). Both tails are
taken from :math:`\min(p, 1-p)` (``gammaincinv`` below the median,
``gammainccinv`` above), so neither loses accuracy. A Box--Muller normal of
the engine's generator lies in :math:`|z| \le \sqrt{106 \ln 2} \approx 8.57`
(its uniforms are at least :math:`2^{-53}`); ``T = 8.75`` covers that, and
the evaluation clamps beyond.

Accuracy: the relative error of :math:`Q` is at most 6.0e-11 at d = 1,
2.0e-11 at d = 2, 9.7e-12 at d = 3, 4.1e-13 at d = 16 and 1.6e-14 at
d = 64, measured over 300,000 points of [-8.6, 8.6] against SciPy's
``gammaincinv`` (``tests/test_antithetic_norms.py::test_table_accuracy``
asserts the bound :data:`REL_ERROR` for d in {1, 2, 3, 16, 64, 1024}).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np
from scipy import special

from ..validation import check_int
from . import elementary as elem

#: The table covers t in [-T_MAX, T_MAX].
T_MAX = 8.75
#: Grid points per unit of t (h = 1 / PER_UNIT).
PER_UNIT = 64.0
#: Intervals of the table.
INTERVALS = int(2 * T_MAX * PER_UNIT)
#: The stated bound on the relative error of Q (every d; the worst is d = 1).
REL_ERROR = 1e-10


def pairing(m, d):
    """``(units, row_unit, row_sign)``: how m rows in blocks of d share the antithetic variates.

    Row ``i0 + 2k`` of the block starting at row ``i0 = j d`` takes unit
    ``j ceil(d/2) + k`` with sign +1 and row ``i0 + 2k + 1`` the same unit
    with sign -1 (its norm is the antithetic one); an odd block's last row
    has a unit of its own. The units of the blocks are contiguous (only the
    last block is partial), ``units`` in all.
    """
    half = (d + 1) // 2
    rows = np.arange(m)
    within = rows % d
    row_unit = (rows // d) * half + within // 2
    row_sign = np.where(within % 2 == 0, 1.0, -1.0)
    return int(row_unit[-1]) + 1, row_unit, row_sign


def exact_log_quantile(t, d):
    r""":math:`\log Q(t)` by SciPy: ``log(2 gammaincinv(d/2, Phi(t)))``, each tail from its own side."""
    t = np.asarray(t, dtype=np.float64)
    half = 0.5 * d
    p = special.ndtr(-np.abs(t))
    lower = 2.0 * special.gammaincinv(half, p)
    upper = 2.0 * special.gammainccinv(half, p)
    return np.log(np.where(t < 0.0, lower, upper))


@lru_cache(maxsize=32)
def quantile_table(d):
    """The (4, INTERVALS) coefficients ``(y0, m0, c2, c3)`` of each interval, for chi(d) (read-only).

    On interval k, with ``s`` in [0, 1], ``log Q = y0 + s (m0 + s (c2 + s c3))``.
    """
    d = check_int(d, "d")
    h = 1.0 / PER_UNIT
    t = -T_MAX + h * np.arange(INTERVALS + 1)
    y = exact_log_quantile(t, d)
    half = 0.5 * d
    log_phi = -0.5 * t * t - 0.5 * math.log(2.0 * math.pi)
    log_density = (half - 1.0) * y - 0.5 * np.exp(y) - half * math.log(2.0) - special.gammaln(half)
    slope = h * np.exp(log_phi - log_density - y)
    y0, y1, m0, m1 = y[:-1], y[1:], slope[:-1], slope[1:]
    table = np.ascontiguousarray(np.stack([
        y0, m0, 3.0 * (y1 - y0) - 2.0 * m0 - m1, 2.0 * (y0 - y1) + m0 + m1]))
    table.setflags(write=False)
    return table


def log_quantile(z, table, xp=np):
    r""":math:`\log Q(z)` from :func:`quantile_table`, vectorised (the kernels' bits)."""
    x = xp.minimum(xp.maximum((z + T_MAX) * PER_UNIT, 0.0), float(INTERVALS))
    k = xp.minimum(x.astype(xp.int64), INTERVALS - 1)
    s = x - k
    return table[0, k] + s * (table[1, k] + s * (table[2, k] + s * table[3, k]))


def squared_norms(z, table, xp=np):
    """``Q(z)``: the squared chi(d) norm of a pair's first row (``-z``: its second)."""
    return elem.exp(log_quantile(z, table, xp), xp)


__all__ = ["INTERVALS", "PER_UNIT", "REL_ERROR", "T_MAX", "exact_log_quantile", "log_quantile",
           "pairing", "quantile_table", "squared_norms"]
