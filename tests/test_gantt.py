"""``plots.gantt``: which devices it draws, the edge-cloud row, the axis and the legend."""

from __future__ import annotations

import matplotlib
import numpy as np
import pytest
from matplotlib.colors import to_rgba

from simfl import Fleet, Results, Scenario, algorithms, dists, plots, policies, run
from simfl.fleet import Profile
from simfl.network import Network

matplotlib.use("Agg")


def _timing(fleet: Fleet, policy: policies.Policy, rounds: int = 3, **kw) -> Results:
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(**kw.pop("algorithm", {})),
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        **kw,
    )
    return run(sc, progress=False)


@pytest.fixture(scope="module")
def tiered():
    """Wait-all on 60 fast devices and a slow tier of 10, last (ids 60-69), as Fleet.tiers does."""
    fleet = Fleet.tiers(
        (60, Profile(dists.Exponential(0.5), name="fast")),
        (10, Profile(dists.Exponential(8.0), name="slow")),
    )
    return _timing(fleet, policies.WaitAll())


def _rows(ax) -> list[str]:
    """The device ids drawn (row labels read "id" or "id (group)" when groups are recorded)."""
    return [t.get_text().split(" ")[0] for t in ax.get_yticklabels()]


def _bars(ax, colour=None) -> list[tuple[float, float, float]]:
    """(row, start, end) of the bars drawn (of one face colour if given)."""
    out = []
    for p in ax.patches:
        if colour is None or np.allclose(p.get_facecolor()[:3], to_rgba(colour)[:3]):
            out.append((p.get_y() + p.get_height() / 2, p.get_x(), p.get_x() + p.get_width()))
    return out


def test_tiered_wait_all_shows_the_slow_tier(tiered):
    ax = plots.gantt(tiered, max_devices=20)  # no late or dropped job: the slowest devices
    drawn = [int(t) for t in _rows(ax)]
    assert len(drawn) == 20 and set(range(60, 70)) <= set(drawn)
    # the slow tier's jobs end each round: a drawn bar ends at every aggregation
    ends = [end for _, _, end in _bars(ax)]
    for t in tiered.rounds["time"]:
        assert min(abs(e - t) for e in ends) < 1e-9
    assert ax.get_xlim()[0] == 0.0
    # an int asks for the lowest ids (the old default): they all end early
    low = plots.gantt(tiered, devices=20)
    assert [int(t) for t in _rows(low)] == list(range(20))
    first_round = tiered.rounds["time"].iloc[0]
    assert max(end for _, start, end in _bars(low) if start < first_round) < first_round / 2


def test_deadline_stragglers_all_appear():
    fleet = Fleet.homogeneous(60, dists.Exponential(1.0), dropout_rate=0.05)
    res = _timing(fleet, policies.Deadline(1.5, count=20))
    jobs = res.clients[res.clients["round"] < 3]
    late = jobs[jobs["status"] == "late"]
    stragglers = set(jobs.loc[jobs["status"].isin(["late", "dropped"]), "device"])
    assert len(late) >= 5 and len(stragglers) >= 5
    ax = plots.gantt(res)  # default: the stragglers
    assert {int(t) for t in _rows(ax)} == stragglers
    assert plots.gantt_devices(res) == sorted(stragglers)
    # every late job is drawn, outlined in red (timing only: one compute bar per job)
    red = [p for p in ax.patches if np.allclose(p.get_edgecolor()[:3], (1.0, 0.0, 0.0))]
    assert len(red) == len(late)
    # a cap keeps the devices with the most late or dropped jobs
    worst = jobs[jobs["status"].isin(["late", "dropped"])].groupby("device").size().max()
    capped = plots.gantt_devices(res, devices="stragglers", max_devices=2)
    assert len(capped) == 2
    counts = jobs[jobs["device"].isin(capped) & jobs["status"].isin(["late", "dropped"])]
    assert counts.groupby("device").size().max() == worst


def test_edge_rounds_draw_the_edge_cloud_phases():
    # as in test_hierarchical: the edge fetches the model (1 s), serves its two devices (2 s
    # down, 1 s compute, 2 s up), forwards one aggregate of 108 B at 100 B/s (1.08 s)
    fleet = Fleet.homogeneous(
        4, compute=dists.Constant(1.0), bandwidth_down=50.0, bandwidth_up=50.0
    )
    net = Network.hierarchical(np.array([0, 0, 1, 1]), edge_up=100.0, edge_down=100.0)
    res = _timing(
        fleet,
        policies.EdgeAggregation(),
        rounds=2,
        network=net,
        algorithm={"bytes_down": 100, "bytes_up": 100},
    )
    ax = plots.gantt(res, range(2))
    assert _rows(ax) == ["edge-cloud", "0", "1", "2", "3"]
    edge = sorted((round(a, 9), round(b, 9)) for _, a, b in _bars(ax, plots.EDGE_COLOR))
    assert edge == [(0.0, 1.0), (6.0, 7.08), (7.08, 8.08), (13.08, 14.16)]
    assert ax.get_xlim()[0] == 0.0  # from the run's start, not the first device job (1 s)
    assert "edge-cloud transfers" in {t.get_text() for t in ax.get_legend().get_texts()}


def test_legend_is_inside_the_figure(tiered, tmp_path):
    ax = plots.gantt(tiered, max_devices=10)
    fig = ax.figure
    fig.savefig(tmp_path / "g.png")  # no bbox_inches="tight"
    box = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert box.x0 >= 0 and box.y0 >= 0
    assert box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height


def test_tiers_sample_every_group(tiered):
    # the devices' groups as the results record them (names, and runs of equal indices)
    groups = {"names": ["fast", "slow"], "runs": [[0, 60], [1, 10]]}
    labelled = Results(tiered.rounds, tiered.clients, {**tiered.meta, "groups": groups})
    ax = plots.gantt(labelled, devices="tiers", max_devices=8)
    rows = [t.get_text() for t in ax.get_yticklabels()]  # "id (group)"
    assert len(rows) == 8
    assert sum(r.endswith("(fast)") for r in rows) == sum(r.endswith("(slow)") for r in rows) == 4
    # each tier's sample runs from its fastest to its slowest device
    busy = (
        (tiered.clients["t_end"] - tiered.clients["t_start"])
        .groupby(tiered.clients["device"])
        .sum()
    )
    drawn = {int(r.split()[0]) for r in rows}
    assert int(busy.loc[60:69].idxmax()) in drawn and int(busy.loc[60:69].idxmin()) in drawn
    assert int(busy.loc[:59].idxmax()) in drawn and int(busy.loc[:59].idxmin()) in drawn
    one = {**tiered.meta, "groups": {"names": ["all"], "runs": [[0, 70]]}}
    for meta in ({k: v for k, v in tiered.meta.items() if k != "groups"}, one):
        with pytest.raises(ValueError, match="needs the devices' group labels"):
            plots.gantt(Results(tiered.rounds, tiered.clients, meta), devices="tiers")


def test_bad_devices_are_named(tiered):
    with pytest.raises(ValueError, match="gantt devices must be one of"):
        plots.gantt(tiered, devices="fastest")
    with pytest.raises(ValueError, match=r"ids in \[0, 69\]"):
        plots.gantt(tiered, devices=[3, 70])
    with pytest.raises(ValueError, match=">= 1"):
        plots.gantt(tiered, devices=0)
    ax = plots.gantt(tiered, devices=[65, 2])
    assert _rows(ax) == ["65", "2"]
