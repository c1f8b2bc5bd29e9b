"""Sharing one cache / allocator between Python threads.

Calls on one object serialize: none releases the GIL while it holds the object, so a second
thread never finds it mid-call (before this was so, a long match_prefix released the GIL and a
concurrent call died with PyO3's "Already borrowed" panic or RuntimeError). The threads below use
inputs above the size at which calls used to release the GIL, and every call must succeed.
"""

from __future__ import annotations

import threading

import numpy as np

import radixkv

BIG = 6000  # tokens per sequence: above the old GIL-release threshold (4096)


def _run_threads(fns: list, rounds: int) -> list[BaseException]:
    errors: list[BaseException] = []
    start = threading.Barrier(len(fns))

    def wrap(fn):
        def body():
            start.wait()
            try:
                for r in range(rounds):
                    fn(r)
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
        return body

    threads = [threading.Thread(target=wrap(f)) for f in fns]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_radix_cache_shared_by_threads():
    pool = radixkv.TokenPool(8 * BIG, 1)
    cache = radixkv.RadixCache(pool)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, 50, BIG, dtype=np.int32) for _ in range(4)]

    def inserter(worker: int):
        def step(r: int) -> None:
            toks = seqs[(worker + r) % len(seqs)]
            m = cache.match_prefix(toks)
            cache.lock(m.node)
            try:
                need = len(toks) - m.length
                if need:
                    slots = cache.alloc(need)
                    cache.insert(toks, np.concatenate([m.slots, slots]))
            finally:
                cache.unlock(m.node)
        return step

    def reader(r: int) -> None:
        cache.peek_prefix(seqs[r % len(seqs)])
        cache.check()

    def evictor(r: int) -> None:
        cache.evict_slots(BIG)

    errors = _run_threads([inserter(0), inserter(1), reader, evictor], rounds=30)
    assert not errors, errors[:3]
    cache.check()
    assert cache.evictable_size + pool.available + cache.protected_size <= pool.num_slots


def test_block_allocator_shared_by_threads():
    alloc = radixkv.BlockAllocator(num_blocks=4 * BIG, block_size=1)
    alloc.allocate(1, BIG)

    def grower(r: int) -> None:
        alloc.append_slots(1, 1)

    def mapper(r: int) -> None:
        alloc.slot_mapping(1)

    errors = _run_threads([grower, mapper, mapper], rounds=200)
    assert not errors, errors[:3]
    assert alloc.seq_len(1) == BIG + 200
    alloc.check()
