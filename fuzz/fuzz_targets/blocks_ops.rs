//! Structured fuzzing of `BlockAllocator`: each input is an allocator shape plus a list of
//! operations (`radixkv_core::blocks::testing::BlocksOp`, shared with the proptest machine).
//! Every operation is replayed against the naive model; the step then requires `check()` to
//! pass, the allocator to be isomorphic to the model, and a failed call to have changed nothing.
#![no_main]

use libfuzzer_sys::fuzz_target;
use radixkv_core::blocks::testing::{run_case, BlocksCase};

fuzz_target!(|case: BlocksCase| {
    if let Err(divergence) = run_case(&case) {
        panic!("{divergence}");
    }
});
