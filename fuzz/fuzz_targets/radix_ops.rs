//! Structured fuzzing of the radix cache: a pool size, a page size and a list of `RadixOp`s
//! (ops refer to earlier sequences and handles by index), replayed by the same harness as the
//! proptest machine. The harness compares every result with its reference model and runs
//! `check()` after every op; any mismatch panics, which libFuzzer reports as a crash.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radixkv_core::radix::replay::{Harness, RadixOp};
use radixkv_core::radix::Policy;

#[derive(Debug, arbitrary::Arbitrary)]
struct Input {
    page_shift: u8,
    pool_pages: u8,
    /// Eviction policy (index into `Policy::NAMES`) and whether events are recorded.
    policy: u8,
    events: bool,
    ops: Vec<RadixOp>,
}

fuzz_target!(|input: Input| {
    let page = [1usize, 2, 4, 16][usize::from(input.page_shift % 4)];
    let pages = 4 + usize::from(input.pool_pages % 29);
    let policy = Policy::parse(Policy::NAMES[usize::from(input.policy) % Policy::NAMES.len()])
        .expect("a listed name");
    let mut h = Harness::with_options(pages * page, page, policy, input.events);
    for (i, op) in input.ops.iter().take(256).enumerate() {
        if let Err(e) = h.apply(op) {
            panic!("op {i} {op:?}: {e}");
        }
    }
});
