"""Where antithetic norms help trig features (issue 25): the sign of the pair-term change.

For two orthogonal rows the trig pair term (over Lambda^-2) is
E[0F1(; d/2; -S |z|^2/4)], S = R1^2 + R2^2: with independent chi(d) norms
1F1(d; d/2; -|z|^2/2) (mpmath), with antithetic norms the quadrature of
rfkernels.numerics.antithetic. A negative change lowers the covariance and
the MSE. Printed: for each d, the |z|^2 intervals of [0.01, 100] (log grid,
400 points) where the antithetic term is larger by more than RESOLUTION (antithetic
hurts), and the largest change either way.

Usage (from the repository root, package installed)::

    python benchmarks/antithetic_trig_sign.py
"""

import mpmath as mp
import numpy as np

from rfkernels.numerics import antithetic as an


#: Below this absolute change the quadrature (float64 sums of an oscillating integrand) cannot say.
RESOLUTION = 1e-12


def changes(d, q):
    anti = an.pair_difference(q, d, -1) + np.exp(-q)
    ind = np.array([float(mp.hyp1f1(d, d / 2, -x / 2)) for x in q])
    return anti - ind, ind


def main():
    q = np.geomspace(1e-2, 1e2, 400)
    for d in (2, 4, 8, 16, 64, 256):
        diff, ind = changes(d, q)
        hurt = diff > RESOLUTION
        runs, start = [], None
        for i, h in enumerate(hurt):
            if h and start is None:
                start = i
            if (not h or i == q.size - 1) and start is not None:
                end = i if h else i - 1
                runs.append((q[start], q[end]))
                start = None
        shown = ", ".join(f"[{a:.3g}, {b:.3g}]" for a, b in runs) or "nowhere"
        helped = diff < 0
        print(f"d = {d:>3}: antithetic larger on |z|^2 in {shown}; it lowers the term on "
              f"{int(helped.sum())} of {q.size} points (largest drop {float(np.min(diff)):.3g}, "
              f"largest rise {float(np.max(diff)):.3g}; independent term at the rise "
              f"{float(ind[np.argmax(diff)]):.3g})")


if __name__ == "__main__":
    main()
