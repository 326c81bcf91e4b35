//! Test helpers for the POOL kernel tests: fabric addresses, typed reads and writes, and
//! the fail-closed assertion.

use dma::{Addr4, Element, Fabric, FabricAddr, Generation, Space};

use super::{execute, PoolCost};
use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::Instruction;

/// An empty sunda fabric.
pub fn fabric() -> Fabric {
    Fabric::new(Generation::Sunda)
}

/// The ADDR4 of SBUF partition `p`, byte `offset`.
pub fn sbuf(p: u32, offset: u32) -> Addr4 {
    Addr4::encode(Space::Sbuf, p, offset).unwrap()
}

/// The fabric address of SBUF partition `p`, byte `offset`.
pub fn sbuf_at(p: u32, offset: u32) -> FabricAddr {
    let stride = dma::addr::SBUF_STRIDE;
    FabricAddr(dma::addr::SBUF_BASE + u64::from(p) * stride + u64::from(offset))
}

/// Writes `elems` at `addr`.
pub fn put<E: Element>(f: &mut Fabric, addr: FabricAddr, elems: &[E]) {
    f.write_elems(addr, elems).unwrap();
}

/// Reads `n` elements at `addr`.
pub fn get<E: Element + Default>(f: &Fabric, addr: FabricAddr, n: usize) -> Vec<E> {
    let mut out = vec![E::default(); n];
    f.read_elems(addr, &mut out).unwrap();
    out
}

/// Runs `inst` with its POOL kernel.
pub fn run_cost(
    f: &mut Fabric,
    s: &mut CoreState,
    inst: impl Into<Instruction>,
) -> (Outcome, PoolCost) {
    execute(f, s, &inst.into()).unwrap()
}

/// Runs `inst` with its POOL kernel and returns the outcome.
pub fn run(f: &mut Fabric, s: &mut CoreState, inst: impl Into<Instruction>) -> Outcome {
    run_cost(f, s, inst).0
}

/// Runs `inst`, asserts it fails leaving the fabric and the state unchanged, and returns
/// the error.
pub fn fails_closed(f: &mut Fabric, s: &mut CoreState, inst: impl Into<Instruction>) -> Error {
    let (digest, before) = (f.digest(), s.clone());
    let e = execute(f, s, &inst.into()).unwrap_err();
    assert_eq!(
        f.digest(),
        digest,
        "fabric changed by a failing instruction: {e}"
    );
    assert_eq!(*s, before, "state changed by a failing instruction: {e}");
    e
}
