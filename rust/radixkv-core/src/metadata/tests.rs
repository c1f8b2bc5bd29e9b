use super::*;
use crate::CoreError;

fn f<'a>(m: &'a MetadataBuf, name: &str) -> &'a [i32] {
    m.field(name)
        .unwrap_or_else(|| panic!("missing field {name}"))
}

#[test]
fn extend_golden_case() {
    let prefix: [&[i32]; 3] = [&[108, 109, 110, 111], &[], &[80, 81, 82, 83, 84]];
    let new: [&[i32]; 3] = [&[42, 43], &[201, 202, 203], &[99]];
    let m = extend_metadata(&prefix, &new).unwrap();
    assert_eq!(f(&m, "extend_seq_lens"), [2, 3, 1]);
    assert_eq!(f(&m, "seq_lens"), [6, 3, 6]);
    assert_eq!(f(&m, "extend_prefix_lens"), [4, 0, 5]);
    assert_eq!(f(&m, "qo_indptr"), [0, 2, 5, 6]);
    assert_eq!(f(&m, "kv_indptr"), [0, 6, 9, 15]);
    assert_eq!(f(&m, "extend_start_loc"), [0, 2, 5]);
    assert_eq!(
        f(&m, "kv_indices"),
        [108, 109, 110, 111, 42, 43, 201, 202, 203, 80, 81, 82, 83, 84, 99]
    );
    assert_eq!(f(&m, "out_cache_loc"), [42, 43, 201, 202, 203, 99]);
    assert_eq!(f(&m, "positions"), [4, 5, 0, 1, 2, 5]);
    assert_eq!(m.scalar("max_seq_len"), Some(6));
    assert_eq!(m.scalar("max_extend_len"), Some(3));
    assert_eq!(m.scalar("num_tokens"), Some(6));
    for fld in &m.fields {
        assert_eq!(fld.offset % FIELD_ALIGN, 0, "{} misaligned", fld.name);
    }
}

/// The extend plan travels in the batch's buffer: field `extend_plan` `[n, 2]` equal to
/// `extend_plan` of the batch's lengths, aligned like every field, and `plan_tile_rows`.
#[test]
fn extend_plan_appended_to_the_batch() {
    // Request 0: 2 new tokens after 600 cached (long: its tiles in a run); request 1: 3 fresh.
    let cached: Vec<i32> = (1000..1600).collect();
    let prefix: [&[i32]; 2] = [&cached, &[]];
    let new: [&[i32]; 2] = [&[42, 43], &[201, 202, 203]];
    let mut m = extend_metadata(&prefix, &new).unwrap();
    let before = m.clone();
    m.with_extend_plan(4, 4).unwrap();
    let want = extend_plan(&[2, 3], &[602, 3], 4, 4).unwrap();
    assert_eq!(want, [0, 0, 0, 1, 1, 0, 1, 1, 1, 2]);
    assert_eq!(f(&m, "extend_plan"), want);
    let fld = m.fields.iter().find(|x| x.name == "extend_plan").unwrap();
    assert_eq!(fld.shape, [5, EXTEND_PLAN_COLS]);
    assert_eq!(fld.offset % FIELD_ALIGN, 0);
    assert_eq!(m.scalar("plan_tile_rows"), Some(4));
    // The fields before it are untouched.
    for x in &before.fields {
        assert_eq!(f(&m, x.name), f(&before, x.name), "{}", x.name);
    }
    // A uniform batch the kernels order themselves: an empty [0, 2] field, still present.
    let mut m = extend_metadata(&[&[][..], &[]], &[&[1, 2][..], &[3, 4]]).unwrap();
    m.with_extend_plan(4, 128).unwrap();
    assert!(f(&m, "extend_plan").is_empty());
    // Decode metadata has no extend lengths to plan from; a bad tile size is the planner's error.
    let mut d = decode_metadata(&[&[5, 6][..]], None, 1).unwrap();
    let e = d.with_extend_plan(4, 128).unwrap_err();
    assert!(e.to_string().contains("extend_seq_lens"), "{e}");
    let e = extend_metadata(&prefix, &new)
        .unwrap()
        .with_extend_plan(4, 0)
        .unwrap_err();
    assert!(e.to_string().contains("tile_rows"), "{e}");
}

#[test]
fn extend_empty_batch_and_errors() {
    let none: [&[i32]; 0] = [];
    let m = extend_metadata(&none, &none).unwrap();
    assert_eq!(f(&m, "qo_indptr"), [0]);
    assert!(f(&m, "kv_indices").is_empty());

    let one: [&[i32]; 1] = [&[1]];
    assert!(matches!(
        extend_metadata(&one, &none),
        Err(CoreError::InvalidArgument(_))
    ));
    let neg: [&[i32]; 1] = [&[3, -1]];
    let e = extend_metadata(&one, &neg).unwrap_err();
    assert!(e.to_string().contains("new_slots[0][1]"), "{e}");
    // Two negative ids in one list (their sign bits must not cancel), in the prefix part.
    let two: [&[i32]; 1] = [&[-2, 4, -1]];
    let e = extend_metadata(&two, &one).unwrap_err();
    assert!(e.to_string().contains("prefix_slots[0][0] = -2"), "{e}");
    // Slot 0 is valid: the negative id after it is the one named.
    let zero_first: [&[i32]; 1] = [&[0, -5]];
    let e = extend_metadata(&one, &zero_first).unwrap_err();
    assert!(e.to_string().contains("new_slots[0][1] = -5"), "{e}");
    // No part with a positive id beside it: an empty prefix, or one of slot 0 only.
    let empty: [&[i32]; 1] = [&[]];
    let zero: [&[i32]; 1] = [&[0]];
    let neg_only: [&[i32]; 1] = [&[-7]];
    for prefix in [empty, zero] {
        let e = extend_metadata(&prefix, &neg_only).unwrap_err();
        assert!(e.to_string().contains("new_slots[0][0] = -7"), "{e}");
    }
}

/// An empty batch (an idle step) gives empty metadata from every builder.
#[test]
fn empty_batches() {
    let none: [&[i32]; 0] = [];
    for page in [1, 4] {
        let lens = (page > 1).then_some(&[][..]);
        let m = decode_metadata(&none, lens, page).unwrap();
        assert_eq!(
            (f(&m, "qo_indptr"), f(&m, "kv_indptr")),
            (&[0][..], &[0][..])
        );
        assert!(f(&m, "kv_indices").is_empty() && f(&m, "seq_lens").is_empty());
        let m = paged_extend_metadata(&none, &[], &[], page).unwrap();
        assert_eq!(
            (f(&m, "qo_indptr"), f(&m, "kv_indptr")),
            (&[0][..], &[0][..])
        );
        assert!(f(&m, "out_cache_loc").is_empty() && f(&m, "kv_indices").is_empty());
        // The block-table form of an empty batch holds no element at all; a decode plan (a
        // CUDA graph's, padded to its capacity) still goes after it.
        let mut m = block_table_metadata(&none, lens, page, None).unwrap();
        assert!(m.data.is_empty() && f(&m, "seq_lens").is_empty());
        let cap = decode_plan_capacity(0, 132);
        m.with_decode_plan(132, Some(cap)).unwrap();
        assert_eq!(f(&m, "decode_plan").len(), decode_plan_len(0, cap));
        assert_eq!(m.scalar("plan_units"), Some(0));
    }
}

#[test]
fn decode_csr_over_slots_and_pages() {
    let slots: [&[i32]; 2] = [&[5, 6, 7], &[9]];
    let m = decode_metadata(&slots, None, 1).unwrap();
    assert_eq!(f(&m, "qo_indptr"), [0, 1, 2]);
    assert_eq!(f(&m, "kv_indptr"), [0, 3, 4]);
    assert_eq!(f(&m, "kv_indices"), [5, 6, 7, 9]);
    assert_eq!(f(&m, "seq_lens"), [3, 1]);
    assert_eq!(f(&m, "kv_last_page_len"), [1, 1]);

    let pages: [&[i32]; 3] = [&[4, 2], &[7], &[1, 3, 8]];
    let m = decode_metadata(&pages, Some(&[5, 4, 9]), 4).unwrap();
    assert_eq!(f(&m, "kv_indptr"), [0, 2, 3, 6]);
    assert_eq!(f(&m, "kv_indices"), [4, 2, 7, 1, 3, 8]);
    assert_eq!(f(&m, "kv_last_page_len"), [1, 4, 1]);
    assert_eq!(m.scalar("max_pages"), Some(3));
}

#[test]
fn decode_rejects_inconsistent_pages() {
    let pages: [&[i32]; 1] = [&[4, 2]];
    for (lens, ps) in [
        (None, 4),
        (Some(&[9][..]), 4),
        (Some(&[4][..]), 4),
        (Some(&[0][..]), 4),
    ] {
        assert!(matches!(
            decode_metadata(&pages, lens, ps),
            Err(CoreError::InvalidArgument(_))
        ));
    }
    assert!(decode_metadata(&pages, Some(&[5, 5]), 4).is_err());
    assert!(decode_metadata(&pages, Some(&[5]), 0).is_err());
    let neg: [&[i32]; 1] = [&[-4]];
    assert!(decode_metadata(&neg, None, 1).is_err());
    // Without kv_lens a page count is no length once pages hold several tokens, even where
    // one page would be consistent with any length.
    let one_page: [&[i32]; 1] = [&[3]];
    for ps in [2, 16] {
        let e = decode_metadata(&one_page, None, ps).unwrap_err();
        assert!(e.to_string().contains("kv_lens is required"), "{e}");
        let e = block_table_metadata(&one_page, None, ps, None).unwrap_err();
        assert!(e.to_string().contains("kv_lens is required"), "{e}");
    }
}

#[test]
fn block_table_form() {
    let pages: [&[i32]; 3] = [&[4, 2], &[7], &[1, 3, 8]];
    let m = block_table_metadata(&pages, Some(&[5, 4, 9]), 4, None).unwrap();
    let bt = m.fields.iter().find(|x| x.name == "block_tables").unwrap();
    assert_eq!(bt.shape, [3, 3]);
    assert_eq!(f(&m, "block_tables"), [4, 2, 0, 7, 0, 0, 1, 3, 8]);
    assert_eq!(f(&m, "seq_lens"), [5, 4, 9]);
    assert_eq!(f(&m, "kv_last_page_len"), [1, 4, 1]);
    let wide = block_table_metadata(&pages, Some(&[5, 4, 9]), 4, Some(5)).unwrap();
    assert_eq!(f(&wide, "block_tables").len(), 15);
    assert!(block_table_metadata(&pages, Some(&[5, 4, 9]), 4, Some(2)).is_err());
}

#[test]
fn paged_extend_with_one_slot_pages_equals_slot_extend() {
    let prefix: [&[i32]; 3] = [&[108, 109, 110, 111], &[], &[80, 81, 82, 83, 84]];
    let new: [&[i32]; 3] = [&[42, 43], &[201, 202, 203], &[99]];
    let slots: Vec<Vec<i32>> = prefix
        .iter()
        .zip(&new)
        .map(|(p, n)| [*p, *n].concat())
        .collect();
    let paged = paged_extend_metadata(&slots, &[6, 3, 6], &[2, 3, 1], 1).unwrap();
    assert_eq!(paged, extend_metadata(&prefix, &new).unwrap());
}

#[test]
fn paged_extend_over_pages() {
    // Request 0: 6 tokens in pages [7, 2] (page 4), the last 3 new (positions 3, 4, 5).
    // Request 1: 4 tokens in page [5], all new.
    let pages: [&[i32]; 2] = [&[7, 2], &[5]];
    let m = paged_extend_metadata(&pages, &[6, 4], &[3, 4], 4).unwrap();
    assert_eq!(f(&m, "qo_indptr"), [0, 3, 7]);
    assert_eq!(f(&m, "kv_indptr"), [0, 2, 3]);
    assert_eq!(f(&m, "kv_indices"), [7, 2, 5]);
    assert_eq!(f(&m, "seq_lens"), [6, 4]);
    assert_eq!(f(&m, "extend_prefix_lens"), [3, 0]);
    assert_eq!(f(&m, "kv_last_page_len"), [2, 4]);
    assert_eq!(f(&m, "out_cache_loc"), [31, 8, 9, 20, 21, 22, 23]);
    assert_eq!(f(&m, "positions"), [3, 4, 5, 0, 1, 2, 3]);
    assert_eq!(m.scalar("max_pages"), Some(2));
    assert!(paged_extend_metadata(&pages, &[6, 4], &[7, 4], 4).is_err());
    assert!(paged_extend_metadata(&pages, &[6, 4], &[-1, 4], 4).is_err());
    assert!(paged_extend_metadata(&pages, &[6, 4], &[1], 4).is_err());
}

#[test]
fn decode_out_cache_loc_is_the_last_slot() {
    let pages: [&[i32]; 2] = [&[4, 2], &[7]];
    let m = decode_metadata(&pages, Some(&[5, 3]), 4).unwrap();
    assert_eq!(f(&m, "out_cache_loc"), [8, 30]);
    let m = block_table_metadata(&pages, Some(&[5, 3]), 4, None).unwrap();
    assert_eq!(f(&m, "out_cache_loc"), [8, 30]);
}

/// Page sizes are accepted up to the largest int32 (one page, page 0) and refused beyond.
#[test]
fn page_size_range() {
    let one: [&[i32]; 1] = [&[0]];
    let top = i32::MAX as usize;
    let m = decode_metadata(&one, Some(&[5]), top).unwrap();
    assert_eq!(f(&m, "out_cache_loc"), [4]);
    let e = decode_metadata(&one, Some(&[5]), top + 1).unwrap_err();
    assert!(
        e.to_string().contains("page_size must be in 1..2^31"),
        "{e}"
    );
}

#[test]
fn slots_beyond_int32_are_rejected() {
    // Page p of size 8 holds slots 8p .. 8p + 7: the last page that fits is 2^28 - 1.
    let fits: [&[i32]; 1] = [&[(1 << 28) - 1]];
    let m = decode_metadata(&fits, Some(&[8]), 8).unwrap();
    assert_eq!(m.field("out_cache_loc").unwrap(), [i32::MAX]);
    let beyond: [&[i32]; 1] = [&[1 << 28]];
    assert!(decode_metadata(&beyond, Some(&[1]), 8).is_err());
    // The error names the offending page, after valid ones at both ends of the range.
    let third: [&[i32]; 1] = [&[0, (1 << 28) - 1, 1 << 28]];
    let e = decode_metadata(&third, Some(&[17]), 8).unwrap_err();
    assert!(e.to_string().contains("page [2] = 268435456"), "{e}");
    let negative: [&[i32]; 1] = [&[3, -1]];
    let e = decode_metadata(&negative, Some(&[9]), 8).unwrap_err();
    assert!(e.to_string().contains("page [1] = -1"), "{e}");
}
