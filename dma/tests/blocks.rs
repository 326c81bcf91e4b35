//! A descriptor block against its expansion: [`Engine::validate_block`] then
//! [`Engine::run_beside`] gives the memory, summary and error [`Engine::run`] gives for
//! [`Block::queues`], whether the block is validated whole or falls back to its queues.

use dma::addr::{PSUM_BASE, PSUM_STRIDE, SBUF_BASE, SBUF_STRIDE};
use dma::{
    Block, DescOp, Descriptor, Dtype, Engine, EngineConfig, Fabric, FabricAddr, Generation,
    InlineLimit, RaceCheck, Rows,
};
use proptest::prelude::*;

/// The table rows are read from: HBM `[0, TABLE)`.
const TABLE: u64 = 1 << 20;
/// Where strided destinations start in HBM.
const OUT: u64 = 3 << 20;

fn fabric() -> Fabric {
    let mut f = Fabric::new(Generation::Cayman);
    let ramp: Vec<u8> = (0..TABLE).map(|i| (i * 7 % 251) as u8).collect();
    f.write(FabricAddr(0), &ramp).unwrap();
    f
}

fn engine(workers: usize, race_check: RaceCheck) -> Engine {
    Engine::new(EngineConfig {
        workers,
        race_check,
        inline: InlineLimit::OFF,
        ..EngineConfig::default()
    })
    .unwrap()
}

/// Every byte either replay may have touched.
fn window(f: &Fabric) -> Vec<u8> {
    let mut out = vec![0; (4 << 20) as usize];
    f.read(FabricAddr(0), &mut out).unwrap();
    let mut sbuf = vec![0; 4096];
    for p in 0..4 {
        f.read(FabricAddr(SBUF_BASE + p * SBUF_STRIDE), &mut sbuf)
            .unwrap();
        out.extend_from_slice(&sbuf);
    }
    let mut psum = vec![0; PSUM_STRIDE as usize];
    for p in 0..2 {
        f.read(FabricAddr(PSUM_BASE + p * PSUM_STRIDE), &mut psum)
            .unwrap();
        out.extend_from_slice(&psum);
    }
    out
}

/// The row template: a copy, an add, or a cast f32 -> bf16, of `elems` elements.
fn template(kind: u8, elems: u32) -> Descriptor {
    let at = FabricAddr(0);
    match kind {
        0 => Descriptor::new(DescOp::Copy, at, at, elems * 4, Dtype::F32),
        1 => Descriptor::new(DescOp::Add, at, at, elems * 4, Dtype::F32),
        _ => Descriptor::cast(DescOp::Copy, at, Dtype::F32, at, elems * 2, Dtype::Bf16),
    }
    .unwrap()
}

/// A block of up to 300 rows: listed or strided sources in the table (sometimes one
/// listed row off the fabric or over the destination), strided destinations in HBM, one
/// SBUF partition apart, or consecutive across a PSUM partition's end (sometimes
/// overlapping or starting inside the table); rows that meet are dealt to one queue.
fn block() -> impl Strategy<Value = Block> {
    let deal = proptest::sample::subsequence((0u8..16).collect::<Vec<_>>(), 1..=16).prop_shuffle();
    (
        0u8..3,
        1u32..70,
        1usize..300,
        deal,
        any::<bool>(),
        0u8..8,
        any::<u64>(),
    )
        .prop_map(|(kind, elems, rows, deal, listed, twist, seed)| {
            let d = template(kind, elems);
            let row = u64::from(d.len());
            let mut x = seed | 1;
            let mut next = move |below: u64| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x % below
            };
            let src = match listed {
                true => {
                    let mut addrs: Vec<u64> = (0..rows).map(|_| next(TABLE / 1024) * 512).collect();
                    match twist {
                        1 => addrs[rows / 2] = SBUF_BASE + 8 * SBUF_STRIDE - 8, // leaves its partition
                        2 => addrs[rows - 1] = OUT + next(rows as u64) * row, // reads a row written
                        _ => {}
                    }
                    Rows::Listed(addrs)
                }
                false => Rows::Strided {
                    start: next(4096) * 4,
                    stride: next(3) * 256,
                },
            };
            let dst = match twist {
                3 => Rows::Strided {
                    start: OUT,
                    stride: row / 2 + 1,
                }, // rows overlap
                4 => Rows::Strided {
                    start: SBUF_BASE + 64,
                    stride: SBUF_STRIDE,
                },
                5 => Rows::Strided {
                    start: 4096,
                    stride: row,
                }, // inside the table
                // consecutive rows across a PSUM partition's end (partitions adjoin)
                6 => Rows::Strided {
                    start: PSUM_BASE + PSUM_STRIDE - 2 * row,
                    stride: row,
                },
                _ => Rows::Strided {
                    start: OUT + next(64) * 4,
                    stride: row + next(3) * 4,
                },
            };
            let rows = match twist {
                4 => rows.min(4),
                6 => rows.min(8),
                _ => rows,
            };
            // Rows that meet are ordered only inside one queue (else they race).
            let deal = match twist {
                2 | 3 | 5 => deal[..1].to_vec(),
                _ => deal,
            };
            let src = match src {
                Rows::Listed(mut a) => {
                    a.truncate(rows);
                    Rows::Listed(a)
                }
                s => s,
            };
            Block::new(d, rows, src, dst, deal).unwrap()
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn a_block_replays_as_its_queues(
        block in block(),
        workers in 1usize..=2,
        race in any::<bool>(),
    ) {
        let race_check = if race { RaceCheck::On } else { RaceCheck::Off };
        let engine = engine(workers, race_check);
        let (mut by_block, mut by_queues) = (fabric(), fabric());
        let before = window(&by_block);
        let ran = engine
            .validate_block(&by_block, block.clone())
            .and_then(|v| engine.run_beside(&mut by_block, &v, |_| ()));
        let expected = engine.run(&mut by_queues, &block.queues());
        match (ran, expected) {
            (Ok((report, ())), Ok(want)) => {
                prop_assert_eq!(report.summary, want.summary);
                prop_assert!(window(&by_block) == window(&by_queues), "memory differs");
            }
            (Err(e), Err(want)) => {
                prop_assert_eq!(e.to_string(), want.to_string());
                prop_assert!(window(&by_block) == before, "a refused block wrote");
            }
            (got, want) => prop_assert!(false, "block {:?}, queues {:?}", got.map(|r| r.0.summary), want.map(|r| r.summary)),
        }
    }
}

/// A gather block is validated whole: its queues are built only when asked for.
#[test]
fn a_gather_is_validated_whole_and_shows_its_descriptors() {
    let engine = engine(2, RaceCheck::Off);
    let d = template(0, 1);
    let src = Rows::Listed((0..4096).map(|i| (i * 7919 % 65536) * 4).collect());
    let block = Block::new(
        d,
        4096,
        src,
        Rows::Strided {
            start: OUT,
            stride: 4,
        },
        (0..16).collect(),
    )
    .unwrap();
    let mut f = fabric();
    let v = engine.validate_block(&f, block.clone()).unwrap();
    assert_eq!(v.queues().into_owned(), block.queues());
    let (report, ()) = engine.run_beside(&mut f, &v, |_| ()).unwrap();
    assert_eq!(report.summary.descriptors, 4096);
    assert_eq!(
        report.execution.units, 4,
        "1024 rows a unit: validated whole"
    );
    for i in [0u64, 1, 4095] {
        let at = (i * 7919 % 65536) * 4;
        assert_eq!(
            f.read_obj::<[u8; 4]>(FabricAddr(OUT + i * 4)).unwrap(),
            fabric().read_obj::<[u8; 4]>(FabricAddr(at)).unwrap()
        );
    }
}

/// Consecutive short rows across the end of a region whose next region adjoins it (PSUM
/// partitions on every generation, SBUF partitions from v4): each row is in one region, so
/// the block is validated whole, and it runs as its queues do (gathered rows are written
/// as one range only inside one region).
#[test]
fn short_rows_across_adjoining_partitions_run_as_their_queues() {
    let cases = [
        (Generation::Cayman, PSUM_BASE + PSUM_STRIDE - 32, 4),
        (Generation::Mariana, SBUF_BASE + SBUF_STRIDE - 32, 4),
        (Generation::Cayman, PSUM_BASE + PSUM_STRIDE - 4096 - 32, 260),
    ];
    for (generation, start, rows) in cases {
        let src = Rows::Listed((0..rows as u64).map(|i| i * 4096).collect());
        let dst = Rows::Strided { start, stride: 16 };
        let block = Block::new(template(0, 4), rows, src, dst, vec![0]).unwrap();
        let e = engine(1, RaceCheck::Off);
        let mut f = Fabric::new(generation);
        f.write(FabricAddr(0), &vec![7u8; 2 << 20]).unwrap();
        let mut want = f.clone();
        e.run(&mut want, &block.queues()).unwrap();
        let v = e.validate_block(&f, block).unwrap();
        e.run_beside(&mut f, &v, |_| ()).unwrap();
        assert_eq!(
            f.first_difference(&want),
            None,
            "{generation:?} at {start:#x}"
        );
    }
}

/// A small block on two workers, short rows gathered and long rows copied one by one,
/// against its queues (small enough for Miri: `cargo +nightly miri test -p dma --test
/// blocks -- small_blocks`).
#[test]
fn small_blocks_on_two_workers_run_as_their_queues() {
    let e = engine(2, RaceCheck::Off);
    for (elems, rows) in [(1u32, 2500usize), (32, 1100)] {
        let d = template(0, elems);
        let row = u64::from(d.len());
        let src = Rows::Listed((0..rows as u64).map(|i| i * 7 % 64 * row).collect());
        let dst = Rows::Strided {
            start: OUT,
            stride: row,
        };
        let block = Block::new(d, rows, src, dst, vec![3, 1, 2]).unwrap();
        let mut f = Fabric::new(Generation::Cayman);
        let table: Vec<u8> = (0..64 * row).map(|i| (i * 13 % 251) as u8).collect();
        f.write(FabricAddr(0), &table).unwrap();
        let mut want = f.clone();
        e.run(&mut want, &block.queues()).unwrap();
        let v = e.validate_block(&f, block).unwrap();
        let (report, ()) = e.run_beside(&mut f, &v, |_| ()).unwrap();
        assert!(
            report.execution.units > 1,
            "{elems}: more units than one worker"
        );
        assert_eq!(f.first_difference(&want), None, "{elems} elements a row");
    }
}
