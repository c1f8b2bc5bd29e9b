//! Operations on a `RadixCache` with a pool, and a harness that replays them against a naive
//! reference model. Shared by the proptest state machine (`proptests.rs`) and the cargo-fuzz
//! target (`fuzz/fuzz_targets/radix_ops.rs`), so both explore the same op space.
//!
//! The model is a map (namespace, page-aligned prefix) -> slots of that prefix's last page, the
//! set of node ends (paths where a node of the tree ends, with their last access on a logical
//! clock), and the direct locks per handle. It replays the cache's rules: a match or insert
//! ending inside a node splits it, an access stamps the whole path, eviction takes the unlocked
//! leaf of oldest access, whole, only until enough tokens are freed. From that it predicts what
//! a caller sees (match / peek lengths and slots, insert's return value, the exact slots each
//! eviction frees, which unlocks fail, which handles are stale, sizes) and the whole `dump()`
//! but hit counts, and that every failing call changed nothing. Nothing is read back from the
//! cache to update it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::cache::{lock_pool, shared_pool, CacheOptions, DumpRow, RadixCache, SharedPool};
use super::node::NodeHandle;
use super::policy::Policy;
use crate::error::CoreError;
use crate::pool::{SlotState, TokenPool};
use crate::slot::Slot;

/// A token sequence described relative to earlier ones, so that generated sequences share
/// prefixes (and splits happen): the first `keep` tokens of history entry `base`, then `tail`
/// over a 3-letter alphabet.
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone)]
pub struct Seq {
    pub base: u8,
    pub keep: u8,
    pub tail: Vec<u8>,
}

#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
#[derive(Debug, Clone)]
pub enum RadixOp {
    Match {
        ns: u8,
        seq: Seq,
    },
    Peek {
        ns: u8,
        seq: Seq,
    },
    /// Allocates slots for the whole sequence, inserts, frees the duplicates and the tail.
    Insert {
        ns: u8,
        seq: Seq,
    },
    /// Inserts with slots that are not allocated: must fail and change nothing.
    InsertForeign {
        ns: u8,
        seq: Seq,
    },
    Lock {
        handle: u8,
    },
    Unlock {
        handle: u8,
    },
    PathSlots {
        handle: u8,
    },
    Evict {
        tokens: u8,
    },
    Alloc {
        pages: u8,
    },
    Free {
        which: u8,
    },
    /// Frees a slot the tree holds: must fail with `DoubleFree` and change nothing.
    FreeCached {
        pick: u8,
    },
}

const NAMESPACES: [&[u8]; 3] = [b"", b"a", b"b"];
const MAX_LEN: usize = 48;

struct HandleModel {
    ns: usize,
    handle: NodeHandle,
    path: Vec<i32>,
    /// Retired by an eviction (see `model_evict`).
    dead: bool,
}

pub struct Harness {
    pub cache: RadixCache,
    pool: SharedPool,
    page: usize,
    history: Vec<Vec<i32>>,
    handles: Vec<HandleModel>,
    locks: HashMap<NodeHandle, u32>,
    outstanding: Vec<Vec<Slot>>,
    model: BTreeMap<(usize, Vec<i32>), Vec<Slot>>,
    /// Node ends -> last access (the model's clock).
    ends: BTreeMap<(usize, Vec<i32>), u64>,
    clock: u64,
    /// Eviction order: the model predicts LRU's; under another policy it learns which pages an
    /// eviction took from the pool (`learn_evictions`), and checks everything else.
    policy: Policy,
    /// Operations applied, for reports.
    pub ops: u64,
    /// What the ops exercised, so tests can show the generators reach every interesting case.
    pub stats: Stats,
}

/// Counts of interesting outcomes seen by a harness.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub nonempty_matches: u64,
    /// Matches that stopped at a page boundary inside which the cached key went on agreeing.
    pub partial_page_matches: u64,
    /// Matches that found less than the same tokens find in another namespace.
    pub cross_namespace_misses: u64,
    /// Cached pages evicted while their parent page was on a locked path.
    pub evicted_under_lock: u64,
    pub splits: u64,
    pub locks: u64,
    pub not_locked: u64,
    pub stale: u64,
    pub evicted_tokens: u64,
    pub out_of_slots: u64,
}

type Snapshot = (Vec<DumpRow>, usize, usize);

impl Harness {
    pub fn new(num_slots: usize, page_size: usize) -> Self {
        Self::with_options(num_slots, page_size, Policy::Lru, false)
    }

    /// A harness whose cache evicts by `policy` and records events (checked by `check()`:
    /// every node's page hashes equal the chain recomputed from its path). Inserts then carry
    /// a priority drawn from the sequence, so the priority policy sees several levels.
    pub fn with_options(num_slots: usize, page_size: usize, policy: Policy, events: bool) -> Self {
        let pool = shared_pool(TokenPool::new(num_slots, page_size).expect("valid pool"));
        let opts = CacheOptions {
            page_size: None,
            policy,
            events,
            partial_pages: false,
            sglang_stamps: false,
        };
        let cache = RadixCache::with_options(Some(pool.clone()), opts).expect("fresh pool");
        Self {
            cache,
            pool,
            page: page_size,
            history: vec![Vec::new()],
            handles: Vec::new(),
            locks: HashMap::new(),
            outstanding: Vec::new(),
            model: BTreeMap::new(),
            ends: BTreeMap::new(),
            clock: 0,
            policy,
            ops: 0,
            stats: Stats::default(),
        }
    }

    /// `seq` resolved: an odd `base` names a cached path (any namespace), an even one an
    /// earlier sequence, so that most keys extend or branch off what is cached.
    fn tokens(&mut self, seq: &Seq) -> Vec<i32> {
        let pick = seq.base as usize / 2;
        let base = match self.model.keys().nth(pick % self.model.len().max(1)) {
            Some((_, path)) if seq.base % 2 == 1 => path,
            _ => &self.history[pick % self.history.len()],
        };
        let keep = (seq.keep as usize) % (base.len() + 1);
        let mut t = base[..keep].to_vec();
        t.extend(seq.tail.iter().map(|&x| i32::from(x % 3)));
        t.truncate(MAX_LEN.max(6 * self.page));
        self.history.push(t.clone());
        t
    }

    /// Whether the model caches, in `ns`, a page right after `tokens[..len]` that starts like
    /// the query's next page but differs inside it (a match rounded down to a page boundary).
    fn partial_page_follows(&self, ns: usize, tokens: &[i32], len: usize) -> bool {
        let p = self.page;
        p > 1
            && tokens.len() > len
            && self.model.keys().any(|(n, path)| {
                *n == ns
                    && path.len() == len + p
                    && path[..=len] == tokens[..=len]
                    && tokens.get(len + 1..len + p) != Some(&path[len + 1..])
            })
    }

    fn snapshot(&self) -> Snapshot {
        let g = lock_pool(&self.pool);
        (self.cache.dump(), g.available(), g.num_out())
    }

    /// Longest cached prefix per the model, and its slots.
    fn expected(&self, ns: usize, tokens: &[i32]) -> (usize, Vec<Slot>) {
        let usable = tokens.len() - tokens.len() % self.page;
        let mut slots = Vec::new();
        for k in (self.page..=usable).step_by(self.page) {
            match self.model.get(&(ns, tokens[..k].to_vec())) {
                Some(s) => slots.extend_from_slice(s),
                None => break,
            }
        }
        (slots.len(), slots)
    }

    /// The node end above `path` (its parent's path; empty for the namespace root).
    fn parent_len(&self, ns: usize, path: &[i32]) -> usize {
        (self.page..path.len())
            .step_by(self.page)
            .rev()
            .find(|&k| self.ends.contains_key(&(ns, path[..k].to_vec())))
            .unwrap_or(0)
    }

    /// The shortest node end in `ns` extending `prefix` (the node holding its last token).
    fn holder(&self, ns: usize, prefix: &[i32]) -> Option<Vec<i32>> {
        self.ends
            .keys()
            .filter(|(n, q)| *n == ns && q.len() >= prefix.len() && q[..prefix.len()] == *prefix)
            .map(|(_, q)| q.clone())
            .min_by_key(Vec::len)
    }

    /// Locks held through handles naming `path` or a node below it.
    fn lock_ref(&self, ns: usize, path: &[i32]) -> u32 {
        let mut seen = BTreeSet::new();
        self.handles
            .iter()
            .filter(|h| !h.dead && h.ns == ns && h.path.len() >= path.len())
            .filter(|h| !h.path.is_empty() && h.path[..path.len()] == *path)
            .filter(|h| seen.insert(h.handle.raw()))
            .map(|h| self.locks.get(&h.handle).copied().unwrap_or(0))
            .sum()
    }

    /// A match or insert reaching `prefix` inside a node: the node splits there.
    fn split_at(&mut self, ns: usize, prefix: &[i32]) {
        if prefix.is_empty() || self.ends.contains_key(&(ns, prefix.to_vec())) {
            return;
        }
        let holder = self
            .holder(ns, prefix)
            .expect("a cached prefix lies in a node");
        let last = self.ends[&(ns, holder)];
        self.ends.insert((ns, prefix.to_vec()), last);
    }

    /// Stamps the node ending at `path` and every node above it with the current clock.
    fn touch(&mut self, ns: usize, path: &[i32]) {
        let now = self.clock;
        for ((n, q), last) in &mut self.ends {
            if *n == ns && q.len() <= path.len() && path[..q.len()] == **q {
                *last = now;
            }
        }
    }

    fn model_match(&mut self, ns: usize, tokens: &[i32], len: usize) {
        if len == 0 {
            return;
        }
        self.split_at(ns, &tokens[..len]);
        self.clock += 1;
        self.touch(ns, &tokens[..len]);
    }

    /// The node changes of an insert of which `len` tokens were cached (pages not yet added).
    fn model_insert(&mut self, ns: usize, tokens: &[i32], len: usize) {
        let usable = tokens.len() - tokens.len() % self.page;
        let has_root = self.ends.keys().any(|(n, _)| *n == ns);
        if !has_root || len < usable {
            if usable == 0 {
                return;
            }
            self.clock += 1;
            self.split_at(ns, &tokens[..len]);
            self.ends
                .insert((ns, tokens[..usable].to_vec()), self.clock);
            self.touch(ns, &tokens[..usable]);
        } else if len > 0 {
            // Everything present: the node the path ends in is stamped whole (no split).
            self.clock += 1;
            let holder = self.holder(ns, &tokens[..len]).expect("cached");
            self.touch(ns, &holder);
        }
    }

    /// Evicts in the model: oldest unlocked leaves, whole, until `want` tokens are freed or
    /// none is left. Returns the freed slots in eviction order.
    fn model_evict(&mut self, want: usize) -> Result<Vec<Slot>, String> {
        let mut freed = Vec::new();
        while freed.len() < want {
            let leaves: Vec<(u64, usize, Vec<i32>)> = self
                .ends
                .iter()
                .filter(|((n, q), _)| {
                    !self
                        .ends
                        .keys()
                        .any(|(m, r)| m == n && r.len() > q.len() && r[..q.len()] == q[..])
                        && self.lock_ref(*n, q) == 0
                })
                .map(|((n, q), &t)| (t, *n, q.clone()))
                .collect();
            let Some(oldest) = leaves.iter().map(|l| l.0).min() else {
                break;
            };
            let mut at = leaves.into_iter().filter(|l| l.0 == oldest);
            let (_, ns, path) = at.next().expect("the minimum exists");
            if at.next().is_some() {
                return Err(format!("two unlocked leaves accessed at {oldest}"));
            }
            let up = self.parent_len(ns, &path);
            if up > 0 && self.lock_ref(ns, &path[..up]) > 0 {
                self.stats.evicted_under_lock += 1;
            }
            for k in (up + self.page..=path.len()).step_by(self.page) {
                freed.extend(
                    self.model
                        .remove(&(ns, path[..k].to_vec()))
                        .expect("cached page"),
                );
            }
            self.ends.remove(&(ns, path));
        }
        // A node leaves the tree only by eviction: its handles are retired from then on.
        for h in &mut self.handles {
            if !h.path.is_empty() && !self.ends.contains_key(&(h.ns, h.path.clone())) {
                h.dead = true;
            }
        }
        Ok(freed)
    }

    /// Slots the pool can hand out: every slot here moves in whole pages, so a plain count.
    fn model_available(&self) -> usize {
        let out: usize = self.outstanding.iter().map(Vec::len).sum();
        lock_pool(&self.pool).num_slots() - self.model.len() * self.page - out
    }

    fn model_evictable(&self) -> usize {
        let mut tokens = 0;
        for (ns, path) in self.ends.keys() {
            if self.lock_ref(*ns, path) == 0 {
                tokens += path.len() - self.parent_len(*ns, path);
            }
        }
        tokens
    }

    /// What `alloc(n)` evicts; `None` if it must refuse (evicting nothing).
    fn model_alloc(&mut self, n: usize) -> Result<Option<Vec<Slot>>, String> {
        let available = self.model_available();
        if available >= n {
            return Ok(Some(Vec::new()));
        }
        if available + self.model_evictable() < n {
            return Ok(None);
        }
        if self.policy != Policy::Lru {
            // Learnt after the call (`learn_evictions`).
            return Ok(Some(Vec::new()));
        }
        self.model_evict(n - available).map(Some)
    }

    /// Under a policy the model does not order: drops the pages whose slots the pool no longer
    /// counts as cached, the node ends that went with them, and retires their handles.
    fn learn_evictions(&mut self) {
        if self.policy == Policy::Lru {
            return;
        }
        let g = lock_pool(&self.pool);
        self.model.retain(|_, s| {
            s.iter()
                .all(|&s| g.state(s as usize) == Some(SlotState::Cached))
        });
        drop(g);
        let model = &self.model;
        self.ends.retain(|k, _| model.contains_key(k));
        for h in &mut self.handles {
            if !h.path.is_empty() && !self.ends.contains_key(&(h.ns, h.path.clone())) {
                h.dead = true;
            }
        }
    }

    /// The whole tree as `dump()` shows it, but hit counts.
    fn model_dump(&self) -> Vec<(Vec<u8>, Vec<i32>, Vec<Slot>, u32, u64)> {
        let mut rows: Vec<_> = self
            .ends
            .iter()
            .map(|((ns, path), &last)| {
                let up = self.parent_len(*ns, path);
                let own: Vec<Slot> = (up + self.page..=path.len())
                    .step_by(self.page)
                    .flat_map(|k| self.model[&(*ns, path[..k].to_vec())].clone())
                    .collect();
                (
                    NAMESPACES[*ns].to_vec(),
                    path.clone(),
                    own,
                    self.lock_ref(*ns, path),
                    last,
                )
            })
            .collect();
        rows.sort();
        rows
    }

    fn pick(&self, i: u8) -> Option<usize> {
        (!self.handles.is_empty()).then(|| i as usize % self.handles.len())
    }

    /// Applies one op; `Err` describes a bug (model mismatch or broken invariant).
    #[allow(clippy::too_many_lines)] // one arm per op, each with its model expectation
    pub fn apply(&mut self, op: &RadixOp) -> Result<(), String> {
        self.ops += 1;
        let before = self.snapshot();
        let unchanged = |h: &Self, what: &str| -> Result<(), String> {
            if h.snapshot() == before {
                Ok(())
            } else {
                Err(format!("{what} failed but changed state"))
            }
        };
        match op {
            RadixOp::Match { ns, seq } | RadixOp::Peek { ns, seq } => {
                let ns = *ns as usize % NAMESPACES.len();
                let tokens = self.tokens(seq);
                let (len, slots) = self.expected(ns, &tokens);
                if matches!(op, RadixOp::Peek { .. }) {
                    let got = self
                        .cache
                        .peek_prefix(NAMESPACES[ns], &tokens)
                        .map_err(|e| e.to_string())?;
                    if got != len {
                        return Err(format!("peek {tokens:?}: {got}, model {len}"));
                    }
                    unchanged(self, "peek (read-only)")?;
                } else {
                    self.stats.partial_page_matches +=
                        u64::from(self.partial_page_follows(ns, &tokens, len));
                    let elsewhere = (0..NAMESPACES.len())
                        .filter(|&o| o != ns)
                        .map(|o| self.expected(o, &tokens).0)
                        .max()
                        .unwrap_or(0);
                    self.stats.cross_namespace_misses += u64::from(elsewhere > len);
                    let nodes = self.cache.tree().num_nodes();
                    let m = self
                        .cache
                        .match_prefix(NAMESPACES[ns], &tokens)
                        .map_err(|e| e.to_string())?;
                    self.stats.nonempty_matches += u64::from(m.length > 0);
                    self.stats.splits += u64::from(self.cache.tree().num_nodes() > nodes);
                    if m.length != len || m.slots != slots {
                        return Err(format!(
                            "match {tokens:?}: {} {:?}, model {len} {slots:?}",
                            m.length, m.slots
                        ));
                    }
                    self.model_match(ns, &tokens, len);
                    self.handles.push(HandleModel {
                        ns,
                        handle: m.node,
                        path: tokens[..len].to_vec(),
                        dead: false,
                    });
                }
            }
            RadixOp::Insert { ns, seq } => {
                let ns = *ns as usize % NAMESPACES.len();
                let tokens = self.tokens(seq);
                let usable = tokens.len() - tokens.len() % self.page;
                let predicted = self.model_alloc(usable)?;
                let slots = match (self.cache.alloc(usable), predicted) {
                    (Ok(s), Some(_)) => {
                        self.learn_evictions();
                        s
                    }
                    (Err(CoreError::OutOfSlots { .. }), None) => {
                        self.stats.out_of_slots += 1;
                        return unchanged(self, "alloc");
                    }
                    (got, want) => return Err(format!("alloc({usable}): {got:?}, model {want:?}")),
                };
                // After alloc: its eviction may have shortened the cached prefix.
                let (len, _) = self.expected(ns, &tokens);
                // The partial last page's slots stay the caller's; any in-range id will do.
                let mut all = slots.clone();
                all.resize(tokens.len(), 0);
                let got = self
                    .cache
                    .insert_with_priority(NAMESPACES[ns], &tokens, &all, f64::from(seq.keep % 3))
                    .map_err(|e| e.to_string())?;
                if got != len {
                    return Err(format!("insert {tokens:?}: returned {got}, model {len}"));
                }
                self.model_insert(ns, &tokens, len);
                for k in (len + self.page..=usable).step_by(self.page) {
                    self.model
                        .insert((ns, tokens[..k].to_vec()), slots[k - self.page..k].to_vec());
                }
                lock_pool(&self.pool)
                    .free(&slots[..len])
                    .map_err(|e| format!("free dup: {e}"))?;
            }
            RadixOp::InsertForeign { ns, seq } => {
                let ns = *ns as usize % NAMESPACES.len();
                let tokens = self.tokens(seq);
                let (len, _) = self.expected(ns, &tokens);
                let usable = tokens.len() - tokens.len() % self.page;
                let free: Vec<Slot> = {
                    let g = lock_pool(&self.pool);
                    (0..g.num_slots())
                        .filter(|&s| g.state(s) == Some(SlotState::Free))
                        .map(|s| s as Slot)
                        .collect()
                };
                if usable == len || free.len() < usable {
                    return Ok(());
                }
                // Whole free pages in order, so only the "not allocated" rule can reject them.
                let slots: Vec<Slot> = free[..usable].to_vec();
                match self.cache.insert(NAMESPACES[ns], &tokens, &slots) {
                    Err(CoreError::InvalidArgument(_)) => unchanged(self, "foreign insert")?,
                    other => return Err(format!("foreign insert gave {other:?}")),
                }
            }
            RadixOp::Lock { handle }
            | RadixOp::Unlock { handle }
            | RadixOp::PathSlots { handle } => {
                let Some(i) = self.pick(*handle) else {
                    return Ok(());
                };
                let (ns, h, path) = (
                    self.handles[i].ns,
                    self.handles[i].handle,
                    self.handles[i].path.clone(),
                );
                let dead = self.handles[i].dead;
                let res = match op {
                    RadixOp::Lock { .. } => self.cache.lock(h).map(|_| None),
                    RadixOp::Unlock { .. } => self.cache.unlock(h).map(|_| None),
                    _ => self.cache.path_slots(h).map(Some),
                };
                match res {
                    Err(CoreError::StaleHandle(_)) => {
                        self.stats.stale += 1;
                        if !dead {
                            return Err(format!("live handle of {path:?} called stale"));
                        }
                        unchanged(self, "stale handle op")?;
                    }
                    Err(CoreError::NotLocked(_)) => {
                        self.stats.not_locked += 1;
                        if self.locks.get(&h).copied().unwrap_or(0) > 0 {
                            return Err("unlock refused a held lock".into());
                        }
                        unchanged(self, "unlock")?;
                    }
                    Err(e) => return Err(format!("unexpected {e}")),
                    Ok(slots) => {
                        if dead {
                            return Err(format!("op on retired handle of {path:?} succeeded"));
                        }
                        if h.is_root() {
                            return Ok(());
                        }
                        match op {
                            RadixOp::Lock { .. } => {
                                self.stats.locks += 1;
                                *self.locks.entry(h).or_default() += 1;
                            }
                            RadixOp::Unlock { .. } => {
                                let c = self.locks.entry(h).or_default();
                                if *c == 0 {
                                    return Err("unlock of an unlocked handle succeeded".into());
                                }
                                *c -= 1;
                            }
                            _ => {
                                let (_, want) = self.expected(ns, &path);
                                if slots.as_deref() != Some(&want[..]) {
                                    return Err(format!(
                                        "path_slots {path:?}: {slots:?} vs {want:?}"
                                    ));
                                }
                            }
                        }
                    }
                }
            }
            RadixOp::Evict { tokens } => {
                let want = *tokens as usize;
                let evictable = self.cache.evictable_size();
                let known: BTreeSet<Slot> = self.model.values().flatten().copied().collect();
                let freed = self.cache.evict_slots(want);
                self.stats.evicted_tokens += freed.len() as u64;
                if self.policy == Policy::Lru {
                    let predicted = self.model_evict(want)?;
                    if freed != predicted {
                        return Err(format!(
                            "evict({want}) freed {freed:?}, model {predicted:?}"
                        ));
                    }
                } else {
                    if freed.iter().any(|s| !known.contains(s)) {
                        return Err("evicted a slot the model does not know".into());
                    }
                    if freed.len() < want.min(evictable) {
                        return Err(format!(
                            "evicted {} of {want} with {evictable} evictable",
                            freed.len()
                        ));
                    }
                    self.learn_evictions();
                }
            }
            RadixOp::Alloc { pages } => {
                let n = (*pages as usize % 8) * self.page;
                let predicted = self.model_alloc(n)?;
                match (self.cache.alloc(n), predicted) {
                    (Ok(s), Some(_)) => {
                        self.learn_evictions();
                        self.outstanding.push(s);
                    }
                    (Err(CoreError::OutOfSlots { .. }), None) => unchanged(self, "alloc")?,
                    (got, want) => return Err(format!("alloc({n}): {got:?}, model {want:?}")),
                }
            }
            RadixOp::Free { which } => {
                if !self.outstanding.is_empty() {
                    let s = self
                        .outstanding
                        .swap_remove(*which as usize % self.outstanding.len());
                    lock_pool(&self.pool)
                        .free(&s)
                        .map_err(|e| format!("free: {e}"))?;
                }
            }
            RadixOp::FreeCached { pick } => {
                if !self.model.is_empty() {
                    let s = self
                        .model
                        .values()
                        .nth(*pick as usize % self.model.len())
                        .expect("non-empty")[0];
                    match lock_pool(&self.pool).free(&[s]) {
                        Err(CoreError::DoubleFree(_)) => {}
                        other => return Err(format!("freeing cached slot {s}: {other:?}")),
                    }
                    unchanged(self, "free of a cached slot")?;
                }
            }
        }
        // Drained so they do not pile up; their content is checked through the page hashes.
        self.cache.take_events();
        self.check_sizes()
    }

    /// Every (namespace, page prefix) on a locked path.
    fn locked_pages(&self) -> BTreeSet<(usize, Vec<i32>)> {
        let mut prot = BTreeSet::new();
        for h in &self.handles {
            if self.locks.get(&h.handle).copied().unwrap_or(0) > 0 {
                for k in (self.page..=h.path.len()).step_by(self.page) {
                    prot.insert((h.ns, h.path[..k].to_vec()));
                }
            }
        }
        prot
    }

    fn check_sizes(&self) -> Result<(), String> {
        self.cache.check().map_err(|e| e.to_string())?;
        let dump: Vec<_> = self
            .cache
            .dump()
            .into_iter()
            .map(|(ns, path, own, lock_ref, last, _)| (ns, path, own, lock_ref, last))
            .collect();
        let want = self.model_dump();
        if dump != want {
            return Err(format!("dump {dump:?}\nmodel {want:?}"));
        }
        let available = lock_pool(&self.pool).available();
        if available != self.model_available() {
            return Err(format!(
                "pool has {available} available, model {}",
                self.model_available()
            ));
        }
        for (ns, path) in self.model.keys() {
            let up = path.len() - self.page;
            if up > 0 && !self.model.contains_key(&(*ns, path[..up].to_vec())) {
                return Err(format!("model not prefix-closed at {path:?}"));
            }
        }
        let total = self.model.len() * self.page;
        let prot = self.locked_pages();
        let (t, p) = (self.cache.total_size(), self.cache.protected_size());
        let prot = prot.len() * self.page;
        if t != total || p != prot {
            return Err(format!(
                "sizes total {t} protected {p}, model {total} {prot}"
            ));
        }
        Ok(())
    }
}
