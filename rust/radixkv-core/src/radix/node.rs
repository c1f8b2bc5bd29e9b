//! The arena: nodes in one `Vec`, named by `u32` index plus a generation.
//!
//! A node stores its edge's tokens (key) and their slots (value) in one boxed slice, key first:
//! one allocation and 16 bytes of header per node instead of two `Vec`s (48 bytes).

use super::tree::RadixTree;

/// "No node": the parent of a namespace root, the end of a sibling chain.
pub(crate) const NIL: u32 = u32::MAX;

pub(crate) const FLAG_ROOT: u8 = 1;
pub(crate) const FLAG_FREE: u8 = 2;

#[derive(Debug)]
pub(crate) struct Node {
    /// key (n tokens) followed by value (n slots).
    pub(crate) data: Box<[i32]>,
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
    pub(crate) flags: u8,
}

impl Node {
    pub(crate) fn len(&self) -> usize {
        self.data.len() / 2
    }

    pub(crate) fn key(&self) -> &[i32] {
        &self.data[..self.len()]
    }

    pub(crate) fn value(&self) -> &[i32] {
        &self.data[self.len()..]
    }

    pub(crate) fn is_root(&self) -> bool {
        self.flags & FLAG_ROOT != 0
    }

    pub(crate) fn is_free(&self) -> bool {
        self.flags & FLAG_FREE != 0
    }

    /// A leaf nobody locks: what the LRU index holds.
    pub(crate) fn is_evictable_leaf(&self) -> bool {
        self.flags == 0 && self.num_children == 0 && self.lock_ref == 0
    }
}

/// Joins a key and a value into a node's storage.
pub(crate) fn pack(key: &[i32], value: &[i32]) -> Box<[i32]> {
    debug_assert_eq!(key.len(), value.len());
    let mut v = Vec::with_capacity(key.len() * 2);
    v.extend_from_slice(key);
    v.extend_from_slice(value);
    v.into_boxed_slice()
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

impl RadixTree {
    pub(crate) fn alloc_node(&mut self, node: Node) -> u32 {
        self.live_nodes += 1;
        if let Some(i) = self.free_nodes.pop() {
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

    /// Frees an arena slot; its generation moves on so old handles are refused.
    pub(crate) fn retire_node(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        n.data = Box::new([]);
        n.gen = n.gen.wrapping_add(1);
        n.flags = FLAG_FREE;
        n.parent = NIL;
        n.next_sibling = NIL;
        n.num_children = 0;
        n.lock_ref = 0;
        n.direct_locks = 0;
        self.free_nodes.push(i);
        self.live_nodes -= 1;
    }

    pub(crate) fn new_node(data: Box<[i32]>, parent: u32, last_access: u64) -> Node {
        Node {
            data,
            parent,
            gen: 0,
            lock_ref: 0,
            direct_locks: 0,
            num_children: 0,
            next_sibling: NIL,
            hit_count: 0,
            last_access,
            flags: 0,
        }
    }

    pub(crate) fn node(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    pub(crate) fn node_mut(&mut self, i: u32) -> &mut Node {
        &mut self.nodes[i as usize]
    }
}
