"""Sphinx configuration of simfl's documentation site.

Build it with ``sphinx-build -W --keep-going -b html docs docs/_build/html`` (the ``docs``
extra installs what it needs; ``tests/test_docs_site.py`` runs the same build with warnings as
errors). The pages are Markdown (myst-parser), the API reference is autodoc over the package's
NumPy docstrings (napoleon). Nothing is fetched at build time: no intersphinx inventories.
"""

from __future__ import annotations

import sys
from pathlib import Path

from sphinx.ext.napoleon import _process_docstring

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


def _napoleon_except_attributes(app, what, name, obj, options, lines):
    """Napoleon's docstring processing, for everything but attributes.

    napoleon reads an attribute docstring's first line as ``type: description``, while the
    package's attribute comments are prose, often with a colon in them ("Epochs ... (0: none)");
    their types come from the annotations, which autodoc shows in the signature.
    """
    if what != "attribute":
        _process_docstring(app, what, name, obj, options, lines)


def setup(app):
    """Route autodoc's docstrings through :func:`_napoleon_except_attributes`."""
    for listener in list(app.events.listeners["autodoc-process-docstring"]):
        if listener.handler is _process_docstring:
            app.disconnect(listener.id)
    app.connect("autodoc-process-docstring", _napoleon_except_attributes)
