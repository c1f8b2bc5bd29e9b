//! Namespaces: one root per namespace, so different namespaces never share a prefix.
//!
//! The core sees a namespace as opaque bytes; bindings encode their structured keys injectively
//! (the Python binding tags None / str / tuple and length-prefixes strings). A root exists only
//! while its namespace caches something: it is made by the first insert and dropped when its
//! last child is evicted, so per-request salts do not leak roots. No handle ever names a
//! namespace root (the empty match returns `NodeHandle::ROOT`), so dropping one retires nothing
//! a caller holds.

use super::node::{Node, FLAG_ROOT, NIL};
use super::tree::RadixTree;

impl RadixTree {
    pub(crate) fn root_of(&self, ns: &[u8]) -> Option<u32> {
        if ns.is_empty() {
            return (self.default_root != NIL).then_some(self.default_root);
        }
        self.roots.get(ns).copied()
    }

    pub(crate) fn root_or_create(&mut self, ns: &[u8]) -> u32 {
        if let Some(r) = self.root_of(ns) {
            return r;
        }
        let node = Node {
            flags: FLAG_ROOT,
            ..Node::new(Box::new([]), Box::new([]), NIL, 0)
        };
        let r = self.arena.alloc(node);
        self.roots.insert(ns.into(), r);
        self.root_ns.insert(r, ns.into());
        if ns.is_empty() {
            self.default_root = r;
        }
        r
    }

    /// Drops a namespace root that has no child left.
    pub(crate) fn drop_root_if_empty(&mut self, r: u32) {
        if self.node(r).num_children > 0 {
            return;
        }
        if let Some(ns) = self.root_ns.remove(&r) {
            self.roots.remove(&ns);
        }
        if self.default_root == r {
            self.default_root = NIL;
        }
        self.arena.retire(r);
    }

    /// Number of namespaces that cache something.
    pub fn num_namespaces(&self) -> usize {
        self.roots.len()
    }
}
