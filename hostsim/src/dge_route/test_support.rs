//! Test helpers for the DGE route: the shared helpers and cases of
//! [`crate::test_support`] with the DGE route as their [`Route`], a shared race-checked
//! engine, and the differential check against the reference.

use std::sync::OnceLock;

use dma::{Engine, EngineConfig, Fabric, FabricAddr, Generation, RaceCheck};

pub use crate::test_support::*;

use super::DgeRoute;
use crate::core_state::{CoreState, Outcome};
use crate::error::{Error, ErrorKind};
use crate::isa::Instruction;
use crate::reference;

/// One engine for every test: two workers, the race check on (two queues touching one
/// byte unordered fail the replay).
pub fn engine() -> &'static Engine {
    static ENGINE: OnceLock<Engine> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let config = EngineConfig {
            workers: 2,
            race_check: RaceCheck::On,
            ..EngineConfig::default()
        };
        Engine::new(config).unwrap()
    })
}

/// A fresh DGE route on cayman fabrics, replaying on [`engine`] (the outcome only).
pub fn route() -> Route {
    Route {
        generation: Generation::Cayman,
        exec: |f, s, inst| {
            let out = DgeRoute::new().execute(f, s, inst, engine());
            out.map(|o| o.outcome)
        },
    }
}

/// A cayman fabric with `len` pseudo-random bytes at `addr`.
pub fn fabric_with_table(addr: u64, len: u64) -> Fabric {
    let mut f = Fabric::new(Generation::Cayman);
    fill_random(&mut f, FabricAddr(addr), len, addr ^ len);
    f
}

/// Runs `inst` with the reference on copies and with `route` on `f` and `state`, and
/// asserts they agree: equal fabric, state and outcome, or errors of one kind (the same
/// message for index and duplicate errors) with `f` and `state` left unchanged.
pub fn compare_with(
    route: &mut DgeRoute,
    f: &mut Fabric,
    state: &mut CoreState,
    inst: Instruction,
) -> Result<Outcome, Error> {
    let (mut rf, mut rs) = (f.clone(), state.clone());
    let expect = reference::execute(&mut rf, &mut rs, &inst);
    let (digest, before) = (f.digest(), state.clone());
    let got = route.execute(f, state, &inst, engine());
    match (expect, got) {
        (Ok(e), Ok(g)) => {
            assert_eq!(f.first_difference(&rf), None, "fabric differs for {inst:?}");
            assert_eq!(*state, rs, "state differs");
            assert_eq!(g.outcome, e, "outcome differs");
            Ok(g.outcome)
        }
        (Err(e), Err(g)) => {
            assert_eq!(g.kind(), e.kind(), "reference: {e}; dge: {g}");
            let named = matches!(
                e.kind(),
                ErrorKind::IndexOutOfBounds(_)
                    | ErrorKind::IndexAddress(_)
                    | ErrorKind::DuplicateDestination
            );
            if named {
                assert_eq!(g.to_string(), e.to_string());
            }
            assert_eq!(f.digest(), digest, "a failing instruction wrote: {g}");
            assert_eq!(
                *state, before,
                "a failing instruction changed the state: {g}"
            );
            Err(g)
        }
        (e, g) => panic!("routes disagree on {inst:?}: reference {e:?}, dge {g:?}"),
    }
}

/// [`compare_with`] on a fresh route.
pub fn compare(f: &mut Fabric, state: &mut CoreState, inst: Instruction) -> Result<Outcome, Error> {
    compare_with(&mut DgeRoute::new(), f, state, inst)
}

/// [`compare`], which must succeed.
pub fn agree(f: &mut Fabric, state: &mut CoreState, inst: Instruction) -> Outcome {
    compare(f, state, inst).unwrap()
}

/// [`compare`], which must fail.
pub fn agree_err(f: &mut Fabric, state: &mut CoreState, inst: Instruction) -> Error {
    compare(f, state, inst).unwrap_err()
}
