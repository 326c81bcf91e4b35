//! Programs: host writes and lowered NKI operations run in order, each DGE replay
//! overlapped with the preparation of what follows it ([`Runtime::run_program`]).
//!
//! A program gives the memory, the report and the error of its steps run one after
//! another ([`Fabric::write`], [`Runtime::run_lowered`]), in less time: while the replay
//! of a DMA-level instruction (DMA_INDIRECT, INDIRECT_COPY, DMA_MEMCPY, or an
//! access-pattern DMA on the DGE; one DGE request, one replay) runs on the engine's
//! thread pool, the caller writes the following steps' host data and generates and validates
//! the next such instruction's descriptors ([`dma::Engine::run_beside`]);
//! PSEUDO_EMBEDDING_UPDATE 0xca counts as such an instruction when its raw 0x79 goes to
//! the DGE. The host writes that follow the next
//! instruction, up to the one after it, go in beside the replay too, after that
//! instruction is prepared, where its replay reaches none of their bytes (it neither
//! reads nor writes between the lowest and the highest byte it reads or writes,
//! [`dma::Validated::touches`]): its replay then leaves the same memory. (So a write
//! into memory the running replay reads, staging the operation after next, goes in
//! beside the next replay instead of waiting for the next-but-one.) What cannot be done beside the replay waits for it:
//!
//! - a host write to a page the replay reads from (between its lowest and highest page
//!   read) or writes, or to a page with no storage yet, and one after the next
//!   instruction that its replay may reach;
//! - any other instruction (GATHER, POOL_BUFFER_LOAD, anything routed to the POOL
//!   kernels or the reference);
//! - a preparation that read a page the replay writes, or failed: it is done again once
//!   the replay is done, so it sees the replay's memory, and an error is the one the
//!   steps in order would give.

use std::collections::VecDeque;

use dma::{Beside, Engine, Fabric, FabricAddr, Generation};

use super::{ap_dma_stopped, expanded, no_engine, route, Mechanism, RouteTaken, Runtime};
use crate::core_state::CoreState;
use crate::dge_route::{DgeRoute, Prepared};
use crate::error::Error;
use crate::isa::{Instruction, Opcode};
use crate::nki::ap::Collision;
use crate::nki::{ApDma, Lowered};

use super::report::{RunReport, StepReport};

/// One step of a program.
#[derive(Clone, Copy, Debug)]
pub enum Step<'a> {
    /// Host bytes written at an address, as [`Fabric::write`].
    Write { addr: FabricAddr, bytes: &'a [u8] },
    /// A lowered NKI operation, as [`Runtime::run_lowered`]: its bound and shape registers set,
    /// then its instructions run.
    Run(&'a Lowered),
}

/// What a program does next, with the index of the step it belongs to.
#[derive(Clone, Copy, Debug)]
enum Item<'a> {
    Write {
        addr: FabricAddr,
        bytes: &'a [u8],
    },
    Registers(&'a Lowered),
    /// An operation split into requests of 4096 indices, run whole in order
    /// ([`Runtime::run_lowered`]: its promise spans its requests).
    Whole(&'a Lowered),
    Inst(&'a Lowered, usize),
    /// Access-pattern DMA `k` of the operation.
    Ap(&'a Lowered, usize),
}

/// The items of a program's steps in order, with the ones put back first.
struct Work<'a, I> {
    steps: I,
    next_step: usize,
    front: VecDeque<(usize, Item<'a>)>,
}

impl<'a, I: Iterator<Item = Step<'a>>> Work<'a, I> {
    fn next(&mut self) -> Option<(usize, Item<'a>)> {
        if let Some(item) = self.front.pop_front() {
            return Some(item);
        }
        let step = self.next_step;
        self.next_step += 1;
        match self.steps.next()? {
            Step::Write { addr, bytes } => Some((step, Item::Write { addr, bytes })),
            Step::Run(lowered) if lowered.split.is_some() => Some((step, Item::Whole(lowered))),
            Step::Run(lowered) => {
                let insts = (0..lowered.instructions.len()).map(|i| (step, Item::Inst(lowered, i)));
                self.front.extend(insts);
                let aps = (0..lowered.ap_dmas.len()).map(|k| (step, Item::Ap(lowered, k)));
                self.front.extend(aps);
                Some((step, Item::Registers(lowered)))
            }
        }
    }

    /// Puts `item` back: it is the next one again.
    fn put_back(&mut self, item: (usize, Item<'a>)) {
        self.front.push_front(item);
    }
}

/// Does the host writes that follow an instruction prepared beside the running replay,
/// up to the next item of another kind, while each can be done beside the running replay
/// and touches no byte the prepared one may read or write ([`dma::Validated::touches`]):
/// the prepared replay then gives the same memory with the writes done before it or
/// after it. The first that cannot is put back, to be done in order.
fn writes_ahead<'a, I: Iterator<Item = Step<'a>>>(
    b: &mut Beside<'_>,
    work: &mut Work<'a, I>,
    prepared: &Prepared,
) {
    while let Some((step, item)) = work.next() {
        let done = match item {
            Item::Write { addr, bytes } => {
                !prepared.validated.touches(addr, bytes.len() as u64)
                    && b.write(addr, bytes).unwrap_or(false)
            }
            _ => false,
        };
        if !done {
            work.put_back((step, item));
            return;
        }
    }
}

/// A prepared instruction or access-pattern DMA: its step, its index in the step's
/// operation, what it is.
struct Ready<'a> {
    step: usize,
    index: usize,
    job: Job<'a>,
    prepared: Prepared,
}

/// What a prepared item runs.
enum Job<'a> {
    Inst(&'a Instruction),
    /// An access-pattern DMA, with the destination collisions of its plain copy.
    Ap(&'a ApDma, Vec<Collision>),
}

impl Job<'_> {
    /// The error `e` of this item, number `index` of step `step`'s operation, as the steps
    /// in order report it.
    fn failed(&self, step: usize, index: usize, e: Error) -> Error {
        match self {
            Job::Inst(inst) => at_instruction(step, index, inst, e),
            Job::Ap(dma, _) => at_step(step, ap_dma_stopped(index, dma, dma.in_terms(e))),
        }
    }
}

/// The error of instruction `index` of step `step`, as the steps in order report it.
fn at_instruction(step: usize, index: usize, inst: &Instruction, e: Error) -> Error {
    let stopped = Error::Stopped {
        index,
        opcode: inst.opcode().code(),
        source: Box::new(e),
    };
    at_step(step, stopped)
}

/// The opcode whose route an instruction takes: 0xca runs as the raw 0x79.
fn raw(opcode: Opcode) -> Opcode {
    match opcode {
        Opcode::PseudoEmbeddingUpdate => Opcode::EmbeddingUpdate,
        other => other,
    }
}

/// The error `e` of step `step`.
fn at_step(step: usize, e: Error) -> Error {
    Error::ProgramStep {
        step,
        source: Box::new(e),
    }
}

/// What prepares instructions: the runtime's DGE route, core state and engine, and the
/// generation and mechanism that route each opcode.
struct Preparer<'r> {
    dge: &'r mut DgeRoute,
    state: &'r mut CoreState,
    engine: &'r Engine,
    routes: (Generation, Mechanism),
}

impl Preparer<'_> {
    /// [`DgeRoute::prepare`] for an instruction the runtime routes to the DGE.
    fn prepare(&mut self, fabric: &Fabric, inst: &Instruction) -> Result<Option<Prepared>, Error> {
        let (generation, mechanism) = self.routes;
        match route(generation, mechanism, raw(inst.opcode())).0 == RouteTaken::Dge {
            true => self.dge.prepare(fabric, self.state, inst, self.engine),
            false => Ok(None),
        }
    }

    /// [`DgeRoute::prepare_ap_dma`] where the mechanism runs `dma` on the DGE, after the
    /// plain copy's collisions ([`Runtime::run_ap_dma`]'s order), with them.
    fn prepare_ap<'a>(
        &mut self,
        fabric: &Fabric,
        dma: &'a ApDma,
    ) -> Result<Option<Ready<'a>>, Error> {
        if !matches!(self.routes.1, Mechanism::Auto | Mechanism::Dge) {
            return Ok(None);
        }
        let collisions = dma.plain_copy_collisions(fabric)?;
        let prepared = self.dge.prepare_ap_dma(fabric, dma, self.engine)?;
        Ok(prepared.map(|prepared| Ready {
            step: 0,
            index: 0,
            job: Job::Ap(dma, collisions),
            prepared,
        }))
    }

    /// Item `item` (number `step`) prepared, if it is an instruction or an access-pattern
    /// DMA this runtime runs on the DGE in one replay.
    fn prepare_item<'a>(
        &mut self,
        fabric: &Fabric,
        step: usize,
        item: Item<'a>,
    ) -> Result<Option<Ready<'a>>, Error> {
        // the checks Runtime::step and Runtime::run_ap_dma make first
        let generation = super::check_generation(self.routes.0, fabric);
        let ready = match item {
            Item::Inst(lowered, index) => {
                let inst = &lowered.instructions[index];
                let failed = |e| at_instruction(step, index, inst, e);
                generation.map_err(failed)?;
                let prepared = self.prepare(fabric, inst).map_err(failed)?;
                prepared.map(|prepared| Ready {
                    step,
                    index,
                    job: Job::Inst(inst),
                    prepared,
                })
            }
            Item::Ap(lowered, k) => {
                let dma = &lowered.ap_dmas[k];
                let index = lowered.instructions.len() + k;
                let failed = |e| Job::Ap(dma, Vec::new()).failed(step, index, e);
                generation.map_err(failed)?;
                let made = dma.dge.check_generation("dma_copy", self.routes.0);
                made.map_err(failed)?;
                let ready = self.prepare_ap(fabric, dma).map_err(failed)?;
                ready.map(|r| Ready { step, index, ..r })
            }
            _ => None,
        };
        Ok(ready)
    }

    /// The items done beside a running replay, up to the next instruction prepared
    /// (`None`: the program's end, or an item that must wait, put back).
    fn beside<'a, I: Iterator<Item = Step<'a>>>(
        &mut self,
        b: &mut Beside<'_>,
        work: &mut Work<'a, I>,
    ) -> Option<Ready<'a>> {
        while let Some((step, item)) = work.next() {
            let done = match item {
                Item::Write { addr, bytes } => b.write(addr, bytes).unwrap_or(false),
                Item::Registers(lowered) => lowered.apply_registers(&mut self.state.regs).is_ok(),
                Item::Whole(_) => false,
                Item::Inst(..) | Item::Ap(..) => match self.prepare_item(b.fabric(), step, item) {
                    Ok(Some(ready)) if !b.read_the_replay() => {
                        writes_ahead(b, work, &ready.prepared);
                        return Some(ready);
                    }
                    _ => false,
                },
            };
            if !done {
                work.put_back((step, item));
                return None;
            }
        }
        None
    }
}

impl Runtime {
    /// Runs `steps` in order with the memory, report and error of running them one after
    /// another ([`Fabric::write`] for a write, [`Runtime::run_lowered`] for an operation),
    /// preparing each DMA-level instruction while the replay before it runs (see the
    /// module docs). The report lists every instruction of every operation in order. The
    /// first failing step stops the program with [`Error::ProgramStep`] (naming the step,
    /// and, inside an operation, the instruction as [`Error::Stopped`]); the steps before
    /// it keep their effects, the failing one has none. (A replay that fails while it runs,
    /// which its validation rules out but for a panic, fails its step after the host
    /// writes of the steps after it that went in beside it.)
    pub fn run_program<'a>(
        &mut self,
        fabric: &mut Fabric,
        steps: impl IntoIterator<Item = Step<'a>>,
    ) -> Result<RunReport, Error> {
        let mut work = Work {
            steps: steps.into_iter(),
            next_step: 0,
            front: VecDeque::new(),
        };
        let mut report = RunReport::new(self.generation, self.mechanism);
        let mut ready = None;
        loop {
            if ready.is_none() {
                ready = self.advance(fabric, &mut work, &mut report)?;
            }
            let Some(now) = ready.take() else {
                return Ok(report);
            };
            let (step, next) = self.run_prepared(fabric, &mut work, now)?;
            report.push(step);
            ready = next;
        }
    }

    /// Does the next items in order, on the fabric, up to the next instruction prepared
    /// (`None` at the program's end).
    fn advance<'a, I: Iterator<Item = Step<'a>>>(
        &mut self,
        fabric: &mut Fabric,
        work: &mut Work<'a, I>,
        report: &mut RunReport,
    ) -> Result<Option<Ready<'a>>, Error> {
        while let Some((step, item)) = work.next() {
            match item {
                Item::Write { addr, bytes } => fabric
                    .write(addr, bytes)
                    .map_err(|e| at_step(step, e.into()))?,
                Item::Registers(lowered) => lowered
                    .apply_registers(&mut self.state.regs)
                    .map_err(|e| at_step(step, e))?,
                Item::Whole(lowered) => {
                    let ran = self.run_lowered(fabric, lowered);
                    let ran = ran.map_err(|e| at_step(step, e))?;
                    ran.steps.into_iter().for_each(|s| report.push(s));
                }
                Item::Inst(lowered, index) => {
                    if let Some(ready) = self.prepare(fabric, step, item)? {
                        return Ok(Some(ready));
                    }
                    let inst = &lowered.instructions[index];
                    let failed = |e| at_instruction(step, index, inst, e);
                    report.push(self.step(fabric, inst).map_err(failed)?);
                }
                Item::Ap(lowered, k) => {
                    if let Some(ready) = self.prepare(fabric, step, item)? {
                        return Ok(Some(ready));
                    }
                    let dma = &lowered.ap_dmas[k];
                    let index = lowered.instructions.len() + k;
                    let failed = |e| at_step(step, ap_dma_stopped(index, dma, e));
                    report.push(self.run_ap_dma(fabric, dma).map_err(failed)?);
                }
            }
        }
        Ok(None)
    }

    /// [`Preparer::prepare_item`] on this runtime's parts (`None` without an engine).
    fn prepare<'a>(
        &mut self,
        fabric: &Fabric,
        step: usize,
        item: Item<'a>,
    ) -> Result<Option<Ready<'a>>, Error> {
        self.with_preparer(|p| p.map_or(Ok(None), |p| p.prepare_item(fabric, step, item)))
    }

    /// Calls `f` with a [`Preparer`] of this runtime (`None` without an engine).
    fn with_preparer<R>(&mut self, f: impl FnOnce(Option<&mut Preparer<'_>>) -> R) -> R {
        let Some(engine) = self.engine.as_ref() else {
            return f(None);
        };
        let mut p = Preparer {
            dge: &mut self.dge,
            state: &mut self.state,
            engine,
            routes: (self.generation, self.mechanism),
        };
        f(Some(&mut p))
    }

    /// Runs a prepared instruction, preparing the next beside its replay.
    fn run_prepared<'a, I: Iterator<Item = Step<'a>>>(
        &mut self,
        fabric: &mut Fabric,
        work: &mut Work<'a, I>,
        now: Ready<'a>,
    ) -> Result<(StepReport, Option<Ready<'a>>), Error> {
        let failed = |e| now.job.failed(now.step, now.index, e);
        let ran = self.with_preparer(|p| match p {
            Some(p) => {
                let validated = &now.prepared.validated;
                Ok(p.engine
                    .run_beside(fabric, validated, |b| p.beside(b, work))?)
            }
            None => Err(no_engine()),
        });
        let (replay, next) = ran.map_err(failed)?;
        let engine = self.engine.as_ref().ok_or_else(|| failed(no_engine()))?;
        let out = self.dge.finish(engine, now.prepared, replay);
        let (outcome, cost) = self.dge_cost(out);
        let step = match now.job {
            Job::Inst(inst) => {
                let step = self.step_report(raw(inst.opcode()), outcome, cost);
                match inst {
                    Instruction::PseudoEmbeddingUpdate(e) => expanded(e, step),
                    _ => step,
                }
            }
            Job::Ap(dma, collisions) => self.ap_step_report(dma, outcome, cost, &collisions),
        };
        Ok((step, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nki::{self, DmaOptions, OobMode, Tensor};
    use crate::runtime::Mechanism;
    use dma::addr::SBUF_BASE;
    use dma::{ComputeOp, Dtype, EngineConfig, Generation};
    use proptest::prelude::*;

    const GEN: Generation = Generation::Cayman;
    /// A `ROWS x COLS` f32 table at 0 (one page), rows to scatter from at `SRC`, gathered
    /// rows to `OUT`, indices staged at SBUF partition 0.
    const ROWS: u32 = 512;
    const COLS: u32 = 32;
    const SRC: u64 = 2 << 20;
    const OUT: u64 = 1 << 20;
    /// Row indices (u32, in range) that DMA_MEMCPY stages.
    const INDICES: u64 = 3 << 20;

    /// One operation of a test program.
    #[derive(Clone, Debug)]
    enum Op {
        /// Stage `indices` and gather their rows to row `at` of OUT.
        Gather {
            indices: Vec<u32>,
            at: u32,
            skip: bool,
        },
        /// Stage `indices` and add SRC's first rows into the table's rows at them.
        ScatterAdd { indices: Vec<u32> },
        /// Host bytes at `addr`.
        Write { addr: u64, bytes: Vec<u8> },
        /// Copy `rows` table rows to OUT row `at` (DMA_MEMCPY).
        Copy { rows: u32, at: u32 },
        /// Copy `n` indices from INDICES element `from` to the staged indices (a replay
        /// writing what the next instruction's generation reads).
        StageByCopy { n: u32, from: u32 },
        /// Gather the `n` indices staged (by whatever wrote them last) to OUT row `at`.
        GatherStaged { n: u32, at: u32 },
        /// Stage `indices` and data rows in SBUF partition `part` (1 or 2), and add the
        /// rows into the table's rows at the indices (0xca; an index past the table is
        /// skipped).
        Embed { indices: Vec<u32>, part: u64 },
        /// NKI's tile idiom, an access-pattern DMA: stage `indices` as an `(N, 1)` i32
        /// tile (one per partition, at TILE_IDX), and gather their table rows into the
        /// `[N, COLS]` SBUF tile at TILE (its pages hold the index tile too) or to OUT.
        TileGather {
            indices: Vec<i32>,
            into_tile: bool,
            skip: bool,
        },
        /// Store the first `n` rows of the SBUF tile to OUT row `at` (a direct
        /// access-pattern DMA).
        TileStore { n: u32, at: u32 },
        /// Copy `n` indices from INDICES element `from` into the `(n, 1)` index tile (a
        /// replay writing what the next tile gather's generation reads).
        StageTileByCopy { n: u32, from: u32 },
        /// Gather the rows of the `n` indices the index tile holds (staged by whatever
        /// wrote them last) into the SBUF tile.
        TileGatherStaged { n: u32 },
    }

    /// The byte offsets, in every SBUF partition, of the tile ops' index tile and tile.
    const TILE_IDX: u64 = 0x2000;
    const TILE: u64 = 0x3000;

    fn op() -> impl Strategy<Value = Op> {
        // in range, but for an index past the table in one vector of ten or so
        let bad = prop_oneof![9 => Just(None), 1 => (0..160usize, ROWS..ROWS + 40).prop_map(Some)];
        let indices = (proptest::collection::vec(0..ROWS, 1..160), bad).prop_map(|(mut v, bad)| {
            if let Some((at, index)) = bad {
                let n = v.len();
                v[at % n] = index;
            }
            v
        });
        // the table (read by gathers, written by scatters), OUT (written by gathers),
        // SBUF partition 0 (the staged indices), SRC, and a page nothing has touched
        let addr = prop_oneof![
            0..u64::from(ROWS * COLS * 4),
            OUT..OUT + 200_000,
            SBUF_BASE..SBUF_BASE + 4096,
            SRC..SRC + 4096,
            (8 << 20)..(8 << 20) + 4096u64,
        ];
        prop_oneof![
            4 => (indices.clone(), 0..1000u32, any::<bool>())
                .prop_map(|(indices, at, skip)| Op::Gather { indices, at, skip }),
            2 => indices.prop_map(|indices| Op::ScatterAdd { indices }),
            2 => (addr, proptest::collection::vec(any::<u8>(), 1..400))
                .prop_map(|(addr, bytes)| Op::Write { addr, bytes }),
            1 => (1..ROWS, 0..1000u32).prop_map(|(rows, at)| Op::Copy { rows, at }),
            1 => (1..160u32, 0..512u32).prop_map(|(n, from)| Op::StageByCopy { n, from }),
            1 => (1..160u32, 0..1000u32).prop_map(|(n, at)| Op::GatherStaged { n, at }),
            2 => (proptest::collection::vec(0..ROWS + 8, 1..100), 1..3u64)
                .prop_map(|(indices, part)| Op::Embed { indices, part }),
            2 => (proptest::collection::vec(-2..ROWS as i32 + 4, 1..129), any::<bool>(), any::<bool>())
                .prop_map(|(indices, into_tile, skip)| Op::TileGather { indices, into_tile, skip }),
            1 => (1..129u32, 0..1000u32).prop_map(|(n, at)| Op::TileStore { n, at }),
            1 => (1..129u32, 0..512u32).prop_map(|(n, from)| Op::StageTileByCopy { n, from }),
            1 => (1..129u32).prop_map(|n| Op::TileGatherStaged { n }),
        ]
    }

    /// The data of a test program: per operation, the bytes to write first and the
    /// lowered operation (if any, or its lowering error).
    type Data = Vec<(Vec<(u64, Vec<u8>)>, Option<Result<Lowered, Error>>)>;

    fn lower(ops: &[Op]) -> Data {
        let table = Tensor::new(FabricAddr(0), [ROWS, COLS], Dtype::F32);
        let staged = |indices: &[u32]| {
            let bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
            let tensor = Tensor::vector(FabricAddr(SBUF_BASE), indices.len() as u32, Dtype::U32);
            (vec![(SBUF_BASE, bytes)], tensor)
        };
        let rows_at =
            |addr: u64, n: usize| Tensor::new(FabricAddr(addr), [n as u32, COLS], Dtype::F32);
        let row = u64::from(COLS) * 4;
        ops.iter()
            .map(|op| match op {
                Op::Gather { indices, at, skip } => {
                    let (write, idx) = staged(indices);
                    let dst = rows_at(OUT + u64::from(*at) * row, indices.len());
                    let oob = if *skip { OobMode::Skip } else { OobMode::Error };
                    let opts = DmaOptions {
                        oob,
                        ..DmaOptions::default()
                    };
                    (write, Some(nki::dma_gather(GEN, &table, &idx, &dst, opts)))
                }
                Op::ScatterAdd { indices } => {
                    let (write, idx) = staged(indices);
                    let opts = DmaOptions {
                        unique_indices: false,
                        compute_op: ComputeOp::Add,
                        ..DmaOptions::default()
                    };
                    let src = rows_at(SRC, indices.len());
                    (write, Some(nki::dma_scatter(GEN, &src, &idx, &table, opts)))
                }
                Op::Write { addr, bytes } => (vec![(*addr, bytes.clone())], None),
                Op::Copy { rows, at } => {
                    let pattern = |addr: u64| nki::AccessPattern {
                        addr: FabricAddr(addr).into(),
                        ap: [[COLS, *rows], [1, COLS]],
                    };
                    let dst = pattern(OUT + u64::from(*at) * row);
                    (
                        vec![],
                        Some(nki::dma_copy(
                            GEN,
                            &pattern(0),
                            &dst,
                            Dtype::F32,
                            ComputeOp::None,
                        )),
                    )
                }
                Op::StageByCopy { n, from } => {
                    let pattern = |addr: u64| nki::AccessPattern {
                        addr: FabricAddr(addr).into(),
                        ap: [[*n, 1], [1, *n]],
                    };
                    let src = pattern(INDICES + u64::from(*from) * 4);
                    let copy =
                        nki::dma_copy(GEN, &src, &pattern(SBUF_BASE), Dtype::U32, ComputeOp::None);
                    (vec![], Some(copy))
                }
                Op::GatherStaged { n, at } => {
                    let idx = Tensor::vector(FabricAddr(SBUF_BASE), *n, Dtype::U32);
                    let dst = rows_at(OUT + u64::from(*at) * row, *n as usize);
                    (
                        vec![],
                        Some(nki::dma_gather(
                            GEN,
                            &table,
                            &idx,
                            &dst,
                            DmaOptions::default(),
                        )),
                    )
                }
                Op::Embed { indices, part } => {
                    let (mut writes, idx) = staged(indices);
                    let at = SBUF_BASE + part * dma::addr::SBUF_STRIDE;
                    let rows: Vec<u8> = (0..indices.len() as u32 * COLS)
                        .flat_map(|i| (i as f32 * 0.25 + *part as f32).to_le_bytes())
                        .collect();
                    writes.push((at, rows));
                    let data = rows_at(at, indices.len());
                    let update = nki::embedding_update(GEN, &table, &idx, &data, dma::CceOp::Add);
                    (writes, Some(update))
                }
                Op::TileGather {
                    indices,
                    into_tile,
                    skip,
                } => {
                    let n = indices.len() as u64;
                    let partition = |p: u64| SBUF_BASE + p * dma::addr::SBUF_STRIDE;
                    let writes = (0..n)
                        .zip(indices)
                        .map(|(p, i)| (partition(p) + TILE_IDX, i.to_le_bytes().to_vec()))
                        .collect();
                    let idx = ap_tensor(partition(0) + TILE_IDX, vec![n, 1], Dtype::I32);
                    let dst = match into_tile {
                        true => ap_tensor(partition(0) + TILE, vec![n, COLS.into()], Dtype::F32),
                        false => ap_tensor(OUT, vec![n, COLS.into()], Dtype::F32),
                    };
                    let oob = if *skip { OobMode::Skip } else { OobMode::Error };
                    let table = ap_tensor(0, vec![ROWS.into(), COLS.into()], Dtype::F32);
                    (writes, Some(tile_copy(table, Some(idx), dst, n, oob)))
                }
                Op::StageTileByCopy { n, from } => {
                    let n = u64::from(*n);
                    let from = ap_tensor(INDICES + u64::from(*from) * 4, vec![n, 1], Dtype::I32);
                    let tile = ap_tensor(SBUF_BASE + TILE_IDX, vec![n, 1], Dtype::I32);
                    let copy = nki::dma_copy_ap(
                        "dma_copy",
                        column(from, n),
                        column(tile, n),
                        opts(OobMode::Error),
                    );
                    (vec![], Some(copy))
                }
                Op::TileGatherStaged { n } => {
                    let n = u64::from(*n);
                    let idx = ap_tensor(SBUF_BASE + TILE_IDX, vec![n, 1], Dtype::I32);
                    let tile = ap_tensor(SBUF_BASE + TILE, vec![n, COLS.into()], Dtype::F32);
                    let table = ap_tensor(0, vec![ROWS.into(), COLS.into()], Dtype::F32);
                    (
                        vec![],
                        Some(tile_copy(table, Some(idx), tile, n, OobMode::Error)),
                    )
                }
                Op::TileStore { n, at } => {
                    let n = u64::from(*n);
                    let tile = ap_tensor(SBUF_BASE + TILE, vec![n, COLS.into()], Dtype::F32);
                    let out =
                        ap_tensor(OUT + u64::from(*at) * row, vec![n, COLS.into()], Dtype::F32);
                    (vec![], Some(tile_copy(tile, None, out, n, OobMode::Error)))
                }
            })
            .collect()
    }

    /// A tensor of the tile ops at fabric address `at` (SBUF from SBUF_BASE on).
    fn ap_tensor(at: u64, shape: Vec<u64>, dtype: Dtype) -> nki::ApTensor {
        let space = match at >= SBUF_BASE {
            true => dma::Space::Sbuf,
            false => dma::Space::Hbm,
        };
        nki::ApTensor {
            name: format!("t{at:x}"),
            start: FabricAddr(at),
            space,
            shape,
            dtype,
        }
    }

    /// `n` rows of `src` (each picked by its index tile, if any) copied to `dst`'s rows.
    fn tile_copy(
        src: nki::ApTensor,
        index: Option<nki::ApTensor>,
        dst: nki::ApTensor,
        n: u64,
        oob: OobMode,
    ) -> Result<Lowered, Error> {
        let rows = |tensor, vector_offset| nki::ApSide {
            tensor,
            offset: 0,
            dims: [(i64::from(COLS), n as u32), (1, COLS)]
                .into_iter()
                .map(|(step, num)| nki::ApDim { step, num })
                .collect(),
            indirect_dim: 0,
            vector_offset,
            scalar_offset: None,
        };
        let index = index.map(nki::IndexAp::whole);
        nki::dma_copy_ap("dma_copy", rows(src, index), rows(dst, None), opts(oob))
    }

    /// The `n` elements of an `(n, 1)` tensor, one per row (partition).
    fn column(tensor: nki::ApTensor, n: u64) -> nki::ApSide {
        nki::ApSide {
            tensor,
            offset: 0,
            dims: [nki::ApDim {
                step: 1,
                num: n as u32,
            }]
            .into_iter()
            .collect(),
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        }
    }

    /// A plain copy's options under `oob`.
    fn opts(oob: OobMode) -> nki::ApOptions {
        nki::ApOptions {
            op: ComputeOp::None,
            oob,
            unique_indices: true,
            dge: nki::DgeMode::Chosen,
        }
    }

    /// The steps of `data` (an operation that failed to lower is left out).
    fn steps(data: &Data) -> Vec<Step<'_>> {
        let mut steps = Vec::new();
        for (write, lowered) in data {
            for (addr, bytes) in write {
                steps.push(Step::Write {
                    addr: FabricAddr(*addr),
                    bytes,
                });
            }
            if let Some(Ok(lowered)) = lowered {
                steps.push(Step::Run(lowered));
            }
        }
        steps
    }

    fn runtime() -> Runtime {
        let config = EngineConfig {
            workers: 2,
            ..EngineConfig::default()
        };
        Runtime::with_engine_config(GEN, Mechanism::Auto, config).unwrap()
    }

    /// A fabric with the table, SRC's rows and SBUF partition 0 written.
    fn fabric() -> Fabric {
        let mut f = Fabric::new(GEN);
        let ramp = |n: u32, k: u32| -> Vec<u8> {
            (0..n)
                .flat_map(|i| ((i * k % 977) as f32 * 0.5).to_le_bytes())
                .collect()
        };
        f.write(FabricAddr(0), &ramp(ROWS * COLS, 7)).unwrap();
        f.write(FabricAddr(SRC), &ramp(160 * COLS, 3)).unwrap();
        let indices: Vec<u8> = (0..1024u32)
            .flat_map(|i| (i * 37 % ROWS).to_le_bytes())
            .collect();
        f.write(FabricAddr(INDICES), &indices).unwrap();
        f.write(FabricAddr(SBUF_BASE), &[0; 1024]).unwrap();
        f
    }

    /// The steps one after another: the reports of every instruction, or the failing
    /// step and its error.
    fn in_order(f: &mut Fabric, steps: &[Step<'_>]) -> Result<Vec<StepReport>, (usize, String)> {
        in_order_on(&mut runtime(), f, steps)
    }

    /// [`in_order`] on `rt`.
    fn in_order_on(
        rt: &mut Runtime,
        f: &mut Fabric,
        steps: &[Step<'_>],
    ) -> Result<Vec<StepReport>, (usize, String)> {
        let mut reports = Vec::new();
        for (k, step) in steps.iter().enumerate() {
            let done = match step {
                Step::Write { addr, bytes } => f.write(*addr, bytes).map_err(Error::from),
                Step::Run(lowered) => rt.run_lowered(f, lowered).map(|r| reports.extend(r.steps)),
            };
            done.map_err(|e| (k, e.to_string()))?;
        }
        Ok(reports)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// A program equals its steps run one after another: memory, reports, errors.
        #[test]
        fn a_program_equals_its_steps_in_order(ops in proptest::collection::vec(op(), 1..14)) {
            let data = lower(&ops);
            let steps = steps(&data);
            let (mut want, mut got) = (fabric(), fabric());
            let (mut one_by_one, mut program) = (runtime(), runtime());
            one_by_one.record_queues(true);
            program.record_queues(true);
            let expected = in_order_on(&mut one_by_one, &mut want, &steps);
            let ran = program.run_program(&mut got, steps.iter().copied());
            // the descriptors a program replays (as blocks where it can) are the ones
            // its steps replay one by one (`gen` writes these)
            prop_assert_eq!(program.take_recorded(), one_by_one.take_recorded());
            match (ran, expected) {
                (Ok(report), Ok(reports)) => prop_assert_eq!(report.steps, reports),
                (Err(Error::ProgramStep { step, source }), Err((k, e))) => {
                    prop_assert_eq!((step, source.to_string()), (k, e));
                }
                (ran, expected) => prop_assert!(false, "{ran:?} against {expected:?}"),
            }
            prop_assert_eq!(got.first_difference(&want), None);
        }
    }

    /// Runs `ops` as a program and one step after another: the same reports and memory,
    /// and no error.
    fn runs_as_in_order(ops: &[Op]) {
        let data = lower(ops);
        let steps = steps(&data);
        let (mut want, mut got) = (fabric(), fabric());
        let reports = in_order(&mut want, &steps).unwrap();
        let report = runtime()
            .run_program(&mut got, steps.iter().copied())
            .unwrap();
        assert_eq!(report.steps, reports);
        assert_eq!(got.first_difference(&want), None);
    }

    #[test]
    fn operations_split_at_4096_indices_run_whole_as_in_order() {
        // a gather of 4100 rows (two instructions) with an index past the table at
        // position 4098: skipped at the op's position, or the op's error
        let long = |skip| {
            let mut indices: Vec<u32> = (0..4100).map(|i| i % ROWS).collect();
            indices[4098] = ROWS + 1;
            Op::Gather {
                indices,
                at: 0,
                skip,
            }
        };
        let short = Op::Gather {
            indices: (0..100).rev().collect(),
            at: 10,
            skip: false,
        };
        runs_as_in_order(&[short.clone(), long(true), short.clone()]);
        let data = lower(&[short, long(false)]);
        let steps = steps(&data);
        let (mut want, mut got) = (fabric(), fabric());
        let expected = in_order(&mut want, &steps).unwrap_err();
        assert!(expected.1.contains("at position 4098"), "{expected:?}");
        let ran = runtime().run_program(&mut got, steps.iter().copied());
        let Err(Error::ProgramStep { step, source }) = ran else {
            panic!("{ran:?}");
        };
        assert_eq!((step, source.to_string()), expected);
        assert_eq!(got.first_difference(&want), None);
    }

    #[test]
    fn access_pattern_dmas_run_beside_as_in_order() {
        // NKI's tile loop: rows into an SBUF tile by an (N, 1) i32 tile (its pages hold
        // the tile), the tile out; then a tile gather whose index tile the replay before
        // it writes, prepared beside that replay (reading the index tile before it, all in
        // range) and so done again after it
        let tile = |k: i32| Op::TileGather {
            indices: (0..128).map(|p| (p * 7 + k) % 600 - 40).collect(),
            into_tile: true,
            skip: true,
        };
        let mut ops = Vec::new();
        for k in 0..4 {
            ops.extend([
                tile(k),
                Op::TileStore {
                    n: 128,
                    at: 128 * k as u32,
                },
            ]);
        }
        ops.extend([
            Op::TileGather {
                indices: (0..128).rev().collect(),
                into_tile: false,
                skip: false,
            },
            Op::StageTileByCopy { n: 100, from: 3 },
            Op::TileGatherStaged { n: 100 },
            Op::TileStore { n: 100, at: 600 },
        ]);
        runs_as_in_order(&ops);
    }

    #[test]
    fn writes_beside_a_replay_wait_where_it_reads_or_writes() {
        // gathers of the whole table, then writes into the table (read by the gather),
        // OUT (written by it), a page with no storage and SBUF (free): each lands after
        // the gather in the memory, as in order; and a gather whose indices the replay
        // before it writes
        let all: Vec<u32> = (0..ROWS).rev().collect();
        let ops = [
            Op::Gather {
                indices: all[..100].to_vec(),
                at: 0,
                skip: false,
            },
            Op::Write {
                addr: 64,
                bytes: vec![0xee; 256],
            },
            Op::Write {
                addr: OUT + 128,
                bytes: vec![0xdd; 64],
            },
            Op::Write {
                addr: 9 << 20,
                bytes: vec![0xcc; 8],
            },
            Op::Gather {
                indices: all[100..300].to_vec(),
                at: 100,
                skip: false,
            },
            Op::Write {
                addr: SBUF_BASE + 8192,
                bytes: vec![0xbb; 16],
            },
            Op::ScatterAdd {
                indices: vec![3, 3, 5],
            },
            Op::Gather {
                indices: vec![3, 5, 0],
                at: 400,
                skip: false,
            },
            // a replay writes the indices the next gather's generation reads
            Op::StageByCopy { n: 50, from: 7 },
            Op::GatherStaged { n: 50, at: 600 },
        ];
        runs_as_in_order(&ops);
    }

    #[test]
    fn writes_after_a_prepared_instruction_go_ahead_only_where_it_does_not_reach() {
        // while the gather replays, the scatter-add is prepared; the writes after it into
        // SRC (which the scatter-add reads) must wait for it, and so must the one after
        // them; the writes after the next gather, to pages neither replay reaches, go in
        // before that gather runs
        let gather = |indices: Vec<u32>, at| Op::Gather {
            indices,
            at,
            skip: false,
        };
        let write = |addr, byte, n| Op::Write {
            addr,
            bytes: vec![byte; n],
        };
        let ops = [
            gather((0..100).collect(), 0),
            Op::ScatterAdd {
                indices: vec![7, 9, 7],
            },
            write(SRC + 4, 0x41, 200),
            write(OUT + 150_000, 0x42, 64),
            gather(vec![7, 9], 200),
            write(SBUF_BASE + 8192, 0x43, 64),
            write(OUT + 190_000, 0x44, 64),
            gather(vec![1], 300),
        ];
        runs_as_in_order(&ops);
    }

    #[test]
    fn a_fabric_of_another_generation_fails_the_first_instruction_as_in_order() {
        let data = lower(&[Op::Gather {
            indices: vec![1, 2],
            at: 0,
            skip: false,
        }]);
        let steps = steps(&data);
        let (mut got, mut want) = (
            Fabric::new(Generation::Sunda),
            Fabric::new(Generation::Sunda),
        );
        let e = runtime()
            .run_program(&mut got, steps.iter().copied())
            .unwrap_err();
        assert_eq!(in_order(&mut want, &steps), Err((1, inner(&e))));
        // the staging write before it went in
        assert_eq!(got.first_difference(&want), None);
        assert!(got.allocated_bytes() > 0);
    }

    /// The error inside a [`Error::ProgramStep`].
    fn inner(e: &Error) -> String {
        match e {
            Error::ProgramStep { source, .. } => source.to_string(),
            e => panic!("not a step's error: {e}"),
        }
    }

    #[test]
    fn a_failing_step_stops_the_program_with_its_index() {
        let ops = [
            Op::Gather {
                indices: vec![1, 2],
                at: 0,
                skip: false,
            },
            Op::Gather {
                indices: vec![1, ROWS + 7],
                at: 2,
                skip: false,
            },
            Op::Write {
                addr: OUT,
                bytes: vec![1; 4],
            },
        ];
        let data = lower(&ops);
        let steps = steps(&data);
        let mut got = fabric();
        let e = runtime()
            .run_program(&mut got, steps.iter().copied())
            .unwrap_err();
        // the second gather is step 3 (each gather stages its indices first)
        let Error::ProgramStep { step: 3, source } = &e else {
            panic!("{e}")
        };
        assert!(matches!(**source, Error::Stopped { index: 0, .. }), "{e}");
        assert!(e.to_string().contains(&format!("{}", ROWS + 7)), "{e}");
        let mut want = fabric();
        assert!(in_order(&mut want, &steps).is_err());
        assert_eq!(
            got.first_difference(&want),
            None,
            "the failing gather wrote nothing"
        );
    }
}
