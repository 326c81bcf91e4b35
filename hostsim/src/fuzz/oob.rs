//! The `oob` target's generators, the one source of stream cases (the conformance
//! suite's equivalence tests draw theirs here too): one fragment per datapath, each
//! aimed at that datapath's OOB policies and bounds (seed 000 section 7, DESIGN.md "OOB
//! policy"):
//!
//! - GATHER 0x68 (after its POOL_BUFFER_LOAD 0x67): IMMEDIATE_WRITE with a random or
//!   zero immediate, SKIP_WRITE; indices at the window's edges, u8/u16/u32 sentinels,
//!   now and then in other channels' partitions; windows of 1, 511, 512 elements;
//!   negative steps; PSUM destinations (maverick rejects them); 4096 and 4097 indices;
//!   gathers with no window, two gathers on one window, windows left loaded for later
//!   fragments, and windows overwritten between LOAD and GATHER (a DMA_MEMCPY, label
//!   `window_overwrite`: the reference gathers the copy taken at LOAD, the DGE route
//!   refuses it by design);
//! - DMA_INDIRECT 0xbb: bound register enabled or disabled, hard error or soft skip,
//!   notification on or off; Src, Dst and SrcDst; direct sides of step 0 (every row onto
//!   one); tables ending on the last byte of HBM or an SBUF partition; duplicates with
//!   and without `non_unique_dst_idx`; every compute op; GATHER_TRANSPOSE into one
//!   region or across SBUF partitions (`gather_transpose`); shape registers, indexed
//!   along every dim with indices around the extent and the bound
//!   (`dma_indirect_shaped`: [`Case::shapes`]);
//! - INDIRECT_COPY 0xe7: runs that pass the end of the source buffer (the part past the
//!   end stays zero), the 0xffff sentinel, every run width, indices and destination in
//!   other partitions, destination step 2;
//! - PSEUDO_EMBEDDING_UPDATE 0xca: indices at and past `num_entries`, duplicates,
//!   NaN and signed-zero data under add / max / min;
//! - DMA_MEMCPY 0xb8: overlapping destinations, tables at the end of HBM, eng_mask 0;
//! - access-pattern DMAs (NKI `dma_copy` over `.ap()` sides, run by the software DGE):
//!   see [`super::ap`];
//! - instructions the case's generation must reject (`invalid`).
//!
//! Every fragment draws its data through [`Rng::edge_data`], so NaNs and signed zeros
//! meet every reduction; its counts through [`Rng::edge_count`] (none, one, 4096 and
//! 4097 included); and its partitions through [`Rng::edge_partition`] (the first and
//! the last that fits included).

use dma::{Addr4, CceOp, ComputeOp, Dtype, FabricAddr, Generation, Space};

use crate::fuzz::case::{pack, strided, Builder, Case};
use crate::fuzz::rng::Rng;
use crate::isa::{
    BoundCheckReg, Direct2dSide, DmaDirect2d, DmaIndirect1d, DmaIndirectFlags, DmaSide,
    EmbeddingTable, IndexMissBehavior, Indirect, IndirectDim, IndirectMode, InstFlags, Instruction,
    PoolBufferLoad, PseudoEmbeddingUpdate, ReshapeKind, S4d4Gt, S4d4Ic, Tensor4d,
};

/// The index limit of one instruction (per channel, per core).
const LIMIT: u32 = 4096;

/// Every op label a case carries, in order.
pub const LABELS: [&str; 13] = [
    "dma_copy_ap",
    "dma_indirect",
    "dma_indirect_shaped",
    "dma_memcpy",
    "embedding_update",
    "gather",
    "gather_transpose",
    "gather_transpose_nd",
    "indirect_copy",
    "invalid",
    "pool_buffer_load",
    "transpose",
    "window_overwrite",
];

/// The `oob` case drawn from `rng`: 1 to 3 fragments on a random generation.
pub fn case(mut rng: Rng, generation: Option<Generation>) -> Case {
    let generation = generation.unwrap_or_else(|| rng.pick(&Generation::ALL));
    let mut b = Builder::new(rng, generation);
    for _ in 0..b.rng.range(1, 3) {
        // A fragment that does not fit what is left is skipped (None).
        let _ = match b.rng.below(13) {
            0 | 1 => gather_fragment(&mut b),
            2 | 3 => dma_indirect_fragment(&mut b),
            4 | 5 => indirect_copy_fragment(&mut b),
            6 | 7 => embedding_fragment(&mut b),
            8 | 9 => memcpy_fragment(&mut b),
            10 | 11 => super::ap::fragment(&mut b),
            _ => invalid_fragment(&mut b),
        };
    }
    b.finish()
}

/// The all-ones value of an index dtype of `size` bytes.
fn sentinel(size: usize) -> u32 {
    (u64::from(u32::MAX) >> (32 - 8 * size.min(4))) as u32
}

// ---- GATHER 0x68 with POOL_BUFFER_LOAD 0x67 ---------------------------------------

/// The window a POOL_BUFFER_LOAD loaded.
struct Window {
    channels: u32,
    partition: u32,
    dtype: Dtype,
    start: u32,
    len: u32,
}

fn gather_fragment(b: &mut Builder) -> Option<()> {
    let channels = b.rng.pick(&[1, 1, 2, 7, 16, 128]);
    let partition = b.rng.edge_partition(channels, 128);
    let dtype = pool_element(&mut b.rng);
    let size = dtype.size() as u32;
    let len = b.rng.pick(&[1, 2, 17, 511, 512, 100]);
    let start = 512 * b.rng.below(3) as u32;
    let step: i16 = b.rng.pick(&[1, 1, 1, 2, -1]);
    let bytes = len * step.unsigned_abs() as u32 * size;
    let off = b.sbuf(bytes)?;
    b.data_rows(Space::Sbuf, partition, channels, off, bytes)?;
    // A negative step starts at the last element and walks down.
    let first = if step < 0 {
        off + (len - 1) * size
    } else {
        off
    };
    let src = strided(
        Builder::addr4(Space::Sbuf, partition, first)?,
        step,
        len as u16,
    );
    let load = PoolBufferLoad::new(src, dtype, channels as u8).with_start_index(start);
    if !b.rng.chance(5) {
        b.push("pool_buffer_load", load);
        if b.rng.chance(30) {
            overwrite_window(b, src.start_addr(), dtype)?;
        }
    }
    let w = Window {
        channels,
        partition,
        dtype,
        start,
        len,
    };
    for _ in 0..1 + usize::from(b.rng.chance(25)) {
        gather(b, &w)?;
    }
    Some(())
}

/// A DMA_MEMCPY of one fresh element over the element at `at`, in a loaded window:
/// defined (the reference gathers the copy taken at LOAD), refused by the DGE route at
/// the GATHER by design.
fn overwrite_window(b: &mut Builder, at: Addr4, dtype: Dtype) -> Option<()> {
    let size = dtype.size() as u32;
    let side = |start_addr| Direct2dSide {
        start_addr,
        step_elem: [1, 1],
    };
    let src = side(table(b, size.into(), false)?);
    let dst = side(b.fabric_of(at)?);
    let m = DmaDirect2d::new(src, dst, size, [1, 1], dtype, ComputeOp::None);
    b.push("window_overwrite", m);
    Some(())
}

/// One GATHER against `w`, with a random miss policy and immediate.
fn gather(b: &mut Builder, w: &Window) -> Option<()> {
    let in_dtype = b.rng.pick(&[Dtype::U8, Dtype::U16, Dtype::U32]);
    let isize = in_dtype.size();
    let m = b.rng.edge_count(48, LIMIT);
    // Now and then the indices sit in other channels' partitions.
    let p_idx = match b.rng.chance(15) {
        true => b.rng.edge_partition(w.channels, 128),
        false => w.partition,
    };
    let idx_off = b.sbuf(m * isize as u32)?;
    for q in p_idx..p_idx + w.channels {
        let values = b
            .rng
            .edge_indices(m as usize, w.start, w.len, sentinel(isize));
        b.write_at(Space::Sbuf, q, idx_off, &pack(&values, isize))?;
    }
    let out_dtype = match b.rng.chance(5) {
        true => pool_element(&mut b.rng),
        false => same_size(&mut b.rng, w.dtype),
    };
    let dst = gather_dst(b, w.channels, m, out_dtype.size() as u32)?;
    let miss = b.rng.pick(&[
        IndexMissBehavior::ImmediateWrite,
        IndexMissBehavior::SkipWrite,
    ]);
    let imm = match b.rng.below(3) {
        0 => 0,
        1 => b.rng.next_u32() & sentinel(out_dtype.size()),
        _ => b.rng.next_u32(),
    };
    let src = strided(Builder::addr4(Space::Sbuf, p_idx, idx_off)?, 1, m as u16);
    let g = S4d4Gt::new(src, dst, in_dtype, out_dtype, w.channels as u8)
        .with_index_miss_behavior(miss)
        .with_immediate(imm)
        .with_free_pool_buffer(b.rng.chance(50));
    b.push("gather", g);
    Some(())
}

/// A POOL instruction's element dtype: 1, 2 or 4 bytes, and now and then I64, which
/// every route must refuse (`Rule::PoolElementDtype`).
fn pool_element(rng: &mut Rng) -> Dtype {
    match rng.chance(2) {
        true => Dtype::I64,
        false => rng.pool_dtype(),
    }
}

/// A dtype of the same size as `d`.
fn same_size(rng: &mut Rng, d: Dtype) -> Dtype {
    let same: Vec<Dtype> = Dtype::ALL
        .into_iter()
        .filter(|x| x.size() == d.size())
        .collect();
    rng.pick_from(&same).unwrap_or(d)
}

/// A GATHER destination of `m` elements on `channels` channels over random bytes (so
/// SKIP_WRITE shows): SBUF, or PSUM now and then; step 1, 2 or -1.
fn gather_dst(b: &mut Builder, channels: u32, m: u32, osize: u32) -> Option<Tensor4d> {
    let step: i16 = b.rng.pick(&[1, 1, 2, -1]);
    let bytes = m * step.unsigned_abs() as u32 * osize;
    let (space, off) = match b.rng.chance(10) {
        true => (Space::Psum, b.psum(bytes)?),
        false => (Space::Sbuf, b.sbuf(bytes)?),
    };
    let p = b.rng.edge_partition(channels, 128);
    for q in p..p + channels {
        let bytes = b.rng.bytes(bytes as usize);
        b.write_at(space, q, off, &bytes)?;
    }
    let first = match step < 0 {
        true => off + m.saturating_sub(1) * osize,
        false => off,
    };
    Some(strided(Builder::addr4(space, p, first)?, step, m as u16))
}

// ---- DMA_INDIRECT 0xbb ------------------------------------------------------------

fn dma_indirect_fragment(b: &mut Builder) -> Option<()> {
    match b.rng.below(10) {
        0 | 1 => return gather_transpose_fragment(b),
        2 | 3 => return shaped_fragment(b),
        _ => {}
    }
    let mode = b
        .rng
        .pick(&[IndirectMode::Src, IndirectMode::Dst, IndirectMode::SrcDst]);
    let dtype = b.rng.dtype();
    let row = dtype.size() as u32 * b.rng.pick(&[1, 1, 3, 8]);
    let n = b.rng.edge_count(64, LIMIT);
    // non_unique_dst_idx only where the destination is indexed (elsewhere it is refused)
    let non_unique = !b.rng.chance(50) && mode.scatters();
    let errors = b.rng.chance(40);
    let src = dma_side(b, mode.gathers(), n, row, errors)?;
    let dst = dma_side(b, mode.scatters(), n, row, errors)?;
    let flags = DmaIndirectFlags::new(mode, errors, non_unique, IndirectDim::X, IndirectDim::X);
    let op = b.rng.pick(&ComputeOp::ALL);
    let d = DmaIndirect1d::new(flags, src, dst, n as u16, dtype, op);
    b.push("dma_indirect", d);
    Some(())
}

/// One side of `n` rows of `row` bytes: an indexed table of 1..40 rows
/// ([`indexed_side`]) or a direct run ([`direct_side`]).
fn dma_side(b: &mut Builder, indirect: bool, n: u32, row: u32, errors: bool) -> Option<DmaSide> {
    match indirect {
        true => {
            let rows = b.rng.range(1, 40);
            let start = table(b, u64::from(rows) * u64::from(row), true)?;
            indexed_side(b, start, [n, row, rows], (1, errors))
        }
        false => direct_side(b, n, row),
    }
}

/// A direct side of `n` rows of `row` bytes, step 0, 1 or 2 (0: every row onto one).
fn direct_side(b: &mut Builder, n: u32, row: u32) -> Option<DmaSide> {
    let step: u16 = b.rng.pick(&[1, 1, 2, 0]);
    let rows = u64::from(n.saturating_sub(1)) * u64::from(step) + 1;
    Some(DmaSide {
        start_addr: table(b, rows * u64::from(row), false)?,
        idx_start_addr: Addr4(0),
        elem_size: row,
        step_elem: step,
        bound: BoundCheckReg::DISABLED,
    })
}

/// An indexed side of `n` positions of `row` bytes over the table at `start` holding
/// `rows` entries (rows, or a shape's extent along the indexed dim), element step
/// `step`: a bound register at `rows`, one below, 0 or a few above (or none; its
/// notification silenced now and then where a skip has one, not `errors`), and
/// indices around it in SBUF partition 0.
fn indexed_side(
    b: &mut Builder,
    start: FabricAddr,
    [n, row, rows]: [u32; 3],
    (step, errors): (u16, bool),
) -> Option<DmaSide> {
    let bound = match b.rng.below(10) {
        0..=5 => u64::from(rows),
        6 => u64::from(rows.saturating_sub(1)),
        7 => 0,
        _ => u64::from(rows) + u64::from(b.rng.range(1, 3)),
    };
    let bc = match b.rng.chance(20) {
        true => BoundCheckReg::DISABLED,
        false => {
            let silent = !errors && b.rng.chance(30);
            b.bound_register(bound, silent)?
        }
    };
    let limit = if bc.bc_enabled() { bound as u32 } else { rows };
    let values = b.rng.edge_indices(n as usize, 0, limit, u32::MAX);
    let idx_off = b.sbuf(n * 4)?;
    b.write_at(Space::Sbuf, 0, idx_off, &pack(&values, 4))?;
    Some(DmaSide {
        start_addr: start,
        idx_start_addr: Builder::addr4(Space::Sbuf, 0, idx_off)?,
        elem_size: row,
        step_elem: step,
        bound: bc,
    })
}

/// A DMA_INDIRECT with reshape_kind GATHER_TRANSPOSE: `n` indexed rows of 1..8
/// elements from an HBM table, written as columns into one region (rows `n..n + 3` elements apart) or
/// into SBUF partitions (rows 1..3 partitions apart).
fn gather_transpose_fragment(b: &mut Builder) -> Option<()> {
    let dtype = b.rng.dtype();
    let esize = dtype.size() as u32;
    let cols = b.rng.range(1, 8);
    let row = esize * cols;
    let n = b.rng.range(1, 64);
    let rows = b.rng.range(1, 64);
    let rows_at = hbm_table(b, u64::from(rows * row))?;
    let errors = b.rng.chance(30);
    let src = indexed_side(b, rows_at, [n, row, rows], (1, errors))?;
    let (start_addr, step) = match b.rng.chance(50) {
        true => {
            let step = b.rng.range(1, 3);
            let off = b.sbuf(n * esize)?;
            let p = b.rng.range(0, 127 - (cols - 1) * step);
            for c in 0..cols {
                let bytes = b.rng.bytes((n * esize) as usize);
                b.write_at(Space::Sbuf, p + c * step, off, &bytes)?;
            }
            (b.fabric_of(Builder::addr4(Space::Sbuf, p, off)?)?, step)
        }
        false => {
            let step = n + b.rng.range(0, 3);
            let bytes = ((cols - 1) * step + n) * esize;
            (table(b, bytes.into(), false)?, step)
        }
    };
    let dst = DmaSide {
        start_addr,
        idx_start_addr: Addr4(0),
        elem_size: row,
        step_elem: step as u16,
        bound: BoundCheckReg::DISABLED,
    };
    let flags = DmaIndirectFlags::new(
        IndirectMode::Src,
        errors,
        false,
        IndirectDim::X,
        IndirectDim::X,
    );
    let d = DmaIndirect1d::new(flags, src, dst, n as u16, dtype, ComputeOp::None)
        .with_reshape_kind(ReshapeKind::GatherTranspose);
    b.push("gather_transpose", d);
    Some(())
}

/// A DMA_INDIRECT with a shape register: a `[W][Z][Y][X]` tensor of extents 1..=4
/// indexed along a random dim by 1..12 positions (step 0: the shape walks the rest)
/// whose indices sit around the extent and the bound; the other side a direct run of
/// the rows walked, or indexed along the same dim.
fn shaped_fragment(b: &mut Builder) -> Option<()> {
    let xyzw = [(); 4].map(|()| b.rng.range(1, 4));
    let shape = b.shape_register(xyzw)?;
    let dim = b.rng.pick(&[
        IndirectDim::X,
        IndirectDim::Y,
        IndirectDim::Z,
        IndirectDim::W,
    ]);
    let extent = xyzw[usize::from(dim.code())];
    let mode = b
        .rng
        .pick(&[IndirectMode::Src, IndirectMode::Dst, IndirectMode::SrcDst]);
    let dtype = b.rng.dtype();
    let row = dtype.size() as u32 * b.rng.range(1, 3);
    let n = b.rng.range(1, 12);
    let elems: u32 = xyzw.iter().product();
    let errors = b.rng.chance(30);
    let side = |b: &mut Builder, indexed: bool| match indexed {
        true => {
            let start = table(b, u64::from(elems * row), true)?;
            indexed_side(b, start, [n, row, extent], (0, errors))
        }
        false => direct_side(b, n * elems / extent, row),
    };
    let src = side(b, mode.gathers())?;
    let dst = side(b, mode.scatters())?;
    let on = |indexed| if indexed { dim } else { IndirectDim::X };
    let non_unique = b.rng.chance(50) && mode.scatters();
    let flags = DmaIndirectFlags::new(
        mode,
        errors,
        non_unique,
        on(mode.gathers()),
        on(mode.scatters()),
    );
    let op = b.rng.pick(&ComputeOp::ALL);
    let d = DmaIndirect1d::new(flags, src, dst, n as u16, dtype, op).with_shape_reg(shape);
    b.push("dma_indirect_shaped", d);
    Some(())
}

/// `bytes` of random table rows: in HBM, in one SBUF partition (1..128) when small, or
/// (with `at_end`, a quarter of the time) ending on the last byte of HBM or of an SBUF
/// partition, so a row past the table leaves the region.
fn table(b: &mut Builder, bytes: u64, at_end: bool) -> Option<FabricAddr> {
    let small = bytes <= 8192;
    let start = match (at_end && b.rng.chance(25), small && b.rng.chance(25)) {
        (true, true) => {
            let off = b.sbuf_top(bytes as u32)?;
            let p = 1 + b.rng.edge_partition(1, 127);
            b.fabric_of(Builder::addr4(Space::Sbuf, p, off)?)?
        }
        (true, false) => b.hbm_top(bytes)?,
        (false, true) => {
            let off = b.sbuf(bytes as u32)?;
            let p = 1 + b.rng.edge_partition(1, 127);
            b.fabric_of(Builder::addr4(Space::Sbuf, p, off)?)?
        }
        (false, false) => b.hbm(bytes)?,
    };
    fill(b, start, bytes)
}

/// `bytes` of random table rows in HBM, a quarter of the time ending on its last byte.
fn hbm_table(b: &mut Builder, bytes: u64) -> Option<FabricAddr> {
    let start = match b.rng.chance(25) {
        true => b.hbm_top(bytes)?,
        false => b.hbm(bytes)?,
    };
    fill(b, start, bytes)
}

/// Random data of a random dtype over the `bytes` at `start`, which it returns.
fn fill(b: &mut Builder, start: FabricAddr, bytes: u64) -> Option<FabricAddr> {
    let dtype = b.rng.dtype();
    let data = b.rng.edge_data(dtype, bytes as usize / dtype.size());
    b.write(start, &data)?;
    Some(start)
}

// ---- INDIRECT_COPY 0xe7 -----------------------------------------------------------

fn indirect_copy_fragment(b: &mut Builder) -> Option<()> {
    let ch = 16 * b.rng.pick(&[1, 1, 2, 8]);
    let p_data = 16 * b.rng.range(0, (128 - ch) / 16);
    let dtype = pool_element(&mut b.rng);
    let size = dtype.size() as u32;
    let per = b.rng.pick(&[1u32, 2, 4, 8, 16, 32]);
    let f = b.rng.range(1, 160);
    let n = match per {
        1 => b.rng.edge_count(48, LIMIT),
        _ => b.rng.range(1, 32),
    };
    let k = n.div_ceil(16) + b.rng.range(0, 1);
    let [p_idx, p_dst] = [(); 2].map(|()| match b.rng.chance(30) {
        true => 16 * b.rng.range(0, (128 - ch) / 16),
        false => p_data,
    });
    let data_off = b.sbuf(f * size)?;
    b.data_rows(Space::Sbuf, p_data, ch, data_off, f * size)?;
    let idx_off = b.sbuf(k * 2)?;
    for q in p_idx..p_idx + ch {
        let ids = b
            .rng
            .edge_indices(k as usize, 0, f.saturating_sub(per) + 1, 0xffff);
        b.write_at(Space::Sbuf, q, idx_off, &pack(&ids, 2))?;
    }
    let total = n.checked_mul(per)?;
    let step: i16 = b.rng.pick(&[1, 1, 1, 2]);
    let dst_bytes = total * step as u32 * size;
    let dst_off = b.sbuf(dst_bytes)?;
    for q in p_dst..p_dst + ch {
        let junk = b.rng.bytes(dst_bytes as usize);
        b.write_at(Space::Sbuf, q, dst_off, &junk)?;
    }
    let src = Indirect::new(
        Builder::addr4(Space::Sbuf, p_idx, idx_off)?,
        Builder::addr4(Space::Sbuf, p_data, data_off)?,
        u16::try_from(total).ok()?,
    );
    let dst = strided(
        Builder::addr4(Space::Sbuf, p_dst, dst_off)?,
        step,
        total as u16,
    );
    let ic = S4d4Ic::gather(src, dst, dtype, per as u8, f, ch as u8);
    b.push("indirect_copy", ic);
    Some(())
}

// ---- PSEUDO_EMBEDDING_UPDATE 0xca -------------------------------------------------

fn embedding_fragment(b: &mut Builder) -> Option<()> {
    let dtype = b.rng.dtype();
    let size = dtype.size() as u32;
    let d = b.rng.range(1, 8);
    let rows = b.rng.range(1, 32);
    let stride = d * size + size * b.rng.range(0, 2);
    let base = table(b, u64::from(rows * stride), true)?;
    let seq = b.rng.edge_count(64, LIMIT);
    let span = if b.rng.chance(40) { rows.min(3) } else { rows };
    let ids = b.rng.edge_indices(seq as usize, 0, span, u32::MAX);
    let p_idx = b.rng.edge_partition(1, 128);
    let idx_off = b.sbuf(seq * 4)?;
    b.write_at(Space::Sbuf, p_idx, idx_off, &pack(&ids, 4))?;
    let p_data = b.rng.edge_partition(1, 128);
    let data_off = b.sbuf(seq * d * size)?;
    let data = b.rng.edge_data(dtype, (seq * d) as usize);
    b.write_at(Space::Sbuf, p_data, data_off, &data)?;
    let table = EmbeddingTable {
        base_addr: base,
        num_entries: rows,
        stride_bytes: stride,
        num_elements: d,
    };
    let cce = b.rng.pick(&[CceOp::Add, CceOp::Max, CceOp::Min]);
    let e = PseudoEmbeddingUpdate::new(
        table,
        Builder::addr4(Space::Sbuf, p_idx, idx_off)?,
        Builder::addr4(Space::Sbuf, p_data, data_off)?,
        seq,
        dtype,
        cce,
    );
    b.push("embedding_update", e);
    Some(())
}

// ---- DMA_MEMCPY 0xb8 --------------------------------------------------------------

fn memcpy_fragment(b: &mut Builder) -> Option<()> {
    let dtype = b.rng.dtype();
    let elem = dtype.size() as u32 * b.rng.pick(&[1, 1, 2, 4]);
    let counts = [b.rng.range(1, 16) as u16, b.rng.range(1, 8) as u16];
    let src = direct2d(b, counts, elem, false)?;
    let overlap = b.rng.chance(15);
    let dst = direct2d(b, counts, elem, overlap)?;
    let op = b.rng.pick(&ComputeOp::ALL);
    let mask = if b.rng.chance(5) { 0 } else { 0xffff };
    let m = DmaDirect2d::new(src, dst, elem, counts, dtype, op).with_eng_mask(mask);
    b.push("dma_memcpy", m);
    Some(())
}

// ---- instructions the generation must reject --------------------------------------

/// One instruction the case's generation must reject: a GATHER of 4097 indices, a
/// DMA_MEMCPY with an empty eng_mask, a POOL_BUFFER_LOAD with the TILE flag before
/// maverick, a GATHER into PSUM on maverick.
fn invalid_fragment(b: &mut Builder) -> Option<()> {
    let a = Builder::addr4(Space::Sbuf, 0, b.sbuf(64)?)?;
    let four = Tensor4d::contiguous(a, 4);
    let inst: Instruction = match (b.rng.below(3), b.generation()) {
        (0, _) => {
            let t = Tensor4d::new(a, [0, 0, 0, 0], [LIMIT as u16 + 1, 1, 1, 1]);
            S4d4Gt::new(t, t, Dtype::U8, Dtype::U8, 1).into()
        }
        (1, Generation::Maverick) => {
            let psum = Tensor4d::contiguous(Builder::addr4(Space::Psum, 0, 0)?, 4);
            S4d4Gt::new(four, psum, Dtype::U8, Dtype::U8, 2).into()
        }
        (1, _) => PoolBufferLoad::new(four, Dtype::U8, 4)
            .with_inst_flags(InstFlags::TILE)
            .into(),
        _ => {
            let side = |s| Direct2dSide {
                start_addr: FabricAddr(s),
                step_elem: [1, 4],
            };
            let m = DmaDirect2d::new(
                side(0x100),
                side(0x200),
                4,
                [4, 1],
                Dtype::F32,
                ComputeOp::Add,
            );
            m.with_eng_mask(0).into()
        }
    };
    b.push("invalid", inst);
    Some(())
}

/// A 2-D side over fresh random bytes; `overlap` lets its rows overlap.
fn direct2d(b: &mut Builder, counts: [u16; 2], elem: u32, overlap: bool) -> Option<Direct2dSide> {
    let (step_elem, reach) = direct2d_steps(&mut b.rng, counts, overlap);
    Some(Direct2dSide {
        start_addr: table(b, reach * u64::from(elem), true)?,
        step_elem,
    })
}

/// The element steps of a 2-D side of `[n0, n1]` elements and the elements it spans:
/// inner step 1 or 2; outer step past the inner run by 0 to 3 elements or, with
/// `overlap`, anywhere from 0 to the run's length so that rows overlap.
pub fn direct2d_steps(rng: &mut Rng, [n0, n1]: [u16; 2], overlap: bool) -> ([u16; 2], u64) {
    let s0: u16 = rng.pick(&[1, 1, 2]);
    let run = n0.saturating_mul(s0);
    let s1 = match overlap {
        true => rng.range(0, u32::from(run)) as u16,
        false => run.saturating_add(rng.range(0, 3) as u16),
    };
    let reach = u64::from(n0.saturating_sub(1)) * u64::from(s0)
        + u64::from(n1.saturating_sub(1)) * u64::from(s1)
        + 1;
    ([s0, s1], reach)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::case::Op;

    #[test]
    fn cases_are_deterministic_and_cover_every_datapath() {
        let a = case(Rng::new(42), None);
        let b = case(Rng::new(42), None);
        assert_eq!(a.stream, b.stream);
        assert_eq!(a.fabric.first_difference(&b.fabric), None);
        assert_eq!(a.regions, b.regions);
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            seen.extend(case(Rng::new(seed), None).labels);
        }
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), LABELS);
    }

    /// A reproducer declares each region as a tensor, and tensors may not overlap: no
    /// fragment writes past what it allocated.
    #[test]
    fn the_regions_a_case_writes_never_overlap() {
        for seed in 0..300 {
            let mut regions = case(Rng::new(seed), None).regions;
            regions.sort_unstable();
            for pair in regions.windows(2) {
                let [(a, len), (b, _)] = [pair[0], pair[1]];
                assert!(a.0 + len <= b.0, "seed {seed}: {pair:x?}");
            }
        }
    }

    #[test]
    fn invalid_instructions_are_invalid_on_their_generation() {
        let mut n = 0;
        for seed in 0..400 {
            let c = case(Rng::new(seed), None);
            for (op, label) in c.stream.iter().zip(&c.labels) {
                if let (Op::Inst(inst), &"invalid") = (op, label) {
                    assert!(
                        inst.validate(c.generation).is_err(),
                        "seed {seed}: {inst:?}"
                    );
                    n += 1;
                }
            }
        }
        assert!(n >= 20, "{n}");
    }

    #[test]
    fn direct2d_steps_span_the_rows_and_overlap_only_when_asked() {
        let mut rng = Rng::new(4);
        for _ in 0..200 {
            let ([s0, s1], reach) = direct2d_steps(&mut rng, [5, 3], false);
            assert!(s0 == 1 || s0 == 2, "{s0}");
            assert!((5 * s0..=5 * s0 + 3).contains(&s1), "{s0} {s1}");
            assert_eq!(reach, 4 * u64::from(s0) + 2 * u64::from(s1) + 1);
            let ([s0, s1], _) = direct2d_steps(&mut rng, [5, 3], true);
            assert!(s1 <= 5 * s0, "{s0} {s1}");
        }
        assert_eq!(direct2d_steps(&mut Rng::new(1), [1, 1], false).1, 1);
    }

    #[test]
    fn sentinels_fill_the_index_width() {
        assert_eq!(sentinel(1), 0xff);
        assert_eq!(sentinel(2), 0xffff);
        assert_eq!(sentinel(4), u32::MAX);
    }
}
