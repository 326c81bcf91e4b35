//! The six 64-byte operand structs, one file each, and the trait that decode uses to
//! read any of them.

mod direct2d;
mod dma_indirect;
mod embedding;
mod gather;
mod indirect_copy;
mod pool_buffer_load;

pub use direct2d::{Direct2dSide, DmaDirect2d};
pub use dma_indirect::{DmaIndirect1d, DmaSide, IndirectWalk};
pub use embedding::{EmbeddingTable, PseudoEmbeddingUpdate};
pub use gather::S4d4Gt;
pub use indirect_copy::S4d4Ic;
pub use pool_buffer_load::PoolBufferLoad;

use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

use super::opcode::Opcode;
use super::rule::FieldPath;
use crate::error::Error;

/// A 64-byte operand struct bound to one opcode.
pub(crate) trait Operand: FromBytes + IntoBytes + KnownLayout + Immutable + Copy {
    /// The opcode struct2opcode binds the struct to.
    const OPCODE: Opcode;
    /// The struct name in the seed's spelling (`S4D4_GT`).
    const NAME: &'static str;

    /// Names one of this struct's fields in errors.
    fn at(field: &'static str) -> FieldPath {
        FieldPath::new(Self::NAME, field)
    }

    /// The decode rules that need no generation: codes, booleans, reserved bytes, flags.
    fn check_decode(&self) -> Result<(), Error>;

    /// Reads one struct from exactly 64 bytes and applies the decode rules.
    fn decode_from(bytes: &[u8]) -> Result<Self, Error> {
        let s = Self::read_from_bytes(bytes)
            .map_err(|_| Error::InstructionLength { len: bytes.len() })?;
        s.check_decode()?;
        Ok(s)
    }

    /// The struct's 64 bytes.
    fn encode(&self) -> [u8; 64] {
        const { assert!(size_of::<Self>() == 64) };
        let mut out = [0u8; 64];
        // The assertion above proves the lengths match at compile time.
        out.copy_from_slice(self.as_bytes());
        out
    }
}
