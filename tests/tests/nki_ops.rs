//! NKI-level semantics: each op lowered by `hostsim::nki`, run by the runtime on every
//! mechanism and generation where it is valid, against numpy-style expectations written
//! here from the NKI definitions (np.take with zero fill, column-major index flatten,
//! np.add.at), independently of every route.

use dma::{Addr4, CceOp, ComputeOp, Dtype, Element, Fabric, FabricAddr, Generation, Space};
use hostsim::core_state::IndexSide;
use hostsim::nki::{self, AccessPattern, DmaOptions, Lowered, OobMode, Tensor};
use hostsim::runtime::{Mechanism, RunReport, Runtime};
use hostsim::{Error, ErrorKind};

/// The mechanisms each op is checked on: every one, `Auto` being the kernel table's
/// route for `g` (POOL on sunda, DGE after).
fn mechanisms(_g: Generation) -> Vec<Mechanism> {
    Mechanism::ALL.to_vec()
}

fn sbuf(p: u32, offset: u32) -> Addr4 {
    Addr4::encode(Space::Sbuf, p, offset).unwrap()
}

fn at(f: &Fabric, a: Addr4) -> FabricAddr {
    a.to_fabric(f.map()).unwrap()
}

fn put<E: Element>(f: &mut Fabric, addr: FabricAddr, v: &[E]) {
    f.write_elems(addr, v).unwrap();
}

/// Writes `v` at the on-core address `a`.
fn put4<E: Element>(f: &mut Fabric, a: Addr4, v: &[E]) {
    let addr = at(f, a);
    put(f, addr, v);
}

fn get<E: Element + Default>(f: &Fabric, addr: FabricAddr, n: usize) -> Vec<E> {
    let mut out = vec![E::default(); n];
    f.read_elems(addr, &mut out).unwrap();
    out
}

fn run(g: Generation, m: Mechanism, f: &mut Fabric, l: &Lowered) -> Result<RunReport, Error> {
    Runtime::new(g, m).unwrap().run_lowered(f, l)
}

/// A deterministic stream of pseudo-random u32 (xorshift).
fn noise(seed: u32, n: usize) -> Vec<u32> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x
        })
        .collect()
}

// ---- nc_n_gather ---------------------------------------------------------------------

/// dst[p, m] = data[p, idx[p, m]] if idx < F else 0 (np.take after clip, np.where zero).
fn np_gather_zero_fill(data: &[Vec<f32>], idx: &[Vec<u32>]) -> Vec<Vec<f32>> {
    data.iter()
        .zip(idx)
        .map(|(row, ids)| {
            ids.iter()
                .map(|&i| row.get(i as usize).copied().unwrap_or(0.0))
                .collect()
        })
        .collect()
}

#[test]
fn nc_n_gather_zero_fills_across_group_boundaries() {
    const P: u32 = 5;
    const F: u32 = 1300;
    let edges = [
        0u32,
        511,
        512,
        1023,
        1024,
        1299,
        1300,
        1535,
        1536,
        4000,
        u32::MAX,
    ];
    for g in Generation::ALL {
        for m in mechanisms(g) {
            let mut f = Fabric::new(g);
            let data: Vec<Vec<f32>> = (0..P)
                .map(|p| (0..F).map(|j| (p * 10_000 + j) as f32).collect())
                .collect();
            let idx: Vec<Vec<u32>> = (0..P)
                .map(|p| {
                    let mut v = edges.to_vec();
                    v.extend(noise(p + 1, 53).into_iter().map(|x| x % 1700));
                    v
                })
                .collect();
            for p in 0..P {
                put4(&mut f, sbuf(3 + p, 0), &data[p as usize]);
                put4(&mut f, sbuf(3 + p, 0x2000), &idx[p as usize]);
                put4(&mut f, sbuf(40 + p, 0x4000), &[-7.0f32; 64]);
            }
            let l = nki::nc_n_gather(
                g,
                &Tensor::new(sbuf(3, 0), [P, F], Dtype::F32),
                &Tensor::new(sbuf(3, 0x2000), [P, 64], Dtype::U32),
                &Tensor::new(sbuf(40, 0x4000), [P, 64], Dtype::F32),
            )
            .unwrap();
            assert_eq!(l.instructions.len(), 6, "3 groups of load + gather");
            run(g, m, &mut f, &l).unwrap();
            let expected = np_gather_zero_fill(&data, &idx);
            for p in 0..P {
                let got: Vec<f32> = get(&f, at(&f, sbuf(40 + p, 0x4000)), 64);
                assert_eq!(got, expected[p as usize], "{g} {m:?} partition {p}");
            }
        }
    }
}

#[test]
fn nc_n_gather_longer_than_4096_indices() {
    const F: u32 = 700;
    let g = Generation::Sunda;
    for m in mechanisms(g) {
        let mut f = Fabric::new(g);
        let data: Vec<Vec<u16>> = (0..2u32)
            .map(|p| (0..F).map(|j| (p * 1000 + j) as u16).collect())
            .collect();
        let idx: Vec<Vec<u32>> = (0..2)
            .map(|p| noise(p + 9, 5000).into_iter().map(|x| x % 800).collect())
            .collect();
        for p in 0..2u32 {
            put4(&mut f, sbuf(p, 0), &data[p as usize]);
            put4(&mut f, sbuf(p, 0x1000), &idx[p as usize]);
        }
        let l = nki::nc_n_gather(
            g,
            &Tensor::new(sbuf(0, 0), [2, F], Dtype::U16),
            &Tensor::new(sbuf(0, 0x1000), [2, 5000], Dtype::U32),
            &Tensor::new(sbuf(0, 0x8000), [2, 5000], Dtype::U16),
        )
        .unwrap();
        // 2 groups x (load + 2 gathers)
        assert_eq!(l.instructions.len(), 6);
        run(g, m, &mut f, &l).unwrap();
        for p in 0..2usize {
            let got: Vec<u16> = get(&f, at(&f, sbuf(p as u32, 0x8000)), 5000);
            let expected: Vec<u16> = idx[p]
                .iter()
                .map(|&i| data[p].get(i as usize).copied().unwrap_or(0))
                .collect();
            assert_eq!(got, expected, "{m:?} partition {p}");
        }
    }
}

// ---- local_gather --------------------------------------------------------------------

/// The NKI reference: per core c, `ids = index[16c:16c+16].flatten(order='F')[:n]`;
/// partition q gets, per id, `src[q, id .. id + E]` with elements past F as 0.
fn np_local_gather(src: &[Vec<u32>], index: &[Vec<u16>], per: usize, n: usize) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for (c, block) in index.chunks(16).enumerate() {
        let k = block[0].len();
        let ids: Vec<usize> = (0..k)
            .flat_map(|col| block.iter().map(move |row| usize::from(row[col])))
            .take(n)
            .collect();
        for src_row in &src[16 * c..16 * c + 16] {
            let row: Vec<u32> = ids
                .iter()
                .flat_map(|&id| (id..id + per).map(|e| src_row.get(e).copied().unwrap_or(0)))
                .collect();
            out.push(row);
        }
    }
    out
}

#[test]
fn local_gather_reads_column_major_and_zero_fills_tails() {
    const P: u32 = 32;
    const F: u32 = 40;
    const K: u32 = 3;
    const E: u32 = 4;
    const N: u32 = 37;
    for g in Generation::ALL {
        for m in mechanisms(g) {
            let mut f = Fabric::new(g);
            let src: Vec<Vec<u32>> = (0..P).map(|q| noise(q + 100, F as usize)).collect();
            let index: Vec<Vec<u16>> = (0..P)
                .map(|q| {
                    let edges = [36u16, 37, 39, 40, 0xffff, 0, 5, 17];
                    (0..K).map(|c| edges[((q * K + c) % 8) as usize]).collect()
                })
                .collect();
            for q in 0..P {
                put4(&mut f, sbuf(16 + q, 0x100), &src[q as usize]);
                put4(&mut f, sbuf(16 + q, 0x400), &index[q as usize]);
                put4(
                    &mut f,
                    sbuf(64 + q, 0x800),
                    &[0xdead_beefu32; (N * E) as usize],
                );
            }
            let l = nki::local_gather(
                g,
                &Tensor::new(sbuf(16, 0x100), [P, F], Dtype::U32),
                &Tensor::new(sbuf(16, 0x400), [P, K], Dtype::U16),
                E,
                Some(N),
                &Tensor::new(sbuf(64, 0x800), [P, N * E], Dtype::U32),
            )
            .unwrap();
            run(g, m, &mut f, &l).unwrap();
            let expected = np_local_gather(&src, &index, E as usize, N as usize);
            for q in 0..P {
                let got: Vec<u32> = get(&f, at(&f, sbuf(64 + q, 0x800)), (N * E) as usize);
                assert_eq!(got, expected[q as usize], "{g} {m:?} partition {q}");
            }
        }
    }
}

// ---- dma_gather / dma_scatter ----------------------------------------------------------

const TABLE: u64 = 0x10_0000;
const OUT: u64 = 0x80_0000;

#[test]
fn dma_gather_skips_oob_rows_over_two_instructions() {
    const N: u32 = 300;
    const M: u32 = 5000;
    for g in Generation::ALL {
        for m in mechanisms(g) {
            let mut f = Fabric::new(g);
            let table: Vec<f32> = (0..N * 3).map(|i| i as f32 * 0.25).collect();
            put(&mut f, FabricAddr(TABLE), &table);
            let mut idx: Vec<u32> = noise(7, M as usize).into_iter().map(|x| x % 320).collect();
            idx[0] = N - 1;
            idx[1] = N;
            idx[4500] = u32::MAX;
            put4(&mut f, sbuf(0, 0), &idx);
            put(&mut f, FabricAddr(OUT), &vec![-1.0f32; (M * 3) as usize]);
            let opts = DmaOptions {
                oob: OobMode::Skip,
                bound_reg: 10,
                ..DmaOptions::default()
            };
            let l = nki::dma_gather(
                g,
                &Tensor::new(FabricAddr(TABLE), [N, 3], Dtype::F32),
                &Tensor::vector(sbuf(0, 0), M, Dtype::U32),
                &Tensor::new(FabricAddr(OUT), [M, 3], Dtype::F32),
                opts,
            )
            .unwrap();
            assert_eq!(l.instructions.len(), 2);
            let report = run(g, m, &mut f, &l).unwrap();
            let expected: Vec<f32> = idx
                .iter()
                .flat_map(|&i| match i < N {
                    true => table[(3 * i) as usize..(3 * i + 3) as usize].to_vec(),
                    false => vec![-1.0; 3],
                })
                .collect();
            assert_eq!(
                get::<f32>(&f, FabricAddr(OUT), (M * 3) as usize),
                expected,
                "{g} {m:?}"
            );
            let oob = idx.iter().filter(|&&i| i >= N).count();
            assert_eq!(report.totals.skipped, oob);
            assert_eq!(
                report.totals.notifications, 2,
                "both instructions skipped some"
            );
        }
    }
}

#[test]
fn dma_gather_hard_oob_in_a_later_instruction_undoes_the_op() {
    let g = Generation::Sunda;
    for m in mechanisms(g) {
        let mut f = Fabric::new(g);
        put(&mut f, FabricAddr(TABLE), &[1u32, 2, 3, 4]);
        let mut idx = vec![1u32; 5000];
        idx[4500] = 2;
        put4(&mut f, sbuf(0, 0), &idx);
        let l = nki::dma_gather(
            g,
            &Tensor::new(FabricAddr(TABLE), [2, 2], Dtype::U32),
            &Tensor::vector(sbuf(0, 0), 5000, Dtype::U32),
            &Tensor::new(FabricAddr(OUT), [5000, 2], Dtype::U32),
            DmaOptions::default(),
        )
        .unwrap();
        let e = run(g, m, &mut f, &l).unwrap_err();
        assert!(
            matches!(
                e,
                Error::OpUndone {
                    index: 1,
                    opcode: 0xbb,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.kind(), ErrorKind::IndexOutOfBounds(IndexSide::Src));
        // the op is one op: the first instruction's 4096 rows are undone too
        let out: Vec<u32> = get(&f, FabricAddr(OUT), 10_000);
        assert!(out.iter().all(|&v| v == 0));
    }
}

/// np.add.at(dst, idx, src) on i32 rows done in f32, as the DMA does: both operands
/// rounded to f32, the f32 sum, back to i32 rounding to nearest even and saturating.
fn np_add_at(dst: &mut [Vec<i32>], idx: &[u32], src: &[Vec<i32>]) {
    for (&i, row) in idx.iter().zip(src) {
        for (d, s) in dst[i as usize].iter_mut().zip(row) {
            *d = (*d as f32 + *s as f32).round_ties_even() as i32;
        }
    }
}

#[test]
fn dma_scatter_add_with_duplicates_is_np_add_at() {
    const M: u32 = 600;
    const N: u32 = 10;
    for g in Generation::ALL {
        for m in mechanisms(g) {
            let mut f = Fabric::new(g);
            let src: Vec<Vec<i32>> = noise(3, (M * 2) as usize)
                .chunks(2)
                .map(|c| c.iter().map(|&x| x as i32).collect())
                .collect();
            let idx: Vec<u32> = noise(4, M as usize).into_iter().map(|x| x % N).collect();
            let mut dst: Vec<Vec<i32>> = noise(5, (N * 2) as usize)
                .chunks(2)
                .map(|c| c.iter().map(|&x| x as i32).collect())
                .collect();
            put(&mut f, FabricAddr(TABLE), &src.concat());
            put4(&mut f, sbuf(0, 0x40), &idx);
            put(&mut f, FabricAddr(OUT), &dst.concat());
            let opts = DmaOptions {
                unique_indices: false,
                compute_op: ComputeOp::Add,
                ..DmaOptions::default()
            };
            let l = nki::dma_scatter(
                g,
                &Tensor::new(FabricAddr(TABLE), [M, 2], Dtype::I32),
                &Tensor::vector(sbuf(0, 0x40), M, Dtype::U32),
                &Tensor::new(FabricAddr(OUT), [N, 2], Dtype::I32),
                opts,
            )
            .unwrap();
            run(g, m, &mut f, &l).unwrap();
            np_add_at(&mut dst, &idx, &src);
            assert_eq!(
                get::<i32>(&f, FabricAddr(OUT), (N * 2) as usize),
                dst.concat(),
                "{g} {m:?}"
            );
        }
    }
}

#[test]
fn dma_scatter_f32_add_applies_in_index_order() {
    // order matters in f32: (1e8 + 1) - 1e8 = 0 but (1e8 - 1e8) + 1 = 1
    let g = Generation::Cayman;
    for m in mechanisms(g) {
        let mut f = Fabric::new(g);
        put(&mut f, FabricAddr(TABLE), &[1e8f32, 1.0, -1e8, 3.0]);
        put4(&mut f, sbuf(0, 0), &[0u32, 0, 0, 1]);
        let opts = DmaOptions {
            unique_indices: false,
            compute_op: ComputeOp::Add,
            ..DmaOptions::default()
        };
        let l = nki::dma_scatter(
            g,
            &Tensor::new(FabricAddr(TABLE), [4, 1], Dtype::F32),
            &Tensor::vector(sbuf(0, 0), 4, Dtype::U32),
            &Tensor::new(FabricAddr(OUT), [2, 1], Dtype::F32),
            opts,
        )
        .unwrap();
        run(g, m, &mut f, &l).unwrap();
        let mut expected = [0f32; 2];
        for (i, v) in [(0usize, 1e8f32), (0, 1.0), (0, -1e8), (1, 3.0)] {
            expected[i] += v;
        }
        assert_eq!(get::<f32>(&f, FabricAddr(OUT), 2), expected, "{m:?}");
        assert_eq!(expected, [0.0, 3.0]);
    }
}

#[test]
fn dma_scatter_duplicates_need_non_unique_indices() {
    let g = Generation::Mariana;
    for m in mechanisms(g) {
        for unique in [true, false] {
            let mut f = Fabric::new(g);
            put(&mut f, FabricAddr(TABLE), &[10u8, 11, 20, 21, 30, 31]);
            put4(&mut f, sbuf(0, 0), &[2u32, 0, 2]);
            let opts = DmaOptions {
                unique_indices: unique,
                ..DmaOptions::default()
            };
            let l = nki::dma_scatter(
                g,
                &Tensor::new(FabricAddr(TABLE), [3, 2], Dtype::U8),
                &Tensor::vector(sbuf(0, 0), 3, Dtype::U32),
                &Tensor::new(FabricAddr(OUT), [3, 2], Dtype::U8),
                opts,
            )
            .unwrap();
            let r = run(g, m, &mut f, &l);
            let out: Vec<u8> = get(&f, FabricAddr(OUT), 6);
            match unique {
                true => {
                    assert_eq!(r.unwrap_err().kind(), ErrorKind::DuplicateDestination);
                    assert_eq!(out, [0; 6], "nothing written");
                }
                // a plain copy: the last index wins
                false => assert_eq!(out, [20, 21, 0, 0, 30, 31], "{m:?}"),
            }
        }
    }
}

// ---- dma_copy --------------------------------------------------------------------------

#[test]
fn dma_copy_moves_a_strided_block() {
    // src element (i, j) at 5i + j, dst at 4i + j, 7 x 4 u16, dst (add)= src; the POOL
    // route has no DMA_MEMCPY kernel
    let lanes = [Mechanism::Reference, Mechanism::Dge, Mechanism::Auto];
    for (g, m) in Generation::ALL
        .into_iter()
        .flat_map(|g| lanes.map(|m| (g, m)))
    {
        let mut f = Fabric::new(g);
        let src: Vec<u16> = (0..35).map(|i| 100 + i).collect();
        put(&mut f, FabricAddr(TABLE), &src);
        put(&mut f, FabricAddr(OUT), &[1u16; 28]);
        let l = nki::dma_copy(
            g,
            &AccessPattern {
                addr: FabricAddr(TABLE).into(),
                ap: [[5, 7], [1, 4]],
            },
            &AccessPattern {
                addr: FabricAddr(OUT).into(),
                ap: [[4, 7], [1, 4]],
            },
            Dtype::U16,
            ComputeOp::Add,
        )
        .unwrap();
        run(g, m, &mut f, &l).unwrap();
        let expected: Vec<u16> = (0..7)
            .flat_map(|i| (0..4).map(move |j| 1 + 100 + 5 * i + j))
            .collect();
        assert_eq!(get::<u16>(&f, FabricAddr(OUT), 28), expected, "{g} {m:?}");
    }
}

// ---- embedding_update ------------------------------------------------------------------

#[test]
fn embedding_update_reduces_rows_in_order_and_skips_past_the_table() {
    const R: u32 = 6;
    const D: usize = 3;
    const S: usize = 50;
    for g in Generation::ALL {
        for m in mechanisms(g) {
            for cce in [CceOp::Add, CceOp::Max, CceOp::Min] {
                let mut f = Fabric::new(g);
                let mut table: Vec<f32> = (0..R as usize * D).map(|i| i as f32 - 4.5).collect();
                let idx: Vec<u32> = noise(11, S).into_iter().map(|x| x % 8).collect();
                let data: Vec<f32> = noise(12, S * D)
                    .into_iter()
                    .map(|x| (x % 1000) as f32 / 8.0 - 60.0)
                    .collect();
                put(&mut f, FabricAddr(TABLE), &table);
                put4(&mut f, sbuf(0, 0), &idx);
                put4(&mut f, sbuf(7, 0), &data);
                let l = nki::embedding_update(
                    g,
                    &Tensor::new(FabricAddr(TABLE), [R, D as u32], Dtype::F32),
                    &Tensor::vector(sbuf(0, 0), S as u32, Dtype::U32),
                    &Tensor::new(sbuf(7, 0), [S as u32, D as u32], Dtype::F32),
                    cce,
                )
                .unwrap();
                let report = run(g, m, &mut f, &l).unwrap();
                for (i, &r) in idx.iter().enumerate() {
                    if r >= R {
                        continue;
                    }
                    for j in 0..D {
                        let (t, v) = (&mut table[r as usize * D + j], data[i * D + j]);
                        *t = match cce {
                            CceOp::Add => *t + v,
                            CceOp::Max => t.max(v),
                            _ => t.min(v),
                        };
                    }
                }
                let got: Vec<f32> = get(&f, FabricAddr(TABLE), R as usize * D);
                assert_eq!(got, table, "{g} {m:?} {cce:?}");
                let skipped = idx.iter().filter(|&&r| r >= R).count();
                assert_eq!(report.totals.skipped, skipped);
                assert_eq!(report.steps[0].micro_ops.len(), 3, "0xca is expanded");
            }
        }
    }
}

/// numpy's `src[idx].T` for `src` of `[N, C]` row-major.
fn np_take_transpose(src: &[u16], cols: usize, idx: &[u32]) -> Vec<Vec<u16>> {
    (0..cols)
        .map(|c| idx.iter().map(|&r| src[r as usize * cols + c]).collect())
        .collect()
}

#[test]
fn dma_gather_transpose_is_src_take_transposed() {
    const N: u32 = 300;
    const C: u32 = 3;
    const M: u32 = 5000;
    for g in Generation::ALL {
        let (idx_t, src_t) = (
            Tensor::vector(sbuf(0, 0), M, Dtype::U32),
            Tensor::new(FabricAddr(TABLE), [N, C], Dtype::U16),
        );
        let dst_t = Tensor::new(FabricAddr(OUT), [C, M], Dtype::U16);
        if g == Generation::Sunda {
            let e = nki::dma_gather_transpose(g, &src_t, &idx_t, &dst_t, OobMode::Error);
            assert!(e
                .unwrap_err()
                .to_string()
                .contains("needs trn2 (cayman) or later"));
            continue;
        }
        for m in mechanisms(g) {
            let table: Vec<u16> = noise(3, (N * C) as usize)
                .into_iter()
                .map(|x| x as u16)
                .collect();
            let idx: Vec<u32> = noise(11, M as usize).into_iter().map(|x| x % N).collect();
            let expected = np_take_transpose(&table, C as usize, &idx);
            // into SBUF partitions 1..4, and into HBM rows of M elements
            for on_core in [true, false] {
                let mut f = Fabric::new(g);
                put(&mut f, FabricAddr(TABLE), &table);
                put4(&mut f, sbuf(0, 0), &idx);
                let dst = match on_core {
                    true => at(&f, sbuf(1, 0x4000)),
                    false => FabricAddr(OUT),
                };
                let l = nki::dma_gather_transpose(
                    g,
                    &Tensor::new(FabricAddr(TABLE), [N, C], Dtype::U16),
                    &Tensor::vector(sbuf(0, 0), M, Dtype::U32),
                    &Tensor::new(dst, [C, M], Dtype::U16),
                    OobMode::Error,
                )
                .unwrap();
                assert_eq!(l.instructions.len(), 2, "4096 + 904 indices");
                let report = run(g, m, &mut f, &l).unwrap();
                for (c, want) in expected.iter().enumerate() {
                    let row = match on_core {
                        true => at(&f, sbuf(1 + c as u32, 0x4000)),
                        false => FabricAddr(OUT + 2 * u64::from(M) * c as u64),
                    };
                    let got: Vec<u16> = get(&f, row, M as usize);
                    assert_eq!(&got, want, "{g} {m:?} row {c} on core {on_core}");
                }
                assert_eq!(report.totals.skipped, 0);
            }
        }
    }
}

#[test]
fn dma_gather_transpose_rejects_mismatched_shapes() {
    let e = nki::dma_gather_transpose(
        Generation::Cayman,
        &Tensor::new(FabricAddr(TABLE), [8, 4], Dtype::Bf16),
        &Tensor::vector(sbuf(0, 0), 2, Dtype::U32),
        &Tensor::new(sbuf(1, 0), [2, 4], Dtype::Bf16),
        OobMode::Error,
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::NkiArgument {
                op: "dma_gather_transpose",
                arg: "dst.shape[0]",
                value: 2,
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::Runtime);
}
