//! The one cross-route comparison: running one stream [`Case`] on every route — the
//! closed-form reference, the POOL kernels and the DGE + DMA engine, each a [`Runtime`]
//! forced to its mechanism on its own clone of the case's fabric — and comparing them.
//! `hostsim fuzz --target oob`, `hostsim fuzz --scenario` and the conformance suite's
//! equivalence tests all compare through [`Routes::compare`].
//!
//! # Rules
//!
//! - **Per op** (an instruction, run by [`Runtime::step`], an access-pattern DMA, run by
//!   [`Runtime::run_ap_dma`], or a scenario op's register settings) every route must
//!   report the reference's [`Outcome`] (bytes written, notification, skipped indices),
//!   or fail with the reference's [`ErrorKind`] (never the message text).
//! - **A route that does not serve an op** answers [`ErrorKind::NoMechanism`]: no POOL
//!   kernel for DMA_MEMCPY and the access-pattern DMAs, and the DGE route's by-design
//!   refusals ([`crate::dge_route::by_design`]: a Pool_Buffer window overwritten since its
//!   LOAD, loaded elsewhere or not affine, a row past the 32-bit step). The reference
//!   stands in for it: when the reference runs the op and leaves the core state as it
//!   was, its effect is applied to that route's fabric and the stream goes on; when the
//!   reference rejects the op, the route has rejected it too; otherwise (the op changes
//!   the core state, which only the route itself can keep) the route drops out of the
//!   case. Every stand-in is counted per route and label ([`Stats::stand_ins`]), so a
//!   route that stops serving an op it should serve shows in the figures.
//! - **A failing op ends the stream** (the first rejection, as on hardware), and every
//!   route must have left its fabric exactly as it was before that op (fail closed).
//! - **At the end** (after the last op, or the failing one) every route still in the
//!   case must leave the reference's fabric and core state (Pool_Buffers, registers).
//! - **As one program**: the DGE route runs the stream again through
//!   [`Runtime::run_program`] (which prepares each instruction while the replay before it
//!   runs); unless the DGE lane needed the reference to stand in, the program must leave
//!   the DGE lane's fabric and core state and fail at the same op.
//! - A panic anywhere is caught and is a disagreement.
//!
//! On agreement [`Routes::compare`] returns the case's [`Stats`]; for each op, each route
//! but the reference is either compared, stood in for, or absent (dropped out), so
//! `comparisons + stand-ins + absent = ops × (routes − 1)`.

use std::collections::BTreeMap;
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

/// Where the reference may stand in on the `oob` target's streams, by route and op
/// label: the POOL route has no kernel for DMA_MEMCPY (`dma_memcpy`, `window_overwrite`)
/// or the access-pattern DMAs (`dma_copy_ap`, `gather_transpose_nd`, `transpose`); the DGE route refuses, by design, a GATHER whose window
/// was overwritten since its LOAD and a GATHER_TRANSPOSE reading rows it writes (an index
/// past its table reaching the destination).
pub const STAND_INS: [(&str, &str); 7] = [
    ("pool", "dma_memcpy"),
    ("pool", "window_overwrite"),
    ("pool", "dma_copy_ap"),
    ("pool", "gather_transpose_nd"),
    ("pool", "transpose"),
    ("dge", "gather"),
    ("dge", "gather_transpose"),
];

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

/// The figures of compared cases (one case's from [`Routes::compare`]; add them up with
/// [`Stats::add`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Cases compared.
    pub cases: u64,
    /// Ops every route ran and was judged on (up to the one that ended a stream).
    pub ops: u64,
    /// Route results found equal to the reference's (each route but the reference, per op).
    pub comparisons: u64,
    /// Ops the reference and every serving route rejected alike, per kind (`Debug` form).
    pub rejected: BTreeMap<String, u64>,
    /// Indices skipped under a soft policy, as the reference reported them.
    pub skipped: u64,
    /// Judged ops per datapath label.
    pub by_label: BTreeMap<&'static str, u64>,
    /// Ops a route answered NoMechanism to, the reference standing in: per route and
    /// label.
    pub stand_ins: BTreeMap<(&'static str, &'static str), u64>,
    /// Route results not compared: the route had dropped out of its case.
    pub absent: u64,
    /// Fabric bytes compared at the end (per route compared, the larger allocation).
    pub bytes_compared: u64,
}

impl Stats {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Stats) {
        self.cases += other.cases;
        self.ops += other.ops;
        self.comparisons += other.comparisons;
        self.skipped += other.skipped;
        self.absent += other.absent;
        self.bytes_compared += other.bytes_compared;
        for (kind, n) in &other.rejected {
            *self.rejected.entry(kind.clone()).or_default() += n;
        }
        for (label, n) in &other.by_label {
            *self.by_label.entry(label).or_default() += n;
        }
        for (at, n) in &other.stand_ins {
            *self.stand_ins.entry(*at).or_default() += n;
        }
    }

    /// Stand-ins, every route and label.
    pub fn stand_in_total(&self) -> u64 {
        self.stand_ins.values().sum()
    }

    /// The first stand-in of an `oob` stream that [`STAND_INS`] does not allow: a route
    /// that stopped serving an op it should serve.
    pub fn unexpected_stand_in(&self) -> Option<(&'static str, &'static str)> {
        self.stand_ins
            .keys()
            .copied()
            .find(|at| !STAND_INS.contains(at))
    }

    /// Counts op `label`'s results: the reference's `reference`, judged.
    fn judged(&mut self, label: &'static str, reference: &StepResult) {
        self.ops += 1;
        *self.by_label.entry(label).or_default() += 1;
        match reference {
            StepResult::Done(o) => self.skipped += o.skipped.len() as u64,
            StepResult::Failed(kind) => {
                *self.rejected.entry(format!("{kind:?}")).or_default() += 1;
            }
            StepResult::Panicked(_) => {}
        }
    }
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

    /// Runs `case` on every route under the module's rules: the figures if they agree.
    pub fn compare(&mut self, case: &Case) -> Result<Stats, Disagreement> {
        let result = self.compare_inner(case);
        if result.is_err() {
            // A runtime that panicked or diverged is rebuilt for the next case.
            self.lanes.retain(|(g, _)| *g != case.generation);
            self.programs.retain(|(g, _)| *g != case.generation);
        }
        result
    }

    fn compare_inner(&mut self, case: &Case) -> Result<Stats, Disagreement> {
        let lanes = self.lanes_for(case.generation)?;
        for lane in lanes.iter_mut() {
            lane.fabric = case.fabric.clone();
            lane.runtime.reset(case.registers());
            lane.active = true;
            lane.stood_in = false;
        }
        let mut stats = Stats {
            cases: 1,
            ..Stats::default()
        };
        let mut failed = None;
        for (i, op) in case.stream.iter().enumerate() {
            let (results, before) = step_all(lanes, op);
            let label = case.labels.get(i).copied().unwrap_or("op");
            if judge(lanes, op, &results, (i, label), &mut stats)? {
                fail_closed(lanes, &before, i)?;
                failed = Some(i);
                break;
            }
        }
        stats.bytes_compared = final_state_agrees(lanes)?;
        self.program_agrees(case, failed)?;
        Ok(stats)
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
        // The lanes and the programs are apart: the DGE lane is read where it is.
        let dge = self
            .lanes
            .iter()
            .filter(|(g, _)| *g == generation)
            .flat_map(|(_, lanes)| lanes)
            .find(|l| l.mechanism == Mechanism::Dge);
        let Some(dge) = dge.filter(|l| l.active && !l.stood_in) else {
            return Ok(());
        };
        let (fabric, state) = (&dge.fabric, dge.runtime.state());
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
        if let Some(addr) = got.first_difference(fabric) {
            return Err(differ(format!(
                "leaves a fabric unlike the DGE route's at {:#x}",
                addr.0
            )));
        }
        if runtime.state() != state {
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

    /// After this lane answered NoMechanism to an op the reference ran: the reference's
    /// effect applied to its own fabric when that leaves the core state as it is, else
    /// the lane drops out.
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

/// Runs `op` on every lane, the reference (lane 0) first; returns the results and, if
/// the reference failed, each lane's fabric digest from before it ran `op`: only then
/// must the lanes fail closed (when the reference succeeds, a lane that fails disagrees
/// whatever its fabric holds), so only then are the other lanes digested.
fn step_all(lanes: &mut [Lane], op: &Op) -> (Vec<StepResult>, Vec<u64>) {
    let Some((reference, rest)) = lanes.split_first_mut() else {
        return (Vec::new(), Vec::new());
    };
    let reference_before = reference.fabric.digest();
    let first = reference.step(op);
    let before = match first {
        StepResult::Failed(_) => std::iter::once(reference_before)
            .chain(rest.iter().map(|l| l.fabric.digest()))
            .collect(),
        _ => Vec::new(),
    };
    let results = std::iter::once(first)
        .chain(rest.iter_mut().map(|l| l.step(op)))
        .collect();
    (results, before)
}

/// Compares every lane's result at op `i` (labelled `label`) with the reference's
/// (lane 0), standing in where a lane answered NoMechanism, and counts the op in
/// `stats`. `Ok(true)`: the reference failed (and the others failed alike).
fn judge(
    lanes: &mut [Lane],
    op: &Op,
    results: &[StepResult],
    (i, label): (usize, &'static str),
    stats: &mut Stats,
) -> Result<bool, Disagreement> {
    let Some((reference, rest)) = results.split_first() else {
        return Ok(false);
    };
    let opcode = op.name();
    if let StepResult::Panicked(msg) = reference {
        return Err(panicked(Mechanism::Reference, i, &opcode, msg));
    }
    let reference_failed = matches!(reference, StepResult::Failed(_));
    for (lane, got) in lanes.iter_mut().skip(1).zip(rest) {
        if !lane.active {
            stats.absent += 1;
            continue;
        }
        match got {
            StepResult::Panicked(msg) => return Err(panicked(lane.mechanism, i, &opcode, msg)),
            StepResult::Failed(ErrorKind::NoMechanism) if got != reference => {
                if !reference_failed {
                    lane.stand_in(op);
                }
                let at = (lane.mechanism.name(), label);
                *stats.stand_ins.entry(at).or_default() += 1;
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
            _ => stats.comparisons += 1,
        }
    }
    stats.judged(label, reference);
    Ok(reference_failed)
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

/// Every active lane's fabric and core state equal the reference's; returns the fabric
/// bytes compared.
fn final_state_agrees(lanes: &[Lane]) -> Result<u64, Disagreement> {
    let Some((reference, rest)) = lanes.split_first() else {
        return Ok(0);
    };
    let mut bytes = 0;
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
        let allocated = [&lane.fabric, &reference.fabric].map(Fabric::allocated_bytes);
        bytes += allocated[0].max(allocated[1]);
    }
    Ok(bytes)
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
        let stats = routes.compare(&case).unwrap();
        assert_eq!((stats.ops, stats.comparisons), (1, 1));
        assert_eq!(
            stats.stand_ins,
            BTreeMap::from([(("pool", "dma_memcpy"), 1)])
        );
        assert_eq!(stats.by_label, BTreeMap::from([("dma_memcpy", 1)]));
        assert!(stats.bytes_compared >= 2 * 16, "{stats:?}");
        assert_eq!(stats.unexpected_stand_in(), None);
        let mut odd = stats.clone();
        odd.stand_ins.insert(("dge", "dma_indirect"), 1);
        assert_eq!(odd.unexpected_stand_in(), Some(("dge", "dma_indirect")));
    }

    #[test]
    fn a_rejected_instruction_ends_the_stream_alike() {
        let mut b = Builder::new(Rng::new(1), Generation::Cayman);
        b.push("dma_memcpy", memcpy(0x1000, 0x2000).with_eng_mask(0));
        b.push("dma_memcpy", memcpy(0x1000, 0x3000));
        let mut routes = Routes::new();
        let stats = routes.compare(&b.finish()).unwrap();
        // every route validates before it looks for a mechanism: no stand-in
        assert_eq!((stats.ops, stats.comparisons, stats.absent), (1, 2, 0));
        assert_eq!(stats.stand_in_total(), 0);
        let kind = format!("{:?}", ErrorKind::Rule(crate::isa::Rule::EngineMask));
        assert_eq!(stats.rejected, BTreeMap::from([(kind, 1)]));
    }

    #[test]
    fn lanes_are_digested_only_when_the_reference_fails_and_a_change_then_is_caught() {
        let mut lanes: Vec<Lane> = MECHANISMS
            .into_iter()
            .map(|m| Lane::new(Generation::Cayman, m).unwrap())
            .collect();
        let ok = Op::Inst(memcpy(0x1000, 0x2000).into());
        let (results, before) = step_all(&mut lanes, &ok);
        assert_eq!(results.len(), 3);
        assert!(before.is_empty(), "no digest when the reference succeeds");
        let rejected = Op::Inst(memcpy(0x1000, 0x3000).with_eng_mask(0).into());
        let (results, before) = step_all(&mut lanes, &rejected);
        assert!(results.iter().all(|r| matches!(r, StepResult::Failed(_))));
        assert_eq!(before.len(), 3);
        assert_eq!(fail_closed(&lanes, &before, 1), Ok(()));
        // a route that wrote before failing is caught, by name
        lanes[2].fabric.write(FabricAddr(0x3000), &[1]).unwrap();
        let e = fail_closed(&lanes, &before, 1).unwrap_err();
        assert_eq!(e.what, "op 1 was rejected but dge changed the fabric");
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
        let mut stats = Stats::default();
        let at = |i| (i, "memcpy");
        let e = judge(&mut lanes, &inst, &results, at(3), &mut stats).unwrap_err();
        assert_eq!(e.mechanism, Mechanism::Dge);
        assert_eq!(e.what, "op 3 (0xb8): dge panicked: boom");
        let results = [
            StepResult::Failed(ErrorKind::Fabric),
            StepResult::Failed(ErrorKind::Decode),
        ];
        let e = judge(&mut lanes, &inst, &results, at(0), &mut stats).unwrap_err();
        assert_eq!(
            e.what,
            "op 0 (0xb8): dge gave failed: Decode, the reference failed: Fabric"
        );
        let same = [
            StepResult::Failed(ErrorKind::Fabric),
            StepResult::Failed(ErrorKind::Fabric),
        ];
        assert_eq!(judge(&mut lanes, &inst, &same, at(0), &mut stats), Ok(true));
        assert_eq!((stats.ops, stats.comparisons), (1, 1));
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
                ..Outcome::default()
            })
        };
        let many = (0..6).map(|p| skip(p, 9)).collect();
        let results = [done(many), done(vec![skip(0, 9), skip(7, 9)])];
        let e = judge(&mut lanes, &inst, &results, at(1), &mut stats).unwrap_err();
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
