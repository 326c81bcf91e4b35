//! # dge — the descriptor-generation engine
//!
//! Lowers 5-D (indirect) access patterns into DMA descriptors the way the DGE firmware does
//! (seed 000 section 6). A [`generate::Request`] — a source and a destination
//! [`AccessPattern`], optional indirection on either side (an index tensor on the fabric,
//! its dimension, step, bound and OOB policy, and its [`IndexLayout`]: dtype, access
//! pattern, bias), a compute op, a dtype (and the source's, for a cast through f32),
//! `non_unique_dst_idx`, an `eng_mask` and an
//! [`ElementOrder`] — goes through [`generate::generate`] and comes out as
//! [`generate::Generated`]: one [`dma::descriptor::Descriptor`] list per DMA queue (and,
//! for a sequential request that reads what it writes, further phases), the skipped
//! indices and the OOB notification, ready for the `dma` engine.
//!
//! - [`pattern`]: access-pattern validation against the fabric, into byte steps;
//! - [`reshape`]: the Batman reshape (unit dims dropped, contiguous dims merged);
//! - [`index`]: index tensors: u8/u16/u32 read through the IVP gather widths, contiguous
//!   or through an access pattern, with a bias;
//! - [`indirection`]: `IndirectionInfo`, `make_gather_pattern`, `read_indices` (through
//!   the IVP SuperGather core) and `do_indirection` (bias, bounds, the `mulusan_2x32` MAC,
//!   the OOB policies including the fill);
//! - [`runs`]: the lockstep walk into maximal runs contiguous on both sides, split at
//!   64 KiB (FILL runs where the fill policy applies; a cast's two sides in their own
//!   element sizes);
//! - [`rows`]: the same runs for whole rows moved by index, without the general walk;
//! - [`order`]: the sequential element order, phases for requests that read what they
//!   write;
//! - [`spray`]: dealing runs to queues so that writes to one byte stay in one queue;
//! - [`mod@generate`]: the pipeline, stage by stage, with the firmware's log events
//!   (at trace level).
//!
//! Indices are read from the fabric; nothing else of the fabric is touched: the DGE only
//! describes the moves.

pub mod error;
pub mod generate;
pub mod index;
pub mod indirection;
pub mod order;
pub mod pattern;
pub mod reshape;
pub mod rows;
pub mod runs;
pub mod spray;

pub use error::Error;
pub use generate::{generate, Generated, Kind, Request};
pub use index::{IndexDtype, IndexLayout};
pub use order::{ByteRanges, ElementOrder};
pub use pattern::{AccessPattern, ByteDim, BytePattern, Dim};
