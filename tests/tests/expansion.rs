//! End to end: an NKI embedding update lowers to PSEUDO_EMBEDDING_UPDATE 0xca, the
//! runtime expands each 0xca into LoadPoolArgument / EmbeddingUpdate / TensorStore and
//! lists the trace in its report, and the memory effect equals the raw EMBEDDING_UPDATE
//! 0x79 run directly.

use dma::{Addr4, CceOp, Fabric, FabricAddr, Generation, Space};
use hostsim::isa::{Instruction, Opcode};
use hostsim::nki::{self, Tensor};
use hostsim::runtime::{Mechanism, MicroOp, RouteTaken, Runtime};

const TABLE: u64 = 0x4_0000;
const ROWS: u32 = 40;
const D: u32 = 4;
const S: u32 = 5000;

fn sbuf(p: u32, offset: u32) -> Addr4 {
    Addr4::encode(Space::Sbuf, p, offset).unwrap()
}

/// A table of i16 rows, 5000 indices (every 7th one past the table) and data rows.
fn setup(g: Generation) -> (Fabric, Vec<Instruction>, Vec<u32>) {
    let mut f = Fabric::new(g);
    let idx: Vec<u32> = (0..S)
        .map(|i| {
            if i % 7 == 3 {
                ROWS + i % 5
            } else {
                (i * 13) % ROWS
            }
        })
        .collect();
    let data: Vec<i16> = (0..S * D).map(|i| (i % 91) as i16 - 45).collect();
    f.write_elems(sbuf(0, 0).to_fabric(f.map()).unwrap(), &idx)
        .unwrap();
    f.write_elems(sbuf(3, 0).to_fabric(f.map()).unwrap(), &data)
        .unwrap();
    let l = nki::embedding_update(
        g,
        &Tensor::new(FabricAddr(TABLE), [ROWS, D], dma::Dtype::I16),
        &Tensor::vector(sbuf(0, 0), S, dma::Dtype::U32),
        &Tensor::new(sbuf(3, 0), [S, D], dma::Dtype::I16),
        CceOp::Add,
    )
    .unwrap();
    (f, l.instructions, idx)
}

#[test]
fn pseudo_embedding_update_expands_with_a_trace() {
    let runs = [
        (Generation::Sunda, Mechanism::Auto, RouteTaken::Pool),
        (Generation::Cayman, Mechanism::Auto, RouteTaken::Dge),
        (Generation::Sunda, Mechanism::Dge, RouteTaken::Dge),
        (
            Generation::Cayman,
            Mechanism::Reference,
            RouteTaken::Reference,
        ),
        (Generation::Maverick, Mechanism::Pool, RouteTaken::Pool),
    ];
    for (g, m, route) in runs {
        let (mut f, stream, idx) = setup(g);
        assert_eq!(stream.len(), 2, "5000 indices: two 0xca of 4096 + 904");
        let mut raw = f.clone();
        let mut rt = Runtime::new(g, m).unwrap();
        let report = rt.run(&mut f, &stream).unwrap();
        for (step, range) in report.steps.iter().zip([0..4096usize, 4096..5000]) {
            let len = range.len() as u32;
            let skipped = idx[range].iter().filter(|&&i| i >= ROWS).count() as u32;
            let applied = len - skipped;
            assert_eq!(step.opcode, Opcode::PseudoEmbeddingUpdate);
            assert_eq!(step.taken, route);
            let names: Vec<&str> = step.micro_ops.iter().map(MicroOp::name).collect();
            assert_eq!(
                names,
                ["LoadPoolArgument", "EmbeddingUpdate", "TensorStore"]
            );
            let expected = vec![
                MicroOp::LoadPoolArgument {
                    bytes: 64,
                    sequence_length: len,
                },
                MicroOp::EmbeddingUpdate {
                    route,
                    applied,
                    skipped,
                },
                MicroOp::TensorStore {
                    rows: applied,
                    bytes: u64::from(applied * D * 2),
                },
            ];
            assert_eq!(step.micro_ops, expected, "{g} {m:?}");
        }
        // the raw 0x79 on the same argument blocks: same memory, no expansion
        let mut direct = Runtime::new(g, m).unwrap();
        for inst in &stream {
            let Instruction::PseudoEmbeddingUpdate(e) = inst else {
                panic!("not 0xca: {inst:?}")
            };
            let step = direct.run_raw_embedding_update(&mut raw, e).unwrap();
            assert_eq!(step.opcode, Opcode::EmbeddingUpdate);
            assert!(step.micro_ops.is_empty());
        }
        assert_eq!(raw.first_difference(&f), None, "{g} {m:?}");
        let mut expected = vec![0i16; (ROWS * D) as usize];
        for (i, &r) in idx.iter().enumerate().filter(|(_, &r)| r < ROWS) {
            for j in 0..D as usize {
                let v = (i * D as usize + j) % 91;
                let t = &mut expected[r as usize * D as usize + j];
                // the DMA adds in f32: exact for i16, then saturated back to i16
                *t = t.saturating_add(v as i16 - 45);
            }
        }
        let mut table = vec![0i16; (ROWS * D) as usize];
        f.read_elems(FabricAddr(TABLE), &mut table).unwrap();
        assert_eq!(table, expected, "{g} {m:?}");
    }
}
