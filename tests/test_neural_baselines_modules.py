"""Every neural baseline on any torch.nn.Module: BatchNorm buffers and dropout.

A tiny convolutional module (Conv2d, BatchNorm2d, Dropout, Linear) on the 8x8 digits trains
under every baseline (SCAFFOLD, SCAFFOLD+FT, FedNova, Ditto, APFL, pFedMe, L2GD, Per-FedAvg,
HF-MAML): under WaitAll and a deadline with partial work (reproducible frame for frame), the
global-model methods also asynchronously (FedBuff) and tiered (FedAT). The buffers are carried,
never stepped: after a round each client's ``num_batches_tracked`` counts its training forward
passes and the server's running statistics are the size-weighted means of the clients'. The
loop and cohort (vmap) trainer paths agree on a module without dropout, and SCAFFOLD's payload
counts its control variates.
"""

import math

import numpy as np
import pandas as pd
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from simfl import Fleet, Scenario, Streams, dists, policies, run  # noqa: E402
from simfl.network import Network  # noqa: E402
from simfl.neural import (  # noqa: E402
    APFL,
    HFMAML,
    L2GD,
    SCAFFOLD,
    SCAFFOLDFT,
    SGD,
    Digits,
    Ditto,
    ImageClassification,
    LogNormalSizes,
    Model,
    NeuralFedNova,
    PerFedAvg,
    PFedMe,
    Shards,
)
from simfl.neural.personal import CONTROL, PERSONAL  # noqa: E402
from tests.helpers import arrived  # noqa: E402

pytestmark = pytest.mark.usefixtures("torch_one_thread")

BN = "bn.num_batches_tracked"
STATS = ("bn.running_mean", "bn.running_var")


class Tiny(nn.Module):
    """Conv2d(1, 4, 3) + BatchNorm2d + ReLU + Dropout(0.1) + Linear, on 8x8 digits."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(4 * 6 * 6, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.conv(x.reshape(x.shape[0], 1, 8, 8))
        return self.fc(self.drop(torch.relu(self.bn(h))).flatten(1))


def no_dropout() -> nn.Module:
    return Tiny(dropout=0.0)


def task(factory=Tiny, trainer="loop", partition=None, **kw):
    return ImageClassification(
        Digits(), partition or Shards(2), Model(factory, trainer=trainer, **kw)
    )


BATCH = 64
MOM = SGD(lr=0.05, momentum=0.5, weight_decay=1e-3, batch_size=BATCH)
PLAIN = SGD(lr=0.05, momentum=0.0, weight_decay=0.0, batch_size=BATCH)
META = SGD(lr=0.1, momentum=0.0, weight_decay=0.0, batch_size=BATCH)
EVERY = [
    SCAFFOLD(epochs=1, optimizer=MOM),
    SCAFFOLDFT(epochs=1, optimizer=MOM, finetune_epochs=1),
    NeuralFedNova(epochs=1, optimizer=MOM),
    Ditto(epochs=1, personal_epochs=1, optimizer=MOM),
    APFL(epochs=1, optimizer=MOM),
    PFedMe(epochs=1, inner_steps=2, personal_lr=0.01, optimizer=PLAIN),
    L2GD(epochs=1, optimizer=MOM),
    PerFedAvg(epochs=1, optimizer=META),
    HFMAML(epochs=1, optimizer=META),
]
ID = {"ids": lambda a: a.name}
N = 6


def scenario(algorithm, policy, rounds=2, model_task=None, **kw):
    fleet = Fleet.homogeneous(N, compute=dists.Exponential(mean=2000.0))
    return Scenario(
        task=model_task or task(),
        algorithm=algorithm,
        fleet=fleet,
        policy=policy,
        rounds=rounds,
        seed=3,
        **kw,
    )


def finite(res):
    assert res.ok
    for column in ("accuracy", "loss", "train_loss"):
        assert np.isfinite(res.rounds[column]).all(), res.rounds


# ------------------------------------------------------------------ every baseline runs
@pytest.mark.parametrize("algorithm", EVERY, **ID)
def test_runs_under_waitall_and_a_partial_deadline_reproducibly(algorithm):
    full = run(scenario(algorithm, policies.WaitAll(), 1), progress=False, on_error="raise")
    finite(full)
    assert full.meta["training"]["trainer"] == "loop"
    # a deadline shorter than most jobs (about 3 s of compute): clients send partial updates
    deadline = scenario(algorithm, policies.Deadline(1.0, partial=True))
    one = run(deadline, progress=False, on_error="raise")
    finite(one)
    got = one.clients.set_index(["round", "device"])
    whole = full.clients.set_index(["round", "device"])["work"]
    sent = got[got["status"].astype(str) == "arrived"]
    assert (sent["work"] < whole.reindex(sent.index) * (1 - 1e-9)).any(), one.clients
    # the same seed, the same frames (keyed minibatches and dropout masks)
    two = run(deadline, progress=False, on_error="raise")
    pd.testing.assert_frame_equal(one.rounds, two.rounds)
    pd.testing.assert_frame_equal(one.clients, two.clients)


@pytest.mark.parametrize("algorithm", [a for a in EVERY if a.synchronous_only is None], **ID)
def test_global_model_methods_run_asynchronously_and_tiered(algorithm):
    for policy in (policies.FedBuff(buffer_size=2, concurrency=4), policies.FedAT(tiers=2)):
        res = run(scenario(algorithm, policy), progress=False, on_error="raise")
        finite(res)
        assert len(res.rounds) == 2


def test_edge_aggregation_runs_a_stateful_baseline():
    net = Network.hierarchical(np.array([0, 0, 0, 1, 1, 1]), edge_up=1e9, edge_down=1e9)
    alg = SCAFFOLD(epochs=1, optimizer=MOM)
    res = run(
        scenario(alg, policies.EdgeAggregation(fraction=0.5), network=net),
        progress=False,
        on_error="raise",
    )
    finite(res)


# ------------------------------------------------------------------ buffers are carried
def bound(algorithm, model_task=None, n=N, seed=3):
    streams = Streams(seed)
    data = (model_task or task()).build(n, streams)
    return data, algorithm.initial_state(data, streams), streams


#: Training forward passes per minibatch step (what each pass adds to num_batches_tracked).
PASSES = {"PerFedAvg": 2, "HF-MAML": 4, "pFedMe": 2}  # pFedMe: inner_steps; the rest 1


@pytest.mark.parametrize("algorithm", EVERY, **ID)
def test_buffers_are_updated_by_forward_passes_and_averaged_never_stepped(algorithm):
    data, state, streams = bound(algorithm)
    net = state.network
    clients = np.arange(N)
    updates = algorithm.local_updates(state, data, clients, 0, streams)
    new = algorithm.aggregate(state, updates, arrived(updates))
    steps = np.ceil(state.sizes[clients] / BATCH) * PASSES.get(algorithm.name, 1)
    rows = np.asarray(updates.params[BN])
    assert rows.dtype == np.int64
    np.testing.assert_array_equal(rows, steps)  # from 0: one per training forward pass
    w = state.sizes[clients] / state.sizes[clients].sum()
    assert new.shared[BN].dtype == torch.int64
    assert int(new.shared[BN]) == int(np.rint(w @ rows))
    for name in STATS:
        got = np.asarray(updates.params[name])
        assert not np.allclose(got, state.shared[name].numpy())  # the passes moved them
        expect = np.tensordot(w, got.astype(np.float64), axes=1).astype(np.float32)
        np.testing.assert_array_equal(new.shared[name].numpy(), expect)
    # the trainable parameters moved (SGD), and only they are in SCAFFOLD's controls
    assert not torch.equal(new.shared["fc.weight"], state.shared["fc.weight"])
    controls = {n[len(CONTROL) :] for n in updates.params if n.startswith(CONTROL)}
    if isinstance(algorithm, SCAFFOLD):
        assert controls == set(net.param_names) == set(new.extra)
    else:
        assert not controls
    # personal models keep their own buffers (L2GD's averaging step moves parameters only)
    personal = {n[len(PERSONAL) :] for n in updates.params if n.startswith(PERSONAL)}
    if personal:
        own = {n: np.asarray(updates.params[PERSONAL + n]) for n in personal}
    elif getattr(algorithm, "evaluates_personal", False):  # L2GD: its update is the personal model
        own = {n: np.asarray(updates.params[n]) for n in net.buffer_names}
    else:
        own = {}
    for j, c in enumerate(clients):
        for name in set(own) & set(net.buffer_names):
            np.testing.assert_array_equal(new.personal[int(c)][name].numpy(), own[name][j])
    if isinstance(algorithm, Ditto | APFL | PFedMe):
        mine = np.ceil(state.sizes[clients] / BATCH) * PASSES.get(algorithm.name, 1)
        np.testing.assert_array_equal(own[BN], mine)
    if isinstance(algorithm, L2GD):
        mixed = new.personal[0]["fc.weight"].numpy()
        assert not np.array_equal(mixed, np.asarray(updates.params["fc.weight"][0]))
    # evaluation models: APFL's mixture runs with the personal model's buffers
    if not isinstance(algorithm, NeuralFedNova):  # FedNova: FedAvg's evaluation
        params = algorithm.eval_params(new, data, clients[:2])
        assert set(params) == set(net.param_names) | set(net.buffer_names)
        if isinstance(algorithm, APFL):
            for name in net.buffer_names:
                np.testing.assert_array_equal(params[name].numpy(), own[name][:2])
    metrics = algorithm.evaluate(new, data)
    assert all(math.isfinite(v) for v in metrics.values()), metrics


def test_a_clients_update_does_not_depend_on_its_cohort_with_dropout():
    # each client's dropout seeds are drawn only in the passes it takes part in, and the loop
    # computes each client on its own samples: the same update alone or in any cohort
    unequal = task(partition=LogNormalSizes(1.0))
    for alg in (SCAFFOLD(epochs=1, optimizer=MOM), APFL(epochs=1, optimizer=MOM), EVERY[-1]):
        data, state, streams = bound(alg, unequal)
        sizes = state.sizes[np.array([1, 4])]
        assert sizes[0] != sizes[1]
        both = alg.local_updates(state, data, np.array([1, 4]), 2, streams)
        alone = alg.local_updates(state, data, np.array([4]), 2, streams)
        for n, v in alone.params.items():
            np.testing.assert_array_equal(both.params[n][1], v[0], err_msg=f"{alg.name} {n}")


# ------------------------------------------------------------------ loop and cohort paths
@pytest.mark.parametrize("algorithm", EVERY, **ID)
def test_loop_and_cohort_paths_agree_without_dropout(algorithm):
    # Tolerance: the cohort path vmaps each step over the clients (grouped convolutions,
    # batched products), the loop runs one client at a time, so float32 sums run in another
    # order; over a round (about a dozen steps, up to 4 passes each) the parameters, buffers
    # and controls differ by at most 5e-7 here (HF-MAML's running variance; SCAFFOLD's
    # controls, which divide the moves by K lr ~ 0.4, 3e-7). atol 5e-6 and rtol 1e-5 leave a
    # factor 10 for other CPUs' kernels; the step counters are integers and equal.
    unequal = LogNormalSizes(1.0)
    clients = np.array([0, 2, 3, 5])
    got = {}
    for trainer in ("loop", "cohort"):
        data, state, streams = bound(algorithm, task(no_dropout, trainer, unequal))
        assert state.network.trainer["path"] == trainer
        updates = algorithm.local_updates(state, data, clients, 1, streams)
        new = algorithm.aggregate(state, updates, arrived(updates, 1))
        got[trainer] = (updates, algorithm.evaluate(new, data))
    (loop, loop_metrics), (cohort, cohort_metrics) = got["loop"], got["cohort"]
    tol = {"rtol": 1e-5, "atol": 5e-6}
    assert set(loop.params) == set(cohort.params)
    for n, v in loop.params.items():
        if np.issubdtype(np.asarray(v).dtype, np.integer):
            np.testing.assert_array_equal(cohort.params[n], v)
        else:
            np.testing.assert_allclose(cohort.params[n], v, err_msg=n, **tol)
    np.testing.assert_allclose(cohort.loss, loop.loss, rtol=1e-5)
    for m, v in loop_metrics.items():  # the same predictions; the mean test loss to rounding
        assert cohort_metrics[m] == pytest.approx(v, rel=1e-5, abs=1e-6), m


# ------------------------------------------------------------------ payload and checks
def test_payload_counts_the_model_with_its_buffers_and_scaffolds_controls():
    data = task().build(N, Streams(0))
    net = data.network
    sizes = {n: math.prod(net.shapes[n]) for n in net.shapes}
    params = 4 * sum(sizes[n] for n in net.param_names)
    buffers = 4 * (sizes["bn.running_mean"] + sizes["bn.running_var"]) + 8  # int64 counter
    for alg in EVERY:
        state = alg.initial_state(data, Streams(0))
        payload = alg.payload(state)
        expect = params + buffers + (params if isinstance(alg, SCAFFOLD) else 0)
        assert payload.down == payload.up == expect, alg.name


def test_local_normalisation_layers_are_refused_by_the_baselines_kept_by_fednova():
    fedbn = task(norm="local")
    for alg in EVERY:
        if isinstance(alg, NeuralFedNova):
            continue
        with pytest.raises(ValueError, match=r"Model\(norm='local'\)"):
            scenario(alg, policies.WaitAll(), model_task=fedbn)
    nova = EVERY[2]
    res = run(scenario(nova, policies.WaitAll(), rounds=1, model_task=fedbn), progress=False)
    finite(res)
    assert set(res.state.local[0]) == {
        "bn.weight",
        "bn.bias",
        "bn.running_mean",
        "bn.running_var",
        BN,
    }
