//! DMA_DIRECT2D, the operand struct of DMA_MEMCPY 0xb8 (DGE_OPCODE DMA_DIRECT2D = 0): a
//! direct 2-D copy (optionally reducing with a DGE_COMPUTE_OP) of
//! `num_elem[1] x num_elem[0]` elements of `elem_size` bytes.
//!
//! Element `(i, j)` (`j < num_elem[0]` innermost) moves from
//! `src_start_addr + (i * src_step_elem[1] + j * src_step_elem[0]) * elem_size` to the same
//! expression over the destination fields.

use dma::{ComputeOp, Dtype, FabricAddr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{InstFlags, InstHeader};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// NEURON_ISA_TPB_DMA_DIRECT2D_STRUCT (64 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct DmaDirect2d {
    header: InstHeader,
    compute_op: u8,
    dtype: u8,
    reserved0: [u8; 2],
    src_start_addr: U64,
    dst_start_addr: U64,
    elem_size: U32,
    num_elem: [U16; 2],
    src_step_elem: [U16; 2],
    dst_step_elem: [U16; 2],
    eng_mask: U16,
    reserved1: [u8; 22],
}
const _: () = assert!(size_of::<DmaDirect2d>() == 64);

/// A 2-D access of a DMA_DIRECT2D side, for the constructor: base and (inner, outer)
/// steps in elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Direct2dSide {
    pub start_addr: FabricAddr,
    pub step_elem: [u16; 2],
}

impl DmaDirect2d {
    /// Copies `num_elem` (inner, outer) elements of `elem_size` bytes from `src` to `dst`,
    /// with `dtype` for the `compute_op`; every DMA queue enabled.
    pub fn new(
        src: Direct2dSide,
        dst: Direct2dSide,
        elem_size: u32,
        num_elem: [u16; 2],
        dtype: Dtype,
        compute_op: ComputeOp,
    ) -> Self {
        DmaDirect2d {
            header: InstHeader::new(Opcode::DmaMemcpy, InstFlags::NONE, 0),
            compute_op: compute_op.code(),
            dtype: dtype.code(),
            reserved0: [0; 2],
            src_start_addr: U64::new(src.start_addr.0),
            dst_start_addr: U64::new(dst.start_addr.0),
            elem_size: U32::new(elem_size),
            num_elem: num_elem.map(U16::new),
            src_step_elem: src.step_elem.map(U16::new),
            dst_step_elem: dst.step_elem.map(U16::new),
            eng_mask: U16::new(0xffff),
            reserved1: [0; 22],
        }
    }

    /// Sets `eng_mask`.
    pub fn with_eng_mask(mut self, eng_mask: u16) -> Self {
        self.eng_mask = U16::new(eng_mask);
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// DGE_COMPUTE_OP.
    pub fn compute_op(&self) -> Result<ComputeOp, Error> {
        ComputeOp::from_code(self.compute_op).map_err(rule::dma_at(Self::at("compute_op")))
    }

    /// The element dtype the compute op works in.
    pub fn dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("dtype"), self.dtype)
    }

    /// The source side.
    pub fn src(&self) -> Direct2dSide {
        Direct2dSide {
            start_addr: FabricAddr(self.src_start_addr.get()),
            step_elem: self.src_step_elem.map(U16::get),
        }
    }

    /// The destination side.
    pub fn dst(&self) -> Direct2dSide {
        Direct2dSide {
            start_addr: FabricAddr(self.dst_start_addr.get()),
            step_elem: self.dst_step_elem.map(U16::get),
        }
    }

    /// `elem_size`: bytes per element.
    pub fn elem_size(&self) -> u32 {
        self.elem_size.get()
    }

    /// `num_elem`: (inner, outer) counts.
    pub fn num_elem(&self) -> [u16; 2] {
        self.num_elem.map(U16::get)
    }

    /// `eng_mask`.
    pub fn eng_mask(&self) -> u16 {
        self.eng_mask.get()
    }
}

impl Operand for DmaDirect2d {
    const OPCODE: Opcode = Opcode::DmaMemcpy;
    const NAME: &'static str = "DMA_DIRECT2D";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        self.compute_op()?;
        self.dtype()?;
        rule::reserved_zero(Self::at("reserved0"), &self.reserved0)?;
        rule::reserved_zero(Self::at("reserved1"), &self.reserved1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;

    fn sample() -> DmaDirect2d {
        let src = Direct2dSide {
            start_addr: FabricAddr(0x100),
            step_elem: [1, 16],
        };
        let dst = Direct2dSide {
            start_addr: FabricAddr(0x2000),
            step_elem: [1, 8],
        };
        DmaDirect2d::new(src, dst, 4, [8, 3], Dtype::I32, ComputeOp::Min)
    }

    #[test]
    fn layout_is_pinned() {
        pinned!(
            DmaDirect2d,
            "DMA_DIRECT2D",
            [
                header,
                compute_op,
                dtype,
                reserved0,
                src_start_addr,
                dst_start_addr,
                elem_size,
                num_elem,
                src_step_elem,
                dst_step_elem,
                eng_mask,
                reserved1,
            ]
        );
    }

    #[test]
    fn builder_and_getters() {
        let d = sample().with_eng_mask(1);
        assert_eq!(
            (d.compute_op().unwrap(), d.dtype().unwrap()),
            (ComputeOp::Min, Dtype::I32)
        );
        assert_eq!(d.src().step_elem, [1, 16]);
        assert_eq!(d.dst().start_addr, FabricAddr(0x2000));
        assert_eq!((d.elem_size(), d.num_elem(), d.eng_mask()), (4, [8, 3], 1));
        let b = d.encode();
        assert_eq!(&b[..8], &[0xb8, 0, 0, 0, 4, 0x8, 0, 0]);
        assert_eq!(&b[24..32], &[4, 0, 0, 0, 8, 0, 3, 0]);
        assert_eq!(DmaDirect2d::decode_from(&b).unwrap(), d);
    }

    #[test]
    fn decode_rejects_bad_codes_and_flags() {
        let good = sample().encode();
        let mut b = good;
        b[5] = 0x1;
        assert_eq!(
            DmaDirect2d::decode_from(&b)
                .unwrap_err()
                .field()
                .unwrap()
                .to_string(),
            "DMA_DIRECT2D.dtype"
        );
        let mut b = good;
        b[1] = 1; // TILE is a POOL flag
        assert_eq!(
            DmaDirect2d::decode_from(&b).unwrap_err().rule(),
            Some(crate::isa::Rule::ReservedBits)
        );
        let mut b = good;
        b[63] = 2;
        assert!(matches!(
            DmaDirect2d::decode_from(&b),
            Err(Error::ReservedByte {
                index: 21,
                value: 2,
                ..
            })
        ));
    }
}
