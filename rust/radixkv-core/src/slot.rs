//! Slot ids: what the pool hands out and the radix tree stores.

/// A slot id. Non-negative; int64 so that engines with more than 2**31 slots (or their own
/// id scheme) can hand their ids over unchanged.
pub type Slot = i64;

/// An element type slot ids can be written as: int64 as is, int32 narrowed. Writers of int32
/// check first that every id fits (`TokenPool` ids always do; a `RadixCache` tracks the largest
/// id it ever held).
pub trait SlotOut: Copy + Default {
    fn from_slot(s: Slot) -> Self;
    fn to_slot(self) -> Slot;
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
}
