"""The paper experiments at reduced size: each script's ``--quick`` run, its numbers.

Every script runs end to end (``--quick``), writes its figure and its results file into a
temporary directory, and the numbers in that file are held against the paper's claims or
theory. The runs are seeded, so a pass is reproducible; the margins say how far from the
threshold each quick run sits. The SRPFL round-time check is statistical and sized so that a 5%
error in the simulated round times fails with >= 95% probability.
"""

import itertools
import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "analysis"))

import _common  # noqa: E402

pytest.importorskip("torch")


def quick(script: str, tmp_path: Path) -> dict:
    """Run ``analysis/<script>.py --quick``; its results file (and check its figure)."""
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "analysis" / f"{script}.py"),
            "--quick",
            "--out",
            str(tmp_path),
            "--results",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    figure = tmp_path / f"{script}.png"
    assert figure.stat().st_size > 10_000
    body = json.loads((tmp_path / f"{script}.json").read_text())
    assert body["size"] == "quick"
    for c in body["claims"]:
        assert set(c) == {"paper", "claim", "paper_value", "ours", "status", "why"}
        assert c["status"] in _common.STATUSES and c["paper"] in _common.PAPERS
    return {**body["numbers"], "claims": body["claims"]}


def test_results_file_convention(tmp_path):
    import argparse

    c = _common.claim("SRPFL", "x", "1", "2", "reproduced")
    with pytest.raises(ValueError, match="say why"):
        _common.claim("SRPFL", "x", "1", "2", "qualitative")
    with pytest.raises(ValueError, match="paper must be one of"):
        _common.claim("FedXYZ", "x", "1", "2", "reproduced")
    args = argparse.Namespace(quick=True, out=str(tmp_path / "figs"), results=str(tmp_path))
    path = _common.write_results(
        args, "x", {"b": np.float64(1.5), "a": [math.nan]}, [c], checks="c", measured="m"
    )
    assert path.parent == tmp_path  # a quick run never writes over analysis/results
    text = path.read_text()
    body = json.loads(text)
    assert body["numbers"] == {"a": [None], "b": 1.5}
    assert body["claims"] == [c] and body["size"] == "quick"
    assert text.index('"a"') < text.index('"b"')  # keys sorted


def test_srpfl_round_times_match_order_statistics():
    import srpfl_variants as sv

    # Pool of 20 of 100 Exp(1) clients: the baseline waits for all 20 (E = H_20 = 3.598, sd
    # 1.263), SRPFL's first level for the 10th fastest (E = H_20 - H_10 = 0.669, sd 0.309).
    # Each of the 2000 rounds is an independent draw, so the SE is <= 0.83% of the mean (CV
    # 0.35 and 0.46 over sqrt(2000)); a 5% bias is >= 6 SE away, beyond the 3-SE tolerance
    # with probability > 99%, while a correct simulator fails it with probability 0.3%.
    setting = next(s for s in sv.settings() if s.name == "partial 0.2")
    r = sv.round_times(setting, 2000)
    assert r["theory baseline"] == pytest.approx(3.5977, abs=1e-4)
    assert r["theory stage-0"] == pytest.approx(0.6688, abs=1e-4)
    for key in ("baseline", "stage-0"):
        assert r[f"{key} SE"] < 0.01 * r[f"theory {key}"]
        assert abs(r[key] - r[f"theory {key}"]) < 3 * r[f"{key} SE"], r


def test_expected_kth_matches_harmonic_numbers():
    import srpfl_variants as sv

    ones = np.ones(100)
    assert sv.expected_kth(ones, 100) == pytest.approx(sv.harmonic(100), rel=1e-6)
    assert sv.expected_kth(ones, 10, ct=2.0) == pytest.approx(
        sv.harmonic(100) - sv.harmonic(90) + 2.0, rel=1e-6
    )
    # unequal means: the minimum of Exp with means s_i is Exp with rate sum(1/s_i)
    s = np.array([1.0, 2.0, 50.0])
    assert sv.expected_kth(s, 1) == pytest.approx(1.0 / np.sum(1.0 / s), rel=1e-6)


def test_expected_kth_with_uniform_means_matches_independent_computations():
    """The U[1, 100] theory values, checked without the script's dynamic programme: the mean of
    the slowest of 100 by scipy's quad of ``1 - prod(1 - exp(-t / s_i))``, and the mean of the
    10th fastest by a numpy Monte Carlo of the order statistic alone (1e5 rounds: SE 0.1% of
    it, tolerance 4 SE, so a 1% error in the integral, ~10 SE away, fails)."""
    import srpfl_variants as sv
    from scipy import integrate

    setting = next(s for s in sv.settings() if s.uniform_means)
    scales = np.asarray(sv.fleet(setting, sv.FLEET_SEED).scale, dtype=float)
    exact, _ = integrate.quad(
        lambda t: 1.0 - np.prod(-np.expm1(-t / scales)), 0.0, np.inf, limit=500
    )
    assert sv.expected_kth(scales, scales.size) == pytest.approx(exact, rel=1e-5)
    draws = np.random.default_rng(7).exponential(size=(100_000, scales.size)) * scales
    tenth = np.partition(draws, sv.N0 - 1, axis=1)[:, sv.N0 - 1]
    se = tenth.std(ddof=1) / math.sqrt(tenth.size)
    assert se < 1.2e-3 * tenth.mean()
    assert abs(sv.expected_kth(scales, sv.N0) - tenth.mean()) < 4 * se


def test_srpfl_uniform_means_compute_draws_match_order_statistics():
    """The simulator's own compute draws of the U[1, 100] fleet (the fleet the theory integrates
    over), redrawn every round: the slowest of 100 (E = 361.2, sd ~107) and the 10th fastest
    (E = 3.299, sd ~1.1) over 20,000 rounds of scenario seed 1 have SEs of 0.21% and 0.24%, so a
    5% error is >= 20 SE away while a correct simulator passes the 3-SE tolerance with
    probability 99.7% per check. (The engine's round time is the slowest arrival: that is
    checked through run() by test_srpfl_round_times_match_order_statistics.)"""
    import srpfl_variants as sv

    from simfl import Streams

    setting = next(s for s in sv.settings() if s.uniform_means)
    fleet = sv.fleet(setting, sv.FLEET_SEED).with_redraw("round")
    rounds = 20_000
    devices = np.broadcast_to(np.arange(fleet.size), (rounds, fleet.size))
    keys = np.broadcast_to(np.arange(rounds)[:, None], devices.shape)
    draws = fleet.compute_draws(devices, round=keys, stage=0, streams=Streams(1))
    theory = sv.theory_round_times(setting, sv.FLEET_SEED)
    stats = (draws.max(axis=1), np.partition(draws, sv.N0 - 1, axis=1)[:, sv.N0 - 1])
    for values, expected in zip(stats, theory, strict=True):
        se = values.std(ddof=1) / math.sqrt(rounds)
        assert se < sv.POWER_SE * expected
        assert abs(values.mean() - expected) < sv.TOLERANCE_Z * se, (values.mean(), expected, se)


def test_timing_status_is_powered_and_within_tolerance():
    import srpfl_variants as sv

    ok = {"theory baseline": 100.0, "theory stage-0": 10.0, "baseline SE": 0.5}
    ok |= {"stage-0 SE": 0.05, "baseline z": -2.9, "stage-0 z": 1.0}
    assert sv.timing_status(ok) == ("reproduced", "")
    assert sv.timing_status({**ok, "baseline z": -3.0})[0] == "not reproduced"
    weak = sv.timing_status({**ok, "stage-0 SE": 0.2})
    assert weak[0] == "qualitative" and "not powered" in weak[1]


def test_srpfl_variants_quick(tmp_path):
    body = quick("srpfl_variants", tmp_path)
    lin = {(r["setting"], r["target"]): r for r in body["linear"]}
    # every run reached both targets (3 seeds each)
    assert all(r["reached"] == "3/3" for r in lin.values())
    # U[1, 100] means: the slow clients are very slow, SRPFL is far ahead (CI well above 1)
    assert lin[("U[1,100] means", "early")]["ci_low"] > 5
    assert lin[("U[1,100] means", "floor")]["ci_low"] > 3
    # partial participation: only the first stage (10 of 20) is cheaper; still ahead early
    assert lin[("partial 0.2", "early")]["ci_low"] > 1.0
    # the benefit shrinks as C.T. grows: the 95% CIs are ordered without overlap
    cts = [lin[(f"C.T.={ct:g}", "early")] for ct in (0, 1, 10, 100)]
    for a, b in itertools.pairwise(cts):
        assert a["ci_low"] > b["ci_high"], (a, b)
    assert cts[-1]["speedup"] < 1.1  # with C.T. = 100 per round, hardly any gain left
    # FLANP (FedAvg under SRPFL) ahead of FedAvg at equal time: mean accuracy over the budget
    # higher by more than 3 binomial SEs of an accuracy on the test images (~240 for 1,200)
    img = body["images"]
    se = math.sqrt(0.25 / 240)
    assert img["auc_flanp"] - img["auc_fedavg"] > 3 * se
    first = img["equal_time"][0]
    assert first["FLANP - FedAvg"] > 3 * se


def test_feddar_k_alpha_quick(tmp_path):
    body = quick("feddar_k_alpha", tmp_path)
    rows = {(r["alpha"], r["k"]): r for r in body["table"]}
    assert set(rows) == {(0.1, 2), (10.0, 2), (0.5, 1), (0.5, 2)}
    for r in rows.values():
        # FedDAR-SA far below every baseline for every alpha and k (paper: ~4 orders)
        assert r["best baseline / SA"] > 1e3, r
        # the baselines sit on their closed-form floors (B* known): FedAvg within 10% of the
        # best single model, FedRep between its floor and twice it
        assert r["FedAvg"] == pytest.approx(r["best single model"], rel=0.1)
        assert r["best client heads"] * 0.9 < r["FedRep"] < 2 * r["best client heads"]
    # FedRep's floor falls as alpha -> 0 (single-domain clients); SA stays far below both
    assert rows[(0.1, 2)]["FedRep"] < rows[(10.0, 2)]["FedRep"] / 4
    assert max(rows[(0.1, 2)]["FedDAR-SA"], rows[(10.0, 2)]["FedDAR-SA"]) < 1e-3
    # FedDAR-SA's step is chosen per k on the tuning grid (quick grid), from the tuning seed
    import feddar_k_alpha

    assert set(body["sa_step_by_k"]) == {"1", "2"} and body["tuning_seed"] == 1000
    assert set(body["sa_step_by_k"].values()) <= set(feddar_k_alpha.QUICK_STEP_GRID)


def test_feddar_k_alpha_full_size_steps_follow_the_rule():
    """The full-size file: the per-k rule gives feddar.py's step 1.0 back at k = 2 (the rule is
    the one the k = 2 step came from), and a step of the grid at every k."""
    import feddar_k_alpha

    body = json.loads((_common.RESULTS / "feddar_k_alpha.json").read_text())
    steps = body["numbers"]["sa_step_by_k"]
    assert steps["2"] == 1.0
    assert set(steps) == {"1", "2", "4"} and set(steps.values()) <= set(feddar_k_alpha.STEP_GRID)


def test_fedmavg_iid_m_quick(tmp_path):
    body = quick("fedmavg_iid_m", tmp_path)
    e = {r["split"]: r for r in body["effects"]}
    # m matters little under i.i.d. data and much more under non-i.i.d. data (quick run:
    # 0.018 vs 0.096 in mean log10 objective)
    assert e["noniid"]["spread over m"] > 3 * e["iid"]["spread over m"]
    # under non-i.i.d. data more communicating clients converge faster
    assert e["noniid"]["m=20"] < e["noniid"]["m=1"] - 0.05
    # a constant Q2 = 20 hurts under non-i.i.d. data, hardly under i.i.d. data
    assert e["noniid"]["Q2=20 - diminishing"] > 0.01
    assert e["noniid"]["Q2=20 - diminishing"] > 5 * abs(e["iid"]["Q2=20 - diminishing"])


def test_lg_rotated_quick(tmp_path):
    body = quick("lg_rotated", tmp_path)
    a = {r["method"]: r for r in body["accuracy"]}
    fedavg, lg = a["FedAvg"], a["LG-FedAvg"]
    # binomial SE of an accuracy near 0.5 on the regular test pool (360 digits): 0.026
    se = math.sqrt(0.25 / 360)
    # FedAvg forgets regular digits once the new device trained it alone (paper 32%) ...
    assert fedavg["regular before"] - fedavg["regular after"] > 0.2
    # ... LG-FedAvg keeps them (paper 97%): it loses less than 3 SE and ends > 3 SE above
    assert lg["regular before"] - lg["regular after"] < 3 * se
    assert lg["regular after"] - fedavg["regular after"] > 3 * se
    # both learn the rotated digits on the new device (paper 92% / 93%)
    assert fedavg["rotated after"] > 0.8 and lg["rotated after"] > 0.7


def test_feddar_rate_quick(tmp_path):
    """FedDAR Appendix A at reduced size (3 seeds, m = 10, 80 rounds): geometric descent."""
    import feddar_rate

    body = quick("feddar_rate", tmp_path)
    (row,) = body["table"]
    assert row["m"] == 10 and row["seeds"] == 3 and row["all contract"]
    # linear, not sublinear: a C/t^p descent over T >= 8 rounds has a second-half/first-half
    # log-rate ratio ln 2 / ln(T/2) <= 0.5 (0.26 at the ~30 rounds here); geometric gives 1
    assert row["second/first min"] > feddar_rate.LINEAR_RATIO, row
    assert row["min R2"] > 0.99, row  # a log-linear fit explains the descent
    assert row["floor (median)"] < 1e-3  # noise std 1e-3: the descent ends near the noise


def test_feddar_rate_descent_tells_linear_from_sublinear():
    """The check's statistic on exact curves: a geometric descent gives a half-rate ratio of 1,
    a 1/t one the ln 2 / ln(T/2) of the threshold's derivation (below 0.5)."""
    import feddar_rate

    t = np.arange(151, dtype=np.float64)
    floor = 1e-4
    geometric = np.maximum(0.4 * 0.85**t, floor)
    d = feddar_rate.descent(geometric)
    assert d["factor"] == pytest.approx(0.85) and d["second/first"] == pytest.approx(1.0)
    assert d["R2"] == pytest.approx(1.0)
    # C / t^2 down to a floor of 4e-5: 30x the floor at t = 17, the floor from t = 99 on
    sublinear = np.maximum(0.4 / (1 + t) ** 2, 4e-5)
    d = feddar_rate.descent(sublinear)
    assert d["descent rounds"] == 18 and d["floor"] == pytest.approx(4e-5)
    # endpoints would give ln(19/10) / ln(10) = 0.28; the fitted halves give about the same
    assert 0 < d["second/first"] < feddar_rate.LINEAR_RATIO


def test_feddar_rate_full_size_file():
    """The full-size file (40 seeds, m = 10 and 20): its claim follows the check's rule."""
    import feddar_rate

    body = json.loads((_common.RESULTS / "feddar_rate.json").read_text())
    assert body["size"] == "full"
    rows = body["numbers"]["table"]
    assert [r["m"] for r in rows] == [10, 20] and all(r["seeds"] == 40 for r in rows)
    linear = all(
        r["all contract"] and r["second/first min"] > feddar_rate.LINEAR_RATIO for r in rows
    )
    (c,) = body["claims"]
    assert c["status"] == ("qualitative" if linear else "not reproduced")
