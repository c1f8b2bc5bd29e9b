"""Batch metadata builders: the golden case (docs/contract.md §3), decode forms, input kinds, the
single buffer."""

from __future__ import annotations

from typing import Any, Callable

import os

import hypothesis.strategies as st
import numpy as np
import pytest
from hypothesis import given, settings

import radixkv as rk

torch = pytest.importorskip("torch")

EXAMPLES = int(os.environ.get("RADIXKV_HYPOTHESIS_EXAMPLES", "150"))

GOLDEN_PREFIX = [[108, 109, 110, 111], [], [80, 81, 82, 83, 84]]
GOLDEN_NEW = [[42, 43], [201, 202, 203], [99]]
GOLDEN = {
    "extend_seq_lens": [2, 3, 1],
    "seq_lens": [6, 3, 6],
    "extend_prefix_lens": [4, 0, 5],
    "qo_indptr": [0, 2, 5, 6],
    "kv_indptr": [0, 6, 9, 15],
    "extend_start_loc": [0, 2, 5],
    "kv_indices": [108, 109, 110, 111, 42, 43, 201, 202, 203, 80, 81, 82, 83, 84, 99],
}

# Every accepted per-request input form.
CONVERTERS: dict[str, Callable[[list[int]], Any]] = {
    "list": list,
    "tuple": tuple,
    "np.int32": lambda v: np.asarray(v, dtype=np.int32),
    "np.int64": lambda v: np.asarray(v, dtype=np.int64),
    "np.int32-strided": lambda v: np.asarray([x for s in v for x in (s, -7)], np.int32)[::2],
    "torch.int32": lambda v: torch.tensor(v, dtype=torch.int32),
    "torch.int64": lambda v: torch.tensor(v, dtype=torch.int64),
}


@pytest.mark.parametrize("kind", list(CONVERTERS))
def test_extend_golden_case(kind: str) -> None:
    conv = CONVERTERS[kind]
    md = rk.build_extend_metadata([conv(p) for p in GOLDEN_PREFIX], [conv(n) for n in GOLDEN_NEW])
    for name, want in GOLDEN.items():
        got = getattr(md, name)
        assert isinstance(got, np.ndarray) and got.dtype == np.int32, name
        assert got.tolist() == want, name
    assert md.out_cache_loc.tolist() == [42, 43, 201, 202, 203, 99]
    assert md.positions.tolist() == [4, 5, 0, 1, 2, 5]
    assert (md.batch_size, md.num_tokens, md.max_seq_len) == (3, 6, 6)
    assert (md.max_extend_len, md.max_prefix_len) == (3, 5)


def test_extend_matches_numpy_reference_on_random_batch() -> None:
    rng = np.random.default_rng(7)
    pre = [rng.integers(0, 10**6, rng.integers(0, 50), dtype=np.int32) for _ in range(40)]
    new = [rng.integers(0, 10**6, rng.integers(0, 20), dtype=np.int32) for _ in range(40)]
    md = rk.build_extend_metadata(pre, new)
    pl = np.array([len(p) for p in pre])
    nl = np.array([len(n) for n in new])
    want = np.concatenate([np.r_[p, n] for p, n in zip(pre, new)])
    np.testing.assert_array_equal(md.kv_indices, want)
    np.testing.assert_array_equal(md.qo_indptr, np.r_[0, np.cumsum(nl)])
    np.testing.assert_array_equal(md.kv_indptr, np.r_[0, np.cumsum(pl + nl)])
    np.testing.assert_array_equal(md.extend_start_loc, md.qo_indptr[:-1])
    np.testing.assert_array_equal(md.extend_prefix_lens, md.seq_lens - md.extend_seq_lens)
    positions = np.concatenate([np.arange(a, a + b) for a, b in zip(pl, nl)])
    np.testing.assert_array_equal(md.positions, positions)


def test_fields_are_views_of_one_aligned_buffer() -> None:
    md = rk.build_extend_metadata(GOLDEN_PREFIX, GOLDEN_NEW)
    assert md.buffer.dtype == np.int32 and md.buffer.ndim == 1
    for name, arr in md.fields().items():
        assert arr.base is md.buffer or np.shares_memory(arr, md.buffer), name
        base = md.buffer.__array_interface__["data"][0]
        offset = (arr.__array_interface__["data"][0] - base) // 4
        assert offset % 16 == 0, f"{name} starts at element {offset}"


def test_to_cpu_gives_int32_tensors_sharing_one_storage() -> None:
    md = rk.build_extend_metadata(GOLDEN_PREFIX, GOLDEN_NEW)
    t = md.to("cpu")
    assert isinstance(t.buffer, torch.Tensor)
    storages = {t.field(n).untyped_storage().data_ptr() for n in t.fields()}
    assert storages == {t.buffer.untyped_storage().data_ptr()}
    for name, want in GOLDEN.items():
        got = getattr(t, name)
        assert isinstance(got, torch.Tensor) and got.dtype == torch.int32, name
        assert got.tolist() == want, name
    assert t.max_seq_len == 6 and t.batch_size == 3


def test_to_moves_the_buffer_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Count Tensor.to calls: a batch is one transfer, whatever the number of fields.
    calls: list[Any] = []
    real_to = torch.Tensor.to

    def counting_to(self: Any, *a: Any, **k: Any) -> Any:
        calls.append((tuple(self.shape), a, k))
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", counting_to)
    md = rk.build_decode_metadata([[1, 2], [3]])
    t = md.to("cpu", non_blocking=True)
    assert len(calls) == 1 and calls[0][2] == {"non_blocking": True}
    assert t.kv_indices.tolist() == [1, 2, 3]


def test_decode_csr_over_slots() -> None:
    md = rk.build_decode_metadata([np.array([5, 6, 7]), [9], torch.tensor([1, 2])])
    assert md.qo_indptr.tolist() == [0, 1, 2, 3]
    assert md.kv_indptr.tolist() == [0, 3, 4, 6]
    assert md.kv_indices.tolist() == [5, 6, 7, 9, 1, 2]
    assert md.seq_lens.tolist() == [3, 1, 2]
    assert list(md.fields()) == [
        "qo_indptr", "kv_indptr", "kv_indices", "seq_lens", "kv_last_page_len", "out_cache_loc"]
    assert md.kv_last_page_len.tolist() == [1, 1, 1]
    assert (md.page_size, md.max_seq_len, md.scalars["max_pages"]) == (1, 3, 3)


@pytest.mark.parametrize("page_size", [2, 4, 16])
def test_decode_csr_over_pages(page_size: int) -> None:
    rng = np.random.default_rng(page_size)
    lens = [1, page_size, page_size + 1, 3 * page_size - 1, 5]
    pages = [rng.permutation(100)[: -(-n // page_size)].astype(np.int64) for n in lens]
    md = rk.build_decode_metadata(pages, lens, page_size=page_size)
    assert md.kv_indices.tolist() == [int(x) for p in pages for x in p]
    assert md.kv_indptr.tolist() == np.r_[0, np.cumsum([len(p) for p in pages])].tolist()
    assert md.kv_last_page_len.tolist() == [(n - 1) % page_size + 1 for n in lens]
    assert md.seq_lens.tolist() == lens


def test_block_table_form() -> None:
    md = rk.build_block_table_metadata([[4, 2], [7], [1, 3, 8]], [5, 4, 9], page_size=4)
    assert md.block_tables.shape == (3, 3)
    assert md.block_tables.tolist() == [[4, 2, 0], [7, 0, 0], [1, 3, 8]]
    assert md.seq_lens.tolist() == [5, 4, 9]
    assert md.kv_last_page_len.tolist() == [1, 4, 1]
    wide = rk.build_block_table_metadata([[4, 2]], [5], page_size=4, width=6)
    assert wide.block_tables.shape == (1, 6) and wide.max_blocks == 6
    t = md.to("cpu")
    assert t.block_tables.shape == (3, 3) and t.block_tables.dtype == torch.int32
    assert t.block_tables.tolist() == md.block_tables.tolist()


def test_allocator_decode_metadata_forms() -> None:
    b = rk.BlockAllocator(16, 4)
    b.allocate(10, 9)
    b.allocate(20, 2)
    b.fork(10, 30)
    b.append_slots(30, 2)
    ids = [10, 20, 30]
    csr = b.decode_metadata(ids)
    tables = [b.block_table(i).tolist() for i in ids]
    assert csr.kv_indices.tolist() == [x for t in tables for x in t]
    assert csr.seq_lens.tolist() == [9, 2, 11]
    assert csr.kv_last_page_len.tolist() == [1, 2, 3]
    assert csr.page_size == 4
    bt = b.block_table_metadata(ids)
    np.testing.assert_array_equal(bt.block_tables, b.block_tables(ids))
    assert bt.seq_lens.tolist() == [9, 2, 11]
    # The same batch through the free function.
    again = rk.build_decode_metadata([b.block_table(i) for i in ids], [9, 2, 11], page_size=4)
    np.testing.assert_array_equal(again.buffer, csr.buffer)


def test_paged_extend_over_pages() -> None:
    # Request 0: 6 tokens in pages [7, 2] of 4, the last 3 new; request 1: 4 tokens, all new.
    md = rk.build_paged_extend_metadata([[7, 2], np.array([5])], [6, 4], [3, 4], page_size=4)
    assert md.qo_indptr.tolist() == [0, 3, 7]
    assert md.kv_indptr.tolist() == [0, 2, 3]
    assert md.kv_indices.tolist() == [7, 2, 5]
    assert md.seq_lens.tolist() == [6, 4]
    assert md.extend_prefix_lens.tolist() == [3, 0]
    assert md.kv_last_page_len.tolist() == [2, 4]
    assert md.out_cache_loc.tolist() == [31, 8, 9, 20, 21, 22, 23]
    assert md.positions.tolist() == [3, 4, 5, 0, 1, 2, 3]
    assert (md.page_size, md.max_prefix_len, md.scalars["max_pages"]) == (4, 3, 2)


def test_paged_extend_with_unit_pages_equals_slot_extend() -> None:
    slots = [p + n for p, n in zip(GOLDEN_PREFIX, GOLDEN_NEW)]
    paged = rk.build_paged_extend_metadata(slots, [6, 3, 6], [2, 3, 1])
    flat = rk.build_extend_metadata(GOLDEN_PREFIX, GOLDEN_NEW)
    np.testing.assert_array_equal(paged.buffer, flat.buffer)
    assert paged.scalars == flat.scalars and paged.page_size == 1
    assert flat.kv_last_page_len.tolist() == [1, 1, 1]


def test_strided_length_arrays() -> None:
    lens = np.array([5, -1, 3], np.int32)[::2]  # a non-contiguous view: [5, 3]
    md = rk.build_decode_metadata([[4, 2], [7]], lens, page_size=4)
    assert md.seq_lens.tolist() == [5, 3]
    ext = rk.build_paged_extend_metadata([[4, 2], [7]], lens, np.array([1, 0, 2])[::2], 4)
    assert ext.extend_seq_lens.tolist() == [1, 2]


def test_decode_out_cache_loc_is_each_last_slot() -> None:
    md = rk.build_decode_metadata([[4, 2], [7]], [5, 3], page_size=4)
    assert md.out_cache_loc.tolist() == [8, 30]
    bt = rk.build_block_table_metadata([[4, 2], [7]], [5, 3], page_size=4)
    assert bt.out_cache_loc.tolist() == [8, 30]


def test_allocator_extend_metadata_after_prefill_and_chunk() -> None:
    b = rk.BlockAllocator(16, 4)
    b.allocate(1, 6)  # prefill of 6 tokens: blocks 0, 1
    b.allocate(2, 9)  # blocks 2, 3, 4
    b.fork(2, 3)
    copies = b.append_slots(3, 2)  # 2 more tokens for the fork: copy-on-write of block 4
    md = b.extend_metadata([1, 3], [6, 2])
    assert copies == [(4, 5)]
    assert md.kv_indices.tolist() == [0, 1, 2, 3, 5]
    assert md.out_cache_loc.tolist() == [*range(6), 21, 22]
    assert md.out_cache_loc.tolist()[-2:] == b.slot_mapping(3, 9, 11).tolist()
    assert md.positions.tolist() == [0, 1, 2, 3, 4, 5, 9, 10]
    assert md.extend_prefix_lens.tolist() == [0, 9]
    same = b.extend_metadata([1, 3], np.array([6, 2]))
    np.testing.assert_array_equal(same.buffer, md.buffer)
    assert b.extend_metadata([1, 2], 1).out_cache_loc.tolist() == [5, 16]
    with pytest.raises(rk.InvalidArgument):
        b.extend_metadata([1], [7])
    with pytest.raises(rk.UnknownSequence):
        b.extend_metadata([9], [1])
    t = md.to("cpu")
    assert t.out_cache_loc.dtype == torch.int32 and t.seq_lens.tolist() == [6, 11]


def test_empty_batches() -> None:
    md = rk.build_extend_metadata([], [])
    assert md.qo_indptr.tolist() == [0] and md.kv_indices.size == 0
    assert rk.build_decode_metadata([]).kv_indptr.tolist() == [0]
    assert rk.build_block_table_metadata([]).block_tables.shape == (0, 0)


BAD_BUILDS: list[tuple[str, Callable[[], object]]] = [
    ("lengths differ", lambda: rk.build_extend_metadata([[1]], [[2], [3]])),
    ("negative slot", lambda: rk.build_extend_metadata([[1, -2]], [[3]])),
    ("float slots", lambda: rk.build_extend_metadata([[1.5]], [[3]])),
    ("float array", lambda: rk.build_extend_metadata([np.array([1.0])], [[3]])),
    ("string slots", lambda: rk.build_extend_metadata(["ab"], [[3]])),
    ("not a list", lambda: rk.build_extend_metadata(np.zeros((2, 2), np.int32), [[1], [2]])),
    ("slot > int32", lambda: rk.build_extend_metadata([np.array([2**31], np.int64)], [[3]])),
    ("2-D request", lambda: rk.build_extend_metadata([np.zeros((2, 2), np.int32)], [[3]])),
    ("decode empty request", lambda: rk.build_decode_metadata([[]])),
    ("decode kv_lens missing", lambda: rk.build_decode_metadata([[1]], page_size=4)),
    ("decode pages mismatch", lambda: rk.build_decode_metadata([[1]], [5], page_size=4)),
    ("decode kv_lens count", lambda: rk.build_decode_metadata([[1]], [1, 1])),
    ("decode negative len", lambda: rk.build_decode_metadata([[1]], [-1])),
    ("decode page_size 0", lambda: rk.build_decode_metadata([[1]], [1], page_size=0)),
    ("decode page_size float", lambda: rk.build_decode_metadata([[1]], [1], page_size=2.0)),
    ("table too narrow", lambda: rk.build_block_table_metadata([[1, 2]], width=1)),
    ("table negative page", lambda: rk.build_block_table_metadata([[-1]])),
    ("page slots beyond int32", lambda: rk.build_decode_metadata([[2**28]], [1], page_size=8)),
    ("paged extend too long", lambda: rk.build_paged_extend_metadata([[1]], [2], [3], 2)),
    ("paged extend negative", lambda: rk.build_paged_extend_metadata([[1]], [2], [-1], 2)),
    ("paged extend count", lambda: rk.build_paged_extend_metadata([[1]], [2], [1, 1], 2)),
    ("paged extend pages", lambda: rk.build_paged_extend_metadata([[1, 2]], [2], [1], 2)),
]


@pytest.mark.parametrize("case", BAD_BUILDS, ids=[c[0] for c in BAD_BUILDS])
def test_bad_inputs_raise_invalid_argument(case: tuple[str, Callable[[], object]]) -> None:
    with pytest.raises(rk.InvalidArgument):
        case[1]()


def test_inputs_are_not_modified() -> None:
    pre = [np.array([3, 2, 1], np.int32)]
    new = [torch.tensor([9], dtype=torch.int64)]
    md = rk.build_extend_metadata(pre, new)
    md.kv_indices[:] = 0  # the result is a fresh buffer, not a view of the inputs
    assert pre[0].tolist() == [3, 2, 1] and new[0].tolist() == [9]


def test_large_batch_is_consistent() -> None:
    # 256 requests with 4K-token contexts: the size the performance target is stated for.
    rng = np.random.default_rng(1)
    pre = [rng.integers(0, 2**20, 4032, dtype=np.int32) for _ in range(256)]
    new = [rng.integers(0, 2**20, 64, dtype=np.int32) for _ in range(256)]
    md = rk.build_extend_metadata(pre, new)
    assert md.kv_indptr[-1] == 256 * 4096 and md.kv_indices.size == 256 * 4096
    assert md.kv_indices[4096 * 7 + 4032 :][:64].tolist() == new[7].tolist()


SLOTS = st.lists(st.integers(0, 2**31 - 1), max_size=12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(batch=st.lists(st.tuples(SLOTS, SLOTS), max_size=8), kind=st.sampled_from(list(CONVERTERS)))
def test_extend_property_matches_reference(
    batch: list[tuple[list[int], list[int]]], kind: str
) -> None:
    conv = CONVERTERS[kind]
    md = rk.build_extend_metadata([conv(p) for p, _ in batch], [conv(n) for _, n in batch])
    pl = [len(p) for p, _ in batch]
    nl = [len(n) for _, n in batch]
    assert md.kv_indices.tolist() == [x for p, n in batch for x in p + n]
    assert md.out_cache_loc.tolist() == [x for _, n in batch for x in n]
    assert md.qo_indptr.tolist() == np.cumsum([0] + nl).tolist()
    assert md.kv_indptr.tolist() == np.cumsum([0] + [a + b for a, b in zip(pl, nl)]).tolist()
    assert md.extend_prefix_lens.tolist() == pl and md.extend_seq_lens.tolist() == nl
    assert md.extend_start_loc.tolist() == md.qo_indptr.tolist()[:-1]
    assert md.positions.tolist() == [i for a, b in zip(pl, nl) for i in range(a, a + b)]
    assert md.max_seq_len == max([a + b for a, b in zip(pl, nl)], default=0)


@st.composite
def paged_batch(draw: st.DrawFn) -> tuple[int, list[list[int]], list[int]]:
    page_size = draw(st.sampled_from([1, 2, 3, 16]))
    lens = draw(st.lists(st.integers(1, 5 * page_size), max_size=8))
    pages = [draw(st.lists(st.integers(0, 10**6), min_size=-(-n // page_size),
                           max_size=-(-n // page_size))) for n in lens]
    return page_size, pages, lens


@settings(max_examples=EXAMPLES, deadline=None)
@given(case=paged_batch(), width_extra=st.integers(0, 3))
def test_decode_forms_property(
    case: tuple[int, list[list[int]], list[int]], width_extra: int
) -> None:
    page_size, pages, lens = case
    csr = rk.build_decode_metadata(pages, lens, page_size=page_size)
    assert csr.qo_indptr.tolist() == list(range(len(lens) + 1))
    assert csr.kv_indptr.tolist() == np.cumsum([0] + [len(p) for p in pages]).tolist()
    assert csr.kv_indices.tolist() == [x for p in pages for x in p]
    assert csr.kv_last_page_len.tolist() == [(n - 1) % page_size + 1 for n in lens]
    width = max((len(p) for p in pages), default=0) + width_extra
    bt = rk.build_block_table_metadata(pages, lens, page_size=page_size, width=width)
    assert bt.block_tables.shape == (len(pages), width)
    assert bt.block_tables.tolist() == [p + [0] * (width - len(p)) for p in pages]
    assert bt.seq_lens.tolist() == lens
    assert bt.kv_last_page_len.tolist() == csr.kv_last_page_len.tolist()


@pytest.mark.parametrize("kind", ["extend", "decode", "block_table"])
def test_kv_lens_is_a_deprecated_alias_of_seq_lens(kind: str) -> None:
    # One name per quantity: every kind of metadata calls the lengths seq_lens; the old kv_lens
    # still reads the same array but warns.
    md: rk.BatchMetadata[np.ndarray] = {
        "extend": lambda: rk.build_extend_metadata([[1, 2]], [[3]]),
        "decode": lambda: rk.build_decode_metadata([[1, 2, 3]]),
        "block_table": lambda: rk.build_block_table_metadata([[1, 2, 3]]),
    }[kind]()
    assert "kv_lens" not in md.fields() and md.seq_lens.tolist() == [3]
    with pytest.warns(DeprecationWarning, match="'kv_lens' is a deprecated alias of 'seq_lens'"):
        alias = md.kv_lens
    assert np.shares_memory(alias, md.seq_lens) and alias.tolist() == [3]
    with pytest.warns(DeprecationWarning, match="deprecated alias"):
        assert md.field("kv_lens").tolist() == [3]
    with pytest.raises(KeyError):
        md.field("no_such_field")


def test_extend_plan_rides_in_the_metadata() -> None:
    # Request 0: 3 new of 600 tokens (a long request: its tiles stay in runs); request 1: 5 new of
    # 9. group 2, tiles of 4 rows: request 0 has 2 tiles (rank 0 sees 600 keys, rank 1 598),
    # request 1 has 3 (9, 7, 5 keys).
    pages = [list(range(38)), [50]]
    m = rk.build_paged_extend_metadata(pages, [600, 9], [3, 5], 16, plan_group=2, plan_tile_rows=4)
    assert m.plan_tile_rows == 4
    assert m.extend_plan.shape == (5, 2)
    assert m.extend_plan.tolist() == [[0, 0], [0, 1], [1, 0], [1, 1], [1, 2]]
    flat = rk._core.build_extend_plan([3, 5], [600, 9], 2, 4)
    assert flat.tolist() == m.extend_plan.reshape(-1).tolist()
    # Through .to: one copy, the plan a [m, 2] tensor view like the other fields.
    t = m.to("cpu")
    assert tuple(t.extend_plan.shape) == (5, 2) and t.extend_plan.dtype.is_floating_point is False
    assert t.extend_plan.tolist() == m.extend_plan.tolist()
    # Without the plan arguments: no plan; with one of them: an error naming both.
    plain = rk.build_paged_extend_metadata(pages, [600, 9], [3, 5], 16)
    assert plain.extend_plan is None and plain.plan_tile_rows is None
    with pytest.raises(rk.InvalidArgument, match="plan_group .* plan_tile_rows"):
        rk.build_paged_extend_metadata(pages, [600, 9], [3, 5], 16, plan_tile_rows=4)
    # A uniform batch: an empty plan (the kernels' rank order serves it).
    u = rk.build_extend_metadata([[1, 2], [3, 4]], [[5], [6]], plan_group=4, plan_tile_rows=128)
    assert u.extend_plan.shape == (0, 2)
    with pytest.raises(rk.InvalidArgument, match="group"):
        rk._core.build_extend_plan([1], [2], 0, 4)
