//! The register files the SuperGather ops read and write: the 512-bit vector register
//! [`VecReg`] with its lane views, the byte-granular predicate [`VBool`], the register pair
//! [`VecPair`] of the dual selects, and the 16 x 64-bit address accumulator [`AddrVec`] of
//! `mulusan_2x32`.
//!
//! # Lane layout
//!
//! A `VecReg` is 64 little-endian bytes. Lane `k` of a view with `b`-byte lanes is bytes
//! `b*k .. b*k+b`: 2NX8 is 64 x 8-bit, NX16 is 32 x 16-bit, N_2X32 is 16 x 32-bit.
//!
//! # Predicates (project decision: one bit per byte)
//!
//! A `VBool` holds 64 bits, bit `j` governing byte `j` of a vector register. A compare on
//! 32-bit lanes sets all four bits of each true lane, so its predicate selects whole lanes
//! when fed to the byte-wise `mov2nx8t` (the seed's `ltun_2x32 -> mov2nx8t` chain).
//! Reading a lane of a `b`-byte view tests the lane's lowest byte bit (`bit b*k`).

/// The lane geometry of a 512-bit register view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LaneView {
    /// 2NX8: 64 lanes of 8 bits.
    TwoNx8,
    /// NX16: 32 lanes of 16 bits.
    Nx16,
    /// N_2X32: 16 lanes of 32 bits.
    N2x32,
}

impl LaneView {
    /// Lanes in the view: 64, 32, 16.
    pub const fn lanes(self) -> usize {
        64 >> self.lane_shift()
    }

    /// Bytes per lane: 1, 2, 4.
    pub const fn lane_bytes(self) -> usize {
        1 << self.lane_shift()
    }

    /// log2 of the lane bytes.
    const fn lane_shift(self) -> u32 {
        match self {
            LaneView::TwoNx8 => 0,
            LaneView::Nx16 => 1,
            LaneView::N2x32 => 2,
        }
    }

    /// The word holding lane `k` and the lane's bit position in it (shifts, no division).
    #[inline]
    const fn locate(self, k: usize) -> (usize, u32) {
        let lanes_per_word_log2 = 2 - self.lane_shift();
        let in_word = (k & ((1 << lanes_per_word_log2) - 1)) as u32;
        (k >> lanes_per_word_log2, in_word << (3 + self.lane_shift()))
    }

    /// The all-ones value of one lane.
    const fn lane_mask(self) -> u32 {
        match self {
            LaneView::TwoNx8 => 0xff,
            LaneView::Nx16 => 0xffff,
            LaneView::N2x32 => u32::MAX,
        }
    }

    /// The predicate bits of lane 0 (`lane_bytes` ones).
    const fn pred_bits(self) -> u64 {
        (1 << self.lane_bytes()) - 1
    }
}

/// How a view's lane bits are packed together and spread apart again: the masks of the
/// bits kept after each step, and the shift of each step (`masks[0]` holds the lanes'
/// lowest byte bits, the last mask the packed lanes). `None` for 2NX8, whose lanes are
/// the bits themselves.
fn lane_steps(view: LaneView) -> Option<(&'static [u64], &'static [u32])> {
    const NX16: [u64; 6] = [
        0x5555_5555_5555_5555,
        0x3333_3333_3333_3333,
        0x0f0f_0f0f_0f0f_0f0f,
        0x00ff_00ff_00ff_00ff,
        0x0000_ffff_0000_ffff,
        0xffff_ffff,
    ];
    const N2X32: [u64; 5] = [
        0x1111_1111_1111_1111,
        0x0303_0303_0303_0303,
        0x000f_000f_000f_000f,
        0x0000_00ff_0000_00ff,
        0xffff,
    ];
    match view {
        LaneView::TwoNx8 => None,
        LaneView::Nx16 => Some((&NX16, &[1, 2, 4, 8, 16])),
        LaneView::N2x32 => Some((&N2X32, &[3, 6, 12, 24])),
    }
}

/// Bit `k * lane_bytes` of `bits` moved to bit `k`, for every lane `k` of `view` (the
/// other bits dropped): the lanes' lowest byte bits packed, by halving the gaps.
#[inline]
fn pack_lanes(view: LaneView, bits: u64) -> u64 {
    let Some((masks, shifts)) = lane_steps(view) else {
        return bits;
    };
    let x = bits & masks[0];
    shifts
        .iter()
        .zip(&masks[1..])
        .fold(x, |x, (&s, &m)| (x | x >> s) & m)
}

/// The inverse of [`pack_lanes`]: bit `k` of `lanes` (below `view.lanes()`) moved to bit
/// `k * lane_bytes`, by doubling the gaps.
#[inline]
fn spread_lanes(view: LaneView, lanes: u64) -> u64 {
    let Some((masks, shifts)) = lane_steps(view) else {
        return lanes;
    };
    let x = lanes & masks[masks.len() - 1];
    let steps = shifts.iter().zip(&masks[..masks.len() - 1]).rev();
    steps.fold(x, |x, (&s, &m)| (x | x << s) & m)
}

/// One 512-bit IVP vector register (`xb_vec2Nx8` / `xb_vecNx16` / `xb_vecN_2x32v`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VecReg {
    words: [u32; 16],
}

impl VecReg {
    /// The all-zero register.
    pub const ZERO: VecReg = VecReg { words: [0; 16] };

    /// A register from its 16 N_2X32 lanes (lane `k` is word `k`).
    pub const fn from_n_2x32(lanes: [u32; 16]) -> VecReg {
        VecReg { words: lanes }
    }

    /// The 16 N_2X32 lanes (also the register's 16-word image).
    pub const fn n_2x32(&self) -> [u32; 16] {
        self.words
    }

    /// A register from its 32 NX16 lanes.
    pub fn from_nx16(lanes: [u16; 32]) -> VecReg {
        let mut v = VecReg::ZERO;
        for (k, &x) in lanes.iter().enumerate() {
            v.set_lane(LaneView::Nx16, k, u32::from(x));
        }
        v
    }

    /// The 32 NX16 lanes.
    pub fn nx16(&self) -> [u16; 32] {
        // A 16-bit lane value always fits u16: `lane` masks it.
        std::array::from_fn(|k| self.lane(LaneView::Nx16, k) as u16)
    }

    /// A register whose 32 NX16 lanes are the zero-extended bytes (the NX8U layout).
    pub fn from_nx8u(lanes: [u8; 32]) -> VecReg {
        VecReg::from_nx16(lanes.map(u16::from))
    }

    /// The low byte of each of the 32 NX16 lanes (the NX8U elements).
    pub fn nx8u(&self) -> [u8; 32] {
        self.nx16().map(|x| x as u8)
    }

    /// A register from its 64 bytes (the 2NX8 view).
    pub fn from_bytes_2nx8(bytes: [u8; 64]) -> VecReg {
        VecReg {
            words: std::array::from_fn(|i| word_of(&bytes, i)),
        }
    }

    /// The 64 bytes (the 2NX8 view), little-endian.
    pub fn bytes_2nx8(&self) -> [u8; 64] {
        std::array::from_fn(|j| self.lane(LaneView::TwoNx8, j) as u8)
    }

    /// Lane `k` of `view`, zero-extended; 0 for a lane past the view.
    #[inline]
    pub fn lane(&self, view: LaneView, k: usize) -> u32 {
        let (word, shift) = view.locate(k);
        let word = self.words.get(word).copied().unwrap_or(0);
        (word >> shift) & view.lane_mask()
    }

    /// Sets lane `k` of `view` to the low lane bits of `value`; a lane past the view is
    /// ignored.
    #[inline]
    pub fn set_lane(&mut self, view: LaneView, k: usize, value: u32) {
        let (word, shift) = view.locate(k);
        let mask = view.lane_mask() << shift;
        if let Some(w) = self.words.get_mut(word) {
            *w = (*w & !mask) | ((value << shift) & mask);
        }
    }

    /// The 16-word image, for the staging and merge arithmetic.
    pub(crate) const fn words(&self) -> &[u32; 16] {
        &self.words
    }
}

fn word_of(bytes: &[u8; 64], i: usize) -> u32 {
    let b = |j: usize| bytes.get(4 * i + j).copied().unwrap_or(0);
    u32::from_le_bytes([b(0), b(1), b(2), b(3)])
}

/// A vbool predicate register: one bit per byte of a 512-bit register (module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VBool(u64);

impl VBool {
    /// Every lane false.
    pub const NONE: VBool = VBool(0);
    /// Every lane true (what the non-`t` forms use).
    pub const ALL: VBool = VBool(u64::MAX);

    /// A predicate from its raw 64 byte bits.
    pub const fn from_bits(bits: u64) -> VBool {
        VBool(bits)
    }

    /// The raw 64 byte bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// A predicate whose lane `k` of `view` is bit `k` of `mask` (bits past the view's
    /// lane count are ignored); each true lane sets all its byte bits.
    pub fn from_lanes(view: LaneView, mask: u64) -> VBool {
        let lanes = match view.lanes() {
            64 => mask,
            n => mask & ((1 << n) - 1),
        };
        // The lanes' bits spread apart, then each copied over its lane's bytes (the copies
        // land on zeros, so the product carries nothing).
        VBool(spread_lanes(view, lanes) * view.pred_bits())
    }

    /// Bit `k` is lane `k` of `view` (its lowest byte bit).
    #[inline]
    pub fn lane_mask(self, view: LaneView) -> u64 {
        pack_lanes(view, self.0)
    }

    /// Whether lane `k` of `view` is true (false past the view).
    pub fn lane(self, view: LaneView, k: usize) -> bool {
        k < view.lanes() && self.0 >> (k * view.lane_bytes()) & 1 != 0
    }

    /// Each lane of `view` made all-true or all-false by its lowest byte bit.
    pub fn normalized(self, view: LaneView) -> VBool {
        let low = match view {
            LaneView::TwoNx8 => return self,
            LaneView::Nx16 => self.0 & 0x5555_5555_5555_5555,
            LaneView::N2x32 => self.0 & 0x1111_1111_1111_1111,
        };
        let spread = (1..view.lane_bytes()).fold(low, |m, s| m | low << s);
        VBool(spread)
    }

    /// The predicate as a 16-word byte mask (`0xff` per true byte), the GSEnable image.
    pub(crate) fn byte_mask(self) -> [u32; 16] {
        std::array::from_fn(|i| {
            let nibble = ((self.0 >> (4 * i)) & 0xf) as u32;
            // Bit j of the nibble moves to bit 8j (x * 0x204081 = x | x<<7 | x<<14 | x<<21),
            // then each byte's low bit is widened to the whole byte.
            ((nibble * 0x0020_4081) & 0x0101_0101) * 0xff
        })
    }
}

/// The two results of a dual select (`dselnx16t` / `dseln_2x32t`): `lo` takes output
/// lanes `0..L`, `hi` output lanes `L..2L`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct VecPair {
    /// The high output register (the mnemonic's first operand).
    pub hi: VecReg,
    /// The low output register (the mnemonic's second operand).
    pub lo: VecReg,
}

/// 16 lanes of 64-bit addresses: the accumulator `mulusan_2x32` multiplies into.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct AddrVec {
    lanes: [u64; 16],
}

impl AddrVec {
    /// An accumulator from its 16 lanes.
    pub const fn new(lanes: [u64; 16]) -> AddrVec {
        AddrVec { lanes }
    }

    /// Every lane `addr` (a broadcast base address).
    pub const fn splat(addr: u64) -> AddrVec {
        AddrVec { lanes: [addr; 16] }
    }

    /// The 16 lanes.
    pub const fn lanes(&self) -> [u64; 16] {
        self.lanes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lane_views_share_one_little_endian_image() {
        let mut w = [0u32; 16];
        w[0] = 0x4433_2211;
        let v = VecReg::from_n_2x32(w);
        assert_eq!(v.nx16()[0], 0x2211);
        assert_eq!(v.nx16()[1], 0x4433);
        assert_eq!(v.bytes_2nx8()[..4], [0x11, 0x22, 0x33, 0x44]);
        assert_eq!(v.nx8u()[1], 0x33);
        assert_eq!(v.lane(LaneView::N2x32, 16), 0);
    }

    #[test]
    fn nx8u_zero_extends_into_16_bit_lanes() {
        let mut b = [0u8; 32];
        b[3] = 0xfe;
        let v = VecReg::from_nx8u(b);
        assert_eq!(v.nx16()[3], 0x00fe);
        assert_eq!(v.n_2x32()[1], 0x00fe_0000);
    }

    #[test]
    fn predicate_lanes_cover_their_bytes() {
        let p = VBool::from_lanes(LaneView::N2x32, 0b101);
        assert_eq!(p.bits(), 0xf0f);
        assert_eq!(p.lane_mask(LaneView::N2x32), 0b101);
        assert_eq!(p.lane_mask(LaneView::Nx16), 0b11_0011);
        assert_eq!(
            VBool::from_bits(0b0110).normalized(LaneView::Nx16).bits(),
            0b1100
        );
        assert_eq!(VBool::from_bits(0b1).byte_mask()[0], 0xff);
        assert_eq!(VBool::from_bits(0x30).byte_mask()[1], 0xffff);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// The bit-parallel forms against their definitions, lane by lane.
        #[test]
        fn lanes_pack_and_spread_as_lane_by_lane(bits in any::<u64>()) {
            for view in [LaneView::TwoNx8, LaneView::Nx16, LaneView::N2x32] {
                let p = VBool::from_bits(bits);
                let mask = (0..view.lanes()).fold(0, |m, k| m | u64::from(p.lane(view, k)) << k);
                prop_assert_eq!(p.lane_mask(view), mask);
                let mut want = 0;
                for k in (0..view.lanes()).filter(|&k| bits >> k & 1 != 0) {
                    want |= view.pred_bits() << (k * view.lane_bytes());
                }
                prop_assert_eq!(VBool::from_lanes(view, bits).bits(), want);
            }
        }

        #[test]
        fn from_lanes_lane_mask_round_trip(mask in any::<u64>()) {
            for view in [LaneView::TwoNx8, LaneView::Nx16, LaneView::N2x32] {
                let keep = if view.lanes() == 64 { u64::MAX } else { (1 << view.lanes()) - 1 };
                let p = VBool::from_lanes(view, mask);
                prop_assert_eq!(p.lane_mask(view), mask & keep);
                prop_assert_eq!(p.normalized(view), p);
            }
        }

        #[test]
        fn lane_set_get_matches_byte_image(bytes in prop::array::uniform32(any::<u8>()), k in 0usize..16, x in any::<u32>()) {
            let mut full = [0u8; 64];
            full[..32].copy_from_slice(&bytes);
            let mut v = VecReg::from_bytes_2nx8(full);
            prop_assert_eq!(v.bytes_2nx8(), full);
            v.set_lane(LaneView::N2x32, k, x);
            full[4 * k..4 * k + 4].copy_from_slice(&x.to_le_bytes());
            prop_assert_eq!(v.bytes_2nx8(), full);
            prop_assert_eq!(v.lane(LaneView::Nx16, 2 * k + 1), x >> 16);
        }
    }
}
