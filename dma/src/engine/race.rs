//! The validating mode's race check ([`super::RaceCheck::On`]): finds two queues that
//! touch the same bytes, at least one of them writing, with no semaphore ordering them.
//!
//! # Happens-before
//!
//! Each queue is cut into *segments*: a segment starts at a descriptor with a WAIT (or the
//! queue's first) and ends at a descriptor with a SIGNAL (or the queue's last). Inside a
//! segment nothing changes what the queue is ordered with, so segments are the unit of
//! ordering. Each segment gets a vector clock `c` (one entry per queue): `c[p] = k` means
//! descriptors `0..k` of queue `p` complete before the segment starts. A segment's clock is
//! its predecessor's in the queue; if it starts with WAIT(s, n) it is joined (entry-wise
//! max) with the clock of the segment that ends in the n-th SIGNAL of `s` — with that
//! queue's entry raised to the signalling descriptor's index + 1 — which makes the order
//! transitive. Segment `A` (queue `a`, descriptors `a0..=a1`) is ordered before segment `B`
//! iff `B.c[a] > a1`; two segments are ordered iff one is before the other. This is exact
//! for the semaphore semantics of [`crate::descriptor`]: a clock entry of queue `a` is
//! always one past a SIGNAL of `a`, and no segment contains a SIGNAL before its last
//! descriptor, so a whole segment is before `B` or none of it is.
//!
//! # The sweep
//!
//! Every executed descriptor contributes a write interval (its destination) and, if it
//! reads one, a read interval (its source); consecutive descriptors of a queue whose
//! intervals of one kind are contiguous and in one segment merge into one interval. The
//! intervals are sorted by start address and swept: the *active* set holds, per segment
//! and kind, the interval reaching furthest among those that started at or before the
//! current address. Every active entry overlaps the current interval, so only the
//! ordering test remains, and it depends on the segments alone. Cost: `O(n log n)` to
//! sort plus, per interval, the number of segments active at its start address (small:
//! segments are between semaphore operations). The first race in address order is
//! reported, the same one for every schedule.

use crate::descriptor::{Descriptor, SemWait, SEMAPHORES};
use crate::error::{AccessKind, Error};
use crate::queue_file::MAX_QUEUES;
use crate::FabricAddr;

type Clock = [u64; MAX_QUEUES];

/// One merged interval `lo..=end` of one kind, from descriptors `first..=last` of a queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Access {
    lo: u64,
    end: u64,
    first: u64,
    last: u64,
    segment: usize,
    queue: usize,
    kind: AccessKind,
}

/// Descriptors `first..=last` of `queue`, between semaphore operations.
#[derive(Clone, Copy, Debug)]
struct Segment {
    queue: usize,
    first: u64,
    last: u64,
    wait: Option<SemWait>,
}

#[derive(Debug, Default)]
struct QueueTrack {
    /// The segment still growing (`None` after a SIGNAL).
    open: Option<usize>,
    /// The queue's segments, in order.
    segments: Vec<usize>,
    /// The accesses the next descriptor may extend, per [`AccessKind`] (read, write).
    last: [Option<usize>; 2],
}

/// Collects the accesses and the semaphore structure of a set of queues.
#[derive(Debug, Default)]
pub(crate) struct RaceRecorder {
    accesses: Vec<Access>,
    segments: Vec<Segment>,
    queues: Vec<QueueTrack>,
    /// Per semaphore, the segment ending in each SIGNAL, in signal order.
    signals: [Vec<usize>; SEMAPHORES as usize],
}

impl RaceRecorder {
    pub(crate) fn new(queues: usize) -> RaceRecorder {
        RaceRecorder {
            queues: (0..queues).map(|_| QueueTrack::default()).collect(),
            ..RaceRecorder::default()
        }
    }

    /// Records descriptor `index` of `queue` (its ranges passed the fabric check).
    pub(crate) fn record(&mut self, queue: usize, index: u64, d: &Descriptor) {
        let Some(segment) = self.segment_for(queue, index, d.wait()) else {
            return;
        };
        self.access(segment, index, d.dest_range(), AccessKind::Write);
        if let Some(src) = d.source_range() {
            self.access(segment, index, src, AccessKind::Read);
        }
        if let Some(sem) = d.signal() {
            // SemId guarantees index < SEMAPHORES.
            self.signals[sem.index()].push(segment);
            if let Some(track) = self.queues.get_mut(queue) {
                track.open = None;
            }
        }
    }

    /// The segment descriptor `index` of `queue` belongs to, opening one if needed.
    fn segment_for(&mut self, queue: usize, index: u64, wait: Option<SemWait>) -> Option<usize> {
        let track = self.queues.get_mut(queue)?;
        if let (Some(id), None) = (track.open, wait) {
            let segment = self.segments.get_mut(id)?;
            segment.last = index;
            return Some(id);
        }
        let id = self.segments.len();
        self.segments.push(Segment {
            queue,
            first: index,
            last: index,
            wait,
        });
        track.open = Some(id);
        track.segments.push(id);
        track.last = [None; 2];
        Some(id)
    }

    /// Adds (or extends) an interval of a range that passed the fabric check.
    fn access(&mut self, segment: usize, index: u64, range: (FabricAddr, u64), kind: AccessKind) {
        let Some(queue) = self.segments.get(segment).map(|s| s.queue) else {
            return;
        };
        let Some(track) = self.queues.get_mut(queue) else {
            return;
        };
        // The fabric check proved `len >= 1` and that `addr + len - 1` does not overflow.
        let (lo, end) = (range.0 .0, range.0 .0 + (range.1 - 1));
        let slot = &mut track.last[kind as usize];
        if let Some(a) = slot.and_then(|i| self.accesses.get_mut(i)) {
            if a.end.checked_add(1) == Some(lo) && a.last + 1 == index {
                a.end = end;
                a.last = index;
                return;
            }
        }
        *slot = Some(self.accesses.len());
        self.accesses.push(Access {
            lo,
            end,
            first: index,
            last: index,
            segment,
            queue,
            kind,
        });
    }

    /// The sweep: the first unordered conflict in address order, as [`Error::Race`].
    pub(crate) fn check(mut self) -> Result<(), Error> {
        let clocks = self.clocks()?;
        let segments = &self.segments;
        // whether segment `a` is before `b`, and whether either is before the other
        let before = |a: usize, b: usize| match (segments.get(a), clocks.get(b)) {
            (Some(sa), Some(cb)) => cb.get(sa.queue).is_some_and(|&k| k > sa.last),
            _ => false,
        };
        let ordered = |a, b| before(a, b) || before(b, a);
        self.accesses
            .sort_unstable_by_key(|a| (a.lo, a.queue, a.first, a.kind as u8));
        let mut active: Vec<Active> = Vec::new();
        for x in &self.accesses {
            active.retain_mut(|e| e.still_reaches(x.lo));
            if let Some(race) = active.iter().find_map(|e| e.race_with(x, ordered)) {
                return Err(race);
            }
            match active.iter_mut().find(|e| e.segment == x.segment) {
                Some(e) => e.add(*x),
                None => active.push(Active::new(*x)),
            }
        }
        Ok(())
    }

    /// Every segment's vector clock, computed in dependency order.
    fn clocks(&self) -> Result<Vec<Clock>, Error> {
        let mut clocks: Vec<Option<Clock>> = vec![None; self.segments.len()];
        // per queue, its next segment and the clock of the one before (none: zeros)
        let mut next = vec![(0usize, Clock::default()); self.queues.len()];
        let mut progressed = true;
        while progressed {
            progressed = false;
            for (track, (pos, base)) in self.queues.iter().zip(&mut next) {
                while let Some(&id) = track.segments.get(*pos) {
                    let Some(clock) = self.clock_of(id, *base, &clocks) else {
                        break;
                    };
                    if let Some(slot) = clocks.get_mut(id) {
                        *slot = Some(clock);
                    }
                    (*pos, *base, progressed) = (*pos + 1, clock, true);
                }
            }
        }
        clocks
            .iter()
            .enumerate()
            .map(|(id, c)| c.ok_or_else(|| self.stalled(id)))
            .collect()
    }

    /// Segment `id`'s clock from its predecessor's, or `None` while the segment its WAIT
    /// needs has no clock yet.
    fn clock_of(&self, id: usize, mut clock: Clock, clocks: &[Option<Clock>]) -> Option<Clock> {
        let Some(wait) = self.segments.get(id)?.wait else {
            return Some(clock);
        };
        // SemId guarantees index < SEMAPHORES; the count is >= 1.
        let nth = wait.count.get() as usize - 1;
        let signaller = *self.signals[wait.sem.index()].get(nth)?;
        let theirs = (*clocks.get(signaller)?)?;
        for (mine, t) in clock.iter_mut().zip(theirs) {
            *mine = (*mine).max(t);
        }
        let s = self.segments.get(signaller)?;
        if let Some(entry) = clock.get_mut(s.queue) {
            *entry = (*entry).max(s.last + 1);
        }
        Some(clock)
    }

    /// The error for a segment whose WAIT never resolves (validation reports wait cycles
    /// and unreachable counts before the race check runs, so this is a backstop).
    fn stalled(&self, id: usize) -> Error {
        let s = self.segments.get(id);
        let wait = s.and_then(|s| s.wait);
        let sem = wait.map_or(0, |w| w.sem.get());
        let reached = self.signals.get(usize::from(sem)).map_or(0, Vec::len);
        Error::SemaphoreDeadlock {
            queue: s.map_or(0, |s| s.queue),
            index: s.map_or(0, |s| s.first),
            sem,
            count: wait.map_or(0, |w| w.count.get()),
            reached: reached as u64,
        }
    }
}

/// One segment's active intervals: per kind (read, write), the one reaching furthest.
struct Active {
    segment: usize,
    queue: usize,
    reach: [Option<Access>; 2],
}

impl Active {
    fn new(x: Access) -> Active {
        let kinds = [AccessKind::Read, AccessKind::Write];
        Active {
            segment: x.segment,
            queue: x.queue,
            reach: kinds.map(|kind| (kind == x.kind).then_some(x)),
        }
    }

    fn add(&mut self, x: Access) {
        let slot = &mut self.reach[x.kind as usize];
        if slot.is_none_or(|a| x.end > a.end) {
            *slot = Some(x);
        }
    }

    /// Drops the kinds that end before `lo`; whether anything is left.
    fn still_reaches(&mut self, lo: u64) -> bool {
        for slot in &mut self.reach {
            if slot.is_some_and(|a| a.end < lo) {
                *slot = None;
            }
        }
        self.reach.iter().any(Option::is_some)
    }

    /// The race between this segment's intervals (all overlapping `x`) and `x`, if any,
    /// given whether two segments are `ordered` by happens-before.
    fn race_with(&self, x: &Access, ordered: impl Fn(usize, usize) -> bool) -> Option<Error> {
        if self.queue == x.queue {
            return None;
        }
        let [read, write] = self.reach;
        let other = match x.kind {
            AccessKind::Write => write.or(read),
            AccessKind::Read => write,
        }?;
        if ordered(self.segment, x.segment) {
            return None;
        }
        Some(Error::Race {
            first_queue: other.queue,
            first_from: other.first,
            first_to: other.last,
            first_access: other.kind,
            second_queue: x.queue,
            second_from: x.first,
            second_to: x.last,
            second_access: x.kind,
            lo: x.lo,
            end: x.end.min(other.end),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::descriptor::SemId;
    use crate::dtype::Dtype;
    use crate::test_util::copy;
    use proptest::prelude::*;
    use std::num::NonZeroU32;

    fn fill(dst: u64, len: u32) -> Descriptor {
        Descriptor::fill(FabricAddr(dst), len, Dtype::U8, 7).unwrap()
    }

    fn wait(sem: u8, count: u32) -> SemWait {
        SemWait {
            sem: SemId::new(sem).unwrap(),
            count: NonZeroU32::new(count).unwrap(),
        }
    }

    fn signal(d: Descriptor, sem: u8) -> Descriptor {
        d.with_signal(SemId::new(sem).unwrap())
    }

    fn check(queues: &[Vec<Descriptor>]) -> Result<(), Error> {
        let mut r = RaceRecorder::new(queues.len());
        for (q, descs) in queues.iter().enumerate() {
            for (i, d) in descs.iter().enumerate() {
                r.record(q, i as u64, d);
            }
        }
        r.check()
    }

    #[test]
    fn disjoint_and_same_queue_overlaps_are_fine() {
        // queue 0 rewrites its own bytes; queue 1 writes next to them; both read [0, 64)
        let q0 = vec![fill(0x1000, 64), copy(0, 0x1000, 64), copy(0, 0x1010, 16)];
        let q1 = vec![copy(0, 0x1040, 64)];
        assert_eq!(check(&[q0, q1]), Ok(()));
    }

    #[test]
    fn unordered_write_write_is_a_race() {
        let q0 = vec![fill(0x100, 16), fill(0x2000, 32)];
        let q1 = vec![fill(0x3000, 8), fill(0x2010, 64)];
        let e = check(&[q0, q1]).unwrap_err();
        let want = Error::Race {
            first_queue: 0,
            first_from: 1,
            first_to: 1,
            first_access: AccessKind::Write,
            second_queue: 1,
            second_from: 1,
            second_to: 1,
            second_access: AccessKind::Write,
            lo: 0x2010,
            end: 0x201f,
        };
        assert_eq!(e, want);
        assert!(e.to_string().contains("0x2010..=0x201f"), "{e}");
    }

    #[test]
    fn unordered_read_of_written_bytes_is_a_race() {
        // queue 1 reads what queue 0 writes
        let q0 = vec![fill(0x2000, 32)];
        let q1 = vec![copy(0x2018, 0x9000, 16)];
        let Err(Error::Race {
            first_access,
            second_access,
            lo,
            end,
            ..
        }) = check(&[q0, q1])
        else {
            panic!()
        };
        assert_eq!(
            (first_access, second_access, lo, end),
            (AccessKind::Write, AccessKind::Read, 0x2018, 0x201f)
        );
        // reads never race with reads
        let q0 = vec![copy(0x2000, 0x100, 32)];
        let q1 = vec![copy(0x2000, 0x200, 32)];
        assert_eq!(check(&[q0, q1]), Ok(()));
    }

    #[test]
    fn a_semaphore_orders_the_waiter_after_the_signal() {
        // queue 1 waits for queue 0's first signal, then overwrites and reads its bytes
        let q0 = vec![fill(0x2000, 32), signal(fill(0x100, 4), 3), fill(0x5000, 8)];
        let q1 = vec![fill(0x7000, 4), fill(0x2000, 64).with_wait(wait(3, 1))];
        assert_eq!(check(&[q0.clone(), q1]), Ok(()));
        // but queue 0's descriptor after the signal is not ordered with queue 1
        let q1 = vec![fill(0x5004, 4).with_wait(wait(3, 1))];
        let Err(Error::Race {
            first_queue,
            first_from,
            second_queue,
            ..
        }) = check(&[q0.clone(), q1])
        else {
            panic!()
        };
        assert_eq!((first_queue, first_from, second_queue), (0, 2, 1));
        // nor is queue 1's descriptor before its wait
        let q1 = vec![fill(0x2000, 4), fill(0x9000, 4).with_wait(wait(3, 1))];
        assert!(matches!(
            check(&[q0, q1]),
            Err(Error::Race { lo: 0x2000, .. })
        ));
    }

    #[test]
    fn ordering_is_transitive_through_a_third_queue() {
        // 0 writes, signals s0; 1 waits s0, signals s1; 2 waits s1 and overwrites 0's bytes
        let q0 = vec![signal(fill(0x2000, 16), 0)];
        let q1 = vec![signal(fill(0x100, 1).with_wait(wait(0, 1)), 1)];
        let q2 = vec![fill(0x2008, 16).with_wait(wait(1, 1))];
        assert_eq!(check(&[q0.clone(), q1, q2.clone()]), Ok(()));
        // without the link through queue 1 it is a race
        let q1 = vec![signal(fill(0x100, 1), 1)];
        assert!(matches!(check(&[q0, q1, q2]), Err(Error::Race { .. })));
    }

    #[test]
    fn the_second_signal_orders_only_what_precedes_it() {
        let q0 = vec![
            signal(fill(0x100, 4), 2),
            fill(0x2000, 8),
            signal(fill(0x104, 4), 2),
        ];
        let early = vec![fill(0x2000, 8).with_wait(wait(2, 1))];
        let late = vec![fill(0x2000, 8).with_wait(wait(2, 2))];
        assert!(matches!(
            check(&[q0.clone(), early]),
            Err(Error::Race { .. })
        ));
        assert_eq!(check(&[q0, late]), Ok(()));
    }

    #[test]
    fn contiguous_runs_merge_and_report_their_span() {
        let q0: Vec<_> = (0..4).map(|i| fill(0x1000 + 16 * i, 16)).collect();
        let q1 = [fill(0x1038, 4)];
        let mut r = RaceRecorder::new(2);
        for (i, d) in q0.iter().enumerate() {
            r.record(0, i as u64, d);
        }
        assert_eq!(r.accesses.len(), 1);
        r.record(1, 0, &q1[0]);
        let Err(Error::Race {
            first_from,
            first_to,
            lo,
            end,
            ..
        }) = r.check()
        else {
            panic!()
        };
        assert_eq!((first_from, first_to, lo, end), (0, 3, 0x1038, 0x103b));
    }

    /// The brute-force oracle: every pair of descriptors of different queues that conflict
    /// and are not ordered, with ordering computed by explicit graph reachability.
    fn brute_force_races(queues: &[Vec<Descriptor>]) -> bool {
        let nodes: Vec<(usize, usize)> = queues
            .iter()
            .enumerate()
            .flat_map(|(q, v)| (0..v.len()).map(move |i| (q, i)))
            .collect();
        let before = |a: (usize, usize), b: (usize, usize)| reaches(queues, a, b);
        let overlap = |x: (u64, u64), y: (u64, u64)| x.0 < y.0 + y.1 && y.0 < x.0 + x.1;
        let ranges = |d: &Descriptor| {
            let (dst, n) = d.dest_range();
            (dst.0, n, d.source_range().map(|(s, n)| (s.0, n)))
        };
        nodes.iter().any(|&a| {
            nodes.iter().any(|&b| {
                let (da, db) = (&queues[a.0][a.1], &queues[b.0][b.1]);
                let ((wa, na, ra), (wb, nb, rb)) = (ranges(da), ranges(db));
                let conflict = overlap((wa, na), (wb, nb))
                    || ra.is_some_and(|r| overlap(r, (wb, nb)))
                    || rb.is_some_and(|r| overlap(r, (wa, na)));
                a.0 < b.0 && conflict && !before(a, b) && !before(b, a)
            })
        })
    }

    /// Whether (qa, ia) completes before (qb, ib) starts: edges are queue order and
    /// "n-th SIGNAL of s" -> "WAIT(s, n)".
    fn reaches(queues: &[Vec<Descriptor>], a: (usize, usize), b: (usize, usize)) -> bool {
        let mut seen = vec![vec![false; 64]; queues.len()];
        let mut stack = vec![a];
        while let Some((q, i)) = stack.pop() {
            let mut succ = vec![];
            if i + 1 < queues[q].len() {
                succ.push((q, i + 1));
            }
            if let Some(s) = queues[q][i].signal() {
                let nth = queues[q][..=i]
                    .iter()
                    .filter(|d| d.signal() == Some(s))
                    .count();
                for (wq, v) in queues.iter().enumerate() {
                    for (wi, d) in v.iter().enumerate() {
                        if d.wait()
                            .is_some_and(|w| w.sem == s && w.count.get() as usize == nth)
                        {
                            succ.push((wq, wi));
                        }
                    }
                }
            }
            for n in succ {
                if n == b {
                    return true;
                }
                if !seen[n.0][n.1] {
                    seen[n.0][n.1] = true;
                    stack.push(n);
                }
            }
        }
        false
    }

    /// Random small queues: queue q signals semaphore q; waits only on lower queues'
    /// semaphores (so there is no cycle) for counts they reach.
    fn arb_queues() -> impl Strategy<Value = Vec<Vec<Descriptor>>> {
        let desc = (
            0..4u64,
            0..4u64,
            1..24u32,
            any::<bool>(),
            any::<bool>(),
            0..3u8,
            1..3u32,
        );
        proptest::collection::vec(proptest::collection::vec(desc, 1..8), 2..4).prop_map(|qs| {
            let mut out: Vec<Vec<Descriptor>> = Vec::new();
            for (q, raw) in qs.iter().enumerate() {
                let mut v = Vec::new();
                for &(s, t, n, is_fill, sig, wq, wc) in raw {
                    let mut d = if is_fill {
                        fill(0x1000 + t * 16, n)
                    } else {
                        copy(0x1000 + s * 16, 0x1000 + t * 16, n)
                    };
                    if sig {
                        d = signal(d, q as u8);
                    }
                    let target = usize::from(wq);
                    let reachable = out
                        .get(target)
                        .map_or(0, |v| v.iter().filter(|d| d.signal().is_some()).count());
                    if target < q && wc as usize <= reachable {
                        d = d.with_wait(wait(wq, wc));
                    }
                    v.push(d);
                }
                out.push(v);
            }
            out
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn sweep_agrees_with_brute_force(queues in arb_queues()) {
            prop_assert_eq!(check(&queues).is_err(), brute_force_races(&queues));
        }
    }
}
