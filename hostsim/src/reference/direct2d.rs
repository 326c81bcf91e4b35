//! DMA_MEMCPY 0xb8 (DMA_DIRECT2D): element `(i, j)` (`j < num_elem[0]` innermost, `i <
//! num_elem[1]`) moves `elem_size` bytes from `src_start_addr + (i * src_step_elem[1] +
//! j * src_step_elem[0]) * elem_size` to the same expression over the destination fields,
//! `dst (op)= src` with the compute op over `dtype`, in order `(i, j)`.
//!
//! Each element reads its source when it moves, so where a destination overlaps a later
//! element's source that element sees the new bytes (the contract's element order).

use dma::{Fabric, FabricAddr};

use crate::core_state::Outcome;
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::{Direct2dSide, DmaDirect2d};

/// DMA_MEMCPY: checks both sides' whole extents, then moves element by element.
pub(super) fn dma_memcpy(fabric: &mut Fabric, d: &DmaDirect2d) -> Result<Outcome, Error> {
    let (dtype, op) = (d.dtype()?, d.compute_op()?);
    let size = u64::from(d.elem_size());
    let [n0, n1] = d.num_elem();
    let src = (FieldPath::new("DMA_DIRECT2D", "src_start_addr"), d.src());
    let dst = (FieldPath::new("DMA_DIRECT2D", "dst_start_addr"), d.dst());
    for (at, side) in [src, dst] {
        check_extent(fabric, at, &side, [n0, n1], size)?;
    }
    let mut written = 0u64;
    for i in 0..n1 {
        for j in 0..n0 {
            let from = element_addr(src, (i, j), size)?;
            let to = element_addr(dst, (i, j), size)?;
            fabric.reduce(from, to, size, dtype, op)?;
            written = written.saturating_add(size);
        }
    }
    Ok(Outcome {
        bytes_written: written,
        ..Outcome::default()
    })
}

/// The address of element `(i, j)` of a side, or the overflow error.
fn element_addr(
    (at, side): (FieldPath, Direct2dSide),
    (i, j): (u16, u16),
    size: u64,
) -> Result<FabricAddr, Error> {
    let [s0, s1] = side.step_elem.map(u64::from);
    // Each product is below 2^32, so the sum fits in u64.
    let elems = u64::from(i) * s1 + u64::from(j) * s0;
    elems
        .checked_mul(size)
        .and_then(|off| side.start_addr.checked_add(off))
        .ok_or(Error::Field {
            field: at,
            source: dma::Error::AddressOverflow {
                addr: side.start_addr.0,
                len: size,
            },
        })
}

/// Steps are unsigned, so element `(n1 - 1, n0 - 1)` reaches farthest: one range check
/// from the start to its end covers every element of the side.
fn check_extent(
    fabric: &Fabric,
    at: FieldPath,
    side: &Direct2dSide,
    [n0, n1]: [u16; 2],
    size: u64,
) -> Result<(), Error> {
    let last = element_addr(
        (at, *side),
        (n1.saturating_sub(1), n0.saturating_sub(1)),
        size,
    )?;
    let overflow = dma::Error::AddressOverflow {
        addr: side.start_addr.0,
        len: size,
    };
    let len = (last.0 - side.start_addr.0)
        .checked_add(size)
        .ok_or(overflow)
        .map_err(dma_at(at))?;
    fabric.check(side.start_addr, len).map_err(dma_at(at))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::isa::{Direct2dSide, DmaDirect2d, Rule};
    use dma::{ComputeOp, Dtype, Error as DmaError, FabricAddr};

    const SRC: u64 = 0x1000;
    const DST: u64 = 0x2000;

    fn side(start: u64, step_elem: [u16; 2]) -> Direct2dSide {
        Direct2dSide {
            start_addr: FabricAddr(start),
            step_elem,
        }
    }

    /// A 3 x 4 u32 matrix `m[r][c] = 10 r + c` at SRC.
    fn matrix() -> dma::Fabric {
        let mut f = fabric();
        let m: Vec<u32> = (0..3)
            .flat_map(|r| (0..4).map(move |c| 10 * r + c))
            .collect();
        put(&mut f, FabricAddr(SRC), &m);
        f
    }

    /// Columns 0..2 of the matrix, transposed into a 2 x 3 block at DST.
    fn transpose(op: ComputeOp) -> DmaDirect2d {
        DmaDirect2d::new(
            side(SRC, [1, 4]),
            side(DST, [3, 1]),
            4,
            [2, 3],
            Dtype::U32,
            op,
        )
    }

    #[test]
    fn strided_copy_transposes() {
        let mut f = matrix();
        let out = run(&mut f, &mut CoreState::new(), transpose(ComputeOp::None));
        assert_eq!(get::<u32>(&f, FabricAddr(DST), 6), [0, 10, 20, 1, 11, 21]);
        assert_eq!(out.bytes_written, 24);
    }

    #[test]
    fn compute_ops_reduce_into_the_destination() {
        let mut f = matrix();
        let mut s = CoreState::new();
        run(&mut f, &mut s, transpose(ComputeOp::None));
        run(&mut f, &mut s, transpose(ComputeOp::Add));
        assert_eq!(get::<u32>(&f, FabricAddr(DST), 6), [0, 20, 40, 2, 22, 42]);
        run(&mut f, &mut s, transpose(ComputeOp::Multiply));
        assert_eq!(
            get::<u32>(&f, FabricAddr(DST), 6),
            [0, 200, 800, 2, 242, 882]
        );
        // i16 MAX, two i16 per 4-byte element: each lane compares with its sign.
        put::<i16>(&mut f, FabricAddr(0x3000), &[-5, 7, 3, -8]);
        put::<i16>(&mut f, FabricAddr(0x4000), &[-6, 9, 4, -9]);
        let max = DmaDirect2d::new(
            side(0x3000, [1, 0]),
            side(0x4000, [1, 0]),
            4,
            [2, 1],
            Dtype::I16,
            ComputeOp::Max,
        );
        run(&mut f, &mut s, max);
        assert_eq!(get::<i16>(&f, FabricAddr(0x4000), 4), [-5, 9, 4, -8]);
    }

    #[test]
    fn elements_move_in_order_through_overlap() {
        let mut f = fabric();
        put::<u32>(&mut f, FabricAddr(SRC), &[7, 1, 2, 3, 4]);
        // dst = src + 1 element: each element reads what the previous one wrote.
        let shift = DmaDirect2d::new(
            side(SRC, [1, 0]),
            side(SRC + 4, [1, 0]),
            4,
            [4, 1],
            Dtype::U32,
            ComputeOp::None,
        );
        run(&mut f, &mut CoreState::new(), shift);
        assert_eq!(get::<u32>(&f, FabricAddr(SRC), 5), [7; 5]);
    }

    #[test]
    fn a_zero_step_accumulates_every_element() {
        let mut f = matrix();
        // All 4 elements of row 1 added into one u32.
        let sum = DmaDirect2d::new(
            side(SRC + 16, [1, 0]),
            side(DST, [0, 0]),
            4,
            [4, 1],
            Dtype::U32,
            ComputeOp::Add,
        );
        let out = run(&mut f, &mut CoreState::new(), sum);
        assert_eq!(get::<u32>(&f, FabricAddr(DST), 1), [10 + 11 + 12 + 13]);
        assert_eq!(out.bytes_written, 16);
    }

    #[test]
    fn bad_copies_fail_closed() {
        let mut f = matrix();
        let mut s = CoreState::new();
        let bad = DmaDirect2d::new(
            side(SRC, [1, 4]),
            side(DST, [3, 1]),
            6,
            [2, 3],
            Dtype::U32,
            ComputeOp::None,
        );
        assert_eq!(
            fails_closed(&mut f, &mut s, bad).rule(),
            Some(Rule::ElemSizeDtype)
        );
        let sbuf_end = dma::addr::SBUF_BASE + 192 * 1024 - 8;
        let off = DmaDirect2d::new(
            side(SRC, [1, 4]),
            side(sbuf_end, [1, 2]),
            4,
            [2, 3],
            Dtype::U32,
            ComputeOp::None,
        );
        let e = fails_closed(&mut f, &mut s, off);
        assert!(
            matches!(
                e,
                crate::error::Error::Field {
                    source: DmaError::OutOfRegion { .. },
                    ..
                }
            ),
            "{e}"
        );
    }
}
