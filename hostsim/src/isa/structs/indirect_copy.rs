//! S4D4_IC, the operand struct of INDIRECT_COPY 0xe7 (NKI `local_gather`): each of up to
//! 4096 indices copies `src_num_elem_per_idx` contiguous elements of the source buffer
//! row to the destination, on each 16-partition core independently.

use dma::Dtype;
use zerocopy::little_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::Operand;
use crate::error::Error;
use crate::isa::fields::{IcMode, Indirect, InstFlags, InstHeader, MemPattern4d, Tensor4d};
use crate::isa::opcode::Opcode;
use crate::isa::rule;

/// NEURON_ISA_TPB_S4D4_IC_STRUCT (64 bytes).
#[derive(
    FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned, Clone, Copy, Debug, PartialEq, Eq,
)]
#[repr(C)]
pub struct S4d4Ic {
    header: InstHeader,
    /// MEM_PATTERN4D: INDIRECT in the Gather sub-mode.
    src: MemPattern4d,
    /// MEM_PATTERN4D: TENSOR4D in the Gather sub-mode.
    dst: MemPattern4d,
    in_dtype: u8,
    out_dtype: u8,
    src_num_elem_per_idx: u8,
    dst_num_elem_per_idx: u8,
    /// Elements in each partition row of the source buffer (the gather bound).
    src_buffer_size: U32,
    dst_buffer_size: U32,
    index_dtype: u8,
    mode: u8,
    reserved: [u8; 6],
}
const _: () = assert!(size_of::<S4d4Ic>() == 64);

impl S4d4Ic {
    /// The Gather sub-mode: u16 indices and source rows of `src_buffer_size` elements
    /// described by `src`, copied in runs of `num_elem_per_idx` to `dst`; `dtype` for
    /// both sides (no cast); dst fields 0.
    pub fn gather(
        src: Indirect,
        dst: Tensor4d,
        dtype: Dtype,
        num_elem_per_idx: u8,
        src_buffer_size: u32,
        num_active_channels: u8,
    ) -> Self {
        S4d4Ic {
            header: InstHeader::new(Opcode::IndirectCopy, InstFlags::NONE, num_active_channels),
            src: MemPattern4d::from_indirect(src),
            dst: MemPattern4d::from_tensor(dst),
            in_dtype: dtype.code(),
            out_dtype: dtype.code(),
            src_num_elem_per_idx: num_elem_per_idx,
            dst_num_elem_per_idx: 0,
            src_buffer_size: U32::new(src_buffer_size),
            dst_buffer_size: U32::new(0),
            index_dtype: Dtype::U16.code(),
            mode: IcMode::Gather.code(),
            reserved: [0; 6],
        }
    }

    /// Sets `inst_flags` (TILE).
    pub fn with_inst_flags(mut self, flags: InstFlags) -> Self {
        self.header = InstHeader::new(
            Opcode::IndirectCopy,
            flags,
            self.header.num_active_channels(),
        );
        self
    }

    /// Sets the fields the Gather sub-mode fixes (sub-mode and dst fields), so callers can
    /// build what validation must reject. The union members keep their bytes.
    pub fn with_raw_mode(
        mut self,
        mode: IcMode,
        dst_num_elem_per_idx: u8,
        dst_buffer_size: u32,
    ) -> Self {
        self.mode = mode.code();
        self.dst_num_elem_per_idx = dst_num_elem_per_idx;
        self.dst_buffer_size = U32::new(dst_buffer_size);
        self
    }

    /// Sets both union members as raw patterns (for the sub-modes validation rejects).
    pub fn with_patterns(mut self, src: MemPattern4d, dst: MemPattern4d) -> Self {
        self.src = src;
        self.dst = dst;
        self
    }

    /// Sets `in_dtype`, `out_dtype` and `index_dtype` independently.
    pub fn with_dtypes(mut self, in_dtype: Dtype, out_dtype: Dtype, index_dtype: Dtype) -> Self {
        self.in_dtype = in_dtype.code();
        self.out_dtype = out_dtype.code();
        self.index_dtype = index_dtype.code();
        self
    }

    /// The instruction header.
    pub fn header(&self) -> InstHeader {
        self.header
    }

    /// The `src` union (INDIRECT in the Gather sub-mode: `src.i.p`).
    pub fn src(&self) -> MemPattern4d {
        self.src
    }

    /// The `dst` union (TENSOR4D in the Gather sub-mode: `dst.t`).
    pub fn dst(&self) -> MemPattern4d {
        self.dst
    }

    /// `in_dtype`: the source element dtype.
    pub fn in_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("in_dtype"), self.in_dtype)
    }

    /// `out_dtype`: the destination element dtype.
    pub fn out_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("out_dtype"), self.out_dtype)
    }

    /// `index_dtype`: the index element dtype.
    pub fn index_dtype(&self) -> Result<Dtype, Error> {
        rule::dtype(Self::at("index_dtype"), self.index_dtype)
    }

    /// `src_num_elem_per_idx`: elements copied per index.
    pub fn src_num_elem_per_idx(&self) -> u8 {
        self.src_num_elem_per_idx
    }

    /// `dst_num_elem_per_idx` (0 in the Gather sub-mode).
    pub fn dst_num_elem_per_idx(&self) -> u8 {
        self.dst_num_elem_per_idx
    }

    /// `src_buffer_size`: elements per source partition row.
    pub fn src_buffer_size(&self) -> u32 {
        self.src_buffer_size.get()
    }

    /// `dst_buffer_size` (0 in the Gather sub-mode).
    pub fn dst_buffer_size(&self) -> u32 {
        self.dst_buffer_size.get()
    }

    /// The sub-mode.
    pub fn mode(&self) -> Result<IcMode, Error> {
        rule::code(Self::at("mode"), self.mode, IcMode::from_code)
    }
}

impl Operand for S4d4Ic {
    const OPCODE: Opcode = Opcode::IndirectCopy;
    const NAME: &'static str = "S4D4_IC";

    fn check_decode(&self) -> Result<(), Error> {
        self.header.check(Self::NAME, Self::OPCODE)?;
        let mode = self.mode()?;
        check_member(
            self.src,
            mode.src_indirect(),
            [
                "src.i",
                "src.i.p.index_addr",
                "src.i.p.data_addr",
                "src.t.start_addr",
            ],
        )?;
        check_member(
            self.dst,
            mode.dst_indirect(),
            [
                "dst.i",
                "dst.i.p.index_addr",
                "dst.i.p.data_addr",
                "dst.t.start_addr",
            ],
        )?;
        self.in_dtype()?;
        self.out_dtype()?;
        self.index_dtype()?;
        rule::reserved_zero(Self::at("reserved"), &self.reserved)
    }
}

/// Decode rules of one union member: an INDIRECT's reserved bytes and padding are zero and
/// its two ADDR4s decode; a TENSOR4D's ADDR4 decodes. `names` are the field paths of the
/// member, its index and data addresses, and the tensor start address.
fn check_member(m: MemPattern4d, indirect: bool, names: [&'static str; 4]) -> Result<(), Error> {
    let [member, index, data, start] = names;
    if indirect {
        m.check_indirect(S4d4Ic::NAME, member)?;
        rule::addr4(S4d4Ic::at(index), m.indirect().index_addr())?;
        rule::addr4(S4d4Ic::at(data), m.indirect().data_addr()).map(drop)
    } else {
        m.tensor().check_start(S4d4Ic::at(start))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::layout::pinned;
    use crate::isa::Rule;
    use dma::{Addr4, Space};

    fn sample() -> S4d4Ic {
        let idx = Addr4::encode(Space::Sbuf, 0, 0).unwrap();
        let data = Addr4::encode(Space::Sbuf, 0, 0x1000).unwrap();
        let out = Addr4::encode(Space::Sbuf, 0, 0x2000).unwrap();
        S4d4Ic::gather(
            Indirect::new(idx, data, 128),
            Tensor4d::contiguous(out, 128),
            Dtype::F16,
            4,
            1024,
            32,
        )
    }

    #[test]
    fn layout_is_pinned() {
        pinned!(
            S4d4Ic,
            "S4D4_IC",
            [
                header,
                src,
                dst,
                in_dtype,
                out_dtype,
                src_num_elem_per_idx,
                dst_num_elem_per_idx,
                src_buffer_size,
                dst_buffer_size,
                index_dtype,
                mode,
                reserved,
            ]
        );
    }

    #[test]
    fn gather_builder_and_getters() {
        let ic = sample();
        assert_eq!(ic.mode().unwrap(), IcMode::Gather);
        assert_eq!(ic.src().indirect().num_elem(), 128);
        assert_eq!(ic.dst().tensor().num_elem(), [128, 1, 1, 1]);
        assert_eq!(
            (ic.in_dtype().unwrap(), ic.out_dtype().unwrap()),
            (Dtype::F16, Dtype::F16)
        );
        assert_eq!(ic.index_dtype().unwrap(), Dtype::U16);
        assert_eq!(
            (ic.src_num_elem_per_idx(), ic.dst_num_elem_per_idx()),
            (4, 0)
        );
        assert_eq!((ic.src_buffer_size(), ic.dst_buffer_size()), (1024, 0));
        let b = ic.encode();
        assert_eq!(&b[..4], &[0xe7, 0, 32, 0]);
        assert_eq!(&b[44..48], &[0x7, 0x7, 4, 0]);
        assert_eq!(&b[56..58], &[0x5, 0]);
        assert_eq!(S4d4Ic::decode_from(&b).unwrap(), ic);
        let raw =
            ic.with_raw_mode(IcMode::Scatter, 2, 8)
                .with_dtypes(Dtype::F32, Dtype::I32, Dtype::U32);
        assert_eq!(raw.mode().unwrap(), IcMode::Scatter);
        assert_eq!((raw.dst_num_elem_per_idx(), raw.dst_buffer_size()), (2, 8));
        assert_eq!(raw.index_dtype().unwrap(), Dtype::U32);
    }

    #[test]
    fn decode_rejects_indirect_padding_and_bad_mode() {
        let good = sample().encode();
        let mut b = good;
        b[4 + 10] = 1; // src.i.p.reserved[0]
        let e = S4d4Ic::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ReservedByte {
                    index: 0,
                    value: 1,
                    ..
                }
            ),
            "{e}"
        );
        assert_eq!(e.field().unwrap().to_string(), "S4D4_IC.src.i");
        let mut b = good;
        b[4 + 19] = 7; // INDIRECT20B padding
        let e = S4d4Ic::decode_from(&b).unwrap_err();
        assert!(
            matches!(
                e,
                Error::ReservedByte {
                    index: 7,
                    value: 7,
                    ..
                }
            ),
            "{e}"
        );
        let mut b = good;
        b[57] = 3;
        let e = S4d4Ic::decode_from(&b).unwrap_err();
        assert_eq!(
            (e.rule(), e.field().unwrap().to_string()),
            (Some(Rule::EnumValue), "S4D4_IC.mode".into())
        );
        let mut b = good;
        b[4 + 7] = 0x80; // src.i.p.data_addr space code 2
        let e = S4d4Ic::decode_from(&b).unwrap_err();
        assert_eq!(e.field().unwrap().to_string(), "S4D4_IC.src.i.p.data_addr");
        let mut b = good;
        b[56] = 0x1;
        let e = S4d4Ic::decode_from(&b).unwrap_err();
        assert_eq!(e.field().unwrap().to_string(), "S4D4_IC.index_dtype");
    }
}
