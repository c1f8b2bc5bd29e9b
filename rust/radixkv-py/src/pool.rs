//! `radixkv.TokenPool`: the slot / page allocator (radixkv-core `pool`).
//!
//! The core pool sits behind an `Arc<Mutex<_>>` because a `RadixCache` built on it shares it:
//! evictions free into it, and `pool.available` must see them.

use pyo3::prelude::*;
use radixkv_core::pool::TokenPool;
use radixkv_core::radix::{lock_pool, shared_pool, SharedPool};

use crate::convert::maybe_detach;
use crate::errors::{CoreResultExt, InvalidArgument};
use crate::slots::{new_array, slot_input, SlotDtype};

/// A count argument (`n`, `num_slots`, ...): negative values are `InvalidArgument`, not
/// `OverflowError`.
pub fn count(n: i64, what: &str) -> PyResult<usize> {
    usize::try_from(n)
        .map_err(|_| InvalidArgument::new_err(format!("{what} must be >= 0, got {n}")))
}

#[pyclass(name = "TokenPool", module = "radixkv._core", frozen)]
pub struct PyTokenPool {
    pub(crate) inner: SharedPool,
}

#[pymethods]
impl PyTokenPool {
    #[new]
    #[pyo3(signature = (num_slots, page_size = 1))]
    fn new(num_slots: i64, page_size: i64) -> PyResult<Self> {
        let pool = TokenPool::new(
            count(num_slots, "num_slots")?,
            count(page_size, "page_size")?,
        )
        .py()?;
        Ok(Self {
            inner: shared_pool(pool),
        })
    }

    /// `n` slots (int32 unless `dtype` says int64), whole pages: `n` must be a multiple of
    /// `page_size`.
    #[pyo3(signature = (n, *, dtype = None))]
    fn alloc<'py>(
        &self,
        py: Python<'py>,
        n: i64,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count(n, "n")?;
        let mut g = lock_pool(&self.inner);
        match SlotDtype::parse(dtype, SlotDtype::I32)? {
            SlotDtype::I32 => new_array::<i32>(py, n, |b| g.alloc_into(b)),
            SlotDtype::I64 => new_array::<i64>(py, n, |b| g.alloc_into(b)),
        }
    }

    /// Returns slots from `alloc`. Double frees, out-of-range ids and slots the cache holds are
    /// refused (`DoubleFree` / `InvalidArgument`), and then nothing is freed.
    fn free(&self, py: Python<'_>, slots: &Bound<'_, PyAny>) -> PyResult<()> {
        let s = slot_input(slots, "slots")?;
        let s = s.as_slice();
        maybe_detach(py, s.len(), || lock_pool(&self.inner).free(s)).py()
    }

    #[getter]
    fn available(&self) -> usize {
        lock_pool(&self.inner).available()
    }

    #[getter]
    fn num_slots(&self) -> usize {
        lock_pool(&self.inner).num_slots()
    }

    #[getter]
    fn page_size(&self) -> usize {
        lock_pool(&self.inner).page_size()
    }

    /// Slots handed out by `alloc`, neither freed nor inserted into the cache.
    #[getter]
    fn num_out(&self) -> usize {
        lock_pool(&self.inner).num_out()
    }

    /// Slots held by the radix cache built on this pool.
    #[getter]
    fn num_cached(&self) -> usize {
        lock_pool(&self.inner).num_cached()
    }

    /// Recomputes the pool's counters and free list; raises `InvariantViolation` on a mismatch.
    fn check(&self) -> PyResult<()> {
        lock_pool(&self.inner).check().py()
    }

    fn __repr__(&self) -> String {
        let g = lock_pool(&self.inner);
        format!(
            "TokenPool(num_slots={}, page_size={}, available={})",
            g.num_slots(),
            g.page_size(),
            g.available()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyTokenPool>()
}
