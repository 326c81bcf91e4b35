//! Test helpers for the POOL kernel tests: the shared helpers and cases of
//! [`crate::test_support`], with the POOL kernels as their [`Route`], and the cost.

use dma::{Fabric, Generation};

pub use crate::test_support::*;

use super::{execute, PoolCost};
use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::Instruction;

/// The POOL kernels on sunda fabrics (the outcome only).
pub fn route() -> Route {
    Route {
        generation: Generation::Sunda,
        exec: |f, s, inst| execute(f, s, inst).map(|(out, _)| out),
    }
}

/// An empty sunda fabric.
pub fn fabric() -> Fabric {
    route().fabric()
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
    route().run(f, s, inst)
}

/// Runs `inst`, asserts it fails leaving the fabric and the state unchanged, and returns
/// the error.
pub fn fails_closed(f: &mut Fabric, s: &mut CoreState, inst: impl Into<Instruction>) -> Error {
    route().fails_closed(f, s, inst)
}
