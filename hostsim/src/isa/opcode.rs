//! The opcode table: the seven indirection-family opcodes of NEURON_ISA_TPB_OPCODE and the
//! operand struct each one binds to (seed 000 section 1, struct2opcode).

use crate::error::Error;

/// An opcode of the indirection family (NEURON_ISA_TPB_OPCODE_*). The byte values are
/// identical on all four generations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Opcode {
    /// POOL_BUFFER_LOAD 0x67: fill the Pool_Buffer (at most 512 elements per channel).
    PoolBufferLoad,
    /// GATHER 0x68 (S4D4_GT): within-partition gather against the loaded Pool_Buffer.
    Gather,
    /// EMBEDDING_UPDATE 0x79: the raw SEQ-side form; no operand struct binds to it.
    EmbeddingUpdate,
    /// DMA_MEMCPY 0xb8 (DMA_DIRECT2D): a direct 2-D DMA copy.
    DmaMemcpy,
    /// DMA_INDIRECT 0xbb (DMA_INDIRECT1D): gather/scatter-by-index DMA.
    DmaIndirect,
    /// PSEUDO_EMBEDDING_UPDATE 0xca: the compiler-emitted form of 0x79, expanded at run
    /// time into a LoadPoolArgument / EmbeddingUpdate / TensorStore sequence.
    PseudoEmbeddingUpdate,
    /// INDIRECT_COPY 0xe7 (S4D4_IC): per-index row copy (NKI `local_gather`).
    IndirectCopy,
}

/// One row of [`OPCODE_TABLE`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpcodeInfo {
    pub opcode: Opcode,
    /// The opcode byte.
    pub code: u8,
    /// The NEURON_ISA_TPB_OPCODE_* suffix.
    pub name: &'static str,
    /// The operand struct bound by struct2opcode (`None` for the raw 0x79).
    pub operand: Option<&'static str>,
}

const fn row(
    opcode: Opcode,
    code: u8,
    name: &'static str,
    operand: Option<&'static str>,
) -> OpcodeInfo {
    OpcodeInfo {
        opcode,
        code,
        name,
        operand,
    }
}

/// The opcode table, in code order. POOL_BUFFER_LOAD's struct name is the project's own;
/// the other bindings are the seed's struct2opcode rows.
pub const OPCODE_TABLE: [OpcodeInfo; 7] = [
    row(
        Opcode::PoolBufferLoad,
        0x67,
        "POOL_BUFFER_LOAD",
        Some("POOL_BUFFER_LOAD"),
    ),
    row(Opcode::Gather, 0x68, "GATHER", Some("S4D4_GT")),
    row(Opcode::EmbeddingUpdate, 0x79, "EMBEDDING_UPDATE", None),
    row(Opcode::DmaMemcpy, 0xb8, "DMA_MEMCPY", Some("DMA_DIRECT2D")),
    row(
        Opcode::DmaIndirect,
        0xbb,
        "DMA_INDIRECT",
        Some("DMA_INDIRECT1D"),
    ),
    row(
        Opcode::PseudoEmbeddingUpdate,
        0xca,
        "PSEUDO_EMBEDDING_UPDATE",
        Some("PSEUDO_EMBEDDING_UPDATE"),
    ),
    row(Opcode::IndirectCopy, 0xe7, "INDIRECT_COPY", Some("S4D4_IC")),
];

impl Opcode {
    /// Every opcode, in code order.
    pub const ALL: [Opcode; 7] = [
        Opcode::PoolBufferLoad,
        Opcode::Gather,
        Opcode::EmbeddingUpdate,
        Opcode::DmaMemcpy,
        Opcode::DmaIndirect,
        Opcode::PseudoEmbeddingUpdate,
        Opcode::IndirectCopy,
    ];

    /// This opcode's row of [`OPCODE_TABLE`].
    pub fn info(self) -> OpcodeInfo {
        // The variants are declared in table order, so the discriminant is the row
        // (test `table_is_complete`); seven variants index a seven-row array.
        OPCODE_TABLE[self as usize]
    }

    /// The opcode byte.
    pub fn code(self) -> u8 {
        self.info().code
    }

    /// The NEURON_ISA_TPB_OPCODE_* name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// Decodes an opcode byte.
    pub fn from_code(code: u8) -> Result<Opcode, Error> {
        OPCODE_TABLE
            .iter()
            .find(|r| r.code == code)
            .map(|r| r.opcode)
            .ok_or(Error::UnknownOpcode { opcode: code })
    }

    /// Whether the instruction runs on the POOL engine's active channels (partitions):
    /// POOL_BUFFER_LOAD, GATHER and INDIRECT_COPY. The others are DMA-level.
    pub fn uses_active_channels(self) -> bool {
        matches!(
            self,
            Opcode::PoolBufferLoad | Opcode::Gather | Opcode::IndirectCopy
        )
    }
}

impl std::fmt::Display for Opcode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:#04x} {}", self.code(), self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_complete() {
        for (i, op) in Opcode::ALL.into_iter().enumerate() {
            assert_eq!(OPCODE_TABLE[i].opcode, op);
            assert_eq!(Opcode::from_code(op.code()).unwrap(), op);
        }
        let codes: Vec<u8> = Opcode::ALL.iter().map(|o| o.code()).collect();
        assert_eq!(codes, vec![0x67, 0x68, 0x79, 0xb8, 0xbb, 0xca, 0xe7]);
    }

    #[test]
    fn struct_binding_is_the_seeds() {
        let binding: Vec<(u8, Option<&str>)> =
            OPCODE_TABLE.iter().map(|r| (r.code, r.operand)).collect();
        assert_eq!(
            binding,
            vec![
                (0x67, Some("POOL_BUFFER_LOAD")),
                (0x68, Some("S4D4_GT")),
                (0x79, None),
                (0xb8, Some("DMA_DIRECT2D")),
                (0xbb, Some("DMA_INDIRECT1D")),
                (0xca, Some("PSEUDO_EMBEDDING_UPDATE")),
                (0xe7, Some("S4D4_IC")),
            ]
        );
    }

    #[test]
    fn unknown_opcodes_are_rejected() {
        for code in [0x00u8, 0x66, 0x69, 0xe8, 0xff] {
            let e = Opcode::from_code(code).unwrap_err();
            assert!(matches!(e, Error::UnknownOpcode { opcode } if opcode == code));
            assert!(e.to_string().contains(&format!("{code:#04x}")), "{e}");
        }
    }

    #[test]
    fn display_and_channels() {
        assert_eq!(Opcode::IndirectCopy.to_string(), "0xe7 INDIRECT_COPY");
        let pool: Vec<Opcode> = Opcode::ALL
            .into_iter()
            .filter(|o| o.uses_active_channels())
            .collect();
        assert_eq!(
            pool,
            vec![Opcode::PoolBufferLoad, Opcode::Gather, Opcode::IndirectCopy]
        );
    }
}
