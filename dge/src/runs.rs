//! The descriptor loop's core: walk the source and destination patterns in lockstep
//! (element order), cut them into joint pieces, and merge consecutive pieces into maximal
//! runs that are contiguous in both, never across a fabric region, split at 64 KiB.
//!
//! Each side is a [`Walker`]: an odometer over the reshaped dimensions that yields
//! pieces — a whole innermost row when the innermost dimension is contiguous, else one
//! element. Along an indirection dimension a piece's base comes from the per-index
//! addresses `do_indirection` computed, and a piece whose index failed its bound check is
//! marked invalid: it moves nothing, on either side.

use crate::reshape::Reshaped;
use dma::addr::region_slot;
use dma::descriptor::MAX_DESCRIPTOR_LEN;

/// Most bytes one descriptor moves.
pub const MAX_RUN_BYTES: u64 = MAX_DESCRIPTOR_LEN as u64;

/// One contiguous move: `len` bytes from `src` to `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
}

/// Per-index-position base addresses and bound-check results (`do_indirection`'s output).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexedBases {
    /// `start + index * indirection_step` per index position.
    pub addrs: Vec<u64>,
    /// Whether the index at each position passed its bound check.
    pub valid: Vec<bool>,
}

#[derive(Clone, Copy)]
struct Piece {
    addr: u64,
    elems: u64,
    valid: bool,
}

/// An odometer over one side's reshaped pattern. The byte offset of the direct
/// dimensions is kept up to date as the odometer turns (one add per step, one subtract per
/// wrap), so a piece costs a few adds whatever the rank.
pub struct Walker<'a> {
    start: u64,
    bases: Option<&'a IndexedBases>,
    steps: [i64; 5],
    counts: [u64; 5],
    /// The indirection dimension among the odometer's, if any.
    ind: Option<usize>,
    odo_dims: usize,
    piece_elems: u64,
    idx: [u64; 5],
    /// `sum(idx[k] * steps[k])` over the direct odometer dimensions.
    offset: u64,
    done: bool,
}

impl<'a> Walker<'a> {
    /// A walker over `p`; `bases` must be given exactly when `p` has an indirection dim,
    /// with one entry per position of that dimension.
    pub fn new(p: &'a Reshaped, bases: Option<&'a IndexedBases>) -> Walker<'a> {
        let n = p.dims.len().min(5);
        let inner_is_row =
            n > 0 && p.indirect_dim != Some(n - 1) && p.dims[n - 1].step == i64::from(p.elem_size);
        let (odo_dims, piece_elems) = match inner_is_row {
            true => (n - 1, p.dims[n - 1].count),
            false => (n, 1),
        };
        let (mut steps, mut counts) = ([0i64; 5], [1u64; 5]);
        for (k, d) in p.dims.iter().take(odo_dims).enumerate() {
            // along the indirection dimension the step comes from the indices
            steps[k] = if p.indirect_dim == Some(k) { 0 } else { d.step };
            counts[k] = d.count;
        }
        Walker {
            start: p.start,
            bases,
            steps,
            counts,
            ind: p.indirect_dim.filter(|&d| d < odo_dims),
            odo_dims,
            piece_elems,
            idx: [0; 5],
            offset: 0,
            done: false,
        }
    }

    #[inline]
    fn next_piece(&mut self) -> Option<Piece> {
        if self.done {
            return None;
        }
        let (base, valid) = match (self.ind, self.bases) {
            // Walker::new's contract: bases has one entry per indirection position.
            (Some(k), Some(b)) => {
                let i = self.idx[k] as usize;
                (
                    b.addrs.get(i).copied().unwrap_or(0),
                    b.valid.get(i) == Some(&true),
                )
            }
            (Some(_), None) => (self.start, false),
            (None, _) => (self.start, true),
        };
        let addr = base.wrapping_add(self.offset);
        self.advance();
        Some(Piece {
            addr,
            elems: self.piece_elems,
            valid,
        })
    }

    #[inline]
    fn advance(&mut self) {
        for k in (0..self.odo_dims).rev() {
            self.idx[k] += 1;
            self.offset = self.offset.wrapping_add(self.steps[k] as u64);
            if self.idx[k] < self.counts[k] {
                return;
            }
            let back = (self.steps[k] as u64).wrapping_mul(self.counts[k]);
            self.offset = self.offset.wrapping_sub(back);
            self.idx[k] = 0;
        }
        self.done = true;
    }
}

/// Walks both sides in lockstep and calls `emit` for every maximal run, split at
/// [`MAX_RUN_BYTES`]. The two sides must have equal element counts (validated upstream).
pub fn for_each_run(src: &mut Walker, dst: &mut Walker, elem: u64, mut emit: impl FnMut(Run)) {
    let mut cur: Option<Run> = None;
    let (mut s, mut d) = (src.next_piece(), dst.next_piece());
    while let (Some(sp), Some(dp)) = (s.as_mut(), d.as_mut()) {
        let n = sp.elems.min(dp.elems);
        if sp.valid && dp.valid {
            extend_or_flush(&mut cur, sp.addr, dp.addr, n * elem, &mut emit);
        }
        sp.elems -= n;
        dp.elems -= n;
        sp.addr = sp.addr.wrapping_add(n * elem);
        dp.addr = dp.addr.wrapping_add(n * elem);
        if sp.elems == 0 {
            s = src.next_piece();
        }
        if dp.elems == 0 {
            d = dst.next_piece();
        }
    }
    if let Some(run) = cur {
        split(run, &mut emit);
    }
}

fn extend_or_flush(
    cur: &mut Option<Run>,
    src: u64,
    dst: u64,
    len: u64,
    emit: &mut impl FnMut(Run),
) {
    if let Some(run) = cur {
        let contiguous = run.src.wrapping_add(run.len) == src
            && run.dst.wrapping_add(run.len) == dst
            && region_slot(run.src) == region_slot(src)
            && region_slot(run.dst) == region_slot(dst);
        if contiguous {
            run.len += len;
            return;
        }
        split(*run, emit);
    }
    *cur = Some(Run { src, dst, len });
}

fn split(run: Run, emit: &mut impl FnMut(Run)) {
    let mut off = 0;
    while off < run.len {
        let len = (run.len - off).min(MAX_RUN_BYTES);
        emit(Run {
            src: run.src + off,
            dst: run.dst + off,
            len,
        });
        off += len;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::ByteDim;
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};

    fn shape(start: u64, es: u32, dims: &[(i64, u64)], ind: Option<usize>) -> Reshaped {
        Reshaped {
            start,
            elem_size: es,
            dims: dims
                .iter()
                .map(|&(step, count)| ByteDim { step, count })
                .collect(),
            indirect_dim: ind,
            partition_dim: None,
        }
    }

    fn runs(src: &mut Walker, dst: &mut Walker, es: u64) -> Vec<Run> {
        let mut v = Vec::new();
        for_each_run(src, dst, es, |r| v.push(r));
        v
    }

    #[test]
    fn contiguous_copy_splits_at_64k() {
        let s = shape(0, 4, &[(4, 40000)], None);
        let d = shape(1 << 20, 4, &[(4, 40000)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None), 4);
        assert_eq!(r.len(), 3);
        assert_eq!(
            r[0],
            Run {
                src: 0,
                dst: 1 << 20,
                len: 65536
            }
        );
        assert_eq!(r[2].len, 160000 - 2 * 65536);
    }

    #[test]
    fn adjacent_indices_collapse_and_invalid_ones_move_nothing() {
        let s = shape(0, 4, &[(256, 4), (4, 64)], Some(0));
        let d = shape(1 << 20, 4, &[(4, 256)], None);
        let bases = IndexedBases {
            addrs: vec![5 * 256, 6 * 256, 99 * 256, 7 * 256],
            valid: vec![true, true, true, false],
        };
        let r = runs(
            &mut Walker::new(&s, Some(&bases)),
            &mut Walker::new(&d, None),
            4,
        );
        assert_eq!(
            r,
            vec![
                Run {
                    src: 1280,
                    dst: 1 << 20,
                    len: 512
                },
                Run {
                    src: 99 * 256,
                    dst: (1 << 20) + 512,
                    len: 256
                },
            ]
        );
    }

    #[test]
    fn strided_sides_cut_at_both_boundaries() {
        // src rows of 3 elements, dst rows of 2 elements: cuts at 2,3,4,6 -> runs 2,1,1,2
        let s = shape(0, 1, &[(100, 2), (1, 3)], None);
        let d = shape(1000, 1, &[(10, 3), (1, 2)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None), 1);
        let lens: Vec<u64> = r.iter().map(|r| r.len).collect();
        assert_eq!(lens, vec![2, 1, 1, 2]);
        assert_eq!(
            r[1],
            Run {
                src: 2,
                dst: 1010,
                len: 1
            }
        );
    }

    #[test]
    fn runs_never_cross_a_partition() {
        // two SBUF partitions laid back to back (v4: 256 KiB == stride)
        let s = shape(SBUF_BASE, 4, &[(SBUF_STRIDE as i64, 2), (4, 65536)], None);
        let d = shape(0, 4, &[(4, 131072)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None), 4);
        assert_eq!(r.len(), 8);
        assert!(r
            .iter()
            .all(|r| region_slot(r.src) == region_slot(r.src + r.len - 1)));
    }
}
