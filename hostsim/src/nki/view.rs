//! NKI's tensor views as the `.ap()` patterns they stand for. NKI turns every view of a
//! tensor (slicing `t[2:6, ::2]`, `permute`, `reshape`, `select`, `broadcast`, ...) into
//! an access pattern when a kernel is traced, and moves no data; so does hostsim. A
//! [`View`] is a list of dims (a size and a stride in elements each, outermost first) and
//! an element offset over one tensor; its `.ap()` ([`View::pattern`]) is one
//! `[stride, size]` pair per dim from that offset. A tensor's own view has its row-major
//! strides.
//!
//! The ops are NKI's `NkiTensor` view methods, with numpy's meaning where numpy has one;
//! dims may be counted from the end (`-1` the last):
//!
//! - [`View::index`] / [`View::pick`]: slicing, one [`Entry`] per dim (an int drops the
//!   dim, a range keeps it);
//! - [`View::permute`]: the dims in a new order;
//! - [`View::reshape`]: a new shape over the same elements in the same row-major order
//!   (one size may be `-1`), where strides can say it (numpy's no-copy rule: each group of
//!   old dims merged into new ones must be contiguous); [`View::reshape_dim`] splits one
//!   dim, [`View::flatten_dims`] merges the contiguous dims `start..=end` into one;
//! - [`View::expand_dim`] / [`View::squeeze_dim`]: insert or drop a dim of size 1;
//! - [`View::broadcast`]: a dim of size 1 repeated `size` times (stride 0);
//! - [`View::select_dynamic`]: a dim picked by a run-time value, which the `.ap()` says
//!   as a `scalar_offset` scaled by the stride of the tensor dim it names
//!   (`indirect_dim`): the picked dim's stride must be one of the tensor's, or of the
//!   tensor with one dim split (NKI reshapes the tensor so; the `.ap()` says the split
//!   shape).
//!
//! On SBUF/PSUM dim 0 is the partition dim, and it stays the first dim of every view, so
//! the pattern's first pair steps partitions as the `.ap()` rules want: no op moves,
//! splits, merges, broadcasts or drops it, and an int picking one partition (`t[5]`,
//! `select(0, 5)`) keeps it as a dim of size 1.

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

/// One dim of a view: `size` elements, `stride` elements apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dim {
    pub size: u64,
    pub stride: i64,
}

/// A view of one tensor: its dims, outermost first, from element `offset`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct View {
    dims: SmallVec<[Dim; 8]>,
    offset: i128,
    /// SBUF/PSUM: dim 0 is the partition dim.
    on_core: bool,
}

impl View {
    /// The whole tensor of `shape`, row-major (`on_core`: SBUF or PSUM).
    pub fn whole(shape: &[u64], on_core: bool) -> View {
        let mut dims: SmallVec<[Dim; 8]> = SmallVec::new();
        let mut stride = 1i64;
        for &size in shape.iter().rev() {
            dims.insert(0, Dim { size, stride });
            stride = stride.saturating_mul(size as i64);
        }
        View {
            dims,
            offset: 0,
            on_core,
        }
    }

    /// An `.ap()`'s `[step, num]` pairs from `offset` as a view: 1 to 5 pairs, each
    /// `num` at least 1.
    pub fn of_pattern(pairs: &[(i64, u64)], offset: u64, on_core: bool) -> Result<View, String> {
        if pairs.is_empty() || pairs.len() > MAX_AP_DIMS {
            return Err(format!(
                "{} pairs; a pattern has 1 to {MAX_AP_DIMS} [step, num] pairs",
                pairs.len()
            ));
        }
        if let Some(k) = pairs.iter().position(|&(_, num)| num == 0) {
            return Err(format!(
                "pair {k}'s num is 0; each pair walks at least 1 element"
            ));
        }
        let dims = pairs.iter().map(|&(stride, size)| Dim { size, stride });
        Ok(View {
            dims: dims.collect(),
            offset: i128::from(offset),
            on_core,
        })
    }

    /// The sizes of its dims.
    pub fn shape(&self) -> Vec<u64> {
        self.dims.iter().map(|d| d.size).collect()
    }

    /// Its dims.
    pub fn dims(&self) -> &[Dim] {
        &self.dims
    }

    /// Whether dim 0 is a partition dim (SBUF/PSUM).
    pub fn on_core(&self) -> bool {
        self.on_core
    }

    /// The element its first position is.
    pub fn offset(&self) -> i128 {
        self.offset
    }

    /// The `.ap()` it stands for: `(offset, pairs)`, one `[stride, size]` pair per dim
    /// (a view of no dims, one element, is the pair `[1, 1]`).
    pub fn pattern(&self) -> Result<(u64, SmallVec<[ApDim; MAX_AP_DIMS]>), String> {
        if self.dims.len() > MAX_AP_DIMS {
            return Err(format!(
                "the view has {} dims; an .ap() takes at most {MAX_AP_DIMS}",
                self.dims.len()
            ));
        }
        let offset = u64::try_from(self.offset).map_err(|_| {
            format!(
                "the view starts at element {}, outside the tensor",
                self.offset
            )
        })?;
        let mut pairs: SmallVec<[ApDim; MAX_AP_DIMS]> = SmallVec::new();
        for (k, d) in self.dims.iter().enumerate() {
            let num = u32::try_from(d.size).map_err(|_| {
                format!(
                    "dim {k} has {} elements; an .ap() pair counts at most 2^32 - 1",
                    d.size
                )
            })?;
            pairs.push(ApDim {
                step: d.stride,
                num,
            });
        }
        if pairs.is_empty() {
            pairs.push(ApDim { step: 1, num: 1 });
        }
        Ok((offset, pairs))
    }

    /// `dim` (negative from the end) as a dim of this view, or of one with `extra` more
    /// dims (an insertion point).
    pub fn axis(&self, dim: i64, extra: usize) -> Result<usize, String> {
        let n = self.dims.len() + extra;
        let at = if dim < 0 { dim + n as i64 } else { dim };
        match usize::try_from(at) {
            Ok(at) if at < n => Ok(at),
            _ => Err(format!(
                "dim {dim} is out of range for a view of {} dims",
                self.dims.len()
            )),
        }
    }

    /// Refuses an op on the partition dim (dim 0 on SBUF/PSUM); `what` names the op.
    fn keep_partition(&self, dim: usize, what: &str) -> Result<(), String> {
        match self.on_core && dim == 0 {
            true => Err(format!(
                "{what} dim 0, the partition dim (on SBUF/PSUM it stays the first dim of every view)"
            )),
            false => Ok(()),
        }
    }

    /// Slicing: `entries[k]` applied to dim `k` (missing trailing entries keep their dims
    /// whole).
    pub fn index(&self, entries: &[Entry]) -> Result<View, String> {
        if entries.len() > self.dims.len() {
            return Err(format!(
                "{} entries for a view of {} dims",
                entries.len(),
                self.dims.len()
            ));
        }
        // from the last, so that a dropped dim moves none of the ones still to come
        let mut view = self.clone();
        for (k, &e) in entries.iter().enumerate().rev() {
            view = view.pick(k, e)?;
        }
        Ok(view)
    }

    /// One entry of a slice applied to dim `k`.
    pub fn pick(&self, k: usize, entry: Entry) -> Result<View, String> {
        let Dim { size, stride } = self.dims[k];
        let mut view = self.clone();
        match entry {
            Entry::Index(i) if i >= size => {
                return Err(format!(
                    "index {i} is out of range for dim {k} of size {size}"
                ))
            }
            Entry::Index(i) => {
                view.offset += i128::from(i) * i128::from(stride);
                match self.on_core && k == 0 {
                    true => view.dims[0].size = 1,
                    false => drop(view.dims.remove(k)),
                }
            }
            Entry::Range { count: 0, .. } => {
                return Err(format!(
                    "dim {k}'s range is empty (a slice moves at least one element)"
                ))
            }
            Entry::Range { start, step, count } => {
                view.offset += i128::from(start) * i128::from(stride);
                let stride = step.checked_mul(stride).ok_or_else(|| {
                    format!("dim {k}'s step {step} times its stride {stride} overflows 64 bits")
                })?;
                view.dims[k] = Dim {
                    size: count,
                    stride,
                };
            }
        }
        Ok(view)
    }

    /// The dims in the order `order` gives (`order[j]` is the dim that becomes dim `j`).
    pub fn permute(&self, order: &[i64]) -> Result<View, String> {
        let n = self.dims.len();
        if order.len() != n {
            return Err(format!(
                "{} dims in the order for a view of {n} dims",
                order.len()
            ));
        }
        let mut seen = vec![false; n];
        let mut dims = SmallVec::new();
        for &d in order {
            let at = self.axis(d, 0)?;
            if std::mem::replace(&mut seen[at], true) {
                return Err(format!(
                    "dim {d} is named twice; the order names each dim once"
                ));
            }
            dims.push(self.dims[at]);
        }
        if self.on_core && order.first().is_some_and(|&d| self.axis(d, 0) != Ok(0)) {
            return Err(
                "the order moves dim 0, the partition dim (on SBUF/PSUM it stays first)".into(),
            );
        }
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// `shape` with its one `-1` (if any) solved so that it has `total` elements.
    fn solve(shape: &[i64], total: u64) -> Result<Vec<u64>, String> {
        let mut known = 1u64;
        let mut free = None;
        for (k, &s) in shape.iter().enumerate() {
            match s {
                -1 if free.is_some() => return Err("more than one size is -1".into()),
                -1 => free = Some(k),
                s if s < 1 => return Err(format!("size {s}: sizes are at least 1 (or one -1)")),
                s => {
                    known = known
                        .checked_mul(s as u64)
                        .ok_or_else(|| format!("the sizes {shape:?} overflow 64 bits"))?;
                }
            }
        }
        let mut sizes: Vec<u64> = shape.iter().map(|&s| s.max(1) as u64).collect();
        if let Some(k) = free {
            if !total.is_multiple_of(known) {
                return Err(format!(
                    "the sizes {shape:?} cannot hold the {total} elements (no -1 fits)"
                ));
            }
            sizes[k] = total / known;
        }
        let product = sizes.iter().try_fold(1u64, |p, &s| p.checked_mul(s));
        match product == Some(total) {
            true => Ok(sizes),
            false => Err(format!(
                "the sizes {shape:?} do not hold the view's {total} elements"
            )),
        }
    }

    /// The view's element count.
    fn elements(&self) -> Result<u64, String> {
        let product = self
            .dims
            .iter()
            .try_fold(1u64, |p, d| p.checked_mul(d.size));
        product.ok_or_else(|| "the view's element count overflows 64 bits".into())
    }

    /// The same elements in the same row-major order under `shape` (one size may be -1).
    /// On SBUF/PSUM the partition dim stays: `shape[0]` must be its size.
    pub fn reshape(&self, shape: &[i64]) -> Result<View, String> {
        let sizes = View::solve(shape, self.elements()?)?;
        if !self.on_core {
            let dims = regroup(&self.dims, &sizes)?;
            return Ok(View {
                dims,
                ..self.clone()
            });
        }
        let partitions = self.dims[0].size;
        if sizes.first() != Some(&partitions) {
            return Err(format!(
                "the sizes {sizes:?} give dim 0 {} elements, and dim 0 is the partition dim of {partitions} (on SBUF/PSUM a reshape keeps it)",
                sizes.first().unwrap_or(&1)
            ));
        }
        let mut dims = regroup(&self.dims[1..], &sizes[1..])?;
        dims.insert(0, self.dims[0]);
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// Dim `dim` split into dims of `shape` (one size may be -1), row-major inside it.
    pub fn reshape_dim(&self, dim: i64, shape: &[i64]) -> Result<View, String> {
        let at = self.axis(dim, 0)?;
        if shape.len() != 1 {
            self.keep_partition(at, "reshape_dim splits")?;
        }
        let sizes = View::solve(shape, self.dims[at].size)?;
        let mut dims = self.dims.clone();
        let mut stride = self.dims[at].stride;
        let mut split: SmallVec<[Dim; 8]> = SmallVec::new();
        for &size in sizes.iter().rev() {
            split.insert(0, Dim { size, stride });
            stride = stride.saturating_mul(size as i64);
        }
        dims.remove(at);
        dims.insert_many(at, split);
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// Dims `start..=end` merged into one; each must step exactly over the next.
    pub fn flatten_dims(&self, start: i64, end: i64) -> Result<View, String> {
        let (s, e) = (self.axis(start, 0)?, self.axis(end, 0)?);
        if s >= e {
            return Err(format!("start dim {start} is not before end dim {end}"));
        }
        self.keep_partition(s, "flatten_dims merges")?;
        let size = self.dims[s..=e]
            .iter()
            .try_fold(1u64, |p, d| p.checked_mul(d.size))
            .ok_or("the merged size overflows 64 bits")?;
        // dims of size 1 take no part (their stride moves nothing), as in a reshape
        let moving: Vec<Dim> = self.dims[s..=e]
            .iter()
            .copied()
            .filter(|d| d.size != 1)
            .collect();
        check_contiguous(&moving, 0, moving.len().saturating_sub(1))?;
        let mut dims = self.dims.clone();
        let stride = moving.last().map_or(dims[e].stride, |d| d.stride);
        dims.drain(s..=e);
        dims.insert(s, Dim { size, stride });
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// A dim of size 1 inserted before dim `dim` (`dim` may be the dim count: at the end).
    pub fn expand_dim(&self, dim: i64) -> Result<View, String> {
        let at = self.axis(dim, 1)?;
        self.keep_partition(at, "expand_dim inserts before")?;
        let stride = match self.dims.get(at) {
            Some(d) => d.stride.saturating_mul(d.size as i64),
            None => 1,
        };
        let mut dims = self.dims.clone();
        dims.insert(at, Dim { size: 1, stride });
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// Dim `dim`, of size 1, dropped.
    pub fn squeeze_dim(&self, dim: i64) -> Result<View, String> {
        let at = self.axis(dim, 0)?;
        self.keep_partition(at, "squeeze_dim drops")?;
        if self.dims[at].size != 1 {
            return Err(format!(
                "dim {dim} has size {}; only a dim of size 1 is squeezed",
                self.dims[at].size
            ));
        }
        let mut dims = self.dims.clone();
        dims.remove(at);
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// Dim `dim`, of size 1, repeated `size` times (stride 0: every position reads or
    /// writes the one element).
    pub fn broadcast(&self, dim: i64, size: u64) -> Result<View, String> {
        let at = self.axis(dim, 0)?;
        self.keep_partition(at, "broadcast repeats")?;
        if self.dims[at].size != 1 || size == 0 {
            return Err(format!(
                "dim {dim} has size {}; broadcast repeats a dim of size 1 at least once",
                self.dims[at].size
            ));
        }
        let mut dims = self.dims.clone();
        dims[at] = Dim { size, stride: 0 };
        Ok(View {
            dims,
            ..self.clone()
        })
    }

    /// The view's bytes as elements of another size (NKI's `view(dtype)`,
    /// `reinterpret_cast`): elements of `from` bytes become elements of `to` bytes, the
    /// last dim (stride 1) scaled by the ratio and the other strides and the offset
    /// counted in the new elements (each a whole number of them).
    pub fn reinterpret(&self, from: u64, to: u64) -> Result<View, String> {
        if from == to {
            return Ok(self.clone());
        }
        let last = self
            .dims
            .len()
            .checked_sub(1)
            .ok_or("a view of no dims has no last dim to scale")?;
        self.keep_partition(last, "a reinterpretation scales the last dim, here")?;
        if self.dims[last].stride != 1 {
            return Err(format!(
                "the last dim steps {} elements; a reinterpretation needs it contiguous (stride 1)",
                self.dims[last].stride
            ));
        }
        let (from, to) = (i128::from(from), i128::from(to));
        // a position's byte offset stays: count it in the new elements
        let scale = |v: i128, what: &str| {
            match (v * from) % to {
            0 => Ok(v * from / to),
            _ => Err(format!("{what} ({v} elements of {from} bytes) is no whole number of elements of {to} bytes")),
        }
        };
        let mut view = self.clone();
        view.offset = scale(self.offset, "the offset")?;
        for (k, d) in self.dims.iter().enumerate().take(last) {
            let stride = scale(i128::from(d.stride), &format!("dim {k}'s stride"))?;
            view.dims[k].stride =
                i64::try_from(stride).map_err(|_| format!("dim {k}'s stride overflows 64 bits"))?;
        }
        let size = scale(i128::from(self.dims[last].size), "the last dim")?;
        view.dims[last].size = u64::try_from(size).map_err(|_| "the last dim overflows 64 bits")?;
        Ok(view)
    }

    /// Dim `dim` picked by a run-time value (NKI's `select` by a 1x1 tensor): the view
    /// without it (on SBUF/PSUM dim 0 kept at size 1), the dim `d` of the tensor whose
    /// stride (`prod(shape[d+1:])`) the dim steps, which the `.ap()` names as
    /// `indirect_dim`, and the tensor's shape as the `.ap()` must see it for that: `shape`
    /// itself where one of its dims has the stride (the innermost, one of size above 1
    /// first), else `shape` with a dim split so that its outer part has it (as NKI
    /// reshapes the tensor; never the partition dim).
    pub fn select_dynamic(&self, dim: i64, shape: &[u64]) -> Result<(View, u32, Vec<u64>), String> {
        let at = self.axis(dim, 0)?;
        let stride = self.dims[at].stride;
        let (d, shape) = stride_dim(shape, stride, self.on_core).ok_or_else(|| {
            format!(
                "dim {dim} steps {stride} elements, and no dim of the tensor (shape {shape:?}) has or splits into that stride; an .ap() scales a scalar_offset by a tensor dim's stride"
            )
        })?;
        let mut view = self.clone();
        match self.on_core && at == 0 {
            true => view.dims[0].size = 1,
            false => drop(view.dims.remove(at)),
        }
        Ok((view, d as u32, shape))
    }
}

/// The dim of a tensor of `shape` whose stride is `stride`, and the shape that has it:
/// `shape`'s own dim if one has it (the innermost, one of size above 1 first), else a
/// dim `d` (the innermost that can; not the partition dim on core) split as
/// `[shape[d] / f, f]`, `f = stride / stride_d`, its outer part then dim `d`.
fn stride_dim(shape: &[u64], stride: i64, on_core: bool) -> Option<(usize, Vec<u64>)> {
    let strides: Vec<i64> = View::whole(shape, on_core)
        .dims
        .iter()
        .map(|d| d.stride)
        .collect();
    let own = |big: bool| {
        (0..shape.len())
            .rev()
            .find(|&d| strides[d] == stride && (!big || shape[d] > 1))
    };
    if let Some(d) = own(true).or_else(|| own(false)) {
        return Some((d, shape.to_vec()));
    }
    let lowest = usize::from(on_core);
    (lowest..shape.len()).rev().find_map(|d| {
        let f = u64::try_from(stride.checked_div(strides[d])?).ok()?;
        let splits =
            stride % strides[d] == 0 && f > 1 && f < shape[d] && shape[d].is_multiple_of(f);
        splits.then(|| {
            let mut split = shape.to_vec();
            split.splice(d..=d, [shape[d] / f, f]);
            (d, split)
        })
    })
}

/// `shape`, counted in elements of `from` bytes, counted in elements of `to` bytes: its
/// last dim scaled by the ratio (`None` where that dim's bytes are no whole number of
/// them, or there is no dim).
pub fn reinterpreted_shape(shape: &[u64], from: u64, to: u64) -> Option<Vec<u64>> {
    let mut shape = shape.to_vec();
    let last = shape.last_mut()?;
    let bytes = last.checked_mul(from)?;
    *last = bytes / to;
    bytes.is_multiple_of(to).then_some(shape)
}

/// `dims` regrouped as `sizes` (the same element count) in the same row-major order:
/// each run of dims merged into new ones must be contiguous; the new strides follow the
/// run's innermost. Dims of size 1 take no part (their stride moves nothing).
fn regroup(dims: &[Dim], sizes: &[u64]) -> Result<SmallVec<[Dim; 8]>, String> {
    let old: Vec<Dim> = dims.iter().copied().filter(|d| d.size != 1).collect();
    let mut new: SmallVec<[Dim; 8]> = sizes.iter().map(|&size| Dim { size, stride: 1 }).collect();
    let (mut o, mut n) = (0, 0);
    while o < old.len() && n < new.len() {
        let (mut oe, mut ne) = (o + 1, n + 1);
        let (mut op, mut np) = (u128::from(old[o].size), u128::from(new[n].size));
        while op != np {
            if np < op {
                np *= u128::from(new[ne].size);
                ne += 1;
            } else {
                op *= u128::from(old[oe].size);
                oe += 1;
            }
        }
        check_contiguous(&old, o, oe - 1)?;
        new[ne - 1].stride = old[oe - 1].stride;
        for k in (n..ne - 1).rev() {
            new[k].stride = new[k + 1].stride.saturating_mul(new[k + 1].size as i64);
        }
        (o, n) = (oe, ne);
    }
    Ok(new)
}

/// Refuses dims `s..=e` of `dims` unless each steps exactly over the next (one stride
/// can say them as one dim).
fn check_contiguous(dims: &[Dim], s: usize, e: usize) -> Result<(), String> {
    for k in s..e {
        let over = i128::from(dims[k + 1].stride) * i128::from(dims[k + 1].size);
        if i128::from(dims[k].stride) != over {
            return Err(format!(
                "the dims are not contiguous: a dim of stride {} is not the next one's {} x {} (merging them needs a copy)",
                dims[k].stride,
                dims[k + 1].size,
                dims[k + 1].stride
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn all(n: u64) -> Entry {
        Entry::Range {
            start: 0,
            step: 1,
            count: n,
        }
    }

    fn range(start: u64, step: i64, count: u64) -> Entry {
        Entry::Range { start, step, count }
    }

    /// `(offset, [(step, num)])` of `v`'s pattern.
    fn pat(v: &View) -> (u64, Vec<(i64, u32)>) {
        let (offset, dims) = v.pattern().unwrap();
        (offset, dims.iter().map(|d| (d.step, d.num)).collect())
    }

    fn hbm(shape: &[u64]) -> View {
        View::whole(shape, false)
    }

    #[test]
    fn hbm_slices_are_offsets_and_one_pair_per_kept_dim() {
        // t[2:6, ::2] of an [8, 6] tensor
        let v = hbm(&[8, 6])
            .index(&[range(2, 1, 4), range(0, 2, 3)])
            .unwrap();
        assert_eq!(pat(&v), (12, vec![(6, 4), (2, 3)]));
        // t[2:6, 1:4]: rows of 3 from column 1
        let v = hbm(&[8, 6])
            .index(&[range(2, 1, 4), range(1, 1, 3)])
            .unwrap();
        assert_eq!(pat(&v), (13, vec![(6, 4), (1, 3)]));
        // t[3] of a [4, 5, 6] tensor: its two other dims
        let v = hbm(&[4, 5, 6]).index(&[Entry::Index(3)]).unwrap();
        assert_eq!(pat(&v), (90, vec![(6, 5), (1, 6)]));
        // t[::-1] of a [4, 2]: rows backwards, each row forwards
        let v = hbm(&[4, 2]).index(&[range(3, -1, 4)]).unwrap();
        assert_eq!(pat(&v), (6, vec![(-2, 4), (1, 2)]));
        // one element: no dims, the pair [1, 1]
        let v = hbm(&[4, 2])
            .index(&[Entry::Index(1), Entry::Index(1)])
            .unwrap();
        assert_eq!(pat(&v), (3, vec![(1, 1)]));
    }

    #[test]
    fn on_core_the_partition_dim_stays_first() {
        let tile = |shape: &[u64]| View::whole(shape, true);
        // i_sb[:, 2] of a (128, 4) tile: a column, one index per partition
        let v = tile(&[128, 4]).index(&[all(128), Entry::Index(2)]).unwrap();
        assert_eq!(pat(&v), (2, vec![(4, 128)]));
        // tile[5] of a [128, 64]: partition 5, kept as the first pair
        let v = tile(&[128, 64]).index(&[Entry::Index(5)]).unwrap();
        assert_eq!(pat(&v), (320, vec![(64, 1), (1, 64)]));
        assert_eq!(pat(&tile(&[128, 8, 8])).1, vec![(64, 128), (8, 8), (1, 8)]);
        // the ops that would move, split, merge, drop or repeat it are refused
        let t = tile(&[4, 6]);
        for e in [
            t.permute(&[1, 0]).unwrap_err(),
            t.reshape(&[2, 12]).unwrap_err(),
            t.reshape_dim(0, &[2, 2]).unwrap_err(),
            t.flatten_dims(0, 1).unwrap_err(),
            t.expand_dim(0).unwrap_err(),
            t.index(&[Entry::Index(1)])
                .unwrap()
                .squeeze_dim(0)
                .unwrap_err(),
            t.index(&[Entry::Index(1)])
                .unwrap()
                .broadcast(0, 4)
                .unwrap_err(),
        ] {
            assert!(e.contains("partition dim"), "{e}");
        }
        // the free dims reshape as any others (a -1 may stand for the partition count);
        // a dynamic select of dim 0 keeps it
        let v = tile(&[4, 6]).reshape(&[4, 3, -1]).unwrap();
        assert_eq!(pat(&v), (0, vec![(6, 4), (2, 3), (1, 2)]));
        let v = tile(&[4, 6]).reshape(&[-1, 2, 3]).unwrap();
        assert_eq!(pat(&v), (0, vec![(6, 4), (3, 2), (1, 3)]));
        let e = tile(&[4, 6]).reshape(&[4, 5]).unwrap_err();
        assert_eq!(e, "the sizes [4, 5] do not hold the view's 24 elements");
        let (v, d, shape) = tile(&[4, 6]).select_dynamic(0, &[4, 6]).unwrap();
        assert_eq!(
            (pat(&v), d, shape),
            ((0, vec![(6, 1), (1, 6)]), 0, vec![4, 6])
        );
    }

    #[test]
    fn reshape_needs_contiguous_groups_and_says_which() {
        // a [4, 6] seen as [2, 2, 3, 2]: contiguous, any regrouping works
        let v = hbm(&[4, 6]).reshape(&[2, -1, 3, 2]).unwrap();
        assert_eq!(pat(&v), (0, vec![(12, 2), (6, 2), (2, 3), (1, 2)]));
        // its transpose [6, 4] splits each dim alone, but cannot merge the two
        let t = hbm(&[4, 6]).permute(&[1, 0]).unwrap();
        let v = t.reshape(&[3, 2, 2, 2]).unwrap();
        assert_eq!(pat(&v), (0, vec![(2, 3), (1, 2), (12, 2), (6, 2)]));
        let e = t.reshape(&[24]).unwrap_err();
        assert!(e.contains("not contiguous"), "{e}");
        for (shape, rule) in [
            (vec![5, -1], "no -1 fits"),
            (vec![-1, -1], "more than one size is -1"),
            (vec![0, 24], "sizes are at least 1"),
            (vec![4, 5], "do not hold"),
        ] {
            let e = hbm(&[4, 6]).reshape(&shape).unwrap_err();
            assert!(e.contains(rule), "{shape:?}: {e}");
        }
    }

    #[test]
    fn the_small_ops_say_their_rule() {
        let t = hbm(&[2, 3, 4]);
        assert_eq!(
            pat(&t.flatten_dims(1, -1).unwrap()).1,
            vec![(12, 2), (1, 12)]
        );
        assert_eq!(
            pat(&t.expand_dim(-1).unwrap()).1,
            vec![(12, 2), (4, 3), (1, 4), (1, 1)]
        );
        // an inserted dim merges back with the dim it stands before, and a dim of size 1
        // (whatever its stride) merges with any
        let back = t.expand_dim(1).unwrap().flatten_dims(1, 2).unwrap();
        assert_eq!(pat(&back), pat(&t));
        let column = hbm(&[3, 4]).index(&[all(3), range(1, 1, 1)]).unwrap();
        assert_eq!(pat(&column.flatten_dims(0, 1).unwrap()), (1, vec![(4, 3)]));
        let one = hbm(&[3, 4]).index(&[range(0, 1, 1)]).unwrap();
        let one = one.broadcast(0, 1).unwrap().flatten_dims(0, 1).unwrap();
        assert_eq!(pat(&one), (0, vec![(1, 4)]));
        let b = t.expand_dim(1).unwrap().broadcast(1, 5).unwrap();
        assert_eq!(pat(&b).1, vec![(12, 2), (0, 5), (4, 3), (1, 4)]);
        assert_eq!(
            b.squeeze_dim(1).unwrap_err(),
            "dim 1 has size 5; only a dim of size 1 is squeezed"
        );
        assert!(t.broadcast(0, 3).unwrap_err().contains("a dim of size 1"));
        assert_eq!(
            t.permute(&[0, 0, 1]).unwrap_err(),
            "dim 0 is named twice; the order names each dim once"
        );
        assert_eq!(
            t.permute(&[0]).unwrap_err(),
            "1 dims in the order for a view of 3 dims"
        );
        assert_eq!(
            t.flatten_dims(2, 1).unwrap_err(),
            "start dim 2 is not before end dim 1"
        );
        assert_eq!(
            t.axis(3, 0).unwrap_err(),
            "dim 3 is out of range for a view of 3 dims"
        );
        assert_eq!(
            t.axis(-4, 0).unwrap_err(),
            "dim -4 is out of range for a view of 3 dims"
        );
        // a dynamic select names the tensor dim with the picked dim's stride
        let (v, d, shape) = t.select_dynamic(1, &[2, 3, 4]).unwrap();
        assert_eq!(
            (pat(&v), d, shape),
            ((0, vec![(12, 2), (1, 4)]), 1, vec![2, 3, 4])
        );
        // a stride no dim has: a dim split to give it, as NKI reshapes the tensor
        let split = hbm(&[2, 12]).reshape_dim(1, &[3, 4]).unwrap();
        let split = split.index(&[all(2), all(3), range(0, 2, 2)]).unwrap();
        let (v, d, shape) = split.select_dynamic(2, &[2, 12]).unwrap();
        assert_eq!(
            (pat(&v), d, shape),
            ((0, vec![(12, 2), (4, 3)]), 1, vec![2, 6, 2])
        );
        let e = t
            .index(&[all(2), range(0, 2, 2)])
            .unwrap()
            .select_dynamic(1, &[2, 3, 4]);
        assert!(e
            .unwrap_err()
            .contains("dim 1 steps 8 elements, and no dim"));
        let e = hbm(&[2, 2, 2, 2, 2, 2]).pattern().unwrap_err();
        assert_eq!(e, "the view has 6 dims; an .ap() takes at most 5");
    }

    #[test]
    fn a_reinterpretation_counts_the_same_bytes_in_other_elements() {
        // (128, 512) f32 as u8: (128, 2048); and back
        let t = View::whole(&[128, 512], true);
        let bytes = t.reinterpret(4, 1).unwrap();
        assert_eq!(pat(&bytes), (0, vec![(2048, 128), (1, 2048)]));
        assert_eq!(bytes.reinterpret(1, 4).unwrap(), t);
        // columns 2..6 of a [4, 8] u16 as u32: columns 1..3
        let v = hbm(&[4, 8]).index(&[all(4), range(2, 1, 4)]).unwrap();
        assert_eq!(
            pat(&v.reinterpret(2, 4).unwrap()),
            (1, vec![(4, 4), (1, 2)])
        );
        let odd = hbm(&[4, 8]).index(&[all(4), range(1, 1, 4)]).unwrap();
        let e = odd.reinterpret(2, 4).unwrap_err();
        assert_eq!(
            e,
            "the offset (1 elements of 2 bytes) is no whole number of elements of 4 bytes"
        );
        let e = hbm(&[4, 8])
            .permute(&[1, 0])
            .unwrap()
            .reinterpret(2, 1)
            .unwrap_err();
        assert!(e.contains("needs it contiguous (stride 1)"), "{e}");
        let e = View::whole(&[4], true).reinterpret(2, 1).unwrap_err();
        assert!(e.contains("the partition dim"), "{e}");
        // a shape's last dim, counted the same way
        assert_eq!(reinterpreted_shape(&[3, 5], 4, 1), Some(vec![3, 20]));
        assert_eq!(reinterpreted_shape(&[3, 4], 2, 8), Some(vec![3, 1]));
        assert_eq!(reinterpreted_shape(&[3, 5], 4, 8), None);
        assert_eq!(reinterpreted_shape(&[], 4, 1), None);
    }

    #[test]
    fn bad_slices_are_refused_naming_the_dim() {
        let e = hbm(&[4, 2]).index(&[Entry::Index(4)]).unwrap_err();
        assert_eq!(e, "index 4 is out of range for dim 0 of size 4");
        let e = hbm(&[4, 2]).index(&[all(4), range(1, 1, 0)]).unwrap_err();
        assert!(e.starts_with("dim 1's range is empty"), "{e}");
        let e = hbm(&[4]).index(&[all(4), all(1)]).unwrap_err();
        assert_eq!(e, "2 entries for a view of 1 dims");
        let e = hbm(&[2, 3, 4])
            .index(&[all(2), range(0, i64::MIN / 2, 1)])
            .unwrap_err();
        assert!(e.ends_with("times its stride 4 overflows 64 bits"), "{e}");
        let e = View::of_pattern(&[(1, 0)], 0, false).unwrap_err();
        assert_eq!(e, "pair 0's num is 0; each pair walks at least 1 element");
    }

    /// numpy's meaning of a view, kept the slow way: the element of every position,
    /// row-major over `shape`.
    #[derive(Clone, Debug)]
    struct Oracle {
        shape: Vec<u64>,
        elems: Vec<i128>,
    }

    impl Oracle {
        fn of(shape: &[u64]) -> Oracle {
            let n: u64 = shape.iter().product();
            Oracle {
                shape: shape.to_vec(),
                elems: (0..i128::from(n)).collect(),
            }
        }

        /// The position of flat index `i`.
        fn unflat(shape: &[u64], mut i: u64) -> Vec<u64> {
            let mut pos = vec![0; shape.len()];
            for k in (0..shape.len()).rev() {
                pos[k] = i % shape[k];
                i /= shape[k];
            }
            pos
        }

        fn flat(shape: &[u64], pos: &[u64]) -> usize {
            pos.iter().zip(shape).fold(0, |f, (&p, &s)| f * s + p) as usize
        }

        /// A new array of `shape`, element at `pos` from `from(pos)` of this one.
        fn map(&self, shape: Vec<u64>, from: impl Fn(&[u64]) -> Vec<u64>) -> Oracle {
            let n: u64 = shape.iter().product();
            let elems = (0..n)
                .map(|i| self.elems[Oracle::flat(&self.shape, &from(&Oracle::unflat(&shape, i)))])
                .collect();
            Oracle { shape, elems }
        }
    }

    /// The elements of `v`'s walk, row-major.
    fn walk(v: &View) -> Vec<i128> {
        let n: u64 = v.dims.iter().map(|d| d.size).product();
        (0..n)
            .map(|i| {
                let pos = Oracle::unflat(&v.shape(), i);
                let terms = pos.iter().zip(&v.dims);
                v.offset
                    + terms
                        .map(|(&p, d)| i128::from(p) * i128::from(d.stride))
                        .sum::<i128>()
            })
            .collect()
    }

    #[derive(Clone, Debug)]
    enum Op {
        Pick(usize, u64, i64, u64, bool),
        Permute(Vec<usize>),
        Reshape(Vec<u64>),
        ReshapeDim(usize, u64),
        Flatten(usize, usize),
        Expand(usize),
        Squeeze(usize),
        Broadcast(usize, u64),
        Dynamic(usize, u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let d = 0usize..4;
        prop_oneof![
            (d.clone(), 0u64..4, -2i64..3, 1u64..4, any::<bool>())
                .prop_map(|(k, s, st, c, i)| Op::Pick(k, s, st, c, i)),
            Just(()).prop_perturb(|_, mut rng| {
                let mut order: Vec<usize> = (0..4).collect();
                for i in (1..4).rev() {
                    order.swap(i, rng.random_range(0..=i));
                }
                Op::Permute(order)
            }),
            proptest::collection::vec(1u64..5, 1..5).prop_map(Op::Reshape),
            (d.clone(), 1u64..4).prop_map(|(k, f)| Op::ReshapeDim(k, f)),
            (d.clone(), d.clone()).prop_map(|(a, b)| Op::Flatten(a, b)),
            (0usize..5).prop_map(Op::Expand),
            d.clone().prop_map(Op::Squeeze),
            (d.clone(), 1u64..4).prop_map(|(k, n)| Op::Broadcast(k, n)),
            (d, 0u64..4).prop_map(|(k, v)| Op::Dynamic(k, v)),
        ]
    }

    /// Applies `op` to the view and, where the view takes it, to the oracle; the tensor
    /// has `shape`. `None` where the op does not apply (a dim past the view's).
    fn apply(
        v: &View,
        o: &Oracle,
        op: &Op,
        shape: &[u64],
    ) -> Option<Result<(View, Oracle), String>> {
        let n = v.dims.len();
        let ok = |r: Result<View, String>, o: Oracle| Some(r.map(|v| (v, o)));
        match op.clone() {
            Op::Pick(k, start, step, count, index) => {
                let size = *v.shape().get(k)?;
                let (start, step) = (start.min(size - 1), if step == 0 { 1 } else { step });
                let last = start as i64 + step * (count as i64 - 1);
                let count = if (0..size as i64).contains(&last) {
                    count
                } else {
                    1
                };
                let (entry, dropped) = match index {
                    true => (Entry::Index(start), !(v.on_core && k == 0)),
                    false => (range(start, step, count), false),
                };
                let r = v.pick(k, entry);
                let mut shape = o.shape.clone();
                match (index, dropped) {
                    (_, true) => drop(shape.remove(k)),
                    (true, false) => shape[k] = 1,
                    _ => shape[k] = count,
                }
                let o = o.map(shape, |p| {
                    let mut p = p.to_vec();
                    if dropped {
                        p.insert(k, 0);
                    }
                    p[k] = (start as i64 + step * p[k] as i64) as u64;
                    p
                });
                ok(r, o)
            }
            Op::Permute(order) => {
                let order: Vec<usize> = order.into_iter().filter(|&d| d < n).collect();
                let shape = order.iter().map(|&d| o.shape[d]).collect();
                let o2 = o.map(shape, |p| {
                    let mut q = vec![0; n];
                    for (j, &d) in order.iter().enumerate() {
                        q[d] = p[j];
                    }
                    q
                });
                let order: Vec<i64> = order.iter().map(|&d| d as i64).collect();
                ok(v.permute(&order), o2)
            }
            Op::Reshape(sizes) => {
                let total: u64 = v.shape().iter().product();
                let mut sizes: Vec<i64> = sizes.iter().map(|&s| s as i64).collect();
                sizes[0] = -1;
                let r = v.reshape(&sizes);
                let known: u64 = sizes[1..].iter().map(|&s| s as u64).product();
                if !total.is_multiple_of(known) {
                    assert!(r.is_err());
                    return None;
                }
                let shape: Vec<u64> = sizes
                    .iter()
                    .map(|&s| if s < 0 { total / known } else { s as u64 })
                    .collect();
                // a contiguous view takes any reshape (on core, one keeping dim 0)
                let contiguous = walk(v).windows(2).all(|w| w[1] == w[0] + 1);
                if contiguous && !v.on_core {
                    assert!(r.is_ok(), "{v:?} {sizes:?}: {r:?}");
                }
                ok(
                    r,
                    Oracle {
                        shape,
                        elems: o.elems.clone(),
                    },
                )
            }
            Op::ReshapeDim(k, f) => {
                let size = *v.shape().get(k)?;
                let r = v.reshape_dim(k as i64, &[f as i64, -1]);
                let mut shape = o.shape.clone();
                if !size.is_multiple_of(f) {
                    assert!(r.is_err());
                    return None;
                }
                shape.splice(k..=k, [f, size / f]);
                ok(
                    r,
                    Oracle {
                        shape,
                        elems: o.elems.clone(),
                    },
                )
            }
            Op::Flatten(a, b) if a < b && b < n => {
                let mut shape = o.shape.clone();
                let merged = shape[a..=b].iter().product();
                shape.splice(a..=b, [merged]);
                // a merge is a reshape: the two agree on whether strides can say it
                let r = v.flatten_dims(a as i64, b as i64);
                if a > 0 || !v.on_core {
                    let sizes: Vec<i64> = shape.iter().map(|&s| s as i64).collect();
                    assert_eq!(r.is_ok(), v.reshape(&sizes).is_ok(), "{v:?} {a}..={b}");
                }
                ok(
                    r,
                    Oracle {
                        shape,
                        elems: o.elems.clone(),
                    },
                )
            }
            Op::Expand(k) if k <= n => {
                let mut shape = o.shape.clone();
                shape.insert(k, 1);
                ok(
                    v.expand_dim(k as i64),
                    Oracle {
                        shape,
                        elems: o.elems.clone(),
                    },
                )
            }
            Op::Squeeze(k) if k < n && o.shape[k] == 1 => {
                let mut shape = o.shape.clone();
                shape.remove(k);
                ok(
                    v.squeeze_dim(k as i64),
                    Oracle {
                        shape,
                        elems: o.elems.clone(),
                    },
                )
            }
            Op::Broadcast(k, size) if k < n && o.shape[k] == 1 => {
                let mut shape = o.shape.clone();
                shape[k] = size;
                let o2 = o.map(shape, |p| {
                    let mut p = p.to_vec();
                    p[k] = 0;
                    p
                });
                ok(v.broadcast(k as i64, size), o2)
            }
            Op::Dynamic(k, value) if k < n => {
                // the run-time value `value` picks what a static index would
                let value = value.min(o.shape[k] - 1);
                let r = v.select_dynamic(k as i64, shape);
                let picked = apply(v, o, &Op::Pick(k, value, 1, 1, true), shape)?.ok()?;
                Some(r.map(|(dynamic, d, seen)| {
                    let stride = View::whole(&seen, v.on_core).dims[d as usize].stride;
                    let shifted = View {
                        offset: dynamic.offset + i128::from(value) * i128::from(stride),
                        ..dynamic
                    };
                    assert_eq!(walk(&shifted), picked.1.elems, "dynamic {k} = {value}");
                    (shifted, picked.1)
                }))
            }
            _ => None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Any chain of view ops walks exactly the elements numpy's views of the same
        /// ops pick, in the same order; on SBUF/PSUM every position stays in the row of
        /// its partition.
        #[test]
        fn views_walk_what_numpy_picks(
            shape in proptest::collection::vec(1u64..5, 1..4),
            on_core in any::<bool>(),
            ops in proptest::collection::vec(op(), 1..6),
        ) {
            let row: u64 = shape[1..].iter().product();
            let (mut v, mut o) = (View::whole(&shape, on_core), Oracle::of(&shape));
            for op in &ops {
                if let Some(Ok((v2, o2))) = apply(&v, &o, op, &shape) {
                    (v, o) = (v2, o2);
                    // a reinterpretation to bytes and back is the view itself
                    if let Ok(bytes) = v.reinterpret(4, 1) {
                        prop_assert_eq!(bytes.reinterpret(1, 4), Ok(v.clone()));
                    }
                    prop_assert_eq!(v.shape(), o.shape.clone(), "{:?}", op);
                    prop_assert_eq!(walk(&v), o.elems.clone(), "{:?}", op);
                    if on_core {
                        // each partition's positions (dim 0 first) lie in one row
                        let w = walk(&v);
                        let per = w.len() / v.dims[0].size as usize;
                        let rows = w.chunks(per).all(|c| c.iter().all(|&e| e / i128::from(row) == c[0] / i128::from(row)));
                        prop_assert!(rows, "{:?} leaves its rows", v);
                    }
                }
            }
        }
    }
}
