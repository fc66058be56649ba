"""Fixtures shared by several test files."""

from collections.abc import Iterator

import pytest


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    """Run the test with one torch thread (restored afterwards): small nets, exact repeats."""
    from simfl.neural.task import torch_threads

    with torch_threads(1):
        yield
