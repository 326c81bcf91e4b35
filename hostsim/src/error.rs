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
    /// A descriptor-generation error.
    #[error(transparent)]
    Dge(#[from] dge::Error),
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
