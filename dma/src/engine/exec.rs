//! Execution: one tokio task per queue receiving batches over a bounded channel, the
//! semaphore board they share, and the feeder that keeps every queue's channel topped up.
//!
//! The feeder never waits on one particular queue: it offers a batch to every queue whose
//! channel has room and sleeps only when none has, until a queue task takes a batch (a
//! `Notify` permit). So a queue held on a semaphore cannot starve the queue that will
//! signal it; validation proved every wait is reached, hence the run always ends.
//!
//! An in-memory replay without semaphores whose queues fit their channels whole skips the
//! feeder: [`execute_claimed`] lets the calling thread and the engine's crew
//! ([`super::crew`]), or the calling thread alone for a small replay, claim whole queues,
//! or, for a replay whose pages are independent, shared by queues, in two buckets or more,
//! and dense unless it was validated ahead, buckets of destination pages, each page's
//! descriptors together where pages hold several ([`deal_by_page`]).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::runtime::Runtime;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tracing::Instrument;

use crate::compute::ComputeOp;
use crate::descriptor::{Descriptor, SemId, SemWait, SEMAPHORES};
use crate::error::Error;
use crate::fabric::{Fabric, PageLocks, PAGE_BYTES};
use crate::FabricAddr;

use super::cast::execute_cast;
use super::crew::{beside_then_job, Crew};
use super::lock;
use super::report::ExecutionStats;
use super::share::{EndHelping, WriteShare};
use super::source::QueueSource;
use super::validate::{replay_error, RangeRule};
use super::{EngineConfig, InvalidPolicy};

/// What one channel message carries.
pub(crate) type Batch = Vec<Descriptor>;

/// The pattern a FILL repeats: its element's `dtype.size()` little-endian bytes.
pub(crate) fn with_fill_pattern<T>(d: &Descriptor, f: impl FnOnce(&[u8]) -> T) -> T {
    let element = d.src().0.to_le_bytes();
    f(element.get(..d.dtype().size()).unwrap_or(&element))
}

/// Executes one descriptor through the fabric's shared forms, on the lock cache of its
/// queue's run. The caller reserved the destination pages; the fabric checks both ranges
/// again before writing anything.
pub(crate) fn execute_descriptor<const R: usize>(
    locks: &mut PageLocks<'_, R>,
    d: &Descriptor,
) -> Result<(), Error> {
    let len = u64::from(d.len());
    match d.op().compute_op() {
        _ if d.is_cast() => execute_cast(locks, d),
        None => with_fill_pattern(d, |p| locks.fill(d.dst(), len, p)),
        Some(ComputeOp::None) => locks.copy(d.src(), d.dst(), len),
        Some(op) => locks.reduce(d.src(), d.dst(), len, d.dtype(), op),
    }
}

/// How many descriptors ahead of the one executing a queue prefetches.
const PREFETCH_AHEAD: usize = 8;

/// Prefetches what `d` will read and write (a fill reads nothing).
fn prefetch<const R: usize>(locks: &mut PageLocks<'_, R>, d: &Descriptor) {
    if d.op().compute_op().is_some() {
        locks.prefetch(d.src(), d.len());
    }
    locks.prefetch(d.dst(), d.len());
}

/// Runs `f` on this thread, or, inside an async context (where tokio forbids blocking),
/// on a scoped helper thread.
pub(crate) fn blocking<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| s.spawn(f).join()).unwrap_or_else(|p| std::panic::resume_unwind(p))
}

/// What the queue tasks share.
pub(crate) struct Shared {
    fabric: Fabric,
    /// Per semaphore, the signals so far; `None` in a run without semaphores (a claimed
    /// run: sixteen channels made and dropped per replay cost microseconds for nothing).
    semaphores: Option<[watch::Sender<u64>; SEMAPHORES as usize]>,
    aborted: AtomicBool,
    /// A permit whenever a task takes a batch (or the run aborts).
    space: Notify,
    /// Descriptors handed to the tasks and not yet executed.
    in_flight: AtomicUsize,
    /// Descriptors the tasks have executed (or skipped under the Skip policy).
    executed: AtomicU64,
    /// What the liveness guard looks at, under one lock so that it sees one moment.
    liveness: Mutex<Liveness>,
    skip_invalid: bool,
}

/// A queue task as the liveness guard sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TaskState {
    /// Executing, or idle waiting for its next batch.
    Running,
    /// Blocked on a WAIT.
    Blocked(SemWait),
    Ended,
}

/// Per semaphore the signals so far, per queue task its state: when every task has
/// ended or is blocked on a WAIT whose count is not reached, no signal can ever come (a
/// liveness guard: validation rules deadlocks out, this catches whatever slips past it).
/// One lock, so that the guard never mixes two moments (a WAIT met by a signal and the
/// signaller then blocked, seen as neither met nor running).
#[derive(Debug)]
struct Liveness {
    signalled: [u64; SEMAPHORES as usize],
    states: Vec<TaskState>,
}

impl Liveness {
    fn stalled(&self) -> bool {
        self.states.iter().all(|state| match state {
            TaskState::Running => false,
            TaskState::Ended => true,
            // SemId guarantees index < SEMAPHORES.
            TaskState::Blocked(w) => self.signalled[w.sem.index()] < u64::from(w.count.get()),
        })
    }
}

impl Shared {
    /// The shared state of a run of `queues` queues; `semaphores` whether it has any.
    fn new(fabric: Fabric, skip_invalid: bool, (queues, semaphores): (usize, bool)) -> Shared {
        let channels = || std::array::from_fn(|_| watch::channel(0).0);
        Shared {
            fabric,
            semaphores: semaphores.then(channels),
            aborted: AtomicBool::new(false),
            space: Notify::new(),
            in_flight: AtomicUsize::new(0),
            executed: AtomicU64::new(0),
            liveness: Mutex::new(Liveness {
                signalled: [0; SEMAPHORES as usize],
                states: vec![TaskState::Running; queues],
            }),
            skip_invalid,
        }
    }

    /// Wakes every semaphore waiter so it re-checks its condition.
    fn nudge(&self) {
        for s in self.semaphores.iter().flatten() {
            s.send_modify(|_| {});
        }
    }

    /// The liveness guard's view (a panic elsewhere cannot make it unusable).
    fn liveness(&self) -> std::sync::MutexGuard<'_, Liveness> {
        lock(&self.liveness)
    }

    /// Whether every queue task has ended or is blocked on a WAIT not met, at one moment.
    fn stalled(&self) -> bool {
        self.liveness().stalled()
    }

    /// Sets `queue`'s state for the liveness guard.
    fn set_state(&self, queue: usize, state: TaskState) {
        if let Some(s) = self.liveness().states.get_mut(queue) {
            *s = state;
        }
    }

    /// Marks `queue` ended; whether some queue is blocked on a WAIT at that moment (only
    /// then can the end matter to a waiter: one that blocks later sees it when it first
    /// checks the liveness guard, under the same lock).
    fn end(&self, queue: usize) -> bool {
        let mut liveness = self.liveness();
        if let Some(s) = liveness.states.get_mut(queue) {
            *s = TaskState::Ended;
        }
        let blocked = |s: &TaskState| matches!(s, TaskState::Blocked(_));
        liveness.states.iter().any(blocked)
    }

    pub(crate) fn fabric(&self) -> &Fabric {
        &self.fabric
    }

    fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Acquire)
    }

    /// Stops the run: wakes every semaphore waiter and the feeder.
    pub(crate) fn abort(&self) {
        self.aborted.store(true, Ordering::Release);
        self.nudge();
        self.space.notify_one();
    }

    fn signal(&self, sem: SemId) {
        // SemId guarantees index < SEMAPHORES.
        self.liveness().signalled[sem.index()] += 1;
        if let Some(semaphores) = &self.semaphores {
            semaphores[sem.index()].send_modify(|n| *n += 1);
        }
    }

    /// Waits until `w` (of descriptor `index` of `queue`) is met; `Ok(false)` if the run
    /// aborted instead, [`Error::SemaphoreDeadlock`] if every live queue is blocked.
    async fn wait(&self, w: SemWait, queue: usize, index: u64) -> Result<bool, Error> {
        let need = u64::from(w.count.get());
        let deadlock = |reached| Error::SemaphoreDeadlock {
            queue,
            index,
            sem: w.sem.get(),
            count: w.count.get(),
            reached,
        };
        // A run without semaphores has no signal to wait for (validation keeps WAITs out).
        let Some(semaphores) = &self.semaphores else {
            return Err(deadlock(0));
        };
        // SemId guarantees index < SEMAPHORES.
        let sem = &semaphores[w.sem.index()];
        if *sem.borrow() >= need {
            return Ok(true);
        }
        let mut rx = sem.subscribe();
        self.set_state(queue, TaskState::Blocked(w));
        self.nudge();
        // The sender lives in `self`, so `wait_for` cannot fail on a closed channel.
        let _ = rx
            .wait_for(|&n| n >= need || self.is_aborted() || self.stalled())
            .await;
        self.set_state(queue, TaskState::Running);
        let reached = *sem.borrow();
        match (reached >= need, self.is_aborted()) {
            (true, _) => Ok(true),
            (false, true) => Ok(false),
            (false, false) => Err(deadlock(reached)),
        }
    }

    /// Executes a batch of `queue` starting at descriptor `first`, in order; `false` if
    /// the run aborted. The batch is cut before every descriptor that waits for a
    /// semaphore; each run waits (holding no page lock), then executes on one lock cache.
    async fn run_batch(
        &self,
        queue: usize,
        first: u64,
        batch: &[Descriptor],
    ) -> Result<bool, Error> {
        let mut at = first;
        for run in batch.chunk_by(|_, next| next.wait().is_none()) {
            // Only the first descriptor of a run can wait.
            if let Some(w) = run.first().and_then(Descriptor::wait) {
                if self.is_aborted() || !self.wait(w, queue, at).await? {
                    return Ok(false);
                }
            }
            if !self.run_ready(queue, at, run)? {
                return Ok(false);
            }
            at += run.len() as u64;
        }
        Ok(!self.is_aborted())
    }

    /// Executes `run` (descriptors `first..` of `queue`, its first one's wait met and no
    /// other waiting) unless the run aborted; `false` if it did.
    fn run_ready(&self, queue: usize, first: u64, run: &[Descriptor]) -> Result<bool, Error> {
        if self.is_aborted() {
            return Ok(false);
        }
        self.execute_run(queue, first, run)?;
        self.executed.fetch_add(run.len() as u64, Ordering::Relaxed);
        Ok(true)
    }

    /// Executes `run` (descriptors `first..` of `queue`, none waiting after the first)
    /// through one [`PageLocks`], so that consecutive descriptors on the same pages keep
    /// them locked. The locks are released before each signal, since the signalled queue
    /// is likely to touch these pages next. Each descriptor prefetches the one
    /// [`PREFETCH_AHEAD`] after it, and the first ones are prefetched before the loop, so
    /// that a short run (a page bucket of a few dozen scattered rows) does not wait for
    /// its first rows one by one.
    fn execute_run(&self, queue: usize, first: u64, run: &[Descriptor]) -> Result<(), Error> {
        let mut locks = self.fabric.run_locks();
        let mut ranges = RangeRule::default();
        for d in run.iter().take(PREFETCH_AHEAD) {
            prefetch(&mut locks, d);
        }
        for (i, d) in run.iter().enumerate() {
            if let Some(next) = run.get(i + PREFETCH_AHEAD) {
                prefetch(&mut locks, next);
            }
            // Validation proved the ranges (or, under the Skip policy, the same check fails
            // here for exactly the descriptors it counted as skipped) and reserved the pages.
            if !(self.skip_invalid && ranges.check(&self.fabric, d).is_err()) {
                execute_descriptor(&mut locks, d)
                    .map_err(|e| replay_error(queue, first + i as u64, "execution", e))?;
            }
            if let Some(s) = d.signal() {
                locks.release();
                self.signal(s);
            }
        }
        Ok(())
    }
}

/// Runs one unit of a [`super::schedule::Schedule`] on `fabric` (its destinations
/// reserved, see `Shared::execute_run`, whose body this is without the semaphore board:
/// the schedule orders the units). The locks are released at each SIGNAL, since the unit
/// waiting for it likely touches these pages next. An error names the descriptor's queue
/// and index ([`super::schedule::Unit::at`]).
pub(crate) fn run_unit(
    fabric: &Fabric,
    skip_invalid: bool,
    unit: &super::schedule::Unit<'_>,
) -> Result<(), ((usize, u64), Error)> {
    let run = unit.descriptors();
    let mut locks = fabric.run_locks();
    let mut ranges = RangeRule::default();
    for d in run.iter().take(PREFETCH_AHEAD) {
        prefetch(&mut locks, d);
    }
    for (i, d) in run.iter().enumerate() {
        if let Some(next) = run.get(i + PREFETCH_AHEAD) {
            prefetch(&mut locks, next);
        }
        // Validation proved the ranges (or, under the Skip policy, the same check fails
        // here for exactly the descriptors it counted as skipped) and reserved the pages.
        if !(skip_invalid && ranges.check(fabric, d).is_err()) {
            execute_descriptor(&mut locks, d).map_err(|e| {
                let (queue, index) = unit.at(i);
                ((queue, index), replay_error(queue, index, "execution", e))
            })?;
        }
        if d.signal().is_some() {
            locks.release();
        }
    }
    Ok(())
}

/// Aborts the run when a queue task ends without reaching its normal end (an error or a
/// panic), so that no other queue waits forever for its signals.
struct AbortOnDrop<'a> {
    shared: &'a Shared,
    queue: usize,
    armed: bool,
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        // One live task fewer: waiters re-check whether the rest are all blocked (waking
        // the 16 semaphores' waiters costs more than a small batch when nobody waits).
        let someone_waits = self.shared.semaphores.is_some() && self.shared.end(self.queue);
        if self.armed {
            self.shared.abort();
        } else if someone_waits {
            self.shared.nudge();
        }
    }
}

/// One queue: its batches, in order, until the channel closes.
async fn queue_task(
    shared: Arc<Shared>,
    queue: usize,
    mut rx: mpsc::Receiver<Batch>,
) -> Result<(), Error> {
    let mut guard = AbortOnDrop {
        shared: &shared,
        queue,
        armed: true,
    };
    let mut next = 0u64;
    while let Some(batch) = rx.recv().await {
        shared.space.notify_one();
        let go_on = shared.run_batch(queue, next, &batch).await?;
        shared.in_flight.fetch_sub(batch.len(), Ordering::Relaxed);
        next += batch.len() as u64;
        if !go_on {
            break;
        }
    }
    tracing::trace!(queue, descriptors = next, "queue done");
    guard.armed = false;
    Ok(())
}

/// Counters of the producing side.
#[derive(Debug, Default)]
struct Counters {
    batches: u64,
    max_in_flight: usize,
}

impl Counters {
    /// Accounts for `n` descriptors about to be handed over.
    fn handing(&mut self, shared: &Shared, n: usize) {
        self.batches += 1;
        let now = shared.in_flight.fetch_add(n, Ordering::Relaxed) + n;
        self.max_in_flight = self.max_in_flight.max(now);
    }
}

/// A run in progress: the shared state, one sender per queue, the tasks.
pub(crate) struct Running {
    shared: Arc<Shared>,
    senders: Vec<Option<mpsc::Sender<Batch>>>,
    tasks: Vec<JoinHandle<Result<(), Error>>>,
    started: Instant,
    counters: Counters,
    workers: usize,
}

impl Running {
    /// Moves `fabric` into the shared state and spawns the `queues` tasks on `runtime`
    /// (of `workers` threads).
    pub(crate) fn start(
        runtime: &Runtime,
        workers: usize,
        fabric: Fabric,
        queues: usize,
        config: &EngineConfig,
    ) -> Running {
        let skip = config.invalid == InvalidPolicy::Skip;
        let shared = Arc::new(Shared::new(fabric, skip, (queues, true)));
        let (mut senders, mut tasks) = (Vec::new(), Vec::new());
        for queue in 0..queues {
            // EngineConfig::check proved channel_depth >= 1.
            let (tx, rx) = mpsc::channel(config.channel_depth);
            let span = tracing::trace_span!("dma_queue", queue);
            let task = queue_task(Arc::clone(&shared), queue, rx).instrument(span);
            tasks.push(runtime.spawn(task));
            senders.push(Some(tx));
        }
        Running {
            shared,
            senders,
            tasks,
            started: Instant::now(),
            counters: Counters::default(),
            workers,
        }
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }

    /// Hands `batch` to `queue`'s task, waiting while its channel is full.
    pub(crate) fn send_blocking(&mut self, queue: usize, batch: Batch) -> Result<(), Error> {
        let queues = self.senders.len();
        let Some(tx) = self.senders.get(queue).and_then(Option::as_ref) else {
            return Err(Error::NoSuchQueue { queue, queues });
        };
        let n = batch.len();
        self.counters.handing(&self.shared, n);
        if blocking(|| tx.blocking_send(batch)).is_err() {
            self.shared.in_flight.fetch_sub(n, Ordering::Relaxed);
            return Err(Error::EngineAborted {
                queue,
                reason: "the queue stopped after a failure".to_string(),
            });
        }
        Ok(())
    }

    /// Streams every queue of `source` into the tasks in batches of `batch`.
    pub(crate) async fn feed<S: QueueSource>(
        &mut self,
        source: &mut S,
        batch: usize,
    ) -> Result<(), Error> {
        while self.senders.iter().any(Option::is_some) && !self.shared.is_aborted() {
            if !self.top_up(source, batch)? {
                self.shared.space.notified().await;
            }
        }
        Ok(())
    }

    /// Offers one batch to every open queue with room; whether anything changed.
    fn top_up<S: QueueSource>(&mut self, source: &mut S, batch: usize) -> Result<bool, Error> {
        let mut changed = false;
        for (queue, slot) in self.senders.iter_mut().enumerate() {
            let Some(tx) = slot.as_ref() else {
                continue;
            };
            if source.is_done(queue) {
                // Nothing left: close the channel now, not once it has room.
                *slot = None;
                changed = true;
                continue;
            }
            let close = match tx.try_reserve() {
                Ok(permit) => {
                    let descriptors = source.next(queue, batch)?;
                    if !descriptors.is_empty() {
                        self.counters.handing(&self.shared, descriptors.len());
                        permit.send(descriptors.to_vec());
                    }
                    descriptors.is_empty()
                }
                Err(TrySendError::Full(())) => continue,
                Err(TrySendError::Closed(())) => true,
            };
            changed = true;
            if close {
                *slot = None;
            }
        }
        Ok(changed)
    }

    /// Closes every channel, waits for the tasks to finish what they hold, and gives the
    /// fabric back with the outcome: the first failing queue's error (in queue order), or
    /// [`Error::RunAborted`] if the run was aborted without one.
    pub(crate) fn finish(mut self, runtime: &Runtime) -> Finished {
        self.senders.clear();
        let tasks = std::mem::take(&mut self.tasks);
        let results = blocking(|| runtime.block_on(join_all(tasks)));
        let stats = ExecutionStats {
            wall: self.started.elapsed(),
            workers: self.workers,
            batches: self.counters.batches,
            max_buffered: self.counters.max_in_flight,
            claimed: false,
            dealt_by_page: false,
        };
        let aborted = self.shared.is_aborted();
        let outcome = first_error(results).and(match aborted {
            false => Ok(stats),
            true => Err(Error::RunAborted),
        });
        let executed = self.shared.executed.load(Ordering::Acquire);
        // Every task has ended and dropped its handle on the shared state; the clone is a
        // safe fallback that is never expected to run.
        let fabric = Arc::try_unwrap(self.shared).map_or_else(|s| s.fabric.clone(), |s| s.fabric);
        Finished {
            fabric,
            outcome,
            executed,
        }
    }
}

/// What [`Running::finish`] gives back.
pub(crate) struct Finished {
    pub fabric: Fabric,
    pub outcome: Result<ExecutionStats, Error>,
    /// Descriptors the queue tasks executed (skipped ones included).
    pub executed: u64,
}

async fn join_all<T>(tasks: Vec<JoinHandle<T>>) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut out = Vec::with_capacity(tasks.len());
    for task in tasks {
        out.push(task.await);
    }
    out
}

fn first_error(
    results: Vec<Result<Result<(), Error>, tokio::task::JoinError>>,
) -> Result<(), Error> {
    for (queue, result) in results.into_iter().enumerate() {
        match result {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e),
            Err(e) => {
                return Err(Error::EngineAborted {
                    queue,
                    reason: e.to_string(),
                })
            }
        }
    }
    Ok(())
}

/// Whether a validated in-memory replay may run by claiming ([`execute_claimed`]): it has
/// no semaphore, and every queue fits the batches its channel would hold at once (a longer
/// queue is fed, so that its batches spread over the workers), or it is `dealt` by page
/// (which copies it into the buckets, so at most [`DEALT_MAX`] descriptors are; fed queue
/// by queue, its threads would meet on every page).
pub(crate) fn claimable(
    queues: &[Vec<Descriptor>],
    (semaphores, dealt): (bool, bool),
    config: &EngineConfig,
) -> bool {
    let at_once = config.batch.saturating_mul(config.channel_depth);
    let fits = || queues.iter().all(|q| q.len() <= at_once);
    !semaphores && (fits() || dealt)
}

/// The most descriptors a run dealt by page copies (32 MiB of them at most in the
/// [`Spare`] buffers).
pub(crate) const DEALT_MAX: usize = 1 << 20;

/// The descriptor buffers a dealt run deals its page buckets into, kept between runs: fresh buffers of a few MiB cost their page faults on every run
/// (measured 1.2 ms for 2 MiB on this project's VM, a quarter of a 256 MiB replay of 4 KiB
/// copies on two workers).
#[derive(Debug, Default)]
pub(crate) struct Spare(Mutex<Vec<Vec<Descriptor>>>);

impl Spare {
    /// `units` buffers, empty (fresh ones where too few are kept).
    fn take(&self, units: usize) -> Vec<Vec<Descriptor>> {
        let mut held = lock(&self.0);
        let kept = units.min(held.len());
        let mut buffers: Vec<_> = held.drain(..kept).collect();
        buffers.iter_mut().for_each(Vec::clear);
        buffers.resize_with(units, Vec::new);
        buffers
    }

    /// Keeps `buffers` for the next runs.
    pub(crate) fn put(&self, buffers: Vec<Vec<Descriptor>>) {
        lock(&self.0).extend(buffers);
    }
}

/// Executes a validated, [`claimable`] replay whose destination pages are reserved: the
/// calling thread and the `crew`'s threads each claim the next queue not yet claimed and
/// run it to its end, in batches of [`EngineConfig::batch`]. The caller works from the
/// start instead of sleeping while the others wake, and waits at most for the last queue
/// another thread runs. Queues still execute in order, each on one thread; the first
/// failing queue's error (in queue order) is returned, as in [`execute`]. The queues are
/// read where they are. Without a `crew` the caller runs every queue itself.
///
/// `beside` is called on the caller with the fabric while the crew starts the run, before
/// the caller joins it ([`Crew::run_beside`]); its result comes back with the run's. A
/// crew thread that runs out of units meanwhile helps with the writes `beside` makes
/// through the [`WriteShare`] it is given, until `beside` returns.
///
/// `dealt` are the buckets of `queues` if they were dealt already ([`deal`]).
///
/// With `dealing` by page (`Engine::deals`), the units claimed are not the queues but
/// [`deal_by_page`]'s buckets of destination pages, so that no two threads write one page
/// (a round-robin spray puts every queue on every page); an error is then the first
/// failing bucket's, named by its queue and index.
pub(crate) fn execute_claimed<R>(
    crew: Option<&Crew>,
    fabric: &mut Fabric,
    (queues, dealing, dealt): (&[Vec<Descriptor>], Dealing, Option<Buckets>),
    (config, spare): (&EngineConfig, &Spare),
    beside: impl FnOnce(&Fabric, &WriteShare) -> R,
) -> (Result<ExecutionStats, Error>, R) {
    let dealt = match (dealing, dealt) {
        (Dealing::Pages { .. }, Some(dealt)) => dealt,
        (Dealing::Pages { grouped }, None) => self::deal(queues, spare, grouped),
        (Dealing::Queues, unused) => {
            spare.put(unused.unwrap_or_default());
            Vec::new()
        }
    };
    let units: Vec<&[Descriptor]> = match dealing {
        Dealing::Pages { .. } => dealt.iter().map(Vec::as_slice).collect(),
        Dealing::Queues => queues.iter().map(Vec::as_slice).collect(),
    };
    let taken = std::mem::replace(fabric, Fabric::new(fabric.generation()));
    let skip = config.invalid == InvalidPolicy::Skip;
    let count = units.len();
    let claims = Claims {
        shared: Shared::new(taken, skip, (count, false)),
        units,
        next: AtomicUsize::new(0),
        // failed until run (a unit left unclaimed after a panic comes after every one claimed)
        results: Mutex::new((0..count).map(|_| Err(Error::RunAborted)).collect()),
        batch: config.batch,
    };
    let started = Instant::now();
    let share = WriteShare::default();
    let job = || {
        claims.claim_all();
        // SAFETY: this thread has claimed its last unit and run it to its end.
        unsafe { share.help(&claims.shared.fabric) };
    };
    let beside = || {
        let _end = EndHelping(&share);
        beside(&claims.shared.fabric, &share)
    };
    // A panic of the job is recorded by the claims (its queue stays failed); one of
    // `beside` unwinds once the job has run, and only after the fabric is back.
    let ran = catch_unwind(AssertUnwindSafe(|| match crew {
        Some(crew) => match crew.run_beside(&job, beside) {
            (true, other) => (crew.helpers() + 1, other),
            (false, other) => (1, other),
        },
        None => (1, beside_then_job(&job, beside)),
    }));
    let workers = ran.as_ref().map_or(1, |(workers, _)| *workers);
    let stats = ExecutionStats {
        wall: started.elapsed(),
        workers,
        batches: claims
            .units
            .iter()
            .map(|u| u.len().div_ceil(config.batch) as u64)
            .sum(),
        max_buffered: dealt.iter().map(Vec::len).sum(),
        claimed: true,
        dealt_by_page: dealing != Dealing::Queues,
    };
    let aborted = claims.shared.is_aborted();
    let (fabric_back, outcome) = (claims.shared.fabric, first_failure(claims.results, aborted));
    spare.put(dealt);
    *fabric = fabric_back;
    let other = ran.unwrap_or_else(|payload| resume_unwind(payload)).1;
    let outcome = match (outcome, dealing) {
        (Err(e), Dealing::Pages { grouped }) => Err(undealt(queues, grouped, e)),
        (outcome, _) => outcome.map(|()| stats),
    };
    (outcome, other)
}

/// The units of a claimed run (`Engine::deals` decides).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dealing {
    /// The queues themselves.
    Queues,
    /// Buckets of destination pages ([`deal_by_page`]), each page's descriptors together
    /// if `grouped`.
    Pages { grouped: bool },
}

impl Dealing {
    /// The dealing of a replay dealt by page, of `descriptors` over `pages` pages: grouped
    /// where some bucket has two pages or more and the pages have [`GROUP_MIN`]
    /// descriptors each on average (grouping a bucket costs a pass over it, which a page
    /// met once or twice in a bucket does not win back: `hostsim bench`'s
    /// embedding_update, 896 random rows over some 300 pages a replay, spent 8.5 ms a
    /// run dealing grouped against 4 ms ungrouped, and ran no faster).
    pub(crate) fn by_page(descriptors: usize, pages: usize) -> Dealing {
        let grouped = pages > PAGE_BUCKETS && descriptors >= pages.saturating_mul(GROUP_MIN);
        Dealing::Pages { grouped }
    }
}

/// Descriptors per destination page, on average, from which a dealt run is grouped.
const GROUP_MIN: usize = 4;

/// A run's descriptors dealt by destination page ([`deal_by_page`]).
pub(crate) type Buckets = Vec<Vec<Descriptor>>;

/// The buckets [`deal_by_page`] makes of `queues`, in buffers from `spare` (which
/// [`execute_claimed`] gives back to it).
pub(crate) fn deal(queues: &[Vec<Descriptor>], spare: &Spare, grouped: bool) -> Buckets {
    deal_by_page(queues, spare.take(PAGE_BUCKETS), grouped)
}

/// Buckets of destination pages a claimed run deals its descriptors into
/// ([`deal_by_page`]): page `k` goes to bucket `k % PAGE_BUCKETS`.
pub(crate) const PAGE_BUCKETS: usize = 16;

/// Groups of pages inside a bucket ([`deal_by_page`]): page `k` is in group
/// `(k / PAGE_BUCKETS) % PAGE_GROUPS`, so a bucket's pages of a table of up to
/// `PAGE_BUCKETS * PAGE_GROUPS` pages (64 MiB) are one group each.
const PAGE_GROUPS: usize = 64;

/// The bucket of the page holding `dst`, and its group in the bucket.
fn page_slot(dst: FabricAddr) -> (usize, usize) {
    let page = dst.0 / PAGE_BYTES;
    let group = (page / PAGE_BUCKETS as u64) % PAGE_GROUPS as u64;
    ((page % PAGE_BUCKETS as u64) as usize, group as usize)
}

/// The descriptors of `queues` round by round, each with its queue and index: round `r`
/// is descriptor `r` of every queue that has one, in queue order. (Round-robin queues,
/// as the DGE sprays them, come out in their generation order.)
fn rounds(queues: &[Vec<Descriptor>]) -> impl Iterator<Item = (usize, usize, &Descriptor)> {
    let longest = queues.iter().map(Vec::len).max().unwrap_or(0);
    (0..longest).flat_map(move |r| {
        queues
            .iter()
            .enumerate()
            .filter_map(move |(q, list)| Some((q, r, list.get(r)?)))
    })
}

/// Deals the descriptors of `queues` into `buckets` (empty) by destination page
/// ([`page_slot`]), each bucket in round order ([`rounds`]), or, if `grouped`, group by
/// group, each group in round order.
///
/// For a replay whose pages are independent (`Footprint::pages_independent`): then two
/// descriptors on different pages touch no common byte, and descriptors that share a
/// destination page stay in one group in their queues' order, so any schedule of the
/// buckets gives the memory the queues give. A claimer that takes a bucket writes pages
/// no other claimer writes; round order keeps a round-robin spray's writes sequential
/// inside a page; and the groups put a scatter's writes to one page together, so that a
/// claimer locks each page once, not once per descriptor (`hostsim bench`'s
/// row_scatter_add, random 4096-row scatter-adds over 390 pages, ran 0.089 -> 0.070 s).
fn deal_by_page(
    queues: &[Vec<Descriptor>],
    mut buckets: Vec<Vec<Descriptor>>,
    grouped: bool,
) -> Vec<Vec<Descriptor>> {
    buckets.resize_with(PAGE_BUCKETS, Vec::new);
    // `rounds` written out: this loop runs for every descriptor of the replay before any
    // executes, and the nested iterator cost it twice the time.
    let longest = queues.iter().map(Vec::len).max().unwrap_or(0);
    for r in 0..longest {
        for d in queues.iter().filter_map(|list| list.get(r)) {
            if let Some(bucket) = buckets.get_mut(page_slot(d.dest_range().0).0) {
                bucket.push(*d);
            }
        }
    }
    if grouped {
        let mut scratch = Vec::new();
        for bucket in &mut buckets {
            group_by_page(bucket, &mut scratch);
        }
    }
    buckets
}

/// Orders `bucket` group by group ([`page_slot`]), keeping the order inside each group
/// (a stable counting sort through `scratch`); a bucket of one group stays as it is.
fn group_by_page(bucket: &mut [Descriptor], scratch: &mut Vec<Descriptor>) {
    let group = |d: &Descriptor| page_slot(d.dest_range().0).1;
    let mut next = [0u32; PAGE_GROUPS];
    for d in bucket.iter() {
        next[group(d)] += 1;
    }
    if next.iter().filter(|&&n| n > 0).count() < 2 {
        return;
    }
    let mut len = 0;
    for start in next.iter_mut() {
        (*start, len) = (len, len + *start);
    }
    scratch.clear();
    scratch.extend_from_slice(bucket);
    for d in scratch.iter() {
        let at = &mut next[group(d)];
        if let Some(place) = bucket.get_mut(*at as usize) {
            *place = *d;
        }
        *at += 1;
    }
}

/// The queue and index in `queues` of the descriptor at `index` of bucket `bucket` of
/// [`deal_by_page`] (`grouped` as it was dealt).
fn locate(
    queues: &[Vec<Descriptor>],
    (bucket, grouped): (usize, bool),
    index: u64,
) -> Option<(usize, u64)> {
    let mut dealt: Vec<(usize, usize, u64)> = rounds(queues)
        .filter_map(|(q, r, d)| {
            let (b, g) = page_slot(d.dest_range().0);
            (b == bucket).then_some((g, q, r as u64))
        })
        .collect();
    // stable: round order inside a group
    if grouped {
        dealt.sort_by_key(|&(g, ..)| g);
    }
    dealt
        .get(usize::try_from(index).ok()?)
        .map(|&(_, q, r)| (q, r))
}

/// A dealt run's error with its bucket position put back as the descriptor's queue and
/// index.
fn undealt(queues: &[Vec<Descriptor>], grouped: bool, e: Error) -> Error {
    match e {
        Error::ReplayDescriptor {
            queue,
            index,
            what,
            source,
        } => {
            let at = locate(queues, (queue, grouped), index);
            let (queue, index) = at.unwrap_or((queue, index));
            Error::ReplayDescriptor {
                queue,
                index,
                what,
                source,
            }
        }
        e => e,
    }
}

/// The queues of a claimed run, who takes which next, and each queue's outcome. Aligned
/// as the crew's board is (a claimed run keeps it on the caller's stack, next to the
/// caller's own hot locals).
#[repr(align(128))]
struct Claims<'q> {
    shared: Shared,
    /// The descriptors of every unit claimed: a queue, or a bucket of pages.
    units: Vec<&'q [Descriptor]>,
    next: AtomicUsize,
    results: Mutex<Vec<Result<(), Error>>>,
    batch: usize,
}

impl Claims<'_> {
    /// Claims queues and runs each to its end until none is left or the run aborted.
    fn claim_all(&self) {
        loop {
            let queue = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(descs) = self.queue(queue) else {
                return;
            };
            // Its slot says failed until it ends: a queue that panics stays failed.
            let mut guard = AbortOnDrop {
                shared: &self.shared,
                queue,
                armed: true,
            };
            let outcome = self.run_queue(queue, descs);
            // a unit is a queue, or a bucket of destination pages when dealt by page
            tracing::trace!(unit = queue, descriptors = descs.len(), "unit done");
            guard.armed = outcome.is_err();
            drop(guard);
            self.record(queue, outcome);
        }
    }

    /// The descriptors of `queue` (`None` past the last queue).
    fn queue(&self, queue: usize) -> Option<&[Descriptor]> {
        self.units.get(queue).copied()
    }

    fn record(&self, queue: usize, outcome: Result<(), Error>) {
        let mut results = lock(&self.results);
        if let Some(slot) = results.get_mut(queue) {
            *slot = outcome;
        }
    }

    /// One queue's batches in order (nothing waits: the run has no semaphore).
    fn run_queue(&self, queue: usize, descs: &[Descriptor]) -> Result<(), Error> {
        let mut first = 0u64;
        for batch in descs.chunks(self.batch.max(1)) {
            if !self.shared.run_ready(queue, first, batch)? {
                break;
            }
            first += batch.len() as u64;
        }
        Ok(())
    }
}

/// The first failing queue's error in queue order ([`Error::RunAborted`] for one that
/// panicked), or [`Error::RunAborted`] if the run was aborted without one.
fn first_failure(results: Mutex<Vec<Result<(), Error>>>, aborted: bool) -> Result<(), Error> {
    let results = results.into_inner().unwrap_or_else(|p| p.into_inner());
    results.into_iter().collect::<Result<Vec<()>, Error>>()?;
    match aborted {
        false => Ok(()),
        true => Err(Error::RunAborted),
    }
}

/// Executes a validated source whose destination pages are reserved: moves the fabric into
/// the run, feeds the queues, and moves it back whatever happens.
pub(crate) fn execute<S: QueueSource>(
    runtime: &Runtime,
    workers: usize,
    fabric: &mut Fabric,
    source: &mut S,
    config: &EngineConfig,
) -> Result<ExecutionStats, Error> {
    let taken = std::mem::replace(fabric, Fabric::new(fabric.generation()));
    let mut running = Running::start(runtime, workers, taken, source.queues(), config);
    let fed = blocking(|| runtime.block_on(running.feed(source, config.batch)));
    if fed.is_err() {
        running.shared.abort();
    }
    let finished = running.finish(runtime);
    *fabric = finished.fabric;
    fed?;
    finished.outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What [`execute_claimed`] did, now on the executor: the queues (or, if `deal`,
    /// their page buckets, grouped) as a schedule, run by the caller and the `crew`.
    fn run_claimed(
        crew: Option<&Crew>,
        fabric: &mut Fabric,
        queues: (&[Vec<Descriptor>], bool),
        config: &EngineConfig,
        _spare: &Spare,
    ) -> Result<ExecutionStats, Error> {
        use crate::engine::executor;
        use crate::engine::schedule::{Schedule, Unit};
        let (queues, deal) = queues;
        let schedule = match deal {
            true => Schedule::page_buckets(queues, true),
            false => Schedule::segments(queues)?,
        };
        let skip = config.invalid == InvalidPolicy::Skip;
        let f: &Fabric = fabric;
        let run = |u: &Unit<'_>| run_unit(f, skip, u);
        let (outcome, workers) = executor::execute(&schedule, run, |job| match crew {
            Some(c) if c.run(job) => c.helpers() + 1,
            Some(_) => 1,
            None => {
                job();
                1
            }
        });
        let units = schedule.units().iter();
        outcome.map(|()| ExecutionStats {
            wall: std::time::Duration::ZERO,
            workers,
            batches: units
                .map(|u| u.descriptors().len().div_ceil(config.batch) as u64)
                .sum(),
            max_buffered: if deal { schedule.descriptors() } else { 0 },
            claimed: true,
            dealt_by_page: deal,
        })
    }
    use crate::addr::FabricAddr;
    use crate::descriptor::DescOp;
    use crate::dtype::Dtype;
    use crate::engine::execute_sequential;
    use crate::engine::source::Slices;
    use crate::generation::Generation;
    use std::num::NonZeroU32;

    /// A crew of `helpers` threads that linger 100 µs.
    fn crew(helpers: usize) -> Crew {
        Crew::new(helpers, std::time::Duration::from_micros(100)).unwrap()
    }

    fn runtime(workers: usize) -> Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .build()
            .unwrap()
    }

    fn config(batch: usize, channel_depth: usize) -> EngineConfig {
        EngineConfig {
            queues: 16,
            workers: 1,
            batch,
            channel_depth,
            ..EngineConfig::default()
        }
    }

    #[test]
    fn fills_use_the_element_bytes() {
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(0), 16).unwrap();
        let d = Descriptor::fill(FabricAddr(2), 8, Dtype::U16, 0xbeef).unwrap();
        execute_descriptor(&mut f.page_locks(), &d).unwrap();
        let mut out = [0u8; 12];
        f.read(FabricAddr(0), &mut out).unwrap();
        assert_eq!(
            out,
            [0, 0, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0xef, 0xbe, 0, 0]
        );
        let unreserved = Descriptor::fill(FabricAddr(1 << 20), 4, Dtype::U8, 1).unwrap();
        assert!(matches!(
            execute_descriptor(&mut f.page_locks(), &unreserved),
            Err(Error::NotReserved { .. })
        ));
    }

    #[test]
    fn semaphores_hold_a_queue_until_signalled() {
        let rt = runtime(1);
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(0), &[5; 8]).unwrap();
        f.reserve(FabricAddr(0x100), 8).unwrap();
        let sem = SemId::new(4).unwrap();
        let w = SemWait {
            sem,
            count: NonZeroU32::new(1).unwrap(),
        };
        let copy = |s: u64, d: u64| {
            Descriptor::new(DescOp::Copy, FabricAddr(s), FabricAddr(d), 8, Dtype::U8).unwrap()
        };
        // queue 0 copies what queue 1 writes, after queue 1's signal: with one worker and
        // queue 0 spawned first, it must wait
        let queues = vec![
            vec![copy(0x100, 0x108).with_wait(w)],
            vec![copy(0, 0x100).with_signal(sem)],
        ];
        f.reserve(FabricAddr(0x108), 8).unwrap();
        let stats = execute(&rt, 1, &mut f, &mut Slices::new(&queues), &config(1, 1)).unwrap();
        let mut out = [0u8; 8];
        f.read(FabricAddr(0x108), &mut out).unwrap();
        assert_eq!(out, [5; 8]);
        assert_eq!((stats.batches, stats.workers), (2, 1));
    }

    #[test]
    fn the_feeder_keeps_at_most_depth_plus_one_batches_per_queue() {
        let rt = runtime(2);
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(0), 1 << 16).unwrap();
        let fill =
            |i: u64| Descriptor::fill(FabricAddr(i % 512 * 64), 64, Dtype::U8, i & 0xff).unwrap();
        let queues: Vec<Vec<Descriptor>> = (0..3).map(|_| (0..5000).map(fill).collect()).collect();
        let stats = execute(&rt, 2, &mut f, &mut Slices::new(&queues), &config(100, 2)).unwrap();
        assert_eq!(stats.batches, 150);
        assert!(stats.max_buffered <= 3 * 3 * 100, "{}", stats.max_buffered);
        assert!(stats.max_buffered >= 100);
        // every queue wrote the same bytes last: descriptor 4999 -> slot 4999 % 512 = 391
        let mut out = [0u8; 1];
        f.read(FabricAddr(391 * 64), &mut out).unwrap();
        assert_eq!(out, [(4999 & 0xff) as u8]);
    }

    #[test]
    fn a_failing_queue_aborts_the_run_and_returns_the_fabric() {
        let rt = runtime(1);
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(0), &[9; 4]).unwrap();
        let sem = SemId::new(0).unwrap();
        let w = SemWait {
            sem,
            count: NonZeroU32::new(1).unwrap(),
        };
        // queue 1's destination was never reserved: it fails before signalling, so queue
        // 0's wait would hang without the abort
        let queues = vec![
            vec![Descriptor::fill(FabricAddr(0), 4, Dtype::U8, 1)
                .unwrap()
                .with_wait(w)],
            vec![Descriptor::fill(FabricAddr(1 << 30), 4, Dtype::U8, 1)
                .unwrap()
                .with_signal(sem)],
        ];
        let e = execute(&rt, 1, &mut f, &mut Slices::new(&queues), &config(4, 1)).unwrap_err();
        let Error::ReplayDescriptor {
            queue,
            index,
            what,
            source,
        } = e
        else {
            panic!("{e:?}")
        };
        assert_eq!((queue, index, what), (1, 0, "execution"));
        assert!(matches!(*source, Error::NotReserved { .. }));
        let mut out = [0u8; 4];
        f.read(FabricAddr(0), &mut out).unwrap();
        assert_eq!(out, [9; 4]);
    }

    /// The liveness guard: queues that validation never saw (a wait past every signal)
    /// end with a deadlock error instead of hanging, on one worker and on two.
    #[test]
    fn a_wait_no_signal_can_meet_fails_instead_of_hanging() {
        for workers in [1, 2] {
            let rt = runtime(workers);
            let mut f = Fabric::new(Generation::Cayman);
            f.reserve(FabricAddr(0), 64).unwrap();
            let sem = SemId::new(2).unwrap();
            let w = SemWait {
                sem,
                count: NonZeroU32::new(2).unwrap(),
            };
            let fill = |at: u64| Descriptor::fill(FabricAddr(at), 8, Dtype::U8, 3).unwrap();
            let queues = vec![
                vec![fill(0).with_signal(sem)],
                vec![fill(8), fill(16).with_wait(w), fill(24)],
            ];
            let e = execute(
                &rt,
                workers,
                &mut f,
                &mut Slices::new(&queues),
                &config(2, 1),
            )
            .unwrap_err();
            let want = Error::SemaphoreDeadlock {
                queue: 1,
                index: 1,
                sem: 2,
                count: 2,
                reached: 1,
            };
            assert_eq!(e, want);
            let mut out = [0u8; 32];
            f.read(FabricAddr(0), &mut out).unwrap();
            assert_eq!(out[..16], [3; 16]);
            assert_eq!(out[16..], [0; 16]);
        }
    }

    /// Four queues of fills and copies over one reserved 64 KiB window.
    fn four_queues() -> Vec<Vec<Descriptor>> {
        (0..4u64)
            .map(|q| {
                (0..300u64)
                    .map(|i| match i % 3 {
                        0 => {
                            Descriptor::fill(FabricAddr(q * 0x4000 + i * 8), 8, Dtype::U8, i & 0xff)
                                .unwrap()
                        }
                        _ => Descriptor::new(
                            DescOp::Copy,
                            FabricAddr(q * 0x4000 + (i - 1) * 8),
                            FabricAddr(q * 0x4000 + 0x2000 + i * 8),
                            8,
                            Dtype::U8,
                        )
                        .unwrap(),
                    })
                    .collect()
            })
            .collect()
    }

    #[test]
    fn a_claimed_run_equals_a_fed_one() {
        let queues = four_queues();
        let rt = runtime(2);
        let crew = crew(1);
        let cfg = config(64, 8);
        assert!(claimable(&queues, (false, false), &cfg));
        assert!(!claimable(&queues, (true, false), &cfg));
        assert!(!claimable(&queues, (true, true), &cfg));
        assert!(!claimable(&queues, (false, false), &config(64, 4)));
        assert!(claimable(&queues, (false, true), &config(64, 4)));
        let mut fed = Fabric::new(Generation::Cayman);
        let (mut claimed, mut alone) = (fed.clone(), fed.clone());
        for f in [&mut fed, &mut claimed, &mut alone] {
            f.reserve(FabricAddr(0), 0x10000).unwrap();
        }
        let a = execute(&rt, 2, &mut fed, &mut Slices::new(&queues), &cfg).unwrap();
        let spare = Spare::default();
        let b = run_claimed(Some(&crew), &mut claimed, (&queues, false), &cfg, &spare).unwrap();
        assert_eq!(claimed.first_difference(&fed), None);
        assert_eq!((b.batches, b.workers), (a.batches, 2));
        // the queues are read where they are: nothing is copied
        assert_eq!(b.max_buffered, 0);
        // without a crew the caller runs them all, to the same memory
        let c = run_claimed(None, &mut alone, (&queues, false), &cfg, &spare).unwrap();
        assert_eq!(alone.first_difference(&fed), None);
        assert_eq!((c.batches, c.workers), (a.batches, 1));
        let mut out = [0u8; 8];
        // copy 4 of queue 3 moved what fill 3 wrote
        claimed
            .read(FabricAddr(3 * 0x4000 + 0x2000 + 32), &mut out)
            .unwrap();
        assert_eq!(out, [3; 8]);
    }

    /// `queues` with descriptor 5 of queue 1 and descriptor 0 of queue 3 replaced by a fill
    /// of a page no test reserves (it fails when it executes).
    fn with_two_unreserved(mut queues: Vec<Vec<Descriptor>>) -> Vec<Vec<Descriptor>> {
        let unreserved = Descriptor::fill(FabricAddr(1 << 30), 4, Dtype::U8, 1).unwrap();
        queues[1][5] = unreserved;
        queues[3][0] = unreserved;
        queues
    }

    #[test]
    fn a_claimed_run_returns_the_first_failing_queue_and_the_fabric() {
        let queues = with_two_unreserved(four_queues());
        let crew = crew(1);
        let spare = Spare::default();
        for _ in 0..10 {
            let mut f = Fabric::new(Generation::Cayman);
            f.reserve(FabricAddr(0), 0x10000).unwrap();
            let e = run_claimed(
                Some(&crew),
                &mut f,
                (&queues, false),
                &config(64, 8),
                &spare,
            )
            .unwrap_err();
            let Error::ReplayDescriptor { queue, index, .. } = e else {
                panic!("{e:?}")
            };
            assert_eq!((queue, index), (1, 5));
            // the fabric came back: what queue 1 did before its failure is there
            let mut out = [0u8; 8];
            f.read(FabricAddr(0x4000 + 3 * 8), &mut out).unwrap();
            assert_eq!(out, [3; 8]);
        }
    }

    /// Four round-robin queues gathering 64-byte rows from a table at 0 (not written) to
    /// rows at 1 MiB, over several pages, each queue also adding twice into its own row
    /// of a sum block (duplicates stay in one queue, in order).
    fn gather_queues() -> Vec<Vec<Descriptor>> {
        let mut queues = vec![Vec::new(); 4];
        for i in 0..4096u64 {
            let row = (i * 7919) % 1000;
            let copy = Descriptor::new(
                DescOp::Copy,
                FabricAddr(row * 64),
                FabricAddr((1 << 20) + i * 64),
                64,
                Dtype::U8,
            );
            queues[(i % 4) as usize].push(copy.unwrap());
        }
        for (q, list) in queues.iter_mut().enumerate() {
            for k in 0..2u64 {
                let add = Descriptor::new(
                    DescOp::Add,
                    FabricAddr(k * 64 + q as u64 * 4),
                    FabricAddr((2 << 20) + q as u64 * 64),
                    64,
                    Dtype::F32,
                );
                list.push(add.unwrap());
            }
        }
        queues
    }

    #[test]
    fn a_run_dealt_by_page_equals_the_queues_in_order() {
        let queues = gather_queues();
        let mut f = Fabric::new(Generation::Cayman);
        let table: Vec<u8> = (0..64_000u32).map(|i| (i * 31 % 256) as u8).collect();
        f.write(FabricAddr(0), &table).unwrap();
        let mut want = f.clone();
        execute_sequential(&mut want, &queues).unwrap();
        let crew = crew(1);
        let spare = Spare::default();
        for _ in 0..5 {
            let mut g = f.clone();
            g.close_pages();
            g.reserve(FabricAddr(1 << 20), 4096 * 64).unwrap();
            g.reserve(FabricAddr(2 << 20), 256).unwrap();
            let stats = run_claimed(
                Some(&crew),
                &mut g,
                (&queues, true),
                &config(64, 64),
                &spare,
            );
            let stats = stats.unwrap();
            assert!(stats.dealt_by_page);
            // every descriptor was copied into a bucket once
            assert_eq!(
                stats.max_buffered,
                queues.iter().map(Vec::len).sum::<usize>()
            );
            assert_eq!(g.first_difference(&want), None);
        }
    }

    #[test]
    fn a_dealt_run_names_the_failing_descriptor_by_queue_and_index() {
        let queues = with_two_unreserved(gather_queues());
        let crew = crew(1);
        let mut f = Fabric::new(Generation::Cayman);
        f.reserve(FabricAddr(1 << 20), 4096 * 64).unwrap();
        f.reserve(FabricAddr(2 << 20), 256).unwrap();
        let spare = Spare::default();
        let e = run_claimed(
            Some(&crew),
            &mut f,
            (&queues, true),
            &config(64, 64),
            &spare,
        );
        let Err(Error::ReplayDescriptor { queue, index, .. }) = e else {
            panic!("{e:?}")
        };
        // both are on one page, so in one bucket, in round order: queue 3's comes first
        assert_eq!((queue, index), (3, 0));
    }

    #[test]
    fn dealing_keeps_every_descriptor_once_and_each_queue_in_order() {
        let queues = gather_queues();
        for grouped in [false, true] {
            let buckets = deal_by_page(&queues, Vec::new(), grouped);
            assert_eq!(buckets.len(), PAGE_BUCKETS);
            let total: usize = buckets.iter().map(Vec::len).sum();
            assert_eq!(total, queues.iter().map(Vec::len).sum::<usize>());
            for (b, bucket) in buckets.iter().enumerate() {
                for (i, d) in bucket.iter().enumerate() {
                    assert_eq!(page_slot(d.dest_range().0).0, b);
                    let (q, r) = locate(&queues, (b, grouped), i as u64).unwrap();
                    assert_eq!(queues[q][r as usize], *d);
                }
            }
            assert!(deal_by_page(&[], Vec::new(), grouped)
                .iter()
                .all(Vec::is_empty));
        }
    }

    #[test]
    fn a_run_is_grouped_from_four_descriptors_a_page_over_more_pages_than_buckets() {
        let grouped = |d, p| Dealing::by_page(d, p) == Dealing::Pages { grouped: true };
        assert!(grouped(4096, 390) && grouped(4 * 17, 17));
        assert!(!grouped(896, 300) && !grouped(4 * 17 - 1, 17));
        assert!(!grouped(4096, 16) && !grouped(1 << 20, 1));
    }

    proptest::proptest! {
        /// A scatter of 256-byte rows over a table of up to 1024 pages: every page's
        /// descriptors are one run of its bucket (locked once), in round order, and each
        /// is located back at its queue and index.
        #[test]
        fn dealing_a_scatter_puts_each_page_together_in_round_order(
            rows in proptest::collection::vec(0..1024 * 256u64, 1..600),
            queues in 1..=16usize,
        ) {
            let mut lists = vec![Vec::new(); queues];
            for (i, &row) in rows.iter().enumerate() {
                let d = Descriptor::new(DescOp::Add, FabricAddr(i as u64 * 256), FabricAddr((64 << 20) + row * 256), 256, Dtype::F32);
                lists[i % queues].push(d.unwrap());
            }
            let plain = deal_by_page(&lists, Vec::new(), false);
            for (b, bucket) in plain.iter().enumerate() {
                // round order: each descriptor located back, the queues' order kept
                let at: Vec<(usize, u64)> = (0..bucket.len()).map(|i| locate(&lists, (b, false), i as u64).unwrap()).collect();
                proptest::prop_assert!(at.iter().map(|&(q, r)| (r, q)).is_sorted());
                for (&(q, r), d) in at.iter().zip(bucket) {
                    proptest::prop_assert_eq!(lists[q][r as usize], *d);
                }
            }
            let buckets = deal_by_page(&lists, Vec::new(), true);
            let page = |d: &Descriptor| d.dest_range().0 .0 / PAGE_BYTES;
            for (b, bucket) in buckets.iter().enumerate() {
                let runs: Vec<u64> = bucket.chunk_by(|x, y| page(x) == page(y)).map(|run| page(&run[0])).collect();
                let distinct: std::collections::BTreeSet<u64> = runs.iter().copied().collect();
                proptest::prop_assert_eq!(runs.len(), distinct.len(), "bucket {} pages {:?}", b, runs);
                let mut last = None;
                for (i, d) in bucket.iter().enumerate() {
                    let (q, r) = locate(&lists, (b, true), i as u64).unwrap();
                    proptest::prop_assert_eq!(lists[q][r as usize], *d);
                    // a page's descriptors in round order (the same page is one run)
                    let at = (page(d), r, q);
                    if let Some(before) = last.filter(|l: &(u64, u64, usize)| l.0 == at.0) {
                        proptest::prop_assert!(before < at);
                    }
                    last = Some(at);
                }
            }
            let total: usize = buckets.iter().map(Vec::len).sum();
            proptest::prop_assert_eq!(total, rows.len());
        }
    }

    #[test]
    fn the_first_failure_is_the_lowest_failing_queue() {
        let e = |queue| Error::ReplayDescriptor {
            queue,
            index: 0,
            what: "execution",
            source: Box::new(Error::RunAborted),
        };
        let of = |r: Vec<Result<(), Error>>, aborted| first_failure(Mutex::new(r), aborted);
        assert_eq!(of(vec![Ok(()), Err(e(1)), Err(e(2))], false), Err(e(1)));
        assert_eq!(of(vec![Err(e(0)), Err(e(2))], true), Err(e(0)));
        assert_eq!(of(vec![Ok(()), Ok(())], true), Err(Error::RunAborted));
        assert_eq!(of(vec![Ok(()), Ok(())], false), Ok(()));
    }

    #[test]
    fn blocking_works_inside_an_async_context() {
        let rt = runtime(1);
        let got = rt.block_on(async { blocking(|| 41 + 1) });
        assert_eq!(got, 42);
    }
}
