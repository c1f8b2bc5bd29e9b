//! `BlockAllocator`: the Python face of `radixkv_core::blocks::BlockAllocator`.

pub(crate) mod args;

use numpy::ndarray::Array2;
use numpy::{IntoPyArray, PyArray1, PyArray2};
use pyo3::prelude::*;
use pyo3::types::PyInt;
use radixkv_core::blocks::BlockAllocator;

use crate::convert::to_numpy;
use crate::errors::{CoreResultExt, InvalidArgument};
use crate::metadata::{ints, wrap_metadata};

/// vLLM-style paged block allocator: per-sequence block tables over `num_blocks` physical blocks
/// of `block_size` slots, with reference counts, zero-copy `fork` and copy-on-write appends.
#[pyclass(module = "radixkv._core", name = "BlockAllocator")]
pub struct PyBlockAllocator {
    inner: BlockAllocator,
}

/// `append_slots_batch`'s result: copy pairs `[k, 2]` and new-token slots.
type BatchArrays<'py> = (Bound<'py, PyArray2<i32>>, Bound<'py, PyArray1<i32>>);

fn seq(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    args::non_negative(obj, what)
}

#[pymethods]
impl PyBlockAllocator {
    #[new]
    fn new(num_blocks: &Bound<'_, PyAny>, block_size: &Bound<'_, PyAny>) -> PyResult<Self> {
        let nb = args::count(num_blocks, "num_blocks")?;
        let bs = args::count(block_size, "block_size")?;
        Ok(PyBlockAllocator {
            inner: BlockAllocator::new(nb, bs).py()?,
        })
    }

    #[getter]
    fn num_blocks(&self) -> usize {
        self.inner.num_blocks()
    }

    #[getter]
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    #[getter]
    fn num_free_blocks(&self) -> usize {
        self.inner.num_free_blocks()
    }

    #[getter]
    fn num_seqs(&self) -> usize {
        self.inner.num_seqs()
    }

    fn __len__(&self) -> usize {
        self.inner.num_seqs()
    }

    fn __contains__(&self, seq_id: &Bound<'_, PyAny>) -> bool {
        seq_id
            .extract::<u64>()
            .is_ok_and(|s| self.inner.contains(s))
    }

    fn __repr__(&self) -> String {
        format!(
            "BlockAllocator(num_blocks={}, block_size={}, free={}, seqs={})",
            self.inner.num_blocks(),
            self.inner.block_size(),
            self.inner.num_free_blocks(),
            self.inner.num_seqs()
        )
    }

    /// Live sequence ids, ascending.
    fn seq_ids(&self) -> Vec<u64> {
        self.inner.seq_ids()
    }

    /// `ceil(num_tokens / block_size)`: blocks a new sequence of that length takes.
    fn blocks_needed(&self, num_tokens: &Bound<'_, PyAny>) -> PyResult<usize> {
        Ok(self
            .inner
            .blocks_needed(args::count(num_tokens, "num_tokens")?))
    }

    /// Whether `allocate(new_id, num_tokens)` would find enough free blocks.
    fn can_allocate(&self, num_tokens: &Bound<'_, PyAny>) -> PyResult<bool> {
        Ok(self
            .inner
            .can_allocate(args::count(num_tokens, "num_tokens")?))
    }

    /// Whether `append_slots(seq_id, num_tokens)` (default 1) would succeed, counting the
    /// copy-on-write block.
    #[pyo3(signature = (seq_id, num_tokens = None))]
    fn can_append(
        &self,
        seq_id: &Bound<'_, PyAny>,
        num_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let n = args::opt_count(num_tokens, "num_tokens")?.unwrap_or(1);
        self.inner.can_append(seq(seq_id, "seq_id")?, n).py()
    }

    /// Maps `ceil(num_tokens / block_size)` fresh blocks to a new sequence.
    /// `UnknownSequence` if `seq_id` exists; `OutOfBlocks` (nothing changed) if too few are free.
    fn allocate(
        &mut self,
        seq_id: &Bound<'_, PyAny>,
        num_tokens: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let n = args::count(num_tokens, "num_tokens")?;
        self.inner.allocate(seq(seq_id, "seq_id")?, n).py()
    }

    /// Adds `num_tokens` (default 1) tokens; returns the copy-on-write pairs `[(src, dst)]`
    /// to copy on the GPU before attention (at most one). `OutOfBlocks` changes nothing.
    #[pyo3(signature = (seq_id, num_tokens = None))]
    fn append_slots(
        &mut self,
        seq_id: &Bound<'_, PyAny>,
        num_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<(i32, i32)>> {
        let n = args::opt_count(num_tokens, "num_tokens")?.unwrap_or(1);
        self.inner.append_slots(seq(seq_id, "seq_id")?, n).py()
    }

    /// `append_slots` for each of `seq_ids` in order, all or nothing (one call per decode step).
    /// Returns `(copies, slots)`: int32 `[k, 2]` copy-on-write pairs, ready for `copy_blocks`, and
    /// int32 `[len(seq_ids) * num_tokens]` slots of the new tokens (where their K/V goes).
    #[pyo3(signature = (seq_ids, num_tokens = None))]
    fn append_slots_batch<'py>(
        &mut self,
        py: Python<'py>,
        seq_ids: &Bound<'py, PyAny>,
        num_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<BatchArrays<'py>> {
        let ids = args::seq_ids(seq_ids, "seq_ids")?;
        let n = args::opt_count(num_tokens, "num_tokens")?.unwrap_or(1);
        let (copies, slots) = self.inner.append_slots_batch(&ids, n).py()?;
        let k = copies.len();
        let flat: Vec<i32> = copies.into_iter().flat_map(|(s, d)| [s, d]).collect();
        let pairs = Array2::from_shape_vec((k, 2), flat)
            .map_err(|e| InvalidArgument::new_err(format!("copy pairs shape: {e}")))?;
        Ok((pairs.into_pyarray(py), to_numpy(py, slots)))
    }

    /// Shares the parent's blocks with a new sequence (zero copy, ref counts + 1).
    fn fork(&mut self, parent_id: &Bound<'_, PyAny>, child_id: &Bound<'_, PyAny>) -> PyResult<()> {
        let (p, c) = (seq(parent_id, "parent_id")?, seq(child_id, "child_id")?);
        self.inner.fork(p, c).py()
    }

    /// Drops a sequence; each block loses a reference and is free again at 0.
    fn free(&mut self, seq_id: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner.free(seq(seq_id, "seq_id")?).py()
    }

    /// Number of tokens of the sequence.
    fn seq_len(&self, seq_id: &Bound<'_, PyAny>) -> PyResult<usize> {
        self.inner.seq_len(seq(seq_id, "seq_id")?).py()
    }

    /// References to physical `block`.
    fn ref_count(&self, block: &Bound<'_, PyAny>) -> PyResult<u32> {
        self.inner.ref_count(args::count(block, "block")?).py()
    }

    /// int32 `[ceil(len / block_size)]`: the sequence's physical blocks.
    fn block_table<'py>(
        &self,
        py: Python<'py>,
        seq_id: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i32>>> {
        Ok(to_numpy(
            py,
            self.inner
                .block_table(seq(seq_id, "seq_id")?)
                .py()?
                .to_vec(),
        ))
    }

    /// int32 `[len(seq_ids), width]` block tables padded with 0 (`width`: longest by default).
    #[pyo3(signature = (seq_ids, width = None))]
    fn block_tables<'py>(
        &self,
        py: Python<'py>,
        seq_ids: &Bound<'py, PyAny>,
        width: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray2<i32>>> {
        let ids = args::seq_ids(seq_ids, "seq_ids")?;
        let width = args::opt_count(width, "width")?;
        let (cells, w) = self.inner.block_tables(&ids, width).py()?;
        // Moved into a 2-D array without a copy (cheaper than a NumPy reshape call).
        let table = Array2::from_shape_vec((ids.len(), w), cells)
            .map_err(|e| InvalidArgument::new_err(format!("block table shape: {e}")))?;
        Ok(table.into_pyarray(py))
    }

    /// int32 physical slot of each token position `start..end` (default: the whole sequence).
    #[pyo3(signature = (seq_id, start = None, end = None))]
    fn slot_mapping<'py>(
        &self,
        py: Python<'py>,
        seq_id: &Bound<'py, PyAny>,
        start: Option<&Bound<'py, PyAny>>,
        end: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let id = seq(seq_id, "seq_id")?;
        let start = args::opt_count(start, "start")?.unwrap_or(0);
        let end = match args::opt_count(end, "end")? {
            Some(e) => e,
            None => self.inner.seq_len(id).py()?,
        };
        Ok(to_numpy(py, self.inner.slot_mapping(id, start, end).py()?))
    }

    /// CSR decode metadata over the sequences' blocks (`radixkv.DecodeMetadata`).
    fn decode_metadata<'py>(
        &self,
        py: Python<'py>,
        seq_ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = args::seq_ids(seq_ids, "seq_ids")?;
        wrap_metadata(py, "DecodeMetadata", self.inner.decode_metadata(&ids).py()?)
    }

    /// Extend metadata (`radixkv.ExtendMetadata`) over the sequences' blocks, the last
    /// `extend_lens` tokens of each being new (one count per sequence, or one int for all).
    fn extend_metadata<'py>(
        &self,
        py: Python<'py>,
        seq_ids: &Bound<'py, PyAny>,
        extend_lens: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = args::seq_ids(seq_ids, "seq_ids")?;
        let lens = if extend_lens.is_instance_of::<PyInt>() {
            let e = i32::try_from(args::count(extend_lens, "extend_lens")?)
                .map_err(|_| InvalidArgument::new_err("extend_lens: beyond int32"))?;
            vec![e; ids.len()]
        } else {
            ints(extend_lens, "extend_lens")?.as_slice().to_vec()
        };
        wrap_metadata(
            py,
            "ExtendMetadata",
            self.inner.extend_metadata(&ids, &lens).py()?,
        )
    }

    /// Block-table decode metadata (`radixkv.BlockTableMetadata`).
    #[pyo3(signature = (seq_ids, width = None))]
    fn block_table_metadata<'py>(
        &self,
        py: Python<'py>,
        seq_ids: &Bound<'py, PyAny>,
        width: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ids = args::seq_ids(seq_ids, "seq_ids")?;
        let width = args::opt_count(width, "width")?;
        let m = self.inner.block_table_metadata(&ids, width).py()?;
        wrap_metadata(py, "BlockTableMetadata", m)
    }

    /// Verifies every invariant; `InvariantViolation` names the first one broken.
    fn check(&self) -> PyResult<()> {
        self.inner.check().py()
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyBlockAllocator>()?;
    Ok(())
}
