//! The DMA timing model: what one descriptor costs on each generation ([`TimingModel`],
//! constants in [`TIMING_TABLE`]) and when each descriptor of a set of queues starts and
//! ends once semaphores order them ([`QueueTimeline`]). Times are integer picoseconds, so
//! reports are bit-reproducible; they follow from the queues' contents alone, never from
//! the wall clock or the order in which an engine happened to run them.
//!
//! # Cost of one descriptor
//!
//! `cost(len) = fixed + ceil(len * 1000 * k / bw)` ps, with `bw` the per-engine bandwidth
//! in bytes per ns and `k = 2` for read-modify-write reductions (ADD, MULTIPLY, MAX, MIN)
//! before v4 ("half throughput through the compute path"), `k = 1` otherwise. `len` is
//! the bytes of the descriptor's longer side ([`Descriptor::moved_len`]): its length,
//! except for a cast, whose source run may be longer (f32 read, bf16 written: twice
//! the destination's bytes). The engine streams both sides, so the longer one bounds the
//! transfer. (Bytes counted in reports stay the destination's, the `len` field.)
//!
//! The fixed per-descriptor cost is derived, not measured: the public guidance says
//! transfers under about 2 KiB are overhead-bound and 4 KiB and more approach full
//! bandwidth. Taking "overhead-bound" to mean that the fixed cost is at least the data
//! time, the knee is where both are equal: `fixed = ceil(2048 * 1000 / bw)` ps, the time
//! the engine needs to move [`OVERHEAD_KNEE_BYTES`]. A copy then runs at
//! `len / (len + 2048)` of full bandwidth: 11% at 256 B, 50% at 2 KiB, 67% at 4 KiB,
//! 89% at 16 KiB, 97% at 64 KiB, on every generation.
//!
//! # Queues and semaphores
//!
//! Each queue runs on its own DMA engine (16 per core, one per ring), its descriptors back
//! to back in order. A descriptor with WAIT(s, n) starts no earlier than the end of the
//! n-th SIGNAL of `s` (by its single signalling queue) plus the semaphore-to-start
//! latency. Engines do not contend for HBM: 16 engines at 17..33 B/ns stay below the HBM
//! bandwidth of every generation (820 GB/s on v2).

use std::collections::VecDeque;

use crate::descriptor::{DescOp, Descriptor, SemId, SemWait, SemaphoreLedger, SEMAPHORES};
use crate::error::Error;
use crate::generation::{Confidence, Generation};
use crate::queue_file::MAX_QUEUES;

/// Transfers of this many bytes take exactly as long as the fixed per-descriptor cost.
pub const OVERHEAD_KNEE_BYTES: u64 = 2048;

/// One generation's DMA timing constants.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GenerationTiming {
    pub generation: Generation,
    /// DMA engines per NeuronCore.
    pub dma_engines: u32,
    /// Per-engine bandwidth, bytes per ns.
    pub engine_bytes_per_ns: u64,
    /// Hardware DGE time per instruction, ns (`None`: v2 has no hardware DGE).
    pub dge_instruction_ns: Option<u64>,
    /// Throughput divisor of read-modify-write descriptors (2 before v4, 1 from v4).
    pub rmw_divisor: u64,
    /// Semaphore-to-start latency, ns.
    pub semaphore_latency_ns: u64,
    /// Whether the row is observed (v2..v4) or carried over from v4 (v5).
    pub confidence: Confidence,
}

/// The constants, one row per generation. Sources (all from the public Neuron architecture
/// and DMA guides, as summarised in `shared/FACTS.md`, "Neuron hardware"): 16 DMA engines
/// per NeuronCore; about 17 / 23 / 33 B/ns per engine on v2 / v3 / v4 (another guide gives
/// 27.2 and 38.4 GB/s; the lower figures are used); the hardware DGE (v3 and later) at about
/// 600 ns per instruction; DMA read-add-write at full copy throughput from v4 and half
/// before; about 1.3 us semaphore-to-start latency. v5 has no public figures and copies v4.
pub const TIMING_TABLE: [GenerationTiming; 4] = [
    row(Generation::Sunda, 17, None, 2, Confidence::Observed),
    row(Generation::Cayman, 23, Some(600), 2, Confidence::Observed),
    row(Generation::Mariana, 33, Some(600), 1, Confidence::Observed),
    row(Generation::Maverick, 33, Some(600), 1, Confidence::Inferred),
];

const fn row(
    generation: Generation,
    engine_bytes_per_ns: u64,
    dge_instruction_ns: Option<u64>,
    rmw_divisor: u64,
    confidence: Confidence,
) -> GenerationTiming {
    GenerationTiming {
        generation,
        dma_engines: 16,
        engine_bytes_per_ns,
        dge_instruction_ns,
        rmw_divisor,
        semaphore_latency_ns: 1300,
        confidence,
    }
}

const PS_PER_NS: u64 = 1000;

/// The cost model of one generation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimingModel {
    constants: GenerationTiming,
    fixed_ps: u64,
}

impl TimingModel {
    /// The model of `generation` (its [`TIMING_TABLE`] row).
    pub fn new(generation: Generation) -> TimingModel {
        // Every generation has exactly one row; the test `table_has_every_generation` pins it.
        let constants = TIMING_TABLE
            .into_iter()
            .find(|r| r.generation == generation)
            .unwrap_or(TIMING_TABLE[0]);
        TimingModel {
            constants,
            fixed_ps: (OVERHEAD_KNEE_BYTES * PS_PER_NS).div_ceil(constants.engine_bytes_per_ns),
        }
    }

    /// The generation modelled.
    pub fn generation(&self) -> Generation {
        self.constants.generation
    }

    /// The table row in use.
    pub fn constants(&self) -> &GenerationTiming {
        &self.constants
    }

    /// The fixed per-descriptor cost, ps.
    pub fn fixed_ps(&self) -> u64 {
        self.fixed_ps
    }

    /// The cost of moving `len` bytes with `op`, ps.
    pub fn transfer_ps(&self, len: u32, op: DescOp) -> u64 {
        let k = if op.is_reduction() {
            self.constants.rmw_divisor
        } else {
            1
        };
        let data = (u64::from(len) * PS_PER_NS * k).div_ceil(self.constants.engine_bytes_per_ns);
        self.fixed_ps + data
    }

    /// The cost of one descriptor, ps.
    pub fn descriptor_ps(&self, d: &Descriptor) -> u64 {
        self.transfer_ps(d.moved_len(), d.op())
    }

    /// Semaphore-to-start latency, ps.
    pub fn semaphore_latency_ps(&self) -> u64 {
        self.constants.semaphore_latency_ns * PS_PER_NS
    }

    /// Hardware DGE time per instruction, ps (`None` on v2, which has no hardware DGE).
    pub fn dge_instruction_ps(&self) -> Option<u64> {
        self.constants.dge_instruction_ns.map(|ns| ns * PS_PER_NS)
    }
}

/// When one descriptor ran, ps from the start of the replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start_ps: u64,
    pub end_ps: u64,
}

/// One queue's timing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueTiming {
    /// Descriptors timed.
    pub descriptors: u64,
    /// Bytes they move.
    pub bytes: u64,
    /// Time the engine spent moving them (waits excluded), ps.
    pub busy_ps: u64,
    /// End of the queue's last descriptor, ps.
    pub end_ps: u64,
    /// Each descriptor's span, in queue order (empty unless spans were asked for).
    pub spans: Vec<Span>,
}

impl QueueTiming {
    /// Times one more descriptor from `start`; returns its end.
    fn add(&mut self, start: u64, cost_ps: u64, len: u32, span: bool) -> u64 {
        let end = start.saturating_add(cost_ps);
        self.descriptors += 1;
        self.bytes += u64::from(len);
        self.busy_ps = self.busy_ps.saturating_add(cost_ps);
        self.end_ps = end;
        if span {
            self.spans.push(Span {
                start_ps: start,
                end_ps: end,
            });
        }
        end
    }

    /// Times `n` more descriptors of `cost_ps` each, moving `bytes` in all, one after
    /// another from the queue's end: `n` calls of [`QueueTiming::add`] from the end,
    /// without spans.
    fn add_run(&mut self, cost_ps: u64, n: u64, bytes: u64) {
        // Saturating adds of one cost, n times, are one saturating add of the product.
        let total = cost_ps.saturating_mul(n);
        self.descriptors += n;
        self.bytes += bytes;
        self.busy_ps = self.busy_ps.saturating_add(total);
        self.end_ps = self.end_ps.saturating_add(total);
    }
}

/// What a descriptor's cost depends on: the bytes it moves and whether it reads what it
/// writes.
fn cost_key(d: &Descriptor) -> (u32, bool) {
    (d.moved_len(), d.op().is_reduction())
}

/// The last descriptor cost computed: runs of one length and op cost one division.
#[derive(Clone, Copy, Debug, Default)]
struct CostMemo {
    last: Option<(u32, bool, u64)>,
}

impl CostMemo {
    fn of(&mut self, model: &TimingModel, d: &Descriptor) -> u64 {
        let key = cost_key(d);
        match self.last {
            Some((len, rmw, cost)) if (len, rmw) == key => cost,
            _ => {
                let cost = model.descriptor_ps(d);
                self.last = Some((key.0, key.1, cost));
                cost
            }
        }
    }
}

/// The timing of a set of queues.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TimelineReport {
    pub queues: Vec<QueueTiming>,
    /// End of the last descriptor of any queue, ps.
    pub makespan_ps: u64,
}

/// A descriptor reduced to what timing needs.
#[derive(Clone, Copy, Debug)]
struct Pending {
    cost_ps: u64,
    len: u32,
    wait: Option<SemWait>,
    signal: Option<SemId>,
}

#[derive(Debug, Default)]
struct QueueState {
    timing: QueueTiming,
    /// Descriptors pushed but not yet timed: the head waits for a signal not yet timed.
    pending: VecDeque<Pending>,
    /// No more descriptors will be pushed ([`QueueTimeline::close`]).
    closed: bool,
}

impl QueueState {
    /// Whether a push of `d` times it at once: no semaphore, the queue open and holding
    /// nothing.
    fn times_at_once(&self, d: &Descriptor) -> bool {
        self.pending.is_empty() && !self.closed && d.wait().is_none() && d.signal().is_none()
    }

    /// Empty and open again, its buffer of held descriptors kept.
    fn clear(&mut self) {
        self.timing = QueueTiming::default();
        self.pending.clear();
        self.closed = false;
    }

    /// Whether the queue may still time a descriptor (open, or holding some).
    fn active(&self) -> bool {
        !self.closed || !self.pending.is_empty()
    }
}

/// The end times of one semaphore's SIGNALs, oldest dropped once no wait can need them.
///
/// A WAIT(s, n) of queue `q` starts at `max(end of q, end of the n-th SIGNAL + latency)`.
/// Ends are nondecreasing (one queue signals), and a queue's end only grows, so once
/// `end_n + latency <= end of q` for every queue that may still time a descriptor, the
/// n-th end (and every earlier one) can no longer change any start: it is dropped and
/// only counted. Such a wait then starts at its queue's end.
#[derive(Clone, Debug, Default)]
struct SignalEnds {
    /// SIGNALs dropped from the front.
    dropped: u64,
    /// End times of the SIGNALs after the dropped ones, in order.
    ends: VecDeque<u64>,
}

impl SignalEnds {
    /// SIGNALs timed so far.
    fn count(&self) -> u64 {
        self.dropped + self.ends.len() as u64
    }

    /// When a wait for the `nth` (0-based) SIGNAL may start at the earliest: `None` before
    /// that SIGNAL is timed; 0 for a dropped one (it lies below every queue's end).
    fn ready_at(&self, nth: u64, latency: u64) -> Option<u64> {
        match nth.checked_sub(self.dropped) {
            None => Some(0),
            Some(i) => {
                let at = usize::try_from(i).ok()?;
                self.ends.get(at).map(|&t| t.saturating_add(latency))
            }
        }
    }

    /// Drops the ends that no start at or after `floor` can depend on.
    fn trim(&mut self, floor: u64, latency: u64) {
        while self
            .ends
            .front()
            .is_some_and(|&t| t.saturating_add(latency) <= floor)
        {
            self.ends.pop_front();
            self.dropped += 1;
        }
    }
}

/// Accumulates the timing of a set of queues fed descriptor by descriptor, in any
/// interleaving of the queues (the result does not depend on it). A descriptor is timed
/// as soon as what it waits for is known; until then it and those behind it in its queue
/// are held (see [`QueueTimeline::is_blocked`] and [`QueueTimeline::max_pending`]).
///
/// Memory: the held descriptors (24 bytes each), the spans if asked for, and per
/// semaphore the end times of its recent SIGNALs: those within one semaphore latency of
/// the earliest end among the queues still open (see [`QueueTimeline::close`]; a closed
/// queue with nothing held no longer counts). When every queue is fed in step, as the
/// engine and [`crate::queue_file::VerifiedQueueFile::timeline`] feed them, that is a
/// bounded window however many SIGNALs a replay has; a queue left open and idle while
/// others signal keeps every SIGNAL since its end ([`QueueTimeline::held_signals`]).
#[derive(Debug)]
pub struct QueueTimeline {
    model: TimingModel,
    queues: Vec<QueueState>,
    /// Per semaphore, its SIGNALs' end times (see [`SignalEnds`]).
    signal_ends: [SignalEnds; SEMAPHORES as usize],
    ledger: SemaphoreLedger,
    costs: CostMemo,
    spans: bool,
    pending: usize,
    max_pending: usize,
}

impl QueueTimeline {
    /// A timeline of `queues` (1..=16) empty queues; `spans` records every descriptor's span.
    pub fn new(model: TimingModel, queues: usize, spans: bool) -> Result<QueueTimeline, Error> {
        let mut timeline = QueueTimeline {
            model,
            queues: Vec::new(),
            signal_ends: Default::default(),
            ledger: SemaphoreLedger::new(),
            costs: CostMemo::default(),
            spans,
            pending: 0,
            max_pending: 0,
        };
        timeline.reset(model, queues)?;
        Ok(timeline)
    }

    /// Empties the timeline into one of `queues` (1..=16) queues timed by `model`, as
    /// [`QueueTimeline::new`] makes it (spans as it kept them), keeping its buffers.
    pub fn reset(&mut self, model: TimingModel, queues: usize) -> Result<(), Error> {
        if !(1..=MAX_QUEUES).contains(&queues) {
            return Err(Error::QueueCount {
                count: queues,
                max: MAX_QUEUES,
            });
        }
        self.queues.truncate(queues);
        self.queues.iter_mut().for_each(QueueState::clear);
        self.queues.resize_with(queues, QueueState::default);
        for ends in &mut self.signal_ends {
            ends.dropped = 0;
            ends.ends.clear();
        }
        self.model = model;
        self.ledger = SemaphoreLedger::new();
        self.costs = CostMemo::default();
        (self.pending, self.max_pending) = (0, 0);
        Ok(())
    }

    /// Appends `d` to queue `queue` and times whatever that unblocks.
    #[inline]
    pub fn push(&mut self, queue: usize, d: &Descriptor) -> Result<(), Error> {
        let cost_ps = self.costs.of(&self.model, d);
        match self.queues.get_mut(queue) {
            Some(state) if state.times_at_once(d) => {
                // The common case: nothing to wait for, nothing to record, nothing held.
                let start = state.timing.end_ps;
                state.timing.add(start, cost_ps, d.len(), self.spans);
                Ok(())
            }
            _ => self.push_held(queue, d, cost_ps),
        }
    }

    /// [`QueueTimeline::push`] of each of `batch` in order, up to the first that fails. A
    /// run of descriptors timed at once (no semaphore, on an open queue holding nothing)
    /// with one length and op is timed in one step.
    pub fn push_all(&mut self, queue: usize, batch: &[Descriptor]) -> Result<(), Error> {
        let mut rest = batch;
        while let Some(d) = rest.first() {
            let n = self.plain_run(queue, rest);
            let (now, later) = rest.split_at(n.max(1));
            match n {
                0 => self.push(queue, d)?,
                _ => self.time_plain(queue, now),
            }
            rest = later;
        }
        Ok(())
    }

    /// How many descriptors at the front of `ds` [`QueueTimeline::push`] would time at
    /// once on `queue` ([`QueueState::times_at_once`]) at one cost: each of the first's
    /// length and op.
    fn plain_run(&self, queue: usize, ds: &[Descriptor]) -> usize {
        let (Some(state), Some(first)) = (self.queues.get(queue), ds.first()) else {
            return 0;
        };
        if !state.times_at_once(first) {
            return 0;
        }
        // The queue's part of `times_at_once` holds for the rest once it holds for one;
        // the same length, op and bytes moved is the same cost and the same bytes.
        let (len, op, moved) = (first.len(), first.op(), first.moved_len());
        ds.iter()
            .take_while(|d| {
                d.len() == len && d.op() == op && d.moved_len() == moved && !d.synchronises()
            })
            .count()
    }

    /// Times `run`, a [`QueueTimeline::plain_run`] of `queue`, as its pushes would.
    fn time_plain(&mut self, queue: usize, run: &[Descriptor]) {
        if let Some(first) = run.first() {
            self.push_equal(queue, first, run.len() as u64);
        }
    }

    /// Times `n` descriptors like `d` on `queue` as their pushes would, where each is
    /// timed at once ([`QueueState::times_at_once`]): a block's rows on a queue of its
    /// own ([`crate::Block`]).
    pub(crate) fn push_equal(&mut self, queue: usize, d: &Descriptor, n: u64) {
        let Some(state) = self.queues.get_mut(queue) else {
            return;
        };
        let cost_ps = self.costs.of(&self.model, d);
        if !self.spans {
            state.timing.add_run(cost_ps, n, u64::from(d.len()) * n);
            return;
        }
        for _ in 0..n {
            let start = state.timing.end_ps;
            state.timing.add(start, cost_ps, d.len(), true);
        }
    }

    /// [`QueueTimeline::push`] for a descriptor that must be held (or rejected).
    #[inline(never)]
    fn push_held(&mut self, queue: usize, d: &Descriptor, cost_ps: u64) -> Result<(), Error> {
        let queues = self.queues.len();
        let Some(state) = self.queues.get_mut(queue) else {
            return Err(Error::NoSuchQueue { queue, queues });
        };
        let index = state.timing.descriptors + state.pending.len() as u64;
        if state.closed {
            return Err(Error::TimelineClosed { queue, index });
        }
        self.ledger.record(queue, index, d)?;
        state.pending.push_back(Pending {
            cost_ps,
            len: d.len(),
            wait: d.wait(),
            signal: d.signal(),
        });
        self.pending += 1;
        self.run_all(queue);
        self.max_pending = self.max_pending.max(self.pending);
        Ok(())
    }

    /// Promises that `queue` gets no more descriptors (a later push fails), so that the
    /// SIGNAL ends only it could still need are dropped once it holds nothing.
    pub fn close(&mut self, queue: usize) -> Result<(), Error> {
        let queues = self.queues.len();
        let Some(state) = self.queues.get_mut(queue) else {
            return Err(Error::NoSuchQueue { queue, queues });
        };
        state.closed = true;
        self.trim();
        Ok(())
    }

    /// Times queue `first`, then every queue again while some queue signalled; trims the
    /// SIGNAL ends if any were added (the only time they grow).
    fn run_all(&mut self, first: usize) {
        let mut signalled = self.run_queue(first);
        let grew = signalled;
        while signalled {
            signalled = false;
            for q in 0..self.queues.len() {
                signalled |= self.run_queue(q);
            }
        }
        if grew {
            self.trim();
        }
    }

    /// Drops the SIGNAL ends no active queue can need any more (see [`SignalEnds`]).
    fn trim(&mut self) {
        // most replays signal nothing: then there is no floor to find
        if self.signal_ends.iter().all(|e| e.ends.is_empty()) {
            return;
        }
        let floor = self
            .queues
            .iter()
            .filter(|q| q.active())
            .map(|q| q.timing.end_ps)
            .min()
            .unwrap_or(u64::MAX);
        let latency = self.model.semaphore_latency_ps();
        for ends in &mut self.signal_ends {
            ends.trim(floor, latency);
        }
    }

    /// SIGNAL end times held now, all semaphores together.
    pub fn held_signals(&self) -> usize {
        self.signal_ends.iter().map(|e| e.ends.len()).sum()
    }

    /// Times queue `q`'s held descriptors until one waits for a signal not yet timed.
    /// Returns whether any of them signalled.
    fn run_queue(&mut self, q: usize) -> bool {
        let latency = self.model.semaphore_latency_ps();
        let mut signalled = false;
        let Some(state) = self.queues.get_mut(q) else {
            return false;
        };
        while let Some(head) = state.pending.front().copied() {
            let mut start = state.timing.end_ps;
            if let Some(w) = head.wait {
                let nth = u64::from(w.count.get()) - 1;
                match self.signal_ends[w.sem.index()].ready_at(nth, latency) {
                    Some(t) => start = start.max(t),
                    None => break,
                }
            }
            state.pending.pop_front();
            self.pending -= 1;
            let end = state.timing.add(start, head.cost_ps, head.len, self.spans);
            if let Some(s) = head.signal {
                self.signal_ends[s.index()].ends.push_back(end);
                signalled = true;
            }
        }
        signalled
    }

    /// Whether queue `queue` holds descriptors waiting for a signal (an unknown queue is
    /// not blocked).
    pub fn is_blocked(&self, queue: usize) -> bool {
        self.queues
            .get(queue)
            .is_some_and(|s| !s.pending.is_empty())
    }

    /// The most descriptors ever held at once after a push.
    pub fn max_pending(&self) -> usize {
        self.max_pending
    }

    /// The report, or the first queue (lowest index) left waiting for a signal that never
    /// comes (a wait cycle or a missing signal).
    pub fn finish(mut self) -> Result<TimelineReport, Error> {
        self.take_report()
    }

    /// [`QueueTimeline::finish`] keeping the timeline, its timings taken out: it is fed
    /// again only after a [`QueueTimeline::reset`].
    pub(crate) fn take_report(&mut self) -> Result<TimelineReport, Error> {
        for (queue, state) in self.queues.iter().enumerate() {
            if let Some(w) = state.pending.front().and_then(|p| p.wait) {
                let reached = self.signal_ends[w.sem.index()].count();
                return Err(Error::deadlock(queue, state.timing.descriptors, w, reached));
            }
        }
        let timings = self
            .queues
            .iter_mut()
            .map(|s| std::mem::take(&mut s.timing));
        let queues: Vec<QueueTiming> = timings.collect();
        let makespan_ps = queues.iter().map(|q| q.end_ps).max().unwrap_or(0);
        Ok(TimelineReport {
            queues,
            makespan_ps,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::dtype::Dtype;
    use crate::test_util::{sem, wait};
    use proptest::prelude::*;

    fn copy(len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(0),
            FabricAddr(0x1000),
            len,
            Dtype::U8,
        )
        .unwrap()
    }

    fn add(len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Add,
            FabricAddr(0),
            FabricAddr(0x1000),
            len,
            Dtype::F32,
        )
        .unwrap()
    }

    fn run(generation: Generation, queues: &[Vec<Descriptor>]) -> Result<TimelineReport, Error> {
        let mut t = QueueTimeline::new(TimingModel::new(generation), queues.len(), true)?;
        for (q, descs) in queues.iter().enumerate() {
            for d in descs {
                t.push(q, d)?;
            }
        }
        t.finish()
    }

    #[test]
    fn table_has_every_generation() {
        for g in Generation::ALL {
            assert_eq!(TIMING_TABLE.iter().filter(|r| r.generation == g).count(), 1);
            let m = TimingModel::new(g);
            assert_eq!(m.generation(), g);
            assert_eq!(m.constants().dma_engines, 16);
            assert_eq!(m.semaphore_latency_ps(), 1_300_000);
        }
        let bw: Vec<u64> = TIMING_TABLE.iter().map(|r| r.engine_bytes_per_ns).collect();
        assert_eq!(bw, vec![17, 23, 33, 33]);
        let rmw: Vec<u64> = TIMING_TABLE.iter().map(|r| r.rmw_divisor).collect();
        assert_eq!(rmw, vec![2, 2, 1, 1]);
        let dge: Vec<Option<u64>> = Generation::ALL
            .iter()
            .map(|&g| TimingModel::new(g).dge_instruction_ps())
            .collect();
        assert_eq!(dge, vec![None, Some(600_000), Some(600_000), Some(600_000)]);
        assert_eq!(TIMING_TABLE[3].confidence, Confidence::Inferred);
        assert_eq!(TIMING_TABLE[2].confidence, Confidence::Observed);
    }

    #[test]
    fn fixed_cost_is_the_time_of_two_kib() {
        // ceil(2048 * 1000 / bw): 2_048_000 / 17 = 120_470.6, / 23 = 89_043.5, / 33 = 62_060.6
        let fixed: Vec<u64> = Generation::ALL
            .iter()
            .map(|&g| TimingModel::new(g).fixed_ps())
            .collect();
        assert_eq!(fixed, vec![120_471, 89_044, 62_061, 62_061]);
        // at the knee the data time equals the fixed cost (up to rounding)
        let v2 = TimingModel::new(Generation::Sunda);
        assert_eq!(v2.transfer_ps(2048, DescOp::Copy), 2 * 120_471);
    }

    #[test]
    fn descriptor_costs_by_hand() {
        let v2 = TimingModel::new(Generation::Sunda);
        let v3 = TimingModel::new(Generation::Cayman);
        let v4 = TimingModel::new(Generation::Mariana);
        // v2 copy 4 KiB: 120_471 + ceil(4_096_000 / 17) = 120_471 + 240_942
        assert_eq!(v2.descriptor_ps(&copy(4096)), 361_413);
        // v2 add 4 KiB at half throughput: 120_471 + ceil(8_192_000 / 17) = 120_471 + 481_883
        assert_eq!(v2.descriptor_ps(&add(4096)), 602_354);
        // v3 add 4 KiB: 89_044 + ceil(8_192_000 / 23) = 89_044 + 356_174
        assert_eq!(v3.descriptor_ps(&add(4096)), 445_218);
        // v4 reductions at full throughput: 62_061 + ceil(4_096_000 / 33) = 62_061 + 124_122
        assert_eq!(v4.descriptor_ps(&add(4096)), 186_183);
        assert_eq!(v4.descriptor_ps(&copy(4096)), 186_183);
        // 1 byte on v3: 89_044 + ceil(1000 / 23) = 89_044 + 44
        assert_eq!(v3.descriptor_ps(&copy(1)), 89_088);
        // 64 KiB on v4: 62_061 + ceil(65_536_000 / 33) = 62_061 + 1_985_940
        assert_eq!(v4.descriptor_ps(&copy(65_536)), 2_048_001);
        // a fill writes at copy speed
        let fill = Descriptor::fill(FabricAddr(0), 4096, Dtype::F32, 0).unwrap();
        assert_eq!(v2.descriptor_ps(&fill), 361_413);
        // a cast is charged its longer side: 2 KiB of bf16 written from 4 KiB of f32
        // read costs a 4 KiB copy, and so does 4 KiB of f32 written from 1 KiB of u8
        let cast = |op, from, len, to| {
            Descriptor::cast(op, FabricAddr(0), from, FabricAddr(1 << 20), len, to).unwrap()
        };
        assert_eq!(
            v2.descriptor_ps(&cast(DescOp::Copy, Dtype::F32, 2048, Dtype::Bf16)),
            361_413
        );
        assert_eq!(
            v2.descriptor_ps(&cast(DescOp::Copy, Dtype::U8, 4096, Dtype::F32)),
            361_413
        );
        assert_eq!(
            v2.descriptor_ps(&cast(DescOp::Add, Dtype::F32, 2048, Dtype::Bf16)),
            602_354
        );
    }

    #[test]
    fn small_transfers_are_overhead_bound_and_large_ones_near_full_bandwidth() {
        let m = TimingModel::new(Generation::Mariana);
        let full = |len: u32| (u64::from(len) * 1000).div_ceil(33);
        for len in [1u32, 256, 1024, 2047] {
            assert!(m.fixed_ps() > full(len), "{len}");
        }
        let efficiency = |len: u32| full(len) as f64 / m.transfer_ps(len, DescOp::Copy) as f64;
        assert!((efficiency(4096) - 2.0 / 3.0).abs() < 1e-3);
        assert!(efficiency(65_536) > 0.96);
    }

    #[test]
    fn independent_queues_run_back_to_back() {
        let r = run(
            Generation::Mariana,
            &[vec![copy(4096), copy(256)], vec![copy(2048)]],
        )
        .unwrap();
        // queue 0: [0, 186_183], [186_183, 186_183 + 69_819]
        assert_eq!(
            r.queues[0].spans,
            vec![
                Span {
                    start_ps: 0,
                    end_ps: 186_183
                },
                Span {
                    start_ps: 186_183,
                    end_ps: 256_002
                }
            ]
        );
        assert_eq!(
            (r.queues[0].busy_ps, r.queues[0].end_ps),
            (256_002, 256_002)
        );
        assert_eq!((r.queues[0].descriptors, r.queues[0].bytes), (2, 4352));
        assert_eq!(
            (r.queues[1].busy_ps, r.queues[1].end_ps),
            (124_122, 124_122)
        );
        assert_eq!(r.makespan_ps, 256_002);
    }

    #[test]
    fn a_wait_starts_after_the_signal_plus_latency() {
        let q0 = vec![copy(2048).with_signal(sem(0)), copy(2048)];
        let q1 = vec![copy(256).with_wait(wait(0, 1))];
        let r = run(Generation::Mariana, &[q0, q1]).unwrap();
        // signal at 124_122; start 124_122 + 1_300_000; end + 69_819
        assert_eq!(
            r.queues[1].spans,
            vec![Span {
                start_ps: 1_424_122,
                end_ps: 1_493_941
            }]
        );
        assert_eq!(r.queues[1].busy_ps, 69_819);
        assert_eq!(r.queues[0].end_ps, 248_244);
        assert_eq!(r.makespan_ps, 1_493_941);
    }

    #[test]
    fn a_wait_counts_signals() {
        // queue 0 signals semaphore 3 three times; queue 1 waits for the second
        let q0 = vec![copy(2048).with_signal(sem(3)); 3];
        let q1 = vec![copy(2048), copy(2048).with_wait(wait(3, 2))];
        let pushed_late = |order: &[usize]| {
            let mut t = QueueTimeline::new(TimingModel::new(Generation::Mariana), 2, true).unwrap();
            for &q in order {
                let descs = if q == 0 { &q0 } else { &q1 };
                for d in descs {
                    t.push(q, d).unwrap();
                }
            }
            (t.max_pending(), t.finish().unwrap())
        };
        let (held, r) = pushed_late(&[1, 0]);
        // second signal ends at 2 * 124_122 = 248_244; + 1.3 us
        assert_eq!(r.queues[1].spans[1].start_ps, 1_548_244);
        assert_eq!(held, 1);
        let (held_in_order, r2) = pushed_late(&[0, 1]);
        assert_eq!(r2, r);
        assert_eq!(held_in_order, 0);
    }

    #[test]
    fn a_wait_cycle_is_a_deadlock() {
        let q0 = vec![copy(4).with_wait(wait(1, 1)).with_signal(sem(0))];
        let q1 = vec![copy(4).with_wait(wait(0, 1)).with_signal(sem(1))];
        let e = run(Generation::Cayman, &[q0, q1]).unwrap_err();
        assert_eq!(
            e,
            Error::SemaphoreDeadlock {
                queue: 0,
                index: 0,
                sem: 1,
                count: 1,
                reached: 0
            }
        );
    }

    #[test]
    fn waiting_for_a_later_signal_of_the_same_queue_is_a_deadlock() {
        let q0 = vec![
            copy(4),
            copy(4).with_wait(wait(2, 1)),
            copy(4).with_signal(sem(2)),
        ];
        let e = run(Generation::Cayman, &[q0]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::SemaphoreDeadlock {
                    queue: 0,
                    index: 1,
                    sem: 2,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn rejects_bad_queue_counts_queues_and_second_signaller() {
        let m = TimingModel::new(Generation::Sunda);
        for n in [0, 17] {
            let e = QueueTimeline::new(m, n, false).unwrap_err();
            assert_eq!(e, Error::QueueCount { count: n, max: 16 });
        }
        let mut t = QueueTimeline::new(m, 2, false).unwrap();
        assert_eq!(
            t.push(2, &copy(1)).unwrap_err(),
            Error::NoSuchQueue {
                queue: 2,
                queues: 2
            }
        );
        t.push(0, &copy(1).with_signal(sem(5))).unwrap();
        assert!(matches!(
            t.push(1, &copy(1).with_signal(sem(5))),
            Err(Error::SemaphoreOwner {
                sem: 5,
                owner: 0,
                ..
            })
        ));
        assert!(!t.is_blocked(0) && !t.is_blocked(7));
        assert!(t.finish().unwrap().queues[0].spans.is_empty());
    }

    /// A 1M-descriptor signalling queue and a queue that waits for every 1024th signal:
    /// the timeline holds at most the signals since the waiting queue's last wait.
    #[test]
    fn signal_history_stays_bounded_over_a_million_signals() {
        const N: u32 = 1 << 20;
        const EVERY: u32 = 1024;
        let m = TimingModel::new(Generation::Mariana);
        let mut t = QueueTimeline::new(m, 2, false).unwrap();
        let signal = copy(256).with_signal(sem(0));
        let mut most = 0;
        for i in 1..=N {
            t.push(0, &signal).unwrap();
            if i % EVERY == 0 {
                t.push(1, &copy(256).with_wait(wait(0, i))).unwrap();
            }
            most = most.max(t.held_signals());
        }
        // queue 1 keeps queue 0's signals since its last wait: EVERY - 1 of them, plus
        // the one just pushed
        assert_eq!(most, EVERY as usize);
        t.close(0).unwrap();
        t.close(1).unwrap();
        assert_eq!(t.held_signals(), 0);
        let r = t.finish().unwrap();
        let (cost, latency) = (m.transfer_ps(256, DescOp::Copy), m.semaphore_latency_ps());
        assert_eq!(r.queues[0].end_ps, u64::from(N) * cost);
        assert_eq!(r.queues[1].end_ps, u64::from(N) * cost + latency + cost);
        assert_eq!(r.queues[1].descriptors, u64::from(N / EVERY));
    }

    #[test]
    fn an_open_idle_queue_keeps_the_signals_until_it_closes() {
        let m = TimingModel::new(Generation::Mariana);
        let (cost, latency) = (m.transfer_ps(256, DescOp::Copy), m.semaphore_latency_ps());
        let mut t = QueueTimeline::new(m, 2, true).unwrap();
        for _ in 0..100 {
            t.push(0, &copy(256).with_signal(sem(4))).unwrap();
        }
        // queue 1 may still wait for the first signal
        assert_eq!(t.held_signals(), 100);
        t.push(1, &copy(256).with_wait(wait(4, 100))).unwrap();
        // queue 1 now ends past every signal: only queue 0's last 1.3 us of signals stay,
        // 1_300_000 / 69_819 -> the 18 latest signals plus the newest end
        t.push(0, &copy(256).with_signal(sem(4))).unwrap();
        let kept = latency.div_ceil(cost) as usize;
        assert_eq!(t.held_signals(), kept);
        // a wait for a dropped signal starts at its queue's end, as it would have anyway
        t.push(1, &copy(256).with_wait(wait(4, 3))).unwrap();
        t.close(1).unwrap();
        assert_eq!(
            t.push(1, &copy(8)).unwrap_err(),
            Error::TimelineClosed { queue: 1, index: 2 }
        );
        assert_eq!(
            t.close(2).unwrap_err(),
            Error::NoSuchQueue {
                queue: 2,
                queues: 2
            }
        );
        let r = t.finish().unwrap();
        let first = 100 * cost + latency;
        assert_eq!(
            r.queues[1].spans,
            vec![
                Span {
                    start_ps: first,
                    end_ps: first + cost
                },
                Span {
                    start_ps: first + cost,
                    end_ps: first + 2 * cost
                },
            ]
        );
    }

    /// Random queues; queue `q` signals only semaphore `q`; waits are random (some never
    /// met, some cyclic).
    fn arb_queues() -> impl Strategy<Value = Vec<Vec<Descriptor>>> {
        arb_queues_of(1u32..=65_536, 0.5)
    }

    /// [`arb_queues`] with lengths from `len` and a wait on a descriptor with probability
    /// `waits`: copies, adds and f32 -> bf16 casts (which move twice their length).
    fn arb_queues_of(
        len: impl Strategy<Value = u32>,
        waits: f64,
    ) -> impl Strategy<Value = Vec<Vec<Descriptor>>> {
        let desc = (
            len,
            0u8..3,
            proptest::option::weighted(waits, (0u8..4, 1u32..4)),
            any::<bool>(),
        );
        proptest::collection::vec(proptest::collection::vec(desc, 0..40), 1..5).prop_map(|qs| {
            qs.into_iter()
                .enumerate()
                .map(|(q, ds)| {
                    ds.into_iter()
                        .map(|(len, kind, w, s)| {
                            let elems = (len / 4).max(1);
                            let mut d = match kind {
                                0 => copy(len),
                                1 => add(elems * 4),
                                _ => Descriptor::cast(
                                    DescOp::Copy,
                                    FabricAddr(0),
                                    Dtype::F32,
                                    FabricAddr(1 << 20),
                                    elems * 2,
                                    Dtype::Bf16,
                                )
                                .unwrap(),
                            };
                            if let Some((id, n)) = w {
                                d = d.with_wait(wait(id, n));
                            }
                            if s {
                                d = d.with_signal(sem(q as u8));
                            }
                            d
                        })
                        .collect()
                })
                .collect()
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn timing_does_not_depend_on_push_order(queues in arb_queues(), seed in any::<u64>()) {
            let model = TimingModel::new(Generation::Sunda);
            let in_order = run(Generation::Sunda, &queues);
            // push in a seeded pseudo-random interleaving of the queues
            let mut t = QueueTimeline::new(model, queues.len(), true).unwrap();
            let mut next = vec![0usize; queues.len()];
            let mut x = seed | 1;
            while next.iter().zip(&queues).any(|(n, q)| *n < q.len()) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let q = (x % queues.len() as u64) as usize;
                if let Some(d) = queues[q].get(next[q]) {
                    t.push(q, d).unwrap();
                    next[q] += 1;
                } else {
                    // closing lets older signals go: the timing must not change
                    t.close(q).unwrap();
                }
            }
            prop_assert_eq!(t.finish(), in_order);
        }

        /// Batches (runs of one length form often) time as their descriptors pushed one
        /// by one, up to the same first error.
        #[test]
        fn pushing_a_batch_times_as_pushing_each(
            queues in arb_queues_of(prop_oneof![Just(4u32), Just(256), 1u32..=65_536], 0.05),
            batch in 1usize..8,
            spans in any::<bool>(),
        ) {
            let model = TimingModel::new(Generation::Cayman);
            let mut each = QueueTimeline::new(model, queues.len(), spans).unwrap();
            let mut all = QueueTimeline::new(model, queues.len(), spans).unwrap();
            let rounds = queues.iter().map(Vec::len).max().unwrap_or(0).div_ceil(batch);
            for r in 0..rounds {
                for (q, ds) in queues.iter().enumerate() {
                    let chunk = ds.get(r * batch..ds.len().min((r + 1) * batch)).unwrap_or(&[]);
                    let one_by_one = chunk.iter().try_for_each(|d| each.push(q, d));
                    let together = all.push_all(q, chunk);
                    prop_assert_eq!(&one_by_one, &together);
                    if together.is_err() {
                        return Ok(());
                    }
                }
            }
            prop_assert_eq!(each.finish(), all.finish());
        }

        #[test]
        fn without_semaphores_a_queue_ends_at_the_sum_of_its_costs(
            lens in proptest::collection::vec(1u32..=65_536, 1..50),
        ) {
            let model = TimingModel::new(Generation::Cayman);
            let q: Vec<Descriptor> = lens.iter().map(|&l| copy(l)).collect();
            let r = run(Generation::Cayman, std::slice::from_ref(&q)).unwrap();
            let total: u64 = q.iter().map(|d| model.descriptor_ps(d)).sum();
            prop_assert_eq!(r.queues[0].end_ps, total);
            prop_assert_eq!(r.queues[0].busy_ps, total);
            prop_assert_eq!(r.makespan_ps, total);
            let contiguous = r.queues[0].spans.windows(2).all(|w| w[0].end_ps == w[1].start_ps);
            prop_assert!(contiguous);
        }
    }
}
