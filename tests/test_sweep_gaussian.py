"""Sweeps over the target kernel: the ``kernel`` and ``gamma`` axes, their tables and old tables.

Theory-only grids and one tiny Monte Carlo grid (numpy backend, a few
thousand trials); the whole file takes seconds.
"""

import csv
import io
import json
import math
import re
import shutil
from pathlib import Path

import pytest

from rfkernels import theory
from rfkernels.analysis import compare, evaluate_point
from rfkernels.analysis.monte_carlo import monte_carlo_mse
from rfkernels.analysis.points import point_geometry, point_id, point_seed
from rfkernels.analysis.sweep import (COLUMNS, SweepError, SweepSpec, load_table, run_sweep,
                                      theory_table)
from rfkernels.analysis.sweep import grid as grid_mod, rows as rows_mod
from rfkernels.estimators import estimator

ROOT = Path(__file__).resolve().parents[1]
GEOMETRY = {"d": [4], "m": [2, 5], "angle": [0.5, 2.0], "norm_x": [0.7], "norm_y": [1.2]}
KINDS = ["positive", "trig", "hyperbolic", "offset"]
#: Both kernels in one grid: one gamma (not 0.5, where sqrt(2 gamma) = 1 scales nothing).
MIXED = {**GEOMETRY, "kind": KINDS, "ensemble": ["iid", "orthogonal"],
         "kernel": ["softmax", "gaussian"], "gamma": [0.3]}
THEORY = {"theory_only": True}

#: Columns of a table written before the kernel axes (rfkernels at the commit before them).
OLD_HEADER = ("point_id,kind,ensemble,norms,backend,d,m,angle,norm_x,norm_y,norm_sum,trials,"
              "mse_mc,stderr,ci_low,ci_high,bias,bias_stderr,mse_exact,mse_lemma2,theorem2_bound,"
              "z,k_hat,max_share,tail_ok,proposal,ess,note,seconds\n")


def _pair(r):
    return theory.pair(r["d"], r["norm_x"], r["norm_y"], r["angle"])


def _kernel_args(r):
    return {} if r["kernel"] == "softmax" else {"kernel": "gaussian", "gamma": r["gamma"]}


# ---------------------------------------------------------------------------
# Theory-only: the closed forms of the Gaussian kernel's estimate
# ---------------------------------------------------------------------------


def test_gaussian_theory_only_sweep_equals_exact_mse(tmp_path):
    spec = SweepSpec.from_dict(MIXED, THEORY)
    rows = load_table(run_sweep(spec, tmp_path / "mixed"))
    assert len(rows) == len(KINDS) * 2 * 2 * 2 * 2
    for r in rows:
        x, y = _pair(r)
        assert (r["gamma"] is None) == (r["kernel"] == "softmax")
        want = float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"],
                                      **_kernel_args(r)))
        assert r["mse_exact"] == pytest.approx(want, rel=1e-12)
        assert r["output_dimension"] == r["m"] * (2 if r["kind"] in ("trig", "hyperbolic") else 1)
        if r["kernel"] == "gaussian":
            assert r["theorem2_bound"] is None  # Theorem 2 is about exp(x.y) only
        if r["kind"] != "offset":  # Lemma 2, scaled to the Gaussian kernel (iid: the exact MSE)
            est = estimator(r["kind"], **_kernel_args(r))
            lemma = math.exp(float(theory.lemma2_of(theory.geometry(x, y), r["m"], est)))
            assert r["mse_lemma2"] == pytest.approx(lemma, rel=1e-12)
            if r["ensemble"] == "iid":
                assert r["mse_lemma2"] == pytest.approx(r["mse_exact"], rel=1e-10)
        else:
            assert r["mse_lemma2"] is None
    # the softmax rows of the mixed grid are those of a softmax-only grid, ids included
    plain = load_table(run_sweep(SweepSpec.from_dict({k: v for k, v in MIXED.items()
                                                      if k not in ("kernel", "gamma")}, THEORY),
                                 tmp_path / "softmax"))
    assert [r for r in rows if r["kernel"] == "softmax"] == plain
    # several gammas in a grid of the Gaussian kernel
    spec = SweepSpec.from_dict({**GEOMETRY, "kind": ["positive", "offset"],
                                "kernel": ["gaussian"], "gamma": [0.3, 1.7]}, THEORY)
    rows = load_table(run_sweep(spec, tmp_path / "gammas"))
    assert sorted({r["gamma"] for r in rows}) == [0.3, 1.7]
    for r in rows:
        x, y = _pair(r)
        want = float(theory.exact_mse(x, y, r["m"], r["kind"], kernel="gaussian", gamma=r["gamma"]))
        assert r["mse_exact"] == pytest.approx(want, rel=1e-12)


def test_theory_only_rows_are_evaluate_point_rows_and_ids_are_point_ids(tmp_path):
    spec = SweepSpec.from_dict(MIXED, THEORY)
    text = Path(run_sweep(spec, tmp_path / "o")).read_text()
    cols = theory_table(spec)
    lines = [",".join(COLUMNS) + "\n"]
    for i, p in enumerate(spec.points()):
        row = evaluate_point(p, trials=10, seed=0, theory_only=True)
        for name in ("mse_exact", "mse_lemma2", "theorem2_bound"):  # batch and scalar: 1 ulp apart
            assert cols[name][i] == pytest.approx(row[name], rel=1e-13, nan_ok=True)
            row[name] = float(cols[name][i])
        row["point_id"], row["seconds"] = point_id(p), 0.0
        lines.append(rows_mod.row_line(row))
    assert text == "".join(lines)  # the vectorised path writes what one row at a time would
    assert grid_mod.grid_ids(spec) == [point_id(p) for p in spec.points()]


# ---------------------------------------------------------------------------
# Monte Carlo
# ---------------------------------------------------------------------------


def test_a_tiny_gaussian_monte_carlo_sweep_agrees_with_theory(tmp_path):
    grid = {"kind": ["positive", "trig"], "kernel": ["gaussian"], "gamma": [0.8], "d": [4],
            "m": [4], "angle": [1.0], "norm_x": [0.8], "norm_y": [0.9]}
    spec = SweepSpec.from_dict(grid, {"trials": 4000, "seed": 2, "backend": "numpy"})
    rows = load_table(run_sweep(spec, tmp_path / "mc"))
    for r, p in zip(rows, spec.points()):
        assert r["kernel"] == "gaussian" and r["gamma"] == 0.8 and r["trials"] == 4000
        assert r["tail_ok"] is True and abs(r["z"]) < 4, r
        res = monte_carlo_mse(
            point_geometry(p), None, 4, r["kind"], kernel="gaussian", gamma=0.8, trials=4000,
            seed=point_seed(2, p), backend="numpy")
        assert res.sm == pytest.approx(math.exp(-0.8 * (0.64 + 0.81 - 2 * 0.72 * math.cos(1.0))))
        assert r["mse_mc"] == res.mse and r["output_dimension"] == res.output_dimension


def test_compare_and_evaluate_point_take_the_kernel():
    geometry = {"d": 4, "angle": 1.0, "norm_x": 0.8, "norm_y": 0.9}
    rows = compare(geometry, kinds="positive", ensembles="iid", m=4, trials=2000, seed=1,
                   kernel="gaussian", gamma=1.5)
    (r,) = rows
    assert (r["kernel"], r["gamma"], r["output_dimension"]) == ("gaussian", 1.5, 4)
    assert r["iid_eq_lemma2"] is True and r["theorem2_bound"] != r["theorem2_bound"]  # NaN
    assert "kernel" not in compare(geometry, kinds="trig", ensembles="iid", m=4, trials=2000)[0]
    for kwargs, match in [({"gamma": 0.5}, "gamma is the parameter of kernel='gaussian' only"),
                          ({"kernel": "gaussian"}, "needs gamma > 0")]:
        with pytest.raises(ValueError, match=match):
            compare(geometry, trials=2000, **kwargs)
    point = {"kind": "positive", "ensemble": "iid", "norms": "chi", "d": 4, "m": 4, "angle": 1.0,
             "norm_x": 0.8, "norm_y": 0.9, "kernel": "gaussian", "gamma": -1.0}
    with pytest.raises(ValueError, match="gamma must be one finite number > 0"):
        evaluate_point(point, trials=10, seed=0, theory_only=True)


# ---------------------------------------------------------------------------
# The rules of the axes
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("grid,match", [
    ({"gamma": [0.5]}, r"grid\.gamma: only the Gaussian kernel has gamma"),
    ({"kernel": ["softmax"], "gamma": [0.5]}, r"grid\.gamma: only the Gaussian kernel has gamma"),
    ({"kernel": ["gaussian"]}, r"grid\.gamma: missing; kernel 'gaussian' needs gamma > 0"),
    ({"kernel": ["softmax", "gaussian"], "gamma": [0.5, 1.0]}, r"grid\.gamma: .* takes one gamma"),
    ({"kernel": ["rbf"], "gamma": [0.5]}, r"grid\.kernel: 'rbf' is not one of softmax, gaussian"),
    ({"kernel": ["gaussian"], "gamma": [0]}, r"grid\.gamma: gamma must be one finite number > 0"),
    ({"kernel": ["gaussian"], "gamma": [-1.0]}, r"grid\.gamma: gamma must be one finite number"),
    ({"kernel": ["gaussian"], "gamma": [math.inf]}, r"grid\.gamma: .*finite number > 0; got inf"),
    ({"kernel": ["gaussian"], "gamma": [math.nan]}, r"grid\.gamma: .*finite number > 0; got nan"),
    ({"kernel": ["gaussian"], "gamma": [True]}, r"grid\.gamma: values must be numbers"),
    ({"kernel": ["gaussian"], "gamma": ["abc"]}, r"grid\.gamma: values must be numbers"),
])
def test_bad_kernel_axes_name_the_key(grid, match):
    with pytest.raises(SweepError, match=match) as exc:
        SweepSpec.from_dict({**GEOMETRY, **grid}, THEORY)
    assert "\n" not in str(exc.value)


def test_old_grids_keep_their_fingerprint_and_their_points_their_ids():
    # fingerprints and a point_id written by rfkernels before the kernel axes
    old = [({"d": [4], "m": [2, 4], "angle": [0.5]}, {}, "31dac3979be7f99aca0a"),
           ({"kind": ["positive", "trig"], "ensemble": ["iid", "orthogonal"], "d": [4],
             "m": [2, 4], "angle": [0.5, 2.0], "norm_x": [0.4], "norm_y": [0.5]},
            {"trials": 2000, "seed": 7, "backend": "numpy"}, "5c9bc2923401d2bba9e0"),
           ({"d": [3], "m": [2], "angle": [1.0], "norm_sum": [0.7]}, THEORY,
            "a8f9127eaaffb476d07c")]
    for grid, run, fingerprint in old:
        assert SweepSpec.from_dict(grid, run).fingerprint() == fingerprint
        with_kernel = SweepSpec.from_dict({**grid, "kernel": ["softmax"]}, run)
        assert with_kernel.fingerprint() == fingerprint
    grid, run, fingerprint = old[0]
    gaussian = {g: SweepSpec.from_dict({**grid, "kernel": ["gaussian"], "gamma": [g]}, run)
                for g in (0.5, 2.0)}
    prints = {s.fingerprint() for s in gaussian.values()}
    assert len(prints) == 2 and fingerprint not in prints
    point = {"kind": "positive", "ensemble": "iid", "norms": "chi", "backend": "numpy", "d": 4,
             "m": 2, "angle": 0.5, "norm_x": 0.4, "norm_y": 0.9, "norm_sum": None}
    for extra in ({}, {"kernel": "softmax", "gamma": None}):
        assert point_id({**point, **extra}) == "bb69d72fbaf3ce7b"
    assert point_id({**point, "kernel": "gaussian", "gamma": 0.5}) != "bb69d72fbaf3ce7b"
    assert (point_seed(0, point).generate_state(2).tolist()
            == point_seed(0, {**point, "kernel": "softmax"}).generate_state(2).tolist())


# ---------------------------------------------------------------------------
# Tables written before the kernel axes
# ---------------------------------------------------------------------------

OLD_GRID = {"kind": ["positive", "trig"], "ensemble": ["iid", "orthogonal"], "d": [4],
            "m": [2, 5], "angle": [0.5, 2.0], "norm_x": [0.4], "norm_y": [0.9]}


def _old_table(new_text):
    """A table as rfkernels wrote it before the kernel axes: the same rows without kernel,
    gamma and output_dimension (softmax rows are the same numbers then and now)."""
    keep = [COLUMNS.index(c) for c in COLUMNS if c not in ("kernel", "gamma", "output_dimension")]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    for fields in csv.reader(io.StringIO(new_text)):
        writer.writerow([fields[i] for i in keep])
    return buf.getvalue()


def _without_seconds(text):
    i = COLUMNS.index("seconds")
    return [r[:i] + r[i + 1:] for r in csv.reader(io.StringIO(text))]


@pytest.mark.parametrize("run", [THEORY, {"trials": 300, "seed": 3, "backend": "numpy"}])
def test_resuming_a_table_written_before_the_kernel_axes(tmp_path, run):
    spec = SweepSpec.from_dict(OLD_GRID, run)
    want = Path(run_sweep(spec, tmp_path / "fresh")).read_text()
    old = _old_table(want)
    assert old.splitlines(keepends=True)[0] == OLD_HEADER
    shutil.copytree(tmp_path / "fresh", tmp_path / "o")
    path = tmp_path / "o" / "results.csv"
    lines = old.splitlines(keepends=True)
    path.write_text("".join(lines[:4] + lines[9:]) + lines[4][:25])  # points missing, a torn line
    meta = json.loads((tmp_path / "o" / "sweep.json").read_text())
    meta["columns"] = OLD_HEADER.strip().split(",")
    (tmp_path / "o" / "sweep.json").write_text(json.dumps(meta))
    # read as it is: the rows of the current columns, softmax rows
    rows = load_table(path)
    assert len(rows) == len(lines) - 6
    assert {(r["kernel"], r["gamma"]) for r in rows} == {("softmax", None)}
    assert all(r["output_dimension"] == r["m"] * (2 if r["kind"] == "trig" else 1) for r in rows)
    # the same grid (the same fingerprint) resumes it: the table of an uninterrupted sweep
    got = Path(run_sweep(spec, tmp_path / "o", resume=True)).read_text()
    assert (got == want) if run is THEORY else (_without_seconds(got) == _without_seconds(want))
    assert json.loads((tmp_path / "o" / "sweep.json").read_text())["columns"] == list(COLUMNS)
    # a grid with the Gaussian kernel is another grid
    other = SweepSpec.from_dict({**OLD_GRID, "kernel": ["softmax", "gaussian"], "gamma": [1.0]},
                                run)
    with pytest.raises(SweepError, match="different grid"):
        run_sweep(other, tmp_path / "o", resume=True)


def _corrupt(text, lineno, column, value):
    lines = text.splitlines(keepends=True)
    fields = next(csv.reader([lines[lineno - 1]]))
    fields[COLUMNS.index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    lines[lineno - 1] = buf.getvalue()
    return "".join(lines)


@pytest.mark.parametrize("lineno,column,value,match", [
    (2, "gamma", "0.3", r"line 2 has gamma = 0.3 with kernel = 'softmax' \(a kernel without "),
    (6, "gamma", "", r"line 6 has no gamma with kernel = 'gaussian' \(that kernel needs gamma"),
    (6, "gamma", "-0.3", r"line 6 has gamma = '-0.3' is not > 0"),
    (3, "output_dimension", "7", r"line 3 has output_dimension = 7 where kind 'positive' at "
                                 r"m = 2 has 2"),
    (3, "kernel", "rbf", r"line 3 has kernel = 'rbf' is not one of softmax, gaussian"),
])
def test_a_row_whose_kernel_columns_do_not_agree_is_refused(tmp_path, lineno, column, value,
                                                             match):
    spec = SweepSpec.from_dict({**GEOMETRY, "kind": ["positive"], "kernel": ["softmax", "gaussian"],
                                "gamma": [0.3]}, THEORY)
    path = Path(run_sweep(spec, tmp_path / "o"))
    lines = path.read_text().splitlines()
    assert ",softmax,," in lines[1] and ",gaussian,0.3," in lines[5]
    path.write_text(_corrupt(path.read_text(), lineno, column, value))
    before = path.read_bytes()
    with pytest.raises(SweepError, match=match):
        run_sweep(spec, tmp_path / "o", resume=True)
    assert path.read_bytes() == before
    with pytest.raises(SweepError, match=match):
        load_table(path)


# ---------------------------------------------------------------------------
# The example of docs/sweeps.rst
# ---------------------------------------------------------------------------


def test_the_kernel_example_of_the_sweeps_page_runs_as_it_says(tmp_path):
    text = (ROOT / "docs" / "sweeps.rst").read_text(encoding="utf-8")
    section = text[text.index("Target kernels: ``kernel`` and ``gamma``"):]
    block = re.search(r"\.\. code-block:: toml\n\n((?:    .*\n|\n)+)", section).group(1)
    toml = "\n".join(line[4:] for line in block.splitlines())
    (tmp_path / "kernels.toml").write_text(toml)
    spec = SweepSpec.from_toml(tmp_path / "kernels.toml")
    rows = load_table(run_sweep(spec, tmp_path / "kernels"))
    assert len(rows) == len(spec.points()) == 24
    softmax = [r for r in rows if r["kernel"] == "softmax"]
    gaussian = [r for r in rows if r["kernel"] == "gaussian"]
    assert len(softmax) == len(gaussian) == 12
    assert {r["gamma"] for r in softmax} == {None} and {r["gamma"] for r in gaussian} == {0.25}
    assert all(r["theorem2_bound"] is None for r in gaussian)
    assert any(r["theorem2_bound"] is not None for r in softmax)
    dims = {(r["kind"], r["m"]): r["output_dimension"] for r in rows}
    assert dims == {("positive", 4): 4, ("positive", 16): 16, ("trig", 4): 8, ("trig", 16): 32,
                    ("offset", 4): 4, ("offset", 16): 16}
    for r in gaussian:  # offset pays 1/(2m) over trig for the Gaussian kernel (docs)
        if r["kind"] == "offset":
            (trig,) = [t for t in gaussian if t["kind"] == "trig" and t["ensemble"] == r["ensemble"]
                       and t["m"] == r["m"] and t["angle"] == r["angle"]]
            assert r["mse_exact"] == pytest.approx(trig["mse_exact"] + 1 / (2 * r["m"]), rel=1e-12)
