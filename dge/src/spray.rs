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
//!   through a chain, form a group (found by sorting the ranges and sweeping); groups are
//!   dealt round-robin in order of first appearance, and each group's runs stay in order.

use crate::error::Error;
use crate::runs::Run;
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
    let pick = |i: usize| queues.get(i % n).copied().unwrap_or(0);
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
/// nothing.)
pub fn check_no_overlap(runs: &[Run]) -> Result<(), Error> {
    let union = |f: fn(&Run) -> Option<(u64, u64)>| {
        let mut v: Vec<(u64, u64)> = runs.iter().filter_map(f).collect();
        v.sort_unstable();
        let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
        for (lo, hi) in v {
            match out.last_mut() {
                Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                _ => out.push((lo, hi)),
            }
        }
        out
    };
    let (src, dst) = (
        union(Run::read_range),
        union(|r| Some((r.dst, r.dst + r.len))),
    );
    let (mut i, mut j) = (0, 0);
    while let (Some(&s), Some(&d)) = (src.get(i), dst.get(j)) {
        if s.0 < d.1 && d.0 < s.1 {
            let (lo, hi) = (s.0.max(d.0), s.1.min(d.1));
            return Err(Error::SourceOverlapsDestination { lo, hi });
        }
        if s.1 <= d.1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    Ok(())
}

/// Group ordinal of every run: runs with overlapping destinations (transitively) share a
/// group; groups are numbered in order of their first run.
fn overlap_groups(runs: &[Run]) -> Vec<usize> {
    let mut order: Vec<u32> = (0..runs.len() as u32).collect();
    order.sort_unstable_by_key(|&i| runs[i as usize].dst);
    let mut raw = vec![0usize; runs.len()];
    let (mut group, mut end) = (0usize, None::<u64>);
    for &i in &order {
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

    fn run(dst: u64, len: u64) -> Run {
        Run::copy(0, dst, len)
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
        assert!(check_no_overlap(&[r(0, 100), r(8, 108), r(16, 200)]).is_ok());
        let fill = Run {
            fill: true,
            ..r(100, 300)
        };
        assert!(
            check_no_overlap(&[fill, r(0, 100)]).is_ok(),
            "a fill reads nothing"
        );
        let e = check_no_overlap(&[r(0, 100), r(104, 300)]).unwrap_err();
        assert_eq!(e, Error::SourceOverlapsDestination { lo: 104, hi: 108 });
    }

    #[test]
    fn touching_ranges_are_not_overlapping() {
        let runs = vec![run(0, 10), run(10, 10)];
        assert_eq!(assign(&runs, &[0, 1], SprayMode::Grouped), vec![0, 1]);
    }
}
