"""Comparisons and sweeps: grids, determinism, resuming, refusing, Dask."""

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from rfkernels import theory
from rfkernels.analysis import points as compare_mod
from rfkernels.analysis.comparison import bias_audit, compare
from rfkernels.analysis.points import point_seed
from rfkernels.analysis.sweep import (
    COLUMNS,
    SweepError,
    SweepSpec,
    load_table,
    run_sweep,
    theory_table,
)
from rfkernels.cli import main

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
        ({**SMALL, "ensemble": ["orthogonal-unfixed-qr"]}, {}, r"can only be sampled literally"),
        (SMALL, {"trials": 1}, r"run\.trials: must be an integer >= 2"),
        (SMALL, {"backend": "fortran"}, r"run\.backend: 'fortran' is not one of"),
        (SMALL, {"speed": 3}, r"run\.speed: unknown key"),
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
        want = theory.exact_mse_from_geometry(g, p["m"], p["kind"], ensemble=p["ensemble"],
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
    key = lambda r: r["point_id"]  # noqa: E731
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
    with pytest.raises(SweepError, match="pass --resume"):
        run_sweep(SweepSpec.from_toml(grid), str(out))
    resumed = run_sweep(SweepSpec.from_toml(grid), str(out), resume=True)
    whole = run_sweep(SweepSpec.from_toml(grid), str(tmp_path / "whole"))
    assert _rows_without_seconds(resumed) == _rows_without_seconds(whole)
    assert len(_rows_without_seconds(resumed)) == 24


def test_a_torn_last_line_is_dropped_on_resume(tmp_path):
    spec = SweepSpec.from_dict(SMALL, {**SMALL_RUN, "trials": 500})
    path = run_sweep(spec, str(tmp_path / "o"))
    full = open(path).read()
    lines = full.splitlines(keepends=True)
    open(path, "w").write("".join(lines[:4]) + lines[4][:17])  # killed mid-line
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
    real = theory.exact_mse_from_geometry

    def wrong(geom, m, kind, **kw):  # forget the covariance: orthogonal := iid
        kw = dict(kw)
        kw["ensemble"] = "iid"
        return real(geom, m, kind, **kw)

    monkeypatch.setattr(theory, "exact_mse_from_geometry", wrong)
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
    with pytest.raises(TypeError, match="d must be an integer"):
        compare([(2.7, 1, 1, 0.5)], m=(2,))
    with pytest.raises(ValueError, match="seed must be a non-negative integer"):
        compare([(4, 1, 1, 0.5)], m=(2,), seed=-1)


def test_values_beyond_float64_are_reported_not_written_as_inf(tmp_path):
    grid = {"d": [4], "m": [4], "angle": [0.0], "norm_x": [30.0, 0.3], "norm_y": [30.0, 0.3]}
    path = run_sweep(SweepSpec.from_dict(grid, {"theory_only": True}), str(tmp_path / "t"))
    text = open(path).read()
    assert "inf" not in text.replace("info", "")
    rows = load_table(path)
    big = [r for r in rows if r["norm_x"] == 30.0 and r["norm_y"] == 30.0][0]
    assert big["mse_exact"] is None and "mse_exact beyond float64: log = " in big["note"]
    small = [r for r in rows if r["norm_x"] == 0.3 and r["norm_y"] == 0.3][0]
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
