//! Operations on a `RadixCache` with a pool, and a harness that replays them against a naive
//! reference model. Shared by the proptest state machine (`tests/radix_props.rs`) and the
//! cargo-fuzz target (`fuzz/fuzz_targets/radix_ops.rs`), so both explore the same op space.
//!
//! The model is a map (namespace, page-aligned prefix) -> slots of that prefix's last page, plus
//! the direct locks per handle. It knows nothing of nodes or LRU order; it checks what a caller can see:
//! match / peek lengths and slots, insert's return value, which unlocks may fail, that locked
//! paths survive eviction, sizes, and that every failing call changed nothing.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::cache::{lock_pool, shared_pool, CacheOptions, DumpRow, RadixCache, SharedPool};
use super::policy::Policy;
use super::node::NodeHandle;
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
    /// Retired by an eviction (see `sync_after_eviction`).
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
    /// Operations applied, for reports.
    pub ops: u64,
    /// What the ops exercised, so tests can show the generators reach every interesting case.
    pub stats: Stats,
}

/// Counts of interesting outcomes seen by a harness.
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    pub nonempty_matches: u64,
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
            ops: 0,
            stats: Stats::default(),
        }
    }

    fn tokens(&mut self, seq: &Seq) -> Vec<i32> {
        let base = &self.history[seq.base as usize % self.history.len()];
        let keep = (seq.keep as usize) % (base.len() + 1);
        let mut t = base[..keep].to_vec();
        t.extend(seq.tail.iter().map(|&x| i32::from(x % 3)));
        t.truncate(MAX_LEN);
        self.history.push(t.clone());
        t
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

    /// Drops model entries whose slot the pool no longer counts as cached (evicted).
    fn sync_after_eviction(&mut self) -> Result<(), String> {
        let g = lock_pool(&self.pool);
        self.model.retain(|_, s| {
            s.iter()
                .all(|&s| g.state(s as usize) == Some(SlotState::Cached))
        });
        drop(g);
        // A node leaves the tree only by eviction, and then its path leaves the model: so a
        // handle is retired exactly when its path has been missing from the model once.
        for h in &mut self.handles {
            if !h.path.is_empty() && !self.model.contains_key(&(h.ns, h.path.clone())) {
                h.dead = true;
            }
        }
        for (ns, path) in self.model.keys() {
            let up = path.len() - self.page;
            if up > 0 && !self.model.contains_key(&(*ns, path[..up].to_vec())) {
                return Err(format!(
                    "model not prefix-closed after eviction at {path:?}"
                ));
            }
        }
        for h in self
            .handles
            .iter()
            .filter(|h| self.locks.get(&h.handle).copied().unwrap_or(0) > 0)
        {
            if !h.path.is_empty() && !self.model.contains_key(&(h.ns, h.path.clone())) {
                return Err(format!("locked path {:?} was evicted", h.path));
            }
        }
        Ok(())
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
                let evictable = self.cache.evictable_size();
                let slots = match self.cache.alloc(usable) {
                    Ok(s) => s,
                    Err(CoreError::OutOfSlots { .. }) => {
                        self.stats.out_of_slots += 1;
                        if lock_pool(&self.pool).available() + evictable >= usable {
                            return Err("alloc refused although eviction would do".into());
                        }
                        return unchanged(self, "alloc");
                    }
                    Err(e) => return Err(format!("alloc: {e}")),
                };
                self.sync_after_eviction()?;
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
                if freed.iter().any(|s| !known.contains(s)) {
                    return Err("evicted a slot the model does not know".into());
                }
                if freed.len() < want.min(evictable) {
                    return Err(format!(
                        "evicted {} of {want} with {evictable} evictable",
                        freed.len()
                    ));
                }
                self.sync_after_eviction()?;
            }
            RadixOp::Alloc { pages } => {
                let n = (*pages as usize % 8) * self.page;
                let evictable = self.cache.evictable_size();
                match self.cache.alloc(n) {
                    Ok(s) => self.outstanding.push(s),
                    Err(CoreError::OutOfSlots { .. }) => {
                        if lock_pool(&self.pool).available() + evictable >= n {
                            return Err("alloc refused although eviction would do".into());
                        }
                        unchanged(self, "alloc")?;
                    }
                    Err(e) => return Err(format!("alloc: {e}")),
                }
                self.sync_after_eviction()?;
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

    fn check_sizes(&self) -> Result<(), String> {
        self.cache.check().map_err(|e| e.to_string())?;
        let total = self.model.len() * self.page;
        let mut prot: BTreeSet<(usize, Vec<i32>)> = BTreeSet::new();
        for h in &self.handles {
            if self.locks.get(&h.handle).copied().unwrap_or(0) > 0 {
                for k in (self.page..=h.path.len()).step_by(self.page) {
                    prot.insert((h.ns, h.path[..k].to_vec()));
                }
            }
        }
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
