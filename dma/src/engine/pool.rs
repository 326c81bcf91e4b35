//! The thread pool an [`Engine`](super::Engine) keeps between replays to run a
//! schedule with the caller ([`super::executor::execute`]).
//!
//! A DGE instruction's replay takes about a hundred microseconds, and a thread that sleeps
//! in the kernel takes tens of microseconds to wake on a virtual machine, so a helper woken
//! per replay misses a good part of it. A pool thread therefore spins for [`EngineConfig::linger`](super::EngineConfig)
//! after each job, watching for the next one, and only then parks; the caller likewise
//! spins while it waits for the thread pool to finish before it parks.
//!
//! [`ThreadPool::run_beside`] lets the caller do other work first while the thread pool starts the job
//! (the engine prepares the next replay beside the one running, see
//! [`super::Engine::run_beside`]).
//!
//! One job at a time: [`ThreadPool::run`] runs the job on the caller and on every pool thread
//! that joins it before the caller's own share is done, and returns when all of those
//! have returned; a pool thread that wakes later leaves the job alone, so a small replay
//! never waits for a sleeping thread to wake. A caller that finds the thread pool busy with another caller's
//! job runs its job alone, on its own thread (the job claims work until none is left, so it
//! completes either way). A job that panics on a pool thread is caught there; the job's own
//! bookkeeping records the failure.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, TryLockError};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use super::lock;

/// A job posted to the thread pool: the caller's job, the thread to wake, and who joined it.
/// (Aligned as [`Board`] is.)
#[repr(align(128))]
struct Posted {
    /// Its number: the value of [`Board::posted`] once it is posted.
    seq: u64,
    /// The caller's job, its lifetime erased: called only by a pool thread that joined
    /// it while its gate was open (see [`ThreadPool::run`]).
    job: *const (dyn Fn() + Sync + 'static),
    caller: Thread,
    /// Pool threads that joined, plus [`CLOSED`] once the caller's own call returned.
    gate: AtomicUsize,
    /// Pool threads that joined and are done.
    done: AtomicUsize,
}

// SAFETY: `job` points to a `Sync` closure, which may be called from any thread; it is
// only dereferenced as `ThreadPool::run` describes.
unsafe impl Send for Posted {}
unsafe impl Sync for Posted {}

/// The bit of [`Posted::gate`] that closes it.
const CLOSED: usize = 1 << (usize::BITS - 1);

impl Posted {
    /// Joins the job unless its gate is closed; whether this thread may run it.
    fn join(&self) -> bool {
        let open = |g: usize| (g & CLOSED == 0).then_some(g + 1);
        self.gate
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, open)
            .is_ok()
    }

    /// Closes the gate; how many pool threads joined before.
    fn close(&self) -> usize {
        self.gate.fetch_or(CLOSED, Ordering::AcqRel) & !CLOSED
    }
}

/// What the caller and the pool threads share. Aligned to 128 bytes (a pair of cache
/// lines, as the adjacent-line prefetcher fetches them), so that no unrelated data that
/// another thread writes shares the lines the thread pool spins on.
#[repr(align(128))]
struct Board {
    /// Bumped for every job posted (and once more to stop the thread pool).
    posted: AtomicU64,
    current: Mutex<Option<Arc<Posted>>>,
    stop: AtomicBool,
    linger: Duration,
}

impl Board {
    /// Waits, spinning for `linger` and then parked, until `posted` moves past `seen`;
    /// its new value.
    fn next_post(&self, seen: u64) -> u64 {
        let moved = || Some(self.posted.load(Ordering::Acquire)).filter(|&p| p != seen);
        if let Some(p) = spin_until(self.linger, moved) {
            return p;
        }
        loop {
            // `ThreadPool::run` unparks after it posts: a post between this check and the park
            // leaves the park's token set, so the park returns at once.
            if let Some(p) = moved() {
                return p;
            }
            std::thread::park();
        }
    }

    fn set_current(&self, posted: Option<Arc<Posted>>) {
        *lock(&self.current) = posted;
    }

    fn current(&self) -> Option<Arc<Posted>> {
        lock(&self.current).clone()
    }
}

/// Spins until `ready` gives a value or `linger` has passed.
fn spin_until<T>(linger: Duration, mut ready: impl FnMut() -> Option<T>) -> Option<T> {
    let start = Instant::now();
    loop {
        for _ in 0..64 {
            if let Some(v) = ready() {
                return Some(v);
            }
            std::hint::spin_loop();
        }
        if start.elapsed() >= linger {
            return ready();
        }
    }
}

/// A pool thread's life: each job posted, joined while it is open and run once, until
/// the thread pool stops.
fn serve(board: &Board) {
    let (mut seen, mut joined) = (0, 0);
    loop {
        seen = board.next_post(seen);
        if board.stop.load(Ordering::Acquire) {
            return;
        }
        // A job is joined once: the one in `current` may be one this thread already ran
        // (posted after this thread last looked at the counter, before it looked here).
        let Some(posted) = board.current().filter(|p| p.seq > joined && p.join()) else {
            continue;
        };
        joined = posted.seq;
        let _done = Done(&posted);
        // SAFETY: this thread joined the job while its gate was open, so `ThreadPool::run`
        // waits for this thread's `done` (counted by `_done` when this scope ends, even by
        // unwinding) before it returns and the job's borrow ends.
        let job = unsafe { &*posted.job };
        run_caught(job);
    }
}

/// Counts a pool thread done with a job and wakes the job's caller when dropped, so that
/// even an unwinding thread is counted.
struct Done<'p>(&'p Posted);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.done.fetch_add(1, Ordering::AcqRel);
        self.0.caller.unpark();
    }
}

/// Calls `meanwhile`, then `job` (catching its panic, see [`run_caught`]); `meanwhile`'s
/// result, or its panic, unwinding once `job` has run.
pub(crate) fn beside_then_job<R>(job: &(dyn Fn() + Sync), meanwhile: impl FnOnce() -> R) -> R {
    let result = catch_unwind(AssertUnwindSafe(meanwhile));
    run_caught(job);
    result.unwrap_or_else(|payload| resume_unwind(payload))
}

/// Calls `job`, catching a panic; its payload is forgotten, not dropped, since dropping
/// it could panic again. (A panic is the job's to record, see the module docs.)
pub(crate) fn run_caught(job: &(dyn Fn() + Sync)) {
    if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
        std::mem::forget(payload);
    }
}

/// Helper threads kept between replays (see the module docs).
pub(crate) struct ThreadPool {
    board: Arc<Board>,
    threads: Vec<JoinHandle<()>>,
    /// Held by the caller whose job the thread pool runs.
    busy: Mutex<()>,
}

impl std::fmt::Debug for ThreadPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ThreadPool")
            .field("threads", &self.threads.len())
            .field("linger", &self.board.linger)
            .finish()
    }
}

impl ThreadPool {
    /// A pool of `helpers` threads that linger `linger` after each job.
    pub(crate) fn new(helpers: usize, linger: Duration) -> std::io::Result<ThreadPool> {
        let board = Arc::new(Board {
            posted: AtomicU64::new(0),
            current: Mutex::new(None),
            stop: AtomicBool::new(false),
            linger,
        });
        let mut pool = ThreadPool {
            board,
            threads: Vec::with_capacity(helpers),
            busy: Mutex::new(()),
        };
        for i in 0..helpers {
            let board = Arc::clone(&pool.board);
            let thread = std::thread::Builder::new()
                .name(format!("dma-pool-{i}"))
                .spawn(move || serve(&board))?;
            // On an error, dropping `pool` stops the threads started so far.
            pool.threads.push(thread);
        }
        Ok(pool)
    }

    /// Its threads (the caller is not one of them).
    pub(crate) fn helpers(&self) -> usize {
        self.threads.len()
    }

    /// Runs `job` on the calling thread and on every pool thread that joins it before
    /// the caller's own call returns, and returns when all of those have returned (a
    /// sleeping pool thread that wakes later leaves the job alone, so the caller never
    /// waits for a wake-up). Whether the thread pool was offered the job: it is not while
    /// another caller's job holds it, and then `job` runs on this thread alone. A panic
    /// of `job` on this thread is caught, as on the pool's (the job records its own
    /// failures). Like a scoped thread, `job` may borrow from the caller.
    pub(crate) fn run<'a>(&self, job: &'a (dyn Fn() + Sync + 'a)) -> bool {
        self.run_beside(job, || ()).0
    }

    /// [`ThreadPool::run`], with `meanwhile` called on this thread first, while the thread pool runs
    /// `job` (which the caller joins once `meanwhile` returns); its result. Alone, the
    /// caller calls `meanwhile`, then `job`. A panic of `meanwhile` unwinds from here once
    /// `job` has run to its end.
    pub(crate) fn run_beside<'a, R>(
        &self,
        job: &'a (dyn Fn() + Sync + 'a),
        meanwhile: impl FnOnce() -> R,
    ) -> (bool, R) {
        let meanwhile_then_job = || beside_then_job(job, meanwhile);
        let _held = match self.busy.try_lock() {
            Ok(held) => held,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => return (false, meanwhile_then_job()),
        };
        // SAFETY: only the lifetime changes. A pool thread calls `job` only after joining
        // it while the gate is open (`serve`). `_finish` closes the gate and waits until
        // every thread that joined has counted itself done (which each does even when it
        // unwinds, `Done`), and it does so when this scope ends, by return or by unwinding.
        // So `job` is not called after the borrow `'a` ends, as with `std::thread::scope`.
        let job_for_pool = unsafe {
            std::mem::transmute::<*const (dyn Fn() + Sync + 'a), *const (dyn Fn() + Sync)>(job)
        };
        // Only the holder of `busy` posts, and `Drop` needs `&mut`: no other bump meets
        // this one.
        let seq = self.board.posted.load(Ordering::Acquire) + 1;
        let posted = Arc::new(Posted {
            seq,
            job: job_for_pool,
            caller: std::thread::current(),
            gate: AtomicUsize::new(0),
            done: AtomicUsize::new(0),
        });
        let _finish = Finish {
            pool: self,
            posted: &posted,
        };
        self.board.set_current(Some(Arc::clone(&posted)));
        self.board.posted.store(seq, Ordering::Release);
        self.threads.iter().for_each(|t| t.thread().unpark());
        (true, meanwhile_then_job())
    }

    /// Waits, spinning for the linger time and then parked, until the `joined` pool
    /// threads are done with `posted`.
    fn wait_done(&self, posted: &Posted, joined: usize) {
        let finished = || (posted.done.load(Ordering::Acquire) >= joined).then_some(());
        if spin_until(self.board.linger, finished).is_some() {
            return;
        }
        // Each pool thread unparks this one after it counts itself done.
        while finished().is_none() {
            std::thread::park();
        }
    }
}

/// The end of a [`ThreadPool::run`], when it returns or unwinds: closes the job's gate, waits
/// for the pool threads that joined, and takes the job off the board.
struct Finish<'c> {
    pool: &'c ThreadPool,
    posted: &'c Posted,
}

impl Drop for Finish<'_> {
    fn drop(&mut self) {
        let joined = self.posted.close();
        self.pool.wait_done(self.posted, joined);
        self.pool.board.set_current(None);
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        self.board.stop.store(true, Ordering::Release);
        self.board.posted.fetch_add(1, Ordering::AcqRel);
        for t in self.threads.drain(..) {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A job that counts its calls and, on the caller, holds until `all` calls have
    /// started (or five seconds passed), so that every pool thread joins it.
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
        assert!(pool.run(&gathering_job(&count, all)));
        assert_eq!(count.into_inner(), all);
    }

    #[test]
    fn every_thread_that_joins_runs_the_job_once() {
        for linger in [Duration::ZERO, Duration::from_micros(200)] {
            let pool = ThreadPool::new(3, linger).unwrap();
            for _ in 0..20 {
                all_run_once(&pool, 4);
            }
            // a short job: the caller and whoever joined in time, each once
            for _ in 0..50 {
                let count = AtomicUsize::new(0);
                assert!(pool.run(&|| {
                    count.fetch_add(1, Ordering::Relaxed);
                }));
                assert!((1..=4).contains(&count.into_inner()));
            }
        }
    }

    #[test]
    fn the_pool_is_done_with_a_borrowed_job_when_run_returns() {
        let pool = ThreadPool::new(2, Duration::from_micros(50)).unwrap();
        for round in 0..100usize {
            // data on this frame, freed right after `run`: every call saw it whole
            let seen: Vec<AtomicUsize> = (0..64).map(|_| AtomicUsize::new(round)).collect();
            let (sum, calls) = (AtomicUsize::new(0), AtomicUsize::new(0));
            pool.run(&|| {
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
        let pool = ThreadPool::new(1, Duration::from_micros(200)).unwrap();
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
            let (offered, saw) = pool.run_beside(&job, || {
                let start = Instant::now();
                while !marked.load(Ordering::Acquire) && start.elapsed() < Duration::from_secs(5) {
                    std::thread::yield_now();
                }
                marked.load(Ordering::Acquire)
            });
            assert!(
                offered && saw,
                "the thread pool ran the job while the caller waited"
            );
            assert_eq!(done.into_inner(), 64);
        }
        // alone: meanwhile first, then the job
        let order = Mutex::new(Vec::new());
        let alone = ThreadPool::new(0, Duration::ZERO).unwrap();
        let job = || order.lock().unwrap().push("job");
        let (offered, ()) = alone.run_beside(&job, || order.lock().unwrap().push("meanwhile"));
        assert!(offered);
        assert_eq!(order.into_inner().unwrap(), ["meanwhile", "job"]);
    }

    #[test]
    fn a_panic_beside_the_job_unwinds_once_the_job_has_run() {
        let pool = ThreadPool::new(1, Duration::ZERO).unwrap();
        let runs = AtomicUsize::new(0);
        let caught = catch_unwind(AssertUnwindSafe(|| {
            pool.run_beside(
                &|| {
                    runs.fetch_add(1, Ordering::AcqRel);
                },
                || panic!("meanwhile fails"),
            )
        }));
        assert!(caught.is_err());
        assert!(runs.into_inner() >= 1, "the job ran");
        all_run_once(&pool, 2);
    }

    #[test]
    fn a_pool_of_none_runs_the_job_on_the_caller() {
        all_run_once(&ThreadPool::new(0, Duration::ZERO).unwrap(), 1);
    }

    #[test]
    fn a_panicking_job_leaves_the_pool_working() {
        let pool = ThreadPool::new(2, Duration::ZERO).unwrap();
        let calls = AtomicUsize::new(0);
        assert!(pool.run(&|| {
            gathering_job(&calls, 3)();
            panic!("a failing job");
        }));
        assert_eq!(calls.into_inner(), 3);
        all_run_once(&pool, 3);
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
    fn a_payload_that_panics_when_dropped_neither_escapes_nor_hangs() {
        let pool = ThreadPool::new(2, Duration::from_micros(100)).unwrap();
        for _ in 0..5 {
            let (calls, inside) = (AtomicUsize::new(0), AtomicUsize::new(0));
            assert!(pool.run(&|| {
                inside.fetch_add(1, Ordering::AcqRel);
                gathering_job(&calls, 3)();
                std::thread::sleep(Duration::from_millis(5));
                inside.fetch_sub(1, Ordering::AcqRel);
                std::panic::panic_any(Bomb);
            }));
            // every call (the caller's and both pool threads') had ended
            assert_eq!((calls.into_inner(), inside.into_inner()), (3, 0));
        }
        all_run_once(&pool, 3);
    }

    #[test]
    fn a_pool_thread_runs_a_job_once_even_when_it_looks_twice() {
        // A thread may find the job in `current` before it sees the counter move, then
        // see the counter move to the same job: it must not run it again. (A race: a
        // regression shows here only now and then.)
        let pool = ThreadPool::new(1, Duration::ZERO).unwrap();
        for _ in 0..2000 {
            let ids = Mutex::new(Vec::new());
            pool.run(&|| ids.lock().unwrap().push(std::thread::current().id()));
            let mut ids = ids.into_inner().unwrap();
            let calls = ids.len();
            ids.sort_unstable_by_key(|id| format!("{id:?}"));
            ids.dedup();
            assert_eq!(ids.len(), calls, "a thread ran one job twice");
        }
    }

    #[test]
    fn a_second_caller_runs_alone_while_the_pool_is_busy() {
        let pool = Arc::new(ThreadPool::new(1, Duration::ZERO).unwrap());
        let (entered_tx, entered_rx) = std::sync::mpsc::channel::<()>();
        let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
        let release_rx = Mutex::new(release_rx);
        let entered_tx = Mutex::new(entered_tx);
        // The first job holds the thread pool until the test releases it.
        let first = move || {
            let _ = entered_tx.lock().unwrap().send(());
            let _ = release_rx.lock().unwrap().recv();
        };
        let holder = {
            let pool = Arc::clone(&pool);
            std::thread::spawn(move || pool.run(&first))
        };
        entered_rx.recv().unwrap();
        let count = AtomicUsize::new(0);
        assert!(!pool.run(&|| {
            count.fetch_add(1, Ordering::Relaxed);
        }));
        assert_eq!(count.into_inner(), 1);
        // one release for the caller's call, one for the pool thread's if it joined
        release_tx.send(()).unwrap();
        let _ = release_tx.send(());
        assert!(holder.join().unwrap());
    }
}
