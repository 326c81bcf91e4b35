//! The indirection stages of the DGE pipeline (seed 000 section 6): [`IndirectionInfo`],
//! [`make_gather_pattern`], [`read_indices`] and [`do_indirection`].
//!
//! Indices are read through the IVP SuperGather core ([`crate::index`]): u32 indices with
//! `gatheran_2x32t` (the DGE's own `sizeof(uint32_t)` step), u8 and u16 ones with the NX8U
//! and NX16 gathers, contiguous or through an index pattern, and widened to u32 lanes.
//! Each vector of 16 indices then has its bias subtracted (`subn_2x32`), is bound-checked
//! with the unsigned compare `ltun_2x32(index, idx_max)`, has its failing lanes replaced
//! by 0 with the predicated select (`mov2nx8t`), and becomes addresses with the
//! unsigned-index x signed-step 64-bit MAC `start + index * step` (`mulusan_2x32`).
//!
//! With TRACE off, the indices are read straight from the fabric
//! ([`crate::index::IndexPort::values`]), and a side whose indices are all in bounds (no
//! fill, no address past 64 bits) is built whole: the values and addresses the vectors
//! give, without them (proptests hold the two forms equal). With TRACE on, the vectors
//! run, so that their stages show.
//!
//! # Faults
//!
//! [`do_indirection`] does not stop at an error: it records the side's first failing
//! position ([`Fault`]: a hard-policy index at or past its bound, an address past 64 bits,
//! or an in-bound index whose row leaves the fabric), so that the request can report the
//! first failure in position order over both sides.

use crate::error::Error;
use crate::index::{gather_contiguous, gather_indices, IndexAddrs, IndexLayout};
use crate::runs::{IndexedBases, RowFill};
use dma::FabricAddr;
use ivp::{alu, AddrVec, LaneView, MemPort, SuperGather, VBool, VecReg, Width};
use tracing::trace;

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
    /// Source side only: the destination elements of an index at or past the bound are
    /// written with `value` (FILL descriptors; GATHER's IMMEDIATE_WRITE), and so are the
    /// elements of an in-bound row that lie at or past `start + bound * step` (the end of
    /// the indexed buffer: INDIRECT_COPY's runs clipped at the source buffer end). The fill
    /// is written whatever the compute op. Nothing is listed or notified.
    Fill { value: u32 },
}

/// One side's indirection: the index tensor and how indices become addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Indirection {
    /// The pattern dimension the indices replace (its count is the index count).
    pub dim: usize,
    /// Fabric address of index 0 (the layout is the request's `src_index` /
    /// `dst_index`: u32 contiguous unless it says otherwise).
    pub indices: FabricAddr,
    /// Bytes between consecutive index values' targets (`indirection_step`).
    pub step: i32,
    /// Exclusive upper bound on (biased) index values (`srx_idx_max` / `dst_idx_max`);
    /// `None` when the bound-check register is disabled.
    pub bound: Option<u64>,
    /// What an index at or past the bound does.
    pub policy: OobPolicy,
}

/// The `IndirectionInfo` of one side, as the firmware constructs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndirectionInfo {
    pub side: &'static str,
    pub ind: Indirection,
    /// How the index tensor is laid out and biased.
    pub layout: IndexLayout,
    /// Number of indices (the indirection dimension's count).
    pub count: u32,
}

impl IndirectionInfo {
    /// Stage 1: records the index tensor's location, layout and count.
    pub fn new(
        side: &'static str,
        ind: Indirection,
        layout: IndexLayout,
        count: u32,
    ) -> IndirectionInfo {
        trace!(side, indices = %ind.indices, count, dtype = ?layout.dtype, bias = layout.bias,
            "IndirectionInfo constructor");
        IndirectionInfo {
            side,
            ind,
            layout,
            count,
        }
    }
}

/// The index-read pattern (`make_gather_pattern`'s output): the gather width and where
/// every index lies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GatherPattern {
    pub width: Width,
    /// The indices' addresses, in position order.
    pub addrs: IndexAddrs,
}

impl GatherPattern {
    /// Number of gather vectors needed.
    pub fn vectors(&self) -> usize {
        self.addrs.len().div_ceil(self.width.lanes())
    }
}

/// Stage 4: the index-read pattern of `info`: its gather width and index addresses.
pub fn make_gather_pattern(
    info: &IndirectionInfo,
    reshape_kind: u8,
    eng_mask: u16,
) -> Result<GatherPattern, Error> {
    let addrs = info
        .layout
        .locate(info.side, info.ind.indices.0, info.count)?;
    let width = info.layout.dtype.width();
    trace!(
        side = info.side,
        reshape_kind,
        width = ?width,
        step_port = info.layout.dtype.size(),
        patterned = info.layout.pattern.is_some(),
        eng_mask = format_args!("{eng_mask:#x}"),
        "make_gather_pattern START"
    );
    Ok(GatherPattern { width, addrs })
}

/// Stage 5: reads every index of `pattern` through the IVP gather, one vector (16 u32
/// lanes, 32 u8/u16 ones) at a time; lanes the port refuses drain as 0. Contiguous
/// indices take one gather per vector with offsets `0, 1, 2, ...`.
pub fn read_indices<P: MemPort>(port: &P, pattern: &GatherPattern) -> Vec<u32> {
    let mut core = SuperGather::new();
    let mut out = Vec::with_capacity(pattern.addrs.len());
    let lanes = pattern.width.lanes();
    match &pattern.addrs {
        IndexAddrs::Listed(addrs) => {
            for (v, addrs) in addrs.chunks(lanes).enumerate() {
                trace!(pattern = v, lanes = addrs.len(), "gather_indices START");
                gather_indices(&mut core, port, pattern.width, addrs, &mut out);
            }
        }
        &IndexAddrs::Contiguous { base, count } => {
            let stride = pattern.width.elem_sz().bytes() * lanes as u64;
            let (mut at, mut left) = (base, count as usize);
            for v in 0..pattern.vectors() {
                let n = left.min(lanes);
                trace!(pattern = v, lanes = n, "gather_indices START");
                gather_contiguous(&mut core, port, pattern.width, at, n, &mut out);
                // locate() proved the last index ends inside 64 bits; past it nothing is read.
                at = at.saturating_add(stride);
                left -= n;
            }
        }
    }
    out
}

/// An index that failed its bound check under a soft policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SkippedIndex {
    pub side: &'static str,
    pub position: u32,
    pub value: u32,
}

/// A side's first failing position and its error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    pub position: u32,
    pub error: Error,
}

/// `do_indirection`'s result for one side.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Indexed {
    /// Per-position base addresses and bound-check results (positions before the fault).
    pub bases: IndexedBases,
    /// The index values as gathered (unbiased).
    pub values: Vec<u32>,
    /// Positions that failed the bound check (skip policies only).
    pub skipped: Vec<SkippedIndex>,
    /// The first failing position, if any (then the request fails).
    pub fault: Option<Fault>,
}

/// The bytes a row spans around its base (the pattern's dimensions other than the
/// indirection dimension): `[lo, hi_end)` inside each partition it touches, and the byte
/// offsets `[first, last]` of its first and last partition (`0, 0` off SBUF/PSUM or
/// without a partition dimension). `run_elems` is the length of a row's contiguous run
/// of `elem_size`-byte elements (what the fill policy clips).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowExtent {
    pub lo: i64,
    pub hi_end: i64,
    pub partitions: (i64, i64),
    pub run_elems: u64,
    pub elem_size: u32,
}

/// Stage 6: bound-checks, biases and addresses every index of `values` (module docs).
/// Stops at the first hard-policy or overflow failure, then checks that every valid row
/// before it is on the fabric; the earliest failure is the side's [`Fault`].
pub fn do_indirection(
    map: &dma::AddressMap,
    info: &IndirectionInfo,
    values: &[u32],
    start: u64,
    row: RowExtent,
) -> Indexed {
    let (mut out, extremes) =
        all_in_bounds(info, values, start).unwrap_or_else(|| by_vectors(info, values, start, row));
    if let Some(fault) = check_rows(map, info, &out, extremes, row) {
        out.fault = Some(fault);
    }
    out.bases.span = extremes;
    out
}

/// [`do_indirection`]'s side when every index is in bounds, no address leaves 64 bits
/// and nothing fills (the common case): every lane of every vector is then valid and
/// holds the wrapping MAC's address, so the side is built whole, without the vectors;
/// `None` otherwise, or with TRACE on (the vectors' stages run, to be shown). Also the
/// lowest and highest address.
fn all_in_bounds(
    info: &IndirectionInfo,
    values: &[u32],
    start: u64,
) -> Option<(Indexed, Option<(u64, u64)>)> {
    let filling = matches!(info.ind.policy, OobPolicy::Fill { .. });
    if filling || tracing::enabled!(tracing::Level::TRACE) {
        return None;
    }
    let (bias, step) = (info.layout.bias, info.ind.step);
    // the bound as `lane_bounds` applies it: none past the 32-bit index range
    let bound = info.ind.bound.and_then(|b| u32::try_from(b).ok());
    let (lo, hi) = values.iter().fold((u32::MAX, 0), |(lo, hi), &v| {
        let b = v.wrapping_sub(bias);
        (lo.min(b), hi.max(b))
    });
    let extremes = match values.is_empty() {
        true => None,
        // the largest index lands furthest from the base whatever the step's sign, so
        // when it stays in 64 bits every index does and the MAC is monotonic
        false => {
            let (a, b) = (
                alu::mulusan(start, lo, step),
                alu::checked_mulusan(start, hi, step)?,
            );
            Some((a.min(b), a.max(b)))
        }
    };
    if bound.is_some_and(|b| hi >= b) {
        return None;
    }
    let addrs = values
        .iter()
        .map(|&v| alu::mulusan(start, v.wrapping_sub(bias), step))
        .collect();
    let bases = IndexedBases {
        addrs,
        valid: vec![true; values.len()],
        fill: None,
        span: None,
    };
    let out = Indexed {
        bases,
        values: values.to_vec(),
        ..Indexed::default()
    };
    Some((out, extremes))
}

/// [`do_indirection`]'s side a vector at a time, up to the first failure: the side and
/// the lowest and highest valid address.
fn by_vectors(
    info: &IndirectionInfo,
    values: &[u32],
    start: u64,
    row: RowExtent,
) -> (Indexed, Option<(u64, u64)>) {
    let n = values.len();
    let fill = match info.ind.policy {
        OobPolicy::Fill { value } => Some(RowFill {
            value,
            moved: Vec::with_capacity(n),
        }),
        _ => None,
    };
    let mut out = Indexed {
        bases: IndexedBases {
            addrs: Vec::with_capacity(n),
            valid: Vec::with_capacity(n),
            fill,
            span: None,
        },
        values: Vec::with_capacity(n),
        ..Indexed::default()
    };
    let mut extremes = None;
    for (v, chunk) in values.chunks(LANES).enumerate() {
        let lanes = index_lanes(info, chunk, start, v);
        let live = lanes.fault.as_ref().map_or(chunk.len(), |f| f.0);
        let live = chunk.get(..live).unwrap_or_default();
        record_vector(&mut out, info, (v, live), &lanes, row);
        extremes = widen(extremes, &lanes, live.len());
        if let Some((lane, error)) = lanes.fault {
            let position = (v * LANES + lane) as u32;
            out.fault = Some(Fault { position, error });
            break;
        }
    }
    (out, extremes)
}

/// Appends vector `v`'s live lanes (`chunk`: the lanes before its fault, if any) to
/// `out`: addresses, bound-check results and values a vector at a time; the skipped
/// positions (soft policies) or the fill shares lane by lane.
fn record_vector(
    out: &mut Indexed,
    info: &IndirectionInfo,
    (v, chunk): (usize, &[u32]),
    lanes: &Lanes,
    row: RowExtent,
) {
    let n = chunk.len();
    let ok = |k: usize| lanes.valid >> k & 1 == 1;
    let addrs = lanes.addrs.lanes();
    // A whole vector with every lane valid as fixed-size copies (a slice of run-time
    // length is a call into memmove).
    match (<&[u32; LANES]>::try_from(chunk), lanes.valid) {
        (Ok(whole), 0xffff) => {
            out.bases.addrs.extend_from_slice(&addrs);
            out.values.extend_from_slice(whole);
            out.bases.valid.extend_from_slice(&[true; LANES]);
        }
        _ => {
            out.bases
                .addrs
                .extend_from_slice(addrs.get(..n).unwrap_or_default());
            out.values.extend_from_slice(chunk);
            out.bases.valid.extend((0..n).map(ok));
        }
    }
    if let Some(f) = &mut out.bases.fill {
        let moved = (0..n).map(|k| moved_elems(info, lanes.biased[k], ok(k), row));
        f.moved.extend(moved);
        return;
    }
    // Under the hard policy a failing lane is the fault, so no live lane is missing.
    let mut missing = lane_mask(n) & !lanes.valid;
    while missing != 0 {
        let k = missing.trailing_zeros() as usize;
        out.skipped.push(SkippedIndex {
            side: info.side,
            position: (v * LANES + k) as u32,
            value: chunk.get(k).copied().unwrap_or(0),
        });
        missing &= missing - 1;
    }
}

/// The mask of the first `n` of a vector's 16 lanes.
fn lane_mask(n: usize) -> u16 {
    match n {
        0..LANES => (1u16 << n) - 1,
        _ => 0xffff,
    }
}

/// One vector of indices after the bound check and the MAC.
struct Lanes {
    biased: [u32; LANES],
    valid: u16,
    addrs: AddrVec,
    /// The first lane that fails the request (hard OOB or address overflow).
    fault: Option<(usize, Error)>,
}

/// Vector `v` of indices (`chunk`, at most 16): the bias subtracted (`subn_2x32`), the
/// in-bound lanes (`ltun_2x32` against the bound, within the lanes present), the failing
/// lanes replaced by 0 (`mov2nx8t`), and the 64-bit addresses `start + index * step`
/// (`mulusan_2x32`).
fn index_lanes(info: &IndirectionInfo, chunk: &[u32], start: u64, v: usize) -> Lanes {
    let mask = lane_mask(chunk.len());
    let idx = VecReg::from_n_2x32(std::array::from_fn(|k| chunk.get(k).copied().unwrap_or(0)));
    let biased = match info.layout.bias {
        0 => idx,
        bias => alu::subn_2x32(&idx, &alu::movva32(bias)),
    };
    let valid = lane_bounds(&biased, info.ind.bound).lane_mask(LaneView::N2x32) as u16 & mask;
    // With all 16 lanes in bounds the select would return `biased` unchanged.
    let safe = match valid {
        0xffff => biased,
        _ => {
            let lane_mask = VBool::from_lanes(LaneView::N2x32, u64::from(valid));
            alu::mov2nx8t(&biased, &VecReg::ZERO, lane_mask)
        }
    };
    trace!(
        dim = info.ind.dim,
        last_indices = format_args!("{:#x}", idx.n_2x32()[0]),
        indirection_step = format_args!("{:#x}", info.ind.step),
        "do_indirection START"
    );
    trace!(
        address = format_args!("{start:#x}"),
        last_indices = format_args!("{:#x}", safe.n_2x32()[0]),
        indirection_step = format_args!("{:#x}", info.ind.step),
        "Before IVP_MULUSAN_2X32"
    );
    let (addrs, overflow) = mac(start, &safe, info.ind.step);
    trace!(
        address = format_args!("{:#x}", addrs.lanes()[0]),
        "After IVP_MULUSAN_2X32"
    );
    let hard = info.ind.policy == OobPolicy::HardError;
    let oob = (hard && mask & !valid != 0).then(|| (mask & !valid).trailing_zeros() as usize);
    let fault = match (oob, overflow) {
        (Some(o), Some(f)) if f < o => Some((f, overflow_error(info, chunk, v, f))),
        (Some(o), _) => Some((o, oob_error(info, chunk, v, o))),
        (None, Some(f)) => Some((f, overflow_error(info, chunk, v, f))),
        (None, None) => None,
    };
    Lanes {
        biased: biased.n_2x32(),
        valid,
        addrs,
        fault,
    }
}

/// `mulusan_2x32` of `start + idx[k] * step` in every lane (`movva32` of the step, the
/// base splatted): the addresses and the first lane that leaves the 64-bit space, if
/// any. The largest index lands furthest from the base whatever the sign of the step, so
/// when it stays in 64 bits every lane does and the wrapping MAC is exact; only otherwise
/// does the checked MAC find the lane.
fn mac(start: u64, idx: &VecReg, step: i32) -> (AddrVec, Option<usize>) {
    let (acc, steps) = (AddrVec::splat(start), alu::movva32(step as u32));
    let top = idx.n_2x32().into_iter().max().unwrap_or(0);
    if alu::checked_mulusan(start, top, step).is_some() {
        return (alu::mulusan_2x32(&acc, idx, &steps), None);
    }
    match alu::checked_mulusan_2x32(&acc, idx, &steps) {
        Ok(a) => (a, None),
        Err(e) => {
            let lane = match e {
                ivp::Error::AddressOverflow { lane, .. } => lane,
                _ => 0,
            };
            (alu::mulusan_2x32(&acc, idx, &steps), Some(lane))
        }
    }
}

fn oob_error(info: &IndirectionInfo, chunk: &[u32], v: usize, lane: usize) -> Error {
    Error::IndexOutOfBounds {
        side: info.side,
        position: (v * LANES + lane) as u32,
        value: chunk.get(lane).copied().unwrap_or(0),
        bound: info.ind.bound.unwrap_or(0),
    }
}

fn overflow_error(info: &IndirectionInfo, chunk: &[u32], v: usize, lane: usize) -> Error {
    Error::IndexOverflow {
        side: info.side,
        position: (v * LANES + lane) as u32,
        value: chunk.get(lane).copied().unwrap_or(0),
        step: info.ind.step,
    }
}

/// Elements of an in-bound row that move under the fill policy: those below
/// `start + bound * step`, i.e. the first `ceil((bound - index) * step / elem_size)` (a
/// one-element row moves whole, whatever the step).
fn moved_elems(info: &IndirectionInfo, biased: u32, ok: bool, row: RowExtent) -> u64 {
    match (ok, info.ind.bound) {
        (false, _) => 0,
        (true, _) if row.run_elems == 1 => 1,
        (true, None) => row.run_elems,
        (true, Some(bound)) => {
            // ok proved biased < bound; generate checked step > 0 for rows of several
            // elements under the fill policy.
            let left = u128::from(bound - u64::from(biased)) * info.ind.step.unsigned_abs() as u128;
            let elems = left.div_ceil(u128::from(row.elem_size.max(1)));
            u64::try_from(elems).map_or(row.run_elems, |e| e.min(row.run_elems))
        }
    }
}

/// `extremes` (the lowest and highest valid address so far) widened by the valid lanes
/// among the first `n` of `lanes`.
fn widen(extremes: Option<(u64, u64)>, lanes: &Lanes, n: usize) -> Option<(u64, u64)> {
    let mask = lane_mask(n) & lanes.valid;
    let addrs = lanes.addrs.lanes();
    let (lo, hi) = match mask {
        0 => return extremes,
        // every lane valid: a plain min / max over the vector
        0xffff => (
            addrs.iter().copied().fold(u64::MAX, u64::min),
            addrs.iter().copied().fold(0, u64::max),
        ),
        _ => (0..LANES)
            .filter(|&k| mask >> k & 1 == 1)
            .filter_map(|k| addrs.get(k).copied())
            .fold((u64::MAX, 0), |(lo, hi), a| (lo.min(a), hi.max(a))),
    };
    Some(extremes.map_or((lo, hi), |(l, h)| (l.min(lo), h.max(hi))))
}

/// Every valid row must be on the fabric. Rows of one length lie between the lowest and
/// the highest address, so when those two rows are on the fabric in one region, all rows
/// are (a region is contiguous); otherwise (or with clipped fill rows) each row is checked
/// and the first failure is the fault.
fn check_rows(
    map: &dma::AddressMap,
    info: &IndirectionInfo,
    ix: &Indexed,
    extremes: Option<(u64, u64)>,
    row: RowExtent,
) -> Option<Fault> {
    let (lo, hi) = extremes?;
    if ix.bases.fill.is_none() {
        let same_region = map.region_of(FabricAddr(lo)).ok() == map.region_of(FabricAddr(hi)).ok();
        if same_region && row_fits(map, lo, row, None) && row_fits(map, hi, row, None) {
            return None;
        }
    }
    let moved = |pos: usize| {
        ix.bases
            .fill
            .as_ref()
            .and_then(|f| f.moved.get(pos).copied())
    };
    let rows = ix.bases.addrs.iter().zip(&ix.bases.valid).zip(&ix.values);
    rows.enumerate()
        .filter(|(_, ((_, &ok), _))| ok)
        .find(|&(pos, ((&addr, _), _))| !row_fits(map, addr, row, moved(pos)))
        .map(|(pos, ((&addr, _), &value))| Fault {
            position: pos as u32,
            error: Error::IndexOffFabric {
                side: info.side,
                position: pos as u32,
                value,
                addr,
            },
        })
}

/// The in-bound lanes: `index < bound` (unsigned), every lane when the check is disabled
/// or the bound is past the 32-bit index range.
fn lane_bounds(idx: &VecReg, bound: Option<u64>) -> VBool {
    match bound.map(u32::try_from) {
        Some(Ok(b)) => alu::ltun_2x32(idx, &alu::movva32(b)),
        _ => VBool::from_lanes(LaneView::N2x32, 0xffff),
    }
}

/// Whether the row at `base` is on the fabric: its box inside its first and its last
/// partition (every partition between them then exists too and holds the same box). A
/// clipped fill row checks only its `moved` leading elements (none: nothing to check).
fn row_fits(map: &dma::AddressMap, base: u64, row: RowExtent, moved: Option<u64>) -> bool {
    let len = match moved {
        Some(0) => return true,
        Some(m) => m.checked_mul(u64::from(row.elem_size)),
        None => u64::try_from(row.hi_end - row.lo).ok(),
    };
    let fits = |partition: i64| {
        let first = base
            .checked_add_signed(partition)
            .and_then(|a| a.checked_add_signed(row.lo));
        matches!((first, len), (Some(f), Some(l)) if map.check_range(FabricAddr(f), l).is_ok())
    };
    fits(row.partitions.0) && fits(row.partitions.1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::IndexDtype;
    use dma::{AddressMap, Generation};
    use proptest::prelude::*;

    fn info(bound: Option<u64>, policy: OobPolicy, bias: u32) -> IndirectionInfo {
        let ind = Indirection {
            dim: 0,
            indices: FabricAddr(0),
            step: 4,
            bound,
            policy,
        };
        let layout = IndexLayout {
            bias,
            ..IndexLayout::contiguous(IndexDtype::U32)
        };
        IndirectionInfo::new("source", ind, layout, 0)
    }

    const ROW: RowExtent = RowExtent {
        lo: 0,
        hi_end: 16,
        partitions: (0, 0),
        run_elems: 4,
        elem_size: 4,
    };

    /// [`do_indirection`] through the vector stages alone (the oracle of its whole form).
    fn modelled(
        map: &AddressMap,
        info: &IndirectionInfo,
        values: &[u32],
        start: u64,
        row: RowExtent,
    ) -> Indexed {
        let (mut out, extremes) = by_vectors(info, values, start, row);
        if let Some(fault) = check_rows(map, info, &out, extremes, row) {
            out.fault = Some(fault);
        }
        out.bases.span = extremes;
        out
    }

    proptest! {
        /// A side built whole is the side the vector stages build: every policy, bounds
        /// around the indices (and none, and past 32 bits), biases, steps of both signs
        /// and bases near the ends of the fabric and of 64 bits.
        #[test]
        fn a_side_built_whole_is_the_side_of_its_vectors(
            values in proptest::collection::vec(prop_oneof![9 => 0u32..40, 1 => any::<u32>()], 0..70),
            // the bound: none, past 32 bits, or just below, at or above the largest index
            bound in prop_oneof![Just(None), Just(Some(1i64 << 33)), (-1i64..=1).prop_map(|d| Some(-d))],
            bias in prop_oneof![Just(0u32), 0u32..8],
            step in prop_oneof![Just(4i32), -64i32..64, any::<i32>()],
            start in prop_oneof![0u64..4096, Just(Generation::Cayman.hbm_bytes() - 64), any::<u64>()],
            policy in prop_oneof![
                Just(OobPolicy::HardError),
                Just(OobPolicy::SoftSkip),
                Just(OobPolicy::SoftSkipSilent),
                Just(OobPolicy::Fill { value: 7 }),
            ],
        ) {
            let map = AddressMap::new(Generation::Cayman);
            let top = values.iter().map(|v| v.wrapping_sub(bias)).max().unwrap_or(0);
            let bound = bound.map(|b| match b {
                d if d.abs() <= 1 => (i64::from(top) + 1 + d).max(0) as u64,
                b => b as u64,
            });
            let mut info = info(bound, policy, bias);
            info.ind.step = step;
            prop_assert_eq!(
                do_indirection(&map, &info, &values, start, ROW),
                modelled(&map, &info, &values, start, ROW)
            );
        }
    }

    #[test]
    fn bias_is_subtracted_before_the_bound_and_the_mac() {
        let map = AddressMap::new(Generation::Cayman);
        let ix = do_indirection(
            &map,
            &info(Some(8), OobPolicy::SoftSkip, 512),
            &[512, 519, 520, 3],
            0x1000,
            ROW,
        );
        assert_eq!(ix.bases.valid, vec![true, true, false, false]);
        assert_eq!(ix.bases.addrs[..2], [0x1000, 0x1000 + 7 * 4]);
        let skipped: Vec<(u32, u32)> = ix.skipped.iter().map(|s| (s.position, s.value)).collect();
        assert_eq!(skipped, vec![(2, 520), (3, 3)]);
        assert_eq!(ix.fault, None);
    }

    #[test]
    fn fill_rows_are_clipped_at_the_buffer_end() {
        // step 4 bytes (one element), rows of 4 elements, buffer of 10 elements
        let map = AddressMap::new(Generation::Cayman);
        let ix = do_indirection(
            &map,
            &info(Some(10), OobPolicy::Fill { value: 0 }, 0),
            &[0, 6, 7, 9, 10, 400],
            0x1000,
            ROW,
        );
        let fill = ix.bases.fill.unwrap();
        assert_eq!(fill.moved, vec![4, 4, 3, 1, 0, 0]);
        assert!(ix.skipped.is_empty() && ix.fault.is_none());
    }

    #[test]
    fn the_earliest_failure_is_the_fault() {
        let map = AddressMap::new(Generation::Cayman);
        let top = Generation::Cayman.hbm_bytes() - 64;
        // position 1's row leaves HBM; position 3 is out of bounds (hard)
        let i = info(Some(1 << 30), OobPolicy::HardError, 0);
        let ix = do_indirection(&map, &i, &[0, 100, 1, 1 << 30], top, ROW);
        let fault = ix.fault.unwrap();
        assert_eq!(fault.position, 1);
        assert!(matches!(
            fault.error,
            Error::IndexOffFabric { value: 100, .. }
        ));
        // with every row on the fabric the hard OOB at position 3 is the fault
        let ix = do_indirection(&map, &i, &[0, 1, 1, 1 << 30, 2], 0, ROW);
        assert_eq!(
            ix.fault.unwrap().error,
            Error::IndexOutOfBounds {
                side: "source",
                position: 3,
                value: 1 << 30,
                bound: 1 << 30
            }
        );
        assert_eq!(
            ix.values,
            vec![0, 1, 1],
            "positions after the fault are not kept"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]
        /// The shortcut MAC (one check at the largest index) gives exactly the checked
        /// per-lane MAC's addresses and first overflowing lane, near both ends of 64 bits.
        #[test]
        fn the_shared_base_mac_equals_the_checked_one(
            start in prop_oneof![any::<u64>(), 0u64..1 << 36, (u64::MAX - (1 << 36))..=u64::MAX],
            idx in proptest::array::uniform16(any::<u32>()),
            step in any::<i32>(),
        ) {
            let idx = VecReg::from_n_2x32(idx);
            let (acc, steps) = (AddrVec::splat(start), alu::movva32(step as u32));
            let first = match alu::checked_mulusan_2x32(&acc, &idx, &steps) {
                Ok(_) => None,
                Err(ivp::Error::AddressOverflow { lane, .. }) => Some(lane),
                Err(e) => panic!("{e:?}"),
            };
            let want = (alu::mulusan_2x32(&acc, &idx, &steps), first);
            prop_assert_eq!(mac(start, &idx, step), want);
        }

        /// Against the closed form: valid iff `(v - bias) < bound` (wrapping), address
        /// `start + (v - bias) * step`, skips listed in order, the first hard OOB the fault.
        #[test]
        fn lanes_match_the_closed_form(
            values in proptest::collection::vec(0u32..40, 1..50),
            bound in 1u64..40,
            bias in 0u32..8,
            hard in any::<bool>(),
        ) {
            let map = AddressMap::new(Generation::Cayman);
            let policy = if hard { OobPolicy::HardError } else { OobPolicy::SoftSkip };
            let ix = do_indirection(&map, &info(Some(bound), policy, bias), &values, 0x1000, ROW);
            let first_oob = values.iter().position(|&v| u64::from(v.wrapping_sub(bias)) >= bound);
            let kept = match (hard, first_oob) { (true, Some(p)) => p, _ => values.len() };
            prop_assert_eq!(ix.values.len(), kept);
            for (k, &v) in values.iter().enumerate().take(kept) {
                let b = v.wrapping_sub(bias);
                prop_assert_eq!(ix.bases.valid[k], u64::from(b) < bound);
                if u64::from(b) < bound {
                    prop_assert_eq!(ix.bases.addrs[k], 0x1000 + u64::from(b) * 4);
                }
            }
            let expect_fault = if hard { first_oob.map(|p| p as u32) } else { None };
            prop_assert_eq!(ix.fault.map(|f| f.position), expect_fault);
            let skips: Vec<u32> = ix.skipped.iter().map(|s| s.position).collect();
            let expect: Vec<u32> = if hard { vec![] } else {
                (0..values.len() as u32).filter(|&k| u64::from(values[k as usize].wrapping_sub(bias)) >= bound).collect()
            };
            prop_assert_eq!(skips, expect);
        }
    }
}
