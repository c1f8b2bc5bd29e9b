# Test scaffolding for bench/lab/gpu_plugin12.sh only (on its PYTHONPATH): SGLang's cache modules, imported on a CUDA
# machine, reach CUDA-only packages the device image lacks (sgl_kernel, ...). Every top-level
# name in RADIXKV_PLACEHOLDERS is served as an inert package whose attributes raise when used.
import importlib.abc
import importlib.machinery
import os
import sys
import types

_NAMES = {n for n in os.environ.get("RADIXKV_PLACEHOLDERS", "").split(",") if n}


class _Any:
    """Stands for anything: attributes, calls, items and subclasses all give more of it."""

    def __init__(self, *_a, **_k):
        pass

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Any()

    def __call__(self, *a, **_k):
        # used as a decorator: hand the function back unchanged
        return a[0] if len(a) == 1 and callable(a[0]) else _Any()

    def __getitem__(self, _k):
        return _Any()

    def __iter__(self):
        return iter(())

    def __mro_entries__(self, _bases):
        return (object,)


class _Placeholder(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        v = _Any()
        setattr(self, name, v)
        return v


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in _NAMES:
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _Placeholder(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


if _NAMES:
    sys.meta_path.insert(0, _Finder())
