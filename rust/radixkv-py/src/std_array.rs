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

use crate::convert::{bad, i32_input, I32Input, TokenSlice};

static ARRAY_TYPE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// An `array.array` of ids.
pub enum ArrayIds<'py> {
    /// Typecode `q` (or an 8-byte `l`): int64, read in place by `view`.
    I64(Bound<'py, PyAny>),
    /// Typecode `i` (or a 4-byte `l`): int32, read in place by `view`.
    I32(Bound<'py, PyAny>),
    /// Any other integer typecode, converted once (range-checked as `i32_input` does).
    Other(I32Input<'py>),
}

impl ArrayIds<'_> {
    /// The ids at their own width: good until Python code runs again (module comment).
    pub fn view(&self) -> PyResult<TokenSlice<'_>> {
        let (a, wide) = match self {
            ArrayIds::I64(a) => (a, true),
            ArrayIds::I32(a) => (a, false),
            ArrayIds::Other(v) => return Ok(TokenSlice::I32(v.as_slice())),
        };
        let (addr, len): (usize, usize) =
            a.call_method0(intern!(a.py(), "buffer_info"))?.extract()?;
        if len == 0 {
            return Ok(if wide {
                TokenSlice::I64(&[])
            } else {
                TokenSlice::I32(&[])
            });
        }
        // SAFETY: address and length in items of the live buffer of the array `self` keeps
        // alive, aligned for its item type; read before any Python code runs (module comment).
        Ok(unsafe {
            if wide {
                TokenSlice::I64(std::slice::from_raw_parts(addr as *const i64, len))
            } else {
                TokenSlice::I32(std::slice::from_raw_parts(addr as *const i32, len))
            }
        })
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
    Ok(Some(match width {
        8 => ArrayIds::I64(obj.clone()),
        4 => ArrayIds::I32(obj.clone()),
        // b, h, B, H, I, L, Q, u, w: rare here, converted through a list
        _ => ArrayIds::Other(i32_input(&obj.call_method0(intern!(py, "tolist"))?, what)?),
    }))
}
