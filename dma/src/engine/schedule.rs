//! A validated replay compiled into a schedule: units of work and the order between them.
//!
//! Two shapes:
//!
//! - [`Schedule::segments`]: each queue cut into segments at its semaphore points (a
//!   segment starts at a WAIT and ends at a SIGNAL). A segment runs after the segment
//!   before it in its queue and, if it starts with WAIT(s, n), after the segment ending
//!   with the n-th SIGNAL of `s`. Without semaphores each queue is one unit.
//! - [`Schedule::page_buckets`]: for a replay whose pages are independent, the
//!   descriptors dealt by destination page into [`PAGE_BUCKETS`] buckets, with no order
//!   between them.
//!
//! A streamed replay is scheduled a window at a time ([`Schedule::window`]), its
//! [`Progress`] saying what ran before.
//!
//! Every unit keeps the (queue, index) of each of its descriptors, so an error names the
//! descriptor without searching the replay again.

use std::ops::Range;
use std::sync::Mutex;

use crate::block::Block;
use crate::descriptor::{Descriptor, SEMAPHORES};
use crate::error::Error;
use crate::fabric::PAGE_BYTES;

use super::lock;

/// Buckets of destination pages a replay is dealt into: page `k` goes to bucket
/// `k % PAGE_BUCKETS`.
pub(crate) const PAGE_BUCKETS: usize = 16;

/// Bytes a unit of block rows writes, about ([`Schedule::rows`]).
const UNIT_BYTES: u64 = 64 << 10;

/// The most rows a unit of block rows has.
const UNIT_ROWS: usize = 1024;

/// Groups of pages inside a bucket: page `k` is in group `(k / PAGE_BUCKETS) % PAGE_GROUPS`,
/// so a bucket's pages of a table of up to 64 MiB are one group each.
const PAGE_GROUPS: u64 = 64;

/// The most descriptors a replay dealt into page buckets copies.
pub(crate) const DEALT_MAX: usize = 1 << 20;

/// Descriptors per destination page, on average, from which page buckets are grouped.
const GROUP_MIN: usize = 4;

/// Whether page buckets of `descriptors` over `pages` pages are grouped by page: where some
/// bucket has two pages or more and the pages have [`GROUP_MIN`] descriptors each on
/// average (grouping costs a pass over each bucket, which a page met once or twice in a
/// bucket does not win back).
pub(crate) fn grouped(descriptors: usize, pages: usize) -> bool {
    pages > PAGE_BUCKETS && descriptors >= pages.saturating_mul(GROUP_MIN)
}

/// One unit of work: descriptors run in order by one worker.
#[derive(Debug, Clone)]
pub(crate) enum Unit<'q> {
    /// Descriptors `first..` of `queue`, in order.
    Queue {
        descs: &'q [Descriptor],
        queue: usize,
        first: u64,
    },
    /// A page bucket.
    Bucket(Bucket),
    /// Rows of a block, in order.
    Rows(&'q Block, Range<usize>),
}

impl Unit<'_> {
    /// The descriptors, in the order they run (none for a block's rows).
    pub(crate) fn descriptors(&self) -> &[Descriptor] {
        match self {
            Unit::Queue { descs, .. } => descs,
            Unit::Bucket(b) => &b.descs,
            Unit::Rows(..) => &[],
        }
    }

    /// How many descriptors it runs (rows of a block).
    pub(crate) fn len(&self) -> usize {
        match self {
            Unit::Rows(_, rows) => rows.len(),
            _ => self.descriptors().len(),
        }
    }

    /// The queue and index in the replay of descriptor `i` of the unit.
    pub(crate) fn at(&self, i: usize) -> (usize, u64) {
        match self {
            Unit::Queue { queue, first, .. } => (*queue, first + i as u64),
            Unit::Bucket(b) => {
                b.at.get(i)
                    .map_or((usize::MAX, i as u64), |&(q, x)| (q as usize, u64::from(x)))
            }
            Unit::Rows(block, rows) => block.at(rows.start + i),
        }
    }
}

/// Units of work and the order between them.
#[derive(Debug, Clone)]
pub(crate) struct Schedule<'q> {
    pub units: Vec<Unit<'q>>,
    /// Per unit, how many units must finish before it may start.
    pub before: Vec<u32>,
    /// Per unit, the units waiting for it.
    pub then: Vec<Vec<u32>>,
}

impl<'q> Schedule<'q> {
    /// `queues` cut at their semaphore points (see the module docs). A WAIT no SIGNAL can
    /// meet is [`Error::SemaphoreDeadlock`] (validation has rejected it already).
    pub(crate) fn segments(queues: &'q [Vec<Descriptor>]) -> Result<Schedule<'q>, Error> {
        Schedule::window(queues.iter().map(Vec::as_slice), &Progress::default())
    }

    /// The segments of a streamed replay's next window: `queues` are the descriptors of
    /// each queue that run next, after what `done` says ran before (a WAIT it met orders
    /// nothing; indices count from the queue's first descriptor).
    pub(crate) fn window(
        queues: impl IntoIterator<Item = &'q [Descriptor]>,
        done: &Progress,
    ) -> Result<Schedule<'q>, Error> {
        let queues = queues.into_iter();
        let mut s = Schedule::with_capacity(queues.size_hint().0);
        // per semaphore, the unit of each of its signals in order
        let mut signals: [Vec<u32>; SEMAPHORES as usize] = Default::default();
        // (unit, queue, index, wait)
        let mut waits = Vec::new();
        for (queue, descs) in queues.enumerate() {
            let base = done.next.get(queue).copied().unwrap_or(0);
            let mut start = 0;
            let mut previous: Option<u32> = None;
            let mut cut = |s: &mut Schedule<'q>, start: usize, end: usize| {
                let unit = s.push(Unit::Queue {
                    descs: descs.get(start..end).unwrap_or_default(),
                    queue,
                    first: base + start as u64,
                });
                if let Some(p) = previous.replace(unit) {
                    s.order(p, unit);
                }
                unit
            };
            for (i, d) in descs.iter().enumerate() {
                if !d.synchronises() {
                    continue;
                }
                if i > start && d.wait().is_some() {
                    cut(&mut s, start, i);
                    start = i;
                }
                if let Some(w) = d.wait().filter(|_| i == start) {
                    waits.push((s.units.len() as u32, queue, base + i as u64, w));
                }
                if let Some(sem) = d.signal() {
                    let unit = cut(&mut s, start, i + 1);
                    start = i + 1;
                    // SemId guarantees index < SEMAPHORES.
                    signals[sem.index()].push(unit);
                }
            }
            if start < descs.len() || descs.is_empty() {
                cut(&mut s, start, descs.len());
            }
        }
        for (unit, queue, index, w) in waits {
            let before = done.signalled[w.sem.index()];
            let Some(nth) = u64::from(w.count.get()).checked_sub(before + 1) else {
                continue; // met before this window
            };
            let list = &signals[w.sem.index()];
            let Some(&signaller) = usize::try_from(nth).ok().and_then(|n| list.get(n)) else {
                return Err(Error::deadlock(queue, index, w, before + list.len() as u64));
            };
            s.order(signaller, unit);
        }
        Ok(s)
    }

    /// `queues` dealt by destination page into [`PAGE_BUCKETS`] unordered units, each in
    /// round order (descriptor `r` of every queue, in queue order, then `r + 1`), or, if
    /// `grouped`, group of pages by group, each group in round order. Only for a replay
    /// whose pages are independent: then any order of the buckets gives the memory the
    /// queues give.
    pub(crate) fn page_buckets(
        queues: &[Vec<Descriptor>],
        grouped: bool,
        buffers: &BucketBuffers,
    ) -> Schedule<'static> {
        let (mut buckets, mut scratch) = buffers.take();
        let longest = queues.iter().map(Vec::len).max().unwrap_or(0);
        for r in 0..longest {
            for (q, list) in queues.iter().enumerate() {
                if let Some(d) = list.get(r) {
                    // page_slot's bucket is a page modulo PAGE_BUCKETS
                    let b = &mut buckets[page_slot(d).0];
                    b.descs.push(*d);
                    b.at.push((q as u32, r as u32));
                }
            }
        }
        let mut s = Schedule::with_capacity(PAGE_BUCKETS);
        for mut b in buckets {
            if grouped {
                b.group(&mut scratch);
            }
            s.push(Unit::Bucket(b));
        }
        buffers.keep_scratch(scratch);
        s
    }

    /// `block`'s rows cut into unordered units of [`UNIT_BYTES`] (at most [`UNIT_ROWS`]
    /// rows, at least one): its rows write disjoint bytes and read none written
    /// ([`super::validate::block_footprint`]), so any order gives the same memory.
    pub(crate) fn rows(block: &'q Block) -> Schedule<'q> {
        let len = block.template().dest_range().1.max(1);
        let per_unit = (UNIT_BYTES / len).clamp(1, UNIT_ROWS as u64) as usize;
        let mut s = Schedule::with_capacity(block.rows().div_ceil(per_unit));
        for start in (0..block.rows()).step_by(per_unit) {
            let rows = start..(start + per_unit).min(block.rows());
            s.push(Unit::Rows(block, rows));
        }
        s
    }

    /// No units yet, room for `units`.
    fn with_capacity(units: usize) -> Schedule<'q> {
        Schedule {
            units: Vec::with_capacity(units),
            before: Vec::with_capacity(units),
            then: Vec::with_capacity(units),
        }
    }

    fn push(&mut self, unit: Unit<'q>) -> u32 {
        self.units.push(unit);
        self.before.push(0);
        self.then.push(Vec::new());
        (self.units.len() - 1) as u32
    }

    /// `later` runs after `first` has finished.
    fn order(&mut self, first: u32, later: u32) {
        if let Some(then) = self.then.get_mut(first as usize) {
            then.push(later);
        }
        if let Some(n) = self.before.get_mut(later as usize) {
            *n += 1;
        }
    }

    /// Whether the units are page buckets.
    pub(crate) fn by_page(&self) -> bool {
        matches!(self.units.first(), Some(Unit::Bucket(_)))
    }

    /// The descriptors copied into page buckets.
    pub(crate) fn buffered(&self) -> usize {
        let buckets = self.units.iter().filter(|u| matches!(u, Unit::Bucket(_)));
        buckets.map(Unit::len).sum()
    }
}

/// Where a streamed replay stands between its windows: per queue the index of its next
/// descriptor, per semaphore the signals that ran.
#[derive(Debug, Clone, Default)]
pub(crate) struct Progress {
    next: Vec<u64>,
    signalled: [u64; SEMAPHORES as usize],
}

impl Progress {
    /// How many of each queue's `pending` descriptors can run in the next window: each
    /// queue up to its first WAIT that neither the signals that ran nor those in the window
    /// meet, cut again until every WAIT left is met. (In a replay validation proved to run
    /// to its end, the window is empty only when nothing is pending.)
    pub(crate) fn runnable(&self, pending: &[Vec<Descriptor>]) -> Vec<usize> {
        let mut cut: Vec<usize> = pending.iter().map(Vec::len).collect();
        loop {
            let mut signals = self.signalled;
            for (list, &n) in pending.iter().zip(&cut) {
                let sems = list.iter().take(n).filter_map(Descriptor::signal);
                sems.for_each(|sem| signals[sem.index()] += 1);
            }
            let mut changed = false;
            for (list, n) in pending.iter().zip(&mut cut) {
                if let Some(i) = list.iter().take(*n).position(|d| d.waits_beyond(&signals)) {
                    (*n, changed) = (i, true);
                }
            }
            if !changed {
                return cut;
            }
        }
    }

    /// Records that `ran` (per queue, the descriptors of a window) ran.
    pub(crate) fn advance<'a>(&mut self, ran: impl IntoIterator<Item = &'a [Descriptor]>) {
        for (queue, descs) in ran.into_iter().enumerate() {
            if self.next.len() <= queue {
                self.next.resize(queue + 1, 0);
            }
            self.next[queue] += descs.len() as u64;
            for sem in descs.iter().filter_map(Descriptor::signal) {
                self.signalled[sem.index()] += 1;
            }
        }
    }
}

/// The bucket of the page `d` writes, and the page's group in the bucket.
fn page_slot(d: &Descriptor) -> (usize, u64) {
    let page = d.dest_range().0 .0 / PAGE_BYTES;
    let group = (page / PAGE_BUCKETS as u64) % PAGE_GROUPS;
    ((page % PAGE_BUCKETS as u64) as usize, group)
}

/// A page bucket: its descriptors and the (queue, index) of each.
#[derive(Debug, Default, Clone)]
pub(crate) struct Bucket {
    descs: Vec<Descriptor>,
    at: Vec<(u32, u32)>,
}

impl Bucket {
    fn clear(&mut self) {
        self.descs.clear();
        self.at.clear();
    }

    /// Orders the bucket group by group, keeping the order inside each group (a stable
    /// counting sort through `scratch`); a bucket of one group stays as it is.
    fn group(&mut self, scratch: &mut Bucket) {
        let group = |d: &Descriptor| page_slot(d).1 as usize;
        let mut next = [0usize; PAGE_GROUPS as usize];
        // a group is a page modulo PAGE_GROUPS
        for d in &self.descs {
            next[group(d)] += 1;
        }
        if next.iter().filter(|&&n| n > 0).count() < 2 {
            return;
        }
        let mut start = 0;
        for n in next.iter_mut() {
            (*n, start) = (start, start + *n);
        }
        // (Vec::clone_from keeps the scratch's storage)
        scratch.descs.clone_from(&self.descs);
        scratch.at.clone_from(&self.at);
        for (d, at) in scratch.descs.iter().zip(&scratch.at) {
            let slot = &mut next[group(d)];
            if let (Some(od), Some(oa)) = (self.descs.get_mut(*slot), self.at.get_mut(*slot)) {
                (*od, *oa) = (*d, *at);
            }
            *slot += 1;
        }
    }
}

/// Page-bucket buffers kept between replays: fresh ones of a few MiB cost their page
/// faults on every replay.
#[derive(Debug, Default)]
pub(crate) struct BucketBuffers(Mutex<(Vec<Bucket>, Bucket)>);

impl BucketBuffers {
    /// [`PAGE_BUCKETS`] empty buckets and a scratch bucket (fresh where none are kept).
    fn take(&self) -> (Vec<Bucket>, Bucket) {
        let (held, scratch) = &mut *lock(&self.0);
        let mut buckets: Vec<Bucket> = held.drain(..held.len().min(PAGE_BUCKETS)).collect();
        buckets.iter_mut().for_each(Bucket::clear);
        buckets.resize_with(PAGE_BUCKETS, Bucket::default);
        (buckets, std::mem::take(scratch))
    }

    fn keep_scratch(&self, scratch: Bucket) {
        lock(&self.0).1 = scratch;
    }

    /// Keeps the buffers of `schedule`'s page buckets for the next replay.
    pub(crate) fn keep(&self, schedule: Schedule<'_>) {
        let buckets = schedule.units.into_iter().filter_map(|u| match u {
            Unit::Bucket(b) => Some(b),
            _ => None,
        });
        let (held, _) = &mut *lock(&self.0);
        held.extend(buckets);
        held.truncate(PAGE_BUCKETS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::{DescOp, SemId, SemWait};
    use crate::dtype::Dtype;
    use std::num::NonZeroU32;

    fn fill(dst: u64) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), 8, Dtype::U8, 1).unwrap()
    }

    fn wait(sem: u8, count: u32) -> SemWait {
        SemWait {
            sem: SemId::new(sem).unwrap(),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    #[test]
    fn queues_are_cut_at_their_semaphore_points_and_ordered_by_them() {
        let s0 = SemId::new(0).unwrap();
        let queues = vec![
            vec![
                fill(0),
                fill(8).with_signal(s0),
                fill(16),
                fill(24).with_signal(s0),
            ],
            vec![fill(64), fill(72).with_wait(wait(0, 2)), fill(80)],
        ];
        let s = Schedule::segments(&queues).unwrap();
        let shape: Vec<_> = s
            .units
            .iter()
            .map(|u| (u.at(0), u.descriptors().len()))
            .collect();
        assert_eq!(shape, [((0, 0), 2), ((0, 2), 2), ((1, 0), 1), ((1, 1), 2)]);
        assert_eq!(s.before, [0, 1, 0, 2]);
        assert_eq!(s.then[1], [3]);
        assert_eq!(s.units[3].at(1), (1, 2));
    }

    #[test]
    fn a_wait_no_signal_meets_is_a_deadlock() {
        let queues = vec![vec![fill(0).with_wait(wait(3, 1))]];
        let e = Schedule::segments(&queues).unwrap_err();
        assert!(matches!(
            e,
            Error::SemaphoreDeadlock {
                queue: 0,
                index: 0,
                sem: 3,
                ..
            }
        ));
    }

    #[test]
    fn page_buckets_keep_each_descriptors_queue_and_index() {
        let queues = vec![
            vec![fill(0), fill(PAGE_BYTES)],
            vec![fill(8), fill(PAGE_BYTES * 17)],
        ];
        let s = Schedule::page_buckets(&queues, true, &BucketBuffers::default());
        assert_eq!(s.units.len(), PAGE_BUCKETS);
        assert!(s.before.iter().all(|&n| n == 0));
        let b1 = &s.units[1];
        assert_eq!((b1.at(0), b1.at(1)), ((0, 1), (1, 1)));
        assert_eq!(s.units[0].at(1), (1, 0));
        assert_eq!(s.buffered(), 4);
    }

    use crate::engine::exec::tests::gather_queues;

    #[test]
    fn page_buckets_keep_every_descriptor_once_and_each_queue_in_order() {
        let queues = gather_queues();
        for grouped in [false, true] {
            let s = Schedule::page_buckets(&queues, grouped, &BucketBuffers::default());
            assert_eq!(s.units.len(), PAGE_BUCKETS);
            assert_eq!(s.buffered(), queues.iter().map(Vec::len).sum::<usize>());
            for (b, unit) in s.units.iter().enumerate() {
                let mut last = None;
                for (i, d) in unit.descriptors().iter().enumerate() {
                    assert_eq!(page_slot(d).0, b);
                    let (q, r) = unit.at(i);
                    assert_eq!(queues[q][r as usize], *d);
                    // a queue's descriptors on one page keep their order
                    let key = (q, page_slot(d).1);
                    if let Some((k, before)) = last.filter(|(k, _)| *k == key) {
                        assert!(before < r, "{k:?}");
                    }
                    last = Some((key, r));
                }
            }
            let none = Schedule::page_buckets(&[], grouped, &BucketBuffers::default());
            assert!(none.units.iter().all(|u| u.descriptors().is_empty()));
        }
    }

    #[test]
    fn kept_buckets_come_back_empty_and_deal_the_same() {
        let queues = gather_queues();
        let buffers = BucketBuffers::default();
        let first = Schedule::page_buckets(&queues, true, &buffers);
        let want: Vec<Vec<Descriptor>> = first
            .units
            .iter()
            .map(|u| u.descriptors().to_vec())
            .collect();
        buffers.keep(first);
        let (buckets, _) = buffers.take();
        assert_eq!(buckets.len(), PAGE_BUCKETS);
        assert!(buckets
            .iter()
            .all(|b| b.descs.is_empty() && b.at.is_empty()));
        assert!(buckets.iter().any(|b| b.descs.capacity() > 0));
        buffers.keep(Schedule::page_buckets(
            &queues,
            true,
            &BucketBuffers::default(),
        ));
        let again = Schedule::page_buckets(&queues, true, &buffers);
        let got: Vec<Vec<Descriptor>> = again
            .units
            .iter()
            .map(|u| u.descriptors().to_vec())
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn buckets_are_grouped_from_four_descriptors_a_page_over_more_pages_than_buckets() {
        assert!(grouped(4096, 390) && grouped(4 * 17, 17));
        assert!(!grouped(896, 300) && !grouped(4 * 17 - 1, 17));
        assert!(!grouped(4096, 16) && !grouped(1 << 20, 1));
    }

    proptest::proptest! {
        /// A scatter of 256-byte rows over a table of up to 1024 pages: ungrouped, each
        /// bucket is in round order; grouped, every page's descriptors are one run of its
        /// bucket, in round order; each descriptor is located at its queue and index.
        #[test]
        fn page_buckets_of_a_scatter_put_each_page_together_in_round_order(
            rows in proptest::collection::vec(0..1024 * 256u64, 1..600),
            queues in 1..=16usize,
        ) {
            let mut lists = vec![Vec::new(); queues];
            for (i, &row) in rows.iter().enumerate() {
                let d = Descriptor::new(DescOp::Add, FabricAddr(i as u64 * 256), FabricAddr((64 << 20) + row * 256), 256, Dtype::F32);
                lists[i % queues].push(d.unwrap());
            }
            let plain = Schedule::page_buckets(&lists, false, &BucketBuffers::default());
            for unit in plain.units {
                let at: Vec<(usize, u64)> = (0..unit.descriptors().len()).map(|i| unit.at(i)).collect();
                proptest::prop_assert!(at.iter().map(|&(q, r)| (r, q)).is_sorted());
                for (&(q, r), d) in at.iter().zip(unit.descriptors()) {
                    proptest::prop_assert_eq!(lists[q][r as usize], *d);
                }
            }
            let buckets = Schedule::page_buckets(&lists, true, &BucketBuffers::default());
            let page = |d: &Descriptor| d.dest_range().0 .0 / PAGE_BYTES;
            for (b, unit) in buckets.units.iter().enumerate() {
                let descs = unit.descriptors();
                let runs: Vec<u64> = descs.chunk_by(|x, y| page(x) == page(y)).map(|run| page(&run[0])).collect();
                let distinct: std::collections::BTreeSet<u64> = runs.iter().copied().collect();
                proptest::prop_assert_eq!(runs.len(), distinct.len(), "bucket {} pages {:?}", b, runs);
                let mut last = None;
                for (i, d) in descs.iter().enumerate() {
                    let (q, r) = unit.at(i);
                    proptest::prop_assert_eq!(lists[q][r as usize], *d);
                    // a page's descriptors in round order (the same page is one run)
                    let at = (page(d), r, q);
                    if let Some(before) = last.filter(|l: &(u64, u64, usize)| l.0 == at.0) {
                        proptest::prop_assert!(before < at);
                    }
                    last = Some(at);
                }
            }
            proptest::prop_assert_eq!(buckets.buffered(), rows.len());
        }
    }
}
