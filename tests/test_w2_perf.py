"""W2 on simfl (``analysis/perf/w2_simfl.py``) at a tiny size: the peers' JSON row from any
directory, the peers' data split and initial weights. Skipped where the peers' ``w2_data.py``
or the Fashion-MNIST files are not installed. (No timing is asserted.)"""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "analysis" / "perf" / "w2_simfl.py"
PEERS = Path(os.environ.get("SIMFL_PEERS", ROOT.parent / "shared" / "peers"))
DATA = Path("/usr/share/datasets/fashion-mnist")

needs_w2 = pytest.mark.skipif(
    not (PEERS / "w2_data.py").is_file() or not DATA.is_dir(),
    reason=f"the peers' w2_data.py ({PEERS}) or Fashion-MNIST ({DATA}) is not installed",
)


@needs_w2
def test_w2_simfl_prints_the_peers_row_from_another_directory(tmp_path):
    flags = "--rounds 2 --clients 100 --per-round 2 --seed 1 --eval-every 2"
    env = {**os.environ, "SIMFL_PEERS": str(PEERS)}
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *flags.split()],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env=env,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert row["framework"].startswith("simfl ")
    assert (row["rounds"], row["clients"], row["per_round"]) == (2, 100, 2)
    assert row["torch_threads"] == 1 and row["device"] == "cpu"
    assert 0.0 <= row["final_test_acc"] <= 1.0 and row["virtual_clock_end"] > 0
    assert "simfl W2: 2 rounds" in done.stderr
    assert list(tmp_path.iterdir()) == []


@needs_w2
def test_w2_uses_the_peers_split_and_initial_model():
    torch = pytest.importorskip("torch")
    import simfl

    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import w2_simfl
    finally:
        sys.path.remove(str(SCRIPT.parent))
    wd = w2_simfl.peers_data()
    a = w2_simfl.parse(["--clients", "10", "--seed", "1"])
    sc = w2_simfl.scenario(a)
    streams = simfl.Streams(7)  # simfl's streams do not matter
    data = sc.task.build(10, streams)
    parts = wd.shard_partition(data.dataset.y_train, 10, 2, 1)
    for mine, theirs in zip(data.train_parts, parts, strict=True):
        assert np.array_equal(mine, np.sort(theirs))
    assert all(p.size == 10000 for p in data.test_parts)  # global test accuracy
    x = data.dataset.x_train
    assert x.shape == (60000, 1, 28, 28) and x.dtype == np.float32
    assert float(x[:, :, 0, 0].min()) == pytest.approx(-0.2860 / 0.3530, rel=1e-6)  # peers' norm
    # the first shared parameters are the peers' make_model(seed), forward pass and all
    state = sc.algorithm.initial_state(data, streams)
    model = wd.make_model(1)
    x = data.x_test[:64]
    with torch.no_grad():
        ours = data.network.forward(state.shared, x[None])[0]
        torch.testing.assert_close(ours, model(x), rtol=1e-5, atol=1e-6)


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.mark.parametrize(
    ("simfl_s", "acc", "passed"),
    [(0.30, 0.63, True), (0.40, 0.63, False), (0.30, 0.70, False)],
)
def test_w2_row_against_the_fastest_recorded_peer(tmp_path, monkeypatch, simfl_s, acc, passed):
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        import neural_suite
    finally:
        sys.path.remove(str(SCRIPT.parent))
    (tmp_path / "results").mkdir()
    peers = [
        {"peer": "flgo", "host_wall_s_per_round": 0.8, "final_test_acc": 0.6545},
        {"peer": "pfl", "host_wall_s_per_round": 0.76, "final_test_acc": 0.6524},
        {"peer": "pfl", "host_wall_s_per_round": 0.72, "final_test_acc": 0.6524},
        {"peer": "flower", "host_wall_s_per_round": 1.1, "final_test_acc": 0.5954},
        {"peer": "simfl", "host_wall_s_per_round": 9.0, "final_test_acc": 0.1},  # ignored
    ]
    write_rows(tmp_path / "results" / "w2_runs.jsonl", peers)
    ours = [{"peer": "simfl", "host_wall_s_per_round": simfl_s, "final_test_acc": acc}]
    write_rows(tmp_path / "ours.jsonl", ours)
    monkeypatch.setattr(neural_suite, "PEERS", tmp_path)
    monkeypatch.setattr(neural_suite, "RUNS", tmp_path / "ours.jsonl")
    monkeypatch.setattr(neural_suite, "SEEDS", tmp_path / "none.jsonl")
    monkeypatch.setattr(neural_suite, "SIDE", tmp_path / "no-side.jsonl")
    (row,) = neural_suite.w2_rows()
    assert row["baseline"] == pytest.approx(0.74)  # pfl's median, the fastest peer
    # shown to 2 decimals rounded toward missing (``_perf.shown``): 2.4667 reads 2.46
    assert row["ratio"] == pytest.approx(math.floor(0.74 / simfl_s * 100) / 100)
    assert row["passed"] is passed
    assert "pfl" in row["note"] and "not re-measured" in row["note"]
    # side-by-side rows, when there are some, replace both sides of the time ratio; the
    # accuracy spread still takes in the recorded peers
    side = [
        {"peer": "pfl", "host_wall_s_per_round": 0.9, "final_test_acc": 0.6524},
        {"peer": "simfl", "host_wall_s_per_round": 1.8, "final_test_acc": acc},
        {"peer": "pfl", "host_wall_s_per_round": 1.0, "final_test_acc": 0.6524},
        {"peer": "simfl", "host_wall_s_per_round": 2.2, "final_test_acc": acc},
    ]
    write_rows(tmp_path / "side.jsonl", side)
    monkeypatch.setattr(neural_suite, "SIDE", tmp_path / "side.jsonl")
    (row,) = neural_suite.w2_rows()
    assert (row["simfl"], row["baseline"], row["ratio"]) == (2.0, 0.95, round(0.95 / 2.0, 2))
    assert row["passed"] is False and "side by side" in row["note"]
    assert "not re-measured" not in row["note"]
    # with the batching row's LeNet-5: W2's training products a round (10 client-epochs of
    # 600 images) at its batched rate, against the round the goal allows (pfl's / 2)
    lenet = {
        "product GFLOP per client-epoch": 0.68,  # of 300 images: 1.36 for W2's 600
        "samples/client": 300.0,
        "batched product GFLOPS": 20.0,
    }
    (row,) = neural_suite.w2_rows(lenet)
    assert "(13.6 GFLOP a round) take 0.68 s a round at the 20.0 GFLOPS" in row["note"]
    assert f"against the {0.95 / 2:.2f} s a round the goal allows" in row["note"]
