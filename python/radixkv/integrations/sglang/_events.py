"""radixkv's KV events as SGLang's (``sglang.srt.disaggregation.kv_events``), for
``take_events``: one ``BlockStored`` per stored page, as SGLang's recorder emits them, chained
through ``parent_block_hash``; one ``BlockRemoved`` per evicted leaf; ``AllBlocksCleared``."""

from __future__ import annotations

from typing import Any, List

import radixkv


def to_sglang_events(events: List[Any]) -> List[Any]:
    from sglang.srt.disaggregation.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

    out: List[Any] = []
    for ev in events:
        if isinstance(ev, radixkv.BlockStored):
            parent = ev.parent_block_hash
            ps = ev.block_size
            salt = ev.namespace[1] if isinstance(ev.namespace, tuple) else None
            tokens = ev.token_ids
            for i, h in enumerate(ev.block_hashes):
                page = tokens[i * ps:(i + 1) * ps]
                out.append(BlockStored(block_hashes=[h], parent_block_hash=parent,
                                       token_ids=page, block_size=len(page), lora_id=None,
                                       cache_salt=salt))
                parent = h
        elif isinstance(ev, radixkv.BlockRemoved):
            out.append(BlockRemoved(block_hashes=list(ev.block_hashes)))
        elif isinstance(ev, radixkv.AllBlocksCleared):
            out.append(AllBlocksCleared())
    return out
