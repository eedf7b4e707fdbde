"""``rfkernels attention``: MSE of FAVOR attention against exact attention (Figure 4).

Runs :func:`rfkernels.analysis.attention.attention_mse` and writes its tidy
table as CSV with a JSON sidecar (same stem, ``.json``): parameters, seed
entropy and spawn-key scheme, input distribution, per-sample MSEs,
versions, git revision and timings. Both files are written atomically
(temporary file, then :func:`os.replace`). An existing file is only
replaced if it is an earlier output of this command (a CSV with the same
header, a JSON sidecar whose ``"command"`` is ``"attention"``), or with
``--force``. A progress bar is shown when stderr is a terminal.
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

from .cli import command
from ..storage import atomic_write, git_revision, package_versions
from ._options import (LIST_NOTE, add_list, check_count_memory, choice, int_value, name_value,
                       positive_float, seed_value)
from ._output import dumps

#: Default grid of the number of projections m (Figure 4 goes up to 256).
DEFAULT_M = (2, 4, 8, 16, 32, 64, 128, 256)

#: Largest ``--input-scale`` sigma: the squared norms |q|^2 ~ sigma^2 and the logits
#: q.k of exact attention overflow float64 from about 1e154 on; 1e150 leaves a
#: factor 1e8 for |q|^2 / sigma^2, far beyond any Gaussian row.
MAX_INPUT_SCALE = 1e150


def _add_attention(p):
    from rfkernels.analysis.attention import (
        DEFAULT_ENSEMBLES,
        DEFAULT_INPUT_SCALE,
        DEFAULT_KINDS,
    )
    from rfkernels.attention import NONPOSITIVE_POLICIES
    from rfkernels.backends import BACKENDS

    offered, refused = attention_kinds()
    kinds = choice(offered, "kind", refused=refused)
    ensembles, norms = choice("ensemble"), choice("norms")
    # the attention study runs on numpy and cupy only (no numba kernels)
    backends = choice(tuple(b for b in BACKENDS if b in ("numpy", "cupy")), "backend")

    p.epilog = (LIST_NOTE + "\n\nA sample MSE that is not finite is left out of the row's mean (column\n"
                "non-finite) and is null in the JSON sidecar, with its reason in \"null_reasons\";\n"
                "'-' marks a row with too few finite samples for the value.")
    p.add_argument("--L", type=int_value, default=4096, help="sequence length")
    p.add_argument("--d", type=int_value, default=16, help="dimension of queries, keys and values")
    add_list(p, "--m", convert=int_value, default=DEFAULT_M, help="numbers of projections")
    p.add_argument("--samples", type=int_value, default=15, help="random inputs per grid point (>= 2)")
    add_list(p, "--kind", convert=kinds, default=DEFAULT_KINDS,
             help=f"estimators among {', '.join(kinds.choices)} (default: the paper's three)")
    add_list(p, "--ensemble", convert=ensembles,
             help=f"projection ensembles among {', '.join(ensembles.choices)} (default: "
                  f"{','.join(DEFAULT_ENSEMBLES)}, those --norms applies to)")
    p.add_argument("--input-scale", default=DEFAULT_INPUT_SCALE,
                   type=positive_float(MAX_INPUT_SCALE,
                                       "a larger sigma overflows |q|^2 and q.k in float64"),
                   help=f"sigma in (0, {MAX_INPUT_SCALE:g}]: rows of Q and K are "
                        "N(0, sigma^2/d I_d), so E|q|^2 = sigma^2 in the kernel exp(q.k)")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed (SeedSequence entropy)")
    p.add_argument("--norms", type=norms, default="chi",
                   help=f"row norms of the projections: {', '.join(norms.choices)}")
    p.add_argument("--causal", action="store_true", help="causal (unidirectional) attention")
    p.add_argument("--nonpositive", choices=NONPOSITIVE_POLICIES, default="divide",
                   help="rows with a normaliser <= 0 (trig): divide anyway, NaN, or stop")
    p.add_argument("--backend", type=backends, default="numpy",
                   help=f"array backend of the attention: {', '.join(backends.choices)}")
    p.add_argument("--out", default="attention_mse.csv", type=name_value("CSV file name"),
                   help="CSV path; the JSON sidecar is the same path with suffix .json")
    p.add_argument("--force", action="store_true",
                   help="overwrite existing files that are not outputs of this command")


def attention_kinds():
    """``(kinds, refused)``: the registered kinds ``--kind`` takes, and why it takes no other.

    A kind is taken where the study has one feature map for queries and keys
    (:func:`rfkernels.analysis.favor_study.study_kinds`) and attention can use
    it (its feature map has no ``attention_reason``); ``refused`` maps every
    other registered kind to its reason, in the words of the command line.
    """
    import re

    from rfkernels.analysis.favor_study import study_kinds
    from rfkernels.estimators import registry

    study = set(study_kinds())
    offered, refused = [], {}
    for entry in registry.entries("kind"):
        fmap = entry.feature_map
        reason = (getattr(fmap, "attention_reason", None) if fmap is not None
                  else entry.feature_map_reason or "it has no feature map")
        if reason is None and entry.name not in study:
            reason = ("its queries and keys take feature maps of their own, whose parameters "
                      "this study does not fit")
        if reason is None:
            offered.append(entry.name)
        else:  # the registry's advice kind='trig' as the option a command-line user writes
            refused[entry.name] = re.sub(r"\bkind='([^']*)'", r"--kind \1", reason)
    return tuple(offered), refused


def _is_ours(path, header):
    """True if ``path`` is an earlier output of this command (CSV or sidecar)."""
    try:  # as written here, or saved again elsewhere: CRLF or CR line ends, a UTF-8 BOM
        if path.suffix == ".json":
            with open(path, encoding="utf-8-sig") as fh:
                return json.load(fh).get("command") == "attention"
        with open(path, newline="", encoding="utf-8-sig") as fh:
            return fh.readline().rstrip("\r\n") == header
    except (OSError, ValueError, UnicodeDecodeError, AttributeError):
        return False


def _check_outputs(out, force):
    """The CSV and JSON paths, after refusing to clobber unrelated files."""
    from rfkernels.analysis.attention import AttentionMSETable

    if not str(out).strip() or Path(out).name in ("", ".."):
        raise ValueError(f"--out must name a CSV file; got {out!r}")
    csv_path = Path(out)
    if csv_path.suffix == ".json":
        raise ValueError(f"--out must not end in .json (that is the sidecar's suffix); got {out!r}")
    json_path = csv_path.with_suffix(".json")
    if not csv_path.parent.is_dir():
        raise ValueError(f"--out: directory {str(csv_path.parent)!r} does not exist")
    import tempfile

    try:  # root ignores permission bits: try a file, as the writer will
        with tempfile.NamedTemporaryFile(dir=csv_path.parent, prefix=".rfkernels-probe-"):
            pass
    except OSError as exc:
        raise ValueError(f"--out: cannot write in {str(csv_path.parent)!r} "
                         f"({exc.strerror or exc})") from None
    header = ",".join(AttentionMSETable.COLUMNS)
    for path in (csv_path, json_path):
        if path.is_dir():
            raise ValueError(f"--out: {str(path)!r} is a directory")
        if path.exists() and not force and not _is_ours(path, header):
            raise ValueError(
                f"{str(path)!r} exists and is not an output of 'rfkernels attention'; "
                "choose another --out or pass --force to overwrite it"
            )
    return csv_path, json_path


def _null_reason(key, value, row):
    """Why a value of the sidecar is null; None if it is not (or the generic reason will do)."""
    if key.startswith("mse[") and isinstance(value, float) and math.isnan(value):
        return ("the sample's FAVOR output is not finite (a normaliser exactly 0 under "
                "--nonpositive divide, or a reported row under --nonpositive nan)")
    if key == "git_revision" and value is None:
        return "not run from a git checkout (or git is not available)"
    return None


@command("attention", "MSE of FAVOR attention against exact softmax attention (Figure 4)")(
    _add_attention
)
def _run_attention(args):
    from tqdm import tqdm

    from rfkernels.analysis import attention as study

    if args.ensemble is None:  # antithetic norms leave iid out of the defaults
        args.ensemble = list(study.ensembles_for(args.norms, study.DEFAULT_ENSEMBLES))
    m_values, kinds, ensembles = args.m, args.kind, args.ensemble
    rows = len(m_values) * len(kinds) * len(ensembles)
    # per sample and grid row: two float64 tables, then the sidecar's list (a Python
    # float, its list slots, its JSON text); per sample: the exact attention's MSE
    check_count_memory("--samples", args.samples, 8 + 88 * rows,
                       f"the per-sample MSEs of {rows} grid rows (tables and JSON sidecar)")
    csv_path, json_path = _check_outputs(args.out, args.force)
    scale = args.input_scale
    total = args.samples * (1 + len(m_values) * len(kinds) * len(ensembles))

    t0 = time.perf_counter()
    bar = tqdm(total=total, unit="attention", file=sys.stderr, disable=not sys.stderr.isatty(),
               desc="rfkernels attention")
    try:
        table = study.attention_mse(
            args.L, args.d, m_values, kinds, ensembles, samples=args.samples, seed=args.seed,
            input_scale=scale, norms=args.norms, causal=args.causal,
            nonpositive=args.nonpositive, backend=args.backend, progress=bar.update,
        )
    finally:
        bar.close()
    elapsed = time.perf_counter() - t0

    meta = dict(table.meta)
    sidecar = {
        "command": "attention",
        "arguments": {k: v for k, v in vars(args).items() if k != "command"},
        "csv": csv_path.name,
        "columns": list(table.COLUMNS),
        "parameters": meta,
        "per_sample_mse": [
            {"m": r["m"], "kind": r["kind"], "ensemble": r["ensemble"],
             "mse": [float(x) for x in table.per_sample_mse[i]]}
            for i, r in enumerate(table.rows)
        ],
        "versions": package_versions(),
        "git_revision": git_revision(),
        "backend": args.backend,
        "timings": {"total_s": elapsed, "exact_s": meta["seconds_exact"],
                    "favor_s": meta["seconds_favor"]},
    }
    sidecar_text = dumps(sidecar, explain=_null_reason, indent=1)  # strict JSON, before any write
    atomic_write(csv_path, table.to_csv)
    atomic_write(json_path, sidecar_text)

    print(f"MSE of the attention output, L={args.L}, d={args.d}, {args.samples} samples, "
          f"input scale {scale:g}; mean +- standard error")
    print(f"{'m':>5} {'kind':>10} {'ensemble':>22} {'mse_mean':>11} {'mse_se':>10} "
          f"{'rows D<=0':>9} {'non-finite':>10}")
    for r in table.rows:
        mean = "-" if r["mse_mean"] is None else f"{r['mse_mean']:.4e}"
        se = "-" if r["mse_se"] is None else f"{r['mse_se']:.2e}"
        print(f"{r['m']:5d} {r['kind']:>10} {r['ensemble']:>22} {mean:>11} {se:>10} "
              f"{r['nonpositive_rows_mean']:9.1f} {r['samples_nonfinite']:10d}")
    if any(r["samples_nonfinite"] for r in table.rows):
        print("non-finite: samples whose FAVOR output was not finite, left out of the mean "
              "(null in the sidecar)")
    print(f"wrote {csv_path} and {json_path} in {elapsed:.1f} s")
    return 0
