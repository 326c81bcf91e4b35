//! # The POOL kernels: sunda's route, on the modelled IVP vector core
//!
//! On sunda (v2) the indirection instructions are served by software kernels on the
//! GpSimd (POOL) cores, built around the IVP SuperGather front door (seed 000 sections 4,
//! 5, 7). Each kernel here runs on the [`ivp`] model: indices are read vector-wide
//! through the predicated NX8U / NX16 / N_2X32 gathers, bounds and hits are `ltun_2x32` /
//! `leun_2x32` compares, fills are the `mov2nx8t` predicated select, addresses come from
//! the `mulusan_2x32` MAC, and element stores are predicated scatters. Whole rows and runs
//! then move with slice reads and writes of the fabric, once the vector walk has computed
//! and checked their addresses.
//!
//! - [`mod@pool_gather`]: POOL_BUFFER_LOAD 0x67 ([`pool_buffer_load`]) and GATHER 0x68
//!   ([`pool_gather()`], the Pool_Buffer hit test of [`PoolBuffer`]);
//! - [`indirect_copy`]: INDIRECT_COPY 0xe7 ([`pool_indirect_copy`], 8 cores by core id,
//!   [`send_gather_request`]);
//! - [`dma_indirect`]: DMA_INDIRECT 0xbb ([`dma_memcopy_indirect`]);
//! - [`embedding`]: EMBEDDING_UPDATE 0x79 / PSEUDO_EMBEDDING_UPDATE 0xca
//!   ([`embedding_update`]);
//! - [`port`]: the [`ivp::MemPort`] adapter over the fabric ([`FabricPort`]) and the
//!   staged stores ([`StagedWrites`]);
//! - [`cost`]: the cost estimate of each kernel run ([`PoolCost`], [`PoolCostReport`]).
//!
//! [`execute`] validates an instruction for the fabric's generation and runs its kernel,
//! returning the [`Outcome`] every route reports and the kernel's [`PoolCost`].
//!
//! # Fail closed
//!
//! A kernel first reads and checks everything (the fabric is not written while it runs:
//! POOL-side stores land in staged copies, DMA-side rows are planned), then commits. A
//! kernel that fails leaves the fabric and the [`CoreState`] exactly as they were.
//!
//! # Readings where the contract is silent (shared with the reference)
//!
//! - POOL instructions (0x67, 0x68, 0xe7) read every input before writing any
//!   destination element; destinations are written in channel order, element order, so
//!   an element visited twice keeps the last value.
//! - DMA instructions (0xbb, 0x79/0xca) read their index tensors first, then move rows in
//!   position order, each row's source read when it moves.
//! - Channel numbering follows [`crate::core_state`]: active channel `k` uses partition
//!   `P + k` of each pattern, `P` that pattern's own ADDR4 partition.
//! - DMA_MEMCPY 0xb8 has no POOL kernel (the DGE's DIRECT2D kind on every generation).

pub mod cost;
pub mod dma_indirect;
pub mod embedding;
pub mod indirect_copy;
pub mod pool_gather;
pub mod port;
mod vector;

#[cfg(test)]
mod test_support;

pub use cost::{PoolCost, PoolCostReport, Work};
pub use dma_indirect::dma_memcopy_indirect;
pub use embedding::embedding_update;
pub use indirect_copy::{pool_indirect_copy, send_gather_request, GatherRequest};
pub use pool_gather::{pool_buffer_load, pool_gather, PoolBuffer};
pub use port::{move_rows, FabricPort, SlicePort, StagedWrites};

use dma::{Addr4, Fabric, FabricAddr};

use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::{Instruction, Opcode};

/// Runs `inst` with its POOL kernel on `fabric`, updating `state` (the Pool_Buffers; the
/// registers are only read). Validates `inst` for the fabric's generation first; on any
/// error nothing is written and `state` is unchanged.
pub fn execute(
    fabric: &mut Fabric,
    state: &mut CoreState,
    inst: &Instruction,
) -> Result<(Outcome, PoolCost), Error> {
    let opcode = inst.opcode();
    let _span = tracing::debug_span!("pool", opcode = opcode.code()).entered();
    inst.validate(fabric.generation())?;
    match inst {
        Instruction::PoolBufferLoad(p) => pool_buffer_load(fabric, &mut state.pool_buffers, p),
        Instruction::Gather(g) => pool_gather(fabric, &mut state.pool_buffers, g),
        Instruction::IndirectCopy(ic) => pool_indirect_copy(fabric, ic),
        Instruction::DmaIndirect(d) => dma_memcopy_indirect(fabric, &state.regs, d),
        Instruction::PseudoEmbeddingUpdate(e) => embedding_update(fabric, e),
        Instruction::DmaMemcpy(_) => Err(no_kernel(opcode)),
    }
}

/// The error of an opcode the POOL kernels do not serve, `None` for one they do: only
/// DMA_MEMCPY has no kernel (it is a DGE DIRECT2D copy on every generation).
pub fn kernel_missing(opcode: Opcode) -> Option<Error> {
    (opcode == Opcode::DmaMemcpy).then(|| no_kernel(opcode))
}

/// The error of a forced POOL run of an access-pattern DMA (`crate::nki::ApDma`), which
/// only the DGE and the reference run.
pub fn kernel_missing_ap() -> Error {
    Error::MechanismUnavailable {
        mechanism: "pool",
        reason: "an access-pattern DMA (every dma_copy, and a row op whose index is not a [1, N] u32 vector in SBUF partition 0 (a (P, 1) or i32 tile, or a vector in another partition), with a [P, D] SBUF/PSUM side over several partitions, an embedding_update with data in HBM, or a plain dma_scatter under unique_indices = true) runs on the software DGE; there is no POOL kernel for it",
    }
}

fn no_kernel(opcode: Opcode) -> Error {
    Error::NoPoolKernel {
        opcode: opcode.code(),
        name: opcode.name(),
    }
}

/// The fabric address an ADDR4 operand names (`at` in errors).
fn addr4_fabric(fabric: &Fabric, at: FieldPath, addr: Addr4) -> Result<FabricAddr, Error> {
    addr.to_fabric(fabric.map()).map_err(dma_at(at))
}

/// The lane mask of the first `min(remaining, 16)` N_2X32 lanes.
fn lanes_of(remaining: u32) -> u16 {
    if remaining >= 16 {
        u16::MAX
    } else {
        (1u16 << remaining) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::*;
    use super::*;
    use crate::isa::{Direct2dSide, DmaDirect2d, Rule, S4d4Gt, Tensor4d};
    use dma::{ComputeOp, Dtype};

    #[test]
    fn lane_masks() {
        assert_eq!(lanes_of(0), 0);
        assert_eq!(lanes_of(3), 0b111);
        assert_eq!(lanes_of(40), 0xffff);
    }

    /// A DMA_MEMCPY of 4 elements of `elem_size` bytes from SBUF partition 0 to 1.
    fn memcpy(elem_size: u32) -> DmaDirect2d {
        let side = |a| Direct2dSide {
            start_addr: a,
            step_elem: [1, 4],
        };
        let (src, dst) = (side(sbuf_at(0, 0)), side(sbuf_at(1, 0)));
        DmaDirect2d::new(src, dst, elem_size, [4, 1], Dtype::U32, ComputeOp::None)
    }

    #[test]
    fn dma_memcpy_has_no_pool_kernel_and_writes_nothing() {
        let mut f = fabric();
        let e = fails_closed(&mut f, &mut CoreState::new(), memcpy(4));
        assert!(matches!(e, Error::NoPoolKernel { opcode: 0xb8, .. }), "{e}");
    }

    #[test]
    fn invalid_instructions_are_rejected_before_running() {
        let mut f = fabric();
        let e = fails_closed(&mut f, &mut CoreState::new(), memcpy(0));
        let field = e.field().map(|p| p.to_string());
        assert_eq!(
            (e.rule(), field.as_deref()),
            (Some(Rule::NonZero), Some("DMA_DIRECT2D.elem_size")),
            "{e}"
        );
        // a GATHER immediate wider than out_dtype (u8) is rejected, naming it
        let t = |o| Tensor4d::contiguous(sbuf(0, o), 4);
        let g = S4d4Gt::new(t(0), t(0x100), Dtype::U8, Dtype::U8, 1).with_immediate(0x1ff);
        let e = fails_closed(&mut f, &mut CoreState::new(), g);
        assert_eq!(
            e.to_string(),
            "S4D4_GT.immediate = 511: immediate has bits above the out_dtype width"
        );
    }
}
