//! # conformance — cross-crate integration and conformance helpers
//!
//! What the integration tests in `tests/tests/` share:
//!
//! - [`Rng`]: `hostsim fuzz`'s deterministic generator (splitmix64), so a case is a pure
//!   function of its seed and a failing seed reproduces exactly;
//! - [`cases`]: random instruction streams over the four datapaths of seed 000 section 7
//!   (GATHER with its POOL_BUFFER_LOAD, INDIRECT_COPY, DMA_INDIRECT, the embedding update)
//!   plus DMA_MEMCPY, with their inputs written to a fabric ([`cases::Case`]);
//! - [`lanes`]: running one case on several mechanisms (the reference, the POOL kernels,
//!   the DGE + DMA engine) on clones of its fabric and comparing them instruction by
//!   instruction ([`lanes::Lanes`]).
//!
//! The numpy-style expectations of the NKI-level tests are written in the test files
//! themselves, independently of everything here.

pub mod cases;
pub mod lanes;

/// The fuzzer's splitmix64 generator: a case is a pure function of its seed.
pub use hostsim::fuzz::Rng;
