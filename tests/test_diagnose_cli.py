"""``rfkernels diagnose``: the files it writes, the folder it refuses, and every bad input in one line.

Every run is small (L <= 64, d <= 8, 2 draws, m = 4, 8): well under a
second of computing each, the figure included.
"""

from __future__ import annotations

import csv
import hashlib
import json
import math
import os

import numpy as np
import pytest

from rfkernels.commands.cli import main
from rfkernels.commands.diagnose import OUTPUTS, null_reason
from rfkernels.commands._output import dumps

SMALL = ["--draws", "2", "--m", "4,8", "--pairs", "500", "--queries", "32",
         "--first-order-queries", "2"]


def _strict(text):
    def refuse(name):
        raise ValueError(f"non-strict JSON constant {name}")

    return json.loads(text, parse_constant=refuse)


def _arrays(L=48, d=6, heads=(), seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((*heads, L, d)), rng.standard_normal((*heads, L, d)),
            rng.standard_normal((*heads, L, 3)))


@pytest.fixture
def npz(tmp_path):
    q, k, v = _arrays()
    path = tmp_path / "qkv.npz"
    np.savez(path, q=q, k=k, v=v)
    return path


def _run(argv, capsys):
    code = main(["diagnose", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _one_line_error(argv, capsys):
    """The one stderr line of a refused run (status 2, nothing on stdout, no traceback)."""
    code, out, err = _run(argv, capsys)
    lines = err.strip().splitlines()
    assert code == 2, err
    assert out == "" and "Traceback" not in err
    assert len(lines) == 1, err
    assert lines[0].startswith("rfkernels diagnose: error: ")
    return lines[0]


def _unexplained_nulls(obj, where="$"):
    """Paths of the nulls in ``obj`` without a reason in their object's ``null_reasons``."""
    missing = []
    if isinstance(obj, dict):
        reasons = obj.get("null_reasons", {})
        for key, value in obj.items():
            if value is None and not reasons.get(key):
                missing.append(f"{where}.{key}")
            if isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value):
                missing += [f"{where}.{key}[{i}]" for i, v in enumerate(value)
                            if v is None and not reasons.get(f"{key}[{i}]")]
            else:
                missing += _unexplained_nulls(value, f"{where}.{key}")
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            missing += _unexplained_nulls(value, f"{where}[{i}]")
    return missing


# ---------------------------------------------------------------------------
# A good run
# ---------------------------------------------------------------------------


def test_a_run_writes_the_five_files_strict_json_and_matching_tables(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    code, stdout, err = _run([str(npz), "--out", str(out), *SMALL], capsys)
    assert code == 0, err
    assert sorted(os.listdir(out)) == sorted(OUTPUTS)

    doc = _strict((out / "diagnosis.json").read_text())
    assert doc["command"] == "diagnose"
    assert _unexplained_nulls(doc) == []
    prov = doc["provenance"]
    assert prov["inputs"]["q"]["sha256"] == hashlib.sha256(npz.read_bytes()).hexdigest()
    assert prov["inputs"]["v"]["shape"] == [48, 3]
    assert prov["command_line"].startswith(f"rfkernels diagnose {npz} --out {out} --m 4,8 ")
    assert prov["arguments"]["null_reasons"]["scale"].startswith("not given: 1/sqrt(d)")
    assert doc["meta"]["scale"] == pytest.approx(1 / math.sqrt(6))
    assert doc["meta"]["m_values"] == [4, 8] and doc["meta"]["draws"] == 2
    # a null and its reason: no first-order theory for orthogonal projections
    ortho = next(r for r in doc["summary"] if r["ensemble"] == "orthogonal")
    assert ortho["first_order_mse"] is None
    assert "iid" in ortho["null_reasons"]["first_order_mse"]

    for name, table in (("diagnosis.csv", "rows"), ("diagnosis_summary.csv", "summary")):
        with open(out / name, newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert len(rows) == len(doc[table]) == 16  # 4 kinds x 2 ensembles x 2 m, one head
        assert {"head", "kind", "ensemble", "m", "r", "relative_mse"} <= set(rows[0])
        assert [float(r["attention_mse"]) for r in rows] == pytest.approx(
            [r["attention_mse"] for r in doc[table]])

    report = (out / "report.md").read_text()
    assert report.startswith("#") and "trig" in report and len(report) > 500
    assert (out / "diagnosis.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    lines = stdout.splitlines()
    assert any(ln.startswith("best estimator at r = 16: ") for ln in lines), stdout
    assert any(ln.startswith("worse than uniform attention at their largest m: ")
               and " of 8 estimators" in ln for ln in lines), stdout
    assert lines[-1].startswith("wrote ") and lines[-1].endswith(" s")
    for name in OUTPUTS:
        assert os.path.join(str(out), name) in lines[-1]


def test_rerunning_into_the_same_folder_replaces_its_files(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    assert _run([str(npz), "--out", str(out), *SMALL], capsys)[0] == 0
    first = _strict((out / "diagnosis.json").read_text())
    # an interrupted atomic write's temporary file is this command's too
    (out / ".diagnosis.csv.abc123.tmp").write_text("partial")
    code, _, err = _run([str(npz), "--out", str(out), *SMALL, "--seed", "1"], capsys)
    assert code == 0, err
    second = _strict((out / "diagnosis.json").read_text())
    assert second["meta"]["entropy"] == 1 and first["meta"]["entropy"] == 0
    assert [r["attention_mse"] for r in second["rows"]] != [r["attention_mse"] for r in first["rows"]]


def test_the_same_seed_gives_the_same_numbers(npz, tmp_path, capsys):
    docs = []
    for name in ("a", "b"):
        assert _run([str(npz), "--out", str(tmp_path / name), *SMALL, "--workers", "1"], capsys)[0] == 0
        docs.append(_strict((tmp_path / name / "diagnosis.json").read_text()))
    assert docs[0]["rows"] == docs[1]["rows"]
    assert docs[0]["summary"] == docs[1]["summary"]


def test_multi_head_input_gives_six_heads(tmp_path, capsys):
    q, k, v = _arrays(L=32, d=4, heads=(2, 3))
    path = tmp_path / "heads.npz"
    np.savez(path, q=q, k=k, v=v)
    out = tmp_path / "diag"
    code, _, err = _run([str(path), "--out", str(out), *SMALL, "--kind", "positive,trig"], capsys)
    assert code == 0, err
    with open(out / "diagnosis.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted({int(r["head"]) for r in rows}) == [0, 1, 2, 3, 4, 5]
    assert len(rows) == 6 * 2 * 2 * 2  # heads x kinds x ensembles x m
    doc = _strict((out / "diagnosis.json").read_text())
    assert [h["index"] for h in doc["heads"]] == [[i, j] for i in range(2) for j in range(3)]
    assert {r["heads"] for r in doc["summary"]} == {6}
    assert _unexplained_nulls(doc) == []


def test_npy_files_without_v_use_synthetic_values(tmp_path, capsys):
    q, k, _ = _arrays(L=40, d=5)
    np.save(tmp_path / "q.npy", q)
    np.save(tmp_path / "k.npy", k)
    out = tmp_path / "diag"
    code, stdout, err = _run([str(tmp_path / "q.npy"), str(tmp_path / "k.npy"), "--out", str(out),
                              *SMALL, "--scale", "0.25"], capsys)
    assert code == 0, err
    doc = _strict((out / "diagnosis.json").read_text())
    assert doc["provenance"]["inputs"]["v"] is None
    assert "synthetic" in doc["provenance"]["inputs"]["null_reasons"]["v"]
    assert doc["meta"]["scale"] == 0.25
    assert "V synthetic" in stdout.splitlines()[0]


def test_files_respect_the_umask(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    old = os.umask(0o027)
    try:
        assert _run([str(npz), "--out", str(out), *SMALL], capsys)[0] == 0
    finally:
        os.umask(old)
    assert {name: os.stat(out / name).st_mode & 0o777 for name in OUTPUTS} == dict.fromkeys(OUTPUTS, 0o640)
    assert os.stat(out).st_mode & 0o777 == 0o750


# ---------------------------------------------------------------------------
# The output folder: only this command's files
# ---------------------------------------------------------------------------


def _foreign(folder, name="notes.txt", text="mine\n"):
    folder.mkdir(exist_ok=True)
    (folder / name).write_text(text)
    return {p: (folder / p).read_bytes() for p in os.listdir(folder)}


@pytest.mark.parametrize("setup,named", [
    (lambda d: _foreign(d), "notes.txt"),
    (lambda d: _foreign(d, "report.md", "# my own report\n"), "report.md"),  # not marked ours
    (lambda d: _foreign(d, "diagnosis.json", '{"command": "attention"}'), "diagnosis.json"),
    (lambda d: _foreign(d, "diagnosis.json", "not json"), "diagnosis.json"),
])
def test_a_foreign_file_in_the_folder_is_refused_before_any_work(setup, named, npz, tmp_path, capsys):
    out = tmp_path / "diag"
    before = setup(out)
    line = _one_line_error([str(npz), "--out", str(out), *SMALL], capsys)
    assert f"holds {named!r}, which is not an output of rfkernels diagnose" in line
    assert {p: (out / p).read_bytes() for p in os.listdir(out)} == before  # untouched, nothing added


def test_a_foreign_file_beside_earlier_outputs_is_refused(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    assert _run([str(npz), "--out", str(out), *SMALL], capsys)[0] == 0
    before = _foreign(out, "mine.csv", "a,b\n")
    (out / "sub").mkdir()
    line = _one_line_error([str(npz), "--out", str(out), *SMALL], capsys)
    assert "holds 'mine.csv'" in line
    assert {p: (out / p).read_bytes() for p in os.listdir(out) if p != "sub"} == before


def test_a_link_among_the_outputs_is_refused(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    assert _run([str(npz), "--out", str(out), *SMALL], capsys)[0] == 0
    precious = tmp_path / "precious.csv"
    precious.write_text("keep me\n")
    os.unlink(out / "diagnosis.csv")
    os.symlink(precious, out / "diagnosis.csv")
    line = _one_line_error([str(npz), "--out", str(out), *SMALL], capsys)
    assert "holds 'diagnosis.csv'" in line
    assert precious.read_text() == "keep me\n"


def test_the_folder_is_checked_before_the_inputs_are_read(tmp_path, capsys):
    out = tmp_path / "diag"
    _foreign(out)
    line = _one_line_error([str(tmp_path / "missing.npz"), "--out", str(out)], capsys)
    assert "holds 'notes.txt'" in line


def test_out_that_is_a_file_is_refused(npz, tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("x")
    line = _one_line_error([str(npz), "--out", str(target), *SMALL], capsys)
    assert "is a file, not a folder" in line
    line = _one_line_error([str(npz), "--out", str(target / "below"), *SMALL], capsys)
    assert f"is under {target}, which is a file" in line
    assert target.read_text() == "x"


# ---------------------------------------------------------------------------
# Bad input: one line each, nothing written
# ---------------------------------------------------------------------------


def _save_npz(path, **arrays):
    np.savez(path, **arrays)
    return [str(path)]


def _save_npy(folder, *arrays, allow_pickle=False):
    names = []
    for role, arr in zip("qkv", arrays):
        names.append(str(folder / f"{role}.npy"))
        np.save(names[-1], arr, allow_pickle=allow_pickle)
    return names


def _text_as_npy(folder):
    q, k, _ = _arrays()
    (folder / "q.npy").write_text("these are my queries\n")
    np.save(folder / "k.npy", k)
    return [str(folder / "q.npy"), str(folder / "k.npy")]


def _object_npy(folder):
    q, k, _ = _arrays()
    return _save_npy(folder, q.astype(object), k, allow_pickle=True)


GOOD_Q, GOOD_K, GOOD_V = _arrays()
WITH_NAN = GOOD_Q.copy()
WITH_NAN[3, 2] = np.nan
WITH_INF = GOOD_K.copy()
WITH_INF[0, 0] = np.inf

BAD_INPUTS = {
    "no q in the npz": (lambda d: _save_npz(d / "x.npz", k=GOOD_K, v=GOOD_V), [],
                        "no array named 'q' (arrays found: k, v)"),
    "no k in the npz": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q), [], "no array named 'k'"),
    "mismatched d": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K[:, :4]), [],
                     "dimension mismatch: Q has d=6, K has d=4"),
    "NaN in q": (lambda d: _save_npz(d / "x.npz", q=WITH_NAN, k=GOOD_K), [],
                 "Q must be finite: it holds 1 inf or NaN entries"),
    "inf in k": (lambda d: _save_npy(d, GOOD_Q, WITH_INF), [],
                 "K must be finite: it holds 1 inf or NaN entries"),
    "complex q": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q + 1j, k=GOOD_K), [],
                  "Complex data not supported"),
    "empty q": (lambda d: _save_npz(d / "x.npz", q=np.zeros((0, 4)), k=np.ones((5, 4))), [],
                "Q is empty (shape (0, 4))"),
    "text named .npy": (_text_as_npy, [], "q.npy: not a NumPy .npy file"),
    "missing file": (lambda d: [str(d / "absent.npz")], [], "absent.npz: No such file or directory"),
    "object array": (_object_npy, [], "a numeric array is expected; got an array of object dtype"),
    "V rows": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K, v=GOOD_V[:40]), [],
               "V must have one row per key: K has L_k=48 rows, V has 40"),
    "one .npy": (lambda d: _save_npy(d, GOOD_Q), [],
                 "expected one .npz file holding arrays named q and k"),
    "scale 0": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--scale", "0"],
                "scale must be a positive finite number; got 0.0"),
    "scale -1": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--scale", "-1"],
                 "scale must be a positive finite number; got -1.0"),
    "scale nan": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--scale", "nan"],
                  "scale must be a positive finite number; got nan"),
    "m 0": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--m", "0"], "m must be >= 1; got [0]"),
    "m negative": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--m", "4,-8"],
                   "m must be >= 1; got [4, -8]"),
    "draws 1": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--draws", "1"], "draws"),
    "target 0": (lambda d: _save_npz(d / "x.npz", q=GOOD_Q, k=GOOD_K), ["--target", "0"], "target"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_one_line_and_writes_nothing(case, tmp_path, capsys):
    make, extra, needle = BAD_INPUTS[case]
    data = tmp_path / "data"
    data.mkdir()
    files = make(data)
    out = tmp_path / "diag"
    small = [a for a in SMALL if a not in ("--m", "4,8")] if "--m" in extra else SMALL
    line = _one_line_error([*files, "--out", str(out), *small, *extra], capsys)
    assert needle in line, line
    assert not out.exists()


@pytest.mark.parametrize("argv,needle", [
    (["--m", "four"], "argument --m: expected an integer such as 100 or 1e6, got 'four'"),
    (["--m", "4.5"], "argument --m: expected an integer such as 100 or 1e6, got '4.5'"),
    (["--scale", "hot"], "argument --scale: expected a number, got 'hot'"),
    (["--kind", "nonsense"], "argument --kind: invalid choice: 'nonsense'"),
    (["--seed", "-1"], "argument --seed: expected an integer >= 0, got '-1'"),
])
def test_text_that_is_not_a_value_is_a_usage_error(argv, needle, npz, tmp_path, capsys):
    """Text that is not even a number is refused by argparse: its usage, then one error line."""
    out = tmp_path / "diag"
    with pytest.raises(SystemExit) as exc:
        main(["diagnose", str(npz), "--out", str(out), *argv])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and "Traceback" not in captured.err
    errors = [ln for ln in captured.err.splitlines() if "error:" in ln]
    assert errors == [errors[0]] and errors[0].startswith("rfkernels diagnose: error: ")
    assert needle in errors[0]
    assert not out.exists()


# ---------------------------------------------------------------------------
# The reasons of the nulls, and the figure with points that are not finite
# ---------------------------------------------------------------------------


def test_null_reasons_of_nonfinite_attention_and_beyond_float64():
    row = {"kind": "trig", "m": 4, "draws": 8, "draws_nonfinite": 2, "attention_mse": math.inf,
           "attention_mse_stderr": None, "relative_mse": None, "first_order_reason": None,
           "first_order_mse": 0.5, "kernel_reason": None, "kernel_rel_mse_max": math.inf}
    doc = _strict(dumps({"rows": [row]}, explain=null_reason))
    reasons = doc["rows"][0]["null_reasons"]
    for key in ("attention_mse", "attention_mse_stderr", "relative_mse"):
        assert reasons[key].startswith("2 of 8 projection draws gave an attention output that is "
                                       "not finite"), key
    assert reasons["kernel_rel_mse_max"] == "beyond float64"
    assert doc["rows"][0]["attention_mse"] is None and doc["rows"][0]["kernel_rel_mse_max"] is None
    row2 = {"kernel_reason": "no exact theory", "kernel_rel_mse_q90": None,
            "first_order_reason": "not iid", "first_order_valid": None, "normaliser_rel_sd": None}
    reasons2 = _strict(dumps(row2, explain=null_reason))["null_reasons"]
    assert reasons2 == {"kernel_rel_mse_q90": "no exact theory", "first_order_valid": "not iid",
                        "normaliser_rel_sd": "not iid"}


def test_the_figure_skips_points_that_are_not_finite(npz, tmp_path):
    from rfkernels.analysis import diagnose, load_qkv
    from rfkernels.figures import diagnosis as figure
    from rfkernels.figures._common import paper_style

    loaded = load_qkv(npz)
    diag = diagnose(loaded.q, loaded.k, loaded.v, m=(4, 8), kinds=["positive", "trig"], draws=2,
                    queries=32, pairs=500, first_order_queries=0)
    diag.summary[0]["relative_mse"] = None
    diag.summary[1]["relative_mse"] = math.inf
    with paper_style() as plt:
        fig, ax = plt.subplots()
        handles, labels = figure.relative_panel(ax, diag)
        title = ax.get_title()
        drawn = sum(len(c.lines[0].get_xdata()) for c in ax.containers)  # the estimators' markers
        plt.close(fig)
    assert f"2 of {len(diag.summary)} points not finite, not drawn" in title
    assert labels[-3:] == ["uniform attention (mean of V)", "zero output", "target 0.01"]
    assert drawn == len(diag.summary) - 2
    path = figure.plot_diagnosis(diag, tmp_path / "d.png")
    assert path == str(tmp_path / "d.png")
    with open(path, "rb") as fh:
        assert fh.read(8) == b"\x89PNG\r\n\x1a\n"
