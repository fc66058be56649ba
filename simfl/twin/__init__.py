"""The same scenario played for real: a twin on Flower's Deployment Engine.

:func:`twin` runs a scenario as a real deployment on this machine: a Flower SuperLink, one
SuperNode process per device, HTTP on localhost (Flower's Fleet API), the scenario's policy
deciding in a ServerApp and every job emulating its device on its SuperNode: the job's download,
compute and upload last what the fleet draws for them (the same keyed draws as
:func:`simfl.run`), times ``scale`` wall-clock seconds per simulated second, with the user's
Flower ClientApp training for real inside the compute window. It records the real timeline in
the rows of :func:`simfl.run` (``clients``: start, end, status per job; ``rounds``: close
times, metrics), so every analysis function takes both, and
:func:`simfl.twin.fidelity.compare` sets them side by side.

What the twin checks, and what it cannot: it plays the clock's *semantics* (who is selected,
when a round closes, which jobs are late or cancelled) against a system that really runs, and
it measures the system's own overheads that simfl does not model unless told
(:class:`simfl.Server`): Flower's polling and process start per message, the server's
aggregation. The device models themselves (how long a phone computes) are the fleet's, which
come from measurements (:func:`simfl.fleet.fit_fleet`).

``python -m simfl twin scenario.py`` is the command (see ``docs/twin.md``).
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from simfl._checks import check_int, check_real
from simfl.algorithms.timing import TimingOnly
from simfl.results import ROUND_COLUMNS, Results
from simfl.scenario import Scenario
from simfl.twin.deployment import TwinError

__all__ = ["TwinError", "twin"]


def _require_flwr() -> None:
    try:
        import flwr  # noqa: F401
    except ImportError as err:
        raise ImportError("simfl.twin needs Flower: pip install 'simfl[flower]'") from err


_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "simfl-twin-app"
version = "1.0.0"
description = "simfl's twin of a scenario on Flower's Deployment Engine"
license = "MIT"
dependencies = []

[tool.hatch.build.targets.wheel]
packages = ["."]

[tool.flwr.app]
publisher = "simfl"

[tool.flwr.app.components]
serverapp = "simfl_twin_app.server_app:app"
clientapp = "simfl_twin_app.client_app:app"

[tool.flwr.app.config]
plan = "{plan}"
paths = "{paths}"
{extra}"""


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))


def _write_app(
    folder: Path, plan_path: Path, paths: Sequence[str], run_config: Mapping[str, Any]
) -> Path:
    app = folder / "app"
    pkg = app / "simfl_twin_app"
    pkg.mkdir(parents=True, exist_ok=True)
    extra = "".join(f"{json.dumps(str(k))} = {_toml(v)}\n" for k, v in run_config.items())
    (app / "pyproject.toml").write_text(
        _PYPROJECT.format(plan=plan_path.as_posix(), paths=os.pathsep.join(paths), extra=extra)
    )
    (pkg / "__init__.py").write_text('"""simfl twin app."""\n')
    (pkg / "server_app.py").write_text("from simfl.twin import serverapp\n\napp = serverapp.app\n")
    # the ClientApp's module is copied whole: a ClientApp process (one per message) then
    # imports Flower alone, not simfl
    shutil.copyfile(Path(__file__).with_name("clientapp.py"), pkg / "client_app.py")
    return app


def _check(scenario: Scenario) -> None:
    from simfl.policies.base import EdgePolicy, SyncPolicy
    from simfl.twin.replies import twin_math

    if not isinstance(scenario, Scenario):
        raise ValueError(f"twin: scenario must be a simfl.Scenario, got {scenario!r}")
    policy = scenario.policy
    if not isinstance(policy, SyncPolicy) or isinstance(policy, EdgePolicy):
        raise ValueError(
            f"twin: Scenario.policy must be a synchronous policy (WaitAll, Deadline, FastestK, "
            f"...) for a twin, got {type(policy).__name__}"
        )
    if scenario.network is not None:
        raise ValueError("twin: Scenario.network must be None (private links) for a twin")
    if scenario.fleet.availability is not None:
        raise ValueError("twin: Scenario.fleet must have no availability for a twin")
    twin_math(scenario.algorithm)


def _frames(out: dict[str, Any]) -> tuple[pd.DataFrame, pd.DataFrame]:
    metrics = list(out["metrics"])
    rounds = pd.DataFrame(out["rounds"], columns=[*ROUND_COLUMNS, *metrics])
    clients = pd.DataFrame(out["clients"])
    ints = ["round", "stage", "device", "n_selected", "n_arrived", "n_dropped", "n_late"]
    for frame in (rounds, clients):
        for c in frame.columns:
            if c in (*ints, "n_cancelled"):
                frame[c] = frame[c].astype("int64")
            elif c not in ("status", "error"):
                frame[c] = frame[c].astype("float64")
    return rounds, clients


def twin(
    scenario: Scenario,
    *,
    scale: float = 1.0,
    app: str | None = None,
    paths: Sequence[str] = (),
    workdir: str | Path | None = None,
    port: int | None = None,
    timeout: float = 900.0,
    node_timeout: float = 120.0,
    job_timeout: float = 60.0,
    faults: Mapping[int, int] | None = None,
    keep: bool = False,
) -> Results:
    """Play ``scenario`` for real on Flower's Deployment Engine; the rows of :func:`simfl.run`.

    Parameters
    ----------
    scenario
        A scenario with a synchronous policy, private links, no availability, and a
        :class:`~simfl.algorithms.TimingOnly` algorithm or a Flower app under simfl.
    scale
        Wall-clock seconds per simulated second (> 0). Raise it until no job's training
        overruns its emulated compute time (``clients["overrun"]``) and the system's own
        overheads are small against the jobs.
    app
        The user's Flower ClientApp as ``"module:attribute"`` (a ``ClientApp`` or a
        ``client_fn``), run unchanged on each SuperNode; ``None``: the jobs only take their
        time.
    paths
        Folders to put on the ClientApp's ``sys.path`` so that ``app`` imports.
    workdir
        Folder for Flower's home, logs and the run database (``None``: a temporary one,
        removed afterwards unless ``keep``).
    port
        The SuperLink's port (``None``: a free one); a port in use is refused at once.
    timeout
        Wall-clock seconds the whole run may take before it is stopped (> 0).
    node_timeout
        Seconds the SuperNodes have to connect and say which device they play (> 0).
    job_timeout
        Seconds past its planned end after which a job with no reply counts as dropped (> 0).
    faults
        SuperNodes to kill, by device: ``{device: round}`` kills the device's SuperNode (and
        its ClientApp) right after the server sends that round's jobs (a device that dies
        mid-job: its job is recorded ``dropped`` and the run goes on).
    keep
        Keep a temporary ``workdir`` (for its logs).

    Returns
    -------
    Results
        ``rounds`` and ``clients`` with :func:`simfl.run`'s columns (``clients`` adds
        ``dispatch``, ``return_``, ``overrun``, the planned durations and ``error``);
        ``meta["playback"]`` is ``"twin"`` and ``meta["twin"]`` holds the deployment's facts:
        its ``port`` and Flower ``run_id``, the ``scale``, the largest ``max_overrun``, and per
        round the instant it closed (``closes``) and the seconds its aggregation took
        (``aggregation``), both in simulated seconds. A round's ``time`` is when its new
        model exists, as :func:`simfl.run` records it. ``Scenario.server`` is not played: the
        twin's server is the real one, whose costs a :class:`simfl.Server` models.

    Raises
    ------
    ValueError
        Bad input, before anything starts.
    TwinError
        The deployment failed (its log tail is in the message); every process is stopped.
    """
    _require_flwr()
    _check(scenario)
    scale = check_real("twin.scale", scale, low=0.0, low_open=True)
    check_real("twin.timeout", timeout, low=0.0, low_open=True)
    check_real("twin.node_timeout", node_timeout, low=0.0, low_open=True)
    check_real("twin.job_timeout", job_timeout, low=0.0, low_open=True)
    n = scenario.fleet.size
    for d, at in (faults or {}).items():
        if not (isinstance(d, int) and 0 <= d < n):
            raise ValueError(f"twin.faults: devices must be in [0, {n - 1}], got {d!r}")
        check_int(f"twin.faults[{d}] (a round)", at, low=0)
    if port is not None and not (isinstance(port, int) and 1024 <= port <= 65535):
        raise ValueError(f"twin.port must be an int in [1024, 65535] or None, got {port!r}")
    from simfl.twin.replies import client_reference

    found = client_reference(scenario.algorithm)
    if found is not None and app is None:
        app, paths = found[0], [*found[1], *paths]
    elif found is None and app is None and not isinstance(scenario.algorithm, TimingOnly):
        raise ValueError(
            "twin.app must name the Flower app's client as 'module:attribute' (with paths= "
            "where it imports from): its client_fn or ClientApp was not found in an "
            "importable module"
        )
    if app is not None:
        from simfl.twin.clientapp import load_client_app

        try:
            load_client_app(app, list(paths))
        except Exception as err:
            raise ValueError(f"twin.app {app!r} could not be loaded: {err}") from err
    import cloudpickle

    from simfl.twin.deployment import Deployment
    from simfl.twin.serverapp import Plan

    temp = workdir is None
    folder = Path(tempfile.mkdtemp(prefix="simfl-twin-")) if workdir is None else Path(workdir)
    folder.mkdir(parents=True, exist_ok=True)
    folder = folder.resolve()
    result = folder / "result.pkl"
    dead = folder / "dead"
    dead.mkdir(exist_ok=True)
    for f in dead.iterdir():
        f.unlink()
    result.unlink(missing_ok=True)
    plan_path = folder / "plan.pkl"
    plan = Plan(
        scenario=scenario,
        scale=scale,
        result=str(result),
        dead=str(dead),
        app=app or "",
        paths=[str(Path(p).resolve()) for p in paths],
        node_timeout=node_timeout,
        job_timeout=job_timeout,
        threads=int(getattr(scenario.task, "threads", None) or 1),
    )
    plan_path.write_bytes(cloudpickle.dumps(plan))
    run_config = dict(getattr(scenario.algorithm, "run_config", None) or {})
    app_dir = _write_app(folder, plan_path, plan.paths, run_config)
    started = time.perf_counter()
    restore = _stop_on_sigterm()
    try:
        with Deployment(folder, n, port=port) as dep:
            run_id = dep.submit(app_dir)
            progress = folder / "progress"
            progress.unlink(missing_ok=True)
            deadline = time.monotonic() + timeout
            pending = dict(faults or {})
            while not result.exists():
                played = int(progress.read_text() or -1) if progress.exists() else -1
                for d, at in list(pending.items()):
                    if played >= at:
                        dep.kill_node(d)
                        del pending[d]
                for name, code in dep.alive().items():
                    if code is None:
                        continue
                    if name == "superlink":
                        raise TwinError(
                            f"the SuperLink exited with code {code}:\n{dep.log('superlink')}"
                        )
                    i = int(name.rsplit("-", 1)[1])
                    mark = dead / str(i)
                    if not mark.exists():
                        mark.write_text(repr(time.time()))
                if time.monotonic() > deadline:
                    raise TwinError(
                        f"the twin did not finish within timeout={timeout:g} s; the ServerApp's "
                        f"log:\n{dep.run_log(run_id)}"
                    )
                time.sleep(0.05)
            out = pickle.loads(result.read_bytes())
            if not out["ok"]:
                raise TwinError(f"the twin's ServerApp failed: {out['error']}\n{out['trace']}")
            facts = {
                "port": dep.port,
                "run_id": run_id,
                "workdir": str(folder) if keep or not temp else None,
            }
        left = dep.stop()
        if left:
            raise TwinError(f"processes {left} of the deployment could not be stopped")
    finally:
        restore()
        if temp and not keep:
            shutil.rmtree(folder, ignore_errors=True)
    rounds, clients = _frames(out)
    sc = scenario
    meta: dict[str, Any] = {
        "scenario": sc.name,
        "scenario_repr": repr(sc),
        "seed": sc.seed,
        "n_devices": n,
        "algorithm": sc.algorithm.name,
        "policy": sc.policy.name,
        "metrics": out["metrics"],
        "goals": dict(getattr(sc.task, "goals", {}) or {}),
        "initial_metrics": out["initial_metrics"],
        "playback": "twin",
        "stop_reason": out["stop_reason"],
        "status": "ok",
        "error": None,
        "sim_time": float(out["sim_time"]),
        "host_seconds": time.perf_counter() - started,
        "groups": _groups(sc),
        "warnings": [],
        "n_rounds": len(rounds),
        "empty_rounds": int((rounds["n_arrived"] == 0).sum()),
        "twin": {
            **facts,
            "closes": out["closes"],
            "aggregation": out["aggregation"],
            "scale": scale,
            "max_overrun": float(clients["overrun"].max()) if len(clients) else 0.0,
        },
    }
    if (
        len(clients)
        and not math.isnan(meta["twin"]["max_overrun"])
        and meta["twin"]["max_overrun"] > 0
    ):
        meta["warnings"].append(
            f"training overran its emulated compute time by up to "
            f"{meta['twin']['max_overrun']:.3g} simulated seconds: raise twin.scale"
        )
    return Results.from_tables(rounds, clients, meta)


def _stop_on_sigterm() -> Callable[[], None]:
    """Turn SIGTERM into an exception while the twin runs, so that it stops its processes.

    (A SIGKILL leaves no time for that: the deployment's processes then die with their
    parent, see :mod:`simfl.twin.deployment`.) Only in the main thread, where Python handles
    signals; returns what restores the previous handler.
    """
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum: int, frame: Any) -> None:
        raise TwinError("the twin was stopped by SIGTERM; its processes were stopped")

    previous = signal.signal(signal.SIGTERM, stop)

    def restore() -> None:
        signal.signal(signal.SIGTERM, previous)

    return restore


def _groups(sc: Scenario) -> Any:
    from simfl.results.groups import encode_groups

    return encode_groups(*sc.fleet.device_groups())
