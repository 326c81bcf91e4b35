//! Descriptor-generation throughput in descriptors per second: indirect row gather
//! (256-byte rows, 4096 random indices per request, dealt round-robin) and row scatter-add
//! (896 random indices with duplicates, the grouped spray); and a 256 MiB contiguous copy's
//! generation time next to a plain memcpy of the same bytes measured in the same run.
//!
//! Run: `cargo bench -p dge --bench descgen` (`-- --row-only` skips the copy; with
//! `DESCGEN_REPS=N` the row gather runs N requests per sample).

use dge::generate::{generate, generate_into, Generated, Kind, Request};
use dge::indirection::{Indirection, OobPolicy};
use dge::{AccessPattern, ElementOrder};
use dma::addr::{SBUF_BASE, SBUF_STRIDE};
use dma::fabric::Fabric;
use dma::{ComputeOp, Dtype, FabricAddr, Generation};
use std::time::Instant;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// `n` random row indices below 100000 written at SBUF partition 0: their indirection,
/// over 256-byte rows.
fn stage_indices(fabric: &mut Fabric, n: usize) -> Indirection {
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let idx: Vec<u8> = (0..n)
        .flat_map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            ((seed % 100_000) as u32).to_le_bytes()
        })
        .collect();
    fabric.write(FabricAddr(SBUF_BASE), &idx).unwrap();
    Indirection {
        dim: 0,
        indices: FabricAddr(SBUF_BASE),
        step: 256,
        bound: Some(100_000),
        policy: OobPolicy::HardError,
    }
}

fn row_gather(fabric: &mut Fabric) -> Request {
    let indices = stage_indices(fabric, 4096);
    let src = AccessPattern::new(FabricAddr(0), 4, &[(64, 4096), (1, 64)]);
    let dst = AccessPattern::new(FabricAddr(1 << 32), 4, &[(64, 4096), (1, 64)]);
    let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
    r.src_indirection = Some(indices);
    r
}

/// 896 SBUF rows scatter-added into a 100000-row table, duplicates allowed (an
/// embedding update's request).
fn row_scatter_add(fabric: &mut Fabric) -> Request {
    let indices = stage_indices(fabric, 896);
    // on SBUF the outermost dimension steps in partitions
    let src = AccessPattern::new(
        FabricAddr(SBUF_BASE + SBUF_STRIDE),
        4,
        &[(1, 1), (64, 896), (1, 64)],
    );
    let dst = AccessPattern::new(FabricAddr(0), 4, &[(64, 896), (1, 64)]);
    let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
    r.dst_indirection = Some(indices);
    r.op = ComputeOp::Add;
    r.non_unique_dst_idx = true;
    r.order = ElementOrder::Sequential { unit_elems: 64 };
    r
}

/// Median over 5 samples of `reps` generations of `req`, in descriptors per second.
fn rate(fabric: &Fabric, req: &Request, reps: usize) -> f64 {
    let mut rates = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        let mut n = 0;
        let mut out = Generated::default();
        for _ in 0..reps {
            generate_into(fabric, req, &mut out).unwrap();
            n += out.descriptor_count();
        }
        rates.push(n as f64 / t.elapsed().as_secs_f64());
    }
    median(rates)
}

fn main() {
    let mut fabric = Fabric::new(Generation::Cayman);
    let reps = std::env::var("DESCGEN_REPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let req = row_gather(&mut fabric);
    println!(
        "row_gather descgen: {:.1} M descriptors/s (4096 x 256 B rows per request, median of 5)",
        rate(&fabric, &req, reps) / 1e6
    );
    let req = row_scatter_add(&mut fabric);
    println!(
        "row_scatter_add descgen: {:.1} M descriptors/s (896 x 256 B rows per request, median of 5)",
        rate(&fabric, &req, reps * 4) / 1e6
    );

    if std::env::args().any(|a| a == "--row-only") {
        return;
    }
    let bytes = 256u64 << 20;
    let elems = (bytes / 4) as u32;
    let src = AccessPattern::new(FabricAddr(0), 4, &[(1, elems)]);
    let dst = AccessPattern::new(FabricAddr(1 << 32), 4, &[(1, elems)]);
    let copy = Request::new(Kind::Direct2d, src, dst, Dtype::F32);
    let gen: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            let g = generate(&fabric, &copy).unwrap();
            assert_eq!(g.descriptor_count(), 4096);
            t.elapsed().as_secs_f64()
        })
        .collect();
    let a = vec![1u8; bytes as usize];
    let mut b = vec![0u8; bytes as usize];
    let mem: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            b.copy_from_slice(&a);
            std::hint::black_box(&b);
            t.elapsed().as_secs_f64()
        })
        .collect();
    let (g, m) = (median(gen), median(mem));
    println!(
        "copy_contiguous descgen: {:.3} ms for 256 MiB; memcpy {:.1} ms; ratio {:.4}",
        g * 1e3,
        m * 1e3,
        g / m
    );
}
