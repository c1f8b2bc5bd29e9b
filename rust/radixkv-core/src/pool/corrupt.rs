//! Test-only hooks that break a `TokenPool` on purpose (see `check_tests.rs`).

use super::{SlotState, TokenPool};

pub(crate) fn shift_counters(p: &mut TokenPool, out: isize, cached: isize) {
    p.num_out = p.num_out.wrapping_add_signed(out);
    p.num_cached = p.num_cached.wrapping_add_signed(cached);
}

pub(crate) fn set_state(p: &mut TokenPool, slot: usize, st: SlotState) {
    p.state[slot] = st;
}

pub(crate) fn push_free_page(p: &mut TokenPool, page: u32) {
    p.free_pages.push(page);
}

/// Takes `page` off the free list (wherever it is listed).
pub(crate) fn unlist_page(p: &mut TokenPool, page: u32) {
    p.free_pages.retain(|&q| q != page);
}

pub(crate) fn shift_page_counter(p: &mut TokenPool, page: usize, by: i32) {
    p.page_free[page] = p.page_free[page].wrapping_add_signed(by);
}

/// A free slot (page size 1) marked `Cached` with every counter and list following: the pool
/// is consistent in itself, but holds one cached slot no cache knows of.
pub(crate) fn mark_free_slot_cached(p: &mut TokenPool, slot: usize) {
    assert_eq!(p.page_size, 1);
    assert_eq!(p.state[slot], SlotState::Free);
    p.state[slot] = SlotState::Cached;
    p.num_cached += 1;
    unlist_page(p, slot as u32);
}
