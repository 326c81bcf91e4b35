//! The software-DGE access-pattern copy ([`ApDma`], NKI `dma_copy` / `dma_compute`
//! over `.ap()` sides) in closed form: the scalar offsets and index tiles are read and
//! checked first, then element `k` of the source's walk reduces into element `k` of the
//! destination's, in walk order, each reading its source when it moves, through
//! [`dma::cast::cast`] (a cast through f32 where the dtypes differ, else the compute op of
//! the one dtype).
//!
//! An index position is out of bounds when its value (i32 read as u32) is at least the
//! tensor's size along the indirect dim. Under `oob = error` the first failure is the
//! error, in the order the DGE names it: with both sides indexed one index per position
//! (equal index counts and elements per index), position by position, the source before
//! the destination, a duplicate last; otherwise the source's first failure, then the
//! destination's first (an out-of-bounds index or a duplicate). Under `skip` an
//! out-of-bounds position moves none of its elements and is listed. Duplicate
//! destinations are an error only with a compute op under `unique_indices`; a plain copy
//! lands last-index-wins.

use dma::{ComputeOp, Dtype, Fabric, FabricAddr};

use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::nki::ap::collisions;
use crate::nki::{ApDma, ApSide, OobMode};

/// One side's indices and their fate, or none for a side without a vector offset.
struct Indices {
    values: Vec<u32>,
    valid: Vec<bool>,
}

/// Runs `c`; on error nothing is written.
pub fn ap_dma(fabric: &mut Fabric, c: &ApDma) -> Result<Outcome, Error> {
    let scalars = [
        c.src.scalar_value(fabric, "src")?,
        c.dst.scalar_value(fabric, "dst")?,
    ];
    let src = indices(fabric, &c.src)?;
    let dst = indices(fabric, &c.dst)?;
    if let Some(e) = first_failure(c, src.as_ref(), dst.as_ref()) {
        return Err(e);
    }
    let mut out = Outcome::default();
    let (mut sp, mut dp) = (Walk::new(&c.src), Walk::new(&c.dst));
    for _ in 0..c.src.elements() {
        let from = sp.position(src.as_ref(), scalars[0]);
        let to = dp.position(dst.as_ref(), scalars[1]);
        if let (Some(from), Some(to)) = (from, to) {
            let (a, b) = (c.src.tensor.addr(from), c.dst.tensor.addr(to));
            out.bytes_written += element(fabric, c, a, b)?;
        }
        sp.advance();
        dp.advance();
    }
    out.skipped = skipped(src.as_ref(), dst.as_ref());
    out.oob_notification = !out.skipped.is_empty();
    Ok(out)
}

/// `dst (op)= src` for the source element at `a` and the destination element at `b`;
/// the bytes written.
fn element(fabric: &mut Fabric, c: &ApDma, a: FabricAddr, b: FabricAddr) -> Result<u64, Error> {
    let (from, to) = (c.src.tensor.dtype, c.dst.tensor.dtype);
    let (mut value, mut image) = ([0u8; Dtype::MAX_SIZE], [0u8; Dtype::MAX_SIZE]);
    let (value, image) = (&mut value[..from.size()], &mut image[..to.size()]);
    fabric.read(a, value)?;
    if c.op != ComputeOp::None {
        // a reduction reads its destination; a copy only writes it
        fabric.read(b, image)?;
    }
    dma::cast::cast(c.op, from, value, to, image)?;
    fabric.write(b, image)?;
    Ok(to.size() as u64)
}

/// A side's index values and which are in bounds.
fn indices(fabric: &Fabric, s: &ApSide) -> Result<Option<Indices>, Error> {
    let Some(values) = s.index_values(fabric)? else {
        return Ok(None);
    };
    let bound = s.index_bound();
    let valid = values.iter().map(|&v| u64::from(v) < bound).collect();
    Ok(Some(Indices { values, valid }))
}

/// The error the copy stops with, if any (module docs).
fn first_failure(c: &ApDma, src: Option<&Indices>, dst: Option<&Indices>) -> Option<Error> {
    let coupled = c.coupled();
    let hard = c.oob == OobMode::Error;
    let oob = |side: IndexSide, ix: Option<&Indices>, bound: u64| {
        let ix = ix.filter(|_| hard)?;
        let pos = ix.valid.iter().position(|v| !v)?;
        Some((pos, side, bound, ix.values[pos]))
    };
    let mut found: Vec<(u32, u32, u32, Error)> = Vec::new();
    for (rank, (side, ix, s)) in [(IndexSide::Src, src, &c.src), (IndexSide::Dst, dst, &c.dst)]
        .into_iter()
        .enumerate()
    {
        if let Some((pos, side, bound, value)) = oob(side, ix, s.index_bound()) {
            let e = Error::IndexOutOfBounds {
                side,
                position: pos as u32,
                value,
                bound,
            };
            found.push((u32::from(!coupled && rank > 0), pos as u32, rank as u32, e));
        }
    }
    if let (true, Some(d)) = (c.op != ComputeOp::None && c.unique_indices, dst) {
        if let Some((first, second, value)) = duplicate(d, src.filter(|_| coupled)) {
            let e = Error::DuplicateDestination {
                value,
                first,
                second,
            };
            found.push((u32::from(!coupled), second, 2, e));
        }
    }
    found.sort_by_key(|f| (f.0, f.1, f.2));
    found.into_iter().next().map(|f| f.3)
}

/// The first destination position repeating an earlier moving one: `(first, second,
/// value)`. A position moves when its index is in bounds and, coupled, its source's is.
fn duplicate(d: &Indices, src: Option<&Indices>) -> Option<(u32, u32, u32)> {
    let moves = |pos: usize| d.valid[pos] && src.is_none_or(|s| s.valid[pos]);
    let c = collisions(&d.values, moves).into_iter().next()?;
    Some((c.first, c.second, c.value))
}

/// The skipped positions, in position order, the source's first at one position.
fn skipped(src: Option<&Indices>, dst: Option<&Indices>) -> Vec<SkippedIndex> {
    let mut out = Vec::new();
    for (side, ix) in [(IndexSide::Src, src), (IndexSide::Dst, dst)] {
        let Some(ix) = ix else { continue };
        let bad = ix.valid.iter().enumerate().filter(|(_, v)| !**v);
        out.extend(bad.map(|(pos, _)| SkippedIndex {
            side,
            position: pos as u32,
            value: ix.values[pos],
        }));
    }
    out.sort_by_key(|s| s.position);
    out
}

/// A side's multi-index, row-major over its pattern.
struct Walk<'s> {
    side: &'s ApSide,
    pos: Vec<u32>,
}

impl<'s> Walk<'s> {
    fn new(side: &'s ApSide) -> Walk<'s> {
        Walk {
            side,
            pos: vec![0; side.dims.len()],
        }
    }

    /// The element the current position names, or `None` for a skipped index.
    fn position(&self, ix: Option<&Indices>, scalar: i64) -> Option<u64> {
        let index = match ix {
            Some(ix) => {
                let k = self.pos[self.side.indirect_dim] as usize;
                if !ix.valid[k] {
                    return None;
                }
                u64::from(ix.values[k])
            }
            None => 0,
        };
        // lowering and the scalar check proved every in-bounds position is an element
        u64::try_from(self.side.element(&self.pos, index, scalar)).ok()
    }

    fn advance(&mut self) {
        for (k, d) in self.side.dims.iter().enumerate().rev() {
            self.pos[k] += 1;
            if self.pos[k] < d.num {
                return;
            }
            self.pos[k] = 0;
        }
    }
}
