//! Running one stream [`Case`] on every route and comparing them: the closed-form
//! reference, the POOL kernels and the DGE + DMA engine, each a [`Runtime`] forced to its
//! mechanism on its own clone of the case's fabric.
//!
//! Per op (an instruction, run by [`Runtime::step`], or an access-pattern DMA, run by
//! [`Runtime::run_ap_dma`]) every route must report the reference's [`Outcome`] (bytes
//! written, skipped indices), or fail with the reference's [`ErrorKind`] (never the
//! message text). A route that answers [`ErrorKind::NoMechanism`] does not serve that op
//! (DMA_MEMCPY and the access-pattern DMAs have no POOL kernel, the DGE's row-step and
//! window limits): when the reference leaves the core state as it was, the reference's
//! effect is applied to that route's fabric and the stream goes on; otherwise the route
//! drops out of the case. A failing op ends the stream, and every route must have left
//! its fabric exactly as it was (fail closed). At the end each remaining route's fabric
//! and core state must equal the reference's. A panic anywhere is caught and is a
//! mismatch.
//!
//! The DGE route runs the stream a second time, as one program
//! ([`Runtime::run_program`], which prepares each instruction while the replay before it
//! runs): unless the DGE lane needed the reference to stand in, the program must leave
//! the DGE lane's fabric and core state and fail at the same op.

use std::panic::{catch_unwind, AssertUnwindSafe};

use dma::{EngineConfig, Fabric, Generation};

use crate::core_state::{CoreState, Outcome};
use crate::error::Error;
use crate::error::ErrorKind;
use crate::fuzz::case::{Case, Op};
use crate::nki::Lowered;
use crate::reference;
use crate::runtime::{Mechanism, Runtime, Step};

/// The compared mechanisms, the reference first.
pub const MECHANISMS: [Mechanism; 3] = [Mechanism::Reference, Mechanism::Pool, Mechanism::Dge];

/// What one op did on one route.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StepResult {
    /// It ran and reported this outcome.
    Done(Outcome),
    /// It was rejected with this kind.
    Failed(ErrorKind),
    /// It panicked with this message.
    Panicked(String),
}

impl StepResult {
    /// The result in a message: an outcome by its bytes, its notification and its first
    /// skipped indices (a skip list runs to thousands), an error by its kind.
    pub fn describe(&self) -> String {
        match self {
            StepResult::Done(o) => {
                let first: Vec<String> = o
                    .skipped
                    .iter()
                    .take(4)
                    .map(|s| format!("{:?} {} = {}", s.side, s.position, s.value))
                    .collect();
                let more = match o.skipped.len() > 4 {
                    true => ", ...",
                    false => "",
                };
                format!(
                    "done: {} bytes, notification {}, {} skipped [{}{more}]",
                    o.bytes_written,
                    o.oob_notification,
                    o.skipped.len(),
                    first.join(", ")
                )
            }
            StepResult::Failed(kind) => format!("failed: {kind:?}"),
            StepResult::Panicked(msg) => format!("panicked: {msg}"),
        }
    }
}

/// Where two skip lists first differ: `(entry, one, other)`.
fn first_skip_difference(a: &StepResult, b: &StepResult) -> Option<String> {
    let (StepResult::Done(a), StepResult::Done(b)) = (a, b) else {
        return None;
    };
    let at = (0..a.skipped.len().max(b.skipped.len()))
        .find(|&k| a.skipped.get(k) != b.skipped.get(k))?;
    Some(format!(
        "; the skips first differ at entry {at}: {:?} and {:?}",
        a.skipped.get(at),
        b.skipped.get(at)
    ))
}

/// A disagreement between routes, or a panic.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Disagreement {
    /// The mechanism that disagreed with the reference (or panicked).
    pub mechanism: Mechanism,
    /// The op where they disagreed (`None`: the final state, or the stream as a whole).
    pub op: Option<usize>,
    /// What differed, in words.
    pub what: String,
}

/// One route: a forced runtime and its fabric.
struct Lane {
    mechanism: Mechanism,
    runtime: Runtime,
    fabric: Fabric,
    active: bool,
    /// Whether the reference stood in for this lane in the current case.
    stood_in: bool,
}

/// The runtimes of every route, per generation, built on first use and kept across cases
/// (each DGE runtime owns a DMA engine with its worker threads).
#[derive(Default)]
pub struct Routes {
    lanes: Vec<(Generation, Vec<Lane>)>,
    /// Per generation, the DGE runtime that runs each stream as a program.
    programs: Vec<(Generation, Runtime)>,
}

/// The message of a caught panic.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    match (
        payload.downcast_ref::<&str>(),
        payload.downcast_ref::<String>(),
    ) {
        (Some(s), _) => (*s).to_string(),
        (None, Some(s)) => s.clone(),
        (None, None) => "a panic with a non-string payload".to_string(),
    }
}

impl Routes {
    /// No runtime built yet.
    pub fn new() -> Routes {
        Routes::default()
    }

    /// Runs `case` on every route. `Ok(n)`: they agreed on `n` ops.
    pub fn compare(&mut self, case: &Case) -> Result<u64, Disagreement> {
        let result = self.compare_inner(case);
        if result.is_err() {
            // A runtime that panicked or diverged is rebuilt for the next case.
            self.lanes.retain(|(g, _)| *g != case.generation);
            self.programs.retain(|(g, _)| *g != case.generation);
        }
        result
    }

    fn compare_inner(&mut self, case: &Case) -> Result<u64, Disagreement> {
        let lanes = self.lanes_for(case.generation)?;
        for lane in lanes.iter_mut() {
            lane.fabric = case.fabric.clone();
            lane.runtime.reset(case.registers());
            lane.active = true;
            lane.stood_in = false;
        }
        let mut agreed = 0;
        for (i, op) in case.stream.iter().enumerate() {
            let before: Vec<u64> = lanes.iter().map(|l| l.fabric.digest()).collect();
            let results: Vec<StepResult> = lanes.iter_mut().map(|l| l.step(op)).collect();
            let failed = judge(lanes, op, &results, i)?;
            agreed += 1;
            if failed {
                fail_closed(lanes, &before, i)?;
                return self.program_agrees(case, Some(i)).map(|()| agreed);
            }
        }
        final_state_agrees(lanes)?;
        self.program_agrees(case, None)?;
        Ok(agreed)
    }

    /// The stream run as one program on the DGE route leaves the DGE lane's fabric and
    /// core state, and fails at op `failed` if the lanes did (skipped where the
    /// DGE lane dropped out or needed the reference to stand in).
    fn program_agrees(&mut self, case: &Case, failed: Option<usize>) -> Result<(), Disagreement> {
        let generation = case.generation;
        if !self.programs.iter().any(|(g, _)| *g == generation) {
            let lane = Lane::new(generation, Mechanism::Dge)?;
            self.programs.push((generation, lane.runtime));
        }
        let lanes = self.lanes_for(generation)?;
        let Some(dge) = lanes.iter().find(|l| l.mechanism == Mechanism::Dge) else {
            return Ok(());
        };
        if !dge.active || dge.stood_in {
            return Ok(());
        }
        let (fabric, state) = (dge.fabric.clone(), dge.runtime.state().clone());
        let Some((_, runtime)) = self.programs.iter_mut().find(|(g, _)| *g == generation) else {
            return Ok(());
        };
        runtime.reset(case.registers());
        let ops: Vec<Lowered> = case.stream.iter().map(Op::lowered).collect();
        let mut got = case.fabric.clone();
        let ran = catch_unwind(AssertUnwindSafe(|| {
            runtime.run_program(&mut got, ops.iter().map(Step::Run))
        }));
        let differ = |what: String| Disagreement {
            mechanism: Mechanism::Dge,
            op: None,
            what: format!("the stream as a program {what}"),
        };
        let at = match ran {
            Err(payload) => {
                return Err(differ(format!(
                    "panicked: {}",
                    panic_message(payload.as_ref())
                )))
            }
            Ok(Ok(_)) => None,
            Ok(Err(Error::ProgramStep { step, .. })) => Some(step),
            Ok(Err(e)) => return Err(differ(format!("failed outside a step: {e}"))),
        };
        if at != failed {
            return Err(differ(format!(
                "stopped at {at:?}, the DGE route at {failed:?}"
            )));
        }
        if let Some(addr) = got.first_difference(&fabric) {
            return Err(differ(format!(
                "leaves a fabric unlike the DGE route's at {:#x}",
                addr.0
            )));
        }
        if *runtime.state() != state {
            return Err(differ("leaves a core state unlike the DGE route's".into()));
        }
        Ok(())
    }

    /// The lanes of `generation`, built on first use.
    fn lanes_for(&mut self, generation: Generation) -> Result<&mut Vec<Lane>, Disagreement> {
        if !self.lanes.iter().any(|(g, _)| *g == generation) {
            let mut lanes = Vec::new();
            for m in MECHANISMS {
                lanes.push(Lane::new(generation, m)?);
            }
            self.lanes.push((generation, lanes));
        }
        let at = self.lanes.iter().position(|(g, _)| *g == generation);
        match at.and_then(|at| self.lanes.get_mut(at)) {
            Some((_, lanes)) => Ok(lanes),
            None => Err(setup_error(Mechanism::Reference, "no lanes".into())),
        }
    }
}

fn setup_error(mechanism: Mechanism, what: String) -> Disagreement {
    Disagreement {
        mechanism,
        op: None,
        what: format!("cannot build the route: {what}"),
    }
}

impl Lane {
    fn new(generation: Generation, mechanism: Mechanism) -> Result<Lane, Disagreement> {
        // Two workers: enough to exercise the engine's concurrency on a shared machine.
        let config = EngineConfig {
            workers: 2,
            ..EngineConfig::default()
        };
        let runtime = Runtime::with_engine_config(generation, mechanism, config)
            .map_err(|e| setup_error(mechanism, e.to_string()))?;
        Ok(Lane {
            mechanism,
            runtime,
            fabric: Fabric::new(generation),
            active: true,
            stood_in: false,
        })
    }

    /// Runs `op` on this lane, catching a panic.
    fn step(&mut self, op: &Op) -> StepResult {
        if !self.active {
            return StepResult::Failed(ErrorKind::NoMechanism);
        }
        let (runtime, fabric) = (&mut self.runtime, &mut self.fabric);
        let run = || match op {
            Op::Inst(inst) => runtime.step(fabric, inst).map(|s| s.outcome),
            Op::Ap(dma) => runtime.run_ap_dma(fabric, dma).map(|s| s.outcome),
            Op::Set(settings) => settings
                .apply_registers(runtime.registers_mut())
                .map(|()| Outcome::default()),
        };
        match catch_unwind(AssertUnwindSafe(run)) {
            Ok(Ok(outcome)) => StepResult::Done(outcome),
            Ok(Err(e)) => StepResult::Failed(e.kind()),
            Err(payload) => StepResult::Panicked(panic_message(payload.as_ref())),
        }
    }

    /// After this lane answered NoMechanism: the reference's effect applied to its own
    /// fabric when that leaves the core state as it is, else the lane drops out.
    fn stand_in(&mut self, op: &Op) {
        let mut state: CoreState = self.runtime.state().clone();
        let mut fabric = self.fabric.clone();
        self.stood_in = true;
        let ok = match op {
            Op::Inst(inst) => reference::execute(&mut fabric, &mut state, inst).is_ok(),
            Op::Ap(dma) => reference::ap_dma(&mut fabric, dma).is_ok(),
            Op::Set(settings) => settings.apply_registers(&mut state.regs).is_ok(),
        };
        match ok && state == *self.runtime.state() {
            true => self.fabric = fabric,
            false => self.active = false,
        }
    }
}

/// Compares every lane's result at op `i` with the reference's (lane 0).
/// `Ok(true)`: the reference failed (and the others failed alike).
fn judge(
    lanes: &mut [Lane],
    op: &Op,
    results: &[StepResult],
    i: usize,
) -> Result<bool, Disagreement> {
    let Some((reference, rest)) = results.split_first() else {
        return Ok(false);
    };
    let opcode = op.name();
    if let StepResult::Panicked(msg) = reference {
        return Err(panicked(Mechanism::Reference, i, &opcode, msg));
    }
    for (lane, got) in lanes.iter_mut().skip(1).zip(rest) {
        if !lane.active {
            continue;
        }
        match got {
            StepResult::Panicked(msg) => return Err(panicked(lane.mechanism, i, &opcode, msg)),
            StepResult::Failed(ErrorKind::NoMechanism)
                if *reference != StepResult::Failed(ErrorKind::NoMechanism) =>
            {
                lane.stand_in(op);
            }
            _ if got != reference => {
                return Err(Disagreement {
                    mechanism: lane.mechanism,
                    op: Some(i),
                    what: format!(
                        "op {i} ({opcode}): {} gave {}, the reference {}{}",
                        lane.mechanism.name(),
                        got.describe(),
                        reference.describe(),
                        first_skip_difference(got, reference).unwrap_or_default()
                    ),
                })
            }
            _ => {}
        }
    }
    Ok(matches!(reference, StepResult::Failed(_)))
}

fn panicked(mechanism: Mechanism, i: usize, opcode: &str, msg: &str) -> Disagreement {
    Disagreement {
        mechanism,
        op: Some(i),
        what: format!("op {i} ({opcode}): {} panicked: {msg}", mechanism.name()),
    }
}

/// After a rejected op `i`: every lane's fabric is as it was before it.
fn fail_closed(lanes: &[Lane], before: &[u64], i: usize) -> Result<(), Disagreement> {
    for (lane, digest) in lanes.iter().zip(before) {
        if lane.active && lane.fabric.digest() != *digest {
            return Err(Disagreement {
                mechanism: lane.mechanism,
                op: Some(i),
                what: format!(
                    "op {i} was rejected but {} changed the fabric",
                    lane.mechanism.name()
                ),
            });
        }
    }
    Ok(())
}

/// Every active lane's fabric and core state equal the reference's.
fn final_state_agrees(lanes: &[Lane]) -> Result<(), Disagreement> {
    let Some((reference, rest)) = lanes.split_first() else {
        return Ok(());
    };
    for lane in rest.iter().filter(|l| l.active) {
        if let Some(at) = lane.fabric.first_difference(&reference.fabric) {
            return Err(Disagreement {
                mechanism: lane.mechanism,
                op: None,
                what: format!(
                    "{} leaves a fabric that differs from the reference's at {:#x}",
                    lane.mechanism.name(),
                    at.0
                ),
            });
        }
        if lane.runtime.state() != reference.runtime.state() {
            return Err(Disagreement {
                mechanism: lane.mechanism,
                op: None,
                what: format!(
                    "{} leaves a core state (Pool_Buffers, registers) unlike the reference's",
                    lane.mechanism.name()
                ),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_state::{IndexSide, SkippedIndex};
    use crate::fuzz::case::Builder;
    use crate::fuzz::rng::Rng;
    use crate::isa::{Direct2dSide, DmaDirect2d};
    use dma::{ComputeOp, Dtype, FabricAddr};

    fn memcpy(src: u64, dst: u64) -> DmaDirect2d {
        let side = |a| Direct2dSide {
            start_addr: FabricAddr(a),
            step_elem: [1, 4],
        };
        DmaDirect2d::new(side(src), side(dst), 4, [4, 1], Dtype::U32, ComputeOp::None)
    }

    #[test]
    fn routes_agree_on_a_memcpy_the_pool_route_does_not_serve() {
        let mut b = Builder::new(Rng::new(1), Generation::Sunda);
        b.write(FabricAddr(0x1000), &[7; 16]).unwrap();
        b.push("dma_memcpy", memcpy(0x1000, 0x2000));
        let case = b.finish();
        let mut routes = Routes::new();
        assert_eq!(routes.compare(&case), Ok(1));
    }

    #[test]
    fn a_rejected_instruction_ends_the_stream_alike() {
        let mut b = Builder::new(Rng::new(1), Generation::Cayman);
        b.push("dma_memcpy", memcpy(0x1000, 0x2000).with_eng_mask(0));
        b.push("dma_memcpy", memcpy(0x1000, 0x3000));
        let mut routes = Routes::new();
        assert_eq!(routes.compare(&b.finish()), Ok(1));
    }

    #[test]
    fn a_judged_difference_names_the_route() {
        let mut lanes = vec![
            Lane::new(Generation::Cayman, Mechanism::Reference).unwrap(),
            Lane::new(Generation::Cayman, Mechanism::Dge).unwrap(),
        ];
        let inst = Op::Inst(memcpy(0, 0).into());
        let results = [
            StepResult::Failed(ErrorKind::Fabric),
            StepResult::Panicked("boom".into()),
        ];
        let e = judge(&mut lanes, &inst, &results, 3).unwrap_err();
        assert_eq!(e.mechanism, Mechanism::Dge);
        assert_eq!(e.what, "op 3 (0xb8): dge panicked: boom");
        let results = [
            StepResult::Failed(ErrorKind::Fabric),
            StepResult::Failed(ErrorKind::Decode),
        ];
        let e = judge(&mut lanes, &inst, &results, 0).unwrap_err();
        assert_eq!(
            e.what,
            "op 0 (0xb8): dge gave failed: Decode, the reference failed: Fabric"
        );
        let same = [
            StepResult::Failed(ErrorKind::Fabric),
            StepResult::Failed(ErrorKind::Fabric),
        ];
        assert_eq!(judge(&mut lanes, &inst, &same, 0), Ok(true));
        let skip = |position, value| SkippedIndex {
            side: IndexSide::Dst,
            position,
            value,
        };
        let done = |skipped: Vec<SkippedIndex>| {
            StepResult::Done(Outcome {
                skipped,
                oob_notification: true,
                bytes_written: 8,
            })
        };
        let many = (0..6).map(|p| skip(p, 9)).collect();
        let results = [done(many), done(vec![skip(0, 9), skip(7, 9)])];
        let e = judge(&mut lanes, &inst, &results, 1).unwrap_err();
        assert_eq!(
            e.what,
            "op 1 (0xb8): dge gave done: 8 bytes, notification true, 2 skipped [Dst 0 = 9, Dst 7 = 9], \
             the reference done: 8 bytes, notification true, 6 skipped [Dst 0 = 9, Dst 1 = 9, Dst 2 = 9, Dst 3 = 9, ...]; \
             the skips first differ at entry 1: Some(SkippedIndex { side: Dst, position: 7, value: 9 }) \
             and Some(SkippedIndex { side: Dst, position: 1, value: 9 })"
        );
        assert_eq!(panic_message(&"x"), "x");
    }
}
