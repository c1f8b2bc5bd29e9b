//! `TokenPool`: the slot / page allocator of one KV pool.
//!
//! Slots are handed out in whole pages: page `p` is slots `p*page_size .. (p+1)*page_size`.
//! Every slot is in exactly one of three states:
//!
//! - `Free`: in the pool (its page is on the free list once *all* of the page's slots are free);
//! - `Out`: handed to the caller by `alloc`, not yet freed nor inserted into a radix cache;
//! - `Cached`: held by the radix cache attached to this pool (`RadixCache::insert` moved it there;
//!   eviction moves it back to `Free`). The caller may not free a cached slot.
//!
//! That three-way split is what makes "free + cached + out == `num_slots`" checkable, and double
//! frees O(1) per slot to detect. Every public call validates everything before changing anything.

use crate::error::{CoreError, Result};
use crate::slot::{Slot, SlotOut};

#[cfg(test)]
mod check_tests;
#[cfg(test)]
pub(crate) mod corrupt;

/// Where one slot is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SlotState {
    Free = 0,
    Out = 1,
    Cached = 2,
}

#[derive(Debug)]
pub struct TokenPool {
    page_size: usize,
    state: Vec<SlotState>,
    /// Free slots per page; only kept when `page_size > 1` (with one slot a page, `state` says it).
    page_free: Vec<u32>,
    /// Pages whose slots are all free; popped from the end (LIFO keeps recently freed pages hot).
    free_pages: Vec<u32>,
    num_out: usize,
    num_cached: usize,
    /// Set while a `RadixCache` uses this pool: two caches on one pool would each think the
    /// other's cached slots are theirs.
    attached: bool,
}

impl TokenPool {
    /// `num_slots` must be a positive multiple of `page_size` and fit in int32 ids (so every
    /// id it hands out can be written as int32 or int64 alike).
    pub fn new(num_slots: usize, page_size: usize) -> Result<Self> {
        if page_size == 0 {
            return Err(CoreError::invalid("page_size must be >= 1"));
        }
        if num_slots == 0 || !num_slots.is_multiple_of(page_size) {
            return Err(CoreError::invalid(format!(
                "num_slots must be a positive multiple of page_size ({page_size}), got {num_slots}"
            )));
        }
        if num_slots > i32::MAX as usize {
            return Err(CoreError::invalid(format!(
                "num_slots {num_slots} does not fit in int32 slot ids"
            )));
        }
        let num_pages = num_slots / page_size;
        // Reversed so that the first allocations return ascending ids (deterministic, readable).
        let free_pages: Vec<u32> = (0..num_pages as u32).rev().collect();
        let page_free = if page_size > 1 {
            vec![page_size as u32; num_pages]
        } else {
            Vec::new()
        };
        Ok(Self {
            page_size,
            state: vec![SlotState::Free; num_slots],
            page_free,
            free_pages,
            num_out: 0,
            num_cached: 0,
            attached: false,
        })
    }

    pub fn num_slots(&self) -> usize {
        self.state.len()
    }

    pub fn page_size(&self) -> usize {
        self.page_size
    }

    /// Slots `alloc` can hand out now: whole free pages times `page_size`. Slots freed one by one
    /// from a page still partly in use count only once the page is whole again.
    pub fn available(&self) -> usize {
        self.free_pages.len() * self.page_size
    }

    /// Slots handed out by `alloc` and neither freed nor inserted into the cache.
    pub fn num_out(&self) -> usize {
        self.num_out
    }

    /// Slots held by the attached radix cache.
    pub fn num_cached(&self) -> usize {
        self.num_cached
    }

    pub fn state(&self, slot: usize) -> Option<SlotState> {
        self.state.get(slot).copied()
    }

    /// Hands out `n` slots (`n / page_size` whole pages). `n` must be a multiple of `page_size`.
    pub fn alloc(&mut self, n: usize) -> Result<Vec<Slot>> {
        let mut out = vec![0; n];
        self.alloc_into(&mut out)?;
        Ok(out)
    }

    /// `alloc(out.len())` written into `out` (a caller's buffer, e.g. a fresh `NumPy` array).
    pub fn alloc_into<T: SlotOut>(&mut self, out: &mut [T]) -> Result<()> {
        let n = out.len();
        if !n.is_multiple_of(self.page_size) {
            return Err(CoreError::invalid(format!(
                "alloc({n}): n must be a multiple of page_size ({})",
                self.page_size
            )));
        }
        let pages = n / self.page_size;
        if pages > self.free_pages.len() {
            return Err(CoreError::OutOfSlots {
                requested: n,
                available: self.available(),
            });
        }
        self.pop_pages_into(out);
        self.num_out += n;
        Ok(())
    }

    /// Fills `out` with whole free pages (availability checked by the caller), marking their
    /// slots `Out`.
    fn pop_pages_into<T: SlotOut>(&mut self, out: &mut [T]) {
        if self.page_size == 1 {
            // Pages are slots: take the tail of the free list in pop order, in bulk.
            let start = self.free_pages.len() - out.len();
            for (o, &s) in out.iter_mut().zip(self.free_pages[start..].iter().rev()) {
                *o = T::from_slot(Slot::from(s));
                self.state[s as usize] = SlotState::Out;
            }
            self.free_pages.truncate(start);
            return;
        }
        for chunk in out.chunks_exact_mut(self.page_size) {
            let page = self.free_pages.pop().expect("checked by the caller") as usize;
            let first = page * self.page_size;
            for (k, o) in chunk.iter_mut().enumerate() {
                self.state[first + k] = SlotState::Out;
                *o = T::from_slot((first + k) as Slot);
            }
            self.page_free[page] = 0;
        }
    }

    /// Returns slots handed out by `alloc`. Rejects (changing nothing) a slot out of range, one
    /// already free, one listed twice, or one the radix cache holds.
    pub fn free(&mut self, slots: &[Slot]) -> Result<()> {
        self.transition(slots, SlotState::Out, SlotState::Free)?;
        self.release_all(slots);
        self.num_out -= slots.len();
        Ok(())
    }

    /// Whether every id is in `[0, num_slots)`. For `s` in range both `s` and `last - s` are
    /// non-negative; an id below or above makes one of them negative. So an OR of both over
    /// the slice has its sign bit set exactly when some id is out of range: a branch-free fold
    /// of subtractions and ORs that vectorises with baseline SSE2 (an unsigned max does not,
    /// and an early-exit `find` never does).
    pub fn in_range<T: SlotOut>(&self, slots: &[T]) -> bool {
        T::all_in(slots, (self.num_slots() - 1) as Slot)
    }

    /// Range check of caller-given slot ids, without looking at states.
    pub fn check_range<T: SlotOut>(&self, slots: &[T], what: &str) -> Result<()> {
        let n = self.num_slots();
        if !self.in_range(slots) {
            let bad = slots
                .iter()
                .map(|&s| s.to_slot())
                .find(|&s| s < 0 || s as u64 >= n as u64)
                .expect("an id out of range exists");
            return Err(CoreError::invalid(format!(
                "{what}: slot {bad} is out of range [0, {n})"
            )));
        }
        Ok(())
    }

    /// Moves `slots` from `from` to `to` if every one is in range, in state `from`, and listed
    /// once; otherwise restores what it touched and explains the first offender.
    fn transition(&mut self, slots: &[Slot], from: SlotState, to: SlotState) -> Result<()> {
        self.check_range(slots, "free")?;
        for (i, &s) in slots.iter().enumerate() {
            let st = self.state[s as usize];
            if st != from {
                let err = Self::state_error(s, st, from);
                for &t in &slots[..i] {
                    self.state[t as usize] = from;
                }
                return Err(err);
            }
            // Marking as we go makes a repeated id show up as already moved.
            self.state[s as usize] = to;
        }
        Ok(())
    }

    fn state_error(s: Slot, st: SlotState, wanted: SlotState) -> CoreError {
        match (st, wanted) {
            (SlotState::Free, SlotState::Out) => {
                CoreError::DoubleFree(format!("slot {s} is already free (or listed twice)"))
            }
            (SlotState::Cached, SlotState::Out) => CoreError::DoubleFree(format!(
                "slot {s} is held by the radix cache (or listed twice); the cache frees it on eviction"
            )),
            _ => CoreError::invalid(format!("slot {s} is {st:?}, expected {wanted:?}")),
        }
    }

    /// Puts slots already marked `Free` back on the free list (whole pages only).
    fn release_all(&mut self, slots: &[Slot]) {
        if self.page_size == 1 {
            // One bulk append instead of a push per slot (eviction frees thousands at once).
            self.free_pages.extend(slots.iter().map(|&s| s as u32));
            return;
        }
        for &s in slots {
            let page = s as usize / self.page_size;
            self.page_free[page] += 1;
            if self.page_free[page] as usize == self.page_size {
                self.free_pages.push(page as u32);
            }
        }
    }

    /// Whether every slot (range-checked by the caller) is `Out` and listed once; names the
    /// first that is not.
    pub(crate) fn check_out(&self, slots: &[Slot], what: &str) -> Result<()> {
        for (i, &s) in slots.iter().enumerate() {
            if self.state[s as usize] != SlotState::Out || slots[..i].contains(&s) {
                return Err(CoreError::invalid(format!(
                    "{what}: slot {s} is not allocated (or listed twice)"
                )));
            }
        }
        Ok(())
    }

    /// `Out` -> `Cached` for slots a radix cache takes over (insert). All or nothing. The
    /// caller has range-checked the ids (insert checks all of its slots in one pass).
    pub(crate) fn take_for_cache(&mut self, slots: &[Slot]) -> Result<()> {
        debug_assert!(self.in_range(slots));
        for (i, &s) in slots.iter().enumerate() {
            let st = self.state[s as usize];
            if st != SlotState::Out {
                for &t in &slots[..i] {
                    self.state[t as usize] = SlotState::Out;
                }
                let why = match st {
                    SlotState::Free => "is free (not allocated)",
                    _ => "is already held by the cache (or listed twice)",
                };
                return Err(CoreError::invalid(format!("insert: slot {s} {why}")));
            }
            self.state[s as usize] = SlotState::Cached;
        }
        self.num_out -= slots.len();
        self.num_cached += slots.len();
        Ok(())
    }

    /// `Cached` -> `Free` for slots the cache evicted. Trusted caller (the cache).
    pub(crate) fn release_from_cache(&mut self, slots: &[Slot]) {
        for &s in slots {
            debug_assert_eq!(self.state[s as usize], SlotState::Cached);
            self.state[s as usize] = SlotState::Free;
        }
        self.release_all(slots);
        self.num_cached -= slots.len();
    }

    /// Completes an allocation that eviction fed: `out[..reused]` already holds slots just
    /// evicted from the cache (whole pages, still `Cached` here), which go straight to `Out`
    /// without a round trip through the free list; `surplus` (evicted beyond the need) goes
    /// back to the pool; the rest of `out` comes from the free list. The caller made sure the
    /// free list covers the rest.
    pub(crate) fn alloc_after_evict<T: SlotOut>(
        &mut self,
        reused: usize,
        surplus: &[Slot],
        out: &mut [T],
    ) {
        self.release_from_cache(surplus);
        let (from_cache, rest) = out.split_at_mut(reused);
        for &s in from_cache.iter() {
            let s = s.to_slot() as usize;
            debug_assert_eq!(self.state[s], SlotState::Cached);
            self.state[s] = SlotState::Out;
        }
        self.num_cached -= reused;
        self.pop_pages_into(rest);
        self.num_out += out.len();
    }

    pub(crate) fn attach(&mut self) -> Result<()> {
        if self.attached {
            return Err(CoreError::invalid(
                "this TokenPool already serves another RadixCache",
            ));
        }
        self.attached = true;
        Ok(())
    }

    pub(crate) fn detach(&mut self) {
        self.attached = false;
    }

    /// Recomputes every counter from the per-slot states and checks the free list.
    pub fn check(&self) -> Result<()> {
        let bad = |m: String| Err(CoreError::InvariantViolation(format!("TokenPool: {m}")));
        let (mut out, mut cached) = (0usize, 0usize);
        for st in &self.state {
            match st {
                SlotState::Free => {}
                SlotState::Out => out += 1,
                SlotState::Cached => cached += 1,
            }
        }
        if out != self.num_out || cached != self.num_cached {
            return bad(format!(
                "counters out={} cached={} but states say out={out} cached={cached}",
                self.num_out, self.num_cached
            ));
        }
        let ps = self.page_size;
        let num_pages = self.num_slots() / ps;
        let mut listed = vec![false; num_pages];
        for &p in &self.free_pages {
            let p = p as usize;
            if p >= num_pages || listed[p] {
                return bad(format!(
                    "page {p} out of range or listed twice on the free list"
                ));
            }
            listed[p] = true;
        }
        for (p, &is_listed) in listed.iter().enumerate() {
            let slots = &self.state[p * ps..(p + 1) * ps];
            let nfree = slots.iter().filter(|&&s| s == SlotState::Free).count();
            if ps > 1 && self.page_free[p] as usize != nfree {
                return bad(format!(
                    "page {p}: counter {} vs {nfree} free",
                    self.page_free[p]
                ));
            }
            if is_listed != (nfree == ps) {
                return bad(format!(
                    "page {p}: {nfree}/{ps} slots free but on free list = {is_listed}"
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn alloc_free_roundtrip() {
        let mut p = TokenPool::new(8, 1).unwrap();
        let a = p.alloc(3).unwrap();
        assert_eq!(a, vec![0, 1, 2]);
        assert_eq!(p.available(), 5);
        p.free(&a[1..]).unwrap();
        assert_eq!(p.available(), 7);
        p.check().unwrap();
    }

    #[test]
    fn double_free_changes_nothing() {
        let mut p = TokenPool::new(4, 1).unwrap();
        let a = p.alloc(2).unwrap();
        assert!(matches!(
            p.free(&[a[0], a[0]]),
            Err(CoreError::DoubleFree(_))
        ));
        assert_eq!(p.available(), 2);
        assert_eq!(p.num_out(), 2);
        assert!(matches!(p.free(&[a[0], 3]), Err(CoreError::DoubleFree(_))));
        assert!(matches!(p.free(&[4]), Err(CoreError::InvalidArgument(_))));
        assert!(matches!(p.free(&[-1]), Err(CoreError::InvalidArgument(_))));
        p.check().unwrap();
        p.free(&a).unwrap();
        p.check().unwrap();
    }

    #[test]
    fn pages() {
        let mut p = TokenPool::new(12, 4).unwrap();
        assert!(matches!(p.alloc(3), Err(CoreError::InvalidArgument(_))));
        let a = p.alloc(8).unwrap();
        assert_eq!(a, vec![0, 1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(p.available(), 4);
        // A partly freed page is not available again until all its slots are back.
        p.free(&a[..2]).unwrap();
        assert_eq!(p.available(), 4);
        p.free(&a[2..4]).unwrap();
        assert_eq!(p.available(), 8);
        assert!(matches!(p.alloc(12), Err(CoreError::OutOfSlots { .. })));
        p.check().unwrap();
    }

    #[test]
    fn bad_construction() {
        assert!(TokenPool::new(0, 1).is_err());
        assert!(TokenPool::new(10, 0).is_err());
        assert!(TokenPool::new(10, 4).is_err());
    }

    /// `alloc_after_evict` is an allocation like `release_from_cache` + `alloc`: same counters,
    /// same slots out or free, no duplicates, the evicted slots handed out first, in order.
    #[test]
    fn alloc_after_evict_matches_release_then_alloc() {
        for page in [1usize, 2] {
            for n in [0usize, 2, 4, 6, 8] {
                let mk = || {
                    let mut p = TokenPool::new(16, page).unwrap();
                    let a = p.alloc(12).unwrap();
                    p.take_for_cache(&a).unwrap();
                    (p, a)
                };
                let (mut x, a) = mk();
                let (mut y, _) = mk();
                let evicted: Vec<Slot> = [&a[8..12], &a[2..4]].concat();
                x.release_from_cache(&evicted);
                let want = x.alloc(n).unwrap();
                let reused = n.min(evicted.len());
                let mut got: Vec<Slot> = vec![-1; n];
                got[..reused].copy_from_slice(&evicted[..reused]);
                y.alloc_after_evict(reused, &evicted[reused..], &mut got);
                assert_eq!(&got[..reused], &evicted[..reused], "page {page} n {n}");
                let sorted = |v: &[Slot]| {
                    let mut v = v.to_vec();
                    v.sort_unstable();
                    v
                };
                // Which slots go out may differ (the evicted ones first here, LIFO there), but
                // the slots out or free together are the same, and nothing else moved.
                let out_or_free = |p: &TokenPool, got: &[Slot]| {
                    let mut v: Vec<Slot> = (0..p.num_slots() as Slot)
                        .filter(|&s| p.state(s as usize) == Some(SlotState::Free))
                        .chain(got.iter().copied())
                        .collect();
                    v.sort_unstable();
                    v
                };
                assert_eq!(out_or_free(&y, &got), out_or_free(&x, &want));
                assert!(got
                    .iter()
                    .all(|&s| y.state(s as usize) == Some(SlotState::Out)));
                assert_eq!(sorted(&got).windows(2).filter(|w| w[0] == w[1]).count(), 0);
                assert_eq!((y.num_out, y.num_cached), (x.num_out, x.num_cached));
                y.check().unwrap();
            }
        }
    }

    #[test]
    fn in_range_edges() {
        let p = TokenPool::new(8, 1).unwrap();
        assert!(p.in_range::<Slot>(&[]));
        assert!(p.in_range(&[0i64, 7, 3]));
        for bad in [8, -1, i64::MIN, i64::MAX, i64::from(i32::MAX) + 1] {
            assert!(!p.in_range(&[0, bad, 1]), "{bad}");
        }
        // int32 input folds at its own width.
        assert!(p.in_range::<i32>(&[]));
        assert!(p.in_range(&[0i32, 7, 3]));
        for bad in [8, -1, i32::MIN, i32::MAX] {
            assert!(!p.in_range(&[0i32, bad, 1]), "{bad}");
        }
    }

    #[test]
    fn in_range_with_two_bad_ids() {
        // Each id's sign bits must add to the fold, not toggle it: two out-of-range ids in a
        // row (whatever side each is on) still fail.
        let p = TokenPool::new(8, 1).unwrap();
        for (a, b) in [(-1i64, -1), (-1, -2), (8, -1), (-1, 8), (9, 8)] {
            assert!(!p.in_range(&[a, b]), "{a} {b}");
            assert!(!p.in_range(&[0, a, 3, b]), "{a} {b}");
            let (a, b) = (a as i32, b as i32);
            assert!(!p.in_range(&[a, b]), "{a} {b} as int32");
            assert!(!p.in_range(&[0, a, 3, b]), "{a} {b} as int32");
        }
    }

    #[test]
    fn out_of_range_error_names_the_bad_id() {
        // Valid ids (0 and above) before the offender are not the ones named.
        let mut p = TokenPool::new(8, 1).unwrap();
        let a = p.alloc(8).unwrap();
        for bad in [8i64, 100, -3] {
            let e = p.free(&[0, 5, bad]).unwrap_err();
            assert!(matches!(e, CoreError::InvalidArgument(_)), "{e}");
            assert!(
                e.to_string()
                    .contains(&format!("slot {bad} is out of range [0, 8)")),
                "{e}"
            );
            let e = p.check_range(&[0i32, 5, bad as i32], "insert").unwrap_err();
            assert!(
                e.to_string().contains(&format!("insert: slot {bad} ")),
                "{e}"
            );
        }
        assert_eq!(p.num_out(), 8, "rejected frees change nothing");
        p.free(&a).unwrap();
        p.check().unwrap();
    }

    #[test]
    fn all_in_i32_with_a_bound_beyond_int32() {
        // No int32 id can exceed such a bound: only the sign decides.
        let last = i64::from(i32::MAX) + 5;
        assert!(i32::all_in(&[0, i32::MAX, 3], last));
        assert!(!i32::all_in(&[0, -1, 3], last));
        assert!(!i32::all_in(&[i32::MIN], last));
    }
}
