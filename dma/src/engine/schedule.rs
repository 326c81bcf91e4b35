//! A validated replay compiled into a schedule: units of work and the order between them.
//!
//! Two shapes:
//!
//! - [`Schedule::segments`]: each queue cut into segments at its semaphore points (a
//!   segment starts at a WAIT and ends at a SIGNAL). A segment runs after the segment
//!   before it in its queue and, if it starts with WAIT(s, n), after the segment ending
//!   with the n-th SIGNAL of `s`. Without semaphores each queue is one unit.
//! - [`Schedule::rows`]: a block's rows cut into unordered units.
//!
//! A streamed replay is scheduled a window at a time ([`Schedule::window`]), its
//! [`Progress`] saying what ran before.
//!
//! Every unit keeps the (queue, index) of each of its descriptors, so an error names the
//! descriptor without searching the replay again.

use std::ops::Range;

use crate::block::Block;
use crate::descriptor::{Descriptor, SEMAPHORES};
use crate::error::Error;

/// Bytes a unit of block rows writes, about ([`Schedule::rows`]).
const UNIT_BYTES: u64 = 64 << 10;

/// The most rows a unit of block rows has.
const UNIT_ROWS: usize = 1024;

/// One unit of work: descriptors run in order by one worker.
#[derive(Debug, Clone)]
pub(crate) struct Unit<'q> {
    /// Descriptors `first..` of `queue`, in order.
    descs: &'q [Descriptor],
    queue: usize,
    first: u64,
    /// A block's rows, run instead of `descs` (empty then).
    rows: Option<(&'q Block, Range<usize>)>,
}

impl<'q> Unit<'q> {
    /// The descriptors, in the order they run (none for a block's rows).
    pub(crate) fn descriptors(&self) -> &'q [Descriptor] {
        self.descs
    }

    /// The block rows it runs instead, in order.
    pub(crate) fn rows(&self) -> Option<(&'q Block, Range<usize>)> {
        self.rows.clone()
    }

    /// The queue and index in the replay of descriptor `i` of the unit.
    pub(crate) fn at(&self, i: usize) -> (usize, u64) {
        match &self.rows {
            Some((block, rows)) => block.at(rows.start + i),
            None => (self.queue, self.first + i as u64),
        }
    }
}

/// Units of work and the order between them.
#[derive(Debug, Clone)]
pub(crate) struct Schedule<'q> {
    units: Vec<Unit<'q>>,
    /// Per unit, how many units must finish before it may start.
    before: Vec<u32>,
    /// Per unit, the units waiting for it.
    then: Vec<Vec<u32>>,
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
        let units = queues.size_hint().0;
        let mut s = Schedule {
            units: Vec::with_capacity(units),
            before: Vec::with_capacity(units),
            then: Vec::with_capacity(units),
        };
        // per semaphore, the unit of each of its signals in order
        let mut signals: [Vec<u32>; SEMAPHORES as usize] = Default::default();
        // (unit, queue, index, wait)
        let mut waits = Vec::new();
        for (queue, descs) in queues.enumerate() {
            let base = done.next.get(queue).copied().unwrap_or(0);
            let mut start = 0;
            let mut previous: Option<u32> = None;
            let mut cut = |s: &mut Schedule<'q>, start: usize, end: usize| {
                let unit = s.push(Unit {
                    descs: descs.get(start..end).unwrap_or_default(),
                    queue,
                    first: base + start as u64,
                    rows: None,
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
                    if let Some(list) = signals.get_mut(sem.index()) {
                        list.push(unit);
                    }
                }
            }
            if start < descs.len() || descs.is_empty() {
                cut(&mut s, start, descs.len());
            }
        }
        for (unit, queue, index, w) in waits {
            let before = done.signalled.get(w.sem.index()).copied().unwrap_or(0);
            let Some(nth) = u64::from(w.count.get()).checked_sub(before + 1) else {
                continue; // met before this window
            };
            let list = signals.get(w.sem.index()).map_or(&[][..], Vec::as_slice);
            let Some(&signaller) = usize::try_from(nth).ok().and_then(|n| list.get(n)) else {
                return Err(Error::SemaphoreDeadlock {
                    queue,
                    index,
                    sem: w.sem.get(),
                    count: w.count.get(),
                    reached: before + list.len() as u64,
                });
            };
            s.order(signaller, unit);
        }
        Ok(s)
    }

    /// `block`'s rows cut into unordered units of [`UNIT_BYTES`] (at most [`UNIT_ROWS`]
    /// rows, at least one): its rows write disjoint bytes and read none written
    /// ([`super::validate::block_footprint`]), so any order gives the same memory.
    pub(crate) fn rows(block: &'q Block) -> Schedule<'q> {
        let len = block.template().dest_range().1.max(1);
        let per_unit = (UNIT_BYTES / len).clamp(1, UNIT_ROWS as u64) as usize;
        let mut s = Schedule {
            units: Vec::new(),
            before: Vec::new(),
            then: Vec::new(),
        };
        for start in (0..block.rows()).step_by(per_unit) {
            s.push(Unit {
                descs: &[],
                queue: 0,
                first: 0,
                rows: Some((block, start..(start + per_unit).min(block.rows()))),
            });
        }
        s
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

    /// The units.
    pub(crate) fn units(&self) -> &[Unit<'q>] {
        &self.units
    }

    /// How many units must finish before each may start.
    pub(crate) fn before(&self) -> &[u32] {
        &self.before
    }

    /// The units that wait for unit `u`.
    pub(crate) fn then(&self, u: usize) -> &[u32] {
        self.then.get(u).map_or(&[], Vec::as_slice)
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
            let unmet = |d: &Descriptor| {
                d.wait()
                    .is_some_and(|w| signals[w.sem.index()] < u64::from(w.count.get()))
            };
            let mut changed = false;
            for (list, n) in pending.iter().zip(&mut cut) {
                if let Some(i) = list.iter().take(*n).position(unmet) {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::addr::FabricAddr;
    use crate::descriptor::{SemId, SemWait};
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
            .units()
            .iter()
            .map(|u| (u.at(0), u.descriptors().len()))
            .collect();
        assert_eq!(shape, [((0, 0), 2), ((0, 2), 2), ((1, 0), 1), ((1, 1), 2)]);
        assert_eq!(s.before(), [0, 1, 0, 2]);
        assert_eq!(s.then(1), [3]);
        assert_eq!(s.units()[3].at(1), (1, 2));
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
}
