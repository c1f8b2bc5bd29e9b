//! `BlockAllocator`: vLLM's `PagedAttention` memory model (SPEC §1).
//!
//! A pool of `num_blocks` physical blocks of `block_size` token slots; block `p` holds slots
//! `p * block_size .. (p + 1) * block_size`. Each sequence owns a block table (logical block i ->
//! physical block) and a length; `blocks.len() == ceil(len / block_size)` always holds, so only
//! the last block of a sequence can have room.
//!
//! Blocks carry a reference count: `fork` shares the parent's blocks (zero copy, counts + 1), and a
//! write into a shared last block first moves the writer onto a fresh block (copy-on-write), the
//! returned `(src, dst)` pair being the copy the GPU must do before attention. A block is on the
//! free list exactly when its count is 0.
//!
//! Every method validates all of its input and plans the whole change before touching anything,
//! so an error leaves the allocator as it was.

#[cfg(any(test, feature = "arbitrary"))]
pub mod testing;

#[cfg(test)]
mod proptests;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};

use crate::metadata::{self, MetadataBuf};
use crate::{CoreError, Result};

/// Sequence ids are opaque non-negative integers chosen by the caller.
pub type SeqId = u64;

/// Sequence ids are caller-chosen integers, not adversarial input: `FxHash` (one multiply)
/// hashes them several times faster than the default `SipHash` on this hot path.
type FastHash = rustc_hash::FxBuildHasher;
type SeqMap<V> = HashMap<SeqId, V, FastHash>;

/// What `append_slots_batch` returns: the copy-on-write pairs and the new tokens' slots.
pub type BatchAppend = (Vec<(i32, i32)>, Vec<i32>);

#[derive(Debug, Clone, PartialEq, Eq, Default)]
struct Seq {
    /// Physical block ids, stored as int32 so tables copy straight into kernel arrays.
    blocks: Vec<i32>,
    len: usize,
}

/// What `append_slots` will do, computed before anything changes.
struct AppendPlan {
    cow: bool,
    /// Blocks taken from the free list, the copy-on-write one included.
    fresh: usize,
    new_len: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockAllocator {
    block_size: usize,
    ref_counts: Vec<u32>,
    /// Stack of free blocks; `pop` gives the next one. Starts as `[n-1, ..., 1, 0]`.
    free: Vec<i32>,
    seqs: SeqMap<Seq>,
}

fn unknown(seq: SeqId) -> CoreError {
    CoreError::UnknownSequence(format!("unknown sequence id {seq}"))
}

fn exists(seq: SeqId) -> CoreError {
    CoreError::UnknownSequence(format!("sequence id {seq} already exists"))
}

impl BlockAllocator {
    /// `num_blocks * block_size` must fit int32 (slots are int32 in kernel arrays).
    pub fn new(num_blocks: usize, block_size: usize) -> Result<Self> {
        if block_size == 0 {
            return Err(CoreError::invalid("block_size must be >= 1"));
        }
        if !matches!(num_blocks.checked_mul(block_size), Some(s) if s <= 1usize << 31) {
            return Err(CoreError::invalid(format!(
                "num_blocks * block_size = {num_blocks} * {block_size} slots exceed the int32 range"
            )));
        }
        let mut ref_counts = metadata::try_vec(num_blocks)?;
        ref_counts.resize(num_blocks, 0);
        let mut free = metadata::try_vec(num_blocks)?;
        // Block ids fit int32: num_blocks <= 2^31 (block_size >= 1).
        free.extend((0..num_blocks).rev().map(|b| b as i32));
        Ok(BlockAllocator {
            block_size,
            ref_counts,
            free,
            seqs: SeqMap::default(),
        })
    }

    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    pub fn block_size(&self) -> usize {
        self.block_size
    }

    pub fn num_free_blocks(&self) -> usize {
        self.free.len()
    }

    pub fn num_seqs(&self) -> usize {
        self.seqs.len()
    }

    pub fn contains(&self, seq: SeqId) -> bool {
        self.seqs.contains_key(&seq)
    }

    /// All live sequence ids, ascending.
    pub fn seq_ids(&self) -> Vec<SeqId> {
        let mut v: Vec<SeqId> = self.seqs.keys().copied().collect();
        v.sort_unstable();
        v
    }

    fn seq(&self, seq: SeqId) -> Result<&Seq> {
        self.seqs.get(&seq).ok_or_else(|| unknown(seq))
    }

    pub fn seq_len(&self, seq: SeqId) -> Result<usize> {
        Ok(self.seq(seq)?.len)
    }

    /// The physical blocks of `seq`, in logical order.
    pub fn block_table(&self, seq: SeqId) -> Result<&[i32]> {
        Ok(&self.seq(seq)?.blocks)
    }

    pub fn ref_count(&self, block: usize) -> Result<u32> {
        self.ref_counts.get(block).copied().ok_or_else(|| {
            CoreError::invalid(format!(
                "block {block} out of range 0..{}",
                self.num_blocks()
            ))
        })
    }

    /// Blocks a new sequence of `num_tokens` tokens needs.
    pub fn blocks_needed(&self, num_tokens: usize) -> usize {
        num_tokens.div_ceil(self.block_size)
    }

    pub fn can_allocate(&self, num_tokens: usize) -> bool {
        self.blocks_needed(num_tokens) <= self.free.len()
    }

    /// Whether `append_slots(seq, num_tokens)` would succeed (counting a copy-on-write block).
    pub fn can_append(&self, seq: SeqId, num_tokens: usize) -> Result<bool> {
        let plan = self.plan_append(self.seq(seq)?, num_tokens)?;
        Ok(plan.fresh <= self.free.len())
    }

    fn plan_append(&self, s: &Seq, num_tokens: usize) -> Result<AppendPlan> {
        let new_len = s.len.checked_add(num_tokens).ok_or_else(|| {
            CoreError::invalid(format!(
                "sequence length {} + {num_tokens} overflows",
                s.len
            ))
        })?;
        // A partly filled last block gets written; if shared, the writer moves to a copy first.
        #[allow(clippy::manual_is_multiple_of)] // is_multiple_of is newer than rust-version 1.80
        let cow = num_tokens > 0
            && s.len % self.block_size > 0
            && s.blocks
                .last()
                .is_some_and(|&b| self.ref_counts[b as usize] > 1);
        let fresh = new_len.div_ceil(self.block_size) - s.blocks.len() + usize::from(cow);
        Ok(AppendPlan {
            cow,
            fresh,
            new_len,
        })
    }

    fn take_free(&mut self, k: usize) -> Result<Vec<i32>> {
        if k > self.free.len() {
            return Err(CoreError::OutOfBlocks {
                requested: k,
                free: self.free.len(),
            });
        }
        let taken: Vec<i32> = self.free.drain(self.free.len() - k..).rev().collect();
        for &b in &taken {
            self.ref_counts[b as usize] = 1;
        }
        Ok(taken)
    }

    /// Maps `ceil(num_tokens / block_size)` fresh blocks to a new sequence `seq`.
    pub fn allocate(&mut self, seq: SeqId, num_tokens: usize) -> Result<()> {
        if self.seqs.contains_key(&seq) {
            return Err(exists(seq));
        }
        let blocks = self.take_free(self.blocks_needed(num_tokens))?;
        self.seqs.insert(
            seq,
            Seq {
                blocks,
                len: num_tokens,
            },
        );
        Ok(())
    }

    /// Shares `parent`'s blocks with a new sequence `child` (zero copy; ref counts + 1).
    pub fn fork(&mut self, parent: SeqId, child: SeqId) -> Result<()> {
        let p = self.seq(parent)?;
        if self.seqs.contains_key(&child) {
            return Err(exists(child));
        }
        if p.blocks
            .iter()
            .any(|&b| self.ref_counts[b as usize] == u32::MAX)
        {
            return Err(CoreError::invalid(
                "a block of the parent is shared u32::MAX times",
            ));
        }
        let copy = p.clone();
        for &b in &copy.blocks {
            self.ref_counts[b as usize] += 1;
        }
        self.seqs.insert(child, copy);
        Ok(())
    }

    /// Drops `seq`; each of its blocks loses one reference and is free again at 0.
    pub fn free(&mut self, seq: SeqId) -> Result<()> {
        let s = self.seqs.remove(&seq).ok_or_else(|| unknown(seq))?;
        // Pushed last-first, so the sequence's first block is reused first.
        for &b in s.blocks.iter().rev() {
            let rc = &mut self.ref_counts[b as usize];
            *rc -= 1;
            if *rc == 0 {
                self.free.push(b);
            }
        }
        Ok(())
    }

    /// Adds `num_tokens` tokens to `seq`, allocating blocks as the last one fills.
    ///
    /// Returns the copy-on-write pairs `(src_block, dst_block)` the GPU must copy before attention:
    /// at most one, when the tokens land in a partly filled last block another sequence shares.
    /// Fails with `OutOfBlocks` (changing nothing) if the copy plus the new blocks do not fit.
    pub fn append_slots(&mut self, seq: SeqId, num_tokens: usize) -> Result<Vec<(i32, i32)>> {
        let plan = self.plan_append(self.seq(seq)?, num_tokens)?;
        if plan.fresh > self.free.len() {
            return Err(CoreError::OutOfBlocks {
                requested: plan.fresh,
                free: self.free.len(),
            });
        }
        Ok(self.apply_append(seq, &plan, None)?.into_iter().collect())
    }

    /// Carries out `plan` (from `plan_append`, with its blocks known to be free) for `seq`;
    /// returns the copy-on-write pair, and pushes the new tokens' slots to `slots` if given.
    fn apply_append(
        &mut self,
        seq: SeqId,
        plan: &AppendPlan,
        slots: Option<&mut Vec<i32>>,
    ) -> Result<Option<(i32, i32)>> {
        let BlockAllocator {
            block_size,
            ref_counts,
            free,
            seqs,
        } = self;
        let s = seqs.get_mut(&seq).ok_or_else(|| unknown(seq))?;
        let short = || CoreError::InvariantViolation("planned blocks are not free".into());
        let mut copy = None;
        if plan.cow {
            let new = free.pop().ok_or_else(short)?;
            let last = s.blocks.last_mut().ok_or_else(short)?;
            ref_counts[new as usize] = 1;
            ref_counts[*last as usize] -= 1;
            copy = Some((*last, new));
            *last = new;
        }
        for _ in usize::from(plan.cow)..plan.fresh {
            let b = free.pop().ok_or_else(short)?;
            ref_counts[b as usize] = 1;
            s.blocks.push(b);
        }
        if let Some(out) = slots {
            let bs = *block_size;
            out.extend(
                (s.len..plan.new_len).map(|p| s.blocks[p / bs] * bs as i32 + (p % bs) as i32),
            );
        }
        s.len = plan.new_len;
        Ok(copy)
    }

    /// Appends `num_tokens` tokens to each of `seqs`, in order, all or nothing: the result is that
    /// of calling [`append_slots`](Self::append_slots) for each in turn, or, if the batch does not
    /// fit, `OutOfBlocks` with nothing changed. One call per decode step instead of one per
    /// sequence.
    ///
    /// Returns every copy-on-write pair (in sequence order) and the slots of the new tokens
    /// (`num_tokens` per sequence, concatenated: where this step's K/V goes). A sequence listed
    /// twice is an `InvalidArgument`.
    pub fn append_slots_batch(&mut self, seqs: &[SeqId], num_tokens: usize) -> Result<BatchAppend> {
        // Plan first. Appends interact only through copy-on-write: an earlier sequence's copy
        // drops the shared block's count, so a later one may then write it in place.
        let mut dropped: HashMap<i32, u32, FastHash> = HashMap::default();
        let mut seen: HashSet<SeqId, FastHash> = HashSet::default();
        seen.reserve(seqs.len());
        let mut plans = Vec::with_capacity(seqs.len());
        let mut fresh = 0usize;
        for &id in seqs {
            let s = self.seq(id)?;
            if !seen.insert(id) {
                return Err(CoreError::invalid(format!(
                    "sequence id {id} is listed twice in append_slots_batch"
                )));
            }
            let mut plan = self.plan_append(s, num_tokens)?;
            if let (true, Some(&last)) = (plan.cow, s.blocks.last()) {
                let d = dropped.entry(last).or_default();
                if self.ref_counts[last as usize] - *d > 1 {
                    *d += 1;
                } else {
                    // Earlier copies left this sequence the block's only holder: write in place.
                    plan.cow = false;
                    plan.fresh -= 1;
                }
            }
            fresh += plan.fresh;
            plans.push(plan);
        }
        if fresh > self.free.len() {
            return Err(CoreError::OutOfBlocks {
                requested: fresh,
                free: self.free.len(),
            });
        }
        let mut copies = Vec::new();
        let mut slots = Vec::with_capacity(seqs.len().saturating_mul(num_tokens));
        for (&id, plan) in seqs.iter().zip(&plans) {
            copies.extend(self.apply_append(id, plan, Some(&mut slots))?);
        }
        Ok((copies, slots))
    }

    /// Physical slot of each token position `start..end` of `seq`.
    pub fn slot_mapping(&self, seq: SeqId, start: usize, end: usize) -> Result<Vec<i32>> {
        let s = self.seq(seq)?;
        if start > end || end > s.len {
            return Err(CoreError::invalid(format!(
                "slot_mapping range {start}..{end} is not within 0..{} (sequence {seq})",
                s.len
            )));
        }
        let bs = self.block_size;
        // Slots fit int32: num_blocks * block_size <= 2^31 was checked in new().
        Ok((start..end)
            .map(|p| s.blocks[p / bs] * bs as i32 + (p % bs) as i32)
            .collect())
    }

    fn tables(&self, seqs: &[SeqId]) -> Result<Vec<&Seq>> {
        seqs.iter().map(|&q| self.seq(q)).collect()
    }

    /// Row-major `[seqs.len(), width]` block tables padded with 0, and `width` (the longest
    /// table unless `width` is given).
    pub fn block_tables(&self, seqs: &[SeqId], width: Option<usize>) -> Result<(Vec<i32>, usize)> {
        let rows: Vec<&[i32]> = self
            .tables(seqs)?
            .into_iter()
            .map(|s| &s.blocks[..])
            .collect();
        let width = metadata::table_width(&rows, width)?;
        let cells = rows
            .len()
            .checked_mul(width)
            .filter(|&c| i32::try_from(c).is_ok())
            .ok_or_else(|| CoreError::invalid("block table size exceeds int32 range"))?;
        let mut out = metadata::try_vec(cells)?;
        metadata::fill_block_table(&rows, width, &mut out);
        Ok((out, width))
    }

    fn pages_and_lens(&self, seqs: &[SeqId]) -> Result<(Vec<&[i32]>, Vec<i32>)> {
        let ss = self.tables(seqs)?;
        let lens = ss.iter().map(|s| s.len as i32).collect();
        Ok((ss.into_iter().map(|s| &s.blocks[..]).collect(), lens))
    }

    /// CSR decode metadata over these sequences' blocks (see [`metadata::decode_metadata`]).
    pub fn decode_metadata(&self, seqs: &[SeqId]) -> Result<MetadataBuf> {
        let (pages, lens) = self.pages_and_lens(seqs)?;
        metadata::decode_metadata(&pages, Some(&lens), self.block_size)
    }

    /// Extend metadata over these sequences' blocks, the last `extend_lens[i]` tokens of each being
    /// the new ones (see [`metadata::paged_extend_metadata`]): call it after `allocate` /
    /// `append_slots` made room for them.
    pub fn extend_metadata(&self, seqs: &[SeqId], extend_lens: &[i32]) -> Result<MetadataBuf> {
        let (pages, lens) = self.pages_and_lens(seqs)?;
        metadata::paged_extend_metadata(&pages, &lens, extend_lens, self.block_size)
    }

    /// Block-table decode metadata (see [`metadata::block_table_metadata`]).
    pub fn block_table_metadata(
        &self,
        seqs: &[SeqId],
        width: Option<usize>,
    ) -> Result<MetadataBuf> {
        let (pages, lens) = self.pages_and_lens(seqs)?;
        metadata::block_table_metadata(&pages, Some(&lens), self.block_size, width)
    }

    /// Verifies every invariant; `InvariantViolation` names the first one broken.
    ///
    /// - each table has `ceil(len / block_size)` blocks, all in range;
    /// - each block's `ref_count` equals the number of table entries naming it;
    /// - the free list holds exactly the blocks with `ref_count` 0, each once.
    pub fn check(&self) -> Result<()> {
        let broken = |m: String| Err(CoreError::InvariantViolation(m));
        let n = self.num_blocks();
        let mut refs = vec![0u64; n];
        for (&id, s) in &self.seqs {
            if s.blocks.len() != s.len.div_ceil(self.block_size) {
                return broken(format!(
                    "sequence {id}: {} blocks for {} tokens of block_size {}",
                    s.blocks.len(),
                    s.len,
                    self.block_size
                ));
            }
            for &b in &s.blocks {
                match usize::try_from(b).ok().filter(|&b| b < n) {
                    Some(b) => refs[b] += 1,
                    None => return broken(format!("sequence {id} names block {b} out of range")),
                }
            }
        }
        let mut on_free = vec![false; n];
        for &b in &self.free {
            match usize::try_from(b).ok().filter(|&b| b < n) {
                Some(b) if on_free[b] => {
                    return broken(format!("block {b} twice on the free list"))
                }
                Some(b) => on_free[b] = true,
                None => return broken(format!("free list holds block {b} out of range")),
            }
        }
        for b in 0..n {
            if u64::from(self.ref_counts[b]) != refs[b] {
                return broken(format!(
                    "block {b}: ref_count {} but {} table references",
                    self.ref_counts[b], refs[b]
                ));
            }
            if on_free[b] != (refs[b] == 0) {
                return broken(format!(
                    "block {b}: ref_count {} but {} the free list",
                    refs[b],
                    if on_free[b] { "on" } else { "not on" }
                ));
            }
        }
        Ok(())
    }
}
