"""Fake (meta) implementations of the ``torch.ops.radixkv`` ops, for torch.compile and opcheck.

Every op writes into tensors it is given (``Tensor(a!)`` in its schema) and returns nothing, so a
fake implementation only has to exist and accept the arguments. Registered after the extension
library is loaded (an op must be defined before its fake is registered).
"""

from __future__ import annotations

from typing import Any

import torch

_done = False


def _no_output(*args: Any) -> None:
    return None


def register() -> None:
    global _done
    if _done:
        return
    for name in ("store_kv", "copy_blocks", "paged_decode", "extend_attention"):
        if not hasattr(torch.ops.radixkv, name):
            continue  # extend_attention is built by its own binding unit; it may be absent
        qual = f"radixkv::{name}"
        try:
            torch.library.register_fake(qual)(_no_output)
        except RuntimeError as exc:
            # The binding unit may already provide a fake (e.g. a C++ Meta kernel); keep that one.
            if "already has" not in str(exc) and "already registered" not in str(exc):
                raise
    _done = True
