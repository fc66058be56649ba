"""SRPFL wrapping FedRep and LG-FedAvg, and LG-FedAvg's bytes, at reduced size (full size:
analysis/neural_srpfl.py and analysis/neural_lg_bytes.py)."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import neural_lg_bytes  # noqa: E402
import neural_srpfl  # noqa: E402

from simfl.neural import MLP, MNIST, Digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


# 50 clients, 2,000 MNIST digits, the 5 fastest first, doubling every 5 rounds; the baseline
# waits for all 50; both get the baseline's simulated time for 20 rounds
DATA = MNIST(limit=2000)
SETTING = {"n": 50, "n0": 5, "tau": 5, "rounds": 20, "model": MLP((64, 32))}


def check_at_least_as_accurate(frame, early_gain):
    table = neural_srpfl.equal_time_table(frame, points=8)
    auc = neural_srpfl.auc(frame)
    n_test = DATA.load().y_test.size
    for alg, t in table.groupby("algorithm"):
        # ahead early, and never behind by more than two standard errors of an accuracy
        # estimate on the n_test test images (both plateau at the same level late)
        p = t["baseline"].to_numpy()
        noise = 2 * np.sqrt(p * (1 - p) / n_test)
        assert (t["SRPFL - baseline"].to_numpy() >= -noise).all(), t
        assert t["SRPFL - baseline"].iloc[:4].mean() > early_gain, t
        assert auc.loc[alg, f"{alg}-SRPFL"] > auc.loc[alg, alg], auc
    tta = neural_srpfl.time_to_accuracy(frame, (0.95,))
    assert (tta["speedup"] > 1.0).all(), tta  # SRPFL reaches 95% of the final accuracy sooner
    # SRPFL ran more (cheaper) rounds in the same simulated time
    rounds = frame.groupby("label")["round"].max()
    for alg in table["algorithm"].unique():
        assert rounds[f"{alg}-SRPFL"] > rounds[alg]


def test_srpfl_with_the_srpfl_codes_fine_tuning_evaluation():
    # the default protocol: each client fine-tunes its head 10 epochs from the average first
    fedrep = {"FedRep": neural_srpfl.pairs(10)["FedRep"]}
    frame = neural_srpfl.experiment(DATA, fedrep, seeds=(0,), **SETTING)
    check_at_least_as_accurate(frame, early_gain=0.05)


def test_srpfl_with_each_clients_own_model():
    # FedRep and LG-FedAvg scored with each client's own head / local layers; two seeds
    frame = neural_srpfl.experiment(DATA, neural_srpfl.pairs(0), seeds=(0, 1), **SETTING)
    check_at_least_as_accurate(frame, early_gain=0.05)


def test_lg_moves_its_global_share_and_is_more_accurate_at_equal_bytes():
    frame = neural_lg_bytes.experiment(Digits(), n=30, fraction=0.2, rounds=30, seeds=(0,))
    per_round = neural_lg_bytes.per_round(frame)
    # the LG MLP on 8x8 digits: 64-512-256-256-128-10, global = the last three layers
    glob = 256 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10
    total = 64 * 512 + 512 + 512 * 256 + 256 + glob
    assert per_round.loc["LG-FedAvg", "bytes/device/round"] == 2 * 4 * glob
    assert per_round.loc["FedAvg", "bytes/device/round"] == 2 * 4 * total
    assert per_round.loc["LG-FedAvg", "share of FedAvg"] == pytest.approx(glob / total)
    at_bytes = neural_lg_bytes.equal_bytes(frame, points=3)
    assert (at_bytes["LG-FedAvg"] > at_bytes["FedAvg"] + 0.1).all(), at_bytes
    # the savings show in simulated time too: LG's rounds are shorter (1 MB/s links)
    lg = frame[(frame["label"] == "LG-FedAvg") & (frame["round"] >= 0)]
    fedavg = frame[(frame["label"] == "FedAvg") & (frame["round"] >= 0)]
    assert lg["duration"].mean() < 0.5 * fedavg["duration"].mean()
    assert math.isclose(neural_lg_bytes.PAPER_GLOBAL_FRACTION, 0.1579, abs_tol=1e-4)
