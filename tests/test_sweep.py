"""Comparisons and sweeps: grids, determinism, resuming, refusing, Dask."""

import math
import csv
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from rfkernels.analysis import points as compare_mod
from rfkernels.analysis import sweep as sweep_mod
from rfkernels.analysis.comparison import RESULT_COLUMNS
from rfkernels.analysis.sweep import executors, grid as grid_mod, rows as rows_mod
from rfkernels.analysis.sweep import theory_only
from rfkernels.analysis.comparison import bias_audit, compare
from rfkernels.analysis.points import point_id, point_ids, point_seed
from rfkernels.analysis.sweep import (
    COLUMNS,
    SweepError,
    SweepSpec,
    load_table,
    run_sweep,
    theory_table,
)

from rfkernels import theory
from rfkernels.commands.cli import main

ISSUE_GRID = """
[grid]
kind = ["positive", "hyperbolic", "trig"]
ensemble = ["iid", "orthogonal"]
d = [4, 16]
m = [1, 2, 4, 8, 16, 32]
angle = [0.0, 0.5, 1.0, 2.0, 3.0]   # radians
norm_x = [0.5]
norm_y = [0.5]

[run]
trials = 100000
seed = 0
backend = "numba"
"""

SMALL = {"kind": ["positive", "trig"], "ensemble": ["iid", "orthogonal"], "d": [4],
         "m": [2, 4], "angle": [0.5, 2.0], "norm_x": [0.4], "norm_y": [0.5]}
SMALL_RUN = {"trials": 2000, "seed": 7, "backend": "numpy"}


def _rows_without_seconds(path):
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    for r in rows:
        r.pop("seconds")
    return rows


# ---------------------------------------------------------------------------
# Grid files and validation
# ---------------------------------------------------------------------------


def test_issue_grid_file_parses(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(ISSUE_GRID)
    spec = SweepSpec.from_toml(path)
    assert len(spec.points()) == 3 * 2 * 2 * 6 * 5
    assert spec.run["trials"] == 100000 and spec.grid["backend"] == ["numba"]
    assert spec.points()[0] == {"kind": "positive", "ensemble": "iid", "norms": "chi",
                                "kernel": "softmax", "gamma": None,
                                "backend": "numba", "d": 4, "m": 1, "angle": 0.0,
                                "norm_x": 0.5, "norm_y": 0.5, "norm_sum": None}


@pytest.mark.parametrize(
    "grid,run,match",
    [
        ({**SMALL, "m": []}, {}, r"grid\.m: empty axis"),
        ({**SMALL, "m": [0, 2]}, {}, r"grid\.m: values must be integers in \[1, 2\*\*31\]"),
        ({**SMALL, "m": [2.5]}, {}, r"grid\.m: values must be integers in \[1, 2\*\*31\]"),
        ({**SMALL, "angle": [0.5, 4.0]}, {}, r"grid\.angle: values must lie in \[0, pi\]"),
        ({**SMALL, "colour": [1]}, {}, r"grid\.colour: unknown key"),
        ({**SMALL, "kind": ["gauss"]}, {}, r"grid\.kind: 'gauss' is not one of"),
        ({**SMALL, "norm_sum": [1.0]}, {}, r"grid\.norm_sum: give either norm_sum or norm_x"),
        ({**SMALL, "d": [1]}, {}, r"grid\.angle: with d = 1 the angle must be 0 or pi"),
        ({k: v for k, v in SMALL.items() if k != "d"}, {}, r"grid\.d: missing"),
        ({**SMALL, "ensemble": ["orthogonal-unfixed-qr"]}, {"theory_only": True},
         r"grid\.ensemble: 'orthogonal-unfixed-qr' has no closed form"),
        ({**SMALL, "ensemble": ["orthogonal-unfixed-qr"]}, {}, r"has no sampler for ensemble='orthogonal-unfixed-qr'.*run.method = 'literal'"),
        (SMALL, {"trials": 1}, r"run\.trials: must be an integer >= 2"),
        (SMALL, {"backend": "fortran"}, r"run\.backend: 'fortran' is not one of"),
        (SMALL, {"speed": 3}, r"run\.speed: unknown key"),
        (SMALL, {"proposal": "gaussian"}, r"run\.proposal: 'gaussian' is not one of plain, tilted, auto"),
        (SMALL, {"proposal": "tilted", "method": "literal"},
         r"run\.proposal: 'tilted' needs run\.method = 'reduced'"),
        ({**SMALL, "kind": ["trig"]}, {"proposal": "tilted"},
         r"run\.proposal: 'tilted' cannot apply to trig features"),
    ],
)
def test_invalid_grids_fail_naming_the_key(grid, run, match):
    with pytest.raises(SweepError, match=match):
        SweepSpec.from_dict(grid, run)


def test_bad_toml_is_reported(tmp_path):
    path = tmp_path / "g.toml"
    path.write_text("[grid\nkind = 1")
    with pytest.raises(SweepError, match="not valid TOML"):
        SweepSpec.from_toml(path)


# ---------------------------------------------------------------------------
# Theory-only sweeps
# ---------------------------------------------------------------------------


def test_theory_only_sweep_matches_the_closed_forms(tmp_path):
    spec = SweepSpec.from_dict({**SMALL, "kind": ["positive", "hyperbolic", "trig"],
                                "m": [1, 4, 9]}, {"theory_only": True})
    path = run_sweep(spec, str(tmp_path / "out"))
    rows = load_table(path)
    assert len(rows) == len(spec.points())
    for r in rows:
        x, y = theory.pair(r["d"], r["norm_x"], r["norm_y"], r["angle"])
        assert r["mse_exact"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"])), rel=1e-13)
        assert r["mse_lemma2"] == pytest.approx(theory.lemma2_mse(x, y, r["m"], r["kind"]), rel=1e-12)
        if r["kind"] == "positive" and r["ensemble"] == "orthogonal" and r["m"] <= r["d"]:
            assert r["theorem2_bound"] == pytest.approx(theory.theorem2_bound(x, y, r["m"]), rel=1e-12)
            assert r["mse_exact"] <= r["theorem2_bound"]
        else:
            assert r["theorem2_bound"] is None
        assert r["mse_mc"] is None and r["trials"] == 0
    meta = json.loads((tmp_path / "out" / "sweep.json").read_text())
    for key in ("grid", "run", "root_seed", "versions", "git_revision", "backend", "timings",
                "fingerprint", "columns"):
        assert key in meta
    assert meta["status"] == "complete" and meta["columns"] == list(COLUMNS)


def test_theory_table_vectorised_equals_pointwise():
    spec = SweepSpec.from_dict({"kind": ["trig", "positive"], "ensemble": ["orthogonal"],
                                "norms": ["chi", "fixed"], "d": [3, 8], "m": [2, 8, 20],
                                "angle": [0.1, 1.0, 3.0], "norm_sum": [0.3, 1.2]},
                               {"theory_only": True})
    cols = theory_table(spec)
    for i, p in enumerate(spec.points()):
        g = compare_mod.point_geometry(p)
        want = theory.exact_mse(g, None, p["m"], p["kind"], ensemble=p["ensemble"],
                                norms=p["norms"])
        assert cols["mse_exact"][i] == pytest.approx(float(want), rel=1e-13)


# ---------------------------------------------------------------------------
# Determinism: seeds follow the point, not the schedule
# ---------------------------------------------------------------------------


def test_point_seed_depends_on_the_point_only():
    p = {"kind": "positive", "m": 4, "d": 8, "angle": 1.0}
    q = dict(reversed(list(p.items())))
    assert point_seed(3, p).generate_state(4).tolist() == point_seed(3, q).generate_state(4).tolist()
    assert point_seed(3, p).generate_state(4).tolist() != point_seed(4, p).generate_state(4).tolist()
    assert (point_seed(3, p).generate_state(4).tolist()
            != point_seed(3, {**p, "m": 5}).generate_state(4).tolist())


def test_sweep_table_is_independent_of_order_and_workers(tmp_path):
    a = run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(tmp_path / "a"))
    rev = {k: list(reversed(v)) for k, v in SMALL.items()}
    b = run_sweep(SweepSpec.from_dict(rev, SMALL_RUN), str(tmp_path / "b"))
    c = run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(tmp_path / "c"), workers=2)
    ra, rb, rc = (_rows_without_seconds(p) for p in (a, b, c))
    assert ra == rc  # same grid: the same file
    def key(r):
        return r["point_id"]

    assert sorted(ra, key=key) == sorted(rb, key=key)  # same points, other order
    assert all(r["mse_mc"] != "" for r in ra)


def test_dask_local_cluster_gives_the_local_table(tmp_path):
    distributed = pytest.importorskip("distributed")
    local = run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(tmp_path / "local"))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        dask_path = run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(tmp_path / "dask"),
                              scheduler=cluster.scheduler_address)
    assert _rows_without_seconds(local) == _rows_without_seconds(dask_path)


# ---------------------------------------------------------------------------
# Resuming and refusing
# ---------------------------------------------------------------------------


def test_resume_after_sigkill_gives_the_uninterrupted_table(tmp_path):
    grid = tmp_path / "grid.toml"
    grid.write_text(textwrap.dedent("""
        [grid]
        kind = ["positive", "hyperbolic"]
        ensemble = ["iid", "orthogonal"]
        d = [8]
        m = [2, 4, 8]
        angle = [0.5, 1.5]
        norm_x = [0.4]
        norm_y = [0.4]
        [run]
        trials = 150000
        seed = 11
        backend = "numpy"
        """))
    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "rfkernels", "sweep", str(grid), "--out", str(out)],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    results = out / "results.csv"
    deadline = time.time() + 120
    while time.time() < deadline:
        if results.exists() and results.read_text().count("\n") >= 4:  # header + >= 3 rows
            break
        if proc.poll() is not None:
            pytest.fail(f"sweep ended before it could be killed: {proc.stderr.read().decode()}")
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    partial = results.read_text().count("\n") - 1
    assert 3 <= partial < 24, partial
    # kill -9 leaves the lock file with the dead pid, but no lock: the next run takes it over
    assert (out / sweep_mod.LOCK_NAME).read_text().strip() == str(proc.pid)
    with pytest.raises(SweepError, match="pass --resume"):
        run_sweep(SweepSpec.from_toml(grid), str(out))
    resumed = run_sweep(SweepSpec.from_toml(grid), str(out), resume=True)
    whole = run_sweep(SweepSpec.from_toml(grid), str(tmp_path / "whole"))
    assert _rows_without_seconds(resumed) == _rows_without_seconds(whole)
    assert len(_rows_without_seconds(resumed)) == 24
    assert not (out / sweep_mod.LOCK_NAME).exists()


def test_a_torn_last_line_is_dropped_on_resume(tmp_path):
    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 500})
    path = run_sweep(spec, str(tmp_path / "o"))
    with open(path) as fh:
        lines = fh.read().splitlines(keepends=True)
    with open(path, "w") as fh:
        fh.write("".join(lines[:4]) + lines[4][:17])  # killed mid-line
    meta_path = tmp_path / "o" / "sweep.json"
    resumed = run_sweep(spec, str(tmp_path / "o"), resume=True)
    assert _rows_without_seconds(resumed) == _rows_without_seconds(
        run_sweep(spec, str(tmp_path / "fresh")))
    assert json.loads(meta_path.read_text())["status"] == "complete"


def test_refuses_other_grids_corrupt_and_unrelated_files(tmp_path):
    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 200})
    out = tmp_path / "o"
    run_sweep(spec, str(out))
    before = (out / "results.csv").read_bytes()
    other = SweepSpec.from_dict({**SMALL, "m": [2, 8]}, {**SMALL_RUN, "trials": 200})
    with pytest.raises(SweepError, match="different grid"):
        run_sweep(other, str(out), resume=True)
    assert (out / "results.csv").read_bytes() == before
    # corrupt: a line with the wrong number of fields
    text = before.decode().splitlines(keepends=True)
    (out / "results.csv").write_text("".join(text[:2]) + "garbage,1,2\n" + "".join(text[2:]))
    corrupt = (out / "results.csv").read_bytes()
    with pytest.raises(SweepError, match="corrupt"):
        run_sweep(spec, str(out), resume=True)
    assert (out / "results.csv").read_bytes() == corrupt
    # unrelated: a results.csv with no sweep sidecar
    alien = tmp_path / "alien"
    alien.mkdir()
    (alien / "results.csv").write_text("name,value\nfoo,1\n")
    with pytest.raises(SweepError, match="not the results of an rfkernels sweep"):
        run_sweep(spec, str(alien))
    assert (alien / "results.csv").read_text() == "name,value\nfoo,1\n"


# ---------------------------------------------------------------------------
# Comparisons and the bias audit
# ---------------------------------------------------------------------------


def test_compare_agrees_with_theory_on_tame_cases():
    rows = compare([(8, 0.5, 0.5, np.pi / 2)], kinds=("positive", "trig", "hyperbolic"),
                   ensembles=("iid", "orthogonal"), m=(4, 8), trials=40000, seed=1)
    assert len(rows) == 12
    for r in rows:
        assert r["tail_ok"] is True
        assert r["mc_consistent"] is True, r
        if r["kind"] == "positive" and r["ensemble"] == "orthogonal":
            assert r["exact_le_bound"] is True
        if r["ensemble"] == "iid":
            assert r["iid_eq_lemma2"] is True


def test_compare_detects_a_planted_wrong_formula(monkeypatch):
    import dataclasses

    from rfkernels.estimators import registry

    real = theory.exact_mse  # every exact MSE goes through it

    def wrong(x, y, m, est, **kw):  # forget the covariance: orthogonal := iid
        return real(x, y, m, dataclasses.replace(est, ensemble=registry.entry("ensemble", "iid")),
                    **kw)

    monkeypatch.setattr(theory, "exact_mse", wrong)
    rows = compare([(8, 0.5, 0.5, 1.0)], kinds=("positive",), ensembles=("orthogonal",), m=(8,),
                   trials=40000, seed=1)
    assert rows[0]["mc_consistent"] is False


def test_bias_audit_flags_the_unfixed_qr_only():
    rows = bias_audit(d=16, m=16, trials=6000, seed=0)
    haar = [r for r in rows if r["ensemble"] == "orthogonal"]
    unfixed = [r for r in rows if r["ensemble"] == "orthogonal-unfixed-qr"]
    assert not any(r["biased"] for r in haar)
    assert all(abs(r["z"]) < 4 for r in haar)
    assert sum(r["biased"] for r in unfixed) >= 3
    ones = next(r for r in unfixed if r["direction"] == "ones")
    assert ones["relative_bias"] < -0.1


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------


def test_cli_sweep_and_compare(tmp_path, capsys):
    assert main(["sweep", "--out", str(tmp_path / "s"), "--d", "4", "--m", "1,2", "--angle", "0,1",
                 "--kind", "positive,trig", "--theory-only", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["points"] == 8 and os.path.exists(summary["results"])
    assert main(["compare", "--d", "8", "--m", "4", "--kind", "positive", "--trials", "20000",
                 "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["violations"] == 0 and len(out["rows"]) == 2
    assert main(["sweep", "--out", str(tmp_path / "bad"), "--d", "4", "--m", "0", "--angle", "1"]) == 2
    assert "grid.m" in capsys.readouterr().err


HEAVY = {"kind": ["positive", "trig"], "d": [4], "m": [4], "angle": [0.0, 1.5], "norm_x": [1.2],
         "norm_y": [1.2]}


def test_the_proposal_is_a_run_key_recorded_checked_and_in_the_rows(tmp_path):
    """|x + y|^2 = 5.76: auto tilts the positive points (heavy tail), trig stays plain;
    the proposal is in sweep.json and the fingerprint, and the rows say which law ran."""
    spec = SweepSpec.from_dict(HEAVY, {"trials": 2000, "seed": 3})
    assert spec.run["proposal"] == "auto"
    out = tmp_path / "auto"
    rows = load_table(run_sweep(spec, out))
    by = {(r["kind"], r["angle"]): r for r in rows}
    for angle in (0.0, 1.5):
        pos, trig = by["positive", angle], by["trig", angle]
        assert pos["proposal"] == "tilted" and 0 < pos["ess"] < pos["trials"], pos
        assert pos["tail_ok"] is True and abs(pos["z"]) < 4, pos
        assert trig["proposal"] == "plain" and trig["ess"] == trig["trials"], trig
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["run"]["proposal"] == "auto" and meta["columns"] == list(COLUMNS)
    plain = SweepSpec.from_dict(HEAVY, {"trials": 2000, "seed": 3, "proposal": "plain"})
    assert plain.fingerprint() != spec.fingerprint()
    with pytest.raises(SweepError, match="different grid or run configuration"):
        run_sweep(plain, out, resume=True)
    rows = load_table(run_sweep(plain, tmp_path / "plain"))
    assert {r["proposal"] for r in rows} == {"plain"}
    assert all(r["ess"] == r["trials"] for r in rows)
    # a theory-only row has no proposal and no ess
    spec = SweepSpec.from_dict(HEAVY, {"theory_only": True})
    rows = load_table(run_sweep(spec, tmp_path / "theory"))
    assert all(r["proposal"] is None and r["ess"] is None for r in rows)


def test_cli_sweep_proposal(tmp_path, capsys):
    args = ["sweep", "--d", "4", "--m", "4", "--angle", "0", "--norm-x", "1.2", "--norm-y", "1.2",
            "--trials", "2000"]
    assert main(args + ["--out", str(tmp_path / "t"), "--proposal", "tilted", "--json"]) == 0
    rows = load_table(json.loads(capsys.readouterr().out)["results"])
    assert [r["proposal"] for r in rows] == ["tilted"]
    assert main(args + ["--out", str(tmp_path / "x"), "--proposal", "tilted", "--kind", "trig"]) == 2
    err = capsys.readouterr().err
    assert "run.proposal" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "x").exists()
    with pytest.raises(SystemExit):
        main(args + ["--out", str(tmp_path / "y"), "--proposal", "gaussian"])
    assert "invalid choice: 'gaussian'" in capsys.readouterr().err


def test_cli_help_shows_defaults(capsys):
    with pytest.raises(SystemExit):
        main(["compare", "--help"])
    assert "(default: 100000)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    text = capsys.readouterr().out
    assert "--resume" in text and "--scheduler" in text


# ---------------------------------------------------------------------------
# Edge cases found in review
# ---------------------------------------------------------------------------


def test_one_geometry_one_stream_whatever_the_number_types():
    a = compare([(4, 1, 1, 0.5)], m=(4,), trials=1000)[0]
    b = compare([(4, 1.0, 1.0, 0.5)], m=(4,), trials=1000)[0]
    assert a["mse_mc"] == b["mse_mc"]
    spec = SweepSpec.from_dict({"d": [4], "m": [4], "angle": [0.5], "norm_x": [1], "norm_y": [1]},
                               {"trials": 1000})
    from rfkernels.analysis.sweep import run_point

    assert run_point(spec.points()[0], spec.run)["mse_mc"] == a["mse_mc"]


def test_compare_checks_everything_before_any_work():
    with pytest.raises(ValueError, match="kind must be one of"):
        compare([(4, 1.0, 1.0, 0.5)], kinds=("positive", "bogus"), m=(4,), trials=10**7)
    with pytest.raises(TypeError, match=r"\bd\b\W* must be an integer"):
        compare([(2.7, 1, 1, 0.5)], m=(2,))
    with pytest.raises(ValueError, match=r"seed must be (a non-negative integer|an integer >= 0)"):
        compare([(4, 1, 1, 0.5)], m=(2,), seed=-1)


def test_values_beyond_float64_are_reported_not_written_as_inf(tmp_path):
    grid = {"d": [4], "m": [4], "angle": [0.0], "norm_x": [30.0, 0.3], "norm_y": [30.0, 0.3]}
    path = run_sweep(SweepSpec.from_dict(grid, {"theory_only": True}), str(tmp_path / "t"))
    with open(path) as fh:
        text = fh.read()
    assert "inf" not in text.replace("info", "")
    rows = load_table(path)
    big = next(r for r in rows if r["norm_x"] == 30.0 and r["norm_y"] == 30.0)
    assert big["mse_exact"] is None and "mse_exact beyond float64: log = " in big["note"]
    small = next(r for r in rows if r["norm_x"] == 0.3 and r["norm_y"] == 0.3)
    assert small["note"] == "" and small["mse_exact"] > 0
    # with Monte Carlo the point is reported and the sweep goes on
    path = run_sweep(SweepSpec.from_dict(grid, {"trials": 200}), str(tmp_path / "mc"))
    rows = load_table(path)
    assert len(rows) == 4
    assert any("Monte Carlo not run" in r["note"] for r in rows)
    assert all(r["mse_mc"] is not None for r in rows if r["norm_x"] == r["norm_y"] == 0.3)


def test_a_failed_start_leaves_the_folder_reusable(tmp_path):
    out = tmp_path / "o"
    bad = SweepSpec.from_dict({"d": [4], "m": [2], "angle": [0.5]},
                              {"trials": 100, "backend": "cupy", "method": "literal"})
    from rfkernels.backends import cupy_available

    if cupy_available():
        pytest.skip("needs a machine without CuPy")
    with pytest.raises(ImportError, match="gpu"):
        run_sweep(bad, str(out))
    good = SweepSpec.from_dict({"d": [4], "m": [2], "angle": [0.5]}, {"trials": 100})
    assert os.path.exists(run_sweep(good, str(out)))


@pytest.mark.parametrize("value", [float("inf"), float("nan"), 1e30])
def test_non_finite_or_huge_axis_values_name_the_key(value):
    with pytest.raises(SweepError, match=r"grid\.d: values must be"):
        SweepSpec.from_dict({**SMALL, "d": [value]})
    with pytest.raises(SweepError, match=r"run\.trials: at most"):
        SweepSpec.from_dict(SMALL, {"trials": 10**30})


# ---------------------------------------------------------------------------
# Issue 9: one writer per folder, checked resumes, fast theory-only tables,
# and a one-line error (never a traceback) for every failure at the edges
# ---------------------------------------------------------------------------

_REAL_RUN_POINT = sweep_mod.run_point

SLOW_WRITER = textwrap.dedent("""
    import os, sys, time
    from rfkernels.analysis import sweep
    from rfkernels.analysis.sweep import executors
    real = executors.run_point
    def slow(point, run):  # holds the folder until the test creates the file 'go'
        deadline = time.time() + 60
        while not os.path.exists(sys.argv[2]) and time.time() < deadline:
            time.sleep(0.02)
        return real(point, run)
    executors.run_point = slow
    spec = sweep.SweepSpec.from_dict({"d": [4], "m": [2, 4, 8], "angle": [0.5, 2.0]},
                                     {"trials": 200, "seed": 3})
    sweep.run_sweep(spec, sys.argv[1])
    """)


def _wait_for_lock(out, proc, pid):
    lock = out / sweep_mod.LOCK_NAME
    deadline = time.time() + 60
    while time.time() < deadline:
        if lock.exists() and lock.read_text().strip() == str(pid):
            return
        if proc.poll() is not None:
            pytest.fail(f"the first sweep ended early: {proc.stderr.read().decode()}")
        time.sleep(0.02)
    pytest.fail("the first sweep never took the lock")


def test_a_second_sweep_on_the_same_folder_fails_at_once(tmp_path, capsys):
    out = tmp_path / "shared"
    script = tmp_path / "writer.py"
    script.write_text(SLOW_WRITER)
    go = tmp_path / "go"
    proc = subprocess.Popen([sys.executable, str(script), str(out), str(go)],
                            stderr=subprocess.PIPE)
    try:
        _wait_for_lock(out, proc, proc.pid)
        spec = SweepSpec.from_dict({"d": [4], "m": [2, 4, 8], "angle": [0.5, 2.0]},
                                   {"trials": 200, "seed": 3})
        message = f"another sweep (pid {proc.pid}) is writing {out}"
        for resume in (False, True):
            with pytest.raises(SweepError, match=re.escape(message)):
                run_sweep(spec, str(out), resume=resume)
        argv = ["sweep", "--out", str(out), "--d", "4", "--m", "2,4,8", "--angle", "0.5,2",
                "--trials", "200", "--seed", "3"]
        assert main(argv + ["--resume"]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err
        assert proc.poll() is None, "the second sweep must fail while the first still runs"
    finally:
        go.write_text("")
        rc = proc.wait(timeout=120)
    assert rc == 0, proc.stderr.read().decode()
    rows = load_table(out / "results.csv")
    assert len(rows) == 6 and len({r["point_id"] for r in rows}) == 6
    assert json.loads((out / "sweep.json").read_text())["status"] == "complete"
    assert not (out / sweep_mod.LOCK_NAME).exists()


def test_the_lock_is_released_when_the_sweep_ends_or_fails(tmp_path):
    spec = SweepSpec.from_dict({"d": [4], "m": [2], "angle": [0.5]}, {"theory_only": True})
    out = tmp_path / "o"
    run_sweep(spec, out)
    assert sorted(os.listdir(out)) == ["results.csv", "sweep.json"]
    with pytest.raises(SweepError, match="pass --resume"):
        run_sweep(spec, out)
    run_sweep(spec, out, resume=True)  # not blocked by the failed run
    assert sorted(os.listdir(out)) == ["results.csv", "sweep.json"]


@pytest.fixture(scope="module")
def small_table(tmp_path_factory):
    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 300})
    out = tmp_path_factory.mktemp("table") / "o"
    run_sweep(spec, out)
    return spec, out


def _corrupt(src, dst, lineno, column, value):
    shutil.copytree(src, dst)
    path = dst / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    fields = next(csv.reader([lines[lineno - 1]]))
    fields[COLUMNS.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    lines[lineno - 1] = buf.getvalue()
    path.write_text("".join(lines))
    return path


@pytest.mark.parametrize("column,value,match", [
    ("trials", "banana", r"line 5 has trials = 'banana' is not an integer"),
    ("mse_mc", "-1e999", r"line 5 has mse_mc = '-1e999' is not finite"),
    ("stderr", "nan", r"line 5 has stderr = 'nan' is not finite"),
    ("d", "4.5", r"line 5 has d = '4.5' is not an integer"),
    ("kind", "gauss", r"line 5 has kind = 'gauss' is not one of"),
    ("tail_ok", "maybe", r"line 5 has tail_ok = 'maybe'"),
    ("seconds", "", r"line 5 has seconds = '' is not a number"),
    ("proposal", "gaussian", r"line 5 has proposal = 'gaussian' is not one of '', 'plain', 'tilted'"),
    ("ess", "inf", r"line 5 has ess = 'inf' is not finite"),
    ("ess", "many", r"line 5 has ess = 'many' is not a number"),
    # identity: the point_id is the point the row's values say (and a point of the grid)
    ("angle", "0.7", r"line 5 has point_id \w{16}, which is not the point its values say"),
    ("point_id", "0123456789abcdef",
     r"line 5 has point_id 0123456789abcdef, which is not the point its values say"),
])
def test_resume_refuses_a_corrupt_row_naming_the_line(small_table, tmp_path, column, value, match):
    spec, src = small_table
    path = _corrupt(src, tmp_path / "o", 5, column, value)
    before = path.read_bytes()
    with pytest.raises(SweepError, match=match):
        run_sweep(spec, tmp_path / "o", resume=True)
    assert path.read_bytes() == before  # touching nothing
    with pytest.raises(SweepError, match=match):
        load_table(path)


def test_resume_refuses_a_row_whose_values_are_not_its_point(small_table, tmp_path):
    """Line 3 carries the point_id of the (missing) point of line 5: its m is not that point's."""
    spec, src = small_table
    lines = (src / "results.csv").read_text().splitlines(keepends=True)
    path = _corrupt(src, tmp_path / "o", 3, "point_id", lines[4].split(",")[0])
    text = path.read_text().splitlines(keepends=True)
    path.write_text("".join(text[:4] + text[5:]))
    before = path.read_bytes()
    with pytest.raises(SweepError, match=r"line 3 has point_id \w{16}, which is not the point "
                                         r"its values say"):
        run_sweep(spec, tmp_path / "o", resume=True)
    assert path.read_bytes() == before


def test_resume_refuses_rows_of_points_outside_the_grid(small_table, tmp_path):
    """A consistent row (point_id of its own values) of a point this grid does not have."""
    spec, src = small_table
    shutil.copytree(src, tmp_path / "o")
    path = tmp_path / "o" / "results.csv"
    lines = path.read_text().splitlines(keepends=True)
    row = dict(zip(COLUMNS, next(csv.reader([lines[4]]))))
    row["angle"] = 0.7
    row["point_id"] = point_id({a: row[a] for a in compare_mod.GRID_AXES
                                if a not in ("norm_sum", "gamma")}
                               | {"d": 4, "m": int(row["m"]), "norm_x": 0.4, "norm_y": 0.5,
                                  "norm_sum": None, "gamma": None})
    lines[4] = rows_mod.row_line(row)
    path.write_text("".join(lines))
    assert len(load_table(path)) == len(lines) - 1  # a valid table...
    with pytest.raises(SweepError, match="line 5 is not a point of this grid"):
        run_sweep(spec, tmp_path / "o", resume=True)  # ...but not of this grid


def test_load_table_reads_a_valid_table_and_names_binary_garbage(small_table, tmp_path):
    spec, src = small_table
    rows = load_table(src / "results.csv")
    assert len(rows) == len(spec.points()) and all(isinstance(r["trials"], int) for r in rows)
    bad = tmp_path / "results.csv"
    text = (src / "results.csv").read_bytes().splitlines(keepends=True)
    bad.write_bytes(b"".join(text[:6]) + b"\xff\xfe" + b"".join(text[6:]))
    with pytest.raises(SweepError, match="line 7 is not UTF-8 text"):
        load_table(bad)


def _theory_reference_lines(spec):
    """Rows of a theory-only sweep formatted one by one (the format the fast path must keep)."""
    cols = theory_table(spec)
    lines = []
    for i, p in enumerate(spec.points()):
        r = dict(p)
        r["point_id"] = point_id(p)
        r.update({k: float("nan") for k in RESULT_COLUMNS})
        r["trials"], r["tail_ok"], r["seconds"] = 0, "", 0.0
        for name in ("mse_exact", "mse_lemma2", "theorem2_bound"):
            r[name] = float(cols[name][i])
        r["note"] = str(cols["note"][i])
        lines.append(rows_mod.row_line(r))
    return ",".join(COLUMNS) + "\n" + "".join(lines)


@pytest.mark.parametrize("workers", [1, 2])
def test_theory_only_tables_are_byte_identical_to_row_by_row_formatting(tmp_path, monkeypatch,
                                                                        workers):
    monkeypatch.setattr(theory_only, "THEORY_BLOCK", 97)  # several blocks, ragged last one
    grid = {"kind": ["positive", "trig", "hyperbolic"], "ensemble": ["iid", "orthogonal"],
            "norms": ["chi", "fixed"], "backend": ["numpy", "numba"], "d": [3, 8],
            "m": [1, 5, 20], "angle": [0.0, 1 / 3, 3.0], "norm_x": [0.2, 30.0], "norm_y": [0.7, 30.0]}
    spec = SweepSpec.from_dict(grid, {"theory_only": True})
    want = _theory_reference_lines(spec)
    assert "beyond float64" in want  # notes are exercised
    path = run_sweep(spec, tmp_path / "o", workers=workers)
    assert Path(path).read_text() == want
    # resumed after losing the middle and a torn line: the same bytes
    lines = want.splitlines(keepends=True)
    Path(path).write_text("".join(lines[:200] + lines[300:400]) + lines[400][:30])
    assert Path(run_sweep(spec, tmp_path / "o", resume=True, workers=workers)).read_text() == want
    sums = SweepSpec.from_dict({"d": [4, 9], "m": [2, 7], "angle": [0.4, 2.5],
                                "norm_sum": [0.5, 80.0]}, {"theory_only": True})
    assert Path(run_sweep(sums, tmp_path / "s")).read_text() == _theory_reference_lines(sums)


def test_point_ids_equal_point_id():
    spec = SweepSpec.from_dict({"kind": ["trig", "positive"], "backend": ["numpy", "numba"],
                                "d": [3, 8], "m": [2, 20], "angle": [0.0, 0.1, 3.0],
                                "norm_sum": [0.3, 1]}, {"theory_only": True})
    assert grid_mod.grid_ids(spec) == [point_id(p) for p in spec.points()]
    values = grid_mod.axis_values(spec)
    one = {a: np.array([len(v) - 1]) for a, v in values.items()}
    assert point_ids(values, one) == [point_id(spec.points()[-1])]


def test_grid_points_are_a_lazy_sequence():
    spec = SweepSpec.from_dict(SMALL)
    points = spec.points()
    assert len(points) == 16 and points[-1] == list(points)[-1] == points[15]
    assert [points[i] for i in range(16)] == list(points) == points[:]
    with pytest.raises(IndexError):
        points[16]


def test_theory_only_appends_are_batched(tmp_path, monkeypatch):
    """fsync at most once a second (and at the end), not once per row."""
    monkeypatch.setattr(theory_only, "THEORY_BLOCK", 500)
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    spec = SweepSpec.from_dict({"kind": ["positive", "trig"], "d": [4, 16], "m": list(range(1, 51)),
                                "angle": list(np.linspace(0, 3, 50))}, {"theory_only": True})
    start = time.perf_counter()
    run_sweep(spec, tmp_path / "o")
    elapsed = time.perf_counter() - start
    assert len(load_table(tmp_path / "o" / "results.csv")) == 10000
    assert len(calls) <= 4 + elapsed / sweep_mod.SYNC_INTERVAL, (len(calls), elapsed)


def test_sweep_json_is_strict_json(tmp_path):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")

    grid = {"d": [4], "m": [4], "angle": [0.0, 1.0], "norm_x": [30.0, 0.3], "norm_y": [30.0]}
    for run in ({"theory_only": True}, {"trials": 200}):
        out = tmp_path / str(sorted(run))
        run_sweep(SweepSpec.from_dict(grid, run), out)
        meta = json.loads((out / "sweep.json").read_text(), parse_constant=refuse)
        assert meta["status"] == "complete"
        assert meta["timings"]["point_seconds_total"] >= 0


# -- no traceback: every failure at the edges is one line and exit 2 ---------

_CLI = ["sweep", "--d", "4", "--m", "2", "--angle", "0.5", "--theory-only"]


def _one_error_line(capsys, *needles):
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for needle in needles:
        assert needle in err, err
    return err


def test_out_that_is_a_file_or_under_a_file(tmp_path, capsys):
    afile = tmp_path / "afile"
    afile.write_text("mine\n")
    assert main(_CLI + ["--out", str(afile)]) == 2
    _one_error_line(capsys, f"the output folder {afile} exists and is not a folder")
    assert main(_CLI + ["--out", str(afile / "sub" / "deeper")]) == 2
    _one_error_line(capsys, f"{afile} is not a folder")
    assert afile.read_text() == "mine\n"


def _read_only(monkeypatch, folder):
    """Make ``folder`` refuse new files (a real chmod where the tests do not run as root)."""
    if os.geteuid() != 0:
        folder.chmod(0o555)
        return
    real_open = os.open

    def fake_open(path, flags, *args, **kw):
        if flags & os.O_CREAT and os.path.abspath(path).startswith(str(folder) + os.sep):
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", fake_open)


def test_read_only_out_folder(tmp_path, capsys, monkeypatch):
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    try:
        assert main(_CLI + ["--out", str(ro)]) == 2
        _one_error_line(capsys, f"cannot write in the output folder {ro}", "Permission denied")
    finally:
        ro.chmod(0o755)
    assert os.listdir(ro) == []


def test_full_disk_before_the_first_row_leaves_nothing(tmp_path, capsys, monkeypatch):
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    out = tmp_path / "new" / "o"
    assert main(_CLI + ["--out", str(out)]) == 2
    _one_error_line(capsys, f"cannot write in the output folder {out}", "No space left on device")
    assert not (tmp_path / "new").exists()


def test_full_disk_mid_sweep_keeps_complete_rows_and_resumes(tmp_path, monkeypatch):
    import errno

    real_write = os.write
    count = [0]

    def filling(fd, data):
        if b",positive," in bytes(data[:200]) or b",trig," in bytes(data[:200]):  # a row
            count[0] += 1
            if count[0] == 4:  # half a row reaches the disk, then it is full
                real_write(fd, bytes(data[:25]))
                raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 200})
    monkeypatch.setattr(os, "write", filling)
    with pytest.raises(OSError, match=r"No space left on device \(.*results\.csv\); the 3 rows written before are "
                                      r"kept: rerun with --resume"):
        run_sweep(spec, tmp_path / "o")
    monkeypatch.setattr(os, "write", real_write)
    text = (tmp_path / "o" / "results.csv").read_text()
    assert text.endswith("\n") and text.count("\n") == 4  # header + 3 complete rows
    assert len(load_table(tmp_path / "o" / "results.csv")) == 3
    resumed = run_sweep(spec, tmp_path / "o", resume=True)
    assert _rows_without_seconds(resumed) == _rows_without_seconds(run_sweep(spec, tmp_path / "f"))


def test_unreachable_dask_scheduler(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(executors, "DASK_CONNECT_TIMEOUT", 0.5)
    out = tmp_path / "o"
    argv = ["sweep", "--d", "4", "--m", "2", "--angle", "0.5", "--trials", "100",
            "--scheduler", "tcp://127.0.0.1:1", "--out", str(out)]
    start = time.perf_counter()
    assert main(argv) == 2
    assert time.perf_counter() - start < 30
    _one_error_line(capsys, "cannot reach the Dask scheduler at tcp://127.0.0.1:1")
    assert not out.exists()


def _dies_at_m4(point, run):
    """A pool task whose worker is killed (as by the OOM killer) at the points with m = 4."""
    if point["m"] == 4 and point["angle"] == 2.0:
        os.kill(os.getpid(), signal.SIGKILL)
    return _REAL_RUN_POINT(point, run)


def test_a_killed_pool_worker_is_reported_and_resume_continues(tmp_path, monkeypatch):
    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 300})
    monkeypatch.setattr(executors, "run_point", _dies_at_m4)
    with pytest.raises(RuntimeError, match=r"a worker process of the sweep died .*rerun with "
                                           r"--resume"):
        run_sweep(spec, tmp_path / "o", workers=2)
    monkeypatch.setattr(executors, "run_point", _REAL_RUN_POINT)
    text = (tmp_path / "o" / "results.csv").read_text() if (tmp_path / "o").exists() else ""
    assert text == "" or text.endswith("\n")
    resumed = run_sweep(spec, tmp_path / "o", resume=True)
    assert _rows_without_seconds(resumed) == _rows_without_seconds(run_sweep(spec, tmp_path / "f"))


def test_a_point_beyond_the_machine_memory_is_refused_before_anything(tmp_path, capsys,
                                                                      monkeypatch):
    import rfkernels.validation as validation

    monkeypatch.setattr(validation, "available_memory", lambda: 16 * 2**30)
    out = tmp_path / "o"
    assert main(["sweep", "--d", "2147483648", "--m", "4", "--angle", "1", "--out", str(out)]) == 2
    _one_error_line(capsys, "MemoryError", "d = 2147483648", "GiB")
    assert not out.exists()
    # a theory-only sweep of the same point needs no d-sized memory
    assert main(["sweep", "--d", "2147483648", "--m", "4", "--angle", "1", "--theory-only",
                 "--out", str(out)]) == 0
    assert load_table(out / "results.csv")[0]["mse_exact"] > 0


def test_binary_toml_names_the_file(tmp_path, capsys):
    path = tmp_path / "grid.toml"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\xff\xfe")
    with pytest.raises(SweepError, match=f"grid file {re.escape(str(path))} is not valid TOML"):
        SweepSpec.from_toml(path)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    _one_error_line(capsys, str(path), "not UTF-8")


ORPHANING_WRITER = textwrap.dedent("""
    import sys, time
    from rfkernels.analysis import sweep
    from rfkernels.analysis.sweep import executors
    real = executors.run_point
    def slow(point, run):
        time.sleep(20)
        return real(point, run)
    executors.run_point = slow
    spec = sweep.SweepSpec.from_dict({"d": [4], "m": [2, 4], "angle": [0.5, 2.0]},
                                     {"trials": 200, "seed": 3})
    sweep.run_sweep(spec, sys.argv[1], workers=2)
    """)


def _children(pid):
    path = f"/proc/{pid}/task/{pid}/children"
    with open(path) as fh:
        return [int(c) for c in fh.read().split()]


def test_pool_workers_of_a_killed_sweep_do_not_hold_the_lock(tmp_path):
    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip("needs Linux /proc to find the pool workers")
    out = tmp_path / "o"
    script = tmp_path / "writer.py"
    script.write_text(ORPHANING_WRITER)
    proc = subprocess.Popen([sys.executable, str(script), str(out)], stderr=subprocess.PIPE)
    workers = []
    try:
        _wait_for_lock(out, proc, proc.pid)
        deadline = time.time() + 60
        while len(workers) < 2 and time.time() < deadline:  # the pool has forked its workers
            workers = [c for c in _children(proc.pid)
                       if os.path.exists(f"/proc/{c}") and c != proc.pid]
            time.sleep(0.05)
        assert len(workers) >= 2
        time.sleep(0.5)  # the workers have run their initializer and started a point
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # the workers die with the sweep (tests/test_sweep_faults.py); alive or not, they
        # hold no copy of the lock
        spec = SweepSpec.from_dict({"d": [4], "m": [2, 4], "angle": [0.5, 2.0]},
                                   {"trials": 200, "seed": 3})
        path = run_sweep(spec, out, resume=True)  # not "another sweep (pid N) is writing"
        assert len(load_table(path)) == 4
    finally:
        for c in workers:
            try:
                os.kill(c, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("d,m,method,ensemble", [
    (2**20, 4, "reduced", "iid"), (4, 2**18, "reduced", "iid"),
    (64, 16, "literal", "orthogonal"), (512, 8, "literal", "iid"),
])
def test_point_memory_bounds_the_traced_peak(d, m, method, ensemble):
    import tracemalloc

    spec = SweepSpec.from_dict({"d": [d], "m": [m], "angle": [1.0], "ensemble": [ensemble]},
                               {"trials": 4, "method": method})
    tracemalloc.start()
    try:
        sweep_mod.run_point(spec.points()[0], spec.run)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= sweep_mod.point_memory(d, m, method, ensemble)


@pytest.mark.parametrize("method", ["reduced", "literal"])
def test_a_point_computes_its_geometry_and_exact_mse_once(monkeypatch, method):
    """A grid point goes down the layers once: one geometry, one exact MSE, one z."""
    from rfkernels import theory
    from rfkernels.analysis import evaluate_point

    calls = {"exact": 0, "geometry": 0}
    exact_mse, geometry = theory.exact_mse, theory.geometry  # every exact MSE goes through it

    def count_exact(*a, **k):
        calls["exact"] += 1
        return exact_mse(*a, **k)

    def count_geometry(*a, **k):
        calls["geometry"] += 1
        return geometry(*a, **k)

    monkeypatch.setattr(theory, "exact_mse", count_exact)
    monkeypatch.setattr(theory, "geometry", count_geometry)
    point = {"kind": "positive", "ensemble": "orthogonal", "norms": "chi", "d": 4, "m": 4,
             "angle": 1.0, "norm_x": 0.3, "norm_y": 0.3}
    row = evaluate_point(point, trials=500, seed=1, method=method)
    # the literal method samples with the vectors and checks once that they have the geometry
    assert calls == {"exact": 1, "geometry": 1 if method == "literal" else 0}
    assert math.isfinite(row["z"]) and row["z"] == (row["mse_mc"] - row["mse_exact"]) / row["stderr"]


def test_new_kinds_and_ensembles_are_checked_before_any_work(tmp_path):
    """sorf has no reduced sampler yet (refused up front); oprf on simplex runs literally too."""
    with pytest.raises(SweepError, match="no reduced sampler yet for ensemble='sorf'.*run.method"):
        SweepSpec.from_dict({**SMALL, "ensemble": ["sorf"]}, SMALL_RUN)
    with pytest.raises(SweepError, match="'sorf' has no closed form"):
        SweepSpec.from_dict({**SMALL, "ensemble": ["sorf"]}, {"theory_only": True})
    spec = SweepSpec.from_dict({**SMALL, "kind": ["oprf"], "ensemble": ["simplex"]},
                               {**SMALL_RUN, "method": "literal", "trials": 200})
    rows = load_table(run_sweep(spec, str(tmp_path / "out")))
    assert all(r["kind"] == "oprf" and math.isfinite(r["mse_exact"]) for r in rows)
