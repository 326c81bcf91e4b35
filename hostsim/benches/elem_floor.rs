//! The floor under `hostsim bench`'s `elem_gather` (4194304 random 4-byte gathers from a
//! 1048576-element table): what no model of it can beat on this machine, measured in the
//! same run as the memcpy baseline and as the workload itself, each as a ratio to the
//! memcpy of the same 16 MiB.
//!
//! - `gather loop`: `out[i] = table[idx[i]]`, nothing else (one thread, then two halves on
//!   two threads);
//! - `bare descriptors`: per 4096 indices, one 32-byte [`Descriptor`] per element made
//!   with `Descriptor::new`, dealt round-robin over 16 queues, then each executed as a
//!   4-byte copy (no fabric, no checks, no timing; one thread, then two);
//! - `elem_gather`: the workload through `hostsim::bench`.
//!
//! Run: `cargo bench -p hostsim --bench elem_floor` (`ELEM_FLOOR_REPEAT=N` runs each N
//! times, median; default 5).

use std::time::Instant;

use dma::{DescOp, Descriptor, Dtype, FabricAddr};
use hostsim::bench::{gather_loop, median, memcpy_seconds, run, BenchOptions};

const ELEMS: usize = 1 << 20;
const GATHERS: usize = 1 << 22;
const STAGE: usize = 4096;
const QUEUES: usize = 16;

/// The workload's indices: the same xorshift64 stream and seed as `hostsim bench`.
fn indices() -> Vec<u32> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..GATHERS)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % ELEMS as u64) as u32
        })
        .collect()
}

/// One 4-byte copy descriptor per index of `idx` (source `table` offset, destination
/// `first + i`, in elements), dealt round-robin into `queues`, then each executed.
fn descriptors(table: &[u32], idx: &[u32], out: &mut [u32], queues: &mut [Vec<Descriptor>]) {
    for (c, chunk) in idx.chunks(STAGE).enumerate() {
        queues.iter_mut().for_each(Vec::clear);
        for (i, &k) in chunk.iter().enumerate() {
            let at = (c * STAGE + i) as u64 * 4;
            let d = Descriptor::new(
                DescOp::Copy,
                FabricAddr(u64::from(k) * 4),
                FabricAddr(at),
                4,
                Dtype::F32,
            );
            queues[i % QUEUES].push(d.expect("a 4-byte copy is a valid descriptor"));
        }
        for d in queues.iter().flatten() {
            let (s, o) = (d.src().0 as usize / 4, d.dst().0 as usize / 4);
            out[o] = table[s];
        }
    }
}

/// [`descriptors`] on `threads` threads, each a contiguous part of whole stages.
fn descriptor_loop(table: &[u32], idx: &[u32], out: &mut [u32], threads: usize) {
    let part = idx.len().div_ceil(threads).div_ceil(STAGE) * STAGE;
    std::thread::scope(|s| {
        for (idx, out) in idx.chunks(part).zip(out.chunks_mut(part)) {
            s.spawn(move || {
                let mut queues: Vec<Vec<Descriptor>> = (0..QUEUES)
                    .map(|_| Vec::with_capacity(STAGE / QUEUES))
                    .collect();
                descriptors(table, idx, out, &mut queues);
            });
        }
    });
}

/// Median seconds of `repeat` runs of `f`.
fn seconds(repeat: usize, mut f: impl FnMut()) -> f64 {
    median(
        (0..repeat)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .collect(),
    )
}

fn main() {
    let repeat = std::env::var("ELEM_FLOOR_REPEAT")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
    let table: Vec<u32> = (0..ELEMS as u32).collect();
    let idx = indices();
    let mut out = vec![0u32; GATHERS];
    let memcpy = memcpy_seconds(GATHERS as u64 * 4, repeat);
    let line =
        |name: &str, s: f64| println!("{name:<28} {:>9.2} ms   ratio {:.3}", s * 1e3, memcpy / s);
    line("memcpy of 16 MiB", memcpy);
    for threads in [1, 2] {
        let s = seconds(repeat, || gather_loop(&table, &idx, &mut out, threads));
        line(&format!("gather loop, {threads} thread(s)"), s);
        let s = seconds(repeat, || descriptor_loop(&table, &idx, &mut out, threads));
        line(&format!("bare descriptors, {threads} thr."), s);
        let want = idx.iter().step_by(4099).map(|&i| table[i as usize]);
        assert!(
            out.iter().step_by(4099).copied().eq(want),
            "the loops gather the table"
        );
    }
    let opts = BenchOptions {
        filter: Some("elem_gather".into()),
        exact: true,
        repeat,
    };
    let rows = run(&opts, |_| {}).expect("the elem_gather workload runs");
    for r in rows {
        line(&r.name, r.seconds);
        println!(
            "{:<28} (ratio {:.3} to the workload's own memcpy)",
            "", r.ratio
        );
    }
}
