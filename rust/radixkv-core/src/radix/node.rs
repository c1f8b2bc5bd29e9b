//! The arena: nodes in one `Vec`, named by `u32` index plus a generation.
//!
//! A node stores its edge's tokens (key, int32) and their slots (value, int64: ids up to
//! 2**63 - 1 for caller-owned slots). This module knows nothing of the tree built on it.

pub use crate::slot::Slot;

/// "No node": the parent of a namespace root, the end of a sibling chain.
pub(crate) const NIL: u32 = u32::MAX;

pub(crate) const FLAG_ROOT: u8 = 1;
pub(crate) const FLAG_FREE: u8 = 2;

#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) key: Box<[i32]>,
    /// As long as `key`; one slot per token.
    pub(crate) value: Box<[Slot]>,
    pub(crate) parent: u32,
    /// Bumped when the node is retired, so handles to the old occupant go stale.
    pub(crate) gen: u32,
    pub(crate) lock_ref: u32,
    /// Locks taken through a handle naming this very node (`lock_ref` minus the children's).
    pub(crate) direct_locks: u32,
    pub(crate) num_children: u32,
    /// Next child of the same parent whose key starts with the same token (only with
    /// `page_size` > 1, where several first pages can share a first token).
    pub(crate) next_sibling: u32,
    pub(crate) hit_count: u32,
    pub(crate) last_access: u64,
    /// Clock tick at which these tokens were first cached (a split keeps it on both halves).
    pub(crate) created: u64,
    /// Highest `insert(..., priority=)` that went through this node (finite).
    pub(crate) priority: f64,
    pub(crate) flags: u8,
}

impl Node {
    pub(crate) fn new(key: Box<[i32]>, value: Box<[Slot]>, parent: u32, now: u64) -> Node {
        debug_assert_eq!(key.len(), value.len());
        Node {
            key,
            value,
            parent,
            gen: 0,
            lock_ref: 0,
            direct_locks: 0,
            num_children: 0,
            next_sibling: NIL,
            hit_count: 0,
            last_access: now,
            created: now,
            priority: 0.0,
            flags: 0,
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.key.len()
    }

    pub(crate) fn key(&self) -> &[i32] {
        &self.key
    }

    pub(crate) fn value(&self) -> &[Slot] {
        &self.value
    }

    pub(crate) fn is_root(&self) -> bool {
        self.flags & FLAG_ROOT != 0
    }

    pub(crate) fn is_free(&self) -> bool {
        self.flags & FLAG_FREE != 0
    }

    /// A leaf nobody locks: what the eviction index holds.
    pub(crate) fn is_evictable_leaf(&self) -> bool {
        self.flags == 0 && self.num_children == 0 && self.lock_ref == 0
    }
}

/// Names the end of a matched path. `ROOT` names the empty path (of every namespace).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct NodeHandle {
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl NodeHandle {
    pub const ROOT: NodeHandle = NodeHandle { idx: NIL, gen: 0 };

    pub fn is_root(self) -> bool {
        self.idx == NIL
    }

    /// (index, generation): for display and hashing in bindings.
    pub fn raw(self) -> (u32, u32) {
        (self.idx, self.gen)
    }
}

/// The node store: a `Vec` plus a free list of retired indices.
#[derive(Debug, Default)]
pub(crate) struct Arena {
    pub(crate) nodes: Vec<Node>,
    pub(crate) free: Vec<u32>,
    pub(crate) live: usize,
}

impl Arena {
    pub(crate) fn alloc(&mut self, node: Node) -> u32 {
        self.live += 1;
        if let Some(i) = self.free.pop() {
            let gen = self.nodes[i as usize].gen;
            self.nodes[i as usize] = Node { gen, ..node };
            i
        } else {
            let i = self.nodes.len() as u32;
            assert!(i != NIL, "radix arena full (2^32 - 1 nodes)");
            self.nodes.push(node);
            i
        }
    }

    /// Frees an index; its generation moves on so old handles are refused.
    pub(crate) fn retire(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        n.key = Box::new([]);
        n.value = Box::new([]);
        n.gen = n.gen.wrapping_add(1);
        n.flags = FLAG_FREE;
        n.parent = NIL;
        n.next_sibling = NIL;
        n.num_children = 0;
        n.lock_ref = 0;
        n.direct_locks = 0;
        self.free.push(i);
        self.live -= 1;
    }

    #[inline]
    pub(crate) fn get(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    #[inline]
    pub(crate) fn get_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }
}
