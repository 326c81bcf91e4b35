//! The `dge` crate's one error type.

use thiserror::Error;

/// Every way a descriptor-generation request can be rejected.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("{side} pattern has {dims} dimensions (the DGE takes 1 to 5)")]
    DimCount { side: &'static str, dims: usize },
    #[error("{side} pattern dimension {dim} has count 0 (every count must be at least 1)")]
    ZeroCount { side: &'static str, dim: usize },
    #[error("{side} pattern element size {size} is not 1, 2, 4 or 8 bytes")]
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
    #[error("{side} pattern walks {pieces} pieces (its runs that are contiguous before the other side cuts them), more than the DGE's limit of {limit} per request: split the request")]
    TooManyPieces {
        side: &'static str,
        pieces: u64,
        limit: u64,
    },
    #[error("{side} index {value} at position {position} is out of bounds (bound {bound}: indices must be below it)")]
    IndexOutOfBounds {
        side: &'static str,
        position: u32,
        value: u32,
        bound: u64,
    },
    #[error("{side} index {value} at position {position} passes its bound but addresses {addr:#x}, whose row leaves the fabric")]
    IndexOffFabric {
        side: &'static str,
        position: u32,
        value: u32,
        addr: u64,
    },
    #[error("{side} index {value} at position {position} times step {step} overflows the 64-bit address")]
    IndexOverflow {
        side: &'static str,
        position: u32,
        value: u32,
        step: i32,
    },
    #[error("eng_mask {eng_mask:#06x} selects no DMA queue (set at least one of bits 0..15)")]
    NoQueues { eng_mask: u16 },
    #[error(
        "{side} indirection dimension {dim} does not exist (the pattern has {dims} dimensions)"
    )]
    IndirectDim {
        side: &'static str,
        dim: usize,
        dims: usize,
    },
    #[error("{side} indirection has {count} indices, more than the limit of {limit}")]
    TooManyIndices {
        side: &'static str,
        count: u64,
        limit: u32,
    },
    #[error("destination indices at positions {first} and {second} both name {value}; set non_unique_dst_idx to allow duplicate destinations")]
    DuplicateDestination { first: u32, second: u32, value: u32 },
    #[error("{side} element size {size} does not match dtype {dtype} ({} bytes)", dtype.size())]
    ElemSizeDtype {
        side: &'static str,
        size: u32,
        dtype: dma::Dtype,
    },
    #[error("kind {kind:?} {} an indirection", if *has { "does not take" } else { "needs" })]
    KindIndirection {
        kind: crate::generate::Kind,
        has: bool,
    },
    #[error("GATHER_TRANSPOSE needs a 2-D source [rows, cols] indirect on dimension 0 and a 2-D direct destination [cols, rows]")]
    TransposeShape,
    #[error("GATHER_TRANSPOSE source is [{rows}, {cols}] but destination is [{dst_rows}, {dst_cols}] (it must be [{cols}, {rows}])")]
    TransposeCounts {
        rows: u32,
        cols: u32,
        dst_rows: u32,
        dst_cols: u32,
    },
    #[error("the request reads bytes [{lo:#x}, {hi:#x}) that it also writes; one request does not order its reads after its own writes (use two requests)")]
    SourceOverlapsDestination { lo: u64, hi: u64 },
    #[error("{side} index pattern has {dims} dimensions or an empty one (it takes 1 to 5, each of count at least 1)")]
    IndexPatternShape { side: &'static str, dims: usize },
    #[error(
        "{side} index pattern has {elements} elements but the indirection reads {count} indices"
    )]
    IndexPatternShort {
        side: &'static str,
        elements: u64,
        count: u32,
    },
    #[error("{side} index pattern leaves the 64-bit address space")]
    IndexPatternOverflow { side: &'static str },
    #[error("the fill OOB policy applies to the source (the indices pick what is read); the destination indirection cannot fill")]
    FillOnDestination,
    #[error("a filling {side} indirection needs rows that are one contiguous run (the indirection dimension innermost, or followed by one contiguous dimension) and, for rows of several elements, a positive step")]
    FillRowShape { side: &'static str },
    #[error("fill value {value:#x} does not fit one {dtype} element ({} bytes)", dtype.size())]
    FillValue { value: u32, dtype: dma::Dtype },
    #[error("unit of {unit} elements: a sequential request needs units of at least one element")]
    SequentialUnit { unit: u64 },
    #[error(transparent)]
    Fabric(#[from] dma::Error),
}
