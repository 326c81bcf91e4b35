//! NKI access patterns (`tensor.ap(...)`) on the DMA ops, and the software-DGE copy they
//! lower to ([`ApDma`]).
//!
//! # Elements and patterns
//!
//! A tensor's elements are numbered row-major over its NKI shape. In HBM element `e` is
//! `e * size` bytes from the start; on SBUF/PSUM a `[P, f1, f2, ...]` tensor is
//! partition-major: element `e` is free element `e % F` (`F = f1 * f2 * ...`) of
//! partition `e / F` counted from the tensor's first partition.
//!
//! Position `(i0, ..., in)` of a side's pattern `[[step0, num0], ..., [stepn, numn]]`
//! (1 to 5 pairs, outermost first, steps in elements) is element
//! `offset + sum(i_k * step_k)`. With `vector_offset`, the term of dim
//! `d = indirect_dim` is `index[i_d] * stride_d` instead, `stride_d = prod(shape[d+1:])` of
//! the tensor; with `scalar_offset`, the scalar's value times `stride_d` is added (`d` a
//! dim of the tensor, as NKI's `indirect_dim` is: past the pattern's pairs when only a
//! scalar offset uses it). Element
//! `k` of the source's walk (row-major over its pattern) goes to element `k` of the
//! destination's.
//!
//! # Rules (checked when the op is lowered, each error naming the side and the rule)
//!
//! - both sides visit the same number of elements; their dtypes may differ, and then
//!   each element is cast through float32 (NKI: "dma_copy between dtypes casts src ->
//!   float32 -> dst"; with a compute op both operands go to f32 and the result to the
//!   destination's dtype), as [`dma::cast`] defines;
//! - every position lies inside its tensor, for every in-bounds index (`0 <= index <
//!   shape[d]`) and a scalar offset of 0; on an indexed side where not every in-bounds
//!   index keeps it inside (a block of rows per index, NKI's KV-cache write), for one at
//!   least, and the op checks the indices it reads when it runs
//!   ([`ApSide::scalar_reading`], [`Error::ApIndexLeaves`]). The scalar's value is checked
//!   when the op runs ([`ApSide::check_scalar`]: with an index tile on the side, for the
//!   in-bounds indices the op reads, each shifted by the scalar; an index out of bounds is
//!   judged alone);
//! - on SBUF/PSUM the first pair steps partitions (NKI's convention): its step is a
//!   multiple of `F` (or its count 1), and the other pairs stay inside one partition row;
//! - an index tile is a `[1, N]` vector or a `(N, 1)` tile (one index per partition) of
//!   u32 or i32 in SBUF, or an `.ap()` of any such tile that walks `N` of its elements by
//!   the rules of a side ([`IndexAp`]; index `k` is element `k` of the walk), `N` the
//!   indirect dim's count, at most 4096 (the copy is one DGE request, and the DGE takes at
//!   most 4096 indices per indexed side); a negative i32 is out of bounds (read as u32 it
//!   is at least 2^31, above any tensor dim);
//! - a scalar offset is a 1x1 i32 or i64 tensor in SBUF or HBM (NKI's `scalar_load` of
//!   an `NkiScalar`); i64 only when the side's tensor is in HBM (NKI: "on an SBUF or PSUM
//!   operand the offset must be nl.int32"; int64 exists to reach HBM past a 32-bit byte
//!   offset). The value is read at its dtype when the op runs (an i64 exactly, no float
//!   conversion) and must keep every position inside the tensor; under `oob = skip` a
//!   side without an index tile whose scalar does not moves nothing of the copy
//!   ([`ApDma::skipped_offsets`]).
//!
//! The copy runs on the software DGE (the GpSimd core generating descriptors from the
//! whole pattern) or the closed-form reference; there is no POOL kernel for it.

use dma::addr::{PSUM_STRIDE, SBUF_STRIDE};
use dma::{ComputeOp, Dtype, Fabric, FabricAddr, Generation, Space};
use smallvec::SmallVec;

use super::{Lowered, OobMode};
use crate::core_state::{IndexSide, SkippedOffset};
use crate::error::Error;

/// The most `[step, num]` pairs a pattern has.
pub const MAX_AP_DIMS: usize = 5;

/// A tensor as an access pattern sees it: where element 0 is, its space, NKI shape and
/// dtype.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApTensor {
    /// The tensor's name, for messages.
    pub name: String,
    /// Fabric address of element 0.
    pub start: FabricAddr,
    /// HBM, SBUF or PSUM.
    pub space: Space,
    /// The NKI shape (on SBUF/PSUM `shape[0]` is the partition count).
    pub shape: Vec<u64>,
    /// The element dtype.
    pub dtype: Dtype,
}

impl ApTensor {
    /// Elements in the tensor.
    pub fn elements(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Elements per partition row on SBUF/PSUM (`F`); the whole tensor in HBM.
    pub fn row_elements(&self) -> u64 {
        match self.space {
            Space::Hbm => self.elements(),
            _ => self.shape.iter().skip(1).product(),
        }
    }

    /// `prod(shape[dim + 1:])`: the elements one step along `dim` spans.
    pub fn stride(&self, dim: usize) -> u64 {
        self.shape.iter().skip(dim + 1).product()
    }

    /// Bytes between partitions (`None` in HBM).
    pub fn partition_stride(&self) -> Option<u64> {
        match self.space {
            Space::Hbm => None,
            Space::Sbuf => Some(SBUF_STRIDE),
            Space::Psum => Some(PSUM_STRIDE),
        }
    }

    /// Fabric address of element `e` (`e < elements()`, which the caller proved).
    pub fn addr(&self, e: u64) -> FabricAddr {
        let size = self.dtype.size() as u64;
        match self.partition_stride() {
            None => FabricAddr(self.start.0 + e * size),
            Some(stride) => {
                let f = self.row_elements().max(1);
                FabricAddr(self.start.0 + (e / f) * stride + (e % f) * size)
            }
        }
    }
}

/// The positions a pattern of `dims` visits, `None` past `u64::MAX`.
fn walk_elements(dims: &[ApDim]) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |n, d| n.checked_mul(u64::from(d.num)))
}

/// One `[step, num]` pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApDim {
    /// Elements between positions (signed).
    pub step: i64,
    /// Positions (at least 1).
    pub num: u32,
}

/// One side of a DMA: a tensor and the pattern walking it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApSide {
    /// The tensor walked.
    pub tensor: ApTensor,
    /// Element offset of position 0.
    pub offset: u64,
    /// The pattern, outermost first.
    pub dims: SmallVec<[ApDim; MAX_AP_DIMS]>,
    /// The dim the index tile or scalar applies to.
    pub indirect_dim: usize,
    /// `vector_offset`: one index per position of `indirect_dim`.
    pub vector_offset: Option<IndexAp>,
    /// `scalar_offset`: a 1x1 i32 or i64 tensor whose value times `stride_d` is added.
    pub scalar_offset: Option<ApTensor>,
}

/// A `vector_offset`: an index tile read whole (a `[1, N]` vector or an `(N, 1)` tile, one
/// index per partition) or through NKI's `.ap()` of it (`i_sb.ap([[NT, 128], [1, 1]],
/// offset = t)`: column `t` of a `[128, NT]` tile). Index `k` is element `k` of the view's
/// walk, numbered as a side's positions are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IndexAp {
    /// The index tile.
    pub tensor: ApTensor,
    /// Element offset of index 0 (0 for the whole tile).
    pub offset: u64,
    /// The view's pattern, outermost first; `None` reads the whole tile.
    pub ap: Option<SmallVec<[ApDim; MAX_AP_DIMS]>>,
}

impl IndexAp {
    /// The whole tile `tensor`, element by element.
    pub fn whole(tensor: ApTensor) -> IndexAp {
        IndexAp {
            tensor,
            offset: 0,
            ap: None,
        }
    }

    /// The view's pattern: its `.ap()`, or for the whole tile every partition row in turn.
    pub fn dims(&self) -> SmallVec<[ApDim; MAX_AP_DIMS]> {
        if let Some(ap) = &self.ap {
            return ap.clone();
        }
        let f = self.tensor.row_elements().max(1);
        let rows = self.tensor.elements() / f;
        [(f, rows), (1, f)]
            .into_iter()
            .map(|(step, num)| ApDim {
                step: step as i64,
                num: num as u32,
            })
            .collect()
    }

    /// The view for a message about index `k`: the tile's name, and for an `.ap()` the
    /// tile element holding it (`the .ap() view of i (i[3, 1])`).
    pub fn describe(&self, k: u32) -> String {
        let name = &self.tensor.name;
        if self.ap.is_none() {
            return name.clone();
        }
        let mut rest = self.element(k);
        let mut at: Vec<String> = Vec::with_capacity(self.tensor.shape.len());
        for &d in self.tensor.shape.iter().rev() {
            at.push((rest % d.max(1)).to_string());
            rest /= d.max(1);
        }
        at.reverse();
        format!("the .ap() view of {name} ({name}[{}])", at.join(", "))
    }

    /// The view as a plain side (no offsets of its own), for the pattern rules and walks.
    fn as_side(&self) -> ApSide {
        ApSide {
            tensor: self.tensor.clone(),
            offset: self.offset,
            dims: self.dims(),
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        }
    }

    /// The tile element holding index `k` (`k` below the view's element count; lowering
    /// proved every element of the view inside the tile).
    pub fn element(&self, k: u32) -> u64 {
        let mut rest = u64::from(k);
        let mut e = i128::from(self.offset);
        for d in self.dims().iter().rev() {
            let n = u64::from(d.num);
            e += i128::from(d.step) * i128::from(rest % n);
            rest /= n;
        }
        e as u64
    }

    /// Fabric address of index `k` ([`IndexAp::element`]).
    pub fn addr(&self, k: u32) -> FabricAddr {
        self.tensor.addr(self.element(k))
    }
}

/// The values an indexed pair's term takes: index `lo..=hi`, each plus `shift` (a scalar
/// offset on the same side), times the indirect dim's stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexSpan {
    /// The lowest index.
    pub lo: i128,
    /// The highest index.
    pub hi: i128,
    /// Added to each.
    pub shift: i128,
}

impl IndexSpan {
    /// The lowest and the highest of `values` below `bound` (the in-bounds indices: an
    /// i32 read as u32, so a negative one is not), no shift; `None` if there is none.
    pub fn moving(values: &[u32], bound: u64) -> Option<IndexSpan> {
        let moving = values.iter().map(|&v| u64::from(v)).filter(|&v| v < bound);
        let (lo, hi) = moving.fold((None, None), |(lo, hi): (Option<u64>, Option<u64>), v| {
            (
                Some(lo.map_or(v, |l| l.min(v))),
                Some(hi.map_or(v, |h| h.max(v))),
            )
        });
        Some(IndexSpan {
            lo: i128::from(lo?),
            hi: i128::from(hi?),
            shift: 0,
        })
    }
}

/// A side's reach relative to its offset: the lowest and highest element offsets over
/// every position (and, for an indexed side, every index of an [`IndexSpan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Reach {
    lo: i128,
    hi: i128,
}

impl ApSide {
    /// The whole of `tensor` walked one pair per dim (`prod(shape[k+1:])` elements apart,
    /// `shape[k]` times): the walk a transpose permutes.
    pub fn by_dims(tensor: ApTensor) -> ApSide {
        let dims = (0..tensor.shape.len())
            .map(|k| ApDim {
                step: tensor.stride(k) as i64,
                // tensors are at most 2^30 bytes, so every dim fits 32 bits
                num: tensor.shape[k] as u32,
            })
            .collect();
        ApSide {
            tensor,
            offset: 0,
            dims,
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        }
    }

    /// Positions the pattern visits (`u64::MAX` for a pattern whose counts multiply past
    /// it, which lowering refuses).
    pub fn elements(&self) -> u64 {
        walk_elements(&self.dims).unwrap_or(u64::MAX)
    }

    /// Whether its addresses depend on a run-time value: a vector or scalar offset.
    pub fn dynamic(&self) -> bool {
        self.vector_offset.is_some() || self.scalar_offset.is_some()
    }

    /// `stride_d` of the indirect dim, in elements.
    pub fn indirect_stride(&self) -> u64 {
        self.tensor.stride(self.indirect_dim)
    }

    /// The bound on indices: the tensor's size along the indirect dim.
    pub fn index_bound(&self) -> u64 {
        self.tensor
            .shape
            .get(self.indirect_dim)
            .copied()
            .unwrap_or(0)
    }

    /// Fabric address of index `k` of the vector offset (`k` below the indirect dim's
    /// count, which lowering proved equal to the view's).
    pub fn index_addr(&self, k: u32) -> Option<FabricAddr> {
        self.vector_offset.as_ref().map(|v| v.addr(k))
    }

    /// Whether `dim` is the one an index tile replaces.
    fn indexed_dim(&self, dim: usize) -> bool {
        self.vector_offset.is_some() && dim == self.indirect_dim
    }

    /// The element offsets the pairs from `first` on reach (see [`Reach`]); the indexed
    /// pair, if among them, spans the index values of `indices`.
    fn reach_from(&self, first: usize, indices: IndexSpan) -> Reach {
        let mut r = Reach { lo: 0, hi: 0 };
        for k in first..self.dims.len() {
            let ((lo, _), (hi, _)) = self.term(k, indices);
            (r.lo, r.hi) = (r.lo + lo, r.hi + hi);
        }
        r
    }

    /// The lowest and the highest element offset pair `k` adds, each with the position
    /// along `k` that gives it (for messages): `i * step` for `i < num`, or for the
    /// indexed pair `(index + shift) * stride_d` over the values of `indices`.
    fn term(&self, k: usize, indices: IndexSpan) -> ((i128, String), (i128, String)) {
        if self.indexed_dim(k) {
            let stride = i128::from(self.indirect_stride());
            let at = |v: i128| match indices.shift {
                0 => format!("index {v}"),
                s => format!(
                    "index {v} {} scalar {}",
                    if s < 0 { '-' } else { '+' },
                    s.abs()
                ),
            };
            let (lo, hi) = (indices.lo + indices.shift, indices.hi + indices.shift);
            return ((lo * stride, at(indices.lo)), (hi * stride, at(indices.hi)));
        }
        let d = self.dims[k];
        let span = i128::from(d.step) * i128::from(d.num - 1);
        let (zero, last) = ((0, "0".to_string()), (span, (d.num - 1).to_string()));
        match span < 0 {
            true => (last, zero),
            false => (zero, last),
        }
    }

    /// The span of index values the lowering checks: every in-bounds index
    /// (`0..shape[d]`), no scalar.
    fn in_bounds(&self) -> IndexSpan {
        let last = self.index_bound().saturating_sub(1);
        IndexSpan {
            lo: 0,
            hi: i128::from(last),
            shift: 0,
        }
    }

    /// The extent rule lowering checks: every position inside the tensor (and on core the
    /// partition rule) for every in-bounds index, or on an indexed side for one at least
    /// (the smallest whose walk fits): the run checks the indices it reads
    /// ([`ApSide::scalar_reading`]), so a block of rows per index (NKI's KV-cache write,
    /// `S` rows from each token's row) is refused only if no index could place it.
    fn lowering_extent_error(&self) -> Option<String> {
        let every = self.extent_error(0, self.in_bounds())?;
        let one = |v: i128| IndexSpan {
            lo: v,
            hi: v,
            shift: 0,
        };
        match self.fitting_index() {
            Some(v) => self.extent_error(0, one(v)).map(|_| every),
            // none fits: the message names the lowest index's corner (else the highest's)
            None => {
                let last = i128::from(self.index_bound()).max(1) - 1;
                let at = |v| self.extent_error(0, one(v));
                Some(at(0).or_else(|| at(last)).unwrap_or(every))
            }
        }
    }

    /// The smallest in-bounds index whose walk lies inside the tensor and, on core, inside
    /// its partition rows, if any: each rule bounds the index term `v * stride_d` linearly
    /// (the other terms reach `lo..=hi` from the offset, or from the row's column).
    fn fitting_index(&self) -> Option<i128> {
        self.vector_offset.as_ref()?;
        let zero = IndexSpan {
            lo: 0,
            hi: 0,
            shift: 0,
        };
        let stride = i128::from(self.indirect_stride()).max(1);
        let base = i128::from(self.offset);
        // v with from <= v * stride <= to
        let within = |from: i128, to: i128| (-((-from).div_euclid(stride)), to.div_euclid(stride));
        let r = self.reach_from(0, zero);
        let last = i128::from(self.tensor.elements()) - 1;
        let (mut lo, mut hi) = within(-(base + r.lo), last - base - r.hi);
        if self.tensor.partition_stride().is_some() && self.indirect_dim >= 1 {
            let f = i128::from(self.tensor.row_elements().max(1));
            let (col, r) = (base.rem_euclid(f), self.reach_from(1, zero));
            let (a, b) = within(-(col + r.lo), f - 1 - col - r.hi);
            (lo, hi) = (lo.max(a), hi.min(b));
        }
        let lo = lo.max(0);
        (lo <= hi.min(i128::from(self.index_bound()) - 1)).then_some(lo)
    }

    /// The pattern's element offset of position `pos` (multi-index, outermost first) with
    /// `index` for the indexed dim and the scalar offset `scalar`.
    pub fn element(&self, pos: &[u32], index: u64, scalar: i64) -> i128 {
        let stride = i128::from(self.indirect_stride());
        let mut e = i128::from(self.offset);
        for (k, (d, &i)) in self.dims.iter().zip(pos).enumerate() {
            e += match self.indexed_dim(k) {
                true => i128::from(index) * stride,
                false => i128::from(d.step) * i128::from(i),
            };
        }
        e + i128::from(scalar) * stride
    }

    /// Whether every position lies inside the tensor (and, on SBUF/PSUM, whether the
    /// pattern is a partition step over in-row walks) with the scalar offset `scalar`, the
    /// indexed pair taking the values of `indices` (the scalar goes into their shift on an
    /// indexed side): the rule broken, if any.
    fn extent_error(&self, scalar: i64, mut indices: IndexSpan) -> Option<String> {
        let mut base = i128::from(self.offset);
        match self.vector_offset.is_some() {
            true => indices.shift += i128::from(scalar),
            false => base += i128::from(scalar) * i128::from(self.indirect_stride()),
        }
        self.outside_error(base, indices)
            .or_else(|| self.partition_error(base, indices))
    }

    /// The first pair (outermost first) whose reach takes a position out of the tensor,
    /// with that position's corner and element, if any.
    fn outside_error(&self, base: i128, indices: IndexSpan) -> Option<String> {
        let elements = i128::from(self.tensor.elements());
        // the whole reach decides (an index's term may pull back a pair before it that
        // steps down); the pairs are then walked to name the first whose prefix is out
        let all = self.reach_from(0, indices);
        if base + all.lo >= 0 && base + all.hi < elements {
            return None;
        }
        let (mut lo, mut hi) = (base, base);
        let (mut lo_at, mut hi_at) = (Vec::new(), Vec::new());
        for (k, d) in self.dims.iter().enumerate() {
            let ((a, at_lo), (b, at_hi)) = self.term(k, indices);
            (lo, hi) = (lo + a, hi + b);
            lo_at.push(at_lo);
            hi_at.push(at_hi);
            let (corner, e) = match (lo < 0, hi >= elements) {
                (true, _) => (&lo_at, lo),
                (_, true) => (&hi_at, hi),
                _ => continue,
            };
            return Some(format!(
                "ap[{k}] = [{}, {}] takes position [{}] to element {e}, outside the {elements} elements of {} (shape {:?})",
                d.step,
                d.num,
                corner.join(", "),
                self.tensor.name,
                self.tensor.shape
            ));
        }
        None
    }

    /// The SBUF/PSUM rule: the first pair steps whole partitions, the rest stay in a row.
    fn partition_error(&self, base: i128, indices: IndexSpan) -> Option<String> {
        self.tensor.partition_stride()?;
        let f = i128::from(self.tensor.row_elements().max(1));
        let first = self.dims.first()?;
        let first_steps_rows =
            self.indexed_dim(0) || first.num == 1 || i128::from(first.step) % f == 0;
        if !first_steps_rows {
            return Some(format!(
                "on {} the first [step, num] pair steps partitions: step {} must be a multiple of the {f} elements of a partition row of {}",
                self.tensor.space.name(),
                first.step,
                self.tensor.name
            ));
        }
        // The indexed pair keeps its own tensor dim's stride.
        let r = self.reach_from(1, indices);
        let col = base.rem_euclid(f);
        match col + r.lo >= 0 && col + r.hi < f {
            true => None,
            false => Some(format!(
                "the pairs after the first must stay inside one partition row of {} ({f} elements), but from element {col} of the row they reach {}..={}",
                self.tensor.name,
                col + r.lo,
                col + r.hi
            )),
        }
    }

    /// The run-time check of a scalar offset's value: every position inside the tensor,
    /// for every index of `indices` (on an indexed side: the values of its in-bounds
    /// indices, [`IndexSpan::moving`]; `None` when no index moves anything).
    pub fn check_scalar(
        &self,
        side: &'static str,
        value: i64,
        indices: Option<IndexSpan>,
    ) -> Result<(), Error> {
        let indices = match (&self.vector_offset, indices) {
            (None, _) => self.in_bounds(),
            (Some(_), Some(span)) => span,
            (Some(_), None) => return Ok(()),
        };
        match self.extent_error(value, indices) {
            None => Ok(()),
            Some(rule) => Err(Error::ApScalarOffset {
                side,
                value,
                rule,
                index: None,
                bound: self.index_bound(),
            }),
        }
    }

    /// The scalar offset's value as the op runs, read from `fabric` and checked (0
    /// without one); `side` names the side in errors.
    pub fn scalar_value(&self, fabric: &Fabric, side: &'static str) -> Result<i64, Error> {
        Ok(self.scalar_reading(fabric, side)?.0)
    }

    /// [`ApSide::scalar_value`], and with it, on a side with an index tile and a scalar
    /// offset, the span of its in-bounds indices (the tile read once for both): `None`
    /// where no index is in bounds, or the side has no tile or no scalar.
    pub fn scalar_reading(
        &self,
        fabric: &Fabric,
        side: &'static str,
    ) -> Result<(i64, Option<IndexSpan>), Error> {
        // validation proved the dtype is i32 or i64
        let value = match &self.scalar_offset {
            None => 0,
            Some(t) if t.dtype == Dtype::I64 => {
                let mut v = [0i64];
                fabric.read_elems(t.start, &mut v)?;
                v[0]
            }
            Some(t) => {
                let mut v = [0i32];
                fabric.read_elems(t.start, &mut v)?;
                i64::from(v[0])
            }
        };
        if self.vector_offset.is_none() {
            if self.scalar_offset.is_some() {
                self.check_scalar(side, value, None)?;
            }
            return Ok((value, None));
        }
        // without a scalar, a walk that fits for every in-bounds index needs no reading
        if self.scalar_offset.is_none() && self.extent_error(0, self.in_bounds()).is_none() {
            return Ok((0, None));
        }
        let values = self.index_values(fabric)?.unwrap_or_default();
        let moving = IndexSpan::moving(&values, self.index_bound());
        let checked = self.check_scalar(side, value, moving);
        checked.map_err(|e| self.culprit(side, value, &values).unwrap_or(e))?;
        Ok((value, moving))
    }

    /// The error of the first in-bounds index of `values` (in position order) whose walk
    /// the scalar offset `value` (0 without one) takes out of the tensor, naming its
    /// position and value.
    fn culprit(&self, side: &'static str, value: i64, values: &[u32]) -> Option<Error> {
        let bound = self.index_bound();
        values.iter().enumerate().find_map(|(k, &v)| {
            let span = IndexSpan::moving(&[v], bound)?;
            let Err(Error::ApScalarOffset { rule, .. }) =
                self.check_scalar(side, value, Some(span))
            else {
                return None;
            };
            Some(match self.scalar_offset {
                Some(_) => Error::ApScalarOffset {
                    side,
                    value,
                    rule,
                    index: Some((k as u32, v)),
                    bound,
                },
                None => Error::ApIndexLeaves {
                    side,
                    position: k as u32,
                    value: v,
                    rule,
                    bound,
                },
            })
        })
    }
}

impl ApSide {
    /// The index tile's values in position order, an i32 read as u32 (`None` without a
    /// vector offset).
    pub fn index_values(&self, fabric: &Fabric) -> Result<Option<Vec<u32>>, Error> {
        if self.vector_offset.is_none() {
            return Ok(None);
        }
        let n = self.dims.get(self.indirect_dim).map_or(0, |d| d.num);
        let mut values = Vec::with_capacity(n as usize);
        for k in 0..n {
            let mut v = [0u32];
            if let Some(at) = self.index_addr(k) {
                fabric.read_elems(at, &mut v)?;
            }
            values.push(v[0]);
        }
        Ok(Some(values))
    }
}

/// Two positions of one index tile naming one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Collision {
    /// The earlier position.
    pub first: u32,
    /// The later position.
    pub second: u32,
    /// The index both hold.
    pub value: u32,
}

/// Every position of `values` that repeats an earlier one, among the positions that
/// `moves`, in position order, each paired with the first position holding its value.
pub fn collisions(values: &[u32], moves: impl Fn(usize) -> bool) -> Vec<Collision> {
    let mut seen = std::collections::HashMap::new();
    let mut out = Vec::new();
    for (pos, &value) in values.iter().enumerate().filter(|(p, _)| moves(*p)) {
        match seen.get(&value) {
            Some(&first) => out.push(Collision {
                first,
                second: pos as u32,
                value,
            }),
            None => {
                seen.insert(value, pos as u32);
            }
        }
    }
    out
}

/// Who makes a copy's descriptors (NKI's `dge_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum DgeMode {
    /// `unknown`: hostsim's choice (the hardware DGE for a direct copy from cayman on,
    /// else the software DGE).
    #[default]
    Chosen,
    /// `swdge`: the software DGE on the GpSimd core.
    Software,
    /// `hwdge`: the hardware DGE (cayman and later): a run-time start address, no gather
    /// or scatter.
    Hardware,
    /// `none`: the Neuron Runtime builds them before the kernel runs: no address may
    /// depend on a run-time value, and no DGE time is spent.
    Prebuilt,
}

impl DgeMode {
    /// Every mode.
    pub const ALL: [DgeMode; 4] = [
        DgeMode::Chosen,
        DgeMode::Software,
        DgeMode::Hardware,
        DgeMode::Prebuilt,
    ];

    /// The rule a copy with these sides breaks under this mode, if any.
    pub fn refusal(self, src: &ApSide, dst: &ApSide) -> Option<String> {
        let vector = src.vector_offset.is_some() || dst.vector_offset.is_some();
        match self {
            DgeMode::Prebuilt if src.dynamic() || dst.dynamic() => Some(
                "none: the Neuron Runtime builds the descriptors before the kernel runs, so no address may depend on a run-time value (a vector_offset or scalar_offset needs swdge or hwdge)".into(),
            ),
            DgeMode::Hardware if vector => Some(
                "hwdge: a gather or scatter (a vector_offset) needs the software DGE (NKI: only sw_dge performs them)".into(),
            ),
            _ => None,
        }
    }

    /// The error of this mode on `generation` if that has no such DGE (hwdge on sunda).
    pub fn check_generation(self, op: &'static str, generation: Generation) -> Result<(), Error> {
        match (self, generation) {
            (DgeMode::Hardware, Generation::Sunda) => Err(Error::ApPattern {
                op,
                side: "dge_mode",
                rule: "hwdge: sunda has no hardware DGE".into(),
            }),
            _ => Ok(()),
        }
    }
}

/// NKI `dma_copy` / `dma_compute` over access patterns, run by the software DGE.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApDma {
    /// The source side.
    pub src: ApSide,
    /// The destination side.
    pub dst: ApSide,
    /// `dst (op)= src` (NONE copies).
    pub op: ComputeOp,
    /// What an out-of-bounds index does.
    pub oob: OobMode,
    /// Destination indices promised unique: duplicates with a compute op are an error,
    /// a plain copy lands last-index-wins.
    pub unique_indices: bool,
    /// Who makes its descriptors.
    pub dge: DgeMode,
}

impl ApDma {
    /// Whether either side is indexed.
    pub fn indexed(&self) -> bool {
        self.src.vector_offset.is_some() || self.dst.vector_offset.is_some()
    }

    /// Whether either side's addresses depend on a run-time value ([`ApSide::dynamic`]).
    pub fn dynamic(&self) -> bool {
        self.src.dynamic() || self.dst.dynamic()
    }

    /// `e` in this op's terms: a hard OOB error names the index tile, the value as its
    /// dtype reads it and the tensor dim; other errors pass through.
    pub fn in_terms(&self, e: Error) -> Error {
        let Error::IndexOutOfBounds {
            side,
            position,
            value,
            bound,
        } = e
        else {
            return e;
        };
        let s = match side {
            IndexSide::Src => &self.src,
            IndexSide::Dst => &self.dst,
        };
        let Some(view) = &s.vector_offset else {
            return e;
        };
        let value = match view.tensor.dtype {
            Dtype::I32 => i64::from(value as i32),
            _ => i64::from(value),
        };
        Error::ApIndexOutOfBounds {
            side,
            position,
            value,
            tile: view.describe(position),
            dim: s.indirect_dim,
            tensor: s.tensor.name.clone(),
            bound,
        }
    }

    /// Under `oob = skip`, the sides without an index tile whose scalar offset (read from
    /// `fabric`) takes their walk out of the tensor, src first: the copy moves nothing if
    /// any. Empty under `error` (there the scalar's check fails the op).
    pub fn skipped_offsets(&self, fabric: &Fabric) -> Result<Vec<SkippedOffset>, Error> {
        let mut skipped = Vec::new();
        if self.oob != OobMode::Skip {
            return Ok(skipped);
        }
        for (side, name, s) in [
            (IndexSide::Src, "src", &self.src),
            (IndexSide::Dst, "dst", &self.dst),
        ] {
            if s.vector_offset.is_some() || s.scalar_offset.is_none() {
                continue;
            }
            match s.scalar_value(fabric, name) {
                Err(Error::ApScalarOffset { value, .. }) => {
                    skipped.push(SkippedOffset { side, value })
                }
                other => drop(other?),
            }
        }
        Ok(skipped)
    }

    /// Whether both sides are indexed one index per position: equal index counts and
    /// equal elements per index (then a position moves only if both its indices do).
    pub fn coupled(&self) -> bool {
        let per_index = |s: &ApSide| {
            s.vector_offset.as_ref()?;
            let inner: u64 = s.dims[s.indirect_dim + 1..]
                .iter()
                .map(|d| u64::from(d.num))
                .product();
            Some((s.dims[s.indirect_dim].num, inner))
        };
        per_index(&self.src).is_some() && per_index(&self.src) == per_index(&self.dst)
    }

    /// The destination positions a plain copy under `unique_indices` lands last-index-wins
    /// (empty for any other copy): in-bounds repeats, as the run will see them.
    pub fn plain_copy_collisions(&self, fabric: &Fabric) -> Result<Vec<Collision>, Error> {
        if self.op != ComputeOp::None || !self.unique_indices {
            return Ok(Vec::new());
        }
        let Some(dst) = self.dst.index_values(fabric)? else {
            return Ok(Vec::new());
        };
        let src = match self.coupled() {
            true => self.src.index_values(fabric)?,
            false => None,
        };
        let (db, sb) = (self.dst.index_bound(), self.src.index_bound());
        let ok = |v: Option<&u32>, bound: u64| v.is_some_and(|&v| u64::from(v) < bound);
        Ok(collisions(&dst, |p| {
            ok(dst.get(p), db) && src.as_ref().is_none_or(|s| ok(s.get(p), sb))
        }))
    }
}

/// The options of an access-pattern DMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ApOptions {
    /// `dst (op)= src`.
    pub op: ComputeOp,
    /// The OOB policy of the indexed sides.
    pub oob: OobMode,
    /// `unique_indices`.
    pub unique_indices: bool,
    /// `dge_mode`.
    pub dge: DgeMode,
}

/// The rule error of `side`.
fn side_error(op: &'static str, side: &'static str, rule: String) -> Error {
    Error::ApPattern { op, side, rule }
}

/// Checks an access-pattern DMA (module docs, "Rules") and lowers it to one
/// [`ApDma`].
pub fn dma_copy_ap(
    op: &'static str,
    src: ApSide,
    dst: ApSide,
    opts: ApOptions,
) -> Result<Lowered, Error> {
    if let Some(rule) = opts.dge.refusal(&src, &dst) {
        return Err(side_error(op, "dge_mode", rule));
    }
    for (name, side) in [("src", &src), ("dst", &dst)] {
        check_side(op, name, side)?;
    }
    if src.elements() != dst.elements() {
        return Err(side_error(
            op,
            "dst",
            format!(
                "visits {} elements but src visits {} (the two walks pair element k with element k)",
                dst.elements(),
                src.elements()
            ),
        ));
    }
    Ok(Lowered {
        ap_dmas: vec![ApDma {
            src,
            dst,
            op: opts.op,
            oob: opts.oob,
            unique_indices: opts.unique_indices,
            dge: opts.dge,
        }],
        ..Lowered::default()
    })
}

/// One side's rules.
pub(super) fn check_side(op: &'static str, name: &'static str, s: &ApSide) -> Result<(), Error> {
    let err = |rule: String| side_error(op, name, rule);
    if s.dims.is_empty() || s.dims.len() > MAX_AP_DIMS {
        return Err(err(format!(
            "ap has {} [step, num] pairs; it takes 1 to {MAX_AP_DIMS}",
            s.dims.len()
        )));
    }
    if let Some(k) = s.dims.iter().position(|d| d.num == 0) {
        return Err(err(format!(
            "ap[{k}] has num 0 (every count is at least 1)"
        )));
    }
    if walk_elements(&s.dims).is_none() {
        return Err(err(counts_overflow(&s.dims)));
    }
    if s.dynamic() && s.indirect_dim >= s.tensor.shape.len() {
        return Err(err(format!(
            "indirect_dim {} is out of range: {} has {} dims (it names the tensor dim whose stride the offset steps)",
            s.indirect_dim,
            s.tensor.name,
            s.tensor.shape.len()
        )));
    }
    if s.vector_offset.is_some() && s.indirect_dim >= s.dims.len() {
        return Err(err(format!(
            "indirect_dim {} is out of range: the ap has {} pairs, and a vector_offset replaces the term of pair indirect_dim",
            s.indirect_dim,
            s.dims.len()
        )));
    }
    if !s.dynamic() && s.indirect_dim != 0 {
        return Err(err(format!(
            "indirect_dim {} is given without vector_offset or scalar_offset",
            s.indirect_dim
        )));
    }
    if let Some(t) = &s.vector_offset {
        check_index_tile(s, t).map_err(err)?;
    }
    if let Some(t) = &s.scalar_offset {
        check_scalar_tile(&s.tensor, t).map_err(err)?;
    }
    match s.lowering_extent_error() {
        Some(rule) => Err(err(rule)),
        None => Ok(()),
    }
}

/// Why tile `name` cannot hold a DMA's indices (its dtype or its space), if it cannot.
pub fn index_tile_fault(name: &str, dtype: Dtype, space: Space) -> Option<String> {
    if !matches!(dtype, Dtype::U32 | Dtype::I32) {
        return Some(format!(
            "{name} has dtype {dtype}; index tiles are u32 or i32"
        ));
    }
    if space != Space::Sbuf {
        let space = space.name();
        return Some(format!("{name} is in {space}; index tiles are in SBUF"));
    }
    None
}

/// A u32/i32 index tile in SBUF holding `N` indices, `N` the indirect dim's count: a whole
/// `[1, N]` or `(N, 1)` tile, or an `.ap()` of any tile whose walk stays inside it (the
/// side rules, [`ApSide::extent_error`]) and visits `N` elements.
fn check_index_tile(s: &ApSide, v: &IndexAp) -> Result<(), String> {
    let n = u64::from(s.dims[s.indirect_dim].num);
    let t = &v.tensor;
    if let Some(fault) = index_tile_fault(&t.name, t.dtype, t.space) {
        return Err(format!("vector_offset {fault}"));
    }
    let limit = u64::from(dge::indirection::MAX_INDICES);
    if n > limit {
        return Err(format!(
            "vector_offset {} holds {n} indices (ap[{}] num {n}); the copy is one DGE request, which takes at most {limit} indices per indexed side",
            t.name, s.indirect_dim
        ));
    }
    let Some(ap) = &v.ap else {
        return match t.shape.as_slice() {
            [1, m] | [m, 1] if *m == n => Ok(()),
            shape => Err(format!(
                "vector_offset {} has shape {shape:?}; it must be {}, one index per position of ap[{}] (num {n}), or pick {n} of its elements with an .ap()",
                t.name,
                match n {
                    1 => "[1, 1]".to_string(),
                    _ => format!("[1, {n}] or [{n}, 1]"),
                },
                s.indirect_dim
            )),
        };
    };
    let view = v.as_side();
    if ap.is_empty() || ap.len() > MAX_AP_DIMS || ap.iter().any(|d| d.num == 0) {
        return Err(format!(
            "vector_offset {}: its ap has {} [step, num] pairs{}; it takes 1 to {MAX_AP_DIMS}, each num at least 1",
            t.name,
            ap.len(),
            if ap.iter().any(|d| d.num == 0) { ", one of num 0" } else { "" }
        ));
    }
    if walk_elements(ap).is_none() {
        return Err(format!("vector_offset {}: {}", t.name, counts_overflow(ap)));
    }
    if view.elements() != n {
        return Err(format!(
            "vector_offset {}: its ap visits {} elements, but the side's ap[{}] has num {n} (one index per position)",
            t.name,
            view.elements(),
            s.indirect_dim
        ));
    }
    match view.extent_error(0, view.in_bounds()) {
        Some(rule) => Err(format!("vector_offset {}: {rule}", t.name)),
        None => Ok(()),
    }
}

/// The rule a pattern whose counts multiply past `u64::MAX` breaks.
fn counts_overflow(dims: &[ApDim]) -> String {
    let nums: Vec<String> = dims.iter().map(|d| d.num.to_string()).collect();
    format!(
        "ap's nums multiply to {} positions, more than 2^64 - 1",
        nums.join(" * ")
    )
}

/// A 1x1 i32 or i64 tensor in SBUF or HBM; i64 only on a side whose tensor is in HBM.
fn check_scalar_tile(tensor: &ApTensor, t: &ApTensor) -> Result<(), String> {
    let single = t.shape.iter().all(|&d| d == 1);
    let dtype_ok = matches!(t.dtype, Dtype::I32 | Dtype::I64);
    if !single || !dtype_ok || t.space == Space::Psum {
        return Err(format!(
            "scalar_offset {} is a {:?} {} tensor in {}; it must be a 1x1 i32 or i64 tensor in SBUF or HBM",
            t.name,
            t.shape,
            t.dtype,
            t.space.name()
        ));
    }
    if t.dtype == Dtype::I64 && tensor.space != Space::Hbm {
        return Err(format!(
            "scalar_offset {} is i64 but {} is in {}; on an SBUF or PSUM operand the scalar offset must be i32 (i64 is for HBM access patterns)",
            t.name,
            tensor.name,
            tensor.space.name()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::addr::SBUF_BASE;

    fn hbm(shape: &[u64]) -> ApTensor {
        ApTensor {
            name: "t".into(),
            start: FabricAddr(0x1000),
            space: Space::Hbm,
            shape: shape.to_vec(),
            dtype: Dtype::F32,
        }
    }

    fn sbuf(shape: &[u64], dtype: Dtype) -> ApTensor {
        ApTensor {
            name: "s".into(),
            start: FabricAddr(SBUF_BASE + 64),
            space: Space::Sbuf,
            shape: shape.to_vec(),
            dtype,
        }
    }

    fn side(t: ApTensor, offset: u64, dims: &[(i64, u32)]) -> ApSide {
        ApSide {
            tensor: t,
            offset,
            dims: dims
                .iter()
                .map(|&(step, num)| ApDim { step, num })
                .collect(),
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        }
    }

    const OPTS: ApOptions = ApOptions {
        op: ComputeOp::None,
        oob: OobMode::Error,
        unique_indices: true,
        dge: DgeMode::Chosen,
    };

    #[test]
    fn partition_major_addresses() {
        let t = sbuf(&[4, 2, 3], Dtype::F32);
        assert_eq!(t.row_elements(), 6);
        assert_eq!(t.stride(0), 6);
        assert_eq!(t.stride(1), 3);
        // element 13 = partition 2, free element 1
        assert_eq!(t.addr(13).0, SBUF_BASE + 64 + 2 * SBUF_STRIDE + 4);
        assert_eq!(hbm(&[3, 5]).addr(7).0, 0x1000 + 28);
    }

    #[test]
    fn element_uses_the_index_and_the_scalar() {
        let mut s = side(hbm(&[10, 8]), 2, &[(8, 4), (1, 3)]);
        assert_eq!(s.element(&[1, 2], 0, 0), 2 + 8 + 2);
        s.vector_offset = Some(IndexAp::whole(sbuf(&[4, 1], Dtype::I32)));
        // dim 0's term is index * stride_0 = 7 * 8
        assert_eq!(s.element(&[1, 2], 7, 0), 2 + 56 + 2);
        assert_eq!(s.element(&[1, 2], 7, 1), 2 + 56 + 2 + 8);
    }

    #[test]
    fn a_pattern_past_its_tensor_is_refused() {
        let src = side(hbm(&[4, 8]), 1, &[(8, 4), (1, 8)]);
        let dst = side(hbm(&[4, 8]), 0, &[(8, 4), (1, 8)]);
        let e = dma_copy_ap("dma_copy", src, dst, OPTS).unwrap_err();
        assert_eq!(
            e.to_string(),
            "dma_copy: src: ap[1] = [1, 8] takes position [3, 7] to element 32, outside the 32 elements of t (shape [4, 8])"
        );
    }

    #[test]
    fn sbuf_first_pair_steps_partitions() {
        let t = sbuf(&[4, 8], Dtype::F32);
        let ok = side(t.clone(), 2, &[(8, 4), (1, 6)]);
        assert!(check_side("dma_copy", "dst", &ok).is_ok());
        let across = side(t.clone(), 2, &[(8, 3), (1, 7)]);
        let e = check_side("dma_copy", "dst", &across).unwrap_err();
        assert!(
            e.to_string().contains("stay inside one partition row"),
            "{e}"
        );
        let flat = side(t, 0, &[(1, 32)]);
        let e = check_side("dma_copy", "dst", &flat).unwrap_err();
        assert!(e.to_string().contains("must be a multiple of the 8"), "{e}");
    }

    /// Found by `hostsim fuzz --target oob`: an index on dim 2 of a `[6, 1, 3]` PSUM
    /// tensor spans its own dim (3 elements), not dim 1's; from column 1 of a row it
    /// leaves the row, which the reference and the DGE route read differently. Indices 0
    /// and 1 keep the walk in the row, so lowering takes it, and an index 2 fails the run
    /// on every route, named.
    #[test]
    fn regression_an_inner_indexed_pair_spans_its_own_dim() {
        let mut f = Fabric::new(dma::Generation::Cayman);
        let mut t = sbuf(&[6, 1, 3], Dtype::F32);
        t.space = Space::Psum;
        let mut s = side(t, 4, &[(3, 3), (3, 1), (1, 31)]);
        s.indirect_dim = 2;
        let mut tile = sbuf(&[31, 1], Dtype::U32);
        tile.start = FabricAddr(SBUF_BASE + 256);
        s.vector_offset = Some(IndexAp::whole(tile.clone()));
        assert!(check_side("dma_copy", "src", &s).is_ok());
        for p in 0..31 {
            f.write_elems(tile.addr(p), &[1u32]).unwrap();
        }
        assert_eq!(s.scalar_reading(&f, "src").unwrap().0, 0);
        f.write_elems(tile.addr(5), &[2u32]).unwrap();
        let e = s.scalar_reading(&f, "src").unwrap_err();
        assert!(
            matches!(
                e,
                Error::ApIndexLeaves {
                    position: 5,
                    value: 2,
                    bound: 3,
                    ..
                }
            ),
            "{e}"
        );
        assert!(
            e.to_string()
                .contains("from element 1 of the row they reach 3..=3"),
            "{e}"
        );
        // from column 2 no index fits the row but 0: lowering still takes it; from a
        // place where none fits, lowering refuses
        s.offset = 5;
        assert!(check_side("dma_copy", "src", &s).is_ok());
        let mut none = side(hbm(&[4, 3]), 0, &[(3, 2), (1, 13)]);
        none.vector_offset = Some(IndexAp::whole(sbuf(&[2, 1], Dtype::U32)));
        let e = check_side("dma_copy", "src", &none).unwrap_err();
        assert!(e.to_string().contains("outside the 12 elements"), "{e}");
    }

    /// Found by an audit: the walk with a fitting index was judged pair by pair (a later
    /// index term pulls back an earlier negative step), and the partition-row rule was
    /// left out of the search for a fitting index.
    #[test]
    fn a_fitting_index_counts_the_whole_reach_and_the_row_rule() {
        let mut hbm_side = side(hbm(&[3, 4]), 1, &[(-3, 2), (1, 1)]);
        hbm_side.indirect_dim = 1;
        hbm_side.vector_offset = Some(IndexAp::whole(sbuf(&[1, 1], Dtype::U32)));
        assert!(check_side("dma_copy", "src", &hbm_side).is_ok());
        let mut row = side(sbuf(&[2, 8], Dtype::F32), 8, &[(8, 1), (1, 1), (-1, 3)]);
        row.indirect_dim = 1;
        row.vector_offset = Some(IndexAp::whole(sbuf(&[1, 1], Dtype::U32)));
        assert!(check_side("dma_copy", "dst", &row).is_ok());
    }

    /// Whether some index below `bound` keeps every position of `s` inside its tensor
    /// and, on core, each first-pair slice inside the partition row its offset and first
    /// pair put it in (the first pair stepping whole rows), found by walking every
    /// position.
    fn some_index_fits(s: &ApSide) -> bool {
        let elements = s.tensor.elements() as i128;
        let f = s.tensor.row_elements().max(1) as i128;
        let on_core = s.tensor.partition_stride().is_some();
        let first = s.dims[0];
        if on_core && s.indirect_dim != 0 && first.num > 1 && i128::from(first.step) % f != 0 {
            return false;
        }
        (0..s.index_bound()).any(|v| {
            let n: u32 = s.dims.iter().map(|d| d.num).product();
            (0..n).all(|flat| {
                let (mut rest, mut pos) = (flat, vec![0u32; s.dims.len()]);
                for k in (0..s.dims.len()).rev() {
                    pos[k] = rest % s.dims[k].num;
                    rest /= s.dims[k].num;
                }
                let e = s.element(&pos, v, 0);
                // a slice's row is where the offset and the first pair put it: the other
                // pairs add bytes inside that partition (an SBUF address is a partition
                // and a byte offset in it), so they must keep to its row
                let first_term = match s.indirect_dim {
                    0 => i128::from(v) * i128::from(s.indirect_stride()),
                    _ => i128::from(first.step) * i128::from(pos[0]),
                };
                let row = (i128::from(s.offset) + first_term).div_euclid(f);
                e >= 0 && e < elements && (!on_core || (0..f).contains(&(e - row * f)))
            })
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config::with_cases(4000))]
        /// An indexed side is lowered exactly when some in-bounds index could place its
        /// walk (the run then checks the indices it reads).
        #[test]
        fn an_indexed_side_is_lowered_iff_some_index_fits(
            on_core in proptest::bool::ANY,
            shape in proptest::collection::vec(1u64..5, 2..4),
            pairs in proptest::collection::vec((-4i64..5, 1u32..4), 2..4),
            offset in 0u64..40,
            dim in 0usize..3,
        ) {
            let t = if on_core { sbuf(&shape, Dtype::F32) } else { hbm(&shape) };
            let mut s = side(t, offset, &pairs);
            s.indirect_dim = dim % pairs.len().min(shape.len());
            let n = s.dims[s.indirect_dim].num;
            s.vector_offset = Some(IndexAp::whole(sbuf(&[1, u64::from(n)], Dtype::U32)));
            let lowered = check_side("dma_copy", "src", &s).is_ok();
            proptest::prop_assert_eq!(lowered, some_index_fits(&s), "{:?}", s.dims);
        }
    }

    /// NKI's KV-cache write: each token index writes a block of `S` rows from its row. A
    /// block that fits for the indices read runs; one running past the cache fails the
    /// run naming the index, on the DGE's reading and the reference's alike.
    #[test]
    fn a_block_of_rows_per_index_is_checked_for_the_indices_read() {
        let mut f = Fabric::new(dma::Generation::Cayman);
        // V is (B * Smax, d) = (16, 4); 2 tokens write S = 3 rows each
        let mut s = side(hbm(&[16, 4]), 0, &[(1, 2), (4, 3), (1, 4)]);
        let mut tile = sbuf(&[2, 1], Dtype::I32);
        tile.start = FabricAddr(SBUF_BASE + 256);
        s.vector_offset = Some(IndexAp::whole(tile.clone()));
        assert!(check_side("dma_copy", "dst", &s).is_ok());
        f.write_elems(tile.start, &[5i32]).unwrap();
        f.write_elems(tile.addr(1), &[13i32]).unwrap();
        assert!(s.scalar_reading(&f, "dst").is_ok());
        f.write_elems(tile.addr(1), &[14i32]).unwrap();
        let e = s.scalar_reading(&f, "dst").unwrap_err();
        assert!(
            e.to_string().starts_with("dst: index 14 at position 1 (below its bound 16) takes the walk out of its tensor: "),
            "{e}"
        );
        assert_eq!(e.index_fault().position, Some(1));
    }

    #[test]
    fn index_tiles_and_scalars_are_checked() {
        let mut s = side(hbm(&[100, 8]), 0, &[(8, 4), (1, 8)]);
        s.vector_offset = Some(IndexAp::whole(sbuf(&[4, 1], Dtype::I32)));
        assert!(check_side("dma_copy", "src", &s).is_ok());
        s.vector_offset = Some(IndexAp::whole(sbuf(&[4, 1], Dtype::F32)));
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert!(e.to_string().contains("index tiles are u32 or i32"), "{e}");
        s.vector_offset = Some(IndexAp::whole(sbuf(&[1, 5], Dtype::U32)));
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert!(e.to_string().contains("must be [1, 4] or [4, 1]"), "{e}");
        s.vector_offset = None;
        s.scalar_offset = Some(sbuf(&[1, 1], Dtype::U32));
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert!(
            e.to_string()
                .contains("1x1 i32 or i64 tensor in SBUF or HBM"),
            "{e}"
        );
        s.scalar_offset = Some(sbuf(&[1, 1], Dtype::I32));
        s.indirect_dim = 2;
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert!(
            e.to_string().contains("indirect_dim 2 is out of range"),
            "{e}"
        );
    }

    /// Found by an audit: counts whose product wraps past 2^64 (step 0 keeps the walk in
    /// its tensor) were taken for the wrapped count.
    #[test]
    fn counts_that_multiply_past_2_64_are_refused_on_a_side_and_a_view() {
        let wraps = [(0, 3_340_214_413), (0, 2_761_311_370), (0, 8)];
        let s = side(hbm(&[50, 8]), 2, &wraps);
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        let rule =
            "ap's nums multiply to 3340214413 * 2761311370 * 8 positions, more than 2^64 - 1";
        assert!(e.to_string().contains(rule), "{e}");
        let mut s = side(hbm(&[50, 8]), 0, &[(8, 16), (1, 8)]);
        let dims = wraps.iter().map(|&(step, num)| ApDim { step, num });
        s.vector_offset = Some(IndexAp {
            tensor: sbuf(&[16, 4], Dtype::I32),
            offset: 2,
            ap: Some(dims.collect()),
        });
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert!(
            e.to_string().contains(&format!("vector_offset s: {rule}")),
            "{e}"
        );
    }

    #[test]
    fn an_index_out_of_bounds_in_a_view_names_the_tile_element() {
        let view = IndexAp {
            tensor: sbuf(&[16, 3], Dtype::I32),
            offset: 1,
            ap: Some(
                [ApDim { step: 3, num: 16 }, ApDim { step: 1, num: 1 }]
                    .into_iter()
                    .collect(),
            ),
        };
        assert_eq!(view.element(3), 10);
        assert_eq!(view.describe(3), "the .ap() view of s (s[3, 1])");
        assert_eq!(IndexAp::whole(sbuf(&[16, 1], Dtype::I32)).describe(3), "s");
    }

    /// Found by `hostsim fuzz --target oob`: 4097 indices ran on the reference while the
    /// DGE route refused them (TooManyIndices) when the copy ran; they are refused when
    /// it is lowered.
    #[test]
    fn regression_more_than_4096_indices_are_refused_when_lowered() {
        for (n, ok) in [(4096, true), (4097, false)] {
            let mut s = side(hbm(&[10, 1]), 0, &[(1, n)]);
            s.vector_offset = Some(IndexAp::whole(sbuf(&[1, u64::from(n)], Dtype::I32)));
            match check_side("dma_copy", "src", &s) {
                Ok(()) => assert!(ok, "{n} accepted"),
                Err(e) => assert!(
                    !ok && e.to_string().contains("holds 4097 indices (ap[0] num 4097); the copy is one DGE request, which takes at most 4096"),
                    "{e}"
                ),
            }
        }
    }

    #[test]
    fn a_scalar_offset_is_i32_or_i64_in_sbuf_or_hbm_and_i64_only_for_hbm() {
        let scalar = |space: Space, dtype: Dtype| {
            let mut t = sbuf(&[1, 1], dtype);
            t.space = space;
            if space == Space::Hbm {
                t.start = FabricAddr(0x100);
            }
            t
        };
        let hbm_side = side(hbm(&[100, 8]), 0, &[(8, 4), (1, 8)]);
        let sbuf_side = side(sbuf(&[4, 8], Dtype::F32), 0, &[(8, 4), (1, 8)]);
        for (s, space, dtype, ok) in [
            (&hbm_side, Space::Sbuf, Dtype::I32, true),
            (&hbm_side, Space::Hbm, Dtype::I32, true),
            (&hbm_side, Space::Sbuf, Dtype::I64, true),
            (&hbm_side, Space::Hbm, Dtype::I64, true),
            (&sbuf_side, Space::Hbm, Dtype::I32, true),
            (&sbuf_side, Space::Sbuf, Dtype::I64, false),
            (&sbuf_side, Space::Hbm, Dtype::I64, false),
            (&hbm_side, Space::Psum, Dtype::I32, false),
            (&hbm_side, Space::Sbuf, Dtype::U32, false),
        ] {
            let mut s = s.clone();
            s.scalar_offset = Some(scalar(space, dtype));
            let got = check_side("dma_copy", "src", &s);
            assert_eq!(
                got.is_ok(),
                ok,
                "{space:?} {dtype} on {:?}: {got:?}",
                s.tensor.space
            );
        }
        let mut s = sbuf_side;
        s.scalar_offset = Some(scalar(Space::Hbm, Dtype::I64));
        let e = check_side("dma_copy", "src", &s).unwrap_err();
        assert_eq!(
            e.to_string(),
            "dma_copy: src: scalar_offset s is i64 but s is in sbuf; on an SBUF or PSUM operand the scalar offset must be i32 (i64 is for HBM access patterns)"
        );
    }

    /// An i64 scalar is read exactly: 2^32 + 2^24 + 1 rows down (a float32 would drop the
    /// 1, an i32 read the 2^32).
    #[test]
    fn a_scalar_pushing_an_index_out_names_that_index() {
        // rows 0, 990, 999, 5 of a [1000, 2] table, the scalar 3: 999 + 3 leaves it
        let mut f = Fabric::new(dma::Generation::Cayman);
        let mut s = side(hbm(&[1000, 2]), 0, &[(2, 4), (1, 2)]);
        let mut tile = sbuf(&[1, 4], Dtype::I32);
        tile.start = FabricAddr(SBUF_BASE + 256);
        f.write_elems(tile.start, &[0i32, 990, 999, 5]).unwrap();
        s.vector_offset = Some(IndexAp::whole(tile));
        let scalar = sbuf(&[1, 1], Dtype::I32);
        f.write_elems(scalar.start, &[3i32]).unwrap();
        s.scalar_offset = Some(scalar.clone());
        let e = s.scalar_value(&f, "src").unwrap_err();
        assert!(
            matches!(
                e,
                Error::ApScalarOffset {
                    index: Some((2, 999)),
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().ends_with("(index 999 at position 2)"), "{e}");
        assert_eq!(e.index_fault().position, Some(2));
        assert_eq!(e.index_fault().value, Some(999));
        // a scalar that keeps every in-bounds index inside: its value
        f.write_elems(scalar.start, &[-0i32]).unwrap();
        assert_eq!(s.scalar_value(&f, "src").unwrap(), 0);
    }

    #[test]
    fn an_i64_scalar_is_read_at_its_dtype() {
        let mut f = Fabric::new(dma::Generation::Cayman);
        let rows = (1u64 << 32) + (1 << 24) + 2;
        let mut s = side(hbm(&[rows, 1]), 0, &[(1, 1)]);
        let mut t = hbm(&[1, 1]);
        t.start = FabricAddr(0x100);
        t.dtype = Dtype::I64;
        s.scalar_offset = Some(t);
        let v = (1i64 << 32) + (1 << 24) + 1;
        f.write_elems(FabricAddr(0x100), &[v]).unwrap();
        assert_eq!(s.scalar_value(&f, "src").unwrap(), v);
        f.write_elems(FabricAddr(0x100), &[v + 1]).unwrap();
        let e = s.scalar_value(&f, "src").unwrap_err();
        assert!(e.to_string().contains("scalar_offset 4311744514"), "{e}");
        let mut t = hbm(&[1, 1]);
        t.start = FabricAddr(0x100);
        t.dtype = Dtype::I32;
        s.scalar_offset = Some(t);
        f.write_elems(FabricAddr(0x100), &[-1i64]).unwrap();
        assert!(
            s.scalar_value(&f, "src").is_err(),
            "i32 -1 is below the tensor"
        );
        f.write_elems(FabricAddr(0x100), &[(1i64 << 32) + 3])
            .unwrap();
        assert_eq!(
            s.scalar_value(&f, "src").unwrap(),
            3,
            "i32 reads the low word"
        );
    }

    #[test]
    fn scalar_values_are_checked_when_run() {
        let mut s = side(hbm(&[10, 8]), 0, &[(8, 4), (1, 8)]);
        s.scalar_offset = Some(sbuf(&[1, 1], Dtype::I32));
        assert!(s.check_scalar("src", 6, None).is_ok());
        let e = s.check_scalar("src", 7, None).unwrap_err();
        assert!(e.to_string().contains("scalar_offset 7"), "{e}");
        assert!(s.check_scalar("src", -1, None).is_err());
    }

    #[test]
    fn with_an_index_tile_the_scalar_shifts_the_indices_that_move() {
        // rows 3, 1, 7 and 0 of a [10, 8] table, shifted by the scalar
        let mut s = side(hbm(&[10, 8]), 0, &[(8, 4), (1, 8)]);
        s.vector_offset = Some(IndexAp::whole(sbuf(&[4, 1], Dtype::I32)));
        s.scalar_offset = Some(sbuf(&[1, 1], Dtype::I32));
        let moving = IndexSpan::moving(&[3, 1, 7, 0], 10);
        assert_eq!(
            moving,
            Some(IndexSpan {
                lo: 0,
                hi: 7,
                shift: 0
            })
        );
        // 7 + 2 = 9 is the last row; 7 + 3 = 10 is past it, 0 - 1 before the first
        assert!(s.check_scalar("src", 2, moving).is_ok());
        let e = s.check_scalar("src", 3, moving).unwrap_err();
        assert!(
            e.to_string()
                .contains("ap[0] = [8, 4] takes position [index 7 + scalar 3] to element 80"),
            "{e}"
        );
        let e = s.check_scalar("src", -1, moving).unwrap_err();
        assert!(e.to_string().contains("[index 0 - scalar 1]"), "{e}");
        // out-of-bounds indices (10, and -1 read as u32) are judged alone and never shift
        let moving = IndexSpan::moving(&[2, 10, u32::MAX, 5], 10);
        assert_eq!(
            moving,
            Some(IndexSpan {
                lo: 2,
                hi: 5,
                shift: 0
            })
        );
        assert!(s.check_scalar("src", -2, moving).is_ok());
        assert!(s.check_scalar("src", 4, moving).is_ok());
        assert!(s.check_scalar("src", 5, moving).is_err());
        // no index moves: nothing to check
        assert_eq!(IndexSpan::moving(&[10, 11], 10), None);
        assert!(s.check_scalar("src", 1000, None).is_ok());
    }

    #[test]
    fn dtypes_may_differ_and_then_the_copy_casts() {
        let src = side(hbm(&[4, 8]), 0, &[(8, 4), (1, 8)]);
        let dst = side(sbuf(&[4, 8], Dtype::Bf16), 0, &[(8, 4), (1, 8)]);
        let l = dma_copy_ap("dma_copy", src, dst, OPTS).unwrap();
        let c = &l.ap_dmas[0];
        assert_eq!(
            (c.src.tensor.dtype, c.dst.tensor.dtype),
            (Dtype::F32, Dtype::Bf16)
        );
    }

    #[test]
    fn counts_must_match() {
        let src = side(hbm(&[4, 8]), 0, &[(8, 4), (1, 8)]);
        let dst = side(hbm(&[32]), 0, &[(1, 31)]);
        let e = dma_copy_ap("dma_copy", src.clone(), dst, OPTS).unwrap_err();
        assert!(
            e.to_string()
                .contains("visits 31 elements but src visits 32"),
            "{e}"
        );
        let flat = side(hbm(&[32]), 0, &[(1, 32)]);
        let l = dma_copy_ap("dma_copy", src, flat, OPTS).unwrap();
        assert_eq!(l.ap_dmas.len(), 1);
        assert!(l.instructions.is_empty());
    }
}
