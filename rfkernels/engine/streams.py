"""The counter layout and the summation order every backend of the engine shares.

Trial ``t`` of pair ``k`` uses the Philox trial counter ``(k << 40) | t``
(:func:`trial_counters`); the streams below name what each variate of a
trial is drawn from (:mod:`rfkernels.engine`'s notes give the slots).
Sums over projections are taken in one fixed order
(:func:`fixed_order_sum`), so NumPy, CuPy and the Numba kernels
(:mod:`rfkernels.engine.cpu`, which imports these constants) give the same
bits. A new stream leaves every earlier path's numbers unchanged.
"""

from __future__ import annotations

import numpy as np

from ..backends import get_array_module
from ..validation import check_int

#: Stream of the direction normals g_i.
STREAM_DIRECTION = 16
#: Stream of the (R_i^2, g_i) pairs of orthogonal projections with chi norms.
STREAM_LENGTH = 17
#: Stream of the chi-square tails of the direction norms.
STREAM_TAIL = 18
#: Stream of the chi-square (d - 1) tails of |w_i|^2 for oprf, iid projections with chi norms.
STREAM_OPRF_TAIL = 19
#: Stream of the normal vectors h of the simplex blocks (d per block).
STREAM_SIMPLEX = 20
#: Stream of the squared chi(d) norms of simplex projections.
STREAM_SIMPLEX_LENGTH = 21
#: Stream of the proposal's mixture component (one Philox block per trial, slot 0).
STREAM_PROPOSAL = 22
#: Stream of the random phases U_i of kinds with a random phase (offset: cos(2 pi U_i)).
STREAM_PHASE = 23
#: Stream of the antithetic norms' normals z_u, one per pair of rows (or lone row) of a block.
STREAM_ANTITHETIC = 24
#: Bits of the trial counter that index trials; the pair index sits above.
PAIR_SHIFT = 40
#: Trials per pair addressable by the counter layout.
MAX_TRIALS = 1 << PAIR_SHIFT
#: Pairs per batch addressable by the counter layout.
MAX_PAIRS = 1 << (64 - PAIR_SHIFT)

_LANES = 8


def trial_counters(first, n, pair=0, xp=np):
    """Philox trial counters ``(pair << 40) | t`` for trials ``t = first .. first + n - 1``."""
    first = check_int(first, "first", minimum=0)
    n = check_int(n, "n", minimum=0)
    pair = check_int(pair, "pair", minimum=0)
    if first + n > MAX_TRIALS:
        raise ValueError(f"trial indices must be below 2**{PAIR_SHIFT}; got up to {first + n - 1}")
    if pair >= MAX_PAIRS:
        raise ValueError(f"pair must be below 2**{64 - PAIR_SHIFT}; got {pair}")
    base = np.uint64((pair << PAIR_SHIFT) | first)
    return xp.arange(n, dtype=xp.uint64) + base


def fixed_order_sum(rows, xp=None):
    """Sum over the first axis in a fixed order: eight interleaved partial sums, then a tree.

    Row ``i`` goes to partial sum ``i % 8`` (rows added in increasing order);
    the partial sums are combined as ``((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))``.
    The Numba kernels sum in exactly this order, so the results are the same
    bits, and eight independent chains are faster than one.
    """
    if xp is None:
        xp = get_array_module(rows)
    k = rows.shape[0]
    acc = xp.zeros((_LANES,) + rows.shape[1:], dtype=xp.float64)
    for start in range(0, k, _LANES):
        part = rows[start : start + _LANES]
        acc[: part.shape[0]] += part
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]))
