//! The extend work list: the order in which `extend_attention`'s CTAs take a batch's query tiles.
//!
//! Extend attention cuts request `b`'s `L_q * G` query rows (query positions x the `G` query heads
//! of one KV head) into tiles of `tile_rows` rows; a tile of rank `r` is the request's `r`-th
//! from its last, so rank 0 sees the most keys. Without a plan the kernels order tiles by rank
//! across the batch, which is heaviest-first only when every request has the same lengths (in a
//! ragged batch a long request's heavy tiles wait behind every short request's rank 0), or by
//! request when that grid would be mostly empty, which finds each CTA's tile by a scan.
//!
//! The plan lists `(request, rank)` entries, one per tile, heaviest first: the kernels launch one
//! CTA per entry and KV head, in the plan's order, so the last CTAs to start are the lightest and
//! each CTA reads its tile in one load. Tiles of a request with more than [`KEEP_TOGETHER_KEYS`]
//! keys go in runs of up to [`RUN_TILES`] consecutive ranks (a run sorts by its heaviest tile), so
//! CTAs that read the same long K/V stream run at about the same time and share it in L2; tiles
//! of shorter requests sort one by one.
//!
//! A batch whose requests all have the same lengths gets an empty plan when the kernels' own rank
//! order already is this order: for short requests (rank order is heaviest-first) and for
//! requests of at least [`RANK_GROUP_TILES`] tiles (the warp-specialised kernel then launches
//! ranks in groups of [`RUN_TILES`], as runs; `hip/extend_ws.cuh`, `rank_group`). Uniform long
//! requests of fewer tiles get a plan: rank order would spread each stream's tiles over the grid.
//!
//! Layout: int32 `[n, 2]` row-major, row `e` = `(request, rank)`.

use std::cmp::Reverse;
use std::ops::Range;

use crate::{CoreError, Result};

/// int32 per plan entry.
pub const EXTEND_PLAN_COLS: usize = 2;
/// Longest run of consecutive ranks of one request kept together.
pub const RUN_TILES: usize = 8;
/// Requests with more keys than this have their tiles kept together in runs.
pub const KEEP_TOGETHER_KEYS: usize = 512;
/// Tiles per request from which the kernels' rank order groups ranks by themselves (kept equal to
/// `2 * kRankGroup` of `hip/extend_ws.cuh`; a difference would cost speed, never correctness).
pub const RANK_GROUP_TILES: usize = 2 * RUN_TILES;

/// One query tile: its request, rank and the keys its last row sees (its cost, roughly).
#[derive(Debug, Clone, Copy)]
struct Tile {
    req: usize,
    rank: usize,
    keys: usize,
}

/// Tiles of a request of `lq` queries over `lk` keys (`lq <= lk`), rank 0 first.
fn request_tiles(
    req: usize,
    lq: usize,
    lk: usize,
    group: usize,
    tile_rows: usize,
) -> impl Iterator<Item = Tile> {
    let total_rows = lq * group;
    let n = total_rows.div_ceil(tile_rows);
    let prefix = lk - lq;
    (0..n).map(move |rank| {
        let first_row = (n - 1 - rank) * tile_rows;
        let last_row = (first_row + tile_rows).min(total_rows) - 1;
        Tile {
            req,
            rank,
            keys: prefix + last_row / group + 1,
        }
    })
}

/// The lengths every request with queries has, if they all have the same (and some have queries).
fn uniform(lens: &[(usize, usize)]) -> Option<&(usize, usize)> {
    let first = lens.iter().find(|(lq, _)| *lq > 0)?;
    lens.iter().all(|l| l.0 == 0 || l == first).then_some(first)
}

/// Whether the kernels' own rank order already is the plan's order, so the plan is empty (module
/// notes): every request with queries has the same lengths, and they are short (at most
/// [`KEEP_TOGETHER_KEYS`] keys) or have at least [`RANK_GROUP_TILES`] tiles.
fn rank_order_suffices(lens: &[(usize, usize)], group: usize, tile_rows: usize) -> bool {
    uniform(lens).is_some_and(|&(lq, lk)| {
        lk <= KEEP_TOGETHER_KEYS || (lq * group).div_ceil(tile_rows) >= RANK_GROUP_TILES
    })
}

/// The extend plan of a batch whose request `b` has `q_lens[b]` queries (`L_q`) and
/// `kv_lens[b]` keys (`L_k`, the new tokens included), for `group` query heads per KV head and
/// tiles of `tile_rows` rows. Returns the flat `[n * 2]` entries (see the module notes; empty
/// for most uniform batches). Requests with no queries have no tiles.
///
/// Errors (`InvalidArgument`): lengths of different counts, a negative length, a request with
/// more queries than keys, `group` or `tile_rows` of 0, or more than `i32::MAX` rows or entries.
pub fn extend_plan(
    q_lens: &[i32],
    kv_lens: &[i32],
    group: usize,
    tile_rows: usize,
) -> Result<Vec<i32>> {
    if q_lens.len() != kv_lens.len() {
        return Err(CoreError::invalid(format!(
            "q_lens has {} requests but kv_lens has {}",
            q_lens.len(),
            kv_lens.len()
        )));
    }
    if group == 0 || tile_rows == 0 {
        return Err(CoreError::invalid(format!(
            "extend plan: group ({group}) and tile_rows ({tile_rows}) must be >= 1"
        )));
    }
    let limit = i32::MAX as usize;
    let mut lens = Vec::with_capacity(q_lens.len());
    let mut total = 0usize;
    for (b, (&q, &k)) in q_lens.iter().zip(kv_lens).enumerate() {
        let (Ok(lq), Ok(lk)) = (usize::try_from(q), usize::try_from(k)) else {
            return Err(CoreError::invalid(format!(
                "request {b}: negative length (q_len {q}, kv_len {k})"
            )));
        };
        if lq > lk {
            return Err(CoreError::invalid(format!(
                "request {b}: {lq} queries but only {lk} keys (queries are the last keys)"
            )));
        }
        let rows = lq
            .checked_mul(group)
            .filter(|&r| r <= limit)
            .ok_or_else(|| {
                CoreError::invalid(format!(
                    "request {b}: {lq} queries x group {group} exceeds int32"
                ))
            })?;
        total += rows.div_ceil(tile_rows);
        if total > limit / EXTEND_PLAN_COLS {
            return Err(CoreError::invalid(
                "extend plan: more entries than int32 holds",
            ));
        }
        lens.push((lq, lk));
    }
    if rank_order_suffices(&lens, group, tile_rows) {
        return Ok(Vec::new());
    }
    // Every tile, request by request, rank 0 first; runs of consecutive ranks over them, each
    // sorted by its first (heaviest) tile.
    let mut tiles: Vec<Tile> = Vec::new();
    tiles
        .try_reserve_exact(total)
        .map_err(|_| CoreError::invalid("cannot allocate the extend plan"))?;
    let mut runs: Vec<Range<usize>> = Vec::new();
    for (b, &(lq, lk)) in lens.iter().enumerate() {
        let run = if lk > KEEP_TOGETHER_KEYS {
            RUN_TILES
        } else {
            1
        };
        let start = tiles.len();
        tiles.extend(request_tiles(b, lq, lk, group, tile_rows));
        let end = tiles.len();
        runs.extend((start..end).step_by(run).map(|s| s..(s + run).min(end)));
    }
    // Keys are distinct ((req, rank) names one tile), so an unstable sort gives the one order.
    runs.sort_unstable_by_key(|r| {
        let t = &tiles[r.start];
        (Reverse(t.keys), t.req, t.rank)
    });
    let mut out = Vec::new();
    out.try_reserve_exact(total * EXTEND_PLAN_COLS)
        .map_err(|_| CoreError::invalid("cannot allocate the extend plan"))?;
    for t in runs.iter().flat_map(|r| &tiles[r.clone()]) {
        // Both fit: req < batch <= int32 entries, rank < tiles <= int32 entries.
        out.push(t.req as i32);
        out.push(t.rank as i32);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks a plan against a direct reading of the batch: every tile exactly once; runs of
    /// consecutive ranks only within one long request, at most `RUN_TILES`, starting at a
    /// multiple of `RUN_TILES`; runs heaviest first.
    fn check(q: &[i32], k: &[i32], group: usize, rows: usize) -> Vec<(usize, usize)> {
        let v = extend_plan(q, k, group, rows).unwrap();
        assert_eq!(v.len() % EXTEND_PLAN_COLS, 0);
        let got: Vec<(usize, usize)> = v
            .chunks(2)
            .map(|e| (e[0] as usize, e[1] as usize))
            .collect();
        let lens: Vec<(usize, usize)> = q
            .iter()
            .zip(k)
            .map(|(&a, &b)| (a as usize, b as usize))
            .collect();
        if lens.iter().all(|l| l.0 == 0) {
            assert!(got.is_empty(), "no queries, no tiles");
            return got;
        }
        if rank_order_suffices(&lens, group, rows) {
            assert!(
                got.is_empty(),
                "a uniform batch the kernels order themselves gets no plan"
            );
            return got;
        }
        let mut want: Vec<(usize, usize)> = Vec::new();
        let mut keys = std::collections::HashMap::new();
        for (b, &(lq, lk)) in lens.iter().enumerate() {
            // Rank r is the r-th tile from the request's last; its last row is query position
            // (its last packed row) / group, which sees every key up to the prefix plus that
            // position.
            let n = (lq * group).div_ceil(rows);
            for r in 0..n {
                let last_row = ((n - r) * rows).min(lq * group) - 1;
                want.push((b, r));
                keys.insert((b, r), lk - lq + last_row / group + 1);
            }
            for t in request_tiles(b, lq, lk, group, rows) {
                assert_eq!(
                    t.keys,
                    keys[&(b, t.rank)],
                    "the keys a tile's last row sees"
                );
            }
        }
        let mut sorted = got.clone();
        sorted.sort_unstable();
        want.sort_unstable();
        assert_eq!(sorted, want, "every tile exactly once");
        let mut last_start = usize::MAX;
        for (i, &(b, r)) in got.iter().enumerate() {
            // A long request's run holds its ranks 8j .. 8j + 7, in order; a short request's
            // tiles are runs of one.
            let long = lens[b].1 > KEEP_TOGETHER_KEYS;
            if long && r % RUN_TILES != 0 {
                assert_eq!(got[i - 1], (b, r - 1), "a run holds consecutive ranks");
            } else {
                assert!(keys[&(b, r)] <= last_start, "runs heaviest first");
                last_start = keys[&(b, r)];
            }
        }
        got
    }

    #[test]
    fn ragged_batch_golden() {
        // Request 0: 2 queries over 600 keys (long: runs); request 1: 3 queries over 3 keys.
        // group 4, tiles of 4 rows: request 0 has 2 tiles (keys 600, 599), request 1 has 3
        // (keys 3, 2, 1).
        let got = check(&[2, 3], &[600, 3], 4, 4);
        assert_eq!(got, [(0, 0), (0, 1), (1, 0), (1, 1), (1, 2)]);
        // Short requests sort tile by tile across requests.
        let got = check(&[2, 2], &[2, 3], 1, 1);
        assert_eq!(got, [(1, 0), (0, 0), (1, 1), (0, 1)]);
        // A request's prefix weighs its tiles: 1 query after 9 cached keys (10 keys) goes before
        // every tile of 8 fresh queries (8 keys at most).
        let got = check(&[1, 8], &[10, 8], 1, 1);
        let want: Vec<(usize, usize)> =
            [(0, 0)].into_iter().chain((0..8).map(|r| (1, r))).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn plan_is_allocated_once_at_its_size() {
        // The entries are reserved up front (try_reserve_exact: an allocation failure is an
        // error, not an abort), so the plan never grows while it is filled.
        for (q, k) in [
            (&[2, 3][..], &[600, 3][..]),
            (&[1, 8, 5, 300], &[10, 8, 900, 300]),
        ] {
            let plan = extend_plan(q, k, 4, 4).unwrap();
            assert!(!plan.is_empty());
            assert_eq!(plan.capacity(), plan.len());
        }
    }

    #[test]
    fn uniform_batches() {
        // Short requests, or long ones of 16+ tiles: the kernels' rank order is the plan's.
        assert!(extend_plan(&[512; 8], &[512; 8], 4, 128)
            .unwrap()
            .is_empty());
        assert!(extend_plan(&[2048; 8], &[6144; 8], 4, 128)
            .unwrap()
            .is_empty());
        assert!(extend_plan(&[], &[], 4, 128).unwrap().is_empty());
        // Requests without queries do not break uniformity.
        assert!(extend_plan(&[0, 5, 5, 0], &[9, 7, 7, 0], 2, 64)
            .unwrap()
            .is_empty());
        // Long requests of 4 tiles: each request's tiles in one run, requests in order.
        let got = check(&[128; 3], &[4224; 3], 4, 128);
        let want: Vec<(usize, usize)> = (0..3).flat_map(|b| (0..4).map(move |r| (b, r))).collect();
        assert_eq!(got, want);
        // The tile count that lets the kernels group ranks themselves is counted in rows
        // (queries x group) over tile_rows: 256 x 4 / 64 = 16 tiles need no plan, 192 x 4 / 64 =
        // 12 tiles do (every tile once).
        assert!(extend_plan(&[256; 2], &[1024; 2], 4, 64)
            .unwrap()
            .is_empty());
        assert_eq!(
            extend_plan(&[192; 2], &[1024; 2], 4, 64).unwrap().len(),
            2 * 12 * EXTEND_PLAN_COLS
        );
    }

    #[test]
    fn rank_groups_match_the_kernel() {
        // RUN_TILES is the warp-specialised extend kernel's rank group, and RANK_GROUP_TILES the
        // tile count from which that kernel groups ranks (hip/extend_ws.cuh, rank_group).
        let src = include_str!(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../hip/extend_ws.cuh"
        ));
        let decl = "constexpr int kRankGroup = ";
        let at = src.find(decl).expect("kRankGroup in hip/extend_ws.cuh") + decl.len();
        let value: usize = src[at..]
            .split(';')
            .next()
            .and_then(|v| v.trim().parse().ok())
            .expect("kRankGroup is an integer literal");
        assert_eq!(RUN_TILES, value);
        assert_eq!(RANK_GROUP_TILES, 2 * value);
        assert!(src.contains("per_req >= 2 * kRankGroup ? kRankGroup : 1"));
    }

    #[test]
    fn a_request_of_exactly_the_threshold_keys_sorts_tile_by_tile() {
        // Request 0 has 512 keys (not more than KEEP_TOGETHER_KEYS: no runs), 16 tiles with keys
        // 512, 480, ..., 32; request 1's two tiles have 512 and 480. Tile by tile, heaviest first.
        let got = check(&[512, 64], &[512, 512], 4, 128);
        let want: Vec<(usize, usize)> = [(0, 0), (1, 0), (0, 1), (1, 1)]
            .into_iter()
            .chain((2..16).map(|r| (0, r)))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn bad_input_is_rejected() {
        let msg = |r: Result<Vec<i32>>| r.unwrap_err().to_string();
        assert!(msg(extend_plan(&[1], &[1, 2], 4, 128)).contains("requests"));
        assert!(msg(extend_plan(&[-1], &[2], 4, 128)).contains("negative"));
        assert!(msg(extend_plan(&[3], &[2], 4, 128)).contains("queries"));
        assert!(msg(extend_plan(&[1], &[2], 0, 128)).contains("group"));
        assert!(msg(extend_plan(&[1], &[2], 4, 0)).contains("tile_rows"));
        assert!(msg(extend_plan(&[i32::MAX], &[i32::MAX], 4, 128)).contains("int32"));
        // Entries (tiles) beyond what int32 indexes in the flat [n, 2] plan: two requests of 2^30
        // one-row tiles. The check comes before any allocation.
        let big = 1 << 30;
        assert!(msg(extend_plan(&[big, big], &[big, big], 1, 1)).contains("more entries"));
        // The largest count accepted: i32::MAX / 2 entries (a uniform batch, so no plan is built).
        let most = i32::MAX / 2;
        assert!(extend_plan(&[most], &[most], 1, 1).unwrap().is_empty());
    }

    proptest! {
        #[test]
        fn plan_invariants(
            reqs in prop::collection::vec((0i32..3000, 0i32..5000), 0..40),
            group in prop::sample::select(vec![1usize, 2, 4, 7, 8]),
            rows in prop::sample::select(vec![16usize, 64, 128]),
        ) {
            let q: Vec<i32> = reqs.iter().map(|r| r.0).collect();
            let k: Vec<i32> = reqs.iter().map(|r| r.0 + r.1).collect();
            check(&q, &k, group, rows);
        }
    }
}
