"""``rfkernels check``: the closed forms against each other on built-in geometries."""

from __future__ import annotations

import math

import numpy as np

from .cli import command
from ._output import dumps
from .mse import theorem2_reason

#: (d, |x|, |y|, angle) of the built-in geometries of ``rfkernels check``.
CHECK_GEOMETRIES = (
    (1, 0.5, 0.5, 0.0),
    (1, 0.7, 0.3, np.pi),
    (4, 0.5, 0.5, 1.0),
    (4, 1.0, 1.0, 0.3),
    (16, 0.5, 0.5, 2.0),
    (16, 1.0, 0.8, 0.0),
    (16, 2.0, 2.0, 3.0),
    (64, 0.3, 0.3, 1.5),
    (64, 1.5, 1.5, 0.5),
    (4096, 1e-4, 1e-4, 1.0),
    (4096, 1.0, 1.0, 1.0),
)


def theory_check_rows():
    """Evaluate the closed forms on :data:`CHECK_GEOMETRIES`; one dict per row.

    Checks, each a boolean column:

    - ``iid_eq_lemma2``: the exact iid MSE equals Lemma 2 (relative 1e-10);
    - ``ort_le_bound``: exact orthogonal positive MSE <= Theorem 2 (m <= d);
    - ``ort_le_iid``: orthogonal <= iid for positive and hyperbolic features
      (their pair covariance is negative for every d; trig's is not at large
      |x - y|, so trig rows report the ratio without a verdict).
    """
    from .. import theory

    rows = []
    for d, nx, ny, angle in CHECK_GEOMETRIES:
        geom = theory.geometry_from_angle(d, nx, ny, angle)
        for m in sorted({1, max(1, d // 2), d, 2 * d + 1}):
            for kind in ("positive", "hyperbolic", "trig"):
                lemma = float(theory.lemma2_mse_from_geometry(geom, m, kind, log=True))
                iid = float(theory.exact_mse(geom, None, m, kind, log=True))
                ort = float(
                    theory.exact_mse(geom, None, m, kind, ensemble="orthogonal", log=True)
                )
                bound = None  # the rows' orthogonal MSE is exact_mse's: chi norms
                if theorem2_reason(kind, "orthogonal", "chi", m, d) is None:
                    bound = float(theory.theorem2_bound_from_geometry(geom, m, log=True))
                row = {
                    "d": d, "norm_x": nx, "norm_y": ny, "angle": angle, "m": m, "kind": kind,
                    "log_lemma2": lemma, "log_exact_iid": iid, "log_exact_orthogonal": ort,
                    "log_theorem2_bound": bound,
                    "iid_eq_lemma2": bool(
                        (lemma == iid == -np.inf) or abs(np.expm1(iid - lemma)) <= 1e-10
                    ),
                    "ort_le_bound": None if bound is None else bool(ort <= bound + 1e-12),
                    "ort_le_iid": None if kind == "trig" else bool(ort <= iid + 1e-12),
                }
                row["ok"] = all(row[k] is not False for k in ("iid_eq_lemma2", "ort_le_bound", "ort_le_iid"))
                rows.append(row)
    return rows


def _add_check(p):
    p.epilog = ("An MSE of exactly 0 (log-MSE -inf) is shown as 0 in text and as null with\n"
                "its reason in --json (each row's \"null_reasons\").\n\n"
                "Exit status: 0 every statement held; 1 a violation; 2 bad input.")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")


def null_reason(key, value, row):
    """Why ``row[key]`` is null in ``rfkernels check --json``; None if it is not null."""
    if isinstance(value, float) and value == -math.inf and key.startswith("log_"):
        return "the MSE is exactly 0 (log = -inf)"
    if value is not None:
        return None
    if key in ("log_theorem2_bound", "ort_le_bound"):
        return (theorem2_reason(row["kind"], "orthogonal", "chi", row["m"], row["d"])
                or "not computed")
    if key == "ort_le_iid":
        return ("no verdict for trig features: their pair covariance is not negative "
                "for every d")
    return None


@command("check", "verify Lemma 2, Theorem 2 and the exact MSE against each other")(_add_check)
def _run_check(args):
    rows = theory_check_rows()
    failures = [r for r in rows if not r["ok"]]
    if args.json:
        print(dumps({"rows": rows, "failures": len(failures)}, explain=null_reason, indent=1))
    else:
        def fmt(v):
            if v is None:
                return "      -   "
            if v == -math.inf:
                return f"{0:10d}"
            return f"{np.exp(v):10.3e}" if v > -700 else f"e^{v:8.1f}"

        def flag(v):
            return "  -" if v is None else " ok" if v else "BAD"

        print("MSE of the estimate of exp(x.y); m = number of projections")
        print(f"{'d':>5} {'|x|':>6} {'|y|':>6} {'angle':>5} {'m':>5} {'kind':>10} "
              f"{'Lemma 2':>10} {'exact iid':>10} {'exact ort':>10} {'Thm 2':>10} "
              f"{'iid=L2':>6} {'ort<=T2':>7} {'ort<=iid':>8}")
        for r in rows:
            print(f"{r['d']:5d} {r['norm_x']:6.3g} {r['norm_y']:6.3g} {r['angle']:5.2f} {r['m']:5d} "
                  f"{r['kind']:>10} {fmt(r['log_lemma2'])} {fmt(r['log_exact_iid'])} "
                  f"{fmt(r['log_exact_orthogonal'])} {fmt(r['log_theorem2_bound'])} "
                  f"{flag(r['iid_eq_lemma2']):>6} {flag(r['ort_le_bound']):>7} {flag(r['ort_le_iid']):>8}")
        print("\n-: Theorem 2 bounds positive features with m <= d only; no ort<=iid verdict for trig\n"
              "   features (their pair covariance is not negative for every d)")
        print(f"{len(rows)} rows, {len(failures)} violation(s)")
    return 1 if failures else 0


