//! `hostsim explain`: what each op of a scenario becomes on the DGE route, what it costs
//! and what is wrong with it.
//!
//! The ops run as `hostsim gen` runs them: through the DGE route on a scratch copy of the
//! initial tensors (so an op sees what earlier ones wrote, as in `run`), recording every
//! DGE request and engine replay; nothing is written. Per op it reports the lowering
//! (NKI op -> ISA instructions, route, hardware or software DGE), each request's DGE
//! stages ([`dge::generate::stages`]: the 5-D shape before and after the Batman reshape,
//! the shared indirection dim, the indices), the descriptors (count, a minimal count, a
//! size histogram, per-queue use timed by [`crate::trace::time_replay`], the first and
//! last few), the runtime's estimate and the lints of [`lint`]. An op that fails (a hard
//! OOB index, a duplicate under a compute op) is explained up to its failure, with its
//! lint, and ends the explanation as it ends a run.

pub mod lint;

use std::fmt::Write as _;
use std::path::Path;

use dma::{Descriptor, Fabric, TimingModel};
use serde::Serialize;

use crate::error::Error;
use crate::runtime::{Mechanism, RunReport};
use crate::scenario::{exec, Overrides, Prepared, PreparedOp};
use lint::Lint;

/// Descriptors shown at each end of an op's list.
const SHOWN: usize = 3;

/// What `explain` was asked for.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// Only this op (by index from 0).
    pub op: Option<usize>,
    /// Override the scenario's generation.
    pub generation: Option<String>,
    /// DMA queues, 1..=16.
    pub queues: Option<usize>,
}

/// The explanation (the `--json` object).
#[derive(Clone, Debug, Serialize)]
pub struct Explanation {
    pub generation: String,
    pub queues: usize,
    pub ops: Vec<OpExplained>,
    /// The asked-for ops after the one that fails, which never run (none when no op
    /// fails).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_reached: Vec<NotReached>,
    pub total: Total,
}

/// An op after the one that fails: it never runs, so it is not explained.
#[derive(Clone, Debug, Serialize)]
pub struct NotReached {
    pub index: usize,
    pub op: String,
    /// The op that fails before it, and why.
    pub failing_op: usize,
    pub error: String,
}

/// One op explained.
#[derive(Clone, Debug, Serialize)]
pub struct OpExplained {
    pub index: usize,
    pub op: String,
    /// The op's label (its `name`), left out when none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The mechanisms that ran its instructions (`dge`).
    pub route: String,
    /// `hardware` or `software` (the DGE that served it).
    pub dge: Option<String>,
    /// The ISA instructions and access-pattern DMAs it lowers to, in order.
    pub instructions: Vec<String>,
    /// Per DGE request, its stages.
    pub stages: Vec<RequestStages>,
    pub descriptors: u64,
    /// The fewest descriptors the same element moves need in the better of two walk
    /// orders (by source address, by destination address), merged where contiguous on
    /// both sides, of one op and at most 64 KiB.
    pub minimal_descriptors: u64,
    pub bytes: u64,
    pub estimated_ns: u64,
    /// `bytes / (estimated_ns * bandwidth of the run's queues)`.
    pub efficiency: f64,
    /// Descriptors per size bucket.
    pub histogram: Vec<Bucket>,
    /// Per queue with descriptors.
    pub queues: Vec<QueueUse>,
    pub first: Vec<DescriptorText>,
    pub last: Vec<DescriptorText>,
    pub lints: Vec<Lint>,
    /// The op's failure, if it failed (the explanation stops after it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One DGE request's stages.
#[derive(Clone, Debug, Serialize)]
pub struct RequestStages {
    /// `direct2d`, `indirect` or `gather_transpose`.
    pub kind: String,
    pub src: SideStages,
    pub dst: SideStages,
}

/// One side of a request through the DGE's stages.
#[derive(Clone, Debug, Serialize)]
pub struct SideStages {
    /// The 5-D shape the firmware logs before the Batman reshape, outer unit dims padded.
    pub before: Shape,
    /// After the reshape (unit dims dropped, contiguous ones merged).
    pub after: Shape,
    /// The indirection dim's position after the reshape.
    pub shared_indirection_dim: Option<usize>,
    /// The side's indices, if indexed.
    pub indices: Option<IndexCounts>,
    /// Whether the reshaped walk's innermost dim steps partitions.
    #[serde(skip)]
    pub partition_innermost: bool,
    #[serde(skip)]
    pub elem_size: u32,
    /// The reshaped dims' byte steps.
    #[serde(skip)]
    pub step_bytes: Vec<i64>,
}

/// `num_elem` and `step_elem`, outermost first.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Shape {
    pub num_elem: Vec<u64>,
    pub step_elem: Vec<i64>,
}

/// What the indirection did with a side's indices. The first failing index stops the
/// DGE: positions after it are not checked, so `in_bounds + skipped + failing` may be
/// below `count`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct IndexCounts {
    pub count: u64,
    pub in_bounds: u64,
    pub skipped: u64,
    pub failing: u64,
}

/// Descriptors of `from_bytes..=to_bytes`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    pub from_bytes: u32,
    pub to_bytes: u32,
    pub descriptors: u64,
}

/// One queue's share of an op.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct QueueUse {
    pub queue: usize,
    pub descriptors: u64,
    pub bytes: u64,
    /// Time its engine is busy in the timing model.
    pub busy_ns: u64,
}

/// One descriptor, as `inspect` names its fields.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DescriptorText {
    /// The op's engine replay it is in (an op may be replayed in several).
    pub replay: usize,
    pub queue: usize,
    pub position: usize,
    pub src: String,
    pub dst: String,
    pub bytes: u32,
    pub op: String,
}

/// The explained ops' totals.
#[derive(Clone, Copy, Debug, Default, Serialize)]
pub struct Total {
    pub descriptors: u64,
    pub minimal_descriptors: u64,
    pub bytes: u64,
    pub estimated_ns: u64,
    pub efficiency: f64,
}

/// What running one op on the recording DGE route left.
struct OpRun<'p> {
    op: &'p PreparedOp,
    result: Result<RunReport, Error>,
    replays: Vec<Vec<Vec<Descriptor>>>,
    requests: Vec<dge::Request>,
    /// The values its scalar offsets had as it ran.
    scalars: Vec<lint::Scalar>,
}

/// Explains the scenario at `path`; also returns the run's trace when `trace`.
pub fn explain(
    path: &Path,
    opts: &Options,
    trace: bool,
) -> Result<(Explanation, Option<String>), Error> {
    let generation = opts.generation.as_deref();
    let over = Overrides {
        generation: generation.map(dma::Generation::from_name).transpose()?,
        mechanism: Some(Mechanism::Dge),
        queues: opts.queues,
    };
    let p = crate::scenario::prepare(&crate::scenario::load(path)?, over)?;
    check_op(path, &p, opts.op)?;
    let title = format!("hostsim explain {}", path.display());
    explain_prepared(&p, opts.op, trace.then_some(title.as_str()))
}

/// Explains the prepared scenario `p` (all ops, or only op `op`), running it on the
/// DGE route whatever its mechanism; also returns the run's trace, titled `trace`, when
/// given one.
pub fn explain_prepared(
    p: &Prepared,
    op: Option<usize>,
    trace: Option<&str>,
) -> Result<(Explanation, Option<String>), Error> {
    let mut fabric = p.initial_fabric()?;
    let runs = run_ops(p, &mut fabric)?;
    let mut ops = Vec::new();
    for run in runs.iter().filter(|r| op.is_none_or(|k| k == r.op.index)) {
        ops.push(explain_op(p, &fabric, run)?);
    }
    let trace = trace.map(|title| trace_of(p, title, &runs)).transpose()?;
    let total = total(p, &ops);
    let explanation = Explanation {
        generation: p.generation.to_string(),
        queues: p.queues,
        ops,
        not_reached: not_reached(p, op, &runs),
        total,
    };
    Ok((explanation, trace))
}

/// The ops (all, or only op `op`) after the one of `runs` that fails.
fn not_reached(p: &Prepared, op: Option<usize>, runs: &[OpRun<'_>]) -> Vec<NotReached> {
    let Some((failing, Err(e))) = runs.last().map(|r| (r.op.index, &r.result)) else {
        return Vec::new();
    };
    let after = p.ops.iter().skip(failing + 1);
    let asked = after.filter(|o| op.is_none_or(|k| k == o.index));
    asked
        .map(|o| NotReached {
            index: o.index,
            op: o.kind.to_string(),
            failing_op: failing,
            error: e.to_string(),
        })
        .collect()
}

/// `--op k` names an op of the scenario.
fn check_op(path: &Path, p: &Prepared, op: Option<usize>) -> Result<(), Error> {
    match op {
        Some(k) if k >= p.ops.len() => Err(Error::Scenario {
            what: format!("--op {k}"),
            rule: format!(
                "{} has {} ops, numbered from 0",
                path.display(),
                p.ops.len()
            ),
        }),
        _ => Ok(()),
    }
}

/// Runs the ops in order on a recording DGE route, up to and including the first that fails.
fn run_ops<'p>(p: &'p Prepared, fabric: &mut Fabric) -> Result<Vec<OpRun<'p>>, Error> {
    let mut runtime = p.runtime(Mechanism::Dge)?;
    runtime.record_queues(true);
    let mut runs = Vec::new();
    for op in &p.ops {
        let scalars = scalars_of(op, fabric);
        let result = exec::run_op(&mut runtime, fabric, op);
        let failed = result.is_err();
        runs.push(OpRun {
            op,
            result,
            replays: runtime.take_recorded(),
            requests: runtime.take_requests(),
            scalars,
        });
        if failed {
            break;
        }
    }
    Ok(runs)
}

/// The trace of the ops that ran (`crate::trace::run_trace`).
fn trace_of(p: &Prepared, title: &str, runs: &[OpRun]) -> Result<String, Error> {
    let reports: Vec<RunReport> = runs
        .iter()
        .filter_map(|r| r.result.as_ref().ok().cloned())
        .collect();
    let replays: Vec<Vec<Vec<Descriptor>>> = runs
        .iter()
        .flat_map(|r| r.replays.iter().cloned())
        .collect();
    p.run_trace(title, &reports, &replays)
}

/// The values `op`'s scalar offsets read on `fabric`, one per side and tensor (a value
/// its side refuses is left out: the op's error or skip says so).
fn scalars_of(op: &PreparedOp, fabric: &Fabric) -> Vec<lint::Scalar> {
    let mut out: Vec<lint::Scalar> = Vec::new();
    for dma in &op.lowered.ap_dmas {
        for (side, s) in [("src", &dma.src), ("dst", &dma.dst)] {
            let Some(t) = &s.scalar_offset else { continue };
            let Ok(value) = s.scalar_value(fabric, side) else {
                continue;
            };
            let scalar = lint::Scalar {
                side,
                tensor: t.name.clone(),
                value,
                stride: s.indirect_stride(),
            };
            if !out.contains(&scalar) {
                out.push(scalar);
            }
        }
    }
    out
}

/// One op's explanation.
fn explain_op(p: &Prepared, fabric: &Fabric, run: &OpRun) -> Result<OpExplained, Error> {
    let report = run.result.as_ref().ok();
    let summary = report.map(|r| exec::op_report(run.op, r));
    let descriptors: Vec<&Descriptor> = run.replays.iter().flatten().flatten().collect();
    let stages: Vec<RequestStages> = run
        .requests
        .iter()
        .filter_map(|req| request_stages(fabric, req))
        .collect();
    let queues = queue_use(p, &run.replays)?;
    let bytes = descriptors.iter().map(|d| u64::from(d.len())).sum();
    let estimated_ns = summary.as_ref().map_or(0, |s| s.estimated_ns);
    let facts = lint::Facts {
        kind: run.op.kind,
        descriptors: &descriptors,
        minimal: minimal_descriptors(&descriptors),
        stages: &stages,
        queues: &queues,
        engine_queues: p.queues,
        report,
        error: run.result.as_ref().err(),
        signed: signed_indices(&run.op.lowered.ap_dmas),
        scalars: &run.scalars,
    };
    Ok(OpExplained {
        index: run.op.index,
        op: run.op.kind.to_string(),
        name: run.op.name.clone(),
        route: summary
            .as_ref()
            .map_or("dge".into(), |s| s.mechanism.clone()),
        dge: summary.as_ref().and_then(|s| s.dge.clone()),
        instructions: instruction_names(run.op),
        descriptors: descriptors.len() as u64,
        minimal_descriptors: facts.minimal,
        bytes,
        estimated_ns,
        efficiency: efficiency(p, bytes, estimated_ns),
        histogram: histogram(&descriptors),
        first: shown(&run.replays, false),
        last: shown(&run.replays, true),
        lints: lint::all(&facts),
        error: run.result.as_ref().err().map(ToString::to_string),
        stages,
        queues,
    })
}

/// The op's instructions by opcode name, then its access-pattern DMAs.
fn instruction_names(op: &PreparedOp) -> Vec<String> {
    let isa = op.lowered.instructions.iter().map(|i| {
        let o = i.opcode();
        format!("{} {:#04x}", o.name(), o.code())
    });
    let ap = op.lowered.ap_dmas.iter().map(|d| match d.indexed() {
        true => "access-pattern DMA (indirect)".to_string(),
        false => "access-pattern DMA (direct)".to_string(),
    });
    isa.chain(ap).collect()
}

/// A request's stages on `fabric`; `None` for one the DGE refused before its stages ran.
fn request_stages(fabric: &Fabric, req: &dge::Request) -> Option<RequestStages> {
    let st = dge::generate::stages(fabric, req).ok()?;
    let kind = match req.kind {
        dge::Kind::Direct2d => "direct2d",
        dge::Kind::Indirect => "indirect",
        dge::Kind::GatherTranspose => "gather_transpose",
    };
    Some(RequestStages {
        kind: kind.into(),
        src: side_stages(&st.src),
        dst: side_stages(&st.dst),
    })
}

fn side_stages(s: &dge::generate::Side) -> SideStages {
    let elem = i64::from(s.pattern.elem_size.max(1));
    let before = padded(
        s.pattern
            .dims
            .iter()
            .zip(&s.pattern.elem_steps)
            .map(|(d, &e)| (d.count, e)),
    );
    let after = Shape {
        num_elem: s.shape.dims.iter().map(|d| d.count).collect(),
        step_elem: s.shape.dims.iter().map(|d| d.step / elem).collect(),
    };
    let last = s.shape.dims.len().checked_sub(1);
    SideStages {
        before,
        after,
        shared_indirection_dim: s.shape.indirect_dim,
        indices: s.indexed.as_ref().map(|ix| index_counts(s, ix)),
        partition_innermost: last.is_some() && s.shape.partition_dim == last,
        elem_size: s.shape.elem_size,
        step_bytes: s.shape.dims.iter().map(|d| d.step).collect(),
    }
}

/// `(count, step_elem)` dims padded in front to the DGE's 5 with unit dims.
fn padded(dims: impl Iterator<Item = (u64, i64)>) -> Shape {
    let dims: Vec<(u64, i64)> = dims.collect();
    let pad = 5usize.saturating_sub(dims.len());
    let all = std::iter::repeat_n((1, 0), pad).chain(dims);
    let (num_elem, step_elem) = all.unzip();
    Shape {
        num_elem,
        step_elem,
    }
}

fn index_counts(s: &dge::generate::Side, ix: &dge::indirection::Indexed) -> IndexCounts {
    let count = s
        .shape
        .indirect_dim
        .and_then(|k| s.shape.dims.get(k))
        .map_or(0, |d| d.count);
    let skipped = ix.skipped.len() as u64;
    IndexCounts {
        count,
        in_bounds: (ix.values.len() as u64).saturating_sub(skipped),
        skipped,
        failing: u64::from(ix.fault.is_some()),
    }
}

/// Per queue with descriptors: counts, bytes and busy time over the op's replays.
fn queue_use(p: &Prepared, replays: &[Vec<Vec<Descriptor>>]) -> Result<Vec<QueueUse>, Error> {
    let model = TimingModel::new(p.generation);
    let mut out: Vec<QueueUse> = (0..p.queues)
        .map(|queue| QueueUse {
            queue,
            ..QueueUse::default()
        })
        .collect();
    for replay in replays {
        let timed = crate::trace::time_replay(model, replay)?;
        for (u, t) in out.iter_mut().zip(&timed.queues) {
            u.descriptors += t.descriptors;
            u.bytes += t.bytes;
            u.busy_ns += t.busy_ps.div_ceil(1000);
        }
    }
    out.retain(|u| u.descriptors > 0);
    Ok(out)
}

/// `bytes / (ns * per-engine B/ns * queues)`; 0 without time.
fn efficiency(p: &Prepared, bytes: u64, ns: u64) -> f64 {
    let bw = TimingModel::new(p.generation)
        .constants()
        .engine_bytes_per_ns
        * p.queues as u64;
    match ns.saturating_mul(bw) {
        0 => 0.0,
        cap => bytes as f64 / cap as f64,
    }
}

/// Size buckets' upper ends (inclusive): under 64 B, under 512 B (the public guidance's
/// overhead-bound mark), under 2 KiB (the timing model's knee), under 4 KiB, under
/// 16 KiB, up to 64 KiB.
const BUCKETS: [u32; 6] = [
    63,
    511,
    2047,
    4095,
    16383,
    dma::descriptor::MAX_DESCRIPTOR_LEN,
];

fn histogram(descriptors: &[&Descriptor]) -> Vec<Bucket> {
    let mut counts = [0u64; BUCKETS.len()];
    for d in descriptors {
        let b = BUCKETS
            .iter()
            .position(|&hi| d.len() <= hi)
            .unwrap_or(BUCKETS.len() - 1);
        counts[b] += 1;
    }
    let froms = std::iter::once(1).chain(BUCKETS.iter().map(|hi| hi + 1));
    froms
        .zip(BUCKETS)
        .zip(counts)
        .filter(|(_, n)| *n > 0)
        .map(|((from_bytes, to_bytes), descriptors)| Bucket {
            from_bytes,
            to_bytes,
            descriptors,
        })
        .collect()
}

/// The first [`SHOWN`] descriptors of the op, in replay then queue order, or the last
/// [`SHOWN`] after those.
fn shown(replays: &[Vec<Vec<Descriptor>>], last: bool) -> Vec<DescriptorText> {
    let all = replays.iter().enumerate().flat_map(|(k, r)| {
        r.iter()
            .enumerate()
            .flat_map(move |(q, list)| list.iter().enumerate().map(move |(i, d)| (k, q, i, d)))
    });
    let picked: Vec<(usize, usize, usize, &Descriptor)> = match last {
        false => all.take(SHOWN).collect(),
        true => {
            // After the first ones: the last few of the rest.
            let v: Vec<_> = all.collect();
            v[v.len().saturating_sub(SHOWN).max(SHOWN).min(v.len())..].to_vec()
        }
    };
    picked
        .into_iter()
        .map(|(replay, queue, position, d)| DescriptorText {
            replay,
            queue,
            position,
            src: format!("{:#x}", d.src().0),
            dst: format!("{:#x}", d.dst().0),
            bytes: d.len(),
            op: d.op().name().to_string(),
        })
        .collect()
}

/// The fewest descriptors of [`OpExplained::minimal_descriptors`].
fn minimal_descriptors(descriptors: &[&Descriptor]) -> u64 {
    let merged = |by_source: bool| {
        let mut v: Vec<&Descriptor> = descriptors.to_vec();
        match by_source {
            true => v.sort_by_key(|d| (d.source_range().map(|r| r.0 .0), d.dst().0)),
            false => v.sort_by_key(|d| d.dst().0),
        }
        merged_count(&v)
    };
    merged(true).min(merged(false))
}

/// Runs of `sorted` that continue each other on both sides, of one op and dtype, up to
/// the descriptor limit.
fn merged_count(sorted: &[&Descriptor]) -> u64 {
    /// The merged run being built: its source and destination (start, bytes), and its
    /// first descriptor.
    type Merged<'d> = (Option<(u64, u64)>, (u64, u64), &'d Descriptor);
    let mut count = 0u64;
    let mut open: Option<Merged> = None;
    for d in sorted {
        let src = d.source_range().map(|(a, n)| (a.0, n));
        let (dst, n) = d.dest_range();
        if let Some((s, t, first)) = open.as_mut() {
            let follows = match (*s, src) {
                (Some((a, n)), Some((b, _))) => a + n == b,
                (None, None) => true,
                _ => false,
            };
            let fits = t.1 + n <= u64::from(dma::descriptor::MAX_DESCRIPTOR_LEN);
            let same = first.op() == d.op() && first.dtype() == d.dtype();
            if follows && same && fits && t.0 + t.1 == dst.0 {
                *s = s.zip(src).map(|(a, b)| (a.0, a.1 + b.1));
                t.1 += n;
                continue;
            }
        }
        count += 1;
        open = Some((src, (dst.0, n), d));
    }
    count
}

fn total(p: &Prepared, ops: &[OpExplained]) -> Total {
    let sum = |f: fn(&OpExplained) -> u64| ops.iter().map(f).sum::<u64>();
    let (bytes, estimated_ns) = (sum(|o| o.bytes), sum(|o| o.estimated_ns));
    Total {
        descriptors: sum(|o| o.descriptors),
        minimal_descriptors: sum(|o| o.minimal_descriptors),
        bytes,
        estimated_ns,
        efficiency: efficiency(p, bytes, estimated_ns),
    }
}

impl Explanation {
    /// The `--json` text: one object.
    pub fn to_json(&self) -> String {
        // Numbers and strings always serialize.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// The readable text.
    pub fn text(&self) -> String {
        let mut out = format!("explain on {}, {} queues\n", self.generation, self.queues);
        for op in &self.ops {
            op_text(&mut out, op);
        }
        for n in &self.not_reached {
            // the failing op's error is above when it was explained too
            let why = match self.ops.iter().any(|o| o.index == n.failing_op) {
                true => String::new(),
                false => format!(": {}", n.error),
            };
            let _ = writeln!(
                out,
                "\nop {} ({}): not explained: op {} fails before it runs{why}",
                n.index, n.op, n.failing_op
            );
        }
        let t = &self.total;
        let _ = writeln!(
            out,
            "\ntotal: {} descriptors (minimal {}), {} bytes, estimated {} ns, efficiency {:.1}%",
            t.descriptors,
            t.minimal_descriptors,
            t.bytes,
            t.estimated_ns,
            t.efficiency * 100.0
        );
        out
    }
}

/// `names` joined by commas, a run of equal ones as one name with its count (an N-D
/// `dma_gather_transpose` is one instruction per slab).
fn counted(names: &[String]) -> String {
    let runs = names.chunk_by(|a, b| a == b).map(|run| match run.len() {
        1 => run[0].clone(),
        n => format!("{} x {n}", run[0]),
    });
    runs.collect::<Vec<_>>().join(", ")
}

fn op_text(out: &mut String, op: &OpExplained) {
    let dge = op
        .dge
        .as_deref()
        .map_or(String::new(), |d| format!(", {d} DGE"));
    let name = op
        .name
        .as_ref()
        .map_or(String::new(), |n| format!(" {n:?}"));
    let _ = writeln!(
        out,
        "\nop {} ({}{name}): {}{dge}",
        op.index,
        op.op,
        counted(&op.instructions)
    );
    // requests alike one after another (an N-D transpose's slabs) are shown once
    let shown: Vec<(&str, String)> = op
        .stages
        .iter()
        .map(|st| {
            let mut sides = String::new();
            side_text(&mut sides, "src", &st.src);
            side_text(&mut sides, "dst", &st.dst);
            (st.kind.as_str(), sides)
        })
        .collect();
    let mut k = 0;
    for run in shown.chunk_by(|a, b| a == b) {
        let (kind, sides) = &run[0];
        let _ = match run.len() {
            1 => writeln!(out, "  request {k} ({kind}):"),
            n => writeln!(out, "  requests {k}-{} ({kind}), {n} alike:", k + n - 1),
        };
        out.push_str(sides);
        k += run.len();
    }
    let _ = writeln!(
        out,
        "  descriptors: {} (minimal {}), {} bytes, estimated {} ns, efficiency {:.1}%",
        op.descriptors,
        op.minimal_descriptors,
        op.bytes,
        op.estimated_ns,
        op.efficiency * 100.0
    );
    let sizes: Vec<String> = op
        .histogram
        .iter()
        .map(|b| format!("{}-{} B: {}", b.from_bytes, b.to_bytes, b.descriptors))
        .collect();
    if !sizes.is_empty() {
        let _ = writeln!(out, "  sizes: {}", sizes.join(", "));
    }
    for q in &op.queues {
        let _ = writeln!(
            out,
            "  queue {:>2}: {} descriptors, {} bytes, busy {} ns",
            q.queue, q.descriptors, q.bytes, q.busy_ns
        );
    }
    let replays = op.first.iter().chain(&op.last).any(|d| d.replay > 0);
    for d in op.first.iter().chain(&op.last) {
        // the replay is named where the op has several
        let replay = match replays {
            true => format!("r{} ", d.replay),
            false => String::new(),
        };
        let _ = writeln!(
            out,
            "  {replay}q{} #{}: {} -> {} {} B {}",
            d.queue, d.position, d.src, d.dst, d.bytes, d.op
        );
    }
    for l in &op.lints {
        let _ = writeln!(out, "  lint {}: {}", l.code, l.message);
        if let Some(s) = &l.suggestion {
            let _ = writeln!(out, "    suggestion: {s}");
        }
    }
    if let Some(e) = &op.error {
        let _ = writeln!(out, "  fails: {e}");
    }
}

fn side_text(out: &mut String, name: &str, s: &SideStages) {
    let indices = s.indices.map_or(String::new(), |i| {
        // the first failing index stops the DGE (IndexCounts)
        let unchecked = match i.count.saturating_sub(i.in_bounds + i.skipped + i.failing) {
            0 => String::new(),
            n => format!(", {n} not checked (the DGE stops at the failing one)"),
        };
        format!(
            "; {} indices: {} in bounds, {} skipped, {} failing{unchecked}",
            i.count, i.in_bounds, i.skipped, i.failing
        )
    });
    let shared = s
        .shared_indirection_dim
        .map_or(String::new(), |d| format!(", shared indirection dim {d}"));
    let _ = writeln!(
        out,
        "    {name}: num_elem={:?} step_elem={:?} -> num_elem={:?} step_elem={:?}{shared}{indices}",
        s.before.num_elem, s.before.step_elem, s.after.num_elem, s.after.step_elem
    );
}

/// Whether some access-pattern DMA of the op reads its source's, and its destination's,
/// indices from an i32 tile.
fn signed_indices(dmas: &[crate::nki::ApDma]) -> [bool; 2] {
    let i32_tile = |side: &crate::nki::ApSide| {
        side.vector_offset
            .as_ref()
            .is_some_and(|v| v.tensor.dtype == dma::Dtype::I32)
    };
    [
        dmas.iter().any(|d| i32_tile(&d.src)),
        dmas.iter().any(|d| i32_tile(&d.dst)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::npy::{encode, NpyArray};
    use crate::scenario::{queues, Overrides};

    /// A scenario `text` with its `.npy` files in a fresh folder; returns its path.
    fn scenario(name: &str, text: &str, files: &[(&str, &[u32])]) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("hostsim-explain-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (file, v) in files {
            let a = NpyArray {
                descr: "<u4".into(),
                shape: vec![1, v.len() as u64],
                data: v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            };
            std::fs::write(dir.join(file), encode(&a)).unwrap();
        }
        let path = dir.join("s.toml");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn tensor(name: &str, space: &str, shape: &str, init: &str) -> String {
        format!("[[tensor]]\nname = \"{name}\"\nspace = \"{space}\"\ndtype = \"f32\"\nshape = {shape}\ninit = \"{init}\"\n")
    }

    fn index(name: &str, n: usize) -> String {
        format!("[[tensor]]\nname = \"{name}\"\nspace = \"sbuf\"\ndtype = \"u32\"\nshape = [1, {n}]\ninit = \"{name}.npy\"\n")
    }

    /// The explanation of op 0 of a planted scenario.
    fn op0(name: &str, text: &str, files: &[(&str, &[u32])]) -> OpExplained {
        let path = scenario(name, text, files);
        let (e, _) = explain(&path, &Options::default(), false).unwrap();
        gone(&path);
        e.ops.into_iter().next().unwrap()
    }

    /// Removes the folder of the planted scenario at `path`.
    fn gone(path: &Path) {
        let _ = std::fs::remove_dir_all(path.parent().unwrap_or(path));
    }

    fn codes(op: &OpExplained) -> Vec<&str> {
        op.lints.iter().map(|l| l.code).collect()
    }

    #[test]
    fn an_op_s_instructions_are_named_once_per_run_with_its_count() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let slabs = names(&["ap DMA"; 96]);
        assert_eq!(counted(&slabs), "ap DMA x 96");
        let mixed = names(&["a", "a", "b", "a"]);
        assert_eq!(counted(&mixed), "a x 2, b, a");
        assert_eq!(counted(&[]), "");
    }

    #[test]
    fn a_transposed_f32_walk_has_small_descriptors() {
        let text = tensor("m", "hbm", "[64, 48]", "iota")
            + &tensor("t", "hbm", "[48, 64]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"m\", ap = [[1, 48], [48, 64]] }\ndst = \"t\"\n";
        let op = op0("transpose", &text, &[]);
        assert_eq!(codes(&op), ["small-descriptors"]);
        assert_eq!(
            (op.descriptors, op.minimal_descriptors, op.bytes),
            (3072, 3072, 12288)
        );
        let m = &op.lints[0].message;
        assert!(
            m.starts_with("3072 of 3072 descriptors move under 512 B (median 4 B)"),
            "{m}"
        );
        assert!(
            m.contains("the source's innermost dim 1 steps 192 B over 64 elements"),
            "{m}"
        );
        let fix = op.lints[0].suggestion.as_deref().unwrap();
        assert!(fix.contains("transpose on chip"), "{fix}");
        assert_eq!(
            op.stages[0].src.after,
            Shape {
                num_elem: vec![48, 64],
                step_elem: vec![1, 48]
            }
        );
    }

    #[test]
    fn a_scatter_with_a_repeated_index_names_the_positions() {
        let text = tensor("g", "hbm", "[3, 256]", "iota")
            + &index("idx", 3)
            + &tensor("acc", "hbm", "[4, 256]", "zeros")
            + "[[op]]\nop = \"dma_scatter\"\nsrc = \"g\"\nindex = \"idx\"\ndst = \"acc\"\n";
        let op = op0("dup", &text, &[("idx.npy", &[2, 0, 2])]);
        assert_eq!(codes(&op), ["duplicate-indices"]);
        assert!(
            op.lints[0].message.contains("2 at positions 0 and 2"),
            "{:?}",
            op.lints
        );
        // accumulating duplicates on purpose is clean
        let add = text.clone() + "compute = \"add\"\nunique_indices = false\n";
        assert_eq!(
            codes(&op0("dup-add", &add, &[("idx.npy", &[2, 0, 2])])),
            Vec::<&str>::new()
        );
        // under a compute op the run fails, and explain says where
        let fails = text + "compute = \"add\"\n";
        let op = op0("dup-fail", &fails, &[("idx.npy", &[2, 0, 2])]);
        assert_eq!(codes(&op), ["duplicate-indices"]);
        assert!(
            op.lints[0].message.contains("positions 0 and 2"),
            "{:?}",
            op.lints
        );
        assert!(op.error.is_some());
    }

    #[test]
    fn a_contiguous_mebibyte_copy_has_no_lint() {
        let text = tensor("a", "hbm", "[256, 1024]", "iota")
            + &tensor("b", "hbm", "[256, 1024]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"a\"\ndst = \"b\"\n";
        let op = op0("mib", &text, &[]);
        assert_eq!(codes(&op), Vec::<&str>::new());
        assert_eq!(
            (op.descriptors, op.minimal_descriptors, op.bytes),
            (16, 16, 1 << 20)
        );
        assert_eq!(op.dge.as_deref(), Some("hardware"));
        assert_eq!(
            op.histogram,
            [Bucket {
                from_bytes: 16384,
                to_bytes: 65536,
                descriptors: 16
            }]
        );
        assert_eq!(op.queues.len(), 16);
        assert!(
            op.efficiency > 0.7 && op.efficiency < 1.0,
            "{}",
            op.efficiency
        );
    }

    #[test]
    fn out_of_bounds_indices_are_named_per_policy() {
        let text = tensor("t", "hbm", "[4, 256]", "iota")
            + &index("idx", 3)
            + &tensor("o", "hbm", "[3, 256]", "zeros")
            + "[[op]]\nop = \"dma_gather\"\nsrc = \"t\"\nindex = \"idx\"\ndst = \"o\"\n";
        let files: &[(&str, &[u32])] = &[("idx.npy", &[2, 9, 0])];
        let skip = op0("oob-skip", &format!("{text}oob = \"skip\"\n"), files);
        assert_eq!(codes(&skip), ["oob-indices"]);
        assert!(
            skip.lints[0].message.contains("src 9 at position 1"),
            "{:?}",
            skip.lints
        );
        let counts = skip.stages[0].src.indices.unwrap();
        assert_eq!(
            counts,
            IndexCounts {
                count: 3,
                in_bounds: 2,
                skipped: 1,
                failing: 0
            }
        );
        let error = op0("oob-error", &text, files);
        assert_eq!(codes(&error), ["oob-indices"]);
        let m = &error.lints[0].message;
        assert!(
            m.contains("index 9 at position 1 is out of bounds (bound 4)"),
            "{m}"
        );
        assert_eq!(error.stages[0].src.indices.unwrap().failing, 1);
        // position 2 is not checked: the text says so, so that the counts add up (found
        // by an audit: "3 indices: 1 in bounds, 0 skipped, 1 failing")
        let mut sides = String::new();
        side_text(&mut sides, "src", &error.stages[0].src);
        assert!(
            sides.contains("3 indices: 1 in bounds, 0 skipped, 1 failing, 1 not checked"),
            "{sides}"
        );
        let clean = op0("oob-clean", &text, &[("idx.npy", &[2, 3, 0])]);
        assert_eq!(codes(&clean), Vec::<&str>::new());
    }

    /// Under `oob = "skip"` a scalar offset that takes an in-bounds index out of its
    /// tensor still fails the op: the lint says so, not that the policy is `error`.
    #[test]
    fn a_failing_scalar_offset_is_named_whatever_the_policy() {
        let text = tensor("t", "hbm", "[10, 8]", "iota")
            + &index("idx", 4)
            + "[[tensor]]\nname = \"s\"\nspace = \"sbuf\"\ndtype = \"i32\"\nshape = [1, 1]\ninit = \"s.npy\"\n"
            + &tensor("o", "hbm", "[4, 8]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"t\", ap = [[8, 4], [1, 8]], vector_offset = \"idx\", scalar_offset = \"s\" }\ndst = \"o\"\noob = \"skip\"\n";
        let path = scenario("scalar-skip", &text, &[("idx.npy", &[3, 1, 7, 0])]);
        let scalar = NpyArray {
            descr: "<i4".into(),
            shape: vec![1, 1],
            data: (-1i32).to_le_bytes().to_vec(),
        };
        std::fs::write(path.with_file_name("s.npy"), encode(&scalar)).unwrap();
        let (e, _) = explain(&path, &Options::default(), false).unwrap();
        gone(&path);
        let op = &e.ops[0];
        assert_eq!(codes(op), ["oob-indices"]);
        let m = &op.lints[0].message;
        assert!(
            m.starts_with("the op fails (the scalar offset takes the walk out of its tensor, whatever the oob policy): ")
                && m.contains("[index 0 - scalar 1]"),
            "{m}"
        );
    }

    /// A side without an index tile: its scalar offset out of the tensor fails the op
    /// under `oob = "error"` and skips the copy under `"skip"`; the lint says which.
    #[test]
    fn a_scalar_offset_alone_fails_or_skips_the_copy_by_the_policy() {
        let text = |oob: &str| {
            tensor("t", "hbm", "[10, 8]", "iota")
                + "[[tensor]]\nname = \"s\"\nspace = \"sbuf\"\ndtype = \"i32\"\nshape = [1, 1]\ninit = \"s.npy\"\n"
                + &tensor("o", "hbm", "[4, 8]", "zeros")
                + "[[op]]\nop = \"dma_copy\"\nsrc = { tensor = \"t\", ap = [[8, 4], [1, 8]], scalar_offset = \"s\", indirect_dim = 0 }\ndst = \"o\"\n"
                + &format!("oob = \"{oob}\"\n")
        };
        let scalar = NpyArray {
            descr: "<i4".into(),
            shape: vec![1, 1],
            data: 9i32.to_le_bytes().to_vec(),
        };
        let mut messages = Vec::new();
        for oob in ["error", "skip"] {
            let path = scenario(&format!("scalar-{oob}"), &text(oob), &[]);
            std::fs::write(path.with_file_name("s.npy"), encode(&scalar)).unwrap();
            let (e, _) = explain(&path, &Options::default(), false).unwrap();
            gone(&path);
            assert_eq!(codes(&e.ops[0]), ["oob-indices"]);
            messages.push(e.ops[0].lints[0].message.clone());
        }
        assert!(
            messages[0].starts_with(
                "the op fails (the scalar offset takes the walk out of its tensor; oob = error): "
            ),
            "{}",
            messages[0]
        );
        assert_eq!(
            messages[1],
            "1 scalar offsets out of bounds skipped (oob = skip: each copy moved nothing): src scalar_offset 9"
        );
    }

    /// The ops after the one that fails are named as not reached, with why where the
    /// failing op is not shown (found by an audit: `--op 1` printed nothing at all).
    #[test]
    fn ops_after_a_failing_op_are_named_as_not_reached() {
        let text = tensor("t", "hbm", "[8, 4]", "iota")
            + &index("i", 2)
            + &tensor("o", "hbm", "[2, 4]", "zeros")
            + "[[op]]\nop = \"dma_gather\"\nsrc = \"t\"\nindex = \"i\"\ndst = \"o\"\n"
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"o\"\ndst = \"o\"\n";
        let path = scenario("not-reached", &text, &[("i.npy", &[1, 30])]);
        let (all, _) = explain(&path, &Options::default(), false).unwrap();
        let one = Options {
            op: Some(1),
            ..Options::default()
        };
        let (second, _) = explain(&path, &one, false).unwrap();
        gone(&path);
        assert_eq!(all.ops.len(), 1);
        let n = &all.not_reached;
        assert_eq!((n.len(), n[0].index, n[0].failing_op), (1, 1, 0));
        assert!(
            n[0].error.contains("src index 30 at position 1"),
            "{}",
            n[0].error
        );
        assert!(
            all.text()
                .contains("\nop 1 (dma_copy): not explained: op 0 fails before it runs\n"),
            "{}",
            all.text()
        );
        assert!(second.ops.is_empty());
        let text = second.text();
        assert!(
            text.contains(
                "op 1 (dma_copy): not explained: op 0 fails before it runs: op 0 (dma_gather"
            ),
            "{text}"
        );
        assert!(second.to_json().contains("\"not_reached\""));
    }

    /// An i32 index tile's skipped -1 reads -1, not its bits as u32.
    #[test]
    fn a_negative_i32_index_is_named_as_such() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/embedding_tile/scenario.toml");
        let opts = Options {
            op: Some(0),
            ..Options::default()
        };
        let op = &explain(&path, &opts, false).unwrap().0.ops[0];
        let oob = op.lints.iter().find(|l| l.code == "oob-indices").unwrap();
        assert!(
            oob.message
                .ends_with("src -1 at position 5, src 1000 at position 77"),
            "{}",
            oob.message
        );
    }

    #[test]
    fn one_destination_row_loads_one_queue() {
        let text = tensor("g", "hbm", "[32, 256]", "iota")
            + &index("idx", 32)
            + &tensor("acc", "hbm", "[4, 256]", "zeros")
            + "[[op]]\nop = \"dma_scatter\"\nsrc = \"g\"\nindex = \"idx\"\ndst = \"acc\"\ncompute = \"add\"\nunique_indices = false\n";
        let op = op0("imbalance", &text, &[("idx.npy", &[1; 32])]);
        assert_eq!(codes(&op), ["queue-imbalance"]);
        let m = &op.lints[0].message;
        assert!(
            m.starts_with("queue 0 is busy") && m.contains("(32 descriptors), 16.0x the mean"),
            "{m}"
        );
        // spread destinations balance
        let spread: Vec<u32> = (0..32).map(|i| i % 4).collect();
        let op = op0("balanced", &text, &[("idx.npy", &spread)]);
        assert_eq!(codes(&op), Vec::<&str>::new());
    }

    #[test]
    fn a_column_into_partitions_is_a_partition_split() {
        let text = tensor("v", "hbm", "[64, 1]", "iota")
            + &tensor("t", "sbuf", "[64, 1]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"v\"\ndst = \"t\"\n";
        let op = op0("split", &text, &[]);
        assert_eq!(codes(&op), ["small-descriptors", "partition-split"]);
        let m = &op.lints[1].message;
        assert_eq!(m, "the destination walks partitions innermost: 64 partitions get one 4 B element each per run");
        // rows of a [64, 256] tile, one per partition, are not split
        let rows = tensor("v", "hbm", "[64, 256]", "iota")
            + &tensor("t", "sbuf", "[64, 256]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"v\"\ndst = \"t\"\n";
        assert_eq!(codes(&op0("rows", &rows, &[])), Vec::<&str>::new());
    }

    #[test]
    fn a_split_gathers_small_descriptor_reasons_are_named_once() {
        // 4097 rows of 8 f32: two alike DMA_INDIRECTs, one reason per side
        let n = 4097;
        let idx: Vec<u32> = (0..n as u32).rev().collect();
        let text = tensor("tab", "hbm", &format!("[{n}, 8]"), "iota")
            + &index("idx", n)
            + &tensor("out", "hbm", &format!("[{n}, 8]"), "zeros")
            + "[[op]]\nop = \"dma_gather\"\nsrc = \"tab\"\nindex = \"idx\"\ndst = \"out\"\n";
        let op = op0("split", &text, &[("idx.npy", &idx)]);
        let small = &op.lints[0];
        assert_eq!(small.code, "small-descriptors");
        assert_eq!(
            small.message.matches("the source's").count(),
            1,
            "{}",
            small.message
        );
    }

    #[test]
    fn a_compute_op_nki_does_not_take_is_named_on_the_copies_only() {
        let copy = |compute: &str| {
            tensor("a", "hbm", "[4, 64]", "iota")
                + &tensor("b", "hbm", "[4, 64]", "iota")
                + &format!("[[op]]\nop = \"dma_copy\"\nsrc = \"a\"\ndst = \"b\"\ncompute = \"{compute}\"\n")
        };
        for compute in ["max", "min", "multiply"] {
            let op = op0("nki_compute", &copy(compute), &[]);
            assert_eq!(codes(&op), ["nki-compute"], "{compute}");
            let message = &op.lints[0].message;
            assert!(
                message.starts_with(&format!(
                    "compute {compute}: NKI's front end takes only add"
                )),
                "{message}"
            );
        }
        for compute in ["add", "none"] {
            assert!(
                codes(&op0("nki_compute", &copy(compute), &[])).is_empty(),
                "{compute}"
            );
        }
        // embedding_update's compute op is the instruction's own
        let update = tensor("t", "hbm", "[16, 64]", "iota")
            + &index("i", 4)
            + &tensor("r", "sbuf", "[4, 64]", "iota")
            + "[[op]]\nop = \"embedding_update\"\ntable = \"t\"\nindex = \"i\"\ndata = \"r\"\nreduce = \"max\"\n";
        let op = op0("nki_compute_update", &update, &[("i.npy", &[0, 3, 5, 9])]);
        assert!(!codes(&op).contains(&"nki-compute"), "{:?}", codes(&op));
    }

    #[test]
    fn a_negative_scalar_offset_is_named_with_its_value_and_stride() {
        // the KV-cache write by a run-time position, aimed at batch 1 (offset 256) of a
        // [2, 8, 32] cache: a position of -1 lands in batch 0's last row
        let text = tensor("kc", "hbm", "[2, 8, 32]", "zeros")
            + "[[tensor]]\nname = \"p\"\nspace = \"sbuf\"\ndtype = \"i32\"\nshape = [1, 1]\ninit = \"p.npy\"\n"
            + &tensor("kv", "sbuf", "[8, 4]", "iota")
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"kv\"\n"
            + "dst = { tensor = \"kc\", ap = [[32, 8], [1, 4]], offset = 256, scalar_offset = \"p\", indirect_dim = 2 }\n";
        let explained = |value: i32| {
            let path = scenario("negscalar", &text, &[]);
            let a = NpyArray {
                descr: "<i4".into(),
                shape: vec![1, 1],
                data: value.to_le_bytes().to_vec(),
            };
            std::fs::write(path.with_file_name("p.npy"), encode(&a)).unwrap();
            let (e, _) = explain(&path, &Options::default(), false).unwrap();
            gone(&path);
            e.ops.into_iter().next().unwrap()
        };
        for (value, back) in [(-1, "1 element (1"), (-2, "2 elements (2")] {
            let op = explained(value);
            assert!(codes(&op).contains(&"negative-scalar"), "{:?}", codes(&op));
            let lint = op.lints.iter().find(|l| l.code == "negative-scalar");
            let want = format!("dst scalar_offset p = {value} moves the walk back {back} x the dim's stride 1) from its offset");
            assert!(lint.unwrap().message.starts_with(&want), "{lint:?}");
        }
        for value in [0, 3] {
            assert!(
                !codes(&explained(value)).contains(&"negative-scalar"),
                "{value}"
            );
        }
    }

    #[test]
    fn a_copy_that_reads_what_it_writes_is_an_overlap() {
        let text = |offset: u32| {
            tensor("a", "hbm", "[1, 200]", "iota")
                + &format!("[[op]]\nop = \"dma_copy\"\nsrc = {{ tensor = \"a\", ap = [[1, 100]] }}\ndst = {{ tensor = \"a\", ap = [[1, 100]], offset = {offset} }}\n")
        };
        let op = op0("overlap", &text(50), &[]);
        // (the walk goes element by element where it meets itself: small descriptors)
        assert_eq!(codes(&op), ["small-descriptors", "overlap"]);
        assert!(
            op.lints[1].message.contains("one at 0x"),
            "{}",
            op.lints[1].message
        );
        // which the small descriptors are put down to, not to the pattern's dims
        let small = &op.lints[0];
        assert!(
            small
                .message
                .contains("the op reads bytes it also writes, so its walk is cut"),
            "{}",
            small.message
        );
        let fix = small.suggestion.as_deref().unwrap_or_default();
        assert!(
            fix.starts_with("with the destination in a separate tensor"),
            "{fix}"
        );
        // its descriptors, each its own replay, are named by replay
        assert!(op.first.iter().chain(&op.last).any(|d| d.replay > 0));
        // the second half of the same tensor: no byte in common
        assert!(!codes(&op0("apart", &text(100), &[])).contains(&"overlap"));
    }

    #[test]
    fn a_transpose_s_alike_slab_requests_are_shown_once() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../examples/gather_transpose/scenario.toml");
        let (e, _) = explain(&path, &Options::default(), false).unwrap();
        let text = e.text();
        let requests: usize = e.ops.iter().map(|o| o.stages.len()).sum();
        assert!(requests > 2, "{requests}");
        assert!(text.contains(" alike:"), "{text}");
        // every request is counted once, shown alone or in a run
        let shown: usize = text
            .lines()
            .filter_map(|l| {
                let l = l.trim_start();
                match l.strip_prefix("requests ") {
                    Some(r) => r.split(", ").nth(1)?.split(' ').next()?.parse().ok(),
                    None => l.starts_with("request ").then_some(1),
                }
            })
            .sum();
        assert_eq!(shown, requests, "{text}");
    }

    #[test]
    fn first_common_byte_sweeps_sorted_ranges() {
        use super::lint::first_common_byte;
        assert_eq!(first_common_byte(&[(0, 10), (20, 30)], &[(10, 20)]), None);
        assert_eq!(
            first_common_byte(&[(0, 10), (20, 30)], &[(10, 21)]),
            Some(20)
        );
        assert_eq!(first_common_byte(&[(0, 100)], &[(5, 6), (50, 60)]), Some(5));
        assert_eq!(
            first_common_byte(&[(0, 30), (10, 20)], &[(25, 40)]),
            Some(25)
        );
        assert_eq!(first_common_byte(&[], &[(0, 1)]), None);
    }

    #[test]
    fn a_bad_op_number_is_an_error_naming_the_flag() {
        let text = tensor("a", "hbm", "[2, 2]", "iota")
            + &tensor("b", "hbm", "[2, 2]", "zeros")
            + "[[op]]\nop = \"dma_copy\"\nsrc = \"a\"\ndst = \"b\"\n";
        let path = scenario("badop", &text, &[]);
        let opts = Options {
            op: Some(1),
            ..Options::default()
        };
        let e = explain(&path, &opts, false).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("--op 1: {} has 1 ops, numbered from 0", path.display())
        );
        assert_eq!(crate::scenario::exit_code(&e), 2);
        let opts = Options {
            op: Some(0),
            ..Options::default()
        };
        assert_eq!(explain(&path, &opts, false).unwrap().0.ops.len(), 1);
        gone(&path);
    }

    /// Every shipped example: explain's descriptors and estimates equal `run --mechanism
    /// dge`'s and `gen`'s, and its trace (and the queue file's) add up to the report.
    #[test]
    fn shipped_examples_agree_with_run_and_gen() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
        let mut seen = 0;
        for name in crate::scenario::examples::EXAMPLES {
            let path = root.join(name).join("scenario.toml");
            let over = Overrides {
                mechanism: Some(Mechanism::Dge),
                ..Overrides::default()
            };
            let p = crate::scenario::prepare(&crate::scenario::load(&path).unwrap(), over).unwrap();
            let report = exec::Report::of_run(&p, &p.execute().unwrap());
            let (e, trace) = explain(&path, &Options::default(), true).unwrap();
            let got: Vec<(u64, u64, u64)> = e
                .ops
                .iter()
                .map(|o| (o.descriptors, o.bytes, o.estimated_ns))
                .collect();
            let want: Vec<(u64, u64, u64)> = report
                .ops
                .iter()
                .map(|o| (o.descriptors, o.bytes, o.estimated_ns))
                .collect();
            assert_eq!(got, want, "{}", path.display());
            let set = queues::generate(&p).unwrap();
            assert_eq!(
                set.counts().iter().sum::<usize>() as u64,
                e.total.descriptors,
                "{}",
                path.display()
            );
            let t = &report.total;
            assert_eq!(
                crate::trace::tests::check(&trace.unwrap()),
                (t.bytes, t.descriptors),
                "{}",
                path.display()
            );
            let file =
                std::env::temp_dir().join(format!("hostsim-explain-{}.dmaq", std::process::id()));
            queues::write_queue_file(&file, &set, None).unwrap();
            let mut f = dma::VerifiedQueueFile::open_path(&file).unwrap();
            let traced = crate::trace::queue_file_trace(&mut f, "q").unwrap();
            let _ = std::fs::remove_file(&file);
            assert_eq!(
                crate::trace::tests::check(&traced),
                (t.bytes, t.descriptors),
                "{}",
                path.display()
            );
            seen += 1;
        }
        assert_eq!(seen, crate::scenario::examples::EXAMPLES.len());
    }
}
