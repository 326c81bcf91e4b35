//! INDIRECT_COPY 0xe7 (`local_gather`) cases every route must pass with the same exact
//! results: indices read column-major per core, runs clipped at the source row's end,
//! each core on its own index block, strided destinations, invalid copies failing
//! closed, a destination over the source rows or the index block (every input is read
//! before the first write: the reference's and the POOL kernel's result; the DGE route
//! refuses the first by design, see `crate::dge_route`); and the scaffolding they share
//! with the routes' own tests (source rows with recognisable elements, a core's index
//! block, the instruction over them).

use dma::{Dtype, Fabric};

use super::{get, put, sbuf, sbuf_at, Route};
use crate::core_state::CoreState;
use crate::isa::{Indirect, Rule, S4d4Ic, Tensor4d};

/// SBUF byte offset of every partition's source row.
pub const DATA: u32 = 0x100;
/// SBUF byte offset of every partition's destination.
pub const DST: u32 = 0x2000;

/// Source rows (u16) in partitions `0..channels`: element `e` of partition `q` is
/// `q * 100 + e`, `len` elements; destinations prefilled with 0xffff.
pub fn rows(f: &mut Fabric, channels: u32, len: u16, outputs: usize) {
    for q in 0..channels {
        let row: Vec<u16> = (0..len).map(|e| q as u16 * 100 + e).collect();
        put(f, sbuf_at(q, DATA), &row);
        put(f, sbuf_at(q, DST), &vec![0xffffu16; outputs]);
    }
}

/// Index `j` of core `c` written column-major into the block at partition `base`, byte 0.
pub fn indices(f: &mut Fabric, base: u32, c: u32, ids: &[u16]) {
    for (j, id) in (0u32..).zip(ids) {
        put(f, sbuf_at(base + 16 * c + j % 16, 2 * (j / 16)), &[*id]);
    }
}

/// A u16 INDIRECT_COPY of `num_elem` outputs per partition, runs of `per`, source rows of
/// `size` elements at [`DATA`], indices at partition `index_partition`, a contiguous
/// destination at [`DST`].
pub fn copy(index_partition: u32, num_elem: u16, per: u8, size: u32, channels: u8) -> S4d4Ic {
    let src = Indirect::new(sbuf(index_partition, 0), sbuf(0, DATA), num_elem);
    let dst = Tensor4d::contiguous(sbuf(0, DST), num_elem);
    S4d4Ic::gather(src, dst, Dtype::U16, per, size, channels)
}

/// 18 single-element indices: `j = 0..16` in column 0 of the block (partitions 64..80),
/// `j = 16, 17` in column 1; index 64 is past the 64-element row.
pub fn one_element_per_index_column_major(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 64, 18);
    let ids: Vec<u16> = (0..16).map(|r| 2 * r).chain([63, 64]).collect();
    indices(&mut f, 64, 0, &ids);
    let out = r.run(&mut f, &mut CoreState::new(), copy(64, 18, 1, 64, 16));
    let mut p3: Vec<u16> = (0..16).map(|j| 300 + 2 * j).collect();
    p3.extend([363, 0]);
    assert_eq!(get::<u16>(&f, sbuf_at(3, DST), 18), p3);
    assert_eq!(
        get::<u16>(&f, sbuf_at(15, DST), 4),
        [1500, 1502, 1504, 1506]
    );
    assert_eq!(get::<u16>(&f, sbuf_at(15, DST + 32), 2), [1563, 0]);
    assert_eq!(out.bytes_written, 16 * 18 * 2);
    assert!(out.skipped.is_empty());
}

/// Runs of 4 from 0, 8 (two inside the 10-element row), 10 (at the end) and 12 (past it).
pub fn runs_past_the_source_end_leave_zeros(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 10, 16);
    indices(&mut f, 0, 0, &[0, 8, 10, 12]);
    r.run(&mut f, &mut CoreState::new(), copy(0, 16, 4, 10, 16));
    for q in [0u16, 7, 15] {
        let b = 100 * q;
        let mut expect = vec![b, b + 1, b + 2, b + 3, b + 8, b + 9];
        expect.resize(16, 0);
        assert_eq!(
            get::<u16>(&f, sbuf_at(q.into(), DST), 16),
            expect,
            "partition {q}"
        );
    }
}

pub fn each_core_reads_its_own_index_block(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 32, 16, 4);
    indices(&mut f, 96, 0, &[1, 5]);
    indices(&mut f, 96, 1, &[7, 15]);
    let out = r.run(&mut f, &mut CoreState::new(), copy(96, 4, 2, 16, 32));
    assert_eq!(get::<u16>(&f, sbuf_at(2, DST), 4), [201, 202, 205, 206]);
    assert_eq!(get::<u16>(&f, sbuf_at(17, DST), 4), [1707, 1708, 1715, 0]);
    assert_eq!(out.bytes_written, 32 * 4 * 2);
}

/// Destination elements 0, 2, 4, 6, in element order.
pub fn a_strided_destination(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 8, 8);
    indices(&mut f, 32, 0, &[6, 2]);
    let src = Indirect::new(sbuf(32, 0), sbuf(0, DATA), 4);
    let dst = Tensor4d::new(sbuf(0, DST), [2, 0, 0, 0], [4, 1, 1, 1]);
    let ic = S4d4Ic::gather(src, dst, Dtype::U16, 2, 8, 16);
    r.run(&mut f, &mut CoreState::new(), ic);
    assert_eq!(
        get::<u16>(&f, sbuf_at(1, DST), 8),
        [106, 0xffff, 107, 0xffff, 102, 0xffff, 103, 0xffff]
    );
}

/// Every other element, backwards from element 6: outputs land at 6, 4, 2, 0.
pub fn a_backward_strided_destination(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 8, 8);
    indices(&mut f, 0, 0, &[6, 1]);
    let src = Indirect::new(sbuf(0, 0), sbuf(0, DATA), 4);
    let dst = Tensor4d::new(sbuf(0, DST + 12), [-2, 0, 0, 0], [4, 1, 1, 1]);
    let ic = S4d4Ic::gather(src, dst, Dtype::U16, 2, 8, 16);
    r.run(&mut f, &mut CoreState::new(), ic);
    // outputs [906, 907, 901, 902]
    let got = get::<u16>(&f, sbuf_at(9, DST), 8);
    assert_eq!(got, [902, 0xffff, 901, 0xffff, 907, 0xffff, 906, 0xffff]);
}

/// A run width outside {1, ..., 32} and a partial core.
pub fn invalid_copies_fail_closed(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 8, 8);
    let mut s = CoreState::new();
    let e = r.fails_closed(&mut f, &mut s, copy(0, 6, 3, 8, 16));
    assert_eq!(e.rule(), Some(Rule::NumElemPerIdx));
    let e = r.fails_closed(&mut f, &mut s, copy(0, 8, 2, 8, 8));
    assert_eq!(e.rule(), Some(Rule::IndirectCopyCoreChannels));
}

/// The copy of [`overlap_expected`]: runs of 4 from elements 4 and 0 of each 16-element
/// row, written over elements 2..10 of the same row (the sources of both runs).
pub fn overlapping_copy() -> S4d4Ic {
    let src = Indirect::new(sbuf(64, 0), sbuf(0, DATA), 8);
    let dst = Tensor4d::contiguous(sbuf(0, DATA + 4), 8);
    S4d4Ic::gather(src, dst, Dtype::U16, 4, 16, 16)
}

/// Partition `q`'s row after [`overlapping_copy`] on [`rows`] of 16 with the indices
/// `[4, 0]` at partition 64: the second run reads elements 0..4 as they were before the
/// first run overwrote elements 2..6 (`b+2, b+3`, not `b+4, b+5`).
pub fn overlap_expected(q: u16) -> Vec<u16> {
    let b = 100 * q;
    let mut row: Vec<u16> = (0..16).map(|e| b + e).collect();
    row[2..10].copy_from_slice(&[b + 4, b + 5, b + 6, b + 7, b, b + 1, b + 2, b + 3]);
    row
}

/// Every input is read before the first write: a destination over the source rows.
pub fn a_destination_over_the_source_reads_the_source_first(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 16, 8);
    indices(&mut f, 64, 0, &[4, 0]);
    let out = r.run(&mut f, &mut CoreState::new(), overlapping_copy());
    for q in [0u16, 9, 15] {
        let got = get::<u16>(&f, sbuf_at(q.into(), DATA), 16);
        assert_eq!(got, overlap_expected(q), "partition {q}");
    }
    assert_eq!(out.bytes_written, 16 * 8 * 2);
}

/// The destination covers the index block (partitions 0..16, bytes 0..16): the indices
/// `[4, 0]` at partitions 0 and 1 are read before they are overwritten.
pub fn a_destination_over_the_indices_reads_them_first(r: Route) {
    let mut f = r.fabric();
    rows(&mut f, 16, 16, 8);
    indices(&mut f, 0, 0, &[4, 0]);
    let src = Indirect::new(sbuf(0, 0), sbuf(0, DATA), 8);
    let dst = Tensor4d::contiguous(sbuf(0, 0), 8);
    let ic = S4d4Ic::gather(src, dst, Dtype::U16, 4, 16, 16);
    r.run(&mut f, &mut CoreState::new(), ic);
    for q in [0u16, 1, 15] {
        let b = 100 * q;
        let expect = [b + 4, b + 5, b + 6, b + 7, b, b + 1, b + 2, b + 3];
        assert_eq!(
            get::<u16>(&f, sbuf_at(q.into(), 0), 8),
            expect,
            "partition {q}"
        );
    }
}

/// Every case above, as `#[test]`s on `$route`; `$route, except_reads_first` leaves out
/// [`a_destination_over_the_source_reads_the_source_first`] (for the DGE route, which
/// refuses that input by design and tests the refusal itself).
macro_rules! indirect_copy_cases {
    ($route:expr) => {
        $crate::test_support::indirect_copy::indirect_copy_cases!($route, except_reads_first);
        $crate::test_support::route_cases!($route, indirect_copy: [
            a_destination_over_the_source_reads_the_source_first,
        ]);
    };
    ($route:expr, except_reads_first) => {
        $crate::test_support::route_cases!($route, indirect_copy: [
            one_element_per_index_column_major,
            runs_past_the_source_end_leave_zeros,
            each_core_reads_its_own_index_block,
            a_strided_destination,
            a_backward_strided_destination,
            invalid_copies_fail_closed,
            a_destination_over_the_indices_reads_them_first,
        ]);
    };
}
pub(crate) use indirect_copy_cases;
