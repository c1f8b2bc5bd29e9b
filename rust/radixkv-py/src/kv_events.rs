//! `BlockStored`, `BlockRemoved`, `AllBlocksCleared`: the KV events `RadixCache.take_events()`
//! returns, named and shaped like `SGLang`'s and `vLLM`'s (`block_hashes`, `parent_block_hash`,
//! `token_ids`, `block_size`), plus the namespace the pages belong to.

use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;
use radixkv_core::radix::KvEvent;

use crate::namespace;

/// Pages the cache stored: one chained hash per page, the hash of the page before them (None
/// at the start of a namespace), their token ids, `block_size` (the page size) and namespace.
/// Hashes are signed 64-bit, as `SGLang` publishes them (`hash_str_to_int64`): the core's
/// unsigned hash with the same bits.
#[pyclass(name = "BlockStored", module = "radixkv._core", frozen)]
pub struct PyBlockStored {
    #[pyo3(get)]
    block_hashes: Vec<i64>,
    #[pyo3(get)]
    parent_block_hash: Option<i64>,
    #[pyo3(get)]
    token_ids: Vec<i32>,
    #[pyo3(get)]
    block_size: usize,
    #[pyo3(get)]
    namespace: Py<PyAny>,
}

#[pymethods]
impl PyBlockStored {
    fn __repr__(&self) -> String {
        format!(
            "BlockStored({} blocks, {} tokens, parent={:?})",
            self.block_hashes.len(),
            self.token_ids.len(),
            self.parent_block_hash
        )
    }
}

/// Pages the cache evicted, by hash (signed, as in `BlockStored`).
#[pyclass(name = "BlockRemoved", module = "radixkv._core", frozen)]
pub struct PyBlockRemoved {
    #[pyo3(get)]
    block_hashes: Vec<i64>,
}

#[pymethods]
impl PyBlockRemoved {
    fn __repr__(&self) -> String {
        format!("BlockRemoved({} blocks)", self.block_hashes.len())
    }
}

/// Everything was dropped (`RadixCache.reset()`).
#[pyclass(name = "AllBlocksCleared", module = "radixkv._core", frozen)]
pub struct PyAllBlocksCleared {}

#[pymethods]
impl PyAllBlocksCleared {
    #[allow(clippy::unused_self)] // a method: Python calls it on the instance
    fn __repr__(&self) -> String {
        "AllBlocksCleared()".into()
    }
}

/// The core's unsigned hash as the signed int64 with the same bits (`SGLang`'s convention).
#[allow(clippy::cast_possible_wrap)] // the wrap is the conversion
fn signed(h: u64) -> i64 {
    h as i64
}

pub fn to_python(py: Python<'_>, e: KvEvent, block_size: usize) -> PyResult<Py<PyAny>> {
    match e {
        KvEvent::Stored {
            hashes,
            parent,
            tokens,
            namespace: ns,
        } => PyBlockStored {
            block_hashes: hashes.into_iter().map(signed).collect(),
            parent_block_hash: parent.map(signed),
            token_ids: tokens,
            block_size,
            namespace: namespace::decode(py, &ns)?.unbind(),
        }
        .into_py_any(py),
        KvEvent::Removed { hashes } => PyBlockRemoved {
            block_hashes: hashes.into_iter().map(signed).collect(),
        }
        .into_py_any(py),
        KvEvent::AllCleared => PyAllBlocksCleared {}.into_py_any(py),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBlockStored>()?;
    m.add_class::<PyBlockRemoved>()?;
    m.add_class::<PyAllBlocksCleared>()?;
    Ok(())
}
