//! radixkv-core: the state a scheduler keeps about KV memory, with no Python in it.
//!
//! - [`pool`]: `TokenPool`, the slot / page free list of one KV pool.
//! - [`radix`]: `RadixCache`, the token-granular prefix tree with `lock_ref` and LRU leaf eviction.
//! - [`blocks`]: `BlockAllocator`, vLLM-style block tables with ref counts and copy-on-write.
//! - [`metadata`]: builders of the int32 arrays attention kernels read.
//!
//! Every public operation either succeeds or returns a [`CoreError`] having changed nothing.

pub mod blocks;
pub mod error;
pub mod metadata;
pub mod pool;
pub mod radix;
pub mod slot;

pub use error::{CoreError, Result};
