"""BlockAllocator: every method, copy-on-write, and a bad-input table with unchanged state."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import radixkv as rk


def snapshot(b: rk.BlockAllocator) -> dict[str, Any]:
    """Everything observable about an allocator, to compare before / after a failed call."""
    ids = b.seq_ids()
    return {
        "free": b.num_free_blocks,
        "seqs": ids,
        "lens": [b.seq_len(i) for i in ids],
        "tables": [b.block_table(i).tolist() for i in ids],
        "refs": [b.ref_count(k) for k in range(b.num_blocks)],
    }


def test_construction_and_properties() -> None:
    b = rk.BlockAllocator(8, 4)
    assert (b.num_blocks, b.block_size, b.num_free_blocks, b.num_seqs, len(b)) == (8, 4, 8, 0, 0)
    assert "num_blocks=8" in repr(b)
    b.check()


def test_allocate_maps_ceil_blocks() -> None:
    b = rk.BlockAllocator(8, 4)
    b.allocate(1, 6)
    assert b.block_table(1).tolist() == [0, 1]
    assert b.block_table(1).dtype == np.int32
    assert (b.seq_len(1), b.num_free_blocks, len(b), 1 in b, 2 in b) == (6, 6, 1, True, False)
    b.allocate(2, 4)
    assert b.block_table(2).tolist() == [2]
    b.allocate(3, 0)
    assert b.block_table(3).tolist() == [] and b.seq_len(3) == 0
    assert b.seq_ids() == [1, 2, 3]
    b.check()


def test_large_and_numpy_sequence_ids() -> None:
    b = rk.BlockAllocator(4, 2)
    big = 2**64 - 1
    b.allocate(big, 1)
    b.allocate(np.int64(7), 1)
    assert b.seq_ids() == [7, big]
    assert b.block_tables(np.array([7], dtype=np.uint64)).tolist() == [[1]]


def test_can_allocate_and_blocks_needed() -> None:
    b = rk.BlockAllocator(4, 4)
    assert b.blocks_needed(0) == 0 and b.blocks_needed(5) == 2
    assert b.can_allocate(16) and not b.can_allocate(17)
    b.allocate(1, 9)
    assert b.can_allocate(4) and not b.can_allocate(5)


def test_append_allocates_only_when_last_block_is_full() -> None:
    b = rk.BlockAllocator(8, 4)
    b.allocate(1, 3)
    assert b.append_slots(1) == []
    assert b.num_free_blocks == 7
    assert b.append_slots(1) == []  # 5th token: new block
    assert b.num_free_blocks == 6 and b.block_table(1).tolist() == [0, 1]
    assert b.append_slots(1, 7) == []
    assert b.seq_len(1) == 12 and b.block_table(1).tolist() == [0, 1, 2]
    assert b.append_slots(1, 0) == []
    b.check()


def test_fork_is_zero_copy_and_counts_references() -> None:
    b = rk.BlockAllocator(8, 4)
    b.allocate(1, 6)
    free = b.num_free_blocks
    b.fork(1, 2)
    b.fork(2, 3)
    assert b.num_free_blocks == free
    assert b.block_table(3).tolist() == b.block_table(1).tolist() == [0, 1]
    assert [b.ref_count(0), b.ref_count(1), b.ref_count(2)] == [3, 3, 0]
    assert b.seq_len(3) == 6
    b.check()


def test_copy_on_write_returns_the_copy_once() -> None:
    b = rk.BlockAllocator(8, 4)
    b.allocate(1, 6)
    b.fork(1, 2)
    assert b.append_slots(2) == [(1, 2)]
    assert b.block_table(2).tolist() == [0, 2]
    assert (b.ref_count(1), b.ref_count(2), b.ref_count(0)) == (1, 1, 2)
    assert b.append_slots(2) == []  # its own block now
    assert b.append_slots(1) == []  # the parent owns block 1 alone
    b.check()


def test_copy_on_write_with_many_tokens_crossing_blocks() -> None:
    b = rk.BlockAllocator(8, 4)
    b.allocate(1, 6)
    b.fork(1, 2)
    assert b.append_slots(2, 7) == [(1, 2)]
    assert b.block_table(2).tolist() == [0, 2, 3, 4]
    assert b.slot_mapping(2).tolist() == [0, 1, 2, 3, *range(8, 17)]
    b.check()


def test_full_shared_last_block_is_not_copied() -> None:
    b = rk.BlockAllocator(4, 4)
    b.allocate(1, 4)
    b.fork(1, 2)
    assert b.append_slots(2) == []
    assert b.block_table(2).tolist() == [0, 1] and b.ref_count(0) == 2


def test_can_append_counts_the_copy() -> None:
    b = rk.BlockAllocator(3, 4)
    b.allocate(1, 6)
    b.fork(1, 2)
    assert b.can_append(2, 2) and not b.can_append(2, 7)
    assert b.can_append(2)


def test_append_slots_batch_equals_sequential_appends() -> None:
    def setup() -> rk.BlockAllocator:
        b = rk.BlockAllocator(32, 4)
        b.allocate(1, 6)
        b.fork(1, 2)
        b.fork(1, 3)
        b.allocate(4, 4)
        return b

    batch, seq = setup(), setup()
    copies, slots = batch.append_slots_batch([2, 4, 3, 1], 3)
    want_copies: list[tuple[int, int]] = []
    want_slots: list[int] = []
    for s in [2, 4, 3, 1]:
        start = seq.seq_len(s)
        want_copies += seq.append_slots(s, 3)
        want_slots += seq.slot_mapping(s, start, start + 3).tolist()
    assert copies.dtype == np.int32 and copies.shape == (len(want_copies), 2)
    assert [tuple(p) for p in copies.tolist()] == want_copies
    assert slots.dtype == np.int32 and slots.tolist() == want_slots
    assert snapshot(batch) == snapshot(seq)
    none, one = batch.append_slots_batch([])
    assert none.shape == (0, 2) and one.size == 0
    assert batch.append_slots_batch(np.array([1, 2]))[1].size == 2
    batch.check()


def test_free_returns_blocks_exactly_at_zero() -> None:
    b = rk.BlockAllocator(4, 2)
    b.allocate(1, 4)
    b.fork(1, 2)
    b.fork(1, 3)
    b.free(1)
    b.free(2)
    assert b.ref_count(0) == 1 and b.num_free_blocks == 2
    b.free(3)
    assert b.ref_count(0) == 0 and b.num_free_blocks == 4
    b.allocate(9, 3)
    assert b.block_table(9).tolist() == [0, 1]  # freed blocks are reused first
    b.check()


def test_block_tables_are_zero_padded_int32() -> None:
    b = rk.BlockAllocator(16, 2)
    b.allocate(10, 5)
    b.allocate(20, 1)
    b.allocate(30, 0)
    t = b.block_tables([20, 10, 30])
    assert t.dtype == np.int32 and t.shape == (3, 3) and t.flags["C_CONTIGUOUS"]
    assert t.tolist() == [[3, 0, 0], [0, 1, 2], [0, 0, 0]]
    assert b.block_tables([10], width=5).tolist() == [[0, 1, 2, 0, 0]]
    assert b.block_tables([]).shape == (0, 0)
    assert b.block_tables((10, 10)).shape == (2, 3)


def test_slot_mapping() -> None:
    b = rk.BlockAllocator(16, 4)
    b.allocate(99, 2)  # blocks 0
    b.allocate(1, 10)  # blocks 1, 2, 3
    sm = b.slot_mapping(1, 2, 7)
    assert sm.dtype == np.int32 and sm.tolist() == [6, 7, 8, 9, 10]
    assert b.slot_mapping(1).tolist() == list(range(4, 14))
    assert b.slot_mapping(1, 10, 10).tolist() == []
    assert b.slot_mapping(1, start=8).tolist() == [12, 13]


def test_check_passes_through_a_busy_history() -> None:
    b = rk.BlockAllocator(64, 3)
    for s in range(6):
        b.allocate(s, s * 2)
    for s in range(6):
        b.fork(s, 100 + s)
        b.append_slots(100 + s, s)
        b.check()
    for s in range(0, 6, 2):
        b.free(s)
        b.check()


# Each case: (name, setup-free call on the standard allocator, expected error).
BAD_CALLS: list[tuple[str, Callable[[rk.BlockAllocator], object], type[Exception]]] = [
    ("allocate existing seq", lambda b: b.allocate(1, 3), rk.UnknownSequence),
    ("allocate too many", lambda b: b.allocate(5, 4 * 100), rk.OutOfBlocks),
    ("allocate negative tokens", lambda b: b.allocate(5, -1), rk.InvalidArgument),
    ("allocate negative seq", lambda b: b.allocate(-5, 1), rk.InvalidArgument),
    ("allocate float tokens", lambda b: b.allocate(5, 2.0), rk.InvalidArgument),
    ("allocate str seq", lambda b: b.allocate("5", 2), rk.InvalidArgument),
    ("allocate bool tokens", lambda b: b.allocate(5, True), rk.InvalidArgument),
    ("allocate huge seq", lambda b: b.allocate(2**64, 1), rk.InvalidArgument),
    ("append unknown seq", lambda b: b.append_slots(77), rk.UnknownSequence),
    ("append negative", lambda b: b.append_slots(1, -2), rk.InvalidArgument),
    ("append out of blocks", lambda b: b.append_slots(1, 4 * 100), rk.OutOfBlocks),
    # 32 tokens need 8 new blocks (8 free) but the shared last block must be copied too.
    ("append out of blocks after cow", lambda b: b.append_slots(2, 32), rk.OutOfBlocks),
    ("append np.float", lambda b: b.append_slots(1, np.float32(1)), rk.InvalidArgument),
    ("batch append unknown", lambda b: b.append_slots_batch([1, 77]), rk.UnknownSequence),
    ("batch append twice", lambda b: b.append_slots_batch([1, 2, 1]), rk.InvalidArgument),
    ("batch append out of blocks", lambda b: b.append_slots_batch([1, 2], 16), rk.OutOfBlocks),
    ("batch append negative", lambda b: b.append_slots_batch([1], -1), rk.InvalidArgument),
    ("fork unknown parent", lambda b: b.fork(77, 78), rk.UnknownSequence),
    ("fork onto existing", lambda b: b.fork(1, 2), rk.UnknownSequence),
    ("fork onto itself", lambda b: b.fork(1, 1), rk.UnknownSequence),
    ("fork negative child", lambda b: b.fork(1, -1), rk.InvalidArgument),
    ("free unknown", lambda b: b.free(77), rk.UnknownSequence),
    ("free None", lambda b: b.free(None), rk.InvalidArgument),
    ("seq_len unknown", lambda b: b.seq_len(77), rk.UnknownSequence),
    ("block_table unknown", lambda b: b.block_table(77), rk.UnknownSequence),
    ("block_tables unknown", lambda b: b.block_tables([1, 77]), rk.UnknownSequence),
    ("block_tables negative id", lambda b: b.block_tables([1, -3]), rk.InvalidArgument),
    ("block_tables float array", lambda b: b.block_tables(np.array([1.0])), rk.InvalidArgument),
    ("block_tables not a list", lambda b: b.block_tables(1), rk.InvalidArgument),
    ("block_tables narrow width", lambda b: b.block_tables([1], width=1), rk.InvalidArgument),
    ("block_tables huge width", lambda b: b.block_tables([1, 2], width=2**62), rk.InvalidArgument),
    ("slot_mapping past end", lambda b: b.slot_mapping(1, 0, 7), rk.InvalidArgument),
    ("slot_mapping reversed", lambda b: b.slot_mapping(1, 4, 2), rk.InvalidArgument),
    ("slot_mapping negative", lambda b: b.slot_mapping(1, -1, 2), rk.InvalidArgument),
    ("slot_mapping unknown", lambda b: b.slot_mapping(77, 0, 0), rk.UnknownSequence),
    ("ref_count out of range", lambda b: b.ref_count(10), rk.InvalidArgument),
    ("can_append unknown", lambda b: b.can_append(77), rk.UnknownSequence),
    ("decode_metadata unknown", lambda b: b.decode_metadata([77]), rk.UnknownSequence),
    ("decode_metadata empty seq", lambda b: b.decode_metadata([3]), rk.InvalidArgument),
    ("table metadata narrow", lambda b: b.block_table_metadata([1], width=0), rk.InvalidArgument),
    ("extend_metadata too long", lambda b: b.extend_metadata([1], [7]), rk.InvalidArgument),
    ("extend_metadata empty seq", lambda b: b.extend_metadata([3], 0), rk.InvalidArgument),
    ("extend_metadata negative", lambda b: b.extend_metadata([1], -1), rk.InvalidArgument),
    ("extend_metadata unknown", lambda b: b.extend_metadata([77], 1), rk.UnknownSequence),
]


def standard() -> rk.BlockAllocator:
    """10 blocks of 4: seq 1 (6 tokens), seq 2 forked from it, seq 3 empty."""
    b = rk.BlockAllocator(10, 4)
    b.allocate(1, 6)
    b.fork(1, 2)
    b.allocate(3, 0)
    return b


@pytest.mark.parametrize("case", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_typed_error_and_changes_nothing(
    case: tuple[str, Callable[[rk.BlockAllocator], object], type[Exception]],
) -> None:
    _, call, err = case
    b = standard()
    before = snapshot(b)
    with pytest.raises(err) as info:
        call(b)
    assert isinstance(info.value, rk.RadixKVError)
    assert str(info.value), "the error names the problem"
    assert snapshot(b) == before
    b.check()


@pytest.mark.parametrize(
    ("num_blocks", "block_size"),
    [(4, 0), (-1, 4), (2**20, 2**12), (4.0, 4), (4, None)],
)
def test_bad_construction(num_blocks: Any, block_size: Any) -> None:
    with pytest.raises(rk.InvalidArgument):
        rk.BlockAllocator(num_blocks, block_size)


def test_out_of_blocks_is_out_of_slots() -> None:
    b = rk.BlockAllocator(1, 4)
    with pytest.raises(rk.OutOfSlots):
        b.allocate(1, 5)
