//! The workloads of `hostsim bench` (issue 9), each end to end through the public APIs:
//! NKI lowering ([`crate::nki`]), the [`Runtime`] (validation, routing, DGE generation and
//! the DMA engine, or the POOL kernels on sunda), on data made in-process from a fixed seed.
//!
//! The row workloads share one shape: a `100000 x 64` f32 table in HBM and `1048576`
//! uniform random row indices, staged into SBUF partition 0 4096 at a time (an index
//! tensor must sit there, and 4096 is the per-instruction limit). Staging the indices is
//! part of the timed work; making the data is not. The gathers, the scatter and the
//! embedding update run as a program ([`Runtime::run_program`]): each chunk's staging and
//! instruction are steps, so a chunk is staged and its descriptors made while the one
//! before it replays. The embedding update stages its data rows too, in three SBUF
//! partitions in turn, so that chunk `k + 2`'s rows reach none of the bytes chunk `k`
//! (replaying) and chunk `k + 1` (prepared) read or write: the runtime copies them beside
//! chunk `k`'s replay, once chunk `k + 1` is prepared.

use dge::generate::{generate_into, Generated, Kind, Request};
use dge::indirection::{Indirection, OobPolicy};
use dma::addr::{SBUF_BASE, SBUF_STRIDE};
use dma::{
    CceOp, ComputeOp, DescOp, Descriptor, Dtype, Element, Engine, EngineConfig, Fabric, FabricAddr,
    Generation,
};

use zerocopy::IntoBytes;

use super::memory::with_peak;
use super::{gbps, memcpy_seconds, time_runs, BenchRow, RunStats};
use crate::error::Error;
use crate::nki::{self, DmaOptions, Tensor};
use crate::runtime::{Mechanism, Runtime, Step};

/// Table rows, row width (f32) and row bytes of the row workloads.
const ROWS: u32 = 100_000;
const COLS: u32 = 64;
const ROW_BYTES: u64 = COLS as u64 * 4;
/// Row indices of the row workloads, and how many are staged (one instruction) at a time.
const INDICES: usize = 1 << 20;
const STAGE: usize = 4096;
/// Where the tensors sit in HBM.
const TABLE: u64 = 0;
const BIG: u64 = 1 << 30;
const OUT: u64 = 2 << 30;
/// The seed every workload's data comes from.
const SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// What a workload must reach (issue 9's targets on a 2-core machine).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Target {
    /// Throughput at least this fraction of the memcpy baseline.
    Ratio(f64),
    /// At least this many descriptors generated per second.
    DescriptorsPerS(f64),
    /// Two engine workers at least this many times faster than one.
    Speedup(f64),
    /// Throughput at least this fraction of the raw gather loop's ([`gather_loop`] on two threads).
    OfGatherLoop(f64),
    /// None: the row is a baseline others are measured against.
    Baseline,
}

impl Target {
    /// The target as the table prints it.
    pub fn describe(self) -> String {
        match self {
            Target::Ratio(r) => format!(">={r}x memcpy"),
            Target::DescriptorsPerS(d) => format!(">={}M desc/s", d / 1e6),
            Target::Speedup(s) => format!(">={s}x 1 worker"),
            Target::OfGatherLoop(r) => format!(">={r}x gather_loop"),
            Target::Baseline => "baseline".into(),
        }
    }

    /// Whether `row` reaches the target.
    pub fn met_by(self, row: &BenchRow) -> bool {
        match self {
            Target::Ratio(r) => row.ratio >= r,
            Target::DescriptorsPerS(d) => row.descriptors_per_s.is_some_and(|x| x >= d),
            Target::Speedup(s) | Target::OfGatherLoop(s) => row.speedup.is_some_and(|x| x >= s),
            Target::Baseline => true,
        }
    }
}

/// One benchmark workload.
#[derive(Debug)]
pub struct Workload {
    /// Its name (`--filter` matches a substring of it).
    pub name: &'static str,
    /// What it must reach.
    pub target: Target,
    /// What it does, one line.
    pub about: &'static str,
    /// Builds its data, runs it `repeat` times and measures it.
    pub measure: fn(&Workload, usize) -> Result<BenchRow, Error>,
}

/// Every workload, in the order `hostsim bench` runs them.
pub static WORKLOADS: [Workload; 11] = [
    Workload {
        name: "copy_contiguous",
        target: Target::Ratio(0.8),
        about: "dma_copy of a 256 MiB HBM tensor to another",
        measure: copy_contiguous,
    },
    Workload {
        name: "row_gather",
        target: Target::Ratio(0.5),
        about: "dma_gather of 1048576 random rows (256 B) of a 100000 x 64 f32 table to HBM",
        measure: row_gather,
    },
    Workload {
        name: "row_gather_tile",
        target: Target::Ratio(0.5),
        about: "row_gather as NKI writes it: 128 rows per dma_copy into a [128, 64] SBUF tile by a (128, 1) i32 index tile, each tile stored to HBM",
        measure: row_gather_tile,
    },
    Workload {
        name: "tile_loop",
        target: Target::Baseline,
        about: "row_gather_tile's floor: the same rows moved as the idiom moves them, 128 into a tile (rows a partition apart) and the tile out, plain slices on two threads",
        measure: tile_loop_row,
    },
    Workload {
        name: "row_scatter_add",
        target: Target::Ratio(0.3),
        about: "dma_scatter add of 1048576 rows into the table, duplicates allowed",
        measure: row_scatter_add,
    },
    Workload {
        name: "embedding_update",
        target: Target::Ratio(0.3),
        about: "embedding_update add of 1048576 rows (staged in SBUF 896 at a time)",
        measure: embedding_update,
    },
    Workload {
        name: "elem_gather",
        target: Target::OfGatherLoop(0.5),
        about: "dma_gather of 4194304 random f32 elements of a 1048576-element table, against gather_loop on the same data",
        measure: elem_gather,
    },
    Workload {
        name: "gather_loop",
        target: Target::Baseline,
        about: "elem_gather's baseline: out[i] = table[idx[i]] over plain vectors on two threads",
        measure: gather_loop_row,
    },
    Workload {
        name: "descgen",
        target: Target::DescriptorsPerS(30e6),
        about: "descriptor generation alone for the row_gather workload",
        measure: descgen,
    },
    Workload {
        name: "pool_route",
        target: Target::Ratio(0.1),
        about: "row_gather on sunda: DMA_INDIRECT on the IVP/POOL kernel",
        measure: pool_route,
    },
    Workload {
        name: "replay_workers",
        target: Target::Speedup(1.6),
        about: "engine replay of 16 independent queues (4 KiB copies), 2 workers vs 1",
        measure: replay_workers,
    },
];

/// A job's timed part: one run of the workload.
type Job = Box<dyn FnMut() -> Result<RunStats, Error>>;

/// Measures `build`'s job: memcpy baseline of `bytes` first, then the job's data and runs
/// under the peak-memory mark.
fn measure(
    w: &Workload,
    repeat: usize,
    (bytes, tensor_bytes): (u64, u64),
    build: impl FnOnce() -> Result<Job, Error>,
) -> Result<BenchRow, Error> {
    let memcpy_s = memcpy_seconds(bytes, repeat);
    let (timed, peak) = with_peak(|| build().and_then(|mut job| time_runs(repeat, &mut job)));
    let (seconds, stats) = timed?;
    let row = BenchRow::new(w, bytes, seconds, memcpy_s, stats, peak, tensor_bytes);
    Ok(row)
}

/// A small deterministic generator (xorshift64).
struct Xorshift(u64);

impl Xorshift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// `n` values uniform in `0..bound`.
    fn below(&mut self, n: usize, bound: u32) -> Vec<u32> {
        (0..n)
            .map(|_| (self.next() % u64::from(bound)) as u32)
            .collect()
    }
}

/// Writes `len` f32s `i * 0.25` (mod 4096) from `addr`, 1 MiB at a time.
fn write_ramp(fabric: &mut Fabric, addr: u64, elems: u64) -> Result<(), Error> {
    const CHUNK: u64 = 1 << 18;
    for first in (0..elems).step_by(CHUNK as usize) {
        let n = CHUNK.min(elems - first);
        let v: Vec<f32> = (first..first + n)
            .map(|i| (i % 4096) as f32 * 0.25)
            .collect();
        fabric.write_elems(FabricAddr(addr + first * 4), &v)?;
    }
    Ok(())
}

/// A runtime for `generation` on its own route.
fn runtime(generation: Generation) -> Result<Runtime, Error> {
    Runtime::new(generation, Mechanism::Auto)
}

/// The index tensor `[1, n]` u32 at SBUF partition 0, offset 0.
fn staged(fabric: &mut Fabric, indices: &[u32]) -> Result<Tensor, Error> {
    fabric.write_elems(FabricAddr(SBUF_BASE), indices)?;
    Ok(Tensor::vector(
        FabricAddr(SBUF_BASE),
        indices.len() as u32,
        Dtype::U32,
    ))
}

/// Runs `lowered` and counts its descriptors into `stats`.
fn run_counted(
    rt: &mut Runtime,
    fabric: &mut Fabric,
    lowered: &nki::Lowered,
    stats: &mut RunStats,
) -> Result<(), Error> {
    let report = rt.run_lowered(fabric, lowered)?;
    stats.descriptors += report.totals.descriptors;
    Ok(())
}

fn copy_contiguous(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    const BYTES: u64 = 256 << 20;
    const ROW: u32 = 16384; // f32 per row: 64 KiB rows, 4096 of them
    measure(w, repeat, (BYTES, 2 * BYTES), || {
        let generation = Generation::Cayman;
        let mut fabric = Fabric::new(generation);
        write_ramp(&mut fabric, BIG, BYTES / 4)?;
        let ap = |addr| nki::AccessPattern {
            addr: FabricAddr(addr).into(),
            ap: [[ROW, (BYTES / 4 / u64::from(ROW)) as u32], [1, ROW]],
        };
        let lowered = nki::dma_copy(generation, &ap(BIG), &ap(OUT), Dtype::F32, ComputeOp::None)?;
        let mut rt = runtime(generation)?;
        Ok(Box::new(move || {
            let mut stats = RunStats::default();
            run_counted(&mut rt, &mut fabric, &lowered, &mut stats)?;
            Ok(stats)
        }))
    })
}

/// The row table, filled, and `INDICES` uniform row indices.
fn row_table(generation: Generation) -> Result<(Fabric, Vec<u32>), Error> {
    let mut fabric = Fabric::new(generation);
    write_ramp(&mut fabric, TABLE, u64::from(ROWS) * u64::from(COLS))?;
    Ok((fabric, Xorshift(SEED).below(INDICES, ROWS)))
}

/// `dma_gather` of every staged chunk of `indices` from a `[rows, cols]` f32 table at
/// TABLE into consecutive rows at OUT, as one program.
fn gather_chunks(
    rt: &mut Runtime,
    fabric: &mut Fabric,
    (rows, cols): (u32, u32),
    indices: &[u32],
) -> Result<RunStats, Error> {
    let generation = rt.generation();
    let table = Tensor::new(FabricAddr(TABLE), [rows, cols], Dtype::F32);
    let row_bytes = u64::from(cols) * 4;
    let lowered = chunks(indices, STAGE, |i, idx| {
        let at = OUT + (i * STAGE) as u64 * row_bytes;
        let dst = Tensor::new(FabricAddr(at), [idx.shape[1], cols], Dtype::F32);
        nki::dma_gather(generation, &table, idx, &dst, DmaOptions::default())
    })?;
    let images = le_images(indices, STAGE);
    run_steps(rt, fabric, staging_steps(&images, &lowered))
}

/// `lower(i, index tensor)` of every chunk `i` of `indices`, `n` at a time, staged at
/// SBUF partition 0.
fn chunks(
    indices: &[u32],
    n: usize,
    lower: impl Fn(usize, &Tensor) -> Result<nki::Lowered, Error>,
) -> Result<Vec<nki::Lowered>, Error> {
    let staged = |n: usize| Tensor::vector(FabricAddr(SBUF_BASE), n as u32, Dtype::U32);
    let chunks = indices.chunks(n).enumerate();
    chunks.map(|(i, c)| lower(i, &staged(c.len()))).collect()
}

/// The little-endian bytes of every chunk of `n` elements of `elems`.
fn le_images<E: Element>(elems: &[E], n: usize) -> Vec<std::borrow::Cow<'_, [u8]>> {
    let image = |c: &[E]| -> Vec<u8> {
        let images: Vec<E::Bytes> = c.iter().map(|e| e.to_le()).collect();
        images.as_bytes().to_vec()
    };
    elems
        .chunks(n)
        .map(|c| E::le_image(c).map_or_else(|| image(c).into(), Into::into))
        .collect()
}

/// The steps staging each chunk's index `images` at SBUF partition 0, each followed by
/// the chunk's `lowered` operation.
fn staging_steps<'a>(
    images: &'a [std::borrow::Cow<'a, [u8]>],
    lowered: &'a [nki::Lowered],
) -> impl Iterator<Item = Step<'a>> {
    images.iter().zip(lowered).flat_map(|(bytes, l)| {
        let write = Step::Write {
            addr: FabricAddr(SBUF_BASE),
            bytes,
        };
        [write, Step::Run(l)]
    })
}

/// Runs `steps` as one program; the descriptors replayed.
fn run_steps<'a>(
    rt: &mut Runtime,
    fabric: &mut Fabric,
    steps: impl Iterator<Item = Step<'a>>,
) -> Result<RunStats, Error> {
    let report = rt.run_program(fabric, steps)?;
    Ok(RunStats {
        descriptors: report.totals.descriptors,
        seconds: None,
    })
}

/// The timed job of a gather workload: [`gather_chunks`] on `fabric`.
fn gather_job(
    generation: Generation,
    shape: (u32, u32),
    mut fabric: Fabric,
    indices: Vec<u32>,
) -> Result<Job, Error> {
    let mut rt = runtime(generation)?;
    Ok(Box::new(move || {
        gather_chunks(&mut rt, &mut fabric, shape, &indices)
    }))
}

/// Bytes of the row workloads' table, index vector and gathered rows.
fn row_tensor_bytes() -> u64 {
    u64::from(ROWS) * ROW_BYTES + INDICES as u64 * 4 + INDICES as u64 * ROW_BYTES
}

fn row_gather(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let (fabric, indices) = row_table(Generation::Cayman)?;
        gather_job(Generation::Cayman, (ROWS, COLS), fabric, indices)
    })
}

/// Partitions of the NKI-idiom tile.
const TILE_ROWS: usize = 128;

fn row_gather_tile(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let (mut fabric, indices) = row_table(Generation::Cayman)?;
        let lowered = tile_gathers(&mut fabric, &indices)?;
        let mut rt = runtime(Generation::Cayman)?;
        Ok(Box::new(move || {
            run_steps(&mut rt, &mut fabric, lowered.iter().map(Step::Run))
        }))
    })
}

fn tile_loop_row(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let row = ROW_BYTES as usize;
        let table: Vec<u8> = (0..u64::from(ROWS) * ROW_BYTES).map(|i| i as u8).collect();
        let indices = Xorshift(SEED).below(INDICES, ROWS);
        let mut out = vec![0u8; INDICES * row];
        Ok(Box::new(move || {
            let t = std::time::Instant::now();
            tile_loop(&table, &indices, &mut out, row, 2);
            std::hint::black_box(&mut out);
            Ok(RunStats {
                descriptors: 0,
                seconds: Some(t.elapsed().as_secs_f64()),
            })
        }))
    })
}

/// Moves row `idx[i]` of `table` (rows of `row` bytes) to row `i` of `out` as the NKI
/// tile idiom moves it: `TILE_ROWS` (128) rows at a time into a tile whose rows lie an SBUF
/// partition stride apart, then the tile out; on `threads` threads, each with its own
/// tile. An index past the table moves nothing.
fn tile_loop(table: &[u8], idx: &[u32], out: &mut [u8], row: usize, threads: usize) {
    let stride = SBUF_STRIDE as usize;
    let per = TILE_ROWS * idx.len().div_ceil(TILE_ROWS * threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (idx, out) in idx.chunks(per).zip(out.chunks_mut(per * row)) {
            s.spawn(move || {
                let mut tile = vec![0u8; (TILE_ROWS - 1) * stride + row];
                for (idx, out) in idx.chunks(TILE_ROWS).zip(out.chunks_mut(TILE_ROWS * row)) {
                    for (p, &i) in idx.iter().enumerate() {
                        let from = table.get(i as usize * row..(i as usize + 1) * row);
                        if let Some(from) = from {
                            tile[p * stride..p * stride + row].copy_from_slice(from);
                        }
                    }
                    for (p, o) in out.chunks_mut(row).enumerate() {
                        o.copy_from_slice(&tile[p * stride..p * stride + row]);
                    }
                }
            });
        }
    });
}

/// The tile workload's ops, its indices staged: index tile `k` is column `k` of a
/// `[128, INDICES / 128]` i32 SBUF tensor (partition `p` holding index `128k + p`); each
/// `k` gathers its 128 rows into the `[128, 64]` f32 tile after it in SBUF, then stores the
/// tile to rows `128k..` at OUT.
fn tile_gathers(fabric: &mut Fabric, indices: &[u32]) -> Result<Vec<nki::Lowered>, Error> {
    let tiles = indices.len() / TILE_ROWS;
    for p in 0..TILE_ROWS {
        let column: Vec<u32> = (0..tiles).map(|k| indices[k * TILE_ROWS + p]).collect();
        fabric.write_elems(FabricAddr(SBUF_BASE + p as u64 * SBUF_STRIDE), &column)?;
    }
    let sbuf = |name: &str, offset: u64, shape: Vec<u64>, dtype| nki::ApTensor {
        name: name.into(),
        start: FabricAddr(SBUF_BASE + offset),
        space: dma::Space::Sbuf,
        shape,
        dtype,
    };
    let tile = sbuf(
        "tile",
        tiles as u64 * 4,
        vec![TILE_ROWS as u64, u64::from(COLS)],
        Dtype::F32,
    );
    let table = nki::ApTensor {
        name: "table".into(),
        start: FabricAddr(TABLE),
        space: dma::Space::Hbm,
        shape: vec![u64::from(ROWS), u64::from(COLS)],
        dtype: Dtype::F32,
    };
    let rows = [(i64::from(COLS), TILE_ROWS as u32), (1, COLS)];
    let side = |t: nki::ApTensor, index: Option<nki::ApTensor>| nki::ApSide {
        tensor: t,
        offset: 0,
        dims: rows
            .iter()
            .map(|&(step, num)| nki::ApDim { step, num })
            .collect(),
        indirect_dim: 0,
        vector_offset: index.map(nki::IndexAp::whole),
        scalar_offset: None,
    };
    let opts = nki::ApOptions {
        op: ComputeOp::None,
        oob: nki::OobMode::Error,
        unique_indices: true,
        dge: nki::DgeMode::Chosen,
    };
    let mut ops = Vec::with_capacity(2 * tiles);
    for k in 0..tiles {
        let idx = sbuf("idx", k as u64 * 4, vec![TILE_ROWS as u64, 1], Dtype::I32);
        let gather = side(table.clone(), Some(idx));
        ops.push(nki::dma_copy_ap(
            "dma_copy",
            gather,
            side(tile.clone(), None),
            opts,
        )?);
        let mut out = table.clone();
        out.start = FabricAddr(OUT + (k * TILE_ROWS) as u64 * ROW_BYTES);
        out.shape[0] = TILE_ROWS as u64;
        ops.push(nki::dma_copy_ap(
            "dma_copy",
            side(tile.clone(), None),
            side(out, None),
            opts,
        )?);
    }
    Ok(ops)
}

fn pool_route(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let (fabric, indices) = row_table(Generation::Sunda)?;
        gather_job(Generation::Sunda, (ROWS, COLS), fabric, indices)
    })
}

/// elem_gather's table elements and gathers.
const ELEMS: u32 = 1 << 20;
const GATHERS: usize = 1 << 22;

fn elem_gather(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = GATHERS as u64 * 4;
    let tensors = u64::from(ELEMS) * 4 + 2 * bytes;
    let mut row = measure(w, repeat, (bytes, tensors), || {
        let mut fabric = Fabric::new(Generation::Cayman);
        write_ramp(&mut fabric, TABLE, u64::from(ELEMS))?;
        let indices = Xorshift(SEED).below(GATHERS, ELEMS);
        gather_job(Generation::Cayman, (ELEMS, 1), fabric, indices)
    })?;
    let (table, indices) = loop_data();
    let mut out = vec![0f32; GATHERS];
    let loop_s = gather_loop_seconds(&table, &indices, &mut out, repeat);
    row.speedup = Some(loop_s / row.seconds.max(f64::MIN_POSITIVE));
    row.meets_target = w.target.met_by(&row);
    Ok(row)
}

fn gather_loop_row(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = GATHERS as u64 * 4;
    let tensors = u64::from(ELEMS) * 4 + 2 * bytes;
    measure(w, repeat, (bytes, tensors), || {
        let (table, indices) = loop_data();
        let mut out = vec![0f32; GATHERS];
        Ok(Box::new(move || {
            let seconds = gather_loop_seconds(&table, &indices, &mut out, 1);
            Ok(RunStats {
                descriptors: 0,
                seconds: Some(seconds),
            })
        }))
    })
}

/// elem_gather's data as plain vectors: the same ramp and the same indices.
fn loop_data() -> (Vec<f32>, Vec<u32>) {
    let table = (0..ELEMS).map(|i| (i % 4096) as f32 * 0.25).collect();
    (table, Xorshift(SEED).below(GATHERS, ELEMS))
}

/// The median seconds of `repeat` runs of [`gather_loop`] on two threads (the
/// machine's two cores, as the engine's two workers).
fn gather_loop_seconds(table: &[f32], indices: &[u32], out: &mut [f32], repeat: usize) -> f64 {
    let times = (0..repeat.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            gather_loop(table, indices, out, 2);
            std::hint::black_box(&mut *out);
            t.elapsed().as_secs_f64()
        })
        .collect();
    super::median(times)
}

/// The raw gather `out[i] = table[idx[i]]` (an index past the table reads the default)
/// on `threads` threads, each a contiguous part: the floor under elem_gather.
pub fn gather_loop<T: Copy + Default + Send + Sync>(
    table: &[T],
    idx: &[u32],
    out: &mut [T],
    threads: usize,
) {
    let part = idx.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        for (idx, out) in idx.chunks(part).zip(out.chunks_mut(part)) {
            s.spawn(move || {
                for (o, &i) in out.iter_mut().zip(idx) {
                    *o = table.get(i as usize).copied().unwrap_or_default();
                }
            });
        }
    });
}

fn row_scatter_add(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let generation = Generation::Cayman;
        let (mut fabric, indices) = row_table(generation)?;
        write_ramp(&mut fabric, BIG, INDICES as u64 * u64::from(COLS))?;
        let mut rt = runtime(generation)?;
        let table = Tensor::new(FabricAddr(TABLE), [ROWS, COLS], Dtype::F32);
        let opts = DmaOptions {
            unique_indices: false,
            compute_op: ComputeOp::Add,
            ..DmaOptions::default()
        };
        Ok(Box::new(move || {
            let lowered = chunks(&indices, STAGE, |i, idx| {
                let at = BIG + (i * STAGE) as u64 * ROW_BYTES;
                let src = Tensor::new(FabricAddr(at), [idx.shape[1], COLS], Dtype::F32);
                nki::dma_scatter(generation, &src, idx, &table, opts)
            })?;
            let images = le_images(&indices, STAGE);
            run_steps(&mut rt, &mut fabric, staging_steps(&images, &lowered))
        }))
    })
}

fn embedding_update(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    /// Data rows staged per instruction: 896 x 256 B = 224 KiB fills one cayman SBUF
    /// partition (fewer, larger instructions: each replay has its fixed costs).
    const EMB_STAGE: usize = 896;
    let bytes = INDICES as u64 * ROW_BYTES;
    measure(w, repeat, (bytes, row_tensor_bytes()), || {
        let generation = Generation::Cayman;
        let (mut fabric, indices) = row_table(generation)?;
        let data: Vec<f32> = (0..INDICES * COLS as usize)
            .map(|i| (i % 97) as f32)
            .collect();
        // partitions 1, 2 and 3 in turn: chunk k + 2's rows are staged while chunk k
        // replays (reading its partition) and chunk k + 1 waits prepared (its own)
        let data_at = |i: usize| FabricAddr(SBUF_BASE + SBUF_STRIDE * (1 + i as u64 % 3));
        let mut rt = runtime(generation)?;
        let table = Tensor::new(FabricAddr(TABLE), [ROWS, COLS], Dtype::F32);
        Ok(Box::new(move || {
            let lowered = chunks(&indices, EMB_STAGE, |i, idx| {
                let d = Tensor::new(data_at(i), [idx.shape[1], COLS], Dtype::F32);
                nki::embedding_update(generation, &table, idx, &d, CceOp::Add)
            })?;
            let images = le_images(&indices, EMB_STAGE);
            let rows = le_images(&data, EMB_STAGE * COLS as usize);
            let steps = staging_steps(&images, &lowered)
                .enumerate()
                .flat_map(|(k, step)| {
                    // the rows of chunk k / 2 go in before its operation (step 2k + 1)
                    let data = (k % 2 == 1).then(|| Step::Write {
                        addr: data_at(k / 2),
                        bytes: &rows[k / 2],
                    });
                    data.into_iter().chain([step])
                });
            run_steps(&mut rt, &mut fabric, steps)
        }))
    })
}

/// The DGE request of one staged row-gather chunk of `n` indices (what the DMA_INDIRECT
/// lowering of `dma_gather` asks the DGE for).
fn row_request(n: u32, dst: u64) -> Request {
    let rows = [(i64::from(COLS), n), (1, COLS)];
    let src = dge::AccessPattern::new(FabricAddr(TABLE), 4, &rows);
    let dst = dge::AccessPattern::new(FabricAddr(dst), 4, &rows);
    let mut r = Request::new(Kind::Indirect, src, dst, Dtype::F32);
    r.src_indirection = Some(Indirection {
        dim: 0,
        indices: FabricAddr(SBUF_BASE),
        step: ROW_BYTES as i32,
        bound: Some(u64::from(ROWS)),
        policy: OobPolicy::HardError,
    });
    r
}

fn descgen(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    let bytes = INDICES as u64 * ROW_BYTES;
    let tensors = u64::from(ROWS) * ROW_BYTES + INDICES as u64 * 4; // nothing is written
    measure(w, repeat, (bytes, tensors), || {
        let (mut fabric, indices) = row_table(Generation::Cayman)?;
        let mut out = Generated::default();
        Ok(Box::new(move || {
            let mut stats = RunStats::default();
            let mut seconds = 0.0;
            for (i, chunk) in indices.chunks(STAGE).enumerate() {
                staged(&mut fabric, chunk)?;
                let req = row_request(chunk.len() as u32, OUT + (i * STAGE) as u64 * ROW_BYTES);
                let t = std::time::Instant::now();
                generate_into(&fabric, &req, &mut out)?;
                seconds += t.elapsed().as_secs_f64();
                stats.descriptors += out.descriptor_count() as u64;
            }
            stats.seconds = Some(seconds);
            Ok(stats)
        }))
    })
}

/// 16 queues of 4 KiB copies, each queue inside its own 64 KiB source and destination.
fn independent_queues(total: u64) -> Result<Vec<Vec<Descriptor>>, Error> {
    const LEN: u64 = 4096;
    const QUEUES: u64 = 16;
    let mut queues = vec![Vec::new(); QUEUES as usize];
    for i in 0..total / LEN {
        let q = i % QUEUES;
        let off = q * 65536 + (i / QUEUES) % 16 * LEN;
        let d = Descriptor::new(
            DescOp::Copy,
            FabricAddr(BIG + off),
            FabricAddr(OUT + off),
            LEN as u32,
            Dtype::U8,
        )?;
        queues[q as usize].push(d);
    }
    Ok(queues)
}

/// Runs of [`replay_workers`] per `--repeat` and worker count: one run takes
/// milliseconds, so more of them make its medians steady.
const ROUNDS_PER_REPEAT: usize = 5;

fn replay_workers(w: &Workload, repeat: usize) -> Result<BenchRow, Error> {
    const BYTES: u64 = 256 << 20;
    let memcpy_s = memcpy_seconds(BYTES, repeat);
    let (timed, peak) = with_peak(|| -> Result<_, Error> {
        let mut fabric = Fabric::new(Generation::Cayman);
        write_ramp(&mut fabric, BIG, 1 << 18)?;
        let queues = independent_queues(BYTES)?;
        let mut seconds = [0.0; 2];
        let mut stats = RunStats::default();
        for (slot, workers) in [1, 2].into_iter().enumerate() {
            let engine = Engine::new(EngineConfig {
                workers,
                ..EngineConfig::default()
            })?;
            (seconds[slot], stats) = time_runs(ROUNDS_PER_REPEAT * repeat.max(1), || {
                let r = engine.run(&mut fabric, &queues)?;
                Ok(RunStats {
                    descriptors: r.summary.descriptors,
                    seconds: None,
                })
            })?;
        }
        Ok((seconds, stats))
    });
    let ([one, two], stats) = timed?;
    let mut row = BenchRow::new(w, BYTES, two, memcpy_s, stats, peak, 2 << 20);
    row.speedup = Some(match two > 0.0 {
        true => one / two,
        false => 0.0,
    });
    row.meets_target = w.target.met_by(&row);
    Ok(row)
}

impl BenchRow {
    /// The row of workload `w`: `bytes` in `seconds` against a memcpy of them in
    /// `memcpy_s`, with the last run's `stats`.
    fn new(
        w: &Workload,
        bytes: u64,
        seconds: f64,
        memcpy_s: f64,
        stats: RunStats,
        peak_rss_bytes: Option<u64>,
        tensor_bytes: u64,
    ) -> BenchRow {
        let (g, m) = (gbps(bytes, seconds), gbps(bytes, memcpy_s));
        let per_s = |n: u64| (n > 0 && seconds > 0.0).then(|| n as f64 / seconds);
        let mut row = BenchRow {
            name: w.name.to_string(),
            bytes,
            seconds,
            gbps: g,
            memcpy_gbps: m,
            ratio: if m > 0.0 { g / m } else { 0.0 },
            target: w.target.describe(),
            meets_target: false,
            descriptors_per_s: per_s(stats.descriptors),
            speedup: None,
            peak_rss_bytes,
            tensor_bytes,
        };
        row.meets_target = w.target.met_by(&row);
        row
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_in_issue_order() {
        let names: Vec<_> = WORKLOADS.iter().map(|w| w.name).collect();
        assert_eq!(
            names,
            [
                "copy_contiguous",
                "row_gather",
                "row_gather_tile",
                "tile_loop",
                "row_scatter_add",
                "embedding_update",
                "elem_gather",
                "gather_loop",
                "descgen",
                "pool_route",
                "replay_workers"
            ]
        );
    }

    #[test]
    fn tile_loop_moves_row_idx_i_to_row_i_and_nothing_for_an_index_past_the_table() {
        let row = 3;
        let table: Vec<u8> = (0..5 * row as u8).collect();
        let idx: Vec<u32> = (0..300).map(|i| [4, 0, 2, 9][i % 4]).collect();
        let mut out = vec![0xee; idx.len() * row];
        tile_loop(&table, &idx, &mut out, row, 2);
        for (i, &k) in idx.iter().enumerate() {
            let want = match k {
                9 => vec![0; row], // the tile row, still zero from the first tile
                k => table[k as usize * row..][..row].to_vec(),
            };
            assert_eq!(out[i * row..][..row], want[..], "row {i}");
        }
    }

    #[test]
    fn xorshift_is_deterministic_and_in_range() {
        let a = Xorshift(SEED).below(1000, 7);
        assert_eq!(a, Xorshift(SEED).below(1000, 7));
        assert!(a.iter().all(|&v| v < 7));
        assert!((0..7).all(|v| a.contains(&v)));
    }

    #[test]
    fn independent_queues_stay_in_their_own_64k() {
        let q = independent_queues(1 << 20).unwrap();
        assert_eq!(q.len(), 16);
        assert!(q.iter().all(|q| q.len() == 16));
        for (i, queue) in q.iter().enumerate() {
            let base = BIG + i as u64 * 65536;
            assert!(queue
                .iter()
                .all(|d| (base..base + 65536).contains(&d.src().0)));
        }
    }

    #[test]
    fn targets_judge_their_own_figure() {
        let w = &WORKLOADS[0];
        let stats = RunStats {
            descriptors: 10,
            seconds: None,
        };
        let row = BenchRow::new(w, 1000, 1e-6, 0.5e-6, stats, None, 0);
        assert!((row.ratio - 0.5).abs() < 1e-9);
        assert!(!row.meets_target); // 0.5 < 0.8
        assert_eq!(row.descriptors_per_s, Some(1e7));
        assert!(Target::DescriptorsPerS(30e6).describe().contains("30M"));
    }

    /// A scaled-down gather on both routes: the rows land where the workload says, and
    /// the DGE route counts one descriptor per row (none of them adjacent).
    #[test]
    fn a_scaled_down_gather_moves_the_rows() {
        for generation in [Generation::Cayman, Generation::Sunda] {
            let mut fabric = Fabric::new(generation);
            write_ramp(&mut fabric, TABLE, 8 * u64::from(COLS)).unwrap();
            let mut rt = runtime(generation).unwrap();
            let stats = gather_chunks(&mut rt, &mut fabric, (8, COLS), &[7, 0, 7, 3]).unwrap();
            let expected = if generation == Generation::Sunda {
                0
            } else {
                4
            };
            assert_eq!(stats.descriptors, expected);
            let mut got = vec![0f32; 4 * COLS as usize];
            fabric.read_elems(FabricAddr(OUT), &mut got).unwrap();
            for (k, &row) in [7u64, 0, 7, 3].iter().enumerate() {
                let first = row * u64::from(COLS);
                let want: Vec<f32> = (first..first + u64::from(COLS))
                    .map(|i| (i % 4096) as f32 * 0.25)
                    .collect();
                assert_eq!(got[k * COLS as usize..(k + 1) * COLS as usize], want[..]);
            }
        }
    }
}
