//! Token ids held in Python's `array.array` (what `SGLang` keeps a request's ids in), read in
//! place.
//!
//! The limited API of Python 3.9 (this extension's abi3 floor) has no buffer protocol, so the
//! ids are found through the array's documented `buffer_info()`: its buffer's address and
//! length in items. That address is good while the array is not resized, and resizing needs
//! the GIL: a view made here is only read before the call that made it returns, and no call
//! that reads one releases the GIL.

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyType;

use crate::convert::{bad, i32_input, I32Input};

static ARRAY_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// Ids of an `array.array` at their own width.
pub enum ArrayIds<'py> {
    /// Typecode `q` (or an 8-byte `l`): int64, in place.
    I64(Bound<'py, PyAny>, *const i64, usize),
    /// Typecode `i` (or a 4-byte `l`): int32, in place.
    I32(Bound<'py, PyAny>, *const i32, usize),
    /// Any other integer typecode, converted once (range-checked as `i32_input` does).
    Other(I32Input<'py>),
}

impl ArrayIds<'_> {
    pub fn i64s(&self) -> Option<&[i64]> {
        match self {
            // SAFETY: address and length from `buffer_info()` of the array `a` keeps alive;
            // not resized while the GIL is held (module comment); aligned for its item type.
            ArrayIds::I64(_a, p, n) if *n > 0 => {
                Some(unsafe { std::slice::from_raw_parts(*p, *n) })
            }
            ArrayIds::I64(..) => Some(&[]),
            _ => None,
        }
    }

    pub fn i32s(&self) -> Option<&[i32]> {
        match self {
            // SAFETY: as for `i64s`.
            ArrayIds::I32(_a, p, n) if *n > 0 => {
                Some(unsafe { std::slice::from_raw_parts(*p, *n) })
            }
            ArrayIds::I32(..) => Some(&[]),
            ArrayIds::Other(v) => Some(v.as_slice()),
            ArrayIds::I64(..) => None,
        }
    }
}

/// `obj` read as an `array.array` of ids; None when it is not exactly one.
pub fn array_ids<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<Option<ArrayIds<'py>>> {
    let py = obj.py();
    if !obj.get_type().is(ARRAY_TYPE.import(py, "array", "array")?) {
        return Ok(None);
    }
    let code: char = obj.getattr(intern!(py, "typecode"))?.extract()?;
    let width = match code {
        'q' => 8,
        'i' => 4,
        'l' => obj.getattr(intern!(py, "itemsize"))?.extract::<usize>()?,
        'f' | 'd' => {
            return Err(bad(
                what,
                format!("expected integer ids, got array('{code}') of floats"),
            ))
        }
        _ => 0,
    };
    if width != 8 && width != 4 {
        // b, h, B, H, I, L, Q, u, w: rare here, converted through a list
        let list = obj.call_method0(intern!(py, "tolist"))?;
        return i32_input(&list, what).map(|v| Some(ArrayIds::Other(v)));
    }
    let (addr, len): (usize, usize) = obj.call_method0(intern!(py, "buffer_info"))?.extract()?;
    Ok(Some(if width == 8 {
        ArrayIds::I64(obj.clone(), addr as *const i64, len)
    } else {
        ArrayIds::I32(obj.clone(), addr as *const i32, len)
    }))
}
