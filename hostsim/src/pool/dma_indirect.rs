//! DMA_INDIRECT 0xbb (DMA_INDIRECT1D) on the IVP core: `dma_memcopy_indirect`, the
//! index -> address walk of seed 000 sections 4 and 7c.
//!
//! # The walk, 16 positions at a time
//!
//! For each indirect side (src in SRC and SRC_DST modes, dst in DST and SRC_DST), the
//! u32 indices of positions `16v .. 16v + 16` are read with the predicated hardware
//! gather `gatheran_2x32t` (+ `gatherdn_2x32`) from the index tensor in SBUF partition 0;
//! the predicate enables the live positions. The bound check is
//! `in = ltun_2x32(index, bound)` when the side's BOUND_CHECK_REG is enabled; the
//! predicated select `mov2nx8t(index, 0, in)` replaces out-of-bounds indices by row 0
//! (never used: those positions move nothing) before `mulusan_2x32` forms
//! `start + index * elem_size`. A direct side forms `start + k * step_elem * elem_size`
//! with the same MAC.
//!
//! # The position rules (shared with the reference)
//!
//! Positions are then decided in order, src side before dst side, and the first failure
//! is the error: an index at or past an enabled bound fails the instruction with
//! `idx_bound_is_err`, else position `k` is skipped and each out-of-bounds side reported
//! (src first; the notification is raised unless that side's register sets
//! `bc_disable_oob_error_notif`); an in-bounds or unbounded index whose row leaves the
//! fabric is a hard error whatever the other side did; in scatter modes two non-skipped
//! positions with one destination index fail unless `non_unique_dst_idx`.
//!
//! Only once every position is decided are the rows moved, in position order, with the
//! compute op over `dtype` (NONE copies): duplicates accumulate (`np.add.at`) or the last
//! copy wins, and a later row reads an earlier row's result.

use dma::{ComputeOp, Dtype, Fabric, FabricAddr};
use hashbrown::HashMap;
use ivp::{alu, Gr, LaneView, VBool, VecReg, Width};

use super::cost::{PoolCost, Work};
use super::port::{FabricPort, RowMover};
use super::vector::{row_addrs, HALF};
use super::{addr4_fabric, lanes_of};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::{BoundRegisters, DmaIndirect1d};

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("DMA_INDIRECT1D", field)
}

/// An indirect side's index tensor and bound.
struct IndexTensor {
    /// Fabric address of index 0.
    base: FabricAddr,
    /// The enabled bound, if any.
    bound: Option<u64>,
    /// Whether a skip on this side raises the notification.
    notify: bool,
}

/// One side of the instruction.
struct Side {
    which: IndexSide,
    start_at: FieldPath,
    start: FabricAddr,
    /// Row step of a direct side, in rows.
    step: u32,
    indices: Option<IndexTensor>,
}

/// One side's rows for 16 positions, as the vector walk leaves them.
struct LaneRows {
    values: [u32; HALF],
    addrs: [u64; HALF],
    /// Lanes whose index is at or past the bound.
    oob: u16,
    /// Lanes whose address passes `u64::MAX`.
    overflow: u16,
}

/// Where position `k` of one side goes.
#[derive(Clone, Copy)]
enum Row {
    At(FabricAddr),
    Skip(u32),
}

impl Side {
    fn new(
        fabric: &Fabric,
        regs: &BoundRegisters,
        d: &DmaIndirect1d,
        which: IndexSide,
    ) -> Result<Side, Error> {
        let mode = d.flags().indirect_mode()?;
        let (indirect, names, start, index, bc, step) = match which {
            IndexSide::Src => (
                mode.gathers(),
                ("src_start_addr", "src_idx_start_addr"),
                d.src_start_addr(),
                d.src_idx_start_addr(),
                d.src_idx_bound_reg(),
                d.src_step_elem(),
            ),
            IndexSide::Dst => (
                mode.scatters(),
                ("dst_start_addr", "dst_idx_start_addr"),
                d.dst_start_addr(),
                d.dst_idx_start_addr(),
                d.dst_idx_bound_reg(),
                d.dst_step_elem(),
            ),
        };
        let indices = match indirect {
            true => Some(IndexTensor {
                base: addr4_fabric(fabric, at(names.1), index)?,
                bound: regs.bound(bc)?,
                notify: !bc.bc_disable_oob_error_notif(),
            }),
            false => None,
        };
        Ok(Side {
            which,
            start_at: at(names.0),
            start,
            step: u32::from(step),
            indices,
        })
    }

    /// The IVP walk of positions `first .. first + 16` (lanes `live`).
    fn lanes(
        &self,
        sg: &mut ivp::SuperGather,
        port: &FabricPort<'_>,
        first: u32,
        live: u16,
        size: u32,
    ) -> LaneRows {
        let iota = VecReg::from_n_2x32(std::array::from_fn(|k| first + k as u32));
        let vb = VBool::from_lanes(LaneView::N2x32, u64::from(live));
        let (index, inside) = match &self.indices {
            Some(ix) => {
                let index = sg.gather_t(Gr::GR0, Width::N2x32, ix.base.0, &iota, vb, port);
                (index, in_bounds(&index, ix.bound))
            }
            // k < 4096 and step < 2^16: k * step fits u32.
            None => (VecReg::ZERO, VBool::ALL),
        };
        let rows = match &self.indices {
            Some(_) => alu::mov2nx8t(&index, &VecReg::ZERO, inside),
            None => VecReg::from_n_2x32(std::array::from_fn(|k| (first + k as u32) * self.step)),
        };
        let (addrs, overflow) = row_addrs(self.start.0, &rows, size);
        LaneRows {
            values: index.n_2x32(),
            addrs: addrs.lanes(),
            oob: !(inside.lane_mask(LaneView::N2x32) as u16),
            overflow,
        }
    }

    /// A direct side's row (validation put the whole run on the fabric; the check names
    /// the start field if not).
    fn direct_row(
        &self,
        fabric: &Fabric,
        addr: u64,
        overflow: bool,
        size: u64,
    ) -> Result<Row, Error> {
        let at = dma_at(self.start_at);
        if overflow {
            let start = self.start.0;
            return Err(at(dma::Error::AddressOverflow {
                addr: start,
                len: size,
            }));
        }
        fabric.check(FabricAddr(addr), size).map_err(at)?;
        Ok(Row::At(FabricAddr(addr)))
    }

    /// Position `k` (lane `lane` of `rows`): its checked row, a soft skip, or the error.
    fn row(
        &self,
        fabric: &Fabric,
        rows: &LaneRows,
        (k, lane): (u32, usize),
        size: u64,
        hard: bool,
    ) -> Result<Row, Error> {
        let (value, addr) = (rows.values[lane], rows.addrs[lane]);
        let bit = 1u16 << lane;
        let Some(ix) = &self.indices else {
            return self.direct_row(fabric, addr, rows.overflow & bit != 0, size);
        };
        if rows.oob & bit != 0 {
            let bound = ix.bound.unwrap_or(u64::MAX);
            return match hard {
                true => Err(Error::IndexOutOfBounds {
                    side: self.which,
                    position: k,
                    value,
                    bound,
                }),
                false => Ok(Row::Skip(value)),
            };
        }
        let wild = |source| Error::IndexAddress {
            side: self.which,
            position: k,
            value,
            source,
        };
        if rows.overflow & bit != 0 {
            return Err(wild(dma::Error::AddressOverflow {
                addr: self.start.0,
                len: size,
            }));
        }
        fabric.check(FabricAddr(addr), size).map_err(wild)?;
        Ok(Row::At(FabricAddr(addr)))
    }
}

/// `ltun_2x32(index, bound)`, or every lane when there is no bound or it exceeds u32.
fn in_bounds(index: &VecReg, bound: Option<u64>) -> VBool {
    match bound.map(u32::try_from) {
        Some(Ok(b)) => alu::ltun_2x32(index, &alu::movva32(b)),
        _ => VBool::ALL,
    }
}

/// The decided positions: the moves in order and the report.
struct Plan {
    moves: Vec<[FabricAddr; 2]>,
    outcome: Outcome,
}

/// DMA_INDIRECT: walks and decides every position, then moves the rows in order.
pub fn dma_memcopy_indirect(
    fabric: &mut Fabric,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<(Outcome, PoolCost), Error> {
    let (dtype, op) = (d.dtype()?, d.compute_op()?);
    let size = u64::from(d.src_elem_size());
    let sides = [
        Side::new(fabric, regs, d, IndexSide::Src)?,
        Side::new(fabric, regs, d, IndexSide::Dst)?,
    ];
    let plan = plan(fabric, d, &sides)?;
    move_rows(fabric, &plan.moves, size, dtype, op)?;
    let indirect = sides.iter().filter(|s| s.indices.is_some()).count() as u64;
    let n = u64::from(d.src_num_elem());
    let moved = plan.moves.len() as u64 * size;
    let work = Work {
        vectors: n.div_ceil(HALF as u64) * indirect.max(1),
        bytes: moved,
    };
    let mut outcome = plan.outcome;
    outcome.bytes_written = moved;
    Ok((outcome, PoolCost::estimate("dma_memcopy_indirect", 1, work)))
}

/// Moves planned rows in order: `dst (op)= src`.
pub(super) fn move_rows(
    fabric: &mut Fabric,
    moves: &[[FabricAddr; 2]],
    size: u64,
    dtype: Dtype,
    op: ComputeOp,
) -> Result<(), Error> {
    let mut mover = RowMover::new();
    // Every row was range-checked by the plan, so no move fails after an earlier one.
    for rows in moves {
        mover.apply(fabric, *rows, size, dtype, op)?;
    }
    Ok(())
}

/// Walks both sides 16 positions at a time and decides each position in order.
fn plan(fabric: &Fabric, d: &DmaIndirect1d, sides: &[Side; 2]) -> Result<Plan, Error> {
    let flags = d.flags();
    let (hard, unique) = (flags.idx_bound_is_err(), !flags.non_unique_dst_idx());
    let (n, size) = (u32::from(d.src_num_elem()), d.src_elem_size());
    let mut port = FabricPort::new(fabric);
    for ix in sides.iter().filter_map(|s| s.indices.as_ref()) {
        port.stage(ix.base, u64::from(n) * 4)?;
    }
    let mut sg = ivp::SuperGather::new();
    let mut plan = Plan {
        moves: Vec::with_capacity(n as usize),
        outcome: Outcome::default(),
    };
    let mut first_use: HashMap<u32, u32> = HashMap::new();
    for first in (0..n).step_by(HALF) {
        let live = lanes_of(n - first);
        let rows = sides
            .each_ref()
            .map(|s| s.lanes(&mut sg, &port, first, live, size));
        for lane in 0..HALF.min((n - first) as usize) {
            let k = first + lane as u32;
            let src = sides[0].row(fabric, &rows[0], (k, lane), size.into(), hard)?;
            let dst = sides[1].row(fabric, &rows[1], (k, lane), size.into(), hard)?;
            let (Row::At(from), Row::At(to)) = (src, dst) else {
                report_skips(&mut plan.outcome, k, [(&sides[0], src), (&sides[1], dst)]);
                continue;
            };
            if sides[1].indices.is_some() && unique {
                let value = rows[1].values[lane];
                if let Some(&first) = first_use.get(&value) {
                    return Err(Error::DuplicateDestination {
                        value,
                        first,
                        second: k,
                    });
                }
                first_use.insert(value, k);
            }
            plan.moves.push([from, to]);
        }
    }
    Ok(plan)
}

/// Records position `k`'s skipped sides, src first, and the notification.
fn report_skips(outcome: &mut Outcome, k: u32, rows: [(&Side, Row); 2]) {
    for (side, row) in rows {
        if let Row::Skip(value) = row {
            outcome.skipped.push(SkippedIndex {
                side: side.which,
                position: k,
                value,
            });
            outcome.oob_notification |= side.indices.as_ref().is_some_and(|ix| ix.notify);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::{CoreState, IndexSide, SkippedIndex};
    use crate::error::Error;
    use crate::isa::{
        BoundCheckReg, BoundRegisters, DmaIndirect1d, DmaIndirectFlags, DmaSide, IndirectDim,
        IndirectMode,
    };
    use dma::{Addr4, ComputeOp, Dtype, Element, Fabric, FabricAddr};
    use proptest::prelude::*;

    /// HBM table of rows.
    const TABLE: u64 = 0x1000;
    /// SBUF partition 0 byte offsets of the src and dst index tensors and a direct buffer.
    const SIDX: u32 = 0;
    const DIDX: u32 = 0x4000;
    const BUF: u32 = 0x8000;

    fn flags(mode: IndirectMode, hard: bool, non_unique: bool) -> DmaIndirectFlags {
        DmaIndirectFlags::new(mode, hard, non_unique, IndirectDim::X, IndirectDim::X)
    }

    fn indirect(start: FabricAddr, idx: u32, size: u32, bound: BoundCheckReg) -> DmaSide {
        DmaSide {
            start_addr: start,
            idx_start_addr: sbuf(0, idx),
            elem_size: size,
            step_elem: 0,
            bound,
        }
    }

    fn direct(start: FabricAddr, size: u32) -> DmaSide {
        DmaSide {
            start_addr: start,
            idx_start_addr: Addr4(0),
            elem_size: size,
            step_elem: 1,
            bound: BoundCheckReg::DISABLED,
        }
    }

    /// Bound register pair 0/1 = `bound`.
    fn state(bound: u64) -> CoreState {
        let mut regs = BoundRegisters::new();
        regs.set_bound(0, bound).unwrap();
        CoreState::with_registers(regs)
    }

    fn bc(notify: bool) -> BoundCheckReg {
        BoundCheckReg::enabled(0, !notify).unwrap()
    }

    /// A table of `rows` rows of two u32, row `r` = `[10 r, 10 r + 1]`.
    fn table(rows: u32) -> Fabric {
        let mut f = fabric();
        let t: Vec<u32> = (0..rows).flat_map(|r| [10 * r, 10 * r + 1]).collect();
        put(&mut f, FabricAddr(TABLE), &t);
        f
    }

    /// A gather of `sidx` rows (8 bytes) from the table into BUF.
    fn gather(
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

    /// A scatter of rows of `E` from BUF into the table at `didx`.
    fn scatter<E: Element>(
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

    const GATHER_HARD: IndirectMode = IndirectMode::Src;

    #[test]
    fn gather_picks_source_rows() {
        let mut f = table(6);
        let g = gather(
            &mut f,
            &[4, 0, 4, 2],
            flags(GATHER_HARD, true, false),
            BoundCheckReg::DISABLED,
        );
        let (out, cost) = run_cost(&mut f, &mut CoreState::new(), g);
        assert_eq!(
            get::<u32>(&f, sbuf_at(0, BUF), 8),
            [40, 41, 0, 1, 40, 41, 20, 21]
        );
        assert_eq!(out.bytes_written, 32);
        assert!(out.skipped.is_empty() && !out.oob_notification);
        assert_eq!(
            (cost.kernel, cost.vectors, cost.bytes),
            ("dma_memcopy_indirect", 1, 32)
        );
    }

    #[test]
    fn a_long_gather_walks_many_vectors() {
        let mut f = table(64);
        let sidx: Vec<u32> = (0..50).map(|k| (k * 7) % 64).collect();
        let g = gather(&mut f, &sidx, flags(GATHER_HARD, true, false), bc(true));
        run(&mut f, &mut state(64), g);
        let expect: Vec<u32> = sidx.iter().flat_map(|&r| [10 * r, 10 * r + 1]).collect();
        assert_eq!(get::<u32>(&f, sbuf_at(0, BUF), 100), expect);
    }

    #[test]
    fn scatter_picks_destination_rows() {
        let mut f = fabric();
        let op = (flags(IndirectMode::Dst, true, false), ComputeOp::None);
        let s = scatter::<u32>(&mut f, &[1, 2, 3, 4, 5, 6], &[2, 0, 5], op, bc(true));
        let out = run(&mut f, &mut state(6), s);
        let got = get::<u32>(&f, FabricAddr(TABLE), 12);
        assert_eq!(got, [3, 4, 0, 0, 1, 2, 0, 0, 0, 0, 5, 6]);
        assert_eq!(out.bytes_written, 24);
    }

    #[test]
    fn both_sides_indirect() {
        let mut f = table(4);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, 3]);
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[0, 2]);
        let src = indirect(FabricAddr(TABLE), SIDX, 8, BoundCheckReg::DISABLED);
        let dst = indirect(sbuf_at(1, 0), DIDX, 8, BoundCheckReg::DISABLED);
        let fl = flags(IndirectMode::SrcDst, true, false);
        let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None);
        let (_, cost) = run_cost(&mut f, &mut CoreState::new(), i);
        assert_eq!(get::<u32>(&f, sbuf_at(1, 0), 6), [10, 11, 0, 0, 30, 31]);
        assert_eq!(cost.vectors, 2, "one index vector per indirect side");
    }

    #[test]
    fn every_compute_op() {
        // dst rows start as [10, -5] and [7, 0]; src rows are [3, -7] and [-2, 4].
        let cases: [(ComputeOp, [i32; 4]); 5] = [
            (ComputeOp::None, [3, -7, -2, 4]),
            (ComputeOp::Add, [13, -12, 5, 4]),
            (ComputeOp::Multiply, [30, 35, -14, 0]),
            (ComputeOp::Max, [10, -5, 7, 4]),
            (ComputeOp::Min, [3, -7, -2, 0]),
        ];
        for (op, expected) in cases {
            let mut f = fabric();
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
            run(&mut f, &mut CoreState::new(), s);
            let rows = [
                get::<i32>(&f, FabricAddr(TABLE + 24), 2),
                get::<i32>(&f, FabricAddr(TABLE + 8), 2),
            ];
            assert_eq!(rows.concat(), expected, "{op:?}");
        }
        let mut f = fabric();
        put::<f32>(&mut f, FabricAddr(TABLE), &[1.5, -0.25]);
        let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
        let s = scatter::<f32>(&mut f, &[2.25, 0.25], &[0], fo, BoundCheckReg::DISABLED);
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<f32>(&f, FabricAddr(TABLE), 2), [3.75, 0.0]);
    }

    #[test]
    fn hard_oob_fails_closed_naming_the_index() {
        let mut f = table(6);
        let g = gather(
            &mut f,
            &[1, 6, 2],
            flags(GATHER_HARD, true, false),
            bc(true),
        );
        let e = fails_closed(&mut f, &mut state(6), g);
        assert!(
            matches!(
                e,
                Error::IndexOutOfBounds {
                    side: IndexSide::Src,
                    position: 1,
                    value: 6,
                    bound: 6
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.to_string(),
            "src index 6 at position 1 is out of bounds (6 rows)"
        );
        let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
        let s = scatter::<u32>(&mut f, &[1, 2, 3, 4], &[5, 9], fo, bc(true));
        let e = fails_closed(&mut f, &mut state(6), s);
        assert!(
            matches!(
                e,
                Error::IndexOutOfBounds {
                    side: IndexSide::Dst,
                    position: 1,
                    value: 9,
                    bound: 6
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn soft_oob_skips_and_reports() {
        for notify in [true, false] {
            let mut f = table(6);
            put::<u32>(&mut f, sbuf_at(0, BUF), &[0xdead; 8]);
            let g = gather(
                &mut f,
                &[1, 6, 2, 9],
                flags(GATHER_HARD, false, false),
                bc(notify),
            );
            let out = run(&mut f, &mut state(6), g);
            let got = get::<u32>(&f, sbuf_at(0, BUF), 8);
            assert_eq!(got, [10, 11, 0xdead, 0xdead, 20, 21, 0xdead, 0xdead]);
            let skip = |position, value| SkippedIndex {
                side: IndexSide::Src,
                position,
                value,
            };
            assert_eq!(out.skipped, [skip(1, 6), skip(3, 9)]);
            assert_eq!(out.oob_notification, notify);
            assert_eq!(out.bytes_written, 16);
        }
    }

    #[test]
    fn both_sides_out_of_bounds_are_both_reported() {
        let mut f = table(4);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[7, 1]);
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[8, 2]);
        let src = indirect(FabricAddr(TABLE), SIDX, 8, bc(false));
        let dst = indirect(
            sbuf_at(1, 0),
            DIDX,
            8,
            BoundCheckReg::enabled(2, false).unwrap(),
        );
        let mut regs = BoundRegisters::new();
        regs.set_bound(0, 4).unwrap();
        regs.set_bound(2, 3).unwrap();
        let fl = flags(IndirectMode::SrcDst, false, false);
        let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None);
        let out = run(&mut f, &mut CoreState::with_registers(regs), i);
        let src_skip = SkippedIndex {
            side: IndexSide::Src,
            position: 0,
            value: 7,
        };
        let dst_skip = SkippedIndex {
            side: IndexSide::Dst,
            position: 0,
            value: 8,
        };
        assert_eq!(out.skipped, [src_skip, dst_skip]);
        assert!(
            out.oob_notification,
            "the dst register keeps the notification"
        );
        assert_eq!(get::<u32>(&f, sbuf_at(1, 16), 2), [10, 11]);
    }

    #[test]
    fn a_bound_above_u32_bounds_nothing() {
        let mut f = table(4);
        let g = gather(
            &mut f,
            &[u32::MAX - 1, 3],
            flags(GATHER_HARD, true, false),
            bc(true),
        );
        // the bound holds every u32 index, so u32::MAX - 1 is in bounds and its row is
        // far outside HBM: a hard address error, not an OOB skip
        let e = fails_closed(&mut f, &mut state(1 << 33), g);
        assert!(
            matches!(
                e,
                Error::IndexAddress {
                    side: IndexSide::Src,
                    position: 0,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn duplicates_need_non_unique_dst_idx() {
        let mut f = fabric();
        put::<u32>(&mut f, FabricAddr(TABLE), &[0, 100, 200, 300]);
        let fo = (flags(IndirectMode::Dst, true, false), ComputeOp::Add);
        let s = scatter::<u32>(&mut f, &[5, 7, 11], &[3, 1, 3], fo, BoundCheckReg::DISABLED);
        let e = fails_closed(&mut f, &mut CoreState::new(), s);
        assert!(
            matches!(
                e,
                Error::DuplicateDestination {
                    value: 3,
                    first: 0,
                    second: 2
                }
            ),
            "{e}"
        );
        // With non_unique_dst_idx: np.add.at(table, [3, 1, 3], [5, 7, 11]).
        let fo = (flags(IndirectMode::Dst, true, true), ComputeOp::Add);
        let s = scatter::<u32>(&mut f, &[5, 7, 11], &[3, 1, 3], fo, BoundCheckReg::DISABLED);
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 107, 200, 316]);
        // A plain copy: the last index wins.
        let fo = (flags(IndirectMode::Dst, true, true), ComputeOp::None);
        let s = scatter::<u32>(&mut f, &[5, 7, 11], &[3, 1, 3], fo, BoundCheckReg::DISABLED);
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 7, 200, 11]);
    }

    #[test]
    fn skipped_duplicates_are_not_duplicates() {
        let mut f = fabric();
        let fo = (flags(IndirectMode::Dst, false, false), ComputeOp::None);
        let s = scatter::<u32>(&mut f, &[5, 7, 11], &[3, 9, 9], fo, bc(true));
        let out = run(&mut f, &mut state(6), s);
        assert_eq!(out.skipped.len(), 2);
        assert_eq!(get::<u32>(&f, FabricAddr(TABLE + 12), 1), [5]);
    }

    #[test]
    fn rows_off_the_fabric_are_hard_errors() {
        let mut f = table(4);
        // Bound check disabled: 0xffff_ffff * 2^24 bytes is far past HBM.
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, u32::MAX]);
        let src = indirect(FabricAddr(TABLE), SIDX, 1 << 24, BoundCheckReg::DISABLED);
        let dst = direct(FabricAddr(0x4000_0000), 1 << 24);
        let fl = flags(IndirectMode::Src, false, false);
        let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U8, ComputeOp::None);
        let e = fails_closed(&mut f, &mut CoreState::new(), i);
        assert!(
            matches!(
                e,
                Error::IndexAddress {
                    side: IndexSide::Src,
                    position: 1,
                    value: u32::MAX,
                    ..
                }
            ),
            "{e}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Soft-skip scatter-add with duplicates against `np.add.at` over the in-bound
        /// indices, and the skip report.
        #[test]
        fn soft_scatter_add_matches_add_at(didx in prop::collection::vec(0u32..12, 1..40), notify in any::<bool>()) {
            let mut f = fabric();
            let src: Vec<u32> = (0..didx.len() as u32).map(|k| k * k + 1).collect();
            let fo = (flags(IndirectMode::Dst, false, true), ComputeOp::Add);
            let s = scatter::<u32>(&mut f, &src, &didx, fo, bc(notify));
            let out = run(&mut f, &mut state(8), s);
            let mut expect = [0u32; 8];
            for (k, &d) in didx.iter().enumerate() {
                if let Some(slot) = expect.get_mut(d as usize) {
                    *slot = slot.wrapping_add(src[k]);
                }
            }
            prop_assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 8), expect.to_vec());
            let skipped: Vec<SkippedIndex> = (0u32..).zip(&didx)
                .filter(|(_, &d)| d >= 8)
                .map(|(k, &d)| SkippedIndex { side: IndexSide::Dst, position: k, value: d })
                .collect();
            prop_assert_eq!(out.oob_notification, notify && !skipped.is_empty());
            prop_assert_eq!(out.skipped, skipped);
        }
    }
}
