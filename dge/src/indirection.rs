//! The indirection stages of the DGE pipeline (seed 000 section 6): [`IndirectionInfo`],
//! [`make_gather_pattern`], [`gather_indices`] and [`do_indirection`].
//!
//! Indices are `u32` (the DGE replaces the index-read step with `sizeof(uint32_t)`). They
//! are read 16 lanes at a time through the IVP SuperGather core (`gatheran_2x32t` then
//! `gatherdn_2x32`) from a [`fabric_window`] port over the index tensor, predicated by the
//! gather pattern's lane mask. Each index then becomes an address with the unsigned-index x
//! signed-step 64-bit MAC `mulusan_2x32`, and its bound check is the unsigned compare
//! `ltun_2x32(index, idx_max)`.

use crate::error::Error;
use crate::reshape::INDEX_READ_STEP;
use crate::runs::IndexedBases;
use dma::fabric::Fabric;
use dma::FabricAddr;
use ivp::{alu, AddrVec, Gr, LaneView, MemPort, MemTable, SuperGather, VBool, VecReg, Width};
use tracing::debug;

/// The most indices one DGE instruction takes.
pub const MAX_INDICES: u32 = 4096;
/// Lanes per index vector (N_2X32).
pub const LANES: usize = 16;

/// What an index that fails its bound check does.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OobPolicy {
    /// The whole request fails, naming the index position, value and bound.
    HardError,
    /// The index moves no bytes; it is counted, listed and notified.
    SoftSkip,
    /// As [`OobPolicy::SoftSkip`] with the notification disabled
    /// (`bc_disable_oob_error_notif`).
    SoftSkipSilent,
}

/// One side's indirection: the index tensor and how indices become addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Indirection {
    /// The pattern dimension the indices replace (its count is the index count).
    pub dim: usize,
    /// Fabric address of the `u32` index tensor.
    pub indices: FabricAddr,
    /// Bytes between consecutive index values' targets (`indirection_step`).
    pub step: i32,
    /// Exclusive upper bound on index values (`srx_idx_max` / `dst_idx_max`); `None` when
    /// the bound-check register is disabled.
    pub bound: Option<u64>,
    /// What an index at or past the bound does.
    pub policy: OobPolicy,
}

/// The `IndirectionInfo` of one side, as the firmware constructs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectionInfo {
    pub side: &'static str,
    pub ind: Indirection,
    /// Number of indices (the indirection dimension's count).
    pub count: u32,
}

impl IndirectionInfo {
    /// Stage 1: records the index tensor's location and count.
    pub fn new(side: &'static str, ind: Indirection, count: u32) -> IndirectionInfo {
        debug!(side, indices = %ind.indices, count, "IndirectionInfo constructor");
        IndirectionInfo { side, ind, count }
    }
}

/// The index-read pattern and its in-bounds lane mask (`make_gather_pattern`'s output).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GatherPattern {
    /// Address of index 0.
    pub base: FabricAddr,
    /// Index count.
    pub count: u32,
    /// Bytes between consecutive indices as the memory port sees them (4).
    pub step_port: i64,
    /// The same step in 16-bit half-words (2).
    pub step_half: i64,
    /// Lanes of the last vector that hold an index (all 16 lanes of the earlier ones).
    pub last_mask: u16,
}

impl GatherPattern {
    /// Number of 16-lane vectors needed.
    pub fn vectors(&self) -> usize {
        (self.count as usize).div_ceil(LANES)
    }

    /// The lane mask of vector `v`.
    pub fn mask(&self, v: usize) -> u16 {
        if v + 1 == self.vectors() {
            self.last_mask
        } else {
            0xffff
        }
    }
}

/// Stage 4: builds the index-read pattern and in-bounds mask for `info`.
pub fn make_gather_pattern(
    info: &IndirectionInfo,
    reshape_kind: u8,
    eng_mask: u16,
) -> GatherPattern {
    let rem = info.count as usize % LANES;
    let last_mask = if rem == 0 { 0xffff } else { (1u16 << rem) - 1 };
    let p = GatherPattern {
        base: info.ind.indices,
        count: info.count,
        step_port: INDEX_READ_STEP,
        step_half: INDEX_READ_STEP / 2,
        last_mask,
    };
    debug!(
        side = info.side,
        reshape_kind,
        step_port = p.step_port,
        step_half = p.step_half,
        eng_mask = format_args!("{eng_mask:#x}"),
        "make_gather_pattern START"
    );
    p
}

/// Reads `[base, base + len)` of the fabric once, through its bounds-checked path, into a
/// memory port over exactly that window (for the DGE, the index tensor): lanes outside it
/// are refused by the port and drain as dead.
pub fn fabric_window(fabric: &Fabric, base: FabricAddr, len: u64) -> Result<MemTable, Error> {
    let n = usize::try_from(len).map_err(|_| dma::Error::AddressOverflow { addr: base.0, len })?;
    let mut bytes = vec![0u8; n];
    fabric.read(base, &mut bytes)?;
    Ok(MemTable::window_at(base.0, bytes))
}

/// Stage 5: reads the indices of vector `v` through the IVP gather, predicated by the
/// pattern's mask: disabled lanes drain as 0.
pub fn gather_indices<P: MemPort>(
    core: &mut SuperGather,
    port: &P,
    p: &GatherPattern,
    v: usize,
) -> (VecReg, u16) {
    let mask = p.mask(v);
    let first = (v * LANES) as u32;
    let offsets = VecReg::from_n_2x32(std::array::from_fn(|k| first + k as u32));
    let vb = VBool::from_lanes(LaneView::N2x32, u64::from(mask));
    debug!(indices = %p.base, pattern = v, mask = format_args!("{mask:#x}"), "gather_indices START");
    (
        core.gather_t(Gr::GR0, Width::N2x32, p.base.0, &offsets, vb, port),
        mask,
    )
}

/// An index that failed its bound check under a soft policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SkippedIndex {
    pub side: &'static str,
    pub position: u32,
    pub value: u32,
}

/// `do_indirection`'s result for one side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Indexed {
    /// Per-position base addresses and bound-check results.
    pub bases: IndexedBases,
    /// The index values as gathered.
    pub values: Vec<u32>,
    /// Positions that failed the bound check (soft policies only).
    pub skipped: Vec<SkippedIndex>,
}

/// The bytes a row spans around its base (the pattern's dimensions other than the
/// indirection dimension): `[lo, hi_end)` inside each partition it touches, and the byte
/// offsets `[first, last]` of its first and last partition (`0, 0` off SBUF/PSUM or
/// without a partition dimension).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowExtent {
    pub lo: i64,
    pub hi_end: i64,
    pub partitions: (i64, i64),
}

/// Stage 6: gathers every index, checks it against the bound (`ltun_2x32`), replaces
/// failing lanes by 0 with the predicated select (`mov2nx8t`) and turns the rest into
/// addresses with the 64-bit MAC `start + index * step` (`mulusan_2x32`). A hard-policy
/// failure, or an in-bound index whose row leaves the fabric, fails the whole request.
pub fn do_indirection<P: MemPort>(
    port: &P,
    map: &dma::AddressMap,
    info: &IndirectionInfo,
    pattern: &GatherPattern,
    start: u64,
    row: RowExtent,
) -> Result<Indexed, Error> {
    let mut core = SuperGather::new();
    let n = info.count as usize;
    let mut out = Indexed {
        bases: IndexedBases {
            addrs: Vec::with_capacity(n),
            valid: Vec::with_capacity(n),
        },
        values: Vec::with_capacity(n),
        skipped: Vec::new(),
    };
    let mut extremes = Extremes::default();
    for v in 0..pattern.vectors() {
        let (idx, mask) = gather_indices(&mut core, port, pattern, v);
        let (addrs, valid) = index_addresses(info, &idx, mask, start, v)?;
        for k in (0..LANES).filter(|k| mask >> k & 1 == 1) {
            let position = (v * LANES + k) as u32;
            let value = idx.n_2x32()[k];
            let ok = valid >> k & 1 == 1;
            if ok {
                extremes.see(position, value, addrs.lanes()[k]);
            } else {
                reject(info, position, value, &mut out.skipped)?;
            }
            out.bases.addrs.push(addrs.lanes()[k]);
            out.bases.valid.push(ok);
            out.values.push(value);
        }
    }
    check_rows(map, info, &out, extremes, row)?;
    Ok(out)
}

/// One vector of indices: the in-bound lanes (`ltun_2x32` against the bound, within the
/// pattern mask), the failing lanes replaced by 0 (`mov2nx8t`), and the 64-bit addresses
/// `start + index * step` (`mulusan_2x32`). An address past 64 bits names its position.
fn index_addresses(
    info: &IndirectionInfo,
    idx: &VecReg,
    mask: u16,
    start: u64,
    v: usize,
) -> Result<(AddrVec, u16), Error> {
    let valid = lane_bounds(idx, info.ind.bound).lane_mask(LaneView::N2x32) as u16 & mask;
    let safe = alu::mov2nx8t(
        idx,
        &VecReg::ZERO,
        VBool::from_lanes(LaneView::N2x32, u64::from(valid)),
    );
    debug!(
        dim = info.ind.dim,
        last_indices = format_args!("{:#x}", idx.n_2x32()[0]),
        indirection_step = format_args!("{:#x}", info.ind.step),
        "do_indirection START"
    );
    let step = alu::movva32(info.ind.step as u32);
    let addrs = alu::checked_mulusan_2x32(&AddrVec::splat(start), &safe, &step).map_err(|e| {
        let lane = match e {
            ivp::Error::AddressOverflow { lane, .. } => lane,
            _ => 0,
        };
        Error::IndexOverflow {
            side: info.side,
            position: (v * LANES + lane) as u32,
            step: info.ind.step,
        }
    })?;
    debug!(
        address = format_args!("{:#x}", addrs.lanes()[0]),
        "After IVP_MULUSAN_2X32"
    );
    Ok((addrs, valid))
}

/// The valid positions with the lowest and highest address.
#[derive(Clone, Copy, Default)]
struct Extremes {
    lo: Option<(u32, u32, u64)>,
    hi: Option<(u32, u32, u64)>,
}

impl Extremes {
    fn see(&mut self, position: u32, value: u32, addr: u64) {
        if self.lo.is_none_or(|l| addr < l.2) {
            self.lo = Some((position, value, addr));
        }
        if self.hi.is_none_or(|h| addr > h.2) {
            self.hi = Some((position, value, addr));
        }
    }
}

/// Every valid row must be on the fabric. Rows lie between the lowest and the highest
/// address, so when those two rows are on the fabric in one region, all rows are (a
/// region is contiguous); otherwise each row is checked and the first failure named.
fn check_rows(
    map: &dma::AddressMap,
    info: &IndirectionInfo,
    ix: &Indexed,
    e: Extremes,
    row: RowExtent,
) -> Result<(), Error> {
    let (Some(lo), Some(hi)) = (e.lo, e.hi) else {
        return Ok(());
    };
    let same_region = map.region_of(FabricAddr(lo.2)).ok() == map.region_of(FabricAddr(hi.2)).ok();
    let ends = check_row(map, info, lo.0, lo.1, lo.2, row)
        .and(check_row(map, info, hi.0, hi.1, hi.2, row));
    if same_region && ends.is_ok() {
        return Ok(());
    }
    let rows = ix
        .bases
        .addrs
        .iter()
        .zip(&ix.bases.valid)
        .zip(&ix.values)
        .enumerate();
    for (pos, ((&addr, _), &value)) in rows.filter(|(_, ((_, &ok), _))| ok) {
        check_row(map, info, pos as u32, value, addr, row)?;
    }
    Ok(())
}

/// The in-bound lanes: `index < bound` (unsigned), every lane when the check is disabled
/// or the bound is past the 32-bit index range.
fn lane_bounds(idx: &VecReg, bound: Option<u64>) -> VBool {
    match bound.map(u32::try_from) {
        Some(Ok(b)) => alu::ltun_2x32(idx, &alu::movva32(b)),
        _ => VBool::from_lanes(LaneView::N2x32, 0xffff),
    }
}

fn reject(
    info: &IndirectionInfo,
    position: u32,
    value: u32,
    skipped: &mut Vec<SkippedIndex>,
) -> Result<(), Error> {
    if info.ind.policy == OobPolicy::HardError {
        return Err(Error::IndexOutOfBounds {
            side: info.side,
            position,
            value,
            bound: info.ind.bound.unwrap_or(0),
        });
    }
    skipped.push(SkippedIndex {
        side: info.side,
        position,
        value,
    });
    Ok(())
}

/// The row at `base` must be on the fabric: its box inside its first and its last
/// partition (every partition between them then exists too and holds the same box).
fn check_row(
    map: &dma::AddressMap,
    info: &IndirectionInfo,
    position: u32,
    value: u32,
    base: u64,
    row: RowExtent,
) -> Result<(), Error> {
    let len = u64::try_from(row.hi_end - row.lo).ok();
    let fits = |partition: i64| {
        let first = base
            .checked_add_signed(partition)
            .and_then(|a| a.checked_add_signed(row.lo));
        matches!((first, len), (Some(f), Some(l)) if map.check_range(FabricAddr(f), l).is_ok())
    };
    if fits(row.partitions.0) && fits(row.partitions.1) {
        return Ok(());
    }
    Err(Error::IndexOffFabric {
        side: info.side,
        position,
        value,
        addr: base,
    })
}
