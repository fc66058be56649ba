"""Fixtures shared by several test files."""

from collections.abc import Iterator

import pytest


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    """Run the test with one torch thread (restored afterwards): small nets, exact repeats."""
    from simfl.neural.task import torch_threads

    with torch_threads(1):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the ``pure_python`` tests where mypyc's builds run (they patch compiled classes).

    ``tests/test_native.py`` runs them on the Python sources in a subprocess instead.
    """
    from simfl.engine.flows import _native

    if not _native.ACTIVE:
        return
    skip = pytest.mark.skip(
        reason="patches a class that mypyc compiled: run on the Python sources by "
        "tests/test_native.py"
    )
    for item in items:
        if item.get_closest_marker("pure_python") is not None:
            item.add_marker(skip)
