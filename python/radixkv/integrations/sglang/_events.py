"""radixkv's KV events as SGLang's (``sglang.srt.disaggregation.kv_events``), for
``take_events``, in the shape SGLang's default cache (``UnifiedRadixCache`` on its Rust tree
core) emits them: one ``BlockStored`` per new leaf, with one chained hash per page
(``block_size`` the page size, ``token_ids`` all the leaf's pages, ``parent_block_hash`` the
hash of the page before them), one ``BlockRemoved`` per evicted leaf, ``AllBlocksCleared`` per
reset; ``medium`` GPU (the tree caches device KV only)."""

from __future__ import annotations

from typing import Any, List

import radixkv


class EventConverter:
    """Built once per cache: SGLang's event classes resolved at construction, so a drain
    costs one constructor call per radixkv event and no lookups."""

    def __init__(self) -> None:
        from sglang.srt.disaggregation.kv_events import (
            AllBlocksCleared,
            BlockRemoved,
            BlockStored,
            StorageMedium,
        )

        self._stored = BlockStored
        self._removed = BlockRemoved
        self._cleared = AllBlocksCleared
        self._gpu = StorageMedium.GPU

    def all_cleared(self) -> Any:
        return self._cleared()

    def __call__(self, events: List[Any]) -> List[Any]:
        stored_t, removed_t = radixkv.BlockStored, radixkv.BlockRemoved
        stored, removed, gpu = self._stored, self._removed, self._gpu
        out: List[Any] = []
        append = out.append
        for ev in events:
            t = type(ev)
            if t is stored_t:
                ns = ev.namespace
                append(stored(block_hashes=ev.block_hashes, parent_block_hash=ev.parent_block_hash,
                              token_ids=ev.token_ids, block_size=ev.block_size, lora_id=None,
                              medium=gpu, cache_salt=ns[1] if type(ns) is tuple else None))
            elif t is removed_t:
                append(removed(block_hashes=ev.block_hashes, medium=gpu))
            else:
                append(self._cleared())
        return out
