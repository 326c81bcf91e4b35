//! The `oob` target's access-pattern DMA fragment: an NKI `dma_copy` over `.ap()` sides
//! ([`crate::nki::dma_copy_ap`]), edge-biased like the ISA fragments of [`super::oob`]:
//!
//! - tensors in HBM or partition-major in SBUF/PSUM (PSUM for data only: index tiles and
//!   scalar offsets are in SBUF), on partitions from the first to the last, now and then
//!   ending on the last byte of HBM or of an SBUF partition;
//! - 1 to 5 `[step, num]` pairs walking a box of the tensor: forwards, backwards (from
//!   the box's last element), with step 0 (repeats), now and then two pairs swapped (a
//!   transpose), the box at the tensor's start, at its end (the offset then names the
//!   tensor's last element) or between; on core the first pair steps partitions. Or a
//!   flat run over an HBM block, or a pattern with a random step or offset. The
//!   destination walks the same counts, reshaped or flattened, or the source's own
//!   tensor forwards or backwards (a copy that reads what it writes);
//! - `vector_offset` on the source, the destination or both, on any dim, from a `[1, N]`
//!   vector or an `(N, 1)` tile (one index per partition), or an `.ap()` of a wider tile
//!   (a column of an `(N, W)` tile, forwards or from the last partition up, a window at
//!   an offset or every other element of a longer vector, a partition row of an `[R, N]`
//!   tile, a block of partitions by columns in two or three pairs, columns now and then
//!   reversed; the elements it skips hold other indices), u32 or i32, with indices at
//!   bound - 1, bound, bound + 1, 2^31 - 1, 2^31, u32::MAX, -1 and other negatives, and
//!   repeats;
//! - `scalar_offset` tiles in SBUF or HBM, i32 or (on an HBM side) i64, with values in
//!   range and just out of it, i32's and i64's extremes and values past 32 bits;
//! - every compute op, `oob` error or skip, `unique_indices` true or false;
//! - now and then an N-D `dma_gather_transpose` ([`crate::nki::dma_gather_transpose_nd`]:
//!   3-D axes (2, 1, 0) or 4-D (3, 1, 2, 0), 2-byte elements, a `[1, I]` or `(I, 1)`
//!   index tile with indices around the row count, the destination in HBM or SBUF), as
//!   the access-pattern DMAs it lowers to (label `gather_transpose_nd`).
//!
//! - now and then a direct `dma_transpose` ([`crate::nki::dma_transpose`]) of a whole
//!   2-D to 4-D tensor by NKI's permutation for its rank, any dtype, between HBM and SBUF
//!   either way (label `transpose`).
//!
//! A candidate is checked by `dma_copy_ap` before anything is allocated: a refused one is
//! not generated (a fragment tries a few candidates).

use dma::{ComputeOp, Dtype, FabricAddr, Generation, Space};
use smallvec::SmallVec;

use crate::fuzz::case::{Builder, Case};
use crate::fuzz::rng::Rng;
use crate::nki::{
    dma_copy_ap, dma_gather_transpose_nd, dma_transpose, ApDim, ApDma, ApOptions, ApSide, ApTensor,
    DgeMode, IndexAp, IndexSpan, OobMode, Transpose, TRANSPOSE_AXES,
};

/// The most elements a walk visits (but for the rare long index vector).
const MAX_WALK: u64 = 2048;
/// The most elements a generated tensor holds.
const MAX_TENSOR: u64 = 1 << 16;
/// Partitions of SBUF and PSUM.
const PARTITIONS: u32 = 128;
/// Candidates a fragment tries before it gives up.
const ATTEMPTS: u32 = 4;

/// A stream case of access-pattern DMAs alone: 1 to 3 fragments on a random generation
/// (`generation` forces one). The `oob` target mixes the fragment with the ISA ones
/// ([`super::oob::case`]); this case is for tests that want the new forms only.
pub fn case(mut rng: Rng, generation: Option<Generation>) -> Case {
    let generation = generation.unwrap_or_else(|| rng.pick(&Generation::ALL));
    let mut b = Builder::new(rng, generation);
    for _ in 0..b.rng.range(1, 3) {
        // A fragment that does not fit what is left is skipped (None).
        let _ = fragment(&mut b);
    }
    b.finish()
}

/// One access-pattern DMA, its tensors allocated and written (`None`: no candidate was
/// valid, or it did not fit).
pub fn fragment(b: &mut Builder) -> Option<()> {
    if b.rng.chance(15) {
        return transpose_fragment(b);
    }
    if b.rng.chance(8) {
        return direct_transpose_fragment(b);
    }
    for _ in 0..ATTEMPTS {
        let mut names = Names(b.tensor_count());
        let hardware = b.generation() != Generation::Sunda;
        if let Some(dma) = candidate(&mut b.rng, &mut names, hardware) {
            return place(b, dma);
        }
    }
    None
}

/// An N-D `dma_gather_transpose` (module docs): `src` `[N, m.., K]` in HBM gathered by
/// `I` indices into `dst` `[K, m.., I]`, checked before anything is allocated (a
/// refused one, on sunda, is not generated).
fn transpose_fragment(b: &mut Builder) -> Option<()> {
    let rng = &mut b.rng;
    let (n, k, i) = (rng.range(1, 8), rng.range(1, 8), rng.range(1, 16));
    let (axes, middle): (&[u32], Vec<u64>) = match rng.chance(50) {
        true => (&[2, 1, 0], vec![rng.range(1, 4).into()]),
        false => {
            let m = rng.range(1, 4).into();
            (&[3, 1, 2, 0], rng.pick(&[[m, 1], [1, m]]).to_vec())
        }
    };
    let dtype = rng.pick(&[Dtype::Bf16, Dtype::F16, Dtype::U16, Dtype::I16]);
    let oob = rng.pick(&[OobMode::Error, OobMode::Skip]);
    let index_shape = rng.pick(&[[1, u64::from(i)], [u64::from(i), 1]]).to_vec();
    let dst_space = rng.pick(&[Space::Hbm, Space::Sbuf]);
    let shape = |first: u32, last: u32| {
        let mut s = vec![u64::from(first)];
        s.extend(&middle);
        s.push(last.into());
        s
    };
    let mut names = Names(b.tensor_count());
    let src = unplaced(names.next(), Space::Hbm, shape(n, k), dtype);
    let index = unplaced(names.next(), Space::Sbuf, index_shape, Dtype::U32);
    let dst = unplaced(names.next(), dst_space, shape(k, i), dtype);
    let generation = b.generation();
    let lower = |src: &ApTensor, index: &ApTensor, dst: &ApTensor| {
        let t = Transpose {
            axes,
            src,
            index,
            dst,
        };
        dma_gather_transpose_nd(generation, t, oob).ok()
    };
    lower(&src, &index, &dst)?;
    let mut placed = Vec::new();
    let values = index_values(&mut b.rng, i, n.into());
    let src_at = place_one(b, &mut placed, &src, data)?;
    let index_at = place_one(b, &mut placed, &index, |b, t| index_tile_at(b, t, &values))?;
    let dst_at = place_one(b, &mut placed, &dst, data)?;
    let at = |t: ApTensor, start| ApTensor { start, ..t };
    let (src, index, dst) = (at(src, src_at), at(index, index_at), at(dst, dst_at));
    for dma in lower(&src, &index, &dst)?.ap_dmas {
        b.push_ap("gather_transpose_nd", dma);
    }
    Some(())
}

/// A direct `dma_transpose` ([`crate::nki::dma_transpose`]) of a whole `src` of 2 to 4
/// dims (1 to 8 each) by the permutation NKI documents for its rank, any dtype, each side
/// in HBM or SBUF, as the access-pattern DMAs it lowers to (label `transpose`).
fn direct_transpose_fragment(b: &mut Builder) -> Option<()> {
    let rng = &mut b.rng;
    let axes = rng.pick(&TRANSPOSE_AXES);
    let shape: Vec<u64> = axes.iter().map(|_| rng.range(1, 8).into()).collect();
    let out: Vec<u64> = axes.iter().map(|&a| shape[a as usize]).collect();
    let dtype = rng.dtype();
    let spaces = [Space::Hbm, Space::Sbuf];
    let (from, to) = (rng.pick(&spaces), rng.pick(&spaces));
    let mut names = Names(b.tensor_count());
    let src = unplaced(names.next(), from, shape, dtype);
    let dst = unplaced(names.next(), to, out, dtype);
    let walk = |t: &ApTensor, start| ApSide::by_dims(ApTensor { start, ..t.clone() });
    let lower = |s, d| dma_transpose(walk(&src, s), walk(&dst, d), Some(axes)).ok();
    // checked before anything is allocated, as the other fragments are
    lower(FabricAddr(0), FabricAddr(0))?;
    let mut placed = Vec::new();
    let src_at = place_one(b, &mut placed, &src, data)?;
    let dst_at = place_one(b, &mut placed, &dst, data)?;
    for dma in lower(src_at, dst_at)?.ap_dmas {
        b.push_ap("transpose", dma);
    }
    Some(())
}

/// Fresh tensor names, `t<k>`, unique in the case.
struct Names(usize);

impl Names {
    fn next(&mut self) -> String {
        self.0 += 1;
        format!("t{}", self.0 - 1)
    }
}

/// A tensor not yet placed (its start is set by [`place`]).
fn unplaced(name: String, space: Space, shape: Vec<u64>, dtype: Dtype) -> ApTensor {
    ApTensor {
        name,
        start: FabricAddr(0),
        space,
        shape,
        dtype,
    }
}

/// A random access-pattern DMA as `dma_copy_ap` lowers it, over unplaced tensors.
fn candidate(rng: &mut Rng, names: &mut Names, hardware: bool) -> Option<ApDma> {
    let dtype = rng.dtype();
    let counts = walk_counts(rng);
    let src = side(rng, &counts, dtype, names)?;
    let dst = match rng.chance(12) {
        true => in_place(rng, &src)?,
        false => {
            let counts = reshape(rng, &counts);
            side(rng, &counts, dtype, names)?
        }
    };
    let opts = ApOptions {
        op: rng.pick(&ComputeOp::ALL),
        oob: match (src.dynamic() || dst.dynamic()) && rng.chance(50) {
            true => OobMode::Skip,
            false => OobMode::Error,
        },
        unique_indices: dst.vector_offset.is_none() || rng.chance(50),
        dge: dge_mode(rng, (&src, &dst), hardware),
    };
    let lowered = dma_copy_ap("dma_copy", src, dst, opts).ok()?;
    lowered.ap_dmas.into_iter().next()
}

/// A `dge_mode` the copy of sides `src` and `dst` can have (the hardware DGE only where
/// the generation has one): hostsim's choice half the time.
fn dge_mode(rng: &mut Rng, (src, dst): (&ApSide, &ApSide), hardware: bool) -> DgeMode {
    let modes: Vec<DgeMode> = DgeMode::ALL
        .into_iter()
        .filter(|&m| m.refusal(src, dst).is_none() && (hardware || m != DgeMode::Hardware))
        .collect();
    match rng.chance(50) {
        true => DgeMode::Chosen,
        false => rng.pick_from(&modes).unwrap_or_default(),
    }
}

/// The counts of a walk: 1 to 5 pairs, at most [`MAX_WALK`] elements; now and then one
/// long pair of 4096 or 4097 (the DGE's index limit and one past it).
fn walk_counts(rng: &mut Rng) -> Vec<u32> {
    if rng.chance(3) {
        return vec![rng.pick(&[4096, 4097])];
    }
    let k = rng.pick(&[1, 2, 2, 3, 3, 4, 5]);
    let mut counts: Vec<u32> = (0..k)
        .map(|_| rng.pick(&[1, 1, 2, 3, 4, 5, 7, 8, 16, 31, 64, 128]))
        .collect();
    while counts.iter().map(|&n| u64::from(n)).product::<u64>() > MAX_WALK {
        if let Some(n) = counts.iter_mut().max() {
            *n /= 2;
        }
    }
    counts
}

/// The destination's counts for a walk of `counts`: the same, reversed, flattened into
/// one pair, or the same total factored afresh into 1 to 5 pairs.
fn reshape(rng: &mut Rng, counts: &[u32]) -> Vec<u32> {
    let total: u32 = counts.iter().product();
    match rng.below(20) {
        0..=10 => counts.to_vec(),
        11..=12 => counts.iter().rev().copied().collect(),
        13..=15 => vec![total],
        _ => {
            let mut left = total;
            let mut out = Vec::new();
            for _ in 1..rng.range(1, 5) {
                let divisors: Vec<u32> = (1..=16).filter(|d| left.is_multiple_of(*d)).collect();
                let d = rng.pick_from(&divisors).unwrap_or(1);
                out.push(d);
                left /= d;
            }
            out.push(left);
            out
        }
    }
}

/// A side walking `counts` over a fresh tensor of `dtype`: mostly a box of an HBM, SBUF
/// or PSUM tensor, now and then a flat HBM run or a perturbed pattern; indexed on a
/// random dim two times in five, with a scalar offset now and then.
fn side(rng: &mut Rng, counts: &[u32], dtype: Dtype, names: &mut Names) -> Option<ApSide> {
    let space = match rng.below(20) {
        0..=9 => Space::Hbm,
        10..=16 => Space::Sbuf,
        _ => Space::Psum,
    };
    let k = counts.len();
    let index = rng.chance(40).then(|| rng.below(k as u64) as usize);
    let scalar = rng.chance(15);
    let mode = rng.below(100);
    let mut s = match (mode, space, index, scalar) {
        (0..=9, Space::Hbm, None, false) => flat(rng, counts, dtype, names.next()),
        _ => boxed(rng, counts, (space, dtype), index, names.next())?,
    };
    if mode >= 93 {
        perturb(rng, &mut s);
    }
    if let Some(d) = index {
        s.indirect_dim = d;
        s.vector_offset = Some(index_tile(rng, s.dims[d].num, names.next()));
    }
    if scalar {
        s.indirect_dim = index.unwrap_or_else(|| rng.below(k as u64) as usize);
        let at = rng.pick(&[Space::Sbuf, Space::Sbuf, Space::Hbm]);
        // NKI: an int64 offset only on an HBM side
        let wide = space == Space::Hbm && rng.chance(50);
        let dtype = if wide { Dtype::I64 } else { Dtype::I32 };
        s.scalar_offset = Some(unplaced(names.next(), at, vec![1, 1], dtype));
    }
    Some(s)
}

/// How one pair walks its tensor dim.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Walk {
    Forward,
    Backward,
    /// Step 0: the one element, again and again.
    Repeat,
    /// The indexed pair: the tensor dim is the index bound.
    Indexed,
}

/// A side walking a box of a tensor of rank `counts.len()`: pair `j` walks tensor dim
/// `perm[j]` (the identity, or two pairs swapped), on core the partitions first.
fn boxed(
    rng: &mut Rng,
    counts: &[u32],
    (space, dtype): (Space, Dtype),
    index: Option<usize>,
    name: String,
) -> Option<ApSide> {
    let k = counts.len();
    let on_core = space != Space::Hbm;
    let mut perm: Vec<usize> = (0..k).collect();
    if k >= 2 && rng.chance(15) {
        let lo = u32::from(on_core);
        let (a, c) = (rng.range(lo, k as u32 - 1), rng.range(lo, k as u32 - 1));
        let (a, c) = (a as usize, c as usize);
        if index != Some(a) && index != Some(c) {
            perm.swap(a, c);
        }
    }
    let mut shape = vec![1u64; k];
    let mut first = vec![0u64; k];
    let mut walks = vec![Walk::Forward; k];
    for (j, &t) in perm.iter().enumerate() {
        let n = u64::from(counts[j]);
        let walk = match (Some(j) == index, rng.below(10)) {
            (true, _) => Walk::Indexed,
            (false, 0) => Walk::Repeat,
            (false, 1..=2) => Walk::Backward,
            _ => Walk::Forward,
        };
        let margin = rng.pick(&[0, 0, 0, 1, 2, 3]);
        (shape[t], first[t]) = match walk {
            Walk::Indexed => (rng.pick(&[1, 2, 3, 5, 8, 16, 33, 100, 128]), 0),
            Walk::Repeat => {
                let extent = rng.pick(&[1, 2]) + margin;
                (extent, edge_start(rng, extent - 1))
            }
            Walk::Forward => (n + margin, edge_start(rng, margin)),
            Walk::Backward => (n + margin, edge_start(rng, margin) + n - 1),
        };
        walks[j] = walk;
    }
    let elements: u64 = shape.iter().product();
    if elements > MAX_TENSOR || (on_core && shape[0] > u64::from(PARTITIONS)) {
        return None;
    }
    let stride = |t: usize| shape[t + 1..].iter().product::<u64>();
    let dims = perm
        .iter()
        .zip(&walks)
        .zip(counts)
        .map(|((&t, walk), &num)| {
            let step = stride(t) as i64;
            let step = match walk {
                Walk::Forward | Walk::Indexed => step,
                Walk::Backward => -step,
                Walk::Repeat => 0,
            };
            ApDim { step, num }
        })
        .collect();
    let offset = (0..k).map(|t| first[t] * stride(t)).sum();
    Some(ApSide {
        tensor: unplaced(name, space, shape, dtype),
        offset,
        dims,
        indirect_dim: 0,
        vector_offset: None,
        scalar_offset: None,
    })
}

/// A start in `0..=last`: the first, the last, or any.
fn edge_start(rng: &mut Rng, last: u64) -> u64 {
    match rng.below(3) {
        0 => 0,
        1 => last,
        _ => rng.below(last + 1),
    }
}

/// A side walking `counts` row-major and contiguously over an HBM block of a few more
/// elements, from its start, its end or between (one element: the tensor's last).
fn flat(rng: &mut Rng, counts: &[u32], dtype: Dtype, name: String) -> ApSide {
    let total: u64 = counts.iter().map(|&n| u64::from(n)).product();
    let size = total + rng.pick(&[0, 0, 1, 5, 64]);
    let offset = match rng.below(3) {
        0 => 0,
        1 => size - total,
        _ => rng.below(size - total + 1),
    };
    let mut step = total;
    let dims = counts
        .iter()
        .map(|&num| {
            step /= u64::from(num);
            ApDim {
                step: step as i64,
                num,
            }
        })
        .collect();
    let shape = match size % 2 {
        0 if rng.chance(50) => vec![2, size / 2],
        _ => vec![size],
    };
    ApSide {
        tensor: unplaced(name, Space::Hbm, shape, dtype),
        offset,
        dims,
        indirect_dim: 0,
        vector_offset: None,
        scalar_offset: None,
    }
}

/// One random change that usually takes the pattern off its tensor: a pair's step, or
/// the offset (the tensor's last element, or any).
fn perturb(rng: &mut Rng, s: &mut ApSide) {
    let last = s.tensor.elements().saturating_sub(1);
    match rng.below(3) {
        0 => s.offset = last,
        1 => s.offset = rng.below(last + 1),
        _ => {
            let j = rng.below(s.dims.len() as u64) as usize;
            if let Some(d) = s.dims.get_mut(j) {
                d.step = i64::from(rng.range(0, 16)) - 8;
            }
        }
    }
}

/// An index tile of `n` positions: an `(n, 1)` tile (one index per partition) when it
/// fits the partitions, half the time, else a `[1, n]` vector; u32 or i32.
fn index_tile(rng: &mut Rng, n: u32, name: String) -> IndexAp {
    let dtype = rng.pick(&[Dtype::U32, Dtype::I32]);
    let tile = |shape: Vec<u64>| unplaced(name, Space::Sbuf, shape, dtype);
    let view = |tensor, offset: u64, dims: &[(i64, u32)]| IndexAp {
        tensor,
        offset,
        ap: Some(
            dims.iter()
                .map(|&(step, num)| ApDim { step, num })
                .collect(),
        ),
    };
    let (n64, wide) = (u64::from(n), rng.range(2, 8));
    let w = i64::from(wide);
    if rng.chance(50) {
        let column = n <= PARTITIONS && rng.chance(50);
        return IndexAp::whole(tile(if column { vec![n64, 1] } else { vec![1, n64] }));
    }
    let block = [4u32, 3, 2]
        .into_iter()
        .find(|b| n.is_multiple_of(*b) && n / b <= PARTITIONS);
    let column = n <= PARTITIONS;
    match rng.below(7) {
        // a block of a partitions by b columns (n = a * b) of an [a, W] tile, as two pairs
        // or with a unit pair between them, columns now and then reversed
        0..=2 if block.is_some() => {
            let b = block.unwrap_or(1);
            let a = n / b;
            let wide = u64::from(b + rng.range(0, 3));
            let c = rng.below(wide - u64::from(b) + 1);
            let t = tile(vec![a.into(), wide]);
            let (first, cols) = match rng.chance(50) {
                true => (c + u64::from(b) - 1, (-1, b)),
                false => (c, (1, b)),
            };
            match rng.chance(50) {
                true => view(t, first, &[(wide as i64, a), cols]),
                false => view(t, first, &[(wide as i64, a), (0, 1), cols]),
            }
        }
        // column c of an (n, W) tile, one index per partition (NKI's `i.ap([[W, n], [1,
        // 1]], offset = c)`), now and then from the last partition up
        0..=3 if column => {
            let c = rng.below(wide.into());
            let t = tile(vec![n64, wide.into()]);
            match rng.chance(50) {
                true => view(t, (n64 - 1) * u64::from(wide) + c, &[(-w, n), (1, 1)]),
                false => view(t, c, &[(w, n), (1, 1)]),
            }
        }
        // a window of a longer vector, or every other element of one
        0..=4 => {
            let extra = u64::from(rng.range(1, 8));
            let at = rng.below(extra + 1);
            view(tile(vec![1, n64 + extra]), at, &[(0, 1), (1, n)])
        }
        5 => view(tile(vec![1, 2 * n64]), rng.below(2), &[(0, 1), (2, n)]),
        // row r of an [R, n] tile (a partition's row)
        _ => {
            let rows = rng.range(2, 4);
            let r = rng.below(rows.into());
            let t = tile(vec![rows.into(), n64]);
            view(t, r * n64, &[(n.into(), 1), (1, n)])
        }
    }
}

/// `src` walked again as the destination, over the same tensors: the same walk, or
/// backwards (each unindexed pair reversed), so the copy reads what it writes.
fn in_place(rng: &mut Rng, src: &ApSide) -> Option<ApSide> {
    let mut d = src.clone();
    if rng.chance(50) {
        let mut offset = i128::from(d.offset);
        for (j, dim) in d.dims.iter_mut().enumerate() {
            if src.vector_offset.is_some() && j == src.indirect_dim {
                continue;
            }
            offset += i128::from(dim.step) * i128::from(dim.num - 1);
            dim.step = -dim.step;
        }
        d.offset = u64::try_from(offset).ok()?;
    }
    Some(d)
}

// ---- placement -----------------------------------------------------------------------

/// Allocates and writes every tensor of `dma` (each name once: an in-place copy shares
/// its tensors), records them, and appends the op.
fn place(b: &mut Builder, mut dma: ApDma) -> Option<()> {
    let mut placed: Vec<(String, FabricAddr)> = Vec::new();
    for s in [&mut dma.src, &mut dma.dst] {
        let view = s.clone();
        s.tensor.start = place_one(b, &mut placed, &s.tensor, data)?;
        let mut moving = None;
        if let Some(v) = &mut s.vector_offset {
            let n = view.dims.get(view.indirect_dim).map_or(0, |d| d.num);
            let values = index_values(&mut b.rng, n, view.index_bound());
            moving = IndexSpan::moving(&values, view.index_bound());
            let tile = tile_values(&mut b.rng, v, &values);
            v.tensor.start =
                place_one(b, &mut placed, &v.tensor, |b, t| index_tile_at(b, t, &tile))?;
        }
        if let Some(t) = &mut s.scalar_offset {
            let value = scalar_value(&mut b.rng, &view, moving);
            t.start = place_one(b, &mut placed, t, |b, t| one_at(b, t, value))?;
        }
    }
    b.push_ap("dma_copy_ap", dma);
    Some(())
}

/// The start of `t`: where it was placed already, or where `put` places it (then
/// recorded).
fn place_one(
    b: &mut Builder,
    placed: &mut Vec<(String, FabricAddr)>,
    t: &ApTensor,
    put: impl FnOnce(&mut Builder, &ApTensor) -> Option<FabricAddr>,
) -> Option<FabricAddr> {
    if let Some((_, at)) = placed.iter().find(|(n, _)| *n == t.name) {
        return Some(*at);
    }
    let at = put(b, t)?;
    placed.push((t.name.clone(), at));
    b.record_tensor(ApTensor {
        start: at,
        ..t.clone()
    });
    Some(at)
}

/// A place for `t`: HBM from the bottom or (now and then) ending on HBM's last byte; on
/// core an allocation across the partitions (in SBUF now and then ending on the
/// partition's last byte) from a first partition at the edges or anywhere.
fn alloc(b: &mut Builder, t: &ApTensor) -> Option<FabricAddr> {
    let size = t.dtype.size() as u64;
    if t.space == Space::Hbm {
        let bytes = t.elements() * size;
        return match b.rng.chance(15) {
            true => b.hbm_top(bytes).or_else(|| b.hbm(bytes)),
            false => b.hbm(bytes),
        };
    }
    let row = u32::try_from(t.row_elements() * size).ok()?;
    let off = match (t.space, b.rng.chance(15)) {
        (Space::Sbuf, true) => b.sbuf_top(row).or_else(|| b.sbuf(row))?,
        (Space::Sbuf, false) => b.sbuf(row)?,
        _ => b.psum(row)?,
    };
    let parts = u32::try_from(t.shape.first().copied().unwrap_or(1)).ok()?;
    let p = b.rng.edge_partition(parts, PARTITIONS);
    b.fabric_of(Builder::addr4(t.space, p, off)?)
}

/// `bytes` (the tensor's elements in order) written into `t` placed at `at`, one
/// partition row at a time on core.
fn fill(b: &mut Builder, t: &ApTensor, at: FabricAddr, bytes: &[u8]) -> Option<()> {
    let size = t.dtype.size() as u64;
    let row = t.row_elements().max(1);
    let placed = ApTensor {
        start: at,
        ..t.clone()
    };
    for (q, chunk) in bytes.chunks((row * size) as usize).enumerate() {
        b.write_tensor(placed.addr(q as u64 * row), chunk)?;
    }
    Some(())
}

/// A data tensor of random elements (the dtype's special values mixed in).
fn data(b: &mut Builder, t: &ApTensor) -> Option<FabricAddr> {
    let at = alloc(b, t)?;
    let bytes = b.rng.edge_data(t.dtype, t.elements() as usize);
    fill(b, t, at, &bytes)?;
    Some(at)
}

/// The elements of `v`'s tile: `values` where the view reads them, indices of every kind
/// elsewhere (a route reading outside the view would move other rows).
fn tile_values(rng: &mut Rng, v: &IndexAp, values: &[u32]) -> Vec<u32> {
    let mut tile = index_values(rng, v.tensor.elements() as u32, u32::MAX.into());
    for (k, &value) in values.iter().enumerate() {
        tile[v.element(k as u32) as usize] = value;
    }
    tile
}

/// An index tile holding `values`.
fn index_tile_at(b: &mut Builder, t: &ApTensor, values: &[u32]) -> Option<FabricAddr> {
    let at = alloc(b, t)?;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    fill(b, t, at, &bytes)?;
    Some(at)
}

/// A 1x1 i32 or i64 tensor holding `value` (its low 32 bits for i32).
fn one_at(b: &mut Builder, t: &ApTensor, value: i64) -> Option<FabricAddr> {
    let at = alloc(b, t)?;
    let bytes = value.to_le_bytes();
    fill(b, t, at, bytes.get(..t.dtype.size())?)?;
    Some(at)
}

/// `n` indices for a dim of `bound`: in range, at its edges, at the signed and unsigned
/// extremes, negative (as i32; u32 tiles hold the same bits), a third of the time with
/// repeats; a quarter of the time every one in range (so that `oob = "error"` copies
/// run), now and then every one out of range.
fn index_values(rng: &mut Rng, n: u32, bound: u64) -> Vec<u32> {
    let bound = u32::try_from(bound).unwrap_or(u32::MAX);
    let (all_oob, all_in) = match rng.below(20) {
        0 => (true, false),
        1..=5 => (false, true),
        _ => (false, false),
    };
    let repeats = rng.chance(33);
    let mut out: Vec<u32> = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let v = match (all_oob, all_in, repeats && rng.chance(40)) {
            (true, _, _) => bound.saturating_add(rng.below(3) as u32),
            (false, _, true) => rng.pick_from(&out).unwrap_or(0),
            (false, true, false) => rng.below(u64::from(bound)) as u32,
            (false, false, false) => index_value(rng, bound),
        };
        out.push(v);
    }
    out
}

/// One index for a dim of `bound` (module docs).
fn index_value(rng: &mut Rng, bound: u32) -> u32 {
    match rng.below(100) {
        0..=49 => rng.below(u64::from(bound)) as u32,
        50..=57 => bound.saturating_sub(1),
        58..=63 => bound,
        64..=67 => bound.saturating_add(1),
        68..=70 => i32::MAX as u32,
        71..=73 => 1 << 31,
        74..=77 => u32::MAX,
        // -bound ..= -1: what a Python-style wrap would bring back into range
        78..=84 => rng.range(1, bound.max(1)).wrapping_neg(),
        85..=89 => 0,
        _ => rng.next_u32(),
    }
}

/// A scalar offset for `s` (whose in-bounds indices, if it has an index tile, span
/// `moving`): one that keeps the walk inside the tensor, the first one below or above
/// those, its dtype's extremes (an i64 also an in-range value plus 2^32, which an i32 read
/// would bring back in range), or small values either way.
fn scalar_value(rng: &mut Rng, s: &ApSide, moving: Option<IndexSpan>) -> i64 {
    let extent = i64::try_from(s.index_bound()).unwrap_or(0);
    let ok: SmallVec<[i64; 64]> = (-extent..=extent)
        .filter(|&v| s.check_scalar("src", v, moving).is_ok())
        .collect();
    let wide = s
        .scalar_offset
        .as_ref()
        .is_some_and(|t| t.dtype == Dtype::I64);
    match rng.below(10) {
        0..=5 if !ok.is_empty() => rng.pick_from(&ok).unwrap_or(0),
        6 => ok.first().map_or(-1, |v| v - 1),
        7 => ok.last().map_or(1, |v| v + 1),
        8 if wide => match rng.below(3) {
            0 => rng.pick(&[i64::MIN, i64::MAX]),
            _ => ok.first().map_or(0, |v| v + (1 << 32)),
        },
        8 => i64::from(rng.pick(&[i32::MIN, i32::MAX])),
        _ => rng.range(0, 8) as i64 - 4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuzz::case::Op;

    /// The access-pattern DMAs of `n` fragments tried on fresh builders.
    fn dmas(n: u64) -> Vec<ApDma> {
        let mut out = Vec::new();
        for seed in 0..n {
            let mut b = Builder::new(Rng::new(seed), Generation::Cayman);
            if fragment(&mut b).is_some() {
                for op in b.finish().stream {
                    if let Op::Ap(d) = op {
                        out.push(*d);
                    }
                }
            }
        }
        out
    }

    #[test]
    fn most_fragments_are_generated_and_every_one_is_valid() {
        let got = dmas(400);
        assert!(got.len() > 380, "only {} of 400 fragments", got.len());
        for d in &got {
            let again = dma_copy_ap(
                "dma_copy",
                d.src.clone(),
                d.dst.clone(),
                ApOptions {
                    op: d.op,
                    oob: d.oob,
                    unique_indices: d.unique_indices,
                    dge: d.dge,
                },
            );
            assert!(again.is_ok(), "{d:?}");
        }
    }

    #[test]
    fn fragments_reach_every_form() {
        let got = dmas(2000);
        assert!(got.len() > 1900, "only {} of 2000 fragments", got.len());
        let count = |f: &dyn Fn(&ApDma) -> bool| got.iter().filter(|d| f(d)).count();
        let both = |f: &dyn Fn(&ApSide) -> bool, d: &ApDma| f(&d.src) || f(&d.dst);
        let tile = |s: &ApSide, shape: fn(&[u64]) -> bool, dtype| {
            s.vector_offset.as_ref().is_some_and(|v| {
                v.ap.is_none() && shape(&v.tensor.shape) && v.tensor.dtype == dtype
            })
        };
        let view = |s: &ApSide, f: fn(&IndexAp) -> bool| s.vector_offset.as_ref().is_some_and(f);
        let forms: [(&str, usize); 19] = [
            ("src indexed", count(&|d| d.src.vector_offset.is_some())),
            ("dst indexed", count(&|d| d.dst.vector_offset.is_some())),
            ("both indexed", count(&|d| d.indexed() && d.coupled())),
            (
                "indexed on dim 2+",
                count(&|d| both(&|s| s.vector_offset.is_some() && s.indirect_dim >= 2, d)),
            ),
            (
                "(N, 1) i32",
                count(&|d| both(&|s| tile(s, |sh| sh[1] == 1 && sh[0] > 1, Dtype::I32), d)),
            ),
            (
                "[1, N] u32",
                count(&|d| both(&|s| tile(s, |sh| sh[0] == 1 && sh[1] > 1, Dtype::U32), d)),
            ),
            (
                "a column of a wider index tile",
                count(&|d| both(&|s| view(s, |v| v.ap.is_some() && v.tensor.shape[0] > 1), d)),
            ),
            (
                "an index window at an offset",
                count(&|d| both(&|s| view(s, |v| v.ap.is_some() && v.offset > 0), d)),
            ),
            (
                "an index view stepping backwards",
                count(&|d| both(&|s| view(s, |v| v.dims().iter().any(|p| p.step < 0)), d)),
            ),
            (
                "scalar offset",
                count(&|d| both(&|s| s.scalar_offset.is_some(), d)),
            ),
            ("5 pairs", count(&|d| both(&|s| s.dims.len() == 5, d))),
            (
                "step 0",
                count(&|d| both(&|s| s.dims.iter().any(|p| p.step == 0), d)),
            ),
            (
                "negative step",
                count(&|d| both(&|s| s.dims.iter().any(|p| p.step < 0), d)),
            ),
            (
                "offset at the last element",
                count(&|d| both(&|s| s.offset + 1 == s.tensor.elements(), d)),
            ),
            (
                "sbuf partitions stepped",
                count(&|d| {
                    both(
                        &|s| {
                            s.tensor.space == Space::Sbuf
                                && s.tensor.shape[0] > 1
                                && s.dims[0].num > 1
                        },
                        d,
                    )
                }),
            ),
            (
                "psum",
                count(&|d| both(&|s| s.tensor.space == Space::Psum, d)),
            ),
            (
                "in place",
                count(&|d| d.src.tensor.name == d.dst.tensor.name),
            ),
            ("skip", count(&|d| d.oob == OobMode::Skip)),
            ("non-unique", count(&|d| !d.unique_indices)),
        ];
        // every form in at least one fragment in twenty
        for (form, n) in forms {
            assert!(n >= 100, "{form}: only {n} of {}", got.len());
        }
        // (a block needs an index count with a divisor: one fragment in forty)
        let multi = |v: &IndexAp| v.dims().iter().filter(|p| p.num > 1).count() >= 2;
        let blocks = count(&|d| both(&|s| view(s, multi), d));
        assert!(
            blocks >= 50,
            "an index view over partitions and columns: only {blocks}"
        );
        for op in ComputeOp::ALL {
            assert!(got.iter().any(|d| d.op == op), "{op:?} never drawn");
        }
    }

    #[test]
    fn index_values_reach_every_edge() {
        let mut rng = Rng::new(5);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..300 {
            seen.extend(index_values(&mut rng, 8, 10));
        }
        for v in [
            9,
            10,
            11,
            i32::MAX as u32,
            1 << 31,
            u32::MAX,
            (-10i32) as u32,
        ] {
            assert!(seen.contains(&v), "{v} never drawn");
        }
    }
}
