"""norms='antithetic' through the entry points (issue 25): sweeps, diagnose, attention, rank, the CLI."""

import json

import numpy as np
import pytest

from rfkernels import draw_projections, favor_attention, rank_estimators, softmax_attention, theory
from rfkernels.analysis import diagnose
from rfkernels.analysis.attention_data import ensembles_for
from rfkernels.analysis.sweep import SweepError, SweepSpec
from rfkernels.commands.cli import main


def _grid(ensembles):
    return {"kind": ["positive", "trig"], "ensemble": ensembles, "norms": ["chi", "antithetic"],
            "d": [8], "m": [8], "angle": [0.5], "norm_x": [0.5], "norm_y": [0.5]}


def test_default_ensembles_follow_the_norm_law():
    assert ensembles_for("chi") == ("iid", "orthogonal")
    assert ensembles_for("antithetic") == ("orthogonal",)


def test_sweep_grid_refuses_iid_with_antithetic_norms_and_takes_blocks():
    with pytest.raises(SweepError, match="norms='antithetic' needs ensemble in .*got ensemble='iid'"):
        SweepSpec.from_dict(_grid(["iid", "orthogonal"]), {"trials": 100})
    assert len(SweepSpec.from_dict(_grid(["orthogonal", "simplex"]), {"trials": 100}).points()) == 8


def test_diagnose_with_antithetic_norms_runs_on_the_blocks():
    rng = np.random.default_rng(0)
    q, k = rng.normal(size=(2, 32, 8)) * 0.5
    diag = diagnose(q, k, m=8, kinds=["positive"], norms="antithetic", draws=2, queries=16,
                    pairs=200, first_order_queries=0)
    assert diag.meta["ensembles"] == ["orthogonal"] and diag.meta["norms"] == "antithetic"
    with pytest.raises(ValueError, match="needs ensemble in"):
        diagnose(q, k, m=8, kinds=["positive"], ensembles=["iid"], norms="antithetic", draws=2)


def test_favor_attention_with_antithetic_projections_is_close_to_softmax():
    rng = np.random.default_rng(1)
    Q, K, V = rng.normal(size=(3, 64, 8)) * 0.3
    errs = []
    for seed in range(8):
        W = draw_projections(256, 8, ensemble="orthogonal", norms="antithetic", seed=seed)
        errs.append(np.mean((favor_attention(Q, K, V, W, "positive").output - softmax_attention(Q, K, V)) ** 2))
    assert np.mean(errs) < 1e-3


def test_rank_lists_the_antithetic_rows():
    x, y = theory.pair(16, 0.5, 0.5, 1.0)
    ranking = rank_estimators(x, y, r=32)
    row = ranking.row("hyperbolic", "orthogonal", "antithetic")
    assert row.ranked and row.mse == pytest.approx(
        theory.exact_mse(x, y, 16, "hyperbolic", ensemble="orthogonal", norms="antithetic"), rel=1e-12)
    assert row.mse < ranking.row("hyperbolic", "orthogonal", "chi").mse
    assert all(r.norms != "antithetic" or r.ensemble in ("orthogonal", "simplex") for r in ranking.rows)


def test_cli_mse_and_attention(tmp_path, capsys):
    assert main(["mse", "--kind", "trig", "--ensemble", "simplex", "--norms", "antithetic", "--d", "8",
                 "--m", "8", "--trials", "20000", "--no-progress", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["norms"] == "antithetic" and abs(out["z"]) < 4
    assert main(["mse", "--ensemble", "iid", "--norms", "antithetic", "--d", "8", "--m", "8"]) == 2
    assert "needs ensemble in" in capsys.readouterr().err
    path = tmp_path / "att.csv"
    assert main(["attention", "--L", "64", "--d", "8", "--m", "8", "--samples", "2", "--norms",
                 "antithetic", "--out", str(path)]) == 0
    rows = [line.split(",") for line in path.read_text().splitlines()[1:]]
    assert {(r[5], r[6]) for r in rows} == {("orthogonal", "antithetic")}


def test_attention_study_defaults_to_the_blocks():
    from rfkernels.analysis.attention import attention_mse

    table = attention_mse(32, 8, [8], ["positive"], samples=2, norms="antithetic", seed=0)
    assert {row["ensemble"] for row in table.rows} == {"orthogonal"}
    with pytest.raises(ValueError, match="needs ensemble in"):
        attention_mse(32, 8, [8], ["positive"], ["iid"], samples=2, norms="antithetic")


def test_engine_entries_refuse_iid_and_the_tilt():
    from rfkernels import rng
    from rfkernels.engine import normalised_estimates, scalar_projections, squared_norms, tilt_for

    key, counters = rng.key_from_seed(0), np.arange(8, dtype=np.uint64)
    for fn in (scalar_projections, squared_norms):
        with pytest.raises(ValueError, match="needs ensemble in"):
            fn(key, counters, 4, 4, ensemble="iid", norms="antithetic")
    tilt = tilt_for("positive", "orthogonal", "chi", 1.2, 2)
    with pytest.raises(ValueError, match="does not take norms='antithetic'"):
        normalised_estimates(key, counters, 2, 2, "positive", 1.2, ensemble="orthogonal",
                             norms="antithetic", tilt=tilt)
