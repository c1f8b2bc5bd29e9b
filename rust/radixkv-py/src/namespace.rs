//! Namespaces (None, a str, or a tuple of str / None) as tagged, length-prefixed bytes: an
//! injective encoding (`("bc", "a")` and `("b", "ca")` differ, None and "" differ) that the
//! core keys its roots by, and that `decode` turns back into the Python value (for events).

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple};

use crate::errors::InvalidArgument;

fn push_str(buf: &mut Vec<u8>, s: &str) {
    buf.push(b's');
    buf.extend_from_slice(&(s.len() as u64).to_le_bytes());
    buf.extend_from_slice(s.as_bytes());
}

/// Encodes a namespace; `None` is the empty encoding (the default namespace).
pub fn encode(ns: Option<&Bound<'_, PyAny>>, buf: &mut Vec<u8>) -> PyResult<()> {
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

fn bad_namespace(o: &Bound<'_, PyAny>) -> PyErr {
    let tn = o
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    InvalidArgument::new_err(format!(
        "namespace: expected None, a str, or a tuple of str / None, got {tn}"
    ))
}

/// Reads one length-prefixed str at `*pos`.
fn read_str(b: &[u8], pos: &mut usize) -> Option<String> {
    let len = u64::from_le_bytes(b.get(*pos..*pos + 8)?.try_into().ok()?) as usize;
    *pos += 8;
    let s = std::str::from_utf8(b.get(*pos..*pos + len)?)
        .ok()?
        .to_string();
    *pos += len;
    Some(s)
}

/// The Python value of an encoding made by `encode`.
pub fn decode<'py>(py: Python<'py>, b: &[u8]) -> PyResult<Bound<'py, PyAny>> {
    let broken = || InvalidArgument::new_err("namespace: undecodable encoding");
    if b.is_empty() {
        return Ok(py.None().into_bound(py));
    }
    let mut pos = 1;
    match b[0] {
        b's' => {
            let s = read_str(b, &mut pos).ok_or_else(broken)?;
            Ok(PyString::new(py, &s).into_any())
        }
        b't' => {
            let n = u64::from_le_bytes(b.get(1..9).ok_or_else(broken)?.try_into().unwrap());
            pos = 9;
            let mut items: Vec<Bound<'py, PyAny>> = Vec::new();
            for _ in 0..n {
                match b.get(pos) {
                    Some(b'n') => {
                        pos += 1;
                        items.push(py.None().into_bound(py));
                    }
                    Some(b's') => {
                        pos += 1;
                        let s = read_str(b, &mut pos).ok_or_else(broken)?;
                        items.push(PyString::new(py, &s).into_any());
                    }
                    _ => return Err(broken()),
                }
            }
            Ok(PyTuple::new(py, items)?.into_any())
        }
        _ => Err(broken()),
    }
}
