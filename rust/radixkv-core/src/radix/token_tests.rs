//! int64 token ids (`TokenId for i64`): read at their own width by every descent, narrowed
//! only where an insert stores them, and refused by value when they are no key.

use super::token::TokenId;
use super::*;

fn views(c: &RadixCache) -> Vec<(NodeHandle, NodeView)> {
    let mut out = Vec::new();
    let mut stack = vec![NodeHandle::ROOT];
    while let Some(h) = stack.pop() {
        let v = c.node_view(h).unwrap();
        stack.extend(v.children.iter().copied());
        out.push((h, v));
    }
    out
}

fn wide(t: &[i32]) -> Vec<i64> {
    t.iter().map(|&x| i64::from(x)).collect()
}

/// Twin caches, one given int32 ids and one the same ids as int64, through random checkpoints
/// (first and later, boundaries anywhere), inserts, matches, peeks, releases and evictions;
/// pages of 1 and 2, partial pages on and off, `sglang_stamps` on and off, events on. After
/// every step both report the same results and hold the same nodes (handles, keys, slots,
/// stamps, locks), sizes and events. Requests of every length reuse the narrowing buffer with
/// stale ids in its prefix.
#[test]
#[allow(clippy::too_many_lines)] // one random walk, checked after every step
fn int64_ids_equal_int32_ids_at_random() {
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut rnd = move |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n
    };
    let mut compared = 0;
    for stamps in [true, false] {
        for (page, partial) in [(1, false), (2, false), (2, true)] {
            let opts = CacheOptions {
                page_size: std::num::NonZeroUsize::new(page),
                policy: Policy::Lru,
                events: true,
                partial_pages: partial,
                sglang_stamps: stamps,
            };
            let mut a = RadixCache::with_options(None, opts).unwrap();
            let mut b = RadixCache::with_options(None, opts).unwrap();
            // (tokens, checkpointed length, lock held) per request
            let mut reqs: Vec<(Vec<i32>, usize, Option<NodeHandle>)> = Vec::new();
            for step in 0..300 {
                let ctx = format!("stamps {stamps} page {page} partial {partial} step {step}");
                if reqs.len() < 5 || rnd(4) == 0 {
                    let mut toks = match reqs.len() {
                        0 => Vec::new(),
                        n => {
                            let o = &reqs[rnd(n)].0;
                            o[..rnd(o.len() + 1)].to_vec()
                        }
                    };
                    // long enough, now and then, for whole 64-id blocks of the compare
                    let extra = if rnd(3) == 0 {
                        60 + rnd(140)
                    } else {
                        1 + rnd(9)
                    };
                    toks.extend((0..extra).map(|_| rnd(4) as i32));
                    reqs.push((toks, 0, None));
                }
                let r = rnd(reqs.len());
                let (toks, done, held) = reqs[r].clone();
                let wt = wide(&toks);
                match rnd(8) {
                    0 => {
                        let n = rnd(toks.len() + 1);
                        let ra = a.match_end(b"", &toks[..n]).map_err(|e| e.to_string());
                        let rb = b.match_end(b"", &wt[..n]).map_err(|e| e.to_string());
                        assert_eq!(ra, rb, "{ctx}");
                    }
                    1 => {
                        let n = rnd(toks.len() + 1);
                        let ra = a.peek_prefix(b"", &toks[..n]);
                        assert_eq!(ra.unwrap(), b.peek_prefix(b"", &wt[..n]).unwrap(), "{ctx}");
                    }
                    2 => {
                        let n = rnd(toks.len() + 1);
                        let slots: Vec<i32> = (0..n as i32).map(|j| 5000 + j).collect();
                        let ra = a.insert_node_from(b"x", &toks[..n], &slots, 1.0, 0);
                        let rb = b.insert_node_from(b"x", &wt[..n], &slots, 1.0, 0);
                        assert_eq!(ra.unwrap(), rb.unwrap(), "{ctx}");
                    }
                    3 => {
                        if let Some(h) = held {
                            assert_eq!(a.unlock(h).unwrap(), b.unlock(h).unwrap(), "{ctx}");
                        }
                        reqs.swap_remove(r);
                        let want = rnd(12);
                        assert_eq!(a.evict_slots(want), b.evict_slots(want), "{ctx}");
                    }
                    _ => {
                        if done >= toks.len() {
                            continue;
                        }
                        let len = done + 1 + rnd(toks.len() - done);
                        let boundary = match rnd(3) {
                            0 => 0,
                            _ => rnd(len + 1),
                        };
                        let slots: Vec<Slot> =
                            (0..len as Slot).map(|j| 1000 * r as Slot + j).collect();
                        let ra = a.checkpoint(b"", &toks[..len], &slots, 0.0, done, boundary, held);
                        let rb = b.checkpoint(b"", &wt[..len], &slots, 0.0, done, boundary, held);
                        let (ra, rb) = (ra.unwrap(), rb.unwrap());
                        assert_eq!(ra, rb, "{ctx}");
                        reqs[r].1 = len;
                        reqs[r].2 = Some(rb.1);
                        compared += 1;
                    }
                }
                assert_eq!(views(&a), views(&b), "{ctx}");
                assert_eq!(a.take_events(), b.take_events(), "{ctx}");
                assert_eq!(
                    (a.evictable_size(), a.protected_size(), a.total_size()),
                    (b.evictable_size(), b.protected_size(), b.total_size()),
                    "{ctx}"
                );
                b.check().unwrap();
            }
        }
    }
    assert!(compared > 2 * 3 * 60, "{compared} checkpoints compared");
}

/// The 64-bit compare: a difference anywhere (inside and at the edges of 64-id blocks), in the
/// high half only (the low 32 bits equal the key) or in the sign, ends the common prefix there.
#[test]
fn int64_common_prefix_sees_every_bit() {
    let keys: Vec<i32> = (0..300_i32).map(|i| i * 7919 % 1000).collect();
    let same = wide(&keys);
    assert_eq!(<i64 as TokenId>::common_prefix(&keys, &same), 300);
    assert_eq!(<i64 as TokenId>::common_prefix(&keys[..150], &same), 150);
    assert_eq!(<i64 as TokenId>::common_prefix(&keys, &same[..77]), 77);
    for at in [0, 1, 63, 64, 65, 127, 128, 200, 255, 256, 299] {
        for delta in [1_i64, 1 << 32, 1 << 40, i64::MIN] {
            let mut t = same.clone();
            t[at] = t[at].wrapping_add(delta);
            assert_eq!(
                <i64 as TokenId>::common_prefix(&keys, &t),
                at,
                "at {at} + {delta}"
            );
        }
    }
    // two differences in one block whose xors are equal (they would cancel under an xor of
    // the block's xors), and differences against zero keys (no bit in common with the key)
    let mut t = same.clone();
    t[70] += 1 << 32;
    t[90] += 1 << 32;
    assert_eq!(<i64 as TokenId>::common_prefix(&keys, &t), 70);
    let zeros = vec![0_i32; 300];
    let mut t = vec![0_i64; 300];
    t[70] = 5;
    assert_eq!(<i64 as TokenId>::common_prefix(&zeros, &t), 70);
    // no id outside int32's range is a key, however its low half reads
    assert_eq!(<i64 as TokenId>::key(5 + (1 << 32)), None);
    assert_eq!(<i64 as TokenId>::key(-(1 << 31) - 1), None);
    assert_eq!(<i64 as TokenId>::key(i64::from(i32::MAX)), Some(i32::MAX));
}

/// int64 ids that are no key are refused by value (one out of int32's range is named before
/// any negative one, as a narrowing would name it), by every call, changing nothing; an id
/// whose low half equals a key never matches it.
#[test]
fn int64_ids_out_of_range_are_refused_without_change() {
    for page in [1, 2] {
        let mut c = RadixCache::with_options(
            None,
            CacheOptions {
                page_size: std::num::NonZeroUsize::new(page),
                events: true,
                sglang_stamps: true,
                ..CacheOptions::default()
            },
        )
        .unwrap();
        let (_, end) = c
            .insert_node_from(b"", &[1, 2, 3, 4], &[9, 8, 7, 6], 0.0, 0)
            .unwrap();
        c.lock(end).unwrap();
        c.take_events();
        let before = (views(&c), c.tree().clock());
        let big = 3 + (1_i64 << 32);
        let cases: Vec<(Vec<i64>, String)> = vec![
            (
                vec![1, 2, big, 4],
                format!("value {big} does not fit in int32"),
            ),
            (
                vec![1 + (1 << 32), 2],
                format!("value {} does not fit in int32", 1 + (1_i64 << 32)),
            ),
            (vec![1, 2, 3, 4, 5, -1], "negative token id -1".into()),
            (
                vec![-1, 2, -5_000_000_000],
                "value -5000000000 does not fit in int32".into(),
            ),
            (
                vec![1, 2, 3, 4, i64::MAX, 6],
                format!("value {} does not fit in int32", i64::MAX),
            ),
            // two of each, whose high halves (or signs) cancel under an xor
            (
                vec![1, 2, big, big + 1],
                format!("value {big} does not fit in int32"),
            ),
            (vec![1, 2, 3, 4, -1, -2], "negative token id -1".into()),
            // a zero id before the negative one is not named
            (vec![0, 1, -3], "negative token id -3".into()),
        ];
        for (toks, want) in &cases {
            let slots: Vec<Slot> = (0..toks.len() as Slot).map(|j| 100 + j).collect();
            let errs = [
                c.match_end(b"", toks).map(|_| ()),
                c.peek_prefix(b"", toks).map(|_| ()),
                c.insert_node_from(b"", toks, &slots, 0.0, 0).map(|_| ()),
                c.checkpoint(b"", toks, &slots, 0.0, 0, 2, None).map(|_| ()),
                c.checkpoint(b"", toks, &slots, 0.0, 0, 0, Some(end))
                    .map(|_| ()),
            ];
            for e in errs {
                let e = e.expect_err(want).to_string();
                assert!(e.contains(&format!("tokens: {want}")), "{e} (want {want})");
            }
            assert_eq!((views(&c), c.tree().clock()), before, "{toks:?}");
            assert!(c.take_events().is_empty());
        }
        // in range and matching: the same as int32 ids
        assert_eq!(c.peek_prefix(b"", &[1_i64, 2, 3, 4, 5]).unwrap(), 4);
        assert_eq!(c.peek_prefix(b"", &[1_i64, 2, 3]).unwrap(), 3 - 3 % page);
    }
}
