"""Dask scheduler addresses: checked before any connection, and probed with a bounded wait.

:func:`check_scheduler` refuses a malformed address (a scheme Dask does not speak, no host, a
port outside 1-65535) before anything runs. :func:`probe_scheduler` then connects within
:data:`CONNECT_TIMEOUT` seconds and, over ``tcp://``, reads the greeting a Dask scheduler sends
first on every connection: a peer that says nothing, or something else, is not a scheduler.
Dask's own client would wait for such a peer without end, or size a buffer after its first
bytes (an HTTP server's reply reads as a 3 EiB message), so it is found out here, in one line
(:class:`SchedulerError`).
"""

from __future__ import annotations

import errno
import socket
import struct
import urllib.parse

__all__ = [
    "CONNECT_TIMEOUT",
    "SCHEDULER_SCHEMES",
    "SchedulerError",
    "check_scheduler",
    "probe_scheduler",
]

#: Transports of a Dask scheduler address (``distributed.comm``): all but ``inproc`` (a
#: scheduler in this process) name a host and port.
SCHEDULER_SCHEMES = ("tcp", "tls", "ws", "wss", "ucx", "inproc")
#: Seconds a Dask scheduler has to accept a connection, and again to greet it, before
#: :class:`~simfl.sweeps.Dask` gives up.
CONNECT_TIMEOUT = 10.0
#: The longest greeting a Dask scheduler sends first (its handshake: a few hundred bytes).
_GREETING_MAX = 1 << 20
#: Most frames of a Dask scheduler's greeting.
_GREETING_FRAMES = 64


class SchedulerError(ConnectionError):
    """No Dask scheduler answers at an address, or what answers is not one (a one-line message)."""


def check_scheduler(address: str) -> str:
    """The scheduler ``address`` as ``scheme://host:port``, checked before any connection.

    An address without a scheme is ``tcp://``. The scheme must be one of
    :data:`SCHEDULER_SCHEMES`, the host non-empty and the port in 1-65535 (an ``inproc://``
    address, of a scheduler in this process, is returned as it is).

    Raises
    ------
    ValueError
        If the address is not like that, naming the part that is wrong.
    """
    if not isinstance(address, str) or not address.strip():
        raise ValueError(f"Dask.scheduler must be an address like tcp://host:8786, got {address!r}")
    text = address.strip()
    url = urllib.parse.urlsplit(text if "://" in text else f"tcp://{text}")
    where = f"Dask.scheduler {address!r}"
    if url.scheme not in SCHEDULER_SCHEMES:
        schemes = ", ".join(f"{s}://" for s in SCHEDULER_SCHEMES)
        raise ValueError(f"{where}: the scheme must be one of {schemes}, got {url.scheme!r}")
    if url.scheme == "inproc":
        return text
    if not url.hostname:
        raise ValueError(f"{where} names no host; give one like tcp://host:8786")
    try:
        port = url.port
    except ValueError:  # not a number, or out of 0-65535
        port = -1
    if port is None:
        raise ValueError(f"{where} names no port; give one like tcp://host:8786")
    if not 1 <= port <= 65535:
        port_text = url.netloc.rpartition(":")[2]
        raise ValueError(f"{where}: the port must be an integer in 1-65535, got {port_text!r}")
    if url.path.strip("/") or url.query or url.fragment:
        raise ValueError(f"{where} must be only scheme://host:port, got {text!r}")
    host = f"[{url.hostname}]" if ":" in url.hostname else url.hostname
    return f"{url.scheme}://{host}:{port}"


def probe_scheduler(address: str, timeout: float | None = None) -> None:
    """Fail in one line, within about ``2 * timeout`` seconds, if no Dask scheduler is there.

    Connects to the checked ``address`` (:func:`check_scheduler`) within ``timeout`` seconds
    (default :data:`CONNECT_TIMEOUT`). Over ``tcp://``, where a scheduler greets every
    connection first, its greeting must then arrive within ``timeout`` and look like one (a
    short message of a few frames): a peer that says nothing or something else is not a
    scheduler, and is found out before Dask's client would wait for it without end or size a
    buffer after its first bytes.

    Raises
    ------
    SchedulerError
        If nothing answers, or what answers is not a Dask scheduler.
    ValueError
        If the address is malformed (:func:`check_scheduler`).
    """
    wait = CONNECT_TIMEOUT if timeout is None else timeout
    url = urllib.parse.urlsplit(check_scheduler(address))
    if url.scheme == "inproc":  # in this process: nothing to connect to
        return
    host, port = url.hostname or "", url.port or 0
    try:
        with socket.create_connection((host, port), timeout=wait) as conn:
            if url.scheme == "tcp":
                _read_greeting(conn, address, wait)
    except OSError as exc:
        if isinstance(exc, SchedulerError):
            raise
        reason = "no answer" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise SchedulerError(
            f"no Dask scheduler answers at {address} ({reason} within {wait:g} s); start one "
            f"with `dask scheduler` or check the address"
        ) from None


def _read_greeting(conn: socket.socket, address: str, wait: float) -> None:
    """Read a Dask scheduler's first message on ``conn`` within ``wait`` s, or raise."""
    conn.settimeout(wait)
    not_dask = f"what answers at {address} is not a Dask scheduler"
    try:
        (size,) = struct.unpack("Q", _exactly(conn, 8))
        if not 16 <= size <= _GREETING_MAX:
            raise SchedulerError(f"{not_dask} (its first message does not look like Dask's)")
        body = _exactly(conn, size)
    except TimeoutError:
        raise SchedulerError(f"{not_dask} (it said nothing within {wait:g} s)") from None
    except ConnectionError as exc:
        raise SchedulerError(f"{not_dask} ({exc.strerror or exc})") from None
    (frames,) = struct.unpack_from("Q", body)
    if not 1 <= frames <= _GREETING_FRAMES or 8 * (1 + frames) > size:
        raise SchedulerError(f"{not_dask} (its first message does not look like Dask's)")


def _exactly(conn: socket.socket, n: int) -> bytes:
    """``n`` bytes from ``conn``; ``ConnectionError`` if it closes first."""
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(min(n - got, 65536))
        if not chunk:
            raise ConnectionError(errno.ECONNRESET, "it closed the connection")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
