//! `RadixCache`: a `RadixTree` whose slots come from a shared `TokenPool`, or from the caller.
//!
//! With a pool, inserted slots move from "handed out" to "cached" in the pool, eviction returns
//! them, and `alloc` evicts when the pool is short. The pool is shared (`Arc<Mutex<_>>`) because
//! Python holds it as its own object next to the cache; the lock is uncontended in practice.
//!
//! Partial pages (`page_size` > 1): match and insert look only at the first
//! `floor(len / page_size)` pages of tokens. `insert` stores those and returns how many leading
//! tokens were already cached; the slots of the partial last page stay the caller's (free them,
//! or keep them for the next decode step). With a pool, each inserted page of slots must be a
//! whole pool page in order (`k*page_size .. k*page_size + page_size`), as `alloc` hands out.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::node::NodeHandle;
use super::tree::{
    check_lengths, check_slots_nonneg, check_tokens, plan_matched, NodeInfo, PrefixMatch, RadixTree,
};
use crate::error::{CoreError, Result};
use crate::pool::{SlotState, TokenPool};

pub type SharedPool = Arc<Mutex<TokenPool>>;

pub fn shared_pool(pool: TokenPool) -> SharedPool {
    Arc::new(Mutex::new(pool))
}

/// Locks a shared pool; no code path panics while holding it, so poisoning is ignored.
pub fn lock_pool(pool: &SharedPool) -> MutexGuard<'_, TokenPool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

#[derive(Debug)]
pub struct RadixCache {
    tree: RadixTree,
    pool: Option<SharedPool>,
    /// Reused buffer for the slots `alloc` evicts (no allocation per eviction).
    evicted_buf: Vec<i32>,
}

/// One row of `dump`: a node as (namespace, full path key, own value, `lock_ref`, `last_access`,
/// `hit_count`); rows sorted, so equal trees dump equal.
pub type DumpRow = (Vec<u8>, Vec<i32>, Vec<i32>, u32, u64, u32);

impl RadixCache {
    /// With a pool, `page_size` must be the pool's (pass 0 to take it from the pool).
    pub fn new(pool: Option<SharedPool>, page_size: usize) -> Result<Self> {
        let page_size = match &pool {
            Some(p) => {
                let mut g = lock_pool(p);
                if page_size != 0 && page_size != g.page_size() {
                    return Err(CoreError::invalid(format!(
                        "page_size {page_size} differs from the pool's {}",
                        g.page_size()
                    )));
                }
                g.attach()?;
                g.page_size()
            }
            None => page_size.max(1),
        };
        Ok(Self {
            tree: RadixTree::new(page_size)?,
            pool,
            evicted_buf: Vec::new(),
        })
    }

    pub fn tree(&self) -> &RadixTree {
        &self.tree
    }

    /// For `corrupt.rs` only: the tree, to break on purpose.
    #[cfg(test)]
    pub(crate) fn tree_mut_for_tests(&mut self) -> &mut RadixTree {
        &mut self.tree
    }

    pub fn pool(&self) -> Option<&SharedPool> {
        self.pool.as_ref()
    }

    pub fn page_size(&self) -> usize {
        self.tree.page_size()
    }

    pub fn evictable_size(&self) -> usize {
        self.tree.evictable_size()
    }

    pub fn protected_size(&self) -> usize {
        self.tree.protected_size()
    }

    pub fn total_size(&self) -> usize {
        self.tree.total_size()
    }

    /// Tokens evicted since the cache was made, by `evict` and by `alloc`.
    pub fn evicted_tokens(&self) -> u64 {
        self.tree.evicted_tokens()
    }

    /// Approximate heap bytes of the tree's bookkeeping (the pool's are separate).
    pub fn heap_bytes(&self) -> usize {
        self.tree.heap_bytes()
    }

    pub fn match_prefix(&mut self, ns: &[u8], tokens: &[i32]) -> Result<PrefixMatch> {
        self.tree.match_prefix(ns, tokens)
    }

    /// `match_prefix` without gathering the slots: (length, path end). `path_slots_into` then
    /// writes them wherever the caller wants (the binding: straight into a `NumPy` array).
    pub fn match_end(&mut self, ns: &[u8], tokens: &[i32]) -> Result<(usize, NodeHandle)> {
        self.tree.match_end(ns, tokens)
    }

    pub fn path_slots_into(&self, h: NodeHandle, out: &mut [i32]) -> Result<()> {
        self.tree.path_slots_into(h, out)
    }

    pub fn peek_prefix(&self, ns: &[u8], tokens: &[i32]) -> Result<usize> {
        self.tree.peek_prefix(ns, tokens)
    }

    /// Caches `tokens` (whole pages) with `slots`; returns how many leading tokens were already
    /// cached. The caller keeps ownership of `slots[..returned]` (duplicates: free them) and of
    /// the partial last page.
    pub fn insert(&mut self, ns: &[u8], tokens: &[i32], slots: &[i32]) -> Result<usize> {
        Ok(self.insert_impl(ns, tokens, slots, false)?.0)
    }

    /// As `insert`, also returning the handle of the inserted path's end (whole pages; a node
    /// the path ends inside is split there, as `match_prefix` does). `NodeHandle::ROOT` when
    /// `tokens` holds no whole page.
    pub fn insert_node(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[i32],
    ) -> Result<(usize, NodeHandle)> {
        let (present, end) = self.insert_impl(ns, tokens, slots, true)?;
        Ok((present, self.tree.end_handle(end)))
    }

    fn insert_impl(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[i32],
        split_end: bool,
    ) -> Result<(usize, u32)> {
        check_lengths(tokens, slots)?;
        // Plan first (read-only): matched tokens equal stored, non-negative ones, so only the
        // rest needs the sign check.
        let plan = self.tree.plan_insert(ns, tokens);
        let matched = plan_matched(plan.as_ref());
        check_tokens(&tokens[matched..])?;
        let Some(pool) = &self.pool else {
            check_slots_nonneg(slots)?;
            return Ok(self.tree.commit_insert(ns, plan, tokens, slots, split_end));
        };
        let mut pool = lock_pool(pool);
        // One pass decides sign and range together; the detailed checks only name the offender.
        if !pool.in_range(slots) {
            check_slots_nonneg(slots)?;
            pool.check_range(slots, "insert")?;
        }
        let new = &slots[matched..self.tree.usable(tokens.len())];
        check_whole_pages(new, pool.page_size())?;
        pool.take_for_cache(new)?;
        Ok(self.tree.commit_insert(ns, plan, tokens, slots, split_end))
    }

    pub fn lock(&mut self, h: NodeHandle) -> Result<()> {
        self.tree.lock(h)
    }

    pub fn unlock(&mut self, h: NodeHandle) -> Result<()> {
        self.tree.unlock(h)
    }

    /// `lock(to)` then `unlock(from)` in one step (nothing changes if the unlock would fail).
    pub fn move_lock(&mut self, from: NodeHandle, to: NodeHandle) -> Result<()> {
        self.tree.move_lock(from, to)
    }

    pub fn path_slots(&self, h: NodeHandle) -> Result<Vec<i32>> {
        self.tree.path_slots(h)
    }

    pub fn node_info(&self, h: NodeHandle) -> Result<NodeInfo> {
        self.tree.node_info(h)
    }

    /// Evicts LRU unlocked leaves until `num_tokens` are freed (or nothing is evictable) and
    /// returns the freed slot ids; with a pool they are already back in it.
    pub fn evict_slots(&mut self, num_tokens: usize) -> Vec<i32> {
        let mut out = Vec::new();
        self.tree.evict_into(num_tokens, &mut out);
        if let Some(pool) = &self.pool {
            lock_pool(pool).release_from_cache(&out);
        }
        out
    }

    pub fn evict(&mut self, num_tokens: usize) -> usize {
        self.evict_slots(num_tokens).len()
    }

    /// `n` slots from the pool, evicting LRU leaves first if the pool is short. Fails with
    /// `OutOfSlots`, having evicted nothing, when even evicting everything evictable would
    /// not be enough.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<i32>> {
        let mut out = vec![0; n];
        self.alloc_into(&mut out)?;
        Ok(out)
    }

    /// `alloc(out.len())` written into `out` (a caller's buffer, e.g. a fresh `NumPy` array).
    pub fn alloc_into(&mut self, out: &mut [i32]) -> Result<()> {
        let n = out.len();
        let Some(pool) = &self.pool else {
            return Err(CoreError::invalid(
                "alloc: this RadixCache has no TokenPool (caller-owned slots); use your allocator",
            ));
        };
        let mut g = lock_pool(pool);
        if !n.is_multiple_of(g.page_size()) {
            return Err(CoreError::invalid(format!(
                "alloc({n}): n must be a multiple of page_size ({})",
                g.page_size()
            )));
        }
        let available = g.available();
        if available < n {
            // Cached slots are whole pool pages, so each evicted token frees its slot's page
            // share exactly: evicting `n - available` tokens is enough.
            let reachable = available + self.tree.evictable_size();
            if reachable < n {
                return Err(CoreError::OutOfSlots {
                    requested: n,
                    available: reachable,
                });
            }
            // Evicted slots go straight into `out` (the caller's buffer); only what is evicted
            // beyond the need goes through `evicted_buf` back to the free list.
            let surplus = &mut self.evicted_buf;
            surplus.clear();
            let mut reused = 0;
            self.tree.evict_each(n - available, |v| {
                let k = v.len().min(n - reused);
                out[reused..reused + k].copy_from_slice(&v[..k]);
                surplus.extend_from_slice(&v[k..]);
                reused += k;
            });
            g.alloc_after_evict(reused, surplus, out);
            return Ok(());
        }
        g.alloc_into(out)
    }

    /// Tree invariants, plus pool conservation: every slot the tree holds is `Cached` in the
    /// pool, exactly once, and the pool's cached count equals the tree's size.
    pub fn check(&self) -> Result<()> {
        let held = self.tree.check()?;
        let Some(pool) = &self.pool else {
            return Ok(());
        };
        let g = lock_pool(pool);
        g.check()?;
        if g.num_cached() != held.len() {
            return Err(CoreError::InvariantViolation(format!(
                "pool has {} cached slots, tree holds {}",
                g.num_cached(),
                held.len()
            )));
        }
        let mut seen = vec![false; g.num_slots()];
        for &s in &held {
            let s = s as usize;
            if g.state(s) != Some(SlotState::Cached) || seen[s] {
                return Err(CoreError::InvariantViolation(format!(
                    "tree slot {s} is {:?} in the pool or held twice",
                    g.state(s)
                )));
            }
            seen[s] = true;
        }
        Ok(())
    }

    /// Every node, canonically ordered, for tests that compare whole states.
    pub fn dump(&self) -> Vec<DumpRow> {
        self.tree.dump()
    }
}

impl Drop for RadixCache {
    /// Gives every cached slot back to the pool and frees the pool for another cache.
    fn drop(&mut self) {
        if let Some(pool) = &self.pool {
            let mut g = lock_pool(pool);
            let mut out = Vec::new();
            for n in &self.tree.nodes {
                if !n.is_free() && !n.is_root() {
                    out.extend_from_slice(n.value());
                }
            }
            g.release_from_cache(&out);
            g.detach();
        }
    }
}

fn check_whole_pages(slots: &[i32], p: usize) -> Result<()> {
    if p == 1 {
        return Ok(());
    }
    for page in slots.chunks(p) {
        let first = page[0];
        let whole = (first as usize).is_multiple_of(p)
            && page.len() == p
            && page.iter().enumerate().all(|(k, &s)| s == first + k as i32);
        if !whole {
            return Err(CoreError::invalid(format!(
                "insert: slots {page:?} are not one whole pool page (page_size {p})"
            )));
        }
    }
    Ok(())
}

impl RadixTree {
    pub(crate) fn dump(&self) -> Vec<DumpRow> {
        let mut rows = Vec::new();
        for n in &self.nodes {
            if n.is_free() || n.is_root() {
                continue;
            }
            // Walk up for the full path key and the namespace of the root reached.
            let mut parts = vec![n.key()];
            let mut j = n.parent;
            while !self.node(j).is_root() {
                parts.push(self.node(j).key());
                j = self.node(j).parent;
            }
            let path: Vec<i32> = parts.iter().rev().flat_map(|k| k.iter().copied()).collect();
            let ns = self.root_ns.get(&j).map(|b| b.to_vec()).unwrap_or_default();
            rows.push((
                ns,
                path,
                n.value().to_vec(),
                n.lock_ref,
                n.last_access,
                n.hit_count,
            ));
        }
        rows.sort();
        rows
    }
}
