//! S4D4_GT, the operand struct of GATHER 0x68: for every index of `src_mem_pattern`, write
//! the Pool_Buffer element it names to `dst_mem_pattern`, or apply `index_miss_behavior`.

use dma::Dtype;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{IndexMissBehavior, InstFlags, InstHeader, Tensor4d};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// NEURON_ISA_TPB_S4D4_GT_STRUCT (64 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct S4d4Gt {
    header: InstHeader,
    /// The index stream (elements of `in_dtype`).
    src_mem_pattern: Tensor4d,
    /// Where gathered elements (of `out_dtype`) go.
    dst_mem_pattern: Tensor4d,
    in_dtype: u8,
    out_dtype: u8,
    index_miss_behavior: u8,
    free_pool_buffer: u8,
    /// The miss fill value's bits; validation rejects bits above `out_dtype`'s width
    /// (Rule::ImmediateWidth), so the value is the element as written.
    immediate: U32,
    reserved: [u8; 12],
}
const _: () = assert!(size_of::<S4d4Gt>() == 64);

impl S4d4Gt {
    /// Gathers with indices (`in_dtype`) read through `src` into `dst` (`out_dtype`) on
    /// `num_active_channels` channels; misses write immediate 0; the buffer is kept.
    pub fn new(
        src: Tensor4d,
        dst: Tensor4d,
        in_dtype: Dtype,
        out_dtype: Dtype,
        num_active_channels: u8,
    ) -> Self {
        S4d4Gt {
            header: InstHeader::new(Opcode::Gather, InstFlags::NONE, num_active_channels),
            src_mem_pattern: src,
            dst_mem_pattern: dst,
            in_dtype: in_dtype.code(),
            out_dtype: out_dtype.code(),
            index_miss_behavior: IndexMissBehavior::ImmediateWrite.code(),
            free_pool_buffer: 0,
            immediate: U32::new(0),
            reserved: [0; 12],
        }
    }

    /// Sets `inst_flags` (TILE).
    pub fn with_inst_flags(mut self, flags: InstFlags) -> Self {
        self.header = InstHeader::new(Opcode::Gather, flags, self.header.num_active_channels());
        self
    }

    /// Sets `index_miss_behavior`.
    pub fn with_index_miss_behavior(mut self, miss: IndexMissBehavior) -> Self {
        self.index_miss_behavior = miss.code();
        self
    }

    /// Sets the `immediate` fill bits (must fit `out_dtype`).
    pub fn with_immediate(mut self, bits: u32) -> Self {
        self.immediate = U32::new(bits);
        self
    }

    /// Sets `free_pool_buffer` (free the Pool_Buffer after this gather).
    pub fn with_free_pool_buffer(mut self, free: bool) -> Self {
        self.free_pool_buffer = u8::from(free);
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// `src_mem_pattern`: the indices.
    pub fn src_mem_pattern(&self) -> Tensor4d {
        self.src_mem_pattern
    }

    /// `dst_mem_pattern`: the gathered elements.
    pub fn dst_mem_pattern(&self) -> Tensor4d {
        self.dst_mem_pattern
    }

    /// `in_dtype`: the index dtype.
    pub fn in_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("in_dtype"), self.in_dtype)
    }

    /// `out_dtype`: the element dtype (what POOL_BUFFER_LOAD loaded; no cast).
    pub fn out_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("out_dtype"), self.out_dtype)
    }

    /// `index_miss_behavior`.
    pub fn index_miss_behavior(&self) -> Result<IndexMissBehavior, Error> {
        rule::code(
            Self::at("index_miss_behavior"),
            self.index_miss_behavior,
            IndexMissBehavior::from_code,
        )
    }

    /// `immediate`: the miss fill bits.
    pub fn immediate(&self) -> u32 {
        self.immediate.get()
    }

    /// `free_pool_buffer`; a byte other than 0/1 is rejected at decode and reads as set.
    pub fn free_pool_buffer(&self) -> bool {
        self.free_pool_buffer != 0
    }
}

impl Operand for S4d4Gt {
    const OPCODE: Opcode = Opcode::Gather;
    const NAME: &'static str = "S4D4_GT";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        self.src_mem_pattern
            .check_start(Self::at("src_mem_pattern.start_addr"))?;
        self.dst_mem_pattern
            .check_start(Self::at("dst_mem_pattern.start_addr"))?;
        self.in_dtype()?;
        self.out_dtype()?;
        self.index_miss_behavior()?;
        rule::boolean(Self::at("free_pool_buffer"), self.free_pool_buffer)?;
        rule::reserved_zero(Self::at("reserved"), &self.reserved)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;
    use crate::isa::Rule;
    use dma::{Addr4, Space};

    fn sample() -> S4d4Gt {
        let i = Addr4::encode(Space::Sbuf, 0, 0x100).unwrap();
        let o = Addr4::encode(Space::Psum, 0, 0).unwrap();
        S4d4Gt::new(
            Tensor4d::contiguous(i, 64),
            Tensor4d::contiguous(o, 64),
            Dtype::U32,
            Dtype::Bf16,
            16,
        )
    }

    #[test]
    fn layout_is_pinned() {
        pinned!(
            S4d4Gt,
            "S4D4_GT",
            [
                header,
                src_mem_pattern,
                dst_mem_pattern,
                in_dtype,
                out_dtype,
                index_miss_behavior,
                free_pool_buffer,
                immediate,
                reserved,
            ]
        );
    }

    #[test]
    fn builder_and_getters() {
        let g = sample()
            .with_index_miss_behavior(IndexMissBehavior::SkipWrite)
            .with_immediate(0x3f80)
            .with_free_pool_buffer(true);
        assert_eq!(g.in_dtype().unwrap(), Dtype::U32);
        assert_eq!(g.out_dtype().unwrap(), Dtype::Bf16);
        assert_eq!(
            g.index_miss_behavior().unwrap(),
            IndexMissBehavior::SkipWrite
        );
        assert_eq!(g.immediate(), 0x3f80);
        assert!(g.free_pool_buffer());
        let b = g.encode();
        assert_eq!(&b[..4], &[0x68, 0, 16, 0]);
        assert_eq!(&b[44..52], &[0x9, 0x6, 1, 1, 0x80, 0x3f, 0, 0]);
        assert_eq!(S4d4Gt::decode_from(&b).unwrap(), g);
    }

    #[test]
    fn decode_rejects_each_bad_code() {
        let good = sample().encode();
        let mut b = good;
        b[46] = 2;
        let e = S4d4Gt::decode_from(&b).unwrap_err();
        assert_eq!(
            (e.rule(), e.field().unwrap().to_string()),
            (Some(Rule::EnumValue), "S4D4_GT.index_miss_behavior".into())
        );
        let mut b = good;
        b[47] = 2;
        let e = S4d4Gt::decode_from(&b).unwrap_err();
        assert_eq!(
            e.to_string(),
            "S4D4_GT.free_pool_buffer = 2: a boolean field must be 0 or 1"
        );
        let mut b = good;
        b[45] = 0;
        let e = S4d4Gt::decode_from(&b).unwrap_err();
        assert_eq!(e.field().unwrap().to_string(), "S4D4_GT.out_dtype");
        let mut b = good;
        b[63] = 0xff;
        let e = S4d4Gt::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ReservedByte {
                    index: 11,
                    value: 0xff,
                    ..
                }
            ),
            "{e}"
        );
        let mut b = good;
        b[27] = 0xc0; // dst start_addr space code 3
        let e = S4d4Gt::decode_from(&b).unwrap_err();
        assert_eq!(
            e.field().unwrap().to_string(),
            "S4D4_GT.dst_mem_pattern.start_addr"
        );
    }
}
