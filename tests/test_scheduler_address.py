"""Dask scheduler addresses are checked before connecting; a failure is one line, in seconds.

A malformed address (a port out of range, an unknown scheme) is refused before anything runs;
a peer that is not a Dask scheduler (here a small server on the loopback that says nothing, or
something else) is found out within ``CONNECT_TIMEOUT``, before Dask's client would wait for it
without end or size a buffer after its first bytes.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import textwrap
import threading
from collections.abc import Iterator

import pytest

import simfl
from simfl.cli import main
from simfl.sweeps import Dask, SchedulerError, scheduler
from tests.helpers import tiny_linear

pytest.importorskip("distributed")

FILE = textwrap.dedent(
    """
    from simfl import Fleet, Scenario, algorithms, dists, policies

    SCENARIO = Scenario(
        task=None,
        algorithm=algorithms.TimingOnly(),
        fleet=Fleet.homogeneous(4, compute=dists.Exponential(mean=1.0)),
        policy=policies.WaitAll(),
        rounds=2,
    )
    """
)


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Half a second to connect and be greeted, one for Dask's own connection attempts."""
    monkeypatch.setattr(scheduler, "CONNECT_TIMEOUT", 0.5)
    dask = pytest.importorskip("dask")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        yield


@contextlib.contextmanager
def _peer(answer: bytes | None) -> Iterator[str]:
    """A TCP server on the loopback that accepts, sends ``answer`` (or nothing), and waits.

    It closes each connection after 5 s, so that a client that waits for more is not stuck
    for ever.
    """
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    stop = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            held.append(conn)
            if answer is not None:
                conn.sendall(answer)
            threading.Timer(5.0, conn.close).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"tcp://127.0.0.1:{server.getsockname()[1]}"
    finally:
        stop.set()
        thread.join()
        server.close()
        for conn in held:
            conn.close()


@pytest.mark.parametrize(
    ("address", "says"),
    [
        ("tcp://127.0.0.1:99999", "the port must be an integer in 1-65535, got '99999'"),
        ("tcp://127.0.0.1:0", "the port must be an integer in 1-65535, got '0'"),
        ("tcp://127.0.0.1:http", "the port must be an integer in 1-65535, got 'http'"),
        ("ws://", "names no host"),
        ("tcp://127.0.0.1", "names no port"),
        ("http://127.0.0.1:8786", "the scheme must be one of tcp://, tls://, ws://"),
        ("tcp://127.0.0.1:8786/x", "must be only scheme://host:port"),
    ],
)
def test_a_malformed_address_is_refused_before_connecting(address, says):
    with pytest.raises(ValueError, match=r"Dask\.scheduler") as caught:
        Dask(address)
    assert says in str(caught.value)


@pytest.mark.parametrize("address", ["tcp://127.0.0.1:99999", "ws://"])
def test_the_cli_refuses_a_malformed_address_in_one_line(tmp_path, capsys, address, quick):
    file = tmp_path / "s.py"
    file.write_text(FILE)
    code = main(["sweep", str(file), "--store", str(tmp_path / "st"), "--scheduler", address])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("error: --scheduler: Dask.scheduler")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "st").exists()  # nothing ran


@pytest.mark.parametrize(
    ("answer", "says"),
    [
        (None, "it said nothing within 0.5 s"),
        (b"HTTP/1.1 400 Bad Request\r\n\r\n" * 3, "does not look like Dask's"),
        ((10**9).to_bytes(8, "little"), "does not look like Dask's"),
    ],
)
def test_a_peer_that_is_not_a_scheduler_fails_in_one_line(tmp_path, capsys, answer, says, quick):
    file = tmp_path / "s.py"
    file.write_text(FILE)
    with _peer(answer) as address:
        code = main(["sweep", str(file), "--store", str(tmp_path / "st"), "--scheduler", address])
        err = capsys.readouterr().err
        assert code == 2, err
        assert err.startswith(f"error: what answers at {address} is not a Dask scheduler")
        assert says in err and len(err.strip().splitlines()) == 1
        # the Python API says the same, with an exception of its own
        with pytest.raises(SchedulerError, match="is not a Dask scheduler"):
            simfl.sweep([tiny_linear()], scheduler=address, progress=False)


def test_nobody_listening_fails_in_one_line(tmp_path, capsys, quick):
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
    file = tmp_path / "s.py"
    file.write_text(FILE)
    code = main(["sweep", str(file), "--scheduler", f"tcp://127.0.0.1:{port}"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(
        f"error: no Dask scheduler answers at tcp://127.0.0.1:{port}"
    )
    assert len(err.strip().splitlines()) == 1


def test_a_dask_scheduler_passes_the_probe():
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=0,
        processes=False,
        protocol="tcp",
        dashboard_address=None,
        silence_logs=logging.ERROR,
    ) as cluster:
        scheduler.probe_scheduler(cluster.scheduler_address, timeout=5)
        address = cluster.scheduler_address.removeprefix("tcp://")  # tcp:// by default
        scheduler.probe_scheduler(address, timeout=5)
        with Dask(cluster.scheduler_address) as dask:
            assert dask.describe() == f"dask ({cluster.scheduler_address}, 0 workers)"
