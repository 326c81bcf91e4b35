//! The three-way equivalence suite: random instruction streams over the four datapaths
//! (and DMA_MEMCPY) run by the reference, the POOL kernels and the DGE + DMA engine on
//! clones of one fabric must leave bit-identical fabrics and core states, report equal
//! outcomes, and reject the same instructions with the same error kind.
//!
//! The cases stay where all three define the result (see `conformance::cases`). No POOL
//! instruction reads bytes it writes; now and then a Pool_Buffer window's SBUF source is
//! overwritten between its POOL_BUFFER_LOAD and its GATHER, which the DGE route refuses
//! by design (it has no Pool_Buffer): those are counted as "rejected by dge, by design"
//! and end their stream (`conformance::lanes`).
//!
//! Run with `-- --nocapture` to see the figures (cases, instructions, comparisons,
//! bytes compared, per datapath).

use std::cell::RefCell;

use conformance::cases::random_case;
use conformance::lanes::{Lanes, Stats};
use hostsim::runtime::Mechanism;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// The compared mechanisms, the reference first.
const MECHANISMS: [Mechanism; 3] = [Mechanism::Reference, Mechanism::Pool, Mechanism::Dge];

fn print(title: &str, s: &Stats) {
    let names: Vec<&str> = MECHANISMS.iter().map(|m| m.name()).collect();
    println!(
        "{title}: {} cases, {} instructions compared across {:?} ({} result comparisons, {} rejected alike, {} soft skips), {} fabric bytes compared, 0 mismatches; per datapath {:?}; rejections {:?}; rejected by dge, by design: {:?}",
        s.cases, s.instructions, names, s.comparisons, s.rejected, s.skipped, s.bytes_compared, s.by_label, s.rejected_by_kind, s.dge_by_design
    );
}

/// Seeds 0..64: a fixed corpus, the same on every run.
#[test]
fn routes_agree_on_the_fixed_corpus() {
    let mut lanes = Lanes::new(&MECHANISMS);
    let mut stats = Stats::default();
    for seed in 0..64 {
        let s = lanes
            .compare(&random_case(seed))
            .unwrap_or_else(|e| panic!("seed {seed}: {e}"));
        stats.add(&s);
    }
    print("fixed corpus", &stats);
    assert_eq!(stats.cases, 64);
    assert!(stats.instructions >= 64, "{stats:?}");
    assert_eq!(
        stats.comparisons,
        stats.instructions * (MECHANISMS.len() as u64 - 1)
    );
}

/// 128 random seeds per run (a failure names its seed: `random_case(seed)` replays it).
#[test]
fn routes_agree_on_random_streams() {
    let lanes = RefCell::new(Lanes::new(&MECHANISMS));
    let stats = RefCell::new(Stats::default());
    let config = Config {
        cases: 128,
        failure_persistence: None,
        ..Config::default()
    };
    let result = TestRunner::new(config).run(&any::<u64>(), |seed| {
        let case = random_case(seed);
        let s = lanes
            .borrow_mut()
            .compare(&case)
            .map_err(|e| TestCaseError::fail(format!("seed {seed}: {e}")))?;
        stats.borrow_mut().add(&s);
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    let stats = stats.into_inner();
    print("random streams", &stats);
    assert_eq!(stats.cases, 128);
    assert!(stats.by_label.len() >= 5, "{stats:?}");
}
