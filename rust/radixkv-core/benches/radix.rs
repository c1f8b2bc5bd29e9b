//! Tree-operation benchmarks: `cargo bench -p radixkv-core --bench radix`.
//!
//! Workload shapes from serving: one long prompt (32K tokens) matched again; many requests that
//! share a system prompt and differ in a user suffix (match + lock + insert + unlock each); and
//! eviction of k leaves from a large tree.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion};
use radixkv_core::radix::RadixTree;

/// Deterministic pseudo-random tokens (xorshift), no extra dependency.
fn tokens(seed: u64, n: usize) -> Vec<i32> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 50_000) as i32
        })
        .collect()
}

fn long_prompt(c: &mut Criterion) {
    let n = 32_768;
    let t = tokens(1, n);
    let slots: Vec<i64> = (0..n as i64).collect();
    let mut tree = RadixTree::new(std::num::NonZeroUsize::new(1).unwrap());
    tree.insert(b"", &t, &slots).unwrap();
    c.bench_function("match_prefix 32K cached", |b| {
        b.iter(|| black_box(tree.match_prefix(b"", black_box(&t)).unwrap().length));
    });
    c.bench_function("peek_prefix 32K cached", |b| {
        b.iter(|| black_box(tree.peek_prefix(b"", black_box(&t)).unwrap()));
    });
}

fn shared_system_prompt(c: &mut Criterion) {
    let system = tokens(2, 1000);
    let reqs: Vec<Vec<i32>> = (0..4096)
        .map(|i| [system.clone(), tokens(100 + i, 200)].concat())
        .collect();
    c.bench_function("request: match+lock+insert+unlock (1K shared + 200)", |b| {
        b.iter_batched_ref(
            || {
                (
                    RadixTree::new(std::num::NonZeroUsize::new(1).unwrap()),
                    0usize,
                )
            },
            |(tree, next)| {
                for r in reqs.iter().take(256) {
                    let m = tree.match_prefix(b"", r).unwrap();
                    tree.lock(m.node).unwrap();
                    let slots: Vec<i64> = (*next as i64..(*next + r.len()) as i64).collect();
                    *next += r.len();
                    tree.insert(b"", r, &slots).unwrap();
                    tree.unlock(m.node).unwrap();
                }
            },
            BatchSize::LargeInput,
        );
    });
}

fn eviction(c: &mut Criterion) {
    let build = || {
        let mut tree = RadixTree::new(std::num::NonZeroUsize::new(1).unwrap());
        for i in 0..20_000u64 {
            let t = tokens(1000 + i, 64);
            let s: Vec<i64> = (0..64).map(|k| (i * 64 + k) as i64).collect();
            tree.insert(b"", &t, &s).unwrap();
        }
        tree
    };
    c.bench_function("evict 64 leaves of 20K", |b| {
        b.iter_batched_ref(
            build,
            |tree| {
                let mut out = Vec::new();
                black_box(tree.evict_into(64 * 64, &mut out))
            },
            BatchSize::LargeInput,
        );
    });
}

criterion_group!(benches, long_prompt, shared_system_prompt, eviction);
criterion_main!(benches);
