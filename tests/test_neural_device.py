"""``ImageClassification.device``: the CPU explicitly is the default path, bit for bit; a CUDA
device that this machine lacks, or a device that is not a CPU or CUDA one, is refused when
the task is built, naming the field, before anything runs."""

import pytest

torch = pytest.importorskip("torch")

import simfl  # noqa: E402
from simfl import (  # noqa: E402
    Fleet,
    Scenario,
    dists,
    neural,
    policies,
)

pytestmark = pytest.mark.usefixtures("torch_one_thread")


def scenario(**task):
    return Scenario(
        task=neural.ImageClassification(
            neural.Digits(), neural.Shards(2), neural.MLP((16, 8)), **task
        ),
        algorithm=neural.NeuralFedAvg(epochs=1),
        fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(count=3),
        rounds=2,
        seed=4,
    )


def test_device_cpu_explicitly_is_the_default_bit_for_bit():
    default = simfl.run(scenario(), progress=False)
    cpu = simfl.run(scenario(device="cpu"), progress=False)
    assert default.rounds.equals(cpu.rounds)
    assert default.rounds["accuracy"].notna().any()
    data = scenario(device="cpu").task.build(8, simfl.Streams(0))
    assert data.x_train.device.type == "cpu" and data.x_test.device.type == "cpu"


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a CUDA device")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_without_a_cuda_device_is_refused_before_anything_runs(device):
    with pytest.raises(ValueError, match=r"ImageClassification.device='cuda.*no CUDA device"):
        neural.ImageClassification(device=device)


@pytest.mark.parametrize("device", ["tpu", "meta", "", 0, None])
def test_other_devices_are_refused_naming_the_field(device):
    with pytest.raises(ValueError, match=r"ImageClassification.device must be 'cpu' or 'cuda"):
        neural.ImageClassification(device=device)


def test_the_new_fields_at_their_defaults_keep_the_run_ids_of_stores():
    """``device``, ``threads`` and ``CNN.padding`` are left out of the scenario fingerprint at
    their defaults: the value below is the fingerprint before they existed."""
    from simfl.sweeps.worker import scenario_fingerprint

    def make(threads=1, **kw):
        return Scenario(
            task=neural.ImageClassification(
                neural.MNIST(),
                neural.Shards(2),
                neural.CNN((6, 16), (120, 100), **kw),
                threads=threads,
            ),
            algorithm=neural.NeuralFedAvg(epochs=1),
            fleet=Fleet.homogeneous(8, compute=dists.Exponential(mean=1.0)),
            policy=policies.WaitAll(count=3),
            rounds=2,
            seed=4,
        )

    before = "8f1c91009d2007e1b18b9b73fe8312eac81166904ff97e9c9debcee0ea71168e"
    assert scenario_fingerprint(make()) == before
    assert scenario_fingerprint(make(padding=(0, 0))) == before
    assert scenario_fingerprint(make(padding=(2, 0))) != before
    assert scenario_fingerprint(make(threads=2)) != before
