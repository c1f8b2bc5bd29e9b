//! Property test: random sequences of `RadixOp`s replayed by the shared harness, which checks
//! the cache against its reference model and runs `check()` after every op. The same op enum
//! drives the cargo-fuzz target. Budget: `PROPTEST_CASES` (default 256 sequences per page size).

use proptest::prelude::*;
use radixkv_core::radix::replay::{Harness, RadixOp, Seq};

fn seq() -> impl Strategy<Value = Seq> {
    (
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(0u8..3, 0..12),
    )
        .prop_map(|(base, keep, tail)| Seq { base, keep, tail })
}

fn op() -> impl Strategy<Value = RadixOp> {
    prop_oneof![
        4 => (0u8..3, seq()).prop_map(|(ns, seq)| RadixOp::Match { ns, seq }),
        2 => (0u8..3, seq()).prop_map(|(ns, seq)| RadixOp::Peek { ns, seq }),
        5 => (0u8..3, seq()).prop_map(|(ns, seq)| RadixOp::Insert { ns, seq }),
        1 => (0u8..3, seq()).prop_map(|(ns, seq)| RadixOp::InsertForeign { ns, seq }),
        3 => any::<u8>().prop_map(|handle| RadixOp::Lock { handle }),
        3 => any::<u8>().prop_map(|handle| RadixOp::Unlock { handle }),
        1 => any::<u8>().prop_map(|handle| RadixOp::PathSlots { handle }),
        2 => (0u8..40).prop_map(|tokens| RadixOp::Evict { tokens }),
        1 => any::<u8>().prop_map(|pages| RadixOp::Alloc { pages }),
        1 => any::<u8>().prop_map(|which| RadixOp::Free { which }),
        1 => any::<u8>().prop_map(|pick| RadixOp::FreeCached { pick }),
    ]
}

fn run(page: usize, slots: usize, ops: &[RadixOp]) -> Result<(), TestCaseError> {
    let mut h = Harness::new(slots, page);
    for (i, op) in ops.iter().enumerate() {
        if let Err(e) = h.apply(op) {
            return Err(TestCaseError::fail(format!("op {i} {op:?}: {e}")));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn ops_match_model_page1(ops in proptest::collection::vec(op(), 1..80)) {
        run(1, 64, &ops)?;
    }

    #[test]
    fn ops_match_model_page2(ops in proptest::collection::vec(op(), 1..80)) {
        run(2, 64, &ops)?;
    }

    #[test]
    fn ops_match_model_page4_tight_pool(ops in proptest::collection::vec(op(), 1..80)) {
        run(4, 32, &ops)?;
    }
}
