//! `proptest-state-machine` over [`BlocksOp`] against the naive model (see `testing`).
//! Cases: `PROPTEST_CASES` (default 256), each up to 60 ops.

use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};

use super::testing::{isomorphism, step, BlocksOp, NaiveBlocks, SEQ_SPACE};
use super::BlockAllocator;

struct Reference;

impl ReferenceStateMachine for Reference {
    type State = NaiveBlocks;
    type Transition = BlocksOp;

    fn init_state() -> BoxedStrategy<NaiveBlocks> {
        (1usize..=24, 1usize..=5)
            .prop_map(|(nb, bs)| NaiveBlocks::new(nb, bs))
            .boxed()
    }

    fn transitions(s: &NaiveBlocks) -> BoxedStrategy<BlocksOp> {
        let seq = || 0..SEQ_SPACE;
        // Token counts around a few blocks, so appends cross block boundaries and blocks run out.
        let toks = (s.block_size * 3).min(255) as u8;
        let tokens = move || prop_oneof![0..=toks, Just(1u8)];
        prop_oneof![
            3 => (seq(), tokens()).prop_map(|(seq, tokens)| BlocksOp::Allocate { seq, tokens }),
            5 => (seq(), tokens()).prop_map(|(seq, tokens)| BlocksOp::Append { seq, tokens }),
            2 => (proptest::collection::vec(seq(), 0..5), prop_oneof![Just(1u8), 0..=toks])
                .prop_map(|(seqs, tokens)| BlocksOp::AppendBatch { seqs, tokens }),
            3 => (seq(), seq()).prop_map(|(parent, child)| BlocksOp::Fork { parent, child }),
            2 => seq().prop_map(|seq| BlocksOp::Free { seq }),
            1 => (seq(), 0u8..20, 0u8..20)
                .prop_map(|(seq, start, end)| BlocksOp::SlotMapping { seq, start, end }),
            1 => (proptest::collection::vec(seq(), 0..4), proptest::option::of(0u8..8))
                .prop_map(|(seqs, width)| BlocksOp::BlockTables { seqs, width }),
            1 => proptest::collection::vec(seq(), 0..4)
                .prop_map(|seqs| BlocksOp::DecodeMetadata { seqs }),
            1 => (proptest::collection::vec(seq(), 0..4), 0u8..6)
                .prop_map(|(seqs, extend)| BlocksOp::ExtendMetadata { seqs, extend }),
        ]
        .boxed()
    }

    fn apply(mut s: NaiveBlocks, op: &BlocksOp) -> NaiveBlocks {
        s.apply(op);
        s
    }
}

/// The allocator plus a private model that `step` advances in lock-step with it (the reference
/// state handed to `apply` is already past the op, so the comparison keeps its own copy).
struct Sut {
    alloc: BlockAllocator,
    model: NaiveBlocks,
}

impl StateMachineTest for Sut {
    type SystemUnderTest = Sut;
    type Reference = Reference;

    fn init_test(r: &NaiveBlocks) -> Sut {
        let alloc = BlockAllocator::new(r.num_blocks, r.block_size).expect("valid shape");
        Sut {
            alloc,
            model: r.clone(),
        }
    }

    fn apply(mut s: Sut, r: &NaiveBlocks, op: BlocksOp) -> Sut {
        if let Err(e) = step(&mut s.alloc, &mut s.model, &op) {
            panic!("{e}");
        }
        assert_eq!(
            s.model.seqs, r.seqs,
            "lock-step model diverged from the reference"
        );
        s
    }

    fn check_invariants(s: &Sut, _: &NaiveBlocks) {
        s.alloc.check().expect("check() after every op");
        isomorphism(&s.alloc, &s.model).expect("allocator matches the model");
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig { failure_persistence: None, ..ProptestConfig::default() })]
    #[test]
    fn blocks_state_machine(sequential 1..60 => Sut);
}
