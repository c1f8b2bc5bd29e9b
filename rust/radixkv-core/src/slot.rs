//! Slot ids: what the pool hands out and the radix tree stores.

/// A slot id. Non-negative; int64 so that engines with more than 2**31 slots (or their own
/// id scheme) can hand their ids over unchanged.
pub type Slot = i64;

/// An element type slot ids can be written as: int64 as is, int32 narrowed. Writers of int32
/// check first that every id fits (`TokenPool` ids always do; a `RadixCache` tracks the largest
/// id it ever held).
///
/// The same two widths are accepted as input (`to_slot` widens); `as_slots` lets an int64
/// input be used in place, with no copy.
pub trait SlotOut: Copy + Default {
    fn from_slot(s: Slot) -> Self;
    fn to_slot(self) -> Slot;
    /// `s` itself when `Self` is `Slot`.
    #[inline]
    fn as_slots(_s: &[Self]) -> Option<&[Slot]> {
        None
    }

    /// Whether every id is in `[0, last]` (`last` >= 0), by a branch-free fold at the
    /// input's own width: for `s` in range both `s` and `last - s` are non-negative, so an
    /// OR of both has its sign bit set exactly when some id is out of range. It vectorises.
    fn all_in(s: &[Self], last: Slot) -> bool;
}

impl SlotOut for i64 {
    #[inline]
    fn from_slot(s: Slot) -> Self {
        s
    }

    #[inline]
    fn to_slot(self) -> Slot {
        self
    }

    #[inline]
    fn as_slots(s: &[Self]) -> Option<&[Slot]> {
        Some(s)
    }

    #[inline]
    fn all_in(s: &[Self], last: Slot) -> bool {
        s.iter()
            .fold(0i64, |acc, &x| acc | x | last.wrapping_sub(x))
            >= 0
    }
}

impl SlotOut for i32 {
    #[inline]
    fn from_slot(s: Slot) -> Self {
        debug_assert!(i32::try_from(s).is_ok(), "slot {s} narrowed to int32");
        s as i32
    }

    #[inline]
    fn to_slot(self) -> Slot {
        Slot::from(self)
    }

    /// Folds in int32 (four ids per SSE2 vector, no widening). A `last` beyond int32 bounds
    /// no id of this width: only the sign is left to check.
    #[inline]
    fn all_in(s: &[Self], last: Slot) -> bool {
        match i32::try_from(last) {
            Ok(last) => {
                s.iter()
                    .fold(0i32, |acc, &x| acc | x | last.wrapping_sub(x))
                    >= 0
            }
            Err(_) => s.iter().fold(0i32, |acc, &x| acc | x) >= 0,
        }
    }
}
