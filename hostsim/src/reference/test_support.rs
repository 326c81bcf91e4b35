//! Test helpers for the reference datapath tests: the shared helpers and cases of
//! [`crate::test_support`], with the reference as their [`Route`].

use dma::{Fabric, Generation};

pub use crate::test_support::*;

use super::execute;
use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::isa::Instruction;

/// The reference on sunda fabrics.
pub fn route() -> Route {
    Route {
        generation: Generation::Sunda,
        exec: execute,
    }
}

/// An empty sunda fabric.
pub fn fabric() -> Fabric {
    route().fabric()
}

/// Runs `inst` with the reference.
pub fn run(f: &mut Fabric, state: &mut CoreState, inst: impl Into<Instruction>) -> Outcome {
    route().run(f, state, inst)
}

/// Runs `inst`, asserts it fails leaving the fabric and the state unchanged, and returns
/// the error.
pub fn fails_closed(f: &mut Fabric, state: &mut CoreState, inst: impl Into<Instruction>) -> Error {
    route().fails_closed(f, state, inst)
}
