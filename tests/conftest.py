"""Fixtures shared by several test modules (helpers shared as plain functions live in the
``_*.py`` modules next to this file)."""

from __future__ import annotations

from typing import Iterator

import pytest


@pytest.fixture
def one_torch_thread() -> Iterator[None]:
    """torch on one intra-op thread for the test, the setting restored after it: the models under
    test are tiny, and more threads only contend on a small shared machine. Modules take it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch  # here, not at the top: the radix / pool tests run without torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
