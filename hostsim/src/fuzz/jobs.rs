//! Cases on several threads, handed back in case order: `hostsim fuzz --jobs N`.
//!
//! Each thread takes the next case number, runs it with its own state (routes are not
//! shared) and sends the result to the calling thread, which hands the results on in
//! case order. Every case taken is finished, so the cases run are `0..n` and the caller
//! sees what one thread would have shown it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::Budget;

/// How a run of cases ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ran {
    /// Cases run: `0..cases`.
    pub cases: u64,
    /// Whether `stop` ended the run before its budget.
    pub interrupted: bool,
}

/// What [`in_order`] runs: each thread's state, made on that thread, and one case.
pub struct Work<S, C> {
    /// Makes a thread's own state (its routes), on that thread.
    pub state: S,
    /// Runs case `index` with the thread's state.
    pub case: C,
}

/// Runs cases `0..` on `jobs` threads until `budget` is spent or `stop` is raised (looked
/// at before each case is taken), calling `each` on this thread with every case's result
/// in case order. One job (or none) runs the cases on this thread. Everything runs
/// without the tracing subscriber: a fuzzer's cases warn by the thousand (a plain copy's
/// repeated destination indices) and would bury its findings.
pub fn in_order<S, T: Send>(
    jobs: usize,
    budget: Budget,
    stop: &AtomicBool,
    work: Work<impl Fn() -> S + Sync, impl Fn(&mut S, u64) -> T + Sync>,
    mut each: impl FnMut(u64, T),
) -> Ran {
    let start = Instant::now();
    let next = AtomicU64::new(0);
    let interrupted = AtomicBool::new(false);
    let take = || {
        let spent = match budget {
            Budget::Iters(n) => next.load(Ordering::Relaxed) >= n,
            Budget::Seconds(s) => start.elapsed() >= Duration::from_secs(s),
        };
        if spent {
            return None;
        }
        if stop.load(Ordering::Relaxed) {
            interrupted.store(true, Ordering::Relaxed);
            return None;
        }
        let index = next.fetch_add(1, Ordering::Relaxed);
        match budget {
            Budget::Iters(n) if index >= n => None,
            _ => Some(index),
        }
    };
    let mut cases = 0;
    let mut hand_on = |index, result| {
        debug_assert_eq!(index, cases);
        each(index, result);
        cases += 1;
    };
    quietly(|| match jobs {
        0 | 1 => {
            let mut state = (work.state)();
            while let Some(index) = take() {
                hand_on(index, (work.case)(&mut state, index));
            }
        }
        _ => on_threads(jobs, &take, &work, hand_on),
    });
    Ran {
        cases,
        interrupted: interrupted.load(Ordering::Relaxed),
    }
}

/// `f` without the tracing subscriber.
fn quietly<R>(f: impl FnOnce() -> R) -> R {
    tracing::subscriber::with_default(tracing::subscriber::NoSubscriber::default(), f)
}

/// The cases `take` gives, run on `jobs` new threads, handed to `hand_on` in case order.
fn on_threads<S, T: Send>(
    jobs: usize,
    take: &(impl Fn() -> Option<u64> + Sync),
    work: &Work<impl Fn() -> S + Sync, impl Fn(&mut S, u64) -> T + Sync>,
    mut hand_on: impl FnMut(u64, T),
) {
    std::thread::scope(|scope| {
        let (sender, results) = mpsc::channel();
        for _ in 0..jobs {
            let sender = sender.clone();
            scope.spawn(move || {
                quietly(|| {
                    let mut state = (work.state)();
                    while let Some(index) = take() {
                        if sender
                            .send((index, (work.case)(&mut state, index)))
                            .is_err()
                        {
                            return;
                        }
                    }
                })
            });
        }
        drop(sender);
        let (mut waiting, mut next) = (BTreeMap::new(), 0);
        for (index, result) in results {
            waiting.insert(index, result);
            while let Some(result) = waiting.remove(&next) {
                hand_on(next, result);
                next += 1;
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Case `i`'s result is `i * i`, made slower for low `i` so that threads finish out
    /// of order.
    fn squares(jobs: usize, budget: Budget, stop: &AtomicBool) -> (Vec<(u64, u64)>, Ran) {
        let mut seen = Vec::new();
        let work = Work {
            state: || 0u64,
            case: |made: &mut u64, i: u64| {
                *made += 1;
                if i.is_multiple_of(4) {
                    std::thread::sleep(Duration::from_millis(2));
                }
                i * i
            },
        };
        let ran = in_order(jobs, budget, stop, work, |i, r| seen.push((i, r)));
        (seen, ran)
    }

    #[test]
    fn any_job_count_hands_back_every_case_once_in_order() {
        let stop = AtomicBool::new(false);
        let expect: Vec<(u64, u64)> = (0..50).map(|i| (i, i * i)).collect();
        for jobs in [0, 1, 3, 8] {
            let (seen, ran) = squares(jobs, Budget::Iters(50), &stop);
            let whole = Ran {
                cases: 50,
                interrupted: false,
            };
            assert_eq!((seen, ran), (expect.clone(), whole), "jobs {jobs}");
        }
    }

    #[test]
    fn a_time_budget_runs_a_prefix_of_the_cases() {
        let stop = AtomicBool::new(false);
        let (seen, ran) = squares(3, Budget::Seconds(0), &stop);
        assert_eq!((seen.len(), ran.cases, ran.interrupted), (0, 0, false));
        let (seen, ran) = squares(3, Budget::Seconds(1), &stop);
        let expect: Vec<(u64, u64)> = (0..ran.cases).map(|i| (i, i * i)).collect();
        assert!(ran.cases > 0);
        assert_eq!((seen, ran.interrupted), (expect, false));
    }

    #[test]
    fn a_raised_stop_flag_interrupts_before_the_next_case() {
        let stop = AtomicBool::new(true);
        let (seen, ran) = squares(2, Budget::Iters(10), &stop);
        let none = Ran {
            cases: 0,
            interrupted: true,
        };
        assert_eq!((seen, ran), (Vec::new(), none));
        let (_, spent) = squares(2, Budget::Iters(0), &stop);
        assert!(!spent.interrupted, "a spent budget is no interruption");
    }
}
