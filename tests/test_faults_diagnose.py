"""Faults of ``rfkernels diagnose`` and its input loading: refused up front, in one line, naming
the option or file, and Ctrl-C stops the heads at once.

Every run is small (L <= 64 but for the pairs' memory check, which is refused before any work).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings

import numpy as np
import pytest
from numpy.lib import format as npy_format

import rfkernels.analysis
import rfkernels.validation
from rfkernels.analysis import diagnose, load_qkv
from rfkernels.analysis.diagnosis.advice import check_target
from rfkernels.commands.cli import main

SMALL = ["--draws", "2", "--m", "4,8", "--pairs", "500", "--queries", "32",
         "--first-order-queries", "2"]


@pytest.fixture
def npz(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "qkv.npz"
    np.savez(path, q=rng.standard_normal((48, 6)), k=rng.standard_normal((48, 6)),
             v=rng.standard_normal((48, 3)))
    return path


def _error_line(argv, capsys):
    """The one stderr line of a refused run (status 2, nothing on stdout, no traceback)."""
    code = main(["diagnose", *argv])
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert code == 2, captured.err
    assert captured.out == "" and "Traceback" not in captured.err
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("rfkernels diagnose: error: ")
    return lines[0]


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if diagnose reads its inputs (the --out check must come first)."""
    def refuse(*args, **kwargs):
        raise AssertionError("the inputs were read before --out was checked")

    monkeypatch.setattr(rfkernels.analysis, "load_qkv", refuse)


# -- --out: a dangling symbolic link ----------------------------------------------------------

@pytest.mark.parametrize("below", [False, True])
def test_dangling_out_link_is_refused_before_any_work(below, npz, tmp_path, no_work, capsys):
    link = tmp_path / "out"
    os.symlink(tmp_path / "gone" / "target", link)
    out = link / "sub" if below else link
    line = _error_line([str(npz), "--out", str(out), *SMALL], capsys)
    assert f"--out {out}" in line
    assert "symbolic link" in line and "does not exist" in line
    assert os.path.islink(link) and not os.path.exists(link)  # left as it was
    assert not (tmp_path / "gone").exists()


def test_out_link_to_a_folder_is_still_written(npz, tmp_path, capsys):
    folder = tmp_path / "real"
    folder.mkdir()
    link = tmp_path / "out"
    os.symlink(folder, link)
    assert main(["diagnose", str(npz), "--out", str(link), *SMALL]) == 0
    assert (folder / "diagnosis.json").is_file()


# -- Ctrl-C -----------------------------------------------------------------------------------

_DRIVER = textwrap.dedent("""
    import sys
    import rfkernels.analysis.diagnosis.study as study

    head = study._head

    def started(*args, **kwargs):
        open(sys.argv[1], "a").close()
        return head(*args, **kwargs)

    study._head = started
    from rfkernels.commands.cli import main
    sys.exit(main(sys.argv[2:]))
""")


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process")
def test_ctrl_c_with_two_workers_stops_at_once_writing_nothing(tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "qkv.npz"  # two heads of about 10 s each without the stop
    np.savez(data, q=rng.standard_normal((2, 1024, 16)), k=rng.standard_normal((2, 1024, 16)))
    flag, out = tmp_path / "started", tmp_path / "diag"
    argv = ["diagnose", str(data), "--out", str(out), "--workers", "2", "--draws", "400",
            "--m", "16,64", "--first-order-queries", "0"]
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(flag), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not flag.exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the heads never started"
            time.sleep(0.02)
        time.sleep(0.5)  # inside the heads' work
        assert proc.poll() is None
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        elapsed = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, stderr
    assert elapsed <= 3.0, f"took {elapsed:.1f} s to stop"
    assert "interrupted" in stderr and "Traceback" not in stderr, stderr
    assert stdout == ""
    assert not out.exists()


def test_two_workers_give_the_numbers_of_one(npz):
    """The heads' pool, which can now stop early, still gives the numbers of one thread."""
    loaded = load_qkv(npz)
    kw = dict(m=(4,), kinds=["positive"], draws=2, queries=16, pairs=100, first_order_queries=0)
    q2, k2 = np.stack([loaded.q, loaded.q[::-1]]), np.stack([loaded.k, loaded.k[::-1]])
    one = diagnose(q2, k2, workers=1, **kw)
    two = diagnose(q2, k2, workers=2, **kw)
    assert [r["attention_mse"] for r in one.rows] == [r["attention_mse"] for r in two.rows]


# -- load_qkv's argument ----------------------------------------------------------------------

@pytest.mark.parametrize("paths", [None, 3, [None, None], [1, 2, 3], b"q.npz"])
def test_load_qkv_names_what_it_takes(paths):
    with pytest.raises(TypeError, match=r"^load_qkv takes one file name or a list of 1 to 3 "
                                        r"file names .*; got "):
        load_qkv(paths)


# -- --draws and --pairs beyond memory --------------------------------------------------------

def test_draws_beyond_memory_names_the_option(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    line = _error_line([str(npz), "--out", str(out), *SMALL, "--draws", "1e18"], capsys)
    assert "--draws" in line and "array is too big" not in line
    assert "chunk size" not in line
    assert "--draws takes an integer from 2 to " in line
    assert not out.exists()


def test_draws_beyond_memory_in_the_api_names_the_argument(npz):
    loaded = load_qkv(npz)
    with pytest.raises(MemoryError, match=r"^draws=1000000000000000000 .*draws takes an integer "
                                          r"from 2 to \d+"):
        diagnose(loaded.q, loaded.k, m=(4,), draws=10**18, pairs=100, queries=16)


@pytest.fixture
def machine_of_16_gib(monkeypatch):
    monkeypatch.setattr(rfkernels.validation, "available_memory", lambda: 16 * 2**30)


def test_pairs_beyond_memory_names_the_option(machine_of_16_gib, tmp_path, capsys):
    rng = np.random.default_rng(0)  # 4e8 query-key pairs available
    path = tmp_path / "long.npz"
    np.savez(path, q=rng.standard_normal((20000, 4)), k=rng.standard_normal((20000, 4)))
    out = tmp_path / "diag"
    line = _error_line([str(path), "--out", str(out), "--pairs", "1e18", "--draws", "2"], capsys)
    assert line.startswith("rfkernels diagnose: error: MemoryError: --pairs 1000000000000000000 "
                           "needs about ")
    assert "--pairs takes an integer from 1 to " in line and "chunk size" not in line
    assert not out.exists()


def test_pairs_beyond_all_pairs_are_all_pairs(npz):
    """More pairs than L * L_k asks for all of them: no memory for pairs that do not exist."""
    loaded = load_qkv(npz)
    kw = dict(m=(4,), kinds=["positive"], draws=2, queries=16, first_order_queries=0)
    many = diagnose(loaded.q, loaded.k, pairs=10**18, **kw)
    every = diagnose(loaded.q, loaded.k, pairs=48 * 48, **kw)
    assert many.heads[0]["all_pairs"] and many.heads[0]["pairs"] == 48 * 48
    assert many.rows[0]["kernel_rel_mse_mean"] == every.rows[0]["kernel_rel_mse_mean"]


def test_grid_beyond_memory_names_options_not_the_chunk_size(npz, tmp_path, capsys):
    line = _error_line([str(npz), "--out", str(tmp_path / "d"), "--m", "1e15", "--draws", "2"],
                       capsys)
    assert "--m" in line and "chunk size" not in line


# -- .npy headers: a huge shape, an object dtype ----------------------------------------------

def _huge_header(path):
    with open(path, "wb") as fh:
        npy_format.write_array_header_1_0(
            fh, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)})


def test_huge_npy_header_names_the_file_and_its_claimed_shape(tmp_path):
    _huge_header(tmp_path / "huge.npy")
    np.save(tmp_path / "k.npy", np.zeros((4, 2)))
    with pytest.raises(MemoryError, match=r"huge\.npy.* shape \(1000000, 1000000\) of float64 "
                                          r"as its header claims") as excinfo:
        load_qkv([tmp_path / "huge.npy", tmp_path / "k.npy"])
    assert "chunk size" not in str(excinfo.value)


def test_huge_npz_member_names_the_member_and_its_claimed_shape(tmp_path):
    import zipfile

    _huge_header(tmp_path / "big.npy")
    np.save(tmp_path / "small.npy", np.zeros((4, 2)))
    path = tmp_path / "x.npz"
    with zipfile.ZipFile(path, "w") as zf:
        zf.write(tmp_path / "small.npy", "q.npy")
        zf.write(tmp_path / "big.npy", "k.npy")
    with pytest.raises(MemoryError, match=r"x\.npz, member k\.npy.* shape \(1000000, 1000000\) "
                                          r"of float64"):
        load_qkv(path)


def test_huge_npy_header_on_the_command_line(tmp_path, capsys):
    _huge_header(tmp_path / "huge.npy")
    np.save(tmp_path / "k.npy", np.zeros((4, 2)))
    line = _error_line([str(tmp_path / "huge.npy"), str(tmp_path / "k.npy"),
                        "--out", str(tmp_path / "d")], capsys)
    assert "huge.npy" in line and "(1000000, 1000000)" in line and "float64" in line


def _object_label(tmp_path, in_npz):
    values = np.array([1.0, "a", None], dtype=object)
    if in_npz:
        path = tmp_path / "x.npz"
        np.savez(path, q=values, k=np.zeros(2), allow_pickle=True)
        return [path], f"{path}, member q.npy"
    np.save(tmp_path / "q.npy", np.zeros(2))
    np.save(tmp_path / "k.npy", values, allow_pickle=True)
    return [tmp_path / "q.npy", tmp_path / "k.npy"], str(tmp_path / "k.npy")


@pytest.mark.parametrize("in_npz", [False, True])
def test_object_array_says_python_objects_and_its_label_once(in_npz, tmp_path):
    paths, label = _object_label(tmp_path, in_npz)
    with pytest.raises(ValueError, match=r"holds Python objects \(dtype object\), which cannot be "
                                         r"read without pickle") as excinfo:
        load_qkv(paths if len(paths) > 1 else paths[0])
    text = str(excinfo.value)
    assert text.startswith(label + ": ") and text.count(label) == 1, text
    assert "not a NumPy" not in text


# -- --target ---------------------------------------------------------------------------------

def test_target_beyond_one_is_refused_without_warnings(npz, tmp_path, capsys):
    out = tmp_path / "diag"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        line = _error_line([str(npz), "--out", str(out), *SMALL, "--target", "1e300"], capsys)
    assert "--target" in line or "target" in line
    assert "at most 1" in line and "zero output" in line
    assert not out.exists()


@pytest.mark.parametrize("value", [1.5, 1e300])
def test_check_target_refuses_more_than_the_zero_output(value):
    with pytest.raises(ValueError, match=r"^target must be a relative MSE of at most 1"):
        check_target(value)


def test_check_target_takes_up_to_one():
    assert check_target(1) == 1.0 and check_target(0.01) == 0.01
