//! The radix prefix cache (SPEC §2).
//!
//! - `node`: the arena of nodes and the generation-carrying `NodeHandle`;
//! - `children`: child lookup by (parent, first token), sibling chains for pages;
//! - `lru`: the ordered index of unlocked leaves;
//! - `namespace`: one root per namespace;
//! - `tree`: match / peek / insert / lock / unlock / evict on a slot-agnostic tree;
//! - `check`: the integrity checker;
//! - `cache`: `RadixCache`, the tree plus an optional `TokenPool`;
//! - `replay`: an operation enum and a harness with a reference model, shared by the proptest
//!   machine and the fuzz target (built for tests and with the `testing` feature only).

mod cache;
mod check;
mod children;
mod lru;
mod namespace;
mod node;
#[cfg(any(test, feature = "testing"))]
pub mod replay;
mod tree;

pub use cache::{lock_pool, shared_pool, DumpRow, RadixCache, SharedPool};
pub use node::NodeHandle;
pub use tree::{NodeInfo, PrefixMatch, RadixTree};

#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod corrupt;
#[cfg(test)]
mod edge_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;
