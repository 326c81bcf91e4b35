//! The `ivp` crate's one error type: bad GSControl words, bad register names, bad element
//! sizes, and address arithmetic that leaves the 64-bit space.

use thiserror::Error;

/// Every failure the IVP model reports. Dead lanes (disabled or out of the port's bounds)
/// are not errors: they are the hardware's defined behaviour and drain as 0.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    /// GSControl bits 15:8 are the constant `8'd0`.
    #[error("GSControl {raw:#06x} has bits 15:8 set (they must be 8'd0)")]
    GsControlReserved {
        /// The rejected control word.
        raw: u16,
    },
    /// operation_fld outside the six SuperGather operations.
    #[error("GSControl {raw:#06x} operation_fld {code} is not an operation (gathera=1 gatherd=2 mgatherd=3 scatter=4 scatterw=5 scatterinc=6)")]
    GsOperation {
        /// The rejected control word.
        raw: u16,
        /// Its operation_fld.
        code: u8,
    },
    /// elem_sz_fld 3 is reserved.
    #[error("GSControl {raw:#06x} elem_sz_fld {fld} is reserved (0, 1, 2 select 1, 2, 4 bytes)")]
    GsElemSz {
        /// The rejected control word.
        raw: u16,
        /// Its elem_sz_fld.
        fld: u8,
    },
    /// offst_sz_fld 2 and 3 are reserved.
    #[error("GSControl {raw:#06x} offst_sz_fld {fld} is reserved (0 selects 16-bit offsets, 1 selects 32-bit offsets)")]
    GsOffstSz {
        /// The rejected control word.
        raw: u16,
        /// Its offst_sz_fld.
        fld: u8,
    },
    /// An element size that is not one of the engine's three.
    #[error("element size {bytes} bytes is not one of the SuperGather sizes 1, 2, 4")]
    ElemSize {
        /// The rejected size in bytes.
        bytes: u64,
    },
    /// A gather staging register past gr7.
    #[error("gather register gr{index} does not exist (the gvr file is gr0..gr7)")]
    GrIndex {
        /// The rejected register number.
        index: u8,
    },
    /// `acc + idx * step` of mulusan_2x32 left `0..=u64::MAX`.
    #[error("mulusan_2x32 lane {lane}: address {acc:#x} + index {idx} * step {step} leaves the 64-bit address space")]
    AddressOverflow {
        /// The failing lane (0 for the scalar form).
        lane: usize,
        /// The accumulated address before the step.
        acc: u64,
        /// The unsigned index.
        idx: u32,
        /// The signed step.
        step: i32,
    },
}
