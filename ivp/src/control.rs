//! GSControl, the 16-bit SuperGather control word, its fields, and the three gather widths
//! (NX16, NX8U, N_2X32) with the staging control marker each derives from it.
//!
//! # GSControl\[15:0\]
//!
//! `{8'd0, elem_sz_fld[1:0], offst_sz_fld[1:0], operation_fld[3:0]}`:
//!
//! | bits  | field           | values |
//! |-------|-----------------|--------|
//! | 15:8  | zero            | must be 0 |
//! | 7:6   | `elem_sz_fld`   | 0, 1, 2 = 1, 2, 4-byte elements (3 reserved) |
//! | 5:4   | `offst_sz_fld`  | 0 = 16-bit offset lanes, 1 = 32-bit offset lanes (2, 3 reserved) |
//! | 3:0   | `operation_fld` | gathera 1, gatherd 2, mgatherd 3, scatter 4, scatterw 5, scatterinc 6 |
//!
//! `elem_sz_fld` is log2 of the element bytes (the seed's `{0,1,2} -> {1,2,4}`);
//! `offst_sz_fld` is log2 of the offset-lane bytes minus one (the project's rule, chosen
//! because it is the only log2 encoding that reproduces the seed's markers).
//!
//! # The staging control marker
//!
//! The A-phase `gathera` writes a per-width marker into the staging image. It is not a
//! table keyed by width: it is the GSControl word of that width's `gathera`, i.e.
//! `pack(operation_fld = 1, elem_sz_fld = log2(elem bytes), offst_sz_fld = log2(offset
//! bytes) - 1)`:
//!
//! | width  | elem bytes | offset lane | fields (e, o, op) | marker |
//! |--------|------------|-------------|-------------------|--------|
//! | NX16   | 2          | 16-bit      | (1, 0, 1)         | `0x41` |
//! | NX8U   | 1          | 16-bit      | (0, 0, 1)         | `0x01` |
//! | N_2X32 | 4          | 32-bit      | (2, 1, 1)         | `0x91` |

use crate::error::Error;
use crate::reg::LaneView;

/// The size of one gathered or scattered element in memory (GSControl `elem_sz_fld`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ElemSize {
    /// 1 byte (`elem_sz_fld` 0, NX8U).
    B1,
    /// 2 bytes (`elem_sz_fld` 1, NX16).
    B2,
    /// 4 bytes (`elem_sz_fld` 2, N_2X32).
    B4,
}

impl ElemSize {
    /// The element size in bytes: 1, 2 or 4.
    pub const fn bytes(self) -> u64 {
        match self {
            ElemSize::B1 => 1,
            ElemSize::B2 => 2,
            ElemSize::B4 => 4,
        }
    }

    /// The low-bits mask of a value of this size: `0xff`, `0xffff`, `0xffff_ffff`.
    pub const fn mask(self) -> u32 {
        match self {
            ElemSize::B1 => 0xff,
            ElemSize::B2 => 0xffff,
            ElemSize::B4 => u32::MAX,
        }
    }

    /// The `elem_sz_fld` code, log2 of the byte count.
    pub const fn fld(self) -> u8 {
        match self {
            ElemSize::B1 => 0,
            ElemSize::B2 => 1,
            ElemSize::B4 => 2,
        }
    }

    /// The size a byte count names, for adapters mapping a dtype width.
    pub fn from_bytes(bytes: u64) -> Result<ElemSize, Error> {
        match bytes {
            1 => Ok(ElemSize::B1),
            2 => Ok(ElemSize::B2),
            4 => Ok(ElemSize::B4),
            _ => Err(Error::ElemSize { bytes }),
        }
    }
}

/// The size of one offset lane in the offset register (GSControl `offst_sz_fld`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OffsetSize {
    /// 32 lanes of u16 offsets (`offst_sz_fld` 0; NX16 and NX8U, `xb_vecNx16U`).
    U16,
    /// 16 lanes of u32 offsets (`offst_sz_fld` 1; N_2X32).
    U32,
}

impl OffsetSize {
    /// The `offst_sz_fld` code, log2 of the lane bytes minus one.
    pub const fn fld(self) -> u8 {
        match self {
            OffsetSize::U16 => 0,
            OffsetSize::U32 => 1,
        }
    }
}

/// GSControl `operation_fld`: the six SuperGather operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GsOperation {
    /// A-phase: stage offsets and post lane addresses (`gathera*`).
    Gathera,
    /// D-phase: drain collected elements (`gatherd*`).
    Gatherd,
    /// D-phase with the GSEnable merge into the old register (`mgatherd`).
    Mgatherd,
    /// Indexed store (`scatter*`).
    Scatter,
    /// The scatter barrier (`scatterw`).
    Scatterw,
    /// Indexed read-modify-write +1 (`scatterinc*`).
    Scatterinc,
}

impl GsOperation {
    /// The `operation_fld` code: gathera 1 .. scatterinc 6.
    pub const fn code(self) -> u8 {
        match self {
            GsOperation::Gathera => 1,
            GsOperation::Gatherd => 2,
            GsOperation::Mgatherd => 3,
            GsOperation::Scatter => 4,
            GsOperation::Scatterw => 5,
            GsOperation::Scatterinc => 6,
        }
    }

    fn from_code(code: u8) -> Option<GsOperation> {
        Some(match code {
            1 => GsOperation::Gathera,
            2 => GsOperation::Gatherd,
            3 => GsOperation::Mgatherd,
            4 => GsOperation::Scatter,
            5 => GsOperation::Scatterw,
            6 => GsOperation::Scatterinc,
            _ => return None,
        })
    }
}

/// A decoded GSControl\[15:0\] word.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GsControl {
    /// `operation_fld[3:0]`.
    pub operation: GsOperation,
    /// `elem_sz_fld[7:6]`.
    pub elem_sz: ElemSize,
    /// `offst_sz_fld[5:4]`.
    pub offst_sz: OffsetSize,
}

impl GsControl {
    /// Packs the fields into `{8'd0, elem_sz_fld, offst_sz_fld, operation_fld}`.
    pub const fn pack(self) -> u16 {
        ((self.elem_sz.fld() as u16) << 6)
            | ((self.offst_sz.fld() as u16) << 4)
            | self.operation.code() as u16
    }

    /// Decodes a control word, rejecting set reserved bits and reserved field codes.
    pub fn unpack(raw: u16) -> Result<GsControl, Error> {
        if raw >> 8 != 0 {
            return Err(Error::GsControlReserved { raw });
        }
        let code = (raw & 0xf) as u8;
        let operation = GsOperation::from_code(code).ok_or(Error::GsOperation { raw, code })?;
        let offst_sz = match (raw >> 4) & 3 {
            0 => OffsetSize::U16,
            1 => OffsetSize::U32,
            fld => {
                return Err(Error::GsOffstSz {
                    raw,
                    fld: fld as u8,
                })
            }
        };
        let elem_sz = match (raw >> 6) & 3 {
            0 => ElemSize::B1,
            1 => ElemSize::B2,
            2 => ElemSize::B4,
            fld => {
                return Err(Error::GsElemSz {
                    raw,
                    fld: fld as u8,
                })
            }
        };
        Ok(GsControl {
            operation,
            elem_sz,
            offst_sz,
        })
    }
}

/// The three SuperGather datapath widths (the `nx16` / `nx8u` / `n_2x32` mnemonic suffix).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Width {
    /// NX16: 32 lanes of 16-bit elements, u16 offsets.
    Nx16,
    /// NX8U: 32 lanes of u8 elements zero-extended into 16-bit lanes, u16 offsets.
    Nx8u,
    /// N_2X32: 16 lanes of 32-bit elements, u32 offsets.
    N2x32,
}

impl Width {
    /// All three widths, for corpora and tables.
    pub const ALL: [Width; 3] = [Width::Nx16, Width::Nx8u, Width::N2x32];

    /// The lane count: 32, 32, 16.
    pub const fn lanes(self) -> usize {
        self.view().lanes()
    }

    /// The register lane geometry (NX8U lanes are 16-bit in the register).
    pub const fn view(self) -> LaneView {
        match self {
            Width::Nx16 | Width::Nx8u => LaneView::Nx16,
            Width::N2x32 => LaneView::N2x32,
        }
    }

    /// The memory element size: 2, 1, 4 bytes.
    pub const fn elem_sz(self) -> ElemSize {
        match self {
            Width::Nx16 => ElemSize::B2,
            Width::Nx8u => ElemSize::B1,
            Width::N2x32 => ElemSize::B4,
        }
    }

    /// The offset lane size: u16 for NX16 and NX8U, u32 for N_2X32.
    pub const fn offset_sz(self) -> OffsetSize {
        match self.view() {
            LaneView::N2x32 => OffsetSize::U32,
            _ => OffsetSize::U16,
        }
    }

    /// The GSControl word this width issues for `operation`.
    pub const fn control(self, operation: GsOperation) -> GsControl {
        GsControl {
            operation,
            elem_sz: self.elem_sz(),
            offst_sz: self.offset_sz(),
        }
    }

    /// The staging control marker gathera writes: its own GSControl word (module docs).
    pub const fn staging_marker(self) -> u16 {
        self.control(GsOperation::Gathera).pack()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn staging_markers_are_the_seed_values() {
        assert_eq!(Width::Nx16.staging_marker(), 0x41);
        assert_eq!(Width::Nx8u.staging_marker(), 0x01);
        assert_eq!(Width::N2x32.staging_marker(), 0x91);
    }

    #[test]
    fn pack_places_each_field() {
        let c = GsControl {
            operation: GsOperation::Scatterinc,
            elem_sz: ElemSize::B4,
            offst_sz: OffsetSize::U16,
        };
        assert_eq!(c.pack(), (2 << 6) | 6);
        assert_eq!(Width::Nx16.control(GsOperation::Scatter).pack(), 0x44);
    }

    #[test]
    fn unpack_rejects_each_reserved_encoding() {
        assert_eq!(
            GsControl::unpack(0x141),
            Err(Error::GsControlReserved { raw: 0x141 })
        );
        assert_eq!(
            GsControl::unpack(0x40),
            Err(Error::GsOperation { raw: 0x40, code: 0 })
        );
        assert_eq!(
            GsControl::unpack(0x47),
            Err(Error::GsOperation { raw: 0x47, code: 7 })
        );
        assert_eq!(
            GsControl::unpack(0xc1),
            Err(Error::GsElemSz { raw: 0xc1, fld: 3 })
        );
        assert_eq!(
            GsControl::unpack(0x21),
            Err(Error::GsOffstSz { raw: 0x21, fld: 2 })
        );
    }

    #[test]
    fn elem_size_from_bytes() {
        assert_eq!(ElemSize::from_bytes(2), Ok(ElemSize::B2));
        assert_eq!(ElemSize::from_bytes(8), Err(Error::ElemSize { bytes: 8 }));
        assert_eq!(ElemSize::B1.mask(), 0xff);
    }

    fn any_control() -> impl Strategy<Value = GsControl> {
        let op = prop::sample::select(vec![
            GsOperation::Gathera,
            GsOperation::Gatherd,
            GsOperation::Mgatherd,
            GsOperation::Scatter,
            GsOperation::Scatterw,
            GsOperation::Scatterinc,
        ]);
        let e = prop::sample::select(vec![ElemSize::B1, ElemSize::B2, ElemSize::B4]);
        let o = prop::sample::select(vec![OffsetSize::U16, OffsetSize::U32]);
        (op, e, o).prop_map(|(operation, elem_sz, offst_sz)| GsControl {
            operation,
            elem_sz,
            offst_sz,
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn pack_unpack_round_trip(c in any_control()) {
            prop_assert_eq!(GsControl::unpack(c.pack()), Ok(c));
        }

        #[test]
        fn unpack_pack_round_trip(raw in any::<u16>()) {
            let closed_form_valid = raw >> 8 == 0
                && (1..=6).contains(&(raw & 0xf))
                && (raw >> 4) & 3 <= 1
                && (raw >> 6) & 3 <= 2;
            match GsControl::unpack(raw) {
                Ok(c) => {
                    prop_assert!(closed_form_valid);
                    prop_assert_eq!(c.pack(), raw);
                }
                Err(_) => prop_assert!(!closed_form_valid),
            }
        }
    }
}
