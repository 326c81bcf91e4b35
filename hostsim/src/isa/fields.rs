//! The sub-structs and coded fields the operand structs are built from: the instruction
//! header, ADDR4 patterns (TENSOR4D, INDIRECT, the MEM_PATTERN4D union), the one-byte
//! bitfields (DMA_INDIRECT_FLAGS, BOUND_CHECK_REG, the shape register byte) and the small
//! enums (index_miss_behavior, the INDIRECT_COPY sub-mode, indirect mode and dim).
//!
//! Bitfields are packed least-significant bit first, in the seed's declaration order:
//!
//! | byte                | bits 0-1        | bit 2            | bit 3              | bits 4-5   | bits 6-7    |
//! |---------------------|-----------------|------------------|--------------------|------------|-------------|
//! | DMA_INDIRECT_FLAGS  | indirect_mode   | idx_bound_is_err | non_unique_dst_idx | gather_dim | scatter_dim |
//!
//! | byte             | bits 0-5 | bit 6                      | bit 7      |
//! |------------------|----------|----------------------------|------------|
//! | BOUND_CHECK_REG  | bc_reg   | bc_disable_oob_error_notif | bc_enabled |
//! | SHAPE_REG        | reg      | reserved (0)               | present    |
//! | inst_flags       | bit 0 TILE (POOL ops, maverick only); bits 1-7 reserved (0) |

use dma::Addr4;
use zerocopy::little_endian::{I16, U16, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::opcode::Opcode;
use super::rule::{self, ensure, FieldPath, Rule};
use crate::error::Error;

/// `code()` and `from_code()` for a field-less enum whose codes are its variants'
/// positions, 0 up, in declaration order (the order `$variant`s are listed in, which must
/// be the declaration order): `code` is the discriminant, `from_code` its inverse, `None`
/// past the last variant.
macro_rules! coded_enum {
    ($t:ident: [$($variant:ident),+]) => {
        impl $t {
            /// The code.
            pub fn code(self) -> u8 {
                self as u8
            }

            /// Decodes the code (`None` for a code no variant has).
            pub fn from_code(code: u8) -> Option<$t> {
                [$($t::$variant),+].get(usize::from(code)).copied()
            }
        }
    };
}

/// The 4-byte header that opens every operand struct (the project's own layout).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct InstHeader {
    opcode: u8,
    inst_flags: InstFlags,
    /// POOL ops: the number of active channels (partitions). DMA ops: reserved (0).
    num_active_channels: u8,
    reserved: u8,
}
const _: () = assert!(size_of::<InstHeader>() == 4);

impl InstHeader {
    /// A header for `opcode`; DMA-level opcodes must pass no flags and 0 channels.
    pub(crate) fn new(opcode: Opcode, inst_flags: InstFlags, num_active_channels: u8) -> Self {
        InstHeader {
            opcode: opcode.code(),
            inst_flags,
            num_active_channels,
            reserved: 0,
        }
    }

    /// The opcode byte.
    pub fn opcode_byte(&self) -> u8 {
        self.opcode
    }

    /// `inst_flags`.
    pub fn inst_flags(&self) -> InstFlags {
        self.inst_flags
    }

    /// The active channel (partition) count of a POOL instruction.
    pub fn num_active_channels(&self) -> u8 {
        self.num_active_channels
    }

    /// Decode rules: flag bits defined for the opcode only, reserved bytes zero (the
    /// channel count is reserved on DMA-level opcodes).
    pub(crate) fn check(&self, structure: &'static str, opcode: Opcode) -> Result<(), Error> {
        let flags = FieldPath::new(structure, "header.inst_flags");
        let allowed = if opcode.uses_active_channels() {
            InstFlags::TILE.0
        } else {
            0
        };
        let bits = self.inst_flags.0;
        ensure(bits & !allowed == 0, flags, bits, Rule::ReservedBits)?;
        if !opcode.uses_active_channels() {
            let at = FieldPath::new(structure, "header.num_active_channels");
            rule::reserved_zero(at, &[self.num_active_channels])?;
        }
        rule::reserved_zero(
            FieldPath::new(structure, "header.reserved"),
            &[self.reserved],
        )
    }
}

/// `inst_flags`: bit 0 is TILE (the maverick tile-aware active-channel check, INFERRED
/// bit position); the other bits are reserved.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(transparent)]
pub struct InstFlags(u8);

impl InstFlags {
    /// No flags.
    pub const NONE: InstFlags = InstFlags(0);
    /// The tile-aware active-channel check (maverick only).
    pub const TILE: InstFlags = InstFlags(1);

    /// Flags from raw bits (reserved bits are rejected at decode, not here).
    pub fn from_bits(bits: u8) -> InstFlags {
        InstFlags(bits)
    }

    /// The raw bits.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether TILE is set.
    pub fn tile(self) -> bool {
        self.0 & InstFlags::TILE.0 != 0
    }
}

/// TENSOR4D: a base ADDR4 plus four (step, count) pairs, in elements. Element `k` has
/// coordinates `c[0..4]` with dim 0 fastest (`c[0] = k % num_elem[0]`, ...) and sits at
/// `start_addr + sum(step_elem[d] * c[d]) * elem_size` inside the start partition.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Tensor4d {
    start_addr: U32,
    step_elem: [I16; 4],
    num_elem: [U16; 4],
}
const _: () = assert!(size_of::<Tensor4d>() == 20);

impl Tensor4d {
    /// A pattern at `start_addr` with per-dim steps and counts (dim 0 innermost).
    pub fn new(start_addr: Addr4, step_elem: [i16; 4], num_elem: [u16; 4]) -> Self {
        Tensor4d {
            start_addr: U32::new(start_addr.0),
            step_elem: step_elem.map(I16::new),
            num_elem: num_elem.map(U16::new),
        }
    }

    /// A contiguous run of `n` elements at `start_addr` (`n` in dim 0, other dims 1).
    pub fn contiguous(start_addr: Addr4, n: u16) -> Self {
        Tensor4d::new(start_addr, [1, 0, 0, 0], [n, 1, 1, 1])
    }

    /// `start_addr` (ADDR4).
    pub fn start_addr(&self) -> Addr4 {
        Addr4(self.start_addr.get())
    }

    /// `step_elem[4]`, signed, in elements.
    pub fn step_elem(&self) -> [i16; 4] {
        self.step_elem.map(I16::get)
    }

    /// `num_elem[4]`.
    pub fn num_elem(&self) -> [u16; 4] {
        self.num_elem.map(U16::get)
    }

    /// Decode rule: `start_addr` is a valid ADDR4 (`at` names it in the error).
    pub(crate) fn check_start(&self, at: FieldPath) -> Result<(), Error> {
        rule::addr4(at, self.start_addr()).map(drop)
    }

    /// Elements the pattern visits (the product of the counts; fits in u64).
    pub fn element_count(&self) -> u64 {
        self.num_elem().iter().map(|n| u64::from(*n)).product()
    }

    /// The lowest and highest element offset (relative to `start_addr`) the pattern
    /// visits, assuming every count is at least 1. Exact in i64 (|step * (n - 1)| < 2^31).
    pub fn extent_elems(&self) -> (i64, i64) {
        let mut lo = 0i64;
        let mut hi = 0i64;
        for (s, n) in self.step_elem().into_iter().zip(self.num_elem()) {
            let reach = i64::from(s) * (i64::from(n) - 1).max(0);
            lo += reach.min(0);
            hi += reach.max(0);
        }
        (lo, hi)
    }
}

/// INDIRECT: the index-driven member of MEM_PATTERN4D (12 bytes).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Indirect {
    index_addr: U32,
    data_addr: U32,
    num_elem: U16,
    reserved: [u8; 2],
}
const _: () = assert!(size_of::<Indirect>() == 12);

impl Indirect {
    /// Indices at `index_addr`, source buffer at `data_addr`, `num_elem` elements read
    /// per partition.
    pub fn new(index_addr: Addr4, data_addr: Addr4, num_elem: u16) -> Self {
        Indirect {
            index_addr: U32::new(index_addr.0),
            data_addr: U32::new(data_addr.0),
            num_elem: U16::new(num_elem),
            reserved: [0; 2],
        }
    }

    /// `index_addr`: the start of the index tensor (SBUF).
    pub fn index_addr(&self) -> Addr4 {
        Addr4(self.index_addr.get())
    }

    /// `data_addr`: the start of the source buffer (SBUF).
    pub fn data_addr(&self) -> Addr4 {
        Addr4(self.data_addr.get())
    }

    /// `num_elem`: total elements per partition to read.
    pub fn num_elem(&self) -> u16 {
        self.num_elem.get()
    }
}

/// INDIRECT20B: INDIRECT padded to the 20-byte union size.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct Indirect20b {
    p: Indirect,
    reserved: [u8; 8],
}
const _: () = assert!(size_of::<Indirect20b>() == 20);

/// MEM_PATTERN4D: the 20-byte union of TENSOR4D `t` and INDIRECT20B `i`, held as bytes.
/// Which member is live is the owning instruction's business (INDIRECT_COPY's sub-mode).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(C)]
pub struct MemPattern4d {
    bytes: [u8; 20],
}
const _: () = assert!(size_of::<MemPattern4d>() == 20);

impl MemPattern4d {
    /// The union holding a tensor pattern.
    pub fn from_tensor(t: Tensor4d) -> Self {
        MemPattern4d {
            bytes: zerocopy::transmute!(t),
        }
    }

    /// The union holding an indirect pattern (padding zero).
    pub fn from_indirect(p: Indirect) -> Self {
        let i = Indirect20b {
            p,
            reserved: [0; 8],
        };
        MemPattern4d {
            bytes: zerocopy::transmute!(i),
        }
    }

    /// The bytes read as the TENSOR4D member.
    pub fn tensor(&self) -> Tensor4d {
        zerocopy::transmute!(self.bytes)
    }

    /// The bytes read as the INDIRECT member.
    pub fn indirect(&self) -> Indirect {
        let i: Indirect20b = zerocopy::transmute!(self.bytes);
        i.p
    }

    /// Decode rule for the INDIRECT member: its reserved bytes and padding are zero.
    pub(crate) fn check_indirect(
        &self,
        structure: &'static str,
        field: &'static str,
    ) -> Result<(), Error> {
        let i: Indirect20b = zerocopy::transmute!(self.bytes);
        rule::reserved_zero(FieldPath::new(structure, field), &i.p.reserved)?;
        rule::reserved_zero(FieldPath::new(structure, field), &i.reserved)
    }
}

/// INDIRECT_DMA_ADDRESSING_MODE: which side of a DMA_INDIRECT the indices drive.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndirectMode {
    /// SRC_INDIRECTION = 0: gather.
    Src,
    /// DST_INDIRECTION = 1: scatter.
    Dst,
    /// SRC_DST_INDIRECTION = 2: both, with two index tensors.
    SrcDst,
}

coded_enum!(IndirectMode: [Src, Dst, SrcDst]);

impl IndirectMode {
    /// Whether indices drive the source (a gather).
    pub fn gathers(self) -> bool {
        self != IndirectMode::Dst
    }

    /// Whether indices drive the destination (a scatter).
    pub fn scatters(self) -> bool {
        self != IndirectMode::Src
    }
}

/// INDIRECT_DIM: X=0, Y=1, Z=2, W=3.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndirectDim {
    X,
    Y,
    Z,
    W,
}

coded_enum!(IndirectDim: [X, Y, Z, W]);

impl IndirectDim {
    /// Decodes the low 2 bits (every 2-bit code is defined, so the fallback is never taken).
    pub fn from_bits(bits: u8) -> IndirectDim {
        IndirectDim::from_code(bits & 3).unwrap_or(IndirectDim::W)
    }
}

/// DMA_INDIRECT_FLAGS (1 byte; bit layout in the module table).
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(transparent)]
pub struct DmaIndirectFlags(u8);

impl DmaIndirectFlags {
    /// Packs the five fields.
    pub fn new(
        indirect_mode: IndirectMode,
        idx_bound_is_err: bool,
        non_unique_dst_idx: bool,
        gather_dim: IndirectDim,
        scatter_dim: IndirectDim,
    ) -> Self {
        DmaIndirectFlags(
            indirect_mode.code()
                | u8::from(idx_bound_is_err) << 2
                | u8::from(non_unique_dst_idx) << 3
                | gather_dim.code() << 4
                | scatter_dim.code() << 6,
        )
    }

    /// The flags of a 1-D row move, both dims X (every DMA-level gather and scatter).
    pub fn rows(indirect_mode: IndirectMode, idx_bound_is_err: bool, non_unique: bool) -> Self {
        let x = IndirectDim::X;
        DmaIndirectFlags::new(indirect_mode, idx_bound_is_err, non_unique, x, x)
    }

    /// The raw byte.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// `indirect_mode`; the undefined code 3 is rejected.
    pub fn indirect_mode(self) -> Result<IndirectMode, Error> {
        let at = FieldPath::new("DMA_INDIRECT1D", "flags.indirect_mode");
        rule::code(at, self.0 & 3, IndirectMode::from_code)
    }

    /// `idx_bound_is_err`: an out-of-bounds index is a hard error (else a soft skip).
    pub fn idx_bound_is_err(self) -> bool {
        self.0 & 1 << 2 != 0
    }

    /// `non_unique_dst_idx`: duplicate scatter targets are allowed (they accumulate).
    pub fn non_unique_dst_idx(self) -> bool {
        self.0 & 1 << 3 != 0
    }

    /// `gather_dim`.
    pub fn gather_dim(self) -> IndirectDim {
        IndirectDim::from_bits(self.0 >> 4)
    }

    /// `scatter_dim`.
    pub fn scatter_dim(self) -> IndirectDim {
        IndirectDim::from_bits(self.0 >> 6)
    }
}

/// Checks a register number against the 6-bit field.
fn register(at: FieldPath, reg: u8) -> Result<u8, Error> {
    ensure(reg < 64, at, reg, Rule::FieldWidth)?;
    Ok(reg)
}

/// BOUND_CHECK_REG (1 byte): which bound register limits a side's indices.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(transparent)]
pub struct BoundCheckReg(u8);

impl BoundCheckReg {
    /// Bound checking off.
    pub const DISABLED: BoundCheckReg = BoundCheckReg(0);

    /// Bound checking on, against registers `bc_reg` (low) and `bc_reg + 1` (high).
    pub fn enabled(bc_reg: u8, bc_disable_oob_error_notif: bool) -> Result<Self, Error> {
        let reg = register(FieldPath::new("BOUND_CHECK_REG", "bc_reg"), bc_reg)?;
        Ok(BoundCheckReg(
            reg | u8::from(bc_disable_oob_error_notif) << 6 | 1 << 7,
        ))
    }

    /// The raw byte.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// `bc_reg` (0..=63).
    pub fn bc_reg(self) -> u8 {
        self.0 & 0x3f
    }

    /// `bc_disable_oob_error_notif`: suppress the OOB notification.
    pub fn bc_disable_oob_error_notif(self) -> bool {
        self.0 & 1 << 6 != 0
    }

    /// `bc_enabled`.
    pub fn bc_enabled(self) -> bool {
        self.0 & 1 << 7 != 0
    }
}

/// The shape register byte of DMA_INDIRECT1D (the project's encoding, INFERRED): when
/// `present`, registers `reg..reg + 4` hold the X, Y, Z, W element counts of the
/// indirect side, so indirect dims other than X have a shape to index.
#[derive(
    FromBytes,
    IntoBytes,
    KnownLayout,
    Immutable,
    Unaligned,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Default,
)]
#[repr(transparent)]
pub struct ShapeReg(u8);

impl ShapeReg {
    /// No shape register: the indirect dim is X.
    pub const NONE: ShapeReg = ShapeReg(0);

    /// A shape held in registers `reg..reg + 4`.
    pub fn at(reg: u8) -> Result<Self, Error> {
        let reg = register(FieldPath::new("SHAPE_REG", "reg"), reg)?;
        Ok(ShapeReg(reg | 1 << 7))
    }

    /// The raw byte.
    pub fn bits(self) -> u8 {
        self.0
    }

    /// Whether a shape register is used.
    pub fn present(self) -> bool {
        self.0 & 1 << 7 != 0
    }

    /// The first shape register (0..=63).
    pub fn reg(self) -> u8 {
        self.0 & 0x3f
    }

    /// Decode rule: bit 6 is reserved.
    pub(crate) fn check(self, at: FieldPath) -> Result<(), Error> {
        ensure(self.0 & 1 << 6 == 0, at, self.0, Rule::ReservedBits)
    }
}

/// index_miss_behavior of GATHER: what an index outside the loaded Pool_Buffer writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IndexMissBehavior {
    /// IMMEDIATE_WRITE = 0: write `immediate` (0 by default).
    #[default]
    ImmediateWrite,
    /// SKIP_WRITE = 1: leave the destination element unchanged.
    SkipWrite,
}

coded_enum!(IndexMissBehavior: [ImmediateWrite, SkipWrite]);

/// reshape_kind of DMA_INDIRECT1D (a project field in a byte the seed leaves reserved):
/// the shape the indices move. Code 0, the default, is the seed's 1-D row move.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum ReshapeKind {
    /// 0: row `k` of `elem_size` bytes moves as a whole (DGE INDIRECT).
    #[default]
    Rows,
    /// 1: gather-transpose (DGE GATHER TRANSPOSE): `dst[c][r] = src[idx[r]][c]`, the
    /// gathered rows written as columns of a destination whose rows are `dst_step_elem`
    /// elements (HBM) or partitions (SBUF/PSUM) apart.
    GatherTranspose,
}

coded_enum!(ReshapeKind: [Rows, GatherTranspose]);

/// The INDIRECT_COPY sub-mode (the project's codes): which MEM_PATTERN4D members are
/// INDIRECT. Only `Gather` is implemented by the hardware.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum IcMode {
    /// 0: src INDIRECT, dst TENSOR4D.
    #[default]
    Gather,
    /// 1: src TENSOR4D, dst INDIRECT (not implemented).
    Scatter,
    /// 2: both INDIRECT (not implemented).
    GatherScatter,
}

coded_enum!(IcMode: [Gather, Scatter, GatherScatter]);

impl IcMode {
    /// Whether the src member is INDIRECT.
    pub fn src_indirect(self) -> bool {
        self != IcMode::Scatter
    }

    /// Whether the dst member is INDIRECT.
    pub fn dst_indirect(self) -> bool {
        self != IcMode::Gather
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;
    use dma::Space;

    #[test]
    fn sub_struct_layouts_are_pinned() {
        pinned!(
            InstHeader,
            "INST_HEADER",
            [opcode, inst_flags, num_active_channels, reserved]
        );
        pinned!(Tensor4d, "TENSOR4D", [start_addr, step_elem, num_elem]);
        pinned!(
            Indirect,
            "INDIRECT",
            [index_addr, data_addr, num_elem, reserved]
        );
        pinned!(Indirect20b, "INDIRECT20B", [p, reserved]);
        pinned!(MemPattern4d, "MEM_PATTERN4D", [bytes]);
    }

    #[test]
    fn dma_indirect_flags_pack_lsb_first() {
        let f = DmaIndirectFlags::new(
            IndirectMode::SrcDst,
            true,
            false,
            IndirectDim::Z,
            IndirectDim::W,
        );
        // 0b11_10_0_1_10: scatter W, gather Z, unique, hard error, SRC_DST
        assert_eq!(f.bits(), 0b1110_0110);
        assert_eq!(f.indirect_mode().unwrap(), IndirectMode::SrcDst);
        assert!(f.idx_bound_is_err() && !f.non_unique_dst_idx());
        assert_eq!(
            (f.gather_dim(), f.scatter_dim()),
            (IndirectDim::Z, IndirectDim::W)
        );
        let rows = DmaIndirectFlags::rows(IndirectMode::Dst, false, true);
        assert_eq!(rows.bits(), 0b0000_1001);
        let e = DmaIndirectFlags(3).indirect_mode().unwrap_err();
        assert_eq!(e.rule(), Some(Rule::EnumValue));
        assert_eq!(
            e.to_string().split(':').next(),
            Some("DMA_INDIRECT1D.flags.indirect_mode = 3")
        );
    }

    #[test]
    fn bound_check_reg_packs_and_rejects_wide_numbers() {
        let b = BoundCheckReg::enabled(5, true).unwrap();
        assert_eq!(b.bits(), 0b1100_0101);
        assert_eq!(
            (b.bc_reg(), b.bc_disable_oob_error_notif(), b.bc_enabled()),
            (5, true, true)
        );
        assert!(!BoundCheckReg::DISABLED.bc_enabled());
        let e = BoundCheckReg::enabled(64, false).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::FieldWidth));
        assert_eq!(e.field().unwrap().to_string(), "BOUND_CHECK_REG.bc_reg");
    }

    #[test]
    fn shape_reg_packs_and_checks_reserved_bit() {
        let s = ShapeReg::at(60).unwrap();
        assert_eq!((s.bits(), s.present(), s.reg()), (0b1011_1100, true, 60));
        assert!(!ShapeReg::NONE.present());
        assert_eq!(ShapeReg::at(64).unwrap_err().rule(), Some(Rule::FieldWidth));
        let at = FieldPath::new("DMA_INDIRECT1D", "shape_reg");
        assert_eq!(
            ShapeReg(0x40).check(at).unwrap_err().rule(),
            Some(Rule::ReservedBits)
        );
        assert!(s.check(at).is_ok());
    }

    #[test]
    fn tensor4d_extent_and_count() {
        let a = Addr4::encode(Space::Sbuf, 2, 64).unwrap();
        let t = Tensor4d::new(a, [1, -8, 100, 0], [4, 3, 2, 5]);
        assert_eq!(t.element_count(), 120);
        // dim0 reaches +3, dim1 reaches -16, dim2 reaches +100, dim3 0
        assert_eq!(t.extent_elems(), (-16, 103));
        assert_eq!(t.start_addr(), a);
        assert_eq!(Tensor4d::contiguous(a, 7).extent_elems(), (0, 6));
    }

    #[test]
    fn mem_pattern_union_views() {
        let a = Addr4::encode(Space::Sbuf, 0, 8).unwrap();
        let b = Addr4::encode(Space::Sbuf, 16, 0).unwrap();
        let u = MemPattern4d::from_indirect(Indirect::new(a, b, 96));
        let i = u.indirect();
        assert_eq!((i.index_addr(), i.data_addr(), i.num_elem()), (a, b, 96));
        assert!(u.check_indirect("S4D4_IC", "src").is_ok());
        let t = Tensor4d::new(a, [1, 2, 3, 4], [5, 6, 7, 8]);
        let u = MemPattern4d::from_tensor(t);
        assert_eq!(u.tensor(), t);
        // as an INDIRECT, the tensor's counts land in the padding
        let e = u.check_indirect("S4D4_IC", "src").unwrap_err();
        assert!(
            matches!(
                e,
                Error::ReservedByte {
                    index: 0,
                    value: 4,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn small_enums_round_trip_and_reject() {
        for code in 0..=2 {
            assert_eq!(IndirectMode::from_code(code).unwrap().code(), code);
            assert_eq!(IcMode::from_code(code).unwrap().code(), code);
        }
        assert_eq!(IndirectMode::from_code(3), None);
        assert_eq!(IcMode::from_code(3), None);
        assert_eq!(
            IndexMissBehavior::from_code(1),
            Some(IndexMissBehavior::SkipWrite)
        );
        assert_eq!(IndexMissBehavior::from_code(2), None);
        assert_eq!(
            ReshapeKind::from_code(1),
            Some(ReshapeKind::GatherTranspose)
        );
        assert_eq!(ReshapeKind::from_code(2), None);
        assert_eq!(ReshapeKind::default().code(), 0);
        assert_eq!(IndirectDim::from_bits(0b110), IndirectDim::Z);
        for code in 0..=3 {
            assert_eq!(IndirectDim::from_bits(code).code(), code);
        }
        assert_eq!(IndexMissBehavior::SkipWrite.code(), 1);
        assert_eq!(ReshapeKind::GatherTranspose.code(), 1);
        assert!(IndirectMode::SrcDst.gathers() && IndirectMode::SrcDst.scatters());
        assert!(!IndirectMode::Src.scatters() && !IndirectMode::Dst.gathers());
        assert!(!IcMode::Gather.dst_indirect() && !IcMode::Scatter.src_indirect());
    }

    #[test]
    fn header_decode_rules() {
        let h = InstHeader::new(Opcode::Gather, InstFlags::TILE, 32);
        assert!(h.check("S4D4_GT", Opcode::Gather).is_ok());
        let bad = InstHeader::new(Opcode::Gather, InstFlags::from_bits(0x3), 32);
        let e = bad.check("S4D4_GT", Opcode::Gather).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ReservedBits));
        assert_eq!(e.field().unwrap().to_string(), "S4D4_GT.header.inst_flags");
        // DMA-level opcodes define no flags and reserve the channel count
        let tile = InstHeader::new(Opcode::DmaIndirect, InstFlags::TILE, 0);
        let e = tile
            .check("DMA_INDIRECT1D", Opcode::DmaIndirect)
            .unwrap_err();
        assert_eq!(e.rule(), Some(Rule::ReservedBits));
        let ch = InstHeader::new(Opcode::DmaIndirect, InstFlags::NONE, 4);
        let e = ch.check("DMA_INDIRECT1D", Opcode::DmaIndirect).unwrap_err();
        assert!(matches!(e, Error::ReservedByte { value: 4, .. }), "{e}");
        let mut r = h;
        r.reserved = 9;
        let e = r.check("S4D4_GT", Opcode::Gather).unwrap_err();
        assert_eq!(
            e.to_string(),
            "S4D4_GT.header.reserved[0] = 0x09: reserved bytes must be zero"
        );
    }
}
