//! Token ids as callers hand them over: int32 (what the tree's keys hold) or int64 (`SGLang`'s
//! token arrays). A descent compares int64 ids against the int32 keys at 64 bits, so an int64
//! prompt is never narrowed whole; only the ids an insert stores are narrowed (after the
//! checks), into a reused buffer.

use super::tree::{check_tokens, common_prefix};
use crate::error::{CoreError, Result};

/// An element type token ids can be read as. An int64 id outside int32's range equals no key,
/// so a descent stops at it, and `check` refuses it.
pub trait TokenId: Copy {
    /// The ids as keys, valid from `matched` on (the ids there checked): int32 ids are
    /// themselves; int64 ones are narrowed into `buf` from `matched` on, and
    /// `buf[..matched]` keeps whatever it held (a commit reads nothing before `matched`).
    fn keys<'a>(t: &'a [Self], matched: usize, buf: &'a mut Vec<i32>) -> &'a [i32];
    /// This id as a key; `None` when it does not fit int32 (then it equals no key).
    fn key(self) -> Option<i32>;
    /// Length of the common prefix of `keys` and `t`.
    fn common_prefix(keys: &[i32], t: &[Self]) -> usize;
    /// Refuses ids that are no key: one that does not fit int32 (named first, as a narrowing
    /// at the boundary names it), else a negative one.
    fn check(t: &[Self]) -> Result<()>;
}

impl TokenId for i32 {
    #[inline]
    fn keys<'a>(t: &'a [Self], _matched: usize, _buf: &'a mut Vec<i32>) -> &'a [i32] {
        t
    }

    #[inline]
    fn key(self) -> Option<i32> {
        Some(self)
    }

    #[inline]
    fn common_prefix(keys: &[i32], t: &[Self]) -> usize {
        common_prefix(keys, t)
    }

    fn check(t: &[Self]) -> Result<()> {
        check_tokens(t)
    }
}

impl TokenId for i64 {
    fn keys<'a>(t: &'a [Self], matched: usize, buf: &'a mut Vec<i32>) -> &'a [i32] {
        if buf.len() < t.len() {
            buf.resize(t.len(), 0);
        }
        for (d, &x) in buf[matched..t.len()].iter_mut().zip(&t[matched..]) {
            // checked: every id from `matched` on fits
            #[allow(clippy::cast_possible_truncation)]
            {
                *d = x as i32;
            }
        }
        &buf[..t.len()]
    }

    #[inline]
    fn key(self) -> Option<i32> {
        i32::try_from(self).ok()
    }

    /// As `tree::common_prefix`, at 64 bits (see `common_prefix_wide`); built for AVX2 when
    /// the CPU has it (the baseline x86-64 build widens 32-bit lanes one pair at a time).
    #[inline]
    fn common_prefix(keys: &[i32], t: &[Self]) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU supports AVX2 (checked just above).
                return unsafe { common_prefix_wide_avx2(keys, t) };
            }
        }
        common_prefix_wide(keys, t)
    }

    fn check(t: &[Self]) -> Result<()> {
        // x fits int32 exactly when x + 2**31 (wrapping, as u64) has no high bits: one
        // branch-free fold over every id, the offender found only on failure
        #[allow(clippy::cast_sign_loss)]
        let high = t
            .iter()
            .fold(0u64, |acc, &x| acc | (x as u64).wrapping_add(1 << 31));
        if high >> 32 != 0 {
            let x = t.iter().find(|&&x| i32::try_from(x).is_err());
            let x = x.expect("an id out of int32's range exists");
            return Err(CoreError::invalid(format!(
                "tokens: value {x} does not fit in int32"
            )));
        }
        if t.iter().fold(0i64, |acc, &x| acc | x) < 0 {
            let x = t.iter().find(|&&x| x < 0).expect("a negative id exists");
            return Err(CoreError::invalid(format!("tokens: negative token id {x}")));
        }
        Ok(())
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn common_prefix_wide_avx2(keys: &[i32], t: &[i64]) -> usize {
    common_prefix_wide(keys, t)
}

/// Length of the common prefix of int32 `keys` and int64 ids `t`. Equality of a range is a
/// branch-free fold (the xor of every pair, or-ed: zero exactly when the range is equal),
/// which vectorises: the whole range first (keys usually match whole: only the last node of a
/// path diverges), then whole 64-id blocks, then id by id. Keys are non-negative, so a key
/// widens by zero extension. Always inlined, so that inside `common_prefix_wide_avx2` it is
/// compiled for AVX2.
#[allow(clippy::inline_always)]
#[inline(always)]
fn common_prefix_wide(keys: &[i32], ids: &[i64]) -> usize {
    const BLOCK: usize = 64;
    let len = keys.len().min(ids.len());
    let (keys, ids) = (&keys[..len], &ids[..len]);
    if differ(keys, ids) == 0 {
        return len;
    }
    let mut at = 0;
    while at + BLOCK <= len && differ(&keys[at..at + BLOCK], &ids[at..at + BLOCK]) == 0 {
        at += BLOCK;
    }
    while at < len && i64::from(keys[at]) == ids[at] {
        at += 1;
    }
    at
}

/// The or of `key ^ id` over the pairs (zero exactly when every pair is equal).
#[allow(clippy::inline_always)]
#[inline(always)]
fn differ(keys: &[i32], ids: &[i64]) -> u64 {
    keys.iter()
        .zip(ids)
        .fold(0u64, |acc, (&k, &x)| acc | (u64::from(k as u32) ^ x as u64))
}
