//! The `hostsim` crate's one error type.

use thiserror::Error;

use crate::isa::{FieldPath, Rule};

/// Every failure of the ISA layer, the kernels, the runtime, the lowering and scenarios.
#[derive(Debug, Error)]
pub enum Error {
    /// An instruction buffer that is not exactly one 64-byte operand struct.
    #[error("instruction is {len} bytes; an ISA instruction is exactly 64 bytes")]
    InstructionLength { len: usize },
    /// An opcode byte outside the opcode table.
    #[error("unknown opcode {opcode:#04x} (known: 0x67 0x68 0x79 0xb8 0xbb 0xca 0xe7)")]
    UnknownOpcode { opcode: u8 },
    /// The raw 0x79 EMBEDDING_UPDATE: a known opcode with no operand struct.
    #[error("opcode {opcode:#04x} {name} has no operand struct (raw SEQ form; encode PSEUDO_EMBEDDING_UPDATE 0xca)")]
    NoOperandStruct { opcode: u8, name: &'static str },
    /// A reserved byte that is not zero.
    #[error("{field}[{index}] = {value:#04x}: reserved bytes must be zero")]
    ReservedByte {
        field: FieldPath,
        index: usize,
        value: u8,
    },
    /// A field value that breaks an ISA rule (decode or per-generation validity).
    #[error("{field} = {value}: {rule}")]
    InvalidField {
        field: FieldPath,
        value: u64,
        rule: Rule,
    },
    /// A field whose code or address the `dma` crate rejects (dtype, compute op, CCE_OP,
    /// ADDR4 space code, fabric range).
    #[error("{field}: {source}")]
    Field {
        field: FieldPath,
        source: dma::Error,
    },
    /// A `dma` error without a field to name.
    #[error(transparent)]
    Dma(#[from] dma::Error),
    /// A Pool_Buffer channel outside 0..128.
    #[error("Pool_Buffer channel {channel} does not exist (channels are 0..128)")]
    PoolChannel { channel: u32 },
    /// A Pool_Buffer window whose start is not a multiple of 512.
    #[error("Pool_Buffer start_index {start_index} is not a multiple of 512")]
    PoolWindowStart { start_index: u32 },
    /// A Pool_Buffer window that is not a whole number of at most 512 elements.
    #[error("Pool_Buffer window of {bytes} bytes is not a whole number of at most 512 {dtype:?} elements")]
    PoolWindowLength { bytes: usize, dtype: dma::Dtype },
    /// GATHER copies window bytes without a cast, so element sizes must match.
    #[error("GATHER channel {channel}: out_dtype {out:?} ({out_size} bytes) does not match the Pool_Buffer window dtype {window:?} ({window_size} bytes)")]
    GatherWindowDtype {
        channel: u32,
        out: dma::Dtype,
        out_size: usize,
        window: dma::Dtype,
        window_size: usize,
    },
    /// A hard OOB error: an index at or beyond its side's bound with `idx_bound_is_err`.
    #[error("{side} index {value} at position {position} is out of bounds ({bound} rows)")]
    IndexOutOfBounds {
        side: crate::core_state::IndexSide,
        position: u32,
        value: u32,
        bound: u64,
    },
    /// An index whose row leaves the fabric (bound check disabled, or not bounded).
    #[error("{side} index {value} at position {position} addresses outside the fabric: {source}")]
    IndexAddress {
        side: crate::core_state::IndexSide,
        position: u32,
        value: u32,
        source: dma::Error,
    },
    /// Two scatter positions naming one destination row without `non_unique_dst_idx`.
    #[error("dst index {value} repeats at positions {first} and {second}; duplicate destinations need non_unique_dst_idx")]
    DuplicateDestination { value: u32, first: u32, second: u32 },
    /// A descriptor-generation error.
    #[error(transparent)]
    Dge(#[from] dge::Error),
    /// An opcode the POOL route has no kernel for (DMA_MEMCPY is the DGE's on every
    /// generation).
    #[error("opcode {opcode:#04x} {name} has no POOL kernel (route it to the DGE)")]
    NoPoolKernel { opcode: u8, name: &'static str },
    /// A POOL kernel's scatter lanes that no staged range took (the kernel stages every
    /// destination it may write, so this names a kernel bug; nothing is written).
    #[error("{kernel}: {lanes} scatter lanes fell outside the staged destination ranges; nothing written")]
    PoolDeadStores { kernel: &'static str, lanes: u32 },
    /// A POOL kernel's slice copy outside what it staged (a kernel bug; nothing is
    /// written).
    #[error("{kernel}: {len} bytes at {addr:#x} are outside the staged ranges; nothing written")]
    PoolStaging {
        kernel: &'static str,
        addr: u64,
        len: u64,
    },
}

impl Error {
    /// The ISA rule an [`Error::InvalidField`] breaks.
    pub fn rule(&self) -> Option<Rule> {
        match self {
            Error::InvalidField { rule, .. } => Some(*rule),
            _ => None,
        }
    }

    /// The `STRUCT.field` an ISA error names.
    pub fn field(&self) -> Option<FieldPath> {
        match self {
            Error::ReservedByte { field, .. }
            | Error::InvalidField { field, .. }
            | Error::Field { field, .. } => Some(*field),
            _ => None,
        }
    }
}
