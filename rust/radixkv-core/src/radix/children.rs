//! Child lookup: one hash map for every edge of the tree, keyed by (parent, first token).
//!
//! One map for the whole tree costs ~16 bytes per edge instead of a map per node, and it makes a
//! split cheap: the lower half keeps its node id, so its own children's entries stay valid.
//! With `page_size` > 1 two children can share a first token (their first pages differ later);
//! they form a chain through `Node::next_sibling` whose head is in the map.

use super::node::NIL;
use super::token::TokenId;
use super::tree::RadixTree;

impl RadixTree {
    /// The child of `parent` whose key starts with `page` (one page of tokens; an int64 id
    /// outside int32's range starts no key).
    #[inline]
    pub(crate) fn find_child<T: TokenId>(&self, parent: u32, page: &[T]) -> Option<u32> {
        let mut c = *self.edges.get(&(parent, page[0].key()?))?;
        if self.page_size == 1 {
            return Some(c);
        }
        loop {
            let n = self.node(c);
            // Partial-page leaves (shorter than a page) share the chain but are never a match.
            if n.len() >= page.len() && T::common_prefix(&n.key()[..page.len()], page) == page.len()
            {
                return Some(c);
            }
            if n.next_sibling == NIL {
                return None;
            }
            c = n.next_sibling;
        }
    }

    /// Links `child` (whose key is set and whose first page no sibling has) under `parent`.
    pub(crate) fn add_child(&mut self, parent: u32, child: u32) {
        let first = self.node(child).key()[0];
        if let Some(&head) = self.edges.get(&(parent, first)) {
            // Insert after the head: no map write, O(1).
            let after = self.node(head).next_sibling;
            self.node_mut(child).next_sibling = after;
            self.node_mut(head).next_sibling = child;
        } else {
            self.node_mut(child).next_sibling = NIL;
            self.edges.insert((parent, first), child);
        }
        self.node_mut(parent).num_children += 1;
    }

    /// Unlinks `child` from `parent`.
    pub(crate) fn remove_child(&mut self, parent: u32, child: u32) {
        let first = self.node(child).key()[0];
        let next = self.node(child).next_sibling;
        let head = self.edges[&(parent, first)];
        if head == child {
            if next == NIL {
                self.edges.remove(&(parent, first));
            } else {
                self.edges.insert((parent, first), next);
            }
        } else {
            let mut prev = head;
            while self.node(prev).next_sibling != child {
                prev = self.node(prev).next_sibling;
            }
            self.node_mut(prev).next_sibling = next;
        }
        self.node_mut(child).next_sibling = NIL;
        self.node_mut(parent).num_children -= 1;
    }

    /// Puts `new` where `old` was among `parent`'s children (same first page). Used by split.
    pub(crate) fn replace_child(&mut self, parent: u32, old: u32, new: u32) {
        let first = self.node(old).key()[0];
        let next = self.node(old).next_sibling;
        self.node_mut(new).next_sibling = next;
        self.node_mut(old).next_sibling = NIL;
        let head = self.edges[&(parent, first)];
        if head == old {
            self.edges.insert((parent, first), new);
        } else {
            let mut prev = head;
            while self.node(prev).next_sibling != old {
                prev = self.node(prev).next_sibling;
            }
            self.node_mut(prev).next_sibling = new;
        }
    }
}
