//! DMA_INDIRECT 0xbb cases every route must pass with the same exact results: gathers,
//! scatters, both sides indexed, every compute op, both OOB policies and their reports,
//! the duplicate rule and the order of failures, rows off the fabric, overlapping rows,
//! reshape_kind GATHER_TRANSPOSE into HBM and into SBUF partitions, and the shape
//! register's 4-D walk along each dim (gathers, scatters, both sides, OOB along the dim,
//! walk order, and the run-time refusals).

use dma::{Addr4, ComputeOp, Dtype, Element, Fabric, FabricAddr};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

use super::{get, put, sbuf, sbuf_at, Route};
use crate::core_state::{CoreState, IndexSide, SkippedIndex};
use crate::error::Error;
use crate::isa::{
    BoundCheckReg, BoundRegisters, DmaIndirect1d, DmaIndirectFlags, DmaSide, IndirectDim,
    IndirectMode, ReshapeKind, Rule, ShapeReg,
};

/// HBM table of rows.
pub const TABLE: u64 = 0x1000;
/// SBUF partition 0 byte offsets of the src and dst index tensors and a direct buffer.
pub const SIDX: u32 = 0;
pub const DIDX: u32 = 0x4000;
pub const BUF: u32 = 0x8000;

pub fn flags(mode: IndirectMode, hard: bool, non_unique: bool) -> DmaIndirectFlags {
    DmaIndirectFlags::rows(mode, hard, non_unique)
}

/// An indexed side: rows of `size` bytes from `start`, u32 indices at SBUF p0 byte `idx`.
pub fn indirect(start: FabricAddr, idx: u32, size: u32, bound: BoundCheckReg) -> DmaSide {
    DmaSide {
        start_addr: start,
        idx_start_addr: sbuf(0, idx),
        elem_size: size,
        step_elem: 0,
        bound,
    }
}

/// A direct side: consecutive rows of `size` bytes from `start`.
pub fn direct(start: FabricAddr, size: u32) -> DmaSide {
    DmaSide {
        start_addr: start,
        idx_start_addr: Addr4(0),
        elem_size: size,
        step_elem: 1,
        bound: BoundCheckReg::DISABLED,
    }
}

/// Bound register pair 0/1 = `bound`.
pub fn state(bound: u64) -> CoreState {
    let mut regs = BoundRegisters::new();
    regs.set_bound(0, bound).unwrap();
    CoreState::with_registers(regs)
}

/// Bound register 0, notifying on a skip or not.
pub fn bc(notify: bool) -> BoundCheckReg {
    BoundCheckReg::enabled(0, !notify).unwrap()
}

/// A fabric whose HBM table has `rows` rows of two u32, row `r` = `[10 r, 10 r + 1]`.
pub fn table(r: Route, rows: u32) -> Fabric {
    let mut f = r.fabric();
    let t: Vec<u32> = (0..rows).flat_map(|r| [10 * r, 10 * r + 1]).collect();
    put(&mut f, FabricAddr(TABLE), &t);
    f
}

/// A gather of `sidx` rows (8 bytes) from the table into BUF.
pub fn gather(
    f: &mut Fabric,
    sidx: &[u32],
    fl: DmaIndirectFlags,
    b: BoundCheckReg,
) -> DmaIndirect1d {
    put(f, sbuf_at(0, SIDX), sidx);
    let src = indirect(FabricAddr(TABLE), SIDX, 8, b);
    let dst = direct(sbuf_at(0, BUF), 8);
    DmaIndirect1d::new(fl, src, dst, sidx.len() as u16, Dtype::U32, ComputeOp::None)
}

/// A scatter of rows of `E` from BUF into the table at `didx` (`src.len() / didx.len()`
/// elements a row).
pub fn scatter<E: Element>(
    f: &mut Fabric,
    src: &[E],
    didx: &[u32],
    (fl, op): (DmaIndirectFlags, ComputeOp),
    b: BoundCheckReg,
) -> DmaIndirect1d {
    put(f, sbuf_at(0, BUF), src);
    put(f, sbuf_at(0, DIDX), didx);
    let size = (src.len() / didx.len() * size_of::<E>()) as u32;
    let s = direct(sbuf_at(0, BUF), size);
    let d = indirect(FabricAddr(TABLE), DIDX, size, b);
    DmaIndirect1d::new(fl, s, d, didx.len() as u16, E::DTYPE, op)
}

fn skip(side: IndexSide, position: u32, value: u32) -> SkippedIndex {
    SkippedIndex {
        side,
        position,
        value,
    }
}

pub fn gather_picks_source_rows(r: Route) {
    let mut f = table(r, 6);
    let fl = flags(IndirectMode::Src, true, false);
    let g = gather(&mut f, &[4, 0, 4, 2], fl, BoundCheckReg::DISABLED);
    let out = r.run(&mut f, &mut CoreState::new(), g);
    let rows = [40, 41, 0, 1, 40, 41, 20, 21];
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 8), rows);
    assert_eq!(out.bytes_written, 32);
    assert!(out.skipped.is_empty() && !out.oob_notification);
}

pub fn a_long_gather_walks_many_vectors(r: Route) {
    let mut f = table(r, 64);
    let sidx: Vec<u32> = (0..50).map(|k| (k * 7) % 64).collect();
    let g = gather(
        &mut f,
        &sidx,
        flags(IndirectMode::Src, true, false),
        bc(true),
    );
    r.run(&mut f, &mut state(64), g);
    let expect: Vec<u32> = sidx.iter().flat_map(|&r| [10 * r, 10 * r + 1]).collect();
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 100), expect);
}

pub fn scatter_picks_destination_rows(r: Route) {
    let mut f = r.fabric();
    let op = (flags(IndirectMode::Dst, true, false), ComputeOp::None);
    let s = scatter::<u32>(&mut f, &[1, 2, 3, 4, 5, 6], &[2, 0, 5], op, bc(true));
    let out = r.run(&mut f, &mut state(6), s);
    let got = get::<u32>(&f, FabricAddr(TABLE), 12);
    assert_eq!(got, [3, 4, 0, 0, 1, 2, 0, 0, 0, 0, 5, 6]);
    assert_eq!(out.bytes_written, 24);
}

pub fn both_sides_indirect(r: Route) {
    let mut f = table(r, 4);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, 3]);
    put::<u32>(&mut f, sbuf_at(0, DIDX), &[0, 2]);
    let src = indirect(FabricAddr(TABLE), SIDX, 8, BoundCheckReg::DISABLED);
    let dst = indirect(sbuf_at(1, 0), DIDX, 8, BoundCheckReg::DISABLED);
    let fl = flags(IndirectMode::SrcDst, true, false);
    let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None);
    r.run(&mut f, &mut CoreState::new(), i);
    assert_eq!(get::<u32>(&f, sbuf_at(1, 0), 6), [10, 11, 0, 0, 30, 31]);
}

pub fn every_compute_op(r: Route) {
    // dst rows start as [10, -5] and [7, 0]; src rows are [3, -7] and [-2, 4].
    let cases: [(ComputeOp, [i32; 4]); 5] = [
        (ComputeOp::None, [3, -7, -2, 4]),
        (ComputeOp::Add, [13, -12, 5, 4]),
        (ComputeOp::Multiply, [30, 35, -14, 0]),
        (ComputeOp::Max, [10, -5, 7, 4]),
        (ComputeOp::Min, [3, -7, -2, 0]),
    ];
    for (op, expected) in cases {
        let mut f = r.fabric();
        put::<i32>(&mut f, FabricAddr(TABLE + 8), &[7, 0]);
        put::<i32>(&mut f, FabricAddr(TABLE + 24), &[10, -5]);
        let fo = (flags(IndirectMode::Dst, true, false), op);
        let s = scatter::<i32>(
            &mut f,
            &[3, -7, -2, 4],
            &[3, 1],
            fo,
            BoundCheckReg::DISABLED,
        );
        r.run(&mut f, &mut CoreState::new(), s);
        let rows = [
            get::<i32>(&f, FabricAddr(TABLE + 24), 2),
            get::<i32>(&f, FabricAddr(TABLE + 8), 2),
        ];
        assert_eq!(rows.concat(), expected, "{op:?}");
    }
    let mut f = r.fabric();
    put::<f32>(&mut f, FabricAddr(TABLE), &[1.5, -0.25]);
    let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
    let s = scatter::<f32>(&mut f, &[2.25, 0.25], &[0], fo, BoundCheckReg::DISABLED);
    r.run(&mut f, &mut CoreState::new(), s);
    assert_eq!(get::<f32>(&f, FabricAddr(TABLE), 2), [3.75, 0.0]);
}

pub fn hard_oob_fails_closed_naming_the_index(r: Route) {
    let mut f = table(r, 6);
    let g = gather(
        &mut f,
        &[1, 6, 2],
        flags(IndirectMode::Src, true, false),
        bc(true),
    );
    let e = r.fails_closed(&mut f, &mut state(6), g);
    let expected = Error::IndexOutOfBounds {
        side: IndexSide::Src,
        position: 1,
        value: 6,
        bound: 6,
    };
    assert_eq!(e.to_string(), expected.to_string());
    assert_eq!(
        e.to_string(),
        "src index 6 at position 1 is out of bounds (bound 6)"
    );
    let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
    let s = scatter::<u32>(&mut f, &[1, 2, 3, 4], &[5, 9], fo, bc(true));
    let e = r.fails_closed(&mut f, &mut state(6), s);
    let expected = Error::IndexOutOfBounds {
        side: IndexSide::Dst,
        position: 1,
        value: 9,
        bound: 6,
    };
    assert_eq!(e.to_string(), expected.to_string());
}

pub fn soft_oob_skips_and_reports(r: Route) {
    for notify in [true, false] {
        let mut f = table(r, 6);
        put::<u32>(&mut f, sbuf_at(0, BUF), &[0xdead; 8]);
        let fl = flags(IndirectMode::Src, false, false);
        let g = gather(&mut f, &[1, 6, 2, 9], fl, bc(notify));
        let out = r.run(&mut f, &mut state(6), g);
        let got = get::<u32>(&f, sbuf_at(0, BUF), 8);
        assert_eq!(got, [10, 11, 0xdead, 0xdead, 20, 21, 0xdead, 0xdead]);
        let src = IndexSide::Src;
        assert_eq!(out.skipped, [skip(src, 1, 6), skip(src, 3, 9)]);
        assert_eq!(out.oob_notification, notify);
        assert_eq!(out.bytes_written, 16);
    }
}

/// Both sides out of bounds at one position: src reported first; the notification
/// follows whichever side's register keeps it.
pub fn both_sides_out_of_bounds_are_both_reported(r: Route) {
    for (dst_silent, notification) in [(false, true), (true, false)] {
        let mut f = table(r, 4);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[7, 1]);
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[8, 2]);
        let src = indirect(FabricAddr(TABLE), SIDX, 8, bc(false));
        let dst_bound = BoundCheckReg::enabled(2, dst_silent).unwrap();
        let dst = indirect(sbuf_at(1, 0), DIDX, 8, dst_bound);
        let mut regs = BoundRegisters::new();
        regs.set_bound(0, 4).unwrap();
        regs.set_bound(2, 3).unwrap();
        let fl = flags(IndirectMode::SrcDst, false, false);
        let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None);
        let out = r.run(&mut f, &mut CoreState::with_registers(regs), i);
        let expect = [skip(IndexSide::Src, 0, 7), skip(IndexSide::Dst, 0, 8)];
        assert_eq!(out.skipped, expect);
        assert_eq!(out.oob_notification, notification);
        assert_eq!(get::<u32>(&f, sbuf_at(1, 16), 2), [10, 11]);
    }
}

/// A bound past u32 holds every index: u32::MAX - 1 is in bounds and its 4 KiB row is
/// far outside HBM, a hard address error rather than an OOB skip.
pub fn a_bound_above_u32_bounds_nothing(r: Route) {
    let mut f = table(r, 4);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[u32::MAX - 1, 3]);
    let src = indirect(FabricAddr(TABLE), SIDX, 4096, bc(true));
    let dst = direct(sbuf_at(0, BUF), 4096);
    let fl = flags(IndirectMode::Src, true, false);
    let g = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U8, ComputeOp::None);
    let e = r.fails_closed(&mut f, &mut state(1 << 33), g);
    let named = matches!(
        e,
        Error::IndexAddress {
            side: IndexSide::Src,
            position: 0,
            value: 0xffff_fffe,
            ..
        }
    );
    assert!(named, "{e}");
}

/// An enabled bound of 0 rows admits no index: every position is skipped.
pub fn a_zero_bound_admits_no_index(r: Route) {
    let mut f = table(r, 4);
    let g = gather(
        &mut f,
        &[0, 3],
        flags(IndirectMode::Src, false, false),
        bc(true),
    );
    let out = r.run(&mut f, &mut state(0), g);
    let src = IndexSide::Src;
    assert_eq!(out.skipped, [skip(src, 0, 0), skip(src, 1, 3)]);
    assert_eq!((out.bytes_written, out.oob_notification), (0, true));
}

pub fn duplicates_need_non_unique_dst_idx(r: Route) {
    let mut f = r.fabric();
    put::<u32>(&mut f, FabricAddr(TABLE), &[0, 100, 200, 300]);
    let (rows, didx) = ([5, 7, 11], [3, 1, 3]);
    let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
    let s = scatter::<u32>(&mut f, &rows, &didx, fo, BoundCheckReg::DISABLED);
    let e = r.fails_closed(&mut f, &mut CoreState::new(), s);
    let dup = Error::DuplicateDestination {
        value: 3,
        first: 0,
        second: 2,
    };
    assert_eq!(e.to_string(), dup.to_string());
    // With non_unique_dst_idx: np.add.at(table, [3, 1, 3], [5, 7, 11]).
    let fo = (flags(IndirectMode::Dst, true, true), ComputeOp::Add);
    let s = scatter::<u32>(&mut f, &rows, &didx, fo, BoundCheckReg::DISABLED);
    r.run(&mut f, &mut CoreState::new(), s);
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 107, 200, 316]);
    // A plain copy: the last index wins.
    let fo = (flags(IndirectMode::Dst, true, true), ComputeOp::None);
    let s = scatter::<u32>(&mut f, &rows, &didx, fo, BoundCheckReg::DISABLED);
    r.run(&mut f, &mut CoreState::new(), s);
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 7, 200, 11]);
}

/// The first failing position wins, across vectors: a duplicate at position 20 (of
/// position 3) before a hard OOB index at 25; then the OOB index moved to 10, first.
pub fn the_first_failing_position_is_the_error(r: Route) {
    let mut didx: Vec<u32> = (0..30).collect();
    didx[20] = 3;
    didx[25] = 99;
    let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::None);
    let rows: Vec<u32> = (0..30).collect();
    let mut f = r.fabric();
    let s = scatter::<u32>(&mut f, &rows, &didx, fo, bc(true));
    let e = r.fails_closed(&mut f, &mut state(40), s);
    let dup = Error::DuplicateDestination {
        value: 3,
        first: 3,
        second: 20,
    };
    assert_eq!(e.to_string(), dup.to_string());
    didx[10] = 77;
    let s = scatter::<u32>(&mut f, &rows, &didx, fo, bc(true));
    let e = r.fails_closed(&mut f, &mut state(40), s);
    let oob = Error::IndexOutOfBounds {
        side: IndexSide::Dst,
        position: 10,
        value: 77,
        bound: 40,
    };
    assert_eq!(e.to_string(), oob.to_string());
}

pub fn skipped_duplicates_are_not_duplicates(r: Route) {
    let mut f = r.fabric();
    let fo = (flags(IndirectMode::Dst, false, false), ComputeOp::None);
    let s = scatter::<u32>(&mut f, &[5, 7, 11], &[3, 9, 9], fo, bc(true));
    let out = r.run(&mut f, &mut state(6), s);
    let dst = IndexSide::Dst;
    assert_eq!(out.skipped, [skip(dst, 1, 9), skip(dst, 2, 9)]);
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE + 12), 1), [5]);
}

/// With the bound check disabled, index u32::MAX's 16 MiB row is far past HBM: the
/// instruction fails naming it (the direct side, on the fabric, is fine).
pub fn rows_off_the_fabric_are_hard_errors(r: Route) {
    let mut f = table(r, 4);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, u32::MAX]);
    let src = indirect(FabricAddr(TABLE), SIDX, 1 << 24, BoundCheckReg::DISABLED);
    let dst = direct(FabricAddr(0x4000_0000), 1 << 24);
    let fl = flags(IndirectMode::Src, false, false);
    let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U8, ComputeOp::None);
    let e = r.fails_closed(&mut f, &mut CoreState::new(), i);
    let named = matches!(
        e,
        Error::IndexAddress {
            side: IndexSide::Src,
            position: 1,
            value: u32::MAX,
            ..
        }
    );
    assert!(named, "{e}");
}

/// Rows gathered into the table one row up: each row reads what the previous wrote.
pub fn overlapping_rows_move_in_order(r: Route) {
    let mut f = r.fabric();
    let rows: Vec<u32> = (0..24).collect();
    put(&mut f, FabricAddr(TABLE), &rows);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[0, 1, 2, 4]);
    let src = indirect(FabricAddr(TABLE), SIDX, 16, BoundCheckReg::DISABLED);
    let dst = direct(FabricAddr(TABLE + 16), 16);
    let fl = flags(IndirectMode::Src, true, false);
    let i = DmaIndirect1d::new(fl, src, dst, 4, Dtype::U32, ComputeOp::Add);
    let out = r.run(&mut f, &mut CoreState::new(), i);
    // row1 += row0; row2 += new row1; row3 += new row2; row4 += row4
    let expect = [
        0, 1, 2, 3, 4, 6, 8, 10, 12, 15, 18, 21, 24, 28, 32, 36, 32, 34, 36, 38,
    ];
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 20), expect);
    assert_eq!(out.bytes_written, 64);
}

/// A gather-transpose of `sidx` rows of 4 u16 (row `r` = `[10 r, 10 r + 1, ...]`, 6 rows)
/// into `dst`, rows `step` apart; the destination prefilled with 0xeeee.
fn transpose(
    r: Route,
    sidx: &[u32],
    (dst, step): (FabricAddr, u16),
    hard: bool,
) -> (Fabric, DmaIndirect1d) {
    let mut f = r.fabric();
    let rows: Vec<u16> = (0..24).map(|e| 10 * (e / 4) + e % 4).collect();
    put(&mut f, FabricAddr(TABLE), &rows);
    put(&mut f, sbuf_at(0, SIDX), sidx);
    let src = indirect(FabricAddr(TABLE), SIDX, 8, bc(true));
    let mut out = direct(dst, 8);
    out.step_elem = step;
    let fl = flags(IndirectMode::Src, hard, false);
    let n = sidx.len() as u16;
    let d = DmaIndirect1d::new(fl, src, out, n, Dtype::U16, ComputeOp::None)
        .with_reshape_kind(ReshapeKind::GatherTranspose);
    (f, d)
}

/// dst[c][r] = src[idx[r]][c] into HBM, destination rows 5 elements apart.
pub fn gather_transpose_into_hbm(r: Route) {
    let dst = FabricAddr(0x2_0000);
    let (mut f, d) = transpose(r, &[4, 0, 5], (dst, 5), true);
    put::<u16>(&mut f, dst, &[0xeeee; 20]);
    let out = r.run(&mut f, &mut state(6), d);
    let e = 0xeeee;
    let expect = [
        40, 0, 50, e, e, 41, 1, 51, e, e, 42, 2, 52, e, e, 43, 3, 53, e, e,
    ];
    assert_eq!(get::<u16>(&f, dst, 20), expect);
    assert_eq!((out.bytes_written, out.skipped.len()), (24, 0));
}

/// Into SBUF, destination row `c` in partition 2 + 2c; a soft-skipped index leaves its
/// column as it was.
pub fn gather_transpose_into_partitions(r: Route) {
    let (mut f, d) = transpose(r, &[4, 9, 5], (sbuf_at(2, 0x100), 2), false);
    for c in 0..4 {
        put::<u16>(&mut f, sbuf_at(2 + 2 * c, 0x100), &[0xeeee; 3]);
    }
    let out = r.run(&mut f, &mut state(6), d);
    for c in 0..4u32 {
        let row = get::<u16>(&f, sbuf_at(2 + 2 * c, 0x100), 3);
        assert_eq!(row, [40 + c as u16, 0xeeee, 50 + c as u16], "row {c}");
    }
    assert_eq!(out.skipped, [skip(IndexSide::Src, 1, 9)]);
    assert_eq!(out.bytes_written, 16);
}

/// Under the hard policy an OOB index fails the transpose and writes nothing.
pub fn gather_transpose_hard_oob_fails_closed(r: Route) {
    let (mut f, d) = transpose(r, &[4, 6, 5], (FabricAddr(0x2_0000), 3), true);
    let e = r.fails_closed(&mut f, &mut state(6), d);
    assert_eq!(
        e.to_string(),
        "src index 6 at position 1 is out of bounds (bound 6)"
    );
}

/// A soft-bounded scatter-add with duplicates equals `np.add.at` over the in-bounds
/// positions, reporting exactly the others; under the hard policy any out-of-bounds
/// index fails at the first one and writes nothing.
pub fn scatter_add_policies(r: Route) {
    let strategy = (
        prop::collection::vec(0u32..12, 1..40),
        prop::collection::vec(any::<u32>(), 40),
        1u64..12,
        any::<bool>(),
    );
    let config = Config {
        cases: 32,
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&strategy, |(didx, src, bound, hard)| {
        let src = &src[..didx.len()];
        let mut f = r.fabric();
        let init: Vec<u32> = (0..12).map(|r| r * 1000).collect();
        put(&mut f, FabricAddr(TABLE), &init);
        let fo = (flags(IndirectMode::Dst, hard, true), ComputeOp::Add);
        let s = scatter::<u32>(&mut f, src, &didx, fo, bc(true));
        let first_oob = didx.iter().position(|&d| u64::from(d) >= bound);
        if let (true, Some(k)) = (hard, first_oob) {
            let e = r.fails_closed(&mut f, &mut state(bound), s);
            let named =
                matches!(e, Error::IndexOutOfBounds { position, .. } if position as usize == k);
            prop_assert!(named, "{}", e);
            return Ok(());
        }
        let out = r.run(&mut f, &mut state(bound), s);
        let mut expected = init;
        let mut skipped = Vec::new();
        for (k, (&d, &v)) in (0u32..).zip(didx.iter().zip(src)) {
            match expected
                .get_mut(d as usize)
                .filter(|_| u64::from(d) < bound)
            {
                // the DMA adds in f32 and saturates back to u32
                Some(slot) => *slot = (*slot as f32 + v as f32).round_ties_even() as u32,
                None => skipped.push(skip(IndexSide::Dst, k, d)),
            }
        }
        prop_assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 12), expected);
        prop_assert_eq!(out.oob_notification, !skipped.is_empty());
        prop_assert_eq!(out.bytes_written, 4 * (didx.len() - skipped.len()) as u64);
        prop_assert_eq!(out.skipped, skipped);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

// ---- the shape register's walk ------------------------------------------------------

/// The shape registers of the shaped cases: 8..=11.
pub const SHAPE_REG: u8 = 8;

/// A core whose registers 8..=11 hold the shape `xyzw` and pair 0/1 the bound `bound`.
pub fn shaped_state(xyzw: [u32; 4], bound: u64) -> CoreState {
    let mut regs = BoundRegisters::new();
    regs.set_shape(SHAPE_REG, xyzw).unwrap();
    regs.set_bound(0, bound).unwrap();
    CoreState::with_registers(regs)
}

/// The u32 value of element `(w, z, y, x)` of a coded tensor.
fn code(w: u32, z: u32, y: u32, x: u32) -> u32 {
    1000 * w + 100 * z + 10 * y + x
}

/// A fabric holding the coded `[W][Z][Y][X]` u32 tensor of `xyzw` at `at`.
pub fn coded_tensor(r: Route, at: FabricAddr, [x, y, z, w]: [u32; 4]) -> Fabric {
    let mut f = r.fabric();
    let mut t = Vec::new();
    for wi in 0..w {
        for zi in 0..z {
            for yi in 0..y {
                t.extend((0..x).map(|xi| code(wi, zi, yi, xi)));
            }
        }
    }
    put(&mut f, at, &t);
    f
}

/// Flags with `dim` on each indexed side (X on a side without indices).
pub fn shaped_flags(mode: IndirectMode, dim: IndirectDim, hard: bool) -> DmaIndirectFlags {
    let on = |indexed| if indexed { dim } else { IndirectDim::X };
    DmaIndirectFlags::new(mode, hard, false, on(mode.gathers()), on(mode.scatters()))
}

/// A shaped gather of u32 elements along `dim` from TABLE into BUF, indices `sidx`.
pub fn shaped_gather(
    f: &mut Fabric,
    sidx: &[u32],
    (dim, hard): (IndirectDim, bool),
    bound: BoundCheckReg,
) -> DmaIndirect1d {
    put(f, sbuf_at(0, SIDX), sidx);
    let src = indirect(FabricAddr(TABLE), SIDX, 4, bound);
    let dst = direct(sbuf_at(0, BUF), 4);
    let fl = shaped_flags(IndirectMode::Src, dim, hard);
    let n = sidx.len() as u16;
    DmaIndirect1d::new(fl, src, dst, n, Dtype::U32, ComputeOp::None)
        .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap())
}

/// The `[2][2][3][2]` coded tensor (X = 2, Y = 3, Z = 2, W = 2) the shaped cases use.
const XYZW: [u32; 4] = [2, 3, 2, 2];

/// Along Y: for each (w, z), the rows y = 2 then y = 0, X innermost.
pub fn shaped_gather_along_y(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    let g = shaped_gather(&mut f, &[2, 0], (IndirectDim::Y, true), bc(true));
    let out = r.run(&mut f, &mut shaped_state(XYZW, 100), g);
    let expect = [
        20, 21, 0, 1, // w 0, z 0
        120, 121, 100, 101, // w 0, z 1
        1020, 1021, 1000, 1001, // w 1, z 0
        1120, 1121, 1100, 1101, // w 1, z 1
    ];
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 16), expect);
    assert_eq!(out.bytes_written, 64);
    assert!(out.skipped.is_empty() && !out.oob_notification);
}

/// Along Z a position is a whole `[Y][X]` plane per w; along W a whole `[Z][Y][X]` block.
pub fn shaped_gather_along_z_and_w(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    let g = shaped_gather(
        &mut f,
        &[1, 0],
        (IndirectDim::Z, true),
        BoundCheckReg::DISABLED,
    );
    let out = r.run(&mut f, &mut shaped_state(XYZW, 0), g);
    let expect = [
        100, 101, 110, 111, 120, 121, 0, 1, 10, 11, 20, 21, // w 0: z 1, z 0
        1100, 1101, 1110, 1111, 1120, 1121, 1000, 1001, 1010, 1011, 1020, 1021,
    ];
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 24), expect);
    assert_eq!(out.bytes_written, 96);
    let g = shaped_gather(
        &mut f,
        &[1],
        (IndirectDim::W, true),
        BoundCheckReg::DISABLED,
    );
    r.run(&mut f, &mut shaped_state(XYZW, 0), g);
    let expect = [
        1000, 1001, 1010, 1011, 1020, 1021, 1100, 1101, 1110, 1111, 1120, 1121,
    ];
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 12), expect);
}

/// Along X with a shape, the indices pick the same columns from every row of the tensor.
pub fn shaped_gather_along_x_takes_every_row(r: Route) {
    let xyzw = [4, 2, 1, 1];
    let mut f = coded_tensor(r, FabricAddr(TABLE), xyzw);
    let g = shaped_gather(&mut f, &[3, 0, 3], (IndirectDim::X, true), bc(true));
    let out = r.run(&mut f, &mut shaped_state(xyzw, 4), g);
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 6), [3, 0, 3, 13, 10, 13]);
    assert_eq!(out.bytes_written, 24);
}

/// A scatter-add along Z: source elements 1..=12 land on the z = 1 plane of each w.
pub fn shaped_scatter_add_along_z(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    let src: Vec<u32> = (1..=12).collect();
    put(&mut f, sbuf_at(0, BUF), &src);
    put::<u32>(&mut f, sbuf_at(0, DIDX), &[1]);
    let s = direct(sbuf_at(0, BUF), 4);
    let d = indirect(FabricAddr(TABLE), DIDX, 4, bc(true));
    let fl = shaped_flags(IndirectMode::Dst, IndirectDim::Z, true);
    let i = DmaIndirect1d::new(fl, s, d, 1, Dtype::U32, ComputeOp::Add)
        .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap());
    let out = r.run(&mut f, &mut shaped_state(XYZW, 2), i);
    let expect = [
        0, 1, 10, 11, 20, 21, // w 0, z 0: unchanged
        101, 103, 113, 115, 125, 127, // w 0, z 1: + 1..=6
        1000, 1001, 1010, 1011, 1020, 1021, // w 1, z 0: unchanged
        1107, 1109, 1119, 1121, 1131, 1133, // w 1, z 1: + 7..=12
    ];
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 24), expect);
    assert_eq!(out.bytes_written, 48);
}

/// Both sides indexed along Y: `dst[w][z][didx[k]][x] = src[w][z][sidx[k]][x]`, the
/// destination tensor in SBUF partition 1; row y = 2 of the destination is not written.
pub fn shaped_both_sides_along_y(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    put::<u32>(&mut f, sbuf_at(1, 0), &[0xeeee; 24]);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[2, 0]);
    put::<u32>(&mut f, sbuf_at(0, DIDX), &[0, 1]);
    let src = indirect(FabricAddr(TABLE), SIDX, 4, BoundCheckReg::DISABLED);
    let dst = indirect(sbuf_at(1, 0), DIDX, 4, BoundCheckReg::DISABLED);
    let fl = shaped_flags(IndirectMode::SrcDst, IndirectDim::Y, true);
    let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None)
        .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap());
    r.run(&mut f, &mut shaped_state(XYZW, 0), i);
    let e = 0xeeee;
    let expect = [
        20, 21, 0, 1, e, e, // w 0, z 0
        120, 121, 100, 101, e, e, // w 0, z 1
        1020, 1021, 1000, 1001, e, e, // w 1, z 0
        1120, 1121, 1100, 1101, e, e, // w 1, z 1
    ];
    assert_eq!(get::<u32>(&f, sbuf_at(1, 0), 24), expect);
}

/// An index at the extent along the dim is out of bounds with the bound register off (it
/// would alias the next plane): the whole position is skipped at every (w, z) and
/// reported; an enabled bound below the extent bounds first.
pub fn shaped_soft_oob_skips_whole_positions(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    put::<u32>(&mut f, sbuf_at(0, BUF), &[0xdead; 24]);
    let g = shaped_gather(
        &mut f,
        &[1, 3, 0],
        (IndirectDim::Y, false),
        BoundCheckReg::DISABLED,
    );
    let out = r.run(&mut f, &mut shaped_state(XYZW, 0), g);
    let d = 0xdead;
    let expect = [
        10, 11, d, d, 0, 1, // w 0, z 0
        110, 111, d, d, 100, 101, // w 0, z 1
        1010, 1011, d, d, 1000, 1001, // w 1, z 0
        1110, 1111, d, d, 1100, 1101, // w 1, z 1
    ];
    assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 24), expect);
    assert_eq!(out.skipped, [skip(IndexSide::Src, 1, 3)]);
    assert!(out.oob_notification);
    assert_eq!(out.bytes_written, 64);
    // bound 1 (below the extent 3): index 1 is out too; silent register
    let g = shaped_gather(&mut f, &[1, 3, 0], (IndirectDim::Y, false), bc(false));
    let out = r.run(&mut f, &mut shaped_state(XYZW, 1), g);
    let src = IndexSide::Src;
    assert_eq!(out.skipped, [skip(src, 0, 1), skip(src, 1, 3)]);
    assert!(!out.oob_notification);
    assert_eq!(out.bytes_written, 32);
}

/// Under the hard policy an index past the extent fails naming the extent (the smaller
/// bound), and nothing is written: a gather along W, a scatter along Z.
pub fn shaped_hard_oob_fails_closed(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    let g = shaped_gather(&mut f, &[0, 1, 2], (IndirectDim::W, true), bc(true));
    let e = r.fails_closed(&mut f, &mut shaped_state(XYZW, 50), g);
    assert_eq!(
        e.to_string(),
        "src index 2 at position 2 is out of bounds (bound 2)"
    );
    put::<u32>(&mut f, sbuf_at(0, DIDX), &[1, 2]);
    let s = direct(sbuf_at(0, BUF), 4);
    let d = indirect(FabricAddr(TABLE), DIDX, 4, BoundCheckReg::DISABLED);
    let fl = shaped_flags(IndirectMode::Dst, IndirectDim::Z, true);
    let i = DmaIndirect1d::new(fl, s, d, 2, Dtype::U32, ComputeOp::None)
        .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap());
    let e = r.fails_closed(&mut f, &mut shaped_state(XYZW, 0), i);
    let expected = Error::IndexOutOfBounds {
        side: IndexSide::Dst,
        position: 1,
        value: 2,
        bound: 2,
    };
    assert_eq!(e.to_string(), expected.to_string());
}

/// A destination index repeated along Y is a repeated position (the rule without a
/// shape); with non_unique_dst_idx every plane accumulates in position order.
pub fn shaped_duplicates_are_positions(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    put::<u32>(&mut f, sbuf_at(0, BUF), &[1; 16]);
    put::<u32>(&mut f, sbuf_at(0, DIDX), &[2, 2]);
    let s = direct(sbuf_at(0, BUF), 4);
    let d = indirect(FabricAddr(TABLE), DIDX, 4, BoundCheckReg::DISABLED);
    let fl = shaped_flags(IndirectMode::Dst, IndirectDim::Y, true);
    let shape = ShapeReg::at(SHAPE_REG).unwrap();
    let i = DmaIndirect1d::new(fl, s, d, 2, Dtype::U32, ComputeOp::Add).with_shape_reg(shape);
    let e = r.fails_closed(&mut f, &mut shaped_state(XYZW, 0), i);
    let dup = Error::DuplicateDestination {
        value: 2,
        first: 0,
        second: 1,
    };
    assert_eq!(e.to_string(), dup.to_string());
    let fl = DmaIndirectFlags::new(
        IndirectMode::Dst,
        true,
        true,
        IndirectDim::X,
        IndirectDim::Y,
    );
    let i = DmaIndirect1d::new(fl, s, d, 2, Dtype::U32, ComputeOp::Add).with_shape_reg(shape);
    r.run(&mut f, &mut shaped_state(XYZW, 0), i);
    let got = get::<u32>(&f, FabricAddr(TABLE), 24);
    let expect = [
        0, 1, 10, 11, 22, 23, 100, 101, 110, 111, 122, 123, 1000, 1001, 1010, 1011, 1022, 1023,
        1100, 1101, 1110, 1111, 1122, 1123,
    ];
    assert_eq!(got, expect);
}

/// Elements move in walk order, each read when it moves: a gather along X of the `[2][2]`
/// tensor `t` into `t` two elements on. The walk is y, then the position: j0 = (y 0, k 0)
/// reads t1, j1 = (0, 1) t0, j2 = (1, 0) t3, j3 = (1, 1) t2, and j writes t[2 + j], so
/// j2 reads what j1 wrote (position-major order would read t3 before j1 writes it, and
/// reading every source first would leave t4 = 8 and t5 = 7).
pub fn shaped_walk_moves_in_order(r: Route) {
    let xyzw = [2, 2, 1, 1];
    let mut f = r.fabric();
    put::<u32>(&mut f, FabricAddr(TABLE), &[5, 6, 7, 8, 9, 10]);
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, 0]);
    let src = indirect(FabricAddr(TABLE), SIDX, 4, BoundCheckReg::DISABLED);
    let dst = direct(FabricAddr(TABLE + 8), 4);
    let fl = shaped_flags(IndirectMode::Src, IndirectDim::X, true);
    let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None)
        .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap());
    r.run(&mut f, &mut shaped_state(xyzw, 0), i);
    // j0: t2 = t1 = 6; j1: t3 = t0 = 5; j2: t4 = t3 = 5; j3: t5 = t2 = 6
    assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 6), [5, 6, 6, 5, 5, 6]);
}

/// The shape is checked against its registers before anything moves, on every route.
pub fn shaped_refusals_fail_closed(r: Route) {
    let mut f = coded_tensor(r, FabricAddr(TABLE), XYZW);
    let g = shaped_gather(
        &mut f,
        &[0],
        (IndirectDim::Y, true),
        BoundCheckReg::DISABLED,
    );
    let e = r.fails_closed(&mut f, &mut shaped_state([2, 3, 0, 2], 0), g);
    assert_eq!(
        e.to_string(),
        "DMA_INDIRECT1D.shape_reg.z = 0: a shape's extents X, Y, Z, W (registers reg..reg+3) must each be at least 1"
    );
    let e = r.fails_closed(&mut f, &mut shaped_state([1 << 11, 1, 1 << 10, 1], 0), g);
    assert_eq!(e.rule(), Some(Rule::ShapeElementCount), "{e}");
    // 2^30 u32 along Y: a 4 GiB indirection step
    let e = r.fails_closed(&mut f, &mut shaped_state([1 << 30, 2, 1, 1], 0), g);
    assert_eq!(e.rule(), Some(Rule::ShapeIndirectionStep), "{e}");
    // the 96-byte tensor 92 bytes before the end of HBM: its first element is on the
    // fabric, the tensor is not
    let end = f.generation().hbm_bytes();
    put::<u32>(&mut f, sbuf_at(0, SIDX), &[0]);
    let src = indirect(FabricAddr(end - 92), SIDX, 4, BoundCheckReg::DISABLED);
    let i = DmaIndirect1d::new(g.flags(), src, g.dst(), 1, Dtype::U32, ComputeOp::None)
        .with_shape_reg(g.shape_reg());
    let e = r.fails_closed(&mut f, &mut shaped_state(XYZW, 0), i);
    let named = matches!(&e, Error::Field { field, .. } if field.field == "src_start_addr");
    assert!(named, "{e}");
}

/// Every case above, as `#[test]`s on `$route`.
macro_rules! dma_indirect_cases {
    ($route:expr) => {
        $crate::test_support::route_cases!($route, dma_indirect: [
            gather_picks_source_rows,
            a_long_gather_walks_many_vectors,
            scatter_picks_destination_rows,
            both_sides_indirect,
            every_compute_op,
            hard_oob_fails_closed_naming_the_index,
            soft_oob_skips_and_reports,
            both_sides_out_of_bounds_are_both_reported,
            a_bound_above_u32_bounds_nothing,
            a_zero_bound_admits_no_index,
            duplicates_need_non_unique_dst_idx,
            the_first_failing_position_is_the_error,
            skipped_duplicates_are_not_duplicates,
            rows_off_the_fabric_are_hard_errors,
            overlapping_rows_move_in_order,
            gather_transpose_into_hbm,
            gather_transpose_into_partitions,
            gather_transpose_hard_oob_fails_closed,
            scatter_add_policies,
            shaped_gather_along_y,
            shaped_gather_along_z_and_w,
            shaped_gather_along_x_takes_every_row,
            shaped_scatter_add_along_z,
            shaped_both_sides_along_y,
            shaped_soft_oob_skips_whole_positions,
            shaped_hard_oob_fails_closed,
            shaped_duplicates_are_positions,
            shaped_walk_moves_in_order,
            shaped_refusals_fail_closed,
        ]);
    };
}
pub(crate) use dma_indirect_cases;
