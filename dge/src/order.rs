//! Element order for requests that read bytes they write.
//!
//! A request's descriptors run on several queues at once, so within one replay nothing
//! orders a read after a write of another queue. With [`ElementOrder::Any`] (the default)
//! a request whose runs read bytes they also write is rejected. With
//! [`ElementOrder::Sequential`] it has the semantics of a plain loop instead: *units* of
//! `unit_elems` consecutive elements (in element order) take effect one after another,
//! each reading its whole source before writing its destination (a row of a DMA
//! instruction is one unit). The request is then cut into *phases*, replayed one after
//! another, such that within a phase no unit reads a byte another unit of the phase writes
//! or writes a byte another reads; units that only write the same bytes share a phase (the
//! spray keeps them in one queue, in order).
//!
//! A unit whose own source and destination overlap is one descriptor when it fits (the
//! DMA engine reads a descriptor's source before writing, as `memmove`). A longer one is
//! split into descriptors of one phase each, in the order that keeps `memmove` semantics
//! (from the end when the destination lies above the source). A unit made of several runs
//! that overlap each other has no such order and is rejected, and so is a longer cast
//! (its sides move at different rates, so neither end is safe to start from in general).

use crate::error::Error;
use crate::runs::{extend_or_flush, split, Run, Scale};
use std::collections::BTreeMap;

/// How a request orders its reads against its own writes (module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ElementOrder {
    /// No order: a request that reads bytes it writes is rejected.
    #[default]
    Any,
    /// Units of `unit_elems` elements take effect one after another, in element order.
    Sequential { unit_elems: u64 },
}

/// A set of byte ranges `[lo, hi)`, kept disjoint (touching and overlapping ranges merge).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ByteRanges(BTreeMap<u64, u64>);

impl ByteRanges {
    /// Whether some byte of `[lo, hi)` is in the set.
    pub fn overlaps(&self, range: (u64, u64)) -> bool {
        self.first_overlap(range).is_some()
    }

    /// The bytes of `[lo, hi)` shared with the lowest range of the set it meets.
    pub fn first_overlap(&self, (lo, hi): (u64, u64)) -> Option<(u64, u64)> {
        let meets = self.0.range(..hi).rev().take_while(|(_, &end)| end > lo);
        let (&l, &h) = meets.last()?;
        Some((lo.max(l), hi.min(h)))
    }

    /// Adds `[lo, hi)`.
    pub fn insert(&mut self, (mut lo, mut hi): (u64, u64)) {
        while let Some((&l, &h)) = self.0.range(..=hi).next_back() {
            if h < lo {
                break;
            }
            self.0.remove(&l);
            (lo, hi) = (lo.min(l), hi.max(h));
        }
        self.0.insert(lo, hi);
    }
}

/// The phase being built: its runs and the bytes they read and write.
#[derive(Default)]
struct Phase {
    runs: Vec<Run>,
    reads: ByteRanges,
    writes: ByteRanges,
}

fn write_range(r: &Run) -> (u64, u64) {
    (r.dst, r.dst + r.len)
}

/// Cuts `units` (runs tagged with their unit number, in element order) into phases
/// (module docs); each phase's runs are merged where they join and split at 64 KiB.
pub fn phases(units: &[(u64, Run)]) -> Result<Vec<Vec<Run>>, Error> {
    let mut out: Vec<Vec<Run>> = Vec::new();
    let mut phase = Phase::default();
    for unit in units.chunk_by(|a, b| a.0 == b.0) {
        let runs: Vec<Run> = unit.iter().map(|u| u.1).collect();
        if let Some(chunks) = self_overlap(&runs)? {
            close(&mut out, &mut phase);
            out.extend(chunks.into_iter().map(|c| vec![c]));
            continue;
        }
        let hazard = runs.iter().any(|r| {
            r.read_range().is_some_and(|rr| phase.writes.overlaps(rr))
                || phase.reads.overlaps(write_range(r))
        });
        if hazard {
            close(&mut out, &mut phase);
        }
        for r in runs {
            if let Some(rr) = r.read_range() {
                phase.reads.insert(rr);
            }
            phase.writes.insert(write_range(&r));
            phase.runs.push(r);
        }
    }
    close(&mut out, &mut phase);
    Ok(out)
}

/// Ends the current phase (if it has runs), merging and splitting its runs.
fn close(out: &mut Vec<Vec<Run>>, phase: &mut Phase) {
    let done = std::mem::take(phase);
    if done.runs.is_empty() {
        return;
    }
    let mut merged = Vec::with_capacity(done.runs.len());
    let mut cur = None;
    let mut emit = |r| merged.push(r);
    for r in done.runs {
        extend_or_flush(&mut cur, r, &mut emit);
    }
    if let Some(r) = cur {
        split(r, &mut emit);
    }
    out.push(merged);
}

/// A unit whose runs read bytes they write: `None` when it is one descriptor's worth (or
/// no overlap, or exactly in place); the ordered 64 KiB pieces of a longer single run; an
/// error for several runs that overlap each other.
fn self_overlap(runs: &[Run]) -> Result<Option<Vec<Run>>, Error> {
    let hit = runs.iter().find_map(|r| {
        let rr = r.read_range()?;
        runs.iter().map(write_range).find_map(|w| {
            let (lo, hi) = (rr.0.max(w.0), rr.1.min(w.1));
            (lo < hi).then_some((lo, hi))
        })
    });
    let Some((lo, hi)) = hit else {
        return Ok(None);
    };
    match runs {
        [r] if r.len <= r.scale.max_len() || (r.src == r.dst && r.scale == Scale::SAME) => Ok(None),
        [r] if r.scale == Scale::SAME => {
            let mut pieces = Vec::new();
            split(*r, &mut |p| pieces.push(p));
            if r.dst > r.src {
                pieces.reverse();
            }
            Ok(Some(pieces))
        }
        _ => Err(Error::SourceOverlapsDestination { lo, hi }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::MAX_RUN_BYTES;

    fn unit(u: u64, src: u64, dst: u64, len: u64) -> (u64, Run) {
        (u, Run::copy(src, dst, len))
    }

    #[test]
    fn ranges_merge_and_answer_overlaps() {
        let mut r = ByteRanges::default();
        r.insert((10, 20));
        r.insert((30, 40));
        assert_eq!(r.first_overlap((15, 35)), Some((15, 20)));
        r.insert((20, 30));
        assert_eq!(r.0.len(), 1);
        assert!(r.overlaps((39, 41)) && !r.overlaps((40, 50)) && !r.overlaps((0, 10)));
        assert_eq!(r.first_overlap((0, 12)), Some((10, 12)));
    }

    #[test]
    fn independent_units_share_one_phase_and_merge() {
        let p = phases(&[unit(0, 0, 100, 4), unit(1, 4, 104, 4), unit(2, 8, 108, 4)]).unwrap();
        assert_eq!(p, vec![vec![Run::copy(0, 100, 12)]]);
    }

    #[test]
    fn a_read_of_an_earlier_write_starts_a_phase() {
        // shift right by one element: each unit reads what the previous one wrote
        let p = phases(&[unit(0, 0, 4, 4), unit(1, 4, 8, 4), unit(2, 8, 12, 4)]).unwrap();
        assert_eq!(p.len(), 3);
        // shift left: unit 1 writes what unit 0 read (a write after a read)
        let p = phases(&[unit(0, 4, 0, 4), unit(1, 8, 4, 4)]).unwrap();
        assert_eq!(p.len(), 2);
        // in place: no hazard between units
        let p = phases(&[unit(0, 0, 0, 4), unit(1, 4, 4, 4)]).unwrap();
        assert_eq!(p, vec![vec![Run::copy(0, 0, 8)]]);
    }

    #[test]
    fn a_long_self_overlapping_unit_runs_backwards_piece_by_piece() {
        let len = 3 * MAX_RUN_BYTES;
        let p = phases(&[unit(0, 0, 8, len)]).unwrap();
        let dsts: Vec<u64> = p.iter().map(|ph| ph[0].dst).collect();
        let m = MAX_RUN_BYTES;
        assert_eq!(dsts, vec![8 + 2 * m, 8 + m, 8]);
        let p = phases(&[unit(0, 8, 0, len)]).unwrap();
        let dsts: Vec<u64> = p.iter().map(|ph| ph[0].dst).collect();
        assert_eq!(dsts, vec![0, m, 2 * m]);
        let e = phases(&[unit(0, 0, 4, 8), unit(0, 100, 0, 4)]).unwrap_err();
        assert!(matches!(e, Error::SourceOverlapsDestination { .. }), "{e}");
    }

    #[test]
    fn a_cast_reads_its_source_run_not_its_length() {
        // f32 -> bf16: unit 0 reads [0, 16) and writes 8 bytes at 100; unit 1 writes
        // [12, 14), inside what unit 0 read but past its destination length
        let narrow = Scale::of(4, 2);
        let units = [
            (0, Run::cast(0, 100, 8, narrow)),
            (1, Run::cast(200, 12, 2, narrow)),
        ];
        assert_eq!(phases(&units).unwrap().len(), 2);
        // a long self-overlapping cast has no safe order; one that fits a descriptor runs
        // as one (the engine reads its whole source first)
        let long = Run::cast(0, 8, 2 * MAX_RUN_BYTES, Scale::of(1, 2));
        let e = phases(&[(0, long)]).unwrap_err();
        assert!(matches!(e, Error::SourceOverlapsDestination { .. }), "{e}");
        let short = Run::cast(0, 8, MAX_RUN_BYTES / 2, narrow);
        assert_eq!(phases(&[(0, short)]).unwrap(), vec![vec![short]]);
    }
}
