//! Sub-page reuse (`CacheOptions::partial_pages`, for `page_size` > 1).
//!
//! Whole-page matching loses the tokens of a request that share only part of a page with the
//! cache: the partial last page of every cached sequence, and the first page of a branch that
//! diverges mid-page. With partial pages on:
//!
//! - `insert` also caches the partial last page, as a *partial leaf* (a leaf whose key is
//!   shorter than a page) under the path's end, unless a child there already starts with those
//!   tokens. The caller then hands over exactly `slots[returned..len(tokens)]`.
//! - `tail` finds, below a matched path end, the child (whole or partial) sharing the most
//!   leading tokens with the rest of the request, up to a page minus one: the *tail*. Its
//!   first page holds K/V the request can reuse; the caller copies that page into a fresh one
//!   it allocated (copy-on-write, `ops.copy_blocks`), and owns the copy. The tail is not
//!   touched or split: it stays cached for others. Lock `tail.node` while the copy is pending
//!   if an allocation could evict it in between.
//!
//! Partial leaves live in the same child chains as whole children (filed by first token) but
//! are never followed by a whole-page walk, never split, never hashed (no KV event: a router
//! only knows whole blocks) and are evicted like any leaf.

use super::node::{Node, NodeHandle, NIL};
use super::tree::{common_prefix, RadixTree};
use crate::slot::Slot;

/// A partial-page match below a path end: the first `len` tokens of `node`'s first page equal
/// the request's next tokens; `slots` are their slots (the page to copy starts at `slots[0]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tail {
    pub node: NodeHandle,
    pub len: usize,
    pub slots: Vec<Slot>,
}

impl RadixTree {
    /// The best tail below path end `end` (`NodeHandle::ROOT` with namespace `ns`) for the
    /// request's remaining tokens `rest`. Read-only.
    pub fn tail(&self, ns: &[u8], end: NodeHandle, rest: &[i32]) -> Option<Tail> {
        let p = self.page_size;
        if p == 1 || rest.is_empty() {
            return None;
        }
        let parent = if end.is_root() {
            self.root_of(ns)?
        } else {
            self.resolve(end).ok()??
        };
        let mut c = *self.edges.get(&(parent, rest[0]))?;
        let mut best: Option<(usize, u32)> = None;
        let want = rest.len().min(p - 1);
        while c != NIL {
            let n = self.node(c);
            let k = common_prefix(&n.key()[..n.len().min(want)], &rest[..want]);
            if best.is_none_or(|(b, _)| k > b) {
                best = Some((k, c));
            }
            c = n.next_sibling;
        }
        let (len, c) = best.filter(|&(k, _)| k > 0)?;
        Some(Tail {
            node: self.handle(c),
            len,
            slots: self.node(c).value()[..len].to_vec(),
        })
    }

    /// Whether a child of `parent` already starts with all of `tail` (a partial page).
    pub(crate) fn tail_present(&self, parent: u32, tail: &[i32]) -> bool {
        let Some(&head) = self.edges.get(&(parent, tail[0])) else {
            return false;
        };
        let mut c = head;
        while c != NIL {
            let n = self.node(c);
            if n.len() >= tail.len() && n.key()[..tail.len()] == *tail {
                return true;
            }
            c = n.next_sibling;
        }
        false
    }

    /// Hangs a partial leaf under `parent` (a node, or a namespace root made if needed).
    pub(crate) fn add_partial_leaf(&mut self, parent: u32, key: &[i32], value: &[Slot]) {
        debug_assert!(!key.is_empty() && key.len() < self.page_size);
        self.index_remove_if_leaf(parent);
        let leaf = self
            .arena
            .alloc(Node::new(key.into(), value.into(), parent, self.clock));
        self.add_child(parent, leaf);
        self.evictable += key.len();
        self.index_add_if_leaf(leaf);
    }
}
