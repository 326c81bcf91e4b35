//! EMBEDDING_UPDATE 0x79, as carried by PSEUDO_EMBEDDING_UPDATE 0xca (the expansion into
//! LoadPoolArgument / EmbeddingUpdate / TensorStore is the runtime's; its memory effect
//! is this one).
//!
//! For `i` in order over the `sequence_length` u32 indices at `embed_index_addr`: an
//! index at or past `embedding_table_num_entries` is skipped (reported, no
//! notification); otherwise data row `i` (`embed_entry_num_elements` elements at
//! `embed_data_addr + i * row bytes`) is reduced into table row `index` (at
//! `embedding_table_base_addr + index * embed_entry_stride_bytes`) with the CCE_OP (ADD,
//! MAX, MIN), computed in f32 by the DMA ([`dma::compute`]). Duplicate indices accumulate
//! in index order.

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

/// The checked moves of an update: `(data row, table row, position, index)` in order,
/// and the skipped indices.
struct Plan {
    moves: Vec<(FabricAddr, FabricAddr, u32, u32)>,
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
    for &(data, row, position, index) in &plan.moves {
        fabric.note(position.into(), [None, Some(index.into())]);
        fabric.reduce(data, row, row_bytes, dtype, op)?;
    }
    Ok(Outcome {
        skipped: plan.skipped,
        oob_notification: false,
        bytes_written: plan.moves.len() as u64 * row_bytes,
        ..Outcome::default()
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
        plan.moves.push((data, row, i, index));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;

    crate::test_support::embedding::embedding_cases!(route());
}
