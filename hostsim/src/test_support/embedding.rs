//! EMBEDDING_UPDATE (PSEUDO_EMBEDDING_UPDATE 0xca) cases every route must pass with the
//! same exact results: ADD / MAX / MIN over duplicates in order, indices past the table
//! skipped and reported, integer saturation, bf16 rounding across many vectors, and invalid
//! updates failing closed.

use dma::{CceOp, Dtype, Fabric, FabricAddr};
use half::bf16;

use super::{get, put, sbuf, sbuf_at, Route};
use crate::core_state::{CoreState, IndexSide, SkippedIndex};
use crate::isa::{EmbeddingTable, PseudoEmbeddingUpdate, Rule};

const TABLE: u64 = 0x10000;
const DATA: u32 = 0x1000;
/// Bytes between rows: 3 f32 and a 4-byte pad.
const STRIDE: u64 = 16;
const PAD: f32 = 12345.0;

/// A 5-row table, row `r` = `[r, r + 0.5, -r]` plus a pad; indices `[2, 7, 2, 0]`
/// (7 is past the 5 rows) and their data rows.
fn setup(r: Route) -> Fabric {
    let mut f = r.fabric();
    for row in 0..5u64 {
        let v = row as f32;
        put(
            &mut f,
            FabricAddr(TABLE + row * STRIDE),
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
    get(f, FabricAddr(TABLE + r * STRIDE), 4)
}

/// Runs `op` on [`setup`] and checks rows 2 and 0, the untouched rows and the report.
fn check(r: Route, op: CceOp, row2: [f32; 3], row0: [f32; 3]) {
    let mut f = setup(r);
    let out = r.run(&mut f, &mut CoreState::new(), update(op, 4));
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

/// Row 2 = `[2, 2.5, -2] + [1, 1, 1] + [0.5, 10, -10]`.
pub fn add_accumulates_duplicates_and_skips(r: Route) {
    check(r, CceOp::Add, [3.5, 13.5, -11.0], [-1.0, 2.5, 3.0]);
}

pub fn max_reduces_in_order(r: Route) {
    check(r, CceOp::Max, [2.0, 10.0, 1.0], [0.0, 2.0, 3.0]);
}

pub fn min_reduces_in_order(r: Route) {
    check(r, CceOp::Min, [0.5, 1.0, -10.0], [-1.0, 0.5, -0.0]);
}

/// Row 0 = `[250, 1] + [5, 2] + [3, 4]` in f32: 258 saturates to u8's 255.
pub fn integer_rows_saturate(r: Route) {
    let mut f = r.fabric();
    put::<u8>(&mut f, FabricAddr(TABLE), &[250, 1, 0, 0]);
    put::<u32>(&mut f, sbuf_at(0, 0), &[0, 0]);
    put::<u8>(&mut f, sbuf_at(0, DATA), &[5, 2, 3, 4]);
    let t = table(1, 2, 2);
    let e = PseudoEmbeddingUpdate::new(t, sbuf(0, 0), sbuf(0, DATA), 2, Dtype::U8, CceOp::Add);
    r.run(&mut f, &mut CoreState::new(), e);
    assert_eq!(get::<u8>(&f, FabricAddr(TABLE), 4), [255, 7, 0, 0]);
}

/// 40 updates of 1.0 into row `i % 3`, 2 bf16 each; every fifth index is past the rows.
pub fn many_indices_across_vectors_in_bf16(r: Route) {
    let mut f = r.fabric();
    let ids: Vec<u32> = (0..40)
        .map(|i| if i % 5 == 4 { 3 + i } else { i % 3 })
        .collect();
    put(&mut f, sbuf_at(0, 0), &ids);
    put(&mut f, sbuf_at(0, DATA), &[bf16::from_f32(1.0); 80]);
    let t = table(3, 4, 2);
    let e = PseudoEmbeddingUpdate::new(t, sbuf(0, 0), sbuf(0, DATA), 40, Dtype::Bf16, CceOp::Add);
    let out = r.run(&mut f, &mut CoreState::new(), e);
    for (row, count) in [(0u64, 11.0), (1, 10.0), (2, 11.0)] {
        let got = get::<bf16>(&f, FabricAddr(TABLE + 4 * row), 2);
        let c = bf16::from_f32(count);
        assert_eq!(got, [c, c], "row {row}");
    }
    let skipped: Vec<u32> = out.skipped.iter().map(|s| s.position).collect();
    assert_eq!(skipped, (0..40).filter(|i| i % 5 == 4).collect::<Vec<_>>());
}

pub fn invalid_updates_fail_closed(r: Route) {
    let mut f = setup(r);
    let mut s = CoreState::new();
    let e = r.fails_closed(&mut f, &mut s, update(CceOp::Add, 0));
    assert_eq!(e.rule(), Some(Rule::NonZero));
    assert_eq!(
        e.field().map(|p| p.to_string()).as_deref(),
        Some("PSEUDO_EMBEDDING_UPDATE.sequence_length")
    );
    let e = r.fails_closed(&mut f, &mut s, update(CceOp::Max, 5000));
    assert_eq!(e.rule(), Some(Rule::IndexCount));
}

/// Every case above, as `#[test]`s on `$route`.
macro_rules! embedding_cases {
    ($route:expr) => {
        $crate::test_support::route_cases!($route, embedding: [
            add_accumulates_duplicates_and_skips,
            max_reduces_in_order,
            min_reduces_in_order,
            integer_rows_saturate,
            many_indices_across_vectors_in_bf16,
            invalid_updates_fail_closed,
        ]);
    };
}
pub(crate) use embedding_cases;
