//! The one error type of the core. The binding crate maps each variant to a Python exception
//! class in one place (`radixkv-py/src/errors.rs`); nothing here knows about Python.

use thiserror::Error;

pub type Result<T> = std::result::Result<T, CoreError>;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CoreError {
    /// A pool (token slots) cannot satisfy a request, even after evicting what is evictable.
    #[error("out of slots: requested {requested}, available {available}")]
    OutOfSlots { requested: usize, available: usize },

    /// The block allocator has too few free blocks.
    #[error("out of blocks: requested {requested}, free {free}")]
    OutOfBlocks { requested: usize, free: usize },

    /// An argument is malformed: wrong length, out of range, negative, ...
    #[error("{0}")]
    InvalidArgument(String),

    /// A node handle whose node was evicted (its generation no longer matches).
    #[error("stale node handle: {0}")]
    StaleHandle(String),

    /// `unlock()` of a node whose `lock_ref` is already 0.
    #[error("node is not locked: {0}")]
    NotLocked(String),

    /// A sequence id the block allocator does not know (or one that already exists, for fork).
    #[error("{0}")]
    UnknownSequence(String),

    /// A slot or block freed that is already free, or that the cache still holds.
    #[error("{0}")]
    DoubleFree(String),

    /// `check()` found a broken invariant: a bug in radixkv, never the caller's fault.
    #[error("invariant violated: {0}")]
    InvariantViolation(String),
}

impl CoreError {
    pub fn invalid(msg: impl Into<String>) -> Self {
        CoreError::InvalidArgument(msg.into())
    }
}
