"""Scalar Numba versions of :mod:`rfkernels.numerics.elementary`: the same bits, one number at a time.

Each function is ``@scalar(inline="always")``: Numba inlines it into the
caller's IR, so a loop calling it has no function calls left and LLVM can
vectorise it (SIMD), which a call into the C library's ``log``/``exp``/``cos``
prevents. The expressions are those of :mod:`rfkernels.numerics.elementary`, in the
same order; Numba does not contract ``a * b + c`` into an FMA or reassociate
without ``fastmath``, so the results are bit-identical to the vectorised ones.

Callers that divide should be compiled with ``error_model="numpy"``: with
Numba's default (``"python"``) every float division carries a
``ZeroDivisionError`` check, which blocks vectorisation.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from .elementary import (
    BIT52,
    C1,
    C2,
    C3,
    C4,
    C5,
    C6,
    C7,
    C8,
    C9,
    EXP_BIAS,
    EXP_HI,
    EXP_LO,
    FRAC_MASK,
    INV_LN2,
    LG1,
    LG2,
    LG3,
    LG4,
    LG5,
    LG6,
    LG7,
    LN2_HI,
    LN2_LO,
    ONE_BITS,
    P1,
    P2,
    P3,
    P4,
    P5,
    S0,
    S1,
    S2,
    S3,
    S4,
    S5,
    S6,
    S7,
    S8,
    SQRT2_ADJ,
)
from .scalar import intrinsic_twins, scalar

_U_FRAC = np.uint64(FRAC_MASK)
_U_ADJ = np.uint64(SQRT2_ADJ)
_U_BIT52 = np.uint64(BIT52)
_U_ONE = np.uint64(ONE_BITS)
_U_52 = np.uint64(52)


def _f64_bits_typing(typingctx, x):
    """The bits of a float64 as a uint64 (LLVM ``bitcast``; ``x.view(uint64)``)."""
    if not isinstance(x, types.Float) or x.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.uint64(types.float64), codegen


def _bits_f64_typing(typingctx, b):
    """The float64 with the bits of an int64 or uint64 (``b.view(float64)``)."""
    if not isinstance(b, types.Integer) or b.bitwidth != 64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(b), codegen


# The same typing and codegen (an LLVM bitcast) for the CPU and, below, the CUDA target.
f64_bits = intrinsic(_f64_bits_typing)
bits_f64 = intrinsic(_bits_f64_typing)


def _cuda_intrinsic(typing):
    def make():
        from numba.cuda.extending import intrinsic as cuda_intrinsic

        return cuda_intrinsic(typing)

    return make


def _f64_bits_simulated(x):
    return np.float64(x).view(np.uint64)


def _bits_f64_simulated(b):
    return (b if isinstance(b, (np.int64, np.uint64)) else np.int64(b)).view(np.float64)


intrinsic_twins(f64_bits, _cuda_intrinsic(_f64_bits_typing), _f64_bits_simulated)
intrinsic_twins(bits_f64, _cuda_intrinsic(_bits_f64_typing), _bits_f64_simulated)


@scalar(inline="always")
def log(x):
    """Natural log of a positive, normal, finite float64; = :func:`rfkernels.numerics.elementary.log`."""
    b = f64_bits(x)
    k = np.int64(b >> _U_52) - EXP_BIAS
    hx = b & _U_FRAC
    i = (hx + _U_ADJ) & _U_BIT52
    xm = bits_f64(hx | (i ^ _U_ONE))
    k = k + np.int64(i >> _U_52)
    f = xm - 1.0
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    t1 = w * (LG2 + w * (LG4 + w * LG6))
    t2 = z * (LG1 + w * (LG3 + w * (LG5 + w * LG7)))
    r = t2 + t1
    hfsq = 0.5 * f * f
    dk = np.float64(k)
    return dk * LN2_HI - ((hfsq - (s * (hfsq + r) + dk * LN2_LO)) - f)


@scalar(inline="always")
def exp(x):
    """``e**x`` for a finite float64; = :func:`rfkernels.numerics.elementary.exp`."""
    x = min(max(x, EXP_LO), EXP_HI)
    kf = np.float64(math.floor(x * INV_LN2 + 0.5))
    hi = x - kf * LN2_HI
    lo = kf * LN2_LO
    r = hi - lo
    t = r * r
    c = r - t * (P1 + t * (P2 + t * (P3 + t * (P4 + t * P5))))
    y = 1.0 - ((lo - (r * c) / (2.0 - c)) - hi)
    k = np.int64(kf)
    k1 = k >> 1
    k2 = k - k1
    return y * bits_f64((k1 + EXP_BIAS) << 52) * bits_f64((k2 + EXP_BIAS) << 52)


@scalar(inline="always")
def sincos_2pi(u):
    """``(sin(2 pi u), cos(2 pi u))`` for u in [0, 1]; = :func:`rfkernels.numerics.elementary.sincos_2pi`."""
    qf = np.float64(math.floor(4.0 * u + 0.5))
    f = u - 0.25 * qf
    q = np.int64(qf)
    f2 = f * f
    s = f * (S0 + f2 * (S1 + f2 * (S2 + f2 * (S3 + f2 * (S4 + f2 * (S5 + f2 * (S6 + f2 * (S7 + f2 * S8))))))))
    c = 1.0 + f2 * (C1 + f2 * (C2 + f2 * (C3 + f2 * (C4 + f2 * (C5 + f2 * (C6 + f2 * (C7 + f2 * (C8 + f2 * C9))))))))
    swap = (q & 1) != 0
    sin = c if swap else s
    cos = s if swap else c
    if (q & 2) != 0:
        sin = -sin
    if ((q + 1) & 2) != 0:
        cos = -cos
    return sin, cos
