//! Running one case on several mechanisms and comparing them.
//!
//! A [`Lanes`] holds one [`Runtime`] per compared mechanism and generation, each forced
//! to its mechanism (the reference first: it is what the others are compared with).
//! [`Lanes::compare`] gives every lane a clone of the case's fabric and its registers,
//! steps the stream in all lanes together and, per instruction, requires equal
//! [`Outcome`]s or equal [`ErrorKind`]s (never message text); a stream stops at its
//! first error in every lane. At the end every lane's fabric must equal the reference's
//! (`first_difference == None`) and so must its core state (Pool_Buffers, registers).
//!
//! DMA_MEMCPY has no POOL kernel: the POOL lane checks that a forced POOL run rejects it
//! ([`ErrorKind::NoMechanism`]) and then applies the reference to its own fabric, so the
//! stream can go on; those instructions count as compared between the other lanes only.
//!
//! The DGE route refuses a few inputs by design (`hostsim::dge_route::by_design`: a
//! Pool_Buffer window overwritten since its LOAD or not affine, a POOL instruction that
//! reads bytes it writes, a row past the 32-bit step). The DGE lane steps first; when it
//! refuses an instruction by design and the reference runs it, the case is counted as
//! "rejected by dge, by design" and the stream stops there in every lane, so the final
//! states are still compared.

use std::collections::BTreeMap;
use std::fmt::Write;

use dma::{EngineConfig, Fabric, Generation};
use hostsim::core_state::Outcome;
use hostsim::dge_route::by_design;
use hostsim::isa::Instruction;
use hostsim::runtime::{Mechanism, Runtime};
use hostsim::{reference, ErrorKind};

use crate::cases::Case;

/// What one instruction did in one lane.
pub type LaneResult = Result<Outcome, ErrorKind>;

/// The figures of a comparison run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Cases compared.
    pub cases: u64,
    /// Instructions executed in every lane and compared.
    pub instructions: u64,
    /// Of those, instructions every lane rejected with the same error kind.
    pub rejected: u64,
    /// Lane pairs of (instruction) results compared against the reference.
    pub comparisons: u64,
    /// Fabric bytes compared (the larger allocation of each compared pair).
    pub bytes_compared: u64,
    /// Indices skipped under a soft policy, as the reference reported them.
    pub skipped: u64,
    /// Compared instructions per datapath label.
    pub by_label: BTreeMap<&'static str, u64>,
    /// Rejections per error kind (its `Debug` form).
    pub rejected_by_kind: BTreeMap<String, u64>,
    /// Instructions the DGE route refused by design while the reference ran them, per
    /// datapath label (the stream stops there).
    pub dge_by_design: BTreeMap<&'static str, u64>,
}

impl Stats {
    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &Stats) {
        self.cases += other.cases;
        self.instructions += other.instructions;
        self.rejected += other.rejected;
        self.comparisons += other.comparisons;
        self.bytes_compared += other.bytes_compared;
        self.skipped += other.skipped;
        for (label, n) in &other.by_label {
            *self.by_label.entry(label).or_default() += n;
        }
        for (kind, n) in &other.rejected_by_kind {
            *self.rejected_by_kind.entry(kind.clone()).or_default() += n;
        }
        for (label, n) in &other.dge_by_design {
            *self.dge_by_design.entry(label).or_default() += n;
        }
    }
}

/// One lane: a forced runtime and its fabric.
struct Lane {
    runtime: Runtime,
    fabric: Fabric,
}

/// The compared mechanisms, one runtime each per generation (built on first use).
pub struct Lanes {
    mechanisms: Vec<Mechanism>,
    lanes: Vec<(Generation, Vec<Lane>)>,
}

impl Lanes {
    /// Lanes for `mechanisms` (the first is the one the others are compared with).
    pub fn new(mechanisms: &[Mechanism]) -> Lanes {
        Lanes {
            mechanisms: mechanisms.to_vec(),
            lanes: Vec::new(),
        }
    }

    /// The compared mechanisms.
    pub fn mechanisms(&self) -> &[Mechanism] {
        &self.mechanisms
    }

    /// Runs `case` in every lane; `Err` describes the first disagreement.
    pub fn compare(&mut self, case: &Case) -> Result<Stats, String> {
        let lanes = self.lanes_for(case.generation);
        for lane in lanes.iter_mut() {
            lane.fabric = case.fabric.clone();
            lane.runtime.reset(case.regs);
        }
        let mut stats = Stats {
            cases: 1,
            ..Stats::default()
        };
        for (i, inst) in case.stream.iter().enumerate() {
            let Some(results) = step_all(lanes, inst).map_err(|d| describe(case, i, &d))? else {
                *stats.dge_by_design.entry(case.labels[i]).or_default() += 1;
                break;
            };
            let compared = agree(&results).map_err(|d| describe(case, i, &d))?;
            stats.instructions += 1;
            stats.comparisons += compared;
            *stats.by_label.entry(case.labels[i]).or_default() += 1;
            match &results[0] {
                Ok(o) => stats.skipped += o.skipped.len() as u64,
                Err(kind) => {
                    stats.rejected += 1;
                    *stats
                        .rejected_by_kind
                        .entry(format!("{kind:?}"))
                        .or_default() += 1;
                    break;
                }
            }
        }
        stats.bytes_compared = final_state_agrees(lanes, case)?;
        Ok(stats)
    }

    /// The lanes of `generation`, built on first use.
    fn lanes_for(&mut self, generation: Generation) -> &mut Vec<Lane> {
        let at = match self.lanes.iter().position(|(g, _)| *g == generation) {
            Some(at) => at,
            None => {
                let lanes = self
                    .mechanisms
                    .iter()
                    .map(|m| Lane::new(generation, *m))
                    .collect();
                self.lanes.push((generation, lanes));
                self.lanes.len() - 1
            }
        };
        &mut self.lanes[at].1
    }
}

impl Lane {
    fn new(generation: Generation, mechanism: Mechanism) -> Lane {
        // Two engine workers: enough to exercise the concurrent replay, small for CI.
        let config = EngineConfig {
            workers: 2,
            ..EngineConfig::default()
        };
        Lane {
            runtime: Runtime::with_engine_config(generation, mechanism, config)
                .expect("the engine starts"),
            fabric: Fabric::new(generation),
        }
    }

    /// Steps `inst`; the POOL lane runs DMA_MEMCPY with the reference (see module docs).
    fn step(&mut self, inst: &Instruction) -> LaneResult {
        let pool = self.runtime.mechanism() == Mechanism::Pool;
        if pool && matches!(inst, Instruction::DmaMemcpy(_)) {
            let forced = self.runtime.step(&mut self.fabric, inst).map(|s| s.outcome);
            match forced.map_err(|e| e.kind()) {
                Err(ErrorKind::NoMechanism) => {}
                other => return other.and(Err(ErrorKind::Runtime)),
            }
            // DMA_MEMCPY reads no core state and leaves it unchanged.
            let mut scratch = self.runtime.state().clone();
            return reference::execute(&mut self.fabric, &mut scratch, inst).map_err(|e| e.kind());
        }
        self.runtime
            .step(&mut self.fabric, inst)
            .map(|s| s.outcome)
            .map_err(|e| e.kind())
    }
}

/// Steps `inst` in every lane, the DGE lanes first; `None` when a DGE lane refuses it by
/// design and the reference (on a copy of lane 0) runs it: then no other lane steps.
fn step_all(lanes: &mut [Lane], inst: &Instruction) -> Result<Option<Vec<LaneResult>>, String> {
    let mut results: Vec<Option<LaneResult>> = vec![None; lanes.len()];
    for (k, lane) in lanes.iter_mut().enumerate() {
        if lane.runtime.mechanism() != Mechanism::Dge {
            continue;
        }
        match lane.runtime.step(&mut lane.fabric, inst) {
            Ok(step) => results[k] = Some(Ok(step.outcome)),
            Err(e) if by_design(&e) => {
                let first = lanes.first().ok_or("no lanes")?;
                let mut state = first.runtime.state().clone();
                let mut fabric = first.fabric.clone();
                return match reference::execute(&mut fabric, &mut state, inst) {
                    Ok(_) => Ok(None),
                    Err(r) => Err(format!(
                        "dge refused by design ({e}) what the reference rejects too ({r})"
                    )),
                };
            }
            Err(e) => results[k] = Some(Err(e.kind())),
        }
    }
    Ok(Some(
        lanes
            .iter_mut()
            .zip(results)
            .map(|(lane, done)| done.unwrap_or_else(|| lane.step(inst)))
            .collect(),
    ))
}

/// Every lane's fabric and core state equal lane 0's; returns the bytes compared.
fn final_state_agrees(lanes: &[Lane], case: &Case) -> Result<u64, String> {
    let (first, rest) = lanes.split_first().ok_or("no lanes")?;
    let mut bytes = 0;
    for lane in rest {
        let name = lane.runtime.mechanism().name();
        if let Some(addr) = first.fabric.first_difference(&lane.fabric) {
            let at = addr.0;
            return Err(format!(
                "{name} fabric differs from the reference at {at:#x}\n{}",
                listing(case)
            ));
        }
        if first.runtime.state() != lane.runtime.state() {
            return Err(format!("{name} core state differs\n{}", listing(case)));
        }
        bytes += first
            .fabric
            .allocated_bytes()
            .max(lane.fabric.allocated_bytes());
    }
    Ok(bytes)
}

/// How many lanes agree with lane 0 (all must), or the disagreement.
fn agree(results: &[LaneResult]) -> Result<u64, String> {
    let (first, rest) = results.split_first().ok_or("no lanes")?;
    for (k, r) in rest.iter().enumerate() {
        if r != first {
            return Err(format!("lane 0 gave {first:?}, lane {} gave {r:?}", k + 1));
        }
    }
    Ok(rest.len() as u64)
}

fn describe(case: &Case, i: usize, detail: &str) -> String {
    format!(
        "instruction {i} ({}) disagrees: {detail}\n{}",
        case.labels[i],
        listing(case)
    )
}

/// The case's stream, one instruction per line.
fn listing(case: &Case) -> String {
    let mut out = format!("generation {}\n", case.generation);
    for (i, (inst, label)) in case.stream.iter().zip(&case.labels).enumerate() {
        let _ = writeln!(out, "  [{i}] {label}: {inst:?}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hostsim::core_state::IndexSide;

    #[test]
    fn agreement_needs_equal_outcomes_and_kinds() {
        let o = Outcome {
            bytes_written: 8,
            ..Outcome::default()
        };
        let mut other = o.clone();
        other.bytes_written = 4;
        assert_eq!(agree(&[Ok(o.clone()), Ok(o.clone()), Ok(o.clone())]), Ok(2));
        assert!(agree(&[Ok(o.clone()), Ok(other)]).is_err());
        let oob = ErrorKind::IndexOutOfBounds(IndexSide::Src);
        assert_eq!(agree(&[Err(oob), Err(oob)]), Ok(1));
        assert!(agree(&[Err(oob), Err(ErrorKind::IndexOutOfBounds(IndexSide::Dst))]).is_err());
        assert!(agree(&[Err(oob), Ok(o)]).is_err());
    }
}
