"""The figures of a search and the report's section on the searches of a store."""

from __future__ import annotations

import html
import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

optuna = pytest.importorskip("optuna")

import simfl  # noqa: E402
from simfl import Fleet, Profile, Scenario, algorithms, dists, policies, tasks, tuning  # noqa: E402
from simfl.report.recorded import ReportWarning  # noqa: E402
from simfl.report.searches import best_table, search_sections  # noqa: E402
from simfl.tuning import figures  # noqa: E402
from simfl.tuning.figures import NotDrawnError  # noqa: E402


@pytest.fixture
def drawn(monkeypatch):
    """The figures drawn (not saved), by file name."""
    import matplotlib

    matplotlib.use("Agg")
    out: dict[str, object] = {}
    monkeypatch.setattr(figures, "_save", lambda fig, path: out.update({Path(path).name: fig}))
    yield out
    import matplotlib.pyplot as plt

    plt.close("all")


def _trials() -> pd.DataFrame:
    """Six trials of every kind: feasible, infeasible, pruned, target missed, failed."""
    return pd.DataFrame(
        {
            "trial": [0, 1, 2, 3, 4, 5],
            "state": ["complete", "complete", "pruned", "complete", "failed", "complete"],
            "time": [10.0, 5.0, 20.0, math.inf, math.nan, 8.0],
            "feasible": [True, False, False, True, False, True],
        }
    )


def _offsets(ax) -> list[tuple[float, float]]:
    return [tuple(xy) for c in ax.collections for xy in c.get_offsets()]


def test_history_marks_each_kind_of_trial_and_the_best_so_far(drawn):
    caption = figures.history_figure(_trials(), "time", "minimize", "h.png")
    ax = drawn["h.png"].axes[0]
    points = _offsets(ax)
    # finite values where they are; inf on the top edge, a failed trial on the bottom edge
    # (in axes fractions: those markers are drawn in a blended transform)
    for xy in [(0.0, 10.0), (1.0, 5.0), (2.0, 20.0), (5.0, 8.0), (3.0, 0.97), (4.0, 0.03)]:
        assert xy in points, (xy, points)
    assert len(points) == 6
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == [
        "complete, constraints met",
        "complete, a constraint not met",
        "pruned (over the seeds it ran)",
        "failed (on the bottom edge)",
        "best feasible so far",
    ]
    best = next(ln for ln in ax.lines if ln.get_label() == "best feasible so far")
    # trials 0 (10) and 5 (8) are feasible and finite; trial 1 (5) met no constraint
    assert list(best.get_xdata()) == [0.0, 5.0, 5.0] and list(best.get_ydata()) == [10, 8, 8]
    assert any("not reached" in t.get_text() for t in ax.texts)
    assert ax.get_ylim()[1] > 20.0  # room above the largest value for the edge's markers
    assert "6 trials" in caption and "4 complete, 1 pruned, 1 failed" in caption
    assert "1 trial never reached the target" in caption  # trial 3; trial 4 failed
    assert ax.get_yscale() == "linear"


def test_history_of_a_maximised_objective_on_a_log_scale(drawn):
    trials = pd.DataFrame(
        {
            "trial": [0, 1, 2],
            "state": ["complete"] * 3,
            "u": [1.0, 500.0, 40.0],
            "feasible": [True, True, True],
        }
    )
    caption = figures.history_figure(trials, "u", "maximize", "h.png")
    ax = drawn["h.png"].axes[0]
    best = next(ln for ln in ax.lines if ln.get_label() == "best feasible so far")
    assert list(best.get_ydata()) == [1.0, 500.0, 500.0, 500.0]
    assert ax.get_yscale() == "log" and "higher is better" in caption
    assert "never reached" not in caption
    with pytest.raises(NotDrawnError, match="no finished trial"):
        figures.history_figure(trials.iloc[:0], "u", "maximize", "h.png")
    with pytest.raises(NotDrawnError, match="no column 'v'"):
        figures.history_figure(trials, "v", "maximize", "h.png")


def test_history_writes_a_png(tmp_path):
    path = tmp_path / "h.png"
    figures.history_figure(_trials(), "time", "minimize", path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_front_joins_the_feasible_trials_no_other_dominates(drawn):
    trials = pd.DataFrame(
        {
            "trial": range(7),
            "state": ["complete"] * 5 + ["pruned", "complete"],
            "time": [1.0, 2.0, 3.0, 2.5, 0.5, 0.1, 5.0],
            "rate": [1.0, 3.0, 4.0, 2.0, 9.0, 99.0, math.inf],
            "feasible": [True, True, True, True, False, False, True],
        }
    )
    caption = figures.front_figure(trials, ["time", "rate"], ["minimize", "maximize"], "f.png")
    ax = drawn["f.png"].axes[0]
    (front,) = ax.lines
    # trial 3 (2.5, 2.0) is dominated by trial 1 (2.0, 3.0); trial 4 beats all but is infeasible
    assert list(front.get_xdata()) == [1.0, 2.0, 3.0] and list(front.get_ydata()) == [1, 3, 4]
    assert sorted(t.get_text() for t in ax.texts) == ["0", "1", "2"]
    assert "the 3 trial(s) of the front" in caption
    assert "2 trial(s) are not shown" in caption  # the pruned one and the infinite one
    with pytest.raises(NotDrawnError, match="two objectives"):
        figures.front_figure(trials, ["time"], ["minimize"], "f.png")
    with pytest.raises(NotDrawnError, match="no front"):
        figures.front_figure(
            trials.assign(feasible=False), ["time", "rate"], ["minimize", "maximize"], "f.png"
        )


def _study(values, params) -> optuna.Study:
    study = optuna.create_study(direction="minimize")
    dist = {
        "x": optuna.distributions.FloatDistribution(0.0, 1.0),
        "n": optuna.distributions.IntDistribution(1, 10),
    }
    study.add_trials(
        [
            optuna.trial.create_trial(
                params={k: p[k] for k in p}, distributions={k: dist[k] for k in p}, value=v
            )
            for v, p in zip(values, params, strict=True)
        ]
    )
    return study


def test_importance_finds_the_knob_that_matters(drawn):
    params = [{"x": i / 11, "n": 1 + (7 * i) % 10} for i in range(12)]
    values = [10 * p["x"] ** 2 + 0.001 * p["n"] for p in params]
    caption = figures.importance_figure(_study(values, params), ["time"], "i.png")
    ax = drawn["i.png"].axes[0]
    widths = {
        t.get_text(): b.get_width() for t, b in zip(ax.get_yticklabels(), ax.patches, strict=True)
    }
    assert set(widths) == {"n", "x"}
    assert widths["x"] > 0.9 and widths["n"] < 0.1 and math.isclose(sum(widths.values()), 1)
    assert "fANOVA" in caption and "12 complete trials" in caption
    # the same study gives the same importances (the forest is seeded)
    figures.importance_figure(_study(values, params), ["time"], "j.png")
    again = [b.get_width() for b in drawn["j.png"].axes[0].patches]
    assert again == [b.get_width() for b in ax.patches]


def test_importance_says_why_it_cannot_be_drawn():
    one = [{"x": 0.1}, {"x": 0.5}]
    with pytest.raises(NotDrawnError, match="one knob"):
        figures.importance_figure(_study([1.0, 2.0], one), ["time"], "i.png")
    two = [{"x": 0.1, "n": 2}, {"x": 0.5, "n": 3}, {"x": 0.7, "n": 3}]
    with pytest.raises(NotDrawnError, match="fewer than two complete trials with a finite"):
        figures.importance_figure(_study([math.inf, math.inf, 1.0], two), ["time"], "i.png")
    same = [{"x": 0.5, "n": 3}] * 3
    with pytest.raises(NotDrawnError, match="took one value"):
        figures.importance_figure(_study([1.0, 2.0, 3.0], same), ["time"], "i.png")


def test_load_study_reads_a_copy_of_the_journal(tmp_path):
    from optuna.storages.journal import JournalFileBackend

    journal = tmp_path / "s.journal"
    storage = optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
    study = optuna.create_study(study_name="s", storage=storage)
    study.optimize(lambda t: t.suggest_float("x", 0, 1) ** 2, n_trials=3)
    before = journal.read_bytes()
    loaded = figures.load_study(journal, "s")
    assert [t.params for t in loaded.trials] == [t.params for t in study.trials]
    assert journal.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.journal"]  # no lock, no copy
    with pytest.raises(NotDrawnError, match="holds no study 'other'"):
        figures.load_study(journal, "other")
    with pytest.raises(NotDrawnError, match="not in the store"):
        figures.load_study(tmp_path / "none.journal", "s")
    (tmp_path / "bad.journal").write_text("not json\nnor this\n")  # a last line may be cut
    with pytest.raises(NotDrawnError, match="cannot be read"):
        figures.load_study(tmp_path / "bad.journal", "s")


def test_trials_frame_reads_the_numbers_json_cannot_hold():
    frame = figures.trials_frame(
        [{"trial": 0, "t": "inf", "c": 1.5}, {"trial": 1, "t": 2.0, "c": "nan"}], ["t", "c"]
    )
    assert frame["t"].tolist() == [math.inf, 2.0] and math.isnan(frame["c"].iloc[1])


def _fleet(fast: int, slow: int) -> Fleet:
    return Fleet.tiers(
        (fast, Profile(compute=dists.Exponential(mean=1.0), latency=0.5, name="fast")),
        (slow, Profile(compute=dists.Exponential(mean=8.0), latency=0.5, name="slow")),
    )


BASE = Scenario(
    name="deadline",
    task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5),
    algorithm=algorithms.FedRep(),
    fleet=_fleet(8, 2),
    policy=policies.Deadline(2.0, count=4),
    rounds=8,
)


@pytest.fixture(scope="module")
def two_objectives(tmp_path_factory):
    """A store holding a search of two objectives (a front), and a file that is no outcome."""
    store = tmp_path_factory.mktemp("searches") / "store"
    simfl.tune(
        BASE,
        {"policy.seconds": tuning.Float(1.2, 6.0), "policy.count": tuning.Int(2, 8)},
        [tuning.SimTime(), tuning.UpdatesPerHour()],
        constraints=[tuning.Constraint(tuning.RoundTime(0.95), at_most=5.0)],
        seeds=range(1),
        fresh_seeds=[5],
        trials=6,
        store=store,
        executor="inline",
        progress=False,
    )
    return store


def _sections(store: Path, folder: Path) -> list[str]:
    folder.mkdir(exist_ok=True)
    said: list[str] = []
    table = lambda frame: frame.to_html()  # noqa: E731
    lines = search_sections(store, folder, text=html.escape, table=table, say=said.append)
    assert said and all("drawing its figures" in s for s in said)
    return lines


def test_the_section_of_a_search_with_two_objectives(two_objectives, tmp_path):
    text = "\n".join(_sections(two_objectives, tmp_path))
    assert text.startswith("<h2>Searches</h2>") and "<h3>Search deadline</h3>" in text
    for name in ("search-1-history.png", "search-1-history-2.png", "search-1-front.png"):
        assert (tmp_path / name).is_file() and f"src='{name}'" in text, name
    assert (tmp_path / "search-1-importance.png").is_file() or "No importance figure" in text
    assert "sim_time (lower is better), updates_per_hour (higher is better)" in text
    trials = pd.read_csv(tmp_path / "search-1-trials.csv")
    assert len(trials) == 6 and {"policy.seconds", "policy.count", "state"} <= set(trials)
    saved = json.loads((two_objectives / "tuning" / "deadline.json").read_text())
    best = best_table(saved)
    assert len(best) == len(saved["best"]) >= 1
    assert list(best.columns[:3]) == ["trial", "policy.seconds", "policy.count"]
    assert "sim_time (seeds 0)" in best.columns and "updates_per_hour (fresh seeds 5)" in best
    assert best["round_time_q0.95<=5"].str.startswith("met (").all()


def test_an_outcome_that_cannot_be_read_is_said(two_objectives, tmp_path):
    store = tmp_path / "store"
    (store / "tuning").mkdir(parents=True)
    (store / "tuning" / "broken.json").write_text("{not json")
    (store / "tuning" / "wrong.json").write_text(json.dumps({"objectives": 3}))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = "\n".join(_sections(store, tmp_path / "r"))
    said = [str(w.message) for w in caught if issubclass(w.category, ReportWarning)]
    assert len(said) == 2 and all("the report leaves it out" in s for s in said), said
    assert "tuning/broken.json cannot be read (JSONDecodeError" in text
    assert "tuning/wrong.json cannot be read" in text
    assert search_sections(tmp_path, tmp_path, text=str, table=str, say=print) == []


def test_a_choice_of_none_reads_as_a_label_of_its_own(tmp_path):
    """pandas leaves missing values out of groups: the report reads a label None as text."""
    from simfl.report.choose import choose

    store = tmp_path / "store"
    simfl.tune(
        BASE,
        {"policy.count": tuning.Choice([None, 3])},
        tuning.SimTime(),
        seeds=range(1),
        fresh_seeds=(),
        trials=4,
        store=store,
        executor="inline",
        progress=False,
    )
    runs = simfl.Store(store).runs()
    assert runs["policy.count"].isna().any()  # what the store's frame holds
    chosen = choose(simfl.Store(store), by="policy.count")
    assert set(chosen.series) == {"None", "3"}
    assert set(chosen.frame["policy.count"]) == {"None", "3"}
    assert np.isin(chosen.done["policy.count"], ["None", "3"]).all()
