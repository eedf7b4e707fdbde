"""``rfkernels compare``: Monte Carlo against theory on a few geometries, and the bias audit."""

from __future__ import annotations

import itertools
import json
import math

from ..cli import command
from ._options import float_list, int_list, int_value, str_list


def _add(p):
    p.add_argument("--d", type=int_list, default=[16], help="dimensions")
    p.add_argument("--norm-x", dest="norm_x", type=float_list, default=[0.5], help="|x|")
    p.add_argument("--norm-y", dest="norm_y", type=float_list, default=[0.5], help="|y|")
    p.add_argument("--angle", type=float_list, default=[1.0], help="angles, radians in [0, pi]")
    p.add_argument("--m", type=int_list, default=[4, 16], help="numbers of projections")
    p.add_argument("--kind", type=str_list, default=["positive", "hyperbolic", "trig"], help="estimators")
    p.add_argument("--ensemble", type=str_list, default=["iid", "orthogonal"], help="ensembles")
    p.add_argument("--norms", default="chi", help="chi or fixed")
    p.add_argument("--trials", type=int_value, default=100_000, help="trials per row")
    p.add_argument("--seed", type=int_value, default=0, help="root seed")
    p.add_argument("--backend", default="numpy", help="numpy, numba or cupy")
    p.add_argument("--method", default="reduced", help="reduced or literal")
    p.add_argument("--bias-audit", action="store_true",
                   help="also audit the bias of the orthogonal constructions (literal, positive)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def _fmt(v, spec="10.3e"):
    return f"{'-':>10}" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def _flag(v):
    return "-" if v is None else "ok" if v else "NO"


@command("compare", "Monte Carlo MSE against Lemma 2, Theorem 2 and the exact MSE")(_add)
def _run(args):
    from ..analysis.comparison import bias_audit, compare

    geoms = [{"d": d, "norm_x": nx, "norm_y": ny, "angle": a}
             for d, nx, ny, a in itertools.product(args.d, args.norm_x, args.norm_y, args.angle)]
    rows = compare(geoms, args.kind, args.ensemble, args.m, norms=args.norms, trials=args.trials,
                   seed=args.seed, backend=args.backend, method=args.method)
    audit = bias_audit(d=args.d[0], m=args.m[0], seed=args.seed) if args.bias_audit else None
    violated = [r for r in rows if r["exact_le_bound"] is False or r["iid_eq_lemma2"] is False
                or r["mc_consistent"] is False]
    if args.json:
        print(json.dumps({"rows": rows, "bias_audit": audit, "violations": len(violated)},
                         default=float))
    else:
        print(f"{'d':>4} {'|x|':>5} {'|y|':>5} {'angle':>5} {'m':>4} {'kind':>10} {'ensemble':>10} "
              f"{'MC MSE':>10} {'stderr':>10} {'exact':>10} {'Lemma 2':>10} {'Thm 2':>10} "
              f"{'z':>6} {'k_hat':>6} {'tail':>4} {'<=T2':>4} {'MC~ex':>5}")
        for r in rows:
            print(f"{r['d']:4d} {r['norm_x']:5.2f} {r['norm_y']:5.2f} {r['angle']:5.2f} {r['m']:4d} "
                  f"{r['kind']:>10} {r['ensemble']:>10} {_fmt(r['mse_mc'])} {_fmt(r['stderr'])} "
                  f"{_fmt(r['mse_exact'])} {_fmt(r['mse_lemma2'])} {_fmt(r['theorem2_bound'])} "
                  f"{_fmt(r['z'], '6.2f')} {_fmt(r['k_hat'], '6.2f')} "
                  f"{'ok' if r['tail_ok'] else 'HEAVY':>4} {_flag(r['exact_le_bound']):>4} "
                  f"{_flag(r['mc_consistent']):>5}")
        if audit:
            print("\nbias audit (positive features, chi norms, literal sampling):")
            for a in audit:
                print(f"  {a['ensemble']:>22} u ~ {a['direction']:>7}: relative bias "
                      f"{a['relative_bias']:+.4f} ± {a['stderr']:.4f} (z = {a['z']:+.1f})"
                      f"{'  BIASED' if a['biased'] else ''}")
        print(f"\n{len(rows)} rows, {len(violated)} violated statement(s)")
    return 1 if violated else 0
