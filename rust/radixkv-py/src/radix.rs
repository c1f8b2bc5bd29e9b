//! `radixkv.RadixCache`, `Match` and `Node` (radixkv-core `radix`).
//!
//! Namespaces (None, a str, or a tuple of str / None) are encoded into tagged, length-prefixed
//! bytes, an injective encoding: `("bc", "a")` and `("b", "ca")` differ, None and "" differ.
//! The core keeps one root per encoded namespace.

use std::sync::atomic::{AtomicU64, Ordering};

use numpy::{PyArray1, PyArrayMethods, PyReadwriteArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PySlice, PyString, PyTuple};
use radixkv_core::radix::{NodeHandle, RadixCache};

use crate::convert::{i32_input, new_i32_array, to_numpy};
use crate::errors::{CoreResultExt, InvalidArgument};
use crate::pool::{count, PyTokenPool};

static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

fn push_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b's');
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Encodes a namespace; `None` is the empty encoding (the default namespace).
fn encode_namespace(ns: Option<&Bound<'_, PyAny>>, buf: &mut Vec<u8>) -> PyResult<()> {
    let Some(ns) = ns.filter(|o| !o.is_none()) else {
        return Ok(());
    };
    if let Ok(s) = ns.cast::<PyString>() {
        push_str(buf, &s.to_cow()?);
        return Ok(());
    }
    if let Ok(t) = ns.cast::<PyTuple>() {
        buf.push(b't');
        buf.extend_from_slice(&(t.len() as u64).to_le_bytes());
        for item in t.iter() {
            if item.is_none() {
                buf.push(b'n');
            } else if let Ok(s) = item.cast::<PyString>() {
                push_str(buf, &s.to_cow()?);
            } else {
                return Err(bad_namespace(&item));
            }
        }
        return Ok(());
    }
    Err(bad_namespace(ns))
}

/// Mutable access for a method that takes `slf`. Calls never release the GIL while they hold the
/// cache, so calls from several threads serialize; this can only fail on re-entry (Python code
/// run from inside a call, e.g. a finalizer), which gets a typed error instead of a panic.
fn busy_mut<'py>(slf: &Bound<'py, PyRadixCache>) -> PyResult<PyRefMut<'py, PyRadixCache>> {
    slf.try_borrow_mut()
        .map_err(|e| InvalidArgument::new_err(format!("the cache is busy in another call: {e}")))
}

fn bad_namespace(o: &Bound<'_, PyAny>) -> PyErr {
    let tn = o
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    InvalidArgument::new_err(format!(
        "namespace: expected None, a str, or a tuple of str / None, got {tn}"
    ))
}

/// A path end in a `RadixCache`: what `match_prefix` returns and `lock` / `unlock` /
/// `path_slots` take. It survives splits of its node; eviction retires it (`StaleHandle`).
#[pyclass(name = "Node", module = "radixkv._core", frozen)]
pub struct PyNode {
    handle: NodeHandle,
    cache_id: u64,
    cache: Py<PyRadixCache>,
}

impl PyNode {
    fn info(&self, py: Python<'_>) -> PyResult<radixkv_core::radix::NodeInfo> {
        let c = self.cache.bind(py).try_borrow().map_err(|e| {
            InvalidArgument::new_err(format!("the cache is busy in another call: {e}"))
        })?;
        c.inner.node_info(self.handle).py()
    }
}

#[pymethods]
impl PyNode {
    /// Requests pinning this node (and, through it, its ancestors) via `lock()`.
    #[getter]
    fn lock_ref(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.info(py)?.lock_ref)
    }

    /// Logical time of the last match / insert that touched this node.
    #[getter]
    fn last_access(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.info(py)?.last_access)
    }

    /// Matches that went through this node.
    #[getter]
    fn hit_count(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.info(py)?.hit_count)
    }

    /// Tokens on this node's own edge.
    #[getter]
    fn length(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.info(py)?.length)
    }

    /// Tokens from the root to this path end.
    #[getter]
    fn depth(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.info(py)?.depth)
    }

    #[getter]
    fn num_children(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.info(py)?.num_children)
    }

    /// The empty path (of every namespace): `lock` / `unlock` are no-ops, `path_slots` is empty.
    #[getter]
    fn is_root(&self) -> bool {
        self.handle.is_root()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyNode>()
            .is_ok_and(|o| o.get().handle == self.handle && o.get().cache_id == self.cache_id)
    }

    fn __hash__(&self) -> u64 {
        let (i, g) = self.handle.raw();
        (u64::from(i) << 32 | u64::from(g)) ^ self.cache_id.rotate_left(17)
    }

    fn __repr__(&self) -> String {
        if self.handle.is_root() {
            return "Node(root)".into();
        }
        let (i, g) = self.handle.raw();
        format!("Node(id={i}, gen={g})")
    }
}

/// What `match_prefix` found: `length` tokens, their `slots` (int32), and the path end `node`.
#[pyclass(name = "Match", module = "radixkv._core", frozen)]
pub struct PyMatch {
    #[pyo3(get)]
    length: usize,
    /// A fresh array, or the caller's `out` array whose first `length` ids were written.
    slots: Py<PyArray1<i32>>,
    into_out: bool,
    #[pyo3(get)]
    node: Py<PyNode>,
}

#[pymethods]
impl PyMatch {
    /// The matched slots (int32): a fresh array, or a view of `out[:length]` when
    /// `match_prefix` wrote them into the caller's `out`.
    #[getter]
    fn slots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let a = self.slots.bind(py);
        if self.into_out {
            return a.get_item(PySlice::new(py, 0, self.length as isize, 1));
        }
        Ok(a.clone().into_any())
    }

    fn __repr__(&self) -> String {
        format!("Match(length={})", self.length)
    }
}

/// Checks a caller's `out` buffer (a 1-D, C-contiguous, writeable int32 `NumPy` array of at
/// least `need` ids) and borrows it for writing.
fn out_array<'py>(o: &Bound<'py, PyAny>, need: usize) -> PyResult<PyReadwriteArray1<'py, i32>> {
    let a = o
        .cast::<PyArray1<i32>>()
        .map_err(|_| InvalidArgument::new_err("out: expected a 1-D int32 NumPy array"))?;
    if !a.is_c_contiguous() {
        return Err(InvalidArgument::new_err(
            "out: expected a C-contiguous array",
        ));
    }
    if a.len() < need {
        return Err(InvalidArgument::new_err(format!(
            "out: holds {} ids, {need} may be written",
            a.len()
        )));
    }
    a.try_readwrite()
        .map_err(|e| InvalidArgument::new_err(format!("out: cannot write into it: {e}")))
}

#[pyclass(name = "RadixCache", module = "radixkv._core")]
pub struct PyRadixCache {
    inner: RadixCache,
    pool: Option<Py<PyTokenPool>>,
    id: u64,
}

impl PyRadixCache {
    fn handle(&self, node: &Bound<'_, PyAny>) -> PyResult<NodeHandle> {
        let n = node.cast::<PyNode>().map_err(|_| {
            InvalidArgument::new_err("node: expected a radixkv Node (from match_prefix)")
        })?;
        let n = n.get();
        if n.cache_id != self.id {
            return Err(InvalidArgument::new_err(
                "node: it belongs to another RadixCache",
            ));
        }
        Ok(n.handle)
    }
}

fn make_node(slf: &Bound<'_, PyRadixCache>, handle: NodeHandle, cache_id: u64) -> PyNode {
    PyNode {
        handle,
        cache_id,
        cache: slf.clone().unbind(),
    }
}

#[pymethods]
impl PyRadixCache {
    #[new]
    #[pyo3(signature = (pool, page_size = None))]
    fn new(pool: Option<Bound<'_, PyTokenPool>>, page_size: Option<i64>) -> PyResult<Self> {
        let ps = match page_size {
            Some(p) => {
                let p = count(p, "page_size")?;
                if p == 0 {
                    return Err(InvalidArgument::new_err("page_size must be >= 1"));
                }
                p
            }
            None => 0,
        };
        let shared = pool.as_ref().map(|p| p.get().inner.clone());
        let inner = RadixCache::new(shared, ps).py()?;
        Ok(Self {
            inner,
            pool: pool.map(Bound::unbind),
            id: NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed),
        })
    }

    /// Longest cached prefix of `tokens` in whole pages; splits the node it ends inside.
    /// With `out` (a 1-D writeable int32 array of at least `len(tokens)` ids, e.g. the
    /// request's row of the scheduler's slot table) the slots are written into its start and
    /// `Match.slots` is a view of them: no array is made.
    #[pyo3(signature = (tokens, namespace = None, *, out = None))]
    fn match_prefix(
        slf: &Bound<'_, Self>,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
        out: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMatch> {
        let py = slf.py();
        let t = i32_input(tokens, "tokens")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        // Checked before the match changes anything.
        let out = out.map(|o| out_array(o, t.as_slice().len())).transpose()?;
        let (length, handle, slots, id) = {
            let mut this = busy_mut(slf)?;
            let id = this.id;
            let cache = &mut this.inner;
            let t = t.as_slice();
            let (length, handle) = cache.match_end(&ns, t).py()?;
            let slots = match out {
                Some(mut rw) => {
                    let buf = rw.as_slice_mut().expect("contiguous, checked");
                    cache.path_slots_into(handle, &mut buf[..length]).py()?;
                    let arr: &Bound<'_, PyArray1<i32>> = &rw;
                    (arr.clone(), true)
                }
                // Gathered straight into a NumPy-owned array: no Vec, no owner object.
                None => (
                    new_i32_array(py, length, |buf| cache.path_slots_into(handle, buf))?,
                    false,
                ),
            };
            (length, handle, slots, id)
        };
        Ok(PyMatch {
            length,
            slots: slots.0.unbind(),
            into_out: slots.1,
            node: Py::new(py, make_node(slf, handle, id))?,
        })
    }

    /// Hit length only: no split, no LRU or hit-count change.
    #[pyo3(signature = (tokens, namespace = None))]
    fn peek_prefix(
        &self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let t = i32_input(tokens, "tokens")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        let t = t.as_slice();
        self.inner.peek_prefix(&ns, t).py()
    }

    /// Caches the whole pages of `tokens` with their `slots`; returns how many leading tokens
    /// were already cached.
    #[pyo3(signature = (tokens, slots, namespace = None))]
    fn insert(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        slots: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let t = i32_input(tokens, "tokens")?;
        let s = i32_input(slots, "slots")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        let (t, s) = (t.as_slice(), s.as_slice());
        self.inner.insert(&ns, t, s).py()
    }

    /// As `insert`, also returning the node where the inserted whole pages end (a node the
    /// path ends inside is split there, as `match_prefix` does): the node a scheduler moves
    /// its lock to, without matching again.
    #[pyo3(signature = (tokens, slots, namespace = None))]
    fn insert_node(
        slf: &Bound<'_, Self>,
        tokens: &Bound<'_, PyAny>,
        slots: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<(usize, PyNode)> {
        let t = i32_input(tokens, "tokens")?;
        let s = i32_input(slots, "slots")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        let (present, h, id) = {
            let mut this = busy_mut(slf)?;
            let id = this.id;
            let (t, s) = (t.as_slice(), s.as_slice());
            let cache = &mut this.inner;
            let (present, h) = cache.insert_node(&ns, t, s).py()?;
            (present, h, id)
        };
        Ok((present, make_node(slf, h, id)))
    }

    /// `lock_ref` += 1 on the node and its ancestors.
    fn lock(&mut self, node: &Bound<'_, PyAny>) -> PyResult<()> {
        let h = self.handle(node)?;
        self.inner.lock(h).py()
    }

    /// Undoes one `lock()` taken through this node (`NotLocked` if there is none).
    fn unlock(&mut self, node: &Bound<'_, PyAny>) -> PyResult<()> {
        let h = self.handle(node)?;
        self.inner.unlock(h).py()
    }

    /// `lock(to_node)` then `unlock(from_node)` in one call, as a scheduler moves a request's
    /// lock to the end of the path it just inserted. Changes nothing if the unlock would
    /// fail (`NotLocked`, `StaleHandle`).
    fn move_lock(
        &mut self,
        from_node: &Bound<'_, PyAny>,
        to_node: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let f = self.handle(from_node)?;
        let t = self.handle(to_node)?;
        self.inner.move_lock(f, t).py()
    }

    /// `n` slots from the pool, evicting LRU leaves first if it is short. With `out` (a 1-D
    /// writeable int32 array of at least `n` ids, e.g. the free part of the request's row of
    /// the scheduler's slot table) they are written into `out[:n]`, which is returned (`out`
    /// itself when it holds exactly `n`); nothing is written when it fails.
    #[pyo3(signature = (n, *, out = None))]
    fn alloc<'py>(
        &mut self,
        py: Python<'py>,
        n: i64,
        out: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count(n, "n")?;
        let cache = &mut self.inner;
        let Some(o) = out else {
            let a = new_i32_array(py, n, |buf| cache.alloc_into(buf))?;
            return Ok(a.into_any());
        };
        let mut rw = out_array(o, n)?;
        let buf = &mut rw.as_slice_mut().expect("contiguous, checked")[..n];
        cache.alloc_into(buf).py()?;
        let arr: &Bound<'py, PyArray1<i32>> = &rw;
        if arr.len() == n {
            return Ok(arr.clone().into_any());
        }
        arr.get_item(PySlice::new(py, 0, n as isize, 1))
    }

    /// Evicts at least `num_tokens` tokens (whole LRU leaves) if it can; returns the number
    /// freed.
    fn evict(&mut self, num_tokens: i64) -> PyResult<usize> {
        let n = count(num_tokens, "num_tokens")?;
        Ok(self.inner.evict(n))
    }

    /// As evict, returning the freed slot ids (with a pool, already back in it).
    fn evict_slots<'py>(
        &mut self,
        py: Python<'py>,
        num_tokens: i64,
    ) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let n = count(num_tokens, "num_tokens")?;
        Ok(to_numpy(py, self.inner.evict_slots(n)))
    }

    /// Slots from the root to the path end `node`.
    fn path_slots<'py>(
        &self,
        py: Python<'py>,
        node: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i32>>> {
        let h = self.handle(node)?;
        let depth = self.inner.node_info(h).py()?.depth;
        new_i32_array(py, depth, |buf| self.inner.path_slots_into(h, buf))
    }

    /// The empty path's handle (what a match of nothing returns).
    #[getter]
    fn root(slf: &Bound<'_, Self>) -> PyResult<Py<PyNode>> {
        let id = slf.borrow().id;
        Py::new(slf.py(), make_node(slf, NodeHandle::ROOT, id))
    }

    #[getter]
    fn evictable_size(&self) -> usize {
        self.inner.evictable_size()
    }

    #[getter]
    fn protected_size(&self) -> usize {
        self.inner.protected_size()
    }

    #[getter]
    fn total_size(&self) -> usize {
        self.inner.total_size()
    }

    #[getter]
    fn page_size(&self) -> usize {
        self.inner.page_size()
    }

    /// Tokens evicted since the cache was made, by `evict` / `evict_slots` and by `alloc`
    /// when the pool was short.
    #[getter]
    fn evicted_tokens(&self) -> u64 {
        self.inner.evicted_tokens()
    }

    /// Live tree nodes, one root per namespace in use included.
    #[getter]
    fn num_nodes(&self) -> usize {
        self.inner.tree().num_nodes()
    }

    /// Approximate heap bytes of the tree's bookkeeping (arena, keys, values, edge map, LRU
    /// index); divide by `total_size` for bytes per cached token.
    #[getter]
    fn memory_bytes(&self) -> usize {
        self.inner.heap_bytes()
    }

    #[getter]
    fn pool(&self, py: Python<'_>) -> Option<Py<PyTokenPool>> {
        self.pool.as_ref().map(|p| p.clone_ref(py))
    }

    /// Verifies every invariant of the tree and of pool conservation.
    fn check(&self) -> PyResult<()> {
        self.inner.check().py()
    }

    /// Every node as (namespace bytes, full path tokens, own slots, `lock_ref`, `last_access`,
    /// `hit_count`), sorted: equal trees dump equal. For tests and debugging.
    fn dump<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyTuple>>> {
        self.inner
            .dump()
            .into_iter()
            .map(|(ns, path, value, lr, la, hc)| {
                (PyBytes::new(py, &ns), path, value, lr, la, hc).into_pyobject(py)
            })
            .collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "RadixCache(page_size={}, total_size={}, protected_size={})",
            self.inner.page_size(),
            self.inner.total_size(),
            self.inner.protected_size()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRadixCache>()?;
    m.add_class::<PyMatch>()?;
    m.add_class::<PyNode>()?;
    Ok(())
}
