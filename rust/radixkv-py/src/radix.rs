//! `radixkv.RadixCache`, `Match` and `Node` (radixkv-core `radix`).
//!
//! Namespaces are encoded by `namespace.rs`; slot ids cross the boundary through `slots.rs`
//! (int32 or int64 in, the cache's `slot_dtype` or a call's `dtype=` out).

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU64, Ordering};

use pyo3::prelude::*;
use pyo3::types::{PyBytes, PySlice, PyTuple};
use radixkv_core::radix::{CacheOptions, NodeHandle, Policy, RadixCache, SlotOut, TokenId};

use crate::convert::{i32_input, token_input, TokenSlice};
use crate::errors::{CoreResultExt, InvalidArgument};
use crate::kv_events;
use crate::namespace::encode as encode_namespace;
use crate::pool::{count, PyTokenPool};
use crate::slots::{
    insert_slots, new_array, out_array, slots_to_array, OutArray, SlotDtype, SlotsRef,
};

static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

/// Mutable access for a method that takes `slf`. Calls never release the GIL while they hold the
/// cache, so calls from several threads serialize; this can only fail on re-entry (Python code
/// run from inside a call, e.g. a finalizer), which gets a typed error instead of a panic.
pub(crate) fn busy_mut<'py>(
    slf: &Bound<'py, PyRadixCache>,
) -> PyResult<PyRefMut<'py, PyRadixCache>> {
    slf.try_borrow_mut()
        .map_err(|e| InvalidArgument::new_err(format!("the cache is busy in another call: {e}")))
}

pub(crate) fn busy<'py>(slf: &Bound<'py, PyRadixCache>) -> PyResult<PyRef<'py, PyRadixCache>> {
    slf.try_borrow()
        .map_err(|e| InvalidArgument::new_err(format!("the cache is busy in another call: {e}")))
}

/// A path end in a `RadixCache`: what `match_prefix` returns and `lock` / `unlock` /
/// `path_slots` take. It survives splits of its node; eviction retires it (`StaleHandle`).
/// Its properties read the node as it is now (a read-only view).
#[pyclass(name = "Node", module = "radixkv._core", frozen)]
pub struct PyNode {
    handle: NodeHandle,
    cache_id: u64,
    cache: Py<PyRadixCache>,
}

impl PyNode {
    fn info(&self, py: Python<'_>) -> PyResult<radixkv_core::radix::NodeInfo> {
        let c = busy(self.cache.bind(py))?;
        c.inner.node_info(self.handle).py()
    }

    fn view(&self, py: Python<'_>) -> PyResult<radixkv_core::radix::NodeView> {
        let c = busy(self.cache.bind(py))?;
        c.inner.node_view(self.handle).py()
    }

    fn sibling(&self, py: Python<'_>, handle: NodeHandle) -> PyResult<Py<PyNode>> {
        Py::new(
            py,
            PyNode {
                handle,
                cache_id: self.cache_id,
                cache: self.cache.clone_ref(py),
            },
        )
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

    /// Tokens from the root to this path end (the cached length of the path).
    #[getter]
    fn depth(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.info(py)?.depth)
    }

    #[getter]
    fn num_children(&self, py: Python<'_>) -> PyResult<u32> {
        Ok(self.info(py)?.num_children)
    }

    /// The node above (the root node for a top-level node and for the root).
    #[getter]
    fn parent(&self, py: Python<'_>) -> PyResult<Py<PyNode>> {
        let h = self.view(py)?.parent;
        self.sibling(py, h)
    }

    /// The nodes below, ordered by first token; for the root, the top-level nodes of every
    /// namespace. Scans the tree's edge map: for inspection, not a hot path.
    #[getter]
    fn children(&self, py: Python<'_>) -> PyResult<Vec<Py<PyNode>>> {
        self.view(py)?
            .children
            .into_iter()
            .map(|h| self.sibling(py, h))
            .collect()
    }

    /// Token ids on this node's own edge.
    #[getter]
    fn key(&self, py: Python<'_>) -> PyResult<Vec<i32>> {
        Ok(self.view(py)?.key)
    }

    /// Slot ids of this node's own edge, in the cache's `slot_dtype`.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let v = self.view(py)?.value;
        let dtype = busy(self.cache.bind(py))?.dtype;
        slots_to_array(py, &v, dtype, "value")
    }

    /// Clock tick at which these tokens were first cached.
    #[getter]
    fn created(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(self.view(py)?.created)
    }

    /// Highest insert priority that went through this node.
    #[getter]
    fn priority(&self, py: Python<'_>) -> PyResult<f64> {
        Ok(self.view(py)?.priority)
    }

    /// The empty path (of every namespace): `lock` / `unlock` are no-ops, `path_slots` is empty.
    #[getter]
    fn is_root(&self) -> bool {
        self.handle.is_root()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        self.same(other)
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

/// What `match_prefix` found: `length` tokens, their `slots`, and the path end `node`.
#[pyclass(name = "Match", module = "radixkv._core", frozen)]
pub struct PyMatch {
    #[pyo3(get)]
    length: usize,
    /// A fresh array, or the caller's `out` array whose first `length` ids were written.
    slots: Py<PyAny>,
    into_out: bool,
    #[pyo3(get)]
    node: Py<PyNode>,
    /// Partial-page tail (caches made with `partial_pages=True`): tokens after `length` that
    /// equal the start of a cached page, that page's first slots, and the node holding it.
    #[pyo3(get)]
    tail_length: usize,
    #[pyo3(get)]
    tail_slots: Option<Py<PyAny>>,
    #[pyo3(get)]
    tail_node: Option<Py<PyNode>>,
}

#[pymethods]
impl PyMatch {
    /// The matched slots: a fresh array (the cache's `slot_dtype` or the call's `dtype`), or a
    /// view of `out[:length]` when `match_prefix` wrote them into the caller's `out`.
    #[getter]
    fn slots<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let a = self.slots.bind(py);
        if self.into_out {
            return a.get_item(PySlice::new(py, 0, self.length as isize, 1));
        }
        Ok(a.clone())
    }

    fn __repr__(&self) -> String {
        format!("Match(length={})", self.length)
    }
}

#[pyclass(name = "RadixCache", module = "radixkv._core")]
pub struct PyRadixCache {
    inner: RadixCache,
    pool: Option<Py<PyTokenPool>>,
    id: u64,
    /// Element type of slot arrays handed out when a call gives no `dtype`.
    dtype: SlotDtype,
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

    /// `path_slots`' checks: the handle of `node` (a live node of this cache) and how many
    /// slots its path gives (`limit`, at most the path's length; all of them when None).
    pub(crate) fn path_target(
        &self,
        node: &Bound<'_, PyAny>,
        limit: Option<i64>,
    ) -> PyResult<(NodeHandle, usize)> {
        let h = self.handle(node)?;
        let limit = limit.map(|n| count(n, "limit")).transpose()?;
        let depth = self.inner.node_info(h).py()?.depth;
        match limit {
            Some(n) if n > depth => Err(InvalidArgument::new_err(format!(
                "limit: {n} slots asked of a path of {depth}"
            ))),
            Some(n) => Ok((h, n)),
            None => Ok((h, depth)),
        }
    }

    /// The output dtype of a call, checked against the ids the cache may write.
    fn out_dtype(&self, dtype: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<SlotDtype> {
        let d = SlotDtype::parse(dtype, self.dtype)?;
        if d == SlotDtype::I32 {
            self.inner.check_fits_i32(what).py()?;
        }
        Ok(d)
    }
}

impl PyNode {
    /// Whether `node` is a handle of this same node (a `Node` of the same cache and handle).
    pub(crate) fn same(&self, node: &Bound<'_, PyAny>) -> bool {
        node.cast::<PyNode>()
            .is_ok_and(|o| o.get().handle == self.handle && o.get().cache_id == self.cache_id)
    }

    /// `StaleHandle` once the node has been evicted.
    pub(crate) fn check_live(&self, py: Python<'_>) -> PyResult<()> {
        self.info(py).map(|_| ())
    }
}

fn make_node(slf: &Bound<'_, PyRadixCache>, handle: NodeHandle, cache_id: u64) -> PyNode {
    PyNode {
        handle,
        cache_id,
        cache: slf.clone().unbind(),
    }
}

/// `RadixCache::checkpoint` (or `checkpoint_release` when the lock is not kept) with its
/// scalar arguments in one tuple (priority, `inserted_len`, boundary, `lock_from`,
/// `keep_lock`), for the four width combinations of tokens and slots.
fn checkpoint_with<K: TokenId, S: SlotOut>(
    c: &mut RadixCache,
    ns: &[u8],
    tokens: &[K],
    slots: &[S],
    (priority, inserted_len, boundary, from, keep): (f64, usize, usize, Option<NodeHandle>, bool),
) -> radixkv_core::Result<(usize, NodeHandle, isize)> {
    if keep {
        c.checkpoint(ns, tokens, slots, priority, inserted_len, boundary, from)
    } else {
        c.checkpoint_release(ns, tokens, slots, priority, inserted_len, boundary, from)
    }
}

/// `tokens` and `slots` cut to their first `length` ids (both must hold that many); as they
/// are when `length` is None.
fn cut_to<'a>(
    tokens: TokenSlice<'a>,
    slots: SlotsRef<'a>,
    length: Option<i64>,
) -> PyResult<(TokenSlice<'a>, SlotsRef<'a>)> {
    if length.is_none() {
        return Ok((tokens, slots));
    }
    let tokens = cut_tokens(tokens, length)?;
    let n = tokens.len();
    if slots.len() < n {
        return Err(InvalidArgument::new_err(format!(
            "length: {n} ids asked of slots holding {}",
            slots.len()
        )));
    }
    Ok((tokens, slots.head(n)))
}

/// `tokens` cut to its first `length` ids (it must hold that many); as it is when `length`
/// is None.
fn cut_tokens(tokens: TokenSlice<'_>, length: Option<i64>) -> PyResult<TokenSlice<'_>> {
    let Some(n) = length else {
        return Ok(tokens);
    };
    let n = count(n, "length")?;
    if tokens.len() < n {
        return Err(InvalidArgument::new_err(format!(
            "length: {n} ids asked of tokens holding {}",
            tokens.len()
        )));
    }
    Ok(tokens.head(n))
}

fn finite(p: f64) -> PyResult<f64> {
    if p.is_finite() {
        Ok(p)
    } else {
        Err(InvalidArgument::new_err(format!(
            "priority: must be a finite number, got {p}"
        )))
    }
}

#[pymethods]
impl PyRadixCache {
    #[new]
    #[pyo3(signature = (
        pool, page_size = None, *, policy = "lru", events = false, slot_dtype = None,
        partial_pages = false, sglang_stamps = false
    ))]
    fn new(
        pool: Option<Bound<'_, PyTokenPool>>,
        page_size: Option<i64>,
        policy: &str,
        events: bool,
        slot_dtype: Option<&Bound<'_, PyAny>>,
        partial_pages: bool,
        sglang_stamps: bool,
    ) -> PyResult<Self> {
        let page_size = match page_size {
            Some(p) => Some(
                NonZeroUsize::new(count(p, "page_size")?)
                    .ok_or_else(|| InvalidArgument::new_err("page_size must be >= 1"))?,
            ),
            None => None,
        };
        let opts = CacheOptions {
            page_size,
            policy: Policy::parse(policy).py()?,
            events,
            partial_pages,
            sglang_stamps,
        };
        let dtype = SlotDtype::parse(slot_dtype, SlotDtype::I32)?;
        let shared = pool.as_ref().map(|p| p.get().inner.clone());
        let inner = RadixCache::with_options(shared, opts).py()?;
        Ok(Self {
            inner,
            pool: pool.map(Bound::unbind),
            id: NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed),
            dtype,
        })
    }

    /// Longest cached prefix of `tokens` in whole pages; splits the node it ends inside.
    /// With `out` (a 1-D writeable int32 or int64 array of at least `len(tokens)` ids) the
    /// slots are written into its start and `Match.slots` is a view of them.
    #[pyo3(signature = (tokens, namespace = None, *, out = None, dtype = None))]
    fn match_prefix(
        slf: &Bound<'_, Self>,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
        out: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyMatch> {
        let py = slf.py();
        let t = i32_input(tokens, "tokens")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        // Checked before the match changes anything.
        let out = out.map(|o| out_array(o, t.as_slice().len())).transpose()?;
        let (length, handle, slots, into_out, id, tail) = {
            let mut this = busy_mut(slf)?;
            let want = match &out {
                Some(o) => o.dtype(),
                None => SlotDtype::parse(dtype, this.dtype)?,
            };
            if want == SlotDtype::I32 {
                this.inner.check_fits_i32("match_prefix").py()?;
            }
            let id = this.id;
            let cache = &mut this.inner;
            let (length, handle) = cache.match_end(&ns, t.as_slice()).py()?;
            let tail = cache
                .tail(&ns, handle, &t.as_slice()[length..])
                .map(|tl| -> PyResult<_> {
                    Ok((
                        tl.len,
                        slots_to_array(py, &tl.slots, want, "tail_slots")?,
                        tl.node,
                    ))
                })
                .transpose()?;
            let (slots, into_out) = match out {
                Some(OutArray::I32(mut rw)) => {
                    let buf = rw.as_slice_mut().expect("contiguous, checked");
                    cache.path_slots_into(handle, &mut buf[..length]).py()?;
                    (OutArray::I32(rw).array(), true)
                }
                Some(OutArray::I64(mut rw)) => {
                    let buf = rw.as_slice_mut().expect("contiguous, checked");
                    cache.path_slots_into(handle, &mut buf[..length]).py()?;
                    (OutArray::I64(rw).array(), true)
                }
                None => match want {
                    SlotDtype::I32 => (
                        new_array::<i32>(py, length, |b| cache.path_slots_into(handle, b))?,
                        false,
                    ),
                    SlotDtype::I64 => (
                        new_array::<i64>(py, length, |b| cache.path_slots_into(handle, b))?,
                        false,
                    ),
                },
            };
            (length, handle, slots, into_out, id, tail)
        };
        let (tail_length, tail_slots, tail_node) = match tail {
            Some((k, a, h)) => (
                k,
                Some(a.unbind()),
                Some(Py::new(py, make_node(slf, h, id))?),
            ),
            None => (0, None, None),
        };
        Ok(PyMatch {
            length,
            slots: slots.unbind(),
            into_out,
            node: Py::new(py, make_node(slf, handle, id))?,
            tail_length,
            tail_slots,
            tail_node,
        })
    }

    /// `match_prefix` without the slots: `(length, node)`, with the same split, access time
    /// and hit count (no partial-page tail). For a caller that reads the slots later, if at
    /// all, through `path_slots` (`SGLang`'s scheduler locks the node first).
    /// `length`: only the first `length` tokens are matched (`tokens` must hold that many).
    #[pyo3(signature = (tokens, namespace = None, length = None))]
    pub(crate) fn match_node(
        slf: &Bound<'_, Self>,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
        length: Option<i64>,
    ) -> PyResult<(usize, PyNode)> {
        let t = token_input(tokens, "tokens")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        // the ids last: an array.array's view must not outlive a run of Python code
        let ts = cut_tokens(t.slice()?, length)?;
        let (length, handle, id) = {
            let mut this = busy_mut(slf)?;
            let id = this.id;
            let (length, handle) = match ts {
                TokenSlice::I32(t) => this.inner.match_end(&ns, t),
                TokenSlice::I64(t) => this.inner.match_end(&ns, t),
            }
            .py()?;
            (length, handle, id)
        };
        Ok((length, make_node(slf, handle, id)))
    }

    /// Hit length only: no split, no LRU or hit-count change.
    #[pyo3(signature = (tokens, namespace = None))]
    fn peek_prefix(
        &self,
        tokens: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        let t = token_input(tokens, "tokens")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        match t.slice()? {
            TokenSlice::I32(t) => self.inner.peek_prefix(&ns, t),
            TokenSlice::I64(t) => self.inner.peek_prefix(&ns, t),
        }
        .py()
    }

    /// Caches the whole pages of `tokens` with their `slots`; returns how many leading tokens
    /// were already cached. `priority` (finite) is raised to at least that on every node of
    /// the path (the `priority` eviction policy evicts lower priorities first).
    #[pyo3(signature = (tokens, slots, namespace = None, *, priority = 0.0))]
    fn insert(
        &mut self,
        tokens: &Bound<'_, PyAny>,
        slots: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
        priority: f64,
    ) -> PyResult<usize> {
        let priority = finite(priority)?;
        let t = i32_input(tokens, "tokens")?;
        let s = insert_slots(slots, "slots")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        let (inner, t) = (&mut self.inner, t.as_slice());
        match s.slice() {
            SlotsRef::I32(s) => inner.insert_with_priority_from(&ns, t, s, priority),
            SlotsRef::I64(s) => inner.insert_with_priority_from(&ns, t, s, priority),
        }
        .py()
    }

    /// As `insert`, also returning the node where the inserted whole pages end (a node the
    /// path ends inside is split there, as `match_prefix` does): the node a scheduler moves
    /// its lock to, without matching again.
    /// `inserted_len` (caches made with `sglang_stamps=True`): leading tokens this request
    /// inserted before; only nodes ending beyond it count a hit.
    #[pyo3(signature = (tokens, slots, namespace = None, *, priority = 0.0, inserted_len = 0))]
    fn insert_node(
        slf: &Bound<'_, Self>,
        tokens: &Bound<'_, PyAny>,
        slots: &Bound<'_, PyAny>,
        namespace: Option<&Bound<'_, PyAny>>,
        priority: f64,
        inserted_len: i64,
    ) -> PyResult<(usize, PyNode)> {
        let priority = finite(priority)?;
        let inserted_len = count(inserted_len, "inserted_len")?;
        let t = token_input(tokens, "tokens")?;
        let s = insert_slots(slots, "slots")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        let (present, h, id) = {
            let mut this = busy_mut(slf)?;
            let id = this.id;
            let c = &mut this.inner;
            let (pr, il) = (priority, inserted_len);
            let (present, h) = match (t.slice()?, s.slice()) {
                (TokenSlice::I32(t), SlotsRef::I32(s)) => c.insert_node_from(&ns, t, s, pr, il),
                (TokenSlice::I32(t), SlotsRef::I64(s)) => c.insert_node_from(&ns, t, s, pr, il),
                (TokenSlice::I64(t), SlotsRef::I32(s)) => c.insert_node_from(&ns, t, s, pr, il),
                (TokenSlice::I64(t), SlotsRef::I64(s)) => c.insert_node_from(&ns, t, s, pr, il),
            }
            .py()?;
            (present, h, id)
        };
        Ok((present, make_node(slf, h, id)))
    }

    /// A scheduler's checkpoint of a running request in one call (`SGLang`'s `checkpoint`):
    /// `insert_node(tokens, slots, namespace, priority=, inserted_len=)`; then, when
    /// `0 < boundary < len(tokens)`, the same for the first `boundary` tokens with
    /// `priority + 1` and `inserted_len=boundary` (a split at the prompt boundary); then the
    /// request's lock moves from `lock_from` (None: it holds none) to the inserted path's end.
    /// Returns `(present, node, duplicates)`: tokens already cached, the path's end, and, when
    /// `present > dup_from`, the tree's slots for positions `[dup_from, present)` (what the
    /// caller's copies of those tokens duplicate; the cache's `slot_dtype`), else None.
    /// Everything, `lock_from`'s lock included, is checked before anything changes.
    /// `keep_lock=False` (a request done with its KV, whose caller would unlock next):
    /// `lock_from`'s lock is released instead of moved and the end is left unlocked.
    /// `length`: only the first `length` tokens and slots are used (both must hold that many),
    /// so a caller can pass a request's whole id array and its whole table row as they are.
    /// Every argument may also be passed by position (in the plugin's hot path: each
    /// keyword costs a name lookup per call).
    #[pyo3(signature = (
        tokens, slots, namespace = None, priority = 0.0, inserted_len = 0, boundary = 0,
        lock_from = None, dup_from = 0, keep_lock = true, length = None
    ))]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn checkpoint<'py>(
        slf: &Bound<'py, Self>,
        tokens: &Bound<'py, PyAny>,
        slots: &Bound<'py, PyAny>,
        namespace: Option<&Bound<'py, PyAny>>,
        priority: f64,
        inserted_len: i64,
        boundary: i64,
        lock_from: Option<&Bound<'py, PyAny>>,
        dup_from: i64,
        keep_lock: bool,
        length: Option<i64>,
    ) -> PyResult<(usize, PyNode, Option<Bound<'py, PyAny>>)> {
        let py = slf.py();
        let priority = finite(priority)?;
        let inserted_len = count(inserted_len, "inserted_len")?;
        let boundary = count(boundary, "boundary")?;
        let dup_from = count(dup_from, "dup_from")?;
        let t = token_input(tokens, "tokens")?;
        let s = insert_slots(slots, "slots")?;
        let mut ns = Vec::new();
        encode_namespace(namespace, &mut ns)?;
        // the ids last: an array.array's view must not outlive a run of Python code
        let (ts, ss) = cut_to(t.slice()?, s.slice(), length)?;
        let mut this = busy_mut(slf)?;
        let from = lock_from
            .filter(|n| !n.is_none())
            .map(|n| this.handle(n))
            .transpose()?;
        let id = this.id;
        let dtype = this.dtype;
        if dtype == SlotDtype::I32 {
            this.inner.check_fits_i32("checkpoint").py()?;
        }
        let inner = &mut this.inner;
        let args = (priority, inserted_len, boundary, from, keep_lock);
        let (present, h, _) = match (ts, ss) {
            (TokenSlice::I32(t), SlotsRef::I32(s)) => checkpoint_with(inner, &ns, t, s, args),
            (TokenSlice::I32(t), SlotsRef::I64(s)) => checkpoint_with(inner, &ns, t, s, args),
            (TokenSlice::I64(t), SlotsRef::I32(s)) => checkpoint_with(inner, &ns, t, s, args),
            (TokenSlice::I64(t), SlotsRef::I64(s)) => checkpoint_with(inner, &ns, t, s, args),
        }
        .py()?;
        let dups = if present > dup_from {
            let path = inner.path_slots(h).py()?;
            Some(slots_to_array(
                py,
                &path[dup_from..present],
                dtype,
                "checkpoint",
            )?)
        } else {
            None
        };
        drop(this);
        Ok((present, make_node(slf, h, id), dups))
    }

    /// `lock_ref` += 1 on the node and its ancestors; returns the tokens that became
    /// protected (>= 0), as `SGLang`'s `inc_lock_ref` returns the evictable change (negated).
    pub(crate) fn lock(&mut self, node: &Bound<'_, PyAny>) -> PyResult<i64> {
        let h = self.handle(node)?;
        Ok(self.inner.lock(h).py()? as i64)
    }

    /// Undoes one `lock()` taken through this node (`NotLocked` if there is none); returns
    /// the change in protected tokens (<= 0).
    pub(crate) fn unlock(&mut self, node: &Bound<'_, PyAny>) -> PyResult<i64> {
        let h = self.handle(node)?;
        Ok(-(self.inner.unlock(h).py()? as i64))
    }

    /// `lock(to_node)` then `unlock(from_node)` in one call; returns the change in protected
    /// tokens. Changes nothing if the unlock would fail (`NotLocked`, `StaleHandle`).
    fn move_lock(
        &mut self,
        from_node: &Bound<'_, PyAny>,
        to_node: &Bound<'_, PyAny>,
    ) -> PyResult<i64> {
        let f = self.handle(from_node)?;
        let t = self.handle(to_node)?;
        Ok(self.inner.move_lock(f, t).py()? as i64)
    }

    /// `n` slots from the pool, evicting leaves first if it is short. With `out` (a 1-D
    /// writeable int32 or int64 array of at least `n` ids) they are written into `out[:n]`,
    /// which is returned (`out` itself when it holds exactly `n`); nothing is written when it
    /// fails.
    #[pyo3(signature = (n, *, out = None, dtype = None))]
    fn alloc<'py>(
        &mut self,
        py: Python<'py>,
        n: i64,
        out: Option<&Bound<'py, PyAny>>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count(n, "n")?;
        // Pool ids always fit int32: no watermark check needed here.
        let want = SlotDtype::parse(dtype, self.dtype)?;
        let cache = &mut self.inner;
        let Some(o) = out else {
            return match want {
                SlotDtype::I32 => new_array::<i32>(py, n, |b| cache.alloc_into(b)),
                SlotDtype::I64 => new_array::<i64>(py, n, |b| cache.alloc_into(b)),
            };
        };
        let arr = match out_array(o, n)? {
            OutArray::I32(mut rw) => {
                cache
                    .alloc_into(&mut rw.as_slice_mut().expect("contiguous")[..n])
                    .py()?;
                OutArray::I32(rw).array()
            }
            OutArray::I64(mut rw) => {
                cache
                    .alloc_into(&mut rw.as_slice_mut().expect("contiguous")[..n])
                    .py()?;
                OutArray::I64(rw).array()
            }
        };
        if arr.len()? == n {
            return Ok(arr);
        }
        arr.get_item(PySlice::new(py, 0, n as isize, 1))
    }

    /// Evicts at least `num_tokens` tokens (whole leaves, in the policy's order) if it can;
    /// returns the number freed.
    fn evict(&mut self, num_tokens: i64) -> PyResult<usize> {
        let n = count(num_tokens, "num_tokens")?;
        Ok(self.inner.evict(n))
    }

    /// As evict, returning the freed slot ids (with a pool, already back in it).
    #[pyo3(signature = (num_tokens, *, dtype = None))]
    pub(crate) fn evict_slots<'py>(
        &mut self,
        py: Python<'py>,
        num_tokens: i64,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = count(num_tokens, "num_tokens")?;
        let d = self.out_dtype(dtype, "evict_slots")?;
        let v = self.inner.evict_slots(n);
        slots_to_array(py, &v, d, "evict_slots")
    }

    /// Drops every cached node (all handles go stale) and returns their slot ids (with a pool,
    /// already back in it); with events on, records `AllBlocksCleared`. Refused
    /// (`InvalidArgument`, nothing changed) while any node is locked.
    #[pyo3(signature = (*, dtype = None))]
    fn reset<'py>(
        &mut self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let d = self.out_dtype(dtype, "reset")?;
        let v = self.inner.reset().py()?;
        slots_to_array(py, &v, d, "reset")
    }

    /// Slots from the root to the path end `node`; with `limit`, only the first `limit` of
    /// them (`InvalidArgument` if the path is shorter). `dtype` and `limit` may be passed by
    /// position too.
    #[pyo3(signature = (node, dtype = None, limit = None))]
    pub(crate) fn path_slots<'py>(
        &self,
        py: Python<'py>,
        node: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'py, PyAny>>,
        limit: Option<i64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (h, n) = self.path_target(node, limit)?;
        let d = self.out_dtype(dtype, "path_slots")?;
        let inner = &self.inner;
        match d {
            SlotDtype::I32 => new_array::<i32>(py, n, |b| inner.path_prefix_slots_into(h, b)),
            SlotDtype::I64 => new_array::<i64>(py, n, |b| inner.path_prefix_slots_into(h, b)),
        }
    }

    /// KV events recorded since the last call, oldest first (`BlockStored`, `BlockRemoved`,
    /// `AllBlocksCleared`); always empty unless the cache was made with `events=True`.
    fn take_events(&mut self, py: Python<'_>) -> PyResult<Vec<Py<PyAny>>> {
        let p = self.inner.page_size();
        self.inner
            .take_events()
            .into_iter()
            .map(|e| kv_events::to_python(py, e, p))
            .collect()
    }

    /// The empty path's handle (what a match of nothing returns).
    #[getter]
    pub(crate) fn root(slf: &Bound<'_, Self>) -> PyResult<Py<PyNode>> {
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

    /// The eviction policy's name.
    #[getter]
    fn policy(&self) -> &'static str {
        self.inner.policy().name()
    }

    /// Whether KV events are recorded.
    #[getter]
    fn events(&self) -> bool {
        self.inner.tree().events_enabled()
    }

    /// Whether partial last pages are cached and tails reported (`page_size` > 1 only).
    #[getter]
    fn partial_pages(&self) -> bool {
        self.inner.partial_pages()
    }

    /// The dtype of slot arrays handed out when a call gives none: "int32" or "int64".
    #[getter]
    fn slot_dtype(&self) -> &'static str {
        self.dtype.name()
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

    /// Approximate heap bytes of the tree's bookkeeping (arena, keys, values, edge map,
    /// eviction index, page hashes); divide by `total_size` for bytes per cached token.
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
            "RadixCache(page_size={}, policy={}, total_size={}, protected_size={})",
            self.inner.page_size(),
            self.inner.policy().name(),
            self.inner.total_size(),
            self.inner.protected_size()
        )
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRadixCache>()?;
    m.add_class::<PyMatch>()?;
    m.add_class::<PyNode>()?;
    kv_events::register(m)?;
    Ok(())
}
