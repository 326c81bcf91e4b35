//! Random cases for the equivalence suite: a generation, a fabric holding every input, a
//! register file, and a stream of 1 to 8 fragments, each one datapath's instructions.
//!
//! Inputs are chosen to hit the edges: random shapes and dtypes (random bytes, so NaNs
//! and infinities appear in float data), indices in and out of bounds, at `bound - 1`
//! and `bound`, the `u32::MAX` / `0xffff` / `0xff` sentinels, duplicates, every OOB
//! policy and compute op, DMA_INDIRECT shape registers along every dim (indices around
//! the extent, which bounds them: shaped tensors need no padding), Pool_Buffers left
//! loaded across fragments, gathers with no
//! window, and now and then an instruction the generation must reject (over 4096
//! indices, TILE before maverick, PSUM for GATHER on maverick, an empty eng_mask).
//!
//! Every allocation is fresh and indexed tables get 16 rows of padding, so a row an
//! index reaches past a table (an enabled bound above the row count) lands in padding:
//! no instruction reads bytes it also writes (which the DGE refuses for POOL
//! instructions) and no Pool_Buffer window's source changes before its GATHER (which
//! the DGE reads at GATHER time). DMA_MEMCPY destinations may overlap themselves, and a
//! direct DMA_INDIRECT side may have step 0 (every row onto one): defined, ordered
//! results every route must reproduce.

use dma::{Addr4, CceOp, ComputeOp, Dtype, Fabric, FabricAddr, Generation, Space};
use hostsim::fuzz::oob::direct2d_steps;
use hostsim::isa::{
    BoundCheckReg, BoundRegisters, Direct2dSide, DmaDirect2d, DmaIndirect1d, DmaIndirectFlags,
    DmaSide, EmbeddingTable, IndexMissBehavior, Indirect, IndirectDim, IndirectMode, InstFlags,
    Instruction, PoolBufferLoad, PseudoEmbeddingUpdate, ReshapeKind, S4d4Gt, S4d4Ic, ShapeReg,
    Tensor4d,
};

use crate::Rng;

/// One random case.
pub struct Case {
    /// The generation every instruction is validated and run for.
    pub generation: Generation,
    /// The inputs, before the stream runs.
    pub fabric: Fabric,
    /// The bound registers the DMA_INDIRECT instructions read.
    pub regs: BoundRegisters,
    /// The instructions, in order.
    pub stream: Vec<Instruction>,
    /// The datapath of each instruction (`gather`, `indirect_copy`, ...).
    pub labels: Vec<&'static str>,
}

/// The case of `seed`: deterministic.
pub fn random_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let generation = rng.pick(&Generation::ALL);
    let mut b = Builder::new(rng, generation);
    for _ in 0..b.rng.range(1, 8) {
        match b.rng.below(100) {
            0..=21 => b.gather_fragment(),
            22..=41 => b.indirect_copy_fragment(),
            42..=66 => b.dma_indirect_fragment(),
            67..=83 => b.embedding_fragment(),
            84..=95 => b.memcpy_fragment(),
            _ => b.invalid_fragment(),
        }
    }
    Case {
        generation,
        fabric: b.fabric,
        regs: b.regs,
        stream: b.stream,
        labels: b.labels,
    }
}

/// Bytes reserved per partition for the case's SBUF allocations (below 192 KiB).
const SBUF_LIMIT: u32 = 160 * 1024;
/// PSUM bytes per partition.
const PSUM_LIMIT: u32 = 16 * 1024;
/// Padding rows after every indexed table.
const PAD_ROWS: u64 = 16;

struct Builder {
    rng: Rng,
    fabric: Fabric,
    regs: BoundRegisters,
    stream: Vec<Instruction>,
    labels: Vec<&'static str>,
    sbuf_next: u32,
    psum_next: u32,
    hbm_next: u64,
    next_reg: u8,
}

impl Builder {
    fn new(rng: Rng, generation: Generation) -> Builder {
        Builder {
            rng,
            fabric: Fabric::new(generation),
            regs: BoundRegisters::new(),
            stream: Vec::new(),
            labels: Vec::new(),
            sbuf_next: 0,
            psum_next: 0,
            hbm_next: 0x1_0000,
            next_reg: 0,
        }
    }

    fn push(&mut self, label: &'static str, inst: impl Into<Instruction>) {
        self.stream.push(inst.into());
        self.labels.push(label);
    }

    // ---- allocation and data ------------------------------------------------------

    /// `bytes` at one offset of every SBUF partition (64-byte aligned).
    fn sbuf(&mut self, bytes: u32) -> u32 {
        let at = self.sbuf_next;
        self.sbuf_next = (at + bytes.max(1)).next_multiple_of(64);
        assert!(self.sbuf_next <= SBUF_LIMIT, "case SBUF budget exceeded");
        at
    }

    /// `bytes` of PSUM if they fit, else of SBUF; returns the space and offset.
    fn psum_or_sbuf(&mut self, bytes: u32) -> (Space, u32) {
        if self.psum_next + bytes <= PSUM_LIMIT {
            let at = self.psum_next;
            self.psum_next = (at + bytes.max(1)).next_multiple_of(64);
            return (Space::Psum, at);
        }
        (Space::Sbuf, self.sbuf(bytes))
    }

    /// `bytes` of HBM (256-byte aligned).
    fn hbm(&mut self, bytes: u64) -> FabricAddr {
        let at = self.hbm_next;
        self.hbm_next = (at + bytes.max(1)).next_multiple_of(256);
        FabricAddr(at)
    }

    fn addr4(space: Space, p: u32, offset: u32) -> Addr4 {
        Addr4::encode(space, p, offset).expect("allocations stay inside the partition")
    }

    fn fabric_of(&self, a: Addr4) -> FabricAddr {
        a.to_fabric(self.fabric.map())
            .expect("allocations are on the fabric")
    }

    fn write(&mut self, addr: FabricAddr, bytes: &[u8]) {
        self.fabric
            .write(addr, bytes)
            .expect("inputs are on the fabric");
    }

    /// Random bytes in partitions `p .. p + n` at `offset`.
    fn random_rows(&mut self, space: Space, p: u32, n: u32, offset: u32, len: u32) {
        for q in p..p + n {
            let bytes = self.rng.bytes(len as usize);
            let at = self.fabric_of(Self::addr4(space, q, offset));
            self.write(at, &bytes);
        }
    }

    /// `values` at `a`, each `size` bytes wide.
    fn write_values(&mut self, a: Addr4, values: &[u32], size: usize) {
        let at = self.fabric_of(a);
        self.write(at, &Self::pack(values, size));
    }

    /// Little-endian `values`, each `size` bytes wide.
    fn pack(values: &[u32], size: usize) -> Vec<u8> {
        values
            .iter()
            .flat_map(|v| v.to_le_bytes().into_iter().take(size))
            .collect()
    }

    /// An index near the interesting edges of `[lo, lo + len)`, at most `max`.
    fn index(&mut self, lo: u32, len: u32, max: u32) -> u32 {
        let end = lo.saturating_add(len);
        let v = match self.rng.below(100) {
            0..=54 => lo.saturating_add(self.rng.below(u64::from(len)) as u32),
            55..=62 => end.saturating_sub(1),
            63..=70 => end,
            71..=75 => lo.wrapping_sub(1),
            76..=81 => max,
            82..=87 => end.saturating_add(self.rng.range(1, 8)),
            _ => self.rng.next_u64() as u32,
        };
        v.min(max)
    }

    /// A start partition for `n` channels (of 128).
    fn partition(&mut self, n: u32, partitions: u32) -> u32 {
        self.rng.range(0, partitions - n)
    }

    /// `p` (70%) or another start partition for `n` channels.
    fn same_or_other(&mut self, p: u32, n: u32) -> u32 {
        match self.rng.chance(70) {
            true => p,
            false => self.partition(n, 128),
        }
    }

    fn dtype(&mut self) -> Dtype {
        self.rng.pick(&Dtype::ALL)
    }

    /// A dtype of `size` bytes.
    fn dtype_of_size(&mut self, size: usize) -> Dtype {
        let same: Vec<Dtype> = Dtype::ALL
            .into_iter()
            .filter(|d| d.size() == size)
            .collect();
        // Every size the datapaths use has a dtype; U8 only if asked for another.
        self.rng.pick_from(&same).unwrap_or(Dtype::U8)
    }

    // ---- GATHER 0x68 with POOL_BUFFER_LOAD 0x67 -----------------------------------

    fn gather_fragment(&mut self) {
        let c = match self.rng.chance(10) {
            true => self.rng.range(16, 32),
            false => self.rng.range(1, 8),
        };
        let p0 = self.partition(c, 128);
        let dtype = self.dtype();
        let size = dtype.size() as u32;
        let len = match self.rng.below(4) {
            0 => self.rng.range(1, 40),
            1 => self.rng.pick(&[1, 511, 512]),
            _ => self.rng.range(1, 512),
        };
        let step = if self.rng.chance(20) { 2 } else { 1 };
        let start_index = 512 * self.rng.below(3) as u32;
        let off = self.sbuf(len * step * size);
        self.random_rows(Space::Sbuf, p0, c, off, len * step * size);
        let t = strided(Self::addr4(Space::Sbuf, p0, off), step, len);
        let load = PoolBufferLoad::new(t, dtype, c as u8).with_start_index(start_index);
        if !self.rng.chance(10) {
            self.push("pool_buffer_load", load);
            if self.rng.chance(8) {
                self.overwrite_window(Self::addr4(Space::Sbuf, p0, off), dtype);
            }
        }
        let window = Window {
            c,
            p0,
            size: dtype.size(),
            start: start_index,
            len,
        };
        for _ in 0..1 + usize::from(self.rng.chance(25)) {
            self.gather(&window);
        }
    }

    /// A DMA_MEMCPY of one fresh random element over the first element of a loaded
    /// window at `window`: defined (the reference gathers the copy taken at LOAD), and
    /// refused by the DGE route at the GATHER, by design.
    fn overwrite_window(&mut self, window: Addr4, dtype: Dtype) {
        let size = dtype.size() as u32;
        let side = |start_addr| Direct2dSide {
            start_addr,
            step_elem: [1, 1],
        };
        let src = side(self.table(size.into()));
        let dst = side(self.fabric_of(window));
        let m = DmaDirect2d::new(src, dst, size, [1, 1], dtype, ComputeOp::None);
        self.push("window_overwrite", m);
    }

    /// One GATHER against `w` (or against other channels' windows, or none).
    fn gather(&mut self, w: &Window) {
        let in_dtype = self.rng.pick(&[Dtype::U8, Dtype::U16, Dtype::U32]);
        let max = (u64::MAX >> (64 - 8 * in_dtype.size())) as u32;
        let m = match self.rng.chance(10) {
            true => self.rng.range(100, 600),
            false => self.rng.range(1, 48),
        };
        let p_idx = match self.rng.chance(15) {
            true => self.partition(w.c, 128),
            false => w.p0,
        };
        let idx_off = self.sbuf(m * in_dtype.size() as u32);
        for q in p_idx..p_idx + w.c {
            let values: Vec<u32> = (0..m).map(|_| self.index(w.start, w.len, max)).collect();
            self.write_values(
                Self::addr4(Space::Sbuf, q, idx_off),
                &values,
                in_dtype.size(),
            );
        }
        let out_dtype = match self.rng.chance(5) {
            true => self.dtype(),
            false => self.dtype_of_size(w.size),
        };
        let osize = out_dtype.size() as u32;
        let dst = self.gather_dst(w.c, m, osize);
        let miss = self.rng.pick(&[
            IndexMissBehavior::ImmediateWrite,
            IndexMissBehavior::SkipWrite,
        ]);
        let imm = match self.rng.chance(50) {
            true => 0,
            false => (self.rng.next_u64() >> (64 - 8 * osize)) as u32,
        };
        let src = Tensor4d::contiguous(Self::addr4(Space::Sbuf, p_idx, idx_off), m as u16);
        let g = S4d4Gt::new(src, dst, in_dtype, out_dtype, w.c as u8)
            .with_index_miss_behavior(miss)
            .with_immediate(imm)
            .with_free_pool_buffer(self.rng.chance(60));
        self.push("gather", g);
    }

    /// A GATHER destination of `m` elements of `osize` bytes on `c` channels, over
    /// random bytes (so SKIP_WRITE shows): SBUF or now and then PSUM, stride 1 or 2.
    fn gather_dst(&mut self, c: u32, m: u32, osize: u32) -> Tensor4d {
        let step = if self.rng.chance(20) { 2 } else { 1 };
        let (space, off) = match self.rng.chance(10) {
            true => self.psum_or_sbuf(m * step * osize),
            false => (Space::Sbuf, self.sbuf(m * step * osize)),
        };
        let p = self.partition(c, 128);
        self.random_rows(space, p, c, off, m * step * osize);
        strided(Self::addr4(space, p, off), step, m)
    }

    // ---- INDIRECT_COPY 0xe7 -------------------------------------------------------

    fn indirect_copy_fragment(&mut self) {
        let ch = 16 * if self.rng.chance(20) { 2 } else { 1 };
        let p_data = self.partition(ch, 128);
        let p_idx = self.same_or_other(p_data, ch);
        let p_dst = self.same_or_other(p_data, ch);
        let dtype = self.dtype();
        let size = dtype.size() as u32;
        let per = self.rng.pick(&[1u32, 2, 4, 8, 16, 32]);
        let f = self.rng.range(1, 200);
        let n = self.rng.range(1, (512 / per).clamp(1, 48));
        let k = n.div_ceil(16) + self.rng.range(0, 1);
        let data_off = self.sbuf(f * size);
        self.random_rows(Space::Sbuf, p_data, ch, data_off, f * size);
        let idx_off = self.sbuf(k * 2);
        for q in p_idx..p_idx + ch {
            let ids: Vec<u32> = (0..k)
                .map(|_| self.index(0, f.saturating_sub(per) + 1, 0xffff))
                .collect();
            self.write_values(Self::addr4(Space::Sbuf, q, idx_off), &ids, 2);
        }
        let total = n * per;
        let step = if self.rng.chance(20) { 2 } else { 1 };
        let dst_off = self.sbuf(total * step * size);
        self.random_rows(Space::Sbuf, p_dst, ch, dst_off, total * step * size);
        let src = Indirect::new(
            Self::addr4(Space::Sbuf, p_idx, idx_off),
            Self::addr4(Space::Sbuf, p_data, data_off),
            total as u16,
        );
        let dst = strided(Self::addr4(Space::Sbuf, p_dst, dst_off), step, total);
        let ic = S4d4Ic::gather(src, dst, dtype, per as u8, f, ch as u8);
        self.push("indirect_copy", ic);
    }

    // ---- DMA_INDIRECT 0xbb --------------------------------------------------------

    fn dma_indirect_fragment(&mut self) {
        if self.rng.chance(20) {
            return self.gather_transpose_fragment();
        }
        if self.rng.chance(20) {
            return self.shaped_fragment();
        }
        let mode = self
            .rng
            .pick(&[IndirectMode::Src, IndirectMode::Dst, IndirectMode::SrcDst]);
        let dtype = self.dtype();
        let row = dtype.size() as u32 * self.rng.range(1, 8);
        let n = match self.rng.chance(10) {
            true => self.rng.range(100, 300),
            false => self.rng.range(1, 64),
        };
        let dups = self.rng.chance(40);
        let src = self.dma_side(mode.gathers(), n, row, false);
        let dst = self.dma_side(mode.scatters(), n, row, dups);
        let flags = DmaIndirectFlags::new(
            mode,
            self.rng.chance(30),
            self.rng.chance(50),
            IndirectDim::X,
            IndirectDim::X,
        );
        let op = self.rng.pick(&ComputeOp::ALL);
        let d = DmaIndirect1d::new(flags, src, dst, n as u16, dtype, op);
        self.push("dma_indirect", d);
    }

    /// A DMA_INDIRECT with reshape_kind GATHER_TRANSPOSE: `n` indexed rows of 1..8
    /// elements from an HBM table, written as columns into HBM (rows `n..n + 3` elements
    /// apart) or into SBUF partitions (rows 1..3 partitions apart).
    fn gather_transpose_fragment(&mut self) {
        let dtype = self.dtype();
        let esize = dtype.size() as u32;
        let cols = self.rng.range(1, 8);
        let row = esize * cols;
        let n = self.rng.range(1, 64);
        let rows = self.rng.range(1, 64);
        let table = self.hbm((u64::from(rows) + PAD_ROWS) * u64::from(row));
        let data = self.rng.bytes(((rows + PAD_ROWS as u32) * row) as usize);
        self.write(table, &data);
        let (bound, limit) = self.bound(rows);
        let idx_off = self.sbuf(n * 4);
        let values: Vec<u32> = (0..n)
            .map(|_| self.side_index(bound.bc_enabled(), rows, limit, false))
            .collect();
        self.write_values(Self::addr4(Space::Sbuf, 0, idx_off), &values, 4);
        let (dst, step) = match self.rng.chance(50) {
            true => {
                let step = self.rng.range(1, 3);
                let off = self.sbuf(n * esize);
                let p = self.rng.range(0, 127 - (cols - 1) * step);
                for c in 0..cols {
                    self.random_rows(Space::Sbuf, p + c * step, 1, off, n * esize);
                }
                (self.fabric_of(Self::addr4(Space::Sbuf, p, off)), step)
            }
            false => {
                let step = n + self.rng.range(0, 3);
                let bytes = ((cols - 1) * step + n) * esize;
                let at = self.hbm(bytes.into());
                let fill = self.rng.bytes(bytes as usize);
                self.write(at, &fill);
                (at, step)
            }
        };
        let src = DmaSide {
            start_addr: table,
            idx_start_addr: Self::addr4(Space::Sbuf, 0, idx_off),
            elem_size: row,
            step_elem: 1,
            bound,
        };
        let out = DmaSide {
            start_addr: dst,
            idx_start_addr: Addr4(0),
            elem_size: row,
            step_elem: step as u16,
            bound: BoundCheckReg::DISABLED,
        };
        let hard = self.rng.chance(30);
        let flags = DmaIndirectFlags::new(
            IndirectMode::Src,
            hard,
            false,
            IndirectDim::X,
            IndirectDim::X,
        );
        let d = DmaIndirect1d::new(flags, src, out, n as u16, dtype, ComputeOp::None)
            .with_reshape_kind(ReshapeKind::GatherTranspose);
        self.push("gather_transpose", d);
    }

    /// A DMA_INDIRECT with a shape register (registers taken from the case's next free
    /// ones): a `[W][Z][Y][X]` tensor of extents 1..=4 indexed along a random dim by 1..12
    /// positions whose indices sit around the extent and the bound, and a direct run of
    /// step 0..=2 (or both sides indexed along the dim).
    fn shaped_fragment(&mut self) {
        if self.next_reg > 54 {
            return;
        }
        let reg = self.next_reg;
        self.next_reg += 4;
        let xyzw = [(); 4].map(|()| self.rng.range(1, 4));
        self.regs.set_shape(reg, xyzw).expect("reg <= 54");
        let dims = [
            IndirectDim::X,
            IndirectDim::Y,
            IndirectDim::Z,
            IndirectDim::W,
        ];
        let dim = self.rng.pick(&dims);
        let extent = xyzw[usize::from(dim.code())];
        let mode = self
            .rng
            .pick(&[IndirectMode::Src, IndirectMode::Dst, IndirectMode::SrcDst]);
        let dtype = self.dtype();
        let row = dtype.size() as u32 * self.rng.range(1, 3);
        let n = self.rng.range(1, 12);
        let tensor = u64::from(xyzw.iter().product::<u32>() * row);
        let walked = u64::from(n * xyzw.iter().product::<u32>() / extent);
        let side = |b: &mut Builder, indexed: bool| {
            if !indexed {
                let step = b.rng.pick(&[1u16, 1, 2, 0]);
                let bytes = (walked - 1) * u64::from(step) * u64::from(row) + u64::from(row);
                return DmaSide {
                    start_addr: b.table(bytes),
                    idx_start_addr: Addr4(0),
                    elem_size: row,
                    step_elem: step,
                    bound: BoundCheckReg::DISABLED,
                };
            }
            let start = b.table(tensor);
            let (bound, limit) = b.bound(extent);
            let idx_off = b.sbuf(n * 4);
            let values: Vec<u32> = (0..n)
                .map(|_| b.index(0, extent.min(limit), u32::MAX))
                .collect();
            b.write_values(Self::addr4(Space::Sbuf, 0, idx_off), &values, 4);
            DmaSide {
                start_addr: start,
                idx_start_addr: Self::addr4(Space::Sbuf, 0, idx_off),
                elem_size: row,
                step_elem: 0,
                bound,
            }
        };
        let src = side(self, mode.gathers());
        let dst = side(self, mode.scatters());
        let on = |indexed| if indexed { dim } else { IndirectDim::X };
        let flags = DmaIndirectFlags::new(
            mode,
            self.rng.chance(30),
            self.rng.chance(50),
            on(mode.gathers()),
            on(mode.scatters()),
        );
        let op = self.rng.pick(&ComputeOp::ALL);
        let d = DmaIndirect1d::new(flags, src, dst, n as u16, dtype, op)
            .with_shape_reg(ShapeReg::at(reg).expect("reg < 64"));
        self.push("dma_indirect_shaped", d);
    }

    /// One side of a DMA_INDIRECT of `n` rows of `row` bytes: an indexed table (with
    /// its indices and bound register) or a direct run.
    fn dma_side(&mut self, indirect: bool, n: u32, row: u32, dups: bool) -> DmaSide {
        if !indirect {
            let step = self.rng.pick(&[1u16, 1, 1, 2, 0]);
            let rows = u64::from(n.saturating_sub(1)) * u64::from(step) + 1;
            let start = self.table(rows * u64::from(row));
            return DmaSide {
                start_addr: start,
                idx_start_addr: Addr4(0),
                elem_size: row,
                step_elem: step,
                bound: BoundCheckReg::DISABLED,
            };
        }
        let rows = self.rng.range(1, 64);
        let start = self.table((u64::from(rows) + PAD_ROWS) * u64::from(row));
        let (bound, limit) = self.bound(rows);
        let idx_off = self.sbuf(n * 4);
        let values: Vec<u32> = (0..n)
            .map(|_| self.side_index(bound.bc_enabled(), rows, limit, dups))
            .collect();
        self.write_values(Self::addr4(Space::Sbuf, 0, idx_off), &values, 4);
        DmaSide {
            start_addr: start,
            idx_start_addr: Self::addr4(Space::Sbuf, 0, idx_off),
            elem_size: row,
            step_elem: 1,
            bound,
        }
    }

    /// An index into a table of `rows` rows: around `bound` when one is enabled (every
    /// value is safe: those below it stay inside the padding), else a row or the wild
    /// `u32::MAX`; with `dups`, half of them among the first 8 rows.
    fn side_index(&mut self, bounded: bool, rows: u32, bound: u32, dups: bool) -> u32 {
        if dups && self.rng.chance(50) {
            return self.rng.range(0, rows.min(8) - 1);
        }
        match bounded {
            true => self.index(0, bound, u32::MAX),
            false if self.rng.chance(5) => u32::MAX,
            false => self.rng.range(0, rows - 1),
        }
    }

    /// `bytes` of random table rows: in HBM, or one SBUF partition (1..128) if small.
    fn table(&mut self, bytes: u64) -> FabricAddr {
        let start = match bytes <= 8192 && self.rng.chance(25) {
            true => {
                let off = self.sbuf(bytes as u32);
                let p = self.rng.range(1, 127);
                self.fabric_of(Self::addr4(Space::Sbuf, p, off))
            }
            false => self.hbm(bytes),
        };
        let data = self.rng.bytes(bytes as usize);
        self.write(start, &data);
        start
    }

    /// A bound register for a table of `rows` rows (disabled 15% of the time) and the
    /// bound it holds (`rows` when disabled). Bounds above `rows` stay within the padding.
    fn bound(&mut self, rows: u32) -> (BoundCheckReg, u32) {
        if self.rng.chance(15) || self.next_reg > 60 {
            return (BoundCheckReg::DISABLED, rows);
        }
        let reg = self.next_reg;
        self.next_reg += 2;
        let bound = match self.rng.below(10) {
            0..=4 => rows,
            5..=6 => rows - self.rng.range(0, rows),
            _ => rows + self.rng.range(1, 8),
        };
        self.regs
            .set_bound(reg, u64::from(bound))
            .expect("reg <= 60");
        let bc = BoundCheckReg::enabled(reg, self.rng.chance(30)).expect("reg < 64");
        (bc, bound)
    }

    // ---- PSEUDO_EMBEDDING_UPDATE 0xca ---------------------------------------------

    fn embedding_fragment(&mut self) {
        let dtype = self.dtype();
        let size = dtype.size() as u32;
        let d = self.rng.range(1, 8);
        let rows = self.rng.range(1, 32);
        let stride = d * size + size * self.rng.range(0, 2);
        let base = self.hbm(u64::from(rows * stride));
        let init = self.rng.bytes((rows * stride) as usize);
        self.write(base, &init);
        let seq = self.rng.range(1, 64);
        let span = if self.rng.chance(40) {
            rows.min(4)
        } else {
            rows
        };
        let ids: Vec<u32> = (0..seq).map(|_| self.index(0, span, u32::MAX)).collect();
        let p_idx = self.rng.range(0, 127);
        let idx_off = self.sbuf(seq * 4);
        self.write_values(Self::addr4(Space::Sbuf, p_idx, idx_off), &ids, 4);
        let p_data = self.rng.range(0, 127);
        let data_off = self.sbuf(seq * d * size);
        self.random_rows(Space::Sbuf, p_data, 1, data_off, seq * d * size);
        let table = EmbeddingTable {
            base_addr: base,
            num_entries: rows,
            stride_bytes: stride,
            num_elements: d,
        };
        let cce = self.rng.pick(&[CceOp::Add, CceOp::Max, CceOp::Min]);
        let e = PseudoEmbeddingUpdate::new(
            table,
            Self::addr4(Space::Sbuf, p_idx, idx_off),
            Self::addr4(Space::Sbuf, p_data, data_off),
            seq,
            dtype,
            cce,
        );
        self.push("embedding_update", e);
    }

    // ---- DMA_MEMCPY 0xb8 ----------------------------------------------------------

    fn memcpy_fragment(&mut self) {
        let dtype = self.dtype();
        let elem = dtype.size() as u32 * self.rng.range(1, 4);
        let counts = [self.rng.range(1, 16) as u16, self.rng.range(1, 8) as u16];
        let src = self.direct2d(counts, elem, false);
        let overlap = self.rng.chance(10);
        let dst = self.direct2d(counts, elem, overlap);
        let op = self.rng.pick(&ComputeOp::ALL);
        let m = DmaDirect2d::new(src, dst, elem, counts, dtype, op);
        self.push("dma_memcpy", m);
    }

    /// A 2-D side over fresh random bytes; `overlap` lets its rows overlap.
    fn direct2d(&mut self, counts: [u16; 2], elem: u32, overlap: bool) -> Direct2dSide {
        let (step_elem, reach) = direct2d_steps(&mut self.rng, counts, overlap);
        Direct2dSide {
            start_addr: self.table(reach * u64::from(elem)),
            step_elem,
        }
    }

    // ---- instructions the generation must reject ----------------------------------

    fn invalid_fragment(&mut self) {
        let a = Self::addr4(Space::Sbuf, 0, self.sbuf(64));
        match self.rng.below(4) {
            0 => {
                let t = Tensor4d::new(a, [0, 0, 0, 0], [4097, 1, 1, 1]);
                self.push("invalid", S4d4Gt::new(t, t, Dtype::U8, Dtype::U8, 1));
            }
            1 => {
                let load = PoolBufferLoad::new(Tensor4d::contiguous(a, 4), Dtype::U8, 4);
                self.push("invalid", load.with_inst_flags(InstFlags::TILE));
            }
            2 => {
                let psum = Self::addr4(Space::Psum, 0, 0);
                let g = S4d4Gt::new(
                    Tensor4d::contiguous(a, 4),
                    Tensor4d::contiguous(psum, 4),
                    Dtype::U8,
                    Dtype::U8,
                    2,
                );
                self.push("invalid", g);
            }
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
                self.push("invalid", m.with_eng_mask(0));
            }
        }
    }
}

/// `n` elements from `a`, `step` apart.
fn strided(a: Addr4, step: u32, n: u32) -> Tensor4d {
    Tensor4d::new(a, [step as i16, 0, 0, 0], [n as u16, 1, 1, 1])
}

/// The window a gather fragment loaded.
struct Window {
    c: u32,
    p0: u32,
    size: usize,
    start: u32,
    len: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cases_are_deterministic_and_cover_every_datapath() {
        let a = random_case(42);
        let b = random_case(42);
        assert_eq!(a.stream, b.stream);
        assert_eq!(a.fabric.first_difference(&b.fabric), None);
        assert_eq!(a.stream.len(), a.labels.len());
        let mut seen = std::collections::BTreeSet::new();
        for seed in 0..200 {
            seen.extend(random_case(seed).labels);
        }
        let expected = [
            "dma_indirect",
            "dma_indirect_shaped",
            "dma_memcpy",
            "embedding_update",
            "gather",
            "gather_transpose",
            "indirect_copy",
            "invalid",
            "pool_buffer_load",
            "window_overwrite",
        ];
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn indices_reach_the_edges() {
        let mut b = Builder::new(Rng::new(1), Generation::Sunda);
        let values: Vec<u32> = (0..2000).map(|_| b.index(512, 10, u32::MAX)).collect();
        for v in [512, 521, 522, 511, u32::MAX] {
            assert!(values.contains(&v), "{v} never drawn");
        }
        assert_eq!(Builder::pack(&[0x0102_0304, 5], 2), vec![4, 3, 5, 0]);
    }
}
