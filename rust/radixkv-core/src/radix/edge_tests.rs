//! Edge cases no other test reached (found by mutation testing, see .ci/mutants.sh): keys longer
//! than `common_prefix`'s 64-token block, and their matches.

use super::tree::common_prefix;
use super::*;

#[test]
fn common_prefix_across_blocks() {
    let a: Vec<i32> = (0..300).collect();
    for diff in [0, 1, 63, 64, 65, 127, 128, 200, 299] {
        let mut b = a.clone();
        b[diff] = -1;
        assert_eq!(common_prefix(&a, &b), diff, "first difference at {diff}");
        assert_eq!(common_prefix(&b[..diff], &a), diff);
    }
    assert_eq!(common_prefix(&a, &a), 300);
    assert_eq!(common_prefix(&a[..150], &a), 150);
    assert_eq!(common_prefix(&[], &a), 0);
}

#[test]
fn long_keys_match_and_split_at_the_first_difference() {
    for page in [1usize, 16] {
        let mut t = RadixTree::new(std::num::NonZeroUsize::new(page).unwrap());
        let key: Vec<i32> = (0..320).map(|i| i % 7).collect();
        let slots: Vec<Slot> = (0..320).collect();
        t.insert(b"", &key, &slots).unwrap();
        for diff in [64usize, 100, 130, 257] {
            let mut q = key.clone();
            q[diff] = 99;
            let want = diff - diff % page;
            assert_eq!(
                t.peek_prefix(b"", &q).unwrap(),
                want,
                "page {page} diff {diff}"
            );
            let m = t.match_prefix(b"", &q).unwrap();
            assert_eq!((m.length, &m.slots[..]), (want, &slots[..want]));
            assert_eq!(t.node_info(m.node).unwrap().depth, want);
        }
        t.check().unwrap();
    }
}
