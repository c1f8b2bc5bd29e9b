//! `radixkv._core`: the `PyO3` face of radixkv-core. Each module below binds one core module;
//! the typed Python facade is `python/radixkv/`.

mod blocks;
mod convert;
mod errors;
mod kv_events;
mod metadata;
mod namespace;
mod pool;
mod radix;
mod sglang_base;
mod slots;
mod std_array;

use pyo3::prelude::*;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    errors::register(m)?;
    pool::register(m)?;
    radix::register(m)?;
    blocks::register(m)?;
    metadata::register(m)?;
    sglang_base::register(m)?;
    Ok(())
}
