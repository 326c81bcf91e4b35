//! The SuperGather memory port: the small trait every gather and scatter goes through, and
//! [`MemTable`], the flat little-endian byte table that implements it for tests and kernels.
//!
//! # Contract of [`MemPort`]
//!
//! - An access names a byte address and an [`ElemSize`] of 1, 2 or 4 bytes; values are
//!   little-endian and need no alignment.
//! - The port alone decides bounds: an access whose bytes are not all inside the port is
//!   refused (`load` gives `None`, `store` gives `false` and writes nothing). The engine
//!   then treats the lane as dead: a gather lane drains 0, a scatter or scatterinc lane
//!   does nothing. The engine never touches memory any other way.
//! - `store` writes the low `elem_sz` bytes of `value`; `load` returns the element
//!   zero-extended to 32 bits.
//!
//! Adapters (a DGE or POOL view of the fabric) implement the two methods; the engine is
//! generic over the port, so calls are static and inline.

use crate::control::ElemSize;

/// A bounds-checked, little-endian element port (module docs give the contract).
pub trait MemPort {
    /// The `elem_sz`-byte element at `addr`, zero-extended, or `None` if any of its bytes
    /// is outside the port.
    fn load(&self, addr: u64, elem_sz: ElemSize) -> Option<u32>;

    /// Writes the low `elem_sz` bytes of `value` at `addr`; `false` (and nothing written)
    /// if any of those bytes is outside the port.
    fn store(&mut self, addr: u64, elem_sz: ElemSize, value: u32) -> bool;

    /// The `out.len()` consecutive `elem_sz`-byte elements from `addr` into `out`, each as
    /// [`MemPort::load`] gives it; `false` (and `out` unspecified) unless `load` answers
    /// every one. The default loads them one by one; a port over flat bytes reads the
    /// run at once.
    fn load_run(&self, addr: u64, elem_sz: ElemSize, out: &mut [u32]) -> bool {
        load_each(self, addr, elem_sz, out)
    }
}

/// Decodes `bytes`, consecutive little-endian `elem_sz`-byte elements, into `out`
/// zero-extended (as many as both hold).
#[inline]
pub fn decode_run(bytes: &[u8], elem_sz: ElemSize, out: &mut [u32]) {
    let decoded = out
        .iter_mut()
        .zip(bytes.chunks_exact(elem_sz.bytes() as usize));
    match elem_sz {
        ElemSize::B1 => decoded.for_each(|(o, b)| *o = u32::from(b[0])),
        ElemSize::B2 => decoded.for_each(|(o, b)| *o = u32::from(u16::from_le_bytes([b[0], b[1]]))),
        ElemSize::B4 => {
            decoded.for_each(|(o, b)| *o = u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        }
    }
}

/// [`MemPort::load_run`] element by element through [`MemPort::load`] (the default, for
/// ports whose runs have no faster way).
pub fn load_each<P: MemPort + ?Sized>(
    port: &P,
    addr: u64,
    elem_sz: ElemSize,
    out: &mut [u32],
) -> bool {
    let mut at = Some(addr);
    out.iter_mut().all(|slot| {
        let value = at.and_then(|a| port.load(a, elem_sz));
        at = at.and_then(|a| a.checked_add(elem_sz.bytes()));
        value.map(|v| *slot = v).is_some()
    })
}

/// A flat little-endian byte table at addresses `base .. base + len` (seed 004's shared
/// MemTable; `base` is 0 unless the table is a window of a larger memory).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct MemTable {
    base: u64,
    bytes: Vec<u8>,
}

impl MemTable {
    /// A zero-filled table of `len` bytes.
    pub fn zeroed(len: usize) -> MemTable {
        MemTable::from_bytes(vec![0; len])
    }

    /// A table holding `bytes` (byte `i` at address `i`).
    pub fn from_bytes(bytes: Vec<u8>) -> MemTable {
        MemTable::window_at(0, bytes)
    }

    /// A table whose byte `i` is at address `base + i`: a window of a larger memory
    /// (the DGE's view of an index tensor on the fabric).
    pub fn window_at(base: u64, bytes: Vec<u8>) -> MemTable {
        MemTable { base, bytes }
    }

    /// The table image.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The table image, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes
    }

    /// The table image, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The table size in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the table has no bytes (every access is refused).
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The `N` bytes at `addr`, or `None` if they are not all inside the table.
    #[inline]
    fn window<const N: usize>(&self, addr: u64) -> Option<[u8; N]> {
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        let src = self.bytes.get(start..start.checked_add(N)?)?;
        src.try_into().ok()
    }

    /// The `N` writable bytes at `addr`, or `None` if they are not all inside the table.
    #[inline]
    fn window_mut<const N: usize>(&mut self, addr: u64) -> Option<&mut [u8]> {
        let start = usize::try_from(addr.checked_sub(self.base)?).ok()?;
        self.bytes.get_mut(start..start.checked_add(N)?)
    }
}

impl From<Vec<u8>> for MemTable {
    fn from(bytes: Vec<u8>) -> MemTable {
        MemTable::from_bytes(bytes)
    }
}

impl MemPort for MemTable {
    #[inline]
    fn load(&self, addr: u64, elem_sz: ElemSize) -> Option<u32> {
        Some(match elem_sz {
            ElemSize::B1 => u32::from(self.window::<1>(addr)?[0]),
            ElemSize::B2 => u32::from(u16::from_le_bytes(self.window(addr)?)),
            ElemSize::B4 => u32::from_le_bytes(self.window(addr)?),
        })
    }

    #[inline]
    fn load_run(&self, addr: u64, elem_sz: ElemSize, out: &mut [u32]) -> bool {
        if out.is_empty() {
            return true;
        }
        let size = elem_sz.bytes() as usize;
        let bytes = addr.checked_sub(self.base).and_then(|start| {
            let len = out.len().checked_mul(size)?;
            // every element starts inside the 64-bit address space, as `load` needs
            addr.checked_add((len - size) as u64)?;
            let start = usize::try_from(start).ok()?;
            self.bytes.get(start..start.checked_add(len)?)
        });
        match bytes {
            Some(bytes) => {
                decode_run(bytes, elem_sz, out);
                true
            }
            None => false,
        }
    }

    #[inline]
    fn store(&mut self, addr: u64, elem_sz: ElemSize, value: u32) -> bool {
        let le = value.to_le_bytes();
        let (dst, src) = match elem_sz {
            ElemSize::B1 => (self.window_mut::<1>(addr), &le[..1]),
            ElemSize::B2 => (self.window_mut::<2>(addr), &le[..2]),
            ElemSize::B4 => (self.window_mut::<4>(addr), &le[..]),
        };
        match dst {
            Some(dst) => {
                dst.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_answers_only_inside_its_range() {
        let mut t = MemTable::window_at(0x1000, vec![1, 2, 3, 4, 5]);
        assert_eq!(t.load(0x1001, ElemSize::B4), Some(0x0504_0302));
        assert_eq!(t.load(0x0fff, ElemSize::B1), None);
        assert_eq!(t.load(0x1002, ElemSize::B4), None);
        assert!(t.store(0x1004, ElemSize::B1, 9));
        assert!(!t.store(0x1004, ElemSize::B2, 9));
        assert_eq!(t.as_bytes(), &[1, 2, 3, 4, 9]);
    }
    use proptest::prelude::*;

    fn iota(n: usize) -> MemTable {
        MemTable::from_bytes((0..n).map(|i| i as u8).collect())
    }

    #[test]
    fn loads_are_little_endian_and_unaligned() {
        let t = iota(16);
        assert_eq!(t.load(5, ElemSize::B1), Some(5));
        assert_eq!(t.load(5, ElemSize::B2), Some(0x0605));
        assert_eq!(t.load(5, ElemSize::B4), Some(0x0807_0605));
    }

    #[test]
    fn an_element_straddling_the_end_is_refused() {
        let mut t = iota(16);
        assert_eq!(t.load(12, ElemSize::B4), Some(0x0f0e_0d0c));
        assert_eq!(t.load(13, ElemSize::B4), None);
        assert_eq!(t.load(u64::MAX, ElemSize::B1), None);
        assert!(!t.store(15, ElemSize::B2, 0xaaaa));
        assert_eq!(t.as_bytes()[15], 15);
    }

    #[test]
    fn store_writes_only_the_low_bytes() {
        let mut t = MemTable::zeroed(8);
        assert!(t.store(1, ElemSize::B2, 0xdead_beef));
        assert_eq!(t.as_bytes(), &[0, 0xef, 0xbe, 0, 0, 0, 0, 0]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn store_then_load_round_trips_in_bounds(addr in 0u64..40, v in any::<u32>(), e in 0usize..3) {
            let elem_sz = [ElemSize::B1, ElemSize::B2, ElemSize::B4][e];
            let mut t = MemTable::zeroed(32);
            let fits = addr + elem_sz.bytes() <= 32;
            prop_assert_eq!(t.store(addr, elem_sz, v), fits);
            let expect = fits.then_some(v & elem_sz.mask());
            prop_assert_eq!(t.load(addr, elem_sz), expect);
            if !fits {
                prop_assert_eq!(t.as_bytes(), &[0u8; 32][..]);
            }
        }

        /// A run read at once answers exactly as its elements loaded one by one.
        #[test]
        fn a_run_loads_as_its_elements_do(
            base in prop_oneof![0u64..8, Just(u64::MAX - 16)],
            addr in prop_oneof![0u64..48, Just(u64::MAX - 20), Just(u64::MAX)],
            n in 0usize..33,
            e in 0usize..3,
        ) {
            let elem_sz = [ElemSize::B1, ElemSize::B2, ElemSize::B4][e];
            let t = MemTable::window_at(base, (0..32u8).map(|b| b.wrapping_mul(37)).collect());
            let mut run = vec![0u32; n];
            let one_by_one: Option<Vec<u32>> = (0..n as u64)
                .map(|k| addr.checked_add(k * elem_sz.bytes()).and_then(|a| t.load(a, elem_sz)))
                .collect();
            let all = t.load_run(addr, elem_sz, &mut run);
            prop_assert_eq!(all, one_by_one.is_some());
            if let Some(want) = one_by_one {
                prop_assert_eq!(run, want);
            }
        }
    }
}
