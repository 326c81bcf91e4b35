//! Seed inputs for the cargo-fuzz targets in `fuzz/`, made by the same generators as
//! `hostsim fuzz`: valid instructions, queue files, scenario texts and byte tapes.
//!
//! The test `writes_the_seed_corpus` writes them to `$HOSTSIM_FUZZ_CORPUS/<target>/`
//! when that variable is set (`fuzz/README.md` gives the command); otherwise it checks
//! that the corpus is deterministic.

use crate::fuzz::{dma, oob, Rng};

/// The cargo-fuzz targets seeded here.
pub const TARGETS: [&str; 5] = [
    "isa_decode",
    "queue_file",
    "scenario_parse",
    "dge_request",
    "differential",
];

/// `(target, file name, bytes)` for every seed.
pub fn seeds() -> Vec<(&'static str, String, Vec<u8>)> {
    let mut out = Vec::new();
    for seed in 0..8u64 {
        let case = oob::case(Rng::new(seed), None);
        for (i, inst) in case.instructions().enumerate() {
            out.push((
                "isa_decode",
                format!("oob-{seed}-{i}"),
                inst.encode().to_vec(),
            ));
        }
        if let Some(bytes) = queue_file_bytes(&dma::case(Rng::new(seed), None)) {
            out.push(("queue_file", format!("dma-{seed}"), bytes));
        }
        let tape = Rng::new(seed).bytes(256);
        out.push(("dge_request", format!("tape-{seed}"), tape.clone()));
        for target in 0u8..5 {
            let mut t = vec![target];
            t.extend_from_slice(&tape);
            out.push(("differential", format!("target{target}-{seed}"), t));
        }
    }
    out.push((
        "scenario_parse",
        "demo.toml".into(),
        crate::demo::SCENARIO.into(),
    ));
    for seed in 0..8u64 {
        let case = oob::case(Rng::new(seed), None);
        if let Ok(text) = crate::fuzz::repro::oob_scenario_text(&case) {
            out.push((
                "scenario_parse",
                format!("oob-{seed}.toml"),
                text.into_bytes(),
            ));
        }
    }
    out
}

/// The queue file of a `dma` case (`None` if the writer refuses it).
fn queue_file_bytes(c: &dma::QueueCase) -> Option<Vec<u8>> {
    let mut cursor = std::io::Cursor::new(Vec::new());
    let mut w =
        ::dma::QueueFileWriter::new(&mut cursor, c.fabric.generation(), c.queues.len()).ok()?;
    for (q, descs) in c.queues.iter().enumerate() {
        for d in descs {
            w.push(q, d).ok()?;
        }
    }
    w.finish().ok()?;
    Some(cursor.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_the_seed_corpus() {
        let seeds = seeds();
        assert_eq!(
            seeds.iter().map(|s| (s.0, s.1.clone())).collect::<Vec<_>>(),
            super::seeds()
                .iter()
                .map(|s| (s.0, s.1.clone()))
                .collect::<Vec<_>>()
        );
        for target in TARGETS {
            assert!(seeds.iter().any(|s| s.0 == target), "no seed for {target}");
        }
        let Some(dir) = std::env::var_os("HOSTSIM_FUZZ_CORPUS") else {
            return;
        };
        for (target, name, bytes) in seeds {
            let at = std::path::Path::new(&dir).join(target);
            std::fs::create_dir_all(&at).unwrap();
            std::fs::write(at.join(name), bytes).unwrap();
        }
    }
}
