//! The three-way equivalence suite: the `oob` target's stream cases
//! (`hostsim::fuzz::oob::case`: every datapath, its OOB policies and bounds, shape
//! registers, GATHER_TRANSPOSE, windows overwritten between LOAD and GATHER,
//! instructions the generation must reject) run by the reference, the POOL kernels and
//! the DGE + DMA engine on clones of one fabric, compared by the fuzzer's own comparison
//! (`hostsim::fuzz::routes::Routes`; its module docs give the rules): equal outcomes or
//! error kinds per op, a rejected op leaving every fabric as it was, bit-identical
//! fabrics and core states at the end, and the stream again as one program.
//!
//! A route that does not serve an op (no POOL kernel for DMA_MEMCPY and the
//! access-pattern DMAs, the DGE route's by-design refusals) has the reference stand in;
//! the suite checks those stand-ins happen only where [`STAND_INS`] says they may.
//!
//! Run with `-- --nocapture` to see the figures (cases, ops, comparisons, rejections,
//! stand-ins, bytes compared, per datapath).

use std::cell::RefCell;

use hostsim::fuzz::oob::{self, LABELS};
use hostsim::fuzz::routes::{Routes, Stats, MECHANISMS, STAND_INS};
use hostsim::fuzz::Rng;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn print(title: &str, s: &Stats) {
    let names: Vec<&str> = MECHANISMS.iter().map(|m| m.name()).collect();
    println!(
        "{title}: {} cases, {} ops compared across {names:?} ({} result comparisons, {} reference stand-ins, {} absent), {} fabric bytes compared, {} soft skips, 0 mismatches; per datapath {:?}; rejected alike {:?}; stand-ins {:?}",
        s.cases, s.ops, s.comparisons, s.stand_in_total(), s.absent, s.bytes_compared, s.skipped, s.by_label, s.rejected, s.stand_ins
    );
}

/// What holds of every run's figures: each route but the reference is compared, stood
/// in for, or absent on each op, and the reference stands in only where allowed.
fn check(s: &Stats) {
    let routes = MECHANISMS.len() as u64 - 1;
    assert_eq!(
        s.comparisons + s.stand_in_total() + s.absent,
        s.ops * routes,
        "{s:?}"
    );
    assert_eq!(s.unexpected_stand_in(), None, "{STAND_INS:?}: {s:?}");
}

/// Seeds 0..128: a fixed corpus, the same on every run; it covers every datapath label.
#[test]
fn routes_agree_on_the_fixed_corpus() {
    let mut routes = Routes::new();
    let mut stats = Stats::default();
    for seed in 0..128 {
        let s = routes
            .compare(&oob::case(Rng::new(seed), None))
            .unwrap_or_else(|d| panic!("seed {seed}: {} {}", d.mechanism.name(), d.what));
        stats.add(&s);
    }
    print("fixed corpus", &stats);
    check(&stats);
    assert_eq!(stats.cases, 128);
    assert!(stats.ops >= 100, "{stats:?}");
    assert!(stats.comparisons >= stats.ops, "{stats:?}");
    let labels: Vec<&str> = stats.by_label.keys().copied().collect();
    assert_eq!(labels, LABELS);
}

/// 128 random seeds per run (a failure names its seed: `oob::case(Rng::new(seed), None)`
/// replays it, as does `hostsim fuzz --target oob --case SEED`).
#[test]
fn routes_agree_on_random_streams() {
    let routes = RefCell::new(Routes::new());
    let stats = RefCell::new(Stats::default());
    let config = Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&any::<u64>(), |seed| {
        let s = routes
            .borrow_mut()
            .compare(&oob::case(Rng::new(seed), None))
            .map_err(|d| {
                TestCaseError::fail(format!("seed {seed}: {} {}", d.mechanism.name(), d.what))
            })?;
        stats.borrow_mut().add(&s);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let stats = stats.into_inner();
    print("random streams", &stats);
    check(&stats);
    assert_eq!(stats.cases, 128);
    assert!(stats.by_label.len() >= 8, "{stats:?}");
}
