"""Sphinx configuration for the rfkernels documentation."""

import importlib.util

import rfkernels

project = "rfkernels"
author = "rfkernels developers"
release = version = rfkernels.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "numpydoc",
]
if importlib.util.find_spec("myst_parser") is not None:  # Markdown pages (performance.md)
    extensions.append("myst_parser")
    source_suffix = {".rst": "restructuredtext", ".md": "markdown"}

numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
autodoc_member_order = "bysource"
exclude_patterns = ["_build"]
html_theme = "alabaster"
