"""analysis/neural_baselines.py at reduced size: every baseline learns, the personalised ones
beat FedAvg on 2-class clients (FedRep Table 1's pattern), and the results file follows the
shared convention (size, claims with paper values and statuses), written outside
analysis/results."""

import json
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import neural_baselines as nb  # noqa: E402

from simfl.neural import Digits  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

STATUSES = {"reproduced", "qualitative", "not reproduced", "not attempted"}


def test_quick_table_and_results_file(tmp_path):
    # the quick setting: 20 clients with 2 digit classes each, 5 per round, 20 rounds (each
    # client takes part about 5 times), 2 seeds
    q = nb.QUICK
    frame = nb.experiment(
        Digits(),
        n=q["n"],
        fraction=q["fraction"],
        rounds=q["rounds"],
        seeds=(0, 1),
        model=nb.QUICK_MLP,
    )
    tab = nb.table(frame, q["rounds"])
    assert list(tab.index) == [a.name for a in nb.methods()]
    assert (tab["seeds"] == 2).all()
    acc = tab["mean"]
    # every method learns: a 10-way classifier starts near chance (10%); each client sees
    # only 2 classes, so even the global models must clear 2x chance
    assert (acc > 2 * nb.CHANCE).all(), acc
    # FedRep Table 1: personalised methods well above FedAvg on few-class clients
    for method in ("FedRep", "Ditto", "PerFedAvg", "HF-MAML"):
        assert acc[method] > acc["FedAvg"] + 10, acc
    # fine-tuning the head turns SCAFFOLD's global model into a personalised one
    assert acc["SCAFFOLD+FT"] > acc["SCAFFOLD"] + 10, acc

    content = nb.results(tab, "quick", q["n"], q["fraction"], q["rounds"], nb.CHANCE)
    path = nb.write(content, tmp_path)
    saved = json.loads(path.read_text())
    assert saved["size"] == "quick" and path.parent == tmp_path
    assert saved["numbers"]["accuracy"]["FedRep"]["mean"] == pytest.approx(acc["FedRep"])
    for claim in saved["claims"]:
        assert set(claim) == {"paper", "claim", "paper_value", "ours", "status", "why"}
        assert claim["status"] in STATUSES and claim["paper"] in {"FedRep", "SRPFL"}
    femnist = [c for c in saved["claims"] if c["claim"].startswith("Table 1 (FEMNIST)")]
    assert {c["paper_value"] for c in femnist} >= {"68.28%", "70.74%", "71.51%", "66.18%"}


def test_quick_run_refuses_to_overwrite_the_full_results(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["neural_baselines.py", "--quick"])
    with pytest.raises(SystemExit, match="--results"):
        nb.main()
