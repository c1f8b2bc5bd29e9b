//! `RadixTree::check` and `RadixCache::check` shown to fail: each test breaks one invariant of
//! a healthy tree through the hooks in `corrupt.rs` and requires the checker to name it.

use super::corrupt::{self as c, node_at};
use super::*;
use crate::error::CoreError;
use crate::pool::TokenPool;
use std::num::NonZeroUsize;

/// Page size 2; namespaces "" and "x"; two retired arena slots; a locked path; a sibling chain
/// (two first pages starting with token 1). Nodes of "": V=[1,2] -> U=[3,4] -> {A=[5,6] (locked
/// end), B=[7,8]}, V -> C=[9,9], D=[1,3,5,5] (V's sibling under the same first token).
fn fixture() -> RadixTree {
    // Events on, so that the page-hash chains are checked too.
    let mut t = RadixTree::with_options(NonZeroUsize::new(2).unwrap(), Policy::Lru, true);
    t.insert(b"z", &[30, 31], &[40, 41]).unwrap();
    t.insert(b"", &[1, 2, 3, 4, 5, 6], &[0, 1, 2, 3, 4, 5])
        .unwrap();
    t.insert(b"", &[1, 2, 3, 4, 7, 8], &[0, 1, 2, 3, 10, 11])
        .unwrap();
    t.insert(b"", &[1, 2, 9, 9], &[0, 1, 12, 13]).unwrap();
    t.insert(b"", &[1, 3, 5, 5], &[14, 15, 16, 17]).unwrap();
    t.insert(b"x", &[1, 2], &[20, 21]).unwrap();
    // The oldest leaf is z's: evicting it retires it and its emptied root (two free slots).
    let mut out = Vec::new();
    assert_eq!(t.evict_into(2, &mut out), 2);
    assert_eq!((out, t.num_namespaces()), (vec![40, 41], 2));
    let m = t.match_prefix(b"", &[1, 2, 3, 4, 5, 6]).unwrap();
    t.lock(m.node).unwrap();
    t.check().expect("the fixture is healthy");
    t
}

const V: &[i32] = &[1, 2];
const U: &[i32] = &[1, 2, 3, 4];
const A: &[i32] = &[1, 2, 3, 4, 5, 6];
const B: &[i32] = &[1, 2, 3, 4, 7, 8];
const C: &[i32] = &[1, 2, 9, 9];
const D: &[i32] = &[1, 3, 5, 5];

/// Runs `corrupt` on a fresh fixture; `check` must fail with a message containing `want`
/// (a leading `^` anchors it at the start). Messages name the invariant, so a corruption caught
/// by some other, accidental check does not count.
fn caught(want: &str, corrupt: impl FnOnce(&mut RadixTree)) {
    let mut t = fixture();
    corrupt(&mut t);
    match t.check() {
        Err(CoreError::InvariantViolation(msg)) => {
            let hit = match want.strip_prefix('^') {
                Some(w) => msg.starts_with(w),
                None => msg.contains(want),
            };
            assert!(hit, "expected {want:?}, check said {msg:?}");
        }
        other => panic!("expected an InvariantViolation about {want:?}, got {other:?}"),
    }
}

#[test]
fn arena_free_list() {
    caught("free-list entry", |t| {
        c::push_free_list(t, node_at(t, b"", A))
    });
    caught("free-list entry", |t| c::push_free_list(t, c::arena_len(t)));
    caught("free-list entry", |t| {
        let f = c::some_free_slot(t);
        c::push_free_list(t, f);
    });
}

#[test]
fn arena_live_count() {
    caught("arena:", c::bump_live_count);
}

#[test]
fn edges_lead_to_live_nodes_filed_correctly() {
    caught("leads to dead node", |t| {
        let (r, f) = (c::root_of(t, b""), c::some_free_slot(t));
        c::set_edge(t, r, 1, f);
    });
    caught("filed under", |t| {
        let (b, v) = (node_at(t, b"", B), node_at(t, b"", V));
        c::node(t, b).parent = v;
    });
    caught("filed under", |t| {
        let i = node_at(t, b"", C);
        c::node(t, i).key[0] = 8;
    });
}

#[test]
fn siblings_differ_in_first_page() {
    caught("same first page", |t| {
        let d = node_at(t, b"", D);
        c::node(t, d).key[1] = 2; // D's first page becomes V's
    });
}

#[test]
fn namespace_maps() {
    caught("differ in size", |t| {
        let a = node_at(t, b"", A);
        c::add_stray_namespace_name(t, a);
    });
    caught("cached default root", |t| {
        let x = c::root_of(t, b"x");
        c::set_default_root(t, x);
    });
    caught("maps back wrongly", |t| {
        let x = c::root_of(t, b"x");
        c::remap_namespace(t, x, b"y");
    });
    caught("is empty", |t| {
        c::empty_namespace(t, b"e");
    });
    caught("not a live root", |t| {
        // Namespace x's name moved to a live inner node (U, which has children).
        let (x, u) = (c::root_of(t, b"x"), node_at(t, b"", U));
        c::move_namespace(t, b"x", x, u);
    });
    caught("not a live root", |t| {
        // ... or to a retired arena slot.
        let (x, f) = (c::root_of(t, b"x"), c::some_free_slot(t));
        c::move_namespace(t, b"x", x, f);
    });
}

#[test]
fn child_counts() {
    caught("num_children", |t| {
        let u = node_at(t, b"", U);
        c::node(t, u).num_children += 1;
    });
}

#[test]
fn key_lengths_are_whole_pages() {
    caught("key length", |t| {
        let d = node_at(t, b"", D);
        c::truncate_node(t, d, 3);
    });
    caught("key length", |t| {
        // Shorter than a page is allowed for a childless (partial-page) leaf only: U has
        // children.
        let u = node_at(t, b"", U);
        c::truncate_node(t, u, 1);
    });
    caught("key length", |t| {
        // A value shorter than the key.
        let d = node_at(t, b"", D);
        let n = c::node(t, d);
        n.value = n.value[..2].into();
    });
}

#[test]
fn lock_ref_is_direct_plus_children() {
    caught("!= direct", |t| {
        let b = node_at(t, b"", B);
        c::node(t, b).lock_ref = 1;
    });
    caught("!= direct", |t| {
        let i = node_at(t, b"", C);
        c::node(t, i).direct_locks = 1;
    });
    caught("!= direct", |t| {
        // A's lock moved to its parent without the lock_ref following.
        let (a, u) = (node_at(t, b"", A), node_at(t, b"", U));
        c::node(t, a).direct_locks = 0;
        c::node(t, u).direct_locks = 1;
    });
}

#[test]
fn access_times() {
    caught("created / last_access out of order", |t| {
        let (v, now) = (node_at(t, b"", V), c::clock(t));
        c::node(t, v).last_access = now + 1;
    });
    caught("accessed after its parent", |t| {
        // U's access time back to its creation, below its children's (the last match).
        let u = node_at(t, b"", U);
        let n = c::node(t, u);
        n.last_access = n.created;
    });
}

#[test]
fn creation_time_and_priority() {
    caught("created / last_access out of order", |t| {
        let b = node_at(t, b"", B);
        let n = c::node(t, b);
        n.created = n.last_access + 1;
    });
    caught(": priority NaN", |t| {
        let b = node_at(t, b"", B);
        c::node(t, b).priority = f64::NAN;
    });
    caught("of higher priority", |t| {
        let b = node_at(t, b"", B);
        c::node(t, b).priority = 1.0; // above its parent's 0
    });
}

#[test]
fn page_hashes_follow_the_path() {
    caught("page hashes differ", |t| {
        let b = node_at(t, b"", B);
        c::flip_page_hash(t, b);
    });
    caught("page hashes differ", |t| {
        // The key changes under unchanged hashes (same first token, so still filed right).
        let b = node_at(t, b"", B);
        c::node(t, b).key[1] = 9;
    });
}

#[test]
fn roots_hold_no_locks() {
    caught("^root ", |t| {
        let r = c::root_of(t, b"");
        c::node(t, r).lock_ref = 1;
    });
    caught("^root ", |t| {
        let r = c::root_of(t, b"x");
        c::node(t, r).direct_locks = 1;
    });
    caught("^root ", |t| {
        let (r, a) = (c::root_of(t, b"x"), node_at(t, b"", A));
        c::node(t, r).parent = a;
    });
}

#[test]
fn every_live_node_is_reachable() {
    caught("nodes reachable", |t| {
        let r = c::root_of(t, b"");
        c::orphan_node(t, r);
    });
}

#[test]
fn sizes_are_recomputed() {
    caught("sizes", |t| c::shift_sizes(t, 1, 0));
    caught("sizes", |t| c::shift_sizes(t, 0, -1));
    caught("sizes", |t| c::shift_sizes(t, 2, -2));
}

#[test]
fn lru_is_exactly_the_unlocked_leaves() {
    caught("eviction index", |t| {
        let b = node_at(t, b"", B);
        c::lru_forget(t, b);
    });
    caught("eviction index", |t| {
        // A locked leaf listed as evictable.
        let a = node_at(t, b"", A);
        c::lru_add_as_is(t, a);
    });
    caught("eviction index", |t| {
        // The right leaf under a stale access time (same count of entries).
        let b = node_at(t, b"", B);
        let n = c::lru_len(t);
        let at = c::node(t, b).last_access;
        c::lru_forget(t, b);
        c::lru_add(t, at - 1, b);
        assert_eq!(c::lru_len(t), n);
    });
}

#[test]
fn slots_are_non_negative() {
    caught("negative slot", |t| {
        let i = node_at(t, b"", C);
        c::node(t, i).value[1] = -1; // second slot of [9, 9]
    });
}

#[test]
fn fixture_names_real_nodes() {
    // The hooks address what the fixture built: the node chain and the parent links.
    let t = fixture();
    let (v, u, a) = (
        node_at(&t, b"", V),
        node_at(&t, b"", U),
        node_at(&t, b"", A),
    );
    assert_eq!((c::parent(&t, a), c::parent(&t, u)), (u, v));
    assert_ne!(v, c::NO_NODE);
}

// ---- RadixCache::check: the tree against its pool ------------------------------------------

fn pooled_fixture() -> (RadixCache, SharedPool) {
    let pool = shared_pool(TokenPool::new(16, 1).unwrap());
    let mut cache = RadixCache::new(Some(pool.clone()), None).unwrap();
    let s = cache.alloc(6).unwrap();
    cache.insert(b"", &[1, 2, 3, 4, 5, 6], &s).unwrap();
    let s2 = cache.alloc(2).unwrap();
    cache
        .insert(b"", &[1, 2, 3, 9, 9], &[&s[..3], &s2[..]].concat())
        .unwrap();
    cache.check().expect("healthy");
    (cache, pool)
}

fn cache_caught(want: &str, corrupt: impl FnOnce(&mut RadixCache, &SharedPool)) {
    let (mut cache, pool) = pooled_fixture();
    corrupt(&mut cache, &pool);
    match cache.check() {
        Err(CoreError::InvariantViolation(msg)) => {
            assert!(msg.contains(want), "expected {want:?}, check said {msg:?}");
        }
        other => panic!("expected an InvariantViolation about {want:?}, got {other:?}"),
    }
    // Dropping would hand the corrupted slots back to the pool, which asserts they are cached.
    std::mem::forget(cache);
}

#[test]
fn cache_check_runs_the_pool_check() {
    cache_caught("TokenPool", |_, pool| {
        crate::pool::corrupt::shift_counters(&mut lock_pool(pool), 1, 0);
    });
}

#[test]
fn cache_check_compares_cached_counts() {
    // A free slot marked cached (and off the free list): the pool alone is consistent.
    cache_caught("cached slots", |_, pool| {
        let mut g = lock_pool(pool);
        crate::pool::corrupt::mark_free_slot_cached(&mut g, 15);
        g.check().expect("the pool alone is consistent");
    });
}

#[test]
fn cache_check_requires_tree_slots_cached_once() {
    // Two nodes naming one slot: counts agree, one slot is held twice.
    cache_caught("held twice", |cache, _| {
        let t = cache_tree_mut(cache);
        let i = node_at(t, b"", &[1, 2, 3, 9, 9]);
        let dup = c::node(t, node_at(t, b"", &[1, 2, 3])).value[0]; // the slot of token 1
        c::node(t, i).value[0] = dup;
    });
    // A tree slot the pool counts as free.
    cache_caught("held twice", |cache, pool| {
        let free = {
            let g = lock_pool(pool);
            (0..16)
                .rev()
                .find(|&s| g.state(s) == Some(crate::pool::SlotState::Free))
                .unwrap()
        };
        let t = cache_tree_mut(cache);
        let i = node_at(t, b"", &[1, 2, 3]);
        c::node(t, i).value[0] = free as Slot;
    });
}

fn cache_tree_mut(cache: &mut RadixCache) -> &mut RadixTree {
    c::tree_of(cache)
}
