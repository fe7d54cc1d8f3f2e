"""Shared test fixtures. No torch import here: the gym's tests run without torch."""
import pytest


@pytest.fixture(scope="module")
def one_thread():
    """Tiny ops on a shared 2-core machine: one thread avoids OpenMP contention stalls.
    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
