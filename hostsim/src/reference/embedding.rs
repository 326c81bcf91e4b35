//! EMBEDDING_UPDATE 0x79, as carried by PSEUDO_EMBEDDING_UPDATE 0xca (the expansion into
//! LoadPoolArgument / EmbeddingUpdate / TensorStore is the runtime's; its memory effect
//! is this one).
//!
//! For `i` in order over the `sequence_length` u32 indices at `embed_index_addr`: an
//! index at or past `embedding_table_num_entries` is skipped (reported, no
//! notification); otherwise data row `i` (`embed_entry_num_elements` elements at
//! `embed_data_addr + i * row bytes`) is reduced into table row `index` (at
//! `embedding_table_base_addr + index * embed_entry_stride_bytes`) with the CCE_OP (ADD,
//! MAX, MIN, numpy semantics). Duplicate indices accumulate in index order.

use dma::{Dtype, Fabric, FabricAddr};

use super::{addr4_at, row_addr};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::PseudoEmbeddingUpdate;

/// Bytes per index (UINT32).
const INDEX_BYTES: u64 = 4;

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("PSEUDO_EMBEDDING_UPDATE", field)
}

/// The checked moves of an update: `(data row, table row)` pairs in order, and the
/// skipped indices.
struct Plan {
    moves: Vec<(FabricAddr, FabricAddr)>,
    skipped: Vec<SkippedIndex>,
}

/// EMBEDDING_UPDATE: plans every row, then reduces them in order.
pub(super) fn embedding_update(
    fabric: &mut Fabric,
    e: &PseudoEmbeddingUpdate,
) -> Result<Outcome, Error> {
    let dtype = e.dtype()?;
    let op = e.cce_op()?.compute_op();
    let row_bytes = u64::from(e.table().num_elements) * dtype.size() as u64;
    let plan = plan(fabric, e, row_bytes)?;
    for &(data, row) in &plan.moves {
        fabric.reduce(data, row, row_bytes, dtype, op)?;
    }
    Ok(Outcome {
        skipped: plan.skipped,
        oob_notification: false,
        bytes_written: plan.moves.len() as u64 * row_bytes,
    })
}

/// Reads the indices and checks every table and data row an in-range index moves.
fn plan(fabric: &Fabric, e: &PseudoEmbeddingUpdate, row_bytes: u64) -> Result<Plan, Error> {
    let table = e.table();
    let seq = e.sequence_length();
    let index_len = u64::from(seq) * INDEX_BYTES;
    let index_at = addr4_at(
        fabric,
        at("embed_index_addr"),
        e.embed_index_addr(),
        (0, 0),
        index_len,
    )?;
    let mut indices = vec![0u32; seq as usize];
    fabric.read_indices(index_at, Dtype::U32, &mut indices)?;
    let mut plan = Plan {
        moves: Vec::with_capacity(indices.len()),
        skipped: Vec::new(),
    };
    let table_at = at("embedding_table_base_addr");
    for (i, &index) in (0u32..).zip(&indices) {
        if index >= table.num_entries {
            plan.skipped.push(SkippedIndex {
                side: IndexSide::Dst,
                position: i,
                value: index,
            });
            continue;
        }
        let stride = u64::from(table.stride_bytes);
        let row = row_addr(table.base_addr, index.into(), stride).map_err(dma_at(table_at))?;
        fabric.check(row, row_bytes).map_err(dma_at(table_at))?;
        let offset = u64::from(i) * row_bytes;
        let data = addr4_at(
            fabric,
            at("embed_data_addr"),
            e.embed_data_addr(),
            (0, offset),
            row_bytes,
        )?;
        plan.moves.push((data, row));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::{CoreState, IndexSide, SkippedIndex};
    use crate::isa::{EmbeddingTable, PseudoEmbeddingUpdate, Rule};
    use dma::{CceOp, Dtype, Fabric, FabricAddr};

    const TABLE: u64 = 0x10000;
    const DATA: u32 = 0x100;
    /// Bytes between rows: 3 f32 and a 4-byte pad.
    const STRIDE: u64 = 16;
    const PAD: f32 = 12345.0;

    /// A 5-row table, row `r` = `[r, r + 0.5, -r]` plus a pad; indices `[2, 7, 2, 0]`
    /// (7 is past the 5 rows) and their data rows.
    fn setup() -> Fabric {
        let mut f = fabric();
        for r in 0..5u64 {
            let v = r as f32;
            put(
                &mut f,
                FabricAddr(TABLE + r * STRIDE),
                &[v, v + 0.5, -v, PAD],
            );
        }
        put::<u32>(&mut f, sbuf_at(0, 0), &[2, 7, 2, 0]);
        let data: [f32; 12] = [1., 1., 1., 9., 9., 9., 0.5, 10., -10., -1., 2., 3.];
        put(&mut f, sbuf_at(0, DATA), &data);
        f
    }

    fn update(op: CceOp, seq: u32) -> PseudoEmbeddingUpdate {
        let table = EmbeddingTable {
            base_addr: FabricAddr(TABLE),
            num_entries: 5,
            stride_bytes: STRIDE as u32,
            num_elements: 3,
        };
        PseudoEmbeddingUpdate::new(table, sbuf(0, 0), sbuf(0, DATA), seq, Dtype::F32, op)
    }

    fn row(f: &Fabric, r: u64) -> Vec<f32> {
        get(f, FabricAddr(TABLE + r * STRIDE), 4)
    }

    /// Runs `op` and checks rows 2 and 0, the untouched rows and the report.
    fn check(op: CceOp, row2: [f32; 3], row0: [f32; 3]) {
        let mut f = setup();
        let out = run(&mut f, &mut CoreState::new(), update(op, 4));
        assert_eq!(row(&f, 2), [row2[0], row2[1], row2[2], PAD], "{op:?} row 2");
        assert_eq!(row(&f, 0), [row0[0], row0[1], row0[2], PAD], "{op:?} row 0");
        assert_eq!(row(&f, 1), [1.0, 1.5, -1.0, PAD]);
        assert_eq!(row(&f, 4), [4.0, 4.5, -4.0, PAD]);
        let skip = SkippedIndex {
            side: IndexSide::Dst,
            position: 1,
            value: 7,
        };
        assert_eq!(out.skipped, [skip]);
        assert!(!out.oob_notification);
        assert_eq!(out.bytes_written, 3 * 12);
    }

    #[test]
    fn add_accumulates_duplicates_and_skips() {
        check(CceOp::Add, [3.5, 13.5, -11.0], [-1.0, 2.5, 3.0]);
    }

    #[test]
    fn max_reduces_in_order() {
        check(CceOp::Max, [2.0, 10.0, 1.0], [0.0, 2.0, 3.0]);
    }

    #[test]
    fn min_reduces_in_order() {
        check(CceOp::Min, [0.5, 1.0, -10.0], [-1.0, 0.5, -0.0]);
    }

    #[test]
    fn integer_rows_wrap() {
        let mut f = fabric();
        put::<u8>(&mut f, FabricAddr(TABLE), &[250, 1, 0, 0]);
        put::<u32>(&mut f, sbuf_at(0, 0), &[0, 0]);
        put::<u8>(&mut f, sbuf_at(0, DATA), &[5, 2, 3, 4]);
        let table = EmbeddingTable {
            base_addr: FabricAddr(TABLE),
            num_entries: 1,
            stride_bytes: 2,
            num_elements: 2,
        };
        let e =
            PseudoEmbeddingUpdate::new(table, sbuf(0, 0), sbuf(0, DATA), 2, Dtype::U8, CceOp::Add);
        run(&mut f, &mut CoreState::new(), e);
        assert_eq!(get::<u8>(&f, FabricAddr(TABLE), 4), [2, 7, 0, 0]);
    }

    #[test]
    fn invalid_updates_fail_closed() {
        let mut f = setup();
        let mut s = CoreState::new();
        let e = fails_closed(&mut f, &mut s, update(CceOp::Add, 0));
        assert_eq!(e.rule(), Some(Rule::NonZero));
        let e = fails_closed(&mut f, &mut s, update(CceOp::Max, 5000));
        assert_eq!(e.rule(), Some(Rule::IndexCount));
    }
}
