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

use std::num::NonZeroUsize;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::events::KvEvent;
use super::node::{NodeHandle, NIL};
use super::partial::Tail;
use super::policy::Policy;
use super::token::TokenId;
use super::tree::{
    check_lengths, check_priority, check_slots_nonneg, copy_slots, plan_matched, widen_slots,
    NodeInfo, NodeView, PrefixMatch, RadixTree,
};
use crate::error::{CoreError, Result};
use crate::pool::{SlotState, TokenPool};
use crate::slot::{Slot, SlotOut};

pub type SharedPool = Arc<Mutex<TokenPool>>;

pub fn shared_pool(pool: TokenPool) -> SharedPool {
    Arc::new(Mutex::new(pool))
}

/// Locks a shared pool; no code path panics while holding it, so poisoning is ignored.
pub fn lock_pool(pool: &SharedPool) -> MutexGuard<'_, TokenPool> {
    pool.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How a cache is built.
#[derive(Debug, Clone, Copy, Default)]
pub struct CacheOptions {
    /// Tokens per page. `None`: the pool's, or 1 without a pool. With a pool it must equal
    /// the pool's.
    pub page_size: Option<NonZeroUsize>,
    pub policy: Policy,
    /// Record KV events (off: no hashing, no event storage).
    pub events: bool,
    /// Cache partial last pages and report partial-page tails (partial.rs); `page_size` > 1.
    pub partial_pages: bool,
    /// Count hits and stamp access times as `SGLang`'s `RadixCache` does (tree.rs,
    /// `RadixTree::sglang_stamps`), so its lfu / slru / lru orders come out the same.
    pub sglang_stamps: bool,
}

#[derive(Debug)]
pub struct RadixCache {
    tree: RadixTree,
    pool: Option<SharedPool>,
    /// Reused buffer for the slots `alloc` evicts (no allocation per eviction).
    evicted_buf: Vec<Slot>,
    /// Reused buffer for an int32 insert's new slots, widened (the present prefix is not).
    wide_buf: Vec<Slot>,
    /// Reused buffer for an int64 insert's new token ids, narrowed (the present prefix is not).
    key_buf: Vec<i32>,
    /// The largest slot id ever inserted (-1: none). An int32 output is refused, before
    /// anything changes, once this no longer fits: cheaper than a check per id per call.
    max_slot: Slot,
    partial_pages: bool,
}

/// One row of `dump`: a node as (namespace, full path key, own value, `lock_ref`, `last_access`,
/// `hit_count`); rows sorted, so equal trees dump equal.
pub type DumpRow = (Vec<u8>, Vec<i32>, Vec<Slot>, u32, u64, u32);

impl RadixCache {
    /// LRU, events off. With a pool, `page_size` must be the pool's (`None`: take it from the
    /// pool; without a pool, 1).
    pub fn new(pool: Option<SharedPool>, page_size: Option<NonZeroUsize>) -> Result<Self> {
        Self::with_options(
            pool,
            CacheOptions {
                page_size,
                ..CacheOptions::default()
            },
        )
    }

    pub fn with_options(pool: Option<SharedPool>, opts: CacheOptions) -> Result<Self> {
        let page_size = match &pool {
            Some(p) => {
                let mut g = lock_pool(p);
                let own = NonZeroUsize::new(g.page_size()).expect("a pool's page_size is >= 1");
                if opts.page_size.is_some_and(|ps| ps != own) {
                    return Err(CoreError::invalid(format!(
                        "page_size {} differs from the pool's {own}",
                        opts.page_size.map_or(0, NonZeroUsize::get)
                    )));
                }
                g.attach()?;
                own
            }
            None => opts.page_size.unwrap_or(NonZeroUsize::MIN),
        };
        let mut tree = RadixTree::with_options(page_size, opts.policy, opts.events);
        tree.sglang_stamps = opts.sglang_stamps;
        Ok(Self {
            tree,
            pool,
            evicted_buf: Vec::new(),
            wide_buf: Vec::new(),
            key_buf: Vec::new(),
            max_slot: -1,
            partial_pages: opts.partial_pages && page_size.get() > 1,
        })
    }

    /// Whether partial last pages are cached (and tails reported).
    pub fn partial_pages(&self) -> bool {
        self.partial_pages
    }

    /// The partial-page tail below path end `end` for the request's tokens after the match
    /// (`rest`); `None` unless partial pages are on. Read-only.
    pub fn tail(&self, ns: &[u8], end: NodeHandle, rest: &[i32]) -> Option<Tail> {
        if !self.partial_pages {
            return None;
        }
        self.tree.tail(ns, end, rest)
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

    pub fn policy(&self) -> Policy {
        self.tree.policy()
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

    /// The largest slot id ever inserted, or -1.
    pub fn max_slot(&self) -> Slot {
        self.max_slot
    }

    /// `Ok` if every id this cache may write out fits in int32; else an error naming `what`.
    pub fn check_fits_i32(&self, what: &str) -> Result<()> {
        if self.max_slot > Slot::from(i32::MAX) {
            return Err(CoreError::invalid(format!(
                "{what}: slot id {} was cached, which does not fit int32; ask for int64",
                self.max_slot
            )));
        }
        Ok(())
    }

    pub fn match_prefix(&mut self, ns: &[u8], tokens: &[i32]) -> Result<PrefixMatch> {
        self.tree.match_prefix(ns, tokens)
    }

    /// `match_prefix` without gathering the slots: (length, path end). `path_slots_into` then
    /// writes them wherever the caller wants (the binding: straight into a `NumPy` array).
    /// Token ids may be int32 or int64 (compared at 64 bits, never narrowed).
    pub fn match_end<K: TokenId>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
    ) -> Result<(usize, NodeHandle)> {
        self.tree.match_end(ns, tokens)
    }

    /// The path's slots into `out`; for an int32 `out`, call `check_fits_i32` first.
    pub fn path_slots_into<T: SlotOut>(&self, h: NodeHandle, out: &mut [T]) -> Result<()> {
        self.tree.path_slots_into(h, out)
    }

    /// The first `out.len()` slots of the path into `out` (see `path_slots_into`).
    pub fn path_prefix_slots_into<T: SlotOut>(&self, h: NodeHandle, out: &mut [T]) -> Result<()> {
        self.tree.path_prefix_slots_into(h, out)
    }

    /// Token ids may be int32 or int64 (compared at 64 bits, never narrowed).
    pub fn peek_prefix<K: TokenId>(&self, ns: &[u8], tokens: &[K]) -> Result<usize> {
        self.tree.peek_prefix(ns, tokens)
    }

    /// Caches `tokens` (whole pages) with `slots`; returns how many leading tokens were already
    /// cached. The caller keeps ownership of `slots[..returned]` (duplicates: free them) and of
    /// the partial last page.
    pub fn insert(&mut self, ns: &[u8], tokens: &[i32], slots: &[Slot]) -> Result<usize> {
        Ok(self.insert_impl(ns, tokens, slots, false, 0.0, 0)?.0)
    }

    /// As `insert`, with a priority (finite) given to the new nodes and raised to at least
    /// `priority` on every node of the path (for the `priority` eviction policy).
    pub fn insert_with_priority(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[Slot],
        priority: f64,
    ) -> Result<usize> {
        Ok(self.insert_impl(ns, tokens, slots, false, priority, 0)?.0)
    }

    /// As `insert`, also returning the handle of the inserted path's end (whole pages; a node
    /// the path ends inside is split there, as `match_prefix` does). `NodeHandle::ROOT` when
    /// `tokens` holds no whole page.
    pub fn insert_node(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[Slot],
        priority: f64,
    ) -> Result<(usize, NodeHandle)> {
        self.insert_node_from(ns, tokens, slots, priority, 0)
    }

    /// `insert_with_priority` for slots of either width (an int32 array is read in place).
    pub fn insert_with_priority_from<T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[i32],
        slots: &[T],
        priority: f64,
    ) -> Result<usize> {
        Ok(self.insert_impl(ns, tokens, slots, false, priority, 0)?.0)
    }

    /// `insert_node` for slots of either width (an int32 array is read in place) and token
    /// ids of either width (int64 ones are narrowed only where new).
    /// `inserted_len`: how many leading tokens this request inserted before; with
    /// `sglang_stamps` only the nodes ending beyond it count a hit (`SGLang`'s rule), else
    /// it is ignored.
    pub fn insert_node_from<K: TokenId, T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
        slots: &[T],
        priority: f64,
        inserted_len: usize,
    ) -> Result<(usize, NodeHandle)> {
        let (present, end) = self.insert_impl(ns, tokens, slots, true, priority, inserted_len)?;
        Ok((present, self.tree.end_handle(end)))
    }

    /// Validates `tokens` and `slots` at their own widths, then hands the commit int32 keys
    /// and int64 slots: `tokens` itself when it is int32, else `key_buf` with only
    /// `[matched..]` narrowed (`TokenId::keys`); `slots` itself when it is int64, else `wide_buf` with only
    /// `[matched..]` widened (the commit reads nothing before `matched`; a prompt that is
    /// mostly cached converts little).
    fn insert_impl<K: TokenId, T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
        slots: &[T],
        split_end: bool,
        priority: f64,
        inserted_len: usize,
    ) -> Result<(usize, u32)> {
        check_lengths(tokens, slots)?;
        let priority = check_priority(priority)?;
        let plan = self.tree.plan_insert(ns, tokens);
        let matched = plan_matched(plan.as_ref());
        K::check(&tokens[matched..])?;
        // Sign and range over every slot, as the commit's checks would (same errors).
        match &self.pool {
            None => check_slots_nonneg(slots)?,
            Some(pool) => {
                let pool = lock_pool(pool);
                if !pool.in_range(slots) {
                    check_slots_nonneg(slots)?;
                    pool.check_range(slots, "insert")?;
                }
            }
        }
        let args = (split_end, priority, inserted_len);
        let mut buf = std::mem::take(&mut self.key_buf);
        let r = self.insert_keys(ns, plan, K::keys(tokens, matched, &mut buf), slots, args);
        self.key_buf = buf;
        r
    }

    /// `insert_impl` once everything is checked, with int32 keys (valid from the plan's
    /// `matched` on).
    fn insert_keys<T: SlotOut>(
        &mut self,
        ns: &[u8],
        plan: Option<super::tree::Walk>,
        tokens: &[i32],
        slots: &[T],
        (split_end, priority, inserted_len): (bool, f64, usize),
    ) -> Result<(usize, u32)> {
        let matched = plan_matched(plan.as_ref());
        if let Some(s) = T::as_slots(slots) {
            return self.insert_checked(ns, plan, tokens, s, split_end, priority, inserted_len);
        }
        let mut wide = std::mem::take(&mut self.wide_buf);
        // The prefix is never read: it keeps whatever an earlier insert left there.
        if wide.len() < slots.len() {
            wide.resize(slots.len(), 0);
        }
        widen_slots(&mut wide[matched..slots.len()], &slots[matched..]);
        let r = self.insert_checked(
            ns,
            plan,
            tokens,
            &wide[..slots.len()],
            split_end,
            priority,
            inserted_len,
        );
        self.wide_buf = wide;
        r
    }

    /// The rest of an insert once lengths, priority, tokens and slot signs / ranges passed.
    #[allow(clippy::too_many_arguments)] // the insert's arguments plus the plan
    fn insert_checked(
        &mut self,
        ns: &[u8],
        plan: Option<super::tree::Walk>,
        tokens: &[i32],
        slots: &[Slot],
        split_end: bool,
        priority: f64,
        inserted_len: usize,
    ) -> Result<(usize, u32)> {
        let matched = plan_matched(plan.as_ref());
        let usable = self.tree.usable(tokens.len());
        let new = &slots[matched..usable];
        // With partial pages the tail page goes in too (if it is new: decided after the
        // whole pages are in, so validated now as if it were).
        let tail = if self.partial_pages && usable < tokens.len() {
            &slots[usable..]
        } else {
            &[][..]
        };
        let Some(pool) = &self.pool else {
            let top = new.iter().chain(tail).copied().max().unwrap_or(-1);
            self.max_slot = self.max_slot.max(top);
            return Ok(self.commit_with_tail(
                ns,
                plan,
                tokens,
                slots,
                (split_end, priority, inserted_len),
                None,
            ));
        };
        let pool = pool.clone();
        let mut pool = lock_pool(&pool);
        check_whole_pages(new, pool.page_size())?;
        if !tail.is_empty() {
            check_page_start(tail, pool.page_size())?;
            pool.check_out(tail, "insert (partial last page)")?;
        }
        pool.take_for_cache(new)?;
        Ok(self.commit_with_tail(
            ns,
            plan,
            tokens,
            slots,
            (split_end, priority, inserted_len),
            Some(&mut pool),
        ))
    }

    /// Commits the whole pages, then (partial pages on) the tail: stored as a partial leaf
    /// under the path's end unless a child there starts with it. Returns (tokens the caller
    /// keeps, end): with the tail already present the caller keeps every slot.
    fn commit_with_tail(
        &mut self,
        ns: &[u8],
        plan: Option<super::tree::Walk>,
        tokens: &[i32],
        slots: &[Slot],
        (split_end, priority, inserted_len): (bool, f64, usize),
        pool: Option<&mut TokenPool>,
    ) -> (usize, u32) {
        let usable = self.tree.usable(tokens.len());
        let with_tail = self.partial_pages && usable < tokens.len();
        let (present, end) = self.tree.commit_insert(
            ns,
            plan,
            tokens,
            slots,
            split_end || with_tail,
            (priority, inserted_len),
        );
        if !with_tail {
            return (present, end);
        }
        let parent = if end == NIL {
            self.tree.root_or_create(ns)
        } else {
            end
        };
        let tail = &tokens[usable..];
        if self.tree.tail_present(parent, tail) {
            // The tail is a child of `parent`, so a namespace root made above is not empty.
            // All tokens were present: the caller keeps (frees) every slot it passed.
            return (
                if present == usable {
                    tokens.len()
                } else {
                    present
                },
                end,
            );
        }
        if let Some(pool) = pool {
            pool.take_for_cache(&slots[usable..])
                .expect("checked before the commit");
        }
        self.tree.add_partial_leaf(parent, tail, &slots[usable..]);
        (present, end)
    }

    /// Returns the tokens that became protected.
    pub fn lock(&mut self, h: NodeHandle) -> Result<usize> {
        self.tree.lock(h)
    }

    /// Returns the tokens that became evictable.
    pub fn unlock(&mut self, h: NodeHandle) -> Result<usize> {
        self.tree.unlock(h)
    }

    /// `lock(to)` then `unlock(from)` in one step (nothing changes if the unlock would fail);
    /// returns the change in protected tokens.
    pub fn move_lock(&mut self, from: NodeHandle, to: NodeHandle) -> Result<isize> {
        self.tree.move_lock(from, to)
    }

    /// A running request's checkpoint, in one call: `insert_node_from(tokens, slots, priority,
    /// inserted_len)`; then, when `0 < boundary < tokens.len()`, the same for
    /// `tokens[..boundary]` with `priority + 1` and `inserted_len = boundary` (a split at the
    /// prompt boundary, one priority step up, so the output tail can be evicted without the
    /// prompt: `SGLang`'s `RadixCache` does this); then the request's lock moves from
    /// `lock_from` (`None`: it holds none) to the inserted path's end. Returns (tokens already
    /// cached, the path's end, change in protected tokens). Every argument, `lock_from`'s
    /// lock included, is checked before anything changes: on error the cache is as it was.
    #[allow(clippy::too_many_arguments)]
    pub fn checkpoint<K: TokenId, T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
        slots: &[T],
        priority: f64,
        inserted_len: usize,
        boundary: usize,
        lock_from: Option<NodeHandle>,
    ) -> Result<(usize, NodeHandle, isize)> {
        let args = (priority, inserted_len, boundary);
        self.checkpoint_locking(ns, tokens, slots, args, lock_from, true)
    }

    /// `checkpoint` of a request that is done with its KV (`SGLang`'s final checkpoint, whose
    /// caller unlocks right after): the same inserts, then `lock_from`'s lock (if any) is
    /// released instead of moved, and the path's end is left unlocked. The change in
    /// protected tokens is then <= 0.
    #[allow(clippy::too_many_arguments)]
    pub fn checkpoint_release<K: TokenId, T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
        slots: &[T],
        priority: f64,
        inserted_len: usize,
        boundary: usize,
        lock_from: Option<NodeHandle>,
    ) -> Result<(usize, NodeHandle, isize)> {
        let args = (priority, inserted_len, boundary);
        self.checkpoint_locking(ns, tokens, slots, args, lock_from, false)
    }

    /// `checkpoint` (`keep`: the lock moves to the end) or `checkpoint_release`.
    fn checkpoint_locking<K: TokenId, T: SlotOut>(
        &mut self,
        ns: &[u8],
        tokens: &[K],
        slots: &[T],
        (priority, inserted_len, boundary): (f64, usize, usize),
        lock_from: Option<NodeHandle>,
        keep: bool,
    ) -> Result<(usize, NodeHandle, isize)> {
        if let Some(f) = lock_from {
            self.tree.check_unlockable(f)?;
        }
        let split = 0 < boundary && boundary < tokens.len();
        if split {
            // priority + 1 must stay finite too (checked here, before the first insert)
            check_priority(priority + 1.0)?;
        }
        let (present, end_idx) =
            self.insert_impl(ns, tokens, slots, true, priority, inserted_len)?;
        if split {
            let b = self.tree.usable(boundary);
            if self.partial_pages && b < boundary {
                // a boundary inside a page: that insert's partial-tail rules apply
                self.insert_node_from(
                    ns,
                    &tokens[..boundary],
                    &slots[..boundary],
                    priority + 1.0,
                    boundary,
                )
                .expect("a prefix of the slots just inserted is valid");
            } else if b > 0 {
                // every whole page of tokens[..boundary] is on the path just inserted (it
                // ends at depth usable(len) >= b): the same effect as inserting them again,
                // found from the end up, without a second descent or second slot checks
                self.tree.restamp_prefix(end_idx, b, priority + 1.0);
            }
        }
        let end = self.tree.end_handle(end_idx);
        let delta = match (lock_from, keep) {
            (None, true) => self.tree.lock(end)? as isize,
            (Some(f), true) => self.tree.move_lock(f, end)?,
            (None, false) => 0,
            (Some(f), false) => -(self.tree.unlock(f)? as isize),
        };
        Ok((present, end, delta))
    }

    pub fn path_slots(&self, h: NodeHandle) -> Result<Vec<Slot>> {
        self.tree.path_slots(h)
    }

    pub fn node_info(&self, h: NodeHandle) -> Result<NodeInfo> {
        self.tree.node_info(h)
    }

    pub fn node_view(&self, h: NodeHandle) -> Result<NodeView> {
        self.tree.node_view(h)
    }

    /// Events since the last call (empty with events off).
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        self.tree.take_events()
    }

    /// Evicts unlocked leaves in the policy's order until `num_tokens` are freed (or nothing
    /// is evictable) and returns the freed slot ids; with a pool they are already back in it.
    pub fn evict_slots(&mut self, num_tokens: usize) -> Vec<Slot> {
        // whole leaves go, so usually a little more than asked; no more than the tree holds
        let mut out = Vec::with_capacity(num_tokens.min(self.tree.evictable_size()));
        self.tree.evict_into(num_tokens, &mut out);
        if let Some(pool) = &self.pool {
            lock_pool(pool).release_from_cache(&out);
        }
        out
    }

    pub fn evict(&mut self, num_tokens: usize) -> usize {
        self.evict_slots(num_tokens).len()
    }

    /// Drops every cached node (their handles go stale) and returns their slots; with a pool
    /// they are already back in it. Refused while anything is locked.
    pub fn reset(&mut self) -> Result<Vec<Slot>> {
        let out = self.tree.reset()?;
        if let Some(pool) = &self.pool {
            lock_pool(pool).release_from_cache(&out);
        }
        Ok(out)
    }

    /// `n` slots from the pool, evicting leaves first if the pool is short. Fails with
    /// `OutOfSlots`, having evicted nothing, when even evicting everything evictable would
    /// not be enough.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<Slot>> {
        let mut out = vec![0; n];
        self.alloc_into(&mut out)?;
        Ok(out)
    }

    /// `alloc(out.len())` written into `out` (a caller's buffer, e.g. a fresh `NumPy` array).
    /// Pool ids always fit int32, so `out` may be either width.
    pub fn alloc_into<T: SlotOut>(&mut self, out: &mut [T]) -> Result<()> {
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
        if available < n && self.partial_pages {
            // Partial-page leaves hold part of a page: evicting a token may free a whole page
            // (the last cached token of a page whose other slots are free) or nothing (a page
            // still partly out), so evict until the pool has enough (or nothing is left), then
            // allocate. Refused at once only when even a whole page per evictable token would
            // not be enough; unlike below, this may evict and still fail with `OutOfSlots`.
            let reachable =
                available.saturating_add(self.tree.evictable_size().saturating_mul(g.page_size()));
            if reachable < n {
                return Err(CoreError::OutOfSlots {
                    requested: n,
                    available: reachable,
                });
            }
            while g.available() < n && self.tree.evictable_size() > 0 {
                let buf = &mut self.evicted_buf;
                buf.clear();
                let short = n - g.available();
                self.tree.evict_into(short, buf);
                g.release_from_cache(buf);
            }
            return g.alloc_into(out);
        }
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
                copy_slots(&mut out[reused..reused + k], &v[..k]);
                surplus.extend_from_slice(&v[k..]);
                reused += k;
            });
            g.alloc_after_evict(reused, surplus, out);
            return Ok(());
        }
        g.alloc_into(out)
    }

    /// Tree invariants, plus pool conservation: every slot the tree holds is `Cached` in the
    /// pool, exactly once, and the pool's cached count equals the tree's size; and no held id
    /// is above the `max_slot` watermark.
    pub fn check(&self) -> Result<()> {
        let held = self.tree.check()?;
        if let Some(&s) = held
            .iter()
            .find(|&&s| s > self.max_slot && self.pool.is_none())
        {
            return Err(CoreError::InvariantViolation(format!(
                "slot {s} above the recorded maximum {}",
                self.max_slot
            )));
        }
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
            for n in &self.tree.arena.nodes {
                if !n.is_free() && !n.is_root() {
                    out.extend_from_slice(n.value());
                }
            }
            g.release_from_cache(&out);
            g.detach();
        }
    }
}

/// A partial page's slots: the first ones of one pool page, in order.
fn check_page_start(slots: &[Slot], p: usize) -> Result<()> {
    let first = slots[0];
    let ok = (first as u64).is_multiple_of(p as u64)
        && slots
            .iter()
            .enumerate()
            .all(|(k, &s)| s == first + k as Slot);
    if !ok {
        return Err(CoreError::invalid(format!(
            "insert: the partial last page's slots {slots:?} are not the start of one pool page \
             (page_size {p})"
        )));
    }
    Ok(())
}

fn check_whole_pages(slots: &[Slot], p: usize) -> Result<()> {
    if p == 1 {
        return Ok(());
    }
    for page in slots.chunks(p) {
        let first = page[0];
        let whole = (first as u64).is_multiple_of(p as u64)
            && page.len() == p
            && page
                .iter()
                .enumerate()
                .all(|(k, &s)| s == first + k as Slot);
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
        for n in &self.arena.nodes {
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
