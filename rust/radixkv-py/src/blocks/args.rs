//! Scalar arguments (ids, counts, positions) read with typed errors: a float, bool, str or
//! negative number raises `InvalidArgument` naming the argument instead of `PyO3`'s `TypeError`.

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};

use crate::errors::InvalidArgument;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |s| s.to_string())
}

fn is_bool(obj: &Bound<'_, PyAny>) -> bool {
    // NumPy's bool_ has __index__ too; a bool is never meant as a count or an id.
    obj.is_instance_of::<PyBool>() || type_name(obj) == "bool" || type_name(obj) == "bool_"
}

/// A non-negative integer (Python int or anything with `__index__`, e.g. `NumPy` ints).
pub fn non_negative(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<u64> {
    // Fast path: a plain int (bool is a subclass of int, so it is excluded first).
    if obj.is_instance_of::<PyInt>() && !obj.is_instance_of::<PyBool>() {
        if let Ok(v) = obj.extract::<u64>() {
            return Ok(v);
        }
    }
    if is_bool(obj) {
        return Err(InvalidArgument::new_err(format!(
            "{what}: expected an int, got a bool"
        )));
    }
    match obj.extract::<u64>() {
        Ok(v) => Ok(v),
        Err(_) => match obj.extract::<i128>() {
            Ok(v) if v < 0 => Err(InvalidArgument::new_err(format!(
                "{what}: must be >= 0, got {v}"
            ))),
            Ok(v) => Err(InvalidArgument::new_err(format!(
                "{what}: {v} is out of range"
            ))),
            Err(_) => Err(InvalidArgument::new_err(format!(
                "{what}: expected an int, got {}",
                type_name(obj)
            ))),
        },
    }
}

/// A count / position / index used for Rust indexing.
pub fn count(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<usize> {
    let v = non_negative(obj, what)?;
    usize::try_from(v).map_err(|_| InvalidArgument::new_err(format!("{what}: {v} is out of range")))
}

/// `None` or a count.
pub fn opt_count(obj: Option<&Bound<'_, PyAny>>, what: &str) -> PyResult<Option<usize>> {
    match obj {
        Some(o) if !o.is_none() => count(o, what).map(Some),
        _ => Ok(None),
    }
}

/// A sequence of sequence ids: list / tuple of ints, or a 1-D integer `NumPy` array / CPU tensor.
pub fn seq_ids(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    let items = if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        obj.clone()
    } else if obj.hasattr("dtype")? && obj.hasattr("tolist")? {
        // NumPy array or torch tensor: refuse float / bool dtypes, then go through Python ints.
        let dt = obj.getattr("dtype")?.str()?.to_string();
        let is_int = dt.contains("int") && !dt.contains("bool");
        let ndim: usize = obj.getattr("ndim")?.extract()?;
        if !is_int || ndim != 1 {
            return Err(InvalidArgument::new_err(format!(
                "{what}: expected a 1-D integer array, got dtype {dt} with {ndim} dimensions"
            )));
        }
        obj.call_method0("tolist")?
    } else {
        return Err(InvalidArgument::new_err(format!(
            "{what}: expected a list of ints or an integer array, got {}",
            type_name(obj)
        )));
    };
    let mut out = Vec::with_capacity(items.len()?);
    for (i, item) in items.try_iter()?.enumerate() {
        out.push(non_negative(&item?, &format!("{what}[{i}]"))?);
    }
    Ok(out)
}
