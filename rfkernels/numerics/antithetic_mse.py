r"""The exact MSE with antithetic norms: the independent-norm MSE plus the coupled pairs' change.

Rows are coupled in pairs (1, 2), (3, 4), ... of each block (MATH.md,
"Norm-coupled orthogonal features"): a block of b rows has
:math:`2\lfloor b/2\rfloor` ordered coupled pairs and
:math:`b(b-1) - 2\lfloor b/2\rfloor` ordinary ones, so

.. math:: \mathrm{MSE}_{anti} = \mathrm{MSE}_{chi}
          + \frac{P_c}{m^2}\,(C_{anti} - C), \qquad
          P_c = \sum_{blocks} 2\lfloor b/2\rfloor,

with :math:`C` the covariance of two rows of a block with independent chi
norms (orthogonal: :math:`\Lambda^2 D`, :mod:`rfkernels.numerics.hypergeometric`;
simplex: :func:`rfkernels.numerics.beyond.log_simplex_covariance_from_geometry`)
and :math:`C_{anti}` that of a coupled pair
(:mod:`rfkernels.numerics.antithetic`). The difference
:math:`\Delta = C_{anti} - C` (over the prefactor) is formed from the two
cancellation-free differences to the independent rows' :math:`e^{\pm q}`
for :math:`q \le 8`, and from the two logs beyond (positive and hyperbolic
features, whose terms grow like :math:`e^q`). Where the independent pair
term is below 1e-3 of :math:`e^q` (large q) only the bound
:math:`|\Delta| \le \max(C_{anti}, 10^{-3} e^q)` is formed; the change is then
below 1e-17 of the MSE (checked; an error is raised otherwise) and the
result is the chi-norm MSE. OPRF (orthogonal only): its
coupled pair term :func:`rfkernels.numerics.antithetic.oprf_log_pair_term`
depends on A, and :math:`\Delta` is formed from the logs at every q, so its
relative accuracy is about :math:`10^{-16} e^q / |\Delta|`
(:math:`|\Delta| \sim q^2/d` for small q).
"""

from __future__ import annotations

import numpy as np

from . import antithetic as at
from . import beyond as bt
from . import hypergeometric as hg

#: Below this q the differences to e^{+-q} are summed directly (see the module notes).
_Q_DIRECT = 8.0
#: The independent pair term e^q + D is formed only where it keeps this fraction of e^q.
_RESOLVED = 1e-3
#: A change to the MSE below this relative size is below float64's resolution of it.
_NEGLIGIBLE = 1e-17


def coupled_pairs(m, d):
    """``P_c``: ordered coupled pairs, ``2 floor(b/2)`` per block of b rows (blocks of d, the last partial)."""
    m = np.asarray(m, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    full, rest = np.divmod(m, d)
    return (full * (2 * (d // 2)) + 2 * (rest // 2)).astype(np.float64)


def _log_independent_pair(q, d, kind, ensemble, geom_point):
    """``(log|D|, sign D)`` of the independent-norm pair term minus e^{+-q}, one d (flat arrays)."""
    if ensemble == "simplex":
        log_c, sign = bt.log_simplex_covariance_from_geometry(geom_point, kind)
        _, _, pref2 = _arrays(geom_point, kind)
        return np.asarray(log_c - pref2), np.asarray(sign, dtype=np.float64)
    if kind == "trig":
        val = hg.chi_diff_neg(q / 2.0, d)
        with np.errstate(divide="ignore"):
            return np.log(np.abs(val)), np.sign(val)
    return hg.log_neg_chi_diff(q / 2.0, d), -np.ones(q.shape)


def _arrays(geom, kind):
    d, half_sq, s, t = np.broadcast_arrays(*(np.asarray(a, dtype=np.float64) for a in geom))
    if kind == "trig":
        return d, t, 2.0 * half_sq
    return d, s, -2.0 * half_sq


def _delta(q, d, kind, ensemble, A, geom_point):
    """``(log|Delta|, sign Delta)``: coupled pair term minus the independent one, one integer d."""
    gamma = bt.simplex_cosine(np.float64(d)) if ensemble == "simplex" else 0.0
    gamma = float(gamma)
    symmetric = kind in ("hyperbolic", "trig")
    log_ind, sign_ind = _log_independent_pair(q, d, kind, ensemble, geom_point)
    out_log, out_sign = np.full(q.shape, -np.inf), np.zeros(q.shape)
    sign = -1 if kind == "trig" else 1
    # trig terms are bounded: their differences are summed directly at every q
    direct = ((q <= _Q_DIRECT) | (kind == "trig")) & (kind != "oprf")
    if np.any(direct):
        qd = q[direct]
        anti = at.pair_difference(qd, d, sign, gamma, symmetric)
        delta = anti - sign_ind[direct] * np.exp(log_ind[direct])
        with np.errstate(divide="ignore"):
            out_log[direct], out_sign[direct] = np.log(np.abs(delta)), np.sign(delta)
    rest = ~direct & (q > 0)
    if np.any(rest):
        qr = q[rest]
        if kind == "oprf":
            lpa = np.array([at.oprf_log_pair_term(qi, d, ai) for qi, ai in zip(qr, A[rest])])
        else:
            lpa = at.log_pair_term(qr, d, gamma, symmetric)
        # log of the independent pair term e^q + D; where D cancels e^q to more than three
        # digits only the bound |Delta| <= max(e^lpa, 1e-3 e^q) is kept (sign 0: a bound)
        arg = sign_ind[rest] * np.exp(log_ind[rest] - qr)
        resolved = arg > -1.0 + _RESOLVED
        with np.errstate(divide="ignore", invalid="ignore"):
            lpi = qr + np.log1p(np.where(resolved, arg, 0.0))
            gap = lpa - lpi
            out_log[rest] = np.where(resolved, lpi + np.log(np.abs(np.expm1(gap))),
                                     np.maximum(lpa, qr + np.log(_RESOLVED)))
        out_sign[rest] = np.where(resolved, np.sign(gap), 0.0)
    return out_log, out_sign


def log_mse_antithetic(geom, m, kind, ensemble, log_mse_chi, A=None):
    r"""log of the exact MSE with antithetic norms, from the independent-chi-norm one.

    Nothing is checked here (the registry's kinds call it with what the
    estimator validated), except the quadrature's range.

    Parameters
    ----------
    geom : rfkernels.theory.Geometry
    m : ndarray of int
    kind : {'positive', 'hyperbolic', 'trig', 'oprf'}
    ensemble : {'orthogonal', 'simplex'}
        ``'simplex'`` for the paper's kinds only.
    log_mse_chi : ndarray
        The log MSE of the same estimator with independent chi(d) norms
        (broadcast shape of the batch and m).
    A : None or ndarray
        OPRF's parameter per point (None: A* of each pair); unused otherwise.

    Raises
    ------
    ValueError
        :math:`|x \pm y|^2` above :data:`rfkernels.numerics.antithetic.Q_MAX`.
    FloatingPointError
        The coupled pairs cancel the MSE beyond float64's resolution.
    """
    d, q, pref2 = _arrays(geom, kind)
    if np.any(q > at.Q_MAX):
        what = "|x - y|^2" if kind == "trig" else "|x + y|^2"
        raise ValueError(f"norms='antithetic': the exact MSE needs {what} <= {at.Q_MAX:g} (the "
                         f"quadrature's range); got {float(np.max(q)):.6g}")
    shape = q.shape
    if kind == "oprf":
        A = bt.oprf_optimal_a_from_geometry(geom) if A is None else A
        A = np.broadcast_to(np.asarray(A, dtype=np.float64), shape).ravel()
    log_delta, sign = np.full(q.size, -np.inf), np.zeros(q.size)
    qf, df = q.ravel(), d.ravel()
    for dim in np.unique(df):
        idx = np.nonzero(df == dim)[0]
        sub = type(geom)(*(np.broadcast_to(np.asarray(a, dtype=np.float64), shape).ravel()[idx]
                           for a in geom))
        log_delta[idx], sign[idx] = _delta(qf[idx], int(dim), kind, ensemble,
                                           None if A is None else A[idx], sub)
    log_delta, sign = log_delta.reshape(shape), sign.reshape(shape)
    pairs = coupled_pairs(m, np.asarray(geom.d).astype(np.int64))
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        rel = sign * pairs * np.exp(pref2 + log_delta - 2.0 * np.log(m) - log_mse_chi)
    rel = np.where(np.isfinite(log_mse_chi), rel, 0.0)
    bound = np.broadcast_to(sign == 0.0, rel.shape) & np.isfinite(rel) & (rel != 0.0)
    if np.any(bound & (rel > _NEGLIGIBLE)):  # never seen: the term is then e^{-q} of the variance
        raise FloatingPointError("exact MSE (antithetic norms): the independent pair term cancels "
                                 "beyond float64's resolution where the coupled pairs still matter")
    rel = np.where(bound, 0.0, rel)
    if np.any(rel <= -1.0):
        raise FloatingPointError("exact MSE (antithetic norms): the coupled pairs cancel the "
                                 "variance beyond float64's resolution")
    return log_mse_chi + np.log1p(rel)


__all__ = ["coupled_pairs", "log_mse_antithetic"]
