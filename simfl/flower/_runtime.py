"""Calling Flower code inside a run: seeded global generators, Flower's log, clear errors.

A Flower app draws from the global generators (torch's, through ``Net()`` and a shuffling
``DataLoader``; numpy's and Python's ``random`` in some apps; Flower's own node sampling uses
``random``). Every call simfl makes into Flower code runs inside :func:`seeded`: the three
global generators are seeded from a keyed stream of the run for the call and restored
afterwards, so that a client's update depends on the run's seed, the client and the round
alone (lazy exactness), and nothing outside the call sees a draw.
"""

from __future__ import annotations

import logging
import random
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from flwr.supercore.task_identity import TaskIdentity

__all__ = ["SERVER_NODE_ID", "ClientError", "calling", "identity", "quiet", "seeded"]

#: The node id of the server side (Flower's ``SUPERLINK_NODE_ID``).
SERVER_NODE_ID = 1
#: The task id a ServerApp or ClientApp process runs as (Flower's compatibility server uses 1).
_TASK_ID = 1


class ClientError(RuntimeError):
    """A Flower client raised: the message names the client, the call and the server round."""


def _torch() -> Any:
    """The torch module where it is installed (a Flower app need not use it), else ``None``."""
    if "torch" in sys.modules:
        return sys.modules["torch"]
    try:
        import torch
    except ImportError:  # pragma: no cover - simfl[flower] installs torch
        return None
    return torch


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block with torch's, numpy's and Python's global generators seeded with ``seed``.

    Their states are restored when the block ends (torch's with ``torch.random.fork_rng``,
    CUDA's too where CUDA is in use), so the block's draws never leak out of it.
    """
    py_state = random.getstate()
    np_state = np.random.get_state()  # noqa: NPY002 - saved to be restored: see the module doc
    torch = _torch()
    try:
        random.seed(seed)
        np.random.seed(seed % 2**32)  # noqa: NPY002 - the app's global generator, restored after
        if torch is None:  # pragma: no cover - simfl[flower] installs torch
            yield
            return
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        devices = list(range(torch.cuda.device_count())) if cuda else []
        with torch.random.fork_rng(devices=devices):
            torch.default_generator.manual_seed(seed)
            if cuda:
                torch.cuda.manual_seed_all(seed)
            yield
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)  # noqa: NPY002


@contextmanager
def quiet(enabled: bool) -> Iterator[None]:
    """Silence Flower's INFO log lines in the block (``enabled``); warnings still show.

    Flower's strategies log every sampling and aggregation at INFO; in a simulation of many
    rounds those lines say nothing simfl's records do not.
    """
    logger = logging.getLogger("flwr")
    level = logger.level
    if enabled and logger.getEffectiveLevel() < logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield
    finally:
        logger.setLevel(level)


@contextmanager
def identity(run_id: int, node_id: int) -> Iterator[None]:
    """Run the block as Flower process ``node_id`` of run ``run_id`` (restored afterwards).

    Flower stamps every new instruction ``Message`` with the identity of the process that
    makes it (``TaskIdentity``: a ServerApp's or a ClientApp's, set when Flower starts the
    process); in one process simfl plays both sides, so it sets the identity of the side
    whose code runs.
    """
    names = ("task_id", "run_id", "node_id")
    saved = [_identity(name) for name in names]
    TaskIdentity.task_id = _TASK_ID
    TaskIdentity.run_id = run_id
    TaskIdentity.node_id = node_id
    try:
        yield
    finally:
        for name, value in zip(names, saved, strict=True):
            setattr(TaskIdentity, name, value)  # None: unset again, as it was


def _identity(name: str) -> int | None:
    """``TaskIdentity``'s ``name`` (``None`` where unset: reading it then raises)."""
    try:
        return int(getattr(TaskIdentity, name))
    except RuntimeError:
        return None


@contextmanager
def calling(silent: bool, seed: int, run_id: int, node_id: int) -> Iterator[None]:
    """A call into Flower code: :func:`quiet`, :func:`seeded` and :func:`identity` together."""
    with quiet(silent), seeded(seed), identity(run_id, node_id):
        yield
