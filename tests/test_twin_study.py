"""The fidelity study's analysis (``analysis/twin_fidelity.py``) recovers a server it was given.

Playing the study's twelve twins takes tens of minutes; its analysis does not need them to be
real. Here every "measured" run is ``simfl.run`` with a known :class:`simfl.Server`, dressed
with the columns a twin adds (each message's dispatch and return, each aggregation's seconds),
so the analysis has one right answer: the calibration must find that server, the calibrated
predictions must then be exact, and the free ones must not.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import simfl
from simfl import Results, Server

pytest.importorskip("flwr", reason="the study's app is a Flower app: pip install 'simfl[flower]'")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))
import twin_fidelity

AGGREGATE = 0.25  # seconds per aggregation (the median gap the calibration reads)
MESSAGE = 0.5  # seconds per message; the grid's factor 1.0 times the measured centre


def _measured(sc: simfl.Scenario) -> Results:
    """What a twin would record if the system were exactly ``Server(AGGREGATE, MESSAGE)``."""
    truth = dataclasses.replace(
        sc, server=Server(aggregate_seconds=AGGREGATE, overhead_per_message=MESSAGE)
    )
    res = simfl.run(truth, progress=False)
    c = res.clients
    clients = c.assign(
        dispatch=MESSAGE,
        return_=MESSAGE,
        overrun=0.0,
        planned_download=c["download"],
        planned_compute=c["compute"],
        planned_upload=c["upload"],
    )
    twin = {"aggregation": [AGGREGATE] * len(res.rounds), "scale": 1.0}
    return Results.from_tables(res.rounds, clients, {**res.meta, "twin": twin})


def test_the_study_calibrates_the_server_that_made_its_measurements() -> None:
    runs = {}
    for fleet in twin_fidelity.fleets():
        for policy in twin_fidelity.POLICIES:
            for seed in (0, 1):
                sc = twin_fidelity.scenario(fleet, policy, seed, rounds=3)
                runs[(fleet, policy, seed)] = (sc, _measured(sc))
    # a smaller grid than the study's, around the right answer and on both sides of it
    grid = {"concurrency": (None, 1, 2), "factors": twin_fidelity.FACTORS[10:21]}
    out, paired = twin_fidelity.analyse(runs, k=2, draws=2, grid=grid)

    server = out["server"]
    assert server["aggregate_seconds"] == AGGREGATE and server["concurrency"] is None
    # the grid's factors 0.75, 0.8, ..., 1.25 (of np.linspace(0.25, 1.5, 26)) hold 1.0, up to
    # rounding
    assert server["overhead_per_message"] == pytest.approx(MESSAGE, rel=1e-12)
    cal, free = out["held_out"]["calibrated"], out["held_out"]["free"]
    # calibrated: the same clock with the same costs, so every duration equal up to rounding
    for key in ("round_worst", "job_worst", "ttt_worst"):
        assert cal[key] < 1e-9, key
    # free: every job pays two messages (1 s) that the prediction leaves out
    assert free["round_median"] > 0.05 and free["job_median"] > 0.05
    rk = out["rankings"]["calibrated"]
    assert rk["preserved"] == rk["pairs"] == 2 * 2 * 3 and rk["flipped"] == []
    assert out["overheads"]["dispatch_median"] == MESSAGE
    assert set(paired["prediction"]) == {"free", "calibrated"}
    calibrated = paired[paired["prediction"] == "calibrated"]
    np.testing.assert_allclose(calibrated["predicted"], calibrated["measured"], rtol=1e-9)

    checks, measured = twin_fidelity.checks_text({**out, "config": {**out["config"], "scale": 1}})
    assert "0.0% with a calibrated Server" in measured and "Flower" in checks
    text = twin_fidelity.docs_text({**out, "config": {**out["config"], "scale": 1.0}})
    assert f"of {len(runs)} runs" in text and "| with the calibrated `Server` | 0.0% /" in text
