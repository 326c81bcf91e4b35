//! The software-DGE access-pattern copy ([`ApDma`], NKI `dma_copy` / `dma_compute`
//! over `.ap()` sides) in closed form: the scalar offsets and index tiles are read and
//! checked first, then element `k` of the source's walk reduces into element `k` of the
//! destination's, in walk order, each reading its source when it moves (a run of
//! elements consecutive on both sides moves as one read and one write where the two do
//! not overlap, which is the same), through
//! [`dma::cast::cast`] (a cast through f32 where the dtypes differ, else the compute op of
//! the one dtype).
//!
//! An index position is out of bounds when its value (i32 read as u32) is at least the
//! tensor's size along the indirect dim. Under `oob = error` the first failure is the
//! error, in the order the DGE names it: with both sides indexed one index per position
//! (equal index counts and elements per index), position by position, the source before
//! the destination, a duplicate last; otherwise the source's first failure, then the
//! destination's first (an out-of-bounds index or a duplicate). Under `skip` an
//! out-of-bounds position moves none of its elements and is listed, and a side without
//! an index tile whose scalar offset takes its walk out of the tensor moves nothing of
//! the copy (listed; nothing else of the copy is checked). Duplicate
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
    let skipped_offsets = c.skipped_offsets(fabric)?;
    if !skipped_offsets.is_empty() {
        return Ok(Outcome {
            skipped_offsets,
            oob_notification: true,
            ..Outcome::default()
        });
    }
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
    let mut run = Run::default();
    for _ in 0..c.src.elements() {
        let from = sp.position(src.as_ref(), scalars[0]);
        let to = dp.position(dst.as_ref(), scalars[1]);
        if let (Some(from), Some(to)) = (from, to) {
            let (a, b) = (c.src.tensor.addr(from), c.dst.tensor.addr(to));
            if !run.extend(c, a, b) {
                out.bytes_written += run.flush(fabric, c)?;
                run = Run {
                    src: a,
                    dst: b,
                    n: 1,
                };
            }
        }
        sp.advance();
        dp.advance();
    }
    out.bytes_written += run.flush(fabric, c)?;
    out.skipped = skipped(src.as_ref(), dst.as_ref());
    out.oob_notification = !out.skipped.is_empty();
    Ok(out)
}

/// Bytes a run holds at most on either side (its buffers are this size at most, whatever
/// the copy's size).
const RUN_BYTES: u64 = 1 << 20;

/// Consecutive moving elements whose source and destination addresses each step by one
/// element: `n` of them from `src` and `dst` on.
#[derive(Default)]
struct Run {
    src: FabricAddr,
    dst: FabricAddr,
    n: u64,
}

impl Run {
    /// Whether the element from `a` to `b` comes next in this run; if so it joins.
    fn extend(&mut self, c: &ApDma, a: FabricAddr, b: FabricAddr) -> bool {
        let (fs, ts) = sizes(c);
        let next = self.n > 0
            && (self.n + 1) * fs.max(ts) <= RUN_BYTES
            && Some(a.0) == self.src.0.checked_add(self.n * fs)
            && Some(b.0) == self.dst.0.checked_add(self.n * ts);
        self.n += u64::from(next);
        next
    }

    /// Moves the run: one read of its source and one write of its destination, as its
    /// elements one by one would (none of them writes bytes a later one reads); element by
    /// element where the two ranges overlap (and for a single element, without buffers).
    /// The bytes written.
    fn flush(&self, fabric: &mut Fabric, c: &ApDma) -> Result<u64, Error> {
        if self.n == 0 {
            return Ok(0);
        }
        let (fs, ts) = sizes(c);
        let (src_len, dst_len) = (self.n * fs, self.n * ts);
        let (a, b) = (self.src.0, self.dst.0);
        if self.n == 1 || (a < b + dst_len && b < a + src_len) {
            for i in 0..self.n {
                element(fabric, c, FabricAddr(a + i * fs), FabricAddr(b + i * ts))?;
            }
            return Ok(dst_len);
        }
        let (mut value, mut image) = (vec![0; src_len as usize], vec![0; dst_len as usize]);
        fabric.read(self.src, &mut value)?;
        if c.op != ComputeOp::None {
            fabric.read(self.dst, &mut image)?;
        }
        dma::cast::cast(
            c.op,
            c.src.tensor.dtype,
            &value,
            c.dst.tensor.dtype,
            &mut image,
        )?;
        fabric.write(self.dst, &image)?;
        Ok(dst_len)
    }
}

/// The source's and the destination's element sizes.
fn sizes(c: &ApDma) -> (u64, u64) {
    let size = |s: &ApSide| s.tensor.dtype.size() as u64;
    (size(&c.src), size(&c.dst))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nki::{ApDim, ApTensor};
    use dma::{Generation, Space};

    /// `[n]` f32 elements of one HBM tensor `t` from element `from` to element `to`,
    /// `n` of them each, with `op`.
    fn within(n: u32, (from, to): (u64, u64), op: ComputeOp) -> ApDma {
        let t = ApTensor {
            name: "t".into(),
            start: FabricAddr(0x1000),
            space: Space::Hbm,
            shape: vec![16],
            dtype: Dtype::F32,
        };
        let side = |offset| ApSide {
            tensor: t.clone(),
            offset,
            dims: [ApDim { step: 1, num: n }].into_iter().collect(),
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        };
        ApDma {
            src: side(from),
            dst: side(to),
            op,
            oob: OobMode::Error,
            unique_indices: true,
            dge: crate::nki::DgeMode::Chosen,
        }
    }

    fn run(c: &ApDma) -> Vec<f32> {
        let mut f = Fabric::new(Generation::Cayman);
        let ramp: Vec<f32> = (0..16).map(|i| i as f32).collect();
        f.write_elems(FabricAddr(0x1000), &ramp).unwrap();
        let out = ap_dma(&mut f, c).unwrap();
        assert_eq!(out.bytes_written, u64::from(c.dst.dims[0].num) * 4);
        let mut got = vec![0f32; 16];
        f.read_elems(FabricAddr(0x1000), &mut got).unwrap();
        got
    }

    #[test]
    fn elements_move_in_walk_order_where_source_and_destination_overlap() {
        // each element reads its source when it moves: a copy one element up smears
        // element 0, and an add one element up accumulates (a prefix sum)
        let smear = run(&within(6, (0, 1), ComputeOp::None));
        assert_eq!(&smear[..8], &[0., 0., 0., 0., 0., 0., 0., 7.]);
        let sums = run(&within(4, (0, 1), ComputeOp::Add));
        assert_eq!(&sums[..6], &[0., 1., 3., 6., 10., 5.]);
        // one element down reads each source before it is overwritten
        let down = run(&within(6, (1, 0), ComputeOp::None));
        assert_eq!(&down[..8], &[1., 2., 3., 4., 5., 6., 6., 7.]);
        // apart, a run moves whole
        let apart = run(&within(4, (0, 8), ComputeOp::Add));
        assert_eq!(&apart[8..12], &[8., 10., 12., 14.]);
    }

    #[test]
    fn a_run_holds_at_most_run_bytes() {
        let c = within(16, (0, 0), ComputeOp::None);
        let mut r = Run {
            src: FabricAddr(0),
            dst: FabricAddr(1 << 30),
            n: 1,
        };
        let fits = RUN_BYTES / 4;
        for k in 1..fits {
            assert!(r.extend(&c, FabricAddr(4 * k), FabricAddr((1 << 30) + 4 * k)));
        }
        assert_eq!(r.n, fits);
        assert!(!r.extend(&c, FabricAddr(4 * fits), FabricAddr((1 << 30) + 4 * fits)));
    }
}
