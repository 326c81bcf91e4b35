//! POOL_BUFFER_LOAD 0x67: loads up to 512 elements per active channel into the
//! Pool_Buffer that a following GATHER 0x68 reads. The struct layout is the project's own
//! (the seed names the opcode and the 512-element capacity, not the struct).

use dma::Dtype;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{InstFlags, InstHeader, Tensor4d};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// The POOL_BUFFER_LOAD operand struct (64 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct PoolBufferLoad {
    header: InstHeader,
    /// The elements to load, per active channel.
    src_mem_pattern: Tensor4d,
    dtype: u8,
    reserved0: [u8; 3],
    /// The table index of the first loaded element (`pool_buffer_start_index`).
    start_index: U32,
    reserved1: [u8; 32],
}
const _: () = assert!(size_of::<PoolBufferLoad>() == 64);

impl PoolBufferLoad {
    /// Loads `src_mem_pattern` (elements of `dtype`) on `num_active_channels` channels
    /// starting at the pattern's partition; window start index 0, no flags.
    pub fn new(src_mem_pattern: Tensor4d, dtype: Dtype, num_active_channels: u8) -> Self {
        PoolBufferLoad {
            header: InstHeader::new(Opcode::PoolBufferLoad, InstFlags::NONE, num_active_channels),
            src_mem_pattern,
            dtype: dtype.code(),
            reserved0: [0; 3],
            start_index: U32::new(0),
            reserved1: [0; 32],
        }
    }

    /// Sets `inst_flags` (TILE).
    pub fn with_inst_flags(mut self, flags: InstFlags) -> Self {
        self.header = InstHeader::new(
            Opcode::PoolBufferLoad,
            flags,
            self.header.num_active_channels(),
        );
        self
    }

    /// Sets the table index of the first loaded element (a multiple of 512).
    pub fn with_start_index(mut self, start_index: u32) -> Self {
        self.start_index = U32::new(start_index);
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// The elements loaded per channel.
    pub fn src_mem_pattern(&self) -> Tensor4d {
        self.src_mem_pattern
    }

    /// The element dtype.
    pub fn dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("dtype"), self.dtype)
    }

    /// The table index of the first loaded element: index `i` hits the buffer when
    /// `i & !511 == start_index`, at slot `i & 511`.
    pub fn start_index(&self) -> u32 {
        self.start_index.get()
    }
}

impl Operand for PoolBufferLoad {
    const OPCODE: Opcode = Opcode::PoolBufferLoad;
    const NAME: &'static str = "POOL_BUFFER_LOAD";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        self.src_mem_pattern
            .check_start(Self::at("src_mem_pattern.start_addr"))?;
        self.dtype()?;
        rule::reserved_zero(Self::at("reserved0"), &self.reserved0)?;
        rule::reserved_zero(Self::at("reserved1"), &self.reserved1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;
    use dma::{Addr4, Space};

    #[test]
    fn layout_is_pinned() {
        pinned!(
            PoolBufferLoad,
            "POOL_BUFFER_LOAD",
            [
                header,
                src_mem_pattern,
                dtype,
                reserved0,
                start_index,
                reserved1
            ]
        );
    }

    #[test]
    fn builder_and_getters() {
        let a = Addr4::encode(Space::Sbuf, 4, 128).unwrap();
        let p = PoolBufferLoad::new(Tensor4d::contiguous(a, 512), Dtype::F32, 8)
            .with_inst_flags(InstFlags::TILE)
            .with_start_index(1024);
        assert_eq!(p.dtype().unwrap(), Dtype::F32);
        assert_eq!(p.start_index(), 1024);
        assert_eq!(p.header().num_active_channels(), 8);
        assert!(p.header().inst_flags().tile());
        assert_eq!(p.src_mem_pattern().num_elem(), [512, 1, 1, 1]);
        let b = p.encode();
        assert_eq!(&b[..4], &[0x67, 1, 8, 0]);
        assert_eq!(b[24], 0xa);
        assert_eq!(&b[28..32], &1024u32.to_le_bytes());
    }

    #[test]
    fn decode_rejects_bad_dtype_and_reserved() {
        let a = Addr4::encode(Space::Sbuf, 0, 0).unwrap();
        let good = PoolBufferLoad::new(Tensor4d::contiguous(a, 4), Dtype::U8, 1).encode();
        assert_eq!(
            PoolBufferLoad::decode_from(&good).unwrap().dtype().unwrap(),
            Dtype::U8
        );
        let mut b = good;
        b[24] = 0xc;
        let e = PoolBufferLoad::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Field {
                    source: dma::Error::UnknownDtypeCode { code: 0xc },
                    ..
                }
            ),
            "{e}"
        );
        let mut b = good;
        b[40] = 1;
        let e = PoolBufferLoad::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ReservedByte {
                    index: 8,
                    value: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.field().unwrap().to_string(), "POOL_BUFFER_LOAD.reserved1");
        let mut b = good;
        b[7] = 0x80; // start_addr space code 2
        let e = PoolBufferLoad::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::Field {
                    source: dma::Error::Addr4Reserved { code: 2, .. },
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            PoolBufferLoad::decode_from(&good[..63]),
            Err(Error::InstructionLength { len: 63 })
        ));
    }
}
