//! The `dma` crate's one error type.

use thiserror::Error;

/// Every failure of the fabric, dtypes, descriptors, queue files and the engine.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("unknown generation {name:?} (expected sunda, cayman, mariana, maverick or v2..v5)")]
    UnknownGeneration { name: String },
    #[error("unknown dtype code {code:#x} (known: 0x2..=0xa, see DTYPE_TABLE)")]
    UnknownDtypeCode { code: u8 },
    #[error("unknown dtype {name:?} (expected u8 i8 u16 i16 u32 i32 f16 bf16 f32)")]
    UnknownDtypeName { name: String },
    #[error("unknown memory space {name:?} (expected hbm, sbuf or psum)")]
    UnknownSpace { name: String },
    #[error("address {addr:#x} is not in any fabric region (past HBM, in a partition gap or past the last partition)")]
    Unmapped { addr: u64 },
    #[error("{space} partition {partition} offset {offset:#x} is off the fabric ({partitions} partitions of {bytes:#x} bytes)")]
    BadLocation {
        space: &'static str,
        partition: u32,
        offset: u64,
        partitions: u32,
        bytes: u64,
    },
    #[error("access of 0 bytes at {addr:#x}: accesses must move at least one byte")]
    EmptyAccess { addr: u64 },
    #[error("access of {len:#x} bytes at {addr:#x} overflows the 64-bit address space")]
    AddressOverflow { addr: u64, len: u64 },
    #[error("access of {len:#x} bytes at {addr:#x} leaves {region}")]
    OutOfRegion { addr: u64, len: u64, region: String },
    #[error("{space} has no ADDR4 encoding (ADDR4 names SBUF or PSUM only)")]
    Addr4Space { space: &'static str },
    #[error("ADDR4 partition {partition} / offset {offset:#x} does not fit (partition < 128, offset < 2^23)")]
    Addr4Field { partition: u32, offset: u32 },
    #[error("ADDR4 {raw:#010x} has reserved space code {code} (0 = SBUF, 1 = PSUM)")]
    Addr4Reserved { raw: u32, code: u32 },
    #[error("unknown DGE_COMPUTE_OP code {code} (NONE=0 ADD=1 MULTIPLY=2 MAX=3 MIN=4)")]
    UnknownComputeOp { code: u8 },
    #[error("CCE_OP code {code} is not allowed (ADD=0 MAX=2 MIN=3; 1, multiply, is disabled)")]
    UnknownCceOp { code: u8 },
}
