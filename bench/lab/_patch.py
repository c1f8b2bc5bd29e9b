"""Patched copies of hip/ for the lab's A/B builds (check_cost.py, fp8_shapes.py): each patch
names exact text that must occur once, so an edit of the source fails the patch loudly instead of
building (and timing) an unpatched copy."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def fresh_copy(src: Path, dst: Path) -> None:
    """`dst` becomes a copy of the tree `src` (whatever `dst` held is removed first)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def replace_once(path: Path, patches: list[tuple[str, str]], who: str) -> None:
    """Each `(old, new)` in turn: `old`, found exactly once in the file, becomes `new`; else the
    program exits naming `who`, the file and the text."""
    text = path.read_text()
    for old, new in patches:
        if text.count(old) != 1:
            sys.exit(f"{who} --patch: {path.name} no longer holds exactly one of:\n{old}")
        text = text.replace(old, new)
    path.write_text(text)
