//! The named ISA rules: every decode and validity check that rejects a field value says
//! which of these it applies, so callers (the runtime, fuzzers, tests) can match on it.
//! The small checking helpers here build the matching [`Error`]s.

use dma::{Addr4, Dtype, Space};

use crate::error::Error;

/// Names a field as `STRUCT.field` in errors (`S4D4_GT.in_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldPath {
    /// The operand struct (or sub-struct) name in the seed's spelling.
    pub structure: &'static str,
    /// The field, with sub-struct members joined by `.`.
    pub field: &'static str,
}

impl FieldPath {
    /// `structure.field`.
    pub const fn new(structure: &'static str, field: &'static str) -> FieldPath {
        FieldPath { structure, field }
    }
}

impl std::fmt::Display for FieldPath {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.structure, self.field)
    }
}

/// One ISA rule. The `Display` text is the rule as the error message states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Rule {
    // ---- decode rules (no generation needed) ----
    /// A boolean byte must be 0 or 1.
    Boolean,
    /// An enum field must hold one of its listed values.
    EnumValue,
    /// Reserved bits of a bitfield byte must be zero.
    ReservedBits,
    /// A value must fit its bitfield (6-bit register numbers).
    FieldWidth,
    // ---- active channels (POOL instructions) ----
    /// `num_active_channels` must be 1..=128.
    ActiveChannelCount,
    /// A pattern's partition range `[partition, partition + channels)` must end by 128.
    ActiveChannelRange,
    /// `inst_flags.TILE` exists only on maverick (v5).
    TileFlagGeneration,
    /// With TILE on maverick, a channel range must stay inside one 32-partition tile.
    ActiveChannelTile,
    // ---- shared limits ----
    /// Counts and sizes must be at least 1.
    NonZero,
    /// At most 4096 indices per instruction.
    IndexCount,
    /// A tensor pattern may not reach below the start of its partition.
    PatternBelowPartition,
    /// A DMA element size must be a whole number of dtype elements.
    ElemSizeDtype,
    /// A DMA instruction must enable at least one queue in `eng_mask`.
    EngineMask,
    // ---- POOL_BUFFER_LOAD / GATHER ----
    /// The Pool_Buffer holds at most 512 elements per channel.
    PoolBufferCapacity,
    /// The Pool_Buffer window starts at a multiple of 512.
    PoolBufferStartAlign,
    /// POOL instructions move 1-, 2- or 4-byte elements (no I64).
    PoolElementDtype,
    /// GATHER index dtype must be UINT8, UINT16 or UINT32.
    GatherIndexDtype,
    /// GATHER src and dst patterns must have the same element count.
    GatherElementCount,
    /// GATHER's `immediate` must fit in `out_dtype`.
    ImmediateWidth,
    /// Maverick: GATHER may not source or sink PSUM.
    GatherPsum,
    // ---- INDIRECT_COPY ----
    /// Only the Gather sub-mode of INDIRECT_COPY is implemented.
    IndirectCopyMode,
    /// In the Gather sub-mode `dst_num_elem_per_idx` and `dst_buffer_size` must be 0.
    IndirectCopyDstFieldsZero,
    /// `src_num_elem_per_idx` must be one of 1, 2, 4, 8, 16, 32.
    NumElemPerIdx,
    /// `num_elem` must be a multiple of `src_num_elem_per_idx`.
    NumElemDivisible,
    /// INDIRECT_COPY indices are UINT16.
    IndirectCopyIndexDtype,
    /// INDIRECT_COPY does not cast: `in_dtype == out_dtype`.
    IndirectCopyNoCast,
    /// INDIRECT_COPY index and data tensors live in SBUF.
    IndirectCopySbuf,
    /// INDIRECT_COPY runs on whole 16-partition cores.
    IndirectCopyCoreChannels,
    /// INDIRECT_COPY's dst pattern must hold `num_elem` elements.
    IndirectCopyDstCount,
    // ---- DMA_INDIRECT ----
    /// `src_num_elem` and `dst_num_elem` must be equal.
    DmaIndirectCountsEqual,
    /// `src_elem_size` and `dst_elem_size` must be equal.
    ElemSizeEqual,
    /// DMA_INDIRECT index tensors live in SBUF partition 0.
    IndexInSbufPartition0,
    /// The index address of a side without indirection must be 0.
    UnusedIndexAddr,
    /// A bound register that checks nothing (a side without indirection, or
    /// `bc_enabled = 0`) must be all zero.
    UnusedBoundReg,
    /// `bc_disable_oob_error_notif` silences a soft skip: with `idx_bound_is_err` it must
    /// be 0.
    NotificationInErrorMode,
    /// An indexed side's rows are picked by index: its `step_elem` is 0 or 1.
    IndexedSideStep,
    /// Without a shape register, `shape_reg.reg` must be 0.
    UnusedShapeReg,
    /// `non_unique_dst_idx` applies to an indexed destination.
    UnusedNonUnique,
    /// An enabled bound reads `bc_reg` and `bc_reg + 1`, so `bc_reg <= 62`.
    WideBoundRegister,
    /// Without a shape register the indirect dim must be X.
    IndirectDimWithoutShapeReg,
    /// A shape register reads `reg..reg + 4`, so `reg <= 60`.
    ShapeRegisterRange,
    /// A side without indices has no indirect dim: its dim must be X.
    UnusedIndirectDim,
    /// With a shape register and both sides indexed, the two dims must be equal.
    ShapeDimsDiffer,
    /// A shape's extents are at least 1 (checked at run time, against the registers).
    ShapeExtent,
    /// The indirection step along a shaped dim fits 32 bits (run time).
    ShapeIndirectionStep,
    /// A shaped walk moves at most 2^20 elements (run time).
    ShapeElementCount,
    /// Gather-transpose indexes the source only.
    TransposeMode,
    /// Gather-transpose copies: no compute op.
    TransposeComputeOp,
    /// Gather-transpose is 2-D: no shape register.
    TransposeShapeReg,
    /// Gather-transpose's destination row step keeps the rows apart.
    TransposePitch,
    /// Gather-transpose reads its source rows from HBM.
    TransposeSourceHbm,
    // ---- PSEUDO_EMBEDDING_UPDATE ----
    /// EMBEDDING_UPDATE indices are UINT32.
    EmbeddingIndexDtype,
    /// `embed_entry_stride_bytes` must cover a row's bytes.
    EmbeddingStride,
}

impl Rule {
    /// The rule as one sentence.
    pub fn text(self) -> &'static str {
        use Rule::*;
        match self {
            Boolean => "a boolean field must be 0 or 1",
            EnumValue => "the value is not one of the field's enum values",
            ReservedBits => "reserved bits must be zero (inst_flags: only bit 0 TILE, on POOL ops; shape_reg: bit 6)",
            FieldWidth => "the value does not fit its 6-bit register field (0..=63)",
            ActiveChannelCount => "num_active_channels must be 1..=128",
            ActiveChannelRange => "partition + num_active_channels must be <= 128",
            TileFlagGeneration => "inst_flags TILE is only defined on maverick (v5)",
            ActiveChannelTile => "with TILE, the active channel range must stay inside one 32-partition tile",
            NonZero => "must be at least 1",
            IndexCount => "at most 4096 indices per instruction",
            PatternBelowPartition => "the pattern reaches below the start of its partition (negative steps)",
            ElemSizeDtype => "elem_size must be a multiple of the dtype size",
            EngineMask => "eng_mask must enable at least one DMA queue",
            PoolBufferCapacity => "the Pool_Buffer holds at most 512 elements per channel",
            PoolBufferStartAlign => "the Pool_Buffer start index must be a multiple of 512",
            PoolElementDtype => "POOL_BUFFER_LOAD, GATHER and INDIRECT_COPY move 1-, 2- or 4-byte elements (the IVP lanes are 8, 16 or 32 bits): the element dtype may not be I64 (0xb)",
            GatherIndexDtype => "GATHER index dtype must be UINT8 (0x3), UINT16 (0x5) or UINT32 (0x9)",
            GatherElementCount => "GATHER src and dst patterns must have the same element count",
            ImmediateWidth => "immediate has bits above the out_dtype width",
            GatherPsum => "maverick (v5) GATHER may not use PSUM (SBUF only)",
            IndirectCopyMode => "only the Gather sub-mode (0) of INDIRECT_COPY is implemented",
            IndirectCopyDstFieldsZero => "in the Gather sub-mode the dst fields must be 0",
            NumElemPerIdx => "src_num_elem_per_idx must be 1, 2, 4, 8, 16 or 32",
            NumElemDivisible => "num_elem must be a multiple of src_num_elem_per_idx",
            IndirectCopyIndexDtype => "INDIRECT_COPY indices must be UINT16 (0x5)",
            IndirectCopyNoCast => "INDIRECT_COPY does not cast: out_dtype must equal in_dtype",
            IndirectCopySbuf => "INDIRECT_COPY index and data tensors must be in SBUF",
            IndirectCopyCoreChannels => "INDIRECT_COPY active channels must be a multiple of 16 (whole cores)",
            IndirectCopyDstCount => "the dst pattern must hold exactly num_elem elements",
            DmaIndirectCountsEqual => "src_num_elem and dst_num_elem must be equal",
            ElemSizeEqual => "src_elem_size and dst_elem_size must be equal",
            IndexInSbufPartition0 => "DMA_INDIRECT index tensors must be in SBUF partition 0",
            UnusedIndexAddr => "the index address of a side without indirection must be 0",
            UnusedBoundReg => "a bound register that checks nothing (a side without indirection, or bc_enabled = 0) must be all zero: bc_enabled, bc_reg and bc_disable_oob_error_notif 0",
            NotificationInErrorMode => "bc_disable_oob_error_notif silences a soft skip's notification; with idx_bound_is_err an index out of bounds fails the instruction, so it must be 0",
            IndexedSideStep => "an indexed side's rows are picked by its indices, so its step_elem is unused and must be 0 or 1",
            UnusedShapeReg => "without a shape register (shape_reg.present = 0), shape_reg.reg must be 0",
            UnusedNonUnique => "non_unique_dst_idx applies to indexed destinations: it must be 0 in SRC_INDIRECTION mode",
            WideBoundRegister => "an enabled bound reads bc_reg and bc_reg + 1, so bc_reg must be <= 62",
            IndirectDimWithoutShapeReg => "without a shape register the indirect dim must be X (0)",
            ShapeRegisterRange => "a shape reads the four registers reg..=reg+3, so reg must be <= 60",
            UnusedIndirectDim => "the indirect dim of a side without indices must be X (0)",
            ShapeDimsDiffer => "with a shape register and both sides indexed, scatter_dim must equal gather_dim (one walk, one indexed dim)",
            ShapeExtent => "a shape's extents X, Y, Z, W (registers reg..reg+3) must each be at least 1",
            ShapeIndirectionStep => "the indirection step, elem_size times the shape's extents inside the indirect dim, must fit the 32-bit MAC step (<= 4294967295 bytes)",
            ShapeElementCount => "a shaped DMA_INDIRECT moves at most 2^20 elements (num_elem times the extents other than the indirect dim)",
            TransposeMode => "reshape_kind GATHER_TRANSPOSE indexes the source only: indirect_mode must be SRC_INDIRECTION (0)",
            TransposeComputeOp => "reshape_kind GATHER_TRANSPOSE copies: compute_op must be NONE (0)",
            TransposeShapeReg => "reshape_kind GATHER_TRANSPOSE is 2-D ([n][C] -> [C][n]): no shape register",
            TransposePitch => "reshape_kind GATHER_TRANSPOSE: dst_step_elem, the destination row step, must be >= the index count on HBM (elements) and >= 1 on SBUF/PSUM (partitions)",
            TransposeSourceHbm => "reshape_kind GATHER_TRANSPOSE reads its source rows from HBM: src_start_addr must be an HBM address",
            EmbeddingIndexDtype => "EMBEDDING_UPDATE indices must be UINT32 (0x9)",
            EmbeddingStride => "embed_entry_stride_bytes must be >= embed_entry_num_elements * dtype size",
        }
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.text())
    }
}

/// The error for `at = value` breaking `rule`.
pub(crate) fn invalid(at: FieldPath, value: impl Into<u64>, rule: Rule) -> Error {
    Error::InvalidField {
        field: at,
        value: value.into(),
        rule,
    }
}

/// `Ok` when `ok`, else the error for `at = value` breaking `rule`.
pub(crate) fn ensure(
    ok: bool,
    at: FieldPath,
    value: impl Into<u64>,
    rule: Rule,
) -> Result<(), Error> {
    if ok {
        Ok(())
    } else {
        Err(invalid(at, value.into(), rule))
    }
}

/// `value >= 1` ([`Rule::NonZero`]).
pub(crate) fn nonzero(at: FieldPath, value: impl Into<u64>) -> Result<(), Error> {
    let value = value.into();
    ensure(value >= 1, at, value, Rule::NonZero)
}

/// `value <= max`.
pub(crate) fn at_most(
    at: FieldPath,
    value: impl Into<u64>,
    max: u64,
    rule: Rule,
) -> Result<(), Error> {
    let value = value.into();
    ensure(value <= max, at, value, rule)
}

/// `value == expected`; the error reports `value`.
pub(crate) fn equal<T: Into<u64> + PartialEq>(
    at: FieldPath,
    value: T,
    expected: T,
    rule: Rule,
) -> Result<(), Error> {
    let ok = value == expected;
    ensure(ok, at, value, rule)
}

/// Every byte of a reserved field must be zero.
pub(crate) fn reserved_zero(at: FieldPath, bytes: &[u8]) -> Result<(), Error> {
    match bytes.iter().position(|b| *b != 0) {
        None => Ok(()),
        Some(index) => Err(Error::ReservedByte {
            field: at,
            index,
            value: bytes.get(index).copied().unwrap_or(0),
        }),
    }
}

/// A boolean byte: 0 or 1.
pub(crate) fn boolean(at: FieldPath, byte: u8) -> Result<bool, Error> {
    ensure(byte <= 1, at, byte, Rule::Boolean)?;
    Ok(byte == 1)
}

/// Wraps a `dma` error with the field it came from.
pub(crate) fn dma_at(at: FieldPath) -> impl Fn(dma::Error) -> Error {
    move |source| Error::Field { field: at, source }
}

/// An ISA dtype code.
pub(crate) fn dtype(at: FieldPath, code: u8) -> Result<Dtype, Error> {
    Dtype::from_code(code).map_err(dma_at(at))
}

/// An enum code parsed by `parse`; `None` breaks [`Rule::EnumValue`].
pub(crate) fn code<T>(at: FieldPath, code: u8, parse: fn(u8) -> Option<T>) -> Result<T, Error> {
    parse(code).ok_or_else(|| invalid(at, code, Rule::EnumValue))
}

/// An ADDR4's (space, partition, offset); reserved space codes are rejected.
pub(crate) fn addr4(at: FieldPath, addr: Addr4) -> Result<(Space, u32, u32), Error> {
    addr.decode().map_err(dma_at(at))
}
