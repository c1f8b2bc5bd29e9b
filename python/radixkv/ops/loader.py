"""Build and load the HIP kernels as a PyTorch extension (JIT, cached), on first use.

Every ``hip/*.cu`` and ``hip/*.cpp`` is compiled into one library with
``torch.utils.cpp_extension.load``: nvcc on a CUDA torch (sm_90a and sm_80 unless
``TORCH_CUDA_ARCH_LIST`` says otherwise; extend_attention uses wgmma only in an sm_90a build),
hipcc on a ROCm torch. What a kernel does on each target is fixed in the sources (per-architecture
traits, hip/README.md); the settings below choose sources, targets and which instantiations are
built, never a kernel's tuning. The library registers the
``torch.ops.radixkv.*`` ops through ``TORCH_LIBRARY``; the fake (meta) implementations are then
registered from :mod:`radixkv.ops._fake`.

The sources are the first of: ``RADIXKV_HIP_DIR``; the copy the package carries
(``radixkv/_hip``: in a wheel, the files themselves; in a checkout, a link to ``hip/``); ``hip/`` of
the checkout the package runs from. So an installed wheel builds its kernels without a checkout.

Environment:
- ``RADIXKV_HIP_DIR``: kernel sources to build instead of the package's own.
- ``RADIXKV_BUILD_DIR``: build cache (default: ``~/.cache/radixkv/build``). Its subfolder is named
  by a hash of the sources' contents, the flags, the arch list and the torch build, so a change to
  any of them builds afresh and an unchanged set is not rebuilt.
- ``RADIXKV_HEAD_DIMS`` (e.g. ``128`` or ``64,128``), ``RADIXKV_DTYPES`` (``bf16``, ``fp16``),
  ``RADIXKV_PAGE_SIZES`` (``1,16``): compile only these variants (faster builds, the same kernels);
  a call needing another one raises an error naming it. ``RADIXKV_KV_DTYPES`` (``e4m3``, ``e5m2``, or
  ``none``): the FP8 cache variants of store_kv / paged_decode / extend_attention compiled in (default:
  both).
- ``RADIXKV_VERBOSE_BUILD=1``: show the compiler's output.
- ``RADIXKV_PREBUILT_LIB``: path of an already built library (e.g. built on another machine with
  the same torch); it is loaded instead of building.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import torch

_lock = threading.Lock()
_loaded = False
_error: Exception | None = None

# Build-scope switches understood by hip/dispatch.h (each defaults to 1 = compiled in): they leave
# instantiations out, they do not change one.
_VARIANTS = {
    "RADIXKV_HEAD_DIMS": ("RADIXKV_HD_", ("64", "128", "256")),
    "RADIXKV_DTYPES": ("RADIXKV_DT_", ("fp16", "bf16")),
    "RADIXKV_PAGE_SIZES": ("RADIXKV_PS_", ("1", "16", "64")),
    "RADIXKV_KV_DTYPES": ("RADIXKV_KV_", ("e4m3", "e5m2")),
}


def _candidates() -> list[tuple[str, Path]]:
    env = os.environ.get("RADIXKV_HIP_DIR")
    if env:
        # An explicit choice is the only candidate: a typo must not silently build other sources.
        return [("RADIXKV_HIP_DIR", Path(env))]
    package = Path(__file__).resolve().parents[1]  # .../radixkv
    return [
        ("the package's bundled copy", package / "_hip"),
        ("the checkout's hip/", package.parents[1] / "hip"),  # python/radixkv -> repository root
    ]


def hip_dir() -> Path:
    """The kernel sources: ``RADIXKV_HIP_DIR`` if set, else the copy bundled in the package
    (``radixkv/_hip``), else ``hip/`` of the checkout this package runs from."""
    tried = _candidates()
    for _, path in tried:
        if (path / "platform.h").is_file():
            return path
    where = "; ".join(f"{what}: {path}" for what, path in tried)
    raise FileNotFoundError(
        f"radixkv kernel sources (platform.h and the *.cu units) not found ({where}). A wheel "
        "carries them under radixkv/_hip; reinstall radixkv, or set RADIXKV_HIP_DIR to a hip/ folder"
    )


#: Files of the kernel sources: compiled units and the headers they include.
SOURCE_PATTERNS = ("*.cu", "*.cuh", "*.h", "*.cpp")


def source_files(directory: Path | None = None) -> list[Path]:
    """Every kernel source file (units and headers) under ``directory`` (default :func:`hip_dir`),
    sorted by name."""
    d = hip_dir() if directory is None else directory
    return sorted({p for pat in SOURCE_PATTERNS for p in d.glob(pat)}, key=lambda p: p.name)


def sources_digest(directory: Path | None = None) -> str:
    """SHA-1 over the names and contents of :func:`source_files`: changes whenever any unit or
    header does (torch's own rebuild check hashes only the units it is given)."""
    h = hashlib.sha1()
    for p in source_files(directory):
        h.update(p.name.encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()


def variant_defines() -> list[str]:
    """``-D`` flags switching off the variants the environment excludes."""
    flags: list[str] = []
    for env, (prefix, values) in _VARIANTS.items():
        want = os.environ.get(env)
        if not want:
            continue
        keep = {w.strip().lower() for w in want.split(",") if w.strip()} - {"none"}
        unknown = keep - set(values)
        if unknown:
            raise ValueError(f"{env}={want!r}: unknown {sorted(unknown)} (known: {', '.join(values)})")
        flags += [f"-D{prefix}{v.upper()}={int(v in keep)}" for v in values]
    return flags


def sources() -> list[str]:
    d = hip_dir()
    srcs = sorted(str(p) for p in d.glob("*.cu")) + sorted(str(p) for p in d.glob("*.cpp"))
    if not srcs:
        raise FileNotFoundError(f"no kernel sources (*.cu, *.cpp) under {d}")
    return srcs


def _build() -> None:
    from torch.utils import cpp_extension

    defines = variant_defines()
    is_rocm = torch.version.hip is not None
    if not is_rocm and "TORCH_CUDA_ARCH_LIST" not in os.environ:
        # 9.0a (not 9.0): Hopper's arch-specific target, which extend_attention's wgmma path
        # needs (the other units are unaffected; 9.0a code runs on the same CC 9.0 devices).
        os.environ["TORCH_CUDA_ARCH_LIST"] = "8.0;9.0a"
    toolkit = torch.version.hip if is_rocm else torch.version.cuda
    key = hashlib.sha1(" ".join([
        *defines, os.environ.get("TORCH_CUDA_ARCH_LIST", ""), torch.__version__, str(toolkit),
        sources_digest(),
    ]).encode())
    name = "radixkv_kernels_" + key.hexdigest()[:12]
    base = Path(os.environ.get("RADIXKV_BUILD_DIR", Path.home() / ".cache" / "radixkv" / "build"))
    build_dir = base / name
    build_dir.mkdir(parents=True, exist_ok=True)
    inc = str(hip_dir())
    cflags = ["-O3", "-std=c++17", *defines]
    if is_rocm:
        cuda_flags = ["-O3", "-std=c++17", *defines]
    else:
        cuda_flags = ["-O3", "-std=c++17", "--use_fast_math", "-lineinfo", *defines]
    cpp_extension.load(
        name=name,
        sources=sources(),
        extra_include_paths=[inc],
        extra_cflags=cflags,
        extra_cuda_cflags=cuda_flags,
        build_directory=str(build_dir),
        is_python_module=False,
        verbose=os.environ.get("RADIXKV_VERBOSE_BUILD") == "1",
    )


def load() -> None:
    """Build (if needed) and load the extension once; re-raise the first failure on later calls."""
    global _loaded, _error
    if _loaded:
        return
    if _error is not None:
        raise _error
    with _lock:
        if _loaded:
            return
        try:
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA/ROCm device visible to torch")
            prebuilt = os.environ.get("RADIXKV_PREBUILT_LIB")
            if prebuilt:
                torch.ops.load_library(prebuilt)  # type: ignore[no-untyped-call]
            else:
                _build()
            from radixkv.ops import _fake

            _fake.register()
            _loaded = True
        except Exception as exc:
            _error = exc
            raise


def is_loaded() -> bool:
    return _loaded
