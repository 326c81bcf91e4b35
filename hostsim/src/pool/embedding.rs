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
use super::dma_indirect::move_rows;
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
            let row = table_row(fabric, v.rows[lane], v.overflow & bit != 0, row_bytes)?;
            plan.moves
                .push([data_row(fabric, data, i, row_bytes)?, row]);
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

/// Data row `i`, checked on the fabric (validation put all of them there; the check
/// names a stray one).
fn data_row(
    fabric: &Fabric,
    data: FabricAddr,
    i: u32,
    row_bytes: u64,
) -> Result<FabricAddr, Error> {
    let at = at("embed_data_addr");
    let overflow = dma::Error::AddressOverflow {
        addr: data.0,
        len: row_bytes,
    };
    let from = data
        .checked_add(u64::from(i) * row_bytes)
        .ok_or(overflow)
        .map_err(dma_at(at))?;
    fabric.check(from, row_bytes).map_err(dma_at(at))?;
    Ok(from)
}

/// A table row the MAC formed, checked on the fabric.
fn table_row(
    fabric: &Fabric,
    addr: u64,
    overflow: bool,
    row_bytes: u64,
) -> Result<FabricAddr, Error> {
    let table_at = at("embedding_table_base_addr");
    if overflow {
        let e = dma::Error::AddressOverflow {
            addr,
            len: row_bytes,
        };
        return Err(dma_at(table_at)(e));
    }
    fabric
        .check(FabricAddr(addr), row_bytes)
        .map_err(dma_at(table_at))?;
    Ok(FabricAddr(addr))
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use crate::core_state::{CoreState, IndexSide, SkippedIndex};
    use crate::isa::{EmbeddingTable, PseudoEmbeddingUpdate, Rule};
    use dma::{CceOp, Dtype, Fabric, FabricAddr};
    use half::bf16;

    const TABLE: u64 = 0x10000;
    const DATA: u32 = 0x1000;
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

    fn table(rows: u32, stride: u32, elems: u32) -> EmbeddingTable {
        EmbeddingTable {
            base_addr: FabricAddr(TABLE),
            num_entries: rows,
            stride_bytes: stride,
            num_elements: elems,
        }
    }

    fn update(op: CceOp, seq: u32) -> PseudoEmbeddingUpdate {
        let t = table(5, STRIDE as u32, 3);
        PseudoEmbeddingUpdate::new(t, sbuf(0, 0), sbuf(0, DATA), seq, Dtype::F32, op)
    }

    fn row(f: &Fabric, r: u64) -> Vec<f32> {
        get::<f32>(f, FabricAddr(TABLE + r * STRIDE), 4)
    }

    #[test]
    fn add_accumulates_duplicates_and_skips_past_the_table() {
        let mut f = setup();
        let (out, cost) = run_cost(&mut f, &mut CoreState::new(), update(CceOp::Add, 4));
        // row 2 = [2, 2.5, -2] + [1, 1, 1] + [0.5, 10, -10]
        assert_eq!(row(&f, 2), [3.5, 13.5, -11.0, PAD]);
        assert_eq!(row(&f, 0), [-1.0, 2.5, 3.0, PAD]);
        assert_eq!(row(&f, 1), [1.0, 1.5, -1.0, PAD]);
        let skip = SkippedIndex {
            side: IndexSide::Dst,
            position: 1,
            value: 7,
        };
        assert_eq!(out.skipped, [skip]);
        assert!(!out.oob_notification);
        assert_eq!(out.bytes_written, 3 * 12);
        assert_eq!(
            (cost.kernel, cost.vectors, cost.bytes),
            ("embedding_update", 1, 36)
        );
    }

    #[test]
    fn max_and_min() {
        let mut f = setup();
        run(&mut f, &mut CoreState::new(), update(CceOp::Max, 4));
        assert_eq!(row(&f, 2), [2.0, 10.0, 1.0, PAD]);
        assert_eq!(row(&f, 0), [0.0, 2.0, 3.0, PAD]);
        let mut f = setup();
        run(&mut f, &mut CoreState::new(), update(CceOp::Min, 4));
        assert_eq!(row(&f, 2), [0.5, 1.0, -10.0, PAD]);
        assert_eq!(row(&f, 0), [-1.0, 0.5, 0.0, PAD]);
    }

    #[test]
    fn many_indices_across_vectors_in_bf16() {
        let mut f = fabric();
        // 40 updates of 1.0 into row (i % 3), 2 elements each; every fifth index is past
        // the 3 rows
        let ids: Vec<u32> = (0..40)
            .map(|i| if i % 5 == 4 { 3 + i } else { i % 3 })
            .collect();
        put(&mut f, sbuf_at(0, 0), &ids);
        put(&mut f, sbuf_at(0, DATA), &[bf16::from_f32(1.0); 80]);
        let t = table(3, 4, 2);
        let e =
            PseudoEmbeddingUpdate::new(t, sbuf(0, 0), sbuf(0, DATA), 40, Dtype::Bf16, CceOp::Add);
        let out = run(&mut f, &mut CoreState::new(), e);
        let counts: Vec<f32> = (0..3)
            .map(|r| ids.iter().filter(|&&i| i == r).count() as f32)
            .collect();
        for r in 0..3u64 {
            let got = get::<bf16>(&f, FabricAddr(TABLE + 4 * r), 2);
            let c = bf16::from_f32(counts[r as usize]);
            assert_eq!(got, [c, c], "row {r}");
        }
        let skipped: Vec<u32> = out.skipped.iter().map(|s| s.position).collect();
        assert_eq!(skipped, (0..40).filter(|i| i % 5 == 4).collect::<Vec<_>>());
    }

    #[test]
    fn an_invalid_update_fails_closed() {
        let mut f = setup();
        let e = fails_closed(&mut f, &mut CoreState::new(), update(CceOp::Add, 0));
        assert_eq!(e.rule(), Some(Rule::NonZero));
    }
}
