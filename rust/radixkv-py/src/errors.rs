//! The Python exception hierarchy, and the one place a `CoreError` becomes a `PyErr`.
//!
//! ```text
//! RadixKVError
//! ├── InvalidArgument          bad shapes, lengths, ranges, dtypes
//! │   ├── StaleHandle          a node handle retired by eviction
//! │   ├── NotLocked            unlock() without a matching lock()
//! │   ├── UnknownSequence      a block-allocator sequence id it does not know
//! │   └── DoubleFree           a slot / block freed twice, or one the cache still holds
//! ├── OutOfSlots               the pool is short even after eviction
//! │   └── OutOfBlocks          the block allocator is short
//! └── InvariantViolation       check() failed: a bug in radixkv
//! ```

use pyo3::create_exception;
use pyo3::exceptions::PyException;
use pyo3::prelude::*;
use radixkv_core::CoreError;

create_exception!(
    radixkv,
    RadixKVError,
    PyException,
    "Base class of every radixkv error."
);
create_exception!(
    radixkv,
    InvalidArgument,
    RadixKVError,
    "An argument is malformed or out of range."
);
create_exception!(
    radixkv,
    StaleHandle,
    InvalidArgument,
    "A node handle whose node was evicted."
);
create_exception!(
    radixkv,
    NotLocked,
    InvalidArgument,
    "unlock() of a node that is not locked."
);
create_exception!(
    radixkv,
    UnknownSequence,
    InvalidArgument,
    "A sequence id the allocator does not know."
);
create_exception!(
    radixkv,
    DoubleFree,
    InvalidArgument,
    "A slot or block freed twice, or still held by the cache."
);
create_exception!(
    radixkv,
    OutOfSlots,
    RadixKVError,
    "Not enough free slots, even after eviction."
);
create_exception!(radixkv, OutOfBlocks, OutOfSlots, "Not enough free blocks.");
create_exception!(
    radixkv,
    InvariantViolation,
    RadixKVError,
    "check() found a broken invariant (a radixkv bug)."
);

#[allow(clippy::needless_pass_by_value)] // consumed by `map_err(to_py)`, the one call site
pub fn to_py(e: CoreError) -> PyErr {
    let msg = e.to_string();
    match e {
        CoreError::OutOfSlots { .. } => OutOfSlots::new_err(msg),
        CoreError::OutOfBlocks { .. } => OutOfBlocks::new_err(msg),
        CoreError::InvalidArgument(_) => InvalidArgument::new_err(msg),
        CoreError::StaleHandle(_) => StaleHandle::new_err(msg),
        CoreError::NotLocked(_) => NotLocked::new_err(msg),
        CoreError::UnknownSequence(_) => UnknownSequence::new_err(msg),
        CoreError::DoubleFree(_) => DoubleFree::new_err(msg),
        CoreError::InvariantViolation(_) => InvariantViolation::new_err(msg),
    }
}

/// `core_call().py()?` instead of `.map_err(to_py)?` everywhere.
pub trait CoreResultExt<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> CoreResultExt<T> for radixkv_core::Result<T> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("RadixKVError", py.get_type::<RadixKVError>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("StaleHandle", py.get_type::<StaleHandle>())?;
    m.add("NotLocked", py.get_type::<NotLocked>())?;
    m.add("UnknownSequence", py.get_type::<UnknownSequence>())?;
    m.add("DoubleFree", py.get_type::<DoubleFree>())?;
    m.add("OutOfSlots", py.get_type::<OutOfSlots>())?;
    m.add("OutOfBlocks", py.get_type::<OutOfBlocks>())?;
    m.add("InvariantViolation", py.get_type::<InvariantViolation>())?;
    Ok(())
}
