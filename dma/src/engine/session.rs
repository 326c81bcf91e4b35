//! Streamed replays: descriptors that arrive while the replay runs, from a producer pushing
//! them into a [`Session`] ([`super::Engine::stream`]) or read from a queue file
//! ([`super::Engine::replay_file`]), held per queue and run window by window, each window
//! a schedule of queue segments run by the executor. [`Pusher`] feeds a session from
//! async code ([`super::Engine::stream_async`]).

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use crate::descriptor::{Descriptor, SemaphoreLedger};
use crate::error::Error;
use crate::fabric::Fabric;
use crate::timing::{QueueTimeline, TimingModel};
use crate::FabricAddr;

use super::report::{ExecutionStats, ReplayReport, ReplaySummary};
use super::schedule::{Progress, Schedule};
use super::source::QueueSource;
use super::validate::{check_ranges, replay_error};
use super::{Engine, RaceCheck};

/// The producer's handle on a streaming replay, lent to the closure given to
/// [`Engine::stream`].
///
/// # What a push guarantees (fail closed per push)
///
/// [`Session::push`] checks all of its descriptors before any of them is handed to the
/// engine: each source range (every op but FILL) and destination range passes
/// [`Fabric::check`]; each destination lies inside the ranges declared to
/// [`Engine::stream`] (which were reserved up front); each semaphore has one signalling
/// queue; and each WAIT(s, n) comes after at least `n` SIGNALs of `s` were pushed (in any
/// queue's earlier pushes or earlier in this one). If any check fails the push is rejected
/// whole: none of it executes, its descriptors count as `failed` in the report, and the
/// session stays usable. Descriptors of pushes accepted earlier run regardless, so a
/// session is fail closed per push, not per replay; use [`Engine::run`] when all
/// descriptors are known up front.
///
/// Descriptor indices in errors count the accepted descriptors of the queue.
///
/// # When the run aborts
///
/// If a window fails while the session runs (which the per-push checks rule out for
/// every cause they know of), the run aborts: descriptors not yet executed are dropped,
/// later pushes fail with [`Error::EngineAborted`], and [`Engine::stream`] returns
/// [`Error::StreamAborted`] with the descriptors that ran and those that failed (rejected
/// pushes plus accepted descriptors the run never reached), whatever the producer
/// returned. The fabric then holds the effects of exactly the descriptors that ran.
///
/// # Windows and back-pressure
///
/// Accepted descriptors are held per queue; a push that brings its queue to
/// [`super::EngineConfig::batch`] times [`super::EngineConfig::channel_depth`] held
/// descriptors runs everything held (on the caller and the engine's thread pool) before
/// it returns, and the rest runs when the producer returns. Every WAIT needs its SIGNALs
/// pushed before it, so everything held can always run.
pub struct Session<'e> {
    engine: &'e Engine,
    fabric: &'e Fabric,
    /// Declared destinations, sorted, merged, as inclusive `(lo, end)`.
    declared: Vec<(u64, u64)>,
    ledger: SemaphoreLedger,
    /// Per queue, the descriptors of its accepted pushes (all of them run unless the run
    /// aborts).
    next: Vec<u64>,
    timeline: QueueTimeline,
    pending: Pending,
    /// Descriptors of rejected pushes.
    rejected: u64,
    /// Why the run stopped, once it has.
    aborted: Option<Error>,
}

impl Session<'_> {
    /// Checks `descriptors` as a whole and appends them to `queue` (see the type docs).
    pub fn push(&mut self, queue: usize, descriptors: &[Descriptor]) -> Result<(), Error> {
        if let Err(e) = self.check(queue, descriptors) {
            self.rejected += descriptors.len() as u64;
            return Err(e);
        }
        // The checks proved the one-signalling-queue rule the timeline enforces.
        self.timeline.push_all(queue, descriptors)?;
        let held = self.pending.push(queue, descriptors);
        let config = self.engine.config();
        if held >= config.batch.saturating_mul(config.channel_depth) {
            self.run_held();
        }
        self.stopped(queue)
    }

    /// Pushes what arrives on `pushes` until every [`Pusher`] is dropped (the producer of
    /// [`super::Engine::stream_async`], on a blocking thread); never fails: each push's
    /// error goes to its pusher.
    pub(crate) fn serve(&mut self, mut pushes: mpsc::Receiver<Push>) -> Result<(), Error> {
        while let Some(push) = pushes.blocking_recv() {
            let result = self.push(push.queue, &push.descriptors);
            // (a pusher that stopped waiting for the result is not an error)
            let _ = push.result.send(result);
        }
        Ok(())
    }

    /// [`Error::EngineAborted`] (for a push to `queue`) once the run has stopped.
    fn stopped(&self, queue: usize) -> Result<(), Error> {
        match &self.aborted {
            None => Ok(()),
            Some(e) => Err(Error::EngineAborted {
                queue,
                reason: format!("the run stopped: {e}"),
            }),
        }
    }

    /// The per-push checks: the run goes on, ranges, declared destinations, semaphore
    /// ownership and order.
    fn check(&mut self, queue: usize, descriptors: &[Descriptor]) -> Result<(), Error> {
        self.stopped(queue)?;
        let queues = self.next.len();
        let Some(&first) = self.next.get(queue) else {
            return Err(Error::NoSuchQueue { queue, queues });
        };
        let mut ledger = self.ledger.clone();
        for (i, d) in descriptors.iter().enumerate() {
            let index = first + i as u64;
            check_ranges(self.fabric, d)
                .map_err(|(what, e)| replay_error(queue, index, what, e))?;
            check_declared(&self.declared, d)
                .map_err(|e| replay_error(queue, index, "destination range", e))?;
            if let Some(w) = d.wait() {
                let pushed = ledger.signals(w.sem);
                if pushed < u64::from(w.count.get()) {
                    return Err(Error::SemaphoreOrder {
                        queue,
                        index,
                        sem: w.sem.get(),
                        count: w.count.get(),
                        pushed,
                    });
                }
            }
            ledger.record(queue, index, d)?;
        }
        self.ledger = ledger;
        if let Some(next) = self.next.get_mut(queue) {
            *next += descriptors.len() as u64;
        }
        Ok(())
    }

    /// Runs everything held, unless the run has stopped: a window's error stops it (what
    /// is held then never runs, and later pushes fail).
    fn run_held(&mut self) {
        while self.aborted.is_none() && self.pending.held() > 0 {
            if let Err(e) = self.pending.run(self.engine, self.fabric, |_| ()) {
                self.aborted = Some(e);
            }
        }
    }
}

/// The async producer's end of a session ([`super::Engine::stream_async`]): each push
/// is checked and held by [`Session::push`] on the session's thread, and its result comes
/// back to the await. Clones push into the same session; the session ends once every
/// clone is dropped.
#[derive(Clone, Debug)]
pub struct Pusher {
    pushes: mpsc::Sender<Push>,
}

/// One push in flight to the session, with where its result goes.
#[derive(Debug)]
pub(crate) struct Push {
    queue: usize,
    descriptors: Vec<Descriptor>,
    result: oneshot::Sender<Result<(), Error>>,
}

impl Pusher {
    /// A pusher and the session's end of its channel, which holds `depth` pushes.
    pub(crate) fn channel(depth: usize) -> (Pusher, mpsc::Receiver<Push>) {
        let (pushes, received) = mpsc::channel(depth);
        (Pusher { pushes }, received)
    }

    /// [`Session::push`] of `descriptors` to `queue`: its result once the session has
    /// checked and held them. Waits while the session is behind by the channel's depth
    /// (back-pressure). [`Error::EngineAborted`] if the session has ended (it failed to
    /// start, or its future was dropped before it ran).
    pub async fn push(&self, queue: usize, descriptors: Vec<Descriptor>) -> Result<(), Error> {
        let (result, answer) = oneshot::channel();
        let push = Push {
            queue,
            descriptors,
            result,
        };
        let ended = || Error::EngineAborted {
            queue,
            reason: "the session has ended".into(),
        };
        self.pushes.send(push).await.map_err(|_| ended())?;
        answer.await.unwrap_or_else(|_| Err(ended()))
    }
}

/// A streamed replay's descriptors held and not yet run, per queue, and what ran.
#[derive(Default)]
pub(crate) struct Pending {
    queues: Vec<Vec<Descriptor>>,
    progress: Progress,
    /// Descriptors that ran.
    executed: u64,
    /// Units run, the most descriptors held at once, the most workers a window had.
    units: u64,
    most: usize,
    workers: usize,
}

impl Pending {
    pub(crate) fn new(queues: usize) -> Pending {
        Pending {
            queues: vec![Vec::new(); queues],
            workers: 1,
            ..Pending::default()
        }
    }

    /// Descriptors held.
    fn held(&self) -> usize {
        self.queues.iter().map(Vec::len).sum()
    }

    /// Holds `descriptors` at the end of `queue` (checked to exist); how many it holds.
    fn push(&mut self, queue: usize, descriptors: &[Descriptor]) -> usize {
        if let Some(list) = self.queues.get_mut(queue) {
            list.extend_from_slice(descriptors);
        }
        self.most = self.most.max(self.held());
        self.queues.get(queue).map_or(0, Vec::len)
    }

    /// Runs the next window on `fabric` (its destinations reserved): what of each queue
    /// can run now ([`Progress::runnable`]), calling `beside` on the caller meanwhile
    /// (see [`Engine::execute_schedule`]) with what each queue holds beyond the window.
    /// Nothing runnable while something is held is [`Error::RunAborted`] (validation
    /// rules it out).
    fn run<R>(
        &mut self,
        engine: &Engine,
        fabric: &Fabric,
        beside: impl FnOnce(&[usize]) -> R,
    ) -> Result<R, Error> {
        let cut = self.progress.runnable(&self.queues);
        let cuts = || self.queues.iter().zip(&cut);
        let left: Vec<usize> = cuts().map(|(q, &n)| q.len() - n).collect();
        let ready = || cuts().map(|(q, &n)| q.get(..n).unwrap_or(q));
        let descriptors = cut.iter().sum::<usize>() as u64;
        if descriptors == 0 {
            return Err(Error::RunAborted);
        }
        let bytes = ready().flatten().map(|d| u64::from(d.len())).sum();
        let inline = engine.config().inline.admits(descriptors, bytes);
        let schedule = Schedule::window(ready(), &self.progress)?;
        let (stats, ran, other) =
            engine.execute_schedule(fabric, &schedule, inline, |_| beside(&left));
        self.executed += ran;
        self.units += schedule.units.len() as u64;
        self.workers = self.workers.max(stats.as_ref().map_or(1, |s| s.workers));
        stats?;
        self.progress.advance(ready());
        for (list, n) in self.queues.iter_mut().zip(cut) {
            list.drain(..n);
        }
        Ok(other)
    }

    /// What was measured, over `wall`.
    fn stats(&self, wall: Duration) -> ExecutionStats {
        ExecutionStats {
            wall,
            workers: self.workers,
            units: self.units,
            max_buffered: self.most,
            page_buckets: false,
        }
    }
}

/// Runs a validated `source` on `fabric` (its destinations reserved) window by window:
/// while one runs, each queue is read, in batches, up to a window of
/// [`super::EngineConfig::batch`] times [`super::EngineConfig::channel_depth`]
/// descriptors with what it still holds (so at most two windows are held per queue). A
/// read that fails stops the replay once the window running meanwhile is done.
pub(crate) fn run_source<S: QueueSource>(
    engine: &Engine,
    fabric: &Fabric,
    source: &mut S,
) -> Result<ExecutionStats, Error> {
    let started = Instant::now();
    let queues = source.queues();
    let mut pending = Pending::new(queues);
    let (batch, depth) = (engine.config().batch, engine.config().channel_depth);
    let window = batch.saturating_mul(depth);
    let mut ended = vec![false; queues];
    // appends to `into` (per queue), batch by batch, what each queue that `held` that many
    // descriptors still needs to hold a window
    let mut read = |into: &mut [Vec<Descriptor>], held: &[usize]| -> Result<(), Error> {
        let queues = into.iter_mut().zip(&mut ended).zip(held);
        for (queue, ((list, ended), &held)) in queues.enumerate() {
            let mut read = held;
            while read < window && !*ended {
                let next = source.next(queue, batch.min(window - read))?;
                list.extend_from_slice(next);
                read += next.len();
                *ended = next.is_empty();
            }
        }
        Ok(())
    };
    let mut ahead = vec![Vec::new(); queues];
    read(&mut pending.queues, &vec![0; queues])?;
    while pending.held() > 0 {
        let held = pending.held();
        let read = pending.run(engine, fabric, |left| read(&mut ahead, left))?;
        let next = ahead.iter().map(Vec::len).sum::<usize>();
        pending.most = pending.most.max(held + next);
        for (list, next) in pending.queues.iter_mut().zip(&mut ahead) {
            list.append(next);
        }
        read?;
    }
    Ok(pending.stats(started.elapsed()))
}

/// Whether the destination (checked in-region) lies inside one `declared` range.
fn check_declared(declared: &[(u64, u64)], d: &Descriptor) -> Result<(), Error> {
    let (dst, len) = d.dest_range();
    // check_ranges proved `len >= 1` and no overflow.
    let end = dst.0 + (len - 1);
    let at = declared.partition_point(|&(lo, _)| lo <= dst.0);
    match at.checked_sub(1).and_then(|i| declared.get(i)) {
        Some(&(_, e)) if end <= e => Ok(()),
        _ => Err(Error::UndeclaredDestination { addr: dst.0, len }),
    }
}

/// Checks and reserves the declared destinations; returns them sorted and merged.
fn declare(
    fabric: &mut Fabric,
    destinations: &[(FabricAddr, u64)],
) -> Result<Vec<(u64, u64)>, Error> {
    let mut ranges = Vec::with_capacity(destinations.len());
    for &(addr, len) in destinations {
        fabric.check(addr, len)?;
        // just checked: `len >= 1`, no overflow
        ranges.push((addr.0, addr.0 + (len - 1)));
    }
    // Only the declared destinations stay writable (every other page is read unlocked).
    fabric.close_pages();
    for &(addr, len) in destinations {
        fabric.reserve(addr, len)?;
    }
    ranges.sort_unstable();
    // a range that starts inside or right after the one before joins it
    ranges.dedup_by(|&mut (lo, end), last| {
        let joins = lo <= last.1.saturating_add(1);
        if joins {
            last.1 = last.1.max(end);
        }
        joins
    });
    Ok(ranges)
}

impl Engine {
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
        let generation = fabric.generation();
        let timeline = QueueTimeline::new(TimingModel::new(generation), queues, false)?;
        let declared = declare(fabric, destinations)?;
        let started = Instant::now();
        let mut session = Session {
            engine: self,
            fabric,
            declared,
            ledger: SemaphoreLedger::new(),
            next: vec![0; queues],
            timeline,
            pending: Pending::new(queues),
            rejected: 0,
            aborted: None,
        };
        let produced = catch_unwind(AssertUnwindSafe(|| produce(&mut session)));
        // Every accepted descriptor runs, whatever the producer did.
        session.run_held();
        let produced = produced.unwrap_or_else(|panic| resume_unwind(panic));
        let executed = session.pending.executed;
        // Rejected pushes, and accepted descriptors an aborted run never reached.
        let accepted = session.next.iter().sum::<u64>();
        let failed = session.rejected + accepted.saturating_sub(executed);
        if let Some(source) = session.aborted {
            return Err(Error::StreamAborted {
                executed,
                failed,
                source: Box::new(source),
            });
        }
        produced?;
        let execution = session.pending.stats(started.elapsed());
        Ok(ReplayReport {
            summary: ReplaySummary::new(generation, session.timeline.finish()?, failed),
            execution,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::{DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use crate::engine::{EngineConfig, RaceCheck};
    use crate::generation::Generation;
    use std::num::NonZeroU32;

    const GEN: Generation = Generation::Mariana;
    const OUT: u64 = 0x10_0000;
    const OUT_LEN: u64 = 0x4_0000;

    fn engine(workers: usize) -> Engine {
        Engine::new(EngineConfig {
            queues: 4,
            workers,
            batch: 4,
            channel_depth: 1,
            ..EngineConfig::default()
        })
        .unwrap()
    }

    fn fabric() -> Fabric {
        let mut f = Fabric::new(GEN);
        let data: Vec<u8> = (0..0x1_0000u32).map(|i| (i % 253) as u8).collect();
        f.write(FabricAddr(0), &data).unwrap();
        f
    }

    fn fill(dst: u64, len: u32, element: u64) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), len, Dtype::U8, element).unwrap()
    }

    fn add(src: u64, dst: u64, len: u32) -> Descriptor {
        Descriptor::new(
            DescOp::Add,
            FabricAddr(src),
            FabricAddr(dst),
            len,
            Dtype::U16,
        )
        .unwrap()
    }

    fn wait(sem: u8, count: u32) -> SemWait {
        SemWait {
            sem: SemId::new(sem).unwrap(),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    fn bytes(f: &Fabric, addr: u64, n: usize) -> Vec<u8> {
        let mut out = vec![0; n];
        f.read(FabricAddr(addr), &mut out).unwrap();
        out
    }

    /// Ten "instructions": each sprays reductions over the 4 queues into its own region;
    /// queue 0 signals the end of its part of each, and the next instruction's queue-3 part
    /// first copies what queue 0 wrote, after that signal.
    fn instructions() -> Vec<Vec<(usize, Descriptor)>> {
        let s0 = SemId::new(0).unwrap();
        (0..10u64)
            .map(|k| {
                let mut v: Vec<(usize, Descriptor)> = (0..24u64)
                    .map(|i| ((i % 4) as usize, add(i * 64, OUT + k * 0x1000 + i * 64, 64)))
                    .collect();
                if let Some(last) = v.iter_mut().rev().find(|(q, _)| *q == 0) {
                    last.1 = last.1.with_signal(s0);
                }
                if k > 0 {
                    let prev = OUT + (k - 1) * 0x1000;
                    let copy = Descriptor::new(
                        DescOp::Copy,
                        FabricAddr(prev),
                        FabricAddr(OUT + 0x3_0000 + k * 64),
                        64,
                        Dtype::U8,
                    )
                    .unwrap()
                    .with_wait(wait(0, k as u32));
                    v.insert(0, (3, copy));
                }
                v
            })
            .collect()
    }

    #[test]
    fn a_stream_replays_like_the_whole_queues() {
        let instrs = instructions();
        let mut queues = vec![Vec::new(); 4];
        for (q, d) in instrs.iter().flatten() {
            queues[*q].push(*d);
        }
        let mut want = fabric();
        let checked = Engine::new(EngineConfig {
            race_check: RaceCheck::On,
            queues: 4,
            ..EngineConfig::default()
        });
        let whole = checked.unwrap().run(&mut want, &queues).unwrap();
        assert_ne!(bytes(&want, OUT + 0x3_0000 + 9 * 64, 64), [0; 64]);
        for workers in [1, 2] {
            let mut f = fabric();
            let report = engine(workers)
                .stream(&mut f, 4, &[(FabricAddr(OUT), OUT_LEN)], |s| {
                    for instr in &instrs {
                        for q in 0..4 {
                            let part: Vec<Descriptor> = instr
                                .iter()
                                .filter(|(x, _)| *x == q)
                                .map(|(_, d)| *d)
                                .collect();
                            s.push(q, &part)?;
                        }
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(f.first_difference(&want), None);
            assert_eq!(report.summary, whole.summary);
            assert!(report.execution.units >= 10 * 4);
        }
    }

    /// An async producer, pushing through clones of its [`Pusher`] while the session's
    /// future runs on a spawned task, gives the memory and report of the sync session;
    /// a bad push comes back to its await, and the session goes on.
    #[test]
    fn an_async_producer_streams_like_the_sync_one() {
        let instrs = instructions();
        let push_all = |s: &mut Session<'_>| {
            assert!(s.push(1, &[fill(OUT - 8, 16, 3)]).is_err());
            for (q, d) in instrs.iter().flatten() {
                s.push(*q, &[*d])?;
            }
            Ok(())
        };
        let declared = vec![(FabricAddr(OUT), OUT_LEN)];
        for threads in [0, 2] {
            let e = std::sync::Arc::new(engine(threads.max(1)));
            let mut want = fabric();
            let sync = e.stream(&mut want, 4, &declared, push_all).unwrap();
            let rt = match threads {
                0 => tokio::runtime::Builder::new_current_thread().build(),
                n => tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(n)
                    .build(),
            }
            .unwrap();
            let (f, got, bad) = rt.block_on(async {
                let (pusher, run) = e.stream_async(fabric(), 4, declared.clone());
                let run = tokio::spawn(run);
                let bad = pusher.push(1, vec![fill(OUT - 8, 16, 3)]).await;
                let other = pusher.clone();
                for (q, d) in instrs.iter().flatten() {
                    let p = if q % 2 == 0 { &pusher } else { &other };
                    p.push(*q, vec![*d]).await.unwrap();
                }
                drop((pusher, other));
                let (f, got) = run.await.unwrap();
                (f, got, bad)
            });
            let got = got.unwrap();
            assert_eq!(f.first_difference(&want), None, "{threads} threads");
            assert_eq!(got.summary.failed, 1);
            assert_eq!(got.summary, sync.summary);
            let Err(Error::ReplayDescriptor { what, .. }) = bad else {
                panic!("{bad:?}")
            };
            assert_eq!(what, "destination range");
        }
        // a session that cannot start ends: the push says so
        let e = std::sync::Arc::new(engine(1));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let (f, got, pushed) = rt.block_on(async {
            let (pusher, run) = e.stream_async(fabric(), 9, declared.clone());
            let (ran, pushed) = tokio::join!(run, pusher.push(0, vec![fill(OUT, 8, 1)]));
            (ran.0, ran.1, pushed)
        });
        assert_eq!(got.unwrap_err(), Error::QueueCount { count: 9, max: 4 });
        assert!(
            matches!(pushed, Err(Error::EngineAborted { .. })),
            "{pushed:?}"
        );
        assert_eq!(f.first_difference(&fabric()), None);
    }

    #[test]
    fn a_rejected_push_runs_none_of_it_and_the_session_goes_on() {
        let mut f = fabric();
        let gap = GEN.hbm_bytes() + 8;
        let bad_src =
            Descriptor::new(DescOp::Copy, FabricAddr(gap), FabricAddr(OUT), 8, Dtype::U8).unwrap();
        let mut errors = Vec::new();
        let report = engine(2)
            .stream(&mut f, 2, &[(FabricAddr(OUT), OUT_LEN)], |s| {
                s.push(0, &[fill(OUT, 8, 1)])?;
                errors.push(s.push(1, &[fill(OUT + 64, 8, 2), bad_src]).unwrap_err());
                errors.push(s.push(1, &[fill(OUT - 8, 16, 3)]).unwrap_err());
                errors.push(
                    s.push(1, &[fill(OUT + 128, 8, 4).with_wait(wait(5, 1))])
                        .unwrap_err(),
                );
                errors.push(s.push(4, &[fill(OUT, 8, 1)]).unwrap_err());
                s.push(1, &[fill(OUT + 192, 8, 5)])
            })
            .unwrap();
        let Error::ReplayDescriptor {
            queue, index, what, ..
        } = &errors[0]
        else {
            panic!()
        };
        assert_eq!((*queue, *index, *what), (1, 1, "source range"));
        let Error::ReplayDescriptor { what, source, .. } = &errors[1] else {
            panic!()
        };
        assert_eq!(*what, "destination range");
        assert_eq!(
            **source,
            Error::UndeclaredDestination {
                addr: OUT - 8,
                len: 16
            }
        );
        assert_eq!(
            errors[2],
            Error::SemaphoreOrder {
                queue: 1,
                index: 0,
                sem: 5,
                count: 1,
                pushed: 0
            }
        );
        assert_eq!(
            errors[3],
            Error::NoSuchQueue {
                queue: 4,
                queues: 2
            }
        );
        assert_eq!(bytes(&f, OUT, 8), [1; 8]);
        assert_eq!(bytes(&f, OUT + 64, 8), [0; 8]); // the rejected push's valid first descriptor
        assert_eq!(bytes(&f, OUT + 192, 8), [5; 8]);
        let s = report.summary;
        assert_eq!((s.descriptors, s.bytes, s.failed), (2, 16, 5));
    }

    /// The run aborts mid-send: the descriptors that ran and those that did not add up to
    /// every pushed one, and the fabric holds exactly the ones reported as run.
    #[test]
    fn an_abort_mid_send_reports_what_ran_and_what_failed() {
        for workers in [1, 2] {
            let mut f = fabric();
            let mut late = 0u64;
            let err = engine(workers)
                .stream(&mut f, 2, &[(FabricAddr(OUT), OUT_LEN)], |s| {
                    let gap = GEN.hbm_bytes() + 8;
                    let bad = Descriptor::new(
                        DescOp::Copy,
                        FabricAddr(gap),
                        FabricAddr(OUT),
                        8,
                        Dtype::U8,
                    );
                    assert!(s.push(1, &[bad?]).is_err()); // one rejected descriptor
                    for i in 0..40u64 {
                        s.push((i % 2) as usize, &[fill(OUT + i * 8, 8, 0x5a)])?;
                    }
                    s.aborted = Some(Error::RunAborted);
                    for i in 40..200u64 {
                        late += u64::from(
                            s.push((i % 2) as usize, &[fill(OUT + i * 8, 8, 0x5a)])
                                .is_err(),
                        );
                    }
                    Ok(())
                })
                .unwrap_err();
            let Error::StreamAborted {
                executed,
                failed,
                source,
            } = err
            else {
                panic!("{err:?}")
            };
            assert_eq!(*source, Error::RunAborted);
            assert_eq!(executed + failed, 200 + 1, "{executed} {failed}");
            assert!(executed <= 40, "{executed}"); // nothing runs after the abort
            let written = (0..200u64)
                .filter(|i| bytes(&f, OUT + i * 8, 8) == [0x5a; 8])
                .count() as u64;
            assert_eq!(written, executed);
            // once a queue's task has stopped, its pushes fail
            assert!(late > 0 && late <= 160, "{late}");
        }
    }

    #[test]
    fn a_producer_error_comes_back_after_its_pushes_ran() {
        let mut f = fabric();
        let err = engine(1)
            .stream(&mut f, 1, &[(FabricAddr(OUT), 64)], |s| {
                s.push(0, &[fill(OUT, 8, 7)])?;
                Err(Error::EmptyAccess { addr: 1 })
            })
            .unwrap_err();
        assert_eq!(err, Error::EmptyAccess { addr: 1 });
        assert_eq!(bytes(&f, OUT, 8), [7; 8]);
    }

    #[test]
    fn a_panicking_producer_still_gets_the_fabric_back() {
        let mut f = fabric();
        let e = engine(2);
        let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            e.stream(&mut f, 1, &[(FabricAddr(OUT), 64)], |s| {
                s.push(0, &[fill(OUT, 8, 6)])?;
                panic!("producer bug")
            })
        }));
        assert!(caught.is_err());
        assert_eq!(bytes(&f, OUT, 8), [6; 8]);
        assert_eq!(bytes(&f, 0, 4), [0, 1, 2, 3]);
    }

    #[test]
    fn streams_are_checked_before_they_start() {
        let mut f = fabric();
        let before = f.clone();
        let racing = Engine::new(EngineConfig {
            race_check: RaceCheck::On,
            ..EngineConfig::default()
        })
        .unwrap();
        let none = |_: &mut Session| Ok(());
        assert_eq!(
            racing.stream(&mut f, 1, &[], none).unwrap_err(),
            Error::RaceCheckStreaming
        );
        assert_eq!(
            engine(1).stream(&mut f, 5, &[], none).unwrap_err(),
            Error::QueueCount { count: 5, max: 4 }
        );
        let bad = [(FabricAddr(OUT), 8), (FabricAddr(GEN.hbm_bytes()), 8)];
        let e = engine(1).stream(&mut f, 1, &bad, none).unwrap_err();
        assert_eq!(
            e,
            Error::Unmapped {
                addr: GEN.hbm_bytes()
            }
        );
        assert_eq!(f.allocated_bytes(), before.allocated_bytes());
        let r = engine(1)
            .stream(&mut f, 2, &[(FabricAddr(OUT), 8)], none)
            .unwrap();
        assert_eq!((r.summary.descriptors, r.summary.queues.len()), (0, 2));
        assert_eq!(f.first_difference(&before), None);
    }

    #[test]
    fn declared_ranges_merge_and_bound_every_destination() {
        let mut f = Fabric::new(GEN);
        let declared = declare(
            &mut f,
            &[
                (FabricAddr(100), 50),
                (FabricAddr(0), 100),
                (FabricAddr(400), 10),
            ],
        )
        .unwrap();
        assert_eq!(declared, vec![(0, 149), (400, 409)]);
        assert_eq!(check_declared(&declared, &fill(0, 150, 1)), Ok(()));
        assert_eq!(check_declared(&declared, &fill(402, 8, 1)), Ok(()));
        assert!(check_declared(&declared, &fill(140, 20, 1)).is_err());
        assert!(check_declared(&declared, &fill(405, 8, 1)).is_err());
        assert!(check_declared(&declared, &fill(200, 1, 1)).is_err());
    }
}
