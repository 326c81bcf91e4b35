//! Replay throughput of the DMA engine against a plain `copy_from_slice` memcpy of the same
//! number of bytes, measured in the same run: `cargo bench -p dma --bench replay [-- NAME]`.
//!
//! Workloads (HBM -> HBM on a mariana fabric, 16 queues):
//! - `copy_64k`: 256 MiB in 64 KiB copies sprayed round-robin (target >= 0.8x memcpy);
//! - `copy_256`: 64 MiB in 256-byte copies, each queue a contiguous sixteenth (a
//!   reference for the layout below; same 0.4x bar);
//! - `copy_256_rr`: the same descriptors dealt round-robin over the queues as the DGE emits
//!   them, so one queue's consecutive descriptors stride 4 KiB (target >= 0.4x);
//! - `add_f32`: 64 MiB of 64 KiB f32 add reductions sprayed round-robin (>= 0.3x);
//! - `independent`: 256 MiB of 4 KiB copies, each queue within its own 64 KiB region,
//!   2 workers against 1 (target >= 1.6x);
//! - `small`: replays of 16 to 16384 descriptors of 256 B and 64 to 4096 of 4 KiB, the median
//!   whole `Engine::run` claimed by the caller alone against claimed by the caller and the
//!   engine's thread pool (no inline limit): where the default [`dma::InlineLimit`] comes from.
//!
//! - `stream` (only when named: `cargo bench -p dma --bench replay -- stream`, a process of
//!   its own so that its peak memory is its own): a queue file of 10 million 64-byte fills
//!   (16 queues) written to a temporary file and replayed by `Engine::replay_file`; prints
//!   the time, the most descriptors the engine and the file reader held at once, and the
//!   process's peak resident memory (`VmHWM`) before and after the replay.
//!
//! Each figure is the fastest of several runs (the machine may be shared: the fastest run is
//! the least disturbed), after a warm-up run that materialises the destination pages; the
//! memcpy baseline is measured the same way, one copy before each replay run, so that it
//! samples the same phases of the machine as the replays it is compared with. `med/m` is the median execution run against
//! the fastest memcpy, to show the spread. `exec` is the report's execution wall time; `e2e` is the whole
//! `Engine::run` (validation, page reservation and execution). `memcpy` is one
//! `copy_from_slice` of all the bytes between two pre-faulted buffers. The engine runs with
//! `EngineConfig::default()` but for the worker count (and the batch size, if the
//! environment variable `DMA_BENCH_BATCH` is set).

use std::hint::black_box;
use std::time::{Duration, Instant};

use dma::{
    DescOp, Descriptor, Dtype, Engine, EngineConfig, Fabric, FabricAddr, Generation, InlineLimit,
};

const MIB: u64 = 1 << 20;
const RUNS: usize = 9;
const QUEUES: usize = 16;
const DST: u64 = 4096 * MIB;
const COPY: (DescOp, Dtype) = (DescOp::Copy, Dtype::U8);
const ADD: (DescOp, Dtype) = (DescOp::Add, Dtype::F32);

struct Workload {
    name: &'static str,
    target: f64,
    queues: Vec<Vec<Descriptor>>,
    /// Bytes of source written before the runs, from address 0.
    source_bytes: u64,
    bytes: u64,
}

/// How descriptors are spread over the queues.
#[derive(Clone, Copy)]
enum Spray {
    /// Descriptor `i` to queue `i % QUEUES`.
    RoundRobin,
    /// Queue `q` gets the `q`-th sixteenth, in order.
    Blocks,
}

fn descriptor(op: DescOp, src: u64, dst: u64, len: u64, dtype: Dtype) -> Descriptor {
    Descriptor::new(op, FabricAddr(src), FabricAddr(dst), len as u32, dtype)
        .expect("valid descriptor")
}

/// `total` bytes in descriptors of `len`, contiguous in source and destination.
fn sprayed(
    (name, target): (&'static str, f64),
    total: u64,
    len: u64,
    (op, dtype): (DescOp, Dtype),
    spray: Spray,
) -> Workload {
    let mut queues = vec![Vec::new(); QUEUES];
    let count = total / len;
    for i in 0..count {
        let q = match spray {
            Spray::RoundRobin => i as usize % QUEUES,
            Spray::Blocks => (i * QUEUES as u64 / count) as usize,
        };
        queues[q].push(descriptor(op, i * len, DST + i * len, len, dtype));
    }
    Workload {
        name,
        target,
        queues,
        source_bytes: total,
        bytes: total,
    }
}

/// `total` bytes of 4 KiB copies; queue `q` copies its own 64 KiB region over and over.
fn independent(total: u64) -> Workload {
    const REGION: u64 = 64 * 1024;
    const LEN: u64 = 4096;
    let per_queue = total / QUEUES as u64 / LEN;
    let queues = (0..QUEUES as u64)
        .map(|q| {
            (0..per_queue)
                .map(|i| {
                    let (src, dst) = (q * REGION + i * LEN % REGION, DST + q * REGION);
                    descriptor(DescOp::Copy, src, dst + i * LEN % REGION, LEN, Dtype::U8)
                })
                .collect()
        })
        .collect();
    Workload {
        name: "independent",
        target: 1.6,
        queues,
        source_bytes: QUEUES as u64 * REGION,
        bytes: total,
    }
}

fn fastest(v: Vec<Duration>) -> Duration {
    v.into_iter().min().unwrap_or_default()
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

fn gbps(bytes: u64, t: Duration) -> f64 {
    bytes as f64 / t.as_secs_f64() / 1e9
}

/// The memcpy baseline: two pre-faulted buffers of the workload's size, copied once
/// before each replay run so that both sample the same moments of a shared machine.
struct Memcpy {
    src: Vec<u8>,
    dst: Vec<u8>,
    times: Vec<Duration>,
}

impl Memcpy {
    fn new(bytes: u64) -> Memcpy {
        let src: Vec<u8> = (0..bytes).map(|i| ((i * 131) >> 7) as u8).collect();
        let mut dst = vec![1u8; bytes as usize];
        dst.copy_from_slice(&src);
        Memcpy {
            src,
            dst,
            times: Vec::new(),
        }
    }

    /// Times one copy.
    fn sample(&mut self) {
        let t = Instant::now();
        self.dst.copy_from_slice(black_box(&self.src));
        black_box(&mut self.dst);
        self.times.push(t.elapsed());
    }
}

/// Fastest execution, median execution and fastest end-to-end replay times with
/// `workers` threads, a memcpy sample before each run.
fn replay(w: &Workload, workers: usize, base: &mut Memcpy) -> (Duration, Duration, Duration) {
    let batch = std::env::var("DMA_BENCH_BATCH")
        .ok()
        .and_then(|b| b.parse().ok());
    let config = EngineConfig {
        workers,
        batch: batch.unwrap_or(EngineConfig::default().batch),
        ..EngineConfig::default()
    };
    let engine = Engine::new(config).expect("engine");
    let mut fabric = Fabric::new(Generation::Mariana);
    let pattern: Vec<u8> = (0..MIB).map(|i| (i * 7 + 3) as u8).collect();
    for at in (0..w.source_bytes).step_by(MIB as usize) {
        let n = MIB.min(w.source_bytes - at) as usize;
        fabric.write(FabricAddr(at), &pattern[..n]).expect("source");
    }
    engine.run(&mut fabric, &w.queues).expect("warm-up replay");
    let (mut exec, mut e2e) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        base.sample();
        let t = Instant::now();
        let report = engine.run(&mut fabric, &w.queues).expect("replay");
        e2e.push(t.elapsed());
        exec.push(report.execution.wall);
        assert_eq!(report.summary.bytes, w.bytes);
    }
    (fastest(exec.clone()), median(exec), fastest(e2e))
}

/// Runs one workload with 1 and 2 workers and prints its rows.
fn bench(w: &Workload) {
    let mut memcpy = Memcpy::new(w.bytes);
    let descs: usize = w.queues.iter().map(Vec::len).sum();
    let runs: Vec<_> = [1, 2]
        .into_iter()
        .map(|workers| (workers, replay(w, workers, &mut memcpy)))
        .collect();
    let base = fastest(memcpy.times);
    let mut by_workers = Vec::new();
    for (workers, (exec, med, e2e)) in runs {
        by_workers.push((exec, e2e));
        println!(
            "{:<12} {:>8} {:>8} {:>3} {:>9.2} {:>9.2} {:>9.2} {:>6.2}x {:>6.2}x {:>6.2}x",
            w.name,
            w.bytes / MIB,
            descs,
            workers,
            gbps(w.bytes, exec),
            gbps(w.bytes, e2e),
            gbps(w.bytes, base),
            base.as_secs_f64() / exec.as_secs_f64(),
            base.as_secs_f64() / med.as_secs_f64(),
            base.as_secs_f64() / e2e.as_secs_f64(),
        );
    }
    if let ([(exec1, e2e1), (exec2, e2e2), ..], "independent") = (&by_workers[..], w.name) {
        let ratio = |one: &Duration, two: &Duration| one.as_secs_f64() / two.as_secs_f64();
        println!(
            "{:<12} 2 workers vs 1: exec {:.2}x, e2e {:.2}x (target >= {:.1}x)",
            w.name,
            ratio(exec1, exec2),
            ratio(e2e1, e2e2),
            w.target
        );
    } else {
        println!("{:<12} target >= {:.1}x memcpy", w.name, w.target);
    }
}

/// Median whole-replay time of `queues` on an engine of `workers` workers with `inline`.
fn small_replay(queues: &[Vec<Descriptor>], (workers, inline): (usize, InlineLimit)) -> Duration {
    let config = EngineConfig {
        workers,
        inline,
        ..EngineConfig::default()
    };
    let engine = Engine::new(config).expect("engine");
    let mut fabric = Fabric::new(Generation::Mariana);
    engine.run(&mut fabric, queues).expect("warm-up replay");
    let times = (0..201)
        .map(|_| {
            let t = Instant::now();
            engine.run(&mut fabric, queues).expect("replay");
            t.elapsed()
        })
        .collect();
    median(times)
}

/// The `small` rows by replay size: claimed by the caller alone (one worker, every replay
/// inline) against by the caller and the thread pool (two workers, none inline).
fn small_replays() {
    const ALWAYS: InlineLimit = InlineLimit {
        descriptors: u64::MAX,
        bytes: u64::MAX,
    };
    println!(
        "small replays (median of 201, 16 queues): descs x len, caller alone us, caller + pool us"
    );
    for (count, len) in [
        (16, 256),
        (256, 256),
        (1024, 256),
        (4096, 256),
        (16384, 256),
    ]
    .into_iter()
    .chain([(64, 4096), (256, 4096), (1024, 4096), (4096, 4096)])
    {
        let w = sprayed(("small", 0.0), count * len, len, COPY, Spray::RoundRobin);
        let caller = small_replay(&w.queues, (1, ALWAYS));
        let workers = small_replay(&w.queues, (2, InlineLimit::OFF));
        println!(
            "small {count:>5} x {len:>4} B {:>9.1} {:>9.1}",
            caller.as_secs_f64() * 1e6,
            workers.as_secs_f64() * 1e6
        );
    }
}

fn main() {
    // Arguments not starting with `--` (cargo passes `--bench`) filter workloads by name.
    let filter: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let workloads = [
        sprayed(
            ("copy_64k", 0.8),
            256 * MIB,
            64 * 1024,
            COPY,
            Spray::RoundRobin,
        ),
        sprayed(("copy_256", 0.4), 64 * MIB, 256, COPY, Spray::Blocks),
        sprayed(("copy_256_rr", 0.4), 64 * MIB, 256, COPY, Spray::RoundRobin),
        sprayed(
            ("add_f32", 0.3),
            64 * MIB,
            64 * 1024,
            ADD,
            Spray::RoundRobin,
        ),
        independent(256 * MIB),
    ];
    println!("dma replay bench: fastest of {RUNS} runs; GB/s = 1e9 bytes/s");
    println!(
        "{:<12} {:>8} {:>8} {:>3} {:>9} {:>9} {:>9} {:>7} {:>7} {:>7}",
        "workload", "MiB", "descs", "thr", "exec", "e2e", "memcpy", "exec/m", "med/m", "e2e/m"
    );
    let chosen = workloads
        .iter()
        .filter(|w| filter.is_empty() || filter.iter().any(|f| w.name.contains(f.as_str())));
    for w in chosen {
        bench(w);
    }
    if filter.is_empty() || filter.iter().any(|f| "small".contains(f.as_str())) {
        small_replays();
    }
    if filter.iter().any(|f| f == "stream") {
        stream_replay(10_000_000);
    }
}

/// The process's peak resident memory in KiB (`VmHWM`; 0 where /proc is not there).
fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// The `stream` row: `total` fills in a queue file, replayed with a bounded window.
fn stream_replay(total: u64) {
    use dma::queue_file::{QueueFileWriter, VerifiedQueueFile};
    const SLOTS: u64 = 1024; // each queue cycles over its own 1024 x 64 B
    let path = std::env::temp_dir().join(format!("dma-stream-{}.q", std::process::id()));
    let started = Instant::now();
    let file = std::io::BufWriter::new(std::fs::File::create(&path).expect("temp file"));
    let mut w = QueueFileWriter::new(file, Generation::Mariana, QUEUES).expect("writer");
    let per_queue = total / QUEUES as u64;
    for q in 0..QUEUES as u64 {
        for i in 0..per_queue {
            let dst = FabricAddr(q * SLOTS * 64 + i % SLOTS * 64);
            let d = Descriptor::fill(dst, 64, Dtype::U8, (i + q) & 0xff).expect("fill");
            w.push(q as usize, &d).expect("push");
        }
    }
    w.finish().expect("finish");
    let written = started.elapsed();
    let before = peak_rss_kib();
    let engine = Engine::new(EngineConfig::default()).expect("engine");
    let mut fabric = Fabric::new(Generation::Mariana);
    let started = Instant::now();
    let mut file = VerifiedQueueFile::open_path(&path).expect("verify");
    let report = engine.replay_file(&mut fabric, &mut file).expect("replay");
    let replayed = started.elapsed();
    let after = peak_rss_kib();
    let _ = std::fs::remove_file(&path);
    let size = (per_queue * QUEUES as u64) * dma::descriptor::DESCRIPTOR_BYTES as u64;
    println!(
        "stream: {} descriptors ({} MiB of file) written in {:.2} s, verified and replayed in \
         {:.2} s; held at once: engine {} descriptors, file reader {}; peak RSS {} MiB \
         before the replay, {} MiB after",
        report.summary.descriptors,
        size / MIB,
        written.as_secs_f64(),
        replayed.as_secs_f64(),
        report.execution.max_buffered,
        file.max_buffered(),
        before / 1024,
        after / 1024,
    );
}
