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
simplex: :func:`rfkernels.numerics.oprf_simplex.log_block_covariance_from_geometry`)
and :math:`C_{anti}` that of a coupled pair
(:mod:`rfkernels.numerics.antithetic`). The difference
:math:`\Delta = C_{anti} - C` (over the prefactor) is formed from the two
cancellation-free differences to the independent rows' :math:`e^{\pm q}`
for :math:`q \le 8` (trig: every q), and beyond from the two pair terms' logs
(positive and hyperbolic features, whose terms grow like :math:`e^q`; the
independent one directly, :func:`rfkernels.numerics.oprf_simplex.log_independent_pair_term`,
not as :math:`e^q` plus a covariance that cancels it). OPRF (orthogonal
only): its coupled pair term :func:`rfkernels.numerics.antithetic.oprf_log_pair_term`
depends on A (at q = 0 too: :math:`(1-4A)^d E[e^{2AS}] \ne 1` for A != 0),
and :math:`\Delta` is formed from the logs at every q. Where it comes from
logs, its absolute error is bounded by :math:`10^{-14}\max(1, |\log P|)`
times the pair term P; where that bound exceeds 1e-9 of the MSE (OPRF at
:math:`|x + y|^2` below about 1e-5, where both logs agree to float64's
resolution) the theory raises rather than return a rounded value.

As the other numerics, these take the term's
:class:`~rfkernels.numerics.term_form.TermForm` and the rows' cosine
``cosine(d)`` (the ensemble's), never a name.
"""

from __future__ import annotations

import numpy as np

from . import antithetic as at
from . import hypergeometric as hg
from . import oprf_simplex as ob

#: Below this q the differences to e^{+-q} are summed directly (see the module notes).
_Q_DIRECT = 8.0
#: The error bound of a pair term's log (absolute, times max(1, |log|)) where Delta comes from logs.
_LOG_ERROR = 1e-14
#: The largest relative error of the MSE accepted from that bound.
_TOLERANCE = 1e-9


def coupled_pairs(m, d):
    """``P_c``: ordered coupled pairs, ``2 floor(b/2)`` per block of b rows (blocks of d, the last partial)."""
    m = np.asarray(m, dtype=np.int64)
    d = np.asarray(d, dtype=np.int64)
    full, rest = np.divmod(m, d)
    return (full * (2 * (d // 2)) + 2 * (rest // 2)).astype(np.float64)


def _log_independent_pair(q, d, form, cosine, gamma, geom_point):
    """``(log|D|, sign D)`` of the independent-norm pair term minus e^{+-q}, one d (flat arrays)."""
    if gamma != 0.0:
        log_c, sign = ob.log_block_covariance_from_geometry(geom_point, form, cosine)
        _, _, pref2 = form.arrays(geom_point)
        return np.asarray(log_c - pref2), np.asarray(sign, dtype=np.float64)
    if not form.on_sum:
        val = hg.chi_diff_neg(q / 2.0, d)
        with np.errstate(divide="ignore"):
            return np.log(np.abs(val)), np.sign(val)
    return hg.log_neg_chi_diff(q / 2.0, d), -np.ones(q.shape)


def _delta(q, d, form, cosine, A, geom_point):
    """``(log|Delta|, sign Delta, log of Delta's error bound)``: coupled minus independent pair term, one d."""
    gamma = float(cosine(np.float64(d)))  # the rows' cosine (0: orthogonal)
    symmetric = form.symmetric
    out_log, out_sign = np.full(q.shape, -np.inf), np.zeros(q.shape)
    out_err = np.full(q.shape, -np.inf)
    sign = 1 if form.on_sum else -1
    # cosine terms (on x - y) are bounded: their differences are summed directly at every q
    direct = ((q <= _Q_DIRECT) | (not form.on_sum)) & (not form.quadratic)
    if np.any(direct):
        qd = q[direct]
        log_ind, sign_ind = _log_independent_pair(qd, d, form, cosine, gamma,
                                                  type(geom_point)(*(a[direct] for a in geom_point)))
        anti = at.pair_difference(qd, d, sign, gamma, symmetric)
        delta = anti - sign_ind * np.exp(log_ind)
        with np.errstate(divide="ignore"):
            out_log[direct], out_sign[direct] = np.log(np.abs(delta)), np.sign(delta)
    # OPRF at every q (its A-dependent term at q = 0 too), the growing terms beyond _Q_DIRECT
    rest = ~direct & ((q > 0) | form.quadratic)
    if np.any(rest):
        qr = q[rest]
        if form.quadratic:
            lpa = np.array([at.oprf_log_pair_term(qi, d, ai) for qi, ai in zip(qr, A[rest])])
        else:
            lpa = at.log_pair_term(qr, d, gamma, symmetric)
        lpi = ob.log_independent_pair_term(qr, d, symmetric, cosine)
        gap = lpa - lpi
        with np.errstate(divide="ignore"):
            out_log[rest] = lpi + np.log(np.abs(np.expm1(gap)))
            # both logs are sums of ~900 rounded terms: an absolute error below this on the gap
            out_err[rest] = lpi + np.log(_LOG_ERROR * np.maximum(1.0, np.abs(lpi)))
        out_sign[rest] = np.sign(gap)
    return out_log, out_sign, out_err


def log_mse_antithetic(geom, m, form, cosine, log_mse_chi, A=None):
    r"""log of the exact MSE with antithetic norms, from the independent-chi-norm one.

    Nothing is checked here (the registry's kinds call it with what the
    estimator validated), except the quadrature's range.

    Parameters
    ----------
    geom : rfkernels.theory.Geometry
    m : ndarray of int
    form : rfkernels.numerics.term_form.TermForm
        The term (``quadratic``, OPRF's, with orthogonal rows only).
    cosine : callable
        ``cosine(d)``, the cosine of two rows of a block (the ensemble's:
        0 orthogonal, ``-1/(d-1)`` simplex); rows come in blocks of d.
    log_mse_chi : ndarray
        The log MSE of the same estimator with independent chi(d) norms
        (broadcast shape of the batch and m).
    A : None or ndarray
        The parameter of a ``quadratic`` term per point (None: A* of each
        pair); unused otherwise.

    Raises
    ------
    ValueError
        :math:`|x \pm y|^2` above :data:`rfkernels.numerics.antithetic.Q_MAX`.
    FloatingPointError
        The coupled pairs cancel the MSE beyond float64's resolution.
    """
    d, q, pref2 = form.arrays(geom)
    if np.any(q > at.Q_MAX):
        what = "|x + y|^2" if form.on_sum else "|x - y|^2"
        raise ValueError(f"norms='antithetic': the exact MSE needs {what} <= {at.Q_MAX:g} (the "
                         f"quadrature's range); got {float(np.max(q)):.6g}")
    if form.quadratic:  # A may broadcast against the batch (the chi-norm MSE does)
        A = ob.oprf_optimal_a_from_geometry(geom) if A is None else np.asarray(A, dtype=np.float64)
        shape = np.broadcast_shapes(q.shape, A.shape)
        A = np.broadcast_to(A, shape).ravel()
        d, q, pref2 = (np.broadcast_to(a, shape) for a in (d, q, pref2))
    shape = q.shape
    fields = [np.broadcast_to(np.asarray(a, dtype=np.float64), shape).ravel() for a in geom]
    log_delta, sign, log_err = (np.full(q.size, v) for v in (-np.inf, 0.0, -np.inf))
    qf, df = q.ravel(), d.ravel()
    for dim in np.unique(df):
        idx = np.nonzero(df == dim)[0]
        sub = type(geom)(*(f[idx] for f in fields))
        log_delta[idx], sign[idx], log_err[idx] = _delta(qf[idx], int(dim), form, cosine,
                                                         None if A is None else A[idx], sub)
    log_delta, sign, log_err = (a.reshape(shape) for a in (log_delta, sign, log_err))
    pairs = coupled_pairs(m, d.astype(np.int64))
    m = np.asarray(m, dtype=np.float64)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        scale = pairs * np.exp(pref2 - 2.0 * np.log(m) - log_mse_chi)
        rel = sign * scale * np.exp(log_delta)
        err = scale * np.exp(log_err)
    live = np.isfinite(log_mse_chi)
    rel = np.where(live, rel, 0.0)
    unresolved = live & (pairs > 0) & ~(err <= _TOLERANCE)
    if np.any(unresolved):
        where = float(np.broadcast_to(q, unresolved.shape)[unresolved].min())
        raise FloatingPointError(
            f"exact MSE (antithetic norms): the coupled pairs' change is formed from two "
            f"logs that agree beyond float64's resolution at |x + y|^2 = {where:.3g} (error above "
            f"{_TOLERANCE:g} of the MSE): no exact value there, use Monte Carlo")
    if np.any(rel <= -1.0):
        raise FloatingPointError("exact MSE (antithetic norms): the coupled pairs cancel the "
                                 "variance beyond float64's resolution")
    return log_mse_chi + np.log1p(rel)


__all__ = ["coupled_pairs", "log_mse_antithetic"]
