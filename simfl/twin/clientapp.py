"""The twin's ClientApp: the user's Flower ClientApp inside its device's emulated timeline.

Each train message carries, in a ``ConfigRecord`` named ``"simfl"``, the wall-clock seconds the
device's job takes in the scenario (its download, compute and upload, already multiplied by the
twin's time scale), when it fails (if it does), the wall-clock deadline of the round (if any)
and the seed of its training. The user's ClientApp is imported first (a device has its app
loaded before the model arrives; in Flower's process per message, that import is part of the
process start, which the server sees as the message's dispatch). The job then:

1. waits out its download,
2. runs the user's ClientApp for real (the ``train`` function of a Message-API ``ClientApp``,
   or the ``fit`` of a ``client_fn``'s client), and waits until its compute time has passed
   (if training took longer, the excess is recorded as ``overrun``: the time scale is then too
   small for this machine),
3. waits out its upload,

and replies with the user's reply plus the measured instants. A job whose device fails before
it ends replies ``dropped`` at that instant (the server notices a dropout when it happens, like
a broken connection); one still running at the round's deadline stops there and replies
``stopped``. Instants are wall-clock seconds (``time.time()``), comparable across the
processes of one machine.
"""

from __future__ import annotations

import importlib
import sys
import time
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp

__all__ = ["app", "load_client_app"]

app = ClientApp()

_LOADED: dict[str, ClientApp] = {}


def load_client_app(reference: str, paths: list[str]) -> ClientApp:
    """The user's ClientApp from ``"module:attribute"`` (a ``ClientApp`` or a ``client_fn``)."""
    if reference in _LOADED:
        return _LOADED[reference]
    for p in paths:
        if p not in sys.path:
            sys.path.insert(0, p)
    module, _, attr = reference.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    client_app = obj if isinstance(obj, ClientApp) else ClientApp(client_fn=obj)
    _LOADED[reference] = client_app
    return client_app


def _wait(until: float, stop: float) -> bool:
    """Sleep until ``until``; False if ``stop`` (a deadline or failure instant) comes first."""
    end = min(until, stop)
    while (left := end - time.time()) > 0:
        time.sleep(min(left, 0.05))
    return until <= stop


def _reply(msg: Message, content: RecordDict | None, timing: dict[str, Any]) -> Message:
    out = content if content is not None else RecordDict()
    out["simfl"] = ConfigRecord(timing)
    return Message(content=out, reply_to=msg)


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Play one job of the device on this SuperNode."""
    job: dict[str, Any] = dict(msg.content["simfl"])
    if job["app"]:
        # a device has its app loaded before the model arrives: loading it in this fresh
        # process is Flower's process start, on the clock before the job (``dispatch``)
        load_client_app(str(job["app"]), list(job["paths"]))
    t_recv = time.time()
    download, compute, upload = float(job["download"]), float(job["compute"]), float(job["upload"])
    fail_after = float(job["fail_after"])  # busy seconds until the device fails (inf: never)
    deadline = float(job["deadline"])  # wall clock (inf: none)
    failure = t_recv + fail_after
    stop = min(failure, deadline)
    timing: dict[str, Any] = {"t_recv": t_recv, "overrun": 0.0, "status": "arrived"}

    def ended(how: str) -> Message:
        timing["status"] = "dropped" if failure <= deadline else how
        timing["t_done"] = time.time()
        return _reply(msg, None, timing)

    if not _wait(t_recv + download, stop):
        return ended("stopped")
    t_compute = time.time()
    timing["t_compute"] = t_compute
    content = None
    if job["app"]:
        import contextlib
        import random

        import numpy as np

        user = load_client_app(str(job["app"]), list(job["paths"]))
        msg.content = RecordDict({k: v for k, v in msg.content.items() if k != "simfl"})
        seed = int(job["seed"])
        # the global generators seeded as simfl.flower seeds them around a client's job; torch
        # only when the app imported it (importing it here would bill its import to the job)
        random.seed(seed)
        np.random.seed(seed % 2**32)  # noqa: NPY002 - the app's global generator
        torch = sys.modules.get("torch")
        rng: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()
        if torch is not None:
            torch.set_num_threads(int(job["threads"]))
            rng = torch.random.fork_rng()
        with rng:
            if torch is not None:
                torch.default_generator.manual_seed(seed)
            try:
                reply = user(msg, context)
            except Exception as err:  # the app's failure is the job's: recorded, not fatal
                timing["error"] = f"{type(err).__name__}: {err}"
                reply = None
        if reply is not None and reply.has_error():
            timing["error"] = str(reply.error.reason)
        elif reply is not None:
            content = reply.content
    trained = time.time() - t_compute
    timing["train_seconds"] = trained
    timing["overrun"] = max(0.0, trained - compute)
    if not _wait(t_compute + compute, stop):
        return ended("stopped")
    t_upload = time.time()
    timing["t_upload"] = t_upload
    if not _wait(t_upload + upload, stop):
        return ended("stopped")
    timing["t_done"] = time.time()
    return _reply(msg, content, timing)


@app.query()
def hello(msg: Message, context: Context) -> Message:
    """Say which device this SuperNode plays (its ``partition-id``)."""
    partition = int(context.node_config["partition-id"])
    return Message(RecordDict({"simfl": ConfigRecord({"partition": partition})}), reply_to=msg)
