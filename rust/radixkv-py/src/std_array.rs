//! Token ids held in Python's `array.array` (what `SGLang` keeps a request's ids in), read in
//! place.
//!
//! The limited API of Python 3.9 (this extension's abi3 floor) has no buffer protocol, so the
//! ids are found through the array's documented `buffer_info()`: its buffer's address and
//! length in items. That address is good while the array is not resized, and resizing needs
//! Python code to run (which may hand the GIL to another thread). So the address is read by
//! `view`, which a call makes after converting every other argument, and the call runs no
//! Python code until it is done with the view.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::convert::{bad, TokenSlice};

static ARRAY_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// An `array.array` of ids read in place: typecode `q` (or an 8-byte `l`) as int64, `i` (or a
/// 4-byte `l`) as int32.
pub struct ArrayIds<'py> {
    array: Bound<'py, PyAny>,
    wide: bool,
}

/// What `std_array` found.
pub enum StdArray<'py> {
    InPlace(ArrayIds<'py>),
    /// Any other integer typecode (b, h, B, H, I, L, Q): its ints as a list (`tolist()`), for
    /// the caller's own conversion and range checks.
    List(Bound<'py, PyAny>),
}

impl ArrayIds<'_> {
    /// The ids at their own width: good until Python code runs again (module comment).
    pub fn view(&self) -> PyResult<TokenSlice<'_>> {
        let a = &self.array;
        let (addr, len): (usize, usize) =
            a.call_method0(intern!(a.py(), "buffer_info"))?.extract()?;
        if len == 0 {
            return Ok(if self.wide {
                TokenSlice::I64(&[])
            } else {
                TokenSlice::I32(&[])
            });
        }
        // SAFETY: address and length in items of the live buffer of the array `self` keeps
        // alive, aligned for its item type; read before any Python code runs (module comment).
        Ok(unsafe {
            if self.wide {
                TokenSlice::I64(std::slice::from_raw_parts(addr as *const i64, len))
            } else {
                TokenSlice::I32(std::slice::from_raw_parts(addr as *const i32, len))
            }
        })
    }
}

/// `obj` read as an `array.array` of ids; None when it is not exactly one. Float and
/// character typecodes are refused, naming `what`.
pub fn std_array<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<StdArray<'py>>> {
    let py = obj.py();
    if !obj.get_type().is(ARRAY_TYPE.import(py, "array", "array")?) {
        return Ok(None);
    }
    let code: char = obj.getattr(intern!(py, "typecode"))?.extract()?;
    let wide = match code {
        'q' => true,
        'i' => false,
        'l' => obj.getattr(intern!(py, "itemsize"))?.extract::<usize>()? == 8,
        'b' | 'h' | 'B' | 'H' | 'I' | 'L' | 'Q' => {
            return Ok(Some(StdArray::List(
                obj.call_method0(intern!(py, "tolist"))?,
            )))
        }
        _ => {
            return Err(bad(
                what,
                format!("expected integer ids, got an array of typecode '{code}'"),
            ))
        }
    };
    Ok(Some(StdArray::InPlace(ArrayIds {
        array: obj.clone(),
        wide,
    })))
}

/// Whether `obj` is exactly an `array.array` (read by `std_array`, whatever its typecode).
pub fn is_std_array(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    Ok(obj
        .get_type()
        .is(ARRAY_TYPE.import(obj.py(), "array", "array")?))
}
