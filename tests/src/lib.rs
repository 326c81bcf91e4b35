//! # conformance — cross-crate integration and conformance helpers
//!
//! What the integration tests in `tests/tests/` share:
//!
//! - [`Rng`]: a small deterministic generator (splitmix64), so a case is a pure function
//!   of its seed and a failing seed reproduces exactly;
//! - [`cases`]: random instruction streams over the four datapaths of seed 000 section 7
//!   (GATHER with its POOL_BUFFER_LOAD, INDIRECT_COPY, DMA_INDIRECT, the embedding update)
//!   plus DMA_MEMCPY, with their inputs written to a fabric ([`cases::Case`]);
//! - [`lanes`]: running one case on several mechanisms (the reference, the POOL kernels,
//!   the DGE + DMA engine) on clones of its fabric and comparing them instruction by
//!   instruction ([`lanes::Lanes`]).
//!
//! The numpy-style expectations of the NKI-level tests are written in the test files
//! themselves, independently of everything here.

pub mod cases;
pub mod lanes;

/// A splitmix64 generator: deterministic, seedable, good enough for test inputs.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream is a function of `seed` alone.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
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
        lo + self.below(span) as u32
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }

    /// One element of a non-empty slice.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.below(items.len() as u64) as usize]
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic_and_in_range() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<u64> = (0..8).map(|_| a.next_u64()).collect();
        let ys: Vec<u64> = (0..8).map(|_| b.next_u64()).collect();
        assert_eq!(xs, ys);
        // splitmix64's first output for seed 0
        assert_eq!(Rng::new(0).next_u64(), 0xe220_a839_7b1d_cdaf);
        for _ in 0..1000 {
            let r = a.range(3, 5);
            assert!((3..=5).contains(&r));
        }
        assert_eq!(a.below(0), 0);
        assert_eq!(a.range(9, 2), 9);
        assert_eq!(a.bytes(5).len(), 5);
    }
}
