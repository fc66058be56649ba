"""FedRep Table 1 pattern at reduced size (full size: analysis/neural_table1.py): FedRep and
FedPer well above FedAvg, FedAvg+FT close to FedRep, Local-only close behind."""

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import neural_table1  # noqa: E402

from simfl.neural import Digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def test_reduced_table1_ordering():
    # the full run's mechanics at a smaller size: S=2 shards, FedRep's MLP, FedRep 10 head + 1
    # body epoch and 1 epoch for the others, and about 10 participations per client (30
    # clients, r=0.2, T=50) on scikit-learn's 8x8 digits; two seeds averaged
    rounds = 50
    algorithms = [
        a
        for a in neural_table1.methods()
        if a.name in ("FedAvg", "FedAvg+FT", "Local", "FedPer", "FedRep")
    ]
    frame = neural_table1.experiment(
        {"digits": Digits()},
        n=30,
        fraction=0.2,
        rounds=rounds,
        seeds=(0, 1),
        algorithms=algorithms,
    )
    table = neural_table1.table(frame, rounds)
    claims = neural_table1.claims(table).loc["digits"]
    assert claims["well above FedAvg (>= 10)"], table
    assert claims["FT close (<= 3)"], table
    assert claims["Local close behind (0..10)"], table
    assert table.loc["FedRep", "digits"] > 90
