//! Eviction policies and the evictable-leaf index.
//!
//! Every unlocked leaf sits in one ordered set keyed by its policy's sort key (smallest evicted
//! first) and its id. The index is kept in step with every change of `lock_ref`, child count,
//! access time, hit count or priority (each such change removes the node's old entry and adds
//! its new one), so evicting k leaves costs O(k log n) and nothing ever rebuilds a heap of all
//! leaves. Locked nodes and inner nodes are never in the set, so eviction cannot reach them.
//!
//! The orders are `SGLang`'s (`evict_policy.py`): lru by last access; lfu by (hit count, last
//! access); fifo by creation; mru and filo the reverse of lru and fifo; priority by (priority,
//! last access); slru by (hit count >= 2, last access), a probationary segment evicted before
//! the protected one. Ties cannot arise: an access stamps one path, so two leaves never share
//! a last access, nor a creation time.

use super::node::Node;
use super::tree::RadixTree;
use crate::error::{CoreError, Result};

/// How the cache picks the next leaf to evict.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    Lru,
    Lfu,
    Fifo,
    Mru,
    Filo,
    Priority,
    Slru,
}

/// SLRU's protected segment: leaves matched at least this often.
pub const SLRU_PROTECTED_HITS: u32 = 2;

/// An index entry: (primary, secondary, node id), smallest first.
pub(crate) type IndexKey = (u64, u64, u32);

impl Policy {
    pub const NAMES: [&'static str; 7] = ["lru", "lfu", "fifo", "mru", "filo", "priority", "slru"];

    /// Parses a policy name (as `SGLang`'s `--radix-eviction-policy` spells them).
    pub fn parse(name: &str) -> Result<Self> {
        Ok(match name {
            "lru" => Policy::Lru,
            "lfu" => Policy::Lfu,
            "fifo" => Policy::Fifo,
            "mru" => Policy::Mru,
            "filo" => Policy::Filo,
            "priority" => Policy::Priority,
            "slru" => Policy::Slru,
            _ => {
                return Err(CoreError::invalid(format!(
                    "policy: unknown eviction policy {name:?}; expected one of {}",
                    Self::NAMES.join(", ")
                )))
            }
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Policy::Lru => "lru",
            Policy::Lfu => "lfu",
            Policy::Fifo => "fifo",
            Policy::Mru => "mru",
            Policy::Filo => "filo",
            Policy::Priority => "priority",
            Policy::Slru => "slru",
        }
    }

    /// The sort key of node `i` under this policy.
    pub(crate) fn key(self, n: &Node, i: u32) -> IndexKey {
        let (a, b) = match self {
            Policy::Lru => (n.last_access, 0),
            Policy::Lfu => (u64::from(n.hit_count), n.last_access),
            Policy::Fifo => (n.created, 0),
            Policy::Mru => (!n.last_access, 0),
            Policy::Filo => (!n.created, 0),
            Policy::Priority => (ordered_bits(n.priority), n.last_access),
            Policy::Slru => (u64::from(n.hit_count >= SLRU_PROTECTED_HITS), n.last_access),
        };
        (a, b, i)
    }
}

/// Maps a finite f64 to a u64 with the same order.
fn ordered_bits(x: f64) -> u64 {
    let b = x.to_bits();
    if b >> 63 == 1 {
        !b
    } else {
        b | (1 << 63)
    }
}

impl RadixTree {
    /// Adds `i` to the index if it is now an unlocked leaf.
    pub(crate) fn index_add_if_leaf(&mut self, i: u32) {
        let n = self.node(i);
        if n.is_evictable_leaf() {
            let k = self.policy.key(n, i);
            self.index.insert(k);
        }
    }

    /// Removes `i` from the index if it is there (call *before* it stops being an unlocked leaf,
    /// or before a field of its sort key changes).
    pub(crate) fn index_remove_if_leaf(&mut self, i: u32) {
        let n = self.node(i);
        if n.is_evictable_leaf() {
            let k = self.policy.key(n, i);
            self.index.remove(&k);
        }
    }

    /// Stamps an access (and, for a match, one more hit) on node `i`, moving it in the index if
    /// it is there.
    pub(crate) fn touch(&mut self, i: u32, now: u64, hit: bool, priority: Option<f64>) {
        self.index_remove_if_leaf(i);
        let n = self.node_mut(i);
        n.last_access = now;
        if hit {
            n.hit_count = n.hit_count.saturating_add(1);
        }
        if let Some(p) = priority {
            n.priority = n.priority.max(p);
        }
        self.index_add_if_leaf(i);
    }

    /// The next leaf to evict.
    pub(crate) fn index_pop(&mut self) -> Option<u32> {
        self.index.pop_first().map(|(_, _, i)| i)
    }

    pub fn policy(&self) -> Policy {
        self.policy
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordered_bits_keeps_order() {
        let xs = [-1e300, -2.5, -0.0, 0.0, 1e-300, 1.0, 7.5, 1e300];
        for w in xs.windows(2) {
            assert!(ordered_bits(w[0]) <= ordered_bits(w[1]), "{w:?}");
        }
        assert!(ordered_bits(-1.0) < ordered_bits(1.0));
    }

    #[test]
    fn parse_round_trips_and_refuses() {
        for n in Policy::NAMES {
            assert_eq!(Policy::parse(n).unwrap().name(), n);
        }
        assert!(matches!(
            Policy::parse("lruu"),
            Err(CoreError::InvalidArgument(_))
        ));
    }
}
