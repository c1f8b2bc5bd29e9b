//! `BlockAllocator::check` shown to fail: each test breaks one invariant of a healthy allocator
//! through the hooks in `corrupt.rs` and requires the checker to name it.

use super::corrupt as c;
use super::BlockAllocator;
use crate::error::CoreError;

/// 8 blocks of 4: sequence 1 (6 tokens, blocks 0 1) forked into 2, sequence 3 (3 tokens).
fn fixture() -> BlockAllocator {
    let mut a = BlockAllocator::new(8, 4).unwrap();
    a.allocate(1, 6).unwrap();
    a.fork(1, 2).unwrap();
    a.allocate(3, 3).unwrap();
    a.check().expect("healthy");
    assert_eq!(a.block_table(1).unwrap(), [0, 1]);
    assert_eq!(a.block_table(3).unwrap(), [2]);
    a
}

fn caught(want: &str, corrupt: impl FnOnce(&mut BlockAllocator)) {
    let mut a = fixture();
    corrupt(&mut a);
    match a.check() {
        Err(CoreError::InvariantViolation(msg)) => {
            assert!(msg.contains(want), "expected {want:?}, check said {msg:?}");
        }
        other => panic!("expected an InvariantViolation about {want:?}, got {other:?}"),
    }
}

#[test]
fn tables_have_ceil_len_blocks() {
    caught("blocks for", |a| c::set_len(a, 1, 9));
    caught("blocks for", |a| c::set_len(a, 3, 0));
    caught("blocks for", |a| c::set_len(a, 3, 5));
}

#[test]
fn table_entries_are_in_range() {
    caught("out of range", |a| c::set_table_entry(a, 3, 0, 8));
    caught("out of range", |a| c::set_table_entry(a, 3, 0, -1));
}

#[test]
fn free_list_entries_are_in_range_and_once() {
    caught("twice on the free list", |a| c::push_free(a, 7));
    caught("free list holds block", |a| c::push_free(a, 8));
    caught("free list holds block", |a| c::push_free(a, -1));
}

#[test]
fn ref_counts_equal_table_references() {
    caught("ref_count", |a| c::set_ref_count(a, 0, 1)); // shared by 1 and 2: 2 references
    caught("ref_count", |a| c::set_ref_count(a, 2, 2));
    caught("ref_count", |a| c::set_ref_count(a, 5, 1)); // a free block
                                                        // A table entry moved to another block, counts not following.
    caught("ref_count", |a| c::set_table_entry(a, 3, 0, 4));
}

#[test]
fn free_list_is_exactly_the_unreferenced_blocks() {
    caught("not on the free list", |a| {
        c::pop_free(a);
    });
    caught("on the free list", |a| c::push_free(a, 2));
}
