//! `TokenPool::check` shown to fail: each test breaks one invariant of a healthy pool through
//! the hooks in `corrupt.rs` and requires the checker to name it.

use super::corrupt as c;
use super::{SlotState, TokenPool};
use crate::error::CoreError;

/// 16 slots in pages of `page`: the first 4 slots handed out, the next 4 cached, the rest free.
fn fixture(page: usize) -> TokenPool {
    let mut p = TokenPool::new(16, page).unwrap();
    let a = p.alloc(8).unwrap();
    p.take_for_cache(&a[4..]).unwrap();
    p.check().expect("healthy");
    p
}

fn caught(page: usize, want: &str, corrupt: impl FnOnce(&mut TokenPool)) {
    let mut p = fixture(page);
    corrupt(&mut p);
    match p.check() {
        Err(CoreError::InvariantViolation(msg)) => {
            assert!(msg.contains(want), "expected {want:?}, check said {msg:?}");
        }
        other => panic!("expected an InvariantViolation about {want:?}, got {other:?}"),
    }
}

#[test]
fn counters_follow_states() {
    for page in [1, 4] {
        caught(page, "counters", |p| c::shift_counters(p, 1, 0));
        caught(page, "counters", |p| c::shift_counters(p, 0, -1));
        // A slot changing state without its counter.
        caught(page, "counters", |p| c::set_state(p, 0, SlotState::Cached));
    }
}

#[test]
fn free_list_entries_are_pages_listed_once() {
    for page in [1, 4] {
        let pages = (16 / page) as u32;
        caught(page, "listed twice", |p| c::push_free_page(p, pages - 1));
        caught(page, "out of range", |p| c::push_free_page(p, pages));
    }
}

#[test]
fn page_counters_count_free_slots() {
    caught(4, "counter", |p| c::shift_page_counter(p, 3, -1));
    caught(4, "counter", |p| c::shift_page_counter(p, 0, 1));
}

#[test]
fn free_list_is_exactly_the_whole_free_pages() {
    for page in [1, 4] {
        let last = (16 / page - 1) as u32;
        // A whole free page missing from the list.
        caught(page, "on free list = false", |p| c::unlist_page(p, last));
        // A page in use listed as free.
        caught(page, "on free list = true", |p| c::push_free_page(p, 0));
    }
    // A page with one slot out listed (its counter following the state): not whole, yet listed.
    caught(4, "on free list = true", |p| {
        c::set_state(p, 15, SlotState::Out);
        c::shift_counters(p, 1, 0);
        c::shift_page_counter(p, 3, -1);
    });
}
