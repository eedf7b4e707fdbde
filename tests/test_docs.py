"""The Sphinx site builds with warnings as errors (numpydoc docstrings, pages, gallery)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("numpydoc")

DOCS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs")


def test_docs_build_without_warnings(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", DOCS, str(tmp_path)],
        capture_output=True, text=True, timeout=600,
    )
    assert out.returncode == 0, out.stderr[-4000:]
    assert (tmp_path / "gallery.html").exists()
    for page in ("theory", "monte_carlo", "sweeps", "attention", "figures", "unfixed_qr",
                 "performance", "api"):
        assert (tmp_path / f"{page}.html").exists(), page


def test_readme_gallery_images_exist():
    root = os.path.dirname(DOCS)
    with open(os.path.join(root, "README.md")) as fh:
        text = fh.read()
    images = [line.split("(")[1].split(")")[0] for line in text.splitlines() if line.startswith("![")]
    assert len(images) == 1  # one figure; the gallery page holds them all
    for path in images:
        assert os.path.exists(os.path.join(root, path)), path
    with open(os.path.join(DOCS, "gallery.rst")) as fh:
        gallery = fh.read()
    for name in os.listdir(os.path.join(DOCS, "_static", "gallery")):
        assert name in gallery, name


def test_readme_reads_as_issue_36_asks_and_its_quick_start_runs(tmp_path, monkeypatch):
    """Purpose first, then the two commands; under 150 lines; the quick start runs as shown."""
    import re

    root = os.path.dirname(DOCS)
    with open(os.path.join(root, "README.md")) as fh:
        text = fh.read()
    lines = text.splitlines()
    assert len(lines) < 150
    assert lines[0] == "# rfkernels" and lines[2].startswith("rfkernels tells you")
    commands = re.search(r"```bash\n(.*?)```", text, re.S).group(1).splitlines()
    assert "rfkernels figures" in commands[0] and "python3 -m pytest" in commands[1]
    assert not re.search(r"\b\d+(\.\d+)? ?(s|min)\b", text)  # no measured times in README
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    assert "rfkernels.estimator(" in code and len(code.splitlines()) <= 12
    monkeypatch.chdir(tmp_path)
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    assert (tmp_path / "draw.npz").exists()
