//! What the runtime reports: one [`StepReport`] per executed instruction (opcode, the
//! kernel table's route and its confidence, the mechanism that ran it, the [`Outcome`],
//! the [`Cost`] and, for 0xca, the micro-op trace) and a [`RunReport`] with [`Totals`].
//!
//! Times are integer picoseconds like the DMA timing report, so reports are
//! bit-reproducible. Instructions of a stream run back to back: the stream's estimate is
//! the sum of its instructions' estimates.

use dma::{Confidence, Generation, ReplaySummary};

use super::expand::MicroOp;
use super::{Mechanism, RouteTaken};
use crate::core_state::Outcome;
use crate::isa::{Opcode, Route};
use crate::pool::PoolCost;

/// The DMA side of a DGE-routed instruction: its replays' totals.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DmaTiming {
    /// Engine replays the instruction needed.
    pub replays: u32,
    /// Descriptors replayed.
    pub descriptors: u64,
    /// Bytes the descriptors moved.
    pub bytes: u64,
    /// The replays' makespans, summed (they run one after the other), ps.
    pub makespan_ps: u64,
}

impl DmaTiming {
    /// The totals of `summaries`, replayed in order.
    pub fn from_summaries<'a>(summaries: impl IntoIterator<Item = &'a ReplaySummary>) -> Self {
        summaries
            .into_iter()
            .fold(DmaTiming::default(), |t, s| DmaTiming {
                replays: t.replays.saturating_add(1),
                descriptors: t.descriptors.saturating_add(s.descriptors),
                bytes: t.bytes.saturating_add(s.bytes),
                makespan_ps: t.makespan_ps.saturating_add(s.makespan_ps),
            })
    }
}

/// What one instruction cost, by the model of the mechanism that ran it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cost {
    /// A POOL kernel's estimate (seed 000 section 9).
    Pool(PoolCost),
    /// DGE descriptor generation plus the DMA replay: `dge_ps` is the hardware DGE's time,
    /// 600 ns per DGE instruction from v3 (`None` on sunda, which has no hardware DGE and
    /// whose software DGE time is not modelled).
    Dge {
        /// The hardware DGE's time, ps.
        dge_ps: Option<u64>,
        /// DGE instructions (requests) the route issued.
        dge_instructions: u32,
        /// The DMA replay.
        dma: DmaTiming,
    },
    /// The reference has no cost model.
    Unmodelled,
}

impl Cost {
    /// The instruction's estimate, ps (0 for the reference).
    pub fn estimated_ps(&self) -> u64 {
        match self {
            Cost::Pool(c) => c.estimated_ps,
            Cost::Dge { dge_ps, dma, .. } => dge_ps.unwrap_or(0).saturating_add(dma.makespan_ps),
            Cost::Unmodelled => 0,
        }
    }
}

/// The report of one executed instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepReport {
    /// The instruction's opcode (0xca for an expanded PSEUDO_EMBEDDING_UPDATE, 0x79 for
    /// the raw form).
    pub opcode: Opcode,
    /// The kernel table's route for the opcode on the runtime's generation.
    pub table_route: Route,
    /// How well that route is grounded (observed or inferred).
    pub confidence: Confidence,
    /// The mechanism that ran it (the table route, or the forced one).
    pub taken: RouteTaken,
    /// Skipped indices, notification, bytes stored.
    pub outcome: Outcome,
    /// The cost estimate.
    pub cost: Cost,
    /// The micro-ops an expanded pseudo-op ran, in order (empty otherwise).
    pub micro_ops: Vec<MicroOp>,
    /// Which DGE generated its descriptors (`None` off the DGE route).
    pub dge: Option<DgeServed>,
    /// What the run did that hardware may do otherwise (a plain copy's colliding
    /// destination indices), one line each.
    pub warnings: Vec<String>,
}

/// The DGE that served a DGE-routed instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DgeServed {
    /// The hardware DGE (cayman and later): direct DMAs, no indirection.
    Hardware,
    /// The software DGE on the GpSimd core: every indexed or data-dependent DMA, and
    /// everything on sunda, which has no hardware DGE.
    Software,
    /// No DGE: descriptors the Neuron Runtime built before the kernel ran (NKI's
    /// `dge_mode=none`), no DGE time spent.
    Prebuilt,
}

impl DgeServed {
    /// `hardware` or `software`.
    pub fn name(self) -> &'static str {
        match self {
            DgeServed::Hardware => "hardware",
            DgeServed::Software => "software",
            DgeServed::Prebuilt => "none",
        }
    }

    /// The DGE that serves a DGE-routed instruction on `generation`: the hardware one
    /// for a direct DMA (`indexed` false) from cayman on, else the software one.
    pub fn of(generation: Generation, indexed: bool) -> DgeServed {
        match (generation, indexed) {
            (Generation::Sunda, _) | (_, true) => DgeServed::Software,
            _ => DgeServed::Hardware,
        }
    }
}

/// The totals of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Instructions executed.
    pub instructions: usize,
    /// Fabric bytes stored.
    pub bytes_written: u64,
    /// Indices and scalar offsets skipped under a soft OOB policy.
    pub skipped: usize,
    /// Instructions that raised the OOB notification.
    pub notifications: usize,
    /// POOL kernel estimates, ps.
    pub pool_ps: u64,
    /// Hardware DGE time, ps.
    pub dge_ps: u64,
    /// DMA replay makespans, ps.
    pub dma_ps: u64,
    /// Descriptors replayed.
    pub descriptors: u64,
    /// The whole stream's estimate (`pool_ps + dge_ps + dma_ps`), ps.
    pub estimated_ps: u64,
}

impl Totals {
    /// Adds one instruction's report.
    fn add(&mut self, step: &StepReport) {
        self.instructions += 1;
        self.bytes_written = self
            .bytes_written
            .saturating_add(step.outcome.bytes_written);
        self.skipped += step.outcome.skips();
        self.notifications += usize::from(step.outcome.oob_notification);
        match step.cost {
            Cost::Pool(c) => self.pool_ps = self.pool_ps.saturating_add(c.estimated_ps),
            Cost::Dge { dge_ps, dma, .. } => {
                self.dge_ps = self.dge_ps.saturating_add(dge_ps.unwrap_or(0));
                self.dma_ps = self.dma_ps.saturating_add(dma.makespan_ps);
                self.descriptors = self.descriptors.saturating_add(dma.descriptors);
            }
            Cost::Unmodelled => {}
        }
        self.estimated_ps = self.estimated_ps.saturating_add(step.cost.estimated_ps());
    }
}

/// The report of a whole stream: one step per instruction, in stream order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunReport {
    /// The generation the stream ran for.
    pub generation: Generation,
    /// The mechanism the runtime was asked to use.
    pub mechanism: Mechanism,
    /// Step `i` reports instruction `i`.
    pub steps: Vec<StepReport>,
    /// The sums over the steps.
    pub totals: Totals,
}

impl RunReport {
    /// An empty report.
    pub fn new(generation: Generation, mechanism: Mechanism) -> RunReport {
        RunReport {
            generation,
            mechanism,
            steps: Vec::new(),
            totals: Totals::default(),
        }
    }

    /// Appends the report of the next instruction.
    pub fn push(&mut self, step: StepReport) {
        self.totals.add(&step);
        self.steps.push(step);
    }

    /// The estimate of the whole stream in whole ns (rounded up).
    pub fn estimated_ns(&self) -> u64 {
        self.totals.estimated_ps.div_ceil(1000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_state::{IndexSide, SkippedIndex};
    use crate::pool::Work;

    fn step(cost: Cost, outcome: Outcome) -> StepReport {
        StepReport {
            opcode: Opcode::DmaIndirect,
            table_route: Route::Dge,
            confidence: Confidence::Observed,
            taken: RouteTaken::Dge,
            outcome,
            cost,
            micro_ops: Vec::new(),
            dge: None,
            warnings: Vec::new(),
        }
    }

    #[test]
    fn costs_estimate_their_mechanism() {
        let pool = PoolCost::estimate("k", 1, Work::default());
        assert_eq!(Cost::Pool(pool).estimated_ps(), 107_143);
        let dma = DmaTiming {
            replays: 1,
            descriptors: 3,
            bytes: 96,
            makespan_ps: 5_000,
        };
        let dge = Cost::Dge {
            dge_ps: Some(600_000),
            dge_instructions: 1,
            dma,
        };
        assert_eq!(dge.estimated_ps(), 605_000);
        let v2 = Cost::Dge {
            dge_ps: None,
            dge_instructions: 1,
            dma,
        };
        assert_eq!(v2.estimated_ps(), 5_000);
        assert_eq!(Cost::Unmodelled.estimated_ps(), 0);
    }

    #[test]
    fn totals_add_up() {
        let mut r = RunReport::new(Generation::Cayman, Mechanism::Auto);
        let skipped = SkippedIndex {
            side: IndexSide::Src,
            position: 2,
            value: 9,
        };
        let outcome = Outcome {
            skipped: vec![skipped],
            oob_notification: true,
            bytes_written: 12,
            ..Outcome::default()
        };
        let dma = DmaTiming {
            replays: 1,
            descriptors: 4,
            bytes: 12,
            makespan_ps: 1_500,
        };
        r.push(step(
            Cost::Dge {
                dge_ps: Some(600_000),
                dge_instructions: 1,
                dma,
            },
            outcome,
        ));
        let pool = PoolCost::estimate("k", 1, Work::default());
        r.push(step(Cost::Pool(pool), Outcome::default()));
        let t = r.totals;
        assert_eq!((t.instructions, t.bytes_written, t.skipped), (2, 12, 1));
        assert_eq!((t.notifications, t.descriptors), (1, 4));
        assert_eq!((t.dge_ps, t.dma_ps, t.pool_ps), (600_000, 1_500, 107_143));
        assert_eq!(t.estimated_ps, 708_643);
        assert_eq!(r.estimated_ns(), 709);
    }
}
