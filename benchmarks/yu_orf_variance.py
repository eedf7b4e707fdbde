"""Yu et al. (2016)'s ORF variance formula against the exact variance; paired vs offset maps.

Gaussian kernel, z = (x - y)/sigma, t = |z|^2, k = exp(-t/2). Paired random
Fourier features with D frequencies estimate k by (1/D) sum_i cos(w_i . z).

* iid w_i ~ N(0, I_d): ``Var = V/D`` with ``V = (1 - e^{-t})^2 / 2``.
* orthogonal (chi norms; blocks of d rows, rows orthogonal within a block,
  each with an independent chi(d) norm; last block partial):
  ``Var = (D V + P C) / D^2`` with ``P = sum_j b_j (b_j - 1)`` over block
  sizes and ``C = 1F1(d; d/2; -t/2) - e^{-t}`` (two rows of one block).
* Yu et al., NeurIPS 2016 (arXiv:1610.09072), Theorem 1, one block (D <= d):
  ``(1/(2D)) [(1 - e^{-t})^2 - ((D - 1)/d) e^{-t} t^2]`` plus a remainder
  ``f(z)/d^2`` they leave unspecified; that remainder is omitted here.
  Expanding C in 1/d (at fixed t):
  ``C = -t^2 e^{-t} / (2d) + t^2 (t^2 - 8t + 8) e^{-t} / (8 d^2) + O(1/d^3)``,
  so Yu's correction is exactly the first-order term; the "2nd" column adds
  ``(D - 1)/D`` times the 1/d^2 term above. At D = d the exact variance is
  ``g/(2d) + t^2 e^{-t} (t - 2)(t - 6) / (8 d^2) + O(1/d^3)``,
  ``g = (1 - e^{-t})^2 - t^2 e^{-t}``, while Yu's formula is exactly
  ``g/(2d) + t^2 e^{-t} / (2 d^2)``: it keeps part of the 1/d^2 term and drops
  the rest. Since g = O(t^4) at small t, the 1/d^2 terms dominate there and
  Yu/exact -> (d + 2)/(3d) as t -> 0 (exact: 3 t^2 / (2 d (d + 2))).

Table 1: one block, D = d, for several d and t: exact ORF variance, Yu's formula,
the second-order expansion, the iid variance, (Yu - exact)/exact and exact/iid.

Table 2: paired vs offset map at equal output dimension r. The offset map
(scikit-learn's RBFSampler: r outputs sqrt(2/r) cos(w_i . x + b_i)) has
``MSE = Var_paired(D = r frequencies) + 1/(2r)``; the paired map with r outputs
has D = r/2 frequencies. Both use the same ensemble with their own block
structure (blocks of d rows). iid: offset ``(1 - k^2 + k^4/2)/r`` vs paired
``(1 - k^2)^2 / r`` (paired always wins). For orthogonal frequencies the table
gives, on a t grid 0.10, 0.11, ..., 20.00, where offset wins
(paired/offset > 1) and the largest ratio.

C is evaluated with mpmath (scipy.special.hyp1f1 is inaccurate for large d and
negative arguments); ``--mc`` adds a Monte Carlo check of C and of the block
variance at d = 4, t = 2.

    python benchmarks/yu_orf_variance.py [--mc]
"""

from __future__ import annotations

import argparse
import functools
import math

import mpmath as mp
import numpy as np

mp.mp.dps = 50


@functools.lru_cache(maxsize=None)
def pair_cov(d: int, t: float) -> float:
    """``C = 1F1(d; d/2; -t/2) - e^{-t}``: covariance of two cos terms of one orthogonal block."""
    t = mp.mpf(t)
    # zeroprec: 1F1 has exact zeros (d = 2, t = 2); return 0 there instead of failing
    return float(mp.hyp1f1(d, mp.mpf(d) / 2, -t / 2, zeroprec=4 * mp.mp.prec) - mp.exp(-t))


def one_term_var(t: float) -> float:
    """``V = Var cos(w . z) = (1 - e^{-t})^2 / 2`` for w ~ N(0, I)."""
    return 0.5 * (-math.expm1(-t)) ** 2


def ordered_pairs(D: int, d: int) -> int:
    """``P = sum_j b_j (b_j - 1)`` over blocks of d rows (the last partial)."""
    full, rest = divmod(D, d)
    return full * d * (d - 1) + rest * (rest - 1)


def var_paired(D: int, d: int, t: float, ensemble: str) -> float:
    """Variance of the paired trig estimator with D frequencies."""
    V = one_term_var(t)
    if ensemble == "iid":
        return V / D
    return (D * V + ordered_pairs(D, d) * pair_cov(d, t)) / D**2


def yu_formula(D: int, d: int, t: float) -> float:
    """Yu et al. 2016, Theorem 1 without its unspecified f(z)/d^2 remainder (one block, D <= d)."""
    return ((-math.expm1(-t)) ** 2 - (D - 1) / d * math.exp(-t) * t * t) / (2 * D)


def second_order(D: int, d: int, t: float) -> float:
    """Exact variance expanded to 1/d^2 (fixed t, one block)."""
    c2 = t * t * (t * t - 8 * t + 8) * math.exp(-t) / 8
    return yu_formula(D, d, t) + (D - 1) / D * c2 / d**2


def table_yu() -> None:
    print("Table 1. One orthogonal block, D = d (chi norms). Variances of (1/D) sum cos(w_i . z).")
    print("rel = (Yu - exact)/exact; 2nd = exact expanded to O(1/d^2); C = pair covariance.")
    head = f"{'d':>4} {'t':>5} {'exact':>11} {'Yu':>11} {'2nd':>11} {'iid':>11} {'rel':>9} {'exact/iid':>9} {'C':>11}"
    print(head)
    for d in (2, 4, 16, 64, 256):
        for t in (0.25, 1.0, 2.0, 4.0, 8.0, 16.0):
            ex = var_paired(d, d, t, "orthogonal")
            yu = yu_formula(d, d, t)
            iid = var_paired(d, d, t, "iid")
            print(
                f"{d:>4} {t:>5g} {ex:>11.4e} {yu:>11.4e} {second_order(d, d, t):>11.4e} "
                f"{iid:>11.4e} {(yu - ex) / ex:>+9.2%} {ex / iid:>9.4f} {pair_cov(d, t):>+11.3e}"
            )
    print()


def win_intervals(ts, ratio):
    """Maximal runs of the grid where ratio > 1, as (t_start, t_end, peak ratio, t at peak)."""
    out, i, n = [], 0, len(ts)
    while i < n:
        if ratio[i] > 1:
            j = i
            while j + 1 < n and ratio[j + 1] > 1:
                j += 1
            k = i + int(np.argmax(ratio[i : j + 1]))
            out.append((ts[i], ts[j], ratio[k], ts[k]))
            i = j + 1
        else:
            i += 1
    return out


def table_offset() -> None:
    ts = np.round(np.arange(10, 2001) / 100.0, 2)  # 0.10 .. 20.00
    print("Table 2. Paired (r/2 frequencies) vs offset (r frequencies) at equal output dimension r,")
    print("orthogonal chi-norm frequencies in blocks of d; ratio = MSE_paired / MSE_offset (> 1: offset wins).")
    print("t grid 0.10..20.00 step 0.01. 'min ratio' = best case for paired.")
    print(f"{'d':>3} {'r':>4}  {'offset wins for t in':<34} {'max ratio':>9} {'at t':>6} {'min ratio':>9} {'at t':>6}")
    for d in (2, 4, 8, 16, 64):
        for r in sorted({2, 4, 2 * d, 8 * d}):
            paired = np.array([var_paired(r // 2, d, t, "orthogonal") for t in ts])
            offset = np.array([var_paired(r, d, t, "orthogonal") + 1 / (2 * r) for t in ts])
            ratio = paired / offset
            runs = win_intervals(ts, ratio)
            where = ", ".join(f"{a:.2f}-{b:.2f}" for a, b, _, _ in runs) or "never"
            kmax, kmin = int(np.argmax(ratio)), int(np.argmin(ratio))
            print(
                f"{d:>3} {r:>4}  {where:<34} {ratio[kmax]:>9.4f} {ts[kmax]:>6.2f} "
                f"{ratio[kmin]:>9.4f} {ts[kmin]:>6.2f}"
            )
            if len(runs) > 1:
                for a, b, peak, tp in runs:
                    print(f"{'':>10}{a:.2f}-{b:.2f}: peak {peak:.6f} at t = {tp:.2f}")
    # iid sanity: paired always wins
    k2 = np.exp(-ts)
    worst = np.max((1 - k2) ** 2 / (1 - k2 + k2**2 / 2))
    print(f"iid: max over the grid of paired/offset = {worst:.4f} (< 1: paired always wins)")
    print()


def monte_carlo(d=4, t=2.0, blocks=400_000, reps=5, seed=0) -> None:
    """Haar rows (QR of a Gaussian, sign-fixed) scaled by chi(d) norms."""
    rng = np.random.default_rng(seed)
    z = np.zeros(d)
    z[0] = math.sqrt(t)
    k = math.exp(-t / 2)
    cov, var = [], []
    for _ in range(reps):
        q, r = np.linalg.qr(rng.standard_normal((blocks, d, d)))
        q = q * np.sign(np.diagonal(r, axis1=1, axis2=2))[:, None, :]
        w = np.swapaxes(q, 1, 2) * np.sqrt(rng.chisquare(d, size=(blocks, d)))[:, :, None]
        c = np.cos(w @ z)
        cov.append(np.mean((c[:, 0] - k) * (c[:, 1] - k)))
        var.append(np.mean((c.mean(axis=1) - k) ** 2))
    se = lambda a: np.std(a, ddof=1) / math.sqrt(len(a))  # noqa: E731
    print(f"Monte Carlo, d = {d}, t = {t:g}, {reps} x {blocks} blocks:")
    print(f"  C:             {np.mean(cov):.5f} +- {se(cov):.5f}   mpmath {pair_cov(d, t):.5f}")
    print(f"  Var (D = d):   {np.mean(var):.5f} +- {se(var):.5f}   exact  {var_paired(d, d, t, 'orthogonal'):.5f}"
          f"   Yu {yu_formula(d, d, t):.5f}   iid {var_paired(d, d, t, 'iid'):.5f}")
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mc", action="store_true", help="add the Monte Carlo check")
    args = parser.parse_args()
    table_yu()
    table_offset()
    if args.mc:
        monte_carlo()


if __name__ == "__main__":
    main()
