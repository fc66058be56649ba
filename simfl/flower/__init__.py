"""Flower apps under simfl's clock: an unmodified Flower app as a simfl algorithm.

``pip install 'simfl[flower]'`` (Flower, ``flwr``). :class:`FlowerApp` takes the app's client
(a ``client_fn`` or a ``ClientApp``) and a Flower strategy (``FedAvg``, ``FedProx``,
``FedAdam``, ... of either Flower API) and plays them under any simfl fleet, network and policy;
:class:`FlowerTask` names the metrics of the app's evaluation. ``docs/flower.md`` shows a run;
``docs/examples/flower_digits`` is a complete Flower app (the quickstart-pytorch layout) on
scikit-learn's digits.

``import simfl`` never imports Flower; this subpackage does.
"""

try:
    import flwr  # noqa: F401
except ImportError as exc:  # pragma: no cover - the test suite runs with flwr installed
    raise ImportError(
        f"simfl.flower needs Flower (flwr), which is not installed ({exc}): "
        f"pip install 'simfl[flower]'"
    ) from exc

from simfl.flower._runtime import ClientError
from simfl.flower.app import FlowerApp, FlowerState
from simfl.flower.config import run_config
from simfl.flower.protocols import JobFailure
from simfl.flower.task import FlowerNodes, FlowerTask

__all__ = [
    "ClientError",
    "FlowerApp",
    "FlowerNodes",
    "FlowerState",
    "FlowerTask",
    "JobFailure",
    "run_config",
]
