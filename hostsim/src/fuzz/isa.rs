//! The `isa` target: random 64-byte structs through the decoder and every generation's
//! validity check. Nothing may panic, and a struct that decodes must re-encode to exactly
//! the bytes it came from (reserved bytes are zero on decode, so there is no don't-care
//! bit to lose).
//!
//! Inputs are a third valid instructions from the `oob` generators with a few bytes
//! mutated, a third a known opcode byte over random bytes (mostly zero, as reserved
//! bytes are), a third wholly random bytes.

use std::panic::{catch_unwind, AssertUnwindSafe};

use dma::Generation;

use crate::fuzz::oob;
use crate::fuzz::rng::Rng;
use crate::fuzz::routes::panic_message;
use crate::isa::{self, INSTRUCTION_BYTES, OPCODE_TABLE};

/// The 64 bytes of one `isa` case.
pub fn case(mut rng: Rng) -> [u8; INSTRUCTION_BYTES] {
    let mut bytes = [0u8; INSTRUCTION_BYTES];
    match rng.below(3) {
        0 => {
            let case = oob::case(rng.clone(), None);
            let stream: Vec<_> = case.instructions().collect();
            if let Some(inst) = stream.get(rng.below(stream.len() as u64) as usize) {
                bytes = inst.encode();
            }
            for _ in 0..rng.below(4) {
                let at = rng.below(INSTRUCTION_BYTES as u64) as usize;
                bytes[at % INSTRUCTION_BYTES] ^= 1 << rng.below(8);
            }
        }
        1 => {
            for b in bytes.iter_mut() {
                *b = if rng.chance(70) {
                    0
                } else {
                    rng.next_u32() as u8
                };
            }
            bytes[0] = rng.pick(&OPCODE_TABLE).code;
        }
        _ => bytes.copy_from_slice(&rng.bytes(INSTRUCTION_BYTES)),
    }
    bytes
}

/// Decodes `bytes`, validates the result for every generation and re-encodes it.
/// `Ok(valid)`: whether it decoded; `Err`: a panic or a changed re-encoding.
pub fn check(bytes: &[u8]) -> Result<bool, String> {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let Ok(inst) = isa::decode(bytes) else {
            return Ok(false);
        };
        for g in Generation::ALL {
            // Validity may go either way; it must only answer.
            let _ = inst.validate(g);
        }
        match inst.encode() == bytes {
            true => Ok(true),
            false => Err(format!(
                "decoded {:#04x} re-encodes differently: {}",
                inst.opcode().code(),
                hex(&inst.encode())
            )),
        }
    }));
    outcome.unwrap_or_else(|p| Err(format!("panicked: {}", panic_message(p.as_ref()))))
}

/// Lower-case hex, two digits a byte.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_structs_round_trip_and_garbage_is_rejected() {
        let inst = (3..)
            .find_map(|seed| {
                oob::case(Rng::new(seed), None)
                    .instructions()
                    .next()
                    .copied()
            })
            .unwrap();
        assert_eq!(check(&inst.encode()), Ok(true));
        assert_eq!(check(&[0xff; 64]), Ok(false));
        assert_eq!(check(&[0x68; 63]), Ok(false));
        assert_eq!(check(&[]), Ok(false));
        assert_eq!(hex(&[0, 0xab]), "00ab");
    }

    #[test]
    fn cases_are_deterministic_and_some_decode() {
        assert_eq!(case(Rng::new(9)), case(Rng::new(9)));
        let decoded = (0..300)
            .filter(|s| check(&case(Rng::new(*s))) == Ok(true))
            .count();
        assert!((30..300).contains(&decoded), "{decoded} of 300 decoded");
    }
}
