//! Turning Python inputs into `&[i32]` and results into `NumPy` arrays, in one place.
//!
//! Accepted for every token / slot / id sequence: a list or tuple of ints, a 1-D `NumPy` array of
//! any integer dtype, or a 1-D CPU torch tensor of an integer dtype. A C-contiguous `NumPy` int32
//! array is borrowed without a copy; anything else is converted once, range-checked. Floats,
//! bools, strings and GPU tensors are refused with `InvalidArgument` naming the argument.

use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyList, PyTuple};

use crate::errors::InvalidArgument;

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

fn bad(what: &str, detail: impl std::fmt::Display) -> PyErr {
    InvalidArgument::new_err(format!("{what}: {detail}"))
}

fn narrow(what: &str, v: i64) -> PyResult<i32> {
    i32::try_from(v).map_err(|_| bad(what, format!("value {v} does not fit in int32")))
}

/// Reads `obj` as a 1-D sequence of int32. `what` names the argument in error messages.
pub fn i32_input<'py>(obj: &Bound<'py, PyAny>, what: &str) -> PyResult<I32Input<'py>> {
    // The common case first: a C-contiguous int32 array is borrowed as is. Type checks are
    // pointer compares; a torch tensor never passes them, so its (slower) test comes last.
    if let Ok(a) = obj.cast::<PyArray1<i32>>() {
        let aligned = (a.data() as usize).is_multiple_of(std::mem::align_of::<i32>());
        if a.is_c_contiguous() && aligned && a.len() > 0 {
            return Ok(I32Input::Borrowed(a.clone()));
        }
        // Strided, misaligned or empty: copy element by element (to_vec() refuses strides).
        return Ok(I32Input::Owned(
            a.readonly().as_array().iter().copied().collect(),
        ));
    }
    if let Ok(a) = obj.cast::<PyArray1<i64>>() {
        let ro = a.readonly();
        let v = ro
            .as_array()
            .iter()
            .map(|&x| narrow(what, x))
            .collect::<PyResult<Vec<_>>>()?;
        return Ok(I32Input::Owned(v));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let n = obj.len()?;
        let mut v = Vec::with_capacity(n);
        for item in obj.try_iter()? {
            let item = item?;
            if item.is_instance_of::<PyBool>() {
                return Err(bad(what, "expected ints, got a bool"));
            }
            let x: i64 = item.extract().map_err(|_| {
                let tn = item
                    .get_type()
                    .name()
                    .map_or_else(|_| "?".to_string(), |s| s.to_string());
                bad(what, format!("expected ints, got {tn}"))
            })?;
            v.push(narrow(what, x)?);
        }
        return Ok(I32Input::Owned(v));
    }
    // Torch CPU tensors go through .numpy(), which shares memory. Tested after the NumPy casts
    // and lists: the test builds the type's module name.
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
        let arr = obj.call_method0("numpy")?;
        return i32_input(&arr, what);
    }
    if is_numpy_array(obj) {
        // Other dtypes / ndim: let NumPy tell us what it is, then accept only 1-D integers.
        let ndim: usize = obj.getattr("ndim")?.extract()?;
        let kind: String = obj.getattr("dtype")?.getattr("kind")?.extract()?;
        if ndim != 1 {
            return Err(bad(
                what,
                format!("expected a 1-D array, got {ndim} dimensions"),
            ));
        }
        if kind != "i" && kind != "u" {
            let dt = obj.getattr("dtype")?.str()?.to_string();
            return Err(bad(
                what,
                format!("expected an integer array, got dtype {dt}"),
            ));
        }
        let as64 = obj.call_method1("astype", ("int64",))?;
        return i32_input(&as64, what);
    }
    let tn = obj
        .get_type()
        .name()
        .map_or_else(|_| "?".to_string(), |s| s.to_string());
    Err(bad(
        what,
        format!("expected a list, NumPy integer array or CPU torch tensor, got {tn}"),
    ))
}

fn is_torch_tensor(obj: &Bound<'_, PyAny>) -> bool {
    let ty = obj.get_type();
    ty.module()
        .is_ok_and(|m| m.to_string().starts_with("torch"))
        && obj.hasattr("numpy").unwrap_or(false)
}

fn is_numpy_array(obj: &Bound<'_, PyAny>) -> bool {
    obj.get_type().name().is_ok_and(|n| n == "ndarray")
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
