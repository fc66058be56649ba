"""W3 on simfl (``analysis/perf/w3_simfl.py``) at a tiny size: the peers' JSON row from any
directory, the peers' data split and W3's shared initial ResNet; the comparison's summary on
made-up rows; ``w3_model`` is the docs example's ResNet. Skipped where the peers' ``w2_data.py``
or the Fashion-MNIST files are not installed. (No timing is asserted.)"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "analysis" / "perf"
SCRIPT = PERF / "w3_simfl.py"
DOCS_EXAMPLE = ROOT / "docs" / "examples" / "resnet_fmnist.py"
PEERS = Path(os.environ.get("SIMFL_PEERS", ROOT.parent / "shared" / "peers"))
DATA = Path("/usr/share/datasets/fashion-mnist")

needs_w3 = pytest.mark.skipif(
    not (PEERS / "w2_data.py").is_file() or not DATA.is_dir(),
    reason=f"the peers' w2_data.py ({PEERS}) or Fashion-MNIST ({DATA}) is not installed",
)


def _import(name):
    sys.path.insert(0, str(PERF))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(PERF))


@needs_w3
def test_w3_simfl_prints_the_peers_row_from_another_directory(tmp_path):
    flags = "--rounds 2 --clients 100 --per-round 2 --seed 1 --eval-every 2 --test-limit 200"
    env = {**os.environ, "SIMFL_PEERS": str(PEERS)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *flags.split(), "--trainer", "loop"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["framework"].startswith("simfl ") and row["trainer"] == "loop"
    assert (row["rounds"], row["clients"], row["per_round"]) == (2, 100, 2)
    assert row["torch_threads"] == 1 and row["device"] == "cpu"
    assert 0.0 <= row["final_test_acc"] <= 1.0 and row["virtual_clock_end"] > 0
    # the peers' round numbers: the initial model is round 0, the last evaluation round 2
    assert sorted(row["acc_by_round"]) == ["0", "2"]
    assert row["acc_by_round"]["2"] == row["final_test_acc"]
    assert "simfl W3: 2 rounds" in done.stderr
    assert list(tmp_path.iterdir()) == []


@needs_w3
def test_w3_uses_the_peers_split_and_the_shared_initial_resnet():
    torch = pytest.importorskip("torch")
    import simfl

    w3_simfl = _import("w3_simfl")
    w3_model = _import("w3_model")
    wd = w3_simfl.w2_simfl.peers_data()
    a = w3_simfl.parse(["--clients", "10", "--seed", "1", "--test-limit", "64"])
    sc = w3_simfl.scenario(a)
    assert sc.algorithm.optimizer.momentum == 0.0 and sc.algorithm.optimizer.weight_decay == 0.0
    assert (sc.algorithm.optimizer.lr, sc.algorithm.optimizer.batch_size) == (0.05, 50)
    streams = simfl.Streams(7)  # simfl's streams do not matter
    data = sc.task.build(10, streams)
    parts = wd.shard_partition(data.dataset.y_train, 10, 2, 1)
    for mine, theirs in zip(data.train_parts, parts, strict=True):
        assert np.array_equal(mine, np.sort(theirs))
    assert all(p.size == 64 for p in data.test_parts)  # every client: the (limited) test set
    assert data.network.n_params() == 35242 and data.network.buffer_names == ()
    # the first shared parameters are w3_model.make_model(seed)'s, forward pass and all
    state = sc.algorithm.initial_state(data, streams)
    model = w3_model.make_model(1)
    x = data.x_test[:16]
    with torch.no_grad():
        ours = data.network.forward(state.shared, x[None])[0]
        torch.testing.assert_close(ours, model(x), rtol=0, atol=0)


def _classes(path):
    """Source text of the classes ``Block`` and ``ResNet`` defined in ``path``."""
    text = path.read_text()
    tree = ast.parse(text)
    return {
        node.name: ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, ast.ClassDef) and node.name in ("Block", "ResNet")
    }


@pytest.mark.skipif(not DOCS_EXAMPLE.is_file(), reason=f"{DOCS_EXAMPLE} is not in this checkout")
def test_w3_model_is_the_docs_examples_resnet():
    ours = _classes(PERF / "w3_model.py")
    assert set(ours) == {"Block", "ResNet"}
    assert ours == _classes(DOCS_EXAMPLE)


def test_w3_model_seeded_init_leaves_the_callers_rng_alone():
    torch = pytest.importorskip("torch")
    w3_model = _import("w3_model")
    before = torch.random.get_rng_state()
    a, b = w3_model.make_model(3), w3_model.make_model(3)
    assert torch.equal(torch.random.get_rng_state(), before)
    for (n, p), (m, q) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert n == m and torch.equal(p, q)
    assert not torch.equal(a.fc.weight, w3_model.make_model(4).fc.weight)


def test_w3_summary_ratios_and_the_accuracy_spread():
    w3_compare = _import("w3_compare")

    def row(peer, seed, wall, cpu, acc):
        return {
            "peer": peer,
            "framework": peer,
            "seed": seed,
            "rounds": 20,
            "host_wall_s_per_round": wall,
            "host_cpu_s_per_round": cpu,
            "final_test_acc": acc,
            "setup_s": 1.0,
            "peak_rss_mb": 100.0,
            "load1_before": 1.0,
        }

    rows = [
        row("pfl", 0, 4.0, 3.0, 0.60),
        row("pfl", 1, 5.0, 3.2, 0.66),
        row("pfl", 2, 6.0, 3.1, 0.63),
        row("simfl-loop", 0, 3.0, 2.9, 0.65),
        row("simfl-loop", 1, 4.0, 3.0, 0.58),
        row("simfl-loop", 2, 9.0, 3.1, 0.64),
        row("simfl-cohort", 0, 5.0, 4.5, 0.65),
        row("simfl-cohort", 1, 6.0, 4.2, 0.58),
        row("simfl-cohort", 2, 8.0, 4.4, 0.70),
    ]
    s = w3_compare.summarize(rows)
    assert s["peers"]["pfl"]["host_wall_s_per_round"] == 5.0  # medians over the seeds
    assert s["peers"]["simfl-loop"]["host_cpu_s_per_round"] == 3.0
    assert s["peers"]["simfl-loop"]["host_wall_s_per_round_range"] == [3.0, 9.0]
    assert s["ratios"]["simfl-loop/pfl host_wall_s_per_round"] == 0.8  # medians 4.0 / 5.0
    assert s["ratios"]["simfl-loop/pfl host_cpu_s_per_round"] == round(3.0 / 3.1, 4)
    assert s["ratios"]["simfl-cohort/simfl-loop host_cpu_s_per_round"] == round(4.4 / 3.0, 4)
    # paired: the median of 3/4, 4/5, 9/6 (each seed's two runs)
    paired = s["paired_ratios"]["simfl-loop/pfl host_wall_s_per_round"]
    assert paired == {"median": 0.8, "by_seed": {"0": 0.75, "1": 0.8, "2": 1.5}}
    # ratios and pairs only over the seeds both variants ran
    more = [*rows, row("pfl", 3, 1.0, 1.0, 0.62)]
    assert w3_compare.summarize(more)["ratios"] == s["ratios"]
    acc = s["accuracy"]
    assert (acc["pfl_min"], acc["pfl_max"], acc["pfl_spread"]) == (0.60, 0.66, 0.06)
    # loop: 0.65 - 0.60 = 0.05 and 0.64 - 0.63 = 0.01 are within 0.06, 0.58 - 0.66 is not
    assert acc["simfl-loop"]["minus_pfl_by_seed"] == {"0": 0.05, "1": -0.08, "2": 0.01}
    assert acc["simfl-loop"]["within_spread_by_seed"] == {"0": True, "1": False, "2": True}
    assert acc["simfl-cohort"]["inside_pfl_range_by_seed"] == {"0": True, "1": False, "2": False}
    assert s["acceptance"] == {
        "simfl (loop, the CPU default) at least as fast per round (host wall, paired)": True,
        "simfl (loop) accuracy within pfl's seed-to-seed spread at every seed": False,
    }
