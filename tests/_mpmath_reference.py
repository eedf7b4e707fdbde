"""50-digit references for the closed forms, written straight from MATH.md.

Independent of rfkernels' own series: mpmath evaluates 1F1 and 0F1 to the
working precision, so differences are computed without cancellation.
"""

import mpmath as mp

DPS = 50


def _moments(d, q, norms, n):
    """E exp(W·a), |a|² = q (q < 0: E cos), W a sum of n orthogonal rows."""
    d = mp.mpf(d)
    if norms == "chi":
        return mp.hyp1f1(n * d / 2, d / 2, q / 2, maxprec=200000, zeroprec=400)
    return mp.hyp0f1(d / 2, n * d * q / 4, maxprec=200000, zeroprec=400)


def exact_mse(d, half_sq, s, t, m, kind, ensemble, norms):
    """MSE = bias² + (m V + P C)/m² from the raw moments, at DPS digits."""
    with mp.workdps(DPS):
        half_sq, s, t = mp.mpf(half_sq), mp.mpf(s), mp.mpf(t)
        lam = mp.exp(-half_sq)
        # exp(x.y), written with the invariant the estimator's mean uses, so
        # that the rounding of half_sq, s, t as floats cannot fake a bias
        sm = lam * mp.exp(s / 2) if kind != "trig" else mp.exp(-t / 2) / lam
        if kind == "trig":
            pref, q = 1 / lam, -t
        else:
            pref, q = lam, s
        m1 = _moments(d, q, norms, 1)
        m1_sq4 = _moments(d, 4 * q, norms, 1)
        m2 = _moments(d, q, norms, 2)
        mean = pref * m1
        if kind == "positive":
            second = pref**2 * m1_sq4
        else:  # cosh or cos: E f² = pref² (1 + M(4q)) / 2
            second = pref**2 * (1 + m1_sq4) / 2
        var = second - mean**2
        cov = pref**2 * m2 - mean**2
        if ensemble == "iid":
            pairs = 0
        else:
            qd, r = divmod(m, d)
            pairs = qd * d * (d - 1) + r * (r - 1)
        return (mean - sm) ** 2 + (m * var + pairs * cov) / mp.mpf(m) ** 2
