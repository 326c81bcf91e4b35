//! EMBEDDING_UPDATE 0x79 (carried by PSEUDO_EMBEDDING_UPDATE 0xca) on the IVP core:
//! `embedding_update`, the scatter-reduce of data rows into table rows.
//!
//! The `sequence_length` u32 indices are read 16 at a time with the predicated N_2X32
//! gather; `in = ltun_2x32(index, embedding_table_num_entries)` marks the rows to update
//! (the others are skipped and reported, with no notification); `mov2nx8t(index, 0, in)`
//! zeroes the skipped lanes before `mulusan_2x32` forms the table row addresses
//! `embedding_table_base_addr + index * embed_entry_stride_bytes`. Once every row is
//! planned, data row `i` (`embed_data_addr + i * row bytes`) is reduced into its table row
//! with the CCE_OP (ADD, MAX, MIN) in index order, so duplicates accumulate.

use dma::{Fabric, FabricAddr};
use ivp::{alu, Gr, LaneView, SuperGather, VBool, VecReg, Width};

use super::cost::{PoolCost, Work};
use super::port::move_rows;
use super::port::FabricPort;
use super::vector::{row_addrs, HALF};
use super::{addr4_fabric, lanes_of};
use crate::core_state::{IndexSide, Outcome, SkippedIndex};
use crate::error::Error;
use crate::isa::rule::{dma_at, FieldPath};
use crate::isa::PseudoEmbeddingUpdate;

fn at(field: &'static str) -> FieldPath {
    FieldPath::new("PSEUDO_EMBEDDING_UPDATE", field)
}

/// The planned update: `[data row, table row]` moves in order, and the skipped indices.
struct Plan {
    moves: Vec<[FabricAddr; 2]>,
    skipped: Vec<SkippedIndex>,
}

/// EMBEDDING_UPDATE: plans every index on the IVP core, then reduces the rows in order.
pub fn embedding_update(
    fabric: &mut Fabric,
    e: &PseudoEmbeddingUpdate,
) -> Result<(Outcome, PoolCost), Error> {
    let dtype = e.dtype()?;
    let op = e.cce_op()?.compute_op();
    let row_bytes = u64::from(e.table().num_elements) * dtype.size() as u64;
    let plan = plan(fabric, e, row_bytes)?;
    move_rows(fabric, &plan.moves, row_bytes, dtype, op)?;
    let moved = plan.moves.len() as u64 * row_bytes;
    let work = Work {
        vectors: u64::from(e.sequence_length()).div_ceil(HALF as u64),
        bytes: moved,
    };
    let outcome = Outcome {
        skipped: plan.skipped,
        oob_notification: false,
        bytes_written: moved,
        ..Outcome::default()
    };
    Ok((outcome, PoolCost::estimate("embedding_update", 1, work)))
}

/// Reads the indices vector-wide, bound-checks them and checks every row they move.
fn plan(fabric: &Fabric, e: &PseudoEmbeddingUpdate, row_bytes: u64) -> Result<Plan, Error> {
    let seq = e.sequence_length();
    let index = addr4_fabric(fabric, at("embed_index_addr"), e.embed_index_addr())?;
    let data = addr4_fabric(fabric, at("embed_data_addr"), e.embed_data_addr())?;
    let mut port = FabricPort::new(fabric);
    port.stage(index, u64::from(seq) * 4)?;
    let mut sg = SuperGather::new();
    let mut plan = Plan {
        moves: Vec::with_capacity(seq as usize),
        skipped: Vec::new(),
    };
    for first in (0..seq).step_by(HALF) {
        let live = lanes_of(seq - first);
        let v = walk(&mut sg, &port, (index, first, live), e);
        for lane in (0..HALF).filter(|&l| live >> l & 1 != 0) {
            let (i, bit) = (first + lane as u32, 1u16 << lane);
            if v.hits & bit == 0 {
                let value = v.ids[lane];
                let side = IndexSide::Dst;
                plan.skipped.push(SkippedIndex {
                    side,
                    position: i,
                    value,
                });
                continue;
            }
            let formed = (v.overflow & bit == 0).then_some(v.rows[lane]);
            let table_at = "embedding_table_base_addr";
            let row = checked_row(fabric, table_at, (v.rows[lane], formed), row_bytes)?;
            let from = data.0.checked_add(u64::from(i) * row_bytes);
            let from = checked_row(fabric, "embed_data_addr", (data.0, from), row_bytes)?;
            plan.moves.push([from, row]);
        }
    }
    Ok(plan)
}

/// The vector walk of 16 indices: the ids, their table rows, and lane masks.
struct Walked {
    ids: [u32; HALF],
    rows: [u64; HALF],
    /// Lanes in the table (`ltun_2x32(id, num_entries)`).
    hits: u16,
    /// Lanes whose row address passes `u64::MAX`.
    overflow: u16,
}

/// Gathers indices `first .. first + 16` (lanes `live`) at `index`, bound-checks them and
/// forms their table rows with the MAC (module docs).
fn walk(
    sg: &mut SuperGather,
    port: &FabricPort<'_>,
    (index, first, live): (FabricAddr, u32, u16),
    e: &PseudoEmbeddingUpdate,
) -> Walked {
    let table = e.table();
    let iota = VecReg::from_n_2x32(std::array::from_fn(|k| first + k as u32));
    let vb = VBool::from_lanes(LaneView::N2x32, u64::from(live));
    let ids = sg.gather_t(Gr::GR0, Width::N2x32, index.0, &iota, vb, port);
    let inside = alu::andb(alu::ltun_2x32(&ids, &alu::movva32(table.num_entries)), vb);
    let safe = alu::mov2nx8t(&ids, &VecReg::ZERO, inside);
    let (rows, overflow) = row_addrs(table.base_addr.0, &safe, table.stride_bytes);
    Walked {
        ids: ids.n_2x32(),
        rows: rows.lanes(),
        hits: inside.lane_mask(LaneView::N2x32) as u16,
        overflow,
    }
}

/// The row at `row` (`None`: its address passed 64 bits from `base`) with its `row_bytes`
/// on the fabric, or the error naming `field`: a table row the MAC formed, or data row `i`
/// (validation put every data row on the fabric; the check names a stray one).
fn checked_row(
    fabric: &Fabric,
    field: &'static str,
    (base, row): (u64, Option<u64>),
    row_bytes: u64,
) -> Result<FabricAddr, Error> {
    let overflow = dma::Error::AddressOverflow {
        addr: base,
        len: row_bytes,
    };
    let row = FabricAddr(row.ok_or(overflow).map_err(dma_at(at(field)))?);
    fabric.check(row, row_bytes).map_err(dma_at(at(field)))?;
    Ok(row)
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::CoreState;
    use crate::isa::{EmbeddingTable, PseudoEmbeddingUpdate};
    use dma::{CceOp, Dtype, FabricAddr};

    crate::test_support::embedding::embedding_cases!(route());

    #[test]
    fn the_cost_counts_index_vectors_and_row_bytes() {
        let mut f = fabric();
        put::<u32>(&mut f, sbuf_at(0, 0), &[0; 20]);
        let table = EmbeddingTable {
            base_addr: FabricAddr(0x10000),
            num_entries: 1,
            stride_bytes: 12,
            num_elements: 3,
        };
        let e = PseudoEmbeddingUpdate::new(
            table,
            sbuf(0, 0),
            sbuf(0, 0x1000),
            20,
            Dtype::F32,
            CceOp::Add,
        );
        let (out, cost) = run_cost(&mut f, &mut CoreState::new(), e);
        assert_eq!(out.bytes_written, 240);
        assert_eq!(
            (cost.kernel, cost.vectors, cost.bytes),
            ("embedding_update", 2, 240)
        );
    }
}
