//! Property test: random sequences of `RadixOp`s replayed by the shared harness, which checks
//! the cache against its reference model and runs `check()` after every op. The same op enum
//! drives the cargo-fuzz target. Page sizes 1, 2 and 16 (each with pools smaller than what the
//! ops insert), three namespaces. Budget: `PROPTEST_CASES` (default 256 sequences per test).

use super::replay::{Harness, RadixOp, Seq};
use super::Policy;
use proptest::prelude::*;

fn seq() -> impl Strategy<Value = Seq> {
    (
        any::<u8>(),
        any::<u8>(),
        proptest::collection::vec(0u8..3, 0..40),
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
        1 => (0u8..16).prop_map(|tokens| RadixOp::Evict { tokens }),
        1 => any::<u8>().prop_map(|pages| RadixOp::Alloc { pages }),
        1 => any::<u8>().prop_map(|which| RadixOp::Free { which }),
        1 => any::<u8>().prop_map(|pick| RadixOp::FreeCached { pick }),
    ]
}

/// `PROPTEST_CASES` if set, else 256 (an explicit `cases` would otherwise ignore the variable).
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256)
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
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

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

    #[test]
    fn ops_match_model_page16(ops in proptest::collection::vec(op(), 1..80)) {
        run(16, 16 * 10, &ops)?;
    }

    /// Every eviction policy, with events on (`check()` recomputes the page-hash chains).
    #[test]
    fn ops_match_model_each_policy_with_events(
        policy in 0usize..Policy::NAMES.len(),
        page in prop_oneof![Just(1usize), Just(2)],
        ops in proptest::collection::vec(op(), 1..60),
    ) {
        let policy = Policy::parse(Policy::NAMES[policy]).unwrap();
        let mut h = Harness::with_options(32, page, policy, true);
        for (i, op) in ops.iter().enumerate() {
            if let Err(e) = h.apply(op) {
                return Err(TestCaseError::fail(format!("{policy:?} op {i} {op:?}: {e}")));
            }
        }
    }
}

/// The generators are not vacuous: over a fixed-seed batch of random op sequences at each page
/// size, every interesting outcome happens: hits, splits, locks, refused unlocks, stale
/// handles, evictions (also of pages under a locked path), pool exhaustion, cross-namespace
/// misses and (page > 1) matches that stop inside a page the cache holds.
#[test]
fn generators_reach_every_case() {
    use proptest::strategy::ValueTree;
    use proptest::test_runner::{Config, TestRng, TestRunner};
    for (page, slots) in [(1, 32), (2, 48), (16, 16 * 10)] {
        let mut runner = TestRunner::new_with_rng(
            Config::default(),
            TestRng::deterministic_rng(Config::default().rng_algorithm),
        );
        let strategy = proptest::collection::vec(op(), 40..80);
        let mut t = super::replay::Stats::default();
        for _ in 0..100 {
            let ops = strategy.new_tree(&mut runner).unwrap().current();
            let mut h = Harness::new(slots, page);
            for op in &ops {
                h.apply(op).unwrap();
            }
            let s = h.stats;
            t.nonempty_matches += s.nonempty_matches;
            t.partial_page_matches += s.partial_page_matches;
            t.cross_namespace_misses += s.cross_namespace_misses;
            t.evicted_under_lock += s.evicted_under_lock;
            t.splits += s.splits;
            t.locks += s.locks;
            t.not_locked += s.not_locked;
            t.stale += s.stale;
            t.evicted_tokens += s.evicted_tokens;
            t.out_of_slots += s.out_of_slots;
        }
        println!("page {page}: {t:?}");
        assert!(
            t.nonempty_matches > 50 && t.splits > 20 && t.locks > 20,
            "page {page}: {t:?}"
        );
        assert!(
            t.not_locked > 0 && t.stale > 0 && t.evicted_tokens > 0 && t.out_of_slots > 0,
            "page {page}: {t:?}"
        );
        assert!(
            t.cross_namespace_misses > 10 && t.evicted_under_lock > 0,
            "page {page}: {t:?}"
        );
        assert!(
            page == 1 || t.partial_page_matches > 10,
            "page {page}: {t:?}"
        );
    }
}
