"""Import SGLang 0.5.23's cache modules in a CPU test environment, or skip.

SGLang is installed without its dependencies (``make sglang-deps``). Its mem_cache import chain
reaches ``sglang.srt.configs``, which imports ``torchvision`` at module level for image
preprocessing; the torchvision wheel needs a matching CUDA torch, so when it is absent an inert
placeholder package is served instead. No cache code uses it: touching any of its names raises.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any, Optional, Sequence


class _Placeholder(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def _refuse(*_a: Any, **_k: Any) -> None:
            raise RuntimeError(f"torchvision.{name} is a test placeholder (torchvision absent)")

        cls = type(name, (), {"__init__": _refuse})
        setattr(self, name, cls)
        return cls


class _PlaceholderFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Optional[Sequence[str]] = None,
                  target: Any = None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname == "torchvision" or fullname.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        mod = _Placeholder(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _placeholder_torchvision() -> None:
    if importlib.util.find_spec("torchvision") is not None:
        return
    try:
        # transformers probes for torchvision once and caches the answer: ask it before the
        # placeholder exists, so transformers keeps treating torchvision as absent
        from transformers.utils import import_utils

        import_utils.is_torchvision_available()
    except ImportError:
        pass
    if not any(isinstance(f, _PlaceholderFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PlaceholderFinder())


def sglang_available() -> bool:
    return importlib.util.find_spec("sglang") is not None


def prepare() -> None:
    """Make SGLang's cache modules importable (call only when sglang is installed)."""
    _placeholder_torchvision()


def setup_test_module() -> None:
    """The shared start of a test module that drives SGLang: skip the module unless sglang is
    installed, put bench/ (the request-level replay, ``_sglang_replay``) on the path, keep the
    Hugging Face libraries offline, and make SGLang's cache modules importable."""
    import os
    from pathlib import Path

    import pytest

    pytest.importorskip("sglang")
    bench = str(Path(__file__).resolve().parents[1] / "bench")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    prepare()
