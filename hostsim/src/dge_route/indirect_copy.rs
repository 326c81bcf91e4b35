//! INDIRECT_COPY 0xe7 (S4D4_IC, `local_gather`), Gather sub-mode, as one request per core.
//!
//! Core `c` covers 16 partitions from `16c` past each operand's ADDR4 partition. Its
//! source is the data rows of those partitions, `[(1 partition, 16), (E, n), (1, E)]` in
//! elements (`E = src_num_elem_per_idx`, `n = num_elem / E`), the `n` dimension replaced by
//! the core's u16 indices: the 16-partition index block read column-major through the
//! index pattern `[(2 bytes, ceil(n / 16)), (1 partition, 16)]` with the NX16 gather,
//! step one element (indices are element offsets). The bound is `src_buffer_size` under
//! the fill policy with 0, so a run's elements at or past the end of the source buffer
//! are written as zeros, and an index past it writes a run of zeros. The destination is
//! the dst TENSOR4D of the 16 partitions, in element order.

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::pattern::ByteDim;
use dge::{IndexDtype, IndexLayout, Request};
use dma::addr::SBUF_STRIDE;
use dma::AddressMap;

use super::{channel_addr, partition_pattern, tensor_dims, Lowered};
use crate::error::Error;
use crate::isa::validate::CORE_PARTITIONS;
use crate::isa::S4d4Ic;

/// The lowered INDIRECT_COPY: one request per core.
pub(super) fn lower(map: &AddressMap, ic: &S4d4Ic) -> Result<Lowered, Error> {
    let (src, dst) = (ic.src().indirect(), ic.dst().tensor());
    let dtype = ic.in_dtype()?;
    // Validation proved: E in {1..32} divides num_elem, channels a multiple of 16.
    let per = u32::from(ic.src_num_elem_per_idx());
    let n = u32::from(src.num_elem()) / per.max(1);
    let index = IndexLayout {
        dtype: IndexDtype::U16,
        pattern: Some(
            [
                (2, u64::from(n.div_ceil(CORE_PARTITIONS))),
                (SBUF_STRIDE as i64, 16),
            ]
            .map(|(step, count)| ByteDim { step, count })
            .into_iter()
            .collect(),
        ),
        bias: 0,
    };
    let cores = u32::from(ic.header().num_active_channels()) / CORE_PARTITIONS;
    let mut requests = Vec::with_capacity(cores as usize);
    for c in 0..cores {
        let k = c * CORE_PARTITIONS;
        let rows = [(i64::from(per), n), (1, per)];
        let data = channel_addr(map, src.data_addr(), k)?;
        let out = channel_addr(map, dst.start_addr(), k)?;
        let mut req = Request::new(
            Kind::Indirect,
            partition_pattern(data, dtype, CORE_PARTITIONS, &rows),
            partition_pattern(out, dtype, CORE_PARTITIONS, &tensor_dims(&dst)),
            dtype,
        );
        req.src_indirection = Some(Indirection {
            dim: 1,
            indices: channel_addr(map, src.index_addr(), k)?,
            step: dtype.size() as i32,
            bound: Some(u64::from(ic.src_buffer_size())),
            policy: OobPolicy::Fill { value: 0 },
        });
        req.src_index = index.clone();
        requests.push(req);
    }
    Ok(Lowered::pool(requests))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::error::Error;
    use crate::isa::{Indirect, S4d4Ic, Tensor4d};
    use dma::{Dtype, Fabric, Generation};
    use proptest::prelude::*;

    crate::test_support::indirect_copy::indirect_copy_cases!(route(), except_reads_first);

    /// The DGE has no staging buffer: a copy whose destination covers rows it still has
    /// to read is refused, naming the first byte range read after it is written, and the
    /// fabric is left as it was.
    #[test]
    fn a_destination_over_the_source_is_refused_by_design() {
        use crate::test_support::indirect_copy::{overlapping_copy, rows};
        let r = route();
        let mut f = r.fabric();
        rows(&mut f, 16, 16, 8);
        crate::test_support::indirect_copy::indices(&mut f, 64, 0, &[4, 0]);
        let e = r.fails_closed(&mut f, &mut CoreState::new(), overlapping_copy());
        assert!(crate::dge_route::by_design(&e), "{e}");
        let Error::Dge(dge::Error::SourceOverlapsDestination { lo, hi }) = e else {
            panic!("expected SourceOverlapsDestination, got {e}");
        };
        let data = sbuf_at(0, crate::test_support::indirect_copy::DATA).0;
        // Partition 0 reads bytes 0..16 of its row (elements 4..8, then 0..4) and
        // writes bytes 4..20: the overlap is 4..16.
        assert_eq!((lo, hi), (data + 4, data + 16), "{e}");
    }

    const IDX: u32 = 0x100;
    const DATA: u32 = 0x1000;
    const DST: u32 = 0x8000;

    /// Core `c`'s indices `ids` written column-major over its 16 partitions.
    fn put_block(f: &mut Fabric, p: u32, c: u32, ids: &[u16]) {
        for (j, &id) in ids.iter().enumerate() {
            let (row, col) = (j as u32 % 16, j as u32 / 16);
            put::<u16>(f, sbuf_at(p + 16 * c + row, IDX + 2 * col), &[id]);
        }
    }

    #[test]
    fn runs_past_the_buffer_end_are_zero() {
        let mut f = Fabric::new(Generation::Cayman);
        for q in 0..16 {
            put::<u16>(
                &mut f,
                sbuf_at(q, DATA),
                &[100 + q as u16, 101, 102, 103, 104, 105],
            );
        }
        put_block(&mut f, 0, 0, &[4, 0, 5, 9]);
        let p = Indirect::new(sbuf(0, IDX), sbuf(0, DATA), 8);
        let ic = S4d4Ic::gather(
            p,
            Tensor4d::contiguous(sbuf(0, DST), 8),
            Dtype::U16,
            2,
            6,
            16,
        );
        let out = agree(&mut f, &mut CoreState::new(), ic.into());
        assert_eq!(out.bytes_written, 16 * 16);
        assert_eq!(
            get::<u16>(&f, sbuf_at(0, DST), 8),
            [104, 105, 100, 101, 105, 0, 0, 0]
        );
        assert_eq!(
            get::<u16>(&f, sbuf_at(7, DST), 8),
            [104, 105, 107, 101, 105, 0, 0, 0]
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]
        /// Random local gathers (1 or 2 cores, run widths, buffer sizes, dtypes, indices
        /// in and past the buffer, strided destinations): the DGE route and the reference
        /// agree.
        #[test]
        fn indirect_copy_matches_the_reference(
            cores in 1u32..3,
            per in prop::sample::select(vec![1u8, 2, 4, 8]),
            raw in prop::collection::vec(0u16..70, 1..40),
            buffer in 1u32..64,
            dtype in prop::sample::select(vec![Dtype::U8, Dtype::Bf16, Dtype::F32]),
            dst_step in 1i16..3,
            p in 0u32..2,
        ) {
            let mut f = Fabric::new(Generation::Cayman);
            let n = raw.len() as u16;
            for c in 0..cores {
                put_block(&mut f, p, c, &raw.iter().map(|&v| v + c as u16).collect::<Vec<_>>());
                for q in 0..16 {
                    fill_random(&mut f, sbuf_at(p + 16 * c + q, DATA), 512, u64::from(q + 16 * c));
                }
            }
            let total = n * u16::from(per);
            let src = Indirect::new(sbuf(p, IDX), sbuf(p, DATA), total);
            let dst = Tensor4d::new(sbuf(p, DST), [dst_step, 0, 0, 0], [total, 1, 1, 1]);
            let ic = S4d4Ic::gather(src, dst, dtype, per, buffer, (16 * cores) as u8);
            agree(&mut f, &mut CoreState::new(), ic.into());
        }
    }
}
