"""The diagnosis page (docs/diagnose.rst) runs, and its printed outputs are real.

The page is executed top to bottom in an empty working directory with the
machinery of ``tests/test_tutorial.py`` (doctest examples with one unit of
tolerance in the last digit shown, ``rfkernels`` console commands as
subprocesses).
"""

import os
import re

from test_tutorial import ROOT, page_blocks, run_page

PAGE = os.path.join(ROOT, "docs", "diagnose.rst")


def _read_page():
    with open(PAGE, encoding="utf-8") as fh:
        return fh.read()


def test_diagnose_page_runs_and_prints_what_it_shows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    counts = run_page(_read_page(), "diagnose.rst", str(tmp_path))
    assert counts["examples"] >= 15 and counts["console"] == 1, counts
    for name in ("report.md", "diagnosis.json", "diagnosis.csv", "diagnosis_summary.csv",
                 "diagnosis.png"):
        assert (tmp_path / "diagnosis" / name).is_file(), name


def test_diagnose_page_has_no_code_that_is_not_run_and_is_in_the_toctree():
    text = _read_page()
    assert {kind for kind, _, _ in page_blocks(text)} <= {"doctest", "python", "console"}
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        assert not (stripped.endswith("::") and not stripped.startswith("..")), \
            f"diagnose.rst:{number}: a literal block nothing would run"
    with open(os.path.join(ROOT, "docs", "index.rst"), encoding="utf-8") as fh:
        assert re.search(r"^\s+diagnose\s*$", fh.read(), re.MULTILINE)
