r"""Elementary functions with a fixed sequence of IEEE operations.

``log``, ``exp`` and ``sincos_2pi`` written with ``+ - * /``, ``sqrt``,
``floor`` and bit casts only, so that the vectorised code here (NumPy or
CuPy arrays) and the scalar Numba code of
:mod:`rfkernels.numerics.elementary_numba` compute *bit-identical* results:
every one of those operations is correctly rounded in IEEE double precision,
whereas the ``log``/``exp``/``cos`` of different math libraries may differ in
the last bit. The Numba versions also vectorise (SIMD) inside loops, which
calls into the C library do not.

They serve the random-number transforms (:mod:`rfkernels.rng`: Box--Muller)
and the Monte Carlo kernels (the positive and hyperbolic estimates). They are
private: each has a restricted domain, stated below, and does no checking.

Accuracy (tested against mpmath): ``log`` and ``exp`` below 1 ulp,
``sincos_2pi`` below 2 ulp.

References
----------
.. [1] Sun Microsystems, fdlibm 5.3, ``e_log.c`` and ``e_exp.c`` (the
   reductions and the polynomial coefficients of ``log`` and ``exp``).
"""

from __future__ import annotations

import numpy as np

# fdlibm e_log.c / e_exp.c
LN2_HI = 6.93147180369123816490e-01  # 0x3fe62e42 fee00000: k * LN2_HI is exact for |k| < 2**11
LN2_LO = 1.90821492927058770002e-10  # 0x3dea39ef 35793c76
INV_LN2 = 1.44269504088896338700e00
LG1 = 6.666666666666735130e-01
LG2 = 3.999999999940941908e-01
LG3 = 2.857142874366239149e-01
LG4 = 2.222219843214978396e-01
LG5 = 1.818357216161805012e-01
LG6 = 1.531383769920937332e-01
LG7 = 1.479819860511658591e-01
P1 = 1.66666666666666019037e-01
P2 = -2.77777777770155933842e-03
P3 = 6.61375632143793436117e-05
P4 = -1.65339022054652515390e-06
P5 = 4.13813679705723846039e-08

#: exp's argument is clamped to [EXP_LO, EXP_HI]: below, the result is 0
#: (exp(-746) < 2**-1075); above, it is inf (exp(710) > max double).
EXP_LO = -746.0
EXP_HI = 710.0

# Taylor coefficients of sin(2 pi f) and cos(2 pi f) in f (nearest doubles,
# from 40-digit mpmath): S_n = (-1)^n (2pi)^(2n+1)/(2n+1)!, C_n = (-1)^n (2pi)^(2n)/(2n)!.
# For |f| <= 1/8 (|2 pi f| <= pi/4) the first omitted terms are below 1e-19.
S0 = 6.283185307179586
S1 = -41.34170224039976
S2 = 81.60524927607506
S3 = -76.70585975306139
S4 = 42.058693944897655
S5 = -15.09464257682299
S6 = 3.819952584848282
S7 = -0.7181223017785006
S8 = 0.10422916220813984
C1 = -19.739208802178716
C2 = 64.9393940226683
C3 = -85.45681720669373
C4 = 60.24464137187666
C5 = -26.4262567833744
C6 = 7.903536371318469
C7 = -1.714390711088672
C8 = 0.28200596845579123
C9 = -0.03638284114254567

# bit patterns
FRAC_MASK = 0x000FFFFFFFFFFFFF
#: Added to the fraction bits so that the carry into bit 52 says f >= sqrt(2)/2 * 2 (fdlibm's 0x95f64).
SQRT2_ADJ = 0x00095F6400000000
BIT52 = 0x0010000000000000
ONE_BITS = 0x3FF0000000000000
EXP_BIAS = 1023

_U_FRAC = np.uint64(FRAC_MASK)
_U_ADJ = np.uint64(SQRT2_ADJ)
_U_BIT52 = np.uint64(BIT52)
_U_ONE = np.uint64(ONE_BITS)
_U_52 = np.uint64(52)
_I_52 = np.int64(52)


def log(x, xp=np):
    """Natural log of positive, normal, finite float64 ``x`` (fdlibm's method).

    ``x = 2**k * (1 + f)`` with ``sqrt(2)/2 <= 1 + f < sqrt(2)``, then
    ``log(1 + f) = f - f**2/2 + s (f**2/2 + R(s**2))`` with ``s = f / (2 + f)``.
    Zero, negative, subnormal or non-finite ``x`` give wrong numbers.
    """
    x = xp.asarray(x, dtype=xp.float64)
    b = x.view(xp.uint64)
    k = (b >> _U_52).astype(xp.int64) - EXP_BIAS
    hx = b & _U_FRAC
    i = (hx + _U_ADJ) & _U_BIT52
    xm = (hx | (i ^ _U_ONE)).view(xp.float64)  # 1 + f, in [sqrt(2)/2, sqrt(2))
    k = k + (i >> _U_52).astype(xp.int64)
    f = xm - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    r = t2 + t1
    hfsq = 0.5 * f * f
    dk = k.astype(xp.float64)
    return dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)


def exp(x, xp=np):
    """``e**x`` for finite float64 ``x`` (fdlibm's method); 0 below -745.2, inf above 709.8.

    ``x = k ln2 + r`` with ``|r| <= ln2/2``, ``e**r`` from a rational
    approximation, and the result scaled by ``2**k`` in two exact steps (so
    that subnormal results are rounded once).
    """
    x = xp.clip(xp.asarray(x, dtype=xp.float64), EXP_LO, EXP_HI)
    kf = xp.floor(x * INV_LN2 + 0.5)
    hi = x - kf * LN2_HI
    lo = kf * LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    k = kf.astype(xp.int64)
    k1 = k >> 1
    k2 = k - k1
    two_k1 = ((k1 + EXP_BIAS) << _I_52).view(xp.float64)
    two_k2 = ((k2 + EXP_BIAS) << _I_52).view(xp.float64)
    with np.errstate(over="ignore", under="ignore"):  # inf and 0 are the documented results
        return y * two_k1 * two_k2


def sincos_2pi(u, xp=np):
    """``(sin(2 pi u), cos(2 pi u))`` for float64 ``u`` in [0, 1].

    The reduction is exact: ``q = floor(4u + 1/2)``, ``f = u - q/4`` with
    ``|f| <= 1/8``, and the angle ``2 pi f`` never has to be rounded: the
    Taylor polynomials are in ``f`` with ``2 pi`` folded into their
    coefficients. The quadrant ``q`` then swaps and negates the pair.
    """
    u = xp.asarray(u, dtype=xp.float64)
    qf = xp.floor(4.0 * u + 0.5)
    f = u - 0.25 * qf
    q = qf.astype(xp.int64)
    f2 = f * f
    s = f * (S0 + f2 * (S1 + f2 * (S2 + f2 * (S3 + f2 * (S4 + f2 * (S5 + f2 * (S6 + f2 * (S7 + f2 * S8))))))))
    c = 1.0 + f2 * (C1 + f2 * (C2 + f2 * (C3 + f2 * (C4 + f2 * (C5 + f2 * (C6 + f2 * (C7 + f2 * (C8 + f2 * C9))))))))
    swap = (q & 1) != 0
    sin = xp.where(swap, c, s)
    cos = xp.where(swap, s, c)
    sin = xp.where((q & 2) != 0, -sin, sin)
    cos = xp.where(((q + 1) & 2) != 0, -cos, cos)
    return sin, cos
