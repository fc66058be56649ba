"""``simfl report``: every figure is written and shown by an index.html with captions."""

import dataclasses
from html.parser import HTMLParser

import matplotlib.image
import pytest

import simfl
from simfl import Fleet, dists, policies, sweeps
from simfl.cli import main
from simfl.report import write_report
from tests.helpers import BrokenFedRep, tiny_linear

FIGURES = {
    "metric_vs_rounds.png",
    "metric_vs_time.png",
    "speedup.png",
    "gantt.png",
    "utilisation.png",
    "staleness.png",
    "groups_energy.png",
}


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.captions: list[str] = []
        self.tables = 0
        self._in_caption = False

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])
        elif tag == "figcaption":
            self._in_caption = True
            self.captions.append("")
        elif tag == "table":
            self.tables += 1

    def handle_endtag(self, tag):
        if tag == "figcaption":
            self._in_caption = False

    def handle_data(self, data):
        if self._in_caption:
            self.captions[-1] += data


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "store"
    fleets = {n: Fleet.homogeneous(n, dists.Exponential(1.0), dropout_rate=0.1) for n in (8, 16)}
    cases = sweeps.grid(
        tiny_linear(rounds=12),
        policy={
            "deadline": policies.Deadline(1.5, count=4),
            "fastest-k": policies.FastestK(k=3, overcommit=0.5),
            "fedbuff": policies.FedBuff(buffer_size=2, concurrency=4),
        },
        fleet=fleets,
        seed=[0, 1],
    )
    broken = dataclasses.replace(tiny_linear(), name="broken", algorithm=BrokenFedRep())
    simfl.sweep([*cases, broken], store=path, executor="inline", progress=False)
    return path


def _read(index):
    page = _Page()
    page.feed(index.read_text())
    return page


def test_report_writes_every_figure_and_an_index(store, tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["report", str(store), "--out", str(out), "--target", "distance<0.5"]) == 0
    assert "index.html  (7 figures)" in capsys.readouterr().out
    page = _read(out / "index.html")
    assert set(page.images) == FIGURES and len(page.images) == len(FIGURES)
    for name in page.images:
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000, name
        height, width = matplotlib.image.imread(out / name).shape[:2]
        assert width >= 600 and height >= 300, name
    assert all(len(c) > 60 for c in page.captions)
    # time to target, who took part (per group, fairness), failed runs, runs; no energy here
    assert page.tables == 5
    assert "<h2>Who took part</h2>" in (out / "index.html").read_text()
    assert (out / "participation.csv").is_file() and (out / "fairness.csv").is_file()
    assert not (out / "energy_to_target.csv").exists()
    text = (out / "index.html").read_text()
    assert "distance ≤ 0.5" in text and "mean time (s) [95% CI]" in text
    assert "broken on purpose" in text and "speedup over &#x27;deadline&#x27;" in text
    assert (out / "time_to_target.csv").is_file()


def test_report_defaults_and_one_fleet_size(tmp_path):
    cases = sweeps.grid(
        tiny_linear(rounds=10),
        policy={"wait-all": policies.WaitAll(count=4), "fastest-k": policies.FastestK(k=2)},
        seed=[0, 1],
    )
    path = tmp_path / "s"
    simfl.sweep(cases, store=path, executor="inline", progress=False)
    index = write_report(path)  # default folder, metric, target, run, series and baseline
    assert index == path / "report" / "index.html"
    page = _read(index)
    assert set(page.images) == FIGURES
    speed = next(c for c, i in zip(page.captions, page.images, strict=True) if i == "speedup.png")
    assert "one fleet size (12 devices)" in speed
    stale = next(c for c, i in zip(page.captions, page.images, strict=True) if i == "staleness.png")
    assert "synchronous: all are 0" in stale
    with pytest.raises(ValueError, match="metrics"):
        write_report(path, metric="accuracy")
    with pytest.raises(ValueError, match="baseline"):
        write_report(path, baseline="nope")
    with pytest.raises(ValueError, match="run id"):
        write_report(path, run="nope")
