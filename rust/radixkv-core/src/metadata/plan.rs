//! The decode work partition: which KV range of which request each decode block reads.
//!
//! `paged_decode` launches one block group per *work unit* (per KV head and head chunk). A unit
//! is a contiguous KV range `[kv_start, kv_end)` of one request. Every request is cut into units of
//! one chunk length `C` (its last unit shorter), so a long request gets many units and a short one
//! gets one, and all units cost about the same: the GPU's slots stay busy to the end instead of
//! waiting on the long requests' blocks. `C` is chosen so the unit count fills one or a few waves
//! of the GPU (`slots` units run at once); requests with several units have their partial states
//! merged by the last unit to finish.
//!
//! Layout (int32, one flat array, `cap` = capacity units, `n` requests):
//!
//! - `units [cap][4]`: `(request, kv_start, kv_end, units_of_request)`; unused rows are
//!   `(-1, 0, 0, 0)`. A request's units are consecutive rows, in KV order.
//! - `first_unit [n]`: the row of each request's first unit.
//!
//! The capacity depends only on the batch size and `slots` ([`decode_plan_capacity`]), so a CUDA
//! graph captured with one plan buffer replays with any later plan of the same batch size.

use crate::{CoreError, Result};

/// int32 per unit row.
pub const PLAN_COLS: usize = 4;
/// Most units one request is cut into (the kernels' merge holds this many partials).
pub const MAX_UNITS_PER_REQUEST: usize = 256;
/// Shortest chunk worth its own unit: below this the merge traffic outweighs the parallelism.
pub const MIN_CHUNK_TOKENS: usize = 128;
/// Units beyond one per request the plan may use, in multiples of the slots.
pub const MAX_WAVES: usize = 2;

/// What a plan chose (host-side; the kernels read only the array).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlanInfo {
    /// Unit rows in use.
    pub units: usize,
    /// Unit rows in the array (`>= units`).
    pub capacity: usize,
    /// Chunk length `C` in tokens (every unit but a request's last has exactly this many).
    pub chunk: usize,
}

/// Unit rows a plan for `batch` requests and `slots` concurrent units needs at most.
pub fn decode_plan_capacity(batch: usize, slots: usize) -> usize {
    batch + MAX_WAVES * slots.max(1)
}

/// Elements of the flat plan array for `capacity` units and `batch` requests.
pub fn decode_plan_len(batch: usize, capacity: usize) -> usize {
    capacity * PLAN_COLS + batch
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn round_up(x: usize, g: usize) -> usize {
    x.div_ceil(g) * g
}

/// Units of a request of `len` tokens at chunk `c` (an empty request still gets one unit, which
/// writes its zero output).
fn units_of(len: usize, c: usize) -> usize {
    len.div_ceil(c).max(1)
}

fn total_units(lens: &[usize], c: usize) -> usize {
    lens.iter().map(|&l| units_of(l, c)).sum()
}

/// Estimated time of a plan at chunk `c`, in tokens one slot reads (see [`plan_chunk`]).
fn plan_cost(lens: &[usize], c: usize, slots: usize, total: usize) -> (usize, usize) {
    let units = total_units(lens, c);
    let longest = lens.iter().map(|&l| l.min(c)).max().unwrap_or(0);
    let run = if units <= slots {
        longest
    } else {
        total.div_ceil(slots) + longest
    };
    // Every request has at least one unit, and more exactly when it is cut.
    let merge = if units > lens.len() { MERGE_TOKENS } else { 0 };
    (run + merge + units * UNIT_OVERHEAD_TOKENS / slots, units)
}

/// The fixed cost of one unit (its block's start-up, its partial's store and read-back), in tokens
/// one slot reads in the same time.
pub const UNIT_OVERHEAD_TOKENS: usize = 128;
/// What cutting costs beyond the units' overhead, in tokens one slot reads in the same time: the
/// merge of a cut request's partials runs after its last unit (stores, a counter, the partials
/// read back), a latency on the plan's critical path. A cut must save more than this, so requests
/// of a few hundred tokens are not cut. The value lies between two bounds an H200 sets: above
/// 288, four requests of 512 tokens stay whole (faster there than in quarters), and below 360,
/// one request of 512 is cut in quarters (faster than whole).
pub const MERGE_TOKENS: usize = 320;

/// The candidate chunks from `c_min` up to (not including) `whole`: multiples of `g` about 1/8
/// apart, so that a plan weighs a few dozen of them however long the requests are.
fn ladder(c_min: usize, whole: usize, g: usize) -> impl Iterator<Item = usize> {
    std::iter::successors(Some(c_min), move |&c| Some(round_up(c + c / 8 + 1, g)))
        .take_while(move |&c| c < whole)
}

/// The chunk length for `lens` at `page_size` with `slots` concurrent units (see the module doc).
///
/// Chunks are multiples of `lcm(page_size, 16)` (page-aligned, whole 16-key tiles), at least
/// [`MIN_CHUNK_TOKENS`], and cut no request into more than [`MAX_UNITS_PER_REQUEST`] units nor the
/// batch into more than [`decode_plan_capacity`] units. Among a geometric ladder of such chunks
/// the one of least estimated time wins: units that all fit the slots at once take as long as the
/// longest; more units than slots take the even share `total / slots` plus a tail of at most one
/// unit (the slots pick up units as they free); every unit adds [`UNIT_OVERHEAD_TOKENS`] spread
/// over the slots, and cutting any request adds its merge, [`MERGE_TOKENS`]. So a uniform batch
/// that fills the slots is not cut, one long request is cut into `slots` units, and a ragged
/// batch has its long requests cut into about the even share.
/// The winner is then evened out: the least chunk that cuts the longest request into as many
/// units, taken when it leaves every request's unit count as it was (so one 32768-token request
/// on 16 slots gets 16 units of 2048, not 15 of 2176 and one of 128).
pub fn plan_chunk(lens: &[usize], page_size: usize, slots: usize) -> usize {
    let g = page_size.max(1) / gcd(page_size.max(1), 16) * 16;
    let max_len = lens.iter().copied().max().unwrap_or(0);
    let whole = round_up(max_len.max(1), g);
    let slots = slots.max(1);
    let total: usize = lens.iter().sum();
    let cap = decode_plan_capacity(lens.len(), slots);
    let c_min = round_up(
        MIN_CHUNK_TOKENS.max(max_len.div_ceil(MAX_UNITS_PER_REQUEST)),
        g,
    )
    .min(whole);
    let (mut best_cost, _) = plan_cost(lens, whole, slots, total);
    let mut best = whole;
    for c in ladder(c_min, whole, g) {
        let (cost, units) = plan_cost(lens, c, slots, total);
        if units <= cap && cost < best_cost {
            best_cost = cost;
            best = c;
        }
    }
    let even = round_up(max_len.div_ceil(units_of(max_len, best)), g).max(c_min);
    if even < best && lens.iter().all(|&l| units_of(l, even) == units_of(l, best)) {
        best = even;
    }
    best
}

/// Builds the plan of `lens` (tokens per request) into `out` (appended), for `slots` concurrent
/// units, with `capacity` unit rows (`None`: exactly the units used).
///
/// Errors: a `capacity` below the units the plan needs (use [`decode_plan_capacity`]), or a
/// length beyond int32.
pub fn decode_plan_into(
    lens: &[usize],
    page_size: usize,
    slots: usize,
    capacity: Option<usize>,
    out: &mut Vec<i32>,
) -> Result<PlanInfo> {
    if let Some(&l) = lens.iter().find(|&&l| i32::try_from(l).is_err()) {
        return Err(CoreError::invalid(format!(
            "sequence length {l} exceeds int32 range"
        )));
    }
    let chunk = plan_chunk(lens, page_size, slots);
    emit(lens, |_| chunk, capacity, out)
}

/// Builds a plan that cuts every request into `units_per_request` units of equal length
/// (rounded up to `lcm(page_size, 16)`; a short request gets fewer), regardless of the GPU: what
/// `paged_decode(num_splits=...)` runs, e.g. to test the merge of partials. `chunk` in the
/// returned info is that of the longest request.
pub fn decode_plan_fixed_into(
    lens: &[usize],
    page_size: usize,
    units_per_request: usize,
    capacity: Option<usize>,
    out: &mut Vec<i32>,
) -> Result<PlanInfo> {
    if !(1..=MAX_UNITS_PER_REQUEST).contains(&units_per_request) {
        return Err(CoreError::invalid(format!(
            "units per request must be in [1, {MAX_UNITS_PER_REQUEST}], got {units_per_request}"
        )));
    }
    if let Some(&l) = lens.iter().find(|&&l| i32::try_from(l).is_err()) {
        return Err(CoreError::invalid(format!(
            "sequence length {l} exceeds int32 range"
        )));
    }
    let g = page_size.max(1) / gcd(page_size.max(1), 16) * 16;
    emit(
        lens,
        |len| round_up(len.div_ceil(units_per_request).max(1), g),
        capacity,
        out,
    )
}

/// Writes the rows of `lens` cut into chunks of `chunk_of(len)` tokens (see the module doc).
fn emit(
    lens: &[usize],
    chunk_of: impl Fn(usize) -> usize,
    capacity: Option<usize>,
    out: &mut Vec<i32>,
) -> Result<PlanInfo> {
    let units: usize = lens.iter().map(|&l| units_of(l, chunk_of(l))).sum();
    let chunk = lens.iter().map(|&l| chunk_of(l)).max().unwrap_or(0);
    let cap = capacity.unwrap_or(units);
    if cap < units {
        return Err(CoreError::invalid(format!(
            "decode plan capacity {cap} is below the {units} work units this batch needs \
             (decode_plan_capacity gives a bound)"
        )));
    }
    if i32::try_from(cap).is_err() {
        return Err(CoreError::invalid(
            "decode plan capacity exceeds int32 range",
        ));
    }
    let start = out.len();
    out.reserve(decode_plan_len(lens.len(), cap));
    for (b, &len) in lens.iter().enumerate() {
        let c = chunk_of(len);
        let n = units_of(len, c);
        for k in 0..n {
            let s = k * c;
            let e = ((k + 1) * c).min(len);
            out.extend_from_slice(&[b as i32, s as i32, e.max(s) as i32, n as i32]);
        }
    }
    for _ in units..cap {
        out.extend_from_slice(&[-1, 0, 0, 0]);
    }
    let mut first = 0usize;
    for &len in lens {
        out.push(first as i32);
        first += units_of(len, chunk_of(len));
    }
    debug_assert_eq!(out.len() - start, decode_plan_len(lens.len(), cap));
    Ok(PlanInfo {
        units,
        capacity: cap,
        chunk,
    })
}

/// [`decode_plan_fixed_into`] into a new vector.
pub fn decode_plan_fixed(
    lens: &[usize],
    page_size: usize,
    units_per_request: usize,
    capacity: Option<usize>,
) -> Result<(Vec<i32>, PlanInfo)> {
    let mut v = Vec::new();
    let info = decode_plan_fixed_into(lens, page_size, units_per_request, capacity, &mut v)?;
    Ok((v, info))
}

/// [`decode_plan_into`] into a new vector.
pub fn decode_plan(
    lens: &[usize],
    page_size: usize,
    slots: usize,
    capacity: Option<usize>,
) -> Result<(Vec<i32>, PlanInfo)> {
    let mut v = Vec::new();
    let info = decode_plan_into(lens, page_size, slots, capacity, &mut v)?;
    Ok((v, info))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Checks every invariant of a plan of `lens` against a direct reading of the array.
    fn check(lens: &[usize], page_size: usize, slots: usize, capacity: Option<usize>) -> PlanInfo {
        let (v, info) = decode_plan(lens, page_size, slots, capacity).unwrap();
        check_rows(lens, page_size, capacity, &v, info);
        info
    }

    fn check_rows(
        lens: &[usize],
        page_size: usize,
        capacity: Option<usize>,
        v: &[i32],
        info: PlanInfo,
    ) {
        let n = lens.len();
        assert_eq!(v.len(), decode_plan_len(n, info.capacity));
        assert!(info.capacity >= info.units);
        if let Some(c) = capacity {
            assert_eq!(info.capacity, c);
        }
        let (units, first) = v.split_at(info.capacity * PLAN_COLS);
        let rows: Vec<&[i32]> = units.chunks(PLAN_COLS).collect();
        // Used rows first, then empty ones.
        for (u, r) in rows.iter().enumerate() {
            if u < info.units {
                assert!(r[0] >= 0 && (r[0] as usize) < n, "row {u} request {}", r[0]);
            } else {
                assert_eq!(*r, [-1, 0, 0, 0], "row {u} should be empty");
            }
        }
        let g = page_size / gcd(page_size, 16) * 16;
        assert_eq!(
            info.chunk % g,
            0,
            "chunk {} not a multiple of {g}",
            info.chunk
        );
        for (b, &len) in lens.iter().enumerate() {
            let f = first[b] as usize;
            let cnt = rows[f][3] as usize;
            assert!((1..=MAX_UNITS_PER_REQUEST).contains(&cnt));
            // Consecutive rows of request b cover [0, len) exactly once, in order, page-aligned.
            let mut pos = 0usize;
            for r in &rows[f..f + cnt] {
                assert_eq!(r[0] as usize, b);
                assert_eq!(r[3] as usize, cnt);
                assert_eq!(r[1] as usize, pos, "gap or overlap in request {b}");
                assert_eq!(r[1] as usize % page_size, 0, "unit start not page-aligned");
                assert!(r[2] >= r[1]);
                assert!((r[2] - r[1]) as usize <= info.chunk);
                pos = r[2] as usize;
            }
            assert_eq!(pos, len, "request {b} not covered to its end");
            // No other row names request b.
            let named = rows[..info.units]
                .iter()
                .filter(|r| r[0] as usize == b)
                .count();
            assert_eq!(named, cnt);
        }
    }

    #[test]
    fn fixed_plan_cuts_each_request_evenly() {
        let lens = [0, 1, 100, 4096, 5000];
        let (v, info) = decode_plan_fixed(&lens, 16, 7, None).unwrap();
        check_rows(&lens, 16, None, &v, info);
        let first = &v[info.capacity * PLAN_COLS..];
        assert_eq!(
            v[first[3] as usize * PLAN_COLS + 3],
            7,
            "4096 tokens in 7 units"
        );
        assert_eq!(v[first[1] as usize * PLAN_COLS + 3], 1, "1 token in 1 unit");
        assert!(decode_plan_fixed(&lens, 16, 0, None).is_err());
        assert!(decode_plan_fixed(&lens, 16, 257, None).is_err());
    }

    #[test]
    fn ladder_has_a_few_dozen_rungs() {
        // From the least chunk to int32 lengths: steps of about 1/8, page-granule multiples.
        let rungs: Vec<usize> = ladder(128, 1 << 31, 16).take(1000).collect();
        assert_eq!(rungs[0], 128);
        assert!((100..=160).contains(&rungs.len()), "{} rungs", rungs.len());
        for w in rungs.windows(2) {
            assert!(w[1] % 16 == 0 && w[1] > w[0], "{w:?}");
            assert!(w[1] >= w[0] + w[0] / 8, "{w:?} steps too small");
            assert!(w[1] <= w[0] + w[0] / 8 + 16, "{w:?} steps too large");
        }
        assert!(ladder(128, 128, 16).next().is_none());
        // Coarse granules: at least one granule per step.
        assert_eq!(ladder(64, 200, 64).collect::<Vec<_>>(), vec![64, 128, 192]);
    }

    #[test]
    fn uniform_batch_fills_one_wave() {
        // 4 requests of 32768 tokens, 132 slots: about 33 units each, all at once.
        let info = check(&[32768; 4], 16, 132, None);
        assert!(info.units <= 132, "{info:?}");
        assert!(info.units >= 100, "{info:?}");
        // A batch of one unit per slot already: not cut.
        let info = check(&[4096; 16], 16, 16, None);
        assert_eq!(info.units, 16);
    }

    #[test]
    fn uniform_requests_are_cut_into_equal_units() {
        // One 32768-token request on 16 slots: 16 units of 2048 (the ladder's chunk alone gives
        // 15 of 2176 and one of 128, so the slowest unit reads 6% more than it needs to).
        let (v, info) = decode_plan(&[32768], 16, 16, None).unwrap();
        assert_eq!((info.units, info.chunk), (16, 2048), "{info:?}");
        for r in v[..info.units * PLAN_COLS].chunks(PLAN_COLS) {
            assert_eq!(r[2] - r[1], 2048, "{r:?}");
        }
        // 16 requests of 32768 on 32 slots: two equal halves each (not 16592 + 16176).
        let info = check(&[32768; 16], 16, 32, None);
        assert_eq!((info.units, info.chunk), (32, 16384), "{info:?}");
    }

    #[test]
    fn long_request_among_short_ones_is_cut() {
        // 31 short requests and one of 50k tokens on 16 slots: the long one must not run alone.
        let mut lens = vec![300usize; 31];
        lens.push(50_000);
        let info = check(&lens, 16, 16, None);
        assert!(info.chunk <= 50_000 / 4, "{info:?}");
        assert!(info.units <= decode_plan_capacity(32, 16));
    }

    #[test]
    fn ragged_batch_is_cut_by_length() {
        let lens = [256, 512, 1024, 2048, 4096, 8192, 16384, 32768];
        let (v, info) = decode_plan(&lens, 16, 132, None).unwrap();
        let first = &v[info.capacity * PLAN_COLS..];
        let cnt = |b: usize| v[first[b] as usize * PLAN_COLS + 3];
        assert_eq!(cnt(0), 1);
        // Units in proportion to length (16x the tokens: 16x the units, up to rounding).
        assert!(
            cnt(7) >= 8 * cnt(3),
            "long request not cut finer: {} vs {}",
            cnt(7),
            cnt(3)
        );
        check(&lens, 16, 132, None);
    }

    #[test]
    fn batch_just_over_the_slots_is_cut_in_two() {
        // 140 equal requests on 132 slots: uncut, 8 of them run in a second wave of their own
        // (about 2 L); halves make 280 units over the slots (about 1.6 L). Thirds (420 units)
        // would be cheaper still by the cost model, but exceed the bound of
        // batch + MAX_WAVES * slots = 404 units, so halves it is.
        let lens = [32768usize; 140];
        let info = check(&lens, 16, 132, None);
        assert_eq!(info.units, 280, "{info:?}");
        assert!((16384..32768).contains(&info.chunk), "{info:?}");
        assert_eq!(decode_plan_capacity(140, 132), 140 + MAX_WAVES * 132);
    }

    #[test]
    fn batch_within_the_slots_is_not_cut_past_them() {
        // 10 requests of 1024 tokens on 16 slots run in one wave uncut (1024, plus 10 units'
        // overhead of 128 / 16 each). Quarters would shorten the longest unit to 256 but make 40
        // units: 2.5 waves (the even share, 640) plus a tail of 256 plus 40 units' overhead, 1216.
        let info = check(&[1024; 10], 16, 16, None);
        assert_eq!(info.units, 10, "{info:?}");
        assert_eq!(info.chunk, 1024, "{info:?}");
    }

    #[test]
    fn a_cut_that_buys_nothing_is_not_made() {
        // One request of 192 tokens on 2 slots: uncut 192 + 128 / 2 = 256; in two units of 128
        // plus the merge: 128 + 320 + 2 * 64 = 576.
        let info = check(&[192], 16, 2, None);
        assert_eq!((info.units, info.chunk), (1, 192), "{info:?}");
        // Two such requests on 4 slots: the same.
        let info = check(&[192, 192], 16, 4, None);
        assert_eq!((info.units, info.chunk), (2, 192), "{info:?}");
        // One request of 256 tokens on 16 slots: uncut 256 + 8 = 264; halves 128 + 320 + 16 = 464.
        let info = check(&[256], 16, 16, None);
        assert_eq!((info.units, info.chunk), (1, 256), "{info:?}");
        // 512 tokens: quarters, 128 + 320 + 32 = 480, beat the whole, 512 + 8 = 520.
        let info = check(&[512], 16, 16, None);
        assert_eq!((info.units, info.chunk), (4, 128), "{info:?}");
        // A tie keeps the request whole: 496 tokens on 8 slots, uncut 496 + 16 = 512, quarters
        // 128 + 320 + 4 * 16 = 512.
        let info = check(&[496], 16, 8, None);
        assert_eq!((info.units, info.chunk), (1, 496), "{info:?}");
        // Four of them: uncut 512 + 4 * 8 = 544; quarters 128 + 320 + 16 * 8 = 576.
        let info = check(&[512; 4], 16, 16, None);
        assert_eq!((info.units, info.chunk), (4, 512), "{info:?}");
    }

    #[test]
    fn big_batch_one_unit_each() {
        // Lengths within 10% of each other, more requests than slots: cutting buys nothing.
        let lens: Vec<usize> = (0..256).map(|i| 500 + i / 5).collect();
        let info = check(&lens, 1, 132, None);
        assert_eq!(info.units, 256);
    }

    #[test]
    fn empty_requests_and_batch() {
        let info = check(&[0, 0, 5], 16, 132, None);
        assert_eq!(info.units, 3);
        let info = check(&[], 16, 132, Some(decode_plan_capacity(0, 132)));
        assert_eq!(info.units, 0);
    }

    #[test]
    fn capacity_too_small_is_an_error() {
        let err = decode_plan(&[4096; 4], 16, 132, Some(2)).unwrap_err();
        assert!(err.to_string().contains("capacity"), "{err}");
        assert!(decode_plan(&[1usize << 31], 16, 132, None).is_err());
    }

    #[test]
    fn metadata_buf_carries_the_plan() {
        let pages: Vec<Vec<i32>> = vec![(0..64).collect(), (64..66).collect()];
        let mut m = super::super::decode_metadata(&pages, Some(&[1024, 20]), 16).unwrap();
        let before = m.clone();
        assert!(m.with_decode_plan(132, Some(0)).is_err());
        assert_eq!(m, before, "a failed plan leaves the metadata unchanged");
        m.with_decode_plan(132, Some(decode_plan_capacity(2, 132)))
            .unwrap();
        let f = m.fields.iter().find(|f| f.name == "decode_plan").unwrap();
        assert_eq!(f.offset % super::super::FIELD_ALIGN, 0);
        let cap = decode_plan_capacity(2, 132);
        assert_eq!(f.numel(), decode_plan_len(2, cap));
        let (direct, _) = decode_plan(&[1024, 20], 16, 132, Some(cap)).unwrap();
        assert_eq!(m.field("decode_plan").unwrap(), &direct[..]);
        assert_eq!(m.scalar("plan_capacity"), Some(cap as i64));
        assert_eq!(
            m.field("seq_lens").unwrap(),
            [1024, 20],
            "earlier fields untouched"
        );
    }

    proptest! {
        // A uniform batch is cut evenly: its chunk is the least one (a multiple of the granule g,
        // at least the floor) that cuts a request into that many units, so the last unit of each
        // request is short by less than g per unit before it.
        #[test]
        fn uniform_batch_is_cut_evenly(
            len in 1usize..70_000,
            n in 1usize..40,
            ps in prop::sample::select(vec![1usize, 16, 64]),
            slots in 1usize..300,
        ) {
            let lens = vec![len; n];
            let info = check(&lens, ps, slots, None);
            let g = ps / gcd(ps, 16) * 16;
            let whole = round_up(len, g);
            let floor = round_up(MIN_CHUNK_TOKENS.max(len.div_ceil(MAX_UNITS_PER_REQUEST)), g).min(whole);
            let c = info.chunk;
            prop_assert!(c == whole || c - g < floor || units_of(len, c - g) > units_of(len, c),
                "chunk {} for {} x {} (g {}, floor {}): {} tokens less cuts as many units",
                c, n, len, g, floor, g);
        }

        #[test]
        fn plan_invariants(
            lens in prop::collection::vec(0usize..70_000, 0..80),
            ps in prop::sample::select(vec![1usize, 16, 64]),
            slots in 1usize..300,
            pad in any::<bool>(),
        ) {
            let cap = pad.then(|| decode_plan_capacity(lens.len(), slots));
            let info = check(&lens, ps, slots, cap);
            let fixed = 1 + slots % MAX_UNITS_PER_REQUEST;
            let (v, fi) = decode_plan_fixed(&lens, ps, fixed, None).unwrap();
            check_rows(&lens, ps, None, &v, fi);
            // Fits the graph capacity bound whatever the lengths.
            prop_assert!(info.units <= decode_plan_capacity(lens.len(), slots));
            // The search: the chosen chunk costs no more than not cutting at all, or than the
            // even share of one slot.
            if !lens.is_empty() {
                let total: usize = lens.iter().sum();
                let g = ps / gcd(ps, 16) * 16;
                let chosen = plan_cost(&lens, info.chunk, slots, total).0;
                let whole = round_up(lens.iter().copied().max().unwrap().max(1), g);
                prop_assert!(chosen <= plan_cost(&lens, whole, slots, total).0);
                let share = round_up(total.div_ceil(slots).max(1), g).max(info.chunk.min(MIN_CHUNK_TOKENS));
                let (sc, su) = plan_cost(&lens, share, slots, total);
                let floor = round_up(MIN_CHUNK_TOKENS.max(whole.div_ceil(MAX_UNITS_PER_REQUEST)), g);
                if share >= floor && su <= decode_plan_capacity(lens.len(), slots) {
                    // (the ladder may miss `share` itself by one step)
                    prop_assert!(chosen <= sc + sc / 8 + g + UNIT_OVERHEAD_TOKENS,
                        "chunk {} costs {} > share {} costing {}", info.chunk, chosen, share, sc);
                }
            }
        }
    }
}
