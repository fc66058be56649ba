"""The documentation site builds with warnings as errors, and the README's links lead somewhere.

The build is how CI checks the site: Sphinx (autodoc and napoleon over the package's NumPy
docstrings, myst-parser for the Markdown pages) from the ``docs`` extra, which ``dev`` includes.
A warning (a broken cross-reference, a page in no table of contents, a docstring autodoc cannot
parse) fails it.
"""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NEEDS = ("sphinx", "myst_parser", "furo")
MISSING = [name for name in NEEDS if importlib.util.find_spec(name) is None]


@pytest.mark.slow
@pytest.mark.skipif(
    bool(MISSING),
    reason=f"{', '.join(MISSING)} not installed: pip install -e '.[docs]' -c constraints.txt",
)
def test_the_site_builds_without_warnings(tmp_path):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "sphinx",
            "-W",
            "--keep-going",
            "-E",
            "-q",
            "-j",
            "1",
            "-b",
            "html",
            "-d",
            str(tmp_path / "doctrees"),
            str(ROOT / "docs"),
            str(tmp_path / "html"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:]
    html = tmp_path / "html"
    for page in ("index", "getting-started", "playback", "validation", "performance"):
        assert (html / f"{page}.html").is_file(), page
    api = (html / "api" / "simfl.html").read_text()
    assert 'id="simfl.run"' in api  # autodoc ran on the package, not on an empty stub


def test_the_readme_links_lead_to_files():
    readme = (ROOT / "README.md").read_text()
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", readme)
    local = [link for link in links if "://" not in link]
    assert len(local) >= 15
    for link in local:
        assert (ROOT / link).exists(), link
    assert len(readme.splitlines()) <= 200


def test_every_page_is_in_the_site():
    index = (ROOT / "docs" / "index.md").read_text()
    api = (ROOT / "docs" / "api" / "index.md").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        if page.stem != "index":
            assert re.search(rf"^{re.escape(page.stem)}$", index, re.M), page.name
    for page in (ROOT / "docs" / "api").glob("*.md"):
        if page.stem != "index":
            assert re.search(rf"^{re.escape(page.stem)}$", api, re.M), page.name
