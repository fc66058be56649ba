import pickle

import matplotlib
import pandas as pd
import pytest

from simfl import Fleet, Store, dists, plots, policies, run, sweep, sweeps
from simfl.cli import main, parse_seeds, parse_target
from tests.helpers import linear_scenario

matplotlib.use("Agg")


def test_grid_labels_and_names():
    base = linear_scenario(rounds=5)
    cases = sweeps.grid(
        base, policy={"w": policies.WaitAll(count=5), "d": policies.Deadline(1.0)}, seed=range(2)
    )
    assert [c.labels for c in cases] == [{"policy": p, "seed": s} for p in "wd" for s in (0, 1)]
    assert cases[3].scenario.name == "policy=d" and cases[3].scenario.seed == 1
    with pytest.raises(ValueError, match="Scenario field"):
        sweeps.grid(base, speed=[1, 2])
    with pytest.raises(ValueError, match="no values"):
        sweeps.grid(base, seed=[])


def test_sweep_is_the_same_on_one_or_two_workers():
    cases = sweeps.grid(
        linear_scenario(rounds=8, dropout_rate=0.2),
        policy=[policies.WaitAll(count=10), policies.FastestK(k=5)],
        seed=[0, 1],
    )
    one = sweep(cases, workers=1, progress=False)
    two = sweep(cases, workers=2, progress=False)
    pd.testing.assert_frame_equal(one.frame, two.frame, check_exact=True)
    for a, b in zip(one.run_ids, two.run_ids, strict=True):
        pd.testing.assert_frame_equal(
            one.store.results(a).clients, two.store.results(b).clients, check_exact=True
        )
    assert set(one.frame["policy"]) == {"wait-all", "fastest-k"}


def test_scenarios_pickle():
    sc = linear_scenario(rounds=3)
    sc = type(sc)(
        **{
            **sc.__dict__,
            "fleet": Fleet.homogeneous(
                5, dists.Exponential(2.0), scale=dists.Uniform(1.0, 3.0), redraw="stage"
            ),
        }
    )
    back = pickle.loads(pickle.dumps(sc))
    assert back.fleet.scale.tolist() == sc.fleet.scale.tolist()
    pd.testing.assert_frame_equal(
        run(back, progress=False).clients, run(sc, progress=False).clients
    )


def test_plots_draw_labelled_axes(tmp_path):
    cases = sweeps.grid(
        linear_scenario(rounds=20, dropout_rate=0.3),
        policy={"wait": policies.WaitAll(count=10), "deadline": policies.Deadline(1.0, count=10)},
        seed=[0, 1],
    )
    out = sweep(cases, workers=1, progress=False)
    ax = plots.metric_vs_time(out.frame, "distance", by="policy", target=1e-2)
    assert ax.get_xlabel() == "simulated time (s)" and ax.get_yscale() == "log"
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {"wait", "deadline"}
    ax = plots.metric_vs_rounds(out.frame, "distance", by="policy")
    assert ax.get_xlabel().startswith("round")
    ax = plots.gantt(out.store.results(out.run_ids[2]), rounds=range(2))
    assert ax.get_xlabel() == "simulated time (s)" and len(ax.patches) > 10
    table = pd.DataFrame(
        {"n": [10, 100], "speedup": [1.5, 3.0], "ci_low": [1.2, 2.5], "ci_high": [1.8, 3.4]}
    )
    ax = plots.speedup_vs(table, "n")
    assert "speedup" in ax.get_ylabel()
    ax.figure.savefig(tmp_path / "s.png")
    assert (tmp_path / "s.png").stat().st_size > 5000


def test_cli_sweep(tmp_path, capsys):
    file = tmp_path / "two.py"
    file.write_text(
        "import dataclasses\n"
        "from simfl import Fleet, Scenario, algorithms, dists, policies, tasks\n"
        "BASE = Scenario(name='w', task=tasks.LinearRepresentation(d=8, k=2),\n"
        "    algorithm=algorithms.FedRep(), fleet=Fleet.homogeneous(20, dists.Exponential(1.0)),\n"
        "    policy=policies.WaitAll(count=5), rounds=40)\n"
        "SCENARIOS = {'w': BASE, 'f': dataclasses.replace(BASE, name='f',\n"
        "    policy=policies.FastestK(k=5, overcommit=1.0))}\n"
    )
    code = main(
        [
            "sweep",
            str(file),
            "--seeds",
            "0-1",
            "--workers",
            "1",
            "--store",
            str(tmp_path / "o"),
            "--target",
            "distance<1e-2",
            "--quiet",
        ]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert "4 runs (2 scenarios x 2 seeds)" in printed and "mean_time" in printed
    assert "4 runs: 4 ran (4 done, 0 failed), 0 already in the store" in printed
    frame = Store(tmp_path / "o").rounds()  # --out is the older name of --store
    assert set(frame["label"]) == {"w", "f"} and set(frame["seed"]) == {0, 1}


def test_cli_parsers():
    assert parse_seeds("0-3,7") == [0, 1, 2, 3, 7]
    assert parse_target("distance<1e-3") == ("distance", "below", 1e-3)
    assert parse_target("accuracy>0.9") == ("accuracy", "above", 0.9)
    with pytest.raises(ValueError, match="--seeds"):
        parse_seeds("a-b")
    with pytest.raises(ValueError, match="--target"):
        parse_target("distance=3")
