//! # The DGE route: ISA instructions lowered to DGE requests, replayed by the DMA engine
//!
//! On cayman, mariana and maverick the indirection instructions are served by the
//! descriptor-generation engine. [`DgeRoute::execute`] validates an instruction for the
//! fabric's generation, lowers it into [`dge::Request`]s (one file per datapath), generates
//! every request's descriptors with [`dge::generate()`] (all checks: patterns, indices,
//! bounds, duplicates) and only then replays them on the async DMA engine
//! ([`dma::Engine::run`]). It returns the [`Outcome`] every route reports, the engine's
//! [`ReplayReport`]s and the number of DGE instructions issued ([`DgeOutcome`]).
//!
//! - `dma_indirect`: DMA_INDIRECT 0xbb, one `Kind::Indirect` request;
//! - `direct2d`: DMA_MEMCPY 0xb8, one `Kind::Direct2d` request;
//! - `embedding`: EMBEDDING_UPDATE 0x79 / PSEUDO_EMBEDDING_UPDATE 0xca, one request with
//!   the destination indirection on the table rows;
//! - `gather`: POOL_BUFFER_LOAD 0x67 (records the window's SBUF source) and GATHER 0x68,
//!   one request per active channel;
//! - `indirect_copy`: INDIRECT_COPY 0xe7, one request per core of 16 partitions;
//! - `ap_dma`: an access-pattern DMA ([`crate::nki::ApDma`]), one request.
//!
//! # Semantics kept from the reference (the module docs of `crate::reference`)
//!
//! - DMA instructions read their index tensors first, then move rows in order, each row
//!   reading its source when it moves: their requests use the DGE's sequential element
//!   order with the row as the unit, so a request that reads rows it writes is replayed in
//!   phases that keep the loop's result. Errors are the first failing position, src side
//!   before dst side, as the reference names them (`Error::IndexOutOfBounds`,
//!   `Error::IndexAddress`, `Error::DuplicateDestination`).
//! - POOL instructions read every input before writing. Their requests are generated
//!   against the fabric as it is before the instruction, and replayed together when no
//!   request reads or writes bytes another writes; when one only writes bytes an earlier
//!   one read, they replay one after another. A request that reads bytes its own or an
//!   earlier request writes is rejected (`dge::Error::SourceOverlapsDestination`): the
//!   DGE has no staging buffer, so the reference's reads-first result is out of reach.
//! - The DGE has no Pool_Buffer. POOL_BUFFER_LOAD keeps the [`CoreState`] windows exactly
//!   as the reference does (so a stream mixing routes sees the same state) and records
//!   where each window came from; GATHER then reads the window from SBUF. A window
//!   overwritten between its LOAD and the GATHER is refused (`Error::DgeWindowOverwritten`:
//!   the reference reads the copy taken at LOAD); a window loaded by another route is
//!   refused (`Error::DgeWindowUnrecorded`).
//! - [`by_design`] tells these refusals (and the row step past 32 bits, and a non-affine
//!   window) from errors every route shares.
//!
//! # Queues
//!
//! The instruction's `eng_mask` selects the queues; queues beyond the engine's
//! [`dma::EngineConfig::queues`] are folded onto the engine's (the memory result does not
//! depend on the queue set).
//!
//! # Fail closed
//!
//! Every request is generated, and every cross-request hazard checked, before the first
//! replay; the engine validates each replay before writing. An instruction that fails
//! leaves the fabric and the [`CoreState`] unchanged.

mod ap_dma;
pub(crate) use ap_dma::check_request as check_ap_request;
mod direct2d;
mod dma_indirect;
mod embedding;
mod gather;
mod indirect_copy;
#[cfg(test)]
mod test_support;

use dge::generate::{generate_block, generate_into, Generated};
use dge::runs::Hull;
use dge::{AccessPattern, ByteRanges, Request};
use dma::{Addr4, AddressMap, Dtype, Engine, Fabric, FabricAddr, Location, ReplayReport, Space};

use crate::core_state::{CoreState, IndexSide, Outcome, SkippedIndex, SkippedOffset};
use crate::error::Error;
use crate::isa::{Instruction, PoolBufferLoad, S4d4Gt, Tensor4d};
use crate::nki::ApDma;

use gather::WindowSources;

/// What a DGE-routed instruction did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DgeOutcome {
    /// The outcome every route reports.
    pub outcome: Outcome,
    /// The engine replays, in order (none for POOL_BUFFER_LOAD or an instruction with
    /// nothing to move).
    pub replays: Vec<ReplayReport>,
    /// DGE instructions issued (requests generated), each costing the timing model's
    /// [`dma::TimingModel::dge_instruction_ps`].
    pub dge_instructions: u32,
}

impl DgeOutcome {
    /// Descriptors executed over all replays.
    pub fn descriptors(&self) -> u64 {
        self.replays.iter().map(|r| r.summary.descriptors).sum()
    }

    /// The DGE's own time: `dge_instructions` times the per-instruction cost (`None` on a
    /// generation without a hardware DGE).
    pub fn dge_ps(&self, timing: &dma::TimingModel) -> Option<u64> {
        timing
            .dge_instruction_ps()
            .map(|ps| ps.saturating_mul(u64::from(self.dge_instructions)))
    }
}

/// The descriptor queues of every engine replay the route ran, in order (one entry per
/// replay: an instruction's phases are separate replays), as the engine received them.
pub type RecordedReplays = Vec<Vec<Vec<dma::Descriptor>>>;

/// The DGE route of one core: the Pool_Buffer window sources its POOL_BUFFER_LOADs
/// recorded, descriptor buffers reused from instruction to instruction, and, when asked
/// ([`DgeRoute::record_queues`]), a copy of every replay's queues.
#[derive(Debug, Default)]
pub struct DgeRoute {
    windows: WindowSources,
    buffers: Vec<Generated>,
    /// Descriptor buffers of prepared instructions, kept for the next ones.
    prepared_buffers: Vec<Generated>,
    recorded: Option<RecordedReplays>,
    /// While recording, the DGE requests issued, in order (`hostsim explain`).
    requests: Vec<Request>,
}

/// A DMA-level instruction (DMA_INDIRECT, INDIRECT_COPY, DMA_MEMCPY, or the embedding
/// update) of one DGE request and one replay, generated and its replay validated ahead
/// of running ([`DgeRoute::prepare`]), so that it can be prepared while the replay before
/// it runs.
#[derive(Debug)]
pub struct Prepared {
    /// The replay's queues (the request's, trailing empty queues left out).
    pub validated: dma::Validated,
    outcome: Outcome,
    /// The request's buffers, its queues lent to `validated`.
    generated: Generated,
}

impl DgeRoute {
    /// A route with no window recorded.
    pub fn new() -> DgeRoute {
        DgeRoute::default()
    }

    /// Forgets every recorded window (a fresh core); a recording in progress goes on, and
    /// the descriptor buffers stay for the next instructions (each is emptied at its use).
    pub fn reset(&mut self) {
        self.windows = WindowSources::default();
    }

    /// Starts (`true`, keeping what was recorded) or stops (`false`, dropping it)
    /// recording the queues of every replay and the requests generated.
    pub fn record_queues(&mut self, on: bool) {
        match on {
            true => self.recorded = Some(self.recorded.take().unwrap_or_default()),
            false => {
                self.recorded = None;
                self.requests.clear();
            }
        }
    }

    /// The DGE requests issued since the last call while recording, in order (a failing
    /// instruction's included: they are recorded before generation).
    pub fn take_requests(&mut self) -> Vec<Request> {
        std::mem::take(&mut self.requests)
    }

    /// The replays recorded since the last call (empty when not recording); recording
    /// stays on if it was.
    pub fn take_recorded(&mut self) -> RecordedReplays {
        self.recorded
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Runs `inst` on `fabric` through the DGE and `engine`, updating `state` (the
    /// Pool_Buffers; the registers are only read). Validates `inst` for the fabric's
    /// generation first; on any error nothing is written.
    pub fn execute(
        &mut self,
        fabric: &mut Fabric,
        state: &mut CoreState,
        inst: &Instruction,
        engine: &Engine,
    ) -> Result<DgeOutcome, Error> {
        let _span = tracing::debug_span!("dge_route", opcode = inst.opcode().code()).entered();
        inst.validate(fabric.generation())?;
        let map = *fabric.map();
        match lower(&map, state, inst) {
            Level::Load(p) => gather::pool_buffer_load(fabric, state, &mut self.windows, p),
            Level::Gather(g) => {
                let lowered = gather::lower(fabric, state, &self.windows, g)?;
                let out = self.run(fabric, engine, lowered)?;
                gather::release(state, &mut self.windows, g)?;
                Ok(out)
            }
            Level::Dma(lowered) => self.run(fabric, engine, lowered?),
        }
    }

    /// Runs the access-pattern DMA `dma` through the DGE and `engine`; on any error
    /// nothing is written.
    pub fn execute_ap_dma(
        &mut self,
        fabric: &mut Fabric,
        dma: &ApDma,
        engine: &Engine,
    ) -> Result<DgeOutcome, Error> {
        let lowered = ap_dma::lower(fabric, dma)?;
        self.run(fabric, engine, lowered)
    }

    /// Generates every request of `lowered` (errors mapped to the reference's), checks the
    /// cross-request hazards, replays, and reports.
    fn run(
        &mut self,
        fabric: &mut Fabric,
        engine: &Engine,
        mut lowered: Lowered,
    ) -> Result<DgeOutcome, Error> {
        let n = lowered.requests.len();
        if self.buffers.len() < n {
            self.buffers.resize_with(n, Generated::default);
        }
        lowered.fit_masks(engine);
        if self.recorded.is_some() {
            self.requests.extend_from_slice(&lowered.requests);
        }
        for (k, out) in self.buffers[..n].iter_mut().enumerate() {
            let made = generate_into(fabric, &lowered.requests[k], out);
            #[cfg(test)]
            let made = plant::skip_at_bound(fabric, &mut lowered.requests[k], out, made);
            made.map_err(|e| lowered.map_error(fabric, &lowered.requests[k], e))?;
        }
        let generated = &self.buffers[..n];
        let replays = replay(fabric, engine, generated, self.recorded.as_mut())?;
        Ok(DgeOutcome {
            outcome: lowered.outcome(generated),
            replays,
            dge_instructions: n as u32,
        })
    }
}

/// Planted bugs for the mutation tests: each makes this route wrong in one way, on the
/// thread that sets it, so that a test can show its checker catches it.
#[cfg(test)]
pub(crate) mod plant {
    use std::cell::Cell;

    use dge::generate::{generate_into, Generated};
    use dge::indirection::OobPolicy;
    use dge::Request;
    use dma::Fabric;

    thread_local! {
        static SKIP_AT_BOUND: Cell<bool> = const { Cell::new(false) };
    }

    /// Plants (or removes) "an index equal to its bound is skipped, not an error".
    pub fn set_skip_at_bound(on: bool) {
        SKIP_AT_BOUND.with(|c| c.set(on));
    }

    /// With the plant: a hard OOB error at an index equal to its bound becomes a soft
    /// skip (the request generated again with both sides skipping).
    pub fn skip_at_bound(
        fabric: &Fabric,
        req: &mut Request,
        out: &mut Generated,
        made: Result<(), dge::Error>,
    ) -> Result<(), dge::Error> {
        let at_bound = matches!(made, Err(dge::Error::IndexOutOfBounds { value, bound, .. }) if u64::from(value) == bound);
        if !(SKIP_AT_BOUND.with(Cell::get) && at_bound) {
            return made;
        }
        for ind in [&mut req.src_indirection, &mut req.dst_indirection]
            .into_iter()
            .flatten()
        {
            ind.policy = OobPolicy::SoftSkip;
        }
        generate_into(fabric, req, out)
    }
}

impl DgeRoute {
    /// Generates `inst` on `fabric` (read only) and validates its replay on `engine`,
    /// without running it: `Ok(None)` for an instruction that is not a DMA-level one of
    /// one request and one replay (run it with [`DgeRoute::execute`]). The same checks
    /// and errors as [`DgeRoute::execute`], in the same order; nothing is written.
    pub fn prepare(
        &mut self,
        fabric: &Fabric,
        state: &CoreState,
        inst: &Instruction,
        engine: &Engine,
    ) -> Result<Option<Prepared>, Error> {
        inst.validate(fabric.generation())?;
        let Level::Dma(lowered) = lower(fabric.map(), state, inst) else {
            return Ok(None);
        };
        self.prepare_lowered(fabric, lowered?, engine)
    }

    /// [`DgeRoute::prepare`] for the access-pattern DMA `dma` ([`DgeRoute::execute_ap_dma`]'s
    /// checks and errors, in its order; nothing is written).
    pub fn prepare_ap_dma(
        &mut self,
        fabric: &Fabric,
        dma: &ApDma,
        engine: &Engine,
    ) -> Result<Option<Prepared>, Error> {
        let lowered = ap_dma::lower(fabric, dma)?;
        self.prepare_lowered(fabric, lowered, engine)
    }

    /// Generates `lowered` if it is one request of one replay and validates that replay.
    fn prepare_lowered(
        &mut self,
        fabric: &Fabric,
        mut lowered: Lowered,
        engine: &Engine,
    ) -> Result<Option<Prepared>, Error> {
        let [req] = &mut lowered.requests[..] else {
            return Ok(None);
        };
        let mut generated = self.prepared_buffers.pop().unwrap_or_default();
        req.eng_mask = fitted(req.eng_mask, engine);
        let made = generate_block(fabric, req, &mut generated);
        made.map_err(|e| lowered.map_error(fabric, &lowered.requests[0], e))?;
        if !generated.later_phases.is_empty() {
            self.prepared_buffers.push(generated);
            return Ok(None);
        }
        let outcome = lowered.outcome(std::slice::from_ref(&generated));
        let validated = match generated.block.take() {
            Some(block) => engine.validate_block(fabric, block)?,
            None => {
                let mut queues = std::mem::take(&mut generated.queues);
                queues.truncate(used_queues(&queues));
                engine.validate(fabric, queues)?
            }
        };
        Ok(Some(Prepared {
            validated,
            outcome,
            generated,
        }))
    }

    /// The outcome of `prepared`, run as `report` on `engine`: its queues recorded if
    /// recording, its buffers kept for the next instruction.
    pub fn finish(
        &mut self,
        engine: &Engine,
        prepared: Prepared,
        report: ReplayReport,
    ) -> DgeOutcome {
        if let Some(sink) = self.recorded.as_mut() {
            sink.push(prepared.validated.queues().into_owned());
        }
        let Prepared {
            validated,
            outcome,
            mut generated,
        } = prepared;
        let queues = engine.recycle(validated);
        if !queues.is_empty() {
            generated.queues = queues;
        }
        self.prepared_buffers.push(generated);
        DgeOutcome {
            outcome,
            replays: vec![report],
            dge_instructions: 1,
        }
    }
}

/// Whether `e` is one of the DGE route's documented refusals of an input the semantics
/// define (the other routes run it): a non-affine Pool_Buffer window, a window loaded by
/// another route or overwritten since its LOAD, a POOL instruction reading bytes it
/// writes, a row past the 32-bit indirection step.
pub fn by_design(e: &Error) -> bool {
    match e {
        Error::DgeWindowPattern { .. }
        | Error::DgeWindowUnrecorded { .. }
        | Error::DgeWindowOverwritten { .. }
        | Error::DgeRowStep { .. } => true,
        Error::Dge(d) => matches!(d, dge::Error::SourceOverlapsDestination { .. }),
        Error::Stopped { source, .. }
        | Error::OpUndone { source, .. }
        | Error::ProgramStep { source, .. } => by_design(source),
        _ => false,
    }
}

/// The DGE route's documented refusal ([`by_design`]) of `inst` that shows without a
/// fabric (a non-affine Pool_Buffer window), if any: `isa decode`'s verdict names it.
pub fn refuses(inst: &Instruction) -> Option<Error> {
    match inst {
        Instruction::PoolBufferLoad(p) => gather::window_stride(p).err(),
        _ => None,
    }
}

/// How the DGE route takes an instruction.
enum Level<'i> {
    /// A DMA-level instruction (INDIRECT_COPY, DMA_INDIRECT, the embedding update,
    /// DMA_MEMCPY), lowered to its requests.
    Dma(Result<Lowered, Error>),
    /// A GATHER, lowered through the Pool_Buffer windows.
    Gather(&'i S4d4Gt),
    /// A POOL_BUFFER_LOAD, which records a window and moves nothing yet.
    Load(&'i PoolBufferLoad),
}

/// Sorts `inst` by [`Level`], lowering a DMA-level one.
fn lower<'i>(map: &AddressMap, state: &CoreState, inst: &'i Instruction) -> Level<'i> {
    Level::Dma(match inst {
        Instruction::IndirectCopy(ic) => indirect_copy::lower(map, ic),
        Instruction::DmaIndirect(d) => dma_indirect::lower(map, &state.regs, d),
        Instruction::PseudoEmbeddingUpdate(e) => embedding::lower(map, e),
        Instruction::DmaMemcpy(d) => direct2d::lower(map, d),
        Instruction::Gather(g) => return Level::Gather(g),
        Instruction::PoolBufferLoad(p) => return Level::Load(p),
    })
}

/// `mask` within `engine`'s queues (all of them where it selects none of those).
fn fitted(mask: u16, engine: &Engine) -> u16 {
    let available = queue_mask(engine.config().queues);
    match mask & available {
        0 => available,
        m => m,
    }
}

/// The queues up to the last one with a descriptor (at least one): what a replay runs.
fn used_queues(queues: &[Vec<dma::Descriptor>]) -> usize {
    queues
        .iter()
        .rposition(|q| !q.is_empty())
        .map_or(1, |p| p + 1)
}

/// The bits of the first `queues` DMA queues.
fn queue_mask(queues: usize) -> u16 {
    match queues {
        0 => 1,
        q if q >= 16 => u16::MAX,
        q => (1u16 << q) - 1,
    }
}

/// One side's rows, for reporting an index row the DGE found off the fabric or past 64
/// bits the way the reference does.
#[derive(Clone, Copy, Debug)]
struct RowSide {
    start: FabricAddr,
    bytes: u64,
}

/// An instruction lowered to DGE requests.
#[derive(Debug)]
struct Lowered {
    requests: Vec<Request>,
    /// The source and destination rows of a DMA-level instruction.
    rows: [Option<RowSide>; 2],
    /// Whether the DGE's soft skips are the instruction's reported skips (GATHER misses
    /// and INDIRECT_COPY fills are defined results, not skips).
    report_skips: bool,
    /// Scalar offsets skipped before any request (an access-pattern copy lowered to none).
    skipped_offsets: Vec<SkippedOffset>,
}

impl Lowered {
    /// Lowered requests with nothing to report beyond bytes.
    fn pool(requests: Vec<Request>) -> Lowered {
        Lowered {
            requests,
            rows: [None, None],
            report_skips: false,
            skipped_offsets: Vec::new(),
        }
    }

    /// The hostsim error for a DGE error of request `req`, in the reference's terms where
    /// it has them: an index's bound as its value is, unbiased (the request's index bias
    /// added back: the reference judges the index against the tensor dim).
    fn map_error(&self, fabric: &Fabric, req: &Request, e: dge::Error) -> Error {
        use dge::Error as D;
        match e {
            D::IndexOutOfBounds {
                side,
                position,
                value,
                bound,
            } => {
                let side = index_side(side);
                let layout = match side {
                    IndexSide::Src => &req.src_index,
                    IndexSide::Dst => &req.dst_index,
                };
                Error::IndexOutOfBounds {
                    side,
                    position,
                    value,
                    bound: bound + u64::from(layout.bias),
                }
            }
            D::IndexOffFabric {
                side,
                position,
                value,
                addr,
            } => {
                let bytes = self.row(side).map_or(1, |r| r.bytes);
                let overflow = dma::Error::AddressOverflow { addr, len: bytes };
                let source = fabric
                    .check(FabricAddr(addr), bytes)
                    .err()
                    .unwrap_or(overflow);
                index_address(side, position, value, source)
            }
            D::IndexOverflow {
                side,
                position,
                value,
                ..
            } => {
                let (addr, len) = self.row(side).map_or((0, 0), |r| (r.start.0, r.bytes));
                let source = dma::Error::AddressOverflow { addr, len };
                index_address(side, position, value, source)
            }
            D::DuplicateDestination {
                first,
                second,
                value,
            } => Error::DuplicateDestination {
                value,
                first,
                second,
            },
            e => Error::Dge(e),
        }
    }

    /// Keeps every request's engine mask within the engine's queues (all of them where it
    /// selects none of those).
    fn fit_masks(&mut self, engine: &Engine) {
        for req in &mut self.requests {
            req.eng_mask = fitted(req.eng_mask, engine);
        }
    }

    /// The rows of the DGE side `side`.
    fn row(&self, side: &str) -> Option<RowSide> {
        self.rows[usize::from(index_side(side) == IndexSide::Dst)]
    }

    /// The instruction's outcome: skips in position order (src before dst at one
    /// position), the notification, and the bytes the descriptors write.
    fn outcome(&self, generated: &[Generated]) -> Outcome {
        let mut out = Outcome {
            bytes_written: generated.iter().map(|g| g.bytes).sum(),
            oob_notification: !self.skipped_offsets.is_empty(),
            skipped_offsets: self.skipped_offsets.clone(),
            ..Outcome::default()
        };
        if self.report_skips {
            for g in generated {
                out.skipped.extend(g.skipped.iter().map(|s| SkippedIndex {
                    side: index_side(s.side),
                    position: s.position,
                    value: s.value,
                }));
                out.oob_notification |= g.oob_notification;
            }
            // Stable: the DGE lists the source side first. Requests sharing one index
            // vector (a gather-transpose's per-row requests) report its skips once.
            out.skipped.sort_by_key(|s| s.position);
            out.skipped.dedup();
        }
        out
    }
}

/// The reference's error for an index whose row leaves the fabric (or 64 bits).
fn index_address(side: &str, position: u32, value: u32, source: dma::Error) -> Error {
    Error::IndexAddress {
        side: index_side(side),
        position,
        value,
        source,
    }
}

/// The DGE's side names (`"source"`, `"destination"`) as index sides.
fn index_side(side: &str) -> IndexSide {
    match side {
        "destination" => IndexSide::Dst,
        _ => IndexSide::Src,
    }
}

/// Replays the generated requests: one request phase by phase; several (a POOL
/// instruction's) together when no request touches bytes another writes, else one after
/// another ([`cross_hazards`]).
fn replay(
    fabric: &mut Fabric,
    engine: &Engine,
    generated: &[Generated],
    mut sink: Option<&mut RecordedReplays>,
) -> Result<Vec<ReplayReport>, Error> {
    let mut reports = Vec::new();
    let separate = match generated {
        [] => return Ok(reports),
        [_] => true,
        many => cross_hazards(many)?,
    };
    if separate {
        for phase in generated.iter().flat_map(Generated::phases) {
            reports.push(run_queues(fabric, engine, phase, sink.as_deref_mut())?);
        }
        return Ok(reports);
    }
    let mut merged: Vec<Vec<dma::Descriptor>> = vec![Vec::new(); dge::spray::QUEUES];
    for (q, list) in merged.iter_mut().enumerate() {
        for g in generated {
            list.extend(g.queues.get(q).into_iter().flatten().copied());
        }
    }
    reports.push(run_queues(fabric, engine, &merged, sink)?);
    Ok(reports)
}

/// Whether requests must replay one after another (some request writes bytes an earlier
/// one reads or writes: the later one then wins, as in the reference's channel order); a
/// request reading bytes an earlier one writes is an error. Requests whose hulls of bytes
/// read and written do not meet (channels in their own partitions) need no closer look.
fn cross_hazards(generated: &[Generated]) -> Result<bool, Error> {
    let hulls: Vec<[Hull; 2]> = generated.iter().map(hulls).collect();
    let touching = hulls.iter().enumerate().any(|(j, later)| {
        hulls[..j].iter().any(|earlier| {
            earlier[1].meets(later[0]) || earlier[1].meets(later[1]) || earlier[0].meets(later[1])
        })
    });
    if !touching {
        return Ok(false);
    }
    let (mut reads, mut writes) = (ByteRanges::default(), ByteRanges::default());
    let mut ordered = false;
    for g in generated {
        let descriptors = || g.phases().flatten().flatten();
        for d in descriptors() {
            if let Some((src, len)) = d.source_range() {
                if let Some((lo, hi)) = writes.first_overlap((src.0, src.0 + len)) {
                    return Err(Error::Dge(dge::Error::SourceOverlapsDestination { lo, hi }));
                }
            }
            let (dst, len) = d.dest_range();
            let range = (dst.0, dst.0 + len);
            ordered |= reads.overlaps(range) || writes.overlaps(range);
        }
        for d in descriptors() {
            if let Some((src, len)) = d.source_range() {
                reads.insert((src.0, src.0 + len));
            }
            let (dst, len) = d.dest_range();
            writes.insert((dst.0, dst.0 + len));
        }
    }
    Ok(ordered)
}

/// The hulls `[read, written]` of one request's descriptors.
fn hulls(g: &Generated) -> [Hull; 2] {
    let hull = |(a, len): (FabricAddr, u64)| Hull::new(a.0, a.0 + len);
    let mut out = [Hull::EMPTY; 2];
    for d in g.phases().flatten().flatten() {
        if let Some(r) = d.source_range() {
            out[0] = out[0].join(hull(r));
        }
        out[1] = out[1].join(hull(d.dest_range()));
    }
    out
}

/// One engine replay of `queues`, trailing empty queues left out; a copy of what ran
/// goes to `sink` when recording.
fn run_queues(
    fabric: &mut Fabric,
    engine: &Engine,
    queues: &[Vec<dma::Descriptor>],
    sink: Option<&mut RecordedReplays>,
) -> Result<ReplayReport, Error> {
    let ran = queues.get(..used_queues(queues)).unwrap_or(queues);
    let report = engine.run(fabric, ran)?;
    if let Some(s) = sink {
        s.push(ran.to_vec());
    }
    Ok(report)
}

/// An access pattern of `dtype` elements at `start` with `dims` (outermost first, steps in
/// elements). On SBUF and PSUM, whose outermost DGE dimension steps in partitions, a unit
/// partition dimension goes in front; returns how many dimensions were put in front.
fn flat_pattern(
    map: &AddressMap,
    start: FabricAddr,
    dtype: Dtype,
    dims: &[(i64, u32)],
) -> (AccessPattern, usize) {
    let on_core = map.locate(start).is_ok_and(|l| l.space != Space::Hbm);
    let front: &[(i64, u32)] = if on_core { &[(1, 1)] } else { &[] };
    let all: Vec<(i64, u32)> = front.iter().chain(dims).copied().collect();
    let pattern = AccessPattern::new(start, dtype.size() as u32, &all);
    (pattern, front.len())
}

/// An access pattern over `partitions` partitions from `start` (SBUF or PSUM), each
/// holding `dims` (outermost first, steps in elements of `dtype`).
fn partition_pattern(
    start: FabricAddr,
    dtype: Dtype,
    partitions: u32,
    dims: &[(i64, u32)],
) -> AccessPattern {
    let all: Vec<(i64, u32)> = std::iter::once((1, partitions))
        .chain(dims.iter().copied())
        .collect();
    AccessPattern::new(start, dtype.size() as u32, &all)
}

/// A TENSOR4D's dimensions, outermost (dim 3) first, steps in elements.
fn tensor_dims(t: &Tensor4d) -> [(i64, u32); 4] {
    let (s, n) = (t.step_elem(), t.num_elem());
    std::array::from_fn(|k| (i64::from(s[3 - k]), u32::from(n[3 - k])))
}

/// The fabric address of the ADDR4 `a` moved `k` partitions on (active channel `k`).
fn channel_addr(map: &AddressMap, a: Addr4, k: u32) -> Result<FabricAddr, Error> {
    let (space, partition, offset) = a.decode()?;
    let loc = Location {
        space,
        partition: partition.saturating_add(k),
        offset: u64::from(offset),
    };
    Ok(map.fabric_addr(loc)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use dma::Generation;

    /// Every by-design refusal is a route that does not serve the input
    /// ([`ErrorKind::NoMechanism`]: the cross-route comparison has the reference stand
    /// in), and an error every route shares is not one.
    #[test]
    fn by_design_refusals_are_no_mechanism() {
        let field = crate::isa::FieldPath::new("GATHER", "src_mem_pattern");
        let refusals = [
            Error::DgeWindowPattern { field },
            Error::DgeWindowUnrecorded { channel: 1 },
            Error::DgeWindowOverwritten { channel: 2 },
            Error::DgeRowStep {
                field,
                step: 1 << 31,
            },
            Error::Dge(dge::Error::SourceOverlapsDestination { lo: 4, hi: 8 }),
        ];
        for e in refusals {
            assert!(by_design(&e), "{e}");
            assert_eq!(e.kind(), ErrorKind::NoMechanism, "{e}");
        }
        let shared = Error::DuplicateDestination {
            value: 3,
            first: 1,
            second: 2,
        };
        assert!(!by_design(&shared));
        assert_eq!(shared.kind(), ErrorKind::DuplicateDestination);
    }

    #[test]
    fn queue_masks_and_patterns() {
        assert_eq!(queue_mask(16), 0xffff);
        assert_eq!(queue_mask(3), 0b111);
        let map = AddressMap::new(Generation::Cayman);
        let (p, front) = flat_pattern(&map, FabricAddr(64), Dtype::F32, &[(4, 2), (1, 4)]);
        assert_eq!((p.dims.len(), front), (2, 0));
        let sbuf = FabricAddr(dma::addr::SBUF_BASE);
        let (p, front) = flat_pattern(&map, sbuf, Dtype::F32, &[(4, 2), (1, 4)]);
        assert_eq!((p.dims.len(), front, p.dims[0].count), (3, 1, 1));
        let a = Addr4::encode(Space::Sbuf, 3, 8).unwrap();
        let at = channel_addr(&map, a, 2).unwrap();
        assert_eq!(at.0, dma::addr::SBUF_BASE + 5 * dma::addr::SBUF_STRIDE + 8);
        let t = Tensor4d::new(a, [1, 10, 100, -1], [2, 3, 4, 5]);
        assert_eq!(tensor_dims(&t), [(-1, 5), (100, 4), (10, 3), (1, 2)]);
    }
}
