//! The executor: runs any [`Schedule`] on N workers by claiming ready units.
//!
//! A unit is ready once every unit it is ordered after has finished. A worker claims the
//! next ready unit, runs it, and makes ready the units that waited only for it; a worker
//! with nothing ready parks until a unit finishes. One worker is sequential execution.
//! The first failure (a unit's error, or a panic) stops the claiming; the error returned
//! is the one of the lowest (queue, index) among the units that failed. If nothing is
//! ready and nothing runs before every unit has run (a cycle, which validation rules
//! out), the run ends with [`Error::RunAborted`] instead of hanging.
//!
//! This is plain synchronous code: which threads are the workers is the caller's choice
//! (the engine's thread pool, or scoped threads in tests), given as `spread`.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Condvar, Mutex};

use crate::error::Error;

use super::lock;
use super::schedule::{Schedule, Unit};

/// What the workers share.
#[derive(Default)]
struct State {
    ready: VecDeque<u32>,
    /// Per unit, the units still to finish before it is ready.
    before: Vec<u32>,
    running: usize,
    finished: usize,
    /// Workers waiting on the condition variable (a notification with none waiting
    /// would cost a system call for nothing).
    parked: usize,
    /// The first error by (queue, index) (a stall is [`Error::RunAborted`] past every
    /// descriptor); claiming stops once there is one.
    failed: Option<((usize, u64), Error)>,
}

/// Runs `schedule`: every unit through `run`, on the caller and on whatever threads
/// `spread` runs its job on (`spread` calls the job on this thread and on each worker it
/// adds, returning once all have returned; `|job| job()` is sequential execution), and
/// what `spread` returned.
/// `run` gets the unit; an error it returns should name the unit's descriptor
/// ([`Unit::at`]), its position given as `(queue, index)` for choosing the first error.
pub(crate) fn execute<'q, F, T>(
    schedule: &Schedule<'q>,
    run: F,
    spread: impl FnOnce(&(dyn Fn() + Sync)) -> T,
) -> (Result<(), Error>, T)
where
    F: Fn(&Unit<'q>) -> Result<(), ((usize, u64), Error)> + Sync,
{
    let units = &schedule.units;
    let before = schedule.before.clone();
    let ready = (0..units.len() as u32)
        .filter(|&u| before.get(u as usize) == Some(&0))
        .collect();
    let state = Mutex::new(State {
        ready,
        before,
        ..State::default()
    });
    let wake = Condvar::new();
    let job = || work(schedule, &run, &state, &wake);
    let spread = spread(&job);
    let state = state.into_inner().unwrap_or_else(|p| p.into_inner());
    let outcome = match state.failed {
        Some((_, e)) => Err(e),
        None if state.finished == units.len() => Ok(()),
        None => Err(Error::RunAborted),
    };
    (outcome, spread)
}

/// One worker: claims ready units until every unit has run or the run stops.
fn work<'q, F>(schedule: &Schedule<'q>, run: &F, state: &Mutex<State>, wake: &Condvar)
where
    F: Fn(&Unit<'q>) -> Result<(), ((usize, u64), Error)> + Sync,
{
    let units = &schedule.units;
    let mut st = lock(state);
    loop {
        if st.failed.is_some() || st.finished == units.len() {
            return;
        }
        let Some(u) = st.ready.pop_front() else {
            if st.running == 0 {
                // nothing ready, nothing running, not done: nothing can become ready
                st.failed = Some(((usize::MAX, u64::MAX), Error::RunAborted));
                notify(&st, wake, usize::MAX);
                return;
            }
            if st.finished + st.running == units.len() {
                // every unit left is running: nothing will become ready for this worker,
                // which leaves now rather than park until the last one ends (a futex
                // wait and wake per worker per replay)
                return;
            }
            st.parked += 1;
            st = wake.wait(st).unwrap_or_else(|p| p.into_inner());
            st.parked -= 1;
            continue;
        };
        st.running += 1;
        drop(st);
        let unit = units.get(u as usize);
        let outcome =
            catch_unwind(AssertUnwindSafe(|| unit.map_or(Ok(()), run))).unwrap_or_else(|payload| {
                super::pool::drop_payload(payload);
                Err((unit.map_or((usize::MAX, 0), |u| u.at(0)), Error::RunAborted))
            });
        st = lock(state);
        st.running -= 1;
        st.finished += 1;
        match outcome {
            Ok(()) => {
                let mut woken = 0;
                for &next in schedule.then.get(u as usize).into_iter().flatten() {
                    if let Some(n) = st.before.get_mut(next as usize) {
                        *n -= 1;
                        if *n == 0 {
                            st.ready.push_back(next);
                            woken += 1;
                        }
                    }
                }
                let all = st.finished == units.len();
                notify(&st, wake, if all { usize::MAX } else { woken });
            }
            Err((at, e)) => {
                if st.failed.as_ref().is_none_or(|(first, _)| at < *first) {
                    st.failed = Some((at, e));
                }
                notify(&st, wake, usize::MAX);
            }
        }
    }
}

/// Wakes `n` parked workers (all for `usize::MAX`), if any is parked.
fn notify(st: &State, wake: &Condvar, n: usize) {
    match (st.parked, n) {
        (0, _) | (_, 0) => {}
        (_, 1) => wake.notify_one(),
        _ => wake.notify_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::{Descriptor, SemId, SemWait};
    use crate::dtype::Dtype;
    use proptest::prelude::*;
    use std::num::NonZeroU32;

    /// `spread` for `workers` threads: the caller and `workers - 1` scoped threads.
    fn scoped(workers: usize) -> impl FnOnce(&(dyn Fn() + Sync)) {
        move |job| {
            std::thread::scope(|s| {
                for _ in 1..workers {
                    s.spawn(job);
                }
                job();
            })
        }
    }

    fn fill(dst: u64) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), 8, Dtype::U8, 1).unwrap()
    }

    /// Queues whose descriptor `i` of queue `q` is recorded as `(q, i)` when it runs.
    fn log_run(
        log: &Mutex<Vec<(usize, u64)>>,
    ) -> impl Fn(&Unit<'_>) -> Result<(), ((usize, u64), Error)> + Sync + '_ {
        move |u| {
            for i in 0..u.len() {
                lock(log).push(u.at(i));
            }
            Ok(())
        }
    }

    fn sem_queues(chain: usize) -> Vec<Vec<Descriptor>> {
        // queue q waits for queue q-1's signal on semaphore q-1, then signals semaphore q
        (0..chain)
            .map(|q| {
                let mut d = fill(64 * q as u64);
                if q > 0 {
                    d = d.with_wait(SemWait {
                        sem: SemId::new(q as u8 - 1).unwrap(),
                        count: NonZeroU32::new(1).unwrap(),
                    });
                }
                let last = fill(64 * q as u64 + 8).with_signal(SemId::new(q as u8).unwrap());
                vec![d, fill(64 * q as u64 + 16), last]
            })
            .collect()
    }

    #[test]
    fn one_worker_runs_everything_in_an_order_the_semaphores_allow() {
        let queues = sem_queues(4);
        let s = Schedule::segments(&queues).unwrap();
        let log = Mutex::new(Vec::new());
        execute(&s, log_run(&log), |job| job()).0.unwrap();
        let log = log.into_inner().unwrap();
        assert_eq!(log.len(), 12);
        for q in 1..4 {
            let signal = log.iter().position(|&x| x == (q - 1, 2)).unwrap();
            let waits = log.iter().position(|&x| x == (q, 0)).unwrap();
            assert!(signal < waits);
        }
    }

    #[test]
    fn the_first_error_by_queue_and_index_is_returned() {
        let queues = vec![vec![fill(0)], vec![fill(8)], vec![fill(16)]];
        let s = Schedule::segments(&queues).unwrap();
        let run = |u: &Unit<'_>| match u.at(0).0 {
            0 => Ok(()),
            q => Err((u.at(0), Error::QueueCount { count: q, max: 0 })),
        };
        let e = execute(&s, run, scoped(1)).0.unwrap_err();
        assert!(matches!(e, Error::QueueCount { count: 1, .. }));
    }

    #[test]
    fn a_worker_leaves_once_every_unit_left_is_running() {
        // unit 1 runs until the other worker has left: it must leave while unit 1 runs,
        // not park until unit 1 ends (which would never come)
        let queues = vec![vec![fill(0)], vec![fill(8)]];
        let s = Schedule::segments(&queues).unwrap();
        let (left, gone) = std::sync::mpsc::channel();
        let gone = Mutex::new(gone);
        let run = |u: &Unit<'_>| {
            if u.at(0).0 == 1 {
                let waited = lock(&gone).recv_timeout(std::time::Duration::from_secs(20));
                assert!(waited.is_ok(), "the other worker parked instead of leaving");
            }
            Ok(())
        };
        // each worker says when it leaves; unit 1's own worker cannot leave while it runs
        let spread = |job: &(dyn Fn() + Sync)| {
            let leave = |left: std::sync::mpsc::Sender<()>| {
                job();
                let _ = left.send(());
            };
            std::thread::scope(|t| {
                let other = left.clone();
                t.spawn(move || leave(other));
                leave(left);
            })
        };
        execute(&s, run, spread).0.unwrap();
    }

    #[test]
    fn a_panicking_unit_aborts_the_run() {
        let queues = vec![vec![fill(0)], vec![fill(8)]];
        let s = Schedule::segments(&queues).unwrap();
        let run = |u: &Unit<'_>| match u.at(0).0 {
            1 => panic!("unit panics"),
            _ => Ok(()),
        };
        let e = execute(&s, run, scoped(2)).0.unwrap_err();
        assert!(matches!(e, Error::RunAborted));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        #[test]
        fn any_worker_count_runs_every_unit_once_in_order(chain in 1usize..8, workers in 1usize..5) {
            let queues = sem_queues(chain);
            let s = Schedule::segments(&queues).unwrap();
            let log = Mutex::new(Vec::new());
            execute(&s, log_run(&log), scoped(workers)).0.unwrap();
            let log = log.into_inner().unwrap();
            prop_assert_eq!(log.len(), chain * 3);
            for q in 0..chain {
                let at: Vec<_> = (0..3).map(|i| log.iter().position(|&x| x == (q, i)).unwrap()).collect();
                prop_assert!(at[0] < at[1] && at[1] < at[2]);
                if q > 0 {
                    let signal = log.iter().position(|&x| x == (q - 1, 2)).unwrap();
                    prop_assert!(signal < at[0]);
                }
            }
        }
    }
}
