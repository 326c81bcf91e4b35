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
use crate::fabric::{Fabric, PageLocks};

use super::cast::execute_cast;
use super::lock;
use super::report::ExecutionStats;
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
    use crate::engine::crew::Crew;

    /// What [`execute_claimed`] did, now on the executor: the queues (or, if `deal`,
    /// their page buckets, grouped) as a schedule, run by the caller and the `crew`.
    fn run_claimed(
        crew: Option<&Crew>,
        fabric: &mut Fabric,
        queues: (&[Vec<Descriptor>], bool),
        config: &EngineConfig,
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
        let mut fed = Fabric::new(Generation::Cayman);
        let (mut claimed, mut alone) = (fed.clone(), fed.clone());
        for f in [&mut fed, &mut claimed, &mut alone] {
            f.reserve(FabricAddr(0), 0x10000).unwrap();
        }
        let a = execute(&rt, 2, &mut fed, &mut Slices::new(&queues), &cfg).unwrap();
        let b = run_claimed(Some(&crew), &mut claimed, (&queues, false), &cfg).unwrap();
        assert_eq!(claimed.first_difference(&fed), None);
        assert_eq!((b.batches, b.workers), (a.batches, 2));
        // the queues are read where they are: nothing is copied
        assert_eq!(b.max_buffered, 0);
        // without a crew the caller runs them all, to the same memory
        let c = run_claimed(None, &mut alone, (&queues, false), &cfg).unwrap();
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
        for _ in 0..10 {
            let mut f = Fabric::new(Generation::Cayman);
            f.reserve(FabricAddr(0), 0x10000).unwrap();
            let e = run_claimed(Some(&crew), &mut f, (&queues, false), &config(64, 8)).unwrap_err();
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
        for _ in 0..5 {
            let mut g = f.clone();
            g.close_pages();
            g.reserve(FabricAddr(1 << 20), 4096 * 64).unwrap();
            g.reserve(FabricAddr(2 << 20), 256).unwrap();
            let stats = run_claimed(Some(&crew), &mut g, (&queues, true), &config(64, 64));
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
        let e = run_claimed(Some(&crew), &mut f, (&queues, true), &config(64, 64));
        let Err(Error::ReplayDescriptor { queue, index, .. }) = e else {
            panic!("{e:?}")
        };
        // both are on one page, so in one bucket, in round order: queue 3's comes first
        assert_eq!((queue, index), (3, 0));
    }

    #[test]
    fn blocking_works_inside_an_async_context() {
        let rt = runtime(1);
        let got = rt.block_on(async { blocking(|| 41 + 1) });
        assert_eq!(got, 42);
    }
}
