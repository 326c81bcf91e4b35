//! The DGE front door: a [`Request`] goes through the firmware's pipeline and comes out as
//! descriptor queues ([`Generated`]).
//!
//! Stages, each with a tracing trace-level event carrying the fields the firmware logs:
//!
//! 1. [`IndirectionInfo`] per indirect side;
//! 2. [`gen_spray_info`];
//! 3. the Batman reshape ([`batman_reshape`]);
//! 4. [`make_gather_pattern`] (the index addresses of the request's index layout);
//! 5. the indices, through the IVP gathers ([`read_indices`]) when TRACE shows them, else
//!    straight from the fabric ([`IndexPort::values`], the same values);
//! 6. [`do_indirection`]: bias, bound check, MAC, the OOB policy;
//! 7. the descriptor loop ([`for_each_run`]) and the spray ([`spray::assign`]), or, for a
//!    sequential request that reads bytes it writes, the phases of [`order::phases`].
//!
//! Everything that can fail is checked before the first descriptor exists: patterns,
//! element counts, index counts, bounds under the hard policy, duplicate destinations.
//!
//! # The first failure
//!
//! When both sides are indirect with one index per position (equal index counts and
//! equal elements per index), the error is the first failing position in order, the
//! source before the destination at one position: a hard-policy index at or past its
//! bound, an address past 64 bits, an in-bound row off the fabric, or (last) a
//! destination index that repeats an earlier one without `non_unique_dst_idx`. Positions
//! skipped on either side move nothing, so they are never duplicates. Otherwise the source
//! side's first failure comes first, then the first failing destination position (its
//! row, then the duplicate rule).

use crate::error::Error;
use crate::index::{IndexLayout, IndexPort};
use crate::indirection::{
    do_indirection, make_gather_pattern, read_indices, Indexed, Indirection, IndirectionInfo,
    OobPolicy, RowExtent, SkippedIndex, MAX_INDICES,
};
use crate::order::{self, ElementOrder};
use crate::pattern::{AccessPattern, BytePattern};
use crate::reshape::{batman_reshape, Reshaped};
use crate::rows::{RowMove, RunSink};
use crate::runs::{
    for_each_run, for_each_run_batch, for_each_unit_run, piece_count, Hull, IndexedBases, Run,
    Walker, MAX_PIECES,
};
use crate::spray::{self, SprayMode, QUEUES};
use dma::descriptor::{DescFlags, DescOp, Descriptor};
use dma::fabric::Fabric;
use dma::{ComputeOp, Dtype, FabricAddr, Space};
use hashbrown::HashMap;
use tracing::trace;

/// The DGE's three descriptor kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// DGE DIRECT2D: a strided copy (DMA_DIRECT2D / DMA_MEMCPY 0xb8).
    Direct2d,
    /// DGE INDIRECT: gather, scatter, or both (DMA_INDIRECT 0xbb).
    Indirect,
    /// DGE GATHER TRANSPOSE (`tensor_reshape_indirect_transpose`): `dst[c][r] = src[idx[r]][c]`.
    GatherTranspose,
}

impl Kind {
    /// The `reshape_kind` code the firmware logs.
    pub fn code(self) -> u8 {
        match self {
            Kind::Direct2d => 0,
            Kind::Indirect => 1,
            Kind::GatherTranspose => 2,
        }
    }
}

/// One descriptor-generation request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub kind: Kind,
    pub src: AccessPattern,
    pub dst: AccessPattern,
    /// Indices applied to the source (gather).
    pub src_indirection: Option<Indirection>,
    /// Indices applied to the destination (scatter).
    pub dst_indirection: Option<Indirection>,
    pub op: ComputeOp,
    /// The element dtype (the destination's, when the request casts).
    pub dtype: Dtype,
    /// The source's element dtype where it differs from `dtype`: each element is cast
    /// through f32 ([`dma::cast`]), a run of `n` elements being `n` elements on each side
    /// (module docs of [`crate::runs`]). `None`: the source is `dtype` too.
    pub src_dtype: Option<Dtype>,
    /// Allow several indices to name one destination (`non_unique_dst_idx`).
    pub non_unique_dst_idx: bool,
    /// The DMA queues to spray over (bit `q` selects queue `q`).
    pub eng_mask: u16,
    /// The source index tensor's dtype, layout and bias (u32 contiguous by default).
    pub src_index: IndexLayout,
    /// The destination index tensor's dtype, layout and bias.
    pub dst_index: IndexLayout,
    /// How reads are ordered against the request's own writes ([`ElementOrder`]).
    pub order: ElementOrder,
}

impl Request {
    /// A request of `kind` from `src` to `dst` with no indirection, plain copy, all queues.
    pub fn new(kind: Kind, src: AccessPattern, dst: AccessPattern, dtype: Dtype) -> Request {
        Request {
            kind,
            src,
            dst,
            src_indirection: None,
            dst_indirection: None,
            op: ComputeOp::None,
            dtype,
            src_dtype: None,
            non_unique_dst_idx: false,
            eng_mask: 0xffff,
            src_index: IndexLayout::default(),
            dst_index: IndexLayout::default(),
            order: ElementOrder::Any,
        }
    }

    /// The source's element dtype: [`Request::src_dtype`], else `dtype`.
    pub fn source_dtype(&self) -> Dtype {
        self.src_dtype.unwrap_or(self.dtype)
    }
}

/// `gen_spray_info`'s summary of a request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SprayInfo {
    pub reshape_kind: u8,
    pub do_indirection: bool,
    /// Whether the indices belong to the tensor being read (gather) rather than written.
    pub is_our_tensor: bool,
    pub hbm_to_hbm: bool,
    pub ndma: usize,
}

/// The generated descriptors and what the bound checks did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Generated {
    /// One descriptor list per DMA queue (always [`QUEUES`] lists; unselected ones empty).
    pub queues: Vec<Vec<Descriptor>>,
    /// Phases to replay after `queues`, one after another, each [`QUEUES`] lists: only a
    /// [`ElementOrder::Sequential`] request that reads bytes it writes has any.
    pub later_phases: Vec<Vec<Vec<Descriptor>>>,
    /// Indices skipped under a soft policy, in position order per side.
    pub skipped: Vec<SkippedIndex>,
    /// Whether an OOB notification is raised (a soft skip with notification enabled).
    pub oob_notification: bool,
    /// Payload bytes moved.
    pub bytes: u64,
    /// The request's descriptors as one block ([`generate_block`] only; `queues` and
    /// `later_phases` are then empty).
    pub block: Option<dma::Block>,
}

impl Generated {
    /// Total descriptors over all queues and phases.
    pub fn descriptor_count(&self) -> usize {
        let rows = self.block.as_ref().map_or(0, dma::Block::rows);
        self.phases().flatten().map(Vec::len).sum::<usize>() + rows
    }

    /// Every phase's queues, in replay order (`queues` first).
    pub fn phases(&self) -> impl Iterator<Item = &Vec<Vec<Descriptor>>> + '_ {
        std::iter::once(&self.queues).chain(&self.later_phases)
    }
}

/// Stage 2: the spray summary.
pub fn gen_spray_info(
    req: &Request,
    src: &BytePattern,
    dst: &BytePattern,
    ndma: usize,
) -> SprayInfo {
    let hbm = |a: u64| a < dma::addr::SBUF_BASE;
    let info = SprayInfo {
        reshape_kind: req.kind.code(),
        do_indirection: req.src_indirection.is_some() || req.dst_indirection.is_some(),
        is_our_tensor: req.src_indirection.is_some(),
        hbm_to_hbm: hbm(src.start) && hbm(dst.start),
        ndma,
    };
    trace!(
        reshape_kind = info.reshape_kind,
        do_indirection = info.do_indirection,
        is_our_tensor = info.is_our_tensor,
        hbm_to_hbm = info.hbm_to_hbm,
        ndma = info.ndma,
        "gen_spray_info"
    );
    info
}

/// One side after validation (stage 1: `pattern`), the Batman reshape (stage 3: `shape`)
/// and, if indexed, the indirection (stages 4 to 6: `indexed`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Side {
    /// The side's pattern in bytes, as validated (before the reshape).
    pub pattern: BytePattern,
    /// The side after the Batman reshape.
    pub shape: Reshaped,
    /// The indices read and checked, for an indexed side.
    pub indexed: Option<Indexed>,
}

/// What stages 1 to 6 make of a request: its sides and the queues it sprays over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stages {
    pub src: Side,
    pub dst: Side,
    /// The selected queues, in spray order.
    pub queues: QueueIds,
}

/// Runs the whole pipeline for `req` against `fabric` (which holds the index tensors).
pub fn generate(fabric: &Fabric, req: &Request) -> Result<Generated, Error> {
    let mut out = Generated::default();
    generate_into(fabric, req, &mut out)?;
    Ok(out)
}

/// As [`generate`], reusing `out`'s queue buffers (a runtime issuing many instructions
/// keeps one `Generated` and allocates nothing per descriptor once it is warm). On error
/// `out` holds no descriptors.
pub fn generate_into(fabric: &Fabric, req: &Request, out: &mut Generated) -> Result<(), Error> {
    generate_with(fabric, req, out, false)
}

/// As [`generate_into`], but a request whose rows are each one descriptor, gathered by
/// indices that all passed or copied between plain sides, reading no byte it writes
/// ([`RowMove::block`]), comes out as one [`dma::Block`] in `out.block` (its queues
/// empty): the same descriptors, as [`dma::Block::queues`] builds them.
pub fn generate_block(fabric: &Fabric, req: &Request, out: &mut Generated) -> Result<(), Error> {
    generate_with(fabric, req, out, true)
}

fn generate_with(
    fabric: &Fabric,
    req: &Request,
    out: &mut Generated,
    blocks: bool,
) -> Result<(), Error> {
    let mut buffers = std::mem::take(&mut out.queues);
    buffers.iter_mut().for_each(Vec::clear);
    *out = Generated {
        queues: buffers,
        ..Generated::default()
    };
    let (mut s, d, queues) = prepare(fabric, req)?;
    if let Some(block) = blocks.then(|| block_of(req, &mut s, &d, &queues)).flatten() {
        (out.block, out.bytes) = block.map(|(b, bytes)| (Some(b), bytes))?;
        return Ok(());
    }
    let mut emitter = Emitter::new(req, std::mem::take(&mut out.queues));
    spray_runs(req, &s, &d, &queues, &mut emitter)?;
    *out = emitter.finish()?;
    out.skipped = [s.indexed, d.indexed]
        .into_iter()
        .flatten()
        .flat_map(|i| i.skipped)
        .collect();
    out.oob_notification = notifying(req, &out.skipped);
    Ok(())
}

/// Stages 1 to 6 and the first failure (module docs). Nothing is emitted before all of
/// it has passed.
fn prepare(fabric: &Fabric, req: &Request) -> Result<(Side, Side, QueueIds), Error> {
    let st = stages(fabric, req)?;
    match first_failure(req, &st.src, &st.dst) {
        Some(e) => Err(e),
        None => Ok((st.src, st.dst, st.queues)),
    }
}

/// Stages 1 to 6: validation, the spray summary, both sides reshaped and indexed. A
/// failing index is in its side's [`Indexed::fault`], not an error: [`generate`] turns
/// the first one into its error; `hostsim explain` shows the stages as they are.
pub fn stages(fabric: &Fabric, req: &Request) -> Result<Stages, Error> {
    let map = fabric.map();
    let dst_pattern = transposed_destination(req)?;
    let validate = |p: &AccessPattern, side, ind: Option<Indirection>| match ind {
        Some(_) => p.byte_pattern(map, side),
        None => p.validate(map, side),
    };
    let src = validate(&req.src, "source", req.src_indirection)?;
    let dst = validate(&dst_pattern, "destination", req.dst_indirection)?;
    check_request(req, &src, &dst)?;
    let queues = spray::selected_queues(req.eng_mask)?;
    let info = gen_spray_info(req, &src, &dst, queues.len());
    let side = |p, ind, layout, name| {
        let stage = (info.reshape_kind, req.eng_mask);
        build_side(fabric, p, (ind, layout), name, stage)
    };
    let s = side(&src, req.src_indirection, &req.src_index, "source")?;
    let d = side(&dst, req.dst_indirection, &req.dst_index, "destination")?;
    check_pieces(&s.shape, "source")?;
    check_pieces(&d.shape, "destination")?;
    log_masks(req, &s, &d);
    Ok(Stages {
        src: s,
        dst: d,
        queues,
    })
}

/// The queues a request sprays over.
pub type QueueIds = smallvec::SmallVec<[u8; QUEUES]>;

/// Stage 7: the descriptor loop and the spray. Disjoint destinations are dealt
/// round-robin as they come; if the bytes read and written share an address range
/// (known before a row move is walked, after any other), the runs are walked again
/// (for the first time, for a row move): without a byte both read and written they are
/// grouped; with one, a [`ElementOrder::Sequential`] request is cut into phases and any
/// other is rejected (one request does not order its reads after its own writes). Out of
/// line: inlined into `generate_into`, the row loop measured 5 instructions more per
/// descriptor under callgrind.
#[inline(never)]
fn spray_runs(
    req: &Request,
    s: &Side,
    d: &Side,
    queues: &[u8],
    emitter: &mut Emitter,
) -> Result<(), Error> {
    if spray_mode(req, d) == SprayMode::Disjoint {
        let mut next = RoundRobin::new(queues);
        let (sb, db) = (bases(s), bases(d));
        match RowMove::of((&s.shape, sb), (&d.shape, db)) {
            // a row move's hulls are known before its runs: dealt only if apart
            Some(rows) => {
                let (src, dst) = rows.hulls();
                if !src.meets(dst) {
                    let bytes = rows.for_each_run(&mut Deal {
                        emitter,
                        next: &mut next,
                    });
                    emitter.widen(src, dst, bytes);
                    return Ok(());
                }
            }
            None => {
                let (mut src, mut dst) = (Walker::new(&s.shape, sb), Walker::new(&d.shape, db));
                for_each_run_batch(&mut src, &mut dst, |runs| emitter.push_all(runs, &mut next));
                if !emitter.hulls_meet() {
                    return Ok(());
                }
                emitter.clear();
            }
        }
    }
    let mut runs = Vec::new();
    let span = walk(s, d, |r| runs.push(r));
    match (spray::check_no_overlap(&runs, span.hulls), req.order) {
        (Ok(()), _) => {
            push_grouped(&runs, queues, emitter);
            emitter.widen(span.hulls.0, span.hulls.1, span.bytes);
            Ok(())
        }
        (Err(_), ElementOrder::Sequential { unit_elems }) => {
            sequential(s, d, unit_elems, queues, emitter)
        }
        (Err(e), ElementOrder::Any) => Err(e),
    }
}

/// The request as one block and the bytes it moves, where [`RowMove::block`] makes one
/// and the bytes read and written are apart (as the descriptor loop deals them). A
/// gather's source rows are moved out of `s`'s bases; a block [`dma::Block::new`] refuses
/// (none: the shape guarantees its rules) is an error, as `s` then lacks them.
fn block_of(
    req: &Request,
    s: &mut Side,
    d: &Side,
    queues: &[u8],
) -> Option<Result<(dma::Block, u64), Error>> {
    if spray_mode(req, d) != SprayMode::Disjoint {
        return None;
    }
    let (op, dtypes) = (DescOp::from(req.op), (req.source_dtype(), req.dtype));
    let shape = {
        let rows = RowMove::of((&s.shape, bases(s)), (&d.shape, bases(d)))?;
        let (src, dst) = rows.hulls();
        if src.meets(dst) {
            return None;
        }
        rows.block(|r| describe(op, dtypes, r))?
    };
    let listed = || {
        let indexed = s.indexed.as_mut();
        indexed.map_or_else(Vec::new, |i| std::mem::take(&mut i.bases.addrs))
    };
    let block = shape.block(queues, listed);
    Some(block.map_err(Error::from).map(|b| {
        let bytes = b.rows() as u64 * u64::from(b.template().len());
        (b, bytes)
    }))
}

/// A side's per-index bases, if it is indexed.
fn bases(s: &Side) -> Option<&IndexedBases> {
    s.indexed.as_ref().map(|i| &i.bases)
}

/// Runs dealt to the queues in turn, straight into the emitter.
struct Deal<'e, 'q> {
    emitter: &'e mut Emitter,
    next: &'e mut RoundRobin<'q>,
}

/// The caller accounts for the runs' bytes and hulls once, after the deal.
impl RunSink for Deal<'_, '_> {
    #[inline(always)]
    fn run(&mut self, r: Run) {
        self.emitter.put(r, self.next.pick());
    }
}

/// The selected queues in turn, over and over.
struct RoundRobin<'a> {
    queues: &'a [u8],
    at: usize,
}

impl<'a> RoundRobin<'a> {
    fn new(queues: &'a [u8]) -> RoundRobin<'a> {
        RoundRobin { queues, at: 0 }
    }

    /// The next queue (0 if none is selected: `selected_queues` never returns none).
    #[inline(always)]
    fn pick(&mut self) -> u8 {
        let q = self.queues.get(self.at).copied().unwrap_or(0);
        self.at += 1;
        if self.at >= self.queues.len() {
            self.at = 0;
        }
        q
    }

    /// Passes over `k` queues.
    fn skip(&mut self, k: usize) {
        let n = self.queues.len().max(1);
        self.at = (self.at + k % n) % n;
    }
}

/// Deals `runs` to queues with overlapping destinations grouped, and emits them (the
/// caller accounts for their bytes).
fn push_grouped(runs: &[Run], queues: &[u8], emitter: &mut Emitter) {
    let assigned = spray::assign(runs, queues, SprayMode::Grouped);
    runs.iter()
        .zip(assigned)
        .for_each(|(&r, q)| emitter.put(r, q));
}

/// The sequential element order: the runs cut at every unit, then into phases
/// ([`order::phases`]), each phase grouped and emitted after the previous one.
fn sequential(
    s: &Side,
    d: &Side,
    unit: u64,
    queues: &[u8],
    emitter: &mut Emitter,
) -> Result<(), Error> {
    let (mut src, mut dst) = (
        Walker::new(&s.shape, bases(s)),
        Walker::new(&d.shape, bases(d)),
    );
    let mut units = Vec::new();
    for_each_unit_run(&mut src, &mut dst, unit, |u, r| units.push((u, r)));
    let phases = order::phases(&units)?;
    trace!(
        units = units.len(),
        phases = phases.len(),
        "sequential phases"
    );
    for (k, runs) in phases.iter().enumerate() {
        if k > 0 {
            emitter.next_phase();
        }
        push_grouped(runs, queues, emitter);
        emitter.account(runs);
    }
    Ok(())
}

/// What [`walk`] handed out: hulls around (or, for a row move, around a superset of) the
/// bytes its runs read and write, and the bytes they move.
struct Span {
    hulls: (Hull, Hull),
    bytes: u64,
}

impl Span {
    /// No runs.
    const EMPTY: Span = Span {
        hulls: (Hull::EMPTY, Hull::EMPTY),
        bytes: 0,
    };

    /// Adds run `r`.
    #[inline(always)]
    fn add(&mut self, r: Run) {
        let (read, written) = r.hulls();
        self.hulls = (self.hulls.0.join(read), self.hulls.1.join(written));
        self.bytes += r.len;
    }
}

/// The descriptor loop over both sides, in element order (through the row-move fast path
/// where the shape is one), and its [`Span`]: a row move knows its hulls without a pass
/// over the runs.
fn walk(s: &Side, d: &Side, mut emit: impl FnMut(Run)) -> Span {
    let (sb, db) = (bases(s), bases(d));
    if let Some(rows) = RowMove::of((&s.shape, sb), (&d.shape, db)) {
        let bytes = rows.for_each_run(&mut emit);
        let hulls = rows.hulls();
        return Span { hulls, bytes };
    }
    let (mut src, mut dst) = (Walker::new(&s.shape, sb), Walker::new(&d.shape, db));
    let mut span = Span::EMPTY;
    for_each_run(&mut src, &mut dst, |r| {
        span.add(r);
        emit(r);
    });
    span
}

/// GATHER TRANSPOSE iterates the destination `[C][R]` in the source's `(r, c)` order: its
/// two dimensions are swapped. Other kinds use the destination as given.
fn transposed_destination(req: &Request) -> Result<AccessPattern, Error> {
    if req.kind != Kind::GatherTranspose {
        return Ok(req.dst.clone());
    }
    let two = |p: &AccessPattern| p.dims.len() == 2;
    let ind0 = req.src_indirection.map(|i| i.dim) == Some(0);
    if !two(&req.src) || !two(&req.dst) || !ind0 || req.dst_indirection.is_some() {
        return Err(Error::TransposeShape);
    }
    let (s, d) = (&req.src.dims, &req.dst.dims);
    if s[0].count != d[1].count || s[1].count != d[0].count {
        return Err(Error::TransposeCounts {
            rows: s[0].count,
            cols: s[1].count,
            dst_rows: d[0].count,
            dst_cols: d[1].count,
        });
    }
    let mut t = req.dst.clone();
    t.dims.swap(0, 1);
    Ok(t)
}

fn check_request(req: &Request, src: &BytePattern, dst: &BytePattern) -> Result<(), Error> {
    let sides = [
        ("source", src, req.source_dtype()),
        ("destination", dst, req.dtype),
    ];
    for (side, p, dtype) in sides {
        if p.elem_size != dtype.size() as u32 {
            return Err(Error::ElemSizeDtype {
                side,
                size: p.elem_size,
                dtype,
            });
        }
    }
    if src.elements() != dst.elements() {
        return Err(Error::ElementCountMismatch {
            src: src.elements(),
            dst: dst.elements(),
        });
    }
    check_policies(req)?;
    let indirect = req.src_indirection.is_some() || req.dst_indirection.is_some();
    match (req.kind, indirect) {
        (Kind::Direct2d, true) => Err(Error::KindIndirection {
            kind: req.kind,
            has: true,
        }),
        (Kind::Indirect | Kind::GatherTranspose, false) => Err(Error::KindIndirection {
            kind: req.kind,
            has: false,
        }),
        _ => Ok(()),
    }
}

/// [`stages`]' piece limit alone, reading nothing: each side of `req`, reshaped as its
/// generation reshapes it, walks at most [`MAX_PIECES`] pieces. A caller that knows a
/// request's shape before its indices and scalars checks it up front with this.
pub fn check_piece_limit(map: &dma::AddressMap, req: &Request) -> Result<(), Error> {
    let dst = transposed_destination(req)?;
    let sides = [
        (&req.src, req.src_indirection, "source"),
        (&dst, req.dst_indirection, "destination"),
    ];
    for (p, ind, side) in sides {
        let bytes = p.byte_pattern(map, side)?;
        check_pieces(&reshaped(map, &bytes, ind.map(|i| i.dim), side)?, side)?;
    }
    Ok(())
}

/// [`batman_reshape`] of `p`, its partition dimension the first where it starts outside
/// HBM.
fn reshaped(
    map: &dma::AddressMap,
    p: &BytePattern,
    indirect_dim: Option<usize>,
    side: &'static str,
) -> Result<Reshaped, Error> {
    let partition_dim = map.locate(FabricAddr(p.start))?.space != Space::Hbm;
    Ok(batman_reshape(p, indirect_dim, partition_dim, side))
}

/// A side walks at most [`MAX_PIECES`] pieces, so no request loops or allocates without
/// bound.
fn check_pieces(p: &Reshaped, side: &'static str) -> Result<(), Error> {
    match piece_count(p) {
        pieces if pieces > MAX_PIECES => Err(Error::TooManyPieces {
            side,
            pieces,
            limit: MAX_PIECES,
        }),
        _ => Ok(()),
    }
}

/// The fill policy is the source's, with a value that fits the dtype; a sequential unit
/// holds at least one element.
fn check_policies(req: &Request) -> Result<(), Error> {
    let fill = |i: Option<Indirection>| match i.map(|i| i.policy) {
        Some(OobPolicy::Fill { value }) => Some(value),
        _ => None,
    };
    if fill(req.dst_indirection).is_some() {
        return Err(Error::FillOnDestination);
    }
    if let Some(value) = fill(req.src_indirection) {
        let shift = 8 * req.dtype.size() as u32;
        if u64::from(value).checked_shr(shift).unwrap_or(0) != 0 {
            return Err(Error::FillValue {
                value,
                dtype: req.dtype,
            });
        }
    }
    match req.order {
        ElementOrder::Sequential { unit_elems: 0 } => Err(Error::SequentialUnit { unit: 0 }),
        _ => Ok(()),
    }
}

fn build_side(
    fabric: &Fabric,
    p: &BytePattern,
    (ind, layout): (Option<Indirection>, &IndexLayout),
    side: &'static str,
    (reshape_kind, eng_mask): (u8, u16),
) -> Result<Side, Error> {
    let Some(ind) = ind else {
        return Ok(Side {
            pattern: p.clone(),
            shape: reshaped(fabric.map(), p, None, side)?,
            indexed: None,
        });
    };
    let dim = p.dims.get(ind.dim).ok_or(Error::IndirectDim {
        side,
        dim: ind.dim,
        dims: p.dims.len(),
    })?;
    let count = u32::try_from(dim.count)
        .ok()
        .filter(|&c| c <= MAX_INDICES)
        .ok_or(Error::TooManyIndices {
            side,
            count: dim.count,
            limit: MAX_INDICES,
        })?;
    let info = IndirectionInfo::new(side, ind, layout.clone(), count);
    let shape = reshaped(fabric.map(), p, Some(ind.dim), side)?;
    let row = row_extent(&shape);
    let clipped = row.run_elems > 1 && ind.step <= 0;
    if matches!(ind.policy, OobPolicy::Fill { .. }) && (clipped || !fill_row_shape(&shape)) {
        return Err(Error::FillRowShape { side });
    }
    let pattern = make_gather_pattern(&info, reshape_kind, eng_mask)?;
    let values = match tracing::enabled!(tracing::Level::TRACE) {
        // the gathers, for -vv to show their stages
        true => read_indices(
            &IndexPort::read(fabric, &pattern.addrs, layout.dtype.size())?,
            &pattern,
        ),
        false => IndexPort::values(fabric, &pattern.addrs, pattern.width.elem_sz())?,
    };
    let indexed = do_indirection(fabric.map(), &info, &values, p.start, row);
    Ok(Side {
        pattern: p.clone(),
        shape,
        indexed: Some(indexed),
    })
}

/// A filling side's rows are one contiguous run: the indirection dimension is innermost,
/// or followed by a single contiguous dimension.
fn fill_row_shape(p: &Reshaped) -> bool {
    let n = p.dims.len();
    match p.indirect_dim {
        Some(k) if k + 1 == n => true,
        Some(k) if k + 2 == n => p.dims[n - 1].step == i64::from(p.elem_size),
        _ => false,
    }
}

/// The bytes a row spans around its base: all dimensions but the indirection one, the
/// partition dimension apart; and the length of its innermost contiguous run.
fn row_extent(p: &Reshaped) -> RowExtent {
    let (mut lo, mut hi, mut parts) = (0i64, 0i64, (0i64, 0i64));
    let rows = p
        .dims
        .iter()
        .enumerate()
        .filter(|(k, _)| Some(*k) != p.indirect_dim);
    for (k, d) in rows {
        // validate() bounded every extent by the fabric's size, far inside i64.
        let ext = d.step.saturating_mul(d.count as i64 - 1);
        let (l, h) = match p.partition_dim == Some(k) {
            true => (&mut parts.0, &mut parts.1),
            false => (&mut lo, &mut hi),
        };
        *l += ext.min(0);
        *h += ext.max(0);
    }
    let run_elems = match (p.indirect_dim, p.dims.last()) {
        (Some(k), Some(last)) if k + 2 == p.dims.len() => last.count,
        _ => 1,
    };
    RowExtent {
        lo,
        hi_end: hi + i64::from(p.elem_size),
        partitions: parts,
        run_elems,
        elem_size: p.elem_size,
    }
}

fn log_masks(req: &Request, s: &Side, d: &Side) {
    let mask = |side: &Side| {
        side.indexed.as_ref().map_or(0u64, |i| {
            i.bases
                .valid
                .iter()
                .take(64)
                .enumerate()
                .fold(0u64, |m, (k, &v)| m | u64::from(v) << k)
        })
    };
    let bound = |i: Option<Indirection>| i.and_then(|i| i.bound).unwrap_or(0);
    trace!(
        our_indices_valid = format_args!("{:#x}", mask(s)),
        other_indices_valid = format_args!("{:#x}", mask(d)),
        srx_idx_max = bound(req.src_indirection),
        dst_idx_max = bound(req.dst_indirection),
        "Indirection masks"
    );
}

/// The request's first failure (module docs), if any.
fn first_failure(req: &Request, s: &Side, d: &Side) -> Option<Error> {
    let coupled = coupled(s, d);
    let mut found: smallvec::SmallVec<[(u32, u32, Error); 3]> = smallvec::SmallVec::new();
    for (side, rank) in [(s, 0), (d, 1)] {
        if let Some(f) = side.indexed.as_ref().and_then(|i| i.fault.clone()) {
            found.push((f.position, rank, f.error));
        }
    }
    if let (false, Some(ix)) = (req.non_unique_dst_idx, &d.indexed) {
        let src = s.indexed.as_ref().filter(|_| coupled);
        if let Some((second, e)) = duplicate(ix, src) {
            found.push((second, 2, e));
        }
    }
    // Uncoupled, a source fault comes first; destination faults and duplicates share the
    // destination's positions.
    let group = |rank: u32| u32::from(!coupled && rank > 0);
    found
        .into_iter()
        .min_by_key(|&(pos, rank, _)| (group(rank), pos, rank))
        .map(|f| f.2)
}

/// Whether both sides are indirect with one index per position: equal index counts and
/// equal elements per index.
fn coupled(s: &Side, d: &Side) -> bool {
    let per_index = |side: &Side| {
        let k = side.shape.indirect_dim?;
        let inner: u64 = side
            .shape
            .dims
            .get(k + 1..)?
            .iter()
            .map(|d| d.count)
            .product();
        Some((side.shape.dims.get(k)?.count, inner))
    };
    let both = s.indexed.is_some() && d.indexed.is_some();
    both && per_index(s).is_some() && per_index(s) == per_index(d)
}

/// Without `non_unique_dst_idx`, two destination indices that move may not be equal; a
/// position moves when its destination index is valid and (for a coupled indirect
/// source) its source index moves or fills.
fn duplicate(ix: &Indexed, src: Option<&Indexed>) -> Option<(u32, Error)> {
    let moves = |pos: usize| {
        src.is_none_or(|s| {
            s.bases.fill.is_some() || s.bases.valid.get(pos).copied().unwrap_or(false)
        })
    };
    let mut seen: HashMap<u32, u32> = HashMap::with_capacity(ix.values.len());
    let positions = ix.values.iter().zip(&ix.bases.valid).enumerate();
    for (pos, (&value, _)) in positions.filter(|(p, (_, &ok))| ok && moves(*p)) {
        if let Some(&first) = seen.get(&value) {
            let second = pos as u32;
            let e = Error::DuplicateDestination {
                first,
                second,
                value,
            };
            return Some((second, e));
        }
        seen.insert(value, pos as u32);
    }
    None
}

/// Disjoint spraying is safe when destinations cannot overlap: a direct destination whose
/// pattern is injective, or indirect rows with distinct indices further apart than a row.
fn spray_mode(req: &Request, d: &Side) -> SprayMode {
    let injective = match (&d.indexed, req.dst_indirection) {
        (None, _) => is_injective(&d.shape, None),
        (Some(_), Some(ind)) => {
            !req.non_unique_dst_idx && is_injective(&d.shape, Some(i64::from(ind.step)))
        }
        _ => false,
    };
    if injective {
        SprayMode::Disjoint
    } else {
        SprayMode::Grouped
    }
}

/// Sufficient test that distinct positions of `p` touch distinct bytes: sorted by |step|,
/// every step clears the extent of all smaller ones. `ind_step` stands in for the
/// indirection dimension's step (distinct indices, so distinct multiples of it).
fn is_injective(p: &Reshaped, ind_step: Option<i64>) -> bool {
    let mut dims: Vec<(u64, u64)> = p
        .dims
        .iter()
        .enumerate()
        .map(|(k, d)| {
            let step = match (Some(k) == p.indirect_dim, ind_step) {
                (true, Some(s)) => s,
                _ => d.step,
            };
            (
                step.unsigned_abs(),
                if Some(k) == p.indirect_dim {
                    u64::MAX
                } else {
                    d.count
                },
            )
        })
        .collect();
    dims.sort_unstable();
    let mut extent = u64::from(p.elem_size);
    for (step, count) in dims {
        if step < extent {
            return false;
        }
        extent = step
            .saturating_mul(count.saturating_sub(1))
            .saturating_add(extent);
    }
    true
}

/// The OOB notification is raised when a skipped index comes from a side whose policy
/// notifies (a silenced side's skips raise nothing).
fn notifying(req: &Request, skipped: &[SkippedIndex]) -> bool {
    let policy = |side: &str| match side {
        "source" => req.src_indirection.map(|i| i.policy),
        _ => req.dst_indirection.map(|i| i.policy),
    };
    skipped
        .iter()
        .any(|s| policy(s.side) == Some(OobPolicy::SoftSkip))
}

/// Stage 7's output: descriptors per queue (per phase), END_OF_INSTRUCTION on each
/// queue's last of a phase.
struct Emitter {
    op: DescOp,
    dtype: Dtype,
    /// The source's dtype (`dtype` unless the request casts).
    src_dtype: Dtype,
    queues: Vec<Vec<Descriptor>>,
    /// Finished phases before `queues` (sequential requests only).
    earlier: Vec<Vec<Vec<Descriptor>>>,
    bytes: u64,
    error: Option<dma::Error>,
    /// `[lo, hi)` of the bytes read and of the bytes written so far.
    src_hull: Hull,
    dst_hull: Hull,
}

impl Emitter {
    /// An emitter writing into `queues` (emptied buffers to reuse, or none).
    fn new(req: &Request, mut queues: Vec<Vec<Descriptor>>) -> Emitter {
        queues.resize_with(QUEUES, Vec::new);
        Emitter {
            op: DescOp::from(req.op),
            dtype: req.dtype,
            src_dtype: req.source_dtype(),
            queues,
            earlier: Vec::new(),
            bytes: 0,
            error: None,
            src_hull: Hull::EMPTY,
            dst_hull: Hull::EMPTY,
        }
    }

    /// Whether the hull of the bytes read meets the hull of the bytes written.
    fn hulls_meet(&self) -> bool {
        self.src_hull.meets(self.dst_hull)
    }

    /// Forgets every descriptor pushed so far (the buffers stay).
    fn clear(&mut self) {
        self.queues.iter_mut().for_each(Vec::clear);
        self.bytes = 0;
    }

    /// Ends the current phase; later pushes go to a new one.
    fn next_phase(&mut self) {
        let mut fresh = Vec::with_capacity(QUEUES);
        fresh.resize_with(QUEUES, Vec::new);
        let mut done = std::mem::replace(&mut self.queues, fresh);
        mark_ends(&mut done);
        self.earlier.push(done);
    }

    /// Emits `runs` in order, each to the next queue of `next`: queue by queue, each
    /// taking every `n`-th run (the same lists, in the same order, as run by run).
    fn push_all(&mut self, runs: &[Run], next: &mut RoundRobin) {
        let n = next.queues.len().max(1);
        let (op, dtypes) = (self.op, self.dtypes());
        let mut refused = None;
        for j in 0..n.min(runs.len()) {
            let queue = usize::from(next.pick());
            let Some(list) = self.queues.get_mut(queue) else {
                continue;
            };
            list.reserve(runs.len().div_ceil(n));
            for &r in runs.iter().skip(j).step_by(n) {
                match describe(op, dtypes, r) {
                    Some(d) => list.push(d),
                    None => refused = refused.or(Some(r)),
                }
            }
        }
        next.skip(runs.len().saturating_sub(n));
        if let Some(r) = refused {
            self.keep(Some(refusal(op, dtypes, r)));
        }
        self.account(runs);
    }

    /// The descriptor of `r`, appended to `queue`'s list.
    #[inline(always)]
    fn put(&mut self, r: Run, queue: u8) {
        match (
            describe(self.op, self.dtypes(), r),
            self.queues.get_mut(usize::from(queue)),
        ) {
            (Some(d), Some(list)) => list.push(d),
            (Some(_), None) => {}
            (None, _) => self.keep(Some(refusal(self.op, self.dtypes(), r))),
        }
    }

    /// The source's and the destination's dtypes.
    #[inline(always)]
    fn dtypes(&self) -> (Dtype, Dtype) {
        (self.src_dtype, self.dtype)
    }

    /// Adds `runs` to the payload bytes and to the hulls of the bytes read and written.
    #[inline(always)]
    fn account(&mut self, runs: &[Run]) {
        let mut span = Span::EMPTY;
        runs.iter().for_each(|&r| span.add(r));
        self.widen(span.hulls.0, span.hulls.1, span.bytes);
    }

    /// Adds `bytes` to the payload and hulls around bytes read and written.
    fn widen(&mut self, read: Hull, written: Hull, bytes: u64) {
        self.bytes += bytes;
        self.src_hull = self.src_hull.join(read);
        self.dst_hull = self.dst_hull.join(written);
    }

    /// Keeps the first construction error.
    #[cold]
    fn keep(&mut self, e: Option<dma::Error>) {
        self.error = self.error.take().or(e);
    }

    fn finish(mut self) -> Result<Generated, Error> {
        if let Some(e) = self.error {
            return Err(e.into());
        }
        mark_ends(&mut self.queues);
        let mut phases = self.earlier.into_iter().chain(std::iter::once(self.queues));
        Ok(Generated {
            queues: phases.next().unwrap_or_default(),
            later_phases: phases.collect(),
            bytes: self.bytes,
            ..Generated::default()
        })
    }
}

/// The descriptor of run `r` under `op` and `(src_dtype, dtype)` (a cast where they
/// differ; a fill run never casts). Runs are at most 64 KiB on each side and whole
/// elements of each side's dtype (the patterns' element sizes equal the dtypes'; a fill
/// value was checked to fit), so this does not fail; a refusal is still kept
/// ([`refusal`]) and returned rather than dropped.
#[inline(always)]
fn describe(op: DescOp, dtypes: (Dtype, Dtype), r: Run) -> Option<Descriptor> {
    let (op, src_dtype, dtype) = run_op(op, dtypes, r);
    // `checked_cast` rather than `cast` on the hot path: see `Descriptor::checked`.
    Descriptor::checked_cast(
        op,
        FabricAddr(r.src),
        src_dtype,
        FabricAddr(r.dst),
        r.len as u32,
        dtype,
    )
}

/// Why [`describe`] refused `r`: the error `Descriptor::cast` gives.
#[cold]
fn refusal(op: DescOp, dtypes: (Dtype, Dtype), r: Run) -> dma::Error {
    let (op, src_dtype, dtype) = run_op(op, dtypes, r);
    Descriptor::cast_refusal(op, FabricAddr(r.src), src_dtype, r.len as u32, dtype)
}

/// The op and the source and destination dtypes of run `r`'s descriptor: FILL of the
/// destination's dtype for a fill run, else the request's.
#[inline(always)]
fn run_op(op: DescOp, (src_dtype, dtype): (Dtype, Dtype), r: Run) -> (DescOp, Dtype, Dtype) {
    match r.fill {
        true => (DescOp::Fill, dtype, dtype),
        false => (op, src_dtype, dtype),
    }
}

/// END_OF_INSTRUCTION on each queue's last descriptor.
fn mark_ends(queues: &mut [Vec<Descriptor>]) {
    for list in queues {
        if let Some(last) = list.last_mut() {
            *last = last.with_flags(DescFlags::END_OF_INSTRUCTION);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexDtype;
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};
    use dma::engine::{execute_sequential, Engine, EngineConfig, RaceCheck};
    use dma::Generation;
    use proptest::prelude::*;

    const IDX: u64 = SBUF_BASE + 1024;

    fn fabric_with(indices: &[u32], table: (u64, u64)) -> Fabric {
        let mut f = Fabric::new(Generation::Cayman);
        let bytes: Vec<u8> = indices.iter().flat_map(|i| i.to_le_bytes()).collect();
        if !bytes.is_empty() {
            f.write(FabricAddr(IDX), &bytes).unwrap();
        }
        let (base, len) = table;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
        f.write(FabricAddr(base), &data).unwrap();
        f
    }

    /// What an element of a pattern does in the closed form.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Elem {
        At(u64),
        Fill,
        Skip,
    }

    /// Index `k` of `layout` at `base`, read byte by byte (independently of the gathers).
    fn index_value(f: &Fabric, layout: &IndexLayout, base: u64, k: u64) -> u32 {
        let size = layout.dtype.size();
        let addr = match &layout.pattern {
            None => base + k * size,
            Some(dims) => {
                let (mut rest, mut off) = (k, 0i64);
                for d in dims.iter().rev() {
                    off += d.step * (rest % d.count) as i64;
                    rest /= d.count;
                }
                (base as i64 + off) as u64
            }
        };
        let mut b = [0u8; 4];
        f.read(FabricAddr(addr), &mut b[..size as usize]).unwrap();
        u32::from_le_bytes(b)
    }

    /// What each element of `p` does, in element order, with the indirection applied:
    /// an index at or past its (biased) bound skips, or fills under the fill policy, which
    /// also fills the elements of a longer row at or past `start + bound * step`. Written
    /// independently of the DGE's walker.
    fn element_addrs(
        f: &Fabric,
        p: &AccessPattern,
        ind: Option<Indirection>,
        layout: &IndexLayout,
    ) -> Vec<Elem> {
        let sbuf = p.start.0 >= SBUF_BASE;
        let n = p.dims.len();
        let unit = |k: usize| match k == 0 && sbuf {
            true => SBUF_STRIDE as i128,
            false => i128::from(p.elem_size),
        };
        let mut idx = vec![0u64; n];
        let mut out = Vec::new();
        loop {
            let mut a = p.start.0 as i128;
            let (mut ok, mut clip) = (true, None);
            #[allow(clippy::needless_range_loop)] // k indexes dims and idx alike
            for k in 0..n {
                match ind {
                    Some(i) if i.dim == k => {
                        let v = index_value(f, layout, i.indices.0, idx[k]);
                        let b = v.wrapping_sub(layout.bias);
                        ok &= i.bound.is_none_or(|bd| u64::from(b) < bd);
                        a += i128::from(b) * i128::from(i.step);
                        clip = i.bound.map(|bd| (i128::from(b), bd, i.step));
                    }
                    _ => a += i128::from(p.dims[k].step) * unit(k) * i128::from(idx[k]),
                }
            }
            let fill = matches!(ind.map(|i| i.policy), Some(OobPolicy::Fill { .. }));
            let d = ind.map_or(0, |i| i.dim);
            let row_elems: u64 = (d + 1..n).map(|k| u64::from(p.dims[k].count)).product();
            if let (true, true, Some((b, bd, step)), true) = (fill, ok, clip, row_elems > 1) {
                // the element's offset inside its row: the dims inside the indirection one
                let inner: i128 = (d + 1..n)
                    .map(|k| i128::from(p.dims[k].step) * unit(k) * i128::from(idx[k]))
                    .sum();
                ok = b * i128::from(step) + inner < i128::from(bd) * i128::from(step);
            }
            out.push(match (ok, fill) {
                (true, _) => Elem::At(a as u64),
                (false, true) => Elem::Fill,
                (false, false) => Elem::Skip,
            });
            let mut k = n;
            loop {
                if k == 0 {
                    return out;
                }
                k -= 1;
                idx[k] += 1;
                if idx[k] < u64::from(p.dims[k].count) {
                    break;
                }
                idx[k] = 0;
            }
        }
    }

    /// The closed-form reference: units (one element, or the sequential order's
    /// `unit_elems`) applied in element order, each reading its sources before writing,
    /// an element of the source's dtype cast to the destination's where they differ.
    /// Returns the moves `(src or None for a fill, dst)` so the test can count the runs.
    fn reference(f: &mut Fabric, req: &Request) -> Vec<(Option<u64>, u64)> {
        let src = element_addrs(f, &req.src, req.src_indirection, &req.src_index);
        let dst = if req.kind == Kind::GatherTranspose {
            let (c, r) = (req.dst.dims[0], req.dst.dims[1]);
            let es = i64::from(req.dst.elem_size);
            (0..r.count as i64)
                .flat_map(|ri| {
                    (0..c.count as i64).map(move |ci| {
                        Elem::At(
                            (req.dst.start.0 as i64 + ci * c.step * es + ri * r.step * es) as u64,
                        )
                    })
                })
                .collect()
        } else {
            element_addrs(f, &req.dst, req.dst_indirection, &req.dst_index)
        };
        let fill = match req.src_indirection.map(|i| i.policy) {
            Some(OobPolicy::Fill { value }) => value.to_le_bytes(),
            _ => [0; 4],
        };
        let unit = match req.order {
            ElementOrder::Sequential { unit_elems } => unit_elems as usize,
            ElementOrder::Any => 1,
        };
        let (from, to) = (req.source_dtype(), req.dtype);
        let pairs: Vec<(Elem, Elem)> = src.into_iter().zip(dst).collect();
        let mut moves = Vec::new();
        for chunk in pairs.chunks(unit) {
            let mut values = Vec::new();
            for &(s, d) in chunk {
                let (mut a, dtype) = match (s, d) {
                    (Elem::At(s), Elem::At(_)) => {
                        let mut a = vec![0u8; from.size()];
                        f.read(FabricAddr(s), &mut a).unwrap();
                        (a, from)
                    }
                    // a fill is an element of the destination's dtype
                    (Elem::Fill, Elem::At(_)) => (fill[..to.size()].to_vec(), to),
                    _ => continue,
                };
                a.truncate(dtype.size());
                values.push((s, d, a, dtype));
            }
            for (s, d, a, dtype) in values {
                let Elem::At(d) = d else { continue };
                let mut b = vec![0u8; to.size()];
                f.read(FabricAddr(d), &mut b).unwrap();
                let op = if s == Elem::Fill {
                    ComputeOp::None
                } else {
                    req.op
                };
                dma::cast::cast(op, dtype, &a, to, &mut b).unwrap();
                f.write(FabricAddr(d), &b).unwrap();
                moves.push((if let Elem::At(s) = s { Some(s) } else { None }, d));
            }
        }
        moves
    }

    /// The region holding `a`, from the fabric's own map (not the DGE's `region_slot`).
    fn region(a: u64) -> Option<u64> {
        let map = dma::AddressMap::new(Generation::Cayman);
        map.region_of(FabricAddr(a)).ok().map(|r| r.base)
    }

    /// The fewest runs `moves` make (source elements of `ses` bytes, destination ones of
    /// `des`): consecutive moves join when both are fills or both continue the source,
    /// and the destination continues, inside one region; a run holds at most 64 KiB on
    /// each side it touches.
    fn minimal_count(moves: &[(Option<u64>, u64)], (ses, des): (u64, u64)) -> usize {
        let (mut count, mut run, mut cap) = (0, 0u64, 1);
        for (k, &(s, d)) in moves.iter().enumerate() {
            let joined = k > 0 && {
                let (ps, pd) = moves[k - 1];
                let src = match (ps, s) {
                    (Some(ps), Some(s)) => ps + ses == s && region(ps) == region(s),
                    (None, None) => true,
                    _ => false,
                };
                src && pd + des == d && region(pd) == region(d)
            };
            if !joined {
                count += run.div_ceil(cap) as usize;
                run = 0;
                cap = 65536 / if s.is_some() { ses.max(des) } else { des };
            }
            run += 1;
        }
        count + run.div_ceil(cap) as usize
    }

    /// Replays every phase of `g` in order on the DMA engine with its race check on (so
    /// any two queues touching one byte unordered fail the test) with `workers` threads.
    fn replay(f: &mut Fabric, g: &Generated, workers: usize) {
        let config = EngineConfig {
            workers,
            race_check: RaceCheck::On,
            ..EngineConfig::default()
        };
        let engine = Engine::new(config).unwrap();
        for phase in g.phases() {
            engine.run(f, phase).unwrap();
        }
    }

    /// Generates, replays on the engine (race-checked, 1 and 2 workers) and with the
    /// sequential executor in reversed queue order, and compares against the reference.
    /// Without phases the descriptor count must be minimal.
    fn check(f: &Fabric, req: &Request) -> Generated {
        let g = generate(f, req).unwrap();
        same_as_block(f, req, &g);
        let mut expect = f.clone();
        let moves = reference(&mut expect, req);
        if g.later_phases.is_empty() {
            let sizes = (req.source_dtype().size(), req.dtype.size());
            assert_eq!(
                g.descriptor_count(),
                minimal_count(&moves, (sizes.0 as u64, sizes.1 as u64))
            );
        }
        let mut reversed = f.clone();
        for phase in g.phases() {
            let backwards: Vec<Vec<Descriptor>> = phase.iter().rev().cloned().collect();
            execute_sequential(&mut reversed, &backwards).unwrap();
        }
        assert_eq!(
            reversed.first_difference(&expect),
            None,
            "sequential, queues reversed"
        );
        for workers in [1, 2] {
            let mut got = f.clone();
            replay(&mut got, &g, workers);
            assert_eq!(
                got.first_difference(&expect),
                None,
                "engine, {workers} workers"
            );
        }
        g
    }

    /// `generate_block` of `req` gives `g`'s descriptors: as a block (its queues, up to
    /// the last one used) or, where it makes none, as `g` itself.
    fn same_as_block(f: &Fabric, req: &Request, g: &Generated) {
        let mut b = Generated::default();
        generate_block(f, req, &mut b).unwrap();
        assert_eq!(
            (b.bytes, b.descriptor_count()),
            (g.bytes, g.descriptor_count())
        );
        match b.block.take() {
            Some(block) => {
                let mut queues = g.queues.clone();
                queues.truncate(
                    queues
                        .iter()
                        .rposition(|q| !q.is_empty())
                        .map_or(1, |q| q + 1),
                );
                assert_eq!(block.queues(), queues);
                assert!(g.later_phases.is_empty() && b.queues.iter().all(Vec::is_empty));
            }
            None => assert_eq!(&b, g),
        }
    }

    fn gather(cols: u32, n: u32, bound: Option<u64>, policy: OobPolicy) -> Request {
        let src = AccessPattern::new(FabricAddr(0), 4, &[(i64::from(cols), n), (1, cols)]);
        let dst = AccessPattern::new(FabricAddr(1 << 30), 4, &[(i64::from(cols), n), (1, cols)]);
        let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
        r.src_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: (cols * 4) as i32,
            bound,
            policy,
        });
        r
    }

    #[test]
    fn contiguous_copy_is_ceil_of_64k_descriptors() {
        let f = fabric_with(&[], (0, 300_000));
        let src = AccessPattern::new(FabricAddr(0), 4, &[(1, 75_000)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 4, &[(1, 75_000)]);
        let g = check(&f, &Request::new(Kind::Direct2d, src, dst, Dtype::F32));
        assert_eq!(g.descriptor_count(), 5);
        assert_eq!(g.bytes, 300_000);
        // round-robin: queues 0..4 hold one each, END_OF_INSTRUCTION on each
        assert!(g.queues[..5]
            .iter()
            .all(|q| q.len() == 1 && q[0].flags().contains(DescFlags::END_OF_INSTRUCTION)));
    }

    #[test]
    fn sorted_indices_collapse_into_one_descriptor() {
        let idx: Vec<u32> = (10..42).collect();
        let f = fabric_with(&idx, (0, 64 * 256));
        let g = check(&f, &gather(64, 32, Some(64), OobPolicy::HardError));
        assert_eq!(g.descriptor_count(), 1);
        assert_eq!(g.bytes, 32 * 256);
    }

    #[test]
    fn hard_oob_fails_naming_position_value_and_bound() {
        let f = fabric_with(&[1, 2, 64, 3], (0, 64 * 256));
        let e = generate(&f, &gather(64, 4, Some(64), OobPolicy::HardError)).unwrap_err();
        assert_eq!(
            e,
            Error::IndexOutOfBounds {
                side: "source",
                position: 2,
                value: 64,
                bound: 64
            }
        );
        assert!(
            e.to_string()
                .contains("index 64 at position 2 is out of bounds (bound 64"),
            "{e}"
        );
    }

    #[test]
    fn soft_skip_lists_positions_and_notifies_unless_silenced() {
        let f = fabric_with(&[1, u32::MAX, 63, 64], (0, 64 * 256));
        let g = check(&f, &gather(64, 4, Some(64), OobPolicy::SoftSkip));
        let pos: Vec<(u32, u32)> = g.skipped.iter().map(|s| (s.position, s.value)).collect();
        assert_eq!(pos, vec![(1, u32::MAX), (3, 64)]);
        assert!(g.oob_notification);
        let g = check(&f, &gather(64, 4, Some(64), OobPolicy::SoftSkipSilent));
        assert_eq!(g.skipped.len(), 2);
        assert!(!g.oob_notification);
    }

    #[test]
    fn duplicate_scatter_needs_non_unique_and_then_accumulates_in_one_queue() {
        let f = fabric_with(&[3, 1, 3, 3], (0, 1 << 16));
        let src = AccessPattern::new(FabricAddr(0), 4, &[(16, 4), (1, 16)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 4, &[(16, 4), (1, 16)]);
        let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
        r.op = ComputeOp::Add;
        r.dst_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: 64,
            bound: Some(8),
            policy: OobPolicy::HardError,
        });
        let e = generate(&f, &r).unwrap_err();
        assert_eq!(
            e,
            Error::DuplicateDestination {
                first: 0,
                second: 2,
                value: 3
            }
        );
        r.non_unique_dst_idx = true;
        let g = check(&f, &r);
        let with_row3: Vec<usize> = (0..QUEUES)
            .filter(|&q| g.queues[q].iter().any(|d| d.dst().0 == (1 << 20) + 192))
            .collect();
        assert_eq!(with_row3.len(), 1);
        assert_eq!(
            g.queues[with_row3[0]]
                .iter()
                .filter(|d| d.dst().0 == (1 << 20) + 192)
                .count(),
            3
        );
    }

    #[test]
    fn gather_transpose_writes_columns() {
        // 2-byte dtype, table 8 rows x 4 cols, gather rows [5, 0, 7] transposed into [4][3]
        let f = fabric_with(&[5, 0, 7], (0, 64));
        let src = AccessPattern::new(FabricAddr(0), 2, &[(4, 3), (1, 4)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 2, &[(3, 4), (1, 3)]);
        let mut r = Request::new(Kind::GatherTranspose, src, dst, Dtype::Bf16);
        r.src_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: 8,
            bound: Some(8),
            policy: OobPolicy::HardError,
        });
        let g = check(&f, &r);
        assert_eq!(g.descriptor_count(), 12);
        let mut got = f.clone();
        replay(&mut got, &g, 2);
        let mut out = [0u8; 24];
        got.read(FabricAddr(1 << 20), &mut out).unwrap();
        let table: Vec<u8> = (0..64u64).map(|i| (i * 7 + 3) as u8).collect();
        let el = |r: usize, c: usize| [table[r * 8 + c * 2], table[r * 8 + c * 2 + 1]];
        assert_eq!(out[0..2], el(5, 0));
        assert_eq!(out[2..4], el(0, 0));
        assert_eq!(out[6..8], el(5, 1));
        assert_eq!(out[22..24], el(7, 3));
    }

    #[test]
    fn request_rule_errors() {
        let f = fabric_with(&[0; 8], (0, 1024));
        let p = |n| AccessPattern::new(FabricAddr(0), 4, &[(1, n)]);
        let e = generate(&f, &Request::new(Kind::Direct2d, p(4), p(5), Dtype::F32)).unwrap_err();
        assert_eq!(e, Error::ElementCountMismatch { src: 4, dst: 5 });
        let e = generate(&f, &Request::new(Kind::Direct2d, p(4), p(4), Dtype::U16)).unwrap_err();
        assert!(matches!(e, Error::ElemSizeDtype { size: 4, .. }));
        let e = generate(&f, &Request::new(Kind::Indirect, p(4), p(4), Dtype::F32)).unwrap_err();
        assert!(matches!(e, Error::KindIndirection { has: false, .. }));
        let mut r = Request::new(Kind::Direct2d, p(4), p(4), Dtype::F32);
        r.eng_mask = 0;
        assert!(matches!(generate(&f, &r), Err(Error::NoQueues { .. })));
        let mut r = gather(1, 4097, None, OobPolicy::HardError);
        r.src.dims[1].count = 1;
        r.dst = AccessPattern::new(FabricAddr(1 << 30), 4, &[(1, 4097)]);
        assert!(matches!(
            generate(&f, &r),
            Err(Error::TooManyIndices { count: 4097, .. })
        ));
    }

    #[test]
    fn a_side_walking_more_pieces_than_the_limit_is_refused() {
        let f = fabric_with(&[0; 8], (0, 1024));
        let n = MAX_PIECES as u32 + 1;
        // every other element: each one its own piece; the destination is one piece
        let src = AccessPattern::new(FabricAddr(0), 4, &[(2, n)]);
        let dst = AccessPattern::new(FabricAddr(1 << 30), 4, &[(1, n)]);
        let e = generate(&f, &Request::new(Kind::Direct2d, src, dst, Dtype::F32)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "source pattern walks 4194305 pieces (its runs that are contiguous before the \
             other side cuts them), more than the DGE's limit of 4194304 per request: split \
             the request"
        );
        // the same count with a zero step on a broadcast read: every element a piece too
        let src = AccessPattern::new(FabricAddr(0), 4, &[(0, n)]);
        let dst = AccessPattern::new(FabricAddr(1 << 30), 4, &[(1, n)]);
        let e = generate(&f, &Request::new(Kind::Direct2d, src, dst, Dtype::F32)).unwrap_err();
        assert!(
            matches!(e, Error::TooManyPieces { side: "source", .. }),
            "{e}"
        );
    }

    #[test]
    fn an_indexed_row_spanning_partitions_past_the_last_fails() {
        // rows span 4 partitions from the indexed one: index 126 reaches partition 129
        let f = fabric_with(&[0, 126], (0, 64));
        let stride = SBUF_STRIDE as i32;
        let src = AccessPattern::new(FabricAddr(SBUF_BASE), 4, &[(1, 4), (0, 2), (1, 16)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 4, &[(1, 128)]);
        let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
        r.src_indirection = Some(Indirection {
            dim: 1,
            indices: FabricAddr(IDX),
            step: stride,
            bound: Some(1000),
            policy: OobPolicy::HardError,
        });
        let e = generate(&f, &r).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IndexOffFabric {
                    position: 1,
                    value: 126,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn a_silenced_side_raises_no_notification() {
        let f = fabric_with(&[1, 99, 2, 3], (0, 1 << 12));
        let p = |at| AccessPattern::new(FabricAddr(at), 4, &[(4, 2), (1, 4)]);
        let mut r = Request::new(Kind::Indirect, p(0), p(1 << 20), Dtype::F32);
        let ind = |at, policy| Indirection {
            dim: 0,
            indices: FabricAddr(at),
            step: 16,
            bound: Some(8),
            policy,
        };
        r.src_indirection = Some(ind(IDX, OobPolicy::SoftSkipSilent));
        r.dst_indirection = Some(ind(IDX + 8, OobPolicy::SoftSkip));
        let g = check(&f, &r);
        assert_eq!(g.skipped.len(), 1);
        assert!(!g.oob_notification);
    }

    #[test]
    fn overlapping_reads_and_writes_are_rejected_interleaved_ones_are_not() {
        let f = fabric_with(&[], (0, 1 << 18));
        let p = |at, step| AccessPattern::new(FabricAddr(at), 4, &[(step, 40_000)]);
        let shifted = Request::new(Kind::Direct2d, p(0, 1), p(4, 1), Dtype::F32);
        let e = generate(&f, &shifted).unwrap_err();
        assert!(matches!(e, Error::SourceOverlapsDestination { .. }), "{e}");
        // even elements to odd elements of one buffer: hulls meet, bytes do not
        let interleaved = Request::new(Kind::Direct2d, p(0, 2), p(4, 2), Dtype::F32);
        let g = check(&f, &interleaved);
        assert_eq!(g.descriptor_count(), 40_000);
    }

    #[test]
    fn index_overflow_names_the_failing_position() {
        let f = fabric_with(&[0, 0, 0, u32::MAX], (0, 64));
        let mut r = gather(1, 4, None, OobPolicy::HardError);
        r.src.start = FabricAddr(Generation::Cayman.hbm_bytes() - 64);
        r.src_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: i32::MAX,
            bound: None,
            policy: OobPolicy::HardError,
        });
        let e = generate(&f, &r).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IndexOffFabric { position: 3, .. }
                    | Error::IndexOverflow { position: 3, .. }
            ),
            "{e}"
        );
    }

    #[test]
    fn in_bound_index_whose_row_leaves_the_fabric_fails() {
        let f = fabric_with(&[0, 1], (0, 64));
        let mut r = gather(16, 2, None, OobPolicy::SoftSkip);
        r.src.start = FabricAddr(Generation::Cayman.hbm_bytes() - 64);
        let e = generate(&f, &r).unwrap_err();
        assert!(
            matches!(
                e,
                Error::IndexOffFabric {
                    position: 1,
                    value: 1,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn gather_transpose_for_1_2_and_4_byte_dtypes() {
        for (dtype, es) in [(Dtype::U8, 1u32), (Dtype::Bf16, 2), (Dtype::F32, 4)] {
            let f = fabric_with(&[2, 9, 4, 4, 0], (0, 4096));
            let src = AccessPattern::new(FabricAddr(0), es, &[(6, 5), (1, 6)]);
            let dst = AccessPattern::new(FabricAddr(1 << 20), es, &[(5, 6), (1, 5)]);
            let mut r = Request::new(Kind::GatherTranspose, src, dst, dtype);
            let step = (6 * es) as i32;
            r.src_indirection = Some(Indirection {
                dim: 0,
                indices: FabricAddr(IDX),
                step,
                bound: Some(10),
                policy: OobPolicy::HardError,
            });
            let g = check(&f, &r);
            // no two consecutive (r, c) elements are contiguous in the destination
            assert_eq!(g.descriptor_count(), 30, "{dtype}");
        }
    }

    #[test]
    fn transpose_shape_rules() {
        let f = fabric_with(&[0; 4], (0, 64));
        let src = AccessPattern::new(FabricAddr(0), 4, &[(2, 4), (1, 2)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 4, &[(4, 4), (1, 2)]);
        let mut r = Request::new(Kind::GatherTranspose, src, dst, Dtype::F32);
        r.src_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: 8,
            bound: None,
            policy: OobPolicy::HardError,
        });
        let e = generate(&f, &r).unwrap_err();
        assert!(
            matches!(
                e,
                Error::TransposeCounts {
                    rows: 4,
                    cols: 2,
                    dst_rows: 4,
                    dst_cols: 2
                }
            ),
            "{e}"
        );
        r.dst.dims.pop();
        assert_eq!(generate(&f, &r).unwrap_err(), Error::TransposeShape);
    }

    fn dims_strategy() -> impl Strategy<Value = Vec<(i64, u32)>> {
        proptest::collection::vec((-3i64..4, 1u32..4), 1..6)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Random direct 1- to 5-D patterns (negative, zero and overlapping steps), the
        /// destination a shuffled, re-strided copy of the source's shape: replay in either
        /// queue order equals the element-order reference and the count is minimal.
        #[test]
        fn random_direct_patterns_match_the_reference(
            dims in dims_strategy(),
            dst_steps in proptest::collection::vec(-3i64..4, 5),
            order in Just(()).prop_perturb(|_, mut rng| rng.random::<u64>()),
            op in 0u8..5,
            dst_sbuf in any::<bool>(),
        ) {
            let f = fabric_with(&[], (0, 4096));
            let src = AccessPattern::new(FabricAddr(2048), 4, &dims);
            let mut shape: Vec<u32> = dims.iter().map(|d| d.1).collect();
            let n = shape.len();
            for i in 0..n { shape.swap(i, (order as usize >> (i * 3)) % n); }
            let mut dst_dims: Vec<(i64, u32)> = shape.iter().zip(&dst_steps).map(|(&c, &s)| (s, c)).collect();
            let base = if dst_sbuf && n < 5 {
                dst_dims.insert(0, (1, 1));
                SBUF_BASE + 5 * SBUF_STRIDE + 2048
            } else {
                1 << 20
            };
            let dst = AccessPattern::new(FabricAddr(base), 4, &dst_dims);
            let mut r = Request::new(Kind::Direct2d, src, dst, Dtype::I32);
            r.op = ComputeOp::from_code(op).unwrap();
            r.eng_mask = 0b1011;
            check(&f, &r);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Random gathers / scatters / both, random indices with OOB and duplicates, every
        /// policy and compute op: replay equals the reference and the count is minimal.
        #[test]
        fn random_requests_match_the_reference(
            mode in 0u8..3,
            op in 0u8..5,
            cols in 1u32..6,
            raw in proptest::collection::vec(0u32..12, 1..40),
            raw2 in proptest::collection::vec(0u32..12, 40),
            soft in any::<bool>(),
            dst_sbuf in any::<bool>(),
            parts in 1u32..4,
            mask in 1u16..,
        ) {
            let n = raw.len() as u32;
            let rows = 10u64;
            let mut idx = raw.clone();
            idx.extend_from_slice(&raw2[..raw.len()]);
            let f = fabric_with(&idx, (0, 4096));
            let policy = if soft { OobPolicy::SoftSkip } else { OobPolicy::HardError };
            // an outer dimension repeats the rows: over partitions on SBUF
            let rows_dims = [(i64::from(cols), n), (1, cols)];
            let src = AccessPattern::new(FabricAddr(0), 2, &[(0, parts), rows_dims[0], rows_dims[1]]);
            let (dst, dst_dim) = if dst_sbuf {
                let dims = [(1, parts), rows_dims[0], rows_dims[1]];
                (AccessPattern::new(FabricAddr(SBUF_BASE + 3 * SBUF_STRIDE), 2, &dims), 1)
            } else {
                let dims = [(i64::from(n * cols), parts), rows_dims[0], rows_dims[1]];
                (AccessPattern::new(FabricAddr(1 << 20), 2, &dims), 1)
            };
            let mut r = Request::new(Kind::Indirect, src, dst, Dtype::Bf16);
            r.op = ComputeOp::from_code(op).unwrap();
            r.eng_mask = mask;
            r.non_unique_dst_idx = true;
            let ind = |dim, at: u64| Indirection { dim, indices: FabricAddr(at), step: (cols * 2) as i32, bound: Some(rows), policy };
            if mode != 1 { r.src_indirection = Some(ind(1, IDX)); }
            if mode != 0 { r.dst_indirection = Some(ind(dst_dim, IDX + 4 * u64::from(n))); }
            let oob = |v: &[u32]| v.iter().any(|&i| u64::from(i) >= rows);
            let src_oob = mode != 1 && oob(&raw);
            let dst_oob = mode != 0 && oob(&raw2[..raw.len()]);
            match generate(&f, &r) {
                Err(Error::IndexOutOfBounds { .. }) => prop_assert!(!soft && (src_oob || dst_oob)),
                Err(e) => prop_assert!(false, "unexpected {e}"),
                Ok(_) => { prop_assert!(soft || !(src_oob || dst_oob)); check(&f, &r); }
            }
        }
    }

    /// Writes `values` as `dtype` indices where `layout` puts them at `base`.
    fn put_indices(f: &mut Fabric, layout: &IndexLayout, base: u64, values: &[u32]) {
        let size = layout.dtype.size() as usize;
        let addrs = layout
            .addresses("source", base, values.len() as u32)
            .unwrap();
        for (&a, v) in addrs.iter().zip(values) {
            f.write(FabricAddr(a), &v.to_le_bytes()[..size]).unwrap();
        }
    }

    fn coupled_request(sidx: &[u32], didx: &[u32], policy: OobPolicy) -> (Fabric, Request) {
        let mut f = fabric_with(sidx, (0, 4096));
        put_indices(&mut f, &IndexLayout::default(), IDX + 256, didx);
        let p = |at| AccessPattern::new(FabricAddr(at), 4, &[(4, sidx.len() as u32), (1, 4)]);
        let mut r = Request::new(Kind::Indirect, p(0), p(1 << 20), Dtype::F32);
        let ind = |at| Indirection {
            dim: 0,
            indices: FabricAddr(at),
            step: 16,
            bound: Some(8),
            policy,
        };
        r.src_indirection = Some(ind(IDX));
        r.dst_indirection = Some(ind(IDX + 256));
        (f, r)
    }

    #[test]
    fn the_first_failing_position_wins_over_both_sides() {
        // a duplicate at position 1 comes before the source's OOB index at position 2
        let (f, r) = coupled_request(&[0, 1, 99, 3], &[5, 5, 0, 1], OobPolicy::HardError);
        let e = generate(&f, &r).unwrap_err();
        assert_eq!(
            e,
            Error::DuplicateDestination {
                first: 0,
                second: 1,
                value: 5
            }
        );
        // at one position the rows are checked before the duplicate rule, source first
        let (f, r) = coupled_request(&[0, 99, 2], &[5, 5, 9], OobPolicy::HardError);
        assert!(matches!(
            generate(&f, &r).unwrap_err(),
            Error::IndexOutOfBounds {
                side: "source",
                position: 1,
                ..
            }
        ));
        // the destination's failure at position 1 comes before the source's at 2
        let (f, r) = coupled_request(&[0, 0, 99], &[1, 99, 2], OobPolicy::HardError);
        assert!(matches!(
            generate(&f, &r).unwrap_err(),
            Error::IndexOutOfBounds {
                side: "destination",
                position: 1,
                ..
            }
        ));
    }

    #[test]
    fn a_position_skipped_on_the_source_is_not_a_duplicate() {
        let (f, r) = coupled_request(&[99, 1], &[5, 5], OobPolicy::SoftSkip);
        let g = check(&f, &r);
        assert_eq!(g.bytes, 16);
        assert_eq!(
            g.skipped,
            vec![SkippedIndex {
                side: "source",
                position: 0,
                value: 99
            }]
        );
    }

    #[test]
    fn an_unread_start_row_off_the_fabric_is_not_checked() {
        // the table's start row would leave HBM, but the only index is skipped
        let f = fabric_with(&[7], (0, 64));
        let mut r = gather(64, 1, Some(4), OobPolicy::SoftSkip);
        r.src.start = FabricAddr(Generation::Cayman.hbm_bytes() - 8);
        let g = check(&f, &r);
        assert_eq!((g.bytes, g.skipped.len()), (0, 1));
    }

    #[test]
    fn immediate_fill_for_missed_indices() {
        // a window of 8 u16 elements covering indices 512..520; misses write 0x7ff
        let mut f = fabric_with(&[], (0, 64));
        let layout = IndexLayout {
            bias: 512,
            ..IndexLayout::contiguous(IndexDtype::U32)
        };
        put_indices(&mut f, &layout, IDX, &[512, 519, 520, 3, 515]);
        let src = AccessPattern::new(FabricAddr(16), 2, &[(1, 5)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 2, &[(1, 5)]);
        let mut r = Request::new(Kind::Indirect, src, dst, Dtype::U16);
        r.src_index = layout;
        r.src_indirection = Some(Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: 2,
            bound: Some(8),
            policy: OobPolicy::Fill { value: 0x7ff },
        });
        let g = check(&f, &r);
        assert_eq!(g.bytes, 10);
        let mut got = f.clone();
        replay(&mut got, &g, 1);
        let mut out = [0u16; 5];
        got.read_elems(FabricAddr(1 << 20), &mut out).unwrap();
        let byte = |i: u64| (i * 7 + 3) as u8;
        let table = |e: u64| u16::from_le_bytes([byte(16 + 2 * e), byte(17 + 2 * e)]);
        assert_eq!(out, [table(0), table(7), 0x7ff, 0x7ff, table(3)]);
        let mut bad = r.clone();
        bad.src_indirection = bad.src_indirection.map(|i| Indirection {
            policy: OobPolicy::Fill { value: 0x1_0000 },
            ..i
        });
        assert!(matches!(generate(&f, &bad), Err(Error::FillValue { .. })));
        bad.dst_indirection = r.src_indirection;
        bad.src_indirection = None;
        assert_eq!(generate(&f, &bad).unwrap_err(), Error::FillOnDestination);
        // one-element rows fill whatever the step: a reversed window (step -2)
        let mut rev = r.clone();
        rev.src.start = FabricAddr(30);
        rev.src_indirection = r.src_indirection.map(|i| Indirection { step: -2, ..i });
        let g = check(&f, &rev);
        let mut got = f.clone();
        replay(&mut got, &g, 1);
        got.read_elems(FabricAddr(1 << 20), &mut out).unwrap();
        assert_eq!(out, [table(7), table(0), 0x7ff, 0x7ff, table(4)]);
        // rows of several elements need a positive step
        let src = AccessPattern::new(FabricAddr(16), 2, &[(2, 5), (1, 2)]);
        let dst = AccessPattern::new(FabricAddr(1 << 20), 2, &[(2, 5), (1, 2)]);
        let mut two = Request::new(Kind::Indirect, src, dst, Dtype::U16);
        two.src_indirection = rev.src_indirection;
        assert_eq!(
            generate(&f, &two).unwrap_err(),
            Error::FillRowShape { side: "source" }
        );
    }

    #[test]
    fn sequential_order_replays_a_shift_as_a_loop() {
        // dst = src + 1 element inside one buffer: each element reads its predecessor's
        // result (a forward loop), which takes one phase per element
        let f = fabric_with(&[], (0, 64));
        let p = |at| AccessPattern::new(FabricAddr(at), 4, &[(1, 6)]);
        let mut r = Request::new(Kind::Direct2d, p(0), p(4), Dtype::U32);
        assert!(matches!(
            generate(&f, &r),
            Err(Error::SourceOverlapsDestination { .. })
        ));
        r.order = ElementOrder::Sequential { unit_elems: 1 };
        let g = check(&f, &r);
        assert_eq!(g.later_phases.len(), 5);
        // in place: one phase, one descriptor
        let mut r = Request::new(Kind::Direct2d, p(0), p(0), Dtype::U32);
        r.op = ComputeOp::Add;
        r.order = ElementOrder::Sequential { unit_elems: 1 };
        let g = check(&f, &r);
        assert_eq!((g.later_phases.len(), g.descriptor_count()), (0, 1));
        r.order = ElementOrder::Sequential { unit_elems: 0 };
        assert_eq!(
            generate(&f, &r).unwrap_err(),
            Error::SequentialUnit { unit: 0 }
        );
    }

    fn layout_strategy() -> impl Strategy<Value = (IndexDtype, u8)> {
        (
            prop::sample::select(vec![IndexDtype::U8, IndexDtype::U16, IndexDtype::U32]),
            0u8..3,
        )
    }

    /// Contiguous (0), strided by three elements (1), or column-major over 2 partitions (2).
    fn layout_of(dtype: IndexDtype, shape: u8, bias: u32) -> IndexLayout {
        let size = dtype.size() as i64;
        let dims: Option<&[(i64, u64)]> = match shape {
            0 => None,
            1 => Some(&[(3 * size, 4096)]),
            _ => Some(&[(size, 2048), (SBUF_STRIDE as i64, 2)]),
        };
        IndexLayout {
            dtype,
            pattern: dims.map(|d| {
                d.iter()
                    .map(|&(step, count)| crate::pattern::ByteDim { step, count })
                    .collect()
            }),
            bias,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// Row gathers whose indices are u8/u16/u32, contiguous, strided or column-major,
        /// biased, under the hard, skip and fill policies: replay equals the reference.
        #[test]
        fn random_index_layouts_and_policies_match_the_reference(
            (dtype, shape) in layout_strategy(),
            raw in proptest::collection::vec(0u32..16, 1..40),
            bias in 0u32..4,
            policy in 0u8..3,
            cols in 1u32..5,
            fill in 0u32..0x10000,
        ) {
            let n = raw.len() as u32;
            let mut f = fabric_with(&[], (0, 4096));
            let layout = layout_of(dtype, shape, bias);
            put_indices(&mut f, &layout, IDX, &raw);
            let policy = match policy {
                0 => OobPolicy::HardError,
                1 => OobPolicy::SoftSkip,
                _ => OobPolicy::Fill { value: fill },
            };
            let rows = [(i64::from(cols), n), (1, cols)];
            let src = AccessPattern::new(FabricAddr(0), 2, &rows);
            let dst = AccessPattern::new(FabricAddr(1 << 20), 2, &rows);
            let mut r = Request::new(Kind::Indirect, src, dst, Dtype::Bf16);
            r.src_index = layout;
            r.src_indirection = Some(Indirection {
                dim: 0, indices: FabricAddr(IDX), step: (cols * 2) as i32, bound: Some(10), policy,
            });
            let oob = raw.iter().any(|&v| u64::from(v.wrapping_sub(bias)) >= 10);
            match generate(&f, &r) {
                Err(Error::IndexOutOfBounds { .. }) => prop_assert!(policy == OobPolicy::HardError && oob),
                Err(e) => prop_assert!(false, "unexpected {e}"),
                Ok(_) => { check(&f, &r); }
            }
        }

        /// INDIRECT_COPY-like runs: element-offset indices (step = one element) of E-element
        /// runs over several partitions, clipped at a buffer end and filled with 0.
        #[test]
        fn clipped_runs_match_the_reference(
            raw in proptest::collection::vec(0u32..48, 1..24),
            per in prop::sample::select(vec![1u32, 2, 4, 8]),
            buffer in 1u64..40,
            parts in 1u32..4,
        ) {
            let n = raw.len() as u32;
            let mut f = fabric_with(&[], (0, 64));
            for p in 0..parts {
                let data: Vec<u8> = (0..128u32).map(|i| (i * 5 + p * 11) as u8).collect();
                f.write(FabricAddr(SBUF_BASE + u64::from(p) * SBUF_STRIDE + 4096), &data).unwrap();
            }
            let layout = IndexLayout::contiguous(IndexDtype::U16);
            put_indices(&mut f, &layout, IDX, &raw);
            let src = AccessPattern::new(FabricAddr(SBUF_BASE + 4096), 2, &[(1, parts), (1, n), (1, per)]);
            let dst = AccessPattern::new(FabricAddr(SBUF_BASE + 8192), 2, &[(1, parts), (i64::from(per), n), (1, per)]);
            let mut r = Request::new(Kind::Indirect, src, dst, Dtype::U16);
            r.src_index = layout;
            r.src_indirection = Some(Indirection {
                dim: 1, indices: FabricAddr(IDX), step: 2, bound: Some(buffer), policy: OobPolicy::Fill { value: 0 },
            });
            let g = check(&f, &r);
            prop_assert_eq!(g.bytes, u64::from(parts * n * per) * 2);
        }

        /// Direct copies inside one buffer with overlapping source and destination (any
        /// shift, rows of 1 to 3 elements as units, every compute op) in sequential order
        /// equal the element-order loop; in any order they are rejected when rows overlap.
        #[test]
        fn sequential_overlaps_match_the_loop(
            shift in -6i64..7,
            rows in 1u32..8,
            per in 1u32..4,
            gap in 0i64..3,
            op in 0u8..5,
        ) {
            let f = fabric_with(&[], (0, 4096));
            let step = i64::from(per) + gap;
            let dims = [(step, rows), (1, per)];
            let src = AccessPattern::new(FabricAddr(512), 4, &dims);
            let dst = AccessPattern::new(FabricAddr((512 + 4 * shift) as u64), 4, &dims);
            let mut r = Request::new(Kind::Direct2d, src, dst, Dtype::I32);
            r.op = ComputeOp::from_code(op).unwrap();
            r.order = ElementOrder::Sequential { unit_elems: u64::from(per) };
            check(&f, &r);
        }
    }

    /// A request casting `from` to `to` (`mode` 0: a contiguous copy of `count` elements,
    /// 1: a row gather, 2: a row scatter, both by `idx` under `policy`, 3: a copy inside
    /// one buffer shifted by `shift` elements of the source, in sequential order).
    fn cast_request(
        (from, to): (Dtype, Dtype),
        (mode, count, cols): (u8, u32, u32),
        (n, policy, shift): (u32, OobPolicy, i64),
    ) -> Request {
        let (ss, ds) = (from.size() as u32, to.size() as u32);
        let rows = [(i64::from(cols), n), (1, cols)];
        let ind = |step: u32| Indirection {
            dim: 0,
            indices: FabricAddr(IDX),
            step: (cols * step) as i32,
            bound: Some(10),
            policy,
        };
        let mut r = match mode {
            0 => {
                let src = AccessPattern::new(FabricAddr(0), ss, &[(1, count)]);
                let dst = AccessPattern::new(FabricAddr(1 << 20), ds, &[(1, count)]);
                Request::new(Kind::Direct2d, src, dst, to)
            }
            1 | 2 => {
                let src = AccessPattern::new(FabricAddr(0), ss, &rows);
                let dst = AccessPattern::new(FabricAddr(1 << 20), ds, &rows);
                let mut r = Request::new(Kind::Indirect, src, dst, to);
                match mode {
                    1 => r.src_indirection = Some(ind(ss)),
                    _ => r.dst_indirection = Some(ind(ds)),
                }
                r.non_unique_dst_idx = true;
                r
            }
            _ => {
                let src = AccessPattern::new(FabricAddr(512), ss, &rows);
                let at = 512 + shift * i64::from(ss);
                let dst = AccessPattern::new(FabricAddr(at as u64), ds, &rows);
                let mut r = Request::new(Kind::Direct2d, src, dst, to);
                r.order = ElementOrder::Sequential {
                    unit_elems: u64::from(cols),
                };
                r
            }
        };
        r.src_dtype = Some(from).filter(|&d| d != to);
        r
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// Casts between any two dtypes (contiguous copies longer than 64 KiB on one side
        /// or both, row gathers and scatters under every policy, overlapping copies in
        /// sequential order) under every op: replay equals the element-by-element cast
        /// reference, and without phases the count is minimal (runs maximal on both sides,
        /// split at 64 KiB on the longer).
        #[test]
        fn casts_match_the_reference(
            (from, to) in (0usize..9, 0usize..9),
            (mode, long) in (0u8..4, any::<bool>()),
            op in 0u8..5,
            raw in proptest::collection::vec(0u32..12, 1..24),
            cols in 1u32..6,
            (policy, shift) in (0u8..3, -6i64..7),
        ) {
            let (from, to) = (Dtype::ALL[from], Dtype::ALL[to]);
            let n = raw.len() as u32;
            // data under every source element, however long the copy, not periodic
            let mut f = fabric_with(&raw, (0, 1));
            let data: Vec<u8> = (0..81_920u64).map(|i| (i.wrapping_mul(0x9e37_79b9) >> 13) as u8).collect();
            f.write(FabricAddr(0), &data).unwrap();
            let policy = match (policy, mode) {
                (0, _) => OobPolicy::HardError,
                (2, 1) => OobPolicy::Fill { value: 0x3c },
                _ => OobPolicy::SoftSkip,
            };
            let count = if long { 20_000 } else { n * cols };
            let mut r = cast_request((from, to), (mode, count, cols), (n, policy, shift));
            r.op = ComputeOp::from_code(op).unwrap();
            let oob = matches!(mode, 1 | 2) && raw.iter().any(|&i| i >= 10);
            match generate(&f, &r) {
                Err(Error::IndexOutOfBounds { .. }) => prop_assert!(policy == OobPolicy::HardError && oob),
                Err(e) => prop_assert!(false, "unexpected {e}"),
                Ok(g) => {
                    let casts = g.phases().flatten().flatten().all(|d| d.op() == DescOp::Fill || d.is_cast() == (from != to));
                    prop_assert!(casts);
                    check(&f, &r);
                }
            }
        }
    }

    #[test]
    fn a_cast_request_checks_each_side_against_its_own_dtype() {
        let f = fabric_with(&[], (0, 64));
        let mut r = cast_request(
            (Dtype::F32, Dtype::Bf16),
            (0, 8, 1),
            (0, OobPolicy::HardError, 0),
        );
        let g = check(&f, &r);
        assert_eq!(g.descriptor_count(), 1);
        let d = g.queues.iter().flatten().next().unwrap();
        assert_eq!(
            (d.src_dtype(), d.dtype(), d.len()),
            (Dtype::F32, Dtype::Bf16, 16)
        );
        assert_eq!(d.source_range(), Some((FabricAddr(0), 32)));
        // the source pattern's element size must be the source dtype's
        r.src_dtype = Some(Dtype::U8);
        assert_eq!(
            generate(&f, &r).unwrap_err(),
            Error::ElemSizeDtype {
                side: "source",
                size: 4,
                dtype: Dtype::U8
            }
        );
    }
}
