//! Slot ids across the boundary: int32 or int64 in, the dtype the caller asks for out.
//!
//! Accepted for every slot sequence: a list or tuple of ints, a 1-D `NumPy` array of any
//! integer dtype, an `array.array` of an integer typecode, or a 1-D CPU torch tensor of an
//! integer dtype. A C-contiguous, aligned int64
//! array is read in place; anything else is widened to int64 once. Floats, bools, strings, GPU
//! tensors and ids that do not fit int64 are refused with `InvalidArgument` naming the argument.
//!
//! Out: a fresh `NumPy` array of int32 or int64 (`SlotDtype`), or the caller's `out` array of
//! either width. int32 output is refused up front when the cache ever held an id above
//! 2**31 - 1 (`RadixCache::check_fits_i32`), so no call fails half-way.

use numpy::{Element, PyArray1, PyArrayMethods, PyReadwriteArray1, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyString;
use radixkv_core::slot::{Slot, SlotOut};

use crate::convert::{bad, contiguous, list_i64, other_array, unsupported, TokenSlice};
use crate::errors::{CoreResultExt, InvalidArgument};
use crate::std_array::{std_array, StdArray};

/// The element type of slot arrays handed out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SlotDtype {
    I32,
    I64,
}

impl SlotDtype {
    pub fn name(self) -> &'static str {
        match self {
            SlotDtype::I32 => "int32",
            SlotDtype::I64 => "int64",
        }
    }

    /// Reads `"int32"` / `"int64"`, a `NumPy` dtype or scalar type (`np.int64`), or a torch
    /// dtype (`torch.int64`); `None` gives `default`.
    pub fn parse(obj: Option<&Bound<'_, PyAny>>, default: SlotDtype) -> PyResult<SlotDtype> {
        let Some(obj) = obj.filter(|o| !o.is_none()) else {
            return Ok(default);
        };
        let text = if let Ok(s) = obj.cast::<PyString>() {
            s.to_cow()?.into_owned()
        } else {
            let s = obj.str()?.to_string();
            if s.starts_with("torch.") {
                s.trim_start_matches("torch.").to_string()
            } else {
                // NumPy names whatever it accepts as a dtype: np.int64, np.dtype("<i8"), ...
                let np = obj.py().import("numpy")?;
                match np.call_method1("dtype", (obj,)) {
                    Ok(d) => d.getattr("name")?.extract::<String>()?,
                    Err(_) => s,
                }
            }
        };
        match text.as_str() {
            "int32" => Ok(SlotDtype::I32),
            "int64" => Ok(SlotDtype::I64),
            _ => Err(InvalidArgument::new_err(format!(
                "dtype: expected int32 or int64 for slot ids, got {text}"
            ))),
        }
    }
}

/// A 1-D int64 view of a Python slot sequence.
pub enum SlotInput<'py> {
    Borrowed(Bound<'py, PyArray1<i64>>),
    Owned(Vec<Slot>),
}

impl SlotInput<'_> {
    pub fn as_slice(&self) -> &[Slot] {
        match self {
            // SAFETY: contiguity, alignment and a non-empty buffer were checked when this
            // variant was built; the array is kept alive by `a`, and no Rust code in this
            // extension mutates an input array (see `convert::I32Input`).
            SlotInput::Borrowed(a) => unsafe { a.as_slice() }.expect("contiguous by construction"),
            SlotInput::Owned(v) => v,
        }
    }
}

/// Slots for an insert: a C-contiguous int32 array is read in place (the core widens only
/// the ids it stores); anything else as `slot_input` reads it.
pub enum InsertSlots<'py> {
    I32(Bound<'py, PyArray1<i32>>),
    Other(SlotInput<'py>),
}

impl InsertSlots<'_> {
    /// The ids, at their own width.
    pub fn slice(&self) -> SlotsRef<'_> {
        match self {
            // SAFETY: contiguity, alignment and a non-empty buffer were checked when this
            // variant was built; the array is kept alive by `a`, read while the GIL is held,
            // and no Rust code in this extension writes input arrays.
            InsertSlots::I32(a) => {
                SlotsRef::I32(unsafe { a.as_slice() }.expect("contiguous by construction"))
            }
            InsertSlots::Other(s) => SlotsRef::I64(s.as_slice()),
        }
    }
}

/// A slot slice of either width.
#[derive(Clone, Copy)]
pub enum SlotsRef<'a> {
    I32(&'a [i32]),
    I64(&'a [Slot]),
}

impl SlotsRef<'_> {
    pub fn len(self) -> usize {
        match self {
            SlotsRef::I32(s) => s.len(),
            SlotsRef::I64(s) => s.len(),
        }
    }

    /// The first `n` ids (`n` at most `len()`).
    #[must_use]
    pub fn head(self, n: usize) -> Self {
        match self {
            SlotsRef::I32(s) => SlotsRef::I32(&s[..n]),
            SlotsRef::I64(s) => SlotsRef::I64(&s[..n]),
        }
    }
}

/// Reads `obj` for an insert (see `InsertSlots`); `what` names the argument in errors.
pub fn insert_slots<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<InsertSlots<'py>> {
    if let Some(a) = obj.cast::<PyArray1<i32>>().ok().and_then(contiguous) {
        return Ok(InsertSlots::I32(a.clone()));
    }
    Ok(InsertSlots::Other(slot_input(obj, what)?))
}

/// Reads `obj` as a 1-D sequence of slot ids (int64). `what` names the argument in errors.
pub fn slot_input<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<SlotInput<'py>> {
    if let Ok(a) = obj.cast::<PyArray1<i32>>() {
        if let Some(a) = contiguous(a) {
            // SAFETY: contiguous and aligned (checked by `contiguous`); read once, here, while
            // the GIL is held, and no Rust code in this extension writes input arrays. Skips
            // rust-numpy's borrow tracking, as `convert::i32_input` does.
            let v = unsafe { a.as_slice() }.expect("contiguous");
            return Ok(SlotInput::Owned(v.iter().map(|&x| Slot::from(x)).collect()));
        }
        let ro = a.readonly();
        return Ok(SlotInput::Owned(
            ro.as_array().iter().map(|&x| Slot::from(x)).collect(),
        ));
    }
    if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        if let Some(a) = contiguous(a) {
            return Ok(SlotInput::Borrowed(a.clone()));
        }
        return Ok(SlotInput::Owned(
            a.readonly().as_array().iter().copied().collect(),
        ));
    }
    match std_array(obj, what)? {
        Some(StdArray::InPlace(a)) => {
            return Ok(SlotInput::Owned(match a.view()? {
                TokenSlice::I32(v) => v.iter().map(|&x| Slot::from(x)).collect(),
                TokenSlice::I64(v) => v.to_vec(),
            }))
        }
        Some(StdArray::List(list)) => return slot_input(&list, what),
        None => {}
    }
    if let Some(v) = list_i64(obj, what)? {
        return Ok(SlotInput::Owned(v));
    }
    if let Some(arr) = other_array(obj, what)? {
        return slot_input(&arr, what);
    }
    Err(unsupported(obj, what))
}

/// A fresh `NumPy` array of `len` elements of `T`, filled by `fill`, which must write every
/// element (it gets the uninitialised buffer).
pub fn new_array<T: Element + SlotOut>(
    py: Python<'_>,
    len: usize,
    fill: impl FnOnce(&mut [T]) -> radixkv_core::Result<()>,
) -> PyResult<Bound<'_, PyAny>> {
    // SAFETY: fresh and uninitialised; returned only after `fill` succeeded, and every filler
    // writes exactly `len` ids (they check the length first). On error it is dropped unread.
    let arr = unsafe { PyArray1::<T>::new(py, [len], false) };
    {
        // SAFETY: the array was just made here; no other reference to its data exists.
        let buf = unsafe { arr.as_slice_mut() }.expect("a fresh 1-D array is contiguous");
        fill(buf).py()?;
    }
    Ok(arr.into_any())
}

/// Copies finished slot ids into a fresh array of `dtype`; int32 is refused (naming `what`)
/// when an id does not fit.
pub fn slots_to_array<'py>(
    py: Python<'py>,
    v: &[Slot],
    dtype: SlotDtype,
    what: &str,
) -> PyResult<Bound<'py, PyAny>> {
    match dtype {
        SlotDtype::I64 => new_array::<i64>(py, v.len(), |b| {
            b.copy_from_slice(v);
            Ok(())
        }),
        SlotDtype::I32 => {
            if let Some(s) = v.iter().find(|&&s| i32::try_from(s).is_err()) {
                return Err(bad(
                    what,
                    format!("slot id {s} does not fit int32; ask for int64"),
                ));
            }
            new_array::<i32>(py, v.len(), |b| {
                for (o, &s) in b.iter_mut().zip(v) {
                    *o = s as i32;
                }
                Ok(())
            })
        }
    }
}

/// A caller's `out` buffer: a 1-D, C-contiguous, writeable int32 or int64 array of at least
/// `need` ids.
pub enum OutArray<'py> {
    I32(PyReadwriteArray1<'py, i32>),
    I64(PyReadwriteArray1<'py, i64>),
}

impl<'py> OutArray<'py> {
    pub fn dtype(&self) -> SlotDtype {
        match self {
            OutArray::I32(_) => SlotDtype::I32,
            OutArray::I64(_) => SlotDtype::I64,
        }
    }

    /// The array object itself.
    pub fn array(&self) -> Bound<'py, PyAny> {
        match self {
            OutArray::I32(a) => {
                let b: &Bound<'py, PyArray1<i32>> = a;
                b.clone().into_any()
            }
            OutArray::I64(a) => {
                let b: &Bound<'py, PyArray1<i64>> = a;
                b.clone().into_any()
            }
        }
    }
}

fn borrow_out<'py, T: Element>(
    a: &Bound<'py, PyArray1<T>>,
    need: usize,
) -> PyResult<PyReadwriteArray1<'py, T>> {
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

pub fn out_array<'py>(o: &Bound<'py, PyAny>, need: usize) -> PyResult<OutArray<'py>> {
    if let Ok(a) = o.cast::<PyArray1<i32>>() {
        return Ok(OutArray::I32(borrow_out(a, need)?));
    }
    if let Ok(a) = o.cast::<PyArray1<i64>>() {
        return Ok(OutArray::I64(borrow_out(a, need)?));
    }
    Err(InvalidArgument::new_err(
        "out: expected a 1-D int32 or int64 NumPy array",
    ))
}
