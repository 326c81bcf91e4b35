//! The `dge` crate's one error type.

use thiserror::Error;

/// Every way a descriptor-generation request can be rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("{side} pattern has {dims} dimensions (the DGE takes 1 to 5)")]
    DimCount { side: &'static str, dims: usize },
    #[error("{side} pattern dimension {dim} has count 0 (every count must be at least 1)")]
    ZeroCount { side: &'static str, dim: usize },
    #[error("{side} pattern element size {size} is not 1, 2 or 4 bytes")]
    ElemSize { side: &'static str, size: u32 },
    #[error("{side} pattern dimension {dim} (step {step}, count {count}) overflows 64-bit address arithmetic")]
    PatternOverflow {
        side: &'static str,
        dim: usize,
        step: i64,
        count: u32,
    },
    #[error("{side} pattern dimension {dim} (step {step}, count {count}) reaches {addr:#x}, outside {region}")]
    PatternOutside {
        side: &'static str,
        dim: usize,
        step: i64,
        count: u32,
        addr: u64,
        region: String,
    },
    #[error("{side} pattern starts at {addr:#x}, which is not on the fabric: {source}")]
    PatternStart {
        side: &'static str,
        addr: u64,
        source: dma::Error,
    },
    #[error("source has {src} elements but destination has {dst} (they must be equal)")]
    ElementCountMismatch { src: u64, dst: u64 },
    #[error("{side} pattern has {count} elements, more than the DGE's limit of {limit}")]
    TooManyElements {
        side: &'static str,
        count: u64,
        limit: u64,
    },
    #[error(transparent)]
    Fabric(#[from] dma::Error),
}
