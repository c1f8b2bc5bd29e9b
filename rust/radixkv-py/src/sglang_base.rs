//! `radixkv._core.SGLangCacheBase`: the native base of the `SGLang` plugin's prefix cache
//! (`radixkv.integrations.sglang.RadixKVPrefixCache`).
//!
//! `SGLang`'s scheduler calls `match_prefix`, `checkpoint`, `prefix_device_indices`, `lock` and
//! `unlock` for every request, and its allocator `evict_for_alloc` when it is short. Here they
//! read `SGLang`'s key and request objects from Rust and
//! reach the tree with no Python frame in between; the plugin keeps every other method, and
//! the rare branches of these (ids that are no `array.array`, a table that is not a CPU
//! tensor, duplicates to free or parked) call back into it. `SGLang`'s classes (`MatchResult`, `TreeLock`)
//! are handed over by the plugin through `_bind`, never imported here.

use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyValueError};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

use crate::errors::InvalidArgument;
use crate::pool::count;
use crate::radix::{busy, busy_mut, PyNode, PyRadixCache};
use crate::std_array::is_std_array;

/// What the plugin hands over once (`_bind`): `SGLang`'s result classes and the plugin's
/// helpers for the rare branches.
struct Env {
    /// `MatchResult` (a `NamedTuple`), its fields past the first four at their defaults, and
    /// `tuple.__new__` to build one from a tuple without its keyword handling.
    match_result: Py<PyAny>,
    match_defaults: Py<PyTuple>,
    tuple_new: Py<PyAny>,
    /// `EvictResult` (a dataclass taking `num_tokens_evicted=`).
    evict_result: Py<PyAny>,
    /// `TreeLock` and the one empty receipt every lock carries.
    tree_lock: Py<PyAny>,
    receipt: Py<PyAny>,
    /// `tokens_view(ids, n)`: ids that are no `array.array` as an int64 array.
    tokens_view: Py<PyAny>,
    /// `row_views(table)`: a list of per-row host views of a CPU table, else None.
    row_views: Py<PyAny>,
    /// `row_copy(table, row, n)`: the first `n` ids of a row of any other table, on the host.
    row_copy: Py<PyAny>,
    /// `as_tensor(ids)`: host int64 ids as a tensor on the KV device (`torch.from_numpy`, no
    /// copy, when that device is the CPU).
    as_tensor: Py<PyAny>,
    /// The empty int64 tensor on the KV device.
    empty_indices: Py<PyAny>,
}

/// The last `prefix_device_indices` result: (length, node, tensor, `evictions` then).
struct Kept {
    n: usize,
    node: Py<PyNode>,
    tensor: Py<PyAny>,
    evictions: u64,
}

/// The request-table rows seen last: the table object and its rows' views (None: the table
/// is not a CPU tensor; rows are copied through `row_copy`).
struct Rows {
    table: Py<PyAny>,
    views: Option<Py<PyList>>,
}

/// The native half of `RadixKVPrefixCache`; not useful alone (`_bind` and `tree` first).
#[pyclass(name = "SGLangCacheBase", module = "radixkv._core", subclass)]
pub struct PySglangBase {
    tree: Option<Py<PyRadixCache>>,
    page: usize,
    disable: bool,
    req_to_token_pool: Option<Py<PyAny>>,
    env: Option<Env>,
    empty_match: Option<Py<PyAny>>,
    kept: Option<Kept>,
    evictions: u64,
    rows: Option<Rows>,
}

fn unbound() -> PyErr {
    PyRuntimeError::new_err("SGLangCacheBase: used before _bind() and tree were set")
}

/// `SGLang`'s namespace, the pair (`extra_key`, `cache_salt`): None when both are unset (an
/// empty salt counts as unset; None and "" keys differ).
fn namespace<'py>(
    extra: Bound<'py, PyAny>,
    salt: Bound<'py, PyAny>,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    let py = extra.py();
    let salted = salt.is_truthy()?;
    if extra.is_none() && !salted {
        return Ok(None);
    }
    let salt = if salted {
        salt
    } else {
        py.None().into_bound(py)
    };
    Ok(Some(PyTuple::new(py, [extra, salt])?.into_any()))
}

impl PySglangBase {
    fn env(&self) -> PyResult<&Env> {
        self.env.as_ref().ok_or_else(unbound)
    }

    fn bound_tree<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyRadixCache>> {
        self.tree
            .as_ref()
            .map(|t| t.bind(py).clone())
            .ok_or_else(unbound)
    }

    /// `MatchResult(0, root, root, root)`, made once per tree.
    fn empty_match<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        if let Some(m) = &slf.borrow().empty_match {
            return Ok(m.bind(py).clone());
        }
        let root = PyRadixCache::root(&slf.borrow().bound_tree(py)?)?.into_any();
        let m = Self::match_result(slf, 0, root.bind(py).clone())?;
        slf.borrow_mut().empty_match = Some(m.clone().unbind());
        Ok(m)
    }

    /// `MatchResult(length, node, node, node)` with every other field at its default, built
    /// as a plain tuple of the `NamedTuple`'s fields.
    fn match_result<'py>(
        slf: &Bound<'py, Self>,
        length: usize,
        node: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (cls, defaults, tuple_new) = {
            let this = slf.borrow();
            let env = this.env()?;
            (
                env.match_result.clone_ref(py),
                env.match_defaults.clone_ref(py),
                env.tuple_new.clone_ref(py),
            )
        };
        let defaults = defaults.bind(py);
        let mut items: Vec<Bound<'py, PyAny>> = Vec::with_capacity(4 + defaults.len());
        items.push(length.into_pyobject(py)?.into_any());
        items.extend([node.clone(), node.clone(), node]);
        items.extend(defaults.iter());
        let fields = PyTuple::new(py, items)?;
        tuple_new.bind(py).call1((cls, fields))
    }

    /// `evict`'s work for `want` > 0 tokens; the tokens freed. At page size 1 with no
    /// duplicates parked, the tree's leaves straight to the allocator's `free`; else the
    /// subclass's `_evict_tokens`, which hands pages over by page id (`SGLang`'s paged `free`
    /// finds the pages of slot ids with `torch.unique`, which waits for the GPU) and parked
    /// duplicates with the leaves.
    fn evict_tokens(slf: &Bound<'_, Self>, want: usize) -> PyResult<usize> {
        let py = slf.py();
        let parked: usize = slf
            .getattr(intern!(py, "_frees"))?
            .getattr(intern!(py, "tokens"))?
            .extract()?;
        if parked > 0 || slf.borrow().page > 1 {
            return slf
                .call_method1(intern!(py, "_evict_tokens"), (want,))?
                .extract();
        }
        let tree = slf.borrow().bound_tree(py)?;
        let freed = busy_mut(&tree)?.evict_slots(py, want as i64, None)?;
        let n = freed.len()?;
        if n > 0 {
            let as_tensor = {
                let mut this = slf.borrow_mut();
                this.evictions += 1;
                this.env()?.as_tensor.clone_ref(py)
            };
            let ids = as_tensor.bind(py).call1((freed,))?;
            slf.getattr(intern!(py, "token_to_kv_pool_allocator"))?
                .call_method1(intern!(py, "free"), (ids,))?;
        }
        Ok(n)
    }

    /// `ids` as the tree reads them: an `array.array` as it is, anything else through the
    /// plugin's `tokens_view(ids, n)`.
    fn tokens<'py>(&self, ids: Bound<'py, PyAny>, n: usize) -> PyResult<Bound<'py, PyAny>> {
        if is_std_array(&ids)? {
            return Ok(ids);
        }
        self.env()?.tokens_view.bind(ids.py()).call1((ids, n))
    }

    /// Row `row` of `table`, holding at least its first `n` ids: a view of a CPU table's row,
    /// else a host copy of those `n`. Also whether it is a view (writes land in the table).
    fn row<'py>(
        slf: &Bound<'py, Self>,
        table: &Bound<'py, PyAny>,
        row: &Bound<'py, PyAny>,
        n: usize,
    ) -> PyResult<(Bound<'py, PyAny>, bool)> {
        let py = slf.py();
        let seen = slf
            .borrow()
            .rows
            .as_ref()
            .is_some_and(|r| r.table.bind(py).is(table));
        if !seen {
            let views = slf.borrow().env()?.row_views.bind(py).call1((table,))?;
            let views = if views.is_none() {
                None
            } else {
                Some(views.cast_into::<PyList>()?.unbind())
            };
            slf.borrow_mut().rows = Some(Rows {
                table: table.clone().unbind(),
                views,
            });
        }
        let (views, row_copy) = {
            let this = slf.borrow();
            let views = this
                .rows
                .as_ref()
                .and_then(|r| r.views.as_ref())
                .map(|v| v.clone_ref(py));
            (views, this.env()?.row_copy.clone_ref(py))
        };
        match views {
            Some(views) => Ok((views.bind(py).get_item(row.extract::<usize>()?)?, true)),
            None => Ok((row_copy.bind(py).call1((table, row, n))?, false)),
        }
    }
}

#[pymethods]
impl PySglangBase {
    /// Takes and ignores the subclass's constructor arguments (its `__init__` sets it up).
    #[new]
    #[pyo3(signature = (*_args, **_kwargs))]
    fn new(_args: &Bound<'_, PyTuple>, _kwargs: Option<&Bound<'_, PyDict>>) -> Self {
        Self {
            tree: None,
            page: 1,
            disable: false,
            req_to_token_pool: None,
            env: None,
            empty_match: None,
            kept: None,
            evictions: 0,
            rows: None,
        }
    }

    /// `SGLang`'s classes and the plugin's helpers (see the module comment); once, before use.
    #[pyo3(signature = (
        *, match_result, evict_result, tree_lock, receipt, tokens_view, row_views, row_copy,
        as_tensor, empty_indices
    ))]
    #[allow(clippy::too_many_arguments)]
    fn _bind(
        &mut self,
        py: Python<'_>,
        match_result: Py<PyAny>,
        evict_result: Py<PyAny>,
        tree_lock: Py<PyAny>,
        receipt: Py<PyAny>,
        tokens_view: Py<PyAny>,
        row_views: Py<PyAny>,
        row_copy: Py<PyAny>,
        as_tensor: Py<PyAny>,
        empty_indices: Py<PyAny>,
    ) -> PyResult<()> {
        let mr = match_result.bind(py);
        let fields: Vec<String> = mr.getattr(intern!(py, "_fields"))?.extract()?;
        let head = [
            "device_prefix_len",
            "last_device_node",
            "last_host_node",
            "best_match_node",
        ];
        if fields.len() < 4 || fields[..4] != head {
            return Err(InvalidArgument::new_err(format!(
                "match_result: expected a NamedTuple whose fields start with {head:?}, got \
                 {fields:?}"
            )));
        }
        let defaults = mr.getattr(intern!(py, "_field_defaults"))?;
        let defaults = fields[4..]
            .iter()
            .map(|f| defaults.get_item(f))
            .collect::<PyResult<Vec<_>>>()?;
        let tuple_new = py
            .get_type::<PyTuple>()
            .getattr(intern!(py, "__new__"))?
            .unbind();
        self.env = Some(Env {
            match_result,
            match_defaults: PyTuple::new(py, defaults)?.unbind(),
            tuple_new,
            evict_result,
            tree_lock,
            receipt,
            tokens_view,
            row_views,
            row_copy,
            as_tensor,
            empty_indices,
        });
        self.empty_match = None;
        Ok(())
    }

    /// The radix tree (a `radixkv.RadixCache`); setting one drops what was kept of the last.
    #[getter(tree)]
    fn get_tree(&self, py: Python<'_>) -> Option<Py<PyRadixCache>> {
        self.tree.as_ref().map(|t| t.clone_ref(py))
    }

    #[setter]
    fn set_tree(&mut self, tree: Py<PyRadixCache>) {
        self.tree = Some(tree);
        self.empty_match = None;
        self.kept = None;
    }

    /// Tokens per page (>= 1): matches and inserts cover whole pages.
    #[getter]
    fn page_size(&self) -> usize {
        self.page
    }

    #[setter]
    fn set_page_size(&mut self, page_size: i64) -> PyResult<()> {
        let p = count(page_size, "page_size")?;
        if p == 0 {
            return Err(InvalidArgument::new_err("page_size must be >= 1"));
        }
        self.page = p;
        Ok(())
    }

    /// `SGLang`'s `--disable-radix-cache`: matches are empty and checkpoints do nothing.
    #[getter]
    fn disable(&self) -> bool {
        self.disable
    }

    #[setter]
    fn set_disable(&mut self, disable: bool) {
        self.disable = disable;
    }

    /// `SGLang`'s `ReqToTokenPool` (its `req_to_token` table is read on every checkpoint).
    #[getter]
    fn req_to_token_pool(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.req_to_token_pool.as_ref().map(|p| p.clone_ref(py))
    }

    #[setter]
    fn set_req_to_token_pool(&mut self, pool: Py<PyAny>) {
        self.req_to_token_pool = Some(pool);
        self.rows = None;
    }

    /// Calls that evicted from the tree (the plugin counts them); a kept
    /// `prefix_device_indices` result made before the last one is checked before reuse.
    #[getter(_evictions)]
    fn evictions(&self) -> u64 {
        self.evictions
    }

    #[setter(_evictions)]
    fn set_evictions(&mut self, n: u64) {
        self.evictions = n;
    }

    fn supports_prefix_sharing(&self) -> bool {
        !self.disable
    }

    /// Longest cached whole-page prefix of `params.key` (capped at `key.limit`) in its
    /// namespace; splits the node the match ends inside and refreshes the path's access time.
    /// Slots are not read here: `SGLang` reads them through `prefix_device_indices`.
    fn match_prefix<'py>(
        slf: &Bound<'py, Self>,
        params: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (page, tree) = {
            let this = slf.borrow();
            if this.disable {
                drop(this);
                return Self::empty_match(slf);
            }
            (this.page, this.bound_tree(py)?)
        };
        let key = params.getattr(intern!(py, "key"))?;
        if key.getattr(intern!(py, "is_bigram"))?.is_truthy()? {
            return Err(PyValueError::new_err(
                "radixkv radix-cache backend: bigram keys are not supported",
            ));
        }
        let ids = key.getattr(intern!(py, "token_ids"))?;
        let mut n = ids.len()?;
        let limit = key.getattr(intern!(py, "limit"))?;
        if !limit.is_none() {
            n = n.min(usize::try_from(limit.extract::<i64>()?).unwrap_or(0));
        }
        n -= n % page;
        if n == 0 {
            return Self::empty_match(slf);
        }
        let ns = namespace(
            key.getattr(intern!(py, "extra_key"))?,
            key.getattr(intern!(py, "cache_salt"))?,
        )?;
        let tokens = slf.borrow().tokens(ids, n)?;
        let (length, node) = PyRadixCache::match_node(&tree, &tokens, ns.as_ref(), Some(n as i64))?;
        Self::match_result(slf, length, Bound::new(py, node)?.into_any())
    }

    /// Inserts `req`'s KV up to row position `up_to` (whole pages), frees the row's duplicates
    /// of what others inserted meanwhile (the plugin's `_park_duplicates`), moves `req.lock` to
    /// the inserted path's end (or releases it when `req` has finished: its last checkpoint)
    /// and advances `req.kv.cache_protected_len` / `cache_inserted_len`. The tree's part is
    /// one `RadixCache.checkpoint` call.
    #[pyo3(signature = (req, *, up_to, **_kwargs))]
    fn checkpoint<'py>(
        slf: &Bound<'py, Self>,
        req: &Bound<'py, PyAny>,
        up_to: i64,
        _kwargs: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<()> {
        let py = slf.py();
        let (page, tree, pool) = {
            let this = slf.borrow();
            if this.disable {
                return Ok(());
            }
            let pool = this.req_to_token_pool.as_ref().ok_or_else(unbound)?;
            (this.page, this.bound_tree(py)?, pool.bind(py).clone())
        };
        let up_to = count(up_to, "up_to")?;
        let n = up_to - up_to % page;
        let kv = req.getattr(intern!(py, "kv"))?;
        let prompt = req.getattr(intern!(py, "origin_input_ids"))?.len()?;
        let protected: i64 = kv.getattr(intern!(py, "cache_protected_len"))?.extract()?;
        let inserted: i64 = kv.getattr(intern!(py, "cache_inserted_len"))?.extract()?;
        let old = req.getattr(intern!(py, "lock"))?;
        let lock_from = if old.is_none() {
            None
        } else {
            Some(old.getattr(intern!(py, "node"))?)
        };
        let ids = req.getattr(intern!(py, "full_untruncated_fill_ids"))?;
        let table = pool.getattr(intern!(py, "req_to_token"))?;
        let row_idx = kv.getattr(intern!(py, "req_pool_idx"))?;
        let (row, views) = Self::row(slf, &table, &row_idx, n)?;
        let tokens = slf.borrow().tokens(ids, n)?;
        let ns = namespace(
            req.getattr(intern!(py, "extra_key"))?,
            req.getattr(intern!(py, "cache_salt"))?,
        )?;
        let priority = req.getattr(intern!(py, "priority"))?;
        let priority = if priority.is_truthy()? {
            priority.extract::<f64>()?
        } else {
            0.0
        };
        let keep = !req.call_method0(intern!(py, "finished"))?.is_truthy()?;
        let (present, node, dups) = PyRadixCache::checkpoint(
            &tree,
            &tokens,
            &row,
            ns.as_ref(),
            priority,
            inserted,
            (prompt - prompt % page) as i64,
            lock_from.as_ref(),
            protected,
            keep,
            Some(n as i64),
        )?;
        let n_obj = n.into_pyobject(py)?;
        if inserted < n as i64 {
            kv.setattr(intern!(py, "cache_inserted_len"), &n_obj)?;
        }
        if let Some(dups) = dups {
            slf.call_method1(
                intern!(py, "_park_duplicates"),
                (&kv, &row, protected, present, dups, views),
            )?;
        }
        kv.setattr(intern!(py, "cache_protected_len"), &n_obj)?;
        let node = Bound::new(py, node)?.into_any();
        if keep {
            let (lock_cls, receipt) = {
                let this = slf.borrow();
                let env = this.env()?;
                (env.tree_lock.clone_ref(py), env.receipt.clone_ref(py))
            };
            let lock = lock_cls.bind(py).call1((&node, receipt))?;
            req.setattr(intern!(py, "lock"), lock)?;
        } else {
            req.setattr(intern!(py, "lock"), py.None())?;
        }
        req.setattr(intern!(py, "last_node"), node)
    }

    /// The first `req.prefix_len` slots of the path to `req.last_node`: int64 on the KV
    /// device. The last result is kept and handed out again (read-only: `SGLang` copies it into
    /// its request table) for the same (length, node), while that node lives: certainly when
    /// nothing was evicted since it was made, else once the node is read (`StaleHandle` if it
    /// was evicted, as the tree's read of the slots would raise).
    fn prefix_device_indices<'py>(
        slf: &Bound<'py, Self>,
        req: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let n = count(
            req.getattr(intern!(py, "prefix_len"))?.extract()?,
            "prefix_len",
        )?;
        if n == 0 {
            return Ok(slf.borrow().env()?.empty_indices.bind(py).clone());
        }
        let node = req.getattr(intern!(py, "last_node"))?;
        let (hit, stale_check) = {
            let this = slf.borrow();
            match &this.kept {
                Some(k) if k.n == n && k.node.get().same(&node) => (
                    Some(k.tensor.bind(py).clone()),
                    (k.evictions != this.evictions).then(|| k.node.clone_ref(py)),
                ),
                _ => (None, None),
            }
        };
        if let Some(tensor) = hit {
            if let Some(kept_node) = stale_check {
                kept_node.get().check_live(py)?;
                let mut this = slf.borrow_mut();
                let evictions = this.evictions;
                if let Some(k) = this.kept.as_mut() {
                    k.evictions = evictions;
                }
            }
            return Ok(tensor);
        }
        let tree = slf.borrow().bound_tree(py)?;
        let tree = busy(&tree)?;
        // checked first, so that a refused call keeps the kept result; then that result's
        // memory goes back before the read allocates, to be reused warm
        tree.path_target(&node, Some(n as i64))?;
        slf.borrow_mut().kept = None;
        let slots = tree.path_slots(py, &node, None, Some(n as i64))?;
        drop(tree);
        let as_tensor = slf.borrow().env()?.as_tensor.clone_ref(py);
        let tensor = as_tensor.bind(py).call1((slots,))?;
        let mut this = slf.borrow_mut();
        let evictions = this.evictions;
        this.kept = Some(Kept {
            n,
            node: node.cast_into::<PyNode>()?.unbind(),
            tensor: tensor.clone().unbind(),
            evictions,
        });
        Ok(tensor)
    }

    /// Frees `params.num_tokens` tokens or as many as there are: the subclass's parked
    /// duplicates first, then unlocked leaves in the policy's order, handed to `SGLang`'s
    /// allocator in one call (see `evict_tokens`). `SGLang`'s `EvictResult` with the tokens
    /// freed.
    fn evict<'py>(
        slf: &Bound<'py, Self>,
        params: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let want: i64 = params.getattr(intern!(py, "num_tokens"))?.extract()?;
        let (disabled, result_cls) = {
            let this = slf.borrow();
            (this.disable, this.env()?.evict_result.clone_ref(py))
        };
        let got = if disabled || want <= 0 {
            0
        } else {
            Self::evict_tokens(slf, want as usize)?
        };
        let kwargs = PyDict::new(py);
        kwargs.set_item(intern!(py, "num_tokens_evicted"), got)?;
        result_cls.bind(py).call((), Some(&kwargs))
    }

    /// `evict(params)`, as the base class's; a joint-reclaim predicate is not supported
    /// (`NotImplementedError`, nothing freed).
    #[pyo3(signature = (params, *, allocation_reclaim_satisfied = None))]
    fn evict_for_alloc<'py>(
        slf: &Bound<'py, Self>,
        params: &Bound<'py, PyAny>,
        allocation_reclaim_satisfied: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        if allocation_reclaim_satisfied.is_some_and(|p| !p.is_none()) {
            return Err(PyNotImplementedError::new_err(
                "This cache does not support joint reclaim",
            ));
        }
        Self::evict(slf, params)
    }

    /// Protects the path to `node` (unless disabled); `SGLang`'s `TreeLock` for it.
    fn lock<'py>(slf: &Bound<'py, Self>, node: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let (tree, lock_cls, receipt) = {
            let this = slf.borrow();
            let env = this.env()?;
            let tree = if this.disable {
                None
            } else {
                Some(this.bound_tree(py)?)
            };
            (tree, env.tree_lock.clone_ref(py), env.receipt.clone_ref(py))
        };
        if let Some(tree) = tree {
            busy_mut(&tree)?.lock(node)?;
        }
        lock_cls.bind(py).call1((node, receipt))
    }

    /// Undoes `lock` (nothing for None or when disabled).
    fn unlock(slf: &Bound<'_, Self>, lock: &Bound<'_, PyAny>) -> PyResult<()> {
        let py = slf.py();
        if lock.is_none() {
            return Ok(());
        }
        let tree = {
            let this = slf.borrow();
            if this.disable {
                return Ok(());
            }
            this.bound_tree(py)?
        };
        let node = lock.getattr(intern!(py, "node"))?;
        busy_mut(&tree)?.unlock(&node).map(|_| ())
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySglangBase>()
}
