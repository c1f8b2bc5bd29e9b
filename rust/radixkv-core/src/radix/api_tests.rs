//! Unit tests of the tree's less-travelled public calls: `reset`, `node_view`, `heap_bytes`,
//! `path_slots_into`, `events_enabled` (the Python suite reaches them through the binding; these
//! are what `cargo test`, and so cargo-mutants, sees).

use std::num::NonZeroUsize;
use std::sync::Arc;

use super::*;
use crate::error::CoreError;
use crate::pool::TokenPool;

fn tree(page: usize, events: bool) -> RadixTree {
    RadixTree::with_options(NonZeroUsize::new(page).unwrap(), Policy::Lru, events)
}

#[test]
fn reset_is_refused_while_locked_then_drops_everything() {
    let mut t = tree(2, true);
    t.insert(b"", &[1, 2, 3, 4], &[10, 11, 12, 13]).unwrap();
    t.insert(b"", &[1, 2, 5, 6], &[10, 11, 14, 15]).unwrap();
    t.insert(b"n", &[7, 8], &[16, 17]).unwrap();
    let m = t.match_prefix(b"", &[1, 2, 3, 4]).unwrap();
    t.lock(m.node).unwrap();
    t.take_events();
    let dump = t.dump();
    let err = t.reset().unwrap_err();
    assert!(err.to_string().contains("4 tokens are locked"), "{err}");
    assert_eq!((t.dump(), t.total_size(), t.protected_size()), (dump, 8, 4));
    assert_eq!(t.take_events(), Vec::<KvEvent>::new());
    t.check().unwrap();

    t.unlock(m.node).unwrap();
    let mut out = t.reset().unwrap();
    out.sort_unstable();
    assert_eq!(out, (10..18).collect::<Vec<Slot>>());
    assert_eq!(
        (
            t.total_size(),
            t.evictable_size(),
            t.num_nodes(),
            t.num_namespaces()
        ),
        (0, 0, 0, 0)
    );
    assert_eq!(t.take_events(), vec![KvEvent::AllCleared]);
    assert!(matches!(
        t.node_info(m.node),
        Err(CoreError::StaleHandle(_))
    ));
    assert_eq!(t.peek_prefix(b"", &[1, 2, 3, 4]).unwrap(), 0);
    let mut none = Vec::new();
    assert_eq!(t.evict_into(100, &mut none), 0);
    t.check().unwrap();

    // The emptied tree works as a fresh one: the default namespace starts a new chain.
    assert_eq!(t.insert(b"", &[1, 2], &[20, 21]).unwrap(), 0);
    match &t.take_events()[..] {
        [KvEvent::Stored { parent, tokens, .. }] => {
            assert_eq!((*parent, &tokens[..]), (None, &[1, 2][..]))
        }
        e => panic!("expected one Stored, got {e:?}"),
    }
    assert_eq!(t.match_prefix(b"", &[1, 2]).unwrap().slots, vec![20, 21]);
    t.check().unwrap();
}

#[test]
fn reset_of_a_pooled_cache_gives_the_slots_back() {
    let pool = shared_pool(TokenPool::new(8, 1).unwrap());
    let mut c = RadixCache::new(Some(pool.clone()), None).unwrap();
    let s = c.alloc(3).unwrap();
    c.insert(b"", &[5, 6, 7], &s).unwrap();
    assert_eq!(lock_pool(&pool).num_cached(), 3);
    let mut out = c.reset().unwrap();
    out.sort_unstable();
    let mut want = s.clone();
    want.sort_unstable();
    assert_eq!(out, want);
    let g = lock_pool(&pool);
    assert_eq!((g.num_cached(), g.available()), (0, 8));
    drop(g);
    c.check().unwrap();
}

#[test]
fn node_view_copies_one_node_with_its_neighbours() {
    let mut t = tree(1, false);
    t.insert(b"", &[1, 2, 3], &[10, 11, 12]).unwrap();
    t.insert(b"", &[1, 2, 9], &[10, 11, 19]).unwrap(); // splits after [1, 2]
    t.insert(b"", &[4], &[14]).unwrap();
    t.insert(b"b", &[0], &[30]).unwrap();
    t.insert(b"a", &[8], &[31]).unwrap();
    let m = t.match_prefix(b"", &[1, 2]).unwrap();
    t.lock(m.node).unwrap();
    let leaf = t.match_prefix(b"", &[1, 2, 9]).unwrap().node;

    let v = t.node_view(m.node).unwrap();
    assert_eq!(v.parent, NodeHandle::ROOT);
    assert_eq!((v.key, v.value, v.depth), (vec![1, 2], vec![10, 11], 2));
    let info = t.node_info(m.node).unwrap();
    assert_eq!(
        (v.lock_ref, v.last_access, v.hit_count),
        (1, info.last_access, 2)
    );
    assert!(v.created < v.last_access && v.last_access == t.clock());
    assert_eq!(v.priority, 0.0);
    // Children by first token: [3] before [9].
    let kids: Vec<Vec<i32>> = v
        .children
        .iter()
        .map(|&h| t.node_view(h).unwrap().key)
        .collect();
    assert_eq!(kids, vec![vec![3], vec![9]]);
    assert_eq!(v.children[1], leaf);

    let lv = t.node_view(leaf).unwrap();
    assert_eq!((lv.parent, lv.children.len(), lv.depth), (m.node, 0, 3));
    assert_eq!(
        (lv.key, lv.value, lv.lock_ref, lv.hit_count),
        (vec![9], vec![19], 0, 1)
    );

    // The root: every namespace's top-level nodes, by namespace then first token.
    let rv = t.node_view(NodeHandle::ROOT).unwrap();
    assert_eq!(
        (rv.parent, rv.depth, rv.lock_ref, rv.key.len()),
        (NodeHandle::ROOT, 0, 0, 0)
    );
    let tops: Vec<Vec<i32>> = rv
        .children
        .iter()
        .map(|&h| t.node_view(h).unwrap().key)
        .collect();
    assert_eq!(tops, vec![vec![1, 2], vec![4], vec![8], vec![0]]); // "", "", "a", "b"

    // Priority is copied; a stale handle is refused.
    let mut p = RadixCache::with_options(
        None,
        CacheOptions {
            policy: Policy::Priority,
            ..CacheOptions::default()
        },
    )
    .unwrap();
    let (_, h) = p.insert_node(b"", &[5, 5], &[1, 2], 2.5).unwrap();
    assert_eq!(p.node_view(h).unwrap().priority, 2.5);
    assert_eq!(p.evict(2), 2);
    assert!(matches!(p.node_view(h), Err(CoreError::StaleHandle(_))));
}

#[test]
fn heap_bytes_counts_at_least_the_keys_values_and_hashes() {
    let empty = tree(4, true).heap_bytes();
    for events in [false, true] {
        let mut t = tree(4, events);
        let base = t.heap_bytes();
        let tokens: Vec<i32> = (0..400).collect();
        let slots: Vec<Slot> = (0..400).collect();
        t.insert(b"", &tokens, &slots).unwrap();
        t.insert(b"other", &tokens[..40], &slots[..40]).unwrap();
        let after = t.heap_bytes();
        // 4 bytes a token id, 8 a slot id, 8 a page hash (100 + 10 pages) when events are on.
        let data = 440 * (4 + 8) + if events { 110 * 8 } else { 0 };
        assert!(after >= base + data, "events {events}: {base} -> {after}");
        // Not wildly more: the arena, maps and index add little for three nodes.
        assert!(
            after < base + 2 * data + 4096,
            "events {events}: {base} -> {after}"
        );
    }
    assert!(empty < 1024, "{empty}");
    // A namespace name costs its bytes (twice: both maps) over an empty-named one.
    let mut a = tree(1, false);
    a.insert(b"", &[1], &[1]).unwrap();
    let mut b = tree(1, false);
    b.insert(&[b'x'; 1000], &[1], &[1]).unwrap();
    assert!(b.heap_bytes() >= a.heap_bytes() + 2000);
}

#[test]
fn path_slots_into_checks_the_buffer_and_narrows() {
    let mut t = tree(1, false);
    t.insert(b"", &[1, 2, 3], &[7, 8, 9]).unwrap();
    let h = t.match_prefix(b"", &[1, 2, 3]).unwrap().node;
    let mut out = [0i32; 3];
    t.path_slots_into(h, &mut out).unwrap();
    assert_eq!(out, [7, 8, 9]);
    let mut short = [0i64; 2];
    let err = t.path_slots_into(h, &mut short).unwrap_err();
    assert!(
        err.to_string().contains("buffer of 2 for a path of 3"),
        "{err}"
    );
    assert_eq!(short, [0, 0]);
    let mut empty: [i64; 0] = [];
    t.path_slots_into(NodeHandle::ROOT, &mut empty).unwrap();
    assert!(t.path_slots_into(NodeHandle::ROOT, &mut short).is_err());
    assert!(!t.events_enabled() && tree(1, true).events_enabled());
}

#[test]
fn split_halves_keep_the_creation_time() {
    let mut t = tree(1, false);
    t.insert(b"", &[1, 2, 3], &[10, 11, 12]).unwrap();
    let lower = t.match_prefix(b"", &[1, 2, 3]).unwrap().node; // an access after creation
    t.insert(b"", &[1, 2, 9], &[10, 11, 19]).unwrap(); // splits after [1, 2]
    let upper = t.node_view(lower).unwrap().parent;
    let (u, l) = (t.node_view(upper).unwrap(), t.node_view(lower).unwrap());
    assert_eq!(u.key, vec![1, 2]);
    assert_eq!(u.created, l.created);
    assert_eq!((u.hit_count, l.hit_count), (1, 1)); // the match's hit, not the insert's
    assert!(l.created < l.last_access);
    t.check().unwrap();
}

/// A negative slot id is refused by every insert path, naming the id, and changes nothing:
/// the tree's own insert, a cache without a pool (int64 and int32 slots), and a pooled cache
/// (where it is reported as negative, not merely out of the pool's range).
#[test]
fn inserts_refuse_negative_slot_ids() {
    let mut t = tree(1, false);
    t.insert(b"", &[1, 2], &[5, 6]).unwrap();
    let dump = t.dump();
    let err = t.insert(b"", &[1, 2, 3], &[5, 6, -7]).unwrap_err();
    assert!(err.to_string().contains("negative slot id -7"), "{err}");
    assert_eq!(t.dump(), dump);

    let mut c = RadixCache::new(None, NonZeroUsize::new(1)).unwrap();
    c.insert(b"", &[1, 2], &[5, 6]).unwrap();
    let dump = c.dump();
    let err = c.insert(b"", &[1, 2, 3], &[5, 6, -7]).unwrap_err();
    assert!(err.to_string().contains("negative slot id -7"), "{err}");
    let err = c
        .insert_with_priority_from(b"", &[4, 5], &[8i32, -9], 0.0)
        .unwrap_err();
    assert!(err.to_string().contains("negative slot id -9"), "{err}");
    // Two negative int32 ids (their sign bits must not cancel in the check).
    let err = c
        .insert_with_priority_from(b"", &[4, 5], &[-8i32, -9], 0.0)
        .unwrap_err();
    assert!(err.to_string().contains("negative slot id -8"), "{err}");
    assert_eq!(c.dump(), dump);
    c.check().unwrap();

    let pool = shared_pool(TokenPool::new(8, 1).unwrap());
    let mut p = RadixCache::new(Some(pool.clone()), None).unwrap();
    let s = p.alloc(2).unwrap();
    let err = p.insert(b"", &[1, 2], &[s[0], -1]).unwrap_err();
    assert!(err.to_string().contains("negative slot id -1"), "{err}");
    assert_eq!((p.total_size(), lock_pool(&pool).num_out()), (0, 2));
    p.check().unwrap();
}

/// Token id 0 is valid; a negative one is refused and named, even after a 0.
#[test]
fn insert_names_the_negative_token() {
    let mut t = tree(1, false);
    let err = t.insert(b"", &[0, 3, -5], &[1, 2, 3]).unwrap_err();
    assert!(err.to_string().contains("negative token id -5"), "{err}");
    // Two negative ids (their sign bits must add, not cancel).
    let err = t.insert(b"", &[4, -1, -2], &[1, 2, 3]).unwrap_err();
    assert!(err.to_string().contains("negative token id -1"), "{err}");
    assert_eq!(t.total_size(), 0);
    t.insert(b"", &[0, 3], &[1, 2]).unwrap();
    t.check().unwrap();
}

/// Moving a lock to the empty path releases it (a negative change), and from the empty path
/// takes it (a positive one), as `unlock` and `lock` would.
#[test]
fn move_lock_to_and_from_the_empty_path() {
    let mut t = tree(1, false);
    t.insert(b"", &[1, 2, 3], &[1, 2, 3]).unwrap();
    let h = t.match_prefix(b"", &[1, 2, 3]).unwrap().node;
    assert_eq!(t.lock(h).unwrap(), 3);
    assert_eq!(t.move_lock(h, NodeHandle::ROOT).unwrap(), -3);
    assert_eq!(t.protected_size(), 0);
    assert_eq!(t.move_lock(NodeHandle::ROOT, h).unwrap(), 3);
    assert_eq!(t.protected_size(), 3);
    t.check().unwrap();
}

/// int32 slots are widened on insert (through a reused buffer that must grow), and the path
/// reads back the same ids.
#[test]
fn int32_slots_insert_and_read_back() {
    let mut c = RadixCache::new(None, None).unwrap();
    c.insert_with_priority_from(b"", &[1, 2], &[5i32, 6], 0.0)
        .unwrap();
    c.insert_with_priority_from(b"", &[1, 2, 3, 4, 5], &[5i32, 6, 7, 8, 9], 0.0)
        .unwrap();
    assert_eq!(
        c.match_prefix(b"", &[1, 2, 3, 4, 5]).unwrap().slots,
        [5, 6, 7, 8, 9]
    );
    c.check().unwrap();
}

/// The cache's own accessors (what the binding calls): the pool it was given, the policy it
/// was built with, and the path's slots read straight into a caller's buffer.
#[test]
fn cache_accessors_reach_its_pool_policy_and_paths() {
    let pool = shared_pool(TokenPool::new(16, 2).unwrap());
    let opts = CacheOptions {
        policy: Policy::Lfu,
        ..CacheOptions::default()
    };
    let mut c = RadixCache::with_options(Some(Arc::clone(&pool)), opts).unwrap();
    assert!(Arc::ptr_eq(c.pool().unwrap(), &pool));
    assert_eq!(c.policy(), Policy::Lfu);
    assert!(RadixCache::new(None, None).unwrap().pool().is_none());

    let slots = lock_pool(&pool).alloc(4).unwrap();
    c.insert(b"", &[1, 2, 3, 4], &slots).unwrap();
    let (len, h) = c.match_end(b"", &[1, 2, 3, 4, 9]).unwrap();
    assert_eq!(len, 4);
    let mut out = [-1i64; 4];
    c.path_slots_into(h, &mut out).unwrap();
    assert_eq!(out[..], slots[..]);
    let mut narrow = [-1i32; 4];
    c.path_slots_into(h, &mut narrow).unwrap();
    assert!(narrow.iter().zip(&slots).all(|(&a, &b)| i64::from(a) == b));
    let mut short = [-1i64; 3];
    let err = c.path_slots_into(h, &mut short).unwrap_err();
    assert!(
        err.to_string().contains("buffer of 3 for a path of 4"),
        "{err}"
    );
    let mut head = [-1i64; 2];
    c.path_prefix_slots_into(h, &mut head).unwrap();
    assert_eq!(head[..], slots[..2]);
    c.check().unwrap();
}

/// A `Stored` event names the leaf's namespace also when the leaf hangs below other nodes (one
/// and two levels under the root, after a split), and its hashes chain from the parent's last
/// page: equal to the hashes of the same path stored in one insert of a fresh tree.
#[test]
fn stored_events_below_the_root_name_their_namespace() {
    // (hashes, parent, tokens, namespace) of each queued event, which must all be `Stored`.
    type Stored = (Vec<u64>, Option<u64>, Vec<i32>, Vec<u8>);
    let stored = |t: &mut RadixTree| -> Vec<Stored> {
        t.take_events()
            .into_iter()
            .map(|e| match e {
                KvEvent::Stored {
                    hashes,
                    parent,
                    tokens,
                    namespace,
                } => (hashes, parent, tokens, namespace),
                e => panic!("expected Stored, got {e:?}"),
            })
            .collect()
    };
    let mut t = tree(2, true);
    t.insert(b"n", &[1, 2, 3, 4], &[10, 11, 12, 13]).unwrap();
    let top = stored(&mut t);
    let [(h, None, _, ns)] = &top[..] else {
        panic!("{top:?}")
    };
    assert_eq!((h.len(), &ns[..]), (2, &b"n"[..]));
    let (h1, h2) = (h[0], h[1]);
    // One level down: [5, 6] under [1, 2, 3, 4].
    t.insert(b"n", &[1, 2, 3, 4, 5, 6], &[10, 11, 12, 13, 14, 15])
        .unwrap();
    // A split after [1, 2], then [7, 8] under [1, 2] and [9, 10] two levels down, under [3, 4].
    t.insert(b"n", &[1, 2, 7, 8], &[10, 11, 16, 17]).unwrap();
    t.insert(b"n", &[1, 2, 3, 4, 9, 10], &[10, 11, 12, 13, 18, 19])
        .unwrap();
    let below = stored(&mut t);
    let want_tokens: [(&[i32], u64); 3] = [(&[5, 6], h2), (&[7, 8], h1), (&[9, 10], h2)];
    assert_eq!(below.len(), 3, "{below:?}");
    for ((hashes, parent, tokens, ns), (want, after)) in below.iter().zip(want_tokens) {
        assert_eq!(
            (&tokens[..], *parent, &ns[..], hashes.len()),
            (want, Some(after), &b"n"[..], 1)
        );
    }
    t.check().unwrap();
    // The same paths inserted whole into a fresh tree hash the same pages.
    for (k, path) in [[1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 9, 10]].iter().enumerate() {
        let mut f = tree(2, true);
        f.insert(b"n", path, &[0, 1, 2, 3, 4, 5]).unwrap();
        let whole = stored(&mut f);
        assert_eq!(whole[0].0, [h1, h2, below[2 * k].0[0]]);
    }
    let mut f = tree(2, true);
    f.insert(b"n", &[1, 2, 7, 8], &[0, 1, 2, 3]).unwrap();
    assert_eq!(stored(&mut f)[0].0, [h1, below[1].0[0]]);
}
