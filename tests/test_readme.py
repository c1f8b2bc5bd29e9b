"""The README's scheduler example runs as written (its asserts are part of it)."""

from __future__ import annotations

import re
from pathlib import Path

import radixkv as rk

README = Path(__file__).resolve().parent.parent / "README.md"


def _python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_has_a_python_example() -> None:
    assert _python_blocks(), "README.md lost its scheduler example"


def test_readme_scheduler_example_runs() -> None:
    namespace: dict[str, object] = {}
    exec(compile(_python_blocks()[0], str(README), "exec"), namespace)
    cache = namespace["cache"]
    pool = namespace["pool"]
    assert isinstance(cache, rk.RadixCache) and isinstance(pool, rk.TokenPool)
    # Both requests finished: nothing is locked, and every slot is either free or in the tree.
    assert cache.protected_size == 0
    assert pool.available + cache.total_size == pool.num_slots
