"""Fixtures shared by several test files."""

from collections.abc import Iterator

import pytest


@pytest.fixture
def torch_one_thread() -> Iterator[None]:
    """Run the test with one torch thread (restored afterwards): small nets, exact repeats."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
