//! The access-pattern DMAs (NKI `dma_copy` over `.ap()` sides) across the routes: the
//! cases of `hostsim fuzz --target oob`'s access-pattern fragment (`hostsim::fuzz::ap`)
//! on a fixed corpus of seeds, compared by the fuzzer's own comparison
//! (`hostsim::fuzz::routes::Routes`: per op the reference's outcome or error kind on the
//! DGE route, a failing op leaving every fabric as it was, the final fabrics equal, and
//! the stream again as one program). The corpus is checked to reach every outcome.
//!
//! Run with `-- --nocapture` to see the outcome counts.

use std::collections::BTreeMap;

use dma::{Dtype, Space};
use hostsim::fuzz::case::Op;
use hostsim::fuzz::routes::Routes;
use hostsim::fuzz::{ap, Rng};
use hostsim::reference;

/// What the reference made of each access-pattern DMA of the corpus, op by op up to the
/// first failure of each case (as the routes run it).
#[derive(Default, Debug)]
struct Outcomes {
    ops: u64,
    by_kind: BTreeMap<String, u64>,
}

impl Outcomes {
    fn add(&mut self, kind: String) {
        self.ops += 1;
        *self.by_kind.entry(kind).or_default() += 1;
    }

    /// Counts a feature of an op (not an outcome: `ops` stays).
    fn note(&mut self, kind: &str) {
        *self.by_kind.entry(kind.into()).or_default() += 1;
    }

    fn count(&self, kind: &str) -> u64 {
        self.by_kind.get(kind).copied().unwrap_or(0)
    }
}

/// Seeds 0..300: every case agrees across the routes, and the corpus reaches plain
/// copies, soft skips, hard OOB errors on either side, duplicate destinations, scalar
/// offsets out of range (failing, and skipped under `oob = skip`), int64 scalar offsets
/// and scalars in HBM.
#[test]
fn access_pattern_dmas_agree_across_routes_on_the_fixed_corpus() {
    let mut routes = Routes::new();
    let mut seen = Outcomes::default();
    for seed in 0..300 {
        let case = ap::case(Rng::new(seed), None);
        if let Err(d) = routes.compare(&case) {
            panic!("seed {seed}: {} {}", d.mechanism.name(), d.what);
        }
        let mut fabric = case.fabric.clone();
        for op in &case.stream {
            let Op::Ap(dma) = op else { continue };
            for s in [&dma.src.scalar_offset, &dma.dst.scalar_offset] {
                match s.as_ref().map(|t| (t.dtype, t.space)) {
                    Some((Dtype::I64, _)) => seen.note("i64 scalar"),
                    Some((_, Space::Hbm)) => seen.note("HBM i32 scalar"),
                    _ => {}
                }
            }
            match reference::ap_dma(&mut fabric, dma) {
                Ok(o) if !o.skipped_offsets.is_empty() => seen.add("scalar skipped".into()),
                Ok(o) if o.skipped.is_empty() => seen.add("done".into()),
                Ok(_) => seen.add("skips".into()),
                Err(hostsim::Error::ApScalarOffset { .. }) => {
                    seen.add("scalar_offset out of range".into());
                    break;
                }
                Err(e) => {
                    seen.add(format!("{:?}", e.kind()));
                    break;
                }
            }
        }
    }
    println!("access-pattern DMAs: {seen:?}");
    assert!(seen.ops >= 450, "{seen:?}");
    for kind in [
        "done",
        "skips",
        "IndexOutOfBounds(Src)",
        "IndexOutOfBounds(Dst)",
        "DuplicateDestination",
    ] {
        assert!(seen.count(kind) >= 10, "{kind}: {seen:?}");
    }
    // int64 scalar offsets (on HBM sides) and HBM-resident int32 ones
    assert!(seen.count("i64 scalar") >= 10, "{seen:?}");
    assert!(seen.count("HBM i32 scalar") >= 5, "{seen:?}");
    // a scalar offset out of range: failing under oob = error, the copy skipped under skip
    assert!(seen.count("scalar_offset out of range") >= 10, "{seen:?}");
    assert!(seen.count("scalar skipped") >= 3, "{seen:?}");
}
