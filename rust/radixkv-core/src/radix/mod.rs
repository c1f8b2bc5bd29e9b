//! The radix prefix cache (docs/contract.md §2).
//!
//! - `node`: the arena of nodes and the generation-carrying `NodeHandle`;
//! - `children`: child lookup by (parent, first token), sibling chains for pages;
//! - `lru`: the ordered index of unlocked leaves;
//! - `namespace`: one root per namespace;
//! - `tree`: match / peek / insert / lock / unlock / evict on a slot-agnostic tree;
//! - `check`: the integrity checker;
//! - `cache`: `RadixCache`, the tree plus an optional `TokenPool`;
//! - `replay`: an operation enum and a harness with a reference model, shared by the proptest
//!   machine and the fuzz target.

mod cache;
mod check;
mod children;
mod lru;
mod namespace;
mod node;
pub mod replay;
mod tree;

pub use cache::{lock_pool, shared_pool, DumpRow, RadixCache, SharedPool};
pub use node::NodeHandle;
pub use tree::{NodeInfo, PrefixMatch, RadixTree};

#[cfg(test)]
mod tests;
