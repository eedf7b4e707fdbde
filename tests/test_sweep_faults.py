"""Sweeps at their edges: killed parents, odd grid files and tables, and very large grids."""

import csv
import functools
import io
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from rfkernels.analysis.sweep import (
    COLUMNS,
    LOCK_NAME,
    SweepError,
    SweepSpec,
    load_table,
    read_results,
    run_sweep,
)

from rfkernels.commands.cli import main

SMALL = {"kind": ["positive", "trig"], "d": [4], "m": [2, 4], "angle": [0.5, 2.0]}
SMALL_RUN = {"trials": 200, "seed": 5}


# ---------------------------------------------------------------------------
# Pool workers die with their sweep
# ---------------------------------------------------------------------------

#: The CLI with every point sleeping, so the sweep is surely running when it is killed.
SLEEPING_CLI = textwrap.dedent("""
    import sys, time
    from rfkernels.analysis.sweep import executors
    from rfkernels.commands.cli import main
    real = executors.run_point
    def slow(point, run):
        time.sleep(60)
        return real(point, run)
    executors.run_point = slow
    sys.exit(main(sys.argv[1:]))
    """)


def _stat(pid):
    """``(state, ppid)`` of a process from /proc (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            text = fh.read()
    except OSError:
        return None
    state, ppid = text[text.rindex(")") + 2 :].split()[:2]
    return state, int(ppid)


def _children(pid):
    """Pids whose parent is ``pid`` (all of /proc scanned: any thread may have forked them)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = _stat(int(name))
            if st is not None and st[1] == pid and st[0] != "Z":
                out.append(int(name))
    return out


def _running(pid):
    st = _stat(pid)
    return st is not None and st[0] != "Z"  # a zombie has died (its new parent may never reap)


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_pool_workers_die_when_the_sweep_is_killed(tmp_path):
    out = tmp_path / "o"
    script = tmp_path / "cli.py"
    script.write_text(SLEEPING_CLI)
    argv = ["sweep", "--d", "4", "--m", "2,4", "--angle", "0.5,2", "--trials", "200",
            "--seed", "5", "--workers", "2", "--out", str(out)]
    proc = subprocess.Popen([sys.executable, str(script), *argv], stderr=subprocess.PIPE)
    workers = []
    try:
        deadline = time.time() + 60
        while len(workers) < 2 and time.time() < deadline:
            if proc.poll() is not None:
                pytest.fail(f"the sweep ended early: {proc.stderr.read().decode()}")
            workers = _children(proc.pid)
            time.sleep(0.05)
        assert len(workers) >= 2, workers
        time.sleep(1.0)  # the workers have run their initializer and sleep in a point
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.time() + 10
        while any(map(_running, workers)) and time.time() < deadline:
            time.sleep(0.05)
        assert not [c for c in workers if _running(c)], "pool workers outlived the sweep"
    finally:
        for c in workers:
            if _running(c):
                os.kill(c, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    # the folder is the killed sweep's: a resume finishes it
    spec = SweepSpec.from_dict({"d": [4], "m": [2, 4], "angle": [0.5, 2.0]}, SMALL_RUN)
    assert len(load_table(run_sweep(spec, out, resume=True, workers=2))) == 4
    assert not (out / LOCK_NAME).exists()


# ---------------------------------------------------------------------------
# Grids given as something else than tables
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("grid,run,match", [
    ([1, 2], None,
     r"^grid: expected a table \(a mapping\) of axes to values.*; got list \[1, 2\]$"),
    ("d = [4]", None, r"^grid: expected a table .*; got str 'd = \[4\]'$"),
    (SMALL, [("trials", 3)], r"^run: expected a table \(a mapping\) of run keys \(trials, seed"),
    (SMALL, 100, r"^run: expected a table .*; got int 100$"),
])
def test_from_dict_wants_mappings(grid, run, match):
    with pytest.raises(SweepError, match=match) as info:
        SweepSpec.from_dict(grid, run)
    assert "\n" not in str(info.value)


def test_from_dict_accepts_any_mapping():
    from types import MappingProxyType

    spec = SweepSpec.from_dict(MappingProxyType(SMALL), MappingProxyType(SMALL_RUN))
    assert len(spec.points()) == 8 and spec.run["trials"] == 200


# ---------------------------------------------------------------------------
# Grid files: a byte-order mark, keys outside a table
# ---------------------------------------------------------------------------

GRID_TOML = '[grid]\nd = [4]\nm = [2, 4]\nangle = [0.5]\n[run]\ntrials = 300\n'


def test_a_toml_file_with_a_byte_order_mark_is_read(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_bytes(b"\xef\xbb\xbf" + GRID_TOML.encode())
    spec = SweepSpec.from_toml(path)
    assert len(spec.points()) == 2 and spec.run["trials"] == 300
    assert spec == SweepSpec.from_toml(_write(tmp_path / "plain.toml", GRID_TOML))


def test_not_utf8_after_a_byte_order_mark_names_the_byte(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_bytes(b"\xef\xbb\xbf[grid]\nd = [4]\nm = [\xff]\n")
    with pytest.raises(SweepError, match=r"is not valid TOML: it is not UTF-8 text \(byte 23 is "
                                         r"b'\\xff'\)"):
        SweepSpec.from_toml(path)


def _write(path, text):
    path.write_text(text)
    return path


@pytest.mark.parametrize("text,match", [
    ("d = [4]\n" + GRID_TOML.replace("d = [4]\n", ""),
     r"key d is outside any table \(above the first \[table\] header\); put d under \[grid\]$"),
    ("d = [4]\ntrials = 9\n[grid]\nm = [2]\nangle = [0.5]\n",
     r"keys d, trials are outside any table .*; put d under \[grid\], trials under \[run\]$"),
    ("colour = 1\n" + GRID_TOML,
     r"key colour is outside any table .*; every key belongs in the \[grid\] or the \[run\] table"),
    ("grid = 3\n", r"key grid is outside any table .*; grid and run must be tables"),
])
def test_keys_outside_a_table_are_named_with_the_file(tmp_path, capsys, text, match):
    path = _write(tmp_path / "grid.toml", text)
    with pytest.raises(SweepError, match=match) as info:
        SweepSpec.from_toml(path)
    assert str(info.value).startswith(f"{path}: ") and "\n" not in str(info.value)
    assert main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and str(path) in err and "outside any table" in err


def test_unknown_tables_are_still_named(tmp_path):
    path = _write(tmp_path / "grid.toml", GRID_TOML + "[extra]\nx = 1\n")
    with pytest.raises(SweepError, match=r"unknown table\(s\) \['extra'\]"):
        SweepSpec.from_toml(path)


# ---------------------------------------------------------------------------
# Results tables: a header cut short, CRLF line ends
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    spec = SweepSpec.from_dict(SMALL, SMALL_RUN)
    out = tmp_path_factory.mktemp("table") / "o"
    run_sweep(spec, out)
    return spec, out


HEADER = ",".join(COLUMNS)


@pytest.mark.parametrize("cut", [1, 50, len(HEADER) - 1, len(HEADER)])
def test_a_header_cut_short_is_reported_as_truncated(tmp_path, cut):
    path = tmp_path / "results.csv"
    path.write_text(HEADER[:cut])
    with pytest.raises(SweepError, match=rf"^{path}: the file ends inside its header \(line 1 has "
                                         rf"{cut} of the {len(HEADER)} characters"):
        load_table(path)
    with pytest.raises(SweepError, match="ends inside its header"):
        read_results(path)


def test_a_header_cut_short_is_refused_on_resume_and_left_alone(table, tmp_path):
    spec, src = table
    out = tmp_path / "o"
    out.mkdir()
    (out / "sweep.json").write_bytes((src / "sweep.json").read_bytes())
    (out / "results.csv").write_text(HEADER[:40])
    with pytest.raises(SweepError, match="ends inside its header .*truncated"):
        run_sweep(spec, out, resume=True)
    assert (out / "results.csv").read_text() == HEADER[:40]


def test_empty_and_alien_first_lines_keep_their_messages(tmp_path):
    path = tmp_path / "results.csv"
    path.write_text("")
    with pytest.raises(SweepError, match="is empty: not a results file"):
        load_table(path)
    path.write_text("name,value")  # no line end, but not a cut header
    with pytest.raises(SweepError, match="does not have the columns of a results table"):
        load_table(path)


def _crlf(text):
    return text.replace("\n", "\r\n")


def test_a_crlf_table_is_read_like_its_lf_original(table, tmp_path):
    spec, src = table
    path = tmp_path / "results.csv"
    path.write_bytes(_crlf((src / "results.csv").read_text()).encode())
    assert load_table(path) == load_table(src / "results.csv")
    rows, torn = read_results(path, spec)
    assert not torn and rows == read_results(src / "results.csv", spec)[0]
    # cut between CR and LF: a torn last line, dropped
    path.write_bytes(path.read_bytes()[:-1])
    rows, torn = read_results(path)
    assert torn and len(rows) == len(spec.points()) - 1


@pytest.mark.parametrize("workers", [1, 2])
def test_a_crlf_table_resumes_in_crlf(table, tmp_path, workers):
    """Rows appended to a CRLF table end in CRLF: the file is the LF sweep with CRLF line ends."""
    spec, src = table
    want = (src / "results.csv").read_text()
    lines = want.splitlines(keepends=True)
    out = tmp_path / "o"
    out.mkdir()
    (out / "sweep.json").write_bytes((src / "sweep.json").read_bytes())
    # the rows of a killed sweep (the first two, and one further on), converted by some tool
    (out / "results.csv").write_bytes(_crlf("".join(lines[:3] + lines[5:6])).encode()
                                      + lines[6][:20].encode())
    path = run_sweep(spec, out, resume=True, workers=workers)
    got = open(path, "rb").read()
    assert b"\n" not in got.replace(b"\r\n", b"")
    assert _without_seconds(got.decode().replace("\r\n", "\n")) == _without_seconds(want)


def test_a_crlf_theory_only_table_resumes_in_crlf(tmp_path):
    spec = SweepSpec.from_dict(SMALL, {"theory_only": True})
    want = open(run_sweep(spec, tmp_path / "lf"), newline="").read()
    out = tmp_path / "o"
    run_sweep(spec, out)
    lines = want.splitlines(keepends=True)
    (out / "results.csv").write_bytes(_crlf("".join(lines[:2] + lines[4:6])).encode())
    assert open(run_sweep(spec, out, resume=True), "rb").read() == _crlf(want).encode()


def _without_seconds(text):
    i = COLUMNS.index("seconds")
    return [fields[:i] + fields[i + 1 :] for fields in csv.reader(io.StringIO(text))]


# ---------------------------------------------------------------------------
# Large grids: planned and written as a stream, resumed with a flag per point
# ---------------------------------------------------------------------------

#: A Monte Carlo grid of 10**6 points (1000 angles x 1000 norms).
BIG = {"d": [4], "m": [1], "angle": [0.1 + 3.0 * i / 1000 for i in range(1000)],
       "norm_x": [0.1 + i / 1000 for i in range(1000)], "norm_y": [0.5]}
BIG_RUN = {"trials": 2, "seed": 1}


class _Stop(Exception):
    """Raised by a stand-in point to end a sweep early."""


def _cheap(limit, p, run):
    """A stand-in for run_point: the point's valid theory-only row (no sampling); raises
    _Stop for the points past the first ``limit`` norms (the grid's inner axis)."""
    from rfkernels.analysis.sweep import run_point  # the package's name: never patched

    if p["norm_x"] >= BIG["norm_x"][limit]:
        raise _Stop(p["norm_x"])
    return run_point(p, {**run, "theory_only": True})


def _cheap_point(limit):
    return functools.partial(_cheap, limit)  # a pool can ship it


def _traced(fn, *args, **kw):
    """``(what fn raised or returned, peak bytes of Python allocations meanwhile)``."""
    import tracemalloc

    tracemalloc.start()
    try:
        try:
            out = fn(*args, **kw)
        except _Stop as exc:
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_grid_is_streamed_and_resumed_without_a_per_point_plan(tmp_path, monkeypatch):
    from rfkernels.analysis.sweep import executors

    spec = SweepSpec.from_dict(BIG, BIG_RUN)
    assert len(spec.points()) == 10**6
    executors.run_point(spec.points()[0], {**spec.run, "theory_only": True})  # warm up
    monkeypatch.setattr(executors, "run_point", _cheap_point(5))
    out, peak = _traced(run_sweep, spec, tmp_path / "o")
    assert isinstance(out, _Stop) and peak < 40 * 2**20, peak
    rows = load_table(tmp_path / "o" / "results.csv")
    assert [(r["angle"], r["norm_x"]) for r in rows] == [(BIG["angle"][0], x)
                                                         for x in BIG["norm_x"][:5]]
    # resuming holds a flag per grid point, not an id per row or per point
    monkeypatch.setattr(executors, "run_point", _cheap_point(12))
    out, peak = _traced(run_sweep, spec, tmp_path / "o", resume=True)
    assert isinstance(out, _Stop) and peak < 40 * 2**20, peak
    rows = load_table(tmp_path / "o" / "results.csv")
    assert [r["norm_x"] for r in rows] == BIG["norm_x"][:12]


@pytest.mark.parametrize("workers", [2])
def test_a_pool_holds_a_window_of_points_not_the_grid(tmp_path, monkeypatch, workers):
    from rfkernels.analysis.sweep import executors

    spec = SweepSpec.from_dict(BIG, BIG_RUN)
    executors.run_point(spec.points()[0], {**spec.run, "theory_only": True})
    monkeypatch.setattr(executors, "run_point", _cheap_point(30))
    out, peak = _traced(run_sweep, spec, tmp_path / "o", workers=workers)
    assert isinstance(out, _Stop) and peak < 40 * 2**20, peak
    rows = load_table(tmp_path / "o" / "results.csv")
    assert [r["norm_x"] for r in rows] == BIG["norm_x"][:30]  # in grid order, as they finished


def test_dask_submits_a_window_of_points_not_the_grid(tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")
    from rfkernels.analysis.sweep import executors

    grid = {**BIG, "angle": BIG["angle"][:5]}  # 5000 points
    spec = SweepSpec.from_dict(grid, BIG_RUN)
    monkeypatch.setattr(executors, "run_point", _cheap_point(30))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        submitted = []
        real_submit = client.submit

        def submit(*args, **kw):
            submitted.append(1)
            return real_submit(*args, **kw)

        monkeypatch.setattr(client, "submit", submit)
        with pytest.raises(_Stop):
            run_sweep(spec, tmp_path / "o", client=client)
    window = executors.MIN_HOLD
    assert 30 < len(submitted) <= 30 + executors.HOLD * window, len(submitted)
    rows = load_table(tmp_path / "o" / "results.csv")
    assert [r["norm_x"] for r in rows] == BIG["norm_x"][:30]


def _jittery_point(p, run):
    """The real point, finishing in a shuffled order (a sleep drawn from the point)."""
    from rfkernels.analysis.sweep import run_point  # the package's name: never patched

    time.sleep((hash((p["m"], p["angle"], p["kind"])) % 7) * 0.01)
    return run_point(p, run)


def test_a_pool_writes_rows_in_grid_order_with_no_rewrite(tmp_path, monkeypatch):
    from rfkernels.analysis.sweep import executors, runner

    grid = {**SMALL, "m": [1, 2, 3, 4], "ensemble": ["iid", "orthogonal"]}
    spec = SweepSpec.from_dict(grid, SMALL_RUN)
    want = open(run_sweep(spec, tmp_path / "one")).read()

    def refuse(*args):
        raise AssertionError("a fresh sweep rewrote its table")

    monkeypatch.setattr(runner, "rewrite_in_grid_order", refuse)
    monkeypatch.setattr(executors, "run_point", _jittery_point)
    got = open(run_sweep(spec, tmp_path / "two", workers=2)).read()
    assert _without_seconds(got) == _without_seconds(want)


def _lines_of(path):
    return open(path, newline="").read().splitlines(keepends=True)


@pytest.mark.parametrize("fan_in,sort_block", [(2, 7), (3, 1 << 16), (64, 1 << 16), (10**6, 1)])
def test_a_table_in_any_order_is_merged_back_into_grid_order(tmp_path, monkeypatch, fan_in,
                                                              sort_block):
    """A table whose rows are shuffled (as older versions wrote a pool's rows) and partly
    missing: the resumed table is the fresh one, byte for byte, however many runs it has
    (sorted by blocks, then merged in one pass or several, or merged at once)."""
    import random

    from rfkernels.analysis.sweep import order

    monkeypatch.setattr(order, "FAN_IN", fan_in)
    monkeypatch.setattr(order, "SORT_BLOCK", sort_block)
    spec = SweepSpec.from_dict({**SMALL, "m": list(range(1, 40))}, {"theory_only": True})
    want = _lines_of(run_sweep(spec, tmp_path / "fresh"))
    out = tmp_path / "o"
    run_sweep(spec, out)
    rows = want[1:]
    random.Random(3).shuffle(rows)
    (out / "results.csv").write_text("".join([want[0]] + rows[:-25]))
    assert _lines_of(run_sweep(spec, out, resume=True)) == want
    assert sorted(os.listdir(out)) == ["results.csv", "sweep.json"]  # no merge files left


def test_a_resume_that_appends_after_the_last_row_needs_no_rewrite(tmp_path, monkeypatch):
    from rfkernels.analysis.sweep import runner

    spec = SweepSpec.from_dict(SMALL, SMALL_RUN)
    want = _lines_of(run_sweep(spec, tmp_path / "fresh"))
    out = tmp_path / "o"
    run_sweep(spec, out)
    (out / "results.csv").write_text("".join(want[:4]) + want[4][:9])  # killed mid-row

    def refuse(*args):
        raise AssertionError("rewritten")

    monkeypatch.setattr(runner, "rewrite_in_grid_order", refuse)
    got = _lines_of(run_sweep(spec, out, resume=True))
    assert _without_seconds("".join(got)) == _without_seconds("".join(want))


# ---------------------------------------------------------------------------
# The sidecar's nulls have reasons; a full disk names the table
# ---------------------------------------------------------------------------


def test_every_null_of_the_sidecar_has_its_reason(tmp_path):
    import json

    out = tmp_path / "out"
    run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(out), progress=False)
    meta = json.loads((out / "sweep.json").read_text())

    def nulls(value, prefix=""):
        if isinstance(value, dict):
            return [k for key, v in value.items() for k in nulls(v, f"{prefix}{key}.")]
        return [prefix[:-1]] if value is None else []

    found = nulls({k: v for k, v in meta.items() if k != "null_reasons"})
    assert "run.chunk" in found and "execution.scheduler" in found
    assert sorted(meta["null_reasons"]) == sorted(found)
    assert "default chunk" in meta["null_reasons"]["run.chunk"]


def test_a_full_disk_names_the_results_table(tmp_path, monkeypatch):
    import errno

    from rfkernels.analysis.sweep import SweepIOError, folder

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(folder.os, "write", full)
    out = tmp_path / "out"
    with pytest.raises(SweepIOError, match=r"No space left on device \(.*results\.csv\)"):
        run_sweep(SweepSpec.from_dict(SMALL, SMALL_RUN), str(out), progress=False)
