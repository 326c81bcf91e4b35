//! Micro-benchmark of the DGE's index read: one 16-lane u32 `gathera_t` + `gatherd` round
//! trip (N_2X32) through a `MemTable`, against 16 plain slice reads of the same table and
//! offsets in the same run. Rounds of the two alternate and the fastest round of each is
//! reported, so load from other processes hits both alike. Run with `cargo bench -p ivp`.

use ivp::{Gr, LaneView, MemTable, SuperGather, VBool, VecReg, Width};
use std::hint::black_box;
use std::time::Instant;

const ROUNDS: u32 = 9;
const ITERS_PER_ROUND: u32 = 500_000;
const TABLE_BYTES: usize = 4096;

/// Nanoseconds per iteration of one round of `f`, and the folded results.
fn round(f: &mut impl FnMut(u32) -> u32) -> (f64, u32) {
    let mut sink = 0u32;
    let start = Instant::now();
    for i in 0..ITERS_PER_ROUND {
        sink = sink.wrapping_add(f(i));
    }
    let ns = start.elapsed().as_nanos() as f64 / f64::from(ITERS_PER_ROUND);
    (ns, sink)
}

fn main() {
    let bytes: Vec<u8> = (0..TABLE_BYTES).map(|i| (i * 7 + 3) as u8).collect();
    let port = MemTable::from_bytes(bytes.clone());
    let offs: [u32; 16] = std::array::from_fn(|k| (k as u32 * 37 + 5) % 1024);
    let offsets = VecReg::from_n_2x32(offs);
    let vb = VBool::from_lanes(LaneView::N2x32, 0xffff);
    let mut sg = SuperGather::new();

    let mut engine = |i: u32| {
        let (o, p) = (black_box(&offsets), black_box(vb));
        let v = sg.gather_t(Gr::GR0, Width::N2x32, black_box(0), o, p, &port);
        black_box(v).lane(LaneView::N2x32, (i & 15) as usize)
    };
    let mut slices = |i: u32| {
        let mut out = [0u32; 16];
        for (o, &off) in out.iter_mut().zip(black_box(&offs)) {
            let at = off as usize * 4;
            *o = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap());
        }
        black_box(out)[(i & 15) as usize]
    };
    let (mut best_engine, mut best_slices) = (f64::MAX, f64::MAX);
    for _ in 0..ROUNDS {
        let (e, a) = round(&mut engine);
        let (s, b) = round(&mut slices);
        assert_eq!(
            a, b,
            "the engine and the slice reads must gather the same words"
        );
        best_engine = best_engine.min(e);
        best_slices = best_slices.min(s);
    }
    println!("gathera_t+gatherd N_2X32 (16 lanes): {best_engine:.1} ns per round trip");
    println!("16 plain slice reads (baseline):     {best_slices:.1} ns");
    println!(
        "ratio engine / baseline:             {:.2}x",
        best_engine / best_slices
    );
}
