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
use std::num::NonZeroUsize;

use rustc_hash::FxHashMap;

use super::events::{namespace_seed, page_hashes, EventLog, KvEvent};
use super::node::{Arena, Node, NodeHandle, NIL};
use super::policy::{IndexKey, Policy};
use super::token::TokenId;
use crate::error::{CoreError, Result};
use crate::slot::{Slot, SlotOut};

#[derive(Debug)]
pub struct RadixTree {
    pub(crate) page_size: usize,
    pub(crate) arena: Arena,
    /// (parent, first token of the child's key) -> child (head of a sibling chain).
    pub(crate) edges: FxHashMap<(u32, i32), u32>,
    pub(crate) roots: FxHashMap<Box<[u8]>, u32>,
    pub(crate) root_ns: FxHashMap<u32, Box<[u8]>>,
    /// `roots[b""]` (or `NIL`), cached: the default namespace is on every call's path and
    /// skips the byte-string hash.
    pub(crate) default_root: u32,
    pub(crate) policy: Policy,
    /// Unlocked leaves by the policy's sort key (policy.rs).
    pub(crate) index: BTreeSet<IndexKey>,
    /// Logical clock: one tick per match / insert.
    pub(crate) clock: u64,
    pub(crate) evictable: usize,
    pub(crate) protected: usize,
    /// Tokens evicted over the tree's life (a metric; `alloc` evicts on its own).
    pub(crate) evicted_total: u64,
    /// Reused scratch list of a path's nodes (`move_lock`).
    pub(crate) path_buf: Vec<u32>,
    /// Page hashes and pending events; `None` (no cost) unless events are on.
    pub(crate) events: Option<EventLog>,
    /// `SGLang`'s `RadixCache` bookkeeping: a match counts no hit; an insert counts one on
    /// every node of its path that ends beyond the request's `inserted_len` (and on its new
    /// leaf); a node split by a match or an insert is stamped whole (both halves get the
    /// access time). Off: a match counts a hit on its path, an insert none, and only the
    /// path is stamped.
    pub(crate) sglang_stamps: bool,
}

/// What `match_prefix` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixMatch {
    pub length: usize,
    pub slots: Vec<Slot>,
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

/// A read-only copy of one node: what a scheduler's debugging or an adapter's tree walk needs.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// The node above (`NodeHandle::ROOT` for a top-level node and for the root itself).
    pub parent: NodeHandle,
    /// Children, ordered by their first token (for the root: the top-level nodes of every
    /// namespace, by namespace then first token).
    pub children: Vec<NodeHandle>,
    /// This node's own edge: tokens and their slots.
    pub key: Vec<i32>,
    pub value: Vec<Slot>,
    /// Tokens from the namespace root to the end of this node.
    pub depth: usize,
    pub lock_ref: u32,
    pub last_access: u64,
    pub created: u64,
    pub hit_count: u32,
    pub priority: f64,
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

/// Whether any slot id is negative (the same vectorising fold as `any_negative`).
#[inline]
pub(crate) fn any_negative_slot<T: SlotOut>(v: &[T]) -> bool {
    !T::all_in(v, Slot::MAX)
}

impl RadixTree {
    /// An empty tree with LRU eviction and events off.
    pub fn new(page_size: NonZeroUsize) -> Self {
        Self::with_options(page_size, Policy::Lru, false)
    }

    pub fn with_options(page_size: NonZeroUsize, policy: Policy, events: bool) -> Self {
        Self {
            page_size: page_size.get(),
            arena: Arena::default(),
            edges: FxHashMap::default(),
            roots: FxHashMap::default(),
            root_ns: FxHashMap::default(),
            default_root: NIL,
            policy,
            index: BTreeSet::new(),
            clock: 0,
            evictable: 0,
            protected: 0,
            evicted_total: 0,
            path_buf: Vec::new(),
            events: events.then(EventLog::default),
            sglang_stamps: false,
        }
    }

    #[inline]
    pub(crate) fn node(&self, i: u32) -> &Node {
        self.arena.get(i)
    }

    #[inline]
    pub(crate) fn node_mut(&mut self, i: u32) -> &mut Node {
        self.arena.get_mut(i)
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
        self.arena.live
    }

    pub fn clock(&self) -> u64 {
        self.clock
    }

    pub fn events_enabled(&self) -> bool {
        self.events.is_some()
    }

    /// Drains the events recorded since the last call (empty when events are off).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.events
            .as_mut()
            .map(|e| std::mem::take(&mut e.pending))
            .unwrap_or_default()
    }

    /// Approximate heap bytes of the tree's bookkeeping: the arena, keys and values, the edge
    /// map, the namespace maps, the eviction index (B-tree nodes estimated at 1.5x their
    /// entries) and the page hashes when events are on.
    pub fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        let arena =
            self.arena.nodes.capacity() * size_of::<Node>() + self.arena.free.capacity() * 4;
        let data: usize = self
            .arena
            .nodes
            .iter()
            .map(|n| n.key.len() * 4 + n.value.len() * size_of::<Slot>())
            .sum();
        // hashbrown: one control byte per bucket, buckets = capacity * 8 / 7.
        let edges = (self.edges.capacity() * 8 / 7) * (size_of::<((u32, i32), u32)>() + 1);
        let roots: usize = self
            .roots
            .keys()
            .map(|k| 2 * k.len() + 2 * (size_of::<(Box<[u8]>, u32)>() + 1))
            .sum();
        let index = self.index.len() * size_of::<IndexKey>() * 3 / 2;
        let hashes = self.events.as_ref().map_or(0, |e| {
            e.hashes.capacity() * size_of::<Box<[u64]>>()
                + e.hashes.iter().map(|h| h.len() * 8).sum::<usize>()
        });
        arena + data + edges + roots + index + hashes
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
        match self.arena.nodes.get(h.idx as usize) {
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

    /// Read-only descent from `root` over `tokens` (whole pages; int32 or int64 ids).
    pub(crate) fn walk<T: TokenId>(&self, root: u32, tokens: &[T]) -> Walk {
        let p = self.page_size;
        let mut node = root;
        let mut pos = 0;
        while pos < tokens.len() {
            let Some(child) = self.find_child(node, &tokens[pos..pos + p]) else {
                break;
            };
            let key = self.node(child).key();
            let mut c = T::common_prefix(key, &tokens[pos..]);
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
    /// Both halves keep `x`'s access time, creation time, hit count and priority, so the split
    /// moves nothing in the eviction order; with events on, the page hashes are cut at the
    /// split and nothing is emitted (events.rs).
    pub(crate) fn split(&mut self, x: u32, at: usize) -> u32 {
        let xn = self.node(x);
        debug_assert!(at > 0 && at < xn.len() && at.is_multiple_of(self.page_size));
        let upper_key: Box<[i32]> = xn.key[..at].into();
        let upper_value: Box<[Slot]> = xn.value[..at].into();
        let lower_key: Box<[i32]> = xn.key[at..].into();
        let lower_value: Box<[Slot]> = xn.value[at..].into();
        let parent = xn.parent;
        let node = Node {
            lock_ref: xn.lock_ref,
            hit_count: xn.hit_count,
            created: xn.created,
            priority: xn.priority,
            num_children: 1,
            ..Node::new(upper_key, upper_value, parent, xn.last_access)
        };
        let u = self.arena.alloc(node);
        self.replace_child(parent, x, u);
        let xm = self.node_mut(x);
        xm.key = lower_key;
        xm.value = lower_value;
        xm.parent = u;
        xm.next_sibling = NIL;
        let first = xm.key[0];
        self.edges.insert((u, first), x);
        let pages = at / self.page_size;
        if let Some(ev) = &mut self.events {
            let h = ev.take(x);
            ev.set(u, h[..pages].into());
            ev.set(x, h[pages..].into());
        }
        u
    }

    /// Hit length only: no split, no clock tick, no LRU or hit-count change.
    pub fn peek_prefix<T: TokenId>(&self, ns: &[u8], tokens: &[T]) -> Result<usize> {
        let Some(root) = self.root_of(ns) else {
            T::check(tokens)?;
            return Ok(0);
        };
        let matched = self
            .walk(root, &tokens[..self.usable(tokens.len())])
            .matched;
        T::check(&tokens[matched..])?;
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
    pub fn match_end<T: TokenId>(
        &mut self,
        ns: &[u8],
        tokens: &[T],
    ) -> Result<(usize, NodeHandle)> {
        let Some(root) = self.root_of(ns) else {
            T::check(tokens)?;
            return Ok((0, NodeHandle::ROOT));
        };
        // The read-only walk comes first: matched tokens equal stored, non-negative int32
        // ones, so only the rest needs the checks (before anything changes).
        let w = self.walk(root, &tokens[..self.usable(tokens.len())]);
        T::check(&tokens[w.matched..])?;
        let (end, lower) = match w.partial {
            Some((child, at)) => (self.split(child, at), Some(child)),
            None => (w.node, None),
        };
        if end == root {
            return Ok((0, NodeHandle::ROOT));
        }
        self.clock += 1;
        let now = self.clock;
        let sg = self.sglang_stamps;
        if let Some(l) = lower.filter(|_| sg) {
            self.touch(l, now, false, None);
        }
        let mut i = end;
        while i != root {
            self.touch(i, now, !sg, None);
            i = self.node(i).parent;
        }
        Ok((w.matched, self.handle(end)))
    }

    /// Read-only part of an insert: how many leading tokens are present, and where.
    pub(crate) fn plan_insert<T: TokenId>(&self, ns: &[u8], tokens: &[T]) -> Option<Walk> {
        let root = self.root_of(ns)?;
        Some(self.walk(root, &tokens[..self.usable(tokens.len())]))
    }

    /// Mutating part of an insert; cannot fail. `plan` must come from `plan_insert` on the
    /// same, unchanged tree. Returns the number of leading tokens already present and the node
    /// where the inserted whole pages end (`NIL` for the empty path). With `split_end`, a path
    /// that was already present and ends inside a node splits it there, as `match_prefix`
    /// would, so the returned node is exactly the path end; without it no split is made and
    /// the returned node is meaningless in that case. Every node on the path gets the current
    /// time and `priority` if it is higher than its own.
    pub(crate) fn commit_insert(
        &mut self,
        ns: &[u8],
        plan: Option<Walk>,
        tokens: &[i32],
        slots: &[Slot],
        split_end: bool,
        (priority, inserted_len): (f64, usize),
    ) -> (usize, u32) {
        let usable = self.usable(tokens.len());
        let Some(w) = plan else {
            if usable == 0 {
                return (0, NIL);
            }
            // A namespace's first insert: its root is made here.
            self.clock += 1;
            let root = self.root_or_create(ns);
            let leaf = self.add_leaf(root, &tokens[..usable], &slots[..usable], priority);
            if self.sglang_stamps && usable > inserted_len {
                self.touch(leaf, self.clock, true, None);
            }
            return (0, leaf);
        };
        if w.matched == 0 && usable == 0 {
            return (0, NIL);
        }
        self.clock += 1;
        let now = self.clock;
        let mut at = w.node;
        let mut lower = None;
        if w.matched < usable {
            if let Some((child, c)) = w.partial {
                at = self.split(child, c);
                lower = Some(child);
            }
            at = self.add_leaf(
                at,
                &tokens[w.matched..usable],
                &slots[w.matched..usable],
                priority,
            );
        } else if let Some((child, c)) = w.partial {
            // Everything is present and ends inside `child`: split only if the caller wants
            // the exact path end.
            at = if split_end {
                lower = Some(child);
                self.split(child, c)
            } else {
                child
            };
        }
        let end = at;
        if !self.sglang_stamps {
            // The reused prefix counts as an access, as in match_prefix (but not as a hit).
            self.touch_to_root(at, now, priority);
            return (w.matched, end);
        }
        if let Some(l) = lower {
            self.touch(l, now, false, None);
        }
        // A hit on each node ending beyond what this request inserted before.
        let mut depth_end = if w.matched < usable {
            usable
        } else {
            self.depth(end)
        };
        while !self.node(at).is_root() {
            self.touch(at, now, depth_end > inserted_len, Some(priority));
            depth_end -= self.node(at).len();
            at = self.node(at).parent;
        }
        (w.matched, end)
    }

    /// What `commit_insert` does for a whole-page prefix `tokens[..b]` of a path an insert
    /// has just committed up to `end` (with `split_end`; `0 < b <= depth(end)`, `b` a
    /// multiple of the page size), found from `end` through parent links instead of a second
    /// descent: every token is present, so that insert adds nothing; it splits the node
    /// holding depth `b` there if `b` falls inside it, ticks the clock, touches the split's
    /// lower half (`sglang_stamps`), and touches every node from depth `b` up to the root
    /// with `priority` and no hit (an `inserted_len >= b` counts none).
    pub(crate) fn restamp_prefix(&mut self, end: u32, b: usize, priority: f64) {
        debug_assert!(b > 0 && b.is_multiple_of(self.page_size));
        let mut d = self.depth(end);
        debug_assert!(b <= d);
        let mut i = end;
        // climb to the node whose span (d - len, d] holds depth b
        while d - self.node(i).len() >= b {
            d -= self.node(i).len();
            i = self.node(i).parent;
        }
        self.clock += 1;
        let now = self.clock;
        let mut at = i;
        let mut lower = None;
        if d > b {
            let start = d - self.node(i).len();
            at = self.split(i, b - start);
            lower = Some(i);
        }
        if self.sglang_stamps {
            if let Some(l) = lower {
                self.touch(l, now, false, None);
            }
        }
        self.touch_to_root(at, now, priority);
    }

    /// Touches `at` and every node above it up to its root at `now` with `priority`, as an
    /// access that is not a hit.
    fn touch_to_root(&mut self, mut at: u32, now: u64, priority: f64) {
        while !self.node(at).is_root() {
            self.touch(at, now, false, Some(priority));
            at = self.node(at).parent;
        }
    }

    /// Adds a fresh unlocked leaf under `at` stamped with the current clock; returns it.
    fn add_leaf(&mut self, at: u32, key: &[i32], value: &[Slot], priority: f64) -> u32 {
        self.index_remove_if_leaf(at);
        let node = Node {
            priority,
            ..Node::new(key.into(), value.into(), at, self.clock)
        };
        let leaf = self.arena.alloc(node);
        self.add_child(at, leaf);
        self.evictable += key.len();
        self.index_add_if_leaf(leaf);
        if self.events.is_some() {
            self.record_store(at, leaf);
        }
        leaf
    }

    /// Hashes a new leaf's pages and queues their `Stored` event.
    fn record_store(&mut self, parent: u32, leaf: u32) {
        let p = self.page_size;
        let parent_is_root = self.node(parent).is_root();
        let ns: Vec<u8> = if parent_is_root {
            self.root_ns
                .get(&parent)
                .map(|b| b.to_vec())
                .unwrap_or_default()
        } else {
            let mut r = parent;
            while !self.node(r).is_root() {
                r = self.node(r).parent;
            }
            self.root_ns.get(&r).map(|b| b.to_vec()).unwrap_or_default()
        };
        let key = self.node(leaf).key.to_vec();
        let ev = self.events.as_mut().expect("events on");
        let prev = if parent_is_root {
            None
        } else {
            ev.get(parent).last().copied()
        };
        let seed = prev.unwrap_or_else(|| namespace_seed(&ns));
        let hashes = page_hashes(seed, &key, p);
        ev.pending.push(KvEvent::Stored {
            hashes: hashes.to_vec(),
            parent: prev,
            tokens: key,
            namespace: ns,
        });
        ev.set(leaf, hashes);
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
    pub fn insert(&mut self, ns: &[u8], tokens: &[i32], slots: &[Slot]) -> Result<usize> {
        let plan = self.checked_plan(ns, tokens, slots)?;
        Ok(self
            .commit_insert(ns, plan, tokens, slots, false, (0.0, 0))
            .0)
    }

    /// Validates an insert without a pool and plans it (read-only).
    fn checked_plan(&self, ns: &[u8], tokens: &[i32], slots: &[Slot]) -> Result<Option<Walk>> {
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
        slots: &[Slot],
    ) -> Result<(usize, NodeHandle)> {
        let plan = self.checked_plan(ns, tokens, slots)?;
        let (present, end) = self.commit_insert(ns, plan, tokens, slots, true, (0.0, 0));
        Ok((present, self.end_handle(end)))
    }

    /// `lock_ref` += 1 on the node and every ancestor below the namespace root. Returns the
    /// tokens that became protected (those of nodes whose `lock_ref` went from 0 to 1).
    pub fn lock(&mut self, h: NodeHandle) -> Result<usize> {
        let Some(i) = self.resolve(h)? else {
            return Ok(0);
        };
        self.node_mut(i).direct_locks += 1;
        Ok(self.lock_up(i, NIL))
    }

    /// `lock_ref` -= 1 on the node and every ancestor; `NotLocked` unless a `lock()` was taken
    /// through a handle naming this node and not yet released. Returns the tokens that became
    /// evictable again.
    pub fn unlock(&mut self, h: NodeHandle) -> Result<usize> {
        let Some(i) = self.resolve(h)? else {
            return Ok(0);
        };
        self.check_locked(i, h)?;
        self.node_mut(i).direct_locks -= 1;
        Ok(self.unlock_up(i, NIL))
    }

    /// `lock(to)` then `unlock(from)` in one step, as a scheduler moves a request's lock to the
    /// end of the path it just inserted; changes nothing if `unlock(from)` would fail. Above
    /// the two paths' lowest common node the +1 and -1 cancel, so only the nodes below it are
    /// visited (for a path that merely grew, just the new part). Returns the change in
    /// protected tokens.
    pub fn move_lock(&mut self, from: NodeHandle, to: NodeHandle) -> Result<isize> {
        let f = self.resolve(from)?;
        let t = self.resolve(to)?;
        if let Some(f) = f {
            self.check_locked(f, from)?;
        }
        let (f, t) = match (f, t) {
            (Some(f), Some(t)) => (f, t),
            (None, _) => return self.lock(to).map(|d| d as isize),
            (Some(_), None) => return self.unlock(from).map(|d| -(d as isize)),
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
        let up = self.lock_up(t, stop);
        let down = self.unlock_up(f, stop);
        Ok(up as isize - down as isize)
    }

    /// `Ok` exactly when `unlock(h)` would succeed now (the empty path always can); changes
    /// nothing. Lets a compound call check its lock step before its first mutation.
    pub fn check_unlockable(&self, h: NodeHandle) -> Result<()> {
        match self.resolve(h)? {
            Some(i) => self.check_locked(i, h),
            None => Ok(()),
        }
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

    /// `lock_ref` += 1 from `i` up to, not including, `stop` or the namespace root; returns
    /// the tokens moved from evictable to protected.
    fn lock_up(&mut self, mut i: u32, stop: u32) -> usize {
        let mut moved = 0;
        while i != stop && !self.node(i).is_root() {
            if self.node(i).lock_ref == 0 {
                self.index_remove_if_leaf(i);
                moved += self.node(i).len();
            }
            let n = self.node_mut(i);
            n.lock_ref += 1;
            i = n.parent;
        }
        self.evictable -= moved;
        self.protected += moved;
        moved
    }

    /// `lock_ref` -= 1 from `i` up to, not including, `stop` or the namespace root; returns
    /// the tokens moved from protected to evictable.
    fn unlock_up(&mut self, mut i: u32, stop: u32) -> usize {
        let mut moved = 0;
        while i != stop && !self.node(i).is_root() {
            let n = self.node_mut(i);
            n.lock_ref -= 1;
            let parent = n.parent;
            if n.lock_ref == 0 {
                moved += n.len();
                self.index_add_if_leaf(i);
            }
            i = parent;
        }
        self.evictable += moved;
        self.protected -= moved;
        moved
    }

    /// Evicts unlocked leaves in the policy's order until at least `num_tokens` tokens are
    /// freed or nothing evictable is left; whole leaves go, so it may free more. Appends the
    /// freed slots to `out`. A parent whose last child went becomes a candidate itself.
    pub fn evict_into(&mut self, num_tokens: usize, out: &mut Vec<Slot>) -> usize {
        self.evict_each(num_tokens, |v| out.extend_from_slice(v))
    }

    /// As `evict_into`, handing each evicted leaf's slots to `sink` (in eviction order).
    pub(crate) fn evict_each(&mut self, num_tokens: usize, mut sink: impl FnMut(&[Slot])) -> usize {
        let mut freed = 0;
        while freed < num_tokens {
            let Some(i) = self.index_pop() else { break };
            let n = self.node(i);
            let parent = n.parent;
            let len = n.len();
            sink(n.value());
            freed += len;
            self.evictable -= len;
            if let Some(ev) = &mut self.events {
                // A partial-page leaf has no whole page, so no hash a router knows.
                let hashes = ev.take(i).into_vec();
                if !hashes.is_empty() {
                    ev.pending.push(KvEvent::Removed { hashes });
                }
            }
            self.remove_child(parent, i);
            self.arena.retire(i);
            if self.node(parent).is_root() {
                self.drop_root_if_empty(parent);
            } else {
                self.index_add_if_leaf(parent);
            }
        }
        self.evicted_total += freed as u64;
        freed
    }

    /// Drops every node (handles go stale) and returns the slots the tree held; with events
    /// on, queues `AllCleared`. Refused, changing nothing, while any node is locked: a running
    /// request's path would vanish under it.
    pub fn reset(&mut self) -> Result<Vec<Slot>> {
        if self.protected > 0 {
            return Err(CoreError::invalid(format!(
                "reset: {} tokens are locked by running requests; unlock them first",
                self.protected
            )));
        }
        let mut out = Vec::with_capacity(self.total_size());
        for i in 0..self.arena.nodes.len() as u32 {
            let n = self.node(i);
            if n.is_free() {
                continue;
            }
            out.extend_from_slice(n.value());
            self.arena.retire(i);
        }
        self.edges.clear();
        self.roots.clear();
        self.root_ns.clear();
        self.default_root = NIL;
        self.index.clear();
        self.evictable = 0;
        if let Some(ev) = &mut self.events {
            ev.hashes.clear();
            ev.pending.push(KvEvent::AllCleared);
        }
        Ok(out)
    }

    /// Slots from the namespace root to the end named by `h` (empty for ROOT).
    pub fn path_slots(&self, h: NodeHandle) -> Result<Vec<Slot>> {
        let Some(end) = self.resolve(h)? else {
            return Ok(Vec::new());
        };
        let mut slots = vec![0; self.depth(end)];
        self.path_slots_into(h, &mut slots)?;
        Ok(slots)
    }

    /// Writes the path's slots into `out`, whose length must be the path's depth in tokens.
    /// Filled from the end upwards, so no list of the path's nodes is needed. For an int32
    /// `out` the caller has made sure every id fits.
    pub fn path_slots_into<T: SlotOut>(&self, h: NodeHandle, out: &mut [T]) -> Result<()> {
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
            copy_slots(&mut out[pos..pos + v.len()], v);
            i = n.parent;
        }
        Ok(())
    }

    /// Writes the first `out.len()` slots of the path into `out` (at most the path's depth):
    /// what `path_slots_into` writes, cut, without gathering the rest.
    pub fn path_prefix_slots_into<T: SlotOut>(&self, h: NodeHandle, out: &mut [T]) -> Result<()> {
        let depth = match self.resolve(h)? {
            Some(end) => self.depth(end),
            None => 0,
        };
        let n = out.len();
        if n > depth {
            return Err(CoreError::invalid(format!(
                "path_prefix_slots_into: {n} slots asked of a path of {depth} tokens"
            )));
        }
        let mut i = h.idx;
        let mut pos = depth;
        while pos > 0 {
            let node = self.node(i);
            let v = node.value();
            let start = pos - v.len();
            if start < n {
                let end = pos.min(n);
                copy_slots(&mut out[start..end], &v[..end - start]);
            }
            pos = start;
            i = node.parent;
        }
        Ok(())
    }

    /// Tokens from the namespace root to the end of node `i`.
    pub(crate) fn depth(&self, mut i: u32) -> usize {
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
        Ok(NodeInfo {
            length: n.len(),
            depth: self.depth(i),
            lock_ref: n.lock_ref,
            last_access: n.last_access,
            hit_count: n.hit_count,
            num_children: n.num_children,
        })
    }

    /// A copy of one node with its parent and children. Listing children scans the edge map
    /// (O(edges)): for inspection and tests, not for a scheduler's hot path.
    pub fn node_view(&self, h: NodeHandle) -> Result<NodeView> {
        let me = self.resolve(h)?;
        let mut kids: Vec<(Vec<u8>, i32, u32)> = Vec::new();
        for (&(parent, first), &head) in &self.edges {
            let hit = match me {
                Some(i) => parent == i,
                None => self.node(parent).is_root(),
            };
            if !hit {
                continue;
            }
            let ns = match me {
                Some(_) => Vec::new(),
                None => self
                    .root_ns
                    .get(&parent)
                    .map(|b| b.to_vec())
                    .unwrap_or_default(),
            };
            let mut c = head;
            while c != NIL {
                kids.push((ns.clone(), first, c));
                c = self.node(c).next_sibling;
            }
        }
        kids.sort_by(|a, b| {
            (&a.0, a.1, self.node(a.2).key()).cmp(&(&b.0, b.1, self.node(b.2).key()))
        });
        let children = kids.into_iter().map(|(_, _, c)| self.handle(c)).collect();
        let Some(i) = me else {
            return Ok(NodeView {
                parent: NodeHandle::ROOT,
                children,
                key: Vec::new(),
                value: Vec::new(),
                depth: 0,
                lock_ref: 0,
                last_access: 0,
                created: 0,
                hit_count: 0,
                priority: 0.0,
            });
        };
        let n = self.node(i);
        Ok(NodeView {
            parent: self.end_handle(n.parent),
            children,
            key: n.key.to_vec(),
            value: n.value.to_vec(),
            depth: self.depth(i),
            lock_ref: n.lock_ref,
            last_access: n.last_access,
            created: n.created,
            hit_count: n.hit_count,
            priority: n.priority,
        })
    }
}

/// `dst[k] = T::from_slot(src[k])` (equal lengths), in fixed-size chunks that give LLVM a
/// loop of known length to vectorise (a plain zip loop ran one id at a time; this copy is
/// a large part of a long match's work).
#[inline]
pub(crate) fn copy_slots<T: SlotOut>(dst: &mut [T], src: &[Slot]) {
    const CHUNK: usize = 16;
    debug_assert_eq!(dst.len(), src.len());
    let mut d = dst.chunks_exact_mut(CHUNK);
    let mut s = src.chunks_exact(CHUNK);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let sc: &[Slot; CHUNK] = sc.try_into().expect("a whole chunk");
        let dc: &mut [T; CHUNK] = dc.try_into().expect("a whole chunk");
        for k in 0..CHUNK {
            dc[k] = T::from_slot(sc[k]);
        }
    }
    for (o, &x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = T::from_slot(x);
    }
}

/// `dst[k] = src[k].to_slot()` (equal lengths), in chunks as `copy_slots`.
#[inline]
pub(crate) fn widen_slots<T: SlotOut>(dst: &mut [Slot], src: &[T]) {
    const CHUNK: usize = 16;
    debug_assert_eq!(dst.len(), src.len());
    let mut d = dst.chunks_exact_mut(CHUNK);
    let mut s = src.chunks_exact(CHUNK);
    for (dc, sc) in (&mut d).zip(&mut s) {
        let sc: &[T; CHUNK] = sc.try_into().expect("a whole chunk");
        let dc: &mut [Slot; CHUNK] = dc.try_into().expect("a whole chunk");
        for k in 0..CHUNK {
            dc[k] = sc[k].to_slot();
        }
    }
    for (o, &x) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *o = x.to_slot();
    }
}

/// Tokens already present according to a plan (none without a namespace root).
pub(crate) fn plan_matched(plan: Option<&Walk>) -> usize {
    plan.map_or(0, |w| w.matched)
}

pub(crate) fn check_lengths<K, T>(tokens: &[K], slots: &[T]) -> Result<()> {
    if tokens.len() != slots.len() {
        return Err(CoreError::invalid(format!(
            "insert: {} tokens but {} slots",
            tokens.len(),
            slots.len()
        )));
    }
    Ok(())
}

pub(crate) fn check_slots_nonneg<T: SlotOut>(slots: &[T]) -> Result<()> {
    if any_negative_slot(slots) {
        let s = slots
            .iter()
            .map(|&s| s.to_slot())
            .find(|&s| s < 0)
            .expect("a negative value exists");
        return Err(CoreError::invalid(format!("insert: negative slot id {s}")));
    }
    Ok(())
}

/// A priority must be finite: it is compared, and NaN has no place in an order.
pub(crate) fn check_priority(p: f64) -> Result<f64> {
    if !p.is_finite() {
        return Err(CoreError::invalid(format!(
            "priority: must be a finite number, got {p}"
        )));
    }
    // -0.0 and 0.0 compare equal but order apart in the index; keep one of them.
    Ok(p + 0.0)
}
