//! Spraying descriptors across the DMA queues the `eng_mask` selects.
//!
//! Balance says round-robin; determinism says every descriptor that writes a given
//! destination byte must sit in one queue, in element order (so reductions apply in index
//! order and the last plain copy wins, whatever the number of queues or threads). The
//! sprayer therefore picks one of two modes:
//!
//! - [`SprayMode::Disjoint`]: the destination ranges are known not to overlap (a pattern
//!   proved injective, or indirect rows with distinct indices that cannot overlap): run `i`
//!   goes to the `i mod n`-th selected queue.
//! - [`SprayMode::Grouped`]: otherwise. Runs whose destination ranges overlap, directly or
//!   through a chain, form a group (found by sorting the ranges and sweeping; for whole
//!   rows of one table, in one pass through a table of the rows seen); groups are dealt
//!   round-robin in order of first appearance, and each group's runs stay in order.

use crate::error::Error;
use crate::runs::{Hull, Run};
use smallvec::SmallVec;

/// Queues of one DMA engine set (the 16 DMA rings).
pub const QUEUES: usize = dma::queue_file::MAX_QUEUES;

/// How runs are dealt to queues.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SprayMode {
    Disjoint,
    Grouped,
}

/// The queue ids an `eng_mask` selects, ascending; a zero mask is an error.
pub fn selected_queues(eng_mask: u16) -> Result<SmallVec<[u8; QUEUES]>, Error> {
    let q: SmallVec<[u8; QUEUES]> = (0..QUEUES as u8)
        .filter(|i| eng_mask >> i & 1 == 1)
        .collect();
    if q.is_empty() {
        return Err(Error::NoQueues { eng_mask });
    }
    Ok(q)
}

/// The queue of every run, in run order.
pub fn assign(runs: &[Run], queues: &[u8], mode: SprayMode) -> Vec<u8> {
    let n = queues.len().max(1);
    // a mask rather than a division for the usual 16 (or 2, 4, 8) queues
    let mask = n.is_power_of_two().then(|| n - 1);
    let pick = |i: usize| {
        let at = mask.map_or_else(|| i % n, |m| i & m);
        queues.get(at).copied().unwrap_or(0)
    };
    match mode {
        SprayMode::Disjoint => (0..runs.len()).map(pick).collect(),
        SprayMode::Grouped => {
            let groups = overlap_groups(runs);
            groups.into_iter().map(pick).collect()
        }
    }
}

/// Fails if any byte some run reads is a byte some run writes: one request does not order
/// its reads after its own writes, so such a request has no defined result. (Fills read
/// nothing.) `read` and `written` hold every byte the runs read and write (their hulls, or
/// wider): where they do not meet, nothing else is looked at, and only ranges that meet
/// the other side's hull can overlap it. The error names the lowest such byte and the end
/// of the bytes from there on that are both read and written.
///
/// One side is merged into sorted disjoint ranges and each range of the other side is
/// looked up in them (a binary search): the side already in address order is merged (a
/// gather's writes, a scatter's reads), so the side in index order (the rows the indices
/// pick) is never sorted unless there is an overlap to report.
pub fn check_no_overlap(runs: &[Run], (read, written): (Hull, Hull)) -> Result<(), Error> {
    if !read.meets(written) {
        return Ok(());
    }
    let within = |hull: Hull| move |&(lo, hi): &(u64, u64)| hull.meets(Hull::new(lo, hi));
    let reads: Vec<(u64, u64)> = runs
        .iter()
        .filter_map(Run::read_range)
        .filter(within(written))
        .collect();
    let writes: Vec<(u64, u64)> = runs
        .iter()
        .map(|r| (r.dst, r.dst + r.len))
        .filter(within(read))
        .collect();
    let (merged, looked_up) = match reads.is_sorted() && !writes.is_sorted() {
        true => (union(&reads), &writes),
        false => (union(&writes), &reads),
    };
    let lowest = looked_up
        .iter()
        .filter_map(|&r| first_common_byte(&merged, r))
        .min();
    let Some(lo) = lowest else {
        return Ok(());
    };
    // The bytes from `lo` on that are both read and written end where the first of the
    // two merged ranges holding `lo` ends.
    let end = |ranges: &[(u64, u64)]| {
        let merged = union(ranges);
        let at = merged.partition_point(|r| r.1 <= lo);
        merged.get(at).map_or(lo, |r| r.1)
    };
    let hi = end(&reads).min(end(&writes));
    Err(Error::SourceOverlapsDestination { lo, hi })
}

/// `ranges` (half-open) merged into sorted, disjoint ranges; touching ranges merge.
fn union(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut ranges = ranges.to_vec();
    ranges.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(ranges.len());
    for (lo, hi) in ranges {
        match out.last_mut() {
            Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
            _ => out.push((lo, hi)),
        }
    }
    out
}

/// The lowest byte of `[lo, hi)` that one of `merged` (sorted, disjoint) holds.
fn first_common_byte(merged: &[(u64, u64)], (lo, hi): (u64, u64)) -> Option<u64> {
    let at = merged.partition_point(|m| m.1 <= lo);
    let m = merged.get(at)?;
    (m.0 < hi && lo < hi).then_some(m.0.max(lo))
}

/// [`overlap_groups`] of runs that all have one length and destinations on one grid of
/// that length (whole rows of one table, the usual scatter): two such runs overlap exactly
/// when their destinations are equal, so one pass through a table of the rows seen
/// ([`FirstSeen`]) replaces the sort. `None` for any other runs.
fn slot_groups(runs: &[Run]) -> Option<Vec<usize>> {
    let head = runs.first()?;
    let len = head.len;
    let grid = head.dst.checked_rem(len)?;
    // a shift instead of a division where the length is a power of two
    let shift = len.is_power_of_two().then(|| len.trailing_zeros());
    let mut seen = FirstSeen::with_room(runs.len());
    let mut groups = Vec::with_capacity(runs.len());
    for r in runs {
        let (row, rem) = match shift {
            Some(s) => (r.dst >> s, r.dst & (len - 1)),
            None => (r.dst / len, r.dst % len),
        };
        if r.len != len || rem != grid || row == FirstSeen::EMPTY {
            return None;
        }
        groups.push(seen.group(row));
    }
    Some(groups)
}

/// The group ordinal of each row seen, numbered in order of first sight: an open-addressed
/// table (linear probing, Fibonacci hashing, so that rows on any stride spread) at most
/// half full.
struct FirstSeen {
    /// `(row, group)`, [`FirstSeen::EMPTY`] rows free.
    slots: Vec<(u64, usize)>,
    /// `64 - log2(slots.len())`: the hash keeps the product's top bits.
    shift: u32,
    next: usize,
}

impl FirstSeen {
    /// The row of a free slot (no run's row: a run ends inside the address space).
    const EMPTY: u64 = u64::MAX;

    /// A table with room for `rows` distinct rows.
    fn with_room(rows: usize) -> FirstSeen {
        let size = (2 * rows).next_power_of_two().max(8);
        FirstSeen {
            slots: vec![(Self::EMPTY, 0); size],
            shift: 64 - size.trailing_zeros(),
            next: 0,
        }
    }

    /// The group of `row`: the one it got when first seen, else the next ordinal.
    #[inline(always)]
    fn group(&mut self, row: u64) -> usize {
        let mask = self.slots.len() - 1;
        let mut at = (row.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize;
        loop {
            match self.slots.get_mut(at) {
                Some(&mut (r, g)) if r == row => return g,
                Some(slot) if slot.0 == Self::EMPTY => {
                    let g = self.next;
                    *slot = (row, g);
                    self.next += 1;
                    return g;
                }
                _ => at = (at + 1) & mask,
            }
        }
    }
}

/// Group ordinal of every run: runs with overlapping destinations (transitively) share a
/// group; groups are numbered in order of their first run.
fn overlap_groups(runs: &[Run]) -> Vec<usize> {
    if let Some(groups) = slot_groups(runs) {
        return groups;
    }
    // (destination, run) pairs sort by value, without a lookup per comparison
    let mut order: Vec<(u64, u32)> = (0u32..).zip(runs).map(|(i, r)| (r.dst, i)).collect();
    order.sort_unstable();
    let mut raw = vec![0usize; runs.len()];
    let (mut group, mut end) = (0usize, None::<u64>);
    for &(_, i) in &order {
        let r = runs[i as usize];
        match end {
            Some(e) if r.dst < e => end = Some(e.max(r.dst + r.len)),
            Some(_) => {
                group += 1;
                end = Some(r.dst + r.len);
            }
            None => end = Some(r.dst + r.len),
        }
        raw[i as usize] = group;
    }
    // renumber by first appearance in run order
    let mut ordinal = vec![usize::MAX; group + 1];
    let mut next = 0;
    raw.iter()
        .map(|&g| {
            if ordinal[g] == usize::MAX {
                ordinal[g] = next;
                next += 1;
            }
            ordinal[g]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn run(dst: u64, len: u64) -> Run {
        Run::copy(0, dst, len)
    }

    /// [`check_no_overlap`] with the runs' exact hulls.
    fn no_overlap(runs: &[Run]) -> Result<(), Error> {
        let hulls = runs.iter().map(Run::hulls);
        let join = |(a, b): (Hull, Hull), (r, w): (Hull, Hull)| (a.join(r), b.join(w));
        check_no_overlap(runs, hulls.fold((Hull::EMPTY, Hull::EMPTY), join))
    }

    #[test]
    fn masks_select_queues() {
        assert_eq!(
            selected_queues(0b1010_0000_0000_0001).unwrap().as_slice(),
            &[0, 13, 15]
        );
        assert_eq!(selected_queues(0xffff).unwrap().len(), 16);
        assert!(matches!(
            selected_queues(0),
            Err(Error::NoQueues { eng_mask: 0 })
        ));
    }

    #[test]
    fn disjoint_is_round_robin() {
        let runs: Vec<Run> = (0..5).map(|i| run(i * 100, 10)).collect();
        assert_eq!(
            assign(&runs, &[3, 7], SprayMode::Disjoint),
            vec![3, 7, 3, 7, 3]
        );
    }

    #[test]
    fn overlapping_destinations_share_a_queue_in_order() {
        // runs 0 and 2 overlap, 3 touches 2's range through 4 (chain), 1 alone
        let runs = vec![
            run(100, 10),
            run(500, 10),
            run(105, 10),
            run(300, 10),
            run(110, 195),
        ];
        let q = assign(&runs, &[0, 1, 2], SprayMode::Grouped);
        assert_eq!(q[0], q[2]);
        assert_eq!(q[2], q[4]);
        assert_eq!(q[4], q[3]);
        assert_ne!(q[1], q[0]);
        assert_eq!(q, vec![0, 1, 0, 0, 0]);
    }

    #[test]
    fn reads_of_written_bytes_are_rejected() {
        let r = |src, dst| Run::copy(src, dst, 8);
        assert!(no_overlap(&[r(0, 100), r(8, 108), r(16, 200)]).is_ok());
        let fill = Run {
            fill: true,
            ..r(100, 300)
        };
        assert!(
            no_overlap(&[fill, r(0, 100)]).is_ok(),
            "a fill reads nothing"
        );
        let e = no_overlap(&[r(0, 100), r(104, 300)]).unwrap_err();
        assert_eq!(e, Error::SourceOverlapsDestination { lo: 104, hi: 108 });
        // a scatter: reads in address order, writes in index order (the reads are merged)
        let scatter = [r(0, 300), r(8, 100), r(16, 200), r(24, 4)];
        let e = no_overlap(&scatter).unwrap_err();
        assert_eq!(e, Error::SourceOverlapsDestination { lo: 4, hi: 12 });
        assert!(no_overlap(&[r(0, 300), r(8, 100), r(16, 200), r(24, 40)]).is_ok());
    }

    /// Random runs, mostly short and close together so that they overlap.
    fn runs() -> impl Strategy<Value = Vec<Run>> {
        let run = (
            0u64..400,
            0u64..400,
            1u64..40,
            proptest::bool::weighted(0.2),
        )
            .prop_map(|(src, dst, len, fill)| Run {
                fill,
                ..Run::copy(src, dst, len)
            });
        proptest::collection::vec(run, 0..24)
    }

    proptest! {
        /// Against every byte: refused exactly when some run reads a byte some run
        /// writes, naming the lowest such byte and the end of the such bytes from it on.
        #[test]
        fn overlap_is_refused_exactly_when_a_read_byte_is_written(runs in runs()) {
            let read = |b: u64| runs.iter().filter_map(Run::read_range).any(|r| r.0 <= b && b < r.1);
            let written = |b: u64| runs.iter().any(|w| w.dst <= b && b < w.dst + w.len);
            let both = |b: &u64| read(*b) && written(*b);
            let want = (0u64..1000).find(both).map(|lo| {
                let hi = (lo..1000).find(|b| !both(b)).unwrap_or(1000);
                Error::SourceOverlapsDestination { lo, hi }
            });
            prop_assert_eq!(no_overlap(&runs).err(), want);
        }

        /// Arbitrary runs take the sort.
        #[test]
        fn groups_are_the_overlap_closure(runs in runs()) {
            check_groups(&runs)?;
        }

        /// Rows of one length on one grid, with duplicates, take the table of rows seen.
        #[test]
        fn grid_groups_are_the_overlap_closure(
            (len, grid) in (1u64..64, 0u64..64),
            slots in proptest::collection::vec(0u64..12, 1..24),
        ) {
            let runs: Vec<Run> = slots.iter().map(|k| run(k * len + grid % len, len)).collect();
            prop_assert!(slot_groups(&runs).is_some());
            check_groups(&runs)?;
        }

        /// Rows on a stride of a power of two (the same low bits, which a plain modulo
        /// would put in one chain), with duplicates, take the table too.
        #[test]
        fn strided_grid_groups_are_the_overlap_closure(
            (len, grid) in (1u64..64, 0u64..64),
            slots in proptest::collection::vec(0u64..12, 1..24),
            stride in 8u32..40,
        ) {
            let far = |k: u64| run(k * len + grid % len, len);
            let runs: Vec<Run> = slots.iter().map(|k| far(k << stride)).collect();
            prop_assert!(slot_groups(&runs).is_some());
            check_groups(&runs)?;
        }
    }

    /// Against a closure over every pair: two runs share a group exactly when a chain of
    /// destination overlaps joins them; groups are numbered by first run.
    fn check_groups(runs: &[Run]) -> Result<(), TestCaseError> {
        let n = runs.len();
        let meets = |a: Run, b: Run| a.dst < b.dst + b.len && b.dst < a.dst + a.len;
        let mut joined: Vec<Vec<bool>> = (0..n)
            .map(|i| (0..n).map(|j| i == j || meets(runs[i], runs[j])).collect())
            .collect();
        for k in 0..n {
            for i in 0..n {
                for j in 0..n {
                    joined[i][j] |= joined[i][k] && joined[k][j];
                }
            }
        }
        let groups = overlap_groups(runs);
        for i in 0..n {
            for j in 0..n {
                prop_assert_eq!(groups[i] == groups[j], joined[i][j], "runs {} {}", i, j);
            }
            let first_seen = groups[..i].iter().max().map_or(0, |m| m + 1);
            prop_assert!(groups[i] <= first_seen);
        }
        Ok(())
    }

    #[test]
    fn touching_ranges_are_not_overlapping() {
        let runs = vec![run(0, 10), run(10, 10)];
        assert_eq!(assign(&runs, &[0, 1], SprayMode::Grouped), vec![0, 1]);
    }
}
