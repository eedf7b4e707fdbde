"""``rfkernels compare``: Monte Carlo against theory on a few geometries, and the bias audit."""

from __future__ import annotations

import itertools
import math
import re

from .. import theory
from .cli import command
from ._options import LIST_NOTE, add_list, angle_in_range, choice, int_value, norm_value, seed_value
from ._output import dumps
from .mse import theorem2_reason

_EPILOG = LIST_NOTE + """

Every row combines each --d, --norm-x, --norm-y, --angle, --m, --kind and
--ensemble. A value beyond float64 is shown as "overflow" with its natural log
in the notes below the table; a value a row does not have (e.g. Theorem 2 for
iid rows) is shown as "-" (in --json: null, with the reason in the row's
"null_reasons"). --bias-audit runs rfkernels.analysis.bias_audit for every
--d and --m given, with --trials trials per (ensemble, direction), |x + y| = 1.

Exit status: 0 every statement checked held and every value was computed;
1 a statement was violated or a row has a value beyond float64 (or its Monte
Carlo could not run); 2 bad input. Text and --json report the same facts.
The "proposal" column says which law each row's Monte Carlo drew from (plain,
or tilted: importance sampling with exact weights, whose effective sample
size is "ess" in --json)."""

#: The ensembles of the rows where --ensemble is not given (those the norm law applies to).
DEFAULT_ENSEMBLES = ("iid", "orthogonal")

#: Monte Carlo columns of a row: all NaN when its Monte Carlo did not run.
_MC_COLUMNS = ("mse_mc", "stderr", "ci_low", "ci_high", "bias", "bias_stderr", "z", "k_hat",
               "max_share", "tail_ok", "proposal", "ess")

#: Statements of :func:`rfkernels.analysis.comparison.statements`.
_STATEMENTS = ("exact_le_bound", "iid_eq_lemma2", "mc_consistent")


def _add(p):
    from ..backends import BACKENDS
    from ..engine import PROPOSALS

    p.epilog = _EPILOG
    add_list(p, "--d", convert=int_value, default=[16], help="dimensions")
    add_list(p, "--norm-x", dest="norm_x", convert=norm_value, default=[0.5], help="|x|")
    add_list(p, "--norm-y", dest="norm_y", convert=norm_value, default=[0.5], help="|y|")
    add_list(p, "--angle", convert=angle_in_range, default=[1.0],
             help="angles, radians in [0, pi] (1.5, pi/2, 3pi/4, ...)")
    add_list(p, "--m", convert=int_value, default=[4, 16], help="numbers of projections")
    kinds, ensembles, norms = choice("kind"), choice("ensemble"), choice("norms")
    add_list(p, "--kind", convert=kinds, default=["positive", "hyperbolic", "trig"],
             help=f"estimators among {', '.join(kinds.choices)}")
    add_list(p, "--ensemble", convert=ensembles,
             help=f"ensembles among {', '.join(ensembles.choices)} (default: "
                  f"{','.join(DEFAULT_ENSEMBLES)}, those --norms applies to)")
    p.add_argument("--norms", type=norms, default="chi", help=f"row norms: {', '.join(norms.choices)}")
    p.add_argument("--trials", type=int_value, default=100_000,
                   help="Monte Carlo trials per row (and per bias-audit row)")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed")
    backends = choice(BACKENDS, "backend")
    p.add_argument("--backend", type=backends, default="numpy", help=", ".join(backends.choices))
    p.add_argument("--method", default="reduced", help="reduced or literal")
    proposals = choice(PROPOSALS, "proposal")
    p.add_argument("--proposal", type=proposals, default="auto",
                   help=f"Monte Carlo proposal, one of {', '.join(proposals.choices)}: plain, "
                        "tilted (importance sampling of the heavy tail; trig rows stay plain) or "
                        "auto (tilted where a plain pilot finds a heavy tail)")
    p.add_argument("--bias-audit", action="store_true",
                   help="also audit the bias of the orthogonal constructions (literal, positive) "
                        "for every --d and --m")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def _overflow_note(key, note):
    """The part of a row's note saying that ``key`` is beyond float64, or None."""
    found = re.search(rf"\b{re.escape(key)} beyond float64: log = [^;]*", note or "")
    return found.group(0) if found else None


def _mc_not_run(note):
    """The part of a row's note saying that its Monte Carlo did not run, or None."""
    i = (note or "").find("Monte Carlo not run")
    return None if i < 0 else note[i:]


def _missing(v):
    return v is None or v == "" or (isinstance(v, float) and not math.isfinite(v))


def null_reason(key, value, row):
    """Why ``row[key]`` is null (NaN, None or, for ``tail_ok``, empty); None if it is not."""
    if not _missing(value):
        return None
    note = row.get("note", "")
    over = _overflow_note(key, note)
    if over:
        return over
    not_run = _mc_not_run(note)
    if (key in _MC_COLUMNS or key == "mc_consistent") and not_run:
        return not_run
    if key == "mse_exact":
        if "beyond the range of its quadrature" in note:
            return "mse_exact beyond the range of its quadrature"
        return theory.no_closed_form_reason(row["kind"], row["ensemble"], row["norms"])
    if key == "mse_lemma2":  # the row's own estimator: antithetic norms have no iid estimator
        from ..estimators import estimator

        return estimator(row["kind"], ensemble=row["ensemble"],
                         norms=row["norms"]).supports.lemma2.reason
    if key == "theorem2_bound":
        return (theorem2_reason(row["kind"], row["ensemble"], row["norms"], row["m"], row["d"])
                or "not computed")
    if key == "z":
        if _missing(row.get("mse_exact")):
            return "no exact MSE at this row"
        return "no z: the Monte Carlo result gives none (e.g. stderr 0 or below rounding level)"
    if key == "k_hat":
        return "no tail fit (too few trials, or tied or constant squared errors)"
    if key == "max_share":
        return "every squared error is 0"
    if key in ("proposal", "ess"):
        return "no Monte Carlo at this row"
    if key in ("stderr", "ci_low", "ci_high", "bias_stderr", "bias", "mse_mc"):
        return "not computed"
    if key == "exact_le_bound":
        return "no Theorem 2 bound or no exact MSE at this row"
    if key == "iid_eq_lemma2":
        return ("checked on iid rows only" if row.get("ensemble") != "iid"
                else "no finite Lemma 2 or exact MSE at this row")
    if key == "mc_consistent":
        if row.get("tail_ok") is not True:
            return "inconclusive: the tail diagnostic says the standard error cannot be trusted"
        return "inconclusive: no z at this row"
    if key == "norm_sum":
        return "the geometry is given by norm_x and norm_y"
    return None


def _row_status(r):
    """(violated, out_of_range) for one row."""
    violated = any(r[k] is False for k in _STATEMENTS)
    out_of_range = bool(_overflow_note_any(r["note"]) or _mc_not_run(r["note"]))
    return violated, out_of_range


def _overflow_note_any(note):
    return "beyond float64" in (note or "")


def _cell(r, key, spec="10.3e", width=10):
    v = r[key]
    if not _missing(v):
        return format(v, spec)
    if _overflow_note(key, r["note"]) or (key in _MC_COLUMNS and _mc_not_run(r["note"])):
        text = "overflow" if _overflow_note(key, r["note"]) else "not run"
    else:
        text = "-"
    return f"{text:>{width}}"


def _flag(v):
    return "-" if v is None else "ok" if v else "NO"


def _tail(v):
    return "-" if v == "" or v is None else "ok" if v else "HEAVY"


@command("compare", "Monte Carlo MSE against Lemma 2, Theorem 2 and the exact MSE")(_add)
def _run(args):
    from ..analysis.comparison import bias_audit, compare

    args.ensemble = _ensembles(args.norms, args.ensemble)
    if args.bias_audit:  # before any work
        _check_audit_memory(args.d, args.m, args.trials)
    geoms = [{"d": d, "norm_x": nx, "norm_y": ny, "angle": a}
             for d, nx, ny, a in itertools.product(args.d, args.norm_x, args.norm_y, args.angle)]
    rows = compare(geoms, args.kind, args.ensemble, args.m, norms=args.norms, trials=args.trials,
                   seed=args.seed, backend=args.backend, method=args.method,
                   proposal=args.proposal)
    audit = None
    if args.bias_audit:
        audit = []
        for d, m in itertools.product(dict.fromkeys(args.d), dict.fromkeys(args.m)):
            audit.extend(bias_audit(d=d, m=m, trials=args.trials, seed=args.seed))
    status = [_row_status(r) for r in rows]
    violated = sum(v for v, _ in status)
    out_of_range = sum(o for _, o in status)
    exit_status = 1 if violated or out_of_range else 0
    if args.json:
        rows_out = [dict(r, tail_ok=None if r["tail_ok"] == "" else r["tail_ok"],
                         proposal=r["proposal"] or None) for r in rows]
        print(dumps({"rows": rows_out, "bias_audit": audit, "violations": violated,
                     "out_of_range": out_of_range, "exit_status": exit_status},
                    explain=_explain_any))
        return exit_status
    print(f"{'#':>3} {'d':>4} {'|x|':>5} {'|y|':>5} {'angle':>5} {'m':>4} {'kind':>10} {'ensemble':>10} "
          f"{'MC MSE':>10} {'stderr':>10} {'exact':>10} {'Lemma 2':>10} {'Thm 2':>10} "
          f"{'z':>8} {'k_hat':>8} {'tail':>5} {'proposal':>8} {'<=T2':>4} {'MC~ex':>5}")
    for i, r in enumerate(rows, 1):
        print(f"{i:3d} {r['d']:4d} {r['norm_x']:5.2f} {r['norm_y']:5.2f} {r['angle']:5.2f} {r['m']:4d} "
              f"{r['kind']:>10} {r['ensemble']:>10} {_cell(r, 'mse_mc')} {_cell(r, 'stderr')} "
              f"{_cell(r, 'mse_exact')} {_cell(r, 'mse_lemma2')} {_cell(r, 'theorem2_bound')} "
              f"{_cell(r, 'z', '8.2f', 8)} {_cell(r, 'k_hat', '8.2f', 8)} "
              f"{_tail(r['tail_ok']):>5} {r['proposal'] or '-':>8} {_flag(r['exact_le_bound']):>4} "
              f"{_flag(r['mc_consistent']):>5}")
    print("-: the row has no such value or statement, or the statement is inconclusive "
          "(--json gives each reason)")
    notes = [(i, r["note"]) for i, r in enumerate(rows, 1) if r["note"]]
    if notes:
        print("\nnotes:")
        for i, note in notes:
            print(f"  row {i}: {note}")
    if audit:
        print(f"\nbias audit (positive features, chi norms, literal sampling, x = y = u/2, "
              f"|u| = 1, {args.trials} trials per row):")
        print(f"  {'d':>4} {'m':>4} {'ensemble':>22} {'u ~':>7} {'relative bias':>14} "
              f"{'stderr':>8} {'z':>7}")
        for a in audit:
            rel = _audit_cell(a["relative_bias"], "+14.4f", 14)
            se = _audit_cell(a["stderr"], "8.4f", 8)
            z = _audit_cell(a["z"], "+7.1f", 7)
            print(f"  {a['d']:4d} {a['m']:4d} {a['ensemble']:>22} {a['direction']:>7} {rel} {se} {z}"
                  f"{'  BIASED' if a['biased'] else ''}")
    print(f"\n{len(rows)} rows: {violated} with a violated statement, {out_of_range} with a value "
          f"beyond float64 or no Monte Carlo; exit status {exit_status}")
    return exit_status


def _ensembles(norms, given):
    """The rows' ensembles: ``given``, or the defaults the norm law applies to (antithetic: not iid).

    A given ensemble the law refuses is a ValueError naming --ensemble and --norms.
    """
    from ..estimators import registry

    law = registry.entry("norms", norms)
    if given is None:
        return [e for e in DEFAULT_ENSEMBLES if law.refusal(e) is None]
    for ens in given:
        refused = law.refusal(ens)
        if refused is not None:
            raise ValueError(f"--ensemble {ens} with --norms {norms}: {refused}")
    return given


#: Peak memory of one bias_audit call over the bytes of its projections (trials x
#: ceil(m/d) x d x d float64), with a margin over the measured ratios (docs/performance.md).
_AUDIT_MEMORY_FACTOR = 7


def _check_audit_memory(ds, ms, trials):
    """MemoryError before any work if one bias-audit call needs more memory than the machine has.

    (This estimate belongs in rfkernels.analysis.bias_audit; it is here until that checks itself.)
    """
    from ..validation import check_memory

    for d in ds:
        for m in ms:
            if isinstance(d, int) and isinstance(m, int) and d > 0 and m > 0 and trials > 0:
                nbytes = _AUDIT_MEMORY_FACTOR * trials * -(-m // d) * d * d * 8
                check_memory(nbytes, f"the bias audit at d = {d}, m = {m} with {trials} trials")


def _audit_cell(v, spec, width):
    if isinstance(v, float) and not math.isfinite(v):
        return f"{'NaN' if math.isnan(v) else 'inf':>{width}}"
    return format(v, spec)


def _explain_any(key, value, row):
    """null_reason for comparison rows; a generic reason for bias-audit rows and the top level."""
    if "mse_exact" in row:
        return null_reason(key, value, row)
    if key == "bias_audit" and value is None:
        return "not run: pass --bias-audit"
    if key == "z" and value is not None and row.get("stderr") == 0:
        return "stderr is 0: every trial gave the same relative error"
    return None
