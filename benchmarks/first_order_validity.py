"""Where the first-order attention theory holds: its ratio to Monte Carlo against its validity flag.

:func:`rfkernels.analysis.diagnose` flags the first-order (delta-method)
MSE valid where the normalisers' predicted relative standard deviation is
at most ``NORMALISER_SD_MAX`` (0.1). This study checks the flag: inputs of
:func:`rfkernels.analysis.attention_inputs` (L = 256, d = d_v = 16, rows of
Q and K N(0, sigma^2/d I), kernel exp(q.k): ``scale=1``) for several sigma,
iid projections, m = 16, 64, 256, 16 draws on every row, the first-order
theory on 64 rows; it prints, per row, the ratio first order / Monte Carlo
with its error, the normalisers' relative sd and the flag, then the range
of the ratio among rows flagged valid and not. No numbers asserted.

    python benchmarks/first_order_validity.py [--draws 16]
"""

from __future__ import annotations

import argparse

from rfkernels.analysis import attention_inputs, diagnose


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--draws", type=int, default=16)
    args = parser.parse_args()
    print("| sigma | kind | m | first order / MC | normaliser sd | valid |")
    print("|---|---|---|---|---|---|")
    ratios = {True: [], False: []}
    for i, sigma in enumerate((0.25, 0.5, 0.75, 1.0, 1.5)):
        q, k, v = attention_inputs(256, 16, input_scale=sigma, seed=i)
        res = diagnose(q, k, v, m=(16, 64, 256), kinds=["trig", "positive", "hyperbolic"],
                       ensembles=["iid"], draws=args.draws, queries=256, first_order_queries=64,
                       scale=1.0, pairs=5000, seed=0)
        for r in res.summary:
            ratio = r["first_order_ratio"]
            err = ratio * r["attention_mse_stderr"] / r["attention_mse"]
            ratios[r["first_order_valid"]].append(ratio)
            print(f"| {sigma} | {r['kind']} | {r['m']} | {ratio:.3g} ± {err:.2g} | "
                  f"{r['normaliser_rel_sd']:.3g} | {'yes' if r['first_order_valid'] else 'no'} |")
    for flag, values in ratios.items():
        if values:
            print(f"\nflagged {'valid' if flag else 'not valid'}: {len(values)} rows, ratio "
                  f"{min(values):.3g} to {max(values):.3g}")


if __name__ == "__main__":
    main()
