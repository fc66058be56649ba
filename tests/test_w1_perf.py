"""The W1 peer-benchmark scripts: simfl's side prints the peers' JSON row from any directory;
the ratio checker passes, fails and refuses as it should. (No timing is asserted.)"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PERF = ROOT / "analysis" / "perf"
KEYS = {
    "framework",
    "rounds",
    "clients",
    "per_round",
    "setup_s",
    "host_wall_s",
    "host_wall_s_per_round",
    "final_test_acc",
    "virtual_clock_end",
    "peak_rss_mb",
}


def test_w1_simfl_prints_the_peers_row_from_another_directory(tmp_path):
    flags = "--rounds 4 --clients 12 --per-round 3 --seed 1 --samples 30 --test-samples 50"
    done = subprocess.run(
        [sys.executable, str(PERF / "w1_simfl.py"), *flags.split(), "--eval-every", "2"],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
    )
    row = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(row) == KEYS
    assert row["framework"].startswith("simfl ")
    assert (row["rounds"], row["clients"], row["per_round"]) == (4, 12, 3)
    assert 0.0 <= row["final_test_acc"] <= 1.0 and row["virtual_clock_end"] > 0
    assert "simfl W1: 4 rounds" in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written in the working directory


def rows(simfl_s=0.002, simfl_acc=0.655, flower_acc=0.66, peers=("simfl", "flgo", "flower")):
    base = {
        "simfl": {"host_wall_s_per_round": simfl_s, "final_test_acc": simfl_acc},
        "flgo": {"host_wall_s_per_round": 0.088, "final_test_acc": 0.654},
        "flower": {
            "host_wall_s_per_round": 0.44,
            "steady_s_per_round": 0.29,
            "final_test_acc": flower_acc,
        },
    }
    return [dict(base[p], peer=p, scale="base", repeat=r) for r in range(3) for p in peers]


@pytest.mark.parametrize(
    ("kw", "code", "said"),
    [
        ({}, 0, "all W1 targets met"),
        ({"simfl_s": 0.005}, 1, "flgo ratio 17.6x < 20x"),
        ({"flower_acc": 0.64}, 1, "|acc - flower acc| = 1.50 > 1.0 points"),
        ({"peers": ("simfl", "flgo")}, 2, "no rows for flower"),
    ],
)
def test_w1_ratios_exit_codes(tmp_path, capsys, kw, code, said):
    sys.path.insert(0, str(PERF))
    try:
        import w1_ratios
    finally:
        sys.path.remove(str(PERF))
    runs = tmp_path / "runs.jsonl"
    runs.write_text("".join(json.dumps(r) + "\n" for r in rows(**kw)))
    assert w1_ratios.main([str(runs)]) == code
    out = capsys.readouterr().out
    assert said in out
    if code == 0:
        assert "flgo: 88.0 ms/round -> 44.0x" in out and "rounds 2..R 290.0 ms/round" in out
