"""The Gaussian-kernel figure: its lines are the theory, its Monte Carlo agrees, its CSV columns."""

import csv
import math

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from rfkernels.figures import FIGURES, figure_module
from rfkernels.figures._common import make_figure

from rfkernels import theory

MOD = figure_module("gaussian")

#: The columns of each CSV the figure writes, in order.
COLUMNS = {
    "gaussian_theory.csv": ["kind", "ensemble", "d", "gamma", "t", "r", "m", "mse_exact"],
    "gaussian_monte_carlo.csv": ["kind", "ensemble", "d", "gamma", "t", "r", "m", "backend",
                                 "trials", "mse_mc", "stderr", "ci_low", "ci_high", "ci_geometric",
                                 "mse_exact", "z", "k_hat", "tail_ok", "proposal", "ess"],
    "gaussian_ratio.csv": ["ensemble", "d", "r", "m_paired", "m_offset", "t", "ratio_exact"],
    "gaussian_monte_carlo_ratio.csv": [
        "ensemble", "d", "r", "t", "trials", "ratio_mc", "ratio_rel_stderr", "ratio_ci_low",
        "ratio_ci_high", "ratio_theory", "z", "mse_paired_mc", "mse_paired_stderr",
        "mse_paired_exact", "z_paired", "mse_offset_mc", "mse_offset_stderr", "mse_offset_exact",
        "z_offset", "tail_ok", "proposal"],
}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    out = tmp_path_factory.mktemp("gaussian")
    return out, make_figure(MOD, str(out), quick=True, seed=5)


def test_gaussian_is_registered_with_a_budget_and_a_gallery_width():
    from rfkernels.figures._gallery import WIDTHS

    assert "gaussian" in FIGURES and "gaussian" in WIDTHS
    assert 0 < MOD.BUDGET[True] <= MOD.BUDGET[False] <= 10.0


def test_panel_pair_has_t_one():
    x, y = MOD.panel_pair()
    assert MOD.t_of(x, y) == pytest.approx(1.0, rel=1e-12)
    for d, t in ((2, 0.3), (16, 7.0)):
        assert MOD.t_of(*MOD.pair_at_t(d, t)) == pytest.approx(t, rel=1e-12)


def test_lines_are_the_exact_mse_and_the_iid_closed_forms(made):
    rows = made[1].data["lines"]
    x, y = MOD.panel_pair()
    assert {(r["kind"], r["ensemble"]) for r in rows} == set(MOD.SERIES)
    for r in rows[::13]:
        assert r["m"] == MOD.projections(r["kind"], r["r"])
        want = theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"],
                                kernel="gaussian", gamma=MOD.GAMMA)
        assert r["mse_exact"] == pytest.approx(float(want), rel=1e-12), r
    u2 = (1.0 - math.exp(-rows[0]["t"])) ** 2
    for r in rows:  # iid: paired (1 - e^-t)^2 / r; offset ((1 - e^-t)^2 + 1) / (2r)
        if (r["kind"], r["ensemble"]) == ("trig", "iid"):
            assert r["mse_exact"] == pytest.approx(u2 / r["r"], rel=1e-12)
        elif (r["kind"], r["ensemble"]) == ("offset", "iid"):
            assert r["mse_exact"] == pytest.approx((u2 + 1.0) / (2 * r["r"]), rel=1e-12)


def test_ratio_lines_are_the_exact_ratio_and_offset_wins_only_orthogonal_at_small_d(made):
    rows = made[1].data["ratio"]
    for r in rows[::17]:
        x, y = MOD.pair_at_t(r["d"], r["t"])
        kw = {"ensemble": r["ensemble"], "kernel": "gaussian", "gamma": MOD.GAMMA}
        want = (theory.exact_mse(x, y, r["m_paired"], "trig", **kw)
                / theory.exact_mse(x, y, r["m_offset"], "offset", **kw))
        assert r["ratio_exact"] == pytest.approx(float(want), rel=1e-12), r
        # the ratio depends on t (not on gamma or the pair): the same at gamma = 1/3
        assert float(MOD.ratio_paired_offset(r["d"], r["t"], r["r"], r["ensemble"], gamma=1 / 3)) \
            == pytest.approx(r["ratio_exact"], rel=1e-9)
    iid = [r for r in rows if r["ensemble"] == "iid"]
    u2 = (1.0 - np.exp(-np.array([r["t"] for r in iid]))) ** 2
    np.testing.assert_allclose([r["ratio_exact"] for r in iid], 2 * u2 / (1 + u2), rtol=1e-12)
    assert max(r["ratio_exact"] for r in iid) < 1.0 + 1e-12  # -> 1 as t grows (rounding at t = 100)
    assert max(r["ratio_exact"] for r in iid if r["t"] <= 20) < 1.0
    peak = {d: max(r["ratio_exact"] for r in rows if r["ensemble"] == "orthogonal" and r["d"] == d)
            for d in MOD.RATIO_DIMS}
    assert peak[2] == pytest.approx(1.164, abs=2e-3) and peak[4] == pytest.approx(1.058, abs=2e-3)
    assert 1.0 < peak[16] < 1.001


def test_monte_carlo_agrees_with_theory(made):
    data = made[1].data
    x, y = MOD.panel_pair()
    for r in data["monte_carlo"]:
        want = theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"],
                                kernel="gaussian", gamma=MOD.GAMMA)
        assert r["mse_exact"] == pytest.approx(float(want), rel=1e-12), r
        assert r["trials"] == MOD.mc_trials(r["r"], r["backend"], True)
        assert r["ci_low"] < r["mse_mc"] < r["ci_high"] and r["ci_low"] > 0
        assert r["proposal"] in ("plain", "tilted")
        if r["kind"] != "positive":
            assert r["proposal"] == "plain" and r["ess"] == r["trials"], r
        if r["tail_ok"]:
            assert abs(r["z"]) < 4, r
    assert {r["backend"] for r in data["monte_carlo"] if r["ensemble"] == "simplex"} == {"numpy"}
    for r in data["monte_carlo_ratio"]:
        assert r["ratio_mc"] == pytest.approx(r["mse_paired_mc"] / r["mse_offset_mc"], rel=1e-12)
        assert r["ratio_theory"] == pytest.approx(
            float(MOD.ratio_paired_offset(r["d"], r["t"], r["r"], "orthogonal")), rel=1e-12)
        assert r["tail_ok"] and abs(r["z"]) < 4, r
    assert data["run"]["proposal"] == "auto" and data["run"]["trials"] == MOD.TRIALS[True]


def test_csv_files_have_their_columns_and_numbers(made):
    out, res = made
    written = sorted(p.split("/")[-1] for p in res.paths if p.endswith(".csv"))
    assert written == sorted(COLUMNS)
    assert {p.split("/")[-1] for p in res.paths} >= {"gaussian.png", "gaussian.pdf"}
    for name, columns in COLUMNS.items():
        with open(out / name, newline="") as fh:
            rows = list(csv.reader(fh))
        assert rows[0] == columns, name
        assert len(rows) > 1
        numeric = [i for i, c in enumerate(columns)
                   if c not in ("kind", "ensemble", "backend", "proposal", "tail_ok",
                                "ci_geometric")]
        for row in rows[1:]:
            assert len(row) == len(columns)
            for i in numeric:
                assert math.isfinite(float(row[i])), (name, columns[i], row[i])
            for c in ("tail_ok", "ci_geometric"):
                if c in columns:
                    assert row[columns.index(c)] in ("True", "False")
    with open(out / "gaussian_theory.csv", newline="") as fh:
        first = next(csv.DictReader(fh))
    assert float(first["mse_exact"]) == res.data["lines"][0]["mse_exact"]  # repr: exact round trip
