"""Bad command-line input: each fault found by trying the commands, and its one-line error.

An argparse error exits with status 2 (``SystemExit``), the subcommand's
usage and one line ``rfkernels CMD: error: argument --OPTION: ...``; an error
of the run returns 2 with one line ``rfkernels CMD: error: ...``; both before
any work. Every run here is small (seconds in all).
"""

from __future__ import annotations

import errno
import json
import os

import pytest
from _cli import usage_error_lines

import rfkernels.validation
from rfkernels import storage
from rfkernels.commands.cli import build_parser, join_negative_values, main


def _usage_error(argv, capsys):
    """The stderr lines of an argparse error (exit status 2)."""
    return usage_error_lines(argv, capsys)


def _run_error(argv, capsys):
    """The one stderr line of an error of the run (status 2, nothing on stdout)."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1, captured.err
    return lines[0]


ATTENTION = ["attention", "--L", "64", "--d", "4", "--m", "2", "--samples", "3"]


# ---------------------------------------------------------------------------
# 1. A negative value after its option is the option's value
# ---------------------------------------------------------------------------

NEGATIVE = [
    (["mse", "--d", "4", "--m", "4", "--angle", "-inf"],
     "rfkernels mse: error: argument --angle: expected an angle in [0, pi] radians such as 1.5, "
     "pi/2 or 3pi/4, got '-inf'"),
    (["mse", "--norm-x", "-1e-3"],
     "rfkernels mse: error: argument --norm-x: expected a finite number >= 0, got '-1e-3'"),
    (["mse", "--norm-y", "-.5e1"],
     "rfkernels mse: error: argument --norm-y: expected a finite number >= 0, got '-.5e1'"),
    (["compare", "--angle", "-pi/4"],
     "rfkernels compare: error: argument --angle: expected an angle in [0, pi] radians such as "
     "1.5, pi/2 or 3pi/4, got '-pi/4'"),
    (["compare", "--norm-x", "-1e-3,1"],
     "rfkernels compare: error: argument --norm-x: expected a finite number >= 0, got '-1e-3'"),
    (["sweep", "--out", "x", "--norm-sum", "-1e-3"],
     "rfkernels sweep: error: argument --norm-sum: expected a finite number >= 0, got '-1e-3'"),
    (["sweep", "--out", "x", "--angle", "-NaN"],
     "rfkernels sweep: error: argument --angle: expected an angle in [0, pi] radians such as 1.5, "
     "pi/2 or 3pi/4, got '-NaN'"),
    (["capacity", "--key-scale", "-1e-3"], None),  # reaches the core's check (below)
]


@pytest.mark.parametrize("argv,line", NEGATIVE)
def test_a_negative_value_reaches_its_option(argv, line, capsys):
    if line is None:
        text = _run_error(argv, capsys)
        assert "key_scale must be a positive finite number; got -0.001" in text
        return
    lines = _usage_error(argv, capsys)
    assert lines[-1] == line
    assert "expected one argument" not in lines[-1]


def test_negative_values_that_are_valid_are_taken():
    args = build_parser().parse_args(["mse", "--angle", "-0e0", "--norm-x", "-0.0"])
    assert args.angle == 0 and args.norm_x == 0
    args = build_parser().parse_args(["compare", "--angle", "-0e0,pi/2"])
    assert args.angle[0] == 0


def test_join_negative_values():
    assert join_negative_values(["mse", "--angle", "-inf", "--norm-x", "-1e-3", "--json"]) == [
        "mse", "--angle=-inf", "--norm-x=-1e-3", "--json"]
    # an option is never a value; "--opt=-v" stays; after "--" nothing is joined
    assert join_negative_values(["mse", "--out", "--json", "--angle=-1", "--", "--x", "-1e-3"]) == [
        "mse", "--out", "--json", "--angle=-1", "--", "--x", "-1e-3"]
    assert join_negative_values(["mse", "-h"]) == ["mse", "-h"]


# ---------------------------------------------------------------------------
# 2. An unknown option shows the subcommand's usage
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["mse", "compare", "attention", "capacity", "check"])
def test_an_unknown_option_shows_the_subcommands_usage(command, capsys):
    lines = _usage_error([command, "--bogus", "1"], capsys)
    assert lines[0].startswith(f"usage: rfkernels {command} ")
    assert lines[-1] == f"rfkernels {command}: error: unrecognized arguments: --bogus 1"


def test_an_extra_positional_shows_the_subcommands_usage(capsys):
    lines = _usage_error(["sweep", "grid.toml", "other.toml", "--out", "x"], capsys)
    assert lines[0].startswith("usage: rfkernels sweep ")
    assert lines[-1] == "rfkernels sweep: error: unrecognized arguments: other.toml"


# ---------------------------------------------------------------------------
# 3. --workers: a range, not a C int overflow
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["1e18", "0", "-1", "1025"])
def test_sweep_workers_out_of_range(value, tmp_path, capsys):
    out = tmp_path / "s"
    lines = _usage_error(["sweep", "--out", str(out), "--d", "4", "--m", "2", "--angle", "1",
                          "--workers", value], capsys)
    assert lines[-1] == (f"rfkernels sweep: error: argument --workers: expected an integer from "
                         f"1 to 1024, got '{value}'")
    assert not out.exists()


# ---------------------------------------------------------------------------
# 4. An empty name
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv,line", [
    (["sweep", "--out", "", "--d", "4"],
     "rfkernels sweep: error: argument --out: expected a folder name, got an empty string"),
    (["sweep", "--out", "  ", "--d", "4"],
     "rfkernels sweep: error: argument --out: expected a folder name, got only blanks ('  ')"),
    (["sweep", "", "--out", "x"],
     "rfkernels sweep: error: argument grid: expected a TOML file name, got an empty string"),
    (["sweep", "--out", "x", "--scheduler", ""],
     "rfkernels sweep: error: argument --scheduler: expected a scheduler address, got an empty "
     "string"),
    ([*ATTENTION, "--out", ""],
     "rfkernels attention: error: argument --out: expected a CSV file name, got an empty string"),
])
def test_an_empty_name_is_refused(argv, line, capsys):
    assert _usage_error(argv, capsys)[-1] == line


# ---------------------------------------------------------------------------
# 5. Counts whose arrays cannot fit: the option and the memory, before any work
# ---------------------------------------------------------------------------

@pytest.fixture
def machine_of_2_gib(monkeypatch):
    monkeypatch.setattr(rfkernels.validation, "available_memory", lambda: 2 * 2**30)


def test_attention_samples_beyond_memory(machine_of_2_gib, tmp_path, capsys):
    out = tmp_path / "a.csv"
    line = _run_error([*ATTENTION[:-2], "--samples", "1e18", "--out", str(out)], capsys)
    assert line.startswith("rfkernels attention: error: MemoryError: --samples 1000000000000000000: "
                           "the per-sample MSEs of 6 grid rows")
    assert "GiB of memory; this machine has 2 GiB, enough for --samples up to about " in line
    fits = int(line.rsplit(" ", 1)[1])
    assert fits == int(0.8 * 2 * 2**30) // (8 + 88 * 6)  # m = 2, 3 kinds, 2 ensembles
    assert list(tmp_path.iterdir()) == []


def test_capacity_trials_beyond_memory(machine_of_2_gib, capsys):
    line = _run_error(["capacity", "--trials", "1e18", "--n", "16,64", "--map", "elu1,softmax"],
                      capsys)
    assert line.startswith("rfkernels capacity: error: MemoryError: --trials 1000000000000000000: "
                           "the per-trial results of 2 maps at 2 values of n")
    assert "this machine has 2 GiB, enough for --trials up to about" in line
    assert "array is too big" not in line


# ---------------------------------------------------------------------------
# 6. A full disk names the file
# ---------------------------------------------------------------------------

def _full_disk(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_atomic_write_names_the_file_on_a_full_disk(tmp_path, monkeypatch):
    monkeypatch.setattr(storage.os, "fsync", _full_disk)
    target = tmp_path / "t.csv"
    with pytest.raises(OSError) as exc:
        storage.atomic_write(target, "a,b\n")
    assert exc.value.errno == errno.ENOSPC
    assert exc.value.filename == os.path.realpath(target)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind


def test_atomic_write_keeps_an_error_that_names_its_file(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        storage.atomic_write(tmp_path / "missing" / "t.csv", "x")
    assert "missing" in exc.value.filename


def test_attention_full_disk_names_the_file(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(storage.os, "fsync", _full_disk)
    out = tmp_path / "a.csv"
    line = _run_error([*ATTENTION, "--out", str(out)], capsys)
    assert line == (f"rfkernels attention: error: {os.path.realpath(out)}: "
                    f"{os.strerror(errno.ENOSPC)}")
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# 7. --seed and --input-scale name the option and the range
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv", [
    ["mse"], ["compare"], ["sweep", "--out", "x"], ATTENTION, ["capacity"]])
def test_a_negative_seed_names_the_option(argv, capsys):
    lines = _usage_error([*argv, "--seed", "-1"], capsys)
    assert lines[-1] == f"rfkernels {argv[0]}: error: argument --seed: expected an integer >= 0, got '-1'"


@pytest.mark.parametrize("value", ["1e300", "1e151", "0", "-1", "nan", "inf"])
def test_attention_input_scale_out_of_range(value, tmp_path, capsys):
    lines = _usage_error([*ATTENTION, "--input-scale", value, "--out", str(tmp_path / "a.csv")],
                         capsys)
    assert lines[-1] == ("rfkernels attention: error: argument --input-scale: expected a number in "
                         "(0, 1e+150] (a larger sigma overflows |q|^2 and q.k in float64), "
                         f"got '{value}'")


def test_attention_input_scale_at_its_limit_runs(tmp_path, capsys):
    assert main([*ATTENTION, "--input-scale", "1e150", "--out", str(tmp_path / "a.csv")]) == 0
    assert (tmp_path / "a.json").exists()


# ---------------------------------------------------------------------------
# 8. Every null of every JSON output has its reason
# ---------------------------------------------------------------------------

def unexplained_nulls(obj, path="$"):
    """Paths of the nulls of a JSON document without a reason in their object's ``null_reasons``.

    A null field ``k`` needs ``null_reasons[k]``, a null item ``i`` of a list
    field ``k`` needs ``null_reasons["k[i]"]`` (non-empty strings); a null
    in a list of objects or lists has no place for a reason and is reported.
    """
    bad = []
    if isinstance(obj, dict):
        reasons = obj.get("null_reasons") or {}
        for key, value in obj.items():
            if key == "null_reasons":
                continue
            where = f"{path}.{key}"
            if value is None:
                if not (isinstance(reasons.get(key), str) and reasons[key]):
                    bad.append(where)
            elif isinstance(value, list) and not any(isinstance(v, (dict, list)) for v in value):
                bad.extend(f"{where}[{i}]" for i, v in enumerate(value)
                           if v is None and not reasons.get(f"{key}[{i}]"))
            else:
                bad.extend(unexplained_nulls(value, where))
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            bad.extend([f"{path}[{i}]"] if value is None else unexplained_nulls(value, f"{path}[{i}]"))
    return bad


def test_unexplained_nulls_helper():
    assert unexplained_nulls({"a": None, "b": [1, None], "c": {"d": None, "null_reasons": {"d": "x"}},
                              "e": [{"f": None}], "null_reasons": {"b[1]": "y"}}) == ["$.a", "$.e[0].f"]


OVERFLOW = ["--d", "4", "--norm-x", "15", "--norm-y", "15", "--angle", "0", "--m", "4",
            "--kind", "positive"]

JSON_RUNS = [
    ["check", "--json"],
    ["mse", "--d", "4", "--m", "4", "--trials", "2000", "--backend", "numpy", "--json"],
    ["mse", "--d", "4", "--m", "8", "--kind", "trig", "--ensemble", "orthogonal", "--trials", "2000",
     "--backend", "numpy", "--json"],
    ["compare", "--d", "4", "--m", "2", "--trials", "2000", "--json"],
    ["compare", *OVERFLOW, "--trials", "2000", "--bias-audit", "--json"],
    ["capacity", "--trials", "2", "--n", "1,16,40", "--d-k", "8", "--map", "elu1,positive:16,softmax",
     "--json"],
    ["capacity", "--trials", "2", "--n", "16", "--d-k", "8", "--d-v", "4", "--json"],
]


@pytest.mark.parametrize("argv", JSON_RUNS, ids=lambda a: " ".join(a[:1] + a[-3:-1]))
def test_every_null_of_the_json_output_has_its_reason(argv, capsys):
    assert main(argv) in (0, 1)
    out = json.loads(capsys.readouterr().out)
    assert unexplained_nulls(out) == []


def test_capacity_json_explains_the_default_d_v(capsys):
    assert main(["capacity", "--trials", "1", "--n", "16", "--d-k", "8", "--map", "elu1",
                 "--json"]) == 0
    args = json.loads(capsys.readouterr().out)["arguments"]
    assert args["d_v"] is None and args["null_reasons"]["d_v"] == "not given: d_v = d_k"


def test_compare_json_explains_a_missing_bias_audit(capsys):
    main(["compare", "--d", "4", "--m", "2", "--kind", "positive", "--ensemble", "iid",
          "--trials", "2000", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["bias_audit"] is None
    assert out["null_reasons"]["bias_audit"] == "not run: pass --bias-audit"


@pytest.mark.parametrize("checkout", [True, False], ids=["git", "installed"])
def test_attention_sidecar_explains_every_null(checkout, tmp_path, monkeypatch, capsys):
    from rfkernels.commands import attention

    if not checkout:  # an installed copy has no git revision
        monkeypatch.setattr(attention, "git_revision", lambda: None)
    assert main([*ATTENTION, "--kind", "trig", "--ensemble", "iid,orthogonal", "--nonpositive", "nan",
                 "--out", str(tmp_path / "a.csv")]) == 0
    side = json.loads((tmp_path / "a.json").read_text())
    assert unexplained_nulls(side) == []
    if not checkout:
        assert side["git_revision"] is None and "git checkout" in side["null_reasons"]["git_revision"]


# ---------------------------------------------------------------------------
# 9. An earlier output saved again with CRLF line ends (or a BOM) is still ours
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("bom", [b"", b"\xef\xbb\xbf"], ids=["crlf", "bom-crlf"])
def test_attention_recognises_its_output_with_crlf_line_ends(bom, tmp_path, capsys):
    out = tmp_path / "a.csv"
    argv = [*ATTENTION, "--out", str(out)]
    assert main(argv) == 0
    for path in (out, tmp_path / "a.json"):
        data = path.read_bytes().replace(b"\n", b"\r\n")
        path.write_bytes(bom + data)
    capsys.readouterr()
    assert main(argv) == 0, capsys.readouterr().err  # replaced without --force
    assert b"\r" not in out.read_bytes()


def test_a_closed_pipe_ends_quietly():
    """``rfkernels figures --list | head -1``: no "Broken pipe" error and no traceback, status 141."""
    import os
    import subprocess
    import sys

    read, write = os.pipe()
    os.close(read)  # the reader is gone before the first line is written
    try:
        proc = subprocess.run([sys.executable, "-m", "rfkernels", "figures", "--list"], stdout=write,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write)
    assert proc.returncode == 141, proc.stderr
    assert proc.stderr == ""


def test_figures_out_and_seed_are_checked_up_front(capsys):
    from rfkernels.commands.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["figures", "--out", ""])
    assert exc.value.code == 2
    assert "argument --out: expected a folder name, got an empty string" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["figures", "--seed", "-1"])
    assert exc.value.code == 2
    assert "argument --seed: expected an integer >= 0, got '-1'" in capsys.readouterr().err
