"""Sphinx configuration: Markdown pages (MyST), the API from the docstrings (autodoc).

sphinx-build -W --keep-going -b html docs docs/_build/html
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

# The checkout's package, built in place or not: autodoc imports it from here.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import aiosendfile

project = "aiosendfile"
author = "the aiosendfile authors"
copyright = "the aiosendfile authors"
release = aiosendfile.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the docstrings' Args:, Returns:, Raises: sections
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}  # changes.rst: CHANGES.rst whole
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # links to page.md#a-heading, as GitHub makes them

# Docstrings write `name` for code, as Markdown does.
default_role = "code"
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_typehints_format = "short"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "furo"
html_title = f"aiosendfile {release}"


def _literal_in_(
    app: object, what: str, name: str, obj: object, options: object, lines: list[str]
) -> None:
    """The C core's docstring is plain text for help(); reST would read its `in_`
    (the parameter's name) as a link target."""
    if name == "aiosendfile.sendfile":
        lines[:] = [re.sub(r"\bin_\b", "``in_``", line) for line in lines]


def setup(app: Any) -> None:
    app.connect("autodoc-process-docstring", _literal_in_)
