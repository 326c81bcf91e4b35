//! Validity of the DMA-level instructions: DMA_INDIRECT 0xbb, PSEUDO_EMBEDDING_UPDATE
//! 0xca and DMA_MEMCPY 0xb8 (DMA_DIRECT2D).

use dma::{Addr4, AddressMap, ComputeOp, Dtype, FabricAddr, Generation, Location, Space};

use super::pool_ops::MAX_INDICES;
use super::{addr4_span, fabric_span, run_bytes};
use crate::error::Error;
use crate::isa::fields::{BoundCheckReg, IndirectDim, IndirectMode, ReshapeKind};
use crate::isa::registers::BoundRegisters;
use crate::isa::rule::{self, ensure, FieldPath, Rule};
use crate::isa::structs::{
    DmaDirect2d, DmaIndirect1d, IndirectWalk, Operand, PseudoEmbeddingUpdate,
};

/// Bytes per DMA_INDIRECT / EMBEDDING_UPDATE index (u32).
const INDEX_BYTES: u64 = 4;

/// DMA_INDIRECT: equal counts of 1..=4096, equal element sizes that hold whole dtype
/// elements, a queue, indirect dims X without a shape register (with one: X on a side
/// without indices, one dim for two indexed sides), and per side either
/// indices (SBUF partition 0, a usable bound register, a mapped base) or a direct run on
/// the fabric with no index address and no bound. With reshape_kind GATHER_TRANSPOSE,
/// also `gather_transpose`'s rules, and the destination's transposed extent on the
/// fabric. A shape register's extents are in registers: [`dma_indirect_walk`] checks
/// them at run time. A direct side's first `n` elements are checked here, its whole run
/// (longer with a shape register) there too.
pub fn dma_indirect(generation: Generation, d: &DmaIndirect1d) -> Result<(), Error> {
    d.check_decode()?;
    let at = DmaIndirect1d::at;
    let mode = d.flags().indirect_mode()?;
    d.compute_op()?;
    let n = d.src_num_elem();
    rule::equal(
        at("dst_num_elem"),
        d.dst_num_elem(),
        n,
        Rule::DmaIndirectCountsEqual,
    )?;
    rule::nonzero(at("src_num_elem"), n)?;
    rule::at_most(at("src_num_elem"), n, MAX_INDICES, Rule::IndexCount)?;
    let size = d.src_elem_size();
    rule::nonzero(at("src_elem_size"), size)?;
    rule::equal(
        at("dst_elem_size"),
        d.dst_elem_size(),
        size,
        Rule::ElemSizeEqual,
    )?;
    elem_size_fits(at("src_elem_size"), size, d.dtype()?)?;
    queues(at("eng_mask"), d.eng_mask())?;
    shape(d)?;
    let map = AddressMap::new(generation);
    let dst_run = match d.reshape_kind()? {
        ReshapeKind::Rows => run_bytes(&[(n, d.dst_step_elem())], size),
        ReshapeKind::GatherTranspose => gather_transpose(&map, d)?,
    };
    let unique_flag = !d.flags().non_unique_dst_idx() || mode.scatters();
    let flags_at = at("flags.non_unique_dst_idx");
    ensure(unique_flag, flags_at, 1u8, Rule::UnusedNonUnique)?;
    let errors = d.flags().idx_bound_is_err();
    let src = Side {
        indirect: mode.gathers(),
        start: (at("src_start_addr"), d.src_start_addr()),
        index: (at("src_idx_start_addr"), d.src_idx_start_addr()),
        bound: (at("src_idx_bound_reg"), d.src_idx_bound_reg()),
        step: (at("src_step_elem"), d.src_step_elem()),
        run: run_bytes(&[(n, d.src_step_elem())], size),
    };
    src.check(&map, n, errors)?;
    let dst = Side {
        indirect: mode.scatters(),
        start: (at("dst_start_addr"), d.dst_start_addr()),
        index: (at("dst_idx_start_addr"), d.dst_idx_start_addr()),
        bound: (at("dst_idx_bound_reg"), d.dst_idx_bound_reg()),
        step: (at("dst_step_elem"), d.dst_step_elem()),
        run: dst_run,
    };
    dst.check(&map, n, errors)
}

/// reshape_kind GATHER_TRANSPOSE: source indirection only, a plain copy, no shape
/// register, source rows in HBM, and a destination row step (`dst_step_elem`) of at
/// least `n` elements on HBM or 1 partition on SBUF/PSUM, the last row on the fabric.
/// Returns the bytes the direct-side check covers from `dst_start_addr`: every row on
/// HBM, row 0 on core (the last row, same offset `C - 1` steps on, is checked here).
fn gather_transpose(map: &AddressMap, d: &DmaIndirect1d) -> Result<u128, Error> {
    let at = DmaIndirect1d::at;
    let mode = d.flags().indirect_mode()?;
    let src_only = mode == IndirectMode::Src;
    ensure(
        src_only,
        at("flags.indirect_mode"),
        mode.code(),
        Rule::TransposeMode,
    )?;
    let op = d.compute_op()?;
    let copy = op == ComputeOp::None;
    ensure(copy, at("compute_op"), op.code(), Rule::TransposeComputeOp)?;
    let shape = d.shape_reg();
    ensure(
        !shape.present(),
        at("shape_reg"),
        shape.bits(),
        Rule::TransposeShapeReg,
    )?;
    let src = d.src_start_addr();
    let in_hbm = map.locate(src).is_ok_and(|l| l.space == Space::Hbm);
    ensure(
        in_hbm,
        at("src_start_addr"),
        src.0,
        Rule::TransposeSourceHbm,
    )?;
    let dst = map
        .locate(d.dst_start_addr())
        .map_err(rule::dma_at(at("dst_start_addr")))?;
    let (n, step) = (d.src_num_elem(), d.dst_step_elem());
    let on_core = dst.space != Space::Hbm;
    let least = if on_core { 1 } else { n };
    ensure(
        step >= least,
        at("dst_step_elem"),
        step,
        Rule::TransposePitch,
    )?;
    let dsize = d.dtype()?.size() as u128;
    // The caller checked elem_size is a non-zero multiple of the dtype size.
    let columns = u128::from(d.src_elem_size()) / dsize;
    let row = u128::from(n) * dsize;
    if !on_core {
        return Ok((columns - 1) * u128::from(step) * dsize + row);
    }
    let last = u128::from(dst.partition) + (columns - 1) * u128::from(step);
    let last = Location {
        partition: u32::try_from(last).unwrap_or(u32::MAX),
        ..dst
    };
    let start = map
        .fabric_addr(last)
        .map_err(rule::dma_at(at("dst_start_addr")))?;
    fabric_span(map, at("dst_start_addr"), start, row)?;
    Ok(row)
}

/// `eng_mask` enables at least one queue.
fn queues(at: FieldPath, eng_mask: u16) -> Result<(), Error> {
    ensure(eng_mask != 0, at, eng_mask, Rule::EngineMask)
}

/// A whole number of dtype elements per row.
fn elem_size_fits(at: FieldPath, size: u32, dtype: Dtype) -> Result<(), Error> {
    let whole = (size as usize).is_multiple_of(dtype.size());
    ensure(whole, at, size, Rule::ElemSizeDtype)
}

/// Without a shape register both indirect dims are X. With one: its four registers
/// exist, a side without indices keeps dim X, and two indexed sides share one dim.
fn shape(d: &DmaIndirect1d) -> Result<(), Error> {
    let at = DmaIndirect1d::at;
    let shape = d.shape_reg();
    let (flags, mode) = (d.flags(), d.flags().indirect_mode()?);
    let dims = [
        ("flags.gather_dim", flags.gather_dim(), mode.gathers()),
        ("flags.scatter_dim", flags.scatter_dim(), mode.scatters()),
    ];
    let x = IndirectDim::X.code();
    if !shape.present() {
        for (name, dim, _) in dims {
            rule::equal(at(name), dim.code(), x, Rule::IndirectDimWithoutShapeReg)?;
        }
        return rule::equal(at("shape_reg.reg"), shape.reg(), 0, Rule::UnusedShapeReg);
    }
    rule::at_most(at("shape_reg"), shape.reg(), 60, Rule::ShapeRegisterRange)?;
    for (name, dim, indexed) in dims {
        if !indexed {
            rule::equal(at(name), dim.code(), x, Rule::UnusedIndirectDim)?;
        }
    }
    let (gather, scatter) = (flags.gather_dim(), flags.scatter_dim());
    if mode == IndirectMode::SrcDst {
        let same = gather == scatter;
        ensure(
            same,
            at("flags.scatter_dim"),
            scatter.code(),
            Rule::ShapeDimsDiffer,
        )?;
    }
    Ok(())
}

/// The most elements a shaped DMA_INDIRECT walks (the project's limit: the reference and
/// the POOL kernel list every element's move, and the DGE's sequential order cuts a run
/// per element, so the walk is bounded like the index count).
pub const MAX_WALK_ELEMENTS: u64 = 1 << 20;

/// The element walk of a validated DMA_INDIRECT `d` with the registers `regs`
/// ([`IndirectWalk::ROWS`] without a shape register), checked before any route moves
/// anything: every extent at least 1, the indirection step (`elem_size` times the
/// extents inside the dim) within 32 bits, at most [`MAX_WALK_ELEMENTS`] elements, each
/// indexed side's whole tensor and each direct side's whole run on the fabric of `map`.
pub fn dma_indirect_walk(
    map: &AddressMap,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<IndirectWalk, Error> {
    let at = DmaIndirect1d::at;
    let Some(xyzw) = regs.shape(d.shape_reg())? else {
        return Ok(IndirectWalk::ROWS);
    };
    let names = ["shape_reg.x", "shape_reg.y", "shape_reg.z", "shape_reg.w"];
    for (name, extent) in names.into_iter().zip(xyzw) {
        ensure(extent >= 1, at(name), extent, Rule::ShapeExtent)?;
    }
    let mode = d.flags().indirect_mode()?;
    let dim = match mode.gathers() {
        true => d.flags().gather_dim(),
        false => d.flags().scatter_dim(),
    };
    let walk = IndirectWalk::of_shape(xyzw, dim);
    let size = u64::from(d.src_elem_size());
    let step = walk.inner.saturating_mul(size);
    let step_ok = step <= u64::from(u32::MAX);
    ensure(
        step_ok,
        at("shape_reg.indirection_step"),
        step,
        Rule::ShapeIndirectionStep,
    )?;
    let n = u64::from(d.src_num_elem());
    let elements = walk.per_position().saturating_mul(n);
    rule::at_most(
        at("shape_reg.elements"),
        elements,
        MAX_WALK_ELEMENTS,
        Rule::ShapeElementCount,
    )?;
    let sides = [
        ("src_start_addr", d.src(), mode.gathers()),
        ("dst_start_addr", d.dst(), mode.scatters()),
    ];
    for (name, side, indexed) in sides {
        // Every factor is below 2^32 and elements <= 2^20: u128 holds the products.
        let bytes = match indexed {
            true => {
                let extent = u128::from(walk.extent.unwrap_or(1));
                u128::from(walk.per_position()) * extent * u128::from(size)
            }
            false => {
                let last = u128::from(elements.saturating_sub(1)) * u128::from(side.step_elem);
                (last + 1) * u128::from(size)
            }
        };
        fabric_span(map, at(name), side.start_addr, bytes)?;
    }
    Ok(walk)
}

/// One side of a DMA_INDIRECT, each field with its path.
struct Side {
    indirect: bool,
    start: (FieldPath, FabricAddr),
    index: (FieldPath, Addr4),
    bound: (FieldPath, BoundCheckReg),
    step: (FieldPath, u16),
    /// Bytes a direct side spans.
    run: u128,
}

impl Side {
    /// An indirect side: indices in SBUF partition 0, a usable bound (its notification
    /// bit only on a soft skip, `errors` false), a step of 0 or 1, a mapped base. A direct
    /// side: no index address, no bound, and its whole run on the fabric.
    fn check(&self, map: &AddressMap, n: u16, errors: bool) -> Result<(), Error> {
        let (index_at, index) = self.index;
        let (bound_at, bound) = self.bound;
        let (start_at, start) = self.start;
        let checks = self.indirect && bound.bc_enabled();
        ensure(
            checks || bound.bits() == 0,
            bound_at,
            bound.bits(),
            Rule::UnusedBoundReg,
        )?;
        if !self.indirect {
            rule::equal(index_at, index.0, 0, Rule::UnusedIndexAddr)?;
            return fabric_span(map, start_at, start, self.run);
        }
        let silenced = errors && bound.bc_disable_oob_error_notif();
        ensure(
            !silenced,
            bound_at,
            bound.bits(),
            Rule::NotificationInErrorMode,
        )?;
        let (step_at, step) = self.step;
        rule::at_most(step_at, step, 1, Rule::IndexedSideStep)?;
        let (space, partition) = addr4_span(map, index_at, index, u64::from(n) * INDEX_BYTES)?;
        let partition0 = space == Space::Sbuf && partition == 0;
        ensure(partition0, index_at, index.0, Rule::IndexInSbufPartition0)?;
        let wide_ok = !bound.bc_enabled() || bound.bc_reg() <= 62;
        ensure(wide_ok, bound_at, bound.bc_reg(), Rule::WideBoundRegister)?;
        // Rows an index selects are bounds-checked at run time; the base must be mapped.
        map.region_of(start)
            .map(drop)
            .map_err(rule::dma_at(start_at))
    }
}

/// PSEUDO_EMBEDDING_UPDATE: u32 indices, 1..=4096 of them, a non-empty table whose stride
/// covers a row, a queue, and the table, indices and data on the fabric.
pub fn embedding_update(generation: Generation, e: &PseudoEmbeddingUpdate) -> Result<(), Error> {
    e.check_decode()?;
    let at = PseudoEmbeddingUpdate::at;
    e.cce_op()?;
    let index = e.index_dtype()?.code();
    rule::equal(
        at("index_dtype"),
        index,
        Dtype::U32.code(),
        Rule::EmbeddingIndexDtype,
    )?;
    let seq = e.sequence_length();
    rule::nonzero(at("sequence_length"), seq)?;
    rule::at_most(at("sequence_length"), seq, MAX_INDICES, Rule::IndexCount)?;
    let t = e.table();
    rule::nonzero(at("embedding_table_num_entries"), t.num_entries)?;
    rule::nonzero(at("embed_entry_num_elements"), t.num_elements)?;
    let row_bytes = u64::from(t.num_elements) * e.dtype()?.size() as u64;
    let stride_ok = u64::from(t.stride_bytes) >= row_bytes;
    ensure(
        stride_ok,
        at("embed_entry_stride_bytes"),
        t.stride_bytes,
        Rule::EmbeddingStride,
    )?;
    queues(at("eng_mask"), e.eng_mask())?;
    embedding_spans(&AddressMap::new(generation), e, row_bytes)
}

/// The table, the indices and the data rows of a checked embedding update on the fabric.
fn embedding_spans(
    map: &AddressMap,
    e: &PseudoEmbeddingUpdate,
    row_bytes: u64,
) -> Result<(), Error> {
    let at = PseudoEmbeddingUpdate::at;
    let t = e.table();
    // num_entries >= 1 was checked by the caller.
    let rows = u128::from(t.num_entries.saturating_sub(1));
    let table_bytes = rows * u128::from(t.stride_bytes) + u128::from(row_bytes);
    fabric_span(
        map,
        at("embedding_table_base_addr"),
        t.base_addr,
        table_bytes,
    )?;
    let seq = u64::from(e.sequence_length());
    addr4_span(
        map,
        at("embed_index_addr"),
        e.embed_index_addr(),
        seq * INDEX_BYTES,
    )?;
    // seq <= 4096 and row_bytes < 2^35, so the product fits in u64.
    addr4_span(
        map,
        at("embed_data_addr"),
        e.embed_data_addr(),
        seq * row_bytes,
    )
    .map(drop)
}

/// DMA_MEMCPY: non-zero counts, an element size holding whole dtype elements, a queue,
/// and both 2-D runs on the fabric.
pub fn dma_memcpy(generation: Generation, d: &DmaDirect2d) -> Result<(), Error> {
    d.check_decode()?;
    let at = DmaDirect2d::at;
    d.compute_op()?;
    let size = d.elem_size();
    rule::nonzero(at("elem_size"), size)?;
    elem_size_fits(at("elem_size"), size, d.dtype()?)?;
    let [n0, n1] = d.num_elem();
    rule::nonzero(at("num_elem"), n0.min(n1))?;
    queues(at("eng_mask"), d.eng_mask())?;
    let map = AddressMap::new(generation);
    for (name, side) in [("src_start_addr", d.src()), ("dst_start_addr", d.dst())] {
        let [s0, s1] = side.step_elem;
        let run = run_bytes(&[(n0, s0), (n1, s1)], size);
        fabric_span(&map, at(name), side.start_addr, run)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::fields::{DmaIndirectFlags, ShapeReg};
    use crate::isa::structs::{Direct2dSide, DmaSide, EmbeddingTable, IndirectWalk};
    use crate::isa::validate::{assert_fabric, assert_rule};
    use dma::{CceOp, ComputeOp};

    const SUNDA: Generation = Generation::Sunda;
    const SBUF_P1: u64 = dma::addr::SBUF_BASE + dma::addr::SBUF_STRIDE;

    fn sbuf(partition: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, partition, offset).unwrap()
    }

    fn side(start: u64, index: Addr4, bound: BoundCheckReg) -> DmaSide {
        DmaSide {
            start_addr: FabricAddr(start),
            idx_start_addr: index,
            elem_size: 256,
            step_elem: 1,
            bound,
        }
    }

    fn flags(
        mode: IndirectMode,
        gather_dim: IndirectDim,
        scatter_dim: IndirectDim,
    ) -> DmaIndirectFlags {
        DmaIndirectFlags::new(mode, true, false, gather_dim, scatter_dim)
    }

    /// A gather-transpose of 8 rows of 4 f32 (HBM) into `dst`, rows `step` apart.
    fn transpose(dst: u64, step: u16) -> DmaIndirect1d {
        let bc = BoundCheckReg::enabled(0, false).unwrap();
        let src = DmaSide {
            elem_size: 16,
            ..side(0x1000, sbuf(0, 0), bc)
        };
        let out = DmaSide {
            elem_size: 16,
            step_elem: step,
            ..side(dst, Addr4(0), BoundCheckReg::DISABLED)
        };
        let f = flags(IndirectMode::Src, IndirectDim::X, IndirectDim::X);
        DmaIndirect1d::new(f, src, out, 8, Dtype::F32, ComputeOp::None)
            .with_reshape_kind(ReshapeKind::GatherTranspose)
    }

    #[test]
    fn gather_transpose_rules() {
        dma_indirect(SUNDA, &transpose(0x10_0000, 8)).unwrap();
        dma_indirect(SUNDA, &transpose(SBUF_P1, 1)).unwrap();
        let at = "DMA_INDIRECT1D.dst_step_elem";
        assert_rule(
            dma_indirect(SUNDA, &transpose(0x10_0000, 7)),
            at,
            7,
            Rule::TransposePitch,
        );
        assert_rule(
            dma_indirect(SUNDA, &transpose(SBUF_P1, 0)),
            at,
            0,
            Rule::TransposePitch,
        );
        // rows in partitions 1, 43, 85, 127 fit; one more partition step does not
        dma_indirect(SUNDA, &transpose(SBUF_P1, 42)).unwrap();
        assert_fabric(
            dma_indirect(SUNDA, &transpose(SBUF_P1, 43)),
            "DMA_INDIRECT1D.dst_start_addr",
        );
        let t = transpose(0x10_0000, 8);
        let scatter = DmaIndirect1d::new(
            flags(IndirectMode::Dst, IndirectDim::X, IndirectDim::X),
            t.dst(),
            DmaSide {
                idx_start_addr: sbuf(0, 0),
                bound: t.src().bound,
                ..t.src()
            },
            8,
            Dtype::F32,
            ComputeOp::None,
        )
        .with_reshape_kind(ReshapeKind::GatherTranspose);
        assert_rule(
            dma_indirect(SUNDA, &scatter),
            "DMA_INDIRECT1D.flags.indirect_mode",
            1,
            Rule::TransposeMode,
        );
        let add = DmaIndirect1d::new(t.flags(), t.src(), t.dst(), 8, Dtype::F32, ComputeOp::Add)
            .with_reshape_kind(ReshapeKind::GatherTranspose);
        assert_rule(
            dma_indirect(SUNDA, &add),
            "DMA_INDIRECT1D.compute_op",
            1,
            Rule::TransposeComputeOp,
        );
        let shaped = t.with_shape_reg(ShapeReg::at(4).unwrap());
        assert_rule(
            dma_indirect(SUNDA, &shaped),
            "DMA_INDIRECT1D.shape_reg",
            u64::from(shaped.shape_reg().bits()),
            Rule::TransposeShapeReg,
        );
        let mut from_sbuf = t;
        from_sbuf = DmaIndirect1d::new(
            from_sbuf.flags(),
            DmaSide {
                start_addr: FabricAddr(SBUF_P1),
                ..t.src()
            },
            t.dst(),
            8,
            Dtype::F32,
            ComputeOp::None,
        )
        .with_reshape_kind(ReshapeKind::GatherTranspose);
        assert_rule(
            dma_indirect(SUNDA, &from_sbuf),
            "DMA_INDIRECT1D.src_start_addr",
            SBUF_P1,
            Rule::TransposeSourceHbm,
        );
    }

    /// A gather of 4096 rows of 256 bytes from HBM into SBUF partition 1.
    fn gather_dma() -> DmaIndirect1d {
        let bc = BoundCheckReg::enabled(62, false).unwrap();
        let src = side(0, sbuf(0, 0), bc);
        let dst = side(SBUF_P1, Addr4(0), BoundCheckReg::DISABLED);
        let f = flags(IndirectMode::Src, IndirectDim::X, IndirectDim::X);
        DmaIndirect1d::new(
            f,
            DmaSide {
                step_elem: 0,
                ..src
            },
            DmaSide {
                step_elem: 0,
                ..dst
            },
            4096,
            Dtype::F32,
            ComputeOp::None,
        )
    }

    /// A scatter-add of 10 rows from HBM into HBM rows.
    fn scatter_dma(src_bound: BoundCheckReg) -> DmaIndirect1d {
        let src = side(0x1000, Addr4(0), src_bound);
        let dst = side(
            0x100_0000,
            sbuf(0, 0x40),
            BoundCheckReg::enabled(0, false).unwrap(),
        );
        let f = flags(IndirectMode::Dst, IndirectDim::X, IndirectDim::X);
        DmaIndirect1d::new(f, src, dst, 10, Dtype::Bf16, ComputeOp::Add)
    }

    fn embedding(table: EmbeddingTable, seq: u32) -> PseudoEmbeddingUpdate {
        PseudoEmbeddingUpdate::new(
            table,
            sbuf(0, 0),
            sbuf(0, 0x4000),
            seq,
            Dtype::F32,
            CceOp::Add,
        )
    }

    fn table() -> EmbeddingTable {
        EmbeddingTable {
            base_addr: FabricAddr(0x10_0000),
            num_entries: 50_000,
            stride_bytes: 64,
            num_elements: 8,
        }
    }

    fn memcpy(elem_size: u32, num_elem: [u16; 2], dtype: Dtype) -> DmaDirect2d {
        let src = Direct2dSide {
            start_addr: FabricAddr(0),
            step_elem: [1, 64],
        };
        let dst = Direct2dSide {
            start_addr: FabricAddr(SBUF_P1),
            step_elem: [1, 16],
        };
        DmaDirect2d::new(src, dst, elem_size, num_elem, dtype, ComputeOp::Max)
    }

    #[test]
    fn good_instructions_pass_everywhere() {
        for g in Generation::ALL {
            dma_indirect(g, &gather_dma()).unwrap();
            dma_indirect(g, &scatter_dma(BoundCheckReg::DISABLED)).unwrap();
            embedding_update(g, &embedding(table(), 4096)).unwrap();
            dma_memcpy(g, &memcpy(4, [16, 8], Dtype::F32)).unwrap();
        }
    }

    #[test]
    fn dma_indirect_counts_equal_and_limits() {
        assert_rule(
            dma_indirect(SUNDA, &gather_dma().with_num_elem(4096, 4095)),
            "DMA_INDIRECT1D.dst_num_elem",
            4095,
            Rule::DmaIndirectCountsEqual,
        );
        assert_rule(
            dma_indirect(SUNDA, &gather_dma().with_num_elem(4097, 4097)),
            "DMA_INDIRECT1D.src_num_elem",
            4097,
            Rule::IndexCount,
        );
        assert_rule(
            dma_indirect(SUNDA, &gather_dma().with_num_elem(0, 0)),
            "DMA_INDIRECT1D.src_num_elem",
            0,
            Rule::NonZero,
        );
    }

    #[test]
    fn dma_indirect_elem_sizes() {
        let f = flags(IndirectMode::Src, IndirectDim::X, IndirectDim::X);
        let src = side(0, sbuf(0, 0), BoundCheckReg::DISABLED);
        let dst = DmaSide {
            idx_start_addr: Addr4(0),
            elem_size: 128,
            ..src
        };
        let d = DmaIndirect1d::new(f, src, dst, 4, Dtype::F32, ComputeOp::None);
        assert_rule(
            dma_indirect(SUNDA, &d),
            "DMA_INDIRECT1D.dst_elem_size",
            128,
            Rule::ElemSizeEqual,
        );
        let odd = DmaSide {
            elem_size: 6,
            ..src
        };
        let d = DmaIndirect1d::new(
            f,
            odd,
            DmaSide {
                idx_start_addr: Addr4(0),
                ..odd
            },
            4,
            Dtype::F32,
            ComputeOp::Add,
        );
        assert_rule(
            dma_indirect(SUNDA, &d),
            "DMA_INDIRECT1D.src_elem_size",
            6,
            Rule::ElemSizeDtype,
        );
        let zero = DmaSide {
            elem_size: 0,
            ..src
        };
        let d = DmaIndirect1d::new(
            f,
            zero,
            DmaSide {
                idx_start_addr: Addr4(0),
                ..zero
            },
            4,
            Dtype::F32,
            ComputeOp::Add,
        );
        assert_rule(
            dma_indirect(SUNDA, &d),
            "DMA_INDIRECT1D.src_elem_size",
            0,
            Rule::NonZero,
        );
    }

    #[test]
    fn dma_indirect_engine_mask() {
        assert_rule(
            dma_indirect(SUNDA, &gather_dma().with_eng_mask(0)),
            "DMA_INDIRECT1D.eng_mask",
            0,
            Rule::EngineMask,
        );
    }

    #[test]
    fn dma_indirect_index_in_sbuf_partition0() {
        let mut d = gather_dma();
        for bad in [sbuf(1, 0), Addr4::encode(Space::Psum, 0, 0).unwrap()] {
            let src = side(0, bad, BoundCheckReg::DISABLED);
            let dst = side(SBUF_P1, Addr4(0), BoundCheckReg::DISABLED);
            d = DmaIndirect1d::new(
                d.flags(),
                src,
                DmaSide {
                    step_elem: 0,
                    ..dst
                },
                16,
                Dtype::F32,
                ComputeOp::None,
            );
            assert_rule(
                dma_indirect(SUNDA, &d),
                "DMA_INDIRECT1D.src_idx_start_addr",
                bad.0.into(),
                Rule::IndexInSbufPartition0,
            );
        }
        // 4096 u32 indices must fit partition 0 after the start offset
        let src = side(0, sbuf(0, 192 * 1024 - 4 * 4095), BoundCheckReg::DISABLED);
        let d = DmaIndirect1d::new(
            d.flags(),
            src,
            side(SBUF_P1, Addr4(0), BoundCheckReg::DISABLED),
            4096,
            Dtype::F32,
            ComputeOp::None,
        );
        assert_fabric(dma_indirect(SUNDA, &d), "DMA_INDIRECT1D.src_idx_start_addr");
    }

    #[test]
    fn dma_indirect_unused_index_addr_and_bound() {
        let f = flags(IndirectMode::Dst, IndirectDim::X, IndirectDim::X);
        let good = scatter_dma(BoundCheckReg::DISABLED);
        let src = side(0x1000, sbuf(0, 4), BoundCheckReg::DISABLED);
        let dst = side(0x100_0000, sbuf(0, 0x40), BoundCheckReg::DISABLED);
        let d = DmaIndirect1d::new(f, src, dst, 10, Dtype::Bf16, ComputeOp::Add);
        assert_rule(
            dma_indirect(SUNDA, &d),
            "DMA_INDIRECT1D.src_idx_start_addr",
            4,
            Rule::UnusedIndexAddr,
        );
        let bc = BoundCheckReg::enabled(3, false).unwrap();
        assert_rule(
            dma_indirect(SUNDA, &scatter_dma(bc)),
            "DMA_INDIRECT1D.src_idx_bound_reg",
            bc.bits().into(),
            Rule::UnusedBoundReg,
        );
        dma_indirect(SUNDA, &good).unwrap();
    }

    #[test]
    fn dma_indirect_fields_that_would_change_nothing_are_refused() {
        use zerocopy::FromBytes;
        let at = |field| format!("DMA_INDIRECT1D.{field}");
        // a scatter of 10 rows (idx_bound_is_err) with `bound` and `step` on its indexed side
        let scatter = |bound: BoundCheckReg, step: u16| {
            let f = flags(IndirectMode::Dst, IndirectDim::X, IndirectDim::X);
            let src = side(0x1000, Addr4(0), BoundCheckReg::DISABLED);
            let dst = DmaSide {
                step_elem: step,
                ..side(0x100_0000, sbuf(0, 0x40), bound)
            };
            DmaIndirect1d::new(f, src, dst, 10, Dtype::Bf16, ComputeOp::Add)
        };
        let bound = |bits: u8| BoundCheckReg::read_from_bytes(&[bits]).unwrap();
        dma_indirect(SUNDA, &scatter(bound(0x80), 1)).unwrap();
        dma_indirect(SUNDA, &scatter(bound(0), 0)).unwrap();
        // the notification bit under idx_bound_is_err (a hard error notifies nothing)
        let rule = Rule::NotificationInErrorMode;
        let e = dma_indirect(SUNDA, &scatter(bound(0xc0), 1));
        assert_rule(e, &at("dst_idx_bound_reg"), 0xc0, rule);
        // a disabled register's other bits, on an indexed side
        let e = dma_indirect(SUNDA, &scatter(bound(5), 1));
        assert_rule(e, &at("dst_idx_bound_reg"), 5, Rule::UnusedBoundReg);
        // a step on an indexed side
        let e = dma_indirect(SUNDA, &scatter(bound(0x80), 7));
        assert_rule(e, &at("dst_step_elem"), 7, Rule::IndexedSideStep);
        // a shape register number without a shape register
        let unused = ShapeReg::read_from_bytes(&[8]).unwrap();
        let e = dma_indirect(SUNDA, &gather_dma().with_shape_reg(unused));
        assert_rule(e, &at("shape_reg.reg"), 8, Rule::UnusedShapeReg);
        // non_unique_dst_idx on a gather
        let f = DmaIndirectFlags::new(
            IndirectMode::Src,
            true,
            true,
            IndirectDim::X,
            IndirectDim::X,
        );
        let g = gather_dma();
        let d = DmaIndirect1d::new(f, g.src(), g.dst(), 4096, Dtype::F32, ComputeOp::None);
        assert_rule(
            dma_indirect(SUNDA, &d),
            &at("flags.non_unique_dst_idx"),
            1,
            Rule::UnusedNonUnique,
        );
    }

    #[test]
    fn dma_indirect_wide_bound_register() {
        let f = flags(IndirectMode::Src, IndirectDim::X, IndirectDim::X);
        let src = side(0, sbuf(0, 0), BoundCheckReg::enabled(63, false).unwrap());
        let dst = side(SBUF_P1, Addr4(0), BoundCheckReg::DISABLED);
        let d = DmaIndirect1d::new(
            f,
            src,
            DmaSide {
                step_elem: 0,
                ..dst
            },
            8,
            Dtype::F32,
            ComputeOp::None,
        );
        assert_rule(
            dma_indirect(SUNDA, &d),
            "DMA_INDIRECT1D.src_idx_bound_reg",
            63,
            Rule::WideBoundRegister,
        );
    }

    #[test]
    fn dma_indirect_dim_without_shape_register() {
        let src = side(0, sbuf(0, 0), BoundCheckReg::DISABLED);
        let dst = side(0x10_0000, sbuf(0, 0x4000), BoundCheckReg::DISABLED);
        let both = |g, s| {
            DmaIndirect1d::new(
                flags(IndirectMode::SrcDst, g, s),
                src,
                dst,
                8,
                Dtype::U8,
                ComputeOp::None,
            )
        };
        assert_rule(
            dma_indirect(SUNDA, &both(IndirectDim::Y, IndirectDim::X)),
            "DMA_INDIRECT1D.flags.gather_dim",
            1,
            Rule::IndirectDimWithoutShapeReg,
        );
        assert_rule(
            dma_indirect(SUNDA, &both(IndirectDim::X, IndirectDim::W)),
            "DMA_INDIRECT1D.flags.scatter_dim",
            3,
            Rule::IndirectDimWithoutShapeReg,
        );
        let shaped = both(IndirectDim::Z, IndirectDim::Z).with_shape_reg(ShapeReg::at(60).unwrap());
        dma_indirect(SUNDA, &shaped).unwrap();
        let shaped = shaped.with_shape_reg(ShapeReg::at(61).unwrap());
        assert_rule(
            dma_indirect(SUNDA, &shaped),
            "DMA_INDIRECT1D.shape_reg",
            61,
            Rule::ShapeRegisterRange,
        );
    }

    #[test]
    fn dma_indirect_shaped_dims() {
        let reg = ShapeReg::at(8).unwrap();
        let indexed = side(0, sbuf(0, 0), BoundCheckReg::DISABLED);
        let direct = side(0x10_0000, Addr4(0), BoundCheckReg::DISABLED);
        let inst = |mode, g, s| {
            let (src, dst) = match mode {
                IndirectMode::Src => (indexed, direct),
                IndirectMode::Dst => (direct, indexed),
                IndirectMode::SrcDst => (
                    indexed,
                    DmaSide {
                        start_addr: FabricAddr(0x10_0000),
                        idx_start_addr: sbuf(0, 0x4000),
                        ..indexed
                    },
                ),
            };
            DmaIndirect1d::new(flags(mode, g, s), src, dst, 8, Dtype::U8, ComputeOp::None)
                .with_shape_reg(reg)
        };
        let (x, y, w) = (IndirectDim::X, IndirectDim::Y, IndirectDim::W);
        dma_indirect(SUNDA, &inst(IndirectMode::Src, w, x)).unwrap();
        dma_indirect(SUNDA, &inst(IndirectMode::Dst, x, y)).unwrap();
        dma_indirect(SUNDA, &inst(IndirectMode::SrcDst, y, y)).unwrap();
        // the dim of the side without indices is not ignored: it must be X
        assert_rule(
            dma_indirect(SUNDA, &inst(IndirectMode::Src, w, y)),
            "DMA_INDIRECT1D.flags.scatter_dim",
            1,
            Rule::UnusedIndirectDim,
        );
        assert_rule(
            dma_indirect(SUNDA, &inst(IndirectMode::Dst, w, y)),
            "DMA_INDIRECT1D.flags.gather_dim",
            3,
            Rule::UnusedIndirectDim,
        );
        // two indexed sides walk one shape along one dim
        let e = dma_indirect(SUNDA, &inst(IndirectMode::SrcDst, y, w));
        assert_eq!(
            e.as_ref().unwrap_err().to_string(),
            "DMA_INDIRECT1D.flags.scatter_dim = 3: with a shape register and both sides indexed, scatter_dim must equal gather_dim (one walk, one indexed dim)"
        );
        assert_rule(
            e,
            "DMA_INDIRECT1D.flags.scatter_dim",
            3,
            Rule::ShapeDimsDiffer,
        );
    }

    /// A gather along `dim` of 4 indices from a `[2][3][5][4]`-shaped u16 tensor at
    /// `start` (shape registers 8..=11) into a direct run at `out`.
    fn shaped_gather(dim: IndirectDim, start: u64, out: u64) -> (DmaIndirect1d, BoundRegisters) {
        let mut regs = BoundRegisters::new();
        regs.set_shape(8, [4, 5, 3, 2]).unwrap();
        let src = DmaSide {
            elem_size: 2,
            ..side(start, sbuf(0, 0), BoundCheckReg::DISABLED)
        };
        let dst = DmaSide {
            elem_size: 2,
            ..side(out, Addr4(0), BoundCheckReg::DISABLED)
        };
        let f = flags(IndirectMode::Src, dim, IndirectDim::X);
        let d = DmaIndirect1d::new(f, src, dst, 4, Dtype::U16, ComputeOp::None)
            .with_shape_reg(ShapeReg::at(8).unwrap());
        (d, regs)
    }

    #[test]
    fn shaped_walks() {
        let map = AddressMap::new(SUNDA);
        let walk = |dim| {
            let (d, regs) = shaped_gather(dim, 0x1000, 0x10_0000);
            dma_indirect(SUNDA, &d).unwrap();
            dma_indirect_walk(&map, &regs, &d).unwrap()
        };
        let w = |outer, inner, extent| IndirectWalk {
            outer,
            inner,
            extent: Some(extent),
        };
        assert_eq!(walk(IndirectDim::X), w(30, 1, 4));
        assert_eq!(walk(IndirectDim::Y), w(6, 4, 5));
        assert_eq!(walk(IndirectDim::Z), w(2, 20, 3));
        assert_eq!(walk(IndirectDim::W), w(1, 60, 2));
        assert_eq!(w(6, 4, 5).bound(Some(3)), Some(3));
        assert_eq!(w(6, 4, 5).bound(Some(9)), Some(5));
        assert_eq!(w(6, 4, 5).bound(None), Some(5));
        assert_eq!(IndirectWalk::ROWS.bound(None), None);
        // without a shape register the registers are not read: the 1-D walk
        let (d, mut regs) = shaped_gather(IndirectDim::X, 0x1000, 0x10_0000);
        regs.set_shape(8, [0; 4]).unwrap();
        let plain = d.with_shape_reg(ShapeReg::NONE);
        dma_indirect(SUNDA, &plain).unwrap();
        assert_eq!(
            dma_indirect_walk(&map, &regs, &plain).unwrap(),
            IndirectWalk::ROWS
        );
    }

    #[test]
    fn shaped_walk_rules() {
        let map = AddressMap::new(SUNDA);
        let (d, mut regs) = shaped_gather(IndirectDim::Z, 0x1000, 0x10_0000);
        let run = |regs: &BoundRegisters, d: &DmaIndirect1d| {
            dma_indirect(SUNDA, d).and_then(|()| dma_indirect_walk(&map, regs, d).map(drop))
        };
        regs.set(10, 0).unwrap();
        let e = run(&regs, &d);
        assert_eq!(
            e.as_ref().unwrap_err().to_string(),
            "DMA_INDIRECT1D.shape_reg.z = 0: a shape's extents X, Y, Z, W (registers reg..reg+3) must each be at least 1"
        );
        assert_rule(e, "DMA_INDIRECT1D.shape_reg.z", 0, Rule::ShapeExtent);
        // inner = X * Y = 2^16 elements of 2^16 bytes: an indirection step of 2^32
        regs.set_shape(8, [1 << 8, 1 << 8, 2, 1]).unwrap();
        let wide = DmaSide {
            elem_size: 1 << 16,
            ..d.src()
        };
        let big = DmaIndirect1d::new(
            d.flags(),
            wide,
            DmaSide {
                elem_size: 1 << 16,
                ..d.dst()
            },
            1,
            Dtype::U16,
            ComputeOp::None,
        )
        .with_shape_reg(d.shape_reg());
        assert_rule(
            run(&regs, &big),
            "DMA_INDIRECT1D.shape_reg.indirection_step",
            1 << 32,
            Rule::ShapeIndirectionStep,
        );
        // 4 positions of 2^18 elements (2^20) pass; 4 of 2^18 + 2^10 do not
        regs.set_shape(8, [1 << 9, 1, 1, 1 << 9]).unwrap();
        run(&regs, &d).unwrap();
        regs.set_shape(8, [(1 << 8) + 1, 1 << 10, 1, 1]).unwrap();
        assert_rule(
            run(&regs, &d),
            "DMA_INDIRECT1D.shape_reg.elements",
            4 * ((1 << 18) + (1 << 10)),
            Rule::ShapeElementCount,
        );
        // extents whose product passes 64 bits saturate and are refused, not wrapped
        regs.set_shape(8, [u32::MAX; 4]).unwrap();
        assert_rule(
            run(&regs, &d),
            "DMA_INDIRECT1D.shape_reg.indirection_step",
            u64::MAX,
            Rule::ShapeIndirectionStep,
        );
    }

    #[test]
    fn shaped_tensors_and_runs_lie_on_the_fabric() {
        let map = AddressMap::new(SUNDA);
        // the [2][3][5][4] u16 tensor is 240 bytes: it fits before the end of v2 HBM...
        let end = 32 << 30;
        let (d, regs) = shaped_gather(IndirectDim::Y, end - 240, 0x10_0000);
        dma_indirect(SUNDA, &d).unwrap();
        dma_indirect_walk(&map, &regs, &d).unwrap();
        // ...and two bytes later it does not, though the first row of every index does
        let (d, regs) = shaped_gather(IndirectDim::Y, end - 238, 0x10_0000);
        dma_indirect(SUNDA, &d).unwrap();
        assert_fabric(
            dma_indirect_walk(&map, &regs, &d).map(drop),
            "DMA_INDIRECT1D.src_start_addr",
        );
        // the direct run: 4 positions x 24 elements of 2 bytes = 192 bytes
        let (d, regs) = shaped_gather(IndirectDim::Y, 0x1000, end - 192);
        dma_indirect_walk(&map, &regs, &d).unwrap();
        let (d, regs) = shaped_gather(IndirectDim::Y, 0x1000, end - 190);
        dma_indirect(SUNDA, &d).unwrap();
        assert_fabric(
            dma_indirect_walk(&map, &regs, &d).map(drop),
            "DMA_INDIRECT1D.dst_start_addr",
        );
    }

    #[test]
    fn dma_indirect_addresses_off_the_fabric() {
        // the direct destination: 10 rows of 256 bytes from 1 KiB before the end of v2 HBM
        let src = side(0x1000, Addr4(0), BoundCheckReg::DISABLED);
        let dst = side(0, sbuf(0, 0), BoundCheckReg::DISABLED);
        let f = flags(IndirectMode::Src, IndirectDim::X, IndirectDim::X);
        let near_end = DmaSide {
            start_addr: FabricAddr((32 << 30) - 1024),
            idx_start_addr: Addr4(0),
            ..dst
        };
        let d = DmaIndirect1d::new(
            f,
            DmaSide {
                idx_start_addr: sbuf(0, 0),
                ..src
            },
            near_end,
            10,
            Dtype::F32,
            ComputeOp::None,
        );
        assert_fabric(dma_indirect(SUNDA, &d), "DMA_INDIRECT1D.dst_start_addr");
        dma_indirect(Generation::Cayman, &d).unwrap();
        // an indirect base in an SBUF partition gap is unmapped
        let gap = DmaSide {
            start_addr: FabricAddr(dma::addr::SBUF_BASE + 240 * 1024),
            ..src
        };
        let d = DmaIndirect1d::new(
            f,
            DmaSide {
                idx_start_addr: sbuf(0, 0),
                ..gap
            },
            near_end,
            10,
            Dtype::F32,
            ComputeOp::None,
        );
        assert_fabric(
            dma_indirect(Generation::Cayman, &d),
            "DMA_INDIRECT1D.src_start_addr",
        );
    }

    #[test]
    fn embedding_index_dtype() {
        let e = embedding(table(), 8).with_index_dtype(Dtype::U16);
        assert_rule(
            embedding_update(SUNDA, &e),
            "PSEUDO_EMBEDDING_UPDATE.index_dtype",
            0x5,
            Rule::EmbeddingIndexDtype,
        );
    }

    #[test]
    fn embedding_sequence_length_limits() {
        assert_rule(
            embedding_update(SUNDA, &embedding(table(), 4097)),
            "PSEUDO_EMBEDDING_UPDATE.sequence_length",
            4097,
            Rule::IndexCount,
        );
        assert_rule(
            embedding_update(SUNDA, &embedding(table(), 0)),
            "PSEUDO_EMBEDDING_UPDATE.sequence_length",
            0,
            Rule::NonZero,
        );
    }

    #[test]
    fn embedding_table_shape() {
        let t = EmbeddingTable {
            num_entries: 0,
            ..table()
        };
        assert_rule(
            embedding_update(SUNDA, &embedding(t, 8)),
            "PSEUDO_EMBEDDING_UPDATE.embedding_table_num_entries",
            0,
            Rule::NonZero,
        );
        let t = EmbeddingTable {
            num_elements: 0,
            ..table()
        };
        assert_rule(
            embedding_update(SUNDA, &embedding(t, 8)),
            "PSEUDO_EMBEDDING_UPDATE.embed_entry_num_elements",
            0,
            Rule::NonZero,
        );
        let t = EmbeddingTable {
            stride_bytes: 31,
            ..table()
        };
        assert_rule(
            embedding_update(SUNDA, &embedding(t, 8)),
            "PSEUDO_EMBEDDING_UPDATE.embed_entry_stride_bytes",
            31,
            Rule::EmbeddingStride,
        );
        assert_rule(
            embedding_update(SUNDA, &embedding(table(), 8).with_eng_mask(0)),
            "PSEUDO_EMBEDDING_UPDATE.eng_mask",
            0,
            Rule::EngineMask,
        );
    }

    #[test]
    fn embedding_off_the_fabric() {
        // 2^32 - 1 rows of 16 bytes past 4 GiB: 64 GiB, beyond v2 and inside v3 HBM
        let t = EmbeddingTable {
            base_addr: FabricAddr(0),
            num_entries: u32::MAX,
            stride_bytes: 16,
            num_elements: 4,
        };
        assert_fabric(
            embedding_update(SUNDA, &embedding(t, 8)),
            "PSEUDO_EMBEDDING_UPDATE.embedding_table_base_addr",
        );
        embedding_update(Generation::Cayman, &embedding(t, 8)).unwrap();
        // 4096 rows of 64 bytes (256 KiB) after 16 KiB of indices overflow even a v4 partition
        let e = embedding(
            EmbeddingTable {
                num_elements: 16,
                ..table()
            },
            4096,
        );
        assert_fabric(
            embedding_update(Generation::Mariana, &e),
            "PSEUDO_EMBEDDING_UPDATE.embed_data_addr",
        );
        // 3100 rows of 32 bytes = 99 200 bytes from offset 100 000 pass the v2 partition end
        let e = PseudoEmbeddingUpdate::new(
            table(),
            sbuf(0, 0),
            sbuf(0, 100_000),
            3100,
            Dtype::F32,
            CceOp::Min,
        );
        assert_fabric(
            embedding_update(SUNDA, &e),
            "PSEUDO_EMBEDDING_UPDATE.embed_data_addr",
        );
        let e = PseudoEmbeddingUpdate::new(
            table(),
            sbuf(0, 192 * 1024 - 8),
            sbuf(1, 0),
            3,
            Dtype::F32,
            CceOp::Min,
        );
        assert_fabric(
            embedding_update(SUNDA, &e),
            "PSEUDO_EMBEDDING_UPDATE.embed_index_addr",
        );
    }

    #[test]
    fn memcpy_rules() {
        assert_rule(
            dma_memcpy(SUNDA, &memcpy(4, [0, 8], Dtype::F32)),
            "DMA_DIRECT2D.num_elem",
            0,
            Rule::NonZero,
        );
        assert_rule(
            dma_memcpy(SUNDA, &memcpy(0, [1, 1], Dtype::F32)),
            "DMA_DIRECT2D.elem_size",
            0,
            Rule::NonZero,
        );
        assert_rule(
            dma_memcpy(SUNDA, &memcpy(6, [1, 1], Dtype::F32)),
            "DMA_DIRECT2D.elem_size",
            6,
            Rule::ElemSizeDtype,
        );
        assert_rule(
            dma_memcpy(SUNDA, &memcpy(4, [1, 1], Dtype::F32).with_eng_mask(0)),
            "DMA_DIRECT2D.eng_mask",
            0,
            Rule::EngineMask,
        );
        // dst rows: (8 - 1) * 16 + 16 elements of 1 KiB = 128 KiB fits v2; 200 rows do not
        dma_memcpy(SUNDA, &memcpy(1024, [16, 8], Dtype::U8)).unwrap();
        assert_fabric(
            dma_memcpy(SUNDA, &memcpy(1024, [16, 200], Dtype::U8)),
            "DMA_DIRECT2D.dst_start_addr",
        );
    }
}
