//! A replayable operation enum over [`BlockAllocator`], a naive model of it, and the differential
//! step that the proptest state machine (`cargo test`) and the fuzz target (`fuzz/`) both run.
//!
//! The model simulates appends token by token with abstract block ids that are never reused, so it
//! shares no logic with the allocator's bulk planning. After every operation the allocator must be
//! *isomorphic* to the model: one consistent, injective map from model blocks to physical blocks
//! under which every block table, length, ref count and copy-on-write pair agrees; `check()` must
//! pass; and a failed operation must leave the allocator bit-for-bit unchanged.

use std::collections::{BTreeMap, HashMap};

use super::{BlockAllocator, SeqId};
use crate::{CoreError, Result};

/// Number of distinct sequence ids the ops address, so that they collide often.
pub const SEQ_SPACE: u8 = 6;

/// The sequence id an op's `u8` names. Spread far apart so ids above 2^32 get exercised.
pub fn seq_id(x: u8) -> SeqId {
    u64::from(x % SEQ_SPACE) << 40
}

/// One allocator call; sizes are small so that blocks run out and sequences share.
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub enum BlocksOp {
    Allocate {
        seq: u8,
        tokens: u8,
    },
    Append {
        seq: u8,
        tokens: u8,
    },
    /// `append_slots_batch` over several sequences.
    AppendBatch {
        seqs: Vec<u8>,
        tokens: u8,
    },
    Fork {
        parent: u8,
        child: u8,
    },
    Free {
        seq: u8,
    },
    SlotMapping {
        seq: u8,
        start: u8,
        end: u8,
    },
    BlockTables {
        seqs: Vec<u8>,
        width: Option<u8>,
    },
    DecodeMetadata {
        seqs: Vec<u8>,
    },
    /// Extend metadata with the last `extend` tokens of every listed sequence new.
    ExtendMetadata {
        seqs: Vec<u8>,
        extend: u8,
    },
}

/// A whole fuzz / property case: allocator shape plus the ops to replay.
#[derive(Debug, Clone)]
#[cfg_attr(feature = "arbitrary", derive(arbitrary::Arbitrary))]
pub struct BlocksCase {
    pub num_blocks: u8,
    pub block_size: u8,
    pub ops: Vec<BlocksOp>,
}

impl BlocksCase {
    /// `(num_blocks, block_size)` clamped to 1..=64 and 1..=8.
    pub fn shape(&self) -> (usize, usize) {
        (
            1 + usize::from(self.num_blocks % 64),
            1 + usize::from(self.block_size % 8),
        )
    }
}

/// What the allocator returned for one op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpOutput {
    Unit,
    Copies(Vec<(i32, i32)>),
    Ints(Vec<i32>),
    /// `(kv_indptr, kv_indices, seq_lens, kv_last_page_len)` of decode metadata.
    Csr([Vec<i32>; 4]),
    /// Copy pairs and new-token slots of `append_slots_batch`.
    Batch(Vec<(i32, i32)>, Vec<i32>),
    /// `(qo_indptr, kv_indices, out_cache_loc, positions)` of extend metadata.
    Extend([Vec<i32>; 4]),
}

/// Runs `op` on the allocator.
pub fn apply_op(a: &mut BlockAllocator, op: &BlocksOp) -> Result<OpOutput> {
    let ids = |v: &[u8]| v.iter().map(|&x| seq_id(x)).collect::<Vec<_>>();
    Ok(match *op {
        BlocksOp::Allocate { seq, tokens } => {
            a.allocate(seq_id(seq), usize::from(tokens))?;
            OpOutput::Unit
        }
        BlocksOp::Append { seq, tokens } => {
            OpOutput::Copies(a.append_slots(seq_id(seq), usize::from(tokens))?)
        }
        BlocksOp::AppendBatch { ref seqs, tokens } => {
            let (c, s) = a.append_slots_batch(&ids(seqs), usize::from(tokens))?;
            OpOutput::Batch(c, s)
        }
        BlocksOp::Fork { parent, child } => {
            a.fork(seq_id(parent), seq_id(child))?;
            OpOutput::Unit
        }
        BlocksOp::Free { seq } => {
            a.free(seq_id(seq))?;
            OpOutput::Unit
        }
        BlocksOp::SlotMapping { seq, start, end } => {
            OpOutput::Ints(a.slot_mapping(seq_id(seq), start.into(), end.into())?)
        }
        BlocksOp::BlockTables { ref seqs, width } => {
            OpOutput::Ints(a.block_tables(&ids(seqs), width.map(usize::from))?.0)
        }
        BlocksOp::DecodeMetadata { ref seqs } => {
            let m = a.decode_metadata(&ids(seqs))?;
            let f = |n: &str| m.field(n).expect("decode field").to_vec();
            OpOutput::Csr([
                f("kv_indptr"),
                f("kv_indices"),
                f("seq_lens"),
                f("kv_last_page_len"),
            ])
        }
        BlocksOp::ExtendMetadata { ref seqs, extend } => {
            let m = a.extend_metadata(&ids(seqs), &vec![i32::from(extend); seqs.len()])?;
            let f = |n: &str| m.field(n).expect("extend field").to_vec();
            OpOutput::Extend([
                f("qo_indptr"),
                f("kv_indices"),
                f("out_cache_loc"),
                f("positions"),
            ])
        }
    })
}

/// The error classes the model predicts (messages are not compared).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrKind {
    Unknown,
    OutOfBlocks,
    Invalid,
}

fn kind(e: &CoreError) -> Option<ErrKind> {
    match e {
        CoreError::UnknownSequence(_) => Some(ErrKind::Unknown),
        CoreError::OutOfBlocks { .. } => Some(ErrKind::OutOfBlocks),
        CoreError::InvalidArgument(_) => Some(ErrKind::Invalid),
        _ => None,
    }
}

/// Expected result of an op, in model block ids (`M`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expected {
    Unit,
    Copies(Vec<(u64, u64)>),
    /// Slot mapping: (model block, offset) per position.
    Slots(Vec<(u64, usize)>),
    /// Block tables: rows of model blocks, padded to `width`.
    Tables(Vec<Vec<u64>>, usize),
    /// Decode: (model blocks, len) per sequence.
    Decode(Vec<(Vec<u64>, usize)>),
    /// Batched append: copies, then (model block, offset) of each new token.
    Batch(Vec<(u64, u64)>, Vec<(u64, usize)>),
    /// Extend: (model blocks, len) per sequence, and the new-token count of each.
    Extend(Vec<(Vec<u64>, usize)>, usize),
    Err(ErrKind),
}

/// The naive model: abstract never-reused block ids and explicit per-block reference counts.
#[derive(Debug, Clone, Default)]
pub struct NaiveBlocks {
    pub num_blocks: usize,
    pub block_size: usize,
    next_id: u64,
    /// Live model blocks only (count > 0).
    refs: BTreeMap<u64, usize>,
    /// Sequence -> (blocks, len).
    pub seqs: BTreeMap<SeqId, (Vec<u64>, usize)>,
}

impl NaiveBlocks {
    pub fn new(num_blocks: usize, block_size: usize) -> Self {
        NaiveBlocks {
            num_blocks,
            block_size,
            ..Default::default()
        }
    }

    fn fresh(&mut self) -> u64 {
        self.next_id += 1;
        self.refs.insert(self.next_id, 1);
        self.next_id
    }

    fn unref(&mut self, b: u64) {
        let r = self.refs.get_mut(&b).expect("live block");
        *r -= 1;
        if *r == 0 {
            self.refs.remove(&b);
        }
    }

    fn over_budget(&self) -> bool {
        self.refs.len() > self.num_blocks
    }

    /// Applies `op` (on `self` only when it succeeds) and returns what it should yield.
    pub fn apply(&mut self, op: &BlocksOp) -> Expected {
        let mut next = self.clone();
        let r = next.apply_unchecked(op);
        if next.over_budget() {
            return Expected::Err(ErrKind::OutOfBlocks);
        }
        if !matches!(r, Expected::Err(_)) {
            *self = next;
        }
        r
    }

    #[allow(clippy::too_many_lines)] // one arm per op, side by side with `apply_op`
    fn apply_unchecked(&mut self, op: &BlocksOp) -> Expected {
        let bs = self.block_size;
        match *op {
            BlocksOp::Allocate { seq, tokens } => {
                let id = seq_id(seq);
                if self.seqs.contains_key(&id) {
                    return Expected::Err(ErrKind::Unknown);
                }
                let blocks = (0..usize::from(tokens).div_ceil(bs))
                    .map(|_| self.fresh())
                    .collect();
                self.seqs.insert(id, (blocks, tokens.into()));
                Expected::Unit
            }
            BlocksOp::Append { seq, tokens } => {
                let Some((mut blocks, mut len)) = self.seqs.get(&seq_id(seq)).cloned() else {
                    return Expected::Err(ErrKind::Unknown);
                };
                let mut copies = Vec::new();
                for _ in 0..tokens {
                    if len % bs == 0 {
                        blocks.push(self.fresh());
                    } else {
                        let last = *blocks.last().expect("partly filled block");
                        if self.refs[&last] > 1 {
                            let new = self.fresh();
                            self.unref(last);
                            copies.push((last, new));
                            *blocks.last_mut().expect("nonempty") = new;
                        }
                    }
                    len += 1;
                }
                self.seqs.insert(seq_id(seq), (blocks, len));
                Expected::Copies(copies)
            }
            BlocksOp::AppendBatch { ref seqs, tokens } => {
                // Sequential appends; `apply` rejects the whole batch if it overflows the pool.
                let mut copies = Vec::new();
                let mut slots = Vec::new();
                for (i, &x) in seqs.iter().enumerate() {
                    if !self.seqs.contains_key(&seq_id(x)) {
                        return Expected::Err(ErrKind::Unknown);
                    }
                    if seqs[..i].iter().any(|&y| seq_id(y) == seq_id(x)) {
                        return Expected::Err(ErrKind::Invalid);
                    }
                }
                for &x in seqs {
                    let start = self.seqs[&seq_id(x)].1;
                    let Expected::Copies(c) =
                        self.apply_unchecked(&BlocksOp::Append { seq: x, tokens })
                    else {
                        unreachable!("the sequence exists")
                    };
                    copies.extend(c);
                    let blocks = &self.seqs[&seq_id(x)].0;
                    let n = usize::from(tokens);
                    slots.extend((start..start + n).map(|p| (blocks[p / bs], p % bs)));
                }
                Expected::Batch(copies, slots)
            }
            BlocksOp::Fork { parent, child } => {
                let Some(p) = self.seqs.get(&seq_id(parent)).cloned() else {
                    return Expected::Err(ErrKind::Unknown);
                };
                if self.seqs.contains_key(&seq_id(child)) {
                    return Expected::Err(ErrKind::Unknown);
                }
                for b in &p.0 {
                    *self.refs.get_mut(b).expect("live") += 1;
                }
                self.seqs.insert(seq_id(child), p);
                Expected::Unit
            }
            BlocksOp::Free { seq } => {
                let Some((blocks, _)) = self.seqs.remove(&seq_id(seq)) else {
                    return Expected::Err(ErrKind::Unknown);
                };
                for b in blocks {
                    self.unref(b);
                }
                Expected::Unit
            }
            BlocksOp::SlotMapping { seq, start, end } => {
                let Some((blocks, len)) = self.seqs.get(&seq_id(seq)) else {
                    return Expected::Err(ErrKind::Unknown);
                };
                let (start, end) = (usize::from(start), usize::from(end));
                if start > end || end > *len {
                    return Expected::Err(ErrKind::Invalid);
                }
                Expected::Slots((start..end).map(|p| (blocks[p / bs], p % bs)).collect())
            }
            BlocksOp::BlockTables { ref seqs, width } => {
                let Some(rows) = self.rows(seqs) else {
                    return Expected::Err(ErrKind::Unknown);
                };
                let longest = rows.iter().map(|(b, _)| b.len()).max().unwrap_or(0);
                let w = width.map_or(longest, usize::from);
                if w < longest {
                    return Expected::Err(ErrKind::Invalid);
                }
                Expected::Tables(rows.into_iter().map(|(b, _)| b).collect(), w)
            }
            BlocksOp::DecodeMetadata { ref seqs } => {
                let Some(rows) = self.rows(seqs) else {
                    return Expected::Err(ErrKind::Unknown);
                };
                if rows.iter().any(|&(_, len)| len == 0) {
                    return Expected::Err(ErrKind::Invalid);
                }
                Expected::Decode(rows)
            }
            BlocksOp::ExtendMetadata { ref seqs, extend } => {
                let Some(rows) = self.rows(seqs) else {
                    return Expected::Err(ErrKind::Unknown);
                };
                let e = usize::from(extend);
                if rows.iter().any(|&(_, len)| len == 0 || e > len) {
                    return Expected::Err(ErrKind::Invalid);
                }
                Expected::Extend(rows, e)
            }
        }
    }

    fn rows(&self, seqs: &[u8]) -> Option<Vec<(Vec<u64>, usize)>> {
        seqs.iter()
            .map(|&s| self.seqs.get(&seq_id(s)).cloned())
            .collect()
    }
}

/// Checks that `a` is isomorphic to `m`; returns the model -> physical block map.
pub fn isomorphism(
    a: &BlockAllocator,
    m: &NaiveBlocks,
) -> std::result::Result<HashMap<u64, i32>, String> {
    a.check().map_err(|e| e.to_string())?;
    if a.seq_ids() != m.seqs.keys().copied().collect::<Vec<_>>() {
        return Err(format!(
            "sequences {:?} but model has {:?}",
            a.seq_ids(),
            m.seqs.keys()
        ));
    }
    let mut map: HashMap<u64, i32> = HashMap::new();
    let mut back: HashMap<i32, u64> = HashMap::new();
    for (&id, (blocks, len)) in &m.seqs {
        let phys = a.block_table(id).map_err(|e| e.to_string())?;
        if a.seq_len(id).ok() != Some(*len) || phys.len() != blocks.len() {
            return Err(format!(
                "sequence {id}: len/table differ from model ({len}, {blocks:?})"
            ));
        }
        for (&mb, &pb) in blocks.iter().zip(phys) {
            if *map.entry(mb).or_insert(pb) != pb || *back.entry(pb).or_insert(mb) != mb {
                return Err(format!(
                    "sequence {id}: block sharing differs from the model"
                ));
            }
        }
    }
    for (mb, &rc) in &m.refs {
        let pb = map[mb];
        if a.ref_count(pb as usize).ok() != Some(rc as u32) {
            return Err(format!("block {pb}: ref_count differs from model ({rc})"));
        }
    }
    if a.num_free_blocks() != m.num_blocks - m.refs.len() {
        return Err(format!(
            "{} free blocks, model expects {}",
            a.num_free_blocks(),
            m.num_blocks - m.refs.len()
        ));
    }
    Ok(map)
}

/// One differential step: runs `op` on both, compares results and state.
pub fn step(
    a: &mut BlockAllocator,
    m: &mut NaiveBlocks,
    op: &BlocksOp,
) -> std::result::Result<(), String> {
    let before = a.clone();
    let got = apply_op(a, op);
    let want = m.apply(op);
    let map = isomorphism(a, m).map_err(|e| format!("after {op:?}: {e}"))?;
    let bs = m.block_size as i32;
    let phys = |b: &u64| map[b];
    let ok = match (&got, &want) {
        (Err(e), Expected::Err(k)) => {
            if *a != before {
                return Err(format!("{op:?} failed ({e}) but changed the allocator"));
            }
            kind(e) == Some(*k)
        }
        (Ok(OpOutput::Unit), Expected::Unit) => true,
        (Ok(OpOutput::Copies(c)), Expected::Copies(w)) => {
            // The source may be gone from the map only if nothing references it any more,
            // which a copy-on-write source (shared before the write) never is.
            *c == w
                .iter()
                .map(|(s, d)| (phys(s), phys(d)))
                .collect::<Vec<_>>()
        }
        (Ok(OpOutput::Ints(v)), Expected::Slots(w)) => {
            *v == w
                .iter()
                .map(|(b, o)| phys(b) * bs + *o as i32)
                .collect::<Vec<_>>()
        }
        (Ok(OpOutput::Ints(v)), Expected::Tables(rows, w)) => {
            let mut exp = Vec::new();
            for r in rows {
                exp.extend(r.iter().map(phys));
                exp.resize(exp.len() + (w - r.len()), 0);
            }
            *v == exp
        }
        (Ok(OpOutput::Csr([indptr, indices, lens, last])), Expected::Decode(rows)) => {
            let mut e_ptr = vec![0];
            let mut e_idx = Vec::new();
            for (r, _) in rows {
                e_idx.extend(r.iter().map(phys));
                e_ptr.push(e_idx.len() as i32);
            }
            let e_lens: Vec<i32> = rows.iter().map(|&(_, l)| l as i32).collect();
            let e_last: Vec<i32> = e_lens.iter().map(|&l| (l - 1) % bs + 1).collect();
            (indptr, indices, lens, last) == (&e_ptr, &e_idx, &e_lens, &e_last)
        }
        (Ok(OpOutput::Batch(c, sl)), Expected::Batch(wc, ws)) => {
            *c == wc
                .iter()
                .map(|(s, d)| (phys(s), phys(d)))
                .collect::<Vec<_>>()
                && *sl
                    == ws
                        .iter()
                        .map(|(b, o)| phys(b) * bs + *o as i32)
                        .collect::<Vec<_>>()
        }
        (Ok(OpOutput::Extend([qo, indices, loc, pos])), Expected::Extend(rows, e)) => {
            let e_qo: Vec<i32> = (0..=rows.len()).map(|i| (i * e) as i32).collect();
            let e_idx: Vec<i32> = rows.iter().flat_map(|(r, _)| r.iter().map(phys)).collect();
            let new_positions = || rows.iter().flat_map(|&(_, l)| l - e..l);
            let e_pos: Vec<i32> = new_positions().map(|p| p as i32).collect();
            let e_loc: Vec<i32> = rows
                .iter()
                .flat_map(|(r, l)| {
                    (l - e..*l)
                        .map(move |p| phys(&r[p / bs as usize]) * bs + (p % bs as usize) as i32)
                })
                .collect();
            (qo, indices, loc, pos) == (&e_qo, &e_idx, &e_loc, &e_pos)
        }
        _ => false,
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{op:?}: allocator returned {got:?}, model expects {want:?}"
        ))
    }
}

/// Replays a whole case; `Err` describes the first divergence.
pub fn run_case(case: &BlocksCase) -> std::result::Result<(), String> {
    let (nb, bs) = case.shape();
    let mut a = BlockAllocator::new(nb, bs).map_err(|e| e.to_string())?;
    let mut m = NaiveBlocks::new(nb, bs);
    for op in &case.ops {
        step(&mut a, &mut m, op)?;
    }
    Ok(())
}
