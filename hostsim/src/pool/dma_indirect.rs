//! DMA_INDIRECT 0xbb (DMA_INDIRECT1D) on the IVP core: `dma_memcopy_indirect`, the
//! index -> address walk of seed 000 sections 4 and 7c, run the way the hardware kernel
//! runs it: 16 positions per N_2X32 vector, each position's fate a lane of a predicate.
//!
//! # One vector of 16 positions
//!
//! Per side:
//! - an indirect side (src in SRC and SRC_DST modes, dst in DST and SRC_DST) reads its
//!   16 u32 indices with the predicated hardware gather (`gatheran_2x32t` +
//!   `gatherdn_2x32`, the live positions enabled, from SBUF partition 0) and builds its
//!   in-bounds predicate from the BOUND_CHECK_REG bound `B` as `leun_2x32(index, B - 1)`
//!   (`B = 0` admits nothing, `B > 2^32` or a disabled register everything);
//!   `mov2nx8t(index, 0, in)` then gives each out-of-bounds lane row 0, so no lane forms
//!   a wild address;
//! - a direct side's rows are the position iota times its `step_elem` (a MAC);
//! - `mulusan_2x32` forms `start + row * elem_size`, and the rows of the admitted lanes
//!   are range-checked on the fabric: those that fail (or pass 2^64) are `wild`.
//!
//! The lane masks then combine: `fault = wild | oob` under `idx_bound_is_err`, else
//! `fault = wild` and `skip = oob` (either side); `move = live & !skip & !fault`.
//!
//! # The first failure
//!
//! The walk stops at the first vector with a fault; the failing position is its lowest
//! fault lane, and at that position the source's fault comes before the destination's
//! (an out-of-bounds index before a wild row). In scatter modes without
//! `non_unique_dst_idx`, the (destination index, position) pairs of the moving positions
//! before it are sorted and neighbours compared with `eqn_2x32`, 16 at a time: the
//! smallest position repeating an earlier destination index comes first, if there is one
//! (a skipped position moves nothing, so it is nobody's duplicate).
//!
//! # Moves
//!
//! With every position decided, the rows move in position order with the compute op
//! over `dtype` (NONE copies; [`move_rows`]): duplicates accumulate or the last copy
//! wins, and a row reads an earlier row's result. Skips are reported in position order,
//! src before dst, with the notification unless the side's register sets
//! `bc_disable_oob_error_notif`.
//!
//! # With a shape register
//!
//! The walk `[outer][n][inner]` (`validate::dma_indirect_walk`, the struct module's
//! semantics) changes three things: the bound is the smaller of the register's and the
//! extent along the dim; the MAC's step is the indirection step, `inner * elem_size`
//! bytes, on both sides (a direct side's rows stay `position * step_elem`); and each
//! moving position expands into its `outer * inner` elements, listed `o`, then position,
//! then `i`, before they move (`outer * extent * inner` and `elem_size` bytes apart on an
//! indexed side, `outer * n * inner` and `step_elem` elements on a direct one). Each lane
//! checks its position's first element on the fabric.
//!
//! reshape_kind GATHER_TRANSPOSE (src indices only, a plain copy, by validation): the
//! destination side walks column heads (one element per position) and each gathered row
//! is written down its column, element `c` one destination row step (`dst_step_elem`
//! elements on HBM, partitions on SBUF/PSUM) further per `c`.

use std::borrow::Cow;

use dma::{Dtype, Fabric, FabricAddr, Space};
use ivp::{alu, AddrVec, Gr, LaneView, SuperGather, VBool, VecReg, Width};

use super::cost::{PoolCost, Work};
use super::port::{move_rows, FabricPort};
use super::vector::{row_addrs, HALF};
use super::{addr4_fabric, lanes_of};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::validate::dma_indirect_walk;
use crate::isa::{BoundRegisters, DmaIndirect1d, DmaSide, IndirectWalk, ReshapeKind};

/// Bytes per index (UINT32).
const INDEX_BYTES: u64 = 4;

/// An indirect side's index tensor as the kernel reads it.
struct IndexTensor {
    base: FabricAddr,
    /// The enabled bound `B`, if any.
    bound: Option<u64>,
    /// Whether a skip raises the notification.
    notify: bool,
}

/// One side as the walk sees it.
struct SideWalk {
    which: IndexSide,
    /// The start field, named by a direct side's address errors.
    start_at: FieldPath,
    start: FabricAddr,
    /// Bytes per row checked on the fabric: `elem_size`, or one element for a transposed
    /// destination.
    unit: u32,
    /// The MAC's step, bytes per row: `unit` times the walk's `inner`.
    stride: u32,
    /// A direct side's rows per position.
    step: u32,
    /// Bytes from one outer point of the walk to the next, and one inner point to the next.
    outer_step: u64,
    inner_step: u64,
    indices: Option<IndexTensor>,
}

/// One side's 16 lanes after the walk.
struct SideLanes {
    index: [u32; HALF],
    addrs: [u64; HALF],
    /// Admitted lanes whose index is at or past the bound.
    oob: u16,
    /// Admitted lanes whose row is off the fabric or past 2^64.
    wild: u16,
    overflow: u16,
}

impl SideWalk {
    /// The side `which` of `d`, whose fields are `side` (`indirect`: it takes indices),
    /// rows of `unit` bytes, on the walk `walk` of `n` positions.
    fn new(
        fabric: &Fabric,
        regs: &BoundRegisters,
        (which, side, indirect): (IndexSide, DmaSide, bool),
        (unit, walk, n): (u32, &IndirectWalk, u16),
    ) -> Result<SideWalk, Error> {
        let (start_field, index_field) = match which {
            IndexSide::Src => ("src_start_addr", "src_idx_start_addr"),
            IndexSide::Dst => ("dst_start_addr", "dst_idx_start_addr"),
        };
        let at = |field| FieldPath::new("DMA_INDIRECT1D", field);
        let indices = match indirect {
            false => None,
            true => Some(IndexTensor {
                base: addr4_fabric(fabric, at(index_field), side.idx_start_addr)?,
                bound: walk.bound(regs.bound(side.bound)?),
                notify: !side.bound.bc_disable_oob_error_notif(),
            }),
        };
        // dma_indirect_walk held inner * elem_size to 32 bits; without a shape inner = 1.
        let stride = u32::try_from(walk.inner.saturating_mul(unit.into())).unwrap_or(u32::MAX);
        let (rows, inner_step) = match indirect {
            true => (walk.extent.map_or(1, u64::from), u64::from(unit)),
            false => (u64::from(n), u64::from(side.step_elem) * u64::from(unit)),
        };
        Ok(SideWalk {
            which,
            start_at: at(start_field),
            start: side.start_addr,
            unit,
            stride,
            step: u32::from(side.step_elem),
            outer_step: rows.saturating_mul(walk.inner).saturating_mul(inner_step),
            inner_step,
            indices,
        })
    }

    /// The element at outer point `o` and inner point `i` of the position whose first
    /// element is `first` (the walk is on the fabric: `dma_indirect_walk` checked it).
    fn element(&self, first: FabricAddr, o: u64, i: u64) -> FabricAddr {
        let off = o
            .saturating_mul(self.outer_step)
            .saturating_add(i.saturating_mul(self.inner_step));
        FabricAddr(first.0.saturating_add(off))
    }

    /// Lanes `live` of positions `first ..= first + 15`.
    fn lanes(
        &self,
        (sg, port): (&mut SuperGather, &FabricPort<'_>),
        fabric: &Fabric,
        first: u32,
        live: u16,
    ) -> SideLanes {
        let iota = VecReg::from_n_2x32(std::array::from_fn(|k| first + k as u32));
        let vb = VBool::from_lanes(LaneView::N2x32, u64::from(live));
        let (index, rows, admitted) = match &self.indices {
            Some(ix) => {
                let gr = if self.which == IndexSide::Src {
                    Gr::GR0
                } else {
                    Gr::GR1
                };
                let index = sg.gather_t(gr, Width::N2x32, ix.base.0, &iota, vb, port);
                let inside = alu::andb(in_bounds(&index, ix.bound), vb);
                let rows = alu::mov2nx8t(&index, &VecReg::ZERO, inside);
                (index, rows, inside)
            }
            None => (VecReg::ZERO, strided_rows(&iota, self.step), vb),
        };
        let (addrs, overflow) = row_addrs(self.start.0, &rows, self.stride);
        let addrs = addrs.lanes();
        let admitted = mask(admitted);
        let off_fabric = (0..HALF).fold(0u16, |m, k| {
            let bad = fabric
                .check(FabricAddr(addrs[k]), self.unit.into())
                .is_err();
            m | (u16::from(bad) << k)
        });
        SideLanes {
            index: index.n_2x32(),
            addrs,
            oob: live & !admitted,
            wild: admitted & (overflow | off_fabric),
            overflow,
        }
    }

    /// The error of lane `lane` (position `k`), which faults on this side.
    fn fault(&self, fabric: &Fabric, v: &SideLanes, (k, lane): (u32, usize)) -> Error {
        let (value, addr, bit) = (v.index[lane], v.addrs[lane], 1u16 << lane);
        let Some(ix) = &self.indices else {
            return dma_at(self.start_at)(self.wild_source(fabric, v, (addr, bit)));
        };
        if v.wild & bit == 0 {
            return Error::IndexOutOfBounds {
                side: self.which,
                position: k,
                value,
                bound: ix.bound.unwrap_or(u64::MAX),
            };
        }
        Error::IndexAddress {
            side: self.which,
            position: k,
            value,
            source: self.wild_source(fabric, v, (addr, bit)),
        }
    }

    /// Why a wild row is wild: past 2^64, or the fabric's range error.
    fn wild_source(&self, fabric: &Fabric, v: &SideLanes, (addr, bit): (u64, u16)) -> dma::Error {
        let len = u64::from(self.unit);
        let overflow = dma::Error::AddressOverflow {
            addr: self.start.0,
            len,
        };
        match v.overflow & bit {
            0 => fabric
                .check(FabricAddr(addr), len)
                .err()
                .unwrap_or(overflow),
            _ => overflow,
        }
    }
}

/// The N_2X32 predicate as a 16-bit lane mask.
fn mask(vb: VBool) -> u16 {
    vb.lane_mask(LaneView::N2x32) as u16
}

/// The lanes an enabled bound `B` admits: `leun_2x32(index, B - 1)`; none for `B = 0`,
/// every lane without a bound or for `B > 2^32`.
fn in_bounds(index: &VecReg, bound: Option<u64>) -> VBool {
    match bound {
        None => VBool::ALL,
        Some(0) => VBool::NONE,
        Some(b) => match u32::try_from(b - 1) {
            Ok(last) => alu::leun_2x32(index, &alu::movva32(last)),
            Err(_) => VBool::ALL,
        },
    }
}

/// A direct side's rows: `position * step` by the MAC (below 2^28: 4096 x 65535).
fn strided_rows(iota: &VecReg, step: u32) -> VecReg {
    let rows = alu::mulusan_2x32(&AddrVec::splat(0), iota, &alu::movva32(step));
    VecReg::from_n_2x32(rows.lanes().map(|r| r as u32))
}

/// The decided instruction: its moves in position order, and its report.
struct Decided {
    moves: Vec<[FabricAddr; 2]>,
    /// (destination index, position) of the moving positions, for the duplicate rule.
    dst_indices: Vec<(u32, u32)>,
    outcome: Outcome,
}

impl Decided {
    /// Records lanes `moving` of the vector at `first`, and the skips of lanes `skip`.
    fn take(
        &mut self,
        first: u32,
        (moving, skip): (u16, u16),
        v: &[SideLanes; 2],
        sides: &[SideWalk; 2],
    ) {
        for lane in lanes_in(moving) {
            self.moves
                .push([FabricAddr(v[0].addrs[lane]), FabricAddr(v[1].addrs[lane])]);
            if sides[1].indices.is_some() {
                self.dst_indices
                    .push((v[1].index[lane], first + lane as u32));
            }
        }
        for lane in lanes_in(skip) {
            for (side, lanes) in sides.iter().zip(v) {
                if lanes.oob >> lane & 1 == 1 {
                    self.outcome.skipped.push(SkippedIndex {
                        side: side.which,
                        position: first + lane as u32,
                        value: lanes.index[lane],
                    });
                }
            }
        }
        for (side, lanes) in sides.iter().zip(v) {
            let notify = side.indices.as_ref().is_some_and(|ix| ix.notify);
            self.outcome.oob_notification |= notify && lanes.oob & skip != 0;
        }
    }
}

/// The set lanes of `mask`, lowest first.
fn lanes_in(mask: u16) -> impl Iterator<Item = usize> {
    (0..HALF).filter(move |&lane| mask >> lane & 1 == 1)
}

/// The first repeated destination index among `pairs` (value, position): sorted, then
/// neighbours compared 16 at a time with `eqn_2x32`; the pair with the smallest second
/// position (always a value's first two uses) names the error.
fn first_duplicate(pairs: &mut [(u32, u32)]) -> Option<Error> {
    pairs.sort_unstable();
    let lane = |at: usize| pairs.get(at).map_or(0, |p| p.0);
    let mut best: Option<(u32, u32, u32)> = None;
    let pairs_to_compare = pairs.len().saturating_sub(1) as u32;
    for at in (0..pairs_to_compare as usize).step_by(HALF) {
        let here = VecReg::from_n_2x32(std::array::from_fn(|k| lane(at + k)));
        let next = VecReg::from_n_2x32(std::array::from_fn(|k| lane(at + k + 1)));
        let live = VBool::from_lanes(
            LaneView::N2x32,
            u64::from(lanes_of(pairs_to_compare - at as u32)),
        );
        for k in lanes_in(mask(alu::andb(alu::eqn_2x32(&here, &next), live))) {
            let (Some(&(value, first)), Some(&(_, second))) =
                (pairs.get(at + k), pairs.get(at + k + 1))
            else {
                continue;
            };
            if best.is_none_or(|b| second < b.0) {
                best = Some((second, first, value));
            }
        }
    }
    best.map(|(second, first, value)| Error::DuplicateDestination {
        value,
        first,
        second,
    })
}

/// Walks both sides 16 positions at a time and decides every position (module docs).
fn decide(fabric: &Fabric, d: &DmaIndirect1d, sides: &[SideWalk; 2]) -> Result<Decided, Error> {
    let flags = d.flags();
    let hard = flags.idx_bound_is_err();
    let unique = sides[1].indices.is_some() && !flags.non_unique_dst_idx();
    let n = u32::from(d.src_num_elem());
    let mut port = FabricPort::new(fabric);
    for ix in sides.iter().filter_map(|s| s.indices.as_ref()) {
        port.stage(ix.base, u64::from(n) * INDEX_BYTES)?;
    }
    let mut sg = SuperGather::new();
    let mut decided = Decided {
        moves: Vec::with_capacity(n as usize),
        dst_indices: Vec::new(),
        outcome: Outcome::default(),
    };
    for first in (0..n).step_by(HALF) {
        let live = lanes_of(n - first);
        let v = sides
            .each_ref()
            .map(|s| s.lanes((&mut sg, &port), fabric, first, live));
        let hard_oob = if hard { v[0].oob | v[1].oob } else { 0 };
        let fault = v[0].wild | v[1].wild | hard_oob;
        // Lanes below the first fault (all lanes when there is none).
        let before = (1u32 << fault.trailing_zeros()).wrapping_sub(1) as u16;
        let skip = (v[0].oob | v[1].oob) & before & live;
        let moving = live & before & !skip;
        decided.take(first, (moving, skip), &v, sides);
        if fault != 0 {
            let lane = fault.trailing_zeros() as usize;
            let on_src = (v[0].wild | if hard { v[0].oob } else { 0 }) >> lane & 1 == 1;
            let side = usize::from(!on_src);
            let e = sides[side].fault(fabric, &v[side], (first + lane as u32, lane));
            let dup = if unique {
                first_duplicate(&mut decided.dst_indices)
            } else {
                None
            };
            return Err(dup.unwrap_or(e));
        }
    }
    if unique {
        if let Some(e) = first_duplicate(&mut decided.dst_indices) {
            return Err(e);
        }
    }
    Ok(decided)
}

/// DMA_INDIRECT: walks and decides every position, then moves the rows in order.
pub fn dma_memcopy_indirect(
    fabric: &mut Fabric,
    regs: &BoundRegisters,
    d: &DmaIndirect1d,
) -> Result<(Outcome, PoolCost), Error> {
    let (dtype, op, kind) = (d.dtype()?, d.compute_op()?, d.reshape_kind()?);
    let (mode, size) = (d.flags().indirect_mode()?, d.src_elem_size());
    let walk = dma_indirect_walk(fabric.map(), regs, d)?;
    let dst_unit = match kind {
        ReshapeKind::Rows => size,
        ReshapeKind::GatherTranspose => dtype.size() as u32,
    };
    let mut dst = d.dst();
    if kind == ReshapeKind::GatherTranspose {
        // The destination walks column heads: one element per position.
        dst.step_elem = 1;
    }
    let n = d.src_num_elem();
    let sides = [
        SideWalk::new(
            fabric,
            regs,
            (IndexSide::Src, d.src(), mode.gathers()),
            (size, &walk, n),
        )?,
        SideWalk::new(
            fabric,
            regs,
            (IndexSide::Dst, dst, mode.scatters()),
            (dst_unit, &walk, n),
        )?,
    ];
    let decided = decide(fabric, d, &sides)?;
    match kind {
        ReshapeKind::Rows => {
            let moves = walk_elements(&decided.moves, &sides, &walk);
            move_rows(fabric, &moves, size.into(), dtype, op)?
        }
        ReshapeKind::GatherTranspose => write_columns(fabric, &decided.moves, d, dtype)?,
    }
    let indirect = sides.iter().filter(|s| s.indices.is_some()).count() as u64;
    let elements = decided.moves.len() as u64 * walk.per_position();
    let moved = elements * u64::from(size);
    let work = Work {
        vectors: u64::from(n).div_ceil(HALF as u64) * indirect.max(1),
        bytes: moved,
    };
    let mut outcome = decided.outcome;
    outcome.bytes_written = moved;
    Ok((outcome, PoolCost::estimate("dma_memcopy_indirect", 1, work)))
}

/// The elements of the moving positions `moves` (each position's first elements), in
/// walk order: outer point `o`, then position, then inner point `i`.
fn walk_elements<'m>(
    moves: &'m [[FabricAddr; 2]],
    [src, dst]: &[SideWalk; 2],
    walk: &IndirectWalk,
) -> Cow<'m, [[FabricAddr; 2]]> {
    if walk.per_position() == 1 {
        return Cow::Borrowed(moves);
    }
    // dma_indirect_walk held outer * n * inner to 2^20 elements.
    let mut out = Vec::with_capacity(moves.len() * walk.per_position() as usize);
    for o in 0..walk.outer {
        for &[from, to] in moves {
            out.extend((0..walk.inner).map(|i| [src.element(from, o, i), dst.element(to, o, i)]));
        }
    }
    Cow::Owned(out)
}

/// GATHER_TRANSPOSE: each gathered row written down its column, element `c` at the
/// column head plus `c` destination row steps (validation put every row on the fabric).
fn write_columns(
    fabric: &mut Fabric,
    moves: &[[FabricAddr; 2]],
    d: &DmaIndirect1d,
    dtype: Dtype,
) -> Result<(), Error> {
    let esize = dtype.size();
    let step = u64::from(d.dst_step_elem());
    let row_step = match fabric.map().locate(d.dst_start_addr())?.space {
        Space::Hbm => step * esize as u64,
        Space::Sbuf => step * dma::addr::SBUF_STRIDE,
        Space::Psum => step * dma::addr::PSUM_STRIDE,
    };
    let mut row = vec![0u8; d.src_elem_size() as usize];
    for &[src, head] in moves {
        fabric.read(src, &mut row)?;
        for (c, element) in (0u64..).zip(row.chunks_exact(esize)) {
            let at = c
                .checked_mul(row_step)
                .and_then(|off| head.checked_add(off));
            let at = at.ok_or(dma::Error::AddressOverflow {
                addr: head.0,
                len: esize as u64,
            })?;
            fabric.write(at, element)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::dma_indirect::*;
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::isa::{BoundCheckReg, DmaIndirect1d, IndirectMode};
    use dma::{ComputeOp, Dtype, FabricAddr};

    crate::test_support::dma_indirect::dma_indirect_cases!(route());

    #[test]
    fn the_cost_counts_one_index_vector_per_indirect_side() {
        let mut f = table(route(), 40);
        let fl = flags(IndirectMode::Src, true, false);
        let sidx: Vec<u32> = (0..20).collect();
        let g = gather(&mut f, &sidx, fl, BoundCheckReg::DISABLED);
        let (_, cost) = run_cost(&mut f, &mut CoreState::new(), g);
        assert_eq!(
            (cost.kernel, cost.vectors, cost.bytes),
            ("dma_memcopy_indirect", 2, 160)
        );
        put::<u32>(&mut f, sbuf_at(0, DIDX), &[0, 2]);
        let src = indirect(FabricAddr(TABLE), SIDX, 8, BoundCheckReg::DISABLED);
        let dst = indirect(sbuf_at(1, 0), DIDX, 8, BoundCheckReg::DISABLED);
        let fl = flags(IndirectMode::SrcDst, true, false);
        let i = DmaIndirect1d::new(fl, src, dst, 2, Dtype::U32, ComputeOp::None);
        let (_, cost) = run_cost(&mut f, &mut CoreState::new(), i);
        assert_eq!((cost.vectors, cost.bytes), (2, 16));
    }

    #[test]
    fn bounds_are_leun_predicates() {
        let index = ivp::VecReg::from_n_2x32(std::array::from_fn(|k| k as u32 * 3));
        let lanes = |b| super::mask(super::in_bounds(&index, b));
        // lanes 0..=3 hold 0, 3, 6, 9: below 10
        assert_eq!(lanes(Some(10)), 0b1111);
        assert_eq!(lanes(Some(0)), 0);
        assert_eq!(lanes(None), 0xffff);
        assert_eq!(lanes(Some(1 << 32)), 0xffff);
        assert_eq!(lanes(Some((1 << 32) - 1)), 0xffff);
    }

    #[test]
    fn duplicates_are_found_by_sorted_neighbours() {
        let mut pairs = vec![(7, 0), (3, 1), (7, 5), (3, 9), (8, 2)];
        let e = super::first_duplicate(&mut pairs).unwrap();
        // 7 repeats at position 5, before 3 repeats at 9
        assert_eq!(
            e.to_string(),
            "dst index 7 repeats at positions 0 and 5; duplicate destinations need non_unique_dst_idx (in a scenario, unique_indices = false)"
        );
        let mut many: Vec<(u32, u32)> = (0..40).map(|k| (k, k)).collect();
        assert!(super::first_duplicate(&mut many).is_none());
        many.push((39, 40));
        let e = super::first_duplicate(&mut many).unwrap();
        assert!(
            matches!(
                e,
                crate::error::Error::DuplicateDestination {
                    value: 39,
                    first: 39,
                    second: 40
                }
            ),
            "{e}"
        );
    }
}
