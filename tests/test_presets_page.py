"""The presets page (docs/presets.rst) runs, and its printed outputs are real.

Executed top to bottom in an empty working directory with the machinery of
``tests/test_tutorial.py`` (doctest examples with one unit of tolerance in
the last digit shown; ``code-block:: python`` blocks run too).
"""

import os
import re

from test_tutorial import ROOT, page_blocks, run_page

PAGE = os.path.join(ROOT, "docs", "presets.rst")


def _read_page():
    with open(PAGE, encoding="utf-8") as fh:
        return fh.read()


def test_presets_page_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = _read_page()
    # the opening snippet names Q, K, V and W the reader has; give it some
    pre = ("import numpy as np\nfrom rfkernels import favor_attention\n"
           "Q = K = np.zeros((2, 4)); V = np.ones((2, 1)); W = np.ones((3, 4))\n")
    counts = run_page(".. code-block:: python\n\n" + "".join(f"   {line}\n" for line in pre.splitlines())
                      + "\n" + text, "presets.rst", str(tmp_path))
    assert counts["examples"] >= 8, counts


def test_presets_page_has_no_code_that_is_not_run_and_is_in_the_toctree():
    text = _read_page()
    assert {kind for kind, _, _ in page_blocks(text)} <= {"doctest", "python", "console"}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        assert not (stripped.endswith("::") and not stripped.startswith("..")), \
            f"presets.rst:{number}: a literal block nothing would run"
    with open(os.path.join(ROOT, "docs", "index.rst"), encoding="utf-8") as fh:
        assert re.search(r"^\s+presets\s*$", fh.read(), re.MULTILINE)
