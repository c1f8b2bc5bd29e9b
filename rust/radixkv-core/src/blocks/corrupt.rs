//! Test-only hooks that break a `BlockAllocator` on purpose (see `check_tests.rs`).

use super::{BlockAllocator, SeqId};

pub(crate) fn set_len(a: &mut BlockAllocator, seq: SeqId, len: usize) {
    a.seqs.get_mut(&seq).expect("live sequence").len = len;
}

pub(crate) fn set_table_entry(a: &mut BlockAllocator, seq: SeqId, i: usize, block: i32) {
    a.seqs.get_mut(&seq).expect("live sequence").blocks[i] = block;
}

pub(crate) fn push_free(a: &mut BlockAllocator, block: i32) {
    a.free.push(block);
}

pub(crate) fn pop_free(a: &mut BlockAllocator) -> i32 {
    a.free.pop().expect("a free block")
}

pub(crate) fn set_ref_count(a: &mut BlockAllocator, block: usize, rc: u32) {
    a.ref_counts[block] = rc;
}
