"""``rfkernels mse``: Monte Carlo MSE at one geometry, beside Lemma 2, Theorem 2 and the exact MSE."""

from __future__ import annotations

import json
import math
import sys

from ..cli import command

_KINDS = "trig, positive, hyperbolic"
_ENSEMBLES = "iid, orthogonal, orthogonal-unfixed-qr"


def _count(text):
    """An integer count written as ``1000000`` or ``1e6`` (non-integers are passed on, and rejected)."""
    try:
        return int(text)
    except ValueError:
        return float(text)


def _add_mse(p):
    p.add_argument("--d", type=int, default=16, help="dimension")
    p.add_argument("--m", type=int, default=8, help="number of projections (features: m positive, 2m trig/hyperbolic)")
    p.add_argument("--norm-x", type=float, default=1.0, help="|x|")
    p.add_argument("--norm-y", type=float, default=1.0, help="|y|")
    p.add_argument("--angle", type=float, default=1.0, help="angle between x and y, radians in [0, pi]")
    p.add_argument("--kind", default="positive", help=f"estimator: {_KINDS}")
    p.add_argument("--ensemble", default="iid", help=f"projections: {_ENSEMBLES}")
    p.add_argument("--norms", default="chi", help="row norms: chi (unbiased) or fixed (sqrt(d))")
    p.add_argument("--trials", type=_count, default=100_000, help="Monte Carlo trials (1e6 is accepted)")
    p.add_argument("--seed", type=int, default=0, help="seed (recorded; same seed, same numbers on every backend)")
    p.add_argument("--backend", default="numba",
                   help="numpy, numba or cupy (numba compiles its kernel once, ~20 s, then caches it)")
    p.add_argument("--method", default="reduced",
                   help="reduced (draw only the scalar projections) or literal (full W, QR, feature maps)")
    p.add_argument("--chunk", type=int, default=None, help="trials per chunk (None: a per-backend default)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none is shown unless stderr is a terminal)")


def theory_values(geom, m, kind, ensemble, norms):
    """Lemma 2 (iid, chi norms) and Theorem 2 (positive, chi norms, m <= d) where they apply."""
    from .. import theory

    lemma2 = theorem2 = None
    if norms == "chi":
        lemma2 = float(theory.lemma2_mse_from_geometry(geom, m, kind))
        if kind == "positive" and m <= int(geom.d):
            theorem2 = float(theory.theorem2_bound_from_geometry(geom, m))
    return lemma2, theorem2


@command("mse", "Monte Carlo MSE of an estimator beside Lemma 2, Theorem 2 and the exact MSE")(_add_mse)
def _run_mse(args):
    from .. import theory
    from ..analysis.monte_carlo import monte_carlo_mse

    x, y = theory.pair(args.d, args.norm_x, args.norm_y, args.angle)
    geom = theory.geometry(x, y)
    lemma2, theorem2 = theory_values(geom, args.m, args.kind, args.ensemble, args.norms)

    bar = progress = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=None, unit="trial", unit_scale=True, file=sys.stderr, leave=False)

        def report(done, total):
            bar.total = total
            bar.update(done - bar.n)

        progress = report

    try:
        res = monte_carlo_mse(
            x, y, args.m, args.kind, ensemble=args.ensemble, norms=args.norms, trials=args.trials,
            seed=args.seed, backend=args.backend, method=args.method, chunk=args.chunk,
            progress=progress,
        )
    finally:
        if bar is not None:
            bar.close()

    if args.json:
        out = {
            "mse_mc": res.mse,
            "mse_lemma2": lemma2,
            "mse_theorem2": theorem2,
            "norm_x": args.norm_x,
            "norm_y": args.norm_y,
            "angle": args.angle,
            "norm_sum_sq": float(geom.s),
            "norm_diff_sq": float(geom.t),
        }
        out.update(res.to_dict())
        print(json.dumps(out, indent=1))
        return 0

    def num(v):
        return "      n/a" if v is None else f"{v:10.4e}"

    r = res
    feats = r.m if r.kind == "positive" else 2 * r.m
    print(f"MSE of the {r.kind} estimator of SM = exp(x.y): {r.ensemble} projections, {r.norms} norms")
    print(f"d = {r.d}, m = {r.m} projections ({feats} features), |x| = {args.norm_x:g}, "
          f"|y| = {args.norm_y:g}, angle = {args.angle:g} rad: |x+y|^2 = {float(geom.s):.4g}, "
          f"|x-y|^2 = {float(geom.t):.4g}, SM = {r.sm:.6g}")
    print(f"{r.trials} trials, {r.method} method, {r.backend} backend, seed {args.seed} "
          f"(entropy {r.seed_entropy}, spawn key {tuple(r.seed_spawn_key)}), {r.elapsed_s:.2f} s")
    print()
    print(f"  Monte Carlo      {num(r.mse)} +- {r.stderr:.2e}   95% CI [{r.ci95[0]:.4e}, {r.ci95[1]:.4e}]")
    z = "" if r.z is None else f"   z = {r.z:+.2f}"
    print(f"  exact            {num(r.mse_exact)}{z}")
    print(f"  Lemma 2 (iid)    {num(lemma2)}")
    print(f"  Theorem 2 bound  {num(theorem2)}" + ("" if theorem2 is None else "   (orthogonal, m <= d)"))
    bz = "" if r.bias_z is None else f"   z = {r.bias_z:+.2f}"
    print(f"  bias             {r.bias:+10.3e} +- {r.bias_stderr:.2e}{bz}")
    k = "n/a" if math.isnan(r.tail.k_hat) else f"{r.tail.k_hat:.2f}"
    share = "n/a" if math.isnan(r.tail.max_share) else f"{r.tail.max_share:.2e}"
    reach = "" if r.tail.reach is None else f", reach = {r.tail.reach:.3g}"
    verdict = "ok" if r.tail_ok else "NOT OK"
    print(f"  tail             k_hat = {k}, largest share = {share}{reach}: {verdict}")
    print(f"                   ({r.tail.note})")
    return 0
