"""The policy examples of docs/writing-a-policy.md run, and do what the page says."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists, policies

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def _example(name: str) -> dict[str, Any]:
    return runpy.run_path(str(DOCS / "examples" / f"{name}.py"))


def test_the_page_shows_the_example_files_verbatim():
    page = (DOCS / "writing-a-policy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    for name in ("skip_late", "async_weighting"):
        code = (DOCS / "examples" / f"{name}.py").read_text()
        assert code in blocks, f"docs/examples/{name}.py is not shown verbatim in the page"
        assert len(code.splitlines()) < 40


def _two_tiers() -> Fleet:
    fast = Profile(compute=dists.Exponential(mean=0.5))
    slow = Profile(compute=dists.Exponential(mean=4.0))
    return Fleet.tiers((30, fast), (10, slow))


def test_skip_late_leaves_out_devices_late_in_two_of_their_last_three_rounds():
    skip_late = _example("skip_late")["SkipLate"]
    sc = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=_two_tiers(),
        policy=skip_late(seconds=1.5, count=10),
        rounds=60,
        seed=3,
    )
    res = simfl.run(sc, progress=False)
    jobs = res.clients.sort_values(["round", "device"])
    # replay the rule from the records alone: a device may be selected only while fewer than
    # two of its last three recorded jobs were late
    late: dict[int, list[bool]] = {}
    for _, cohort in jobs.groupby("round"):
        for device in cohort["device"].tolist():
            assert sum(late.get(device, [])[-3:]) < 2, f"device {device} should have been skipped"
        for device, status in zip(
            cohort["device"].tolist(), cohort["status"].tolist(), strict=True
        ):
            late.setdefault(device, []).append(status == "late")
    skipped = {d for d, seen in late.items() if sum(seen[-3:]) >= 2}
    assert skipped, "with a 1.5 s deadline some slow devices (mean 4 s) must be skipped"
    # against a plain deadline on the same fleet and seed, fewer jobs end late
    plain = simfl.run(
        Scenario(
            task=None,
            algorithm=algorithms.TimingOnly(),
            fleet=_two_tiers(),
            policy=policies.Deadline(1.5, count=10),
            rounds=60,
            seed=3,
        ),
        progress=False,
    )
    assert (res.clients["status"] == "late").sum() < (plain.clients["status"] == "late").sum()
    assert res.meta["stop_reason"] == "rounds" and len(res.rounds) == 60
