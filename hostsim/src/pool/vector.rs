//! The IVP vector side shared by the POOL kernels: [`VectorCore`] (a SuperGather engine
//! plus the dual-select lane shuffles) runs 32-lane [`Lanes`] blocks through the NX8U /
//! NX16 / N_2X32 gathers and scatters, and [`Pattern`] turns a TENSOR4D into those blocks.
//!
//! # The 32-lane block
//!
//! A kernel works on blocks of 32 elements: one NX16 or NX8U op (32 lanes, u16 offsets),
//! or two N_2X32 ops (16 lanes each, u32 offsets). Values always come back *wide*, as
//! two N_2X32 registers ([`Wide`]: lanes 0..16, then 16..32), so the compares, selects
//! and arithmetic of [`ivp::alu`] see 32-bit lanes whatever the element width. The NX16
//! image is widened and narrowed with `dselnx16t` (the drain op the seed pairs with every
//! gather), using fixed selectors.
//!
//! # Offsets that do not fit 16 bits
//!
//! NX16 and NX8U gathers carry u16 element offsets, but a pattern may span more than 65536
//! elements of a partition. A block is therefore issued in passes: each pass takes the
//! lowest pending offset as its base and enables the lanes within 65535 elements of it;
//! the drains merge with `mgatherd` (disabled lanes keep the earlier passes' data). Lanes
//! with one address always fall in one pass, so a scatter keeps their lane order (the
//! last writer wins, as in element order). Almost every block needs one pass.

use dma::{Addr4, AddressMap, FabricAddr, Location};
use ivp::{alu, AddrVec, Gr, LaneView, MemPort, SuperGather, VBool, VecPair, VecReg, Width};

use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath, Rule};
use crate::isa::Tensor4d;

/// Lanes in a block.
pub const BLOCK: usize = 32;
/// Lanes in one N_2X32 register.
pub const HALF: usize = 16;

/// A block's values as two N_2X32 registers: lanes 0..16 in `[0]`, 16..32 in `[1]`.
pub type Wide = [VecReg; 2];

/// Up to 32 lanes of element offsets from `base` (a byte address), and the live lanes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Lanes {
    /// Byte address of offset 0.
    pub base: u64,
    /// Element offsets from `base`, one per lane.
    pub offs: [u32; BLOCK],
    /// Bit `k` set: lane `k` takes part.
    pub live: u32,
}

impl Lanes {
    /// The same lanes with only `live` enabled.
    pub fn with_live(self, live: u32) -> Lanes {
        Lanes { live, ..self }
    }
}

/// A bit mask of the first `n` lanes of a block.
pub fn first_lanes(n: usize) -> u32 {
    if n >= BLOCK {
        u32::MAX
    } else {
        (1u32 << n) - 1
    }
}

/// The N_2X32 predicate of half `h` of a 32-lane mask.
pub fn half_pred(mask: u32, h: usize) -> VBool {
    VBool::from_lanes(LaneView::N2x32, u64::from(mask >> (HALF * h) & 0xffff))
}

/// The 32-lane mask of the two N_2X32 predicates of a block.
pub fn wide_mask(p: [VBool; 2]) -> u32 {
    let lo = p[0].lane_mask(LaneView::N2x32) as u32;
    let hi = p[1].lane_mask(LaneView::N2x32) as u32;
    lo & 0xffff | (hi & 0xffff) << HALF
}

/// The 32 u32 lanes of a wide value.
pub fn wide_lanes(w: &Wide) -> [u32; BLOCK] {
    let (lo, hi) = (w[0].n_2x32(), w[1].n_2x32());
    std::array::from_fn(|k| if k < HALF { lo[k] } else { hi[k - HALF] })
}

/// The gather/scatter width of a 1-, 2- or 4-byte element (NX8U, NX16, N_2X32).
pub fn width_of(bytes: usize) -> Option<Width> {
    match bytes {
        1 => Some(Width::Nx8u),
        2 => Some(Width::Nx16),
        4 => Some(Width::N2x32),
        _ => None,
    }
}

/// The SuperGather engine of one kernel run and the dual-select shuffles.
pub struct VectorCore {
    sg: SuperGather,
    widen_sel: VecReg,
    narrow_sel: VecReg,
}

impl Default for VectorCore {
    fn default() -> Self {
        VectorCore::new()
    }
}

impl VectorCore {
    /// A fresh engine.
    pub fn new() -> VectorCore {
        // widen: b = the NX16 value, a = zero (source lanes 32..64). Output NX16 lane i of
        // `lo` is value lane i/2 for even i, zero for odd i; of `hi`, value lane 16 + i/2.
        let widen = std::array::from_fn(|j| {
            let (i, first) = (j % 32, if j < 32 { 0 } else { 16 });
            if i % 2 == 0 {
                (first + i / 2) as u8
            } else {
                32
            }
        });
        // narrow: b = lanes 0..16, a = lanes 16..32 (32-bit); output NX16 lane i of `lo`
        // is the low half of 32-bit lane i, i.e. source lane 2i.
        let narrow = std::array::from_fn(|j| if j < 32 { (2 * j) as u8 } else { 0 });
        VectorCore {
            sg: SuperGather::new(),
            widen_sel: VecReg::from_bytes_2nx8(widen),
            narrow_sel: VecReg::from_bytes_2nx8(narrow),
        }
    }

    /// Zero-extends the 32 NX16 lanes of `v` into two N_2X32 registers (`dselnx16t`).
    pub fn widen(&self, v: &VecReg) -> Wide {
        let p = alu::dselnx16t(
            &VecPair::default(),
            &VecReg::ZERO,
            v,
            &self.widen_sel,
            VBool::ALL,
        );
        [p.lo, p.hi]
    }

    /// The low 16 bits of the 32 lanes of `w` as one NX16 register (`dselnx16t`).
    pub fn narrow(&self, w: &Wide) -> VecReg {
        let (b, a) = (&w[0], &w[1]);
        alu::dselnx16t(&VecPair::default(), a, b, &self.narrow_sel, VBool::ALL).lo
    }

    /// Gathers the live lanes of `lanes` through `port` (`gathera*t` + `gatherd` /
    /// `mgatherd`); dead lanes (disabled or refused by the port) are 0.
    pub fn gather<P: MemPort>(&mut self, port: &P, width: Width, lanes: &Lanes) -> Wide {
        if width == Width::N2x32 {
            return std::array::from_fn(|h| {
                let offsets = half_offsets(&lanes.offs, h);
                let vb = half_pred(lanes.live, h);
                let gr = if h == 0 { Gr::GR0 } else { Gr::GR1 };
                self.sg
                    .gather_t(gr, Width::N2x32, lanes.base, &offsets, vb, port)
            });
        }
        let mut acc = VecReg::ZERO;
        for pass in passes(width, lanes) {
            self.sg
                .gathera_t(Gr::GR0, width, pass.base, &pass.offsets, pass.vb);
            acc = self.sg.mgatherd(Gr::GR0, &acc, port);
        }
        self.widen(&acc)
    }

    /// Posts a scatter of `data`'s live lanes of `lanes` into `port` (`scatter*t`), in
    /// lane order; visible after [`VectorCore::fence`].
    pub fn scatter<P: MemPort>(&mut self, port: &mut P, width: Width, lanes: &Lanes, data: &Wide) {
        if width == Width::N2x32 {
            for (h, d) in data.iter().enumerate() {
                let offsets = half_offsets(&lanes.offs, h);
                let vb = half_pred(lanes.live, h);
                self.sg
                    .scatter_t(port, Width::N2x32, lanes.base, &offsets, d, vb);
            }
            return;
        }
        let narrow = self.narrow(data);
        for pass in passes(width, lanes) {
            self.sg
                .scatter_t(port, width, pass.base, &pass.offsets, &narrow, pass.vb);
        }
    }

    /// `scatterw`: commits every posted scatter; returns the lanes the port refused.
    pub fn fence<P: MemPort>(&mut self, port: &mut P) -> u32 {
        self.sg.scatterw(port).dead
    }
}

/// The u32 offsets of half `h` of a block as an N_2X32 register.
fn half_offsets(offs: &[u32; BLOCK], h: usize) -> VecReg {
    VecReg::from_n_2x32(std::array::from_fn(|k| {
        offs.get(HALF * h + k).copied().unwrap_or(0)
    }))
}

/// One pass of a 16-bit-offset op: its base address, NX16 offsets and predicate.
struct Pass {
    base: u64,
    offsets: VecReg,
    vb: VBool,
}

/// The passes of a NX16 / NX8U op over `lanes` (module docs): each enables the pending
/// lanes within 65535 elements of the lowest pending offset.
fn passes(width: Width, lanes: &Lanes) -> impl Iterator<Item = Pass> + '_ {
    let elem = width.elem_sz().bytes();
    let mut todo = lanes.live;
    std::iter::from_fn(move || {
        let pending = (0..BLOCK).filter(|&k| todo >> k & 1 != 0);
        let (low, high) = pending
            .clone()
            .map(|k| lanes.offs[k])
            .fold(None, |r, o| match r {
                None => Some((o, o)),
                Some((lo, hi)) => Some((o.min(lo), o.max(hi))),
            })?;
        let reach = u32::from(u16::MAX);
        // The common case: every pending lane is within reach of the lowest.
        let mask = match high - low <= reach {
            true => todo,
            false => pending
                .filter(|&k| lanes.offs[k] - low <= reach)
                .fold(0u32, |m, k| m | 1 << k),
        };
        todo &= !mask;
        let offsets = std::array::from_fn(|k| (lanes.offs[k].wrapping_sub(low)) as u16);
        // An address past u64::MAX is refused by every port, so saturating is exact.
        let base = lanes.base.saturating_add(u64::from(low) * elem);
        Some(Pass {
            base,
            offsets: VecReg::from_nx16(offsets),
            vb: VBool::from_lanes(LaneView::Nx16, u64::from(mask)),
        })
    })
}

/// `base + idx[k] * step` for the 16 lanes with the `mulusan_2x32` MAC (the unsigned
/// index times signed 32-bit step of seed 000 section 6), a step of 2^31 or more issued as
/// several MACs of at most `i32::MAX`. Wrapping; bit `k` of the mask is set where the
/// true address passes `u64::MAX` (then the wrapped lane is below `base`, since the
/// product is below 2^64).
pub fn row_addrs(base: u64, idx: &VecReg, step: u32) -> (AddrVec, u16) {
    let mut acc = AddrVec::splat(base);
    let mut rest = step;
    while rest > 0 {
        let part = rest.min(i32::MAX as u32);
        acc = alu::mulusan_2x32(&acc, idx, &alu::movva32(part));
        rest -= part;
    }
    let over = acc
        .lanes()
        .iter()
        .enumerate()
        .fold(0u16, |m, (k, &a)| if a < base { m | 1 << k } else { m });
    (acc, over)
}

/// A TENSOR4D's element offsets in element order, the way the address generator steps
/// them: an odometer over dims 1..=3 keeps a running row base (adding a dim's step as it
/// counts, taking back its whole span as it wraps), and each row's dim-0 offsets are
/// `base + c0 * step_elem[0]`.
fn walk_offsets(t: &Tensor4d) -> Vec<i64> {
    let n = t.num_elem().map(i64::from);
    let step = t.step_elem().map(i64::from);
    let mut out = Vec::with_capacity(usize::try_from(t.element_count()).unwrap_or(0));
    if n.contains(&0) {
        return out;
    }
    let (mut base, mut count) = (0i64, [0i64; 4]);
    loop {
        out.extend((0..n[0]).map(|c0| base + c0 * step[0]));
        let Some(d) = (1..4).find(|&d| count[d] + 1 < n[d]) else {
            return out;
        };
        for lower in 1..d {
            base -= count[lower] * step[lower];
            count[lower] = 0;
        }
        count[d] += 1;
        base += step[d];
    }
}

/// One TENSOR4D operand: its element offsets in element order (dim 3 outermost, dim 0
/// innermost, `sum(c[d] * step_elem[d])`), rebased so the lowest is 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    /// The operand's field path, for errors.
    at: FieldPath,
    /// The operand's start address (partition of active channel 0).
    start: Addr4,
    /// Offsets from the lowest element, in elements, element order.
    offs: Vec<u32>,
    /// The lowest element's offset from the start address (<= 0), in elements.
    low: i64,
    /// Whether the elements are `0, 1, 2, ...` from the start (a dense run).
    dense: bool,
}

impl Pattern {
    /// The walk of `t`. Validation bounds the element count (at most 65535 for every
    /// POOL operand) and keeps the whole span inside one partition, so the rebased
    /// offsets fit u32.
    pub fn new(at: FieldPath, t: &Tensor4d) -> Pattern {
        let abs = walk_offsets(t);
        let low = abs.iter().copied().min().unwrap_or(0).min(0);
        let dense = abs.iter().zip(0i64..).all(|(&a, i)| a == i);
        // Every offset minus the minimum is below the partition size in elements (< 2^32).
        let offs = abs.iter().map(|&a| (a - low) as u32).collect();
        Pattern {
            at,
            start: t.start_addr(),
            offs,
            low,
            dense,
        }
    }

    /// The fabric address of the lowest element in active channel `k`, which works on
    /// partition `P + k` (`P` the start address's partition; see [`crate::core_state`]).
    pub fn base(&self, map: &AddressMap, k: u32, elem_size: usize) -> Result<FabricAddr, Error> {
        let (space, partition, offset) = self.start.decode().map_err(dma_at(self.at))?;
        let low = i64::from(offset) + self.low_bytes(elem_size);
        let below = Error::InvalidField {
            field: self.at,
            value: offset.into(),
            rule: Rule::PatternBelowPartition,
        };
        let offset = u64::try_from(low).map_err(|_| below)?;
        let loc = Location {
            space,
            partition: partition.saturating_add(k),
            offset,
        };
        map.fabric_addr(loc).map_err(dma_at(self.at))
    }

    /// The partition active channel `k` works on.
    pub fn partition(&self, k: u32) -> Result<u32, Error> {
        let (_, partition, _) = self.start.decode().map_err(dma_at(self.at))?;
        Ok(partition.saturating_add(k))
    }

    /// Elements visited.
    pub fn len(&self) -> usize {
        self.offs.len()
    }

    /// Whether the pattern is the dense run `0, 1, 2, ...` from its start.
    pub fn is_dense(&self) -> bool {
        self.dense
    }

    /// Byte offset of the lowest element from the start address (`low * elem_size`).
    pub fn low_bytes(&self, elem_size: usize) -> i64 {
        self.low * elem_size as i64
    }

    /// Bytes from the lowest to the end of the highest element.
    pub fn span_bytes(&self, elem_size: usize) -> u64 {
        let high = self.offs.iter().copied().max().unwrap_or(0);
        (u64::from(high) + 1) * elem_size as u64
    }

    /// The element offsets from the lowest element, element order.
    pub fn offsets(&self) -> &[u32] {
        &self.offs
    }

    /// Blocks of 32 elements from the lowest element's byte address `base`.
    pub fn blocks(&self, base: u64) -> impl Iterator<Item = Lanes> + '_ {
        self.offs.chunks(BLOCK).map(move |chunk| {
            let mut offs = [0u32; BLOCK];
            offs.iter_mut().zip(chunk).for_each(|(o, &c)| *o = c);
            Lanes {
                base,
                offs,
                live: first_lanes(chunk.len()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{Generation, Space};
    use ivp::MemTable;

    const AT: FieldPath = FieldPath::new("T", "p");

    fn iota_table(n: usize) -> MemTable {
        MemTable::from_bytes((0..n).map(|i| (i * 7) as u8).collect())
    }

    #[test]
    fn widen_and_narrow_are_inverse_shuffles() {
        let core = VectorCore::new();
        let v = VecReg::from_nx16(std::array::from_fn(|k| 1000 + k as u16));
        let w = core.widen(&v);
        let expect: [u32; 32] = std::array::from_fn(|k| 1000 + k as u32);
        assert_eq!(wide_lanes(&w), expect);
        assert_eq!(core.narrow(&w), v);
        let w = [alu::movva32(0x0001_0002), alu::movva32(0xffff_0003)];
        let expect: [u16; 32] = std::array::from_fn(|k| if k < 16 { 2 } else { 3 });
        assert_eq!(core.narrow(&w).nx16(), expect);
    }

    #[test]
    fn masks_and_predicates_round_trip() {
        let m = 0x8001_0203;
        assert_eq!(wide_mask([half_pred(m, 0), half_pred(m, 1)]), m);
        assert_eq!(first_lanes(3), 0b111);
        assert_eq!(first_lanes(32), u32::MAX);
        assert_eq!(width_of(2), Some(Width::Nx16));
        assert_eq!(width_of(8), None);
    }

    #[test]
    fn gathers_every_width_with_dead_lanes_zero() {
        let t = iota_table(256);
        let mut core = VectorCore::new();
        let lanes = Lanes {
            base: 4,
            offs: std::array::from_fn(|k| k as u32),
            live: 0x0000_fff7,
        };
        let b = wide_lanes(&core.gather(&t, Width::Nx8u, &lanes));
        assert_eq!(b[..5], [28, 35, 42, 0, 56]);
        assert_eq!(b[16], 0);
        let h = wide_lanes(&core.gather(&t, Width::Nx16, &lanes));
        assert_eq!(h[1], u32::from(u16::from_le_bytes([42, 49])));
        let w = wide_lanes(&core.gather(&t, Width::N2x32, &lanes.with_live(0b10)));
        assert_eq!(w[..2], [0, u32::from_le_bytes([56, 63, 70, 77])]);
    }

    #[test]
    fn far_offsets_take_several_passes() {
        let mut bytes = vec![0u8; 200_000];
        bytes[10] = 1;
        bytes[150_010] = 2;
        let t = MemTable::from_bytes(bytes);
        let mut core = VectorCore::new();
        let mut offs = [0u32; 32];
        offs[0] = 150_000;
        offs[1] = 0;
        let lanes = Lanes {
            base: 10,
            offs,
            live: 0b11,
        };
        assert_eq!(
            wide_lanes(&core.gather(&t, Width::Nx8u, &lanes))[..2],
            [2, 1]
        );
        let mut out = MemTable::zeroed(200_000);
        let data = [alu::movva32(9), alu::movva32(9)];
        core.scatter(&mut out, Width::Nx8u, &lanes, &data);
        assert_eq!(core.fence(&mut out), 0);
        assert_eq!((out.as_bytes()[10], out.as_bytes()[150_010]), (9, 9));
    }

    #[test]
    fn scatter_keeps_lane_order_for_one_address() {
        let mut out = MemTable::zeroed(8);
        let mut core = VectorCore::new();
        let lanes = Lanes {
            base: 2,
            offs: [0; 32],
            live: 0b111,
        };
        let data = [
            VecReg::from_n_2x32(std::array::from_fn(|k| 10 + k as u32)),
            VecReg::ZERO,
        ];
        core.scatter(&mut out, Width::Nx16, &lanes, &data);
        assert_eq!(core.fence(&mut out), 0);
        assert_eq!(out.as_bytes()[2..4], [12, 0]);
        core.scatter(&mut out, Width::N2x32, &lanes.with_live(1 << 20), &data);
        assert_eq!(core.fence(&mut out), 0);
    }

    #[test]
    fn pattern_offsets_are_rebased_in_element_order() {
        let a = Addr4::encode(Space::Sbuf, 0, 64).unwrap();
        let p = Pattern::new(AT, &Tensor4d::new(a, [1, 10, 100, -1], [2, 2, 1, 2]));
        // absolute 0 1 10 11 -1 0 9 10, lowest -1
        assert_eq!(p.offsets(), &[1, 2, 11, 12, 0, 1, 10, 11]);
        assert_eq!(
            (p.low_bytes(4), p.span_bytes(4), p.is_dense()),
            (-4, 52, false)
        );
        let d = Pattern::new(AT, &Tensor4d::new(a, [1, 3, 0, 0], [3, 2, 1, 1]));
        assert!(d.is_dense());
        let blocks: Vec<Lanes> = Pattern::new(AT, &Tensor4d::contiguous(a, 40))
            .blocks(8)
            .collect();
        assert_eq!(blocks.len(), 2);
        assert_eq!(
            (blocks[1].live, blocks[1].offs[7], blocks[1].base),
            (0xff, 39, 8)
        );
    }

    #[test]
    fn row_addresses_split_wide_steps_and_flag_overflow() {
        let idx = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32));
        let (a, over) = row_addrs(0x100, &idx, 24);
        assert_eq!((a.lanes()[3], over), (0x100 + 72, 0));
        let (a, over) = row_addrs(0, &idx, u32::MAX);
        assert_eq!((a.lanes()[5], over), (5 * u64::from(u32::MAX), 0));
        let (_, over) = row_addrs(u64::MAX - 10, &idx, 4);
        // lanes 3.. pass u64::MAX (3 * 4 = 12 > 10)
        assert_eq!(over, 0xfff8);
    }

    #[test]
    fn channel_bases_follow_the_partition() {
        let map = AddressMap::new(Generation::Sunda);
        let a = Addr4::encode(Space::Sbuf, 3, 64).unwrap();
        let p = Pattern::new(AT, &Tensor4d::new(a, [-2, 0, 0, 0], [5, 1, 1, 1]));
        let sbuf = dma::addr::SBUF_BASE;
        let stride = dma::addr::SBUF_STRIDE;
        // lowest element is 4 * -2 = -8 elements of 4 bytes: byte 64 - 32
        assert_eq!(
            p.base(&map, 2, 4).unwrap(),
            FabricAddr(sbuf + 5 * stride + 32)
        );
        assert_eq!(p.partition(2).unwrap(), 5);
        let e = p.base(&map, 0, 32).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::PatternBelowPartition));
        assert!(p.base(&map, 200, 4).is_err());
    }
}
