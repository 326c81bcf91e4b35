//! The POOL kernels' view of memory: [`FabricPort`], the [`ivp::MemPort`] adapter over the
//! `dma` fabric, [`StagedWrites`], the stores a kernel commits only once it has succeeded,
//! [`SlicePort`] over a Pool_Buffer window, and [`move_rows`] for whole-row moves and
//! reductions.
//!
//! # Fail closed
//!
//! A kernel never writes the fabric while it runs. Loads go through the fabric's one
//! bounds-checked read path (a lane whose element is off the fabric is refused, so the
//! SuperGather drains it as 0: a dead lane). Stores go only into *staged* ranges: a range
//! is copied out of the fabric with [`FabricPort::stage`], scatters and slice copies land
//! in the copy, and [`FabricPort::into_writes`] hands back the changed ranges as
//! [`StagedWrites`]. A store outside every staged range is refused (a dead lane, which
//! the kernel turns into an error). Only when the whole instruction has succeeded does
//! [`StagedWrites::commit`] write the ranges, in staging order. Every committed range was
//! checked on the fabric when it was staged, so the commit cannot fail half way.
//!
//! The DMA-side kernels (DMA_INDIRECT, EMBEDDING_UPDATE) instead plan every row first
//! (indices, bounds, addresses, duplicates) and only then move rows with [`move_rows`],
//! which cannot fail on a planned row.

use dma::compute::{self, ComputeOp};
use dma::{Dtype, Fabric, FabricAddr};
use ivp::{ElemSize, MemPort};
use smallvec::SmallVec;

use crate::error::Error;

/// A copy of `[base, base + bytes.len())` of the fabric that loads read and stores write.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Staged {
    base: u64,
    bytes: Vec<u8>,
    dirty: bool,
}

impl Staged {
    /// One past the last byte; staging checked the range, so this does not overflow.
    fn end(&self) -> u64 {
        self.base + self.bytes.len() as u64
    }

    /// The offset of `[addr, addr + n)` in the copy, if it lies inside.
    #[inline]
    fn offset(&self, addr: u64, n: u64) -> Option<usize> {
        let off = addr.checked_sub(self.base)?;
        (off.checked_add(n)? <= self.bytes.len() as u64).then_some(off as usize)
    }
}

/// Little-endian value of up to four bytes.
fn le_value(bytes: &[u8]) -> u32 {
    bytes.iter().rev().fold(0u32, |v, &b| v << 8 | u32::from(b))
}

/// The memory port of a POOL kernel over the fabric (module docs).
pub struct FabricPort<'f> {
    fabric: &'f Fabric,
    staged: SmallVec<[Staged; 2]>,
}

impl<'f> FabricPort<'f> {
    /// A port with nothing staged: every load reads the fabric, every store is refused.
    pub fn new(fabric: &'f Fabric) -> FabricPort<'f> {
        FabricPort {
            fabric,
            staged: SmallVec::new(),
        }
    }

    /// Copies `[addr, addr + len)` out of the fabric (checked: one region, no overflow)
    /// so that loads there read the copy and stores there are allowed. A staged range it
    /// overlaps or touches in the same region is merged in, keeping its staged bytes.
    /// Callers stage bounded ranges (a partition's span, an index tensor).
    pub fn stage(&mut self, addr: FabricAddr, len: u64) -> Result<(), Error> {
        let region = self.fabric.check(addr, len)?;
        let (region_lo, region_hi) = (region.base, region.base + region.len);
        // check proved `addr + len` does not overflow.
        let (mut lo, mut hi) = (addr.0, addr.0 + len);
        let mut merged: SmallVec<[Staged; 2]> = SmallVec::new();
        let mut kept: SmallVec<[Staged; 2]> = SmallVec::new();
        for s in self.staged.drain(..) {
            let same_region = region_lo <= s.base && s.end() <= region_hi;
            if same_region && s.base <= hi && lo <= s.end() {
                (lo, hi) = (lo.min(s.base), hi.max(s.end()));
                merged.push(s);
            } else {
                kept.push(s);
            }
        }
        let mut bytes = vec![0u8; usize::try_from(hi - lo).map_err(|_| too_long(lo, hi))?];
        self.fabric.read(FabricAddr(lo), &mut bytes)?;
        let mut dirty = false;
        for s in merged {
            // `s` lies inside [lo, hi) by construction of the union.
            let at = (s.base - lo) as usize;
            if let Some(dst) = bytes.get_mut(at..at + s.bytes.len()) {
                dst.copy_from_slice(&s.bytes);
            }
            dirty |= s.dirty;
        }
        kept.push(Staged {
            base: lo,
            bytes,
            dirty,
        });
        self.staged = kept;
        Ok(())
    }

    /// The staged bytes `[addr, addr + len)`, writable (the range is marked changed), or
    /// `None` if they are not inside one staged range.
    pub fn staged_mut(&mut self, addr: FabricAddr, len: usize) -> Option<&mut [u8]> {
        self.staged.iter_mut().find_map(|s| {
            let off = s.offset(addr.0, len as u64)?;
            s.dirty = true;
            s.bytes.get_mut(off..off + len)
        })
    }

    /// The staged ranges that stores changed, to commit once the kernel has succeeded.
    pub fn into_writes(self) -> StagedWrites {
        let mut w = StagedWrites::new();
        for s in self.staged.into_iter().filter(|s| s.dirty) {
            w.bytes.extend_from_slice(&s.bytes);
            w.ranges.push((FabricAddr(s.base), w.bytes.len()));
        }
        w
    }

    #[inline]
    fn staged_bytes(&self, addr: u64, n: u64) -> Option<&[u8]> {
        self.staged.iter().find_map(|s| {
            let off = s.offset(addr, n)?;
            s.bytes.get(off..off + n as usize)
        })
    }
}

fn too_long(lo: u64, hi: u64) -> Error {
    Error::Dma(dma::Error::AddressOverflow {
        addr: lo,
        len: hi - lo,
    })
}

impl MemPort for FabricPort<'_> {
    #[inline]
    fn load(&self, addr: u64, elem_sz: ElemSize) -> Option<u32> {
        let n = elem_sz.bytes();
        if let Some(b) = self.staged_bytes(addr, n) {
            return Some(le_value(b));
        }
        let mut buf = [0u8; 4];
        let buf = buf.get_mut(..n as usize)?;
        self.fabric.read(FabricAddr(addr), buf).ok()?;
        Some(le_value(buf))
    }

    /// A run inside one staged range reads the copy; one that meets no staged range
    /// reads the fabric at once (a run the fabric reads whole, it reads element by
    /// element too); anything else, element by element.
    #[inline]
    fn load_run(&self, addr: u64, elem_sz: ElemSize, out: &mut [u32]) -> bool {
        const MOST: usize = 128;
        let n = out.len() * elem_sz.bytes() as usize;
        if let Some(b) = self.staged_bytes(addr, n as u64) {
            ivp::port::decode_run(b, elem_sz, out);
            return true;
        }
        let meets_staged = |s: &Staged| addr < s.end() && s.base < addr.saturating_add(n as u64);
        let mut buf = [0u8; MOST];
        if let (Some(buf), false) = (buf.get_mut(..n), self.staged.iter().any(meets_staged)) {
            if self.fabric.read(FabricAddr(addr), buf).is_ok() {
                ivp::port::decode_run(buf, elem_sz, out);
                return true;
            }
        }
        ivp::port::load_each(self, addr, elem_sz, out)
    }

    #[inline]
    fn store(&mut self, addr: u64, elem_sz: ElemSize, value: u32) -> bool {
        let le = value.to_le_bytes();
        match (
            elem_sz,
            self.staged_mut(FabricAddr(addr), elem_sz.bytes() as usize),
        ) {
            (ElemSize::B1, Some([b])) => *b = le[0],
            (ElemSize::B2, Some([b0, b1])) => [*b0, *b1] = [le[0], le[1]],
            (ElemSize::B4, Some(b)) => b.copy_from_slice(&le[..b.len().min(4)]),
            _ => return false,
        }
        true
    }
}

/// Byte ranges a kernel will write, in order, once it has succeeded (module docs). The
/// bytes of all ranges live in one buffer, so staging allocates nothing per range.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StagedWrites {
    bytes: Vec<u8>,
    /// Each range's fabric address and its end in `bytes` (it starts at the previous end).
    ranges: Vec<(FabricAddr, usize)>,
}

impl StagedWrites {
    /// Nothing to write.
    pub fn new() -> StagedWrites {
        StagedWrites::default()
    }

    /// Nothing to write yet, with room for `bytes` staged bytes.
    pub fn with_capacity(bytes: usize) -> StagedWrites {
        StagedWrites {
            bytes: Vec::with_capacity(bytes),
            ranges: Vec::new(),
        }
    }

    /// Adds `bytes` at `addr`, after checking the range is on the fabric.
    pub fn push(&mut self, fabric: &Fabric, addr: FabricAddr, bytes: &[u8]) -> Result<(), Error> {
        self.push_zeroed(fabric, addr, bytes.len())?
            .copy_from_slice(bytes);
        Ok(())
    }

    /// Adds `len` zero bytes at `addr` (after checking the range is on the fabric) and
    /// returns them to fill in place.
    pub fn push_zeroed(
        &mut self,
        fabric: &Fabric,
        addr: FabricAddr,
        len: usize,
    ) -> Result<&mut [u8], Error> {
        fabric.check(addr, len as u64)?;
        let start = self.bytes.len();
        self.bytes.resize(start + len, 0);
        self.ranges.push((addr, start + len));
        Ok(self.bytes.get_mut(start..).unwrap_or_default())
    }

    /// Adds every range of `other`, after this one's.
    pub fn append(&mut self, other: StagedWrites) {
        let shift = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        let moved = other.ranges.into_iter().map(|(a, end)| (a, end + shift));
        self.ranges.extend(moved);
    }

    /// Ranges held.
    pub fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// The ranges in order, as (address, bytes).
    pub fn ranges(&self) -> impl Iterator<Item = (FabricAddr, &[u8])> + '_ {
        let starts = std::iter::once(0).chain(self.ranges.iter().map(|r| r.1));
        self.ranges
            .iter()
            .zip(starts)
            .map(|(&(addr, end), start)| (addr, self.bytes.get(start..end).unwrap_or_default()))
    }

    /// Writes every range, in order. Each was range-checked when staged or pushed, so no
    /// write can fail after an earlier one has landed.
    pub fn commit(self, fabric: &mut Fabric) -> Result<(), Error> {
        for (addr, bytes) in self.ranges() {
            fabric.write(addr, bytes)?;
        }
        Ok(())
    }
}

/// A read-only port over a byte slice at addresses `0 .. len` (a Pool_Buffer window).
#[derive(Clone, Copy, Debug)]
pub struct SlicePort<'a>(pub &'a [u8]);

impl MemPort for SlicePort<'_> {
    fn load(&self, addr: u64, elem_sz: ElemSize) -> Option<u32> {
        let at = usize::try_from(addr).ok()?;
        let b = self.0.get(at..at.checked_add(elem_sz.bytes() as usize)?)?;
        Some(le_value(b))
    }

    fn store(&mut self, _addr: u64, _elem_sz: ElemSize, _value: u32) -> bool {
        false
    }
}

/// Moves planned rows in order, `dst (op)= src` over `size` bytes each with the fabric's
/// own copy and reduce (a row overlapping itself reads the old row: memmove and snapshot
/// semantics), through one lock cache: the destination pages are reserved first (rows
/// sharing their pages with the row before are not looked up again), then every row runs
/// on pages that stay locked while the next row shares them. Callers have checked every
/// row and the element count, so no move fails after an earlier one.
pub fn move_rows(
    fabric: &mut Fabric,
    moves: &[[FabricAddr; 2]],
    size: u64,
    dtype: Dtype,
    op: ComputeOp,
) -> Result<(), Error> {
    compute::check_whole_elements(dtype, size)?;
    let mut reserved = (0, 0);
    for &[_, dst] in moves {
        let end = dst.0.checked_add(size);
        if !end.is_some_and(|end| reserved.0 <= dst.0 && end <= reserved.1) {
            fabric.reserve(dst, size)?;
            // reserve() proved the range, so its end does not wrap
            let page = |a: u64| a & !(dma::PAGE_BYTES - 1);
            reserved = (page(dst.0), page(dst.0 + size - 1) + dma::PAGE_BYTES);
        }
    }
    let mut locks = fabric.page_locks();
    for &[src, dst] in moves {
        match op {
            ComputeOp::None => locks.copy(src, dst, size)?,
            op => locks.reduce(src, dst, size, dtype, op)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::addr::SBUF_BASE;
    use dma::Generation;

    const P0: u64 = SBUF_BASE;

    fn fabric_with(addr: u64, bytes: &[u8]) -> Fabric {
        let mut f = Fabric::new(Generation::Sunda);
        f.write(FabricAddr(addr), bytes).unwrap();
        f
    }

    #[test]
    fn loads_read_the_fabric_and_off_fabric_lanes_are_refused() {
        let f = fabric_with(P0 + 8, &[1, 2, 3, 4, 5]);
        let port = FabricPort::new(&f);
        assert_eq!(port.load(P0 + 8, ElemSize::B4), Some(0x0403_0201));
        assert_eq!(port.load(P0 + 12, ElemSize::B2), Some(5));
        // the last byte of SBUF partition 0 on sunda, then one element across its end
        let end = P0 + 192 * 1024;
        assert_eq!(port.load(end - 1, ElemSize::B1), Some(0));
        assert_eq!(port.load(end - 1, ElemSize::B2), None);
        assert_eq!(port.load(u64::MAX, ElemSize::B1), None);
    }

    #[test]
    fn stores_land_only_in_staged_ranges_until_commit() {
        let mut f = fabric_with(P0, &[9; 16]);
        let before = f.digest();
        let mut port = FabricPort::new(&f);
        assert!(!port.store(P0, ElemSize::B1, 7));
        port.stage(FabricAddr(P0 + 4), 4).unwrap();
        assert!(port.store(P0 + 4, ElemSize::B2, 0x0201));
        assert!(!port.store(P0 + 7, ElemSize::B2, 0));
        assert_eq!(port.load(P0 + 4, ElemSize::B4), Some(0x0909_0201));
        let writes = port.into_writes();
        assert_eq!(f.digest(), before);
        assert_eq!(writes.len(), 1);
        writes.commit(&mut f).unwrap();
        let mut got = [0u8; 8];
        f.read(FabricAddr(P0), &mut got).unwrap();
        assert_eq!(got, [9, 9, 9, 9, 1, 2, 9, 9]);
    }

    #[test]
    fn overlapping_stages_merge_and_keep_staged_bytes() {
        let f = fabric_with(P0, &[0; 32]);
        let mut port = FabricPort::new(&f);
        port.stage(FabricAddr(P0), 8).unwrap();
        assert!(port.store(P0 + 6, ElemSize::B2, 0xbbaa));
        port.stage(FabricAddr(P0 + 8), 8).unwrap();
        port.stage(FabricAddr(P0 + 40), 4).unwrap();
        assert_eq!(port.staged.len(), 2);
        assert!(port.store(P0 + 7, ElemSize::B2, 0xddcc));
        assert_eq!(port.load(P0 + 6, ElemSize::B4), Some(0x00dd_ccaa));
        let w = port.into_writes();
        let mut expect = [0u8; 16];
        expect[6..9].copy_from_slice(&[0xaa, 0xcc, 0xdd]);
        let got: Vec<(FabricAddr, &[u8])> = w.ranges().collect();
        assert_eq!(got, vec![(FabricAddr(P0), &expect[..])]);
    }

    #[test]
    fn staging_off_the_fabric_is_an_error() {
        let f = Fabric::new(Generation::Sunda);
        let mut port = FabricPort::new(&f);
        let end = P0 + 192 * 1024;
        assert!(port.stage(FabricAddr(end - 2), 4).is_err());
        let mut w = StagedWrites::new();
        assert!(w.push(&f, FabricAddr(end - 1), &[0; 2]).is_err());
        assert!(w.is_empty());
        w.push(&f, FabricAddr(P0), &[1, 2]).unwrap();
        let mut other = StagedWrites::new();
        other.push_zeroed(&f, FabricAddr(P0 + 8), 3).unwrap()[1] = 7;
        w.append(other);
        let got: Vec<(FabricAddr, &[u8])> = w.ranges().collect();
        assert_eq!(
            got,
            vec![
                (FabricAddr(P0), &[1u8, 2][..]),
                (FabricAddr(P0 + 8), &[0, 7, 0][..])
            ]
        );
    }

    proptest::proptest! {
        /// A run answers exactly as its elements loaded one by one: inside, across and
        /// beside a staged (and stored-to) range, and across the end of a partition.
        #[test]
        fn a_run_loads_as_its_elements_do(
            at in 0u64..96,
            n in 0usize..33,
            e in 0usize..3,
            stage in proptest::option::of((0u64..64, 1u64..32)),
            near_end in proptest::bool::ANY,
        ) {
            let elem_sz = [ElemSize::B1, ElemSize::B2, ElemSize::B4][e];
            let f = fabric_with(P0, &(0..128u8).map(|b| b.wrapping_mul(41)).collect::<Vec<_>>());
            let mut port = FabricPort::new(&f);
            if let Some((lo, len)) = stage {
                port.stage(FabricAddr(P0 + lo), len).unwrap();
                proptest::prop_assert!(port.store(P0 + lo, ElemSize::B1, 0xee));
            }
            let base = if near_end { P0 + 192 * 1024 - 64 } else { P0 };
            let mut run = vec![0u32; n];
            let one_by_one: Option<Vec<u32>> = (0..n as u64)
                .map(|k| port.load(base + at + k * elem_sz.bytes(), elem_sz))
                .collect();
            proptest::prop_assert_eq!(port.load_run(base + at, elem_sz, &mut run), one_by_one.is_some());
            if let Some(want) = one_by_one {
                proptest::prop_assert_eq!(run, want);
            }
        }
    }

    #[test]
    fn slice_port_is_read_only() {
        let mut p = SlicePort(&[1, 2, 3]);
        assert_eq!(p.load(1, ElemSize::B2), Some(0x0302));
        assert_eq!(p.load(2, ElemSize::B2), None);
        assert!(!p.store(0, ElemSize::B1, 0));
    }

    #[test]
    fn moved_rows_reduce_in_order_and_snapshot_overlap() {
        let src: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut f = fabric_with(0x10_0000, &src);
        f.write(FabricAddr(0x80_0000), &vec![1u8; 200_000]).unwrap();
        let rows = [FabricAddr(0x10_0000), FabricAddr(0x80_0000)];
        // the same row twice: both adds land, in order (1 + s + s, saturating at 255)
        move_rows(&mut f, &[rows, rows], 200_000, Dtype::U8, ComputeOp::Add).unwrap();
        let mut got = vec![0u8; 200_000];
        f.read(FabricAddr(0x80_0000), &mut got).unwrap();
        assert!(got
            .iter()
            .zip(&src)
            .all(|(g, s)| u32::from(*g) == (2 * u32::from(*s) + 1).min(255)));
        // a copy onto itself shifted by one element reads the old row; the next row
        // reads what the one before wrote
        let mut f = fabric_with(P0, &[1, 2, 3, 4, 5]);
        let shift = [FabricAddr(P0), FabricAddr(P0 + 1)];
        let after = [FabricAddr(P0 + 1), FabricAddr(P0 + 8)];
        move_rows(&mut f, &[shift, after], 3, Dtype::U8, ComputeOp::None).unwrap();
        let mut got = [0u8; 11];
        f.read(FabricAddr(P0), &mut got).unwrap();
        assert_eq!(got, [1, 1, 2, 3, 5, 0, 0, 0, 1, 2, 3]);
    }

    #[test]
    fn a_row_of_partial_elements_moves_nothing() {
        let mut f = fabric_with(P0, &[9; 8]);
        let before = f.digest();
        let rows = [FabricAddr(P0), FabricAddr(P0 + 0x1000)];
        let e = move_rows(&mut f, &[rows], 6, Dtype::F32, ComputeOp::Add).unwrap_err();
        assert!(e.to_string().contains('6'), "{e}");
        assert_eq!(f.digest(), before);
    }
}
