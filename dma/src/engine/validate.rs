//! The validation pass every replay runs before it writes a byte: ranges, semaphores,
//! timing, the optional race check, and the set of destination pages to reserve.
//!
//! The pass streams the source round-robin in batches of [`VALIDATE_BATCH`], feeding a
//! queue only while the [`QueueTimeline`] does not hold it on a semaphore, so the timeline
//! holds at most one batch per queue. If every queue left is held (a wait cycle or a wait
//! that is never reached), the rest of the queues stream through the range and semaphore
//! checks alone, and the semaphore error is reported at the end. The batch size is fixed
//! so that which bad descriptor is reported does not depend on the engine's configuration.
//! A batch with no WAIT or SIGNAL whose sources lie in one region and destinations in one
//! (each side's hull, found in one pass) passes the range rule whole; any other batch, and
//! every batch under the race check, is checked descriptor by descriptor, which finds the
//! same bad descriptor as before.

use hashbrown::HashMap;

use crate::addr::RegionCache;
use crate::block::{Block, Rows};
use crate::descriptor::{Descriptor, SemaphoreLedger};
use crate::error::Error;
use crate::fabric::{Fabric, PAGE_BYTES};
use crate::queue_file::MAX_BATCH;
use crate::timing::{QueueTimeline, TimingModel};
use crate::FabricAddr;

use super::race::RaceRecorder;
use super::report::ReplaySummary;
use super::source::QueueSource;
use super::{lock, Engine, EngineConfig, RaceCheck, Validated};

/// Descriptors per validation batch.
pub(crate) const VALIDATE_BATCH: usize = MAX_BATCH;

/// What validation proved and found.
#[derive(Debug)]
pub(crate) struct Plan {
    /// The summary of the replay (no descriptor fails).
    pub summary: ReplaySummary,
    pub pages: PageSet,
    /// Whether some descriptor waits or signals.
    pub semaphores: bool,
    /// Where the descriptors read and write.
    pub footprint: Footprint,
    /// Whether the replay was validated ahead of its run ([`super::Engine::validate`]),
    /// which deals it too, so that its first run does not ([`Plan::deals_by_page`]; a
    /// second run of the same queues deals them again on its own path).
    pub ahead: bool,
    /// The validator's timeline, its report taken: kept for the next validation
    /// ([`Plan::into_kept`]).
    timeline_kept: QueueTimeline,
}

/// What one validation leaves for the next to fill again without allocating: its page
/// set and timeline (`Default`: nothing kept yet).
#[derive(Debug, Default)]
pub(crate) struct Kept {
    pub pages: PageSet,
    timeline: Option<QueueTimeline>,
}

/// Where a replay's checked descriptors read and write: the hulls (lowest and highest
/// byte) of their source and of their destination ranges, and whether each destination
/// range lies inside one fabric page. Enough to tell that a run may be dealt by
/// destination page ([`Footprint::pages_independent`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Footprint {
    reads: (u64, u64),
    writes: (u64, u64),
    one_page_writes: bool,
    bytes_written: u64,
}

impl Default for Footprint {
    /// Nothing read or written.
    fn default() -> Footprint {
        Footprint {
            reads: (u64::MAX, 0),
            writes: (u64::MAX, 0),
            one_page_writes: true,
            bytes_written: 0,
        }
    }
}

impl Footprint {
    /// Adds a descriptor (`len >= 1`, as every descriptor has; a range end past the
    /// address space saturates, so that no region holds the hull).
    #[inline(always)]
    fn add(&mut self, d: &Descriptor) {
        let hull = |h: &mut (u64, u64), (at, len): (FabricAddr, u64)| {
            *h = (h.0.min(at.0), h.1.max(at.0.saturating_add(len - 1)));
        };
        let (dst, len) = d.dest_range();
        hull(&mut self.writes, (dst, len));
        self.bytes_written += len;
        self.one_page_writes &= dst.0 / PAGE_BYTES == dst.0.saturating_add(len - 1) / PAGE_BYTES;
        if let Some(src) = d.source_range() {
            hull(&mut self.reads, src);
        }
    }

    /// Both footprints together.
    fn join(self, other: Footprint) -> Footprint {
        let hull = |a: (u64, u64), b: (u64, u64)| (a.0.min(b.0), a.1.max(b.1));
        Footprint {
            reads: hull(self.reads, other.reads),
            writes: hull(self.writes, other.writes),
            one_page_writes: self.one_page_writes && other.one_page_writes,
            bytes_written: self.bytes_written + other.bytes_written,
        }
    }

    /// Whether a byte of the `len` bytes at `addr` lies between the lowest and the highest
    /// byte read, or between the lowest and the highest written.
    pub(crate) fn meets(&self, addr: u64, len: u64) -> bool {
        let Some(last) = len.checked_sub(1).map(|l| addr.saturating_add(l)) else {
            return false;
        };
        let meets = |(lo, hi): (u64, u64)| lo <= hi && addr <= hi && lo <= last;
        meets(self.reads) || meets(self.writes)
    }

    /// The page keys (`address >> 16`) of the lowest and the highest byte read, or
    /// `None` if nothing is read.
    pub(crate) fn read_pages(&self) -> Option<(u64, u64)> {
        let (lo, hi) = self.reads;
        (lo <= hi).then_some((lo / PAGE_BYTES, hi / PAGE_BYTES))
    }

    /// Whether every destination lies inside one page and no byte read is a byte written
    /// (the hulls do not meet): then descriptors on different destination pages touch no
    /// common byte.
    fn pages_independent(&self) -> bool {
        let (r, w) = (self.reads, self.writes);
        self.one_page_writes && (r.0 > r.1 || w.0 > w.1 || r.1 < w.0 || w.1 < r.0)
    }
}

impl Plan {
    /// The plan's buffers, emptied, for the next validation.
    pub(crate) fn into_kept(self) -> Kept {
        let mut pages = self.pages;
        pages.clear();
        Kept {
            pages,
            timeline: Some(self.timeline_kept),
        }
    }

    /// Whether this replay runs best as page buckets: its pages fall in two buckets or
    /// more (one bucket would run on one thread), are independent
    /// ([`Footprint::pages_independent`]), some page is written by two queues (threads
    /// running queues would meet on it), and either the pages are dense (at least a
    /// quarter of each written on average) or the replay was validated [`Plan::ahead`],
    /// where bucketing is off the run's path. The thresholds are measured: see
    /// BENCHMARKS.md.
    pub(crate) fn deals_by_page(&self) -> bool {
        let pages = self.pages.len() as u64;
        let dense = || self.footprint.bytes_written >= pages.saturating_mul(PAGE_BYTES / 4);
        self.pages
            .spans_buckets(super::schedule::PAGE_BUCKETS as u64)
            && self.footprint.pages_independent()
            && self.pages.shared()
            && (self.ahead || dense())
    }
}

/// Wraps a fabric error with the descriptor it belongs to.
pub(crate) fn replay_error(queue: usize, index: u64, what: &'static str, source: Error) -> Error {
    Error::ReplayDescriptor {
        queue,
        index,
        what,
        source: Box::new(source),
    }
}

/// The range rule: the source (every op but FILL) and the destination lie inside one
/// fabric region each. On failure, which of them and the fabric's error.
pub(crate) fn check_ranges(fabric: &Fabric, d: &Descriptor) -> Result<(), (&'static str, Error)> {
    RangeRule::default().check(fabric, d)
}

/// [`check_ranges`] for a run of descriptors: the last region of each side is cached, so
/// that descriptors inside the regions of the one before are checked with a few compares.
#[derive(Clone, Copy, Debug, Default)]
struct RangeRule {
    source: RegionCache,
    destination: RegionCache,
}

impl RangeRule {
    /// [`check_ranges`] (use one rule with one fabric's map only).
    #[inline]
    fn check(&mut self, fabric: &Fabric, d: &Descriptor) -> Result<(), (&'static str, Error)> {
        let map = fabric.map();
        if let Some((src, len)) = d.source_range() {
            let checked = self.source.check(map, src, len);
            checked.map_err(|e| ("source range", e))?;
        }
        let (dst, len) = d.dest_range();
        let checked = self.destination.check(map, dst, len);
        checked.map_err(|e| ("destination range", e))
    }

    /// Whether every range of `footprint` passes the rule: its hull of sources lies in
    /// one region (or it reads nothing), and so does its hull of destinations (or it
    /// writes nothing).
    fn holds(&mut self, fabric: &Fabric, footprint: &Footprint) -> bool {
        let map = fabric.map();
        let inside =
            |cache: &mut RegionCache, (lo, hi): (u64, u64)| lo > hi || cache.holds(map, lo, hi);
        inside(&mut self.source, footprint.reads) && inside(&mut self.destination, footprint.writes)
    }

    /// Whether every descriptor of `batch` passes the rule, each range inside one region
    /// on its own (a tile's descriptors, a partition each, have no one region around
    /// them); builds no error.
    fn holds_each(&mut self, fabric: &Fabric, batch: &[Descriptor]) -> bool {
        let map = fabric.map();
        let inside = |cache: &mut RegionCache, (at, len): (FabricAddr, u64)| {
            let last = len.checked_sub(1).and_then(|n| at.0.checked_add(n));
            last.is_some_and(|last| cache.holds(map, at.0, last))
        };
        batch.iter().all(|d| {
            let read = d.source_range().is_none_or(|r| inside(&mut self.source, r));
            read && inside(&mut self.destination, d.dest_range())
        })
    }
}

/// The footprint of `block` if validation may take it whole, without building its
/// descriptors: no race check; a strided destination whose rows are at least a row apart
/// (so no two rows write one byte); both sides' row addresses ascending without wrapping
/// (or listed); every row inside one region on each side (the hull, or failing that row
/// by row); and no byte read is written. `None`: validate its expansion instead, which
/// names a bad descriptor.
fn block_footprint(fabric: &Fabric, block: &Block, config: &EngineConfig) -> Option<Footprint> {
    let (d, rows) = (block.template(), block.rows());
    let (src, dst) = block.sides();
    let ((_, read), (_, written)) = (d.source_range()?, d.dest_range());
    let apart = matches!(dst, Rows::Strided { stride, .. } if rows == 1 || *stride >= written);
    if config.race_check == RaceCheck::On || !apart {
        return None;
    }
    let (reads, writes) = (row_hull(src, rows, read)?, row_hull(dst, rows, written)?);
    let meet = reads.0 <= writes.1 && writes.0 <= reads.1;
    let map = fabric.map();
    let inside = |side: &Rows, len: u64, hull: (u64, u64)| {
        let mut cache = RegionCache::default();
        cache.holds(map, hull.0, hull.1)
            || (0..rows).all(|i| cache.holds(map, side.addr(i), side.addr(i) + (len - 1)))
    };
    if meet || !inside(src, read, reads) || !inside(dst, written, writes) {
        return None;
    }
    Some(Footprint {
        reads,
        writes,
        // Engine::validate_block finds it as it adds the pages
        one_page_writes: true,
        bytes_written: rows as u64 * written,
    })
}

/// The lowest and the highest byte of `rows` rows of `len` bytes (`len >= 1`) of `side`:
/// `None` if a strided side's rows wrap or a row ends past the address space.
fn row_hull(side: &Rows, rows: usize, len: u64) -> Option<(u64, u64)> {
    if let Rows::Strided { start, stride } = side {
        (rows as u64 - 1)
            .checked_mul(*stride)?
            .checked_add(*start)?;
    }
    let (lo, hi) = side.span(rows);
    Some((lo, hi.checked_add(len - 1)?))
}

impl Engine {
    /// The whole validation pass over `source` (which it leaves at the end): queues fed a
    /// batch at a time, round-robin, as the timeline lets them. The plan is filled into
    /// the buffers kept from the last replay (or new ones).
    pub(crate) fn plan<S: QueueSource>(
        &self,
        fabric: &Fabric,
        source: &mut S,
    ) -> Result<Plan, Error> {
        self.check_queue_count(source.queues())?;
        let mut v = Validator::new(self, fabric, source.queues())?;
        let mut done = vec![false; source.queues()];
        while v.timed_pass(source, &mut done)? {}
        for (queue, finished) in done.iter_mut().enumerate() {
            while !*finished {
                let batch = source.next(queue, VALIDATE_BATCH)?;
                *finished = batch.is_empty();
                v.push(queue, batch, false)?;
            }
        }
        v.finish()
    }

    /// [`Engine::validate`] of `block`'s queues ([`Block::queues`]), without building them
    /// where its rows can be checked whole (see [`crate::block`]): the same checks, plan
    /// and report, and the same error for a bad descriptor (found in the expansion).
    pub fn validate_block(&self, fabric: &Fabric, block: Block) -> Result<Validated, Error> {
        self.check_queue_count(block.queue_count())?;
        let Some(mut footprint) = block_footprint(fabric, &block, &self.config) else {
            return self.validate(fabric, block.queues());
        };
        // The plan of the expansion, whose footprint proved its ranges, its descriptors
        // never built: the same pages, listed in row order; queues timed in one step each.
        let counts = block.per_queue(block.queue_count());
        let mut v = Validator::new(self, fabric, counts.len())?;
        if let (_, &Rows::Strided { start, stride }) = block.sides() {
            let (len, rows, dealt) = (stride, block.rows() as u64, block.deal().len() > 1);
            let written = block.template().dest_range().1;
            footprint.one_page_writes = match stride == written {
                true => v.pages.add_contiguous(start, rows, len, dealt),
                false => {
                    let starts = (0..rows).map(|i| start + i * stride);
                    v.pages.add_ascending(starts, written, dealt)
                }
            };
        }
        for (queue, &count) in counts.iter().enumerate() {
            v.timeline.push_equal(queue, &block.template(), count);
            v.timeline.close(queue)?;
        }
        v.footprint = footprint;
        Ok(Validated {
            queues: Vec::new(),
            block: Some(block),
            plan: v.finish()?,
            buckets: std::sync::Mutex::new(None),
            config: self.config,
        })
    }
}

struct Validator<'f> {
    fabric: &'f Fabric,
    next: Vec<u64>,
    ledger: SemaphoreLedger,
    timeline: QueueTimeline,
    race: Option<RaceRecorder>,
    pages: PageSet,
    footprint: Footprint,
    ranges: RangeRule,
}

impl<'f> Validator<'f> {
    /// A validator of `queues` queues for `engine`, filling the buffers it kept from its
    /// last replay (or new ones).
    fn new(engine: &Engine, fabric: &'f Fabric, queues: usize) -> Result<Validator<'f>, Error> {
        let kept = lock(&engine.kept).take().unwrap_or_default();
        let model = TimingModel::new(fabric.generation());
        let timeline = match kept.timeline {
            Some(mut timeline) => timeline.reset(model, queues).map(|()| timeline),
            None => QueueTimeline::new(model, queues, false),
        };
        Ok(Validator {
            fabric,
            next: vec![0; queues],
            ledger: SemaphoreLedger::new(),
            timeline: timeline?,
            race: (engine.config.race_check == RaceCheck::On).then(|| RaceRecorder::new(queues)),
            pages: kept.pages,
            footprint: Footprint::default(),
            ranges: RangeRule::default(),
        })
    }

    /// One batch from every queue not finished and not held; whether any came.
    fn timed_pass<S: QueueSource>(
        &mut self,
        source: &mut S,
        done: &mut [bool],
    ) -> Result<bool, Error> {
        let mut progressed = false;
        for (queue, finished) in done.iter_mut().enumerate() {
            if *finished || self.timeline.is_blocked(queue) {
                continue;
            }
            let batch = source.next(queue, VALIDATE_BATCH)?;
            *finished = batch.is_empty();
            progressed |= !batch.is_empty();
            if *finished {
                self.timeline.close(queue)?;
            }
            self.push(queue, batch, true)?;
        }
        Ok(progressed)
    }

    /// Checks the next descriptors of `queue`; `timed` feeds them to the timeline too,
    /// after the batch's checks: the timeline fails only on a semaphore the ledger
    /// refuses, and the ledger here has refused that descriptor first.
    fn push(&mut self, queue: usize, batch: &[Descriptor], timed: bool) -> Result<(), Error> {
        let queues = self.next.len();
        let Some(&first) = self.next.get(queue) else {
            return Err(Error::NoSuchQueue { queue, queues });
        };
        if !self.check_whole(queue, batch) {
            for (index, d) in (first..).zip(batch) {
                self.check(queue, index, d)?;
                if d.synchronises() {
                    self.ledger.record(queue, index, d)?;
                }
                if let Some(race) = &mut self.race {
                    race.record(queue, index, d);
                }
            }
        }
        if timed {
            self.timeline.push_all(queue, batch)?;
        }
        if let Some(next) = self.next.get_mut(queue) {
            *next += batch.len() as u64;
        }
        Ok(())
    }

    /// Checks `batch` (of `queue`) as a whole where that gives what checking each
    /// descriptor does: without a race check, without a WAIT or a SIGNAL in it, and with
    /// the hull of its sources inside one region and that of its destinations inside one
    /// (or, failing that, each range inside one), every descriptor passes the range rule.
    /// A batch writing inside one page adds that page once. Whether it did (else nothing
    /// changed).
    fn check_whole(&mut self, queue: usize, batch: &[Descriptor]) -> bool {
        if self.race.is_some() {
            return false;
        }
        let mut footprint = Footprint::default();
        for d in batch {
            if d.synchronises() {
                return false;
            }
            footprint.add(d);
        }
        let ranges = &mut self.ranges;
        if !(ranges.holds(self.fabric, &footprint) || ranges.holds_each(self.fabric, batch)) {
            return false;
        }
        let (lo, hi) = footprint.writes;
        match batch.first() {
            // every destination in the first one's page: that page alone, from it
            Some(first) if lo / PAGE_BYTES == hi / PAGE_BYTES => {
                self.pages.add(first.dest_range(), queue)
            }
            _ => batch
                .iter()
                .for_each(|d| self.pages.add(d.dest_range(), queue)),
        }
        self.footprint = self.footprint.join(footprint);
        true
    }

    /// The range rule; adds the descriptor's pages and footprint.
    fn check(&mut self, queue: usize, index: u64, d: &Descriptor) -> Result<(), Error> {
        let checked = self.ranges.check(self.fabric, d);
        checked.map_err(|(what, e)| replay_error(queue, index, what, e))?;
        self.pages.add(d.dest_range(), queue);
        self.footprint.add(d);
        Ok(())
    }

    /// The checks that need every descriptor: reachable waits, no stall, no race.
    fn finish(mut self) -> Result<Plan, Error> {
        self.ledger.check_complete()?;
        let timeline = self.timeline.take_report()?;
        if let Some(race) = self.race {
            race.check()?;
        }
        Ok(Plan {
            summary: ReplaySummary::new(self.fabric.generation(), timeline, 0),
            pages: self.pages,
            semaphores: !self.ledger.is_empty(),
            footprint: self.footprint,
            ahead: false,
            timeline_kept: self.timeline,
        })
    }
}

/// The fabric pages the replay writes: each page with one address inside both the page and
/// a checked destination range (so reserving one byte there materialises the page), and
/// the first queue that writes it; and whether some page is written by two queues.
///
/// A page is found through its slot of a direct-mapped table (`page % SEEN`), which the
/// first page to reach it keeps until [`PageSet::clear`]; a page whose slot another page
/// holds goes to a hash map, so a scatter over a table of consecutive pages never hashes.
#[derive(Debug)]
pub(crate) struct PageSet {
    /// Every page with its address, in order of first addition.
    list: Vec<(u64, u64)>,
    /// The page holding each slot with its first queue (`page | first_queue << 56`),
    /// all ones for a free slot.
    slots: Box<[u64; SEEN]>,
    /// The first queue of each page whose slot another page holds.
    overflow: HashMap<u64, usize>,
    /// The page numbers of the last range added and its queue (consecutive descriptors of
    /// a queue share pages).
    last: Option<(u64, u64, usize)>,
    shared: bool,
}

/// Slots of [`PageSet::slots`].
const SEEN: usize = 1024;
/// Where [`PageSet::slots`] keeps the queue (page numbers are below 2^48), and the bits of
/// the page below it (a free slot, all ones, matches no page).
const SEEN_QUEUE_SHIFT: u32 = 56;
const SEEN_PAGE: u64 = (1 << SEEN_QUEUE_SHIFT) - 1;
const FREE: u64 = u64::MAX;

impl Default for PageSet {
    fn default() -> PageSet {
        PageSet {
            list: Vec::new(),
            slots: Box::new([FREE; SEEN]),
            overflow: HashMap::new(),
            last: None,
            shared: false,
        }
    }
}

impl PageSet {
    /// Pages in the set.
    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Whether some page is written by two queues.
    pub(crate) fn shared(&self) -> bool {
        self.shared
    }

    /// Adds `page` (with `addr`, inside it) for `queue` if it is new; its first queue.
    #[inline(always)]
    fn first_queue(&mut self, page: u64, addr: u64, queue: usize) -> usize {
        let slot = self.slots[page as usize % SEEN];
        match slot & SEEN_PAGE == page {
            true => (slot >> SEEN_QUEUE_SHIFT) as usize,
            false => self.first_queue_unslotted(page, addr, queue),
        }
    }

    /// [`PageSet::first_queue`] of a page that does not hold its slot: it takes the slot
    /// if it is free, else it is in (or goes to) the overflow map.
    #[inline(never)]
    fn first_queue_unslotted(&mut self, page: u64, addr: u64, queue: usize) -> usize {
        let slot = &mut self.slots[page as usize % SEEN];
        if *slot == FREE {
            *slot = page | (queue as u64) << SEEN_QUEUE_SHIFT;
            self.list.push((page, addr));
            return queue;
        }
        let list = &mut self.list;
        *self.overflow.entry(page).or_insert_with(|| {
            list.push((page, addr));
            queue
        })
    }

    /// Adds the pages of a range of `queue` that passed [`Fabric::check`].
    pub(crate) fn add(&mut self, (dst, len): (FabricAddr, u64), queue: usize) {
        // check_ranges proved `len >= 1` and that `dst + len - 1` does not overflow.
        let (lo, hi) = (dst.0 / PAGE_BYTES, (dst.0 + (len - 1)) / PAGE_BYTES);
        let cached = |(a, b, q): (u64, u64, usize)| a <= lo && hi <= b && q == queue;
        if self.last.is_some_and(cached) {
            return;
        }
        self.last = Some((lo, hi, queue));
        for page in lo..=hi {
            let first = self.first_queue(page, dst.0.max(page * PAGE_BYTES), queue);
            self.shared |= first != queue;
        }
    }

    /// Adds the pages of ranges of `len` bytes at `starts`, ascending and apart (a block's
    /// strided destinations, into an empty set), each written by another queue than the
    /// one before it if `dealt`; whether each range lies inside one page.
    fn add_ascending(&mut self, starts: impl Iterator<Item = u64>, len: u64, dealt: bool) -> bool {
        let (mut one_page, mut met, mut next) = (true, false, 0);
        for at in starts {
            let (lo, hi) = (at / PAGE_BYTES, (at + (len - 1)) / PAGE_BYTES);
            one_page &= lo == hi;
            // a page the range before reached
            met |= lo < next;
            if hi >= next {
                for page in lo.max(next)..hi + 1 {
                    self.list.push((page, at.max(page * PAGE_BYTES)));
                }
                next = hi + 1;
            }
        }
        self.shared |= dealt && met;
        one_page
    }

    /// [`PageSet::add_ascending`] of `rows` ranges of `len` bytes back to back from
    /// `start`, in closed form: every page of their hull, each with its first byte inside
    /// them; two rows meet on a page unless each row is whole pages; a row crosses a page
    /// edge unless every edge inside the hull falls between two rows.
    fn add_contiguous(&mut self, start: u64, rows: u64, len: u64, dealt: bool) -> bool {
        let end = start + rows * len;
        let (lo, hi) = (start / PAGE_BYTES, (end - 1) / PAGE_BYTES);
        for page in lo..hi + 1 {
            self.list.push((page, start.max(page * PAGE_BYTES)));
        }
        let whole_pages = start.is_multiple_of(PAGE_BYTES) && len.is_multiple_of(PAGE_BYTES);
        self.shared |= dealt && rows > 1 && !whole_pages;
        (lo + 1..hi + 1).all(|page| (page * PAGE_BYTES - start).is_multiple_of(len))
    }

    /// Empties the set, keeping its storage (for the next replay).
    pub(crate) fn clear(&mut self) {
        for &(page, _) in &self.list {
            self.slots[page as usize % SEEN] = FREE;
        }
        self.list.clear();
        self.overflow.clear();
        self.last = None;
        self.shared = false;
    }

    /// Whether two of the pages differ modulo `buckets` (fall in two buckets of a run dealt
    /// by page).
    fn spans_buckets(&self, buckets: u64) -> bool {
        let mut pages = self.list.iter().map(|&(page, _)| page % buckets.max(1));
        let first = pages.next();
        pages.any(|bucket| Some(bucket) != first)
    }

    /// Opens every page for a replay that reads pages `reads` ([`Fabric::reopen`]);
    /// contents unchanged.
    pub(crate) fn reopen(
        &self,
        fabric: &mut Fabric,
        reads: Option<(u64, u64)>,
    ) -> Result<(), Error> {
        let addrs = self.list.iter().map(|&(_, addr)| FabricAddr(addr));
        fabric.reopen(addrs, reads, self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::{SBUF_BASE, SBUF_STRIDE};
    use crate::descriptor::{DescOp, SemId};
    use crate::dtype::Dtype;
    use crate::engine::source::Slices;
    use crate::generation::Generation;
    use crate::test_util::copy;
    use proptest::prelude::*;

    const P: u64 = PAGE_BYTES;

    impl PageSet {
        /// Every page with its address and first queue, in order of first addition.
        fn entries(&self) -> impl Iterator<Item = (u64, u64, usize)> + '_ {
            self.list.iter().map(|&(page, addr)| {
                let slot = self.slots[page as usize % SEEN];
                let queue = match slot & SEEN_PAGE == page {
                    true => (slot >> SEEN_QUEUE_SHIFT) as usize,
                    false => self.overflow.get(&page).copied().unwrap_or(0),
                };
                (page, addr, queue)
            })
        }
    }

    /// The footprint of `descs`.
    fn footprint(descs: &[Descriptor]) -> Footprint {
        let mut f = Footprint::default();
        descs.iter().for_each(|d| f.add(d));
        f
    }

    /// An address near one of the map's region edges: `at` picks the HBM start or end,
    /// an SBUF partition's start or end, or a hole past the last SBUF partition; `off`
    /// (below 32) goes up from a start, or up from 40 bytes before an end.
    fn near_edge(at: u8, off: u64) -> u64 {
        let hbm = Generation::Cayman.hbm_bytes();
        let partition = Generation::Cayman.sbuf_partition_bytes();
        match at % 5 {
            0 => off,
            1 => hbm - 40 + off,
            2 => SBUF_BASE + SBUF_STRIDE + off,
            3 => SBUF_BASE + 2 * SBUF_STRIDE + partition - 40 + off,
            _ => SBUF_BASE + 128 * SBUF_STRIDE + off,
        }
    }

    /// A copy, an add or a fill near the edges of the batch's `regions` (source and
    /// destination; `stray` 0 takes the region `src % 5` on both sides instead),
    /// signalling when `sync` is 0.
    fn edge_descriptor(
        regions: (u8, u8),
        (op, src, dst, len, sync, stray): (u8, u64, u64, u32, u8, u8),
    ) -> Descriptor {
        let (sr, dr) = match stray {
            0 => (src as u8, src as u8),
            _ => regions,
        };
        let (src, dst) = (near_edge(sr, src), near_edge(dr, dst));
        let d = match op % 3 {
            0 => Descriptor::fill(FabricAddr(dst), len, Dtype::U8, 7).unwrap(),
            1 => Descriptor::new(
                DescOp::Add,
                FabricAddr(src),
                FabricAddr(dst),
                len,
                Dtype::U8,
            )
            .unwrap(),
            _ => copy(src, dst, len),
        };
        match sync {
            0 => d.with_signal(SemId::new(1).unwrap()),
            _ => d,
        }
    }

    /// What a validator has collected: its pages (with addresses and first queues),
    /// whether a page is shared, and its footprint.
    type Collected = (Vec<(u64, u64, usize)>, bool, Footprint);

    fn collected(v: &Validator) -> Collected {
        let pages = v.pages.entries().collect();
        (pages, v.pages.shared(), v.footprint)
    }

    proptest! {
        /// A batch checked whole leaves the validator as checking each of its descriptors
        /// leaves it, and one it declines leaves it as it was.
        #[test]
        fn a_batch_checked_whole_is_its_descriptors_checked_one_by_one(
            batches in proptest::collection::vec(
                (0..3usize, (0..5u8, 0..5u8), proptest::collection::vec(
                    (0..3u8, 0..32u64, 0..32u64, 1..=16u32, 0..64u8, 0..64u8),
                    1..24,
                )),
                1..6,
            ),
        ) {
            let fabric = Fabric::new(Generation::Cayman);
            let engine = Engine::new(EngineConfig::default()).unwrap();
            let new = || Validator::new(&engine, &fabric, 3).unwrap();
            let (mut whole, mut each) = (new(), new());
            for (queue, regions, batch) in batches {
                let batch: Vec<Descriptor> =
                    batch.into_iter().map(|d| edge_descriptor(regions, d)).collect();
                let before = collected(&whole);
                if whole.check_whole(queue, &batch) {
                    for (i, d) in batch.iter().enumerate() {
                        prop_assert_eq!(each.check(queue, i as u64, d), Ok(()));
                    }
                    prop_assert_eq!(collected(&whole), collected(&each));
                } else {
                    prop_assert_eq!(collected(&whole), before);
                    // both go on one by one, alike, until a descriptor is rejected
                    for (i, d) in batch.iter().enumerate() {
                        let one = each.check(queue, i as u64, d);
                        prop_assert_eq!(whole.check(queue, i as u64, d), one.clone());
                        if one.is_err() {
                            return Ok(());
                        }
                    }
                    prop_assert_eq!(collected(&whole), collected(&each));
                }
            }
        }
    }

    #[test]
    fn a_batch_is_checked_whole_when_each_side_stays_in_one_region_and_nothing_waits() {
        let fabric = Fabric::new(Generation::Cayman);
        let engine = Engine::new(EngineConfig::default()).unwrap();
        let mut v = Validator::new(&engine, &fabric, 2).unwrap();
        let in_hbm = [copy(0, 5 * P, 64), copy(3 * P, 9 * P + 8, 4)];
        assert!(v.check_whole(0, &in_hbm));
        assert_eq!(v.pages.len(), 2);
        // up to HBM's last byte, and one byte past it
        let hbm = Generation::Cayman.hbm_bytes();
        assert!(v.check_whole(0, &[copy(hbm - 64, 0, 64), copy(0, hbm - 8, 8)]));
        assert!(!v.check_whole(0, &[copy(hbm - 63, 0, 64)]));
        assert!(!v.check_whole(0, &[copy(0, hbm - 7, 8)]));
        assert_eq!(v.pages.len(), 4);
        let part = |p: u64| SBUF_BASE + p * SBUF_STRIDE;
        // destinations in two partitions (no one region around them), each inside its
        // own: whole, a page each
        let two_partitions = [copy(0, part(1), 64), copy(0, part(2), 64)];
        assert!(v.check_whole(1, &two_partitions));
        assert_eq!(v.pages.len(), 6);
        // one of them past its partition's end: one by one (the check names it)
        let partition = Generation::Cayman.sbuf_partition_bytes();
        let past = [copy(0, part(3), 64), copy(0, part(4) + partition - 8, 16)];
        assert!(!v.check_whole(1, &past));
        let signals = [copy(0, 5 * P, 64).with_signal(SemId::new(0).unwrap())];
        assert!(!v.check_whole(1, &signals));
        assert_eq!(v.pages.len(), 6);
        let at_the_end = [copy(hbm - 64, 0, 64), copy(0, hbm - 8, 8)];
        let whole = [&in_hbm[..], &at_the_end, &two_partitions].concat();
        assert_eq!(v.footprint, footprint(&whole));
    }

    #[test]
    fn pages_are_independent_when_reads_miss_writes_and_writes_stay_in_a_page() {
        let fill = Descriptor::fill(FabricAddr(5 * P), 8, Dtype::U8, 1).unwrap();
        assert!(Footprint::default().pages_independent());
        assert!(footprint(&[fill]).pages_independent());
        // reads below the writes, and above them
        assert!(footprint(&[copy(0, 2 * P, 64), copy(P - 64, 3 * P, 64)]).pages_independent());
        assert!(footprint(&[copy(9 * P, 2 * P, 64), fill]).pages_independent());
        // a read meeting a write (by one byte), even of another descriptor
        assert!(!footprint(&[copy(0, 2 * P, 64), copy(2 * P + 63, 3 * P, 1)]).pages_independent());
        assert!(!footprint(&[copy(2 * P, 2 * P + 32, 64)]).pages_independent());
        assert!(footprint(&[copy(2 * P, 2 * P + 64, 64)]).pages_independent());
        // a write across a page edge
        assert!(!footprint(&[copy(0, 2 * P - 8, 16)]).pages_independent());
        // joining keeps both hulls and the page rule
        let (a, b) = (
            footprint(&[copy(0, 2 * P, 64)]),
            footprint(&[copy(2 * P, 4 * P, 64)]),
        );
        assert!(a.pages_independent() && b.pages_independent());
        assert!(!a.join(b).pages_independent());
        assert_eq!(a.join(Footprint::default()), a);
    }

    /// A plan as comparable values: summary, the sorted written pages.
    fn summary(plan: &Plan) -> (ReplaySummary, Vec<u64>) {
        let mut pages: Vec<u64> = plan.pages.entries().map(|(page, ..)| page).collect();
        pages.sort_unstable();
        (plan.summary.clone(), pages)
    }

    /// One descriptor of the split test: a copy inside HBM (or, `bad`, from the gap below
    /// SBUF), and, `sem`, a SIGNAL of semaphore 0.
    fn arb_descriptor() -> impl Strategy<Value = Descriptor> {
        (
            0..64u64,
            0..64u64,
            1..300u32,
            proptest::bool::weighted(0.01),
            proptest::bool::weighted(0.005),
        )
            .prop_map(|(s, d, len, bad, sem)| {
                let src = if bad { SBUF_BASE - 0x1000 } else { s * 4096 };
                let c = copy(src, (1 << 30) + d * 40_000, len);
                match sem {
                    true => c.with_signal(crate::descriptor::SemId::new(0).unwrap()),
                    false => c,
                }
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Buffers kept from another replay (fewer queues) change no plan.
        #[test]
        fn kept_buffers_change_no_plan(
            queues in proptest::collection::vec(
                proptest::collection::vec(arb_descriptor(), 0..40), 2..=16),
        ) {
            let f = Fabric::new(Generation::Cayman);
            let config = EngineConfig { workers: 2, ..EngineConfig::default() };
            let in_order = Engine::new(config).unwrap().plan(&f, &mut Slices::new(&queues));
            // buffers kept from another replay (fewer queues, its bad descriptors left
            // out) change nothing
            let valid = |q: &Vec<Descriptor>| -> Vec<Descriptor> {
                q.iter().filter(|d| check_ranges(&f, d).is_ok()).copied().collect()
            };
            let other: Vec<_> = queues[1..].iter().rev().map(valid).collect();
            let e = Engine::new(config).unwrap();
            if let Ok(plan) = e.plan(&f, &mut Slices::new(&other)) {
                e.keep(plan);
            }
            let again = e.plan(&f, &mut Slices::new(&queues));
            let want = format!("{:?}", in_order.as_ref().map(summary));
            prop_assert_eq!(format!("{:?}", again.map(|p| summary(&p))), want);
        }
    }

    #[test]
    fn page_set_collects_each_written_page_once() {
        let mut pages = PageSet::default();
        pages.add((FabricAddr(P - 4), 8), 0); // pages 0 and 1
        pages.add((FabricAddr(P + 16), 8), 0); // inside the last range: cached
        pages.add((FabricAddr(5 * P + 1), 2 * P), 0); // pages 5, 6, 7
        pages.add((FabricAddr(0), 1), 0);
        assert!(!pages.shared());
        assert_eq!(pages.len(), 5);
        // the address kept for a page lies in the page and in a range that was added
        let entries: Vec<(u64, u64, usize)> = pages.entries().collect();
        let want = [
            (0, P - 4, 0),
            (1, P, 0),
            (5, 5 * P + 1, 0),
            (6, 6 * P, 0),
            (7, 7 * P, 0),
        ];
        assert_eq!(entries, want);
        let mut f = Fabric::new(Generation::Cayman);
        pages.reopen(&mut f, None).unwrap();
        assert_eq!(f.allocated_bytes(), 5 * P);
        // emptied and used again: pages seen before are not taken for present
        pages.clear();
        assert_eq!(pages.len(), 0);
        pages.add((FabricAddr(5 * P + 8), 8), 1);
        pages.add((FabricAddr(0), 8), 1);
        pages.add((FabricAddr(5 * P), 8), 1);
        pages.add((FabricAddr(SEEN as u64 * P), 8), 1); // the slot of page 0
        pages.add((FabricAddr(0), 8), 1);
        let keys: Vec<(u64, usize)> = pages.entries().map(|(page, _, q)| (page, q)).collect();
        assert_eq!(keys, [(5, 1), (0, 1), (SEEN as u64, 1)]);
        assert!(!pages.shared());
        // another queue on a page seen (the filter), then on the last range (not cached)
        pages.add((FabricAddr(5 * P + 64), 8), 2);
        assert!(pages.shared());
        pages.clear();
        pages.add((FabricAddr(0), 8), 3);
        pages.add((FabricAddr(16), 8), 4);
        assert!(pages.shared());
    }

    proptest! {
        /// The page set, its filter and its last-range cache included, against a plain
        /// map of each page's first queue, over adds (pages that share filter slots, runs
        /// across pages) and clears.
        #[test]
        fn page_set_equals_a_plain_map(
            ops in prop::collection::vec(
                (0u64..6, 0u64..P, 1u64..2 * P, 0usize..3, prop::bool::weighted(0.05)),
                1..200,
            ),
        ) {
            let mut pages = PageSet::default();
            let mut model = std::collections::BTreeMap::new();
            let mut shared = false;
            for (slot, off, len, queue, clear) in ops {
                if clear {
                    pages.clear();
                    model.clear();
                    shared = false;
                    continue;
                }
                let dst = slot * SEEN as u64 * P / 2 + off;
                pages.add((FabricAddr(dst), len), queue);
                for page in dst / P..=(dst + len - 1) / P {
                    let first = *model.entry(page).or_insert(queue);
                    shared |= first != queue;
                }
                prop_assert_eq!(pages.shared(), shared);
                let mut got: Vec<(u64, usize)> =
                    pages.entries().map(|(k, _, q)| (k, q)).collect();
                got.sort_unstable();
                let want: Vec<(u64, usize)> = model.iter().map(|(&k, &q)| (k, q)).collect();
                prop_assert_eq!(got, want);
            }
        }
    }

    #[test]
    fn ranges_name_the_failing_side() {
        let f = Fabric::new(Generation::Cayman);
        let gap = SBUF_BASE - 0x1000; // past HBM, below SBUF
        assert_eq!(check_ranges(&f, &copy(0, 64, 8)), Ok(()));
        let (what, _) = check_ranges(&f, &copy(gap, 64, 8)).unwrap_err();
        assert_eq!(what, "source range");
        let crossing = SBUF_BASE + SBUF_STRIDE - 4; // runs past partition 0
        let (what, _) = check_ranges(&f, &copy(0, crossing, 8)).unwrap_err();
        assert_eq!(what, "destination range");
        // FILL reads no source: its `src` field is the element
        let fill = Descriptor::fill(FabricAddr(64), 8, Dtype::U8, 0xff).unwrap();
        assert_eq!(check_ranges(&f, &fill), Ok(()));
    }

    #[test]
    fn a_range_rule_answers_as_check_ranges_along_a_run() {
        let f = Fabric::new(Generation::Cayman);
        let (gap, p0) = (SBUF_BASE - 0x1000, SBUF_BASE);
        let run = [
            copy(0, 64, 8),
            copy(8, 72, 8),
            copy(gap, 64, 8),
            copy(0, p0, 8),
            copy(0, p0 + SBUF_STRIDE - 4, 8),
            copy(64, p0 + 8, 8),
            copy(p0, 0, 8),
        ];
        let mut rule = RangeRule::default();
        for d in &run {
            assert_eq!(rule.check(&f, d), check_ranges(&f, d), "{d:?}");
        }
    }

    #[test]
    fn a_bad_range_is_named_by_queue_and_index() {
        let f = Fabric::new(Generation::Cayman);
        let gap = SBUF_BASE - 0x1000;
        let queues = vec![
            vec![copy(0, 64, 8), copy(gap, 64, 16)],
            vec![copy(0, gap, 4)],
        ];
        let e = Engine::new(EngineConfig::default()).unwrap();
        let e = e.plan(&f, &mut Slices::new(&queues));
        let Err(Error::ReplayDescriptor {
            queue, index, what, ..
        }) = e
        else {
            panic!("{e:?}")
        };
        assert_eq!((queue, index, what), (0, 1, "source range"));
    }

    proptest! {
        /// Rows back to back, in closed form, add what adding them one by one adds: the
        /// pages with their addresses, whether two queues meet on a page, and whether each
        /// row stays in one page.
        #[test]
        fn contiguous_rows_add_as_rows_one_by_one(
            start in 0u64..4 * P,
            rows in 1u64..300,
            len in prop::sample::select(vec![1u64, 4, 24, 256, 4096, P / 2, P, 2 * P, 3 * P / 2]),
            dealt in any::<bool>(),
        ) {
            let (mut closed, mut each) = (PageSet::default(), PageSet::default());
            let one = closed.add_contiguous(start, rows, len, dealt);
            let want = each.add_ascending((0..rows).map(|i| start + i * len), len, dealt);
            prop_assert_eq!(one, want);
            prop_assert_eq!(closed.entries().collect::<Vec<_>>(), each.entries().collect::<Vec<_>>());
            prop_assert_eq!(closed.shared(), each.shared());
        }
    }
}
