"""Reduced runs of the FedRep reproductions: Theorem 1's contraction, Fig. 5 (local
epochs) and Table 1 with a CNN. Full size: analysis/fedrep_theorem1.py, analysis/fedrep_fig5.py,
analysis/neural_table1_cnn.py."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ANALYSIS = Path(__file__).resolve().parents[1] / "analysis"
sys.path.insert(0, str(ANALYSIS))

import fedrep_theorem1 as thm  # noqa: E402


def test_subset_extremes_match_brute_force():
    # the exact extremes over all sets of s clients (k = 2) agree with enumerating the sets
    rng = np.random.default_rng(3)
    heads = rng.normal(size=(8, 2))
    s = 3
    eig = [
        np.linalg.eigvalsh(heads[list(i)].T @ heads[list(i)] / s)
        for i in itertools.combinations(range(8), s)
    ]
    lo, hi = thm.subset_extremes(heads, s, grid=1 << 16)
    # the angle grid errs by O((pi / grid)^2 max ||w||^2), about 1e-8 here
    assert lo == pytest.approx(min(e[0] for e in eig), abs=1e-7)
    assert hi == pytest.approx(max(e[1] for e in eig), abs=1e-7)
    assert lo < 0.01 < hi  # a nearly collinear triple exists among 8 random heads


def test_population_rate_full_participation_is_exact():
    # r = 1: log(1 - eta lambda_min(W^T W / n)); with sets of 5 every factor shrinks a vector
    # by between 1 - eta sbar_max^2 and 1 - eta sbar_min^2, so the exponent lies in between
    heads = np.random.default_rng(0).normal(size=(20, 2))
    lam = np.linalg.eigvalsh(heads.T @ heads / 20)[0]
    assert thm.population_rate(heads, 20, 0.1) == pytest.approx(np.log(1 - 0.1 * lam))
    lo, hi = thm.subset_extremes(heads, 5)
    rate = thm.population_rate(heads, 5, 0.1, rounds=4000)
    assert np.log(1 - 0.1 * hi) < rate < np.log(1 - 0.1 * lo)


def test_theorem1_bound_and_rate(tmp_path):
    # the script end to end at reduced size: its printed table, results file and figure
    done = subprocess.run(
        [
            *(sys.executable, str(ANALYSIS / "fedrep_theorem1.py"), "--quick"),
            *("--out", str(tmp_path), "--results", str(tmp_path)),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "measured/population" in done.stdout
    assert (tmp_path / "fedrep_theorem1.png").stat().st_size > 10_000
    results = json.loads((tmp_path / "fedrep_theorem1.json").read_text())
    assert results["size"] == "quick"
    tab = pd.DataFrame(results["numbers"]["table"]).set_index("r")
    # Theorem 1 is an upper bound on the distance: every seed contracts at least as fast
    assert tab["all within bound"].all(), tab
    # r = 1, m = 100: the derived infinite-sample rate log(1 - eta lambda_min) is what FedRep
    # approaches as m grows; at m = 100 it is 0.986 of it, slower (theory: finite m slows the
    # rate), and 23 SE of these 2 seeds from it, so the rule (rate_status: within 3 SE with an
    # SE <= 1%) reports "not reproduced". The former check, within max(3 SE, 0.05), passed it
    # on its 5% floor, which a 5% error passes half the time; the powered check is the
    # full-size file's (test_full_size_rate_check_is_powered)
    full = tab.loc[1.0]
    assert full["measured/population"] < 1, full
    assert thm.rate_status(full["measured/population"], full["ratio SE"])[0] == "not reproduced"
    # and the bound is loose: the measured log-rate is several times the bound's (4.4 here)
    assert full["measured/bound"] > 2
    # partial participation with m = 10: slower than the infinite-sample rate (0.63 of it)
    part = tab.loc[0.25]
    assert 0.3 < part["measured/population"] < 0.95, part
    claims = results["claims"]
    # the bound holds everywhere; the rate claims at this size (m = 100 and 10) are stated misses
    assert [c["status"] for c in claims] == ["reproduced"] * 2 + ["not reproduced"] * 2
    # the bound is the paper's; the infinite-sample rate is derived here ("theory")
    assert [c["paper"] for c in claims] == ["FedRep"] * 2 + ["theory"] * 2
    assert all(c["claim"] and c["ours"] for c in claims)


def test_full_size_rate_check_is_powered():
    """The full-size results file's rate claims follow :func:`fedrep_theorem1.rate_status` at
    the largest m (640), with 40 seeds: each ratio's SE <= 1% (a 5% error >= 5 SE away fails
    with >= 97.7%). Theory (finite m slows the contraction, and the slowdown vanishes as m
    grows) also fixes the shape: at each r the ratio rises with m, and is below 1 by more
    than 3 SE at m = 10 and 40 (slowdowns of 5-25%)."""
    import _common

    body = json.loads((_common.RESULTS / "fedrep_theorem1.json").read_text())
    assert body["size"] == "full"
    tab = pd.DataFrame(body["numbers"]["table"])
    rates = [c for c in body["claims"] if c["paper"] == "theory"]
    assert len(rates) == 2
    for claim, (_, t) in zip(rates, tab.groupby("r", sort=False), strict=True):
        t = t.sort_values("m")
        assert t["m"].tolist() == [10, 40, 160, 640] and (t["seeds"] == 40).all()
        ratios, ses = t["measured/population"].to_numpy(), t["ratio SE"].to_numpy()
        assert (np.diff(ratios) > 0).all(), t
        assert (ratios[:2] + thm.TOLERANCE_Z * ses[:2] < 1).all(), t
        row = t.iloc[-1]
        ratio, se = row["measured/population"], row["ratio SE"]
        assert se <= thm.POWER_SE, row
        assert (claim["status"], claim["why"]) == thm.rate_status(ratio, se)


torch = pytest.importorskip("torch")

import fedrep_fig5  # noqa: E402
import neural_table1_cnn as cnn  # noqa: E402


@pytest.mark.usefixtures("torch_one_thread")
def test_fig5_fedrep_monotone_in_head_epochs():
    size = fedrep_fig5.Size(**{**fedrep_fig5.QUICK.__dict__, "epochs": (1, 10)})
    frame = fedrep_fig5.experiment(size, (0, 1))
    tab = fedrep_fig5.table(frame, size.rounds).set_index(["label", "tau"])
    st = fedrep_fig5.steps(frame, size.rounds).set_index("method")
    # the paper's Fig. 5 claim on the reduced digits task: more head epochs never hurt FedRep
    assert st.loc["FedRep", "non-decreasing (change >= -ci95)"], st
    assert tab.loc[("FedRep", 10), "mean"] >= tab.loc[("FedRep", 1), "mean"] - 1.0, tab
    # personalisation: FedRep beats FedAvg's global model on 2-class clients at every tau
    for tau in (1, 10):
        assert tab.loc[("FedRep", tau), "mean"] > tab.loc[("FedAvg", tau), "mean"] + 10, tab
    claims = fedrep_fig5.claims(tab.reset_index(), st.reset_index(), size)
    # FedAvg also gains from more epochs on this short run: stated as not reproduced
    assert [c["status"] for c in claims] == ["qualitative", "not reproduced"]


@pytest.mark.usefixtures("torch_one_thread")
def test_cnn_table_column_and_intervals():
    frame = cnn.column_runs(cnn.QUICK, 30, 2, (0, 1, 2), only=("FedAvg", "FedRep"))
    tab = cnn.table(frame, cnn.QUICK.rounds)
    assert set(tab["seeds"]) == {3}
    # the 95% interval with 3 seeds is 4.303 standard errors
    last = frame[(frame["round"] >= cnn.QUICK.rounds - 10) & frame["accuracy"].notna()]
    per_seed = last.groupby(["label", "seed"])["accuracy"].mean() * 100
    fedrep = tab.set_index("label").loc["FedRep"]
    se = per_seed["FedRep"].std(ddof=1) / np.sqrt(3)
    assert fedrep["ci95"] == pytest.approx(4.303 * se)
    # Table 1's main pattern with a CNN: FedRep far above FedAvg's global model (paper, CIFAR-10
    # (100, 2): +45 points; here the digits at 2 classes per client)
    pats = cnn.patterns(tab)
    assert pats.set_index("difference").loc["FedRep - FedAvg", "ours"] > 20, tab
    claims = cnn.claims(tab, pats, cnn.QUICK)
    assert claims[-1]["status"] == "not attempted" and "1000" in claims[-1]["claim"]
    assert cnn.paper_value("FedRep", 100, 5) == 75.68


def test_cnn_table_1000_column_size_and_claims():
    # the (1000, 2) column: 25 training images per client at full size; other columns unchanged
    assert cnn.column_size(cnn.FULL, 1000).data.limit == 25000
    assert cnn.column_size(cnn.FULL, 100) == cnn.FULL
    assert cnn.column_size(cnn.QUICK, 1000) == cnn.QUICK
    rows = [
        (100, 2, "FedRep", 86.0),
        (100, 2, "Local", 60.0),
        (1000, 2, "FedRep", 80.0),
        (1000, 2, "Local", 40.0),
    ]
    tab = pd.DataFrame(rows, columns=["n", "classes", "label", "mean"])
    tab["seeds"], tab["ci95"] = 3, 1.0
    claims = cnn.claims(tab, cnn.patterns(tab), cnn.FULL)
    by_claim = {c["claim"]: c for c in claims}
    ran = by_claim["Table 1, CIFAR-10 (n=1000, S=2): FedRep accuracy"]
    assert ran["status"] == "qualitative" and ran["paper_value"] == "83.27"
    assert "25 training images per client instead of 50;" in ran["why"]
    n100 = by_claim["Table 1, CIFAR-10 (n=100, S=2): FedRep accuracy"]
    assert "50 training images per client instead of 500;" in n100["why"]
    # the methods the column lacks are listed as not attempted, with the paper's value
    missing = {c["claim"]: c for c in claims if c["status"] == "not attempted"}
    assert len(missing) == 5
    fedavg = missing["Table 1, CIFAR-10 (n=1000, S=2): FedAvg accuracy"]
    assert fedavg["paper_value"] == "44.31" and fedavg["ours"] == "not run"
    # the cross-column pattern: Local -20 against FedRep -6 holds (gap 14 +- 2: four 1.0
    # half-widths in quadrature); the paper's -11.49 / -4.43
    shift = [c for c in claims if "->" in c["claim"]]
    assert [c["status"] for c in shift] == ["qualitative"]
    assert shift[0]["ours"] == "Local -20.00, FedRep -6.00 (gap +14.00 +- 2.00, 95%)"
    assert shift[0]["paper_value"] == "Local -11.49, FedRep -4.43"
    # not held when Local loses less, nor when the gap is within the noise
    for local_1000, ci in ((86.0, 1.0), (40.0, 8.0)):
        tab.loc[(tab["label"] == "Local") & (tab["n"] == 1000), "mean"] = local_1000
        tab["ci95"] = ci
        shift = [c for c in cnn.claims(tab, cnn.patterns(tab), cnn.FULL) if "->" in c["claim"]]
        assert [c["status"] for c in shift] == ["not reproduced"], (local_1000, ci)
