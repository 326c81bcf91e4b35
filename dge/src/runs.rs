//! The descriptor loop's core: walk the source and destination patterns in lockstep
//! (element order), cut them into joint pieces, and merge consecutive pieces into maximal
//! runs that are contiguous in both, never across a fabric region, split at 64 KiB.
//!
//! The walk counts elements, and each side turns its element counts into bytes by its own
//! element size: where the two differ (a cast) a run of `n` elements is `n * src_size`
//! source bytes and `n * dst_size` destination bytes ([`Scale`]), and the 64 KiB split
//! holds for the longer side.
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

/// How a run's source bytes follow from its destination bytes: the sides' element sizes
/// (1, 2, 4 or 8 bytes) as `log2(src size) - log2(dst size)`, 0 (the same bytes) unless the
/// request casts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Scale(i8);

impl Scale {
    /// Both sides move the same bytes.
    pub const SAME: Scale = Scale(0);

    /// The scale between a source of `src` and a destination of `dst` bytes per element
    /// (powers of two).
    pub fn of(src: u64, dst: u64) -> Scale {
        Scale(src.trailing_zeros() as i8 - dst.trailing_zeros() as i8)
    }

    /// The source bytes of `len` destination bytes (whole destination elements).
    #[inline(always)]
    pub fn source(self, len: u64) -> u64 {
        match self.0 >= 0 {
            true => len << self.0,
            false => len >> -self.0,
        }
    }

    /// The most destination bytes of one run: neither side over [`MAX_RUN_BYTES`].
    #[inline(always)]
    pub fn max_len(self) -> u64 {
        MAX_RUN_BYTES >> self.0.max(0)
    }
}

/// One contiguous move of `len` destination bytes from `src` to `dst` (the source's bytes
/// by `scale`), or, with `fill`, a FILL of `len` bytes at `dst` with the element `src`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Run {
    pub src: u64,
    pub dst: u64,
    pub len: u64,
    pub fill: bool,
    /// The source's bytes per destination byte ([`Scale::SAME`] for a fill).
    pub scale: Scale,
}

impl Run {
    /// A move of `len` bytes.
    #[inline(always)]
    pub fn copy(src: u64, dst: u64, len: u64) -> Run {
        Run::cast(src, dst, len, Scale::SAME)
    }

    /// A move of `len` destination bytes whose source bytes follow by `scale`.
    #[inline(always)]
    pub fn cast(src: u64, dst: u64, len: u64, scale: Scale) -> Run {
        Run {
            src,
            dst,
            len,
            fill: false,
            scale,
        }
    }

    /// A FILL of `len` bytes at `dst` with `element`.
    #[inline(always)]
    pub fn fill(element: u32, dst: u64, len: u64) -> Run {
        Run {
            src: u64::from(element),
            dst,
            len,
            fill: true,
            scale: Scale::SAME,
        }
    }

    /// The source bytes the run reads (0 for a fill).
    #[inline(always)]
    pub fn src_len(&self) -> u64 {
        match self.fill {
            true => 0,
            false => self.scale.source(self.len),
        }
    }

    /// The run without its first `n` destination bytes (`n <= len`, whole elements; a
    /// fill keeps its element).
    #[inline(always)]
    pub fn advance(self, n: u64) -> Run {
        Run {
            src: if self.fill {
                self.src
            } else {
                self.src + self.scale.source(n)
            },
            dst: self.dst + n,
            len: self.len - n,
            ..self
        }
    }

    /// The byte range the run reads (`None` for a fill).
    pub fn read_range(&self) -> Option<(u64, u64)> {
        (!self.fill).then_some((self.src, self.src + self.src_len()))
    }

    /// The hulls of the bytes the run reads (empty for a fill) and writes. A run ends
    /// inside the fabric (validated), so its ends do not wrap.
    #[inline(always)]
    pub fn hulls(&self) -> (Hull, Hull) {
        let read = match self.fill {
            true => Hull::EMPTY,
            false => Hull::new(self.src, self.src.wrapping_add(self.src_len())),
        };
        (read, Hull::new(self.dst, self.dst.wrapping_add(self.len)))
    }
}

/// `[lo, hi)` around a set of byte ranges: what a request reads or writes, for the cheap
/// test of whether its reads and writes can meet at all.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hull {
    pub lo: u64,
    pub hi: u64,
}

impl Hull {
    /// The hull of no bytes (it meets nothing, and joining it changes nothing).
    pub const EMPTY: Hull = Hull {
        lo: u64::MAX,
        hi: 0,
    };

    pub fn new(lo: u64, hi: u64) -> Hull {
        Hull { lo, hi }
    }

    /// The hull of both.
    #[inline(always)]
    pub fn join(self, other: Hull) -> Hull {
        Hull::new(self.lo.min(other.lo), self.hi.max(other.hi))
    }

    /// Whether the two share a byte.
    pub fn meets(self, other: Hull) -> bool {
        self.lo < other.hi && other.lo < self.hi
    }

    /// Whether `[addr, addr + len)` lies inside (what the tests check hulls by).
    #[cfg(test)]
    pub(crate) fn holds(self, addr: u64, len: u64) -> bool {
        self.lo <= addr && addr.saturating_add(len) <= self.hi
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
    /// The lowest and the highest address of a valid position (`None`: none is valid).
    pub span: Option<(u64, u64)>,
}

impl IndexedBases {
    /// Bases without the fill policy, their span worked out (for tests).
    #[cfg(test)]
    pub(crate) fn unfilled(addrs: Vec<u64>, valid: Vec<bool>) -> IndexedBases {
        let valid_addrs = addrs.iter().zip(&valid).filter(|(_, &ok)| ok);
        let span = valid_addrs.fold(None, |span: Option<(u64, u64)>, (&a, _)| {
            Some(span.map_or((a, a), |(lo, hi)| (lo.min(a), hi.max(a))))
        });
        IndexedBases {
            addrs,
            valid,
            fill: None,
            span,
        }
    }
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
    #[inline(always)]
    fn head(&self) -> (Seg, u64) {
        match (self.moved, self.fill) {
            (0, true) => (Seg::Fill, self.elems),
            (0, false) => (Seg::Skip, self.elems),
            (m, _) => (Seg::Move, m),
        }
    }

    #[inline(always)]
    fn consume(&mut self, n: u64, elem: u64) {
        self.elems -= n;
        self.moved = self.moved.saturating_sub(n);
        self.addr = self.addr.wrapping_add(n * elem);
    }
}

/// Where a walker's pieces get their base address and how much of each moves.
#[derive(Clone, Copy)]
enum Bases<'a> {
    /// A direct side: every piece moves whole from `start + offset`.
    Direct,
    /// An indirection without its bases (a broken contract): nothing moves.
    Missing,
    /// Along odometer dimension `dim`, position `i` starts at `addrs[i]` and moves whole
    /// when `valid[i]`, else not at all.
    Rows {
        dim: usize,
        addrs: &'a [u64],
        valid: &'a [bool],
    },
    /// As `Rows`, with the fill policy's shares: the first `moved[i]` elements move and
    /// the rest are filled.
    Filled {
        dim: usize,
        addrs: &'a [u64],
        moved: &'a [u64],
    },
}

/// An odometer over one side's reshaped pattern. The byte offset of the direct
/// dimensions is kept up to date as the odometer turns (one add per step, one subtract per
/// wrap), so a piece costs a few adds whatever the rank.
pub struct Walker<'a> {
    start: u64,
    /// Bytes per element of this side.
    elem: u64,
    bases: Bases<'a>,
    /// The fill element of a filled side (0 otherwise).
    fill: u32,
    steps: [i64; 5],
    counts: [u64; 5],
    odo_dims: usize,
    piece_elems: u64,
    idx: [u64; 5],
    /// `sum(idx[k] * steps[k])` over the direct odometer dimensions.
    offset: u64,
    done: bool,
}

/// The odometer of `p`: how many of its dimensions it turns, and the elements of one
/// piece (a whole innermost row when that dimension is contiguous and direct, else one).
fn odometer_shape(p: &Reshaped) -> (usize, u64) {
    let n = p.dims.len().min(5);
    match n
        .checked_sub(1)
        .and_then(|last| Some((last, p.dims.get(last)?)))
    {
        Some((last, d)) if p.indirect_dim != Some(last) && d.step == i64::from(p.elem_size) => {
            (last, d.count)
        }
        _ => (n, 1),
    }
}

/// How many pieces a walker over `p` yields: the product of its odometer's counts
/// (saturating; the request caps it at [`MAX_PIECES`] before any walk).
pub fn piece_count(p: &Reshaped) -> u64 {
    let (odo_dims, _) = odometer_shape(p);
    p.dims
        .iter()
        .take(odo_dims)
        .fold(1u64, |n, d| n.saturating_mul(d.count))
}

/// The most pieces one side of a request may have ([`piece_count`]): what bounds the
/// descriptor loop's iterations and the descriptors it can emit (at most twice this many
/// runs, so a request's runs and descriptors stay within a few hundred MiB).
pub const MAX_PIECES: u64 = 1 << 22;

impl<'a> Walker<'a> {
    /// A walker over `p`; `bases` must be given exactly when `p` has an indirection dim,
    /// with one entry per position of that dimension.
    pub fn new(p: &'a Reshaped, bases: Option<&'a IndexedBases>) -> Walker<'a> {
        let (odo_dims, piece_elems) = odometer_shape(p);
        let (mut steps, mut counts) = ([0i64; 5], [1u64; 5]);
        for (k, d) in p.dims.iter().take(odo_dims).enumerate() {
            // along the indirection dimension the step comes from the indices
            steps[k] = if p.indirect_dim == Some(k) { 0 } else { d.step };
            counts[k] = d.count;
        }
        let dim = p.indirect_dim.filter(|&d| d < odo_dims);
        let (bases, fill) = match (dim, bases) {
            (None, _) => (Bases::Direct, 0),
            (Some(_), None) => (Bases::Missing, 0),
            (Some(dim), Some(b)) => match &b.fill {
                Some(f) => (
                    Bases::Filled {
                        dim,
                        addrs: &b.addrs,
                        moved: &f.moved,
                    },
                    f.value,
                ),
                None => (
                    Bases::Rows {
                        dim,
                        addrs: &b.addrs,
                        valid: &b.valid,
                    },
                    0,
                ),
            },
        };
        Walker {
            start: p.start,
            elem: u64::from(p.elem_size),
            bases,
            fill,
            steps,
            counts,
            odo_dims,
            piece_elems,
            idx: [0; 5],
            offset: 0,
            done: false,
        }
    }

    #[inline(always)]
    fn next_piece(&mut self) -> Option<Piece> {
        if self.done {
            return None;
        }
        let elems = self.piece_elems;
        let position = |dim: usize| self.idx.get(dim).map_or(0, |&i| i as usize);
        // Walker::new's contract: the bases have one entry per indirection position.
        let (base, moved, fill) = match self.bases {
            Bases::Direct => (self.start, elems, false),
            Bases::Missing => (self.start, 0, false),
            Bases::Rows { dim, addrs, valid } => {
                let i = position(dim);
                let ok = valid.get(i).copied().unwrap_or(false);
                (
                    addrs.get(i).copied().unwrap_or(0),
                    elems * u64::from(ok),
                    false,
                )
            }
            Bases::Filled { dim, addrs, moved } => {
                let i = position(dim);
                let m = moved.get(i).map_or(0, |&m| m.min(elems));
                (addrs.get(i).copied().unwrap_or(0), m, true)
            }
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

    #[inline(always)]
    fn advance(&mut self) {
        let dims = self.odo_dims.min(5);
        for k in (0..dims).rev() {
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

/// Where [`joint_pieces`] hands each joint piece that moves or fills (a trait rather
/// than a closure so that the whole descriptor loop inlines into one body).
trait PieceSink {
    /// The joint piece `r`, whose first element is element `e` in element order.
    fn piece(&mut self, e: u64, r: Run);
}

/// Walks both sides in lockstep, cutting at every `unit` elements, and hands `sink` the
/// element index and the run of every joint piece that moves or fills (its lengths by
/// each side's element size). The two sides must have equal element counts (validated
/// upstream); the fill element is the source's.
#[inline(always)]
fn joint_pieces(src: &mut Walker, dst: &mut Walker, unit: u64, sink: &mut impl PieceSink) {
    let (Some(mut sp), Some(mut dp)) = (src.next_piece(), dst.next_piece()) else {
        return;
    };
    let (fill, se, de) = (src.fill, src.elem, dst.elem);
    let scale = Scale::of(se, de);
    // `left`: elements to the next unit boundary (counted down, no division per piece).
    let (mut e, mut left) = (0u64, unit);
    loop {
        let uncut = unit == u64::MAX;
        if uncut && !pieces_inside(src, (&mut sp, &mut dp), (de, scale, fill), &mut e, sink) {
            return;
        }
        if dp.elems > 0 {
            let ((sk, sn), (dk, dn)) = (sp.head(), dp.head());
            let n = sn.min(dn).min(left);
            left = match left - n {
                0 => unit,
                l => l,
            };
            match (sk, dk) {
                (Seg::Move, Seg::Move) => sink.piece(e, Run::cast(sp.addr, dp.addr, n * de, scale)),
                (Seg::Fill, Seg::Move) => sink.piece(e, Run::fill(fill, dp.addr, n * de)),
                _ => {}
            }
            e += n;
            sp.consume(n, se);
            dp.consume(n, de);
        }
        if sp.elems == 0 {
            match src.next_piece() {
                Some(p) => sp = p,
                None => return,
            }
        }
        if dp.elems == 0 {
            match dst.next_piece() {
                Some(p) => dp = p,
                None => return,
            }
        }
    }
}

/// [`joint_pieces`]'s fast path without unit cuts (a gather into a contiguous buffer):
/// while the source piece is one segment that lies whole inside the destination piece,
/// which moves whole, it is the joint piece, and only the source walker turns. Returns
/// false once the source is done. `de` is the destination's element size.
#[inline(always)]
fn pieces_inside(
    src: &mut Walker,
    (sp, dp): (&mut Piece, &mut Piece),
    (de, scale, fill): (u64, Scale, u32),
    e: &mut u64,
    sink: &mut impl PieceSink,
) -> bool {
    while dp.moved == dp.elems && sp.elems <= dp.elems {
        let n = sp.elems;
        match (sp.moved, sp.fill) {
            (0, false) => {}
            (0, true) => sink.piece(*e, Run::fill(fill, dp.addr, n * de)),
            (m, _) if m >= n => sink.piece(*e, Run::cast(sp.addr, dp.addr, n * de, scale)),
            // a moving head and a filled tail: the general step cuts it
            _ => return true,
        }
        *e += n;
        dp.consume(n, de);
        match src.next_piece() {
            Some(p) => *sp = p,
            None => return false,
        }
    }
    true
}

/// Runs handed to [`for_each_run_batch`]'s consumer at once.
pub const RUN_BATCH: usize = 64;

/// [`for_each_run_batch`]'s sink: merges pieces into maximal runs split at
/// [`Scale::max_len`] (a run that reaches the limit is closed and the rest of the piece
/// opens the next one, which is where splitting the maximal run would cut it). The last
/// run in the buffer is the open one; the closed ones go on `RUN_BATCH - 1` at a time.
struct Merger<F: FnMut(&[Run])> {
    runs: [Run; RUN_BATCH],
    len: usize,
    emit: F,
}

impl<F: FnMut(&[Run])> Merger<F> {
    /// Closes the open run and opens `r` (at most [`Scale::max_len`]).
    #[inline(always)]
    fn open(&mut self, r: Run) {
        if self.len == RUN_BATCH {
            let (closed, open) = self.runs.split_at(RUN_BATCH - 1);
            (self.emit)(closed);
            self.runs[0] = open[0];
            self.len = 1;
        }
        if let Some(slot) = self.runs.get_mut(self.len) {
            *slot = r;
            self.len += 1;
        }
    }

    /// Opens the runs of a piece longer than one descriptor.
    #[cold]
    fn open_long(&mut self, mut r: Run) {
        let max = r.scale.max_len();
        while r.len > max {
            self.open(Run { len: max, ..r });
            r = r.advance(max);
        }
        self.open(r);
    }

    fn finish(mut self) {
        if let Some(rest) = self.runs.get(..self.len).filter(|r| !r.is_empty()) {
            (self.emit)(rest);
        }
    }
}

impl<F: FnMut(&[Run])> PieceSink for Merger<F> {
    #[inline(always)]
    fn piece(&mut self, _e: u64, mut r: Run) {
        let last = self.len.checked_sub(1);
        if let Some(run) = last.and_then(|i| self.runs.get_mut(i)) {
            if joins(run, &r) {
                // an open run holds at most its max_len (the same for the run and `r`)
                let max = run.scale.max_len();
                let room = max - run.len;
                if r.len <= room {
                    run.len += r.len;
                    return;
                }
                run.len = max;
                r = r.advance(room);
            }
        }
        match r.len <= r.scale.max_len() {
            true => self.open(r),
            false => self.open_long(r),
        }
    }
}

/// Walks both sides in lockstep and calls `emit` for every maximal run, split at
/// [`MAX_RUN_BYTES`] on its longer side. The two sides must have equal element counts
/// (validated upstream).
pub fn for_each_run(src: &mut Walker, dst: &mut Walker, mut emit: impl FnMut(Run)) {
    for_each_run_batch(src, dst, |runs| runs.iter().for_each(|&r| emit(r)));
}

/// As [`for_each_run`], handing the runs on in order in batches of up to [`RUN_BATCH`]
/// (the walk stays one tight loop; the consumer's per-call cost is paid once a batch).
pub fn for_each_run_batch(src: &mut Walker, dst: &mut Walker, emit: impl FnMut(&[Run])) {
    let mut merger = Merger {
        runs: [Run::default(); RUN_BATCH],
        len: 0,
        emit,
    };
    joint_pieces(src, dst, u64::MAX, &mut merger);
    merger.finish();
}

/// [`for_each_unit_run`]'s sink: merges within a unit only.
struct UnitMerger<F: FnMut(u64, Run)> {
    cur: Option<(u64, Run)>,
    unit: u64,
    emit: F,
}

impl<F: FnMut(u64, Run)> PieceSink for UnitMerger<F> {
    fn piece(&mut self, e: u64, r: Run) {
        let u = e / self.unit;
        match &mut self.cur {
            Some((cu, run)) if *cu == u && joins(run, &r) => run.len += r.len,
            _ => {
                if let Some((cu, run)) = self.cur.replace((u, r)) {
                    (self.emit)(cu, run);
                }
            }
        }
    }
}

/// As [`for_each_run`], but runs never merge across a unit boundary (every `unit`
/// elements, `unit >= 1`) and are not split: `emit` gets each run with its unit number.
pub fn for_each_unit_run(
    src: &mut Walker,
    dst: &mut Walker,
    unit: u64,
    emit: impl FnMut(u64, Run),
) {
    let mut merger = UnitMerger {
        cur: None,
        unit: unit.max(1),
        emit,
    };
    joint_pieces(src, dst, unit.max(1), &mut merger);
    if let Some((u, run)) = merger.cur {
        (merger.emit)(u, run);
    }
}

/// Whether `next` continues `run` on both sides in the same regions (a fill only on the
/// destination, with the same element).
#[inline(always)]
pub fn joins(run: &Run, next: &Run) -> bool {
    // Addresses first: the region slots are only worked out for runs that continue.
    let dst = run.dst.wrapping_add(run.len) == next.dst;
    let src = match (run.fill, next.fill) {
        (false, false) => {
            run.src.wrapping_add(run.src_len()) == next.src && run.scale == next.scale
        }
        (true, true) => run.src == next.src,
        _ => false,
    };
    dst && src
        && same_regions(
            (run.dst, next.dst),
            (!run.fill).then_some((run.src, next.src)),
        )
}

/// Whether two destinations (and two sources, unless a fill's) lie in the same region
/// each. Out of line on purpose: inlined, the compiler works out the region slots of
/// every run as it opens (they are invariant while it grows), which costs more than this
/// call on the rare joins of scattered rows. Its arguments are numbers, not the runs:
/// passed by reference, the runs were written to the stack for every position of a row
/// loop, whether they joined or not.
#[inline(never)]
fn same_regions((dst, next_dst): (u64, u64), src: Option<(u64, u64)>) -> bool {
    region_slot(dst) == region_slot(next_dst)
        && src.is_none_or(|(src, next_src)| region_slot(src) == region_slot(next_src))
}

/// Extends `cur` with `next` when they join, else emits `cur` (split) and starts `next`.
#[inline(always)]
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

/// Emits `run` in pieces of at most [`Scale::max_len`] (a fill keeps its element).
#[inline(always)]
pub fn split(run: Run, emit: &mut impl FnMut(Run)) {
    if (1..=run.scale.max_len()).contains(&run.len) {
        return emit(run);
    }
    split_long(run, emit);
}

/// [`split`] of a run longer than one descriptor.
#[cold]
fn split_long(run: Run, emit: &mut impl FnMut(Run)) {
    let mut rest = run;
    while rest.len > 0 {
        let len = rest.len.min(rest.scale.max_len());
        emit(Run { len, ..rest });
        rest = rest.advance(len);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pattern::ByteDim;
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};

    /// A reshaped side from `(step, count)` byte dims, `ind` its indirection dim.
    pub(crate) fn shape(start: u64, es: u32, dims: &[(i64, u64)], ind: Option<usize>) -> Reshaped {
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

    fn runs(src: &mut Walker, dst: &mut Walker) -> Vec<Run> {
        let mut v = Vec::new();
        for_each_run(src, dst, |r| v.push(r));
        v
    }

    #[test]
    fn contiguous_copy_splits_at_64k() {
        let s = shape(0, 4, &[(4, 40000)], None);
        let d = shape(1 << 20, 4, &[(4, 40000)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        assert_eq!(r.len(), 3);
        assert_eq!(r[0], Run::copy(0, 1 << 20, 65536));
        assert_eq!(r[2].len, 160000 - 2 * 65536);
    }

    #[test]
    fn adjacent_indices_collapse_and_invalid_ones_move_nothing() {
        let s = shape(0, 4, &[(256, 4), (4, 64)], Some(0));
        let d = shape(1 << 20, 4, &[(4, 256)], None);
        let bases = IndexedBases::unfilled(
            vec![5 * 256, 6 * 256, 99 * 256, 7 * 256],
            vec![true, true, true, false],
        );
        let r = runs(
            &mut Walker::new(&s, Some(&bases)),
            &mut Walker::new(&d, None),
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
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        let lens: Vec<u64> = r.iter().map(|r| r.len).collect();
        assert_eq!(lens, vec![2, 1, 1, 2]);
        assert_eq!(r[1], Run::copy(2, 1010, 1));
    }

    #[test]
    fn a_cast_counts_elements_and_splits_at_64k_on_its_longer_side() {
        // f32 -> u8: 40000 elements, 160000 source bytes, 40000 destination bytes
        let s = shape(0, 4, &[(4, 40000)], None);
        let d = shape(1 << 20, 1, &[(1, 40000)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        let narrow = Scale::of(4, 1);
        assert_eq!(
            r,
            vec![
                Run::cast(0, 1 << 20, 16384, narrow),
                Run::cast(65536, (1 << 20) + 16384, 16384, narrow),
                Run::cast(131072, (1 << 20) + 32768, 7232, narrow),
            ]
        );
        assert_eq!(
            (r[2].src_len(), r[2].read_range()),
            (28928, Some((131072, 160000)))
        );
        // u8 -> f32: the destination is the longer side
        let (s, d) = (
            shape(0, 1, &[(1, 40000)], None),
            shape(1 << 20, 4, &[(4, 40000)], None),
        );
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        let wide = Scale::of(1, 4);
        assert_eq!(r.len(), 3);
        assert_eq!(r[1], Run::cast(16384, (1 << 20) + 65536, 65536, wide));
        assert_eq!(r[2].len, 160000 - 2 * 65536);
        assert_eq!(r[2].src_len(), 40000 - 2 * 16384);
    }

    #[test]
    fn a_cast_merges_rows_contiguous_on_both_sides() {
        // bf16 rows of 3 at a stride of 3 (contiguous) into f32 rows of 3 at a stride of 4:
        // the source is one run, the destination breaks every row
        let s = shape(0, 2, &[(6, 4), (2, 3)], None);
        let d = shape(4096, 4, &[(16, 4), (4, 3)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        let scale = Scale::of(2, 4);
        let want: Vec<Run> = (0..4u64)
            .map(|i| Run::cast(i * 6, 4096 + i * 16, 12, scale))
            .collect();
        assert_eq!(r, want);
        // both contiguous: one run of 12 elements
        let d = shape(4096, 4, &[(12, 4), (4, 3)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        assert_eq!(r, vec![Run::cast(0, 4096, 48, scale)]);
        assert_eq!(r[0].hulls().0, Hull::new(0, 24));
    }

    #[test]
    fn runs_never_cross_a_partition() {
        // two SBUF partitions laid back to back (v4: 256 KiB == stride)
        let s = shape(SBUF_BASE, 4, &[(SBUF_STRIDE as i64, 2), (4, 65536)], None);
        let d = shape(0, 4, &[(4, 131072)], None);
        let r = runs(&mut Walker::new(&s, None), &mut Walker::new(&d, None));
        assert_eq!(r.len(), 8);
        assert!(r
            .iter()
            .all(|r| region_slot(r.src) == region_slot(r.src + r.len - 1)));
    }
}
