//! EMBEDDING_UPDATE 0x79 / PSEUDO_EMBEDDING_UPDATE 0xca (one memory effect) as one
//! `Kind::Indirect` request with the indirection on the destination.
//!
//! The source is the `sequence_length` data rows, `[(E, seq), (1, E)]` in dtype elements
//! (`E = embed_entry_num_elements`, contiguous from `embed_data_addr`). The destination is
//! the table rows: its row dimension is replaced by the u32 indices at `embed_index_addr`,
//! step `embed_entry_stride_bytes`, bound `embedding_table_num_entries`, an index at or
//! past it skipped silently (listed, no notification). Duplicates are allowed and
//! accumulate in index order (`non_unique_dst_idx`, rows as the units of the sequential
//! element order); the compute op is the CCE_OP's.

use dge::generate::Kind;
use dge::indirection::{Indirection, OobPolicy};
use dge::{ElementOrder, Request};
use dma::AddressMap;

use super::{flat_pattern, Lowered, RowSide};
use crate::error::Error;
use crate::isa::rule::FieldPath;
use crate::isa::PseudoEmbeddingUpdate;

/// The lowered EMBEDDING_UPDATE.
pub(super) fn lower(map: &AddressMap, e: &PseudoEmbeddingUpdate) -> Result<Lowered, Error> {
    let (dtype, op) = (e.dtype()?, e.cce_op()?.compute_op());
    let t = e.table();
    let (row, seq) = (t.num_elements, e.sequence_length());
    let dims = [(i64::from(row), seq), (1, row)];
    let (src, _) = flat_pattern(map, e.embed_data_addr().to_fabric(map)?, dtype, &dims);
    let (dst, front) = flat_pattern(map, t.base_addr, dtype, &dims);
    let step = i32::try_from(t.stride_bytes).map_err(|_| Error::DgeRowStep {
        field: FieldPath::new("PSEUDO_EMBEDDING_UPDATE", "embed_entry_stride_bytes"),
        step: u64::from(t.stride_bytes),
    })?;
    let mut req = Request::new(Kind::Indirect, src, dst, dtype);
    req.dst_indirection = Some(Indirection {
        dim: front,
        indices: e.embed_index_addr().to_fabric(map)?,
        step,
        bound: Some(u64::from(t.num_entries)),
        policy: OobPolicy::SoftSkipSilent,
    });
    req.op = op;
    req.non_unique_dst_idx = true;
    req.eng_mask = e.eng_mask();
    req.order = ElementOrder::Sequential {
        unit_elems: u64::from(row),
    };
    let table = RowSide {
        start: t.base_addr,
        bytes: u64::from(row) * dtype.size() as u64,
    };
    Ok(Lowered {
        requests: vec![req],
        rows: [None, Some(table)],
        report_skips: true,
        skipped_offsets: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::isa::{EmbeddingTable, PseudoEmbeddingUpdate};
    use dma::{CceOp, Dtype, FabricAddr};
    use proptest::prelude::*;

    crate::test_support::embedding::embedding_cases!(route());

    const TABLE: u64 = 0x10000;
    const IDX: u32 = 0;
    const DATA: u32 = 0x4000;

    fn update(
        rows: u32,
        stride: u32,
        elems: u32,
        seq: u32,
        dtype: Dtype,
        op: CceOp,
    ) -> PseudoEmbeddingUpdate {
        let table = EmbeddingTable {
            base_addr: FabricAddr(TABLE),
            num_entries: rows,
            stride_bytes: stride,
            num_elements: elems,
        };
        PseudoEmbeddingUpdate::new(table, sbuf(0, IDX), sbuf(0, DATA), seq, dtype, op)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random updates (ADD/MAX/MIN, dtypes, strides with padding, indices past the
        /// table, duplicates): the DGE route and the reference agree.
        #[test]
        fn embedding_update_matches_the_reference(
            idx in prop::collection::vec(0u32..12, 1..40),
            rows in 1u32..10,
            elems in 1u32..5,
            pad in 0u32..3,
            op in prop::sample::select(vec![CceOp::Add, CceOp::Max, CceOp::Min]),
            dtype in prop::sample::select(vec![Dtype::Bf16, Dtype::F32, Dtype::I16, Dtype::U8]),
            eng_mask in 1u16..,
        ) {
            let mut f = fabric_with_table(TABLE, 4096);
            let seq = idx.len() as u32;
            put::<u32>(&mut f, sbuf_at(0, IDX), &idx);
            fill_random(&mut f, sbuf_at(0, DATA), 4096, u64::from(seq));
            let stride = (elems + pad) * dtype.size() as u32;
            let e = update(rows, stride, elems, seq, dtype, op).with_eng_mask(eng_mask);
            let _ = compare(&mut f, &mut CoreState::new(), e.into());
        }
    }
}
