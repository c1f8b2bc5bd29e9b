use super::testing::{run_case, BlocksCase, BlocksOp};
use super::*;

fn alloc(nb: usize, bs: usize) -> BlockAllocator {
    BlockAllocator::new(nb, bs).unwrap()
}

#[test]
fn allocate_maps_ceil_blocks_and_slots() {
    let mut a = alloc(8, 4);
    a.allocate(1, 6).unwrap();
    assert_eq!(a.block_table(1).unwrap(), [0, 1]);
    assert_eq!(a.num_free_blocks(), 6);
    assert_eq!(a.slot_mapping(1, 0, 6).unwrap(), [0, 1, 2, 3, 4, 5]);
    a.allocate(2, 0).unwrap();
    assert_eq!(a.block_table(2).unwrap(), [] as [i32; 0]);
    assert!(matches!(
        a.allocate(1, 1),
        Err(CoreError::UnknownSequence(_))
    ));
    assert!(a.can_allocate(24) && !a.can_allocate(25));
    assert!(matches!(
        a.allocate(3, 25),
        Err(CoreError::OutOfBlocks {
            requested: 7,
            free: 6
        })
    ));
    a.check().unwrap();
}

#[test]
fn append_allocates_only_when_last_block_full() {
    let mut a = alloc(8, 4);
    a.allocate(1, 3).unwrap();
    assert!(a.append_slots(1, 1).unwrap().is_empty());
    assert_eq!(a.num_free_blocks(), 7);
    assert!(a.append_slots(1, 1).unwrap().is_empty());
    assert_eq!(a.block_table(1).unwrap(), [0, 1]);
    assert_eq!(a.seq_len(1).unwrap(), 5);
    assert_eq!(a.slot_mapping(1, 4, 5).unwrap(), [4]);
    // Zero tokens is a no-op even on a shared block.
    a.fork(1, 2).unwrap();
    assert!(a.append_slots(1, 0).unwrap().is_empty());
    assert_eq!(a.ref_count(1).unwrap(), 2);
}

#[test]
fn fork_shares_and_cow_copies_once() {
    let mut a = alloc(8, 4);
    a.allocate(1, 6).unwrap(); // blocks 0 (full), 1 (2 of 4)
    a.fork(1, 2).unwrap();
    assert_eq!(a.block_table(2).unwrap(), [0, 1]);
    assert_eq!((a.ref_count(0).unwrap(), a.ref_count(1).unwrap()), (2, 2));
    assert_eq!(a.num_free_blocks(), 6, "fork copies nothing");

    let copies = a.append_slots(2, 1).unwrap();
    assert_eq!(copies, [(1, 2)]);
    assert_eq!(a.block_table(2).unwrap(), [0, 2]);
    assert_eq!((a.ref_count(1).unwrap(), a.ref_count(2).unwrap()), (1, 1));
    // The parent now owns block 1 alone: no copy for it.
    assert!(a.append_slots(1, 1).unwrap().is_empty());
    a.check().unwrap();
}

#[test]
fn cow_with_multi_token_append_crossing_blocks() {
    let mut a = alloc(8, 4);
    a.allocate(1, 6).unwrap();
    a.fork(1, 2).unwrap();
    // 2 tokens fill the copied block, 5 more need two fresh blocks.
    let copies = a.append_slots(2, 7).unwrap();
    assert_eq!(copies, [(1, 2)]);
    assert_eq!(a.block_table(2).unwrap(), [0, 2, 3, 4]);
    assert_eq!(a.seq_len(2).unwrap(), 13);
    a.check().unwrap();
}

#[test]
fn full_shared_last_block_needs_no_copy() {
    let mut a = alloc(4, 4);
    a.allocate(1, 4).unwrap();
    a.fork(1, 2).unwrap();
    assert!(a.append_slots(2, 1).unwrap().is_empty());
    assert_eq!(a.block_table(2).unwrap(), [0, 1]);
    assert_eq!(a.ref_count(0).unwrap(), 2);
}

#[test]
fn out_of_blocks_mid_append_changes_nothing() {
    let mut a = alloc(3, 4);
    a.allocate(1, 6).unwrap();
    a.fork(1, 2).unwrap();
    let before = a.clone();
    // CoW block + 2 fresh = 3 > 1 free.
    assert!(!a.can_append(2, 7).unwrap());
    let e = a.append_slots(2, 7).unwrap_err();
    assert_eq!(
        e,
        CoreError::OutOfBlocks {
            requested: 3,
            free: 1
        }
    );
    assert_eq!(a, before);
    // The CoW alone fits.
    assert!(a.can_append(2, 2).unwrap());
    assert_eq!(a.append_slots(2, 2).unwrap(), [(1, 2)]);
}

#[test]
fn free_returns_block_exactly_at_zero() {
    let mut a = alloc(4, 2);
    a.allocate(1, 4).unwrap();
    a.fork(1, 2).unwrap();
    a.fork(2, 3).unwrap();
    assert_eq!(a.ref_count(0).unwrap(), 3);
    a.free(1).unwrap();
    a.free(3).unwrap();
    assert_eq!((a.ref_count(0).unwrap(), a.num_free_blocks()), (1, 2));
    a.free(2).unwrap();
    assert_eq!((a.ref_count(0).unwrap(), a.num_free_blocks()), (0, 4));
    assert!(matches!(a.free(2), Err(CoreError::UnknownSequence(_))));
    // Freed blocks come back first, in the freed sequence's order.
    a.allocate(4, 3).unwrap();
    assert_eq!(a.block_table(4).unwrap(), [0, 1]);
    a.check().unwrap();
}

#[test]
fn fork_errors() {
    let mut a = alloc(4, 2);
    a.allocate(1, 3).unwrap();
    a.allocate(2, 1).unwrap();
    let before = a.clone();
    assert!(matches!(a.fork(9, 3), Err(CoreError::UnknownSequence(_))));
    assert!(matches!(a.fork(1, 2), Err(CoreError::UnknownSequence(_))));
    assert!(matches!(a.fork(1, 1), Err(CoreError::UnknownSequence(_))));
    assert_eq!(a, before);
}

#[test]
fn tables_and_metadata() {
    let mut a = alloc(8, 4);
    a.allocate(10, 9).unwrap();
    a.allocate(20, 2).unwrap();
    let (t, w) = a.block_tables(&[20, 10], None).unwrap();
    assert_eq!((t, w), (vec![3, 0, 0, 0, 1, 2], 3));
    assert_eq!(a.block_tables(&[10], Some(5)).unwrap().0, [0, 1, 2, 0, 0]);
    assert!(a.block_tables(&[10], Some(2)).is_err());
    assert!(matches!(
        a.block_tables(&[10, 7], None),
        Err(CoreError::UnknownSequence(_))
    ));
    let m = a.decode_metadata(&[10, 20]).unwrap();
    assert_eq!(m.field("kv_indices").unwrap(), [0, 1, 2, 3]);
    assert_eq!(m.field("kv_last_page_len").unwrap(), [1, 2]);
    assert_eq!(m.field("out_cache_loc").unwrap(), [8, 13]);
    // Prefill of seq 20 (2 new tokens) and a 3-token chunk appended to seq 10.
    a.append_slots(10, 3).unwrap();
    let m = a.extend_metadata(&[20, 10], &[2, 3]).unwrap();
    assert_eq!(m.field("out_cache_loc").unwrap(), [12, 13, 9, 10, 11]);
    assert_eq!(m.field("positions").unwrap(), [0, 1, 9, 10, 11]);
    assert_eq!(m.field("kv_indices").unwrap(), [3, 0, 1, 2]);
    assert!(a.extend_metadata(&[20], &[3]).is_err());
    let m = a.block_table_metadata(&[10, 20], None).unwrap();
    assert_eq!(m.field("block_tables").unwrap(), [0, 1, 2, 3, 0, 0]);
    assert_eq!(m.field("seq_lens").unwrap(), [12, 2]);
}

#[test]
fn slot_mapping_range_checked() {
    let mut a = alloc(4, 4);
    a.allocate(1, 5).unwrap();
    assert!(a.slot_mapping(1, 0, 6).is_err());
    assert!(a.slot_mapping(1, 3, 2).is_err());
    assert!(a.slot_mapping(1, 5, 5).unwrap().is_empty());
}

#[test]
fn new_validates_shape() {
    assert!(BlockAllocator::new(4, 0).is_err());
    assert!(BlockAllocator::new(1 << 20, 1 << 12).is_err());
    assert!(BlockAllocator::new(1 << 19, 1 << 12).is_ok());
    assert_eq!(BlockAllocator::new(0, 16).unwrap().num_free_blocks(), 0);
}

#[test]
fn huge_widths_are_errors_not_aborts() {
    let mut a = alloc(4, 2);
    a.allocate(1, 3).unwrap();
    assert!(a.block_tables(&[1, 1], Some(usize::MAX / 2)).is_err());
    assert!(a.block_tables(&[1], Some(1 << 31)).is_err());
    assert!(a.block_table_metadata(&[1], Some(usize::MAX)).is_err());
}

#[test]
fn check_catches_corruption() {
    let mut a = alloc(4, 2);
    a.allocate(1, 3).unwrap();
    let mut bad = a.clone();
    bad.ref_counts[0] += 1;
    assert!(matches!(bad.check(), Err(CoreError::InvariantViolation(_))));
    let mut bad = a.clone();
    bad.free.push(0);
    assert!(bad.check().is_err());
    let mut bad = a.clone();
    bad.free.pop();
    assert!(bad.check().is_err());
    let mut bad = a.clone();
    bad.seqs.get_mut(&1).unwrap().len = 5;
    assert!(bad.check().is_err());
}

#[test]
fn harness_catches_a_divergence() {
    // The differential step must notice an allocator that is not what the model expects:
    // replay a case, then corrupt the allocator and take one more step.
    let case = BlocksCase {
        num_blocks: 7,
        block_size: 3,
        ops: vec![
            BlocksOp::Allocate { seq: 0, tokens: 5 },
            BlocksOp::Fork {
                parent: 0,
                child: 1,
            },
            BlocksOp::Append { seq: 1, tokens: 4 },
        ],
    };
    run_case(&case).unwrap();
    let (nb, bs) = case.shape();
    let mut a = BlockAllocator::new(nb, bs).unwrap();
    let mut m = testing::NaiveBlocks::new(nb, bs);
    for op in &case.ops[..2] {
        testing::step(&mut a, &mut m, op).unwrap();
    }
    // A "forgotten" fork on the allocator side: the model has seq 1, the allocator does not.
    a.free(testing::seq_id(1)).unwrap();
    assert!(testing::step(&mut a, &mut m, &case.ops[2]).is_err());
}

#[test]
fn batch_append_equals_sequential_appends() {
    let mut a = alloc(16, 4);
    a.allocate(1, 6).unwrap();
    a.fork(1, 2).unwrap();
    a.fork(1, 3).unwrap();
    a.allocate(4, 3).unwrap();
    let mut seq = a.clone();
    let (copies, slots) = a.append_slots_batch(&[2, 4, 3, 1], 3).unwrap();
    let mut want_copies = Vec::new();
    let mut want_slots = Vec::new();
    for id in [2, 4, 3, 1] {
        let start = seq.seq_len(id).unwrap();
        want_copies.extend(seq.append_slots(id, 3).unwrap());
        want_slots.extend(seq.slot_mapping(id, start, start + 3).unwrap());
    }
    assert_eq!((copies, slots), (want_copies, want_slots));
    assert_eq!(a, seq);
    a.check().unwrap();
}

#[test]
fn batch_append_counts_a_shared_block_copy_once() {
    // Two sequences share a partly filled block; one free block is enough for the batch:
    // the first copies, after which the second owns the original alone and writes in place.
    let mut a = alloc(3, 4);
    a.allocate(1, 6).unwrap();
    a.fork(1, 2).unwrap();
    assert_eq!(a.num_free_blocks(), 1);
    let (copies, slots) = a.append_slots_batch(&[1, 2], 1).unwrap();
    assert_eq!(copies, [(1, 2)]);
    assert_eq!(slots, [10, 6]);
    a.check().unwrap();
}

#[test]
fn batch_append_is_all_or_nothing() {
    let mut a = alloc(4, 2);
    a.allocate(1, 2).unwrap();
    a.allocate(2, 2).unwrap();
    let before = a.clone();
    // 1 needs 2 blocks, 2 needs 2 more: 4 > 2 free.
    assert!(matches!(
        a.append_slots_batch(&[1, 2], 3),
        Err(CoreError::OutOfBlocks {
            requested: 4,
            free: 2
        })
    ));
    assert!(matches!(
        a.append_slots_batch(&[1, 1], 1),
        Err(CoreError::InvalidArgument(_))
    ));
    assert!(matches!(
        a.append_slots_batch(&[1, 9], 1),
        Err(CoreError::UnknownSequence(_))
    ));
    assert_eq!(a, before);
    assert_eq!(a.append_slots_batch(&[], 5).unwrap(), (vec![], vec![]));
}

#[test]
fn accessors_follow_the_sequences() {
    let mut a = alloc(8, 4);
    assert_eq!((a.num_blocks(), a.block_size(), a.num_seqs()), (8, 4, 0));
    assert!(!a.contains(1));
    a.allocate(1, 5).unwrap();
    a.fork(1, 2).unwrap();
    assert_eq!((a.num_seqs(), a.seq_ids()), (2, vec![1, 2]));
    assert!(a.contains(1) && a.contains(2) && !a.contains(3));
    assert_eq!((a.ref_count(0).unwrap(), a.ref_count(1).unwrap()), (2, 2));
    assert_eq!(a.blocks_needed(9), 3);
    a.free(1).unwrap();
    assert_eq!((a.num_seqs(), a.seq_ids()), (1, vec![2]));
    assert!(!a.contains(1) && a.contains(2));
    assert_eq!(
        (a.num_blocks(), a.block_size(), a.num_free_blocks()),
        (8, 4, 6)
    );
    a.check().unwrap();
}
