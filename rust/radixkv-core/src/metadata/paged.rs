//! What paged builders share: checking page lists against lengths, and slot arithmetic.

use crate::{CoreError, Result};

/// Valid-token count of every request, checked against its page list.
///
/// With `kv_lens == None` the request's length is its page count, which only makes sense for
/// `page_size == 1`. Each request needs at least one token (the decode query attends itself) and
/// exactly `ceil(kv_len / page_size)` pages; page ids are non-negative and their slots
/// (`page * page_size + offset`) fit int32.
pub(crate) fn request_lens<P: AsRef<[i32]>>(
    pages: &[P],
    kv_lens: Option<&[i32]>,
    page_size: usize,
) -> Result<Vec<usize>> {
    if page_size == 0 || page_size > i32::MAX as usize {
        return Err(CoreError::invalid(format!(
            "page_size must be in 1..2^31, got {page_size}"
        )));
    }
    let lens: Vec<usize> = match kv_lens {
        None if page_size == 1 => pages.iter().map(|p| p.as_ref().len()).collect(),
        None => {
            return Err(CoreError::invalid(format!(
                "kv_lens is required when page_size > 1 (got page_size={page_size})"
            )))
        }
        Some(l) if l.len() != pages.len() => {
            return Err(CoreError::invalid(format!(
                "kv_lens has {} entries but there are {} requests",
                l.len(),
                pages.len()
            )))
        }
        Some(l) => l
            .iter()
            .enumerate()
            .map(|(b, &x)| {
                usize::try_from(x)
                    .map_err(|_| CoreError::invalid(format!("kv_lens[{b}] = {x} is negative")))
            })
            .collect::<Result<_>>()?,
    };
    // Slots are int32: every slot of the largest page must fit.
    let max_page = ((1i64 << 31) / page_size as i64 - 1) as i32;
    for (b, (p, &len)) in pages.iter().zip(&lens).enumerate() {
        let p = p.as_ref();
        if len == 0 {
            return Err(CoreError::invalid(format!(
                "request {b} has no KV tokens; its query attends at least itself"
            )));
        }
        let want = len.div_ceil(page_size);
        if p.len() != want {
            return Err(CoreError::invalid(format!(
                "request {b}: {len} tokens need {want} pages of {page_size}, got {}",
                p.len()
            )));
        }
        // One branch-free max over the pages as u32 (a negative id wraps above any valid
        // one); the culprit is looked up only on failure.
        let widest = p.iter().fold(0u32, |m, &x| m.max(x as u32));
        if widest > max_page as u32 {
            let i = p.iter().position(|&x| x < 0 || x > max_page).unwrap_or(0);
            return Err(CoreError::invalid(format!(
                "request {b}: page [{i}] = {} is negative or its slots exceed int32 \
                 (page_size {page_size})",
                p[i]
            )));
        }
    }
    Ok(lens)
}

/// Tokens held by the last page of a request of `len >= 1` tokens.
pub(crate) fn last_page_len(len: usize, page_size: usize) -> i32 {
    ((len - 1) % page_size + 1) as i32
}

/// Slot of token position `pos` of a request whose pages are `pages` (checked by `request_lens`).
pub(crate) fn slot(pages: &[i32], page_size: usize, pos: usize) -> i32 {
    pages[pos / page_size] * page_size as i32 + (pos % page_size) as i32
}

/// Slot of the last token of a request of `len >= 1` tokens.
pub(crate) fn last_slot(pages: &[i32], page_size: usize, len: usize) -> i32 {
    slot(pages, page_size, len - 1)
}
