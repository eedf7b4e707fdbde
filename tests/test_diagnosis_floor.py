"""diagnose(..., floor=True) and rfkernels diagnose --floor: the variance floor beside the measured error."""

import json
import math

import numpy as np
import pytest

from rfkernels.analysis import diagnose, synthetic_qkv
from rfkernels.commands.cli import main
from rfkernels.floor import attention_floor

GRID = dict(m=[16, 64], kinds=["positive", "hyperbolic", "trig"], ensembles=["iid", "orthogonal"],
            draws=24, pairs=500, first_order_queries=8)


@pytest.fixture(scope="module")
def heads():
    return synthetic_qkv(L=48, d=8, heads=2)


@pytest.fixture(scope="module")
def diag(heads):
    q, k, v = heads
    return diagnose(q, k, v, floor=True, **GRID)


def test_each_row_has_its_representations_floor_at_its_r(diag, heads):
    q, k, v = heads
    row = next(r for r in diag.rows if r["head"] == 1 and r["kind"] == "hyperbolic" and r["m"] == 64)
    alone = attention_floor(q[1], k[1], v[1], representation="pairing", seed=np.random.SeedSequence(
        diag.meta["entropy"], spawn_key=(5, 1)), rtol=0.03)
    ms = diag.heads[1]["exact_mean_square"]
    assert row["floor_mse"] == pytest.approx(alone.mse(128) * ms, rel=1e-12)
    assert row["floor_valid"] == alone.valid_at(128) and row["floor_reason"] is None


def test_the_floor_is_below_what_independent_draws_measure_where_its_first_order_holds(diag):
    checked = 0
    for row in diag.rows:
        if row["ensemble"] == "iid" and row["floor_valid"]:
            se = math.hypot(row["attention_mse_stderr"], row["floor_stderr"])
            assert row["floor_mse"] <= row["attention_mse"] + 4 * se, row
            checked += 1
    assert checked >= 4


def test_pooled_rows_average_the_heads_floors(diag):
    for pooled in diag.summary:
        group = [r for r in diag.rows if all(r[k] == pooled[k] for k in ("kind", "ensemble", "m"))]
        assert pooled["floor_mse"] == pytest.approx(np.mean([r["floor_mse"] for r in group]))
        assert pooled["floor_valid"] == all(r["floor_valid"] for r in group)


def test_without_floor_the_fields_are_null_with_their_reason(heads):
    q, k, v = heads
    d = diagnose(q, k, v, m=[8], draws=2, kinds=["positive"], ensembles=["iid"], pairs=64)
    data = d.to_dict()
    json.dumps(data, allow_nan=False)
    row = data["rows"][0]
    assert row["floor_mse"] is None and row["null_reasons"]["floor_mse"] == "not computed (floor=False)"
    assert "## The variance floor" not in d.to_markdown()


def test_the_report_says_where_even_the_floor_reaches_the_target(diag):
    text = diag.to_markdown()
    section = text[text.index("## The variance floor"):text.index("## Per head")]
    assert "orthogonal / iid" in section and "Per head, the r at which the floor reaches" in section
    assert "bounds nothing" in section or "no policy of independent draws" in section \
        or "not reachable at any practical r" in section


def test_the_command_takes_floor_and_says_so_in_its_command_line(heads, tmp_path, capsys):
    q, k, v = heads
    np.savez(tmp_path / "qkv.npz", q=q, k=k, v=v)
    out = tmp_path / "out"
    assert main(["diagnose", str(tmp_path / "qkv.npz"), "--out", str(out), "--m", "8", "--draws", "2",
                 "--kind", "positive", "--ensemble", "iid", "--pairs", "64", "--floor"]) == 0
    capsys.readouterr()
    data = json.loads((out / "diagnosis.json").read_text())
    assert data["meta"]["floor"] is True and data["rows"][0]["floor_mse"] > 0
    assert "--floor" in data["provenance"]["command_line"]
    assert "floor_mse" in (out / "diagnosis.csv").read_text().splitlines()[0]
