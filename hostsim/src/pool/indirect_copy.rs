//! INDIRECT_COPY 0xe7 (S4D4_IC, NKI `local_gather`) on the IVP core: the dispatcher
//! [`pool_indirect_copy`], its per-core worker and [`send_gather_request`], the vector
//! bounds check of one 16-index request.
//!
//! # The split (seed 000 section 5)
//!
//! The eight GpSimd cores run the worker by core id `c`; a core with `16c` at or past the
//! active channel count skips. Core `c` owns 16 partitions and `n = num_elem / E` indices
//! (E = `src_num_elem_per_idx`): index `j` is the u16 at partition `Pi + 16c + j % 16`,
//! byte `2 * (j / 16)` past `index_addr` (the NKI reference's column-major flatten). Each
//! of the 16 index rows is read with NX16 gathers, 32 indices per op.
//!
//! # send_gather_request
//!
//! For 16 indices at once: `in = ltun_2x32(id, src_buffer_size)`; `end = id + E`
//! (`subn_2x32` by `-E`); `full = leun_2x32(end, src_buffer_size)`; the run length is
//! `mov2nx8t(E, src_buffer_size - id, full)`, then `mov2nx8t(len, 0, in)`, so a run that
//! passes the end of the source row keeps only its inside part and one that starts past it
//! is empty. The out-of-range lanes' ids are replaced by 0 (`mov2nx8t`) before the byte
//! offset `id * elem_size` is formed with `mulusan_2x32`.
//!
//! # Moving the runs
//!
//! The runs are then moved with slice copies: each partition's source bytes that any run
//! touches are read once, every run lands at `j * E` of the partition's output (which
//! starts zeroed, so the clipped tail and empty runs stay 0), and the output goes to the
//! dst TENSOR4D in element order (one staged slice when the pattern is dense). All reads
//! happen before the commit.

use dma::{Fabric, FabricAddr, Location};
use ivp::{alu, AddrVec, LaneView, VBool, VecReg, Width};

use super::cost::{PoolCost, Work, CORE_CHANNELS, POOL_CORES};
use super::port::{FabricPort, StagedWrites};
use super::vector::{first_lanes, wide_lanes, Lanes, Pattern, VectorCore, BLOCK, HALF};
use crate::core_state::Outcome;
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::{Indirect, S4d4Ic};

/// Partitions per core, as a lane count.
const CORE: usize = CORE_CHANNELS as usize;

/// One INDIRECT_COPY's geometry.
struct Geometry {
    src: Indirect,
    dst: Pattern,
    /// Elements per index (E).
    per: u32,
    /// Indices per core.
    n: usize,
    /// Outputs per partition (`num_elem`).
    total: usize,
    /// Element bytes.
    size: usize,
    /// Elements per source row (`src_buffer_size`).
    buffer: u32,
}

/// The runs of 16 indices: each lane's byte offset in the source row and its length in
/// elements (0 for an index past the row).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherRequest {
    /// `id * elem_size` per lane (0 where the id is out of range).
    pub offsets: AddrVec,
    /// Elements of the run inside the source row, per lane.
    pub lens: VecReg,
}

/// `send_gather_request`: the vector bounds check of 16 u32 ids against a source row of
/// `buffer` elements, runs of `per` elements of `size` bytes, lanes `live` (module docs).
pub fn send_gather_request(
    ids: &VecReg,
    live: u16,
    per: u32,
    buffer: u32,
    size: u32,
) -> GatherRequest {
    let bound = alu::movva32(buffer);
    let live = VBool::from_lanes(LaneView::N2x32, u64::from(live));
    let inside = alu::andb(alu::ltun_2x32(ids, &bound), live);
    let end = alu::subn_2x32(ids, &alu::movva32(per.wrapping_neg()));
    let full = alu::leun_2x32(&end, &bound);
    let avail = alu::subn_2x32(&bound, ids);
    let lens = alu::mov2nx8t(&alu::movva32(per), &avail, full);
    let lens = alu::mov2nx8t(&lens, &VecReg::ZERO, inside);
    let safe = alu::mov2nx8t(ids, &VecReg::ZERO, inside);
    let offsets = alu::mulusan_2x32(&AddrVec::splat(0), &safe, &alu::movva32(size));
    GatherRequest { offsets, lens }
}

/// INDIRECT_COPY: the dispatcher runs the worker on cores 0..8 by core id, then commits.
pub fn pool_indirect_copy(fabric: &mut Fabric, ic: &S4d4Ic) -> Result<(Outcome, PoolCost), Error> {
    let src = ic.src().indirect();
    let total = usize::from(src.num_elem());
    let per = u32::from(ic.src_num_elem_per_idx());
    let geo = Geometry {
        src,
        dst: Pattern::new(FieldPath::new("S4D4_IC", "dst.t"), &ic.dst().tensor()),
        per,
        // Validation proved E is in {1, 2, 4, 8, 16, 32} and divides num_elem.
        n: total / (per.max(1) as usize),
        total,
        size: ic.in_dtype()?.size(),
        buffer: ic.src_buffer_size(),
    };
    let channels = u32::from(ic.header().num_active_channels());
    let mut core = VectorCore::new();
    let mut writes = StagedWrites::with_capacity(geo.total * geo.size * channels as usize);
    for core_id in 0..POOL_CORES as u32 {
        if core_id * CORE_CHANNELS as u32 >= channels {
            continue;
        }
        indirect_copy_worker(&mut core, fabric, &geo, core_id, &mut writes)?;
    }
    writes.commit(fabric)?;
    let bytes = (geo.total * geo.size) as u64;
    let outcome = Outcome {
        bytes_written: bytes * u64::from(channels),
        ..Outcome::default()
    };
    Ok((outcome, cost(&geo)))
}

/// The busiest core's work: its index reads, one request per 16 indices per partition,
/// and its 16 partitions' outputs.
fn cost(geo: &Geometry) -> PoolCost {
    let rows = geo.n.div_ceil(CORE).div_ceil(BLOCK) * CORE;
    let requests = geo.n.div_ceil(HALF) * CORE;
    let work = Work {
        vectors: (rows + requests) as u64,
        bytes: (geo.total * geo.size * CORE) as u64,
    };
    PoolCost::estimate("pool_indirect_copy", POOL_CORES, work)
}

/// Core `core_id`: reads its indices, bounds-checks them, and stages its 16 partitions'
/// outputs into `writes`.
fn indirect_copy_worker(
    core: &mut VectorCore,
    fabric: &Fabric,
    geo: &Geometry,
    core_id: u32,
    writes: &mut StagedWrites,
) -> Result<(), Error> {
    let ids = read_index_block(core, fabric, geo, core_id)?;
    let requests: Vec<GatherRequest> = ids
        .chunks(HALF)
        .map(|chunk| {
            let lanes = std::array::from_fn(|k| chunk.get(k).copied().unwrap_or(0));
            let live = first_lanes(chunk.len()) as u16;
            let ids = VecReg::from_n_2x32(lanes);
            send_gather_request(&ids, live, geo.per, geo.buffer, geo.size as u32)
        })
        .collect();
    let runs = Runs::new(&requests, geo.n);
    let (mut span, mut scratch) = (Vec::new(), Vec::new());
    let out_bytes = geo.total * geo.size;
    for r in 0..CORE as u32 {
        let q = core_id * CORE_CHANNELS as u32 + r;
        let span_at = read_span(fabric, geo, &runs, q, &mut span)?;
        let base = geo.dst.base(fabric.map(), q, geo.size)?;
        if geo.dst.is_dense() {
            let out = writes.push_zeroed(fabric, base, out_bytes)?;
            fill_runs(geo, &runs, (span_at, &span), out)?;
        } else {
            scratch.clear();
            scratch.resize(out_bytes, 0);
            fill_runs(geo, &runs, (span_at, &span), &mut scratch)?;
            write_strided(fabric, geo, base, &scratch, writes)?;
        }
    }
    Ok(())
}

/// Core `core_id`'s `n` indices, column-major: row `r` (partition `Pi + 16c + r`) holds
/// indices `j = 16t + r`, read 32 at a time with the NX16 gather.
fn read_index_block(
    core: &mut VectorCore,
    fabric: &Fabric,
    geo: &Geometry,
    core_id: u32,
) -> Result<Vec<u32>, Error> {
    let at = FieldPath::new("S4D4_IC", "src.i.p.index_addr");
    let mut ids = vec![0u32; geo.n];
    for r in 0..CORE {
        let count = geo.n.saturating_sub(r).div_ceil(CORE);
        if count == 0 {
            continue;
        }
        let k = core_id * CORE_CHANNELS as u32 + r as u32;
        let row = partition_addr(fabric, at, geo.src.index_addr(), k, 0)?;
        let mut port = FabricPort::new(fabric);
        port.stage(row, 2 * count as u64)?;
        for first in (0..count).step_by(BLOCK) {
            let lanes = Lanes {
                base: row.0,
                offs: std::array::from_fn(|i| (first + i) as u32),
                live: first_lanes(count - first),
            };
            let got = wide_lanes(&core.gather(&port, Width::Nx16, &lanes));
            for (t, &id) in (first..count).zip(&got) {
                if let Some(slot) = ids.get_mut(CORE * t + r) {
                    *slot = id;
                }
            }
        }
    }
    Ok(ids)
}

/// The fabric address of byte `offset` past `addr`'s offset, in partition
/// `addr's partition + k`.
fn partition_addr(
    fabric: &Fabric,
    at: FieldPath,
    addr: dma::Addr4,
    k: u32,
    offset: u64,
) -> Result<FabricAddr, Error> {
    let (space, partition, base) = addr.decode().map_err(dma_at(at))?;
    let loc = Location {
        space,
        partition: partition.saturating_add(k),
        offset: u64::from(base).saturating_add(offset),
    };
    fabric.map().fabric_addr(loc).map_err(dma_at(at))
}

/// The runs of a core's indices in index order, as byte ranges of the source row, and
/// the byte span `[lo, hi)` they touch together.
struct Runs {
    /// `(byte offset in the source row, bytes)` per index.
    runs: Vec<(u64, u64)>,
    lo: u64,
    hi: u64,
}

impl Runs {
    /// Unpacks the requests of `n` indices.
    fn new(requests: &[GatherRequest], n: usize) -> Runs {
        let mut runs = Vec::with_capacity(n);
        for req in requests {
            let (offs, lens) = (req.offsets.lanes(), req.lens.n_2x32());
            runs.extend(offs.into_iter().zip(lens).map(|(o, l)| (o, u64::from(l))));
        }
        runs.truncate(n);
        let (lo, hi) = runs
            .iter()
            .filter(|r| r.1 > 0)
            .fold((u64::MAX, 0), |(lo, hi), &(o, _)| (lo.min(o), hi.max(o)));
        Runs { runs, lo, hi }
    }
}

/// Reads into `span` the bytes of partition `q`'s source row that the runs touch, and
/// returns the span's fabric address (the span is empty when no run is).
fn read_span(
    fabric: &Fabric,
    geo: &Geometry,
    runs: &Runs,
    q: u32,
    span: &mut Vec<u8>,
) -> Result<u64, Error> {
    span.clear();
    if runs.lo > runs.hi {
        return Ok(0);
    }
    let size = geo.size as u64;
    // The span covers every run: the last one starts at `hi` and holds at most E elements,
    // clipped to the source row, which validation put on the fabric.
    let end = (runs.hi + u64::from(geo.per) * size).min(u64::from(geo.buffer) * size);
    let at = FieldPath::new("S4D4_IC", "src.i.p.data_addr");
    let start = partition_addr(fabric, at, geo.src.data_addr(), q, runs.lo)?;
    span.resize((end - runs.lo) as usize, 0);
    fabric.read(start, span)?;
    Ok(start.0)
}

/// Copies every run from the source span (at fabric address `span_at`) to `j * E` of
/// the zeroed output `out`: the clipped tail and empty runs stay 0.
fn fill_runs(
    geo: &Geometry,
    runs: &Runs,
    (span_at, span): (u64, &[u8]),
    out: &mut [u8],
) -> Result<(), Error> {
    let size = geo.size as u64;
    let run_bytes = geo.per as usize * geo.size;
    for (j, &(off, len)) in runs.runs.iter().enumerate().filter(|(_, r)| r.1 > 0) {
        // A non-empty run starts at or after `lo`.
        let from = (off - runs.lo) as usize;
        let bytes = (len * size) as usize;
        let to = j * run_bytes;
        let (Some(dst), Some(src)) = (out.get_mut(to..to + bytes), span.get(from..from + bytes))
        else {
            return Err(outside(span_at + from as u64, bytes));
        };
        dst.copy_from_slice(src);
    }
    Ok(())
}

/// Stages partition `q`'s output (at `base`, the lowest dst element) into a strided dst
/// TENSOR4D, element order.
fn write_strided(
    fabric: &Fabric,
    geo: &Geometry,
    base: FabricAddr,
    out: &[u8],
    writes: &mut StagedWrites,
) -> Result<(), Error> {
    let size = geo.size;
    let span = geo.dst.span_bytes(size);
    let mut port = FabricPort::new(fabric);
    port.stage(base, span)?;
    let staged = port
        .staged_mut(base, span as usize)
        .ok_or_else(|| outside(base.0, span as usize))?;
    for (&o, value) in geo.dst.offsets().iter().zip(out.chunks_exact(size)) {
        let at = o as usize * size;
        let slot = staged
            .get_mut(at..at + size)
            .ok_or_else(|| outside(base.0 + at as u64, size))?;
        slot.copy_from_slice(value);
    }
    writes.append(port.into_writes());
    Ok(())
}

/// A byte range the worker did not stage: the plan should have covered it.
fn outside(addr: u64, len: usize) -> Error {
    Error::PoolStaging {
        kernel: "pool_indirect_copy",
        addr,
        len: len as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::indirect_copy::{copy, indices, rows, DST};
    use super::super::test_support::*;
    use super::*;
    use crate::core_state::CoreState;
    use proptest::prelude::*;

    crate::test_support::indirect_copy::indirect_copy_cases!(route());

    #[test]
    fn send_gather_request_clips_runs_at_the_buffer_end() {
        let ids = VecReg::from_n_2x32(std::array::from_fn(|k| [0, 6, 8, 9, 10, 70_000][k % 6]));
        let r = send_gather_request(&ids, 0x3f, 4, 10, 2);
        assert_eq!(r.lens.n_2x32()[..6], [4, 4, 2, 1, 0, 0]);
        assert_eq!(r.offsets.lanes()[..6], [0, 12, 16, 18, 0, 0]);
        // dead lanes have no run
        assert_eq!(r.lens.n_2x32()[6], 0);
    }

    #[test]
    fn indices_are_read_column_major_per_core() {
        let mut f = fabric();
        rows(&mut f, 16, 64, 20);
        // 20 indices: j = 16t + r, so partition r of the block holds j = r and j = 16 + r
        let ids: Vec<u16> = (0..20).map(|j| (3 * j) % 64).collect();
        indices(&mut f, 32, 0, &ids);
        let (out, cost) = run_cost(&mut f, &mut CoreState::new(), copy(32, 20, 1, 64, 16));
        for q in [0u32, 5, 15] {
            let expect: Vec<u16> = ids.iter().map(|&id| q as u16 * 100 + id).collect();
            assert_eq!(get::<u16>(&f, sbuf_at(q, DST), 20), expect, "partition {q}");
        }
        assert_eq!(out.bytes_written, 16 * 20 * 2);
        assert_eq!((cost.kernel, cost.cores), ("pool_indirect_copy", 8));
        // 16 index rows of one vector each and 2 requests in each of 16 partitions
        assert_eq!((cost.vectors, cost.bytes), (16 + 32, 16 * 40));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        /// One core against the NKI reference: `out[q][j E + t] = src[q][id + t]` or 0.
        #[test]
        fn matches_the_closed_form(
            per in prop::sample::select(vec![1u8, 2, 4, 8, 16, 32]),
            ids in prop::collection::vec(0u16..80, 1..40),
            size in 1u32..64,
        ) {
            let mut f = fabric();
            let total = ids.len() * usize::from(per);
            rows(&mut f, 16, 64, total);
            indices(&mut f, 0, 0, &ids);
            run(&mut f, &mut CoreState::new(), copy(0, total as u16, per, size, 16));
            for q in [0u16, 11] {
                let expect: Vec<u16> = ids
                    .iter()
                    .flat_map(|&id| (0..u16::from(per)).map(move |t| (id, t)))
                    .map(|(id, t)| {
                        let e = u32::from(id + t);
                        if e < size.min(64) { 100 * q + id + t } else { 0 }
                    })
                    .collect();
                prop_assert_eq!(get::<u16>(&f, sbuf_at(q.into(), DST), total), expect);
            }
        }
    }
}
