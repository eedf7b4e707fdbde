"""The figure of the estimators beyond the paper, the feature budget's new lines, sorf's bias audit."""

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from rfkernels.analysis.comparison import bias_audit
from rfkernels.figures import FIGURES, figure_module

from rfkernels import engine, theory


def test_beyond_is_registered():
    assert "beyond" in FIGURES
    from rfkernels.figures._gallery import WIDTHS

    assert set(WIDTHS) == set(FIGURES)


@pytest.mark.parametrize("d", [16, 64, 256])
def test_beyond_lines_are_the_exact_mse_ratio(d):
    mod = figure_module("beyond")
    for s in (0.05, 1.0, 30.0):
        x = np.zeros(d)
        x[0] = np.sqrt(s) / 2  # x = y, |x + y|^2 = s
        ref = float(theory.exact_mse(x, x, d, "positive"))
        for kind, ensemble in mod.SERIES:
            want = float(theory.exact_mse(x, x, d, kind, ensemble=ensemble)) / ref
            got = float(np.exp(mod.log_ratio(d, s, kind, ensemble)))
            assert got == pytest.approx(want, rel=1e-10), (kind, ensemble, s)


def test_beyond_monte_carlo_uses_literal_where_no_reduced_sampler(monkeypatch, tmp_path):
    mod = figure_module("beyond")
    monkeypatch.setattr(engine, "REDUCED_KINDS", ("trig", "positive", "hyperbolic"))
    monkeypatch.setattr(engine, "REDUCED_ENSEMBLES", ("iid", "orthogonal"))
    monkeypatch.setattr(mod, "MC_S", (0.1,))
    monkeypatch.setattr(mod, "TRIALS", {"reduced": {True: 2_000}, "literal": {True: 500}})
    assert mod.mc_method("oprf", "iid") == "literal"
    assert mod.mc_method("positive", "orthogonal") == "reduced"
    data = mod.compute(quick=True, seed=1)
    methods = {(r["d"], r["kind"], r["ensemble"]): r["method"] for r in data["monte_carlo"]}
    # literal points only at d = 16; the reduced positive-orthogonal ones at every d
    assert methods[(16, "oprf", "iid")] == "literal" and (64, "oprf", "iid") not in methods
    assert methods[(256, "positive", "orthogonal")] == "reduced"
    for r in data["monte_carlo"]:
        assert abs(r["z"]) < 4, r
        assert r["ratio_mc"] == pytest.approx(r["mse_mc"] / r["mse_positive_iid"], rel=1e-12)
    paths = mod.plot(data, str(tmp_path))
    assert any(p.endswith(".png") for p in paths)


def test_feature_budget_has_the_new_estimators_at_equal_r():
    mod = figure_module("feature_budget")
    data = mod.compute(quick=True, seed=0)
    rows = data["beyond"]
    assert {(r["kind"], r["ensemble"]) for r in rows} == set(mod.BEYOND)
    for r in rows[::17]:
        assert r["m"] == r["r"] == mod.R  # one feature per projection
        x, y = theory.pair(mod.D, mod.NORM, mod.NORM, r["angle"])
        assert r["mse_exact"] == pytest.approx(
            float(theory.exact_mse(x, y, r["m"], r["kind"], ensemble=r["ensemble"])), rel=1e-12)
    for r in data["monte_carlo"]:
        if r["tail_ok"]:
            assert abs(r["z"]) < 4, r


def test_bias_audit_takes_sorf_and_sees_its_bias_at_small_d():
    rows = bias_audit(4, 4, directions=[[1.0, 0, 0, 0]], trials=400_000, seed=0,
                      ensembles=("orthogonal", "sorf"))
    by = {r["ensemble"]: r for r in rows}
    assert not by["orthogonal"]["biased"]
    assert by["sorf"]["biased"] and abs(by["sorf"]["z"]) > 4


def test_bias_audit_sorf_blocks_of_the_padded_dimension():
    """d = 6 pads to D = 8: each trial's m = 6 rows come from one block of 8 rows."""
    rows = bias_audit(6, 6, directions=[np.ones(6)], trials=2_000, seed=0, ensembles="sorf")
    assert rows[0]["ensemble"] == "sorf" and rows[0]["trials"] == 2_000
    assert np.isfinite(rows[0]["relative_bias"])
