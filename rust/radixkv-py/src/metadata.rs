//! Batch metadata builders: Python inputs -> `radixkv_core::metadata` -> the typed facade classes
//! of `radixkv.metadata`, which view the one int32 buffer the core filled.

use numpy::{PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyTuple};
use radixkv_core::metadata::{self, MetadataBuf};

use crate::blocks::args;
use crate::convert::{i32_input, maybe_detach, to_numpy, I32Input};
use crate::errors::{CoreResultExt, InvalidArgument};

static FACADE: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// Hands `m` to `NumPy` (one zero-copy array) and builds `radixkv.metadata.<class_name>` over it.
pub fn wrap_metadata<'py>(
    py: Python<'py>,
    class_name: &str,
    m: MetadataBuf,
) -> PyResult<Bound<'py, PyAny>> {
    let module = FACADE.get_or_try_init(py, || py.import("radixkv.metadata").map(Bound::unbind))?;
    let fields = PyList::empty(py);
    for f in &m.fields {
        fields.append((f.name, f.offset, PyTuple::new(py, &f.shape)?))?;
    }
    let scalars = PyDict::new(py);
    for &(k, v) in &m.scalars {
        scalars.set_item(k, v)?;
    }
    let buffer: Bound<'py, PyArray1<i32>> = to_numpy(py, m.data);
    module
        .bind(py)
        .getattr(class_name)?
        .call1((buffer, fields, scalars))
}

/// Reads a list / tuple of per-request int sequences.
fn per_request<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Vec<I32Input<'py>>> {
    if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
        let tn = obj
            .get_type()
            .name()
            .map_or_else(|_| "?".to_string(), |s| s.to_string());
        return Err(InvalidArgument::new_err(format!(
            "{what}: expected a list with one int sequence per request, got {tn}"
        )));
    }
    let mut out = Vec::with_capacity(obj.len()?);
    for (b, item) in obj.try_iter()?.enumerate() {
        let item = item?;
        out.push(match narrow_fast(&item) {
            Some(v) => I32Input::Owned(v),
            None => i32_input(&item, &format!("{what}[{b}]"))?,
        });
    }
    Ok(out)
}

/// One int sequence (list, `NumPy` integer array, CPU tensor), through [`narrow_fast`] first.
pub(crate) fn ints<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<I32Input<'py>> {
    match narrow_fast(obj) {
        Some(v) => Ok(I32Input::Owned(v)),
        None => i32_input(obj, what),
    }
}

/// Fast paths the general `i32_input` lacks: a contiguous int64 array (`NumPy`'s default int)
/// whose values all fit int32 is narrowed in one vectorisable pass, and a strided int32 array
/// is gathered. Anything else (including out-of-range values, for the error message) goes
/// through `i32_input`.
fn narrow_fast(item: &Bound<'_, PyAny>) -> Option<Vec<i32>> {
    if let Ok(a) = item.cast::<PyArray1<i32>>() {
        // Contiguous int32 is borrowed by `i32_input`; look without registering a borrow.
        if a.is_contiguous() {
            return None;
        }
        let ro = a.try_readonly().ok()?;
        return Some(ro.as_array().iter().copied().collect());
    }
    let a = item.cast::<PyArray1<i64>>().ok()?;
    let ro = a.try_readonly().ok()?;
    let s = ro.as_slice().ok()?;
    let (lo, hi) = s
        .iter()
        .fold((0i64, 0i64), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    (lo >= i64::from(i32::MIN) && hi <= i64::from(i32::MAX))
        .then(|| s.iter().map(|&x| x as i32).collect())
}

fn slices<'a>(v: &'a [I32Input<'_>]) -> Vec<&'a [i32]> {
    v.iter().map(I32Input::as_slice).collect()
}

/// Extend (prefix-prefill) metadata: `prefix_slots[b]` are request b's cached slots,
/// `new_slots[b]` the slots its new tokens go to. Returns `radixkv.ExtendMetadata` (`qo_indptr`,
/// `kv_indptr`, `kv_indices`, `seq_lens`, `extend_seq_lens`, `extend_prefix_lens`,
/// `extend_start_loc`, `out_cache_loc`, `positions`, ...: `NumPy` int32 views of one buffer).
/// With `plan_group` and `plan_tile_rows`, also the extend plan (`extend_plan`).
#[pyfunction]
#[pyo3(signature = (prefix_slots, new_slots, plan_group = None, plan_tile_rows = None))]
fn build_extend_metadata<'py>(
    py: Python<'py>,
    prefix_slots: &Bound<'py, PyAny>,
    new_slots: &Bound<'py, PyAny>,
    plan_group: Option<&Bound<'py, PyAny>>,
    plan_tile_rows: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let prefix = per_request(prefix_slots, "prefix_slots")?;
    let new = per_request(new_slots, "new_slots")?;
    let (p, n) = (slices(&prefix), slices(&new));
    let work = p.iter().chain(&n).map(|s| s.len()).sum();
    let mut m = maybe_detach(py, work, || metadata::extend_metadata(&p, &n)).py()?;
    add_extend_plan(&mut m, plan_group, plan_tile_rows)?;
    wrap_metadata(py, "ExtendMetadata", m)
}

fn opt_lens<'py>(kv_lens: Option<&Bound<'py, PyAny>>) -> PyResult<Option<I32Input<'py>>> {
    match kv_lens {
        Some(o) if !o.is_none() => ints(o, "kv_lens").map(Some),
        _ => Ok(None),
    }
}

fn page_size_arg(page_size: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    Ok(args::opt_count(page_size, "page_size")?.unwrap_or(1))
}

/// Appends the decode work plan (`decode_plan`) when `plan_slots` is given.
fn add_plan(
    m: &mut MetadataBuf,
    plan_slots: Option<&Bound<'_, PyAny>>,
    plan_capacity: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let capacity = args::opt_count(plan_capacity, "plan_capacity")?;
    match args::opt_count(plan_slots, "plan_slots")? {
        Some(slots) => m.with_decode_plan(slots, capacity).py(),
        None if capacity.is_some() => Err(InvalidArgument::new_err(
            "plan_capacity needs plan_slots (the work units the GPU runs at once)",
        )),
        None => Ok(()),
    }
}

/// CSR decode metadata (`radixkv.DecodeMetadata`): `pages[b]` lists request b's pages (its
/// slots when `page_size` is 1, the default); `kv_lens[b]` its valid tokens (required when
/// `page_size > 1`). With `plan_slots`, also the decode work plan (`decode_plan`).
#[pyfunction]
#[pyo3(signature = (pages, kv_lens = None, page_size = None, plan_slots = None, plan_capacity = None))]
fn build_decode_metadata<'py>(
    py: Python<'py>,
    pages: &Bound<'py, PyAny>,
    kv_lens: Option<&Bound<'py, PyAny>>,
    page_size: Option<&Bound<'py, PyAny>>,
    plan_slots: Option<&Bound<'py, PyAny>>,
    plan_capacity: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let page_size = page_size_arg(page_size)?;
    let pages = per_request(pages, "pages")?;
    let lens = opt_lens(kv_lens)?;
    let p = slices(&pages);
    let l = lens.as_ref().map(I32Input::as_slice);
    let work = p.iter().map(|s| s.len()).sum();
    let mut m = maybe_detach(py, work, || metadata::decode_metadata(&p, l, page_size)).py()?;
    add_plan(&mut m, plan_slots, plan_capacity)?;
    wrap_metadata(py, "DecodeMetadata", m)
}

/// The decode work plan alone (`paged_decode`'s `plan=`): int32 `NumPy` array in
/// `radixkv_core::metadata::plan`'s layout, for requests of `kv_lens` tokens, balanced for `slots`
/// work units run at once, or with every request cut into `units_per_request` units; `capacity`
/// unit rows (default: those used). Returns `(plan, units, chunk)`.
#[pyfunction]
#[pyo3(signature = (kv_lens, page_size, slots = None, capacity = None, units_per_request = None))]
fn build_decode_plan<'py>(
    py: Python<'py>,
    kv_lens: &Bound<'py, PyAny>,
    page_size: &Bound<'py, PyAny>,
    slots: Option<&Bound<'py, PyAny>>,
    capacity: Option<&Bound<'py, PyAny>>,
    units_per_request: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyArray1<i32>>, usize, usize)> {
    let lens_in = ints(kv_lens, "kv_lens")?;
    let mut lens = Vec::with_capacity(lens_in.as_slice().len());
    for (b, &l) in lens_in.as_slice().iter().enumerate() {
        lens.push(
            usize::try_from(l)
                .map_err(|_| InvalidArgument::new_err(format!("kv_lens[{b}] = {l} is negative")))?,
        );
    }
    let page_size = args::count(page_size, "page_size")?;
    if page_size == 0 {
        return Err(InvalidArgument::new_err("page_size must be >= 1"));
    }
    let capacity = args::opt_count(capacity, "capacity")?;
    let slots = args::opt_count(slots, "slots")?;
    let fixed = args::opt_count(units_per_request, "units_per_request")?;
    let (v, info) = match (slots, fixed) {
        (Some(s), None) => metadata::decode_plan(&lens, page_size, s, capacity),
        (None, Some(n)) => metadata::decode_plan_fixed(&lens, page_size, n, capacity),
        _ => {
            return Err(InvalidArgument::new_err(
                "build_decode_plan: pass exactly one of slots= and units_per_request=",
            ))
        }
    }
    .py()?;
    Ok((to_numpy(py, v), info.units, info.chunk))
}

/// Unit rows a decode plan for `batch` requests and `slots` concurrent units needs at most
/// (fixed per batch size: what a CUDA graph's plan buffer holds).
#[pyfunction]
fn decode_plan_capacity(batch: usize, slots: usize) -> usize {
    metadata::decode_plan_capacity(batch, slots)
}

/// Block-table decode metadata (`radixkv.BlockTableMetadata`): `[n, width]` tables padded with
/// 0, from the same inputs as `build_decode_metadata`; `width` defaults to the longest. With
/// `plan_slots`, also the decode work plan (`decode_plan`).
#[pyfunction]
#[pyo3(signature = (pages, kv_lens = None, page_size = None, width = None, plan_slots = None, plan_capacity = None))]
fn build_block_table_metadata<'py>(
    py: Python<'py>,
    pages: &Bound<'py, PyAny>,
    kv_lens: Option<&Bound<'py, PyAny>>,
    page_size: Option<&Bound<'py, PyAny>>,
    width: Option<&Bound<'py, PyAny>>,
    plan_slots: Option<&Bound<'py, PyAny>>,
    plan_capacity: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let page_size = page_size_arg(page_size)?;
    let width = args::opt_count(width, "width")?;
    let pages = per_request(pages, "pages")?;
    let lens = opt_lens(kv_lens)?;
    let p = slices(&pages);
    let l = lens.as_ref().map(I32Input::as_slice);
    let work = p.iter().map(|s| s.len()).sum();
    let mut m = maybe_detach(py, work, || {
        metadata::block_table_metadata(&p, l, page_size, width)
    })
    .py()?;
    add_plan(&mut m, plan_slots, plan_capacity)?;
    wrap_metadata(py, "BlockTableMetadata", m)
}

/// Appends the extend plan (`extend_plan`) when `plan_group` or `plan_tile_rows` is given (both
/// are then needed).
fn add_extend_plan(
    m: &mut MetadataBuf,
    plan_group: Option<&Bound<'_, PyAny>>,
    plan_tile_rows: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let group = args::opt_count(plan_group, "plan_group")?;
    let rows = args::opt_count(plan_tile_rows, "plan_tile_rows")?;
    match (group, rows) {
        (Some(g), Some(r)) => m.with_extend_plan(g, r).py(),
        (None, None) => Ok(()),
        _ => Err(InvalidArgument::new_err(
            "the extend plan needs both plan_group (query heads per KV head) and plan_tile_rows",
        )),
    }
}

/// The extend plan alone (`extend_attention`'s `plan=`): the flat int32 `NumPy` array of
/// `radixkv_core::metadata::extend_plan`'s `(request, rank)` entries for requests of `q_lens`
/// queries over `kv_lens` keys, `group` query heads per KV head, tiles of `tile_rows` rows.
#[pyfunction]
fn build_extend_plan<'py>(
    py: Python<'py>,
    q_lens: &Bound<'py, PyAny>,
    kv_lens: &Bound<'py, PyAny>,
    group: &Bound<'py, PyAny>,
    tile_rows: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyArray1<i32>>> {
    let q = ints(q_lens, "q_lens")?;
    let k = ints(kv_lens, "kv_lens")?;
    let group = args::count(group, "group")?;
    let rows = args::count(tile_rows, "tile_rows")?;
    let v = metadata::extend_plan(q.as_slice(), k.as_slice(), group, rows).py()?;
    Ok(to_numpy(py, v))
}

/// Extend metadata over pages (`radixkv.ExtendMetadata`): request b holds `kv_lens[b]` tokens
/// in `pages[b]`, the last `extend_lens[b]` of them new; `kv_indptr` / `kv_indices` list pages.
/// With `plan_group` and `plan_tile_rows`, also the extend plan (`extend_plan`).
#[pyfunction]
#[pyo3(signature = (pages, kv_lens, extend_lens, page_size = None, plan_group = None, plan_tile_rows = None))]
fn build_paged_extend_metadata<'py>(
    py: Python<'py>,
    pages: &Bound<'py, PyAny>,
    kv_lens: &Bound<'py, PyAny>,
    extend_lens: &Bound<'py, PyAny>,
    page_size: Option<&Bound<'py, PyAny>>,
    plan_group: Option<&Bound<'py, PyAny>>,
    plan_tile_rows: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let page_size = page_size_arg(page_size)?;
    let pages = per_request(pages, "pages")?;
    let lens = ints(kv_lens, "kv_lens")?;
    let ext = ints(extend_lens, "extend_lens")?;
    let p = slices(&pages);
    let (l, e) = (lens.as_slice(), ext.as_slice());
    let work = p.iter().map(|s| s.len()).sum::<usize>() * page_size;
    let mut m = maybe_detach(py, work, || {
        metadata::paged_extend_metadata(&p, l, e, page_size)
    })
    .py()?;
    add_extend_plan(&mut m, plan_group, plan_tile_rows)?;
    wrap_metadata(py, "ExtendMetadata", m)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(build_extend_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(build_decode_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(build_block_table_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(build_paged_extend_metadata, m)?)?;
    m.add_function(wrap_pyfunction!(build_decode_plan, m)?)?;
    m.add_function(wrap_pyfunction!(build_extend_plan, m)?)?;
    m.add_function(wrap_pyfunction!(decode_plan_capacity, m)?)?;
    Ok(())
}
