"""The server's own costs (``Scenario(server=Server(...))``) on the clock, exactly.

Every duration below is a sum of binary fractions (powers of two times small integers), so the
simulated times are exact and the tests compare them with ``==``: a round is the server's send,
the transfers, the compute, the server's receipt and its aggregation, to the last bit. A free
server (``Server()``, every cost zero) is no server at all: the frames equal those of
``server=None`` bit for bit, whatever the policy family and the playback.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

import simfl
from simfl import Fleet, Scenario, Server, algorithms, dists, policies, sweeps, tasks
from simfl.cli import load_scenarios, main
from simfl.engine.playbacks import PLAYBACKS
from simfl.fleet import Availability
from simfl.network import Network
from simfl.sweeps.fingerprint import canonical, fingerprint
from simfl.sweeps.worker import scenario_fingerprint


def _fleet(
    computes: list[float], *, down: float = 1024.0, up: float = 512.0, latency: float = 0.25
) -> Fleet:
    """One device per compute time (``Constant``), private links of the given speeds."""
    return Fleet(
        compute=[dists.Constant(c) for c in computes],
        group=list(range(len(computes))),
        bandwidth_down=down,
        bandwidth_up=up,
        latency=latency,
    )


def _run(sc: Scenario, **kwargs: Any) -> simfl.Results:
    return simfl.run(sc, progress=False, on_error="raise", **kwargs)


def _timing(bytes_down: int = 1024, bytes_up: int = 512) -> algorithms.TimingOnly:
    return algorithms.TimingOnly(bytes_down=bytes_down, bytes_up=bytes_up)


# ----------------------------------------------------------------- the Server itself
def test_server_validates_each_field_by_name():
    for field in ("aggregate_seconds", "per_update", "overhead_per_message", "per_byte"):
        for bad in (-1.0, math.nan, math.inf, "1", True, None):
            with pytest.raises(ValueError, match=rf"Server\.{field}"):
                Server(**{field: bad})
    for bad in (0, -2, 1.5, True, "2"):
        with pytest.raises(ValueError, match=r"Server\.concurrency must be an integer in \[1"):
            Server(concurrency=bad)
    with pytest.raises(TypeError):
        Server(0.5)  # type: ignore[misc]  # keyword-only
    sc = dict(task=None, algorithm=_timing(), fleet=_fleet([1.0]), policy=policies.WaitAll())
    with pytest.raises(ValueError, match=r"Scenario\.server must be a simfl\.Server or None"):
        Scenario(**sc, rounds=1, server={"aggregate_seconds": 1.0})  # type: ignore[arg-type]
    s = Server(aggregate_seconds=1, per_update=np.float32(0.5), concurrency=np.int64(3))
    assert type(s.aggregate_seconds) is float and type(s.concurrency) is int
    assert Server().free and Server(concurrency=1).free and not Server(per_byte=1e-9).free
    assert s.aggregation_seconds(0) == 0.0 and s.aggregation_seconds(4) == 3.0
    assert Server(overhead_per_message=0.25, per_byte=0.5).message_seconds(3) == 1.75


def test_fingerprints_leave_out_a_missing_server():
    base = Scenario(
        task=None,
        algorithm=_timing(),
        fleet=_fleet([1.0, 2.0]),
        policy=policies.WaitAll(),
        rounds=2,
    )
    assert '"server"' not in canonical(base)  # scenarios without one keep their fingerprints
    costly = dataclasses.replace(base, server=Server(aggregate_seconds=1.0))
    assert fingerprint(costly) != fingerprint(base)
    assert fingerprint(costly) == fingerprint(
        dataclasses.replace(base, server=Server(aggregate_seconds=1.0))
    )
    assert fingerprint(dataclasses.replace(base, server=Server())) != fingerprint(base)
    assert "server=None" in repr(base)
    # the run ids of stores: the scenario's fields but its seed, as before the server existed
    before = {
        f.name: getattr(base, f.name)
        for f in dataclasses.fields(base)
        if f.name not in ("seed", "server")
    }
    assert scenario_fingerprint(base) == fingerprint({"scenario": "Scenario", **before})
    assert scenario_fingerprint(costly) != scenario_fingerprint(base)


# ----------------------------------------------------------------- synchronous rounds
def test_a_wait_all_round_is_send_transfer_compute_receipt_and_aggregation_exactly():
    # send 0.25 + 1024 * 2**-10 = 1.25; download 0.25 + 1024 / 1024 = 1.25; compute 2 or 3;
    # upload 0.25 + 512 / 512 = 1.25; receipt 0.25 + 512 * 2**-10 = 0.75;
    # aggregation 0.5 + 0.125 * 3 = 0.875 (concurrency unbounded: nothing waits)
    server = Server(
        aggregate_seconds=0.5, per_update=0.125, overhead_per_message=0.25, per_byte=2.0**-10
    )
    sc = Scenario(
        task=None,
        algorithm=_timing(),
        fleet=_fleet([2.0, 2.0, 3.0]),
        policy=policies.WaitAll(),
        rounds=3,
        server=server,
    )
    res = _run(sc)
    assert res.meta["playback"] == "reference"
    round_seconds = 1.25 + 1.25 + 3.0 + 1.25 + 0.75 + 0.875
    assert res.rounds["duration"].tolist() == [round_seconds] * 3
    assert res.rounds["t_start"].tolist() == [0.0, round_seconds, 2 * round_seconds]
    assert res.rounds["time"].tolist() == [round_seconds, 2 * round_seconds, 3 * round_seconds]
    c = res.clients
    assert (c["status"] == "arrived").all()
    # the device's own stages stay the device's; the server's share is t_end - t_start - them
    assert c["download"].tolist() == [1.25] * 9 and c["upload"].tolist() == [1.25] * 9
    assert c["compute"].tolist() == [2.0, 2.0, 3.0] * 3
    assert (c["t_end"] - c["t_start"]).tolist() == [6.5, 6.5, 7.5] * 3
    assert c["bytes_down"].tolist() == [1024.0] * 9 and c["bytes_up"].tolist() == [512.0] * 9
    assert res.meta["server"] == {
        "messages_sent": 9,
        "messages_received": 9,
        "message_seconds": 9 * (1.25 + 0.75),
        "queue_seconds": 0.0,
        "aggregations": 3,
        "aggregation_seconds": 3 * 0.875,
    }
    assert "server     9 sent, 9 received (18 s handling, 0 s queued), 3 aggregations" in (
        res.summary()
    )
    # the same round without the server's costs: exactly the costs less
    free = _run(dataclasses.replace(sc, server=None))
    assert free.meta["playback"] == "planned" and "server" not in free.meta
    assert free.rounds["duration"].tolist() == [round_seconds - 1.25 - 0.75 - 0.875] * 3


def test_one_message_at_a_time_queues_the_sends_and_the_receipts():
    # zero-byte payloads, no latency: a message is its overhead, 0.25 s; 4 jobs of 2 s
    server = Server(overhead_per_message=0.25, concurrency=1)
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=_fleet([2.0] * 4, latency=0.0),
        policy=policies.WaitAll(),
        rounds=1,
        server=server,
    )
    res = _run(sc)
    c = res.clients.sort_values("device")
    # job k's download starts after k + 1 handled sends, at 0.25 (k + 1); its upload ends 2 s
    # later and its receipt takes the one slot for 0.25 s, right after the previous one's
    starts = 0.25 * np.arange(1, 5)
    assert c["t_end"].tolist() == (starts + 2.0 + 0.25).tolist()
    assert c["compute"].tolist() == [2.0] * 4  # waiting for the model is not busy time
    assert res.rounds["time"].tolist() == [3.25]
    assert res.meta["server"]["queue_seconds"] == 0.0 + 0.25 + 0.5 + 0.75
    assert res.meta["server"]["aggregations"] == 0  # no aggregation cost given

    # a receipt longer than the spacing of the uploads: the receipts queue too (and a send
    # waits for nothing that is not a message)
    slow = dataclasses.replace(
        sc, algorithm=_timing(0, 1024), fleet=_fleet([2.0] * 4, latency=0.0, up=math.inf)
    )
    slow = dataclasses.replace(
        slow, server=Server(overhead_per_message=0.25, per_byte=2.0**-12, concurrency=1)
    )
    res = _run(slow)
    c = res.clients.sort_values("device")
    # uploads end at 2.25, 2.5, 2.75, 3.0; each receipt takes 0.5 s, one after the other
    assert c["t_end"].tolist() == [2.75, 3.25, 3.75, 4.25]

    # two slots: the sends go two by two
    two = dataclasses.replace(sc, server=Server(overhead_per_message=0.25, concurrency=2))
    c = _run(two).clients.sort_values("device")
    assert c["t_end"].tolist() == [2.5, 2.5, 2.75, 2.75]


def test_a_deadline_counts_the_receipt_an_update_handled_after_it_is_late():
    # receipts only (nothing sent down): 1024 bytes at 2**-10 s each = 1 s; uploads 1 s
    server = Server(per_byte=2.0**-10, aggregate_seconds=0.25)
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 1024),
        fleet=_fleet([0.5, 1.25], latency=0.0, up=1024.0),
        policy=policies.Deadline(3.0),
        rounds=1,
        server=server,
    )
    res = _run(sc)
    c = res.clients.sort_values("device")
    # device 0: upload ends at 1.5, handled at 2.5 (in time); device 1: upload ends at 2.25,
    # before the deadline, but the server is done with it at 3.25, after: late
    assert c["status"].tolist() == ["arrived", "late"]
    assert c["t_end"].tolist() == [2.5, 3.0]
    assert c["upload"].tolist() == [1.0, 1.0] and c["bytes_up"].tolist() == [1024.0, 1024.0]
    assert res.rounds["n_late"].tolist() == [1]
    assert res.rounds["time"].tolist() == [3.0 + 0.25 + 0.0]  # the deadline, then 1 update
    assert res.meta["server"]["messages_received"] == 1  # the late one's was dropped
    # with a free server the late update would have been in time
    free = _run(dataclasses.replace(sc, server=None))
    assert free.clients["status"].tolist() == ["arrived", "arrived"]


def test_fastest_k_closes_at_the_kth_handled_update_and_drops_the_rest():
    server = Server(per_byte=2.0**-10, concurrency=1)  # each receipt 1 s, one at a time
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 1024),
        fleet=_fleet([0.5, 0.75, 1.0], latency=0.0, up=1024.0),
        policy=policies.FastestK(2, overcommit=0.5),
        rounds=1,
        server=server,
    )
    res = _run(sc)
    c = res.clients.sort_values("device")
    # uploads end at 1.5, 1.75, 2.0; receipts 1.5-2.5, 2.5-3.5, then the third's is cancelled
    assert c["status"].tolist() == ["arrived", "arrived", "cancelled"]
    assert c["t_end"].tolist() == [2.5, 3.5, 3.5]
    assert res.rounds["time"].tolist() == [3.5]
    assert res.meta["server"]["messages_received"] == 2
    assert res.meta["server"]["queue_seconds"] == 0.75 + 1.5  # two waits, the dropped one's too


def test_max_time_during_an_aggregation_abandons_the_round():
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=_fleet([1.0, 1.0], latency=0.0),
        policy=policies.WaitAll(),
        rounds=5,
        max_time=1.5,
        server=Server(aggregate_seconds=1.0),
    )
    res = _run(sc)
    assert len(res.rounds) == 0 and res.meta["stop_reason"] == "max_time"
    # received, never aggregated: cancelled at their receipt
    assert res.clients["status"].tolist() == ["cancelled", "cancelled"]
    assert res.clients["t_end"].tolist() == [1.0, 1.0]


# ----------------------------------------------------------------- asynchronous runs
def test_fedasync_a_new_version_and_its_jobs_wait_for_the_aggregation():
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=_fleet([1.0, 1.25], latency=0.0),
        policy=policies.FedAsync(concurrency=2),
        rounds=3,
        server=Server(aggregate_seconds=0.5),
    )
    res = _run(sc)
    assert res.meta["playback"] == "reference"
    # device 0 arrives at 1.0: aggregated 1.0-1.5 (version 1 at 1.5); device 1 arrives at 1.25,
    # while the server aggregates: taken up at 1.5, aggregated 1.5-2.0 with staleness 1;
    # device 0's next job starts at 1.5 from version 1, arrives at 2.5, aggregated 2.5-3.0
    assert res.rounds["time"].tolist() == [1.5, 2.0, 3.0]
    assert res.rounds["t_start"].tolist() == [0.0, 1.5, 2.0]
    c = res.clients.sort_values(["t_start", "device"])
    assert c["device"].tolist() == [0, 1, 0, 1]
    assert c["round"].tolist() == [0, 0, 1, 2]  # the version each job started from
    assert c["t_start"].tolist() == [0.0, 0.0, 1.5, 2.0]
    assert c["t_end"].tolist() == [1.0, 1.25, 2.5, 3.0]  # an update's end is its receipt
    assert c["status"].tolist() == ["arrived", "arrived", "arrived", "cancelled"]
    assert c["staleness"].tolist()[:3] == [0.0, 1.0, 1.0]

    free = _run(dataclasses.replace(sc, server=None))
    assert free.rounds["time"].tolist() == [1.0, 1.25, 2.0]


def test_fedbuff_aggregates_the_buffer_for_its_cost_before_the_version_exists():
    server = Server(aggregate_seconds=0.5, per_update=0.25, overhead_per_message=0.125)
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=_fleet([1.0, 1.5], latency=0.0),
        policy=policies.FedBuff(buffer_size=2, concurrency=2),
        rounds=2,
        server=server,
    )
    res = _run(sc)
    # a job is 0.125 (send) + compute + 0.125 (receipt). Device 0 arrives at 1.25 and starts
    # again at once (version 0), device 1 arrives at 1.75: the buffer of 2 is aggregated
    # 1.75-2.75 (0.5 + 2 * 0.25). Device 0's second update arrives at 2.5, meanwhile; at 2.75
    # both devices start from version 1, device 0's third update (4.0) fills the buffer again,
    # aggregated 4.0-5.0; device 1's (4.5) arrives meanwhile and the run ends with it unused
    assert res.rounds["time"].tolist() == [2.75, 5.0]
    assert res.rounds["t_start"].tolist() == [0.0, 2.75]
    c = res.clients.sort_values(["t_start", "device"])
    assert c["device"].tolist() == [0, 1, 0, 0, 1]
    assert c["round"].tolist() == [0, 0, 0, 1, 1]
    assert c["t_start"].tolist() == [0.0, 0.0, 1.25, 2.75, 2.75]
    assert c["t_end"].tolist() == [1.25, 1.75, 2.5, 4.0, 4.5]
    assert c["status"].tolist() == ["arrived"] * 4 + ["cancelled"]
    assert c["staleness"].tolist()[:4] == [0.0, 0.0, 1.0, 0.0]
    assert res.meta["server"]["aggregation_seconds"] == 2.0


# ----------------------------------------------------------------- tiers and edge servers
def test_fedat_tiers_aggregate_one_at_a_time_and_start_again_after_their_aggregation():
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=_fleet([1.0, 1.25], latency=0.0),
        policy=policies.FedAT(tiers=2),
        rounds=4,
        server=Server(aggregate_seconds=0.75),
    )
    res = _run(sc)
    r = res.rounds
    # tier 0 closes at 1.0, aggregated 1.0-1.75; tier 1 closes at 1.25, waits for the server,
    # aggregated 1.75-2.5; tier 0 again 1.75-2.75, aggregated 2.75-3.5; tier 1 2.5-3.75, 3.75-4.5
    assert r["stage"].tolist() == [0, 1, 0, 1]
    assert r["t_start"].tolist() == [0.0, 0.0, 1.75, 2.5]
    assert r["time"].tolist() == [1.75, 2.5, 3.5, 4.5]
    assert res.meta["server"]["aggregations"] == 4


def _edge_scenario(server: Server | None) -> Scenario:
    fleet = Fleet.homogeneous(
        4, compute=dists.Constant(1.0), latency=0.0, bandwidth_down=2048.0, bandwidth_up=1024.0
    )
    return Scenario(
        task=None,
        algorithm=_timing(1024, 1016),
        fleet=fleet,
        policy=policies.EdgeAggregation(),
        network=Network.hierarchical(np.arange(4) % 2, edge_up=1024.0, edge_down=2048.0),
        rounds=2,
        server=server,
    )


def test_edge_rounds_charge_the_cloud_per_edge_server():
    # one send per edge (0.25 s), one receipt per edge aggregate (0.25 s, as it is received),
    # one aggregation of 2 edge aggregates (0.5 + 2 * 0.125); edges play in parallel
    server = Server(aggregate_seconds=0.5, per_update=0.125, overhead_per_message=0.25)
    res = _run(_edge_scenario(server))
    free = _run(_edge_scenario(None))
    assert res.meta["playback"] == free.meta["playback"] == "reference"
    extra = 0.25 + 0.25 + 0.75
    assert res.rounds["duration"].tolist() == (free.rounds["duration"] + extra).tolist()
    assert res.meta["server"]["messages_sent"] == 4 and res.meta["server"]["messages_received"] == 4
    assert res.meta["server"]["aggregations"] == 2
    # the devices' jobs to their edge server owe the cloud nothing
    assert (res.clients["t_end"] - res.clients["t_start"]).tolist() == (
        free.clients["t_end"] - free.clients["t_start"]
    ).tolist()


# ----------------------------------------------------------------- a free server is no server
N = 6


def _family(kind: str, links: str) -> Scenario:
    fleet = Fleet.homogeneous(
        N,
        compute=dists.Empirical([0.5, 1.0, 1.0, 2.0]),
        latency=0.05,
        dropout_rate=0.05,
        bandwidth_down=4e4,
        bandwidth_up=1e4,
    )
    if links == "pause":
        fleet = fleet.with_availability(
            Availability([[(0.0, 2.0 + i % 3), (4.0 + i % 2, 60.0)] for i in range(N)]), "pause"
        )
    network = {
        "private": None,
        "pause": None,
        "star": Network.star(server_up=2e4, server_down=8e4),
        "hier": Network.hierarchical(np.arange(N) % 2, edge_up=1.5e4, server_up=2.5e4),
    }[links]
    policy: Any = {
        "waitall": policies.WaitAll(count=4),
        "deadline": policies.Deadline(1.5, count=4),
        "fastestk": policies.FastestK(2, overcommit=0.6),
        "fedat": policies.FedAT(tiers=2, count=2),
        "edge": policies.EdgeAggregation(edge_deadline=3.0),
        "fedbuff": policies.FedBuff(buffer_size=2, concurrency=3),
        "fedasync": policies.FedAsync(concurrency=3, max_staleness=1),
    }[kind]
    learning = kind in ("fedasync", "waitall")
    return Scenario(
        task=tasks.LinearRepresentation(d=6, k=2, samples_per_client=5, test_samples=20)
        if learning
        else None,
        algorithm=algorithms.FedAvg() if learning else _timing(2000, 2000),
        fleet=fleet,
        policy=policy,
        rounds=5,
        network=network,
        seed=3,
    )


FAMILIES = [
    ("waitall", "private"),
    ("deadline", "pause"),
    ("fastestk", "star"),
    ("fedat", "private"),
    ("edge", "hier"),
    ("fedbuff", "private"),
    ("fedasync", "private"),
]


@pytest.mark.parametrize(("kind", "links"), FAMILIES)
def test_a_free_server_gives_the_frames_of_none_bit_for_bit(kind: str, links: str):
    sc = _family(kind, links)
    none = _run(sc)
    for server in (Server(), Server(concurrency=1)):
        free = _run(dataclasses.replace(sc, server=server))
        assert free.meta["playback"] == none.meta["playback"]
        assert "server" not in free.meta
        pd.testing.assert_frame_equal(free.rounds, none.rounds, check_exact=True)
        pd.testing.assert_frame_equal(free.clients, none.clients, check_exact=True)


@pytest.mark.parametrize(("kind", "links"), FAMILIES)
def test_server_costs_play_on_the_reference_and_cost_time_in_every_family(kind: str, links: str):
    sc = _family(kind, links)
    server = Server(
        aggregate_seconds=0.1, per_update=0.01, overhead_per_message=0.01, concurrency=2
    )
    res = _run(dataclasses.replace(sc, server=server))
    assert res.meta["playback"] == "reference" and res.meta["status"] == "ok"
    assert res.meta["server"]["aggregations"] >= 1
    assert res.meta["server"]["messages_sent"] >= 1
    if kind != "edge":  # every arrived update was sent and received by the server
        arrived = res.clients[res.clients["status"] == "arrived"]
        busy = arrived["download"] + arrived["compute"] + arrived["upload"]
        assert (arrived["t_end"] - arrived["t_start"] - busy >= 0.02 - 1e-12).all()
    # nothing depends on how the run is played: the reference either way
    again = _run(dataclasses.replace(sc, server=server), batched=False)
    pd.testing.assert_frame_equal(again.clients, res.clients, check_exact=True)


def test_the_playback_table_says_a_server_with_costs_plays_on_the_reference():
    *fast, (last, _, description) = PLAYBACKS
    assert last.name == "reference" and "server" in description
    assert all("free server" in d for _, _, d in fast)


def test_the_docs_example_runs_as_the_page_says():
    page = (Path(__file__).resolve().parents[1] / "docs" / "scenarios.md").read_text()
    block = re.search(r"## The server's own costs\n\n.*?```python\n(.*?)```", page, re.S)
    assert block is not None
    namespace: dict[str, Any] = {}
    exec(compile(block.group(1), "docs/scenarios.md", "exec"), namespace)  # asserts inside
    res = namespace["res"]
    assert res.meta["server"]["queue_seconds"] == 3 * (1.25 + 2.5 + 3.75)


def test_a_job_ending_while_the_server_aggregates_keeps_its_end_when_the_run_stops():
    # device 0's update (at 1.0) is aggregated 1.0-3.0; device 1 goes offline at 2.0 (its job
    # aborted, dropped) meanwhile; the run ends at 2.5, during the aggregation
    fleet = _fleet([1.0, 5.0], latency=0.0).with_availability(
        Availability([[(0.0, math.inf)], [(0.0, 2.0), (50.0, math.inf)]]), "abort"
    )
    sc = Scenario(
        task=None,
        algorithm=_timing(0, 0),
        fleet=fleet,
        policy=policies.FedAsync(concurrency=2),
        rounds=3,
        max_time=2.5,
        server=Server(aggregate_seconds=2.0),
    )
    res = _run(sc)
    assert len(res.rounds) == 0 and res.meta["stop_reason"] == "max_time"
    c = res.clients.sort_values("device")
    assert c["status"].tolist() == ["cancelled", "dropped"]  # received but never aggregated
    assert c["t_end"].tolist() == [1.0, 2.0]


SCENARIO_FILE = """
from simfl import Fleet, Scenario, Server, algorithms, dists, policies

SCENARIO = Scenario(
    name="costly-server",
    task=None,
    algorithm=algorithms.TimingOnly(bytes_down=1024, bytes_up=512),
    fleet=Fleet.homogeneous(3, compute=dists.Exponential(1.0), bandwidth_down=1e4),
    policy=policies.Deadline(4.0),
    rounds=4,
    server=Server(aggregate_seconds=0.5, overhead_per_message=0.1, concurrency=2),
)
"""


def _scenario_file(folder: Path) -> Path:
    path = folder / "costly.py"
    path.write_text(SCENARIO_FILE)
    return path


def test_a_scenario_file_with_a_server_runs_from_the_command_line_and_saves(tmp_path, capsys):
    path = _scenario_file(tmp_path)
    out = tmp_path / "out"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 0
    assert "server     12 sent" in capsys.readouterr().out
    saved = simfl.Results.load(out)
    direct = _run(load_scenarios(path)["costly-server"])
    pd.testing.assert_frame_equal(saved.rounds, direct.rounds, check_exact=True)
    pd.testing.assert_frame_equal(saved.clients, direct.clients, check_exact=True)
    assert saved.meta["server"] == direct.meta["server"]
    assert saved.meta["playback"] == "reference"


def test_a_sweep_stores_runs_with_and_without_a_server_apart(tmp_path):
    base = load_scenarios(_scenario_file(tmp_path))["costly-server"]
    cases = sweeps.grid(base, server={"none": None, "costly": Server(aggregate_seconds=0.5)})
    out = simfl.sweep(cases, store=tmp_path / "s", executor="inline", progress=False)
    assert len(set(out.run_ids)) == 2 and not out.failed
    store = simfl.Store(tmp_path / "s")
    none, costly = (store.results(run_id) for run_id in out.run_ids)
    assert "server" not in none.meta and costly.meta["server"]["aggregations"] == 4
    assert (costly.rounds["duration"] > none.rounds["duration"]).all()
