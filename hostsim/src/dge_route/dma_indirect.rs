//! DMA_INDIRECT 0xbb (DMA_INDIRECT1D) as one `Kind::Indirect` request.
//!
//! Each side is `n` rows of `elem_size` bytes: the pattern `[(E, n), (1, E)]` in dtype
//! elements (`E = elem_size / dtype size`, the row innermost). An indirect side (the
//! source in SRC and SRC_DST modes, the destination in DST and SRC_DST) replaces the row
//! dimension with its u32 indices (SBUF partition 0, contiguous), step `elem_size` bytes,
//! bound from its BOUND_CHECK_REG; a direct side steps `step_elem` rows. The policy is
//! `idx_bound_is_err` -> hard error, else a soft skip, silent when the side's register
//! sets `bc_disable_oob_error_notif`. `non_unique_dst_idx`, the compute op, the dtype and
//! `eng_mask` carry over; rows are the units of the sequential element order, so rows
//! move in order and each reads its source when it moves (the reference's reading).
//!
//! With a shape register (the walk `[outer][n][inner]` of `validate::dma_indirect_walk`,
//! the struct module's semantics) an indexed side is the 4-D pattern
//! `[(extent * inner * E, outer), (inner * E, n), (E, inner), (1, E)]` with the index
//! dim second, indirection step `inner * elem_size` and bound the smaller of the
//! register's and the extent; a direct side is
//! `[(n * inner * S, outer), (inner * S, n), (S, inner), (1, E)]` with `S = step_elem * E`.
//! The two share the DGE's element order, which is the walk's; the element stays the
//! sequential unit. Without a shape register the `outer` and `inner` dims are left out.
//!
//! reshape_kind GATHER_TRANSPOSE is one `Kind::GatherTranspose` request: the source is
//! the indexed `[n][C]` rows in HBM as above, the destination the `[C][n]` pattern
//! `[(dst_step_elem, C), (1, n)]` (its outer step in elements on HBM and in partitions
//! on SBUF/PSUM, the DGE's convention, which is the ISA's); the DGE walks it in the
//! source's `(r, c)` order, a source row per sequential unit.

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::{AccessPattern, ElementOrder, Request};
use dma::{Addr4, AddressMap, FabricAddr, Location, Space};

use super::{flat_pattern, Lowered, RowSide};
use crate::error::Error;
use crate::isa::rule::FieldPath;
use crate::isa::validate::dma_indirect_walk;
use crate::isa::{BoundCheckReg, BoundRegisters, DmaIndirect1d, IndirectWalk, ReshapeKind};

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("DMA_INDIRECT1D", field)
}

/// One side's fields.
struct SideFields {
    indirect: bool,
    start: FabricAddr,
    index: Addr4,
    bound: BoundCheckReg,
    step: u16,
}

/// The lowered DMA_INDIRECT.
pub(super) fn lower(
    map: &AddressMap,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<Lowered, Error> {
    let (dtype, op, flags) = (d.dtype()?, d.compute_op()?, d.flags());
    let mode = flags.indirect_mode()?;
    let size = d.src_elem_size();
    let walk = dma_indirect_walk(map, regs, d)?;
    // Validation proved elem_size is a non-zero multiple of the dtype size.
    let row = size / dtype.size() as u32;
    let bytes = walk.inner.saturating_mul(u64::from(size));
    let field = match walk.extent {
        Some(_) => at("shape_reg.indirection_step"),
        None => at("src_elem_size"),
    };
    let step = i32::try_from(bytes).map_err(|_| Error::DgeRowStep { field, step: bytes })?;
    let shape = Shape {
        n: u32::from(d.src_num_elem()),
        row,
        step,
        dtype,
        walk,
    };
    let lower_side = |f: SideFields| side(map, regs, f, &shape, flags.idx_bound_is_err());
    let (src, src_ind) = lower_side(SideFields {
        indirect: mode.gathers(),
        start: d.src_start_addr(),
        index: d.src_idx_start_addr(),
        bound: d.src_idx_bound_reg(),
        step: d.src_step_elem(),
    })?;
    let (dst, dst_ind) = lower_side(SideFields {
        indirect: mode.scatters(),
        start: d.dst_start_addr(),
        index: d.dst_idx_start_addr(),
        bound: d.dst_idx_bound_reg(),
        step: d.dst_step_elem(),
    })?;
    let transpose = d.reshape_kind()? == ReshapeKind::GatherTranspose;
    let on_core = map.locate(d.dst_start_addr())?.space != Space::Hbm;
    let (kind, dst) = match transpose {
        false => (Kind::Indirect, dst),
        true => {
            let rows = (i64::from(d.dst_step_elem()), row);
            let columns = (1, u32::from(d.src_num_elem()));
            let t = AccessPattern::new(d.dst_start_addr(), dtype.size() as u32, &[rows, columns]);
            (Kind::GatherTranspose, t)
        }
    };
    let mut req = Request::new(kind, src, dst, dtype);
    req.src_indirection = src_ind;
    req.dst_indirection = dst_ind;
    req.op = op;
    req.non_unique_dst_idx = flags.non_unique_dst_idx();
    req.eng_mask = d.eng_mask();
    req.order = ElementOrder::Sequential {
        unit_elems: u64::from(row),
    };
    let rows = |start| {
        Some(RowSide {
            start,
            bytes: u64::from(size),
        })
    };
    let requests = match (transpose, on_core) {
        (true, true) => column_requests(map, d, &req, row)?,
        _ => vec![req],
    };
    Ok(Lowered {
        requests,
        rows: [rows(d.src_start_addr()), rows(d.dst_start_addr())],
        report_skips: true,
        skipped_offsets: Vec::new(),
    })
}

/// A gather-transpose into SBUF/PSUM: one `Kind::Indirect` request per destination row
/// `c` (partition `P + c * dst_step_elem`), moving element `c` of every indexed row. The
/// DGE's GATHER TRANSPOSE walks its destination with the two dimensions swapped, which
/// puts the partition step on the index axis on core; per-row requests keep the ISA's
/// layout. The source is in HBM and the destination on core, so the requests never
/// touch each other's bytes; each reports the same skips (deduplicated by the outcome).
fn column_requests(
    map: &AddressMap,
    d: &DmaIndirect1d,
    transpose: &Request,
    columns: u32,
) -> Result<Vec<Request>, Error> {
    let (dtype, n) = (d.dtype()?, u32::from(d.src_num_elem()));
    let esize = dtype.size() as u64;
    let head = map.locate(d.dst_start_addr())?;
    (0..columns)
        .map(|c| {
            let partition = head.partition + c * u32::from(d.dst_step_elem());
            let row = map.fabric_addr(Location { partition, ..head })?;
            let src_start = d.src_start_addr().0 + u64::from(c) * esize;
            let src = AccessPattern::new(
                FabricAddr(src_start),
                esize as u32,
                &[(i64::from(columns), n), (1, 1)],
            );
            let (dst, _) = flat_pattern(map, row, dtype, &[(1, n), (1, 1)]);
            let mut req = Request::new(Kind::Indirect, src, dst, dtype);
            req.src_indirection = transpose.src_indirection;
            req.eng_mask = transpose.eng_mask;
            Ok(req)
        })
        .collect()
}

/// What both sides share: `n` positions of `row` dtype elements, the indirection step
/// in bytes, and the walk.
struct Shape {
    n: u32,
    row: u32,
    step: i32,
    dtype: dma::Dtype,
    walk: IndirectWalk,
}

/// One side's pattern and indirection.
fn side(
    map: &AddressMap,
    regs: &BoundRegisters,
    f: SideFields,
    shape: &Shape,
    hard: bool,
) -> Result<(AccessPattern, Option<Indirection>), Error> {
    let (walk, row) = (&shape.walk, i64::from(shape.row));
    // The unit of a row step: an element on an indexed side, step_elem elements on a
    // direct one; rows per outer point: the extent, or the n positions.
    let (unit, rows) = match f.indirect {
        true => (row, walk.extent.map_or(shape.n, |e| e)),
        false => (i64::from(f.step) * row, shape.n),
    };
    // dma_indirect_walk held outer and inner to 2^20 and the walk to the fabric.
    let (outer, inner) = (walk.outer as u32, walk.inner as u32);
    let position = i64::from(inner) * unit;
    let dims = [
        (i64::from(rows) * position, outer),
        (position, shape.n),
        (unit, inner),
        (1, shape.row),
    ];
    // Without a shape the outer and inner dims (count 1) are left out: the 1-D pattern.
    let kept: Vec<(i64, u32)> = dims
        .iter()
        .enumerate()
        .filter(|&(k, &(_, count))| matches!(k, 1 | 3) || count > 1)
        .map(|(_, &d)| d)
        .collect();
    let dim = usize::from(outer > 1);
    let (pattern, front) = flat_pattern(map, f.start, shape.dtype, &kept);
    if !f.indirect {
        return Ok((pattern, None));
    }
    let policy = match (hard, f.bound.bc_disable_oob_error_notif()) {
        (true, _) => OobPolicy::HardError,
        (false, true) => OobPolicy::SoftSkipSilent,
        (false, false) => OobPolicy::SoftSkip,
    };
    let ind = Indirection {
        dim: front + dim,
        indices: f.index.to_fabric(map)?,
        step: shape.step,
        bound: walk.bound(regs.bound(f.bound)?),
        policy,
    };
    Ok((pattern, Some(ind)))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::dma_indirect::{
        direct, flags, indirect, shaped_flags, shaped_state, BUF, DIDX, SHAPE_REG, SIDX, TABLE,
    };
    use super::super::test_support::*;
    use crate::core_state::{CoreState, IndexSide, SkippedIndex};
    use crate::error::Error;
    use crate::isa::{
        BoundCheckReg, BoundRegisters, DmaIndirect1d, DmaSide, IndirectDim, IndirectMode, ShapeReg,
    };
    use dma::{ComputeOp, Dtype, FabricAddr};
    use proptest::prelude::*;

    crate::test_support::dma_indirect::dma_indirect_cases!(route());

    /// A side of `size`-byte rows from `start`: indexed from SBUF p0 byte `idx`, or direct.
    fn side(start: FabricAddr, idx: Option<u32>, size: u32, bound: BoundCheckReg) -> DmaSide {
        match idx {
            Some(at) => indirect(start, at, size, bound),
            None => direct(start, size),
        }
    }

    /// Bound register pairs 0/1 and 2/3.
    fn state(bounds: [u64; 2]) -> CoreState {
        let mut regs = BoundRegisters::new();
        regs.set_bound(0, bounds[0]).unwrap();
        regs.set_bound(2, bounds[1]).unwrap();
        CoreState::with_registers(regs)
    }

    #[test]
    fn soft_skips_are_reported_in_position_order() {
        // both sides out of bounds at position 0 (src reported first), dst at position 2
        let mut f = fabric_with_table(TABLE, 64);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[9, 1, 2]);
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[9, 0, 7]);
        let src = side(
            FabricAddr(TABLE),
            Some(SIDX),
            8,
            BoundCheckReg::enabled(0, false).unwrap(),
        );
        let dst = side(
            sbuf_at(1, 0),
            Some(DIDX),
            8,
            BoundCheckReg::enabled(2, true).unwrap(),
        );
        let fl = flags(IndirectMode::SrcDst, false, false);
        let i = DmaIndirect1d::new(fl, src, dst, 3, Dtype::U32, ComputeOp::None);
        let out = agree(&mut f, &mut state([4, 4]), i.into());
        let skip = |side, position, value| SkippedIndex {
            side,
            position,
            value,
        };
        assert_eq!(
            out.skipped,
            [
                skip(IndexSide::Src, 0, 9),
                skip(IndexSide::Dst, 0, 9),
                skip(IndexSide::Dst, 2, 7)
            ]
        );
        assert!(out.oob_notification, "the src register notifies");
        assert_eq!(out.bytes_written, 8);
    }

    #[test]
    fn errors_name_what_the_reference_names() {
        let mut f = fabric_with_table(TABLE, 64);
        // a duplicate at position 1 comes before the OOB index at position 2
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[3, 3, 99]);
        put::<u32>(&mut f, sbuf_at(0, BUF), &[0; 6]);
        let src = side(sbuf_at(0, BUF), None, 8, BoundCheckReg::DISABLED);
        let dst = side(
            FabricAddr(TABLE),
            Some(DIDX),
            8,
            BoundCheckReg::enabled(0, false).unwrap(),
        );
        let i = DmaIndirect1d::new(
            flags(IndirectMode::Dst, true, false),
            src,
            dst,
            3,
            Dtype::U32,
            ComputeOp::Add,
        );
        let e = agree_err(&mut f, &mut state([10, 10]), i.into());
        assert!(
            matches!(
                e,
                Error::DuplicateDestination {
                    value: 3,
                    first: 0,
                    second: 1
                }
            ),
            "{e}"
        );
        // a row off the fabric: bound disabled, index far past HBM
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[1, u32::MAX]);
        let src = side(
            FabricAddr(TABLE),
            Some(SIDX),
            1 << 24,
            BoundCheckReg::DISABLED,
        );
        let dst = side(
            FabricAddr(0x4000_0000),
            None,
            1 << 24,
            BoundCheckReg::DISABLED,
        );
        let i = DmaIndirect1d::new(
            flags(IndirectMode::Src, false, false),
            src,
            dst,
            2,
            Dtype::U8,
            ComputeOp::None,
        );
        let e = agree_err(&mut f, &mut CoreState::new(), i.into());
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

    #[test]
    fn rows_past_the_32_bit_step_are_refused() {
        // 2 GiB rows, both sides indexed: the reference can run it, the DGE's signed
        // 32-bit indirection step cannot hold the row
        let mut f = fabric_with_table(TABLE, 64);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[0]);
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[1]);
        let size = 1 << 31;
        let src = side(FabricAddr(0), Some(SIDX), size, BoundCheckReg::DISABLED);
        let dst = side(FabricAddr(0), Some(DIDX), size, BoundCheckReg::DISABLED);
        let fl = flags(IndirectMode::SrcDst, true, false);
        let i = DmaIndirect1d::new(fl, src, dst, 1, Dtype::U8, ComputeOp::None);
        let digest = f.digest();
        let mut route = super::super::DgeRoute::new();
        let e = route
            .execute(&mut f, &mut CoreState::new(), &i.into(), engine())
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::DgeRowStep {
                    step: 0x8000_0000,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(f.digest(), digest);
    }

    #[test]
    fn shaped_steps_past_31_bits_are_refused() {
        // 2^15 elements of 64 KiB inside the dim Y: a 2 GiB indirection step, which the
        // other routes run (it fits the 32-bit MAC) and the DGE's signed step cannot hold
        let mut f = fabric_with_table(TABLE, 64);
        put::<u32>(&mut f, sbuf_at(0, SIDX), &[1]);
        let size = 1 << 16;
        let src = side(FabricAddr(0), Some(SIDX), size, BoundCheckReg::DISABLED);
        let dst = side(FabricAddr(1 << 33), None, size, BoundCheckReg::DISABLED);
        let fl = shaped_flags(IndirectMode::Src, IndirectDim::Y, true);
        let i = DmaIndirect1d::new(fl, src, dst, 1, Dtype::U8, ComputeOp::None)
            .with_shape_reg(ShapeReg::at(SHAPE_REG).unwrap());
        let digest = f.digest();
        let e = super::super::DgeRoute::new()
            .execute(
                &mut f,
                &mut shaped_state([1 << 15, 2, 1, 1], 0),
                &i.into(),
                engine(),
            )
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "DMA_INDIRECT1D.shape_reg.indirection_step = 2147483648: a row step above 2^31 - 1 bytes does not fit the DGE's signed 32-bit indirection step (mulusan_2x32)"
        );
        assert!(super::super::by_design(&e));
        assert_eq!(f.digest(), digest);
    }

    fn mode_strategy() -> impl Strategy<Value = IndirectMode> {
        prop::sample::select(vec![
            IndirectMode::Src,
            IndirectMode::Dst,
            IndirectMode::SrcDst,
        ])
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random DMA_INDIRECTs (every mode, compute op, policy, dtype, row width, queue
        /// mask), indices in and out of bounds with duplicates: the DGE route and the
        /// reference leave the same fabric, report the same outcome or the same error, and
        /// a failing instruction writes nothing.
        #[test]
        fn dma_indirect_matches_the_reference(
            mode in mode_strategy(),
            op in 0u8..5,
            dtype in prop::sample::select(vec![Dtype::U8, Dtype::Bf16, Dtype::F32, Dtype::I32]),
            elems in 1u32..6,
            sidx in prop::collection::vec(0u32..14, 1..40),
            didx in prop::collection::vec(0u32..14, 40),
            bounds in (1u64..16, 1u64..16),
            checks in (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>()),
            hard in any::<bool>(),
            non_unique in any::<bool>(),
            dst_sbuf in any::<bool>(),
            eng_mask in 1u16..,
        ) {
            let n = sidx.len();
            let size = elems * dtype.size() as u32;
            let mut f = fabric_with_table(TABLE, 4096);
            fill_random(&mut f, sbuf_at(0, BUF), 4096, n as u64);
            put::<u32>(&mut f, sbuf_at(0, SIDX), &sidx);
            put::<u32>(&mut f, sbuf_at(0, DIDX), &didx[..n]);
            let bc = |enabled, reg, silent| match enabled {
                true => BoundCheckReg::enabled(reg, silent).unwrap(),
                false => BoundCheckReg::DISABLED,
            };
            let (src, dst) = match mode {
                IndirectMode::Src => (
                    side(FabricAddr(TABLE), Some(SIDX), size, bc(checks.0, 0, checks.1)),
                    side(sbuf_at(0, BUF), None, size, BoundCheckReg::DISABLED),
                ),
                _ => {
                    let s = match mode {
                        IndirectMode::SrcDst => side(FabricAddr(TABLE), Some(SIDX), size, bc(checks.0, 0, checks.1)),
                        _ => side(sbuf_at(0, BUF), None, size, BoundCheckReg::DISABLED),
                    };
                    let base = if dst_sbuf { sbuf_at(2, 0) } else { FabricAddr(0x10_0000) };
                    (s, side(base, Some(DIDX), size, bc(checks.2, 2, checks.3)))
                }
            };
            let op = ComputeOp::from_code(op).unwrap();
            let fl = flags(mode, hard, non_unique);
            let i = DmaIndirect1d::new(fl, src, dst, n as u16, dtype, op).with_eng_mask(eng_mask);
            let _ = compare(&mut f, &mut state([bounds.0, bounds.1]), i.into());
        }
    }
}
