//! # hostsim — the simulated platform around the indirection engine
//!
//! `hostsim` is where an instruction stream meets the modelled hardware. It holds:
//!
//! - the **ISA** ([`isa`]): the opcode table (0x67 POOL_BUFFER_LOAD, 0x68 GATHER,
//!   0xe7 INDIRECT_COPY, 0xbb DMA_INDIRECT, 0x79 EMBEDDING_UPDATE, 0xca
//!   PSEUDO_EMBEDDING_UPDATE, 0xb8 DMA_MEMCPY), the 64-byte operand structs with their
//!   encode/decode, the per-generation validity contracts (sunda, cayman, mariana,
//!   maverick), the per-generation POOL kernel table and the route of every opcode;
//! - the **POOL kernels** that run on the IVP core on sunda: `pool_gather` against the
//!   Pool_Buffer, `pool_indirect_copy` with `send_gather_request`, `dma_memcopy_indirect`
//!   and `embedding_update`;
//! - the **runtime**: it expands pseudo-ops (0xca into its EMBEDDING_UPDATE sequence),
//!   validates each instruction for the chosen generation and routes it to a POOL kernel,
//!   to the DGE (descriptor queues replayed by the `dma` engine) or to the reference;
//! - the **NKI lowering**: `local_gather` to INDIRECT_COPY 0xe7, `nc_n_gather` to groups
//!   of POOL_BUFFER_LOAD + GATHER 0x68, and the DMA-level gathers and scatters;
//! - the **reference semantics**: closed-form loops that every route must match bit for
//!   bit;
//! - **scenarios**: TOML files with `.npy` tensors placed on the fabric, and their dumps;
//! - the **`hostsim` command-line tool** that runs scenarios and prints summaries.
//! - its **tools**: [`inspect`] (a queue file's descriptors as a table or JSON lines),
//!   [`isa::text`] (instructions by field name, to and from TOML/JSON and hex),
//!   [`timeline`] (the DMA queues over the timing model's time as SVG) and [`progress`]
//!   (a progress bar on stderr when it is a terminal).
//!
//! Data enters as 64-byte instructions (or NKI-level ops lowered to them) and tensors
//! written to the `dma` fabric, and leaves as fabric memory, statistics and reports.
//! Every failure is one [`Error`].

pub mod atomic_file;
pub mod bench;
pub mod core_state;
pub mod demo;
pub mod dge_route;
pub mod error;
pub mod explain;
pub mod fuzz;
pub mod inspect;
pub mod isa;
pub mod nki;
pub mod npy;
pub mod pool;
pub mod progress;
pub mod reference;
pub mod runtime;
pub mod scenario;
#[cfg(test)]
mod test_support;
pub mod timeline;
pub mod trace;

pub use error::{Error, ErrorKind};
