//! `heap_bytes` against the heap the tree really holds. The test binary's allocator counts, per
//! thread, the bytes live on the heap; a tree built on one thread then holds exactly the
//! difference between that count before it was made and after. `heap_bytes` (what the binding
//! reports for memory accounting) must stay within a fixed factor of it in trees dominated by
//! each of its parts: many small nodes (arena, edge map, eviction index), long paths (keys and
//! values), page hashes (events on), long namespace names, and a tree after eviction (a free
//! list, maps at their old capacity). The estimate is within 0.92x .. 1.0x of the heap held in
//! each; 0.88x .. 1.14x leaves room for allocator-layout changes between Rust releases, and is
//! tight enough that dropping or mis-scaling any part that is more than a few percent of the
//! total fails. The free list, too small a part for that, is checked on its own: two trees that
//! differ only in it must differ by its size in both counts.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::num::NonZeroUsize;

use super::*;

struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

fn add(bytes: isize) {
    // `try_with`: allocations during thread teardown must not panic.
    let _ = LIVE.try_with(|c| c.set(c.get() + bytes));
}

// SAFETY: every call forwards to `System` with the caller's arguments; the counter is a side
// effect that allocates nothing.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(l) };
        if !p.is_null() {
            add(l.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        unsafe { System.dealloc(p, l) };
        add(-(l.size() as isize));
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, l, new_size) };
        if !q.is_null() {
            add(new_size as isize - l.size() as isize);
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Builds a tree with `build` and returns (`heap_bytes`, bytes it really holds).
fn measure(page: usize, events: bool, build: impl FnOnce(&mut RadixTree)) -> (usize, usize) {
    let before = live();
    let mut t = RadixTree::with_options(NonZeroUsize::new(page).unwrap(), Policy::Lru, events);
    build(&mut t);
    // Pending events are the caller's to drain, not the tree's bookkeeping.
    drop(t.take_events());
    let held = live() - before;
    let est = t.heap_bytes();
    t.check().unwrap();
    drop(t);
    assert_eq!(live(), before, "the tree gave back everything it held");
    (est, held as usize)
}

fn assert_close(what: &str, (est, held): (usize, usize)) {
    assert!(
        est * 100 >= held * 88 && est * 100 <= held * 114,
        "{what}: heap_bytes {est} vs {held} bytes held (allowed 0.88x .. 1.14x)"
    );
}

/// Many one-page leaves under one root: the arena, the edge map and the eviction index.
fn fan(t: &mut RadixTree, n: i32) {
    for i in 0..n {
        t.insert(b"", &[i, 7], &[i64::from(i) * 2, i64::from(i) * 2 + 1])
            .unwrap();
    }
}

#[test]
fn heap_bytes_tracks_the_heap_of_small_nodes() {
    assert_close("fan of 3000 leaves", measure(1, false, |t| fan(t, 3000)));
    // Events on: a hash list per node, each of two hashes.
    assert_close(
        "fan of 3000 leaves, events on",
        measure(1, true, |t| fan(t, 3000)),
    );
}

/// 40 paths of 768 tokens sharing their first 256: keys and values (and page hashes).
fn long(t: &mut RadixTree) {
    let shared: Vec<i32> = (0..256).collect();
    for r in 0..40 {
        let tokens: Vec<i32> = shared
            .iter()
            .copied()
            .chain((0..512).map(|k| r * 1000 + k))
            .collect();
        let slots: Vec<Slot> = (0..tokens.len() as i64)
            .map(|k| k + 1_000 * i64::from(r))
            .collect();
        t.insert(b"", &tokens, &slots).unwrap();
    }
}

/// 300 namespaces with 404-byte names, one token each.
fn names(t: &mut RadixTree) {
    for i in 0..300i32 {
        let ns: Vec<u8> = std::iter::repeat_n(b'a' + (i % 26) as u8, 400)
            .chain(i.to_le_bytes())
            .collect();
        t.insert(&ns, &[1], &[i64::from(i)]).unwrap();
    }
}

/// 3000 namespaces with 2-byte names, one token each: the namespace maps' entries.
fn short_names(t: &mut RadixTree) {
    for i in 0..3000u16 {
        t.insert(&i.to_le_bytes(), &[1], &[i64::from(i)]).unwrap();
    }
}

/// The fan of 3000 with 2500 of its leaves evicted: a long free list, maps at their old size.
fn evicted(t: &mut RadixTree) {
    fan(t, 3000);
    let mut out = Vec::new();
    assert_eq!(t.evict_into(5000, &mut out), 5000);
}

#[test]
fn heap_bytes_tracks_the_heap_of_long_paths() {
    assert_close("40 long paths, page 4, events off", measure(4, false, long));
    // Events on at page 1: a page hash for each of the 20,736 tokens.
    assert_close("40 long paths, page 1, events on", measure(1, true, long));
}

#[test]
fn heap_bytes_tracks_the_heap_of_namespaces() {
    assert_close("300 namespaces, long names", measure(1, false, names));
    assert_close(
        "3000 namespaces, short names",
        measure(1, false, short_names),
    );
}

#[test]
fn heap_bytes_tracks_the_heap_after_eviction() {
    assert_close("fan of 3000, 2500 evicted", measure(1, false, evicted));
}

#[test]
fn cache_heap_bytes_tracks_its_tree() {
    let before = live();
    let mut c = RadixCache::new(None, None).unwrap();
    for i in 0..2000 {
        c.insert(b"", &[i, 7], &[i64::from(i) * 2, i64::from(i) * 2 + 1])
            .unwrap();
    }
    let held = (live() - before) as usize;
    assert_close("a cache with 2000 leaves", (c.heap_bytes(), held));
}

/// The free list on its own: a fan evicted whole and built again holds what a fresh fan holds
/// (the same nodes, keys, maps and index) plus the free list's buffer, which keeps its capacity
/// when the refill pops it empty. The difference of the two estimates is that buffer's size.
#[test]
fn heap_bytes_counts_the_free_list() {
    let (fresh_est, fresh_held) = measure(1, false, |t| fan(t, 3000));
    let (refilled_est, refilled_held) = measure(1, false, |t| {
        fan(t, 3000);
        let mut out = Vec::new();
        assert_eq!(t.evict_into(6000, &mut out), 6000);
        fan(t, 3000);
    });
    let held = refilled_held as isize - fresh_held as isize;
    let est = refilled_est as isize - fresh_est as isize;
    assert!(
        held >= 4 * 3000,
        "the refilled tree holds its free list: {held} bytes more"
    );
    assert!(
        est * 10 >= held * 9 && est * 10 <= held * 11,
        "heap_bytes grew by {est} bytes for a free list of {held}"
    );
}
