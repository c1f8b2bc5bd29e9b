//! Extend (prefix-prefill) batch metadata.

use super::buffer::{checked_total, push_indptr, BufBuilder, MetadataBuf};
use crate::{CoreError, Result};

/// Builds the metadata of an extend batch: request `b` has cached `prefix[b]` slots and must
/// compute `new[b]` tokens, whose K/V go to those slots.
///
/// Fields (all int32; `n` requests, `Q = Σ|new|`, `K = Σ|prefix| + Q`):
///
/// | field | shape | value |
/// | --- | --- | --- |
/// | `qo_indptr` | n+1 | `[0, cumsum(extend_seq_lens)]` |
/// | `kv_indptr` | n+1 | `[0, cumsum(seq_lens)]` |
/// | `seq_lens` | n | `|prefix[b]| + |new[b]|` (L_k) |
/// | `extend_seq_lens` | n | `|new[b]|` (L_q) |
/// | `extend_prefix_lens` | n | `|prefix[b]|` |
/// | `extend_start_loc` | n | `qo_indptr[:-1]` |
/// | `kv_indices` | K | request 0's prefix then new slots, then request 1's, ... |
/// | `out_cache_loc` | Q | the new slots, concatenated: where `store_kv` writes |
/// | `positions` | Q | token positions of the new tokens (`prefix_len .. seq_len`), for RoPE |
///
/// Scalars: `batch_size`, `num_tokens` (Q), `max_seq_len`, `max_extend_len`, `max_prefix_len`.
///
/// Errors (`InvalidArgument`): `prefix` and `new` of different lengths, a negative slot, or
/// totals beyond int32.
pub fn extend_metadata<P: AsRef<[i32]>, N: AsRef<[i32]>>(
    prefix: &[P],
    new: &[N],
) -> Result<MetadataBuf> {
    if prefix.len() != new.len() {
        return Err(CoreError::invalid(format!(
            "prefix_slots has {} requests but new_slots has {}",
            prefix.len(),
            new.len()
        )));
    }
    let n = prefix.len();
    let pre_len = |b: usize| prefix[b].as_ref().len();
    let new_len = |b: usize| new[b].as_ref().len();
    let total_q = checked_total((0..n).map(new_len), "total new tokens")?;
    let total_k = checked_total(
        (0..n).map(pre_len).chain(std::iter::once(total_q)),
        "total KV tokens",
    )?;
    let max_of = |f: &dyn Fn(usize) -> usize| (0..n).map(f).max().unwrap_or(0);
    let max_seq = max_of(&|b| pre_len(b) + new_len(b));

    let mut bb = BufBuilder::new(&[n + 1, n + 1, n, n, n, n, total_k, total_q, total_q])?;
    bb.field("qo_indptr", &[n + 1], |o| {
        push_indptr(o, (0..n).map(new_len));
    })
    .field("kv_indptr", &[n + 1], |o| {
        push_indptr(o, (0..n).map(|b| pre_len(b) + new_len(b)));
    })
    .field("seq_lens", &[n], |o| {
        o.extend((0..n).map(|b| (pre_len(b) + new_len(b)) as i32));
    })
    .field("extend_seq_lens", &[n], |o| {
        o.extend((0..n).map(|b| new_len(b) as i32));
    })
    .field("extend_prefix_lens", &[n], |o| {
        o.extend((0..n).map(|b| pre_len(b) as i32));
    })
    .field("extend_start_loc", &[n], |o| {
        let mut acc = 0usize;
        o.extend((0..n).map(|b| {
            let start = acc;
            acc += new_len(b);
            start as i32
        }));
    })
    .field("kv_indices", &[total_k], |o| {
        for b in 0..n {
            o.extend_from_slice(prefix[b].as_ref());
            o.extend_from_slice(new[b].as_ref());
        }
    })
    .field("out_cache_loc", &[total_q], |o| {
        for s in new {
            o.extend_from_slice(s.as_ref());
        }
    })
    .field("positions", &[total_q], |o| {
        for b in 0..n {
            let p = pre_len(b);
            o.extend((p..p + new_len(b)).map(|x| x as i32));
        }
    })
    .scalar("batch_size", n)
    .scalar("num_tokens", total_q)
    .scalar("max_seq_len", max_seq)
    .scalar("max_extend_len", max_of(&new_len))
    .scalar("max_prefix_len", max_of(&pre_len));
    let buf = bb.finish();

    // Validate slots on the copy (one vectorisable pass); find the culprit only on failure.
    let kv = buf.field("kv_indices").unwrap_or(&[]);
    if kv.iter().copied().fold(0i32, i32::min) < 0 {
        for b in 0..n {
            for (what, s) in [
                ("prefix_slots", prefix[b].as_ref()),
                ("new_slots", new[b].as_ref()),
            ] {
                if let Some(i) = s.iter().position(|&x| x < 0) {
                    return Err(CoreError::invalid(format!(
                        "{what}[{b}][{i}] = {} is negative; slots are non-negative",
                        s[i]
                    )));
                }
            }
        }
    }
    Ok(buf)
}
