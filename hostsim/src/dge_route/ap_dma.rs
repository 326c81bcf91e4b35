//! The software-DGE access-pattern copy ([`ApDma`]) as one DGE request.
//!
//! Each side becomes a DGE access pattern over the fabric: in HBM the NKI pattern as it
//! is (element steps from element `offset`); on SBUF/PSUM the first pair's step divided
//! by the partition row `F` is the DGE's partition step, the other pairs step elements
//! inside the row, and the start is partition `offset / F`, element `offset % F`
//! (`crate::nki::ap` proved the first pair steps whole rows and the rest stays in one).
//! A scalar offset moves the start by its value times `stride_d` (read from the fabric
//! and checked first). A vector offset is the side's indirection on dim `d`: step
//! `stride_d` elements (a partition when `d = 0` on SBUF/PSUM), bound `shape[d]`, its
//! tile read as u32 (an i32 below 0 is at least 2^31, out of bounds) contiguously for a
//! `[1, N]` vector or one partition apart for an `(N, 1)` tile.
//!
//! Elements are the units of the sequential order, so a copy that reads what it writes
//! has the reference's element-by-element result. A plain copy under `unique_indices`
//! sets `non_unique_dst_idx` (last index wins); a compute op keeps the duplicate check.

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::{AccessPattern, ElementOrder, IndexDtype, IndexLayout, Request};
use dma::{ComputeOp, Fabric};

use super::Lowered;
use crate::error::Error;
use crate::nki::{ApDma, ApSide, OobMode};

/// The lowered copy: one request, its skips reported.
pub(super) fn lower(fabric: &Fabric, c: &ApDma) -> Result<Lowered, Error> {
    let policy = match c.oob {
        OobMode::Error => OobPolicy::HardError,
        OobMode::Skip => OobPolicy::SoftSkip,
    };
    let (src, src_ind, src_index) = side(fabric, "src", &c.src, policy)?;
    let (dst, dst_ind, dst_index) = side(fabric, "dst", &c.dst, policy)?;
    let kind = match c.indexed() {
        true => Kind::Indirect,
        false => Kind::Direct2d,
    };
    let mut req = Request::new(kind, src, dst, c.src.tensor.dtype);
    req.src_indirection = src_ind;
    req.dst_indirection = dst_ind;
    req.src_index = src_index;
    req.dst_index = dst_index;
    req.op = c.op;
    req.non_unique_dst_idx = !c.unique_indices || c.op == ComputeOp::None;
    req.order = ElementOrder::Sequential { unit_elems: 1 };
    Ok(Lowered {
        requests: vec![req],
        rows: [None, None],
        report_skips: true,
    })
}

/// One side's DGE pattern, indirection and index layout.
fn side(
    fabric: &Fabric,
    name: &'static str,
    s: &ApSide,
    policy: OobPolicy,
) -> Result<(AccessPattern, Option<Indirection>, IndexLayout), Error> {
    let t = &s.tensor;
    let scalar = s.scalar_value(fabric, name)?;
    // check_scalar proved the shifted offset is an element of the tensor.
    let offset =
        (i128::from(s.offset) + i128::from(scalar) * i128::from(s.indirect_stride())) as u64;
    let size = t.dtype.size() as i64;
    let (start, dims, unit) = match t.partition_stride() {
        None => (
            t.addr(offset),
            s.dims.iter().map(|d| (d.step, d.num)).collect(),
            size,
        ),
        Some(stride) => {
            let f = t.row_elements().max(1);
            let mut dims: Vec<(i64, u32)> = s.dims.iter().map(|d| (d.step, d.num)).collect();
            dims[0].0 /= f as i64;
            (t.addr(offset), dims, stride as i64)
        }
    };
    let pattern = AccessPattern::new(start, size as u32, &dims);
    let Some(tile) = &s.vector_offset else {
        return Ok((pattern, None, IndexLayout::default()));
    };
    let step_elems = match (s.indirect_dim, t.partition_stride()) {
        (0, Some(_)) => 1,
        _ => s.indirect_stride() as i64,
    };
    let step_bytes = step_elems * if s.indirect_dim == 0 { unit } else { size };
    let step = i32::try_from(step_bytes).map_err(|_| Error::ApPattern {
        op: "dma_copy",
        side: name,
        rule: format!(
            "an index step of {step_bytes} bytes along indirect_dim {} does not fit the DGE's 32-bit indirection step",
            s.indirect_dim
        ),
    })?;
    let ind = Indirection {
        dim: s.indirect_dim,
        indices: tile.start,
        step,
        bound: Some(s.index_bound()),
        policy,
    };
    let layout = IndexLayout {
        dtype: IndexDtype::U32,
        pattern: match (tile.shape.first(), tile.partition_stride()) {
            (Some(&n), Some(stride)) if n > 1 => Some(
                [dge::ByteDim {
                    step: stride as i64,
                    count: n,
                }]
                .into_iter()
                .collect(),
            ),
            _ => None,
        },
        bias: 0,
    };
    Ok((pattern, Some(ind), layout))
}
