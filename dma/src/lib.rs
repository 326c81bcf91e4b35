//! # dma — the modelled fabric and the DMA engine that moves bytes on it
//!
//! This crate models what every mechanism of the indirection engine finally touches:
//!
//! - [`generation`]: the four generations and their fabric sizes;
//! - [`addr`]: the unified 64-bit [`FabricAddr`] map (HBM, SBUF and PSUM windows) and the
//!   32-bit on-core [`Addr4`] encoding, with the one range check every access uses;
//! - [`dtype`]: element dtypes and their ISA codes;
//! - [`compute`]: DGE_COMPUTE_OP / CCE_OP and their float32 arithmetic;
//! - [`cast`]: casts between dtypes through float32, with or without a compute op;
//! - [`fabric`]: HBM (sparse), SBUF and PSUM storage behind one bounds-checked access path;
//! - [`descriptor`], [`queue_file`]: the DMA descriptor and the queue file format;
//! - [`block`]: descriptors held as rows of two address rules;
//! - [`engine`], [`timing`]: the multi-queue engine and its timing model.
//!
//! Data enters as bytes written through the bounds-checked fabric access path and leaves
//! the same way; nothing in this crate knows about the IVP core or the ISA.

pub mod addr;
pub mod block;
pub mod cast;
pub mod compute;
pub mod descriptor;
pub mod dtype;
pub mod engine;
pub mod error;
pub mod fabric;
pub mod generation;
mod page_table;
pub mod queue_file;
#[cfg(test)]
mod test_util;
pub mod timing;
pub mod watch;

pub use addr::{Addr4, AddressMap, FabricAddr, Location, Region, Space};
pub use block::{Block, Rows};
pub use compute::{apply, CceOp, ComputeOp, Element};
pub use descriptor::{
    DescFlags, DescOp, Descriptor, RawDescriptor, SemId, SemWait, SemaphoreLedger,
};
pub use dtype::Dtype;
pub use engine::{
    execute_sequential, Beside, Engine, EngineConfig, ExecutionStats, InlineLimit, Pusher,
    RaceCheck, ReplayReport, ReplaySummary, Session, Validated,
};
pub use error::{AccessKind, Error};
pub use fabric::{Fabric, PAGE_BYTES};
pub use generation::{Confidence, Generation};
pub use queue_file::{
    verify, QueueFileReader, QueueFileSummary, QueueFileWriter, VerifiedQueueFile,
};
pub use timing::{QueueTimeline, TimelineReport, TimingModel};
