//! Unit tests of the tree and the pooled cache: the contract's golden case and each operation.

use super::*;
use crate::error::CoreError;
use crate::pool::TokenPool;

fn nz(n: usize) -> std::num::NonZeroUsize {
    std::num::NonZeroUsize::new(n).unwrap()
}

fn t(s: &str) -> Vec<i32> {
    s.bytes().map(i32::from).collect()
}

fn pooled(n: usize, page: usize) -> (RadixCache, SharedPool) {
    let pool = shared_pool(TokenPool::new(n, page).unwrap());
    (RadixCache::new(Some(pool.clone()), None).unwrap(), pool)
}

#[test]
fn golden_split() {
    let mut c = RadixTree::new(nz(1));
    assert_eq!(c.insert(b"", &t("ABCDEF"), &[0, 1, 2, 3, 4, 5]).unwrap(), 0);
    let m = c.match_prefix(b"", &t("ABCDEF")).unwrap();
    let before = m.node;
    assert_eq!(
        c.insert(b"", &t("ABCXYZ"), &[0, 1, 2, 9, 10, 11]).unwrap(),
        3
    );
    c.check().unwrap();
    let dump = c.dump();
    let rows: Vec<(Vec<i32>, Vec<Slot>)> = dump.into_iter().map(|r| (r.1, r.2)).collect();
    assert_eq!(
        rows,
        vec![
            (t("ABC"), vec![0, 1, 2]),
            (t("ABCDEF"), vec![3, 4, 5]),
            (t("ABCXYZ"), vec![9, 10, 11]),
        ]
    );
    // The old handle still names the end of ABCDEF (the lower half kept its id).
    assert_eq!(c.path_slots(before).unwrap(), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(c.node_info(before).unwrap().length, 3);
    assert_eq!(c.num_nodes(), 4); // root, ABC, DEF, XYZ
}

#[test]
fn match_splits_inside_a_node_and_peek_does_not() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"", &t("ABCDEF"), &[0, 1, 2, 3, 4, 5]).unwrap();
    assert_eq!(c.peek_prefix(b"", &t("ABQ")).unwrap(), 2);
    assert_eq!(c.num_nodes(), 2);
    let clock = c.clock();
    let m = c.match_prefix(b"", &t("ABQ")).unwrap();
    assert_eq!((m.length, m.slots.clone()), (2, vec![0, 1]));
    assert_eq!(c.num_nodes(), 3);
    assert!(c.clock() > clock);
    assert_eq!(c.node_info(m.node).unwrap().hit_count, 1); // inherited 0 (inserts do not count) + 1
    c.check().unwrap();
}

#[test]
fn locked_handle_survives_splits() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"", &t("ABCDEFGH"), &(0..8).collect::<Vec<_>>())
        .unwrap();
    let m = c.match_prefix(b"", &t("ABCDEFGH")).unwrap();
    c.lock(m.node).unwrap();
    assert_eq!(c.protected_size(), 8);
    c.match_prefix(b"", &t("ABCD")).unwrap(); // splits at 4
    c.insert(b"", &t("ABZZ"), &[0, 1, 20, 21]).unwrap(); // splits at 2
    c.check().unwrap();
    assert_eq!(c.path_slots(m.node).unwrap(), (0..8).collect::<Vec<_>>());
    assert_eq!(c.protected_size(), 8);
    assert_eq!(c.evictable_size(), 2);
    c.unlock(m.node).unwrap();
    assert_eq!(c.protected_size(), 0);
    assert!(matches!(c.unlock(m.node), Err(CoreError::NotLocked(_))));
    c.check().unwrap();
}

#[test]
fn eviction_is_lru_with_parent_promotion() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"", &t("AB"), &[0, 1]).unwrap();
    c.insert(b"", &t("ABC"), &[0, 1, 2]).unwrap();
    c.insert(b"", &t("ABD"), &[0, 1, 3]).unwrap();
    c.insert(b"", &t("X"), &[9]).unwrap();
    c.match_prefix(b"", &t("ABC")).unwrap(); // AB, C newest; D older; X older than D? no
    let mut out = Vec::new();
    // Order of last access: D (3), X (4), C (5). Evicting 1 takes D.
    c.evict_into(1, &mut out);
    assert_eq!(out, vec![3]);
    c.evict_into(1, &mut out);
    assert_eq!(out, vec![3, 9]);
    // Then C, then AB (promoted once C went).
    c.evict_into(3, &mut out);
    assert_eq!(out, vec![3, 9, 2, 0, 1]);
    assert_eq!(c.total_size(), 0);
    assert_eq!(c.num_namespaces(), 0);
    c.check().unwrap();
}

#[test]
fn retired_handles_are_stale() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"", &t("AB"), &[0, 1]).unwrap();
    let m = c.match_prefix(b"", &t("AB")).unwrap();
    let mut out = Vec::new();
    c.evict_into(10, &mut out);
    c.insert(b"", &t("CD"), &[2, 3]).unwrap(); // reuses the arena slot
    assert!(matches!(c.lock(m.node), Err(CoreError::StaleHandle(_))));
    assert!(matches!(
        c.path_slots(m.node),
        Err(CoreError::StaleHandle(_))
    ));
    // The root handle works everywhere as a no-op.
    c.lock(NodeHandle::ROOT).unwrap();
    c.unlock(NodeHandle::ROOT).unwrap();
    assert!(c.path_slots(NodeHandle::ROOT).unwrap().is_empty());
    c.check().unwrap();
}

#[test]
fn namespaces_never_share() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"x", &t("ABC"), &[0, 1, 2]).unwrap();
    assert_eq!(c.peek_prefix(b"", &t("ABC")).unwrap(), 0);
    assert_eq!(c.peek_prefix(b"y", &t("ABC")).unwrap(), 0);
    assert_eq!(c.peek_prefix(b"x", &t("ABC")).unwrap(), 3);
    assert_eq!(c.insert(b"", &t("ABC"), &[3, 4, 5]).unwrap(), 0);
    assert_eq!(c.num_namespaces(), 2);
    c.check().unwrap();
}

#[test]
fn pages_match_whole_pages_only() {
    let (mut c, pool) = pooled(16, 4);
    let s = c.alloc(8).unwrap();
    assert_eq!(
        c.insert(b"", &t("ABCDEFGHIJ"), &[s.clone(), vec![14, 15]].concat())
            .unwrap(),
        0
    );
    assert_eq!(c.total_size(), 8); // "IJ" (partial page) ignored
    assert_eq!(c.peek_prefix(b"", &t("ABCDEFG")).unwrap(), 4);
    assert_eq!(c.peek_prefix(b"", &t("ABCDEFGHIJ")).unwrap(), 8);
    // Diverging inside a page: the match stops at the page boundary before it.
    let m = c.match_prefix(b"", &t("ABCDEFXH")).unwrap();
    assert_eq!(m.length, 4);
    // Two children sharing a first token but not a first page.
    let s2 = c.alloc(4).unwrap();
    assert_eq!(
        c.insert(b"", &t("ABCDEQQQ"), &[s[..4].to_vec(), s2].concat())
            .unwrap(),
        4
    );
    c.check().unwrap();
    // Non-page-shaped slots are refused, state unchanged.
    let s3 = lock_pool(&pool).alloc(4).unwrap();
    let dump = c.dump();
    let bad = vec![s3[1], s3[0], s3[2], s3[3]];
    assert!(matches!(
        c.insert(b"", &t("ZZZZ"), &bad),
        Err(CoreError::InvalidArgument(_))
    ));
    assert_eq!(c.dump(), dump);
    c.check().unwrap();
}

#[test]
fn pooled_alloc_evicts_only_when_enough() {
    let (mut c, pool) = pooled(8, 1);
    let s = c.alloc(6).unwrap();
    c.insert(b"", &t("ABCDEF"), &s).unwrap();
    let m = c.match_prefix(b"", &t("ABC")).unwrap();
    c.lock(m.node).unwrap();
    // 2 free + 3 evictable < 6: refused, nothing evicted.
    assert!(matches!(
        c.alloc(6),
        Err(CoreError::OutOfSlots {
            requested: 6,
            available: 5
        })
    ));
    assert_eq!(c.total_size(), 6);
    let got = c.alloc(5).unwrap();
    assert_eq!(got.len(), 5);
    assert_eq!(c.total_size(), 3);
    c.check().unwrap();
    // Freeing a cached slot is refused; freeing handed-out slots works.
    assert!(matches!(
        lock_pool(&pool).free(&[s[0]]),
        Err(CoreError::DoubleFree(_))
    ));
    lock_pool(&pool).free(&got).unwrap();
    c.check().unwrap();
}

#[test]
fn insert_validates_before_mutating() {
    let (mut c, _pool) = pooled(8, 1);
    let s = c.alloc(4).unwrap();
    let dump = c.dump();
    assert!(c.insert(b"", &t("ABC"), &s).is_err()); // length mismatch
    assert!(c.insert(b"", &[1, -2, 3, 4], &s).is_err()); // negative token
    assert!(c.insert(b"", &t("ABCD"), &[s[0], s[1], s[2], 99]).is_err()); // out of range
    assert!(c
        .insert(b"", &t("ABCD"), &[s[0], s[1], s[2], s[2]])
        .is_err()); // repeated
    let err = c
        .insert(b"", &t("ABCD"), &[s[0], s[1], s[2], 7])
        .unwrap_err(); // not allocated
    assert!(
        err.to_string().contains("slot 7 is free (not allocated)"),
        "{err}"
    );
    assert_eq!(c.dump(), dump);
    c.check().unwrap();
    assert_eq!(c.insert(b"", &t("ABCD"), &s).unwrap(), 0);
    c.check().unwrap();
}

#[test]
fn caller_owned_slots() {
    let mut c = RadixCache::new(None, Some(nz(1))).unwrap();
    c.insert(b"", &t("ABC"), &[1000, 2000, 3000]).unwrap();
    assert!(matches!(c.alloc(1), Err(CoreError::InvalidArgument(_))));
    let mut ids = c.evict_slots(1);
    ids.sort_unstable();
    assert_eq!(ids, vec![1000, 2000, 3000]);
    c.check().unwrap();
}

#[test]
fn dropping_the_cache_returns_its_slots() {
    let pool = shared_pool(TokenPool::new(8, 1).unwrap());
    {
        let mut c = RadixCache::new(Some(pool.clone()), None).unwrap();
        assert!(RadixCache::new(Some(pool.clone()), None).is_err()); // one cache per pool
        let s = c.alloc(4).unwrap();
        c.insert(b"", &t("ABCD"), &s).unwrap();
    }
    assert_eq!(lock_pool(&pool).available(), 8);
    assert!(RadixCache::new(Some(pool), None).is_ok());
}

#[test]
fn harness_smoke() {
    use replay::{Harness, RadixOp, Seq};
    let mut h = Harness::new(32, 1);
    let seq = |base, keep, tail: &[u8]| Seq {
        base,
        keep,
        tail: tail.to_vec(),
    };
    let ops = vec![
        RadixOp::Insert {
            ns: 0,
            seq: seq(0, 0, &[0, 1, 2, 0, 1]),
        },
        RadixOp::Match {
            ns: 0,
            seq: seq(1, 3, &[2, 2]),
        },
        RadixOp::Lock { handle: 0 },
        RadixOp::Insert {
            ns: 0,
            seq: seq(1, 2, &[2, 2, 2]),
        },
        RadixOp::Evict { tokens: 100 },
        RadixOp::Unlock { handle: 0 },
        RadixOp::Unlock { handle: 0 },
        RadixOp::FreeCached { pick: 1 },
        RadixOp::Alloc { pages: 7 },
        RadixOp::Free { which: 0 },
        RadixOp::InsertForeign {
            ns: 1,
            seq: seq(0, 0, &[1, 1]),
        },
        RadixOp::PathSlots { handle: 0 },
    ];
    for op in &ops {
        h.apply(op).unwrap_or_else(|e| panic!("{op:?}: {e}"));
    }
}

#[test]
fn insert_node_is_insert_then_match() {
    // Same structure, slots and path ends as insert followed by match_prefix of the same key.
    let seqs = ["ABCDEF", "ABCXYZ", "AB", "ABCDEFGH", "QRS", "ABCX"];
    let mut a = RadixTree::new(nz(1));
    let mut b = RadixTree::new(nz(1));
    for (i, q) in seqs.iter().enumerate() {
        let slots: Vec<Slot> = (0..q.len() as Slot).map(|k| 100 * i as Slot + k).collect();
        let pa = a.insert(b"", &t(q), &slots).unwrap();
        let ma = a.match_prefix(b"", &t(q)).unwrap();
        let (pb, nb) = b.insert_node(b"", &t(q), &slots).unwrap();
        assert_eq!(pa, pb);
        assert_eq!(b.node_info(nb).unwrap().depth, q.len());
        assert_eq!(a.path_slots(ma.node).unwrap(), b.path_slots(nb).unwrap());
        b.check().unwrap();
    }
    let shape = |c: &RadixTree| {
        c.dump()
            .into_iter()
            .map(|r| (r.0, r.1, r.2, r.3))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&a), shape(&b));
    assert_eq!(b.insert_node(b"", &[], &[]).unwrap(), (0, NodeHandle::ROOT));
}

#[test]
fn insert_node_pooled_pages() {
    let (mut c, pool) = pooled(32, 4);
    let s = c.alloc(12).unwrap();
    let toks: Vec<i32> = (1..=10).collect();
    let (present, end) = c.insert_node(b"", &toks, &s[..10], 0.0).unwrap();
    assert_eq!(present, 0);
    assert_eq!(c.node_info(end).unwrap().depth, 8);
    let (present, mid) = c.insert_node(b"", &toks[..6], &s[..6], 0.0).unwrap();
    assert_eq!(present, 4);
    assert_eq!(c.node_info(mid).unwrap().depth, 4);
    assert_eq!(c.node_info(end).unwrap().length, 4); // the old end survived the split
    assert_eq!(
        c.insert_node(b"", &toks[..3], &s[..3], 0.0).unwrap(),
        (0, NodeHandle::ROOT)
    );
    assert_eq!(lock_pool(&pool).num_cached(), 8);
    c.check().unwrap();
}

/// With pages of several slots, each cached page must be one whole pool page: consecutive
/// ids from a page start. Consecutive ids across a page boundary, and a page start followed by
/// ids out of order, are refused with nothing changed.
#[test]
fn insert_refuses_slots_that_are_not_whole_pages() {
    let (mut c, pool) = pooled(16, 4);
    let s = c.alloc(8).unwrap();
    let dump = c.dump();
    let across: Vec<Slot> = (s[2]..s[2] + 4).collect();
    let shuffled = [s[0], s[2], s[1], s[3]];
    for bad in [&across[..], &shuffled[..]] {
        let err = c.insert(b"", &[1, 2, 3, 4], bad).unwrap_err();
        assert!(
            err.to_string().contains("not one whole pool page"),
            "{bad:?}: {err}"
        );
    }
    assert_eq!(c.dump(), dump);
    assert_eq!(lock_pool(&pool).num_cached(), 0);
    c.check().unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3, 4], &s[4..]).unwrap(), 0);
    c.check().unwrap();
}

#[test]
fn move_lock_equals_lock_then_unlock() {
    // Paths: ABCDEF, ABCXYZ, ABQ, and "ABC" in another namespace; every (from, to) pair,
    // root included, must leave the same tree and sizes as lock(to) + unlock(from).
    let build = || {
        let mut c = RadixTree::new(nz(1));
        for (k, q) in ["ABCDEF", "ABCXYZ", "ABQ"].iter().enumerate() {
            let s: Vec<Slot> = (0..q.len() as Slot).map(|j| 10 * k as Slot + j).collect();
            c.insert(b"", &t(q), &s).unwrap();
        }
        c.insert(b"ns", &t("ABC"), &[90, 91, 92]).unwrap();
        let ends: Vec<(Vec<u8>, &str)> = vec![
            (b"".to_vec(), "AB"),
            (b"".to_vec(), "ABC"),
            (b"".to_vec(), "ABCDEF"),
            (b"".to_vec(), "ABCXYZ"),
            (b"".to_vec(), "ABQ"),
            (b"ns".to_vec(), "ABC"),
        ];
        let mut handles = vec![NodeHandle::ROOT];
        for (ns, q) in &ends {
            handles.push(c.match_prefix(ns, &t(q)).unwrap().node);
        }
        (c, handles)
    };
    let n = build().1.len();
    for from in 0..n {
        for to in 0..n {
            let (mut a, ha) = build();
            let (mut b, hb) = build();
            a.lock(ha[from]).unwrap();
            b.lock(hb[from]).unwrap();
            a.lock(ha[to]).unwrap();
            a.unlock(ha[from]).unwrap();
            b.move_lock(hb[from], hb[to]).unwrap();
            assert_eq!(a.dump(), b.dump(), "from {from} to {to}");
            assert_eq!(
                (a.evictable_size(), a.protected_size()),
                (b.evictable_size(), b.protected_size())
            );
            b.check().unwrap();
            // The moved lock is released through `to`, and `from` has none left.
            if from != to && from != 0 {
                assert!(matches!(b.unlock(hb[from]), Err(CoreError::NotLocked(_))));
            }
            b.unlock(hb[to]).unwrap();
            assert_eq!(b.protected_size(), 0);
            b.check().unwrap();
        }
    }
}

#[test]
fn move_lock_refuses_without_change() {
    let mut c = RadixTree::new(nz(1));
    c.insert(b"", &t("ABCD"), &[0, 1, 2, 3]).unwrap();
    let x = c.match_prefix(b"", &t("AB")).unwrap().node;
    let y = c.match_prefix(b"", &t("ABCD")).unwrap().node;
    let before = c.dump();
    assert!(matches!(c.move_lock(x, y), Err(CoreError::NotLocked(_))));
    assert_eq!(c.dump(), before);
    assert_eq!(c.protected_size(), 0);
    c.check().unwrap();
}

#[test]
fn cache_lock_calls_return_protected_deltas() {
    // ABCDEF cached; lock at "ABC" protects 3 tokens, moving the lock to "ABCDEF" protects 3
    // more, moving it back releases them, unlocking releases the rest.
    let mut c = RadixCache::new(None, Some(nz(1))).unwrap();
    c.insert(b"", &t("ABCDEF"), &[1, 2, 3, 4, 5, 6]).unwrap();
    let short = c.match_prefix(b"", &t("ABC")).unwrap().node;
    let long = c.match_prefix(b"", &t("ABCDEF")).unwrap().node;
    assert_eq!(c.lock(short).unwrap(), 3);
    assert_eq!(c.move_lock(short, long).unwrap(), 3);
    assert_eq!(c.protected_size(), 6);
    assert_eq!(c.move_lock(long, short).unwrap(), -3);
    assert_eq!(c.unlock(short).unwrap(), 3);
    assert_eq!(c.protected_size(), 0);
    c.check().unwrap();
}

fn sglang_cache() -> RadixCache {
    let opts = CacheOptions {
        sglang_stamps: true,
        ..CacheOptions::default()
    };
    RadixCache::with_options(None, opts).unwrap()
}

/// (`hit_count`, `last_access`) of the node whose full path is `path`.
fn stamps(c: &RadixCache, path: &str) -> (u32, u64) {
    let row = c
        .dump()
        .into_iter()
        .find(|r| r.1 == t(path))
        .expect("node present");
    (row.5, row.4)
}

#[test]
fn sglang_stamps_count_hits_on_insert_beyond_inserted_len_not_on_match() {
    let mut c = sglang_cache();
    let s = |n: usize| (0..n as Slot).collect::<Vec<_>>();
    c.insert_node_from(b"", &t("ABCD"), &s(4), 0.0, 0).unwrap();
    assert_eq!(stamps(&c, "ABCD").0, 1, "a new leaf counts one hit");
    c.match_prefix(b"", &t("ABCD")).unwrap();
    assert_eq!(stamps(&c, "ABCD").0, 1, "a match counts none");
    // the same request extends its path: "ABCD" ends at 4 <= inserted_len, no new hit there
    c.insert_node_from(b"", &t("ABCDEF"), &s(6), 0.0, 4)
        .unwrap();
    assert_eq!(stamps(&c, "ABCD").0, 1);
    assert_eq!(stamps(&c, "ABCDEF").0, 1);
    // another request: every node on its path ends beyond inserted_len 0
    c.insert_node_from(b"", &t("ABCDEF"), &s(6), 0.0, 0)
        .unwrap();
    assert_eq!((stamps(&c, "ABCD").0, stamps(&c, "ABCDEF").0), (2, 2));
    c.check().unwrap();
    // off (the default): the match counts, the insert does not
    let mut d = RadixCache::new(None, None).unwrap();
    d.insert_node_from(b"", &t("ABCD"), &s(4), 0.0, 0).unwrap();
    d.match_prefix(b"", &t("ABCD")).unwrap();
    assert_eq!(stamps(&d, "ABCD").0, 1);
    d.insert_node_from(b"", &t("ABCD"), &s(4), 0.0, 0).unwrap();
    assert_eq!(stamps(&d, "ABCD").0, 1);
}

/// With `sglang_stamps`, each node of a deeper path counts a hit exactly when it ends beyond
/// `inserted_len`: the depth is followed node by node up the path.
#[test]
fn sglang_stamps_hit_exactly_the_nodes_ending_beyond_inserted_len() {
    let mut c = sglang_cache();
    let s = |n: usize| (0..n as Slot).collect::<Vec<_>>();
    c.insert_node_from(b"", &t("ABCD"), &s(4), 0.0, 0).unwrap();
    c.insert_node_from(b"", &t("ABCDEF"), &s(6), 0.0, 0)
        .unwrap();
    c.insert_node_from(b"", &t("ABCDEFGH"), &s(8), 0.0, 0)
        .unwrap();
    let before = ["ABCD", "ABCDEF", "ABCDEFGH"].map(|p| stamps(&c, p).0);
    assert_eq!(before, [3, 2, 1]);
    // A request that inserted 5 tokens before: "ABCDEF" (ends at 6) and "ABCDEFGH" (8) count a
    // hit, "ABCD" (4) does not.
    c.insert_node_from(b"", &t("ABCDEFGH"), &s(8), 0.0, 5)
        .unwrap();
    let after = ["ABCD", "ABCDEF", "ABCDEFGH"].map(|p| stamps(&c, p).0);
    assert_eq!(after, [3, 3, 2]);
    c.check().unwrap();
}

/// With `sglang_stamps`, a plain insert of a key that ends inside a node (no split asked for):
/// that node counts a hit as a node ending at its own depth, beyond `inserted_len` 0, and the
/// path is not split.
#[test]
fn sglang_stamps_insert_ending_inside_a_node() {
    let mut c = sglang_cache();
    c.insert_node_from(b"", &t("ABCD"), &[0, 1, 2, 3], 0.0, 0)
        .unwrap();
    assert_eq!(c.insert(b"", &t("AB"), &[7, 8]).unwrap(), 2);
    assert_eq!(stamps(&c, "ABCD").0, 2);
    assert_eq!(c.dump().len(), 1, "no split");
    c.check().unwrap();
}

/// Priorities -0.0 and 0.0 are one priority: under the priority policy the older of two such
/// leaves is evicted first, whichever zero each was given.
#[test]
fn negative_zero_priority_is_zero() {
    let opts = CacheOptions {
        policy: Policy::Priority,
        ..CacheOptions::default()
    };
    let mut c = RadixCache::with_options(None, opts).unwrap();
    c.insert_with_priority(b"", &t("AB"), &[1, 2], 0.0).unwrap();
    c.insert_with_priority(b"", &t("XY"), &[3, 4], -0.0)
        .unwrap();
    assert_eq!(c.evict_slots(1), vec![1, 2]);
    let mut d = RadixCache::with_options(None, opts).unwrap();
    d.insert_with_priority(b"", &t("XY"), &[3, 4], -0.0)
        .unwrap();
    d.insert_with_priority(b"", &t("AB"), &[1, 2], 0.0).unwrap();
    assert_eq!(d.evict_slots(1), vec![3, 4]);
}

/// A namespace's first insert: its new leaf counts a hit only if it ends beyond `inserted_len`.
#[test]
fn sglang_stamps_first_insert_of_a_namespace() {
    let s = |n: usize| (0..n as Slot).collect::<Vec<_>>();
    for (inserted_len, hits) in [(4, 0), (3, 1)] {
        let mut c = sglang_cache();
        c.insert_node_from(b"", &t("ABCD"), &s(4), 0.0, inserted_len)
            .unwrap();
        assert_eq!(stamps(&c, "ABCD").0, hits, "inserted_len {inserted_len}");
    }
}

/// mru evicts the most recently used leaf first, filo the most recently created one.
#[test]
fn mru_and_filo_evict_the_newest_first() {
    for (policy, first_out) in [(Policy::Mru, vec![1, 2]), (Policy::Filo, vec![3, 4])] {
        let opts = CacheOptions {
            policy,
            ..CacheOptions::default()
        };
        let mut c = RadixCache::with_options(None, opts).unwrap();
        c.insert(b"", &t("AB"), &[1, 2]).unwrap();
        c.insert(b"", &t("XY"), &[3, 4]).unwrap();
        c.match_prefix(b"", &t("AB")).unwrap(); // AB: used last, created first
        assert_eq!(c.evict_slots(1), first_out, "{policy:?}");
        c.check().unwrap();
    }
}

#[test]
fn sglang_stamps_refresh_both_halves_of_a_split() {
    let s = |n: usize| (0..n as Slot).collect::<Vec<_>>();
    for stamped in [false, true] {
        let opts = CacheOptions {
            sglang_stamps: stamped,
            ..CacheOptions::default()
        };
        let mut c = RadixCache::with_options(None, opts).unwrap();
        c.insert(b"", &t("ABCDEF"), &s(6)).unwrap();
        c.insert(b"", &t("XYZ"), &s(3)).unwrap();
        // a match ending inside "ABCDEF" splits it at 3
        c.match_prefix(b"", &t("ABC")).unwrap();
        let (_, lower) = stamps(&c, "ABCDEF");
        let (_, upper) = stamps(&c, "ABC");
        assert_eq!(
            lower == upper,
            stamped,
            "lower half stamped only with sglang_stamps"
        );
        // an insert diverging inside "ABCDEF"'s lower half splits it at 4
        c.insert(b"", &t("ABCDQ"), &s(5)).unwrap();
        let (_, lower) = stamps(&c, "ABCDEF");
        let (_, upper) = stamps(&c, "ABCD");
        assert_eq!(lower == upper, stamped);
        c.check().unwrap();
        // lru: with the whole node stamped, the older "XYZ" goes first
        let first = c.evict_slots(1);
        assert_eq!(first.len() == 3, stamped, "evicted {first:?}");
    }
}

#[test]
fn cache_options_page_size_and_slot_watermark() {
    // With a pool, an explicit page size must be the pool's: equal is accepted.
    let pool = shared_pool(TokenPool::new(16, 4).unwrap());
    let same = CacheOptions {
        page_size: Some(nz(4)),
        ..CacheOptions::default()
    };
    let c = RadixCache::with_options(Some(pool.clone()), same).unwrap();
    assert_eq!(
        (c.page_size(), c.max_slot(), c.partial_pages()),
        (4, -1, false)
    );
    drop(c);
    let other = CacheOptions {
        page_size: Some(nz(2)),
        ..CacheOptions::default()
    };
    let err = RadixCache::with_options(Some(pool.clone()), other).unwrap_err();
    assert!(
        err.to_string().contains("differs from the pool's 4"),
        "{err}"
    );
    // The pool is free again for a cache with the pool's page size taken as is.
    let c = RadixCache::new(Some(pool), None).unwrap();
    assert_eq!(c.page_size(), 4);
    // Caller-owned slots: no id cached yet is -1; the watermark follows inserts.
    let mut c = RadixCache::new(None, None).unwrap();
    assert_eq!((c.page_size(), c.max_slot()), (1, -1));
    c.check_fits_i32("x").unwrap();
    // An insert that adds no slot (empty, or all cached already) leaves the watermark.
    c.insert(b"", &[], &[]).unwrap();
    assert_eq!(c.max_slot(), -1);
    c.insert(b"", &[9], &[0]).unwrap();
    assert_eq!(c.insert(b"", &[9], &[0]).unwrap(), 1);
    assert_eq!(c.max_slot(), 0);
    c.insert(b"", &[1, 2], &[7, 3]).unwrap();
    assert_eq!(c.max_slot(), 7);
    c.check().unwrap();
    // int32 output stays allowed up to the largest int32 id and is refused one beyond it.
    let top = Slot::from(i32::MAX);
    c.insert(b"", &[5], &[top]).unwrap();
    c.check_fits_i32("match").unwrap();
    c.insert(b"", &[6], &[top + 1]).unwrap();
    let err = c.check_fits_i32("match").unwrap_err();
    assert!(err.to_string().contains("slot id 2147483648"), "{err}");
}

fn checkpoint_cache() -> RadixCache {
    let opts = CacheOptions {
        sglang_stamps: true,
        events: true,
        policy: Policy::Priority,
        ..CacheOptions::default()
    };
    RadixCache::with_options(None, opts).unwrap()
}

/// `checkpoint` leaves the same tree, events and sizes as its three calls made one by one
/// (insert, prompt-boundary insert one priority up, lock move), for a first checkpoint (no
/// lock yet), a later one (the lock moves), boundaries inside, at and past the path, and a
/// path partly cached by another request.
#[test]
fn checkpoint_equals_its_calls_one_by_one() {
    let s = |q: &str, base: Slot| (0..q.len() as Slot).map(|j| base + j).collect::<Vec<_>>();
    for boundary in [0, 2, 4, 6, 9] {
        let (mut a, mut b) = (checkpoint_cache(), checkpoint_cache());
        for c in [&mut a, &mut b] {
            c.insert_node_from(b"", &t("ABCDXY"), &s("ABCDXY", 100), 0.0, 0)
                .unwrap();
        }
        // first checkpoint: no lock held
        let (pa, ea) = a
            .insert_node_from(b"", &t("ABCD"), &s("ABCD", 0), 2.0, 0)
            .unwrap();
        if 0 < boundary && boundary < 4 {
            a.insert_node_from(
                b"",
                &t("ABCD")[..boundary],
                &s("ABCD", 0)[..boundary],
                3.0,
                boundary,
            )
            .unwrap();
        }
        let da = a.lock(ea).unwrap() as isize;
        let (pb, eb, db) = b
            .checkpoint(b"", &t("ABCD"), &s("ABCD", 0), 2.0, 0, boundary, None)
            .unwrap();
        assert_eq!((pa, ea, da), (pb, eb, db), "boundary {boundary}");
        assert_eq!(a.dump(), b.dump(), "boundary {boundary}");
        assert_eq!(a.take_events(), b.take_events());
        // a later checkpoint of the same request: the path grows, the lock moves
        let (pa2, ea2) = a
            .insert_node_from(b"", &t("ABCDEFGH"), &s("ABCDEFGH", 0), 2.0, 4)
            .unwrap();
        if 0 < boundary && boundary < 8 {
            a.insert_node_from(
                b"",
                &t("ABCDEFGH")[..boundary],
                &s("ABCDEFGH", 0)[..boundary],
                3.0,
                boundary,
            )
            .unwrap();
        }
        let da2 = a.move_lock(ea, ea2).unwrap();
        let got = b
            .checkpoint(
                b"",
                &t("ABCDEFGH"),
                &s("ABCDEFGH", 0),
                2.0,
                4,
                boundary,
                Some(eb),
            )
            .unwrap();
        assert_eq!((pa2, ea2, da2), got, "boundary {boundary}");
        assert_eq!(a.dump(), b.dump(), "boundary {boundary}");
        assert_eq!(a.take_events(), b.take_events());
        assert_eq!(
            (a.evictable_size(), a.protected_size()),
            (b.evictable_size(), b.protected_size())
        );
        b.check().unwrap();
        // the lock is held through the new end only
        assert!(matches!(b.unlock(eb), Err(CoreError::NotLocked(_))));
        b.unlock(got.1).unwrap();
        assert_eq!(b.protected_size(), 0);
        // The prompt prefix got priority + 1 (which the dump does not show): beside a leaf of
        // priority 2.5, both evict in the same order, one token at a time, until empty (each
        // call frees at least a token, so the loop is bounded by the size).
        a.unlock(ea2).unwrap();
        let order = |c: &mut RadixCache| {
            c.insert_node_from(b"", &t("PQ"), &[200, 201], 2.5, 0)
                .unwrap();
            let n = c.total_size();
            let evicted = std::iter::from_fn(|| Some(c.evict_slots(1)).filter(|v| !v.is_empty()))
                .take(n)
                .collect::<Vec<_>>();
            assert_eq!(c.total_size(), 0, "boundary {boundary}: {evicted:?}");
            evicted
        };
        assert_eq!(order(&mut a), order(&mut b), "boundary {boundary}");
    }
}

/// Every node reachable from the root, depth first: handle and full view (time stamps, hit
/// counts, priorities and locks included, which `dump` leaves out).
fn all_views(c: &RadixCache) -> Vec<(NodeHandle, NodeView)> {
    let mut out = Vec::new();
    let mut stack = vec![NodeHandle::ROOT];
    while let Some(h) = stack.pop() {
        let v = c.node_view(h).unwrap();
        stack.extend(v.children.iter().copied());
        out.push((h, v));
    }
    out
}

/// `checkpoint` (whose prompt-boundary step re-stamps the path from its end up instead of
/// inserting the prompt again) against its calls one by one, over random requests that share
/// prefixes: every policy, `sglang_stamps` on and off, pages of 1 and 2 (partial pages on and
/// off), boundaries inside nodes, at node edges, inside a page and past the path, first and
/// later checkpoints, with evictions and released locks in between. After every step both
/// caches hold the same nodes with the same handles, keys, slots, time stamps, hit counts,
/// priorities and locks, and report the same results, sizes and events.
#[test]
#[allow(clippy::too_many_lines)] // one random walk, checked after every step
fn checkpoint_equals_its_calls_one_by_one_at_random() {
    let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
    let mut rnd = move |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let policies = [
        Policy::Lru,
        Policy::Lfu,
        Policy::Fifo,
        Policy::Mru,
        Policy::Filo,
        Policy::Priority,
        Policy::Slru,
    ];
    let mut compared = 0;
    for policy in policies {
        for stamps in [true, false] {
            for (page, partial) in [(1, false), (2, false), (2, true)] {
                let opts = CacheOptions {
                    page_size: Some(nz(page)),
                    policy,
                    events: true,
                    partial_pages: partial,
                    sglang_stamps: stamps,
                };
                let mut a = RadixCache::with_options(None, opts).unwrap();
                let mut b = RadixCache::with_options(None, opts).unwrap();
                // (tokens, checkpointed length, lock held, priority) per request
                let mut reqs: Vec<(Vec<i32>, usize, Option<NodeHandle>, f64)> = Vec::new();
                for step in 0..160 {
                    if reqs.len() < 6 || rnd(4) == 0 {
                        // a new request: a prefix of an older one (or nothing), then its own
                        let mut toks = match reqs.len() {
                            0 => Vec::new(),
                            n => {
                                let (o, ..) = &reqs[rnd(n)];
                                o[..rnd(o.len() + 1)].to_vec()
                            }
                        };
                        let extra = 1 + rnd(9);
                        toks.extend((0..extra).map(|_| 1 + rnd(3) as i32));
                        reqs.push((toks, 0, None, rnd(3) as f64));
                    }
                    let r = rnd(reqs.len());
                    let (toks, done, held, prio) = reqs[r].clone();
                    if done >= toks.len() || rnd(6) == 0 {
                        // finished: release its lock, sometimes evict
                        if let Some(h) = held {
                            let ua = a.unlock(h).map_err(|e| e.to_string());
                            let ub = b.unlock(h).map_err(|e| e.to_string());
                            assert_eq!(ua, ub);
                        }
                        reqs.swap_remove(r);
                        let want = rnd(6);
                        assert_eq!(a.evict_slots(want), b.evict_slots(want));
                        continue;
                    }
                    let len = done + 1 + rnd(toks.len() - done);
                    let boundary = match rnd(4) {
                        0 => 0,
                        1 => len,
                        _ => rnd(len + 1),
                    };
                    let slots: Vec<Slot> = (0..len as Slot).map(|j| 1000 * r as Slot + j).collect();
                    let tk = &toks[..len];
                    // now and then the request's last checkpoint: its lock is released
                    let release = rnd(5) == 0;
                    // the calls one by one, as checkpoint made them before
                    let ra = (|| {
                        let (present, end) = a.insert_node_from(b"", tk, &slots, prio, done)?;
                        if 0 < boundary && boundary < len {
                            a.insert_node_from(
                                b"",
                                &tk[..boundary],
                                &slots[..boundary],
                                prio + 1.0,
                                boundary,
                            )?;
                        }
                        let delta = match (held, release) {
                            (None, false) => a.lock(end)? as isize,
                            (Some(from), false) => a.move_lock(from, end)?,
                            (None, true) => 0,
                            (Some(from), true) => -(a.unlock(from)? as isize),
                        };
                        Ok::<_, CoreError>((present, end, delta))
                    })()
                    .map_err(|e| e.to_string());
                    let rb = if release {
                        b.checkpoint_release(b"", tk, &slots, prio, done, boundary, held)
                    } else {
                        b.checkpoint(b"", tk, &slots, prio, done, boundary, held)
                    }
                    .map_err(|e| e.to_string());
                    let ctx = format!(
                        "{policy:?} stamps {stamps} page {page} partial {partial} step {step}"
                    );
                    assert_eq!(ra, rb, "{ctx}");
                    assert_eq!(all_views(&a), all_views(&b), "{ctx}");
                    assert_eq!(a.take_events(), b.take_events(), "{ctx}");
                    assert_eq!(
                        (a.evictable_size(), a.protected_size(), a.total_size()),
                        (b.evictable_size(), b.protected_size(), b.total_size()),
                        "{ctx}"
                    );
                    b.check().unwrap();
                    compared += 1;
                    reqs[r].1 = len;
                    reqs[r].2 = if release { None } else { Some(rb.unwrap().1) };
                }
                // what is left evicts in the same order, until empty (each call frees at least a
                // token, so the loop is bounded by the size)
                for (_, _, held, _) in reqs.drain(..) {
                    if let Some(h) = held {
                        a.unlock(h).unwrap();
                        b.unlock(h).unwrap();
                    }
                }
                let order = |c: &mut RadixCache| {
                    let n = c.total_size();
                    let evicted =
                        std::iter::from_fn(|| Some(c.evict_slots(1)).filter(|v| !v.is_empty()))
                            .take(n)
                            .collect::<Vec<_>>();
                    assert_eq!(c.total_size(), 0, "{policy:?} {stamps} {page}: {evicted:?}");
                    evicted
                };
                assert_eq!(order(&mut a), order(&mut b), "{policy:?} {stamps} {page}");
            }
        }
    }
    // the walk above reached checkpoints (not only releases) in every configuration
    assert!(compared > 7 * 2 * 3 * 40, "{compared} checkpoints compared");
}

/// Bad input to `checkpoint` changes nothing: a `lock_from` without a lock or evicted, slots
/// of the wrong length or negative, a non-finite priority.
#[test]
fn checkpoint_refuses_without_change() {
    let mut c = checkpoint_cache();
    let (_, held) = c.insert_node_from(b"", &t("AB"), &[1, 2], 0.0, 0).unwrap();
    let (_, free) = c.insert_node_from(b"", &t("XY"), &[3, 4], 0.0, 0).unwrap();
    c.lock(held).unwrap();
    let (_, gone) = c.insert_node_from(b"", &t("QR"), &[5, 6], -1.0, 0).unwrap();
    assert_eq!(c.evict_slots(1), vec![5, 6]);
    c.take_events();
    let before = (c.dump(), c.evictable_size(), c.protected_size());
    let tok = t("ABCD");
    let cases: Vec<(Option<NodeHandle>, Vec<Slot>, f64)> = vec![
        (Some(free), vec![1, 2, 7, 8], 0.0),
        (Some(gone), vec![1, 2, 7, 8], 0.0),
        (Some(held), vec![1, 2, 7], 0.0),
        (Some(held), vec![1, 2, -7, 8], 0.0),
        (Some(held), vec![1, 2, 7, 8], f64::NAN),
        (None, vec![1, 2, 7, 8], f64::INFINITY),
    ];
    for (k, (from, slots, prio)) in cases.into_iter().enumerate() {
        for release in [false, true] {
            let err = if release {
                c.checkpoint_release(b"", &tok, &slots, prio, 0, 2, from)
            } else {
                c.checkpoint(b"", &tok, &slots, prio, 0, 2, from)
            }
            .unwrap_err();
            assert_eq!(
                (c.dump(), c.evictable_size(), c.protected_size()),
                before,
                "case {k} release {release}: {err}"
            );
            assert_eq!(c.take_events(), Vec::<KvEvent>::new(), "case {k}");
            c.check().unwrap();
        }
    }
    // and the same call with a held lock goes through
    let (present, end, delta) = c
        .checkpoint(b"", &tok, &[1, 2, 7, 8], 0.0, 2, 2, Some(held))
        .unwrap();
    assert_eq!((present, delta), (2, 2));
    assert_eq!(c.path_slots(end).unwrap(), vec![1, 2, 7, 8]);
    c.check().unwrap();
}

/// `path_prefix_slots_into` writes exactly the first `n` slots of `path_slots`, for every `n`
/// up to the depth (cuts inside and at node edges), and refuses a longer buffer.
#[test]
fn path_prefix_slots_are_a_prefix_of_path_slots() {
    let mut c = RadixCache::new(None, Some(nz(1))).unwrap();
    c.insert(b"", &t("ABCDEF"), &[1, 2, 3, 4, 5, 6]).unwrap();
    c.insert(b"", &t("ABCXYZ"), &[1, 2, 3, 7, 8, 9]).unwrap();
    c.insert(b"", &t("ABCXYZQ"), &[1, 2, 3, 7, 8, 9, 10])
        .unwrap();
    for q in ["ABCXYZQ", "ABCDEF", "ABC", "AB"] {
        let end = c.match_prefix(b"", &t(q)).unwrap().node;
        let full = c.path_slots(end).unwrap();
        for n in 0..=full.len() {
            let mut out = vec![-1; n];
            c.path_prefix_slots_into(end, &mut out).unwrap();
            assert_eq!(out, full[..n], "{q} {n}");
        }
        let mut long = vec![0; full.len() + 1];
        assert!(c.path_prefix_slots_into(end, &mut long).is_err());
    }
    let mut none: Vec<Slot> = vec![];
    c.path_prefix_slots_into(NodeHandle::ROOT, &mut none)
        .unwrap();
}

/// SLRU: a leaf hit `SLRU_PROTECTED_HITS` times is in the protected segment and outlives a
/// newer leaf that was never hit.
#[test]
fn slru_evicts_the_probationary_leaf_first() {
    let opts = CacheOptions {
        policy: Policy::Slru,
        ..CacheOptions::default()
    };
    let mut c = RadixCache::with_options(None, opts).unwrap();
    assert_eq!(c.policy(), Policy::Slru);
    c.insert(b"", &t("AB"), &[1, 2]).unwrap();
    for _ in 0..super::policy::SLRU_PROTECTED_HITS {
        assert_eq!(c.match_prefix(b"", &t("AB")).unwrap().slots, [1, 2]);
    }
    c.insert(b"", &t("XY"), &[3, 4]).unwrap();
    assert_eq!(c.evict_slots(1), [3, 4]);
    assert_eq!(c.evict_slots(1), [1, 2]);
    c.check().unwrap();
}
