"""``--kernel`` and ``--gamma`` on the command line: rfkernels mse and rfkernels sweep.

Small runs (numpy backend, a few thousand trials); the file takes seconds.
"""

from __future__ import annotations

import json
import math

import pytest

from rfkernels import theory
from rfkernels.analysis.sweep import load_table
from rfkernels.commands.cli import main

NX, NY, ANGLE, D = 0.8, 1.1, 1.2, 4
MSE = ["mse", "--backend", "numpy", "--trials", "4000", "--d", str(D),
       "--m", "3", "--norm-x", str(NX), "--norm-y", str(NY), "--angle", str(ANGLE),
       "--no-progress"]
#: |x - y|^2 from the norms and the angle.
DIFF_SQ = NX**2 + NY**2 - 2 * NX * NY * math.cos(ANGLE)


def _strict(text):
    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _nulls_explained(out):
    return {k for k, v in out.items() if v is None} <= set(out.get("null_reasons", {}))


@pytest.mark.parametrize("kind,dimension", [("positive", 3), ("trig", 6), ("offset", 3)])
def test_mse_gaussian_json(kind, dimension, capsys):
    gamma = 0.3
    assert main([*MSE, "--kind", kind, "--kernel", "gaussian", "--gamma", str(gamma),
                 "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["kernel"] == "gaussian" and out["gamma"] == gamma
    assert out["output_dimension"] == dimension
    assert out["norm_diff_sq"] == pytest.approx(DIFF_SQ, rel=1e-14)
    assert out["sm"] == pytest.approx(math.exp(-gamma * DIFF_SQ), rel=1e-14)
    x, y = theory.pair(D, NX, NY, ANGLE)
    want = float(theory.exact_mse(x, y, 3, kind, kernel="gaussian", gamma=gamma))
    assert out["mse_exact"] == pytest.approx(want, rel=1e-12)
    assert out["tail_ok"] is True and abs(out["z"]) < 4
    assert out["mse_theorem2"] is None and "softmax" in out["null_reasons"]["mse_theorem2"]
    assert _nulls_explained(out)


def test_mse_softmax_json_explains_its_null_gamma(capsys):
    assert main([*MSE, "--json"]) == 0
    out = _strict(capsys.readouterr().out)
    assert out["kernel"] == "softmax" and out["gamma"] is None and out["output_dimension"] == 3
    assert "no gamma" in out["null_reasons"]["gamma"]
    assert out["sm"] == pytest.approx(math.exp(NX * NY * math.cos(ANGLE)), rel=1e-14)
    assert _nulls_explained(out)


def test_mse_gaussian_text_names_the_kernel_and_the_output_dimension(capsys):
    assert main([*MSE, "--kind", "trig", "--kernel", "gaussian", "--gamma", "0.7"]) == 0
    text = capsys.readouterr().out
    assert "estimator of K = exp(-gamma |x - y|^2), gamma = 0.7" in text
    assert "(output dimension 6)" in text and f"K = {math.exp(-0.7 * DIFF_SQ):.6g}" in text
    assert "of the softmax kernel only; here kind is 'trig', ensemble is 'iid', kernel is 'gaussian'" in text


def _one_error(argv, capsys):
    """Exit status 2 and one ``error:`` line, no traceback, whether argparse or the run refuses."""
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    errors = [line for line in lines if "error:" in line]
    assert code == 2 and len(errors) == 1 and "Traceback" not in captured.err, captured.err
    assert captured.out == ""
    return errors[0]


@pytest.mark.parametrize("gamma,needle", [
    ("0", "gamma must be one finite number > 0"), ("-1", "gamma must be one finite number > 0"),
    ("inf", "gamma must be one finite number > 0; got inf"),
    ("nan", "gamma must be one finite number > 0; got nan"),
    ("abc", "argument --gamma: expected a number, got 'abc'"),
    ("1j", "argument --gamma: expected a number, got '1j'"),
])
def test_mse_bad_gamma_is_one_line_exit_2(gamma, needle, capsys):
    assert needle in _one_error([*MSE, "--kernel", "gaussian", "--gamma", gamma], capsys)


def test_mse_gamma_and_kernel_go_together(capsys):
    assert "gamma is the parameter of kernel='gaussian' only" in _one_error(
        [*MSE, "--gamma", "0.5"], capsys)
    assert "kernel='gaussian' needs gamma > 0" in _one_error([*MSE, "--kernel", "gaussian"], capsys)
    assert "argument --kernel: invalid choice: 'rbf'" in _one_error(
        [*MSE, "--kernel", "rbf", "--gamma", "1"], capsys)


SWEEP = ["sweep", "--kind", "positive,offset", "--d", "8", "--m", "4,16", "--angle", "1",
         "--theory-only"]


def test_sweep_kernel_and_gamma_lists(tmp_path, capsys):
    # the command of docs/sweeps.rst
    assert main([*SWEEP, "--kernel", "gaussian", "--gamma", "0.25,1", "--out",
                 str(tmp_path / "gammas"), "--json"]) == 0
    rows = load_table(_strict(capsys.readouterr().out)["results"])
    assert len(rows) == 8 and {r["gamma"] for r in rows} == {0.25, 1.0}
    for r in rows:
        x, y = theory.pair(8, 1.0, 1.0, 1.0)
        want = float(theory.exact_mse(x, y, r["m"], r["kind"], kernel="gaussian", gamma=r["gamma"]))
        assert r["kernel"] == "gaussian" and r["mse_exact"] == pytest.approx(want, rel=1e-12)
        assert r["output_dimension"] == r["m"] and r["theorem2_bound"] is None
    assert main([*SWEEP, "--kernel", "softmax,gaussian", "--gamma", "0.5", "--out",
                 str(tmp_path / "both")]) == 0
    capsys.readouterr()
    rows = load_table(tmp_path / "both" / "results.csv")
    assert [(r["kernel"], r["gamma"]) for r in rows[:2]] == [("softmax", None), ("softmax", None)]
    assert {r["gamma"] for r in rows if r["kernel"] == "gaussian"} == {0.5}


@pytest.mark.parametrize("extra,needle", [
    (["--gamma", "0.5"], "grid.gamma: only the Gaussian kernel has gamma"),
    (["--kernel", "gaussian"], "grid.gamma: missing; kernel 'gaussian' needs gamma > 0"),
    (["--kernel", "softmax,gaussian", "--gamma", "0.5,2"], "takes one gamma"),
    (["--kernel", "gaussian", "--gamma", "0"], "grid.gamma: gamma must be one finite number > 0"),
    (["--kernel", "gaussian", "--gamma", "-1"], "grid.gamma: gamma must be one finite number > 0"),
    (["--kernel", "gaussian", "--gamma", "inf"], "grid.gamma: gamma must be one finite number"),
    (["--kernel", "gaussian", "--gamma", "nan"], "grid.gamma: gamma must be one finite number"),
    (["--kernel", "gaussian", "--gamma", "abc"], "argument --gamma: expected a number"),
    (["--kernel", "gaussian", "--gamma", "1j"], "argument --gamma: expected a number"),
])
def test_sweep_bad_kernel_axes_are_one_line_exit_2(extra, needle, tmp_path, capsys):
    out = tmp_path / "o"
    assert needle in _one_error([*SWEEP, *extra, "--out", str(out)], capsys)
    assert not out.exists()


@pytest.mark.parametrize("command", ["mse", "sweep"])
def test_help_gives_the_gaussian_kernel(command, capsys):
    with pytest.raises(SystemExit):
        main([command, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "K(x, y) = exp(-gamma |x - y|^2)" in text and "--gamma" in text
