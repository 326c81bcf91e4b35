//! DMA_INDIRECT1D, the operand struct of DMA_INDIRECT 0xbb (DGE_OPCODE DMA_INDIRECT1D = 1):
//! a DMA of `n` elements where u32 indices in SBUF partition 0 pick source rows (gather),
//! destination rows (scatter) or both, optionally reducing with a DGE_COMPUTE_OP.
//!
//! Element `k` moves `elem_size` bytes from `src_start_addr + s_k * src_elem_size` to
//! `dst_start_addr + d_k * dst_elem_size`, where `s_k` is `src_idx[k]` on an indirect
//! source and `k * src_step_elem` otherwise (likewise for the destination).
//!
//! # With a shape register
//!
//! The project's semantics (the seed names the shape register and says only that without
//! one the indirect dim must be X). Registers `reg..=reg + 3` hold the extents
//! `(X, Y, Z, W)`, X innermost. An indexed side is the row-major tensor `[W][Z][Y][X]` of
//! `elem_size`-byte elements from its start address, indexed along its dim (`gather_dim`
//! on the source, `scatter_dim` on the destination; with both sides indexed the two must
//! be equal, so both tensors have the shape and the dim). The instruction walks the shape
//! with the dim's extent replaced by the `n = num_elem` positions, row-major, W
//! outermost: `n * (product of the other three extents)` elements ([`IndirectWalk`]). At
//! the walk's point `(.., k, ..)` (position `k` on the dim) the indexed side's element is
//! the tensor element at that point with `k` replaced by `idx[k]`, and the direct side's
//! is the walk's running count `j` at `start_addr + j * step_elem * elem_size`. Elements
//! move in walk order, each read when it moves. Without a shape register the walk is the
//! 1-D one above. An index at or past the smaller of its BOUND_CHECK_REG bound (when
//! enabled) and the extent along its dim is out of bounds: its position moves nothing at
//! any point of the walk (soft skip) or the instruction fails naming that bound (hard
//! error). Duplicate destination indices are duplicate positions, as without a shape.
//! This is NKI's `vector_offset` on dim `d` (an index steps `prod(shape[d+1:])` elements,
//! and an index past the axis size is out of bounds), on the ISA's (X, Y, Z, W) shape.
//!
//! Refused by validation: a non-X dim on a side without indices, different dims with
//! both sides indexed, a shape with GATHER_TRANSPOSE. Refused at run time on every route,
//! before anything moves (`validate::dma_indirect_walk`): a zero extent, an indirection
//! step (`elem_size` times the extents inside the dim) past 32 bits, a walk of more than
//! 2^20 elements, an indexed tensor or a direct run off the fabric.
//!
//! `reshape_kind` (byte 52, the project's field: the seed leaves it reserved) selects
//! [`ReshapeKind::GatherTranspose`] instead: with `C = elem_size / dtype size`, element
//! `c` of gathered row `r` goes to element `r` of destination row `c`, i.e.
//! `dst[c][r] = src[idx[r]][c]`. Destination row `c` starts `c * dst_step_elem` steps
//! after `dst_start_addr`: elements on HBM, partitions (same offset) on SBUF/PSUM, the
//! DGE's convention for an outermost dimension (the DGE's GATHER TRANSPOSE kind; the
//! rules are in `validate::dma_ops`).

use dma::{Addr4, ComputeOp, Dtype, FabricAddr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{
    BoundCheckReg, DmaIndirectFlags, IndirectDim, InstFlags, InstHeader, ReshapeKind, ShapeReg,
};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// NEURON_ISA_TPB_DMA_INDIRECT1D_STRUCT (64 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct DmaIndirect1d {
    header: InstHeader,
    flags: DmaIndirectFlags,
    src_idx_bound_reg: BoundCheckReg,
    dst_idx_bound_reg: BoundCheckReg,
    compute_op: u8,
    /// ADDR8: a 64-bit fabric address.
    src_start_addr: U64,
    /// ADDR8: a 64-bit fabric address.
    dst_start_addr: U64,
    /// ADDR4 of the gather indices (u32, SBUF partition 0).
    src_idx_start_addr: U32,
    /// ADDR4 of the scatter indices (u32, SBUF partition 0).
    dst_idx_start_addr: U32,
    src_num_elem: U16,
    dst_num_elem: U16,
    src_elem_size: U32,
    dst_elem_size: U32,
    src_step_elem: U16,
    dst_step_elem: U16,
    dtype: u8,
    shape_reg: ShapeReg,
    /// One bit per DMA queue the descriptors may be sprayed over (ndma = popcount).
    eng_mask: U16,
    /// The project's ReshapeKind code (0: rows).
    reshape_kind: u8,
    reserved: [u8; 11],
}
const _: () = assert!(size_of::<DmaIndirect1d>() == 64);

/// One side (source or destination) of a DMA_INDIRECT, for the constructor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DmaSide {
    /// Base fabric address of the rows.
    pub start_addr: FabricAddr,
    /// ADDR4 of the u32 indices (`Addr4(0)` on a direct side).
    pub idx_start_addr: Addr4,
    /// Bytes per row (element).
    pub elem_size: u32,
    /// Row step of a direct side, in elements.
    pub step_elem: u16,
    /// Bound register of an indirect side.
    pub bound: BoundCheckReg,
}

impl DmaIndirect1d {
    /// `num_elem` elements from `src` to `dst` as `flags` says, with `dtype` for the
    /// `compute_op`; every DMA queue enabled, no shape register.
    pub fn new(
        flags: DmaIndirectFlags,
        src: DmaSide,
        dst: DmaSide,
        num_elem: u16,
        dtype: Dtype,
        compute_op: ComputeOp,
    ) -> Self {
        DmaIndirect1d {
            header: InstHeader::new(Opcode::DmaIndirect, InstFlags::NONE, 0),
            flags,
            src_idx_bound_reg: src.bound,
            dst_idx_bound_reg: dst.bound,
            compute_op: compute_op.code(),
            src_start_addr: U64::new(src.start_addr.0),
            dst_start_addr: U64::new(dst.start_addr.0),
            src_idx_start_addr: U32::new(src.idx_start_addr.0),
            dst_idx_start_addr: U32::new(dst.idx_start_addr.0),
            src_num_elem: U16::new(num_elem),
            dst_num_elem: U16::new(num_elem),
            src_elem_size: U32::new(src.elem_size),
            dst_elem_size: U32::new(dst.elem_size),
            src_step_elem: U16::new(src.step_elem),
            dst_step_elem: U16::new(dst.step_elem),
            dtype: dtype.code(),
            shape_reg: ShapeReg::NONE,
            eng_mask: U16::new(0xffff),
            reshape_kind: ReshapeKind::Rows.code(),
            reserved: [0; 11],
        }
    }

    /// Sets `eng_mask`.
    pub fn with_eng_mask(mut self, eng_mask: u16) -> Self {
        self.eng_mask = U16::new(eng_mask);
        self
    }

    /// Sets `reshape_kind`.
    pub fn with_reshape_kind(mut self, kind: ReshapeKind) -> Self {
        self.reshape_kind = kind.code();
        self
    }

    /// Sets the shape register byte.
    pub fn with_shape_reg(mut self, shape_reg: ShapeReg) -> Self {
        self.shape_reg = shape_reg;
        self
    }

    /// Sets `src_num_elem` and `dst_num_elem` independently.
    pub fn with_num_elem(mut self, src_num_elem: u16, dst_num_elem: u16) -> Self {
        self.src_num_elem = U16::new(src_num_elem);
        self.dst_num_elem = U16::new(dst_num_elem);
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// DMA_INDIRECT_FLAGS.
    pub fn flags(&self) -> DmaIndirectFlags {
        self.flags
    }

    /// `src_idx_bound_reg`.
    pub fn src_idx_bound_reg(&self) -> BoundCheckReg {
        self.src_idx_bound_reg
    }

    /// `dst_idx_bound_reg`.
    pub fn dst_idx_bound_reg(&self) -> BoundCheckReg {
        self.dst_idx_bound_reg
    }

    /// DGE_COMPUTE_OP.
    pub fn compute_op(&self) -> Result<ComputeOp, Error> {
        ComputeOp::from_code(self.compute_op).map_err(rule::dma_at(Self::at("compute_op")))
    }

    /// `src_start_addr` (ADDR8).
    pub fn src_start_addr(&self) -> FabricAddr {
        FabricAddr(self.src_start_addr.get())
    }

    /// `dst_start_addr` (ADDR8).
    pub fn dst_start_addr(&self) -> FabricAddr {
        FabricAddr(self.dst_start_addr.get())
    }

    /// `src_idx_start_addr` (ADDR4).
    pub fn src_idx_start_addr(&self) -> Addr4 {
        Addr4(self.src_idx_start_addr.get())
    }

    /// `dst_idx_start_addr` (ADDR4).
    pub fn dst_idx_start_addr(&self) -> Addr4 {
        Addr4(self.dst_idx_start_addr.get())
    }

    /// `src_num_elem`.
    pub fn src_num_elem(&self) -> u16 {
        self.src_num_elem.get()
    }

    /// `dst_num_elem`.
    pub fn dst_num_elem(&self) -> u16 {
        self.dst_num_elem.get()
    }

    /// `src_elem_size`: bytes per source row.
    pub fn src_elem_size(&self) -> u32 {
        self.src_elem_size.get()
    }

    /// `dst_elem_size`: bytes per destination row.
    pub fn dst_elem_size(&self) -> u32 {
        self.dst_elem_size.get()
    }

    /// `src_step_elem`: row step of a direct source.
    pub fn src_step_elem(&self) -> u16 {
        self.src_step_elem.get()
    }

    /// `dst_step_elem`: row step of a direct destination.
    pub fn dst_step_elem(&self) -> u16 {
        self.dst_step_elem.get()
    }

    /// The element dtype the compute op works in.
    pub fn dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("dtype"), self.dtype)
    }

    /// The shape register byte.
    pub fn shape_reg(&self) -> ShapeReg {
        self.shape_reg
    }

    /// `eng_mask`.
    pub fn eng_mask(&self) -> u16 {
        self.eng_mask.get()
    }

    /// The source side's fields (as [`DmaIndirect1d::new`] takes them).
    pub fn src(&self) -> DmaSide {
        DmaSide {
            start_addr: self.src_start_addr(),
            idx_start_addr: self.src_idx_start_addr(),
            elem_size: self.src_elem_size(),
            step_elem: self.src_step_elem(),
            bound: self.src_idx_bound_reg,
        }
    }

    /// The destination side's fields.
    pub fn dst(&self) -> DmaSide {
        DmaSide {
            start_addr: self.dst_start_addr(),
            idx_start_addr: self.dst_idx_start_addr(),
            elem_size: self.dst_elem_size(),
            step_elem: self.dst_step_elem(),
            bound: self.dst_idx_bound_reg,
        }
    }

    /// `reshape_kind`.
    pub fn reshape_kind(&self) -> Result<ReshapeKind, Error> {
        rule::code(
            Self::at("reshape_kind"),
            self.reshape_kind,
            ReshapeKind::from_code,
        )
    }
}

/// How a DMA_INDIRECT's `n` positions expand into elements (module docs): the walk is
/// `[outer][n][inner]`, row-major, and without a shape register `outer = inner = 1`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectWalk {
    /// Points of the walk outside the indexed dim: the product of the extents outside it.
    pub outer: u64,
    /// Points inside it: the product of the extents inside it (consecutive elements of
    /// an indexed tensor).
    pub inner: u64,
    /// The shape's extent along the indexed dim (`None` without a shape register).
    pub extent: Option<u32>,
}

impl IndirectWalk {
    /// The 1-D walk of an instruction without a shape register.
    pub const ROWS: IndirectWalk = IndirectWalk {
        outer: 1,
        inner: 1,
        extent: None,
    };

    /// The walk of the shape `xyzw` (X innermost) indexed along `dim`.
    pub fn of_shape(xyzw: [u32; 4], dim: IndirectDim) -> IndirectWalk {
        let d = usize::from(dim.code());
        // Saturating: validation refuses a walk past 2^20 elements before it is used.
        let product = |extents: &[u32]| {
            let mul = |acc: u64, &e: &u32| acc.saturating_mul(u64::from(e));
            extents.iter().fold(1, mul)
        };
        IndirectWalk {
            outer: product(xyzw.get(d + 1..).unwrap_or(&[])),
            inner: product(xyzw.get(..d).unwrap_or(&[])),
            extent: xyzw.get(d).copied(),
        }
    }

    /// Elements one position moves: `outer * inner` (saturating).
    pub fn per_position(&self) -> u64 {
        self.outer.saturating_mul(self.inner)
    }

    /// The bound an index is checked against: the smaller of the register's `bound`
    /// (`None` when disabled) and the extent.
    pub fn bound(&self, bound: Option<u64>) -> Option<u64> {
        match (bound, self.extent) {
            (Some(b), Some(e)) => Some(b.min(u64::from(e))),
            (b, e) => b.or(e.map(u64::from)),
        }
    }
}

impl Operand for DmaIndirect1d {
    const OPCODE: Opcode = Opcode::DmaIndirect;
    const NAME: &'static str = "DMA_INDIRECT1D";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        self.flags.indirect_mode()?;
        self.compute_op()?;
        rule::addr4(Self::at("src_idx_start_addr"), self.src_idx_start_addr())?;
        rule::addr4(Self::at("dst_idx_start_addr"), self.dst_idx_start_addr())?;
        self.dtype()?;
        self.shape_reg.check(Self::at("shape_reg"))?;
        self.reshape_kind()?;
        rule::reserved_zero(Self::at("reserved"), &self.reserved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::fields::{IndirectDim, IndirectMode};
    use crate::isa::layout::pinned;
    use crate::isa::Rule;
    use dma::Space;

    fn scatter_add() -> DmaIndirect1d {
        let flags = DmaIndirectFlags::new(
            IndirectMode::Dst,
            true,
            true,
            IndirectDim::X,
            IndirectDim::X,
        );
        let src = DmaSide {
            start_addr: FabricAddr(0x1000),
            idx_start_addr: Addr4(0),
            elem_size: 64,
            step_elem: 1,
            bound: BoundCheckReg::DISABLED,
        };
        let dst = DmaSide {
            start_addr: FabricAddr(0x10_0000),
            idx_start_addr: Addr4::encode(Space::Sbuf, 0, 0x200).unwrap(),
            elem_size: 64,
            step_elem: 0,
            bound: BoundCheckReg::enabled(10, false).unwrap(),
        };
        DmaIndirect1d::new(flags, src, dst, 100, Dtype::F32, ComputeOp::Add)
    }

    #[test]
    fn layout_is_pinned() {
        pinned!(
            DmaIndirect1d,
            "DMA_INDIRECT1D",
            [
                header,
                flags,
                src_idx_bound_reg,
                dst_idx_bound_reg,
                compute_op,
                src_start_addr,
                dst_start_addr,
                src_idx_start_addr,
                dst_idx_start_addr,
                src_num_elem,
                dst_num_elem,
                src_elem_size,
                dst_elem_size,
                src_step_elem,
                dst_step_elem,
                dtype,
                shape_reg,
                eng_mask,
                reshape_kind,
                reserved,
            ]
        );
    }

    #[test]
    fn builder_and_getters() {
        let d = scatter_add()
            .with_eng_mask(0x00f0)
            .with_shape_reg(ShapeReg::at(8).unwrap());
        assert_eq!(d.flags().indirect_mode().unwrap(), IndirectMode::Dst);
        assert_eq!(d.compute_op().unwrap(), ComputeOp::Add);
        assert_eq!(
            (d.src_start_addr(), d.dst_start_addr()),
            (FabricAddr(0x1000), FabricAddr(0x10_0000))
        );
        assert_eq!(d.dst_idx_start_addr(), Addr4(0x200));
        assert_eq!((d.src_num_elem(), d.dst_num_elem()), (100, 100));
        assert_eq!(
            (
                d.src_elem_size(),
                d.dst_elem_size(),
                d.src_step_elem(),
                d.dst_step_elem()
            ),
            (64, 64, 1, 0)
        );
        assert_eq!(d.dst_idx_bound_reg().bc_reg(), 10);
        assert!(!d.src_idx_bound_reg().bc_enabled());
        assert_eq!(
            (d.dtype().unwrap(), d.eng_mask(), d.shape_reg().reg()),
            (Dtype::F32, 0xf0, 8)
        );
        let b = d.encode();
        assert_eq!(&b[..8], &[0xbb, 0, 0, 0, 0b0000_1101, 0, 0x8a, 1]);
        assert_eq!(&b[16..24], &0x10_0000u64.to_le_bytes());
        assert_eq!(&b[48..52], &[0xa, 0x88, 0xf0, 0]);
        assert_eq!(DmaIndirect1d::decode_from(&b).unwrap(), d);
        assert_eq!(
            (d.src().step_elem, d.dst().bound),
            (1, d.dst_idx_bound_reg())
        );
        assert_eq!(d.dst().idx_start_addr, Addr4(0x200));
        let n = d.with_num_elem(3, 4);
        assert_eq!((n.src_num_elem(), n.dst_num_elem()), (3, 4));
    }

    #[test]
    fn decode_rejects_each_bad_code() {
        let good = scatter_add().encode();
        let mut b = good;
        b[4] = 0b11; // indirect_mode 3
        assert_eq!(
            DmaIndirect1d::decode_from(&b).unwrap_err().rule(),
            Some(Rule::EnumValue)
        );
        let mut b = good;
        b[7] = 5;
        let e = DmaIndirect1d::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Field {
                    source: dma::Error::UnknownComputeOp { code: 5 },
                    ..
                }
            ),
            "{e}"
        );
        let mut b = good;
        b[49] = 0x40;
        let e = DmaIndirect1d::decode_from(&b).unwrap_err();
        assert_eq!(
            (e.rule(), e.field().unwrap().to_string()),
            (Some(Rule::ReservedBits), "DMA_INDIRECT1D.shape_reg".into())
        );
        let mut b = good;
        b[31] = 0xc0;
        let e = DmaIndirect1d::decode_from(&b).unwrap_err();
        assert_eq!(
            e.field().unwrap().to_string(),
            "DMA_INDIRECT1D.dst_idx_start_addr"
        );
        let mut b = good;
        b[52] = 1;
        let t = DmaIndirect1d::decode_from(&b).unwrap();
        assert_eq!(t.reshape_kind().unwrap(), ReshapeKind::GatherTranspose);
        assert_eq!(
            t,
            scatter_add().with_reshape_kind(ReshapeKind::GatherTranspose)
        );
        b[52] = 2;
        let e = DmaIndirect1d::decode_from(&b).unwrap_err();
        assert_eq!(
            (e.rule(), e.field().unwrap().to_string()),
            (Some(Rule::EnumValue), "DMA_INDIRECT1D.reshape_kind".into())
        );
        let mut b = good;
        b[53] = 1;
        assert!(matches!(
            DmaIndirect1d::decode_from(&b),
            Err(Error::ReservedByte {
                index: 0,
                value: 1,
                ..
            })
        ));
        let mut b = good;
        b[2] = 1;
        let e = DmaIndirect1d::decode_from(&b).unwrap_err();
        assert_eq!(
            e.field().unwrap().to_string(),
            "DMA_INDIRECT1D.header.num_active_channels"
        );
    }
}
