//! NKI's N-D indirect `dma_transpose` permutations (`dma_gather_transpose` with `axes`
//! (2, 1, 0) or (3, 1, 2, 0)), lowered onto access-pattern DMAs ([`super::ApDma`]).
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

use super::ap::{dma_copy_ap, ApDim, ApOptions, ApSide, ApTensor, IndexAp};
use super::{Lowered, OobMode};
use crate::error::Error;

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
