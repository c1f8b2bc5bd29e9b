//! Decode batch metadata: CSR over slots or pages (`FlashInfer`'s form), or a padded block table.

use super::buffer::{checked_total, push_indptr, BufBuilder, MetadataBuf};
use super::paged::{last_page_len, last_slot, request_lens};
use crate::{CoreError, Result};

/// Builds CSR decode metadata: one query per request over its whole context.
///
/// `pages[b]` lists request b's pages in order (its slots when `page_size == 1`);
/// `kv_lens[b]` is its number of valid tokens (defaults to `|pages[b]|` when `page_size == 1`).
///
/// Fields (int32; `n` requests, `P = Σ|pages|`): `qo_indptr` [n+1] = `0..=n`,
/// `kv_indptr` [n+1] = `[0, cumsum(|pages|)]`, `kv_indices` [P], `seq_lens` [n] (= the lengths,
/// named as in the extend and block-table forms), `kv_last_page_len` [n] =
/// `(seq_lens - 1) % page_size + 1`, `out_cache_loc` [n] = the slot of
/// each request's last token (position `kv_len - 1`, where this step's K/V is written).
/// Scalars: `batch_size`, `page_size`, `max_seq_len`, `max_pages`.
pub fn decode_metadata<P: AsRef<[i32]>>(
    pages: &[P],
    kv_lens: Option<&[i32]>,
    page_size: usize,
) -> Result<MetadataBuf> {
    let lens = request_lens(pages, kv_lens, page_size)?;
    let n = pages.len();
    let np = |b: usize| pages[b].as_ref().len();
    let total = checked_total((0..n).map(np), "total pages")?;
    let mut bb = BufBuilder::new(&[n + 1, n + 1, total, n, n, n])?;
    bb.field("qo_indptr", &[n + 1], |o| {
        o.extend((0..=n).map(|b| b as i32));
    })
    .field("kv_indptr", &[n + 1], |o| push_indptr(o, (0..n).map(np)))
    .field("kv_indices", &[total], |o| {
        for p in pages {
            o.extend_from_slice(p.as_ref());
        }
    })
    .scalar("max_pages", (0..n).map(np).max().unwrap_or(0));
    per_request_fields(&mut bb, "seq_lens", pages, &lens, page_size);
    Ok(bb.finish())
}

/// Writes `tables` as a row-major `[tables.len(), width]` block table padded with 0.
/// The caller has checked that no table is longer than `width`.
pub fn fill_block_table<P: AsRef<[i32]>>(tables: &[P], width: usize, out: &mut Vec<i32>) {
    for t in tables {
        let t = t.as_ref();
        out.extend_from_slice(t);
        out.resize(out.len() + (width - t.len()), 0);
    }
}

/// The width of a block table over `tables`: `width` if given (and wide enough), else the
/// longest table.
pub(crate) fn table_width<P: AsRef<[i32]>>(tables: &[P], width: Option<usize>) -> Result<usize> {
    let longest = tables.iter().map(|t| t.as_ref().len()).max().unwrap_or(0);
    match width {
        Some(w) if w < longest => Err(CoreError::invalid(format!(
            "width {w} is narrower than the longest block table ({longest} blocks)"
        ))),
        Some(w) => Ok(w),
        None => Ok(longest),
    }
}

/// Builds block-table decode metadata (vLLM's form).
///
/// Fields (int32): `block_tables` [n, width] zero-padded (width defaults to the longest table;
/// pass a fixed one for CUDA graphs), `seq_lens` [n], `kv_last_page_len` [n], `out_cache_loc` [n]
/// (slot of each sequence's last token).
/// Scalars: `batch_size`, `page_size`, `max_seq_len`, `max_blocks` (= width).
pub fn block_table_metadata<P: AsRef<[i32]>>(
    pages: &[P],
    kv_lens: Option<&[i32]>,
    page_size: usize,
    width: Option<usize>,
) -> Result<MetadataBuf> {
    let lens = request_lens(pages, kv_lens, page_size)?;
    let width = table_width(pages, width)?;
    let n = pages.len();
    let cells = n
        .checked_mul(width)
        .filter(|&c| i32::try_from(c).is_ok())
        .ok_or_else(|| CoreError::invalid("block table size exceeds int32 range"))?;
    let mut bb = BufBuilder::new(&[cells, n, n, n])?;
    bb.field("block_tables", &[n, width], |o| {
        fill_block_table(pages, width, o);
    })
    .scalar("max_blocks", width);
    per_request_fields(&mut bb, "seq_lens", pages, &lens, page_size);
    Ok(bb.finish())
}

/// The per-request fields both decode forms carry: the lengths (named `lens_name`),
/// `kv_last_page_len`, `out_cache_loc`, and the scalars `batch_size`, `page_size`, `max_seq_len`.
fn per_request_fields<P: AsRef<[i32]>>(
    bb: &mut BufBuilder,
    lens_name: &'static str,
    pages: &[P],
    lens: &[usize],
    page_size: usize,
) {
    let n = pages.len();
    bb.field(lens_name, &[n], |o| {
        o.extend(lens.iter().map(|&l| l as i32));
    })
    .field("kv_last_page_len", &[n], |o| {
        o.extend(lens.iter().map(|&l| last_page_len(l, page_size)));
    })
    .field("out_cache_loc", &[n], |o| {
        o.extend((0..n).map(|b| last_slot(pages[b].as_ref(), page_size, lens[b])));
    })
    .scalar("batch_size", n)
    .scalar("page_size", page_size)
    .scalar("max_seq_len", lens.iter().copied().max().unwrap_or(0));
}
