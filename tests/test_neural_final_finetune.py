"""The final fine-tuning step (``finetune_epochs``) that FedRep's evaluation protocol gives every
client: a client never selected is scored with a head trained on its own data from its initial
head on the final body (checked against a plain torch.optim loop), not with its random initial
head; clients that took part start from their own heads; every baseline takes the option; and
in analysis/neural_baselines.py the never-selected clients rise from chance under it."""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from simfl import Streams  # noqa: E402
from simfl.neural import (  # noqa: E402
    APFL,
    HFMAML,
    L2GD,
    MLP,
    SGD,
    Digits,
    Ditto,
    ImageClassification,
    NeuralFedRep,
    PerFedAvg,
    PFedMe,
    Shards,
)
from simfl.neural.train import Phase  # noqa: E402
from tests.helpers import arrived  # noqa: E402
from tests.test_neural_train import torch_module, train_alone  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "analysis"))

import neural_baselines as nb  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

TASK = ImageClassification(Digits(), Shards(2), MLP((32, 16)))
SMALL_SGD = SGD(lr=0.05, batch_size=8)
COHORT = np.array([0, 1])
#: Clients of the 10 that are never selected in :func:`trained`.
NEVER = (2, 5, 9)


def trained(alg, rounds=3):
    """Data and the state after ``rounds`` rounds in which only clients 0 and 1 take part."""
    streams = Streams(0)
    data = TASK.build(10, streams)
    state = alg.initial_state(data, streams)
    for r in range(rounds):
        upd = alg.local_updates(state, data, COHORT, r, streams)
        state = alg.aggregate(state, upd, arrived(upd, r))
    return data, state


def accuracy(net, params, data, client):
    """Test accuracy of one client's model, computed with torch.nn modules."""
    model, _ = torch_module(net, params)
    ids = data.test_parts[client]
    with torch.no_grad():
        pred = model(data.x_test[ids]).argmax(dim=1)
    return float((pred == data.y_test[ids]).double().mean())


def test_fedrep_scores_each_client_with_a_head_fine_tuned_from_its_own():
    plain = NeuralFedRep(head_epochs=2, body_epochs=1, optimizer=SMALL_SGD)
    final = dataclasses.replace(plain, finetune_epochs=10)
    data, state = trained(plain)
    net = state.network
    assert set(state.local) == {0, 1}  # the others were never selected
    clients, as_trained = plain.evaluate_clients(state, data)
    _, tuned = final.evaluate_clients(state, data)
    acc0 = dict(zip(clients.tolist(), as_trained["accuracy"], strict=True))
    acc10 = dict(zip(clients.tolist(), tuned["accuracy"], strict=True))
    for c in (*NEVER, 0):
        own = state.local.get(c, state.local_default)
        start = {**state.shared, **own}
        # finetune 0: the client's own head as it is (the initial one if never selected)
        assert acc0[c] == pytest.approx(accuracy(net, start, data, c), abs=1e-12)
        # finetune 10: 10 head-only epochs from that head on the final body, by hand
        hand = train_alone(
            net,
            start,
            data.x_train,
            data.y_train,
            data.train_parts[c],
            (Phase(net.head, 10),),
            SMALL_SGD,
            data.streams.generator("neural/finetune", c, state.round),
        )
        for name in state.shared:  # the body stays the server's
            torch.testing.assert_close(hand[name], state.shared[name])
        n_test = data.test_parts[c].size
        assert abs(acc10[c] - accuracy(net, hand, data, c)) <= 1.0 / n_test + 1e-12
    # what the protocol is for: an initial (random) head is near chance, a trained one is not
    never0 = np.mean([acc0[c] for c in NEVER])
    never10 = np.mean([acc10[c] for c in NEVER])
    assert never10 > never0 + 0.3, (never0, never10)
    assert never10 > 0.8


@pytest.mark.parametrize(
    "alg",
    [
        Ditto(epochs=1, personal_epochs=1, optimizer=SMALL_SGD),
        APFL(epochs=1, optimizer=SMALL_SGD),
        PerFedAvg(epochs=1, optimizer=SGD(lr=0.05, momentum=0.0, weight_decay=0.0)),
        HFMAML(epochs=1, optimizer=SGD(lr=0.05, momentum=0.0, weight_decay=0.0)),
        PFedMe(epochs=1, optimizer=SGD(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=20)),
        L2GD(epochs=1, optimizer=SMALL_SGD),
    ],
    ids=lambda a: a.name,
)
def test_every_personalised_baseline_fine_tunes_never_selected_clients(alg):
    data, state = trained(alg, rounds=2)
    _, before = alg.evaluate_clients(state, data)
    _, after = dataclasses.replace(alg, finetune_epochs=10).evaluate_clients(state, data)
    never = list(NEVER)
    gain = np.mean(after["accuracy"][never]) - np.mean(before["accuracy"][never])
    # 10 head epochs on a client's own 2 classes lift it well above where it was
    assert gain > 0.2, (before["accuracy"][never], after["accuracy"][never])


@pytest.mark.parametrize("cls", [Ditto, APFL, PerFedAvg, HFMAML, PFedMe, L2GD])
def test_finetune_epochs_is_validated(cls):
    with pytest.raises(ValueError, match=rf"{cls.__name__}\.finetune_epochs"):
        cls(finetune_epochs=-1)


def test_analysis_protocol_lifts_the_never_selected_clients():
    # 20 clients, 2 per round, 2 rounds: at least 16 clients never take part
    kw = {"n": 20, "fraction": 0.1, "rounds": 2, "seeds": (0,), "model": nb.QUICK_MLP}
    algs = [a for f in (0, nb.FINETUNE) for a in nb.methods(finetune=f) if a.name == "FedRep"]
    frames = [nb.experiment(Digits(), algorithms=[a], **kw) for a in algs]
    raw, final = (nb.table(f, kw["rounds"]).loc["FedRep"] for f in frames)
    assert raw["n_never"] == final["n_never"] >= 16
    # the training is the same; the never-selected clients go from an initial head near
    # chance to a trained one (the others gain too: their heads trained on an older body)
    assert raw["never"] < 40 < 80 < final["never"], (raw["never"], final["never"])
    assert final["took_part"] > raw["took_part"] - 5
    # and so does the average local test accuracy the table reports
    assert final["mean"] > raw["mean"] + 40, (raw["mean"], final["mean"])
