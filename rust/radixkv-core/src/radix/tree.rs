//! `RadixTree`: the prefix tree itself, slot-agnostic (values are opaque non-negative ids).
//! `RadixCache` (cache.rs) puts a `TokenPool` behind it.
//!
//! Invariants (all verified by `check`):
//! - every non-root node has a non-empty key, a multiple of `page_size` long, and a value of the
//!   same length; siblings never share a first page;
//! - `lock_ref(n) = direct_locks(n) + sum of lock_ref over n's children`, where `direct_locks`
//!   counts `lock()` calls through a handle naming n itself; `unlock()` needs one of those, so a
//!   handle cannot release a lock taken through a deeper one;
//! - `parent.last_access >= child.last_access` (an access touches the whole path);
//! - evictable/protected sizes equal the token counts of nodes with `lock_ref` == 0 / > 0;
//! - the LRU index is exactly the set of unlocked leaves.
//!
//! Path compression: an insert adds at most one node per call and splits only where a key
//! diverges, so a fresh tree is fully compressed. A node may later keep a single child (its
//! other children were evicted); it is *not* merged with that child, because merging would
//! retire a handle a running request may hold. Such chains are legal and `check` allows them.

use std::collections::BTreeSet;

use rustc_hash::FxHashMap;

use super::node::{pack, Node, NodeHandle, NIL};
use crate::error::{CoreError, Result};

#[derive(Debug)]
pub struct RadixTree {
    pub(crate) page_size: usize,
    pub(crate) nodes: Vec<Node>,
    pub(crate) free_nodes: Vec<u32>,
    pub(crate) live_nodes: usize,
    /// (parent, first token of the child's key) -> child (head of a sibling chain).
    pub(crate) edges: FxHashMap<(u32, i32), u32>,
    pub(crate) roots: FxHashMap<Box<[u8]>, u32>,
    pub(crate) root_ns: FxHashMap<u32, Box<[u8]>>,
    /// `roots[b""]` (or `NIL`), cached: the default namespace is on every call's path and
    /// skips the byte-string hash.
    pub(crate) default_root: u32,
    /// Unlocked leaves by (`last_access`, id).
    pub(crate) lru: BTreeSet<(u64, u32)>,
    /// Logical clock: one tick per match / insert.
    pub(crate) clock: u64,
    pub(crate) evictable: usize,
    pub(crate) protected: usize,
    /// Tokens evicted over the tree's life (a metric; `alloc` evicts on its own).
    pub(crate) evicted_total: u64,
    /// Reused scratch list of a path's nodes (`move_lock`).
    pub(crate) path_buf: Vec<u32>,
}

/// What `match_prefix` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMatch {
    pub length: usize,
    pub slots: Vec<i32>,
    pub node: NodeHandle,
}

/// Per-node facts for tests and debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInfo {
    /// Tokens on this node's own edge.
    pub length: usize,
    /// Tokens from the root to the end of this node.
    pub depth: usize,
    pub lock_ref: u32,
    pub last_access: u64,
    pub hit_count: u32,
    pub num_children: u32,
}

/// Result of a read-only descent.
pub(crate) struct Walk {
    /// Deepest node whose whole key matched (the namespace root if none did).
    pub(crate) node: u32,
    /// Tokens matched, including a partial match into `partial`'s key.
    pub(crate) matched: usize,
    /// (child, tokens of its key matched) when the match ends strictly inside that child.
    pub(crate) partial: Option<(u32, usize)>,
}

/// Length of the common prefix of two slices. Keys usually match whole (only the last node of
/// a path diverges), so one `memcmp` over the whole range decides most calls; otherwise blocks
/// narrow down the first difference.
#[inline]
pub(crate) fn common_prefix(a: &[i32], b: &[i32]) -> usize {
    const BLOCK: usize = 64;
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    if a == b {
        return n;
    }
    let mut i = 0;
    while i + BLOCK <= n && a[i..i + BLOCK] == b[i..i + BLOCK] {
        i += BLOCK;
    }
    while i < n && a[i] == b[i] {
        i += 1;
    }
    i
}

/// True if any value is negative. An OR of all values has the sign bit set exactly then; the
/// fold has no early exit, so it vectorises (an `iter().find` stays scalar: it was most of a
/// long `match_prefix`). Callers `find` the offender only on failure, to name it.
#[inline]
pub(crate) fn any_negative(v: &[i32]) -> bool {
    v.iter().fold(0i32, |acc, &x| acc | x) < 0
}

pub(crate) fn check_tokens(tokens: &[i32]) -> Result<()> {
    if any_negative(tokens) {
        let t = tokens
            .iter()
            .find(|&&t| t < 0)
            .expect("a negative value exists");
        return Err(CoreError::invalid(format!("tokens: negative token id {t}")));
    }
    Ok(())
}

impl RadixTree {
    pub fn new(page_size: usize) -> Result<Self> {
        if page_size == 0 {
            return Err(CoreError::invalid("page_size must be >= 1"));
        }
        Ok(Self {
            page_size,
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            live_nodes: 0,
            edges: FxHashMap::default(),
            roots: FxHashMap::default(),
            root_ns: FxHashMap::default(),
            default_root: NIL,
            lru: BTreeSet::new(),
            clock: 0,
            evictable: 0,
            protected: 0,
            evicted_total: 0,
            path_buf: Vec::new(),
        })
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    pub fn evictable_size(&self) -> usize {
        self.evictable
    }

    pub fn protected_size(&self) -> usize {
        self.protected
    }

    pub fn total_size(&self) -> usize {
        self.evictable + self.protected
    }

    /// Tokens evicted since the tree was made, by `evict` and by a pooled `alloc`.
    pub fn evicted_tokens(&self) -> u64 {
        self.evicted_total
    }

    /// Live nodes, namespace roots included.
    pub fn num_nodes(&self) -> usize {
        self.live_nodes
    }

    pub fn clock(&self) -> u64 {
        self.clock
    }

    /// Approximate heap bytes of the tree's bookkeeping: the arena, keys and values, the edge
    /// map, the namespace maps and the LRU index (B-tree nodes estimated at 1.5x their entries).
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let arena = self.nodes.capacity() * size_of::<Node>() + self.free_nodes.capacity() * 4;
        let data: usize = self.nodes.iter().map(|n| n.data.len() * 4).sum();
        // hashbrown: one control byte per bucket, buckets = capacity * 8 / 7.
        let edges = (self.edges.capacity() * 8 / 7) * (size_of::<((u32, i32), u32)>() + 1);
        let roots: usize = self
            .roots
            .keys()
            .map(|k| 2 * k.len() + 2 * (size_of::<(Box<[u8]>, u32)>() + 1))
            .sum();
        let lru = self.lru.len() * size_of::<(u64, u32)>() * 3 / 2;
        arena + data + edges + roots + lru
    }

    /// Tokens usable for matching / inserting: whole pages only.
    pub(crate) fn usable(&self, n: usize) -> usize {
        n - n % self.page_size
    }

    /// Resolves a handle to a live, non-root node; `Ok(None)` for `NodeHandle::ROOT`.
    pub(crate) fn resolve(&self, h: NodeHandle) -> Result<Option<u32>> {
        if h.is_root() {
            return Ok(None);
        }
        match self.nodes.get(h.idx as usize) {
            Some(n) if n.gen == h.gen && !n.is_free() && !n.is_root() => Ok(Some(h.idx)),
            _ => Err(CoreError::StaleHandle(format!(
                "node ({}, gen {}) was evicted",
                h.idx, h.gen
            ))),
        }
    }

    pub(crate) fn handle(&self, i: u32) -> NodeHandle {
        NodeHandle {
            idx: i,
            gen: self.node(i).gen,
        }
    }

    /// Read-only descent from `root` over `tokens` (whole pages).
    pub(crate) fn walk(&self, root: u32, tokens: &[i32]) -> Walk {
        let p = self.page_size;
        let mut node = root;
        let mut pos = 0;
        while pos < tokens.len() {
            let Some(child) = self.find_child(node, &tokens[pos..pos + p]) else {
                break;
            };
            let key = self.node(child).key();
            let mut c = common_prefix(key, &tokens[pos..]);
            c -= c % p;
            if c < key.len() {
                return Walk {
                    node,
                    matched: pos + c,
                    partial: Some((child, c)),
                };
            }
            pos += key.len();
            node = child;
        }
        Walk {
            node,
            matched: pos,
            partial: None,
        }
    }

    /// Splits `x` after `at` tokens. The new node is the upper half; `x` keeps its id, its
    /// children, its locks and its handles as the lower half (the same path end as before).
    pub(crate) fn split(&mut self, x: u32, at: usize) -> u32 {
        let xn = self.node(x);
        debug_assert!(at > 0 && at < xn.len() && at.is_multiple_of(self.page_size));
        let (key, value) = (xn.key(), xn.value());
        let upper = pack(&key[..at], &value[..at]);
        let lower = pack(&key[at..], &value[at..]);
        let parent = xn.parent;
        let node = Node {
            lock_ref: xn.lock_ref,
            hit_count: xn.hit_count,
            num_children: 1,
            ..Self::new_node(upper, parent, xn.last_access)
        };
        let u = self.alloc_node(node);
        self.replace_child(parent, x, u);
        let xm = self.node_mut(x);
        xm.data = lower;
        xm.parent = u;
        xm.next_sibling = NIL;
        let first = xm.data[0];
        self.edges.insert((u, first), x);
        u
    }

    /// Hit length only: no split, no clock tick, no LRU or hit-count change.
    pub fn peek_prefix(&self, ns: &[u8], tokens: &[i32]) -> Result<usize> {
        let Some(root) = self.root_of(ns) else {
            check_tokens(tokens)?;
            return Ok(0);
        };
        let matched = self
            .walk(root, &tokens[..self.usable(tokens.len())])
            .matched;
        check_tokens(&tokens[matched..])?;
        Ok(matched)
    }

    /// Longest cached prefix, in whole pages. A match ending inside a node splits it there.
    /// Every node on the matched path gets the current time and one more hit.
    pub fn match_prefix(&mut self, ns: &[u8], tokens: &[i32]) -> Result<PrefixMatch> {
        let (length, node) = self.match_end(ns, tokens)?;
        let mut slots = vec![0; length];
        self.path_slots_into(node, &mut slots)?;
        Ok(PrefixMatch {
            length,
            slots,
            node,
        })
    }

    /// `match_prefix` without gathering the slots: the hit length and the path end (with the
    /// same split, clock tick, touches and hit counts). `path_slots_into` gathers them.
    pub fn match_end(&mut self, ns: &[u8], tokens: &[i32]) -> Result<(usize, NodeHandle)> {
        let Some(root) = self.root_of(ns) else {
            check_tokens(tokens)?;
            return Ok((0, NodeHandle::ROOT));
        };
        // The read-only walk comes first: matched tokens equal stored, non-negative ones, so
        // only the rest needs the sign check (before anything changes).
        let w = self.walk(root, &tokens[..self.usable(tokens.len())]);
        check_tokens(&tokens[w.matched..])?;
        let end = match w.partial {
            Some((child, at)) => self.split(child, at),
            None => w.node,
        };
        if end == root {
            return Ok((0, NodeHandle::ROOT));
        }
        self.clock += 1;
        let now = self.clock;
        let mut i = end;
        while i != root {
            self.touch(i, now);
            let n = self.node_mut(i);
            n.hit_count = n.hit_count.saturating_add(1);
            i = n.parent;
        }
        Ok((w.matched, self.handle(end)))
    }

    /// Read-only part of an insert: how many leading tokens are present, and where.
    pub(crate) fn plan_insert(&self, ns: &[u8], tokens: &[i32]) -> Option<Walk> {
        let root = self.root_of(ns)?;
        Some(self.walk(root, &tokens[..self.usable(tokens.len())]))
    }

    /// Mutating part of an insert; cannot fail. `plan` must come from `plan_insert` on the
    /// same, unchanged tree. Returns the number of leading tokens already present and the node
    /// where the inserted whole pages end (`NIL` for the empty path). With `split_end`, a path
    /// that was already present and ends inside a node splits it there, as `match_prefix`
    /// would, so the returned node is exactly the path end; without it no split is made and
    /// the returned node is meaningless in that case.
    pub(crate) fn commit_insert(
        &mut self,
        ns: &[u8],
        plan: Option<Walk>,
        tokens: &[i32],
        slots: &[i32],
        split_end: bool,
    ) -> (usize, u32) {
        let usable = self.usable(tokens.len());
        let Some(w) = plan else {
            if usable == 0 {
                return (0, NIL);
            }
            // A namespace's first insert: its root is made here.
            self.clock += 1;
            let root = self.root_or_create(ns);
            let leaf = self.add_leaf(root, &tokens[..usable], &slots[..usable]);
            return (0, leaf);
        };
        if w.matched == 0 && usable == 0 {
            return (0, NIL);
        }
        self.clock += 1;
        let now = self.clock;
        let mut at = w.node;
        if w.matched < usable {
            if let Some((child, c)) = w.partial {
                at = self.split(child, c);
            }
            at = self.add_leaf(at, &tokens[w.matched..usable], &slots[w.matched..usable]);
        } else if let Some((child, c)) = w.partial {
            // Everything is present and ends inside `child`: split only if the caller wants
            // the exact path end.
            at = if split_end {
                self.split(child, c)
            } else {
                child
            };
        }
        let end = at;
        // The reused prefix counts as an access, as in match_prefix.
        while !self.node(at).is_root() {
            self.touch(at, now);
            at = self.node(at).parent;
        }
        (w.matched, end)
    }

    /// Adds a fresh unlocked leaf under `at` stamped with the current clock; returns it.
    fn add_leaf(&mut self, at: u32, key: &[i32], value: &[i32]) -> u32 {
        self.lru_remove_if_leaf(at);
        let leaf = self.alloc_node(Self::new_node(pack(key, value), at, self.clock));
        self.add_child(at, leaf);
        self.evictable += key.len();
        self.lru_add_if_leaf(leaf);
        leaf
    }

    /// The handle of an end returned by `commit_insert` (`NIL`: the empty path).
    pub(crate) fn end_handle(&self, end: u32) -> NodeHandle {
        if end == NIL || self.node(end).is_root() {
            NodeHandle::ROOT
        } else {
            self.handle(end)
        }
    }

    /// Inserts without any slot validation beyond non-negativity (caller-owned slots).
    pub fn insert(&mut self, ns: &[u8], tokens: &[i32], slots: &[i32]) -> Result<usize> {
        let plan = self.checked_plan(ns, tokens, slots)?;
        Ok(self.commit_insert(ns, plan, tokens, slots, false).0)
    }

    /// Validates an insert without a pool and plans it (read-only).
    fn checked_plan(&self, ns: &[u8], tokens: &[i32], slots: &[i32]) -> Result<Option<Walk>> {
        check_lengths(tokens, slots)?;
        let plan = self.plan_insert(ns, tokens);
        check_tokens(&tokens[plan_matched(plan.as_ref())..])?;
        check_slots_nonneg(slots)?;
        Ok(plan)
    }

    /// As `insert`, also returning the node where the inserted whole pages end (splitting a
    /// node the path ends inside, as `match_prefix` does): what a scheduler locks next,
    /// without a second descent. `NodeHandle::ROOT` when no whole page was given.
    pub fn insert_node(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[i32],
    ) -> Result<(usize, NodeHandle)> {
        let plan = self.checked_plan(ns, tokens, slots)?;
        let (present, end) = self.commit_insert(ns, plan, tokens, slots, true);
        Ok((present, self.end_handle(end)))
    }

    /// `lock_ref` += 1 on the node and every ancestor below the namespace root.
    pub fn lock(&mut self, h: NodeHandle) -> Result<()> {
        let Some(i) = self.resolve(h)? else {
            return Ok(());
        };
        self.node_mut(i).direct_locks += 1;
        self.lock_up(i, NIL);
        Ok(())
    }

    /// `lock_ref` -= 1 on the node and every ancestor; `NotLocked` unless a `lock()` was taken
    /// through a handle naming this node and not yet released.
    pub fn unlock(&mut self, h: NodeHandle) -> Result<()> {
        let Some(i) = self.resolve(h)? else {
            return Ok(());
        };
        self.check_locked(i, h)?;
        self.node_mut(i).direct_locks -= 1;
        self.unlock_up(i, NIL);
        Ok(())
    }

    /// `lock(to)` then `unlock(from)` in one step, as a scheduler moves a request's lock to the
    /// end of the path it just inserted; changes nothing if `unlock(from)` would fail. Above
    /// the two paths' lowest common node the +1 and -1 cancel, so only the nodes below it are
    /// visited (for a path that merely grew, just the new part).
    pub fn move_lock(&mut self, from: NodeHandle, to: NodeHandle) -> Result<()> {
        let f = self.resolve(from)?;
        let t = self.resolve(to)?;
        if let Some(f) = f {
            self.check_locked(f, from)?;
        }
        let (f, t) = match (f, t) {
            (Some(f), Some(t)) => (f, t),
            (None, _) => return self.lock(to),
            (Some(_), None) => return self.unlock(from),
        };
        self.node_mut(t).direct_locks += 1;
        self.node_mut(f).direct_locks -= 1;
        // `from`'s path (itself included), then the first node of `to`'s path on it.
        let mut on_path = std::mem::take(&mut self.path_buf);
        on_path.clear();
        let mut i = f;
        while !self.node(i).is_root() {
            on_path.push(i);
            i = self.node(i).parent;
        }
        let mut stop = t;
        while !self.node(stop).is_root() && !on_path.contains(&stop) {
            stop = self.node(stop).parent;
        }
        self.path_buf = on_path;
        // Another namespace: `stop` is `to`'s root, which `from`'s walk never meets; both
        // walks then end at their own roots.
        self.lock_up(t, stop);
        self.unlock_up(f, stop);
        Ok(())
    }

    fn check_locked(&self, i: u32, h: NodeHandle) -> Result<()> {
        if self.node(i).direct_locks == 0 {
            return Err(CoreError::NotLocked(format!(
                "node ({}, gen {}) has no lock taken through this handle",
                h.idx, h.gen
            )));
        }
        Ok(())
    }

    /// `lock_ref` += 1 from `i` up to, not including, `stop` or the namespace root.
    fn lock_up(&mut self, mut i: u32, stop: u32) {
        while i != stop && !self.node(i).is_root() {
            if self.node(i).lock_ref == 0 {
                self.lru_remove_if_leaf(i);
                let len = self.node(i).len();
                self.evictable -= len;
                self.protected += len;
            }
            let n = self.node_mut(i);
            n.lock_ref += 1;
            i = n.parent;
        }
    }

    /// `lock_ref` -= 1 from `i` up to, not including, `stop` or the namespace root.
    fn unlock_up(&mut self, mut i: u32, stop: u32) {
        while i != stop && !self.node(i).is_root() {
            let n = self.node_mut(i);
            n.lock_ref -= 1;
            let parent = n.parent;
            if n.lock_ref == 0 {
                let len = n.len();
                self.evictable += len;
                self.protected -= len;
                self.lru_add_if_leaf(i);
            }
            i = parent;
        }
    }

    /// Evicts least recently used unlocked leaves until at least `num_tokens` tokens are freed
    /// or nothing evictable is left; whole leaves go, so it may free more. Appends the freed
    /// slots to `out`. A parent whose last child went becomes a candidate itself.
    pub fn evict_into(&mut self, num_tokens: usize, out: &mut Vec<i32>) -> usize {
        self.evict_each(num_tokens, |v| out.extend_from_slice(v))
    }

    /// As `evict_into`, handing each evicted leaf's slots to `sink` (in eviction order).
    pub(crate) fn evict_each(&mut self, num_tokens: usize, mut sink: impl FnMut(&[i32])) -> usize {
        let mut freed = 0;
        while freed < num_tokens {
            let Some(i) = self.lru_pop() else { break };
            let n = self.node(i);
            let parent = n.parent;
            let len = n.len();
            sink(n.value());
            freed += len;
            self.evictable -= len;
            self.remove_child(parent, i);
            self.retire_node(i);
            if self.node(parent).is_root() {
                self.drop_root_if_empty(parent);
            } else {
                self.lru_add_if_leaf(parent);
            }
        }
        self.evicted_total += freed as u64;
        freed
    }

    /// Slots from the namespace root to the end named by `h` (empty for ROOT).
    pub fn path_slots(&self, h: NodeHandle) -> Result<Vec<i32>> {
        let Some(end) = self.resolve(h)? else {
            return Ok(Vec::new());
        };
        let mut slots = vec![0; self.depth(end)];
        self.path_slots_into(h, &mut slots)?;
        Ok(slots)
    }

    /// Writes the path's slots into `out`, whose length must be the path's depth in tokens.
    /// Filled from the end upwards, so no list of the path's nodes is needed.
    pub fn path_slots_into(&self, h: NodeHandle, out: &mut [i32]) -> Result<()> {
        let depth = match self.resolve(h)? {
            Some(end) => self.depth(end),
            None => 0,
        };
        if out.len() != depth {
            return Err(CoreError::invalid(format!(
                "path_slots_into: buffer of {} for a path of {depth} tokens",
                out.len()
            )));
        }
        let mut i = h.idx;
        let mut pos = depth;
        while pos > 0 {
            let n = self.node(i);
            let v = n.value();
            pos -= v.len();
            out[pos..pos + v.len()].copy_from_slice(v);
            i = n.parent;
        }
        Ok(())
    }

    /// Tokens from the namespace root to the end of node `i`.
    fn depth(&self, mut i: u32) -> usize {
        let mut depth = 0;
        while !self.node(i).is_root() {
            depth += self.node(i).len();
            i = self.node(i).parent;
        }
        depth
    }

    pub fn node_info(&self, h: NodeHandle) -> Result<NodeInfo> {
        let Some(i) = self.resolve(h)? else {
            return Ok(NodeInfo {
                length: 0,
                depth: 0,
                lock_ref: 0,
                last_access: 0,
                hit_count: 0,
                num_children: 0,
            });
        };
        let n = self.node(i);
        let mut depth = 0;
        let mut j = i;
        while !self.node(j).is_root() {
            depth += self.node(j).len();
            j = self.node(j).parent;
        }
        Ok(NodeInfo {
            length: n.len(),
            depth,
            lock_ref: n.lock_ref,
            last_access: n.last_access,
            hit_count: n.hit_count,
            num_children: n.num_children,
        })
    }
}

/// Tokens already present according to a plan (none without a namespace root).
pub(crate) fn plan_matched(plan: Option<&Walk>) -> usize {
    plan.map_or(0, |w| w.matched)
}

pub(crate) fn check_lengths(tokens: &[i32], slots: &[i32]) -> Result<()> {
    if tokens.len() != slots.len() {
        return Err(CoreError::invalid(format!(
            "insert: {} tokens but {} slots",
            tokens.len(),
            slots.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_slots_nonneg(slots: &[i32]) -> Result<()> {
    if any_negative(slots) {
        let s = slots
            .iter()
            .find(|&&s| s < 0)
            .expect("a negative value exists");
        return Err(CoreError::invalid(format!("insert: negative slot id {s}")));
    }
    Ok(())
}
