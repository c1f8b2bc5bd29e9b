"""SGLang's request lifecycle on its own pools, for any ``BasePrefixCache`` (shared by
``bench/cache_bench_sglang.py`` and ``tests/test_sglang_plugin.py``).

Real ``schedule_batch.Req`` objects go through the scheduler's own helpers, as SGLang 0.5.23's
scheduler drives them, with the batch and forward machinery left out:

- admission: ``Req.init_next_round_input`` (match, ``key.limit`` one token short of the prompt),
  ``tree_cache.lock(req.last_node)``, ``common.evict_from_tree_cache`` (the allocator's
  ``evict_to_free_tokens``), ``allocator.alloc`` (whole pages when ``page_size > 1``; the matched
  prefix is page-aligned, so new KV starts on a page boundary), ``ReqToTokenPool.alloc`` and the
  row writes through ``prefix_device_indices``, then ``common.checkpoint_kv_cache`` (prefill done);
- finish: ``common.release_kv_cache(req, cache, checkpoint=True)``.

The pools are SGLang's ``TokenToKVPoolAllocator`` (``PagedTokenToKVPoolAllocator`` for pages > 1)
and ``ReqToTokenPool`` on ``device`` (the CPU by default; a CUDA device puts the slot lists and
the request table where a server keeps them), with no KV tensors behind them.
"""

from __future__ import annotations

from array import array
from typing import Any, Callable, Optional, Sequence

_PUBLISHED = False


def publish_server_args() -> None:
    """``release_kv_cache`` reads process-wide serving config; publish a default ServerArgs
    once, as a scheduler process does at start ("dummy": SGLang's no-model path)."""
    global _PUBLISHED
    if not _PUBLISHED:
        from sglang.srt import runtime_context
        from sglang.srt.server_args import ServerArgs

        runtime_context.publish(ServerArgs(model_path="dummy"), role="scheduler")
        _PUBLISHED = True


class Lifecycle:
    """One allocator, one request table and one tree cache, driven request by request."""

    def __init__(self, make_cache: Callable[[Any], Any], capacity: int, max_running: int,
                 max_context: int, page_size: int = 1, device: str = "cpu"):
        import torch
        from sglang.srt.managers.schedule_batch import FINISH_LENGTH, Req
        from sglang.srt.mem_cache import common
        from sglang.srt.mem_cache.cache_init_params import CacheInitParams
        from sglang.srt.mem_cache.memory_pool import ReqToTokenPool
        from sglang.srt.sampling.sampling_params import SamplingParams

        publish_server_args()
        self.Req, self.FINISH_LENGTH, self.SamplingParams = Req, FINISH_LENGTH, SamplingParams
        self.common = common
        self.page_size = page_size
        if page_size == 1:
            from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator

            self.alloc = TokenToKVPoolAllocator(capacity, torch.float16, device, None, False)
        else:
            from sglang.srt.mem_cache.allocator.paged import PagedTokenToKVPoolAllocator

            self.alloc = PagedTokenToKVPoolAllocator(capacity, page_size, torch.float16,
                                                     device, None, False)
        self.total = self.alloc.available_size()
        self.r2t = ReqToTokenPool(max_running + 2, max_context + page_size, device, False)
        params = CacheInitParams(disable=False, req_to_token_pool=self.r2t,
                                 token_to_kv_pool_allocator=self.alloc, page_size=page_size)
        self.cache = make_cache(params)
        self.matched = 0
        self.prefix_of: dict = {}  # rid -> prefix length matched at admission

    def make_req(self, rid: str, prompt: Sequence[int], output_len: int,
                 extra_key: Optional[str] = None) -> Any:
        req = self.Req(rid, "", array("q", prompt),
                       self.SamplingParams(max_new_tokens=output_len))
        req.extra_key = extra_key
        return req

    # -- timed -------------------------------------------------------------------------
    def admit(self, req: Any, output_len: int) -> bool:
        """Match, lock, evict if short, allocate prompt remainder + decode slots, write the
        row, checkpoint the prompt. False (all undone) if the pool cannot hold it."""
        c, ps = self.cache, self.page_size
        plen = len(req.origin_input_ids)
        req.init_next_round_input(c)
        req.lock = c.lock(req.last_node)
        pl = req.prefix_len
        need = plen - pl + output_len - 1
        pages = -(-need // ps) * ps
        self.common.evict_from_tree_cache(c, pages)
        new = self.alloc.alloc(pages) if pages else self.alloc.alloc(0)
        if new is None:
            c.unlock(req.lock)
            req.lock = None
            return False
        self.r2t.alloc([req])
        idx = req.kv.req_pool_idx
        self.r2t.write((idx, slice(0, pl)), c.prefix_device_indices(req))
        self.r2t.write((idx, slice(pl, pl + pages)), new)
        req.kv.kv_allocated_len = pl + need
        req.kv.kv_committed_len = plen
        req.extend_end = plen
        self.matched += pl
        self.prefix_of[req.rid] = pl
        self.common.checkpoint_kv_cache(req, c)
        return True

    def finish(self, req: Any) -> None:
        self.common.release_kv_cache(req, self.cache, checkpoint=True)

    # -- untimed -----------------------------------------------------------------------
    def decode(self, req: Any, output: Sequence[int]) -> None:
        """What decoding leaves behind: the output ids and the committed KV length."""
        req.output_ids.extend(output)
        req.kv.kv_committed_len = len(req.origin_input_ids) + len(output) - 1
        req.finished_reason = self.FINISH_LENGTH(len(output))

    def leak_check(self, running: Sequence[Any] = ()) -> None:
        """SGLang's idle check (available + evictable + protected == total), where a request
        still running holds its row's slots beyond the tree's protected part."""
        c = self.cache
        held = sum(self._row_owned(r) for r in running)
        got = self.alloc.available_size() + c.evictable_size() + c.protected_size() + held
        if got != self.total:
            raise AssertionError(
                f"Mem Leak: available {self.alloc.available_size()} + evictable "
                f"{c.evictable_size()} + protected {c.protected_size()} + running {held} "
                f"!= {self.total}")

    def _row_owned(self, req: Any) -> int:
        ps = self.page_size
        return -(-req.kv.kv_allocated_len // ps) * ps - req.kv.cache_protected_len
