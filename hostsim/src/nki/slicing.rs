//! NKI's slicing of a tensor (`t[2:6, ::2]`, `t[i]`, `t[nl.ds(s, n), :]`) as the `.ap()`
//! pattern it stands for: NKI builds these views into access patterns when a kernel is
//! traced, and so does hostsim, so a slice is an `.ap()` and nothing more.
//!
//! The slice of a tensor of shape `[d0, ..., dn]` takes one entry per dim (missing trailing
//! entries take the whole dim): a range `start:stop:step` (numpy's meaning, already
//! clamped to the dim) walks `stride_k * step` elements `count` times from `start`, and an
//! index `i` fixes the dim at `i` (its pair is dropped). `stride_k = prod(shape[k+1:])`.
//! The pattern keeps one pair per dim the slice keeps, outermost first, so a transpose
//! sees the slice's dims (a single element is one pair `[1, 1]`). On SBUF/PSUM the first
//! pair is the partition dim's even where an index fixes it, as the `.ap()` rules want
//! (see [`super::ap`]).

use super::ap::{ApDim, MAX_AP_DIMS};
use smallvec::SmallVec;

/// One entry of a slice, its bounds resolved against its dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// `i`: one element of the dim (`0 <= i < dim`).
    Index(u64),
    /// `start:stop:step` as numpy resolves it: `count` elements from `start`.
    Range { start: u64, step: i64, count: u64 },
}

/// The `(offset, pattern)` of slicing a tensor of `shape` by `entries` (`on_core`: SBUF or
/// PSUM); the rule broken otherwise.
pub fn pattern(
    shape: &[u64],
    on_core: bool,
    entries: &[Entry],
) -> Result<(u64, SmallVec<[ApDim; MAX_AP_DIMS]>), String> {
    if entries.len() > shape.len() {
        return Err(format!(
            "{} entries for a tensor of {} dims",
            entries.len(),
            shape.len()
        ));
    }
    let mut offset = 0u64;
    let mut pairs: Vec<(i64, u64)> = Vec::new();
    for (k, &dim) in shape.iter().enumerate() {
        let stride: u64 = shape[k + 1..].iter().product();
        let entry = entries.get(k).copied().unwrap_or(Entry::Range {
            start: 0,
            step: 1,
            count: dim,
        });
        let partition = on_core && k == 0;
        match entry {
            Entry::Index(i) if i >= dim => {
                return Err(format!(
                    "index {i} is out of range for dim {k} of size {dim}"
                ))
            }
            Entry::Index(i) => {
                offset += i * stride;
                if partition {
                    pairs.push((stride as i64, 1));
                }
            }
            Entry::Range { count: 0, .. } => {
                return Err(format!(
                    "dim {k}'s range is empty (a slice moves at least one element)"
                ))
            }
            Entry::Range { start, step, count } => {
                offset += start * stride;
                let step = i64::try_from(stride)
                    .ok()
                    .and_then(|s| step.checked_mul(s))
                    .ok_or_else(|| {
                        format!("dim {k}'s step {step} times its stride {stride} overflows 64 bits")
                    })?;
                pairs.push((step, count));
            }
        }
    }
    if pairs.len() > MAX_AP_DIMS {
        return Err(format!(
            "the slice keeps {} dims; an .ap() takes at most {MAX_AP_DIMS}",
            pairs.len()
        ));
    }
    if pairs.is_empty() {
        pairs.push((1, 1));
    }
    let dims = pairs.into_iter().map(|(step, num)| ApDim {
        step,
        num: u32::try_from(num).unwrap_or(u32::MAX),
    });
    Ok((offset, dims.collect()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(n: u64) -> Entry {
        Entry::Range {
            start: 0,
            step: 1,
            count: n,
        }
    }

    fn pairs(dims: &[ApDim]) -> Vec<(i64, u32)> {
        dims.iter().map(|d| (d.step, d.num)).collect()
    }

    #[test]
    fn hbm_slices_are_offsets_and_merged_pairs() {
        // t[2:6, ::2] of an [8, 6] tensor
        let e = [
            Entry::Range {
                start: 2,
                step: 1,
                count: 4,
            },
            Entry::Range {
                start: 0,
                step: 2,
                count: 3,
            },
        ];
        let (offset, dims) = pattern(&[8, 6], false, &e).unwrap();
        assert_eq!((offset, pairs(&dims)), (12, vec![(6, 4), (2, 3)]));
        // t[2:6, 1:4]: rows of 3 from column 1
        let e = [
            e[0],
            Entry::Range {
                start: 1,
                step: 1,
                count: 3,
            },
        ];
        let (offset, dims) = pattern(&[8, 6], false, &e).unwrap();
        assert_eq!((offset, pairs(&dims)), (13, vec![(6, 4), (1, 3)]));
        // t[3] of a [4, 5, 6] tensor: its two other dims
        let (offset, dims) = pattern(&[4, 5, 6], false, &[Entry::Index(3)]).unwrap();
        assert_eq!((offset, pairs(&dims)), (90, vec![(6, 5), (1, 6)]));
        // t[::-1] of a [4, 2]: rows backwards, each row forwards
        let back = Entry::Range {
            start: 3,
            step: -1,
            count: 4,
        };
        let (offset, dims) = pattern(&[4, 2], false, &[back]).unwrap();
        assert_eq!((offset, pairs(&dims)), (6, vec![(-2, 4), (1, 2)]));
        // one element
        let (offset, dims) = pattern(&[4, 2], false, &[Entry::Index(1), Entry::Index(1)]).unwrap();
        assert_eq!((offset, pairs(&dims)), (3, vec![(1, 1)]));
    }

    #[test]
    fn on_core_the_first_pair_is_the_partition_dims() {
        // i_sb[:, 2] of a (128, 4) tile: a column, one index per partition
        let (offset, dims) = pattern(&[128, 4], true, &[all(128), Entry::Index(2)]).unwrap();
        assert_eq!((offset, pairs(&dims)), (2, vec![(4, 128)]));
        // tile[5] of a [128, 64]: partition 5, kept as the first pair
        let (offset, dims) = pattern(&[128, 64], true, &[Entry::Index(5)]).unwrap();
        assert_eq!((offset, pairs(&dims)), (320, vec![(64, 1), (1, 64)]));
        // the whole tile: a pair per dim
        let (_, dims) = pattern(&[128, 8, 8], true, &[]).unwrap();
        assert_eq!(pairs(&dims), vec![(64, 128), (8, 8), (1, 8)]);
        let e = pattern(&[2, 2, 2, 2, 2, 2], false, &[]).unwrap_err();
        assert_eq!(e, "the slice keeps 6 dims; an .ap() takes at most 5");
    }

    #[test]
    fn bad_slices_are_refused_naming_the_dim() {
        let e = pattern(&[4, 2], false, &[Entry::Index(4)]).unwrap_err();
        assert_eq!(e, "index 4 is out of range for dim 0 of size 4");
        let empty = Entry::Range {
            start: 1,
            step: 1,
            count: 0,
        };
        let e = pattern(&[4, 2], false, &[all(4), empty]).unwrap_err();
        assert!(e.starts_with("dim 1's range is empty"), "{e}");
        let e = pattern(&[4], false, &[all(4), all(1)]).unwrap_err();
        assert_eq!(e, "2 entries for a tensor of 1 dims");
        let huge = Entry::Range {
            start: 0,
            step: i64::MIN / 2,
            count: 1,
        };
        let e = pattern(&[2, 3, 4], false, &[all(2), huge]).unwrap_err();
        assert!(e.ends_with("times its stride 4 overflows 64 bits"), "{e}");
    }
}
