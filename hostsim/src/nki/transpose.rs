//! NKI's `dma_transpose` lowered onto access-pattern DMAs ([`super::ApDma`]): the direct
//! one ([`dma_transpose`]) and the N-D indirect permutations (`dma_gather_transpose` with
//! `axes` (2, 1, 0) or (3, 1, 2, 0)).
//!
//! # The direct transpose
//!
//! `dst = src.transpose(axes)` (NumPy's), `axes` one of NKI's (1, 0), (2, 1, 0) or (3, 1,
//! 2, 0), by default the one of `src`'s rank. Each side is a whole tensor (one pair per
//! dim) or an `.ap()` (one pair per dim of the view); `dst`'s counts are `src`'s permuted,
//! and the dtypes are equal (a transpose moves elements without a cast). Element `(j0,
//! .., jn)` of `dst`'s walk is the element of `src`'s walk at `i_axes[k] = j_k`. It is one
//! copy that walks one side in the other's order where that side is in HBM (the source
//! when it is, else the destination); with both on core, where NKI's first pair must step
//! partitions on each side, it is one copy per destination position of all dims but the
//! last: `src`'s partition pair (every axes NKI documents moves it last) into one row.
//!
//! # Semantics
//!
//! `src` is `[N, m1, .., K]` in HBM (3-D: one middle dim; 4-D: two, at least one of them
//! 1 as NKI requires), the index tile holds `I` u32 indices (a `[1, I]` or `(I, 1)` tile
//! in SBUF), and `dst` is `[K, m1, .., I]` of `src`'s dtype:
//! `dst[k][m..][i] = src[index[i]][m..][k]`. Both permutations keep the middle dims in
//! order, so with `J = prod(m)` the op is the 3-D `dst[k][j][i] = src[index[i]][j][k]`
//! (NumPy: `src[index].transpose(axes)`). An index `>= N` fails the op under
//! `oob = "error"` (nothing written) and moves none of its elements under `"skip"`.
//!
//! # Lowering
//!
//! DMA_INDIRECT's GATHER_TRANSPOSE kind cannot say it: its indexed rows are `elem_size`
//! bytes apart and `elem_size` long, so a `[J, K]` row cannot be read one `K`-slab at a
//! time, and the kind takes no shape register. So the op is `K` access-pattern DMAs, one
//! per destination row block `k` (on core: destination partition `k`), each one software
//! DGE request (`Kind::Indirect`) with the source's indirect dim the gathered one:
//!
//! - source: `src.ap([[J * K, I], [K, J]], offset = k, vector_offset = index)`, walking
//!   `(i, j)`: element `k` of slab `j` of row `index[i]`;
//! - destination: `dst.ap([[J * I, 1], [1, I], [I, J]], offset = k * J * I)`, walking the
//!   same `(i, j)`: element `j * I + i` of row `k` (the first pair, count 1, is NKI's
//!   partition step on core).
//!
//! The `K` copies share the index tile, so each reports an out-of-bounds index under
//! `"skip"`, and under `"error"` the first copy fails before any copy writes.

use dma::{ComputeOp, Dtype, Generation, Space};

use super::ap::{check_side, dma_copy_ap, ApDim, ApOptions, ApSide, ApTensor, DgeMode, IndexAp};
use super::{Lowered, OobMode};
use crate::error::Error;

/// NKI's `dma_transpose` without indices (module docs): `src` and `dst` as walks, one pair
/// per dim, checked and lowered to access-pattern DMAs.
pub fn dma_transpose(src: ApSide, dst: ApSide, axes: Option<&[u32]>) -> Result<Lowered, Error> {
    const OP: &str = "dma_transpose";
    let err = |side, rule| Error::ApPattern { op: OP, side, rule };
    for (name, side) in [("src", &src), ("dst", &dst)] {
        if side.dynamic() {
            return Err(err(
                name,
                "a direct dma_transpose's sides take no vector_offset or scalar_offset (rows picked by an index tile are dma_gather_transpose's)".into(),
            ));
        }
    }
    // the user's walks, checked as given (the copies below rewrite them)
    check_side(OP, "src", &src)?;
    check_side(OP, "dst", &dst)?;
    let rank = src.dims.len();
    let axes = axes.unwrap_or_else(|| {
        TRANSPOSE_AXES
            .into_iter()
            .find(|a| a.len() == rank)
            .unwrap_or(&[])
    });
    if !TRANSPOSE_AXES.contains(&axes) || axes.len() != rank {
        return Err(err(
            "axes",
            format!("{axes:?} for a src of {rank} dims: NKI's dma_transpose permutes 2-D by [1, 0], 3-D by [2, 1, 0] and 4-D by [3, 1, 2, 0]"),
        ));
    }
    let permuted =
        |s: &ApSide| -> Vec<ApDim> { axes.iter().map(|&a| s.dims[a as usize]).collect() };
    let counts = |dims: &[ApDim]| dims.iter().map(|d| d.num).collect::<Vec<_>>();
    let want = counts(&permuted(&src));
    if counts(&dst.dims) != want {
        return Err(err(
            "dst",
            format!(
                "{} walks {:?}; src {} {:?} transposed by {axes:?} is {want:?}",
                dst.tensor.name,
                counts(&dst.dims),
                src.tensor.name,
                counts(&src.dims)
            ),
        ));
    }
    if dst.tensor.dtype != src.tensor.dtype {
        return Err(err(
            "dst",
            format!(
                "{} has dtype {} but {} has {}: a transpose moves elements without a cast",
                dst.tensor.name, dst.tensor.dtype, src.tensor.name, src.tensor.dtype
            ),
        ));
    }
    if src.tensor.space == Space::Hbm {
        return plain_copy(with(&src, src.offset, permuted(&src)), dst);
    }
    if dst.tensor.space == Space::Hbm {
        let mut inverse = vec![dst.dims[0]; rank];
        for (k, &a) in axes.iter().enumerate() {
            inverse[a as usize] = dst.dims[k];
        }
        return plain_copy(src, with(&dst, dst.offset, inverse));
    }
    per_row(&src, &dst, &permuted(&src))
}

/// A plain access-pattern copy of a direct transpose.
fn plain_copy(src: ApSide, dst: ApSide) -> Result<Lowered, Error> {
    let opts = ApOptions {
        op: ComputeOp::None,
        oob: OobMode::Error,
        unique_indices: true,
        dge: DgeMode::Chosen,
    };
    dma_copy_ap("dma_transpose", src, dst, opts)
}

/// `side` walking `dims` from `offset`.
fn with(side: &ApSide, offset: u64, dims: Vec<ApDim>) -> ApSide {
    ApSide {
        offset,
        dims: dims.into_iter().collect(),
        ..side.clone()
    }
}

/// A direct transpose with both sides on core: per destination position of all dims but
/// the last, `src`'s last-moved pair (its partition pair: every axes NKI documents ends
/// in 0) into that row of `dst`. `from` is `src`'s pairs in `dst`'s order.
fn per_row(src: &ApSide, dst: &ApSide, from: &[ApDim]) -> Result<Lowered, Error> {
    let last = from.len() - 1;
    let prefixes: u64 = from[..last].iter().map(|d| u64::from(d.num)).product();
    let mut lowered = Lowered::default();
    for p in 0..prefixes {
        let (mut rest, mut so, mut d_off) = (p, i128::from(src.offset), i128::from(dst.offset));
        for k in (0..last).rev() {
            let j = rest % u64::from(from[k].num);
            rest /= u64::from(from[k].num);
            so += i128::from(from[k].step) * i128::from(j);
            d_off += i128::from(dst.dims[k].step) * i128::from(j);
        }
        // the walks of valid sides keep every position inside their tensors
        let s = with(src, so as u64, vec![from[last]]);
        let row = ApDim {
            step: dst.dims[0].step,
            num: 1,
        };
        let d = with(dst, d_off as u64, vec![row, dst.dims[last]]);
        lowered.ap_dmas.extend(plain_copy(s, d)?.ap_dmas);
    }
    Ok(lowered)
}

/// The permutations of NKI's `dma_transpose` the model runs: 2-D (DMA_INDIRECT
/// GATHER_TRANSPOSE), 3-D and 4-D (this module).
pub const TRANSPOSE_AXES: [&[u32]; 3] = [&[1, 0], &[2, 1, 0], &[3, 1, 2, 0]];

/// NKI's limit on the transposed dim (`src.shape[-1] <= 128`).
pub const MAX_TRANSPOSED: u64 = 128;

const OP: &str = "dma_gather_transpose";

fn rule(side: &'static str, rule: String) -> Error {
    Error::ApPattern { op: OP, side, rule }
}

/// The tensors of an N-D gather-transpose.
pub struct Transpose<'a> {
    /// NKI's `axes`.
    pub axes: &'a [u32],
    /// `[N, m.., K]` in HBM.
    pub src: &'a ApTensor,
    /// `I` u32 indices.
    pub index: &'a ApTensor,
    /// `[K, m.., I]`.
    pub dst: &'a ApTensor,
}

/// Checks an N-D gather-transpose (module docs) and lowers it to `K` access-pattern
/// DMAs. `axes` must be one of [`TRANSPOSE_AXES`] of 3 or 4 entries (`[1, 0]` is
/// [`super::dma_gather_transpose`]'s).
pub fn dma_gather_transpose_nd(
    generation: Generation,
    t: Transpose<'_>,
    oob: OobMode,
) -> Result<Lowered, Error> {
    let Transpose {
        axes,
        src,
        index,
        dst,
    } = t;
    check_axes(axes, src)?;
    if generation == Generation::Sunda {
        return Err(super::dma_ops::trn2_only(OP));
    }
    check_operands(src, index, dst)?;
    let shape = &src.shape;
    let k = shape.last().copied().unwrap_or(1);
    // check_axes proved `src` has 3 or 4 dims
    let j: u64 = shape
        .get(1..shape.len() - 1)
        .unwrap_or_default()
        .iter()
        .product();
    let i = index.elements();
    let too_big = || {
        rule(
            "dst",
            format!("{} has {} elements", dst.name, dst.elements()),
        )
    };
    let (i32_, j32) = (
        u32::try_from(i).map_err(|_| too_big())?,
        u32::try_from(j).map_err(|_| too_big())?,
    );
    let step = |v: u64| i64::try_from(v).map_err(|_| too_big());
    let opts = ApOptions {
        op: ComputeOp::None,
        oob,
        unique_indices: true,
        dge: DgeMode::Chosen,
    };
    let mut lowered = Lowered::default();
    for c in 0..k {
        let from = ApSide {
            tensor: src.clone(),
            offset: c,
            dims: [dim(step(j * k)?, i32_), dim(step(k)?, j32)]
                .into_iter()
                .collect(),
            indirect_dim: 0,
            vector_offset: Some(IndexAp::whole(index.clone())),
            scalar_offset: None,
        };
        let to = ApSide {
            tensor: dst.clone(),
            offset: c * j * i,
            dims: [dim(step(j * i)?, 1), dim(1, i32_), dim(step(i)?, j32)]
                .into_iter()
                .collect(),
            indirect_dim: 0,
            vector_offset: None,
            scalar_offset: None,
        };
        lowered
            .ap_dmas
            .extend(dma_copy_ap(OP, from, to, opts)?.ap_dmas);
    }
    Ok(lowered)
}

fn dim(step: i64, num: u32) -> ApDim {
    ApDim { step, num }
}

/// `axes` is a 3-D or 4-D permutation NKI documents, of `src`'s rank; a 4-D `src` has a
/// middle dim of 1.
fn check_axes(axes: &[u32], src: &ApTensor) -> Result<(), Error> {
    if !TRANSPOSE_AXES.contains(&axes) {
        return Err(rule(
            "axes",
            format!("{axes:?} is not a permutation NKI's dma_transpose documents: [1, 0] (2-D), [2, 1, 0] (3-D) or [3, 1, 2, 0] (4-D)"),
        ));
    }
    let s = &src.shape;
    if s.len() != axes.len() {
        return Err(rule(
            "src",
            format!(
                "{} has shape {s:?} ({} dims) but axes {axes:?} permutes {} dims",
                src.name,
                s.len(),
                axes.len()
            ),
        ));
    }
    if let [_, a, b, _] = s.as_slice() {
        if *a > 1 && *b > 1 {
            return Err(rule(
                "src",
                format!("{} has shape {s:?}; NKI: when src is 4-D, src.shape[1] or src.shape[2] must be 1", src.name),
            ));
        }
    }
    Ok(())
}

/// `src` in HBM with at most [`MAX_TRANSPOSED`] elements on its last dim, u32 indices,
/// and `dst` of `src`'s dtype and of the transposed shape.
fn check_operands(src: &ApTensor, index: &ApTensor, dst: &ApTensor) -> Result<(), Error> {
    if src.space != Space::Hbm {
        return Err(rule(
            "src",
            format!(
                "{} is in {}; an indirect dma_transpose reads its rows from HBM",
                src.name,
                src.space.name()
            ),
        ));
    }
    let s = &src.shape;
    let k = s.last().copied().unwrap_or(0);
    if k > MAX_TRANSPOSED {
        return Err(rule(
            "src",
            format!(
                "{} has shape {s:?}; NKI: src.shape[-1] must be <= {MAX_TRANSPOSED}",
                src.name
            ),
        ));
    }
    if index.dtype != Dtype::U32 {
        return Err(rule(
            "index",
            format!(
                "{} has dtype {}; dma_transpose indices are u32",
                index.name, index.dtype
            ),
        ));
    }
    super::dma_ops::two_byte_elements(OP, src.dtype)?;
    if dst.dtype != src.dtype {
        return Err(rule(
            "dst",
            format!(
                "{} has dtype {} but {} has {}: elements move without a cast",
                dst.name, dst.dtype, src.name, src.dtype
            ),
        ));
    }
    let mut want = vec![k];
    // check_axes proved `src` has 3 or 4 dims
    want.extend_from_slice(s.get(1..s.len() - 1).unwrap_or_default());
    want.push(index.elements());
    if dst.shape != want {
        return Err(rule(
            "dst",
            format!(
                "{} has shape {:?}; src {s:?} gathered by {} indices and transposed is {want:?}",
                dst.name,
                dst.shape,
                index.elements()
            ),
        ));
    }
    Ok(())
}
