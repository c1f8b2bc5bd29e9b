//! Turning Python inputs into `&[i32]` and results into `NumPy` arrays, in one place.
//!
//! Accepted for every token / slot / id sequence: a list or tuple of ints, a 1-D `NumPy` array of
//! any integer dtype, an `array.array` of an integer typecode, or a 1-D CPU torch tensor of an
//! integer dtype. A C-contiguous `NumPy` int32 array is borrowed without a copy (and token ids
//! of the radix calls that take `token_input` as int64 arrays or `array.array`s); anything else
//! is converted once, range-checked. Floats, bools, strings and GPU tensors are refused with
//! `InvalidArgument` naming the argument.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyTuple};

use crate::errors::InvalidArgument;
use crate::std_array::{std_array, ArrayIds, StdArray};

/// A 1-D int32 view of a Python sequence: read in place when it already is a non-empty,
/// C-contiguous, aligned int32 `NumPy` array.
///
/// The in-place view skips rust-numpy's borrow tracking (a global hash-map insert and remove
/// per argument, ~7% of a short `insert`). That tracking only guards against a *writable*
/// borrow taken by Rust code, and this extension never takes one; writes from Python (or
/// any non-Rust code) while the GIL is released are not prevented by it either.
pub enum I32Input<'py> {
    Borrowed(Bound<'py, PyArray1<i32>>),
    Owned(Vec<i32>),
}

impl Drop for I32Input<'_> {
    /// A narrowed copy's buffer goes back to this thread's scratch (see `narrow_all`).
    fn drop(&mut self) {
        if let I32Input::Owned(v) = self {
            if v.capacity() <= SCRATCH_MAX && v.capacity() > 0 {
                let v = std::mem::take(v);
                SCRATCH.with(|s| {
                    let mut s = s.borrow_mut();
                    if s.capacity() < v.capacity() {
                        *s = v;
                    }
                });
            }
        }
    }
}

/// Largest buffer (int32 ids) kept for reuse between calls: 1 MiB per thread.
const SCRATCH_MAX: usize = 1 << 18;

thread_local! {
    /// The buffer of the last narrowed input, reused by the next: every call of a scheduler
    /// narrows a prompt of about the same length, and writing into memory the previous call
    /// wrote (still in cache) costs less than a fresh allocation's.
    static SCRATCH: std::cell::RefCell<Vec<i32>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl I32Input<'_> {
    pub fn as_slice(&self) -> &[i32] {
        match self {
            // SAFETY: contiguity, alignment and a non-empty buffer were checked when this
            // variant was built; the array object is kept alive by `a`, and no Rust code in this
            // extension mutates an input array (see the type's comment).
            I32Input::Borrowed(a) => unsafe { a.as_slice() }.expect("contiguous by construction"),
            I32Input::Owned(v) => v,
        }
    }
}

pub fn bad(what: &str, detail: impl std::fmt::Display) -> PyErr {
    InvalidArgument::new_err(format!("{what}: {detail}"))
}

fn narrow(what: &str, v: i64) -> PyResult<i32> {
    i32::try_from(v).map_err(|_| bad(what, format!("value {v} does not fit in int32")))
}

/// int64 ids (`SGLang`'s token arrays) as int32 in one pass that vectorises with plain
/// 64-bit adds and ors: `x` fits int32 exactly when `x + 2**31` (wrapping, as u64) has no high
/// bits, so or-ing those sums over the slice flags any id out of range; that id is then named.
/// The output reuses this thread's scratch buffer when one is free (no zero fill: it is
/// cleared and extended).
fn narrow_all(what: &str, v: &[i64]) -> PyResult<I32Input<'static>> {
    let mut out = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    out.clear();
    out.reserve(v.len());
    let high = narrow_into(&mut out.spare_capacity_mut()[..v.len()], v);
    // SAFETY: narrow_into wrote all v.len() elements.
    unsafe { out.set_len(v.len()) };
    if high >> 32 != 0 {
        let x = v.iter().copied().find(|&x| i32::try_from(x).is_err());
        return Err(narrow(what, x.unwrap_or(i64::MAX)).unwrap_err());
    }
    Ok(I32Input::Owned(out))
}

/// Writes `v` truncated to int32 into `out` (same length); returns the or of every
/// `x + 2**31` (as u64), whose high half is nonzero exactly when some `x` does not fit int32.
/// Built for AVX2 when the CPU has it (the baseline x86-64 build packs 64-bit lanes to
/// 32-bit ones slowly), else the same loop for the baseline.
fn narrow_into(out: &mut [std::mem::MaybeUninit<i32>], v: &[i64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU supports AVX2 (checked just above).
            return unsafe { narrow_into_avx2(out, v) };
        }
    }
    narrow_loop(out, v)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn narrow_into_avx2(out: &mut [std::mem::MaybeUninit<i32>], v: &[i64]) -> u64 {
    narrow_loop(out, v)
}

// always inlined, so that inside `narrow_into_avx2` it is compiled for AVX2
#[allow(clippy::inline_always)]
#[inline(always)]
fn narrow_loop(out: &mut [std::mem::MaybeUninit<i32>], v: &[i64]) -> u64 {
    let mut high = 0u64;
    for (o, &x) in out.iter_mut().zip(v) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        {
            o.write(x as i32);
            high |= (x as u64).wrapping_add(1 << 31);
        }
    }
    high
}

/// `a` itself when it can be read in place: C-contiguous, aligned for `T`, non-empty.
pub fn contiguous<'a, 'py, T: numpy::Element>(
    a: &'a Bound<'py, PyArray1<T>>,
) -> Option<&'a Bound<'py, PyArray1<T>>> {
    let aligned = (a.data() as usize).is_multiple_of(std::mem::align_of::<T>());
    (a.is_c_contiguous() && aligned && a.len() > 0).then_some(a)
}

/// Reads `obj` as a 1-D sequence of int32. `what` names the argument in error messages.
pub fn i32_input<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<I32Input<'py>> {
    // The common case first: a C-contiguous int32 array is borrowed as is. Type checks are
    // pointer compares; a torch tensor never passes them, so its (slower) test comes last.
    if let Ok(a) = obj.cast::<PyArray1<i32>>() {
        if let Some(a) = contiguous(a) {
            return Ok(I32Input::Borrowed(a.clone()));
        }
        // Strided, misaligned or empty: copy element by element (to_vec() refuses strides).
        return Ok(I32Input::Owned(
            a.readonly().as_array().iter().copied().collect(),
        ));
    }
    if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        if let Some(v) = contiguous(a) {
            // SAFETY: contiguous, aligned and non-empty (checked by `contiguous`); read once,
            // here, while the GIL is held; this extension never writes input arrays.
            return narrow_all(what, unsafe { v.as_slice() }.expect("contiguous"));
        }
        let ro = a.readonly();
        let v = ro
            .as_array()
            .iter()
            .map(|&x| narrow(what, x))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(I32Input::Owned(v));
    }
    match std_array(obj, what)? {
        // an array.array: copied here, at once (`token_input` reads one in place)
        Some(StdArray::InPlace(a)) => {
            return match a.view()? {
                TokenSlice::I32(v) => Ok(I32Input::Owned(v.to_vec())),
                TokenSlice::I64(v) => narrow_all(what, v),
            }
        }
        Some(StdArray::List(list)) => return i32_input(&list, what),
        None => {}
    }
    if let Some(v) = list_i64(obj, what)? {
        return Ok(I32Input::Owned(
            v.into_iter()
                .map(|x| narrow(what, x))
                .collect::<PyResult<_>>()?,
        ));
    }
    if let Some(arr) = other_array(obj, what)? {
        return i32_input(&arr, what);
    }
    Err(unsupported(obj, what))
}

/// Token ids as the core reads them: int32 ids (`i32_input`), a non-empty C-contiguous
/// aligned int64 `NumPy` array read in place, or an `array.array` read in place at its own
/// width (`std_array`). The core compares int64 ids against its int32 keys at 64 bits and
/// narrows only the ids an insert stores, so a long, mostly cached prompt is not copied; an id
/// that does not fit int32 is refused by the core with the same error (`tokens: value ... does
/// not fit in int32`).
///
/// An `Array`'s ids are read in place by `slice`, whose view is good only until Python code
/// runs again (see `std_array`).
pub enum TokenInput<'py> {
    Narrow(I32Input<'py>),
    Wide(Bound<'py, PyArray1<i64>>),
    Array(ArrayIds<'py>),
}

/// A view of a `TokenInput`'s ids at their own width.
#[derive(Clone, Copy)]
pub enum TokenSlice<'a> {
    I32(&'a [i32]),
    I64(&'a [i64]),
}

impl TokenSlice<'_> {
    pub fn len(self) -> usize {
        match self {
            TokenSlice::I32(t) => t.len(),
            TokenSlice::I64(t) => t.len(),
        }
    }

    /// The first `n` ids (`n` at most `len()`).
    #[must_use]
    pub fn head(self, n: usize) -> Self {
        match self {
            TokenSlice::I32(t) => TokenSlice::I32(&t[..n]),
            TokenSlice::I64(t) => TokenSlice::I64(&t[..n]),
        }
    }
}

impl TokenInput<'_> {
    /// The ids. For an `Array`, good only until Python code runs again: take it after every
    /// other argument is converted (see `std_array`).
    pub fn slice(&self) -> PyResult<TokenSlice<'_>> {
        Ok(match self {
            TokenInput::Narrow(t) => TokenSlice::I32(t.as_slice()),
            // SAFETY: contiguous, aligned and non-empty (checked by `contiguous` when built);
            // the array is kept alive by `a`, and this extension never writes input arrays.
            TokenInput::Wide(a) => {
                TokenSlice::I64(unsafe { a.as_slice() }.expect("contiguous by construction"))
            }
            TokenInput::Array(a) => a.view()?,
        })
    }
}

/// Reads `obj` as token ids: an int64 array or an `array.array` in place (see
/// `TokenInput`), else `i32_input`.
pub fn token_input<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<TokenInput<'py>> {
    if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        if let Some(a) = contiguous(a) {
            return Ok(TokenInput::Wide(a.clone()));
        }
    }
    match std_array(obj, what)? {
        Some(StdArray::InPlace(a)) => Ok(TokenInput::Array(a)),
        Some(StdArray::List(list)) => i32_input(&list, what).map(TokenInput::Narrow),
        None => i32_input(obj, what).map(TokenInput::Narrow),
    }
}

/// The error for an object that is no id sequence at all.
pub fn unsupported(obj: &Bound<'_, PyAny>, what: &str) -> PyErr {
    bad(
        what,
        format!(
            "expected a list, NumPy integer array or CPU torch tensor, got {}",
            type_name(obj)
        ),
    )
}

/// A list or tuple of ints as int64 (None for any other object); bools and non-ints are
/// refused, and so are ints that do not fit int64, by value.
pub fn list_i64(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Option<Vec<i64>>> {
    if !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>()) {
        return Ok(None);
    }
    let mut v = Vec::with_capacity(obj.len()?);
    for item in obj.try_iter()? {
        let item = item?;
        if item.is_instance_of::<PyBool>() {
            return Err(bad(what, "expected ints, got a bool"));
        }
        let x: i64 = item.extract().map_err(|_| {
            if item.extract::<u128>().is_ok() || item.extract::<i128>().is_ok() {
                bad(what, format!("value {item} does not fit int64"))
            } else {
                bad(what, format!("expected ints, got {}", type_name(&item)))
            }
        })?;
        v.push(x);
    }
    Ok(Some(v))
}

/// A torch CPU tensor as the `NumPy` array sharing its memory, or a `NumPy` array of another
/// integer dtype as int64 (one copy); None for any other object. Refuses GPU tensors, 2-D
/// and non-integer arrays and tensors, and uint64 values above int64's range, naming `what`.
/// Tested after the cheap casts: it builds the type's names.
pub fn other_array<'py>(
    obj: &Bound<'py, PyAny>,
    what: &str,
) -> PyResult<Option<Bound<'py, PyAny>>> {
    if is_torch_tensor(obj) {
        let is_cuda: bool = obj.getattr("is_cuda")?.extract()?;
        if is_cuda {
            return Err(bad(what, "expected a CPU tensor, got a CUDA tensor"));
        }
        let dtype = obj.getattr("dtype")?.str()?.to_string();
        if !matches!(
            dtype.as_str(),
            "torch.int32" | "torch.int64" | "torch.int16" | "torch.int8" | "torch.uint8"
        ) {
            return Err(bad(
                what,
                format!("expected an integer tensor, got dtype {dtype}"),
            ));
        }
        return Ok(Some(obj.call_method0("numpy")?));
    }
    if !obj.get_type().name().is_ok_and(|n| n == "ndarray") {
        return Ok(None);
    }
    let ndim: usize = obj.getattr("ndim")?.extract()?;
    let dt = obj.getattr("dtype")?;
    let kind: String = dt.getattr("kind")?.extract()?;
    if ndim != 1 {
        return Err(bad(
            what,
            format!("expected a 1-D array, got {ndim} dimensions"),
        ));
    }
    if kind != "i" && kind != "u" {
        return Err(bad(
            what,
            format!("expected an integer array, got dtype {}", dt.str()?),
        ));
    }
    // uint64 ids above int64's range would wrap: refuse them by value.
    let itemsize: usize = dt.getattr("itemsize")?.extract()?;
    if kind == "u" && itemsize == 8 && obj.len()? > 0 {
        let top: u64 = obj.call_method0("max")?.extract()?;
        if top > i64::MAX as u64 {
            return Err(bad(what, format!("value {top} does not fit int64")));
        }
    }
    Ok(Some(obj.call_method1("astype", ("int64",))?))
}

fn is_torch_tensor(obj: &Bound<'_, PyAny>) -> bool {
    obj.get_type()
        .module()
        .is_ok_and(|m| m.to_string().starts_with("torch"))
        && obj.hasattr("numpy").unwrap_or(false)
}

pub fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |s| s.to_string())
}

/// Moves a `Vec` into a `NumPy` array without copying the data.
pub fn to_numpy(py: Python<'_>, v: Vec<i32>) -> Bound<'_, PyArray1<i32>> {
    v.into_pyarray(py)
}

/// Runs `f` with the GIL released when the work is large enough to be worth it.
/// Small calls keep the GIL: releasing and re-taking it costs more than they do.
pub fn maybe_detach<T, F>(py: Python<'_>, work: usize, f: F) -> T
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    const DETACH_ABOVE: usize = 4096;
    if work > DETACH_ABOVE {
        py.detach(f)
    } else {
        f()
    }
}
