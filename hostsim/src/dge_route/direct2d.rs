//! DMA_MEMCPY 0xb8 (DMA_DIRECT2D) as one `Kind::Direct2d` request.
//!
//! Element `(i, j)` of `elem_size` bytes is `E = elem_size / dtype size` dtype elements, so
//! each side is the pattern `[(step[1] * E, num_elem[1]), (step[0] * E, num_elem[0]),
//! (1, E)]` in dtype elements. The element is the unit of the sequential element order:
//! elements move in order `(i, j)`, each reading its source when it moves, so a copy whose
//! destination overlaps a later element's source sees the new bytes (the reference's
//! reading).

use dge::generate::Kind;
use dge::{ElementOrder, Request};
use dma::AddressMap;

use super::{flat_pattern, Lowered};
use crate::error::Error;
use crate::isa::{Direct2dSide, DmaDirect2d};

/// The lowered DMA_MEMCPY.
pub(super) fn lower(map: &AddressMap, d: &DmaDirect2d) -> Result<Lowered, Error> {
    let (dtype, op) = (d.dtype()?, d.compute_op()?);
    // Validation proved elem_size is a non-zero multiple of the dtype size.
    let e = d.elem_size() / dtype.size() as u32;
    let [n0, n1] = d.num_elem().map(u32::from);
    let pattern = |side: Direct2dSide| {
        let [s0, s1] = side.step_elem.map(|s| i64::from(s) * i64::from(e));
        flat_pattern(map, side.start_addr, dtype, &[(s1, n1), (s0, n0), (1, e)]).0
    };
    let mut req = Request::new(Kind::Direct2d, pattern(d.src()), pattern(d.dst()), dtype);
    req.op = op;
    req.eng_mask = d.eng_mask();
    req.order = ElementOrder::Sequential {
        unit_elems: u64::from(e),
    };
    Ok(Lowered {
        requests: vec![req],
        rows: [None, None],
        report_skips: false,
        skipped_offsets: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::isa::{Direct2dSide, DmaDirect2d};
    use dma::{ComputeOp, Dtype, FabricAddr};
    use proptest::prelude::*;

    fn side(start: FabricAddr, step_elem: [u16; 2]) -> Direct2dSide {
        Direct2dSide {
            start_addr: start,
            step_elem,
        }
    }

    #[test]
    fn a_forward_shift_propagates_like_the_loop() {
        // dst = src + one element: element k reads element k - 1's new value
        let mut f = fabric_with_table(0x1000, 64);
        let d = DmaDirect2d::new(
            side(FabricAddr(0x1000), [1, 4]),
            side(FabricAddr(0x1004), [1, 4]),
            4,
            [4, 3],
            Dtype::U32,
            ComputeOp::None,
        );
        let out = agree(&mut f, &mut CoreState::new(), d.into());
        assert_eq!(out.bytes_written, 48);
        let first: Vec<u32> = get(&f, FabricAddr(0x1000), 1);
        assert_eq!(get::<u32>(&f, FabricAddr(0x1004), 12), vec![first[0]; 12]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random 2-D copies (steps, counts, element sizes, every compute op, HBM and SBUF,
        /// overlapping or not): the DGE route and the reference agree.
        #[test]
        fn dma_memcpy_matches_the_reference(
            dtype in prop::sample::select(vec![Dtype::U8, Dtype::F16, Dtype::F32, Dtype::I32]),
            elems in 1u32..4,
            n in (1u16..6, 1u16..5),
            src_steps in (0u16..4, 0u16..12),
            dst_steps in (0u16..4, 0u16..12),
            shift in 0u64..64,
            op in 0u8..5,
            sbuf_dst in any::<bool>(),
            eng_mask in 1u16..,
        ) {
            let mut f = fabric_with_table(0x1000, 4096);
            let size = elems * dtype.size() as u32;
            let dst = if sbuf_dst { sbuf_at(3, 16) } else { FabricAddr(0x1000 + shift * dtype.size() as u64) };
            let d = DmaDirect2d::new(
                side(FabricAddr(0x1000), [src_steps.0, src_steps.1]),
                side(dst, [dst_steps.0, dst_steps.1]),
                size,
                [n.0, n.1],
                dtype,
                ComputeOp::from_code(op).unwrap(),
            )
            .with_eng_mask(eng_mask);
            let _ = compare(&mut f, &mut CoreState::new(), d.into());
        }
    }
}
