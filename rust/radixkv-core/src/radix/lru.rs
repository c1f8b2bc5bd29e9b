//! The evictable-leaf index: every unlocked leaf, ordered by (`last_access`, id).
//!
//! Kept in step with every change of `lock_ref`, child count or access time, so evicting k leaves
//! costs O(k log n) and nothing ever rebuilds a heap of all leaves.

use super::tree::RadixTree;

impl RadixTree {
    /// Adds `i` to the index if it is now an unlocked leaf.
    pub(crate) fn lru_add_if_leaf(&mut self, i: u32) {
        let n = self.node(i);
        if n.is_evictable_leaf() {
            self.lru.insert((n.last_access, i));
        }
    }

    /// Removes `i` from the index if it is there (call *before* it stops being an unlocked leaf,
    /// or before its `last_access` changes).
    pub(crate) fn lru_remove_if_leaf(&mut self, i: u32) {
        let n = self.node(i);
        if n.is_evictable_leaf() {
            self.lru.remove(&(n.last_access, i));
        }
    }

    /// Sets a node's access time, moving it in the index if it is there.
    pub(crate) fn touch(&mut self, i: u32, now: u64) {
        self.lru_remove_if_leaf(i);
        self.node_mut(i).last_access = now;
        self.lru_add_if_leaf(i);
    }

    /// The least recently used unlocked leaf.
    pub(crate) fn lru_pop(&mut self) -> Option<u32> {
        self.lru.pop_first().map(|(_, i)| i)
    }
}
