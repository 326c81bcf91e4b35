//! # dma — the modelled fabric and the DMA engine that moves bytes on it
//!
//! This crate models what every mechanism of the indirection engine finally touches:
//!
//! - [`generation`]: the four generations and their fabric sizes;
//! - [`addr`]: the unified 64-bit [`FabricAddr`] map (HBM, SBUF and PSUM windows) and the
//!   32-bit on-core [`Addr4`] encoding, with the one range check every access uses;
//! - [`dtype`]: element dtypes and their ISA codes.
//!
//! Data enters as bytes written through the bounds-checked fabric access path and leaves
//! the same way; nothing in this crate knows about the IVP core or the ISA.

pub mod addr;
pub mod dtype;
pub mod error;
pub mod generation;

pub use addr::{Addr4, AddressMap, FabricAddr, Location, Region, Space};
pub use dtype::Dtype;
pub use error::Error;
pub use generation::{Confidence, Generation};
