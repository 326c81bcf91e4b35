//! Index tensors as the DGE reads them (seed 000 sections 3 and 6): their dtype, their
//! layout in memory, and a bias.
//!
//! - [`IndexDtype`]: UINT8 / UINT16 / UINT32 indices, read through the IVP gather width of
//!   the same element size (NX8U, NX16, N_2X32) and widened to u32 lanes.
//! - [`IndexLayout`]: contiguous elements from the indirection's index address, or an
//!   access pattern over bytes ([`IndexLayout::pattern`]: strided, several partitions,
//!   column-major blocks), of which the first `count` elements in element order are the
//!   indices; and a `bias` subtracted before the bound check and the address MAC.
//! - [`IndexPort`]: the memory port the gathers read, one window per contiguous stretch of
//!   the index tensor, each read once through the fabric's bounds-checked path.
//! - [`IndexAddrs`]: where the indices lie: a contiguous stretch (the common case, kept
//!   as a base and a count) or one address per index (an index pattern).
//! - [`gather_indices`]: one vector of indices through `gathera*t` / `mgatherd`;
//!   [`gather_contiguous`]: one vector of consecutive indices, one `gathera*t` /
//!   `gatherd` with offsets `0, 1, 2, ...` (what contiguous u32 indices always take).
//!
//! A gather posts `base + offset[k] * elem_size` with 16-bit offsets (NX16, NX8U) or 32-bit
//! ones (N_2X32). Where the lanes of one vector are too far apart for one base (a
//! column-major block spans 16 partitions), they are gathered in groups: each group takes
//! the lowest pending address as its base and every pending lane it can reach, and the
//! groups merge into one register with `mgatherd` (disabled lanes keep the old data).

use crate::error::Error;
use crate::pattern::{ByteDim, MAX_DIMS};
use dma::addr::region_slot;
use dma::fabric::Fabric;
use dma::FabricAddr;
use ivp::port::decode_run;
use ivp::{ElemSize, Gr, LaneView, MemPort, SuperGather, VBool, VecReg, Width};
use smallvec::SmallVec;

/// An index tensor's element dtype (INDEX_DTYPE UINT8 = 0x3, UINT16 = 0x5, UINT32 = 0x9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IndexDtype {
    /// UINT8, read with the NX8U gather.
    U8,
    /// UINT16, read with the NX16 gather.
    U16,
    /// UINT32, read with the N_2X32 gather (the DGE's own index width).
    #[default]
    U32,
}

impl IndexDtype {
    /// The IVP gather width that reads elements of this dtype.
    pub fn width(self) -> Width {
        match self {
            IndexDtype::U8 => Width::Nx8u,
            IndexDtype::U16 => Width::Nx16,
            IndexDtype::U32 => Width::N2x32,
        }
    }

    /// Bytes per index.
    pub fn size(self) -> u64 {
        match self {
            IndexDtype::U8 => 1,
            IndexDtype::U16 => 2,
            IndexDtype::U32 => 4,
        }
    }

    /// The index dtype of a `dma` dtype (`None` for anything but u8, u16, u32).
    pub fn from_dtype(dtype: dma::Dtype) -> Option<IndexDtype> {
        match dtype {
            dma::Dtype::U8 => Some(IndexDtype::U8),
            dma::Dtype::U16 => Some(IndexDtype::U16),
            dma::Dtype::U32 => Some(IndexDtype::U32),
            _ => None,
        }
    }
}

/// How one indirection's index tensor lies in memory and what is subtracted from it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct IndexLayout {
    pub dtype: IndexDtype,
    /// `None`: contiguous elements from the indirection's index address. Otherwise
    /// `(byte step, count)` dimensions, outermost first, from that address: index `k` is
    /// element `k` of the pattern in element order (the pattern may hold more elements
    /// than there are indices; the first ones are used).
    pub pattern: Option<SmallVec<[ByteDim; MAX_DIMS]>>,
    /// Subtracted from every index (wrapping, `subn_2x32`) before the bound check and the
    /// address MAC; skipped and failing indices are reported unbiased.
    pub bias: u32,
}

impl IndexLayout {
    /// Contiguous indices of `dtype`, no bias.
    pub fn contiguous(dtype: IndexDtype) -> IndexLayout {
        IndexLayout {
            dtype,
            ..IndexLayout::default()
        }
    }

    /// Where the first `count` indices at `base` lie: contiguous, or listed in order
    /// through the layout's pattern. Every address is proved to fit 64 bits.
    pub fn locate(&self, side: &'static str, base: u64, count: u32) -> Result<IndexAddrs, Error> {
        let size = self.dtype.size();
        let Some(dims) = &self.pattern else {
            let end = u64::from(count)
                .checked_mul(size)
                .and_then(|n| base.checked_add(n));
            return match end {
                Some(_) => Ok(IndexAddrs::Contiguous { base, count }),
                None => Err(Error::IndexPatternOverflow { side }),
            };
        };
        check_pattern(side, dims, count)?;
        let mut out = Vec::with_capacity(count as usize);
        let mut idx = [0u64; MAX_DIMS];
        while out.len() < count as usize {
            let off: i128 = dims
                .iter()
                .zip(idx)
                .map(|(d, i)| i128::from(d.step) * i128::from(i))
                .sum();
            let addr = u64::try_from(i128::from(base) + off)
                .map_err(|_| Error::IndexPatternOverflow { side })?;
            out.push(addr);
            odometer(dims, &mut idx);
        }
        Ok(IndexAddrs::Listed(out))
    }

    /// The fabric address of each of the first `count` indices at `base`, in order.
    pub fn addresses(&self, side: &'static str, base: u64, count: u32) -> Result<Vec<u64>, Error> {
        Ok(self.locate(side, base, count)?.to_vec(self.dtype.size()))
    }
}

/// Where one indirection's indices lie (`make_gather_pattern`'s address list).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexAddrs {
    /// `count` consecutive elements from `base` ([`IndexLayout::locate`] proved that the
    /// last one ends inside 64 bits).
    Contiguous { base: u64, count: u32 },
    /// The address of index `k`, in position order.
    Listed(Vec<u64>),
}

impl IndexAddrs {
    /// Number of indices.
    pub fn len(&self) -> usize {
        match self {
            IndexAddrs::Contiguous { count, .. } => *count as usize,
            IndexAddrs::Listed(v) => v.len(),
        }
    }

    /// Whether there are no indices.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The address of every index, in order, for `size`-byte indices.
    pub fn to_vec(&self, size: u64) -> Vec<u64> {
        match self {
            // locate() proved base + count * size fits 64 bits.
            IndexAddrs::Contiguous { base, count } => {
                (0..u64::from(*count)).map(|k| base + k * size).collect()
            }
            IndexAddrs::Listed(v) => v.clone(),
        }
    }
}

/// A pattern has 1 to 5 dimensions, none empty, and at least `count` elements.
fn check_pattern(side: &'static str, dims: &[ByteDim], count: u32) -> Result<(), Error> {
    if dims.is_empty() || dims.len() > MAX_DIMS || dims.iter().any(|d| d.count == 0) {
        return Err(Error::IndexPatternShape {
            side,
            dims: dims.len(),
        });
    }
    let elements = dims.iter().fold(1u64, |n, d| n.saturating_mul(d.count));
    if elements < u64::from(count) {
        return Err(Error::IndexPatternShort {
            side,
            elements,
            count,
        });
    }
    Ok(())
}

/// Advances the multi-index `idx` (outermost first) by one element of `dims` (at most
/// [`MAX_DIMS`] of them: `check_pattern` proved it).
fn odometer(dims: &[ByteDim], idx: &mut [u64; MAX_DIMS]) {
    for k in (0..dims.len()).rev() {
        idx[k] += 1;
        if idx[k] < dims[k].count {
            return;
        }
        idx[k] = 0;
    }
}

/// Bytes two index elements may lie apart and still be read in one window.
const WINDOW_GAP: u64 = 256;

/// The gathers' memory port over an index tensor: windows of the fabric, read once, sorted
/// by base, their bytes one after another in one table (a tile of indices spread over
/// many partitions is many windows, but one allocation). A lane outside every window is
/// refused (it drains as a dead lane).
#[derive(Clone, Debug, Default)]
pub struct IndexPort {
    /// Every window's bytes, in window order.
    bytes: Vec<u8>,
    windows: SmallVec<[Window; 4]>,
    /// The window the last lookup found: a gather's lanes mostly go up the windows in
    /// order (a tile's column, one window a partition), so it and the next are looked at
    /// first.
    last: std::cell::Cell<usize>,
}

/// One window of an [`IndexPort`]: `len` bytes of the fabric from `base`, held from
/// `start` in the port's table.
#[derive(Clone, Copy, Debug)]
struct Window {
    base: u64,
    start: usize,
    len: u64,
}

impl IndexPort {
    /// The indices at `addrs` straight from the fabric, widened to u32: what
    /// [`read_indices`](crate::indirection::read_indices) reads through the port
    /// [`IndexPort::read`] makes of them (each index is the bytes at its own address, and
    /// the port holds every one), without the windows or the gathers. A failed read gives
    /// the port's error. (The stretch the port reads as one window is read at once; any
    /// other index is read on its own.)
    pub fn values(
        fabric: &Fabric,
        addrs: &IndexAddrs,
        elem_sz: ElemSize,
    ) -> Result<Vec<u32>, Error> {
        let size = elem_sz.bytes();
        let mut bytes = vec![0u8; addrs.len() * size as usize];
        let read = match addrs {
            IndexAddrs::Contiguous { count: 0, .. } => Ok(()),
            // locate() proved the stretch ends inside 64 bits
            &IndexAddrs::Contiguous { base, .. }
                if region_slot(base) == region_slot(base + (bytes.len() as u64 - 1)) =>
            {
                fabric.read(FabricAddr(base), &mut bytes)
            }
            addrs => {
                let ranges: Vec<(u64, u64)> =
                    addrs.to_vec(size).into_iter().map(|a| (a, size)).collect();
                fabric.read_ranges(&ranges, &mut bytes)
            }
        };
        if let Err(e) = read {
            IndexPort::read(fabric, addrs, size)?;
            return Err(e.into());
        }
        let mut out = vec![0; addrs.len()];
        decode_run(&bytes, elem_sz, &mut out);
        Ok(out)
    }

    /// Reads the windows holding the `size`-byte indices at `addrs`: a contiguous stretch
    /// inside one fabric region is one window, read at once; anything else goes through
    /// [`IndexPort::read_listed`].
    pub fn read(fabric: &Fabric, addrs: &IndexAddrs, size: u64) -> Result<IndexPort, Error> {
        let (base, count) = match addrs {
            IndexAddrs::Listed(v) => return IndexPort::read_listed(fabric, v, size),
            IndexAddrs::Contiguous { count: 0, .. } => return Ok(IndexPort::default()),
            IndexAddrs::Contiguous { base, count } => (*base, u64::from(*count)),
        };
        // locate() proved base + count * size fits 64 bits; region slots grow with the
        // address, so equal slots at both ends mean one region.
        let end = base + count * size;
        if region_slot(base) != region_slot(end - 1) {
            return IndexPort::read_listed(fabric, &addrs.to_vec(size), size);
        }
        IndexPort::read_windows(fabric, &[(base, end - base)])
    }

    /// Reads the windows holding `size`-byte elements at every address of `addrs` (any
    /// order). A window never crosses a fabric region; one off the fabric, or an element
    /// ending past 2^64, is an error.
    pub fn read_listed(fabric: &Fabric, addrs: &[u64], size: u64) -> Result<IndexPort, Error> {
        let sorted: std::borrow::Cow<[u64]> = match addrs.is_sorted() {
            true => addrs.into(),
            false => {
                let mut v = addrs.to_vec();
                v.sort_unstable();
                v.into()
            }
        };
        let (Some(&first), Some(&last)) = (sorted.first(), sorted.last()) else {
            return Ok(IndexPort::default());
        };
        // only the highest address can end past 2^64: refused with the bytes asked for (a
        // window cut short at 2^64 would name fewer)
        if last.checked_add(size).is_none() {
            let overflow = dma::Error::AddressOverflow {
                addr: last,
                len: size,
            };
            return Err(overflow.into());
        }
        let mut windows = Vec::with_capacity(sorted.len());
        let (mut lo, mut hi) = (first, first + size);
        for &a in &sorted[1..] {
            if a <= hi.saturating_add(WINDOW_GAP) && region_slot(a) == region_slot(lo) {
                hi = hi.max(a + size);
                continue;
            }
            windows.push((lo, hi - lo));
            (lo, hi) = (a, a + size);
        }
        windows.push((lo, hi - lo));
        IndexPort::read_windows(fabric, &windows)
    }

    /// Reads `windows` (`(base, len)`, ascending and disjoint) into one table, in one
    /// [`Fabric::read_ranges`].
    fn read_windows(fabric: &Fabric, windows: &[(u64, u64)]) -> Result<IndexPort, Error> {
        let mut start = 0usize;
        let mut port = IndexPort::default();
        port.windows.reserve_exact(windows.len());
        for &(base, len) in windows {
            let end = usize::try_from(len).ok().and_then(|n| start.checked_add(n));
            let Some(end) = end else {
                return Err(dma::Error::AddressOverflow { addr: base, len }.into());
            };
            port.windows.push(Window { base, start, len });
            start = end;
        }
        port.bytes = vec![0; start];
        fabric.read_ranges(windows, &mut port.bytes)?;
        Ok(port)
    }

    /// The `bytes` bytes from `addr`, if they all lie in one window.
    #[inline]
    fn span(&self, addr: u64, bytes: u64) -> Option<&[u8]> {
        let w = match self.windows.as_slice() {
            // the contiguous case: one window, no search
            [only] => only,
            all => {
                // a window holding `addr` is the last one starting at or below it (windows
                // are disjoint and sorted), which the search finds
                let holds = |&i: &usize| {
                    all.get(i)
                        .is_some_and(|w| w.base <= addr && addr - w.base < w.len)
                };
                let last = self.last.get();
                let i = [last, last + 1].into_iter().find(holds);
                let i = i.or_else(|| all.partition_point(|w| w.base <= addr).checked_sub(1))?;
                self.last.set(i);
                all.get(i)?
            }
        };
        let offset = addr.checked_sub(w.base)?;
        if offset.checked_add(bytes)? > w.len {
            return None;
        }
        // the window's bytes lie in the table from w.start, the span inside them
        let at = w.start + offset as usize;
        self.bytes.get(at..at + bytes as usize)
    }
}

impl MemPort for IndexPort {
    #[inline]
    fn load(&self, addr: u64, elem_sz: ElemSize) -> Option<u32> {
        let mut value = [0];
        decode_run(self.span(addr, elem_sz.bytes())?, elem_sz, &mut value);
        Some(value[0])
    }

    #[inline]
    fn load_run(&self, addr: u64, elem_sz: ElemSize, out: &mut [u32]) -> bool {
        let run = (out.len() as u64).checked_mul(elem_sz.bytes());
        match run.and_then(|n| self.span(addr, n)) {
            Some(bytes) => {
                decode_run(bytes, elem_sz, out);
                true
            }
            None => ivp::port::load_each(self, addr, elem_sz, out),
        }
    }

    fn store(&mut self, _addr: u64, _elem_sz: ElemSize, _value: u32) -> bool {
        false
    }
}

/// Reads the indices at `addrs` (at most one vector: `width.lanes()` of them) through the
/// predicated IVP gather of `width`, lanes grouped by reachable base (module docs), and
/// appends them to `out` widened to u32, lane `k` holding `addrs[k]`'s index.
pub fn gather_indices<P: MemPort>(
    core: &mut SuperGather,
    port: &P,
    width: Width,
    addrs: &[u64],
    out: &mut Vec<u32>,
) {
    let view = width.view();
    let size = width.elem_sz().bytes();
    let reach = match view {
        LaneView::N2x32 => u64::from(u32::MAX),
        _ => u64::from(u16::MAX),
    };
    // Every lane index below is below n <= addrs.len() and n <= 32 (the widest view).
    let n = addrs.len().min(width.lanes());
    if let Some(base) = contiguous(addrs, n, size) {
        return gather_contiguous(core, port, width, base, n, out);
    }
    let mut pending: u64 = (1u64 << n) - 1;
    let mut acc = VecReg::ZERO;
    while pending != 0 {
        let lanes = (0..n).filter(|k| pending >> k & 1 == 1);
        let Some(base) = lanes.clone().map(|k| addrs[k]).min() else {
            break;
        };
        let mut offsets = [0u32; 32];
        let mut group = 0u64;
        for k in lanes {
            let d = addrs[k] - base;
            if d.is_multiple_of(size) && d / size <= reach {
                offsets[k] = (d / size) as u32;
                group |= 1 << k;
            }
        }
        let offsets = match view {
            LaneView::N2x32 => VecReg::from_n_2x32(std::array::from_fn(|k| offsets[k])),
            _ => VecReg::from_nx16(offsets.map(|o| o as u16)),
        };
        core.gathera_t(
            Gr::GR0,
            width,
            base,
            &offsets,
            VBool::from_lanes(view, group),
        );
        acc = core.mgatherd(Gr::GR0, &acc, port);
        pending &= !group;
    }
    drain_lanes(view, &acc, n, out);
}

/// Reads the `n` (at most `width.lanes()`) consecutive indices from `base` with one
/// predicated gather, offsets `0, 1, 2, ...`, and appends them to `out` widened to u32.
#[inline]
pub fn gather_contiguous<P: MemPort>(
    core: &mut SuperGather,
    port: &P,
    width: Width,
    base: u64,
    n: usize,
    out: &mut Vec<u32>,
) {
    let view = width.view();
    let n = n.min(width.lanes());
    let offsets = match view {
        LaneView::N2x32 => VecReg::from_n_2x32(std::array::from_fn(|k| k as u32)),
        _ => VecReg::from_nx16(std::array::from_fn(|k| k as u16)),
    };
    // n <= 32 (the widest view), so the shift is in range; a full vector is every lane.
    let lanes = match n == width.lanes() {
        true => VBool::ALL,
        false => VBool::from_lanes(view, (1u64 << n) - 1),
    };
    core.gathera_t(Gr::GR0, width, base, &offsets, lanes);
    let acc = core.gatherd(Gr::GR0, port);
    drain_lanes(view, &acc, n, out);
}

/// Appends the first `n` lanes of `acc`, read in `view`, to `out` widened to u32.
#[inline]
fn drain_lanes(view: LaneView, acc: &VecReg, n: usize, out: &mut Vec<u32>) {
    match view {
        // A whole vector as one fixed-size copy (a slice of run-time length is a call
        // into memmove).
        LaneView::N2x32 if n == 16 => out.extend_from_slice(&acc.n_2x32()),
        LaneView::N2x32 => out.extend_from_slice(acc.n_2x32().get(..n).unwrap_or_default()),
        _ => out.extend(acc.nx16().iter().take(n).map(|&x| u32::from(x))),
    }
}

/// The first address when the first `n` of `addrs` are consecutive `size`-byte elements.
fn contiguous(addrs: &[u64], n: usize, size: u64) -> Option<u64> {
    let first = *addrs.first()?;
    let last = first.checked_add(size.checked_mul(n as u64 - 1)?)?;
    let steps = addrs
        .get(..n)?
        .windows(2)
        .all(|w| w[0].checked_add(size) == Some(w[1]));
    (addrs.get(n - 1) == Some(&last) && steps).then_some(first)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::indirection::{read_indices, GatherPattern};
    use dma::addr::{PSUM_BASE, PSUM_STRIDE, SBUF_BASE, SBUF_STRIDE};
    use dma::generation::PSUM_PARTITION_BYTES;
    use dma::Generation;
    use proptest::prelude::*;

    fn dims(d: &[(i64, u64)]) -> SmallVec<[ByteDim; MAX_DIMS]> {
        d.iter()
            .map(|&(step, count)| ByteDim { step, count })
            .collect()
    }

    /// Reads `count` indices of `layout` at `base` with one gather per vector.
    fn read_all(f: &Fabric, layout: &IndexLayout, base: u64, count: u32) -> Vec<u32> {
        let addrs = layout.addresses("source", base, count).unwrap();
        let port = IndexPort::read_listed(f, &addrs, layout.dtype.size()).unwrap();
        let width = layout.dtype.width();
        let mut core = SuperGather::new();
        let mut out = Vec::new();
        for c in addrs.chunks(width.lanes()) {
            gather_indices(&mut core, &port, width, c, &mut out);
        }
        out
    }

    #[test]
    fn contiguous_addresses_and_widths() {
        let l = IndexLayout::contiguous(IndexDtype::U16);
        assert_eq!(l.addresses("source", 100, 3).unwrap(), vec![100, 102, 104]);
        assert_eq!(IndexDtype::U8.width(), Width::Nx8u);
        assert_eq!(IndexDtype::U32.width(), Width::N2x32);
        assert!(matches!(
            l.addresses("source", u64::MAX - 2, 2),
            Err(Error::IndexPatternOverflow { .. })
        ));
    }

    #[test]
    fn column_major_block_across_partitions() {
        // 16 partitions x 3 columns of u16; index j at partition j % 16, column j / 16.
        let mut f = Fabric::new(Generation::Cayman);
        let base = SBUF_BASE + 2 * SBUF_STRIDE + 8;
        for p in 0..16u64 {
            let row: Vec<u8> = (0..3u16)
                .flat_map(|c| (c * 16 + p as u16 + 1000).to_le_bytes())
                .collect();
            f.write(FabricAddr(base + p * SBUF_STRIDE), &row).unwrap();
        }
        let l = IndexLayout {
            dtype: IndexDtype::U16,
            pattern: Some(dims(&[(2, 3), (SBUF_STRIDE as i64, 16)])),
            bias: 0,
        };
        let got = read_all(&f, &l, base, 40);
        assert_eq!(got, (1000..1040).collect::<Vec<u32>>());
    }

    #[test]
    fn short_and_shapeless_patterns_are_rejected() {
        let l = IndexLayout {
            dtype: IndexDtype::U8,
            pattern: Some(dims(&[(1, 4), (8, 2)])),
            bias: 0,
        };
        assert_eq!(
            l.addresses("source", 0, 9).unwrap_err(),
            Error::IndexPatternShort {
                side: "source",
                elements: 8,
                count: 9
            }
        );
        let empty = IndexLayout {
            pattern: Some(dims(&[(1, 0)])),
            ..l
        };
        assert!(matches!(
            empty.addresses("source", 0, 1),
            Err(Error::IndexPatternShape { dims: 1, .. })
        ));
    }

    #[test]
    fn an_index_past_the_end_of_64_bits_names_its_size_and_address() {
        let f = Fabric::new(Generation::Cayman);
        let cases: [(&[u64], &str); 3] = [
            (&[0xffff_ffff_ffff_fffe], "0xfffffffffffffffe"),
            (&[u64::MAX, SBUF_BASE], "0xffffffffffffffff"),
            (
                &[SBUF_BASE, u64::MAX - 3, u64::MAX - 1],
                "0xfffffffffffffffe",
            ),
        ];
        for (addrs, at) in cases {
            let e = IndexPort::read_listed(&f, addrs, 4)
                .unwrap_err()
                .to_string();
            let want = format!("access of 0x4 bytes at {at} overflows the 64-bit address space");
            assert_eq!(e, want);
        }
    }

    #[test]
    fn lanes_outside_the_port_drain_as_zero() {
        let mut f = Fabric::new(Generation::Cayman);
        f.write(FabricAddr(SBUF_BASE), &[7, 0, 9, 0]).unwrap();
        let port = IndexPort::read_listed(&f, &[SBUF_BASE, SBUF_BASE + 2], 2).unwrap();
        let mut core = SuperGather::new();
        let addrs = [SBUF_BASE + 2, SBUF_BASE + 4096, SBUF_BASE];
        let mut got = Vec::new();
        gather_indices(&mut core, &port, Width::Nx16, &addrs, &mut got);
        assert_eq!(got, [9, 0, 7]);
        // consecutive lanes take the one-gather path; one lane past the port drains 0
        let addrs = [SBUF_BASE, SBUF_BASE + 2, SBUF_BASE + 4];
        got.clear();
        gather_indices(&mut core, &port, Width::Nx16, &addrs, &mut got);
        assert_eq!(got, [7, 9, 0]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]
        /// Random 1- to 3-D byte patterns (negative steps, two partitions) of u8/u16/u32
        /// indices read through the gathers equal a plain read of each element.
        #[test]
        fn gathered_indices_equal_plain_reads(
            dtype in prop::sample::select(vec![IndexDtype::U8, IndexDtype::U16, IndexDtype::U32]),
            raw in proptest::collection::vec((-6i64..7, 1u64..5), 1..3),
            across in any::<bool>(),
            bias in any::<u32>(),
        ) {
            let size = dtype.size();
            let mut f = Fabric::new(Generation::Cayman);
            let base = SBUF_BASE + 4096;
            let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 37 % 251) as u8).collect();
            for p in 0..2 {
                f.write(FabricAddr(SBUF_BASE + p * SBUF_STRIDE), &bytes).unwrap();
            }
            let mut d: Vec<(i64, u64)> = raw.iter().map(|&(s, c)| (s * size as i64, c)).collect();
            if across { d.insert(0, (SBUF_STRIDE as i64, 2)); }
            let count: u64 = d.iter().map(|x| x.1).product();
            let l = IndexLayout { dtype, pattern: Some(dims(&d)), bias };
            let got = read_all(&f, &l, base, count as u32);
            let expect: Vec<u32> = l.addresses("source", base, count as u32).unwrap().iter().map(|&a| {
                let mut b = [0u8; 4];
                f.read(FabricAddr(a), &mut b[..size as usize]).unwrap();
                u32::from_le_bytes(b)
            }).collect();
            prop_assert_eq!(got, expect);
        }

        /// The indices read straight from the fabric are the ones the gathers read through
        /// the port, and a read that fails fails with the port's error: runs and lists
        /// (in order, reversed, a partition apart, one address repeated) of every index
        /// width, at the ends of HBM, of SBUF and PSUM partitions and of 64 bits, across
        /// them and past them.
        #[test]
        fn values_are_what_the_gathers_read(
            dtype in prop::sample::select(vec![IndexDtype::U8, IndexDtype::U16, IndexDtype::U32]),
            edge in 0usize..6,
            back in 0u64..48,
            count in 0u32..40,
            step in prop_oneof![Just(None), Just(Some(0)), (1u64..9).prop_map(Some), Just(Some(SBUF_STRIDE)), Just(Some(PSUM_STRIDE))],
            reversed in any::<bool>(),
        ) {
            let g = Generation::Cayman;
            let edges = [
                g.hbm_bytes(),
                SBUF_BASE + 3 * SBUF_STRIDE + g.sbuf_partition_bytes(),
                SBUF_BASE + SBUF_STRIDE,
                PSUM_BASE + PSUM_STRIDE + PSUM_PARTITION_BYTES,
                SBUF_BASE + 127 * SBUF_STRIDE + g.sbuf_partition_bytes(),
                u64::MAX,
            ];
            let mut f = Fabric::new(g);
            let bytes: Vec<u8> = (0..64u32).map(|i| (i * 37 % 251) as u8 + 1).collect();
            for e in edges {
                // the bytes before each edge, and after it where there is fabric
                for at in [e - 64, e] {
                    let _ = f.write(FabricAddr(at), &bytes);
                }
            }
            let base = edges[edge] - back;
            // a stretch ends inside 64 bits (locate() proves it); past them, a list
            let fits = base.checked_add(u64::from(count) * dtype.size()).is_some();
            let addrs = match step {
                None if fits => IndexAddrs::Contiguous { base, count },
                step => {
                    // step 0: one address listed again and again
                    let step = step.unwrap_or(dtype.size());
                    let mut v: Vec<u64> = (0..u64::from(count)).map(|k| base.wrapping_add(k * step)).collect();
                    if reversed { v.reverse(); }
                    IndexAddrs::Listed(v)
                }
            };
            let pattern = GatherPattern { width: dtype.width(), addrs: addrs.clone() };
            let gathered = IndexPort::read(&f, &addrs, dtype.size())
                .map(|port| read_indices(&port, &pattern));
            prop_assert_eq!(IndexPort::values(&f, &addrs, dtype.width().elem_sz()), gathered);
        }
    }
}
