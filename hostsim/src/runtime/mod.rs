//! # The runtime: an instruction stream on one core, routed per generation
//!
//! A [`Runtime`] owns what a core carries between instructions (the [`CoreState`]: the
//! bound/shape register file, settable by the caller, and the Pool_Buffers) and, when the
//! DGE route can be reached, the [`DgeRoute`] and a [`dma::Engine`] to replay its
//! descriptors on. [`Runtime::run`] executes a stream in order; [`Runtime::step`]
//! executes one instruction; [`Runtime::run_program`] runs host writes and lowered
//! operations as one program, with the effects of the steps in order, preparing each
//! DMA-level instruction while the replay before it runs ([`program`]).
//!
//! # Per instruction
//!
//! 1. The fabric must be of the runtime's generation, and the instruction is validated
//!    for that generation ([`Instruction::validate`]) before anything runs.
//! 2. The mechanism is chosen: with [`Mechanism::Auto`] the kernel table's route
//!    ([`isa::kernels::route_with_confidence`]): sunda's indirection opcodes to their POOL
//!    kernels, everything on cayman, mariana and maverick (and DMA_MEMCPY everywhere) to
//!    the DGE + DMA engine. [`Mechanism::Pool`], [`Mechanism::Dge`] and
//!    [`Mechanism::Reference`] force one mechanism for every instruction; a forced POOL
//!    run of DMA_MEMCPY, which has no POOL kernel, is an error
//!    ([`Error::NoPoolKernel`]). The report gives the table route, its confidence and
//!    the mechanism taken.
//! 3. PSEUDO_EMBEDDING_UPDATE 0xca is expanded into its LoadPoolArgument /
//!    EmbeddingUpdate / TensorStore micro-ops ([`expand`]), the middle one being the raw
//!    EMBEDDING_UPDATE 0x79 on 0x79's route; [`Runtime::run_raw_embedding_update`] runs
//!    the raw form directly, with the same memory effect and no expansion.
//!
//! # Failure
//!
//! Every route checks a whole instruction before writing, so an instruction that is
//! rejected (statically or by a hard OOB error) leaves the fabric and the core state
//! exactly as they were. A stream stops at its first failing instruction with
//! [`Error::Stopped`], which names the instruction's index and opcode and carries the
//! cause; the instructions before it keep their effects (on the fabric, the Pool_Buffers
//! and nothing else). Callers that need the reports of those instructions run the stream
//! with [`Runtime::step`].
//!
//! The DGE route has limits of its own (see [`crate::dge_route`]): a POOL instruction
//! whose requests read bytes they write is rejected, and it gathers only from
//! Pool_Buffer windows it loaded itself, so the core's Pool_Buffers change only through
//! instructions and [`Runtime::reset`] (which clears the route's records too).
//!
//! # Determinism
//!
//! Every route gives the same memory and [`Outcome`] for any engine queue or worker
//! count; the costs are models of the inputs alone (no wall clock), so the whole
//! [`RunReport`] is reproducible.

pub mod expand;
pub mod program;
pub mod report;

pub use expand::{MicroOp, PoolArgument};
pub use program::Step;
pub use report::{Cost, DgeServed, DmaTiming, RunReport, StepReport, Totals};

use dma::{Confidence, Engine, EngineConfig, Fabric, Generation, TimingModel};

use crate::core_state::{CoreState, Outcome};
use crate::dge_route::{DgeOutcome, DgeRoute, RecordedReplays};
use crate::error::Error;
use crate::isa::{self, BoundRegisters, Instruction, Opcode, PseudoEmbeddingUpdate, Route};
use crate::nki::ap::Collision;
use crate::nki::{ApDma, DgeMode};
use crate::{pool, reference};

/// Which mechanism the runtime uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Mechanism {
    /// The kernel table's route for each opcode on the generation.
    #[default]
    Auto,
    /// Force the POOL kernels.
    Pool,
    /// Force DGE descriptor generation replayed by the DMA engine.
    Dge,
    /// Force the closed-form reference.
    Reference,
}

impl Mechanism {
    /// Every mechanism.
    pub const ALL: [Mechanism; 4] = [
        Mechanism::Auto,
        Mechanism::Pool,
        Mechanism::Dge,
        Mechanism::Reference,
    ];

    /// `auto`, `pool`, `dge` or `reference`.
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Auto => "auto",
            Mechanism::Pool => "pool",
            Mechanism::Dge => "dge",
            Mechanism::Reference => "reference",
        }
    }

    /// Parses [`Mechanism::name`].
    pub fn from_name(name: &str) -> Option<Mechanism> {
        Mechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Whether this mechanism may send an instruction to the DGE.
    fn reaches_dge(self) -> bool {
        matches!(self, Mechanism::Auto | Mechanism::Dge)
    }
}

/// The mechanism that ran an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RouteTaken {
    /// A POOL kernel on the IVP core.
    Pool,
    /// DGE descriptors replayed by the DMA engine.
    Dge,
    /// The closed-form reference.
    Reference,
}

impl RouteTaken {
    /// `pool`, `dge` or `reference`.
    pub fn name(self) -> &'static str {
        match self {
            RouteTaken::Pool => "pool",
            RouteTaken::Dge => "dge",
            RouteTaken::Reference => "reference",
        }
    }
}

/// The mechanism `opcode` runs on for `generation` under `mechanism`, with the kernel
/// table's route and confidence.
fn route(
    generation: Generation,
    mechanism: Mechanism,
    opcode: Opcode,
) -> (RouteTaken, Route, Confidence) {
    let (table, confidence) = isa::kernels::route_with_confidence(generation, opcode);
    let taken = match (mechanism, table) {
        (Mechanism::Auto, Route::Pool) | (Mechanism::Pool, _) => RouteTaken::Pool,
        (Mechanism::Auto, Route::Dge) | (Mechanism::Dge, _) => RouteTaken::Dge,
        (Mechanism::Reference, _) => RouteTaken::Reference,
    };
    (taken, table, confidence)
}

/// What a run of `opcode` on `generation` under `mechanism` would stop with before it
/// starts: a forced POOL run of an opcode no POOL kernel serves ([`Error::NoPoolKernel`]).
pub fn check_route(
    generation: Generation,
    mechanism: Mechanism,
    opcode: Opcode,
) -> Result<(), Error> {
    match route(generation, mechanism, opcode).0 {
        RouteTaken::Pool => pool::kernel_missing(opcode).map_or(Ok(()), Err),
        RouteTaken::Dge | RouteTaken::Reference => Ok(()),
    }
}

/// The report of 0xca `e`, from `step`, the report of its raw 0x79 on 0x79's route: the
/// LoadPoolArgument / EmbeddingUpdate / TensorStore trace.
fn expanded(e: &PseudoEmbeddingUpdate, mut step: StepReport) -> StepReport {
    let (arg, load) = expand::load_pool_argument(e);
    let update = expand::embedding_update_trace(&arg, step.taken, &step.outcome);
    let store = expand::tensor_store(&arg, &step.outcome);
    step.opcode = Opcode::PseudoEmbeddingUpdate;
    step.micro_ops = vec![load, update, store];
    step
}

/// The warning for a plain copy's colliding destination indices, naming up to eight
/// pairs of positions.
fn collision_warning(c: &[Collision]) -> Option<String> {
    let first = c.first()?;
    let named: Vec<String> = c
        .iter()
        .take(8)
        .map(|c| format!("{} at positions {} and {}", c.value, c.first, c.second))
        .collect();
    let more = match c.len() > 8 {
        true => format!(" and {} more", c.len() - 8),
        false => String::new(),
    };
    // debug, not warn: the report carries the warning, and the CLI prints it once
    tracing::debug!(
        value = first.value,
        first = first.first,
        second = first.second,
        "duplicate destination indices"
    );
    Some(format!(
        "dst indices repeat ({}{more}) under unique_indices = true: this plain copy lands the last index's row; on hardware the winner depends on queue timing",
        named.join(", ")
    ))
}

/// Request `k`'s report or error in its op's index positions, if the op is `split`.
fn split_terms(
    split: Option<&crate::nki::IndexSplit>,
    k: usize,
    step: Result<StepReport, Error>,
) -> Result<StepReport, Error> {
    let Some(split) = split else {
        return step;
    };
    match step {
        Ok(mut step) => {
            split.op_skipped(k, &mut step.outcome);
            Ok(step)
        }
        Err(e) => Err(split.op_error(k, e)),
    }
}

/// The opcode whose datapath an access-pattern DMA is.
fn ap_dma_opcode(dma: &ApDma) -> Opcode {
    match dma.indexed() {
        true => Opcode::DmaIndirect,
        false => Opcode::DmaMemcpy,
    }
}

/// The error of access-pattern DMA `dma`, number `index` of its operation.
fn ap_dma_stopped(index: usize, dma: &ApDma, e: Error) -> Error {
    Error::Stopped {
        index,
        opcode: ap_dma_opcode(dma).code(),
        source: Box::new(e),
    }
}

/// The error of a DGE instruction on a runtime without an engine.
fn no_engine() -> Error {
    Error::MechanismUnavailable {
        mechanism: "dge",
        reason: "the runtime was built without a DMA engine",
    }
}

/// One core's runtime: generation, mechanism, core state and DMA engine.
#[derive(Debug)]
pub struct Runtime {
    generation: Generation,
    mechanism: Mechanism,
    state: CoreState,
    engine: Option<Engine>,
    dge: DgeRoute,
    timing: TimingModel,
}

impl Runtime {
    /// A runtime for `generation` using `mechanism`, with zeroed registers, empty
    /// Pool_Buffers and (if the mechanism can reach the DGE) a default DMA engine.
    pub fn new(generation: Generation, mechanism: Mechanism) -> Result<Runtime, Error> {
        Runtime::with_engine_config(generation, mechanism, EngineConfig::default())
    }

    /// As [`Runtime::new`], with the DMA engine configured by `config`.
    pub fn with_engine_config(
        generation: Generation,
        mechanism: Mechanism,
        config: EngineConfig,
    ) -> Result<Runtime, Error> {
        let engine = match mechanism.reaches_dge() {
            true => Some(Engine::new(config)?),
            false => None,
        };
        Ok(Runtime {
            generation,
            mechanism,
            state: CoreState::new(),
            engine,
            dge: DgeRoute::new(),
            timing: TimingModel::new(generation),
        })
    }

    /// The generation instructions are validated and routed for.
    pub fn generation(&self) -> Generation {
        self.generation
    }

    /// The mechanism the runtime was built with.
    pub fn mechanism(&self) -> Mechanism {
        self.mechanism
    }

    /// The core state (registers and Pool_Buffers).
    pub fn state(&self) -> &CoreState {
        &self.state
    }

    /// Makes the core fresh: registers `regs`, every Pool_Buffer empty, and no window
    /// recorded by the DGE route (which must see every window it gathers from loaded by
    /// itself; hence no direct access to the Pool_Buffers).
    pub fn reset(&mut self, regs: BoundRegisters) {
        self.state = CoreState::with_registers(regs);
        self.dge.reset();
    }

    /// Starts (`true`) or stops (`false`, dropping what was kept) recording the
    /// descriptor queues of every replay the DGE route hands the engine, in order.
    pub fn record_queues(&mut self, on: bool) {
        self.dge.record_queues(on);
    }

    /// The replays recorded since the last call ([`Runtime::record_queues`]).
    pub fn take_recorded(&mut self) -> RecordedReplays {
        self.dge.take_recorded()
    }

    /// The DGE requests recorded since the last call ([`Runtime::record_queues`]).
    pub fn take_requests(&mut self) -> Vec<dge::Request> {
        self.dge.take_requests()
    }

    /// The bound/shape register file DMA_INDIRECT reads.
    pub fn registers_mut(&mut self) -> &mut BoundRegisters {
        &mut self.state.regs
    }

    /// The mechanism `opcode` runs on, with the kernel table's route and confidence.
    pub fn route_of(&self, opcode: Opcode) -> (RouteTaken, Route, Confidence) {
        route(self.generation, self.mechanism, opcode)
    }

    /// Runs `stream` in order. Stops at the first failing instruction with
    /// [`Error::Stopped`] (its index, its opcode, the cause); earlier instructions keep
    /// their effects, the failing one has none.
    pub fn run(&mut self, fabric: &mut Fabric, stream: &[Instruction]) -> Result<RunReport, Error> {
        self.run_split(fabric, stream, None)
    }

    /// [`Runtime::run`] of the instructions of an op that may be `split`.
    fn run_split(
        &mut self,
        fabric: &mut Fabric,
        stream: &[Instruction],
        split: Option<&crate::nki::IndexSplit>,
    ) -> Result<RunReport, Error> {
        let _span = tracing::debug_span!("run", generation = self.generation.name()).entered();
        let mut report = RunReport::new(self.generation, self.mechanism);
        for (index, inst) in stream.iter().enumerate() {
            let step = split_terms(split, index, self.step(fabric, inst));
            report.push(step.map_err(|e| Error::Stopped {
                index,
                opcode: inst.opcode().code(),
                source: Box::new(e),
            })?);
        }
        Ok(report)
    }

    /// Sets the bound and shape registers `lowered` needs, then runs its instructions and
    /// its access-pattern DMAs, stopping at the first failure as [`Runtime::run`] does (an
    /// access-pattern DMA is numbered after the instructions).
    ///
    /// An op split into requests of 4096 indices ([`crate::nki::IndexSplit`]) is one op:
    /// it first checks its promise of unique destination indices across them all (an
    /// error, or a warning on its first step), reports errors and skipped indices at its
    /// own positions, and a request that fails undoes the ones before it (the fabric and
    /// the core state are as they were before the op).
    pub fn run_lowered(
        &mut self,
        fabric: &mut Fabric,
        lowered: &crate::nki::Lowered,
    ) -> Result<RunReport, Error> {
        // a clone shares the fabric's pages until they are written: the undo costs the
        // pages the op writes
        let before = lowered
            .split
            .as_ref()
            .map(|_| (fabric.clone(), self.state.clone()));
        let ran = self.run_requests(fabric, lowered);
        let Some((f, state)) = before.filter(|_| ran.is_err()) else {
            return ran;
        };
        *fabric = f;
        self.state = state;
        ran.map_err(|e| match e {
            Error::Stopped {
                index,
                opcode,
                source,
            } => Error::OpUndone {
                index,
                opcode,
                source,
            },
            e => e,
        })
    }

    /// [`Runtime::run_lowered`] without the undo.
    fn run_requests(
        &mut self,
        fabric: &mut Fabric,
        lowered: &crate::nki::Lowered,
    ) -> Result<RunReport, Error> {
        let split = lowered.split.as_ref();
        let repeats = match split.and_then(|s| s.unique) {
            Some(unique) => unique.check(fabric)?,
            None => Vec::new(),
        };
        lowered.apply_registers(&mut self.state.regs)?;
        let mut report = self.run_split(fabric, &lowered.instructions, split)?;
        // An op-level promise replaces each request's own warning.
        let own_warning = split.is_none_or(|s| s.unique.is_none());
        for (j, dma) in lowered.ap_dmas.iter().enumerate() {
            let k = lowered.instructions.len() + j;
            let step = self
                .execute_ap_dma(fabric, dma, own_warning)
                .map_err(|e| dma.in_terms(e));
            report.push(split_terms(split, k, step).map_err(|e| ap_dma_stopped(k, dma, e))?);
        }
        if let (Some(w), Some(first)) = (collision_warning(&repeats), report.steps.first_mut()) {
            first.warnings.push(w);
        }
        Ok(report)
    }

    /// Runs one access-pattern DMA ([`ApDma`]): on the software DGE (or the hardware
    /// DGE for a direct one from cayman on) under `auto` and `dge`, in closed form under
    /// `reference`; there is no POOL kernel for it. Reported under the opcode whose
    /// datapath it is (DMA_INDIRECT when indexed, else DMA_MEMCPY). On error nothing is
    /// written.
    pub fn run_ap_dma(&mut self, fabric: &mut Fabric, dma: &ApDma) -> Result<StepReport, Error> {
        self.execute_ap_dma(fabric, dma, true)
            .map_err(|e| dma.in_terms(e))
    }

    /// [`Runtime::run_ap_dma`] with the routes' own errors, warning of its plain copy's
    /// colliding destination indices if `warn`.
    fn execute_ap_dma(
        &mut self,
        fabric: &mut Fabric,
        dma: &ApDma,
        warn: bool,
    ) -> Result<StepReport, Error> {
        self.check_fabric(fabric)?;
        dma.dge.check_generation("dma_copy", self.generation)?;
        let opcode = ap_dma_opcode(dma);
        let _span = tracing::debug_span!("ap_dma", opcode = opcode.code()).entered();
        let collisions = match warn {
            true => dma.plain_copy_collisions(fabric)?,
            false => Vec::new(),
        };
        let (outcome, cost) = match self.mechanism {
            Mechanism::Pool => return Err(pool::kernel_missing_ap()),
            Mechanism::Reference => (reference::ap_dma(fabric, dma)?, Cost::Unmodelled),
            Mechanism::Auto | Mechanism::Dge => {
                let engine = self.engine.as_ref().ok_or_else(no_engine)?;
                let out = self.dge.execute_ap_dma(fabric, dma, engine)?;
                self.dge_cost(out)
            }
        };
        Ok(self.ap_step_report(dma, outcome, cost, &collisions))
    }

    /// The report of access-pattern DMA `dma` that had `outcome` at `cost` and whose
    /// plain copy's destination indices `collisions` (warned about).
    fn ap_step_report(
        &self,
        dma: &ApDma,
        outcome: Outcome,
        cost: Cost,
        collisions: &[Collision],
    ) -> StepReport {
        tracing::debug!(
            bytes = outcome.bytes_written,
            skipped = outcome.skips(),
            "instruction done"
        );
        let served = match dma.dge {
            DgeMode::Chosen => DgeServed::of(self.generation, dma.dynamic()),
            DgeMode::Software => DgeServed::Software,
            DgeMode::Hardware => DgeServed::Hardware,
            DgeMode::Prebuilt => DgeServed::Prebuilt,
        };
        // prebuilt descriptors cost the DGE nothing when the kernel runs
        let cost = match (served, cost) {
            (DgeServed::Prebuilt, Cost::Dge { dma, .. }) => Cost::Dge {
                dge_ps: Some(0),
                dge_instructions: 0,
                dma,
            },
            (_, cost) => cost,
        };
        let mut step = self.step_report(ap_dma_opcode(dma), outcome, cost);
        step.taken = match self.mechanism {
            Mechanism::Reference => RouteTaken::Reference,
            _ => RouteTaken::Dge,
        };
        step.dge = (step.taken == RouteTaken::Dge).then_some(served);
        step.warnings.extend(collision_warning(collisions));
        step
    }

    /// Validates and runs one instruction (0xca expanded); on error nothing is written.
    pub fn step(&mut self, fabric: &mut Fabric, inst: &Instruction) -> Result<StepReport, Error> {
        self.check_fabric(fabric)?;
        inst.validate(self.generation)?;
        match inst {
            Instruction::PseudoEmbeddingUpdate(e) => self.expand_embedding_update(fabric, e),
            _ => self.dispatch(fabric, inst, inst.opcode()),
        }
    }

    /// Runs the raw EMBEDDING_UPDATE 0x79 on the argument block of `e` directly (no
    /// expansion): the same memory effect as the 0xca form, reported as 0x79.
    pub fn run_raw_embedding_update(
        &mut self,
        fabric: &mut Fabric,
        e: &PseudoEmbeddingUpdate,
    ) -> Result<StepReport, Error> {
        self.check_fabric(fabric)?;
        let inst = Instruction::PseudoEmbeddingUpdate(*e);
        inst.validate(self.generation)?;
        self.dispatch(fabric, &inst, Opcode::EmbeddingUpdate)
    }

    /// The 0xca expansion: LoadPoolArgument, the raw 0x79 on its route, TensorStore.
    fn expand_embedding_update(
        &mut self,
        fabric: &mut Fabric,
        e: &PseudoEmbeddingUpdate,
    ) -> Result<StepReport, Error> {
        let (arg, _) = expand::load_pool_argument(e);
        let step = self.dispatch(fabric, &arg.instruction(), Opcode::EmbeddingUpdate)?;
        Ok(expanded(e, step))
    }

    /// Runs a validated `inst` on the mechanism `opcode` routes to.
    fn dispatch(
        &mut self,
        fabric: &mut Fabric,
        inst: &Instruction,
        opcode: Opcode,
    ) -> Result<StepReport, Error> {
        let taken = self.route_of(opcode).0;
        let _span =
            tracing::debug_span!("step", opcode = opcode.code(), route = taken.name()).entered();
        let (outcome, cost) = match taken {
            RouteTaken::Reference => {
                reference::execute(fabric, &mut self.state, inst).map(|o| (o, Cost::Unmodelled))?
            }
            RouteTaken::Pool => {
                pool::execute(fabric, &mut self.state, inst).map(|(o, c)| (o, Cost::Pool(c)))?
            }
            RouteTaken::Dge => self.execute_dge(fabric, inst)?,
        };
        let (bytes, skipped) = (outcome.bytes_written, outcome.skips());
        tracing::debug!(bytes, skipped, "instruction done");
        Ok(self.step_report(opcode, outcome, cost))
    }

    /// The report of an instruction `opcode` ran on its route.
    fn step_report(&self, opcode: Opcode, outcome: Outcome, cost: Cost) -> StepReport {
        let (taken, table_route, confidence) = self.route_of(opcode);
        let indexed = opcode != Opcode::DmaMemcpy;
        StepReport {
            opcode,
            table_route,
            confidence,
            taken,
            outcome,
            cost,
            micro_ops: Vec::new(),
            dge: (taken == RouteTaken::Dge).then(|| DgeServed::of(self.generation, indexed)),
            warnings: Vec::new(),
        }
    }

    /// The DGE route (`crate::dge_route`): descriptors generated and replayed on the
    /// runtime's engine. The cost is the replays' DMA timing plus the hardware DGE's time
    /// for every DGE instruction the route issued (one per request: GATHER issues one per
    /// active channel, INDIRECT_COPY one per core).
    fn execute_dge(
        &mut self,
        fabric: &mut Fabric,
        inst: &Instruction,
    ) -> Result<(Outcome, Cost), Error> {
        let engine = self.engine.as_ref().ok_or_else(no_engine)?;
        let out = self.dge.execute(fabric, &mut self.state, inst, engine)?;
        Ok(self.dge_cost(out))
    }

    /// The outcome and cost of a DGE-routed instruction.
    fn dge_cost(&self, out: DgeOutcome) -> (Outcome, Cost) {
        let cost = Cost::Dge {
            dge_ps: out.dge_ps(&self.timing),
            dge_instructions: out.dge_instructions,
            dma: DmaTiming::from_summaries(out.replays.iter().map(|r| &r.summary)),
        };
        (out.outcome, cost)
    }

    /// The fabric must be of the runtime's generation.
    fn check_fabric(&self, fabric: &Fabric) -> Result<(), Error> {
        check_generation(self.generation, fabric)
    }
}

/// `fabric` must be of generation `runtime`.
fn check_generation(runtime: Generation, fabric: &Fabric) -> Result<(), Error> {
    match fabric.generation() == runtime {
        true => Ok(()),
        false => Err(Error::RuntimeGeneration {
            runtime,
            fabric: fabric.generation(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core_state::IndexSide;
    use crate::error::ErrorKind;
    use crate::isa::{
        DmaIndirect1d, DmaIndirectFlags, DmaSide, EmbeddingTable, IndirectMode, InstFlags,
        PoolBufferLoad, S4d4Gt, Tensor4d,
    };
    use dma::{Addr4, CceOp, ComputeOp, Dtype, FabricAddr, Space};

    const TABLE: u64 = 0x1000;
    const OUT: u64 = 0x8000;

    fn sbuf(p: u32, offset: u32) -> Addr4 {
        Addr4::encode(Space::Sbuf, p, offset).unwrap()
    }

    fn at(f: &Fabric, a: Addr4) -> FabricAddr {
        a.to_fabric(f.map()).unwrap()
    }

    fn get<E: dma::Element + Default>(f: &Fabric, addr: FabricAddr, n: usize) -> Vec<E> {
        let mut out = vec![E::default(); n];
        f.read_elems(addr, &mut out).unwrap();
        out
    }

    /// POOL_BUFFER_LOAD of [10, 20, 30, 40] (u16) on partition 2, then GATHER of
    /// indices [3, 0, 9] (u8) with immediate 7, freeing the buffer.
    fn gather_stream(f: &mut Fabric) -> Vec<Instruction> {
        f.write_elems(at(f, sbuf(2, 0)), &[10u16, 20, 30, 40])
            .unwrap();
        f.write_elems(at(f, sbuf(2, 64)), &[3u8, 0, 9]).unwrap();
        let load = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(2, 0), 4), Dtype::U16, 1);
        let g = S4d4Gt::new(
            Tensor4d::contiguous(sbuf(2, 64), 3),
            Tensor4d::contiguous(sbuf(2, 128), 3),
            Dtype::U8,
            Dtype::U16,
            1,
        )
        .with_immediate(7)
        .with_free_pool_buffer(true);
        vec![load.into(), g.into()]
    }

    /// A DMA_INDIRECT gather of u32 rows [5, 6] and [7, 8] by indices `idx` (bound 2 in
    /// register 0, hard error) to OUT.
    fn dma_gather(f: &mut Fabric, r: &mut Runtime, idx: &[u32]) -> Instruction {
        f.write_elems(FabricAddr(TABLE), &[5u32, 6, 7, 8]).unwrap();
        f.write_elems(at(f, sbuf(0, 0)), idx).unwrap();
        r.registers_mut().set_bound(0, 2).unwrap();
        let flags = DmaIndirectFlags::rows(IndirectMode::Src, true, false);
        let src = DmaSide {
            start_addr: FabricAddr(TABLE),
            idx_start_addr: sbuf(0, 0),
            elem_size: 8,
            step_elem: 1,
            bound: crate::isa::BoundCheckReg::enabled(0, false).unwrap(),
        };
        let dst = DmaSide {
            start_addr: FabricAddr(OUT),
            idx_start_addr: Addr4(0),
            elem_size: 8,
            step_elem: 1,
            bound: crate::isa::BoundCheckReg::DISABLED,
        };
        let n = idx.len() as u16;
        DmaIndirect1d::new(flags, src, dst, n, Dtype::U32, ComputeOp::None).into()
    }

    fn embedding(f: &mut Fabric) -> PseudoEmbeddingUpdate {
        f.write_elems(FabricAddr(TABLE), &[1i32, 2, 3, 4, 5, 6])
            .unwrap();
        f.write_elems(at(f, sbuf(0, 256)), &[2u32, 0, 3, 2])
            .unwrap();
        f.write_elems(at(f, sbuf(1, 0)), &[10i32, 20, 30, 40, 50, 60, 70, 80])
            .unwrap();
        let table = EmbeddingTable {
            base_addr: FabricAddr(TABLE),
            num_entries: 3,
            stride_bytes: 8,
            num_elements: 2,
        };
        PseudoEmbeddingUpdate::new(table, sbuf(0, 256), sbuf(1, 0), 4, Dtype::I32, CceOp::Add)
    }

    #[test]
    fn routes_follow_the_kernel_table_or_the_forced_mechanism() {
        let sunda = Runtime::new(Generation::Sunda, Mechanism::Auto).unwrap();
        use Confidence::{Inferred, Observed};
        assert_eq!(
            sunda.route_of(Opcode::Gather),
            (RouteTaken::Pool, Route::Pool, Observed)
        );
        assert_eq!(
            sunda.route_of(Opcode::DmaMemcpy),
            (RouteTaken::Dge, Route::Dge, Observed)
        );
        assert_eq!(
            sunda.route_of(Opcode::PoolBufferLoad),
            (RouteTaken::Pool, Route::Pool, Inferred)
        );
        let mariana = Runtime::new(Generation::Mariana, Mechanism::Auto).unwrap();
        assert_eq!(
            mariana.route_of(Opcode::IndirectCopy),
            (RouteTaken::Dge, Route::Dge, Inferred)
        );
        let forced = Runtime::new(Generation::Cayman, Mechanism::Reference).unwrap();
        assert_eq!(
            forced.route_of(Opcode::DmaIndirect),
            (RouteTaken::Reference, Route::Dge, Observed)
        );
        let pool = Runtime::new(Generation::Maverick, Mechanism::Pool).unwrap();
        assert_eq!(pool.route_of(Opcode::Gather).0, RouteTaken::Pool);
        for m in Mechanism::ALL {
            assert_eq!(Mechanism::from_name(m.name()), Some(m));
        }
        assert_eq!(Mechanism::from_name("fast"), None);
        assert_eq!(RouteTaken::Dge.name(), "dge");
    }

    #[test]
    fn a_sunda_stream_runs_on_the_pool_kernels() {
        let mut f = Fabric::new(Generation::Sunda);
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Pool).unwrap();
        let mut stream = gather_stream(&mut f);
        stream.push(dma_gather(&mut f, &mut r, &[1, 0, 1]));
        let report = r.run(&mut f, &stream).unwrap();
        // window [10, 20, 30, 40]: index 3 -> 40, 0 -> 10, 9 misses -> immediate 7
        assert_eq!(get::<u16>(&f, at(&f, sbuf(2, 128)), 3), vec![40, 10, 7]);
        assert_eq!(get::<u32>(&f, FabricAddr(OUT), 6), vec![7, 8, 5, 6, 7, 8]);
        let ops: Vec<u8> = report.steps.iter().map(|s| s.opcode.code()).collect();
        assert_eq!(ops, vec![0x67, 0x68, 0xbb]);
        assert!(report.steps.iter().all(|s| s.taken == RouteTaken::Pool));
        let kernels: Vec<&str> = report
            .steps
            .iter()
            .map(|s| match s.cost {
                Cost::Pool(c) => c.kernel,
                _ => "?",
            })
            .collect();
        assert_eq!(
            kernels,
            vec!["pool_buffer_load", "pool_gather", "dma_memcopy_indirect"]
        );
        let t = report.totals;
        assert_eq!((t.instructions, t.bytes_written, t.skipped), (3, 6 + 24, 0));
        let sum: u64 = report.steps.iter().map(|s| s.cost.estimated_ps()).sum();
        assert_eq!((t.pool_ps, t.estimated_ps), (sum, sum));
        assert_eq!(
            r.state().pool_buffers,
            crate::core_state::PoolBuffers::new()
        );
    }

    #[test]
    fn the_pseudo_op_expands_into_three_micro_ops() {
        let mut f = Fabric::new(Generation::Sunda);
        let e = embedding(&mut f);
        let mut raw_fabric = f.clone();
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Pool).unwrap();
        let report = r.run(&mut f, &[e.into()]).unwrap();
        // rows: r0 [1,2] r1 [3,4] r2 [5,6]; i0 -> r2 += [10,20]; i1 -> r0 += [30,40];
        // i2 = 3 >= 3 skipped; i3 -> r2 += [70,80]
        assert_eq!(
            get::<i32>(&f, FabricAddr(TABLE), 6),
            vec![31, 42, 3, 4, 85, 106]
        );
        let step = &report.steps[0];
        assert_eq!(step.opcode, Opcode::PseudoEmbeddingUpdate);
        let expected = vec![
            MicroOp::LoadPoolArgument {
                bytes: 64,
                sequence_length: 4,
            },
            MicroOp::EmbeddingUpdate {
                route: RouteTaken::Pool,
                applied: 3,
                skipped: 1,
            },
            MicroOp::TensorStore { rows: 3, bytes: 24 },
        ];
        assert_eq!(step.micro_ops, expected);
        let raw = r.run_raw_embedding_update(&mut raw_fabric, &e).unwrap();
        assert_eq!(raw.opcode, Opcode::EmbeddingUpdate);
        assert!(raw.micro_ops.is_empty());
        assert_eq!(raw.outcome, step.outcome);
        assert_eq!(raw_fabric.first_difference(&f), None);
    }

    #[test]
    fn a_failing_instruction_stops_the_run_and_keeps_earlier_effects() {
        let mut f = Fabric::new(Generation::Sunda);
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Reference).unwrap();
        let mut stream = gather_stream(&mut f);
        stream.insert(1, dma_gather(&mut f, &mut r, &[0, 2]));
        let e = r.run(&mut f, &stream).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Stopped {
                    index: 1,
                    opcode: 0xbb,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::IndexOutOfBounds(IndexSide::Src));
        // the load (index 0) kept its window; the failing gather wrote nothing
        assert!(r.state().pool_buffers.window(2).unwrap().is_some());
        assert_eq!(get::<u32>(&f, FabricAddr(OUT), 4), vec![0; 4]);
        assert_eq!(get::<u16>(&f, at(&f, sbuf(2, 128)), 3), vec![0; 3]);
    }

    #[test]
    fn instructions_are_validated_for_the_runtime_generation() {
        let mut f = Fabric::new(Generation::Sunda);
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Reference).unwrap();
        let tile = PoolBufferLoad::new(Tensor4d::contiguous(sbuf(0, 0), 4), Dtype::U8, 1)
            .with_inst_flags(InstFlags::TILE);
        let digest = f.digest();
        let e = r.step(&mut f, &tile.into()).unwrap_err();
        assert_eq!(
            e.kind(),
            ErrorKind::Rule(crate::isa::Rule::TileFlagGeneration)
        );
        assert_eq!(f.digest(), digest);
        let mut other = Fabric::new(Generation::Cayman);
        let e = r.run(&mut other, &gather_stream(&mut f)).unwrap_err();
        assert!(matches!(
            e,
            Error::Stopped { index: 0, source, .. } if matches!(*source, Error::RuntimeGeneration { .. })
        ));
    }

    #[test]
    fn cayman_routes_to_the_dge_and_reports_its_cost() {
        let mut f = Fabric::new(Generation::Cayman);
        let mut r = Runtime::new(Generation::Cayman, Mechanism::Auto).unwrap();
        let mut stream = gather_stream(&mut f);
        stream.push(dma_gather(&mut f, &mut r, &[1, 0, 1]));
        let report = r.run(&mut f, &stream).unwrap();
        assert_eq!(get::<u16>(&f, at(&f, sbuf(2, 128)), 3), vec![40, 10, 7]);
        assert_eq!(get::<u32>(&f, FabricAddr(OUT), 6), vec![7, 8, 5, 6, 7, 8]);
        assert!(report.steps.iter().all(|s| s.taken == RouteTaken::Dge));
        let Cost::Dge {
            dge_ps,
            dge_instructions,
            dma,
        } = report.steps[2].cost
        else {
            panic!("{:?}", report.steps[2].cost)
        };
        // one request, 600 ns of hardware DGE, three 8-byte rows replayed
        assert_eq!((dge_ps, dge_instructions), (Some(600_000), 1));
        assert_eq!((dma.replays, dma.bytes), (1, 24));
        assert!(dma.makespan_ps > 0);
        let t = report.totals;
        assert_eq!(t.estimated_ps, t.dge_ps + t.dma_ps);
        assert_eq!(t.pool_ps, 0);
        r.reset(BoundRegisters::new());
        assert_eq!(*r.state(), CoreState::new());
    }

    #[test]
    fn sunda_sends_dma_memcpy_to_the_dge() {
        use crate::isa::{Direct2dSide, DmaDirect2d};
        let mut f = Fabric::new(Generation::Sunda);
        f.write_elems(FabricAddr(TABLE), &[1u32, 2, 3, 4]).unwrap();
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Auto).unwrap();
        let side = |a| Direct2dSide {
            start_addr: FabricAddr(a),
            step_elem: [1, 4],
        };
        let m = DmaDirect2d::new(
            side(TABLE),
            side(OUT),
            4,
            [4, 1],
            Dtype::U32,
            ComputeOp::None,
        );
        let step = r.step(&mut f, &m.into()).unwrap();
        assert_eq!(
            (step.taken, step.table_route),
            (RouteTaken::Dge, Route::Dge)
        );
        assert_eq!(get::<u32>(&f, FabricAddr(OUT), 4), vec![1, 2, 3, 4]);
        // sunda has no hardware DGE: only the replay is costed
        let Cost::Dge {
            dge_ps: None, dma, ..
        } = step.cost
        else {
            panic!("{:?}", step.cost)
        };
        assert_eq!(step.cost.estimated_ps(), dma.makespan_ps);
    }

    #[test]
    fn forced_pool_has_no_dma_memcpy_kernel() {
        use crate::isa::{Direct2dSide, DmaDirect2d};
        let mut f = Fabric::new(Generation::Sunda);
        let mut r = Runtime::new(Generation::Sunda, Mechanism::Pool).unwrap();
        let side = |a| Direct2dSide {
            start_addr: FabricAddr(a),
            step_elem: [1, 4],
        };
        let m = DmaDirect2d::new(
            side(TABLE),
            side(OUT),
            4,
            [4, 1],
            Dtype::U32,
            ComputeOp::None,
        );
        let e = r.step(&mut f, &m.into()).unwrap_err();
        assert!(matches!(e, Error::NoPoolKernel { opcode: 0xb8, .. }), "{e}");
        assert_eq!(e.kind(), ErrorKind::NoMechanism);
    }
}
