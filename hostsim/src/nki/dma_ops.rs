//! The DMA-side NKI ops: `dma_gather` / `dma_scatter` (DMA_INDIRECT 0xbb), `dma_copy`
//! over access patterns (DMA_MEMCPY 0xb8, DMA_DIRECT2D), `embedding_update`
//! (PSEUDO_EMBEDDING_UPDATE 0xca) and `dma_gather_transpose` (DMA_INDIRECT 0xbb with
//! reshape_kind GATHER_TRANSPOSE).
//!
//! Requests longer than the ISA's 4096 indices are split into several instructions, in
//! index order, so their memory effect is the one long request's (updates of one row
//! still apply in index order). The split is recorded ([`super::IndexSplit`]): errors and
//! skipped indices name the op's positions, and a scatter's `unique_indices = true` is
//! checked across all its instructions before the first runs.

use dma::{Addr4, AddressMap, CceOp, ComputeOp, Dtype, FabricAddr, Generation, Space};

use super::{
    addr4_plus, arg_error, ensure_arg, equal, fabric_plus, nonempty, on_core, on_fabric,
    same_dtype, BoundSetting, IndexSplit, Lowered, Tensor, UniqueDestinations,
};
use crate::error::Error;
use crate::isa::validate::MAX_INDICES;
use crate::isa::{
    BoundCheckReg, Direct2dSide, DmaDirect2d, DmaIndirect1d, DmaIndirectFlags, DmaSide,
    EmbeddingTable, IndirectDim, IndirectMode, Instruction, PseudoEmbeddingUpdate, ReshapeKind,
};

/// Indices per instruction.
const CHUNK: u32 = MAX_INDICES as u32;

/// NKI `oob_mode`: what an index at or past the indexed tensor's row count does.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OobMode {
    /// The instruction fails and writes nothing (`idx_bound_is_err`).
    #[default]
    Error,
    /// The index moves nothing and is reported (soft skip).
    Skip,
}

/// The options of `dma_gather` / `dma_scatter`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaOptions {
    /// The OOB policy.
    pub oob: OobMode,
    /// Scatter: indices are promised unique (duplicates are an error); `false` sets
    /// `non_unique_dst_idx`, so duplicates accumulate or the last wins.
    pub unique_indices: bool,
    /// `dst (op)= row` (NONE copies).
    pub compute_op: ComputeOp,
    /// The bound register pair (`reg`, `reg + 1`) holding the indexed tensor's rows.
    pub bound_reg: u8,
    /// Raise the OOB notification on a skip (`!bc_disable_oob_error_notif`).
    pub notify_oob: bool,
}

impl Default for DmaOptions {
    /// Error on OOB, unique indices, plain copy, bound register 0, notification on.
    fn default() -> Self {
        DmaOptions {
            oob: OobMode::Error,
            unique_indices: true,
            compute_op: ComputeOp::None,
            bound_reg: 0,
            notify_oob: true,
        }
    }
}

/// NKI `dma_gather`: `dst[i, :] (op)= src[indices[i], :]`. `src` is `[N, D]`, `indices`
/// `[1, M]` u32 in SBUF partition 0, `dst` `[M, D]` of `src`'s dtype; the bound is `N`.
pub fn dma_gather(
    generation: Generation,
    src: &Tensor,
    indices: &Tensor,
    dst: &Tensor,
    opts: DmaOptions,
) -> Result<Lowered, Error> {
    let r = RowRequest::check("dma_gather", generation, (src, dst), indices, opts)?;
    r.lower(IndirectMode::Src, src.shape[0])
}

/// NKI `dma_scatter`: `dst[indices[i], :] (op)= src[i, :]` in index order (with
/// `unique_indices = false` and an add, `np.add.at`). `src` is `[M, D]`, `indices`
/// `[1, M]` u32 in SBUF partition 0, `dst` `[N, D]` of `src`'s dtype; the bound is `N`.
pub fn dma_scatter(
    generation: Generation,
    src: &Tensor,
    indices: &Tensor,
    dst: &Tensor,
    opts: DmaOptions,
) -> Result<Lowered, Error> {
    let r = RowRequest::check("dma_scatter", generation, (src, dst), indices, opts)?;
    r.lower(IndirectMode::Dst, dst.shape[0])
}

/// NKI `dma_gather_transpose`: `dst = src[indices].T`, i.e. `dst[c, i] = src[indices[i], c]`.
/// `src` is `[N, C]` in HBM, `indices` `[1, M]` u32 in SBUF partition 0, `dst` `[C, M]`
/// of `src`'s dtype: on SBUF/PSUM row `c` is partition `P + c`, on HBM rows are `M`
/// elements apart (so `M <= 65535`, the 16-bit row step). An index `>= N` fails the
/// instruction under `OobMode::Error` and moves nothing of its column under `Skip`
/// (bound register 0). Lowered to DMA_INDIRECT with reshape_kind GATHER_TRANSPOSE, one per
/// 4096 indices, each writing its columns of `dst`. NKI's indirect `dma_transpose` needs
/// trn2 or later: sunda refuses it.
pub fn dma_gather_transpose(
    generation: Generation,
    src: &Tensor,
    indices: &Tensor,
    dst: &Tensor,
    oob: OobMode,
) -> Result<Lowered, Error> {
    let op = "dma_gather_transpose";
    if generation == Generation::Sunda {
        return Err(trn2_only(op));
    }
    nonempty(op, ["src.shape[0]", "src.shape[1]"], src)?;
    let k = "NKI: src.shape[-1] must be <= 128 (an indirect dma_transpose; here the elements of a source row, prod(src.shape[1:]))";
    let transposed = u64::from(src.shape[1]) <= super::transpose::MAX_TRANSPOSED;
    ensure_arg(transposed, op, "src.shape[1]", src.shape[1], k)?;
    two_byte_elements(op, src.dtype)?;
    let cast = "must equal src.dtype (elements move without a cast)";
    same_dtype(op, "dst.dtype", dst.dtype, src.dtype, cast)?;
    let map = AddressMap::new(generation);
    let (index_a, count) = index_vector(&map, op, indices)?;
    let rows = "must equal src.shape[1] (one destination row per source column)";
    equal(op, "dst.shape[0]", dst.shape[0], src.shape[1], rows)?;
    let cols = "must equal the index count (one destination column per index)";
    equal(op, "dst.shape[1]", dst.shape[1], count, cols)?;
    let (from, to) = (
        on_fabric(&map, op, "src", src)?,
        on_fabric(&map, op, "dst", dst)?,
    );
    let on_core = map.locate(to).is_ok_and(|l| l.space != Space::Hbm);
    let step = match on_core {
        true => 1,
        false => u16::try_from(count).map_err(|_| {
            arg_error(
                op,
                "dst.shape[1]",
                count.into(),
                "an HBM destination row must fit the 16-bit row step (<= 65535 elements)",
            )
        })?,
    };
    let wide = "a row must fit the 32-bit elem_size";
    let row_bytes = u32::try_from(src.row_bytes())
        .map_err(|_| arg_error(op, "src.shape[1]", src.shape[1].into(), wide))?;
    let bc = BoundCheckReg::enabled(0, false)?;
    let flags = DmaIndirectFlags::rows(IndirectMode::Src, oob == OobMode::Error, false);
    let esize = src.dtype.size() as u64;
    let mut instructions = Vec::new();
    for first in (0..count).step_by(CHUNK as usize) {
        let n = (count - first).min(CHUNK);
        let idx = addr4_plus(op, "indices", index_a, u64::from(first) * 4)?;
        let gathered = DmaSide {
            start_addr: from,
            idx_start_addr: idx,
            elem_size: row_bytes,
            step_elem: 1,
            bound: bc,
        };
        let columns = DmaSide {
            start_addr: fabric_plus(op, "dst", to, u64::from(first) * esize)?,
            idx_start_addr: Addr4(0),
            elem_size: row_bytes,
            step_elem: step,
            bound: BoundCheckReg::DISABLED,
        };
        // n <= 4096 fits the 16-bit count.
        let d = DmaIndirect1d::new(
            flags,
            gathered,
            columns,
            n as u16,
            src.dtype,
            ComputeOp::None,
        )
        .with_reshape_kind(ReshapeKind::GatherTranspose);
        instructions.push(d.into());
    }
    Lowered {
        instructions,
        bounds: vec![BoundSetting {
            reg: 0,
            bound: u64::from(src.shape[0]),
        }],
        split: split(count, None),
        ..Lowered::default()
    }
    .validated(generation)
}

/// NKI's indirect `dma_transpose` is TRN2 and later: the error for sunda.
pub(super) fn trn2_only(op: &'static str) -> Error {
    Error::NkiUnsupported {
        op,
        reason:
            "an indirect dma_transpose needs trn2 (cayman) or later; NeuronCore-v2 (sunda) has none",
    }
}

/// NKI's element rule for an indirect `dma_transpose`: `src.dtype` is 2 bytes.
pub(super) fn two_byte_elements(op: &'static str, src: Dtype) -> Result<(), Error> {
    match src.size() {
        2 => Ok(()),
        _ => Err(Error::NkiDtype {
            op,
            arg: "src.dtype",
            value: src,
            rule: "NKI: an indirect dma_transpose moves 2-byte elements (bf16, f16, u16, i16)",
        }),
    }
}

/// The split of an op of `count` indices into instructions of [`CHUNK`] (none when one
/// instruction holds them all), with its destination-index promise.
pub(super) fn split(count: u32, unique: Option<UniqueDestinations>) -> Option<IndexSplit> {
    (count > CHUNK).then_some(IndexSplit { per: CHUNK, unique })
}

/// A checked `dma_gather` / `dma_scatter`.
struct RowRequest {
    op: &'static str,
    generation: Generation,
    src: FabricAddr,
    dst: FabricAddr,
    indices: Addr4,
    count: u32,
    row_bytes: u32,
    dtype: Dtype,
    opts: DmaOptions,
}

impl RowRequest {
    /// The rules shared by both ops: equal dtypes and row widths, `[1, M]` u32 indices
    /// in SBUF partition 0, and the direct side's `M` rows.
    fn check(
        op: &'static str,
        generation: Generation,
        (src, dst): (&Tensor, &Tensor),
        indices: &Tensor,
        opts: DmaOptions,
    ) -> Result<RowRequest, Error> {
        nonempty(op, ["src.shape[0]", "src.shape[1]"], src)?;
        nonempty(op, ["dst.shape[0]", "dst.shape[1]"], dst)?;
        let cast = "must equal src.dtype (rows move without a cast)";
        same_dtype(op, "dst.dtype", dst.dtype, src.dtype, cast)?;
        let cols = "must equal src.shape[1] (whole rows move)";
        equal(op, "dst.shape[1]", dst.shape[1], src.shape[1], cols)?;
        let map = AddressMap::new(generation);
        let (index_a, count) = index_vector(&map, op, indices)?;
        let direct = if op == "dma_gather" { dst } else { src };
        let rows = "must equal the index count (one row per index)";
        equal(op, "direct side shape[0]", direct.shape[0], count, rows)?;
        let wide = "a row must fit the 32-bit elem_size";
        let row_bytes = u32::try_from(src.row_bytes())
            .map_err(|_| arg_error(op, "src.shape[1]", src.shape[1].into(), wide))?;
        Ok(RowRequest {
            op,
            generation,
            src: on_fabric(&map, op, "src", src)?,
            dst: on_fabric(&map, op, "dst", dst)?,
            indices: index_a,
            count,
            row_bytes,
            dtype: src.dtype,
            opts,
        })
    }

    /// One DMA_INDIRECT per 4096 indices, `mode` choosing the indexed side, whose rows
    /// (`bound`) go to the bound register.
    fn lower(&self, mode: IndirectMode, bound: u32) -> Result<Lowered, Error> {
        let o = self.opts;
        let bc = BoundCheckReg::enabled(o.bound_reg, !o.notify_oob)?;
        let flags = DmaIndirectFlags::new(
            mode,
            o.oob == OobMode::Error,
            !o.unique_indices,
            IndirectDim::X,
            IndirectDim::X,
        );
        let mut instructions = Vec::new();
        for first in (0..self.count).step_by(CHUNK as usize) {
            let n = (self.count - first).min(CHUNK);
            let idx = addr4_plus(self.op, "indices", self.indices, u64::from(first) * 4)?;
            let moved = u64::from(first) * u64::from(self.row_bytes);
            let (src, dst) = match mode {
                IndirectMode::Src => (
                    self.side(self.src, idx, bc),
                    self.direct(self.dst, moved, "dst")?,
                ),
                _ => (
                    self.direct(self.src, moved, "src")?,
                    self.side(self.dst, idx, bc),
                ),
            };
            // n <= 4096 fits the 16-bit count.
            let d = DmaIndirect1d::new(flags, src, dst, n as u16, self.dtype, o.compute_op);
            instructions.push(d.into());
        }
        // A scatter's destination indices promised unique are checked across the split.
        let unique =
            (mode == IndirectMode::Dst && o.unique_indices).then_some(UniqueDestinations {
                at: self.indices.to_fabric(&AddressMap::new(self.generation))?,
                count: self.count,
                bound: u64::from(bound),
                refuse: true,
                oob_errors: o.oob == OobMode::Error,
            });
        Lowered {
            instructions,
            bounds: vec![BoundSetting {
                reg: o.bound_reg,
                bound: u64::from(bound),
            }],
            split: split(self.count, unique),
            ..Lowered::default()
        }
        .validated(self.generation)
    }

    /// The indexed side: rows from `start`, indices at `idx`, bounded by `bc`.
    fn side(&self, start: FabricAddr, idx: Addr4, bc: BoundCheckReg) -> DmaSide {
        DmaSide {
            start_addr: start,
            idx_start_addr: idx,
            elem_size: self.row_bytes,
            step_elem: 1,
            bound: bc,
        }
    }

    /// The direct side: consecutive rows from `start + moved`.
    fn direct(&self, start: FabricAddr, moved: u64, arg: &'static str) -> Result<DmaSide, Error> {
        Ok(DmaSide {
            start_addr: fabric_plus(self.op, arg, start, moved)?,
            idx_start_addr: Addr4(0),
            elem_size: self.row_bytes,
            step_elem: 1,
            bound: BoundCheckReg::DISABLED,
        })
    }
}

/// A `[1, n]` u32 index vector in SBUF partition 0: its ADDR4 and `n`.
fn index_vector(map: &AddressMap, op: &'static str, t: &Tensor) -> Result<(Addr4, u32), Error> {
    nonempty(op, ["indices.shape[0]", "indices.shape[1]"], t)?;
    let u32_rule = "DMA indices must be uint32";
    same_dtype(op, "indices.dtype", t.dtype, Dtype::U32, u32_rule)?;
    let one = "must be 1 (indices are one [1, n] vector)";
    equal(op, "indices.shape[0]", t.shape[0], 1u32, one)?;
    let a = on_core(map, op, "indices", t)?;
    let p0 = matches!(a.decode(), Ok((Space::Sbuf, 0, _)));
    let rule = "must be in SBUF partition 0 (DMA_INDIRECT reads its indices there)";
    ensure_arg(p0, op, "indices", a.0, rule)?;
    Ok((a, t.shape[1]))
}

/// A 2-D DMA access pattern, NKI style: `ap = [[outer_step, outer_num], [inner_step,
/// inner_num]]` in elements from `addr`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccessPattern {
    /// Where element (0, 0) is.
    pub addr: super::TensorAddr,
    /// `[[outer_step, outer_num], [inner_step, inner_num]]`.
    pub ap: [[u32; 2]; 2],
}

/// NKI `dma_copy(dst, src)` over 2-D access patterns: element `(i, j)` of `dst` (op)=
/// element `(i, j)` of `src`, `j` innermost, elements of `dtype`. Lowered to DMA_MEMCPY
/// 0xb8 (DMA_DIRECT2D); an outer count above 65535 takes one instruction per 65535
/// outer rows. Rules: equal counts on both sides; steps and the inner count fit 16 bits.
pub fn dma_copy(
    generation: Generation,
    src: &AccessPattern,
    dst: &AccessPattern,
    dtype: Dtype,
    compute_op: ComputeOp,
) -> Result<Lowered, Error> {
    const OP: &str = "dma_copy";
    let [[_, outer], [_, inner]] = src.ap;
    let counts = "must equal the src count";
    equal(OP, "dst.ap[0][1]", dst.ap[0][1], outer, counts)?;
    equal(OP, "dst.ap[1][1]", dst.ap[1][1], inner, counts)?;
    ensure_arg(outer >= 1, OP, "src.ap[0][1]", outer, "must be at least 1")?;
    ensure_arg(inner >= 1, OP, "src.ap[1][1]", inner, "must be at least 1")?;
    let map = AddressMap::new(generation);
    let s = Side2d::new(&map, OP, src, ["src.ap[0][0]", "src.ap[1][0]", "src.addr"])?;
    let d = Side2d::new(&map, OP, dst, ["dst.ap[0][0]", "dst.ap[1][0]", "dst.addr"])?;
    let field = "must fit the 16-bit num_elem field";
    let inner16 =
        u16::try_from(inner).map_err(|_| arg_error(OP, "src.ap[1][1]", inner.into(), field))?;
    let size = dtype.size() as u32;
    let mut instructions = Vec::new();
    let chunk = u32::from(u16::MAX);
    for first in (0..outer).step_by(chunk as usize) {
        let n = (outer - first).min(chunk);
        let (ss, ds) = (s.at(first, size)?, d.at(first, size)?);
        // n <= 65535 fits the 16-bit count.
        let m = DmaDirect2d::new(ss, ds, size, [inner16, n as u16], dtype, compute_op);
        instructions.push(m.into());
    }
    Lowered {
        instructions,
        bounds: Vec::new(),
        ..Lowered::default()
    }
    .validated(generation)
}

/// One side of a `dma_copy`, its steps checked.
struct Side2d {
    start: FabricAddr,
    steps: [u16; 2],
    arg: &'static str,
}

impl Side2d {
    fn new(
        map: &AddressMap,
        op: &'static str,
        p: &AccessPattern,
        [outer_arg, inner_arg, addr_arg]: [&'static str; 3],
    ) -> Result<Side2d, Error> {
        let step = |arg, v: u32| {
            u16::try_from(v)
                .map_err(|_| arg_error(op, arg, v.into(), "must fit the 16-bit step_elem field"))
        };
        let tensor = Tensor::new(p.addr, [1, 1], Dtype::U8);
        Ok(Side2d {
            start: on_fabric(map, op, addr_arg, &tensor)?,
            steps: [step(inner_arg, p.ap[1][0])?, step(outer_arg, p.ap[0][0])?],
            arg: addr_arg,
        })
    }

    /// The DIRECT2D side of the chunk starting at outer row `first`.
    fn at(&self, first: u32, size: u32) -> Result<Direct2dSide, Error> {
        let moved = u64::from(first) * u64::from(self.steps[1]) * u64::from(size);
        Ok(Direct2dSide {
            start_addr: fabric_plus("dma_copy", self.arg, self.start, moved)?,
            step_elem: self.steps,
        })
    }
}

/// NKI-level embedding update: for each `i` in order, `table[indices[i], :] =
/// cce_op(table[indices[i], :], data[i, :])`, indices `>= R` skipped. `table` is
/// `[R, D]` (row-major, stride `D * dtype size`), `indices` `[1, S]` u32 and `data`
/// `[S, D]` of `table`'s dtype, both on-core (SBUF). Lowered to PSEUDO_EMBEDDING_UPDATE
/// 0xca, one per 4096 indices.
pub fn embedding_update(
    generation: Generation,
    table: &Tensor,
    indices: &Tensor,
    data: &Tensor,
    cce_op: CceOp,
) -> Result<Lowered, Error> {
    const OP: &str = "embedding_update";
    let s = check_embedding(table, indices, data)?;
    let map = AddressMap::new(generation);
    let geometry = table_geometry(&map, table)?;
    let index_a = on_core(&map, OP, "indices", indices)?;
    let data_a = on_core(&map, OP, "data", data)?;
    let mut instructions: Vec<Instruction> = Vec::new();
    for first in (0..s).step_by(CHUNK as usize) {
        let n = (s - first).min(CHUNK);
        let idx = addr4_plus(OP, "indices", index_a, u64::from(first) * 4)?;
        let rows = addr4_plus(OP, "data", data_a, u64::from(first) * data.row_bytes())?;
        let e = PseudoEmbeddingUpdate::new(geometry, idx, rows, n, table.dtype, cce_op);
        instructions.push(e.into());
    }
    Lowered {
        instructions,
        bounds: Vec::new(),
        split: split(s, None),
        ..Lowered::default()
    }
    .validated(generation)
}

/// `embedding_update`'s shape and dtype rules; returns the index count S.
fn check_embedding(table: &Tensor, indices: &Tensor, data: &Tensor) -> Result<u32, Error> {
    const OP: &str = "embedding_update";
    nonempty(OP, ["table.shape[0]", "table.shape[1]"], table)?;
    nonempty(OP, ["indices.shape[0]", "indices.shape[1]"], indices)?;
    let u32_rule = "embedding indices must be uint32";
    same_dtype(OP, "indices.dtype", indices.dtype, Dtype::U32, u32_rule)?;
    let one = "must be 1 (indices are one [1, n] vector)";
    equal(OP, "indices.shape[0]", indices.shape[0], 1u32, one)?;
    let s = indices.shape[1];
    let shape = "must be [indices.shape[1], table.shape[1]]";
    equal(OP, "data.shape[0]", data.shape[0], s, shape)?;
    equal(OP, "data.shape[1]", data.shape[1], table.shape[1], shape)?;
    let cast = "must equal table.dtype";
    same_dtype(OP, "data.dtype", data.dtype, table.dtype, cast)?;
    Ok(s)
}

/// The EMBEDDING table of a row-major `[R, D]` tensor (stride `D * dtype size`).
fn table_geometry(map: &AddressMap, table: &Tensor) -> Result<EmbeddingTable, Error> {
    const OP: &str = "embedding_update";
    let rule = "a row must fit the 32-bit stride";
    let stride = u32::try_from(table.row_bytes())
        .map_err(|_| arg_error(OP, "table.shape[1]", table.shape[1].into(), rule))?;
    Ok(EmbeddingTable {
        base_addr: on_fabric(map, OP, "table", table)?,
        num_entries: table.shape[0],
        stride_bytes: stride,
        num_elements: table.shape[1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::{Mechanism, Runtime};
    use dma::Fabric;

    fn sbuf(p: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, p, offset).unwrap()
    }

    fn rows(addr: u64, shape: [u32; 2]) -> Tensor {
        Tensor::new(FabricAddr(addr), shape, Dtype::F32)
    }

    fn dma(l: &Lowered, i: usize) -> DmaIndirect1d {
        match l.instructions[i] {
            Instruction::DmaIndirect(d) => d,
            other => panic!("not a DMA_INDIRECT: {other:?}"),
        }
    }

    #[test]
    fn dma_gather_splits_at_4096_indices() {
        let idx = Tensor::vector(sbuf(0, 0x100), 5000, Dtype::U32);
        let opts = DmaOptions {
            oob: OobMode::Skip,
            bound_reg: 6,
            notify_oob: false,
            ..DmaOptions::default()
        };
        let l = dma_gather(
            Generation::Cayman,
            &rows(0x1000, [100, 3]),
            &idx,
            &rows(0x10_0000, [5000, 3]),
            opts,
        )
        .unwrap();
        assert_eq!(l.instructions.len(), 2);
        assert_eq!(l.bounds, vec![BoundSetting { reg: 6, bound: 100 }]);
        let (a, b) = (dma(&l, 0), dma(&l, 1));
        assert_eq!((a.src_num_elem(), b.src_num_elem()), (4096, 904));
        assert_eq!(b.src_idx_start_addr(), sbuf(0, 0x100 + 4096 * 4));
        assert_eq!(b.src_start_addr(), FabricAddr(0x1000));
        assert_eq!(b.dst_start_addr(), FabricAddr(0x10_0000 + 4096 * 12));
        assert_eq!((a.src_elem_size(), a.dst_step_elem()), (12, 1));
        let f = a.flags();
        assert_eq!(f.indirect_mode().unwrap(), IndirectMode::Src);
        assert!(!f.idx_bound_is_err() && !f.non_unique_dst_idx());
        let bc = a.src_idx_bound_reg();
        assert!(bc.bc_enabled() && bc.bc_disable_oob_error_notif() && bc.bc_reg() == 6);
        assert!(!a.dst_idx_bound_reg().bc_enabled());
    }

    #[test]
    fn dma_scatter_add_with_duplicates_accumulates() {
        let mut f = Fabric::new(Generation::Sunda);
        let idx_at = sbuf(0, 0).to_fabric(f.map()).unwrap();
        f.write_elems(idx_at, &[1u32, 0, 1, 1]).unwrap();
        f.write_elems(FabricAddr(0x1000), &[1i32, 2, 3, 4, 5, 6, 7, 8])
            .unwrap();
        f.write_elems(FabricAddr(0x2000), &[100i32, 100, 200, 200])
            .unwrap();
        let opts = DmaOptions {
            unique_indices: false,
            compute_op: ComputeOp::Add,
            ..DmaOptions::default()
        };
        let src = Tensor::new(FabricAddr(0x1000), [4, 2], Dtype::I32);
        let dst = Tensor::new(FabricAddr(0x2000), [2, 2], Dtype::I32);
        let idx = Tensor::vector(sbuf(0, 0), 4, Dtype::U32);
        let l = dma_scatter(Generation::Sunda, &src, &idx, &dst, opts).unwrap();
        assert!(dma(&l, 0).flags().non_unique_dst_idx());
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Reference).unwrap();
        l.apply_registers(r.registers_mut()).unwrap();
        r.run(&mut f, &l.instructions).unwrap();
        let mut out = [0i32; 4];
        f.read_elems(FabricAddr(0x2000), &mut out).unwrap();
        // np.add.at(dst, [1, 0, 1, 1], src): row 0 += [3, 4]; row 1 += [1,2]+[5,6]+[7,8]
        assert_eq!(out, [103, 104, 213, 216]);
    }

    #[test]
    fn dma_rules_name_the_argument() {
        let idx = Tensor::vector(sbuf(1, 0), 4, Dtype::U32);
        let e = dma_gather(
            Generation::Sunda,
            &rows(0, [8, 2]),
            &idx,
            &rows(0x100, [4, 2]),
            DmaOptions::default(),
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("dma_gather: indices = {}: must be in SBUF partition 0 (DMA_INDIRECT reads its indices there)", sbuf(1, 0).0)
        );
        let idx = Tensor::vector(sbuf(0, 0), 4, Dtype::U32);
        let e = dma_gather(
            Generation::Sunda,
            &rows(0, [8, 2]),
            &idx,
            &rows(0x100, [5, 2]),
            DmaOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "direct side shape[0]",
                value: 5,
                ..
            }
        ));
        let e = dma_scatter(
            Generation::Sunda,
            &rows(0, [4, 2]),
            &idx,
            &rows(0x100, [8, 3]),
            DmaOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "dst.shape[1]",
                value: 3,
                ..
            }
        ));
        let wide = Tensor::vector(sbuf(0, 0), 4, Dtype::U16);
        let e = dma_scatter(
            Generation::Sunda,
            &rows(0, [4, 2]),
            &wide,
            &rows(0x100, [8, 2]),
            DmaOptions::default(),
        )
        .unwrap_err();
        assert!(matches!(
            e,
            Error::NkiDtype {
                arg: "indices.dtype",
                ..
            }
        ));
        let transpose = |src: Tensor, dst: Tensor| {
            dma_gather_transpose(Generation::Cayman, &src, &idx, &dst, OobMode::Error).unwrap_err()
        };
        let e = transpose(rows(0, [4, 2]), rows(0x100, [2, 4]));
        assert!(matches!(
            e,
            Error::NkiDtype {
                op: "dma_gather_transpose",
                arg: "src.dtype",
                value: Dtype::F32,
                ..
            }
        ));
        let halves = |addr, shape| Tensor::new(FabricAddr(addr), shape, Dtype::Bf16);
        // NKI's src.shape[-1] <= 128 holds for the 2-D form too
        let e = transpose(halves(0, [4, 129]), halves(0x1000, [129, 4]));
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "src.shape[1]",
                value: 129,
                ..
            }
        ));
        let e = transpose(halves(0, [4, 2]), halves(0x100, [3, 4]));
        assert!(matches!(
            e,
            Error::NkiArgument {
                op: "dma_gather_transpose",
                arg: "dst.shape[0]",
                value: 3,
                ..
            }
        ));
    }

    #[test]
    fn dma_copy_is_direct2d_split_by_outer_rows() {
        let src = AccessPattern {
            addr: FabricAddr(0x1000).into(),
            ap: [[3, 70_000], [1, 2]],
        };
        let dst = AccessPattern {
            addr: FabricAddr(0x100_0000).into(),
            ap: [[2, 70_000], [1, 2]],
        };
        let l = dma_copy(Generation::Cayman, &src, &dst, Dtype::U16, ComputeOp::None).unwrap();
        let m: Vec<DmaDirect2d> = l
            .instructions
            .iter()
            .map(|i| match i {
                Instruction::DmaMemcpy(m) => *m,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(m.len(), 2);
        assert_eq!((m[0].num_elem(), m[1].num_elem()), ([2, 65535], [2, 4465]));
        assert_eq!(m[0].src().step_elem, [1, 3]);
        assert_eq!(m[1].src().start_addr, FabricAddr(0x1000 + 65535 * 3 * 2));
        assert_eq!(
            m[1].dst().start_addr,
            FabricAddr(0x100_0000 + 65535 * 2 * 2)
        );
        let mut bad = dst;
        bad.ap[1][1] = 3;
        let e = dma_copy(Generation::Cayman, &src, &bad, Dtype::U16, ComputeOp::None).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "dst.ap[1][1]",
                value: 3,
                ..
            }
        ));
        bad = dst;
        bad.ap[0][0] = 70_000;
        let e = dma_copy(Generation::Cayman, &src, &bad, Dtype::U16, ComputeOp::None).unwrap_err();
        assert!(matches!(
            e,
            Error::NkiArgument {
                arg: "dst.ap[0][0]",
                ..
            }
        ));
    }

    #[test]
    fn embedding_update_is_one_pseudo_op_per_4096_indices() {
        let table = Tensor::new(FabricAddr(0x1000), [50, 4], Dtype::F16);
        let idx = Tensor::vector(sbuf(0, 0), 5000, Dtype::U32);
        let data = Tensor::new(sbuf(2, 0), [5000, 4], Dtype::F16);
        let l = embedding_update(Generation::Mariana, &table, &idx, &data, CceOp::Max).unwrap();
        let e: Vec<PseudoEmbeddingUpdate> = l
            .instructions
            .iter()
            .map(|i| match i {
                Instruction::PseudoEmbeddingUpdate(e) => *e,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            (e[0].sequence_length(), e[1].sequence_length()),
            (4096, 904)
        );
        assert_eq!(e[1].embed_index_addr(), sbuf(0, 4096 * 4));
        assert_eq!(e[1].embed_data_addr(), sbuf(2, 4096 * 8));
        let t = e[0].table();
        assert_eq!((t.num_entries, t.stride_bytes, t.num_elements), (50, 8, 4));
        assert_eq!(e[0].cce_op().unwrap(), CceOp::Max);
        let short = Tensor::new(sbuf(2, 0), [4999, 4], Dtype::F16);
        let err =
            embedding_update(Generation::Mariana, &table, &idx, &short, CceOp::Add).unwrap_err();
        assert!(matches!(
            err,
            Error::NkiArgument {
                arg: "data.shape[0]",
                value: 4999,
                ..
            }
        ));
    }
}
