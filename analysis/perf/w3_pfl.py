"""Workload W3 on Apple's pfl-research (pfl 0.6.0, PyTorch): FedAvg, the docs' ResNet.

    python analysis/perf/w3_pfl.py --rounds 20 --clients 100 --per-round 10 --seed 0

(last stdout line: one JSON object, as the peers' scripts print). The peers' ``pfl_w2.py``
(``$SIMFL_PEERS`` or ``../shared/peers`` beside the checkout) with W3's model, nothing else
changed: a FederatedDataset of the users' tensors (a fresh permutation each time a user is
sampled: shuffled minibatches) with the cohort sampler without replacement
(``pfl_w1.CohortSampler``) -> ``SimulatedBackend(postprocessors=[WeightByDatapoints()],
aggregator=SumAggregator())`` -> ``FederatedAveraging`` with ``PyTorchModel(
local_optimizer_create=torch.optim.SGD, central_optimizer=SGD(lr=1.0))``: the
sample-size-weighted average of the local models. Central evaluation on the 10,000 test images
at round 0, every ``--eval-every`` rounds and after the last (``pfl_w1.RoundEvaluation``), in
batches of ``--eval-batch``. Data, shards and flags from ``w2_data`` (defaults: 100 clients, 10
a round, 1 epoch, batch 50, lr 0.05, no momentum, no weight decay); the ResNet and its seeded
initial weights from ``w3_model`` (the docs example's class). One torch thread. pfl has no
virtual clock (``virtual_clock_end`` null).

pfl averages only the trainable parameters (``PyTorchModel.variable_map``, from
``named_parameters()``); module buffers are not averaged: they live in the one central module,
which every user's local training updates in place, so BatchNorm's running statistics would run
on through the round's users one after another (and through evaluations, which pfl does not
switch to ``eval()``). The ResNet's GroupNorm has no buffers, so here pfl and simfl both
average the whole model. ``host_cpu_s_per_round`` is the process's CPU time over the training
loop per round.
"""

import os
import time

T0 = time.perf_counter()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one compute thread, as the peers and w3_simfl.py measure

import json  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

HERE = Path(__file__).resolve().parent
PEERS = Path(os.environ.get("SIMFL_PEERS", HERE.parents[2] / "shared" / "peers"))
sys.path.insert(0, str(PEERS))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import pfl  # noqa: E402
import torch  # noqa: E402
import w2_data  # noqa: E402
import w3_model  # noqa: E402
from pfl.aggregate.base import SumAggregator  # noqa: E402
from pfl.aggregate.simulate import SimulatedBackend  # noqa: E402
from pfl.aggregate.weighting import WeightByDatapoints  # noqa: E402
from pfl.algorithm import FederatedAveraging, NNAlgorithmParams  # noqa: E402
from pfl.data.dataset import Dataset  # noqa: E402
from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams  # noqa: E402
from pfl.model.pytorch import PyTorchModel  # noqa: E402
from pfl_w1 import RoundEvaluation, loss, make_federated_dataset, metrics  # noqa: E402


def main() -> None:
    """Run W3 on pfl once and print the peers' JSON row."""
    args = w2_data.add_cli().parse_args()
    torch.set_num_threads(1)
    # seeded as pfl's benchmarks seed it: pfl draws its internal randomness from np.random
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # noqa: NPY002
    clients, (xt, yt) = w2_data.make_w2(
        args.clients, args.seed, args.data_dir, args.shards_per_client
    )
    train_data = make_federated_dataset(clients, args.per_round, args.seed)
    central_data = Dataset(raw_data=[torch.from_numpy(xt), torch.from_numpy(yt)])

    net = w3_model.make_model(args.seed)
    net.loss, net.metrics = types.MethodType(loss, net), types.MethodType(metrics, net)
    model = PyTorchModel(  # FedAvg: w += the weighted mean of the users' differences
        model=net,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0),
    )
    backend = SimulatedBackend(
        training_data=train_data,
        val_data=None,
        postprocessors=[WeightByDatapoints()],
        aggregator=SumAggregator(),
    )
    algorithm = FederatedAveraging()
    algorithm_params = NNAlgorithmParams(
        central_num_iterations=args.rounds,
        # pfl's per-user before/after-training metrics: iteration 0 only
        evaluation_frequency=args.rounds + 1,
        train_cohort_size=args.per_round,
        val_cohort_size=0,
    )
    train_params = NNTrainHyperParams(
        local_num_epochs=args.epochs, local_learning_rate=args.lr, local_batch_size=args.batch
    )
    eval_params = NNEvalHyperParams(local_batch_size=args.eval_batch)
    evaluation = RoundEvaluation(
        central_data, model_eval_params=eval_params, frequency=args.eval_every, rounds=args.rounds
    )
    setup_s = time.perf_counter() - T0

    cpu = time.process_time()
    t = time.perf_counter()
    algorithm.run(
        algorithm_params=algorithm_params,
        backend=backend,
        model=model,
        model_train_params=train_params,
        model_eval_params=eval_params,
        callbacks=[evaluation],
        send_metrics_to_platform=False,
    )
    wall = time.perf_counter() - t
    cpu = time.process_time() - cpu

    print(f"pfl W3: accuracy by round {evaluation.acc}", file=sys.stderr)
    row = {
        "framework": f"pfl {pfl.__version__} (SimulatedBackend, PyTorch)",
        "rounds": args.rounds,
        "clients": args.clients,
        "per_round": args.per_round,
        "setup_s": round(setup_s, 3),
        "host_wall_s": round(wall, 3),
        "host_wall_s_per_round": round(wall / args.rounds, 5),
        "final_test_acc": round(evaluation.acc[args.rounds], 4),
        "virtual_clock_end": None,
        "peak_rss_mb": round(w2_data.peak_rss_mb(), 1),
        "host_cpu_s_per_round": round(cpu / args.rounds, 5),
        "torch_threads": torch.get_num_threads(),
        "acc_by_round": {str(k): round(v, 4) for k, v in sorted(evaluation.acc.items())},
    }
    print(json.dumps(row))


if __name__ == "__main__":
    main()
