//! The embedded default job that `cargo run --release` runs: a row gather with
//! out-of-bounds indices lowered by the DGE, replayed by the async DMA engine on the
//! fabric, and checked against a host-side gather of the same rows.

use std::fmt::Write;

use dge::generate::{generate, Kind, Request};
use dge::indirection::{Indirection, OobPolicy};
use dge::AccessPattern;
use dma::addr::{PSUM_BASE, SBUF_BASE};
use dma::engine::{Engine, EngineConfig};
use dma::fabric::Fabric;
use dma::{Dtype, FabricAddr, Generation, Space};

use crate::error::Error;

/// Table rows, row width (f32 elements) and index count of the demo gather.
const ROWS: u32 = 1000;
const COLS: u32 = 64;
const INDICES: u32 = 4096;
const TABLE: u64 = 0x1000;
const OUT: u64 = 0x100_0000;

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

/// Runs the demo on `generation` and returns its report.
pub fn run(generation: Generation) -> Result<String, Error> {
    let mut fabric = Fabric::new(generation);
    let (table, indices) = inputs();
    fabric.write_elems(FabricAddr(TABLE), &table)?;
    fabric.write_elems(FabricAddr(SBUF_BASE), &indices)?;
    let req = request();
    let g = generate(&fabric, &req)?;
    let report = Engine::new(EngineConfig::default())?.run(&mut fabric, &g.queues)?;
    let mut got = vec![0f32; (INDICES * COLS) as usize];
    fabric.read_elems(FabricAddr(OUT), &mut got)?;
    let expected = host_gather(&table, &indices);
    let mut out = fabric_summary(generation);
    let used = g.queues.iter().filter(|q| !q.is_empty()).count();
    let _ = writeln!(
        out,
        "\nRow gather: table {ROWS} x {COLS} f32 in HBM, {INDICES} u32 indices in SBUF partition 0 (bound {ROWS}, soft skip)\n\
         DGE: {} descriptors over {used} queues, {} bytes, {} indices skipped (first at position {}), notification {}\n\
         DMA engine: {} descriptors, {} bytes, average {:.0} B per descriptor; estimated makespan {:.2} us, busiest queue {:.2} us\n\
         Replay matches the host-side gather: {}",
        g.descriptor_count(),
        g.bytes,
        g.skipped.len(),
        g.skipped.first().map_or(-1, |s| i64::from(s.position)),
        if g.oob_notification { "raised" } else { "off" },
        report.summary.descriptors,
        report.summary.bytes,
        report.summary.average_descriptor_bytes(),
        report.summary.makespan_ps as f64 / 1e6,
        report.summary.queues.iter().map(|q| q.busy_ps).max().unwrap_or(0) as f64 / 1e6,
        if got == expected { "yes" } else { "NO" },
    );
    Ok(out)
}

fn inputs() -> (Vec<f32>, Vec<u32>) {
    let table = (0..ROWS * COLS).map(|i| i as f32 * 0.5).collect();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let indices = (0..INDICES)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // every 409th index is past the table: soft-skipped
            if i % 409 == 408 {
                ROWS + (x % 7) as u32
            } else {
                (x % u64::from(ROWS)) as u32
            }
        })
        .collect();
    (table, indices)
}

fn request() -> Request {
    let rows = [(i64::from(COLS), INDICES), (1, COLS)];
    let src = AccessPattern::new(FabricAddr(TABLE), 4, &rows);
    let dst = AccessPattern::new(FabricAddr(OUT), 4, &rows);
    let mut req = Request::new(Kind::Indirect, src, dst, Dtype::F32);
    req.src_indirection = Some(Indirection {
        dim: 0,
        indices: FabricAddr(SBUF_BASE),
        step: (COLS * 4) as i32,
        bound: Some(u64::from(ROWS)),
        policy: OobPolicy::SoftSkip,
    });
    req
}

fn host_gather(table: &[f32], indices: &[u32]) -> Vec<f32> {
    let cols = COLS as usize;
    indices
        .iter()
        .flat_map(
            |&i| match table.get(i as usize * cols..(i as usize + 1) * cols) {
                Some(row) => row.to_vec(),
                None => vec![0.0; cols],
            },
        )
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demo_reports_a_matching_gather() {
        let report = run(Generation::Cayman).unwrap();
        assert!(
            report.contains("Replay matches the host-side gather: yes"),
            "{report}"
        );
        assert!(
            report.contains("10 indices skipped (first at position 408)"),
            "{report}"
        );
        assert!(report.contains("notification raised"), "{report}");
        assert!(
            report.contains("DMA engine: 4081 descriptors, 1046016 bytes"),
            "{report}"
        );
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
