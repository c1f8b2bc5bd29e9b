//! The radix prefix cache (docs/contract.md §2).
//!
//! - `node`: the arena of nodes and the generation-carrying `NodeHandle`;
//! - `children`: child lookup by (parent, first token), sibling chains for pages;
//! - `policy`: eviction policies and the ordered index of unlocked leaves;
//! - `events`: KV events (stored / removed / cleared) with chained page hashes;
//! - `namespace`: one root per namespace;
//! - `tree`: match / peek / insert / lock / unlock / evict on a slot-agnostic tree;
//! - `check`: the integrity checker;
//! - `cache`: `RadixCache`, the tree plus an optional `TokenPool`;
//! - `replay`: an operation enum and a harness with a reference model, shared by the proptest
//!   machine and the fuzz target (built for tests and with the `testing` feature only).

mod cache;
mod check;
mod children;
mod events;
mod namespace;
mod node;
mod partial;
mod policy;
#[cfg(any(test, feature = "testing"))]
pub mod replay;
mod token;
mod tree;

pub use crate::slot::{Slot, SlotOut};
pub use cache::{lock_pool, shared_pool, CacheOptions, DumpRow, RadixCache, SharedPool};
pub use events::KvEvent;
pub use node::NodeHandle;
pub use partial::Tail;
pub use policy::{Policy, SLRU_PROTECTED_HITS};
pub use token::TokenId;
pub use tree::{NodeInfo, NodeView, PrefixMatch, RadixTree};

#[cfg(test)]
mod api_tests;
#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod corrupt;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod heap_tests;
#[cfg(test)]
mod partial_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
