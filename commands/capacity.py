"""``rfkernels capacity``: how many key/value pairs a linear-attention feature map stores.

Runs :func:`rfkernels.analysis.capacity` (random keys and values, sum rule
and least-squares readout) and prints, per feature map, the state size
d_dot and the first n at which each readout fails; ``--json`` prints every
row and the failure points as one strict JSON object.
"""

from __future__ import annotations

import sys

from .cli import command
from ._options import LIST_NOTE, add_list, check_count_memory, float_value, int_value, seed_value
from ._output import dumps

#: Default stored-pair counts of the table (the failure points are searched over all n up to the largest).
DEFAULT_N = (16, 64, 65, 128, 129, 256, 257, 384, 385, 512, 513, 600)


def _add_capacity(p):
    from rfkernels.analysis.capacity import DEFAULT_MAPS, MAP_GRAMMAR

    p.epilog = (LIST_NOTE + "\n\nFeature maps: " + MAP_GRAMMAR + ".\n"
                "Least squares fails where the relative retrieval error exceeds --fail-tol;\n"
                "the sum rule where the signal-to-crosstalk ratio falls below 1. In --json a\n"
                "value the run does not have is null, with its reason in \"null_reasons\".")
    p.add_argument("--d-k", type=int_value, default=64, help="key dimension")
    p.add_argument("--d-v", type=int_value, default=None, help="value dimension (default: d_k)")
    add_list(p, "--n", convert=int_value, default=DEFAULT_N,
             help="numbers of stored pairs in the table (failures are searched up to the largest)")
    add_list(p, "--map", convert=str, default=DEFAULT_MAPS, help="feature maps")
    p.add_argument("--trials", type=int_value, default=5, help="random key/value pools")
    p.add_argument("--key-scale", type=float_value, default=1.0,
                   help="sigma: keys are N(0, sigma^2/d_k I), so E|k|^2 = sigma^2")
    p.add_argument("--fail-tol", type=float_value, default=1e-6,
                   help="least-squares failure: relative retrieval error above this")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed (SeedSequence entropy)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def _null_reason(meta):
    reasons = meta.get("null_reasons", {})

    def explain(key, value, row):
        if value is not None:
            return None
        if row.get("map") == "softmax" and (key.startswith("ls_") or key == "d_dot"):
            return reasons.get("least_squares") if key != "d_dot" else reasons.get("d_dot")
        if key.startswith(("ls_fail", "sum_fail")):
            return reasons.get("failures", "the readout did not fail in every trial up to the "
                                           "largest n")
        if key.startswith("scr"):
            return reasons.get("scr_mean", "n = 1: no crosstalk")
        if key in ("nu", "m", "ensemble"):
            return "not a parameter of this feature map"
        if key == "d_v":  # of "arguments": --d-v not given
            return "not given: d_v = d_k"
        return None

    return explain


def _check_run_memory(args, maps):
    """MemoryError naming the options, before any work, where one trial's arrays do not fit.

    The estimate of :func:`rfkernels.analysis.capacity` (keys, values, features and
    Gram matrices at the largest n and feature count), stated in the command's options.
    """
    from rfkernels.validation import check_memory

    d_k = args.d_k
    d_v = d_k if args.d_v is None else args.d_v
    if d_k < 1 or d_v < 1 or min(args.n) < 1:
        return  # the analysis names the bad value
    n_max = max(args.n)
    r_max = max([r for r in (s.d_dot(d_k) for s in maps) if r is not None], default=1)
    check_memory(8 * (3 * n_max * r_max + 3 * n_max * n_max + 2 * n_max * (d_k + d_v)),
                 f"capacity with --n up to {n_max}, --d-k {d_k}, --d-v {d_v} and up to {r_max} "
                 "features per --map", reduce="--n, --d-k, --d-v or the maps' features (--map)")


@command("capacity", "memory capacity of linear attention: ELU+1, DPFP and FAVOR+ (Kernel Zoo)")(
    _add_capacity
)
def _run_capacity(args):
    from tqdm import tqdm

    from rfkernels.analysis.capacity import capacity, parse_map

    maps = [parse_map(m) for m in args.map]  # one-line errors before any work
    _check_run_memory(args, maps)
    # per trial: 4 float64 arrays over (map, n), and each map's failure points (2 lists, copied)
    check_count_memory("--trials", args.trials, len(maps) * (32 * len(set(args.n)) + 32),
                       f"the per-trial results of {len(maps)} maps at {len(set(args.n))} values of n")
    bar = tqdm(total=args.trials * len(maps), unit="map", file=sys.stderr,
               disable=not sys.stderr.isatty(), desc="rfkernels capacity")
    try:
        res = capacity(args.d_k, args.n, maps, d_v=args.d_v, trials=args.trials,
                       key_scale=args.key_scale, seed=args.seed, fail_tol=args.fail_tol,
                       progress=bar.update)
    finally:
        bar.close()
    if args.json:
        print(dumps({"command": "capacity",
                     "arguments": {k: v for k, v in vars(args).items() if k != "command"},
                     "parameters": {k: v for k, v in res.meta.items() if k != "null_reasons"},
                     "failures": res.failures, "rows": res.rows},
                    explain=_null_reason(res.meta), indent=1))
        return 0

    meta = res.meta
    n_max = meta["n_values"][-1]
    print(f"Capacity of linear attention: d_k = {meta['d_k']}, d_v = {meta['d_v']}, "
          f"{meta['trials']} trials, keys N(0, {meta['key_scale']:g}^2/d_k I), seed {args.seed}")
    print(f"first failing n (median [min, max] over trials; '>{n_max}': none up to n = {n_max})")
    print(f"  least squares: relative retrieval error > {meta['fail_tol']:g};  "
          "sum rule: signal-to-crosstalk ratio < 1")

    def fail(f, key):
        med, lo, hi = f[f"{key}_median"], f[f"{key}_min"], f[f"{key}_max"]
        if med is None:
            return f">{n_max}" if lo is None else f"{lo}..>{n_max}"
        return f"{med:g} [{lo}, {hi}]"

    print(f"{'map':>26} {'d_dot':>6} {'least squares':>18} {'sum rule':>18}")
    for f in res.failures:
        exact = f["map"] == "softmax"
        d_dot = "inf" if exact else str(f["d_dot"])
        ls = "n/a" if exact else fail(f, "ls_fail")
        print(f"{f['label']:>26} {d_dot:>6} {ls:>18} {fail(f, 'sum_fail'):>18}")
    print()
    print(f"{'map':>26} {'n':>5} {'LS error':>10} {'rank':>6} {'sum error':>10} {'SCR':>8}")
    for r in res.rows:
        scr = "n/a" if r["scr_mean"] is None else f"{r['scr_mean']:.3g}"
        ls = ("n/a", "n/a") if r["ls_error_mean"] is None else (
            f"{r['ls_error_mean']:.2e}", f"{r['ls_rank_mean']:.1f}")
        print(f"{r['label']:>26} {r['n']:5d} {ls[0]:>10} {ls[1]:>6} "
              f"{r['sum_error_mean']:10.3g} {scr:>8}")
    if "least_squares" in meta.get("null_reasons", {}):
        print("n/a: " + meta["null_reasons"]["least_squares"])
    print(f"({meta['seconds']:.1f} s)")
    return 0
