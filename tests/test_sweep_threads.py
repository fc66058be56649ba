"""Sweep workers limit their compute threads: real worker processes report the thread count
they were given (environment for libraries loaded later, torch's own count at once), the
default is each worker's share of the cores, and bad values are refused naming the field."""

import os

import pytest

from simfl.sweeps.executors import (
    THREAD_VARS,
    Dask,
    Inline,
    Processes,
    limit_threads,
    make_executor,
)


def report_threads(_: int) -> tuple[dict[str, str | None], int | None, int]:
    """In a worker: the thread variables, torch's thread count (if loaded) and the pid."""
    import sys

    torch = sys.modules.get("torch")
    count = None if torch is None else torch.get_num_threads()
    return {v: os.environ.get(v) for v in THREAD_VARS}, count, os.getpid()


@pytest.mark.parametrize("threads", [1, 3])
def test_worker_processes_report_the_limited_thread_count(threads):
    pytest.importorskip("torch")  # loaded here, so the forked workers inherit a loaded torch
    with Processes(2, threads=threads) as pool:
        out = dict(pool.map_unordered(report_threads, [0, 1, 2]))
    assert sorted(out) == [0, 1, 2]
    for env, count, pid in out.values():
        assert pid != os.getpid()
        assert env == {v: str(threads) for v in THREAD_VARS}
        assert count == threads


def test_the_default_is_each_workers_share_of_the_cores():
    cores = os.cpu_count() or 1
    assert Processes(1).threads == cores
    assert Processes(2).threads == max(1, cores // 2)
    assert Processes(4 * cores).threads == 1
    assert make_executor("processes", workers=2, threads=5).threads == 5
    assert Dask(workers=2).threads == max(1, cores // 2)
    assert Dask("tcp://127.0.0.1:1").threads == 1  # a running cluster: Dask's own default
    assert Dask("tcp://127.0.0.1:1", threads=4).threads == 4


def test_limit_threads_sets_torch_and_the_environment(monkeypatch):
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    for v in THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    try:
        limit_threads(2)
        assert torch.get_num_threads() == 2
        assert all(os.environ[v] == "2" for v in THREAD_VARS)
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Processes(2, threads=0), r"Processes.threads"),
        (lambda: Processes(2, threads=1.5), r"Processes.threads"),
        (lambda: Dask(workers=2, threads=0), r"Dask.threads"),
        (lambda: make_executor(Inline(), threads=2), r"threads= configure a named executor"),
    ],
)
def test_bad_thread_counts_are_refused(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make()


def test_the_cli_parses_threads_and_keeps_it_in_the_resume_command():
    from simfl import cli
    from simfl.cli.commands.sweep import resume_command

    args = cli.parser().parse_args(["sweep", "s.py", "--workers", "2", "--threads", "1"])
    assert args.threads == 1
    line = resume_command(args, "runs/x")
    assert "--workers 2" in line and "--threads 1" in line
