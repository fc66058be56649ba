"""The analysis scripts run end to end at reduced size and write their figures."""

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from simfl import Streams

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))

import queueing_check  # noqa: E402
import srpfl_schedule  # noqa: E402


def quick(script: str, out: Path, *extra: str) -> list[str]:
    """Run an analysis script's quick mode; its stdout lines (one figure at least in ``out``)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "analysis" / script), "--quick", "--out", str(out), *extra],
        capture_output=True,
        text=True,
        check=True,
    )
    figures = list(out.glob("*.png"))
    assert figures and all(f.stat().st_size > 10_000 for f in figures)
    return done.stdout.splitlines()


def numbers(line: str, count: int) -> list[float]:
    """The last ``count`` whitespace-separated fields of a table row, as floats."""
    return [float(v) for v in line.split()[-count:]]


def sd_of_max(dist, n: int) -> float:
    """Standard deviation of the max of n i.i.d. draws: E[M^2] = int 2x (1 - F(x)^n) dx."""
    from scipy import integrate

    def tail(x: float) -> float:
        return 1.0 - float(dist.cdf(x)) ** n

    m1, _ = integrate.quad(tail, 0.0, math.inf, limit=200)
    m2, _ = integrate.quad(lambda x: 2 * x * tail(x), 0.0, math.inf, limit=200)
    return math.sqrt(m2 - m1 * m1)


def test_queueing_check_quick_within_its_standard_errors(tmp_path):
    from simfl import dists

    lines = quick("queueing_check.py", tmp_path)
    laws = {
        "Exp(1)": dists.Exponential(1.0),
        "ShiftedExp(0.5, 1)": dists.ShiftedExponential(0.5, 1.0),
        "LogNormal(0, 0.5)": dists.LogNormal(0.0, 0.5),
        "Pareto(3, 1)": dists.Pareto(3.0, 1.0),
    }
    rounds, checked = 800, 0
    for line in lines:
        if not any(q in line for q in ("mean round", "arrived fraction")):
            continue
        n, simulated, exact, _ = numbers(line, 4)
        n = int(n)
        # each row against its exact value within 3.29 SE (an exact simulator passes with
        # 99.9%), the SE from theory over 800 independent rounds: sd of the max (numerical
        # integral), of the k-th fastest of Exp(1) (sqrt(sum 1/j^2)), or binomial over 20 x 800
        # jobs. SEs here: 0.7-2.5% of the value, so this end-to-end check catches a 5% error
        # in most rows only; the powered checks are in tests/test_queueing.py
        if "wait-all" in line:
            law = next(name for name in laws if name in line)
            se = sd_of_max(laws[law], n) / math.sqrt(rounds)
            assert exact == pytest.approx(queueing_check.expected_max(laws[law], n), abs=1e-4)
        elif "fastest" in line:
            k = n // 4
            se = math.sqrt(sum(1 / j**2 for j in range(n - k + 1, n + 1)) / rounds)
            assert exact == pytest.approx(
                queueing_check.harmonic(n) - queueing_check.harmonic(n - k), abs=1e-4
            )
        else:
            se = math.sqrt(exact * (1 - exact) / (20 * rounds))
        assert abs(simulated - exact) <= 3.29 * se + 5e-5, (line, se)  # + printed rounding
        checked += 1
    assert checked == 13


def test_fedrep_linear_quick_floors(tmp_path):
    lines = quick("fedrep_linear.py", tmp_path)
    rows = {}
    for line in lines:
        if line.split()[:1] == ["FedRep"]:
            _, _, r, init, rounds_to, _, floor, mse, _ = line.split()
            rows[float(r)] = (float(init), float(rounds_to), float(floor), float(mse))
    assert set(rows) == {0.1, 1.0}
    for init, rounds_to, _, mse in rows.values():
        # algorithms.md 1.4 [sim]: from about 0.4 (MoM, n=100) to the floor within ~50 rounds
        assert init == pytest.approx(0.4, abs=0.05) and rounds_to <= 50
        assert mse < 1e-6  # noise variance 1e-6: the fitted model sits at the noise
    # the floor at r=1 is the [sim] reference's 6e-5 (its rounding interval [5.5e-5, 6.5e-5));
    # ours 6.3e-5 (seed 0; 6.07e-5 over 3 seeds, per-seed sd 3.8%)
    assert 5.5e-5 <= rows[1.0][2] < 6.5e-5
    # (that the floor is noise-driven is checked exactly, with power, by the next test; the
    # floor's ratio between r=0.1 and r=1 is printed by the script, against 1/sqrt(r) = 3.16,
    # a first-order prediction only: see the next test's docstring)


@pytest.mark.parametrize("r", [0.1, 1.0])
def test_fedrep_linear_floor_is_linear_in_the_noise(r):
    """Theory: the floor is the noise's, so it scales exactly with the noise std.

    Near B* FedRep's error obeys a recursion linear in the error and in the noise (the
    exact heads and the gradient step are linear in the label noise ``z = noise_std * g``,
    with ``g`` keyed, the same draws at every ``noise_std``); the error is O(1e-4) there, so
    terms of second order change the distance by a relative O(1e-4). With common random
    numbers (same seed, same clients, same draws), doubling ``noise_std`` therefore doubles
    the distance of every round at the floor, and quadrupling it quadruples it. Tolerance:
    a relative 0.5% on the median over 100 rounds of the per-round ratio (its spread over
    rounds is 0.1-0.3%, 5th to 95th percentile, at these sizes), so a 5% error in how the
    floor follows the noise fails with certainty; the ratio is one from theory, not fitted.

    This replaces a one-seed check of the floor's ratio between r=0.1 and r=1 against
    sqrt(10): that prediction is first order only (the stationary second moment with the
    sampled clients' head moment equal to its mean; the fluctuation of 10 sampled heads adds
    a relative O(step / clients) that was not derived) and one seed had a 5.9% SE.
    """
    import dataclasses

    import fedrep_linear

    from simfl import algorithms, run

    distances = {}
    for noise in (1e-3, 2e-3, 4e-3):
        sc = fedrep_linear.scenario(algorithms.FedRep(), 100, r, 150, seed=0)
        sc = dataclasses.replace(sc, task=dataclasses.replace(sc.task, noise_std=noise))
        distances[noise] = run(sc, progress=False).rounds["distance"].to_numpy()[-100:]
    base = distances[1e-3]
    assert base.max() < 1e-3  # at the floor: the last 100 of 150 rounds
    for noise, factor in ((2e-3, 2.0), (4e-3, 4.0)):
        assert np.median(distances[noise] / base) == pytest.approx(factor, rel=0.005)


def test_policy_shootout_quick_numbers(tmp_path):
    lines = quick("policy_shootout.py", tmp_path, "--seeds", "2")
    table = {}
    for line in lines:
        fields = line.split()
        if fields and fields[0] in (
            "wait-all",
            "deadline",
            "adaptive-deadline",
            "fastest-k",
            "over-selection",
            "fedbuff",
            "srpfl",
        ):
            table[fields[0]] = numbers(line, 9)
    assert len(table) == 7
    reached, speedup, lo, hi, final = 0, 5, 6, 7, 8
    for name, row in table.items():
        assert row[reached] == 2 and row[final] <= 1e-3, name  # every policy reaches the target
    assert table["wait-all"][speedup] == table["wait-all"][lo] == table["wait-all"][hi] == 1
    # cutting stragglers pays on this heavy-tailed fleet: the paired bootstrap CI excludes 1
    for name in ("deadline", "adaptive-deadline", "fastest-k", "over-selection", "fedbuff"):
        assert table[name][lo] > 1.5, (name, table[name])
    # waiting for the k fastest of all beats a fixed deadline (seed 0-1: 9.4x vs 2.6x)
    assert table["fastest-k"][lo] > table["deadline"][hi]


def test_srpfl_schedule_quick_numbers(tmp_path):
    lines = quick("srpfl_schedule.py", tmp_path, "--seeds", "2")
    rows = {
        line.split()[0]: numbers(line, 7)
        for line in lines
        if line.split()[:1] in (["srpfl"], ["fedrep-all"])
    }
    srpfl, fedrep = srpfl_schedule.expected_times(20, 5, 5, 15)
    assert rows["srpfl"][3] == pytest.approx(srpfl, abs=5e-4)  # exact, printed to 3 decimals
    assert rows["fedrep-all"][3] == pytest.approx(fedrep, abs=5e-4)
    # the SEs the rule uses: the exact per-seed sds over sqrt(2 seeds)
    sds = srpfl_schedule.expected_sds(20, 5, 5, 15)
    for row, sd in zip(rows.values(), sds, strict=True):
        assert row[5] == pytest.approx(sd / math.sqrt(2), abs=5e-4)
        assert row[6] == pytest.approx((row[0] - row[3]) / row[5], abs=0.01)
    for mean, lo, hi, *_ in rows.values():
        assert lo <= mean <= hi
    # two seeds cannot test the mean (per-seed cv 0.30): the powered check is
    # tests/test_reproductions.py::test_schedule_matches_order_statistics
    assert rows["srpfl"][0] < rows["fedrep-all"][0] / 2


def test_perf_neural_batching_measures_the_same_work():
    pytest.importorskip("torch")
    import perf_neural_batching

    from simfl.neural import MLP, Digits, ImageClassification, Phase, Shards

    task = ImageClassification(Digits(), Shards(2), MLP((64, 32)))
    r = perf_neural_batching.measure(
        task, 3, lambda net: (Phase(net.layer_names, 1),), 1, kernels=True
    )
    shares = {"kernel share", "ceiling", "batched kernels / one-by-one kernels"}
    rates = {"product share", "product GFLOPS", "batched product GFLOPS", "GEMM peak GFLOPS"}
    rates |= {"product GFLOP per client-epoch", "peak ceiling"}
    assert set(r) == {"batched", "one-by-one", "torch loop", "samples/client", *shares, *rates}
    assert all(math.isfinite(v) and v > 0 for v in r.values())
    # the profile finds the step's arithmetic under these operator names (a torch that renamed
    # them would give a share of 0), and the ceiling is its inverse
    assert 0 < r["product share"] < r["kernel share"] < 1
    assert r["ceiling"] == pytest.approx(1 / r["kernel share"])
    data = task.build(100, Streams(0))  # the clients measure() trains
    sizes = [data.train_parts[c].size for c in range(3)]
    assert r["samples/client"] == pytest.approx(np.mean(sizes))
    # the products' operations, exactly: every minibatch is whole (the last one padded, its
    # padding masked out of the loss), so a client computes ceil(n / B) * B rows of 64-64-32-10:
    # forward and weight gradients 2 * in * out per row and layer, input gradients from the
    # second layer on (the images need none)
    batch = perf_neural_batching.DEFAULT_SGD.batch_size
    rows = sum(-(-n // batch) * batch for n in sizes)
    io = [64 * 64, 64 * 32, 32 * 10]
    assert r["product GFLOP per client-epoch"] * 3 * 1e9 == pytest.approx(
        rows * (4 * sum(io) + 2 * sum(io[1:])), rel=1e-12
    )


def test_perf_neural_batching_unequal_clients():
    """The unequal-sizes measurement: its three ways, the masked call's useful share of
    client-steps (from the sizes), and the module switch restored."""
    pytest.importorskip("torch")
    import perf_neural_batching as pnb

    from simfl.neural import MLP, SGD, Digits, ImageClassification, LogNormalSizes, Phase, train

    task = ImageClassification(Digits(), LogNormalSizes(1.0), MLP((16, 8)))
    sgd = SGD(batch_size=20)
    r = pnb.measure_unequal(task, lambda net: (Phase(net.layer_names, 1),), 1, sgd, 2, 4)
    assert set(r) == {"sit-out", "masked", "one-by-one", "useful"}
    assert all(math.isfinite(v) and v > 0 for v in r.values())
    assert train.SIT_OUT is True
    data = task.build(100, Streams(0))
    draw = np.random.default_rng(7)  # the cohorts measure_unequal draws
    steps = np.array(
        [
            [-(-data.train_parts[int(c)].size // 20) for c in draw.choice(100, 4, replace=False)]
            for _ in range(2)
        ]
    )
    assert r["useful"] == pytest.approx(steps.sum() / (steps.max(axis=1) * 4).sum(), rel=1e-12)
    assert r["useful"] < 1  # log-normal sizes: unequal steps


def test_perf_neural_batching_counts_the_same_products_batched_and_one_by_one():
    """The batched call does the cohort's products at one client's shapes: the same count.

    Also the pooling kernel's operators (simfl's own ``pool2_relu``) count as arithmetic.
    """
    torch = pytest.importorskip("torch")
    import perf_neural_batching as pnb
    from torch.profiler import profile

    from simfl.neural import CNN, Digits, ImageClassification, Phase, Shards
    from simfl.neural.kernels import pool2_relu
    from simfl.neural.train import DEFAULT_SGD, train_cohort

    task = ImageClassification(Digits(), Shards(2), CNN(channels=(4, 4), hidden=(16, 8), kernel=1))
    data = task.build(20, Streams(0))
    net = data.network
    params = net.init(torch.Generator().manual_seed(0))
    phases = (Phase(net.layer_names, 1),)
    clients = np.arange(3)

    def train(cohorts: list[np.ndarray]) -> None:
        for co in cohorts:
            rngs = [np.random.default_rng([1, int(c)]) for c in co]
            index = data.train_index(co)
            train_cohort(net, params, data.x_train, data.y_train, index, phases, DEFAULT_SGD, rngs)

    one = pnb.flops(lambda: train([clients[c : c + 1] for c in clients]))
    assert one > 0
    assert pnb.flops(lambda: train([clients])) == one

    x = torch.randn(4, 3, 6, 6, requires_grad=True)
    with profile() as prof:
        pool2_relu(x, True).sum().backward()
    bookkeeping = {"aten::" + n for n in ("view", "as_strided", "slice", "empty", "reshape")}
    bookkeeping |= {"aten::" + n for n in ("empty_strided", "empty_like", "ones_like", "to")}
    bookkeeping |= {"aten::" + n for n in ("_to_copy", "copy_", "arange", "item", "detach")}
    bookkeeping |= {"aten::" + n for n in ("_local_scalar_dense", "is_nonzero", "expand")}
    bookkeeping |= {"aten::" + n for n in ("__and__", "__xor__", "resize_", "unsqueeze")}
    ops = {e.key for e in prof.key_averages() if e.key.startswith("aten::")}
    assert ops - bookkeeping <= pnb.ARITHMETIC, ops - bookkeeping - pnb.ARITHMETIC


def test_server_link_reduced():
    import server_link

    frame = server_link.experiment((5e3, math.inf), seeds=1, rounds=80)
    t = server_link.summarize(frame).set_index(["policy", "capacity"])["mean_time"]
    # a slow shared cloud link makes flat rounds slower; edge aggregation relieves it
    assert t[("flat (wait-all)", 5e3)] > 2 * t[("flat (wait-all)", math.inf)]
    assert t[("edge aggregation", 5e3)] < t[("flat (wait-all)", 5e3)] / 2
    assert t[("edge aggregation", math.inf)] == pytest.approx(
        t[("flat (wait-all)", math.inf)], rel=0.05
    )
