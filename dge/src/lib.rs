//! # dge — the descriptor-generation engine
//!
//! Lowers 5-D (indirect) access patterns into DMA descriptors the way the DGE firmware does
//! (seed 000 section 6). A [`generate::Request`] — a source and a destination
//! [`AccessPattern`], optional indirection on either side (an index tensor on the fabric,
//! its dimension, step, bound and OOB policy), a compute op, a dtype, `non_unique_dst_idx`
//! and an `eng_mask` — goes through [`generate::generate`] and comes out as
//! [`generate::Generated`]: one [`dma::descriptor::Descriptor`] list per DMA queue, the
//! skipped indices and the OOB notification, ready for the `dma` engine.
//!
//! - [`pattern`]: access-pattern validation against the fabric, into byte steps;
//! - [`reshape`]: the Batman reshape (unit dims dropped, contiguous dims merged);
//! - [`indirection`]: `IndirectionInfo`, `make_gather_pattern`, `gather_indices` (through
//!   the IVP SuperGather core) and `do_indirection` (the `mulusan_2x32` MAC and bounds);
//! - [`runs`]: the lockstep walk into maximal runs contiguous on both sides, split at
//!   64 KiB;
//! - [`spray`]: dealing runs to queues so that writes to one byte stay in one queue;
//! - [`generate`]: the pipeline, stage by stage, with the firmware's debug events.
//!
//! Indices are read from the fabric; nothing else of the fabric is touched: the DGE only
//! describes the moves.

pub mod error;
pub mod generate;
pub mod indirection;
pub mod pattern;
pub mod reshape;
pub mod runs;
pub mod spray;

pub use error::Error;
pub use generate::{generate, Generated, Kind, Request};
pub use pattern::{AccessPattern, ByteDim, BytePattern, Dim};
