"""The report written beside the figures: did theory and Monte Carlo agree, and how was it run?

``report.md`` (Markdown: a table per figure, then the provenance that
``sweep.json`` records for a sweep: versions, git revision, seed, trials,
backend, elapsed seconds) and ``figures.json`` (the same as strict JSON, and
the manifest of the files written; see :mod:`rfkernels.figures._output`).
Each figure's line also has its measured wall and CPU seconds and its
declared budget (:func:`rfkernels.figures.budget`); the provenance says how
many worker processes made the figures.
"""

from __future__ import annotations

import datetime
import math
import os

from rfkernels.storage import atomic_write, git_revision, package_versions

from ._common import naming
from ._output import FORMAT, REPORT_HEADER, REPORT_NAME, manifest_files, write_manifest

#: |z| at and above which a Monte Carlo point with a tame tail is inconsistent with theory.
Z_LIMIT = 4


def _mc_rows(data):
    rows = []
    for key, value in data.items():
        if key.startswith("monte_carlo") and isinstance(value, list):
            rows += [r for r in value if "z" in r]
    return rows


#: Keys of a Monte Carlo row holding the theory it is checked against.
_THEORY_KEYS = ("mse_exact", "ratio_theory")


def _has_theory(row):
    """Whether the row has a closed form to check its Monte Carlo value against."""
    return any(isinstance(row.get(k), (int, float)) and math.isfinite(row[k]) for k in _THEORY_KEYS)


def summarise(results):
    """Per figure: Monte Carlo points, how many were consistent with theory (|z| < 4).

    Returns ``(lines, total_bad)``; each line is a dict with ``figure``,
    ``points``, ``tame``, ``inconsistent``, ``max_abs_z`` (None, with
    ``max_abs_z_reason``, when no point has a tame tail and a finite z),
    ``heavy_tailed``, ``tilted`` (points whose trials came from the tilted
    importance-sampling proposal), ``hollow_with_theory`` (points with a
    closed form whose tail is still not tame: drawn hollow), the figure's
    ``run`` (trials, backend, proposal) and its ``seconds``, ``cpu_seconds``
    and ``budget_seconds`` (None where not measured or declared).
    """
    lines = []
    total_bad = 0
    for name, res in results.items():
        rows = _mc_rows(res.data)
        run = dict(res.data.get("run", {}))
        if not rows:
            lines.append({"figure": name, "points": 0, "run": run, **_timing(res)})
            continue
        tame = [r for r in rows if r.get("tail_ok") is True and math.isfinite(r["z"])]
        bad = [r for r in tame if abs(r["z"]) >= Z_LIMIT]
        total_bad += len(bad)
        line = {"figure": name, "points": len(rows), "tame": len(tame), "inconsistent": len(bad),
                "max_abs_z": max((abs(r["z"]) for r in tame), default=None),
                "heavy_tailed": len(rows) - len(tame),
                "tilted": sum(r.get("proposal") == "tilted" for r in rows),
                "hollow_with_theory": sum(_has_theory(r) and r.get("tail_ok") is not True
                                          for r in rows),
                "run": run, **_timing(res)}
        if line["max_abs_z"] is None:
            line["max_abs_z_reason"] = "no Monte Carlo point with a tame tail and a finite z"
        lines.append(line)
    return lines, total_bad


def _timing(res):
    def seconds(value):
        return None if value is None else round(float(value), 3)

    return {"seconds": seconds(getattr(res, "seconds", None)),
            "cpu_seconds": seconds(getattr(res, "cpu_seconds", None)),
            "budget_seconds": seconds(getattr(res, "budget_seconds", None))}


def _seconds_cell(value):
    return "" if value is None else f"{value:.1f}"


def escape_cell(text):
    """A Markdown table cell: ``|`` escaped as ``\\|``, newlines as spaces."""
    return " ".join(str(text).split()).replace("|", r"\|")


def markdown_table(header, rows):
    """A GitHub-flavoured Markdown table (every cell escaped), as a list of lines."""
    def line(cells):
        return "| " + " | ".join(escape_cell(c) for c in cells) + " |"

    out = [line(header), "|" + "|".join("---" for _ in header) + "|"]
    for r in rows:
        if len(r) != len(header):
            raise ValueError(f"table row has {len(r)} cells, the header {len(header)}")
        out.append(line(r))
    return out


def _trials(run):
    if run.get("trials") is None:
        return "theory only"
    return f"{run['trials']:,} {run.get('unit', 'trials per point')}"


def provenance(seconds, *, seed, quick, workers=1, cpus=None):
    """What produced the figures: versions, git revision, seed, mode, workers, elapsed seconds."""
    import matplotlib

    return {"versions": {**package_versions(), "matplotlib": matplotlib.__version__},
            "git_revision": git_revision(), "seed": int(seed), "quick": bool(quick),
            "workers": int(workers), "usable_cpus": None if cpus is None else int(cpus),
            "elapsed_seconds": round(float(seconds), 3),
            "written": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}


def report_text(lines, bad, prov):
    """The Markdown of ``report.md`` from :func:`summarise`'s lines and :func:`provenance`."""
    header = ["figure", "MC points", "trials", "backend", "tame tail", f"|z| >= {Z_LIMIT}",
              "max |z| (tame)", "heavy-tailed", "tilted", "hollow with theory", "seconds", "CPU s",
              "budget s"]
    rows = []
    for r in lines:
        run = r["run"]
        common = [r["figure"], r["points"], _trials(run), run.get("backend") or "none (theory)"]
        times = [_seconds_cell(r.get(k)) for k in ("seconds", "cpu_seconds", "budget_seconds")]
        if r["points"] == 0:
            rows.append(common + ["no theory-vs-Monte-Carlo z", "", "", "", "", ""] + times)
        else:
            z = "n/a" if r["max_abs_z"] is None else f"{r['max_abs_z']:.2f}"
            rows.append(common + [r["tame"], r["inconsistent"], z, r["heavy_tailed"], r["tilted"],
                                  r["hollow_with_theory"]] + times)
    tilted = sum(r.get("tilted", 0) for r in lines)
    hollow = sum(r.get("hollow_with_theory", 0) for r in lines)
    v = prov["versions"]
    text = [REPORT_HEADER, ""]
    text += markdown_table(header, rows)
    text += ["", f"{bad} tame point(s) inconsistent with the exact MSE at |z| >= {Z_LIMIT}.",
             ("Heavy-tailed points (Pareto k-hat of the squared errors >= 0.5) have untrustworthy "
              "standard errors and are drawn hollow."),
             (f"{tilted} Monte Carlo point(s) drew their trials from the tilted (importance-sampling) "
              "proposal, which proposal='auto' chooses where plain trials would not reach the "
              "region the MSE comes from or a plain pilot run finds a heavy tail; "
              f"{hollow} point(s) where theory exists are still drawn hollow."), "",
             "## Provenance", "",
             (f"- rfkernels {v['rfkernels']}, git revision "
              f"{prov['git_revision'] or 'unknown (not a git checkout)'}"),
             "- " + ", ".join(f"{k} {val}" for k, val in v.items() if k != "rfkernels"),
             (f"- seed {prov['seed']}, {'--quick' if prov['quick'] else 'default'} mode "
              "(trials and backend per figure in the table)"),
             (f"- elapsed {prov['elapsed_seconds']:.1f} s with {_workers(prov)}; "
              f"written {prov['written']}"),
             ("- seconds, CPU s: wall and CPU time of the process that made each figure (with "
              "the shared parts it was the first to need); budget s: the declared warm seconds "
              "alone on 2 idle cores (rfkernels.figures.budget)"), ""]
    return "\n".join(text)


def _workers(prov):
    n = prov.get("workers", 1)
    where = ("in one process" if n == 1 else f"{n} worker processes")
    cpus = prov.get("usable_cpus")
    return where if cpus is None else f"{where} ({cpus} usable CPU(s))"


def write_report(results, out_dir, seconds, *, seed=0, quick=False, workers=1, cpus=None):
    """Write ``report.md`` and ``figures.json`` into ``out_dir``; returns ``(report path, bad)``."""
    lines, bad = summarise(results)
    prov = provenance(seconds, seed=seed, quick=quick, workers=workers, cpus=cpus)
    path = os.path.join(out_dir, REPORT_NAME)
    text = report_text(lines, bad, prov)
    with naming(path):
        atomic_write(path, text)
    files = {os.path.basename(p) for res in results.values() for p in res.paths}
    files |= {f for f in manifest_files(out_dir) if os.path.exists(os.path.join(out_dir, f))}
    files.add(REPORT_NAME)
    write_manifest(out_dir, {"format": FORMAT, "status": "complete", "figures": list(results),
                             **prov, "inconsistent_points": bad, "summary": lines,
                             "files": sorted(files)})
    return path, bad
