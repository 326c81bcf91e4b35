//! The software-DGE access-pattern copy ([`ApDma`]) as one DGE request.
//!
//! Each side becomes a DGE access pattern over the fabric: in HBM the NKI pattern as it
//! is (element steps from element `offset`); on SBUF/PSUM the first pair's step divided
//! by the partition row `F` is the DGE's partition step, the other pairs step elements
//! inside the row, and the start is partition `offset / F`, element `offset % F`
//! (`crate::nki::ap` proved the first pair steps whole rows and the rest stays in one).
//! A scalar offset moves the start by its value times `stride_d` (read from the fabric
//! and checked first; under `oob = skip` one that takes a side without an index tile out
//! of its tensor lowers the copy to no request, its skip reported). A vector offset is the side's indirection on dim `d`: step
//! `stride_d` elements (a partition when `d = 0` on SBUF/PSUM), bound `shape[d]`, its
//! tile read as u32 (an i32 below 0 is at least 2^31, out of bounds) through the DGE's
//! index pattern: contiguously for a `[1, N]` vector, one partition apart for an `(N, 1)`
//! tile, and for an `.ap()` view of a tile its pairs in bytes (the first a partition
//! step on SBUF), from the view's first element ([`index_bytes`]).
//!
//! Each side's pattern is in its own tensor's element size; where the dtypes differ the
//! request casts (its `src_dtype`), and the DGE emits cast descriptors.
//!
//! Elements are the units of the sequential order, so a copy that reads what it writes
//! has the reference's element-by-element result. A plain copy under `unique_indices`
//! sets `non_unique_dst_idx` (last index wins); a compute op keeps the duplicate check.

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::pattern::MAX_DIMS;
use dge::{AccessPattern, ByteDim, ElementOrder, IndexDtype, IndexLayout, Request};
use dma::{AddressMap, ComputeOp, Fabric, FabricAddr};
use smallvec::SmallVec;

use super::Lowered;
use crate::error::Error;
use crate::nki::{ApDma, ApSide, IndexAp, OobMode};

/// The lowered copy: one request, its skips reported. The scalar offsets and (beside a
/// scalar) the index tiles are read from `fabric` and checked first.
pub(super) fn lower(fabric: &Fabric, c: &ApDma) -> Result<Lowered, Error> {
    let skipped_offsets = c.skipped_offsets(fabric)?;
    if !skipped_offsets.is_empty() {
        return Ok(Lowered {
            skipped_offsets,
            ..Lowered::pool(Vec::new())
        });
    }
    let shifts = [
        Shift::of(fabric, "src", &c.src)?,
        Shift::of(fabric, "dst", &c.dst)?,
    ];
    Ok(Lowered {
        requests: vec![request(c, shifts)?],
        rows: [None, None],
        report_skips: true,
        skipped_offsets: Vec::new(),
    })
}

/// Checks, before anything is read, that `c` (a copy of the op `op`) is one request the
/// DGE takes: each side at most [`dge::runs::MAX_PIECES`] contiguous pieces, and an index
/// step that fits 32 bits.
/// Every route refuses a copy that fails (the copy is one DGE request by definition).
pub(crate) fn check_request(map: &AddressMap, c: &ApDma, op: &'static str) -> Result<(), Error> {
    let req = request(c, [Shift::default(); 2])?;
    dge::generate::check_piece_limit(map, &req).map_err(|e| match e {
        dge::Error::TooManyPieces { side, pieces, limit } => Error::ApPattern {
            op,
            side: if side == "source" { "src" } else { "dst" },
            rule: format!(
                "the walk is {pieces} contiguous pieces; the copy is one DGE request, which walks at most {limit} a side (split the copy)"
            ),
        },
        e => Error::Dge(e),
    })
}

/// Where a side's run-time values put it: `strides` times `stride_d` added to its offset,
/// and `lowest` taken off every index (the index bias) with the bound lowered by as much.
#[derive(Clone, Copy, Debug, Default)]
struct Shift {
    strides: i128,
    lowest: u32,
}

impl Shift {
    /// Side `s`'s shift: its scalar offset's value (read and checked). With an index tile
    /// and a scalar, the start is the position of the lowest in-bounds index `m` (others at
    /// 0), and the DGE's index bias takes `m` off every index with the bound lowered by
    /// `m`: the same addresses, the same indices in bounds (one below `m` is out of
    /// bounds), reported unbiased. (Folded into the start alone, the scalar could take it
    /// below the tensor, where no pattern may start.) Where no index is in bounds nothing
    /// moves, and the scalar is left out.
    fn of(fabric: &Fabric, name: &'static str, s: &ApSide) -> Result<Shift, Error> {
        let (scalar, moving) = s.scalar_reading(fabric, name)?;
        let scalar = i128::from(scalar);
        Ok(match (&s.vector_offset, scalar != 0, moving) {
            (Some(_), true, Some(m)) => Shift {
                strides: scalar + m.lo,
                lowest: m.lo as u32,
            },
            (Some(_), true, None) => Shift::default(),
            _ => Shift {
                strides: scalar,
                lowest: 0,
            },
        })
    }
}

/// `c` as one DGE request, each side shifted by its [`Shift`].
fn request(c: &ApDma, [src_shift, dst_shift]: [Shift; 2]) -> Result<Request, Error> {
    let policy = match c.oob {
        OobMode::Error => OobPolicy::HardError,
        OobMode::Skip => OobPolicy::SoftSkip,
    };
    let (src, src_ind, src_index) = side("src", &c.src, src_shift, policy)?;
    let (dst, dst_ind, dst_index) = side("dst", &c.dst, dst_shift, policy)?;
    let kind = match c.indexed() {
        true => Kind::Indirect,
        false => Kind::Direct2d,
    };
    let (from, to) = (c.src.tensor.dtype, c.dst.tensor.dtype);
    let mut req = Request::new(kind, src, dst, to);
    req.src_dtype = Some(from).filter(|&d| d != to);
    req.src_indirection = src_ind;
    req.dst_indirection = dst_ind;
    req.src_index = src_index;
    req.dst_index = dst_index;
    req.op = c.op;
    req.non_unique_dst_idx = !c.unique_indices || c.op == ComputeOp::None;
    req.order = ElementOrder::Sequential { unit_elems: 1 };
    Ok(req)
}

/// One side's DGE pattern, indirection and index layout, shifted by `shift`.
fn side(
    name: &'static str,
    s: &ApSide,
    shift: Shift,
    policy: OobPolicy,
) -> Result<(AccessPattern, Option<Indirection>, IndexLayout), Error> {
    let t = &s.tensor;
    // check_scalar proved that position an element of the tensor.
    let offset = (i128::from(s.offset) + shift.strides * i128::from(s.indirect_stride())) as u64;
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
    let (indices, listed) = index_bytes(tile);
    let ind = Indirection {
        dim: s.indirect_dim,
        indices,
        step,
        bound: Some(s.index_bound() - u64::from(shift.lowest)),
        policy,
    };
    let layout = IndexLayout {
        dtype: IndexDtype::U32,
        pattern: listed,
        bias: shift.lowest,
    };
    Ok((pattern, Some(ind), layout))
}

/// Where the DGE reads an index view's indices: the address of index 0 and the byte
/// pattern of the rest (`None`: contiguous u32s), dims of count 1 left out. On SBUF the
/// view's first pair steps partitions (a multiple of a row's `F` elements, which lowering
/// proved), the others elements.
fn index_bytes(v: &IndexAp) -> (FabricAddr, Option<SmallVec<[ByteDim; MAX_DIMS]>>) {
    let t = &v.tensor;
    let size = t.dtype.size() as i64;
    let f = t.row_elements().max(1) as i64;
    let dims = v.dims();
    let bytes: SmallVec<[ByteDim; MAX_DIMS]> = dims
        .iter()
        .enumerate()
        .filter(|(_, d)| d.num > 1)
        .map(|(k, d)| ByteDim {
            step: match (k, t.partition_stride()) {
                (0, Some(stride)) => d.step / f * stride as i64,
                _ => d.step * size,
            },
            count: u64::from(d.num),
        })
        .collect();
    let contiguous = match bytes.as_slice() {
        [] => true,
        [only] => only.step == size,
        _ => false,
    };
    (v.addr(0), (!contiguous).then_some(bytes))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::{engine, fill_random};
    use super::super::DgeRoute;
    use crate::error::ErrorKind;
    use crate::nki::{
        dma_copy_ap, ApDim, ApDma, ApOptions, ApSide, ApTensor, DgeMode, IndexAp, OobMode,
    };
    use crate::reference;
    use dma::addr::{SBUF_BASE, SBUF_STRIDE};
    use dma::{ComputeOp, Dtype, Fabric, FabricAddr, Generation, Space};
    use proptest::prelude::*;

    /// An HBM tensor of `shape` (64 elements) at `0x1000 + at` or an SBUF one from
    /// partition 2.
    fn tensor(shape: &[u64], on_core: bool, at: u64, dtype: Dtype) -> ApTensor {
        let (start, space) = match on_core {
            true => (SBUF_BASE + 2 * SBUF_STRIDE + 64 + at, Space::Sbuf),
            false => (0x1000 + at, Space::Hbm),
        };
        ApTensor {
            name: "t".into(),
            start: FabricAddr(start),
            space,
            shape: shape.to_vec(),
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

    /// A 1x1 i32 scalar-offset tile in SBUF partition 70, `at` bytes in.
    fn scalar_tile(at: u64) -> ApTensor {
        ApTensor {
            name: "scalar".into(),
            start: FabricAddr(SBUF_BASE + 70 * SBUF_STRIDE + at),
            space: Space::Sbuf,
            shape: vec![1, 1],
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
            Some((d, tile)) => (d, Some(IndexAp::whole(tile))),
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
        let fewest = minimal_descriptors(f, c);
        match (expect, got) {
            (Ok(e), Ok(g)) => {
                assert_eq!(f.first_difference(&rf), None, "fabric differs for {c:?}");
                assert_eq!(g.outcome, e, "outcome differs");
                assert_eq!(g.descriptors(), fewest, "not the fewest descriptors: {c:?}");
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

    /// The fewest descriptors `c` needs, counted independently of the DGE: the moved
    /// elements in walk order, cut wherever the next is not contiguous with the last on
    /// both sides (each in its own element size) or the run would pass 64 KiB on either.
    fn minimal_descriptors(f: &Fabric, c: &ApDma) -> u64 {
        // a scalar out of bounds on a side without indices skips the copy under skip
        let out = |s: &ApSide| {
            s.vector_offset.is_none()
                && s.scalar_offset.is_some()
                && s.scalar_value(f, "side").is_err()
        };
        if c.oob == OobMode::Skip && (out(&c.src) || out(&c.dst)) {
            return 0;
        }
        let (ss, ds) = (
            c.src.tensor.dtype.size() as u64,
            c.dst.tensor.dtype.size() as u64,
        );
        let most = 65536 / ss.max(ds);
        let (sv, dv) = (
            c.src.index_values(f).unwrap(),
            c.dst.index_values(f).unwrap(),
        );
        let addr = |s: &ApSide, v: &Option<Vec<u32>>, pos: &[u32]| {
            let index = match v {
                Some(v) => u64::from(v[pos[s.indirect_dim] as usize]),
                None => 0,
            };
            match v.is_some() && index >= s.index_bound() {
                true => None,
                false => {
                    let scalar = s.scalar_value(f, "side").unwrap_or(0);
                    Some(s.tensor.addr(s.element(pos, index, scalar) as u64).0)
                }
            }
        };
        let (mut sp, mut dp) = (vec![0u32; c.src.dims.len()], vec![0u32; c.dst.dims.len()]);
        let (mut count, mut run) = (0, None::<(u64, u64, u64)>);
        for _ in 0..c.src.elements() {
            if let (Some(a), Some(b)) = (addr(&c.src, &sv, &sp), addr(&c.dst, &dv, &dp)) {
                run = match run {
                    Some((na, nb, n)) if na == a && nb == b && n < most => {
                        Some((a + ss, b + ds, n + 1))
                    }
                    _ => {
                        count += 1;
                        Some((a + ss, b + ds, 1))
                    }
                };
            }
            odometer(&c.src, &mut sp);
            odometer(&c.dst, &mut dp);
        }
        count
    }

    /// The next multi-index of `s`'s walk, row-major.
    fn odometer(s: &ApSide, pos: &mut [u32]) {
        for (k, d) in s.dims.iter().enumerate().rev() {
            pos[k] += 1;
            if pos[k] < d.num {
                return;
            }
            pos[k] = 0;
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(if cfg!(miri) { 4 } else { 2048 }))]
        /// Random access-pattern copies (1-5 pairs with any steps and offsets, HBM or
        /// partition-major SBUF tensors of rank 2 or 5, an i32 index tile as a vector or
        /// a column on either side or both, on any dim, out-of-bounds, negative and
        /// repeated indices, every compute op and OOB policy, one dtype or a cast between
        /// two, a scalar offset on either side or both, with an index tile or without):
        /// the DGE route and the reference agree, and the DGE emits the fewest
        /// descriptors.
        #[test]
        fn the_dge_route_agrees_with_the_reference(
            counts in prop::collection::vec(1u32..4, 1..6),
            mut steps in prop::collection::vec(0i64..9, 10),
            (src_core, dst_core, deep) in (any::<bool>(), any::<bool>(), any::<bool>()),
            (src_off, dst_off) in (0u64..12, 0u64..12),
            src_index in proptest::option::of((0usize..5, any::<bool>())),
            dst_index in proptest::option::of((0usize..5, any::<bool>())),
            values in prop::collection::vec(-2i32..10, 6),
            op in prop::sample::select(ComputeOp::ALL.to_vec()),
            (skip, unique) in (any::<bool>(), any::<bool>()),
            dtype in prop::sample::select(vec![Dtype::F32, Dtype::I32, Dtype::U16]),
            dst_dtype in prop::sample::select(vec![None, Some(Dtype::Bf16), Some(Dtype::U8), Some(Dtype::F32), Some(Dtype::I32)]),
            scalars in (proptest::option::of(-3i32..4), proptest::option::of(-3i32..4)),
        ) {
            let shape: &[u64] = if deep { &[2, 2, 2, 2, 4] } else { &[8, 8] };
            let row = (64 / shape[0]) as i64;
            // on SBUF the first pair steps whole partition rows
            if src_core { steps[0] *= row; }
            if dst_core { steps[5] *= row; }
            let n = counts.len();
            // most copies cast: to bf16, u8, f32 or i32 (the source's own dtype at times)
            let dst_dtype = dst_dtype.unwrap_or(dtype);
            let make = |core, at, steps: &[i64], off, ix: Option<(usize, bool)>, tile_at, dtype| {
                let ix = ix.filter(|&(d, _)| d < n && d < shape.len());
                let ix = ix.map(|(d, col)| (d, tile(col, counts[d], tile_at)));
                side(tensor(shape, core, at, dtype), (&counts, steps), off, ix)
            };
            let mut src = make(src_core, 0, &steps[..n], src_off, src_index, 0, dtype);
            let mut dst = make(dst_core, 0x400, &steps[5..5 + n], dst_off, dst_index, 256, dst_dtype);
            // a scalar offset on dim `indirect_dim` (0 without an index tile), in SBUF
            // partition 70
            for (s, value, at) in [(&mut src, scalars.0, 0), (&mut dst, scalars.1, 64)] {
                s.scalar_offset = value.map(|_| scalar_tile(at));
            }
            let opts = ApOptions {
                op,
                oob: if skip { OobMode::Skip } else { OobMode::Error },
                unique_indices: unique,
                dge: DgeMode::Chosen,
            };
            let Ok(lowered) = dma_copy_ap("dma_copy", src, dst, opts) else {
                return Ok(());
            };
            let c = &lowered.ap_dmas[0];
            let mut f = Fabric::new(Generation::Cayman);
            for t in [&c.src.tensor, &c.dst.tensor] {
                let rows = t.shape[0];
                let row = 64 / rows;
                for p in 0..rows {
                    let bytes = row * t.dtype.size() as u64;
                    fill_random(&mut f, t.addr(p * row), bytes, t.start.0 + p);
                }
            }
            write_tile(&mut f, &c.src, &values);
            write_tile(&mut f, &c.dst, &values[3..]);
            for (at, value) in [(0, scalars.0), (64, scalars.1)] {
                f.write_elems(scalar_tile(at).start, &[value.unwrap_or(0)]).unwrap();
            }
            agree(&mut f, c);
        }
    }
}
