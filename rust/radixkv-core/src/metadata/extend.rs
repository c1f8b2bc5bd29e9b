//! Extend (prefix-prefill) batch metadata.

use super::buffer::{checked_total, push_indptr, BufBuilder, MetadataBuf};
use super::paged::{last_page_len, request_lens, slot};
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
/// | `kv_last_page_len` | n | all 1 (pages of one slot, as in [`paged_extend_metadata`]) |
/// | `kv_indices` | K | request 0's prefix then new slots, then request 1's, ... |
/// | `out_cache_loc` | Q | the new slots, concatenated: where `store_kv` writes |
/// | `positions` | Q | token positions of the new tokens (`prefix_len .. seq_len`), for RoPE |
///
/// Scalars: `batch_size`, `num_tokens` (Q), `page_size` (1), `max_seq_len`, `max_extend_len`,
/// `max_prefix_len`, `max_pages` (= `max_seq_len`).
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

    let mut any_negative = false;
    let mut bb = BufBuilder::new(&[n + 1, n + 1, n, n, n, n, n, total_k, total_q, total_q])?;
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
    // Pages of one slot: the same layout as `paged_extend_metadata`.
    .field("kv_last_page_len", &[n], |o| o.resize(o.len() + n, 1))
    .field("kv_indices", &[total_k], |o| {
        // The sign check rides on the copy while each request's slots are still in cache.
        for b in 0..n {
            for part in [prefix[b].as_ref(), new[b].as_ref()] {
                o.extend_from_slice(part);
                any_negative |= or_fold(part) < 0;
            }
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
    .scalar("page_size", 1)
    .scalar("max_seq_len", max_seq)
    .scalar("max_extend_len", max_of(&new_len))
    .scalar("max_prefix_len", max_of(&pre_len))
    .scalar("max_pages", max_seq);
    let buf = bb.finish();

    // Find the culprit only on failure.
    if any_negative {
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

/// Bitwise OR of `s`: negative iff some element is (a branch-free pass the compiler vectorises).
fn or_fold(s: &[i32]) -> i32 {
    s.iter().fold(0, |acc, &x| acc | x)
}

/// Builds extend metadata over pages: request `b` holds `kv_lens[b]` tokens in `pages[b]`
/// (`ceil(kv_len / page_size)` pages), of which the last `extend_lens[b]` are new. This is the
/// form a paged pool (e.g. a `BlockAllocator` after `allocate` / `append_slots`) produces.
///
/// Fields as [`extend_metadata`], except that `kv_indptr` / `kv_indices` count and list
/// **pages**, as `FlashInfer`'s paged prefill does; plus `kv_last_page_len` [n]. `out_cache_loc`
/// holds the slots of the new tokens (`page * page_size + offset`). With `page_size == 1` the
/// result equals `extend_metadata` over the same slots.
/// Scalars: as [`extend_metadata`], plus `page_size` and `max_pages`.
///
/// Errors (`InvalidArgument`): pages that do not match `kv_lens`, `extend_lens[b] > kv_lens[b]`,
/// negative values, slots or totals beyond int32.
pub fn paged_extend_metadata<P: AsRef<[i32]>>(
    pages: &[P],
    kv_lens: &[i32],
    extend_lens: &[i32],
    page_size: usize,
) -> Result<MetadataBuf> {
    let lens = request_lens(pages, Some(kv_lens), page_size)?;
    let n = pages.len();
    if extend_lens.len() != n {
        return Err(CoreError::invalid(format!(
            "extend_lens has {} entries but there are {n} requests",
            extend_lens.len()
        )));
    }
    let mut q = Vec::with_capacity(n);
    for (b, (&e, &len)) in extend_lens.iter().zip(&lens).enumerate() {
        match usize::try_from(e) {
            Ok(e) if e <= len => q.push(e),
            _ => {
                return Err(CoreError::invalid(format!(
                    "extend_lens[{b}] = {e} is not within 0..={len} (kv_lens[{b}])"
                )))
            }
        }
    }
    let np = |b: usize| pages[b].as_ref().len();
    let total_pages = checked_total((0..n).map(np), "total pages")?;
    let total_q = checked_total(q.iter().copied(), "total new tokens")?;
    let max_of = |f: &dyn Fn(usize) -> usize| (0..n).map(f).max().unwrap_or(0);

    let mut bb = BufBuilder::new(&[n + 1, n + 1, n, n, n, n, n, total_pages, total_q, total_q])?;
    bb.field("qo_indptr", &[n + 1], |o| push_indptr(o, q.iter().copied()))
        .field("kv_indptr", &[n + 1], |o| push_indptr(o, (0..n).map(np)))
        .field("seq_lens", &[n], |o| {
            o.extend(lens.iter().map(|&l| l as i32));
        })
        .field("extend_seq_lens", &[n], |o| {
            o.extend(q.iter().map(|&e| e as i32));
        })
        .field("extend_prefix_lens", &[n], |o| {
            o.extend((0..n).map(|b| (lens[b] - q[b]) as i32));
        })
        .field("extend_start_loc", &[n], |o| {
            let mut acc = 0usize;
            o.extend(q.iter().map(|&e| {
                let start = acc;
                acc += e;
                start as i32
            }));
        })
        .field("kv_last_page_len", &[n], |o| {
            o.extend(lens.iter().map(|&l| last_page_len(l, page_size)));
        })
        .field("kv_indices", &[total_pages], |o| {
            for p in pages {
                o.extend_from_slice(p.as_ref());
            }
        })
        .field("out_cache_loc", &[total_q], |o| {
            for b in 0..n {
                let p = pages[b].as_ref();
                o.extend((lens[b] - q[b]..lens[b]).map(|pos| slot(p, page_size, pos)));
            }
        })
        .field("positions", &[total_q], |o| {
            for b in 0..n {
                o.extend((lens[b] - q[b]..lens[b]).map(|x| x as i32));
            }
        })
        .scalar("batch_size", n)
        .scalar("num_tokens", total_q)
        .scalar("page_size", page_size)
        .scalar("max_seq_len", max_of(&|b| lens[b]))
        .scalar("max_extend_len", max_of(&|b| q[b]))
        .scalar("max_prefix_len", max_of(&|b| lens[b] - q[b]))
        .scalar("max_pages", max_of(&np));
    Ok(bb.finish())
}
