"""Pages of docs/ whose every block runs, with their real outputs: diagnose, presets, gaussian, derf.

Each page is executed top to bottom in an empty working directory with the
machinery of ``tests/test_tutorial.py`` (doctest examples with one unit of
tolerance in the last digit shown; ``code-block:: python`` blocks executed;
``rfkernels`` console commands run as subprocesses).
"""

import os
import re

import pytest
from test_tutorial import ROOT, page_blocks, run_page

#: page -> (fewest doctest examples, console commands, files the page leaves behind)
PAGES = {
    "diagnose.rst": (15, 1, [os.path.join("diagnosis", name) for name in (
        "report.md", "diagnosis.json", "diagnosis.csv", "diagnosis_summary.csv", "diagnosis.png")]),
    "presets.rst": (12, 0, []),
    "gaussian.rst": (14, 0, []),
    "real_data.rst": (6, 0, []),
    "derf.rst": (5, 0, []),
    "ranking.rst": (14, 1, []),
    "antithetic.rst": (13, 0, []),
}

#: The presets page opens with a one-line snippet naming arrays the reader has: give it some.
_PRELUDE = {"presets.rst": ("import numpy as np\nfrom rfkernels import favor_attention\n"
                            "Q = K = np.zeros((2, 4)); V = np.ones((2, 1)); W = np.ones((3, 4))\n")}


def _read(page):
    with open(os.path.join(ROOT, "docs", page), encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_runs_and_prints_what_it_shows(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = _read(page)
    prelude = _PRELUDE.get(page)
    if prelude:
        text = (".. code-block:: python\n\n" + "".join(f"   {line}\n" for line in prelude.splitlines())
                + "\n" + text)
    examples, console, files = PAGES[page]
    counts = run_page(text, page, str(tmp_path))
    assert counts["examples"] >= examples and counts["console"] == console, counts
    for path in files:
        assert (tmp_path / path).is_file(), path


@pytest.mark.parametrize("page", sorted(PAGES))
def test_page_has_no_code_that_is_not_run_and_is_in_the_toctree(page):
    text = _read(page)
    assert {kind for kind, _, _ in page_blocks(text)} <= {"doctest", "python", "console"}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        assert not (stripped.endswith("::") and not stripped.startswith("..")), \
            f"{page}:{number}: a literal block nothing would run"
    with open(os.path.join(ROOT, "docs", "index.rst"), encoding="utf-8") as fh:
        assert re.search(rf"^\s+{page[:-4]}\s*$", fh.read(), re.MULTILINE)
