//! The gather staging file (gvr): the register names gr0..gr7 ([`Gr`]) and one staging
//! register's image and state ([`GatherReg`]) through the A-phase, collection and D-phase.
//!
//! # The staging image (seed 004, the gathera stage body)
//!
//! | image | words | written by gathera |
//! |-------|-------|--------------------|
//! | offset image | 16 | the raw 512-bit offset register, unscaled |
//! | collected-data buffer | 16 | all [`SENTINEL`] (`0xffffffff`, "not yet collected") |
//! | GSEnable image | 16 | `EN[i]`: all-ones bytes under every enabled lane, zero elsewhere |
//! | control marker | 1 | the width's gathera GSControl word (`0x41`, `0x01`, `0x91`) |
//!
//! The A-phase also posts `addr[k] = base + offset[k] * elem_sz` for every enabled lane
//! whose address fits 64 bits. Collection (at the D-phase, through the port) replaces a
//! posted lane's sentinel bytes with its element; a lane the port refuses, like a disabled
//! lane, stays dead and keeps its sentinel in the buffer. The drain masks dead lanes to 0.

use crate::control::Width;
use crate::error::Error;
use crate::port::MemPort;
use crate::reg::{LaneView, VBool, VecReg};

/// The "not yet collected" word the A-phase writes over the whole collected-data buffer.
pub const SENTINEL: u32 = 0xffff_ffff;

/// The name of one of the eight gather staging registers gr0..gr7.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gr(u8);

impl Gr {
    /// gr0.
    pub const GR0: Gr = Gr(0);
    /// gr1.
    pub const GR1: Gr = Gr(1);
    /// gr2.
    pub const GR2: Gr = Gr(2);
    /// gr3.
    pub const GR3: Gr = Gr(3);
    /// gr4.
    pub const GR4: Gr = Gr(4);
    /// gr5.
    pub const GR5: Gr = Gr(5);
    /// gr6.
    pub const GR6: Gr = Gr(6);
    /// gr7.
    pub const GR7: Gr = Gr(7);
    /// The gvr file size.
    pub const COUNT: usize = 8;

    /// The register `gr{index}`; only 0..=7 exist.
    pub fn new(index: u8) -> Result<Gr, Error> {
        if usize::from(index) < Gr::COUNT {
            Ok(Gr(index))
        } else {
            Err(Error::GrIndex { index })
        }
    }

    /// The register number, always below [`Gr::COUNT`].
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// One gather staging register: its image (module docs) and its posted lane addresses.
///
/// Before its first `gathera` a register is empty: every image word is 0, no lane is
/// posted, and it drains as 0.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct GatherReg {
    offsets: [u32; 16],
    data: VecReg,
    /// GSEnable as the normalized predicate; the image is its byte mask.
    enable: VBool,
    marker: u16,
    width: Option<Width>,
    addrs: [u64; 32],
    posted: u32,
    /// Whether the offsets are `0, 1, 2, ...` over every lane (the posted lanes, if all,
    /// are then one run of consecutive elements).
    consecutive: bool,
    /// What the drain returns: collected elements in live lanes, 0 in dead lanes.
    gathered: VecReg,
}

impl GatherReg {
    /// The raw offset image the last gathera staged.
    pub fn offset_image(&self) -> &[u32; 16] {
        &self.offsets
    }

    /// The collected-data buffer: sentinels after gathera, elements in live lanes after
    /// collection.
    pub fn data_image(&self) -> &[u32; 16] {
        self.data.words()
    }

    /// The GSEnable image `EN[0..16]` the merge uses.
    pub fn enable_image(&self) -> [u32; 16] {
        self.enable.byte_mask()
    }

    /// The staging control marker (0 before the first gathera).
    pub fn marker(&self) -> u16 {
        self.marker
    }

    /// The width of the last gathera, if any.
    pub fn width(&self) -> Option<Width> {
        self.width
    }

    /// Lane mask of the addresses posted and not yet collected.
    pub fn posted(&self) -> u32 {
        self.posted
    }

    /// The address posted for lane `k`, while it awaits collection.
    pub fn lane_addr(&self, k: usize) -> Option<u64> {
        let posted = k < 32 && self.posted >> k & 1 != 0;
        posted.then(|| self.addrs.get(k).copied()).flatten()
    }

    /// The A-phase: stage the image and post the enabled lanes' addresses.
    pub(crate) fn stage(&mut self, width: Width, base: u64, offsets: &VecReg, pred: VBool) {
        // One arm per width so the lane geometry is a constant inside the inlined body.
        match width {
            Width::Nx16 => self.stage_as(Width::Nx16, base, offsets, pred),
            Width::Nx8u => self.stage_as(Width::Nx8u, base, offsets, pred),
            Width::N2x32 => self.stage_as(Width::N2x32, base, offsets, pred),
        }
    }

    #[inline(always)]
    fn stage_as(&mut self, width: Width, base: u64, offsets: &VecReg, pred: VBool) {
        let view = width.view();
        let enabled = pred.normalized(view);
        self.offsets = *offsets.words();
        self.data = VecReg::from_n_2x32([SENTINEL; 16]);
        self.gathered = VecReg::ZERO;
        self.enable = enabled;
        self.marker = width.staging_marker();
        self.width = Some(width);
        let scale = width.elem_sz().bytes();
        let (mut overflowed, mut consecutive) = (0u32, true);
        for (k, slot) in self.addrs.iter_mut().enumerate().take(width.lanes()) {
            // offset < 2^32 and scale <= 4, so the product fits; only the add can overflow,
            // and an overflowed lane is not posted (its slot is never read).
            let offset = offsets.lane(view, k);
            let (addr, overflow) = base.overflowing_add(u64::from(offset) * scale);
            *slot = addr;
            overflowed |= u32::from(overflow) << k;
            consecutive &= offset == k as u32;
        }
        // A gather's view has at most 32 lanes.
        self.posted = enabled.lane_mask(view) as u32 & !overflowed;
        self.consecutive = consecutive;
    }

    /// Collection: the port answers every posted lane; refused lanes stay dead.
    pub(crate) fn collect<P: MemPort>(&mut self, port: &P) {
        // As in `stage`: one arm per width for a constant lane geometry.
        match self.width {
            Some(Width::Nx16) => self.collect_as(Width::Nx16, port),
            Some(Width::Nx8u) => self.collect_as(Width::Nx8u, port),
            Some(Width::N2x32) => self.collect_as(Width::N2x32, port),
            None => {}
        }
    }

    #[inline(always)]
    fn collect_as<P: MemPort>(&mut self, width: Width, port: &P) {
        let (view, elem_sz, posted) = (width.view(), width.elem_sz(), self.posted);
        let lanes = width.lanes();
        // Every lane posted at consecutive addresses: one run from the port, the same
        // answers lane by lane (if the port refuses any, the lanes go one by one below).
        let every = u32::MAX >> (32 - lanes);
        let mut run = [0u32; 32];
        if self.consecutive
            && posted == every
            && port.load_run(self.addrs[0], elem_sz, &mut run[..lanes])
        {
            match view {
                // 32-bit lanes are the register's words as they are.
                LaneView::N2x32 => self.data = VecReg::from_n_2x32(std::array::from_fn(|k| run[k])),
                _ => {
                    for (k, &value) in run.iter().enumerate().take(lanes) {
                        self.data.set_lane(view, k, value);
                    }
                }
            }
            // Every byte was set, so the collected data is the gathered data.
            self.gathered = self.data;
            self.posted = 0;
            return;
        }
        // the posted lanes in ascending order, by their bits (a gather's groups are often
        // one lane each: a scan of every lane per group made a vector's lanes cost their
        // square)
        let mut left = posted & every;
        while left != 0 {
            let k = left.trailing_zeros() as usize;
            left &= left - 1;
            let value = self.addrs.get(k).and_then(|&addr| port.load(addr, elem_sz));
            if let Some(value) = value {
                self.data.set_lane(view, k, value);
                self.gathered.set_lane(view, k, value);
            }
        }
        self.posted = 0;
    }

    /// The drain: the collected buffer with every dead lane 0.
    pub(crate) fn drain(&self) -> VecReg {
        self.gathered
    }

    /// The GSEnable merge `(gathered & EN) | (newdata & !EN)` against the old register.
    pub(crate) fn merge(&self, old: &VecReg) -> VecReg {
        let (g, old, en) = (self.gathered.words(), old.words(), self.enable_image());
        VecReg::from_n_2x32(std::array::from_fn(|i| (g[i] & en[i]) | (old[i] & !en[i])))
    }

    /// movgatherd: `v` becomes the collected buffer, every byte live and enabled.
    pub(crate) fn load_data(&mut self, v: &VecReg) {
        self.data = *v;
        self.gathered = *v;
        self.enable = VBool::ALL;
        self.posted = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::port::MemTable;
    use crate::reg::LaneView;
    use proptest::prelude::*;

    /// A port that answers lane by lane only (no runs), as the reference for the run path.
    struct LaneByLane<'a>(&'a MemTable);

    impl MemPort for LaneByLane<'_> {
        fn load(&self, addr: u64, elem_sz: crate::control::ElemSize) -> Option<u32> {
            self.0.load(addr, elem_sz)
        }
        fn store(&mut self, _: u64, _: crate::control::ElemSize, _: u32) -> bool {
            false
        }
        fn load_run(&self, _: u64, _: crate::control::ElemSize, _: &mut [u32]) -> bool {
            false
        }
    }

    proptest! {
        /// Collection with runs leaves exactly the image and drain of collection lane by
        /// lane: consecutive or scattered offsets, every lane or some, inside the table or
        /// leaving it.
        #[test]
        fn runs_collect_as_lanes_do(
            w in 0usize..3,
            base in 0u64..80,
            consecutive in any::<bool>(),
            offsets in proptest::array::uniform16(0u32..40),
            pred in prop_oneof![Just(u64::MAX), any::<u64>()],
        ) {
            let width = [Width::Nx16, Width::Nx8u, Width::N2x32][w];
            let words = match consecutive {
                true => VecReg::from_nx16(std::array::from_fn(|k| k as u16)).n_2x32(),
                false => offsets,
            };
            let words = match (consecutive, width) {
                (true, Width::N2x32) => std::array::from_fn(|k| k as u32),
                _ => words,
            };
            let offs = VecReg::from_n_2x32(words);
            let table = MemTable::from_bytes((0..96u8).map(|b| b.wrapping_mul(29)).collect());
            let (mut fast, mut slow) = (GatherReg::default(), GatherReg::default());
            fast.stage(width, base, &offs, VBool::from_lanes(LaneView::TwoNx8, pred));
            slow.stage(width, base, &offs, VBool::from_lanes(LaneView::TwoNx8, pred));
            fast.collect(&table);
            slow.collect(&LaneByLane(&table));
            prop_assert_eq!(fast.data_image(), slow.data_image());
            prop_assert_eq!(fast.drain(), slow.drain());
            prop_assert_eq!(fast.posted(), slow.posted());
        }
    }

    fn iota(n: usize) -> MemTable {
        MemTable::from_bytes((0..n).map(|i| i as u8).collect())
    }

    #[test]
    fn gr_names_stop_at_gr7() {
        assert_eq!(Gr::new(7).map(Gr::index), Ok(7));
        assert_eq!(Gr::new(8), Err(Error::GrIndex { index: 8 }));
    }

    #[test]
    fn stage_writes_the_image_and_posts_enabled_lanes() {
        let mut g = GatherReg::default();
        let offs = VecReg::from_n_2x32(std::array::from_fn(|k| 0x0001_0000 * k as u32 + 3));
        let pred = VBool::from_lanes(LaneView::Nx16, 0b101);
        g.stage(Width::Nx16, 0x100, &offs, pred);
        assert_eq!(g.offset_image(), offs.words());
        assert_eq!(g.data_image(), &[SENTINEL; 16]);
        assert_eq!(g.enable_image()[0], 0x0000_ffff);
        assert_eq!(g.enable_image()[1], 0x0000_ffff);
        assert_eq!(g.marker(), 0x41);
        assert_eq!(g.posted(), 0b101);
        // lane 2 is NX16 lane 0 of word 1: offset 3 -> 0x100 + 6
        assert_eq!(g.lane_addr(2), Some(0x106));
        assert_eq!(g.lane_addr(1), None);
    }

    #[test]
    fn collect_kills_refused_lanes_and_keeps_their_sentinel() {
        let mut g = GatherReg::default();
        let offs =
            VecReg::from_n_2x32(std::array::from_fn(|k| if k == 1 { 100 } else { k as u32 }));
        g.stage(Width::N2x32, 0, &offs, VBool::ALL);
        g.collect(&iota(16));
        assert_eq!(g.posted(), 0);
        assert_eq!(g.data_image()[0], 0x0302_0100);
        assert_eq!(g.data_image()[1], SENTINEL);
        assert_eq!(g.data_image()[3], 0x0f0e_0d0c);
        assert_eq!(
            g.drain().n_2x32()[..4],
            [0x0302_0100, 0, 0x0b0a_0908, 0x0f0e_0d0c]
        );
    }

    #[test]
    fn base_overflow_makes_a_lane_dead_not_wrapped() {
        let mut g = GatherReg::default();
        g.stage(
            Width::N2x32,
            u64::MAX - 3,
            &VecReg::from_n_2x32([1; 16]),
            VBool::ALL,
        );
        assert_eq!(g.posted(), 0);
    }

    #[test]
    fn merge_keeps_old_data_in_disabled_lanes() {
        let mut g = GatherReg::default();
        let pred = VBool::from_lanes(LaneView::Nx16, 0b10);
        g.stage(Width::Nx8u, 4, &VecReg::from_nx16([1; 32]), pred);
        g.collect(&iota(8));
        let old = VecReg::from_nx16([0xbeef; 32]);
        assert_eq!(g.merge(&old).nx16()[..3], [0xbeef, 5, 0xbeef]);
    }

    #[test]
    fn load_data_drains_back_exactly() {
        let mut g = GatherReg::default();
        let v = VecReg::from_n_2x32(std::array::from_fn(|k| k as u32 * 0x0101_0101));
        g.load_data(&v);
        assert_eq!(g.drain(), v);
        assert_eq!(g.merge(&VecReg::ZERO), v);
    }
}
