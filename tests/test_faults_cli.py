"""Faults of the commands found by trying them (issue 37), each with the behaviour that fixes it.

Every error is one line ``rfkernels CMD: error: ...`` on stderr with exit
status 2 (argparse's: ``SystemExit(2)`` after the usage), naming the
command-line option, before any work; no NumPy warning reaches stderr.
Every run here is small (seconds in all).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import pytest
from _cli import usage_error_lines

import rfkernels.validation
from rfkernels import rank_estimators, theory
from rfkernels.commands.cli import main
from rfkernels.estimators import registry
from rfkernels.validation import check_memory


def _run_error(argv, capsys):
    """The one stderr line of an error of the run (status 2, nothing on stdout)."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out == "" and len(lines) == 1, captured.err
    assert lines[0].startswith(f"rfkernels {argv[0]}: error: "), lines[0]
    return lines[0]


def _usage_error(argv, capsys):
    """The last stderr line of an argparse error (exit status 2), after the usage."""
    return usage_error_lines(argv, capsys)[-1]


# ---------------------------------------------------------------------------
# 1. check_memory's advice names what the caller can change
# ---------------------------------------------------------------------------


def test_check_memory_advice_names_what_the_caller_can_change(monkeypatch):
    monkeypatch.setattr(rfkernels.validation, "available_memory", lambda: 2**30)
    with pytest.raises(MemoryError, match=r"x of 8 GiB needs about 8 GiB .*\(reduce --n or --d\)$"):
        check_memory(8 * 2**30, "x of 8 GiB", reduce="--n or --d")
    with pytest.raises(MemoryError) as info:
        check_memory(8 * 2**30, "x of 8 GiB")
    assert "chunk" not in str(info.value) and str(info.value).endswith("(reduce the sizes named)")
    assert check_memory(2**20, "a little") == 2**20


@pytest.mark.parametrize("option", ["--d-v", "--d-k", "--n"])
def test_capacity_memory_error_names_the_option(capsys, option):
    err = _run_error(["capacity", option, "1e18", "--trials", "1"], capsys)
    assert "MemoryError" in err and f"{option} {'up to ' if option == '--n' else ''}" \
        "1000000000000000000" in err, err
    assert "chunk" not in err and "reduce --n, --d-k, --d-v" in err, err


def test_sweep_memory_error_names_the_grid_options(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(rfkernels.validation, "available_memory", lambda: 4 * 2**30)
    out = tmp_path / "o"
    err = _run_error(["sweep", "--out", str(out), "--d", "1e9", "--m", "2", "--angle", "1",
                      "--workers", "2", "--kind", "positive,trig"], capsys)
    assert "MemoryError" in err and "(reduce grid.d or grid.m (--d, --m), or workers " \
        "(--workers))" in err and "chunk" not in err, err
    assert not out.exists()


# ---------------------------------------------------------------------------
# 2. attention --kind: the kinds attention takes, the others refused naming --kind
# ---------------------------------------------------------------------------


def _not_for_attention():
    """Registered kinds attention does not take: a map attention cannot use, or two maps."""
    return [k.name for k in registry.entries("kind")
            if k.feature_map.attention_reason is not None or k.pair_transform is not None]


def test_attention_help_lists_only_the_kinds_it_takes(capsys):
    refused = _not_for_attention()
    assert refused  # offset and the DERF kinds
    with pytest.raises(SystemExit):
        main(["attention", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    listed = text.split("--kind KIND estimators among ", 1)[1].split(" (default", 1)[0]
    names = listed.split(", ")
    assert "trig" in names and "positive" in names
    assert not set(names) & set(refused), names


@pytest.mark.parametrize("kind", _not_for_attention())
def test_attention_refuses_other_kinds_naming_kind(capsys, tmp_path, kind):
    err = _usage_error(["attention", "--kind", kind, "--L", "8", "--samples", "2", "--m", "2",
                        "--out", str(tmp_path / "a.csv")], capsys)
    assert err.startswith("rfkernels attention: error: argument --kind: invalid choice: "
                          f"'{kind}'"), err
    assert "preset" not in err and "expected one of trig, positive" in err, err
    reason = registry.entry("kind", kind).feature_map.attention_reason
    if reason is not None:  # the registry's reason, with its advice as an option
        assert "--kind trig" in err and "kind='trig'" not in err, err
    assert not list(tmp_path.iterdir())


# ---------------------------------------------------------------------------
# 3. compare --norms antithetic: the default ensembles narrowed, a refused one names --ensemble
# ---------------------------------------------------------------------------


def test_compare_antithetic_norms_narrow_the_default_ensembles(capsys):
    argv = ["compare", "--norms", "antithetic", "--kind", "positive", "--m", "4",
            "--trials", "200", "--proposal", "plain", "--json"]
    main(argv)
    captured = capsys.readouterr()
    assert "error" not in captured.err, captured.err
    import json

    rows = json.loads(captured.out)["rows"]
    assert [r["ensemble"] for r in rows] == ["orthogonal"]
    # --json explains each null from the row's own estimator (there is no iid one to ask)
    assert rows[0]["null_reasons"]["mse_lemma2"] == "Lemma 2 holds for independent chi norms only"


def test_compare_refused_ensemble_names_the_options(capsys):
    err = _run_error(["compare", "--norms", "antithetic", "--ensemble", "iid,orthogonal",
                      "--trials", "200"], capsys)
    assert "--ensemble iid with --norms antithetic" in err, err


def test_compare_default_ensembles_unchanged_for_chi(capsys):
    import json

    main(["compare", "--kind", "positive", "--m", "4", "--trials", "200", "--proposal", "plain",
          "--json"])
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["ensemble"] for r in rows] == ["iid", "orthogonal"]


# ---------------------------------------------------------------------------
# 4. mse beyond float64: the options, not "rescale x and y"
# ---------------------------------------------------------------------------


def test_mse_gamma_overflow_names_gamma(capsys):
    err = _run_error(["mse", "--kernel", "gaussian", "--gamma", "1e300", "--d", "4", "--m", "4",
                      "--trials", "100", "--backend", "numpy"], capsys)
    assert "--gamma 1e+300" in err and "reduce --gamma" in err and "--norm-x" in err, err
    assert "rescale x and y" not in err and "e^4.322e+300" in err and len(err) < 250, err


def test_mse_softmax_overflow_names_the_norms(capsys):
    err = _run_error(["mse", "--norm-x", "30", "--norm-y", "30", "--angle", "0", "--trials", "100",
                      "--backend", "numpy"], capsys)
    assert "reduce --norm-x or --norm-y" in err and "rescale" not in err, err


# ---------------------------------------------------------------------------
# 5. rank --pairs FILE and --d: the file and the array, the option
# ---------------------------------------------------------------------------


def _huge_npz(path):
    """An .npz whose X's header claims 1e6 x 1e6 float64 (7 TiB); Y is small."""
    import io
    import zipfile

    from numpy.lib import format as npy

    header = io.BytesIO()
    npy.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False,
                                        "shape": (10**6, 10**6)})
    small = io.BytesIO()
    np.save(small, np.ones((1, 2)))
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("X.npy", header.getvalue() + b"\0" * 64)
        zf.writestr("Y.npy", small.getvalue())


@pytest.mark.parametrize("make, match", [
    ("nan", r"pairs\.npz: array X must be finite \(no inf or NaN\)$"),
    ("object", r"pairs\.npz: array X holds Python objects \(dtype object\); expected real numbers$"),
    ("huge", r"MemoryError: ranking the pairs of .*pairs\.npz \(array X of shape "
             r"\(1000000, 1000000\), Y of shape \(1, 2\)\) needs about .* \(reduce the pairs in "
             r"--pairs\)$"),
    ("strings", r"pairs\.npz: array Y must hold real numbers; got strings$"),
    ("shapes", r"pairs\.npz: arrays X and Y must have the same shape \(n, d\)"),
    ("empty", r"pairs\.npz: arrays X and Y must hold at least one pair"),
    ("cube", r"pairs\.npz: array X must have shape \(n, d\); got \(2, 2, 2\)$"),
])
def test_rank_pairs_errors_name_the_file_and_the_array(capsys, tmp_path, make, match):
    import re

    path = tmp_path / "pairs.npz"
    ones = np.ones((2, 3))
    if make == "huge":
        _huge_npz(path)
    else:
        X, Y = {"nan": (np.array([[np.nan, 1.0, 0.0], [0.0, 1.0, 0.0]]), ones),
                "object": (np.array([[1.0, "a", None]], dtype=object), ones),
                "strings": (ones, np.array([["a", "b", "c"]] * 2)),
                "shapes": (ones, np.ones((3, 3))),
                "empty": (np.ones((0, 3)), np.ones((0, 3))),
                "cube": (np.ones((2, 2, 2)), ones)}[make]
        np.savez(path, X=X, Y=Y, allow_pickle=True) if make == "object" else np.savez(path, X=X, Y=Y)
    err = _run_error(["rank", "--pairs", str(path)], capsys)
    assert re.search(match, err), err
    assert "allow_pickle" not in err and "x must" not in err and "Unable to allocate" not in err


def test_rank_d_memory_and_range_name_the_option(capsys):
    err = _run_error(["rank", "--d", "1e18"], capsys)
    assert "MemoryError: rank at --d 1000000000000000000" in err and "(reduce --d)" in err, err
    assert "theory.pair" not in err and "chunk" not in err
    err = _run_error(["rank", "--d", "0"], capsys)
    assert err.endswith("--d must be an integer >= 1; got 0"), err
    err = _run_error(["rank", "--norm-x", "1e160"], capsys)
    assert "reduce --norm-x and --norm-y" in err and "rescale the inputs" not in err, err


def test_rank_pairs_file_still_ranks(capsys, tmp_path):
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(5, 4)) * 0.3, rng.normal(size=(5, 4)) * 0.3
    path = tmp_path / "pairs.npz"
    np.savez_compressed(path, X=X, Y=Y)
    assert main(["rank", "--r", "8", "--pairs", str(path)]) == 0
    text = capsys.readouterr().out
    best = rank_estimators(X, Y, r=8).best
    first = next(line for line in text.splitlines() if line.strip().startswith("1  "))
    assert best.name in first and f"{best.mse:10.4e}" in first


# ---------------------------------------------------------------------------
# 6. rank at extreme norms: the relative error of an estimate of about 0 is 100%
# ---------------------------------------------------------------------------


def test_rank_says_an_estimate_of_about_zero_has_relative_error_100_percent(capsys):
    ranking = rank_estimators(*theory.pair(16, 6.0, 6.0, 0.5), r=64)
    best = ranking.best
    log_k = 36.0 * np.cos(0.5)  # SM = exp(x.y)
    assert best.log_mse == pytest.approx(2 * log_k, rel=1e-9)  # MSE = SM^2: the estimate is ~0
    assert best.relative_rmse == pytest.approx(1.0, rel=1e-9)
    assert best.to_dict()["relative_rmse"] == pytest.approx(1.0, rel=1e-9)
    assert main(["rank", "--norm-x", "6", "--norm-y", "6", "--angle", "0.5"]) == 0
    text = capsys.readouterr().out
    first = next(line for line in text.splitlines() if line.strip().startswith("1  "))
    assert first.rstrip().endswith("100%") and f"{best.mse:10.4e}" in first, first
    assert "rel RMSE 100% (rank 1-" in text and "the estimate is about 0" in text


def test_rank_relative_rmse_is_sqrt_mse_over_the_kernel_and_mse_unchanged(capsys):
    x, y = theory.pair(16, 0.5, 0.5, 1.0)
    ranking = rank_estimators(x, y, r=32)
    sm = float(np.exp(x @ y))
    for row in ranking.ranked:
        assert row.relative_rmse == pytest.approx(np.sqrt(row.mse) / sm, rel=1e-9)
        assert row.mse == pytest.approx(float(theory.exact_mse(x, y, row.m, row.kind,
                                                               ensemble=row.ensemble,
                                                               norms=row.norms)), rel=1e-12)
    assert main(["rank", "--r", "32", "--d", "16", "--norm-x", "0.5", "--norm-y", "0.5"]) == 0
    text = capsys.readouterr().out
    assert "rel RMSE: sqrt(MSE)/SM" in text and "rel RMSE 100%" not in text
    for row in ranking.unranked:
        assert row.relative_rmse is None and row.to_dict()["null_reasons"]["relative_rmse"]


# ---------------------------------------------------------------------------
# 7. no NumPy overflow warning from rank at gamma = 1e300
# ---------------------------------------------------------------------------


def test_rank_gaussian_huge_gamma_warns_nothing(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a RuntimeWarning would end main with a traceback
        assert main(["rank", "--kernel", "gaussian", "--gamma", "1e300"]) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "trig/iid/chi" in captured.out


# ---------------------------------------------------------------------------
# 8. sweep: how long it really waited for the scheduler
# ---------------------------------------------------------------------------


def test_sweep_scheduler_error_says_how_long_it_waited(capsys, tmp_path, monkeypatch):
    distributed = pytest.importorskip("distributed")

    def refused(address, timeout):
        time.sleep(0.3)
        raise OSError(f"Connection refused: {address}")

    monkeypatch.setattr(distributed, "Client", refused)
    out = tmp_path / "o"
    err = _run_error(["sweep", "--d", "4", "--m", "2", "--angle", "0.5", "--trials", "100",
                      "--scheduler", "tcp://127.0.0.1:1", "--out", str(out)], capsys)
    import re

    found = re.search(r"cannot reach the Dask scheduler at tcp://127\.0\.0\.1:1 \(waited "
                      r"([0-9.]+) s\): Connection refused", err)
    assert found, err
    assert 0.3 <= float(found.group(1)) < 2.0, err
    assert not out.exists()


# ---------------------------------------------------------------------------
# 9. a sweep grid: a repeated value counts once, in the TOML file as on the command line
# ---------------------------------------------------------------------------


def test_sweep_grid_repeated_value_counts_once(tmp_path, capsys):
    import json

    from rfkernels.analysis.sweep import SweepSpec

    spec = SweepSpec.from_dict({"d": [4, 4], "m": [2, 4, 2], "angle": [0.5], "kind": ["trig", "trig"]})
    assert spec.grid["m"] == [2, 4] and spec.grid["d"] == [4] and spec.grid["kind"] == ["trig"]
    toml = tmp_path / "grid.toml"
    toml.write_text("[grid]\nd = [4]\nm = [2, 2]\nangle = [0.5]\n[run]\ntrials = 100\n"
                    "theory_only = true\n")
    assert SweepSpec.from_toml(toml).grid["m"] == [2]
    counts = []
    for name, argv in (("file", [str(toml)]),
                       ("option", ["--d", "4", "--m", "2,2", "--angle", "0.5", "--trials", "100",
                                   "--theory-only"])):
        assert main(["sweep", *argv, "--out", str(tmp_path / name), "--json"]) == 0, name
        counts.append(json.loads(capsys.readouterr().out)["points"])
    assert counts == [1, 1]
    assert (SweepSpec.from_toml(toml).fingerprint()
            == SweepSpec.from_dict({"d": [4], "m": [2], "angle": [0.5]},
                                   {"trials": 100, "theory_only": True}).fingerprint())


def test_figures_out_dangling_link_is_refused_before_any_work(tmp_path, capsys):
    """The one output-folder rule (storage.check_output_folder) refuses a link to nothing for
    every command that writes a folder, figures as diagnose."""
    import os

    from rfkernels.commands.cli import main

    link = tmp_path / "out"
    os.symlink(tmp_path / "missing", link)
    assert main(["figures", "--only", "ratio", "--quick", "--out", str(link)]) == 2
    err = capsys.readouterr().err
    assert "--out" in err and "symbolic link" in err and "which does not exist" in err
    assert not (tmp_path / "missing").exists()
