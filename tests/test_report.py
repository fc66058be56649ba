"""``simfl report``: every figure is written and shown by an index.html with captions."""

import dataclasses
import html
import json
import math
import os
import re
import shutil
import textwrap
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, ClassVar

import matplotlib.image
import matplotlib.pyplot
import pandas as pd
import pytest

import simfl
from simfl import Fleet, dists, policies, sweeps, tasks
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


POLICY_PAIR = {"wait-all": policies.WaitAll(count=4), "fastest-k": policies.FastestK(k=2)}


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


@pytest.fixture(scope="module")
def pair_store(tmp_path_factory):
    """2 synchronous policies x 2 seeds on 12 devices (read only: copy it to change it)."""
    path = tmp_path_factory.mktemp("pair") / "store"
    cases = sweeps.grid(tiny_linear(rounds=8), policy=POLICY_PAIR, seed=[0, 1])
    simfl.sweep(cases, store=path, executor="inline", progress=False)
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


#: HTML and JavaScript a received store or a scenario file may carry in any string it holds.
PAYLOADS = (
    "<script>document.title='pwned'</script>",
    '"><img src=x onerror="document.title=\'pwned\'">',
    "'><svg onload=document.title='pwned'>",
    "javascript:document.title='pwned'",
    "</textarea></title></style><script>document.title='pwned'</script>",
    "$\\notacommand{x}$ & $5",  # TeX to matplotlib: must stay text in the figures too
)
#: A series label that is a path out of the report's folder, were it ever a file name.
TRAVERSAL = "../../escaped"
HOSTILE_METRIC = "<script>document.title='pwned'</script>mse"
HOSTILE_AXIS = '"><img src=x onerror="document.title=\'pwned\'">axis'
HOSTILE_NAME = "</textarea><script>document.title='pwned'</script>"


class _RenamedData:
    """A bound linear task whose ``distance`` metric goes by :data:`HOSTILE_METRIC`."""

    def __init__(self, data: Any) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        return getattr(self._data, name)

    def evaluate(self, model: Any) -> dict[str, float]:
        metrics = self._data.evaluate(model)
        return {HOSTILE_METRIC: metrics["distance"], "test_mse": metrics["test_mse"]}


@dataclasses.dataclass(frozen=True)
class _HostileTask(tasks.LinearRepresentation):
    metrics: ClassVar[tuple[str, ...]] = (HOSTILE_METRIC, "test_mse")
    goals: ClassVar[dict[str, str]] = {HOSTILE_METRIC: "min", "test_mse": "min"}

    def build(self, n_clients: int, streams: Any) -> Any:
        return _RenamedData(super().build(n_clients, streams))


def hostile_store(path: Path) -> Path:
    """A store whose scenario name, grid label name, series labels and metric are HTML/JS."""
    base = dataclasses.replace(
        tiny_linear(rounds=6),
        name=HOSTILE_NAME,
        task=_HostileTask(d=6, k=2, samples_per_client=5, test_samples=20),
    )
    series = {
        **{p: policies.Deadline(1.0 + i / 4, count=4) for i, p in enumerate(PAYLOADS)},
        TRAVERSAL: policies.FastestK(k=3),
    }
    cases = [
        sweeps.Case(
            dataclasses.replace(base, policy=policy, seed=seed),
            {HOSTILE_AXIS: label, "seed": seed},
        )
        for label, policy in series.items()
        for seed in (0, 1)
    ]
    simfl.sweep(cases, store=path, executor="inline", progress=False)
    return path


#: The elements index.html is made of: anything else would be markup from a string it shows.
_OWN_TAGS = {
    "html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "b", "code",
    "table", "thead", "tbody", "tr", "th", "td", "figure", "img", "figcaption",
}  # fmt: skip


def _tree(root: Path) -> set[Path]:
    return {p for p in root.rglob("*")}


@pytest.mark.parametrize("baseline", [PAYLOADS[1], TRAVERSAL])
def test_report_shows_hostile_strings_as_text(tmp_path, baseline):
    store = hostile_store(tmp_path / "store")
    before = _tree(tmp_path)
    out = tmp_path / "deep" / "report"
    index = write_report(store, out, target=(HOSTILE_METRIC, "below", 0.9), baseline=baseline)
    # nothing written outside the report's folder (no file name is made of a label)
    assert {p for p in _tree(tmp_path) - before if out not in (p, *p.parents)} == {
        tmp_path / "deep"
    }
    text = index.read_text()
    page = _Page()
    page.feed(text)
    # (a) no tag of a payload reached the HTML: the only elements are the page's own
    tags = set(re.findall(r"<\s*([a-zA-Z][a-zA-Z0-9]*)", text))
    assert tags <= _OWN_TAGS, tags - _OWN_TAGS
    assert not re.search(r"<[^>]*\son(error|load)\s*=", text)
    assert set(page.images) == FIGURES  # no <img> of a payload
    # (b) every payload shows literally in the page's text
    shown = html.unescape(re.sub(r"<[^>]+>", " ", text))
    for payload in (*PAYLOADS, TRAVERSAL, HOSTILE_METRIC, HOSTILE_AXIS, HOSTILE_NAME):
        assert payload in shown, payload
    assert repr(baseline) in shown  # the caption and heading quote the baseline


class _Planted:
    """Unpickling this writes ``flag``: the trace of code run by reading a store."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (Path(self.flag).write_text, ("unpickled",))


def _refuse(*args: Any, **kwargs: Any) -> Any:
    raise AssertionError("a read path unpickled something")


def test_reading_a_store_and_its_report_runs_no_code(pair_store, tmp_path, monkeypatch):
    import pickle

    import cloudpickle

    path = tmp_path / "store"
    shutil.copytree(pair_store, path)
    flag = tmp_path / "flag"
    for folder in (path / "runs").iterdir():  # what a received store could carry
        (folder / "state.pkl").write_bytes(pickle.dumps(_Planted(str(flag))))
    (path / "payload.pkl").write_bytes(pickle.dumps(_Planted(str(flag))))
    for module in (pickle, cloudpickle):
        for name in ("load", "loads", "Unpickler"):
            monkeypatch.setattr(module, name, _refuse, raising=module is pickle)
    store = simfl.Store(path)
    ids = [r["run_id"] for r in store.records()]
    assert len(ids) == 4 and not store.check()
    store.runs(), store.rounds(), store.clients()
    for run_id in ids:
        store.results(run_id)
    write_report(path)
    assert main(["show", str(path)]) == 0
    assert main(["store", "check", str(path)]) == 0
    assert not flag.exists()


#: The modules that read a store and write a report: none may unpickle or evaluate text.
_READ_PATHS = (
    "simfl/sweeps/store.py",
    "simfl/sweeps/integrity.py",
    "simfl/results",
    "simfl/report",
    "simfl/compare.py",
    "simfl/plots.py",
)


def test_read_paths_hold_no_unpickling_or_eval():
    root = Path(simfl.__file__).parent.parent
    files = [
        f
        for p in _READ_PATHS
        for f in ([root / p] if p.endswith(".py") else (root / p).rglob("*.py"))
    ]
    assert len(files) >= 8
    found = [
        f"{f.relative_to(root)}: {line.strip()}"
        for f in files
        for line in f.read_text().splitlines()
        if re.search(r"\b(c?pickle|dill|joblib|marshal|shelve)\b|\b(eval|exec)\(|yaml\.load", line)
    ]
    assert not found, found


def _split_target(store: Path) -> tuple[float, str, str]:
    """A distance target one policy reaches in every seed and the other misses in one or more."""
    rounds = simfl.Store(store).rounds()
    worst = rounds.groupby(["policy", "seed"])["distance"].min().groupby("policy").max()
    assert worst.nunique() == 2, worst
    return float(worst.min()), str(worst.idxmin()), str(worst.idxmax())


def test_a_target_never_reached_reads_the_same_in_table_csv_and_figure(
    pair_store, tmp_path, monkeypatch
):
    from simfl.report import figures

    value, reaches, misses = _split_target(pair_store)
    drawn = []
    monkeypatch.setattr(figures, "_save", lambda fig, path: drawn.append((path.name, fig)))
    index = write_report(
        pair_store, tmp_path / "r", target=("distance", "below", value), baseline=reaches
    )
    csv = pd.read_csv(tmp_path / "r" / "time_to_target.csv", keep_default_na=False)
    row = csv.set_index("policy").loc[misses]
    k = 2 - int(row["reached"])
    assert k >= 1 and row["note"] == f"not reached in {k} of 2 seeds"
    assert row["speedup"] == row["speedup_ci_low"] == row["speedup_ci_high"] == ""  # NaN, not 0
    assert float(row["mean_time"]) == math.inf and row["ci_low"] == row["ci_high"] == ""
    assert csv.set_index("policy").loc[reaches, "note"] == ""
    text = html.unescape(index.read_text())
    assert f"<td>not reached in {k} of 2 seeds</td>" in text
    speed = next(fig for name, fig in drawn if name == "speedup.png")
    notes = " ".join(" ".join(t.get_text().split()) for ax in speed.axes for t in ax.texts)
    assert f"{misses} (not reached in {k} of 2 seeds)" in notes
    heights = [p.get_height() for ax in speed.axes for p in ax.patches]
    assert 0.0 not in heights  # no 0x bar
    matplotlib.pyplot.close("all")


SWEEP_FILE = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies, sweeps, tasks

    BASE = Scenario(
        name="pair",
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20),
        algorithm=algorithms.FedRep(),
        fleet=Fleet.homogeneous(12, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=4),
        rounds=6,
    )
    CASES = sweeps.grid(BASE, policy={"w": policies.WaitAll(count=4), "f": policies.FastestK(k=2)})
    """
)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """A store written by ``simfl sweep --target distance<0.37`` (read only: copy it)."""
    root = tmp_path_factory.mktemp("swept")
    (root / "pair.py").write_text(SWEEP_FILE)
    store = root / "store"
    sweep = ["sweep", str(root / "pair.py"), "--store", str(store), "--seeds", "0-1"]
    assert main([*sweep, "--executor", "inline", "--quiet", "--target", "distance<0.37"]) == 0
    return store


def test_report_uses_the_target_the_sweep_was_given(swept, tmp_path, capsys):
    assert json.loads((swept / "report.json").read_text()) == {"target": "distance<=0.37"}
    assert sorted(p.name for p in swept.iterdir()) == ["report.json", "runs", "simfl-store.json"]
    capsys.readouterr()
    out = tmp_path / "r"
    assert main(["report", str(swept), "--out", str(out), "--quiet"]) == 0
    assert capsys.readouterr().err == ""
    text = html.unescape((out / "index.html").read_text())
    assert "Target: <b>distance ≤ 0.37</b> (the sweep's --target, recorded in report.json" in text
    # --target overrides it
    given = ["--target", "distance<0.4"]
    assert main(["report", str(swept), "--out", str(out), "--quiet", *given]) == 0
    assert "Target: <b>distance ≤ 0.4</b> (given)" in html.unescape(
        (out / "index.html").read_text()
    )
    # as does another metric: the recorded target is about distance
    assert main(["report", str(swept), "--out", str(out), "--quiet", "--metric", "test_mse"]) == 0
    assert "Target: <b>test_mse ≤" in html.unescape((out / "index.html").read_text())
    # the store's own readers take the extra file in their stride
    assert main(["store", "check", str(swept)]) == 0 and main(["show", str(swept)]) == 0
    assert "4 readable runs, 0 unreadable" in capsys.readouterr().out


def _fifo(path: Path) -> None:
    os.mkfifo(path)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.write_text("{not json"), "is not JSON"),
        (lambda p: p.write_text('{"target": 5}'), 'must hold {"target": "metric<=value"}'),
        (lambda p: p.write_text('["distance<1"]'), 'must hold {"target": "metric<=value"}'),
        (lambda p: p.write_text('{"target": "distance<nan"}'), "target must look like"),
        (lambda p: p.write_text('{"target": "nope<1"}'), "metric 'nope' is not a metric"),
        (lambda p: p.write_bytes(b" " * 5000), "more than 4,096"),
        (lambda p: p.mkdir(), "is not a regular file"),
        (_fifo, "is not a regular file"),
        (lambda p: p.symlink_to("/dev/zero"), "is not a regular file"),
    ],
    ids=["garbage", "number", "list", "nan", "metric", "huge", "folder", "fifo", "dev-zero"],
)
def test_a_bad_recorded_target_is_one_warning_and_the_reports_own_choice(
    swept, tmp_path, capsys, make, says
):
    store = tmp_path / "store"
    shutil.copytree(swept, store, ignore=shutil.ignore_patterns("report.json", "report"))
    make(store / "report.json")
    capsys.readouterr()
    assert main(["report", str(store), "--quiet"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and says in err[0], err
    assert "chooses its own target" in err[0]
    assert "twice the median over runs" in (store / "report" / "index.html").read_text()


def test_a_store_with_two_versions_of_a_scenario_reports_the_newest(tmp_path):
    path = tmp_path / "store"
    for count in (4, 5):  # "w" edited between the sweeps: same name, labels and seeds
        policy = {"w": policies.WaitAll(count=count), "f": policies.FastestK(k=2)}
        cases = sweeps.grid(tiny_linear(rounds=6), policy=policy, seed=[0, 1])
        simfl.sweep(cases, store=path, executor="inline", progress=False)
    runs = simfl.Store(path).runs()
    assert len(runs) == 6 and runs.groupby(["policy", "seed"])["fingerprint"].nunique().max() == 2
    newest = runs.sort_values("finished").drop_duplicates(["policy", "seed"], keep="last")
    index = write_report(path, tmp_path / "r", target=("distance", "below", 0.5))
    csv = pd.read_csv(tmp_path / "r" / "time_to_target.csv")
    assert sorted(csv["policy"]) == ["f", "w"] and (csv["runs"] == 2).all()
    text = html.unescape(index.read_text())
    assert "4 finished runs, 0 failed, 2 of older versions of their scenarios" in text
    assert "<h2>Older versions left out</h2>" in text and "simfl store prune" in text
    old = runs[~runs["run_id"].isin(newest["run_id"])]
    assert len(old) == 2 and set(old["policy"]) == {"w"}
    section = text.split("<h2>Older versions left out</h2>")[1].split("<h2>")[0]
    for run_id, fingerprint in zip(old["run_id"], old["fingerprint"], strict=True):
        assert f"<td>{run_id}</td>" in section and f"<td>{fingerprint[:8]}</td>" in section
    for run_id in newest["run_id"]:
        assert f"<td>{run_id}</td>" not in section


def test_runs_with_mostly_empty_rounds_are_flagged(tmp_path):
    policy = {
        "w": policies.WaitAll(count=4),
        "idle": policies.Deadline(0.02, count=4),  # nobody computes in 0.02 s: empty rounds
    }
    cases = sweeps.grid(tiny_linear(rounds=8), policy=policy, seed=[0, 1])
    out = simfl.sweep(cases, executor="inline", progress=False)
    rounds = out.store.rounds()
    empty = (
        rounds[rounds["round"] >= 0]
        .groupby(["policy", "seed"])["status"]
        .agg(lambda s: int((s == "empty").sum()))
    )
    assert (empty.loc["idle"] > 4).all() and (empty.loc["w"] == 0).all()
    # one run of "w" records its empty rounds in meta (as runs now do), with a warning
    w0 = next(r["run_id"] for r in out.store.records() if r["labels"] == {"policy": "w", "seed": 0})
    meta = out.store.results(w0).meta
    meta.update(empty_rounds=5, warnings=["5 of 8 rounds were empty"])
    index = write_report(out.store, tmp_path / "r", target=("distance", "below", 0.9))
    text = html.unescape(index.read_text())
    assert "<b>Warning:</b> in 3 run(s) more than half of the rounds were empty" in text
    table = text.split("<b>Warning:</b>")[1].split("</table>")[0]
    assert table.count("<tr>") == 1 + 3 and "5 of 8 rounds were empty" in table
    for seed in (0, 1):
        assert f"<td>{empty.loc[('idle', seed)]} of 8</td>" in table
    assert "<td>5 of 8</td>" in table
