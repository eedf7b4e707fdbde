"""Throughput of the exact theory beyond the paper: simplex quadrature vs closed forms.

Points per second of the exact MSE for the simplex ensemble (a Gauss-Jacobi
quadrature over B ~ Beta(d/2, 1/2) of 1F1 differences, per point) beside the
closed forms of the same run: ``theory.exact_mse`` of a geometry (iid and
orthogonal) and the OPRF closed forms (iid, orthogonal). Random pairs with
|x|, |y| uniform in [0, 1.5] and a uniform angle (|x ± y|² in [0, 9], the
range of ``bench_theory.py``), m uniform in [1, 64]; and one stress line
with |x ± y|² up to 1e3 at d = 2, where the quadrature needs ~700 nodes;
and the positive 1F1 series at large arguments, Horner (``oprf_simplex``)
against a ``logaddexp`` per term (``hypergeometric``).
Usage (from the repository root, package installed)::

    python benchmarks/bench_beyond_theory.py
"""

from functools import partial

import numpy as np
from _timing import best_of

from rfkernels.numerics import oprf_simplex as bt
from rfkernels.numerics import hypergeometric as hg
from rfkernels import theory


def _line(label, k, seconds, base=None):
    extra = "" if base is None else f"  ({seconds / base:.1f}x the orthogonal closed form's time)"
    print(f"  {label:<36} {seconds:8.3f} s  {k / seconds:10.3g} points/s{extra}")


def main():
    rng = np.random.default_rng(0)
    k = 100_000
    for d in (4, 16, 256):
        geom = theory.geometry_from_angle(d, rng.uniform(0, 1.5, k), rng.uniform(0, 1.5, k),
                                          rng.uniform(0, np.pi, k))
        m = rng.integers(1, 65, k)
        print(f"d = {d}, {k} random points, |x ± y|² in [0, 9], m in [1, 64]:")
        for kind in ("positive", "hyperbolic", "trig"):
            t_ort = best_of(partial(theory.exact_mse, geom, None, m, kind,
                                    ensemble="orthogonal", log=True))
            t_sim = best_of(partial(theory.exact_mse, geom, None, m, kind,
                                    ensemble="simplex", log=True))
            _line(f"{kind} orthogonal (closed form)", k, t_ort)
            _line(f"{kind} simplex (quadrature)", k, t_sim, t_ort)
        for ensemble in ("iid", "orthogonal", "simplex"):
            t = best_of(partial(theory.exact_mse, geom, None, m, "oprf",
                                ensemble=ensemble, log=True))
            _line(f"oprf {ensemble} (A*)", k, t)
    # the positive 1F1 series: Horner in bins (here) against a logaddexp per term (hg)
    x = rng.uniform(0, 1000, k)
    t_horner = best_of(partial(bt._log_scaled_1f1, x, 3.0))
    t_logadd = best_of(partial(hg._log_scaled_1f1_2b_b, x, np.full(k, 3.0)), repeat=1)
    print(f"log(e^-2x 1F1(d; d/2; x)), d = 3, {k} points x uniform in [0, 1000]:")
    _line("Horner in bins (oprf_simplex)", k, t_horner)
    _line("logaddexp per term (hypergeometric)", k, t_logadd)
    # stress: large arguments, d = 2 (c = -1: the integrand varies like e^{-q W})
    k2 = 2_000
    q = np.geomspace(1e-8, 1e3, k2)
    geom = theory.Geometry(np.full(k2, 2.0), q / 2, q, q)
    print(f"d = 2, {k2} points, |x ± y|² log-spaced in [1e-8, 1e3], m = 2:")
    for kind in ("positive", "hyperbolic", "trig"):
        t_ort = best_of(partial(theory.exact_mse, geom, None, 2, kind,
                                ensemble="orthogonal", log=True))
        t_sim = best_of(partial(theory.exact_mse, geom, None, 2, kind,
                                ensemble="simplex", log=True))
        _line(f"{kind} orthogonal (closed form)", k2, t_ort)
        _line(f"{kind} simplex (quadrature)", k2, t_sim, t_ort)


if __name__ == "__main__":
    main()
