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

#[cfg(test)]
mod tests {
    use super::super::test_support::{engine, fill_random};
    use super::super::DgeRoute;
    use crate::error::ErrorKind;
    use crate::nki::{dma_copy_ap, ApDim, ApDma, ApOptions, ApSide, ApTensor, OobMode};
    use crate::reference;
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};
    use dma::{ComputeOp, Dtype, Fabric, FabricAddr, Generation, Space};
    use proptest::prelude::*;

    /// An HBM `[8, 8]` tensor at `0x1000 + at` or an SBUF one from partition 2.
    fn tensor(name: &str, on_core: bool, at: u64, dtype: Dtype) -> ApTensor {
        let (start, space) = match on_core {
            true => (SBUF_BASE + 2 * SBUF_STRIDE + 64 + at, Space::Sbuf),
            false => (0x1000 + at, Space::Hbm),
        };
        ApTensor {
            name: name.into(),
            start: FabricAddr(start),
            space,
            shape: vec![8, 8],
            dtype,
        }
    }

    /// An i32 index tile of `n` in SBUF: a vector in partition 0 or a column from
    /// partition 40, `at` bytes into the partition.
    fn tile(column: bool, n: u32, at: u64) -> ApTensor {
        let (p, shape) = match column {
            true => (40, vec![u64::from(n), 1]),
            false => (0, vec![1, u64::from(n)]),
        };
        ApTensor {
            name: "idx".into(),
            start: FabricAddr(SBUF_BASE + p * SBUF_STRIDE + at),
            space: Space::Sbuf,
            shape,
            dtype: Dtype::I32,
        }
    }

    /// Writes `values` as the side's indices (nothing for a side without).
    fn write_tile(f: &mut Fabric, s: &ApSide, values: &[i32]) {
        if s.vector_offset.is_none() {
            return;
        }
        for (k, v) in values
            .iter()
            .enumerate()
            .take(s.dims[s.indirect_dim].num as usize)
        {
            let at = s.index_addr(k as u32).unwrap();
            f.write_elems(at, &[*v]).unwrap();
        }
    }

    /// A side over `t` with the pattern `counts` x `steps` from `offset`, indexed on
    /// dim `d` by `tile` when given.
    fn side(
        t: ApTensor,
        (counts, steps): (&[u32], &[i64]),
        offset: u64,
        index: Option<(usize, ApTensor)>,
    ) -> ApSide {
        let dims = counts
            .iter()
            .zip(steps)
            .map(|(&num, &step)| ApDim { step, num })
            .collect();
        let (indirect_dim, vector_offset) = match index {
            Some((d, tile)) => (d, Some(tile)),
            None => (0, None),
        };
        ApSide {
            tensor: t,
            offset,
            dims,
            indirect_dim,
            vector_offset,
            scalar_offset: None,
        }
    }

    /// Runs `c` on the reference (a copy of `f`) and the DGE route (on `f`) and asserts
    /// equal memory and outcome, or errors of one kind, the same message for index and
    /// duplicate errors, with `f` unchanged.
    fn agree(f: &mut Fabric, c: &ApDma) {
        let mut rf = f.clone();
        let expect = reference::ap_dma(&mut rf, c);
        let digest = f.digest();
        let got = DgeRoute::new().execute_ap_dma(f, c, engine());
        match (expect, got) {
            (Ok(e), Ok(g)) => {
                assert_eq!(f.first_difference(&rf), None, "fabric differs for {c:?}");
                assert_eq!(g.outcome, e, "outcome differs");
            }
            (Err(e), Err(g)) => {
                assert_eq!(g.kind(), e.kind(), "reference: {e}; dge: {g}");
                if matches!(
                    e.kind(),
                    ErrorKind::IndexOutOfBounds(_) | ErrorKind::DuplicateDestination
                ) {
                    assert_eq!(g.to_string(), e.to_string());
                }
                assert_eq!(f.digest(), digest, "a failing copy wrote: {g}");
            }
            (e, g) => panic!("reference {e:?} but dge {g:?} for {c:?}"),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 2048 }))]
        /// Random access-pattern copies (1-3 pairs with any steps and offsets, HBM or
        /// partition-major SBUF, an i32 index tile as a vector or a column on either
        /// side or both, on dim 0 or 1, out-of-bounds, negative and repeated indices,
        /// every compute op and OOB policy): the DGE route and the reference agree.
        #[test]
        fn the_dge_route_agrees_with_the_reference(
            counts in prop::collection::vec(1u32..4, 1..4),
            mut steps in prop::collection::vec(0i64..9, 6),
            (src_core, dst_core) in (any::<bool>(), any::<bool>()),
            (src_off, dst_off) in (0u64..12, 0u64..12),
            src_index in proptest::option::of((0usize..2, any::<bool>())),
            dst_index in proptest::option::of((0usize..2, any::<bool>())),
            values in prop::collection::vec(-2i32..10, 6),
            op in prop::sample::select(ComputeOp::ALL.to_vec()),
            (skip, unique) in (any::<bool>(), any::<bool>()),
            dtype in prop::sample::select(vec![Dtype::F32, Dtype::I32, Dtype::U16]),
        ) {
            // on SBUF the first pair steps whole rows of 8
            if src_core { steps[0] *= 8; }
            if dst_core { steps[3] *= 8; }
            let n = counts.len();
            let make = |core, at, steps: &[i64], off, ix: Option<(usize, bool)>, tile_at| {
                let ix = ix.filter(|&(d, _)| d < n);
                let ix = ix.map(|(d, col)| (d, tile(col, counts[d], tile_at)));
                side(tensor("t", core, at, dtype), (&counts, steps), off, ix)
            };
            let src = make(src_core, 0, &steps[..n], src_off, src_index, 0);
            let dst = make(dst_core, 0x400, &steps[3..3 + n], dst_off, dst_index, 256);
            let opts = ApOptions {
                op,
                oob: if skip { OobMode::Skip } else { OobMode::Error },
                unique_indices: unique,
            };
            let Ok(lowered) = dma_copy_ap("dma_copy", src, dst, opts) else {
                return Ok(());
            };
            let c = &lowered.ap_dmas[0];
            let mut f = Fabric::new(Generation::Cayman);
            for t in [&c.src.tensor, &c.dst.tensor] {
                for p in 0..8 {
                    fill_random(&mut f, t.addr(p * 8), 8 * dtype.size() as u64, t.start.0 + p);
                }
            }
            write_tile(&mut f, &c.src, &values);
            write_tile(&mut f, &c.dst, &values[3..]);
            agree(&mut f, c);
        }
    }
}
