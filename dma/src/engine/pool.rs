//! The thread pool an [`Engine`](super::Engine) keeps between replays to run a schedule
//! with the caller ([`super::executor::execute`]).
//!
//! [`ThreadPool::run`] hands its threads a job that borrows from the caller and returns
//! only once every thread is done with it: the job's lifetime is erased for the threads
//! (the `unsafe` below), and the proof that none uses it after `run` returns is in
//! `ThreadPool::run`.
//! After a job each thread waits for the next one for [`LINGER`], yielding, before it
//! sleeps, and the caller waits for the threads the same way: waking a sleeping thread
//! costs a good part of a small replay.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, TryLockError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::lock;

/// How long a pool thread waits, awake, for the next job.
const LINGER: Duration = Duration::from_micros(250);

/// A job with its lifetime erased; only [`ThreadPool::run`] makes one (see there).
type JobPtr = *const (dyn Fn() + Sync + 'static);

/// What the caller and the pool threads share.
#[derive(Debug, Default)]
struct Shared {
    /// The job of the current round and whether the pool is shutting down.
    state: Mutex<Posted>,
    /// Signalled when a round is posted or the pool shuts down.
    posted: Condvar,
    /// Signalled under `state` when the last thread of a round is done.
    finished: Condvar,
    /// The current round (also in `state`): a lingering thread polls it.
    round: AtomicU64,
    /// Threads not yet done with the current round's job.
    running: AtomicUsize,
}

/// The round posted last: its job (cleared once every thread is done with it), its
/// number, and whether the pool shuts down.
#[derive(Debug, Default)]
struct Posted {
    job: Option<SendJob>,
    round: u64,
    shut: bool,
}

/// A [`JobPtr`] that may cross to a pool thread (the job is `Sync`).
#[derive(Clone, Copy, Debug)]
struct SendJob(JobPtr);

// SAFETY: the pointee is `Sync`, so sharing it with another thread is sound; the pointer's
// validity is `ThreadPool::run`'s proof.
unsafe impl Send for SendJob {}

impl Shared {
    /// One pool thread: runs each round's job once, until the pool shuts down.
    fn serve(&self) {
        let mut seen = 0;
        while let Some(job) = self.next_job(&mut seen) {
            // SAFETY: see `ThreadPool::run`: the job lives until this thread's decrement
            // of `running` below, and this thread does not touch it afterwards.
            run_caught(unsafe { &*job.0 });
            if self.running.fetch_sub(1, Ordering::AcqRel) == 1 {
                let _state = lock(&self.state);
                self.finished.notify_all();
            }
        }
    }

    /// The job of the round after `seen` (lingering, then asleep, until it is posted),
    /// or `None` once the pool shuts down.
    fn next_job(&self, seen: &mut u64) -> Option<SendJob> {
        let start = Instant::now();
        while self.round.load(Ordering::Acquire) == *seen && start.elapsed() < LINGER {
            std::thread::yield_now();
        }
        let waiting = |state: &mut Posted| state.round == *seen && !state.shut;
        let state = self.posted.wait_while(lock(&self.state), waiting);
        let state = state.unwrap_or_else(|p| p.into_inner());
        *seen = state.round;
        match state.shut {
            true => None,
            false => state.job,
        }
    }
}

/// Threads that run a job with the caller (see the module docs).
#[derive(Debug)]
pub(crate) struct ThreadPool {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
    /// Held by the caller whose job the pool runs.
    busy: Mutex<()>,
}

impl ThreadPool {
    /// A pool of `helpers` threads.
    pub(crate) fn new(helpers: usize) -> std::io::Result<ThreadPool> {
        let mut pool = ThreadPool {
            shared: Arc::default(),
            threads: Vec::with_capacity(helpers),
            busy: Mutex::new(()),
        };
        for i in 0..helpers {
            let shared = Arc::clone(&pool.shared);
            let thread = std::thread::Builder::new()
                .name(format!("dma-pool-{i}"))
                .spawn(move || shared.serve())?;
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// Runs `job` on the calling thread and on every pool thread, and returns when all
    /// have returned, with `meanwhile` called on this thread first (the caller joins the
    /// job once it returns); how many threads the job was offered to (1 and the pool's),
    /// and `meanwhile`'s result. The pool is not offered a job while another caller's job holds it: this
    /// thread then calls `meanwhile`, then `job`, alone. A panic of `job` is caught (the
    /// job records its own failures); a panic of `meanwhile` unwinds from here once `job`
    /// has run to its end.
    pub(crate) fn run<R>(
        &self,
        job: &(dyn Fn() + Sync),
        meanwhile: impl FnOnce() -> R,
    ) -> (usize, R) {
        if self.threads.is_empty() {
            return (1, beside_then_job(job, meanwhile));
        }
        let _held = match self.busy.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (1, beside_then_job(job, meanwhile)),
        };
        // SAFETY (the erased lifetime): a pool thread dereferences the pointer only between
        // taking it from `state` and its decrement of `running` (`Shared::serve`), once per
        // round; `Finish` below (dropped on every way out of this call, unwinding
        // included) returns only when `running` is 0, so after every thread's last use,
        // and clears the job before another round can be posted (`busy` is held).
        let erased: JobPtr = unsafe { std::mem::transmute(job as *const (dyn Fn() + Sync)) };
        let finish = Finish(&self.shared);
        {
            let mut state = lock(&self.shared.state);
            self.shared
                .running
                .store(self.threads.len(), Ordering::Release);
            state.job = Some(SendJob(erased));
            state.round += 1;
            self.shared.round.store(state.round, Ordering::Release);
            self.shared.posted.notify_all();
        }
        let result = beside_then_job(job, meanwhile);
        drop(finish);
        (self.threads.len() + 1, result)
    }
}

/// Waits, on drop, until every pool thread is done with the posted job, then clears it.
struct Finish<'a>(&'a Shared);

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let shared = self.0;
        let start = Instant::now();
        while shared.running.load(Ordering::Acquire) > 0 && start.elapsed() < LINGER {
            std::thread::yield_now();
        }
        let running = |_: &mut Posted| shared.running.load(Ordering::Acquire) > 0;
        let state = shared.finished.wait_while(lock(&shared.state), running);
        state.unwrap_or_else(|p| p.into_inner()).job = None;
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        lock(&self.shared.state).shut = true;
        self.shared.posted.notify_all();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// Calls `meanwhile`, then `job` (catching its panic, see [`run_caught`]); `meanwhile`'s
/// result, or its panic, unwinding once `job` has run.
pub(crate) fn beside_then_job<R>(job: &(dyn Fn() + Sync), meanwhile: impl FnOnce() -> R) -> R {
    let result = catch_unwind(AssertUnwindSafe(meanwhile));
    run_caught(job);
    result.unwrap_or_else(|payload| resume_unwind(payload))
}

/// Calls `job`, catching a panic ([`drop_payload`]).
fn run_caught(job: &(dyn Fn() + Sync)) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
        drop_payload(payload);
    }
}

/// Drops a caught panic's `payload` where a panic of its own drop is caught too (and that
/// payload forgotten), so that neither leaks in the common case nor unwinds here.
pub(crate) fn drop_payload(payload: Box<dyn std::any::Any + Send>) {
    if let Err(again) = catch_unwind(AssertUnwindSafe(|| drop(payload))) {
        std::mem::forget(again);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    /// [`ThreadPool::run`] with nothing done meanwhile: whether the pool was offered `job`.
    fn run(pool: &ThreadPool, job: &(dyn Fn() + Sync)) -> bool {
        pool.run(job, || ()).0 == pool.threads.len() + 1
    }

    /// A job that counts its calls and holds until `all` calls have started (or five
    /// seconds passed), so that every pool thread runs it at the same time.
    fn gathering_job(count: &AtomicUsize, all: usize) -> impl Fn() + Sync + '_ {
        move || {
            count.fetch_add(1, Ordering::AcqRel);
            let start = Instant::now();
            while count.load(Ordering::Acquire) < all && start.elapsed() < Duration::from_secs(5) {
                std::thread::yield_now();
            }
        }
    }

    /// Runs a [`gathering_job`] of `all` threads on `pool` and checks that each ran it
    /// once.
    fn all_run_once(pool: &ThreadPool, all: usize) {
        let count = AtomicUsize::new(0);
        assert!(run(pool, &gathering_job(&count, all)));
        assert_eq!(count.into_inner(), all);
    }

    #[test]
    fn every_thread_runs_the_job_once() {
        let pool = ThreadPool::new(3).unwrap();
        for _ in 0..20 {
            all_run_once(&pool, 4);
        }
        for _ in 0..50 {
            let count = AtomicUsize::new(0);
            assert!(run(&pool, &|| {
                count.fetch_add(1, Ordering::Relaxed);
            }));
            assert_eq!(count.into_inner(), 4);
        }
    }

    #[test]
    fn the_pool_is_done_with_a_borrowed_job_when_run_returns() {
        let pool = ThreadPool::new(2).unwrap();
        for round in 0..100usize {
            // data on this frame, freed right after `run`: every call saw it whole
            let seen: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(round)).collect();
            let (sum, calls) = (AtomicUsize::new(0), AtomicUsize::new(0));
            run(&pool, &|| {
                let s = seen
                    .iter()
                    .map(|a| a.load(Ordering::Relaxed))
                    .sum::<usize>();
                sum.fetch_add(s, Ordering::Relaxed);
                calls.fetch_add(1, Ordering::Relaxed);
            });
            assert_eq!(sum.into_inner(), calls.into_inner() * 64 * round);
        }
    }

    #[test]
    fn the_pool_runs_a_job_while_the_caller_does_something_else() {
        let pool = ThreadPool::new(1).unwrap();
        for _ in 0..20 {
            // the pool thread takes the first unit and marks it; the caller, meanwhile,
            // waits for the mark, then joins and the two take the rest
            let (next, marked, done) = (
                AtomicUsize::new(0),
                AtomicBool::new(false),
                AtomicUsize::new(0),
            );
            let me = std::thread::current().id();
            let job = || {
                while next.fetch_add(1, Ordering::AcqRel) < 64 {
                    if std::thread::current().id() != me {
                        marked.store(true, Ordering::Release);
                    }
                    done.fetch_add(1, Ordering::AcqRel);
                }
            };
            let (threads, saw) = pool.run(&job, || {
                let start = Instant::now();
                while !marked.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(5) {
                    std::thread::yield_now();
                }
                marked.load(Ordering::Acquire)
            });
            assert!(
                threads == 2 && saw,
                "the pool ran the job while the caller waited"
            );
            assert_eq!(done.into_inner(), 64);
        }
        // alone: meanwhile first, then the job
        let order = Mutex::new(Vec::new());
        let alone = ThreadPool::new(0).unwrap();
        let job = || order.lock().unwrap().push("job");
        let (threads, ()) = alone.run(&job, || order.lock().unwrap().push("meanwhile"));
        assert_eq!(threads, 1);
        assert_eq!(order.into_inner().unwrap(), ["meanwhile", "job"]);
    }

    #[test]
    fn a_panic_beside_the_job_unwinds_once_the_job_has_run() {
        let pool = ThreadPool::new(1).unwrap();
        let runs = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run(
                &|| {
                    runs.fetch_add(1, Ordering::AcqRel);
                },
                || panic!("meanwhile fails"),
            )
        }));
        assert!(caught.is_err());
        assert_eq!(runs.into_inner(), 2, "the job ran on both threads");
        all_run_once(&pool, 2);
    }

    #[test]
    fn a_pool_of_none_runs_the_job_on_the_caller() {
        all_run_once(&ThreadPool::new(0).unwrap(), 1);
    }

    /// A panic payload whose drop panics again.
    struct Bomb;

    impl Drop for Bomb {
        fn drop(&mut self) {
            if !std::thread::panicking() {
                panic!("a payload that panics when dropped");
            }
        }
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        let pool = ThreadPool::new(2).unwrap();
        // (a payload whose drop panics leaves the second payload forgotten, by design: a
        // leak Miri would report, so Miri runs the plain panic only)
        let bombs: &[bool] = if cfg!(miri) { &[false] } else { &[false, true] };
        for &bomb in bombs {
            let calls = AtomicUsize::new(0);
            assert!(run(&pool, &|| {
                gathering_job(&calls, 3)();
                match bomb {
                    true => std::panic::panic_any(Bomb),
                    false => panic!("a failing job"),
                }
            }));
            assert_eq!(calls.into_inner(), 3);
            all_run_once(&pool, 3);
        }
    }

    #[test]
    fn a_second_caller_runs_alone_while_the_pool_is_busy() {
        let pool = Arc::new(ThreadPool::new(1).unwrap());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let entered_tx = Mutex::new(entered_tx);
        // The first job holds the pool until the test releases it.
        let first = move || {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv();
        };
        let holder = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || run(&pool, &first))
        };
        entered_rx.recv().unwrap();
        let count = AtomicUsize::new(0);
        assert!(!run(&pool, &|| {
            count.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(count.into_inner(), 1);
        // one release for the caller's call, one for the pool thread's
        release_tx.send(()).unwrap();
        let _ = release_tx.send(());
        assert!(holder.join().unwrap());
    }
}
