"""What the DERF fits gain on populations of queries and keys (docs/derf.rst's table).

For each population (n = 256 queries and 256 keys, d = 16 or 64, Gaussian
rows with per-coordinate scales s_l log-uniform in [1/c, c] and a mean
shift mu), every kind is fitted on the population and scored on all
n^2 pairs by

- the paper's objective, the mean over pairs of log E[f_1^2 f_2^2] (what
  the fits minimise), reported as its difference from FAVOR+'s (``dlog2M``:
  negative is better; the paper's "variance reduction e^k" is -k of this
  kind of difference);
- the mean over pairs of the exact relative MSE, MSE / SM^2, at m = d,
  iid and orthogonal (isotropic A only), as a ratio to FAVOR+ iid.

Second, SADERF's rescaling: the paper's psi_l = (sum_j y_jl^2 / sum_i
x_il^2)^(1/4) (sums) against ours, the ratio of the *means* (the
minimiser of the mean log second moment), on populations with n1 != n2
(64 x 256 and 256 x 64, d = 16), each followed by OPRF's A* of the
rescaled population.

Usage (from the repository root, package installed)::

    python benchmarks/derf_gains.py
"""

import numpy as np

from rfkernels import fit_derf, theory
from rfkernels.numerics import derf as dt
from rfkernels.numerics import oprf_simplex as bt
from rfkernels.numerics.derf_fit import mean_log_second_moment, mean_pair_square

KINDS = ("favor+", "oprf", "saderf", "aderf", "sderf")


def population(rng, n, d, norm, c, mu):
    scales = np.exp(rng.uniform(-np.log(c), np.log(c), d))
    scales *= norm / np.sqrt(np.sum(scales**2))  # E|x|^2 = norm^2
    x = rng.normal(size=(n, d)) * scales + mu / np.sqrt(d)
    y = rng.normal(size=(n, d)) * scales[::-1] - mu / np.sqrt(d)
    return x, y


def score(x, y, kind, d):
    p = fit_derf(kind, x, y).params
    obj = mean_log_second_moment(x, y, p)
    X, Y = np.repeat(x, y.shape[0], axis=0), np.tile(y, (x.shape[0], 1))
    log_sm2 = 2.0 * np.einsum("ij,ij->i", X, Y)
    rel = {}
    for ens in ("iid", "orthogonal"):
        if ens == "orthogonal" and not p.isotropic:
            rel[ens] = None
            continue
        log_mse = dt.derf_log_mse(X, Y, d, p, orthogonal_blocks=ens == "orthogonal")
        rel[ens] = float(np.mean(np.exp(log_mse - log_sm2)))
    return obj, rel


def psi_rule(rng, d=16):
    print("SADERF's psi from means (ours) or sums (the paper's text), n1 != n2, d = 16:")
    for n1, n2 in ((64, 256), (256, 64)):
        s = np.exp(rng.uniform(-np.log(4.0), np.log(4.0), d))
        s *= 2.0 / np.sqrt(np.sum(s**2))
        x, y = rng.normal(size=(n1, d)) * s, rng.normal(size=(n2, d)) * s[::-1]
        psi = (np.sum(y**2, axis=0) / np.sum(x**2, axis=0)) ** 0.25
        a = float(bt.oprf_optimal_a(mean_pair_square(x * psi, y / psi) / d))
        b = np.sqrt(1.0 - 4.0 * a)
        sums = dt.derf_params(a, b * np.diag(psi), b * np.diag(1.0 / psi), d=d)
        X, Y = np.repeat(x, n2, axis=0), np.tile(y, (n1, 1))
        log_sm2 = 2.0 * np.einsum("ij,ij->i", X, Y)
        for label, p in (("means (ours)", fit_derf("saderf", x, y).params), ("sums (paper)", sums)):
            rel = float(np.mean(np.exp(dt.derf_log_mse(X, Y, d, p) - log_sm2)))
            print(f"  {n1} x {n2} {label:<13} mean log E f^2 {mean_log_second_moment(x, y, p):7.4f}"
                  f"   mean MSE/SM^2 (m = d, iid) {rel:8.4g}")


def main():
    rng = np.random.default_rng(0)
    psi_rule(rng)
    n = 256
    print(f"n = {n} queries x {n} keys, m = d; dlog2M vs FAVOR+; mean MSE/SM^2 as a ratio to FAVOR+ iid")
    for d in (16, 64):
        for norm, c, mu in ((1.0, 1.0, 0.0), (2.0, 1.0, 0.0), (2.0, 4.0, 0.0), (2.0, 4.0, 1.0),
                            (3.0, 8.0, 0.0)):
            x, y = population(rng, n, d, norm, c, mu)
            print(f"d = {d}, E|x|^2 = {norm**2:g}, scale spread {c:g}, mean shift {mu:g}:")
            base_obj, base = score(x, y, "favor+", d)
            for kind in KINDS:
                obj, rel = score(x, y, kind, d)
                orth = "      n/a" if rel['orthogonal'] is None else f"{rel['orthogonal'] / base['iid']:9.3g}"
                print(f"  {kind:<7} dlog2M {obj - base_obj:9.3f}   iid {rel['iid'] / base['iid']:9.3g}"
                      f"   orthogonal {orth}   (FAVOR+ iid mean MSE/SM^2 = {base['iid']:.3g})")


if __name__ == "__main__":
    main()
