//! Test-only hooks that break a `RadixTree` on purpose, one field at a time, so that the tests
//! in `check_tests.rs` can show `check` noticing each invariant it claims. Nothing here keeps the
//! tree consistent: that is the point.

use super::node::{Node, Slot, NIL};
use super::tree::RadixTree;

/// Arena index of the node whose path from `ns`'s root is exactly `tokens` (whole nodes).
pub(crate) fn node_at(t: &RadixTree, ns: &[u8], tokens: &[i32]) -> u32 {
    let root = t.root_of(ns).expect("namespace exists");
    let w = t.walk(root, tokens);
    assert!(
        w.partial.is_none() && w.matched == tokens.len(),
        "{tokens:?} is not a node end"
    );
    w.node
}

pub(crate) fn root_of(t: &RadixTree, ns: &[u8]) -> u32 {
    t.root_of(ns).expect("namespace exists")
}

pub(crate) fn node(t: &mut RadixTree, i: u32) -> &mut Node {
    t.node_mut(i)
}

pub(crate) fn parent(t: &RadixTree, i: u32) -> u32 {
    t.node(i).parent
}

pub(crate) fn clock(t: &RadixTree) -> u64 {
    t.clock
}

pub(crate) fn arena_len(t: &RadixTree) -> u32 {
    t.arena.nodes.len() as u32
}

/// A free arena slot (the fixture evicts something so that one exists).
pub(crate) fn some_free_slot(t: &RadixTree) -> u32 {
    *t.arena.free.last().expect("a retired node")
}

pub(crate) fn push_free_list(t: &mut RadixTree, i: u32) {
    t.arena.free.push(i);
}

pub(crate) fn bump_live_count(t: &mut RadixTree) {
    t.arena.live += 1;
}

/// Points the edge (parent, first token) at `to`.
pub(crate) fn set_edge(t: &mut RadixTree, parent: u32, first: i32, to: u32) {
    t.edges.insert((parent, first), to);
}

/// Replaces a node's key and value with the first `n` tokens of each (n may be odd).
pub(crate) fn truncate_node(t: &mut RadixTree, i: u32, n: usize) {
    let node = t.node_mut(i);
    node.key = node.key[..n].into();
    node.value = node.value[..n].into();
}

pub(crate) fn remap_namespace(t: &mut RadixTree, root: u32, ns: &[u8]) {
    t.root_ns.insert(root, ns.into());
}

pub(crate) fn add_stray_namespace_name(t: &mut RadixTree, root: u32) {
    t.root_ns.insert(root, b"stray"[..].into());
}

/// Files namespace `ns` (root `old`) under node `to` instead, in both maps.
pub(crate) fn move_namespace(t: &mut RadixTree, ns: &[u8], old: u32, to: u32) {
    t.root_ns.remove(&old);
    t.root_ns.insert(to, ns.into());
    t.roots.insert(ns.into(), to);
}

pub(crate) fn set_default_root(t: &mut RadixTree, r: u32) {
    t.default_root = r;
}

/// A namespace root with no child, as if its last leaf went without `drop_root_if_empty`.
pub(crate) fn empty_namespace(t: &mut RadixTree, ns: &[u8]) -> u32 {
    t.root_or_create(ns)
}

/// A live node no edge leads to (allocated, never linked).
pub(crate) fn orphan_node(t: &mut RadixTree, parent: u32) -> u32 {
    let value: Box<[Slot]> = Box::new([0, 0]);
    t.arena.alloc(Node::new(Box::new([7, 7]), value, parent, 0))
}

pub(crate) fn shift_sizes(t: &mut RadixTree, evictable: isize, protected: isize) {
    t.evictable = t.evictable.wrapping_add_signed(evictable);
    t.protected = t.protected.wrapping_add_signed(protected);
}

/// Removes `i` from the eviction index (whatever its key there).
pub(crate) fn lru_forget(t: &mut RadixTree, i: u32) {
    t.index.retain(|&(_, _, j)| j != i);
}

/// Lists `i` in the eviction index under the policy's key for its node as it is.
pub(crate) fn lru_add_as_is(t: &mut RadixTree, i: u32) {
    let key = t.policy.key(t.node(i), i);
    t.index.insert(key);
}

/// Lists `i` under an access time `access` (LRU keys are (last_access, 0, id)).
pub(crate) fn lru_add(t: &mut RadixTree, access: u64, i: u32) {
    t.index.insert((access, 0, i));
}

pub(crate) fn lru_len(t: &RadixTree) -> usize {
    t.index.len()
}

pub(crate) const NO_NODE: u32 = NIL;

/// The tree behind a cache, for corrupting it in place.
pub(crate) fn tree_of(cache: &mut super::RadixCache) -> &mut RadixTree {
    cache.tree_mut_for_tests()
}

/// Flips a bit of node `i`'s first page hash (events on).
pub(crate) fn flip_page_hash(t: &mut RadixTree, i: u32) {
    let log = t.events.as_mut().expect("events on");
    let mut h = log.get(i).to_vec();
    h[0] ^= 1;
    log.set(i, h.into());
}
