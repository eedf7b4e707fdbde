"""The short report written beside the figures: did theory and Monte Carlo agree?"""

from __future__ import annotations

import math
import os


def _mc_rows(data):
    rows = []
    for key, value in data.items():
        if key.startswith("monte_carlo") and isinstance(value, list):
            rows += [r for r in value if "z" in r]
    return rows


def summarise(results):
    """Per figure: Monte Carlo points, how many were consistent with theory (|z| < 4)."""
    lines = []
    total_bad = 0
    for name, res in results.items():
        rows = _mc_rows(res.data)
        if not rows:
            lines.append({"figure": name, "points": 0})
            continue
        tame = [r for r in rows if r.get("tail_ok") is True and math.isfinite(r["z"])]
        bad = [r for r in tame if abs(r["z"]) >= 4]
        total_bad += len(bad)
        lines.append({"figure": name, "points": len(rows), "tame": len(tame),
                      "inconsistent": len(bad),
                      "max_abs_z": max((abs(r["z"]) for r in tame), default=float("nan")),
                      "heavy_tailed": len(rows) - len(tame)})
    return lines, total_bad


def write_report(results, out_dir, seconds):
    lines, bad = summarise(results)
    text = ["# rfkernels figures: theory against Monte Carlo", ""]
    text.append("| figure | MC points | tame tail | |z| >= 4 | max |z| (tame) | heavy-tailed |")
    text.append("|---|---|---|---|---|---|")
    for r in lines:
        if r["points"] == 0:
            text.append(f"| {r['figure']} | 0 (theory only or no z) | | | | |")
        else:
            text.append(f"| {r['figure']} | {r['points']} | {r['tame']} | {r['inconsistent']} | "
                        f"{r['max_abs_z']:.2f} | {r['heavy_tailed']} |")
    text += ["", f"{bad} tame point(s) inconsistent with the exact MSE at |z| >= 4.",
             "Heavy-tailed points (Pareto k-hat of the squared errors >= 0.5) have untrustworthy "
             "standard errors and are drawn hollow.", "", f"Total time: {seconds:.1f} s.", ""]
    path = os.path.join(out_dir, "report.md")
    with open(path, "w") as fh:
        fh.write("\n".join(text))
    return path, bad
