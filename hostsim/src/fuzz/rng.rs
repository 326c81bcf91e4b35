//! The fuzzer's one source of choices: a splitmix64 generator, optionally driven first by
//! a byte tape (libFuzzer's input), and the edge-biased pickers every generator uses.
//!
//! splitmix64 is pure integer arithmetic on a `u64`, so a seed gives the same stream on
//! every platform and toolchain. With a tape ([`Rng::from_bytes`]) each draw consumes the
//! next 8 bytes as the raw value while they last, so a coverage-guided fuzzer steers
//! every decision; once the tape runs out the generator continues from splitmix64
//! seeded with the tape's length, and a case stays a pure function of its bytes.

use dma::Dtype;
use smallvec::SmallVec;

/// A deterministic source of random choices (module docs).
#[derive(Clone, Debug)]
pub struct Rng {
    state: u64,
    tape: Vec<u8>,
    pos: usize,
}

/// The splitmix64 increment (the golden ratio in 64 bits).
const GOLDEN: u64 = 0x9e37_79b9_7f4a_7c15;

impl Rng {
    /// A generator whose stream is a function of `seed` alone.
    pub fn new(seed: u64) -> Rng {
        Rng {
            state: seed,
            tape: Vec::new(),
            pos: 0,
        }
    }

    /// A generator that plays `tape` first, 8 bytes a draw (module docs).
    pub fn from_bytes(tape: &[u8]) -> Rng {
        Rng {
            state: tape.len() as u64,
            tape: tape.to_vec(),
            pos: 0,
        }
    }

    /// The seed of case `index` of a run seeded with `seed` (independent streams).
    pub fn case_seed(seed: u64, index: u64) -> u64 {
        Rng::new(seed ^ index.wrapping_mul(GOLDEN).rotate_left(17)).next_u64()
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        if let Some(chunk) = self.tape.get(self.pos..self.pos.saturating_add(8)) {
            self.pos += 8;
            let mut raw = [0u8; 8];
            raw.copy_from_slice(chunk);
            return u64::from_le_bytes(raw);
        }
        self.state = self.state.wrapping_add(GOLDEN);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// The next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            _ => self.next_u64() % n,
        }
    }

    /// Uniform in `lo..=hi` (`lo` when `hi < lo`).
    pub fn range(&mut self, lo: u32, hi: u32) -> u32 {
        let span = u64::from(hi.saturating_sub(lo)) + 1;
        lo.saturating_add(self.below(span) as u32)
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of a non-empty array.
    pub fn pick<T: Copy, const N: usize>(&mut self, items: &[T; N]) -> T {
        const { assert!(N > 0) };
        // below(N) < N, and N > 0 is checked at compile time.
        items[self.below(N as u64) as usize]
    }

    /// One element of `items` (`None` for an empty slice).
    pub fn pick_from<T: Copy>(&mut self, items: &[T]) -> Option<T> {
        let at = self.below(items.len() as u64) as usize;
        items.get(at).copied()
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n];
        let mut words = out.chunks_exact_mut(8);
        for word in &mut words {
            word.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            tail.copy_from_slice(&self.next_u64().to_le_bytes()[..tail.len()]);
        }
        out
    }

    /// One dtype, each equally likely.
    pub fn dtype(&mut self) -> Dtype {
        self.pick(&Dtype::ALL)
    }

    /// One dtype of at most 4 bytes (what the POOL instructions move), each equally
    /// likely.
    pub fn pool_dtype(&mut self) -> Dtype {
        let pool: SmallVec<[Dtype; 10]> =
            Dtype::ALL.into_iter().filter(|d| d.size() <= 4).collect();
        self.pick_from(&pool).unwrap_or(Dtype::U8)
    }

    /// An index near the edges of the valid range `[lo, lo + len)`, at most `max` (the
    /// index dtype's all-ones sentinel): inside, at `end - 1`, at `end`, just past it,
    /// below `lo`, the sentinel itself, or any value.
    pub fn edge_index(&mut self, lo: u32, len: u32, max: u32) -> u32 {
        let end = lo.saturating_add(len);
        let v = match self.below(100) {
            0..=44 => lo.saturating_add(self.below(u64::from(len)) as u32),
            45..=54 => end.saturating_sub(1),
            55..=64 => end,
            65..=69 => end.saturating_add(self.range(1, 4)),
            70..=74 => lo.wrapping_sub(1),
            75..=82 => lo,
            83..=90 => max,
            _ => self.next_u32(),
        };
        v.min(max)
    }

    /// `n` indices from [`Rng::edge_index`], a third of the time with duplicates drawn
    /// from the values already chosen, and now and then every one out of range.
    pub fn edge_indices(&mut self, n: usize, lo: u32, len: u32, max: u32) -> Vec<u32> {
        let all_oob = self.chance(8);
        let dups = self.chance(33);
        let mut out: Vec<u32> = Vec::with_capacity(n);
        for _ in 0..n {
            let v = match (all_oob, dups && !out.is_empty() && self.chance(40)) {
                (true, _) => lo.saturating_add(len).saturating_add(self.below(3) as u32),
                (false, true) => self.pick_from(&out).unwrap_or(lo),
                (false, false) => self.edge_index(lo, len, max),
            };
            out.push(v.min(max));
        }
        out
    }

    /// An element count biased to the limits around `limit` (4096 indices): none, 1, a
    /// few, `limit` and `limit + 1`, or up to `small`.
    pub fn edge_count(&mut self, small: u32, limit: u32) -> u32 {
        match self.below(100) {
            0..=2 => 0,
            3..=9 => 1,
            10..=13 => limit,
            14..=16 => limit.saturating_add(1),
            _ => self.range(1, small.max(1)),
        }
    }

    /// The first of `n` consecutive partitions out of `of`: the first partition, the
    /// last start that fits (so the run ends on the last partition), or any start.
    pub fn edge_partition(&mut self, n: u32, of: u32) -> u32 {
        let last = of.saturating_sub(n);
        match self.below(4) {
            0 => 0,
            1 => last,
            _ => self.range(0, last),
        }
    }

    /// `n` elements of `dtype` as little-endian bytes: random, with the special values
    /// mixed in (NaN payloads, signed zeros, infinities, the smallest subnormal, the
    /// largest and smallest integers).
    pub fn edge_data(&mut self, dtype: Dtype, n: usize) -> Vec<u8> {
        let mut out = vec![0u8; n.saturating_mul(dtype.size())];
        match dtype.size() {
            1 => self.edge_elements::<1>(dtype, &mut out),
            2 => self.edge_elements::<2>(dtype, &mut out),
            4 => self.edge_elements::<4>(dtype, &mut out),
            _ => self.edge_elements::<8>(dtype, &mut out),
        }
        out
    }

    /// [`Rng::edge_data`] into `out`, elements of `SIZE` bytes (a copy of a known size per
    /// element, not a call to `memcpy`).
    fn edge_elements<const SIZE: usize>(&mut self, dtype: Dtype, out: &mut [u8]) {
        let specials = specials(dtype);
        for element in out.chunks_exact_mut(SIZE) {
            let v = match self.chance(30) {
                true => self.pick_from(specials).unwrap_or(0),
                // 32 random bits per element up to 4 bytes (the streams of seeds stay)
                false if SIZE > 4 => self.next_u64(),
                false => u64::from(self.next_u32()),
            };
            element.copy_from_slice(&v.to_le_bytes()[..SIZE]);
        }
    }
}

/// The special bit patterns of `dtype` (low bytes of each value are used).
fn specials(dtype: Dtype) -> &'static [u64] {
    const F32: [u64; 10] = [
        0x7fc0_0000, // quiet NaN
        0xffc0_0001, // negative NaN with payload
        0x7f80_0001, // signalling NaN
        0x8000_0000, // -0.0
        0x0000_0000, // +0.0
        0x7f80_0000, // +inf
        0xff80_0000, // -inf
        0x0000_0001, // smallest subnormal
        0x7f7f_ffff, // largest finite
        0x3f80_0000, // 1.0
    ];
    const HALF: [u64; 8] = [
        0x7e00, 0xfe01, 0x7c01, 0x8000, 0x0000, 0x7c00, 0xfc00, 0x0001,
    ];
    const BF16: [u64; 8] = [
        0x7fc0, 0xffc1, 0x7f81, 0x8000, 0x0000, 0x7f80, 0xff80, 0x0001,
    ];
    const INT: [u64; 6] = [0, 1, 0x7f, 0x80, 0x7fff_ffff, 0xffff_ffff];
    const INT16: [u64; 5] = [0, 1, 0x7fff, 0x8000, 0xffff];
    const INT64: [u64; 8] = [
        0,
        1,
        0x7fff_ffff_ffff_ffff, // i64::MAX
        0x8000_0000_0000_0000, // i64::MIN
        u64::MAX,              // -1
        0x0000_0000_0100_0001, // 2^24 + 1: rounds in f32
        0x0000_0000_ffff_ffff, // past i32
        0xffff_ffff_8000_0000, // i32::MIN sign-extended
    ];
    match dtype {
        Dtype::F32 => &F32,
        Dtype::F16 => &HALF,
        Dtype::Bf16 => &BF16,
        Dtype::U16 | Dtype::I16 => &INT16,
        Dtype::I64 => &INT64,
        _ => &INT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_stream_on_every_platform() {
        // splitmix64's published first outputs for seed 0
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        let (mut a, mut b) = (Rng::new(99), Rng::new(99));
        assert_eq!(a.bytes(13), b.bytes(13));
        // bytes are the draws' little-endian bytes in order, the last one cut short
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        let want: Vec<u8> = (0..3).flat_map(|_| b.next_u64().to_le_bytes()).collect();
        assert_eq!(a.bytes(21), want[..21]);
        assert_eq!(a.next_u64(), b.next_u64());
        assert_ne!(Rng::case_seed(1, 0), Rng::case_seed(1, 1));
        assert_eq!(Rng::case_seed(5, 7), Rng::case_seed(5, 7));
    }

    #[test]
    fn a_tape_drives_the_draws_then_splitmix_continues() {
        let mut tape = 7u64.to_le_bytes().to_vec();
        tape.extend_from_slice(&[1, 2, 3]);
        let mut r = Rng::from_bytes(&tape);
        assert_eq!(r.next_u64(), 7);
        // 3 bytes left: not a whole draw, so splitmix64 seeded with the length (11)
        let mut expect = Rng::new(11);
        assert_eq!(r.next_u64(), expect.next_u64());
        assert_eq!(Rng::from_bytes(&[]).pick_from::<u8>(&[]), None);
        assert_eq!(Rng::new(1).pick(&[4]), 4);
        let mut r = Rng::new(2);
        assert_eq!((r.below(0), r.range(9, 2)), (0, 9));
        assert!((0..200).all(|_| (3..=5).contains(&r.range(3, 5))));
        assert_eq!(r.range(u32::MAX, u32::MAX), u32::MAX);
    }

    #[test]
    fn edge_indices_reach_every_edge() {
        let mut r = Rng::new(3);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..400 {
            seen.extend(r.edge_indices(8, 512, 10, u32::MAX));
        }
        for v in [511, 512, 521, 522, u32::MAX] {
            assert!(seen.contains(&v), "{v} never drawn");
        }
        let narrow: Vec<u32> = (0..500).map(|_| r.edge_index(0, 300, 0xff)).collect();
        assert_eq!(narrow.iter().max(), Some(&0xff));
        let counts: Vec<u32> = (0..500).map(|_| r.edge_count(40, 4096)).collect();
        for n in [0, 1, 4096, 4097] {
            assert!(counts.contains(&n), "count {n} never drawn");
        }
        let starts: Vec<u32> = (0..200).map(|_| r.edge_partition(16, 128)).collect();
        assert!(starts.contains(&0) && starts.contains(&112));
        assert_eq!(starts.iter().max(), Some(&112));
        assert_eq!(r.edge_partition(200, 128), 0);
    }

    #[test]
    fn edge_data_holds_nan_and_signed_zero() {
        let mut r = Rng::new(8);
        let data = r.edge_data(Dtype::F32, 400);
        assert_eq!(data.len(), 1600);
        let words: Vec<u32> = data
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert!(words.contains(&0x8000_0000));
        assert!(words.iter().any(|w| f32::from_bits(*w).is_nan()));
        assert_eq!(r.edge_data(Dtype::Bf16, 3).len(), 6);
    }
}
