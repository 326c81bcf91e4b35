//! The descriptor loop's fast path for the shape most requests have: whole rows moved by
//! index (a row gather, a row scatter, or both at once) or between row-strided sides (an
//! SBUF tile's partitions to HBM rows and back), one contiguous row per position on each
//! side.
//!
//! [`RowMove::of`] recognises the shape from the two reshaped sides: each side is
//! *indexed* (the indirection dimension outermost, then at most one contiguous row),
//! *consecutive* (one contiguous dimension holding the rows back to back) or *strided*
//! (rows a fixed non-negative stride apart: an outer dimension over one contiguous row, or
//! one dimension of single elements), not both sides consecutive, no fill policy, rows of
//! equal length of at most one descriptor.
//! [`RowMove::for_each_run`] then yields, position by position, the row of every position
//! whose index passed its bound check on both sides, merged with the previous run exactly
//! as [`crate::runs::for_each_run`] merges (contiguous on both sides in the same regions,
//! filled to [`MAX_RUN_BYTES`] and continued in the next run): the same runs, in the same
//! order, without the odometers and the piece cutting. Any other shape takes the general
//! walk, which is this path's differential reference (see the tests).

use crate::reshape::Reshaped;
use crate::runs::{joins, Hull, IndexedBases, Run, MAX_RUN_BYTES};
use dma::{Block, Descriptor};

/// One side of the shape, as [`side`] finds it.
#[derive(Clone, Copy, Debug)]
enum Side<'a> {
    /// Rows back to back from `start`, `bytes` in all.
    Consecutive { start: u64, bytes: u64 },
    /// `rows` rows of `row` bytes from `start`, `stride` bytes apart.
    Strided {
        start: u64,
        rows: u64,
        row: u64,
        stride: u64,
    },
    /// `rows` rows of `row` bytes at the per-index addresses of `bases`; a position moves
    /// only where its index is valid.
    Indexed {
        rows: u64,
        row: u64,
        bases: &'a IndexedBases,
    },
}

/// Which sides of a row move are indexed, with where the rows of a side that is not
/// indexed start and how far apart they lie (a [`Rows`]).
#[derive(Clone, Copy, Debug)]
enum Sides<'a> {
    /// Indexed rows gathered into plain ones.
    Gather(&'a IndexedBases, Rows),
    /// Plain rows scattered to indexed ones.
    Scatter(Rows, &'a IndexedBases),
    /// Indexed rows to indexed rows.
    Both(&'a IndexedBases, &'a IndexedBases),
    /// Plain rows to plain rows.
    Copy(Rows, Rows),
}

/// Rows of a side that is not indexed: the first at `start`, each `stride` bytes after
/// the one before.
#[derive(Clone, Copy, Debug)]
struct Rows {
    start: u64,
    stride: u64,
}

impl Rows {
    /// The address of every row of `n`.
    #[inline(always)]
    fn addrs(self, n: usize) -> impl Iterator<Item = Option<u64>> {
        (0..n as u64).map(move |i| Some(self.start.wrapping_add(i.wrapping_mul(self.stride))))
    }

    /// `[lo, hi)` around `n` rows of `row` bytes.
    fn hull(self, n: usize, row: u64) -> Hull {
        match (n as u64).checked_sub(1) {
            None => Hull::EMPTY,
            Some(last) => {
                let end = self.start.wrapping_add(last.wrapping_mul(self.stride));
                Hull::new(self.start, end.wrapping_add(row))
            }
        }
    }
}

/// Where [`RowMove::for_each_run`] hands its runs (a trait rather than a closure so that
/// the consumer inlines into the loop; any `FnMut(Run)` is one).
pub trait RunSink {
    fn run(&mut self, r: Run);
}

impl<F: FnMut(Run)> RunSink for F {
    #[inline(always)]
    fn run(&mut self, r: Run) {
        self(r)
    }
}

/// A request of the row-move shape (module docs): `rows` positions of `row` bytes.
#[derive(Clone, Copy, Debug)]
pub struct RowMove<'a> {
    sides: Sides<'a>,
    rows: usize,
    row: u64,
}

/// One side, if it has the shape.
fn side<'a>(p: &Reshaped, bases: Option<&'a IndexedBases>) -> Option<Side<'a>> {
    let elem = u64::from(p.elem_size);
    let contiguous = |k: usize| p.dims.get(k).filter(|d| d.step == elem as i64);
    match (p.indirect_dim, bases) {
        (None, None) if p.dims.len() == 1 && contiguous(0).is_some() => {
            let bytes = contiguous(0)?.count.checked_mul(elem)?;
            Some(Side::Consecutive {
                start: p.start,
                bytes,
            })
        }
        (None, None) if (1..=2).contains(&p.dims.len()) => {
            let outer = p.dims.first()?;
            let row = match p.dims.len() {
                1 => elem,
                _ => contiguous(1)?.count.checked_mul(elem)?,
            };
            Some(Side::Strided {
                start: p.start,
                rows: outer.count,
                row,
                stride: u64::try_from(outer.step).ok()?,
            })
        }
        (Some(0), Some(b)) if b.fill.is_none() && (1..=2).contains(&p.dims.len()) => {
            let row = match p.dims.len() {
                1 => elem,
                _ => contiguous(1)?.count.checked_mul(elem)?,
            };
            let rows = p.dims.first()?.count;
            let fits = b.addrs.len() as u64 == rows && b.valid.len() as u64 == rows;
            fits.then_some(Side::Indexed {
                rows,
                row,
                bases: b,
            })
        }
        _ => None,
    }
}

/// `[lo, hi)` around the valid rows of `row` bytes at `bases` (their span). Rows end
/// inside the fabric (validated), so the end does not wrap.
fn indexed_hull(bases: &IndexedBases, row: u64) -> Hull {
    bases
        .span
        .map_or(Hull::EMPTY, |(lo, hi)| Hull::new(lo, hi.wrapping_add(row)))
}

impl<'a> RowMove<'a> {
    /// The row move of the two sides (each with its bases, if indexed), or `None` when the
    /// request has another shape.
    pub fn of(
        (src, src_bases): (&Reshaped, Option<&'a IndexedBases>),
        (dst, dst_bases): (&Reshaped, Option<&'a IndexedBases>),
    ) -> Option<RowMove<'a>> {
        let (from, to) = (side(src, src_bases)?, side(dst, dst_bases)?);
        // the rows of a side, given the other's (a consecutive side holds exactly them)
        let plain = |s: Side, rows: u64, row: u64| match s {
            Side::Consecutive { start, bytes } if rows.checked_mul(row) == Some(bytes) => {
                Some(Rows { start, stride: row })
            }
            Side::Strided {
                start,
                rows: r,
                row: w,
                stride,
            } if (r, w) == (rows, row) => Some(Rows { start, stride }),
            _ => None,
        };
        let (rows, row, sides) = match (from, to) {
            (Side::Indexed { rows, row, bases }, d) => match d {
                Side::Indexed {
                    rows: d_rows,
                    row: d_row,
                    bases: d_bases,
                } if (d_rows, d_row) == (rows, row) => (rows, row, Sides::Both(bases, d_bases)),
                d => (rows, row, Sides::Gather(bases, plain(d, rows, row)?)),
            },
            (s, Side::Indexed { rows, row, bases }) => {
                (rows, row, Sides::Scatter(plain(s, rows, row)?, bases))
            }
            (Side::Strided { rows, row, .. }, _) | (_, Side::Strided { rows, row, .. }) => (
                rows,
                row,
                Sides::Copy(plain(from, rows, row)?, plain(to, rows, row)?),
            ),
            _ => return None,
        };
        let ok = src.elem_size == dst.elem_size && (1..=MAX_RUN_BYTES).contains(&row);
        ok.then_some(RowMove {
            sides,
            rows: usize::try_from(rows).ok()?,
            row,
        })
    }

    /// `[lo, hi)` around every byte read and around every byte written (a superset of
    /// them: a consecutive side's skipped rows are inside).
    pub fn hulls(&self) -> (Hull, Hull) {
        let (rows, row) = (self.rows, self.row);
        match self.sides {
            Sides::Gather(s, d) => (indexed_hull(s, row), d.hull(rows, row)),
            Sides::Scatter(s, d) => (s.hull(rows, row), indexed_hull(d, row)),
            Sides::Both(s, d) => (indexed_hull(s, row), indexed_hull(d, row)),
            Sides::Copy(s, d) => (s.hull(rows, row), d.hull(rows, row)),
        }
    }

    /// Hands `sink` every maximal run, in order (module docs), and returns the bytes
    /// they move. One loop per kind of sides (gather, scatter, both or neither indexed),
    /// so that neither side's kind is looked at per position.
    #[inline(always)]
    pub fn for_each_run(&self, sink: &mut impl RunSink) -> u64 {
        let (rows, row) = (self.rows, self.row);
        let indexed = |b: &'a IndexedBases| {
            b.addrs
                .iter()
                .zip(&b.valid)
                .map(|(&a, &ok)| ok.then_some(a))
        };
        match self.sides {
            Sides::Gather(s, d) => merge_rows(indexed(s), d.addrs(rows), row, sink),
            Sides::Scatter(s, d) => merge_rows(s.addrs(rows), indexed(d), row, sink),
            Sides::Both(s, d) => merge_rows(indexed(s), indexed(d), row, sink),
            Sides::Copy(s, d) => merge_rows(s.addrs(rows), d.addrs(rows), row, sink),
        }
    }
}

impl Rows {
    /// The block side of these rows.
    fn block_side(self) -> dma::Rows {
        dma::Rows::Strided {
            start: self.start,
            stride: self.stride,
        }
    }
}

/// A row move that is one [`Block`] ([`RowMove::block`]): its rows' descriptor (at row
/// 0), its rows, and its sides, a gather's source (`None`) being its bases' addresses.
#[derive(Clone, Debug)]
pub struct BlockShape {
    pub template: Descriptor,
    pub rows: usize,
    pub src: Option<dma::Rows>,
    pub dst: dma::Rows,
}

impl BlockShape {
    /// The block, dealt over `deal`, a gather's source rows at `listed` (its bases'
    /// addresses).
    pub fn block(
        self,
        deal: &[u8],
        listed: impl FnOnce() -> Vec<u64>,
    ) -> Result<Block, dma::Error> {
        let src = self.src.unwrap_or_else(|| dma::Rows::Listed(listed()));
        Block::new(self.template, self.rows, src, self.dst, deal.to_vec())
    }
}

impl RowMove<'_> {
    /// The move's shape as one block, where each row is one run: a gather whose indices
    /// all passed, or a copy between plain sides, no two consecutive rows merging; each
    /// row's descriptor is `describe`'s of its run (`None` if it refuses). Dealt
    /// round-robin ([`BlockShape::block`]), the block expands to the runs
    /// [`RowMove::for_each_run`] yields.
    pub fn block(&self, describe: impl Fn(Run) -> Option<Descriptor>) -> Option<BlockShape> {
        let row = self.row;
        // Two rows merge only where both sides continue: a gather's consecutive
        // destinations and indexed rows (then `joins` decides), or a copy's consecutive
        // sides (left to the descriptor loop).
        let (src, first, dst) = match self.sides {
            Sides::Gather(b, d) => {
                let run =
                    |i: usize, s: u64| Run::copy(s, d.start.wrapping_add(i as u64 * row), row);
                let merges = |(i, w): (usize, &[u64])| match *w {
                    [a, b] => b == a.wrapping_add(row) && joins(&run(i, a), &run(i + 1, b)),
                    _ => false,
                };
                // (the plain scans first: folds without an early exit, they vectorise)
                let valid = b.valid.iter().fold(true, |all, &ok| all & ok);
                let next = b.addrs.get(1..).unwrap_or_default();
                let follows = |any, (&a, &b): (&u64, &u64)| any | (b == a.wrapping_add(row));
                let near = || b.addrs.iter().zip(next).fold(false, follows);
                let merging = || near() && b.addrs.windows(2).enumerate().any(merges);
                if !valid || (d.stride == row && merging()) {
                    return None;
                }
                let first = b.addrs.first().copied()?;
                (None, first, d.block_side())
            }
            Sides::Copy(s, d) if (s.stride, d.stride) != (row, row) => {
                (Some(s.block_side()), s.start, d.block_side())
            }
            _ => return None,
        };
        let template = describe(Run::copy(first, dst.addr(0), row))?;
        Some(BlockShape {
            template,
            rows: self.rows,
            src,
            dst,
        })
    }
}

/// The runs of rows of `row` bytes from `src` to `dst`, position by position (`None`
/// where a side's index failed), merged as [`crate::runs::for_each_run`] merges; the bytes
/// moved.
#[inline(always)]
fn merge_rows(
    src: impl Iterator<Item = Option<u64>>,
    dst: impl Iterator<Item = Option<u64>>,
    row: u64,
    sink: &mut impl RunSink,
) -> u64 {
    let mut moved = 0u64;
    // The open run as three scalars, `len == 0` while none is (every row has bytes):
    // kept as a `Run`, it was copied through the stack field by field and read back
    // whole for the sink, a stalled store forward per run (and as an `Option`, byte
    // by byte). Row moves never fill.
    let (mut src_at, mut dst_at, mut len) = (0u64, 0u64, 0u64);
    for (s, d) in src.zip(dst) {
        let (Some(mut s), Some(mut d)) = (s, d) else {
            continue;
        };
        moved += 1;
        let mut n = row;
        // The merge of `runs::Merger::piece`, written out: one shared helper (tried
        // with an `Option` or an empty `Run` for "all went in") cost 12 to 24 more
        // instructions per descriptor under callgrind. The differential proptest below
        // keeps the two equal.
        if len > 0 {
            if joins(&Run::copy(src_at, dst_at, len), &Run::copy(s, d, n)) {
                let room = MAX_RUN_BYTES - len;
                if n <= room {
                    len += n;
                    continue;
                }
                len = MAX_RUN_BYTES;
                (s, d, n) = (s + room, d + room, n - room);
            }
            sink.run(Run::copy(src_at, dst_at, len));
        }
        (src_at, dst_at, len) = (s, d, n);
    }
    if len > 0 {
        sink.run(Run::copy(src_at, dst_at, len));
    }
    moved * row
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runs::tests::shape;
    use crate::runs::{for_each_run, Walker};
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};
    use proptest::prelude::*;

    fn bases(addrs: Vec<u64>, valid: Vec<bool>) -> IndexedBases {
        IndexedBases::unfilled(addrs, valid)
    }

    /// The runs of the general walk over the same sides.
    fn walked(
        (s, sb): (&Reshaped, Option<&IndexedBases>),
        (d, db): (&Reshaped, Option<&IndexedBases>),
    ) -> Vec<Run> {
        let mut v = Vec::new();
        for_each_run(&mut Walker::new(s, sb), &mut Walker::new(d, db), |r| {
            v.push(r)
        });
        v
    }

    /// The fast path's runs, checked against the bytes it reports and its hulls.
    fn fast(m: &RowMove) -> Vec<Run> {
        let mut v = Vec::new();
        let bytes = m.for_each_run(&mut |r| v.push(r));
        assert_eq!(bytes, v.iter().map(|r| r.len).sum::<u64>());
        let (src, dst) = m.hulls();
        for r in &v {
            assert!(
                src.holds(r.src, r.len),
                "{r:?} outside the source hull {src:?}"
            );
            assert!(
                dst.holds(r.dst, r.len),
                "{r:?} outside the destination hull {dst:?}"
            );
        }
        v
    }

    #[test]
    fn a_gather_merges_adjacent_rows_and_skips_invalid_ones() {
        let s = shape(0, 4, &[(256, 4), (4, 64)], Some(0));
        let d = shape(1 << 20, 4, &[(4, 256)], None);
        let b = bases(
            vec![5 * 256, 6 * 256, 99 * 256, 7 * 256],
            vec![true, true, true, false],
        );
        let m = RowMove::of((&s, Some(&b)), (&d, None)).expect("a row gather");
        let want = vec![
            Run::copy(1280, 1 << 20, 512),
            Run::copy(99 * 256, (1 << 20) + 512, 256),
        ];
        assert_eq!(fast(&m), want);
        assert_eq!(walked((&s, Some(&b)), (&d, None)), want);
    }

    #[test]
    fn rows_fill_a_descriptor_then_continue_in_the_next() {
        // 3 adjacent rows of 40000 bytes: 65536, then 54464 (of rows 2 and 3)
        let s = shape(0, 4, &[(40000, 3), (4, 10000)], Some(0));
        let d = shape(1 << 24, 4, &[(4, 30000)], None);
        let b = bases(vec![0, 40000, 80000], vec![true; 3]);
        let m = RowMove::of((&s, Some(&b)), (&d, None)).unwrap();
        assert_eq!(fast(&m), walked((&s, Some(&b)), (&d, None)));
        assert_eq!(fast(&m).len(), 2);
        assert_eq!(fast(&m)[0].len, MAX_RUN_BYTES);
    }

    #[test]
    fn runs_do_not_merge_across_a_partition() {
        let row = 1024u64;
        let s = shape(0, 4, &[(1024, 2), (4, 256)], Some(0));
        let d = shape(SBUF_BASE + SBUF_STRIDE - row, 4, &[(4, 512)], None);
        let b = bases(vec![0, row], vec![true; 2]);
        let m = RowMove::of((&s, Some(&b)), (&d, None)).unwrap();
        assert_eq!(
            fast(&m).len(),
            2,
            "the destination crosses into partition 1"
        );
        assert_eq!(fast(&m), walked((&s, Some(&b)), (&d, None)));
    }

    #[test]
    fn other_shapes_take_the_general_walk() {
        let b = bases(vec![0; 4], vec![true; 4]);
        let rows = shape(0, 4, &[(256, 4), (4, 64)], Some(0));
        let flat = shape(1 << 20, 4, &[(4, 256)], None);
        let strided = shape(1 << 20, 4, &[(8, 256)], None);
        let short = shape(1 << 20, 4, &[(4, 255)], None);
        let two_d = shape(1 << 20, 4, &[(512, 4), (4, 64)], None);
        let inner_indexed = shape(0, 4, &[(4, 64), (256, 4)], Some(1));
        assert!(RowMove::of((&rows, Some(&b)), (&flat, None)).is_some());
        assert!(RowMove::of((&rows, Some(&b)), (&two_d, None)).is_some());
        assert!(RowMove::of((&two_d, None), (&flat, None)).is_some());
        assert!(
            RowMove::of((&rows, Some(&b)), (&strided, None)).is_none(),
            "256 rows of 4 bytes against 4 of 256"
        );
        assert!(RowMove::of((&rows, Some(&b)), (&short, None)).is_none());
        let backward = shape(1 << 20, 4, &[(-512, 4), (4, 64)], None);
        assert!(RowMove::of((&rows, Some(&b)), (&backward, None)).is_none());
        assert!(RowMove::of((&inner_indexed, Some(&b)), (&flat, None)).is_none());
        assert!(
            RowMove::of((&flat, None), (&flat, None)).is_none(),
            "no index"
        );
        let mut filled = b.clone();
        filled.fill = Some(Default::default());
        assert!(RowMove::of((&rows, Some(&filled)), (&flat, None)).is_none());
    }

    /// Rows of `row_elems` 4-byte elements at random (often adjacent) addresses.
    fn arb_indexed(n: usize) -> impl Strategy<Value = (Vec<u64>, Vec<bool>)> {
        (
            prop::collection::vec((0u64..6, any::<bool>()), n),
            prop::collection::vec(prop::bool::weighted(0.85), n),
        )
            .prop_map(|(picks, valid)| {
                let mut at = 0u64;
                let addrs = picks
                    .into_iter()
                    .map(|(row, next)| {
                        at = if next { at + 1 } else { row };
                        at
                    })
                    .collect();
                (addrs, valid)
            })
    }

    proptest! {
        /// Random gathers, scatters, both-sided and plain moves (adjacent and repeated
        /// rows, invalid positions, rows up to 32 KiB, plain sides consecutive, at a
        /// partition's end or strided, a partition apart among them): the fast path gives
        /// the general walk's runs exactly.
        #[test]
        fn the_fast_path_gives_the_walk_s_runs(
            n in 1usize..40,
            row_elems in prop::sample::select(vec![1u64, 2, 64, 3000, 8192]),
            mode in 0u8..4,
            (sa, sv) in arb_indexed(40),
            (da, dv) in arb_indexed(40),
            at_partition_end in any::<bool>(),
            plain in (0u8..5, 0u8..5),
        ) {
            let row = row_elems * 4;
            let rows_side = |start: u64| match row_elems {
                1 => shape(start, 4, &[(row as i64, n as u64)], Some(0)),
                _ => shape(start, 4, &[(row as i64, n as u64), (4, row_elems)], Some(0)),
            };
            let flat_at = match at_partition_end {
                true => SBUF_BASE + SBUF_STRIDE - row,
                false => 1 << 30,
            };
            let flat = shape(flat_at, 4, &[(4, n as u64 * row_elems)], None);
            // a plain side: consecutive, or rows `stride` apart (an SBUF partition apart
            // from partition 0, or in HBM)
            let plain_side = |kind: u8, hbm: u64| {
                let (start, stride) = match kind {
                    1 => (hbm, row),
                    2 => (hbm, row + 4),
                    3 => (SBUF_BASE, SBUF_STRIDE),
                    _ => (hbm, 0),
                };
                match (kind, row_elems) {
                    (0, _) => flat.clone(),
                    (_, 1) => shape(start, 4, &[(stride as i64, n as u64)], None),
                    _ => shape(start, 4, &[(stride as i64, n as u64), (4, row_elems)], None),
                }
            };
            let (ps, pd) = (plain_side(plain.0, 1 << 34), plain_side(plain.1, 1 << 35));
            let to_bases = |a: &[u64], v: &[bool], base: u64| {
                bases(a[..n].iter().map(|r| base + r * row).collect(), v[..n].to_vec())
            };
            let sb = to_bases(&sa, &sv, 0);
            let db = to_bases(&da, &dv, 1 << 32);
            let (s, d) = (rows_side(0), rows_side(1 << 32));
            let (src, dst) = match mode {
                0 => ((&s, Some(&sb)), (&pd, None)),
                1 => ((&ps, None), (&d, Some(&db))),
                2 => ((&s, Some(&sb)), (&d, Some(&db))),
                _ => ((&ps, None), (&pd, None)),
            };
            let consecutive = |kind: u8| kind == 0 || (kind == 1 && row_elems == 1);
            let both_consecutive = mode == 3 && consecutive(plain.0) && consecutive(plain.1);
            match RowMove::of(src, dst) {
                Some(m) => prop_assert_eq!(fast(&m), walked(src, dst)),
                None => prop_assert!(both_consecutive, "not a row move"),
            }
        }
    }
}
