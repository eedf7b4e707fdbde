"""The BERT encoder (BERT, MiniLM) in NumPy: embeddings, then post-norm self-attention blocks.

The arithmetic of ``transformers``' ``BertModel`` in inference (no dropout):
token, position and token-type embeddings summed and layer-normed; in each
layer the query, key and value projections (weights, then bias), per head
softmax(q k^T / sqrt(d_head)) v, the output projection, a residual and a
layer norm, then the feed-forward block with the exact (erf) GELU, a
residual and a layer norm. One sequence at a time, so no padding enters any
statistic. The attention of a layer is a function ``attend(layer, q, k, v,
scale)`` of the (heads, L, d_head) arrays before the scale, which the
transplant replaces.
"""

from __future__ import annotations

import math

import numpy as np

from .files import ModelError

#: ``config.json``'s ``model_type`` values this encoder runs.
MODEL_TYPES = ("bert",)
#: ``hidden_act`` values and their functions.
ACTIVATIONS = ("gelu",)


def softmax_attend(layer, q, k, v, scale):
    """Exact softmax attention per head: softmax(scale q k^T) v, (heads, L, d_head)."""
    logits = scale * (q @ k.transpose(0, 2, 1))
    logits -= logits.max(axis=-1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=-1, keepdims=True)
    return p @ v


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def _layer_norm(x, gamma, beta, eps):
    mean = x.mean(axis=-1, keepdims=True)
    centred = x - mean
    var = (centred * centred).mean(axis=-1, keepdims=True)
    return centred / np.sqrt(var + eps) * gamma + beta


class Bert:
    """The encoder of one ``config.json`` and its weights, in ``dtype``.

    ``forward(ids, attend=softmax_attend, capture=None)`` returns the last
    hidden state (L, hidden); ``capture(layer, q, k, v)`` is called with each
    layer's per-head arrays before the scale.
    """

    def __init__(self, config, weights, source, dtype=np.float64):
        model_type = config.get("model_type")
        if model_type not in MODEL_TYPES:
            raise ModelError(f"model {source}: model_type {model_type!r} is not supported "
                             f"(supported: {', '.join(MODEL_TYPES)}; BERT-family encoders such as MiniLM)")
        act = config.get("hidden_act", "gelu")
        if act not in ACTIVATIONS:
            raise ModelError(f"model {source}: hidden_act {act!r} is not supported ({', '.join(ACTIVATIONS)})")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ModelError(f"model {source}: position_embedding_type "
                             f"{config.get('position_embedding_type')!r} is not supported (absolute)")
        try:
            self.hidden = int(config["hidden_size"])
            self.layers = int(config["num_hidden_layers"])
            self.heads = int(config["num_attention_heads"])
            self.positions = int(config["max_position_embeddings"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ModelError(f"model {source}: config.json lacks a valid {exc}") from None
        if self.hidden % self.heads:
            raise ModelError(f"model {source}: hidden_size {self.hidden} is not a multiple of "
                             f"num_attention_heads {self.heads}")
        self.d_head = self.hidden // self.heads
        self.eps = float(config.get("layer_norm_eps", 1e-12))
        self.dtype = np.dtype(dtype)
        self.source = source
        prefix = "bert." if any(n.startswith("bert.") for n in weights) else ""
        self.w = {n[len(prefix):]: w for n, w in weights.items() if n.startswith(prefix)}
        self._check(config)
        self.w = {n: np.asarray(w, dtype=self.dtype) for n, w in self.w.items()}

    def _check(self, config):
        h, inter = self.hidden, int(config.get("intermediate_size", 4 * self.hidden))
        shapes = {"embeddings.word_embeddings.weight": (int(config.get("vocab_size", -1)), h),
                  "embeddings.position_embeddings.weight": (self.positions, h),
                  "embeddings.token_type_embeddings.weight": (None, h),
                  "embeddings.LayerNorm.weight": (h,), "embeddings.LayerNorm.bias": (h,)}
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            for name in ("query", "key", "value"):
                shapes[p + f"attention.self.{name}.weight"] = (h, h)
                shapes[p + f"attention.self.{name}.bias"] = (h,)
            shapes[p + "attention.output.dense.weight"] = (h, h)
            shapes[p + "attention.output.dense.bias"] = (h,)
            shapes[p + "attention.output.LayerNorm.weight"] = (h,)
            shapes[p + "attention.output.LayerNorm.bias"] = (h,)
            shapes[p + "intermediate.dense.weight"] = (inter, h)
            shapes[p + "intermediate.dense.bias"] = (inter,)
            shapes[p + "output.dense.weight"] = (h, inter)
            shapes[p + "output.dense.bias"] = (h,)
            shapes[p + "output.LayerNorm.weight"] = (h,)
            shapes[p + "output.LayerNorm.bias"] = (h,)
        for name, shape in shapes.items():
            if name not in self.w:
                raise ModelError(f"model {self.source}: model.safetensors has no tensor {name!r} "
                                 "(not the weights of this config's BERT encoder)")
            got = self.w[name].shape
            if len(got) != len(shape) or any(s is not None and s != -1 and g != s
                                               for g, s in zip(got, shape)):
                raise ModelError(f"model {self.source}: tensor {name!r} has shape {got}; config.json "
                                 f"implies {tuple('*' if s is None else s for s in shape)}")

    def _linear(self, x, name):
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def embeddings(self, ids):
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size < 1:
            raise ValueError(f"ids must be a non-empty 1-D sequence of token ids; got shape {ids.shape}")
        if ids.size > self.positions:
            raise ValueError(f"ids: {ids.size} tokens, beyond the model's {self.positions} positions")
        w = self.w
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:ids.size]
             + w["embeddings.token_type_embeddings.weight"][0])
        return _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], self.eps)

    def heads_of(self, x):
        """(L, hidden) -> (heads, L, d_head)."""
        return x.reshape(x.shape[0], self.heads, self.d_head).transpose(1, 0, 2)

    def forward(self, ids, attend=softmax_attend, capture=None):
        """The last hidden state (L, hidden) of one sequence of token ids."""
        x = self.embeddings(ids)
        scale = 1.0 / math.sqrt(self.d_head)
        for i in range(self.layers):
            p = f"encoder.layer.{i}."
            q, k, v = (self.heads_of(self._linear(x, p + f"attention.self.{n}"))
                       for n in ("query", "key", "value"))
            if capture is not None:
                capture(i, q, k, v)
            ctx = attend(i, q, k, v, scale)
            ctx = ctx.transpose(1, 0, 2).reshape(x.shape[0], self.hidden)
            x = _layer_norm(x + self._linear(ctx, p + "attention.output.dense"),
                            self.w[p + "attention.output.LayerNorm.weight"],
                            self.w[p + "attention.output.LayerNorm.bias"], self.eps)
            h = _gelu(self._linear(x, p + "intermediate.dense"))
            x = _layer_norm(x + self._linear(h, p + "output.dense"), self.w[p + "output.LayerNorm.weight"],
                            self.w[p + "output.LayerNorm.bias"], self.eps)
        return x
