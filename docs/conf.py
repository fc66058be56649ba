"""Sphinx configuration of simfl's documentation site.

Build it with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (the ``docs``
extra installs what it needs; ``tests/test_docs_site.py`` runs the same build with warnings as
errors). The pages are Markdown (myst-parser), the API reference is autodoc over the package's
NumPy docstrings (napoleon). Nothing is fetched at build time: no intersphinx inventories.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The checkout's own simfl first, so a clean clone builds its own sources (installed or not).
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

project = "simfl"
author = "simfl developers"
copyright = "simfl developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]

# Markdown: headings get anchors (pages link to sections as [text](page.md#anchor)).
myst_heading_anchors = 3
myst_enable_extensions = ["colon_fence"]

# API reference: members in source order; NumPy docstrings only. ``napoleon_use_ivar`` renders
# an ``Attributes`` section as a field list, so a dataclass field documented there is not
# described twice (once by napoleon, once by autodoc).
autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = True

html_theme = "furo"
html_title = "simfl"
html_static_path: list[str] = []
