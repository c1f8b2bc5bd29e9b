//! KV events for cache-aware routers: which pages the cache stored, which it removed, and when
//! it was cleared, as `SGLang`'s and `vLLM`'s `BlockStored` / `BlockRemoved` / `AllBlocksCleared`.
//!
//! Off unless the cache is built with events on; then every node keeps one hash per whole page
//! of its key, chained from its parent's last page hash (the first page of a namespace chains
//! from a seed hashed from the namespace, so equal tokens in two namespaces hash apart). A page
//! hash therefore names the whole prefix up to and including that page.
//!
//! Splits. A split cuts a node's hash list at the page boundary: the upper half keeps the hashes
//! of its pages and the lower half the rest; no event is emitted, because no page was stored or
//! removed and every page keeps the hash a router already knows. This is what `SGLang`'s
//! `_split_node` does (its hash list is cut the same way, without an event), and vLLM never
//! splits (its blocks are fixed). `Stored` is emitted once per new leaf (the new pages only),
//! `Removed` once per evicted leaf (its pages), `AllCleared` by `reset`.
//!
//! The hash is 64-bit `FxHash` (rustc-hash) of (previous hash, page tokens) with a final
//! avalanche mix; it is deterministic across processes and platforms, so every TP rank and a
//! router compute the same values.

use std::hash::Hasher;

use rustc_hash::FxHasher;

/// One event, in the order the cache changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KvEvent {
    /// New pages cached: one hash per page, the hash of the page before them (None at the start
    /// of a namespace), their token ids, and the namespace (the binding's encoding).
    Stored {
        hashes: Vec<u64>,
        parent: Option<u64>,
        tokens: Vec<i32>,
        namespace: Vec<u8>,
    },
    /// Pages evicted.
    Removed { hashes: Vec<u64> },
    /// Everything dropped (`reset`).
    AllCleared,
}

/// The chain seed of a namespace.
pub(crate) fn namespace_seed(ns: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write_usize(ns.len());
    h.write(ns);
    mix(h.finish())
}

/// Hashes of consecutive pages of `tokens` (a whole number of pages), chained from `prev`.
pub(crate) fn page_hashes(mut prev: u64, tokens: &[i32], page: usize) -> Box<[u64]> {
    tokens
        .chunks_exact(page)
        .map(|p| {
            let mut h = FxHasher::default();
            h.write_u64(prev);
            for &t in p {
                h.write_i32(t);
            }
            prev = mix(h.finish());
            prev
        })
        .collect()
}

/// splitmix64's finaliser: `FxHash` alone leaves low bits weakly mixed.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The event side of a tree: the pending events and each node's page hashes (indexed by node
/// id; a namespace root holds its seed).
#[derive(Debug, Default)]
pub(crate) struct EventLog {
    pub(crate) pending: Vec<KvEvent>,
    pub(crate) hashes: Vec<Box<[u64]>>,
}

impl EventLog {
    pub(crate) fn set(&mut self, i: u32, h: Box<[u64]>) {
        let i = i as usize;
        if self.hashes.len() <= i {
            self.hashes.resize_with(i + 1, Default::default);
        }
        self.hashes[i] = h;
    }

    pub(crate) fn get(&self, i: u32) -> &[u64] {
        self.hashes.get(i as usize).map_or(&[], |h| h)
    }

    pub(crate) fn take(&mut self, i: u32) -> Box<[u64]> {
        self.hashes
            .get_mut(i as usize)
            .map(std::mem::take)
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chained_hashes_depend_on_everything_before() {
        let s = namespace_seed(b"");
        let a = page_hashes(s, &[1, 2, 3, 4], 2);
        let b = page_hashes(s, &[1, 2, 3, 5], 2);
        let c = page_hashes(s, &[9, 2, 3, 4], 2);
        assert_eq!(a[0], b[0]);
        assert_ne!(a[1], b[1]);
        assert_ne!(a[1], c[1], "second page hash depends on the first page");
        // Chaining: hashing in two steps equals hashing at once.
        let first = page_hashes(s, &[1, 2], 2);
        assert_eq!(page_hashes(first[0], &[3, 4], 2)[0], a[1]);
        assert_ne!(namespace_seed(b"x"), s);
    }

    /// The values themselves are part of the contract: ranks, routers and later releases
    /// must compute the same hash for the same prefix. (`FxHash` hashes `usize` at its native
    /// width, so the values hold on 64-bit targets.)
    #[test]
    #[cfg(target_pointer_width = "64")]
    fn hashes_are_fixed_values() {
        let s = namespace_seed(b"");
        assert_eq!(s, 0x9ff3_9e28_978a_01cf);
        assert_eq!(namespace_seed(b"tenant"), 0x536a_cc06_c7e1_46af);
        assert_eq!(
            *page_hashes(s, &[1, 2, 3, 4], 2),
            [0xc6cf_5bd8_466d_4dfd, 0x9023_b495_1496_ea5f]
        );
    }
}
