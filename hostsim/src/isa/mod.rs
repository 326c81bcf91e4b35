//! # The ISA of the indirection family
//!
//! The instruction set the runtime executes, in the hardware's terms:
//!
//! - [`opcode`]: the opcode table ([`Opcode`], [`OPCODE_TABLE`]) and the struct2opcode
//!   binding (0x79 has no struct; the 0xca struct is expanded at run time);
//! - [`fields`]: the sub-structs and coded fields ([`InstHeader`], [`Tensor4d`],
//!   [`Indirect`], [`MemPattern4d`], [`DmaIndirectFlags`], [`BoundCheckReg`],
//!   [`ShapeReg`], [`IndexMissBehavior`], ...);
//! - [`structs`]: the six 64-byte operand structs ([`PoolBufferLoad`], [`S4d4Gt`],
//!   [`S4d4Ic`], [`DmaIndirect1d`], [`PseudoEmbeddingUpdate`], [`DmaDirect2d`]) as
//!   little-endian zerocopy types with typed getters and builders;
//! - [`layout`]: the one table of field offsets ([`FIELD_LAYOUT`]);
//! - [`validate`]: the per-generation validity contracts, [`rule`] the named rules;
//! - [`registers`]: the bound/shape register file DMA_INDIRECT reads ([`BoundRegisters`]);
//! - [`kernels`]: the per-generation POOL kernel table and [`route`];
//! - [`mod@summary`]: a human-readable listing for the CLI ([`summary()`]).
//! - [`text`]: every field of an instruction by name, to and from TOML/JSON and hex.
//!
//! Bytes enter through [`decode`] (generation-free rules: opcode, codes, booleans,
//! reserved bytes and bits) and [`Instruction::validate`] (the generation's contract,
//! including every address on its fabric), and leave through [`Instruction::encode`].
//! Nothing here panics on input.

pub mod fields;
pub mod kernels;
pub mod layout;
pub mod opcode;
pub mod registers;
pub mod rule;
pub mod structs;
pub mod summary;
pub mod text;
pub mod validate;

pub use fields::{
    BoundCheckReg, DmaIndirectFlags, IcMode, IndexMissBehavior, Indirect, IndirectDim,
    IndirectMode, InstFlags, InstHeader, MemPattern4d, ReshapeKind, ShapeReg, Tensor4d,
};
pub use kernels::{route, Route, KERNEL_TABLE};
pub use layout::{FieldLayout, Origin, FIELD_LAYOUT};
pub use opcode::{Opcode, OPCODE_TABLE};
pub use registers::BoundRegisters;
pub use rule::{FieldPath, Rule};
pub use structs::{
    Direct2dSide, DmaDirect2d, DmaIndirect1d, DmaSide, EmbeddingTable, IndirectWalk,
    PoolBufferLoad, PseudoEmbeddingUpdate, S4d4Gt, S4d4Ic,
};
pub use summary::summary;

use dma::Generation;

use crate::error::Error;
use structs::Operand;

/// Bytes in every instruction.
pub const INSTRUCTION_BYTES: usize = 64;

/// A decoded instruction: one operand struct per opcode that has one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Instruction {
    /// 0x67 POOL_BUFFER_LOAD.
    PoolBufferLoad(PoolBufferLoad),
    /// 0x68 GATHER (S4D4_GT).
    Gather(S4d4Gt),
    /// 0xe7 INDIRECT_COPY (S4D4_IC).
    IndirectCopy(S4d4Ic),
    /// 0xbb DMA_INDIRECT (DMA_INDIRECT1D).
    DmaIndirect(DmaIndirect1d),
    /// 0xca PSEUDO_EMBEDDING_UPDATE.
    PseudoEmbeddingUpdate(PseudoEmbeddingUpdate),
    /// 0xb8 DMA_MEMCPY (DMA_DIRECT2D).
    DmaMemcpy(DmaDirect2d),
}

/// Decodes one 64-byte instruction, applying every rule that needs no generation.
pub fn decode(bytes: &[u8]) -> Result<Instruction, Error> {
    let code = match bytes.first() {
        Some(code) if bytes.len() == INSTRUCTION_BYTES => *code,
        _ => return Err(Error::InstructionLength { len: bytes.len() }),
    };
    Ok(match Opcode::from_code(code)? {
        Opcode::PoolBufferLoad => Instruction::PoolBufferLoad(Operand::decode_from(bytes)?),
        Opcode::Gather => Instruction::Gather(Operand::decode_from(bytes)?),
        Opcode::IndirectCopy => Instruction::IndirectCopy(Operand::decode_from(bytes)?),
        Opcode::DmaIndirect => Instruction::DmaIndirect(Operand::decode_from(bytes)?),
        Opcode::PseudoEmbeddingUpdate => {
            Instruction::PseudoEmbeddingUpdate(Operand::decode_from(bytes)?)
        }
        Opcode::DmaMemcpy => Instruction::DmaMemcpy(Operand::decode_from(bytes)?),
        Opcode::EmbeddingUpdate => {
            return Err(Error::NoOperandStruct {
                opcode: code,
                name: Opcode::EmbeddingUpdate.name(),
            })
        }
    })
}

/// Decodes one instruction and validates it for `generation`.
pub fn decode_valid(generation: Generation, bytes: &[u8]) -> Result<Instruction, Error> {
    let inst = decode(bytes)?;
    inst.validate(generation)?;
    Ok(inst)
}

impl Instruction {
    /// The opcode.
    pub fn opcode(&self) -> Opcode {
        match self {
            Instruction::PoolBufferLoad(_) => Opcode::PoolBufferLoad,
            Instruction::Gather(_) => Opcode::Gather,
            Instruction::IndirectCopy(_) => Opcode::IndirectCopy,
            Instruction::DmaIndirect(_) => Opcode::DmaIndirect,
            Instruction::PseudoEmbeddingUpdate(_) => Opcode::PseudoEmbeddingUpdate,
            Instruction::DmaMemcpy(_) => Opcode::DmaMemcpy,
        }
    }

    /// The instruction's 64 bytes.
    pub fn encode(&self) -> [u8; INSTRUCTION_BYTES] {
        match self {
            Instruction::PoolBufferLoad(s) => s.encode(),
            Instruction::Gather(s) => s.encode(),
            Instruction::IndirectCopy(s) => s.encode(),
            Instruction::DmaIndirect(s) => s.encode(),
            Instruction::PseudoEmbeddingUpdate(s) => s.encode(),
            Instruction::DmaMemcpy(s) => s.encode(),
        }
    }

    /// Checks the instruction whole against `generation`'s contract (decode rules
    /// included); the first broken rule is the error.
    pub fn validate(&self, generation: Generation) -> Result<(), Error> {
        match self {
            Instruction::PoolBufferLoad(s) => validate::pool_buffer_load(generation, s),
            Instruction::Gather(s) => validate::gather(generation, s),
            Instruction::IndirectCopy(s) => validate::indirect_copy(generation, s),
            Instruction::DmaIndirect(s) => validate::dma_indirect(generation, s),
            Instruction::PseudoEmbeddingUpdate(s) => validate::embedding_update(generation, s),
            Instruction::DmaMemcpy(s) => validate::dma_memcpy(generation, s),
        }
    }
}

macro_rules! from_operand {
    ($($variant:ident($t:ty)),*) => {$(
        impl From<$t> for Instruction {
            fn from(s: $t) -> Instruction {
                Instruction::$variant(s)
            }
        }
    )*};
}
from_operand!(
    PoolBufferLoad(PoolBufferLoad),
    Gather(S4d4Gt),
    IndirectCopy(S4d4Ic),
    DmaIndirect(DmaIndirect1d),
    PseudoEmbeddingUpdate(PseudoEmbeddingUpdate),
    DmaMemcpy(DmaDirect2d)
);

/// The operand struct name and size bound to `opcode` (`None` for the raw 0x79).
pub fn operand_layout(opcode: Opcode) -> Option<(&'static str, usize)> {
    fn of<T: Operand>() -> Option<(&'static str, usize)> {
        Some((T::NAME, size_of::<T>()))
    }
    match opcode {
        Opcode::PoolBufferLoad => of::<PoolBufferLoad>(),
        Opcode::Gather => of::<S4d4Gt>(),
        Opcode::IndirectCopy => of::<S4d4Ic>(),
        Opcode::DmaIndirect => of::<DmaIndirect1d>(),
        Opcode::PseudoEmbeddingUpdate => of::<PseudoEmbeddingUpdate>(),
        Opcode::DmaMemcpy => of::<DmaDirect2d>(),
        Opcode::EmbeddingUpdate => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dma::{Addr4, CceOp, ComputeOp, Dtype, FabricAddr, Space};
    use proptest::prelude::*;

    fn addr4() -> impl Strategy<Value = Addr4> {
        (any::<bool>(), 0u32..128, 0u32..(1 << 23)).prop_map(|(psum, p, o)| {
            let space = if psum { Space::Psum } else { Space::Sbuf };
            Addr4::encode(space, p, o).unwrap()
        })
    }

    fn dtype() -> impl Strategy<Value = Dtype> {
        prop::sample::select(Dtype::ALL.to_vec())
    }

    fn tensor() -> impl Strategy<Value = Tensor4d> {
        (addr4(), any::<[i16; 4]>(), any::<[u16; 4]>()).prop_map(|(a, s, n)| Tensor4d::new(a, s, n))
    }

    fn flags() -> impl Strategy<Value = InstFlags> {
        any::<bool>().prop_map(|t| if t { InstFlags::TILE } else { InstFlags::NONE })
    }

    fn pool_buffer_load() -> impl Strategy<Value = Instruction> {
        (tensor(), dtype(), any::<u8>(), flags(), any::<u32>()).prop_map(|(t, d, n, f, s)| {
            PoolBufferLoad::new(t, d, n)
                .with_inst_flags(f)
                .with_start_index(s)
                .into()
        })
    }

    fn gather() -> impl Strategy<Value = Instruction> {
        let miss = prop::sample::select(vec![
            IndexMissBehavior::ImmediateWrite,
            IndexMissBehavior::SkipWrite,
        ]);
        let codes = (dtype(), dtype(), any::<u8>(), flags());
        (tensor(), tensor(), codes, miss, any::<u32>(), any::<bool>()).prop_map(
            |(src, dst, (i, o, n, f), m, imm, free)| {
                S4d4Gt::new(src, dst, i, o, n)
                    .with_inst_flags(f)
                    .with_index_miss_behavior(m)
                    .with_immediate(imm)
                    .with_free_pool_buffer(free)
                    .into()
            },
        )
    }

    fn pattern(indirect: bool) -> BoxedStrategy<MemPattern4d> {
        if indirect {
            (addr4(), addr4(), any::<u16>())
                .prop_map(|(i, d, n)| MemPattern4d::from_indirect(Indirect::new(i, d, n)))
                .boxed()
        } else {
            tensor().prop_map(MemPattern4d::from_tensor).boxed()
        }
    }

    fn indirect_copy() -> impl Strategy<Value = Instruction> {
        let mode =
            prop::sample::select(vec![IcMode::Gather, IcMode::Scatter, IcMode::GatherScatter]);
        let sizes = (
            any::<u8>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            any::<u8>(),
        );
        (mode, (dtype(), dtype(), dtype()), sizes, flags())
            .prop_flat_map(|(mode, dtypes, sizes, f)| {
                let members = (pattern(mode.src_indirect()), pattern(mode.dst_indirect()));
                (Just((mode, dtypes, sizes, f)), members)
            })
            .prop_map(
                |((mode, (i, o, x), (per, dper, size, dsize, n), f), (src, dst))| {
                    let base =
                        S4d4Ic::gather(Indirect::default(), Tensor4d::default(), i, per, size, n);
                    base.with_inst_flags(f)
                        .with_raw_mode(mode, dper, dsize)
                        .with_dtypes(i, o, x)
                        .with_patterns(src, dst)
                        .into()
                },
            )
    }

    fn bound() -> impl Strategy<Value = BoundCheckReg> {
        prop_oneof![
            Just(BoundCheckReg::DISABLED),
            (0u8..64, any::<bool>()).prop_map(|(r, n)| BoundCheckReg::enabled(r, n).unwrap()),
        ]
    }

    fn side() -> impl Strategy<Value = DmaSide> {
        (any::<u64>(), addr4(), any::<u32>(), any::<u16>(), bound()).prop_map(|(s, i, e, st, b)| {
            DmaSide {
                start_addr: FabricAddr(s),
                idx_start_addr: i,
                elem_size: e,
                step_elem: st,
                bound: b,
            }
        })
    }

    fn dma_indirect() -> impl Strategy<Value = Instruction> {
        let mode = prop::sample::select(vec![
            IndirectMode::Src,
            IndirectMode::Dst,
            IndirectMode::SrcDst,
        ]);
        let dims = (0u8..4, 0u8..4)
            .prop_map(|(g, s)| (IndirectDim::from_bits(g), IndirectDim::from_bits(s)));
        let fl = (mode, any::<bool>(), any::<bool>(), dims)
            .prop_map(|(m, e, u, (g, s))| DmaIndirectFlags::new(m, e, u, g, s));
        let shape = prop_oneof![
            Just(ShapeReg::NONE),
            (0u8..64).prop_map(|r| ShapeReg::at(r).unwrap())
        ];
        let op = prop::sample::select(ComputeOp::ALL.to_vec());
        let counts = (any::<u16>(), any::<u16>(), any::<u16>());
        (fl, side(), side(), counts, dtype(), op, shape).prop_map(
            |(f, s, d, (sn, dn, mask), dt, op, sh)| {
                DmaIndirect1d::new(f, s, d, sn, dt, op)
                    .with_num_elem(sn, dn)
                    .with_eng_mask(mask)
                    .with_shape_reg(sh)
                    .into()
            },
        )
    }

    fn embedding() -> impl Strategy<Value = Instruction> {
        let table =
            (any::<u64>(), any::<u32>(), any::<u32>(), any::<u32>()).prop_map(|(b, n, s, e)| {
                EmbeddingTable {
                    base_addr: FabricAddr(b),
                    num_entries: n,
                    stride_bytes: s,
                    num_elements: e,
                }
            });
        let cce = prop::sample::select(vec![CceOp::Add, CceOp::Max, CceOp::Min]);
        let rest = (any::<u32>(), dtype(), dtype(), cce, any::<u16>());
        (table, addr4(), addr4(), rest).prop_map(|(t, i, d, (seq, dt, it, c, mask))| {
            PseudoEmbeddingUpdate::new(t, i, d, seq, dt, c)
                .with_index_dtype(it)
                .with_eng_mask(mask)
                .into()
        })
    }

    fn dma_memcpy() -> impl Strategy<Value = Instruction> {
        let side = (any::<u64>(), any::<[u16; 2]>()).prop_map(|(s, st)| Direct2dSide {
            start_addr: FabricAddr(s),
            step_elem: st,
        });
        let op = prop::sample::select(ComputeOp::ALL.to_vec());
        (
            side.clone(),
            side,
            any::<u32>(),
            any::<[u16; 2]>(),
            dtype(),
            op,
            any::<u16>(),
        )
            .prop_map(|(s, d, e, n, dt, op, mask)| {
                DmaDirect2d::new(s, d, e, n, dt, op)
                    .with_eng_mask(mask)
                    .into()
            })
    }

    fn instruction() -> impl Strategy<Value = Instruction> {
        prop_oneof![
            pool_buffer_load(),
            gather(),
            indirect_copy(),
            dma_indirect(),
            embedding(),
            dma_memcpy(),
        ]
    }

    /// Decodes and validates `bytes` on every generation; a decoded instruction must
    /// re-encode to the same bytes.
    fn decode_everywhere(bytes: &[u8]) -> Result<(), TestCaseError> {
        if let Ok(inst) = decode(bytes) {
            prop_assert_eq!(&inst.encode()[..], bytes);
            for g in Generation::ALL {
                let _ = inst.validate(g);
            }
        }
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_struct_round_trips(inst in instruction()) {
            let bytes = inst.encode();
            prop_assert_eq!(bytes[0], inst.opcode().code());
            prop_assert_eq!(decode(&bytes).unwrap(), inst);
            for g in Generation::ALL {
                let direct = inst.validate(g).map_err(|e| e.to_string());
                let again = decode_valid(g, &bytes).map(drop).map_err(|e| e.to_string());
                prop_assert_eq!(direct, again);
            }
        }

        #[test]
        fn random_bytes_never_panic(mut bytes in any::<[u8; 64]>(), op in 0usize..8) {
            if let Some(row) = OPCODE_TABLE.get(op) {
                bytes[0] = row.code;
            }
            decode_everywhere(&bytes)?;
        }

        #[test]
        fn mutated_instructions_never_panic(inst in instruction(), at in 1usize..64, byte in any::<u8>()) {
            let mut bytes = inst.encode();
            bytes[at] = byte;
            decode_everywhere(&bytes)?;
        }

        #[test]
        fn any_length_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..130)) {
            let r = decode(&bytes);
            if bytes.len() != INSTRUCTION_BYTES {
                let len_error = matches!(r, Err(Error::InstructionLength { len }) if len == bytes.len());
                prop_assert!(len_error, "{:?}", r);
            }
        }
    }

    #[test]
    fn decode_names_opcode_errors() {
        let mut b = [0u8; 64];
        b[0] = 0x79;
        let e = decode(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::NoOperandStruct {
                    opcode: 0x79,
                    name: "EMBEDDING_UPDATE"
                }
            ),
            "{e}"
        );
        b[0] = 0x42;
        assert!(matches!(
            decode(&b),
            Err(Error::UnknownOpcode { opcode: 0x42 })
        ));
        assert!(matches!(
            decode(&[]),
            Err(Error::InstructionLength { len: 0 })
        ));
    }

    #[test]
    fn operand_layouts_follow_the_opcode_table() {
        for row in OPCODE_TABLE {
            let layout = operand_layout(row.opcode);
            assert_eq!(layout.map(|l| l.0), row.operand, "{}", row.name);
            assert!(layout.is_none_or(|l| l.1 == INSTRUCTION_BYTES));
        }
    }

    #[test]
    fn decode_valid_applies_the_generation() {
        let src = Tensor4d::contiguous(Addr4::encode(Space::Sbuf, 0, 0).unwrap(), 4);
        let dst = Tensor4d::contiguous(Addr4::encode(Space::Psum, 0, 0).unwrap(), 4);
        let g = Instruction::from(S4d4Gt::new(src, dst, Dtype::U16, Dtype::F32, 1));
        assert_eq!(decode_valid(Generation::Mariana, &g.encode()).unwrap(), g);
        let e = decode_valid(Generation::Maverick, &g.encode()).unwrap_err();
        assert_eq!(e.rule(), Some(Rule::GatherPsum));
    }
}
