"""The examples of docs/writing-a-policy.md and writing-an-algorithm.md run, as they say."""

from __future__ import annotations

import re
import runpy
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import simfl
from simfl import Fleet, Profile, Scenario, algorithms, dists, policies
from simfl.algorithms import Algorithm, base
from simfl.rng import Streams

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


def test_the_learning_async_example_is_shown_and_prints_what_the_page_says(
    capsys: pytest.CaptureFixture[str],
) -> None:
    page = (DOCS / "writing-a-policy.md").read_text()
    path = DOCS / "examples" / "skip_late_async.py"
    assert path.read_text() in re.findall(r"```python\n(.*?)```", page, re.S)
    runpy.run_path(str(path), run_name="__main__")  # its demo: two runs of 300 aggregations
    printed = capsys.readouterr().out
    shown = re.findall(r"```text\n(fedbuff: .*?)```", page, re.S)
    assert shown == [printed]
    # FedBuff keeps the slow tier busy, the example stops using it
    shares = [[int(p) for p in re.findall(r"(\d+)%", line)] for line in printed.splitlines()]
    assert min(shares[0]) >= 10 and shares[1][1] == 0


def test_hinge_weighting_is_fedbuff_with_other_weights():
    hinge_buff = _example("async_weighting")["HingeBuff"]
    pol = hinge_buff(buffer_size=4, concurrency=8, hinge=2, slope=0.5)
    staleness = np.array([0, 2, 3, 6], dtype=np.int64)
    mix = pol.mixer(staleness)
    # 1 up to the hinge, then 1 / (1 + slope (s - hinge)): 1, 1, 1/1.5, 1/3
    np.testing.assert_allclose(mix.weights, [1.0, 1.0, 1 / 1.5, 1 / 3.0], rtol=0, atol=1e-15)
    assert mix.scale == pol.server_lr / 4

    def scenario(policy: policies.Policy) -> Scenario:
        return Scenario(
            task=simfl.tasks.LinearRepresentation(d=10, k=2, samples_per_client=10),
            algorithm=algorithms.FedRep(),
            fleet=Fleet.homogeneous(40, compute=dists.Exponential(1.0)),
            policy=policy,
            rounds=30,
            seed=1,
        )

    # with a hinge beyond any staleness every weight is 1: exactly FedBuff with exponent 0
    flat = simfl.run(
        scenario(hinge_buff(buffer_size=4, concurrency=8, hinge=10**6)), progress=False
    )
    plain = simfl.run(
        scenario(policies.FedBuff(buffer_size=4, concurrency=8, staleness_exponent=0.0)),
        progress=False,
    )
    assert flat.rounds.drop(columns="duration").equals(plain.rounds.drop(columns="duration"))
    assert flat.clients.equals(plain.clients)
    # a low hinge changes the model (stale updates weigh less), not the timing
    hinged = simfl.run(scenario(pol), progress=False)
    assert (hinged.clients["staleness"] > 2).any()
    assert hinged.clients.equals(plain.clients)
    assert not np.array_equal(hinged.rounds["distance"], plain.rounds["distance"])


def _contract_blocks() -> tuple[str, str]:
    """The required and the optional code blocks of docs/writing-an-algorithm.md."""
    page = (DOCS / "writing-an-algorithm.md").read_text()
    required = re.search(r"### Required methods\n.*?```python\n(.*?)```", page, re.S)
    optional = re.search(r"### Optional methods.*?```python\n(.*?)```", page, re.S)
    assert required is not None and optional is not None
    return required.group(1), optional.group(1)


def test_the_documented_algorithm_contract_is_the_abstract_one():
    required, optional = _contract_blocks()
    shown = set(re.findall(r"def (\w+)\(", required))
    assert shown == set(Algorithm.__abstractmethods__)
    # every other method of the contract, and every setting, is shown among the optional ones
    methods = {
        name
        for name, value in vars(Algorithm).items()
        if callable(value) and not name.startswith("_")
    }
    assert set(re.findall(r"def (\w+)\(", optional)) == methods - shown
    settings = {n for n in Algorithm.__annotations__ if not n.startswith("_")}
    assert set(re.findall(r"^    (\w+): ClassVar", optional, re.M)) == settings
    # the docstrings say the same: each abstract method is named, and marked required
    for name in Algorithm.__abstractmethods__:
        assert f":meth:`{name}`" in (Algorithm.__doc__ or "")
        assert re.search(rf"``{name}\(.*\) -> .*`` \(required\)", base.__doc__ or ""), name
    assert "(required)" not in "".join(
        line for line in (base.__doc__ or "").splitlines() if line.startswith("``work(")
    )


def test_the_minimal_algorithm_of_the_docs_instantiates_and_runs():
    page = (DOCS / "writing-an-algorithm.md").read_text()
    code = (DOCS / "examples" / "linear_sgd.py").read_text()
    assert code in re.findall(r"```python\n(.*?)```", page, re.S)
    linear_sgd = _example("linear_sgd")["LinearSGD"]
    task = simfl.tasks.LinearRepresentation(d=8, k=2, samples_per_client=20, fresh_samples=False)
    sc = Scenario(
        task=task,
        algorithm=linear_sgd(step_size=0.5),
        fleet=Fleet.homogeneous(30, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(),
        rounds=100,
        seed=1,
    )
    res = simfl.run(sc, progress=False)
    assert res.ok and len(res.rounds) == 100 and np.isfinite(res.rounds["test_mse"]).all()
    # every client every round on fixed samples: gradient descent on the pooled squared error
    x, y = task.build(30, Streams(1)).train_batch(np.arange(30), 0)
    pooled = np.linalg.lstsq(x.reshape(-1, 8), y.reshape(-1), rcond=None)[0]
    np.testing.assert_allclose(res.state, pooled, rtol=0, atol=1e-12)
    # check() refuses a task the algorithm cannot read, when the scenario is built
    with pytest.raises(ValueError, match=r"Scenario\.task must be a tasks\.LinearRepresentation"):
        Scenario(
            task=None,
            algorithm=linear_sgd(),
            fleet=Fleet.homogeneous(3, compute=dists.Exponential(mean=1.0)),
            policy=policies.WaitAll(),
            rounds=2,
        )
