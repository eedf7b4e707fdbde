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
    assert len(images) >= 7
    for path in images:
        assert os.path.exists(os.path.join(root, path)), path
