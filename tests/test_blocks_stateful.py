"""Hypothesis state machine: BlockAllocator against a naive Python model, check() as invariant.

The model simulates appends token by token with abstract block ids that are never reused. After
every step the allocator must be isomorphic to it: one consistent, injective map from model
blocks to physical blocks under which tables, lengths, ref counts, free count and copy-on-write
pairs agree. A failed call must leave the allocator unchanged.

Sequences are built to share: each run starts from a sequence with a partly filled last block
and a fork of it, and a `fork_and_write` step forks a live sequence and writes into the shared
block, so copy-on-write happens in most runs (`test_blocks_machine_reaches_copy_on_write`
requires it in at least half of them, and shared frees and exhaustion at least once).

Budget: RADIXKV_HYPOTHESIS_EXAMPLES (default 150 runs of up to 40 steps).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any, Callable, Optional

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import radixkv as rk

EXAMPLES = int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "150"))
ALL_SEQS = [0, 1, 2, 3, 2**40, 2**64 - 1]
SEQS = st.sampled_from(ALL_SEQS)

# What runs reached: event name -> number of runs (examples) in which it happened.
REACHED: Counter[str] = Counter()


class Model:
    """Reference semantics of docs/contract.md §1, written for clarity, not speed."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.refs: dict[int, int] = {}  # live model blocks -> ref count
        self.seqs: dict[int, tuple[list[int], int]] = {}  # seq -> (blocks, len)
        self._next = 0

    def _fresh(self) -> int:
        self._next += 1
        self.refs[self._next] = 1
        return self._next

    def _unref(self, b: int) -> None:
        self.refs[b] -= 1
        if self.refs[b] == 0:
            del self.refs[b]

    def clone(self) -> Model:
        m = Model(self.num_blocks, self.block_size)
        m.refs = dict(self.refs)
        m.seqs = {k: (list(v[0]), v[1]) for k, v in self.seqs.items()}
        m._next = self._next
        return m

    def allocate(self, seq: int, n: int) -> None:
        if seq in self.seqs:
            raise rk.UnknownSequence
        self.seqs[seq] = ([self._fresh() for _ in range(-(-n // self.block_size))], n)

    def append(self, seq: int, n: int) -> list[tuple[int, int]]:
        if seq not in self.seqs:
            raise rk.UnknownSequence
        blocks, length = list(self.seqs[seq][0]), self.seqs[seq][1]
        copies = []
        for _ in range(n):
            if length % self.block_size == 0:
                blocks.append(self._fresh())
            elif self.refs[blocks[-1]] > 1:
                new = self._fresh()
                self._unref(blocks[-1])
                copies.append((blocks[-1], new))
                blocks[-1] = new
            length += 1
        self.seqs[seq] = (blocks, length)
        return copies

    def fork(self, parent: int, child: int) -> None:
        if parent not in self.seqs or child in self.seqs:
            raise rk.UnknownSequence
        for b in self.seqs[parent][0]:
            self.refs[b] += 1
        self.seqs[child] = (list(self.seqs[parent][0]), self.seqs[parent][1])

    def free(self, seq: int) -> None:
        if seq not in self.seqs:
            raise rk.UnknownSequence
        for b in self.seqs.pop(seq)[0]:
            self._unref(b)


def expect(
    model: Model, op: Callable[[Model], Any]
) -> tuple[Optional[type[Exception]], Any, Model]:
    """Runs `op` on a copy of the model: (error class or None, result, model after)."""
    m = model.clone()
    try:
        out = op(m)
    except rk.RadixKVError as e:
        return type(e), None, model
    if len(m.refs) > m.num_blocks:
        return rk.OutOfBlocks, None, model
    return None, out, m


class BlocksMachine(RuleBasedStateMachine):
    factory: Callable[[int, int], Any] = rk.BlockAllocator

    def __init__(self) -> None:
        super().__init__()
        self.b: Any = None
        self.m = Model(1, 1)
        self.seen: set[str] = set()

    def reached(self, what: str) -> None:
        event(what)
        self.seen.add(what)

    def teardown(self) -> None:
        REACHED["runs"] += 1
        REACHED.update(self.seen)

    @initialize(
        num_blocks=st.integers(1, 32),
        block_size=st.sampled_from([1, 2, 3, 4, 4, 5]),
        full=st.integers(0, 3),
        part=st.integers(1, 4),
    )
    def setup(self, num_blocks: int, block_size: int, full: int, part: int) -> None:
        """A fresh allocator holding one sequence with a partly filled last block (block size
        > 1), a fork of it, and the fork's first write (copy-on-write, when a block is free)."""
        self.b = type(self).factory(num_blocks, block_size)
        self.m = Model(num_blocks, block_size)
        # The sequence and the fork's copy fit when there are blocks for both.
        partial = 1 + part % (block_size - 1) if block_size > 1 else 0
        first = min(full, max(num_blocks - 2, 0)) * block_size + partial
        a, b = ALL_SEQS[0], ALL_SEQS[1]
        self.run(lambda: self.b.allocate(a, first), lambda m: m.allocate(a, first))
        if a in self.m.seqs:
            self.run(lambda: self.b.fork(a, b), lambda m: m.fork(a, b))
            got, want = self.run(lambda: self.b.append_slots(b, 1), lambda m: m.append(b, 1))
            if want is not None:
                fwd = self.iso()
                assert got == [(fwd[s], fwd[d]) for s, d in want]
                self.reached("copy-on-write" if want else "append without copy")

    # -- helpers -------------------------------------------------------------------------------

    def iso(self) -> dict[int, int]:
        """Model block -> physical block; asserts the allocator matches the model."""
        b, m = self.b, self.m
        assert b.seq_ids() == sorted(m.seqs)
        fwd: dict[int, int] = {}
        back: dict[int, int] = {}
        for seq, (blocks, length) in m.seqs.items():
            assert b.seq_len(seq) == length
            phys = b.block_table(seq).tolist()
            assert len(phys) == len(blocks)
            for mb, pb in zip(blocks, phys):
                assert fwd.setdefault(mb, pb) == pb, "sharing differs from the model"
                assert back.setdefault(pb, mb) == mb, "sharing differs from the model"
        for mb, rc in m.refs.items():
            assert b.ref_count(fwd[mb]) == rc
        assert b.num_free_blocks == m.num_blocks - len(m.refs)
        return fwd

    def snapshot(self) -> Any:
        ids = self.b.seq_ids()
        return (
            self.b.num_free_blocks,
            ids,
            [self.b.block_table(i).tolist() for i in ids],
            [self.b.ref_count(k) for k in range(self.b.num_blocks)],
        )

    def run(self, sut: Callable[[], Any], op: Callable[[Model], Any]) -> tuple[Any, Any]:
        """Calls the allocator and the model; on an expected error checks nothing changed."""
        err, want, after = expect(self.m, op)
        before = self.snapshot()
        if err is not None:
            self.reached(f"error {err.__name__}")
            with pytest.raises(err):
                sut()
            assert self.snapshot() == before, "a failed call changed the allocator"
            return None, None
        got = sut()
        self.m = after
        return got, want

    # -- rules ---------------------------------------------------------------------------------

    @rule(data=st.data(), n=st.integers(0, 12))
    def allocate(self, data: st.DataObject, n: int) -> None:
        seq = self.pick_new(data)
        self.run(lambda: self.b.allocate(seq, n), lambda m: m.allocate(seq, n))

    def pick(self, data: st.DataObject) -> int:
        """Mostly a live sequence (so forks and shared appends happen), sometimes any id."""
        if self.m.seqs and data.draw(st.integers(0, 4)) > 0:
            return data.draw(st.sampled_from(sorted(self.m.seqs)))
        return data.draw(SEQS)

    def pick_new(self, data: st.DataObject) -> int:
        """Mostly an id not in use (so allocate and fork succeed), sometimes any id."""
        unused = [s for s in ALL_SEQS if s not in self.m.seqs]
        if unused and data.draw(st.integers(0, 4)) > 0:
            return data.draw(st.sampled_from(unused))
        return data.draw(SEQS)

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data(), n=st.one_of(st.just(1), st.integers(0, 12)))
    def append(self, data: st.DataObject, n: int) -> None:
        seq = self.pick(data)
        got, want = self.run(lambda: self.b.append_slots(seq, n), lambda m: m.append(seq, n))
        if want is not None:
            fwd = self.iso()
            assert got == [(fwd[s], fwd[d]) for s, d in want]
            self.reached("copy-on-write" if want else "append without copy")

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data(), n=st.one_of(st.just(1), st.integers(0, 6)))
    def batch_append(self, data: st.DataObject, n: int) -> None:
        """append_slots_batch: sequential appends, all or nothing."""
        seqs = data.draw(st.lists(st.sampled_from(sorted(self.m.seqs)), max_size=5, unique=True))

        def model(m: Model) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
            copies: list[tuple[int, int]] = []
            slots: list[tuple[int, int]] = []
            for s in seqs:
                start = m.seqs[s][1]
                copies += m.append(s, n)
                blocks = m.seqs[s][0]
                bs = m.block_size
                slots += [(blocks[p // bs], p % bs) for p in range(start, start + n)]
            return copies, slots

        got, want = self.run(lambda: self.b.append_slots_batch(seqs, n), model)
        if want is not None:
            fwd = self.iso()
            bs = self.m.block_size
            assert [tuple(p) for p in got[0].tolist()] == [(fwd[s], fwd[d]) for s, d in want[0]]
            assert got[1].tolist() == [fwd[b] * bs + o for b, o in want[1]]

    @precondition(lambda self: bool(self.m.seqs))
    @rule()
    def decode_step(self) -> None:
        """One token for every live sequence, as a decode iteration (beam search after forks)."""
        for seq in sorted(self.m.seqs):
            self.append_one(seq)  # append_slots' default: one token

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data())
    def fork(self, data: st.DataObject) -> None:
        parent = self.pick(data)
        child = self.pick_new(data)
        self.run(lambda: self.b.fork(parent, child), lambda m: m.fork(parent, child))

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data())
    def free(self, data: st.DataObject) -> None:
        seq = self.pick(data)
        shared = seq in self.m.seqs and any(self.m.refs[b] > 1 for b in self.m.seqs[seq][0])
        _, done = self.run(lambda: self.b.free(seq), lambda m: m.free(seq) or True)
        if done and shared:
            self.reached("freed a sharing sequence")

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data(), child_writes=st.booleans())
    def fork_and_write(self, data: st.DataObject, child_writes: bool) -> None:
        """Forks a live sequence and writes one token into the (then shared) last block."""
        parent = data.draw(st.sampled_from(sorted(self.m.seqs)))
        child = self.pick_new(data)
        _, done = self.run(lambda: self.b.fork(parent, child), lambda m: m.fork(parent, child) or True)
        if not done:
            return
        self.append_one(child if child_writes else parent, 1)

    def append_one(self, seq: int, *num_tokens: int) -> None:
        """One token appended to `seq` (`num_tokens` passed on to append_slots as given): the
        copy-on-write pairs must be the model's, under the block renaming."""
        got, want = self.run(lambda: self.b.append_slots(seq, *num_tokens),
                             lambda m: m.append(seq, 1))
        if want is not None:
            fwd = self.iso()
            assert got == [(fwd[s], fwd[d]) for s, d in want]
            self.reached("copy-on-write" if want else "append without copy")

    @precondition(lambda self: bool(self.m.seqs))
    @rule(data=st.data())
    def slot_mapping(self, data: st.DataObject) -> None:
        seq = data.draw(st.sampled_from(sorted(self.m.seqs)))
        blocks, length = self.m.seqs[seq]
        start = data.draw(st.integers(0, length))
        end = data.draw(st.integers(start, length))
        got = self.b.slot_mapping(seq, start, end)
        fwd = self.iso()
        bs = self.m.block_size
        assert got.tolist() == [fwd[blocks[p // bs]] * bs + p % bs for p in range(start, end)]

    @rule(seqs=st.lists(SEQS, max_size=4))
    def tables_and_decode(self, seqs: list[int]) -> None:
        if any(s not in self.m.seqs for s in seqs):
            with pytest.raises(rk.UnknownSequence):
                self.b.block_tables(seqs)
            return
        fwd = self.iso()
        rows = [[fwd[x] for x in self.m.seqs[s][0]] for s in seqs]
        width = max((len(r) for r in rows), default=0)
        got = self.b.block_tables(seqs)
        assert got.shape == (len(seqs), width)
        assert got.tolist() == [r + [0] * (width - len(r)) for r in rows]
        lens = [self.m.seqs[s][1] for s in seqs]
        if 0 in lens:
            with pytest.raises(rk.InvalidArgument):
                self.b.decode_metadata(seqs)
            return
        md = self.b.decode_metadata(seqs)
        assert md.kv_indices.tolist() == [x for r in rows for x in r]
        assert md.kv_indptr.tolist() == np.cumsum([0] + [len(r) for r in rows]).tolist()
        assert md.kv_last_page_len.tolist() == [(n - 1) % self.m.block_size + 1 for n in lens]
        # Extend form: the last e tokens of each sequence are new; their slots and positions.
        e = min(lens, default=0)
        ext = self.b.extend_metadata(seqs, e)
        bs = self.m.block_size
        assert ext.out_cache_loc.tolist() == [
            r[p // bs] * bs + p % bs for r, n in zip(rows, lens) for p in range(n - e, n)
        ]
        assert ext.positions.tolist() == [p for n in lens for p in range(n - e, n)]
        assert ext.kv_indices.tolist() == md.kv_indices.tolist()

    @invariant()
    def consistent(self) -> None:
        if self.b is not None:
            self.b.check()
            self.iso()


SETTINGS = settings(
    max_examples=EXAMPLES,
    stateful_step_count=40,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

def test_blocks_machine_reaches_copy_on_write() -> None:
    """The allocator against the model, at the budget; the runs must reach what they are for."""
    REACHED.clear()
    run_state_machine_as_test(BlocksMachine, settings=SETTINGS)
    runs = REACHED["runs"]
    print(f"{runs} runs: {dict(REACHED)}")
    assert REACHED["copy-on-write"] >= runs / 2, dict(REACHED)
    for what in ["freed a sharing sequence", "error OutOfBlocks", "append without copy"]:
        assert REACHED[what] > 0, f"never reached {what}: {dict(REACHED)}"


# -- the harness can fail: planted bugs must be caught ------------------------------------------


class _Wrapper:
    """Delegates to a real allocator; subclasses override one method with a bug."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.inner = rk.BlockAllocator(num_blocks, block_size)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class ForgetsSharedFree(_Wrapper):
    """Drops a shared sequence's table without decrementing its blocks (a leaked reference)."""

    def free(self, seq: int) -> None:
        table = self.inner.block_table(seq).tolist()
        if any(self.inner.ref_count(x) > 1 for x in table):
            # Keeps the sequence alive: its references are never released.
            return
        self.inner.free(seq)


class HidesCopies(_Wrapper):
    """Performs copy-on-write but does not report the copy to the caller."""

    def append_slots(self, seq: int, n: int = 1) -> list[tuple[int, int]]:
        self.inner.append_slots(seq, n)
        return []


@pytest.mark.parametrize("buggy", [ForgetsSharedFree, HidesCopies])
def test_planted_bug_is_caught(buggy: Callable[[int, int], Any]) -> None:
    machine = type(f"Buggy{buggy.__name__}", (BlocksMachine,), {"factory": buggy})
    with pytest.raises(AssertionError):
        run_state_machine_as_test(
            machine,
            settings=settings(
                max_examples=300,
                stateful_step_count=40,
                deadline=None,
                database=None,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            ),
        )
