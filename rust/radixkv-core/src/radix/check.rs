//! `check`: recomputes everything the tree keeps incrementally and compares.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::events::{namespace_seed, page_hashes};
use super::node::{Slot, NIL};
use super::tree::RadixTree;
use crate::error::{CoreError, Result};

fn fail<T>(msg: String) -> Result<T> {
    Err(CoreError::InvariantViolation(msg))
}

impl RadixTree {
    /// Verifies every invariant listed in tree.rs. Returns the slots the tree holds, in
    /// depth-first order, so the caller can check them against a pool.
    #[allow(clippy::too_many_lines)] // one pass per invariant family, easiest to audit together
    pub fn check(&self) -> Result<Vec<Slot>> {
        let p = self.page_size;
        // Arena: free list and live count.
        let mut on_free_list = vec![false; self.arena.nodes.len()];
        for &i in &self.arena.free {
            let i = i as usize;
            if i >= self.arena.nodes.len() || on_free_list[i] || !self.arena.nodes[i].is_free() {
                return fail(format!("arena: free-list entry {i} bad or repeated"));
            }
            on_free_list[i] = true;
        }
        let live = self.arena.nodes.iter().filter(|n| !n.is_free()).count();
        if live != self.arena.live || live + self.arena.free.len() != self.arena.nodes.len() {
            return fail(format!(
                "arena: {live} live nodes, counter {}, {} free of {}",
                self.arena.live,
                self.arena.free.len(),
                self.arena.nodes.len()
            ));
        }
        // Children from the edge map, chains followed.
        let mut children: FxHashMap<u32, Vec<u32>> = FxHashMap::default();
        for (&(parent, first), &head) in &self.edges {
            let mut c = head;
            let mut pages: Vec<&[i32]> = Vec::new();
            while c != NIL {
                let n = self.arena.nodes.get(c as usize);
                let Some(n) = n.filter(|n| !n.is_free() && !n.is_root()) else {
                    return fail(format!("edge ({parent}, {first}) leads to dead node {c}"));
                };
                if n.key().first() != Some(&first) || n.parent != parent {
                    return fail(format!("node {c}: filed under ({parent}, {first}) wrongly"));
                }
                let page = &n.key()[..p.min(n.len())];
                if pages.contains(&page) {
                    return fail(format!("node {c}: a sibling has the same first page"));
                }
                pages.push(page);
                children.entry(parent).or_default().push(c);
                c = n.next_sibling;
            }
        }
        // Roots.
        if self.roots.len() != self.root_ns.len() {
            return fail("namespace maps differ in size".into());
        }
        if self.roots.get(&b""[..]).copied().unwrap_or(NIL) != self.default_root {
            return fail(format!(
                "cached default root {} is not the default namespace's",
                self.default_root
            ));
        }
        for (ns, &r) in &self.roots {
            let ok = self
                .arena
                .nodes
                .get(r as usize)
                .is_some_and(|n| n.is_root() && !n.is_free());
            if !ok || self.root_ns.get(&r).map(|b| &**b) != Some(&**ns) {
                return fail(format!(
                    "namespace root {r} is not a live root or maps back wrongly"
                ));
            }
            if self.node(r).num_children == 0 {
                return fail(format!("namespace root {r} is empty but was not dropped"));
            }
        }
        // Depth-first from every root.
        let (mut evictable, mut protected, mut reached) = (0usize, 0usize, 0usize);
        let mut leaves = BTreeSet::new();
        let mut held = Vec::with_capacity(self.total_size());
        let mut stack: Vec<u32> = self.roots.values().copied().collect();
        let no_children = Vec::new();
        while let Some(i) = stack.pop() {
            reached += 1;
            let n = self.node(i);
            let kids = children.get(&i).unwrap_or(&no_children);
            if kids.len() != n.num_children as usize {
                return fail(format!(
                    "node {i}: num_children {} vs {}",
                    n.num_children,
                    kids.len()
                ));
            }
            let kid_locks: u64 = kids.iter().map(|&c| u64::from(self.node(c).lock_ref)).sum();
            if !n.is_root() {
                // A key shorter than a page is a partial-page leaf (partial.rs): no children.
                let partial_leaf = n.len() < p && n.num_children == 0;
                if n.value.len() != n.len()
                    || n.len() == 0
                    || !(n.len().is_multiple_of(p) || partial_leaf)
                {
                    return fail(format!("node {i}: key length {} (page_size {p})", n.len()));
                }
                if u64::from(n.lock_ref) != u64::from(n.direct_locks) + kid_locks {
                    return fail(format!(
                        "node {i}: lock_ref {} != direct {} + children's {kid_locks}",
                        n.lock_ref, n.direct_locks
                    ));
                }
                if n.last_access > self.clock || n.created > n.last_access {
                    return fail(format!("node {i}: created / last_access out of order"));
                }
                if !n.priority.is_finite() {
                    return fail(format!("node {i}: priority {}", n.priority));
                }
                self.check_hashes(i)?;
                if n.lock_ref == 0 {
                    evictable += n.len();
                } else {
                    protected += n.len();
                }
                if n.is_evictable_leaf() {
                    leaves.insert(self.policy.key(n, i));
                }
                held.extend_from_slice(n.value());
            } else if n.lock_ref != 0 || n.direct_locks != 0 || n.parent != NIL {
                return fail(format!(
                    "root {i}: lock_ref {} parent {}",
                    n.lock_ref, n.parent
                ));
            }
            for &c in kids {
                let cn = self.node(c);
                if !n.is_root() && (cn.last_access > n.last_access || cn.priority > n.priority) {
                    return fail(format!(
                        "node {c} accessed after its parent {i}, or of higher priority"
                    ));
                }
                stack.push(c);
            }
        }
        if reached != self.arena.live {
            return fail(format!(
                "{reached} nodes reachable, {} live",
                self.arena.live
            ));
        }
        if evictable != self.evictable || protected != self.protected {
            return fail(format!(
                "sizes: evictable {} / protected {} kept, {evictable} / {protected} recomputed",
                self.evictable, self.protected
            ));
        }
        if leaves != self.index {
            return fail(format!(
                "eviction index has {} entries, unlocked leaves are {}",
                self.index.len(),
                leaves.len()
            ));
        }
        if let Some(&s) = held.iter().find(|&&s| s < 0) {
            return fail(format!("negative slot {s} in the tree"));
        }
        Ok(held)
    }
}

impl RadixTree {
    /// With events on: node `i`'s page hashes are the chain from its namespace seed over the
    /// path's tokens (so splits kept them and nothing went stale).
    fn check_hashes(&self, i: u32) -> Result<()> {
        let Some(ev) = &self.events else {
            return Ok(());
        };
        let n = self.node(i);
        let parent = self.node(n.parent);
        let prev = if parent.is_root() {
            let ns = self
                .root_ns
                .get(&n.parent)
                .map(|b| &**b)
                .unwrap_or_default();
            namespace_seed(ns)
        } else {
            match ev.get(n.parent).last() {
                Some(&h) => h,
                None => return fail(format!("node {}: no page hashes", n.parent)),
            }
        };
        if *page_hashes(prev, n.key(), self.page_size) != *ev.get(i) {
            return fail(format!("node {i}: page hashes differ from the chain"));
        }
        Ok(())
    }
}
