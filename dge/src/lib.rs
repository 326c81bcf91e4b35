//! # dge — the descriptor-generation engine
//!
//! Lowers 5-D (indirect) access patterns into DMA descriptors the way the DGE firmware does
//! (seed 000 section 6): [`pattern`] validates access patterns and turns them into byte
//! steps of the fabric map.

pub mod error;
pub mod generate;
pub mod indirection;
pub mod pattern;
pub mod reshape;
pub mod runs;
pub mod spray;

pub use error::Error;
pub use pattern::{AccessPattern, ByteDim, BytePattern, Dim};
