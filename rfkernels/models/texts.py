"""Text to run a model on: the user's, or real prose that ships inside an installed package.

The default is scikit-learn's own descriptions of its bundled data sets
(``sklearn/datasets/descr/*.rst``, a dependency of rfkernels), with their
titles, field lists, tables, bullet lists, directives, bracketed citations
and web addresses stripped: about 1,200 words (60 sentences, 1,600 tokens
of all-MiniLM-L6-v2) of English prose that nobody here wrote, read in the
same order on every machine (the files sorted by name).
"""

from __future__ import annotations

import os
import re

#: Where the default text comes from.
SOURCE = "scikit-learn's data set descriptions (sklearn/datasets/descr/*.rst), tables stripped"
#: Sentences shorter than this many words are left out of :func:`sentences` (headings, labels).
MIN_WORDS = 5

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_MARKUP = re.compile(r":(?:func|class|ref|mod|doi|meth):`([^`<]*)(?:<[^>]*>)?`|`+([^`]*)`+_?|\*\*?")


def _paragraphs(rst):
    """The prose paragraphs of one reStructuredText file, markup removed."""
    out = []
    for block in re.split(r"\n\s*\n", rst):
        lines = block.splitlines()
        if not lines or any(re.fullmatch(r"\s*[-=~^*+#]{3,}\s*", ln) for ln in lines):
            continue  # a title or a table
        first = lines[0].lstrip()
        if lines[0][:1].isspace() or first[:1] in ":.-*|+=" or re.match(r"\d+\.|\[\w+\]", first):
            continue  # field list, directive, bullet, table, indented block, enumerated reference
        text = " ".join(ln.strip() for ln in lines)
        if "http" in text or "www." in text or "@" in text:
            continue
        text = _MARKUP.sub(lambda m: m.group(1) or m.group(2) or "", text)
        text = re.sub(r"\s*\[[^\]]*\]", "", text)  # bracketed citations
        if text.rstrip().endswith((".", "!", "?")):
            out.append(text.strip())
    return out


def default_text():
    """The default prose, one string (paragraphs joined by blank lines).

    The files are found with :func:`importlib.util.find_spec`, without importing
    scikit-learn (1.1 s, the largest part of a model diagnosis' start).
    """
    from importlib.util import find_spec

    spec = find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ValueError("the default text is scikit-learn's data set descriptions and scikit-learn "
                         "is not installed; pip install scikit-learn, or give --text FILE")
    folder = os.path.join(spec.submodule_search_locations[0], "datasets", "descr")
    paragraphs = []
    for name in sorted(os.listdir(folder)):
        if name.endswith(".rst"):
            with open(os.path.join(folder, name), encoding="utf-8") as fh:
                paragraphs += _paragraphs(fh.read())
    return "\n\n".join(paragraphs)


def text_and_source(path=None):
    """``(text, where it came from)``: the user's file at ``path`` (:func:`read_text`), else the
    default prose (:func:`default_text`, :data:`SOURCE`)."""
    if path is None:
        return default_text(), SOURCE
    return read_text(path), os.path.abspath(path)


def sentences(text, min_words=MIN_WORDS):
    """The sentences of ``text`` with at least ``min_words`` words, in order."""
    parts = (s.strip() for p in re.split(r"\n\s*\n", text) for s in _SENTENCE_END.split(" ".join(p.split())))
    return [s for s in parts if len(s.split()) >= min_words]


def read_text(path):
    """A user's text file (UTF-8), refused in one line if missing, unreadable, not text or empty."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except UnicodeDecodeError:
        raise ValueError(f"text file {os.fspath(path)!r} is not UTF-8 text") from None
    if not text.strip():
        raise ValueError(f"text file {os.fspath(path)!r} is empty")
    return text
