//! Compute ops: the DGE_COMPUTE_OP and CCE_OP enums with the seed's codes, and their
//! element-wise application to byte slices of any dtype.

use crate::error::Error;

/// DGE_COMPUTE_OP (seed 000 section 3c): how a DMA writes its destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComputeOp {
    /// `B = A` (plain copy), code 0.
    None,
    /// `B += A` (scatter-add), code 1.
    Add,
    /// `B *= A`, code 2.
    Multiply,
    /// `B = max(B, A)`, code 3.
    Max,
    /// `B = min(B, A)`, code 4.
    Min,
}

impl ComputeOp {
    /// Every op, in code order.
    pub const ALL: [ComputeOp; 5] = [
        ComputeOp::None,
        ComputeOp::Add,
        ComputeOp::Multiply,
        ComputeOp::Max,
        ComputeOp::Min,
    ];

    /// The DGE_COMPUTE_OP code.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Decodes a DGE_COMPUTE_OP code (0..=4).
    pub fn from_code(code: u8) -> Result<ComputeOp, Error> {
        ComputeOp::ALL
            .get(usize::from(code))
            .copied()
            .ok_or(Error::UnknownComputeOp { code })
    }

    /// The scenario-file name: `none`, `add`, `multiply`, `max`, `min`.
    pub fn name(self) -> &'static str {
        match self {
            ComputeOp::None => "none",
            ComputeOp::Add => "add",
            ComputeOp::Multiply => "multiply",
            ComputeOp::Max => "max",
            ComputeOp::Min => "min",
        }
    }
}

/// CCE_OP (seed 000 section 3d): the embedding update's reduction. Code 1 (multiply) is
/// commented out in the header and rejected here.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CceOp {
    /// code 0
    Add,
    /// code 2
    Max,
    /// code 3
    Min,
}

impl CceOp {
    /// The CCE_OP code.
    pub fn code(self) -> u8 {
        match self {
            CceOp::Add => 0,
            CceOp::Max => 2,
            CceOp::Min => 3,
        }
    }

    /// Decodes a CCE_OP code; 1 and anything above 3 are rejected.
    pub fn from_code(code: u8) -> Result<CceOp, Error> {
        match code {
            0 => Ok(CceOp::Add),
            2 => Ok(CceOp::Max),
            3 => Ok(CceOp::Min),
            _ => Err(Error::UnknownCceOp { code }),
        }
    }

    /// The compute op that applies this reduction.
    pub fn compute_op(self) -> ComputeOp {
        match self {
            CceOp::Add => ComputeOp::Add,
            CceOp::Max => ComputeOp::Max,
            CceOp::Min => ComputeOp::Min,
        }
    }
}
