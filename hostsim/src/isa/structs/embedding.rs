//! PSEUDO_EMBEDDING_UPDATE, the operand struct of 0xca (the compiler form of the raw
//! EMBEDDING_UPDATE 0x79): for each of `sequence_length` u32 indices, reduce one data row
//! into `table[index]` with CCE_OP; indices at or past the row count are skipped.
//!
//! Row `i` of the data is `embed_entry_num_elements` elements at
//! `embed_data_addr + i * embed_entry_num_elements * dtype size`; table row `r` starts at
//! `embedding_table_base_addr + r * embed_entry_stride_bytes`.

use dma::{Addr4, CceOp, Dtype, FabricAddr};
use zerocopy::little_endian::{U16, U32, U64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{InstFlags, InstHeader};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// NEURON_ISA_TPB_PSEUDO_EMBEDDING_UPDATE_STRUCT (64 bytes; `sequence_length` at 52).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct PseudoEmbeddingUpdate {
    header: InstHeader,
    cce_op: u8,
    dtype: u8,
    index_dtype: u8,
    reserved0: u8,
    /// ADDR8: the table's fabric address.
    embedding_table_base_addr: U64,
    /// ADDR4 of the `sequence_length` indices.
    embed_index_addr: U32,
    /// ADDR4 of the `sequence_length` data rows.
    embed_data_addr: U32,
    embedding_table_num_entries: U32,
    embed_entry_stride_bytes: U32,
    embed_entry_num_elements: U32,
    /// The DMA queues the expansion may use.
    eng_mask: U16,
    reserved1: [u8; 14],
    sequence_length: U32,
    reserved2: [u8; 8],
}
const _: () = assert!(size_of::<PseudoEmbeddingUpdate>() == 64);

/// The embedding table an update reduces into, for the constructor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmbeddingTable {
    /// `embedding_table_base_addr`.
    pub base_addr: FabricAddr,
    /// `embedding_table_num_entries`: rows in the table (the index bound).
    pub num_entries: u32,
    /// `embed_entry_stride_bytes`: bytes between rows.
    pub stride_bytes: u32,
    /// `embed_entry_num_elements`: elements per row.
    pub num_elements: u32,
}

impl PseudoEmbeddingUpdate {
    /// Reduces `sequence_length` rows at `data_addr` into `table` rows named by the u32
    /// indices at `index_addr`, element dtype `dtype`; every DMA queue enabled.
    pub fn new(
        table: EmbeddingTable,
        index_addr: Addr4,
        data_addr: Addr4,
        sequence_length: u32,
        dtype: Dtype,
        cce_op: CceOp,
    ) -> Self {
        PseudoEmbeddingUpdate {
            header: InstHeader::new(Opcode::PseudoEmbeddingUpdate, InstFlags::NONE, 0),
            cce_op: cce_op.code(),
            dtype: dtype.code(),
            index_dtype: Dtype::U32.code(),
            reserved0: 0,
            embedding_table_base_addr: U64::new(table.base_addr.0),
            embed_index_addr: U32::new(index_addr.0),
            embed_data_addr: U32::new(data_addr.0),
            embedding_table_num_entries: U32::new(table.num_entries),
            embed_entry_stride_bytes: U32::new(table.stride_bytes),
            embed_entry_num_elements: U32::new(table.num_elements),
            eng_mask: U16::new(0xffff),
            reserved1: [0; 14],
            sequence_length: U32::new(sequence_length),
            reserved2: [0; 8],
        }
    }

    /// Sets `eng_mask`.
    pub fn with_eng_mask(mut self, eng_mask: u16) -> Self {
        self.eng_mask = U16::new(eng_mask);
        self
    }

    /// Sets `index_dtype` (only UINT32 is valid).
    pub fn with_index_dtype(mut self, index_dtype: Dtype) -> Self {
        self.index_dtype = index_dtype.code();
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// CCE_OP (code 1, multiply, is rejected).
    pub fn cce_op(&self) -> Result<CceOp, Error> {
        CceOp::from_code(self.cce_op).map_err(rule::dma_at(Self::at("cce_op")))
    }

    /// The table and data element dtype.
    pub fn dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("dtype"), self.dtype)
    }

    /// The index dtype.
    pub fn index_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("index_dtype"), self.index_dtype)
    }

    /// The table fields.
    pub fn table(&self) -> EmbeddingTable {
        EmbeddingTable {
            base_addr: FabricAddr(self.embedding_table_base_addr.get()),
            num_entries: self.embedding_table_num_entries.get(),
            stride_bytes: self.embed_entry_stride_bytes.get(),
            num_elements: self.embed_entry_num_elements.get(),
        }
    }

    /// `embed_index_addr` (ADDR4).
    pub fn embed_index_addr(&self) -> Addr4 {
        Addr4(self.embed_index_addr.get())
    }

    /// `embed_data_addr` (ADDR4).
    pub fn embed_data_addr(&self) -> Addr4 {
        Addr4(self.embed_data_addr.get())
    }

    /// `sequence_length`: the number of indices (and data rows).
    pub fn sequence_length(&self) -> u32 {
        self.sequence_length.get()
    }

    /// `eng_mask`.
    pub fn eng_mask(&self) -> u16 {
        self.eng_mask.get()
    }
}

impl Operand for PseudoEmbeddingUpdate {
    const OPCODE: Opcode = Opcode::PseudoEmbeddingUpdate;
    const NAME: &'static str = "PSEUDO_EMBEDDING_UPDATE";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        self.cce_op()?;
        self.dtype()?;
        self.index_dtype()?;
        rule::addr4(Self::at("embed_index_addr"), self.embed_index_addr())?;
        rule::addr4(Self::at("embed_data_addr"), self.embed_data_addr())?;
        rule::reserved_zero(Self::at("reserved0"), &[self.reserved0])?;
        rule::reserved_zero(Self::at("reserved1"), &self.reserved1)?;
        rule::reserved_zero(Self::at("reserved2"), &self.reserved2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;
    use dma::Space;

    fn sample() -> PseudoEmbeddingUpdate {
        let table = EmbeddingTable {
            base_addr: FabricAddr(0x4000),
            num_entries: 1000,
            stride_bytes: 256,
            num_elements: 64,
        };
        let idx = Addr4::encode(Space::Sbuf, 3, 0).unwrap();
        let data = Addr4::encode(Space::Sbuf, 3, 0x400).unwrap();
        PseudoEmbeddingUpdate::new(table, idx, data, 77, Dtype::F32, CceOp::Max)
    }

    #[test]
    fn layout_is_pinned() {
        pinned!(
            PseudoEmbeddingUpdate,
            "PSEUDO_EMBEDDING_UPDATE",
            [
                header,
                cce_op,
                dtype,
                index_dtype,
                reserved0,
                embedding_table_base_addr,
                embed_index_addr,
                embed_data_addr,
                embedding_table_num_entries,
                embed_entry_stride_bytes,
                embed_entry_num_elements,
                eng_mask,
                reserved1,
                sequence_length,
                reserved2,
            ]
        );
        assert_eq!(
            core::mem::offset_of!(PseudoEmbeddingUpdate, sequence_length),
            52
        );
    }

    #[test]
    fn builder_and_getters() {
        let e = sample().with_eng_mask(3);
        assert_eq!(e.cce_op().unwrap(), CceOp::Max);
        assert_eq!(
            (e.dtype().unwrap(), e.index_dtype().unwrap()),
            (Dtype::F32, Dtype::U32)
        );
        assert_eq!(e.table().num_entries, 1000);
        assert_eq!(e.table().base_addr, FabricAddr(0x4000));
        assert_eq!((e.sequence_length(), e.eng_mask()), (77, 3));
        assert_eq!(
            e.embed_data_addr(),
            Addr4::encode(Space::Sbuf, 3, 0x400).unwrap()
        );
        let b = e.encode();
        assert_eq!(&b[..8], &[0xca, 0, 0, 0, 2, 0xa, 0x9, 0]);
        assert_eq!(&b[52..56], &77u32.to_le_bytes());
        assert_eq!(PseudoEmbeddingUpdate::decode_from(&b).unwrap(), e);
        assert_eq!(
            e.with_index_dtype(Dtype::U16).index_dtype().unwrap(),
            Dtype::U16
        );
    }

    #[test]
    fn decode_rejects_cce_op_1_and_reserved() {
        let good = sample().encode();
        let mut b = good;
        b[4] = 1; // CCE_OP multiply is commented out in the header
        let e = PseudoEmbeddingUpdate::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Field {
                    source: dma::Error::UnknownCceOp { code: 1 },
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(
            e.field().unwrap().to_string(),
            "PSEUDO_EMBEDDING_UPDATE.cce_op"
        );
        for (byte, field) in [(7, "reserved0"), (40, "reserved1"), (60, "reserved2")] {
            let mut b = good;
            b[byte] = 0x11;
            let e = PseudoEmbeddingUpdate::decode_from(&b).unwrap_err();
            assert_eq!(e.field().unwrap().field, field);
        }
    }
}
