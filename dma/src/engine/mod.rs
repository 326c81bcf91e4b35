//! The multi-queue DMA engine: up to 16 descriptor queues (the DMA rings of a NeuronCore)
//! run against one [`Fabric`], each queue in order, semaphores ordering descriptors
//! across queues.
//!
//! # Entry points
//!
//! - [`Engine::run`] replays in-memory queues; [`Engine::replay_file`] a
//!   [`VerifiedQueueFile`], streamed; [`Engine::stream`] what a producer pushes into a
//!   [`Session`].
//! - [`Engine::validate`] then [`Engine::run_beside`]: a replay validated ahead, with other
//!   work done on the caller meanwhile ([`Beside`]); [`Engine::validate_block`] for one
//!   [`Block`], validated and run without building its descriptors where it can be.
//! - [`Engine::replay_async`], [`Engine::replay_file_async`] and
//!   [`Engine::stream_async`]: the async face, futures that run the synchronous replay
//!   on tokio's blocking pool.
//! - [`execute_sequential`]: the plain reference the tests compare against.
//!
//! Every replay returns a [`ReplayReport`]: a [`ReplaySummary`] that follows from the
//! queues and the fabric alone, and the measured [`ExecutionStats`].
//!
//! # Fail closed
//!
//! Every descriptor is validated before any byte is written (its ranges pass
//! [`Fabric::check`], semaphores have one signalling queue and do not stall the
//! [`QueueTimeline`], and with [`RaceCheck::On`] no two queues touch the same bytes
//! unordered); a rejected replay leaves the fabric as it was, and its error names the
//! queue and index ([`Error::ReplayDescriptor`]). A [`Session`] is fail closed per push.
//!
//! # Execution
//!
//! Validation compiles a replay into a schedule of units: queue segments between
//! semaphore points, page buckets where the queues touch independent pages, or a block's
//! rows cut into runs of rows. One
//! executor runs any schedule by work claiming on the caller and the engine's thread
//! pool; a replay of [`Engine::run`] within [`EngineConfig::inline`] runs on the caller
//! alone. Streamed replays run window by window.
//!
//! # Determinism
//!
//! Descriptors that touch the same bytes are ordered by their queue or a semaphore, so
//! memory and summary are the same for any queue count, worker count and schedule.

mod cast;
mod exec;
mod executor;
mod pool;
mod race;
mod report;
mod schedule;
mod sequential;
mod session;
mod source;
mod validate;

use std::borrow::Cow;
use std::future::Future;
use std::io::{Read, Seek};
use std::sync::Arc;

use crate::block::Block;
use crate::descriptor::Descriptor;
use crate::error::Error;
use crate::fabric::Fabric;
use crate::queue_file::{VerifiedQueueFile, MAX_BATCH, MAX_QUEUES};
use crate::FabricAddr;

pub use report::{ExecutionStats, ReplayReport, ReplaySummary};
pub use sequential::execute_sequential;
pub use session::{Pusher, Session};

use schedule::Schedule;
use source::{from_start, QueueSource, Slices};
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
/// (at most 16), batches of 2048 descriptors, windows of 2 batches, no race check, the
/// default [`InlineLimit`].
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
    /// window of at most `channel_depth * batch` descriptors per queue (a queue file's
    /// next window is read while one runs).
    pub channel_depth: usize,
    /// The validating mode.
    pub race_check: RaceCheck,
    /// Which replays of [`Engine::run`] and [`Engine::replay_file`] run on the calling
    /// thread instead of the workers ([`Engine::run_beside`] always hands its replay on).
    pub inline: InlineLimit,
}

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        EngineConfig {
            queues: MAX_QUEUES,
            workers: cores.clamp(1, MAX_QUEUES),
            batch: 2048,
            channel_depth: 2,
            race_check: RaceCheck::Off,
            inline: InlineLimit::default(),
        }
    }
}

impl EngineConfig {
    /// Checks every field's range (each from 1).
    pub fn check(&self) -> Result<(), Error> {
        let fields = [
            (
                "queues",
                self.queues,
                MAX_QUEUES,
                "must be 1..=16 (the DMA rings)",
            ),
            ("workers", self.workers, 256, "must be 1..=256 threads"),
            (
                "batch",
                self.batch,
                MAX_BATCH,
                "must be 1..=8192 descriptors",
            ),
            (
                "channel_depth",
                self.channel_depth,
                1024,
                "must be 1..=1024 batches",
            ),
        ];
        for (field, value, most, rule) in fields {
            if !(1..=most).contains(&value) {
                return Err(Error::EngineConfig { field, value, rule });
            }
        }
        Ok(())
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
        let pool = pool::ThreadPool::new(config.workers - 1).map_err(|e| Error::EngineRuntime {
            message: format!("cannot start the engine's thread pool: {e}"),
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
        from_start(fabric.generation(), file, |source| {
            self.replay(fabric, source)
        })
    }

    /// The validation pass of [`Engine::replay_file`] alone, which reads nothing of the
    /// fabric but its generation: `Ok` with the summary its replay would report where
    /// the replay would run, else the error it would stop with before writing anything.
    /// The file is rewound before and after.
    pub fn validate_file<R: Read + Seek + Send>(
        &self,
        fabric: &Fabric,
        file: &mut VerifiedQueueFile<R>,
    ) -> Result<ReplaySummary, Error> {
        let plan = from_start(fabric.generation(), file, |source| {
            self.plan(fabric, source)
        })?;
        let summary = plan.summary.clone();
        self.keep(plan);
        Ok(summary)
    }

    fn check_queue_count(&self, count: usize) -> Result<(), Error> {
        let max = self.config.queues;
        match (1..=max).contains(&count) {
            true => Ok(()),
            false => Err(Error::QueueCount { count, max }),
        }
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
        let buckets = self.page_buckets(&queues, &plan, false);
        Ok(Validated {
            queues,
            block: None,
            plan,
            buckets: std::sync::Mutex::new(buckets),
            config: self.config,
        })
    }

    /// Runs `validated` on `fabric` (as [`Engine::run`] would) and calls `beside` on this
    /// thread while the queues run on the thread pool; this thread joins the replay once
    /// `beside` returns. Whatever its size the replay goes to the thread pool (the
    /// [`EngineConfig::inline`] limit is [`Engine::run`]'s), so that `beside` overlaps it:
    /// measured, a program of small replays runs faster so (`BENCHMARKS.md`). Through its
    /// [`Beside`], `beside` may read the fabric and write where the replay neither reads
    /// nor writes, so that the next replay can be prepared meanwhile; what it read of the
    /// replay's pages may be stale ([`Beside::read_the_replay`]).
    ///
    /// `validated` must come from this engine's [`Engine::validate`] (or
    /// [`Engine::validate_block`]) on a fabric of the generation ([`Error::NotValidatedHere`] otherwise, before anything runs). The
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
        let generation = validated.plan.summary.generation;
        if (generation, validated.config) != (fabric.generation(), self.config) {
            return Err(Error::NotValidatedHere {
                validated: describe(generation, &validated.config),
                running: describe(fabric.generation(), &self.config),
            });
        }
        let plan = &validated.plan;
        self.execute(fabric, plan, |fabric| match &validated.block {
            Some(block) => {
                let (stats, _, other) =
                    self.execute_schedule(fabric, &Schedule::rows(block), false, beside);
                Ok((stats?, other))
            }
            None => {
                let buckets = lock(&validated.buckets).take();
                self.run_queues(fabric, &validated.queues, plan, buckets, false, beside)
            }
        })
    }

    /// The queues of `validated`, given back (to be filled again; none for a block
    /// validated whole); the engine keeps its validation buffers for the next validation.
    pub fn recycle(&self, validated: Validated) -> Vec<Vec<Descriptor>> {
        self.keep(validated.plan);
        validated.queues
    }

    /// In-memory `queues` validated into `plan` dealt into page buckets, grouped by page
    /// where [`schedule::grouped`] says so, if they run as page buckets (`None`: as queue
    /// segments): where they have no semaphore, [`Plan::deals_by_page`], at most
    /// [`schedule::DEALT_MAX`] descriptors, and run on more than one thread or on the
    /// caller alone (`inline`).
    fn page_buckets(
        &self,
        queues: &[Vec<Descriptor>],
        plan: &Plan,
        inline: bool,
    ) -> Option<Schedule<'static>> {
        let descriptors = queues.iter().map(Vec::len).sum::<usize>();
        let by_page = (inline || self.config.workers > 1)
            && !plan.semaphores
            && plan.deals_by_page()
            && descriptors <= schedule::DEALT_MAX;
        let grouped = schedule::grouped(descriptors, plan.pages.len());
        by_page.then(|| Schedule::page_buckets(queues, grouped, &self.buckets))
    }

    /// Validate all, reserve, execute: the body of `run` and `replay_file`.
    fn replay<S: QueueSource>(
        &self,
        fabric: &mut Fabric,
        source: &mut S,
    ) -> Result<ReplayReport, Error> {
        let plan = self.plan(fabric, source)?;
        // small enough to run on the caller alone (EngineConfig::inline)?
        let inline = (self.config.inline).admits(plan.summary.descriptors, plan.summary.bytes);
        source.rewind();
        let (report, ()) = self.execute(fabric, &plan, |fabric| match source.in_memory() {
            Some(queues) => self.run_queues(fabric, queues, &plan, None, inline, |_| ()),
            None => Ok((session::run_source(self, fabric, source)?, ())),
        })?;
        self.keep(plan);
        Ok(report)
    }

    /// Keeps `plan`'s buffers, emptied, for the next replay's validation.
    fn keep(&self, plan: Plan) {
        *lock(&self.kept) = Some(plan.into_kept());
    }

    /// Reserves `plan`'s destinations and runs the replay validated into it (`run`, with
    /// the fabric lent for the replay): its report and what `run` returned beside it.
    fn execute<R>(
        &self,
        fabric: &mut Fabric,
        plan: &Plan,
        run: impl FnOnce(&Fabric) -> Result<(ExecutionStats, R), Error>,
    ) -> Result<(ReplayReport, R), Error> {
        // This replay's destinations are opened; every page it reads is closed, so read
        // without a lock while the queues run (Fabric::reopen).
        plan.pages.reopen(fabric, plan.footprint.read_pages())?;
        let fabric = fabric.lend(plan.footprint.read_pages());
        let (execution, other) = run(&fabric)?;
        let summary = plan.summary.clone();
        Ok((ReplayReport { summary, execution }, other))
    }

    /// Runs in-memory `queues` (validated into `plan`, with their page buckets if dealt
    /// ahead) as a schedule: page buckets where they are dealt by page, else queue
    /// segments ([`Engine::execute_schedule`]).
    fn run_queues<R>(
        &self,
        fabric: &Fabric,
        queues: &[Vec<Descriptor>],
        plan: &Plan,
        buckets: Option<Schedule<'static>>,
        inline: bool,
        beside: impl FnOnce(&mut Beside<'_>) -> R,
    ) -> Result<(ExecutionStats, R), Error> {
        let schedule = match buckets.or_else(|| self.page_buckets(queues, plan, inline)) {
            Some(buckets) => buckets,
            None => Schedule::segments(queues)?,
        };
        let (stats, _, other) = self.execute_schedule(fabric, &schedule, inline, beside);
        self.buckets.keep(schedule);
        Ok((stats?, other))
    }

    /// Runs `schedule` (validated, its destinations reserved) on the executor: on the
    /// caller alone if `inline`, else on the caller and the thread pool; and calls `beside`
    /// on the caller ([`Beside`]): while the thread pool starts the run, before the caller
    /// joins it (alone: before the run). A panic of `beside` unwinds from here once the run
    /// is over. The result, the descriptors that ran, and `beside`'s result.
    fn execute_schedule<R>(
        &self,
        fabric: &Fabric,
        schedule: &Schedule<'_>,
        inline: bool,
        beside: impl FnOnce(&mut Beside<'_>) -> R,
    ) -> (Result<ExecutionStats, Error>, u64, R) {
        let started = std::time::Instant::now();
        let ran = std::sync::atomic::AtomicU64::new(0);
        let run = |unit: &schedule::Unit<'_>| exec::run_unit(fabric, unit, &ran);
        let (outcome, (workers, other)) = executor::execute(schedule, run, |job| {
            let meanwhile = || {
                let open_reads = fabric.open_reads();
                beside(&mut Beside { fabric, open_reads })
            };
            match inline {
                true => (1, pool::beside_then_job(job, meanwhile)),
                false => self.pool.run(job, meanwhile),
            }
        });
        let stats = outcome.map(|()| ExecutionStats {
            wall: started.elapsed(),
            workers,
            units: schedule.units.len() as u64,
            max_buffered: schedule.buffered(),
            page_buckets: schedule.by_page(),
        });
        (stats, ran.into_inner(), other)
    }
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
        on_blocking_pool(move || {
            let result = engine.run(&mut fabric, &queues);
            (fabric, result)
        })
    }

    /// [`Engine::replay_file`] as a future: the file and the fabric move to tokio's
    /// blocking pool and come back (the file rewound) with [`Engine::replay_file`]'s
    /// result. Polling and dropping as for [`Engine::replay_async`].
    pub fn replay_file_async<R: Read + Seek + Send + 'static>(
        self: &Arc<Self>,
        mut fabric: Fabric,
        mut file: VerifiedQueueFile<R>,
    ) -> impl Future<Output = (Fabric, VerifiedQueueFile<R>, Result<ReplayReport, Error>)> + Send + 'static
    {
        let engine = Arc::clone(self);
        on_blocking_pool(move || {
            let result = engine.replay_file(&mut fabric, &mut file);
            (fabric, file, result)
        })
    }

    /// [`Engine::stream`] fed from async code: the session runs on tokio's blocking pool,
    /// taking what is pushed through the returned [`Pusher`] (and its clones) as
    /// [`Session::push`] would, its channel holding [`EngineConfig::channel_depth`]
    /// pushes. The future ends once every pusher is dropped and every accepted descriptor
    /// has run, with the fabric and [`Engine::stream`]'s result. Drive the future (spawn
    /// it, or join it with the producer) while pushing: nothing is taken until it is
    /// polled, inside a tokio runtime.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use dma::{Descriptor, Dtype, Engine, EngineConfig, Fabric, FabricAddr, Generation};
    /// let engine = Arc::new(Engine::new(EngineConfig::default())?);
    /// let rt = tokio::runtime::Runtime::new()?;
    /// let out = FabricAddr(0x1000);
    /// let (fabric, report) = rt.block_on(async {
    ///     let (pusher, run) = engine.stream_async(Fabric::new(Generation::Cayman), 1, vec![(out, 64)]);
    ///     let run = tokio::spawn(run);
    ///     pusher.push(0, vec![Descriptor::fill(out, 64, Dtype::U8, 7)?]).await?;
    ///     drop(pusher); // the session ends once every pusher is gone
    ///     Ok::<_, dma::Error>(run.await.expect("the session ran"))
    /// })?;
    /// assert_eq!(report?.summary.descriptors, 1);
    /// assert_eq!(fabric.read_obj::<[u8; 4]>(out)?, [7; 4]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stream_async(
        self: &Arc<Self>,
        mut fabric: Fabric,
        queues: usize,
        destinations: Vec<(FabricAddr, u64)>,
    ) -> (
        Pusher,
        impl Future<Output = (Fabric, Result<ReplayReport, Error>)> + Send + 'static,
    ) {
        let (pusher, pushes) = Pusher::channel(self.config.channel_depth);
        let engine = Arc::clone(self);
        let run = on_blocking_pool(move || {
            let result = engine.stream(&mut fabric, queues, &destinations, |s| s.serve(pushes));
            (fabric, result)
        });
        (pusher, run)
    }
}

/// `f` run on tokio's blocking pool (once the future is polled): what it returned; its
/// panic unwinds from the await.
async fn on_blocking_pool<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
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
    /// The queues (empty for a block validated whole).
    queues: Vec<Vec<Descriptor>>,
    /// The block validated whole ([`Engine::validate_block`]).
    block: Option<Block>,
    plan: Plan,
    /// The queues dealt by destination page, for the first run (see [`Engine::validate`]).
    buckets: std::sync::Mutex<Option<Schedule<'static>>>,
    /// The configuration it was validated with (its generation is its summary's).
    config: EngineConfig,
}

impl Validated {
    /// The queues (a block's built from it).
    pub fn queues(&self) -> Cow<'_, [Vec<Descriptor>]> {
        match &self.block {
            Some(block) => Cow::Owned(block.queues()),
            None => Cow::Borrowed(&self.queues),
        }
    }

    /// Whether running the replay may read or write a byte of the `len` bytes at `addr`:
    /// a byte between the lowest and the highest byte its descriptors read, or between
    /// the lowest and the highest they write. `false` means the bytes are the same whether
    /// written before or after the replay runs.
    pub fn touches(&self, addr: FabricAddr, len: u64) -> bool {
        self.plan.footprint.meets(addr.0, len)
    }
}

/// What the work beside a running replay may do with the fabric ([`Engine::run_beside`]).
#[derive(Debug)]
pub struct Beside<'f> {
    fabric: &'f Fabric,
    /// [`Fabric::open_reads`] when the work began.
    open_reads: u64,
}

impl<'f> Beside<'f> {
    /// The fabric, to read (see [`Beside::read_the_replay`]). Its shared write forms
    /// ([`Fabric::write_reserved`] and the like) reach only the replay's pages, and
    /// writing those beside the replay races with it: do not.
    pub fn fabric(&self) -> &Fabric {
        self.fabric
    }

    /// Writes `buf` at `addr` if no page of the range is one the replay reads from (between
    /// the lowest and the highest) or writes, and every page of it has storage of its own:
    /// `Ok(true)`. Else nothing is written and `Ok(false)`: write it once the replay is
    /// done. A range off the fabric is an error, as for [`Fabric::write`].
    pub fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<bool, Error> {
        self.fabric.write_beside(addr, buf)
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
mod tests;
