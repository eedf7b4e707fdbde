"""``rfkernels mse``: Monte Carlo MSE at one geometry, beside Lemma 2, Theorem 2 and the exact MSE."""

from __future__ import annotations

import math
import sys

from .cli import command
from ._options import add_kernel_options, angle_in_range, choice, int_value, norm_value, seed_value
from ._output import dumps

_LOG_MAX = math.log(sys.float_info.max)


def _add_mse(p):
    from ..analysis.monte_carlo import AUTO, AUTO_NUMPY_WORK
    from ..backends import BACKENDS
    from ..engine import PROPOSALS

    kinds, ensembles, norms = choice("kind"), choice("ensemble"), choice("norms")
    p.epilog = ("Counts (--d, --m, --trials, --seed, --chunk) may be written 1e6; angles\n"
                "pi, pi/2, 3pi/4 or 2*pi/3 as well as 1.5.\n"
                "--kernel gaussian --gamma G estimates K(x, y) = exp(-gamma |x - y|^2)\n"
                "(scikit-learn's RBF convention) with the same features at sqrt(2 gamma) x,\n"
                "sqrt(2 gamma) y; Theorem 2 is about the softmax kernel only.\n"
                "In --json a value the run does not have is null, with its reason in\n"
                "\"null_reasons\".")
    p.add_argument("--d", type=int_value, default=16, help="dimension")
    p.add_argument("--m", type=int_value, default=8,
                   help="number of projections (output dimension: m for positive, oprf and "
                        "offset, 2m for trig and hyperbolic)")
    p.add_argument("--norm-x", type=norm_value, default=1.0, help="|x|")
    p.add_argument("--norm-y", type=norm_value, default=1.0, help="|y|")
    p.add_argument("--angle", type=angle_in_range, default=1.0,
                   help="angle between x and y, radians in [0, pi] (1.5, pi/2, 3pi/4, ...)")
    p.add_argument("--kind", type=kinds, default="positive",
                   help=f"estimator: {', '.join(kinds.choices)}")
    p.add_argument("--ensemble", type=ensembles, default="iid",
                   help=f"projections: {', '.join(ensembles.choices)} "
                        "(sorf and orthogonal-unfixed-qr: --method literal)")
    p.add_argument("--norms", type=norms, default="chi",
                   help=f"row norms: {', '.join(norms.choices)} (chi: unbiased; fixed: sqrt(d); "
                        "antithetic: chi coupled in pairs of a block)")
    add_kernel_options(p)
    p.add_argument("--trials", type=int_value, default=100_000, help="Monte Carlo trials")
    p.add_argument("--seed", type=seed_value, default=0,
                   help="seed (recorded; same seed, same numbers on every backend)")
    backends = choice(BACKENDS + (AUTO,), "backend")
    p.add_argument("--backend", type=backends, default=AUTO,
                   help=f"{', '.join(backends.choices)} (auto: numpy for at most "
                        f"{AUTO_NUMPY_WORK:.0e} trials x m, with nothing to compile, numba above; "
                        "numba compiles its kernel on first use, then caches it; the same "
                        "numbers on every backend)")
    p.add_argument("--method", default="reduced",
                   help="reduced (draw only the scalar projections) or literal (full W, QR, feature maps)")
    p.add_argument("--chunk", type=int_value, default=None,
                   help="trials per chunk (default: a per-backend choice)")
    proposals = choice(PROPOSALS, "proposal")
    p.add_argument("--proposal", type=proposals, default="auto",
                   help=f"Monte Carlo proposal, one of {', '.join(proposals.choices)}: plain "
                        "(the estimator's own law), tilted (importance sampling of the heavy tail, "
                        "exact weights; reduced method, not trig) or auto (tilted where a plain "
                        "pilot run finds a heavy tail)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (none is shown unless stderr is a terminal)")


def theorem2_reason(kind, ensemble, norms, m, d):
    """Why Theorem 2 says nothing about (kind, ensemble, norms, m, d); None where it applies.

    The estimator's capability (:attr:`rfkernels.estimators.Estimator.supports.theorem2`),
    the one statement of the rule.
    """
    from ..analysis.comparison import theorem2_reason as reason
    from ..estimators import estimator

    return reason(estimator(kind, ensemble=ensemble, norms=norms, m=m, d=d))


def null_reason(key, value, out, est=None):
    """Why ``out[key]`` is null in ``rfkernels mse --json``; None if it is not null.

    ``est``: the run's :class:`rfkernels.estimators.Estimator` (else built
    from ``out``'s kind, ensemble, norms, m and d), whose capabilities say why.
    """
    if value is not None and not (isinstance(value, float) and not math.isfinite(value)):
        return None
    if est is None:
        from ..estimators import estimator

        est = estimator(out.get("kind"), ensemble=out.get("ensemble"), norms=out.get("norms"),
                        m=out.get("m"), d=out.get("d"), kernel=out.get("kernel", "softmax"),
                        gamma=out.get("gamma"))
    from ..analysis.comparison import theorem2_reason

    reasons = {
        "mse_lemma2": est.supports.lemma2.reason or "beyond float64",
        "mse_theorem2": theorem2_reason(est) or "beyond float64",
        "gamma": f"the {est.kernel.name} kernel has no gamma (the Gaussian kernel's parameter)",
        "mse_exact": est.supports.exact_mse.reason,
        "bias_z": "bias_stderr is 0",
        "k_hat": out.get("tail_note"),
        "max_share": "every squared error is 0",
        "reach": "no reach for trig features (bounded estimates)",
        "proposal_shift": "the plain proposal has no tilt",
        "proposal_alpha0": "the plain proposal has no tilt",
        "proposal_wscale": "the plain proposal has no tilt",
        "pilot_k_hat": f"no pilot run ({out.get('proposal_note')})",
    }
    if key == "z":
        if out.get("mse_exact") is None:
            return "no exact MSE to compare with"
        return "no meaningful z: stderr is 0 or the squared errors are at the rounding level (see tail_note)"
    return reasons.get(key)


def theory_values(geom, est):
    """Lemma 2 and Theorem 2 of the estimator ``est`` where its capabilities say they apply."""
    from .. import theory

    def linear(log_value):  # None where the value is beyond float64 (its JSON reason says so)
        return math.exp(log_value) if log_value <= _LOG_MAX else None

    from ..analysis.comparison import theorem2_reason

    lemma2 = theorem2 = None
    if est.supports.lemma2:
        lemma2 = linear(float(theory.lemma2_of(geom, est.m, est)))
    if theorem2_reason(est) is None:
        theorem2 = linear(float(theory.theorem2_bound_from_geometry(geom, est.m, log=True)))
    return lemma2, theorem2


@command("mse", "Monte Carlo MSE of an estimator beside Lemma 2, Theorem 2 and the exact MSE")(_add_mse)
def _run_mse(args):
    from .. import theory
    from ..analysis.monte_carlo import monte_carlo_mse

    from ..estimators import estimator

    est = estimator(args.kind, ensemble=args.ensemble, norms=args.norms, m=args.m, d=args.d,
                    kernel=args.kernel, gamma=args.gamma)  # gamma checked here, once
    x, y = theory.pair(args.d, args.norm_x, args.norm_y, args.angle)
    geom = theory.geometry(x, y)
    lemma2, theorem2 = theory_values(geom, est)

    bar = progress = None
    if not args.no_progress and sys.stderr.isatty():
        from tqdm import tqdm

        bar = tqdm(total=None, unit="trial", unit_scale=True, file=sys.stderr, leave=False)

        def report(done, total):
            bar.total = total
            bar.update(done - bar.n)

        progress = report

    try:
        res = monte_carlo_mse(  # the geometry computed once, above
            geom, None, args.m, est, trials=args.trials,
            seed=args.seed, backend=args.backend, method=args.method, chunk=args.chunk,
            progress=progress, vectors=(x, y), proposal=args.proposal)
    except FloatingPointError as exc:  # raised before any trial: in the options' words
        raise _beyond_float64(exc, args) from None
    finally:
        if bar is not None:
            bar.close()

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
    if args.json:
        print(dumps(out, explain=lambda k, v, o: null_reason(k, v, o, est), indent=1))
        return 0

    def num(key, v):
        """The value, or n/a with the reason --json gives."""
        return f"{v:10.4e}" if v is not None else f"{'n/a':>9}    ({null_reason(key, v, out, est)})"

    r = res
    target, k = "SM = exp(x.y)", "SM"
    if r.kernel != "softmax":
        target, k = f"K = exp(-gamma |x - y|^2), gamma = {r.gamma:g}", "K"
    print(f"MSE of the {r.kind} estimator of {target}: {r.ensemble} projections, {r.norms} norms")
    print(f"d = {r.d}, m = {r.m} projections (output dimension {r.output_dimension}), "
          f"|x| = {args.norm_x:g}, |y| = {args.norm_y:g}, angle = {args.angle:g} rad: "
          f"|x+y|^2 = {float(geom.s):.4g}, |x-y|^2 = {float(geom.t):.4g}, {k} = {r.sm:.6g}")
    print(f"{r.trials} trials, {r.method} method, {r.backend} backend, seed {args.seed} "
          f"(entropy {r.seed_entropy}, spawn key {tuple(r.seed_spawn_key)}), {r.elapsed_s:.2f} s")
    print()
    print(f"  Monte Carlo      {num('mse_mc', r.mse)} +- {r.stderr:.2e}   "
          f"95% CI [{r.ci95[0]:.4e}, {r.ci95[1]:.4e}]")
    z = "" if r.mse_exact is None else (
        f"   z = {r.z:+.2f}" if r.z is not None else f"   z n/a ({null_reason('z', None, out, est)})")
    print(f"  exact            {num('mse_exact', r.mse_exact)}{z}")
    print(f"  Lemma 2 (iid)    {num('mse_lemma2', lemma2)}")
    print(f"  Theorem 2 bound  {num('mse_theorem2', theorem2)}"
          + ("" if theorem2 is None else "   (orthogonal, m <= d)"))
    bz = "" if r.bias_z is None else f"   z = {r.bias_z:+.2f}"
    print(f"  bias             {r.bias:+10.3e} +- {r.bias_stderr:.2e}{bz}")
    k = "n/a" if math.isnan(r.tail.k_hat) else f"{r.tail.k_hat:.2f}"
    share = "n/a" if math.isnan(r.tail.max_share) else f"{r.tail.max_share:.2e}"
    reach = "" if r.tail.reach is None else f", reach = {r.tail.reach:.3g}"
    verdict = "ok" if r.tail_ok else "NOT OK"
    print(f"  tail             k_hat = {k}, largest share = {share}{reach}: {verdict}")
    print(f"                   ({r.tail.note})")
    print(f"  proposal         {proposal_text(r)}")
    print(f"                   ({r.proposal_note})")
    return 0


#: The advice of the API's overflow errors (the pair's vectors), which the options set here.
_API_ADVICE = "rescale x and y"


def _beyond_float64(exc, args):
    """``exc`` (the kernel or the MSE beyond float64) naming the options that set it.

    The API advises to rescale the vectors; here they are --norm-x and
    --norm-y, and with --kernel gaussian also --gamma (the features see
    sqrt(2 gamma) x and sqrt(2 gamma) y). A huge exponent is shown with 4 digits.
    """
    import re

    text = " ".join(str(exc).split())
    if not text.endswith(_API_ADVICE):
        return exc
    what = re.sub(r"e\^([-+0-9.e]+)", lambda g: f"e^{float(g.group(1)):.4g}",
                  text[: -len(_API_ADVICE)].rstrip("; "))
    what = re.sub(r" at pair 0\b", "", what)
    given = f"--norm-x {args.norm_x:g}, --norm-y {args.norm_y:g}, --angle {args.angle:g}"
    reduce = "--norm-x or --norm-y"
    if args.gamma is not None:
        given = f"--gamma {args.gamma:g}, {given}"
        reduce = "--gamma (or --norm-x and --norm-y)"
    return FloatingPointError(f"{given}: {what}; reduce {reduce}")


def proposal_text(r):
    """One line on the proposal a Monte Carlo result ran: the tilt's parameters, the weights' ESS."""
    ess = f"ESS = {r.ess:,.0f} of {r.trials:,} trials ({r.ess / r.trials:.0%})"
    if r.proposal == "plain":
        return f"plain: {ess}"
    shift = ("mu" if r.norms == "chi" else "delta (atanh of the direction)")
    wscale = "" if r.proposal_wscale == 1.0 else f", W scale tau = {r.proposal_wscale:.4g}"
    return (f"tilted: shift {shift} = {r.proposal_shift:.4g}{wscale}, plain share alpha0 = "
            f"{r.proposal_alpha0:g}; {ess}, mean weight {r.weight_mean:.4f}")
