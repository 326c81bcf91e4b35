//! The multi-queue DMA engine: up to 16 descriptor queues (the 16 DMA rings of a
//! NeuronCore) executed concurrently against one [`Fabric`], each queue strictly in order,
//! semaphores ordering descriptors across queues.
//!
//! # Entry points
//!
//! - [`Engine::run`] replays in-memory queues (`&[Vec<Descriptor>]`, what the DGE makes).
//! - [`Engine::replay_file`] replays a [`VerifiedQueueFile`] in two streaming passes.
//! - [`Engine::stream`] lets a producer (the DGE) push descriptors through a [`Session`]
//!   while the engine executes them.
//! - [`Engine::validate`] then [`Engine::run_beside`] replay in-memory queues validated
//!   ahead, with other work done on the caller while the thread pool runs them: that work
//!   may write only pages the replay neither reads nor writes, and learns whether it read
//!   a page the replay writes ([`Beside`]).
//! - [`Engine::replay_async`] and [`Engine::replay_file_async`] are `run` and
//!   `replay_file` as futures (the async face, see # Execution).
//! - [`execute_sequential`] is the plain synchronous reference the tests compare against.
//!
//! Every replay returns a [`ReplayReport`]: its [`ReplaySummary`] follows from the queues
//! and the fabric alone (per-queue descriptors, bytes, timing-model busy time, totals,
//! skipped and failed counts, makespan) and is equal for every worker count and schedule
//! (its totals also for every queue count); its [`ExecutionStats`] are measured and kept
//! apart.
//!
//! # Fail closed
//!
//! [`Engine::run`] and [`Engine::replay_file`] validate every descriptor before any byte
//! is written: its source range (every op but FILL) and destination range pass
//! [`Fabric::check`] (inside one region: no partition crossing, no 64-bit overflow), each
//! semaphore has one signalling queue, every WAIT is reached and no wait cycle stalls the
//! queues (the [`QueueTimeline`] of the queues must finish), and, with
//! [`RaceCheck::On`], no two queues touch the same bytes unordered. Only then are the
//! destination pages reserved ([`Fabric::reserve`]) and the queues executed. A rejected
//! replay leaves the fabric's contents exactly as they were; a bad descriptor's error names
//! its queue, its index in the queue and the fabric's error ([`Error::ReplayDescriptor`]).
//! With [`InvalidPolicy::Skip`] a descriptor whose range fails the check is skipped
//! instead (it moves nothing, still waits and signals, and is counted in the report).
//!
//! A [`Session`] cannot see the future: it validates each [`Session::push`] as a whole
//! before any of it executes, so a rejected push writes nothing, but pushes accepted
//! earlier run (see [`Session`]).
//!
//! # Execution
//!
//! One executor runs every replay. Validation's result is compiled into a schedule of
//! units of work: queue segments (each queue cut at its semaphore points, a segment
//! ordered after the one before it and after the segment holding the SIGNAL its WAIT
//! needs), or, where the queues touch independent pages, page buckets (descriptors dealt
//! by destination page, so that no two threads write one page). The executor runs the
//! schedule on a thread pool by work claiming: the caller and the pool's threads each
//! claim the next ready unit; one thread is sequential execution. A replay within
//! [`EngineConfig::inline`] runs on the caller alone, since waking the pool costs more
//! than it saves there. A streamed replay (a queue file, a [`Session`]) is held per queue
//! and run window by window, each window a schedule of queue segments.
//!
//! tokio is the engine's async face over this synchronous core: [`Engine::replay_async`]
//! and [`Engine::replay_file_async`] are futures that move the fabric (and the file) to
//! tokio's blocking pool, run the synchronous replay there and give them back with its
//! result. A file replayed as a future is read ahead by a reader task on the blocking pool
//! while the executor runs the window before, so reading overlaps execution; the
//! synchronous [`Engine::replay_file`] reads a window, then runs it. Tests and fuzzers
//! drive the synchronous core directly.
//!
//! # Determinism
//!
//! Descriptors that touch the same bytes are ordered either by their queue or by a
//! semaphore, so the final memory is bit-identical for any queue count, worker count and
//! schedule. The DGE guarantees this by keeping every descriptor that writes a destination
//! byte in one queue; [`RaceCheck::On`] checks it: where two queues write overlapping bytes,
//! or one writes bytes another reads, and no semaphore orders them, the replay is rejected
//! with [`Error::Race`] (both queues, descriptor indices and the bytes) before it runs.
//!
//! A semaphore orders a WAIT(s, n) descriptor, and everything after it in its queue, after
//! the descriptors of the signalling queue up to and including its n-th SIGNAL of `s`, and
//! transitively after whatever those were ordered after (vector clocks over the segments
//! between semaphore operations; see the `race` module).

mod ahead;
mod cast;
mod exec;
mod executor;
mod pool;
mod race;
mod report;
mod schedule;
mod sequential;
mod session;
mod share;
mod source;
mod validate;

use std::future::Future;
use std::io::{Read, Seek};
use std::sync::Arc;
use std::time::Duration;

use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::fabric::Fabric;
use crate::queue_file::{VerifiedQueueFile, MAX_BATCH, MAX_QUEUES};
use crate::timing::TimelineReport;
use crate::FabricAddr;

pub use report::{ExecutionStats, QueueReport, ReplayReport, ReplaySummary};
pub use sequential::execute_sequential;
pub use session::Session;

use schedule::Schedule;
use share::WriteShare;
use source::{FileSource, QueueSource, Slices};
use validate::Plan;

#[cfg(doc)]
use crate::timing::QueueTimeline;

/// Whether the engine checks, before executing, that no two queues touch the same bytes
/// without a semaphore ordering them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RaceCheck {
    /// Trust the producer (the DGE keeps conflicting descriptors in one queue).
    #[default]
    Off,
    /// Reject a replay with an unordered cross-queue write/write or write/read overlap.
    /// Costs one interval (about 56 bytes) per run of contiguous descriptors in memory.
    On,
}

/// What happens to a descriptor whose source or destination range fails the fabric check.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum InvalidPolicy {
    /// The whole replay is rejected and nothing is written (fail closed).
    #[default]
    Reject,
    /// The descriptor moves nothing, still waits and signals, and is counted as skipped.
    /// (Sessions always reject.)
    Skip,
}

/// Which replays are small enough to run on the calling thread alone: those of at most
/// `descriptors` descriptors moving at most `bytes` bytes (both limits hold).
///
/// Handing a replay to the thread pool costs thread wake-ups whatever the replay's size,
/// so a small replay runs sooner on the caller alone (`BENCHMARKS.md`). Where a replay
/// ran changes nothing but its [`ExecutionStats`] (the memory and the [`ReplaySummary`]
/// are the same for any schedule).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InlineLimit {
    /// Descriptors at most.
    pub descriptors: u64,
    /// Bytes moved at most.
    pub bytes: u64,
}

impl InlineLimit {
    /// Only empty replays run on the caller: every other one goes to the workers.
    pub const OFF: InlineLimit = InlineLimit {
        descriptors: 0,
        bytes: 0,
    };

    /// Whether a replay of `descriptors` moving `bytes` runs on the caller.
    pub fn admits(self, descriptors: u64, bytes: u64) -> bool {
        descriptors <= self.descriptors && bytes <= self.bytes
    }
}

impl Default for InlineLimit {
    /// 4096 descriptors (one DGE instruction's most) and 256 KiB (`BENCHMARKS.md`).
    fn default() -> InlineLimit {
        InlineLimit {
            descriptors: 4096,
            bytes: 256 << 10,
        }
    }
}

/// How the engine runs. [`EngineConfig::default`] gives 16 queues, one worker per core
/// (at most 16), batches of 2048 descriptors, windows of 2 batches, no race check,
/// [`InvalidPolicy::Reject`], the default [`InlineLimit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EngineConfig {
    /// DMA rings available, `1..=16`: a replay may use at most this many queues.
    pub queues: usize,
    /// Threads that run a replay: the caller and `workers - 1` in the thread pool,
    /// `1..=256`.
    pub workers: usize,
    /// Descriptors a streamed replay reads at once, `1..=8192` ([`MAX_BATCH`]).
    pub batch: usize,
    /// Batches per queue a streamed replay holds before it runs them, `1..=1024`: a
    /// window of at most `channel_depth * batch` descriptors per queue.
    pub channel_depth: usize,
    /// The validating mode.
    pub race_check: RaceCheck,
    /// What to do with a descriptor off the fabric.
    pub invalid: InvalidPolicy,
    /// Which replays run on the calling thread instead of the workers.
    pub inline: InlineLimit,
    /// How long the thread pool spins waiting for the next replay before it sleeps (and
    /// the caller spins waiting for it), at most [`MAX_LINGER`]: waking a sleeping thread
    /// costs a good part of a small replay. Zero spins not at all.
    pub linger: Duration,
}

/// The longest [`EngineConfig::linger`].
pub const MAX_LINGER: Duration = Duration::from_millis(10);

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        EngineConfig {
            queues: MAX_QUEUES,
            workers: cores.clamp(1, MAX_QUEUES),
            batch: 2048,
            channel_depth: 2,
            race_check: RaceCheck::Off,
            invalid: InvalidPolicy::Reject,
            inline: InlineLimit::default(),
            linger: Duration::from_micros(250),
        }
    }
}

impl EngineConfig {
    /// Checks every field's range.
    pub fn check(&self) -> Result<(), Error> {
        let rule = |field, value, lo, hi, rule| {
            if (lo..=hi).contains(&value) {
                Ok(())
            } else {
                Err(Error::EngineConfig { field, value, rule })
            }
        };
        rule(
            "queues",
            self.queues,
            1,
            MAX_QUEUES,
            "must be 1..=16 (the DMA rings)",
        )?;
        rule("workers", self.workers, 1, 256, "must be 1..=256 threads")?;
        rule(
            "batch",
            self.batch,
            1,
            MAX_BATCH,
            "must be 1..=8192 descriptors",
        )?;
        rule(
            "channel_depth",
            self.channel_depth,
            1,
            1024,
            "must be 1..=1024 batches",
        )?;
        let linger_us = usize::try_from(self.linger.as_micros()).unwrap_or(usize::MAX);
        let most = MAX_LINGER.as_micros() as usize;
        rule(
            "linger_us",
            linger_us,
            0,
            most,
            "must be at most 10 ms (MAX_LINGER)",
        )
    }
}

/// The engine: a configuration and the thread pool that runs replays with the caller
/// (started once, reused by every replay). The synchronous calls block their caller
/// until the replay is done; async code awaits [`Engine::replay_async`] or
/// [`Engine::replay_file_async`] instead, which run them on tokio's blocking pool.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    /// The thread pool that runs replays with the caller.
    pool: pool::ThreadPool,
    /// The validation buffers of the last replay (its page set, timeline and per-queue
    /// counters), emptied: the next one's validation fills them without allocating again.
    kept: std::sync::Mutex<Option<validate::Kept>>,
    /// The page-bucket buffers of the last replay dealt by page.
    buckets: schedule::BucketBuffers,
}

impl Engine {
    /// Checks `config` and starts the thread pool.
    pub fn new(config: EngineConfig) -> Result<Engine, Error> {
        config.check()?;
        let pool = pool::ThreadPool::new(config.workers - 1, config.linger).map_err(|e| {
            Error::EngineRuntime {
                message: e.to_string(),
            }
        })?;
        Ok(Engine {
            config,
            pool,
            kept: std::sync::Mutex::new(None),
            buckets: schedule::BucketBuffers::default(),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    /// Replays `queues` (1..=`config.queues` of them; queue `q` is DMA ring `q`) on
    /// `fabric`, timed on the fabric's generation. Validates everything first (see the
    /// module docs): on error the fabric's contents are unchanged.
    pub fn run(
        &self,
        fabric: &mut Fabric,
        queues: &[Vec<Descriptor>],
    ) -> Result<ReplayReport, Error> {
        self.replay(fabric, &mut Slices::new(queues))
    }

    /// Replays a verified queue file: a first streaming pass validates every descriptor
    /// (as [`Engine::run`]), a second streams the queues again in batches into execution,
    /// so at most a bounded window of descriptors is held whatever the file's size. The
    /// file's generation must be the fabric's. The file is rewound before and after.
    ///
    /// # A file that changes under the replay
    ///
    /// Both passes read through [`VerifiedQueueFile::read_queue`], which checks every
    /// chunk of [`crate::queue_file::DIGEST_CHUNK`] descriptors against the digest
    /// recorded when the file was verified, before handing out any of it. So the
    /// validation pass validates exactly the verified descriptors, and the execution pass
    /// executes only descriptors the validation pass checked. What a change costs depends
    /// on when it is read:
    ///
    /// - in the validation pass: the replay fails with [`Error::QueueFileChanged`] and the
    ///   fabric is unchanged (fail closed, as for any rejected replay);
    /// - in the execution pass: the replay stops with [`Error::QueueFileChanged`]; no
    ///   descriptor of the changed chunk (nor of the batch that would have held it) runs,
    ///   and no queue starts another batch, but the batches that had already started
    ///   have run. The fabric then holds the effects of a validated prefix of each queue:
    ///   it is not rolled back (that would need a copy of every page the replay writes).
    ///   Hold the file read-only for the replay where that matters.
    ///
    /// A read failure (I/O, truncation) in either pass is handled the same way.
    pub fn replay_file<R: Read + Seek + Send>(
        &self,
        fabric: &mut Fabric,
        file: &mut VerifiedQueueFile<R>,
    ) -> Result<ReplayReport, Error> {
        same_generation(file, fabric)?;
        file.rewind();
        let result = self.replay(fabric, &mut FileSource::new(file));
        file.rewind();
        result
    }

    /// Streams descriptors from `produce` into `queues` (1..=`config.queues`) queues while
    /// they execute. `destinations` declares every range the descriptors may write: they are
    /// checked and reserved up front (contents unchanged), and a pushed descriptor that
    /// writes outside them is rejected. See [`Session`] for the per-push guarantee. Returns
    /// once every accepted descriptor has run: `produce`'s error if it failed (after
    /// running what it had pushed), else the report. Not available with [`RaceCheck::On`].
    pub fn stream<F>(
        &self,
        fabric: &mut Fabric,
        queues: usize,
        destinations: &[(FabricAddr, u64)],
        produce: F,
    ) -> Result<ReplayReport, Error>
    where
        F: FnOnce(&mut Session<'_>) -> Result<(), Error>,
    {
        if self.config.race_check == RaceCheck::On {
            return Err(Error::RaceCheckStreaming);
        }
        self.check_queue_count(queues)?;
        session::stream(self, fabric, queues, destinations, produce)
    }

    fn check_queue_count(&self, count: usize) -> Result<(), Error> {
        if !(1..=self.config.queues).contains(&count) {
            return Err(Error::QueueCount {
                count,
                max: self.config.queues,
            });
        }
        Ok(())
    }

    /// Validates in-memory `queues` for a later [`Engine::run_beside`] (the same checks as
    /// [`Engine::run`]; the fabric's contents are not read, so the queues may be validated
    /// while another replay runs). On error nothing is kept.
    pub fn validate(
        &self,
        fabric: &Fabric,
        queues: Vec<Vec<Descriptor>>,
    ) -> Result<Validated, Error> {
        let mut plan = self.plan(fabric, &mut Slices::new(&queues))?;
        plan.ahead = true;
        // Page buckets for a run on the caller and the thread pool are dealt now, beside
        // the replay before.
        let buckets = self
            .page_buckets(&queues, &plan, false)
            .map(|grouped| Schedule::page_buckets(&queues, grouped, &self.buckets));
        Ok(Validated {
            queues,
            plan,
            buckets: std::sync::Mutex::new(buckets),
            generation: fabric.generation(),
            config: self.config,
        })
    }

    /// Runs `validated` on `fabric` (as [`Engine::run`] would have run its queues) and
    /// calls `beside` on this thread while the queues run: the replay starts on the
    /// engine's thread pool and this thread joins it once `beside` returns. A replay
    /// within [`EngineConfig::inline`] runs on this thread alone, after `beside` (one
    /// schedule of the overlap, so `beside` sees what it may see of a replay running
    /// beside it). `beside` gets a
    /// [`Beside`]: the fabric to read, and to write where the replay neither reads nor
    /// writes. So the next replay's inputs can be written, and its
    /// descriptors generated and validated, while this one runs; what `beside` read of the
    /// pages the replay writes may be stale ([`Beside::read_the_replay`]).
    ///
    /// `validated` must come from this engine's [`Engine::validate`] on a fabric of the
    /// generation ([`Error::NotValidatedHere`] otherwise, before anything runs). The
    /// report equals [`Engine::run`]'s but for its [`ExecutionStats`]. A replay that
    /// fails while it runs (which validation rules out but for a panic) returns its error
    /// and drops `beside`'s result; what `beside` wrote stays written. A panic of `beside`
    /// unwinds from here once the replay has run, the fabric back in place.
    pub fn run_beside<R>(
        &self,
        fabric: &mut Fabric,
        validated: &Validated,
        beside: impl FnOnce(&mut Beside<'_>) -> R,
    ) -> Result<(ReplayReport, R), Error> {
        let here = (fabric.generation(), self.config);
        if (validated.generation, validated.config) != here {
            return Err(Error::NotValidatedHere {
                validated: describe(validated.generation, &validated.config),
                running: describe(here.0, &here.1),
            });
        }
        let mut source = Slices::new(&validated.queues);
        let buckets = lock(&validated.buckets).take();
        self.execute(fabric, &mut source, (&validated.plan, buckets), beside)
    }

    /// The queues of `validated`, given back (to be filled again); the engine keeps its
    /// validation buffers for the next validation.
    pub fn recycle(&self, validated: Validated) -> Vec<Vec<Descriptor>> {
        self.keep(validated.plan);
        validated.queues
    }

    /// Whether in-memory `queues` validated into `plan` run as page buckets (`None`: as
    /// queue segments), and if so whether grouped by page: where they have no semaphore,
    /// [`Plan::deals_by_page`], at most [`schedule::DEALT_MAX`] descriptors, and run on
    /// more than one thread or on the caller alone (`inline`).
    fn page_buckets(&self, queues: &[Vec<Descriptor>], plan: &Plan, inline: bool) -> Option<bool> {
        let descriptors = queues.iter().map(Vec::len).sum::<usize>();
        let by_page = (inline || self.config.workers > 1)
            && !plan.semaphores
            && plan.deals_by_page()
            && descriptors <= schedule::DEALT_MAX;
        by_page.then(|| schedule::grouped(descriptors, plan.pages.len()))
    }

    /// Whether a validated replay is small enough to run on the caller alone
    /// ([`EngineConfig::inline`]).
    fn inline(&self, timeline: &TimelineReport) -> bool {
        let sum = |f: fn(&crate::timing::QueueTiming) -> u64| timeline.queues.iter().map(f).sum();
        (self.config.inline).admits(sum(|q| q.descriptors), sum(|q| q.bytes))
    }

    /// Validate all, reserve, execute: the body of `run` and `replay_file`.
    fn replay<S: QueueSource>(
        &self,
        fabric: &mut Fabric,
        source: &mut S,
    ) -> Result<ReplayReport, Error> {
        let plan = self.plan(fabric, source)?;
        let no_beside = |_: &mut Beside<'_>| ();
        let (report, ()) = self.execute(fabric, source, (&plan, None), no_beside)?;
        self.keep(plan);
        Ok(report)
    }

    /// The validation pass over `source` (left at its end), with the buffers kept from
    /// the last replay.
    fn plan<S: QueueSource>(&self, fabric: &Fabric, source: &mut S) -> Result<Plan, Error> {
        self.check_queue_count(source.queues())?;
        let kept = lock(&self.kept).take();
        let on = (&self.config, &self.pool);
        validate::validate(fabric, source, on, kept.unwrap_or_default())
    }

    /// Keeps `plan`'s buffers, emptied, for the next replay's validation.
    fn keep(&self, plan: Plan) {
        *lock(&self.kept) = Some(plan.into_kept());
    }

    /// Reserves `plan`'s destinations and executes `source` (validated into `plan`), and
    /// calls `beside` (see [`Engine::run_beside`]).
    fn execute<S: QueueSource, R>(
        &self,
        fabric: &mut Fabric,
        source: &mut S,
        (plan, buckets): (&Plan, Option<Schedule<'static>>),
        beside: impl FnOnce(&mut Beside<'_>) -> R,
    ) -> Result<(ReplayReport, R), Error> {
        // This replay's destinations are opened; every page it reads is closed, so read
        // without a lock while the queues run (Fabric::reopen).
        plan.pages.reopen(fabric, plan.footprint.read_pages())?;
        source.rewind();
        // In-memory queues compile into a schedule (page buckets where they are dealt by
        // page, else queue segments) run by the executor: on the caller alone if small
        // enough, else on the caller and the thread pool; work beside the replay runs on the
        // caller while the thread pool starts, or alone before it. A streamed source runs window
        // by window (see the `session` module), work beside after it.
        let inline = self.inline(&plan.timeline);
        let reads = plan.footprint.read_pages();
        let (execution, other) = match source.in_memory() {
            Some(queues) => {
                let schedule = match (self.page_buckets(queues, plan, inline), buckets) {
                    (Some(_), Some(buckets)) => buckets,
                    (Some(grouped), None) => Schedule::page_buckets(queues, grouped, &self.buckets),
                    (None, _) => Schedule::segments(queues)?,
                };
                let beside = |f: &Fabric, share: &_| beside(&mut Beside::new(f, reads, share));
                let (stats, _, other) = self.execute_schedule(fabric, &schedule, inline, beside);
                self.buckets.keep(schedule);
                (stats?, other)
            }
            None => {
                let stats = session::run_source(self, fabric, source)?;
                let alone = WriteShare::default();
                (stats, beside(&mut Beside::new(fabric, reads, &alone)))
            }
        };
        let timeline = plan.timeline.clone();
        let report = ReplayReport {
            summary: ReplaySummary::new(fabric.generation(), timeline, &plan.skipped, 0),
            execution,
        };
        Ok((report, other))
    }
}

impl Engine {
    /// Runs `schedule` (validated, its destinations reserved) on the executor: on the
    /// caller alone if `inline`, else on the caller and the thread pool; and calls `beside` on
    /// the caller with the fabric: while the thread pool starts the run, before the caller joins
    /// it (alone: before the run). A pool thread out of units meanwhile helps with the
    /// writes `beside` makes through the [`WriteShare`] it is given, until `beside`
    /// returns. A panic of `beside` unwinds from here once the run is over.
    fn execute_schedule<R>(
        &self,
        fabric: &Fabric,
        schedule: &Schedule<'_>,
        inline: bool,
        beside: impl FnOnce(&Fabric, &WriteShare) -> R,
    ) -> (Result<ExecutionStats, Error>, u64, R) {
        let started = std::time::Instant::now();
        let skip = self.config.invalid == InvalidPolicy::Skip;
        let ran = std::sync::atomic::AtomicU64::new(0);
        let run = |unit: &schedule::Unit<'_>| exec::run_unit(fabric, skip, unit, &ran);
        let share = WriteShare::default();
        let (outcome, (workers, other)) = executor::execute(schedule, run, |job| {
            let job = || {
                job();
                // SAFETY: `job` returned, so this thread runs no more of the replay's
                // units (the executor hands a worker out only when it claims nothing more).
                unsafe { share.help(fabric) };
            };
            let meanwhile = || {
                let _end = share::EndHelping(&share);
                beside(fabric, &share)
            };
            match inline {
                true => (1, pool::beside_then_job(&job, meanwhile)),
                false => match self.pool.run_beside(&job, meanwhile) {
                    (true, other) => (self.pool.helpers() + 1, other),
                    (false, other) => (1, other),
                },
            }
        });
        let stats = outcome.map(|()| ExecutionStats {
            wall: started.elapsed(),
            workers,
            units: schedule.units().len() as u64,
            max_buffered: match schedule.by_page() {
                true => schedule.descriptors(),
                false => 0,
            },
            page_buckets: schedule.by_page(),
        });
        (stats, ran.into_inner(), other)
    }
}

/// [`Error::GenerationMismatch`] unless `file` is of `fabric`'s generation.
fn same_generation<R: Read + Seek>(
    file: &VerifiedQueueFile<R>,
    fabric: &Fabric,
) -> Result<(), Error> {
    let generation = file.header().generation();
    if generation != fabric.generation() {
        return Err(Error::GenerationMismatch {
            file: generation.name(),
            fabric: fabric.generation().name(),
        });
    }
    Ok(())
}

/// The async face: replays as futures, run by the synchronous engine on tokio's
/// blocking pool. The fabric (and the queue file) move into the future and come back
/// with the result, so nothing is borrowed across an await.
impl Engine {
    /// [`Engine::run`] as a future: `queues` replayed on `fabric` on tokio's blocking
    /// pool (and the engine's thread pool), the fabric given back with the result (the
    /// same result and fabric as [`Engine::run`]). Nothing runs until the future is
    /// polled, which must be inside a tokio runtime; a dropped future's replay still runs
    /// to its end. A panic of the replay unwinds from the await.
    pub fn replay_async(
        self: &Arc<Self>,
        mut fabric: Fabric,
        queues: Vec<Vec<Descriptor>>,
    ) -> impl Future<Output = (Fabric, Result<ReplayReport, Error>)> + Send + 'static {
        let engine = Arc::clone(self);
        async move {
            let replay = move || {
                let result = engine.run(&mut fabric, &queues);
                (fabric, result)
            };
            joined(tokio::task::spawn_blocking(replay).await)
        }
    }

    /// [`Engine::replay_file`] as a future, with the reading of the file overlapping
    /// execution: the validation pass reads the file on tokio's blocking pool as
    /// [`Engine::replay_file`] does; for the execution pass a reader task on the blocking
    /// pool reads each queue's next batches (at most [`EngineConfig::batch`] times
    /// [`EngineConfig::channel_depth`] descriptors of a queue ahead) while the executor
    /// runs the window before. The fabric and the file (rewound) are given back with the
    /// result, which equals [`Engine::replay_file`]'s; its
    /// [`ExecutionStats::max_buffered`] does not count what is read ahead. A file that
    /// changes under the replay is handled as by [`Engine::replay_file`], but the
    /// execution pass may run the batches read ahead of the changed chunk before it
    /// stops. Polling and dropping as for [`Engine::replay_async`].
    pub fn replay_file_async<R: Read + Seek + Send + 'static>(
        self: &Arc<Self>,
        mut fabric: Fabric,
        file: VerifiedQueueFile<R>,
    ) -> impl Future<Output = (Fabric, VerifiedQueueFile<R>, Result<ReplayReport, Error>)> + Send + 'static
    {
        let engine = Arc::clone(self);
        async move {
            let runtime = tokio::runtime::Handle::current();
            let replay = move || {
                if let Err(e) = same_generation(&file, &fabric) {
                    return (fabric, file, Err(e));
                }
                let hold = engine
                    .config
                    .batch
                    .saturating_mul(engine.config.channel_depth);
                let mut source = ahead::Ahead::new(file, runtime, engine.config.batch, hold);
                let result = engine.replay(&mut fabric, &mut source);
                (fabric, source.into_file(), result)
            };
            joined(tokio::task::spawn_blocking(replay).await)
        }
    }
}

/// What a blocking task returned; its panic unwinds from here.
fn joined<T>(joined: Result<T, tokio::task::JoinError>) -> T {
    match joined {
        Ok(value) => value,
        Err(e) => match e.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // A blocking task is not cancelled; only a runtime shutting down drops it.
            Err(e) => panic!("the replay task did not finish: {e}"),
        },
    }
}

/// A generation and an engine configuration, as [`Error::NotValidatedHere`] names them.
fn describe(generation: crate::Generation, config: &EngineConfig) -> String {
    format!("{} with {config:?}", generation.name())
}

/// In-memory queues validated by [`Engine::validate`], ready for [`Engine::run_beside`].
#[derive(Debug)]
pub struct Validated {
    queues: Vec<Vec<Descriptor>>,
    plan: Plan,
    /// The queues dealt by destination page, for the first run (see [`Engine::validate`]).
    buckets: std::sync::Mutex<Option<Schedule<'static>>>,
    generation: crate::Generation,
    config: EngineConfig,
}

impl Validated {
    /// The queues.
    pub fn queues(&self) -> &[Vec<Descriptor>] {
        &self.queues
    }

    /// Whether running the replay may read or write a byte of the `len` bytes at `addr`:
    /// a byte between the lowest and the highest byte its descriptors read, or between
    /// the lowest and the highest they write (descriptors skipped under the Skip policy
    /// do neither). `false` means the bytes are the same whether written before or after
    /// the replay runs.
    pub fn touches(&self, addr: FabricAddr, len: u64) -> bool {
        self.plan.footprint.meets(addr.0, len)
    }
}

/// What the work beside a running replay may do with the fabric ([`Engine::run_beside`]).
#[derive(Debug)]
pub struct Beside<'f> {
    fabric: &'f Fabric,
    /// The pages (lowest and highest key) the replay reads from, if it reads any.
    reads: Option<(u64, u64)>,
    /// [`Fabric::open_reads`] when the work began.
    open_reads: u64,
    /// Where its writes are shared with the pool threads done with the replay.
    share: &'f WriteShare,
}

impl<'f> Beside<'f> {
    pub(crate) fn new(
        fabric: &'f Fabric,
        reads: Option<(u64, u64)>,
        share: &'f WriteShare,
    ) -> Beside<'f> {
        Beside {
            fabric,
            reads,
            open_reads: fabric.open_reads(),
            share,
        }
    }

    /// The fabric, to read (see [`Beside::read_the_replay`]). Borrowed from the
    /// `Beside`, so that nothing read through it is alive across a [`Beside::write`].
    /// Its shared write forms ([`Fabric::write_reserved`] and the like) reach only the
    /// replay's pages, and writing those beside the replay races with it: do not.
    pub fn fabric(&self) -> &Fabric {
        self.fabric
    }

    /// Writes `buf` at `addr` if no page of the range is one the replay reads from (between
    /// the lowest and the highest) or writes, and every page of it has storage: `Ok(true)`.
    /// Else nothing is written and `Ok(false)`: write it once the replay is done. A range
    /// off the fabric is an error, as for [`Fabric::write`]. The pool threads that have
    /// run out of the replay's work copy pieces of the write too (see the `share`
    /// module); it returns once all are copied.
    pub fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<bool, Error> {
        let keys = self.fabric.page_keys(addr, buf.len() as u64)?;
        let read = self
            .reads
            .is_some_and(|(lo, hi)| keys.start <= hi && lo < keys.end);
        if read || !self.fabric.closed_with_storage(keys) {
            return Ok(false);
        }
        // SAFETY: the replay's threads reach only the pages of the ranges its validated
        // descriptors read, all inside `reads`, and those it writes, which are its
        // reserved (open) pages, refused just above; its threads done with it reach only
        // the pieces they claim of this write (`WriteShare::help`); nothing else touches
        // the fabric while `beside` runs (the caller lent it to the engine), and `&mut
        // self` ends every borrow taken through `Beside::fabric` (no `PageRef` or
        // `PageLocks` of this fabric outlives it, on this thread or another).
        unsafe { self.share.write(self.fabric, addr, buf) };
        Ok(true)
    }

    /// Whether the work so far read a page the replay writes (through the fabric's read
    /// forms): what it read there may be stale, so it must be done again once the replay
    /// is done.
    pub fn read_the_replay(&self) -> bool {
        self.fabric.open_reads() != self.open_reads
    }
}

/// `m` locked, even if a thread panicked while holding it (the engine's shared state stays
/// usable: each lock guards bookkeeping that a panic cannot leave half-written).
pub(crate) fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{SBUF_BASE, SBUF_STRIDE};
    use crate::compute;
    use crate::descriptor::{DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use crate::error::AccessKind;
    use crate::generation::Generation;
    use crate::queue_file::QueueFileWriter;
    use proptest::prelude::*;
    use std::io::Cursor;
    use std::num::NonZeroU32;
    use std::sync::OnceLock;

    const GEN: Generation = Generation::Cayman;
    /// The modelled window: HBM `[0, SPAN)`, four pages.
    const SPAN: u64 = 4 * PAGE;
    const PAGE: u64 = crate::fabric::PAGE_BYTES;
    /// Group `g` writes only `[GROUP_BASE + g * GROUP, +GROUP)`; groups straddle pages.
    const GROUP_BASE: u64 = 8 * 1024;
    const GROUP: u64 = 16 * 1024;
    const GROUPS: u64 = 8;
    /// Nobody writes `[SHARED, SPAN)`: every queue may read it.
    const SHARED: u64 = GROUP_BASE + GROUPS * GROUP;
    const MAX_LEN: u64 = 2048;

    /// Every replay on the caller's thread.
    const ALWAYS: InlineLimit = InlineLimit {
        descriptors: u64::MAX,
        bytes: u64::MAX,
    };

    /// The schedules the tests run: `workers` 1 or 2, every replay on that many threads,
    /// a streamed one in windows of one 7-descriptor batch per queue; 0, every replay on
    /// the caller; 3, two threads and windows of 64 batches.
    fn config(workers: usize) -> EngineConfig {
        EngineConfig {
            queues: 16,
            workers: workers.clamp(1, 2),
            batch: 7,
            channel_depth: if workers == 3 { 64 } else { 1 },
            inline: if workers == 0 {
                ALWAYS
            } else {
                InlineLimit::OFF
            },
            ..EngineConfig::default()
        }
    }

    /// Engines by [`config`]'s `workers` (0 to 3), shared by the tests.
    fn engine(workers: usize) -> &'static Engine {
        static ENGINES: OnceLock<[Engine; 4]> = OnceLock::new();
        let engines = ENGINES.get_or_init(|| [0, 1, 2, 3].map(|w| Engine::new(config(w)).unwrap()));
        &engines[workers]
    }

    fn with(workers: usize, f: impl FnOnce(&mut EngineConfig)) -> Engine {
        let mut c = config(workers);
        f(&mut c);
        Engine::new(c).unwrap()
    }

    /// The initial contents of the window.
    fn image() -> Vec<u8> {
        (0..SPAN)
            .map(|i| (i.wrapping_mul(0x9e37_79b9) >> 11) as u8)
            .collect()
    }

    fn fabric() -> Fabric {
        let mut f = Fabric::new(GEN);
        f.write(FabricAddr(0), &image()).unwrap();
        f
    }

    fn window(f: &Fabric) -> Vec<u8> {
        let mut out = vec![0; SPAN as usize];
        f.read(FabricAddr(0), &mut out).unwrap();
        out
    }

    fn copy(src: u64, dst: u64, len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Copy,
            FabricAddr(src),
            FabricAddr(dst),
            len,
            Dtype::U8,
        )
        .unwrap()
    }

    fn fill(dst: u64, len: u32, element: u64) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), len, Dtype::U8, element).unwrap()
    }

    fn sem(id: u8) -> SemId {
        SemId::new(id).unwrap()
    }

    fn wait(id: u8, count: u32) -> SemWait {
        SemWait {
            sem: sem(id),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    /// A descriptor of group `group`: raw fields shaped to the op's rules and the window.
    #[derive(Clone, Debug)]
    struct Spec {
        group: u64,
        op: DescOp,
        dtype: Dtype,
        /// The source's dtype: a cast where it differs (and the op reads a source).
        src_dtype: Dtype,
        dst_off: u64,
        shared_src: bool,
        src_off: u64,
        len: u64,
        element: u64,
    }

    impl Spec {
        fn descriptor(&self) -> Descriptor {
            let size = self.dtype.size() as u64;
            let src_dtype = match self.op {
                DescOp::Fill => self.dtype,
                _ => self.src_dtype,
            };
            // whole elements of the wider side, so that neither run passes MAX_LEN
            let wider = size.max(src_dtype.size() as u64);
            let len = if self.op == DescOp::Copy && src_dtype == self.dtype {
                self.len
            } else {
                (self.len / wider).max(1) * size
            };
            let base = GROUP_BASE + self.group * GROUP;
            let src = if self.shared_src {
                SHARED + self.src_off % (SPAN - SHARED - MAX_LEN)
            } else {
                base + self.src_off % (GROUP - MAX_LEN)
            };
            let dst = base + self.dst_off % (GROUP - MAX_LEN);
            let src = if self.op == DescOp::Fill {
                self.element & (u64::MAX >> (64 - 8 * size))
            } else {
                src
            };
            let (src, dst) = (FabricAddr(src), FabricAddr(dst));
            Descriptor::cast(self.op, src, src_dtype, dst, len as u32, self.dtype).unwrap()
        }
    }

    fn arb_spec() -> impl Strategy<Value = Spec> {
        (
            (0..GROUPS, proptest::sample::select(DescOp::ALL.to_vec())),
            (
                proptest::sample::select(Dtype::ALL.to_vec()),
                proptest::sample::select(Dtype::ALL.to_vec()),
                any::<bool>(),
            ),
            (any::<u64>(), any::<bool>(), any::<u64>()),
            (1..=MAX_LEN, any::<u64>()),
        )
            .prop_map(
                |(
                    (group, op),
                    (dtype, from, casts),
                    (dst_off, shared_src, src_off),
                    (len, element),
                )| Spec {
                    group,
                    op,
                    dtype,
                    src_dtype: if casts { from } else { dtype },
                    dst_off,
                    shared_src,
                    src_off,
                    len,
                    element,
                },
            )
    }

    /// Descriptors in generation order, group `g` to queue `g % queues`.
    fn spray(descs: &[(u64, Descriptor)], queues: usize) -> Vec<Vec<Descriptor>> {
        let mut out = vec![Vec::new(); queues];
        for (group, d) in descs {
            out[*group as usize % queues].push(*d);
        }
        out
    }

    /// The independent reference: the window as a flat Vec, queue after queue, each
    /// descriptor with snapshot (memmove) semantics, a cast element by element.
    fn reference(queues: &[Vec<Descriptor>]) -> Vec<u8> {
        let mut m = image();
        for d in queues.iter().flatten() {
            let (dst, len) = (d.dst().0 as usize, d.len() as usize);
            let snapshot = match d.source_range() {
                None => {
                    let e = d.src().0.to_le_bytes();
                    (0..len).map(|i| e[i % d.dtype().size()]).collect()
                }
                Some((src, n)) => m[src.0 as usize..][..n as usize].to_vec(),
            };
            let out = &mut m[dst..dst + len];
            let (from, to) = (d.src_dtype(), d.dtype());
            match d.op().compute_op() {
                Some(op) if d.is_cast() => {
                    let pairs = snapshot.chunks(from.size()).zip(out.chunks_mut(to.size()));
                    for (s, o) in pairs {
                        crate::cast::cast(op, from, s, to, o).unwrap();
                    }
                }
                Some(op) if op != compute::ComputeOp::None => {
                    compute::apply(op, d.dtype(), out, &snapshot).unwrap()
                }
                _ => out.copy_from_slice(&snapshot),
            }
        }
        m
    }

    /// Row copies of 64 bytes from `rows[i].0 * 64` to `rows[i].1 * 64`, dealt round-robin
    /// over 16 queues.
    fn row_queues(rows: &[(u64, u64)]) -> Vec<Vec<Descriptor>> {
        let mut queues = vec![Vec::new(); 16];
        for (i, &(src, dst)) in rows.iter().enumerate() {
            queues[i % 16].push(copy(src * 64, dst * 64, 64));
        }
        queues
    }

    /// What `writes` beside a replay of `rows` must do: write where the replay neither
    /// reads (between its lowest and highest page read) nor writes, on pages with storage
    /// (the window's four), and nowhere else.
    fn beside_admits(rows: &[(u64, u64)], (at, len): (u64, u64)) -> bool {
        let page = |row: u64| row * 64 / PAGE;
        let lo = rows.iter().map(|r| page(r.0)).min().unwrap_or(u64::MAX);
        let hi = rows.iter().map(|r| page(r.0)).max().unwrap_or(0);
        let (first, last) = (at / PAGE, (at + len - 1) / PAGE);
        let written = rows.iter().any(|r| (first..=last).contains(&page(r.1)));
        last < SPAN / PAGE && !(first <= hi && lo <= last) && !written
    }

    #[test]
    fn work_beside_a_replay_writes_only_where_the_replay_does_not_reach() {
        // rows of page 0 into page 2
        let rows: Vec<(u64, u64)> = (0..200).map(|i| (i * 7 % 1024, 2048 + i)).collect();
        let queues = row_queues(&rows);
        for e in [engine(3), engine(1)] {
            let mut f = fabric();
            let mut want = fabric();
            let validated = e.validate(&f, queues.clone()).unwrap();
            let writes = [
                (0, 8),
                (PAGE + 8, 8),
                (2 * PAGE, 8),
                (3 * PAGE + 64, 64),
                (5 * PAGE, 4),
            ];
            let (report, (done, saw)) = e
                .run_beside(&mut f, &validated, |b| {
                    let done: Vec<bool> = writes
                        .iter()
                        .map(|&(at, n)| b.write(FabricAddr(at), &vec![0xee; n as usize]).unwrap())
                        .collect();
                    let mut row = [0u8; 8];
                    b.fabric().read(FabricAddr(PAGE + 8), &mut row).unwrap();
                    let before = b.read_the_replay();
                    b.fabric().read(FabricAddr(2 * PAGE), &mut row).unwrap();
                    (done, (before, b.read_the_replay()))
                })
                .unwrap();
            assert_eq!(done, [false, true, false, true, false]);
            for (&(at, n), &ok) in writes.iter().zip(&done) {
                assert_eq!(ok, beside_admits(&rows, (at, n)));
            }
            assert_eq!(saw, (false, true), "only the replay's page counts");
            assert_eq!(report.summary.descriptors, 200);
            execute_sequential(&mut want, &queues).unwrap();
            want.write(FabricAddr(PAGE + 8), &[0xee; 8]).unwrap();
            want.write(FabricAddr(3 * PAGE + 64), &[0xee; 64]).unwrap();
            assert_eq!(f.first_difference(&want), None);
            assert_eq!(e.recycle(validated), queues);
        }
    }

    #[test]
    fn work_beside_may_write_up_to_the_first_page_the_replay_reads() {
        // rows of page 1 into page 3: pages 0 and 2 are free, page 1 is read
        let rows: Vec<(u64, u64)> = (0..64).map(|i| (1024 + i * 13 % 1024, 3072 + i)).collect();
        let queues = row_queues(&rows);
        let e = engine(2);
        let mut f = fabric();
        let validated = e.validate(&f, queues.clone()).unwrap();
        let writes = [
            (PAGE - 8, 8),
            (PAGE - 4, 8),
            (2 * PAGE - 4, 8),
            (2 * PAGE, 8),
        ];
        let (_, done) = e
            .run_beside(&mut f, &validated, |b| {
                writes
                    .iter()
                    .map(|&(at, n)| b.write(FabricAddr(at), &[0x5a; 8][..n as usize]).unwrap())
                    .collect::<Vec<bool>>()
            })
            .unwrap();
        assert_eq!(done, [true, false, false, true]);
        for (&(at, n), &ok) in writes.iter().zip(&done) {
            assert_eq!(ok, beside_admits(&rows, (at, n)));
        }
    }

    #[test]
    fn a_validated_round_robin_gather_is_dealt_ahead_and_again_when_run_again() {
        let queues = round_robin_gather();
        let (mut f, mut want) = (fabric(), fabric());
        execute_sequential(&mut want, &queues).unwrap();
        let validated = engine(2).validate(&f, queues.clone()).unwrap();
        assert!(
            lock(&validated.buckets).is_some(),
            "bucketed when validated"
        );
        for _ in 0..2 {
            let (report, ()) = engine(2).run_beside(&mut f, &validated, |_| ()).unwrap();
            assert!(report.execution.page_buckets);
            assert_eq!(f.first_difference(&want), None);
        }
        assert_eq!(engine(2).recycle(validated), queues);
    }

    #[test]
    fn a_panic_beside_a_replay_unwinds_after_it_with_the_fabric_in_place() {
        let rows: Vec<(u64, u64)> = (0..300).map(|i| (i % 1024, 2048 + i)).collect();
        let queues = row_queues(&rows);
        let mut want = fabric();
        execute_sequential(&mut want, &queues).unwrap();
        for e in [engine(3), engine(0), engine(1)] {
            let mut f = fabric();
            let validated = e.validate(&f, queues.clone()).unwrap();
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                e.run_beside(&mut f, &validated, |b| {
                    assert!(b.write(FabricAddr(3 * PAGE), &[7; 4]).unwrap());
                    panic!("beside fails");
                })
            }));
            assert!(ran.is_err());
            want.write(FabricAddr(3 * PAGE), &[7; 4]).unwrap();
            assert_eq!(
                f.first_difference(&want),
                None,
                "the replay ran, its fabric kept"
            );
            // the engine goes on
            assert!(e.run(&mut f, &queues).is_ok());
        }
    }

    #[test]
    fn validated_queues_run_only_where_they_were_validated() {
        let queues = row_queues(&[(0, 2048)]);
        let validated = engine(3).validate(&fabric(), queues.clone()).unwrap();
        let mut f = fabric();
        let e = engine(2)
            .run_beside(&mut f, &validated, |_| ())
            .unwrap_err();
        assert!(matches!(e, Error::NotValidatedHere { .. }), "{e}");
        let mut sunda = Fabric::new(Generation::Sunda);
        let e = engine(3)
            .run_beside(&mut sunda, &validated, |_| ())
            .unwrap_err();
        assert!(e.to_string().contains("cayman"), "{e}");
        assert_eq!(f.first_difference(&fabric()), None, "nothing ran");
        // a bad queue is refused when validated, as by `run`
        let bad = vec![vec![copy(0, SPAN * 1024 * 1024 * 1024, 64)]];
        assert!(engine(3).validate(&fabric(), bad).is_err());
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// Rows copied within the window while random writes are tried beside the replay:
        /// the writes the engine takes are exactly those that meet nothing of the replay,
        /// and the memory is the replay's followed by theirs.
        #[test]
        fn work_beside_a_replay_equals_the_replay_then_the_writes_it_took(
            rows in proptest::collection::vec((0..4096u64, 0..4096u64), 1..120),
            writes in proptest::collection::vec((0..SPAN + PAGE, 1..300u64), 0..12),
            workers in 0..4usize,
        ) {
            // distinct destination rows, read from pages no row writes: queues that race
            // on no byte, so any schedule gives the memory of the queues in order
            let mut seen = std::collections::HashSet::new();
            let rows: Vec<(u64, u64)> = rows.into_iter().filter(|r| seen.insert(r.1)).collect();
            let written: std::collections::HashSet<u64> = rows.iter().map(|r| r.1 / 1024).collect();
            let rows: Vec<(u64, u64)> = rows.into_iter().filter(|r| !written.contains(&(r.0 / 1024))).collect();
            let queues = row_queues(&rows);
            let e = engine(workers);
            let mut f = fabric();
            let validated = e.validate(&f, queues.clone()).unwrap();
            let (_, done) = e.run_beside(&mut f, &validated, |b| {
                writes.iter().map(|&(at, n)| b.write(FabricAddr(at), &vec![0xa5; n as usize])).collect::<Vec<_>>()
            }).unwrap();
            let mut want = fabric();
            execute_sequential(&mut want, &queues).unwrap();
            for (&(at, n), ok) in writes.iter().zip(done) {
                let admitted = beside_admits(&rows, (at, n));
                prop_assert_eq!(ok.unwrap(), admitted);
                if admitted {
                    want.write(FabricAddr(at), &vec![0xa5; n as usize]).unwrap();
                }
            }
            prop_assert_eq!(f.first_difference(&want), None);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn engine_equals_the_flat_reference(
            specs in proptest::collection::vec(arb_spec(), 1..120),
            queues in 1..=16usize,
            workers in 0..=3usize,
        ) {
            let descs: Vec<(u64, Descriptor)> = specs.iter().map(|s| (s.group, s.descriptor())).collect();
            let queues = spray(&descs, queues);
            let mut f = fabric();
            let report = engine(workers).run(&mut f, &queues).unwrap();
            prop_assert_eq!(window(&f), reference(&queues));
            let mut g = fabric();
            execute_sequential(&mut g, &queues).unwrap();
            prop_assert_eq!(f.first_difference(&g), None);
            let bytes: u64 = descs.iter().map(|(_, d)| u64::from(d.len())).sum();
            prop_assert_eq!(report.summary.descriptors, descs.len() as u64);
            prop_assert_eq!(report.summary.bytes, bytes);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Row gathers and row adds from a table nothing writes into rows over four
        /// pages, every row's writers in one queue: a run on two threads deals them by page
        /// where they write two pages or more (here, two buckets), some page has two
        /// queues, and the pages are dense (a quarter written on average) or the queues
        /// were validated ahead; and equals the queues run in order either way.
        #[test]
        fn runs_page_buckets_equal_the_sequential_reference(
            moves in proptest::collection::vec((0..64u64, 0..256u64, any::<bool>()), 1..300),
            queues in 2..=16usize,
        ) {
            const ROW: u64 = 1024;
            const OUT: u64 = 1 << 20;
            let mut lists = vec![Vec::new(); queues];
            for &(src, dst, add) in &moves {
                let (op, dtype) = if add { (DescOp::Add, Dtype::F32) } else { (DescOp::Copy, Dtype::U8) };
                let (from, to) = (FabricAddr(src * ROW), FabricAddr(OUT + dst * ROW));
                let d = Descriptor::new(op, from, to, ROW as u32, dtype).unwrap();
                lists[dst as usize % queues].push(d);
            }
            let pages: std::collections::BTreeSet<u64> =
                moves.iter().map(|m| m.1 * ROW / PAGE).collect();
            let queue_pages: std::collections::BTreeSet<(u64, u64)> =
                moves.iter().map(|m| (m.1 * ROW / PAGE, m.1 % queues as u64)).collect();
            let shared = queue_pages.len() > pages.len() && pages.len() > 1;
            let dense = moves.len() as u64 * ROW >= pages.len() as u64 * PAGE / 4;
            let mut f = Fabric::new(GEN);
            f.write(FabricAddr(0), &image()[..64 * ROW as usize]).unwrap();
            let mut want = f.clone();
            execute_sequential(&mut want, &lists).unwrap();
            let mut ahead = f.clone();
            let report = engine(3).run(&mut f, &lists).unwrap();
            prop_assert_eq!(report.execution.page_buckets, dense && shared);
            prop_assert_eq!(f.first_difference(&want), None);
            let validated = engine(3).validate(&ahead, lists).unwrap();
            let (report, ()) = engine(3).run_beside(&mut ahead, &validated, |_| ()).unwrap();
            prop_assert_eq!(report.execution.page_buckets, shared);
            prop_assert_eq!(ahead.first_difference(&want), None);
        }
    }

    /// A gather of 4096 four-byte elements into one page, sprayed round-robin over 16
    /// queues (a chunk of `hostsim bench`'s elem_gather): dealt, it would be one bucket
    /// that one thread runs, after a pass over every descriptor; validated ahead, it runs
    /// by queues instead, with the memory of the queues in order. So does its second half
    /// moved 16 pages on (the same bucket); moved one page on, it is dealt.
    #[test]
    fn a_replay_into_one_bucket_is_not_dealt_even_ahead() {
        for (second_half, dealt) in [(0, false), (16, false), (1, true)] {
            let mut queues = vec![Vec::new(); 16];
            for i in 0..4096u64 {
                let src = (i * 7919) % 16384 * 4;
                let dst = (1 << 20) + i * 4 + (i / 2048) * second_half * PAGE;
                queues[(i % 16) as usize].push(copy(src, dst, 4));
            }
            let (mut f, mut want) = (fabric(), fabric());
            execute_sequential(&mut want, &queues).unwrap();
            let e = engine(3);
            let validated = e.validate(&f, queues).unwrap();
            let (report, ()) = e.run_beside(&mut f, &validated, |_| ()).unwrap();
            assert_eq!(report.execution.page_buckets, dealt, "{second_half}");
            assert_eq!(f.first_difference(&want), None);
        }
    }

    /// 16 queues of 600 rows each, dealt round-robin over 16 pages of 64-byte rows: far
    /// more than a queue's channel holds on engine 2 (batches of 7, depth 1).
    fn round_robin_gather() -> Vec<Vec<Descriptor>> {
        let rows = 16 * 600u64;
        let mut queues = vec![Vec::new(); 16];
        for i in 0..rows {
            let src = (i * 7919) % 4096 * 64;
            queues[(i % 16) as usize].push(copy(src, (1 << 20) + i * 64, 64));
        }
        queues
    }

    #[test]
    fn a_round_robin_gather_longer_than_the_channels_is_page_buckets() {
        let queues = round_robin_gather();
        let (mut f, mut want) = (fabric(), fabric());
        execute_sequential(&mut want, &queues).unwrap();
        let report = engine(2).run(&mut f, &queues).unwrap();
        assert!(report.execution.page_buckets);
        assert_eq!(f.first_difference(&want), None);
        // past the most a replay dealt by page copies, it runs as queue segments
        let e = engine(2);
        let plan = e.plan(&f, &mut Slices::new(&queues)).unwrap();
        assert!(e.page_buckets(&queues, &plan, false).is_some());
        let huge = vec![vec![queues[0][0]; schedule::DEALT_MAX / 2 + 1]; 2];
        assert_eq!(e.page_buckets(&huge, &plan, false), None);
    }

    /// Mailbox `k` is `[k * MAILBOX, +MAILBOX)`, below the groups. Every write to a mailbox
    /// starts at its base, so any two overlap, and writers of one mailbox may sit in any
    /// queue: only semaphores order them across queues.
    const MAILBOX: u64 = 4096;
    const MAILBOXES: u64 = GROUP_BASE / MAILBOX;

    /// Engines with the race check on, by [`config`]'s `workers` (0 to 3).
    fn checking_engine(workers: usize) -> &'static Engine {
        static ENGINES: OnceLock<[Engine; 4]> = OnceLock::new();
        let engines =
            ENGINES.get_or_init(|| [0, 1, 2, 3].map(|w| with(w, |c| c.race_check = RaceCheck::On)));
        &engines[workers]
    }

    /// Builds `queues` queues from `items` (group `g` to queue `g % queues`). An item with
    /// a mailbox writes there instead of its group's region; when the mailbox's last
    /// writer is in another queue `p`, queue `p`'s latest descriptor (at or after that
    /// write) SIGNALs semaphore `p` and, if `ordered`, the item WAITs for that signal:
    /// well-formed cross-queue orderings, chained through each mailbox's writers. Returns
    /// the queues and each item's place, in generation order (a valid linearisation).
    fn mailbox_queues(
        items: &[(Spec, Option<u64>)],
        queues: usize,
        ordered: bool,
    ) -> (Vec<Vec<Descriptor>>, Vec<(usize, usize)>) {
        let mut out: Vec<Vec<Descriptor>> = vec![Vec::new(); queues];
        let mut signals = vec![0u32; queues];
        let mut last_writer: [Option<usize>; MAILBOXES as usize] = [None; MAILBOXES as usize];
        let mut order = Vec::new();
        for (spec, mailbox) in items {
            let q = spec.group as usize % queues;
            let mut d = spec.descriptor();
            if let Some(k) = *mailbox {
                let at = FabricAddr(k * MAILBOX);
                d = Descriptor::cast(d.op(), d.src(), d.src_dtype(), at, d.len(), d.dtype())
                    .unwrap();
                if let Some(p) = last_writer[k as usize].filter(|&p| p != q) {
                    let last = out[p].last_mut().unwrap();
                    if last.signal().is_none() {
                        *last = last.with_signal(sem(p as u8));
                        signals[p] += 1;
                    }
                    if ordered {
                        d = d.with_wait(wait(p as u8, signals[p]));
                    }
                }
                last_writer[k as usize] = Some(q);
            }
            order.push((q, out[q].len()));
            out[q].push(d);
        }
        (out, order)
    }

    /// The lowest mailbox written from two different queues.
    fn contested(items: &[(Spec, Option<u64>)], queues: usize) -> Option<u64> {
        (0..MAILBOXES).find(|&k| {
            let mut writers = items
                .iter()
                .filter(|(_, m)| *m == Some(k))
                .map(|(s, _)| s.group as usize % queues);
            writers
                .next()
                .is_some_and(|first| writers.any(|q| q != first))
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn semaphore_ordered_queues_equal_the_references_and_pass_the_race_check(
            items in proptest::collection::vec(
                (arb_spec(), proptest::option::weighted(0.3, 0..MAILBOXES)),
                1..100,
            ),
            queues in 1..=16usize,
            workers in 0..=3usize,
        ) {
            let (sprayed, order) = mailbox_queues(&items, queues, true);
            let in_order: Vec<Descriptor> = order.iter().map(|&(q, i)| sprayed[q][i]).collect();
            let mut f = fabric();
            let report = checking_engine(workers).run(&mut f, &sprayed).unwrap();
            prop_assert_eq!(window(&f), reference(std::slice::from_ref(&in_order)));
            let mut g = fabric();
            execute_sequential(&mut g, &sprayed).unwrap();
            prop_assert_eq!(f.first_difference(&g), None);
            prop_assert_eq!(report.summary.descriptors, items.len() as u64);
            // the same writes without the WAITs: two queues writing one mailbox race
            let (loose, _) = mailbox_queues(&items, queues, false);
            let mut h = fabric();
            let result = checking_engine(workers).run(&mut h, &loose);
            match contested(&items, queues) {
                None => prop_assert!(result.is_ok(), "{:?}", result),
                Some(k) => {
                    let Err(Error::Race { first_queue, second_queue, first_access, second_access, lo, .. }) = result else {
                        return Err(TestCaseError::fail(format!("no race: {result:?}")));
                    };
                    prop_assert_ne!(first_queue, second_queue);
                    prop_assert_eq!((first_access, second_access), (AccessKind::Write, AccessKind::Write));
                    prop_assert_eq!(lo, k * MAILBOX);
                    prop_assert_eq!(h.first_difference(&fabric()), None);
                }
            }
        }
    }

    /// A fixed workload of 3000 descriptors over HBM, SBUF and PSUM: group `g` writes only
    /// its own region and reads its own region or the shared one.
    fn workload() -> Vec<(u64, Descriptor)> {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        (0..3000)
            .map(|_| {
                let r = next();
                let spec = Spec {
                    group: r % GROUPS,
                    op: DescOp::ALL[(r >> 8) as usize % 6],
                    dtype: Dtype::ALL[(r >> 16) as usize % 9],
                    // one in four casts (from a dtype that may be the same)
                    src_dtype: Dtype::ALL
                        [(r >> if r >> 40 & 3 == 0 { 32 } else { 16 }) as usize % 9],
                    dst_off: next(),
                    shared_src: r >> 24 & 1 == 1,
                    src_off: next(),
                    len: 1 + next() % MAX_LEN,
                    element: next(),
                };
                let mut d = spec.descriptor();
                // groups 6 and 7 live in SBUF partition 9 and PSUM partition 2
                if spec.group >= 6 {
                    let at = if spec.group == 6 {
                        SBUF_BASE + 9 * SBUF_STRIDE
                    } else {
                        crate::addr::PSUM_BASE + 2 * crate::addr::PSUM_STRIDE
                    };
                    let off = d.dst().0 % 8192;
                    let src = if d.op() == DescOp::Fill || spec.shared_src {
                        d.src()
                    } else {
                        FabricAddr(at + d.src().0 % 8192)
                    };
                    let dst = FabricAddr(at + off);
                    d = Descriptor::cast(d.op(), src, d.src_dtype(), dst, d.len(), d.dtype())
                        .unwrap();
                }
                (spec.group, d)
            })
            .collect()
    }

    #[test]
    fn any_queue_count_and_worker_count_gives_the_same_memory_and_report() {
        let descs = workload();
        let mut baseline = fabric();
        execute_sequential(&mut baseline, &spray(&descs, 1)).unwrap();
        let mut totals = Vec::new();
        for queues in [1, 2, 4, 16] {
            let sprayed = spray(&descs, queues);
            let mut summaries = Vec::new();
            for workers in [0, 1, 2, 3] {
                for batch in [1, 64, 4096] {
                    let e = with(workers, |c| c.batch = batch);
                    let mut f = fabric();
                    let report = e.run(&mut f, &sprayed).unwrap();
                    assert_eq!(
                        f.first_difference(&baseline),
                        None,
                        "{queues} {workers} {batch}"
                    );
                    assert_eq!(f.digest(), baseline.digest());
                    f.assert_zero_outside_extents();
                    summaries.push(report);
                }
            }
            assert!(summaries.iter().all(|r| r.deterministic_eq(&summaries[0])));
            let s = &summaries[0].summary;
            assert_eq!(s.queues.len(), queues);
            totals.push((s.descriptors, s.bytes, s.busy_ps, s.skipped, s.failed));
        }
        let bytes: u64 = descs.iter().map(|(_, d)| u64::from(d.len())).sum();
        let busy: u64 = descs
            .iter()
            .map(|(_, d)| TimingModel::new(GEN).descriptor_ps(d))
            .sum();
        assert!(
            totals.iter().all(|t| *t == (3000, bytes, busy, 0, 0)),
            "{totals:?}"
        );
    }

    use crate::timing::TimingModel;

    #[test]
    fn the_report_times_each_queue_on_the_model() {
        let model = TimingModel::new(GEN);
        let queues = vec![
            vec![copy(SHARED, 0, 4096), fill(8192, 256, 1)],
            vec![copy(SHARED, 0x4000, 100)],
        ];
        let mut f = fabric();
        let r = engine(1).run(&mut f, &queues).unwrap().summary;
        let q0 = model.transfer_ps(4096, DescOp::Copy) + model.transfer_ps(256, DescOp::Fill);
        let q1 = model.transfer_ps(100, DescOp::Copy);
        assert_eq!(
            r.queues[0],
            QueueReport {
                descriptors: 2,
                bytes: 4352,
                skipped: 0,
                busy_ps: q0,
                end_ps: q0
            }
        );
        assert_eq!(
            r.queues[1],
            QueueReport {
                descriptors: 1,
                bytes: 100,
                skipped: 0,
                busy_ps: q1,
                end_ps: q1
            }
        );
        assert_eq!(
            (r.descriptors, r.bytes, r.busy_ps, r.makespan_ps),
            (3, 4452, q0 + q1, q0)
        );
        assert_eq!(r.average_descriptor_bytes(), 1484.0);
        assert_eq!(r.generation, GEN);
    }

    #[test]
    fn semaphores_order_a_cross_queue_read() {
        // queue 1 copies what queue 0 wrote, after queue 0's signal; both worker counts,
        // many times, with the race check on
        let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        for workers in [1, 2] {
            let e = with(workers, |c| c.race_check = RaceCheck::On);
            for _ in 0..20 {
                let mut f = fabric();
                f.write(FabricAddr(SHARED), &data).unwrap();
                let queues = vec![
                    vec![
                        fill(0x100, 64, 0),
                        copy(SHARED, 0x8000, 4096).with_signal(sem(5)),
                    ],
                    vec![copy(0x8000, 0x3_0000, 4096).with_wait(wait(5, 1))],
                ];
                e.run(&mut f, &queues).unwrap();
                let mut out = vec![0; 4096];
                f.read(FabricAddr(0x3_0000), &mut out).unwrap();
                assert_eq!(out, data);
            }
        }
    }

    /// Runs `queues` expecting an error, and checks the fabric did not change.
    fn rejected(e: &Engine, queues: &[Vec<Descriptor>]) -> Error {
        let mut f = fabric();
        f.write(FabricAddr(SBUF_BASE + 5 * SBUF_STRIDE), &[0xab; 300])
            .unwrap();
        let before = f.clone();
        let err = e.run(&mut f, queues).unwrap_err();
        assert_eq!(f.first_difference(&before), None, "{err}");
        assert_eq!(f.digest(), before.digest());
        err
    }

    /// Queues whose first descriptors would change memory, then `bad` in queue 1 at index 2.
    fn with_bad(bad: Descriptor) -> Vec<Vec<Descriptor>> {
        vec![
            vec![fill(0, 4096, 0x11), copy(SHARED, 0x5000, 512)],
            vec![
                fill(0x9000, 64, 0x22),
                fill(0x9100, 64, 0x33),
                bad,
                fill(0x9200, 64, 0x44),
            ],
        ]
    }

    fn assert_bad(err: Error, what: &str) -> Error {
        let Error::ReplayDescriptor {
            queue,
            index,
            what: w,
            source,
        } = err
        else {
            panic!("{err:?}")
        };
        assert_eq!((queue, index, w), (1, 2, what));
        *source
    }

    #[test]
    fn a_bad_source_rejects_the_replay() {
        let gap = GEN.hbm_bytes() + 0x40; // past HBM, below SBUF
        let err = rejected(engine(2), &with_bad(copy(gap, 0x100, 8)));
        assert!(
            err.to_string()
                .contains("queue 1 descriptor 2: source range"),
            "{err}"
        );
        assert_eq!(
            assert_bad(err, "source range"),
            Error::Unmapped { addr: gap }
        );
    }

    #[test]
    fn a_bad_destination_rejects_the_replay() {
        let end = GEN.hbm_bytes() - 4;
        let src = assert_bad(
            rejected(engine(1), &with_bad(copy(0, end, 8))),
            "destination range",
        );
        assert!(
            matches!(src, Error::OutOfRegion { addr, len: 8, .. } if addr == end),
            "{src:?}"
        );
    }

    #[test]
    fn a_partition_crossing_rejects_the_replay() {
        let p5 = SBUF_BASE + 5 * SBUF_STRIDE;
        let last = p5 + GEN.sbuf_partition_bytes() - 16;
        let err = rejected(engine(2), &with_bad(copy(p5, last, 32)));
        assert!(matches!(
            assert_bad(err, "destination range"),
            Error::OutOfRegion { .. }
        ));
        let err = rejected(engine(2), &with_bad(copy(last, p5, 32)));
        assert!(matches!(
            assert_bad(err, "source range"),
            Error::OutOfRegion { .. }
        ));
    }

    #[test]
    fn a_race_is_reported_before_anything_runs() {
        let e = with(2, |c| c.race_check = RaceCheck::On);
        let err = rejected(&e, &with_bad(fill(0x80, 64, 0x55)));
        let want = Error::Race {
            first_queue: 0,
            first_from: 0,
            first_to: 0,
            first_access: AccessKind::Write,
            second_queue: 1,
            second_from: 2,
            second_to: 2,
            second_access: AccessKind::Write,
            lo: 0x80,
            end: 0xbf,
        };
        assert_eq!(err, want);
        // a read of another queue's destination is a race too
        let err = rejected(&e, &with_bad(copy(0x5100, 0x9400, 16)));
        assert!(
            matches!(
                err,
                Error::Race {
                    first_access: AccessKind::Write,
                    second_access: AccessKind::Read,
                    lo: 0x5100,
                    ..
                }
            ),
            "{err:?}"
        );
        // without the check the DGE's promise is trusted and the replay runs
        let mut f = fabric();
        assert!(engine(2)
            .run(&mut f, &with_bad(fill(0x80, 64, 0x55)))
            .is_ok());
    }

    #[test]
    fn a_wait_cycle_is_a_deadlock() {
        let queues = vec![
            vec![
                fill(0, 64, 1),
                fill(64, 8, 2).with_wait(wait(1, 1)).with_signal(sem(0)),
            ],
            vec![
                fill(0x9000, 64, 3),
                fill(0x9100, 8, 4).with_wait(wait(0, 1)).with_signal(sem(1)),
            ],
        ];
        let want = Error::SemaphoreDeadlock {
            queue: 0,
            index: 1,
            sem: 1,
            count: 1,
            reached: 0,
        };
        assert_eq!(rejected(engine(1), &queues), want);
        assert_eq!(
            rejected(&with(2, |c| c.race_check = RaceCheck::On), &queues),
            want
        );
    }

    #[test]
    fn a_wait_never_reached_is_rejected() {
        let queues = vec![
            vec![fill(0, 64, 1).with_signal(sem(2))],
            vec![
                fill(0x9000, 64, 3),
                fill(0x9100, 8, 4).with_wait(wait(2, 2)),
            ],
        ];
        let want = Error::SemaphoreNeverReached {
            sem: 2,
            count: 2,
            queue: 1,
            index: 1,
            signals: 1,
        };
        assert_eq!(rejected(engine(2), &queues), want);
    }

    #[test]
    fn a_semaphore_signalled_by_two_queues_is_rejected() {
        let queues = vec![
            vec![fill(0, 64, 1).with_signal(sem(2))],
            vec![fill(0x9000, 64, 3), fill(0x9100, 8, 4).with_signal(sem(2))],
        ];
        let want = Error::SemaphoreOwner {
            sem: 2,
            queue: 1,
            index: 1,
            owner: 0,
        };
        assert_eq!(rejected(engine(1), &queues), want);
    }

    #[test]
    fn queue_counts_beyond_the_rings_are_rejected() {
        let e = with(1, |c| c.queues = 2);
        let three = vec![vec![fill(0, 8, 1)]; 3];
        assert_eq!(rejected(&e, &three), Error::QueueCount { count: 3, max: 2 });
        assert_eq!(rejected(&e, &[]), Error::QueueCount { count: 0, max: 2 });
    }

    #[test]
    fn the_skip_policy_runs_the_rest_and_counts() {
        let e = with(2, |c| c.invalid = InvalidPolicy::Skip);
        let gap = GEN.hbm_bytes() + 0x40;
        // the skipped descriptor still signals, so queue 0's wait is met
        let queues = vec![
            vec![fill(0, 16, 0x11).with_wait(wait(3, 1))],
            vec![
                copy(gap, 0x100, 8).with_signal(sem(3)),
                fill(0x200, 8, 0x22),
            ],
        ];
        let mut f = fabric();
        let mut want = image();
        want[..16].fill(0x11);
        want[0x200..0x208].fill(0x22);
        let r = e.run(&mut f, &queues).unwrap().summary;
        assert_eq!(window(&f), want);
        assert_eq!((r.descriptors, r.bytes, r.skipped), (2, 24, 1));
        assert_eq!((r.queues[1].descriptors, r.queues[1].skipped), (1, 1));
    }

    #[test]
    fn config_fields_are_checked() {
        let bad = [
            (
                EngineConfig {
                    queues: 17,
                    ..config(1)
                },
                "queues",
                17,
            ),
            (
                EngineConfig {
                    queues: 0,
                    ..config(1)
                },
                "queues",
                0,
            ),
            (
                EngineConfig {
                    workers: 0,
                    ..config(1)
                },
                "workers",
                0,
            ),
            (
                EngineConfig {
                    batch: 8193,
                    ..config(1)
                },
                "batch",
                8193,
            ),
            (
                EngineConfig {
                    channel_depth: 0,
                    ..config(1)
                },
                "channel_depth",
                0,
            ),
            (
                EngineConfig {
                    linger: MAX_LINGER + Duration::from_micros(1),
                    ..config(1)
                },
                "linger_us",
                10_001,
            ),
        ];
        for (c, field, value) in bad {
            let e = Engine::new(c).unwrap_err();
            assert!(
                matches!(e, Error::EngineConfig { field: f, value: v, .. } if f == field && v == value),
                "{e:?}"
            );
        }
        assert_eq!(EngineConfig::default().check(), Ok(()));
        let longest = EngineConfig {
            linger: MAX_LINGER,
            ..config(1)
        };
        assert_eq!(longest.check(), Ok(()));
        assert_eq!(engine(2).config().workers, 2);
    }

    #[test]
    fn the_engine_may_be_called_from_async_code() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let queues = vec![vec![fill(0x40, 8, 9)]];
        for workers in [0, 1] {
            let mut f = fabric();
            let r = rt
                .block_on(async { engine(workers).run(&mut f, &queues) })
                .unwrap();
            assert_eq!(r.summary.bytes, 8);
            let mut out = [0u8; 8];
            f.read(FabricAddr(0x40), &mut out).unwrap();
            assert_eq!(out, [9; 8]);
        }
    }

    #[test]
    fn small_replays_run_on_the_caller_and_larger_ones_on_the_workers() {
        let limit = InlineLimit {
            descriptors: 4,
            bytes: 64,
        };
        assert!(limit.admits(4, 64) && limit.admits(0, 0));
        assert!(!limit.admits(5, 1) && !limit.admits(1, 65));
        assert!(InlineLimit::OFF.admits(0, 0) && !InlineLimit::OFF.admits(1, 1));
        let e = with(2, |c| c.inline = limit);
        // the limit decides where a replay runs, with semaphores or without
        let signalled = |d: Descriptor| d.with_signal(sem(0));
        let small = vec![vec![signalled(fill(0x40, 8, 9))], vec![fill(0x80, 8, 7)]];
        let many = vec![(0..5)
            .map(|i| signalled(fill(0x40 + 8 * i, 8, 1)))
            .collect()];
        let wide = vec![vec![signalled(fill(0x40, 65, 3))]];
        // without one, the same
        let plain = vec![vec![fill(0x40, 8, 9)], vec![fill(0x80, 8, 7)]];
        let plain_many = vec![(0..5).map(|i| fill(0x40 + 8 * i, 8, 1)).collect()];
        for (queues, workers) in [
            (small, 1),
            (many, 2),
            (wide, 2),
            (plain, 1),
            (plain_many, 2),
        ] {
            let mut f = fabric();
            let report = e.run(&mut f, &queues).unwrap();
            assert_eq!(report.execution.workers, workers);
            let mut g = fabric();
            execute_sequential(&mut g, &queues).unwrap();
            assert_eq!(f.first_difference(&g), None);
        }
    }

    fn file_of(
        generation: Generation,
        queues: &[Vec<Descriptor>],
    ) -> VerifiedQueueFile<Cursor<Vec<u8>>> {
        let mut w =
            QueueFileWriter::new(Cursor::new(Vec::new()), generation, queues.len()).unwrap();
        for (q, descs) in queues.iter().enumerate() {
            for d in descs {
                w.push(q, d).unwrap();
            }
        }
        let bytes = w.finish().unwrap().into_inner();
        VerifiedQueueFile::open(Cursor::new(bytes)).unwrap()
    }

    #[test]
    fn a_file_replays_like_its_queues_in_memory() {
        let queues = spray(&workload(), 4);
        let mut file = file_of(GEN, &queues);
        let (mut a, mut b) = (fabric(), fabric());
        let from_file = engine(2).replay_file(&mut a, &mut file).unwrap();
        let in_memory = engine(1).run(&mut b, &queues).unwrap();
        assert!(from_file.deterministic_eq(&in_memory));
        assert_eq!(a.first_difference(&b), None);
        // a second replay of the same (rewound) file gives the same report
        let again = engine(1).replay_file(&mut fabric(), &mut file).unwrap();
        assert!(again.deterministic_eq(&in_memory));
    }

    #[test]
    fn a_bad_file_descriptor_or_generation_changes_nothing() {
        let mut file = file_of(GEN, &with_bad(copy(GEN.hbm_bytes() + 0x40, 0x100, 8)));
        let mut f = fabric();
        let before = f.clone();
        let err = engine(2).replay_file(&mut f, &mut file).unwrap_err();
        assert_bad(err, "source range");
        assert_eq!(f.first_difference(&before), None);
        let mut other = file_of(Generation::Mariana, &[vec![fill(0, 8, 1)]]);
        let err = engine(2).replay_file(&mut f, &mut other).unwrap_err();
        assert_eq!(
            err,
            Error::GenerationMismatch {
                file: "mariana",
                fabric: "cayman"
            }
        );
        assert_eq!(f.first_difference(&before), None);
    }

    /// 1 048 576 fills in 4 queues of a file: the replay holds a bounded window only.
    #[test]
    fn a_large_file_replays_in_a_bounded_window() {
        const N: u64 = 1 << 18; // per queue
        const SLOTS: u64 = 1024;
        let base = |q: u64| q * SLOTS * 64;
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), GEN, 4).unwrap();
        for q in 0..4 {
            for i in 0..N {
                w.push(
                    q as usize,
                    &fill(base(q) + i % SLOTS * 64, 64, (i + q) & 0xff),
                )
                .unwrap();
            }
        }
        let bytes = w.finish().unwrap().into_inner();
        let mut file = VerifiedQueueFile::open(Cursor::new(bytes)).unwrap();
        let e = with(2, |c| {
            c.queues = 4;
            c.batch = 1024;
            c.channel_depth = 2;
        });
        let mut f = Fabric::new(GEN);
        let report = e.replay_file(&mut f, &mut file).unwrap();
        assert_eq!(
            (report.summary.descriptors, report.summary.bytes),
            (4 * N, 4 * N * 64)
        );
        // windows of 2 batches of 1024 per queue, one unit per queue each
        assert_eq!(report.execution.units, 4 * N / 2048);
        assert_eq!(report.execution.max_buffered, 4 * 2 * 1024);
        assert!(file.max_buffered() <= MAX_BATCH);
        // slot j of queue q was last written by i = j + SLOTS * ((N - 1 - j) / SLOTS)
        for (q, j) in [(0, 0), (1, 5), (2, 1023), (3, 700)] {
            let i = j + SLOTS * ((N - 1 - j) / SLOTS);
            let mut out = [0u8; 64];
            f.read(FabricAddr(base(q) + j * 64), &mut out).unwrap();
            assert_eq!(out, [((i + q) & 0xff) as u8; 64], "queue {q} slot {j}");
        }
    }

    /// Serves one file image until `after` seeks, then another of the same length: a file
    /// rewritten between the validation pass and the execution pass.
    struct Rewritten {
        now: Cursor<Vec<u8>>,
        later: Vec<u8>,
        seeks: usize,
        after: usize,
    }

    impl std::io::Read for Rewritten {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            self.now.read(buf)
        }
    }

    impl std::io::Seek for Rewritten {
        fn seek(&mut self, pos: std::io::SeekFrom) -> std::io::Result<u64> {
            self.seeks += 1;
            if self.seeks > self.after && !self.later.is_empty() {
                let at = self.now.position();
                self.now = Cursor::new(std::mem::take(&mut self.later));
                self.now.set_position(at);
            }
            self.now.seek(pos)
        }
    }

    /// A WAIT raised past its signals after verification: whichever pass reads the
    /// rewritten chunk refuses it (never a hang, never an unvalidated descriptor run), and
    /// a rewrite seen by the validation pass changes nothing.
    #[test]
    fn a_file_rewritten_mid_replay_is_refused_by_its_chunk_digests() {
        use zerocopy::IntoBytes;
        let signal = copy(0x100, 0x9000, 64).with_signal(sem(1));
        let (ok, bad) = (
            copy(0x200, 0xa000, 64).with_wait(wait(1, 1)),
            copy(0x200, 0xa000, 64).with_wait(wait(1, 2)),
        );
        let queues = [vec![signal], vec![ok]];
        let mut w = QueueFileWriter::new(Cursor::new(Vec::new()), GEN, 2).unwrap();
        for (q, descs) in queues.iter().enumerate() {
            descs.iter().for_each(|d| w.push(q, d).unwrap());
        }
        let image = w.finish().unwrap().into_inner();
        let (from, to) = (ok.encode(), bad.encode());
        let at = image
            .windows(32)
            .position(|x| x == from.as_bytes())
            .unwrap();
        let later = [&image[..at], to.as_bytes(), &image[at + 32..]].concat();
        let want = Error::QueueFileChanged {
            queue: 1,
            chunk: 0,
            first: 0,
            offset: crate::queue_file::HEADER_BYTES + 32,
        };
        let (mut refused, mut untouched) = (0, 0);
        for (after, future) in (1..8).flat_map(|a| [(a, false), (a, true)]) {
            let r = Rewritten {
                now: Cursor::new(image.clone()),
                later: later.clone(),
                seeks: 0,
                after,
            };
            let mut file = VerifiedQueueFile::open(r).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let (f, out) = match future {
                    false => {
                        let mut f = fabric();
                        let out = engine(2).replay_file(&mut f, &mut file);
                        (f, out)
                    }
                    // the async face reads the execution pass ahead: the same refusal
                    true => {
                        let e = Arc::new(with(2, |_| ()));
                        let (f, _, out) = runtime(0).block_on(e.replay_file_async(fabric(), file));
                        (f, out)
                    }
                };
                let _ = tx.send((out.map(|_| ()), f));
            });
            let (out, f) = rx
                .recv_timeout(std::time::Duration::from_secs(30))
                .expect("replay hung");
            match out {
                Ok(()) => {}
                Err(e) => {
                    assert_eq!(e, want, "after {after}");
                    // queue 1's copy never ran, whatever happened to queue 0's
                    let w = window(&f);
                    assert_eq!(w[0xa000..0xa040], self::image()[0xa000..0xa040]);
                    refused += 1;
                    untouched += usize::from(f.first_difference(&fabric()).is_none());
                }
            }
        }
        assert!(refused >= 4, "{refused}");
        assert!(untouched >= 2, "no rewrite reached the validation pass");
    }

    /// `queues` with semaphores: every 50th descriptor of queue 0 signals 1, and the
    /// `k`-th 50th of each other queue waits for its `k`-th signal (as many as there are).
    fn with_semaphores(mut queues: Vec<Vec<Descriptor>>) -> Vec<Vec<Descriptor>> {
        let Some((first, rest)) = queues.split_first_mut() else {
            return queues;
        };
        let mut signals = 0;
        for d in first.iter_mut().step_by(50) {
            *d = d.with_signal(sem(1));
            signals += 1;
        }
        for queue in rest {
            for (k, d) in (1..=signals).zip(queue.iter_mut().step_by(50)) {
                *d = d.with_wait(wait(1, k));
            }
        }
        queues
    }

    fn runtime(threads: usize) -> tokio::runtime::Runtime {
        match threads {
            0 => tokio::runtime::Builder::new_current_thread(),
            _ => {
                let mut b = tokio::runtime::Builder::new_multi_thread();
                b.worker_threads(threads);
                b
            }
        }
        .build()
        .unwrap()
    }

    /// The futures give the fabric and report the synchronous calls give, for queue
    /// counts, worker counts and batch sizes, with semaphores and without.
    #[test]
    fn the_async_face_gives_the_same_memory_and_report_as_the_sync_calls() {
        let descs = workload();
        for (queues, semaphores) in [(1, false), (2, true), (4, false), (4, true), (16, true)] {
            let mut sprayed = spray(&descs, queues);
            if semaphores {
                sprayed = with_semaphores(sprayed);
            }
            for workers in [0, 1, 2, 3] {
                let e = Arc::new(with(workers, |c| c.batch = 1 + 31 * (queues % 3)));
                let rt = runtime(workers % 2);
                let mut sync = fabric();
                let want = e.run(&mut sync, &sprayed).unwrap();
                let mut sync_file = fabric();
                let mut file = file_of(GEN, &sprayed);
                let want_file = e.replay_file(&mut sync_file, &mut file).unwrap();
                assert_eq!(sync_file.first_difference(&sync), None);

                let (f, got) = rt.block_on(e.replay_async(fabric(), sprayed.clone()));
                let got = got.unwrap();
                let at = format!("{queues} queues, {workers} workers, {semaphores}");
                assert_eq!(f.first_difference(&sync), None, "{at}");
                assert_eq!(f.digest(), sync.digest(), "{at}");
                assert_eq!(got.summary, want.summary, "{at}");

                let (f, file, got) = rt.block_on(e.replay_file_async(fabric(), file));
                let got = got.unwrap();
                assert_eq!(f.first_difference(&sync), None, "{at}");
                assert_eq!(f.digest(), sync_file.digest(), "{at}");
                assert_eq!(got.summary, want_file.summary, "{at}");
                let measured = |r: &ReplayReport| (r.execution.units, r.execution.max_buffered);
                assert_eq!(measured(&got), measured(&want_file), "{at}");
                // the file comes back rewound: it replays again
                let (_, _, again) = rt.block_on(e.replay_file_async(fabric(), file));
                assert_eq!(again.unwrap().summary, want_file.summary, "{at}");
            }
        }
    }

    /// A bad file through the futures: the sync calls' error, the fabric unchanged.
    #[test]
    fn a_bad_file_through_the_async_face_gives_the_sync_error() {
        let e = Arc::new(with(2, |_| ()));
        let rt = runtime(1);
        let bad = with_bad(copy(GEN.hbm_bytes() + 0x40, 0x100, 8));
        let want = engine(2).replay_file(&mut fabric(), &mut file_of(GEN, &bad));
        let (f, _, got) = rt.block_on(e.replay_file_async(fabric(), file_of(GEN, &bad)));
        assert_eq!(got.map(|_| ()), want.map(|_| ()));
        assert_eq!(f.first_difference(&fabric()), None);
        let (f, got) = rt.block_on(e.replay_async(fabric(), bad));
        assert_bad(got.unwrap_err(), "source range");
        assert_eq!(f.first_difference(&fabric()), None);
        let other = file_of(Generation::Mariana, &[vec![fill(0, 8, 1)]]);
        let (f, _, got) = rt.block_on(e.replay_file_async(fabric(), other));
        assert_eq!(
            got.unwrap_err(),
            Error::GenerationMismatch {
                file: "mariana",
                fabric: "cayman"
            }
        );
        assert_eq!(f.first_difference(&fabric()), None);
    }
}
