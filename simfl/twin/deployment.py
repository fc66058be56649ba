"""A Flower deployment on this machine: one SuperLink and one SuperNode process per device.

Flower's Deployment Engine runs as separate processes that talk over HTTP on localhost: the
SuperLink (the server side, which also starts the ``flwr-serverapp`` process of a run), and one
SuperNode per device (each starts a ``flwr-clientapp`` process per message it receives). This
module starts them with bounded waits, submits a run with ``flwr run`` and stops every process
it started, children included, whatever happens.

Everything Flower writes (its home folder, the run database, the installed app, the logs)
lives in the twin's work folder; nothing outside it is touched.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Deployment", "TwinError", "free_port", "port_in_use"]

#: Environment variable every process of one deployment carries (its value: the deployment's
#: token), so that the children Flower starts are found and stopped too.
MARK = "SIMFL_TWIN_TOKEN"


class TwinError(RuntimeError):
    """A twin that could not run: what failed, and the tail of the log that says why."""


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something listens on ``host:port`` (or the port cannot be bound)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as err:
            return err.errno in (errno.EADDRINUSE, errno.EACCES)
    return False


def free_port(host: str = "127.0.0.1", avoid: Sequence[int] = ()) -> int:
    """A TCP port nothing listens on now (the operating system's choice)."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((host, 0))
            port = int(s.getsockname()[1])
        if port not in avoid:
            return port
    raise TwinError("no free TCP port found on 127.0.0.1")


def _tail(path: Path, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


def _script(name: str) -> list[str]:
    """The command of a Flower console script, from the Python that runs simfl."""
    exe = Path(sys.executable).parent / name
    if exe.exists():
        return [str(exe)]
    raise TwinError(
        f"Flower's {name!r} command was not found next to {sys.executable}; install the "
        f"extra: pip install 'simfl[flower]'"
    )


def _child_setup() -> Callable[[], None]:
    """What a child runs before it starts: its own session, and SIGKILL when its parent dies.

    The session lets :meth:`Deployment.stop` signal the child's whole process group; the
    parent-death signal (Linux ``prctl(PR_SET_PDEATHSIG)``) stops the deployment even when
    the process that started it is killed outright and no cleanup of its own can run. The C
    library is loaded here, in the parent: the child only makes two system calls.
    """
    prctl = None
    if sys.platform.startswith("linux"):
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:  # pragma: no cover - runs in the child
        os.setsid()
        if prctl is not None:
            prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG

    return setup


def _marked_pids(token: str) -> list[int]:
    """Processes whose environment carries this deployment's token (Linux ``/proc``)."""
    needle = f"{MARK}={token}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
        except OSError:
            continue
        if needle in env.split(b"\0"):
            pids.append(int(entry.name))
    return pids


@dataclass
class Deployment:
    """SuperLink and SuperNodes on localhost, as a context manager.

    Parameters
    ----------
    workdir
        Folder for Flower's home, the run database, the app and the logs.
    n_nodes
        SuperNodes to start; node ``i`` gets ``partition-id=i`` in its node config.
    port
        The SuperLink's port (``None``: a free one).
    start_timeout
        Seconds to wait for the SuperLink to listen.
    poll_interval
        Seconds between the SuperExec's polls for new tasks (Flower's
        ``FLWR_SUPEREXEC_TASK_POLL_INTERVAL``, 1 s by default in Flower).
    """

    workdir: Path
    n_nodes: int
    port: int | None = None
    start_timeout: float = 60.0
    poll_interval: float = 0.05
    token: str = field(default_factory=lambda: os.urandom(8).hex())
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.workdir = Path(self.workdir)
        if self.port is not None and port_in_use(self.port):
            raise ValueError(
                f"twin port {self.port} is already in use on 127.0.0.1; give another port "
                f"(1024-65535) or port=None for a free one"
            )

    @property
    def home(self) -> Path:
        """Flower's home folder (``FLWR_HOME``) of this deployment."""
        return self.workdir / "flwr-home"

    def env(self) -> dict[str, str]:
        """The environment of every process of the deployment."""
        env = dict(os.environ)
        env[MARK] = self.token
        env["FLWR_HOME"] = str(self.home)
        env["FLWR_SUPEREXEC_TASK_POLL_INTERVAL"] = repr(self.poll_interval)
        env["FLWR_TELEMETRY_ENABLED"] = "0"
        env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def _start(self, name: str, cmd: list[str]) -> subprocess.Popen[bytes]:
        log = open(self.workdir / f"{name}.log", "wb")  # noqa: SIM115 (closed by the process)
        try:
            proc = subprocess.Popen(
                cmd,
                cwd=self.workdir,
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_child_setup(),  # two system calls, no locks taken
            )
        finally:
            log.close()
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        """The tail of a process's log."""
        return _tail(self.workdir / f"{name}.log")

    def __enter__(self) -> Deployment:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        try:
            self._start_all()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_all(self) -> None:
        for old in self.workdir.glob("state.db*"):  # a fresh federation: no nodes of old runs
            old.unlink()
        port = self.port if self.port is not None else free_port()
        self.port = port
        (self.home / "config.toml").write_text(
            f'[superlink]\ndefault = "twin"\n\n[superlink.twin]\n'
            f'address = "127.0.0.1:{port}"\ninsecure = true\n'
        )
        link = self._start(
            "superlink",
            [
                *_script("flower-superlink"),
                "--insecure",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--database",
                str(self.workdir / "state.db"),
            ],
        )
        deadline = time.monotonic() + self.start_timeout
        while True:
            if link.poll() is not None:
                raise TwinError(
                    f"the SuperLink exited with code {link.returncode} at start:\n"
                    f"{self.log('superlink')}"
                )
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if time.monotonic() > deadline:
                raise TwinError(
                    f"the SuperLink did not listen on 127.0.0.1:{port} within "
                    f"{self.start_timeout:g} s:\n{self.log('superlink')}"
                )
            time.sleep(0.1)
        used = [port]
        for i in range(self.n_nodes):
            node_port = free_port(avoid=used)
            used.append(node_port)
            self._start(
                f"supernode-{i}",
                [
                    *_script("flower-supernode"),
                    "--insecure",
                    "--superlink",
                    f"127.0.0.1:{port}",
                    "--node-config",
                    f"partition-id={i} num-partitions={self.n_nodes}",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(node_port),
                    "--max-retries",
                    "20",
                ],
            )

    def alive(self) -> dict[str, int | None]:
        """Each process's exit code (``None``: still running)."""
        return {name: p.poll() for name, p in self.procs.items()}

    def kill_node(self, i: int) -> None:
        """Kill SuperNode ``i`` and its ClientApp processes at once (a device that dies)."""
        proc = self.procs[f"supernode-{i}"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)

    def submit(self, app_dir: Path, timeout: float = 60.0) -> int:
        """Start a run of the Flower app in ``app_dir`` (``flwr run``); its run id."""
        try:
            out = subprocess.run(
                [*_script("flwr"), "run", str(app_dir), "twin", "--format", "json"],
                cwd=self.workdir,
                env=self.env(),
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as err:
            raise TwinError(f"`flwr run` did not return within {timeout:g} s") from err
        text = out.stdout.decode(errors="replace")
        try:
            start = text.index("{")
            reply = json.loads(text[start : text.rindex("}") + 1])
        except ValueError:
            reply = {}
        if out.returncode != 0 or not reply.get("success"):
            raise TwinError(
                f"`flwr run` failed (exit code {out.returncode}):\n{text[-2000:]}\n"
                f"{out.stderr.decode(errors='replace')[-2000:]}"
            )
        return int(reply["run-id"])

    def run_log(self, run_id: int, timeout: float = 20.0) -> str:
        """The ServerApp's log of a run (``flwr log``), for error messages."""
        try:
            out = subprocess.run(
                [*_script("flwr"), "log", str(run_id), "twin", "--show"],
                cwd=self.workdir,
                env=self.env(),
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return "(no log: `flwr log` timed out)"
        return out.stdout.decode(errors="replace")[-4000:]

    def stop(self, grace: float = 5.0) -> list[int]:
        """Stop every process of the deployment (SIGTERM, then SIGKILL); those left, if any."""
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        for _ in range(3):
            left = [p.pid for p in self.procs.values() if p.poll() is None]
            left += _marked_pids(self.token)
            if not left:
                break
            for pid in set(left):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            for proc in self.procs.values():
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=2.0)
            time.sleep(0.1)
        return _marked_pids(self.token)

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def pids(self) -> Iterator[int]:
        """Every live process of the deployment."""
        yield from _marked_pids(self.token)
