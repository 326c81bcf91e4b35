//! The fabric's page table: where the storage of each 64 KiB page lives, by page key
//! (`fabric address >> 16`).
//!
//! The keys of the three windows of the address map are folded onto one dense index: the
//! 512 keys of the SBUF window (128 partitions at a 256 KiB stride) first, then the 32 of
//! the PSUM window (128 partitions at 16 KiB), then the HBM keys: a fabric using SBUF and
//! the low HBM needs one leaf, and dense-indexed bitmaps of its pages stay short. A two-level
//! table over the dense index, a directory of leaves of [`LEAF`] entries (64 MiB of address
//! space each, allocated when a page in them first is), turns a lookup into a few compares
//! and two indexed loads, with no hashing: the engine looks a page up for nearly every
//! descriptor of a random gather. An empty table allocates nothing; entries come out in
//! ascending key order.

use crate::addr::{PSUM_BASE, PSUM_STRIDE, SBUF_BASE, SBUF_STRIDE};
use crate::generation::PARTITIONS;

/// Address bits below a page key.
const PAGE_SHIFT: u32 = 16;
/// Dense-index bits inside one leaf.
const LEAF_SHIFT: u32 = 10;
/// Entries of one leaf.
pub(crate) const LEAF: usize = 1 << LEAF_SHIFT;

const SBUF_KEY: u64 = SBUF_BASE >> PAGE_SHIFT;
const SBUF_KEYS: u64 = (PARTITIONS as u64 * SBUF_STRIDE) >> PAGE_SHIFT;
const PSUM_KEY: u64 = PSUM_BASE >> PAGE_SHIFT;
const PSUM_KEYS: u64 = (PARTITIONS as u64 * PSUM_STRIDE).div_ceil(1 << PAGE_SHIFT);
const _: () = assert!(SBUF_KEY + SBUF_KEYS <= PSUM_KEY);
/// Dense indices of the SBUF and PSUM windows, before the HBM keys'.
const WINDOW_KEYS: u64 = SBUF_KEYS + PSUM_KEYS;

/// Pages of type `P` by page key.
pub(crate) struct PageTable<P> {
    dir: Vec<Option<Leaf<P>>>,
    hbm_keys: u64,
    len: usize,
}

/// One leaf: its entries, and a bit per entry that holds a page (an entry is never
/// emptied), so that walking or mapping a table costs what its pages number, not what
/// its leaves hold. Both boxed: a directory entry stays three words.
struct Leaf<P> {
    pages: Box<[Option<P>]>,
    held: Box<[u64; LEAF / 64]>,
}

impl<P> Leaf<P> {
    fn new() -> Leaf<P> {
        Leaf {
            pages: std::iter::repeat_with(|| None).take(LEAF).collect(),
            held: Box::new([0; LEAF / 64]),
        }
    }

    /// The offsets of the entries that hold a page, ascending.
    fn held(&self) -> impl Iterator<Item = usize> + '_ {
        self.held.iter().enumerate().flat_map(|(w, &bits)| {
            let rest = |&b: &u64| (b & (b - 1) != 0).then(|| b & (b - 1));
            std::iter::successors((bits != 0).then_some(bits), rest)
                .map(move |b| w * 64 + b.trailing_zeros() as usize)
        })
    }

    /// Each held entry's dense index (this being leaf `d`) and page, ascending.
    fn pages(&self, d: usize) -> impl Iterator<Item = (usize, &P)> + '_ {
        self.held()
            .filter_map(move |j| Some(((d << LEAF_SHIFT) + j, self.pages.get(j)?.as_ref()?)))
    }
}

impl<P> PageTable<P> {
    /// An empty table for a fabric of `hbm_bytes` of HBM.
    pub(crate) fn new(hbm_bytes: u64) -> PageTable<P> {
        PageTable {
            dir: Vec::new(),
            hbm_keys: hbm_bytes.div_ceil(1 << PAGE_SHIFT),
            len: 0,
        }
    }

    /// Pages held.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The dense index of `key`, or `None` for a key in no window.
    #[inline(always)]
    pub(crate) fn dense(&self, key: u64) -> Option<usize> {
        let i = if key < self.hbm_keys {
            WINDOW_KEYS + key
        } else if key.wrapping_sub(SBUF_KEY) < SBUF_KEYS {
            key - SBUF_KEY
        } else if key.wrapping_sub(PSUM_KEY) < PSUM_KEYS {
            SBUF_KEYS + (key - PSUM_KEY)
        } else {
            return None;
        };
        usize::try_from(i).ok()
    }

    /// The key of dense index `i` (the inverse of [`PageTable::dense`]).
    fn key(&self, i: usize) -> u64 {
        let i = i as u64;
        if i < SBUF_KEYS {
            SBUF_KEY + i
        } else if i < WINDOW_KEYS {
            PSUM_KEY + (i - SBUF_KEYS)
        } else {
            i - WINDOW_KEYS
        }
    }

    /// The page of `key`, if it has one.
    #[inline(always)]
    pub(crate) fn get(&self, key: u64) -> Option<&P> {
        let i = self.dense(key)?;
        let leaf = self.dir.get(i >> LEAF_SHIFT)?.as_ref()?;
        leaf.pages.get(i & (LEAF - 1))?.as_ref()
    }

    /// The page at dense index `i` ([`PageTable::dense`]), if it has one.
    pub(crate) fn get_dense_mut(&mut self, i: usize) -> Option<&mut P> {
        let leaf = self.dir.get_mut(i >> LEAF_SHIFT)?.as_mut()?;
        leaf.pages.get_mut(i & (LEAF - 1))?.as_mut()
    }

    /// The page of `key`, made by `make` if it has none; `None` for a key in no window.
    pub(crate) fn get_or_insert_with(
        &mut self,
        key: u64,
        make: impl FnOnce() -> P,
    ) -> Option<&mut P> {
        let i = self.dense(key)?;
        let d = i >> LEAF_SHIFT;
        if self.dir.len() <= d {
            self.dir.resize_with(d + 1, || None);
        }
        let leaf = self.dir.get_mut(d)?.get_or_insert_with(Leaf::new);
        let j = i & (LEAF - 1);
        let slot = leaf.pages.get_mut(j)?;
        if slot.is_none() {
            self.len += 1;
            leaf.held[j / 64] |= 1 << (j % 64);
        }
        Some(slot.get_or_insert_with(make))
    }

    /// Every page with its key, in ascending key order: the HBM keys', then the SBUF
    /// and PSUM windows' (which lie above them).
    pub(crate) fn iter(&self) -> impl Iterator<Item = (u64, &P)> + '_ {
        let windows = WINDOW_KEYS as usize;
        self.dense_range(windows..usize::MAX)
            .chain(self.dense_range(0..windows))
    }

    /// The pages of dense indices `range`, in dense order, with their keys.
    fn dense_range(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = (u64, &P)> + '_ {
        self.dir
            .iter()
            .enumerate()
            .filter_map(|(d, leaf)| Some((d, leaf.as_ref()?)))
            .flat_map(move |(d, leaf)| {
                let range = range.clone();
                leaf.pages(d)
                    .filter(move |(i, _)| range.contains(i))
                    .map(|(i, page)| (self.key(i), page))
            })
    }

    /// The same keys with each page mapped by `f` (given its key).
    pub(crate) fn map<Q>(&self, mut f: impl FnMut(u64, &P) -> Q) -> PageTable<Q> {
        let dir = self
            .dir
            .iter()
            .enumerate()
            .map(|(d, leaf)| {
                let leaf = leaf.as_ref()?;
                let mut mapped = Leaf::new();
                for (i, page) in leaf.pages(d) {
                    if let Some(slot) = mapped.pages.get_mut(i & (LEAF - 1)) {
                        *slot = Some(f(self.key(i), page));
                    }
                }
                *mapped.held = *leaf.held;
                Some(mapped)
            })
            .collect();
        PageTable {
            dir,
            hbm_keys: self.hbm_keys,
            len: self.len,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    const HBM: u64 = 32 << 30;

    /// Keys from every window, biased to the windows' edges and leaf edges, and keys in
    /// no window.
    fn arb_key() -> impl Strategy<Value = u64> {
        let hbm = HBM >> PAGE_SHIFT;
        prop_oneof![
            0..hbm,
            (hbm - 3..hbm + 3),
            (0..4u64).prop_map(|k| k * LEAF as u64 + 1023),
            // the HBM keys at the edges of a leaf of dense indices
            (1..4u64, 0..2u64).prop_map(|(k, d)| k * LEAF as u64 - WINDOW_KEYS - d),
            SBUF_KEY - 2..SBUF_KEY + SBUF_KEYS + 2,
            PSUM_KEY - 2..PSUM_KEY + PSUM_KEYS + 2,
            Just(u64::MAX),
        ]
    }

    fn in_window(key: u64) -> bool {
        key < HBM >> PAGE_SHIFT
            || (SBUF_KEY..SBUF_KEY + SBUF_KEYS).contains(&key)
            || (PSUM_KEY..PSUM_KEY + PSUM_KEYS).contains(&key)
    }

    proptest! {
        /// The table against a BTreeMap: the same pages, the same order, nothing for keys
        /// in no window.
        #[test]
        fn the_table_is_an_ordered_map_of_the_window_keys(
            keys in proptest::collection::vec(arb_key(), 0..200),
            probes in proptest::collection::vec(arb_key(), 0..50),
        ) {
            let mut table = PageTable::new(HBM);
            let mut reference = BTreeMap::new();
            for (n, &key) in keys.iter().enumerate() {
                let got = table.get_or_insert_with(key, || n).copied();
                prop_assert_eq!(got.is_some(), in_window(key));
                if in_window(key) {
                    let want = *reference.entry(key).or_insert(n);
                    prop_assert_eq!(got, Some(want));
                }
            }
            prop_assert_eq!(table.len(), reference.len());
            let listed: Vec<(u64, usize)> = table.iter().map(|(k, &v)| (k, v)).collect();
            let expected: Vec<(u64, usize)> = reference.iter().map(|(&k, &v)| (k, v)).collect();
            prop_assert_eq!(&listed, &expected);
            for key in probes.iter().chain(&keys) {
                prop_assert_eq!(table.get(*key), reference.get(key));
                prop_assert_eq!(table.get(*key).is_some(), reference.contains_key(key));
            }
            // each page mapped with its own key
            let doubled = table.map(|k, v| (k, v * 2));
            let listed: Vec<(u64, (u64, usize))> = doubled.iter().map(|(k, &v)| (k, v)).collect();
            let expected: Vec<(u64, (u64, usize))> =
                reference.iter().map(|(&k, &v)| (k, (k, 2 * v))).collect();
            prop_assert_eq!(listed, expected);
        }
    }

    #[test]
    fn an_empty_table_allocates_nothing_and_the_last_keys_fit() {
        let table: PageTable<u8> = PageTable::new(144 << 30);
        assert_eq!(table.dir.capacity(), 0);
        let mut table: PageTable<u8> = PageTable::new(144 << 30);
        let last_hbm = (144u64 << 30 >> PAGE_SHIFT) - 1;
        for key in [last_hbm, SBUF_KEY + SBUF_KEYS - 1, PSUM_KEY + PSUM_KEYS - 1] {
            assert_eq!(table.get_or_insert_with(key, || 7), Some(&mut 7));
        }
        assert_eq!(table.get_or_insert_with(last_hbm + 1, || 1), None);
        assert_eq!(table.len(), 3);
    }
}
