"""Every figure renders (Agg, --quick), and the data it plots is the theory it claims."""

import os

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from rfkernels import theory
from rfkernels.cli import main
from rfkernels.figures import FIGURES, figure_module, make_figures


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    out = tmp_path_factory.mktemp("figures")
    return out, make_figures(str(out), quick=True, seed=3)


def test_every_figure_is_written_with_its_data(quick):
    out, results = quick
    assert set(results) == set(FIGURES)
    for name, res in results.items():
        exts = {os.path.splitext(p)[1] for p in res.paths}
        assert {".pdf", ".png", ".csv"} <= exts, name
        for p in res.paths:
            assert os.path.getsize(p) > 0, p
        png = next(p for p in res.paths if p.endswith(".png"))
        with open(png, "rb") as fh:
            assert fh.read(8) == b"\x89PNG\r\n\x1a\n"


def test_ratio_heatmap_is_the_closed_form(quick):
    data = quick[1]["ratio"].data
    length = np.array([r["length"] for r in data["heatmap"]])
    phi = np.array([r["angle"] for r in data["heatmap"]])
    sm = np.exp(length**2 * np.cos(phi))
    s = 2 * length**2 * (1 + np.cos(phi))
    t = 2 * length**2 * (1 - np.cos(phi))
    want = np.log10((1 - np.exp(-t)) ** 2 / (2 * sm**4 * (1 - np.exp(-s))))
    np.testing.assert_allclose([r["log10_ratio"] for r in data["heatmap"]], want, rtol=1e-9, atol=1e-12)
    # symmetric in the length and in the angle, as in the paper
    n_l, n_phi = data["shape"]
    heat = np.array([r["log10_ratio"] for r in data["heatmap"]]).reshape(n_l, n_phi)
    np.testing.assert_allclose(heat, heat[::-1, :], rtol=1e-9)
    np.testing.assert_allclose(heat, heat[:, ::-1], rtol=1e-9)
    for r in data["monte_carlo"]:
        assert r["ratio_theory"] == pytest.approx(
            np.interp(r["angle"], [s_["angle"] for s_ in data["slice"]],
                      [s_["ratio"] for s_ in data["slice"]]), rel=2e-2)


def test_mse_vs_m_curves_are_the_theory(quick):
    data = quick[1]["mse_vs_m"].data
    mod = figure_module("mse_vs_m")
    x, y = theory.pair(mod.D, mod.NORM, mod.NORM, mod.ANGLE)
    for r in data["lines"][:: 7]:
        assert r["exact_orthogonal"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble="orthogonal")), rel=1e-12)
        assert r["lemma2"] == pytest.approx(float(theory.lemma2_mse(x, y, r["m"], r["kind"])), rel=1e-12)
        if r["kind"] == "positive" and r["m"] <= mod.D:
            assert r["theorem2_bound"] == pytest.approx(float(theory.theorem2_bound(x, y, r["m"])),
                                                        rel=1e-12)
            assert r["exact_orthogonal"] <= r["theorem2_bound"] * (1 + 1e-12)
        else:
            assert np.isnan(r["theorem2_bound"])
    for r in data["monte_carlo"]:
        assert r["mse_exact"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"])), rel=1e-12)
        if r["tail_ok"]:
            assert abs(r["z"]) < 4, r


def test_mse_vs_angle_and_feature_budget_are_the_theory(quick):
    for name in ("mse_vs_angle", "feature_budget"):
        mod = figure_module(name)
        data = quick[1][name].data
        for r in data["lines"][:: 11]:
            m = r.get("m", getattr(mod, "M", None))
            x, y = theory.pair(mod.D, mod.NORM, mod.NORM, r["angle"])
            assert r["mse_exact"] == pytest.approx(
                float(theory.exact_mse(x, y, m, r["kind"], ensemble=r["ensemble"])), rel=1e-12)
    budget = quick[1]["feature_budget"].data["lines"]
    r_dim = {row["kind"]: (row["m"] if row["kind"] == "positive" else 2 * row["m"]) for row in budget}
    assert len(set(r_dim.values())) == 1  # the same feature dimension for every kind


def test_orthogonality_gain_is_exact_and_within_theorem2(quick):
    rows = quick[1]["orthogonality_gain"].data["rows"]
    for r in rows:
        if r["kind"] == "positive":
            assert r["gain"] <= 1.0 + 1e-12
            if not np.isnan(r["theorem2_ratio"]):
                assert r["gain"] <= r["theorem2_ratio"] + 1e-12
    r = rows[len(rows) // 3]
    size = r["size"] / np.sqrt(2)
    x, y = theory.pair(r["d"], size, size, np.pi / 2)
    want = theory.exact_mse(x, y, r["m"], r["kind"], ensemble="orthogonal") / theory.exact_mse(
        x, y, r["m"], r["kind"])
    assert r["gain"] == pytest.approx(float(want), rel=1e-12)


def test_bias_audit_figure_shows_the_bias(quick):
    rows = quick[1]["bias_audit"].data["rows"]
    unfixed = {r["direction"]: r for r in rows if r["ensemble"] == "orthogonal-unfixed-qr"}
    haar = [r for r in rows if r["ensemble"] == "orthogonal"]
    assert unfixed["ones"]["relative_bias"] < -0.08 and unfixed["ones"]["biased"]
    assert sum(abs(r["z"]) > 4 for r in haar) == 0


def test_attention_figure_has_every_series(quick):
    rows = quick[1]["attention"].data["rows"]
    mod = figure_module("attention")
    cfg = mod.settings(True)
    assert len(rows) == len(cfg["m_values"]) * 3 * 2
    assert all(r["mse_mean"] > 0 for r in rows)


def test_cli_figures_quick_subset_and_report(tmp_path, capsys):
    assert main(["figures", "--out", str(tmp_path), "--quick", "--only", "orthogonality_gain"]) == 0
    assert (tmp_path / "orthogonality_gain.png").exists()
    assert "theory against Monte Carlo" in (tmp_path / "report.md").read_text()
    assert main(["figures", "--list"]) == 0
    assert "bias_audit" in capsys.readouterr().out
    assert main(["figures", "--out", str(tmp_path), "--only", "nope"]) == 2
    assert "unknown figure 'nope'" in capsys.readouterr().err
