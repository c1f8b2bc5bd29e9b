"""Where radixkv.ops.loader finds the kernel sources, and what its build cache key covers (no GPU)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")
from radixkv.ops import loader  # noqa: E402

REPO_HIP = Path(__file__).resolve().parents[1] / "hip"


def test_the_package_finds_its_own_copy_of_every_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RADIXKV_HIP_DIR", raising=False)
    found = loader.hip_dir()
    assert found.name == "_hip" and found.parent.name == "radixkv"
    names = [p.name for p in loader.source_files()]
    assert names == sorted(p.name for pat in loader.SOURCE_PATTERNS for p in REPO_HIP.glob(pat))
    assert "platform.h" in names and "torch_ops.cpp" in names
    assert [Path(s).name for s in loader.sources()] == sorted(
        p.name for p in REPO_HIP.glob("*.cu")) + sorted(p.name for p in REPO_HIP.glob("*.cpp"))


def test_env_dir_wins_and_a_wrong_one_is_an_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    copy = tmp_path / "kernels"
    shutil.copytree(REPO_HIP, copy)
    monkeypatch.setenv("RADIXKV_HIP_DIR", str(copy))
    assert loader.hip_dir() == copy
    missing = tmp_path / "nowhere"
    monkeypatch.setenv("RADIXKV_HIP_DIR", str(missing))
    # An explicit directory is never silently replaced by the bundled sources.
    with pytest.raises(FileNotFoundError, match=f"RADIXKV_HIP_DIR: {missing}"):
        loader.hip_dir()


def test_digest_covers_every_header_and_unit(tmp_path: Path) -> None:
    copy = tmp_path / "kernels"
    shutil.copytree(REPO_HIP, copy)
    base = loader.sources_digest(copy)
    assert base == loader.sources_digest(REPO_HIP)  # content, not location
    for name in ("softmax.h", "paged_decode_mma.cuh", "store_kv.cu", "torch_ops.cpp"):
        f = copy / name
        text = f.read_bytes()
        f.write_bytes(text + b"\n// changed\n")
        assert loader.sources_digest(copy) != base, name
        f.write_bytes(text)
    assert loader.sources_digest(copy) == base
    (copy / "README.md").write_text("not a source")  # non-sources do not count
    assert loader.sources_digest(copy) == base
