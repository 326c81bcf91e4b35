//! Element dtypes and their ISA codes, in one table.
//!
//! UINT8 = 0x3, UINT16 = 0x5 and UINT32 = 0x9 are the seed's values (seed 000 section 8);
//! every other code is the project's own choice, made once here and used by every crate.
//! I64 (0xb, 8 bytes) exists for NKI's int64 `scalar_offset` tiles and DMA copies and casts;
//! the POOL engine's instructions take 1-, 2- and 4-byte elements only (their validators
//! refuse it).

use crate::error::Error;

/// An element dtype of the fabric and the ISA.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    I64,
    F16,
    Bf16,
    F32,
}

/// `(dtype, ISA code, name, from the seed?)`: the one table of dtype codes.
pub const DTYPE_TABLE: [(Dtype, u8, &str, bool); 10] = [
    (Dtype::I8, 0x2, "i8", false),
    (Dtype::U8, 0x3, "u8", true),
    (Dtype::I16, 0x4, "i16", false),
    (Dtype::U16, 0x5, "u16", true),
    (Dtype::Bf16, 0x6, "bf16", false),
    (Dtype::F16, 0x7, "f16", false),
    (Dtype::I32, 0x8, "i32", false),
    (Dtype::U32, 0x9, "u32", true),
    (Dtype::F32, 0xa, "f32", false),
    (Dtype::I64, 0xb, "i64", false),
];

impl Dtype {
    /// The widest element, in bytes (I64).
    pub const MAX_SIZE: usize = 8;

    /// Every dtype, in code order.
    pub const ALL: [Dtype; 10] = [
        Dtype::I8,
        Dtype::U8,
        Dtype::I16,
        Dtype::U16,
        Dtype::Bf16,
        Dtype::F16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::I64,
    ];

    fn row(self) -> (Dtype, u8, &'static str, bool) {
        // Every variant has exactly one row; the test `table_is_complete` pins it.
        DTYPE_TABLE
            .into_iter()
            .find(|r| r.0 == self)
            .unwrap_or((self, 0, "?", false))
    }

    /// The ISA dtype code.
    pub fn code(self) -> u8 {
        self.row().1
    }

    /// The numpy-style name (`f32`, `bf16`, ...).
    pub fn name(self) -> &'static str {
        self.row().2
    }

    /// Decodes an ISA dtype code.
    pub fn from_code(code: u8) -> Result<Dtype, Error> {
        DTYPE_TABLE
            .into_iter()
            .find(|r| r.1 == code)
            .map(|r| r.0)
            .ok_or(Error::UnknownDtypeCode { code })
    }

    /// Parses a numpy-style name.
    pub fn from_name(name: &str) -> Result<Dtype, Error> {
        DTYPE_TABLE
            .into_iter()
            .find(|r| r.2 == name)
            .map(|r| r.0)
            .ok_or_else(|| Error::UnknownDtypeName {
                name: name.to_string(),
            })
    }

    /// Bytes per element.
    #[inline]
    pub fn size(self) -> usize {
        match self {
            Dtype::U8 | Dtype::I8 => 1,
            Dtype::U16 | Dtype::I16 | Dtype::F16 | Dtype::Bf16 => 2,
            Dtype::U32 | Dtype::I32 | Dtype::F32 => 4,
            Dtype::I64 => 8,
        }
    }

    /// Whether the dtype is a floating-point type.
    pub fn is_float(self) -> bool {
        matches!(self, Dtype::F16 | Dtype::Bf16 | Dtype::F32)
    }
}

impl std::fmt::Display for Dtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_complete() {
        for d in Dtype::ALL {
            assert_eq!(DTYPE_TABLE.iter().filter(|r| r.0 == d).count(), 1, "{d:?}");
            assert_eq!(Dtype::from_code(d.code()).unwrap(), d);
            assert_eq!(Dtype::from_name(d.name()).unwrap(), d);
        }
    }

    #[test]
    fn seed_codes_are_the_seeds() {
        assert_eq!(Dtype::U8.code(), 0x3);
        assert_eq!(Dtype::U16.code(), 0x5);
        assert_eq!(Dtype::U32.code(), 0x9);
        let seeded: Vec<Dtype> = DTYPE_TABLE.iter().filter(|r| r.3).map(|r| r.0).collect();
        assert_eq!(seeded, vec![Dtype::U8, Dtype::U16, Dtype::U32]);
    }

    #[test]
    fn unknown_codes_and_names_are_rejected() {
        for code in [0u8, 1, 0xc, 0xff] {
            let e = Dtype::from_code(code).unwrap_err().to_string();
            assert!(e.contains(&format!("{code:#x}")), "{e}");
        }
        assert!(Dtype::from_name("f64")
            .unwrap_err()
            .to_string()
            .contains("f64"));
    }

    #[test]
    fn sizes() {
        let s: Vec<usize> = Dtype::ALL.iter().map(|d| d.size()).collect();
        assert_eq!(s, vec![1, 1, 2, 2, 2, 2, 4, 4, 4, 8]);
        assert_eq!(s.iter().max(), Some(&Dtype::MAX_SIZE));
    }
}
