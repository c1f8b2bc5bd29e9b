//! Partial pages (`CacheOptions::partial_pages`, partial.rs) in Rust: partial leaves stored,
//! matched as tails, found again, evicted and allocated around; `check()` after each step.
//! (The Python suite's model test drives the same paths through the binding.)

use std::num::NonZeroUsize;

use super::*;
use crate::error::CoreError;
use crate::pool::TokenPool;

fn partial_cache(slots: usize, page: usize) -> (RadixCache, SharedPool) {
    let pool = shared_pool(TokenPool::new(slots, page).unwrap());
    let opts = CacheOptions {
        partial_pages: true,
        ..CacheOptions::default()
    };
    (
        RadixCache::with_options(Some(pool.clone()), opts).unwrap(),
        pool,
    )
}

fn num_cached(pool: &SharedPool) -> usize {
    lock_pool(pool).num_cached()
}

fn available(pool: &SharedPool) -> usize {
    lock_pool(pool).available()
}

fn free(pool: &SharedPool, slots: &[Slot]) {
    lock_pool(pool).free(slots).unwrap();
}

fn toks(r: std::ops::Range<i32>) -> Vec<i32> {
    r.collect()
}

#[test]
fn partial_last_page_is_stored_matched_as_tail_and_found_again() {
    let (mut c, pool) = partial_cache(64, 4);
    assert!(c.partial_pages());
    let s = c.alloc(12).unwrap();
    // Two whole pages and a 2-token partial page; the caller frees the page's unused rest.
    assert_eq!(c.insert(b"", &toks(0..10), &s[..10]).unwrap(), 0);
    free(&pool, &s[10..]);
    assert_eq!((c.total_size(), num_cached(&pool)), (10, 10));
    c.check().unwrap();

    // Diverging after the 9th token: two whole pages, then a 1-token tail of the partial leaf.
    let mut q = toks(0..9);
    q.push(99);
    let m = c.match_prefix(b"", &q).unwrap();
    assert_eq!(m.length, 8);
    let tail = c.tail(b"", m.node, &q[8..]).expect("a tail");
    assert_eq!((tail.len, tail.slots.clone()), (1, vec![s[8]]));
    assert_eq!(c.node_info(tail.node).unwrap().length, 2);
    // The whole rest of the partial page: a 2-token tail, capped by the leaf's own length.
    let tail = c.tail(b"", m.node, &[8, 9, 10]).expect("a tail");
    assert_eq!((tail.len, tail.slots), (2, vec![s[8], s[9]]));
    // No tail for a different next token, nor for nothing.
    assert_eq!(c.tail(b"", m.node, &[77, 8]), None);
    assert_eq!(c.tail(b"", m.node, &[]), None);
    // The tail is read-only: nothing was split or touched by it.
    c.check().unwrap();

    // Diverging inside the second page: one whole page, then 2 tokens of the second page.
    let mut q = toks(0..6);
    q.push(7);
    let m = c.match_prefix(b"", &q).unwrap();
    assert_eq!(m.length, 4);
    let tail = c.tail(b"", m.node, &q[4..]).expect("a tail");
    assert_eq!((tail.len, tail.slots), (2, vec![s[4], s[5]]));
    c.check().unwrap();

    // The same partial page again: nothing taken, the caller keeps (frees) every slot.
    let s2 = c.alloc(12).unwrap();
    assert_eq!(c.insert(b"", &toks(0..10), &s2[..10]).unwrap(), 10);
    free(&pool, &s2);
    assert_eq!((c.total_size(), num_cached(&pool)), (10, 10));
    c.check().unwrap();

    // A shorter partial page that an existing partial leaf starts with: also present.
    let s3 = c.alloc(12).unwrap();
    assert_eq!(c.insert(b"", &toks(0..9), &s3[..9]).unwrap(), 9);
    free(&pool, &s3);
    assert_eq!(c.total_size(), 10);
    c.check().unwrap();

    // A longer partial page below the same path end is new: stored next to the first.
    let s4 = c.alloc(12).unwrap();
    assert_eq!(c.insert(b"", &toks(0..11), &s4[..11]).unwrap(), 8);
    free(&pool, &s4[..8]);
    free(&pool, &s4[11..]);
    assert_eq!((c.total_size(), num_cached(&pool)), (13, 13));
    c.check().unwrap();
    // The tail now prefers the longer leaf where it matches further.
    let m = c.match_prefix(b"", &toks(0..12)).unwrap();
    assert_eq!(m.length, 8);
    let tail = c.tail(b"", m.node, &[8, 9, 10, 11]).expect("a tail");
    assert_eq!((tail.len, tail.slots), (3, vec![s4[8], s4[9], s4[10]]));
}

#[test]
fn partial_page_shorter_than_a_page_hangs_under_the_namespace_root() {
    let (mut c, pool) = partial_cache(32, 4);
    let s = c.alloc(4).unwrap();
    // No whole page: the namespace's root is made and the partial leaf hangs under it.
    assert_eq!(c.insert(b"ns", &[5, 6], &s[..2]).unwrap(), 0);
    free(&pool, &s[2..]);
    assert_eq!((c.total_size(), c.tree().num_namespaces()), (2, 1));
    c.check().unwrap();
    let m = c.match_prefix(b"ns", &[5, 6, 7]).unwrap();
    assert_eq!((m.length, m.node), (0, NodeHandle::ROOT));
    let tail = c.tail(b"ns", NodeHandle::ROOT, &[5, 6, 7]).expect("a tail");
    assert_eq!((tail.len, tail.slots), (2, vec![s[0], s[1]]));
    // Another namespace sees nothing.
    assert_eq!(c.tail(b"", NodeHandle::ROOT, &[5, 6, 7]), None);
    assert_eq!(c.tail(b"other", NodeHandle::ROOT, &[5, 6, 7]), None);
    // Present again: every slot stays the caller's, the namespace keeps its one leaf.
    let s2 = c.alloc(4).unwrap();
    assert_eq!(c.insert(b"ns", &[5], &s2[..1]).unwrap(), 1);
    free(&pool, &s2);
    assert_eq!((c.total_size(), c.tree().num_namespaces()), (2, 1));
    c.check().unwrap();
    // Evicting the leaf drops the emptied namespace; a partial leaf has no page hash, so
    // nothing else changes.
    assert_eq!(c.evict_slots(1), vec![s[0], s[1]]);
    assert_eq!((c.total_size(), c.tree().num_namespaces()), (0, 0));
    assert_eq!(available(&pool), 32);
    c.check().unwrap();
}

#[test]
fn partial_leaves_raise_no_events() {
    let pool = shared_pool(TokenPool::new(32, 4).unwrap());
    let opts = CacheOptions {
        partial_pages: true,
        events: true,
        ..CacheOptions::default()
    };
    let mut c = RadixCache::with_options(Some(pool.clone()), opts).unwrap();
    let s = c.alloc(8).unwrap();
    assert_eq!(c.insert(b"", &toks(0..6), &s[..6]).unwrap(), 0);
    free(&pool, &s[6..]);
    let stored: Vec<KvEvent> = c.take_events();
    assert_eq!(stored.len(), 1, "{stored:?}");
    match &stored[0] {
        KvEvent::Stored { tokens, hashes, .. } => {
            assert_eq!((tokens.clone(), hashes.len()), (toks(0..4), 1));
        }
        e => panic!("expected Stored, got {e:?}"),
    }
    c.check().unwrap();
    // The partial leaf (the only unlocked leaf: its parent has a child) goes first and raises
    // nothing; the whole page, a leaf after that, raises its Removed.
    assert_eq!(c.evict_slots(1), vec![s[4], s[5]]);
    assert_eq!(c.take_events(), Vec::<KvEvent>::new());
    assert_eq!(c.evict_slots(1), s[..4].to_vec());
    let removed = c.take_events();
    assert!(
        matches!(&removed[..], [KvEvent::Removed { hashes }] if hashes.len() == 1),
        "{removed:?}"
    );
    c.check().unwrap();
}

#[test]
fn partial_pages_need_a_page_above_one_and_the_option() {
    // page_size 1: the option is dropped.
    let pool = shared_pool(TokenPool::new(8, 1).unwrap());
    let opts = CacheOptions {
        partial_pages: true,
        ..CacheOptions::default()
    };
    let c = RadixCache::with_options(Some(pool), opts).unwrap();
    assert!(!c.partial_pages());
    assert_eq!(c.tail(b"", NodeHandle::ROOT, &[1]), None);
    // Without the option: the partial last page is not cached and no tail is reported.
    let mut off = RadixCache::new(None, NonZeroUsize::new(4)).unwrap();
    assert!(!off.partial_pages());
    assert_eq!(
        off.insert(b"", &toks(0..10), &(0..10).collect::<Vec<_>>())
            .unwrap(),
        0
    );
    assert_eq!(off.total_size(), 8);
    let m = off.match_prefix(b"", &toks(0..10)).unwrap();
    assert_eq!(m.length, 8);
    assert_eq!(off.tail(b"", m.node, &[8, 9]), None);
    // The tree itself reports tails at any page size above one, but never at page size 1.
    let mut t = RadixTree::new(NonZeroUsize::new(1).unwrap());
    t.insert(b"", &[1, 2], &[0, 1]).unwrap();
    assert_eq!(t.tail(b"", NodeHandle::ROOT, &[1, 2]), None);
}

#[test]
fn partial_page_slots_must_start_one_pool_page() {
    let (mut c, pool) = partial_cache(32, 4);
    let s = c.alloc(8).unwrap();
    let before = (c.dump(), available(&pool), lock_pool(&pool).num_out());
    let bad: Vec<Slot> = [&s[..4], &s[5..7]].concat(); // second page's slots 1, 2
    let err = c.insert(b"", &toks(0..6), &bad).unwrap_err();
    assert!(err.to_string().contains("partial last page"), "{err}");
    // Starting a page but not consecutive.
    let bad: Vec<Slot> = [&s[..4], &[s[4], s[6]][..]].concat();
    let err = c.insert(b"", &toks(0..6), &bad).unwrap_err();
    assert!(err.to_string().contains("partial last page"), "{err}");
    // A partial page whose slots are not the caller's (already cached).
    assert_eq!(c.insert(b"", &toks(0..4), &s[..4]).unwrap(), 0);
    let before2 = (c.dump(), available(&pool), lock_pool(&pool).num_out());
    let bad: Vec<Slot> = [&s[4..8], &s[..2]].concat();
    assert!(c.insert(b"", &[9, 9, 9, 9, 9, 9], &bad).is_err());
    assert_eq!(
        (c.dump(), available(&pool), lock_pool(&pool).num_out()),
        before2
    );
    assert_ne!(before.0, before2.0);
    c.check().unwrap();
}

/// Pool of 4 pages of 4. Returns the cache with two partial leaves: [1,2] (older, page 0's
/// slots 0-1, its slots 2-3 freed) and [5,6,7] (page 1's slots 0-2, slot 3 freed); pages 2
/// and 3 free.
fn two_partial_leaves() -> (RadixCache, SharedPool, Vec<Slot>) {
    let (mut c, pool) = partial_cache(16, 4);
    let s = c.alloc(16).unwrap();
    assert_eq!(c.insert(b"", &[1, 2], &s[..2]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[5, 6, 7], &s[4..7]).unwrap(), 0);
    free(&pool, &s[2..4]);
    free(&pool, &s[7..]);
    assert_eq!((available(&pool), c.evictable_size()), (8, 5));
    c.check().unwrap();
    (c, pool, s)
}

#[test]
fn alloc_with_partial_pages_evicts_until_the_pool_has_enough() {
    // The whole pool, although free slots plus evictable tokens are only 13: each leaf is the
    // only cached part of its page, so evicting both frees pages 0 and 1.
    let (mut c, pool, _) = two_partial_leaves();
    assert_eq!(c.alloc(16).unwrap().len(), 16);
    assert_eq!(
        (c.total_size(), c.evicted_tokens(), available(&pool)),
        (0, 5, 0)
    );
    c.check().unwrap();

    // More than the pool could have even after evicting everything: refused, nothing evicted.
    let (mut c, pool, _) = two_partial_leaves();
    match c.alloc(32) {
        Err(CoreError::OutOfSlots {
            requested,
            available,
        }) => assert_eq!((requested, available), (32, 8 + 5 * 4)),
        r => panic!("expected OutOfSlots, got {r:?}"),
    }
    assert_eq!((c.total_size(), available(&pool)), (5, 8));
    c.check().unwrap();

    // Enough once the older leaf's page is free again: both leaves go (evicting the first
    // frees 2 tokens, fewer than the 4 asked), the allocation gets 3 whole pages.
    let got = c.alloc(12).unwrap();
    assert_eq!(got.len(), 12);
    assert_eq!((c.total_size(), c.evicted_tokens()), (0, 5));
    assert_eq!((available(&pool), lock_pool(&pool).num_out()), (4, 12));
    c.check().unwrap();

    // Enough without evicting: nothing goes.
    let (mut c, pool, _) = two_partial_leaves();
    assert_eq!(c.alloc(8).unwrap().len(), 8);
    assert_eq!((c.total_size(), available(&pool)), (5, 0));
    c.check().unwrap();
}

#[test]
fn alloc_with_partial_pages_evicts_again_while_pages_stay_short() {
    // Pool of 3 pages of 4. [1,2,3] and [4,5,6] hold three slots of pages 0 and 1 whose last
    // slots the caller still has out: evicting both (the first call's 4 tokens) frees no page,
    // so the loop evicts again, and [8,9] gives page 2 back.
    let (mut c, pool) = partial_cache(12, 4);
    let s = c.alloc(12).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3], &s[..3]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[4, 5, 6], &s[4..7]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[8, 9], &s[8..10]).unwrap(), 0);
    free(&pool, &s[10..]);
    assert_eq!((available(&pool), c.evictable_size()), (0, 8));
    c.check().unwrap();
    let got = c.alloc(4).unwrap();
    assert_eq!(got, s[8..12].to_vec());
    assert_eq!((c.total_size(), c.evicted_tokens()), (0, 8));
    c.check().unwrap();
    // Nothing evictable and no whole page free: refused.
    match c.alloc(4) {
        Err(CoreError::OutOfSlots {
            requested,
            available,
        }) => assert_eq!((requested, available), (4, 0)),
        r => panic!("expected OutOfSlots, got {r:?}"),
    }
    c.check().unwrap();
}

#[test]
fn alloc_with_partial_pages_stops_evicting_once_enough() {
    // Pool of 4 pages of 4: [1,2,3] on page 0, [4,5,6] on page 1, [8] on page 2 (the rest of
    // each page freed), page 3 free. alloc(8) evicts the two oldest leaves (the first call's
    // 4 tokens), which frees pages 0 and 1: enough, so [8] stays.
    let (mut c, pool) = partial_cache(16, 4);
    let s = c.alloc(16).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3], &s[..3]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[4, 5, 6], &s[4..7]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[8], &s[8..9]).unwrap(), 0);
    free(&pool, &s[3..4]);
    free(&pool, &s[7..8]);
    free(&pool, &s[9..]);
    assert_eq!((available(&pool), c.evictable_size()), (4, 7));
    assert_eq!(c.alloc(8).unwrap().len(), 8);
    assert_eq!(
        (c.total_size(), c.evicted_tokens(), available(&pool)),
        (1, 6, 4)
    );
    assert_eq!(
        c.tail(b"", NodeHandle::ROOT, &[8]).map(|t| t.slots),
        Some(vec![s[8]])
    );
    c.check().unwrap();
}

#[test]
fn alloc_with_partial_pages_at_the_exact_bounds() {
    // The refusal bound met exactly (free slots plus a whole page per evictable token equal to
    // the request): allowed, and enough. Pool of 2 pages of 4: [1] on page 0, the rest of it
    // freed, page 1 free: 4 + 1 * 4 = 8 reachable.
    let (mut c, pool) = partial_cache(8, 4);
    let s = c.alloc(8).unwrap();
    assert_eq!(c.insert(b"", &[1], &s[..1]).unwrap(), 0);
    free(&pool, &s[1..]);
    assert_eq!((available(&pool), c.evictable_size()), (4, 1));
    assert_eq!(c.alloc(8).unwrap().len(), 8);
    assert_eq!(
        (c.total_size(), c.evicted_tokens(), available(&pool)),
        (0, 1, 0)
    );
    c.check().unwrap();

    // Free pages plus evictable tokens exactly the request (well within that bound): allowed,
    // and enough (pool of 4 pages of 4: [1,2] on page 0, [5,6] on page 1, the rest of both
    // freed, pages 2-3 free).
    let (mut c, pool) = partial_cache(16, 4);
    let s = c.alloc(16).unwrap();
    assert_eq!(c.insert(b"", &[1, 2], &s[..2]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[5, 6], &s[4..6]).unwrap(), 0);
    free(&pool, &s[2..4]);
    free(&pool, &s[6..]);
    assert_eq!((available(&pool), c.evictable_size()), (8, 4));
    assert_eq!(c.alloc(12).unwrap().len(), 12);
    assert_eq!((c.total_size(), available(&pool)), (0, 4));
    c.check().unwrap();

    // Eviction that brings the pool exactly to the request stops there: the whole page
    // [1,2,3,4] (oldest) frees page 0, [9] on page 1 stays.
    let (mut c, pool) = partial_cache(12, 4);
    let s = c.alloc(12).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3, 4], &s[..4]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[9], &s[4..5]).unwrap(), 0);
    free(&pool, &s[5..]);
    assert_eq!((available(&pool), c.evictable_size()), (4, 5));
    assert_eq!(c.alloc(8).unwrap().len(), 8);
    assert_eq!(
        (c.total_size(), c.evicted_tokens(), available(&pool)),
        (1, 4, 0)
    );
    c.check().unwrap();
}

#[test]
fn alloc_with_partial_pages_counts_a_whole_page_per_evictable_token() {
    // A 3-token leaf on page 0 (its other slots freed), page 1 free: 4 + 3 slots by token count,
    // but evicting the leaf frees page 0, so 8 are reachable and alloc(8) succeeds.
    let (mut c, pool) = partial_cache(8, 4);
    let s = c.alloc(4).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3], &s[..3]).unwrap(), 0);
    free(&pool, &s[3..]);
    assert_eq!((available(&pool), c.evictable_size()), (4, 3));
    assert_eq!(c.alloc(8).unwrap().len(), 8);
    assert_eq!(
        (c.total_size(), c.evicted_tokens(), available(&pool)),
        (0, 3, 0)
    );
    c.check().unwrap();
    // Beyond a whole page per evictable token: refused at once, nothing evicted.
    let (mut c, pool) = partial_cache(12, 4);
    let s = c.alloc(4).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3], &s[..3]).unwrap(), 0);
    free(&pool, &s[3..]);
    match c.alloc(24) {
        Err(CoreError::OutOfSlots {
            requested,
            available,
        }) => assert_eq!((requested, available), (24, 8 + 3 * 4)),
        r => panic!("expected OutOfSlots, got {r:?}"),
    }
    assert_eq!((c.total_size(), c.evicted_tokens()), (3, 0));
    c.check().unwrap();
}

#[test]
fn alloc_with_partial_pages_may_evict_and_still_fail() {
    // [1,2,3] and [4,5,6] hold pages 0 and 1 with each page's last slot still out: evicting
    // both (6 tokens >= the 4 asked) frees no page, nothing is left to evict: OutOfSlots.
    let (mut c, pool) = partial_cache(8, 4);
    let s = c.alloc(8).unwrap();
    assert_eq!(c.insert(b"", &[1, 2, 3], &s[..3]).unwrap(), 0);
    assert_eq!(c.insert(b"", &[4, 5, 6], &s[4..7]).unwrap(), 0);
    assert_eq!((available(&pool), c.evictable_size()), (0, 6));
    match c.alloc(4) {
        Err(CoreError::OutOfSlots {
            requested,
            available,
        }) => assert_eq!((requested, available), (4, 0)),
        r => panic!("expected OutOfSlots, got {r:?}"),
    }
    assert_eq!((c.total_size(), c.evicted_tokens()), (0, 6));
    free(&pool, &[s[3], s[7]]);
    assert_eq!(available(&pool), 8);
    c.check().unwrap();
}

#[test]
fn a_tail_is_at_most_a_page_minus_one() {
    // Even when the rest matches a whole child's first page and more (a caller asking below
    // an end that is not its match's), the tail stops a token short of a page.
    let (mut c, pool) = partial_cache(16, 4);
    let s = c.alloc(8).unwrap();
    assert_eq!(c.insert(b"", &toks(0..8), &s).unwrap(), 0);
    let tail = c.tail(b"", NodeHandle::ROOT, &toks(0..8)).expect("a tail");
    assert_eq!((tail.len, tail.slots), (3, s[..3].to_vec()));
    drop(pool);
}
