"""The report as a person sees it: ``index.html`` opened in headless Chromium.

Chromium loads a copy of the page with a small script appended that, once the page has loaded,
writes what the browser rendered (every image's natural size, every figure's caption, every
table's rows) into the page; ``--dump-dom`` prints it. A screenshot of the page is checked to
show something. Debian's ``chromium`` package provides the browser (``.ci/run`` installs it);
without it these tests skip.
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
import shutil
import struct
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pytest

import simfl
from simfl import Fleet, dists, policies, sweeps
from simfl.report import write_report
from tests.helpers import BrokenFedRep, tiny_linear

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="headless Chromium is not installed (Debian: apt-get install chromium; .ci/run "
    "installs it), so the report cannot be checked in a browser",
)

FIGURES = [
    "groups_energy.png",  # in the "who took part" section, after the time-to-target table
    "metric_vs_rounds.png",
    "metric_vs_time.png",
    "speedup.png",
    "gantt.png",
    "utilisation.png",
    "staleness.png",
]

#: Appended to a copy of index.html: what the browser rendered, as JSON in <pre id=simfl-check>.
_PROBE = """<script>
window.addEventListener('load', function () {
  var out = {images: [], figures: [], tables: []};
  Array.prototype.forEach.call(document.images, function (i) {
    out.images.push({src: i.getAttribute('src'), width: i.naturalWidth,
                     height: i.naturalHeight, complete: i.complete});
  });
  Array.prototype.forEach.call(document.querySelectorAll('figure'), function (f) {
    var img = f.querySelector('img'), cap = f.querySelector('figcaption');
    out.figures.push({src: img ? img.getAttribute('src') : null,
                      caption: cap ? cap.textContent : null});
  });
  Array.prototype.forEach.call(document.querySelectorAll('table'), function (t) {
    var h = t.previousElementSibling;
    out.tables.push({rows: t.rows.length, columns: t.rows.length ? t.rows[0].cells.length : 0,
                     after: h ? h.textContent.slice(0, 40) : null});
  });
  var pre = document.createElement('pre');
  pre.id = 'simfl-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    """A report of 2 policies (one asynchronous) x 2 fleet sizes x 2 seeds and a failed run."""
    root = tmp_path_factory.mktemp("browser")
    fleets = {n: Fleet.homogeneous(n, dists.Exponential(1.0), dropout_rate=0.1) for n in (8, 16)}
    cases = sweeps.grid(
        tiny_linear(rounds=10),
        policy={
            "deadline": policies.Deadline(1.5, count=4),
            "fedbuff": policies.FedBuff(buffer_size=2, concurrency=4),
        },
        fleet=fleets,
        seed=[0, 1],
    )
    broken = dataclasses.replace(tiny_linear(), name="broken", algorithm=BrokenFedRep())
    simfl.sweep([*cases, broken], store=root / "store", executor="inline", progress=False)
    return write_report(root / "store", root / "report", target=("distance", "below", 0.5))


def _chromium(profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",  # CI runs as root
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--run-all-compositor-stages-before-draw",
        "--virtual-time-budget=10000",  # let every image load before the dump or the shot
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"chromium failed ({done.returncode}): {done.stderr[-2000:]}"
    return done


def _png_size(path: Path) -> tuple[int, int]:
    width, height = struct.unpack(">II", path.read_bytes()[16:24])
    return width, height


def test_every_image_loads_and_every_caption_and_table_is_there(report, tmp_path):
    probe = report.parent / "_browser_check.html"
    probe.write_text(report.read_text().replace("</body>", _PROBE + "</body>"))
    dom = _chromium(tmp_path / "profile", "--dump-dom", probe.as_uri()).stdout
    found = re.search(r'<pre id="simfl-check">(.*?)</pre>', dom, re.S)
    assert found, "the page never finished loading (no load event within the time budget)"
    seen = json.loads(html.unescape(found.group(1)))

    assert [i["src"] for i in seen["images"]] == FIGURES
    for image in seen["images"]:
        assert image["complete"] and image["width"] > 0 and image["height"] > 0, image
        # the browser decoded the whole PNG: its natural size is the file's own
        assert (image["width"], image["height"]) == _png_size(report.parent / image["src"])
    assert [f["src"] for f in seen["figures"]] == FIGURES
    for figure in seen["figures"]:
        assert figure["caption"] and len(figure["caption"].strip()) > 60, figure
    gantt = next(f["caption"] for f in seen["figures"] if f["src"] == "gantt.png")
    assert "late or dropped" in gantt or "no job was late or dropped" in gantt

    tables = seen["tables"]
    # time to target, participation per group, fairness, failed runs, runs
    assert len(tables) == 5
    target, participation, fairness, failed, runs = tables
    assert target["rows"] == 1 + 4 and target["columns"] >= 8  # 2 policies x 2 fleet sizes
    assert participation["rows"] >= 1 + 4 and fairness["rows"] == 1 + 4
    assert failed["rows"] == 1 + 1 and "Failed runs" in failed["after"]
    assert runs["rows"] == 1 + 9 and "Runs" in runs["after"]


def test_screenshot_shows_the_page(report, tmp_path):
    shot = tmp_path / "page.png"
    _chromium(
        tmp_path / "profile",
        "--window-size=1200,4000",
        f"--screenshot={shot}",
        report.as_uri(),
    )
    assert _png_size(shot) == (1200, 4000)
    pixels = matplotlib.image.imread(shot)[..., :3]
    ink = (pixels < 0.9).any(axis=2)  # anything not (nearly) white
    assert ink.mean() > 0.05, "the screenshot is (nearly) blank"
    # the figures are drawn down the page, not only the text at its top
    rows = np.flatnonzero(ink.any(axis=1))
    assert rows.max() > 2000


#: Appended to a copy of a report of a hostile store: what ran and what the reader sees.
_SAFETY_PROBE = """<script id="simfl-probe">
window.addEventListener('load', function () {
  var scripts = Array.prototype.filter.call(document.scripts, function (s) {
    return s.id !== 'simfl-probe';
  });
  var out = {title: document.title, scripts: scripts.length,
             svg: document.querySelectorAll('svg').length,
             images: Array.prototype.map.call(document.images, function (i) {
               return i.getAttribute('src');
             }),
             handlers: document.querySelectorAll('[onerror],[onload],[onmouseover]').length,
             text: document.body.innerText};
  var pre = document.createElement('pre');
  pre.id = 'simfl-check';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>"""


def test_hostile_strings_run_no_script_and_show_as_text(tmp_path):
    from tests.test_report import (
        HOSTILE_AXIS,
        HOSTILE_METRIC,
        HOSTILE_NAME,
        PAYLOADS,
        TRAVERSAL,
        hostile_store,
    )

    store = hostile_store(tmp_path / "store")
    index = write_report(
        store, tmp_path / "report", target=(HOSTILE_METRIC, "below", 0.9), baseline=PAYLOADS[0]
    )
    probe = index.parent / "_browser_check.html"
    probe.write_text(index.read_text().replace("</body>", _SAFETY_PROBE + "</body>"))
    dom = _chromium(tmp_path / "profile", "--dump-dom", probe.as_uri()).stdout
    found = re.search(r'<pre id="simfl-check">(.*?)</pre>', dom, re.S)
    assert found, "the page never finished loading (no load event within the time budget)"
    seen = json.loads(html.unescape(found.group(1)))
    # no script of a payload ran: the title is the page's own, no element or handler came in
    assert seen["title"] == f"simfl report: {tmp_path / 'store'}"
    assert seen["scripts"] == 0 and seen["svg"] == 0 and seen["handlers"] == 0
    assert sorted(seen["images"]) == sorted(FIGURES)
    # the reader sees every payload as the text it is
    for payload in (*PAYLOADS, TRAVERSAL, HOSTILE_METRIC, HOSTILE_AXIS, HOSTILE_NAME):
        assert payload in seen["text"], payload
