"""The output folder of ``rfkernels figures``: refuse what it did not write, check it is writable.

A folder is this command's when it holds ``figures.json`` (the manifest and
provenance sidecar, written before the first figure) or, for folders written
before the manifest existed, a ``report.md`` that starts with the report's
header. In such a folder every entry must be an output of the command
(``report.md``, ``figures.json``, ``NAME.pdf``, ``NAME.png``, ``NAME.csv``,
``NAME_*.csv`` of a known figure, or a temporary file of an interrupted
atomic write); any other entry, or any entry at all in a folder that is not
the command's, is refused with its name before anything is written.
"""

from __future__ import annotations

import json
import os
import re

from rfkernels.storage import atomic_write, check_output_folder

from ._common import naming

#: The manifest beside the figures (format, provenance, the files written).
MANIFEST_NAME = "figures.json"
#: Its ``format`` field.
FORMAT = "rfkernels-figures/1"
#: The report beside the figures, and the first line that identifies it.
REPORT_NAME = "report.md"
REPORT_HEADER = "# rfkernels figures: theory against Monte Carlo"


def _own_pattern(names):
    stems = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    own = rf"(?:{re.escape(MANIFEST_NAME)}|{re.escape(REPORT_NAME)}|(?:{stems})(?:\.pdf|\.png|\.csv|_[A-Za-z0-9_]+\.csv))"
    # atomic_write's temporary files: ".TARGET.RANDOM.tmp"
    return re.compile(rf"(?:{own}|\.{own}\.[^/]*\.tmp)")


def _is_ours(out_dir):
    """True when ``out_dir`` holds a manifest (or a legacy report) of this command."""
    manifest = os.path.join(out_dir, MANIFEST_NAME)
    if os.path.lexists(manifest):
        try:
            with open(manifest) as fh:
                return json.load(fh).get("format") == FORMAT
        except (OSError, ValueError, AttributeError):
            return False
    report = os.path.join(out_dir, REPORT_NAME)
    if os.path.isfile(report) and not os.path.islink(report):
        try:
            with open(report) as fh:
                return fh.readline().rstrip("\n") == REPORT_HEADER
        except (OSError, UnicodeDecodeError):
            return False
    return False


def check_out_dir(out_dir, figure_names):
    """Refuse an ``out_dir`` this command cannot or must not write, before any work.

    ``figure_names`` are every known figure (their files are the command's).
    Raises ``NotADirectoryError`` when ``out_dir`` or a folder above it is a
    file, ``FileExistsError`` when it holds a file the command did not write
    (naming it), ``PermissionError`` (or another ``OSError``) when nothing
    can be written there. Creates nothing.
    """
    out_dir = os.fspath(out_dir)
    if not out_dir:
        raise ValueError("--out must name a folder; got ''")
    own = _own_pattern(figure_names)
    ours = os.path.isdir(out_dir) and _is_ours(out_dir)
    check_output_folder(out_dir, lambda name, full: ours and bool(own.fullmatch(name))
                        and not os.path.isdir(full), "figures", "the figures")


def manifest_files(out_dir):
    """The files an earlier run recorded in ``out_dir``'s manifest (empty without one)."""
    try:
        with open(os.path.join(out_dir, MANIFEST_NAME)) as fh:
            files = json.load(fh).get("files", [])
    except (OSError, ValueError, AttributeError):
        return []
    return [f for f in files if isinstance(f, str)]


def write_manifest(out_dir, meta):
    """Write ``figures.json`` (strict JSON: no NaN or infinity) atomically; returns its path."""
    path = os.path.join(out_dir, MANIFEST_NAME)
    text = json.dumps(meta, indent=1, allow_nan=False) + "\n"
    with naming(path):
        atomic_write(path, text)
    return path
