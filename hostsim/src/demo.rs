//! The embedded default job that `cargo run --release` runs: the embedding example
//! scenario (`examples/embedding/scenario.toml`, compiled in, its indices made in memory
//! by [`crate::scenario::examples`]) run on every generation by its route (sunda's POOL
//! kernels, the DGE + DMA engine on the others) and by the closed-form reference, with
//! the fabrics compared byte for byte.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use dma::addr::{PSUM_BASE, SBUF_BASE};
use dma::fabric::Fabric;
use dma::{Generation, Space};

use crate::error::Error;
use crate::npy::NpyArray;
use crate::runtime::Mechanism;
use crate::scenario::{self, examples, Format, Loaded, Overrides, Report};

/// The embedded scenario.
pub const SCENARIO: &str = include_str!("../../examples/embedding/scenario.toml");
/// Where the embedded scenario lives in the repository.
const SCENARIO_PATH: &str = "examples/embedding/scenario.toml";

/// The fabric of `generation` in one paragraph.
pub fn fabric_summary(generation: Generation) -> String {
    let f = Fabric::new(generation);
    let m = f.map();
    format!(
        "Fabric of {generation}: HBM {} GiB (sparse) at 0x0; SBUF {} partitions x {} KiB at {SBUF_BASE:#x}; PSUM {} partitions x {} KiB at {PSUM_BASE:#x}\n",
        m.partition_bytes(Space::Hbm) >> 30,
        m.partitions(Space::Sbuf),
        m.partition_bytes(Space::Sbuf) >> 10,
        m.partitions(Space::Psum),
        m.partition_bytes(Space::Psum) >> 10,
    )
}

/// The embedded scenario, parsed.
pub fn loaded() -> Result<Loaded, Error> {
    Ok(Loaded {
        scenario: scenario::parse(SCENARIO_PATH, SCENARIO, Format::Toml)?,
        dir: PathBuf::new(),
        file: SCENARIO_PATH.to_string(),
    })
}

/// The embedded scenario's one `.npy` file, made in memory.
fn embedded_npy(file: &Path) -> Result<NpyArray, Error> {
    match file.to_str() {
        Some("ids.npy") => Ok(examples::embedding_ids()),
        _ => Err(Error::Npy {
            file: file.display().to_string(),
            rule: "the embedded demo has no such file".into(),
        }),
    }
}

/// One generation's runs: its route's report, and whether its fabric equals the
/// reference's, and its tensors.
struct GenerationRun {
    generation: Generation,
    report: Report,
    agrees: bool,
    tensors: Vec<(String, NpyArray)>,
}

fn run_generation(loaded: &Loaded, generation: Generation) -> Result<GenerationRun, Error> {
    let over = Overrides {
        generation: Some(generation),
        ..Overrides::default()
    };
    let p = scenario::prepare_with(loaded, over, &embedded_npy)?;
    let routed = p.execute_with(Mechanism::Auto)?;
    let reference = p.execute_with(Mechanism::Reference)?;
    Ok(GenerationRun {
        generation,
        report: Report::of_run(&p, &routed),
        agrees: routed.fabric.first_difference(&reference.fabric).is_none(),
        tensors: p.outputs(&routed.fabric)?,
    })
}

/// Runs the demo on `only` (every generation when `None`) and returns its report.
pub fn run(only: Option<Generation>) -> Result<String, Error> {
    let loaded = loaded()?;
    let generations: Vec<Generation> = match only {
        Some(g) => vec![g],
        None => Generation::ALL.to_vec(),
    };
    let runs = generations
        .into_iter()
        .map(|g| run_generation(&loaded, g))
        .collect::<Result<Vec<_>, Error>>()?;
    let mut out = intro();
    let _ = writeln!(
        out,
        "{:<10} {:<6} {:>11} {:>9} {:>12} {:>8} {:>13}  fabric = reference",
        "generation", "route", "descriptors", "bytes", "B/descriptor", "skipped", "estimated us"
    );
    for r in &runs {
        out += &row(r);
    }
    let same_tensors = runs.windows(2).all(|w| w[0].tensors == w[1].tensors);
    let agree = runs.iter().all(|r| r.agrees) && same_tensors;
    let _ = writeln!(
        out,
        "\nEvery route leaves the reference's fabric and the generations the same tensors; agree: {}",
        if agree { "yes" } else { "NO" }
    );
    Ok(out)
}

fn intro() -> String {
    format!(
        "hostsim demo: the embedded scenario {SCENARIO_PATH}\n\
         tensors: table f32 [{rows}, 64] in HBM (iota); ids u32 [1, {n}] in SBUF partition 0 (rows drawn with repeats, the last {pad} padded with the out-of-range row {rows}); out f32 [{n}, 64] in HBM\n\
         op 0 dma_gather:  out[i, :] = table[ids[i], :], out-of-range indices skipped\n\
         op 1 dma_scatter: table[ids[i], :] += out[i, :], duplicates accumulating in index order (unique_indices = false), out-of-range skipped\n\n",
        rows = examples::EMBEDDING_ROWS,
        n = examples::EMBEDDING_INDICES,
        pad = examples::EMBEDDING_PADDING,
    )
}

fn row(r: &GenerationRun) -> String {
    let t = &r.report.total;
    let route = r.report.ops.first().map_or("", |o| o.mechanism.as_str());
    let per = match t.descriptors {
        0 => "-".to_string(),
        n => format!("{:.0}", t.bytes as f64 / n as f64),
    };
    format!(
        "{:<10} {:<6} {:>11} {:>9} {:>12} {:>8} {:>13.2}  {}\n",
        r.generation.name(),
        route,
        t.descriptors,
        t.bytes,
        per,
        t.oob_skipped,
        t.estimated_ns as f64 / 1000.0,
        if r.agrees { "yes" } else { "NO" }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_route_agrees_on_every_generation() {
        let report = run(None).unwrap();
        assert!(report.contains("agree: yes"), "{report}");
        let rows: Vec<&str> = report
            .lines()
            .filter(|l| Generation::ALL.iter().any(|g| l.starts_with(g.name())))
            .collect();
        assert_eq!(rows.len(), 4, "{report}");
        assert!(rows[0].starts_with("sunda      pool"), "{}", rows[0]);
        for r in &rows[1..] {
            // 2 x 4000 valid indices of 256-byte rows; 2 x 96 padded ones skipped.
            let cols: Vec<&str> = r.split_whitespace().collect();
            assert_eq!(cols[1], "dge", "{r}");
            assert_eq!(cols[3], "2048000", "{r}");
            assert_eq!(cols[5], "192", "{r}");
            assert_eq!(cols[7], "yes", "{r}");
        }
    }

    #[test]
    fn the_embedded_scenario_gathers_then_scatters() {
        let l = loaded().unwrap();
        let kinds: Vec<&str> = l.scenario.ops.iter().map(|o| o.kind()).collect();
        assert_eq!(kinds, ["dma_gather", "dma_scatter"]);
        let names: Vec<&str> = l.scenario.tensors.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["table", "ids", "out"]);
        assert!(embedded_npy(Path::new("other.npy")).is_err());
    }

    #[test]
    fn fabric_summary_names_the_sizes() {
        let s = fabric_summary(Generation::Sunda);
        assert!(
            s.contains("HBM 32 GiB") && s.contains("128 partitions x 192 KiB"),
            "{s}"
        );
    }
}
