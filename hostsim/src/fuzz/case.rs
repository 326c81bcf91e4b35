//! A stream case: a generation, the fabric holding its inputs, a register file (bound
//! and shape registers) and a short stream of ops (raw ISA instructions and NKI access-pattern DMAs) — what the
//! `oob` target generates and every route runs.
//!
//! [`Builder`] hands out fresh, disjoint allocations (so no POOL instruction reads bytes
//! it writes, which only the reference and the POOL kernels define), from the bottom of
//! each space for ordinary tensors and from the top for tensors that must end on the last
//! byte of their region, and records every byte range it writes so a reproducer can dump
//! exactly the inputs ([`Case::regions`]); the typed tensors an access-pattern DMA walks
//! are recorded whole instead ([`Case::tensors`]), so a reproducer can name them. Every
//! allocation is fallible: a fragment that does not fit is simply not generated.

use dma::{Addr4, Fabric, FabricAddr, Generation, Space};

use crate::fuzz::rng::Rng;
use crate::isa::{BoundCheckReg, BoundRegisters, Instruction, ShapeReg, Tensor4d};
use crate::nki::{ApDma, ApTensor, Lowered};

/// One op of a stream case.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// A raw ISA instruction, run by [`crate::runtime::Runtime::step`].
    Inst(Instruction),
    /// An NKI `dma_copy` over `.ap()` sides, as [`crate::nki::dma_copy_ap`] lowered it,
    /// run by [`crate::runtime::Runtime::run_ap_dma`] (boxed: it holds its tensors).
    Ap(Box<ApDma>),
    /// The bound and shape registers a scenario op sets before its instructions (a
    /// [`Lowered`] of settings alone), applied on every route.
    Set(Box<Lowered>),
}

impl Op {
    /// The op as a lowered NKI operation (what [`crate::runtime::Step::Run`] takes).
    pub fn lowered(&self) -> Lowered {
        match self {
            Op::Inst(inst) => Lowered {
                instructions: vec![*inst],
                ..Lowered::default()
            },
            Op::Ap(dma) => Lowered {
                ap_dmas: vec![(**dma).clone()],
                ..Lowered::default()
            },
            Op::Set(settings) => (**settings).clone(),
        }
    }

    /// The op in messages: the opcode (`0xbb`) or `dma_copy .ap()`.
    pub fn name(&self) -> String {
        match self {
            Op::Inst(inst) => format!("{:#04x}", inst.opcode().code()),
            Op::Ap(_) => "dma_copy .ap()".to_string(),
            Op::Set(_) => "register settings".to_string(),
        }
    }
}

/// One generated stream case.
#[derive(Clone, Debug)]
pub struct Case {
    /// The generation every instruction is validated and run for.
    pub generation: Generation,
    /// The inputs, before the stream runs.
    pub fabric: Fabric,
    /// Every byte range the inputs occupy, in the order written.
    pub regions: Vec<(FabricAddr, u64)>,
    /// The bound registers DMA_INDIRECT reads: `(register, bound)` pairs.
    pub bounds: Vec<(u8, u64)>,
    /// The shape registers DMA_INDIRECT reads: `(first register, [X, Y, Z, W])` pairs.
    pub shapes: Vec<(u8, [u32; 4])>,
    /// The typed tensors the access-pattern DMAs walk (data, index tiles, scalar
    /// offsets), each once, with their initial contents on `fabric` (not in `regions`).
    pub tensors: Vec<ApTensor>,
    /// The ops, in order.
    pub stream: Vec<Op>,
    /// The datapath of each op (`gather`, `dma_indirect`, `dma_copy_ap`, ...).
    pub labels: Vec<&'static str>,
}

impl Case {
    /// The register file [`Case::bounds`] and [`Case::shapes`] describe.
    pub fn registers(&self) -> BoundRegisters {
        let mut regs = BoundRegisters::new();
        // The builder only records registers that set_bound and set_shape accepted.
        for &(reg, bound) in &self.bounds {
            let _ = regs.set_bound(reg, bound);
        }
        for &(reg, xyzw) in &self.shapes {
            let _ = regs.set_shape(reg, xyzw);
        }
        regs
    }

    /// The raw ISA instructions of the stream, in order.
    pub fn instructions(&self) -> impl Iterator<Item = &Instruction> {
        self.stream.iter().filter_map(|op| match op {
            Op::Inst(inst) => Some(inst),
            Op::Ap(_) | Op::Set(_) => None,
        })
    }
}

/// Bytes of PSUM per partition the builder uses.
const PSUM_BYTES: u32 = 16 * 1024;
/// Where ordinary HBM allocations start.
const HBM_START: u64 = 0x1_0000;

/// Builds one [`Case`] (module docs).
pub struct Builder {
    pub(crate) rng: Rng,
    pub(crate) fabric: Fabric,
    regions: Vec<(FabricAddr, u64)>,
    bounds: Vec<(u8, u64)>,
    shapes: Vec<(u8, [u32; 4])>,
    tensors: Vec<ApTensor>,
    stream: Vec<Op>,
    labels: Vec<&'static str>,
    sbuf_lo: u32,
    sbuf_hi: u32,
    psum_lo: u32,
    hbm_lo: u64,
    hbm_hi: u64,
    next_reg: u8,
}

impl Builder {
    /// An empty case on `generation`.
    pub fn new(rng: Rng, generation: Generation) -> Builder {
        let sbuf = generation.sbuf_partition_bytes() as u32;
        Builder {
            rng,
            fabric: Fabric::new(generation),
            regions: Vec::new(),
            bounds: Vec::new(),
            shapes: Vec::new(),
            tensors: Vec::new(),
            stream: Vec::new(),
            labels: Vec::new(),
            sbuf_lo: 0,
            sbuf_hi: sbuf,
            psum_lo: 0,
            hbm_lo: HBM_START,
            hbm_hi: generation.hbm_bytes(),
            next_reg: 0,
        }
    }

    /// The generation.
    pub fn generation(&self) -> Generation {
        self.fabric.generation()
    }

    /// The finished case.
    pub fn finish(self) -> Case {
        Case {
            generation: self.fabric.generation(),
            fabric: self.fabric,
            regions: self.regions,
            bounds: self.bounds,
            shapes: self.shapes,
            tensors: self.tensors,
            stream: self.stream,
            labels: self.labels,
        }
    }

    /// Appends an instruction with its datapath label.
    pub fn push(&mut self, label: &'static str, inst: impl Into<Instruction>) {
        self.stream.push(Op::Inst(inst.into()));
        self.labels.push(label);
    }

    /// Appends an access-pattern DMA with its label.
    pub fn push_ap(&mut self, label: &'static str, dma: ApDma) {
        self.stream.push(Op::Ap(Box::new(dma)));
        self.labels.push(label);
    }

    /// How many typed tensors are recorded (the next one's number, for its name).
    pub fn tensor_count(&self) -> usize {
        self.tensors.len()
    }

    /// Records `t` as a typed tensor of the case (its bytes are written with
    /// [`Builder::write_tensor`], outside [`Case::regions`]).
    pub fn record_tensor(&mut self, t: ApTensor) {
        self.tensors.push(t);
    }

    /// Writes `bytes` at `addr` for a typed tensor (not recorded as a region).
    pub fn write_tensor(&mut self, addr: FabricAddr, bytes: &[u8]) -> Option<()> {
        self.fabric.write(addr, bytes).ok()
    }

    /// `bytes` at one offset of every SBUF partition, from the bottom (64-byte aligned).
    pub fn sbuf(&mut self, bytes: u32) -> Option<u32> {
        let at = self.sbuf_lo;
        let end = at.checked_add(bytes.max(1))?.checked_next_multiple_of(64)?;
        (end <= self.sbuf_hi).then(|| self.sbuf_lo = end)?;
        Some(at)
    }

    /// `bytes` at one offset of every SBUF partition ending on the partition's last byte
    /// (only once per case: later calls get `None`).
    pub fn sbuf_top(&mut self, bytes: u32) -> Option<u32> {
        let top = self.fabric.generation().sbuf_partition_bytes() as u32;
        let at = top.checked_sub(bytes)?;
        (self.sbuf_hi == top && at >= self.sbuf_lo).then(|| self.sbuf_hi = at & !63)?;
        Some(at)
    }

    /// `bytes` of PSUM per partition, if they fit.
    pub fn psum(&mut self, bytes: u32) -> Option<u32> {
        let at = self.psum_lo;
        let end = at.checked_add(bytes.max(1))?.checked_next_multiple_of(64)?;
        (end <= PSUM_BYTES).then(|| self.psum_lo = end)?;
        Some(at)
    }

    /// `bytes` of HBM from the bottom (256-byte aligned).
    pub fn hbm(&mut self, bytes: u64) -> Option<FabricAddr> {
        let at = self.hbm_lo;
        let end = at
            .checked_add(bytes.max(1))?
            .checked_next_multiple_of(256)?;
        (end <= self.hbm_hi).then(|| self.hbm_lo = end)?;
        Some(FabricAddr(at))
    }

    /// `bytes` of HBM ending on HBM's last byte (once per case).
    pub fn hbm_top(&mut self, bytes: u64) -> Option<FabricAddr> {
        let top = self.fabric.generation().hbm_bytes();
        let at = top.checked_sub(bytes)?;
        (self.hbm_hi == top && at >= self.hbm_lo).then(|| self.hbm_hi = at)?;
        Some(FabricAddr(at))
    }

    /// The ADDR4 of `offset` in partition `p` of `space`.
    pub fn addr4(space: Space, p: u32, offset: u32) -> Option<Addr4> {
        Addr4::encode(space, p, offset).ok()
    }

    /// The fabric address of an ADDR4.
    pub fn fabric_of(&self, a: Addr4) -> Option<FabricAddr> {
        a.to_fabric(self.fabric.map()).ok()
    }

    /// Writes `bytes` at `addr` and records the range.
    pub fn write(&mut self, addr: FabricAddr, bytes: &[u8]) -> Option<()> {
        self.fabric.write(addr, bytes).ok()?;
        self.regions.push((addr, bytes.len() as u64));
        Some(())
    }

    /// Writes `bytes` at `offset` of partition `p` of `space`.
    pub fn write_at(&mut self, space: Space, p: u32, offset: u32, bytes: &[u8]) -> Option<()> {
        let at = self.fabric_of(Self::addr4(space, p, offset)?)?;
        self.write(at, bytes)
    }

    /// `bytes` random bytes at `offset` of partitions `p .. p + n`: the edge values of a
    /// random POOL dtype mixed in (the last element cut at `bytes`).
    pub fn data_rows(
        &mut self,
        space: Space,
        p: u32,
        n: u32,
        offset: u32,
        bytes: u32,
    ) -> Option<()> {
        let dtype = self.rng.pool_dtype();
        for q in p..p.checked_add(n)? {
            let elems = (bytes as usize).div_ceil(dtype.size());
            let mut data = self.rng.edge_data(dtype, elems);
            data.truncate(bytes as usize);
            self.write_at(space, q, offset, &data)?;
        }
        Some(())
    }

    /// A bound register holding `bound` (`None` once the 64 registers are used).
    pub fn bound_register(&mut self, bound: u64, silent: bool) -> Option<BoundCheckReg> {
        let reg = self.next_reg;
        let mut regs = BoundRegisters::new();
        regs.set_bound(reg, bound).ok()?;
        let bc = BoundCheckReg::enabled(reg, silent).ok()?;
        self.next_reg = reg.checked_add(2)?;
        self.bounds.push((reg, bound));
        Some(bc)
    }

    /// A shape register (four registers) holding `xyzw` (`None` once they run out).
    pub fn shape_register(&mut self, xyzw: [u32; 4]) -> Option<ShapeReg> {
        let reg = self.next_reg;
        BoundRegisters::new().set_shape(reg, xyzw).ok()?;
        let shape = ShapeReg::at(reg).ok()?;
        self.next_reg = reg.checked_add(4)?;
        self.shapes.push((reg, xyzw));
        Some(shape)
    }
}

/// Little-endian `values`, each `size` bytes wide (1, 2 or 4).
pub fn pack(values: &[u32], size: usize) -> Vec<u8> {
    values
        .iter()
        .flat_map(|v| v.to_le_bytes().into_iter().take(size))
        .collect()
}

/// `n` elements from `a` with element step `step` (negative steps walk down).
pub fn strided(a: Addr4, step: i16, n: u16) -> Tensor4d {
    Tensor4d::new(a, [step, 0, 0, 0], [n, 1, 1, 1])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_disjoint_and_the_top_ones_end_on_the_last_byte() {
        let mut b = Builder::new(Rng::new(1), Generation::Sunda);
        assert_eq!(b.sbuf(10), Some(0));
        assert_eq!(b.sbuf(64), Some(64));
        assert_eq!(b.sbuf_top(100), Some(192 * 1024 - 100));
        assert_eq!(b.sbuf_top(4), None);
        assert_eq!(b.sbuf(192 * 1024), None);
        let top = b.hbm_top(300).map(|a| a.0);
        assert_eq!(top, Some(Generation::Sunda.hbm_bytes() - 300));
        assert_eq!(b.hbm(1), Some(FabricAddr(HBM_START)));
        assert_eq!(b.hbm(1), Some(FabricAddr(HBM_START + 256)));
        assert_eq!(b.psum(16 * 1024), Some(0));
        assert_eq!(b.psum(1), None);
    }

    #[test]
    fn writes_are_recorded_and_bound_and_shape_registers_replayed() {
        let mut b = Builder::new(Rng::new(2), Generation::Cayman);
        b.write(FabricAddr(0x100), &[1, 2, 3]).unwrap();
        let bc = b.bound_register(7, true).unwrap();
        assert_eq!((bc.bc_reg(), bc.bc_disable_oob_error_notif()), (0, true));
        assert_eq!(b.bound_register(9, false).unwrap().bc_reg(), 2);
        let shape = b.shape_register([1, 2, 3, 4]).unwrap();
        assert_eq!(shape.reg(), 4);
        let case = b.finish();
        assert_eq!(case.regions, vec![(FabricAddr(0x100), 3)]);
        assert_eq!(case.registers().bound(bc).unwrap(), Some(7));
        assert_eq!(case.registers().shape(shape).unwrap(), Some([1, 2, 3, 4]));
        assert_eq!(pack(&[0x0102_0304, 5], 2), vec![4, 3, 5, 0]);
    }
}
