"""Fixtures shared by several test modules (helpers shared as plain functions live in the
``_*.py`` modules next to this file)."""

from __future__ import annotations

import os
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


@pytest.fixture(scope="module")
def extension_backend() -> Iterator[None]:
    """The module's ops run on the compiled kernels (``RADIXKV_OPS_BACKEND=extension``), built or
    loaded once before its first test; the variable is cleared after its last. GPU modules take it
    in their ``pytestmark``; without a GPU their skip mark skips each test before its fixtures."""
    os.environ["RADIXKV_OPS_BACKEND"] = "extension"
    from radixkv.ops import loader  # here: building the kernels needs a GPU toolchain

    loader.load()
    yield
    os.environ.pop("RADIXKV_OPS_BACKEND", None)


_NARROWING = ("RADIXKV_HEAD_DIMS", "RADIXKV_DTYPES", "RADIXKV_PAGE_SIZES", "RADIXKV_KV_DTYPES")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """A GPU test that needs a kernel variant a narrowed build left out (the RADIXKV_* build
    variables set; the library's error names what is "supported in this build" or "not compiled
    in this build") is skipped, not failed. Without those variables nothing is skipped here."""
    try:
        return (yield)
    except Exception as exc:
        if "in this build" in str(exc) and any(os.environ.get(v) for v in _NARROWING):
            pytest.skip(f"variant not in this narrowed build: {str(exc).splitlines()[0][:200]}")
        raise
