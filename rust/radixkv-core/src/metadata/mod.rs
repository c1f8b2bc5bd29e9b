//! Builders of the int32 arrays attention kernels read for one batch (docs/contract.md §3).
//!
//! Every builder returns a [`MetadataBuf`]: all fields of the batch laid out in **one** `Vec<i32>`,
//! each at a 64-byte aligned offset. The binding hands that vector to `NumPy` once and exposes each
//! field as a view of it, so moving a whole batch to the GPU is a single host-to-device copy.
//!
//! - [`extend_metadata`]: prefix-prefill batches (`qo_indptr`, `kv_indptr`, `kv_indices`, ...).
//! - [`paged_extend_metadata`]: extend batches over pages (e.g. from a `BlockAllocator`).
//! - [`decode_metadata`]: decode batches in CSR form, over slots (`page_size == 1`) or pages.
//! - [`block_table_metadata`]: decode batches as a zero-padded `[batch, max_blocks]` block table.
//! - [`decode_plan`] / [`MetadataBuf::with_decode_plan`]: the balanced work partition of a decode
//!   batch that `paged_decode` reads (which KV range of which request each block covers).
//! - [`extend_plan`] / [`MetadataBuf::with_extend_plan`]: the order in which `extend_attention`'s
//!   CTAs take an extend batch's query tiles (heaviest first).
//!
//! The builders only read their inputs: an error means nothing was built, nothing else changed.

mod buffer;
mod decode;
mod extend;
mod extend_plan;
mod paged;
mod plan;

pub(crate) use buffer::try_vec;
pub use buffer::{Field, MetadataBuf, FIELD_ALIGN};
pub(crate) use decode::table_width;
pub use decode::{block_table_metadata, decode_metadata, fill_block_table};
pub use extend::{extend_metadata, paged_extend_metadata};
pub use extend_plan::{extend_plan, EXTEND_PLAN_COLS, KEEP_TOGETHER_KEYS, RUN_TILES};
pub use plan::{
    decode_plan, decode_plan_capacity, decode_plan_fixed, decode_plan_fixed_into, decode_plan_into,
    decode_plan_len, plan_chunk, PlanInfo, MAX_UNITS_PER_REQUEST, MAX_WAVES, MIN_CHUNK_TOKENS,
    PLAN_COLS,
};

#[cfg(test)]
mod tests;
