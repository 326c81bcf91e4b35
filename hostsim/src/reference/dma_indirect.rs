//! DMA_INDIRECT 0xbb (DMA_INDIRECT1D): `n` rows of `elem_size` bytes, the source row
//! picked by a u32 index (gather), the destination row picked by one (scatter), or both.
//!
//! For `k` in order: the source row is `src_start + sidx[k] * elem_size` on an indirect
//! source, else `src_start + k * src_step_elem * elem_size` (likewise the destination);
//! `dst (op)= src` element-wise over `dtype` with the compute op (NONE copies).
//!
//! Bounds, per indirect side with its BOUND_CHECK_REG: an index at or past an enabled
//! bound is out of bounds. With `idx_bound_is_err` the instruction fails naming the side,
//! position, value and bound; otherwise position `k` moves nothing and each OOB side is
//! reported (src before dst), raising the notification unless that side's register sets
//! `bc_disable_oob_error_notif`. An in-bounds (or unbounded) index whose row leaves the
//! fabric is a hard error, whatever the other side did. In scatter modes, two non-skipped
//! positions with one destination index fail unless `non_unique_dst_idx`; with it they
//! apply in order (accumulate, or the last copy wins). Positions are checked in order and
//! the first failure is the error.

use dma::{Addr4, Dtype, Fabric, FabricAddr};
use hashbrown::HashMap;

use super::{addr4_at, row_addr};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::{BoundCheckReg, BoundRegisters, DmaIndirect1d};

/// Bytes per index (UINT32).
const INDEX_BYTES: u64 = 4;

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("DMA_INDIRECT1D", field)
}

/// The indices of an indirect side and their bound.
struct Indices {
    values: Vec<u32>,
    bound: Option<u64>,
    notify: bool,
}

/// One side of the instruction, decoded for the plan.
struct Side {
    which: IndexSide,
    start_at: FieldPath,
    start: FabricAddr,
    step: u64,
    indices: Option<Indices>,
}

/// Where position `k` of one side goes.
enum Row {
    /// The checked row address.
    At(FabricAddr),
    /// An out-of-bounds index under the soft policy.
    Skip(u32),
}

impl Side {
    /// Reads the side's indices (when indirect) and its bound.
    fn read(
        fabric: &Fabric,
        regs: &BoundRegisters,
        which: IndexSide,
        d: &DmaIndirect1d,
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
        let indices = if indirect {
            let n = usize::from(d.src_num_elem());
            Some(read_indices(fabric, regs, (at(names.1), index), bc, n)?)
        } else {
            None
        };
        Ok(Side {
            which,
            start_at: at(names.0),
            start,
            step: u64::from(step),
            indices,
        })
    }

    /// Position `k`'s row of `size` bytes: checked, skipped, or the error.
    fn row(&self, fabric: &Fabric, k: u32, size: u64, hard: bool) -> Result<Row, Error> {
        let Some(ix) = &self.indices else {
            // k < 4096 and step < 2^16: the product fits easily.
            let addr = row_addr(self.start, u64::from(k) * self.step, size);
            let addr = addr.map_err(dma_at(self.start_at))?;
            fabric.check(addr, size).map_err(dma_at(self.start_at))?;
            return Ok(Row::At(addr));
        };
        let value = ix.values.get(k as usize).copied().unwrap_or(0);
        match ix.bound {
            Some(bound) if u64::from(value) >= bound && hard => Err(Error::IndexOutOfBounds {
                side: self.which,
                position: k,
                value,
                bound,
            }),
            Some(bound) if u64::from(value) >= bound => Ok(Row::Skip(value)),
            _ => {
                let wild = |source| Error::IndexAddress {
                    side: self.which,
                    position: k,
                    value,
                    source,
                };
                let addr = row_addr(self.start, value.into(), size).map_err(wild)?;
                fabric.check(addr, size).map_err(wild)?;
                Ok(Row::At(addr))
            }
        }
    }
}

/// `n` u32 indices at `index` (an ADDR4) and the bound `bc` names.
fn read_indices(
    fabric: &Fabric,
    regs: &BoundRegisters,
    (index_at, index): (FieldPath, Addr4),
    bc: BoundCheckReg,
    n: usize,
) -> Result<Indices, Error> {
    let addr = addr4_at(fabric, index_at, index, (0, 0), n as u64 * INDEX_BYTES)?;
    let mut values = vec![0u32; n];
    fabric.read_indices(addr, Dtype::U32, &mut values)?;
    Ok(Indices {
        values,
        bound: regs.bound(bc)?,
        notify: !bc.bc_disable_oob_error_notif(),
    })
}

/// The checked moves of the instruction and its report.
struct Plan {
    moves: Vec<(FabricAddr, FabricAddr)>,
    outcome: Outcome,
}

/// DMA_INDIRECT: plans every position, then moves the rows in order.
pub(super) fn dma_indirect(
    fabric: &mut Fabric,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<Outcome, Error> {
    let (dtype, op) = (d.dtype()?, d.compute_op()?);
    let size = u64::from(d.src_elem_size());
    let mut plan = plan(fabric, regs, d)?;
    for &(src, dst) in &plan.moves {
        fabric.reduce(src, dst, size, dtype, op)?;
    }
    plan.outcome.bytes_written = plan.moves.len() as u64 * size;
    Ok(plan.outcome)
}

/// Resolves both sides of every position, applying the OOB and duplicate rules.
fn plan(fabric: &Fabric, regs: &BoundRegisters, d: &DmaIndirect1d) -> Result<Plan, Error> {
    let flags = d.flags();
    let (hard, unique) = (flags.idx_bound_is_err(), !flags.non_unique_dst_idx());
    let src = Side::read(fabric, regs, IndexSide::Src, d)?;
    let dst = Side::read(fabric, regs, IndexSide::Dst, d)?;
    let size = u64::from(d.src_elem_size());
    let n = u32::from(d.src_num_elem());
    let mut plan = Plan {
        moves: Vec::with_capacity(n as usize),
        outcome: Outcome::default(),
    };
    let mut first_use: HashMap<u32, u32> = HashMap::new();
    for k in 0..n {
        let rows = (
            src.row(fabric, k, size, hard)?,
            dst.row(fabric, k, size, hard)?,
        );
        let (from, to) = match rows {
            (Row::At(from), Row::At(to)) => (from, to),
            (s, t) => {
                report_skips(&mut plan.outcome, k, [(&src, s), (&dst, t)]);
                continue;
            }
        };
        if let (Some(ix), true) = (&dst.indices, unique) {
            let value = ix.values.get(k as usize).copied().unwrap_or(0);
            if let Some(&first) = first_use.get(&value) {
                return Err(Error::DuplicateDestination {
                    value,
                    first,
                    second: k,
                });
            }
            first_use.insert(value, k);
        }
        plan.moves.push((from, to));
    }
    Ok(plan)
}

/// Records the skipped sides of position `k` (src first) and the notification.
fn report_skips(outcome: &mut Outcome, k: u32, rows: [(&Side, Row); 2]) {
    for (side, row) in rows {
        if let Row::Skip(value) = row {
            outcome.skipped.push(SkippedIndex {
                side: side.which,
                position: k,
                value,
            });
            let notify = side.indices.as_ref().is_some_and(|ix| ix.notify);
            outcome.oob_notification |= notify;
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
    const DIDX: u32 = 0x40;
    const BUF: u32 = 0x100;

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

    /// A scatter of `n` rows of `E` from BUF into the table at `didx`.
    fn scatter<E: Element>(
        f: &mut Fabric,
        src: &[E],
        didx: &[u32],
        fl: DmaIndirectFlags,
        op: ComputeOp,
        b: BoundCheckReg,
    ) -> DmaIndirect1d {
        put(f, sbuf_at(0, BUF), src);
        put(f, sbuf_at(0, DIDX), didx);
        let size = (src.len() / didx.len() * size_of::<E>()) as u32;
        let s = direct(sbuf_at(0, BUF), size);
        let d = indirect(FabricAddr(TABLE), DIDX, size, b);
        DmaIndirect1d::new(fl, s, d, didx.len() as u16, E::DTYPE, op)
    }

    #[test]
    fn gather_picks_source_rows() {
        let mut f = table(6);
        let g = gather(
            &mut f,
            &[4, 0, 4, 2],
            flags(IndirectMode::Src, true, false),
            BoundCheckReg::DISABLED,
        );
        let out = run(&mut f, &mut CoreState::new(), g);
        assert_eq!(
            get::<u32>(&f, sbuf_at(0, BUF), 8),
            [40, 41, 0, 1, 40, 41, 20, 21]
        );
        assert_eq!(out.bytes_written, 32);
        assert!(out.skipped.is_empty() && !out.oob_notification);
    }

    #[test]
    fn scatter_picks_destination_rows() {
        let mut f = fabric();
        let fl = flags(IndirectMode::Dst, true, false);
        let s = scatter::<u32>(
            &mut f,
            &[1, 2, 3, 4, 5, 6],
            &[2, 0, 5],
            fl,
            ComputeOp::None,
            bc(true),
        );
        let out = run(&mut f, &mut state(6), s);
        assert_eq!(
            get::<u32>(&f, FabricAddr(TABLE), 12),
            [3, 4, 0, 0, 1, 2, 0, 0, 0, 0, 5, 6]
        );
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
        run(
            &mut f,
            &mut CoreState::new(),
            DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None),
        );
        assert_eq!(get::<u32>(&f, sbuf_at(1, 0), 6), [10, 11, 0, 0, 30, 31]);
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
            let fl = flags(IndirectMode::Dst, true, false);
            let s = scatter::<i32>(
                &mut f,
                &[3, -7, -2, 4],
                &[3, 1],
                fl,
                op,
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
        let s = scatter::<f32>(
            &mut f,
            &[2.25, 0.25],
            &[0],
            flags(IndirectMode::Dst, true, false),
            ComputeOp::Add,
            BoundCheckReg::DISABLED,
        );
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<f32>(&f, FabricAddr(TABLE), 2), [3.75, 0.0]);
    }

    #[test]
    fn hard_oob_fails_closed_naming_the_index() {
        let mut f = table(6);
        let g = gather(
            &mut f,
            &[1, 6, 2],
            flags(IndirectMode::Src, true, false),
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
        let fl = flags(IndirectMode::Dst, true, false);
        let s = scatter::<u32>(&mut f, &[1, 2, 3, 4], &[5, 9], fl, ComputeOp::Add, bc(true));
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
                flags(IndirectMode::Src, false, false),
                bc(notify),
            );
            let out = run(&mut f, &mut state(6), g);
            assert_eq!(
                get::<u32>(&f, sbuf_at(0, BUF), 8),
                [10, 11, 0xdead, 0xdead, 20, 21, 0xdead, 0xdead]
            );
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
            BoundCheckReg::enabled(2, true).unwrap(),
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
            !out.oob_notification,
            "both registers disable the notification"
        );
        assert_eq!(get::<u32>(&f, sbuf_at(1, 16), 2), [10, 11]);
    }

    #[test]
    fn duplicates_need_non_unique_dst_idx() {
        let mut f = fabric();
        put::<u32>(&mut f, FabricAddr(TABLE), &[0, 100, 200, 300]);
        let fl = flags(IndirectMode::Dst, true, false);
        let s = scatter::<u32>(
            &mut f,
            &[5, 7, 11],
            &[3, 1, 3],
            fl,
            ComputeOp::Add,
            BoundCheckReg::DISABLED,
        );
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
        let fl = flags(IndirectMode::Dst, true, true);
        let s = scatter::<u32>(
            &mut f,
            &[5, 7, 11],
            &[3, 1, 3],
            fl,
            ComputeOp::Add,
            BoundCheckReg::DISABLED,
        );
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 107, 200, 316]);
        // A plain copy: the last index wins.
        let s = scatter::<u32>(
            &mut f,
            &[5, 7, 11],
            &[3, 1, 3],
            fl,
            ComputeOp::None,
            BoundCheckReg::DISABLED,
        );
        run(&mut f, &mut CoreState::new(), s);
        assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 4), [0, 7, 200, 11]);
    }

    #[test]
    fn skipped_duplicates_are_not_duplicates() {
        let mut f = fabric();
        let fl = flags(IndirectMode::Dst, false, false);
        let s = scatter::<u32>(
            &mut f,
            &[5, 7, 11],
            &[3, 9, 9],
            fl,
            ComputeOp::None,
            bc(true),
        );
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
        let dst = direct(sbuf_at(0, 0x1000), 1 << 24);
        let i = DmaIndirect1d::new(
            flags(IndirectMode::Src, false, false),
            src,
            dst,
            2,
            Dtype::U8,
            ComputeOp::None,
        );
        let e = fails_closed(&mut f, &mut CoreState::new(), i);
        assert!(
            matches!(e, Error::Field { .. }),
            "the direct side leaves SBUF first: {e}"
        );
        let dst = direct(FabricAddr(0x4000_0000), 1 << 24);
        let i = DmaIndirect1d::new(
            flags(IndirectMode::Src, false, false),
            src,
            dst,
            2,
            Dtype::U8,
            ComputeOp::None,
        );
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

        /// A soft-bounded scatter-add with duplicates equals `np.add.at` over the
        /// in-bounds positions, reporting exactly the others; under the hard policy any
        /// out-of-bounds index fails at the first one and writes nothing.
        #[test]
        fn scatter_add_policies(
            didx in prop::collection::vec(0u32..12, 1..48),
            src in prop::collection::vec(any::<u32>(), 48),
            bound in 1u64..12,
            hard in any::<bool>(),
        ) {
            let n = didx.len();
            let src = &src[..n];
            let mut f = fabric();
            let init: Vec<u32> = (0..12).map(|r| r * 1000).collect();
            put(&mut f, FabricAddr(TABLE), &init);
            let fl = flags(IndirectMode::Dst, hard, true);
            let s = scatter::<u32>(&mut f, src, &didx, fl, ComputeOp::Add, bc(true));
            let first_oob = didx.iter().position(|&d| u64::from(d) >= bound);
            if let (true, Some(k)) = (hard, first_oob) {
                let e = fails_closed(&mut f, &mut state(bound), s);
                let named = matches!(e, Error::IndexOutOfBounds { position, .. } if position as usize == k);
                prop_assert!(named, "{}", e);
                return Ok(());
            }
            let out = run(&mut f, &mut state(bound), s);
            let mut expected = init;
            let mut skipped = Vec::new();
            for (k, (&d, &v)) in didx.iter().zip(src).enumerate() {
                if u64::from(d) >= bound {
                    skipped.push(SkippedIndex { side: IndexSide::Dst, position: k as u32, value: d });
                } else {
                    expected[d as usize] = expected[d as usize].wrapping_add(v);
                }
            }
            prop_assert_eq!(get::<u32>(&f, FabricAddr(TABLE), 12), expected);
            prop_assert_eq!(out.oob_notification, !skipped.is_empty());
            prop_assert_eq!(out.bytes_written, 4 * (n - skipped.len()) as u64);
            prop_assert_eq!(out.skipped, skipped);
        }
    }
}
