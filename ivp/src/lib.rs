//! # ivp — the IVP (Vision-Q7) vector core's SuperGather gather/scatter machinery
//!
//! A lane-exact model of the on-core front door to the SuperGather memory engine (seed 004;
//! seed 000 section 4, Mechanism A) and of the vector ops that build its predicates and
//! addresses. It backs the DGE's index reads and the POOL kernels.
//!
//! - [`reg`]: the 512-bit [`VecReg`] with its 2NX8 / NX16 / N_2X32 lane views, the
//!   byte-granular predicate [`VBool`], [`VecPair`] and the address accumulator [`AddrVec`];
//! - [`control`]: GSControl ([`GsControl`] pack/unpack), the widths [`Width`] and the
//!   staging control marker each derives;
//! - [`port`]: the memory-port trait [`MemPort`] every access goes through, and the flat
//!   little-endian [`MemTable`];
//! - [`gather`]: the staging registers gr0..gr7 ([`Gr`], [`GatherReg`]) and their image;
//! - [`scatter`]: the posted-scatter queue and its barrier report ([`ScatterReport`]);
//! - [`supergather`]: [`SuperGather`], which executes gathera / gatherd / mgatherd /
//!   movgatherd / scatter / scatterinc / scatterw (and the `t` forms) against a port;
//! - [`alu`]: ltun_2x32, leun_2x32, eqn_2x32, andb, orb, mov2nx8t, dselnx16t,
//!   dseln_2x32t, subn_2x32, movva32 and mulusan_2x32.
//!
//! # The two-phase gather
//!
//! `gathera*` (A-phase) stages the raw offset image, fills the collected-data buffer with
//! the `0xffffffff` sentinel, records GSEnable and posts `addr[k] = base + offset[k] *
//! elem_sz` for the enabled lanes. `gatherd*` (D-phase) has the port collect the posted
//! lanes and drains the register: a dead lane (disabled, or refused by the port as out of
//! bounds) drains as 0, NX8U elements are zero-extended to 16 bits, N_2X32 lanes are 32-bit.
//! `mgatherd` drains with the merge `result[i] = (gathered[i] & EN[i]) | (old[i] & !EN[i])`,
//! so disabled lanes keep the old register data.
//!
//! # Example: the DGE's bounds-checked index read
//!
//! ```
//! use ivp::{alu, Gr, MemTable, SuperGather, VecReg, Width};
//!
//! // A table of eight u32 indices 100..108, little-endian.
//! let port = MemTable::from_bytes((100u32..108).flat_map(u32::to_le_bytes).collect());
//! let lanes = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32));
//! let in_bounds = alu::ltun_2x32(&lanes, &alu::movva32(6)); // lanes 0..6 only
//! let mut sg = SuperGather::new();
//! let v = sg.gather_t(Gr::GR0, Width::N2x32, 0, &lanes, in_bounds, &port);
//! assert_eq!(v.n_2x32()[..8], [100, 101, 102, 103, 104, 105, 0, 0]);
//! let addr = alu::checked_mulusan_2x32(&ivp::AddrVec::splat(0x1000), &v, &alu::movva32(64));
//! assert_eq!(addr.map(|a| a.lanes()[1]), Ok(0x1000 + 101 * 64));
//! ```
//!
//! Data enters and leaves only through a [`MemPort`]; this crate knows nothing of the
//! fabric (adapters in `dge` / `hostsim` implement the port over it). Nothing here
//! allocates per op.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod alu;
pub mod control;
pub mod error;
pub mod gather;
pub mod port;
pub mod reg;
pub mod scatter;
pub mod supergather;

pub use control::{ElemSize, GsControl, GsOperation, OffsetSize, Width};
pub use error::Error;
pub use gather::{GatherReg, Gr, SENTINEL};
pub use port::{MemPort, MemTable};
pub use reg::{AddrVec, LaneView, VBool, VecPair, VecReg};
pub use scatter::{ScatterReport, SCATTER_QUEUE_DEPTH};
pub use supergather::SuperGather;
