//! The descriptor loop's core: walk the source and destination patterns in lockstep
//! (element order), cut them into joint pieces, and merge consecutive pieces into maximal
//! runs that are contiguous in both, never across a fabric region, split at 64 KiB.
//!
//! Each side is a [`Walker`]: an odometer over the reshaped dimensions that yields
//! pieces — a whole innermost row when the innermost dimension is contiguous, else one
//! element. Along an indirection dimension a piece's base comes from the per-index
//! addresses `do_indirection` computed, and a piece whose index failed its bound check is
//! marked invalid: it moves nothing, on either side. Under the fill policy a source piece
//! moves its first `moved` elements and the rest become FILL runs (destination only).
//!
//! [`for_each_run`] merges as far as contiguity allows; [`for_each_unit_run`] never merges
//! across a unit boundary (every `unit` elements in element order) and does not split, for
//! the sequential ordering of [`crate::order`].

use crate::reshape::Reshaped;
use dma::addr::region_slot;
use dma::descriptor::MAX_DESCRIPTOR_LEN;

/// Most bytes one descriptor moves.
pub const MAX_RUN_BYTES: u64 = MAX_DESCRIPTOR_LEN as u64;

/// One contiguous move of `len` bytes from `src` to `dst`, or, with `fill`, a FILL of
/// `len` bytes at `dst` with the element `src`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Run {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
    pub fill: bool,
}

impl Run {
    /// A move of `len` bytes.
    pub fn copy(src: u64, dst: u64, len: u64) -> Run {
        Run {
            src,
            dst,
            len,
            fill: false,
        }
    }

    /// The byte range the run reads (`None` for a fill).
    pub fn read_range(&self) -> Option<(u64, u64)> {
        (!self.fill).then_some((self.src, self.src + self.len))
    }
}

/// The fill policy's per-position share of each row: `moved[k]` leading elements of
/// position `k`'s row move, the rest of the row is written with `value`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowFill {
    pub value: u32,
    pub moved: Vec<u64>,
}

/// Per-index-position base addresses and bound-check results (`do_indirection`'s output).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IndexedBases {
    /// `start + index * indirection_step` per index position.
    pub addrs: Vec<u64>,
    /// Whether the index at each position passed its bound check.
    pub valid: Vec<bool>,
    /// The fill policy's shares (`None` under the other policies).
    pub fill: Option<RowFill>,
}

/// A piece of one side: `elems` elements at `addr`, of which the first `moved` move; the
/// rest are filled (`fill`) or skipped.
#[derive(Clone, Copy)]
struct Piece {
    addr: u64,
    elems: u64,
    moved: u64,
    fill: bool,
}

/// What the leading elements of a piece do.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Seg {
    Move,
    Fill,
    Skip,
}

impl Piece {
    /// The kind of the piece's leading segment and its length in elements.
    #[inline]
    fn head(&self) -> (Seg, u64) {
        match (self.moved, self.fill) {
            (0, true) => (Seg::Fill, self.elems),
            (0, false) => (Seg::Skip, self.elems),
            (m, _) => (Seg::Move, m),
        }
    }

    #[inline]
    fn consume(&mut self, n: u64, elem: u64) {
        self.elems -= n;
        self.moved = self.moved.saturating_sub(n);
        self.addr = self.addr.wrapping_add(n * elem);
    }
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
        let elems = self.piece_elems;
        let (base, moved, fill) = match (self.ind, self.bases) {
            // Walker::new's contract: bases has one entry per indirection position.
            (Some(k), Some(b)) => {
                let i = self.idx[k] as usize;
                let base = b.addrs.get(i).copied().unwrap_or(0);
                match &b.fill {
                    Some(f) => (base, f.moved.get(i).map_or(0, |&m| m.min(elems)), true),
                    None => (
                        base,
                        if b.valid.get(i) == Some(&true) {
                            elems
                        } else {
                            0
                        },
                        false,
                    ),
                }
            }
            (Some(_), None) => (self.start, 0, false),
            (None, _) => (self.start, elems, false),
        };
        let addr = base.wrapping_add(self.offset);
        self.advance();
        Some(Piece {
            addr,
            elems,
            moved,
            fill,
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

/// Walks both sides in lockstep, cutting at every `unit` elements, and calls `f` with
/// the element index and the run of every joint piece that moves or fills. The two sides
/// must have equal element counts (validated upstream); `fill` is the fill element.
#[inline]
fn joint_pieces(
    src: &mut Walker,
    dst: &mut Walker,
    (elem, unit, fill): (u64, u64, u32),
    mut f: impl FnMut(u64, Run),
) {
    // `left`: elements to the next unit boundary (counted down, no division per piece).
    let (mut e, mut left) = (0u64, unit);
    let (mut s, mut d) = (src.next_piece(), dst.next_piece());
    while let (Some(sp), Some(dp)) = (s.as_mut(), d.as_mut()) {
        let ((sk, sn), (dk, dn)) = (sp.head(), dp.head());
        let n = sn.min(dn).min(left);
        left = match left - n {
            0 => unit,
            l => l,
        };
        match (sk, dk) {
            (Seg::Move, Seg::Move) => f(e, Run::copy(sp.addr, dp.addr, n * elem)),
            (Seg::Fill, Seg::Move) => f(
                e,
                Run {
                    src: u64::from(fill),
                    dst: dp.addr,
                    len: n * elem,
                    fill: true,
                },
            ),
            _ => {}
        }
        e += n;
        sp.consume(n, elem);
        dp.consume(n, elem);
        if sp.elems == 0 {
            s = src.next_piece();
        }
        if dp.elems == 0 {
            d = dst.next_piece();
        }
    }
}

/// The fill element of a source side's indexed bases (0 without the fill policy).
fn fill_value(src: &Walker) -> u32 {
    src.bases
        .and_then(|b| b.fill.as_ref())
        .map_or(0, |f| f.value)
}

/// Walks both sides in lockstep and calls `emit` for every maximal run, split at
/// [`MAX_RUN_BYTES`]. The two sides must have equal element counts (validated upstream).
pub fn for_each_run(src: &mut Walker, dst: &mut Walker, elem: u64, mut emit: impl FnMut(Run)) {
    let mut cur: Option<Run> = None;
    let fill = fill_value(src);
    joint_pieces(src, dst, (elem, u64::MAX, fill), |_, r| {
        extend_or_flush(&mut cur, r, &mut emit)
    });
    if let Some(run) = cur {
        split(run, &mut emit);
    }
}

/// As [`for_each_run`], but runs never merge across a unit boundary (every `unit`
/// elements, `unit >= 1`) and are not split: `emit` gets each run with its unit number.
pub fn for_each_unit_run(
    src: &mut Walker,
    dst: &mut Walker,
    (elem, unit): (u64, u64),
    mut emit: impl FnMut(u64, Run),
) {
    let mut cur: Option<(u64, Run)> = None;
    let fill = fill_value(src);
    joint_pieces(src, dst, (elem, unit, fill), |e, r| {
        let u = e / unit;
        match &mut cur {
            Some((cu, run)) if *cu == u && joins(run, &r) => run.len += r.len,
            _ => {
                if let Some((cu, run)) = cur.replace((u, r)) {
                    emit(cu, run);
                }
            }
        }
    });
    if let Some((u, run)) = cur {
        emit(u, run);
    }
}

/// Whether `next` continues `run` on both sides in the same regions (a fill only on the
/// destination, with the same element).
#[inline]
pub fn joins(run: &Run, next: &Run) -> bool {
    let dst =
        run.dst.wrapping_add(run.len) == next.dst && region_slot(run.dst) == region_slot(next.dst);
    let src = match (run.fill, next.fill) {
        (false, false) => {
            run.src.wrapping_add(run.len) == next.src
                && region_slot(run.src) == region_slot(next.src)
        }
        (true, true) => run.src == next.src,
        _ => false,
    };
    dst && src
}

/// Extends `cur` with `next` when they join, else emits `cur` (split) and starts `next`.
#[inline]
pub fn extend_or_flush(cur: &mut Option<Run>, next: Run, emit: &mut impl FnMut(Run)) {
    if let Some(run) = cur {
        if joins(run, &next) {
            run.len += next.len;
            return;
        }
        split(*run, emit);
    }
    *cur = Some(next);
}

/// Emits `run` in pieces of at most [`MAX_RUN_BYTES`] (a fill keeps its element).
#[inline]
pub fn split(run: Run, emit: &mut impl FnMut(Run)) {
    let mut off = 0;
    while off < run.len {
        let len = (run.len - off).min(MAX_RUN_BYTES);
        emit(Run {
            src: if run.fill { run.src } else { run.src + off },
            dst: run.dst + off,
            len,
            fill: run.fill,
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
        assert_eq!(r[0], Run::copy(0, 1 << 20, 65536));
        assert_eq!(r[2].len, 160000 - 2 * 65536);
    }

    #[test]
    fn adjacent_indices_collapse_and_invalid_ones_move_nothing() {
        let s = shape(0, 4, &[(256, 4), (4, 64)], Some(0));
        let d = shape(1 << 20, 4, &[(4, 256)], None);
        let bases = IndexedBases {
            addrs: vec![5 * 256, 6 * 256, 99 * 256, 7 * 256],
            valid: vec![true, true, true, false],
            fill: None,
        };
        let r = runs(
            &mut Walker::new(&s, Some(&bases)),
            &mut Walker::new(&d, None),
            4,
        );
        assert_eq!(
            r,
            vec![
                Run::copy(1280, 1 << 20, 512),
                Run::copy(99 * 256, (1 << 20) + 512, 256),
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
        assert_eq!(r[1], Run::copy(2, 1010, 1));
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
