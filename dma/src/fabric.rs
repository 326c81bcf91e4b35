//! The fabric's storage: HBM, SBUF and PSUM bytes behind the one bounds-checked access path
//! that every crate uses (the DMA engine, the DGE, the POOL kernels and the reference).
//!
//! # Storage: sparse, copy-on-write pages
//!
//! The unified address map ([`crate::addr`]) is stored as pages of [`PAGE_BYTES`] (64 KiB)
//! in a two-level page table (`page_table`). A page exists once something wrote it (or
//! reserved it); bytes with no page read as 0. Every access first passes
//! [`AddressMap::check_range`], so bytes outside every region are never reached. A clone
//! shares its pages with the original until either writes one, so making, cloning,
//! digesting and comparing fabrics costs in proportion to the pages written: fuzzers
//! clone a case's fabric for every route they compare.
//!
//! # Concurrency: reserve, then execute through `&self`
//!
//! A page is written through `&self` only while *open*: [`Fabric::reserve`] (and the
//! engine's reserve of a replay) opens pages through `&mut self`, making each the only
//! holder of its bytes first, and the `*_reserved` forms and [`PageLocks`] then write
//! open pages under their write locks from any thread; a destination page not open is
//! [`Error::NotReserved`], before any byte moves. [`Fabric::close_pages`] closes every
//! page; closed pages are read without a lock, and only closed pages are shared with
//! clones. The one exception, lending to a replay: `Fabric::lend` records the pages a
//! replay reads, and while lent, `Fabric::write_beside` ([`crate::engine::Beside::write`])
//! writes closed pages outside them under their write lock, so closed pages outside them
//! are read under the read lock. The other `&mut self` forms
//! ([`Fabric::copy`], [`Fabric::fill`], ...) open their destination, run the shared
//! form and close again what they opened: one implementation serves both;
//! [`Fabric::write`] writes its pages in place.
//!
//! Locks are only ever waited for in ascending page order (see [`PageLocks`]), and an
//! operation is atomic per piece (inside one page on each side), not as a whole.
//!
//! # Overlap and comparison
//!
//! `copy` and `reduce` behave as if the source were snapshotted first (memmove
//! semantics). [`Fabric::first_difference`] and [`Fabric::digest`] treat a missing page
//! and an all-zero page alike.

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, TryLockError,
    TryLockResult,
};

use zerocopy::{FromBytes, FromZeros, Immutable, IntoBytes};

use crate::addr::{AddressMap, FabricAddr, Region, RegionCache};
use crate::compute::{self, ComputeOp, Element};
use crate::dtype::Dtype;
use crate::error::{AccessKind, Error};
use crate::generation::Generation;
use crate::page_table::PageTable;
use crate::watch::{Event, Log};

/// Bytes in one storage page (64 KiB of fabric address space).
pub const PAGE_BYTES: u64 = 1 << PAGE_SHIFT;
/// Largest piece of an overlapping `reduce` (the size of its stack snapshot).
pub const SCRATCH_BYTES: usize = 4096;

const PAGE_SHIFT: u32 = 16;
const PAGE: usize = 1 << PAGE_SHIFT;
const OFFSET_MASK: u64 = PAGE_BYTES - 1;

/// What a page with no storage reads as.
static ZERO_PAGE: [u8; PAGE] = [0; PAGE];

/// The `opened` epoch of a page closed in every epoch (epochs start at 1).
const CLOSED: u64 = 0;

/// One page of a fabric: its bytes, which clones of the fabric share until one of them
/// writes the page, behind a read-write lock of this fabric's own, the epoch in which
/// this fabric last opened the page for shared writes ([`Fabric::reserve`]), where its
/// bytes may be non-zero and the page's part of the digest as last found.
///
/// The bytes are reached only through a [`PageRef`] or [`PageMut`] (or `&mut Page`): a
/// writer always holds the write lock of a page opened in the fabric's current epoch (or
/// of a closed one [`Fabric::write_beside`] writes); a reader holds the read lock, or none when the page is closed in the current epoch
/// and [`Fabric::unlocked`] ([`Fabric::engine_view`]): then no writer can exist until
/// the fabric is next borrowed mutably ([`Fabric::write_beside`], the one writer of
/// closed pages, takes the write lock, and only of pages not `unlocked`).
///
/// Copy-on-write: a page is made the only holder of its bytes ([`Page::make_unique`])
/// whenever it is opened, which takes `&mut Fabric`, and a clone of the fabric copies its
/// open pages instead of sharing them; so bytes two pages share are never written.
struct Page {
    lock: RwLock<()>,
    /// (Taken out as the page is dropped, to be kept spare: see [`SparePages`].)
    bytes: ManuallyDrop<Arc<PageBytes>>,
    opened: u64,
    /// The page's part of the digest ([`DigestMemo`]): forgotten by every writer as it
    /// takes the write lock ([`PageMut::new`]); remembered by a reader holding the read
    /// lock or reading a closed page.
    memo: AtomicU64,
    /// The [`Extent`] outside which every byte is zero ([`Extent::pack`]): widened by
    /// every write, before it, by the bytes it writes ([`PageMut::window`],
    /// a whole-page write). Copies, comparisons and
    /// digests of the page read only it.
    extent: AtomicU64,
}

/// The guard of a try-lock: `None` if taking it would have waited (poisoning is ignored
/// as in [`Page::write`]).
fn untried<G>(tried: TryLockResult<G>) -> Option<G> {
    match tried {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(p)) => Some(p.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// The bytes of a page that may be non-zero, `lo..hi` (every other byte is zero): what a
/// copy, a comparison or a digest of the page reads. A fuzz case writes a few hundred
/// bytes into each of many pages (an SBUF partition is 4 pages).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Extent {
    lo: usize,
    hi: usize,
}

impl Extent {
    const EMPTY: Extent = Extent { lo: 0, hi: 0 };
    const FULL: Extent = Extent { lo: 0, hi: PAGE };

    /// The bytes `range` (of a page) may hold, or nothing if it is empty.
    fn of(range: std::ops::Range<usize>) -> Extent {
        match range.is_empty() {
            true => Extent::EMPTY,
            false => Extent {
                lo: range.start.min(PAGE),
                hi: range.end.min(PAGE),
            },
        }
    }

    /// The smallest extent holding both.
    fn union(self, other: Extent) -> Extent {
        match (self.is_empty(), other.is_empty()) {
            (true, _) => other,
            (_, true) => self,
            _ => Extent {
                lo: self.lo.min(other.lo),
                hi: self.hi.max(other.hi),
            },
        }
    }

    fn is_empty(self) -> bool {
        self.lo >= self.hi
    }

    /// The parts of this extent outside `other`: below it and above it (either empty).
    fn outside(self, other: Extent) -> [std::ops::Range<usize>; 2] {
        let this = self.range();
        match other.is_empty() {
            true => [this, 0..0],
            false => [
                Extent::of(this.start..this.end.min(other.lo)).range(),
                Extent::of(this.start.max(other.hi)..this.end).range(),
            ],
        }
    }

    fn range(self) -> std::ops::Range<usize> {
        self.lo..self.hi.max(self.lo)
    }

    /// As one word (for [`Page::extent`]): `lo` above, `hi` below.
    fn pack(self) -> u64 {
        (self.lo as u64) << 32 | self.hi as u64
    }

    fn unpack(word: u64) -> Extent {
        Extent::of((word >> 32) as usize..(word & 0xffff_ffff) as usize)
    }
}

/// The pages under a hull of source rows ([`PageLocks::gather`]): page `k` of `pages`
/// starts at `base + k * PAGE_BYTES`.
struct Hull<'a> {
    base: u64,
    pages: Vec<Option<&'a [u8]>>,
}

impl<'a> Hull<'a> {
    /// The `len` bytes at `at` (inside the hull), if they lie in one of its closed pages.
    #[inline(always)]
    fn row(&self, at: u64, len: usize) -> Option<&'a [u8]> {
        let (k, so) = split(at.wrapping_sub(self.base));
        let page = self.pages.get(k as usize).copied().flatten()?;
        page.get(so..so + len)
    }

    /// Copies `rows` rows of `N` bytes, row `i` from `src(i)` (inside the hull), to
    /// consecutive rows of `buf`, up to the first that is not in one closed page: the
    /// rows copied.
    fn copy_rows<const N: usize>(
        &self,
        rows: std::ops::Range<usize>,
        src: impl Fn(usize) -> u64,
        buf: &mut [u8],
    ) -> usize {
        let mut copied = 0;
        for (i, out) in rows.zip(buf.chunks_exact_mut(N)) {
            let row = self
                .row(src(i), N)
                .and_then(|r| <&[u8; N]>::try_from(r).ok());
            match (row, <&mut [u8; N]>::try_from(out)) {
                (Some(row), Ok(out)) => *out = *row,
                _ => break,
            }
            copied += 1;
        }
        copied
    }
}

/// The bytes [`PageLocks::gather`] reads before it writes them.
pub const GATHER_BYTES: usize = 4096;

/// A page's bytes, aligned to a cache line. Each host cache line then holds one
/// 64-byte-aligned piece of fabric address space, so an access touches as many cache
/// lines as its fabric range spans (a 256-byte row is 4 lines, not 5), and
/// [`PageLocks::prefetch`] reaches every line of a range by stepping from its aligned
/// fabric offset. (Aligned to a host page instead, each page's allocation wasted up to
/// 4 KiB: 32 MiB more peak memory for `hostsim bench`'s 512 MiB copy.)
#[derive(FromZeros)]
#[repr(C, align(64))]
struct PageBytes(UnsafeCell<[u8; PAGE]>);

const _: () = assert!(std::mem::align_of::<PageBytes>() == CACHE_LINE);
const _: () = assert!(std::mem::size_of::<PageBytes>() == PAGE);

// SAFETY: the bytes in the `UnsafeCell` are reached only through a `Page` (see there): a
// `PageMut` holds the page's write lock and is made only for a page that holds the only
// `Arc` of its bytes (open pages: `Page::make_unique` at every opening, a fabric's clone
// copies its open pages; `Fabric::write_beside` checks under the lock); a `PageRef`
// holds the read lock or views a closed page that no `PageMut` can be made of while the
// `PageRef` borrows the fabric (`Fabric::unlocked`); spare bytes are held by no page. So
// no thread writes bytes another reads.
unsafe impl Sync for PageBytes {}

impl PageBytes {
    /// A page of `extent` of `bytes`, zero elsewhere: a spare page cleared where it was
    /// written, or a new one (an allocation failure aborts, as for any `Arc`).
    fn copied(bytes: &[u8; PAGE], extent: Extent) -> Arc<PageBytes> {
        let range = extent.range();
        if let Some((mut page, written)) = SparePages::take() {
            if let Some(unique) = Arc::get_mut(&mut page) {
                let data = unique.0.get_mut();
                for stale in written.outside(extent) {
                    data[stale].fill(0);
                }
                data[range.clone()].copy_from_slice(&bytes[range]);
                return page;
            }
        }
        PageBytes::new_copied(bytes, extent)
    }

    /// [`PageBytes::copied`] into a new allocation, each byte written once.
    fn new_copied(bytes: &[u8; PAGE], extent: Extent) -> Arc<PageBytes> {
        let mut page = Arc::<PageBytes>::new_uninit();
        let Some(slot) = Arc::get_mut(&mut page) else {
            unreachable!("a new Arc is unique");
        };
        let (at, range) = (slot.as_mut_ptr().cast::<u8>(), extent.range());
        // SAFETY: `at` is valid for writes of a `PageBytes`, `PAGE` bytes, and `range`
        // lies inside them (an extent is at most a page); `bytes` is a live borrow of
        // another allocation.
        unsafe {
            at.write_bytes(0, range.start);
            at.add(range.start)
                .copy_from_nonoverlapping(bytes.as_ptr().add(range.start), range.len());
            at.add(range.end).write_bytes(0, PAGE - range.end);
        }
        // SAFETY: every byte was written just above, and any bytes are a valid
        // `PageBytes` (`u8`s in an `UnsafeCell`).
        unsafe { page.assume_init() }
    }

    /// A page of zeros.
    fn zeroed() -> Arc<PageBytes> {
        PageBytes::copied(&ZERO_PAGE, Extent::EMPTY)
    }

    /// The bytes, as a pointer (dereferenced only under the rules of [`Page`]).
    fn slice(&self) -> NonNull<[u8; PAGE]> {
        NonNull::from(&self.0).cast()
    }

    /// Where the bytes start (never read through: only handed to the CPU's prefetch).
    fn start(&self) -> *const u8 {
        self.slice().cast::<u8>().as_ptr().cast_const()
    }
}

/// The bytes of pages dropped lately, with their extents, for new pages to reuse (at most
/// [`SPARE_PAGES`], shared by every fabric of the process; clearing one costs its
/// extent). Freed to the C heap, a page's 64 KiB went back to the OS at once (the heap's
/// top is trimmed) and came back, zeroed by the kernel one 4 KiB fault at a time, with
/// the next fabric's pages: a fuzzer makes and drops fabrics case after case.
struct SparePages;

/// Most page buffers [`SparePages`] keeps (64 MiB).
const SPARE_PAGES: usize = 1024;

type Spare = (Arc<PageBytes>, Extent);

static SPARE: Mutex<Vec<Spare>> = Mutex::new(Vec::new());

impl SparePages {
    fn spares() -> MutexGuard<'static, Vec<Spare>> {
        // The list stays valid whatever a panicking holder did.
        SPARE.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A spare page buffer and its extent (its bytes are stale there), if one is kept.
    fn take() -> Option<Spare> {
        SparePages::spares().pop()
    }

    /// Keeps `bytes`, zero outside `extent`, if no page holds them.
    fn keep(mut bytes: Arc<PageBytes>, extent: Extent) {
        if Arc::get_mut(&mut bytes).is_none() {
            return;
        }
        let mut spares = SparePages::spares();
        if spares.len() < SPARE_PAGES {
            spares.push((bytes, extent));
        }
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        // SAFETY: the field is taken once, here, and not used after.
        let bytes = unsafe { ManuallyDrop::take(&mut self.bytes) };
        SparePages::keep(bytes, Extent::unpack(*self.extent.get_mut()));
    }
}

impl Page {
    fn zeroed() -> Page {
        Page::holding(PageBytes::zeroed(), DigestMemo::ZERO, Extent::EMPTY)
    }

    /// A closed page of `bytes`, zero outside `extent`, whose digest part `memo` is
    /// known or not.
    fn holding(bytes: Arc<PageBytes>, memo: u64, extent: Extent) -> Page {
        Page {
            lock: RwLock::new(()),
            bytes: ManuallyDrop::new(bytes),
            opened: CLOSED,
            memo: AtomicU64::new(memo),
            extent: AtomicU64::new(extent.pack()),
        }
    }

    /// Where the bytes may be non-zero.
    fn extent(&self) -> Extent {
        Extent::unpack(self.extent.load(Ordering::Relaxed))
    }

    /// Widens the extent by `written`.
    fn widen(&mut self, written: Extent) {
        let extent = self.extent.get_mut();
        *extent = Extent::unpack(*extent).union(written).pack();
    }

    /// Makes this page the only holder of its bytes, copying them if a clone of the fabric
    /// shares them: the page is about to be opened.
    fn make_unique(&mut self) {
        if Arc::get_mut(&mut self.bytes).is_none() {
            // SAFETY: `&mut self` keeps every thread of this fabric off the page, and
            // the other holders of the bytes, shared, never write them (see `Page`).
            let page = unsafe { PageRef::new(self, None) };
            let copy = PageBytes::copied(page.page(), self.extent());
            drop(page);
            self.hold(copy);
        }
    }

    /// Bytes `range` of the page, to write through `&mut` (panics outside the page): the
    /// page is made the only holder of its bytes, its extent widened by the range and its
    /// digest part forgotten first.
    fn window_mut(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        self.make_unique();
        self.widen(Extent::of(range.clone()));
        *self.memo.get_mut() = DigestMemo::UNKNOWN;
        let Some(bytes) = Arc::get_mut(&mut self.bytes) else {
            unreachable!("make_unique leaves the page the only holder of its bytes");
        };
        &mut bytes.0.get_mut()[range]
    }

    /// Replaces the bytes with `bytes`, as non-zero as the old ones at most (the old
    /// ones are kept spare if no other page holds them).
    fn hold(&mut self, bytes: Arc<PageBytes>) {
        let old = std::mem::replace(&mut *self.bytes, bytes);
        SparePages::keep(old, self.extent());
    }

    /// Whether no clone of the fabric shares the bytes (no `Weak` of them is ever made).
    fn is_unique(&self) -> bool {
        Arc::strong_count(&self.bytes) == 1
    }

    /// The bytes under the read lock.
    fn read(&self) -> PageRef<'_> {
        // A poisoned lock only means another thread panicked mid-copy; the bytes are
        // plain data with no invariant to break, so the guard is taken anyway.
        let guard = self.lock.read().unwrap_or_else(PoisonError::into_inner);
        // SAFETY: the read lock is held for as long as the `PageRef` lives.
        unsafe { PageRef::new(self, Some(guard)) }
    }

    /// [`Page::read`] if the lock can be had without waiting.
    fn try_read(&self) -> Option<PageRef<'_>> {
        let guard = untried(self.lock.try_read())?;
        // SAFETY: as in `read`.
        Some(unsafe { PageRef::new(self, Some(guard)) })
    }

    /// Whether the page is open for shared writes in `epoch` (the fabric's current one).
    fn is_open(&self, epoch: u64) -> bool {
        self.opened == epoch
    }

    /// The bytes under the write lock, if the page is open in `epoch` (the fabric's
    /// current one).
    fn write(&self, epoch: u64) -> Option<PageMut<'_>> {
        if !self.is_open(epoch) {
            return None;
        }
        let guard = self.lock.write().unwrap_or_else(PoisonError::into_inner);
        Some(PageMut::new(self, guard))
    }

    /// [`Page::write`] if the lock can be had without waiting.
    fn try_write(&self, epoch: u64) -> Option<PageMut<'_>> {
        if !self.is_open(epoch) {
            return None;
        }
        Some(PageMut::new(self, untried(self.lock.try_write())?))
    }
}

/// Read access to a page's bytes: under its read lock, or without a lock for a page
/// closed in the fabric's current epoch (see [`Page`]).
struct PageRef<'a> {
    bytes: NonNull<[u8; PAGE]>,
    _lock: Option<RwLockReadGuard<'a, ()>>,
    _page: PhantomData<&'a Page>,
}

impl<'a> PageRef<'a> {
    /// # Safety
    ///
    /// `lock` is the page's read lock, or no thread writes the page while the result lives.
    unsafe fn new(page: &'a Page, lock: Option<RwLockReadGuard<'a, ()>>) -> PageRef<'a> {
        // The bytes live as long as the page holds their `Arc`, which it does while
        // borrowed; by the caller's contract only shared references to them are made
        // while the result lives (see `deref`).
        PageRef {
            bytes: page.bytes.slice(),
            _lock: lock,
            _page: PhantomData,
        }
    }
}

impl PageRef<'_> {
    /// The whole page.
    fn page(&self) -> &[u8; PAGE] {
        // SAFETY: no thread writes the bytes while this `PageRef` lives (see `new`).
        unsafe { self.bytes.as_ref() }
    }
}

impl std::ops::Deref for PageRef<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.page()
    }
}

/// Write access to a page's bytes under its write lock, one window at a time: handing out
/// a window widens the page's extent by it first, so the extent holds every byte written.
struct PageMut<'a> {
    page: &'a Page,
    bytes: NonNull<[u8; PAGE]>,
    _lock: RwLockWriteGuard<'a, ()>,
}

impl<'a> PageMut<'a> {
    /// `lock` is the page's write lock; the page holds the only `Arc` of its bytes (it
    /// is open, or `Fabric::write_beside` checked). Forgets the page's digest part: the
    /// bytes are about to change.
    fn new(page: &'a Page, lock: RwLockWriteGuard<'a, ()>) -> PageMut<'a> {
        page.memo.store(DigestMemo::UNKNOWN, Ordering::Relaxed);
        // The write lock is held, so no other reference to the bytes exists in this
        // fabric (a lock-free `PageRef` is only made of a page no `PageMut` can be made
        // of, `Fabric::unlocked`), and none in another: the page holds the only `Arc` of
        // its bytes. The bytes live while the page is borrowed.
        PageMut {
            page,
            bytes: page.bytes.slice(),
            _lock: lock,
        }
    }

    /// Bytes `range` of the page, to read and write (panics outside the page). The
    /// page's extent is widened by them first: readers see it only after the write lock
    /// is released.
    #[inline(always)]
    fn window(&mut self, range: std::ops::Range<usize>) -> &mut [u8] {
        let extent = self.page.extent();
        if range.start < extent.lo || range.end > extent.hi {
            let wide = extent.union(Extent::of(range.clone()));
            self.page.extent.store(wide.pack(), Ordering::Relaxed);
        }
        // SAFETY: the write lock is held, no other fabric holds the bytes (see `new`),
        // and `&mut self` is exclusive.
        let page = unsafe { self.bytes.as_mut() };
        &mut page[range]
    }
}

/// The page key and the offset inside the page of a fabric address.
fn split(addr: u64) -> (u64, usize) {
    (addr >> PAGE_SHIFT, (addr & OFFSET_MASK) as usize)
}

/// Whether `n` bytes at page offset `off` stay inside the page.
fn fits(off: usize, n: usize) -> bool {
    off + n <= PAGE
}

/// `len` as one piece's length if `len` bytes at `src` and at `dst` each stay inside one
/// page (a [`Walk`] of them is that one piece).
#[inline]
fn one_piece(src: u64, dst: u64, len: u64) -> Option<usize> {
    let n = usize::try_from(len).ok().filter(|&n| n <= PAGE)?;
    (fits(split(src).1, n) && fits(split(dst).1, n)).then_some(n)
}

/// Whether `len` bytes at `src` and at `dst` overlap (both ranges proved in-region, so
/// neither end overflows).
#[inline]
fn overlaps(src: u64, dst: u64, len: u64) -> bool {
    src < dst + len && dst < src + len
}

/// The HBM, SBUF and PSUM storage of one generation's fabric.
pub struct Fabric {
    map: AddressMap,
    pages: PageTable<Page>,
    /// The current epoch: pages opened in it may be written through `&self` (under their
    /// write lock); the others are read without a lock (see [`Fabric::close_pages`]).
    epoch: u64,
    /// Reads of open pages through the public read forms (not the engine's): a replay
    /// running beside other work writes only open pages, so work that read none of them
    /// while it ran saw nothing of it ([`crate::engine::Beside`]).
    open_reads: AtomicU64,
    /// The pages open in the current epoch, known without reading the pages.
    open: OpenKeys,
    /// While the fabric is lent to a replay ([`Fabric::lend`]): the pages it reads.
    lent: Option<ReadWindow>,
    /// The access log while watched ([`Fabric::watch`]); a clone is not watched.
    watch: Option<Box<Log>>,
}

/// The pages open in a fabric's current epoch, kept apart from the pages: the engine's
/// threads write a page's entry (its lock word) as they lock it, so finding the open
/// pages by reading the entries would fetch those cache lines back from them.
#[derive(Clone, Debug, Default)]
struct OpenKeys {
    /// One bit per page, by the page table's dense index.
    bits: Vec<u64>,
    /// The dense indices set, to clear them.
    set: Vec<usize>,
    /// The lowest and the highest key set.
    hull: Option<(u64, u64)>,
    /// Whether a page was opened by [`Fabric::reserve`] (a host write, or a scenario's
    /// declared destinations), not by the engine's reserve of a replay.
    by_host: bool,
}

impl OpenKeys {
    fn contains(&self, i: usize) -> bool {
        self.bits
            .get(i / 64)
            .is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// Marks page `key` (dense index `i`) open.
    fn insert(&mut self, i: usize, key: u64) {
        if self.contains(i) {
            return;
        }
        if self.bits.len() <= i / 64 {
            self.bits.resize(i / 64 + 1, 0);
        }
        if let Some(w) = self.bits.get_mut(i / 64) {
            *w |= 1 << (i % 64);
        }
        self.set.push(i);
        self.hull = Some(
            self.hull
                .map_or((key, key), |(lo, hi)| (lo.min(key), hi.max(key))),
        );
    }

    /// Whether an open page's key lies in `lo..=hi`, by the hull of the open keys.
    fn may_meet(&self, (lo, hi): (u64, u64)) -> bool {
        self.hull.is_some_and(|(a, b)| a <= hi && lo <= b)
    }

    /// The dense indices marked since the set held `before` of them.
    fn since(&self, before: usize) -> &[usize] {
        self.set.get(before..).unwrap_or_default()
    }

    /// Unmarks the pages marked since the set held `before` of them. (The hull stays as
    /// it was: wider than the keys, it only closes pages sooner.)
    fn truncate(&mut self, before: usize) {
        for &i in self.set.get(before..).unwrap_or_default() {
            if let Some(w) = self.bits.get_mut(i / 64) {
                *w &= !(1 << (i % 64));
            }
        }
        self.set.truncate(before);
    }

    fn clear(&mut self) {
        for &i in &self.set {
            if let Some(w) = self.bits.get_mut(i / 64) {
                *w = 0;
            }
        }
        self.set.clear();
        self.hull = None;
        self.by_host = false;
    }
}

/// The pages a replay reads, keys `lo..=hi` (none when `lo > hi`).
#[derive(Clone, Copy, Debug)]
struct ReadWindow {
    lo: u64,
    hi: u64,
}

impl ReadWindow {
    const NONE: ReadWindow = ReadWindow { lo: 1, hi: 0 };

    fn holds(self, key: u64) -> bool {
        self.lo <= key && key <= self.hi
    }
}

/// A fabric lent to a replay ([`Fabric::lend`]): read it through `Deref`; dropping it
/// ends the lending.
#[derive(Debug)]
pub(crate) struct Lent<'f> {
    fabric: &'f mut Fabric,
}

impl std::ops::Deref for Lent<'_> {
    type Target = Fabric;
    fn deref(&self) -> &Fabric {
        self.fabric
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        self.fabric.lent = None;
    }
}

impl Fabric {
    /// An all-zero fabric of `generation`; allocates nothing.
    pub fn new(generation: Generation) -> Fabric {
        Fabric {
            map: AddressMap::new(generation),
            pages: PageTable::new(generation.hbm_bytes()),
            epoch: CLOSED + 1,
            open_reads: AtomicU64::new(0),
            open: OpenKeys::default(),
            lent: None,
            watch: None,
        }
    }

    /// The generation whose geometry this fabric has.
    pub fn generation(&self) -> Generation {
        self.map.generation()
    }

    /// The address map every access is checked against.
    pub fn map(&self) -> &AddressMap {
        &self.map
    }

    /// The one range check ([`AddressMap::check_range`]): `len > 0` bytes at `addr` inside
    /// one region, without 64-bit overflow. Returns the region.
    #[inline]
    pub fn check(&self, addr: FabricAddr, len: u64) -> Result<Region, Error> {
        self.map.check_range(addr, len)
    }

    /// Bytes of page storage allocated (a multiple of [`PAGE_BYTES`]).
    pub fn allocated_bytes(&self) -> u64 {
        self.pages.len() as u64 * PAGE_BYTES
    }

    /// Materialises (zero) pages for `[addr, addr + len)` and opens them, so that the
    /// `*_reserved` forms may write there until the next [`Fabric::close_pages`].
    /// Contents do not change.
    pub fn reserve(&mut self, addr: FabricAddr, len: u64) -> Result<(), Error> {
        for key in self.page_keys(addr, len)? {
            self.open_key(key)?;
        }
        self.open.by_host = true;
        Ok(())
    }

    /// Materialises page `key`, makes it the only holder of its bytes (copy-on-write:
    /// every write through `&self` goes to an open page) and opens it in the current epoch.
    fn open_key(&mut self, key: u64) -> Result<(), Error> {
        let epoch = self.epoch;
        // A checked range's keys are all in a window of the map.
        let unmapped = || Error::Unmapped {
            addr: key << PAGE_SHIFT,
        };
        let i = self.pages.dense(key).ok_or_else(unmapped)?;
        let page = self.pages.get_or_insert_with(key, Page::zeroed);
        let page = page.ok_or_else(unmapped)?;
        page.make_unique();
        page.opened = epoch;
        self.open.insert(i, key);
        Ok(())
    }

    /// Runs `write` (a `*_reserved` form) with the pages of `[dst, dst + len)` open, then
    /// closes those it opened: the `&mut self` forms leave every page open or closed as
    /// they found it (a closed page is shared by clones and read without a lock).
    fn with_open<R>(
        &mut self,
        dst: FabricAddr,
        len: u64,
        write: impl FnOnce(&Fabric) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let mut keys = self.page_keys(dst, len)?;
        let before = self.open.set.len();
        let opened = keys.try_for_each(|key| self.open_key(key));
        let result = opened.and_then(|()| write(self));
        self.close_opened_since(before);
        result
    }

    /// Closes the pages opened since the open set held `before` of them.
    fn close_opened_since(&mut self, before: usize) {
        for &i in self.open.since(before) {
            if let Some(page) = self.pages.get_dense_mut(i) {
                page.opened = CLOSED;
            }
        }
        self.open.truncate(before);
    }

    /// Reserves the pages holding each of `addrs` (the engine's reserve of a replay's
    /// pages). Checks through one [`RegionCache`], so hundreds of pages in one region are
    /// checked by compares, not by decoding the region each time. An address off the
    /// fabric is an error; the pages before it stay reserved, their contents unchanged.
    pub(crate) fn reserve_each(
        &mut self,
        addrs: impl IntoIterator<Item = FabricAddr>,
    ) -> Result<(), Error> {
        let mut region = RegionCache::default();
        for addr in addrs {
            region.check(&self.map, addr, 1)?;
            let key = addr.0 >> PAGE_SHIFT;
            // an open page's entry is the engine threads' cache line: left alone
            let open = self.pages.dense(key).is_some_and(|i| self.open.contains(i));
            if !open {
                self.open_key(key)?;
            }
        }
        Ok(())
    }

    /// Opens the pages holding each of `addrs` for a replay that writes those `writes`
    /// pages and reads pages `reads` (the keys of its lowest and highest byte read),
    /// closing every other page first ([`Fabric::close_pages`]) unless the pages open
    /// now were all opened so, the replay reads none of them, and they are at most
    /// twice its own (and 64 more). Pages a replay leaves open are only locked where
    /// they need not be: closing them every replay had the caller write each page's
    /// entry while the engine's threads, which lock it, held its cache line.
    pub(crate) fn reopen(
        &mut self,
        addrs: impl IntoIterator<Item = FabricAddr>,
        reads: Option<(u64, u64)>,
        writes: usize,
    ) -> Result<(), Error> {
        let few = self.open.set.len() <= writes.saturating_mul(2).saturating_add(64);
        let unread = !reads.is_some_and(|r| self.open.may_meet(r));
        if self.open.by_host || !few || !unread {
            self.close_pages();
        }
        self.reserve_each(addrs)
    }

    /// Closes every page for the `*_reserved` forms until it is reserved again. Reads of
    /// a closed page take no lock (nothing can write it while the fabric is shared), so
    /// the engine closes the pages a replay reads (`Fabric::reopen`): the tables a
    /// gather reads from cost no lock traffic between its worker threads.
    pub fn close_pages(&mut self) {
        self.epoch += 1;
        self.open.clear();
    }

    /// The page of `key` if it is open for the `*_reserved` forms.
    #[inline]
    fn open_page(&self, key: u64) -> Option<&Page> {
        self.pages.get(key).filter(|p| p.is_open(self.epoch))
    }

    /// [`Fabric::engine_view`] for the public read forms, counting a read of an open page
    /// ([`Fabric::open_reads`]).
    fn view<'a>(&'a self, key: u64, page: &'a Page) -> PageRef<'a> {
        if page.is_open(self.epoch) {
            self.open_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.engine_view(key, page)
    }

    /// How many times the public read forms have read an open page.
    pub(crate) fn open_reads(&self) -> u64 {
        self.open_reads.load(Ordering::Relaxed)
    }

    /// Whether page `key`, when closed, is read without a lock: always, but while the
    /// fabric is lent ([`Fabric::lend`]), when [`Fabric::write_beside`] may write the
    /// closed pages the replay does not read.
    #[inline(always)]
    fn unlocked(&self, key: u64) -> bool {
        self.lent.is_none_or(|reads| reads.holds(key))
    }

    /// The bytes of page `key` (`page`): without a lock if it is closed and
    /// [`Fabric::unlocked`], else under its read lock.
    fn engine_view<'a>(&'a self, key: u64, page: &'a Page) -> PageRef<'a> {
        match page.is_open(self.epoch) || !self.unlocked(key) {
            true => page.read(),
            // SAFETY: no `PageMut` of the page exists while the result borrows `self`:
            // `Page::write` makes one only of an open page, `write_beside` only of a page
            // not `unlocked`, and the epoch, `opened` and `lent` change only through `&mut
            // self`. A clone sharing the bytes writes them only after copying them
            // (`Page::make_unique`).
            false => unsafe { PageRef::new(page, None) },
        }
    }

    /// [`Fabric::engine_view`] if it can be had without waiting.
    fn try_view<'a>(&'a self, key: u64, page: &'a Page) -> Option<PageRef<'a>> {
        match page.is_open(self.epoch) || !self.unlocked(key) {
            true => page.try_read(),
            // SAFETY: as in `engine_view`.
            false => Some(unsafe { PageRef::new(page, None) }),
        }
    }

    /// Fails on the first of the pages `keys` that is not reserved (open).
    fn check_pages_reserved(&self, mut keys: std::ops::Range<u64>) -> Result<(), Error> {
        match keys.find(|&k| self.open_page(k).is_none()) {
            Some(key) => Err(not_reserved(key)),
            None => Ok(()),
        }
    }

    /// Checks the range and returns the keys of the pages it touches.
    #[inline]
    pub(crate) fn page_keys(
        &self,
        addr: FabricAddr,
        len: u64,
    ) -> Result<std::ops::Range<u64>, Error> {
        self.check(addr, len)?;
        // check_range proved `addr + len - 1` does not overflow; keys are below 2^48.
        Ok((addr.0 >> PAGE_SHIFT)..((addr.0 + (len - 1)) >> PAGE_SHIFT) + 1)
    }

    // ---- the access log ------------------------------------------------------------

    /// Starts (or restarts, empty) the access log: from now on every public read and
    /// write form records the range it touches ([`crate::watch`]).
    pub fn watch(&mut self) {
        self.watch = Some(Box::default());
    }

    /// Stops watching and returns the log since [`Fabric::watch`] (empty if unwatched).
    pub fn take_events(&mut self) -> Vec<Event> {
        self.watch
            .take()
            .map(|l| l.into_events())
            .unwrap_or_default()
    }

    /// Adds a note to the log (nothing when unwatched): the accesses after it serve
    /// index position `position`, whose source and destination index values are
    /// `values`.
    pub fn note(&self, position: u64, values: [Option<i64>; 2]) {
        if let Some(log) = &self.watch {
            log.push(Event::Note { position, values });
        }
    }

    /// Records an access when watched.
    #[inline]
    fn log(&self, addr: FabricAddr, len: u64, kind: AccessKind) {
        if let Some(log) = &self.watch {
            log.push(Event::Access { addr, len, kind });
        }
    }

    // ---- reads -------------------------------------------------------------------

    /// Reads `buf.len()` bytes at `addr`; bytes never written read as 0.
    pub fn read(&self, addr: FabricAddr, buf: &mut [u8]) -> Result<(), Error> {
        self.log(addr, buf.len() as u64, AccessKind::Read);
        self.read_through(Fabric::view, addr, buf)
    }

    /// Reads each range `(addr, len)` of `ranges` into `out`, one after another: what
    /// [`Fabric::read`] of each range into its part of `out` does (the same checks,
    /// errors and access log), through one region cache, so that many small ranges
    /// spread over partitions (an index tile's column) decode no region each. `out` must
    /// hold the ranges' bytes exactly.
    pub fn read_ranges(&self, ranges: &[(u64, u64)], out: &mut [u8]) -> Result<(), Error> {
        let total = ranges
            .iter()
            .try_fold(0u64, |n, &(_, len)| n.checked_add(len));
        if total != Some(out.len() as u64) {
            return Err(Error::OperandLengthMismatch {
                dst: out.len(),
                src: total.map_or(usize::MAX, |n| n as usize),
            });
        }
        let mut regions = RegionCache::default();
        let mut rest = out;
        for &(addr, len) in ranges {
            self.log(FabricAddr(addr), len, AccessKind::Read);
            regions.check(&self.map, FabricAddr(addr), len)?;
            // the lengths sum to the buffer's: each fits it
            let (buf, tail) = rest.split_at_mut(len as usize);
            self.copy_out(Fabric::view, addr, buf);
            rest = tail;
        }
        Ok(())
    }

    /// [`Fabric::read`] with each page's bytes from `view`.
    fn read_through<'a>(
        &'a self,
        view: impl Fn(&'a Fabric, u64, &'a Page) -> PageRef<'a>,
        addr: FabricAddr,
        buf: &mut [u8],
    ) -> Result<(), Error> {
        self.check(addr, buf.len() as u64)?;
        self.copy_out(view, addr.0, buf);
        Ok(())
    }

    /// Copies the bytes at `addr` (a checked range) into `buf`, each page's from `view`.
    fn copy_out<'a>(
        &'a self,
        view: impl Fn(&'a Fabric, u64, &'a Page) -> PageRef<'a>,
        addr: u64,
        buf: &mut [u8],
    ) {
        let (key, po) = split(addr);
        if fits(po, buf.len()) {
            // inside one page (an index tile's element): no walk
            return match self.pages.get(key) {
                Some(page) => buf.copy_from_slice(&view(self, key, page)[po..po + buf.len()]),
                None => buf.fill(0),
            };
        }
        for (off, n) in Walk::one(addr, buf.len() as u64) {
            // Walk pieces lie inside `buf` and inside one page.
            let out = &mut buf[off as usize..off as usize + n];
            let (key, po) = split(addr + off);
            match self.pages.get(key) {
                Some(page) => out.copy_from_slice(&view(self, key, page)[po..po + n]),
                None => out.fill(0),
            }
        }
    }

    /// Reads a zerocopy value (a struct, an array or a slice) at `addr`, in its in-memory
    /// layout (use zerocopy's little-endian field types for portable wire structs).
    pub fn read_into<T: FromBytes + IntoBytes + ?Sized>(
        &self,
        addr: FabricAddr,
        out: &mut T,
    ) -> Result<(), Error> {
        self.read(addr, out.as_mut_bytes())
    }

    /// Reads one zerocopy value at `addr`.
    pub fn read_obj<T: FromBytes + IntoBytes>(&self, addr: FabricAddr) -> Result<T, Error> {
        let mut v = T::new_zeroed();
        self.read_into(addr, &mut v)?;
        Ok(v)
    }

    /// Reads `out.len()` little-endian elements at `addr`.
    pub fn read_elems<E: Element>(&self, addr: FabricAddr, out: &mut [E]) -> Result<(), Error> {
        self.read_mapped(addr, out, |e: E| e)
    }

    /// Reads `out.len()` indices of an index dtype (u8, u16 or u32) at `addr`, widened.
    pub fn read_indices(
        &self,
        addr: FabricAddr,
        dtype: Dtype,
        out: &mut [u32],
    ) -> Result<(), Error> {
        match dtype {
            Dtype::U8 => self.read_mapped(addr, out, |v: u8| u32::from(v)),
            Dtype::U16 => self.read_mapped(addr, out, |v: u16| u32::from(v)),
            Dtype::U32 => self.read_mapped(addr, out, |v: u32| v),
            _ => Err(Error::NotIndexDtype {
                dtype: dtype.name(),
            }),
        }
    }

    /// Reads little-endian `E`s at `addr` through a stack buffer and stores `f(e)`.
    fn read_mapped<E: Element, T>(
        &self,
        addr: FabricAddr,
        out: &mut [T],
        f: impl Fn(E) -> T,
    ) -> Result<(), Error> {
        let size = core::mem::size_of::<E::Bytes>();
        self.check(addr, elems_bytes(addr, out.len(), size)?)?;
        // (small: the buffer is zeroed for every call, and most read a few indices)
        let mut buf = [0u8; 1024];
        let mut at = addr;
        for chunk in out.chunks_mut(buf.len() / size) {
            let bytes = &mut buf[..chunk.len() * size];
            self.read(at, bytes)?;
            for (slot, image) in chunk.iter_mut().zip(compute::images::<E>(bytes)?) {
                *slot = f(E::from_le(*image));
            }
            // inside the range checked above
            at = FabricAddr(at.0 + bytes.len() as u64);
        }
        Ok(())
    }

    /// Lends the fabric to a replay that reads pages `reads` (the keys of the lowest and
    /// the highest byte it reads, `None` if it reads none): until the result is dropped,
    /// [`Fabric::write_beside`] may write the closed pages outside them.
    pub(crate) fn lend(&mut self, reads: Option<(u64, u64)>) -> Lent<'_> {
        self.lent = Some(reads.map_or(ReadWindow::NONE, |(lo, hi)| ReadWindow { lo, hi }));
        Lent { fabric: self }
    }

    /// Writes `buf` at `addr` through `&self` while the fabric is lent ([`Fabric::lend`]),
    /// if every page of the range is closed, has storage of its own (shared with no
    /// clone) and is not one the replay reads: `Ok(true)`. Else nothing is written and
    /// `Ok(false)`. A range off the fabric is an error, as for [`Fabric::write`].
    pub(crate) fn write_beside(&self, addr: FabricAddr, buf: &[u8]) -> Result<bool, Error> {
        let keys = self.page_keys(addr, buf.len() as u64)?;
        let first = keys.start;
        // every page write-locked, in ascending order (see `PageLocks`), before any byte
        let pages: Option<Vec<PageMut<'_>>> = keys.map(|key| self.beside_page(key)).collect();
        let Some(mut pages) = pages else {
            return Ok(false);
        };
        for (off, n) in Walk::one(addr.0, buf.len() as u64) {
            let (key, po) = split(addr.0 + off);
            let off = off as usize;
            pages[(key - first) as usize]
                .window(po..po + n)
                .copy_from_slice(&buf[off..off + n]);
        }
        Ok(true)
    }

    /// Page `key` write-locked for [`Fabric::write_beside`], if it may be written so.
    fn beside_page(&self, key: u64) -> Option<PageMut<'_>> {
        let page = self.pages.get(key)?;
        if self.unlocked(key) || page.is_open(self.epoch) {
            return None;
        }
        let guard = page.lock.write().unwrap_or_else(PoisonError::into_inner);
        // (a clone takes the read lock to share a page not `unlocked`: checked under the
        // write lock, the count stays 1 until the bytes are written)
        page.is_unique().then(|| PageMut::new(page, guard))
    }

    // ---- writes through &mut self --------------------------------------------------

    /// Writes `buf` at `addr`, allocating pages as needed, in place (`&mut self` keeps
    /// every other thread off the pages). A page whose bytes there already equal `buf`'s
    /// (zeros into a page with no storage too) is left alone: it stays shared with the
    /// fabric's clones, or without storage; a page `buf` covers whole gets new bytes,
    /// neither zeroed nor copied first.
    pub fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error> {
        let len = buf.len() as u64;
        self.log(addr, len, AccessKind::Write);
        self.check(addr, len)?;
        for (off, n) in Walk::one(addr.0, len) {
            // Walk pieces lie inside `buf` and inside one page, and inside the range
            // checked above.
            let (at, piece) = (
                FabricAddr(addr.0 + off),
                &buf[off as usize..off as usize + n],
            );
            if let Ok(whole) = <&[u8; PAGE]>::try_from(piece) {
                self.replace_page(at, whole)?;
            } else if !self.holds(at, piece) {
                let (key, po) = split(at.0);
                let page = self.pages.get_or_insert_with(key, Page::zeroed);
                let page = page.ok_or(Error::Unmapped { addr: at.0 })?;
                page.window_mut(po..po + n).copy_from_slice(piece);
            }
        }
        Ok(())
    }

    /// Whether the bytes at `addr` (inside one page) equal `bytes`.
    fn holds(&self, addr: FabricAddr, bytes: &[u8]) -> bool {
        let (key, po) = split(addr.0);
        match self.pages.get(key) {
            Some(page) => self.engine_view(key, page).get(po..po + bytes.len()) == Some(bytes),
            None => is_zero(bytes),
        }
    }

    /// Gives the page starting at `addr` new bytes, a copy of `bytes` (open or closed as
    /// it was; an open page holds its new bytes alone).
    fn replace_page(&mut self, addr: FabricAddr, bytes: &[u8; PAGE]) -> Result<(), Error> {
        let key = addr.0 >> PAGE_SHIFT;
        let mut made = false;
        let page = self.pages.get_or_insert_with(key, || {
            made = true;
            let bytes = PageBytes::copied(bytes, Extent::FULL);
            Page::holding(bytes, DigestMemo::UNKNOWN, Extent::FULL)
        });
        let page = page.ok_or(Error::Unmapped { addr: addr.0 })?;
        if !made {
            page.hold(PageBytes::copied(bytes, Extent::FULL));
            page.widen(Extent::FULL);
            *page.memo.get_mut() = DigestMemo::UNKNOWN;
        }
        Ok(())
    }

    /// Writes a zerocopy value (a struct, an array or a slice) at `addr`.
    pub fn write_obj<T: IntoBytes + Immutable + ?Sized>(
        &mut self,
        addr: FabricAddr,
        value: &T,
    ) -> Result<(), Error> {
        self.write(addr, value.as_bytes())
    }

    /// Writes elements at `addr` as little-endian bytes.
    pub fn write_elems<E: Element>(&mut self, addr: FabricAddr, elems: &[E]) -> Result<(), Error> {
        if let Some(bytes) = E::le_image(elems) {
            return self.write(addr, bytes);
        }
        let size = core::mem::size_of::<E::Bytes>();
        let len = elems_bytes(addr, elems.len(), size)?;
        self.log(addr, len, AccessKind::Write);
        self.with_open(addr, len, |f| {
            let mut buf = [0u8; SCRATCH_BYTES];
            let mut at = addr;
            for chunk in elems.chunks(SCRATCH_BYTES / size) {
                let bytes = &mut buf[..chunk.len() * size];
                for (e, image) in chunk.iter().zip(compute::images_mut::<E>(bytes)?) {
                    *image = e.to_le();
                }
                f.write_reserved(at, bytes)?;
                // inside the range opened above
                at = FabricAddr(at.0 + bytes.len() as u64);
            }
            Ok(())
        })
    }

    /// Copies `len` bytes from `src` to `dst` (memmove semantics), allocating as needed.
    pub fn copy(&mut self, src: FabricAddr, dst: FabricAddr, len: u64) -> Result<(), Error> {
        self.log(src, len, AccessKind::Read);
        self.log(dst, len, AccessKind::Write);
        self.check(src, len)?;
        self.with_open(dst, len, |f| f.copy_reserved(src, dst, len))
    }

    /// Fills `len` bytes at `dst` with `pattern` repeated, allocating as needed.
    pub fn fill(&mut self, dst: FabricAddr, len: u64, pattern: &[u8]) -> Result<(), Error> {
        check_pattern(dst, len, pattern)?;
        self.log(dst, len, AccessKind::Write);
        self.with_open(dst, len, |f| f.fill_reserved(dst, len, pattern))
    }

    /// `dst op= src` over `len` bytes of `dtype` elements, allocating as needed.
    pub fn reduce(
        &mut self,
        src: FabricAddr,
        dst: FabricAddr,
        len: u64,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        compute::check_whole_elements(dtype, len)?;
        self.log(src, len, AccessKind::Read);
        if op != ComputeOp::None {
            self.log(dst, len, AccessKind::Read);
        }
        self.log(dst, len, AccessKind::Write);
        self.check(src, len)?;
        self.with_open(dst, len, |f| f.reduce_reserved(src, dst, len, dtype, op))
    }

    // ---- shared execution through &self (destination reserved) ----------------------

    /// A lock cache for a run of shared-form operations on this fabric (see [`PageLocks`]).
    pub fn page_locks(&self) -> PageLocks<'_> {
        self.locks()
    }

    /// [`Fabric::page_locks`] for a run of many operations (a queue's descriptors): it
    /// remembers the last [`RUN_PAGES`] pages looked up, where the other remembers one.
    pub fn run_locks(&self) -> PageLocks<'_, RUN_PAGES> {
        self.locks()
    }

    fn locks<const RECENT: usize>(&self) -> PageLocks<'_, RECENT> {
        const { assert!(RECENT > 0) };
        PageLocks {
            fabric: self,
            src: Slot::EMPTY,
            dst: Slot::EMPTY,
            recent: [(NO_PAGE, None); RECENT],
            regions: [RegionCache::hbm(&self.map); 2],
        }
    }

    /// [`Fabric::write`] into reserved pages.
    pub fn write_reserved(&self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error> {
        self.page_locks().write(addr, buf)
    }

    /// [`Fabric::copy`] into reserved pages.
    pub fn copy_reserved(&self, src: FabricAddr, dst: FabricAddr, len: u64) -> Result<(), Error> {
        self.page_locks().copy(src, dst, len)
    }

    /// [`Fabric::fill`] into reserved pages: byte `i` of the range is `pattern[i % len]`.
    pub fn fill_reserved(&self, dst: FabricAddr, len: u64, pattern: &[u8]) -> Result<(), Error> {
        self.page_locks().fill(dst, len, pattern)
    }

    /// [`Fabric::reduce`] into reserved pages.
    pub fn reduce_reserved(
        &self,
        src: FabricAddr,
        dst: FabricAddr,
        len: u64,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        self.page_locks().reduce(src, dst, len, dtype, op)
    }

    /// Panics unless every page is zero outside its extent (the invariant copies,
    /// comparisons and digests rely on), for tests.
    #[cfg(test)]
    pub(crate) fn assert_zero_outside_extents(&self) {
        for (key, page) in self.pages.iter() {
            let bytes = self.view(key, page);
            for stale in Extent::FULL.outside(page.extent()) {
                let at = bytes.page()[stale.clone()].iter().position(|&b| b != 0);
                assert!(
                    at.is_none(),
                    "page {key}: byte {:?} outside its extent",
                    at.map(|a| a + stale.start)
                );
            }
        }
    }

    // ---- comparison ----------------------------------------------------------------

    /// The lowest address whose byte differs between the two fabrics (pages with no
    /// storage compare as zeros), or `None` if their contents are equal. Pages the two
    /// share (one is a clone of the other and neither wrote them since) are not read.
    pub fn first_difference(&self, other: &Fabric) -> Option<FabricAddr> {
        let mut keys: Vec<u64> = self
            .pages
            .iter()
            .chain(other.pages.iter())
            .map(|(key, _)| key)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        keys.into_iter()
            .find_map(|key| self.page_difference(other, key))
    }

    /// [`Fabric::first_difference`] inside page `key`.
    fn page_difference(&self, other: &Fabric, key: u64) -> Option<FabricAddr> {
        let (a, b) = (self.pages.get(key), other.pages.get(key));
        if let (Some(a), Some(b)) = (a, b) {
            if Arc::ptr_eq(&a.bytes, &b.bytes) {
                return None;
            }
        }
        // Outside both extents both pages are zero (a missing page is zero everywhere).
        let extent = |p: Option<&Page>| p.map_or(Extent::EMPTY, Page::extent);
        let range = extent(a).union(extent(b)).range();
        let (a, b) = (a.map(|p| self.view(key, p)), b.map(|p| other.view(key, p)));
        let a = &a.as_ref().map_or(&ZERO_PAGE, |p| p.page())[range.clone()];
        let b = &b.as_ref().map_or(&ZERO_PAGE, |p| p.page())[range.clone()];
        if a == b {
            return None;
        }
        let i = a.iter().zip(b).position(|(x, y)| x != y)?;
        Some(FabricAddr(key << PAGE_SHIFT | (range.start + i) as u64))
    }

    /// A deterministic 64-bit digest of the contents: a multiply-xor hash of every
    /// non-zero page's part (`page_part`) and its key, in address order, with a
    /// splitmix64 finaliser. Equal contents give equal digests whatever was allocated;
    /// not cryptographic. A page's part is remembered in it, so only pages written since
    /// the last digest (of this fabric, or of a clone then sharing them) are read.
    pub fn digest(&self) -> u64 {
        let mut h = DIGEST_SEED;
        for (key, page) in self.pages.iter() {
            if let Some(part) = self.page_digest(key, page) {
                h = mix(mix(h, key), part);
            }
        }
        finalise(h)
    }

    /// A page's part of the digest: the hash of its bytes, `None` if they are all zero;
    /// remembered in the page until a writer forgets it (see [`Page`]).
    fn page_digest(&self, key: u64, page: &Page) -> Option<u64> {
        // (under the read lock if the page is open: no writer forgets the part meanwhile)
        let bytes = self.view(key, page);
        if let Some(known) = DigestMemo::recall(&page.memo) {
            return known;
        }
        let part = Some(page_part(bytes.page(), page.extent())).filter(|&p| p != 0);
        DigestMemo::remember(&page.memo, part);
        part
    }

    /// The page of a clone: the same bytes if `page` is closed (copy-on-write), a copy
    /// of them if it is open (an open page holds the only `Arc` of its bytes); closed.
    fn page_for_clone(&self, key: u64, page: &Page) -> Page {
        // (under the read lock if the page is open or not `unlocked`: its bytes, extent
        // and memo agree, and `write_beside` finds the clone's `Arc` if it comes after)
        let bytes = self.view(key, page);
        let (memo, extent) = (page.memo.load(Ordering::Relaxed), page.extent());
        match page.is_open(self.epoch) {
            true => Page::holding(PageBytes::copied(bytes.page(), extent), memo, extent),
            false => Page::holding(Arc::clone(&page.bytes), memo, extent),
        }
    }
}

/// A clone shares every closed page with the original until one of them writes it, and
/// copies the open ones (so it costs a page table entry per page, and a page copy per
/// open page). Every page of the clone is closed: reserve a range to write it through
/// the `*_reserved` forms.
impl Clone for Fabric {
    fn clone(&self) -> Fabric {
        Fabric {
            map: self.map,
            pages: self.pages.map(|key, p| self.page_for_clone(key, p)),
            epoch: self.epoch,
            open_reads: AtomicU64::new(0),
            open: OpenKeys::default(),
            lent: None,
            watch: None,
        }
    }
}

impl std::fmt::Debug for Fabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fabric")
            .field("generation", &self.generation())
            .field("allocated_bytes", &self.allocated_bytes())
            .finish()
    }
}

/// The shared (`&self`) execution forms of a [`Fabric`] with a small lock cache: the
/// write-locked destination page and the read-locked source page of the last piece stay
/// locked until a piece needs another page, [`PageLocks::release`] is called or the value
/// is dropped. A run of operations on the same pages then pays one lock pair per page pair
/// instead of one per piece: the engine runs a queue's descriptors through one
/// `PageLocks`, and the DGE deals descriptors round-robin over the queues, so one queue's
/// consecutive descriptors are not contiguous but mostly share their pages. Each operation
/// checks and behaves exactly like the `*_reserved` form of [`Fabric`] of the same name
/// (which runs it on a fresh `PageLocks`).
///
/// # Lock order
///
/// A thread blocks on a page lock only while every page it holds has a lower key: a page
/// is first tried without waiting (in any order, since a try never blocks); for what that
/// did not get, held pages not below the lowest page still to lock are released, and the
/// pages still to lock are taken in ascending key order. A chain of threads each waiting for a
/// page the next one holds therefore climbs strictly in page key and cannot close into a
/// cycle. The guards are not `Send`, so an async task cannot keep a `PageLocks` across an
/// `.await`; a holder must not wait for anything else either (a semaphore, another thread,
/// or this fabric's locks outside this value such as [`Fabric::read`], since `RwLock` is
/// not reentrant): release first.
pub struct PageLocks<'a, const RECENT: usize = 1> {
    fabric: &'a Fabric,
    src: Slot<'a, PageRef<'a>>,
    dst: Slot<'a, PageMut<'a>>,
    /// Pages looked up lately (the page, or none), each in a slot its key picks: a
    /// gather's source page is looked up as it is prefetched and again as it is read a
    /// few descriptors later, and a table's pages recur.
    recent: [(u64, Option<&'a Page>); RECENT],
    /// The region of the last range checked, per [`Side`].
    regions: [RegionCache; 2],
}

/// Which side of an operation a cached region of [`PageLocks`] is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Source = 0,
    Destination = 1,
}

impl<'a, const RECENT: usize> PageLocks<'a, RECENT> {
    /// Releases every held page (where they are stays cached).
    pub fn release(&mut self) {
        self.src.guard = None;
        self.dst.guard = None;
    }

    /// Hints the CPU to start loading the first bytes of `len` at `addr` (at most
    /// [`PREFETCH_BYTES`], inside one page) for an operation a few descriptors ahead. A
    /// queue of a round-robin spray strides 4 KiB from descriptor to descriptor, which no
    /// hardware prefetcher follows, so without the hint each descriptor waits for DRAM in
    /// turn. Locks, checks and changes nothing; an address with no page is ignored.
    #[inline]
    pub fn prefetch(&mut self, addr: FabricAddr, len: u32) {
        let (key, off) = split(addr.0);
        let Some(start) = self.page(key).map(|p| p.bytes.start()) else {
            return;
        };
        // The line of the first byte, then the further lines the range reaches (offsets
        // inside the page).
        prefetch_line(start.wrapping_add(off));
        let end = PAGE.min(off + (len as usize).min(PREFETCH_BYTES));
        let mut line = (off & !(CACHE_LINE - 1)) + CACHE_LINE;
        while line < end {
            prefetch_line(start.wrapping_add(line));
            line += CACHE_LINE;
        }
    }

    /// Reads `buf.len()` bytes at `addr` as the operations here read their sources (a
    /// page open in this epoch under its read lock), holding no page meanwhile: for an
    /// operation made of a read and a write (a cast).
    pub fn read(&mut self, addr: FabricAddr, buf: &mut [u8]) -> Result<(), Error> {
        // Fabric::read locks on its own: hold nothing meanwhile (RwLock is not reentrant).
        self.release();
        self.fabric.read_through(Fabric::engine_view, addr, buf)
    }

    /// [`Fabric::write_reserved`].
    pub fn write(&mut self, addr: FabricAddr, buf: &[u8]) -> Result<(), Error> {
        let len = buf.len() as u64;
        self.check_reserved(addr, len)?;
        for (off, n) in Walk::one(addr.0, len) {
            // Walk pieces lie inside `buf` and inside one page.
            let data = &buf[off as usize..off as usize + n];
            self.with_page(addr.0 + off, n, |p| p.copy_from_slice(data))?;
        }
        Ok(())
    }

    /// Copies `rows` rows of `len` bytes (1 to [`GATHER_BYTES`]), row `i` from
    /// `src(i)`, to consecutive rows from `dst`: each row read (without a lock from a
    /// closed page), then [`GATHER_BYTES`] of them written at once, as the copies of the
    /// rows in turn would where no row reads bytes a row writes and the destination lies
    /// in one region. Each source row is checked as [`PageLocks::copy`] checks it, each
    /// part of the destination as one range; a failing row (the part's first row for the
    /// destination) is returned with its error, its part unwritten.
    pub fn gather(
        &mut self,
        rows: std::ops::Range<usize>,
        src: impl Fn(usize) -> u64,
        len: usize,
        dst: FabricAddr,
    ) -> Result<(), (usize, Error)> {
        if !(1..=GATHER_BYTES).contains(&len) {
            let rule = format!("a gathered row is 1 to {GATHER_BYTES} bytes");
            return Err((
                rows.start,
                Error::BadDescriptor {
                    field: "len",
                    value: len as u64,
                    rule,
                },
            ));
        }
        let mut buf = [0u8; GATHER_BYTES];
        let per = GATHER_BYTES / len;
        for (k, first) in rows.clone().step_by(per).enumerate() {
            let part = first..(first + per).min(rows.end);
            let at = FabricAddr(dst.0 + (k * per * len) as u64);
            let buf = buf.get_mut(..part.len() * len).unwrap_or(&mut []);
            self.gather_part(part, &src, len, buf, at)?;
        }
        Ok(())
    }

    /// [`PageLocks::gather`] of `rows`, which fit `buf`. Where the rows' hull lies in one
    /// region, rows of 1, 2, 4, 8 or 16 bytes are copied from its pages in a loop of a few
    /// instructions a row, so that the reads of many rows are under way at once (a random
    /// gather waits on memory). Any other row is checked, looked up and copied (or read)
    /// on its own.
    fn gather_part(
        &mut self,
        rows: std::ops::Range<usize>,
        src: impl Fn(usize) -> u64,
        len: usize,
        buf: &mut [u8],
        dst: FabricAddr,
    ) -> Result<(), (usize, Error)> {
        let first = rows.start;
        let hull = self.hull_pages(rows.clone(), &src, len);
        // rows of a power of two bytes up to 16 straight from the hull's closed pages, up
        // to the first that is not (in an open page, across a page edge); then the rest
        // one by one
        let copied = hull.as_ref().map_or(0, |h| match len {
            1 => h.copy_rows::<1>(rows.clone(), &src, buf),
            2 => h.copy_rows::<2>(rows.clone(), &src, buf),
            4 => h.copy_rows::<4>(rows.clone(), &src, buf),
            8 => h.copy_rows::<8>(rows.clone(), &src, buf),
            16 => h.copy_rows::<16>(rows.clone(), &src, buf),
            _ => 0,
        });
        let (rows, rest) = (first + copied..rows.end, &mut buf[copied * len..]);
        match hull {
            // every row passed the source check with the hull
            Some(hull) => self.copy_each(rows, &src, len, rest, |_, at| Ok(hull.row(at, len))),
            None => self.copy_each(rows, &src, len, rest, |locks, at| {
                locks.check_source(FabricAddr(at), len as u64)?;
                let (sk, so) = split(at);
                Ok(locks.closed(sk).and_then(|page| page.get(so..so + len)))
            }),
        }?;
        self.write(dst, buf).map_err(|e| (first, e))
    }

    /// The pages under the hull of the `len`-byte source rows `rows` (each closed page's
    /// bytes, `None` for any other), if the hull lies in one region (so every row passes
    /// the source check) and spans no more pages than there are rows.
    fn hull_pages(
        &mut self,
        rows: std::ops::Range<usize>,
        src: impl Fn(usize) -> u64,
        len: usize,
    ) -> Option<Hull<'a>> {
        let (lo, hi) = rows
            .clone()
            .map(&src)
            .fold((u64::MAX, 0), |(lo, hi), a| (lo.min(a), hi.max(a)));
        let last = hi.checked_add(len as u64 - 1)?;
        let map = &self.fabric.map;
        if lo > hi || !self.regions[Side::Source as usize].holds(map, lo, last) {
            return None;
        }
        let keys = (lo >> PAGE_SHIFT)..=(last >> PAGE_SHIFT);
        if keys.end() - keys.start() >= rows.len() as u64 {
            return None;
        }
        let base = keys.start() << PAGE_SHIFT;
        Some(Hull {
            base,
            pages: keys.map(|k| self.closed(k)).collect(),
        })
    }

    /// Copies each of `rows` to its place in `buf`, found by `locate` (which checks the
    /// row and returns its bytes if they lie in one closed page), or read where not.
    fn copy_each(
        &mut self,
        rows: std::ops::Range<usize>,
        src: impl Fn(usize) -> u64,
        len: usize,
        buf: &mut [u8],
        mut locate: impl FnMut(&mut Self, u64) -> Result<Option<&'a [u8]>, Error>,
    ) -> Result<(), (usize, Error)> {
        for (i, out) in rows.zip(buf.chunks_exact_mut(len.max(1))) {
            let at = src(i);
            match locate(self, at).map_err(|e| (i, e))? {
                Some(bytes) => out.copy_from_slice(bytes),
                None => self.read(FabricAddr(at), out).map_err(|e| (i, e))?,
            }
        }
        Ok(())
    }

    /// [`Fabric::copy_reserved`].
    pub fn copy(&mut self, src: FabricAddr, dst: FabricAddr, len: u64) -> Result<(), Error> {
        self.check_source(src, len)?;
        // A range inside one page on each side (the common case) is one piece: no walk, and
        // the piece checks that its destination page is reserved as it locks it, before its
        // only write.
        if let Some(n) = one_piece(src.0, dst.0, len) {
            self.check_destination(dst, len)?;
            return self.copy_piece(src.0, dst.0, n);
        }
        self.check_reserved(dst, len)?;
        // Both ranges are proved in-region, so `src + off` and `dst + off` cannot overflow.
        for (off, n) in Walk::two(src.0, dst.0, len, 1, u64::MAX) {
            self.copy_piece(src.0 + off, dst.0 + off, n)?;
        }
        Ok(())
    }

    /// Copies `n` bytes from `s` to `d`, each inside one page (memmove within a page).
    #[inline(always)]
    fn copy_piece(&mut self, s: u64, d: u64, n: usize) -> Result<(), Error> {
        let ((sk, so), (dk, doff)) = (split(s), split(d));
        // The common case of a gather: the destination page is held and the source page
        // is closed, so it is read without a lock and without aiming the source slot.
        if sk != dk && self.dst.holds(dk) {
            if let (Some(sp), Some(dp)) = (self.closed(sk), self.dst.guard.as_mut()) {
                copy_bytes(dp.window(doff..doff + n), &sp[so..], n);
                return Ok(());
            }
        }
        self.with_pages(
            s,
            d,
            n,
            |p, so, doff| p.copy_within(so..so + n, doff),
            |sp, dp| dp.copy_from_slice(sp),
        )
    }

    /// [`Fabric::fill_reserved`].
    pub fn fill(&mut self, dst: FabricAddr, len: u64, pattern: &[u8]) -> Result<(), Error> {
        check_pattern(dst, len, pattern)?;
        self.check_reserved(dst, len)?;
        for (off, n) in Walk::one(dst.0, len) {
            let phase = (off % pattern.len() as u64) as usize;
            self.with_page(dst.0 + off, n, |p| fill_pattern(p, pattern, phase))?;
        }
        Ok(())
    }

    /// [`Fabric::reduce_reserved`].
    pub fn reduce(
        &mut self,
        src: FabricAddr,
        dst: FabricAddr,
        len: u64,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        compute::check_whole_elements(dtype, len)?;
        self.check_source(src, len)?;
        // As in `copy`, a range inside one page on each side is one piece, checked for its
        // destination page's reservation as it is locked (overlapping ranges only up to
        // the snapshot's size, the Walk's cap: then too the Walk is that one piece).
        if let Some(n) = one_piece(src.0, dst.0, len) {
            self.check_destination(dst, len)?;
            if n <= SCRATCH_BYTES || !overlaps(src.0, dst.0, len) {
                return self.reduce_in_pages(src.0, dst.0, n, dtype, op);
            }
        }
        self.check_reserved(dst, len)?;
        let cap = if overlaps(src.0, dst.0, len) {
            SCRATCH_BYTES as u64
        } else {
            u64::MAX
        };
        let unit = dtype.size() as u64;
        // Both ranges are proved in-region, so `src + off` and `dst + off` cannot overflow.
        for (off, n) in Walk::two(src.0, dst.0, len, unit, cap) {
            self.reduce_piece(src.0 + off, dst.0 + off, n, dtype, op)?;
        }
        Ok(())
    }

    /// The page of `key`, if it has one, through the pages looked up lately (pages come
    /// and go only through `&mut Fabric`, so what was looked up stays true).
    #[inline(always)]
    fn page(&mut self, key: u64) -> Option<&'a Page> {
        let fabric: &'a Fabric = self.fabric;
        // An SBUF partition is 4 keys from the next: fold the partition bits down, so that
        // a tile's partitions take different slots.
        let slot = &mut self.recent[((key ^ (key >> 2)) % RECENT as u64) as usize];
        if slot.0 != key {
            *slot = (key, fabric.pages.get(key));
        }
        slot.1
    }

    /// The bytes of page `key` if it is closed and [`Fabric::unlocked`] (read without a
    /// lock; zeros for a page with no storage), else `None`.
    #[inline(always)]
    fn closed(&mut self, key: u64) -> Option<&'a [u8]> {
        let fabric = self.fabric;
        match self.page(key) {
            None => Some(&ZERO_PAGE[..]),
            // SAFETY: as in `Fabric::engine_view`: no `PageMut` of the page exists for as
            // long as `fabric` is borrowed, and clones sharing the bytes do not write
            // them.
            Some(page) if !page.is_open(fabric.epoch) && fabric.unlocked(key) => {
                Some(unsafe { page.bytes.slice().as_ref() })
            }
            Some(_) => None,
        }
    }

    /// Checks the range and that every page it touches is reserved. A range inside one
    /// page (the common case) aims the destination slot at it, so that the page is looked
    /// up once (and not at all while it stays the same) for the check and the locking.
    /// (This, the source check and the piece path are `inline(always)`: measured, a call
    /// and its 72-byte `Result` cost more instructions than a small copy's checks.)
    #[inline(always)]
    fn check_reserved(&mut self, addr: FabricAddr, len: u64) -> Result<(), Error> {
        self.check_destination(addr, len)?;
        // The check proved `len >= 1` and that `addr + len - 1` does not overflow.
        let (first, last) = (addr.0 >> PAGE_SHIFT, (addr.0 + (len - 1)) >> PAGE_SHIFT);
        if first != last {
            return self.fabric.check_pages_reserved(first..last + 1);
        }
        let fabric = self.fabric;
        self.dst.aim(first, |k| fabric.open_page(k));
        match self.dst.page {
            Some(_) => Ok(()),
            None => Err(not_reserved(first)),
        }
    }

    /// [`Fabric::check`] of a source range, through the cached source region.
    #[inline(always)]
    fn check_source(&mut self, addr: FabricAddr, len: u64) -> Result<(), Error> {
        self.regions[Side::Source as usize].check(&self.fabric.map, addr, len)
    }

    /// [`Fabric::check`] of a destination range, through the cached destination region.
    #[inline(always)]
    fn check_destination(&mut self, addr: FabricAddr, len: u64) -> Result<(), Error> {
        self.regions[Side::Destination as usize].check(&self.fabric.map, addr, len)
    }

    /// Locks the pages of a piece that reads page `sk` and writes page `dk` (keeping held
    /// pages where the lock order allows, see [`PageLocks`]) and returns the source page
    /// (zeros if it has no storage; not meaningful when `sk == dk`) and the destination
    /// page.
    #[inline(always)]
    fn hold(&mut self, sk: u64, dk: u64) -> Result<(&[u8], &mut PageMut<'a>), Error> {
        // (A destination with no page is never held: it goes to `relock`, which leaves it
        // unlocked, and fails below.)
        if !(self.dst.holds(dk) && (sk == dk || self.src.ready(sk))) {
            self.relock(sk, dk);
        }
        let Some(dp) = self.dst.guard.as_mut() else {
            return Err(not_reserved(dk));
        };
        let sp = self.src.guard.as_deref().map_or(&ZERO_PAGE[..], |p| p);
        Ok((sp, dp))
    }

    /// Aims the slots at pages `sk` and `dk` and locks what they lack: each is tried
    /// without waiting; for the rest, held pages not below the lowest page still to lock
    /// are released first, then the pages are locked in ascending order. A destination page that was not reserved stays unlocked. Out of
    /// line, so that the common case (nothing to lock) stays small where it is inlined.
    #[inline(never)]
    fn relock(&mut self, sk: u64, dk: u64) {
        let fabric: &'a Fabric = self.fabric;
        let epoch = fabric.epoch;
        self.dst.aim(dk, |k| fabric.open_page(k));
        if sk == dk {
            self.src = Slot::EMPTY;
        } else {
            self.src.aim(sk, |k| fabric.pages.get(k));
        }
        // A page that can be had at once is taken out of order: nothing waits, so no
        // deadlock; only pages that would block go through the ordered path below
        // (which otherwise releases the held destination page for every source page
        // below it: a random row gather would relock both pages per descriptor).
        self.src.try_lock(|p| fabric.try_view(sk, p));
        self.dst.try_lock(|p| p.try_write(epoch));
        let Some(first) = [self.src.pending(), self.dst.pending()]
            .into_iter()
            .flatten()
            .min()
        else {
            return;
        };
        self.src.release_unless_below(first);
        self.dst.release_unless_below(first);
        if sk < dk {
            self.src.lock(|p| Some(fabric.engine_view(sk, p)));
            self.dst.lock(|p| p.write(epoch));
        } else {
            self.dst.lock(|p| p.write(epoch));
            self.src.lock(|p| Some(fabric.engine_view(sk, p)));
        }
    }

    /// Runs `f` on the `n` bytes at `addr`, inside one write-locked page.
    fn with_page<R>(
        &mut self,
        addr: u64,
        n: usize,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R, Error> {
        let (key, po) = split(addr);
        self.hold(key, key)
            .map(|(_, page)| f(page.window(po..po + n)))
    }

    /// For `n` bytes at `src` and at `dst`, each inside one page: runs `same` on the
    /// bytes from the lower start to the higher end, with the offsets of `src` and `dst`
    /// in them, when the two are in one page, else `pair` on the bytes of the read-locked
    /// source page (zeros if it has no storage) and those of the write-locked destination
    /// page.
    #[inline(always)]
    fn with_pages<R>(
        &mut self,
        src: u64,
        dst: u64,
        n: usize,
        same: impl FnOnce(&mut [u8], usize, usize) -> R,
        pair: impl FnOnce(&[u8], &mut [u8]) -> R,
    ) -> Result<R, Error> {
        let ((sk, so), (dk, doff)) = (split(src), split(dst));
        let (sp, dp) = self.hold(sk, dk)?;
        Ok(match sk == dk {
            true => {
                let lo = so.min(doff);
                same(dp.window(lo..so.max(doff) + n), so - lo, doff - lo)
            }
            false => pair(&sp[so..so + n], dp.window(doff..doff + n)),
        })
    }

    /// One piece of a reduce: inside one page on each side, or one element across a page
    /// edge (only then can a piece leave a page, see [`Walk`]).
    fn reduce_piece(
        &mut self,
        s: u64,
        d: u64,
        n: usize,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        if !fits(split(s).1, n) || !fits(split(d).1, n) {
            return self.reduce_straddling(s, d, n, dtype, op);
        }
        self.reduce_in_pages(s, d, n, dtype, op)
    }

    /// Reduces `n` bytes at `s` into `n` bytes at `d`, each inside one page (spans that
    /// overlap in one page are at most [`SCRATCH_BYTES`], see [`reduce_in_page`]).
    #[inline(always)]
    fn reduce_in_pages(
        &mut self,
        s: u64,
        d: u64,
        n: usize,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        self.with_pages(
            s,
            d,
            n,
            |p, so, doff| reduce_in_page(p, so, doff, n, dtype, op),
            |sp, dp| compute::apply(op, dtype, dp, sp),
        )?
    }

    /// A single element (at most [`Dtype::MAX_SIZE`] bytes) that crosses a page edge on
    /// either side.
    fn reduce_straddling(
        &mut self,
        s: u64,
        d: u64,
        n: usize,
        dtype: Dtype,
        op: ComputeOp,
    ) -> Result<(), Error> {
        let (mut a, mut b) = ([0u8; Dtype::MAX_SIZE], [0u8; Dtype::MAX_SIZE]);
        let (acc, val) = (&mut a[..n], &mut b[..n]);
        // Fabric::read locks on its own: hold nothing meanwhile (RwLock is not reentrant).
        self.release();
        self.fabric
            .read_through(Fabric::engine_view, FabricAddr(s), val)?;
        self.fabric
            .read_through(Fabric::engine_view, FabricAddr(d), acc)?;
        compute::apply(op, dtype, acc, val)?;
        self.write(FabricAddr(d), acc)
    }
}

/// Most bytes of one operation [`PageLocks::prefetch`] hints at (a longer one is a stream
/// the hardware prefetcher follows once started).
pub const PREFETCH_BYTES: usize = 512;
const CACHE_LINE: usize = 64;

/// The pages a [`Fabric::run_locks`] remembers: a random gather from a table of up to
/// this many pages finds each page there. (A single operation's `PageLocks` remembers
/// one: clearing these slots cost half a 4-byte copy.)
pub const RUN_PAGES: usize = 64;

/// Copies the first `n` bytes of `src` to `dst` (both hold `n`), a 4- or 8-byte element
/// in place: a call into `memcpy` cost more instructions than a 4-byte gather's copy.
#[inline(always)]
fn copy_bytes(dst: &mut [u8], src: &[u8], n: usize) {
    match n {
        4 => dst[..4].copy_from_slice(&src[..4]),
        8 => dst[..8].copy_from_slice(&src[..8]),
        _ => dst[..n].copy_from_slice(&src[..n]),
    }
}

/// Asks the CPU to load the cache line holding the byte at `at`.
#[inline(always)]
fn prefetch_line(at: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    // SAFETY: a prefetch is only a hint to the cache: it never faults, reads nothing into
    // the program and writes nothing, whatever the address.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(at.cast());
    }
    #[cfg(any(not(target_arch = "x86_64"), miri))]
    let _ = at;
}

/// The key of no page (page keys are fabric addresses shifted right by 16, below 2^48).
const NO_PAGE: u64 = u64::MAX;

/// One entry of a [`PageLocks`]: the page it is aimed at (`None`: no page, a source page
/// with no storage, or a destination page that was not reserved) and, while locked, its
/// guard.
struct Slot<'a, G> {
    key: u64,
    page: Option<&'a Page>,
    guard: Option<G>,
}

impl<'a, G> Slot<'a, G> {
    const EMPTY: Self = Slot {
        key: NO_PAGE,
        page: None,
        guard: None,
    };

    /// Aims the slot at page `key`: another page is looked up (by `lookup`) and the old
    /// guard released.
    #[inline]
    fn aim(&mut self, key: u64, lookup: impl FnOnce(u64) -> Option<&'a Page>) {
        if self.key != key {
            self.retarget(key, lookup);
        }
    }

    #[inline(never)]
    fn retarget(&mut self, key: u64, lookup: impl FnOnce(u64) -> Option<&'a Page>) {
        *self = Slot {
            key,
            page: lookup(key),
            guard: None,
        };
    }

    /// Whether the slot is aimed at page `key` and holds it locked (or `key` has no page).
    fn ready(&self, key: u64) -> bool {
        self.key == key && self.guard.is_some() == self.page.is_some()
    }

    /// Whether the slot is aimed at page `key` and holds it locked.
    fn holds(&self, key: u64) -> bool {
        self.key == key && self.guard.is_some()
    }

    /// The key of the page this slot still has to lock.
    fn pending(&self) -> Option<u64> {
        (self.guard.is_none() && self.page.is_some()).then_some(self.key)
    }

    /// Releases the guard unless its page is below `first`, the lowest page about to be
    /// locked (the lock order).
    fn release_unless_below(&mut self, first: u64) {
        if self.key >= first {
            self.guard = None;
        }
    }

    /// Locks the page if there is one, it is not locked yet and `try_lock` gets it
    /// without waiting.
    fn try_lock(&mut self, try_lock: impl FnOnce(&'a Page) -> Option<G>) {
        if self.guard.is_none() {
            self.guard = self.page.and_then(try_lock);
        }
    }

    /// Locks the page if there is one, it is not locked yet and `lock` grants it.
    fn lock(&mut self, lock: impl FnOnce(&'a Page) -> Option<G>) {
        if self.guard.is_none() {
            self.guard = self.page.and_then(lock);
        }
    }
}

fn not_reserved(key: u64) -> Error {
    Error::NotReserved {
        page: key << PAGE_SHIFT,
    }
}

/// Bytes in `count` elements of `size` bytes at `addr`, or an overflow error.
fn elems_bytes(addr: FabricAddr, count: usize, size: usize) -> Result<u64, Error> {
    let Some(bytes) = count.checked_mul(size) else {
        return Err(Error::AddressOverflow {
            addr: addr.0,
            len: u64::MAX,
        });
    };
    Ok(bytes as u64)
}

fn check_pattern(dst: FabricAddr, len: u64, pattern: &[u8]) -> Result<(), Error> {
    if pattern.is_empty() {
        return Err(Error::EmptyPattern { addr: dst.0, len });
    }
    Ok(())
}

/// Fills `out` with `pattern` repeated, starting at pattern byte `phase`: one rotated
/// period, then doubling copies (each a whole number of periods).
fn fill_pattern(out: &mut [u8], pattern: &[u8], phase: usize) {
    if let [byte] = pattern {
        out.fill(*byte);
        return;
    }
    let rotated = pattern[phase..].iter().chain(&pattern[..phase]);
    for (o, p) in out.iter_mut().zip(rotated) {
        *o = *p;
    }
    let mut done = pattern.len().min(out.len());
    while done < out.len() {
        let n = done.min(out.len() - done);
        out.copy_within(..n, done);
        done += n;
    }
}

/// A same-page reduce piece: disjoint spans are split apart; overlapping spans (only in an
/// overlapping reduce, whose pieces are capped at [`SCRATCH_BYTES`]) go through a stack
/// snapshot of the source.
fn reduce_in_page(
    page: &mut [u8],
    so: usize,
    doff: usize,
    n: usize,
    dtype: Dtype,
    op: ComputeOp,
) -> Result<(), Error> {
    if so + n <= doff {
        let (lo, hi) = page.split_at_mut(doff);
        compute::apply(op, dtype, &mut hi[..n], &lo[so..so + n])
    } else if doff + n <= so {
        let (lo, hi) = page.split_at_mut(so);
        compute::apply(op, dtype, &mut lo[doff..doff + n], &hi[..n])
    } else {
        let mut snapshot = [0u8; SCRATCH_BYTES];
        let snap = &mut snapshot[..n];
        snap.copy_from_slice(&page[so..so + n]);
        compute::apply(op, dtype, &mut page[doff..doff + n], snap)
    }
}

/// Splits an access of `len` bytes at `src` and `dst` into pieces `(offset, length)` that
/// each stay inside one page on both sides, are a multiple of `unit` bytes and at most
/// `cap`; when an element of `unit` bytes crosses a page edge it is a piece of its own.
/// When `dst` starts inside `[src, src + len)` the pieces come last-first, so that no
/// piece reads source bytes an earlier piece wrote (memmove order). The caller proved
/// both ranges in-region and `len` a multiple of `unit`, a power of two (a dtype size).
struct Walk {
    src: u64,
    dst: u64,
    lo: u64,
    hi: u64,
    unit: u64,
    cap: u64,
    backward: bool,
}

impl Walk {
    fn one(addr: u64, len: u64) -> Walk {
        Walk::two(addr, addr, len, 1, u64::MAX)
    }

    fn two(src: u64, dst: u64, len: u64, unit: u64, cap: u64) -> Walk {
        let backward = src < dst && dst < src + len;
        Walk {
            src,
            dst,
            lo: 0,
            hi: len,
            unit,
            cap,
            backward,
        }
    }
}

/// Bytes from `a` to the end of its page.
fn page_head(a: u64) -> u64 {
    PAGE_BYTES - (a & OFFSET_MASK)
}

/// Bytes from the start of the page holding byte `end - 1` up to `end`.
fn page_tail(end: u64) -> u64 {
    ((end - 1) & OFFSET_MASK) + 1
}

impl Iterator for Walk {
    type Item = (u64, usize);

    fn next(&mut self) -> Option<(u64, usize)> {
        if self.lo >= self.hi {
            return None;
        }
        let room = if self.backward {
            page_tail(self.src + self.hi).min(page_tail(self.dst + self.hi))
        } else {
            page_head(self.src + self.lo).min(page_head(self.dst + self.lo))
        };
        let fit = room.min(self.hi - self.lo).min(self.cap);
        let n = if fit < self.unit {
            self.unit
        } else {
            fit & !(self.unit - 1)
        };
        let off = if self.backward {
            self.hi -= n;
            self.hi
        } else {
            self.lo += n;
            self.lo - n
        };
        // n <= PAGE_BYTES (or one element), so it fits usize
        Some((off, n as usize))
    }
}

/// A page's part of the digest as [`Page::memo`] holds it: not known, all zero, or
/// the hash (a hash equal to either marker is not remembered).
struct DigestMemo;

impl DigestMemo {
    const UNKNOWN: u64 = 0;
    const ZERO: u64 = 1;

    /// The part remembered (`Some(None)`: an all-zero page), if any.
    fn recall(memo: &AtomicU64) -> Option<Option<u64>> {
        match memo.load(Ordering::Relaxed) {
            DigestMemo::UNKNOWN => None,
            DigestMemo::ZERO => Some(None),
            hash => Some(Some(hash)),
        }
    }

    fn remember(memo: &AtomicU64, part: Option<u64>) {
        match part {
            None => memo.store(DigestMemo::ZERO, Ordering::Relaxed),
            Some(hash) if hash > DigestMemo::ZERO => memo.store(hash, Ordering::Relaxed),
            Some(_) => {}
        }
    }
}

const DIGEST_SEED: u64 = 0x6a09_e667_f3bc_c908;
const DIGEST_MUL: u64 = 0x9e37_79b9_7f4a_7c15;

fn mix(h: u64, w: u64) -> u64 {
    (h ^ w).wrapping_mul(DIGEST_MUL).rotate_left(29)
}

/// splitmix64's finaliser.
fn finalise(mut h: u64) -> u64 {
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A page's part of the digest: the wrapping sum over its non-zero 32-byte blocks of a
/// [`mix`] chain of the block's place and its four little-endian words. A zero block
/// adds nothing, so only the page's extent is read and the part does not depend on it;
/// a change confined to one word of a block changes the block's term (each step is a
/// bijection of the word), so almost surely the part. Not cryptographic.
fn page_part(bytes: &[u8; PAGE], extent: Extent) -> u64 {
    let blocks = match extent.is_empty() {
        true => 0..0,
        false => extent.lo / HASH_BLOCK..extent.hi.div_ceil(HASH_BLOCK),
    };
    let span = &bytes[blocks.start * HASH_BLOCK..blocks.end * HASH_BLOCK];
    span.chunks_exact(HASH_BLOCK)
        .zip(blocks)
        .fold(0, |sum: u64, (block, i)| {
            sum.wrapping_add(block_term(i, block))
        })
}

/// Bytes per hashed block of a page.
const HASH_BLOCK: usize = 32;
const _: () = assert!(PAGE.is_multiple_of(HASH_BLOCK));

/// The digest term of block `i` of a page: 0 for a zero block.
fn block_term(i: usize, block: &[u8]) -> u64 {
    let (mut h, mut any) = (i as u64 + 1, 0);
    for word in block.chunks_exact(8) {
        let w = u64::from_le_bytes(word.try_into().unwrap_or_default());
        (h, any) = (mix(h, w), any | w);
    }
    h & u64::from(any != 0).wrapping_neg()
}

/// A streaming word-wise hash over 32-byte blocks: four lanes of [`mix`], one 8-byte
/// little-endian word each per block (a trailing partial block is ignored). Each step is a
/// bijection of the lane for a fixed word and of the word for a fixed lane, so a change
/// confined to one word always changes the result; it is not cryptographic. The fabric's
/// page hash and the queue file's chunk digests.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BlockHash([u64; 4]);

impl BlockHash {
    pub(crate) const fn new() -> BlockHash {
        BlockHash([1, 2, 3, 4])
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        for block in bytes.chunks_exact(32) {
            for (lane, word) in self.0.iter_mut().zip(block.chunks_exact(8)) {
                *lane = mix(
                    *lane,
                    u64::from_le_bytes(word.try_into().unwrap_or_default()),
                );
            }
        }
    }

    /// The lanes folded into one word.
    fn fold(&self) -> u64 {
        self.0.iter().fold(0, |h, &l| mix(h, l))
    }

    /// The digest: the folded lanes through the splitmix64 finaliser.
    pub(crate) fn finish(&self) -> u64 {
        finalise(self.fold())
    }
}

fn is_zero(bytes: &[u8]) -> bool {
    bytes
        .chunks(512)
        .all(|c| c.iter().fold(0u8, |a, &b| a | b) == 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{PSUM_BASE, PSUM_STRIDE, SBUF_BASE, SBUF_STRIDE};
    use proptest::prelude::*;

    const P: u64 = PAGE_BYTES;

    fn fab() -> Fabric {
        Fabric::new(Generation::Cayman)
    }

    fn bytes(f: &Fabric, addr: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0; len];
        f.read(FabricAddr(addr), &mut v).unwrap();
        v
    }

    #[test]
    fn fabric_is_sync_and_send() {
        fn shared<T: Sync + Send>() {}
        shared::<Fabric>();
    }

    /// Page storage starts on a cache line, in a fresh fabric and in its clone, so a
    /// fabric range's cache lines are exactly those `PageLocks::prefetch` steps over.
    #[test]
    fn page_storage_is_aligned_to_cache_lines() {
        let mut f = fab();
        for k in 0..8 {
            f.write(FabricAddr(k * P + 3), &[k as u8 + 1]).unwrap();
        }
        let clone = f.clone();
        for fabric in [&f, &clone] {
            let starts: Vec<usize> = fabric
                .pages
                .iter()
                .map(|(_, p)| p.bytes.start() as usize % CACHE_LINE)
                .collect();
            assert_eq!(starts, vec![0; 8]);
        }
        assert_eq!(bytes(&clone, 7 * P + 3, 1), vec![8]);
    }

    #[test]
    fn hbm_is_sparse() {
        let mut f = Fabric::new(Generation::Mariana);
        let top = 144u64 << 30;
        assert_eq!(bytes(&f, top - 4096, 4096), vec![0; 4096]);
        assert_eq!(f.allocated_bytes(), 0);
        f.write(FabricAddr(top - 1), &[7]).unwrap();
        assert_eq!(f.allocated_bytes(), P);
        assert_eq!(bytes(&f, top - 2, 2), vec![0, 7]);
    }

    #[test]
    fn reserve_each_opens_the_pages_holding_the_addresses() {
        let mut f = fab();
        f.write(FabricAddr(P + 5), &[9]).unwrap();
        f.close_pages();
        let addrs = [FabricAddr(P + 100), FabricAddr(3 * P + 7), FabricAddr(P)];
        f.reserve_each(addrs).unwrap();
        assert_eq!(
            f.allocated_bytes(),
            2 * P,
            "a page made for the new address"
        );
        for key in [1, 3] {
            assert!(f.open_page(key).is_some(), "page {key} open");
        }
        assert!(f.open_page(2).is_none());
        assert_eq!(bytes(&f, P + 5, 1), [9], "contents unchanged");
        f.close_pages();
        let cap = 96u64 << 30;
        let e = f
            .reserve_each([FabricAddr(P), FabricAddr(cap)])
            .unwrap_err();
        assert_eq!(e, Error::Unmapped { addr: cap });
        assert_eq!(f.allocated_bytes(), 2 * P);
    }

    /// The keys of the open pages among `0..n`.
    fn open_keys(f: &Fabric, n: u64) -> Vec<u64> {
        (0..n).filter(|&k| f.open_page(k).is_some()).collect()
    }

    #[test]
    fn reopen_keeps_pages_open_only_while_they_are_few_unread_and_the_engines() {
        let mut f = fab();
        let at = |keys: &[u64]| {
            keys.iter()
                .map(|k| FabricAddr(k * P + 8))
                .collect::<Vec<_>>()
        };
        f.reopen(at(&[1, 2]), None, 2).unwrap();
        assert_eq!(open_keys(&f, 8), [1, 2]);
        // a replay that reads none of them leaves them open beside its own
        f.reopen(at(&[3]), Some((5, 6)), 1).unwrap();
        assert_eq!(open_keys(&f, 8), [1, 2, 3]);
        // one that reads between the lowest and the highest open page closes them
        f.reopen(at(&[4]), Some((2, 2)), 1).unwrap();
        assert_eq!(open_keys(&f, 8), [4]);
        // a host write leaves them so (and its own page closed)
        f.write(FabricAddr(6 * P), &[1]).unwrap();
        assert_eq!(open_keys(&f, 8), [4]);
        // a page the host reserved closes them
        f.reserve(FabricAddr(7 * P), 1).unwrap();
        f.reopen(at(&[5]), None, 1).unwrap();
        assert_eq!(open_keys(&f, 8), [5]);
        // and so do more than twice the replay's pages and 64
        let many: Vec<u64> = (100..200).collect();
        f.reopen(at(&many), None, many.len()).unwrap();
        f.reopen(at(&[300]), None, 1).unwrap();
        assert_eq!(open_keys(&f, 400), [300]);
        // contents never change
        assert_eq!(bytes(&f, 6 * P, 1), [1]);
        // a clone has every page closed; the original keeps its open pages
        f.reopen(at(&[301]), None, 1).unwrap();
        let mut g = f.clone();
        assert_eq!(open_keys(&g, 400), []);
        assert_eq!(open_keys(&f, 400), [300, 301]);
        g.reopen(at(&[302]), Some((300, 300)), 1).unwrap();
        assert_eq!(open_keys(&g, 400), [302]);
    }

    #[test]
    fn a_page_widens_by_the_bytes_written_not_by_those_reserved() {
        let mut f = fab();
        let extent = |f: &mut Fabric, key: u64| {
            let i = f.pages.dense(key).unwrap();
            f.pages.get_dense_mut(i).unwrap().extent()
        };
        f.write(FabricAddr(P + 100), &[5; 4]).unwrap();
        assert_eq!(extent(&mut f, 1), Extent { lo: 100, hi: 104 });
        f.reserve(FabricAddr(0), 4 * P).unwrap();
        assert_eq!(extent(&mut f, 2), Extent::EMPTY, "reserved, not written");
        let mut locks = f.page_locks();
        locks.write(FabricAddr(P + 96), &[1; 2]).unwrap();
        locks.fill(FabricAddr(3 * P - 8), 24, &[2]).unwrap();
        locks
            .copy(FabricAddr(P + 96), FabricAddr(3 * P + 40), 8)
            .unwrap();
        // one page's copy and reduce widen by both spans (the window holding both)
        locks.copy(FabricAddr(200), FabricAddr(100), 10).unwrap();
        let (t, o) = (Dtype::U32, ComputeOp::Add);
        locks
            .reduce(FabricAddr(P + 8), FabricAddr(P + 200), 4, t, o)
            .unwrap();
        drop(locks);
        let want = [(0, 100, 210), (1, 8, 204), (2, PAGE - 8, PAGE), (3, 0, 48)];
        for (key, lo, hi) in want {
            assert_eq!(extent(&mut f, key), Extent { lo, hi }, "page {key}");
        }
        assert_eq!(bytes(&f, P + 100, 4), [5; 4], "contents kept");
        f.assert_zero_outside_extents();
    }

    #[test]
    fn hbm_edges() {
        let mut f = fab();
        let cap = 96u64 << 30;
        f.write(FabricAddr(cap - 1), &[1]).unwrap();
        let e = f
            .write(FabricAddr(cap - 1), &[1, 2])
            .unwrap_err()
            .to_string();
        assert!(e.contains("0x17fffffff") && e.contains("HBM"), "{e}");
        let e = f.read(FabricAddr(cap), &mut [0]).unwrap_err();
        assert_eq!(e, Error::Unmapped { addr: cap });
        assert_eq!(f.allocated_bytes(), P, "failed accesses allocate nothing");
    }

    #[test]
    fn partition_crossing_fails_and_writes_nothing() {
        let mut f = fab(); // cayman: 224 KiB SBUF partitions
        let end3 = SBUF_BASE + 3 * SBUF_STRIDE + 224 * 1024;
        f.write(FabricAddr(end3 - 4), &[1; 4]).unwrap();
        let before = f.clone();
        let e = f
            .write(FabricAddr(end3 - 4), &[2; 8])
            .unwrap_err()
            .to_string();
        assert!(e.contains("SBUF partition 3"), "{e}");
        let e = f.copy(FabricAddr(0), FabricAddr(end3 - 2), 4).unwrap_err();
        assert!(matches!(e, Error::OutOfRegion { .. }), "{e}");
        let psum1 = PSUM_BASE + PSUM_STRIDE;
        let e = f
            .fill(FabricAddr(psum1 - 1), 2, &[9])
            .unwrap_err()
            .to_string();
        assert!(e.contains("PSUM partition 0"), "{e}");
        f.write(FabricAddr(psum1 - 1), &[9]).unwrap();
        assert_eq!(f.first_difference(&before), Some(FabricAddr(psum1 - 1)));
    }

    #[test]
    fn u64_overflow_fails() {
        let mut f = fab();
        let e = f.read(FabricAddr(u64::MAX), &mut [0; 2]).unwrap_err();
        assert_eq!(
            e,
            Error::AddressOverflow {
                addr: u64::MAX,
                len: 2
            }
        );
        let e = f
            .copy(FabricAddr(0), FabricAddr(u64::MAX - 1), 4)
            .unwrap_err();
        assert_eq!(
            e,
            Error::AddressOverflow {
                addr: u64::MAX - 1,
                len: 4
            }
        );
        assert!(f.reserve(FabricAddr(u64::MAX), 2).is_err());
        assert_eq!(f.allocated_bytes(), 0);
    }

    #[test]
    fn empty_accesses_are_rejected() {
        let mut f = fab();
        assert_eq!(
            f.read(FabricAddr(8), &mut []),
            Err(Error::EmptyAccess { addr: 8 })
        );
        assert!(f.copy(FabricAddr(0), FabricAddr(8), 0).is_err());
        assert_eq!(
            f.fill(FabricAddr(8), 4, &[]),
            Err(Error::EmptyPattern { addr: 8, len: 4 })
        );
    }

    #[test]
    fn page_crossing_write_and_copy() {
        let mut f = fab();
        let data: Vec<u8> = (0..200u8).collect();
        f.write(FabricAddr(P - 100), &data).unwrap();
        assert_eq!(f.allocated_bytes(), 2 * P);
        f.copy(FabricAddr(P - 100), FabricAddr(3 * P - 50), 200)
            .unwrap();
        assert_eq!(bytes(&f, 3 * P - 50, 200), data);
        // into SBUF and back out of it
        let sb = SBUF_BASE + 5 * SBUF_STRIDE + P - 7;
        f.copy(FabricAddr(P - 100), FabricAddr(sb), 200).unwrap();
        assert_eq!(bytes(&f, sb, 200), data);
    }

    #[test]
    fn overlapping_copy_is_memmove() {
        let mut f = fab();
        let data: Vec<u8> = (0..=255u8).cycle().take(300).collect();
        // forward overlap across a page edge: dst inside src
        f.write(FabricAddr(P - 150), &data).unwrap();
        f.copy(FabricAddr(P - 150), FabricAddr(P - 140), 300)
            .unwrap();
        assert_eq!(bytes(&f, P - 140, 300), data);
        assert_eq!(bytes(&f, P - 150, 10), data[..10]);
        // backward overlap inside one page: src inside dst
        f.write(FabricAddr(0x100), &data).unwrap();
        f.copy(FabricAddr(0x105), FabricAddr(0x100), 295).unwrap();
        assert_eq!(bytes(&f, 0x100, 295), data[5..]);
    }

    #[test]
    fn untouched_source_copies_zeros() {
        let mut f = fab();
        f.write(FabricAddr(5 * P), &[0xff; 16]).unwrap();
        f.copy(FabricAddr(40 * P), FabricAddr(5 * P + 4), 8)
            .unwrap();
        let mut want = vec![0xff; 16];
        want[4..12].fill(0);
        assert_eq!(bytes(&f, 5 * P, 16), want);
    }

    #[test]
    fn fill_repeats_the_pattern_across_pages() {
        let mut f = fab();
        f.fill(FabricAddr(P - 4), 10, &[1, 2, 3]).unwrap();
        assert_eq!(
            bytes(&f, P - 5, 12),
            vec![0, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 0]
        );
        f.fill(FabricAddr(2 * P), 3 * P, &[0xab]).unwrap();
        assert_eq!(bytes(&f, 3 * P - 1, 2), vec![0xab, 0xab]);
        assert_eq!(bytes(&f, 5 * P - 1, 2), vec![0xab, 0]);
    }

    #[test]
    fn reduce_straddling_a_page_edge() {
        let mut f = fab();
        // three f32 at P-6: the middle one has 2 bytes in each page
        let dst = [1.5f32, 2.0, -4.0];
        let src = [0.25f32, 3.0, f32::from_bits(0x7fc0_0001)];
        f.write_elems(FabricAddr(P - 6), &dst).unwrap();
        f.write_elems(FabricAddr(7 * P - 2), &src).unwrap();
        f.reduce(
            FabricAddr(7 * P - 2),
            FabricAddr(P - 6),
            12,
            Dtype::F32,
            ComputeOp::Add,
        )
        .unwrap();
        let mut out = [0f32; 3];
        f.read_elems(FabricAddr(P - 6), &mut out).unwrap();
        assert_eq!(
            out.map(f32::to_bits),
            [1.75f32.to_bits(), 5.0f32.to_bits(), 0x7fc0_0001]
        );
        f.reduce(
            FabricAddr(7 * P - 2),
            FabricAddr(P - 6),
            12,
            Dtype::F32,
            ComputeOp::Max,
        )
        .unwrap();
        f.read_elems(FabricAddr(P - 6), &mut out).unwrap();
        assert_eq!(
            out.map(f32::to_bits),
            [1.75f32.to_bits(), 5.0f32.to_bits(), 0x7fc0_0001]
        );
        let e = f.reduce(FabricAddr(0), FabricAddr(8), 6, Dtype::F32, ComputeOp::Add);
        assert!(matches!(e, Err(Error::PartialElement { len: 6, .. })));
    }

    #[test]
    fn overlapping_reduce_uses_a_snapshot() {
        let mut f = fab();
        let v: Vec<u32> = (1..=5).collect();
        f.write_elems(FabricAddr(0x1000), &v).unwrap();
        // dst = src + 4: each element adds its left neighbour's *old* value
        f.reduce(
            FabricAddr(0x1000),
            FabricAddr(0x1004),
            16,
            Dtype::U32,
            ComputeOp::Add,
        )
        .unwrap();
        let mut out = [0u32; 5];
        f.read_elems(FabricAddr(0x1000), &mut out).unwrap();
        assert_eq!(out, [1, 3, 5, 7, 9]);
        // dst = src - 4
        f.write_elems(FabricAddr(0x1000), &v).unwrap();
        f.reduce(
            FabricAddr(0x1004),
            FabricAddr(0x1000),
            16,
            Dtype::U32,
            ComputeOp::Add,
        )
        .unwrap();
        f.read_elems(FabricAddr(0x1000), &mut out).unwrap();
        assert_eq!(out, [3, 5, 7, 9, 5]);
    }

    #[test]
    fn an_overlapping_reduce_longer_than_the_snapshot_in_one_page_is_a_snapshot() {
        let n = 3 * SCRATCH_BYTES / 4;
        let v: Vec<u32> = (1..=n as u32).collect();
        for (s, d) in [(0x1000, 0x1004), (0x1004, 0x1000)] {
            let mut f = fab();
            f.write_elems(FabricAddr(0x1000), &v).unwrap();
            let len = 4 * (n as u64 - 1);
            f.reduce(
                FabricAddr(s),
                FabricAddr(d),
                len,
                Dtype::U32,
                ComputeOp::Add,
            )
            .unwrap();
            let mut want = v.clone();
            let (si, di) = ((s - 0x1000) as usize / 4, (d - 0x1000) as usize / 4);
            for i in 0..n - 1 {
                want[di + i] = v[di + i] + v[si + i];
            }
            let mut out = vec![0u32; n];
            f.read_elems(FabricAddr(0x1000), &mut out).unwrap();
            assert_eq!(out, want, "src {s:#x} dst {d:#x}");
        }
    }

    #[test]
    fn typed_views() {
        #[derive(FromBytes, IntoBytes, Immutable, Debug, PartialEq)]
        #[repr(C)]
        struct Pair {
            a: u32,
            b: [u8; 4],
        }
        let mut f = fab();
        let p = Pair {
            a: 0x0403_0201,
            b: [5, 6, 7, 8],
        };
        f.write_obj(FabricAddr(P - 3), &p).unwrap();
        assert_eq!(bytes(&f, P - 3, 8), vec![1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(f.read_obj::<Pair>(FabricAddr(P - 3)).unwrap(), p);
        let mut idx = [0u32; 3];
        f.read_indices(FabricAddr(P - 3), Dtype::U16, &mut idx)
            .unwrap();
        assert_eq!(idx, [0x0201, 0x0403, 0x0605]);
        f.read_indices(FabricAddr(P - 3), Dtype::U8, &mut idx)
            .unwrap();
        assert_eq!(idx, [1, 2, 3]);
        f.read_indices(FabricAddr(P - 3), Dtype::U32, &mut idx[..2])
            .unwrap();
        assert_eq!(idx[..2], [0x0403_0201, 0x0807_0605]);
        let e = f
            .read_indices(FabricAddr(0), Dtype::F32, &mut idx)
            .unwrap_err();
        assert_eq!(e, Error::NotIndexDtype { dtype: "f32" });
        let h = [half::bf16::from_f32(1.0), half::bf16::from_f32(-2.0)];
        f.write_elems(FabricAddr(0), &h).unwrap();
        assert_eq!(bytes(&f, 0, 4), vec![0x80, 0x3f, 0x00, 0xc0]);
        // a long typed read goes through several stack chunks
        let many: Vec<u16> = (0..5000).collect();
        f.write_elems(FabricAddr(P - 1001), &many).unwrap();
        let mut back = vec![0u16; 5000];
        f.read_elems(FabricAddr(P - 1001), &mut back).unwrap();
        assert_eq!(back, many);
    }

    #[test]
    fn closed_pages_are_read_but_not_written_until_reserved_again() {
        let mut f = fab();
        f.write(FabricAddr(P - 2), &[1, 2, 3, 4]).unwrap();
        f.close_pages();
        // both pages exist but are closed: every shared form refuses them, writing nothing
        for e in [
            f.write_reserved(FabricAddr(P), &[9]),
            f.fill_reserved(FabricAddr(P - 2), 4, &[9]),
            f.copy_reserved(FabricAddr(P - 2), FabricAddr(P - 1), 2),
            f.reduce_reserved(
                FabricAddr(P),
                FabricAddr(P - 2),
                1,
                Dtype::U8,
                ComputeOp::Add,
            ),
        ] {
            assert!(matches!(e, Err(Error::NotReserved { .. })), "{e:?}");
        }
        assert_eq!(bytes(&f, P - 2, 4), vec![1, 2, 3, 4]);
        // reads of closed pages (lock-free) see the bytes, as sources and as plain reads
        f.reserve(FabricAddr(3 * P), 4).unwrap();
        f.copy_reserved(FabricAddr(P - 2), FabricAddr(3 * P), 4)
            .unwrap();
        assert_eq!(bytes(&f, 3 * P, 4), vec![1, 2, 3, 4]);
        let mut locks = f.page_locks();
        locks
            .reduce(
                FabricAddr(P - 2),
                FabricAddr(3 * P),
                4,
                Dtype::U8,
                ComputeOp::Add,
            )
            .unwrap();
        drop(locks);
        assert_eq!(bytes(&f, 3 * P, 4), vec![2, 4, 6, 8]);
        // a clone has every page closed; reserving opens a page of its own
        let mut g = f.clone();
        assert!(g.write_reserved(FabricAddr(3 * P), &[9]).is_err());
        g.reserve(FabricAddr(3 * P), 1).unwrap();
        g.write_reserved(FabricAddr(3 * P), &[9]).unwrap();
        assert_eq!(bytes(&f, 3 * P, 1), vec![2]);
        f.reserve(FabricAddr(P), 1).unwrap();
        f.write_reserved(FabricAddr(P), &[7]).unwrap();
        assert_eq!(bytes(&f, P - 2, 4), vec![1, 2, 7, 4]);
    }

    #[test]
    fn threads_read_a_closed_page_while_others_write_open_ones() {
        let mut f = fab();
        let table: Vec<u8> = (0..P).map(|i| (i % 251) as u8).collect();
        f.write(FabricAddr(0), &table).unwrap();
        f.close_pages();
        f.reserve(FabricAddr(P), 4 * P).unwrap();
        let f = &f;
        std::thread::scope(|s| {
            for t in 0..4u64 {
                s.spawn(move || {
                    let mut locks = f.page_locks();
                    for k in 0..P / 256 {
                        let from = (k * 7919 + t * 256) % (P - 256);
                        let to = (t + 1) * P + k * 256;
                        locks.copy(FabricAddr(from), FabricAddr(to), 256).unwrap();
                    }
                });
            }
        });
        for t in 0..4u64 {
            for k in [0, 17, P / 256 - 1] {
                let from = ((k * 7919 + t * 256) % (P - 256)) as usize;
                let got = bytes(f, (t + 1) * P + k * 256, 256);
                assert_eq!(got, table[from..from + 256]);
            }
        }
    }

    /// Reserving makes a page the fabric's own: threads write the original's reserved
    /// pages while others read the clone that shared them.
    #[test]
    fn threads_write_reserved_pages_while_others_read_the_clone_sharing_them() {
        let mut f = fab();
        let table: Vec<u8> = (0..2 * P).map(|i| (i % 253) as u8).collect();
        f.write(FabricAddr(0), &table).unwrap();
        let g = f.clone();
        f.reserve(FabricAddr(0), 2 * P).unwrap();
        let (f, g, want) = (&f, &g, &table);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                s.spawn(move || {
                    let mut locks = f.page_locks();
                    for k in 0..P / 256 {
                        let at = FabricAddr(t * P + k * 256);
                        locks.fill(at, 256, &[t as u8 + 1]).unwrap();
                    }
                });
                s.spawn(move || {
                    for _ in 0..8 {
                        assert_eq!(
                            bytes(g, t * P, P as usize),
                            want[(t * P) as usize..][..P as usize]
                        );
                    }
                });
            }
        });
        assert_eq!(bytes(f, 0, 2), [1, 1]);
        assert_eq!(bytes(f, 2 * P - 2, 2), [2, 2]);
        assert_eq!(bytes(g, 0, 2 * P as usize), table);
    }

    /// A write beside a replay widens the page's extent: clones, comparisons and digests
    /// see it.
    #[test]
    fn a_write_beside_a_replay_is_seen_by_clones_comparisons_and_digests() {
        let mut f = fab();
        f.write(FabricAddr(P + 8), &[1; 8]).unwrap();
        assert_eq!(
            f.lend(None).write_beside(FabricAddr(P + 4000), &[7; 4]),
            Ok(true)
        );
        let mut g = fab();
        g.write(FabricAddr(P + 8), &[1; 8]).unwrap();
        assert_eq!(f.first_difference(&g), Some(FabricAddr(P + 4000)));
        g.write(FabricAddr(P + 4000), &[7; 4]).unwrap();
        assert_eq!(f.first_difference(&g), None);
        assert_eq!(f.digest(), g.digest());
        let mut h = f.clone();
        h.reserve(FabricAddr(P), 1).unwrap();
        assert_eq!(bytes(&h, P + 4000, 4), [7; 4]);
    }

    #[test]
    fn extents_join_split_and_pack() {
        let e = |lo, hi| Extent::of(lo..hi);
        assert_eq!(e(5, 5), Extent::EMPTY);
        assert_eq!(e(9, 3), Extent::EMPTY);
        assert_eq!(e(10, 20).union(e(30, 40)), e(10, 40));
        assert_eq!(Extent::EMPTY.union(e(3, 4)), e(3, 4));
        assert_eq!(e(10, 40).outside(e(20, 30)), [10..20, 30..40]);
        assert_eq!(e(10, 40).outside(e(0, 30)), [0..0, 30..40]);
        assert_eq!(e(10, 40).outside(e(20, PAGE)), [10..20, 0..0]);
        assert_eq!(e(10, 40).outside(e(50, 60)), [10..40, 0..0]);
        assert_eq!(e(10, 40).outside(Extent::EMPTY), [10..40, 0..0]);
        for x in [Extent::EMPTY, Extent::FULL, e(7, 9)] {
            assert_eq!(Extent::unpack(x.pack()), x);
        }
    }

    /// What a write beside a replay may write: only while lent, only closed pages with
    /// storage of their own that the replay does not read, all of the range or nothing.
    #[test]
    fn a_write_beside_a_replay_writes_only_closed_unshared_pages_the_replay_does_not_read() {
        let mut f = fab();
        f.write(FabricAddr(0), &[1; 8]).unwrap();
        f.write(FabricAddr(2 * P), &[1; 8]).unwrap();
        let two = [2u8; 8];
        assert_eq!(
            f.write_beside(FabricAddr(2 * P), &two),
            Ok(false),
            "not lent"
        );
        let g = f.clone();
        let shared = f.lend(None).write_beside(FabricAddr(0), &two);
        assert_eq!(shared, Ok(false), "shared with a clone");
        drop(g);
        let lent = f.lend(Some((0, 0)));
        assert_eq!(lent.write_beside(FabricAddr(0), &two), Ok(false), "read");
        assert_eq!(
            lent.write_beside(FabricAddr(P), &two),
            Ok(false),
            "no storage"
        );
        let across = lent.write_beside(FabricAddr(2 * P - 4), &two);
        assert_eq!(across, Ok(false), "one page of two has no storage");
        assert_eq!(lent.write_beside(FabricAddr(2 * P), &two), Ok(true));
        let off = lent.write_beside(FabricAddr(u64::MAX - 4), &two);
        assert!(matches!(off, Err(Error::AddressOverflow { .. })), "{off:?}");
        drop(lent);
        f.reserve(FabricAddr(2 * P), 1).unwrap();
        let open = f.lend(None).write_beside(FabricAddr(2 * P), &[3; 8]);
        assert_eq!(open, Ok(false), "open");
        f.close_pages();
        assert_eq!(bytes(&f, 0, 8), [1; 8]);
        assert_eq!(bytes(&f, 2 * P - 4, 4), [0; 4]);
        assert_eq!(bytes(&f, 2 * P, 8), two);
        f.assert_zero_outside_extents();
    }

    /// Writes beside a replay race with readers and clones on other threads of pages the
    /// replay does not read: each read sees a write whole or not at all (under Miri, no
    /// data race).
    #[test]
    fn writes_beside_a_replay_and_reads_on_other_threads_see_whole_writes() {
        let mut f = fab();
        f.write(FabricAddr(0), &[9; 64]).unwrap();
        f.write(FabricAddr(P), &[0; 64]).unwrap();
        let rounds = if cfg!(miri) { 4 } else { 200 };
        let lent = f.lend(Some((0, 0)));
        let fabric: &Fabric = &lent;
        std::thread::scope(|s| {
            s.spawn(|| {
                for _ in 0..rounds {
                    let seen = bytes(fabric, P, 64);
                    assert!(seen.iter().all(|&b| b == seen[0]), "{seen:?}");
                    let copy = fabric.clone();
                    assert_eq!(bytes(&copy, 0, 4), [9; 4]);
                }
            });
            for r in 0..rounds {
                // refused only while the reader's clone shares the page
                let _ = fabric.write_beside(FabricAddr(P), &[r as u8; 64]);
                let mut locks = fabric.page_locks();
                let mut buf = [0u8; 4];
                locks.read(FabricAddr(0), &mut buf).unwrap();
                assert_eq!(buf, [9; 4]);
            }
        });
    }

    /// Page bytes are reused from dropped fabrics (see `SparePages`): a new page reads
    /// zero but where it is written, a copied one holds what it copied.
    #[test]
    fn pages_reused_from_dropped_fabrics_hold_only_what_is_written() {
        for _ in 0..4 {
            let mut old = fab();
            old.fill(FabricAddr(0), 4 * P, &[0xee]).unwrap();
        }
        let mut f = fab();
        f.write(FabricAddr(P + 5), &[1]).unwrap();
        let mut want = vec![0u8; P as usize];
        want[5] = 1;
        assert_eq!(bytes(&f, P, P as usize), want);
        let g = f.clone();
        f.write(FabricAddr(P + 6), &[2]).unwrap();
        assert_eq!(bytes(&g, P, P as usize), want);
        want[6] = 2;
        assert_eq!(bytes(&f, P, P as usize), want);
    }

    #[test]
    fn shared_forms_need_reserved_destinations() {
        let mut f = fab();
        f.reserve(FabricAddr(0), 10).unwrap();
        assert_eq!(f.allocated_bytes(), P);
        // the range runs into an unreserved page: nothing at all is written
        let e = f.fill_reserved(FabricAddr(P - 2), 4, &[1]).unwrap_err();
        assert_eq!(e, Error::NotReserved { page: P });
        assert_eq!(bytes(&f, P - 2, 2), vec![0, 0]);
        assert!(f
            .copy_reserved(FabricAddr(0), FabricAddr(2 * P), 1)
            .is_err());
        assert!(f.write_reserved(FabricAddr(P), &[1]).is_err());
        assert!(f
            .reduce_reserved(FabricAddr(0), FabricAddr(P), 4, Dtype::U8, ComputeOp::Add)
            .is_err());
        // a source needs no reservation
        f.copy_reserved(FabricAddr(9 * P), FabricAddr(0), 4)
            .unwrap();
        assert_eq!(f.first_difference(&fab()), None);
        assert_eq!(f.digest(), fab().digest());
    }

    #[test]
    fn a_lock_cache_refuses_unreserved_one_page_copies_and_reduces() {
        type Move = fn(&mut PageLocks<'_>, u64, u64, u64) -> Result<(), Error>;
        let copy: Move = |l, s, d, n| l.copy(FabricAddr(s), FabricAddr(d), n);
        let add: Move = |l, s, d, n| {
            let (s, d) = (FabricAddr(s), FabricAddr(d));
            l.reduce(s, d, n, Dtype::U8, ComputeOp::Add)
        };
        for op in [copy, add] {
            let mut f = fab();
            f.write(FabricAddr(0), &[7; 16]).unwrap();
            f.reserve(FabricAddr(3 * P), 1).unwrap();
            let mut locks = f.page_locks();
            op(&mut locks, 0, 3 * P, 4).unwrap();
            // one piece, into an unreserved page: refused every time, held pages untouched
            for _ in 0..2 {
                let e = op(&mut locks, 0, 2 * P + 8, 4);
                assert_eq!(e, Err(Error::NotReserved { page: 2 * P }));
            }
            // a bad range is refused before the reservation is looked at
            let e = op(&mut locks, 0, u64::MAX - 1, 4);
            assert!(matches!(e, Err(Error::AddressOverflow { .. })), "{e:?}");
            let e = op(&mut locks, 0, u64::MAX - 3, 4);
            assert_eq!(e, f.check(FabricAddr(u64::MAX - 3), 4).map(|_| ()));
            assert!(e.is_err());
            op(&mut locks, 4, 3 * P + 4, 4).unwrap();
            drop(locks);
            assert_eq!(bytes(&f, 3 * P, 12), [7, 7, 7, 7, 7, 7, 7, 7, 0, 0, 0, 0]);
            assert_eq!(f.allocated_bytes(), 2 * P);
        }
    }

    #[test]
    fn comparison_and_digest() {
        let mut a = fab();
        let mut b = fab();
        b.reserve(FabricAddr(SBUF_BASE), 3 * P).unwrap();
        assert_eq!(a.first_difference(&b), None);
        assert_eq!(a.digest(), b.digest());
        a.write(FabricAddr(SBUF_BASE + 70_000), &[3]).unwrap();
        assert_eq!(a.first_difference(&b), Some(FabricAddr(SBUF_BASE + 70_000)));
        assert_eq!(b.first_difference(&a), Some(FabricAddr(SBUF_BASE + 70_000)));
        assert_ne!(a.digest(), b.digest());
        b.write(FabricAddr(SBUF_BASE + 70_000), &[3]).unwrap();
        assert_eq!(a.digest(), b.digest());
        a.write(FabricAddr(5), &[1]).unwrap();
        a.write(FabricAddr(PSUM_BASE), &[1]).unwrap();
        assert_eq!(a.first_difference(&b), Some(FabricAddr(5)));
        // the digest is position-sensitive inside a page and across pages
        let mut c = fab();
        c.write(FabricAddr(6), &[1]).unwrap();
        let mut d = fab();
        d.write(FabricAddr(P + 5), &[1]).unwrap();
        let mut e = fab();
        e.write(FabricAddr(5), &[1]).unwrap();
        let digests = [c.digest(), d.digest(), e.digest(), fab().digest()];
        for i in 0..4 {
            for j in 0..i {
                assert_ne!(digests[i], digests[j], "{i} {j}");
            }
        }
        // the digest is a fixed function of the contents
        assert_eq!(e.digest(), e.clone().digest());
    }

    #[test]
    fn concurrent_shared_execution() {
        let mut f = fab();
        f.reserve(FabricAddr(0), 4 * P).unwrap();
        for q in 0..4u8 {
            f.fill(FabricAddr(u64::from(q) * P), P, &[q + 1]).unwrap();
        }
        let f = f;
        // queues copy between the same pages in opposite directions (disjoint bytes) and
        // reduce into a third page: the fixed lock order keeps this deadlock-free
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let f = &f;
                s.spawn(move || {
                    for i in 0..200u64 {
                        let at = (t * 200 + i) * 16;
                        let (src, dst) = if t % 2 == 0 {
                            (at, P + at)
                        } else {
                            (P + at, at)
                        };
                        f.copy_reserved(FabricAddr(src), FabricAddr(dst), 16)
                            .unwrap();
                        f.reduce_reserved(
                            FabricAddr(3 * P + at),
                            FabricAddr(2 * P + at),
                            16,
                            Dtype::U8,
                            ComputeOp::Add,
                        )
                        .unwrap();
                    }
                });
            }
        });
        // threads 0 and 2 copied page 0 (1s) over page 1; 1 and 3 page 1 (2s) over page 0
        assert_eq!(bytes(&f, P, 16), vec![1; 16]); // thread 0's destination
        assert_eq!(bytes(&f, 0, 16), vec![1; 16]); // its source, unchanged
        assert_eq!(bytes(&f, 3200, 16), vec![2; 16]); // thread 1's destination
        assert_eq!(bytes(&f, P + 3200, 16), vec![2; 16]);
        assert_eq!(bytes(&f, P + 6400, 16), vec![1; 16]); // thread 2
        assert_eq!(bytes(&f, 9600, 16), vec![2; 16]); // thread 3
        assert_eq!(bytes(&f, 12_800, 16), vec![1; 16]); // past every thread
        assert_eq!(bytes(&f, 2 * P + 12_784, 16), vec![3 + 4; 16]);
        assert_eq!(bytes(&f, 2 * P + 12_800, 16), vec![3; 16]);
    }

    #[test]
    fn a_lock_cache_serves_mixed_operations() {
        let mut f = fab();
        f.write(FabricAddr(P), &[7; 8]).unwrap();
        // pages 0 and 1 (a host write leaves its page closed)
        f.reserve(FabricAddr(0), P + 8).unwrap();
        let mut locks = f.page_locks();
        // page 1 -> page 0 keeps both locked; then a source page with no storage reads 0
        locks.copy(FabricAddr(P), FabricAddr(0), 8).unwrap();
        locks.copy(FabricAddr(40 * P), FabricAddr(2), 2).unwrap();
        // an unreserved destination page fails before any byte moves; the cache goes on
        let e = locks.fill(FabricAddr(2 * P - 2), 4, &[9]);
        assert_eq!(e, Err(Error::NotReserved { page: 2 * P }));
        locks.fill(FabricAddr(6), 1, &[5]).unwrap();
        // a u16 straddling pages 0 and 1 (0x0700) plus 0x0707 from page 1 is 0x0e07
        locks
            .reduce(
                FabricAddr(P + 4),
                FabricAddr(P - 1),
                2,
                Dtype::U16,
                ComputeOp::Add,
            )
            .unwrap();
        // once released, the same thread may read through the fabric
        locks.release();
        assert_eq!(bytes(&f, 0, 8), vec![7, 7, 0, 0, 7, 7, 5, 7]);
        assert_eq!(bytes(&f, P - 1, 2), vec![0x07, 0x0e]);
        assert_eq!(bytes(&f, P + 4, 4), vec![7, 7, 7, 7]);
        drop(locks);
        assert_eq!(f.allocated_bytes(), 2 * P);
    }

    #[test]
    fn long_lived_lock_caches_keep_the_lock_order() {
        let mut f = fab();
        for k in 0..4u64 {
            f.fill(FabricAddr(k * P), P, &[k as u8 + 1]).unwrap();
        }
        f.reserve(FabricAddr(0), 4 * P).unwrap();
        let f = f;
        // Each thread owns 64 bytes of every page (lanes A and B of 32) and cycles, from its
        // own phase, through pairs locked ascending and descending, some keeping a held page
        // and some having to release it first (1.A += 2.A then 0.A -> 1.B must let page 1
        // go before locking page 0, while 1.B -> 0.B holds 0 and waits for 1).
        let start = std::sync::Barrier::new(4);
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (f, start) = (&f, &start);
                s.spawn(move || {
                    let (a, b) = (t * 64, t * 64 + 32);
                    let at = |page: u64, lane: u64| FabricAddr(page * P + lane);
                    let mut locks = f.page_locks();
                    start.wait();
                    for i in 0..4000 {
                        match (i + t) % 5 {
                            0 => locks.copy(at(0, a), at(3, a), 32),
                            1 => locks.copy(at(3, a), at(0, a), 32),
                            2 => locks.reduce(at(2, a), at(1, a), 32, Dtype::F32, ComputeOp::Add),
                            3 => locks.copy(at(0, a), at(1, b), 32),
                            _ => locks.copy(at(1, b), at(0, b), 32),
                        }
                        .unwrap();
                    }
                });
            }
        });
        // 800 f32 adds of page 2's bytes to page 1's, in order: every add changes the sum,
        // so a lost or doubled add shows (integer adds would saturate at the dtype's top)
        let mut sum = f32::from_bits(0x0202_0202);
        for _ in 0..800 {
            sum += f32::from_bits(0x0303_0303);
        }
        let summed: Vec<u8> = std::iter::repeat_n(sum.to_le_bytes(), 8)
            .flatten()
            .collect();
        for t in 0..4u64 {
            let (a, b) = (t * 64, t * 64 + 32);
            // thread 1 starts with 3.A -> 0.A, so its copies carry page 3's 4 around;
            // every other thread first copies page 0's 1 over page 3
            let carried = if t == 1 { 4 } else { 1 };
            assert_eq!(bytes(&f, a, 64), vec![carried; 64], "page 0, thread {t}");
            assert_eq!(bytes(&f, P + a, 32), summed, "page 1 A");
            assert_eq!(bytes(&f, P + b, 32), vec![carried; 32], "page 1 B");
            assert_eq!(bytes(&f, 2 * P + a, 64), vec![3; 64], "page 2");
            assert_eq!(bytes(&f, 3 * P + a, 32), vec![carried; 32], "page 3 A");
            assert_eq!(bytes(&f, 3 * P + b, 32), vec![4; 32], "page 3 B");
        }
        assert_eq!(bytes(&f, P + 256, 2), vec![2, 2], "past every thread");
    }

    #[test]
    fn prefetch_anywhere_changes_nothing() {
        let mut f = fab();
        f.write(FabricAddr(P - 3), &[7; 6]).unwrap();
        let before = f.digest();
        let mut locks = f.page_locks();
        for addr in [0, P - 1, P - 3, 5 * P, u64::MAX, u64::MAX - 600] {
            for len in [0, 1, 64, 4096, u32::MAX] {
                locks.prefetch(FabricAddr(addr), len);
            }
        }
        drop(locks);
        assert_eq!(f.digest(), before);
        assert_eq!(f.allocated_bytes(), 2 * PAGE_BYTES);
    }

    // ---- model-based property test ----------------------------------------------------

    const SPAN: u64 = 4 * P;

    #[derive(Debug, Clone)]
    enum Op {
        Write(u64, Vec<u8>),
        Copy(u64, u64, u64),
        Fill(u64, u64, Vec<u8>),
        Reduce(u64, u64, u64, Dtype, ComputeOp),
    }

    /// Addresses biased to page edges; lengths that cross pages.
    fn addr() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..SPAN,
            (1..4u64, -8i64..8).prop_map(|(p, d)| (p * P).wrapping_add_signed(d))
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        let len = 1..(P + 300);
        prop_oneof![
            (addr(), proptest::collection::vec(any::<u8>(), 1..600))
                .prop_map(|(a, v)| Op::Write(a, v)),
            // a whole page of one byte (zeros too)
            (0..4u64, prop_oneof![Just(0u8), any::<u8>()])
                .prop_map(|(k, b)| Op::Write(k * P, vec![b; P as usize])),
            (addr(), addr(), len.clone()).prop_map(|(s, d, n)| Op::Copy(s, d, n)),
            (
                addr(),
                len.clone(),
                proptest::collection::vec(any::<u8>(), 1..5)
            )
                .prop_map(|(a, n, p)| Op::Fill(a, n, p)),
            (
                addr(),
                addr(),
                1..4000u64,
                proptest::sample::select(Dtype::ALL.to_vec()),
                proptest::sample::select(ComputeOp::ALL.to_vec())
            )
                .prop_map(|(s, d, n, t, o)| Op::Reduce(
                    s,
                    d,
                    n - n % t.size() as u64 + t.size() as u64,
                    t,
                    o
                )),
        ]
    }

    /// The flat reference: a Vec over `[0, SPAN)`, snapshot semantics, no pages.
    fn model(m: &mut [u8], op: &Op) -> bool {
        let fits = |a: u64, n: u64| a + n <= SPAN;
        match op {
            Op::Write(a, v) if fits(*a, v.len() as u64) => {
                m[*a as usize..][..v.len()].copy_from_slice(v)
            }
            Op::Copy(s, d, n) if fits(*s, *n) && fits(*d, *n) => {
                m.copy_within(*s as usize..(*s + *n) as usize, *d as usize)
            }
            Op::Fill(a, n, p) if fits(*a, *n) => {
                for (i, b) in m[*a as usize..(*a + *n) as usize].iter_mut().enumerate() {
                    *b = p[i % p.len()];
                }
            }
            Op::Reduce(s, d, n, t, o) if fits(*s, *n) && fits(*d, *n) => {
                let snap = m[*s as usize..(*s + *n) as usize].to_vec();
                compute::apply(*o, *t, &mut m[*d as usize..(*d + *n) as usize], &snap).unwrap();
            }
            _ => return false,
        }
        true
    }

    fn run(f: &mut Fabric, op: &Op) -> Result<(), Error> {
        match op {
            Op::Write(a, v) => f.write(FabricAddr(*a), v),
            Op::Copy(s, d, n) => f.copy(FabricAddr(*s), FabricAddr(*d), *n),
            Op::Fill(a, n, p) => f.fill(FabricAddr(*a), *n, p),
            Op::Reduce(s, d, n, t, o) => f.reduce(FabricAddr(*s), FabricAddr(*d), *n, *t, *o),
        }
    }

    /// `run` through one lock cache kept across operations, prefetching each operation's
    /// ranges first (a hint that must change nothing).
    fn run_locked<const R: usize>(locks: &mut PageLocks<'_, R>, op: &Op) -> Result<(), Error> {
        let (src, dst, len) = match op {
            Op::Write(a, v) => (*a, *a, v.len() as u64),
            Op::Copy(s, d, n) | Op::Reduce(s, d, n, ..) => (*s, *d, *n),
            Op::Fill(a, n, _) => (*a, *a, *n),
        };
        locks.prefetch(FabricAddr(src), len as u32);
        locks.prefetch(FabricAddr(dst), len as u32);
        match op {
            Op::Write(a, v) => locks.write(FabricAddr(*a), v),
            Op::Copy(s, d, n) => locks.copy(FabricAddr(*s), FabricAddr(*d), *n),
            Op::Fill(a, n, p) => locks.fill(FabricAddr(*a), *n, p),
            Op::Reduce(s, d, n, t, o) => locks.reduce(FabricAddr(*s), FabricAddr(*d), *n, *t, *o),
        }
    }

    /// One step on one of several fabrics (indices modulo their count).
    #[derive(Debug, Clone)]
    enum Step {
        /// The operation through the `&mut` forms.
        Run(usize, Op),
        /// The operation through a lock cache, its destination reserved first.
        Reserved(usize, Op),
        /// The operation through a lock cache if its destination pages are open.
        Shared(usize, Op),
        /// Fabric `to` becomes a clone of fabric `from`.
        Clone { from: usize, to: usize },
        /// Every page closed.
        Close(usize),
        /// The digest taken (page parts remembered).
        Digest(usize),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            3 => (0..3usize, op()).prop_map(|(at, op)| Step::Run(at, op)),
            3 => (0..3usize, op()).prop_map(|(at, op)| Step::Reserved(at, op)),
            3 => (0..3usize, op()).prop_map(|(at, op)| Step::Shared(at, op)),
            2 => (0..3usize, 0..3usize).prop_map(|(from, to)| Step::Clone { from, to }),
            1 => (0..3usize).prop_map(Step::Close),
            2 => (0..3usize).prop_map(Step::Digest),
        ]
    }

    /// The destination range of `op`.
    fn destination(op: &Op) -> (u64, u64) {
        match op {
            Op::Write(a, v) => (*a, v.len() as u64),
            Op::Fill(a, n, _) => (*a, *n),
            Op::Copy(_, d, n) | Op::Reduce(_, d, n, ..) => (*d, *n),
        }
    }

    /// Takes `step` on the fabrics and their models.
    fn take(fabrics: &mut [(Fabric, Vec<u8>)], step: &Step) -> Result<(), TestCaseError> {
        match step {
            Step::Run(at, op) => {
                let (f, m) = &mut fabrics[*at];
                if model(m, op) {
                    prop_assert!(run(f, op).is_ok());
                }
            }
            Step::Reserved(at, op) => {
                let (f, m) = &mut fabrics[*at];
                if model(m, op) {
                    let (dst, len) = destination(op);
                    f.reserve(FabricAddr(dst), len).unwrap();
                    prop_assert!(run_locked(&mut f.page_locks(), op).is_ok());
                }
            }
            Step::Shared(at, op) => {
                let (f, m) = &mut fabrics[*at];
                let (dst, len) = destination(op);
                let keys = dst / P..=(dst + len - 1) / P;
                let open = dst + len <= SPAN && keys.clone().all(|k| f.open_page(k).is_some());
                if open && model(m, op) {
                    prop_assert!(run_locked(&mut f.page_locks(), op).is_ok());
                }
            }
            Step::Clone { from, to } => {
                fabrics[*to] = (fabrics[*from].0.clone(), fabrics[*from].1.clone())
            }
            Step::Close(at) => fabrics[*at].0.close_pages(),
            Step::Digest(at) => {
                fabrics[*at].0.digest();
            }
        }
        Ok(())
    }

    /// A new fabric holding `m` at 0: every page written whole, or (`sparse`) only the
    /// non-zero bytes written.
    fn fresh(m: &[u8], sparse: bool) -> Fabric {
        let mut f = fab();
        match sparse {
            false => f.write(FabricAddr(0), m).unwrap(),
            true => {
                for (i, &b) in m.iter().enumerate().filter(|(_, &b)| b != 0) {
                    f.write(FabricAddr(i as u64), &[b]).unwrap();
                }
            }
        }
        f
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// `read_ranges` gives what `read` of each range gives, bytes or the first
        /// range's error, over SBUF partitions (their ends included), HBM and unmapped
        /// addresses; a wrong buffer length is refused.
        #[test]
        fn read_ranges_reads_what_read_reads_range_by_range(
            ranges in proptest::collection::vec((0..4usize, prop_oneof![0..3 * P, P - 64..P + 2100], 0..40u64), 1..12),
            short in any::<bool>(),
        ) {
            let mut f = fab();
            let stride = SBUF_STRIDE;
            let bases = [0, SBUF_BASE, SBUF_BASE + 5 * stride, PSUM_BASE + 7 * PSUM_STRIDE];
            for (k, base) in bases.iter().enumerate() {
                let ramp: Vec<u8> = (0..2000).map(|i| (i % 241) as u8 + k as u8).collect();
                f.write(FabricAddr(*base), &ramp).unwrap();
            }
            let ranges: Vec<(u64, u64)> = ranges
                .iter()
                .map(|&(b, off, len)| (bases[b].wrapping_sub(P).wrapping_add(off), len))
                .collect();
            let each: Result<Vec<u8>, Error> = ranges.iter().try_fold(Vec::new(), |mut v, &(a, n)| {
                let mut buf = vec![0; n as usize];
                f.read(FabricAddr(a), &mut buf)?;
                v.extend(buf);
                Ok(v)
            });
            let total: u64 = ranges.iter().map(|r| r.1).sum();
            let mut out = vec![0xAA; total as usize + usize::from(short)];
            let got = f.read_ranges(&ranges, &mut out);
            if short {
                let refused = matches!(got, Err(Error::OperandLengthMismatch { .. }));
                prop_assert!(refused, "{:?}", got);
            } else {
                prop_assert_eq!(got.map(|()| out), each);
            }
        }

        #[test]
        fn one_lock_cache_matches_flat_model(ops in proptest::collection::vec(op(), 1..24)) {
            let mut f = fab();
            f.reserve(FabricAddr(0), SPAN).unwrap();
            let mut m = vec![0u8; SPAN as usize];
            let mut locks = f.page_locks();
            for op in &ops {
                if model(&mut m, op) {
                    prop_assert!(run_locked(&mut locks, op).is_ok());
                }
            }
            drop(locks);
            prop_assert_eq!(bytes(&f, 0, SPAN as usize), m);
        }

        /// One-page copies and reduces into the open page of a fabric whose other pages
        /// are closed (written before) or have no storage: the closed-source path of a
        /// gather and of a scatter.
        #[test]
        fn copies_from_closed_open_and_missing_pages_match_flat_model(
            writes in proptest::collection::vec((0..2 * P, proptest::collection::vec(any::<u8>(), 1..300)), 0..6),
            open_page in 0..4u64,
            copies in proptest::collection::vec((addr(), 0..P, 1..300u64), 1..32),
            reduce in proptest::option::of((
                proptest::sample::select(Dtype::ALL.to_vec()),
                proptest::sample::select(ComputeOp::ALL.to_vec()),
            )),
        ) {
            let mut f = fab();
            let mut m = vec![0u8; SPAN as usize];
            // pages 0 and 1 get storage; 2 and 3 have none unless one of them is opened
            let ramp: Vec<u8> = (0..2 * P).map(|i| (i % 251) as u8 + 1).collect();
            let ramp = [(0, ramp)];
            for (a, v) in ramp.iter().chain(&writes) {
                f.write(FabricAddr(*a), v).unwrap();
                m[*a as usize..][..v.len()].copy_from_slice(v);
            }
            f.close_pages();
            let ops: Vec<Op> = copies.iter().map(|&(src, off, n)| {
                let dst = open_page * P + off.min(P - n);
                match reduce {
                    None => Op::Copy(src, dst, n),
                    Some((t, o)) => {
                        let n = (n / t.size() as u64).max(1) * t.size() as u64;
                        Op::Reduce(src, dst - dst % t.size() as u64, n, t, o)
                    }
                }
            }).collect();
            let ops: Vec<Op> = ops.into_iter().filter(|op| model(&mut m, op)).collect();
            // the same through a lock cache remembering one page, two (the four pages
            // share their slots) and a run's
            // (clones, each reserving its open page: a clone's pages are all closed)
            let (mut one, mut two, mut run) = (f.clone(), f.clone(), f);
            for g in [&mut one, &mut two, &mut run] {
                g.reserve(FabricAddr(open_page * P), P).unwrap();
            }
            let mut locks = one.page_locks();
            for op in &ops {
                prop_assert!(run_locked(&mut locks, op).is_ok());
            }
            drop(locks);
            let mut locks = two.locks::<2>();
            for op in &ops {
                prop_assert!(run_locked(&mut locks, op).is_ok());
            }
            drop(locks);
            let mut locks = run.run_locks();
            for op in &ops {
                prop_assert!(run_locked(&mut locks, op).is_ok());
            }
            drop(locks);
            for g in [&one, &two, &run] {
                prop_assert_eq!(bytes(g, 0, SPAN as usize), m.clone());
            }
        }

        /// Three fabrics that clone one another, each written through the `&mut` forms
        /// and through reserved pages, closed and digested in any order: each holds what
        /// its own flat model says (a write to one never shows in a clone sharing its
        /// pages), its digest is that of a fresh fabric of the same bytes (a remembered
        /// page part is forgotten by every write), and the lowest difference between two
        /// is the models'.
        #[test]
        fn clones_diverge_by_their_own_writes_only(
            steps in proptest::collection::vec(step(), 1..24),
        ) {
            let mut fabrics: Vec<(Fabric, Vec<u8>)> =
                (0..3).map(|_| (fab(), vec![0u8; SPAN as usize])).collect();
            for step in &steps {
                take(&mut fabrics, step)?;
            }
            for (f, m) in &fabrics {
                prop_assert_eq!(&bytes(f, 0, SPAN as usize), m);
                prop_assert_eq!(f.digest(), fresh(m, false).digest());
                f.assert_zero_outside_extents();
            }
            for (a, ma) in &fabrics {
                for (b, mb) in &fabrics {
                    let want = ma.iter().zip(mb).position(|(x, y)| x != y);
                    prop_assert_eq!(a.first_difference(b), want.map(|i| FabricAddr(i as u64)));
                }
            }
        }

        /// A page never touched, one reserved but not written, one written with zeros
        /// and one written and then zeroed again compare and digest alike.
        #[test]
        fn untouched_reserved_and_zeroed_pages_are_alike(
            data in proptest::collection::vec(any::<u8>(), 1..3000),
            at in 0..SPAN - 3000,
            how in 0..3u8,
        ) {
            let mut m = vec![0u8; SPAN as usize];
            m[at as usize..][..data.len()].copy_from_slice(&data);
            let sparse = fresh(&m, true);
            let mut f = fresh(&m, false);
            let rest = (0..SPAN / P).filter(|k| !(at / P..=(at + 2999) / P).contains(k));
            for k in rest {
                match how {
                    0 => f.reserve(FabricAddr(k * P), 1).unwrap(),
                    1 => f.write(FabricAddr(k * P + 17), &[0; 100]).unwrap(),
                    _ => {
                        f.write(FabricAddr(k * P), &[9; 100]).unwrap();
                        f.digest();
                        f.fill(FabricAddr(k * P), 100, &[0]).unwrap();
                    }
                }
            }
            prop_assert_eq!(f.first_difference(&sparse), None);
            prop_assert_eq!(sparse.first_difference(&f), None);
            prop_assert_eq!(f.digest(), sparse.digest());
        }

        #[test]
        fn fabric_matches_flat_model(ops in proptest::collection::vec(op(), 1..12)) {
            let mut f = fab();
            let mut m = vec![0u8; SPAN as usize];
            for op in &ops {
                // ops that leave [0, SPAN) still land in HBM; only those inside are modelled
                if model(&mut m, op) {
                    prop_assert!(run(&mut f, op).is_ok());
                }
            }
            prop_assert_eq!(bytes(&f, 0, SPAN as usize), m);
        }
    }

    proptest! {
        /// A gather is its rows read in turn and written one after another: from closed
        /// pages, an open one, one never written and across page edges, found by the
        /// hull of a part or row by row; a row off the fabric fails the gather at that
        /// row, the parts before it written and its own not. Some gathers' rows cluster
        /// around the end of a region (HBM's, an SBUF or a PSUM partition's), so that a
        /// hull meets the end.
        #[test]
        fn a_gather_is_its_rows_read_in_turn(
            open in 0..4u64,
            len in prop_oneof![Just(4usize), Just(8usize), 1..=64usize],
            rows in proptest::collection::vec(
                prop_oneof![8 => addr(), 1 => (0..SPAN / 4).prop_map(|a| a * 4)],
                1..300,
            ),
            off_at in proptest::option::of(0..300usize),
            near_end in proptest::option::of((0..5usize, 0..2u64)),
        ) {
            let g = Generation::Cayman;
            let ends = [
                g.hbm_bytes(),
                SBUF_BASE + g.sbuf_partition_bytes(),
                SBUF_BASE + 127 * SBUF_STRIDE + g.sbuf_partition_bytes(),
                PSUM_BASE + PSUM_STRIDE,
                PSUM_BASE + 128 * PSUM_STRIDE,
            ];
            let rows: Vec<u64> = match near_end {
                // rows starting from 160 bytes below the end, up to it or 32 past it
                Some((e, past)) => rows.iter().map(|&a| ends[e] - 160 + a % (160 + 32 * past)).collect(),
                None => rows,
            };
            let mut f = fab();
            let pattern: Vec<u8> = (0..3 * P).map(|i| (i * 7 + i / 251) as u8).collect();
            f.write(FabricAddr(0), &pattern).unwrap();
            f.close_pages();
            f.reserve(FabricAddr(open * P), 1).unwrap();
            let end = Generation::Cayman.hbm_bytes();
            let mut rows = rows;
            if let Some(row) = off_at.and_then(|k| rows.get_mut(k)) {
                *row = end - 2;
            }
            let dst = 16 * P;
            let total = rows.len() * len;
            f.reserve(FabricAddr(dst), total as u64).unwrap();
            let bad = rows.iter().position(|&a| f.check(FabricAddr(a), len as u64).is_err());
            let expected: Vec<u8> = rows
                .iter()
                .take(bad.unwrap_or(rows.len()))
                .flat_map(|&a| bytes(&f, a, len))
                .collect();
            let gathered = f.run_locks().gather(0..rows.len(), |i| rows[i], len, FabricAddr(dst));
            let per = GATHER_BYTES / len;
            let written = match (gathered, bad) {
                (Ok(()), None) => total,
                (Err((i, _)), Some(b)) => {
                    prop_assert_eq!(i, b);
                    b / per * per * len
                }
                (got, bad) => return Err(TestCaseError::fail(format!("{got:?}, bad row {bad:?}"))),
            };
            let out = bytes(&f, dst, total);
            prop_assert_eq!(&out[..written], &expected[..written]);
            prop_assert!(out[written..].iter().all(|&b| b == 0));
        }
    }
}
